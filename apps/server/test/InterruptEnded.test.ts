/**
 * An interrupt of a run that had already ended is 409 `RunAlreadyEnded` (nothing was interrupted), as an interrupt
 * with nothing in progress is 409 `NoRunInProgress`: it answered 200 with the `completed` run, and a client read the
 * 2xx as a successful interrupt (b47srv). (A retry with the first interrupt's `Idempotency-Key` still gets its first
 * answer, 200 with the run it interrupted: InterruptIdempotency.test.ts.)
 */
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { client, post, raw, serve } from "./helpers.js"

describe("interrupting a run that ended", () => {
  it.live("is 409 RunAlreadyEnded naming the run and its status", () => {
    const h = Harness.make([{ name: "codex", window: 44_000, inject: true }])
    return Effect.gen(function*() {
      const api = yield* client()
      const threadId = (yield* raw(post("/threads", { providerInstance: "codex" }))).body!.threadId as string
      h.script.enqueue(Harness.reply(20))
      const sent = yield* raw(post(`/threads/${threadId}/messages`, { text: "hi" }))
      const runId = sent.body!.runId as string
      const ended = yield* api.runs.get({ path: { runId: runId as never }, urlParams: { waitMs: 30_000 } })
      expect(ended.run.status).toBe("completed")

      const late = yield* raw(post(`/threads/${threadId}/interrupt`, { runId }))
      expect([late.status, late.body]).toEqual([409, {
        _tag: "RunAlreadyEnded",
        runId,
        threadId,
        status: "completed",
        message: `run ${runId} had already ended (completed) when the interrupt arrived; nothing was interrupted (read the run with GET /runs/${runId})`
      }])
      // Without a run id: nothing in progress, as before.
      const none = yield* raw(post(`/threads/${threadId}/interrupt`, {}))
      expect([none.status, none.body?._tag]).toEqual([409, "NoRunInProgress"])
    }).pipe(Effect.provide(serve(h)))
  })
})
