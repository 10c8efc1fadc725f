/**
 * What the NOTIFY trigger of migration 0010 costs writers on Postgres. Postgres serialises the commits of
 * transactions that sent a notification (they take the notification queue's lock at commit), so this measures
 * event-writing units of work per second with `WRITERS` concurrent writers (one thread each, `EACH` units of work of
 * one event each), alternately with the trigger enabled and disabled on the same schema (`psql` toggles it), after
 * one warm-up round.
 *
 * Environment: `WRITERS` (8), `EACH` (150); the test Postgres server (`BATON_TEST_DATABASE_URL`).
 *
 * Run: `npx tsx bench/notify-cost.ts` from the repository root.
 */
import type { RunId } from "@baton/contracts"
import { Commands, type CommandId } from "@baton/contracts"
import { ThreadService } from "@baton/orchestration"
import { ThreadStore, UnitOfWork } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { Context, Effect, Layer } from "effect"
import { execFileSync } from "node:child_process"
import { performance } from "node:perf_hooks"

Harness.useDb(Harness.postgres)
const writers = Number(process.env.WRITERS ?? 8)
const each = Number(process.env.EACH ?? 150)

const program = Harness.withDbFile((url) =>
  Effect.gen(function*() {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    const ctx = yield* Layer.build(Harness.makeLayer(Object.values(h.providers), h.counter, url, {}, "a"))
    const service = Context.get(ctx, ThreadService.ThreadService)
    const store = Context.get(ctx, ThreadStore)
    const uow = Context.get(ctx, UnitOfWork)
    const trigger = (on: boolean) =>
      Effect.sync(() =>
        execFileSync("psql", [url, "-qc", `ALTER TABLE thread_events ${on ? "ENABLE" : "DISABLE"} TRIGGER thread_events_notify`])
      )
    const threads = yield* Effect.forEach(Array.from({ length: writers }, (_, i) => i), (i) =>
      service.createThread(Commands.CreateThread.make({ commandId: `cmd_${i}` as CommandId, title: "b", providerInstance: h.providers.codex!.instance })))
    const round = Effect.gen(function*() {
      const t0 = performance.now()
      yield* Effect.forEach(threads, (threadId) =>
        Effect.forEach(Array.from({ length: each }, (_, i) => i), (i) =>
          uow.thread(threadId, "bench.append")(
            store.appendEvent({ threadId, type: "run.completed", payload: { runId: "run_bench" as RunId, itemCount: i } })
          )), { concurrency: "unbounded" })
      return (writers * each) / ((performance.now() - t0) / 1000)
    })
    yield* round
    const withTrigger: Array<number> = []
    const without: Array<number> = []
    for (let i = 0; i < 3; i++) {
      yield* trigger(true)
      withTrigger.push(yield* round)
      yield* trigger(false)
      without.push(yield* round)
    }
    const fmt = (xs: ReadonlyArray<number>) => xs.map((x) => x.toFixed(0)).join(", ")
    console.log(`${writers} writers x ${each} units of work (one event each), per second: with the NOTIFY trigger ${fmt(withTrigger)}; without ${fmt(without)}`)
  }).pipe(Effect.scoped))

Effect.runPromise(program).catch((e: unknown) => {
  console.error(e)
  process.exit(1)
})
