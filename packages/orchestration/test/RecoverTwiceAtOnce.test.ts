/**
 * Review r43 (the gone-driver sweep, 997c208): every live process on a database now reconciles a gone driver's runs
 * within `goneDriverSweepMillis`, so two processes' recoveries of one run meet as a matter of course (before, only at
 * two starts at once). Each reads the run and what the provider holds outside the thread's lock, then ends it under
 * the lock. The second to take the lock found the run ended by the first, but went on with what it had read: it
 * closed the attempt again and, for a model API's answer cut mid-stream, handed the recorded part of that answer to
 * the lane a second time (two late-output handoffs: the model would be given the partial answer twice).
 */
import { type RunId } from "@baton/contracts"
import type { ProviderAdapter } from "@baton/providers"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Layer, Option } from "effect"

describe("two recoveries of one gone driver's run at once", () => {
  it.live("end it once: the second, finding it ended under the lock, leaves it (one late-output handoff)", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    // Armed: the native thread holds run `cut`'s request without its answer (a model API's process died mid-stream),
    // and each recovery's first read of the run's items waits until both recoveries have read the run.
    const armed: { cut: RunId | null; arrived: number } = { cut: null, arrived: 0 }
    const bothRead = Effect.runSync(Deferred.make<void>())
    const barrier = Harness.interceptStore((name, _args, call) =>
      Effect.suspend(() => {
        if (armed.cut === null || name !== "listItemsOfRuns" || armed.arrived >= 2) return call()
        if (++armed.arrived === 2) Deferred.unsafeDone(bothRead, Effect.void)
        return Effect.zipRight(Deferred.await(bothRead), call())
      })
    )
    return Effect.gen(function*() {
      const codex = h.providers.codex!
      const cutMidStream: ProviderAdapter.ProviderAdapterShape = {
        ...codex,
        readThread: (ref) =>
          Effect.map(codex.readThread!(ref), (r) => armed.cut === null ? r : { ...r, runIds: [...r.runIds, armed.cut], unansweredRunIds: [armed.cut] })
      }
      const context = yield* Layer.build(Harness.makeLayer([cutMidStream], h.counter, ":memory:", {}, "rt", undefined, barrier))
      const o = yield* Effect.provide(Harness.ops, context)
      const threadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(10))
      const sent = yield* o.send(threadId, "hello")
      const runId = sent.runId as RunId
      // The process driving it is killed mid-answer: the run `running`, its attempt open, part of the answer recorded.
      const run = Option.getOrThrow(yield* o.store.getRun(runId))
      yield* o.store.updateRun({ ...run, status: "running", stopPoint: null, failureReason: null, failureCode: null })
      for (const a of yield* o.store.listAttempts(runId)) yield* o.store.updateAttempt({ ...a, status: "running", error: null })
      yield* o.store.setRunDriver(runId, "drv_killed_mid_answer")
      armed.cut = runId
      yield* Effect.all([o.service.recover(), o.service.recover()], { concurrency: 2 })
      expect(armed.arrived).toBe(2)
      expect(Option.getOrThrow(yield* o.store.getRun(runId))).toMatchObject({ status: "interrupted", failureCode: "process_restarted" })
      const created = yield* o.store.listEventsOfType(threadId, "handoff.created", { limit: 100 })
      expect(created.filter((e) => e.payload.lateOutputOf === runId)).toHaveLength(1)
    }).pipe(Effect.scoped)
  })
})
