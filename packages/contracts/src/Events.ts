/**
 * Thread events: the append-only audit log of every state change, one row per change, written in the same
 * transaction as the change with a per-thread `seq` under a unique `(thread_id, seq)` constraint. Names are in the
 * past tense.
 *
 * `ThreadEvent` is a union with one struct per event type, discriminated by `type` (the model: t3code's
 * `packages/contracts/src/orchestration.ts`). Every stored event carries the same envelope (`EventEnvelope`) and a
 * `payload` whose schema depends on `type`. Payload fields that events written by older versions lack are optional.
 */
import { Schema } from "effect"
import { ContextUsage, DeliveryMode, HandoffKind, OpenToolCall, RunFailureCode, RunStopPoint, ToolResultOffloadControl } from "./Domain.js"
import {
  CommandId,
  DeliveryId,
  HandoffId,
  ItemId,
  NativeThreadId,
  OffloadId,
  ProviderInstance,
  ProviderThreadId,
  RunId,
  ThreadId
} from "./Ids.js"

/** A stored event's id, `evt_…`: unique across threads, processes and databases (a UUID outside simulations). */
export const EventId = Schema.String.pipe(Schema.brand("EventId"))
export type EventId = typeof EventId.Type

const Count = Schema.Int.pipe(Schema.nonNegative())
const Seq = Schema.Int.pipe(Schema.positive())

/**
 * The fields every stored event has, whatever its type:
 * - `eventId`: unique id of the event;
 * - `threadId`, `seq`: the thread and the event's position in its log (1-based, gap-free per thread);
 * - `globalSeq`: position in the log of all threads (strictly increasing in insertion order, with gaps where a
 *   transaction rolled back): the cursor of cross-thread feeds;
 * - `commandId`: the client command that caused the event, `null` when none did (recovery, a run driver step);
 * - `createdAt`: when it was appended (UTC).
 */
export const EventEnvelope = {
  eventId: EventId,
  threadId: ThreadId,
  seq: Seq,
  globalSeq: Seq,
  commandId: Schema.NullOr(CommandId),
  createdAt: Schema.DateTimeUtc
}

/** The envelope fields the store assigns on append (`commandId` is the caller's, optional). */
export type StoredEventField = "eventId" | "seq" | "globalSeq" | "commandId" | "createdAt"

const event = <const Type extends string, Payload extends Schema.Schema.Any>(type: Type, payload: Payload) =>
  Schema.Struct({ ...EventEnvelope, type: Schema.Literal(type), payload })

// ---- threads

/** `{title, parentThreadId?}`: a thread was created; `parentThreadId` on a fork. */
export const ThreadCreated = event(
  "thread.created",
  Schema.Struct({ title: Schema.String, parentThreadId: Schema.optional(ThreadId) })
)

/**
 * A fork was taken. On the parent: `{linkId, forkThreadId, atRunSeq}`; on the fork: `{linkId, parentThreadId,
 * atRunSeq, runId, itemCount, handoffId}` (the fork's first event after `thread.created`).
 */
export const ThreadForked = event(
  "thread.forked",
  Schema.Union(
    Schema.Struct({ linkId: Schema.String, forkThreadId: ThreadId, atRunSeq: Count }),
    Schema.Struct({
      linkId: Schema.String,
      parentThreadId: ThreadId,
      atRunSeq: Count,
      runId: RunId,
      itemCount: Count,
      handoffId: Schema.NullOr(HandoffId),
      /** A native fork: the fork's native thread, a provider-made copy of the parent's, holds the history (no handoff). */
      nativeThreadId: Schema.optional(NativeThreadId)
    })
  )
)

/**
 * A fork was merged back. On the parent: `{linkId, forkThreadId, runId, fromRunSeq, throughRunSeq, itemCount,
 * handoffId, behindRunId?}`; on the fork: `{linkId, parentThreadId, throughRunSeq}`. `behindRunId`: the parent's
 * unfinished run the merge came behind (a turn running, waiting, or queued): its copies and its handoff (`handoffId`
 * null here) are recorded when every run ahead of it has ended, after what they record (`items.appended`,
 * `handoff.created`).
 */
export const ThreadMerged = event(
  "thread.merged",
  Schema.Union(
    Schema.Struct({
      linkId: Schema.String,
      forkThreadId: ThreadId,
      runId: RunId,
      fromRunSeq: Count,
      throughRunSeq: Count,
      itemCount: Count,
      handoffId: Schema.NullOr(HandoffId),
      behindRunId: Schema.optional(RunId)
    }),
    Schema.Struct({ linkId: Schema.String, parentThreadId: ThreadId, throughRunSeq: Count })
  )
)

/**
 * The state of a native thread that a compaction left: `usedTokens` (last trusted report, `null` without one),
 * `estimatedTokens` (Baton's count) and the handoffs owed to it (`<handoffId>:<itemCount>`, sorted).
 */
export const CompactionState = Schema.Struct({
  usedTokens: Schema.NullOr(Schema.Number),
  estimatedTokens: Schema.Number,
  owed: Schema.Array(Schema.String)
})
export type CompactionState = typeof CompactionState.Type

/**
 * `{nativeThreadId, usedBefore, usedAfter, delivered, state}` (tokens); `state` is the native thread as the
 * compaction left it: the no-progress count only carries over while it is unchanged (absent on events written
 * before it existed).
 */
export const ThreadCompacted = event(
  "thread.compacted",
  Schema.Struct({
    nativeThreadId: NativeThreadId,
    usedBefore: Schema.NullOr(Schema.Number),
    usedAfter: Schema.NullOr(Schema.Number),
    delivered: Count,
    state: Schema.optional(CompactionState)
  })
)

/**
 * `/offload` summarised the history up to `cutSeq` (item seqs; token counts in rendered tokens); `handoffIds` are
 * the handoffs that now owe the summary instead of the superseded originals; `replacedNativeThreadId` the active
 * lane's native thread the offload replaced (the next turn starts a new one owed the summary and the items after the
 * cut), absent when the lane had none (events written before it existed lack it too).
 */
export const ThreadOffloaded = event(
  "thread.offloaded",
  Schema.Struct({
    offloadId: OffloadId,
    generation: Seq,
    summaryItemId: ItemId,
    previousOffloadId: Schema.NullOr(OffloadId),
    fromSeq: Count,
    cutSeq: Count,
    coveredItems: Count,
    coveredTokens: Count,
    summaryTokens: Count,
    keptItems: Count,
    keptTokens: Count,
    keepTokens: Count,
    supersededHandoffIds: Schema.Array(HandoffId),
    handoffIds: Schema.Array(HandoffId),
    replacedNativeThreadId: Schema.optional(NativeThreadId)
  })
)

/**
 * `{offloadId, generation, summaryItemId, cutSeq}`: the offload was undone (`POST /threads/{id}/offload/undo`): the
 * visible history is again what it was before it; its summary item stays in the log, its record marked undone.
 */
export const ThreadOffloadUndone = event(
  "thread.offload_undone",
  Schema.Struct({ offloadId: OffloadId, generation: Count, summaryItemId: ItemId, cutSeq: Count })
)

/** `{reason, keepTokens, cutSeq}`: the summariser failed; nothing else was written. */
export const ThreadOffloadFailed = event(
  "thread.offload_failed",
  Schema.Struct({ reason: Schema.String, keepTokens: Count, cutSeq: Count })
)

// ---- runs and items

/** `{runId, seq, providerThreadId}`: a run was queued (`seq`: its position among the thread's runs). */
export const RunQueued = event(
  "run.queued",
  Schema.Struct({ runId: RunId, seq: Seq, providerThreadId: ProviderThreadId })
)

/** `{runId, nativeThreadId, attempt}`: an attempt (1-based) of the run was handed to the provider. */
export const RunStarted = event(
  "run.started",
  Schema.Struct({ runId: RunId, nativeThreadId: NativeThreadId, attempt: Seq })
)

/** `{runId, itemCount}`: the run completed with `itemCount` produced items recorded. */
export const RunCompleted = event("run.completed", Schema.Struct({ runId: RunId, itemCount: Count }))

/**
 * `{runId, round, calls, deadlineAt}`: the model called the client's tools; the run waits (status `waiting`) for
 * the results of `calls` (`POST /threads/{id}/runs/{runId}/tool-results`) until `deadlineAt`. `round`: 1 for the
 * run's first wait, +1 for each later one.
 */
export const RunWaiting = event(
  "run.waiting",
  Schema.Struct({ runId: RunId, round: Seq, calls: Schema.Array(OpenToolCall), deadlineAt: Schema.DateTimeUtc })
)

/**
 * `{runId, providerInstance, attempt, delayMs, reason, httpStatus}`: the provider refused a request of the run's turn
 * before its answer started (rate limited: HTTP 429; overloaded: 529; a server error 500-504; or no answer at all,
 * `httpStatus` null) and Baton sends it again after `delayMs` milliseconds (the provider's `retry-after`, or the
 * backoff). Written before the wait, so a client sees why nothing streams; `attempt` is the retry's number (1 for the
 * first retry), `reason` the provider's error text. A turn that then succeeds has no other trace of the wait.
 */
export const RunRetryScheduled = event(
  "run.retry_scheduled",
  Schema.Struct({
    runId: RunId,
    providerInstance: ProviderInstance,
    attempt: Seq,
    delayMs: Count,
    reason: Schema.String,
    httpStatus: Schema.NullOr(Schema.Int)
  })
)

/**
 * `{runId, round, toolCallIds, source}`: the results of a round's calls were recorded (each `tool_result` item
 * after its call): posted by the client (`client`), or error results because the deadline passed (`deadline`) or
 * the run was interrupted (`interrupt`).
 */
export const RunToolResultsRecorded = event(
  "run.tool_results_recorded",
  Schema.Struct({
    runId: RunId,
    round: Seq,
    toolCallIds: Schema.Array(Schema.String),
    source: Schema.Literal("client", "deadline", "interrupt")
  })
)

/** `code` is the run's `RunFailureCode` (optional: events written before failure codes lack it). */
const RunEnded = Schema.Struct({ runId: RunId, stopPoint: RunStopPoint, reason: Schema.String, code: Schema.optional(RunFailureCode) })

/** `{runId, stopPoint, reason, code}`: the run failed. */
export const RunFailed = event("run.failed", RunEnded)

/** `{runId, stopPoint, reason, code}`: the run was interrupted. */
export const RunInterrupted = event("run.interrupted", RunEnded)

/**
 * `{runId, behindRunId}`: the run ended while queued (its `run.interrupted` or `run.failed` follows) behind
 * `behindRunId`, the first run ahead of it still unfinished, so its prompt is not recorded yet: it joins the thread's
 * items (an `items.appended` of the run) when the last run ahead of it ends, after everything those runs record (a
 * client tool call and its result are recorded only when the run's wait ends). Written in the unit of work that ends
 * the run, with the run's durable mark (`runs.prompt_owed`).
 */
export const RunPromptDeferred = event("run.prompt_deferred", Schema.Struct({ runId: RunId, behindRunId: RunId }))

/**
 * `{runId, itemIds, fromSeq, toSeq}`: items were appended to the thread's log, `fromSeq..toSeq` (item seqs,
 * inclusive) in order; `runId` is `null` for items of no run (an `/offload` summary).
 */
export const ItemsAppended = event(
  "items.appended",
  Schema.Struct({ runId: Schema.NullOr(RunId), itemIds: Schema.Array(ItemId), fromSeq: Seq, toSeq: Seq })
)

/**
 * `{runId, count, messageIds, toolCallIds}`: the leading items of a turn that its native thread already produced
 * (a resumed native thread replaying its history) were not recorded again.
 */
export const ItemsReplaySkipped = event(
  "items.replay_skipped",
  Schema.Struct({
    runId: RunId,
    count: Count,
    messageIds: Schema.Array(Schema.String),
    toolCallIds: Schema.Array(Schema.String)
  })
)

// ---- provider threads and native threads

/** `{providerThreadId, providerInstance}`: the thread got a lane on a provider instance. */
export const ProviderThreadCreated = event(
  "provider_thread.created",
  Schema.Struct({ providerThreadId: ProviderThreadId, providerInstance: ProviderInstance })
)

/**
 * `{providerThreadId, model, contextWindow, previousModel, previousContextWindow}`: the provider instance's
 * configuration changed (a new model or window, e.g. between restarts): the lane now uses the configured values.
 */
export const ProviderThreadReconfigured = event(
  "provider_thread.reconfigured",
  Schema.Struct({
    providerThreadId: ProviderThreadId,
    model: Schema.String,
    contextWindow: Schema.NullOr(Schema.Number),
    previousModel: Schema.String,
    previousContextWindow: Schema.NullOr(Schema.Number)
  })
)

/** `{from, to, handoffId}`: the active provider thread changed; `handoffId` owes `to` what it did not see. */
export const ProviderSwitched = event(
  "provider.switched",
  Schema.Struct({
    from: Schema.NullOr(ProviderThreadId),
    to: ProviderThreadId,
    handoffId: Schema.NullOr(HandoffId)
  })
)

/** `{nativeThreadId, providerThreadId, generation, replaces}`: a native thread was started on the provider. */
export const NativeThreadStarted = event(
  "native_thread.started",
  Schema.Struct({
    nativeThreadId: NativeThreadId,
    providerThreadId: ProviderThreadId,
    generation: Seq,
    replaces: Schema.NullOr(NativeThreadId)
  })
)

/** `{nativeThreadId, reason}`: the native thread is no longer trusted; the next turn starts a replacement. */
export const NativeThreadReplaced = event(
  "native_thread.replaced",
  Schema.Struct({ nativeThreadId: NativeThreadId, reason: Schema.String })
)

/**
 * A usage report as the provider sent it. An untrusted one (see `UsageSanity`) may hold counts that are not token
 * counts (fractional, negative, huge); a count JSON cannot hold (NaN, infinity) is `null`.
 */
export const ReportedUsage = Schema.Union(
  ContextUsage,
  Schema.Struct({
    usedTokens: Schema.NullOr(Schema.Number),
    maxTokens: Schema.optional(Schema.NullOr(Schema.Number)),
    autoCompactThreshold: Schema.optional(Schema.NullOr(Schema.Number))
  })
)

/**
 * `{nativeThreadId, usage, trusted, anomaly?, estimateUsed?}`: a turn reported its native thread's usage; an
 * untrusted report carries why (`anomaly`) and the estimate used instead (`estimateUsed`, Baton tokens).
 */
export const UsageReported = event(
  "usage.reported",
  Schema.Struct({
    nativeThreadId: NativeThreadId,
    usage: ReportedUsage,
    trusted: Schema.Boolean,
    anomaly: Schema.optional(Schema.String),
    estimateUsed: Schema.optional(Schema.Number)
  })
)

/**
 * `{runId, nativeThreadId, attempt, recovery, window}`: the provider rejected a turn as too long for its context
 * (`window` in provider tokens) before reading it, and Baton recorded what the rejection taught (the calibration, the
 * native thread's floor) in the same unit of work; `recovery` is how the run goes on: `defer_history` (native thread
 * recorded as full) or `replace_native_thread`, and the turn is retried; `none`: it is not (a user interrupt ended
 * the run meanwhile, or no retry is left and the run fails as an overflow).
 */
export const ContextOverflowed = event(
  "context.overflowed",
  Schema.Struct({
    runId: RunId,
    nativeThreadId: NativeThreadId,
    attempt: Seq,
    recovery: Schema.Literal("defer_history", "replace_native_thread", "none"),
    window: Schema.Number
  })
)

/**
 * `{runId, providerInstance, nativeThreadId, nativeRef, units, refs, entrySeqs, tier, tokensBefore, tokensAfter}`: a
 * model-API adapter flushed tool-result offload on the native thread's message list before a request of `runId`'s
 * turn (docs/offload.md): `units` answered tool units had their results replaced by one-line stubs naming `refs`
 * (`tool:<call id>`, which `thread_read` reads back in full), stored as `entrySeqs` of its message log; `tier` the
 * policy's (`mild`, `aggressive`, `emergency`); `tokensBefore` and `tokensAfter` the history the request carries, in
 * Baton tokens, before and after the flush.
 */
export const ContextOffloaded = event(
  "context.offloaded",
  Schema.Struct({
    runId: RunId,
    providerInstance: ProviderInstance,
    nativeThreadId: NativeThreadId,
    nativeRef: Schema.String,
    units: Count,
    refs: Schema.Array(Schema.String),
    entrySeqs: Schema.Array(Count),
    tier: Schema.String,
    tokensBefore: Count,
    tokensAfter: Count
  })
)

/**
 * `{providerInstance, nativeThreadId, nativeRef, flushSeq, entrySeqs}`: a user undid a tool-result offload flush
 * (`flushSeq`, the `offload` entry of the message log): requests carry the originals of `entrySeqs` again from the
 * next one on, and those units are never stubbed again.
 */
export const ContextOffloadUndone = event(
  "context.offload_undone",
  Schema.Struct({
    providerInstance: ProviderInstance,
    nativeThreadId: NativeThreadId,
    nativeRef: Schema.String,
    flushSeq: Count,
    entrySeqs: Schema.Array(Count)
  })
)

/**
 * `{control}`: a user replaced the thread's tool-result offload control (`ToolResultOffloadControl`: on/off, the
 * policy's settings, pinned items); it applies from the next model request on.
 */
export const ContextOffloadControlSet = event(
  "context.offload_control_set",
  Schema.Struct({ control: ToolResultOffloadControl })
)

/**
 * `{providerInstance, oldRatio, newRatio, samples, estimatedTokens, reportedTokens}`: a completed turn of this
 * thread taught the provider's tokenizer calibration (provider tokens per Baton token).
 */
export const CalibrationUpdated = event(
  "calibration.updated",
  Schema.Struct({
    providerInstance: ProviderInstance,
    oldRatio: Schema.Number,
    newRatio: Schema.Number,
    samples: Count,
    estimatedTokens: Schema.Number,
    reportedTokens: Schema.Number
  })
)

// ---- handoffs and deliveries

/**
 * `{handoffId, kind, targetProviderThreadId, itemCount, sourceRunIds, lateOutputOf?, supersedes?}`: a handoff now
 * owes `itemCount` items to the target; `lateOutputOf` names the run whose output arrived after a switch,
 * `supersedes` the handoffs an `/offload` summary replaced with this one.
 */
export const HandoffCreated = event(
  "handoff.created",
  Schema.Struct({
    handoffId: HandoffId,
    kind: HandoffKind,
    targetProviderThreadId: ProviderThreadId,
    itemCount: Count,
    sourceRunIds: Schema.Array(RunId),
    lateOutputOf: Schema.optional(RunId),
    supersedes: Schema.optional(Schema.Array(HandoffId))
  })
)

/** `{handoffId, addedItemIds, addedRunIds}`: missed-run recovery reused this handoff. */
export const HandoffExtended = event(
  "handoff.extended",
  Schema.Struct({ handoffId: HandoffId, addedItemIds: Schema.Array(ItemId), addedRunIds: Schema.Array(RunId) })
)

/** `{deliveryId, handoffId, nativeThreadId}`: a native thread is now owed the handoff. */
export const DeliveryCreated = event(
  "delivery.created",
  Schema.Struct({ deliveryId: DeliveryId, handoffId: HandoffId, nativeThreadId: NativeThreadId })
)

/** `{deliveryId, handoffId, budget, reason, deferCount}`: not delivered this turn (`budget` in provider tokens). */
export const DeliveryDeferred = event(
  "delivery.deferred",
  Schema.Struct({
    deliveryId: DeliveryId,
    handoffId: HandoffId,
    budget: Schema.NullOr(Schema.Number),
    reason: Schema.String,
    deferCount: Count
  })
)

/**
 * `{deliveryId, handoffId, mode, runId, budget, renderedTokens, ratio?, itemIds, omittedItemIds}`: the intent,
 * written before the provider call. `renderedTokens` in Baton tokens, `budget` in provider tokens, `ratio` the
 * calibration applied (absent on events written before calibration existed: 1).
 */
export const DeliveryPending = event(
  "delivery.pending",
  Schema.Struct({
    deliveryId: DeliveryId,
    handoffId: HandoffId,
    mode: DeliveryMode,
    runId: Schema.NullOr(RunId),
    budget: Schema.Number,
    renderedTokens: Schema.Number,
    ratio: Schema.optional(Schema.Number),
    itemIds: Schema.Array(ItemId),
    omittedItemIds: Schema.Array(ItemId)
  })
)

const DeliverySettled = Schema.Struct({
  deliveryId: DeliveryId,
  handoffId: HandoffId,
  deliveredItemIds: Schema.Array(ItemId),
  omittedItemIds: Schema.Array(ItemId),
  tokens: Count
})

/** `{deliveryId, handoffId, deliveredItemIds, omittedItemIds, tokens}`: injected into the native thread. */
export const DeliveryInjected = event("delivery.injected", DeliverySettled)

/** `{deliveryId, handoffId, deliveredItemIds, omittedItemIds, tokens}`: sent inline with the prompt. */
export const DeliveryInlined = event("delivery.inlined", DeliverySettled)

/** `{deliveryId, handoffId, reason}`: the delivery will never be made (its handoff was replaced). */
export const DeliverySuperseded = event(
  "delivery.superseded",
  Schema.Struct({ deliveryId: DeliveryId, handoffId: HandoffId, reason: Schema.String })
)

// ---- gateway

/**
 * `{runId, sharedMessages, storedMessages, requestMessages}`: a gateway request's history did not extend the
 * conversation Baton stored (the agent compacted, edited or rewound it): only its first `sharedMessages` messages
 * matched the `storedMessages` of the baseline; its `requestMessages` are the new baseline (docs/gateway.md).
 */
export const GatewayDiverged = event(
  "gateway.diverged",
  Schema.Struct({ runId: RunId, sharedMessages: Count, storedMessages: Count, requestMessages: Count })
)

/**
 * `{runId, sharedMessages, storedMessages, requestMessages}`: a gateway request's history did not extend the
 * conversation Baton stored message for message, but holds the same conversation re-rendered (the agent moved or
 * rewrote only its own context: reminders, `system` messages, earlier thinking; Claude Code does so when its model
 * changes), so it is not a divergence: its first `sharedMessages` messages hold the `storedMessages` of the baseline
 * and nothing of them is stored again; its `requestMessages` are the new baseline (docs/gateway.md).
 */
export const GatewayRerendered = event(
  "gateway.rerendered",
  Schema.Struct({ runId: RunId, sharedMessages: Count, storedMessages: Count, requestMessages: Count })
)

/**
 * `{runId, requestMessages, storedMessages}`: a gateway request repeated the conversation's last request (the agent
 * retried it, e.g. after a network error or a timeout on its side, once Baton had recorded the reply): its
 * `requestMessages` are the first messages of the `storedMessages` Baton stored, the rest the reply recorded for that
 * same request. Not a divergence: nothing of the request is stored again; its answer is recorded as `runId`'s only
 * when it differs from that reply, and then supersedes it as the conversation's (the earlier reply stays in the thread,
 * its items readable by id; docs/gateway.md).
 */
export const GatewayRetried = event(
  "gateway.retried",
  Schema.Struct({ runId: RunId, requestMessages: Count, storedMessages: Count })
)

/**
 * `{runId, refs, tier, tokensBefore, tokensAfter}`: the gateway flushed tool-result offload on a conversation before
 * forwarding `runId`'s request (docs/gateway.md): newly stubbed results go out as one-line stubs on this and every
 * later request, `refs` the stubs' refs, which `thread_read` reads back (`tool:<tool_use id>`; for a hidden
 * `thread_read` round of the gateway's, the refs it read); `tier` the policy's;
 * `tokensBefore` and `tokensAfter` the request's messages in Baton tokens before and after the flush.
 */
export const GatewayOffloaded = event(
  "gateway.offloaded",
  Schema.Struct({ runId: RunId, refs: Schema.Array(Schema.String), tier: Schema.String, tokensBefore: Count, tokensAfter: Count })
)

/**
 * `{runId, providerInstance, inputTokens, cacheWriteTokens, cacheReadTokens, outputTokens, windowTokens, carriedTokens?}`: the usage
 * the upstream reported for a gateway request's answer (docs/gateway.md "Visible"), in the provider's tokens:
 * `inputTokens` uncached input, the cache's writes and reads beside it, `outputTokens` the answer; `windowTokens` the
 * routed instance's context window (`null`: not configured). What the request carried is the sum of the three input
 * figures: the dashboard plots it per request against the window, as it plots a native thread's occupancy.
 */
export const GatewayUsage = event(
  "gateway.usage",
  Schema.Struct({
    runId: RunId,
    providerInstance: ProviderInstance,
    inputTokens: Count,
    cacheWriteTokens: Count,
    cacheReadTokens: Count,
    outputTokens: Count,
    windowTokens: Schema.NullOr(Count),
    /** What the last request carried when the answer took several (hidden `thread_read` rounds: the figures above are every request's sum). */
    carriedTokens: Schema.optional(Count)
  })
)

/** A stored thread event: the envelope plus `type` and its typed `payload`. */
export const ThreadEvent = Schema.Union(
  ThreadCreated,
  RunQueued,
  RunStarted,
  RunCompleted,
  RunFailed,
  RunInterrupted,
  RunPromptDeferred,
  RunWaiting,
  RunRetryScheduled,
  RunToolResultsRecorded,
  ItemsAppended,
  ProviderThreadCreated,
  ProviderThreadReconfigured,
  ProviderSwitched,
  NativeThreadStarted,
  NativeThreadReplaced,
  UsageReported,
  ContextOverflowed,
  ItemsReplaySkipped,
  HandoffCreated,
  HandoffExtended,
  DeliveryCreated,
  DeliveryDeferred,
  DeliveryPending,
  DeliveryInjected,
  DeliveryInlined,
  DeliverySuperseded,
  ThreadCompacted,
  ThreadForked,
  ThreadMerged,
  ThreadOffloaded,
  ThreadOffloadFailed,
  ThreadOffloadUndone,
  CalibrationUpdated,
  ContextOffloaded,
  ContextOffloadUndone,
  ContextOffloadControlSet,
  GatewayDiverged,
  GatewayRerendered,
  GatewayRetried,
  GatewayOffloaded,
  GatewayUsage
)
export type ThreadEvent = typeof ThreadEvent.Type

/** Every event type. */
export const ThreadEventType = Schema.Literal(...ThreadEvent.members.map((m) => m.fields.type.literals[0]))
export type ThreadEventType = ThreadEvent["type"]

/** The event of type `T`. */
export type ThreadEventOf<T extends ThreadEventType> = Extract<ThreadEvent, { readonly type: T }>

type DistributiveOmit<A, K extends PropertyKey> = A extends unknown ? Omit<A, K> : never

/**
 * What a writer appends: one union member without the fields the store assigns, plus the causing command's id
 * when a client command caused it. `ThreadStore.appendEvent` returns the stored `ThreadEvent`.
 */
export type NewThreadEvent = DistributiveOmit<ThreadEvent, StoredEventField> & {
  readonly commandId?: CommandId | null | undefined
}
