/**
 * UsageSanity: decides whether a provider's context-usage report can be trusted before Baton stores it or budgets
 * with it. A report is untrusted when a count is not a non-negative integer (NaN, negative, fractional), when more
 * tokens are used than the model's window or than the window the report states (seen in the field: 777,000 used of a
 * 258,000 window). An untrusted report is replaced by Baton's own estimate and the anomaly is recorded.
 */
import type { ContextUsage } from "@baton/contracts"

export interface Checked {
  /** The report when trusted, else `null` (use the estimate). */
  readonly usage: ContextUsage | null
  /** Why the report was not trusted, `null` when it was (or when there was no report). */
  readonly anomaly: string | null
}

const count = (x: unknown) => typeof x === "number" && Number.isInteger(x) && x >= 0

/** Checks `usage` against the model window (`null` when unknown). `null` usage is simply absent, not an anomaly. */
export const check = (usage: ContextUsage | null | undefined, contextWindow: number | null): Checked => {
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
  return {
    usage: {
      usedTokens: usage.usedTokens,
      ...(usage.maxTokens === undefined ? {} : { maxTokens: usage.maxTokens }),
      ...(usage.autoCompactThreshold === undefined ? {} : { autoCompactThreshold: usage.autoCompactThreshold })
    },
    anomaly: null
  }
}
