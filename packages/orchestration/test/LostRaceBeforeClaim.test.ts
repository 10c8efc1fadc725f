/**
 * A queued run whose turn lost a race before its claim (`ConcurrentModification`: nothing of it ran) is taken again,
 * not ended as a crashed turn (`turn_crashed`, which the run driver gives a turn that failed without an outcome).
 */
import { Commands, type CommandId, ConcurrentModification, type RunId } from "@baton/contracts"
import { RunDriver } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Option } from "effect"

let n = 0
const cid = () => `cmd_lostrace_${++n}` as CommandId

describe("a queued run that lost a race before its claim", () => {
  it.live("is taken again after a pause and completes; it is not ended as a crashed turn", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    // The claim's unit of work (the run moved `queued` -> `starting`) loses a race the first `losses` times: the
    // transaction rolls back and the run stays `queued`.
    let losses = 0
    let tries = 0
    const losing = Harness.interceptStore((name, args, call) => {
      const next = args[0] as { readonly status?: unknown } | undefined
      if (name === "updateRun" && next?.status === "starting" && losses > 0) {
        losses--
        tries++
        return Effect.fail(new ConcurrentModification({ operation: "test.lost" }))
      }
      return call()
    })
    return Effect.gen(function*() {
      // The first run's turn is held until the second is queued behind it (a run claimed at its queueing is never read
      // `queued` by its turn).
      const held = yield* Harness.gated(h.providers.codex!)
      const context = yield* Layer.build(RunDriver.RunDriver.Default.pipe(
        Layer.provideMerge(Harness.makeLayer([held.adapter], h.counter, ":memory:", {}, "l", undefined, losing))
      ))
      const driver = Context.get(context, RunDriver.RunDriver)
      const o = yield* Effect.provide(Harness.ops, context)
      const threadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(10))
      h.script.enqueue(Harness.reply(10))
      const first = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "first" }))
      const accepted = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "second" }))
      expect(accepted.status).toBe("queued")
      losses = 2
      yield* held.open
      expect(yield* driver.awaitRun(first.runId as RunId)).toMatchObject({ status: "completed" })
      expect(yield* driver.awaitRun(accepted.runId as RunId).pipe(Effect.timeout("20 seconds"))).toMatchObject({ status: "completed" })
      expect(tries).toBe(2)
      expect(Option.getOrThrow(yield* o.store.getRun(accepted.runId as RunId)).failureCode).toBeNull()
    }).pipe(Effect.scoped)
  })
})
