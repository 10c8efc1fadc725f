/**
 * `baton --server URL` at a server that is not Baton (a web server, a dev server on the port): one line saying the
 * server at URL did not answer as a Baton server, with the status and content type it answered and what to check.
 * Found by a newcomer's walk (b46ux): it printed "answered 501 unexpectedly: Decode error (…)" for `compact`, "Could
 * not parse JSON" for `threads` and the page's first line ("404 <!DOCTYPE HTML>") for `events`.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Http from "node:http"
import { runBaton } from "./support/CliEntry.js"

/** A web server as Python's `http.server` answers: 200 HTML for GET /threads, 404 HTML for other GETs, 501 for a POST. */
const webServer = Effect.acquireRelease(
  Effect.async<Http.Server>((resume) => {
    const server = Http.createServer((req, res) => {
      const status = req.method !== "GET" ? 501 : req.url?.startsWith("/threads?") || req.url === "/threads" ? 200 : 404
      res.writeHead(status, { "content-type": "text/html;charset=utf-8" })
      res.end("<!DOCTYPE HTML>\n<html><body>not here</body></html>\n")
    })
    server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
  }),
  (server) => Effect.sync(() => void server.close())
)

describe("baton --server URL at a server that is not Baton", () => {
  it.live("says the server did not answer as a Baton server (status, content type) and what to check, exit 2", () =>
    Effect.gen(function*() {
      const server = yield* webServer
      const url = `http://127.0.0.1:${(server.address() as { readonly port: number }).port}`
      const [threads, compact, events] = yield* Effect.promise(() =>
        Promise.all([
          runBaton(["--server", url, "threads"]),
          runBaton(["--server", url, "compact", "thr_x", "--json"]),
          runBaton(["--server", url, "events"])
        ])
      )
      const line = (status: number, request: string) =>
        `the server at ${url} did not answer as a Baton server (HTTP ${status}, text/html, to ${request}); ` +
        "check that --server (or BATON_SERVER) is the URL `baton serve` printed (\"listening on …\")"
      expect(threads).toEqual({ code: 2, stdout: "", stderr: `baton: ${line(200, "GET /threads")}\n` })
      expect(compact).toEqual({
        code: 2,
        stdout: `${JSON.stringify({ error: { code: "bad_input", message: line(501, "POST /threads/thr_x/compact") } })}\n`,
        stderr: `baton: ${line(501, "POST /threads/thr_x/compact")}\n`
      })
      expect(events).toEqual({ code: 2, stdout: "", stderr: `baton: ${line(404, "GET /events")}\n` })
    }).pipe(Effect.scoped), 60_000)
})

describe("baton --server with what is not an http(s) URL", () => {
  // Found by a newcomer's walk (b46ux): `localhost:8787` parses as a URL of the scheme `localhost:`, and was told
  // "cannot reach the Baton server at localhost:8787 (Invalid URL); start it with `baton serve`".
  it("says so in one line, whatever the parser makes of it (no scheme, another scheme), exit 2", async () => {
    const results = await Promise.all(["localhost:8787", "127.0.0.1:8787", "ftp://127.0.0.1:8787"].map((url) => runBaton(["--server", url, "threads"])))
    expect(results).toEqual(["localhost:8787", "127.0.0.1:8787", "ftp://127.0.0.1:8787"].map((url) => ({
      code: 2,
      stdout: "",
      stderr: `baton: --server ${url} is not an http:// or https:// URL (e.g. http://127.0.0.1:8787)\n`
    })))
  }, 60_000)
})
