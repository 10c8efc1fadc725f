/**
 * ProviderAdapter: the port every model provider implements (docs/design.md "Provider adapters"). One adapter value per
 * configured provider instance (`codex`, `claude`, …). Adapters never take endpoints or credentials from a request:
 * those come from the instance's configuration.
 *
 * The port owns the provider-side conversation (the native thread, addressed by `nativeRef`); it does not own
 * Baton's durable record, budgets or handoffs.
 */
import type { ToolResultOffload } from "@baton/context"
import type { ContextUsage, ProviderError, ProviderInstance, UnknownProvider } from "@baton/contracts"
import { Context, Data, type Effect, type Stream } from "effect"

/** One item the provider produced during a turn, in Baton's item vocabulary. */
export interface ProducedItem {
  readonly kind: "assistant_message" | "tool_call" | "tool_result" | "reasoning" | "error" | "summary"
  readonly text: string
  readonly toolCallId: string | null
  readonly toolName: string | null
  readonly messageId: string | null
  readonly isError: boolean
  readonly toolCallState: "answered" | "dangling" | "interrupted" | null
}

/** A `ProducedItem` of `kind` with `text`, every other field empty (null, not an error) unless given in `extra`. */
export const producedItem = (kind: ProducedItem["kind"], text: string, extra: Partial<ProducedItem> = {}): ProducedItem => ({
  kind,
  text,
  toolCallId: null,
  toolName: null,
  messageId: null,
  isError: false,
  toolCallState: null,
  ...extra
})

/**
 * A tool the model may call: its name, what it does, and its input as a JSON Schema object (sent to the provider
 * verbatim, so the same definition always renders to the same bytes and keeps the prompt cache).
 */
export interface ToolDefinition {
  readonly name: string
  readonly description: string
  readonly inputSchema: { readonly [key: string]: unknown }
}

/** The result of one tool call, sent to the model on the next request (`output` as text). */
export interface ToolResultInput {
  readonly toolCallId: string
  readonly output: string
  readonly isError: boolean
}

/**
 * What a `LocalTool` answers: its `output` text, and `isError` when the call failed (bad arguments, an unknown ref,
 * nothing found). Each wire marks a failed result its own way: Anthropic's `tool_result` carries `is_error: true`,
 * OpenAI's outputs start with `Error: ` (`markedOutput`), Codex answers `success: false`; the recorded
 * `tool_result` item has `isError`.
 */
export interface LocalToolAnswer {
  readonly output: string
  readonly isError: boolean
}

/**
 * A tool Baton executes itself (`thread_read`): offered to the model with the client's tools, never shown to the
 * client as an open call. When the model calls it, the adapter runs `execute` with the call's arguments (the JSON
 * text the model wrote) and sends the answer (`LocalToolAnswer`, failed or not) on its next request within the same
 * turn. `execute` never fails: a bad call is answered as an error result the model can act on.
 */
export interface LocalTool {
  readonly definition: ToolDefinition
  readonly execute: (call: { readonly arguments: string; readonly runId: string }) => Effect.Effect<LocalToolAnswer>
}

/**
 * Looks up the results Baton's record holds for tool calls, by call id (the record's `tool_result` items, in thread
 * order): a model-API adapter closes the calls an earlier turn left open in its message list (an interrupt, a wait
 * past its deadline, a failed turn) with exactly these texts, so the record and what the next request carries are
 * one text written in one place (the orchestrator's). A call the record has no result for (a crash before it was
 * recorded) is closed with the adapter's own `unansweredResult`. Never fails: a lookup that cannot be made answers
 * nothing, and the adapter's text is used.
 */
export type RecordedResults = (toolCallIds: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<ToolResultInput>>

/**
 * The input of a turn. `prompt` is the user's message, byte-identical to what the user sent; `inlineHistory`, when
 * present, is rendered historical context that the adapter places *before* the prompt as a separate block.
 * `tools` are the client's tools (the model's calls to them end the turn with `pendingToolCalls`); `localTools` are
 * Baton's own (executed by the adapter). Adapters without tool support ignore both.
 */
export interface StartTurnInput {
  readonly nativeRef: string
  readonly runId: string
  readonly prompt: string
  readonly inlineHistory: string | null
  readonly tools?: ReadonlyArray<ToolDefinition> | undefined
  readonly localTools?: ReadonlyArray<LocalTool> | undefined
  /** Receives the model's text as it streams, before the item it belongs to is complete (see `TextDelta`). */
  readonly onDelta?: ((delta: TextDelta) => void) | undefined
  /** The thread's tool-result offload control for this turn (`OffloadControl`); absent: the instance's settings. */
  readonly offloadControl?: OffloadControl | undefined
  /** The record's results for calls an earlier turn left open (`RecordedResults`); absent: the adapter's own text. */
  readonly recordedResults?: RecordedResults | undefined
}

/**
 * A thread's tool-result offload control as an adapter applies it (issue 11 item 4; the thread's
 * `ToolResultOffloadControl` with its pinned items resolved to tool calls):
 *
 * - `enabled`: on or off for this thread (absent: the instance's setting);
 * - `settings`: overrides of the instance's policy settings (a merge that breaks the policy's rules is ignored with
 *   a logged warning: the instance's settings apply);
 * - `pinnedToolCallIds`: tool calls whose units are never stubbed.
 *
 * Adapters without a message list of their own ignore it.
 */
export interface OffloadControl {
  readonly enabled?: boolean | undefined
  readonly settings?: ToolResultOffload.SettingsOverrides | undefined
  readonly pinnedToolCallIds?: ReadonlyArray<string> | undefined
}

/**
 * A piece of streamed text (`text` of an assistant message, or `reasoning`), for live display. Called synchronously
 * on the stream's fiber as each piece is read, so it must not block (offer to a queue or a PubSub). The complete item
 * still arrives as `item_produced`; deltas are never recorded.
 */
export interface TextDelta {
  readonly kind: "text" | "reasoning"
  readonly text: string
}

/**
 * The continuation of a turn that ended with `pendingToolCalls`: the client's results (one per open call; a call
 * without a result is answered with an error result by the adapter, so the history stays well-formed), then the
 * model's next response.
 */
export interface ContinueTurnInput {
  readonly nativeRef: string
  readonly runId: string
  readonly toolResults: ReadonlyArray<ToolResultInput>
  readonly tools?: ReadonlyArray<ToolDefinition> | undefined
  readonly localTools?: ReadonlyArray<LocalTool> | undefined
  readonly onDelta?: ((delta: TextDelta) => void) | undefined
  /** As `StartTurnInput.offloadControl`. */
  readonly offloadControl?: OffloadControl | undefined
}

/**
 * The tokens one turn cost, as the provider billed them (summed over the turn's model requests): `inputTokens` read
 * uncached, `cacheWriteTokens` written to the prompt cache, `cacheReadTokens` read from it, `outputTokens` produced
 * (reasoning included). A later cost step prices them with the instance's per-million prices.
 */
export interface TurnTokens {
  readonly inputTokens: number
  readonly cacheWriteTokens: number
  readonly cacheReadTokens: number
  readonly outputTokens: number
}

/**
 * One event of a provider turn, in the order the provider produced them (see `ProviderAdapterShape.startTurn`):
 *
 * - `item_produced`: the provider produced `item` (an assistant message, a tool call, its result, ...). Baton records
 *   it as it arrives.
 * - `usage_reported`: the provider reported the native thread's context usage (tokens); the last report of a turn
 *   counts. A turn that reports none leaves Baton on its own estimate.
 * - `context_offloaded`: the adapter stubbed answered tool results in the native thread before a request (see below).
 * - `native_compacted`: the provider compacted the native thread by itself (see below).
 * - `retry_scheduled`: a request is sent again after a delay (rate limit, overload); nothing was streamed for it.
 * - `turn_ended`: the turn is over and nothing follows. `interrupted: true` when it stopped at an `interrupt`: the
 *   items before it are what the provider produced (a tool call may have no result), and the adapter has closed any
 *   open tool call in the native thread the way its provider does (Claude Code and Codex answer it with an
 *   "interrupted" tool result), so the native thread's next request is well-formed. Baton closes such calls in its
 *   own record (see ThreadService). A stream that ends without `turn_ended` ended normally.
 */
export type TurnEvent = Data.TaggedEnum<{
  item_produced: { readonly item: ProducedItem }
  /** `tokens`, when present: what the turn so far was billed (model APIs report it; the scripted provider does not). */
  usage_reported: { readonly usage: ContextUsage; readonly tokens?: TurnTokens | undefined }
  /**
   * `pendingToolCalls`, when present and non-empty: the model called the client's tools with these call ids and
   * waits for their results (`continueTurn`).
   */
  turn_ended: { readonly interrupted: boolean; readonly pendingToolCalls?: ReadonlyArray<string> | undefined }
  /**
   * The adapter flushed tool-result offload on the native thread before its next request (model APIs with offload
   * on): `flush` says what (the orchestrator records it as a `context.offloaded` event). Nothing for Baton's record
   * of items changes: the stubs live in the native message list only.
   */
  context_offloaded: { readonly flush: OffloadReport }
  /**
   * The provider compacted the native thread on its own during the turn (Codex's `contextCompaction` item; the
   * scripted provider's auto-compaction): what an earlier rejection proved it holds (`NativeThread.heldAtLeast`) no
   * longer holds, and the turn's usage report after it may fall without being stale.
   */
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- a variant without fields (Data.TaggedEnum's form)
  native_compacted: {}
  /**
   * The provider refused a request before its answer started (HTTP 429, 529, 500-504, or no answer) and the adapter
   * sends it again after `delayMillis` milliseconds (the provider's `retry-after`, else its backoff): emitted before the
   * wait, so the orchestrator can tell clients (`run.retry_scheduled`). `attempt`: 1 for the first retry; `reason`:
   * the provider's error text; `httpStatus`: `null` when there was no answer.
   */
  retry_scheduled: {
    readonly providerInstance: ProviderInstance
    readonly attempt: number
    readonly delayMillis: number
    readonly reason: string
    readonly httpStatus: number | null
  }
}>

/**
 * One tool-result offload flush on a native thread of `providerInstance`: `units` tool units stubbed, the `refs` their stubs name
 * (`tool:<call id>`), the message-log `entrySeqs` replaced, the policy's `tier`, and the history the request carries
 * before and after, in Baton tokens.
 */
export interface OffloadReport {
  readonly providerInstance: ProviderInstance
  readonly nativeRef: string
  readonly units: number
  readonly refs: ReadonlyArray<string>
  readonly entrySeqs: ReadonlyArray<number>
  readonly tier: string
  readonly tokensBefore: number
  readonly tokensAfter: number
}

/** Constructors and matchers of `TurnEvent` (`TurnEvent.item_produced({ item })`, `TurnEvent.$is("turn_ended")`). */
export const TurnEvent = Data.taggedEnum<TurnEvent>()

export interface InjectHistoryInput {
  readonly nativeRef: string
  /** Rendered history (see `@baton/context` Render.renderHistory). */
  readonly rendered: string
  /** The Baton item ids carried, so a later `readThread` can tell what arrived. */
  readonly itemIds: ReadonlyArray<string>
  /** The deliveries this injection settles: adapters that support `readThread` report them back. */
  readonly deliveryIds: ReadonlyArray<string>
  /** The record's results for calls left open before the injection (`RecordedResults`), closed first. */
  readonly recordedResults?: RecordedResults | undefined
}

export interface CompactResult {
  readonly usageBefore: ContextUsage | null
  readonly usageAfter: ContextUsage | null
}

export interface ReadThreadResult {
  /** Delivery ids whose injection the native thread holds. */
  readonly deliveryIds: ReadonlyArray<string>
  /** Baton run ids whose turn (prompt, and any inline history before it) the native thread holds. */
  readonly runIds: ReadonlyArray<string>
  readonly usage: ContextUsage | null
  /**
   * The run whose last request the native thread holds without the model's answer after it (model APIs: the process
   * stopped while the answer streamed), as a one-element list; empty when the last request was answered. Absent where
   * the adapter cannot tell. Restart recovery hands what the record holds of that answer to the lane.
   */
  readonly unansweredRunIds?: ReadonlyArray<string>
}

export interface ProviderAdapterShape {
  readonly instance: ProviderInstance
  readonly model: string
  /**
   * The instance's configured prices in US dollars per million tokens (uncached input, cache write, cache read,
   * output), which price the `tokens` its turns report; absent when it has none (the scripted provider).
   */
  readonly prices?: { readonly input: number; readonly cacheWrite: number; readonly cacheRead: number; readonly output: number } | undefined
  /** The model's context window in tokens, `null` when unknown. */
  readonly modelContextWindow: number | null
  /**
   * The most tokens one answer may take (the `max_tokens` / `max_output_tokens` every request sends), when the
   * adapter sets one (model APIs). `/compact` without native compaction keeps this much of the window free when it
   * injects deferred history, so the next answer still fits.
   */
  readonly maxOutputTokens?: number | undefined
  /** Starts a fresh native thread and returns its provider reference. */
  readonly startThread: () => Effect.Effect<{ readonly nativeRef: string }, ProviderError>
  /** Re-attaches to an existing native thread (after a restart). Never replays history into Baton's record. */
  readonly resumeThread: (nativeRef: string) => Effect.Effect<void, ProviderError>
  /**
   * `true` for a session runtime whose resumed session may re-emit the thread's history at the next turn (seen in
   * the field; Codex, the scripted provider): that turn's leading items that the record already holds for the
   * native thread are skipped as a replay (`items.replay_skipped`). Absent (or `false`) for a stateless model API,
   * whose resume re-reads nothing: every item of its next turn is new, even one whose text and id equal an earlier
   * one's (a server that reuses response ids; its genuine answer was skipped as a replay and lost, tester r36).
   */
  readonly resumeMayReplay?: boolean
  /**
   * Runs one turn as a stream of `TurnEvent`s: the items as the provider produces them, usage reports, and
   * `turn_ended` last. The turn starts when the stream is run (not when `startTurn` is called); closing the stream
   * early abandons it. Fails with `ProviderError` in the stream's error channel, before the first item (the code
   * tells whether the provider read the prompt: `refused`, `interrupted`, `overflow`, `unavailable` before it read
   * it, `timeout` unknown) or after some items (a mid-stream failure: the provider did read the prompt, and the
   * items before the failure stand).
   */
  readonly startTurn: (input: StartTurnInput) => Stream.Stream<TurnEvent, ProviderError>
  /**
   * Asks the provider to stop the turn in progress on `nativeRef`. A provider may never answer: callers bound it
   * with a timeout (OrchestratorConfig `interruptTimeoutMillis`).
   */
  readonly interrupt: (nativeRef: string) => Effect.Effect<void, ProviderError>
  /**
   * Optional capabilities: present exactly when the provider can do it (the method is the one source of truth;
   * there is no separate flag). `injectHistory` places history into the native thread without starting a turn and
   * returns the usage after the injection when reported.
   */
  readonly injectHistory?: (input: InjectHistoryInput) => Effect.Effect<{ readonly usage: ContextUsage | null }, ProviderError>
  /**
   * Optional capability (model APIs): continues a turn that ended with `pendingToolCalls` once the client posted the
   * results. Same events and failures as `startTurn`.
   */
  readonly continueTurn?: (input: ContinueTurnInput) => Stream.Stream<TurnEvent, ProviderError>
  /** Optional capability: compacts the native thread on request. */
  readonly compactThread?: (nativeRef: string) => Effect.Effect<CompactResult, ProviderError>
  /**
   * Optional capability (agent runtimes that copy a thread natively: Codex `thread/fork`): starts a new native thread
   * holding the whole history `nativeRef` holds now (every turn and injection, and its compactions, as the provider
   * keeps them), and returns its reference with the context usage the provider reported for it (`null`: none yet).
   * `nativeRef` is left unchanged. Callers fork only a native thread with no turn in progress. Fails with
   * `ProviderError`: `thread_not_found` when the provider no longer has `nativeRef`, `unavailable` / `timeout` when it
   * could not be asked (retryable), `protocol` on an unreadable answer. A fork the provider made but whose answer was
   * lost leaves an unused native thread behind: nothing is owed to it.
   */
  readonly forkThread?: (nativeRef: string) => Effect.Effect<{ readonly nativeRef: string; readonly usage: ContextUsage | null }, ProviderError>
  /** Optional capability: reads the native thread back (for reconciling uncertain deliveries and interrupts). */
  readonly readThread?: (nativeRef: string) => Effect.Effect<ReadThreadResult, ProviderError>
  /**
   * Optional capability (APIs with a token-count endpoint: Anthropic's `count_tokens`): the provider's count, in its
   * own tokens, of a request whose only message is `text` from the user (the lane's system prompt and `tools`
   * included, so callers difference two counts to measure a text). Runs no model. Used to calibrate a new instance
   * before its first turn (`ProviderCalibration.seedFromCount`).
   */
  readonly countTokens?: (text: string) => Effect.Effect<number, ProviderError>
  /**
   * Optional capability (adapters keeping a message list with tool-result offload, issue 11 items 4 and 5):
   * `preview` is the dry run of the offload policy on a native thread under a thread's control (stores nothing);
   * `undo` restores the originals of its newest flush (the restored units stay verbatim from then on); `effective`
   * is what a thread's control comes to on this instance (on or off, the merged settings, or the problems that make
   * the merge unusable). Callers hold the thread (no run in flight).
   */
  readonly toolResultOffload?: {
    readonly preview: (nativeRef: string, control?: OffloadControl) => Effect.Effect<ToolResultOffloadPreview, ProviderError>
    readonly undo: (nativeRef: string) => Effect.Effect<ToolResultOffloadUndo, ProviderError>
    readonly effective: (control?: OffloadControl) => {
      readonly enabled: boolean
      readonly settings: ToolResultOffload.Settings
      readonly problems: ReadonlyArray<string>
    }
  }
}

/**
 * A dry run of tool-result offload on one native thread (`ProviderAdapterShape.toolResultOffload.preview`): what the
 * policy (`ToolResultOffload.decide`) would stub before the next request. `units`: per unit, the `thread_read` refs
 * and tool names of its calls; `entrySeqs`: the message-list entries whose bodies would become stubs. Tokens are the
 * whole request's (system prompt and tools included) in the instance's counter; `rewriteCostTokens` is the extra
 * cost of rewriting the cached suffix in base-input-token equivalents (`(w - r)(A - s)`, docs/offload.md) and
 * `rewriteCostUsd` the same at the instance's input price; `breakEvenRequests` the later requests after which the
 * flush has paid for itself (`null`: never). `reason` says why nothing would be stubbed; `stubbedEntries` counts
 * the entries already stubs.
 */
export interface ToolResultOffloadPreview {
  readonly nativeRef: string
  readonly enabled: boolean
  readonly tier: "none" | "mild" | "requested" | "aggressive" | "emergency"
  readonly reason: string
  readonly units: ReadonlyArray<{ readonly refs: ReadonlyArray<string>; readonly toolNames: ReadonlyArray<string> }>
  readonly entrySeqs: ReadonlyArray<number>
  readonly tokensBefore: number
  readonly tokensAfter: number
  readonly rewriteCostTokens: number
  readonly rewriteCostUsd: number
  readonly expectedSavingsTokens: number
  readonly breakEvenRequests: number | null
  readonly stubbedEntries: number
}

/**
 * The outcome of undoing the newest flush of one native thread: `flushSeq` the undone `offload` entry, `entrySeqs`
 * the entries whose original bodies requests carry again (`undone: false` and a `reason` when there was none).
 */
export interface ToolResultOffloadUndo {
  readonly nativeRef: string
  readonly undone: boolean
  readonly flushSeq: number | null
  readonly entrySeqs: ReadonlyArray<number>
  readonly reason: string
}

/** The configured provider instances, by name. */
export interface ProviderRegistryShape {
  readonly get: (instance: string) => Effect.Effect<ProviderAdapterShape, UnknownProvider>
  readonly instances: ReadonlyArray<ProviderInstance>
}

export class ProviderRegistry extends Context.Tag("@baton/providers/ProviderRegistry")<
  ProviderRegistry,
  ProviderRegistryShape
>() {}
