/**
 * Regression (review): `RunRecovery.interrupt` read the run outside the thread's lock (between the unit of work that
 * resolved its target and the one that ended it) and decided from that read. A run read `starting` whose turn then
 * moved it to `running` (its `beginAttempt`, under the lock) and called the provider was ended as a run that never
 * reached the provider: `before_provider`, its native thread dropped, the provider never asked to stop — it answered
 * a prompt the record says it never read (missed-run recovery would owe it that native thread a second time). The
 * interrupt now reads the run in the unit of work that ends it.
 *
 * The race is made deterministic: the turn waits (before its `beginAttempt`, outside the lock: in `startThread`)
 * until the interrupt reads the run `starting`; that read then waits (at most a second) until the turn has moved the
 * run to `running`. Read outside the lock, the move happens in between; read under it, the move waits for the
 * interrupt's unit of work, the second passes, and the run is ended before the provider for real: its turn stops.
 */
import { Commands, type CommandId, type RunId, type ThreadId } from "@baton/contracts"
import { ThreadService } from "@baton/orchestration"
import { ThreadStore } from "@baton/persistence"
import type { ProviderAdapter } from "@baton/providers"
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"

let n = 0
const cid = () => `cmd_stale_${++n}` as CommandId

describe.each(Harness.dialects)("an interrupt racing its run's start on %s", (_label, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("reads the run under the thread's lock: a run read `starting` is ended before the provider, and its turn never sends the prompt", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: false }])
    const codex = h.providers.codex!
    return Effect.gen(function*() {
      const preparing = yield* Deferred.make<void>()
      const read = yield* Deferred.make<void>()
      const moved = yield* Deferred.make<void>()
      // `armed`: the turn waits in `startThread`; the next read of the run is the interrupt's.
      const target: { runId: RunId | null; armed: boolean } = { runId: null, armed: false }
      // The turn's native thread is started (turn start, outside the lock) once the interrupt has read the run.
      const adapter: ProviderAdapter.ProviderAdapterShape = {
        ...codex,
        startThread: (...args) =>
          Effect.suspend(() => {
            target.armed = true
            return Effect.zipRight(Effect.zipRight(Deferred.succeed(preparing, undefined), Deferred.await(read)), codex.startThread(...args))
          })
      }
      const pausing = (real: ThreadStore): ThreadStore =>
        ThreadStore.make({
          ...real,
          getRun: (id) =>
            Effect.tap(real.getRun(id), (r) =>
              id !== target.runId || !target.armed || r._tag === "None" || r.value.status !== "starting"
                ? Effect.void
                : Effect.suspend(() => {
                  target.armed = false
                  return Effect.zipRight(Deferred.succeed(read, undefined), Deferred.await(moved).pipe(Effect.timeout("1 second"), Effect.ignore))
                })),
          updateRunRunningIfStarting: (id, native, at) =>
            Effect.tap(real.updateRunRunningIfStarting(id, native, at), () => id === target.runId ? Deferred.succeed(moved, undefined) : Effect.void)
        } as Parameters<typeof ThreadStore.make>[0])
      const layer = Harness.makeLayer([adapter], h.counter, Harness.currentDb(), {}, "", undefined, pausing)
      yield* Effect.gen(function*() {
        const service = yield* ThreadService.ThreadService
        const store = yield* ThreadStore
        const threadId: ThreadId = yield* service.createThread(Commands.CreateThread.make({
          commandId: cid(),
          title: "stale interrupt",
          providerInstance: "codex" as Commands.CreateThread["providerInstance"]
        }))
        h.script.enqueue(Harness.reply(20))
        const run = yield* service.enqueueMessage(Commands.SendMessage.make({ commandId: cid(), threadId, text: "run the tests" }))
        target.runId = run.id
        const turn = yield* Effect.fork(service.processRun(run.id))
        // The run is `starting`: its turn prepares the native thread.
        yield* Deferred.await(preparing)
        const interrupted = yield* service.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: run.id }))
        expect((yield* Fiber.join(turn).pipe(Effect.timeout("10 seconds"))).status).toBe("interrupted")
        // Ended before the provider, and the provider was never sent the prompt (read outside the lock: it was, and
        // answered it, while the record says it never read it).
        expect([interrupted.status, interrupted.stopPoint, interrupted.nativeThreadId]).toEqual(["interrupted", "before_provider", null])
        expect(codex.received.filter((r) => r.type === "turn").map((r) => r.type === "turn" ? r.prompt : "")).toEqual([])
        const [ended] = yield* store.listRuns(threadId)
        expect([ended!.status, ended!.stopPoint, ended!.failureCode]).toEqual(["interrupted", "before_provider", "interrupted_by_user"])
        const o = yield* Harness.ops
        expect(yield* o.check(threadId, h)).toEqual([])
      }).pipe(Effect.provide(layer))
    })
  })
})
