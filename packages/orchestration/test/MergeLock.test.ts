/**
 * Regression (review): a merge-back ran under the fork's lock only, but writes a run, items, a handoff and events
 * into the parent; raced against sends queued on the parent it lost with ConcurrentModification (30 of 80 commands
 * on Postgres). With the parent's lock taken too, every command of the race succeeds.
 */
import { Commands, type CommandId, type ThreadId } from "@baton/contracts"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit } from "effect"

let n = 0
const cid = () => `cmd_ml_${++n}` as CommandId

describe.each(Harness.dialects)("merge-back racing sends on the parent on %s", (_label, db) => {
  it.live("10 rounds of a merge and 3 queued sends at once: all succeed, each merge recorded once, the parent's runs gap-free", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const parent = yield* o.create("codex")
      for (let i = 0; i < 40; i++) h.script.enqueue(Harness.reply(5))
      yield* o.send(parent, "p1")
      const fork = yield* o.fork(parent)
      const failures: Array<string> = []
      for (let round = 0; round < 10; round++) {
        yield* o.send(fork.threadId as ThreadId, `fork work ${round}`)
        const merge = Effect.asVoid(o.service.mergeBack(Commands.MergeBack.make({ commandId: cid(), forkThreadId: fork.threadId as ThreadId })))
        const sends = [0, 1, 2].map((k) => Effect.asVoid(o.service.enqueueMessage(
          Commands.SendMessage.make({ commandId: cid(), threadId: parent, text: `parent ${round}.${k}` }),
          { queueBehind: true }
        )))
        const exits = yield* Effect.forEach([merge, ...sends], Effect.exit, { concurrency: "unbounded" })
        for (const e of exits) if (Exit.isFailure(e)) failures.push(String(e.cause))
      }
      expect(failures).toEqual([])
      const merges = (yield* o.store.listEvents(parent)).filter((e) => e.type === "thread.merged")
      expect(merges.length).toBe(10)
      const runs = yield* o.store.listRuns(parent)
      expect(runs.map((r) => r.seq)).toEqual(runs.map((_, i) => i + 1))
    }).pipe(Effect.provide(h.layer))
  })
})
