/**
 * Interrupts during a provider turn, interrupts the provider never answers, turn timeouts and context overflows
 * (Baton issue 3): the thread stays usable, the record stays well-formed, the next request carries every tool call
 * with its answer, and no run fails because history does not fit.
 */
import { Commands, type CommandId, type RunId, type ThreadId } from "@baton/contracts"
import { InvariantChecks } from "@baton/orchestration"
import type { ScriptedProvider } from "@baton/providers"
import { Harness } from "@baton/testing"
import { describe, expect, it, beforeAll } from "@effect/vitest"
import { type Duration, Effect, Fiber, TestClock } from "effect"

const ops = Harness.ops

const produced = Harness.produced

/** "Let me run the tests." + `bash` call `call_1` + its result + a closing message. */
const toolTurn: ScriptedProvider.ScriptedResponse = {
  items: [
    produced("assistant_message", "Let me run the tests.", { messageId: "m1" }),
    produced("tool_call", "{\"command\":\"pnpm test\"}", { toolCallId: "call_1", toolName: "bash", messageId: "m1", toolCallState: "answered" }),
    produced("tool_result", "3 passed", { toolCallId: "call_1", toolName: "bash" }),
    produced("assistant_message", "All tests pass.", { messageId: "m2" })
  ]
}

let n = 0
const interruptCmd = (threadId: ThreadId, runId: RunId) =>
  Commands.InterruptRun.make({ commandId: `cmd_int_${++n}` as CommandId, threadId, runId })

/** Advances the test clock by `step` until `fiber` is done (at most `max` steps). */
const adjustUntilDone = <A, E>(fiber: Fiber.RuntimeFiber<A, E>, step: Duration.DurationInput, max = 100) =>
  Effect.gen(function*() {
    for (let i = 0; i < max; i++) {
      const done = yield* Fiber.poll(fiber)
      if (done._tag === "Some") break
      yield* TestClock.adjust(step)
      yield* Effect.yieldNow()
    }
    return yield* Fiber.join(fiber)
  })

const callOnce = (operation: ScriptedProvider.FaultCall["operation"], fault: ScriptedProvider.Fault, call = 1): ScriptedProvider.FaultPlan => (c) =>
  c.operation === operation && c.call === call ? fault : null

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  describe("an interrupt during a tool call leaves the thread usable", () => {
    it.effect("the dangling call is recorded interrupted with an error result; the next request (another provider, inline) carries both", () => {
      const h = Harness.make([
        { name: "codex", window: 200_000, inject: false, faults: callOnce("startTurn", "interrupt_in_tool_call") },
        { name: "claude", window: 200_000, inject: false }
      ])
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* o.create("codex")
        h.script.enqueue(toolTurn)
        const sending = yield* Effect.fork(o.send(t, "run the tests"))
        const inCall = yield* h.providers.codex!.awaitToolCall
        const interrupted = yield* o.service.interrupt(interruptCmd(t, inCall.runId as RunId))
        expect(interrupted.status).toBe("interrupted")
        const sent = yield* Fiber.join(sending)
        expect(sent.status).toBe("interrupted")

        const [run] = yield* o.store.listRuns(t)
        expect([run!.status, run!.stopPoint, run!.nativeThreadId]).toEqual(["interrupted", "after_provider", "nat_000001"])
        expect((yield* o.store.listAttempts(run!.id)).map((a) => a.status)).toEqual(["interrupted"])
        const items = yield* o.store.listItems(t)
        expect(items.map((i) => [i.kind, i.toolCallId, i.toolCallState, i.isError])).toEqual([
          ["user_message", null, null, false],
          ["assistant_message", null, null, false],
          ["tool_call", "call_1", "interrupted", false],
          ["tool_result", "call_1", null, true]
        ])
        expect(items[3]!.text).toBe("[interrupted] The user interrupted the turn while this tool call ran; it returned no result.")
        // The native thread read the prompt and answered the interrupt: it stays trusted.
        expect((yield* o.store.listEvents(t)).filter((e) => e.type === "native_thread.replaced")).toEqual([])

        yield* o.switchTo(t, "claude")
        const next = yield* o.send(t, "what happened?")
        expect(next.status).toBe("completed")
        expect(next.turnStart?.deliveredItems).toBe(4)
        const turn = h.providers.claude!.received.at(-1)!
        expect(turn.type === "turn" && turn.prompt).toBe("what happened?")
        const inline = turn.type === "turn" ? turn.inlineHistory ?? "" : ""
        expect(inline).toContain(`[tool_call bash call_1 #${items[2]!.seq} interrupted]\n{"command":"pnpm test"}`)
        expect(inline).toContain(`[tool_result bash call_1 #${items[3]!.seq} error]\n[interrupted] The user interrupted`)
        expect(yield* o.check(t, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })

    it.effect("adapter without readThread: the native thread is replaced; the next turn on a replacement carries the call and its answer", () => {
      const h = Harness.make([
        { name: "codex", window: 200_000, inject: false, readThread: false, faults: callOnce("startTurn", "interrupt_in_tool_call") }
      ])
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* o.create("codex")
        h.script.enqueue(toolTurn)
        const sending = yield* Effect.fork(o.send(t, "run the tests"))
        const inCall = yield* h.providers.codex!.awaitToolCall
        yield* o.service.interrupt(interruptCmd(t, inCall.runId as RunId))
        expect((yield* Fiber.join(sending)).status).toBe("interrupted")
        const replaced = (yield* o.store.listEvents(t)).filter((e) => e.type === "native_thread.replaced")
        expect(replaced.map((e) => e.payload.reason)).toEqual(["interrupted mid-turn: cannot tell whether the provider read the prompt"])

        const next = yield* o.send(t, "go on")
        expect([next.status, next.nativeGeneration, next.runSeq]).toEqual(["completed", 2, 2])
        const turn = h.providers.codex!.received.at(-1)!
        const inline = turn.type === "turn" ? turn.inlineHistory ?? "" : ""
        expect(turn.type === "turn" && [turn.nativeRef, turn.prompt]).toEqual(["codex-n2", "go on"])
        expect(inline).toContain("run the tests")
        expect(inline).toMatch(/\[tool_call bash call_1 #\S+ interrupted\]/)
        expect(inline).toMatch(/\[tool_result bash call_1 #\S+ error\]\n\[interrupted\]/)
        expect(yield* o.check(t, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })

    it.effect("a provider turn that returns a tool call without its result: recorded dangling with an error result", () => {
      const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* o.create("codex")
        h.script.enqueue({ items: [produced("tool_call", "{}", { toolCallId: "c9", toolName: "grep", messageId: "m1" })] })
        expect((yield* o.send(t, "search")).status).toBe("completed")
        const items = yield* o.store.listItems(t)
        expect(items.map((i) => [i.kind, i.toolCallState, i.isError, i.text])).toEqual([
          ["user_message", null, false, "search"],
          ["tool_call", "dangling", false, "{}"],
          ["tool_result", null, true, "[no result] The turn ended without a result for this tool call."]
        ])
      }).pipe(Effect.provide(h.layer))
    })
  })

  describe("an interrupt the provider never answers", () => {
    it.effect("the run ends interrupted after the interrupt timeout; the next message starts run 2 on a replacement and completes", () => {
      const h = Harness.make([
        {
          name: "codex",
          window: 200_000,
          inject: true,
          faults: (c) => c.operation === "startTurn" && c.call === 1 ? "interrupt_in_tool_call" : c.operation === "interrupt" && c.call === 1 ? "ignore_interrupt" : null
        }
      ], { config: { interruptTimeoutMillis: 5_000, turnTimeoutMillis: 600_000 } })
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* o.create("codex")
        h.script.enqueue(toolTurn)
        const sending = yield* Effect.fork(o.send(t, "run the tests"))
        const inCall = yield* h.providers.codex!.awaitToolCall
        const interrupting = yield* Effect.fork(o.service.interrupt(interruptCmd(t, inCall.runId as RunId)))
        const ended = yield* adjustUntilDone(interrupting, "1 second")
        expect([ended.status, ended.stopPoint, ended.failureCode, ended.failureReason]).toEqual(["interrupted", "after_provider", "interrupted_by_user", "interrupted by the user"])
        const replaced = (yield* o.store.listEvents(t)).filter((e) => e.type === "native_thread.replaced")
        expect(replaced.map((e) => e.payload.reason)).toEqual(["interrupted mid-turn: the provider did not acknowledge the interrupt"])

        // The provider is still inside the first turn; the thread takes the next message anyway.
        h.script.enqueue(Harness.reply(20))
        const next = yield* o.send(t, "never mind, continue")
        expect([next.status, next.runSeq, next.nativeGeneration]).toEqual(["completed", 2, 2])

        // The stuck turn ends at the turn timeout; the first ending (interrupted) stays.
        const first = yield* adjustUntilDone(sending, "1 minute")
        expect([first.status, first.runSeq]).toEqual(["interrupted", 1])
        const runs = yield* o.store.listRuns(t)
        expect(runs.map((r) => [r.seq, r.status, r.stopPoint])).toEqual([[1, "interrupted", "after_provider"], [2, "completed", null]])
        expect(yield* o.check(t, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })
  })

  describe("turn timeouts", () => {
    it.effect("a provider turn that never returns fails at the turn timeout (read back: after the provider); the next message completes", () => {
      const h = Harness.make([{ name: "codex", window: 200_000, inject: true, faults: callOnce("startTurn", "hang") }], {
        config: { turnTimeoutMillis: 60_000 }
      })
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* o.create("codex")
        const sending = yield* Effect.fork(o.send(t, "long task"))
        const r = yield* adjustUntilDone(sending, "10 seconds")
        expect([r.status, r.failureCode, r.failureReason]).toEqual(["failed", "provider_timeout", "provider codex failed startTurn (timeout): no answer within 60000 ms (turn timeout)"])
        expect(InvariantChecks.isFaultCode(r.failureCode)).toBe(true)
        const [run] = yield* o.store.listRuns(t)
        expect([run!.stopPoint, run!.nativeThreadId]).toEqual(["after_provider", "nat_000001"])
        const next = yield* o.send(t, "again")
        expect([next.status, next.runSeq, next.nativeGeneration]).toEqual(["completed", 2, 1])
        expect(yield* o.check(t, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })

    it.effect("timeout fault, adapter reads back: the inline history it carried settles, the run failed after the provider", () => {
      const h = Harness.make([
        { name: "codex", window: 200_000, inject: false },
        { name: "claude", window: 200_000, inject: false, faults: callOnce("startTurn", "timeout") }
      ])
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* o.create("codex")
        h.script.enqueue(Harness.reply(50))
        yield* o.send(t, "on codex")
        yield* o.switchTo(t, "claude")
        const r = yield* o.send(t, "on claude")
        expect([r.status, r.failureCode, r.failureReason]).toEqual(["failed", "provider_timeout", "provider claude failed startTurn (timeout): no answer from the provider before its deadline"])
        const runs = yield* o.store.listRuns(t)
        expect(runs.map((x) => x.stopPoint)).toEqual([null, "after_provider"])
        expect((yield* o.store.listDeliveriesOfThread(t)).map((d) => d.status)).toEqual(["inline"])
        const next = yield* o.send(t, "again")
        expect([next.status, next.nativeGeneration, next.turnStart?.deliveredItems]).toEqual(["completed", 1, 0])
        expect(yield* o.check(t, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })

    it.effect("timeout fault, adapter cannot read back: the native thread is replaced and the next turn is owed the timed-out run", () => {
      const h = Harness.make([{ name: "codex", window: 200_000, inject: false, readThread: false, faults: callOnce("startTurn", "timeout", 2) }])
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* o.create("codex")
        yield* o.send(t, "first")
        const r = yield* o.send(t, "second, timed out")
        expect(r.status).toBe("failed")
        const runs = yield* o.store.listRuns(t)
        expect(runs.map((x) => [x.stopPoint, x.nativeThreadId])).toEqual([[null, "nat_000001"], ["before_provider", null]])
        const next = yield* o.send(t, "third")
        expect([next.status, next.nativeGeneration]).toEqual(["completed", 2])
        const turn = h.providers.codex!.received.at(-1)!
        const inline = turn.type === "turn" ? turn.inlineHistory ?? "" : ""
        expect(inline).toContain("second, timed out")
        expect(turn.type === "turn" && turn.prompt).toBe("third")
        expect(yield* o.check(t, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })
  })

  describe("context overflow never wedges the thread", () => {
    it.effect("overflow on a turn carrying history: deliveries back to deferred, native thread recorded full, retried with the prompt alone", () => {
      const h = Harness.make([
        { name: "codex", window: 200_000, inject: false },
        { name: "claude", window: 200_000, inject: false, faults: callOnce("startTurn", "overflow") }
      ])
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* o.create("codex")
        h.script.enqueue(Harness.reply(50))
        yield* o.send(t, "on codex")
        yield* o.switchTo(t, "claude")
        const r = yield* o.send(t, "on claude")
        expect([r.status, r.nativeGeneration, r.turnStart?.deliveredItems, r.turnStart?.deferredItems]).toEqual(["completed", 1, 0, 2])
        expect((yield* o.store.listAttempts(r.runId as RunId)).map((a) => a.status)).toEqual(["failed", "completed"])
        expect(h.providers.claude!.received).toEqual([
          { type: "turn", nativeRef: "claude-n1", runId: r.runId, prompt: "on claude", inlineHistory: null }
        ])
        const overflow = (yield* o.store.listEvents(t)).filter((e) => e.type === "context.overflowed")
        expect(overflow.map((e) => [e.payload.recovery, e.payload.window])).toEqual([["defer_history", 200_000]])
        expect((yield* o.store.listDeliveriesOfThread(t)).map((d) => d.status)).toEqual(["deferred"])
        // The retried turn's usage report corrects the "full" figure: the next turn delivers the deferred history.
        const next = yield* o.send(t, "next")
        expect([next.status, next.turnStart?.deliveredItems]).toEqual(["completed", 2])
        expect(yield* o.check(t, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })

    it.effect("overflow with inline history where the prompt alone cannot fit either: replaced, not retried on the full native thread (sim seed 100087)", () => {
      // b counts 1.5 provider tokens per Baton token, unknown to Baton until a report says so. b runs a 5,000-token
      // turn (7,530 of its 20,000 used), a's turn is then owed to b (deferred, a pointer goes inline), and a
      // 9,000-token prompt goes to b: at ratio 1 it fits (7,530 + 9,000), in b's units it does not (7,500 + 13,500).
      // The overflow names the request's size, which teaches the ratio: the prompt alone cannot fit b-n1 either.
      const h = Harness.make([
        { name: "a", window: 200_000, inject: true },
        { name: "b", window: 20_000, inject: false, tokenScale: 1.5 }
      ])
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* o.create("b")
        h.script.enqueue(Harness.reply(20))
        yield* o.send(t, Harness.words(5_000))
        yield* o.switchTo(t, "a")
        h.script.enqueue(Harness.reply(20))
        yield* o.send(t, "on a")
        yield* o.switchTo(t, "b")
        h.script.enqueue(Harness.reply(20))
        const r = yield* o.send(t, Harness.words(9_000))
        expect([r.status, r.nativeGeneration]).toEqual(["completed", 2])
        const overflow = (yield* o.store.listEvents(t)).filter((e) => e.type === "context.overflowed")
        expect(overflow.map((e) => e.payload.recovery)).toEqual(["replace_native_thread"])
        // One rejected request to b-n1 (prompt and pointer), none with the prompt alone.
        const requests = h.providers.b!.truth.filter((x) => x.runId === r.runId && x.operation === "startTurn")
        expect(requests.map((x) => [x.nativeRef, x.accepted])).toEqual([["b-n1", false], ["b-n2", true]])
        expect(yield* o.check(t, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })

    it.effect("overflow with the prompt alone: the native thread is full, replaced; the retry on generation 2 completes", () => {
      const h = Harness.make([{ name: "codex", window: 200_000, inject: true, faults: callOnce("startTurn", "overflow", 2) }])
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* o.create("codex")
        h.script.enqueue(Harness.reply(50))
        yield* o.send(t, "first")
        const r = yield* o.send(t, "second")
        expect([r.status, r.nativeGeneration, r.turnStart?.deliveredItems]).toEqual(["completed", 2, 2])
        const overflow = (yield* o.store.listEvents(t)).filter((e) => e.type === "context.overflowed")
        expect(overflow.map((e) => e.payload.recovery)).toEqual(["replace_native_thread"])
        const turns = h.providers.codex!.received.filter((x) => x.type === "turn")
        expect(turns.map((x) => [x.nativeRef, x.prompt])).toEqual([["codex-n1", "first"], ["codex-n2", "second"]])
        expect(yield* o.check(t, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })

    it.effect("a provider that overflows every time: the run fails after 4 attempts, as a provider fault; the thread takes the next message", () => {
      let overflowing = true
      const h = Harness.make([{ name: "codex", window: 200_000, inject: true, faults: (c) => (overflowing && c.operation === "startTurn" && c.call >= 2 ? "overflow" : null) }])
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* o.create("codex")
        yield* o.send(t, "first")
        const r = yield* o.send(t, "too long")
        expect([r.status, r.failureCode, r.failureReason]).toEqual(["failed", "overflow", "provider codex failed startTurn (overflow): the request exceeds the model's context window (context_length_exceeded) (the prompt alone does not fit the model's context window on an empty native thread: shorten the message or switch to a model with a larger window)"])
        expect((yield* o.store.listAttempts(r.runId as RunId)).map((a) => a.status)).toEqual(["failed", "failed", "failed", "failed"])
        const overflow = (yield* o.store.listEvents(t)).filter((e) => e.type === "context.overflowed")
        // The prompt alone overflows: replace; the replacement's injected history overflows: replace again, the
        // history deferred for the retry (never resent to a thread that keeps it); the pointer beside the prompt
        // overflows: defer; the prompt alone then overflows the replacement, which holds nothing: the run fails, that
        // rejection recorded all the same (`none`: what it taught is kept, nothing is retried).
        expect(overflow.map((e) => e.payload.recovery)).toEqual(["replace_native_thread", "replace_native_thread", "defer_history", "none"])
        const [, second] = yield* o.store.listRuns(t)
        expect(second!.stopPoint).toBe("before_provider")
        overflowing = false
        const next = yield* o.send(t, "short")
        expect([next.status, next.runSeq]).toEqual(["completed", 3])
        expect(yield* o.check(t, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })
  })
})
