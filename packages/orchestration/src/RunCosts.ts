/**
 * RunCosts: what a run cost (issue "Real model providers", item 5). A turn's billed tokens (`TurnTokens`, reported by
 * model-API adapters with their usage) priced by the instance's configured prices (US dollars per million tokens:
 * uncached input, cache write, cache read, output; the providers' published list prices, see docs/providers.md).
 * Pure: the record is written by TurnExecution with the run's outcome, read back by `ThreadStore.listRunCosts`.
 */
import type { RunCost, Run } from "@baton/contracts"
import type { ProviderAdapter } from "@baton/providers"
import type { DateTime } from "effect"

/**
 * Dollars are kept as whole nano-dollars (1e-9 US dollars) while they are added up, and shown as the nearest double
 * to that decimal: binary fractions of prices like 0.1 or 0.3 would otherwise print as 0.30000000000000004. A nano-
 * dollar is far below any provider's billing unit (a token at $0.01 per million is 10 nano-dollars).
 */
const nanosPerDollar = 1_000_000_000

/** `usd` as whole nano-dollars. */
const toNanos = (usd: number): number => Math.round(usd * nanosPerDollar)

/**
 * `tokens` priced by `prices` in US dollars (`null` without prices): sum of tokens x price / 1,000,000, rounded to
 * the nano-dollar (1e-9).
 */
export const price = (
  tokens: ProviderAdapter.TurnTokens,
  prices: ProviderAdapter.ProviderAdapterShape["prices"]
): number | null =>
  prices === undefined
    ? null
    // Tokens x dollars per million tokens = micro-dollars; x 1,000 = nano-dollars.
    : Math.round((tokens.inputTokens * prices.input + tokens.cacheWriteTokens * prices.cacheWrite +
      tokens.cacheReadTokens * prices.cacheRead + tokens.outputTokens * prices.output) * 1_000) / nanosPerDollar

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

/**
 * The sums of a set of run costs: `runs` counted, the four token kinds summed, `priced` the runs with a dollar cost
 * and `pricedNanos` their dollars in whole nano-dollars. `ThreadStore.runCostSums` has the database add a thread's;
 * `sumsOf` adds a list.
 */
export interface Sums {
  readonly runs: number
  readonly inputTokens: number
  readonly cacheWriteTokens: number
  readonly cacheReadTokens: number
  readonly outputTokens: number
  readonly priced: number
  readonly pricedNanos: number
}

/** The `Sums` of `costs`, each dollar cost rounded to the nano-dollar before it is added. */
export const sumsOf = (costs: ReadonlyArray<RunCost>): Sums => {
  const priced = costs.filter((c) => c.costUsd !== null)
  return {
    runs: costs.length,
    inputTokens: costs.reduce((n, c) => n + c.inputTokens, 0),
    cacheWriteTokens: costs.reduce((n, c) => n + c.cacheWriteTokens, 0),
    cacheReadTokens: costs.reduce((n, c) => n + c.cacheReadTokens, 0),
    outputTokens: costs.reduce((n, c) => n + c.outputTokens, 0),
    priced: priced.length,
    pricedNanos: priced.reduce((n, c) => n + toNanos(c.costUsd!), 0)
  }
}

/**
 * Totals from `sums`: tokens, and dollars over the runs that have a price (`null` when none has), added in whole
 * nano-dollars (so the total of $0.1 and $0.2 is $0.3, not 0.30000000000000004).
 */
export const totalOfSums = (sums: Sums) => ({
  runs: sums.runs,
  inputTokens: sums.inputTokens,
  cacheWriteTokens: sums.cacheWriteTokens,
  cacheReadTokens: sums.cacheReadTokens,
  outputTokens: sums.outputTokens,
  costUsd: sums.priced === 0 ? null : sums.pricedNanos / nanosPerDollar
})

/** Totals of `costs` (`totalOfSums` of their `sumsOf`). */
export const total = (costs: ReadonlyArray<RunCost>) => totalOfSums(sumsOf(costs))

/** A priced charge: tokens and dollars (`null` without prices), e.g. one `/offload` operation's summariser calls. */
export interface Charge {
  readonly inputTokens: number
  readonly cacheWriteTokens: number
  readonly cacheReadTokens: number
  readonly outputTokens: number
  readonly costUsd: number | null
}

/** The sum of `charges` in whole nano-dollars (`null` when none has a price), as `total` adds runs. */
const dollars = (charges: ReadonlyArray<Charge>): number | null => {
  const priced = charges.filter((c) => c.costUsd !== null)
  return priced.length === 0 ? null : priced.reduce((n, c) => n + toNanos(c.costUsd!), 0) / nanosPerDollar
}

/**
 * Totals of a thread's `/offload` summariser charges: `operations` counted, tokens and dollars summed, and the
 * dollars of the `abandoned` ones (discarded, failed or cancelled summaries).
 */
export const summariserTotal = (charges: ReadonlyArray<Charge & { readonly costState: string }>) => ({
  operations: charges.length,
  inputTokens: charges.reduce((n, c) => n + c.inputTokens, 0),
  cacheWriteTokens: charges.reduce((n, c) => n + c.cacheWriteTokens, 0),
  cacheReadTokens: charges.reduce((n, c) => n + c.cacheReadTokens, 0),
  outputTokens: charges.reduce((n, c) => n + c.outputTokens, 0),
  costUsd: dollars(charges),
  abandonedUsd: dollars(charges.filter((c) => c.costState === "abandoned"))
})

/**
 * The runs' `sums` (as `totalOfSums`) with the summariser's charges added: what the thread cost in all (dollars
 * `null` when neither a run nor a charge has a price).
 */
export const withSummaries = (sums: Sums, charges: ReadonlyArray<Charge>) => {
  const priced = charges.filter((c) => c.costUsd !== null)
  return {
    ...totalOfSums(sums),
    inputTokens: sums.inputTokens + charges.reduce((n, c) => n + c.inputTokens, 0),
    cacheWriteTokens: sums.cacheWriteTokens + charges.reduce((n, c) => n + c.cacheWriteTokens, 0),
    cacheReadTokens: sums.cacheReadTokens + charges.reduce((n, c) => n + c.cacheReadTokens, 0),
    outputTokens: sums.outputTokens + charges.reduce((n, c) => n + c.outputTokens, 0),
    costUsd: sums.priced + priced.length === 0
      ? null
      : (sums.pricedNanos + priced.reduce((n, c) => n + toNanos(c.costUsd!), 0)) / nanosPerDollar
  }
}
