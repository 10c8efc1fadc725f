/**
 * Thread events: the append-only audit log of every state change, one row per change, written in the same
 * transaction as the change with a per-thread `seq` under a unique `(thread_id, seq)` constraint. Names are in the
 * past tense. `payload` is a JSON object whose fields depend on `type` (documented beside each type).
 */
import { Schema } from "effect"
import { ThreadId } from "./Ids.js"

export const ThreadEventType = Schema.Literal(
  /** `{title}` */
  "thread.created",
  /** `{runId, seq, providerThreadId}` */
  "run.queued",
  /** `{runId, nativeThreadId, attempt}` */
  "run.started",
  /** `{runId, itemCount}` */
  "run.completed",
  /** `{runId, stopPoint, reason, code}`: `code` is the run's `RunFailureCode` */
  "run.failed",
  /** `{runId, stopPoint, reason, code}`: `code` is the run's `RunFailureCode` */
  "run.interrupted",
  /** `{providerThreadId, providerInstance}` */
  "provider_thread.created",
  /** `{from, to, handoffId?}` */
  "provider.switched",
  /** `{nativeThreadId, generation, replaces?}` */
  "native_thread.started",
  /** `{nativeThreadId, reason}` */
  "native_thread.replaced",
  /** `{nativeThreadId, usage, trusted}` */
  "usage.reported",
  /**
   * `{runId, nativeThreadId, attempt, recovery, window}`: the provider rejected a turn as too long for its context;
   * `recovery` is `defer_history` (native thread recorded as full) or `replace_native_thread`. The turn is retried.
   */
  "context.overflowed",
  /**
   * `{runId, count, messageIds, toolCallIds}`: the leading items of a turn that its native thread already produced
   * (a resumed native thread replaying its history) were not recorded again
   */
  "items.replay_skipped",
  /** `{handoffId, kind, itemCount, sourceRunIds}` */
  "handoff.created",
  /** `{handoffId, addedItemIds, addedRunIds}`: missed-run recovery reused this handoff */
  "handoff.extended",
  /** `{deliveryId, handoffId, nativeThreadId}` */
  "delivery.created",
  /** `{deliveryId, budget, reason, deferCount}` */
  "delivery.deferred",
  /** `{deliveryId, mode, itemIds}`: intent written before the provider call */
  "delivery.pending",
  /** `{deliveryId, deliveredItemIds, omittedItemIds, tokens}` */
  "delivery.injected",
  /** `{deliveryId, deliveredItemIds, omittedItemIds, tokens}` */
  "delivery.inlined",
  /** `{deliveryId, reason}` */
  "delivery.superseded",
  /**
   * `{nativeThreadId, usedBefore, usedAfter, delivered, state}`; `state` (`{usedTokens, estimatedTokens, owed}`) is
   * the native thread as the compaction left it: the no-progress count only carries over while it is unchanged.
   */
  "thread.compacted",
  /**
   * On the parent: `{linkId, forkThreadId, atRunSeq}`; on the fork: `{linkId, parentThreadId, atRunSeq, runId,
   * itemCount, handoffId}` (the fork's first event after `thread.created`).
   */
  "thread.forked",
  /** On the parent: `{linkId, forkThreadId, runId, fromRunSeq, throughRunSeq, itemCount, handoffId}`; on the fork: `{linkId, parentThreadId, throughRunSeq}` */
  "thread.merged",
  /**
   * `{offloadId, generation, summaryItemId, previousOffloadId, fromSeq, cutSeq, coveredItems, coveredTokens,
   * summaryTokens, keptItems, keptTokens, keepTokens, supersededHandoffIds, handoffIds}`: `/offload` summarised
   * the history up to `cutSeq`; `handoffIds` are the handoffs that now owe the summary instead of the originals
   */
  "thread.offloaded",
  /** `{reason, keepTokens, cutSeq}`: the summariser failed; nothing else was written */
  "thread.offload_failed",
  /**
   * `{providerInstance, oldRatio, newRatio, samples, estimatedTokens, reportedTokens}`: a completed turn of this
   * thread taught the provider's tokenizer calibration (provider tokens per Baton token)
   */
  "calibration.updated"
)
export type ThreadEventType = typeof ThreadEventType.Type

export const ThreadEvent = Schema.Struct({
  threadId: ThreadId,
  /** 1-based, gap-free per thread. */
  seq: Schema.Int.pipe(Schema.positive()),
  type: ThreadEventType,
  payload: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  createdAt: Schema.DateTimeUtc
})
export type ThreadEvent = typeof ThreadEvent.Type
