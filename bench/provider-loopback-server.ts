/**
 * The model API the provider-request benchmark talks to, in a process of its own (so its CPU time is not counted as
 * Baton's): a node HTTP server on 127.0.0.1 answering every POST with a recorded fixture of
 * `../shared/provider-fixtures/`. The request path says which: `/<kind>/<mode>/...` with kind `anthropic-messages`,
 * `openai-responses` or `openai-chat`, and mode `fast` (the whole answer at once) or `first` (the head, a 25 ms
 * pause, then the first text delta with its text replaced by the wall-clock time it was written, in milliseconds
 * since the epoch, then the rest). Prints the port on its first line of stdout.
 */
import * as Fs from "node:fs"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Path from "node:path"
import { performance } from "node:perf_hooks"

const fixtures = Path.resolve(import.meta.dirname, "../../shared/provider-fixtures")
const lines = (file: string) => Fs.readFileSync(Path.join(fixtures, file), "utf8").split("\n").filter((l) => l.trim() !== "")
const typeOf = (line: string) => /"type":"([^"]+)"/.exec(line)?.[1] ?? "message"
const sse = (ls: ReadonlyArray<string>) => ls.map((l) => `event: ${typeOf(l)}\ndata: ${l}\n\n`)
const responses = lines("openai-responses/openai-reasoning-encrypted-content.1.chunks.txt")
const frames: Record<string, ReadonlyArray<string>> = {
  "anthropic-messages": sse(lines("anthropic/anthropic-text.chunks.txt")),
  // The last of the four responses recorded back to back: the final text answer.
  "openai-responses": sse(responses.slice(responses.map(typeOf).lastIndexOf("response.created"))),
  "openai-chat": [...lines("openai-chat/openai-text.chunks.txt").map((l) => `data: ${l}\n\n`), "data: [DONE]\n\n"]
}
/** Index of the first frame carrying text, and the text it carries. */
const firstText: Record<string, { readonly at: number; readonly text: string }> = {
  "anthropic-messages": { at: 3, text: `"text":"Hello"` },
  "openai-responses": { at: frames["openai-responses"]!.findIndex((f) => f.startsWith("event: response.output_text.delta")), text: `"delta":"The"` },
  "openai-chat": { at: 1, text: `"content":"**"` }
}

const server = Http.createServer((req, res) => {
  req.resume()
  req.on("end", () => {
    const [, kind = "", mode = ""] = (req.url ?? "").split("/")
    const f = frames[kind]
    if (f === undefined) {
      res.writeHead(404).end()
      return
    }
    res.writeHead(200, { "content-type": "text/event-stream" })
    if (mode !== "first") {
      res.end(f.join(""))
      return
    }
    const { at, text } = firstText[kind]!
    res.write(f.slice(0, at).join(""))
    setTimeout(() => {
      const now = (performance.timeOrigin + performance.now()).toFixed(3)
      res.write(f[at]!.replace(text, text.replace(/:"[^"]*"/, `:"${now}"`)))
      setTimeout(() => res.end(f.slice(at + 1).join("")), 5)
    }, 25)
  })
})
server.listen(0, "127.0.0.1", () => console.log((server.address() as AddressInfo).port))
