/**
 * Regression (review): the same command id sent twice at the same moment (a client retry racing its original) got
 * `RunInProgress` or `ConcurrentModification` on Postgres, and a different payload under that id was not refused as
 * `InvalidRequest`: the receipt was read before the thread's lock was taken. It is read again under the lock now.
 */
import { Commands, type CommandId } from "@baton/contracts"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"

describe.each(Harness.dialects)("one command id sent twice at once on %s", (_label, db) => {
  it.live("the same message twice: both calls answer with the one run it queued; one run, one prompt", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const threadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(10))
      const command = Commands.SendMessage.make({ commandId: "cmd_same_1" as CommandId, threadId, text: "once" })
      const [a, b] = yield* Effect.all([o.service.sendMessage(command), o.service.sendMessage(command)], { concurrency: 2 })
      expect([a.runId, a.status]).toEqual([b.runId, "completed"])
      expect(b.status).toBe("completed")
      expect((yield* o.store.listRuns(threadId)).map((r) => r.prompt)).toEqual(["once"])
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.live("another message under the same id at once: one is queued, the other refused with IdempotencyKeyReused", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const threadId = yield* o.create("codex")
      const send = (text: string) =>
        Effect.either(o.service.enqueueMessage(Commands.SendMessage.make({ commandId: "cmd_same_2" as CommandId, threadId, text }), { queueBehind: true }))
      const outcomes = yield* Effect.all([send("first text"), send("second text")], { concurrency: 2 })
      const refused = outcomes.filter(Either.isLeft).map((e) => e.left._tag)
      expect(refused).toEqual(["IdempotencyKeyReused"])
      expect((yield* o.store.listRuns(threadId)).length).toBe(1)
    }).pipe(Effect.provide(h.layer))
  })
})
