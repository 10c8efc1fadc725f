import { ConcurrentModification, type Item, type ItemId, type ProviderThreadId, type Run, type RunId, type ThreadId } from "@baton/contracts"
import { Database, Migrations, ThreadEventBus, ThreadStore, UnitOfWork } from "@baton/persistence"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, DateTime, Deferred, Duration, Effect, Fiber, Layer, Option, Queue, Schedule, Stream } from "effect"

/** The persistence suite runs on every dialect: a `:memory:` SQLite database and a fresh schema on the real Postgres. */
const dialects: ReadonlyArray<readonly [string, () => Layer.Layer<SqlClient.SqlClient, Database.DatabaseError>]> = [
  ["SQLite", () => Database.layerSqlite(":memory:")],
  ["Postgres", () => Database.layerPgIsolated()]
]

const layerOn = <E>(db: () => Layer.Layer<SqlClient.SqlClient, E>) =>
  UnitOfWork.Default.pipe(
    Layer.provideMerge(ThreadStore.Default),
    Layer.provideMerge(ThreadEventBus.Default),
    Layer.provideMerge(Layer.orDie(db()))
  )

const thread = (id: string, now: DateTime.Utc) => ({
  id: id as ThreadId,
  title: "a thread",
  activeProviderThreadId: null,
  createdAt: now,
  updatedAt: now
})

const run = (threadId: string, seq: number, now: DateTime.Utc): Run => ({
  id: `run_${threadId}_${seq}` as RunId,
  threadId: threadId as ThreadId,
  seq,
  providerThreadId: "pth_1" as ProviderThreadId,
  status: "completed",
  prompt: `prompt ${seq}`,
  stopPoint: null,
  failureReason: null,
  failureCode: null,
  nativeThreadId: null,
  createdAt: now,
  updatedAt: now
})

describe.each(dialects)("persistence on %s", (_label, db) => {
  it.live("applies every registered migration once", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const applied = yield* sql<{ migrationId: number }>`SELECT migration_id FROM effect_sql_migrations ORDER BY migration_id`
      const registered = Object.keys(Migrations.migrations).map((key) => Number(key.slice(0, key.indexOf("_"))))
      expect(applied.map((m) => Number(m.migrationId))).toEqual(registered)
    }).pipe(Effect.provide(layerOn(db))))

  it.live("a duplicate key inside a unit of work is a ConcurrentModification naming the thread, and nothing of it is written", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const uow = yield* UnitOfWork
      const now = yield* DateTime.now
      yield* uow.global("test.create")(store.insertThread(thread("thr_a", now)))
      yield* uow.thread("thr_a", "test.first")(store.insertRun(run("thr_a", 1, now)))
      const lost = yield* Effect.flip(uow.thread("thr_a", "test.second")(Effect.gen(function*() {
        yield* store.appendEvent({ threadId: "thr_a" as ThreadId, type: "thread.created", payload: { title: "x" } })
        yield* store.insertRun({ ...run("thr_a", 1, now), id: "run_other" as RunId })
      })))
      expect(lost._tag).toBe("ConcurrentModification")
      expect(lost.message).toBe("thread thr_a was changed by another writer (runs.insert); retry the command")
      expect((yield* store.listEvents("thr_a" as ThreadId)).length).toBe(0)
      expect((yield* store.listRuns("thr_a" as ThreadId)).map((r) => r.id)).toEqual(["run_thr_a_1"])
    }).pipe(Effect.provide(layerOn(db))))

  it.live("runs after a seq: no upper bound is bound into the query (a sentinel does not fit INTEGER)", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const uow = yield* UnitOfWork
      const now = yield* DateTime.now
      yield* uow.global("test.create")(store.insertThread(thread("thr_b", now)))
      yield* uow.thread("thr_b", "test.runs")(Effect.forEach([1, 2, 3], (n) => store.insertRun(run("thr_b", n, now))))
      expect((yield* store.listRunsAfter("thr_b" as ThreadId, 1)).map((r) => r.seq)).toEqual([2, 3])
    }).pipe(Effect.provide(layerOn(db))))

  it.live("concurrent units of work on one thread serialise: 20 read-modify-write increments, none lost", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const uow = yield* UnitOfWork
      const sql = yield* SqlClient.SqlClient
      const now = yield* DateTime.now
      yield* uow.global("test.create")(store.insertThread(thread("thr_c", now)))
      // Each unit of work reads the next seq and inserts a run with it: without the lock two would read the same
      // seq and one would lose (a duplicate key).
      yield* Effect.forEach(
        Array.from({ length: 20 }, (_, i) => i),
        () =>
          uow.thread("thr_c", "test.increment")(Effect.gen(function*() {
            const seq = yield* store.nextRunSeq("thr_c" as ThreadId)
            yield* Effect.sleep("1 millis")
            yield* store.insertRun(run("thr_c", seq, now))
          })),
        { concurrency: "unbounded", discard: true }
      )
      const seqs = (yield* store.listRuns("thr_c" as ThreadId)).map((r) => r.seq)
      expect(seqs).toEqual(Array.from({ length: 20 }, (_, i) => i + 1))
      const versions = yield* sql<{ lockVersion: number }>`SELECT lock_version FROM threads WHERE id = 'thr_c'`
      expect(versions.length).toBe(1)
    }).pipe(Effect.provide(layerOn(db))))

  it.live("concurrent units of work appending items to one thread (insertItemsAfterLast): every seq once, none missing, each unit's items together (review r24)", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const uow = yield* UnitOfWork
      const now = yield* DateTime.now
      yield* uow.global("test.create")(store.insertThread(thread("thr_i", now)))
      const item = (unit: number, k: number): Item => ({
        id: `itm_${unit}_${k}` as ItemId,
        threadId: "thr_i" as ThreadId,
        runId: null,
        seq: 0,
        kind: "assistant_message",
        text: `unit ${unit} item ${k}`,
        toolCallId: null,
        toolName: null,
        messageId: null,
        isError: false,
        toolCallState: null,
        tokens: 3,
        createdAt: now
      })
      const firsts = yield* Effect.forEach(
        Array.from({ length: 12 }, (_, u) => u),
        (u) =>
          uow.thread("thr_i", "test.append")(Effect.gen(function*() {
            yield* Effect.sleep("1 millis")
            return yield* store.insertItemsAfterLast("thr_i" as ThreadId, [item(u, 0), item(u, 1), item(u, 2)])
          })),
        { concurrency: "unbounded" }
      )
      const stored = yield* store.listItems("thr_i" as ThreadId)
      expect(stored.map((i) => i.seq)).toEqual(Array.from({ length: 36 }, (_, i) => i + 1))
      firsts.forEach((first, u) => {
        expect(stored.slice(first - 1, first + 2).map((i) => i.id)).toEqual([`itm_${u}_0`, `itm_${u}_1`, `itm_${u}_2`])
      })
    }).pipe(Effect.provide(layerOn(db))))

  it.live("events reach subscribers only after their unit of work commits; a rolled-back unit publishes nothing", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const uow = yield* UnitOfWork
      const bus = yield* ThreadEventBus
      const now = yield* DateTime.now
      yield* uow.global("test.create")(store.insertThread(thread("thr_d", now)))
      const seen = yield* Queue.unbounded<string>()
      const subscription = yield* bus.subscribe
      const reader = yield* Effect.fork(Stream.fromQueue(subscription).pipe(
        Stream.take(2),
        Stream.runForEach((e) => Queue.offer(seen, `${e.seq}:${e.type}`))
      ))
      yield* uow.thread("thr_d", "test.events")(Effect.gen(function*() {
        yield* store.appendEvent({ threadId: "thr_d" as ThreadId, type: "thread.created", payload: { title: "t" } })
        // Not visible yet: the transaction is open.
        yield* Effect.sleep("20 millis")
        expect(yield* Queue.size(seen)).toBe(0)
      }))
      yield* Effect.flip(uow.thread("thr_d", "test.rolledBack")(Effect.gen(function*() {
        yield* store.appendEvent({ threadId: "thr_d" as ThreadId, type: "run.queued", payload: { runId: "run_x" as RunId, seq: 1, providerThreadId: "pth_1" as ProviderThreadId } })
        return yield* Effect.fail("abandon" as const)
      })))
      yield* uow.thread("thr_d", "test.events2")(store.appendEvent({ threadId: "thr_d" as ThreadId, type: "run.queued", payload: { runId: "run_y" as RunId, seq: 2, providerThreadId: "pth_1" as ProviderThreadId } }))
      yield* Fiber.join(reader)
      expect(Chunk.toArray(yield* Queue.takeAll(seen))).toEqual(["1:thread.created", "2:run.queued"])
    }).pipe(Effect.scoped, Effect.provide(layerOn(db))))

  // Regression (review): a nested unit of work that rolled back (its savepoint) still had its events published.
  it.live("a nested unit of work rolled back publishes nothing; its outer unit's events are published once", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const uow = yield* UnitOfWork
      const bus = yield* ThreadEventBus
      const now = yield* DateTime.now
      yield* uow.global("test.create")(store.insertThread(thread("thr_n", now)))
      const subscription = yield* bus.subscribe
      yield* uow.thread("thr_n", "test.outer")(Effect.gen(function*() {
        yield* store.appendEvent({ threadId: "thr_n" as ThreadId, type: "thread.created", payload: { title: "kept" } })
        yield* Effect.ignore(uow.thread("thr_n", "test.inner")(Effect.gen(function*() {
          yield* store.appendEvent({ threadId: "thr_n" as ThreadId, type: "run.queued", payload: { runId: "run_n" as RunId, seq: 1, providerThreadId: "pth_1" as ProviderThreadId } })
          return yield* Effect.fail("inner gives up" as const)
        })))
      }))
      const stored = (yield* store.listEvents("thr_n" as ThreadId)).map((e) => e.type)
      const published = Chunk.toArray(yield* Queue.takeAll(subscription)).map((e) => e.type)
      expect(stored).toEqual(["thread.created"])
      expect(published).toEqual(["thread.created"])
    }).pipe(Effect.scoped, Effect.provide(layerOn(db))))
})

describe("persistence on Postgres: statements and interruption", () => {
  const layer = () => layerOn(() => Database.layerPgIsolated())

  it.live("insertItemsAfterLast outside the thread's lock: two transactions that read the same last seq do not both commit; the loser is a ConcurrentModification (retry), no seq twice or skipped (review r24)", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const uow = yield* UnitOfWork
      const now = yield* DateTime.now
      yield* uow.global("test.create")(store.insertThread(thread("thr_o", now)))
      const item = (id: string): Item => ({
        id: id as ItemId,
        threadId: "thr_o" as ThreadId,
        runId: null,
        seq: 0,
        kind: "assistant_message",
        text: id,
        toolCallId: null,
        toolName: null,
        messageId: null,
        isError: false,
        toolCallState: null,
        tokens: 1,
        createdAt: now
      })
      const inserted = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      // `global` takes no thread lock on Postgres: A inserts and holds its transaction open while B inserts.
      const a = yield* Effect.fork(uow.global("test.a")(Effect.gen(function*() {
        yield* store.insertItemsAfterLast("thr_o" as ThreadId, [item("itm_a1"), item("itm_a2")])
        yield* Deferred.succeed(inserted, undefined)
        yield* Deferred.await(release)
      })))
      yield* Deferred.await(inserted)
      const sql = yield* SqlClient.SqlClient
      const backend = yield* Deferred.make<number>()
      const b = yield* Effect.fork(Effect.either(uow.global("test.b")(Effect.gen(function*() {
        const rows = yield* sql<{ readonly pid: number }>`SELECT pg_backend_pid() AS pid`
        yield* Deferred.succeed(backend, Number(rows[0]?.pid))
        return yield* store.insertItemsAfterLast("thr_o" as ThreadId, [item("itm_b1")])
      }))))
      // B's insert waits on A's row (the same seq under the unique key) before A commits.
      const pid = yield* Deferred.await(backend)
      yield* sql<{ readonly n: number | string }>`SELECT COUNT(*) AS n FROM pg_stat_activity
          WHERE pid = ${pid} AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO items%'`.pipe(
        Effect.filterOrFail((rows) => Number(rows[0]?.n) > 0),
        Effect.retry(Schedule.spaced(Duration.millis(20)).pipe(Schedule.upTo(Duration.seconds(10)))),
        Effect.orDie
      )
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(a)
      const lost = yield* Fiber.join(b)
      expect(lost._tag).toBe("Left")
      if (lost._tag === "Left") expect(lost.left._tag).toBe("ConcurrentModification")
      expect((yield* store.listItems("thr_o" as ThreadId)).map((i) => [i.id, i.seq])).toEqual([["itm_a1", 1], ["itm_a2", 2]])
    }).pipe(Effect.provide(layer())))

  // Regression (fuzz test, seed 873480020): `@effect/sql-pg` answered an interrupted statement with
  // `pg_cancel_backend(pid)`, which could land on another request's statement once the connection had moved on.
  it.live("an interrupted statement runs to its end and is never cancelled: the interruption waits for it", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const statement = yield* Effect.fork(sql`CREATE TABLE interrupted_probe AS SELECT 1 AS x FROM pg_sleep(1.5)`)
      // Interrupted once the server runs it (a fixed pause before could interrupt it before it was sent, on a loaded
      // machine, or with a moment of it left).
      yield* sql<{ readonly query: string }>`SELECT query FROM pg_stat_activity WHERE query LIKE 'CREATE TABLE interrupted_probe%'`.pipe(
        Effect.filterOrFail((rows) => rows.length > 0),
        Effect.retry(Schedule.spaced(Duration.millis(20)).pipe(Schedule.upTo(Duration.seconds(10)))),
        Effect.orDie
      )
      yield* Fiber.interrupt(statement)
      // The interruption returned once the statement had finished: its table exists (committed) for another session.
      // Had it returned at once, the statement would still sleep and its table would be unknown to this query.
      const tables = yield* sql<{ readonly n: number | string }>`SELECT COUNT(*) AS n FROM interrupted_probe`
      expect(Number(tables[0]?.n)).toBe(1)
    }).pipe(Effect.provide(layer())))

  it.live("a statement the server cancels (57014) is a ConcurrentModification naming the unit of work (retry), not a PersistenceError; nothing written", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const store = yield* ThreadStore
      const uow = yield* UnitOfWork
      const now = yield* DateTime.now
      const backend = yield* Deferred.make<number>()
      const work = yield* Effect.fork(Effect.flip(uow.global("test.cancelled")(Effect.gen(function*() {
        const rows = yield* sql<{ readonly pid: number }>`SELECT pg_backend_pid() AS pid`
        yield* Deferred.succeed(backend, Number(rows[0]?.pid))
        yield* store.insertThread(thread("thr_c", now))
        yield* sql`SELECT pg_sleep(5)`
      }))))
      const pid = yield* Deferred.await(backend)
      // Another session cancels the unit of work's statement once it sleeps.
      yield* sql<{ readonly query: string }>`SELECT query FROM pg_stat_activity WHERE pid = ${pid}`.pipe(
        Effect.filterOrFail((rows) => (rows[0]?.query ?? "").includes("pg_sleep")),
        Effect.retry(Schedule.spaced(Duration.millis(20)).pipe(Schedule.upTo(Duration.seconds(5)))),
        Effect.orDie
      )
      yield* sql`SELECT pg_cancel_backend(${pid})`
      const error = yield* Fiber.join(work)
      expect(error).toEqual(new ConcurrentModification({ operation: "test.cancelled", reason: "cancelled" }))
      expect(yield* store.getThread("thr_c" as ThreadId)).toEqual(Option.none())
    }).pipe(Effect.provide(layer())))
})
