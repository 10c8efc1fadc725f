import { Commands, type CommandId, ProviderError, type RunId, type ThreadId } from "@baton/contracts"
import { RunDriver, ThreadService } from "@baton/orchestration"
import { Database, ThreadEventBus, ThreadStore } from "@baton/persistence"
import type { ProviderAdapter } from "@baton/providers"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Context, Deferred, Effect, Exit, Fiber, Layer, Option, Queue, Scope, Stream } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

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
  // Regression (review): a caller that gave up waiting deleted the shared waiter entry; the other caller never woke.
  it.live("one caller of awaitRun giving up leaves the others waiting: they get the result when the run ends", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const { entered, gate, held } = yield* holding(h)
      const layer = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([held], h.counter, db, {}, "w")))
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const driver = yield* RunDriver.RunDriver
        const threadId = yield* o.create("codex")
        h.script.enqueue(Harness.reply(10))
        const accepted = yield* driver.submit(send(threadId, "hold on"))
        expect(yield* Queue.take(entered)).toBe(accepted.runId)
        const patient = yield* Effect.fork(driver.awaitRun(accepted.runId))
        const impatient = yield* Effect.option(driver.awaitRun(accepted.runId).pipe(Effect.timeout("50 millis")))
        expect(Option.isNone(impatient)).toBe(true)
        yield* Deferred.succeed(gate, undefined)
        const answer = yield* Fiber.join(patient).pipe(Effect.timeout("10 seconds"))
        expect(answer).toMatchObject({ runId: accepted.runId, status: "completed" })
        expect(answer.turnStart).not.toBeNull()
      }).pipe(Effect.scoped, Effect.provide(layer))
    })
  })

  // Regression (review): a run failed at turn start was ended outside a unit of work, so `run.failed` was stored but
  // never published (and written without the thread's lock).
  // Regression (review r21): the thread's worker, still looping after the run before, read a run just claimed at its
  // queueing before `submit` had handed it over (the claim committed, the hand-over a moment later): it took the run
  // for another driver's and waited for it to end, but the driver was this one, alive, so the run stayed `starting`
  // and the thread was stuck for good.
  it.live("a run claimed at its queueing that the thread's worker reads before the hand-over is still driven", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const { entered, gate, held } = yield* holding(h)
      const base = Harness.makeLayer([held], h.counter, db, {}, "rc")
      // The worker's next look for the thread's first run waits for `look`; the next queueing hands its run over only
      // at `handOver` (after its transaction committed, which `committed` says).
      const armed = { find: false, queue: false }
      const look = yield* Deferred.make<void>()
      const looking = yield* Deferred.make<void>()
      const committed = yield* Deferred.make<void>()
      const handOver = yield* Deferred.make<void>()
      const store = Layer.effect(ThreadStore, Effect.map(ThreadStore, (s) => ({
        ...s,
        findFirstUnfinishedRun: (threadId: ThreadId) =>
          Effect.suspend(() => {
            if (!armed.find) return s.findFirstUnfinishedRun(threadId)
            armed.find = false
            return Effect.zipRight(Effect.zipRight(Deferred.succeed(looking, undefined), Deferred.await(look)), s.findFirstUnfinishedRun(threadId))
          })
      })))
      const threads = Layer.effect(ThreadService.ThreadService, Effect.map(ThreadService.ThreadService, (t) => ThreadService.ThreadService.make({
        ...t,
        queueForDriver: (command: Commands.SendMessage) =>
          Effect.tap(t.queueForDriver(command), () => {
            if (!armed.queue) return Effect.void
            armed.queue = false
            return Effect.zipRight(Deferred.succeed(committed, undefined), Deferred.await(handOver))
          })
      })))
      const layer = RunDriver.RunDriver.Default.pipe(Layer.provide(Layer.merge(store, threads)), Layer.provideMerge(base))
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const driver = yield* RunDriver.RunDriver
        const threadId = yield* o.create("codex")
        for (let i = 0; i < 2; i++) h.script.enqueue(Harness.reply(10))
        const first = yield* driver.submit(send(threadId, "first"))
        expect(yield* Queue.take(entered)).toBe(first.runId)
        // The first run ends; the worker's next look waits.
        armed.find = true
        yield* Deferred.succeed(gate, undefined)
        yield* Deferred.await(looking)
        expect(yield* driver.awaitRun(first.runId)).toMatchObject({ status: "completed" })
        // The second run is queued and claimed (the thread is idle) but not handed over yet; the worker looks now.
        armed.queue = true
        const second = yield* Effect.fork(driver.submit(send(threadId, "second")))
        yield* Deferred.await(committed)
        yield* Deferred.succeed(look, undefined)
        yield* Effect.sleep("100 millis")
        yield* Deferred.succeed(handOver, undefined)
        const accepted = yield* Fiber.join(second)
        expect(accepted.status).toBe("starting")
        const result = yield* driver.awaitRun(accepted.runId).pipe(Effect.timeout("5 seconds"))
        expect(result).toMatchObject({ runId: accepted.runId, status: "completed" })
        expect(yield* o.check(threadId, h)).toEqual([])
      }).pipe(Effect.scoped, Effect.provide(layer))
    })
  })

  // Regression (review r21): a run claimed at its queueing and interrupted before the thread's worker took it (an
  // interrupt right after the 202) ended `interrupted`, but its hand-over stayed in the driver for good (never driven,
  // never dropped: one per such run for the life of the process).
  it.live("a run claimed at its queueing and interrupted before the worker takes it leaves nothing behind in the driver", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const base = Harness.makeLayer([h.providers.codex!], h.counter, db, {}, "ri")
      // The worker's first look for the thread's first run waits for `look`.
      const look = yield* Deferred.make<void>()
      const looked = yield* Deferred.make<void>()
      let armed = true
      const store = Layer.effect(ThreadStore, Effect.map(ThreadStore, (s) => ({
        ...s,
        findFirstUnfinishedRun: (threadId: ThreadId) =>
          Effect.suspend(() => {
            if (!armed) return s.findFirstUnfinishedRun(threadId)
            armed = false
            return Effect.zipRight(Deferred.await(look), Effect.tap(s.findFirstUnfinishedRun(threadId), () => Deferred.succeed(looked, undefined)))
          })
      })))
      const layer = RunDriver.RunDriver.Default.pipe(Layer.provide(store), Layer.provideMerge(base))
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const driver = yield* RunDriver.RunDriver
        const threadId = yield* o.create("codex")
        const accepted = yield* driver.submit(send(threadId, "never mind"))
        expect(accepted.status).toBe("starting")
        expect(driver.claimedPending()).toEqual([accepted.runId])
        const stopped = yield* driver.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: accepted.runId }))
        expect(stopped.status).toBe("interrupted")
        yield* Deferred.succeed(look, undefined)
        yield* Deferred.await(looked)
        expect(yield* driver.awaitRun(accepted.runId)).toMatchObject({ status: "interrupted" })
        expect(driver.claimedPending()).toEqual([])
        expect(yield* o.check(threadId, h)).toEqual([])
      }).pipe(Effect.scoped, Effect.provide(layer))
    })
  })

  it.live("a run failed at turn start (the provider cannot start a native thread): run.failed reaches the event bus", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    const codex = h.providers.codex!
    const broken: ProviderAdapter.ProviderAdapterShape = {
      ...codex,
      startThread: () => Effect.fail(new ProviderError({ provider: codex.instance, operation: "startThread", code: "unavailable", reason: "down", retryable: true }))
    }
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const bus = yield* ThreadEventBus
      const subscription = yield* bus.subscribe
      const threadId = yield* o.create("codex")
      const result = yield* o.send(threadId, "hello")
      expect([result.status, result.failureCode]).toEqual(["failed", "provider_unavailable"])
      const published = Chunk.toArray(yield* Queue.takeAll(subscription)).filter((e) => e.threadId === threadId).map((e) => e.type)
      const stored = (yield* o.store.listEvents(threadId)).map((e) => e.type)
      expect(stored).toContain("run.failed")
      expect(published.filter((t) => t !== "thread.created" && t !== "provider_thread.created")).toEqual(
        stored.filter((t) => t !== "thread.created" && t !== "provider_thread.created")
      )
    }).pipe(Effect.scoped, Effect.provide(Harness.makeLayer([broken], h.counter, db, {}, "f")))
  })

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
        // Sent to an idle thread: claimed in its queueing unit of work (this driver's at once).
        expect(first).toMatchObject({ runSeq: 1, status: "starting" })
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

describe.each(Harness.dialects)("two run drivers on one database (%s)", (_label, db) => {
  /** A database two Layer builds share: a SQLite file in a temporary directory, or a fresh Postgres schema. */
  const shared = <A, E, R>(f: (db: string) => Effect.Effect<A, E, R>) =>
    db === Harness.postgres
      ? Effect.scoped(Effect.flatMap(Database.PgSchemaUrl, f).pipe(Effect.provide(Database.layerPgSchema())))
      : Effect.acquireUseRelease(
        Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-driver-"))),
        (dir) => f(Path.join(dir, "baton.sqlite")),
        (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
      )

  // Regression: awaitRun in driver A waited on a deferred only A's own worker settles, while driver B drove the run:
  // A's worker saw the run running elsewhere, waited, found nothing left and stopped, and awaitRun never returned.
  it.live("awaitRun returns when another driver ran the run, while this driver had a worker on the thread", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return shared((file) =>
      Effect.gen(function*() {
        const { entered, gate, held } = yield* holding(h)
        // A's adapter reports the runs it enters too: on a loaded machine A's worker, polling behind run 1, may take
        // run 2 before B's does (then this run does not exercise the regression, but it does not hang either).
        const codex = h.providers.codex!
        const reporting: ProviderAdapter.ProviderAdapterShape = {
          ...codex,
          startTurn: (input) => Stream.unwrap(Effect.as(Queue.offer(entered, input.runId), codex.startTurn(input)))
        }
        const layerA = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([reporting], h.counter, file, {}, "a")))
        const layerB = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([held], h.counter, file, {}, "b")))
        const contextA = yield* Layer.build(layerA)
        const contextB = yield* Layer.build(layerB)
        const a = Context.get(contextA, RunDriver.RunDriver)
        const b = Context.get(contextB, RunDriver.RunDriver)
        const threadId = yield* Effect.provide(Effect.flatMap(Harness.ops, (o) => o.create("codex")), contextA)
        // B drives run 1 and holds it; A queues run 2 behind it (A's worker waits for run 1, driven by B).
        const first = yield* b.submit(send(threadId, "first"))
        expect(yield* Queue.take(entered)).toBe(first.runId)
        const second = yield* a.submit(send(threadId, "second"))
        const waited = yield* Effect.fork(a.awaitRun(second.runId))
        // B's worker takes run 2 as soon as run 1 ends (A's worker is asleep in its poll).
        yield* Deferred.succeed(gate, undefined)
        const entered2 = yield* Queue.take(entered)
        expect(entered2).toBe(second.runId)
        const result = yield* Fiber.join(waited).pipe(Effect.timeout("10 seconds"))
        expect(result).toMatchObject({ runId: second.runId, runSeq: 2, status: "completed" })
        expect(yield* Effect.provide(Effect.flatMap(Harness.ops, (o) => o.check(threadId, h)), contextA)).toEqual([])
      }).pipe(Effect.scoped))
  })

  // Issue 7: an interrupt of a run that another live driver drives is that driver's to carry out (its fiber, its
  // adapter); the driver receiving it records the request and waits, and stops the run itself only once that driver
  // is gone (its runs stay reconcilable). Before, it ended the run at once, the other driver's turn still in flight.
  it.live("an interrupt of a run another live driver drives waits for it; when that driver goes away, it stops the run itself", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return shared((file) =>
      Effect.gen(function*() {
        const { entered, held } = yield* holding(h)
        // A drives run 1 without a run driver (nothing there reads interrupts asked elsewhere), its turn held.
        const scopeA = yield* Scope.make()
        const contextA = yield* Layer.buildWithScope(Harness.makeLayer([held], h.counter, file, {}, "a"), scopeA)
        const contextB = yield* Layer.build(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([h.providers.codex!], h.counter, file, {}, "b"))))
        const b = Context.get(contextB, RunDriver.RunDriver)
        const o = yield* Effect.provide(Harness.ops, contextB)
        const threadId = yield* o.create("codex")
        yield* Effect.fork(Effect.provide(Effect.flatMap(ThreadService.ThreadService, (s) => s.sendMessage(send(threadId, "first"))), contextA))
        const runId = (yield* Queue.take(entered)) as RunId
        const interrupting = yield* Effect.fork(b.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId })))
        // B records the request and leaves the run running for A.
        while ((yield* o.store.runsInterruptRequested([runId])).length === 0 && interrupting.unsafePoll() === null) yield* Effect.sleep("5 millis")
        expect(Option.getOrThrow(yield* o.store.getRun(runId)).status).toBe("running")
        expect(interrupting.unsafePoll()).toBeNull()
        // A goes away without ending it (its Layer released; its turn never returns): B stops the run itself.
        yield* Scope.close(scopeA, Exit.void)
        const interrupted = yield* Fiber.join(interrupting)
        expect(interrupted).toMatchObject({ id: runId, status: "interrupted", failureCode: "interrupted_by_user" })
        // The thread goes on.
        h.script.enqueue(Harness.reply(10))
        const second = yield* b.submit(send(threadId, "second"))
        expect(yield* b.awaitRun(second.runId)).toMatchObject({ runSeq: 2, status: "completed" })
        expect(yield* Effect.provide(o.check(threadId, h), contextB)).toEqual([])
      }).pipe(Effect.scoped))
  })

  // A run whose turn fiber died (a defect) stayed `running`, its driver alive but driving it no more: the thread's
  // worker waited behind it (a live driver's run) and restart recovery left it alone (a live driver's), so every
  // message after it queued forever unless the user interrupted it or the process restarted (review r41 made such a
  // run interruptible from another process; this ends it where it died).
  it.live("a run whose turn died in its live driver is ended there (failed, turn_crashed) and the runs queued behind it run", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return shared((file) =>
      Effect.gen(function*() {
        const entered = yield* Queue.unbounded<string>()
        const codex = h.providers.codex!
        let dies = 1
        const dying: ProviderAdapter.ProviderAdapterShape = {
          ...codex,
          startTurn: (input) =>
            Stream.unwrap(Effect.zipRight(
              Queue.offer(entered, input.runId),
              dies-- > 0 ? Effect.dieMessage("adapter bug") : Effect.succeed(codex.startTurn(input))
            ))
        }
        const context = yield* Layer.build(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([dying], h.counter, file, {}, "a"))))
        const driver = Context.get(context, RunDriver.RunDriver)
        const o = yield* Effect.provide(Harness.ops, context)
        const threadId = yield* o.create("codex")
        const first = yield* driver.submit(send(threadId, "first"))
        h.script.enqueue(Harness.reply(10))
        const second = yield* driver.submit(send(threadId, "second"))
        expect(yield* Queue.take(entered)).toBe(first.runId)
        expect(yield* driver.awaitRun(second.runId).pipe(Effect.timeout("20 seconds"))).toMatchObject({ runSeq: 2, status: "completed" })
        expect(Option.getOrThrow(yield* o.store.getRun(first.runId as RunId))).toMatchObject({ status: "failed", failureCode: "turn_crashed" })
        // Its waiters get the run as recorded, not the defect.
        expect(yield* driver.awaitRun(first.runId)).toMatchObject({ runId: first.runId, status: "failed" })
        // A crashed turn is Baton's defect: the invariant checks name it (a wedge-class failure, not a provider fault).
        expect((yield* Effect.provide(o.check(threadId, h), context)).join("\n")).toContain("turn_crashed")
      }).pipe(Effect.scoped))
  })
})

describe.each(Harness.dialects)("a run driver that goes away mid-run (%s)", (_label, db) => {
  const shared = <A, E, R>(f: (db: string) => Effect.Effect<A, E, R>) =>
    db === Harness.postgres
      ? Effect.scoped(Effect.flatMap(Database.PgSchemaUrl, f).pipe(Effect.provide(Database.layerPgSchema())))
      : Effect.acquireUseRelease(
        Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-driver-"))),
        (dir) => f(Path.join(dir, "baton.sqlite")),
        (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
      )

  // Regression: driver A shut down while driving run 1; the run stayed `running` and driver B, waiting behind it,
  // waited forever (nothing reconciles a gone driver's run while the other driver runs).
  it.live("the driver waiting behind it reconciles the gone driver's run and runs the next one", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return shared((file) =>
      Effect.gen(function*() {
        const { entered, held } = yield* holding(h)
        const scopeA = yield* Scope.make()
        const contextA = yield* Layer.buildWithScope(
          RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([held], h.counter, file, { interruptTimeoutMillis: 200 }, "a"))),
          scopeA
        )
        const contextB = yield* Layer.build(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([h.providers.codex!], h.counter, file, {}, "b"))))
        const a = Context.get(contextA, RunDriver.RunDriver)
        const b = Context.get(contextB, RunDriver.RunDriver)
        const threadId = yield* Effect.provide(Effect.flatMap(Harness.ops, (o) => o.create("codex")), contextB)
        const first = yield* a.submit(send(threadId, "first"))
        expect(yield* Queue.take(entered)).toBe(first.runId)
        const second = yield* b.submit(send(threadId, "second"))
        // A goes away with run 1 in flight (its provider never answers).
        yield* Scope.close(scopeA, Exit.void)
        const result = yield* b.awaitRun(second.runId).pipe(Effect.timeout("15 seconds"))
        expect(result).toMatchObject({ runSeq: 2, status: "completed" })
        const o = yield* Effect.provide(Harness.ops, contextB)
        const run1 = Option.getOrThrow(yield* o.store.getRun(first.runId))
        // A's shutdown interrupted its run on the way out: not the user's doing, not a crash.
        expect([run1.status, run1.failureCode, run1.failureReason]).toEqual(["interrupted", "process_stopped", "interrupted by the process stopping"])
        expect(yield* Effect.provide(o.check(threadId, h), contextB)).toEqual([])
      }).pipe(Effect.scoped))
  })

  // Regression: runs recorded the driver that accepted them, not the one driving them; a driver starting while the
  // accepting driver was gone reconciled (ended `interrupted`) a run another live driver was still driving.
  it.live("a driver starting up leaves alone a run that a live driver drives, though the driver that accepted it is gone", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return shared((file) =>
      Effect.gen(function*() {
        const { entered, gate, held } = yield* holding(h)
        const scopeA = yield* Scope.make()
        const contextA = yield* Layer.buildWithScope(Harness.makeLayer([h.providers.codex!], h.counter, file, {}, "a"), scopeA)
        const contextB = yield* Layer.build(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([held], h.counter, file, {}, "b"))))
        const b = Context.get(contextB, RunDriver.RunDriver)
        const o = yield* Effect.provide(Harness.ops, contextB)
        const threadId = yield* o.create("codex")
        // A accepts run 1 (no driver of its own); B drives it and holds it; A goes away.
        const first = yield* Effect.provide(Effect.flatMap(ThreadService.ThreadService, (s) => s.enqueueMessage(send(threadId, "first"))), contextA)
        const second = yield* b.submit(send(threadId, "second"))
        expect(yield* Queue.take(entered)).toBe(first.id)
        yield* Scope.close(scopeA, Exit.void)
        // C starts (recovering what gone drivers left): run 1 is B's, B is alive.
        yield* Layer.build(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([h.providers.codex!], h.counter, file, {}, "c"))))
        expect(Option.getOrThrow(yield* o.store.getRun(first.id)).status).toBe("running")
        yield* Deferred.succeed(gate, undefined)
        const results = yield* Effect.forEach([first.id, second.runId], (id) => b.awaitRun(id)).pipe(Effect.timeout("15 seconds"))
        expect(results.map((r) => [r.runSeq, r.status])).toEqual([[1, "completed"], [2, "completed"]])
        expect(yield* Effect.provide(o.check(threadId, h), contextB)).toEqual([])
      }).pipe(Effect.scoped))
  })
})
