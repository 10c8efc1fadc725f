/**
 * Regression (a fresh pair of eyes, two servers on one Postgres): a server killed (SIGKILL) mid-turn left its run
 * `running` for as long as the other server lived — a minute and more, until a message to that thread, an interrupt
 * or a restart looked; a client waiting on the run there waited for good. The run driver now looks for unfinished
 * runs of gone drivers every `goneDriverSweepMillis` and reconciles them as restart recovery does. Here the killed
 * process is a run row `running` under a driver id that no process holds.
 */
import { type Run, type RunId } from "@baton/contracts"
import { RunDriver } from "@baton/orchestration"
import { ThreadStore, UnitOfWork } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { DateTime, Duration, Effect, Layer, Option } from "effect"

describe.each(Harness.dialects)("a run of a gone driver on %s", (_label, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("is ended by the live driver's sweep, with nothing sent to its thread", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db, config: { goneDriverSweepMillis: 100 } })
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const store = yield* ThreadStore
      const uow = yield* UnitOfWork
      const threadId = yield* o.create("codex")
      const thread = Option.getOrThrow(yield* store.getThread(threadId))
      const now = yield* DateTime.now
      const run: Run = {
        id: "run_of_a_killed_process" as RunId,
        threadId,
        seq: 1,
        providerThreadId: thread.activeProviderThreadId!,
        status: "running",
        prompt: "hello",
        stopPoint: null,
        failureReason: null,
        failureCode: null,
        nativeThreadId: null,
        createdAt: now,
        updatedAt: now
      }
      yield* uow.thread(threadId, "test.killedProcess")(store.insertRun(run, "drv_killed_process"))
      let status: ReadonlyArray<string | null> = []
      for (let i = 0; i < 100; i++) {
        yield* Effect.sleep(Duration.millis(50))
        const now = Option.getOrThrow(yield* store.getRun(run.id))
        status = [now.status, now.failureCode]
        if (now.status !== "running") break
      }
      expect(status).toEqual(["interrupted", "process_restarted"])
    }).pipe(Effect.provide(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))))
  })
})
