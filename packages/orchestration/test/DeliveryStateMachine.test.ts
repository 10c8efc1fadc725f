/**
 * Property test of the delivery state machine (ContextHandoffDelivery) on a real SQLite database: random sequences
 * of the lifecycle's operations, with every legal and illegal-looking order, and after each operation the
 * transition rules and record invariants of docs/handoff-lifecycle.md.
 */
import type { HandoffDelivery, NativeThread, ProviderThread, ThreadId } from "@baton/contracts"
import { ContextHandoffDelivery } from "@baton/orchestration"
import type { ThreadStore } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { describe, expect, it, beforeAll } from "@effect/vitest"
import { DateTime, Effect, FastCheck as fc, Option } from "effect"

type Action =
  | { readonly op: "owe" }
  | { readonly op: "defer" }
  | { readonly op: "pending"; readonly budget: number; readonly mode: "injected" | "inline" }
  | { readonly op: "settle" }
  | { readonly op: "revert" }
  | { readonly op: "replace" }

const action: fc.Arbitrary<Action> = fc.oneof(
  fc.constant({ op: "owe" as const }),
  fc.constant({ op: "defer" as const }),
  fc.record({
    op: fc.constant("pending" as const),
    budget: fc.integer({ min: 0, max: 400 }),
    mode: fc.constantFrom("injected" as const, "inline" as const)
  }),
  fc.constant({ op: "settle" as const }),
  fc.constant({ op: "revert" as const }),
  fc.constant({ op: "replace" as const })
)

const legal: Record<HandoffDelivery["status"], ReadonlyArray<HandoffDelivery["status"]>> = {
  deferred: ["deferred", "pending", "superseded"],
  pending: ["pending", "deferred", "injected", "inline", "superseded"],
  injected: ["injected"],
  inline: ["inline"],
  superseded: ["superseded"]
}

/** A thread with five runs on codex and five handoffs toward claude, one per run (disjoint items). */
const setup = (h: Harness.Harness) =>
  Effect.gen(function*() {
    const o = yield* Harness.ops
    const delivery = yield* ContextHandoffDelivery.ContextHandoffDelivery
    const threadId: ThreadId = yield* o.create("codex")
    for (let i = 0; i < 5; i++) {
      h.script.enqueue(Harness.reply(20 + 15 * i))
      yield* o.send(threadId, `run ${i + 1}`)
    }
    yield* o.switchTo(threadId, "claude")
    const target = Option.getOrThrow(yield* o.store.findProviderThread(threadId, "claude" as ProviderThread["providerInstance"]))
    // The switch's own handoff is closed here: the model owns the handoffs toward claude.
    for (const h0 of yield* o.store.listOpenHandoffs(target.id)) yield* o.store.updateHandoff({ ...h0, open: false })
    for (const run of yield* o.store.listRuns(threadId)) yield* delivery.createHandoff(threadId, "missed_run", target, [run])
    return { o, delivery, threadId, target }
  })

/** Inserts native thread generation `generation` of `target` (ids and refs derived from it). */
const insertNative = (store: ThreadStore, target: ProviderThread, generation: number) =>
  Effect.gen(function*() {
    const now = yield* DateTime.now
    const native: NativeThread = {
      id: `nat_model_${generation}` as NativeThread["id"],
      providerThreadId: target.id,
      generation,
      nativeRef: `ref_${generation}`,
      status: "active",
      usage: null,
      estimatedTokens: 0,
      compactionsWithoutProgress: 0,
      createdAt: now,
      updatedAt: now
    }
    yield* store.insertNativeThread(native)
    return native
  })

const twoProviders = () =>
  Harness.make([{ name: "codex", window: 200_000, inject: true }, { name: "claude", window: 200_000, inject: true }])

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  describe("delivery state machine", () => {
    // Shrunk counterexample of the property below: a handoff of which the plan selected nothing was written `pending`
    // with every item omitted and then settled, closing it for good instead of retrying it.
    it.effect("a handoff of which nothing fits beside the other owed history stays deferred and open", () => {
      const h = twoProviders()
      return Effect.gen(function*() {
        const { delivery, o, target, threadId } = yield* setup(h)
        const native = yield* insertNative(o.store, target, 1)
        const owed = yield* delivery.owedTo(threadId, target, native)
        // The smallest budget at which some owed handoffs get an item and others none (the selection decides which;
        // this test is about what the state machine does with the ones that got nothing).
        const covered = (p: ContextHandoffDelivery.DeliveryPlan) =>
          p.owed.filter((x) => x.handoff.itemIds.some((id) => p.selection.selected.some((i) => i.id === id))).length
        let budget = 100
        let plan = yield* delivery.plan(threadId, owed, budget)
        while (budget < 2_000 && !(covered(plan) > 0 && covered(plan) < 5)) plan = yield* delivery.plan(threadId, owed, ++budget)
        const pending = yield* delivery.markPending(threadId, plan, "injected", null, budget)
        expect(pending.length).toBeGreaterThan(0)
        expect(pending.length).toBeLessThan(5)
        yield* delivery.markSettled(threadId, pending, "injected")
        const all = yield* o.store.listDeliveriesOfThread(threadId)
        const deferred = all.filter((d) => d.status === "deferred")
        expect(deferred.length).toBe(5 - pending.length)
        for (const d of deferred) {
          expect(d.deferCount).toBe(1)
          expect(d.lastDeferReason).toBe(`none of its items fit beside the other owed history (budget ${budget})`)
          expect(Option.getOrThrow(yield* o.store.getHandoff(d.handoffId)).open).toBe(true)
        }
        expect(all.every((d) => d.status !== "injected" || d.deliveredItemIds.length > 0)).toBe(true)
      }).pipe(Effect.provide(h.layer))
    })

    it.effect.prop("every operation order keeps transitions legal, settled records frozen and items delivered once per native thread", [
      fc.array(action, { minLength: 1, maxLength: 30 })
    ], ([actions]) => {
      const h = twoProviders()
      return Effect.gen(function*() {
        const { delivery, o, target, threadId } = yield* setup(h)

        let generation = 0
        const newNative = Effect.suspend(() => insertNative(o.store, target, ++generation))
        let native = yield* newNative
        const snapshot = () =>
          Effect.map(o.store.listDeliveriesOfThread(threadId), (ds) => new Map(ds.map((d) => [d.id as string, d])))
        let before = yield* snapshot()

        for (const a of actions) {
          const owedNow = () => delivery.owedTo(threadId, target, native)
          switch (a.op) {
            case "owe":
              yield* owedNow()
              break
            case "defer": {
              const owed = (yield* owedNow()).filter((x) => x.delivery.status === "deferred")
              yield* delivery.defer(threadId, owed, 0, "model: budget 0")
              break
            }
            case "pending": {
              const owed = (yield* owedNow()).filter((x) => x.delivery.status === "deferred")
              if (owed.length === 0) break
              const plan = yield* delivery.plan(threadId, owed, a.budget)
              if (plan.selection.selected.length === 0) break
              yield* delivery.markPending(threadId, plan, a.mode, null, a.budget)
              expect(plan.selection.tokens).toBeLessThanOrEqual(a.budget)
              break
            }
            case "settle": {
              const pending = yield* o.store.listDeliveriesByStatus(native.id, "pending")
              yield* delivery.markSettled(threadId, pending, pending[0]?.mode === "inline" ? "inline" : "injected")
              break
            }
            case "revert": {
              const pending = yield* o.store.listDeliveriesByStatus(native.id, "pending")
              yield* delivery.revertToDeferred(threadId, pending, "model: turn did not start")
              break
            }
            case "replace": {
              yield* delivery.supersedeForReplacement(threadId, target, native, "model: replaced")
              yield* o.store.updateNativeThread({ ...native, status: "replaced" })
              native = yield* newNative
              break
            }
          }

          const after = yield* snapshot()
          const seenPairs = new Set<string>()
          const deliveredTo = new Map<string, Set<string>>()
          for (const d of after.values()) {
            const prev = before.get(d.id)
            if (prev !== undefined) {
              expect(legal[prev.status], `${prev.status} -> ${d.status} after ${a.op}`).toContain(d.status)
              expect(d.deferCount).toBeGreaterThanOrEqual(prev.deferCount)
              if (prev.status === "injected" || prev.status === "inline" || prev.status === "superseded") {
                expect(d).toEqual(prev)
              }
            } else {
              // Created `deferred` toward the active native thread (and possibly made `pending` by the same operation).
              expect(a.op === "pending" ? ["deferred", "pending"] : ["deferred"]).toContain(d.status)
              expect(d.nativeThreadId).toBe(native.id)
            }
            const pair = `${d.handoffId}/${d.nativeThreadId}`
            expect(seenPairs.has(pair)).toBe(false)
            seenPairs.add(pair)
            if (d.status === "pending" || d.status === "injected" || d.status === "inline") {
              const handoff = Option.getOrThrow(yield* o.store.getHandoff(d.handoffId))
              // Each handoff's items are split into delivered and omitted, nothing else.
              expect([...d.deliveredItemIds, ...d.omittedItemIds].sort()).toEqual([...handoff.itemIds].sort())
              expect(d.deliveredItemIds.length).toBeGreaterThan(0)
            }
            if (d.status === "injected" || d.status === "inline") {
              const seen = deliveredTo.get(d.nativeThreadId) ?? new Set<string>()
              for (const id of d.deliveredItemIds) {
                expect(seen.has(id), `item ${id} delivered twice to ${d.nativeThreadId}`).toBe(false)
                seen.add(id)
              }
              deliveredTo.set(d.nativeThreadId, seen)
            }
          }
          // A handoff with a settled delivery to the active native thread is closed; one the native thread still owes
          // (deferred or pending there) is open.
          for (const handoff of yield* o.store.listHandoffs(threadId)) {
            const toActive = [...after.values()].find((d) => d.handoffId === handoff.id && d.nativeThreadId === native.id)
            if (toActive?.status === "injected" || toActive?.status === "inline") expect(handoff.open).toBe(false)
            if (toActive?.status === "deferred" || toActive?.status === "pending") expect(handoff.open).toBe(true)
          }
          before = after
        }
      }).pipe(Effect.provide(h.layer))
    }, { fastCheck: { numRuns: db === Harness.postgres ? 12 : 40 } }) // Postgres: a fresh schema per run
  })
})
