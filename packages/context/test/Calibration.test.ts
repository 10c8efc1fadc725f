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
    expect(learned.weight).toBe(200_000)
  })

  it("ignores a sample under 256 tokens and one whose ratio is beyond 3x (a compaction, a broken report)", () => {
    const c = { ratio: 1.1, samples: 4, weight: 10_000 }
    expect(Calibration.learn(c, { estimatedTokens: 255, reportedTokens: 400 })).toBe(c)
    expect(Calibration.learn(c, { estimatedTokens: 1_000, reportedTokens: 3_001 })).toBe(c)
    expect(Calibration.learn(c, { estimatedTokens: 1_000, reportedTokens: 333 })).toBe(c)
    expect(Calibration.rejection({ estimatedTokens: 1_000, reportedTokens: 3_001 })).toBe("implausible")
    expect(Calibration.rejection({ estimatedTokens: 255, reportedTokens: 255 })).toBe("too_small")
  })

  it("weighs a sample by its tokens against the evidence held (at most 200,000 tokens)", () => {
    // 10,000 tokens held at 1.0, a 10,000-token sample at 1.2: the mean of the two, 1.1.
    const c = Calibration.learn({ ratio: 1, samples: 1, weight: 10_000 }, { estimatedTokens: 10_000, reportedTokens: 12_000 })
    expect(c.ratio).toBeCloseTo(1.1, 12)
    expect(c.weight).toBe(20_000)
    // Saturated evidence: a 2,000-token sample moves the ratio by 2,000 / 202,000 of the gap.
    const full = Calibration.learn({ ratio: 1, samples: 50, weight: 200_000 }, { estimatedTokens: 2_000, reportedTokens: 3_000 })
    expect(full.ratio).toBeCloseTo(1 + 0.5 * 2_000 / 202_000, 12)
    expect(full.weight).toBe(200_000)
  })

  it.prop("keeps the ratio in [1/3, 3] and the weight in [0, 200,000]", [calibration, fc.array(sample, { maxLength: 30 })], ([c, samples]) => {
    const learned = samples.reduce((acc, s) => Calibration.learn(acc, s), c)
    expect(learned.ratio).toBeGreaterThanOrEqual(1 / 3)
    expect(learned.ratio).toBeLessThanOrEqual(3)
    expect(learned.weight).toBeGreaterThanOrEqual(0)
    expect(learned.weight).toBeLessThanOrEqual(200_000)
  })

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
