/**
 * A run queued behind a turn in flight, and a fault of the storage as the thread's worker takes it:
 * - a race lost before its claim (`ConcurrentModification`: nothing of it ran): the run is taken again, not ended as
 *   a crashed turn (`turn_crashed`, which the run driver gives a turn that failed without an outcome);
 * - the worker's read of the queue failing (the database unreachable for a moment): the worker stopped for good, the
 *   run stayed `queued` until something else woke the thread (a later send, a restart) and its caller waited for
 *   ever. The worker now reads again after a pause (100 ms doubling to 5 s per failure in a row).
 */
import { Commands, type CommandId, ConcurrentModification, PersistenceError, type RunId } from "@baton/contracts"
import { RunDriver } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Option } from "effect"

let n = 0
const cid = () => `cmd_queuedfault_${++n}` as CommandId

/**
 * Queues a second run behind a first whose turn is held, arms `faults` (the number of faults the interceptor made by
 * `makeIntercept` injects from then on), opens the turn, and checks that both runs complete, the second with no
 * failure code. Answers how many faults were injected.
 */
const queuedBehindFaults = (
  makeIntercept: (armed: { faults: number; injected: number }) => ReturnType<typeof Harness.interceptStore>,
  faults: number
) => {
  const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
  const armed = { faults: 0, injected: 0 }
  return Effect.gen(function*() {
    // The first run's turn is held until the second is queued behind it (a run claimed at its queueing is never read
    // `queued` by its turn).
    const held = yield* Harness.gated(h.providers.codex!)
    const context = yield* Layer.build(RunDriver.RunDriver.Default.pipe(
      Layer.provideMerge(Harness.makeLayer([held.adapter], h.counter, ":memory:", {}, "l", undefined, makeIntercept(armed)))
    ))
    const driver = Context.get(context, RunDriver.RunDriver)
    const o = yield* Effect.provide(Harness.ops, context)
    const threadId = yield* o.create("codex")
    h.script.enqueue(Harness.reply(10))
    h.script.enqueue(Harness.reply(10))
    const first = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "first" }))
    const second = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "second" }))
    expect(second.status).toBe("queued")
    armed.faults = faults
    yield* held.open
    expect(yield* driver.awaitRun(first.runId as RunId)).toMatchObject({ status: "completed" })
    expect(yield* driver.awaitRun(second.runId as RunId).pipe(Effect.timeout("20 seconds"))).toMatchObject({ status: "completed" })
    expect(Option.getOrThrow(yield* o.store.getRun(second.runId as RunId)).failureCode).toBeNull()
    return armed.injected
  }).pipe(Effect.scoped)
}

describe("a run queued behind a turn in flight, and a fault as the worker takes it", () => {
  it.live("a race lost before its claim: the run is taken again after a pause and completes, not ended as a crashed turn", () =>
    Effect.gen(function*() {
      // The claim's unit of work (the run moved `queued` -> `starting`) loses a race: the transaction rolls back and the
      // run stays `queued`.
      const injected = yield* queuedBehindFaults((armed) =>
        Harness.interceptStore((name, args, call) => {
          const next = args[0] as { readonly status?: unknown } | undefined
          if (name === "updateRun" && next?.status === "starting" && armed.faults > 0) {
            armed.faults--
            armed.injected++
            return Effect.fail(new ConcurrentModification({ operation: "test.lost" }))
          }
          return call()
        }), 2)
      expect(injected).toBe(2)
    }))

  it.live("the worker's read of the queue failing: it reads again after a pause; the run goes on and its caller gets its result", () =>
    Effect.gen(function*() {
      const injected = yield* queuedBehindFaults((armed) =>
        Harness.interceptStore((name, _args, call) => {
          if (name === "findFirstUnfinishedRun" && armed.faults > 0) {
            armed.faults--
            armed.injected++
            return Effect.fail(new PersistenceError({ operation: name, detail: "connection terminated unexpectedly" }))
          }
          return call()
        }), 3)
      expect(injected).toBe(3)
    }))
})
