import { describe, expect, it } from "@effect/vitest"
import { Either, FastCheck as fc } from "effect"
import * as Budget from "../src/Budget.js"
import { counter } from "./fixtures.js"

const policy = (overrides: Partial<Budget.BudgetPolicy>): Budget.BudgetPolicy =>
  Either.getOrThrow(Budget.makePolicy(overrides))

const continueTokens = counter.count("Continue")

/** 30,000 characters of ordinary Chinese prose, punctuation included. */
const cjkPrompt = "上下文预算决定了每一轮可以交付多少历史记录，超出预算的部分会被推迟到下一轮，并且始终可以通过引用读回。"
  .repeat(700)
  .slice(0, 30_000)

describe("Budget.compute acceptance", () => {
  it("unknown window, fresh thread, prompt \"Continue\": 16,000", () => {
    const budget = Budget.compute({ requestTokens: continueTokens })
    expect(budget).toEqual({
      window: 128_000,
      used: 0,
      request: 1,
      reserve: 32_000,
      budget: 16_000,
      physicalHeadroom: 127_999,
      windowSource: "default",
      usedSource: "estimate"
    })
  })

  it("window 32,000, fresh thread, prompt \"Continue\": 32,000 - 16,000 - tokens(\"Continue\")", () => {
    const budget = Budget.compute({ modelWindow: 32_000, requestTokens: continueTokens })
    expect(budget.budget).toBe(32_000 - 16_000 - continueTokens)
    expect(budget.budget).toBe(15_999)
    expect(budget.reserve).toBe(16_000)
    expect(budget.windowSource).toBe("model")
  })

  it("usage {usedTokens 23,000, maxTokens 24,000}: 0", () => {
    const budget = Budget.compute({ usage: { usedTokens: 23_000, maxTokens: 24_000 }, requestTokens: continueTokens })
    expect(budget.budget).toBe(0)
    expect(budget.window).toBe(24_000)
    expect(budget.windowSource).toBe("reported_max")
    expect(budget.usedSource).toBe("reported")
    expect(budget.physicalHeadroom).toBe(999)
  })

  it("a 30,000-character CJK prompt in a 32,000 window: 0", () => {
    expect(cjkPrompt.length).toBe(30_000)
    const request = counter.count(cjkPrompt)
    expect(request).toBeGreaterThan(16_000)
    const budget = Budget.compute({ modelWindow: 32_000, requestTokens: request })
    expect(budget.budget).toBe(0)
    expect(budget.request).toBe(request)
    expect(budget.physicalHeadroom).toBe(32_000 - request)
  })

  it("tokenCap 2,000 in a 1,000,000 window: 2,000", () => {
    const budget = Budget.compute(
      { modelWindow: 1_000_000, requestTokens: continueTokens },
      policy({ tokenCap: 2_000 })
    )
    expect(budget.budget).toBe(2_000)
    expect(budget.reserve).toBe(250_000)
  })

  it("usedTokens 581,117 and nothing else known: 0", () => {
    const budget = Budget.compute({ usage: { usedTokens: 581_117 }, requestTokens: continueTokens })
    expect(budget.budget).toBe(0)
    expect(budget.window).toBe(128_000)
    expect(budget.windowSource).toBe("default")
    expect(budget.physicalHeadroom).toBe(0)
  })

  it("window 1,000,000 with 840,960 used: 0, reserve 250,000", () => {
    const budget = Budget.compute({
      modelWindow: 1_000_000,
      usage: { usedTokens: 840_960 },
      requestTokens: continueTokens
    })
    expect(budget.budget).toBe(0)
    expect(budget.reserve).toBe(250_000)
    expect(budget.physicalHeadroom).toBe(1_000_000 - 840_960 - continueTokens)
  })
})

describe("Budget.compute inputs", () => {
  it("takes the smallest known window and names its source", () => {
    const usage = { usedTokens: 0, maxTokens: 200_000, autoCompactThreshold: 180_000 }
    expect(Budget.compute({ modelWindow: 400_000, usage, requestTokens: 0 })).toMatchObject({
      window: 180_000,
      windowSource: "auto_compact_threshold"
    })
    expect(Budget.compute({ modelWindow: 150_000, usage, requestTokens: 0 })).toMatchObject({
      window: 150_000,
      windowSource: "model"
    })
    expect(Budget.compute({ modelWindow: 200_000, usage: { usedTokens: 0, maxTokens: 200_000 }, requestTokens: 0 }))
      .toMatchObject({ window: 200_000, windowSource: "model" })
  })

  it("treats a reported window of 0 as not reported", () => {
    expect(Budget.compute({ usage: { usedTokens: 10, maxTokens: 0 }, requestTokens: 0 })).toMatchObject({
      window: 128_000,
      windowSource: "default"
    })
  })

  it("uses the estimate only without reported usage", () => {
    expect(Budget.compute({ estimatedUsedTokens: 5_000, requestTokens: 0 })).toMatchObject({
      used: 5_000,
      usedSource: "estimate"
    })
    expect(Budget.compute({ usage: null, estimatedUsedTokens: 5_000, requestTokens: 0 })).toMatchObject({
      used: 5_000,
      usedSource: "estimate"
    })
    expect(Budget.compute({ usage: { usedTokens: 70_000 }, estimatedUsedTokens: 5_000, requestTokens: 0 }))
      .toMatchObject({ used: 70_000, usedSource: "reported" })
  })

  it("computes the reserve as max(floor, ceil(window * fraction))", () => {
    expect(Budget.compute({ modelWindow: 64_001, requestTokens: 0 }).reserve).toBe(16_001)
    expect(Budget.compute({ modelWindow: 64_000, requestTokens: 0 }).reserve).toBe(16_000)
    expect(Budget.compute({ modelWindow: 8_000, requestTokens: 0 })).toMatchObject({ reserve: 16_000, budget: 0 })
  })

  it("never lets a broken count enlarge the budget", () => {
    expect(Budget.compute({ requestTokens: Number.NaN })).toMatchObject({ budget: 0, physicalHeadroom: 0 })
    expect(Budget.compute({ estimatedUsedTokens: Number.NaN, requestTokens: 0 }).budget).toBe(0)
    expect(Budget.compute({ modelWindow: 32_000, requestTokens: 10.2 }).budget).toBe(32_000 - 16_000 - 11)
  })
})

const maybe = <A>(arb: fc.Arbitrary<A>) => fc.option(arb, { nil: undefined })
const tokens = fc.integer({ min: 0, max: 2_000_000 })
const input = fc.record({
  modelWindow: maybe(fc.integer({ min: 1, max: 2_000_000 })),
  usage: fc.option(
    fc.record({ usedTokens: tokens, maxTokens: maybe(tokens), autoCompactThreshold: maybe(tokens) }, {
      requiredKeys: ["usedTokens"]
    }),
    { nil: null }
  ),
  estimatedUsedTokens: maybe(tokens),
  requestTokens: tokens
})
const anyPolicy = fc.record({
  tokenCap: fc.integer({ min: 1_024, max: 64_000 }),
  reserveFloor: fc.integer({ min: 0, max: 100_000 }),
  reserveFraction: fc.double({ min: 0, max: 0.99, noNaN: true }),
  defaultWindow: fc.integer({ min: 1, max: 2_000_000 })
}).map(policy)

describe("Budget.compute properties", () => {
  it.prop("is an integer in 0..tokenCap, within the physical headroom", [input, anyPolicy], ([i, p]) => {
    const budget = Budget.compute(i, p)
    expect(Number.isInteger(budget.budget)).toBe(true)
    expect(budget.budget).toBeGreaterThanOrEqual(0)
    expect(budget.budget).toBeLessThanOrEqual(p.tokenCap)
    expect(budget.budget).toBeLessThanOrEqual(budget.physicalHeadroom)
    if (budget.budget > 0) {
      expect(budget.used + budget.request + budget.reserve + budget.budget).toBeLessThanOrEqual(budget.window)
    }
  })

  it.prop("never grows when used tokens grow", [input, anyPolicy, tokens], ([i, p, more]) => {
    const before = Budget.compute(i, p)
    const after = Budget.compute(
      i.usage ? { ...i, usage: { ...i.usage, usedTokens: i.usage.usedTokens + more } } : {
        ...i,
        estimatedUsedTokens: (i.estimatedUsedTokens ?? 0) + more
      },
      p
    )
    expect(after.budget).toBeLessThanOrEqual(before.budget)
    expect(after.physicalHeadroom).toBeLessThanOrEqual(before.physicalHeadroom)
  })

  it.prop("never grows when the request grows", [input, anyPolicy, tokens], ([i, p, more]) => {
    const before = Budget.compute(i, p)
    const after = Budget.compute({ ...i, requestTokens: i.requestTokens + more }, p)
    expect(after.budget).toBeLessThanOrEqual(before.budget)
  })

  it.prop("never grows when a smaller window becomes known", [input, tokens], ([i, smaller]) => {
    const before = Budget.compute(i)
    const after = Budget.compute({ ...i, modelWindow: Math.min(i.modelWindow ?? before.window, smaller + 1) })
    expect(after.window).toBeLessThanOrEqual(before.window)
    expect(after.budget).toBeLessThanOrEqual(before.budget)
  })
})

describe("Budget.makePolicy", () => {
  it("applies overrides over the defaults", () => {
    expect(Budget.makePolicy({})).toEqual(Either.right(Budget.defaultPolicy))
    expect(Budget.defaultPolicy).toEqual({
      tokenCap: 16_000,
      reserveFloor: 16_000,
      reserveFraction: 0.25,
      defaultWindow: 128_000,
      minUsefulBudget: 1_024
    })
    expect(Budget.makePolicy({ tokenCap: 64_000, minUsefulBudget: undefined })).toEqual(
      Either.right({ ...Budget.defaultPolicy, tokenCap: 64_000 })
    )
  })

  it("rejects each field outside its range, naming the field and the range", () => {
    const rejected = (overrides: Partial<Budget.BudgetPolicy>) => {
      const result = Budget.makePolicy(overrides)
      if (Either.isRight(result)) throw new Error(`accepted ${JSON.stringify(overrides)}`)
      return result.left
    }
    expect(rejected({ tokenCap: 1_023 }).message).toBe(
      "Invalid budget policy: tokenCap = 1023; expected an integer in 1,024..64,000"
    )
    expect(rejected({ tokenCap: 64_001 })).toMatchObject({ _tag: "InvalidBudgetPolicy", field: "tokenCap" })
    expect(rejected({ tokenCap: 2_000.5 }).field).toBe("tokenCap")
    expect(rejected({ reserveFloor: -1 }).field).toBe("reserveFloor")
    expect(rejected({ reserveFraction: 1 }).message).toBe(
      "Invalid budget policy: reserveFraction = 1; expected a number in [0, 1)"
    )
    expect(rejected({ reserveFraction: Number.NaN }).field).toBe("reserveFraction")
    expect(rejected({ reserveFraction: -0.01 }).field).toBe("reserveFraction")
    expect(rejected({ defaultWindow: 0 }).field).toBe("defaultWindow")
    expect(rejected({ tokenCap: 2_000, minUsefulBudget: 2_001 }).message).toBe(
      "Invalid budget policy: minUsefulBudget = 2001; expected an integer in 0..tokenCap (2000)"
    )
    expect(Either.isRight(Budget.makePolicy({ tokenCap: 1_024, minUsefulBudget: 1_024 }))).toBe(true)
    expect(Either.isRight(Budget.makePolicy({ tokenCap: 64_000, reserveFraction: 0, reserveFloor: 0 }))).toBe(true)
  })
})

describe("Budget.turnStartWarning", () => {
  it("names an instance whose window leaves less than the minimum useful budget after the reserve; null otherwise", () => {
    const warn = (window: number, autoCompactThreshold: number | null = null, canInject = true) =>
      Budget.turnStartWarning({ name: "tiny", window, autoCompactThreshold, canInject })
    // The default reserve is 16,000 up to a 64,000-token window; 17,024 - 16,000 = 1,024 is the minimum useful budget.
    expect(warn(17_023)).toBe(
      "tiny: a window of 17023 tokens leaves no history budget after the 16000-token reserve; owed history is deferred at every turn and only /compact drains it"
    )
    expect(warn(17_024)).toBeNull()
    // The smaller of window and auto-compact threshold counts, as in `compute`.
    expect(warn(200_000, 16_500, false)).toBe(
      "tiny: a window of 16500 tokens leaves no history budget after the 16000-token reserve; owed history is deferred at every turn and only /compact (which cannot inject here) drains it"
    )
    // A policy without a reserve floor: the reserve is a quarter of the window.
    expect(Budget.turnStartWarning({ name: "tiny", window: 1_200, autoCompactThreshold: null, canInject: true }, policy({ reserveFloor: 0 })))
      .toContain("after the 300-token reserve")
  })
})
