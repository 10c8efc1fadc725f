import { Commands, type CommandId, type RunId, type ThreadId } from "@baton/contracts"
import { RunDriver } from "@baton/orchestration"
import { ThreadEventBus } from "@baton/persistence"
import type { ProviderAdapter } from "@baton/providers"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Layer, Queue, Stream } from "effect"

let n = 0
const cid = () => `cmd_driver_${++n}` as CommandId
const send = (threadId: ThreadId, text: string) => Commands.SendMessage.make({ commandId: cid(), threadId, text })

/** A codex adapter that holds every turn open until the test opens the gate, reporting each run it entered. */
const holding = (h: Harness.Harness) =>
  Effect.gen(function*() {
    const entered = yield* Queue.unbounded<string>()
    const gate = yield* Deferred.make<void>()
    const codex = h.providers.codex!
    const held: ProviderAdapter.ProviderAdapterShape = {
      ...codex,
      startTurn: (input) =>
        Stream.unwrap(Effect.as(
          Effect.zipRight(Queue.offer(entered, input.runId), Deferred.await(gate)),
          codex.startTurn(input)
        ))
    }
    return { entered, gate, held }
  })

describe.each(Harness.dialects)("run driver on %s", (_label, db) => {
  it.live("a send returns its queued run at once while the provider holds the turn; later sends queue behind and run in order", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const { entered, gate, held } = yield* holding(h)
      const layer = RunDriver.RunDriver.Default.pipe(
        Layer.provideMerge(Harness.makeLayer([held], h.counter, db, {}, "d1"))
      )
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const driver = yield* RunDriver.RunDriver
        const bus = yield* ThreadEventBus
        const events = yield* Queue.unbounded<string>()
        const subscription = yield* bus.subscribe
        yield* Effect.forkScoped(Stream.fromQueue(subscription).pipe(Stream.runForEach((e) => Queue.offer(events, `${e.type}:${String((e.payload as { runId?: unknown }).runId ?? "")}`))))
        const threadId = yield* o.create("codex")
        for (let i = 0; i < 3; i++) h.script.enqueue(Harness.reply(10))
        const first = yield* driver.submit(send(threadId, "first"))
        expect(first).toMatchObject({ runSeq: 1, status: "queued" })
        // The provider has the turn and holds it: the run is running, the send has long returned.
        expect(yield* Queue.take(entered)).toBe(first.runId)
        expect((yield* o.store.getRun(first.runId)).pipe((r) => r._tag === "Some" ? r.value.status : null)).toBe("running")
        const second = yield* driver.submit(send(threadId, "second"))
        const third = yield* driver.submit(send(threadId, "third"))
        expect([second.runSeq, third.runSeq, second.status, third.status]).toEqual([2, 3, "queued", "queued"])
        yield* Deferred.succeed(gate, undefined)
        const results = yield* Effect.forEach([first, second, third], (r) => driver.awaitRun(r.runId))
        expect(results.map((r) => [r.runSeq, r.status])).toEqual([[1, "completed"], [2, "completed"], [3, "completed"]])
        // Each run started only after the previous one completed (one at a time, in seq order).
        const order = (yield* o.store.listEvents(threadId)).filter((e) => e.type === "run.started" || e.type === "run.completed")
          .map((e) => `${e.type}:${String(e.payload.runId)}`)
        expect(order).toEqual([first, second, third].flatMap((r) => [`run.started:${r.runId}`, `run.completed:${r.runId}`]))
        // The live stream saw the same events, after their transactions committed.
        const live: Array<string> = []
        while (live.filter((l) => l.startsWith("run.completed")).length < 3) live.push(yield* Queue.take(events))
        expect(live.filter((l) => l.startsWith("run.started") || l.startsWith("run.completed"))).toEqual(
          [first, second, third].flatMap((r) => [`run.started:${r.runId}`, `run.completed:${r.runId}`])
        )
        expect(yield* o.check(threadId, h)).toEqual([])
      }).pipe(Effect.scoped, Effect.provide(layer))
    })
  })

  it.live("an interrupt of a held turn ends the run interrupted, and the queued run behind it runs next", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const { entered, gate, held } = yield* holding(h)
      const layer = RunDriver.RunDriver.Default.pipe(
        Layer.provideMerge(Harness.makeLayer([held], h.counter, db, { interruptTimeoutMillis: 200 }, "d2"))
      )
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const driver = yield* RunDriver.RunDriver
        const threadId = yield* o.create("codex")
        h.script.enqueue(Harness.reply(10))
        const first = yield* driver.submit(send(threadId, "long turn"))
        expect(yield* Queue.take(entered)).toBe(first.runId)
        const second = yield* driver.submit(send(threadId, "next"))
        const interrupted = yield* driver.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: first.runId }))
        expect(interrupted.status).toBe("interrupted")
        yield* Deferred.succeed(gate, undefined)
        h.script.enqueue(Harness.reply(10))
        const next = yield* driver.awaitRun(second.runId)
        expect(next).toMatchObject({ runSeq: 2, status: "completed" })
        expect((yield* o.store.getRun(first.runId as RunId)).pipe((r) => r._tag === "Some" ? r.value.status : null)).toBe("interrupted")
        // The interrupted fiber never wrote the attempt's outcome: the interrupt did (no attempt is left running).
        expect((yield* o.store.listAttempts(first.runId)).map((a) => a.status)).toEqual(["interrupted"])
        expect(yield* o.check(threadId, h)).toEqual([])
      }).pipe(Effect.scoped, Effect.provide(layer))
    })
  })
})
