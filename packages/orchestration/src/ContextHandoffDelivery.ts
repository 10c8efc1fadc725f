/**
 * ContextHandoffDelivery: the delivery lifecycle of context handoffs toward one destination native thread.
 *
 *   deferred ──(budget fits)──> pending ──(provider ack)──> injected | inline
 *      │  ^                         │
 *      │  └──(turn not started)─────┘        any non-settled ──(native thread replaced)──> superseded
 *      └──(budget below minimum: deferCount+1, prompt unchanged)──> deferred
 *
 * It owns: creating handoffs and their per-destination deliveries, choosing what fits a budget (via
 * `@baton/context` Selection), writing the `pending` intent before any provider side effect and the outcome after,
 * and superseding deliveries a replacement or an `/offload` summary covers. It does not own the provider call order
 * of a turn (that is ProviderTurnStartService), `/compact` (ThreadCompaction) nor `/offload` (ThreadOffload).
 */
import {
  type ContextHandoff,
  type HandoffDelivery,
  type HandoffKind,
  isBatonToolItem,
  type Item,
  type ItemId,
  type NativeThread,
  type NativeThreadId,
  type ProviderThread,
  type Run,
  type RunId,
  settledDeliveryStatuses,
  type ThreadId
} from "@baton/contracts"
import { Calibration, Selection, TokenCounter } from "@baton/context"
import { ThreadStore, type StoredHandoff } from "@baton/persistence"
import { DateTime, Effect } from "effect"
import { IdGenerator } from "./IdGenerator.js"
import * as Span from "./internal/Span.js"

/**
 * Items that are never owed to another native thread: provider-private reasoning, Baton's own markers, and calls to
 * Baton's own tools with their results (`isBatonToolItem`: derived from history that is handed over itself).
 */
export const isTransferable = (item: Item) => item.kind !== "reasoning" && item.kind !== "handoff_marker" && !isBatonToolItem(item)

/**
 * What a new handoff's `handoff.created` event adds: `lateOutputOf`, the run whose output arrived after a switch;
 * `supersedes`, the handoffs an `/offload` summary replaced.
 */
export interface HandoffNote {
  readonly lateOutputOf?: RunId
  readonly supersedes?: ReadonlyArray<ContextHandoff["id"]>
}

/** One open handoff with its delivery toward the destination native thread. */
export interface OwedHandoff {
  readonly handoff: StoredHandoff
  readonly delivery: HandoffDelivery
}

/** The plan for a delivery: what is sent, what is omitted, the rendered text and its exact token count. */
export interface DeliveryPlan {
  readonly owed: ReadonlyArray<OwedHandoff>
  readonly selection: Selection.Selection<Item>
  readonly items: ReadonlyArray<Item>
}

export class ContextHandoffDelivery extends Effect.Service<ContextHandoffDelivery>()(
  "@baton/orchestration/ContextHandoffDelivery",
  {
    effect: Effect.gen(function*() {
      const store = yield* ThreadStore
      const ids = yield* IdGenerator
      const counter = yield* TokenCounter.TokenCounter

      /**
       * Whether an item is covered by the thread's latest `/offload` summary: every item up to its cut, and every
       * earlier summary of the chain (the latest extends them). `null` when the thread has no offload.
       */
      const coveredByLatest = (threadId: ThreadId) =>
        Effect.gen(function*() {
          const offloads = yield* store.listOffloads(threadId)
          const latest = offloads.at(-1)
          if (latest === undefined) return null
          const earlier = new Set<string>(offloads.slice(0, -1).map((o) => o.summaryItemId))
          return { offload: latest, covered: (item: Item) => item.seq <= latest.cutSeq || earlier.has(item.id) }
        })

      /**
       * Whether `target` holds, or is owed, an item that `covered` accepts: an item of a run that ran on its active
       * native thread, an item a delivery settled (`injected` / `inline`) into that native thread, or an item that an
       * open handoff toward it owes (`handoffs`: those toward `target`, as read by the caller; `except`: their ids
       * left out, the handoffs being replaced). A summary of such items cannot be owed to `target` without some of
       * them reaching it twice (invariant 2). Fails with `PersistenceError`.
       */
      const holdsCovered = (
        threadId: ThreadId,
        target: ProviderThread,
        covered: (item: Item) => boolean,
        handoffs: ReadonlyArray<StoredHandoff>,
        except: ReadonlySet<string> = new Set()
      ) =>
        Effect.gen(function*() {
          const ids = new Set<ItemId>()
          for (const handoff of handoffs) {
            if (handoff.open && !except.has(handoff.id)) for (const id of handoff.itemIds) ids.add(id)
          }
          const native = target.activeNativeThreadId
          let runIds: Array<RunId> = []
          if (native !== null) {
            for (const status of ["injected", "inline"] as const) {
              for (const d of yield* store.listDeliveriesByStatus(native, status)) for (const id of d.deliveredItemIds) ids.add(id)
            }
            runIds = (yield* store.listRuns(threadId)).filter((r) => r.nativeThreadId === native).map((r) => r.id)
          }
          if (ids.size > 0 && (yield* store.getItems([...ids])).some(covered)) return true
          return runIds.length > 0 && (yield* store.listItemsOfRuns(runIds)).some(covered)
        })

      /**
       * The model-visible form of `items` owed to `target`: items an `/offload` summary covers (`seq <= cutSeq` of
       * the thread's latest offload) are owed as that summary instead — once: not again when a handoff toward
       * `target` already owes it (open) or delivered it to its active native thread. Invariant 2's "superseded by a
       * summary that covers it"; the originals stay readable by id. The summary stands for everything up to its
       * cut, so a `target` that already holds or is owed any item it covers (`holdsCovered`: it ran natively there,
       * or was delivered or is owed verbatim) is owed `items` as they are instead: the summary would bring it those
       * items a second time.
       */
      const throughSummary = (threadId: ThreadId, target: ProviderThread, items: ReadonlyArray<Item>) =>
        Effect.gen(function*() {
          const latest = yield* coveredByLatest(threadId)
          if (latest === null) return items
          const cutSeq = latest.offload.cutSeq
          if (!items.some((i) => i.seq <= cutSeq)) return items
          const tail = items.filter((i) => i.seq > cutSeq)
          const summaryId = latest.offload.summaryItemId
          const handoffs = yield* store.listHandoffsTo(target.id)
          for (const handoff of handoffs) {
            if (!handoff.itemIds.includes(summaryId)) continue
            if (handoff.open) return tail
            if (target.activeNativeThreadId === null) continue
            const d = yield* store.findDelivery(handoff.id, target.activeNativeThreadId)
            if (d._tag === "Some" && (d.value.status === "injected" || d.value.status === "inline") &&
              d.value.deliveredItemIds.includes(summaryId)) return tail
          }
          if (yield* holdsCovered(threadId, target, latest.covered, handoffs)) return items
          return [...(yield* store.getItems([summaryId])), ...tail]
        })

      /** Writes an open handoff owing `items` (in this order) to `target`, and its `handoff.created` event. */
      const insertHandoff = (
        threadId: ThreadId,
        kind: HandoffKind,
        target: ProviderThread["id"],
        sourceRunIds: ReadonlyArray<RunId>,
        items: ReadonlyArray<Item>,
        note: HandoffNote
      ) =>
        Effect.gen(function*() {
          const now = yield* DateTime.now
          const handoff: StoredHandoff = {
            id: ids.next("hof") as ContextHandoff["id"],
            threadId,
            kind,
            targetProviderThreadId: target,
            open: true,
            sourceRunIds,
            itemIds: items.map((i) => i.id),
            tokens: items.reduce((n, i) => n + i.tokens, 0),
            omittedItemIds: [],
            createdAt: now,
            updatedAt: now
          }
          yield* store.insertHandoff(handoff)
          yield* store.appendEvent({ threadId, type: "handoff.created", payload: {
            handoffId: handoff.id,
            kind,
            targetProviderThreadId: target,
            itemCount: items.length,
            sourceRunIds,
            ...note
          } })
          return handoff
        })

      /**
       * Creates a handoff of `kind` owing the transferable items of `runs` (or only `only`, items of those runs) to
       * `target` (items an `/offload` summary covers are owed as that summary, see `throughSummary`); `note` is added
       * to the `handoff.created` event. Returns `null` (and writes
       * nothing) when the runs hold no transferable item.
       */
      const createHandoff = Span.fn("ContextHandoffDelivery.createHandoff")(function*(
        threadId: ThreadId,
        kind: HandoffKind,
        target: ProviderThread,
        runs: ReadonlyArray<Run>,
        only: ReadonlyArray<Item> | null = null,
        note: HandoffNote = {}
      ) {
        if (runs.length === 0) return null
        const original = (only ?? (yield* store.listItemsOfRuns(runs.map((r) => r.id)))).filter(isTransferable)
        if (original.length === 0) return null
        const items = yield* throughSummary(threadId, target, original)
        if (items.length === 0) return null
        return yield* insertHandoff(threadId, kind, target.id, runs.map((r) => r.id), items, note)
      })

      /**
       * The ids of the runs whose history `target` already owes or holds through a handoff: listed by a handoff
       * toward it that is still open (owed to whichever native thread is active), or by one settled (`injected` /
       * `inline`) to `native`. A fork or merge run, whose items its own handoff owes, is therefore never owed a second
       * time by a switch or by missed-run recovery. Fails with `PersistenceError`.
       */
      const coveredRuns = Span.fn("ContextHandoffDelivery.coveredRuns")(function*(
        target: ProviderThread,
        native: NativeThreadId | null
      ) {
        return new Set<string>(yield* store.listCoveredSourceRunIds(target.id, native))
      })

      /**
       * Missed-run recovery: owes the items of `runs` to `target`, reusing the newest open handoff toward it whose
       * delivery to `native` is still `deferred` (or not yet created) instead of allocating a new record. Runs that a
       * handoff toward `target` already covers (see `coveredRuns`) are not owed again.
       */
      const recoverMissedRuns = Span.fn("ContextHandoffDelivery.recoverMissedRuns")(function*(
        threadId: ThreadId,
        target: ProviderThread,
        native: NativeThread,
        missed: ReadonlyArray<Run>
      ) {
        if (missed.length === 0) return null
        const covered = yield* coveredRuns(target, native.id)
        const runs = missed.filter((r) => !covered.has(r.id))
        if (runs.length === 0) return null
        const open = yield* store.listOpenHandoffs(target.id)
        for (const handoff of [...open].reverse()) {
          const delivery = yield* store.findDelivery(handoff.id, native.id)
          if (delivery._tag === "Some" && delivery.value.status !== "deferred") continue
          const known = new Set<string>(handoff.sourceRunIds)
          const fresh = runs.filter((r) => !known.has(r.id))
          if (fresh.length === 0) return handoff
          // Items an /offload summary covers are owed as the summary (see throughSummary), here as in createHandoff.
          const items = yield* throughSummary(
            threadId,
            target,
            (yield* store.listItemsOfRuns(fresh.map((r) => r.id))).filter(isTransferable)
          )
          const now = yield* DateTime.now
          const known2 = new Set<string>(handoff.itemIds)
          const addedItems = items.filter((i) => !known2.has(i.id))
          const added = addedItems.map((i) => i.id)
          const updated: StoredHandoff = {
            ...handoff,
            sourceRunIds: [...handoff.sourceRunIds, ...fresh.map((r) => r.id)],
            itemIds: [...handoff.itemIds, ...added],
            tokens: handoff.tokens + addedItems.reduce((n, i) => n + i.tokens, 0),
            updatedAt: now
          }
          yield* store.updateHandoff(updated)
          yield* store.appendEvent({ threadId, type: "handoff.extended", payload: {
            handoffId: handoff.id,
            addedItemIds: added,
            addedRunIds: fresh.map((r) => r.id)
          } })
          return updated
        }
        return yield* createHandoff(threadId, "missed_run", target, runs)
      })

      /** The open handoffs toward `target`, each with its delivery to `native` (created `deferred` when missing). */
      const owedTo = Span.fn("ContextHandoffDelivery.owedTo")(function*(
        threadId: ThreadId,
        target: ProviderThread,
        native: NativeThread
      ) {
        const open = yield* store.listOpenHandoffs(target.id)
        const owed: Array<OwedHandoff> = []
        for (const handoff of open) {
          const found = yield* store.findDelivery(handoff.id, native.id)
          if (found._tag === "Some" && settledDeliveryStatuses.includes(found.value.status)) {
            // Already settled toward this native thread (the handoff's close was lost): close it, owe nothing.
            const now = yield* DateTime.now
            yield* store.updateHandoff({ ...handoff, open: false, updatedAt: now })
            continue
          }
          if (found._tag === "Some") {
            owed.push({ handoff, delivery: found.value })
            continue
          }
          const now = yield* DateTime.now
          const delivery: HandoffDelivery = {
            id: ids.next("dlv") as HandoffDelivery["id"],
            handoffId: handoff.id,
            nativeThreadId: native.id,
            status: "deferred",
            mode: null,
            runId: null,
            deliveredItemIds: [],
            omittedItemIds: [],
            deliveredTokens: 0,
            deferCount: 0,
            lastDeferReason: null,
            createdAt: now,
            updatedAt: now
          }
          yield* store.insertDelivery(delivery)
          yield* store.appendEvent({ threadId, type: "delivery.created", payload: {
            deliveryId: delivery.id,
            handoffId: handoff.id,
            nativeThreadId: native.id
          } })
          owed.push({ handoff, delivery })
        }
        return owed
      })

      /**
       * Selects what of the owed history fits `budget` provider tokens (rendered, envelope included). Selection
       * counts Baton tokens, so it selects under `Calibration.rawBudget(ratio, budget)`: the rendered history, at
       * the provider's calibration `ratio` (default 1), never costs the provider more than `budget`. `known`: items
       * the caller read in the same unit of work (a replacement's whole history), not read again; the rest of the
       * owed items are read by id.
       */
      const plan = Span.fn("ContextHandoffDelivery.plan")(function*(
        threadId: ThreadId,
        owed: ReadonlyArray<OwedHandoff>,
        budget: number,
        ratio: number = 1,
        known: ReadonlyArray<Item> = []
      ) {
        const wanted = new Set<ItemId>()
        for (const o of owed) for (const id of o.handoff.itemIds) wanted.add(id)
        // Thread order, with an `/offload` summary placed where the history it stands for ends (right after its cut).
        const summaryAt = new Map<string, number>((yield* store.listOffloads(threadId)).map((o) => [o.summaryItemId, o.cutSeq + 0.5]))
        const position = (i: Item) => summaryAt.get(i.id) ?? i.seq
        const have = known.filter((i) => wanted.has(i.id))
        const held = new Set<string>(have.map((i) => i.id))
        const missing = held.size === 0 ? [...wanted] : [...wanted].filter((id) => !held.has(id))
        const read = missing.length === 0 ? [] : yield* store.getItems(missing)
        const items = have.length === 0 && summaryAt.size === 0
          ? read
          : [...have, ...read].sort((a, b) => position(a) - position(b))
        // Pinned items (the thread's tool-result offload control) are never stubs, and go first after the newest.
        const pinned = new Set<string>((yield* store.getOffloadControl(threadId)).pinnedItemIds ?? [])
        // The selection takes tens of ms for 10,000 items: the event loop turns before it and between its steps
        // (`Selection.selectYielding`; the reads before it yield too, see ThreadStore's `inChunks`).
        yield* Effect.yieldNow()
        const selection = yield* Selection.selectYielding({ items, budget: Calibration.rawBudget(ratio, budget), threadId, counter, stubs: true, pinned })
        return { owed, selection, items } satisfies DeliveryPlan
      })

      /** Records a deferral of every owed delivery: `deferCount + 1`, the reason, one event each. */
      const defer = Span.fn("ContextHandoffDelivery.defer")(function*(
        threadId: ThreadId,
        owed: ReadonlyArray<OwedHandoff>,
        budget: number,
        reason: string
      ) {
        const now = yield* DateTime.now
        const out: Array<HandoffDelivery> = []
        for (const { delivery } of owed) {
          const next: HandoffDelivery = {
            ...delivery,
            status: "deferred",
            deferCount: delivery.deferCount + 1,
            lastDeferReason: reason,
            updatedAt: now
          }
          yield* store.updateDelivery(next)
          yield* store.appendEvent({ threadId, type: "delivery.deferred", payload: {
            deliveryId: delivery.id,
            handoffId: delivery.handoffId,
            budget,
            reason,
            deferCount: next.deferCount
          } })
          out.push(next)
        }
        return out
      })

      /**
       * Writes the `pending` intent (before the provider side effect) for every owed delivery of `plan` that has at
       * least one selected item: the mode, the run, and the handoff's share of the selected and omitted items. A
       * handoff of which nothing was selected (the budget went to other owed history) is deferred, not settled with
       * everything omitted: it is retried at the next turn start. Returns the `pending` deliveries. The event records
       * the `budget` (provider tokens), the `renderedTokens` (Baton tokens) and the calibration `ratio` it was planned
       * under, so invariant 5 can be checked in the provider's units (`Calibration.apply(ratio, renderedTokens) <=
       * budget`).
       */
      const markPending = Span.fn("ContextHandoffDelivery.markPending")(function*(
        threadId: ThreadId,
        deliveryPlan: DeliveryPlan,
        mode: "injected" | "inline",
        runId: RunId | null,
        budget: number,
        ratio: number = 1
      ) {
        const now = yield* DateTime.now
        const selected = new Set<string>(deliveryPlan.selection.selected.map((i) => i.id))
        const tokensOf = new Map<string, number>(deliveryPlan.items.map((i) => [i.id, i.tokens]))
        const out: Array<HandoffDelivery> = []
        const untouched: Array<OwedHandoff> = []
        for (const owed of deliveryPlan.owed) {
          const { delivery, handoff } = owed
          const deliveredItemIds = handoff.itemIds.filter((id) => selected.has(id))
          if (deliveredItemIds.length === 0) {
            untouched.push(owed)
            continue
          }
          const omittedItemIds = handoff.itemIds.filter((id) => !selected.has(id))
          const next: HandoffDelivery = {
            ...delivery,
            status: "pending",
            mode,
            runId,
            deliveredItemIds,
            omittedItemIds,
            deliveredTokens: deliveredItemIds.reduce((n, id) => n + (tokensOf.get(id) ?? 0), 0),
            updatedAt: now
          }
          yield* store.updateDelivery(next)
          yield* store.appendEvent({ threadId, type: "delivery.pending", payload: {
            deliveryId: next.id,
            handoffId: handoff.id,
            mode,
            runId,
            budget,
            renderedTokens: deliveryPlan.selection.tokens,
            ratio,
            itemIds: deliveredItemIds,
            omittedItemIds
          } })
          out.push(next)
        }
        if (untouched.length > 0) {
          yield* defer(threadId, untouched, budget, `none of its items fit beside the other owed history (budget ${budget})`)
        }
        return out
      })

      /**
       * Settles `pending` deliveries as `injected`/`inline` after the provider acknowledged; closes their handoffs.
       * Returns the deliveries this call settled (as they were while `pending`, `updatedAt` the settling time): one settled, reverted or superseded
       * meanwhile is left as it is and not returned.
       */
      const markSettled = (threadId: ThreadId, deliveries: ReadonlyArray<HandoffDelivery>, status: "injected" | "inline") =>
        // No deliveries (a turn with no inline history, the common one): nothing to read or write, no span.
        deliveries.length === 0 ? Effect.succeed<Array<HandoffDelivery>>([]) : settle(threadId, deliveries, status)
      const settle = Span.fn("ContextHandoffDelivery.markSettled")(function*(
        threadId: ThreadId,
        deliveries: ReadonlyArray<HandoffDelivery>,
        status: "injected" | "inline"
      ) {
        const now = yield* DateTime.now
        const settled: Array<HandoffDelivery> = []
        for (const stale of deliveries) {
          // Conditional: a delivery another path settled, reverted or superseded meanwhile (a timed-out turn, a
          // replacement) keeps that outcome; only a still `pending` delivery settles. One statement, which writes
          // the status alone (the id lists stay as `markPending` wrote them).
          const current = yield* store.settlePendingDelivery(stale.handoffId, stale.nativeThreadId, status, now)
          if (current._tag === "None") continue
          const delivery = current.value
          yield* store.appendEvent({ threadId, type: status === "injected" ? "delivery.injected" : "delivery.inlined", payload: {
            deliveryId: delivery.id,
            handoffId: delivery.handoffId,
            deliveredItemIds: delivery.deliveredItemIds,
            omittedItemIds: delivery.omittedItemIds,
            tokens: delivery.deliveredTokens
          } })
          yield* store.setHandoffOpen(delivery.handoffId, false, delivery.omittedItemIds, now)
          settled.push(delivery)
        }
        return settled
      })

      /** Returns `pending` deliveries whose turn never reached the provider to `deferred` (no defer counted). */
      const revertToDeferred = Span.fn("ContextHandoffDelivery.revertToDeferred")(function*(
        threadId: ThreadId,
        deliveries: ReadonlyArray<HandoffDelivery>,
        reason: string
      ) {
        const now = yield* DateTime.now
        for (const stale of deliveries) {
          // Only a still `pending` delivery returns to `deferred` (see markSettled): a superseded or settled one, and
          // its closed handoff, stay as they are.
          const current = yield* store.findDelivery(stale.handoffId, stale.nativeThreadId)
          if (current._tag === "None" || current.value.status !== "pending") continue
          const delivery = current.value
          yield* store.updateDelivery({
            ...delivery,
            status: "deferred",
            mode: null,
            runId: null,
            deliveredItemIds: [],
            omittedItemIds: [],
            deliveredTokens: 0,
            lastDeferReason: reason,
            updatedAt: now
          })
          yield* store.appendEvent({ threadId, type: "delivery.deferred", payload: {
            deliveryId: delivery.id,
            handoffId: delivery.handoffId,
            budget: null,
            reason,
            deferCount: delivery.deferCount
          } })
          // The handoff owes its history again.
          const handoff = yield* store.getHandoff(delivery.handoffId)
          if (handoff._tag === "Some" && !handoff.value.open) {
            yield* store.updateHandoff({ ...handoff.value, open: true, omittedItemIds: [], updatedAt: now })
          }
        }
      })

      /**
       * Supersedes every non-settled delivery to `native` and closes the open handoffs toward `target`: a
       * replacement handoff that covers the whole history takes their place.
       */
      const supersedeForReplacement = Span.fn("ContextHandoffDelivery.supersedeForReplacement")(function*(
        threadId: ThreadId,
        target: ProviderThread,
        native: NativeThread,
        reason: string
      ) {
        const now = yield* DateTime.now
        for (const status of ["pending", "deferred"] as const) {
          for (const delivery of yield* store.listDeliveriesByStatus(native.id, status)) {
            yield* store.updateDelivery({ ...delivery, status: "superseded", updatedAt: now })
            yield* store.appendEvent({ threadId, type: "delivery.superseded", payload: { deliveryId: delivery.id, handoffId: delivery.handoffId, reason } })
          }
        }
        for (const handoff of yield* store.listOpenHandoffs(target.id)) {
          yield* store.updateHandoff({ ...handoff, open: false, updatedAt: now })
        }
      })

      /**
       * Records converge under `/offload` (invariant 2, "superseded by a summary that covers it"): every open handoff
       * that owes an item `covered` by the summary, and whose deliveries are all still `deferred` (or not created),
       * is closed and its deferred deliveries go `superseded`. Per target provider thread, one new handoff (the kind
       * of the oldest one it replaces) owes instead the summary item plus the items they owed that the summary does
       * not cover, so deferred history drains as the summary rather than the originals. A handoff with a `pending`
       * delivery is left alone (its outcome is uncertain: reconciliation decides it); settled ones are closed
       * already. So are all the handoffs toward a target that holds, or is otherwise owed, an item the summary covers
       * (`holdsCovered`): they keep owing their originals, which reach it once. Returns the superseded and the new
       * handoff ids. Runs inside the caller's transaction.
       */
      const supersedeForSummary = Span.fn("ContextHandoffDelivery.supersedeForSummary")(function*(
        threadId: ThreadId,
        summary: Item,
        covered: (itemId: ItemId) => boolean,
        reason: string
      ) {
        const now = yield* DateTime.now
        // Only open handoffs can be superseded: the closed ones and their deliveries (every earlier switch's, with
        // id lists that grow with the history) are not read (bench/growth.bench.ts).
        const deliveries = yield* store.listDeliveriesOfOpenHandoffs(threadId)
        const candidates = new Map<ProviderThread["id"], Array<StoredHandoff>>()
        for (const handoff of yield* store.listOpenHandoffsOfThread(threadId)) {
          if (!handoff.itemIds.some(covered)) continue
          if (deliveries.some((d) => d.handoffId === handoff.id && d.status === "pending")) continue
          candidates.set(handoff.targetProviderThreadId, [...(candidates.get(handoff.targetProviderThreadId) ?? []), handoff])
        }
        const superseded: Array<ContextHandoff["id"]> = []
        const created: Array<ContextHandoff["id"]> = []
        for (const [targetId, replaced] of candidates) {
          // A target that holds, or is otherwise owed, an item the summary covers keeps its handoffs: the summary
          // would bring it that item a second time (see throughSummary).
          const target = yield* store.getProviderThread(targetId)
          if (target._tag === "Some") {
            const handoffs = yield* store.listHandoffsTo(target.value.id)
            const except = new Set<string>(replaced.map((h) => h.id))
            if (yield* holdsCovered(threadId, target.value, (i) => covered(i.id), handoffs, except)) continue
          }
          for (const handoff of replaced) {
            for (const d of deliveries) {
              if (d.handoffId !== handoff.id || d.status !== "deferred") continue
              yield* store.updateDelivery({ ...d, status: "superseded", updatedAt: now })
              yield* store.appendEvent({ threadId, type: "delivery.superseded", payload: { deliveryId: d.id, handoffId: handoff.id, reason } })
            }
            yield* store.updateHandoff({ ...handoff, open: false, updatedAt: now })
          }
          const uncoveredIds = [...new Set(replaced.flatMap((h) => h.itemIds.filter((id) => !covered(id))))]
          const uncovered = yield* store.getItems(uncoveredIds)
          const handoff = yield* insertHandoff(
            threadId,
            replaced[0]!.kind,
            replaced[0]!.targetProviderThreadId,
            [...new Set(replaced.flatMap((h) => h.sourceRunIds))],
            [summary, ...uncovered],
            { supersedes: replaced.map((h) => h.id) }
          )
          superseded.push(...replaced.map((h) => h.id))
          created.push(handoff.id)
        }
        return { superseded, created }
      })

      return {
        supersedeForSummary,
        createHandoff,
        coveredRuns,
        recoverMissedRuns,
        owedTo,
        plan,
        defer,
        markPending,
        markSettled,
        revertToDeferred,
        supersedeForReplacement
      }
    })
  }
) {}
