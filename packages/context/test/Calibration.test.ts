import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import * as Budget from "../src/Budget.js"
import * as Calibration from "../src/Calibration.js"

const sample = fc.record({
  estimatedTokens: fc.integer({ min: 0, max: 500_000 }),
  reportedTokens: fc.integer({ min: 0, max: 2_000_000 })
})
const calibration = fc.record({
  ratio: fc.double({ min: 1 / 3, max: 3, noNaN: true }),
  samples: fc.integer({ min: 0, max: 1_000 }),
  weight: fc.integer({ min: 0, max: 200_000 })
})
// True ratios inside the sample filter with room for rounding (a sample of ceil(e x 3) / e can exceed 3).
const ratio = fc.double({ min: 0.34, max: 2.9, noNaN: true })

describe("Calibration.learn", () => {
  it("the field case: 247,000 estimated, 284,050 reported (x1.15) sets the ratio to 1.15 from nothing", () => {
    const learned = Calibration.learn(Calibration.identity, { estimatedTokens: 247_000, reportedTokens: 284_050 })
    expect(learned.ratio).toBeCloseTo(1.15, 10)
    expect(learned.samples).toBe(1)
    expect(learned.weight).toBe(247_000)
  })

  it("ignores a sample under 256 tokens and one whose ratio is beyond 3x (a compaction, a broken report)", () => {
    const c = { ratio: 1.1, samples: 4, weight: 10_000 }
    expect(Calibration.learn(c, { estimatedTokens: 255, reportedTokens: 400 })).toBe(c)
    expect(Calibration.learn(c, { estimatedTokens: 1_000, reportedTokens: 3_001 })).toBe(c)
    expect(Calibration.learn(c, { estimatedTokens: 1_000, reportedTokens: 333 })).toBe(c)
    expect(Calibration.rejection({ estimatedTokens: 1_000, reportedTokens: 3_001 })).toBe("implausible")
    expect(Calibration.rejection({ estimatedTokens: 255, reportedTokens: 255 })).toBe("too_small")
  })

  it("samples that agree are averaged by their tokens; a calibration stored without samples counts as one", () => {
    // Stored before `recent` existed: 10,000 tokens at 1.0. A 10,000-token sample at 1.2: median 1.1, both within
    // 25% of it, so the token-weighted mean of the two, 1.1.
    const c = Calibration.learn({ ratio: 1, samples: 1, weight: 10_000 }, { estimatedTokens: 10_000, reportedTokens: 12_000 })
    expect(c.ratio).toBeCloseTo(1.1, 12)
    expect(c.weight).toBe(20_000)
    expect(c.recent).toEqual([{ ratio: 1, tokens: 10_000 }, { ratio: 1.2, tokens: 10_000 }])
  })

  const feed = (c: Calibration.Calibration, ratios: ReadonlyArray<number>, tokens = 2_000) =>
    ratios.reduce((acc, r) => Calibration.learn(acc, { estimatedTokens: tokens, reportedTokens: Math.round(tokens * r) }), c)

  it("a usage jump that is not the tokenizer does not move the ratio (seed 48: a report near the window after 2,000 tokens at x1.05)", () => {
    const truth = feed(Calibration.identity, [1.05, 1.05, 1.05])
    expect(truth.ratio).toBe(1.05)
    // 2.9x on a 15,000-token turn: passes the 3x filter, outweighs all the evidence held, and is ignored.
    const jumped = Calibration.learn(truth, { estimatedTokens: 15_000, reportedTokens: 43_500 })
    expect(jumped.ratio).toBe(1.05)
    expect(jumped.samples).toBe(4)
    expect(jumped.weight).toBe(6_000)
  })

  it("one large turn whose report fell short near the window does not hold the ratio off the truth (seed 4005: x1.06)", () => {
    // The samples seed 4005's shrunk run taught `big` (true ratio 1.06): the second is a usage jump (2.4x, ignored
    // by the median), the fifth a 30,852-token turn whose report near the window (0.97) fell 13% short of the truth.
    const samples: ReadonlyArray<readonly [number, number]> = [
      [324, 345], [3_272, 7_896], [1_599, 1_696], [1_929, 2_046], [30_852, 28_362], [309, 329], [312, 333], [3_908, 4_147]
    ]
    const learned = samples.reduce(
      (acc, [estimatedTokens, reportedTokens]) => Calibration.learn(acc, { estimatedTokens, reportedTokens }),
      Calibration.identity
    )
    expect(Math.abs(learned.ratio - 1.06)).toBeLessThan(0.05 * 1.06)
    // Its evidence still counts every token of the inliers (the 2.4x jump is not one).
    expect(learned.weight).toBe(324 + 1_599 + 1_929 + 30_852 + 309 + 312 + 3_908)
  })

  it("the first sample an outlier: the truth takes over as soon as it is the majority", () => {
    const first = feed(Calibration.identity, [2.9], 15_000)
    expect(first.ratio).toBeCloseTo(2.9, 12)
    expect(feed(first, [1.05, 1.05]).ratio).toBe(1.05)
  })

  it("a provider that changes its model is followed once the new ratio holds the majority of the window (9 of 16)", () => {
    const old = feed(Calibration.identity, Array(16).fill(1))
    expect(feed(old, Array(7).fill(1.5)).ratio).toBe(1)
    // An even split is ambiguous: the median is between the two, and both count.
    expect(feed(old, Array(8).fill(1.5)).ratio).toBe(1.25)
    expect(feed(old, Array(9).fill(1.5)).ratio).toBe(1.5)
  })

  it.prop("keeps the ratio in [1/3, 3], the weight non-negative and at most 16 recent samples", [calibration, fc.array(sample, { maxLength: 30 })], ([c, samples]) => {
    const learned = samples.reduce<Calibration.Calibration>((acc, s) => Calibration.learn(acc, s), c)
    expect(learned.ratio).toBeGreaterThanOrEqual(1 / 3)
    expect(learned.ratio).toBeLessThanOrEqual(3)
    expect(learned.weight).toBeGreaterThanOrEqual(0)
    expect((learned.recent ?? []).length).toBeLessThanOrEqual(16)
  })

  it.prop(
    "outliers fewer than a quarter of the samples never move a converged ratio (any ratio, any outliers >30% away)",
    [
      ratio,
      fc.array(fc.tuple(fc.boolean(), fc.double({ min: 0, max: 1, noNaN: true }), fc.integer({ min: 256, max: 200_000 })), { minLength: 3, maxLength: 60 })
    ],
    ([truth, stream]) => {
      let c = [truth, truth, truth].reduce(
        (acc, r) => Calibration.learn(acc, { estimatedTokens: 10_000, reportedTokens: 10_000 * r }),
        Calibration.identity
      )
      stream.forEach(([high, u, tokens], i) => {
        // Every fourth sample is an outlier: above 1.3x the truth or under 0.7x (within the 3x filter).
        const outlier = i % 4 === 3
        const lo = high ? truth * 1.3 : 1 / 3
        const hi = high ? 3 : truth * 0.7
        const r = outlier && hi > lo ? lo + u * (hi - lo) : truth
        c = Calibration.learn(c, { estimatedTokens: tokens, reportedTokens: tokens * r })
        expect(Math.abs(c.ratio - truth)).toBeLessThan(1e-9 * truth)
      })
    }
  )

  it.prop(
    "converges toward a constant true ratio from any start: never moves away, within 1% after 80 turns of 20,000+",
    [calibration, ratio, fc.array(fc.integer({ min: 20_000, max: 40_000 }), { minLength: 80, maxLength: 100 })],
    ([start, truth, sizes]) => {
      let c: Calibration.Calibration = start
      for (const e of sizes) {
        const next = Calibration.learn(c, { estimatedTokens: e, reportedTokens: Math.ceil(e * truth) })
        // ceil adds under one token per sample: allow that much on top of "no further from the truth".
        expect(Math.abs(next.ratio - truth)).toBeLessThanOrEqual(Math.abs(c.ratio - truth) + 1 / e)
        c = next
      }
      expect(Math.abs(c.ratio - truth)).toBeLessThan(0.01 * truth)
    }
  )

  it.prop("a provider that counts as Baton does keeps the ratio at exactly 1", [fc.array(fc.integer({ min: 0, max: 100_000 }))], ([sizes]) => {
    const learned = sizes.reduce((acc, e) => Calibration.learn(acc, { estimatedTokens: e, reportedTokens: e }), Calibration.identity)
    expect(learned.ratio).toBe(1)
  })
})

describe("Calibration.apply / rawBudget", () => {
  it.prop("ratio 1 is the identity", [fc.integer({ min: 0, max: 10_000_000 })], ([n]) => {
    expect(Calibration.apply(1, n)).toBe(n)
    expect(Calibration.rawBudget(1, n)).toBe(n)
    expect(Calibration.toRaw(1, n)).toBe(n)
  })

  it("rawBudget when budget / ratio falls a hair below an integer (17 / 0.34 = 49.999…, ceil(50 x 0.34) = 17): 50", () => {
    expect(Calibration.rawBudget(0.34, 17)).toBe(50)
  })

  it.prop("rawBudget is the most Baton tokens whose calibrated cost fits the budget", [ratio, fc.integer({ min: 0, max: 1_000_000 })], ([r, budget]) => {
    const raw = Calibration.rawBudget(r, budget)
    expect(Calibration.apply(r, raw)).toBeLessThanOrEqual(budget)
    expect(Calibration.apply(r, raw + 1)).toBeGreaterThan(budget)
  })

  it("16,000 provider tokens at 1.15 hold 13,913 Baton tokens (13,913 x 1.15 = 15,999.95)", () => {
    expect(Calibration.rawBudget(1.15, 16_000)).toBe(13_913)
    expect(Calibration.apply(1.15, 13_913)).toBe(16_000)
  })
})

describe("Budget.compute with a calibration", () => {
  it("scales the estimate and the request, never a reported usage", () => {
    const estimated = Budget.compute({ modelWindow: 400_000, estimatedUsedTokens: 247_000, requestTokens: 1_000, ratio: 1.15 })
    expect(estimated.used).toBe(284_050)
    expect(estimated.request).toBe(1_150)
    const reported = Budget.compute({ modelWindow: 400_000, usage: { usedTokens: 247_000 }, requestTokens: 1_000, ratio: 1.15 })
    expect(reported.used).toBe(247_000)
    expect(reported.request).toBe(1_150)
  })

  it.prop("ratio 1 (or none) gives the uncalibrated budget", [fc.integer({ min: 0, max: 400_000 }), fc.integer({ min: 0, max: 50_000 })], ([used, request]) => {
    const plain = Budget.compute({ modelWindow: 400_000, estimatedUsedTokens: used, requestTokens: request })
    expect(Budget.compute({ modelWindow: 400_000, estimatedUsedTokens: used, requestTokens: request, ratio: 1 })).toEqual(plain)
  })

  it.prop("a larger ratio never gives a larger budget", [fc.integer({ min: 0, max: 400_000 }), fc.integer({ min: 0, max: 50_000 }), ratio, ratio], ([used, request, a, b]) => {
    const [lo, hi] = a <= b ? [a, b] : [b, a]
    const at = (r: number) => Budget.compute({ modelWindow: 400_000, estimatedUsedTokens: used, requestTokens: request, ratio: r }).budget
    expect(at(hi)).toBeLessThanOrEqual(at(lo))
  })
})
