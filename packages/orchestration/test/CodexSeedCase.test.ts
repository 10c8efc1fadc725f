/**
 * The seed case against the real Codex binary (issue 10's acceptance, in process): a Codex thread (window 44,000,
 * auto-compaction at 42,000) completed at 39,761 of 41,800, a switch to a scripted `claude` and back (a ~20,000-token
 * handoff owed), a run interrupted before the provider started, then "Continue": it completes on the same Codex
 * thread, its text unchanged in the request Codex sent to the loopback Responses API, the handoff deferred. `/compact`
 * delivers it once (inject, then Codex's compaction request carries it); the next turn replays nothing. The Codex
 * adapter runs `codex app-server` (the pinned `@openai/codex`) with its model provider on a loopback server.
 */
import type { ProviderInstance } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { InvariantChecks, ThreadRead } from "@baton/orchestration"
import { CodexAdapter, ScriptedProvider } from "@baton/providers"
import type { CodexAppServer } from "@baton/providers"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { answer, binary, checkFixture, codexHome, isCompaction, normalise, userTexts } from "../../providers/test/support/CodexLoopback.js"
import { loopback, type Received } from "../../providers/test/support/Loopback.js"

const tricky = "Start the refactor ✓ — naïve café 🎉\r\n\tkeep   these  spaces  "

describe("seed case on the real Codex binary", () => {
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
})
