/**
 * `/compact`'s drain counts a rejection's floor (`NativeThread.heldAtLeast`, internal/KnownUsage): what a native
 * thread is known to hold is the larger of its last report and what a rejection proved, so a stale report does not
 * make room for a drain the provider would reject (ThreadCompaction.headroomOf, `KnownUsage.of`).
 */
import type { NativeThread } from "@baton/contracts"
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { deferredTowardCodex } from "./support/DeferredHistory.js"

const ops = Harness.ops

describe.each(Harness.dialects)("/compact's drain and a rejection's floor on %s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  /**
   * codex reported 10,000 of its 200,000 window and owes claude's run (two items, deferred by a budget of 0 when the
   * report was 190,100). The report is then stale: a rejection proved codex-n1 holds at least `floor`. The drain
   * before the compaction injects the owed history only when the floor leaves it room.
   */
  const drainWith = (floor: number | null) => {
    const h = Harness.make([
      { name: "codex", window: 200_000, inject: true },
      { name: "claude", window: 200_000, inject: false }
    ])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* deferredTowardCodex(h)
      // The stale report Baton holds, and (when given) the floor a rejection proved.
      const codex = (yield* o.store.listProviderThreads(t)).find((p) => p.providerInstance === "codex")!
      const native = (yield* o.store.listNativeThreads(codex.id)).find((n) => n.status === "active")!
      const stale: NativeThread = { ...native, usage: { usedTokens: 10_000, maxTokens: 200_000 }, ...(floor === null ? {} : { heldAtLeast: floor }) }
      yield* o.store.updateNativeThread(stale)
      yield* o.compact(t)
      const log = h.providers.codex!.received.filter((x) => x.type === "inject" || x.type === "compact").map((x) => x.type)
      expect(yield* o.check(t, h)).toEqual([])
      return log
    }).pipe(Effect.provide(h.layer))
  }

  it.effect("a stale report alone leaves room: the owed history is injected, then the native thread compacted", () =>
    Effect.map(drainWith(null), (log) => expect(log).toEqual(["inject", "compact"])))

  it.effect("a floor of 199,950 leaves none: the native thread is compacted first, then the history injected into the room it freed", () =>
    Effect.map(drainWith(199_950), (log) => expect(log).toEqual(["compact", "inject", "compact"])))
})
