/**
 * The run driver across two OS processes on one Postgres schema (issue 15's acceptance, a smaller instance: the
 * full 2 x 20 threads x 50 sends is `bench/concurrent-sends.ts`). Both processes submit every send to the same
 * threads at once; the record must show no lost update, acceptance order as run order, one run at a time per thread,
 * and every refusal a lost race — never a `PersistenceError`.
 */
import { Database } from "@baton/persistence"
import { ConcurrentSends } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

const threads = 4
const sendsPerThread = 10

describe("two processes sending to the same threads on Postgres", () => {
  it.live(`2 processes x ${threads} threads x ${sendsPerThread} concurrent sends: every send queued in order, run one at a time, invariants hold`, () =>
    Effect.gen(function*() {
      const url = yield* Database.PgSchemaUrl
      const threadIds = yield* Effect.scoped(Effect.provide(ConcurrentSends.createThreads(threads), ConcurrentSends.layer(url)))
      const summaries = yield* Effect.all(
        ["p1", "p2"].map((label) => ConcurrentSends.spawnSender({ db: url, threadIds, sendsPerThread, label })),
        { concurrency: "unbounded" }
      )
      const report = yield* Effect.provide(ConcurrentSends.verify(threadIds, summaries), ConcurrentSends.readLayer(url))
      expect(report.violations).toEqual([])
      // The driver queues behind unfinished runs: no send is refused, so every thread has 2 x 10 runs.
      expect(report).toMatchObject({ threads, sends: 2 * threads * sendsPerThread, accepted: 2 * threads * sendsPerThread, refused: {} })
      expect(report.runs).toEqual({ completed: 2 * threads * sendsPerThread })
      // Both processes drove runs (the test would prove nothing if one process had done all the work).
      expect(summaries.map((s) => s.outcomes.filter((o) => o.runId !== null).length)).toEqual([threads * sendsPerThread, threads * sendsPerThread])
    }).pipe(Effect.provide(Database.layerPgSchema())), { timeout: 120_000 })
})
