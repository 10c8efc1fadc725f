/**
 * Forks of Codex threads on the real binary, in process (CodexAcceptance's setup: `codex app-server` of the pinned
 * `@openai/codex`, its model a loopback Responses API, a scripted `claude`, the orchestrator in memory).
 *
 * A fork at the parent's latest run, whose Codex thread holds exactly that history, is a native fork: Codex's
 * `thread/fork` copies the parent's Codex thread, the fork's provider thread starts on the copy, no handoff is owed,
 * and the fork's first turn replays nothing while the model sees the parent's conversation natively. Where the copy
 * would not be exact (an earlier fork point, history still owed to the parent's Codex thread) the fork falls back to
 * its `fork` handoff, delivered at its first turn start. The invariants hold on both threads throughout.
 */
import type { ProviderInstance } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { InvariantChecks, ThreadRead } from "@baton/orchestration"
import { CodexAdapter, ScriptedProvider } from "@baton/providers"
import type { CodexAppServer, ProviderAdapter } from "@baton/providers"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { answer, binary, bodyOf, codexHome, isCompaction } from "../../providers/test/support/CodexLoopback.js"
import { loopback, type Received, type Reply } from "../../providers/test/support/Loopback.js"

/** `wrap` may decorate the Codex adapter (an action while `thread/fork` is in flight). */
const setupWith = (wrap: (codex: CodexAdapter.CodexAdapter) => ProviderAdapter.ProviderAdapterShape) => Effect.gen(function*() {
  const loop = yield* loopback
  const home = yield* codexHome(loop.url, { window: 44_000, autoCompact: 42_000 })
  const answers: Array<Reply> = []
  const model = (request: Received) => (isCompaction(request) ? answer("SUMMARY.", 3_000, 40) : answers.shift() ?? answer("(no answer queued)"))
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
  return { loop, answers, script, layer, sent }
})
const setup = setupWith((codex) => codex)

/** The conversation of a request after Codex's own preamble: `role: text` per message (parts joined by `|`). */
const conversation = (request: Received) =>
  bodyOf(request).input.flatMap((i) => {
    if (i.type !== "message" || i.role === "developer") return []
    const text = (i.content as ReadonlyArray<{ readonly text?: string }>).map((c) => c.text ?? "").join("|")
    return text.startsWith("<environment_context>") || text.startsWith("# AGENTS.md") ? [] : [`${String(i.role)}: ${text}`]
  })

describe("forks of Codex threads (real binary, in process)", () => {
  it.live("at the latest run: a native fork (thread/fork); the fork's first turn replays nothing and the model sees the parent's conversation natively; the parent is unchanged", () =>
    Effect.scoped(Effect.gen(function*() {
      const { answers, layer, loop, script, sent } = yield* setup
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const parent = yield* o.create("codex")
        answers.push(answer("Plan: rename the module.", 2_000, 20), answer("Renamed.", 2_100, 20))
        expect((yield* o.send(parent, "Plan the rename")).status).toBe("completed")
        expect((yield* o.send(parent, "Do it")).status).toBe("completed")
        const forked = yield* o.fork(parent)
        expect(forked.atRunSeq).toBe(2)
        expect(forked.handoffId).toBeNull()
        expect(forked.nativeThreadId).toBeDefined()
        expect(forked.itemCount).toBe(4)
        expect(sent("thread/fork")).toHaveLength(1)
        // The copy starts with what Baton knew of the parent's Codex thread: its last report (2,100 in + 20 out).
        const forkNative = (yield* o.store.getNativeThread(forked.nativeThreadId!)).pipe(Option.getOrThrow)
        expect(forkNative.usage?.usedTokens).toBe(2_120)
        const events = (yield* o.store.listEvents(forked.threadId)).map((e) => e.type)
        expect(events).toContain("native_thread.started")
        expect(events).not.toContain("handoff.created")

        const before = loop.requests.length
        answers.push(answer("On the fork.", 2_200, 20))
        const first = yield* o.send(forked.threadId, "Now try the other name")
        expect(first.status).toBe("completed")
        expect(first.turnStart?.mode).toBe("none")
        expect(first.turnStart?.deliveredItems).toBe(0)
        expect(first.nativeGeneration).toBe(1)
        // No new Codex thread, no injection: the forked Codex thread carries the parent's turns as its own history.
        expect(sent("thread/start")).toHaveLength(1)
        expect(sent("thread/inject_items")).toHaveLength(0)
        const onFork = loop.requests.slice(before)
        expect(onFork).toHaveLength(1)
        expect(conversation(onFork[0]!)).toEqual([
          "user: Plan the rename", "assistant: Plan: rename the module.", "user: Do it", "assistant: Renamed.", "user: Now try the other name"
        ])
        // The usage the fork's turn reported is its own (Codex's report for the forked thread).
        expect(first.usedTokens).toBe(2_220)

        answers.push(answer("Parent goes on.", 2_300, 20))
        expect((yield* o.send(parent, "Carry on")).status).toBe("completed")
        expect(conversation(loop.requests.at(-1)!)).toEqual([
          "user: Plan the rename", "assistant: Plan: rename the module.", "user: Do it", "assistant: Renamed.", "user: Carry on"
        ])

        // The copies stay ordinary history of the fork: a switch to claude owes them (and the fork's own run).
        const toClaude = yield* o.switchTo(forked.threadId, "claude")
        expect(toClaude.handoffId).not.toBeNull()
        const handoff = (yield* o.store.listHandoffs(forked.threadId)).find((h) => h.id === toClaude.handoffId)!
        const owed = yield* o.store.getItems(handoff.itemIds)
        expect(owed.map((i) => i.text)).toEqual(["Plan the rename", "Plan: rename the module.", "Do it", "Renamed.", "Now try the other name", "On the fork."])
        script.enqueue(Harness.reply(100))
        expect((yield* o.send(forked.threadId, "Review on claude")).status).toBe("completed")
        expect(yield* InvariantChecks.check(parent)).toEqual([])
        expect(yield* InvariantChecks.check(forked.threadId)).toEqual([])
      }).pipe(Effect.provide(layer))
    })))

  it.live("the parent changed while Codex copied it (a run completed meanwhile): the copy is left unused and the fork takes its handoff", () =>
    Effect.scoped(Effect.gen(function*() {
      let meanwhile: Effect.Effect<void> = Effect.void
      const { answers, layer, loop, sent } = yield* setupWith((codex) => ({
        ...codex,
        forkThread: (nativeRef) => Effect.tap(codex.forkThread!(nativeRef), () => meanwhile)
      }))
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const parent = yield* o.create("codex")
        answers.push(answer("Plan: rename the module.", 2_000, 20))
        yield* o.send(parent, "Plan the rename")
        answers.push(answer("Meanwhile done.", 2_100, 20))
        meanwhile = Effect.asVoid(Effect.orDie(o.send(parent, "Meanwhile")))
        const forked = yield* o.fork(parent)
        expect(sent("thread/fork")).toHaveLength(1)
        expect([forked.atRunSeq, forked.handoffId === null, forked.nativeThreadId]).toEqual([2, false, undefined])
        const before = loop.requests.length
        answers.push(answer("On the fork.", 2_200, 20))
        const first = yield* o.send(forked.threadId, "Go on")
        expect(first.turnStart?.mode).toBe("injected")
        expect(first.turnStart?.deliveredItems).toBe(4)
        expect(sent("thread/start")).toHaveLength(2)
        // The fork's Codex thread is a new one: the parent's turns come as the injected handoff, once.
        const texts = conversation(loop.requests.slice(before)[0]!)
        expect(texts.filter((t) => t.includes("Meanwhile done."))).toHaveLength(1)
        expect(texts.at(-1)).toBe("user: Go on")
        expect(yield* InvariantChecks.check(forked.threadId)).toEqual([])
        expect(yield* InvariantChecks.check(parent)).toEqual([])
      }).pipe(Effect.provide(layer))
    })))

  it.live("at an earlier run: no thread/fork; the fork handoff is delivered at the fork's first turn on a new Codex thread", () =>
    Effect.scoped(Effect.gen(function*() {
      const { answers, layer, loop, sent } = yield* setup
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const parent = yield* o.create("codex")
        answers.push(answer("Plan: rename the module.", 2_000, 20), answer("Renamed.", 2_100, 20))
        yield* o.send(parent, "Plan the rename")
        yield* o.send(parent, "Do it")
        const forked = yield* o.fork(parent, { atRunSeq: 1 })
        expect(forked.handoffId).not.toBeNull()
        expect(forked.nativeThreadId).toBeUndefined()
        expect(sent("thread/fork")).toHaveLength(0)
        const before = loop.requests.length
        answers.push(answer("On the fork.", 2_200, 20))
        const first = yield* o.send(forked.threadId, "Try another plan")
        expect(first.status).toBe("completed")
        expect(first.turnStart?.mode).toBe("injected")
        expect(first.turnStart?.deliveredItems).toBe(2)
        expect(sent("thread/start")).toHaveLength(2)
        expect(sent("thread/inject_items")).toHaveLength(1)
        const texts = conversation(loop.requests.slice(before)[0]!)
        // Run 1 arrives as rendered history (an injected message), run 2 not at all.
        expect(texts.some((t) => t.includes("Plan the rename") && t.startsWith("user: ") && t.includes("baton-deliveries"))).toBe(true)
        expect(texts.some((t) => t.includes("Do it"))).toBe(false)
        expect(texts.at(-1)).toBe("user: Try another plan")
        expect(yield* InvariantChecks.check(forked.threadId)).toEqual([])
      }).pipe(Effect.provide(layer))
    })))

  it.live("history owed to the parent's Codex thread (a deferred switch handoff): the fork falls back to its handoff; history delivered whole counts as held", () =>
    Effect.scoped(Effect.gen(function*() {
      const { answers, layer, script, sent } = yield* setup
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        // Delivered whole: claude's run reaches the Codex thread by injection, then a native fork holds it.
        const delivered = yield* o.create("claude")
        script.enqueue(Harness.reply(200))
        yield* o.send(delivered, "Plan on claude")
        yield* o.switchTo(delivered, "codex")
        answers.push(answer("Implemented.", 2_000, 20))
        const implemented = yield* o.send(delivered, "Implement it")
        expect(implemented.turnStart?.mode).toBe("injected")
        const native = yield* o.fork(delivered)
        expect([native.handoffId, native.nativeThreadId === undefined]).toEqual([null, false])
        expect(sent("thread/fork")).toHaveLength(1)
        expect(yield* InvariantChecks.check(native.threadId)).toEqual([])

        // Still owed: the Codex thread is near full, so the switch handoff stays deferred: no native fork.
        const owing = yield* o.create("codex")
        answers.push(answer("Started.", 39_700, 61))
        yield* o.send(owing, "Start")
        yield* o.switchTo(owing, "claude")
        script.enqueue(Harness.reply(2_000))
        yield* o.send(owing, "claude step")
        yield* o.switchTo(owing, "codex")
        answers.push(answer("Continuing.", 39_800, 61))
        const cont = yield* o.send(owing, "Continue")
        expect(cont.turnStart?.mode).toBe("none")
        const fallback = yield* o.fork(owing)
        expect(fallback.handoffId).not.toBeNull()
        expect(fallback.nativeThreadId).toBeUndefined()
        expect(sent("thread/fork")).toHaveLength(1)
        expect(yield* InvariantChecks.check(fallback.threadId)).toEqual([])
        expect(yield* InvariantChecks.check(owing)).toEqual([])
      }).pipe(Effect.provide(layer))
    })))
})
