/**
 * ThreadCompaction: the `/compact` path. It drains history deferred toward the thread's active provider thread
 * into the native thread *before* compacting it, where the adapter can inject natively: since compaction follows,
 * the injection may use the physical headroom (window - used) instead of the turn-start budget. When the owed
 * history does not fit the headroom, the native thread is compacted first to make room, the history injected, and
 * the thread compacted again. An adapter without native injection only compacts; deferred history is left
 * untouched for the next ordinary turn.
 *
 * It does not summarise Baton's own record (that is `/offload`) and never edits an item.
 */
import type { NativeThread, ProviderThread, ThreadId } from "@baton/contracts"
import { Budget, Calibration } from "@baton/context"
import { ThreadStore } from "@baton/persistence"
import { SqlClient } from "@effect/sql"
import type { ProviderAdapter } from "@baton/providers"
import { DateTime, Effect } from "effect"
import { ContextHandoffDelivery } from "./ContextHandoffDelivery.js"
import { OrchestratorConfig } from "./OrchestratorConfig.js"
import { ProviderCalibration } from "./ProviderCalibration.js"
import { ProviderTurnStartService } from "./ProviderTurnStartService.js"
import * as UsageSanity from "./UsageSanity.js"

/** What `/compact` did. Token counts are the native thread's usage. */
export interface CompactReport {
  readonly compacted: boolean
  readonly reason: string | null
  readonly usedBefore: number | null
  readonly usedAfter: number | null
  readonly deliveredItems: number
  readonly deliveredTokens: number
  readonly omittedItems: number
  /** Deliveries still `deferred` after `/compact` (no native injection, or nothing fit). */
  readonly stillDeferred: number
}

/** The report of a `/compact` that did not compact, saying why. */
export const notCompacted = (reason: string | null): CompactReport => ({
  compacted: false,
  reason,
  usedBefore: null,
  usedAfter: null,
  deliveredItems: 0,
  deliveredTokens: 0,
  omittedItems: 0,
  stillDeferred: 0
})

export class ThreadCompaction extends Effect.Service<ThreadCompaction>()("@baton/orchestration/ThreadCompaction", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const store = yield* ThreadStore
    const delivery = yield* ContextHandoffDelivery
    const config = yield* OrchestratorConfig
    const turnStart = yield* ProviderTurnStartService
    const calibration = yield* ProviderCalibration

    /** The native thread's usage in the provider's units: reported, else Baton's estimate scaled by `ratio`. */
    const usedAt = (ratio: number) => (n: NativeThread) => n.usage?.usedTokens ?? Calibration.apply(ratio, n.estimatedTokens)

    const compact = Effect.fn("ThreadCompaction.compact")(function*(
      threadId: ThreadId,
      providerThread: ProviderThread,
      adapter: ProviderAdapter.ProviderAdapterShape
    ) {
      const empty = notCompacted(null)
      if (providerThread.activeNativeThreadId === null) return { ...empty, reason: "no native thread yet: nothing to compact" }
      const found = yield* store.getNativeThread(providerThread.activeNativeThreadId)
      if (found._tag === "None") return { ...empty, reason: "the native thread record is missing" }
      if (found.value.status === "replaced") {
        // An untrusted native thread is never written to again: the next turn start replaces it.
        return { ...empty, reason: "the native thread is no longer trusted; the next turn starts a replacement and delivers the history" }
      }
      let native = found.value
      const { ratio } = yield* calibration.current(providerThread.providerInstance)
      const used = usedAt(ratio)
      const compactThread = adapter.compactThread
      if (compactThread === undefined) return { ...empty, reason: `${adapter.instance} cannot compact natively` }
      const usedBefore = used(native)
      // No compaction loops: after N attempts in a row that freed nothing, stop calling the provider and say why.
      if (native.compactionsWithoutProgress >= config.maxCompactionsWithoutProgress) {
        return {
          ...empty,
          usedBefore,
          usedAfter: usedBefore,
          stillDeferred: (yield* delivery.owedTo(threadId, providerThread, native)).length,
          reason: `compaction freed nothing the last ${native.compactionsWithoutProgress} times ` +
            `(${usedBefore} tokens used); not retried. The thread stays usable: send a message, or switch provider`
        }
      }
      let progressed = false

      const compactOnce = Effect.gen(function*() {
        const before = used(native)
        const result = yield* compactThread(native.nativeRef)
        const now = yield* DateTime.now
        const after = UsageSanity.check(result.usageAfter, providerThread.contextWindow, config.budget.defaultWindow).usage
        native = {
          ...native,
          usage: after ?? native.usage,
          estimatedTokens: after === null ? native.estimatedTokens : Calibration.toRaw(ratio, after.usedTokens),
          updatedAt: now
        }
        if (used(native) < before) progressed = true
        yield* store.updateNativeThread(native)
      })

      // Uncertain deliveries are never drained again: read them back first where the adapter can; whatever stays
      // uncertain is left to the next turn start (which replaces the native thread) and not injected here.
      const uncertain = yield* store.listDeliveriesByStatus(native.id, "pending")
      if (uncertain.length > 0 && (yield* turnStart.reconcile(threadId, providerThread, native, uncertain, adapter))) {
        const reread = yield* store.getNativeThread(native.id)
        if (reread._tag === "Some") native = reread.value
      }
      const owed = (yield* delivery.owedTo(threadId, providerThread, native)).filter((o) => o.delivery.status === "deferred")
      let deliveredItems = 0
      let deliveredTokens = 0
      let omittedItems = 0
      let stillDeferred = owed.filter((o) => o.delivery.status === "deferred").length
      const inject = adapter.injectHistory
      if (owed.length > 0 && inject !== undefined) {
        const headroom = () =>
          Budget.compute({
            modelWindow: providerThread.contextWindow ?? undefined,
            usage: native.usage,
            estimatedUsedTokens: native.estimatedTokens,
            requestTokens: 0,
            ratio
          }, config.budget).physicalHeadroom
        let room = headroom()
        let plan = yield* delivery.plan(threadId, owed, room, ratio)
        let compactedFirst = false
        if (plan.selection.omittedItemIds.length > 0 || plan.selection.selected.length === 0) {
          yield* compactOnce
          compactedFirst = true
          room = headroom()
          plan = yield* delivery.plan(threadId, owed, room, ratio)
        }
        if (plan.selection.selected.length > 0) {
          const pending = yield* sql.withTransaction(delivery.markPending(threadId, plan, "injected", null, room, ratio))
          const outcome = yield* inject({
            nativeRef: native.nativeRef,
            rendered: plan.selection.rendered,
            itemIds: plan.selection.selected.map((i) => i.id),
            deliveryIds: pending.map((d) => d.id)
          }).pipe(Effect.either)
          if (outcome._tag === "Left") {
            // Lost acknowledgement: read back now; if that is impossible the deliveries stay `pending`.
            if (yield* turnStart.reconcile(threadId, providerThread, native, pending, adapter)) {
              const reread = yield* store.getNativeThread(native.id)
              if (reread._tag === "Some") native = reread.value
              const settled = (yield* store.listDeliveriesOfThread(threadId)).filter((d) =>
                pending.some((p) => p.id === d.id) && d.status === "injected"
              )
              if (settled.length > 0) {
                deliveredItems = plan.selection.selected.length
                deliveredTokens = plan.selection.tokens
                omittedItems = plan.selection.omittedItemIds.length
                stillDeferred = 0
              }
            }
          } else {
            const acknowledged = outcome.right
            native = yield* sql.withTransaction(Effect.gen(function*() {
              yield* delivery.markSettled(threadId, pending, "injected")
              const now = yield* DateTime.now
              const updated: NativeThread = {
                ...native,
                usage: UsageSanity.check(acknowledged.usage, providerThread.contextWindow, config.budget.defaultWindow).usage ?? native.usage,
                estimatedTokens: native.estimatedTokens + plan.selection.tokens,
                updatedAt: now
              }
              yield* store.updateNativeThread(updated)
              return updated
            }))
            deliveredItems = plan.selection.selected.length
            deliveredTokens = plan.selection.tokens
            omittedItems = plan.selection.omittedItemIds.length
            stillDeferred = 0
          }
          yield* compactOnce
        } else if (!compactedFirst) {
          yield* compactOnce
        }
      } else {
        yield* compactOnce
      }
      const usedAfter = used(native)
      native = {
        ...native,
        compactionsWithoutProgress: progressed || deliveredItems > 0 ? 0 : native.compactionsWithoutProgress + 1
      }
      yield* store.updateNativeThread(native)
      yield* store.appendEvent(threadId, "thread.compacted", {
        nativeThreadId: native.id,
        usedBefore,
        usedAfter,
        delivered: deliveredItems
      })
      return {
        compacted: true,
        reason: null,
        usedBefore,
        usedAfter,
        deliveredItems,
        deliveredTokens,
        omittedItems,
        stillDeferred
      } satisfies CompactReport
    })

    return { compact }
  })
}) {}
