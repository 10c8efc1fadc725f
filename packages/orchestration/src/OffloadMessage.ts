/**
 * OffloadMessage: the one line `/offload` shows the user (issue 12 item 8), from its report. Pure.
 *
 * - offloaded: "Offloaded 6 older messages, freeing up context window space. Conversation: ~1.0K -> ~250 tokens (75%
 *   decrease), 4 messages kept."
 * - nothing / stale / cancelled / failed: what happened, and that the conversation is unchanged (and, when it is worth
 *   it, to retry).
 * - preview: what an offload would do now, the tokens after estimated.
 *
 * "Messages" are the thread's items (a tool call and its result are two).
 */
import type { OffloadReport } from "@baton/contracts"

/** `n` tokens rounded for reading: `~250`, `~1.0K`, `~12.5K`, `~1.2M`. */
export const approx = (n: number): string =>
  n < 1_000 ? `~${n}` : n < 1_000_000 ? `~${(n / 1_000).toFixed(1)}K` : `~${(n / 1_000_000).toFixed(1)}M`

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`

/** `before -> after tokens (p% decrease)`. */
const change = (before: number, after: number) => {
  const pct = before === 0 ? 0 : Math.round(((before - after) / before) * 100)
  return `${approx(before)} -> ${approx(after)} tokens (${pct >= 0 ? `${pct}% decrease` : `${-pct}% increase`})`
}

/** A sentence on what the summariser's calls cost when they bought nothing. */
const spent = (r: OffloadReport) =>
  r.cost === null
    ? ""
    : ` The summariser's ${plural(r.cost.calls, "call")} (${r.cost.inputTokens + r.cost.cacheWriteTokens + r.cost.cacheReadTokens} input, ` +
      `${r.cost.outputTokens} output tokens${r.cost.costUsd === null ? "" : `, $${r.cost.costUsd}`}) ${r.cost.calls === 1 ? "was" : "were"} recorded as spent.`

/** The message of an operation's outcome. */
export const of = (r: OffloadReport): string => {
  switch (r.outcome) {
    case "offloaded":
      return `Offloaded ${plural(r.coveredItems, "older message")}, freeing up context window space. Conversation: ` +
        `${change(r.tokensBefore, r.tokensAfter)}, ${plural(r.keptItems, "message")} kept.`
    case "nothing":
      return `Nothing was offloaded: ${stripPrefix(r.reason)}. The conversation is unchanged.`
    case "stale":
      return "The conversation changed while the summary was being written (a new message or another offload got in " +
        `first), so the summary was discarded. The conversation is unchanged; run /offload again.${spent(r)}`
    case "cancelled":
      return `The offload was cancelled before it was applied. The conversation is unchanged.${spent(r)}`
    case "failed":
      return `The offload failed: ${r.reason ?? "unknown reason"}. The conversation is unchanged` +
        `${r.retryable ? "; retry /offload later" : ""}.${spent(r)}`
    case "denied":
      return `The PreCompact hook denied the offload: ${r.reason ?? "no reason given"}. The conversation is unchanged.`
    case "running":
      return "The offload is still running; the conversation is unchanged until it commits."
    case "preview":
      return preview(r)
  }
}

/**
 * The message of an offload that committed but whose result could not be read back or built (`ThreadOffload`):
 * the user is told it was applied, under which operation id, so that nobody runs `/offload` again for it.
 */
export const undisplayable = (operationId: string): string =>
  `The conversation was offloaded, but the result could not be displayed (operation ${operationId}). The offload was ` +
  `applied: do not run /offload again for it; GET the operation ${operationId} to read it.`

/** The message of a dry run. */
export const preview = (r: OffloadReport): string =>
  r.coveredItems === 0
    ? `Nothing would be offloaded: ${stripPrefix(r.reason)}.`
    : `Would offload ${plural(r.coveredItems, "older message")} (items ${r.coveredItemIds.length === 0 ? "-" : `up to #${r.cutSeq ?? "-"}`}). ` +
      `Conversation: ${change(r.tokensBefore, r.tokensAfter)} estimated, ${plural(r.keptItems, "message")} kept; ` +
      `the provider's prompt cache is rewritten once (${r.cacheRewriteTokens} input-token equivalents` +
      `${r.cacheRewriteUsd === null ? "" : `, $${r.cacheRewriteUsd}`}). Nothing was changed.`

/** A reason without its leading "nothing to offload: " (the message says it). */
const stripPrefix = (reason: string | null) => (reason ?? "nothing to do").replace(/^nothing (to offload|worth offloading): /, "")
