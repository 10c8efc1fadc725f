/**
 * Read models: what the HTTP API (and any other reader) returns about threads, runs, items and handoffs. Each is a
 * projection of the durable domain values (`Domain.ts`), assembled by the orchestration `ThreadQuery`; none is stored.
 * Token figures are tokens (Baton's count of the rendered form unless a field says otherwise); times are UTC.
 */
import { Schema } from "effect"
import {
  ContextHandoff,
  HandoffDelivery,
  Item,
  NativeThread,
  OpenToolCall,
  ProviderThread,
  Run,
  RunAttempt,
  RunCost,
  RunStatus,
  Thread,
  ThreadLink,
  Tokens,
  ToolName
} from "./Domain.js"
import { DeliveryId, HandoffId, ItemId, ProviderInstance, RunId, ThreadId } from "./Ids.js"

const Count = Schema.Int.pipe(Schema.nonNegative())

/** One page of the thread list, oldest first; `nextCursor` continues after the last thread (`null`: no more). */
export const ThreadPage = Schema.Struct({
  threads: Schema.Array(Thread),
  nextCursor: Schema.NullOr(Schema.String)
})
export type ThreadPage = typeof ThreadPage.Type

/**
 * A native thread with the window its next turn is budgeted against: the smallest known of the model's window, the
 * reported `maxTokens` and the reported `autoCompactThreshold` (`null` when none is known).
 */
export const NativeThreadView = Schema.Struct({
  ...NativeThread.fields,
  window: Schema.NullOr(Tokens)
})
export type NativeThreadView = typeof NativeThreadView.Type

/** A provider thread (a lane on one provider instance), whether it is the thread's active one, and its native threads (oldest generation first). */
export const ProviderThreadView = Schema.Struct({
  ...ProviderThread.fields,
  active: Schema.Boolean,
  nativeThreads: Schema.Array(NativeThreadView)
})
export type ProviderThreadView = typeof ProviderThreadView.Type

/** A handoff with its bookkeeping flag (`open` while some destination is still owed) and its deliveries, oldest first. */
export const HandoffView = Schema.Struct({
  ...ContextHandoff.fields,
  open: Schema.Boolean,
  deliveries: Schema.Array(HandoffDelivery)
})
export type HandoffView = typeof HandoffView.Type

/** A thread's handoffs, oldest first. */
export const HandoffList = Schema.Struct({ handoffs: Schema.Array(HandoffView) })
export type HandoffList = typeof HandoffList.Type

/**
 * A delivery as `HandoffSummaryList` carries it: every field of `HandoffDelivery` but the id lists, which are counts
 * here (`deliveredCount`, `omittedCount`); page the ids with `GET /handoffs/{handoffId}/item-ids`.
 */
const { deliveredItemIds: _delivered, omittedItemIds: _deliveryOmitted, ...deliveryFields } = HandoffDelivery.fields
export const DeliverySummary = Schema.Struct({
  ...deliveryFields,
  deliveredCount: Count,
  omittedCount: Count
})
export type DeliverySummary = typeof DeliverySummary.Type

/**
 * A handoff as `HandoffSummaryList` carries it: every field of `HandoffView` but the id lists, which are counts here
 * (`sourceRunCount` runs it owes the history of, `itemCount` owed items, `omittedCount` items left out of the delivery
 * that settled it), deliveries as `DeliverySummary`. Its size does not grow with the history a handoff owes.
 */
const { itemIds: _items, omittedItemIds: _omitted, sourceRunIds: _sourceRuns, ...handoffFields } = ContextHandoff.fields
export const HandoffSummary = Schema.Struct({
  ...handoffFields,
  sourceRunCount: Count,
  itemCount: Count,
  omittedCount: Count,
  open: Schema.Boolean,
  deliveries: Schema.Array(DeliverySummary)
})
export type HandoffSummary = typeof HandoffSummary.Type

/** `GET /threads/{id}/handoff-summaries`: a thread's handoffs, oldest first, with counts instead of item ids. */
export const HandoffSummaryList = Schema.Struct({ handoffs: Schema.Array(HandoffSummary) })
export type HandoffSummaryList = typeof HandoffSummaryList.Type

/**
 * Which id list of a handoff `GET /handoffs/{handoffId}/item-ids` pages: `items` (the items it owes), `omitted` (left
 * out of the delivery that settled it; with `deliveryId`, left out of that delivery), `delivered` (with `deliveryId`
 * only: what that delivery sent).
 */
export const HandoffIdList = Schema.Literal("items", "omitted", "delivered")
export type HandoffIdList = typeof HandoffIdList.Type

/**
 * One page of a handoff's (or one of its deliveries') item ids, in their stored order: `ids` from index `offset`,
 * `total` ids in the list, `nextOffset` the index to continue from (`null`: no more).
 */
export const HandoffItemIds = Schema.Struct({
  handoffId: HandoffId,
  deliveryId: Schema.NullOr(DeliveryId),
  list: HandoffIdList,
  ids: Schema.Array(ItemId),
  offset: Count,
  total: Count,
  nextOffset: Schema.NullOr(Count)
})
export type HandoffItemIds = typeof HandoffItemIds.Type

/**
 * Counts over a whole thread: runs (and runs per status; statuses with no run are 0), items and their tokens,
 * handoffs (and those still open).
 */
export const ThreadTotals = Schema.Struct({
  runs: Count,
  runsByStatus: Schema.Record({ key: RunStatus, value: Count }),
  items: Count,
  itemTokens: Tokens,
  handoffs: Count,
  openHandoffs: Count
})
export type ThreadTotals = typeof ThreadTotals.Type

/**
 * What a thread's runs cost (issue 9 item 5), summed over the runs with a recorded cost (`runs`: how many; runs on a
 * provider that reports no usage, like the scripted one, record none): tokens as the providers billed them
 * (`inputTokens` uncached, `cacheWriteTokens`, `cacheReadTokens`, `outputTokens`), and `costUsd`, US dollars at the
 * configured prices summed over the priced runs (`null` when no run was priced).
 */
export const CostTotals = Schema.Struct({
  runs: Count,
  inputTokens: Tokens,
  cacheWriteTokens: Tokens,
  cacheReadTokens: Tokens,
  outputTokens: Tokens,
  costUsd: Schema.NullOr(Schema.Number)
})
export type CostTotals = typeof CostTotals.Type

/**
 * What a thread's `/offload` summariser calls cost: `operations` with reported usage, tokens summed, dollars summed
 * (`null` when none was priced), and of those dollars `abandonedUsd` the part spent on summaries that were discarded,
 * failed or cancelled (see `SummariserCost`).
 */
export const SummariserCostTotals = Schema.Struct({
  operations: Count,
  inputTokens: Tokens,
  cacheWriteTokens: Tokens,
  cacheReadTokens: Tokens,
  outputTokens: Tokens,
  costUsd: Schema.NullOr(Schema.Number),
  abandonedUsd: Schema.NullOr(Schema.Number)
})
export type SummariserCostTotals = typeof SummariserCostTotals.Type

/**
 * A thread as it stands: its provider threads (the active one flagged) with their native threads, usage and window;
 * its most recent runs (`recentRuns`, up to 20, oldest first: page every run with `GET /threads/{id}/runs`); the
 * handoffs still owing history; its fork/merge links; the thread that spawned it as a sub-agent and the sub-agents it
 * spawned; totals.
 */
/**
 * A client tool the thread declared (`POST /threads` `tools`, offered to the model by every run): its name and
 * description. The input schema is not repeated here (it goes to the provider as given); a message's own tools are
 * its run's, not the thread's.
 */
export const ThreadToolView = Schema.Struct({
  name: ToolName,
  description: Schema.String
})
export type ThreadToolView = typeof ThreadToolView.Type

/**
 * A gateway conversation's newest answered request (its last `gateway.usage` event): the run, the prompt the upstream
 * reported for it (tokens: uncached input + cache write + cache read of the last upstream request, so after hidden
 * `thread_read` rounds the last hop's, not every hop's sum) and the routed instance's window (`null`: not configured).
 */
export const GatewayRequestFill = Schema.Struct({
  runId: RunId,
  promptTokens: Count,
  windowTokens: Schema.NullOr(Count)
})
export type GatewayRequestFill = typeof GatewayRequestFill.Type

export const ThreadSnapshot = Schema.Struct({
  thread: Thread,
  activeProviderInstance: Schema.NullOr(ProviderInstance),
  providerThreads: Schema.Array(ProviderThreadView),
  recentRuns: Schema.Array(Run),
  openHandoffs: Schema.Array(HandoffView),
  links: Schema.Array(ThreadLink),
  /**
   * The thread that spawned this one as a sub-agent (a gateway conversation whose agent named the conversation it runs
   * under: Codex's `x-codex-turn-metadata` `parent_thread_id`, docs/gateway.md); `null`: none. A fork's parent is in
   * `links`, not here.
   */
  parentThreadId: Schema.NullOr(ThreadId),
  /** The sub-agent threads this thread spawned (each with this thread as its `parentThreadId`), oldest first. */
  subAgents: Schema.Array(Thread),
  /** The client tools the thread declared, in the order given (`[]`: none). */
  tools: Schema.Array(ThreadToolView),
  /**
   * A gateway conversation's newest answered request and its prompt (`GatewayRequestFill`: the context fill of a thread
   * that has no native thread); `null` or absent: none (not a gateway conversation, or no request reported usage).
   */
  gatewayRequest: Schema.optional(Schema.NullOr(GatewayRequestFill)),
  totals: ThreadTotals,
  /**
   * The cost of each of `recentRuns` that recorded one (same order), the `/offload` summariser's calls
   * (`summariser`: committed and abandoned), and the whole thread's cost totals (its runs and its summaries).
   */
  costs: Schema.Struct({
    recentRuns: Schema.Array(RunCost),
    summariser: SummariserCostTotals,
    totals: CostTotals
  })
})
export type ThreadSnapshot = typeof ThreadSnapshot.Type

/** The number of runs a snapshot lists in `recentRuns`. */
export const snapshotRecentRuns = 20

/** One page of a thread's runs by seq; `nextAfterSeq` continues the listing (`null`: no more). */
export const RunPage = Schema.Struct({
  runs: Schema.Array(Run),
  /** The costs of this page's runs that recorded one, in the runs' order (a gateway request's, a model-API turn's). */
  costs: Schema.Array(RunCost),
  nextAfterSeq: Schema.NullOr(Count)
})
export type RunPage = typeof RunPage.Type

/**
 * A run, its attempts (one per try on a native thread, and one per continuation after tool results) and the items it
 * produced, in thread order. While the run is `waiting`: `openToolCalls` the calls waiting for the client's results
 * (empty once posted) and `toolResultsDeadline` when the wait ends; otherwise `[]` and `null`.
 */
export const RunView = Schema.Struct({
  run: Run,
  attempts: Schema.Array(RunAttempt),
  items: Schema.Array(Item),
  /** What the run cost (tokens billed, dollars at the configured prices); `null` when none was recorded. */
  cost: Schema.NullOr(RunCost),
  openToolCalls: Schema.Array(OpenToolCall),
  toolResultsDeadline: Schema.NullOr(Schema.DateTimeUtc)
})
export type RunView = typeof RunView.Type

/**
 * What `POST /threads/{id}/messages` answers at once: the run it queued (or, for a repeated command id, the first
 * one). `status` is `queued` behind the thread's unfinished runs, `starting` on an idle thread (the run is claimed in
 * the transaction that queued it), or, for a repeated command id, wherever that run is now.
 */
export const RunAccepted = Schema.Struct({
  runId: RunId,
  threadId: ThreadId,
  /** 1-based position of the run in its thread. */
  runSeq: Schema.Int.pipe(Schema.positive()),
  status: RunStatus
})
export type RunAccepted = typeof RunAccepted.Type

/** One page of a thread's items by seq; `nextAfterSeq` continues the listing (`null`: no more). */
export const ItemPage = Schema.Struct({
  items: Schema.Array(Item),
  nextAfterSeq: Schema.NullOr(Count)
})
export type ItemPage = typeof ItemPage.Type

/**
 * A page of an `/offload`'s archive (`GET /threads/{id}/offloads/{offloadId}/archive`): the originals its summary
 * replaced, in order, from `offset` (0-based position), each an item of the thread's log (`itemId`, read in full with
 * `GET /items/{itemId}`), its `seq` and rendered `tokens`; `total` entries in all; `nextOffset` the next page's
 * offset (`null`: this page reaches the end). The same originals `thread_read`'s `archive:<offloadId>` ref reads.
 */
export const OffloadArchivePage = Schema.Struct({
  offloadId: Schema.String,
  total: Count,
  offset: Count,
  entries: Schema.Array(Schema.Struct({ itemId: Schema.String, seq: Count, tokens: Count })),
  nextOffset: Schema.NullOr(Count)
})
export type OffloadArchivePage = typeof OffloadArchivePage.Type

/**
 * One item with a window of its text: `item.text` holds the characters (UTF-16 code units) `[offset, offset +
 * item.text.length)` of the original, `totalChars` the original's length, `nextOffset` where the next window starts
 * (`null`: this window reaches the end). The ref that users and the model follow to read an omitted original.
 */
export const ItemText = Schema.Struct({
  item: Item,
  offset: Count,
  totalChars: Count,
  nextOffset: Schema.NullOr(Count)
})
export type ItemText = typeof ItemText.Type

/** `/healthz`: the process is up and serving. */
export const Health = Schema.Struct({ status: Schema.Literal("ok") })
export type Health = typeof Health.Type

/** `/readyz`: the database answers and every migration this build knows is applied. */
export const Readiness = Schema.Struct({
  status: Schema.Literal("ready"),
  dialect: Schema.Literal("sqlite", "postgres"),
  migrations: Schema.Struct({ applied: Count, latest: Count })
})
export type Readiness = typeof Readiness.Type

/** `GET /session`: what the presented token may do: `admin` anything, `read` only `GET`. */
export const Session = Schema.Struct({ role: Schema.Literal("admin", "read") })
export type Session = typeof Session.Type

const Nullable = Schema.NullOr(Schema.Number)

/**
 * `GET /threads/{id}/timeline`: the fold of the thread's stored event log (`Timeline.EventFold`, its `toJson` state)
 * through event `lastSeq`: occupancy points (one per run that reported usage, tokens; in columns), marks (compacted, tool results
 * offloaded, summarised, replaced), each delivery's steps, stubbed tool call ids, and the fold's cursors. A reader
 * follows `GET /threads/{id}/events` after `lastSeq` and applies each event to `EventFold.fromJson(timeline)`: no
 * gap, no repeat, and no replay of the whole log.
 */
export const ThreadTimeline = Schema.Struct({
  lastSeq: Count,
  lastRunSeq: Count,
  runSeqs: Schema.Array(Schema.Tuple(Schema.String, Count)),
  startedOn: Schema.Array(Schema.Tuple(Schema.String, Schema.String)),
  budgets: Schema.Array(Schema.Tuple(Schema.String, Schema.Number)),
  nativeThreads: Schema.Array(Schema.String),
  points: Schema.Struct({
    runIds: Schema.Array(Schema.String),
    runSeqs: Schema.Array(Count),
    nativeThreadIndexes: Schema.Array(Count),
    usedTokens: Schema.Array(Schema.Number),
    maxTokens: Schema.Array(Nullable),
    autoCompactThresholds: Schema.Array(Nullable),
    trusted: Schema.Array(Schema.Boolean),
    budgets: Schema.Array(Nullable)
  }),
  marks: Schema.Array(Schema.Struct({
    nativeThreadId: Schema.String,
    runSeq: Count,
    kind: Schema.Literal("compacted", "tool results offloaded", "summarised", "replaced"),
    detail: Schema.String
  })),
  deliverySteps: Schema.Array(Schema.Struct({
    deliveryId: Schema.String,
    steps: Schema.Array(Schema.Struct({ seq: Count, type: Schema.String, at: Schema.String, detail: Schema.String }))
  })),
  stubbed: Schema.Array(Schema.String)
})
export type ThreadTimeline = typeof ThreadTimeline.Type
