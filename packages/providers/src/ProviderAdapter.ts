/**
 * ProviderAdapter: the port every model provider implements (DESIGN.md "Provider adapters"). One adapter value per
 * configured provider instance (`codex`, `claude`, …). Adapters never take endpoints or credentials from a request:
 * those come from the instance's configuration.
 *
 * The port owns the provider-side conversation (the native thread, addressed by `nativeRef`); it does not own
 * Baton's durable record, budgets or handoffs.
 */
import type { ContextUsage, ProviderError, ProviderInstance, UnknownProvider } from "@baton/contracts"
import { Context, type Effect } from "effect"

/** What an adapter can do beyond starting turns. */
export interface ProviderCapabilities {
  /** `injectHistory` places history into the native thread without starting a turn. */
  readonly injectHistory: boolean
  /** `compactThread` compacts the native thread on request. */
  readonly compactThread: boolean
  /** `readThread` reads the native thread back (for reconciling uncertain deliveries). */
  readonly readThread: boolean
}

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

/**
 * The input of a turn. `prompt` is the user's message, byte-identical to what the user sent; `inlineHistory`, when
 * present, is rendered historical context that the adapter places *before* the prompt as a separate block.
 */
export interface StartTurnInput {
  readonly nativeRef: string
  readonly runId: string
  readonly prompt: string
  readonly inlineHistory: string | null
}

/**
 * The outcome of a turn: the produced items in order and the usage the provider reported (if any).
 *
 * `interrupted: true` when the turn stopped at an `interrupt`: `items` is what the provider produced before it (a
 * tool call may have no result), and the adapter has closed any open tool call in the native thread the way its
 * provider does (Claude Code and Codex answer it with an "interrupted" tool result), so the native thread's next
 * request is well-formed. Baton closes such calls in its own record (see ThreadService).
 */
export interface TurnResult {
  readonly items: ReadonlyArray<ProducedItem>
  readonly usage: ContextUsage | null
  readonly interrupted?: boolean
}

export interface InjectHistoryInput {
  readonly nativeRef: string
  /** Rendered history (see `@baton/context` Render.renderHistory). */
  readonly rendered: string
  /** The Baton item ids carried, so a later `readThread` can tell what arrived. */
  readonly itemIds: ReadonlyArray<string>
  /** The deliveries this injection settles: adapters that support `readThread` report them back. */
  readonly deliveryIds: ReadonlyArray<string>
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
}

export interface ProviderAdapterShape {
  readonly instance: ProviderInstance
  readonly model: string
  readonly capabilities: ProviderCapabilities
  /** The model's context window in tokens, `null` when unknown. */
  readonly modelContextWindow: number | null
  /** Starts a fresh native thread and returns its provider reference. */
  readonly startThread: () => Effect.Effect<{ readonly nativeRef: string }, ProviderError>
  /** Re-attaches to an existing native thread (after a restart). Never replays history into Baton's record. */
  readonly resumeThread: (nativeRef: string) => Effect.Effect<void, ProviderError>
  /**
   * Runs one turn to completion. Fails with `ProviderError`; `code: "refused"` or `"interrupted"` with
   * `readPrompt: false` semantics are reported through `ProviderError.code` (`refused`, `interrupted`, `timeout`,
   * `overflow`, `unavailable`).
   */
  readonly startTurn: (input: StartTurnInput) => Effect.Effect<TurnResult, ProviderError>
  /**
   * Asks the provider to stop the turn in progress on `nativeRef`. A provider may never answer: callers bound it
   * with a timeout (OrchestratorConfig `interruptTimeoutMillis`).
   */
  readonly interrupt: (nativeRef: string) => Effect.Effect<void, ProviderError>
  /** Present iff `capabilities.injectHistory`. Returns the usage after the injection when reported. */
  readonly injectHistory?: (input: InjectHistoryInput) => Effect.Effect<{ readonly usage: ContextUsage | null }, ProviderError>
  /** Present iff `capabilities.compactThread`. */
  readonly compactThread?: (nativeRef: string) => Effect.Effect<CompactResult, ProviderError>
  /** Present iff `capabilities.readThread`. */
  readonly readThread?: (nativeRef: string) => Effect.Effect<ReadThreadResult, ProviderError>
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
