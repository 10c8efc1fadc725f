/**
 * What runs cost (issue "Real model providers", item 5): the tokens each turn was billed, priced by the instance's
 * configuration, recorded with the run's outcome, with totals per thread; on SQLite and Postgres.
 */
import type { ProviderAdapter, ScriptedProvider } from "@baton/providers"
import { RunCosts, ThreadQuery } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

const ops = Harness.ops

/** Claude Sonnet 4.5's list prices, US dollars per million tokens (input, 5-minute cache write, cache read, output). */
const sonnet = { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 }

const billed = (tokens: ProviderAdapter.TurnTokens): ScriptedProvider.ScriptedResponse => ({ ...Harness.reply(20), tokens })

describe("RunCosts.price", () => {
  it("sums tokens x price per million; no prices, no price", () => {
    const tokens = { inputTokens: 1_000, cacheWriteTokens: 20_000, cacheReadTokens: 100_000, outputTokens: 500 }
    // 1,000 x 3 + 20,000 x 3.75 + 100,000 x 0.3 + 500 x 15 = 3,000 + 75,000 + 30,000 + 7,500 = 115,500 per million
    expect(RunCosts.price(tokens, sonnet)).toBeCloseTo(0.1155, 10)
    expect(RunCosts.price(tokens, undefined)).toBeNull()
  })

  // Found by a fresh-tester review: costs showed binary float noise (0.30000000000000004).
  it("is exact to the nano-dollar, without float noise, and so are the totals", () => {
    const tenths = { input: 0.1, cacheWrite: 0, cacheRead: 0, output: 0.2 }
    // 0.1 + 0.2 per million would be 3.0000000000000004e-7.
    expect(RunCosts.price({ inputTokens: 1, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 1 }, tenths)).toBe(3e-7)
    expect(RunCosts.price({ inputTokens: 1_000_000, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 1_000_000 }, tenths)).toBe(0.3)
    const cost = (costUsd: number) => ({
      runId: "run_x", threadId: "thr_x", providerInstance: "claude", inputTokens: 1, cacheWriteTokens: 0, cacheReadTokens: 0,
      outputTokens: 0, costUsd, createdAt: undefined as never
    }) as unknown as Parameters<typeof RunCosts.total>[0][number]
    expect(RunCosts.total([cost(0.1), cost(0.2)]).costUsd).toBe(0.3)
    expect(RunCosts.total([cost(0.009975), cost(0.00285), cost(0.0018125)]).costUsd).toBe(0.0146375)
  })
})

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.effect("each run's billed tokens and price are recorded; the thread's totals add up; an unpriced instance records tokens only", () => {
    const h = Harness.make([
      { name: "claude", window: 200_000, inject: true, prices: sonnet },
      { name: "local", window: 32_000, inject: true }
    ])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("claude")
      h.script.enqueue(billed({ inputTokens: 1_000, cacheWriteTokens: 20_000, cacheReadTokens: 0, outputTokens: 500 }))
      const first = yield* o.send(t, "first")
      h.script.enqueue(billed({ inputTokens: 200, cacheWriteTokens: 1_000, cacheReadTokens: 20_000, outputTokens: 300 }))
      const second = yield* o.send(t, "second")
      yield* o.switchTo(t, "local")
      h.script.enqueue(billed({ inputTokens: 5_000, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 100 }))
      const third = yield* o.send(t, "third")
      // A scripted turn that reports no tokens records no cost.
      h.script.enqueue(Harness.reply(20))
      yield* o.send(t, "fourth")

      const costs = yield* o.store.listRunCosts(t)
      expect(costs.map((c) => [c.runId, c.providerInstance, c.inputTokens, c.cacheWriteTokens, c.cacheReadTokens, c.outputTokens])).toEqual([
        [first.runId, "claude", 1_000, 20_000, 0, 500],
        [second.runId, "claude", 200, 1_000, 20_000, 300],
        [third.runId, "local", 5_000, 0, 0, 100]
      ])
      // 3,000 + 75,000 + 0 + 7,500 = 85,500 / 1e6; 600 + 3,750 + 6,000 + 4,500 = 14,850 / 1e6
      expect(costs[0]!.costUsd).toBeCloseTo(0.0855, 10)
      expect(costs[1]!.costUsd).toBeCloseTo(0.01485, 10)
      expect(costs[2]!.costUsd).toBeNull()
      const total = RunCosts.total(costs)
      expect(total).toMatchObject({ runs: 3, inputTokens: 6_200, cacheWriteTokens: 21_000, cacheReadTokens: 20_000, outputTokens: 900 })
      expect(total.costUsd).toBeCloseTo(0.10035, 10)
      // The database's sums are the list's, and the snapshot's totals and recent runs' costs come from them.
      expect(yield* o.store.runCostSums(t)).toEqual(RunCosts.sumsOf(costs))
      const snapshot = yield* (yield* ThreadQuery.ThreadQuery).snapshot(t)
      expect(snapshot.costs.totals).toEqual(total)
      expect(snapshot.costs.recentRuns).toEqual(snapshot.recentRuns.flatMap((r) => costs.filter((c) => c.runId === r.id)))
      expect(snapshot.costs.recentRuns).toHaveLength(3)
    }).pipe(Effect.provide(h.layer))
  })

  // The snapshot's totals were the sum of every run's cost row read back one by one (a long thread read thousands of
  // rows for its header); the database now adds them. Its sums must keep the nano-dollar exactness of `total`.
  it.effect("the database's cost sums keep the totals exact to the nano-dollar (0.1 + 0.2 is 0.3) and count unpriced runs apart", () => {
    const h = Harness.make([{ name: "claude", window: 200_000, inject: true, prices: sonnet }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("claude")
      const dollars = [0.1, 0.2, null, 0.009975, 0.00285, 0.0018125]
      for (const [i, costUsd] of dollars.entries()) {
        h.script.enqueue(Harness.reply(20))
        const sent = yield* o.send(t, `run ${i}`)
        const at = (yield* o.store.listRuns(t)).at(-1)!.createdAt
        yield* o.store.recordRunCost({
          runId: sent.runId, threadId: t, providerInstance: "claude" as never, inputTokens: i + 1, cacheWriteTokens: 10 * i,
          cacheReadTokens: 100 * i, outputTokens: 1_000 * i, costUsd, createdAt: at
        })
      }
      const sums = yield* o.store.runCostSums(t)
      expect(sums).toEqual({ runs: 6, inputTokens: 21, cacheWriteTokens: 150, cacheReadTokens: 1_500, outputTokens: 15_000, priced: 5, pricedNanos: 314_637_500 })
      expect(RunCosts.totalOfSums(sums).costUsd).toBe(0.3146375)
      expect(sums).toEqual(RunCosts.sumsOf(yield* o.store.listRunCosts(t)))
      expect((yield* (yield* ThreadQuery.ThreadQuery).snapshot(t)).costs.totals.costUsd).toBe(0.3146375)
      const none = yield* o.create("claude")
      expect(yield* o.store.runCostSums(none)).toEqual({ runs: 0, inputTokens: 0, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 0, priced: 0, pricedNanos: 0 })
      expect((yield* (yield* ThreadQuery.ThreadQuery).snapshot(none)).costs.totals.costUsd).toBeNull()
    }).pipe(Effect.provide(h.layer))
  })
})
