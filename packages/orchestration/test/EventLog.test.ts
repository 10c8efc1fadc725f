/** The thread event log as the orchestrator writes it: items.appended, causing command ids, event ids. */
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

const ops = Harness.ops

describe("the event log of a thread", () => {
  it.effect("every item appended is announced once by items.appended, in order, with its run and seqs", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue({
        items: [
          ...Harness.reply(10).items,
          { ...Harness.reply(5).items[0]!, kind: "reasoning" as const }
        ]
      })
      const r = yield* o.send(t, "hello")
      expect(r.status).toBe("completed")
      const items = yield* o.store.listItems(t)
      const events = yield* o.store.listEvents(t)
      const appended = events.filter((e) => e.type === "items.appended")
      // The prompt when the run is queued, then each item of the turn's output as it streamed in.
      expect(appended.map((e) => e.payload)).toEqual([
        { runId: r.runId, itemIds: [items[0]!.id], fromSeq: 1, toSeq: 1 },
        { runId: r.runId, itemIds: [items[1]!.id], fromSeq: 2, toSeq: 2 },
        { runId: r.runId, itemIds: [items[2]!.id], fromSeq: 3, toSeq: 3 }
      ])
      expect(items.map((i) => i.kind)).toEqual(["user_message", "assistant_message", "reasoning"])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("events carry the command that caused them; ids come from the IdGenerator (sequential here)", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue(Harness.reply(10))
      yield* o.send(t, "hello")
      const events = yield* o.store.listEvents(t)
      const created = events.find((e) => e.type === "thread.created")!
      const queued = events.find((e) => e.type === "run.queued")!
      const completed = events.find((e) => e.type === "run.completed")!
      expect(created.commandId).toMatch(/^cmd_\d+$/)
      expect(queued.commandId).toMatch(/^cmd_\d+$/)
      expect(queued.commandId).not.toBe(created.commandId)
      expect(completed.commandId).toBeNull()
      expect(events.map((e) => e.eventId)).toEqual(events.map((_, i) => `evt_${String(i + 1).padStart(6, "0")}`))
      expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1))
    }).pipe(Effect.provide(h.layer))
  })
})
