/**
 * The durable domain model: threads, runs, run attempts, items, provider threads, native threads, context usage,
 * context handoffs and their per-destination deliveries. Vocabulary as in docs/design.md.
 *
 * Times are ISO-8601 strings in UTC (`DateTimeUtc`); token counts are non-negative integers.
 */
import { Schema } from "effect"
import type { ProviderErrorCode } from "./Errors.js"
import { storableText } from "./Text.js"
import {
  DeliveryId,
  HandoffId,
  ItemId,
  NativeThreadId,
  OffloadId,
  ProviderInstance,
  ProviderThreadId,
  RunAttemptId,
  RunId,
  ThreadId,
  ToolCallId
} from "./Ids.js"

/** A non-negative integer count of tokens. */
export const Tokens = Schema.Int.pipe(Schema.nonNegative())

export const Thread = Schema.Struct({
  id: ThreadId,
  title: Schema.String,
  /** The provider thread the next run goes to; `null` until the first run is sent. */
  activeProviderThreadId: Schema.NullOr(ProviderThreadId),
  createdAt: Schema.DateTimeUtc,
  updatedAt: Schema.DateTimeUtc
})
export type Thread = typeof Thread.Type

/**
 * docs/design.md run statuses. `queued` and `starting` are transient; `waiting` means the model called the client's
 * tools and the run waits for their results (`SubmitToolResults`), blocking the thread's queue as a running run
 * does; the last four are terminal.
 */
export const RunStatus = Schema.Literal("queued", "starting", "running", "waiting", "completed", "interrupted", "failed", "cancelled")
export type RunStatus = typeof RunStatus.Type
export const terminalRunStatuses: ReadonlyArray<RunStatus> = ["completed", "interrupted", "failed", "cancelled"]

/**
 * Where a run stopped, when it did not complete: `before_provider` means the provider never read the prompt
 * (the run is a missed run and its history is owed); `after_provider` means the provider saw the prompt.
 */
export const RunStopPoint = Schema.Literal("before_provider", "after_provider")
export type RunStopPoint = typeof RunStopPoint.Type

/**
 * Why a run did not complete, stored as a code beside the one-line `failureReason` (read the code, never the prose):
 * - `provider_refused`, `provider_interrupted`, `provider_timeout`, `overflow`, `provider_ack_lost`,
 *   `provider_unavailable`, `provider_lost_thread`, `provider_protocol`: the provider's turn failed with the
 *   `ProviderError` code of the same meaning (`overflow`: the prompt does not fit even an empty native thread);
 * - `provider_missing`: the run's provider instance is not configured in this process, or its provider thread is gone;
 * - `turn_start_failed`: turn start failed for a reason other than the provider (e.g. storage);
 * - `injection_unconfirmed`: a history injection's outcome is unknown (lost acknowledgement), so the turn did not start;
 * - `output_not_recorded`: the provider answered but its output could not be stored;
 * - `interrupted_by_user`: the user interrupted the run (before or during the provider turn; also when the provider's
 *   own `interrupted`, answering that interrupt, was recorded first: `provider_interrupted` is a provider stopping
 *   a turn nobody in this process asked it to stop);
 * - `process_restarted`: the process stopped while the run was unfinished; restart recovery ended it;
 * - `process_stopped`: the process was asked to stop (SIGINT/SIGTERM, a shutdown) while the run was in flight and
 *   interrupted it on the way out;
 * - `tool_results_timeout`: the run waited for the client's tool results past its deadline (OrchestratorConfig
 *   `toolResultTimeoutMillis`); every open call was answered with an error result;
 * - `turn_crashed`: the run's turn stopped inside the process that drove it without recording an outcome (a defect,
 *   or the database failing as the turn ended); that process, still running, ended it as restart recovery would
 *   (the native thread read back), so the thread goes on. A defect of Baton's, never a provider's.
 */
export const RunFailureCode = Schema.Literal(
  "provider_refused",
  "provider_interrupted",
  "provider_timeout",
  "overflow",
  "provider_ack_lost",
  "provider_unavailable",
  "provider_lost_thread",
  "provider_protocol",
  "provider_missing",
  "turn_start_failed",
  "injection_unconfirmed",
  "output_not_recorded",
  "interrupted_by_user",
  "process_restarted",
  "process_stopped",
  "tool_results_timeout",
  "turn_crashed"
)
export type RunFailureCode = typeof RunFailureCode.Type

/** The run failure code of a provider turn that failed with `ProviderError` code `code`. */
export const runFailureCodeOfProvider = (code: ProviderErrorCode): RunFailureCode => {
  switch (code) {
    case "refused":
      return "provider_refused"
    case "interrupted":
      return "provider_interrupted"
    case "timeout":
      return "provider_timeout"
    case "overflow":
      return "overflow"
    case "ack_lost":
      return "provider_ack_lost"
    case "unavailable":
      return "provider_unavailable"
    case "thread_not_found":
      return "provider_lost_thread"
    case "protocol":
      return "provider_protocol"
  }
}

export const Run = Schema.Struct({
  id: RunId,
  threadId: ThreadId,
  /** 1-based position of the run in its thread. */
  seq: Schema.Int.pipe(Schema.positive()),
  providerThreadId: ProviderThreadId,
  status: RunStatus,
  /** The user's prompt, exactly as sent by the user; the provider must receive these bytes unchanged. */
  prompt: Schema.String,
  /** Set for `interrupted`/`failed`/`cancelled`. */
  stopPoint: Schema.NullOr(RunStopPoint),
  /** A one-line reason for a run that did not complete, for people. */
  failureReason: Schema.NullOr(Schema.String),
  /** Why the run did not complete, for code; `null` for a run that completed or is not over (and for runs that ended before codes were stored). */
  failureCode: Schema.NullOr(RunFailureCode),
  /** The native thread the provider ran this run on, once started. */
  nativeThreadId: Schema.NullOr(NativeThreadId),
  createdAt: Schema.DateTimeUtc,
  updatedAt: Schema.DateTimeUtc
})
export type Run = typeof Run.Type

export const RunAttemptStatus = Schema.Literal("starting", "running", "completed", "failed", "interrupted")
export type RunAttemptStatus = typeof RunAttemptStatus.Type

export const RunAttempt = Schema.Struct({
  id: RunAttemptId,
  runId: RunId,
  /** 1-based attempt number within the run. */
  attempt: Schema.Int.pipe(Schema.positive()),
  nativeThreadId: NativeThreadId,
  status: RunAttemptStatus,
  error: Schema.NullOr(Schema.String),
  createdAt: Schema.DateTimeUtc,
  updatedAt: Schema.DateTimeUtc
})
export type RunAttempt = typeof RunAttempt.Type

/** docs/design.md item kinds. */
export const ItemKind = Schema.Literal(
  "user_message",
  "assistant_message",
  "tool_call",
  "tool_result",
  "reasoning",
  "error",
  "summary",
  "handoff_marker"
)
export type ItemKind = typeof ItemKind.Type

/**
 * The state of a `tool_call`: `answered` when a `tool_result` with the same `toolCallId` exists, `dangling` when the
 * source ended without a result (aborted turn), `interrupted` when Baton interrupted the run during the call.
 */
export const ToolCallState = Schema.Literal("answered", "dangling", "interrupted")
export type ToolCallState = typeof ToolCallState.Type

/**
 * One entry of history. Items have stable ids and are never edited or deleted.
 *
 * - `text`: the model-visible content (prompt, answer, tool arguments as JSON, tool output, summary text).
 * - `toolCallId` pairs a `tool_call` with its `tool_result`; `toolName` names the tool on both.
 * - `messageId` groups items produced by one assistant response (text, reasoning and the tool calls it issued);
 *   with the paired results they form a tool unit.
 * - `tokens`: the token count of the item's rendered form (see `@baton/context` Render), computed once at write
 *   time so turn start never re-tokenizes history.
 */
export const Item = Schema.Struct({
  id: ItemId,
  threadId: ThreadId,
  /** The run that produced the item; `null` for items outside any run (imported preamble, summaries). */
  runId: Schema.NullOr(RunId),
  /** 1-based position in the thread; strictly increasing, the thread's total order. */
  seq: Schema.Int.pipe(Schema.positive()),
  kind: ItemKind,
  text: Schema.String,
  toolCallId: Schema.NullOr(ToolCallId),
  toolName: Schema.NullOr(Schema.String),
  messageId: Schema.NullOr(Schema.String),
  isError: Schema.Boolean,
  toolCallState: Schema.NullOr(ToolCallState),
  tokens: Tokens,
  createdAt: Schema.DateTimeUtc
})
export type Item = typeof Item.Type

/**
 * Context usage as last reported by the provider for one native thread.
 * `usedTokens`: tokens the native thread holds; `maxTokens`: its window if the provider reports one;
 * `autoCompactThreshold`: where the provider compacts by itself.
 */
export const ContextUsage = Schema.Struct({
  usedTokens: Tokens,
  maxTokens: Schema.optional(Tokens),
  autoCompactThreshold: Schema.optional(Tokens)
})
export type ContextUsage = typeof ContextUsage.Type

/**
 * A provider thread: the thread's lane on one provider instance. `syncedRunSeq` is the bookkeeping watermark of
 * what this lane owes: every item of runs with `seq <= syncedRunSeq` has been seen by the active native thread or is
 * covered by a handoff toward this provider thread.
 */
export const ProviderThread = Schema.Struct({
  id: ProviderThreadId,
  threadId: ThreadId,
  providerInstance: ProviderInstance,
  model: Schema.String,
  /** The model's context window in tokens, as configured for the provider instance. */
  contextWindow: Schema.NullOr(Tokens),
  activeNativeThreadId: Schema.NullOr(NativeThreadId),
  syncedRunSeq: Schema.Int.pipe(Schema.nonNegative()),
  createdAt: Schema.DateTimeUtc,
  updatedAt: Schema.DateTimeUtc
})
export type ProviderThread = typeof ProviderThread.Type

export const NativeThreadStatus = Schema.Literal("active", "replaced")
export type NativeThreadStatus = typeof NativeThreadStatus.Type

/**
 * A native thread: the provider-side conversation of one provider thread. `generation` starts at 1 and increases
 * each time Baton replaces the native thread. `usage` is the last usage the provider reported for *this* native
 * thread (never copied from another), `null` until it reports. `estimatedTokens` is Baton's own count of what this
 * native thread has been sent, the fallback when no usage is reported.
 */
export const NativeThread = Schema.Struct({
  id: NativeThreadId,
  providerThreadId: ProviderThreadId,
  generation: Schema.Int.pipe(Schema.positive()),
  nativeRef: Schema.String,
  status: NativeThreadStatus,
  usage: Schema.NullOr(ContextUsage),
  estimatedTokens: Tokens,
  /** How many `/compact` or auto-compactions in a row freed nothing. */
  compactionsWithoutProgress: Schema.Int.pipe(Schema.nonNegative()),
  /**
   * The least this native thread holds by the provider's own count (provider tokens), learned from a request the
   * provider rejected as over its window (the size it gave for that request less what the request added); absent
   * when none was rejected. It rises by what the native thread takes after (turns, their output, injections, at
   * the calibration); a later usage report does not lower it (a report can be stale), a trusted one at or above it
   * moves it up to the report (the report says more, measured where the growth was estimated), and only a compaction
   * (Baton's, or the provider's own when it says so: `TurnEvent.native_compacted`) or a replacement native thread
   * lets it go.
   */
  heldAtLeast: Schema.optional(Tokens),
  createdAt: Schema.DateTimeUtc,
  updatedAt: Schema.DateTimeUtc
})
export type NativeThread = typeof NativeThread.Type

/** Why history is owed (docs/design.md): provider switch, fork, merge-back, missed run, native-thread replacement. */
export const HandoffKind = Schema.Literal("switch", "fork", "merge", "missed_run", "replacement")
export type HandoffKind = typeof HandoffKind.Type

/**
 * A context handoff: history owed to one provider thread. `itemIds` are the items owed, in thread order;
 * `sourceRunIds` the runs they came from. A handoff's owed set can grow only by missed-run recovery, which reuses
 * an unsettled handoff instead of allocating a new one.
 */
export const ContextHandoff = Schema.Struct({
  id: HandoffId,
  threadId: ThreadId,
  kind: HandoffKind,
  targetProviderThreadId: ProviderThreadId,
  sourceRunIds: Schema.Array(RunId),
  itemIds: Schema.Array(ItemId),
  /** The sum of the owed items' `tokens` (rendered form), kept so a deferral needs no item reads. */
  tokens: Tokens,
  /** Items left out of the delivery that settled this handoff; each stays readable by ref. */
  omittedItemIds: Schema.Array(ItemId),
  createdAt: Schema.DateTimeUtc,
  updatedAt: Schema.DateTimeUtc
})
export type ContextHandoff = typeof ContextHandoff.Type

/**
 * Delivery states (docs/handoff-lifecycle.md): `deferred` (owed, not sent), `pending` (intent written, provider
 * call in flight or uncertain), `injected` (sent natively, acknowledged), `inline` (rendered before the user's
 * prompt of a started turn), `superseded` (covered by a replacement or summary; nothing more to send).
 */
export const DeliveryStatus = Schema.Literal("deferred", "pending", "injected", "inline", "superseded")
export type DeliveryStatus = typeof DeliveryStatus.Type
export const settledDeliveryStatuses: ReadonlyArray<DeliveryStatus> = ["injected", "inline", "superseded"]

export const DeliveryMode = Schema.Literal("injected", "inline")
export type DeliveryMode = typeof DeliveryMode.Type

/** The lifecycle of one handoff toward one destination native thread. */
export const HandoffDelivery = Schema.Struct({
  id: DeliveryId,
  handoffId: HandoffId,
  nativeThreadId: NativeThreadId,
  status: DeliveryStatus,
  /** The mode chosen when the delivery went `pending`; kept after it settles. */
  mode: Schema.NullOr(DeliveryMode),
  /** The run whose turn start (or `/compact`) sent it. */
  runId: Schema.NullOr(RunId),
  deliveredItemIds: Schema.Array(ItemId),
  omittedItemIds: Schema.Array(ItemId),
  deliveredTokens: Tokens,
  /** How many turn starts found no budget for this delivery. */
  deferCount: Schema.Int.pipe(Schema.nonNegative()),
  lastDeferReason: Schema.NullOr(Schema.String),
  createdAt: Schema.DateTimeUtc,
  updatedAt: Schema.DateTimeUtc
})
export type HandoffDelivery = typeof HandoffDelivery.Type

export const ThreadLinkKind = Schema.Literal("fork", "merge")
export type ThreadLinkKind = typeof ThreadLinkKind.Type

/**
 * A fork or a merge-back between a parent thread and a fork. Both copy history as one synthetic run (`runId`) whose
 * items are copies, in order, of the transferable items of the source runs `(fromRunSeq, throughRunSeq]`:
 * - `fork`: the run is the fork's first run (seq 1); the source is the parent's runs `(0, atRunSeq]`;
 * - `merge`: the run is appended to the parent; the source is the fork's runs since the fork or its last merge.
 * The originals stay in their thread; a synthetic run never reaches a provider as a prompt (its `prompt` is empty):
 * its items are owed by the link's handoff (`null` when there was nothing to owe).
 */
export const ThreadLink = Schema.Struct({
  id: Schema.String,
  kind: ThreadLinkKind,
  parentThreadId: ThreadId,
  forkThreadId: ThreadId,
  runId: RunId,
  fromRunSeq: Schema.Int.pipe(Schema.nonNegative()),
  throughRunSeq: Schema.Int.pipe(Schema.nonNegative()),
  itemCount: Schema.Int.pipe(Schema.nonNegative()),
  handoffId: Schema.NullOr(HandoffId),
  createdAt: Schema.DateTimeUtc
})
export type ThreadLink = typeof ThreadLink.Type
/**
 * One `/offload` pass: the record that summary item `summaryItemId` stands for the history of the thread up to and
 * including item `cutSeq` (a chain: it extends `previousOffloadId`, whose summary text it summarised together with
 * the items it newly covers). Model-visible history after it = the summary + every item with `seq > cutSeq` (other
 * offload summaries excepted). Originals are never edited or deleted; they stay readable by id.
 *
 * - `generation`: 1 for the first offload of the thread, +1 for each later one (unique per thread).
 * - `coveredItemIds`: the items this pass summarised for the first time (`previous cutSeq < seq <= cutSeq`, offload
 *   summaries excepted), in thread order; `coveredTokens` their rendered tokens.
 * - `keepTokens`: the verbatim tail it was asked to keep, in tokens.
 */
export const Offload = Schema.Struct({
  id: OffloadId,
  threadId: ThreadId,
  generation: Schema.Int.pipe(Schema.positive()),
  summaryItemId: ItemId,
  previousOffloadId: Schema.NullOr(OffloadId),
  fromSeq: Schema.Int.pipe(Schema.positive()),
  cutSeq: Schema.Int.pipe(Schema.positive()),
  coveredItemIds: Schema.Array(ItemId),
  coveredTokens: Tokens,
  keepTokens: Tokens,
  createdAt: Schema.DateTimeUtc
})
export type Offload = typeof Offload.Type

/**
 * What one run cost (issue "Real model providers", item 5): the tokens its turn was billed, summed over the turn's
 * model requests — read uncached (`inputTokens`), written to the prompt cache (`cacheWriteTokens`), read from it
 * (`cacheReadTokens`), produced (`outputTokens`, reasoning included) — and their price in US dollars under the
 * instance's configured per-million prices (`costUsd`, `null` when the instance has no prices).
 */
export const RunCost = Schema.Struct({
  runId: RunId,
  threadId: ThreadId,
  providerInstance: Schema.String,
  inputTokens: Tokens,
  cacheWriteTokens: Tokens,
  cacheReadTokens: Tokens,
  outputTokens: Tokens,
  costUsd: Schema.NullOr(Schema.Number),
  createdAt: Schema.DateTimeUtc
})
export type RunCost = typeof RunCost.Type

/**
 * Tool names Baton offers the model itself (`thread_read`, and `offload_context` on instances with tool-result
 * offload; executed by Baton): a client tool of that name would be
 * offered twice (providers refuse duplicate tool names) and its calls would never reach the client.
 */
export const reservedToolNames: ReadonlyArray<string> = ["thread_read", "offload_context"]

/**
 * Whether `item` is a call to one of Baton's own tools or its result (`reservedToolNames`): executed by Baton inside
 * the turn, kept in the record and readable by id, but never shown to the client as a tool call (run views and item
 * pages leave it out unless asked) nor handed to another provider (its result is derived from history that is handed
 * over itself).
 */
export const isBatonToolItem = (item: { readonly kind: string; readonly toolName: string | null }): boolean =>
  (item.kind === "tool_call" || item.kind === "tool_result") && item.toolName !== null && reservedToolNames.includes(item.toolName)

/** A tool name as the model APIs accept it: 1 to 64 of `[A-Za-z0-9_-]` (Anthropic's and OpenAI's common rule). */
export const ToolName = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z0-9_-]{1,64}$/, { message: () => "a tool name is 1 to 64 characters of A-Z, a-z, 0-9, _ and -" }),
  Schema.filter((name) =>
    !reservedToolNames.includes(name) ||
    `${JSON.stringify(name)} is Baton's own tool (it reads omitted history back); give the client's tool another name`
  )
)

/** The first string (a key or a value) inside `value` that `check` refuses, as its reason; `true` when none. */
const storableJson = (what: string) => (value: unknown): true | string => {
  const check = storableText(what)
  const walk = (v: unknown): true | string => {
    if (typeof v === "string") return check(v)
    if (Array.isArray(v)) {
      for (const x of v) {
        const r = walk(x)
        if (r !== true) return r
      }
    } else if (v !== null && typeof v === "object") {
      for (const [k, x] of Object.entries(v)) {
        const r = check(k) === true ? walk(x) : check(k)
        if (r !== true) return r
      }
    }
    return true
  }
  return walk(value)
}

/**
 * A tool of the client's that the model may call: `name`, what it does (`description`, at most 10,000 characters)
 * and its input as a JSON Schema object (`inputSchema`, sent to the provider verbatim). The client runs it and posts
 * the result (`SubmitToolResults`); Baton never executes it.
 */
export const ClientTool = Schema.Struct({
  name: ToolName,
  description: Schema.String.pipe(Schema.maxLength(10_000), Schema.filter(storableText("the tool's description"))),
  inputSchema: Schema.Record({ key: Schema.String, value: Schema.Unknown }).pipe(
    Schema.filter(storableJson("the tool's inputSchema"))
  )
})
export type ClientTool = typeof ClientTool.Type

/**
 * The tools a run offers: the thread's, then the message's — a message's tool replaces the thread's tool of the
 * same name (in the thread's position) and the others are added after, in the message's order.
 */
export const mergeTools = (thread: ReadonlyArray<ClientTool>, message: ReadonlyArray<ClientTool>): ReadonlyArray<ClientTool> => {
  const byName = new Map(message.map((t) => [t.name, t]))
  const merged = thread.map((t) => byName.get(t.name) ?? t)
  const seen = new Set(thread.map((t) => t.name))
  return [...merged, ...message.filter((t) => !seen.has(t.name))]
}

/** A tool call the model made that waits for the client's result: its id, the tool's name and the arguments (JSON text). */
export const OpenToolCall = Schema.Struct({
  toolCallId: ToolCallId,
  name: Schema.String,
  arguments: Schema.String
})
export type OpenToolCall = typeof OpenToolCall.Type

/** The client's result of one tool call: `output` as text (what the model reads), `isError` when the tool failed. */
export const ToolResult = Schema.Struct({
  toolCallId: ToolCallId,
  output: Schema.String.pipe(Schema.maxLength(1_048_576), Schema.filter(storableText("the tool result's output"))),
  isError: Schema.optionalWith(Schema.Boolean, { default: () => false })
})
export type ToolResult = typeof ToolResult.Type

/**
 * An item not yet recorded (no id, thread or seq): the held tool unit of a waiting run (its calls and what the model
 * produced after them), recorded with the results.
 */
export const PendingItem = Schema.Struct({
  kind: ItemKind,
  text: Schema.String,
  toolCallId: Schema.NullOr(Schema.String),
  toolName: Schema.NullOr(Schema.String),
  messageId: Schema.NullOr(Schema.String),
  isError: Schema.Boolean,
  toolCallState: Schema.NullOr(ToolCallState)
})
export type PendingItem = typeof PendingItem.Type

/**
 * `open`: the run waits for the client's results; `answered`: they are recorded and the run is owed its continuation;
 * `closed`: the wait is over (continued, timed out or interrupted).
 */
export const ToolWaitState = Schema.Literal("open", "answered", "closed")
export type ToolWaitState = typeof ToolWaitState.Type

/**
 * A run's wait for the client's tool results (one per run, rewritten at each round): the open `calls`, the `held`
 * tool unit (recorded with the results, so the record never holds a call without its result), the `results` once
 * posted, and the `deadlineAt` after which the run ends `failed` (`tool_results_timeout`).
 */
export const ToolWait = Schema.Struct({
  runId: RunId,
  threadId: ThreadId,
  nativeThreadId: NativeThreadId,
  state: ToolWaitState,
  calls: Schema.Array(OpenToolCall),
  held: Schema.Array(PendingItem),
  results: Schema.NullOr(Schema.Array(ToolResult)),
  /** The round of the run (1 for its first wait). */
  round: Schema.Int.pipe(Schema.positive()),
  deadlineAt: Schema.DateTimeUtc,
  createdAt: Schema.DateTimeUtc,
  updatedAt: Schema.DateTimeUtc
})
export type ToolWait = typeof ToolWait.Type

/** A share of the context window, in (0, 1]. */
const WindowRatio = Schema.Number.pipe(Schema.greaterThan(0), Schema.lessThanOrEqualTo(1))

/**
 * A thread's own tool-result offload control (issue 11 item 4, docs/offload.md "Control"): what it overrides of its
 * provider instance's settings. Every field is optional; an absent field inherits the instance's value.
 *
 * - `enabled`: tool-result offload on or off for this thread (overrides the instance's `toolResultOffload`);
 * - `keepNewestUnits`, `aggressiveRatio`, `aggressiveTargetRatio`, `emergencyRatio`, `minExpectedRequests`: the
 *   policy's settings (`ToolResultOffload.Settings` in `@baton/context`); the ratios are shares of the window and,
 *   merged with the instance's, must keep `aggressiveTargetRatio < aggressiveRatio <= emergencyRatio`;
 * - `pinnedItemIds`: items of the thread that are never offloaded; pinning a tool call or result keeps its whole tool
 *   unit verbatim in the message list (and out of the stubs of a handoff). At most 1,000.
 */
export const ToolResultOffloadControl = Schema.Struct({
  enabled: Schema.optional(Schema.Boolean),
  keepNewestUnits: Schema.optional(Schema.Int.pipe(Schema.between(0, 1_000))),
  aggressiveRatio: Schema.optional(WindowRatio),
  aggressiveTargetRatio: Schema.optional(WindowRatio),
  emergencyRatio: Schema.optional(WindowRatio),
  minExpectedRequests: Schema.optional(Schema.Int.pipe(Schema.between(1, 1_000_000))),
  pinnedItemIds: Schema.optional(Schema.Array(ItemId).pipe(Schema.maxItems(1_000)))
})
export type ToolResultOffloadControl = typeof ToolResultOffloadControl.Type
