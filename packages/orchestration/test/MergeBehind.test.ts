/**
 * Merge-backs behind unfinished runs of the parent (ThreadLineage.mergeBack's `behind`), attacked with
 * interrupts while queued, several merges behind one run, a message queued behind a merge, and a fork of the parent
 * while a merge is owed. Each ends with the record's invariants and the merged history delivered once.
 */
import { Commands, type CommandId, type RunId, type ThreadId } from "@baton/contracts"
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

const ops = Harness.ops
let n = 0
const cid = () => `mb-${++n}` as CommandId

const providers = () =>
  Harness.make([
    { name: "codex", window: 200_000, inject: true },
    { name: "claude", window: 200_000, inject: false }
  ])

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.effect("two merges behind a queued run interrupted while queued, a message queued between them: order kept, each once", () => {
    const h = providers()
    return Effect.gen(function*() {
      const o = yield* ops
      const parent = yield* o.create("codex")
      h.script.enqueue(Harness.reply(30))
      yield* o.send(parent, "p1")
      const forkA = (yield* o.fork(parent, { provider: "claude" })).threadId as ThreadId
      const forkB = (yield* o.fork(parent, { provider: "claude" })).threadId as ThreadId
      h.script.enqueue(Harness.reply(30))
      yield* o.send(forkA, "fork A works")
      h.script.enqueue(Harness.reply(30))
      yield* o.send(forkB, "fork B works")
      const enqueue = (text: string) =>
        o.service.enqueueMessage(Commands.SendMessage.make({ commandId: cid(), threadId: parent, text }), { queueBehind: true })
      const r2 = yield* enqueue("queued first")
      const m1 = yield* o.merge(forkA)
      expect(m1.behindRunId).toBe(r2.id)
      const r4 = yield* enqueue("queued between the merges")
      const m2 = yield* o.merge(forkB)
      expect(m2.behindRunId).toBe(r2.id)
      // r2 interrupted while queued: m1 is due (nothing unfinished ahead of it), m2 still owed behind r4.
      const stopped = yield* o.service.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId: parent, runId: r2.id }))
      expect(stopped.status).toBe("interrupted")
      expect((yield* o.store.listPromptOwedRuns(parent)).map((r) => r.id)).toEqual([m2.runId])
      h.script.enqueue(Harness.reply(20))
      const ran = yield* o.service.processRun(r4.id)
      expect(ran.status).toBe("completed")
      expect(yield* o.store.listPromptOwedRuns(parent)).toEqual([])
      const label = (id: RunId | null) =>
        id === r2.id ? "r2" : id === m1.runId ? "m1" : id === r4.id ? "r4" : id === m2.runId ? "m2" : "-"
      const tail = (yield* o.store.listItems(parent)).map((i) => [label(i.runId), i.kind]).filter(([l]) => l !== "-")
      expect(tail).toEqual([
        ["r2", "user_message"],
        ["m1", "handoff_marker"], ["m1", "user_message"], ["m1", "assistant_message"],
        ["r4", "user_message"], ["r4", "assistant_message"],
        ["m2", "handoff_marker"], ["m2", "user_message"], ["m2", "assistant_message"]
      ])
      const links = (yield* o.store.listLinks(parent)).filter((l) => l.kind === "merge")
      expect(links.every((l) => l.handoffId !== null)).toBe(true)
      expect((yield* o.store.listHandoffs(parent)).filter((x) => x.kind === "merge").length).toBe(2)
      h.script.enqueue(Harness.reply(20))
      yield* o.send(parent, "after both merges")
      h.script.enqueue(Harness.reply(20))
      yield* o.send(parent, "and once more")
      const injected = h.providers.codex!.received.flatMap((r) => r.type === "inject" ? [r.rendered] : [])
      expect(injected.filter((t) => t.includes("fork B works")).length).toBe(1)
      expect(injected.filter((t) => t.includes("fork A works")).length).toBe(1)
      expect(yield* o.check(parent, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("a merge behind a queued run that then fails at turn start: its copies are recorded, delivered next turn", () => {
    // codex refuses its second turn (the queued run's): it fails before the provider reads the prompt.
    const h = Harness.make([
      { name: "codex", window: 200_000, inject: true, faults: (c) => c.operation === "startTurn" && c.call === 2 ? "refuse" : null },
      { name: "claude", window: 200_000, inject: false }
    ])
    return Effect.gen(function*() {
      const o = yield* ops
      const parent = yield* o.create("codex")
      h.script.enqueue(Harness.reply(30))
      yield* o.send(parent, "p1")
      const fork = (yield* o.fork(parent, { provider: "claude" })).threadId as ThreadId
      h.script.enqueue(Harness.reply(30))
      yield* o.send(fork, "fork works")
      const r2 = yield* o.service.enqueueMessage(Commands.SendMessage.make({ commandId: cid(), threadId: parent, text: "x" }))
      const m = yield* o.merge(fork)
      expect(m.behindRunId).toBe(r2.id)
      // A fork of the parent while the merge is owed: at most through the last ended run, never the empty merge run.
      const f2 = yield* o.fork(parent)
      expect(f2.atRunSeq).toBe(1)
      const failed = yield* o.service.processRun(r2.id)
      expect(["failed", "interrupted"]).toContain(failed.status)
      expect(yield* o.store.listPromptOwedRuns(parent)).toEqual([])
      expect((yield* o.store.listItemsOfRuns([m.runId as RunId])).length).toBe(m.itemCount + 1)
      h.script.enqueue(Harness.reply(20))
      yield* o.send(parent, "next")
      const injected = h.providers.codex!.received.flatMap((r) => r.type === "inject" ? [r.rendered] : [])
      expect(injected.filter((t) => t.includes("fork works")).length).toBe(1)
      expect(yield* o.check(parent, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })
})
