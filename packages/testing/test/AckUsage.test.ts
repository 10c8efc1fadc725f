/**
 * The simulator's providers answer some injection acknowledgements and read-backs without usage or with an
 * impossible one (issue 8 item 4: usage missing or above the window), from a PRNG stream of their own.
 */
import type { ProviderInstance } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { ScriptedProvider } from "@baton/providers"
import { Simulation } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

describe("acknowledgements and read-backs without trusted usage", () => {
  it.effect("the scripted provider answers each call with the usage its plan says: counted, missing or impossible", () =>
    Effect.gen(function*() {
      const plan = ["counted", "missing", "impossible", "counted"] as const
      const calls: Array<string> = []
      const provider = ScriptedProvider.make({
        instance: "small" as ProviderInstance,
        contextWindow: 44_000,
        autoCompactThreshold: null,
        injectHistory: true,
        ackUsage: ({ call, operation }) => {
          calls.push(operation)
          return plan[(call - 1) % plan.length]!
        }
      }, ScriptedProvider.makeScript(), TokenCounter.make())
      const { nativeRef } = yield* provider.startThread()
      const inject = (n: number) => provider.injectHistory!({ nativeRef, rendered: `history ${n}`, itemIds: [], deliveryIds: [`dlv_${n}`] })
      const first = yield* inject(1)
      const afterFirst = provider.usageOf(nativeRef)
      const second = yield* inject(2)
      const read = yield* provider.readThread!(nativeRef)
      const fourth = yield* inject(4)
      expect(calls).toEqual(["injectHistory", "injectHistory", "readThread", "injectHistory"])
      expect(first.usage?.usedTokens).toBe(afterFirst)
      expect(second.usage).toBeNull()
      expect(read.usage).toEqual({ usedTokens: 777_000, maxTokens: 258_000 })
      expect(read.deliveryIds).toEqual(["dlv_1", "dlv_2"])
      expect(fourth.usage?.usedTokens).toBe(provider.usageOf(nativeRef))
    }))

  it("generation gives some providers such answers when usage reports are on, none when they are off", () => {
    const seeds = Array.from({ length: 20 }, (_, i) => 1900 + i)
    const withAck = seeds.flatMap((s) => Simulation.generate(s, 10).providers.filter((p) => p.ackUsage !== undefined))
    expect(withAck.length).toBeGreaterThan(0)
    for (const p of withAck) {
      expect(p.ackUsage!.missingEvery).toBeGreaterThanOrEqual(2)
      expect(p.ackUsage!.impossibleEvery).toBeGreaterThanOrEqual(3)
    }
    const off = { ...Simulation.allFeatures, usageReports: false }
    expect(seeds.flatMap((s) => Simulation.generate(s, 10, off).providers.filter((p) => p.ackUsage !== undefined))).toEqual([])
  })
})
