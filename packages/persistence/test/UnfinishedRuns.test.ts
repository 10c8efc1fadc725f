/**
 * The reads of a thread's unfinished runs (queueing asks for the active run, claiming for the first unfinished one)
 * cost the same on a thread of any length: migration 0009's partial index. Before it, SQLite walked the thread's runs
 * in `seq` order (every run of the thread when none was active: about 10 ms per turn at 10,000 runs).
 */
import type { ProviderThreadId, Run, RunId, ThreadId } from "@baton/contracts"
import { Database, ThreadStore } from "@baton/persistence"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { DateTime, Effect, Layer, Option } from "effect"

const layer = ThreadStore.Default.pipe(Layer.provideMerge(Database.layerSqlite(":memory:")))

const run = (seq: number, status: Run["status"], now: DateTime.Utc): Run => ({
  id: `run_${seq}` as RunId,
  threadId: "thr_1" as ThreadId,
  seq,
  providerThreadId: "pth_1" as ProviderThreadId,
  status,
  prompt: `step ${seq}`,
  stopPoint: status === "completed" ? "after_provider" : null,
  failureReason: null,
  failureCode: null,
  nativeThreadId: null,
  createdAt: now,
  updatedAt: now
})

describe("a thread's unfinished runs", () => {
  it.live("are found among 300 finished runs: the active run (the one in progress, not the run queued behind it), the first unfinished, none once all end", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const now = yield* DateTime.now
      yield* store.insertThread({ id: "thr_1" as ThreadId, title: "t", activeProviderThreadId: null, createdAt: now, updatedAt: now })
      for (let seq = 1; seq <= 300; seq++) yield* store.insertRun(run(seq, "completed", now), "drv_1")
      expect(Option.isNone(yield* store.findActiveRun("thr_1" as ThreadId))).toBe(true)
      expect(Option.isNone(yield* store.findFirstUnfinishedRun("thr_1" as ThreadId))).toBe(true)
      yield* store.insertRun(run(301, "running", now), "drv_1")
      yield* store.insertRun(run(302, "queued", now), "drv_1")
      expect(Option.map(yield* store.findActiveRun("thr_1" as ThreadId), (r) => r.id)).toEqual(Option.some("run_301"))
      expect(Option.map(yield* store.findFirstUnfinishedRun("thr_1" as ThreadId), (r) => r.id)).toEqual(Option.some("run_301"))
      yield* store.updateRun({ ...run(301, "completed", now) })
      expect(Option.map(yield* store.findActiveRun("thr_1" as ThreadId), (r) => r.id)).toEqual(Option.some("run_302"))
      expect(Option.map(yield* store.findFirstUnfinishedRun("thr_1" as ThreadId), (r) => r.id)).toEqual(Option.some("run_302"))
      // The driver given to `insertRun` is written with the run.
      expect((yield* store.runDrivers(["run_302" as RunId])).get("run_302")).toBe("drv_1")
    }).pipe(Effect.provide(layer)))

  it.live("on SQLite both reads search the partial index runs_thread_unfinished, never the thread's runs in seq order", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const plan = (query: string) =>
        Effect.map(sql.unsafe<{ readonly detail: string }>(`EXPLAIN QUERY PLAN ${query}`), (rows) => rows.map((r) => r.detail).join("; "))
      for (const order of ["seq", "seq DESC"]) {
        const detail = yield* plan(
          `SELECT * FROM runs WHERE thread_id = 'thr_1' AND status IN ('queued', 'starting', 'running', 'waiting') ORDER BY ${order} LIMIT 1`
        )
        expect(detail).toBe("SEARCH runs USING INDEX runs_thread_unfinished (thread_id=?)")
      }
    }).pipe(Effect.provide(layer)))
})
