/**
 * `baton --server URL send` and `events --follow` when the event stream's connection is cut after its 200 (the server
 * killed mid-run, a proxy dropping an idle connection): the CLI resumes the stream with `Last-Event-ID` after the
 * last event it printed, so every event is printed once and the run's reply still arrives; it never reports the cut
 * as "the server answered 200 unexpectedly: Decode error". A server that stays gone is "cannot reach" (exit 2).
 *
 * The server here is a loopback stand-in speaking the API's wire format: it cuts the first stream after a few events
 * (`socket.destroy()`, as a SIGKILLed process does) and answers the second from the cursor it is sent.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { runBaton } from "./support/CliEntry.js"
import { at, eventsOf, lines, sse } from "./support/WireEvents.js"

const token = "admin-token-0123456789abcdef"
const threadId = "thr_cut"
const runId = "run_cut"
const event = eventsOf(threadId)

const log = [
  event(1, "thread.created", { title: "cut" }),
  event(2, "run.queued", { runId, seq: 1, providerThreadId: "pth_cut" }),
  event(3, "run.started", { runId, nativeThreadId: "nat_cut", attempt: 1 }),
  event(4, "run.completed", { runId, itemCount: 1 })
]

const runView = {
  run: {
    id: runId,
    threadId,
    seq: 1,
    providerThreadId: "pth_cut",
    status: "completed",
    prompt: "hello",
    stopPoint: null,
    failureReason: null,
    failureCode: null,
    nativeThreadId: "nat_cut",
    createdAt: at,
    updatedAt: at
  },
  attempts: [],
  items: [{
    id: "itm_reply",
    threadId,
    runId,
    seq: 2,
    kind: "assistant_message",
    text: "the reply",
    toolCallId: null,
    toolName: null,
    messageId: null,
    isError: false,
    toolCallState: null,
    tokens: 3,
    createdAt: at
  }],
  cost: null,
  openToolCalls: [],
  toolResultsDeadline: null
}

/**
 * The stand-in server: the first event stream sends the events up to `cutAfter` and is destroyed; each later one
 * sends the events after its `Last-Event-ID` and ends. `staysGone`: the server stops listening as it cuts the stream.
 * `startingAnswers`: the first that many stream requests after the cut are answered as a restarted `baton serve`
 * answers before its API is attached (`503 ServerStarting`, `Retry-After: 1`). `stopping`: the first stream is not
 * cut but ended cleanly after a `server_stopping` event, as a `baton serve` whose shutdown has begun ends it.
 * `cursors` collects each stream request's `Last-Event-ID`.
 */
const standIn = (cutAfter: number, staysGone = false, startingAnswers = 0, stopping = false) =>
  Effect.acquireRelease(
    Effect.async<{ readonly url: string; readonly cursors: Array<string | undefined>; readonly server: Http.Server }>((resume) => {
      const cursors: Array<string | undefined> = []
      const server = Http.createServer((req, res) => {
        const path = (req.url ?? "").split("?")[0]
        if (req.method === "POST" && path === `/threads/${threadId}/messages`) {
          req.resume()
          res.writeHead(202, { "content-type": "application/json" })
          return res.end(JSON.stringify({ runId, threadId, runSeq: 1, status: "starting" }))
        }
        if (req.method === "GET" && path === `/runs/${runId}`) {
          res.writeHead(200, { "content-type": "application/json" })
          return res.end(JSON.stringify(runView))
        }
        if (req.method === "GET" && path === `/threads/${threadId}/events`) {
          const cursor = req.headers["last-event-id"] as string | undefined
          cursors.push(cursor)
          if (cursors.length > 1 && cursors.length <= 1 + startingAnswers) {
            res.writeHead(503, { "content-type": "application/json", "retry-after": "1" })
            return res.end(JSON.stringify({ _tag: "ServerStarting", message: "the server is starting; retry in a moment" }))
          }
          res.writeHead(200, { "content-type": "text/event-stream" })
          res.write(": heartbeat\n\n")
          if (cursors.length === 1 && stopping) {
            // A stopping `baton serve`: the events so far, its `server_stopping` word, and a clean end.
            return res.end(log.filter((e) => e.seq <= cutAfter).map(sse).join("") +
              `event: server_stopping\ndata: {"message":"the server is stopping: reconnect with Last-Event-ID (the last id received)"}\n\n`)
          }
          if (cursors.length === 1) {
            res.write(log.filter((e) => e.seq <= cutAfter).map(sse).join(""))
            // Half of the next event, then the connection dies (SIGKILL): no end of the chunked body.
            res.write(sse(log[cutAfter]!).slice(0, 40))
            return setTimeout(() => {
              if (staysGone) server.close()
              req.socket.destroy()
            }, 50)
          }
          return res.end(log.filter((e) => e.seq > Number(cursor ?? 0)).map(sse).join(""))
        }
        res.writeHead(404, { "content-type": "application/json" })
        res.end(JSON.stringify({ _tag: "RouteNotFound", message: "no such route" }))
      })
      server.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, cursors, server })))
    }),
    ({ server }) => Effect.promise(() => new Promise<void>((done) => server.listening ? server.close(() => done()) : done()))
  )

const baton = (args: ReadonlyArray<string>) => Effect.promise(() => runBaton(args))

/**
 * `events --follow` on the stand-in `server`: prints every event of the log once and exits 0, the
 * stand-in sent `cursors` as the streams' `Last-Event-ID`s.
 */
const followsWholeLog = (server: ReturnType<typeof standIn>, cursors: ReadonlyArray<string | undefined>) =>
  Effect.gen(function*() {
    const stand = yield* server
    const followed = yield* baton(["--server", stand.url, "--token", token, "events", "--thread", threadId, "--follow"])
    expect(followed.stderr).toBe("")
    expect(followed.code).toBe(0)
    expect(followed.stdout.trimEnd().split("\n")).toEqual(lines(log))
    expect(stand.cursors).toEqual(cursors)
  }).pipe(Effect.scoped)

/**
 * `send` on the stand-in `server`: prints the run's start, its events after the queued one, its end
 * and its reply, and exits 0, the stand-in sent `cursors` as the streams' `Last-Event-ID`s.
 */
const sendsWholeRun = (server: ReturnType<typeof standIn>, cursors: ReadonlyArray<string | undefined>) =>
  Effect.gen(function*() {
    const stand = yield* server
    const sent = yield* baton(["--server", stand.url, "--token", token, "send", threadId, "hello"])
    expect(sent.stderr).toBe("")
    expect(sent.code).toBe(0)
    expect(sent.stdout.trimEnd().split("\n")).toEqual([
      `sent: run 1 ${runId} starting`,
      ...lines(log.slice(1)),
      "run 1 completed",
      "the reply"
    ])
    expect(stand.cursors).toEqual(cursors)
  }).pipe(Effect.scoped)

describe("the CLI's event stream cut after its 200", () => {
  it.live("events --follow resumes after the last event printed: each event once, exit 0", () => followsWholeLog(standIn(2), [undefined, "2"]), 60_000)

  // A stopping server ends its live streams with `server_stopping` (its shutdown no longer waits on followers): the
  // CLI resumes as after a cut, where `events --follow` took the clean end for the end of the log before.
  it.live("events --follow resumes after a stopping server's server_stopping end: each event once, exit 0", () =>
    followsWholeLog(standIn(2, false, 0, true), [undefined, "2"]), 60_000)

  it.live("send resumes the stream cut mid-run and prints the run's end and reply", () => sendsWholeRun(standIn(3), [undefined, "3"]), 60_000)

  it.live("send retries a restarted server's 503 ServerStarting and prints the run's end and reply", () =>
    sendsWholeRun(standIn(3, false, 2), [undefined, "3", "3", "3"]), 60_000)

  it.live("a server that stays gone after the cut: the events printed, then \"cannot reach\" on one line, exit 2", () =>
    Effect.gen(function*() {
      const { url } = yield* standIn(2, true)
      const followed = yield* baton(["--server", url, "--token", token, "events", "--thread", threadId, "--follow"])
      expect(followed.stdout.trimEnd().split("\n")).toEqual(lines(log.slice(0, 2)))
      expect(followed.stderr).toMatch(new RegExp(`^baton: cannot reach the Baton server at ${url} \\(connect ECONNREFUSED [^\n]*\\n$`))
      expect(followed.code).toBe(2)
    }).pipe(Effect.scoped), 60_000)
})
