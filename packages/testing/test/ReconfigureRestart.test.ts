/**
 * A provider instance whose model or window changes between restarts (issue 8 item 4). The simulator's providers
 * survived every restart with the configuration they started with, so it never played the case; its reconfiguring
 * restarts (`Features.reconfigures`) do: the process comes back with one instance advertising another model, window
 * or threshold, which it enforces from then on, its native threads kept. Baton must bring the lane up to the new
 * configuration at the next turn start (`provider_thread.reconfigured`) and plan with the window the provider now
 * enforces. Mutation `ignore_reconfiguration` (the lane keeps its old window) shows the oracle catching the broken
 * build.
 */
import { Simulation } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

const send = (id: number, prompt: number): Simulation.Operation => ({
  kind: "send",
  id,
  prompt,
  reply: { tokens: 50, tools: [], reasoning: false, usage: { kind: "counted" } },
  fault: null,
  interruptAt: null,
  crash: null
})

// `big` holds about 86,000 tokens when the process comes back with it reconfigured to a 64,000-token model.
const shrunk: Simulation.Scenario = {
  seed: 0,
  providers: [{
    name: "big",
    window: 1_000_000,
    autoCompactThreshold: null,
    inject: true,
    readThread: true,
    tokenScale: 1.1,
    requestOverhead: 1_000,
    overflowSignal: "code"
  }],
  ops: [
    { kind: "create", id: 0, provider: "big", crash: null },
    send(1, 18_000),
    send(2, 18_000),
    send(3, 18_000),
    send(4, 18_000),
    { kind: "restart", id: 5, reconfigure: { provider: "big", model: "scripted-big-mini", window: 64_000, autoCompactThreshold: null } },
    send(6, 100)
  ]
}

describe("a provider reconfigured between restarts", () => {
  for (const dialect of ["sqlite", "postgres"] as const) {
    it.live(`${dialect}: the next turn plans with the new window: the full native thread is replaced, nothing is rejected`, () =>
      Effect.gen(function*() {
        const outcome = yield* Simulation.execute(shrunk, { digest: false, dialect })
        expect(outcome.violations).toEqual([])
        expect(outcome.stats.overflowsRejected).toBe(0)
        expect(outcome.trace.at(-1)).toMatch(/send m6 .*=> {2}completed; .*gen 2, .*the provider reported 86416 of its 64000-token window used/)
      }), { timeout: 60_000 })
  }

  it.live("mutation ignore_reconfiguration: the lane keeps the old window, the turn goes to the full native thread, and the oracle names it", () =>
    Effect.gen(function*() {
      const outcome = yield* Simulation.execute(shrunk, { digest: false, mutations: new Set(["ignore_reconfiguration"]) })
      expect(outcome.violations).toEqual([
        "truth: run run_r2.000002 was sent to big-n1 although Baton knew it would not fit: last known usage 86416 + request 116 x1.100 = 86544 > window 64000 (the provider counted 86544)"
      ])
    }), { timeout: 60_000 })

  it("the generator plays reconfiguring restarts (about one operation in fifty) from a stream of their own", () => {
    let reconfigured = 0
    let operations = 0
    for (let seed = 57_000; seed < 57_020; seed++) {
      const scenario = Simulation.generate(seed, 200)
      operations += scenario.ops.length
      const restarts = scenario.ops.filter((op) => op.kind === "restart" && op.reconfigure !== undefined)
      reconfigured += restarts.length
      // Without the feature the seed is the same but for them.
      const without = Simulation.generate(seed, 200, { ...Simulation.allFeatures, reconfigures: false })
      expect(without.ops).toEqual(scenario.ops.filter((op) => !(op.kind === "restart" && op.reconfigure !== undefined)))
    }
    expect(reconfigured).toBeGreaterThan(operations / 200)
    expect(reconfigured).toBeLessThan(operations / 20)
  })
})
