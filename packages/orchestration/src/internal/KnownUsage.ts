/**
 * KnownUsage: what Baton knows a native thread holds, for the decisions that must not send a request the provider
 * would reject (the turn-start budget, the known-full check, `/compact`'s headroom). Owns the one rule that joins the
 * last trusted usage report with `NativeThread.heldAtLeast`, the floor a rejection proved; does not own either figure.
 */
import type { ContextUsage, NativeThread } from "@baton/contracts"
import { Calibration } from "@baton/context"

/**
 * `native`'s usage (provider tokens) as the budget takes it: the last trusted report, its `usedTokens` raised to
 * `heldAtLeast` when a rejection proved the native thread holds more (the report was stale); with no report and a
 * floor, the larger of the floor and Baton's estimate scaled by `ratio` (provider tokens per Baton token). Without a
 * floor, the report as stored (`null`: the budget uses the estimate). Pure.
 */
export const of = (native: NativeThread, ratio: number): ContextUsage | null => {
  const floor = native.heldAtLeast
  if (floor === undefined) return native.usage
  if (native.usage === null) return { usedTokens: Math.max(floor, Calibration.apply(ratio, native.estimatedTokens)) }
  return native.usage.usedTokens >= floor ? native.usage : { ...native.usage, usedTokens: floor }
}

/** `native` without its rejection floor: a compaction freed what the rejection measured. */
export const withoutFloor = (native: NativeThread): NativeThread => {
  const { heldAtLeast: _floor, ...rest } = native
  return rest
}
