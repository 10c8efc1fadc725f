/**
 * KnownUsage: what Baton knows a native thread holds, for the decisions that must not send a request the provider
 * would reject (the turn-start budget, the known-full check, `/compact`'s headroom). Owns the one rule that joins the
 * last trusted usage report with `NativeThread.heldAtLeast`, the floor a rejection proved; does not own either figure.
 */
import type { ContextUsage, NativeThread, NativeThreadId, ProviderError } from "@baton/contracts"
import { Calibration } from "@baton/context"
import type { ThreadStore } from "@baton/persistence"
import { ProviderFailure } from "@baton/providers"
import { type Context, DateTime, Effect, Option } from "effect"

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

/**
 * The least a native thread holds (provider tokens) by a rejection `error` of a request that added `sentTokens`
 * (Baton tokens) to it: the size the provider gave for the rejected request less the request at `ratio`; `null`
 * when `error` is no overflow or gives no size (`ProviderFailure.requestedTokensOf`: a size told only in the
 * text counts). Pure.
 */
export const floorOf = (error: ProviderError, ratio: number, sentTokens: number): number | null => {
  const requested = ProviderFailure.requestedTokensOf(error)
  return requested === null ? null : Math.max(0, requested - Calibration.apply(ratio, sentTokens))
}

/**
 * Records `floor` (provider tokens) as the least native thread `id` holds (through `store`), unless it already records as much; in the
 * caller's unit of work (the thread's lock held). Returns the native thread as stored after (`None`: no such native
 * thread). Whatever became of the request's run (an interrupt may have ended it meanwhile), the rejection proved
 * what the native thread holds, and a later turn start must not plan below it.
 */
export const raiseFloor = (store: Context.Tag.Service<typeof ThreadStore>, id: NativeThreadId, floor: number) =>
  Effect.gen(function*() {
    const found = yield* store.getNativeThread(id)
    if (found._tag === "None") return found
    const stored = found.value
    if (stored.heldAtLeast !== undefined && stored.heldAtLeast >= floor) return found
    const raised: NativeThread = { ...stored, heldAtLeast: floor, updatedAt: yield* DateTime.now }
    yield* store.updateNativeThread(raised)
    return Option.some(raised)
  })

/**
 * `native` after it took `addedTokens` (Baton tokens) more, as stored now (read through `store`, under the caller's
 * lock), with a rejection's floor raised by them at `ratio` (provider tokens per Baton token): the native thread grew
 * past what the rejection proved. A trusted `acknowledged` report at or above the raised floor moves the floor to the
 * report (the report says more; the floor stays, since a later report can be stale: sim seed 22). Without a floor in
 * `native`, `native` as given and no statement.
 */
export const afterGrowth = (
  store: Context.Tag.Service<typeof ThreadStore>,
  native: NativeThread,
  ratio: number,
  addedTokens: number,
  acknowledged: ContextUsage | null
) =>
  Effect.gen(function*() {
    if (native.heldAtLeast === undefined) return native
    const stored = Option.getOrElse(yield* store.getNativeThread(native.id), () => native)
    if (stored.heldAtLeast === undefined) return withoutFloor(native)
    const raised = stored.heldAtLeast + Calibration.apply(ratio, addedTokens)
    return { ...native, heldAtLeast: acknowledged !== null && acknowledged.usedTokens >= raised ? acknowledged.usedTokens : raised }
  })
