/**
 * A message sent while `/compact`'s provider call is in flight (issue 8, item 3: commands racing on one thread; item
 * 5: the outcome of a compaction never overwrites state written by a later operation). The provider compacts, the
 * user's turn then runs on the same native thread and reports its usage, and only then does the compaction's answer
 * come back. Before the fix Baton wrote the compaction's answer (2,000 used) over the turn's newer report (10,000),
 * so the next turn start planned as if the native thread were nearly empty. The simulator's race
 * "/compact, inside its provider call, send" found it; `ProviderTruthChecks.checkCompactionOrderRecord` is the oracle.
 */
import type { ProviderInstance } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { ProviderTruthChecks } from "@baton/orchestration"
import { ScriptedProvider, ScriptedSummariser } from "@baton/providers"
import { Harness, Simulation } from "@baton/testing"
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"

it.effect("a turn sent while the provider compacts keeps its usage report: the compaction's older answer is not recorded over it", () => {
  const counter = TokenCounter.make()
  const script = ScriptedProvider.makeScript()
  let onCompact: Effect.Effect<void> = Effect.void
  const codex = ScriptedProvider.make({
    instance: "codex" as ProviderInstance,
    contextWindow: 40_000,
    autoCompactThreshold: null,
    injectHistory: true,
    onCompact: () => Effect.suspend(() => onCompact)
  }, script, counter)
  const layer = Harness.makeLayer([codex], counter, ":memory:", {}, "", ScriptedSummariser.make(counter))
  return Effect.gen(function*() {
    const o = yield* Harness.ops
    const threadId = yield* o.create("codex")
    script.enqueue(Harness.reply(3_000))
    yield* o.send(threadId, Harness.words(2_000))
    let raced: number | null = null
    onCompact = Effect.gen(function*() {
      onCompact = Effect.void
      script.enqueue(Harness.reply(3_000))
      raced = (yield* o.send(threadId, Harness.words(5_000))).usedTokens
    }).pipe(Effect.orDie)
    const report = yield* o.compact(threadId)
    const [native] = yield* o.store.listNativeThreads((yield* o.store.listProviderThreads(threadId))[0]!.id)
    // The provider compacted to 2,000, then took the turn: it holds 10,000, as the turn reported.
    expect(codex.received.map((r) => r.type)).toEqual(["turn", "compact", "turn"])
    expect(raced).toBe(10_000)
    expect(codex.usageOf(native!.nativeRef)).toBe(10_000)
    expect(native!.usage?.usedTokens).toBe(10_000)
    expect(report).toMatchObject({ compacted: true, usedBefore: 5_000, usedAfter: 10_000 })
    const record = { nativeThreads: [native!], events: yield* o.store.listEvents(threadId) }
    expect(ProviderTruthChecks.checkCompactionOrderRecord(record, [codex.received])).toEqual([])
  }).pipe(Effect.provide(layer))
})

// The race as the simulator plays it: a first turn, then a /compact on `big` inside whose provider call the user sends.
const raced: Simulation.Scenario = {
  seed: 0,
  providers: [{ name: "big", window: 1_000_000, autoCompactThreshold: null, inject: true, readThread: true }],
  ops: [
    { kind: "create", id: 0, provider: "big", crash: null },
    { kind: "send", id: 1, prompt: 2_000, reply: { tokens: 3_000, tools: [], reasoning: false, usage: { kind: "counted" } }, fault: null, interruptAt: null, crash: null },
    {
      kind: "race",
      id: 2,
      outer: "compact",
      prompt: 5_000,
      reply: { tokens: 3_000, tools: [], reasoning: false, usage: { kind: "counted" } },
      with: "send",
      to: "big",
      keepTokens: 0
    }
  ]
}

it.live("the simulator's race: no violation on this build", () =>
  Effect.gen(function*() {
    const outcome = yield* Simulation.execute(raced, { digest: false })
    expect(outcome.trace.join("\n")).toMatch(/\/compact and, inside its provider call, send m2 .*compacted .*; send: completed/)
    expect(outcome.violations).toEqual([])
  }))

it.live("mutation compaction_overwrites_later: the oracle names the compaction recorded over the turn's newer report", () =>
  Effect.gen(function*() {
    const outcome = yield* Simulation.execute(raced, { digest: false, mutations: new Set(["compaction_overwrites_later"]) })
    expect(outcome.violations.some((v) => v.startsWith("truth: the compaction recorded at seq") && v.includes("overwrote a newer record"))).toBe(true)
  }))

// Sim seed 48304 × 80 (the race above, found on its first sweep), shrunk: a merge's 24 items deferred toward `small`,
// then a /compact that compacts first to make room, inside whose provider call the user sends a message. That turn
// delivers the deferred history; the drain then planned from what it had read as owed before its provider call and
// injected the same 24 items into the same native thread again (exactly-once: "received item ... twice"). What is owed
// is read again after the compaction.
const seed48304: Simulation.Scenario = {"seed": 48304, "providers": [{"name": "big", "window": 1000000, "autoCompactThreshold": null, "inject": true, "readThread": false, "tokenScale": 1.22, "requestOverhead": 2804, "overflowSignal": "code"}, {"name": "small", "window": 44000, "autoCompactThreshold": 42000, "inject": true, "readThread": true, "tokenScale": 1.15, "requestOverhead": 1971, "overflowSignal": "code", "ackUsage": {"missingEvery": 3, "impossibleEvery": 3}}, {"name": "plain", "window": 200000, "autoCompactThreshold": null, "inject": false, "readThread": true, "tokenScale": 1.11, "requestOverhead": 2909, "overflowSignal": "text", "modelApi": true}], "summariser": {"inputWindow": 6000, "verboseEvery": 3}, "ops": [{"kind": "create", "id": 0, "provider": "small", "crash": null}, {"kind": "send", "id": 28, "prompt": 20, "reply": {"tokens": 20, "tools": [], "reasoning": false, "usage": {"kind": "near_full", "fraction": 0.8400000000000001}}, "fault": null, "interruptAt": null, "crash": null}, {"kind": "send", "id": 32, "prompt": 20, "reply": {"tokens": 244, "tools": [], "reasoning": false, "usage": {"kind": "counted"}}, "fault": null, "interruptAt": null, "crash": null}, {"kind": "send", "id": 33, "prompt": 20, "reply": {"tokens": 286, "tools": [1615], "reasoning": true, "usage": {"kind": "counted"}}, "fault": null, "interruptAt": null, "crash": null}, {"kind": "interrupt_before_start", "id": 34, "prompt": 1150, "crash": null}, {"kind": "race", "id": 274, "outer": "send", "prompt": 372, "reply": {"tokens": 2984, "tools": [1209], "reasoning": false, "usage": {"kind": "counted"}}, "with": "compact", "to": "plain", "keepTokens": 300}, {"kind": "fork", "id": 195, "provider": null, "crash": null}, {"kind": "send", "id": 38, "prompt": 9, "reply": {"tokens": 12228, "tools": [], "reasoning": false, "usage": {"kind": "counted"}}, "fault": null, "interruptAt": null, "crash": null}, {"kind": "race", "id": 299, "outer": "send", "prompt": 2115, "reply": {"tokens": 31, "tools": [597], "reasoning": false, "usage": {"kind": "counted"}}, "with": "compact", "to": "big", "keepTokens": 2000}, {"kind": "race", "id": 300, "outer": "offload", "prompt": 20, "reply": {"tokens": 8235, "tools": [228], "reasoning": false, "usage": {"kind": "counted"}}, "with": "send", "to": "small", "keepTokens": 300}, {"kind": "race", "id": 306, "outer": "offload", "prompt": 2171, "reply": {"tokens": 161, "tools": [1793], "reasoning": false, "usage": {"kind": "counted"}}, "with": "send", "to": "big", "keepTokens": 0}, {"kind": "send", "id": 70, "prompt": 2415, "reply": {"tokens": 18, "tools": [1074, 84], "reasoning": false, "usage": {"kind": "counted"}}, "fault": null, "interruptAt": null, "crash": null}, {"kind": "merge", "id": 230, "leave": true, "behindWait": false, "crash": null}, {"kind": "send", "id": 71, "prompt": 20, "reply": {"tokens": 2092, "tools": [], "reasoning": false, "usage": {"kind": "counted"}}, "fault": null, "interruptAt": null, "crash": null}, {"kind": "race", "id": 471, "outer": "compact", "prompt": 20, "reply": {"tokens": 1988, "tools": [], "reasoning": false, "usage": {"kind": "counted"}}, "with": "send", "to": "plain", "keepTokens": 0}]}

for (const dialect of ["sqlite", "postgres"] as const) {
  it.live(`sim seed 48304, shrunk (${dialect}): the drain after the first compaction does not deliver again what the raced turn delivered`, () =>
    Effect.gen(function*() {
      const outcome = yield* Simulation.execute(seed48304, { digest: false, dialect })
      expect(outcome.trace.at(-1)).toMatch(/\/compact and, inside its provider call, send m471 .* => {2}compacted .*; send: completed/)
      expect(outcome.violations).toEqual([])
    }), { timeout: 120_000 })
}

// The other commands a user may issue while /compact's provider call is in flight (b48sim: forks and interrupts never
// raced /compact in the simulator): a fork onto another provider (the user stays on the parent; the fork is a thread
// of its own, checked after every step like every other), and a message sent then interrupted before it starts (its
// prompt owed to the compacted native thread as a missed run, which the next turn delivers).
const forkAndInterrupt: Simulation.Scenario = {
  seed: 0,
  providers: [
    { name: "big", window: 1_000_000, autoCompactThreshold: null, inject: true, readThread: true },
    { name: "small", window: 44_000, autoCompactThreshold: 42_000, inject: true, readThread: true }
  ],
  ops: [
    { kind: "create", id: 0, provider: "big", crash: null },
    { kind: "send", id: 1, prompt: 2_000, reply: { tokens: 3_000, tools: [], reasoning: false, usage: { kind: "counted" } }, fault: null, interruptAt: null, crash: null },
    { kind: "race", id: 2, outer: "compact", prompt: 20, reply: { tokens: 20, tools: [], reasoning: false, usage: { kind: "counted" } }, with: "fork", to: "small", keepTokens: 0 },
    { kind: "race", id: 3, outer: "compact", prompt: 500, reply: { tokens: 20, tools: [], reasoning: false, usage: { kind: "counted" } }, with: "interrupt", to: "big", keepTokens: 0 },
    { kind: "send", id: 4, prompt: 20, reply: { tokens: 20, tools: [], reasoning: false, usage: { kind: "counted" } }, fault: null, interruptAt: null, crash: null }
  ]
}

it.live("a fork, and a message interrupted before it starts, inside /compact's provider call: both land, no violation", () =>
  Effect.gen(function*() {
    const outcome = yield* Simulation.execute(forkAndInterrupt, { digest: false })
    expect(outcome.violations).toEqual([])
    const [fork, interrupt, next] = outcome.trace.slice(2).map((line) => line.split("  =>  ")[1]!)
    expect(outcome.trace[2]).toContain("/compact and, inside its provider call, fork onto small")
    expect(fork).toMatch(/^compacted \d+ -> \d+; fork: forked at run 1: \d+ items -> thr_/)
    expect(outcome.trace[3]).toContain("/compact and, inside its provider call, send m3 (500 tok) and interrupt it before it starts")
    expect(interrupt).toMatch(/^(compacted \d+ -> \d+|not compacted: .*); interrupt: interrupted before_provider$/)
    expect(next).toMatch(/^completed; budget \d+, \w+, delivered [1-9]/)
  }), { timeout: 120_000 })
