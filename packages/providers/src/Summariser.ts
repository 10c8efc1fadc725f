/**
 * Summariser: the port `/offload` uses to turn older history into one summary text (docs/design.md vocabulary,
 * `/offload`). Implementations: the deterministic offline `ScriptedSummariser` (embedded default, tests, replay) and,
 * later, a model-backed one. A summariser owns only the text; which items to summarise, where to cut and what the
 * summary replaces in the model-visible history is decided by `@baton/orchestration` ThreadOffload.
 */
import type { Item, ProviderError } from "@baton/contracts"
import { Context, type Effect } from "effect"
import type { TurnTokens } from "./ProviderAdapter.js"

/**
 * What to summarise: `previousSummary` is the text of the thread's latest summary (`null` on the first offload); it
 * stands for everything before `items`. `items` are every item between the previous cut and the new cut, in thread
 * order (items the previous pass kept verbatim included), so the new summary covers the whole history up to the cut.
 */
export interface SummariseInput {
  readonly threadId: string
  readonly previousSummary: string | null
  readonly items: ReadonlyArray<Item>
}

export interface SummariserShape {
  /**
   * The most input it accepts in one call, in Baton's tokens (the previous summary plus the items, as rendered:
   * `Item.tokens`); `null` when it declares no limit. `/offload` summarises larger histories in chunks that fit.
   */
  readonly inputWindow: number | null
  /**
   * Returns the summary text of `previousSummary` + `items`. Fails with `ProviderError` when the summariser cannot
   * answer; the caller then changes nothing (no placeholder).
   */
  readonly summarise: (input: SummariseInput) => Effect.Effect<SummariseResult, ProviderError>
  /** The provider instance that writes the summaries (a model-API instance), absent for an offline summariser. */
  readonly instance?: string | undefined
  /** That instance's prices in US dollars per million tokens (as `ProviderAdapterShape.prices`), for the cost. */
  readonly prices?: { readonly input: number; readonly cacheWrite: number; readonly cacheRead: number; readonly output: number } | undefined
}

/** One call's answer: the summary text and, when the provider reported it, what the call was billed. */
export interface SummariseResult {
  readonly text: string
  readonly tokens?: TurnTokens | undefined
}

export class Summariser extends Context.Tag("@baton/providers/Summariser")<Summariser, SummariserShape>() {}
