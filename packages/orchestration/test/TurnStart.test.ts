import { Commands, type CommandId } from "@baton/contracts"
import { InvariantChecks } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { describe, expect, it, beforeAll } from "@effect/vitest"
import { Effect, Option } from "effect"

const ops = Harness.ops

const nearFull = (config: { deferralPointer: boolean }) =>
  Harness.make([
    { name: "codex", window: 44_000, autoCompactThreshold: 42_000, inject: true },
    { name: "claude", window: 200_000, inject: false }
  ], { config })

/** The near-full thread of the acceptance test: codex at 39,761 of 41,800, ~20,000 tokens owed to it. */
const nearFullThread = (h: Harness.Harness) =>
  Effect.gen(function*() {
    const o = yield* ops
    const threadId = yield* o.create("codex")
    h.script.enqueue(Harness.reply(50, { usedTokens: 39_761, maxTokens: 41_800 }))
    yield* o.send(threadId, "Start the refactor")
    yield* o.switchTo(threadId, "claude")
    for (let i = 0; i < 10; i++) {
      h.script.enqueue(Harness.reply(2_000))
      yield* o.send(threadId, `claude step ${i}`)
    }
    yield* o.switchTo(threadId, "codex")
    return threadId
  })

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  describe("turn start on a near-full thread", () => {
    it.effect("defers a ~20,000-token switch handoff, sends the prompt unchanged, and /compact delivers it once", () => {
      const h = nearFull({ deferralPointer: false })
      return Effect.gen(function*() {
        const o = yield* ops
        const threadId = yield* o.create("codex")
        h.script.enqueue(Harness.reply(50, { usedTokens: 39_761, maxTokens: 41_800 }))
        const first = yield* o.send(threadId, "Start the refactor")
        expect(first.status).toBe("completed")
        expect(first.usedTokens).toBe(39_761)

        yield* o.switchTo(threadId, "claude")
        for (let i = 0; i < 10; i++) {
          h.script.enqueue(Harness.reply(2_000))
          expect((yield* o.send(threadId, `claude step ${i}`)).status).toBe("completed")
        }
        const back = yield* o.switchTo(threadId, "codex")
        expect(back.handoffId).not.toBeNull()
        const handoff = (yield* o.store.getHandoff(back.handoffId as never)).pipe((x) => x._tag === "Some" ? x.value : undefined)!
        const owedItems = yield* o.store.getItems(handoff.itemIds)
        const owedTokens = owedItems.reduce((s, i) => s + i.tokens, 0)
        expect(owedTokens).toBeGreaterThan(19_000)
        expect(owedTokens).toBeLessThan(22_000)

        const interrupted = yield* o.interruptBeforeStart(threadId, "Please also update the docs")
        expect(interrupted.status).toBe("interrupted")

        const codex = h.providers.codex!
        const before = codex.received.length
        const cont = yield* o.send(threadId, "Continue")
        expect(cont.status).toBe("completed")
        expect(cont.turnStart?.budget.budget).toBe(0)
        expect(cont.turnStart?.mode).toBe("none")
        const sent = codex.received.slice(before)
        expect(sent).toEqual([{ type: "turn", nativeRef: "codex-n1", runId: cont.runId, prompt: "Continue", inlineHistory: null }])

        const handoffs = yield* o.store.listHandoffs(threadId)
        const towardCodex = handoffs.filter((x) => x.targetProviderThreadId === handoff.targetProviderThreadId)
        expect(towardCodex.map((x) => x.id)).toEqual([handoff.id])
        expect(towardCodex[0]!.open).toBe(true)
        const deliveries = (yield* o.store.listDeliveriesOfThread(threadId)).filter((d) => d.handoffId === handoff.id)
        expect(deliveries.map((d) => [d.status, d.deferCount])).toEqual([["deferred", 1]])

        const compacted = yield* o.compact(threadId)
        // 10 claude runs (prompt + answer each) plus the interrupted run's prompt, folded in by missed-run recovery.
        expect(towardCodex[0]!.itemIds).toHaveLength(21)
        expect(compacted.deliveredItems).toBe(21)
        expect(compacted.omittedItems).toBe(0)
        const injections = codex.received.filter((r) => r.type === "inject")
        expect(injections).toHaveLength(1)

        const after = codex.received.length
        const next = yield* o.send(threadId, "Next")
        expect(next.turnStart?.mode).toBe("none")
        expect(next.turnStart?.deliveredItems).toBe(0)
        expect(codex.received.slice(after)).toEqual([
          { type: "turn", nativeRef: "codex-n1", runId: next.runId, prompt: "Next", inlineHistory: null }
        ])
        expect(yield* o.check(threadId, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })
  })

  describe("pointer when the budget is zero", () => {
    it.effect("sends a short pointer beside the unchanged prompt, marks nothing delivered, and records a marker item", () => {
      const h = nearFull({ deferralPointer: true })
      return Effect.gen(function*() {
        const o = yield* ops
        const threadId = yield* nearFullThread(h)
        const codex = h.providers.codex!
        const before = codex.received.length
        const r = yield* o.send(threadId, "Continue")
        expect(r.turnStart?.budget.budget).toBe(0)
        const [turn] = codex.received.slice(before)
        expect(turn?.type === "turn" && turn.prompt).toBe("Continue")
        const pointer = turn?.type === "turn" ? turn.inlineHistory : null
        expect(pointer).toMatch(/^<deferred_history thread="thr_000001">\n20 earlier items of this conversation are not shown/)
        expect(pointer).toContain("thread_read")
        expect(h.counter.count(pointer!)).toBeLessThan(200)
        const toCodex = (yield* o.store.listHandoffs(threadId)).filter((x) => x.open)
        expect(toCodex).toHaveLength(1)
        const deliveries = (yield* o.store.listDeliveriesOfThread(threadId)).filter((d) => d.handoffId === toCodex[0]!.id)
        expect(deliveries.map((d) => [d.status, d.deliveredItemIds.length])).toEqual([["deferred", 0]])
        const markers = (yield* o.store.listItems(threadId)).filter((i) => i.kind === "handoff_marker")
        expect(markers).toHaveLength(1)
        expect(markers[0]!.text).toMatch(/^Deferred 20 earlier item\(s\) \(\d+ tokens\) owed to codex: budget 0 below the useful minimum 1024/)
        // A second deferral of the same handoff adds no second marker.
        yield* o.send(threadId, "Continue again")
        expect((yield* o.store.listItems(threadId)).filter((i) => i.kind === "handoff_marker")).toHaveLength(1)
        expect(yield* o.check(threadId, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })
  })

  describe("round trip between a 1,000,000 and a 475,000 window", () => {
    it.effect("keeps one handoff record through budget-zero turns, then /compact delivers it once", () => {
      const h = Harness.make([
        { name: "claude", window: 1_000_000, inject: true },
        { name: "codex", window: 475_000, inject: true }
      ])
      return Effect.gen(function*() {
        const o = yield* ops
        const threadId = yield* o.create("claude")
        h.script.enqueue(Harness.reply(300, { usedTokens: 840_960, maxTokens: 1_000_000 }))
        yield* o.send(threadId, "Investigate the crash")
        yield* o.switchTo(threadId, "codex")
        h.script.enqueue(Harness.reply(400, { usedTokens: 87_369, maxTokens: 475_000 }))
        const onCodex = yield* o.send(threadId, "Write the fix")
        expect(onCodex.status).toBe("completed")
        expect(onCodex.turnStart?.deliveredItems).toBe(2)
        const back = yield* o.switchTo(threadId, "claude")
        const claude = h.providers.claude!

        const defers: Array<number> = []
        for (const prompt of ["Review it", "Any risks?", "Ship it"]) {
          const before = claude.received.length
          const r = yield* o.send(threadId, prompt)
          expect(r.status).toBe("completed")
          expect(r.turnStart?.budget.reserve).toBe(250_000)
          expect(r.turnStart?.budget.budget).toBe(0)
          // The prompt goes out unchanged; beside it only the deferral pointer (no history), since the window has room.
          expect(claude.received.slice(before)).toEqual([{
            type: "turn",
            nativeRef: "claude-n1",
            runId: r.runId,
            prompt,
            inlineHistory: expect.stringMatching(/^<deferred_history thread="thr_000001">\n2 earlier items of this conversation are not shown/)
          }])
          const handoffs = (yield* o.store.listHandoffs(threadId)).filter((x) => x.kind === "switch" && x.id === back.handoffId)
          expect(handoffs).toHaveLength(1)
          const d = (yield* o.store.listDeliveriesOfThread(threadId)).filter((x) => x.handoffId === back.handoffId)
          expect(d).toHaveLength(1)
          expect(d[0]!.status).toBe("deferred")
          defers.push(d[0]!.deferCount)
        }
        expect(defers).toEqual([1, 2, 3])
        const all = yield* o.store.listHandoffs(threadId)
        expect(all.map((x) => x.kind)).toEqual(["switch", "switch"])

        const compacted = yield* o.compact(threadId)
        expect(compacted.deliveredItems).toBe(2)
        const injectedToClaude = claude.received.filter((r) => r.type === "inject")
        expect(injectedToClaude).toHaveLength(1)
        const d = (yield* o.store.listDeliveriesOfThread(threadId)).filter((x) => x.handoffId === back.handoffId)
        expect(d.map((x) => x.status)).toEqual(["injected"])

        const next = yield* o.send(threadId, "Thanks")
        expect(next.turnStart?.mode).toBe("none")
        expect(claude.received.filter((r) => r.type === "inject")).toHaveLength(1)
        expect(yield* o.check(threadId, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })
  })

  describe("missed-run recovery", () => {
    it.effect("repeated budget-zero turns after a failed run reuse one deferred record", () => {
      const h = Harness.make([
        {
          name: "claude",
          window: 1_000_000,
          inject: true,
          faults: ({ operation, call }) => (operation === "startTurn" && call === 2 ? "refuse" : null)
        }
      ])
      return Effect.gen(function*() {
        const o = yield* ops
        const threadId = yield* o.create("claude")
        h.script.enqueue(Harness.reply(100, { usedTokens: 840_960, maxTokens: 1_000_000 }))
        yield* o.send(threadId, "First")
        const refused = yield* o.send(threadId, "This one is refused")
        expect(refused.status).toBe("failed")
        for (const prompt of ["Again", "And again", "Once more"]) {
          const r = yield* o.send(threadId, prompt)
          expect(r.status).toBe("completed")
          expect(r.turnStart?.budget.budget).toBe(0)
        }
        const handoffs = yield* o.store.listHandoffs(threadId)
        expect(handoffs.map((x) => [x.kind, x.itemIds.length])).toEqual([["missed_run", 1]])
        const deliveries = yield* o.store.listDeliveriesOfThread(threadId)
        expect(deliveries.map((d) => [d.status, d.deferCount])).toEqual([["deferred", 3]])
        expect(yield* o.check(threadId, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })

    it.effect("a missed run whose recovery is also missed extends the same deferred record", () => {
      const h = Harness.make([
        {
          name: "claude",
          window: 1_000_000,
          inject: true,
          faults: ({ operation, call }) => (operation === "startTurn" && (call === 2 || call === 3) ? "refuse" : null)
        }
      ])
      return Effect.gen(function*() {
        const o = yield* ops
        const threadId = yield* o.create("claude")
        h.script.enqueue(Harness.reply(100, { usedTokens: 840_960, maxTokens: 1_000_000 }))
        yield* o.send(threadId, "First")
        expect((yield* o.send(threadId, "refused 1")).status).toBe("failed")
        expect((yield* o.send(threadId, "refused 2")).status).toBe("failed")
        expect((yield* o.send(threadId, "works")).status).toBe("completed")
        const handoffs = yield* o.store.listHandoffs(threadId)
        expect(handoffs.map((x) => [x.kind, x.sourceRunIds.length, x.itemIds.length])).toEqual([["missed_run", 2, 2]])
        expect(yield* o.check(threadId, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })
  })

  describe("lost injection acknowledgement", () => {
    it.effect("without readThread, the next turn start replaces the native thread (generation 2) and delivers once", () => {
      const h = Harness.make([
        { name: "claude", window: 200_000, inject: false },
        {
          name: "codex",
          window: 200_000,
          inject: true,
          readThread: false,
          faults: ({ operation, call }) => (operation === "injectHistory" && call === 1 ? "lose_injection_ack" : null)
        }
      ])
      return Effect.gen(function*() {
        const o = yield* ops
        const threadId = yield* o.create("claude")
        h.script.enqueue(Harness.reply(200))
        yield* o.send(threadId, "Plan the change")
        yield* o.switchTo(threadId, "codex")
        const lost = yield* o.send(threadId, "Implement it")
        expect(lost.status).toBe("failed")
        expect(lost.failureCode).toBe("injection_unconfirmed")
        expect(lost.failureReason).toContain("history injection unconfirmed")
        const pending = (yield* o.store.listDeliveriesOfThread(threadId)).filter((d) => d.status === "pending")
        expect(pending).toHaveLength(1)

        const next = yield* o.send(threadId, "Implement it, please")
        expect(next.status).toBe("completed")
        expect(next.nativeGeneration).toBe(2)
        const codex = h.providers.codex!
        const injections = codex.received.filter((r) => r.type === "inject")
        expect(injections.map((r) => r.nativeRef)).toEqual(["codex-n1", "codex-n2"])
        const deliveries = yield* o.store.listDeliveriesOfThread(threadId)
        expect(deliveries.map((d) => d.status)).toEqual(["superseded", "injected"])
        const handoffs = yield* o.store.listHandoffs(threadId)
        expect(handoffs.map((x) => x.kind)).toEqual(["switch", "replacement"])
        // The replacement carries the first run and the failed run's prompt, once.
        expect(deliveries[1]!.deliveredItemIds).toHaveLength(3)
        expect(yield* o.check(threadId, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })
  })

  describe("reconcile before replacing", () => {
    it.effect("a lost acknowledgement is read back: the delivery settles, the turn goes on, no new native thread", () => {
      const h = Harness.make([
        { name: "claude", window: 200_000, inject: false },
        {
          name: "codex",
          window: 200_000,
          inject: true,
          faults: ({ operation, call }) => (operation === "injectHistory" && call === 1 ? "lose_injection_ack" : null)
        }
      ])
      return Effect.gen(function*() {
        const o = yield* ops
        const threadId = yield* o.create("claude")
        h.script.enqueue(Harness.reply(200))
        yield* o.send(threadId, "Plan the change")
        yield* o.switchTo(threadId, "codex")
        const r = yield* o.send(threadId, "Implement it")
        expect(r.status).toBe("completed")
        expect(r.nativeGeneration).toBe(1)
        const deliveries = yield* o.store.listDeliveriesOfThread(threadId)
        expect(deliveries.map((d) => d.status)).toEqual(["injected"])
        expect(h.providers.codex!.received.filter((x) => x.type === "inject")).toHaveLength(1)
        expect((yield* o.store.listHandoffs(threadId)).map((x) => x.kind)).toEqual(["switch"])
        expect(yield* o.check(threadId, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })

    it.effect("an injection that never arrived is read back as missing and returns to deferred, then delivers once", () => {
      const h = Harness.make([
        { name: "claude", window: 200_000, inject: false },
        { name: "codex", window: 200_000, inject: true }
      ])
      return Effect.gen(function*() {
        const o = yield* ops
        const threadId = yield* o.create("claude")
        h.script.enqueue(Harness.reply(200))
        yield* o.send(threadId, "Plan the change")
        yield* o.switchTo(threadId, "codex")
        // A crash after the intent was written and before the provider call: the delivery is `pending`, the provider
        // holds nothing. Reproduce that state directly.
        const first = yield* o.send(threadId, "warm up")
        expect(first.turnStart?.mode).toBe("injected")
        const [settled] = yield* o.store.listDeliveriesOfThread(threadId)
        yield* o.store.updateDelivery({ ...settled!, status: "pending" })
        h.providers.codex!.forgetDeliveries("codex-n1")
        const r = yield* o.send(threadId, "Implement it")
        expect(r.status).toBe("completed")
        expect(r.nativeGeneration).toBe(1)
        expect(r.turnStart?.mode).toBe("injected")
        const deliveries = yield* o.store.listDeliveriesOfThread(threadId)
        expect(deliveries.map((d) => [d.status, d.deferCount])).toEqual([["injected", 0]])
        expect(h.providers.codex!.received.filter((x) => x.type === "inject")).toHaveLength(2)
        // The provider log still shows the first (forgotten) injection, so only the durable record is checked here.
        expect(yield* InvariantChecks.check(threadId)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })
    it.effect("a delivery read back as held enters the native thread's estimate: after a turn without a usage report, a prompt that no longer fits goes to a replacement (sim seed 220048)", () => {
      // codex's first turn start injected ~15,000 tokens of claude's history, then the process stopped before writing
      // the outcome: the delivery is `pending`, the native thread's record still empty (usage none, estimate 0), and
      // the provider holds the injection. The next turn start reads it back (settles it), its turn brings no usage
      // report; the third prompt would overflow what the native thread really holds. Before the fix the turn start
      // planned with the record as read before the read-back, and the injection stayed out of Baton's estimate
      // (12,000 of 27,000): the prompt went to the full native thread and the provider rejected it.
      const h = Harness.make([
        { name: "claude", window: 200_000, inject: false },
        {
          name: "codex",
          window: 44_000,
          autoCompactThreshold: 42_000,
          inject: true,
          faults: ({ operation, call }) => (operation === "startTurn" && call === 1 ? "refuse" : null)
        }
      ])
      return Effect.gen(function*() {
        const o = yield* ops
        const threadId = yield* o.create("claude")
        h.script.enqueue(Harness.reply(15_000))
        yield* o.send(threadId, "Plan the change")
        yield* o.switchTo(threadId, "codex")
        const refused = yield* o.send(threadId, "warm up")
        expect(refused.status).toBe("failed")
        expect(refused.turnStart?.mode).toBe("injected")
        const codex = h.providers.codex!
        const [settled] = yield* o.store.listDeliveriesOfThread(threadId)
        yield* o.store.updateDelivery({ ...settled!, status: "pending" })
        const pt = (yield* o.store.listProviderThreads(threadId)).find((p) => p.providerInstance === "codex")!
        const native = Option.getOrThrow(yield* o.store.getNativeThread(pt.activeNativeThreadId!))
        yield* o.store.updateNativeThread({ ...native, usage: null, estimatedTokens: 0 })

        h.script.enqueue(Harness.reply(12_000, null))
        const quiet = yield* o.send(threadId, "Implement it")
        expect(quiet.status).toBe("completed")
        expect(quiet.nativeGeneration).toBe(1)
        const after = Option.getOrThrow(yield* o.store.getNativeThread(native.id))
        expect(after.usage).toBeNull()
        // Baton's estimate covers what the provider holds (ratio 1, no overhead): the injection and both turns.
        expect(after.estimatedTokens).toBeGreaterThanOrEqual(codex.usageOf("codex-n1")! - 100)

        const big = yield* o.send(threadId, Harness.words(18_000))
        expect(big.status).toBe("completed")
        expect(big.nativeGeneration).toBe(2)
        expect(codex.truth.filter((t) => !t.accepted)).toEqual([])
        expect(yield* o.check(threadId, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })
    it.effect("a delivery read back as held with an untrusted read-back usage: the earlier usage report no longer stands, the turn start budgets with the estimate that counts it (review r24)", () => {
      // As above, but the native thread's record holds an earlier trusted report from before the injection (200
      // tokens) and the read-back's usage is not trusted (above the window). The budget takes a report over the
      // estimate: before the fix the read-back added the settled delivery to the estimate and kept the old report,
      // so the turn start planned as if the native thread held 200 tokens, not the ~15,000 it does.
      const h = Harness.make([
        { name: "claude", window: 200_000, inject: false },
        {
          name: "codex",
          window: 44_000,
          inject: true,
          enforceWindow: false,
          faults: ({ operation, call }) => (operation === "startTurn" && call === 1 ? "refuse" : null)
        }
      ])
      return Effect.gen(function*() {
        const o = yield* ops
        const threadId = yield* o.create("claude")
        h.script.enqueue(Harness.reply(15_000))
        yield* o.send(threadId, "Plan the change")
        yield* o.switchTo(threadId, "codex")
        const refused = yield* o.send(threadId, "warm up")
        expect(refused.turnStart?.mode).toBe("injected")
        const codex = h.providers.codex!
        const [settled] = yield* o.store.listDeliveriesOfThread(threadId)
        yield* o.store.updateDelivery({ ...settled!, status: "pending" })
        const pt = (yield* o.store.listProviderThreads(threadId)).find((p) => p.providerInstance === "codex")!
        const native = Option.getOrThrow(yield* o.store.getNativeThread(pt.activeNativeThreadId!))
        yield* o.store.updateNativeThread({ ...native, usage: { usedTokens: 200, maxTokens: 44_000 }, estimatedTokens: 200 })
        // The read-back reports more than the window: not trusted.
        codex.setUsage(native.nativeRef, 50_000)

        h.script.enqueue(Harness.reply(100, null))
        const next = yield* o.send(threadId, "Implement it")
        expect(next.status).toBe("completed")
        expect(next.turnStart?.budget.usedSource).toBe("estimate")
        expect(next.turnStart?.budget.used).toBeGreaterThanOrEqual(settled!.deliveredTokens)
      }).pipe(Effect.provide(h.layer))
    })
  })

  describe("an injection acknowledged without a trusted usage", () => {
    it.effect("the native thread's earlier usage report is cleared with the injection counted in the estimate: a later turn start budgets with the estimate (review r24)", () => {
      // codex reported 100-odd tokens on its first turn; claude's 15,000 are then injected into it, the acknowledgement
      // reports more than the window (not trusted), and the turn is refused (no outcome writes the usage). Before the
      // fix the injection was added to the estimate while the old report stayed, and the budget takes a report
      // over the estimate: the next turn start planned as if the native thread held 100-odd tokens.
      const h = Harness.make([
        { name: "claude", window: 200_000, inject: false },
        {
          name: "codex",
          window: 44_000,
          inject: true,
          enforceWindow: false,
          faults: ({ operation, call }) => (operation === "startTurn" && call === 2 ? "refuse" : null)
        }
      ])
      return Effect.gen(function*() {
        const o = yield* ops
        const threadId = yield* o.create("codex")
        h.script.enqueue(Harness.reply(100))
        yield* o.send(threadId, "hello")
        const pt = (yield* o.store.listProviderThreads(threadId)).find((p) => p.providerInstance === "codex")!
        const native = Option.getOrThrow(yield* o.store.getNativeThread(pt.activeNativeThreadId!))
        expect(native.usage).not.toBeNull()
        yield* o.switchTo(threadId, "claude")
        h.script.enqueue(Harness.reply(15_000))
        yield* o.send(threadId, "Plan the change")
        yield* o.switchTo(threadId, "codex")
        // The acknowledgement reports more than the window: not trusted.
        h.providers.codex!.setUsage(native.nativeRef, 50_000)
        const refused = yield* o.send(threadId, "warm up")
        expect(refused.status).toBe("failed")
        expect(refused.turnStart?.mode).toBe("injected")
        const [settled] = (yield* o.store.listDeliveriesOfThread(threadId)).filter((d) => d.status === "injected")
        expect(settled).toBeDefined()

        h.script.enqueue(Harness.reply(100, null))
        const next = yield* o.send(threadId, "Implement it")
        expect(next.status).toBe("completed")
        expect(next.turnStart?.budget.usedSource).toBe("estimate")
        expect(next.turnStart?.budget.used).toBeGreaterThanOrEqual(settled!.deliveredTokens)
      }).pipe(Effect.provide(h.layer))
    })
  })

  describe("command receipts", () => {
    it.effect("a repeated command id returns the first result and runs nothing again", () => {
      const h = Harness.make([{ name: "claude", window: 200_000, inject: false }])
      return Effect.gen(function*() {
        const o = yield* ops
        const threadId = yield* o.create("claude")
        const command = Commands.SendMessage.make({ commandId: "cmd_same" as CommandId, threadId, text: "Hello" })
        const a = yield* o.service.sendMessage(command)
        const b = yield* o.service.sendMessage(command)
        expect(b).toEqual(JSON.parse(JSON.stringify(a)))
        expect((yield* o.store.listRuns(threadId))).toHaveLength(1)
        expect(h.providers.claude!.received).toHaveLength(1)
      }).pipe(Effect.provide(h.layer))
    })
  })
})
