/**
 * ThreadQuery: the read side the apps use — thread pages and snapshots, runs with their items, item pages and item
 * text windows (the ref users and the model follow), handoffs with their deliveries, event pages and readiness. It
 * assembles the read models of `@baton/contracts` (`Views.ts`) from `ThreadStore` reads; it never writes and takes
 * no lock (each answer is a consistent read of committed rows per query, not one snapshot across queries).
 *
 * Apps read through it, never through the repository.
 */
import {
  type DeliveryId,
  type HandoffId,
  type HandoffIdList,
  type HandoffItemIds,
  HandoffNotFound,
  type HandoffSummary,
  type HandoffView,
  InvalidRequest,
  type ItemId,
  ItemNotFound,
  type ItemPage,
  type ItemText,
  type NativeThread,
  type NativeThreadView,
  type OffloadArchivePage,
  OffloadNotFound,
  isBatonToolItem,
  type Item,
  NotReady,
  type ProviderThread,
  type ProviderThreadView,
  type Readiness,
  RunNotFound,
  type Run,
  type RunId,
  type RunPage,
  RunStatus,
  type RunView,
  snapshotRecentRuns,
  type ThreadId,
  ThreadNotFound,
  type ThreadPage,
  type ThreadSnapshot
} from "@baton/contracts"
import { Text, Timeline } from "@baton/contracts"
import { type StoredHandoff, ThreadStore } from "@baton/persistence"
import { DateTime, Effect, Encoding, Either, Option, Schema } from "effect"
import * as RunCosts from "./RunCosts.js"
import * as Span from "./internal/Span.js"

/** The default page size of the paged reads. */
export const defaultPageSize = 100
/** How many threads' timeline folds `ThreadQuery` keeps in memory (a 5,000-run fold is about 1 MB). */
export const timelineCacheSize = 16
/** The default window of `itemText`, in characters. */
export const defaultItemTextChars = 65_536

/**
 * The keyset a thread-page cursor carries: the last thread of the previous page. A cursor is opaque but decoded from
 * client input: a string this server never issued (a NUL, which Postgres refuses in text) is not a cursor.
 */
const CursorKey = Schema.String.pipe(Schema.filter((s) => !s.includes("\u0000")))
/**
 * The creation time a cursor carries, as `DateTime.formatIso` writes it (`2026-12-07T11:41:44.432Z`). Thread times are
 * stored as that text and a page starts after the cursor's by text order, so any other text (`"x"`, a date in another
 * form) was not refused: it answered an empty last page (or a wrong one), and a client took it for the list's end.
 */
const CursorTime = Schema.String.pipe(Schema.filter((s) =>
  /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/.test(s) && !Number.isNaN(Date.parse(s)) && new Date(s).toISOString() === s
))
const Cursor = Schema.parseJson(Schema.Tuple(CursorTime, CursorKey))

const encodeCursor = (createdAt: string, id: string) =>
  Encoding.encodeBase64Url(Schema.encodeSync(Cursor)([createdAt, id]))

/** The effective window of a native thread: the smallest known of the model's, the reported max and threshold. */
const windowOf = (providerThread: ProviderThread, native: NativeThread): number | null => {
  const known = [providerThread.contextWindow, native.usage?.maxTokens ?? null, native.usage?.autoCompactThreshold ?? null]
    .filter((n): n is number => n !== null)
  return known.length === 0 ? null : Math.min(...known)
}

export class ThreadQuery extends Effect.Service<ThreadQuery>()("@baton/orchestration/ThreadQuery", {
  effect: Effect.gen(function*() {
    const store = yield* ThreadStore

    const thread = (threadId: ThreadId) =>
      Effect.flatMap(store.getThread(threadId), Option.match({
        onNone: () => Effect.fail(new ThreadNotFound({ threadId })),
        onSome: Effect.succeed
      }))

    const handoffView = (h: StoredHandoff) =>
      Effect.map(store.listDeliveriesOfHandoff(h.id), (deliveries): HandoffView => ({ ...h, deliveries }))

    /**
     * Threads oldest first, `limit` per page (default 100). `cursor` is a previous page's `nextCursor`. Fails with
     * `InvalidRequest` (a cursor this server did not issue), `PersistenceError`.
     */
    const listThreads = Span.fn("ThreadQuery.listThreads")(function*(options: {
      readonly cursor?: string | undefined
      readonly limit?: number | undefined
    }) {
      const limit = options.limit ?? defaultPageSize
      let after: { readonly createdAt: string; readonly id: string } | undefined
      if (options.cursor !== undefined) {
        const decoded = Either.flatMap(
          Either.mapLeft(Encoding.decodeBase64UrlString(options.cursor), () => "not base64url"),
          (text) => Either.mapLeft(Schema.decodeUnknownEither(Cursor)(text), () => "not a thread cursor")
        )
        if (Either.isLeft(decoded)) return yield* new InvalidRequest({ reason: `cursor: ${decoded.left}; pass a nextCursor this server returned` })
        after = { createdAt: decoded.right[0], id: decoded.right[1] }
      }
      // One more than asked tells whether another page follows.
      const rows = yield* store.listThreadsPage({ after, limit: limit + 1 })
      const threads = rows.slice(0, limit)
      const last = threads.at(-1)
      return {
        threads,
        nextCursor: rows.length > limit && last !== undefined
          ? encodeCursor(DateTime.formatIso(last.createdAt), last.id)
          : null
      } satisfies ThreadPage
    })

    /** A thread's snapshot (see `ThreadSnapshot`). Fails with `ThreadNotFound`, `PersistenceError`. */
    const snapshot = Span.fn("ThreadQuery.snapshot")(function*(threadId: ThreadId) {
      const t = yield* thread(threadId)
      const providerThreads = yield* store.listProviderThreads(t.id)
      const views: Array<ProviderThreadView> = []
      for (const p of providerThreads) {
        const natives = yield* store.listNativeThreads(p.id)
        views.push({
          ...p,
          active: p.id === t.activeProviderThreadId,
          nativeThreads: natives.map((n): NativeThreadView => ({ ...n, window: windowOf(p, n) }))
        })
      }
      const totals = yield* store.threadTotals(t.id)
      const openHandoffs = yield* Effect.forEach(yield* store.listOpenHandoffsOfThread(t.id), handoffView)
      const runsByStatus = Object.fromEntries(RunStatus.literals.map((s) => [s, totals.runsByStatus.get(s) ?? 0])) as Record<RunStatus, number>
      const recentRuns = yield* store.listRecentRuns(t.id, snapshotRecentRuns)
      // The recent runs' own costs, and the sums of every run's added by the database (not one row per run).
      const costOf = new Map((yield* store.listRunCostsOf(recentRuns.map((r) => r.id))).map((c) => [c.runId as string, c]))
      const sums = yield* store.runCostSums(t.id)
      // The summariser's charges of `/offload` operations (committed and abandoned) count in the thread's totals.
      const charges = (yield* store.listOffloadOperations(t.id)).filter((o) => o.calls > 0)
      // A gateway conversation's newest answered request (one indexed row): what its last upstream request carried,
      // not the run's cost, which after hidden thread_read rounds is every hop's sum (review r31).
      const usage = (yield* store.listEventsOfType(t.id, "gateway.usage", { limit: 1 }))[0]?.payload
      return {
        thread: t,
        activeProviderInstance: views.find((v) => v.active)?.providerInstance ?? null,
        providerThreads: views,
        recentRuns,
        openHandoffs,
        links: yield* store.listLinks(t.id),
        parentThreadId: Option.getOrNull(yield* store.getThreadParent(t.id)),
        subAgents: yield* store.listSubThreads(t.id),
        tools: (yield* store.getThreadTools(t.id)).map((tool) => ({ name: tool.name, description: tool.description })),
        gatewayRequest: usage === undefined ? null : {
          runId: usage.runId,
          promptTokens: usage.carriedTokens ?? usage.inputTokens + usage.cacheWriteTokens + usage.cacheReadTokens,
          windowTokens: usage.windowTokens
        },
        totals: {
          runs: Object.values(runsByStatus).reduce((a, b) => a + b, 0),
          runsByStatus,
          items: totals.items,
          itemTokens: totals.itemTokens,
          handoffs: totals.handoffs,
          openHandoffs: totals.openHandoffs
        },
        costs: {
          recentRuns: recentRuns.flatMap((r) => costOf.get(r.id) ?? []),
          summariser: RunCosts.summariserTotal(charges),
          totals: RunCosts.withSummaries(sums, charges)
        }
      } satisfies ThreadSnapshot
    })

    /** A thread's runs with `seq > afterSeq`, `limit` per page. Fails with `ThreadNotFound`, `PersistenceError`. */
    const listRuns = Span.fn("ThreadQuery.listRuns")(function*(threadId: ThreadId, options: {
      readonly afterSeq?: number | undefined
      readonly limit?: number | undefined
    }) {
      yield* thread(threadId)
      const limit = options.limit ?? defaultPageSize
      const rows = yield* store.listRunsPage(threadId, options.afterSeq ?? 0, limit + 1)
      const runs = rows.slice(0, limit)
      const costOf = new Map((yield* store.listRunCostsOf(runs.map((r) => r.id))).map((c) => [c.runId as string, c]))
      return {
        runs,
        costs: runs.flatMap((r) => costOf.get(r.id) ?? []),
        nextAfterSeq: rows.length > limit ? runs.at(-1)!.seq : null
      } satisfies RunPage
    })

    /**
     * The thread's run in progress: its first run not yet ended (running, or the next to run), `null` when none.
     * Fails with `ThreadNotFound`, `PersistenceError`.
     */
    const currentRun = Span.fn("ThreadQuery.currentRun")(function*(threadId: ThreadId) {
      yield* thread(threadId)
      return Option.getOrNull(yield* store.findFirstUnfinishedRun(threadId))
    })

    /**
     * A run with its attempts and items, and while it waits for tool results the open calls and the deadline.
     * `known`: the run's record as the caller has just read it (e.g. `RunDriver.awaitEnd`'s, on the run's end), taken
     * instead of reading it again; the rest is read after it, as always. Fails with `RunNotFound`, `PersistenceError`.
     */
    const run = Span.fn("ThreadQuery.run")(function*(runId: RunId, known?: Run) {
      const found = known !== undefined && known.id === runId ? Option.some(known) : yield* store.getRun(runId)
      if (found._tag === "None") return yield* new RunNotFound({ runId })
      const wait = found.value.status === "waiting" ? Option.getOrNull(yield* store.getToolWait(runId)) : null
      return {
        run: found.value,
        attempts: yield* store.listAttempts(runId),
        // Baton's own tool calls and results were run inside the turn: never shown to the client as tool calls.
        items: (yield* store.listItemsOfRuns([runId])).filter((i) => !isBatonToolItem(i)),
        cost: Option.getOrNull(yield* store.getRunCost(runId)),
        openToolCalls: wait !== null && wait.state === "open" ? wait.calls : [],
        toolResultsDeadline: wait !== null && wait.state === "open" ? wait.deadlineAt : null
      } satisfies RunView
    })

    /**
     * A thread's items with `seq > afterSeq`, `limit` per page; calls to Baton's own tools and their results
     * (`isBatonToolItem`) are left out unless `batonTools` is `"true"` (pages then hold up to `limit` of the others).
     * Fails with `ThreadNotFound`, `PersistenceError`.
     */
    const listItems = Span.fn("ThreadQuery.listItems")(function*(threadId: ThreadId, options: {
      readonly afterSeq?: number | undefined
      readonly limit?: number | undefined
      readonly batonTools?: "true" | "false" | undefined
    }) {
      yield* thread(threadId)
      const limit = options.limit ?? defaultPageSize
      const keep = options.batonTools === "true" ? () => true : (i: Item) => !isBatonToolItem(i)
      const items: Array<Item> = []
      let after = options.afterSeq ?? 0
      for (;;) {
        const rows = yield* store.listItemsPage(threadId, after, limit + 1)
        for (const row of rows.slice(0, limit)) {
          if (items.length === limit) return { items, nextAfterSeq: items.at(-1)!.seq } satisfies ItemPage
          if (keep(row)) items.push(row)
        }
        if (rows.length <= limit) return { items, nextAfterSeq: null } satisfies ItemPage
        if (items.length === limit) return { items, nextAfterSeq: items.at(-1)!.seq } satisfies ItemPage
        after = rows[limit - 1]!.seq
      }
    })

    /**
     * One item with the window `[offset, offset + limit)` of its text, in characters (UTF-16 code units; default
     * offset 0, limit 65,536). An offset past the end gives an empty window. Fails with `ItemNotFound`,
     * `PersistenceError`.
     */
    const itemText = Span.fn("ThreadQuery.itemText")(function*(itemId: ItemId, options: {
      readonly offset?: number | undefined
      readonly limit?: number | undefined
    }) {
      const found = yield* store.getItem(itemId)
      if (found._tag === "None") return yield* new ItemNotFound({ itemId })
      const item = found.value
      const totalChars = item.text.length
      // Never half a surrogate pair: a boundary inside one moves to the pair's start (`offset` says where it starts).
      const { end, start: offset } = Text.characterWindow(item.text, options.offset ?? 0, options.limit ?? defaultItemTextChars)
      return {
        item: { ...item, text: item.text.slice(offset, end) },
        offset,
        totalChars,
        nextOffset: end < totalChars ? end : null
      } satisfies ItemText
    })

    /**
     * Page `offset`.. (`limit` entries, default 100) of committed offload `offloadId`'s archive on `threadId`: the
     * originals its summary replaced, in order. Fails with `ThreadNotFound`, `OffloadNotFound` (unknown, of another
     * thread, or never committed), `PersistenceError`.
     */
    const offloadArchive = Span.fn("ThreadQuery.offloadArchive")(function*(threadId: ThreadId, offloadId: string, options: {
      readonly offset?: number | undefined
      readonly limit?: number | undefined
    }) {
      yield* thread(threadId)
      const offset = options.offset ?? 0
      const page = yield* store.listOffloadArchive(threadId, offloadId, offset, options.limit ?? 100)
      if (page.total === 0) return yield* new OffloadNotFound({ threadId, offloadId })
      const end = offset + page.entries.length
      return {
        offloadId,
        total: page.total,
        offset,
        entries: page.entries,
        nextOffset: end < page.total ? end : null
      } satisfies OffloadArchivePage
    })

    /** A thread's handoffs with their deliveries, oldest first. Fails with `ThreadNotFound`, `PersistenceError`. */
    const handoffs = Span.fn("ThreadQuery.handoffs")(function*(threadId: ThreadId) {
      yield* thread(threadId)
      const all = yield* store.listHandoffs(threadId)
      const deliveries = yield* store.listDeliveriesOfThread(threadId)
      return {
        handoffs: all.map((h): HandoffView => ({ ...h, deliveries: deliveries.filter((d) => d.handoffId === h.id) }))
      }
    })

    /**
     * A thread's handoffs with their deliveries, oldest first, each id list as its count (`HandoffSummaryList`: what
     * the dashboard lists; the ids are paged by `handoffItemIds`). Fails with `ThreadNotFound`, `PersistenceError`.
     */
    const handoffSummaries = Span.fn("ThreadQuery.handoffSummaries")(function*(threadId: ThreadId) {
      yield* thread(threadId)
      // Counted by the database: no id is read.
      const counted = yield* store.listHandoffCounts(threadId)
      const byHandoff = new Map<string, Array<HandoffSummary["deliveries"][number]>>()
      for (const { delivered, delivery: { deliveredItemIds: _d, omittedItemIds: _o, ...d }, omitted } of counted.deliveries) {
        const list = byHandoff.get(d.handoffId) ?? []
        list.push({ ...d, deliveredCount: delivered, omittedCount: omitted })
        byHandoff.set(d.handoffId, list)
      }
      return {
        handoffs: counted.handoffs.map(({ handoff: { itemIds: _i, omittedItemIds: _o, sourceRunIds: _s, ...h }, items, omitted, sourceRuns }): HandoffSummary => ({
          ...h,
          sourceRunCount: sourceRuns,
          itemCount: items,
          omittedCount: omitted,
          deliveries: byHandoff.get(h.id) ?? []
        }))
      }
    })

    /**
     * One page of a handoff's item ids: `list` `items` (owed) or `omitted` (left out when it settled), or with
     * `deliveryId` one of its deliveries' `delivered` or `omitted` ids; from index `offset` (default 0), at most
     * `limit` (default 500). Fails with `HandoffNotFound`, `InvalidRequest` (a delivery of another handoff, `items`
     * of a delivery, `delivered` without one), `PersistenceError`.
     */
    const handoffItemIds = Span.fn("ThreadQuery.handoffItemIds")(function*(handoffId: HandoffId, options: {
      readonly list: HandoffIdList
      readonly deliveryId?: DeliveryId | undefined
      readonly offset?: number | undefined
      readonly limit?: number | undefined
    }) {
      const found = yield* store.getHandoff(handoffId)
      if (found._tag === "None") return yield* new HandoffNotFound({ handoffId })
      let ids: ReadonlyArray<ItemId>
      if (options.deliveryId === undefined) {
        if (options.list === "delivered") {
          return yield* new InvalidRequest({ reason: "list=delivered names a delivery's ids: give its deliveryId" })
        }
        ids = options.list === "items" ? found.value.itemIds : found.value.omittedItemIds
      } else {
        const delivery = (yield* store.listDeliveriesOfHandoff(handoffId)).find((d) => d.id === options.deliveryId)
        if (delivery === undefined) {
          return yield* new InvalidRequest({ reason: `delivery ${options.deliveryId} is not a delivery of handoff ${handoffId}` })
        }
        if (options.list === "items") {
          return yield* new InvalidRequest({ reason: "list=items names the handoff's owed ids: leave deliveryId out" })
        }
        ids = options.list === "delivered" ? delivery.deliveredItemIds : delivery.omittedItemIds
      }
      const offset = Math.min(options.offset ?? 0, ids.length)
      const end = Math.min(ids.length, offset + (options.limit ?? 500))
      return {
        handoffId,
        deliveryId: options.deliveryId ?? null,
        list: options.list,
        ids: ids.slice(offset, end),
        offset,
        total: ids.length,
        nextOffset: end < ids.length ? end : null
      } satisfies HandoffItemIds
    })

    /** One handoff with its deliveries. Fails with `HandoffNotFound`, `PersistenceError`. */
    const handoff = Span.fn("ThreadQuery.handoff")(function*(handoffId: HandoffId) {
      const found = yield* store.getHandoff(handoffId)
      if (found._tag === "None") return yield* new HandoffNotFound({ handoffId })
      return yield* handoffView(found.value)
    })

    /**
     * A thread's stored events with `seq > afterSeq`, at most `limit`. Fails with `ThreadNotFound`, `PersistenceError`.
     */
    const threadEvents = Span.fn("ThreadQuery.threadEvents")(function*(threadId: ThreadId, afterSeq: number, limit: number) {
      yield* thread(threadId)
      return yield* store.listEvents(threadId, { afterSeq, limit })
    })

    /**
     * The seq of the thread's last event (0 without events): no event stream of the thread has sent an id above it.
     * Fails with `ThreadNotFound`, `PersistenceError`.
     */
    const lastEventSeq = Span.fn("ThreadQuery.lastEventSeq")(function*(threadId: ThreadId) {
      yield* thread(threadId)
      return yield* store.threadVersion(threadId)
    })

    /** The log's largest `globalSeq` (0 without events): no `/events` stream has sent an id above it. */
    const lastGlobalSeq = Span.fn("ThreadQuery.lastGlobalSeq")(function*() {
      return yield* store.lastGlobalSeq()
    })

    /**
     * The folds of the threads whose timeline was asked for last (at most `timelineCacheSize`, least recently asked
     * dropped first), each through its `lastSeq`: the next request for one reads and folds only the events after it.
     * Events are never changed once committed, so a fold stays valid whichever process wrote the events after it.
     */
    const timelines = new Map<ThreadId, Timeline.EventFold>()

    /**
     * The thread's timeline (`ThreadTimeline`): its stored event log folded by `Timeline.EventFold` through its last
     * event, reading only the event types the fold uses, and only those after the fold this server kept from the
     * thread's previous timeline request (a reload or a second viewer reads the tail, not the whole log). Fails with
     * `ThreadNotFound` or `PersistenceError`.
     */
    const timeline = Span.fn("ThreadQuery.timeline")(function*(threadId: ThreadId) {
      yield* thread(threadId)
      const cached = timelines.get(threadId)
      const fold = cached ?? new Timeline.EventFold()
      const { events, lastSeq } = yield* store.listEventJsonOfTypes(threadId, Timeline.timelineEventTypes, fold.lastSeq)
      // A concurrent request may have moved the fold while this one read: apply only what it does not hold yet.
      for (const event of events) if (event.seq > fold.lastSeq) fold.apply(event)
      fold.advanceTo(lastSeq)
      timelines.delete(threadId)
      timelines.set(threadId, fold)
      if (timelines.size > timelineCacheSize) timelines.delete(timelines.keys().next().value!)
      return fold.toJson()
    })

    /** Every thread's stored events with `globalSeq > afterGlobalSeq`, at most `limit`. Fails with `PersistenceError`. */
    const allEvents = (afterGlobalSeq: number, limit: number) => store.listEventsGlobal({ afterGlobalSeq, limit })

    /**
     * Readiness: the database answers and every migration this build knows is applied. Fails with `NotReady`
     * naming what is missing.
     */
    const readiness = Span.fn("ThreadQuery.readiness")(function*() {
      const status = yield* store.schemaStatus().pipe(
        Effect.mapError((e) => new NotReady({ reason: `the database does not answer (${e.message})` }))
      )
      if (status.applied < status.latest) {
        return yield* new NotReady({ reason: `migrations applied through ${status.applied} of ${status.latest}` })
      }
      return {
        status: "ready",
        dialect: status.dialect,
        migrations: { applied: status.applied, latest: status.latest }
      } satisfies Readiness
    })

    return {
      listThreads,
      snapshot,
      listRuns,
      currentRun,
      run,
      listItems,
      itemText,
      offloadArchive,
      handoffs,
      handoffSummaries,
      handoffItemIds,
      handoff,
      threadEvents,
      lastEventSeq,
      lastGlobalSeq,
      timeline,
      allEvents,
      readiness
    }
  })
}) {}
