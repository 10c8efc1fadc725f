/**
 * Stale usage reports (issue 8: "usage that is missing, stale or above the window"): the simulator's providers
 * sometimes report a native thread's usage from before one of its last turns, lower than their own count, which the
 * report leaves as it is (some also hide a turn that truly filled the thread). Baton believes it has more room than
 * it does, and the provider's window rejects a request that no longer fits: the real overflows the
 * `retry_overflow_on_same_native` mutation needs to be caught (before this fault: never, in 24 seeds × 40 steps).
 */
import type { ProviderInstance } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { ProviderAdapter, ScriptedProvider } from "@baton/providers"
import { Simulation } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Either, Stream } from "effect"

const ci: Simulation.Features = Simulation.allFeatures

describe("the scripted provider's stale usage reports", () => {
  const make = (overflowSignal: "code" | "text") => {
    const script = ScriptedProvider.makeScript()
    const provider = ScriptedProvider.make({
      instance: "small" as ProviderInstance,
      contextWindow: 10_000,
      autoCompactThreshold: 9_000,
      injectHistory: true,
      requestOverhead: 1_000,
      overflowSignal
    }, script, TokenCounter.make())
    return { script, provider }
  }
  const answer = (staleUsage?: ScriptedProvider.ScriptedResponse["staleUsage"]): ScriptedProvider.ScriptedResponse => ({
    items: [ProviderAdapter.producedItem("assistant_message", "ok, done")],
    staleUsage
  })
  const turn = (provider: ScriptedProvider.ScriptedProvider, nativeRef: string, runId: string, prompt: string) =>
    Effect.map(Stream.runCollect(provider.startTurn({ nativeRef, runId, prompt, inlineHistory: null })), (events) =>
      Chunk.toReadonlyArray(events).flatMap((e) => e._tag === "usage_reported" ? [e.usage.usedTokens] : []))

  it.effect("a stale report says the count from before a recent turn's request and leaves the provider's count as it is", () =>
    Effect.gen(function*() {
      const { provider, script } = make("code")
      const { nativeRef } = yield* provider.startThread()
      script.enqueue(answer())
      const first = yield* turn(provider, nativeRef, "run_1", "hello there")
      script.enqueue(answer({ lag: 1 }))
      const second = yield* turn(provider, nativeRef, "run_2", "and again, with a few more words")
      const afterSecond = provider.usageOf(nativeRef)!
      // Lag 1: the figure before this turn's request, which is what the first turn reported.
      expect(second).toEqual(first)
      expect(afterSecond).toBeGreaterThan(first[0]!)
      script.enqueue(answer({ lag: 5 }))
      const third = yield* turn(provider, nativeRef, "run_3", "a third prompt")
      // Lag beyond the turns kept: the oldest figure, the empty thread (its system prompt).
      expect(third).toEqual([1_000])
      expect(provider.usageOf(nativeRef)!).toBeGreaterThan(afterSecond)
    }))

  it.effect("a stale report hides a thread truly filled near its compaction point: the next request is rejected as a plain-text 400", () =>
    Effect.gen(function*() {
      const { provider, script } = make("text")
      const { nativeRef } = yield* provider.startThread()
      script.enqueue(answer({ lag: 1, fillLeaving: 300 }))
      const reported = yield* turn(provider, nativeRef, "run_1", "hello there")
      expect(reported).toEqual([1_000])
      expect(provider.usageOf(nativeRef)).toBe(8_700)
      script.enqueue(answer())
      const rejected = yield* Effect.either(turn(provider, nativeRef, "run_2", "word ".repeat(1_500)))
      expect(Either.isLeft(rejected) && rejected.left.code).toBe("refused")
      expect(Either.isLeft(rejected) && rejected.left.reason).toMatch(/^HTTP 400: This model's maximum context length is 10000 tokens/)
      expect(provider.truth.at(-1)).toMatchObject({ nativeRef, operation: "startTurn", runId: "run_2", accepted: false })
      expect(provider.usageOf(nativeRef)).toBe(8_700)
    }))
})

describe("stale usage in the simulation", () => {
  it("--without stale: no stale report, every other draw of the seed unchanged", () => {
    for (const seed of [7, 9]) {
      const without = Simulation.generate(seed, 60, { ...ci, staleUsage: false })
      const withStale = Simulation.generate(seed, 60, ci)
      const staleOf = (s: Simulation.Scenario) => s.ops.filter((op) => op.kind === "send" && op.reply.usage.kind === "stale")
      expect(staleOf(without)).toEqual([])
      expect(staleOf(withStale).length).toBeGreaterThan(3)
      // A stale report replaces the drawn usage of its send and nothing else.
      expect(withStale.ops.map((op, i) => {
        const other = without.ops[i]!
        return op.kind === "send" && other.kind === "send" && op.reply.usage.kind === "stale" ? { ...op, reply: { ...op.reply, usage: other.reply.usage } } : op
      })).toEqual(without.ops)
      expect(withStale.providers).toEqual(without.providers)
    }
  })
})
