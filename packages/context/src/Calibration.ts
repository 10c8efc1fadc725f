/**
 * Calibration: how many of a provider's tokens one of Baton's tokens is worth, learned from the provider's own
 * usage reports (docs/design.md, "Budget": "a real tokenizer with a per-provider calibration learned from reported usage").
 *
 * Baton counts every text with one tokenizer (`TokenCounter`, o200k_base). A provider whose model tokenizes the same
 * text into more tokens (seen in the field: 247k estimated against 270k-295k reported) would otherwise be sent more
 * history than its budget allows, and deferral would come too late. The calibration is a ratio
 * `provider tokens / Baton tokens`, applied to every figure that is Baton's estimate before it meets a figure the
 * provider reported.
 *
 * Owns: the learning policy (`learn`), the conversion both ways (`apply`, `rawBudget`, `toRaw`). Does not own where
 * samples come from (a turn between two trusted usage reports, in `packages/orchestration`) nor where a calibration
 * is stored (`packages/persistence`, one row per provider instance). Pure: no I/O, no clock.
 *
 * Policy (tokens, except the ratios):
 * - A sample is `{estimatedTokens, reportedTokens}`: Baton's count of what a native thread was sent and produced
 *   between two trusted usage reports, and how much the provider's reported usage grew over the same span.
 * - Samples under `minSampleTokens` (default 256) are ignored: per-message framing and rounding are a few tokens per
 *   message whatever the tokenizer, so a short turn says more about framing than about the tokenizer.
 * - Samples whose own ratio is outside `[minSampleRatio, maxSampleRatio]` (default [1/3, 3]) are ignored as
 *   implausible: no two current tokenizers differ by 3x on the same text, so such a sample is an unnoticed
 *   compaction, cached tokens reported differently, or a broken report, not a tokenizer difference.
 * - The ratio is robust to outliers: it is the token-weighted mean of the recent accepted samples (the last
 *   `windowSamples`, default 16) whose own ratio lies within `inlierTolerance` (default 25%) of the recent samples'
 *   median (by count). A usage report that grew for reasons other than the tokenizer — content the provider added
 *   that Baton never saw (a server-side tool's result, hidden context), a report inflated near the window — passes
 *   the 3x filter yet is not evidence of the tokenizer; while such samples are fewer than half of the recent ones
 *   they cannot move the ratio at all (with a moving average, one of them, the first sample above all, held the
 *   ratio 80% away from the truth for many turns: simulator seed 48). A provider that changes its model is followed
 *   once the new samples are the majority of the window (9 turns at the default); one large turn cannot swing the
 *   ratio alone, since the median is taken by count and a sample weighs its tokens only up to `fullWeightTokens`
 *   (default 2,048) in the mean. A sample's tokens measure how little the per-message framing blurs it (a few tokens
 *   a turn: 4% of a 256-token sample, 0.4% of 2,048); beyond that, what blurs a sample (the mix of text, a
 *   provider that trimmed or padded its context near the window) does not shrink with its size, so a larger turn is
 *   no better evidence (uncapped, one 30,852-token turn whose report near the window fell 13% short of the truth
 *   held the ratio at 0.950 against a true 1.060 while six other samples agreed on the truth: simulator seed 4005).
 *   One sample alone sets the ratio: before it there is no evidence, only the guess 1. (A trimmed mean around the
 *   median is the textbook robust location estimate; the window and tolerance are ours: 16 turns is a few minutes of
 *   an agent's work, and 25% is wider than any gap between current tokenizers' per-text ratios while far narrower
 *   than the outliers seen.)
 * - The ratio is clamped to `[minRatio, maxRatio]` (default [1/3, 3], the same bounds as the sample filter: every
 *   ratio a sample can show is representable, so delivered history stays within the budget in the provider's units
 *   for any accepted tokenizer gap; a narrower clamp let a provider at 2.5x overrun budgets by 25%). A provider
 *   beyond 3x is not calibrated at all (its samples are implausible by the rule above).
 */

/**
 * A learned calibration for one provider instance.
 *
 * - `ratio`: provider tokens per Baton token, in `[minRatio, maxRatio]`; 1 when nothing is learned.
 * - `samples`: how many samples were accepted.
 * - `weight`: the evidence the ratio rests on, in Baton tokens (the inlying recent samples' tokens).
 * - `recent`: the last `windowSamples` accepted samples, oldest first, as `{ratio, tokens}` (`tokens`: the sample's
 *   `estimatedTokens`). Absent or empty on a calibration stored before it was kept: its `ratio` and `weight` then
 *   count as one sample.
 */
export interface Calibration {
  readonly ratio: number
  readonly samples: number
  readonly weight: number
  readonly recent?: ReadonlyArray<Observation> | undefined
}

/** One accepted sample as the calibration keeps it: its own ratio and its size in Baton tokens. */
export interface Observation {
  readonly ratio: number
  readonly tokens: number
}

/** A sample: Baton's estimate and the provider's reported growth over the same span (tokens, non-negative). */
export interface Sample {
  readonly estimatedTokens: number
  readonly reportedTokens: number
}

/** The learning policy; see the module docblock for the defaults and why. */
export interface CalibrationPolicy {
  readonly minRatio: number
  readonly maxRatio: number
  readonly minSampleTokens: number
  readonly minSampleRatio: number
  readonly maxSampleRatio: number
  /** How many recent accepted samples the ratio is computed from. */
  readonly windowSamples: number
  /** How far (a fraction) a sample's ratio may lie from the recent median and still count. */
  readonly inlierTolerance: number
  /** The most tokens a sample weighs with in the mean of the inliers (its evidence, `weight`, counts them all). */
  readonly fullWeightTokens: number
}

export const defaultPolicy: CalibrationPolicy = {
  minRatio: 1 / 3,
  maxRatio: 3,
  minSampleTokens: 256,
  minSampleRatio: 1 / 3,
  maxSampleRatio: 3,
  windowSamples: 16,
  inlierTolerance: 0.25,
  fullWeightTokens: 2_048
}

/** Nothing learned: ratio 1 (Baton's count is taken as the provider's). */
export const identity: Calibration = { ratio: 1, samples: 0, weight: 0, recent: [] }

/** Why `learn` did not use a sample, or `null` when it did. */
export type Rejection = "too_small" | "implausible" | null

/** The sample's verdict under `policy`: `too_small`, `implausible`, or `null` (usable). */
export const rejection = (sample: Sample, policy: CalibrationPolicy = defaultPolicy): Rejection => {
  const { estimatedTokens: e, reportedTokens: r } = sample
  if (!(Number.isFinite(e) && Number.isFinite(r)) || e < policy.minSampleTokens) return "too_small"
  const ratio = r / e
  return ratio >= policy.minSampleRatio && ratio <= policy.maxSampleRatio ? null : "implausible"
}

const clamp = (x: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, x))

/** The median of `xs` by count (the mean of the two middle values when the count is even); `xs` non-empty. */
const median = (xs: ReadonlyArray<number>): number => {
  const sorted = [...xs].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/**
 * The ratio and weight that `recent` (non-empty) supports under `policy`: the mean of the samples within
 * `inlierTolerance` of the median, each weighted by its tokens up to `fullWeightTokens`, clamped to
 * `[minRatio, maxRatio]`; the median itself when none is (two samples that disagree). `weight` is the inliers' tokens
 * (uncapped).
 */
export const estimate = (
  recent: ReadonlyArray<Observation>,
  policy: CalibrationPolicy = defaultPolicy
): { readonly ratio: number; readonly weight: number } => {
  const center = median(recent.map((o) => o.ratio))
  const inliers = recent.filter((o) => Math.abs(o.ratio - center) <= policy.inlierTolerance * center)
  const weight = inliers.reduce((n, o) => n + o.tokens, 0)
  const weighed = (o: Observation) => Math.min(o.tokens, policy.fullWeightTokens)
  const total = inliers.reduce((n, o) => n + weighed(o), 0)
  const ratio = total > 0 ? inliers.reduce((n, o) => n + o.ratio * weighed(o), 0) / total : center
  return { ratio: clamp(ratio, policy.minRatio, policy.maxRatio), weight: Math.round(weight) }
}

/**
 * `calibration` updated with `sample` per the policy above; returned unchanged when the sample is rejected
 * (see `rejection`). Total: never fails; the ratio stays in `[minRatio, maxRatio]`, `recent` holds at most
 * `windowSamples` samples.
 */
export const learn = (
  calibration: Calibration,
  sample: Sample,
  policy: CalibrationPolicy = defaultPolicy
): Calibration => {
  if (rejection(sample, policy) !== null) return calibration
  const held: ReadonlyArray<Observation> = calibration.recent !== undefined && calibration.recent.length > 0
    ? calibration.recent
    : calibration.samples > 0 && calibration.weight > 0
    ? [{ ratio: calibration.ratio, tokens: calibration.weight }]
    : []
  const observed = { ratio: sample.reportedTokens / sample.estimatedTokens, tokens: sample.estimatedTokens }
  const recent = [...held, observed].slice(-Math.max(1, policy.windowSamples))
  return { ...estimate(recent, policy), samples: calibration.samples + 1, recent }
}

/** Baton tokens (`rawTokens`) in the provider's units: `ceil(rawTokens * ratio)`. Ratio 1 is the identity. */
export const apply = (ratio: number, rawTokens: number): number => Math.ceil(rawTokens * ratio)

/**
 * The most Baton tokens whose calibrated cost fits `budget` provider tokens: the largest `n` with
 * `apply(ratio, n) <= budget` (0 when the budget is 0). Selecting under it keeps delivered history within the
 * budget in the provider's units (docs/design.md invariant 5).
 */
export const rawBudget = (ratio: number, budget: number): number => {
  if (!(budget > 0)) return 0
  let n = Math.floor(budget / ratio)
  // Floating point: `floor(b / r) * r` can land a hair above `b`, and `b / r` a hair below an integer (17 / 0.34 is
  // 49.99999999999999 while ceil(50 * 0.34) is 17).
  while (n > 0 && apply(ratio, n) > budget) n--
  while (apply(ratio, n + 1) <= budget) n++
  return n
}

/** Provider tokens in Baton's units (`floor(providerTokens / ratio)`), for storing a reported count as an estimate. */
export const toRaw = (ratio: number, providerTokens: number): number => Math.floor(providerTokens / ratio)
