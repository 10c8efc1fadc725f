/**
 * Attacks on the live driver's ending of a run whose turn stopped without an outcome (`turn_crashed`, review r42a):
 * an adapter that dies after streaming output, a storage failure as the turn ends, a death while another driver's
 * interrupt of the run is pending. Both dialects.
 */
import { Commands, type CommandId, PersistenceError, type Run, type RunId, type ThreadId } from "@baton/contracts"
import { RunDriver } from "@baton/orchestration"
import { Database, ThreadStore } from "@baton/persistence"
import { ProviderAdapter } from "@baton/providers"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Fiber, Layer, Option, Queue, Stream } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

let n = 0
const cid = () => `cmd_crash_${++n}` as CommandId
const send = (threadId: ThreadId, text: string) => Commands.SendMessage.make({ commandId: cid(), threadId, text })

describe.each(Harness.dialects)("a turn that crashes in its live driver (%s)", (_label, db) => {
  const shared = <A, E, R>(f: (db: string) => Effect.Effect<A, E, R>) =>
    db === Harness.postgres
      ? Effect.scoped(Effect.flatMap(Database.PgSchemaUrl, f).pipe(Effect.provide(Database.layerPgSchema())))
      : Effect.acquireUseRelease(
        Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-crash-"))),
        (dir) => f(Path.join(dir, "baton.sqlite")),
        (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
      )

  it.live("an adapter that dies after streaming output: failed after the provider, the waiting caller gets the record", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const codex = h.providers.codex!
      let dies = 1
      const dying: ProviderAdapter.ProviderAdapterShape = {
        ...codex,
        startTurn: (input) =>
          dies-- > 0
            ? Stream.concat(
              codex.startTurn(input).pipe(Stream.filter((e) => !ProviderAdapter.TurnEvent.$is("turn_ended")(e))),
              Stream.dieMessage("adapter bug after output")
            )
            : codex.startTurn(input)
      }
      const context = yield* Layer.build(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([dying], h.counter, db, {}, "c"))))
      const driver = Context.get(context, RunDriver.RunDriver)
      const o = yield* Effect.provide(Harness.ops, context)
      const threadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(10))
      h.script.enqueue(Harness.reply(10))
      // Joined before the turn dies: settled with the recorded failure, not the defect.
      const first = yield* driver.sendAndWait(send(threadId, "first")).pipe(Effect.timeout("20 seconds"))
      expect(first).toMatchObject({ status: "failed" })
      const run = Option.getOrThrow(yield* o.store.getRun(first.runId as RunId))
      expect(run).toMatchObject({ status: "failed", failureCode: "turn_crashed", stopPoint: "after_provider" })
      const second = yield* driver.sendAndWait(send(threadId, "second")).pipe(Effect.timeout("20 seconds"))
      expect(second).toMatchObject({ runSeq: 2, status: "completed" })
      const violations = (yield* Effect.provide(o.check(threadId, h), context)).join("\n")
      expect(violations).toContain("turn_crashed")
    }).pipe(Effect.scoped)
  })

  it.live("the database failing as the turn ends: the run is ended once it answers again, the next run goes on", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      // Fails every ending of the first run the turn records (completed, or failed as the output could not be
      // recorded), then the ending of the crashed run twice (the driver retries).
      let crashedFails = 2
      const failing = (real: ThreadStore): ThreadStore =>
        ThreadStore.make({
          ...real,
          updateRunEnded: (r: Run) =>
            r.seq === 1 && (r.failureCode !== "turn_crashed" || crashedFails-- > 0)
              ? Effect.fail(new PersistenceError({ operation: "runs.update", detail: "the database went away" }))
              : real.updateRunEnded(r)
        } as unknown as Parameters<typeof ThreadStore.make>[0])
      const context = yield* Layer.build(RunDriver.RunDriver.Default.pipe(
        Layer.provideMerge(Harness.makeLayer([h.providers.codex!], h.counter, db, {}, "s", undefined, failing))
      ))
      const driver = Context.get(context, RunDriver.RunDriver)
      const o = yield* Effect.provide(Harness.ops, context)
      const threadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(10))
      h.script.enqueue(Harness.reply(10))
      const first = yield* driver.sendAndWait(send(threadId, "first")).pipe(Effect.timeout("30 seconds"))
      const run = Option.getOrThrow(yield* o.store.getRun(first.runId as RunId))
      expect(run).toMatchObject({ status: "failed", failureCode: "turn_crashed" })
      expect(first).toMatchObject({ status: "failed", failureCode: run.failureCode })
      expect(crashedFails).toBeLessThanOrEqual(0)
      const second = yield* driver.sendAndWait(send(threadId, "second")).pipe(Effect.timeout("30 seconds"))
      expect(second).toMatchObject({ runSeq: 2, status: "completed" })
    }).pipe(Effect.scoped)
  })

  it.live("a turn that dies while another driver's interrupt of it is pending: the interrupt answers the ended run", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return shared((file) =>
      Effect.gen(function*() {
        const entered = yield* Queue.unbounded<string>()
        const gate = yield* Deferred.make<void>()
        const codex = h.providers.codex!
        let dies = 1
        const dying: ProviderAdapter.ProviderAdapterShape = {
          ...codex,
          startTurn: (input) =>
            dies-- > 0
              ? Stream.unwrap(Effect.zipRight(
                Effect.zipRight(Queue.offer(entered, input.runId), Deferred.await(gate)),
                Effect.dieMessage("adapter bug while an interrupt is pending")
              ))
              : codex.startTurn(input)
        }
        // A polls for remote interrupts only every minute: its turn dies before it sees B's request.
        const contextA = yield* Layer.build(RunDriver.RunDriver.Default.pipe(
          Layer.provideMerge(Harness.makeLayer([dying], h.counter, file, { interruptPollMillis: 60_000 }, "a"))
        ))
        const contextB = yield* Layer.build(RunDriver.RunDriver.Default.pipe(
          Layer.provideMerge(Harness.makeLayer([codex], h.counter, file, { interruptTimeoutMillis: 5_000, interruptPollMillis: 20 }, "b"))
        ))
        const a = Context.get(contextA, RunDriver.RunDriver)
        const b = Context.get(contextB, RunDriver.RunDriver)
        const o = yield* Effect.provide(Harness.ops, contextA)
        const threadId = yield* o.create("codex")
        const first = yield* a.submit(send(threadId, "first"))
        expect(yield* Queue.take(entered)).toBe(first.runId)
        const interrupting = yield* Effect.fork(b.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: first.runId })))
        // B has recorded its request for A (the run is A's, A alive).
        for (let i = 0; i < 200; i++) {
          if ((yield* o.store.runsInterruptRequested([first.runId as RunId])).length > 0) break
          yield* Effect.sleep("20 millis")
        }
        yield* Deferred.succeed(gate, undefined)
        const answered = yield* Fiber.join(interrupting).pipe(Effect.timeout("20 seconds"))
        expect(answered).toMatchObject({ id: first.runId, status: "failed", failureCode: "turn_crashed" })
        h.script.enqueue(Harness.reply(10))
        const second = yield* a.sendAndWait(send(threadId, "second")).pipe(Effect.timeout("20 seconds"))
        expect(second).toMatchObject({ runSeq: 2, status: "completed" })
      }).pipe(Effect.scoped))
  })
})

describe.each(Harness.dialects)("a turn that crashes while its driver drains (%s)", (_label, db) => {
  // Regression (review r42a): after `stopTaking` (the server's shutdown gives open requests their deadline, the runs in
  // flight go on), a turn that died was not ended (`!stopping`): its caller polled until the deadline cut it, the run
  // stayed `running` past the driver's close (no longer in flight, so not stopped there) and the next start recorded
  // it `process_restarted`, as if the process had died during the turn.
  it.live("a turn that dies after stopTaking is ended (turn_crashed) and its waiting caller answered", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const entered = yield* Queue.unbounded<string>()
      const gate = yield* Deferred.make<void>()
      const codex = h.providers.codex!
      const dying: ProviderAdapter.ProviderAdapterShape = {
        ...codex,
        startTurn: (input) =>
          Stream.unwrap(Effect.zipRight(
            Effect.zipRight(Queue.offer(entered, input.runId), Deferred.await(gate)),
            Effect.dieMessage("adapter bug during the drain")
          ))
      }
      const context = yield* Layer.build(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([dying], h.counter, db, {}, "d"))))
      const driver = Context.get(context, RunDriver.RunDriver)
      const o = yield* Effect.provide(Harness.ops, context)
      const threadId = yield* o.create("codex")
      const first = yield* driver.submit(send(threadId, "first"))
      expect(yield* Queue.take(entered)).toBe(first.runId)
      const waiter = yield* Effect.fork(driver.awaitRun(first.runId as RunId))
      yield* driver.stopTaking
      yield* Deferred.succeed(gate, undefined)
      const answered = yield* Fiber.join(waiter).pipe(Effect.timeout("10 seconds"))
      expect(answered).toMatchObject({ runId: first.runId, status: "failed" })
      expect(Option.getOrThrow(yield* o.store.getRun(first.runId as RunId))).toMatchObject({ status: "failed", failureCode: "turn_crashed" })
    }).pipe(Effect.scoped)
  })
})
