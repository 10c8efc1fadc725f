/**
 * The live event feed (`EventFeed`) on both dialects, over real databases (a SQLite file; a fresh schema on the real
 * Postgres) and real second "processes" (a second orchestrator Layer with its own connection pool and event bus on
 * the same file or schema): replay then live with no gap and no duplicate while writes go on, resume by cursor,
 * another process's commits, the Postgres out-of-order commit, a slow subscriber cut off with its cursor while the
 * others continue, and 100 subscribers at once.
 */
import {
  Commands,
  type CommandId,
  InvalidRequest,
  type RunId,
  SubscriberTooSlow,
  type ThreadEvent,
  type ThreadId,
  ThreadNotFound
} from "@baton/contracts"
import { ThreadService } from "@baton/orchestration"
import { Database, EventFeed, ThreadStore, UnitOfWork } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Chunk, Context, Data, Deferred, Duration, Effect, Either, Exit, Fiber, Layer, Logger, Option, Redacted, Schedule, Scope, Stream } from "effect"

let k = 0
const cid = () => `cmd_feed_${++k}` as CommandId

const providers = [{ name: "codex", window: 200_000, inject: true }] as const

/** One orchestrator "process" on `db`: its own pool, bus and feed (`feedOptions` over the defaults when given). */
const open = (h: Harness.Harness, db: string, ns: string, feedOptions?: EventFeed.EventFeedOptions) =>
  Effect.gen(function*() {
    const ctx = yield* Layer.build(Harness.makeLayer(Object.values(h.providers), h.counter, db, {}, ns))
    const feed = feedOptions === undefined
      ? Context.get(ctx, EventFeed.EventFeed)
      : Context.get(yield* Layer.build(EventFeed.layer(feedOptions)).pipe(Effect.provide(ctx)), EventFeed.EventFeed)
    const store = Context.get(ctx, ThreadStore)
    const uow = Context.get(ctx, UnitOfWork)
    const service = Context.get(ctx, ThreadService.ThreadService)
    const sql = Context.get(ctx, SqlClient.SqlClient)
    return {
      context: ctx,
      feed,
      store,
      uow,
      service,
      sql,
      create: () =>
        service.createThread(Commands.CreateThread.make({ commandId: cid(), title: "t", providerInstance: h.providers.codex!.instance })),
      /** `n` events on `threadId` in one unit of work (`run.completed` with `itemCount` 0..n-1). */
      append: (threadId: ThreadId, n = 1) =>
        uow.thread(threadId, "test.append")(Effect.forEach(
          Array.from({ length: n }, (_, i) => i),
          (i) => store.appendEvent({ threadId, type: "run.completed", payload: { runId: "run_feed" as RunId, itemCount: i } })
        )),
      send: (threadId: ThreadId) => {
        h.script.enqueue(Harness.reply(10))
        return service.sendMessage(Commands.SendMessage.make({ commandId: cid(), threadId, text: "hello" }))
      }
    }
  })

/** A stream did not deliver `wanted` events within 30 s (`got` of them, when known). */
class FeedTimeout extends Data.TaggedError("FeedTimeout")<{ readonly wanted: number; readonly got: number | null }> {}

/** The first `n` events of `stream`, failing the test after 30 s. */
const take = <E>(stream: Stream.Stream<ThreadEvent, E>, n: number) =>
  Stream.take(stream, n).pipe(
    Stream.runCollect,
    Effect.map(Chunk.toArray),
    Effect.timeoutFail({ duration: Duration.seconds(30), onTimeout: () => new FeedTimeout({ wanted: n, got: null }) })
  )

/**
 * Runs `stream` in the background into a list; the returned function waits (up to 30 s) until `n` events are there,
 * then 200 ms more so that a duplicate would show, and returns them all.
 */
const collect = <E>(stream: Stream.Stream<ThreadEvent, E>) =>
  Effect.gen(function*() {
    const seen: Array<ThreadEvent> = []
    yield* Effect.forkScoped(Stream.runForEach(stream, (e) => Effect.sync(() => seen.push(e))))
    return (n: number) =>
      Effect.gen(function*() {
        yield* Effect.repeat(Effect.sync(() => seen.length >= n), {
          until: (done) => done,
          schedule: Schedule.spaced(Duration.millis(10))
        }).pipe(Effect.timeoutFail({ duration: Duration.seconds(30), onTimeout: () => new FeedTimeout({ wanted: n, got: seen.length }) }))
        yield* Effect.sleep(Duration.millis(200))
        return [...seen]
      })
  })

const ids = (events: ReadonlyArray<ThreadEvent>) => events.map((e) => e.eventId)

/**
 * Another session on the test database (a connection of its own) that runs `statements` in a transaction and holds it
 * open until the effect answered is run (or the scope closes): a report in psql, say, beside Baton.
 */
const openTransaction = <E>(statements: (sql: SqlClient.SqlClient) => Effect.Effect<unknown, E>) =>
  Effect.gen(function*() {
    const sql = Context.get(yield* Layer.build(PgClient.layer({ url: Redacted.make(Database.testPgUrl()), maxConnections: 1 })), SqlClient.SqlClient)
    const opened = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    yield* Effect.forkScoped(sql.withTransaction(Effect.gen(function*() {
      yield* statements(sql)
      yield* Deferred.succeed(opened, undefined)
      yield* Deferred.await(release)
    })).pipe(Effect.orDie))
    yield* Deferred.await(opened)
    return Deferred.succeed(release, undefined)
  })

/** Every event of the database in the order of the feed of all threads (an independent reading of the log). */
const allInFeedOrder = (sql: SqlClient.SqlClient) =>
  sql.onDialectOrElse({
    pg: () => sql<{ readonly eventId: string }>`SELECT event_id FROM thread_events ORDER BY xact_id, global_seq`,
    orElse: () => sql<{ readonly eventId: string }>`SELECT event_id FROM thread_events ORDER BY global_seq`
  }).pipe(Effect.map((rows) => rows.map((r) => r.eventId)), Effect.orDie)

/** Each thread's events appear in `seq` order (true of these tests' writes: no merge-back). */
const perThreadInOrder = (events: ReadonlyArray<ThreadEvent>) => {
  const last = new Map<string, number>()
  return events.every((e) => {
    const ok = e.seq > (last.get(e.threadId) ?? 0)
    last.set(e.threadId, e.seq)
    return ok
  })
}

describe.each(Harness.dialects)("EventFeed on %s", (label, dialectDb) => {
  beforeAll(() => Harness.useDb(dialectDb))

  it.live("replays then follows the live tail with no gap and no duplicate while writes go on", () => {
    const h = Harness.make([...providers])
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const p = yield* open(h, db, "a")
        const threads = [yield* p.create(), yield* p.create(), yield* p.create()]
        for (const t of threads) yield* p.append(t, 10)
        const started = yield* Deferred.make<void>()
        const writer = yield* Effect.fork(Effect.gen(function*() {
          for (let i = 0; i < 60; i++) {
            if (i === 20) yield* Deferred.succeed(started, undefined)
            const t = threads[i % 3]!
            if (i % 15 === 0) yield* p.send(t)
            else yield* p.append(t, 1 + (i % 3))
            yield* Effect.sleep(Duration.millis(2))
          }
        }))
        yield* Deferred.await(started)
        // Subscribed in the middle of the writes, from the start of the log.
        const threadSeen = yield* collect(yield* p.feed.thread(threads[0]!, { afterSeq: 0 }))
        const allSeen = yield* collect(yield* p.feed.all({ afterGlobalSeq: 0 }))
        yield* Fiber.join(writer)
        const threadLog = yield* p.store.listEvents(threads[0]!)
        const log = yield* allInFeedOrder(p.sql)
        const threadEvents = yield* threadSeen(threadLog.length)
        const all = yield* allSeen(log.length)

        expect(ids(threadEvents)).toEqual(ids(threadLog))
        expect(threadEvents.map((e) => e.seq)).toEqual(threadLog.map((_, i) => i + 1))
        expect(ids(all)).toEqual(log)
        expect(perThreadInOrder(all)).toBe(true)
        if (label === "SQLite") expect(all.map((e) => e.globalSeq)).toEqual([...all.map((e) => e.globalSeq)].sort((a, b) => a - b))
      })
    ).pipe(Effect.scoped)
  })

  it.live("a live subscriber started before the writes receives exactly the new events; the two streams match the log", () => {
    const h = Harness.make([...providers])
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const p = yield* open(h, db, "a")
        const t = yield* p.create()
        const before = (yield* p.store.listEvents(t)).length
        const lastGlobal = (yield* p.store.listEvents(t)).at(-1)!.globalSeq
        const thread = yield* Effect.fork(Effect.flatMap(p.feed.thread(t, { afterSeq: before }), (s) => take(s, 12)))
        const everything = yield* Effect.fork(Effect.flatMap(p.feed.all({ afterGlobalSeq: lastGlobal }), (s) => take(s, 12)))
        yield* Effect.sleep(Duration.millis(50))
        for (let i = 0; i < 4; i++) yield* p.append(t, 3)
        const live = yield* Fiber.join(thread)
        expect(live.map((e) => e.seq)).toEqual(Array.from({ length: 12 }, (_, i) => before + i + 1))
        expect(ids(yield* Fiber.join(everything))).toEqual(ids(live))
      })
    ).pipe(Effect.scoped)
  })

  it.live.skipIf(label !== "SQLite")("a live subscriber has a unit of work's events before the committing fiber goes on to its next one", () => {
    // The dashboard's live latency: the fibers that carry committed events to a subscriber are woken by microtasks;
    // a running turn's next units of work (synchronous on SQLite) used to run first, holding the events back (issue
    // 13, commit to socket 64 ms at the median under load). UnitOfWork now hands the thread over after publishing.
    // SQLite only: on Postgres the tailer may be reading the log when the bus wakes it (this process's own
    // notification of the previous commit arrives later), and that read is I/O, so the events wait for it to end.
    const h = Harness.make([...providers])
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const p = yield* open(h, db, "a")
        const t = yield* p.create()
        const before = (yield* p.store.listEvents(t)).length
        const order: Array<string> = []
        yield* Effect.forkScoped(Stream.runForEach(yield* p.feed.thread(t, { afterSeq: before }), (e) => Effect.sync(() => order.push(`event ${e.seq}`))))
        // Live first: the subscriber has taken over from its replay once it has seen an event appended now.
        yield* p.append(t, 1)
        yield* Effect.repeat(Effect.sync(() => order.length >= 1), { until: (done) => done, schedule: Schedule.spaced(Duration.millis(5)) })
        yield* Effect.sleep(Duration.millis(50))
        order.length = 0
        for (let i = 0; i < 3; i++) {
          yield* p.append(t, 2)
          order.push(`unit ${i} returned`)
        }
        const base = before + 1
        expect(order).toEqual([
          `event ${base + 1}`, `event ${base + 2}`, "unit 0 returned",
          `event ${base + 3}`, `event ${base + 4}`, "unit 1 returned",
          `event ${base + 5}`, `event ${base + 6}`, "unit 2 returned"
        ])
      })
    ).pipe(Effect.scoped)
  })

  it.live("resumes from a cursor: what came before it plus what comes after it is the whole feed, once", () => {
    const h = Harness.make([...providers])
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const p = yield* open(h, db, "a")
        const a = yield* p.create()
        const b = yield* p.create()
        for (let i = 0; i < 10; i++) yield* p.append(i % 2 === 0 ? a : b, 2)
        const threadLog = yield* p.store.listEvents(a)
        const firstPart = yield* take(yield* p.feed.thread(a, { afterSeq: 0 }), 7)
        const rest = yield* take(yield* p.feed.thread(a, { afterSeq: firstPart[6]!.seq }), threadLog.length - 7)
        expect(ids([...firstPart, ...rest])).toEqual(ids(threadLog))

        const total = (yield* allInFeedOrder(p.sql)).length
        const whole = yield* take(yield* p.feed.all({ afterGlobalSeq: 0 }), total)
        const head = yield* take(yield* p.feed.all({ afterGlobalSeq: 0 }), 9)
        // The client's cursor is the globalSeq of the last event it received.
        const tail = yield* Effect.fork(take(yield* p.feed.all({ afterGlobalSeq: head[8]!.globalSeq }), total - 9 + 2))
        yield* p.append(b, 2)
        const resumed = yield* Fiber.join(tail)
        expect(ids([...head, ...resumed]).slice(0, total)).toEqual(ids(whole))
        expect(ids([...head, ...resumed])).toEqual(yield* allInFeedOrder(p.sql))
      })
    ).pipe(Effect.scoped)
  })

  it.live("events committed by a second process on the same database reach this process's subscribers", () => {
    const h = Harness.make([...providers])
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const here = yield* open(h, db, "a")
        const there = yield* open(h, db, "b")
        const t = yield* there.create()
        const known = (yield* here.store.listEvents(t)).length
        const thread = yield* Effect.fork(Effect.flatMap(here.feed.thread(t, { afterSeq: known }), (s) => take(s, 10)))
        const lastSeen = (yield* here.store.listEvents(t)).at(-1)!.globalSeq
        const everything = yield* Effect.fork(Effect.flatMap(here.feed.all({ afterGlobalSeq: lastSeen }), (s) => take(s, 10)))
        yield* Effect.sleep(Duration.millis(50))
        for (let i = 0; i < 5; i++) yield* there.append(t, 2)
        const got = yield* Fiber.join(thread)
        expect(got.map((e) => e.seq)).toEqual(Array.from({ length: 10 }, (_, i) => known + i + 1))
        expect(ids(yield* Fiber.join(everything))).toEqual(ids(got))
      })
    ).pipe(Effect.scoped)
  })

  it.live("a slow subscriber is cut off with SubscriberTooSlow and its cursor; the others get everything; it resumes", () => {
    const h = Harness.make([...providers])
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const p = yield* open(h, db, "a")
        const t = yield* p.create()
        const start = (yield* p.store.listEvents(t)).length
        const fast = yield* Effect.fork(Effect.flatMap(p.feed.thread(t, { afterSeq: start }), (s) => take(s, 41)))
        const gate = yield* Deferred.make<void>()
        const firstSeen = yield* Deferred.make<void>()
        const received: Array<ThreadEvent> = []
        const slowStream = yield* p.feed.thread(t, { afterSeq: start, bufferSize: 4 })
        // The slow consumer takes the first event, then stops pulling until the gate opens.
        const slow = yield* Effect.fork(Effect.either(Stream.runForEach(slowStream, (e) =>
          Effect.gen(function*() {
            received.push(e)
            if (received.length === 1) {
              yield* Deferred.succeed(firstSeen, undefined)
              yield* Deferred.await(gate)
            }
          }))))
        // Time for the slow stream to subscribe before the first event: a first event it read by replay (the page it
        // reads right after subscribing) would be followed, once the gate opens, by replaying the rest from the
        // database, and it would get every event before its overflow is reported (seen once on Postgres at load 10:
        // 41 of 41). 50 ms was not always enough under load.
        yield* Effect.sleep(Duration.millis(500))
        yield* p.append(t, 1)
        yield* Deferred.await(firstSeen)
        for (let i = 0; i < 20; i++) yield* p.append(t, 2)
        const all = yield* Fiber.join(fast)
        yield* Deferred.succeed(gate, undefined)
        const outcome = yield* Fiber.join(slow)

        expect(all.map((e) => e.seq)).toEqual(Array.from({ length: 41 }, (_, i) => start + i + 1))
        expect(Either.isLeft(outcome)).toBe(true)
        const error = Either.getLeft(outcome).pipe(Option.getOrThrow)
        expect(error).toBeInstanceOf(SubscriberTooSlow)
        const tooSlow = error as SubscriberTooSlow
        // It got a gap-free prefix, fewer than all, and the error names the last one it got.
        expect(received.map((e) => e.seq)).toEqual(Array.from({ length: received.length }, (_, i) => start + i + 1))
        expect(received.length).toBeLessThan(41)
        expect(tooSlow).toMatchObject({ threadId: t, cursor: received.at(-1)!.seq, bufferSize: 4 })
        expect(tooSlow.message).toContain(`Last-Event-ID: ${received.at(-1)!.seq}`)
        const resumed = yield* take(yield* p.feed.thread(t, { afterSeq: tooSlow.cursor }), 41 - received.length)
        expect(ids([...received, ...resumed])).toEqual(ids(all))
      })
    ).pipe(Effect.scoped)
  })

  it.live("100 concurrent subscribers (50 on the thread, 50 on all threads) each receive every event once", () => {
    const h = Harness.make([...providers])
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const p = yield* open(h, db, "a")
        const t = yield* p.create()
        const other = yield* p.create()
        const seq0 = (yield* p.store.listEvents(t)).length
        const global0 = (yield* p.store.listEvents(other)).at(-1)!.globalSeq
        const subscribers = yield* Effect.forEach(Array.from({ length: 100 }, (_, i) => i), (i) =>
          Effect.fork(
            i % 2 === 0
              ? Effect.flatMap(p.feed.thread(t, { afterSeq: seq0 }), (s) => take(s, 60))
              : Effect.flatMap(p.feed.all({ afterGlobalSeq: global0 }), (s) => take(s, 90))
          ))
        yield* Effect.sleep(Duration.millis(100))
        for (let i = 0; i < 30; i++) {
          yield* p.append(t, 2)
          yield* p.append(other, 1)
        }
        const results = yield* Effect.forEach(subscribers, Fiber.join)
        const threadLog = ids((yield* p.store.listEvents(t)).slice(seq0))
        const allLog = (yield* allInFeedOrder(p.sql)).slice(-90)
        results.forEach((events, i) => expect(ids(events)).toEqual(i % 2 === 0 ? threadLog : allLog))
      })
    ).pipe(Effect.scoped)
  })

  it.live("when the feed closes (its Layer released, as at shutdown) its streams end after what they delivered", () => {
    const h = Harness.make([...providers])
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const p = yield* open(h, db, "a")
        const t = yield* p.create()
        const known = (yield* p.store.listEvents(t)).length
        const scope = yield* Scope.make()
        const feed = Context.get(
          yield* Layer.buildWithScope(EventFeed.layer(), scope).pipe(Effect.provide(p.context)),
          EventFeed.EventFeed
        )
        const seen = yield* Effect.fork(Stream.runCollect(yield* feed.thread(t, { afterSeq: known })))
        yield* Effect.sleep(Duration.millis(50))
        yield* p.append(t, 3)
        yield* Effect.sleep(Duration.millis(300))
        yield* Scope.close(scope, Exit.void)
        const got = yield* Fiber.join(seen).pipe(Effect.timeout(Duration.seconds(10)))
        expect(Chunk.toArray(got).map((e) => e.seq)).toEqual([1, 2, 3].map((i) => known + i))
      })
    ).pipe(Effect.scoped)
  })

  it.live("an unknown thread is ThreadNotFound; a cursor out of range or a zero buffer is InvalidRequest", () => {
    const h = Harness.make([...providers])
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const p = yield* open(h, db, "a")
        const t = yield* p.create()
        expect(yield* Effect.flip(p.feed.thread("thr_missing" as ThreadId, { afterSeq: 0 }))).toEqual(new ThreadNotFound({ threadId: "thr_missing" }))
        expect(yield* Effect.flip(p.feed.thread(t, { afterSeq: -1 }))).toBeInstanceOf(InvalidRequest)
        expect(yield* Effect.flip(p.feed.thread(t, { afterSeq: 2 ** 31 }))).toBeInstanceOf(InvalidRequest)
        expect(yield* Effect.flip(p.feed.thread(t, { afterSeq: 0, bufferSize: 0 }))).toBeInstanceOf(InvalidRequest)
        expect(yield* Effect.flip(p.feed.all({ afterGlobalSeq: 1.5 }))).toBeInstanceOf(InvalidRequest)
      })
    ).pipe(Effect.scoped)
  })
})

describe("EventFeed on Postgres", () => {
  beforeAll(() => Harness.useDb(Harness.postgres))

  it.live("another process's commit arrives by NOTIFY (polling off); a lost NOTIFY is made up by the poll", () => {
    const h = Harness.make([...providers])
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const quiet = yield* open(h, db, "a", { pollMillis: 600_000, listenCheckMillis: 100 })
        const polling = yield* open(h, db, "c", { pollMillis: 100 })
        const there = yield* open(h, db, "b")
        const t = yield* there.create()
        const known = (yield* there.store.listEvents(t)).length
        const byNotify = yield* Effect.fork(Effect.flatMap(quiet.feed.thread(t, { afterSeq: known }), (s) => take(s, 4)))
        const byPoll = yield* Effect.fork(Effect.flatMap(polling.feed.thread(t, { afterSeq: known }), (s) => take(s, 6)))
        yield* Effect.sleep(Duration.millis(200))
        yield* there.append(t, 2)
        yield* there.append(t, 2)
        expect((yield* Fiber.join(byNotify)).map((e) => e.seq)).toEqual([1, 2, 3, 4].map((i) => known + i))
        // Notifications lost: the poll still delivers.
        yield* there.sql`ALTER TABLE thread_events DISABLE TRIGGER thread_events_notify`.pipe(Effect.orDie)
        yield* there.append(t, 2)
        expect((yield* Fiber.join(byPoll)).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6].map((i) => known + i))
      })
    ).pipe(Effect.scoped)
  })

  it.live("a LISTEN connection that dies is noticed by its self-check and replaced; notifications flow again", () => {
    const h = Harness.make([...providers])
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const there = yield* open(h, db, "b")
        const quiet = yield* open(h, db, "a", { pollMillis: 600_000, listenCheckMillis: 150 })
        const t = yield* there.create()
        const known = (yield* there.store.listEvents(t)).length
        // Every listener of the database (other suites running at the same time listen too, in their own schemas).
        const listeners = there.sql<{ readonly pid: number }>`SELECT pid FROM pg_stat_activity
          WHERE query = ${`LISTEN "${EventFeed.channel}"`}`.pipe(Effect.orDie)
        const others = new Set((yield* listeners).map((r) => r.pid))
        const got = yield* collect(yield* quiet.feed.thread(t, { afterSeq: known }))
        // `quiet`'s listener: the one that appears once it subscribed (the only feed subscribed here); waited for up to
        // 15 s (a loaded machine took longer than the 300 ms this test gave it: stop 42, under load 8).
        let before: Array<number> = []
        for (let i = 0; i < 150 && before.length === 0; i++) {
          yield* Effect.sleep(Duration.millis(100))
          before = (yield* listeners).map((r) => r.pid).filter((pid) => !others.has(pid))
        }
        expect(before.length).toBeGreaterThan(0)
        yield* there.sql`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid IN ${there.sql.in(before)}`.pipe(Effect.orDie)
        // A new listener appears within the self-check's period (150 ms) plus a reconnect: waited for up to 15 s, as
        // a loaded machine (other suites in parallel) can delay it.
        let replaced: Array<number> = []
        for (let i = 0; i < 150 && replaced.length === 0; i++) {
          yield* Effect.sleep(Duration.millis(100))
          replaced = (yield* listeners).map((r) => r.pid).filter((pid) => !before.includes(pid) && !others.has(pid))
        }
        expect(replaced.length).toBeGreaterThan(0)
        yield* there.append(t, 2)
        expect((yield* got(2)).map((e) => e.seq)).toEqual([1, 2].map((i) => known + i))
      })
    ).pipe(Effect.scoped)
  })

  it.live("a healthy LISTEN connection is kept: the self-check hears its own notification", () => {
    const h = Harness.make([...providers])
    // A fresh pair of eyes: a server with a live event stream logged "NOTIFY baton_events failed" and "LISTEN
    // baton_events stopped hearing notifications; listening again" every 30 s and replaced its LISTEN connection:
    // `PgClient.notify` sends `NOTIFY channel, $1`, which Postgres refuses, so the self-check never heard itself.
    const warnings: Array<string> = []
    const capture = Logger.make(({ logLevel, message }) => {
      if (logLevel._tag === "Warning") warnings.push(String(message))
    })
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const there = yield* open(h, db, "b")
        const quiet = yield* open(h, db, "a", { pollMillis: 600_000, listenCheckMillis: 150 })
        const t = yield* there.create()
        const known = (yield* there.store.listEvents(t)).length
        const got = yield* collect(yield* quiet.feed.thread(t, { afterSeq: known }))
        // Ten self-checks and more (150 ms apart, each waiting 150 ms for its notification).
        yield* Effect.sleep(Duration.seconds(3))
        expect(warnings.filter((w) => w.includes("LISTEN") || w.includes("NOTIFY"))).toEqual([])
        yield* there.append(t, 2)
        expect((yield* got(2)).map((e) => e.seq)).toEqual([1, 2].map((i) => known + i))
      })
    ).pipe(Effect.scoped, Effect.provide(Logger.add(capture)))
  })

  it.live("two transactions committing out of globalSeq order: the feed of all threads skips neither", () => {
    const h = Harness.make([...providers])
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const p = yield* open(h, db, "a")
        const [a, b] = [yield* p.create(), yield* p.create()]
        const cursor = (yield* p.store.listEvents(b)).at(-1)!.globalSeq
        const feed = yield* Effect.fork(Effect.flatMap(p.feed.all({ afterGlobalSeq: cursor }), (s) => take(s, 2)))
        // A takes the lower globalSeq and commits last.
        const appended = yield* Deferred.make<void>()
        const commit = yield* Deferred.make<void>()
        const slow = yield* Effect.fork(p.uow.thread(a, "test.slow")(Effect.gen(function*() {
          yield* p.store.appendEvent({ threadId: a, type: "run.completed", payload: { runId: "run_a" as RunId, itemCount: 1 } })
          yield* Deferred.succeed(appended, undefined)
          yield* Deferred.await(commit)
        })))
        yield* Deferred.await(appended)
        yield* p.append(b, 1)
        // What a reader paging by globalSeq alone sees now: B's event, past A's, which is not committed yet.
        const naive = yield* p.store.listEventsGlobal({ afterGlobalSeq: cursor, limit: 10 })
        expect(naive.map((e) => e.threadId)).toEqual([b])
        yield* Effect.sleep(Duration.millis(300))
        expect(Option.isNone(yield* Fiber.poll(feed))).toBe(true)
        yield* Deferred.succeed(commit, undefined)
        yield* Fiber.join(slow)
        const got = yield* Fiber.join(feed)
        expect(got.map((e) => e.threadId)).toEqual([a, b])
        expect(got[0]!.globalSeq).toBeLessThan(got[1]!.globalSeq)
      })
    ).pipe(Effect.scoped)
  })

  it.live("a write transaction left open in another database, or in this one outside Baton's schema, holds the feed of all threads back no more", () => {
    const h = Harness.make([...providers])
    // Stop 41's CI: a write transaction open anywhere on the server held back the snapshot's xmin, the feed's horizon,
    // so `/events` delivered nothing and `/events?follow=false` returned nothing until it ended.
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const p = yield* open(h, db, "a")
        const t = yield* p.create()
        const cursor = (yield* p.store.listEvents(t)).at(-1)!.globalSeq
        // Two transactions holding a transaction id (no lock on any of Baton's relations), open until the end: one in
        // database `postgres`, one in this database outside Baton's schema.
        yield* Harness.foreignTransaction
        const release = yield* openTransaction((here) => here`SELECT pg_current_xact_id()`)
        yield* p.append(t, 2)
        const live = yield* Effect.flatMap(p.feed.all({ afterGlobalSeq: cursor }), (s) => take(s, 2))
        expect(live.map((e) => [e.threadId, e.seq])).toEqual([[t, live[0]!.seq], [t, live[0]!.seq + 1]])
        const replayed = yield* Effect.flatMap(p.feed.replayAll({ afterGlobalSeq: cursor }), Stream.runCollect)
        expect(ids(Chunk.toArray(replayed))).toEqual(ids(live))
        // A transaction of this schema still holds back what commits after it began (it may yet write before them).
        const locked = yield* Deferred.make<void>()
        const commit = yield* Deferred.make<void>()
        const mine = yield* Effect.fork(p.uow.thread(t, "test.open")(Effect.zipRight(Deferred.succeed(locked, undefined), Deferred.await(commit))))
        yield* Deferred.await(locked)
        const u = yield* p.create()
        const held = yield* Effect.flatMap(p.feed.replayAll({ afterGlobalSeq: live[1]!.globalSeq }), Stream.runCollect)
        expect(Chunk.toArray(held)).toEqual([])
        yield* Deferred.succeed(commit, undefined)
        yield* Fiber.join(mine)
        const after = yield* Effect.flatMap(p.feed.replayAll({ afterGlobalSeq: live[1]!.globalSeq }), Stream.runCollect)
        expect(new Set(Chunk.toArray(after).map((e) => e.threadId))).toEqual(new Set([u]))
        yield* release
      })
    ).pipe(Effect.scoped)
  })

  it.live("a transaction that reads Baton's tables and writes elsewhere (a report) holds the feed of all threads back no more", () => {
    const h = Harness.make([...providers])
    // A fresh pair of eyes: `BEGIN; INSERT INTO rpt.x SELECT count(*) FROM runs; …` held open in psql on Baton's
    // database stopped `/events` until it ended: its read lock (AccessShareLock) on `runs` counted as a Baton writer's.
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const p = yield* open(h, db, "a")
        const t = yield* p.create()
        const cursor = (yield* p.store.listEvents(t)).at(-1)!.globalSeq
        const [{ schema }] = yield* p.sql<{ readonly schema: string }>`SELECT current_schema() AS schema`.pipe(Effect.orDie)
        const release = yield* openTransaction((other) =>
          Effect.zipRight(other`SELECT count(*) FROM ${other(schema!)}.runs`, other`SELECT pg_current_xact_id()`)
        )
        yield* p.append(t, 2)
        const replayed = yield* Effect.flatMap(p.feed.replayAll({ afterGlobalSeq: cursor }), Stream.runCollect)
        expect(Chunk.toArray(replayed).map((e) => [e.threadId, e.type])).toEqual([[t, "run.completed"], [t, "run.completed"]])
        const live = yield* Effect.flatMap(p.feed.all({ afterGlobalSeq: cursor }), (s) => take(s, 2))
        expect(ids(live)).toEqual(ids(Chunk.toArray(replayed)))
        yield* release
      })
    ).pipe(Effect.scoped)
  })

  it.live("a transaction that began first but inserted last comes first; resuming from either event's globalSeq skips nothing", () => {
    const h = Harness.make([...providers])
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const p = yield* open(h, db, "a")
        const [a, b] = [yield* p.create(), yield* p.create()]
        const cursor = (yield* p.store.listEvents(b)).at(-1)!.globalSeq
        const feed = yield* Effect.fork(Effect.flatMap(p.feed.all({ afterGlobalSeq: cursor }), (s) => take(s, 3)))
        // A locks its thread (its transaction id is taken), B inserts and commits, then A inserts and commits.
        const locked = yield* Deferred.make<void>()
        const insert = yield* Deferred.make<void>()
        const slow = yield* Effect.fork(p.uow.thread(a, "test.slow")(Effect.gen(function*() {
          yield* Deferred.succeed(locked, undefined)
          yield* Deferred.await(insert)
          yield* p.store.appendEvent({ threadId: a, type: "run.completed", payload: { runId: "run_a" as RunId, itemCount: 1 } })
        })))
        yield* Deferred.await(locked)
        yield* p.append(b, 1)
        yield* Deferred.succeed(insert, undefined)
        yield* Fiber.join(slow)
        yield* p.append(b, 1)
        const got = yield* Fiber.join(feed)
        expect(got.map((e) => e.threadId)).toEqual([a, b, b])
        // A's globalSeq is above B's first: the feed's order is commit-safe, not globalSeq order.
        expect(got[0]!.globalSeq).toBeGreaterThan(got[1]!.globalSeq)
        const after = (event: ThreadEvent, n: number) => Effect.flatMap(p.feed.all({ afterGlobalSeq: event.globalSeq }), (s) => take(s, n))
        expect(ids(yield* after(got[0]!, 2))).toEqual(ids(got.slice(1)))
        expect(ids(yield* after(got[1]!, 1))).toEqual(ids(got.slice(2)))
      })
    ).pipe(Effect.scoped)
  })
})
