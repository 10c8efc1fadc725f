/**
 * The oracle's budget check (`ProviderTruthChecks.checkBudgetRecord`): a turn start's history budget against the
 * design's formula on the provider's own window, not against the budget Baton recorded. A mutation run found the gap:
 * with the reserve left out of the budget (`budget_ignores_reserve`), every delivery still fit the budget its
 * `delivery.pending` recorded, so invariant 5's check passed; only an exactly-once side effect in one seed of eight
 * named the broken build.
 */
import { Simulation } from "@baton/testing"
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"

const reply = (tokens: number) => ({ tokens, tools: [], reasoning: false, usage: { kind: "counted" as const } })
const send = (id: number, prompt: number, tokens: number): Simulation.Operation =>
  ({ kind: "send", id, prompt, reply: reply(tokens), fault: null, interruptAt: null, crash: null })

// History on a large window, then a switch to a 24,000-token window: reserve 16,000, so the design allows at most
// 8,000 tokens of history there (the cap, 16,000, does not bind).
const switched: Simulation.Scenario = {
  seed: 0,
  providers: [
    { name: "big", window: 1_000_000, autoCompactThreshold: null, inject: true, readThread: true },
    { name: "small", window: 24_000, autoCompactThreshold: null, inject: true, readThread: true }
  ],
  ops: [
    { kind: "create", id: 0, provider: "big", crash: null },
    send(1, 3_000, 3_000),
    send(2, 3_000, 3_000),
    { kind: "switch", id: 3, to: "small", crash: null },
    send(4, 20, 20)
  ]
}

it.live("a switch's history is delivered under the design's budget: no violation on this build", () =>
  Effect.gen(function*() {
    const outcome = yield* Simulation.execute(switched, { digest: false })
    expect(outcome.violations).toEqual([])
  }))

it.live("mutation budget_ignores_reserve: the oracle names the budget above the design's most", () =>
  Effect.gen(function*() {
    const outcome = yield* Simulation.execute(switched, { digest: false, mutations: new Set(["budget_ignores_reserve"]) })
    expect(outcome.violations.filter((v) => v.startsWith("budget: "))).toEqual([
      expect.stringMatching(/was planned under a budget of \d+ tokens, above the design's most for the provider's window of 24000 \(cap 16000, reserve 16000\): 8000$/)
    ])
  }))
