/**
 * Ids the user types into `baton --server URL` commands are one path segment of the request, whatever they hold:
 * the typed client (`HttpApiClient`) joins path parameters into the URL as given, so before `thread show ../threads`
 * asked `GET /threads` (the thread list), `send 'x/../thr_B' hi` posted to thread `thr_B`, and `handoffs '?limit=1'`
 * read the snapshot of no thread at all; a list decoded as a snapshot was then reported as a 5 KB line of schema.
 * The stand-in server records each request's path as it arrives and answers 404 `ThreadNotFound` (or, at
 * `GET /threads`, a thread list: what the unencoded `../threads` reached; with `listEverywhere`, at every path).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { runBaton } from "./support/CliEntry.js"

const token = "admin-token-0123456789abcdef"

const standIn = (listEverywhere = false) => Effect.acquireRelease(
  Effect.async<{ readonly url: string; readonly paths: Array<string>; readonly server: Http.Server }>((resume) => {
    const paths: Array<string> = []
    const server = Http.createServer((req, res) => {
      req.resume()
      paths.push(`${req.method} ${req.url}`)
      const list = listEverywhere || req.url === "/threads"
      res.writeHead(list ? 200 : 404, { "content-type": "application/json" })
      if (list) return res.end(JSON.stringify({ threads: [], nextCursor: null }))
      const threadId = decodeURIComponent((req.url ?? "").split("/")[2] ?? "")
      res.end(JSON.stringify({ _tag: "ThreadNotFound", threadId, message: `thread ${threadId} not found` }))
    })
    server.listen(0, "127.0.0.1", () => resume(Effect.succeed({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, paths, server })))
  }),
  ({ server }) => Effect.promise(() => new Promise<void>((done) => server.close(() => done())))
)

const baton = (args: ReadonlyArray<string>) => Effect.promise(() => runBaton(args))

describe("ids typed into the CLI's client commands", () => {
  it.live("each is one percent-encoded path segment: never another endpoint or another thread", () =>
    Effect.gen(function*() {
      const { paths, url } = yield* standIn()
      const admin = ["--server", url, "--token", token]
      const cases = [
        { args: ["thread", "show", "../threads"], id: "../threads", path: "GET /threads/..%2Fthreads" },
        { args: ["send", "x/../thr_B", "hi"], id: "x/../thr_B", path: "POST /threads/x%2F..%2Fthr_B/messages" },
        { args: ["handoffs", "?limit=1"], id: "?limit=1", path: "GET /threads/%3Flimit%3D1" },
        { args: ["switch", "a#b", "codex"], id: "a#b", path: "POST /threads/a%23b/switch" },
        { args: ["compact", "50%"], id: "50%", path: "POST /threads/50%25/compact" }
      ]
      for (const c of cases) {
        paths.length = 0
        const result = yield* baton([...admin, ...c.args])
        expect(result).toEqual({ code: 2, stdout: "", stderr: `baton: thread ${c.id} not found (list threads with \`baton --server ${url} threads\`)\n` })
        expect(paths).toEqual([c.path])
      }
    }).pipe(Effect.scoped), 120_000)

  it.live("an answer that is not the API's is one short line naming what did not match, not the schema", () =>
    Effect.gen(function*() {
      // A server answering every request with a thread list: `thread show` decodes it as a snapshot.
      const { url } = yield* standIn(true)
      const result = yield* baton(["--server", url, "--token", token, "thread", "show", "thr_A"])
      expect([result.code, result.stdout]).toEqual([2, ""])
      // Before: the whole declaration of the snapshot's schema, 5 KB on one line.
      expect(result.stderr).toMatch(/^baton: the server at \S+ answered something that is not Baton's API: [^\n]{1,300}\n$/)
      expect(result.stderr).toContain("thread")
    }).pipe(Effect.scoped), 120_000)
})
