/**
 * EventFeed: the live event streams of the service — one thread's events (`thread`) or every thread's (`all`) —
 * each replaying the committed events after a client's cursor from the database, then following the live tail, with
 * no gap and no duplicate at the hand-over, for events committed by this process or any other on the same database.
 *
 * The database is the only source of events; everything else only says "read again":
 *
 * ```
 * wake-ups (one set per process)            tailers (one per watched thread, one for all threads)      subscribers
 *   ThreadEventBus (this process's commits)   on a wake-up: read the log after the tailer's cursor, ──▶  bounded
 *   Postgres LISTEN baton_events (any           publish each event once, in cursor order                 queue each
 *     process's commits; a trigger NOTIFYs)
 *   a poll every `pollMillis` (a missed
 *     NOTIFY, another SQLite process)
 * ```
 *
 * - Hand-over: a subscriber first pages through the log from its cursor with no subscription (however long the
 *   backlog, nothing is buffered), then subscribes to its tailer, pages again from where it got to, then takes the
 *   tailer's events, dropping those at or before the last one it delivered. The tailer publishes every event after
 *   its own cursor, and an event it published before the subscription was committed before it, so the second read
 *   returns it: no gap; the drop removes the overlap: no duplicate.
 * - Cursors: a thread's feed is ordered by `seq`. Writers to one thread hold its lock until they commit, so a
 *   reader that sees `seq` n sees every `seq` below it. The feed of all threads is keyed by `globalSeq`, which
 *   Postgres assigns at insert, not at commit: two transactions can commit out of `globalSeq` order, and a reader
 *   paging by `globalSeq` would pass an event that commits a moment later. So on Postgres the feed reads only
 *   final rows — those written by a transaction whose id (`xact_id`, migration 0010) is below
 *   `pg_snapshot_xmin(pg_current_snapshot())`, i.e. every transaction that could still add a row before them has
 *   ended — in `(xact_id, globalSeq)` order, an order no later commit can insert into. Its events carry their
 *   `globalSeq` as the client's cursor; resuming from a `globalSeq` resumes after that event's position. A client
 *   must resume from the LAST event it received (what SSE's `Last-Event-ID` is), which on Postgres is not always the
 *   largest `globalSeq` it saw. (The alternatives: a global lock around every commit that writes events would
 *   serialise all writers; re-reading a window behind the cursor cannot bound how late a commit lands.) The cost is
 *   latency: an event of the feed of all threads is delivered once every transaction of this schema older than its
 *   own has ended (transactions are short units of work). The snapshot's xmin counts every write transaction on the
 *   server, so when it holds rows back the feed reads again with this schema's own horizon, which leaves out the
 *   transactions of other databases and schemas (`ownHorizon`; before it, one left open anywhere on the server
 *   stopped the feed of all threads until it ended). SQLite has one writer at a time: its `globalSeq` is in commit
 *   order and every row is final.
 * - Slow subscribers: each has a queue of at most `bufferSize` events (plus the chunk of at most `pageSize` its
 *   stream is handing over). When the tailer finds the queue full, the subscriber is dropped; its stream delivers what it had queued and fails with `SubscriberTooSlow` carrying the
 *   cursor of the last event it delivered, from which the client resumes. The other subscribers are not slowed.
 * - Cost: one poller, one LISTEN connection (Postgres) and one tailer per watched thread per process, started with
 *   the first subscriber and stopped after the last; a wake-up costs one indexed read per affected tailer, however
 *   many subscribers it has. A poll costs one read per tailer on Postgres; on SQLite one read, plus one per tailer
 *   only when the log moved. On Postgres, an event written by this process wakes its tailers twice (the bus, then
 *   the notification): the second read finds nothing and costs one indexed probe.
 *
 * It does not write, frame SSE (see `EventStream` in `@baton/contracts`) or authorise. Its streams fail only with
 * `SubscriberTooSlow` or `PersistenceError` (the database failed under the tailer or the subscriber), and end only
 * when the feed closes (its Layer released, e.g. at shutdown: clients reconnect and resume) or the consumer stops.
 */
import {
  InvalidRequest,
  PersistenceError,
  SubscriberTooSlow,
  ThreadNotFound,
  type ThreadEvent,
  type ThreadId
} from "@baton/contracts"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Chunk, Clock, Duration, Effect, Fiber, Layer, Option, Queue, RcMap, RcRef, Ref, Schedule, Schema, type Scope, Stream } from "effect"
import { decodeEvents } from "./internal/EventRows.js"
import { orPersistence } from "./internal/errors.js"
import { BoolInt, Count } from "./internal/Rows.js"
import { ThreadEventBus } from "./UnitOfWork.js"
import { ThreadStore } from "./ThreadStore.js"

/** Options of `layer` (all optional). */
export interface EventFeedOptions {
  /**
   * How often every tailer reads the log whatever the wake-ups, in milliseconds: the bound on how late an event
   * committed by another process arrives when no wake-up reaches this one (SQLite; a lost Postgres notification).
   * Default `defaultPollMillis` of the dialect.
   */
  readonly pollMillis?: number
  /** Events per read of the log (replay pages and tailer reads). Default 256. */
  readonly pageSize?: number
  /** A subscriber's queue when it names none, in events. Default `defaultBufferSize`. */
  readonly bufferSize?: number
  /** How long a tailer outlives its last subscriber, in milliseconds (a reconnect reuses it). Default 5,000. */
  readonly idleMillis?: number
  /** Postgres: how often the LISTEN connection is checked by a notification to itself, in milliseconds. Default 30,000. */
  readonly listenCheckMillis?: number
}

/** The default poll interval per dialect, in milliseconds: Postgres relies on NOTIFY; SQLite's other processes on it. */
export const defaultPollMillis = { pg: 1_000, sqlite: 250 } as const

/** A subscriber's queue when it names none, in events. */
export const defaultBufferSize = 1_024

/** The largest `afterSeq` a thread's feed accepts: `seq` is a 32-bit `INTEGER` column. */
export const maxThreadCursor = 2_147_483_647

/** The Postgres channel the migration-0010 trigger notifies, with payload `<schema>:<thread id>`. */
export const channel = "baton_events"

/** Options of `EventFeed.thread`. */
export interface ThreadFeedOptions {
  /** Deliver the thread's events with `seq > afterSeq` (0: from its first event). */
  readonly afterSeq: number
  /** This subscriber's queue, in events (default: the feed's `bufferSize`). */
  readonly bufferSize?: number | undefined
}

/** Options of `EventFeed.all`. */
export interface AllFeedOptions {
  /**
   * Deliver the events after the event with this `globalSeq` (0: from the first event) — the `globalSeq` of the
   * last event the client received. A `globalSeq` that no event has resumes after the nearest event below it.
   */
  readonly afterGlobalSeq: number
  /** This subscriber's queue, in events (default: the feed's `bufferSize`). */
  readonly bufferSize?: number | undefined
}

/**
 * The feed's methods. Each checks its arguments (and the thread) before returning the stream, so a server can answer
 * 400/404 before it starts a response; the stream then fails only with `SubscriberTooSlow` or `PersistenceError`.
 */
export interface EventFeedShape {
  readonly thread: (
    threadId: ThreadId,
    options: ThreadFeedOptions
  ) => Effect.Effect<Stream.Stream<ThreadEvent, SubscriberTooSlow | PersistenceError>, ThreadNotFound | InvalidRequest | PersistenceError>
  readonly all: (
    options: AllFeedOptions
  ) => Effect.Effect<Stream.Stream<ThreadEvent, SubscriberTooSlow | PersistenceError>, InvalidRequest | PersistenceError>
  readonly replayAll: (
    options: { readonly afterGlobalSeq: number }
  ) => Effect.Effect<Stream.Stream<ThreadEvent, PersistenceError>, InvalidRequest | PersistenceError>
}

/**
 * A position in a feed's order: `(xact, globalSeq)` on the feed of all threads (`xact` the Postgres writing
 * transaction, 0 on SQLite), `(0, seq)` on a thread's feed.
 */
interface Position {
  readonly xact: bigint
  readonly at: number
}

const origin: Position = { xact: 0n, at: 0 }
const isAfter = (a: Position, b: Position) => a.xact > b.xact || (a.xact === b.xact && a.at > b.at)

/** An event with its position, as a tailer publishes it. */
interface Entry {
  readonly event: ThreadEvent
  readonly position: Position
}

/** What a subscriber's queue holds: events, then possibly the reason its subscription ended. */
type Item =
  | { readonly _tag: "Entry"; readonly entry: Entry }
  | { readonly _tag: "Overflow" }
  | { readonly _tag: "Failed"; readonly error: PersistenceError }
  | { readonly _tag: "Closed" }

/** The fan-out of one tailer: its subscribers' bounded queues. */
interface Hub {
  /** A queue of at most `capacity` events that receives what the tailer publishes from now on (scoped). */
  readonly subscribe: (capacity: number) => Effect.Effect<Queue.Dequeue<Item>, never, Scope.Scope>
}

const makeHub = () => {
  const subscribers = new Map<Queue.Queue<Item>, number>()
  const hub: Hub = {
    subscribe: (capacity) =>
      Effect.acquireRelease(
        Effect.tap(Queue.unbounded<Item>(), (queue) => Effect.sync(() => subscribers.set(queue, capacity))),
        (queue) => Effect.zipRight(Effect.sync(() => subscribers.delete(queue)), Queue.shutdown(queue))
      )
  }
  /**
   * Hands `entries` to every subscriber; one whose queue would exceed its capacity gets `Overflow` instead and is
   * dropped. The tailer is the only producer, so the size check and the offer cannot interleave with another offer.
   */
  const publish = (entries: ReadonlyArray<Entry>) =>
    Effect.forEach([...subscribers], ([queue, capacity]) =>
      Effect.gen(function*() {
        const room = capacity - (yield* Queue.size(queue))
        if (room >= entries.length) {
          yield* Queue.offerAll(queue, entries.map((entry): Item => ({ _tag: "Entry", entry })))
          return
        }
        subscribers.delete(queue)
        yield* Queue.offerAll(queue, [
          ...entries.slice(0, Math.max(0, room)).map((entry): Item => ({ _tag: "Entry", entry })),
          { _tag: "Overflow" }
        ])
      }), { discard: true })
  /** Ends every subscription with `item` (a failure, or the feed closing); clients resume by cursor. */
  const end = (item: Item) =>
    Effect.forEach([...subscribers], ([queue]) =>
      Effect.zipRight(Effect.sync(() => subscribers.delete(queue)), Queue.offer(queue, item)), { discard: true })
  return { hub, publish, end }
}

const FeedRow = Schema.Struct({ xact: Schema.String, final: Schema.Union(Schema.Boolean, BoolInt) })
const decodeFeedRows = Schema.decodeUnknown(Schema.Array(FeedRow))
const PositionRow = Schema.Struct({ xact: Schema.String, globalSeq: Count })
const decodePositionRows = Schema.decodeUnknown(Schema.Array(PositionRow))
const decodeMaxSeq = Schema.decodeUnknown(Schema.Array(Schema.Struct({ last: Schema.NullOr(Count) })))
const decodeSchema = Schema.decodeUnknown(Schema.Array(Schema.Struct({ schema: Schema.String })))

/** What a read of the feed of all threads returns: the final entries after the cursor, and whether more are pending. */
interface GlobalPage {
  readonly entries: ReadonlyArray<Entry>
  /** A committed row is not final yet (an older transaction is still open): read again shortly. */
  readonly pending: boolean
}

/**
 * Two wake-ups of one tailer as one (`waiting` first; `null` when none was waiting): their events concatenated in
 * commit order, and a read of the log if either asked for one. Past `maxEvents` events the events are dropped for a
 * read of the log (which returns them too), so a tailer held up elsewhere keeps at most `maxEvents` in memory.
 */
export const mergeWakeups = <W extends { readonly events: ReadonlyArray<unknown>; readonly read: boolean }>(
  waiting: W | null,
  next: W,
  maxEvents: number
): { readonly events: W["events"]; readonly read: boolean } => {
  if (waiting === null) return next
  const events = [...waiting.events, ...next.events]
  return events.length > maxEvents ? { events: [], read: true } : { events, read: waiting.read || next.read }
}

export class EventFeed extends Effect.Service<EventFeed>()("@baton/persistence/EventFeed", {
  scoped: Effect.suspend(() => make({}))
}) {}

/**
 * Builds the feed (scoped: its tailers and wake-ups stop with the scope). Needs `SqlClient` (migrated),
 * `ThreadStore`, `ThreadEventBus`; on Postgres, the `PgClient` that `Database.layerPg` provides for LISTEN (without
 * it the feed falls back on polling and logs a warning).
 */
export const make = (options: EventFeedOptions) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const store = yield* ThreadStore
    const bus = yield* ThreadEventBus
    const isPg = sql.onDialectOrElse({ pg: () => true, orElse: () => false })
    const pollMillis = options.pollMillis ?? (isPg ? defaultPollMillis.pg : defaultPollMillis.sqlite)
    const pageSize = options.pageSize ?? 256
    const bufferSize = options.bufferSize ?? defaultBufferSize
    const idleTimeToLive = Duration.millis(options.idleMillis ?? 5_000)
    const listenCheckMillis = options.listenCheckMillis ?? 30_000

    // ---- reading the log (the one place the dialects differ)

    /**
     * Reads fail with `PersistenceError` only: a read has no lost race to report (contention included). A
     * subscriber that goes away mid-read (a closed event stream) stops the read between statements, never inside
     * one: on Postgres, `Database.layerPg` runs every statement uninterruptibly (a cancelled statement used to be
     * cancelled with `pg_cancel_backend(pid)`, which could land on another request's statement).
     */
    const readFailure = (operation: string) => <A, E extends { readonly _tag: string; readonly message: string }, R>(self: Effect.Effect<A, E, R>) =>
      self.pipe(
        orPersistence(operation),
        Effect.mapError((e) => e._tag === "PersistenceError" ? e : new PersistenceError({ operation, detail: e.message }))
      )

    /**
     * Postgres: the horizon below which every transaction that could still write to this schema has ended, as a
     * `WITH` list ending in `horizon(h)`. The snapshot's own xmin (`pg_snapshot_xmin`) is that bound for the whole
     * server: a write transaction left open in another database, or in another schema of this one (another Baton,
     * another application, a test suite), held the feed of all threads back for as long as it stayed open (an open
     * write transaction in database `postgres` stopped `/events` of every Baton on the server, and `/events?follow=
     * false` returned nothing). This one leaves out of the snapshot's in-progress transactions those known to be
     * another's: a transaction that, in one reading of `pg_locks`, holds its transaction id and no lock stronger
     * than `AccessShareLock` on any relation of this schema, and that is still in progress after that reading
     * (`pg_xact_status`). A transaction of Baton takes such a lock on one of its relations (`ROW SHARE` on the thread's
     * row `FOR UPDATE` or on `database_lock`, `ROW EXCLUSIVE` on the relation it writes) before it has a transaction id
     * and keeps it to its end, so it is never left out while it runs. A plain read takes only `AccessShareLock`: a
     * report that reads Baton's tables and writes its own (`INSERT INTO report.x SELECT … FROM runs`) cannot add an
     * event, and before this it held the feed of all threads back for as long as it stayed open. One that ended
     * after the snapshot is kept (its rows are not visible to this snapshot: they are read at the next read). The
     * last check is what keeps one that is ending: a reading of `pg_locks` is not one instant (the per-backend
     * fast-path locks are read first, then the shared lock table), and a transaction that ends releases its
     * fast-path relation locks before its transaction id's lock, both after it left the snapshots' in-progress list.
     * Without it, a Baton transaction that committed between the snapshot and that reading showed its transaction
     * id and no lock, was left out, and the feed passed its events, which this snapshot cannot see, for good (a gap;
     * shown by stopping the committing backend in `LockReleaseAll` under gdb). A prepared transaction (no pid) is
     * kept. Costs a read of `pg_locks` when the snapshot has transactions in progress, so it is used only when the
     * plain xmin holds rows back (`readGlobal`) and where a tailer starts (`lastGlobalPosition`).
     */
    // `running` reads `elsewhere`, whose rows exist only once `locks` was read: the status is checked after the
    // reading of `pg_locks` (materialized CTEs: the planner cannot move the check before it).
    const ownHorizon = sql`WITH snap AS MATERIALIZED (SELECT pg_current_snapshot() AS s),
        locks AS MATERIALIZED (SELECT locktype, database, relation, transactionid, pid, mode, granted FROM pg_locks),
        here AS MATERIALIZED (SELECT d.oid AS db, c.relnamespace AS ns FROM pg_database d, pg_class c
          WHERE d.datname = current_database() AND c.oid = 'thread_events'::regclass),
        elsewhere AS MATERIALIZED (SELECT x FROM snap, pg_snapshot_xip(snap.s) x WHERE x::xid IN (
          SELECT t.transactionid FROM locks t
          WHERE t.locktype = 'transactionid' AND t.mode = 'ExclusiveLock' AND t.granted AND t.pid IS NOT NULL
            AND t.transactionid IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM locks r JOIN pg_class c ON c.oid = r.relation, here
              WHERE r.pid = t.pid AND r.locktype = 'relation' AND r.mode <> 'AccessShareLock'
                AND r.database = here.db AND c.relnamespace = here.ns))),
        running AS MATERIALIZED (SELECT x FROM elsewhere WHERE pg_xact_status(x) = 'in progress'),
        horizon AS (SELECT COALESCE(
          (SELECT min(x) FROM snap, pg_snapshot_xip(snap.s) x WHERE x NOT IN (SELECT x FROM running)),
          (SELECT pg_snapshot_xmax(s) FROM snap)) AS h)`

    /**
     * The final events after `from` in the order of the feed of all threads, at most `pageSize`. Postgres reads the
     * rows after `from` in `(xact_id, global_seq)` order with the snapshot's horizon, and keeps those below it up to
     * the first that is not (everything after that one is not final either). When some are held back, it reads again
     * with this schema's own horizon (`ownHorizon`: another database's or schema's open transaction holds nothing
     * back).
     */
    const readGlobal = (from: Position) =>
      Effect.gen(function*() {
        const page = yield* readGlobalWith(from, false)
        return page.pending && isPg ? yield* readGlobalWith(from, true) : page
      }).pipe(readFailure("thread_events.feedGlobal"))

    const readGlobalWith = (from: Position, own: boolean) =>
      Effect.gen(function*() {
        const rows = yield* sql.onDialectOrElse({
          pg: () =>
            own
              ? sql`${ownHorizon}
                  SELECT e.*, e.xact_id::text AS xact, e.xact_id < horizon.h AS final
                  FROM thread_events e CROSS JOIN horizon
                  WHERE (e.xact_id, e.global_seq) > (${from.xact.toString()}::xid8, ${from.at})
                  ORDER BY e.xact_id, e.global_seq LIMIT ${pageSize}`
              : sql`SELECT e.*, e.xact_id::text AS xact, e.xact_id < h.horizon AS final
                  FROM thread_events e CROSS JOIN (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS horizon) h
                  WHERE (e.xact_id, e.global_seq) > (${from.xact.toString()}::xid8, ${from.at})
                  ORDER BY e.xact_id, e.global_seq LIMIT ${pageSize}`,
          orElse: () =>
            sql`SELECT *, '0' AS xact, 1 AS final FROM thread_events WHERE global_seq > ${from.at}
                ORDER BY global_seq LIMIT ${pageSize}`
        })
        const events = yield* decodeEvents(rows)
        const marks = yield* decodeFeedRows(rows)
        const firstPending = marks.findIndex((mark) => !mark.final)
        const final = firstPending === -1 ? events.length : firstPending
        return {
          entries: events.slice(0, final).map((event, i): Entry => ({ event, position: { xact: BigInt(marks[i]!.xact), at: event.globalSeq } })),
          pending: firstPending !== -1
        } satisfies GlobalPage
      })

    /** The position of the last final event (`origin` when there is none): where a new tailer of all threads starts. */
    const lastGlobalPosition = Effect.gen(function*() {
      const query = sql.onDialectOrElse({
        pg: () =>
          sql`${ownHorizon}
              SELECT xact_id::text AS xact, global_seq FROM thread_events, horizon
              WHERE xact_id < horizon.h
              ORDER BY xact_id DESC, global_seq DESC LIMIT 1`,
        orElse: () => sql`SELECT '0' AS xact, global_seq FROM thread_events ORDER BY global_seq DESC LIMIT 1`
      })
      const rows = yield* Effect.flatMap(query, decodePositionRows)
      const row = rows[0]
      return row === undefined ? origin : { xact: BigInt(row.xact), at: row.globalSeq }
    }).pipe(readFailure("thread_events.feedEnd"))

    /**
     * The position of the event with `globalSeq` (a client's cursor); for a `globalSeq` no event has, the nearest
     * event below it stands in (`origin`'s transaction when there is none).
     */
    const globalPositionOf = (globalSeq: number) =>
      Effect.gen(function*() {
        if (globalSeq === 0 || !isPg) return { xact: 0n, at: globalSeq }
        const rows = yield* Effect.flatMap(
          sql`SELECT xact_id::text AS xact, global_seq FROM thread_events WHERE global_seq <= ${globalSeq}
              ORDER BY global_seq DESC LIMIT 1`,
          decodePositionRows
        )
        const row = rows[0]
        return { xact: row === undefined ? 0n : BigInt(row.xact), at: globalSeq }
      }).pipe(readFailure("thread_events.feedPosition"))

    /** The thread's events after `seq`, at most `pageSize` (all final: see the module's note on cursors). */
    const readThread = (threadId: ThreadId, after: Position) =>
      Effect.map(
        store.listEvents(threadId, { afterSeq: after.at, limit: pageSize }),
        (events) => events.map((event): Entry => ({ event, position: { xact: 0n, at: event.seq } }))
      ).pipe(readFailure("thread_events.feedThread"))

    const lastThreadPosition = (threadId: ThreadId) =>
      Effect.flatMap(
        sql`SELECT MAX(seq) AS last FROM thread_events WHERE thread_id = ${threadId}`,
        decodeMaxSeq
      ).pipe(Effect.map((rows) => ({ xact: 0n, at: Number(rows[0]?.last ?? 0) })), readFailure("thread_events.feedEnd"))

    // ---- wake-ups

    /**
     * The wake-up signal of each live tailer: a queue of one whose wake-ups merge (`mergeWakeups`), so a tailer busy
     * elsewhere finds one wake-up however many arrived. A wake-up carries, from this process's commits, the thread's
     * committed events themselves (`events`, in commit order), and whether the log must be read (`read`: a poll,
     * another process's commit, LISTEN). A thread tailer whose cursor the events continue (the first one's `seq` is
     * the cursor + 1, each the next) publishes them without reading the log; any gap reads the log. On SQLite the read
     * waits for the one connection, which the writers of a running turn keep busy: found by the dashboard's
     * live-latency bench (commit to page 25-75 ms at the median on a quiet machine). Wake-ups used to replace each
     * other: two commits before the tailer ran (the run's `run.queued`, then its prompt's `items.appended`) left only
     * the second, which did not continue the cursor, so the tailer read the log behind the turn start's transaction
     * (0.4-0.5 s on a 10,000-item thread after a restart).
     */
    interface Wakeup {
      readonly events: ReadonlyArray<ThreadEvent>
      readonly read: boolean
    }
    const readLog: Wakeup = { events: [], read: true }
    const threadSignals = new Map<string, Queue.Queue<Wakeup>>()
    const globalSignals = new Set<Queue.Queue<Wakeup>>()

    /** Adds `next` to the signal's waiting wake-up, if any (never more than `pageSize` events: past that, a read). */
    const signalWith = (signal: Queue.Queue<Wakeup>, next: Wakeup) =>
      Effect.flatMap(Queue.poll(signal), (waiting) => Queue.offer(signal, mergeWakeups(Option.getOrNull(waiting), next, pageSize)))

    const wake = (threadIds: Iterable<string>, committed?: ReadonlyMap<string, ReadonlyArray<ThreadEvent>>) =>
      Effect.gen(function*() {
        for (const threadId of [...threadIds]) {
          const signal = threadSignals.get(threadId)
          const events = committed?.get(threadId)
          if (signal !== undefined) yield* signalWith(signal, events === undefined ? readLog : { events, read: false })
        }
        for (const signal of [...globalSignals]) yield* signalWith(signal, readLog)
      })
    const wakeAll = Effect.suspend(() => wake(threadSignals.keys()))

    /** Registers a tailer's signal for the tailer's lifetime (only its own entry is removed at the end). */
    const registerSignal = (threadId: string | null) =>
      Effect.acquireRelease(
        Effect.tap(Queue.bounded<Wakeup>(1), (signal) =>
          Effect.sync(() => threadId === null ? globalSignals.add(signal) : threadSignals.set(threadId, signal))),
        (signal) =>
          Effect.sync(() => {
            if (threadId === null) globalSignals.delete(signal)
            else if (threadSignals.get(threadId) === signal) threadSignals.delete(threadId)
          })
      )

    /**
     * Postgres: LISTEN on `channel` for this schema's notifications (`PgClient.listen`: one connection per process).
     * A failed LISTEN is retried with backoff. `PgClient` ignores errors of its LISTEN connection, so a dropped one
     * would go silent: every `listenCheckMillis` the feed notifies itself (payload `<schema>:`) and, when that does not
     * come back within `min(5 s, listenCheckMillis)`, starts LISTEN again on a new connection. Every (re)start wakes
     * every tailer, since notifications may have been missed meanwhile (the poll covers them too).
     */
    const listenPg = Effect.gen(function*() {
      const pg = yield* Effect.serviceOption(PgClient.PgClient)
      if (Option.isNone(pg)) {
        return yield* Effect.logWarning("EventFeed: no PgClient in context; other processes' events arrive by polling only")
      }
      const prefix = `${(yield* Effect.flatMap(sql`SELECT current_schema() AS schema`, decodeSchema).pipe(readFailure("eventFeed.schema")))[0]?.schema ?? "public"}:`
      const heard = yield* Ref.make(0)
      const onPayload = (payload: string) =>
        !payload.startsWith(prefix)
          ? Effect.void
          : payload === prefix
          ? Effect.flatMap(Clock.currentTimeMillis, (now) => Ref.set(heard, now))
          : wake([payload.slice(prefix.length)])
      const listen = Effect.zipRight(wakeAll, Stream.runForEach(pg.value.listen(channel), onPayload)).pipe(
        Effect.tapError((e) => Effect.logWarning(`EventFeed: LISTEN ${channel} failed, retrying: ${e.message}`)),
        Effect.retry(Schedule.exponential(Duration.millis(100)).pipe(Schedule.union(Schedule.spaced(Duration.seconds(10)))))
      )
      const hears = Effect.gen(function*() {
        const sentAt = yield* Clock.currentTimeMillis
        // `pg_notify`, not `PgClient.notify`: that one sends `NOTIFY channel, $1`, which Postgres refuses (a syntax
        // error: NOTIFY takes no parameters), so every check failed and a healthy LISTEN was torn down and started
        // again every `listenCheckMillis`, with two warnings each time.
        yield* sql`SELECT pg_notify(${channel}, ${prefix})`
        yield* Effect.sleep(Duration.millis(Math.min(5_000, listenCheckMillis)))
        return (yield* Ref.get(heard)) >= sentAt
      }).pipe(Effect.catchAll((e) => Effect.as(Effect.logWarning(`EventFeed: NOTIFY ${channel} failed: ${e.message}`), false)))
      const supervised = Effect.gen(function*() {
        const fiber = yield* Effect.fork(listen)
        yield* Effect.repeat(Effect.delay(hears, Duration.millis(listenCheckMillis)), { while: (ok) => ok })
        yield* Effect.logWarning(`EventFeed: LISTEN ${channel} stopped hearing notifications; listening again`)
        // A connection that hangs instead of failing cannot hold the feed up: the poll still delivers meanwhile.
        yield* Effect.timeoutOption(Fiber.interrupt(fiber), Duration.seconds(5))
      })
      yield* Effect.forkScoped(Effect.forever(supervised))
    })

    /**
     * One poll. SQLite: one read of the log's last `global_seq` (in commit order there: one writer at a time), and
     * the tailers are woken only when it moved, so an idle poll costs one read however many threads are watched.
     * Postgres: every tailer is woken (a late commit can land below the last `global_seq`, so the last one proves
     * nothing); the poll only stands in for a lost notification there. A failed read wakes every tailer, whose own
     * read then reports the failure.
     */
    const lastSeen = yield* Ref.make<number | null>(null)
    const poll = isPg ? wakeAll : Effect.gen(function*() {
      const rows = yield* Effect.flatMap(sql`SELECT MAX(global_seq) AS last FROM thread_events`, decodeMaxSeq).pipe(Effect.option)
      const last = Option.map(rows, (r) => Number(r[0]?.last ?? 0))
      if (Option.isSome(last) && last.value === (yield* Ref.get(lastSeen))) return
      yield* Ref.set(lastSeen, Option.getOrNull(last))
      yield* wakeAll
    })

    /** The wake-up sources of this process, running while any tailer is: the bus, the poll, LISTEN on Postgres. */
    const sources = yield* RcRef.make({
      acquire: Effect.gen(function*() {
        const committed = yield* bus.subscribe
        yield* Effect.forkScoped(Effect.forever(
          Effect.flatMap(Queue.takeBetween(committed, 1, 4_096), (events) => {
            const byThread = new Map<string, Array<ThreadEvent>>()
            for (const e of events) {
              const list = byThread.get(e.threadId)
              if (list === undefined) byThread.set(e.threadId, [e])
              else list.push(e)
            }
            return wake(byThread.keys(), byThread)
          })
        ))
        yield* Effect.forkScoped(Effect.repeat(poll, Schedule.spaced(Duration.millis(pollMillis))))
        if (isPg) yield* listenPg
      })
    })

    // ---- tailers

    /**
     * A tailer: reads the log from `start` whenever signalled (or when `retryAfter` says to), publishes each event
     * once, in order. A failed read ends its current subscriptions with the error and is retried at the next signal.
     */
    const runTailer = (
      name: string,
      signal: Queue.Queue<Wakeup>,
      start: Position,
      read: (from: Position) => Effect.Effect<GlobalPage, PersistenceError>,
      /** The entries a wake-up's committed events give when they continue `cursor` (a thread tailer), else `null`. */
      continues: (events: ReadonlyArray<ThreadEvent>, cursor: Position) => ReadonlyArray<Entry> | null = () => null
    ) =>
      Effect.gen(function*() {
        const { end, hub, publish } = makeHub()
        // The tailer stops with its scope (the feed's Layer released, e.g. at shutdown): its streams end, cleanly.
        yield* Effect.addFinalizer(() => end({ _tag: "Closed" }))
        const cursor = yield* Ref.make(start)
        /** Reads and publishes until caught up; whether committed rows are waiting to become final. */
        const drain: Effect.Effect<boolean, PersistenceError> = Effect.gen(function*() {
          const page = yield* read(yield* Ref.get(cursor))
          const last = page.entries.at(-1)
          if (last === undefined) return page.pending
          yield* Ref.set(cursor, last.position)
          yield* publish(page.entries)
          return page.entries.length < pageSize ? page.pending : yield* drain
        })
        // While committed rows wait on an older transaction, read again soon: 5 ms doubling up to the poll interval.
        const wait = yield* Ref.make<number | null>(null)
        const step = Effect.gen(function*() {
          const millis = yield* Ref.get(wait)
          const wakeup = millis === null
            ? yield* Queue.take(signal)
            : Option.getOrNull(yield* Effect.timeoutOption(Queue.take(signal), Duration.millis(millis)))
          const direct = wakeup === null || wakeup.events.length === 0 ? null : continues(wakeup.events, yield* Ref.get(cursor))
          if (direct !== null) {
            yield* Ref.set(cursor, direct.at(-1)!.position)
            yield* publish(direct)
            if (!wakeup!.read) return
          }
          const pending = yield* drain.pipe(
            Effect.catchAll((error) =>
              Effect.as(Effect.zipRight(Effect.logWarning(`EventFeed: ${name} read failed: ${error.message}`), end({ _tag: "Failed", error })), false))
          )
          yield* Ref.set(wait, pending ? Math.min(pollMillis, millis === null ? 5 : millis * 2) : null)
        })
        yield* Effect.forkScoped(Effect.forever(step))
        return hub
      })

    const threadTailers = yield* RcMap.make({
      lookup: (threadId: ThreadId) =>
        Effect.gen(function*() {
          yield* RcRef.get(sources)
          const signal = yield* registerSignal(threadId)
          const start = yield* lastThreadPosition(threadId)
          return yield* runTailer(
            `thread ${threadId}`,
            signal,
            start,
            (from) => Effect.map(readThread(threadId, from), (entries) => ({ entries, pending: false })),
            (events, cursor) =>
              events.every((e, i) => e.threadId === threadId && e.seq === cursor.at + 1 + i)
                ? events.map((event): Entry => ({ event, position: { xact: 0n, at: event.seq } }))
                : null
          )
        }),
      idleTimeToLive
    })

    const globalTailer = yield* RcRef.make({
      acquire: Effect.gen(function*() {
        yield* RcRef.get(sources)
        const signal = yield* registerSignal(null)
        const start = yield* lastGlobalPosition
        return yield* runTailer("all", signal, start, readGlobal)
      }),
      idleTimeToLive
    })

    // ---- subscribers

    /**
     * A subscriber's stream: pages from `start` with no subscription, then subscribes, pages again from where it got
     * to, then follows the tailer's events after the last one delivered. `cursorOf` is the client's cursor of an
     * event; `tooSlow` the error when the subscriber's queue overflowed, given the last cursor delivered.
     */
    const subscriberStream = (spec: {
      readonly start: Position
      readonly startCursor: number
      readonly capacity: number
      readonly read: (from: Position) => Effect.Effect<ReadonlyArray<Entry>, PersistenceError>
      readonly hub: Effect.Effect<Hub, PersistenceError, Scope.Scope>
      readonly cursorOf: (event: ThreadEvent) => number
      readonly tooSlow: (cursor: number) => SubscriberTooSlow
    }): Stream.Stream<ThreadEvent, PersistenceError | SubscriberTooSlow> =>
      Stream.unwrapScoped(Effect.gen(function*() {
        const last = yield* Ref.make({ position: spec.start, cursor: spec.startCursor })
        const deliver = (entries: ReadonlyArray<Entry>) =>
          Effect.gen(function*() {
            const fresh: Array<ThreadEvent> = []
            let { cursor, position } = yield* Ref.get(last)
            for (const entry of entries) {
              if (!isAfter(entry.position, position)) continue
              fresh.push(entry.event)
              position = entry.position
              cursor = spec.cursorOf(entry.event)
            }
            yield* Ref.set(last, { position, cursor })
            return Chunk.unsafeFromArray(fresh)
          })
        const replay = Stream.repeatEffectChunkOption(
          Effect.flatMap(Ref.get(last), ({ position }) => spec.read(position)).pipe(
            Effect.mapError(Option.some),
            Effect.flatMap((entries) => entries.length === 0 ? Effect.fail(Option.none()) : deliver(entries))
          )
        )
        /** Why the subscription ended, once it has: the stream ends at the pull after the events before it. */
        const ended = yield* Ref.make<Option.Option<PersistenceError | "overflow" | "closed">>(Option.none())
        const follow = (queue: Queue.Dequeue<Item>) =>
          Stream.repeatEffectChunkOption(Effect.gen(function*() {
            const end = yield* Ref.get(ended)
            if (Option.isSome(end)) {
              return yield* Effect.fail(
                end.value === "closed"
                  ? Option.none()
                  : Option.some(end.value === "overflow" ? spec.tooSlow((yield* Ref.get(last)).cursor) : end.value)
              )
            }
            const items = yield* Queue.takeBetween(queue, 1, pageSize)
            const entries: Array<Entry> = []
            for (const item of items) {
              if (item._tag !== "Entry") {
                yield* Ref.set(ended, Option.some(item._tag === "Overflow" ? "overflow" as const : item._tag === "Closed" ? "closed" as const : item.error))
                break
              }
              entries.push(item.entry)
            }
            return yield* deliver(entries)
          }))
        const live = Stream.unwrapScoped(Effect.gen(function*() {
          const hub = yield* spec.hub
          const queue = yield* hub.subscribe(spec.capacity)
          return Stream.concat(replay, follow(queue))
        }))
        return Stream.concat(replay, live)
      }))

    const checkCursor = (name: string, value: number, max: number) =>
      Number.isSafeInteger(value) && value >= 0 && value <= max
        ? Effect.void
        : Effect.fail(new InvalidRequest({ reason: `${name} must be an integer from 0 to ${max}, got ${value}` }))
    const checkBuffer = (value: number | undefined) =>
      value === undefined || (Number.isSafeInteger(value) && value >= 1)
        ? Effect.void
        : Effect.fail(new InvalidRequest({ reason: `bufferSize must be a positive integer, got ${value}` }))

    const feed: EventFeedShape = {
      /**
       * The events of `threadId` with `seq > afterSeq`, replayed from the database, then live as they commit (in
       * this process or another on the same database), in `seq` order with no gap and no duplicate. The returned
       * effect checks the thread first: `ThreadNotFound` (404) when it does not exist, `InvalidRequest` (400) for a
       * cursor outside 0..`maxThreadCursor` or a `bufferSize` below 1. The stream ends only when the feed closes; it fails with
       * `SubscriberTooSlow` when more than `bufferSize` (default `defaultBufferSize`) events wait for its consumer,
       * after delivering the ones before, and with `PersistenceError` when the database fails.
       */
      thread: Effect.fn("EventFeed.thread")(function*(threadId: ThreadId, feedOptions: ThreadFeedOptions) {
        yield* checkCursor("afterSeq", feedOptions.afterSeq, maxThreadCursor)
        yield* checkBuffer(feedOptions.bufferSize)
        const thread = yield* store.getThread(threadId).pipe(readFailure("threads.get"))
        if (Option.isNone(thread)) return yield* new ThreadNotFound({ threadId })
        const capacity = feedOptions.bufferSize ?? bufferSize
        return subscriberStream({
          start: { xact: 0n, at: feedOptions.afterSeq },
          startCursor: feedOptions.afterSeq,
          capacity,
          read: (from) => readThread(threadId, from),
          hub: RcMap.get(threadTailers, threadId),
          cursorOf: (event) => event.seq,
          tooSlow: (cursor) => new SubscriberTooSlow({ threadId, cursor, bufferSize: capacity })
        })
      }),
      /**
       * The events of every thread after the event with `globalSeq = afterGlobalSeq`, replayed from the database,
       * then live, with no gap and no duplicate. On SQLite in `globalSeq` order; on Postgres in commit-safe order
       * (see the module's note: `globalSeq` may go down between two events; resume from the last one received).
       * Fails with `InvalidRequest` (400) for a cursor outside 0..`Number.MAX_SAFE_INTEGER` or a `bufferSize` below
       * 1; the stream fails like `thread`'s, with `SubscriberTooSlow.threadId` null.
       */
      all: Effect.fn("EventFeed.all")(function*(feedOptions: AllFeedOptions) {
        yield* checkCursor("afterGlobalSeq", feedOptions.afterGlobalSeq, Number.MAX_SAFE_INTEGER)
        yield* checkBuffer(feedOptions.bufferSize)
        const capacity = feedOptions.bufferSize ?? bufferSize
        const start = yield* globalPositionOf(feedOptions.afterGlobalSeq)
        return subscriberStream({
          start,
          startCursor: feedOptions.afterGlobalSeq,
          capacity,
          read: (from) => Effect.map(readGlobal(from), (page) => page.entries),
          hub: RcRef.get(globalTailer),
          cursorOf: (event) => event.globalSeq,
          tooSlow: (cursor) => new SubscriberTooSlow({ threadId: null, cursor, bufferSize: capacity })
        })
      }),
      /**
       * What `all` replays before it follows, then the end: the events of every thread after the event with
       * `globalSeq = afterGlobalSeq` that are final now, in the same order as `all` (so a client may resume either
       * from the last id the other gave). Paging by `globalSeq` alone (`ThreadStore.listEventsGlobal`) is not that
       * order on Postgres: resumed from an id a live stream sent, it repeated events sent before it and skipped
       * events it had not sent yet (found by a tester: `/events?follow=false` after a live `/events` under two
       * server processes). Fails with `InvalidRequest` for a cursor outside 0..`Number.MAX_SAFE_INTEGER`.
       */
      replayAll: Effect.fn("EventFeed.replayAll")(function*(replayOptions: { readonly afterGlobalSeq: number }) {
        yield* checkCursor("afterGlobalSeq", replayOptions.afterGlobalSeq, Number.MAX_SAFE_INTEGER)
        const start = yield* globalPositionOf(replayOptions.afterGlobalSeq)
        return Stream.paginateChunkEffect(start, (from) =>
          Effect.map(readGlobal(from), (page) => {
            const last = page.entries.at(-1)
            return [
              Chunk.unsafeFromArray(page.entries.map((entry) => entry.event)),
              page.pending || last === undefined || page.entries.length < pageSize ? Option.none() : Option.some(last.position)
            ] as const
          }))
      })
    }
    return feed
  })

/**
 * `EventFeed` with `options` over the defaults (`EventFeed.Default` is `layer()`). Needs `SqlClient`,
 * `ThreadStore`, `ThreadEventBus` (and `PgClient` on Postgres, see `make`).
 */
export const layer = (options: EventFeedOptions = {}) => Layer.scoped(EventFeed, Effect.map(make(options), EventFeed.make))
