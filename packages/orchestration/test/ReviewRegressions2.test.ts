/**
 * Regression tests for review findings (second round): each the smallest input that reproduced the defect.
 *
 * A. A usage report from a provider with an unknown window could lose the turn's output (1e20 passed the sanity
 *    check, then failed storage), and a report above the default window the budget assumes was trusted.
 * B. After three no-progress `/compact`, `/compact` stayed disabled on that native thread for good, however much
 *    the thread grew.
 */
import { type CommandId, Commands } from "@baton/contracts"
import { InvariantChecks } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

const ops = Harness.ops

const usageEvents = (o: Effect.Effect.Success<typeof ops>, t: Parameters<typeof o.store.listEvents>[0]) =>
  Effect.map(o.store.listEvents(t), (events) => events.filter((e) => e.type === "usage.reported").map((e) => e.payload))

describe("A: usage reports from a provider with an unknown window", () => {
  it.effect("usedTokens 1e20 (an integer, not a safe one): untrusted, the estimate is used, the output recorded, the next turns work", () => {
    const h = Harness.make([{ name: "claude", window: null, inject: false }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("claude")
      h.script.enqueue(Harness.reply(300, { usedTokens: 1e20 }))
      const a = yield* o.send(t, "one")
      expect([a.status, a.failureReason, a.usedTokens, a.window]).toEqual(["completed", null, 307, 128_000])
      expect((yield* o.store.listItems(t)).map((i) => [i.kind, i.tokens])).toEqual([["user_message", 6], ["assistant_message", 306]])
      const [first] = yield* usageEvents(o, t)
      expect(first).toEqual({
        nativeThreadId: "nat_000001",
        usage: { usedTokens: 1e20 },
        trusted: false,
        anomaly: "usedTokens 100000000000000000000 is not a token count",
        estimateUsed: 307
      })
      // The scripted provider keeps counting from 1e20: every later report is refused the same way, never stored.
      const b = yield* o.send(t, "two")
      expect([b.status, b.turnStart?.budget.used, b.turnStart?.budget.usedSource, b.turnStart?.budget.budget]).toEqual(["completed", 307, "estimate", 16_000])
      expect((yield* usageEvents(o, t)).map((p) => p.trusted)).toEqual([false, false])
      expect(yield* o.check(t, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("777,000 used with no window known anywhere: untrusted against the 128,000 default window, the budget is not zeroed", () => {
    const h = Harness.make([{ name: "claude", window: null, inject: false }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("claude")
      h.script.enqueue(Harness.reply(300, { usedTokens: 777_000 }))
      yield* o.send(t, "one")
      const [event] = yield* usageEvents(o, t)
      expect([event?.trusted, event?.anomaly]).toEqual([false, "777000 used exceeds the default window 128000 (the model window is unknown)"])
      h.script.enqueue(Harness.reply(10, { usedTokens: 1_000 }))
      const next = yield* o.send(t, "two")
      expect([next.turnStart?.budget.used, next.turnStart?.budget.usedSource, next.turnStart?.budget.budget]).toEqual([307, "estimate", 16_000])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("the default window is the configured one, and a report that states its own window is checked against it", () => {
    const h = Harness.make([{ name: "claude", window: null, inject: false }], {
      config: { budget: { tokenCap: 16_000, reserveFloor: 16_000, reserveFraction: 0.25, defaultWindow: 50_000, minUsefulBudget: 1_024 } }
    })
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("claude")
      h.script.enqueue(Harness.reply(10, { usedTokens: 60_000 }))
      yield* o.send(t, "over the configured default")
      h.script.enqueue(Harness.reply(10, { usedTokens: 150_000, maxTokens: 200_000 }))
      yield* o.send(t, "within its own stated window")
      h.script.enqueue(Harness.reply(10, { usedTokens: 210_000, maxTokens: 200_000 }))
      yield* o.send(t, "over its own stated window")
      expect((yield* usageEvents(o, t)).map((p) => [p.trusted, p.anomaly ?? null])).toEqual([
        [false, "60000 used exceeds the default window 50000 (the model window is unknown)"],
        [true, null],
        [false, "210000 used exceeds the reported maximum 200000"]
      ])
      expect(yield* o.check(t, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("an injection acknowledgement reporting 1e20 is not stored: the delivery settles and the turn completes", () => {
    const h = Harness.make([{ name: "codex", window: null, inject: true }, { name: "claude", window: 200_000, inject: false }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue(Harness.reply(10))
      yield* o.send(t, "on codex")
      yield* o.switchTo(t, "claude")
      h.script.enqueue(Harness.reply(200))
      yield* o.send(t, "on claude")
      yield* o.switchTo(t, "codex")
      h.providers.codex!.setUsage("codex-n1", 1e20)
      h.script.enqueue(Harness.reply(10, { usedTokens: 500 }))
      const r = yield* o.send(t, "back on codex")
      expect([r.status, r.turnStart?.mode, r.turnStart?.deliveredItems, r.usedTokens]).toEqual(["completed", "injected", 2, 500])
      expect(h.providers.codex!.received.filter((x) => x.type === "inject")).toHaveLength(1)
      expect(yield* o.check(t, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it("a run whose output could not be stored is a wedge for the checker, not a provider fault (read from the code)", () => {
    expect(InvariantChecks.isFaultCode("output_not_recorded")).toBe(false)
    expect(InvariantChecks.isFaultCode("turn_start_failed")).toBe(false)
    expect(InvariantChecks.isFaultCode("provider_timeout")).toBe(true)
    expect(InvariantChecks.isFaultCode(null)).toBe(false)
  })
})

describe("B: the no-progress /compact count is about an unchanged native thread", () => {
  it.effect("three no-progress /compact, then six turns: /compact compacts again (24,039 -> 2,000)", () => {
    const h = Harness.make([{ name: "codex", window: 44_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue(Harness.reply(20))
      yield* o.send(t, "hello")
      for (let i = 0; i < 3; i++) expect([(yield* o.compact(t)).usedAfter]).toEqual([21])
      for (let i = 0; i < 6; i++) {
        h.script.enqueue(Harness.reply(4000))
        yield* o.send(t, "work " + i)
      }
      const c = yield* o.compact(t)
      expect([c.compacted, c.reason, c.usedBefore, c.usedAfter]).toEqual([true, null, 24_039, 2_000])
      expect(h.providers.codex!.received.filter((x) => x.type === "compact")).toHaveLength(4)
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("the guard still holds on an unchanged thread: the 4th /compact in a row is not sent; after one turn, three more are", () => {
    const h = Harness.make([{ name: "codex", window: 44_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue(Harness.reply(20))
      yield* o.send(t, "hello")
      const compacts = () => h.providers.codex!.received.filter((x) => x.type === "compact").length
      for (let i = 0; i < 3; i++) yield* o.compact(t)
      const fourth = yield* o.compact(t)
      expect([fourth.compacted, compacts()]).toEqual([false, 3])
      expect(fourth.reasonCode).toBe("no_progress")
      expect(fourth.reason).toBe(
        "compaction freed nothing the last 3 times (21 tokens used); not retried. The thread stays usable: send a message, or switch provider"
      )
      h.script.enqueue(Harness.reply(5))
      yield* o.send(t, "a small turn")
      for (let i = 0; i < 3; i++) expect((yield* o.compact(t)).compacted).toBe(true)
      const again = yield* o.compact(t)
      expect([again.compacted, again.usedBefore, compacts()]).toEqual([false, 29, 6])
      expect(yield* o.check(t, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("newly owed history restarts the count: after a switch away and back, /compact injects it", () => {
    const h = Harness.make([{ name: "codex", window: 44_000, inject: true }, { name: "claude", window: 200_000, inject: false }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue(Harness.reply(20))
      yield* o.send(t, "hello")
      for (let i = 0; i < 4; i++) yield* o.compact(t)
      yield* o.switchTo(t, "claude")
      h.script.enqueue(Harness.reply(200))
      yield* o.send(t, "on claude")
      yield* o.switchTo(t, "codex")
      const c = yield* o.compact(t)
      expect([c.compacted, c.deliveredItems, c.stillDeferred]).toEqual([true, 2, 0])
      expect(h.providers.codex!.received.filter((x) => x.type === "compact")).toHaveLength(4)
      expect(yield* o.check(t, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("with the receipt written by the compaction itself, a repeated /compact command id still returns the first report; the provider compacts once", () => {
    const h = Harness.make([{ name: "codex", window: 44_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue(Harness.reply(20))
      yield* o.send(t, "hello")
      const cmd = Commands.CompactThread.make({ commandId: "cmd_compact_once" as CommandId, threadId: t })
      const first = yield* o.service.compact(cmd)
      const again = yield* o.service.compact(cmd)
      expect(again).toEqual(first)
      expect(h.providers.codex!.received.filter((x) => x.type === "compact")).toHaveLength(1)
    }).pipe(Effect.provide(h.layer))
  })
})
