import type { ThreadId } from "@baton/contracts"
import { Harness } from "@baton/testing"
import { describe, expect, it, beforeAll } from "@effect/vitest"
import { Effect, Option } from "effect"

/** A reply of one assistant message under the provider message id `messageId`. */
const replyWithId = (messageId: string, text: string) => ({
  items: [{ kind: "assistant_message" as const, text, toolCallId: null, toolName: null, messageId, isError: false, toolCallState: null }]
})

const withFile = Harness.withDbFile

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  describe("resuming a native thread after a restart", () => {
    it.live("never records the provider's replayed history as new items", () =>
      withFile((file) =>
        Effect.gen(function*() {
          const h = Harness.make([{ name: "codex", window: 200_000, inject: true, replayOnResume: true }], { db: file })
          const threadId = yield* Effect.gen(function*() {
            const o = yield* Harness.ops
            const t = yield* o.create("codex")
            h.script.enqueue(replyWithId("msg_1", "first answer"))
            yield* o.send(t, "first question")
            h.script.enqueue(replyWithId("msg_2", "second answer"))
            yield* o.send(t, "second question")
            return t
          }).pipe(Effect.provide(h.layer))

          // A new process on the same file, talking to the same provider (its session survived the restart).
          const restarted = Harness.makeLayer(Object.values(h.providers), h.counter, file, {}, "p2_")
          yield* Effect.gen(function*() {
            const o = yield* Harness.ops
            h.script.enqueue(replyWithId("msg_3", "third answer"))
            const third = yield* o.send(threadId as ThreadId, "third question")
            expect(third.status).toBe("completed")
            // Resumed, not replaced: the same native thread, generation 1.
            expect(third.nativeGeneration).toBe(1)
            const items = yield* o.store.listItems(threadId)
            expect(items.map((i) => i.text)).toEqual([
              "first question", "first answer", "second question", "second answer", "third question", "third answer"
            ])
            const skipped = (yield* o.store.listEvents(threadId)).filter((e) => e.type === "items.replay_skipped")
            expect(skipped.map((e) => e.payload)).toEqual([{ runId: third.runId, count: 2, messageIds: ["msg_1", "msg_2"], toolCallIds: [] }])
            expect(yield* o.check(threadId, h)).toEqual([])
          }).pipe(Effect.provide(restarted))
        })
      ))

    // Tester r36: an OpenAI-compatible server that reuses its response id and answers the same text again had the
    // first answer after a restart skipped as a replay of the earlier one (`items.replay_skipped`, the run completed
    // with no item): a stateless model API's resume re-reads nothing, so it opens no replay window.
    it.live("a provider whose resume cannot replay (a model API): an answer equal to an earlier one, same id, is recorded", () =>
      withFile((file) =>
        Effect.gen(function*() {
          const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db: file })
          const stateless = { ...h.providers.codex!, resumeMayReplay: false }
          const threadId = yield* Effect.gen(function*() {
            const o = yield* Harness.ops
            const t = yield* o.create("codex")
            h.script.enqueue(replyWithId("x", "ok"))
            yield* o.send(t, "first question")
            return t
          }).pipe(Effect.provide(Harness.makeLayer([stateless], h.counter, file, {})))
          yield* Effect.gen(function*() {
            const o = yield* Harness.ops
            h.script.enqueue(replyWithId("x", "ok"))
            const again = yield* o.send(threadId, "first question")
            expect(again.status).toBe("completed")
            expect(again.nativeGeneration).toBe(1)
            const items = yield* o.store.listItems(threadId)
            expect(items.map((i) => [i.kind, i.text])).toEqual([
              ["user_message", "first question"], ["assistant_message", "ok"], ["user_message", "first question"], ["assistant_message", "ok"]
            ])
            expect((yield* o.store.listEvents(threadId)).filter((e) => e.type === "items.replay_skipped")).toEqual([])
            expect(yield* o.check(threadId, h)).toEqual([])
          }).pipe(Effect.provide(Harness.makeLayer([stateless], h.counter, file, {}, "p2_")))
        })
      ))

    it.live("a provider that lost the session on restart gets a replacement native thread owed the whole history", () =>
      withFile((file) =>
        Effect.gen(function*() {
          const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db: file })
          const threadId = yield* Effect.gen(function*() {
            const o = yield* Harness.ops
            const t = yield* o.create("codex")
            h.script.enqueue(Harness.reply(30))
            yield* o.send(t, "before the restart")
            return t
          }).pipe(Effect.provide(h.layer))
          h.providers.codex!.forgetThreads()
          yield* Effect.gen(function*() {
            const o = yield* Harness.ops
            h.script.enqueue(Harness.reply(30))
            const after = yield* o.send(threadId, "after the restart")
            expect(after.status).toBe("completed")
            expect(after.nativeGeneration).toBe(2)
            expect(after.turnStart).toMatchObject({ mode: "injected", deliveredItems: 2 })
            const replaced = (yield* o.store.listEvents(threadId)).filter((e) => e.type === "native_thread.replaced")
            expect(replaced.map((e) => e.payload.reason)).toEqual(["the provider no longer has the native thread (resume failed)"])
            // One attempt: the loss was found before the turn, not by a failed turn.
            const run = Option.getOrThrow(yield* o.store.getRun(after.runId as never))
            expect((yield* o.store.listAttempts(run.id)).length).toBe(1)
            expect(yield* o.check(threadId, h)).toEqual([])
          }).pipe(Effect.provide(Harness.makeLayer(Object.values(h.providers), h.counter, file, {}, "p2_")))
        })
      ))
  })
})
