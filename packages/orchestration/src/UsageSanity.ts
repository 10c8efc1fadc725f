/**
 * UsageSanity: decides whether a provider's context-usage report can be trusted before Baton stores it or budgets
 * with it. A report is untrusted when a count is not a token count Baton can store (NaN, negative, fractional, or
 * beyond the safe-integer range, e.g. 1e20), when more tokens are used than the window the budget would use (the
 * model's window; when that is unknown, the window the report states, else the budget policy's default window), or
 * than the window the report states (seen in the field: 777,000 used of a 258,000 window). An untrusted report is
 * replaced by Baton's own estimate and the anomaly is recorded.
 *
 * Every caller (turn completion, injection acknowledgement, read-back reconciliation, `/compact`) passes the same
 * two windows: the provider thread's `contextWindow` and `OrchestratorConfig.budget.defaultWindow`.
 */
import type { ContextUsage } from "@baton/contracts"

export interface Checked {
  /** The report when trusted, else `null` (use the estimate). */
  readonly usage: ContextUsage | null
  /** Why the report was not trusted, `null` when it was (or when there was no report). */
  readonly anomaly: string | null
}

/**
 * A token count Baton can store: a non-negative safe integer (`Schema.Int` in the stored record refuses anything
 * else, so an unsafe count trusted here would make the whole turn unrecordable).
 */
const count = (x: unknown) => typeof x === "number" && Number.isSafeInteger(x) && x >= 0

/**
 * Checks `usage` against the window Budget would use for it: `contextWindow` (the model's, `null` when unknown),
 * else the report's own `maxTokens`, else `defaultWindow` (`Budget.BudgetPolicy.defaultWindow`, tokens); and always
 * against the report's own `maxTokens`. `null` usage is simply absent, not an anomaly. Pure, never fails.
 */
export const check = (
  usage: ContextUsage | null | undefined,
  contextWindow: number | null,
  defaultWindow: number
): Checked => {
  if (usage === null || usage === undefined) return { usage: null, anomaly: null }
  const bad = (anomaly: string): Checked => ({ usage: null, anomaly })
  if (!count(usage.usedTokens)) return bad(`usedTokens ${String(usage.usedTokens)} is not a token count`)
  if (usage.maxTokens !== undefined && (!count(usage.maxTokens) || usage.maxTokens === 0)) {
    return bad(`maxTokens ${String(usage.maxTokens)} is not a window size`)
  }
  if (usage.autoCompactThreshold !== undefined && (!count(usage.autoCompactThreshold) || usage.autoCompactThreshold === 0)) {
    return bad(`autoCompactThreshold ${String(usage.autoCompactThreshold)} is not a token count`)
  }
  if (contextWindow !== null && usage.usedTokens > contextWindow) {
    return bad(`${usage.usedTokens} used exceeds the model window ${contextWindow}`)
  }
  if (usage.maxTokens !== undefined && usage.usedTokens > usage.maxTokens) {
    return bad(`${usage.usedTokens} used exceeds the reported maximum ${usage.maxTokens}`)
  }
  // With neither the model's nor the report's window known, the budget assumes the default window: a report above
  // it would be trusted by nothing and would only zero the budget on a figure that cannot be checked.
  if (contextWindow === null && usage.maxTokens === undefined && usage.usedTokens > defaultWindow) {
    return bad(`${usage.usedTokens} used exceeds the default window ${defaultWindow} (the model window is unknown)`)
  }
  return {
    usage: {
      usedTokens: usage.usedTokens,
      ...(usage.maxTokens === undefined ? {} : { maxTokens: usage.maxTokens }),
      ...(usage.autoCompactThreshold === undefined ? {} : { autoCompactThreshold: usage.autoCompactThreshold })
    },
    anomaly: null
  }
}
