/**
 * A thread's worker whose read of the queue fails (the database unreachable for a moment) stopped for good: the runs
 * queued behind stayed `queued` until something else woke the thread (a later send, a restart), and the callers
 * waiting for them were failed with the read's error although nothing of their runs had run. The worker now reads
 * again after a pause (100 ms doubling to 5 s per failure in a row) and the queued run goes on.
 */
import { Commands, type CommandId, PersistenceError, type RunId } from "@baton/contracts"
import { RunDriver } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Option } from "effect"

let n = 0
const cid = () => `cmd_workerread_${++n}` as CommandId

describe("a thread's worker whose read of the queue fails", () => {
  it.live("reads again after a pause: the run queued behind goes on and its caller gets its result", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    // While `failures` > 0, the worker's read of the thread's first unfinished run fails as a lost connection does.
    let failures = 0
    let failed = 0
    const flaky = Harness.interceptStore((name, _args, call) => {
      if (name === "findFirstUnfinishedRun" && failures > 0) {
        failures--
        failed++
        return Effect.fail(new PersistenceError({ operation: name, detail: "connection terminated unexpectedly" }))
      }
      return call()
    })
    return Effect.gen(function*() {
      // The first run's turn is held until the second is queued behind it and the reads are set to fail.
      const held = yield* Harness.gated(h.providers.codex!)
      const context = yield* Layer.build(RunDriver.RunDriver.Default.pipe(
        Layer.provideMerge(Harness.makeLayer([held.adapter], h.counter, ":memory:", {}, "q", undefined, flaky))
      ))
      const driver = Context.get(context, RunDriver.RunDriver)
      const o = yield* Effect.provide(Harness.ops, context)
      const threadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(10))
      h.script.enqueue(Harness.reply(10))
      const first = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "first" }))
      const second = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "second" }))
      expect(second.status).toBe("queued")
      failures = 3
      yield* held.open
      expect(yield* driver.awaitRun(first.runId as RunId)).toMatchObject({ status: "completed" })
      expect(yield* driver.awaitRun(second.runId as RunId).pipe(Effect.timeout("20 seconds"))).toMatchObject({ status: "completed" })
      expect(failed).toBe(3)
      expect(Option.getOrThrow(yield* o.store.getRun(second.runId as RunId)).failureCode).toBeNull()
    }).pipe(Effect.scoped)
  })
})
