import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import * as ToolResultOffload from "../src/ToolResultOffload.js"

type Situation = ToolResultOffload.Situation

const unitArb = fc.record({
  isTool: fc.boolean(),
  answered: fc.boolean(),
  stubbed: fc.boolean(),
  stubTokens: fc.integer({ min: 5, max: 400 }),
  answeredRequests: fc.integer({ min: 0, max: 200 }),
  requested: fc.integer({ min: 0, max: 7 }).map((n) => n === 0)
})

/** A random history: units with random flags, items assigned to units in a random order (results may sit far away). */
const situationArb: fc.Arbitrary<Situation> = fc
  .array(unitArb, { minLength: 1, maxLength: 40 })
  .chain((units) =>
    fc.record({
      units: fc.constant(units),
      items: fc.array(
        fc.record({
          unit: fc.integer({ min: 0, max: units.length - 1 }),
          tokens: fc.integer({ min: 1, max: 30_000 }),
          pinned: fc.integer({ min: 0, max: 9 }).map((n) => n === 0)
        }),
        { minLength: 1, maxLength: 120 }
      ),
      windowTokens: fc.constantFrom(200_000, 128_000, 1_000_000),
      requestsSoFar: fc.integer({ min: 0, max: 400 }),
      msSinceLastRequest: fc.option(fc.integer({ min: 0, max: 3_600_000 }), { nil: null })
    })
  )
  .map(({ items, ...rest }) => ({
    ...rest,
    items: items.map((item, i) => ({ ...item, seq: i + 1 })),
    systemTokens: 3_000,
    pricing: ToolResultOffload.anthropicPricing
  }))

const unitTokens = (s: Situation, unit: number) => s.items.filter((i) => i.unit === unit).reduce((n, i) => n + i.tokens, 0)
const lastPosition = (s: Situation, unit: number) => s.items.map((i) => i.unit).lastIndexOf(unit)

describe("ToolResultOffload.decide (properties)", () => {
  it.prop("never splits a unit: every item of a stubbed unit goes, every other item stays", [situationArb], ([s]) => {
    const d = ToolResultOffload.decide(s)
    const after = ToolResultOffload.apply(s, d)
    const chosen = new Set(d.units)
    expect(after.items.filter((i) => !chosen.has(i.unit))).toEqual(s.items.filter((i) => !chosen.has(i.unit)))
    for (const unit of d.units) {
      const left = after.items.filter((i) => i.unit === unit)
      expect(left).toHaveLength(1)
      expect(left[0]!.tokens).toBe(s.units[unit]!.stubTokens)
    }
    expect(after.items.reduce((n, i) => n + i.tokens, 0) + s.systemTokens).toBe(d.tokensAfter)
  })

  it.prop("touches only answered, unpinned, not yet stubbed tool units", [situationArb], ([s]) => {
    for (const unit of ToolResultOffload.decide(s).units) {
      const u = s.units[unit]!
      expect(u.isTool && u.answered && !u.stubbed).toBe(true)
      expect(s.items.some((i) => i.unit === unit && i.pinned)).toBe(false)
    }
  })

  it.prop("keeps the newest tool units verbatim unless the model asked to offload them", [situationArb], ([s]) => {
    const present = s.units.map((u, i) => ({ u, i })).filter(({ i, u }) => u.isTool && s.items.some((x) => x.unit === i))
    const newest = present.sort((a, b) => lastPosition(s, b.i) - lastPosition(s, a.i))
      .slice(0, ToolResultOffload.defaults.keepNewestUnits).map((x) => x.i)
    const chosen = ToolResultOffload.decide(s).units
    for (const unit of newest) if (s.units[unit]!.requested !== true) expect(chosen).not.toContain(unit)
  })

  it.prop("never stubs a unit whose stub is not smaller than it, and never grows the request", [situationArb], ([s]) => {
    const d = ToolResultOffload.decide(s)
    for (const unit of d.units) expect(s.units[unit]!.stubTokens).toBeLessThan(unitTokens(s, unit))
    expect(d.tokensAfter).toBeLessThanOrEqual(d.tokensBefore)
    if (d.units.length > 0) expect(d.tokensAfter).toBeLessThan(d.tokensBefore)
  })

  it.prop("a stubbed unit is never stubbed again", [situationArb], ([s]) => {
    const first = ToolResultOffload.decide(s)
    const second = ToolResultOffload.decide(ToolResultOffload.apply(s, first))
    for (const unit of first.units) expect(second.units).not.toContain(unit)
  })

  it.prop("flushes in batches: one cache break, every eligible unit after it rides along, and a mild flush pays", [
    situationArb
  ], ([s]) => {
    const d = ToolResultOffload.decide(s)
    if (d.tier !== "mild") return
    const eligible = ToolResultOffload.eligible(s)
    const firstChosen = eligible.findIndex((c) => d.units.includes(c.unit))
    expect(firstChosen).toBeGreaterThanOrEqual(0)
    expect(eligible.slice(firstChosen).map((c) => c.unit).sort((a, b) => a - b)).toEqual(d.units)
    expect(d.expectedSavings).toBeGreaterThan(d.rewriteCost)
  })

  it("the random histories reach every tier (so the properties above are exercised)", () => {
    const tiers = new Set(fc.sample(situationArb, { numRuns: 2_000, seed: 11 }).map((s) => ToolResultOffload.decide(s).tier))
    expect([...tiers].sort()).toEqual(["aggressive", "emergency", "mild", "none", "requested"])
  })

  it.prop("stubs every unit the model asked for unless pinned, open, already stubbed or not worth it", [
    situationArb
  ], ([s]) => {
    const d = ToolResultOffload.decide(s)
    for (const [unit, u] of s.units.entries()) {
      const present = s.items.some((i) => i.unit === unit)
      const pinned = s.items.some((i) => i.unit === unit && i.pinned)
      const stubbable = u.requested === true && u.isTool && u.answered && !u.stubbed && !pinned && present &&
        u.stubTokens < unitTokens(s, unit)
      if (stubbable) expect(d.units).toContain(unit)
    }
  })

  it.prop("the model's requests never break the cache twice: every eligible unit after the oldest asked rides along", [
    situationArb
  ], ([s]) => {
    const d = ToolResultOffload.decide(s)
    if (d.tier !== "requested") return
    const from = Math.min(...ToolResultOffload.requestedCandidates(s).map((c) => c.first))
    for (const c of ToolResultOffload.eligible(s)) if (c.first >= from) expect(d.units).toContain(c.unit)
    // One break: at the oldest asked unit, or earlier where the cache-aware rule alone would already break (its units
    // ride along: e.g. a cold cache, where every eligible unit goes at no rewrite cost; found by a random seed,
    // 2026-12-03: the property expected the asked unit's position when a cold flush started before it).
    const alone = ToolResultOffload.decide({ ...s, units: s.units.map((u) => ({ ...u, requested: false })) })
    const first = (u: number) => s.items.findIndex((i) => i.unit === u)
    const expected = Math.min(from, ...alone.units.map(first))
    expect(Math.min(...d.units.map(first))).toBe(expected)
    for (const u of alone.units) expect(d.units).toContain(u)
  })

  it.prop("without requests, decide is the cache-aware rule alone", [situationArb], ([s]) => {
    const plain = { ...s, units: s.units.map((u) => ({ ...u, requested: false })) }
    expect(ToolResultOffload.decide(plain).tier).not.toBe("requested")
  })

  it.prop("none stubs nothing; emergency stubs every eligible unit and says to summarise; the others stub something", [situationArb], ([s]) => {
    const d = ToolResultOffload.decide(s)
    if (d.tier === "none") expect(d.units).toEqual([])
    else if (d.tier === "emergency") {
      for (const c of ToolResultOffload.eligible(s)) expect(d.units).toContain(c.unit)
      expect(d.reason).toContain("summarise (/offload)")
    } else expect(d.units.length).toBeGreaterThan(0)
  })

  it.prop("every stub's ref names exactly its unit's items (stub -> ref -> original)", [situationArb], ([s]) => {
    for (const unit of ToolResultOffload.decide(s).units) {
      const seqs = s.items.filter((i) => i.unit === unit).map((i) => i.seq)
      const stub = ToolResultOffload.stubText([{ toolName: "Read", argumentsText: "{}", releasedChars: 10 }], ToolResultOffload.refOf(seqs))
      const ref = ToolResultOffload.refOfStub(stub)!
      const back = ref.split(", ").flatMap((part) => {
        const [from, to = from] = part.split("-").map((p) => Number(p.slice(1)))
        return Array.from({ length: to! - from! + 1 }, (_, k) => from! + k)
      })
      expect(back).toEqual([...seqs].sort((a, b) => a - b))
    }
  })
})

/** A history of `n` tool units of `tokens` each (a call and a result item); unit u answered `age(u)` requests ago. */
const history = (n: number, tokens: number, requestsSoFar: number, age: (u: number) => number = (u) => n - u): Situation => ({
  items: Array.from({ length: n }, (_, u) => [
    { seq: 2 * u + 1, tokens: 50, unit: u, pinned: false },
    { seq: 2 * u + 2, tokens: tokens - 50, unit: u, pinned: false }
  ]).flat(),
  units: Array.from({ length: n }, (_, u) => ({ isTool: true, answered: true, stubbed: false, stubTokens: 40, answeredRequests: age(u) })),
  systemTokens: 3_000,
  windowTokens: 200_000,
  pricing: ToolResultOffload.anthropicPricing,
  requestsSoFar,
  msSinceLastRequest: 1_000
})

describe("ToolResultOffload.decide (the rule on small histories)", () => {
  // 10 units of 1,000 tokens; the 3 newest are kept, units 0-6 are eligible, each releasing 960 tokens. Breaking at
  // unit 0: A = 10,000, s = 6,720, rewrite = (1.25 - 0.1) x 3,280 = 3,772. Unit u has been eligible since unit u + 3
  // was answered.
  it("waits while the units have not yet cost, while eligible, as much as the rewrite", () => {
    // Ages 10 - u: eligible for 7 - u requests; rent = 0.1 x 960 x (7 + 6 + ... + 1) = 2,688 < 3,772.
    const d = ToolResultOffload.decide(history(10, 1_000, 30))
    expect(d.tier).toBe("none")
    expect(d.units).toEqual([])
  })

  it("on an OpenAI instance's prices (no write price) waits the same: a write price of 0 is a multiplier of 1, not 0", () => {
    const openAi = { input: 1.25, cacheRead: 0.125, cacheWrite: 0 }
    expect(ToolResultOffload.pricingOf(openAi)).toEqual({ readMultiplier: 0.1, writeMultiplier: 1, ttlMs: 5 * 60_000 })
    const anthropic = ToolResultOffload.pricingOf({ input: 3, cacheRead: 0.3, cacheWrite: 3.75 }, null)
    expect(anthropic.readMultiplier).toBeCloseTo(0.1)
    expect(anthropic).toMatchObject({ writeMultiplier: 1.25, ttlMs: null })
    expect(ToolResultOffload.pricingOf({ input: 0, cacheRead: 0, cacheWrite: 0 })).toEqual(ToolResultOffload.anthropicPricing)
    // Rewrite (1 - 0.1) x 3,280 = 2,952 > rent 2,688: not yet.
    expect(ToolResultOffload.decide({ ...history(10, 1_000, 30), pricing: ToolResultOffload.pricingOf(openAi) }).tier).toBe("none")
    // What the adapters computed before (cacheWrite / input = 0): the rewrite looked free, so the same history flushed.
    const before = ToolResultOffload.decide({ ...history(10, 1_000, 30), pricing: { readMultiplier: 0.1, writeMultiplier: 0, ttlMs: 5 * 60_000 } })
    expect(before.tier).toBe("mild")
    expect(before.rewriteCost).toBeLessThan(0)
  })

  it("then flushes every eligible unit in one batch, at the break with the largest margin", () => {
    // Ages 3 x (10 - u): rent = 0.1 x 960 x 84 = 8,064 >= 3,772; savings over R = 30 requests: 0.1 x 6,720 x 30.
    const d = ToolResultOffload.decide(history(10, 1_000, 30, (u) => 3 * (10 - u)))
    expect(d.tier).toBe("mild")
    expect(d.units).toEqual([0, 1, 2, 3, 4, 5, 6])
    expect(d.tokensBefore - d.tokensAfter).toBe(6_720)
    expect(d.rewriteCost).toBeCloseTo(3_772)
    expect(d.expectedSavings).toBeCloseTo(20_160)
    expect(d.breakEvenRequests).toBeCloseTo(3_772 / 672)
  })

  it("flushes every eligible unit when the cache has expired", () => {
    const d = ToolResultOffload.decide({ ...history(10, 1_000, 1), msSinceLastRequest: 6 * 60_000 })
    expect(d.tier).toBe("mild")
    expect(d.units).toEqual([0, 1, 2, 3, 4, 5, 6])
    expect(d.rewriteCost).toBe(0)
  })

  it("flushes the oldest regardless of cache near the window; when stubs cannot help, stubs all it may and says to summarise", () => {
    const near = ToolResultOffload.decide(history(20, 9_000, 1, () => 0))
    expect(near.tier).toBe("aggressive")
    expect(near.units.slice(0, 8)).toEqual([0, 1, 2, 3, 4, 5, 6, 7])
    expect(near.tokensAfter).toBeLessThanOrEqual(0.6 * 200_000)
    // 350,000 tokens; stubbing all 17 eligible units releases 152,320, leaving 197,680 >= 0.95 x 200,000.
    const full = ToolResultOffload.decide({ ...history(20, 9_000, 1), systemTokens: 170_000 })
    expect(full.tier).toBe("emergency")
    expect(full.units).toEqual(Array.from({ length: 17 }, (_, u) => u))
    expect(full.tokensAfter).toBe(197_680)
    expect(full.reason).toBe("stubbing every eligible unit leaves 197680 of 200000 tokens: summarise (/offload)")
  })

  it("writes one line per call (values of the arguments, middle cut) under the ref", () => {
    expect(ToolResultOffload.stubText([
      { toolName: "Read", argumentsText: "{\n  \"file_path\": \"/src/a.ts\"\n}", releasedChars: 12_345 },
      { toolName: "Bash", argumentsText: JSON.stringify({ command: "x".repeat(200) }), releasedChars: 7 }
    ], ToolResultOffload.refOf([15, 12, 13, 14, 20]))).toBe(
      "[offloaded, thread_read #12-#15, #20]\n" +
        "Read /src/a.ts: 12,345 chars\n" +
        `Bash ${"x".repeat(23)}…${"x".repeat(36)}: 7 chars`
    )
    // No arguments: no stray space before the colon (found by a review).
    expect(ToolResultOffload.stubText([{ toolName: "updateIssueList", argumentsText: "{}", releasedChars: 70 }], "tool:toolu_1"))
      .toBe("[offloaded, thread_read tool:toolu_1]\nupdateIssueList: 70 chars")
  })
})

describe("ToolResultOffload settings (issue 11 item 4)", () => {
  it("overrides replace only the fields they set", () => {
    const s = ToolResultOffload.withOverrides(ToolResultOffload.defaults, { keepNewestUnits: 1, emergencyRatio: undefined })
    expect(s).toEqual({ ...ToolResultOffload.defaults, keepNewestUnits: 1 })
    expect(ToolResultOffload.withOverrides(ToolResultOffload.defaults, undefined)).toBe(ToolResultOffload.defaults)
  })

  it("problems name the field and the value", () => {
    expect(ToolResultOffload.problems(ToolResultOffload.defaults)).toEqual([])
    expect(ToolResultOffload.problems({ ...ToolResultOffload.defaults, keepNewestUnits: -1, aggressiveTargetRatio: 0.9 })).toEqual([
      "keepNewestUnits must be a whole number >= 0 (got -1)",
      "aggressiveTargetRatio (0.9) must be below aggressiveRatio (0.85)"
    ])
    expect(ToolResultOffload.problems({ ...ToolResultOffload.defaults, emergencyRatio: 1.5, minExpectedRequests: 0 })).toEqual([
      "minExpectedRequests must be a whole number >= 1 (got 0)",
      "emergencyRatio must be in (0, 1] (got 1.5)"
    ])
  })

  it("keepNewestUnits 0 lets the newest answered unit go; a request for a kept unit stubs it anyway", () => {
    const s = history(4, 2_000, 50, () => 200)
    const kept = ToolResultOffload.decide(s)
    expect(kept.units).not.toContain(3)
    expect(ToolResultOffload.decide(s, { ...ToolResultOffload.defaults, keepNewestUnits: 0 }).units).toContain(3)
    const asked = ToolResultOffload.decide({ ...s, units: s.units.map((u, i) => i === 3 ? { ...u, requested: true } : u) })
    expect(asked.tier).toBe("requested")
    expect(asked.units).toEqual([...new Set([...kept.units, 3])].sort())
  })
})
