/**
 * The budget: how many tokens of history may be delivered at a turn start without crowding the model
 * (docs/design.md, "Budget").
 *
 * Owns: the budget policy (defaults and valid ranges) and the arithmetic from a native thread's window, usage and the
 * user's request to a budget. Does not own: where the numbers come from (the provider thread's configured window,
 * the native thread's last reported usage, Baton's own estimate), nor the decision to defer a handoff whose budget is
 * below `minUsefulBudget` (the orchestrator compares); both live in `packages/orchestration`.
 *
 * All quantities are tokens: non-negative integers.
 */
import type { ContextUsage } from "@baton/contracts"
import { Data, Either } from "effect"

/**
 * Budget policy, all in tokens except `reserveFraction`.
 *
 * - `tokenCap`: the most history delivered at one turn start; default 16,000, valid 1,024..64,000 (docs/design.md).
 * - `reserveFloor` and `reserveFraction`: the part of the window kept free for the model's own work (its answer,
 *   tool output to come): `reserve = max(reserveFloor, ceil(window * reserveFraction))`; defaults 16,000 and 0.25,
 *   i.e. `max(16,000, ceil(window / 4))` (docs/design.md, "matching the field's reserve policy").
 * - `defaultWindow`: the window assumed when neither the model nor the provider reports one; default 128,000, a
 *   GPT-4o-class window, small next to current coding models' so the assumption errs small.
 * - `minUsefulBudget`: below this a handoff is deferred whole rather than delivered as a sliver; default 1,024
 *   (docs/design.md, "Selection and rendering"). Not used by `compute`; carried here so one policy value configures both.
 */
export interface BudgetPolicy {
  readonly tokenCap: number
  readonly reserveFloor: number
  readonly reserveFraction: number
  readonly defaultWindow: number
  readonly minUsefulBudget: number
}

/** The defaults of docs/design.md: cap 16,000, reserve `max(16,000, ceil(window / 4))`, window 128,000, minimum 1,024. */
export const defaultPolicy: BudgetPolicy = {
  tokenCap: 16_000,
  reserveFloor: 16_000,
  reserveFraction: 0.25,
  defaultWindow: 128_000,
  minUsefulBudget: 1_024
}

/**
 * A policy field outside its valid range. `field` names it, `value` is what was given, `expected` states the range
 * (e.g. "an integer in 1,024..64,000"); `message` says all three.
 */
export class InvalidBudgetPolicy extends Data.TaggedError("InvalidBudgetPolicy")<{
  readonly field: keyof BudgetPolicy
  readonly value: number
  readonly expected: string
}> {
  override get message(): string {
    return `Invalid budget policy: ${this.field} = ${this.value}; expected ${this.expected}`
  }
}

const isIntegerIn = (value: number, min: number, max: number): boolean =>
  Number.isInteger(value) && value >= min && value <= max

/**
 * `defaultPolicy` with `overrides` applied (an `undefined` override keeps the default), validated field by field in
 * declaration order.
 *
 * Valid ranges: `tokenCap` an integer in 1,024..64,000; `reserveFloor` an integer >= 0; `reserveFraction` a number in
 * [0, 1); `defaultWindow` an integer >= 1; `minUsefulBudget` an integer in 0..tokenCap (a minimum above the cap would
 * defer every handoff forever). Fails with `InvalidBudgetPolicy` for the first field out of range.
 */
export const makePolicy = (
  overrides: { readonly [K in keyof BudgetPolicy]?: BudgetPolicy[K] | undefined }
): Either.Either<BudgetPolicy, InvalidBudgetPolicy> => {
  const policy: BudgetPolicy = {
    tokenCap: overrides.tokenCap ?? defaultPolicy.tokenCap,
    reserveFloor: overrides.reserveFloor ?? defaultPolicy.reserveFloor,
    reserveFraction: overrides.reserveFraction ?? defaultPolicy.reserveFraction,
    defaultWindow: overrides.defaultWindow ?? defaultPolicy.defaultWindow,
    minUsefulBudget: overrides.minUsefulBudget ?? defaultPolicy.minUsefulBudget
  }
  const invalid = (field: keyof BudgetPolicy, expected: string) =>
    Either.left(new InvalidBudgetPolicy({ field, value: policy[field], expected }))
  if (!isIntegerIn(policy.tokenCap, 1_024, 64_000)) return invalid("tokenCap", "an integer in 1,024..64,000")
  if (!isIntegerIn(policy.reserveFloor, 0, Number.MAX_SAFE_INTEGER)) {
    return invalid("reserveFloor", "an integer >= 0")
  }
  if (!(policy.reserveFraction >= 0 && policy.reserveFraction < 1)) {
    return invalid("reserveFraction", "a number in [0, 1)")
  }
  if (!isIntegerIn(policy.defaultWindow, 1, Number.MAX_SAFE_INTEGER)) {
    return invalid("defaultWindow", "an integer >= 1")
  }
  if (!isIntegerIn(policy.minUsefulBudget, 0, policy.tokenCap)) {
    return invalid("minUsefulBudget", `an integer in 0..tokenCap (${policy.tokenCap})`)
  }
  return Either.right(policy)
}

/**
 * What the budget is computed from, for one native thread at one turn start (tokens):
 *
 * - `modelWindow`: the model's context window as configured for the provider instance, if known.
 * - `usage`: the context usage last reported for *this* native thread (never another's), or `null`/absent.
 * - `estimatedUsedTokens`: Baton's own count of what this native thread has been sent; used only without `usage`.
 * - `requestTokens`: the user's prompt plus attachments. The request is never truncated; it only shrinks the budget.
 * - `ratio`: the provider's calibration (`Calibration`, provider tokens per Baton token), default 1. It scales what
 *   is Baton's own count (`estimatedUsedTokens`, `requestTokens`) into the provider's units; a reported
 *   `usage.usedTokens` is already in them and is taken as is. A ratio that is not a positive finite number is 1.
 */
export interface BudgetInput {
  readonly modelWindow?: number | undefined
  readonly usage?: ContextUsage | null | undefined
  readonly estimatedUsedTokens?: number | undefined
  readonly requestTokens: number
  readonly ratio?: number | undefined
}

/**
 * A computed budget (tokens) and where its inputs came from.
 *
 * - `window`: the smallest known of model window, reported `maxTokens`, reported `autoCompactThreshold`; else the
 *   policy's `defaultWindow`. `windowSource` says which (`model`, then `reported_max`, then `auto_compact_threshold`
 *   on a tie; `default` when none is known).
 * - `used`: reported `usedTokens` (`usedSource: "reported"`), else `ceil(estimatedUsedTokens * ratio)`, else 0
 *   (`"estimate"`).
 * - `request`: `ceil(requestTokens * ratio)`.
 *
 * Every figure is in the provider's units (Baton's count when the ratio is 1).
 * - `reserve`: `max(reserveFloor, ceil(window * reserveFraction))`.
 * - `budget`: `max(0, min(tokenCap, window - used - request - reserve))`: the history that may be delivered.
 * - `physicalHeadroom`: `max(0, window - used - request)`: what physically still fits, reserve included; `/compact`
 *   may spend it on injection because compaction follows, and a deferral pointer may use it.
 */
export interface Budget {
  readonly window: number
  readonly used: number
  readonly request: number
  readonly reserve: number
  readonly budget: number
  readonly physicalHeadroom: number
  readonly windowSource: "model" | "reported_max" | "auto_compact_threshold" | "default"
  readonly usedSource: "reported" | "estimate"
}

/** A window value is known when it is a positive finite number; 0 is how some providers say "not reported". */
const knownWindow = (value: number | undefined): number | undefined =>
  value !== undefined && Number.isFinite(value) && value > 0 ? Math.floor(value) : undefined

/**
 * Token counts are taken as given when they are non-negative integers. A fractional count (a calibrated estimate) is
 * rounded up, a negative one is 0, and NaN is treated as unbounded, so a broken count can only shrink the budget.
 */
const tokenCount = (value: number): number =>
  Number.isNaN(value) ? Number.POSITIVE_INFINITY : Math.max(0, Math.ceil(value))

/**
 * The budget for one turn start, per docs/design.md:
 * `budget = max(0, min(tokenCap, window - used - request - reserve))`, `reserve = max(reserveFloor,
 * ceil(window * reserveFraction))`, with `window` and `used` chosen as described on `Budget`.
 *
 * Total and pure: never fails, never negative, never above `policy.tokenCap`, and never larger when `used` or
 * `request` grow. `policy` defaults to `defaultPolicy` and is not re-validated (build it with `makePolicy`).
 */
export const compute = (input: BudgetInput, policy: BudgetPolicy = defaultPolicy): Budget => {
  const candidates: ReadonlyArray<readonly [Budget["windowSource"], number | undefined]> = [
    ["model", knownWindow(input.modelWindow)],
    ["reported_max", knownWindow(input.usage?.maxTokens)],
    ["auto_compact_threshold", knownWindow(input.usage?.autoCompactThreshold)]
  ]
  let window = policy.defaultWindow
  let windowSource: Budget["windowSource"] = "default"
  for (const [source, value] of candidates) {
    if (value !== undefined && (windowSource === "default" || value < window)) {
      window = value
      windowSource = source
    }
  }
  const usage = input.usage ?? null
  const ratio = input.ratio !== undefined && Number.isFinite(input.ratio) && input.ratio > 0 ? input.ratio : 1
  const used = tokenCount(usage !== null ? usage.usedTokens : (input.estimatedUsedTokens ?? 0) * ratio)
  const request = tokenCount(input.requestTokens * ratio)
  const reserve = Math.max(policy.reserveFloor, Math.ceil(window * policy.reserveFraction))
  const free = window - used - request
  return {
    window,
    used,
    request,
    reserve,
    budget: Math.max(0, Math.min(policy.tokenCap, free - reserve)),
    physicalHeadroom: Math.max(0, free),
    windowSource,
    usedSource: usage !== null ? "reported" : "estimate"
  }
}

/**
 * Why a provider instance can never get history at a turn start, or `null` when it can: its effective window (the
 * smaller of `window` and `autoCompactThreshold`, tokens, as `compute` chooses it) less the reserve
 * (`max(reserveFloor, ceil(window * reserveFraction))`, 16,000 by default) leaves less than `minUsefulBudget` (1,024),
 * so owed history is deferred at every turn and only `/compact` drains it (by the physical headroom). With the default
 * policy that is every window below 17,024 tokens. `canInject` false adds that `/compact` cannot inject there either.
 * The sentence names the instance, the window and the reserve; `baton replay` and `baton serve` print it at start.
 */
export const turnStartWarning = (
  instance: { readonly name: string; readonly window: number; readonly autoCompactThreshold: number | null; readonly canInject: boolean },
  policy: BudgetPolicy = defaultPolicy
): string | null => {
  const effective = Math.min(instance.window, instance.autoCompactThreshold ?? instance.window)
  const reserve = Math.max(policy.reserveFloor, Math.ceil(effective * policy.reserveFraction))
  return effective - reserve < policy.minUsefulBudget
    ? `${instance.name}: a window of ${effective} tokens leaves no history budget after the ${reserve}-token reserve; ` +
      `owed history is deferred at every turn and only /compact${instance.canInject ? "" : " (which cannot inject here)"} drains it`
    : null
}
