/**
 * A provider that compacts a native thread on its own tells Baton (`TurnEvent.native_compacted`: Codex's
 * `contextCompaction` item, the scripted provider's auto-compaction), and the floor a rejection proved
 * (`NativeThread.heldAtLeast`) goes with the turn's outcome: what it proved no longer holds. Without that event no
 * report clears the floor, however low (a report can be stale: simulator seed 22).
 */
import type { NativeThread, ThreadId } from "@baton/contracts"
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

const ops = Harness.ops

describe.each(Harness.dialects)("a provider's own compaction and a rejection's floor on %s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  /**
   * codex (a 200,000 window that compacts by itself at 100,000) holds a floor of 90,000 that a rejection proved; the
   * next turn reports `reported` used. Returns the native thread's floor after that turn.
   */
  const floorAfterTurnReporting = (reported: number) => {
    const h = Harness.make([{ name: "codex", window: 200_000, autoCompactThreshold: 100_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t: ThreadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(50))
      yield* o.send(t, "first")
      const active = () =>
        Effect.gen(function*() {
          const codex = (yield* o.store.listProviderThreads(t))[0]!
          return (yield* o.store.listNativeThreads(codex.id)).find((n) => n.status === "active")!
        })
      const native = yield* active()
      const floored: NativeThread = { ...native, heldAtLeast: 90_000 }
      yield* o.store.updateNativeThread(floored)
      h.script.enqueue(Harness.reply(50, { usedTokens: reported, maxTokens: 200_000, autoCompactThreshold: 100_000 }))
      const r = yield* o.send(t, "second")
      expect(r.status).toBe("completed")
      const after = yield* active()
      // The same native thread: the turn went out on it (neither a replacement nor a new generation).
      expect(after.id).toBe(native.id)
      expect(yield* o.check(t, h)).toEqual([])
      return after.heldAtLeast
    }).pipe(Effect.provide(h.layer))
  }

  it.effect("a turn that takes the native thread past its auto-compact threshold: the provider compacts, says so, and the floor goes", () =>
    Effect.map(floorAfterTurnReporting(120_000), (floor) => expect(floor).toBeUndefined()))

  it.effect("a turn under the threshold: no compaction, so a lower report leaves the floor where the rejection and the growth put it", () =>
    Effect.map(floorAfterTurnReporting(2_000), (floor) => expect(floor).toBeGreaterThanOrEqual(90_000)))
})
