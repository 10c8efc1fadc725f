/**
 * RunCosts: what a run cost (issue "Real model providers", item 5). A turn's billed tokens (`TurnTokens`, reported by
 * model-API adapters with their usage) priced by the instance's configured prices (US dollars per million tokens:
 * uncached input, cache write, cache read, output; the providers' published list prices, see docs/providers.md).
 * Pure: the record is written by TurnExecution with the run's outcome, read back by `ThreadStore.listRunCosts`.
 */
import type { RunCost, Run } from "@baton/contracts"
import type { ProviderAdapter } from "@baton/providers"
import type { DateTime } from "effect"

/** `tokens` priced by `prices` in US dollars (`null` without prices): sum of tokens x price / 1,000,000. */
export const price = (
  tokens: ProviderAdapter.TurnTokens,
  prices: ProviderAdapter.ProviderAdapterShape["prices"]
): number | null =>
  prices === undefined
    ? null
    : (tokens.inputTokens * prices.input + tokens.cacheWriteTokens * prices.cacheWrite +
      tokens.cacheReadTokens * prices.cacheRead + tokens.outputTokens * prices.output) / 1_000_000

/** The cost record of `run`'s turn on `adapter` that was billed `tokens`. */
export const of = (
  run: Run,
  adapter: ProviderAdapter.ProviderAdapterShape,
  tokens: ProviderAdapter.TurnTokens,
  at: DateTime.Utc
): RunCost => ({
  runId: run.id,
  threadId: run.threadId,
  providerInstance: adapter.instance,
  inputTokens: tokens.inputTokens,
  cacheWriteTokens: tokens.cacheWriteTokens,
  cacheReadTokens: tokens.cacheReadTokens,
  outputTokens: tokens.outputTokens,
  costUsd: price(tokens, adapter.prices),
  createdAt: at
})

/** Totals of `costs`: tokens summed, and dollars summed over the runs that have a price (`null` when none has). */
export const total = (costs: ReadonlyArray<RunCost>) => {
  const priced = costs.filter((c) => c.costUsd !== null)
  return {
    runs: costs.length,
    inputTokens: costs.reduce((n, c) => n + c.inputTokens, 0),
    cacheWriteTokens: costs.reduce((n, c) => n + c.cacheWriteTokens, 0),
    cacheReadTokens: costs.reduce((n, c) => n + c.cacheReadTokens, 0),
    outputTokens: costs.reduce((n, c) => n + c.outputTokens, 0),
    costUsd: priced.length === 0 ? null : priced.reduce((n, c) => n + c.costUsd!, 0)
  }
}
