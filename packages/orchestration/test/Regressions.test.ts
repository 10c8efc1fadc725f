/** Regression tests: each the smallest input that reproduced a bug found by attacking the invariants. */
import { Commands, type CommandId } from "@baton/contracts"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { deferredTowardCodex } from "./support/DeferredHistory.js"

const ops = Harness.ops

// Found by a review with the real Codex binary (the child killed during the injection): the injection never arrived,
// read-back returned the history to deferred, and the turn start still reported it injected.
describe("an injection that never arrived", () => {
  it.effect("is reported deferred by the turn it failed in, and delivered once by the next", () => {
    const h = Harness.make([
      { name: "codex", window: 200_000, inject: true, faults: (c) => (c.operation === "injectHistory" && c.call === 1 ? "drop_injection" : null) },
      { name: "claude", window: 200_000, inject: false }
    ])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue(Harness.reply(10))
      yield* o.send(t, "first")
      yield* o.switchTo(t, "claude")
      h.script.enqueue(Harness.reply(10))
      yield* o.send(t, "claude step")
      yield* o.switchTo(t, "codex")
      h.script.enqueue(Harness.reply(10))
      const second = yield* o.send(t, "second")
      expect([second.status, second.failureReason]).toEqual(["completed", null])
      expect(second.turnStart).toMatchObject({ mode: "none", deliveredItems: 0, deferredItems: 2 })
      expect(second.turnStart?.injectionError).toBeNull()
      // (The first delivery is the switch to claude's, inline.)
      expect((yield* o.store.listDeliveriesOfThread(t)).map((d) => d.status)).toEqual(["inline", "deferred"])
      h.script.enqueue(Harness.reply(10))
      const third = yield* o.send(t, "third")
      expect(third.turnStart).toMatchObject({ mode: "injected", deliveredItems: 2, injectionError: null })
      expect(h.providers.codex!.received.filter((x) => x.type === "inject")).toHaveLength(1)
      expect(yield* o.check(t, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })
})

describe("/compact never re-sends a delivery whose outcome is uncertain", () => {
  it.effect("lost ack during /compact, adapter can read back: settles once, a second /compact injects nothing", () => {
    const h = Harness.make([
      { name: "codex", window: 200_000, inject: true, faults: (c) => (c.operation === "injectHistory" && c.call === 1 ? "lose_injection_ack" : null) },
      { name: "claude", window: 200_000, inject: false }
    ])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* deferredTowardCodex(h)
      const first = yield* o.compact(t)
      expect(first.deliveredItems).toBe(2)
      yield* o.compact(t)
      const injections = h.providers.codex!.received.filter((x) => x.type === "inject")
      expect(injections).toHaveLength(1)
      expect((yield* o.store.listDeliveriesOfThread(t)).map((d) => d.status)).toEqual(["inline", "injected"])
      expect(yield* o.check(t, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("lost ack at turn start, adapter cannot read back: /compact leaves it pending; the next turn replaces the thread", () => {
    const h = Harness.make([
      { name: "codex", window: 200_000, inject: true, readThread: false, faults: (c) => (c.operation === "injectHistory" && c.call === 1 ? "lose_injection_ack" : null) },
      { name: "claude", window: 200_000, inject: false }
    ])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("claude")
      h.script.enqueue(Harness.reply(200))
      yield* o.send(t, "on claude")
      yield* o.switchTo(t, "codex")
      expect((yield* o.send(t, "codex, ack lost")).status).toBe("failed")
      const compacted = yield* o.compact(t)
      expect(compacted.deliveredItems).toBe(0)
      expect(h.providers.codex!.received.filter((x) => x.type === "inject")).toHaveLength(1)
      const next = yield* o.send(t, "go on")
      expect(next.status).toBe("completed")
      expect(next.nativeGeneration).toBe(2)
      expect(h.providers.codex!.received.filter((x) => x.type === "inject").map((x) => x.nativeRef)).toEqual(["codex-n1", "codex-n2"])
      expect(yield* o.check(t, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })
})

describe("malformed provider output never leaves a run running", () => {
  for (const [name, usage] of [
    ["NaN used", { usedTokens: Number.NaN }],
    ["negative used", { usedTokens: -5 }],
    ["fractional used", { usedTokens: 1234.5 }],
    ["negative max", { usedTokens: 10, maxTokens: -1 }]
  ] as const) {
    it.effect(`usage with ${name}: untrusted, the run completes with its output, the next turn works`, () => {
      const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* o.create("codex")
        h.script.enqueue(Harness.reply(10, usage))
        const r = yield* o.send(t, "hello")
        expect(r.status).toBe("completed")
        expect((yield* o.store.listItems(t)).map((i) => i.kind)).toEqual(["user_message", "assistant_message"])
        const event = (yield* o.store.listEvents(t)).find((e) => e.type === "usage.reported")
        expect(event?.payload.trusted).toBe(false)
        expect((yield* o.send(t, "again")).status).toBe("completed")
        expect(yield* o.check(t, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })
  }

  it.effect("an item with an unknown tool-call state or kind is recorded, normalized, not lost", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue({
        items: [
          { kind: "tool_call", text: "{}", toolCallId: "c1", toolName: "bash", messageId: "m1", isError: false, toolCallState: "weird" as never },
          { kind: "telepathy" as never, text: "hm", toolCallId: null, toolName: null, messageId: null, isError: false, toolCallState: null }
        ]
      })
      const r = yield* o.send(t, "hello")
      expect(r.status).toBe("completed")
      const items = yield* o.store.listItems(t)
      // The unknown state becomes null; the call, left without a result, is then closed as `dangling` (Interrupts.test.ts).
      expect(items.map((i) => [i.kind, i.toolCallState])).toEqual([
        ["user_message", null],
        ["tool_call", "dangling"],
        ["error", null],
        ["tool_result", null]
      ])
      expect(items[2]!.text).toBe(`unrecognised "telepathy" item from the provider: hm`)
    }).pipe(Effect.provide(h.layer))
  })
})

describe("a provider that lost the native thread does not wedge the thread", () => {
  for (const inject of [false, true]) {
    it.effect(`${inject ? "injecting" : "non-injecting"} provider: the turn retries on a replacement that is owed the history`, () => {
      const h = Harness.make([{ name: "claude", window: 200_000, inject }])
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* o.create("claude")
        h.script.enqueue(Harness.reply(100))
        yield* o.send(t, "before the provider restarted")
        h.providers.claude!.forgetThreads()
        const r = yield* o.send(t, "after it restarted")
        expect(r.status).toBe("completed")
        expect(r.nativeGeneration).toBe(2)
        expect(r.turnStart?.deliveredItems).toBe(2)
        const attempts = yield* o.store.listAttempts(r.runId as never)
        expect(attempts.map((a) => a.status)).toEqual(["failed", "completed"])
        expect((yield* o.send(t, "and later")).status).toBe("completed")
        expect(yield* o.check(t, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })
  }

  it.effect("/compact on a lost native thread reports it and the next turn recovers", () => {
    const h = Harness.make([{ name: "claude", window: 200_000, inject: false }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("claude")
      yield* o.send(t, "hello")
      h.providers.claude!.forgetThreads()
      const c = yield* o.compact(t)
      expect(c.compacted).toBe(false)
      expect(c.reason).toContain("the next turn starts a replacement native thread")
      const r = yield* o.send(t, "still there?")
      expect(r.status).toBe("completed")
      expect(r.nativeGeneration).toBe(2)
    }).pipe(Effect.provide(h.layer))
  })
})

describe("prompts are not changed on the way", () => {
  it.effect("a prompt that is not well-formed Unicode (lone surrogate) is rejected at the boundary, nothing written", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      // Built without validation, as a caller that skips the schema would: the service still checks it.
      const command = Commands.SendMessage.make({ commandId: "cmd_lone" as CommandId, threadId: t, text: "a\uD800b" }, true)
      const error = yield* Effect.flip(o.service.sendMessage(command))
      expect(error._tag).toBe("InvalidRequest")
      expect(error.message).toBe("the prompt is not well-formed Unicode: lone surrogate at index 1")
      expect(yield* o.store.listRuns(t)).toEqual([])
      expect(h.providers.codex!.received).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })
})
