/**
 * Issue 10's acceptance against the real Codex binary, in process (the orchestrator's commands; the seed case also runs
 * over the HTTP API in apps/server/test/CodexHttp.test.ts).
 *
 * The seed case: a Codex thread (window 44,000,
 * auto-compaction at 42,000) completed at 39,761 of 41,800, a switch to a scripted `claude` and back (a ~20,000-token
 * handoff owed), a run interrupted before the provider started, then "Continue": it completes on the same Codex
 * thread, its text unchanged in the request Codex sent to the loopback Responses API, the handoff deferred. `/compact`
 * delivers it once (inject, then Codex's compaction request carries it); the next turn replays nothing. The Codex
 * adapter runs `codex app-server` (the pinned `@openai/codex`) with its model provider on a loopback server.
 * Also: the round trip (one handoff record through budget-zero turns, delivered once), a lost injection
 * acknowledgement reconciled by reading the thread back (no replacement native thread), and the Codex process killed
 * mid-turn (the run fails `provider_unavailable`, the next turn resumes the same Codex thread in a new child).
 */
import type { ProviderInstance } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { InvariantChecks, ThreadRead } from "@baton/orchestration"
import { CodexAdapter, ScriptedProvider } from "@baton/providers"
import type { CodexAppServer } from "@baton/providers"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { ProviderError } from "@baton/contracts"
import type { ProviderAdapter } from "@baton/providers"
import { Effect, Fiber } from "effect"
import { answer, binary, checkFixture, codexHome, isCompaction, normalise, userTexts } from "../../providers/test/support/CodexLoopback.js"
import { loopback, type Received, type Reply } from "../../providers/test/support/Loopback.js"

/**
 * The Codex adapter on the real binary (its model a loopback Responses API whose compaction requests get a summary
 * and other requests the next of `answers`), a scripted `claude`, and the orchestrator over both (in memory).
 * `wrap` may decorate the Codex adapter (a transport fault).
 */
const setup = (wrap: (codex: CodexAdapter.CodexAdapter) => ProviderAdapter.ProviderAdapterShape = (c) => c) =>
  Effect.gen(function*() {
    const loop = yield* loopback
    const home = yield* codexHome(loop.url, { window: 44_000, autoCompact: 42_000 })
    const answers: Array<Reply> = []
    const model = (request: Received) => (isCompaction(request) ? answer("SUMMARY: the refactor so far.", 3_000, 40) : answers.shift() ?? answer("(no answer queued)"))
    for (let i = 0; i < 40; i++) loop.enqueue(model)
    const trace: Array<CodexAppServer.TraceLine> = []
    const counter = TokenCounter.make()
    const script = ScriptedProvider.makeScript()
    const claude = ScriptedProvider.make({ instance: "claude" as ProviderInstance, contextWindow: 200_000, autoCompactThreshold: null, injectHistory: false }, script, counter)
    const codex = yield* CodexAdapter.make({
      instance: "codex" as ProviderInstance,
      config: { kind: "codex", binary: binary(), codexHome: home, cwd: home, contextWindow: 44_000, autoCompactThreshold: 42_000 },
      dynamicTools: [ThreadRead.definition],
      trace: (l) => trace.push(l)
    })
    const layer = Harness.makeLayer([wrap(codex), claude], counter, ":memory:", { deferralPointer: false })
    const sent = (method: string) => trace.filter((l) => l.direction === "out" && l.line.includes(`"method":"${method}"`))
    return { loop, home, answers, trace, script, codex, layer, sent }
  })

const tricky = "Start the refactor ✓ — naïve café 🎉\r\n\tkeep   these  spaces  "

describe("issue 10 acceptance on the real Codex binary (in process)", () => {
  it.live("near-full Codex thread, owed handoff, run interrupted before start, Continue on the same thread (deferred), /compact delivers once, Next replays nothing", () =>
    Effect.scoped(Effect.gen(function*() {
      const loop = yield* loopback
      const home = yield* codexHome(loop.url, { window: 44_000, autoCompact: 42_000 })
      // The model: Codex's compaction requests get a summary, every other request the next queued answer.
      const answers: Array<ReturnType<typeof answer>> = []
      const model = (request: Received) => (isCompaction(request) ? answer("SUMMARY: the refactor so far.", 3_000, 40) : answers.shift() ?? answer("(no answer queued)"))
      for (let i = 0; i < 20; i++) loop.enqueue(model)
      const trace: Array<CodexAppServer.TraceLine> = []
      const counter = TokenCounter.make()
      const script = ScriptedProvider.makeScript()
      const claude = ScriptedProvider.make({ instance: "claude" as ProviderInstance, contextWindow: 200_000, autoCompactThreshold: null, injectHistory: false }, script, counter)
      const codex = yield* CodexAdapter.make({
        instance: "codex" as ProviderInstance,
        config: { kind: "codex", binary: binary(), codexHome: home, cwd: home, contextWindow: 44_000, autoCompactThreshold: 42_000 },
        dynamicTools: [ThreadRead.definition],
        trace: (l) => trace.push(l)
      })
      const layer = Harness.makeLayer([codex, claude], counter, ":memory:", { deferralPointer: false })

      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const threadId = yield* o.create("codex")
        // 39,700 in + 61 out: Codex reports 39,761 of 41,800 (95% of 44,000).
        answers.push(answer("Refactor started.", 39_700, 61))
        const first = yield* o.send(threadId, tricky)
        expect(first.status).toBe("completed")
        expect(first.usedTokens).toBe(39_761)
        expect(userTexts(loop.requests[0]!).at(-1)).toBe(tricky)

        yield* o.switchTo(threadId, "claude")
        for (let i = 0; i < 10; i++) {
          script.enqueue(Harness.reply(2_000))
          expect((yield* o.send(threadId, `claude step ${i}`)).status).toBe("completed")
        }
        const back = yield* o.switchTo(threadId, "codex")
        expect(back.handoffId).not.toBeNull()

        const interrupted = yield* o.interruptBeforeStart(threadId, "Please also update the docs")
        expect(interrupted.status).toBe("interrupted")
        const turnStarts = () => trace.filter((l) => l.direction === "out" && l.line.includes(`"method":"turn/start"`))
        expect(turnStarts()).toHaveLength(1)

        const requestsBefore = loop.requests.length
        answers.push(answer("Continuing.", 2_000, 20))
        const cont = yield* o.send(threadId, "Continue")
        expect(cont.status).toBe("completed")
        expect(cont.turnStart?.mode).toBe("none")
        // One turn on the same Codex thread; the prompt reached the model unchanged, with no history before it.
        expect(turnStarts()).toHaveLength(2)
        const threadIds = new Set(turnStarts().map((l) => (JSON.parse(l.line) as { params: { threadId: string } }).params.threadId))
        expect(threadIds.size).toBe(1)
        const modelRequests = loop.requests.slice(requestsBefore).filter((r) => !isCompaction(r))
        expect(modelRequests).toHaveLength(1)
        expect(userTexts(modelRequests[0]!).at(-1)).toBe("Continue")
        expect(userTexts(modelRequests[0]!).some((t) => t.includes("claude step"))).toBe(false)
        const handoffs = (yield* o.store.listHandoffs(threadId)).filter((x) => x.id === back.handoffId)
        expect(handoffs.map((x) => x.open)).toEqual([true])
        const deliveries = (yield* o.store.listDeliveriesOfThread(threadId)).filter((d) => d.handoffId === back.handoffId)
        expect(deliveries.map((d) => [d.status, d.deferCount])).toEqual([["deferred", 1]])

        // /compact: inject, then compact; the compaction request carries the handoff.
        const injectsBefore = trace.filter((l) => l.direction === "out" && l.line.includes(`"method":"thread/inject_items"`)).length
        expect(injectsBefore).toBe(0)
        const compactRequestsBefore = loop.requests.length
        const compacted = yield* o.compact(threadId)
        expect(compacted.deliveredItems).toBe(21)
        expect(compacted.omittedItems).toBe(0)
        const injects = trace.filter((l) => l.direction === "out" && l.line.includes(`"method":"thread/inject_items"`))
        expect(injects).toHaveLength(1)
        const compaction = loop.requests.slice(compactRequestsBefore).filter(isCompaction)
        expect(compaction).toHaveLength(1)
        expect(userTexts(compaction[0]!).some((t) => t.includes("claude step 9"))).toBe(true)
        const again = yield* o.compact(threadId)
        expect(again.deliveredItems).toBe(0)
        expect(trace.filter((l) => l.direction === "out" && l.line.includes(`"method":"thread/inject_items"`))).toHaveLength(1)

        // The next turn owes nothing and replays nothing.
        const nextBefore = loop.requests.length
        answers.push(answer("Next done.", 4_000, 20))
        const next = yield* o.send(threadId, "Next")
        expect(next.status).toBe("completed")
        expect(next.turnStart?.deliveredItems).toBe(0)
        const nextRequests = loop.requests.slice(nextBefore).filter((r) => !isCompaction(r))
        expect(nextRequests).toHaveLength(1)
        expect(userTexts(nextRequests[0]!).at(-1)).toBe("Next")
        expect(trace.filter((l) => l.direction === "out" && l.line.includes(`"method":"thread/inject_items"`))).toHaveLength(1)
        expect((yield* o.store.listHandoffs(threadId)).find((x) => x.id === back.handoffId)?.open).toBe(false)
        expect(yield* InvariantChecks.check(threadId)).toEqual([])
      }).pipe(Effect.provide(layer))
      const recorded = normalise(trace, home)
      expect(recorded).toBe(checkFixture("seed-case.jsonl", recorded))
    })))

  it.live("the round trip: near full, to claude and back: one handoff record through budget-zero turns (defer count 1, 2, 3), /compact delivers it once", () =>
    Effect.scoped(Effect.gen(function*() {
      const { answers, home, layer, script, sent, trace } = yield* setup()
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const threadId = yield* o.create("codex")
        answers.push(answer("Started.", 39_700, 61))
        expect((yield* o.send(threadId, "Start")).usedTokens).toBe(39_761)
        yield* o.switchTo(threadId, "claude")
        for (let i = 0; i < 5; i++) {
          script.enqueue(Harness.reply(2_000))
          yield* o.send(threadId, `claude step ${i}`)
        }
        const back = yield* o.switchTo(threadId, "codex")
        expect(back.handoffId).not.toBeNull()
        const defers: Array<number> = []
        for (const prompt of ["Review it", "Any risks?", "Ship it"]) {
          // Each answer leaves the Codex thread near full again: the handoff stays deferred.
          answers.push(answer(`On ${prompt}`, 39_700, 61))
          const r = yield* o.send(threadId, prompt)
          expect(r.status).toBe("completed")
          expect(r.turnStart?.mode).toBe("none")
          const all = yield* o.store.listHandoffs(threadId)
          const target = all.find((x) => x.id === back.handoffId)!.targetProviderThreadId
          const handoffs = all.filter((x) => x.targetProviderThreadId === target)
          expect(handoffs.map((x) => x.id)).toEqual([back.handoffId])
          const d = (yield* o.store.listDeliveriesOfThread(threadId)).filter((x) => x.handoffId === back.handoffId)
          expect(d.map((x) => x.status)).toEqual(["deferred"])
          defers.push(d[0]!.deferCount)
        }
        expect(defers).toEqual([1, 2, 3])
        expect(sent("thread/inject_items")).toHaveLength(0)
        const compacted = yield* o.compact(threadId)
        expect(compacted.deliveredItems).toBe(10)
        expect(sent("thread/inject_items")).toHaveLength(1)
        const d = (yield* o.store.listDeliveriesOfThread(threadId)).filter((x) => x.handoffId === back.handoffId)
        expect(d.map((x) => x.status)).toEqual(["injected"])
        answers.push(answer("Thanks."))
        const next = yield* o.send(threadId, "Thanks")
        expect(next.turnStart?.mode).toBe("none")
        expect(sent("thread/inject_items")).toHaveLength(1)
        expect(yield* InvariantChecks.check(threadId)).toEqual([])
      }).pipe(Effect.provide(layer))
      const recorded = normalise(trace, home)
      expect(recorded).toBe(checkFixture("acceptance-round-trip.jsonl", recorded))
    })))

  it.live("a lost injection acknowledgement is reconciled with thread/read (the rollout holds it): settled, no replacement native thread", () =>
    Effect.scoped(Effect.gen(function*() {
      let lost = 0
      const { answers, home, layer, script, sent, trace } = yield* setup((codex) => ({
        ...codex,
        // The injection reaches Codex; its acknowledgement is lost on the way back (once).
        injectHistory: (input) =>
          Effect.flatMap(codex.injectHistory!(input), (outcome) =>
            lost++ === 0
              ? Effect.fail(new ProviderError({ provider: "codex", operation: "injectHistory", reason: "the acknowledgement was lost", code: "ack_lost", retryable: true }))
              : Effect.succeed(outcome))
      }))
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const threadId = yield* o.create("claude")
        script.enqueue(Harness.reply(200))
        yield* o.send(threadId, "Plan the change")
        yield* o.switchTo(threadId, "codex")
        answers.push(answer("Implemented."))
        const r = yield* o.send(threadId, "Implement it")
        expect(r.status).toBe("completed")
        expect(r.nativeGeneration).toBe(1)
        expect(lost).toBe(1)
        expect(sent("thread/inject_items")).toHaveLength(1)
        expect(sent("thread/read").length).toBeGreaterThanOrEqual(1)
        expect(sent("thread/start")).toHaveLength(1)
        const deliveries = yield* o.store.listDeliveriesOfThread(threadId)
        expect(deliveries.map((d) => d.status)).toEqual(["injected"])
        expect((yield* o.store.listHandoffs(threadId)).map((x) => x.kind)).toEqual(["switch"])
        expect(yield* InvariantChecks.check(threadId)).toEqual([])
      }).pipe(Effect.provide(layer))
      const recorded = normalise(trace, home)
      expect(recorded).toBe(checkFixture("acceptance-lost-ack.jsonl", recorded))
    })))

  it.live("the Codex process killed mid-turn: the run ends, the thread stays usable on the same Codex thread (resumed in a new child)", () =>
    Effect.scoped(Effect.gen(function*() {
      const { answers, codex, home, layer, loop, sent, trace } = yield* setup()
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const threadId = yield* o.create("codex")
        answers.push(answer("First."))
        expect((yield* o.send(threadId, "first")).status).toBe("completed")
        answers.push({ status: 200, headers: { "content-type": "text/event-stream" }, chunks: [": waiting\n\n", ": never\n\n"], gapMillis: 120_000 })
        const before = loop.requests.length
        const fiber = yield* Effect.fork(o.send(threadId, "second"))
        while (loop.requests.length === before) yield* Effect.sleep("20 millis")
        process.kill((yield* codex.appServer.pid)!, "SIGKILL")
        const killed = yield* Fiber.join(fiber)
        expect([killed.status, killed.failureCode]).toEqual(["failed", "provider_unavailable"])
        answers.push(answer("Third."))
        const third = yield* o.send(threadId, "third")
        expect(third.status).toBe("completed")
        expect(third.nativeGeneration).toBe(1)
        expect(yield* codex.appServer.generation).toBe(2)
        expect(sent("thread/start")).toHaveLength(1)
        expect(sent("thread/resume").length).toBeGreaterThanOrEqual(1)
        const last = userTexts(loop.requests.at(-1)!)
        expect(last.at(-1)).toBe("third")
        expect(last).toContain("first")
        expect(yield* InvariantChecks.check(threadId)).toEqual([])
      }).pipe(Effect.provide(layer))
      const recorded = normalise(trace, home)
      expect(recorded).toBe(checkFixture("acceptance-kill.jsonl", recorded))
    })))
})
