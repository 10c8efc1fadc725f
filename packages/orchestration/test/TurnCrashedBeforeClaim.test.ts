/**
 * A turn that dies before its claim (review r42a): the run is still `queued` and no driver's.
 */
import { Commands, type CommandId, type RunId, type ThreadId } from "@baton/contracts"
import { DriverRegistry, RunDriver } from "@baton/orchestration"
import { Database } from "@baton/persistence"
import type { ProviderAdapter } from "@baton/providers"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Layer, Option, Queue, Stream } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

let n = 0
const cid = () => `cmd_preclaim_${++n}` as CommandId
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
        Stream.unwrap(Effect.as(Effect.zipRight(Queue.offer(entered, input.runId), Deferred.await(gate)), codex.startTurn(input)))
    }
    return { entered, gate, held }
  })

describe.each(Harness.dialects)("a turn that dies before its claim (%s)", (_label, db) => {
  const shared = <A, E, R>(f: (db: string) => Effect.Effect<A, E, R>) =>
    db === Harness.postgres
      ? Effect.scoped(Effect.flatMap(Database.PgSchemaUrl, f).pipe(Effect.provide(Database.layerPgSchema())))
      : Effect.acquireUseRelease(
        Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-preclaim-"))),
        (dir) => f(Path.join(dir, "baton.sqlite")),
        (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
      )

  it.live("a queued run another live driver accepted dies here before its claim: it is ended, the runs behind it go on", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return shared((file) => Effect.gen(function*() {
      // The poisoned run's turn dies where it reads the run's provider thread, before its claim (a defect in the
      // store's reading of it, say): `getProviderThread` called right after a `getRun` that read that run `queued` dies, every time.
      let poison: string | null = null
      let counts = 0
      let last: string | null = null
      const poisoning = Harness.interceptStore((name, _args, call) => {
        const after = last
        last = null
        if (name === "getProviderThread" && poison !== null && after === poison) {
          counts++
          return Effect.dieMessage("store bug reading the provider thread")
        }
        // Armed by a read of the poisoned run while it is still queued (its turn before the claim).
        return name === "getRun"
          ? Effect.tap(call(), (found) =>
            Effect.sync(() => {
              const run = found as Option.Option<{ readonly id: string; readonly status: string }>
              last = Option.isSome(run) && run.value.status === "queued" ? run.value.id : null
            }))
          : call()
      })
      const { entered, gate, held } = yield* holding(h)
      const context = yield* Layer.build(RunDriver.RunDriver.Default.pipe(
        Layer.provideMerge(Harness.makeLayer([held], h.counter, file, {}, "p", undefined, poisoning))
      ))
      const driver = Context.get(context, RunDriver.RunDriver)
      const o = yield* Effect.provide(Harness.ops, context)
      const threadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(10))
      h.script.enqueue(Harness.reply(10))
      h.script.enqueue(Harness.reply(10))
      const first = yield* driver.submit(send(threadId, "first"))
      expect(yield* Queue.take(entered)).toBe(first.runId)
      const poisoned = yield* driver.submit(send(threadId, "poisoned"))
      const third = yield* driver.submit(send(threadId, "third"))
      // Accepted by another process (alive, its driver registered on the same database): the run is that driver's
      // until a worker claims it.
      const other = yield* Layer.build(Harness.makeLayer([h.providers.codex!], h.counter, file, {}, "q"))
      const otherId = Context.get(other, DriverRegistry.DriverRegistry).driverId
      yield* o.store.setRunDriver(poisoned.runId as RunId, otherId)
      poison = poisoned.runId
      yield* Deferred.succeed(gate, undefined)
      const result = yield* Effect.either(driver.awaitRun(third.runId as RunId).pipe(Effect.timeout("10 seconds")))
      const poisonRun = Option.getOrThrow(yield* o.store.getRun(poisoned.runId as RunId))
      expect(result._tag === "Right" ? result.right : result.left).toMatchObject({ runId: third.runId, status: "completed" })
      expect(poisonRun).toMatchObject({ status: "failed", failureCode: "turn_crashed", stopPoint: "before_provider" })
      // Taken once, ended once: not taken again and again.
      expect(counts).toBe(1)
      poison = null
      expect(yield* driver.awaitRun(poisoned.runId as RunId)).toMatchObject({ status: "failed", failureCode: "turn_crashed" })
    }).pipe(Effect.scoped))
  })
})
