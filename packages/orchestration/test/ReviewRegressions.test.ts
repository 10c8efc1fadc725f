/**
 * Regressions from the adversarial review of issue 3's work: each test is the smallest input that reproduced a
 * defect, with the behaviour a user now sees.
 */
import { Commands, type CommandId, type RunId, type ThreadId } from "@baton/contracts"
import { ScriptedProvider } from "@baton/providers"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { type Duration, Effect, Fiber, TestClock } from "effect"

const ops = Harness.ops

const produced = Harness.produced

/** A turn that runs one tool: text and call under message `m1`, the result (no message id), a closing answer. */
const toolTurn: ScriptedProvider.ScriptedResponse = {
  items: [
    produced("assistant_message", "Running the tests.", { messageId: "msg_1" }),
    produced("tool_call", `{"command":"npm test"}`, { toolCallId: "call_1", toolName: "bash", messageId: "msg_1", toolCallState: "answered" }),
    produced("tool_result", "tests: 12 passed", { toolCallId: "call_1", toolName: "bash" }),
    produced("assistant_message", "All tests pass.", { messageId: "msg_1_end" })
  ]
}

const withFile = Harness.withDbFile

let n = 0
const cid = (prefix: string) => `${prefix}_${++n}` as CommandId

describe("review regressions", () => {
  it.live("a message to a provider this process does not have fails with UnknownProvider and leaves nothing queued", () =>
    withFile((file) =>
      Effect.gen(function*() {
        const h = Harness.make([{ name: "codex", window: 200_000, inject: true }, { name: "claude", window: 200_000, inject: false }], { db: file })
        const t = yield* Effect.gen(function*() {
          const o = yield* ops
          const t = yield* o.create("claude")
          h.script.enqueue(Harness.reply(20))
          yield* o.send(t, "q1")
          return t
        }).pipe(Effect.provide(h.layer))
        // A new process on the same file, configured without claude.
        yield* Effect.gen(function*() {
          const o = yield* ops
          const failed = yield* Effect.flip(o.send(t, "q2"))
          expect(failed._tag).toBe("UnknownProvider")
          expect((yield* o.store.listRuns(t)).map((r) => [r.seq, r.status])).toEqual([[1, "completed"]])
          // The thread stays usable: switch to a provider this process has, and go on.
          yield* o.switchTo(t, "codex")
          h.script.enqueue(Harness.reply(20))
          expect((yield* o.send(t, "q3")).status).toBe("completed")
          expect(yield* o.check(t, h)).toEqual([])
        }).pipe(Effect.provide(Harness.makeLayer([h.providers.codex!], h.counter, file, {}, "p2_")))
      })
    ))

  it.live("a resumed session replaying a tool turn records none of it again (the result has no message id)", () =>
    withFile((file) =>
      Effect.gen(function*() {
        const h = Harness.make([
          { name: "codex", window: 200_000, inject: true, replayOnResume: true },
          { name: "claude", window: 200_000, inject: false }
        ], { db: file })
        const t = yield* Effect.gen(function*() {
          const o = yield* ops
          const t = yield* o.create("codex")
          h.script.enqueue(toolTurn)
          yield* o.send(t, "run tests")
          return t
        }).pipe(Effect.provide(h.layer))
        yield* Effect.gen(function*() {
          const o = yield* ops
          h.script.enqueue({ items: [produced("assistant_message", "third answer", { messageId: "msg_3" })] })
          const again = yield* o.send(t, "again")
          const items = yield* o.store.listItems(t)
          expect(items.map((i) => [i.kind, i.text])).toEqual([
            ["user_message", "run tests"],
            ["assistant_message", "Running the tests."],
            ["tool_call", `{"command":"npm test"}`],
            ["tool_result", "tests: 12 passed"],
            ["assistant_message", "All tests pass."],
            ["user_message", "again"],
            ["assistant_message", "third answer"]
          ])
          const skipped = (yield* o.store.listEvents(t)).filter((e) => e.type === "items.replay_skipped")
          expect(skipped.map((e) => e.payload)).toEqual([
            { runId: again.runId, count: 4, messageIds: ["msg_1", "msg_1_end"], toolCallIds: ["call_1"] }
          ])
          // The history another provider receives carries the tool call with exactly one result.
          yield* o.switchTo(t, "claude")
          h.script.enqueue(Harness.reply(10))
          const moved = yield* o.send(t, "on claude")
          const inline = h.providers.claude!.received.flatMap((r) => r.type === "turn" && r.runId === moved.runId ? [r.inlineHistory ?? ""] : [])[0]!
          expect(inline.split("tests: 12 passed").length - 1).toBe(1)
          expect(yield* o.check(t, h)).toEqual([])
        }).pipe(Effect.provide(Harness.makeLayer(Object.values(h.providers), h.counter, file, {}, "p2_")))
      })
    ))

  it.effect("a provider message id seen on another native thread is not a replay: the answer is recorded", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }, { name: "claude", window: 200_000, inject: false }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue({ items: [produced("assistant_message", "codex answer", { messageId: "msg_1" })] })
      yield* o.send(t, "q1")
      yield* o.switchTo(t, "claude")
      h.script.enqueue({ items: [produced("assistant_message", "claude answer", { messageId: "msg_1" })] })
      yield* o.send(t, "q2")
      expect((yield* o.store.listItems(t)).map((i) => i.text)).toEqual(["q1", "codex answer", "q2", "claude answer"])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("a command id reused for another command or thread is an IdempotencyKeyReused, never another command's result", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const parent = yield* o.create("codex")
      h.script.enqueue(Harness.reply(10))
      yield* o.send(parent, "p1")
      const same = cid("same")
      const forked = yield* o.service.fork(Commands.ForkThread.make({ commandId: same, threadId: parent }))
      const merge = yield* Effect.flip(o.service.mergeBack(Commands.MergeBack.make({ commandId: same, forkThreadId: forked.threadId as ThreadId })))
      expect(merge._tag).toBe("IdempotencyKeyReused")
      expect(merge.message).toBe(`command id ${same} was already used by ForkThread on thread ${parent}; send MergeBack with a new command id`)
      const offload = yield* Effect.flip(o.service.offload(Commands.OffloadThread.make({ commandId: same, threadId: parent })))
      expect(offload._tag).toBe("IdempotencyKeyReused")
      const compact = yield* Effect.flip(o.service.compact(Commands.CompactThread.make({ commandId: same, threadId: parent })))
      expect(compact._tag).toBe("IdempotencyKeyReused")
      const send = yield* Effect.flip(o.service.sendMessage(Commands.SendMessage.make({ commandId: same, threadId: parent, text: "hello again" })))
      expect(send._tag).toBe("IdempotencyKeyReused")
      // Nothing was recorded for the rejected commands, and the fork's receipt still answers a retried fork.
      expect((yield* o.store.listRuns(parent)).length).toBe(1)
      expect(yield* o.service.fork(Commands.ForkThread.make({ commandId: same, threadId: parent }))).toEqual(forked)
      const created = cid("c")
      yield* o.service.createThread(Commands.CreateThread.make({ commandId: created, title: "x", providerInstance: "codex" as never }))
      const reused = yield* Effect.flip(o.service.sendMessage(Commands.SendMessage.make({ commandId: created, threadId: parent, text: "hi" })))
      expect(reused._tag).toBe("IdempotencyKeyReused")
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("a turn whose interrupt is never answered: its delivery superseded by the replacement is not settled later", () => {
    const h = Harness.make([
      { name: "codex", window: 200_000, inject: true },
      {
        name: "claude",
        window: 200_000,
        inject: false,
        faults: (c) =>
          c.operation === "startTurn" && c.call === 1
            ? "interrupt_in_tool_call"
            : c.operation === "interrupt" && c.call === 1
            ? "ignore_interrupt"
            : null
      }
    ], { config: { interruptTimeoutMillis: 5_000, turnTimeoutMillis: 600_000 } })
    const untilDone = <A, E>(fiber: Fiber.RuntimeFiber<A, E>, step: Duration.DurationInput) =>
      Effect.gen(function*() {
        for (let i = 0; i < 100 && (yield* Fiber.poll(fiber))._tag === "None"; i++) {
          yield* TestClock.adjust(step)
          yield* Effect.yieldNow()
        }
        return yield* Fiber.join(fiber)
      })
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue(Harness.reply(40))
      yield* o.send(t, "q1 on codex")
      yield* o.switchTo(t, "claude")
      h.script.enqueue(toolTurn)
      const sending = yield* Effect.fork(o.send(t, "run the tests"))
      const inCall = yield* h.providers.claude!.awaitToolCall
      const interrupting = yield* Effect.fork(o.service.interrupt(Commands.InterruptRun.make({ commandId: cid("i"), threadId: t, runId: inCall.runId as RunId })))
      expect((yield* untilDone(interrupting, "1 second")).status).toBe("interrupted")
      h.script.enqueue(Harness.reply(20))
      expect((yield* o.send(t, "continue")).nativeGeneration).toBe(2)
      yield* untilDone(sending, "1 minute")
      // Each delivery ends once: a superseded delivery is never settled afterwards.
      const ends = new Map<string, Array<string>>()
      for (const e of yield* o.store.listEvents(t)) {
        if (e.type !== "delivery.superseded" && e.type !== "delivery.inlined" && e.type !== "delivery.injected") continue
        const id = e.payload.deliveryId
        ends.set(id, [...(ends.get(id) ?? []), e.type])
      }
      for (const [id, types] of ends) expect([id, types.length]).toEqual([id, 1])
      h.script.enqueue(Harness.reply(20))
      expect((yield* o.send(t, "third")).status).toBe("completed")
      expect(yield* o.check(t, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("a missed run an /offload covers is owed as the summary, not as its original before the summary", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: false }, { name: "claude", window: 200_000, inject: false }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue(Harness.reply(50))
      yield* o.send(t, "first on codex")
      yield* o.switchTo(t, "claude")
      yield* o.interruptBeforeStart(t, "MISSED PROMPT never read")
      const report = yield* o.offload(t, 0)
      expect(report.offloaded).toBe(true)
      h.script.enqueue(Harness.reply(10))
      const next = yield* o.send(t, "next on claude")
      const inline = h.providers.claude!.received.flatMap((r) => r.type === "turn" && r.runId === next.runId ? [r.inlineHistory ?? ""] : [])[0]!
      // Once, inside the summary; never as the original user message.
      expect(inline.split("MISSED PROMPT never read").length - 1).toBe(1)
      expect(inline).not.toContain("[user")
      expect(yield* o.check(t, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("a provider counting 3 tokens per Baton token: delivered history stays within the budget in its units", () => {
    const h = Harness.make([
      { name: "claude", window: 200_000, inject: false },
      { name: "codex", window: 100_000, inject: false, tokenScale: 3 }
    ])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      for (let i = 0; i < 3; i++) {
        h.script.enqueue(Harness.reply(2_000))
        yield* o.send(t, `learn ${i}`)
      }
      yield* o.switchTo(t, "claude")
      for (let i = 0; i < 60; i++) {
        h.script.enqueue(Harness.reply(150))
        yield* o.send(t, `c${i}`)
      }
      yield* o.switchTo(t, "codex")
      h.script.enqueue(Harness.reply(10))
      const back = yield* o.send(t, "back on codex")
      expect(back.turnStart!.calibrationRatio).toBeCloseTo(3, 2)
      const inline = h.providers.codex!.received.flatMap((r) => r.type === "turn" && r.runId === back.runId ? [r.inlineHistory ?? ""] : [])[0]!
      expect(inline.length).toBeGreaterThan(0)
      expect(Math.ceil(h.counter.count(inline) * 3)).toBeLessThanOrEqual(back.turnStart!.budget.budget)
      expect(yield* o.check(t, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("a fork of an offloaded parent is owed the parent's summary and verbatim tail, not the covered originals", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }, { name: "claude", window: 200_000, inject: false }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      for (let i = 0; i < 4; i++) {
        h.script.enqueue(Harness.reply(500))
        yield* o.send(t, `step ${i}`)
      }
      const report = yield* o.offload(t, 600)
      expect(report.offloaded).toBe(true)
      const forked = yield* o.fork(t, { provider: "claude" })
      const copies = yield* o.store.listItems(forked.threadId as ThreadId)
      expect(copies[1]!.kind).toBe("summary")
      const kept = (yield* o.store.listItems(t)).filter((i) => i.seq > report.cutSeq! && i.kind !== "summary")
      expect(copies.slice(2).map((i) => i.text)).toEqual(kept.map((i) => i.text))
      expect(forked.itemCount).toBe(1 + kept.length)
      expect(yield* o.check(forked.threadId as ThreadId, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })
})

/**
 * A claude whose first turn stops inside its tool call and never answers an interrupt; `hook.run` is what the user
 * does meanwhile (set once the orchestrator runs). `codex` is a plain provider to switch to.
 */
const stuckTurnSetup = () => {
  const counter = Harness.make([]).counter
  const script = ScriptedProvider.makeScript()
  const hook = { run: Effect.void as Effect.Effect<void> }
  const claude = ScriptedProvider.make({
    instance: "claude" as never,
    contextWindow: 200_000,
    autoCompactThreshold: null,
    injectHistory: false,
    readThread: false,
    faults: (c) =>
      c.operation === "startTurn" && c.call === 1 ? "interrupt_in_tool_call" : c.operation === "interrupt" ? "ignore_interrupt" : null,
    onToolCall: () => hook.run
  }, script, counter)
  const codex = ScriptedProvider.make({ instance: "codex" as never, contextWindow: 200_000, autoCompactThreshold: null, injectHistory: false }, script, counter)
  const layer = Harness.makeLayer([claude, codex], counter, ":memory:", { interruptTimeoutMillis: 20 })
  return { script, hook, claude, codex, layer, counter }
}

describe("late output of a turn whose interrupt was never answered", () => {
  it.live("is recorded with its run, and owed to the replacement native thread that took over", () =>
    Effect.gen(function*() {
      const { claude, hook, layer, script } = stuckTurnSetup()
      yield* Effect.gen(function*() {
        const o = yield* ops
        const context = yield* Effect.context<Effect.Effect.Context<typeof ops>>()
        const t = yield* o.create("claude")
        script.enqueue(toolTurn)
        let second: { readonly nativeGeneration: number | null } | null = null
        hook.run = Effect.provide(
          Effect.gen(function*() {
            const active = yield* o.store.findActiveRun(t)
            // The interrupt is never answered: after the timeout the run ends anyway and the native thread is replaced.
            const ended = yield* o.service.interrupt(Commands.InterruptRun.make({ commandId: cid("i"), threadId: t, runId: active.pipe((r) => r._tag === "Some" ? r.value.id : "" as RunId) }))
            expect(ended.status).toBe("interrupted")
            script.enqueue(Harness.reply(10))
            second = yield* o.send(t, "next message")
          }).pipe(Effect.orDie),
          context
        )
        const first = yield* o.send(t, "run the tests")
        expect(first.status).toBe("interrupted")
        expect(second!.nativeGeneration).toBe(2)
        // The first turn finished after all: its output is recorded with run 1.
        const items = yield* o.store.listItems(t)
        const run1 = (yield* o.store.listRuns(t))[0]!
        expect(items.filter((i) => i.runId === run1.id).map((i) => i.text)).toContain("All tests pass.")
        // ...and the replacement native thread, which never saw it, is owed it at the next turn.
        script.enqueue(Harness.reply(10))
        const third = yield* o.send(t, "third")
        expect(third.status).toBe("completed")
        const inline = claude.received.flatMap((r) => r.type === "turn" && r.runId === third.runId ? [r.inlineHistory ?? ""] : [])[0]!
        expect(inline).toContain("All tests pass.")
        expect(yield* o.check(t, { providers: { claude } } as unknown as Harness.Harness)).toEqual([])
      }).pipe(Effect.provide(layer))
    }))
})

describe("review 3", () => {
  it.live("late output reaches the provider the user switched to while the old turn was stuck", () =>
    Effect.gen(function*() {
      const { claude, codex, hook, layer, script } = stuckTurnSetup()
      yield* Effect.gen(function*() {
        const o = yield* ops
        const context = yield* Effect.context<Effect.Effect.Context<typeof ops>>()
        const t = yield* o.create("claude")
        script.enqueue(toolTurn)
        hook.run = Effect.provide(
          Effect.gen(function*() {
            const active = yield* o.store.findActiveRun(t)
            yield* o.service.interrupt(Commands.InterruptRun.make({ commandId: cid("i"), threadId: t, runId: active.pipe((r) => r._tag === "Some" ? r.value.id : "" as RunId) }))
            yield* o.switchTo(t, "codex")
          }).pipe(Effect.orDie),
          context
        )
        expect((yield* o.send(t, "run the tests")).status).toBe("interrupted")
        script.enqueue(Harness.reply(10))
        const onCodex = yield* o.send(t, "on codex")
        const inline = codex.received.flatMap((r) => r.type === "turn" && r.runId === onCodex.runId ? [r.inlineHistory ?? ""] : [])[0]!
        expect(inline).toContain("All tests pass.")
        expect(inline.split("tests: 12 passed").length - 1).toBe(1)
        script.enqueue(Harness.reply(10))
        yield* o.send(t, "again on codex")
        expect(yield* o.check(t, { providers: { claude, codex } } as unknown as Harness.Harness)).toEqual([])
      }).pipe(Effect.provide(layer))
    }))

  it.effect("a provider reusing tool call ids every turn: nothing is taken for a replay on a thread never resumed", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: false }])
    const turn = (tag: string) => ({
      items: [
        produced("tool_call", `{"command":"${tag}"}`, { toolCallId: "call_0", toolName: "bash", toolCallState: "answered" as const }),
        produced("tool_result", `result of ${tag}`, { toolCallId: "call_0", toolName: "bash" }),
        produced("assistant_message", `answer ${tag}`)
      ]
    })
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue(turn("ls"))
      yield* o.send(t, "list")
      h.script.enqueue(turn("pwd"))
      yield* o.send(t, "where")
      expect((yield* o.store.listItems(t)).map((i) => i.text)).toEqual([
        "list", `{"command":"ls"}`, "result of ls", "answer ls", "where", `{"command":"pwd"}`, "result of pwd", "answer pwd"
      ])
      expect((yield* o.store.listEvents(t)).filter((e) => e.type === "items.replay_skipped")).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.live("after a resume, a new tool call sharing a message id with an old answer is recorded with its result", () =>
    withFile((file) =>
      Effect.gen(function*() {
        const h = Harness.make([
          { name: "codex", window: 200_000, inject: false, replayOnResume: true },
          { name: "claude", window: 200_000, inject: false }
        ], { db: file })
        const t = yield* Effect.gen(function*() {
          const o = yield* ops
          const t = yield* o.create("codex")
          h.script.enqueue({ items: [produced("assistant_message", "Let me look.", { messageId: "m1" })] })
          yield* o.send(t, "look")
          return t
        }).pipe(Effect.provide(h.layer))
        yield* Effect.gen(function*() {
          const o = yield* ops
          // The resumed session replays "Let me look." (m1), then a new tool call under the same message id m1.
          h.script.enqueue({
            items: [
              produced("tool_call", `{"command":"cat x"}`, { toolCallId: "call_9", toolName: "bash", messageId: "m1", toolCallState: "answered" }),
              produced("tool_result", "contents of x", { toolCallId: "call_9", toolName: "bash" }),
              produced("assistant_message", "Done.", { messageId: "m2" })
            ]
          })
          yield* o.send(t, "go on")
          const items = yield* o.store.listItems(t)
          expect(items.map((i) => i.kind)).toEqual([
            "user_message", "assistant_message", "user_message", "tool_call", "tool_result", "assistant_message"
          ])
          yield* o.switchTo(t, "claude")
          h.script.enqueue(Harness.reply(5))
          yield* o.send(t, "on claude")
          expect(yield* o.check(t, h)).toEqual([])
        }).pipe(Effect.provide(Harness.makeLayer(Object.values(h.providers), h.counter, file, {}, "p2_")))
      })
    ))
})
