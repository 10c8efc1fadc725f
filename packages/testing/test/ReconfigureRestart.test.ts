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

// Sim seed 57206 × 200 (found with reconfiguring restarts on), shrunk: `small` comes back with a 32,000-token window;
// a `/compact` of its native thread compacts first (the deferred history does not fit), and inside that provider call
// a send finds the native thread full by its last report and starts a replacement, whose handoff owes everything. The
// compaction's drain then injected that history into the replaced native thread, which held most of it already
// (items delivered twice, items it had seen natively delivered as history). The drain now injects nothing into a
// native thread that is no longer active.
const seed57206: Simulation.Scenario = {
  "seed": 57206,
  "providers": [
    {
      "name": "big",
      "window": 1000000,
      "autoCompactThreshold": null,
      "inject": true,
      "readThread": true,
      "tokenScale": 1.11,
      "requestOverhead": 1539,
      "overflowSignal": "code"
    },
    {
      "name": "small",
      "window": 64000,
      "autoCompactThreshold": 60000,
      "inject": true,
      "readThread": true,
      "tokenScale": 1.23,
      "requestOverhead": 2645,
      "overflowSignal": "code",
      "ackUsage": {
        "missingEvery": 3,
        "impossibleEvery": 3
      }
    },
    {
      "name": "plain",
      "window": 200000,
      "autoCompactThreshold": null,
      "inject": false,
      "readThread": true,
      "tokenScale": 1.17,
      "requestOverhead": 730,
      "overflowSignal": "text",
      "modelApi": true
    }
  ],
  "summariser": {
    "inputWindow": 6000,
    "verboseEvery": 4
  },
  "ops": [
    {
      "kind": "create",
      "id": 0,
      "provider": "small",
      "crash": null
    },
    {
      "kind": "switch",
      "id": 81,
      "to": "plain",
      "crash": null
    },
    {
      "kind": "send",
      "id": 110,
      "prompt": 20,
      "reply": {
        "tokens": 20,
        "tools": [],
        "reasoning": false,
        "usage": {
          "kind": "counted"
        }
      },
      "fault": null,
      "interruptAt": null,
      "crash": null
    },
    {
      "kind": "switch",
      "id": 113,
      "to": "small",
      "crash": null
    },
    {
      "kind": "restart",
      "id": 1315,
      "reconfigure": {
        "provider": "small",
        "model": "scripted-small",
        "window": 32000,
        "autoCompactThreshold": 29773
      }
    },
    {
      "kind": "send",
      "id": 123,
      "prompt": 12925,
      "reply": {
        "tokens": 20,
        "tools": [],
        "reasoning": false,
        "usage": {
          "kind": "counted"
        }
      },
      "fault": null,
      "interruptAt": null,
      "crash": null
    },
    {
      "kind": "switch",
      "id": 148,
      "to": "plain",
      "crash": null
    },
    {
      "kind": "race",
      "id": 751,
      "outer": "send",
      "prompt": 7673,
      "reply": {
        "tokens": 1405,
        "tools": [
          1439
        ],
        "reasoning": false,
        "usage": {
          "kind": "counted"
        }
      },
      "with": "compact",
      "to": "small",
      "keepTokens": 2000
    },
    {
      "kind": "switch",
      "id": 154,
      "to": "small",
      "crash": null
    },
    {
      "kind": "race",
      "id": 1154,
      "outer": "compact",
      "prompt": 13374,
      "reply": {
        "tokens": 67,
        "tools": [],
        "reasoning": false,
        "usage": {
          "kind": "counted"
        }
      },
      "with": "send",
      "to": "small",
      "keepTokens": 0
    }
  ]
}

describe("sim seed 57206: /compact's drain after a send replaced the native thread during the compaction", () => {
  for (const dialect of ["sqlite", "postgres"] as const) {
    it.live(`${dialect}: nothing is injected into the replaced native thread; no item reaches it twice`, () =>
      Effect.gen(function*() {
        const outcome = yield* Simulation.execute(seed57206, { digest: false, dialect })
        expect(outcome.violations).toEqual([])
        expect(outcome.trace.at(-1)).toMatch(/send: completed; gen 2/)
      }), { timeout: 60_000 })
  }
})
