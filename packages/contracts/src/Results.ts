/**
 * The results of commands, as returned to the caller and stored in command receipts (a retry with the same command
 * id gets the stored result back, decoded through the same schema). Token figures are tokens: Baton's count unless
 * a field says it is in the provider's units; item counts are numbers of items.
 */
import { Schema } from "effect"
import { RunFailureCode, RunStatus, Tokens, ToolResultOffloadControl } from "./Domain.js"
import { HandoffId, ItemId, NativeThreadId, OffloadId, ProviderInstance, ProviderThreadId, RunId, ThreadId } from "./Ids.js"

/** A non-negative number of items. */
const ItemCount = Schema.Int.pipe(Schema.nonNegative())

/** A run's 1-based position in its thread, or 0 for "before the first run". */
const RunSeq = Schema.Int.pipe(Schema.nonNegative())

/** The result of `CreateThread`: the new thread. */
export const CreateThreadResult = Schema.Struct({ threadId: ThreadId })
export type CreateThreadResult = typeof CreateThreadResult.Type

/** The result of `SwitchProvider`: the now active provider thread and the `switch` handoff owing it history (`null`: nothing owed). */
export const SwitchResult = Schema.Struct({ providerThreadId: ProviderThreadId, handoffId: Schema.NullOr(HandoffId) })
export type SwitchResult = typeof SwitchResult.Type

/**
 * The budget of one turn start (`@baton/context` Budget), every figure in tokens in the provider's units (Baton's
 * count when the calibration ratio is 1):
 * `budget = max(0, min(tokenCap, window - used - request - reserve))`, `physicalHeadroom = max(0, window - used - request)`.
 * `windowSource` tells where `window` came from, `usedSource` whether `used` was reported or estimated.
 */
export const TurnBudget = Schema.Struct({
  window: Schema.Number,
  used: Schema.Number,
  request: Schema.Number,
  reserve: Schema.Number,
  budget: Schema.Number,
  physicalHeadroom: Schema.Number,
  windowSource: Schema.Literal("model", "reported_max", "auto_compact_threshold", "default"),
  usedSource: Schema.Literal("reported", "estimate")
})
export type TurnBudget = typeof TurnBudget.Type

/** What one turn start decided about owed history. */
export const TurnStartReport = Schema.Struct({
  budget: TurnBudget,
  /** The provider instance's calibration in force (provider tokens per Baton token); 1 when none or turned off. */
  calibrationRatio: Schema.Number,
  /** How owed history went out: `none` when nothing was owed or everything was deferred. */
  mode: Schema.Literal("injected", "inline", "none"),
  deliveredItems: ItemCount,
  /** Baton tokens of the rendered history; `ceil(deliveredTokens * calibrationRatio) <= budget.budget`. */
  deliveredTokens: Tokens,
  deferredItems: ItemCount,
  /** Tokens (rendered) of the history deferred to a later turn. */
  deferredTokens: Tokens,
  /** Items left out of a delivery (each stays readable by ref). */
  omittedItems: ItemCount,
  /** Of `omittedItems`, those whose tool unit went out as a stub (tool, arguments, ref) instead of verbatim. */
  stubbedItems: Schema.optional(ItemCount),
  /**
   * Runs the delivered history was owed, and how many of them it represents (an item verbatim or a stub): every
   * owed run unless even its skeleton (user message, final answer, stubs) did not fit the budget.
   */
  owedRuns: Schema.optional(ItemCount),
  representedRuns: Schema.optional(ItemCount),
  /** Set when the injection's outcome is uncertain (lost acknowledgement); the run did not start. */
  injectionError: Schema.NullOr(Schema.String)
})
export type TurnStartReport = typeof TurnStartReport.Type

/** The result of `SendMessage`: the run's final status and what turn start decided. */
export const SendResult = Schema.Struct({
  runId: RunId,
  /** 1-based position of the run in its thread. */
  runSeq: Schema.Int.pipe(Schema.positive()),
  status: RunStatus,
  providerInstance: ProviderInstance,
  /** The generation of the native thread the run went to; `null` when it reached none. */
  nativeGeneration: Schema.NullOr(Schema.Int.pipe(Schema.positive())),
  /** Tokens the native thread holds after the run (reported, else Baton's estimate), when known. */
  usedTokens: Schema.NullOr(Tokens),
  /** The context window the turn was budgeted against, in tokens (0 when the run never reached turn start). */
  window: Tokens,
  turnStart: Schema.NullOr(TurnStartReport),
  /** Why the run did not complete, for people (see `Run.failureReason`). */
  failureReason: Schema.NullOr(Schema.String),
  /** Why the run did not complete, for code (see `RunFailureCode`). */
  failureCode: Schema.NullOr(RunFailureCode)
})
export type SendResult = typeof SendResult.Type

/**
 * Why `/compact` did not compact, for code (`CompactReport.reasonCode`):
 * - `no_native_thread`: the provider thread has no native thread yet (no turn ran there);
 * - `native_thread_missing`: its record is gone;
 * - `native_thread_untrusted`: it is no longer trusted (the next turn start replaces it);
 * - `native_thread_lost`: the provider no longer has it (the next turn start replaces it);
 * - `no_progress`: the last compactions of the unchanged native thread freed nothing (not retried);
 * - `not_supported`: this provider kind cannot compact natively (the model APIs: their native thread is the message
 *   list Baton sends); owed history was drained into it as far as the window allows, and `/offload` makes the rest
 *   smaller (docs/providers.md).
 */
export const CompactSkipCode = Schema.Literal(
  "no_native_thread",
  "native_thread_missing",
  "native_thread_untrusted",
  "native_thread_lost",
  "no_progress",
  "not_supported"
)
export type CompactSkipCode = typeof CompactSkipCode.Type

/** What `/compact` did. Token counts are the native thread's usage, in tokens. */
export const CompactReport = Schema.Struct({
  compacted: Schema.Boolean,
  /** Why it did not compact (`compacted: false`), for people, else `null`. */
  reason: Schema.NullOr(Schema.String),
  /**
   * Why it did not compact, for code (`CompactSkipCode`); `null` when it compacted. Absent from reports stored
   * before it existed (a repeated command id answers the first report as stored).
   */
  reasonCode: Schema.optional(Schema.NullOr(CompactSkipCode)),
  usedBefore: Schema.NullOr(Tokens),
  usedAfter: Schema.NullOr(Tokens),
  deliveredItems: ItemCount,
  deliveredTokens: Tokens,
  omittedItems: ItemCount,
  /** Deliveries still `deferred` after `/compact` (no native injection, or nothing fit). */
  stillDeferred: ItemCount
})
export type CompactReport = typeof CompactReport.Type

/**
 * How one `/offload` operation ended (or stands):
 * - `offloaded`: the summary was committed;
 * - `nothing`: nothing worth offloading (the reason says why), nothing written;
 * - `stale`: the thread advanced while the summary was being written (a run was queued or appended items, or another
 *   offload committed): the summary was discarded, the conversation is unchanged, retry;
 * - `cancelled`: a client cancelled it before it committed; the conversation is unchanged;
 * - `failed`: the summariser failed or its summary was refused (`OffloadFailed`); the conversation is unchanged;
 * - `denied`: the configured PreCompact hook denied it (`reason` is the hook's); nothing was summarised;
 * - `running`: still in flight (`GET /threads/{id}/offload/{operationId}` only);
 * - `preview`: a dry run (`dryRun: true`): what an offload would do now; nothing was called or written.
 */
export const OffloadOutcome = Schema.Literal("offloaded", "nothing", "stale", "cancelled", "failed", "denied", "running", "preview")
export type OffloadOutcome = typeof OffloadOutcome.Type

/**
 * What `/offload`'s summariser calls cost: the tokens billed over every call of the operation (uncached input, cache
 * write, cache read, output) and their price in US dollars at the summariser instance's prices (`null` without
 * prices). `state`: `committed` with an offload that committed, `abandoned` when the operation was discarded, failed
 * or was cancelled (the money was spent all the same, and it is counted in the thread's totals). `calls` counts the
 * calls whose usage the provider reported (a call cut short by a cancellation reports none).
 */
export const SummariserCost = Schema.Struct({
  providerInstance: Schema.NullOr(Schema.String),
  calls: ItemCount,
  inputTokens: Tokens,
  cacheWriteTokens: Tokens,
  cacheReadTokens: Tokens,
  outputTokens: Tokens,
  costUsd: Schema.NullOr(Schema.Number),
  state: Schema.Literal("committed", "abandoned")
})
export type SummariserCost = typeof SummariserCost.Type

/**
 * What `/offload` did (or, with `dryRun`, would do). Token counts are rendered tokens (`Item.tokens`).
 * `operationId` names the operation (the request's, else generated): the same id again answers this outcome.
 * `message` is the one line to show the user.
 */
export const OffloadReport = Schema.Struct({
  operationId: Schema.String,
  outcome: OffloadOutcome,
  message: Schema.String,
  offloaded: Schema.Boolean,
  /** Why nothing was offloaded (`offloaded: false`), else `null`. */
  reason: Schema.NullOr(Schema.String),
  offloadId: Schema.NullOr(OffloadId),
  summaryItemId: Schema.NullOr(ItemId),
  /** Every item with `seq <= cutSeq` (offload summaries excepted) is covered by the summary chain. */
  cutSeq: Schema.NullOr(Schema.Int.pipe(Schema.positive())),
  /** Items (and their tokens) this pass summarised for the first time. */
  coveredItems: ItemCount,
  coveredTokens: Tokens,
  summaryTokens: Tokens,
  /** Items after the cut: the verbatim part of the visible history. */
  keptItems: ItemCount,
  keptTokens: Tokens,
  /** The verbatim tail asked for, in tokens. */
  keepTokens: Tokens,
  /** How many items the cut moved earlier so that no tool unit is split. */
  movedForToolUnits: ItemCount,
  supersededHandoffIds: Schema.Array(HandoffId),
  /** The handoffs that now owe the summary instead of the originals. */
  handoffIds: Schema.Array(HandoffId),
  /** The items the summary covers (would cover, in a preview), in thread order. */
  coveredItemIds: Schema.Array(ItemId),
  /** The model-visible history before (previous summary + every item after its cut) and after (summary + kept). */
  tokensBefore: Tokens,
  /** In a preview an estimate (the summary's size is not known before it is written). */
  tokensAfter: Tokens,
  /**
   * The one-time prompt-cache rewrite the offload causes on the active provider: the new history is written to the
   * cache instead of read, `(w - r) x tokensAfter` in base-input-token equivalents (Anthropic's multipliers when the
   * instance has no prices) and in dollars at the instance's input price (`null` without prices).
   */
  cacheRewriteTokens: Tokens,
  cacheRewriteUsd: Schema.NullOr(Schema.Number),
  /** What the summariser's calls cost (`null`: none reported, e.g. the offline summariser, or a preview). */
  cost: Schema.NullOr(SummariserCost),
  /** Whether a failed, stale or cancelled offload is worth retrying (with a new operation id). */
  retryable: Schema.Boolean
})
export type OffloadReport = typeof OffloadReport.Type


/**
 * What `POST /threads/{id}/offload/undo` did: the offload it undid (or why none: `undone: false` and `reason`), the
 * visible history's tokens before and after (rendered tokens), and `message`, the line for the user.
 */
export const OffloadUndoReport = Schema.Struct({
  undone: Schema.Boolean,
  reason: Schema.NullOr(Schema.String),
  offloadId: Schema.NullOr(OffloadId),
  summaryItemId: Schema.NullOr(ItemId),
  /** Items visible again: the undone summary's covered items after the previous summary's cut. */
  restoredItems: ItemCount,
  tokensBefore: Tokens,
  tokensAfter: Tokens,
  message: Schema.String
})
export type OffloadUndoReport = typeof OffloadUndoReport.Type

/**
 * The dry run of tool-result offload on a thread's active native thread (`GET /threads/{id}/tool-result-offload`,
 * `baton offload --dry-run`): what the policy (docs/offload.md) would replace with stubs before the next request, and
 * what that would cost and save. Stores nothing.
 *
 * - `units`: per tool unit, the `thread_read` refs (`tool:<call id>`) and tool names of its calls;
 * - `tokensBefore`/`tokensAfter`: the whole request (system prompt and tools included), Baton tokens;
 * - `rewriteCostTokens`: the one-time extra cost of rewriting the provider's cached suffix, in base-input-token
 *   equivalents, `rewriteCostUsd` the same at the instance's input price; `expectedSavingsTokens` what the stubs save
 *   over the requests still expected; `breakEvenRequests` after how many later requests the flush has paid for itself
 *   (`null`: never, or nothing to stub);
 * - `reason`: why nothing would be stubbed (`tier: "none"` or `"emergency"`), else `""`;
 * - `stubbedEntries`: message-list entries already stubs; `undoable`: a flush can be undone.
 */
export const ToolResultOffloadPreview = Schema.Struct({
  threadId: ThreadId,
  providerInstance: ProviderInstance,
  nativeRef: Schema.String,
  enabled: Schema.Boolean,
  tier: Schema.Literal("none", "mild", "requested", "aggressive", "emergency"),
  reason: Schema.String,
  units: Schema.Array(Schema.Struct({ refs: Schema.Array(Schema.String), toolNames: Schema.Array(Schema.String) })),
  entrySeqs: Schema.Array(ItemCount),
  tokensBefore: Tokens,
  tokensAfter: Tokens,
  rewriteCostTokens: Tokens,
  rewriteCostUsd: Schema.Number,
  expectedSavingsTokens: Tokens,
  breakEvenRequests: Schema.NullOr(Schema.Number),
  stubbedEntries: ItemCount
})
export type ToolResultOffloadPreview = typeof ToolResultOffloadPreview.Type

/**
 * The outcome of `POST /threads/{id}/tool-result-offload/undo`: `undone` with the restored message-list entries
 * (`entrySeqs`) of the undone flush (`flushSeq`), or `undone: false` and the `reason` (nothing to undo).
 */
export const ToolResultOffloadUndo = Schema.Struct({
  threadId: ThreadId,
  providerInstance: ProviderInstance,
  nativeRef: Schema.String,
  undone: Schema.Boolean,
  flushSeq: Schema.NullOr(ItemCount),
  entrySeqs: Schema.Array(ItemCount),
  reason: Schema.String
})
export type ToolResultOffloadUndo = typeof ToolResultOffloadUndo.Type

/** The result of `ForkThread`: the new thread, its provider thread, and what it is owed. */
export const ForkResult = Schema.Struct({
  threadId: ThreadId,
  providerThreadId: ProviderThreadId,
  /** The parent's runs `1..atRunSeq` were copied into the fork's first run. */
  atRunSeq: RunSeq,
  runId: RunId,
  itemCount: ItemCount,
  /** Tokens (rendered) of the copied history: the `fork` handoff's size. */
  tokens: Tokens,
  /** The `fork` handoff owing the copied history; `null` when nothing is owed (no history, or a native fork). */
  handoffId: Schema.NullOr(HandoffId),
  /**
   * Present for a native fork: the fork's native thread, which the provider copied from the parent's (Codex
   * `thread/fork`) and which holds the copied history already, so the fork's first turn replays nothing.
   */
  nativeThreadId: Schema.optional(NativeThreadId)
})
export type ForkResult = typeof ForkResult.Type

/** The result of `MergeBack`: what was merged into the parent (`runId` null: nothing new to merge). */
export const MergeResult = Schema.Struct({
  parentThreadId: ThreadId,
  runId: Schema.NullOr(RunId),
  /** The fork's runs `(fromRunSeq, throughRunSeq]` were merged. */
  fromRunSeq: RunSeq,
  throughRunSeq: RunSeq,
  itemCount: ItemCount,
  /** Tokens (rendered) of the merged history: the `merge` handoff's size. */
  tokens: Tokens,
  handoffId: Schema.NullOr(HandoffId),
  /**
   * Present when the parent had an unfinished run (running, waiting or queued) ahead of the merge: the merge takes its
   * place after it, as a message queued behind it would. Its copies and its handoff (`handoffId` null here) are
   * recorded when every run ahead of it has ended (`thread.merged`'s `behindRunId`).
   */
  behindRunId: Schema.optional(RunId)
})
export type MergeResult = typeof MergeResult.Type

/**
 * The answer of `POST /threads/{id}/merge`: the `MergeResult` (as its command receipt keeps it) with `merged`, whether
 * anything was merged (`false`: the fork has no run ended since it was forked or last merged; `runId` and `handoffId`
 * are null, `fromRunSeq` equals `throughRunSeq`, an empty range), and `message`, the line for the user saying what was
 * merged or that nothing was (`mergeAnswer`).
 */
export const MergeAnswer = Schema.Struct({ ...MergeResult.fields, merged: Schema.Boolean, message: Schema.String })
export type MergeAnswer = typeof MergeAnswer.Type

/** `n` things of a kind named `one` (`1 item`, `2 items`). */
const count = (n: number, one: string) => `${n} ${one}${n === 1 ? "" : "s"}`

/**
 * `result` as the API answers it (`MergeAnswer`). With nothing merged, the message says so and why; it used to carry
 * only the fields, whose `fromRunSeq`/`throughRunSeq` (`1`, `1`) read as a range that had been merged.
 */
export const mergeAnswer = (result: MergeResult): MergeAnswer => {
  const since = result.fromRunSeq <= 1 ? "since it was forked" : `since its last merge (through run ${result.fromRunSeq})`
  if (result.runId === null) {
    return {
      ...result,
      merged: false,
      message: `nothing was merged: the fork has no ended run ${since}; a run still in progress is merged once it has ended`
    }
  }
  const first = result.fromRunSeq + 1
  const runs = first === result.throughRunSeq ? `run ${first}` : `runs ${first}..${result.throughRunSeq}`
  const what = `merged the fork's ${runs} (${count(result.itemCount, "item")}, ${count(result.tokens, "token")}) into thread ${result.parentThreadId} as run ${result.runId}`
  const owed = result.behindRunId !== undefined
    ? `, behind run ${result.behindRunId}: its copies and handoff are recorded when every run ahead of it has ended`
    : result.handoffId === null
    ? ""
    : `, owed to the parent's active provider by handoff ${result.handoffId}`
  return { ...result, merged: true, message: what + owed }
}

/**
 * A thread's tool-result offload control and what it comes to on the active provider instance
 * (`GET`/`PUT /threads/{id}/tool-result-offload/control`, docs/offload.md "Control").
 *
 * - `control`: the thread's own overrides (`{}`: it inherits everything);
 * - `effective`: the instance's settings with the thread's applied, or `null` when the thread has no active provider
 *   instance with a message list yet (scripted or Codex instances, or before the first switch): `enabled`, the
 *   policy's `settings`, and `pinnedToolCallIds`, the tool calls whose units the pins keep verbatim.
 */
export const ToolResultOffloadControlView = Schema.Struct({
  threadId: ThreadId,
  control: ToolResultOffloadControl,
  effective: Schema.NullOr(Schema.Struct({
    providerInstance: ProviderInstance,
    enabled: Schema.Boolean,
    settings: Schema.Struct({
      keepNewestUnits: Schema.Int,
      aggressiveRatio: Schema.Number,
      aggressiveTargetRatio: Schema.Number,
      emergencyRatio: Schema.Number,
      minExpectedRequests: Schema.Int
    }),
    pinnedToolCallIds: Schema.Array(Schema.String)
  }))
})
export type ToolResultOffloadControlView = typeof ToolResultOffloadControlView.Type
