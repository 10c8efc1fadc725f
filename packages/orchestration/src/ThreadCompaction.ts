/**
 * ThreadCompaction: the `/compact` path. It drains history deferred toward the thread's active provider thread
 * into the native thread *before* compacting it, where the adapter can inject natively: since compaction follows,
 * the injection may use the physical headroom (window - used) instead of the turn-start budget. When the owed
 * history does not fit the headroom, the native thread is compacted first to make room, the history injected, and
 * the thread compacted again. An adapter without native injection only compacts; deferred history is left
 * untouched for the next ordinary turn. An adapter that injects but cannot compact (the model APIs: their native
 * thread is Baton's own message list) has its deferred history drained as far as the window allows with room kept
 * for the next answer (`maxOutputTokens`), and is answered `compacted: false` with what to do to make the rest fit
 * (`/offload`, then `/compact` again). Every report's `stillDeferred` is the number of deliveries toward the native thread still deferred
 * after it (the open handoffs toward the provider thread when there is no usable native thread).
 *
 * It does not summarise Baton's own record (that is `/offload`) and never edits an item.
 */
import {
  CompactReport,
  type CompactSkipCode,
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
import { DateTime, Effect, Option } from "effect"
import * as CommandReceipts from "./CommandReceipts.js"
import { ContextHandoffDelivery } from "./ContextHandoffDelivery.js"
import { OrchestratorConfig } from "./OrchestratorConfig.js"
import { ProviderCalibration } from "./ProviderCalibration.js"
import { ProviderTurnStartService } from "./ProviderTurnStartService.js"
import { recordedToolResults } from "./TurnStream.js"
import * as UsageSanity from "./UsageSanity.js"
import * as KnownUsage from "./internal/KnownUsage.js"
import * as Span from "./internal/Span.js"

/** What `/compact` did (the schema lives in contracts). */
export { CompactReport } from "@baton/contracts"

/**
 * Why `/compact` did nothing on `instance`'s provider thread before its first turn (`no_native_thread`), saying what
 * happens to the `owed` handoffs open toward it (after a provider switch: the history it has not seen). There is no
 * native thread to compact or to drain them into; its first turn starts one and delivers them as that turn's budget
 * allows (docs/handoff-lifecycle.md, "/compact"). Found by a newcomer's walk (b46ux): right after a switch it said
 * only "nothing to compact" while a handoff was owed.
 */
export const noNativeThreadReason = (instance: string) => (owed: number): string =>
  owed === 0
    ? `no native thread yet on ${instance} (no turn has run on it): nothing to compact`
    : `no native thread yet on ${instance} (no turn has run on it): nothing to compact, and no thread to drain ` +
      `the ${owed === 1 ? "handoff" : `${owed} handoffs`} owed to it into; its first turn starts one and delivers that history ` +
      "as the turn's budget allows (what does not fit stays deferred for later turns and /compact)"

/** The report of a `/compact` that did not compact, saying why (`stillDeferred` 0: callers set the real count). */
export const notCompacted = (reason: string | null, reasonCode: CompactSkipCode | null = null): CompactReport => ({
  compacted: false,
  reason,
  reasonCode,
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

/** What an injection delivered: items, their rendered tokens, and the owed items it left out. */
interface Injected {
  readonly items: number
  readonly tokens: number
  readonly omitted: number
}

const nothingInjected: Injected = { items: 0, tokens: 0, omitted: 0 }

/** Compaction events read per page while looking for one native thread's newest (other native threads' interleave). */
const compactionPage = 8

/** Same state; a recorded state that is missing or malformed (events written before it existed) is never the same. */
const sameState = (recorded: unknown, now: CompactionState): boolean =>
  typeof recorded === "object" && recorded !== null && JSON.stringify(recorded) === JSON.stringify(now)

/**
 * Whether `stored` is still the native thread record `seen` (as read or written by the compaction): no other operation
 * (a turn's usage, an injection, a replacement, a rejection's floor) wrote it since. Compares what those writes change.
 */
const unchangedSince = (stored: NativeThread, seen: NativeThread): boolean =>
  stored.status === seen.status &&
  stored.generation === seen.generation &&
  stored.estimatedTokens === seen.estimatedTokens &&
  stored.heldAtLeast === seen.heldAtLeast &&
  (stored.usage?.usedTokens ?? null) === (seen.usage?.usedTokens ?? null) &&
  (stored.usage?.maxTokens ?? null) === (seen.usage?.maxTokens ?? null) &&
  (stored.usage?.autoCompactThreshold ?? null) === (seen.usage?.autoCompactThreshold ?? null) &&
  DateTime.toEpochMillis(stored.updatedAt) === DateTime.toEpochMillis(seen.updatedAt)

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

    /**
     * The native thread's usage in the provider's units: reported, else Baton's estimate scaled by `ratio`; never below
     * the floor a rejection proved (`KnownUsage`).
     */
    const usedAt = (ratio: number) => (n: NativeThread) => KnownUsage.of(n, ratio)?.usedTokens ?? Calibration.apply(ratio, n.estimatedTokens)

    /**
     * The handoffs owed to `native` with their deliveries (`ContextHandoffDelivery.owedTo`), in a unit of work on the
     * thread: a missing delivery is created there with its `delivery.created` event, so under the thread's lock. Read
     * outside one, the insert and the event committed apart and raced every locked writer of the thread: on Postgres
     * the event took the `seq` a concurrent send was writing (a deadlock, `ConcurrentModification` for one of them).
     * Fails with `PersistenceError` or `ConcurrentModification`.
     */
    const owedLocked = (threadId: ThreadId, providerThread: ProviderThread, native: NativeThread) =>
      config.mutations.has("owed_outside_unit_of_work")
        ? delivery.owedTo(threadId, providerThread, native)
        : uow.thread(threadId, "ThreadCompaction.owed")(delivery.owedTo(threadId, providerThread, native))

    /**
     * `/compact` on `providerThread`'s active native thread; returns what it did (`compacted: false` with the reason
     * when it did not call the provider). With `receipt`, the command receipt is written with the outcome (in the
     * compaction's final transaction), so a client retrying after a crash gets this report back instead of compacting
     * again. Fails with the adapter's `ProviderError` (no receipt: the command may be retried) or `PersistenceError`.
     */
    const compact = Span.fn("ThreadCompaction.compact")(function*(
      threadId: ThreadId,
      providerThread: ProviderThread,
      adapter: ProviderAdapter.ProviderAdapterShape,
      receiptKey: CommandReceipts.Key | null = null
    ) {
      const receipt = (report: CompactReport) =>
        receiptKey === null ? Effect.succeed(report) : CommandReceipts.write(store, receiptKey, CompactReport, report)
      const empty = notCompacted(null)
      /**
       * Deliveries toward `target` still `deferred` (the handoffs owed to it); without a usable native thread, the
       * handoffs open toward the provider thread (the next turn start owes them to the native thread it uses).
       */
      const deferredLeft = (target: NativeThread | null) =>
        target === null
          ? Effect.map(store.listOpenHandoffs(providerThread.id), (open) => open.length)
          : Effect.map(delivery.owedTo(threadId, providerThread, target), (owed) => owed.filter((o) => o.delivery.status === "deferred").length)
      const refuse = (reasonCode: CompactSkipCode, reason: string | ((stillDeferred: number) => string), target: NativeThread | null = null) =>
        uow.thread(threadId, "ThreadCompaction.refuse")(
          Effect.flatMap(deferredLeft(target), (stillDeferred) =>
            receipt({ ...empty, reason: typeof reason === "string" ? reason : reason(stillDeferred), reasonCode, stillDeferred }))
        )
      if (providerThread.activeNativeThreadId === null) return yield* refuse("no_native_thread", noNativeThreadReason(providerThread.providerInstance))
      const found = yield* store.getNativeThread(providerThread.activeNativeThreadId)
      if (found._tag === "None") return yield* refuse("native_thread_missing", "the native thread record is missing")
      if (found.value.status === "replaced") {
        // An untrusted native thread is never written to again: the next turn start replaces it.
        return yield* refuse("native_thread_untrusted", "the native thread is no longer trusted; the next turn starts a replacement and delivers the history")
      }
      let native = found.value
      const { ratio } = yield* calibration.current(providerThread.providerInstance)
      const used = usedAt(ratio)
      const compactThread = adapter.compactThread
      const inject = adapter.injectHistory
      if (compactThread === undefined && inject === undefined) {
        return yield* refuse("not_supported", `${adapter.instance} can neither compact natively nor take history outside a turn: nothing to do. ` +
          `Deferred history is delivered at the next turn start as the budget allows; /offload makes it smaller (a summary)`, native)
      }
      const usedBefore = used(native)
      if (compactThread === undefined) return yield* drainOnly(threadId, providerThread, adapter, native, ratio, usedBefore, receipt)
      // No compaction loops: after N attempts in a row on an unchanged native thread that freed nothing, stop calling
      // the provider and say why. The count is about that unchanged thread: once a turn, an injection or newly owed
      // history has changed it since the last attempt, compaction may free something again and the count restarts.
      const owedBefore = yield* owedLocked(threadId, providerThread, native)
      const last = yield* lastCompaction(threadId, native.id)
      const withoutProgress = last !== undefined && sameState(last.payload.state, stateOf(native, owedBefore))
        ? native.compactionsWithoutProgress
        : 0
      if (withoutProgress >= config.maxCompactionsWithoutProgress) {
        return yield* uow.thread(threadId, "ThreadCompaction.noProgress")(receipt({
          ...empty,
          usedBefore,
          usedAfter: usedBefore,
          stillDeferred: owedBefore.filter((o) => o.delivery.status === "deferred").length,
          reasonCode: "no_progress",
          reason: `compaction freed nothing the last ${withoutProgress} times ` +
            `(${usedBefore} tokens used); not retried. The thread stays usable: send a message, or switch provider`
        }))
      }
      let progressed = false

      const compactOnce = Effect.gen(function*() {
        const before = used(native)
        const seen = native
        const result = yield* compactThread(native.nativeRef)
        const after = UsageSanity.check(result.usageAfter, providerThread.contextWindow, config.budget.defaultWindow).usage
        // The outcome is written only over the record the compaction started from: an operation that wrote the native
        // thread meanwhile (a turn sent while the provider compacted, and its usage report) is newer than what the
        // compaction returned, or at worst counts more than the thread holds, so its record stays (sim race
        // "/compact, inside its provider call, send": the compaction's 2,000 overwrote the turn's 10,000).
        native = yield* uow.thread(threadId, "ThreadCompaction.compactedNative")(Effect.gen(function*() {
          const stored = yield* store.getNativeThread(seen.id)
          const later = !config.mutations.has("compaction_overwrites_later")
          if (later && stored._tag === "Some" && !unchangedSince(stored.value, seen)) return stored.value
          // A compaction frees what a rejection measured: the floor goes (`KnownUsage.withoutFloor`).
          const compacted: NativeThread = {
            ...KnownUsage.withoutFloor(seen),
            usage: after ?? seen.usage,
            estimatedTokens: after === null ? seen.estimatedTokens : Calibration.toRaw(ratio, after.usedTokens),
            updatedAt: yield* DateTime.now
          }
          yield* store.updateNativeThread(compacted)
          return compacted
        }))
        if (used(native) < before) progressed = true
      })

      native = yield* reconcileUncertain(threadId, providerThread, adapter, native)
      const owed = (yield* owedLocked(threadId, providerThread, native)).filter((o) => o.delivery.status === "deferred")
      let injected: Injected = nothingInjected
      if (owed.length > 0 && inject !== undefined) {
        const headroom = () => headroomOf(providerThread, native, ratio)
        let room = headroom()
        let plan = yield* delivery.plan(threadId, owed, room, ratio)
        let compactedFirst = false
        if (plan.selection.omittedItemIds.length > 0 || plan.selection.selected.length === 0) {
          yield* compactOnce
          compactedFirst = true
          room = headroom()
          // Whether anything fits now. What is injected is planned again in `injectPlan`, under the thread's lock, from
          // what is still deferred then: a turn sent while the provider compacted may have delivered some of it
          // meanwhile (sim seed 48304: the drain injected the merge's 24 items a second time).
          plan = yield* delivery.plan(threadId, owed, room, ratio)
        }
        if (plan.selection.selected.length > 0) {
          const outcome = yield* injectPlan(threadId, providerThread, adapter, inject, native, room, ratio)
          native = outcome.native
          injected = outcome.injected
          // Nothing left to inject by then (delivered meanwhile) after a first compaction: nothing to compact again.
          if (outcome.planned || !compactedFirst) yield* compactOnce
        } else if (!compactedFirst) {
          yield* compactOnce
        }
      } else {
        yield* compactOnce
      }
      const compactions = progressed || injected.items > 0 ? 0 : withoutProgress + 1
      return yield* uow.thread(threadId, "ThreadCompaction.compacted")(Effect.gen(function*() {
        // The native thread as stored now (an operation may have written it since the compaction's own write): only
        // the count of compactions without progress is the compaction's to set.
        const stored = config.mutations.has("compaction_overwrites_later") ? Option.none() : yield* store.getNativeThread(native.id)
        const outcome: NativeThread = {
          ...Option.getOrElse(stored, () => native),
          compactionsWithoutProgress: compactions
        }
        const usedAfter = used(outcome)
        yield* store.updateNativeThread(outcome)
        const owedAfter = yield* delivery.owedTo(threadId, providerThread, outcome)
        yield* store.appendEvent({ threadId, type: "thread.compacted", payload: {
          nativeThreadId: outcome.id,
          usedBefore,
          usedAfter,
          delivered: injected.items,
          state: stateOf(outcome, owedAfter)
        }, commandId: receiptKey?.commandId ?? null })
        return yield* receipt({
          compacted: true,
          reason: null,
          reasonCode: null,
          usedBefore,
          usedAfter,
          deliveredItems: injected.items,
          deliveredTokens: injected.tokens,
          omittedItems: injected.omitted,
          stillDeferred: owedAfter.filter((o) => o.delivery.status === "deferred").length
        })
      }))
    })

    /**
     * Uncertain (`pending`) deliveries are never drained again: they are read back first where the adapter can;
     * whatever stays uncertain is left to the next turn start (which replaces the native thread). Returns the native
     * thread as stored after the read-back.
     */
    const reconcileUncertain = (
      threadId: ThreadId,
      providerThread: ProviderThread,
      adapter: ProviderAdapter.ProviderAdapterShape,
      native: NativeThread
    ) =>
      Effect.gen(function*() {
        const uncertain = yield* store.listDeliveriesByStatus(native.id, "pending")
        if (uncertain.length > 0 && (yield* turnStart.reconcile(threadId, providerThread, native, uncertain, adapter))) {
          const reread = yield* store.getNativeThread(native.id)
          if (reread._tag === "Some") return reread.value
        }
        return native
      })

    /** What fits physically in `native` now (provider tokens, reserve included): the window less its usage. */
    const headroomOf = (providerThread: ProviderThread, native: NativeThread, ratio: number) =>
      Budget.compute({
        modelWindow: providerThread.contextWindow ?? undefined,
        usage: KnownUsage.of(native, ratio),
        estimatedUsedTokens: native.estimatedTokens,
        requestTokens: 0,
        ratio
      }, config.budget).physicalHeadroom

    /**
     * Injects what is still deferred toward `native` into it, as far as `room` (provider tokens) allows: the plan and
     * the `pending` intent in one unit of work, then the adapter, then the deliveries settled `injected` with the native
     * thread's usage (a lost acknowledgement is read back; deliveries that stay uncertain are left `pending` for the
     * next turn start). Returns the native thread after it, what arrived, and whether anything was planned (`false`:
     * nothing deferred fits by then, nothing was sent).
     */
    const injectPlan = (
      threadId: ThreadId,
      providerThread: ProviderThread,
      adapter: ProviderAdapter.ProviderAdapterShape,
      inject: NonNullable<ProviderAdapter.ProviderAdapterShape["injectHistory"]>,
      native: NativeThread,
      room: number,
      ratio: number
    ) =>
      Effect.gen(function*() {
        // Planned under the thread's lock, from what is still `deferred`, in the unit of work that writes the `pending`
        // intent: a turn start that delivered some of it since the caller read what was owed (a turn sent while the
        // provider compacted, or between that read and this unit of work) is neither delivered a second time nor set
        // back to `pending` over its own delivery (review r46: the plan was read before, outside the lock).
        const planned = yield* uow.thread(threadId, "ThreadCompaction.pending")(Effect.gen(function*() {
          // A native thread replaced meanwhile (a turn sent while the provider compacted found it full and started a
          // replacement) is owed nothing more: what was deferred is the replacement's to take, and the replacement's
          // handoff owes everything the old one already holds (sim seed 57206: the drain injected it a second time).
          const stored = yield* store.getNativeThread(native.id)
          if (stored._tag === "Some" && stored.value.status !== "active") return null
          const owedNow = (yield* delivery.owedTo(threadId, providerThread, native)).filter((o) => o.delivery.status === "deferred")
          const current = owedNow.length === 0 ? null : yield* delivery.plan(threadId, owedNow, room, ratio)
          if (current === null || current.selection.selected.length === 0) return null
          return { plan: current, pending: yield* delivery.markPending(threadId, current, "injected", null, room, ratio) }
        }))
        if (planned === null) return { native, injected: nothingInjected, planned: false }
        const { pending, plan } = planned
        const arrived: Injected = {
          items: plan.selection.selected.length,
          tokens: plan.selection.tokens,
          omitted: plan.selection.omittedItemIds.length
        }
        const outcome = yield* inject({
          nativeRef: native.nativeRef,
          rendered: plan.selection.rendered,
          itemIds: plan.selection.selected.map((i) => i.id),
          deliveryIds: pending.map((d) => d.id),
          recordedResults: recordedToolResults(store, threadId)
        }).pipe(Effect.either)
        if (outcome._tag === "Left") {
          // A rejection as over the window teaches the calibration first (its own unit of work, before the read-back):
          // a /compact retried after a crash plans the next injection with it instead of sending the rejected one again.
          // In the same unit of work it records the least the native thread holds (`KnownUsage.floorOf`), as a turn
          // start's rejected injection does: a drain that no compaction follows (a model API) left a stale report to
          // plan the next turn start with, and it sent the same history again.
          yield* uow.thread(threadId, "ThreadCompaction.overflowLearned")(Effect.gen(function*() {
            const learned = yield* calibration.learnFromOverflow(
              threadId,
              providerThread.providerInstance,
              native.usage === null ? null : { usedTokens: native.usage.usedTokens, unreportedTokens: 0 },
              outcome.left,
              plan.selection.tokens
            )
            const floor = KnownUsage.floorOf(outcome.left, learned.ratio, plan.selection.tokens)
            if (floor !== null) yield* KnownUsage.raiseFloor(store, native.id, floor)
          }))
          // Lost acknowledgement: read back now; if that is impossible the deliveries stay `pending`. The native thread
          // is read again either way (the rejection may have raised its floor): the compaction that follows starts from it.
          const reconciled = yield* turnStart.reconcile(threadId, providerThread, native, pending, adapter)
          const reread = yield* store.getNativeThread(native.id)
          if (!reconciled) return { native: Option.getOrElse(reread, () => native), injected: nothingInjected, planned: true }
          const settled = (yield* store.listDeliveriesOfThread(threadId)).filter((d) =>
            pending.some((p) => p.id === d.id) && d.status === "injected"
          )
          return { native: reread._tag === "Some" ? reread.value : native, injected: settled.length > 0 ? arrived : nothingInjected, planned: true }
        }
        const acknowledged = outcome.right
        const updated = yield* uow.thread(threadId, "ThreadCompaction.injected")(Effect.gen(function*() {
          yield* delivery.markSettled(threadId, pending, "injected")
          const now = yield* DateTime.now
          // An operation that wrote the native thread meanwhile (a turn sent during the injection) is kept: the block
          // is added to its record, and the acknowledgement's report (maybe older than that turn's) is not used.
          const raced = Option.filter(yield* store.getNativeThread(native.id), (stored) => !unchangedSince(stored, native))
          const base = Option.getOrElse(raced, () => native)
          // An adapter that reports no usage for an injection (the model APIs: no request is sent) leaves the last
          // reported usage stale: it is advanced by the block's size in the provider's units until a request reports.
          const reported = Option.isSome(raced) ? null : UsageSanity.check(acknowledged.usage, providerThread.contextWindow, config.budget.defaultWindow).usage
          const next: NativeThread = {
            // A rejection's floor rises by the block (`KnownUsage.afterGrowth`).
            ...(yield* KnownUsage.afterGrowth(store, base, ratio, plan.selection.tokens, reported)),
            usage: reported ?? (base.usage === null ? null : {
              ...base.usage,
              usedTokens: base.usage.usedTokens + Calibration.apply(ratio, plan.selection.tokens)
            }),
            estimatedTokens: base.estimatedTokens + plan.selection.tokens,
            updatedAt: now
          }
          yield* store.updateNativeThread(next)
          return next
        }))
        return { native: updated, injected: arrived, planned: true }
      })

    /**
     * `/compact` on an adapter that injects but cannot compact (the model APIs): the deferred history is injected as
     * far as the window allows less `maxOutputTokens` (nothing compacts afterwards, so the next answer must still
     * fit), and the report is `compacted: false` with what was delivered, what stays deferred, and what to do to make
     * the rest fit. No `thread.compacted` event (nothing was compacted); the deliveries have their own events.
     */
    const drainOnly = (
      threadId: ThreadId,
      providerThread: ProviderThread,
      adapter: ProviderAdapter.ProviderAdapterShape,
      start: NativeThread,
      ratio: number,
      usedBefore: number,
      receipt: (report: CompactReport) => Effect.Effect<CompactReport, PersistenceError | ConcurrentModification>
    ) =>
      Effect.gen(function*() {
        const inject = adapter.injectHistory!
        let native = yield* reconcileUncertain(threadId, providerThread, adapter, start)
        const owed = (yield* owedLocked(threadId, providerThread, native)).filter((o) => o.delivery.status === "deferred")
        const answerRoom = adapter.maxOutputTokens ?? 0
        const room = Math.max(0, headroomOf(providerThread, native, ratio) - answerRoom)
        let injected: Injected = nothingInjected
        if (owed.length > 0) {
          const plan = yield* delivery.plan(threadId, owed, room, ratio)
          if (plan.selection.selected.length > 0) {
            const outcome = yield* injectPlan(threadId, providerThread, adapter, inject, native, room, ratio)
            native = outcome.native
            injected = outcome.injected
          }
        }
        const usedAfter = usedAt(ratio)(native)
        const done = native
        return yield* uow.thread(threadId, "ThreadCompaction.drained")(Effect.gen(function*() {
          const stillDeferred = (yield* delivery.owedTo(threadId, providerThread, done)).filter((o) => o.delivery.status === "deferred").length
          const what = owed.length === 0
            ? "no history was owed to it"
            : injected.items > 0
            ? `${injected.items} deferred item(s) were injected into it (${room} tokens were free with ${answerRoom} kept for the next answer)`
            : `the deferred history did not fit (${room} tokens free with ${answerRoom} kept for the next answer)`
          return yield* receipt({
            compacted: false,
            reasonCode: "not_supported",
            reason: `${adapter.instance} cannot compact natively: its native thread is the message list Baton sends. ` +
              `${what[0]!.toUpperCase()}${what.slice(1)}; ${stillDeferred} handoff(s) still deferred. ` +
              `To make owed history fit, /offload summarises it (what is owed becomes the summary and the newer items), then /compact again; ` +
              `the message list itself shrinks only by tool-result offload (answered tool results stubbed as it grows)`,
            usedBefore,
            usedAfter,
            deliveredItems: injected.items,
            deliveredTokens: injected.tokens,
            omittedItems: injected.omitted,
            stillDeferred
          })
        }))
      })

    return { compact }
  })
}) {}
