/**
 * A run addressed under a thread it is not a run of (`POST /threads/{A}/interrupt` with `runId` of thread B, or
 * `POST /threads/{A}/runs/{B's run}/tool-results`) is 404 `RunNotFound` saying so: which thread the path named, which
 * thread the run belongs to. It was a bare "run … not found", as if the run did not exist (new user b46srv). An id no
 * run has says that instead, and under a thread that does not exist the thread is not found. Nothing is changed on
 * either thread.
 */
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { get, post, raw, serve } from "./helpers.js"

describe("a run addressed under another thread", () => {
  it.live("interrupt and tool results under thread A with a run of thread B are 404 naming B; an unknown id says none has it", () => {
    const h = Harness.make([{ name: "codex", window: 44_000, autoCompactThreshold: 42_000, inject: true }])
    return Effect.gen(function*() {
      const threadA = (yield* raw(post("/threads", { providerInstance: "codex" }))).body!.threadId as string
      const threadB = (yield* raw(post("/threads", { providerInstance: "codex" }))).body!.threadId as string
      h.script.enqueue(Harness.reply(20))
      const runB = (yield* raw(post(`/threads/${threadB}/messages`, { text: "hello" }))).body!.runId as string
      const ended = yield* raw(get(`/runs/${runB}?waitMs=30000`))
      expect((ended.body!.run as { status: string }).status).toBe("completed")

      const interrupt = yield* raw(post(`/threads/${threadA}/interrupt`, { runId: runB }))
      expect([interrupt.status, interrupt.body]).toEqual([404, {
        _tag: "RunNotFound",
        runId: runB,
        threadId: threadA,
        ownerThreadId: threadB,
        message: `run ${runB} is not a run of thread ${threadA}: it belongs to thread ${threadB}; address it under /threads/${threadB}`
      }])
      const results = yield* raw(post(`/threads/${threadA}/runs/${runB}/tool-results`, { results: [{ toolCallId: "call_1", output: "x" }] }))
      expect([results.status, results.body?._tag, results.body?.threadId, results.body?.ownerThreadId]).toEqual([404, "RunNotFound", threadA, threadB])

      const unknown = yield* raw(post(`/threads/${threadA}/interrupt`, { runId: "run_nope" }))
      expect([unknown.status, unknown.body]).toEqual([404, {
        _tag: "RunNotFound",
        runId: "run_nope",
        threadId: threadA,
        message: `run run_nope not found: no run has this id (thread ${threadA}'s runs: GET /threads/${threadA}/runs)`
      }])

      // Under a thread that does not exist, the thread is what is not found (its runs' route would 404 too).
      const noThread = { _tag: "ThreadNotFound", threadId: "thr_nope", message: "thread thr_nope not found (GET /threads lists the threads)" }
      const interruptNoThread = yield* raw(post("/threads/thr_nope/interrupt", { runId: "run_nope" }))
      expect([interruptNoThread.status, interruptNoThread.body]).toEqual([404, noThread])
      const resultsNoThread = yield* raw(post(`/threads/thr_nope/runs/${runB}/tool-results`, { results: [{ toolCallId: "call_1", output: "x" }] }))
      expect([resultsNoThread.status, resultsNoThread.body]).toEqual([404, noThread])

      // Nothing changed: B's run stays as it ended, A has no run.
      expect(((yield* raw(get(`/runs/${runB}`))).body!.run as { status: string }).status).toBe("completed")
      expect((yield* raw(get(`/threads/${threadA}/runs`))).body?.runs).toEqual([])
    }).pipe(Effect.provide(serve(h)))
  })
})
