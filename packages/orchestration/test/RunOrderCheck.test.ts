/**
 * InvariantChecks' run-order check (no item of a run follows an item of a later run) on records altered the way a
 * misorder would leave them. Its exemption for output recorded after its run ended is for a turn the provider never
 * stopped (`run.interrupted`, `run.failed`): output of a run recorded after its `run.completed`, behind a later run's
 * items, is a misorder and is reported (review r36q: the exemption counted `run.completed` as an end too, so such a
 * record passed).
 */
import { type CommandId, Commands, type ThreadEvent, type ThreadId } from "@baton/contracts"
import { InvariantChecks, RunDriver, ThreadService } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"

let n = 0
const cid = () => `cmd_runorder_${++n}` as CommandId

describe("InvariantChecks run-order", () => {
  it.live("a completed run's output recorded after its end, behind the next run's items, is reported", () => {
    const h = Harness.make([{ name: "claude", window: 200_000, inject: false }])
    const layer = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))
    return Effect.gen(function*() {
      const service = yield* ThreadService.ThreadService
      const driver = yield* RunDriver.RunDriver
      const threadId: ThreadId = yield* service.createThread(Commands.CreateThread.make({
        commandId: cid(),
        title: "run order",
        providerInstance: "claude" as Commands.CreateThread["providerInstance"]
      }))
      for (const text of ["First", "Second"]) {
        h.script.enqueue({ items: [Harness.produced("assistant_message", `${text} answered.`, { messageId: `msg_${text}` })] })
        const sent = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text }))
        expect((yield* driver.awaitRun(sent.runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")
      }
      const record = yield* InvariantChecks.readRecord(threadId)
      expect(InvariantChecks.checkRecord(record)).toEqual([])
      expect(record.items.map((i) => i.text)).toEqual(["First", "First answered.", "Second", "Second answered."])

      // The first run's answer recorded last: after the first run's `run.completed` and the second run's items.
      const moved = record.items[1]!
      const items = [record.items[0]!, record.items[2]!, record.items[3]!, moved].map((i, k) => ({ ...i, seq: k + 1 }))
      const appended = record.events.find((e) => e.type === "items.appended" && e.payload.itemIds.includes(moved.id))!
      const last = record.events.at(-1)!.seq
      const events: ReadonlyArray<ThreadEvent> = [...record.events.filter((e) => e !== appended), { ...appended, seq: last + 1 }]
      const violations = InvariantChecks.checkRecord({ ...record, items, events })
      expect(violations.filter((v) => v.startsWith("run-order:"))).toHaveLength(1)
    }).pipe(Effect.scoped, Effect.provide(layer))
  })
})

// A merge-back written while a run of the parent was in progress took seqs inside that run's span, between its prompt
// and its answer (review: the record read as if the model had seen the merged history before it answered). Its
// copies are now recorded after the run ahead ends (ThreadLineage); the check had exempted copied history, so the old
// record passed it. Here the fixed record passes, and the same record with the merge's items moved inside the run's
// span — the old behaviour's — is reported; so is a merge whose owed copies were never recorded.
describe("InvariantChecks run-order: a merge-back inside a run's span", () => {
  it.effect("merge items between a run's prompt and its answer are reported; a merge that never got its copies too", () => {
    const h = Harness.make([{ name: "claude", window: 200_000, inject: false }])
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const parent = yield* o.create("claude")
      h.script.enqueue(Harness.reply(20))
      yield* o.send(parent, "parent first")
      const forkId = (yield* o.fork(parent)).threadId as ThreadId
      h.script.enqueue(Harness.reply(20))
      yield* o.send(forkId, "fork finds the bug")
      const queued = yield* o.service.enqueueMessage(Commands.SendMessage.make({ commandId: cid(), threadId: parent, text: "parent second" }))
      const merged = yield* o.merge(forkId)
      h.script.enqueue(Harness.reply(20))
      yield* o.service.processRun(queued.id)

      const record = yield* InvariantChecks.readRecord(parent)
      expect(InvariantChecks.checkRecord(record)).toEqual([])
      const ofRun = (runId: string | null) => runId === queued.id ? "queued" : runId === merged.runId ? "merge" : "first"
      expect(record.items.map((i) => ofRun(i.runId))).toEqual(["first", "first", "queued", "queued", "merge", "merge", "merge"])

      // The old record: the merge's marker and copies between the queued run's prompt and its answer.
      const [p1, a1, p2, a2, ...copies] = record.items
      const old = [p1!, a1!, p2!, ...copies, a2!].map((i, k) => ({ ...i, seq: k + 1 }))
      const violations = InvariantChecks.checkRecord({ ...record, items: old })
      expect(violations.filter((v) => v.startsWith("run-order:"))).toEqual([
        `run-order: item ${a2!.id} (assistant_message, seq 7) of run seq 2 follows item seq 4 of run seq 3`
      ])

      // A merge whose owed copies were lost (never recorded though the run ahead has ended).
      const lost = InvariantChecks.checkRecord({ ...record, items: record.items.filter((i) => i.runId !== merged.runId) })
      expect(lost.filter((v) => v.startsWith("nothing-lost: merge"))).toEqual([
        `nothing-lost: merge ${record.links.find((l) => l.kind === "merge")!.id} (run seq 3) holds 0 items, 2 copies and a marker owed`
      ])
    }).pipe(Effect.provide(h.layer))
  })
})
