/** Behaviours other orchestrators leave open, each as the smallest scenario that shows it. */
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

const ops = Harness.ops

describe("no compaction loops", () => {
  it.effect("after three /compact that free nothing, /compact stops calling the provider, says why, and the thread stays usable", () => {
    const h = Harness.make([{ name: "codex", window: 44_000, autoCompactThreshold: 42_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(20))
      yield* o.send(threadId, "small thread")
      const codex = h.providers.codex!
      for (let i = 0; i < 3; i++) {
        const r = yield* o.compact(threadId)
        expect(r.compacted).toBe(true)
        expect(r.usedAfter).toBe(r.usedBefore)
      }
      expect(codex.received.filter((x) => x.type === "compact")).toHaveLength(3)
      const fourth = yield* o.compact(threadId)
      expect(fourth.compacted).toBe(false)
      expect(fourth.reason).toMatch(/^compaction freed nothing the last 3 times \(\d+ tokens used\); not retried/)
      expect(codex.received.filter((x) => x.type === "compact")).toHaveLength(3)
      const next = yield* o.send(threadId, "still usable?")
      expect(next.status).toBe("completed")
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("a /compact that frees something resets the count", () => {
    const h = Harness.make([{ name: "codex", window: 44_000, autoCompactThreshold: 42_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(20))
      yield* o.send(threadId, "small")
      yield* o.compact(threadId)
      yield* o.compact(threadId)
      h.script.enqueue(Harness.reply(20, { usedTokens: 30_000 }))
      yield* o.send(threadId, "now it is big")
      const freed = yield* o.compact(threadId)
      expect(freed.usedBefore).toBe(30_000)
      expect(freed.usedAfter).toBe(2_000)
      for (let i = 0; i < 3; i++) expect((yield* o.compact(threadId)).compacted).toBe(true)
      expect((yield* o.compact(threadId)).compacted).toBe(false)
    }).pipe(Effect.provide(h.layer))
  })
})

describe("usage sanity", () => {
  it.effect("an impossible report (777,000 used of a 258,000 window) is not trusted; the estimate is used and the anomaly logged", () => {
    const h = Harness.make([{ name: "codex", window: 258_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(100, { usedTokens: 777_000, maxTokens: 258_000 }))
      yield* o.send(threadId, "hello")
      const next = yield* o.send(threadId, "again")
      expect(next.turnStart?.budget.usedSource).toBe("estimate")
      expect(next.turnStart?.budget.used).toBeLessThan(1_000)
      expect(next.turnStart?.budget.budget).toBe(16_000)
      const events = (yield* o.store.listEvents(threadId)).filter((e) => e.type === "usage.reported")
      expect(events[0]!.payload).toMatchObject({ trusted: false, anomaly: "777000 used exceeds the model window 258000" })
      expect(events[1]!.payload).toMatchObject({ trusted: true })
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("a missing usage report does not keep the previous report: the estimate grows with what was sent", () => {
    const h = Harness.make([{ name: "codex", window: 258_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(100, { usedTokens: 5_000 }))
      yield* o.send(threadId, "hello")
      h.script.enqueue(Harness.reply(3_000, null))
      yield* o.send(threadId, "silent provider")
      const next = yield* o.send(threadId, "again")
      expect(next.turnStart?.budget.usedSource).toBe("estimate")
      expect(next.turnStart?.budget.used).toBeGreaterThan(8_000)
    }).pipe(Effect.provide(h.layer))
  })
})

describe("switching to a smaller window", () => {
  it.effect("1,000,000 -> 260,000 with 400,000 tokens of history: turns proceed, history is partly delivered, no request overflows", () => {
    const h = Harness.make([
      { name: "claude", window: 1_000_000, inject: true },
      { name: "codex", window: 260_000, inject: true }
    ])
    return Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("claude")
      for (let i = 0; i < 20; i++) {
        h.script.enqueue(Harness.reply(20_000))
        yield* o.send(threadId, `step ${i}`)
      }
      const owed = (yield* o.store.listItems(threadId)).reduce((n, i) => n + i.tokens, 0)
      expect(owed).toBeGreaterThan(400_000)
      yield* o.switchTo(threadId, "codex")
      const first = yield* o.send(threadId, "continue on codex")
      expect(first.status).toBe("completed")
      expect(first.turnStart?.deliveredTokens).toBeLessThanOrEqual(16_000)
      expect(first.turnStart?.omittedItems).toBeGreaterThan(0)
      for (let i = 0; i < 5; i++) {
        h.script.enqueue(Harness.reply(2_000))
        expect((yield* o.send(threadId, `codex ${i}`)).status).toBe("completed")
      }
      const codex = h.providers.codex!
      expect(codex.usageOf("codex-n1")!).toBeLessThan(260_000)
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })
})

describe("forwarding", () => {
  it.effect("history deferred toward A reaches B when the user moves on; A keeps its retry state and its own receipts", () => {
    const h = Harness.make([
      { name: "claude", window: 1_000_000, inject: true },
      { name: "codex", window: 44_000, autoCompactThreshold: 42_000, inject: true },
      { name: "gemini", window: 1_000_000, inject: false }
    ], { config: { deferralPointer: false } })
    return Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(50, { usedTokens: 39_000 }))
      yield* o.send(threadId, "codex is nearly full")
      yield* o.switchTo(threadId, "claude")
      h.script.enqueue(Harness.reply(3_000))
      yield* o.send(threadId, "claude work")
      const toCodex = yield* o.switchTo(threadId, "codex")
      const deferred = yield* o.send(threadId, "codex cannot take it")
      expect(deferred.turnStart?.deferredItems).toBe(2)
      const toGemini = yield* o.switchTo(threadId, "gemini")
      const onGemini = yield* o.send(threadId, "gemini gets everything it has not seen")
      expect(onGemini.turnStart?.mode).toBe("inline")
      // gemini receives the claude run (deferred toward codex) and both codex runs: 3 runs, 6 items.
      expect(onGemini.turnStart?.deliveredItems).toBe(6)
      const deliveries = yield* o.store.listDeliveriesOfThread(threadId)
      const codexDelivery = deliveries.filter((d) => d.handoffId === toCodex.handoffId)
      expect(codexDelivery.map((d) => [d.status, d.deferCount])).toEqual([["deferred", 1]])
      const geminiDelivery = deliveries.filter((d) => d.handoffId === toGemini.handoffId)
      expect(geminiDelivery.map((d) => d.status)).toEqual(["inline"])
      // Back to codex: its deferred record is intact and still owed, next to what gemini's runs add.
      yield* o.switchTo(threadId, "codex")
      const open = (yield* o.store.listHandoffs(threadId)).filter((x) => x.open).map((x) => x.id)
      expect(open).toContain(toCodex.handoffId)
      yield* o.compact(threadId)
      const after = (yield* o.store.listDeliveriesOfThread(threadId)).filter((d) => d.handoffId === toCodex.handoffId)
      expect(after.map((d) => [d.status, d.deferCount])).toEqual([["injected", 1]])
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })
})
