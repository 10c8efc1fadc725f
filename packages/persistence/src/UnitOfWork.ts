/**
 * UnitOfWork: the one way orchestration writes. Each unit of work is a transaction that takes its thread's lock
 * first and maps every driver error to a boundary error, so `SqlError` never reaches a service's error channel.
 *
 * - The thread's lock: on Postgres the thread row `SELECT … FOR UPDATE` (writers to one thread queue on the row,
 *   writers to other threads do not wait); on SQLite the first statement is a write to the thread row
 *   (`lock_version`), which takes the database's write lock before any read — the effect of `BEGIN IMMEDIATE`: a
 *   second process waits under the busy timeout instead of failing with `SQLITE_BUSY_SNAPSHOT` when its snapshot
 *   goes stale. A unit of work whose first statement is always a write (`threadWritingFirst`) needs no such statement
 *   on SQLite: its own write takes the lock the same way. Correctness never relies on SQLite's single connection: the
 *   same suites run on Postgres.
 * - Errors: a unique violation or write contention (by driver code, see `internal/errors.ts`) is a
 *   `ConcurrentModification` naming the thread; anything else a `PersistenceError` naming the unit of work.
 * - Nesting: a unit of work inside another joins it (a savepoint), takes no second lock and publishes nothing.
 * - Events: thread events appended inside a unit of work are handed to `afterCommit` listeners only once the
 *   outermost transaction has committed (see `ThreadEventBus`).
 *
 * It does not decide anything about threads; services call it with the effect that is their unit of work.
 */
import { type ConcurrentModification, type PersistenceError, type ThreadEvent } from "@baton/contracts"
import { SqlClient } from "@effect/sql"
import { Effect, FiberRef, Option, PubSub } from "effect"
import { onThread, toBoundary } from "./internal/errors.js"

/** Events appended in the current unit of work, published after it commits (`null` outside a unit of work). */
export const pendingEvents: FiberRef.FiberRef<Array<ThreadEvent> | null> = FiberRef.unsafeMake<Array<ThreadEvent> | null>(null)

/**
 * When `true`, a thread event appended outside a unit of work is a defect (`ThreadStore.appendEvents` dies before
 * writing it): every state change appends its event in the same transaction, under the thread's lock (DESIGN.md).
 * Off by default (tests that drive the store directly append bare events); the simulator turns it on for every
 * operation it runs, so a write that escapes its unit of work is caught where it happens (reviewer r48 found one by
 * hand: `/compact` created an owed delivery and its event outside any, which deadlocked a concurrent send on
 * Postgres).
 */
export const requireUnitOfWork: FiberRef.FiberRef<boolean> = FiberRef.unsafeMake(false)

/**
 * The post-commit event bus of this process: subscribers see a thread event only after the transaction that
 * appended it committed, in append order. Other processes see it through the event log (`afterSeq` cursors).
 */
export class ThreadEventBus extends Effect.Service<ThreadEventBus>()("@baton/persistence/ThreadEventBus", {
  scoped: Effect.gen(function*() {
    const hub = yield* Effect.acquireRelease(PubSub.unbounded<ThreadEvent>(), PubSub.shutdown)
    let subscribers = 0
    return {
      /**
       * Publishes committed events, in order; `true` when a subscriber was there to take them (the committing fiber
       * then hands the thread over: see `UnitOfWork`).
       */
      publish: (events: ReadonlyArray<ThreadEvent>): Effect.Effect<boolean> =>
        events.length === 0 || subscribers === 0 ? Effect.succeed(false) : Effect.as(hub.publishAll(events), true),
      /** A subscription (scoped): every event committed after it was taken. */
      subscribe: Effect.acquireRelease(
        Effect.tap(hub.subscribe, () => Effect.sync(() => subscribers++)),
        () => Effect.sync(() => subscribers--)
      )
    }
  })
}) {}

/** One turn of the event loop (`setImmediate`): every fiber woken by a microtask runs before the caller resumes. */
const handOff: Effect.Effect<void> = Effect.async<void>((resume) => {
  const handle = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(handle))
})

type Mapped<E> = Exclude<E, { readonly _tag: "SqlError" } | { readonly _tag: "ParseError" }> | PersistenceError | ConcurrentModification

export class UnitOfWork extends Effect.Service<UnitOfWork>()("@baton/persistence/UnitOfWork", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const bus = yield* ThreadEventBus

    /** The statement that takes a thread's lock, per dialect (the one place the dialects differ here). */
    const lockThread = (threadId: string) =>
      sql.onDialectOrElse({
        pg: () => sql`SELECT id FROM threads WHERE id = ${threadId} FOR UPDATE`,
        orElse: () => sql`UPDATE threads SET lock_version = lock_version + 1 WHERE id = ${threadId}`
      })

    /**
     * The statement a unit of work with no thread takes first: SQLite's write lock; on Postgres a lock on a relation
     * of this schema that conflicts with nothing but DDL. With it every Postgres unit of work holds a lock on one of
     * this schema's relations from before it has a transaction id to its end (a thread's unit of work: its row's
     * `FOR UPDATE`), what the event feed relies on to tell this schema's open transactions from other databases' and
     * schemas' (`EventFeed`, its horizon): without it, a unit whose first write was in a savepoint rolled back would
     * hold a transaction id and no such lock.
     */
    const lockDatabase = sql.onDialectOrElse({
      pg: () => Effect.asVoid(sql`LOCK TABLE database_lock IN ROW SHARE MODE`),
      orElse: () => Effect.asVoid(sql`UPDATE database_lock SET version = version + 1 WHERE id = 1`)
    })

    const mapErrors = <A, E, R>(operation: string, threadId: string | null, self: Effect.Effect<A, E, R>) =>
      Effect.mapError(self, (e): Mapped<E> => {
        const tag = (e as { readonly _tag?: unknown })._tag
        if (tag === "SqlError" || tag === "ParseError") {
          const mapped = toBoundary(operation, e as { readonly _tag: string })
          return mapped._tag === "ConcurrentModification" && threadId !== null && mapped.threadId === undefined
            ? onThread(mapped, threadId, operation)
            : mapped
        }
        if (tag === "ConcurrentModification" && threadId !== null) {
          const c = e as ConcurrentModification
          if (c.threadId === undefined) return onThread(c, threadId, operation)
        }
        return e as Mapped<E>
      })

    /**
     * The lock statement of an outermost unit of work on `threadId` (`null`: none) whose first statement is a write
     * when `writesFirst`: on SQLite that write takes the database's write lock before any read, as the lock
     * statement would (a write as the first statement of a deferred transaction waits under the busy timeout and
     * takes the newest snapshot, never `SQLITE_BUSY_SNAPSHOT`), so none is run; on Postgres the row lock is taken as
     * ever (writers to one thread queue on it).
     */
    const lockOf = (threadId: string | null, writesFirst: boolean) =>
      threadId === null
        ? lockDatabase
        : writesFirst
        ? sql.onDialectOrElse({ pg: () => Effect.asVoid(lockThread(threadId)), orElse: () => Effect.void })
        : lockThread(threadId)

    const run = <A, E, R>(operation: string, threadId: string | null, self: Effect.Effect<A, E, R>, writesFirst = false) =>
      Effect.flatMap(Effect.serviceOption(SqlClient.TransactionConnection), (outer) => {
        if (Option.isSome(outer)) {
          // Nested (a savepoint): its events join the outer unit's only if the savepoint is kept.
          return Effect.gen(function*() {
            const outerEvents = yield* FiberRef.get(pendingEvents)
            const inner: Array<ThreadEvent> = []
            const result = yield* mapErrors(operation, threadId, sql.withTransaction(Effect.locally(self, pendingEvents, inner)))
            if (outerEvents !== null) outerEvents.push(...inner)
            return result
          })
        }
        return Effect.gen(function*() {
          const events: Array<ThreadEvent> = []
          const body = Effect.zipRight(lockOf(threadId, writesFirst), self)
          const result = yield* mapErrors(
            operation,
            threadId,
            sql.withTransaction(Effect.locally(body, pendingEvents, events))
          )
          // Live subscribers (an event stream) are served before this fiber goes on: the fibers that carry the
          // events to the sockets are woken by microtasks, and a macrotask turn here lets all of them run first.
          // Without it they waited until this fiber next yielded: a running turn's following units of work, with
          // SQLite synchronous, held the events back (commit to the socket 64 ms at the median, 236 ms p95, load 8).
          // Uninterruptible, so the immediate always runs out; but an interrupt arriving meanwhile is seen as the
          // hand-off ends, before `result` is returned: the unit of work then exits interrupted though its commit
          // stands (as when an interrupt arrives during a Postgres commit). Callers must not read "interrupted" as
          // "not committed".
          if ((yield* bus.publish(events))) yield* Effect.uninterruptible(handOff)
          return result
        })
      })

    return {
      /**
       * Runs `self` as one unit of work on `threadId`: one transaction, the thread's lock first, committed or rolled
       * back whole; events it appended are published after the commit. Fails with `self`'s errors (less `SqlError` /
       * `ParseError`), `ConcurrentModification` (lost race, retry) or `PersistenceError` (naming `operation`).
       */
      thread: (threadId: string, operation: string) => <A, E, R>(self: Effect.Effect<A, E, R>) => run(operation, threadId, self),
      /**
       * `thread`, for a unit of work whose first statement is always a write (an `INSERT` or `UPDATE`, whether or not
       * it changes a row): on SQLite that write takes the database's write lock itself, so the lock statement
       * (`lock_version`) is left out, one statement less; on Postgres the thread's row lock is taken first as by
       * `thread`. A unit of work that may read before its first write must use `thread`: on SQLite a read first
       * pins a snapshot that another process's commit can make stale (`SQLITE_BUSY_SNAPSHOT` at the write). Same
       * errors as `thread`.
       */
      threadWritingFirst: (threadId: string, operation: string) => <A, E, R>(self: Effect.Effect<A, E, R>) =>
        run(operation, threadId, self, true),
      /**
       * Inside a unit of work, takes the lock of another thread it writes to as well (a merge-back writes into the
       * parent): Postgres locks the row; SQLite already holds the database's write lock. Locks are taken child
       * before parent, never the other way, so two units of work cannot wait on each other.
       */
      alsoLock: (threadId: string, operation: string) => mapErrors(operation, threadId, Effect.asVoid(lockThread(threadId))),
      /** A unit of work that concerns no existing thread (creating one, process bookkeeping). */
      global: (operation: string) => <A, E, R>(self: Effect.Effect<A, E, R>) => run(operation, null, self)
    }
  })
}) {}
