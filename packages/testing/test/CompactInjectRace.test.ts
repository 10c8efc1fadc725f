/**
 * A message sent while `/compact` drains deferred history into a native thread that cannot be compacted (a model API:
 * inject, no `compactThread`), so nothing rewrites the record after the drain. The provider takes the injection, the
 * user's turn then runs on the same native thread and reports its usage, and only then does the acknowledgement's
 * bookkeeping run. Before the fix it wrote the acknowledgement's figure (190,370) over the turn's newer report
 * (198,370): the next turn start planned with 8,000 tokens the thread did not have. The same mechanism as
 * CompactRace.test (the outcome of a provider call never overwrites what a later operation wrote).
 */
import type { ProviderInstance } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { ScriptedProvider, ScriptedSummariser } from "@baton/providers"
import { Harness } from "@baton/testing"
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"

it.effect("a turn sent while /compact drains history keeps its usage report: the acknowledgement's older figure is not recorded over it", () => {
  const counter = TokenCounter.make()
  const script = ScriptedProvider.makeScript()
  let onInject: Effect.Effect<void> = Effect.void
  const make = (name: string) =>
    ScriptedProvider.make({ instance: name as ProviderInstance, contextWindow: 200_000, autoCompactThreshold: null, injectHistory: true }, script, counter)
  const scripted = make("codex")
  const claude = make("claude")
  const { compactThread: _compact, ...withoutCompact } = scripted
  const codex: ScriptedProvider.ScriptedProvider = {
    ...withoutCompact,
    injectHistory: (input) => Effect.zipLeft(scripted.injectHistory!(input), Effect.suspend(() => onInject))
  }
  const layer = Harness.makeLayer([codex, claude], counter, ":memory:", {}, "", ScriptedSummariser.make(counter))
  return Effect.gen(function*() {
    const o = yield* Harness.ops
    // Two items deferred toward codex (its native thread reported 190,100 of 200,000), as `deferredTowardCodex`.
    const t = yield* o.create("codex")
    script.enqueue(Harness.reply(10, { usedTokens: 190_000, maxTokens: 200_000 }))
    yield* o.send(t, "first on codex")
    yield* o.switchTo(t, "claude")
    script.enqueue(Harness.reply(200))
    yield* o.send(t, "on claude")
    yield* o.switchTo(t, "codex")
    script.enqueue(Harness.reply(10, { usedTokens: 190_100, maxTokens: 200_000 }))
    expect((yield* o.send(t, "back on codex")).turnStart?.deferredItems).toBe(2)
    let raced: number | null = null
    onInject = Effect.gen(function*() {
      onInject = Effect.void
      script.enqueue(Harness.reply(3_000))
      raced = (yield* o.send(t, Harness.words(5_000))).usedTokens
    }).pipe(Effect.orDie)
    const report = yield* o.compact(t)
    expect(report).toMatchObject({ compacted: false, deliveredItems: 2 })
    const [native] = yield* o.store.listNativeThreads((yield* o.store.listProviderThreads(t)).find((p) => p.providerInstance === "codex")!.id)
    expect(scripted.received.map((r) => r.type)).toEqual(["turn", "turn", "inject", "turn"])
    expect(raced).toBe(198_370)
    expect(scripted.usageOf(native!.nativeRef)).toBe(198_370)
    // The turn's report and the block on top (the order of the two is unknown to Baton): never below what it holds.
    expect(native!.usage?.usedTokens).toBe(198_640)
    expect(report.usedAfter).toBe(198_640)
  }).pipe(Effect.provide(layer))
})
