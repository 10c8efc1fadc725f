/**
 * Ctrl-C (SIGINT) under `--json`: every command prints the one interrupted document `--json` promises, of one shape
 * (`{"interrupted":{"signal","message",...progress}}`, `message` the stderr line without `baton: `), and exits 130.
 * Found at an earlier stop: `compact`, `offload`, `offload-control` and `events --follow` printed nothing on stdout.
 *
 * The server is a loopback stand-in (as in SendEnd.test) that never answers a request, except the thread's event
 * stream, which it sends three events and then holds open: the command is waiting on the server when it is signalled.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect } from "effect"
import { spawn } from "node:child_process"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { fileURLToPath } from "node:url"
import { batonArgs } from "./support/CliEntry.js"
import { eventsOf, sse } from "./support/WireEvents.js"

const repo = fileURLToPath(new URL("../../../", import.meta.url))
const token = "admin-token-0123456789abcdef"
const threadId = "thr_stop"
const event = eventsOf(threadId)
const logged = [
  event(1, "thread.created", { title: "stop" }),
  event(2, "run.queued", { runId: "run_stop", seq: 1, providerThreadId: "pth_stop" }),
  event(3, "run.started", { runId: "run_stop", nativeThreadId: "nat_stop", attempt: 1 })
]

/** The stand-in: `waiting` completes once a request arrived (and, for the event stream, its three events were sent). */
const holding = Effect.gen(function*() {
  const waiting = yield* Deferred.make<void>()
  const server = yield* Effect.acquireRelease(
    Effect.async<Http.Server>((resume) => {
      const server = Http.createServer((req, res) => {
        req.resume()
        if (req.method === "GET" && (req.url ?? "").startsWith(`/threads/${threadId}/events`)) {
          res.writeHead(200, { "content-type": "text/event-stream" })
          res.write(logged.map(sse).join(""))
        }
        Deferred.unsafeDone(waiting, Effect.void)
      })
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
    }),
    (server) => Effect.sync(() => {
      server.closeAllConnections()
      server.close()
    })
  )
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, waiting }
})

/** `baton ARGS` against the stand-in, sent SIGINT once it waits on the server; its exit code and output. */
const interrupted = (args: (url: string) => ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const { url, waiting } = yield* holding
    const child = spawn(process.execPath, batonArgs(["--server", url, "--token", token, ...args(url)]), {
      cwd: repo,
      env: { ...process.env, BATON_SERVER: "", BATON_TOKEN: "", BATON_DATA_DIR: "" },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk: Buffer) => void (stdout += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => void (stderr += chunk.toString()))
    const exited = Effect.async<number>((resume) => void child.on("exit", (code) => resume(Effect.succeed(code ?? -1))))
    yield* Deferred.await(waiting)
    // The request has arrived; give the CLI a moment to print what it was sent (the events).
    yield* Effect.sleep("300 millis")
    child.kill("SIGINT")
    const code = yield* exited
    return { url, code, stdout, stderr }
  }).pipe(Effect.scoped)

const document = (message: string, progress: Record<string, unknown> = {}) =>
  `${JSON.stringify({ interrupted: { signal: "SIGINT", message, ...progress } })}\n`

describe("--json commands stopped by Ctrl-C print the one interrupted document", () => {
  it.live("compact: the request may have run on the server", () =>
    Effect.gen(function*() {
      const r = yield* interrupted(() => ["compact", threadId, "--json"])
      const message = `interrupted before the server answered: /compact may have run on the server; ` +
        `see with \`baton --server ${r.url} thread show ${threadId}\``
      expect(r).toEqual({ url: r.url, code: 130, stdout: document(message), stderr: `baton: ${message}\n` })
    }), 60_000)

  it.live("offload (with an operation id): it may have started, and how to read its outcome", () =>
    Effect.gen(function*() {
      const r = yield* interrupted(() => ["offload", threadId, "--operation-id", "op_1", "--json"])
      const message = `interrupted before the server answered: /offload may have started (its outcome: ` +
        `\`baton --server ${r.url} offload ${threadId} --get op_1\`) on the server; see with \`baton --server ${r.url} thread show ${threadId}\``
      expect(r).toEqual({ url: r.url, code: 130, stdout: document(message), stderr: `baton: ${message}\n` })
    }), 60_000)

  it.live("offload --preview and offload-control without changes: nothing was changed", () =>
    Effect.gen(function*() {
      const message = "interrupted before the server answered; nothing was changed"
      for (const args of [["offload", threadId, "--preview", "--json"], ["offload-control", threadId, "--json"]]) {
        const r = yield* interrupted(() => args)
        expect(r).toEqual({ url: r.url, code: 130, stdout: document(message), stderr: `baton: ${message}\n` })
      }
    }), 60_000)

  it.live("events --follow: the events as JSON lines, then the document with how many were printed", () =>
    Effect.gen(function*() {
      const r = yield* interrupted(() => ["events", "--thread", threadId, "--follow", "--json"])
      const lines = r.stdout.trimEnd().split("\n")
      expect(lines.slice(0, -1).map((l) => (JSON.parse(l) as { type: string }).type)).toEqual(logged.map((e) => e.type))
      expect(`${lines.at(-1)}\n`).toBe(document("interrupted after 3 events", { events: 3 }))
      expect(r.stderr).toBe("baton: interrupted after 3 events\n")
      expect(r.code).toBe(130)
    }), 60_000)
})
