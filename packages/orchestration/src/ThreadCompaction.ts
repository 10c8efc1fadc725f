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
import {
  CompactReport,
  type ConcurrentModification,
  type NativeThread,
  type NativeThreadId,
  type PersistenceError,
  type ProviderThread,
  type ThreadEventOf,
  type ThreadId
} from "@baton/contracts"
import { Budget, Calibration } from "@baton/context"
import { ThreadStore, UnitOfWork } from "@baton/persistence"
import type { ProviderAdapter } from "@baton/providers"
import { DateTime, Effect } from "effect"
import * as CommandReceipts from "./CommandReceipts.js"
import { ContextHandoffDelivery } from "./ContextHandoffDelivery.js"
import { OrchestratorConfig } from "./OrchestratorConfig.js"
import { ProviderCalibration } from "./ProviderCalibration.js"
import { ProviderTurnStartService } from "./ProviderTurnStartService.js"
import * as UsageSanity from "./UsageSanity.js"

/** What `/compact` did (the schema lives in contracts). */
export { CompactReport } from "@baton/contracts"

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

/**
 * What a run of no-progress `/compact` attempts is about: the native thread's stored usage (reported `usedTokens`,
 * Baton's `estimatedTokens`) and the handoffs owed to it (`id:itemCount`, sorted). Recorded as `state` on each
 * `thread.compacted` event; a new turn, an injection or a new (or grown) handoff changes it.
 */
interface CompactionState {
  readonly usedTokens: number | null
  readonly estimatedTokens: number
  readonly owed: ReadonlyArray<string>
}

const stateOf = (
  native: NativeThread,
  owed: ReadonlyArray<{ readonly handoff: { readonly id: string; readonly itemIds: ReadonlyArray<string> } }>
): CompactionState => ({
  usedTokens: native.usage?.usedTokens ?? null,
  estimatedTokens: native.estimatedTokens,
  owed: owed.map((o) => `${o.handoff.id}:${o.handoff.itemIds.length}`).sort()
})

/** Compaction events read per page while looking for one native thread's newest (other native threads' interleave). */
const compactionPage = 8

/** Same state; a recorded state that is missing or malformed (events written before it existed) is never the same. */
const sameState = (recorded: unknown, now: CompactionState): boolean =>
  typeof recorded === "object" && recorded !== null && JSON.stringify(recorded) === JSON.stringify(now)

export class ThreadCompaction extends Effect.Service<ThreadCompaction>()("@baton/orchestration/ThreadCompaction", {
  effect: Effect.gen(function*() {
    const uow = yield* UnitOfWork
    const store = yield* ThreadStore
    const delivery = yield* ContextHandoffDelivery
    const config = yield* OrchestratorConfig
    const turnStart = yield* ProviderTurnStartService
    const calibration = yield* ProviderCalibration

    /**
     * The newest `thread.compacted` event of `nativeThreadId`, if any. Reads the thread's compactions newest first
     * by the `(thread_id, type, seq)` index, a page at a time: usually the first row, never the whole log.
     */
    const lastCompaction = (
      threadId: ThreadId,
      nativeThreadId: NativeThreadId,
      beforeSeq?: number
    ): Effect.Effect<ThreadEventOf<"thread.compacted"> | undefined, PersistenceError | ConcurrentModification> =>
      Effect.flatMap(
        store.listEventsOfType(threadId, "thread.compacted", { ...(beforeSeq === undefined ? {} : { beforeSeq }), limit: compactionPage }),
        (events) => {
          const found = events.find((e) => e.payload.nativeThreadId === nativeThreadId)
          const oldest = events.at(-1)
          return found !== undefined || oldest === undefined || events.length < compactionPage
            ? Effect.succeed(found)
            : lastCompaction(threadId, nativeThreadId, oldest.seq)
        }
      )

    /** The native thread's usage in the provider's units: reported, else Baton's estimate scaled by `ratio`. */
    const usedAt = (ratio: number) => (n: NativeThread) => n.usage?.usedTokens ?? Calibration.apply(ratio, n.estimatedTokens)

    /**
     * `/compact` on `providerThread`'s active native thread; returns what it did (`compacted: false` with the reason
     * when it did not call the provider). With `receipt`, the command receipt is written with the outcome (in the
     * compaction's final transaction), so a client retrying after a crash gets this report back instead of compacting
     * again. Fails with the adapter's `ProviderError` (no receipt: the command may be retried) or `PersistenceError`.
     */
    const compact = Effect.fn("ThreadCompaction.compact")(function*(
      threadId: ThreadId,
      providerThread: ProviderThread,
      adapter: ProviderAdapter.ProviderAdapterShape,
      receiptKey: CommandReceipts.Key | null = null
    ) {
      const receipt = (report: CompactReport) =>
        receiptKey === null ? Effect.succeed(report) : CommandReceipts.write(store, receiptKey, CompactReport, report)
      const empty = notCompacted(null)
      const refuse = (reason: string) => uow.thread(threadId, "ThreadCompaction.refuse")(receipt({ ...empty, reason }))
      if (providerThread.activeNativeThreadId === null) return yield* refuse("no native thread yet: nothing to compact")
      const found = yield* store.getNativeThread(providerThread.activeNativeThreadId)
      if (found._tag === "None") return yield* refuse("the native thread record is missing")
      if (found.value.status === "replaced") {
        // An untrusted native thread is never written to again: the next turn start replaces it.
        return yield* refuse("the native thread is no longer trusted; the next turn starts a replacement and delivers the history")
      }
      let native = found.value
      const { ratio } = yield* calibration.current(providerThread.providerInstance)
      const used = usedAt(ratio)
      const compactThread = adapter.compactThread
      if (compactThread === undefined) return yield* refuse(`${adapter.instance} cannot compact natively`)
      const usedBefore = used(native)
      // No compaction loops: after N attempts in a row on an unchanged native thread that freed nothing, stop calling
      // the provider and say why. The count is about that unchanged thread: once a turn, an injection or newly owed
      // history has changed it since the last attempt, compaction may free something again and the count restarts.
      const owedBefore = yield* delivery.owedTo(threadId, providerThread, native)
      const last = yield* lastCompaction(threadId, native.id)
      const withoutProgress = last !== undefined && sameState(last.payload.state, stateOf(native, owedBefore))
        ? native.compactionsWithoutProgress
        : 0
      if (withoutProgress >= config.maxCompactionsWithoutProgress) {
        return yield* uow.thread(threadId, "ThreadCompaction.noProgress")(receipt({
          ...empty,
          usedBefore,
          usedAfter: usedBefore,
          stillDeferred: owedBefore.length,
          reason: `compaction freed nothing the last ${withoutProgress} times ` +
            `(${usedBefore} tokens used); not retried. The thread stays usable: send a message, or switch provider`
        }))
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
          const pending = yield* uow.thread(threadId, "ThreadCompaction.pending")(delivery.markPending(threadId, plan, "injected", null, room, ratio))
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
            native = yield* uow.thread(threadId, "ThreadCompaction.injected")(Effect.gen(function*() {
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
        compactionsWithoutProgress: progressed || deliveredItems > 0 ? 0 : withoutProgress + 1
      }
      const report: CompactReport = {
        compacted: true,
        reason: null,
        usedBefore,
        usedAfter,
        deliveredItems,
        deliveredTokens,
        omittedItems,
        stillDeferred
      }
      const outcome = native
      return yield* uow.thread(threadId, "ThreadCompaction.compacted")(Effect.gen(function*() {
        yield* store.updateNativeThread(outcome)
        yield* store.appendEvent({ threadId, type: "thread.compacted", payload: {
          nativeThreadId: outcome.id,
          usedBefore,
          usedAfter,
          delivered: deliveredItems,
          state: stateOf(outcome, yield* delivery.owedTo(threadId, providerThread, outcome))
        }, commandId: receiptKey?.commandId ?? null })
        return yield* receipt(report)
      }))
    })

    return { compact }
  })
}) {}
