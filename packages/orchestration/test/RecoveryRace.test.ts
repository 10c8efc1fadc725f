/**
 * Regression (review): restart recovery decided "owner gone" from a read outside the thread's lock and then ended,
 * under the lock, a run that a live driver had claimed meanwhile (it was calling the provider). Three incarnations
 * on one database: X accepts queued runs and goes away, Y (alive) claims and drives them, Z recovers at the same time.
 */
import { Commands, type CommandId, type RunId } from "@baton/contracts"
import { ThreadService } from "@baton/orchestration"
import { ThreadStore } from "@baton/persistence"
import type { ProviderAdapter } from "@baton/providers"
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Duration, Effect, Exit, Fiber, Layer, Option, Scope, Stream } from "effect"

let k = 0
const cid = () => `cmd_race_${++k}` as CommandId

describe.each(Harness.dialects)("restart recovery racing a live driver on %s", (_label, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("never ends a run that a live driver claimed after recovery read it", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    const codex = h.providers.codex!
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const gate = yield* Deferred.make<void>()
        const held: ProviderAdapter.ProviderAdapterShape = {
          ...codex,
          startTurn: (input) => Stream.unwrap(Effect.as(Deferred.await(gate), codex.startTurn(input)))
        }
        const build = (ns: string, adapters: ReadonlyArray<ProviderAdapter.ProviderAdapterShape>) =>
          Effect.gen(function*() {
            const scope = yield* Scope.make()
            const ctx = yield* Layer.buildWithScope(Harness.makeLayer(adapters, h.counter, db, {}, ns), scope)
            return { scope, service: Context.get(ctx, ThreadService.ThreadService), store: Context.get(ctx, ThreadStore) }
          })
        const y = yield* build("y", [held])
        const z = yield* build("z", [codex])
        const x = yield* build("x", [codex])
        const runs: Array<RunId> = []
        for (let i = 0; i < 8; i++) {
          const t = yield* x.service.createThread(Commands.CreateThread.make({ commandId: cid(), title: "t", providerInstance: codex.instance }))
          runs.push((yield* x.service.enqueueMessage(Commands.SendMessage.make({ commandId: cid(), threadId: t, text: `hi ${i}` }))).id)
        }
        yield* Scope.close(x.scope, Exit.void)
        const drives: Array<Fiber.RuntimeFiber<void, never>> = []
        for (const [i, runId] of runs.entries()) {
          h.script.enqueue(Harness.reply(10))
          drives.push(yield* Effect.fork(Effect.ignore(y.service.processRun(runId))))
          yield* Effect.sleep(Duration.millis(i % 4))
          yield* Effect.exit(z.service.recover())
        }
        yield* Effect.sleep(Duration.millis(300))
        for (const runId of runs) {
          const r = Option.getOrThrow(yield* y.store.getRun(runId))
          const owner = (yield* y.store.runDrivers([runId])).get(runId) ?? ""
          // A run Y claimed is Y's until it ends: never `process_restarted`.
          if (owner.startsWith("drv_y")) expect([runId, r.failureCode]).toEqual([runId, null])
        }
        yield* Deferred.succeed(gate, undefined)
        yield* Effect.forEach(drives, Fiber.join, { discard: true })
        for (const runId of runs) {
          const r = Option.getOrThrow(yield* y.store.getRun(runId))
          expect(["completed", "interrupted"]).toContain(r.status)
        }
        yield* Scope.close(y.scope, Exit.void)
        yield* Scope.close(z.scope, Exit.void)
      }))
  })
})
