/**
 * The oracle's check that no impossible usage report is trusted (`ProviderTruthChecks.checkTrustedUsageRecord`). A
 * mutation run found the gap: with UsageSanity's window checks removed, impossible reports (777,000 used of 258,000)
 * were trusted in 8 seeds × 80 steps and nothing was named.
 */
import type { NativeThread, ThreadEvent } from "@baton/contracts"
import { ProviderTruthChecks } from "@baton/orchestration"
import type { ScriptedProvider } from "@baton/providers"
import { Simulation } from "@baton/testing"
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"

const reply = (usage: Simulation.UsageReport) => ({ tokens: 30, tools: [], reasoning: false, usage })
const send = (id: number, usage: Simulation.UsageReport): Simulation.Operation =>
  ({ kind: "send", id, prompt: 30, reply: reply(usage), fault: null, interruptAt: null, crash: null })

// Turns on a 1,000,000-token window that report 777,000 used of 258,000 (above the maximum they state).
const impossible: Simulation.Scenario = {
  seed: 0,
  providers: [{ name: "big", window: 1_000_000, autoCompactThreshold: null, inject: true, readThread: true }],
  ops: [{ kind: "create", id: 0, provider: "big", crash: null }, send(1, { kind: "impossible" }), send(2, { kind: "counted" })]
}

it.live("impossible reports are not trusted: no violation on this build", () =>
  Effect.gen(function*() {
    const outcome = yield* Simulation.execute(impossible, { digest: false })
    expect(outcome.violations).toEqual([])
  }))

it("names a trusted report above the provider's window or above the maximum it states, and no other", () => {
  const native = { id: "nat_1", nativeRef: "big-n1" } as NativeThread
  const truth: ScriptedProvider.TruthRecord = { nativeRef: "big-n1", operation: "startTurn", runId: "run_1", tokens: 10, addedBatonTokens: 10, window: 200_000, accepted: true }
  const report = (seq: number, usedTokens: number, maxTokens: number | undefined, trusted: boolean) =>
    ({ seq, type: "usage.reported", payload: { nativeThreadId: "nat_1", usage: { usedTokens, ...(maxTokens === undefined ? {} : { maxTokens }) }, trusted } }) as unknown as ThreadEvent
  const events = [
    report(1, 150_000, 200_000, true),
    report(2, 777_000, 258_000, false),
    report(3, 250_000, undefined, true),
    report(4, 120_000, 100_000, true)
  ]
  expect(ProviderTruthChecks.checkTrustedUsageRecord({ nativeThreads: [native], events }, [[truth]])).toEqual([
    "truth: a usage report of 250000 tokens on big-n1 was trusted (seq 3) although it exceeds the provider's window of 200000",
    "truth: a usage report of 120000 tokens on big-n1 was trusted (seq 4) although it exceeds the maximum it states, 100000"
  ])
})
