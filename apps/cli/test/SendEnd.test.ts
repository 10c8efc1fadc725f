/**
 * `baton --server URL send` at the edges of a run: the server stopping right after the run's end event reached the
 * CLI (the reply can no longer be read: the run's outcome is still the exit code, never 2), and Ctrl-C (SIGINT) while
 * the message is posted or the run goes on (one line saying what became of the run, exit 130).
 *
 * The server is a loopback stand-in speaking the API's wire format (as in StreamCut.test), so each edge is exact:
 * `stopAfterEnd` sends the run's events through its end, then stops listening and drops every connection, as a
 * `baton serve` stopped (SIGTERM) right then does; `hold` sends the run's start and keeps the stream open;
 * `silentPost` never answers the message's POST (or the tool results' POST); `hold` also leaves `GET /runs/{id}` unanswered.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect } from "effect"
import { spawn } from "node:child_process"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { fileURLToPath } from "node:url"
import { batonArgs, runBaton } from "./support/CliEntry.js"
import { eventsOf, lines, sse, type WireEvent } from "./support/WireEvents.js"

const repo = fileURLToPath(new URL("../../../", import.meta.url))
const token = "admin-token-0123456789abcdef"
const threadId = "thr_end"
const runId = "run_end"
const event = eventsOf(threadId)

const started = [
  event(1, "thread.created", { title: "end" }),
  event(2, "run.queued", { runId, seq: 1, providerThreadId: "pth_end" }),
  event(3, "run.started", { runId, nativeThreadId: "nat_end", attempt: 1 })
]
const completed = event(4, "run.completed", { runId, itemCount: 1 })
const failed = event(4, "run.failed", { runId, stopPoint: "after_provider", reason: "the provider went away", code: "provider_interrupted" })

type Mode =
  | { readonly _tag: "stopAfterEnd"; readonly end: WireEvent }
  | { readonly _tag: "hold" }
  | { readonly _tag: "silentPost" }

/**
 * The stand-in server in `mode`. `streaming` is completed once an event stream has been sent the run's start (or, for
 * `silentPost`, once the POST arrived): the moment to signal the CLI.
 */
const standIn = (mode: Mode) =>
  Effect.gen(function*() {
    const streaming = yield* Deferred.make<void>()
    const server = yield* Effect.acquireRelease(
      Effect.async<Http.Server>((resume) => {
        const server = Http.createServer((req, res) => {
          const path = (req.url ?? "").split("?")[0]
          if (req.method === "POST" && path === `/threads/${threadId}/messages`) {
            req.resume()
            if (mode._tag === "silentPost") return Deferred.unsafeDone(streaming, Effect.void)
            res.writeHead(202, { "content-type": "application/json" })
            return res.end(JSON.stringify({ runId, threadId, runSeq: 1, status: "starting" }))
          }
          if (req.method === "POST" && path === `/threads/${threadId}/runs/${runId}/tool-results`) {
            req.resume()
            if (mode._tag === "silentPost") return Deferred.unsafeDone(streaming, Effect.void)
            res.writeHead(202, { "content-type": "application/json" })
            return res.end(JSON.stringify({ runId, threadId, runSeq: 1, status: "running" }))
          }
          // `tool-results` then reads the run until it settles: held unanswered, the run going on.
          if (req.method === "GET" && path === `/runs/${runId}` && mode._tag === "hold") return Deferred.unsafeDone(streaming, Effect.void)
          if (req.method === "GET" && path === `/threads/${threadId}/events`) {
            res.writeHead(200, { "content-type": "text/event-stream" })
            res.write(started.map(sse).join(""))
            if (mode._tag === "hold") return Deferred.unsafeDone(streaming, Effect.void)
            if (mode._tag === "stopAfterEnd") {
              // The end event, then the process is gone: nothing listens, every connection dropped.
              res.write(sse(mode.end))
              server.close()
              return setTimeout(() => server.closeAllConnections(), 20)
            }
          }
          res.writeHead(404, { "content-type": "application/json" })
          res.end(JSON.stringify({ _tag: "RouteNotFound", message: "no such route" }))
        })
        server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
      }),
      (server) => Effect.sync(() => {
        server.closeAllConnections()
        server.close()
      })
    )
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, streaming }
  })

/** `baton ARGS` as a process, sent `signal` once `ready` completes; its exit code and output. */
const signalled = (args: ReadonlyArray<string>, ready: Deferred.Deferred<void>, signal: NodeJS.Signals) =>
  Effect.gen(function*() {
    const child = spawn(process.execPath, batonArgs(args), {
      cwd: repo,
      env: { ...process.env, BATON_SERVER: "", BATON_TOKEN: "", BATON_DATA_DIR: "" },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk: Buffer) => void (stdout += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => void (stderr += chunk.toString()))
    const exited = Effect.async<number>((resume) => void child.on("exit", (code) => resume(Effect.succeed(code ?? -1))))
    yield* Deferred.await(ready)
    // The stand-in has answered; give the CLI a moment to read what it was sent (its events printed).
    yield* Effect.sleep("300 millis")
    child.kill(signal)
    const code = yield* exited
    return { code, stdout, stderr }
  })

describe("baton --server URL send: the run's end and Ctrl-C", () => {
  // Found by a user: `baton serve` stopped (SIGTERM) right after the run completed made `send` exit 2 ("cannot
  // reach") after it had printed run.completed: the reply's read raced the server's stop.
  it.live("the server stops right after run.completed: the run's end printed, why the reply is missing on stderr, exit 0", () =>
    Effect.gen(function*() {
      const { url } = yield* standIn({ _tag: "stopAfterEnd", end: completed })
      const sent = yield* Effect.promise(() => runBaton(["--server", url, "--token", token, "send", threadId, "hello"]))
      expect(sent.stdout.trimEnd().split("\n")).toEqual([`sent: run 1 ${runId} starting`, ...lines([...started.slice(1), completed]), "run 1 completed"])
      expect(sent.stderr).toMatch(new RegExp(
        `^baton: run 1 completed, but its reply could not be read \\(cannot reach the Baton server at ${url} [^\n]*\\); ` +
          `see it with \`baton --server ${url} thread show ${threadId}\`\n$`
      ))
      expect(sent.code).toBe(0)
    }).pipe(Effect.scoped), 60_000)

  it.live("the server stops right after run.failed: exit 1, the run's code, not 2", () =>
    Effect.gen(function*() {
      const { url } = yield* standIn({ _tag: "stopAfterEnd", end: failed })
      const sent = yield* Effect.promise(() => runBaton(["--server", url, "--token", token, "send", threadId, "hello"]))
      expect(sent.stdout.trimEnd().split("\n").at(-1)).toBe("run 1 failed")
      expect(sent.stderr).toMatch(/^baton: run 1 failed, but its reply could not be read \(/)
      expect(sent.code).toBe(1)
    }).pipe(Effect.scoped), 60_000)

  // Found by a user: Ctrl-C during `send` exited 130 without a word, leaving them to guess whether the run stopped.
  it.live("Ctrl-C while the run goes on: one line saying it goes on on the server and how to see it, exit 130", () =>
    Effect.gen(function*() {
      const { streaming, url } = yield* standIn({ _tag: "hold" })
      const sent = yield* signalled(["--server", url, "--token", token, "send", threadId, "hello"], streaming, "SIGINT")
      expect(sent.stdout.trimEnd().split("\n")).toEqual([`sent: run 1 ${runId} starting`, ...lines(started.slice(1))])
      expect(sent.stderr).toBe(
        `baton: interrupted: run 1 ${runId} goes on on the server (Ctrl-C stops only this command); ` +
          `see it with \`baton --server ${url} thread show ${threadId}\`\n`
      )
      expect(sent.code).toBe(130)
    }).pipe(Effect.scoped), 60_000)

  it.live("Ctrl-C before the server answered the message: one line saying it may have been queued, exit 130", () =>
    Effect.gen(function*() {
      const { streaming, url } = yield* standIn({ _tag: "silentPost" })
      const sent = yield* signalled(["--server", url, "--token", token, "send", threadId, "hello"], streaming, "SIGINT")
      expect(sent.stdout).toBe("")
      expect(sent.stderr).toBe(
        `baton: interrupted before the server answered: the message may have been queued; see with \`baton --server ${url} thread show ${threadId}\`\n`
      )
      expect(sent.code).toBe(130)
    }).pipe(Effect.scoped), 60_000)

  // Found in review: `tool-results`, which also waits on the run, exited 130 on Ctrl-C without a word.
  const results = JSON.stringify([{ toolCallId: "call_1", output: "42" }])
  it.live("tool-results, Ctrl-C while the run goes on: one line saying it goes on on the server with the results, exit 130", () =>
    Effect.gen(function*() {
      const { streaming, url } = yield* standIn({ _tag: "hold" })
      const sent = yield* signalled(["--server", url, "--token", token, "tool-results", threadId, runId, "--results", results], streaming, "SIGINT")
      expect(sent.stdout).toBe(`posted: 1 result(s) for run 1 ${runId}\n`)
      expect(sent.stderr).toBe(
        `baton: interrupted: run 1 ${runId} goes on on the server with the results (Ctrl-C stops only this command); ` +
          `see it with \`baton --server ${url} thread show ${threadId}\`\n`
      )
      expect(sent.code).toBe(130)
    }).pipe(Effect.scoped), 60_000)

  it.live("tool-results, Ctrl-C before the server answered: one line saying the results may have been recorded, exit 130", () =>
    Effect.gen(function*() {
      const { streaming, url } = yield* standIn({ _tag: "silentPost" })
      const sent = yield* signalled(["--server", url, "--token", token, "tool-results", threadId, runId, "--results", results], streaming, "SIGINT")
      expect(sent.stdout).toBe("")
      expect(sent.stderr).toBe(
        `baton: interrupted before the server answered: the results for run ${runId} may have been recorded; ` +
          `see with \`baton --server ${url} thread show ${threadId}\`\n`
      )
      expect(sent.code).toBe(130)
    }).pipe(Effect.scoped), 60_000)

  // Issue 15: `--json` prints JSON on stdout whatever the outcome; a Ctrl-C printed none (send's event lines ended
  // without a word, tool-results printed nothing at all).
  it.live("with --json, Ctrl-C ends stdout with a JSON document saying so: send's last line, tool-results' only document", () =>
    Effect.gen(function*() {
      const interrupted = (runIdOf: string | null, message: string) => JSON.stringify({ interrupted: { signal: "SIGINT", message, runId: runIdOf } })
      const going = yield* standIn({ _tag: "hold" })
      const sent = yield* signalled(["--server", going.url, "--token", token, "send", threadId, "hello", "--json"], going.streaming, "SIGINT")
      const sentLines = sent.stdout.trimEnd().split("\n")
      expect(sentLines.at(-1)).toBe(interrupted(
        runId,
        `interrupted: run 1 ${runId} goes on on the server (Ctrl-C stops only this command); see it with \`baton --server ${going.url} thread show ${threadId}\``
      ))
      // Every line before it is one of the run's events, as JSON.
      expect(sentLines.slice(0, -1).map((l) => (JSON.parse(l) as { type: string }).type)).toEqual(started.slice(1).map((e) => e.type))
      expect(sent.code).toBe(130)

      const silent = yield* standIn({ _tag: "silentPost" })
      const early = yield* signalled(["--server", silent.url, "--token", token, "send", threadId, "hello", "--json"], silent.streaming, "SIGINT")
      expect(early.stdout).toBe(`${interrupted(null, `interrupted before the server answered: the message may have been queued; see with \`baton --server ${silent.url} thread show ${threadId}\``)}\n`)
      expect(early.code).toBe(130)

      const held = yield* standIn({ _tag: "hold" })
      const posted = yield* signalled(["--server", held.url, "--token", token, "tool-results", threadId, runId, "--results", results, "--json"], held.streaming, "SIGINT")
      expect(posted.stdout).toBe(`${interrupted(runId, `interrupted: run 1 ${runId} goes on on the server with the results (Ctrl-C stops only this command); see it with \`baton --server ${held.url} thread show ${threadId}\``)}\n`)
      expect(posted.code).toBe(130)
    }).pipe(Effect.scoped), 90_000)
})
