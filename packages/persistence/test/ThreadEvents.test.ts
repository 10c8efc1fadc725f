/**
 * The typed event log of `ThreadStore` on both dialects (a SQLite file and a fresh schema on the real Postgres,
 * `Database.testPgUrl()`: `BATON_TEST_DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`): every event
 * type round-trips, the cursor reads page, `(thread_id, seq)` stays unique, and migration 0008 backfills the rows of
 * an older database.
 */
import type {
  CommandId,
  DeliveryId,
  HandoffId,
  ItemId,
  NativeThreadId,
  NewThreadEvent,
  OffloadId,
  ProviderInstance,
  ProviderThreadId,
  RunId,
  ThreadEventType,
  ThreadId,
  ToolCallId
} from "@baton/contracts"
import { Database, Migrations, ThreadEventBus, ThreadStore, UnitOfWork } from "@baton/persistence"
import { Migrator, SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { describe, expect, it } from "@effect/vitest"
import { DateTime, Effect, Layer, Redacted, String as Str } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

const names = { transformQueryNames: Str.camelToSnake, transformResultNames: Str.snakeToCamel }

/**
 * An empty schema on the real Postgres (`Database.layerPgSchema()`: the server at `Database.testPgUrl()`,
 * `BATON_TEST_DATABASE_URL`), not migrated, dropped when the layer is released.
 */
const emptyPostgres = () =>
  Layer.unwrapEffect(Effect.map(Database.PgSchemaUrl, (url) => PgClient.layer({ url: Redacted.make(url), maxConnections: 2, ...names })))
    .pipe(Layer.provide(Database.layerPgSchema()))

/** An empty SQLite file in a temporary directory, removed when the layer is released. */
const emptySqlite = () =>
  Layer.unwrapScoped(Effect.map(
    Effect.acquireRelease(
      Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-events-"))),
      (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
    ),
    (dir) => SqliteClient.layer({ filename: Path.join(dir, "baton.sqlite"), ...names })
  ))

/**
 * Each dialect: an empty database (for the migration test) and a migrated one (`Database`'s own Layers). A setup
 * failure (the server unreachable) is a defect.
 */
interface Dialect {
  readonly empty: () => Layer.Layer<SqlClient.SqlClient>
  readonly migrated: () => Layer.Layer<SqlClient.SqlClient>
}
const sqliteFile: Dialect = {
  empty: () => Layer.orDie(emptySqlite()),
  migrated: () => Layer.orDie(Layer.provideMerge(Layer.effectDiscard(Migrations.run), emptySqlite()))
}
const postgres: Dialect = { empty: () => Layer.orDie(emptyPostgres()), migrated: () => Layer.orDie(Database.layerPgIsolated()) }
const dialects = [["SQLite file", sqliteFile], ["Postgres", postgres]] as const

/** The store over a migrated database of the dialect. */
const migratedStore = (db: Dialect) => ThreadStore.Default.pipe(Layer.provideMerge(db.migrated()))

const thr = (id: string) => id as ThreadId
const run = (id: string) => id as RunId
const nat = (id: string) => id as NativeThreadId
const pth = (id: string) => id as ProviderThreadId
const hof = (id: string) => id as HandoffId
const dlv = (id: string) => id as DeliveryId
const itm = (id: string) => id as ItemId

const insertThread = (id: string) =>
  Effect.flatMap(DateTime.now, (now) =>
    Effect.flatMap(ThreadStore, (store) =>
      store.insertThread({ id: thr(id), title: "a thread", activeProviderThreadId: null, createdAt: now, updatedAt: now })))

/** One payload of every event type; the mapped type makes a new event type without a sample a type error. */
const samples: { readonly [T in ThreadEventType]: Extract<NewThreadEvent, { readonly type: T }>["payload"] } = {
  "thread.created": { title: "a fork", parentThreadId: thr("thr_parent") },
  "run.queued": { runId: run("run_1"), seq: 1, providerThreadId: pth("pth_1") },
  "run.started": { runId: run("run_1"), nativeThreadId: nat("nat_1"), attempt: 2 },
  "run.completed": { runId: run("run_1"), itemCount: 3 },
  "run.failed": { runId: run("run_1"), stopPoint: "before_provider", reason: "provider unavailable" },
  "run.interrupted": { runId: run("run_1"), stopPoint: "after_provider", reason: "the user interrupted" },
  "run.prompt_deferred": { runId: run("run_2"), behindRunId: run("run_1") },
  "run.waiting": {
    runId: run("run_1"),
    round: 2,
    calls: [{ toolCallId: "call_1" as ToolCallId, name: "read_file", arguments: "{\"path\":\"a.ts\"}" }],
    deadlineAt: DateTime.unsafeMake("2026-12-02T01:00:00.000Z")
  },
  "run.retry_scheduled": {
    runId: run("run_1"),
    providerInstance: "claude" as ProviderInstance,
    attempt: 1,
    delayMs: 30_000,
    reason: "HTTP 429: Anthropic rate_limit_error: Number of request tokens has exceeded your per-minute rate limit",
    httpStatus: 429
  },
  "run.tool_results_recorded": { runId: run("run_1"), round: 2, toolCallIds: ["call_1"], source: "client" },
  "items.appended": { runId: null, itemIds: [itm("itm_4"), itm("itm_5")], fromSeq: 4, toSeq: 5 },
  "provider_thread.created": { providerThreadId: pth("pth_1"), providerInstance: "codex" as ProviderInstance },
  "provider_thread.reconfigured": {
    providerThreadId: pth("pth_1"),
    model: "gpt-5",
    contextWindow: 272_000,
    previousModel: "gpt-4.1",
    previousContextWindow: 1_047_576
  },
  "provider.switched": { from: null, to: pth("pth_2"), handoffId: hof("hof_1") },
  "native_thread.started": { nativeThreadId: nat("nat_2"), providerThreadId: pth("pth_1"), generation: 2, replaces: nat("nat_1") },
  "native_thread.replaced": { nativeThreadId: nat("nat_1"), reason: "the provider no longer has it" },
  "usage.reported": {
    nativeThreadId: nat("nat_1"),
    usage: { usedTokens: 777_000, maxTokens: 258_000 },
    trusted: false,
    anomaly: "777000 used exceeds the reported maximum 258000",
    estimateUsed: 12_345
  },
  "context.overflowed": {
    runId: run("run_1"),
    nativeThreadId: nat("nat_1"),
    attempt: 1,
    recovery: "replace_native_thread",
    window: 200_000
  },
  "items.replay_skipped": { runId: run("run_1"), count: 2, messageIds: ["msg_1"], toolCallIds: ["call_1"] },
  "handoff.created": {
    handoffId: hof("hof_1"),
    kind: "missed_run",
    targetProviderThreadId: pth("pth_2"),
    itemCount: 2,
    sourceRunIds: [run("run_1")],
    lateOutputOf: run("run_1"),
    supersedes: [hof("hof_0")]
  },
  "handoff.extended": { handoffId: hof("hof_1"), addedItemIds: [itm("itm_6")], addedRunIds: [run("run_2")] },
  "delivery.created": { deliveryId: dlv("dlv_1"), handoffId: hof("hof_1"), nativeThreadId: nat("nat_2") },
  "delivery.deferred": { deliveryId: dlv("dlv_1"), handoffId: hof("hof_1"), budget: null, reason: "no room", deferCount: 1 },
  "delivery.pending": {
    deliveryId: dlv("dlv_1"),
    handoffId: hof("hof_1"),
    mode: "inline",
    runId: run("run_2"),
    budget: 16_000,
    renderedTokens: 900,
    ratio: 1.15,
    itemIds: [itm("itm_4")],
    omittedItemIds: [itm("itm_5")]
  },
  "delivery.injected": {
    deliveryId: dlv("dlv_1"),
    handoffId: hof("hof_1"),
    deliveredItemIds: [itm("itm_4")],
    omittedItemIds: [],
    tokens: 900
  },
  "delivery.inlined": {
    deliveryId: dlv("dlv_2"),
    handoffId: hof("hof_1"),
    deliveredItemIds: [],
    omittedItemIds: [itm("itm_5")],
    tokens: 0
  },
  "delivery.superseded": { deliveryId: dlv("dlv_3"), handoffId: hof("hof_1"), reason: "replaced by the summary" },
  "thread.compacted": {
    nativeThreadId: nat("nat_2"),
    usedBefore: 150_000,
    usedAfter: null,
    delivered: 0,
    state: { usedTokens: null, estimatedTokens: 40_000, owed: ["hof_1:2"] }
  },
  "thread.forked": {
    linkId: "lnk_1",
    parentThreadId: thr("thr_parent"),
    atRunSeq: 3,
    runId: run("run_3"),
    itemCount: 7,
    handoffId: hof("hof_2")
  },
  "thread.merged": { linkId: "lnk_2", parentThreadId: thr("thr_parent"), throughRunSeq: 5 },
  "thread.offloaded": {
    offloadId: "off_1" as OffloadId,
    generation: 1,
    summaryItemId: itm("itm_9"),
    previousOffloadId: null,
    fromSeq: 0,
    cutSeq: 8,
    coveredItems: 8,
    coveredTokens: 30_000,
    summaryTokens: 600,
    keptItems: 2,
    keptTokens: 1_000,
    keepTokens: 1_000,
    supersededHandoffIds: [hof("hof_1")],
    handoffIds: [hof("hof_3")]
  },
  "thread.offload_failed": { reason: "the summariser failed", keepTokens: 1_000, cutSeq: 8 },
  "thread.offload_undone": { offloadId: "off_1" as never, generation: 1, summaryItemId: "itm_9" as never, cutSeq: 8 },
  "calibration.updated": {
    providerInstance: "codex" as ProviderInstance,
    oldRatio: 1,
    newRatio: 1.1499999999999997,
    samples: 1,
    estimatedTokens: 5_001,
    reportedTokens: 5_752
  },
  "context.offloaded": {
    runId: run("run_1"),
    providerInstance: "claude" as ProviderInstance,
    nativeThreadId: nat("nat_1"),
    nativeRef: "claude-5f0c",
    units: 2,
    refs: ["tool:toolu_1", "tool:toolu_2"],
    entrySeqs: [4, 6],
    tier: "mild",
    tokensBefore: 41_200,
    tokensAfter: 12_950
  },
  "context.offload_undone": {
    providerInstance: "claude" as ProviderInstance,
    nativeThreadId: nat("nat_1"),
    nativeRef: "claude-5f0c",
    flushSeq: 9,
    entrySeqs: [4, 6]
  },
  "context.offload_control_set": {
    control: { enabled: true, keepNewestUnits: 1, pinnedItemIds: ["itm_7" as ItemId] }
  },
  "gateway.diverged": { runId: run("run_1"), sharedMessages: 3, storedMessages: 8, requestMessages: 5 },
  "gateway.rerendered": { runId: run("run_1"), sharedMessages: 12, storedMessages: 8, requestMessages: 14 },
  "gateway.retried": { runId: run("run_1"), requestMessages: 5, storedMessages: 6 },
  "gateway.offloaded": { runId: run("run_1"), refs: ["tool:toolu_1", "tool:toolu_2"], tier: "mild", tokensBefore: 30000, tokensAfter: 9000 },
  "gateway.usage": { runId: run("run_1"), providerInstance: "anthropic" as ProviderInstance, inputTokens: 12, cacheWriteTokens: 900, cacheReadTokens: 40000, outputTokens: 300, windowTokens: 200000 }
}

/** `samples` as append inputs, in declaration order, plus the other side of the union payloads (parent side). */
const allSamples = (threadId: ThreadId): ReadonlyArray<NewThreadEvent> => [
  ...Object.entries(samples).map(([type, payload]) => ({ threadId, type, payload }) as NewThreadEvent),
  { threadId, type: "thread.forked", payload: { linkId: "lnk_1", forkThreadId: thr("thr_fork"), atRunSeq: 3 } },
  {
    threadId,
    type: "thread.merged",
    payload: {
      linkId: "lnk_2",
      forkThreadId: thr("thr_fork"),
      runId: run("run_4"),
      fromRunSeq: 3,
      throughRunSeq: 5,
      itemCount: 4,
      handoffId: null
    }
  },
  // A merge behind an unfinished run of the parent: its copies and handoff are owed till that run ends.
  {
    threadId,
    type: "thread.merged",
    payload: {
      linkId: "lnk_3",
      forkThreadId: thr("thr_fork"),
      runId: run("run_6"),
      fromRunSeq: 5,
      throughRunSeq: 6,
      itemCount: 2,
      handoffId: null,
      behindRunId: run("run_5")
    }
  },
  { threadId, type: "usage.reported", payload: { nativeThreadId: nat("nat_1"), usage: { usedTokens: 1_200 }, trusted: true } }
]

for (const [label, db] of dialects) {
  describe(`the event log on ${label}`, () => {
    it.live("every event type round-trips through the store: appended, returned and read back as written", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        yield* insertThread("thr_a")
        const inputs = allSamples(thr("thr_a"))
        const command = "cmd_1" as CommandId
        const appended = []
        for (const [i, input] of inputs.entries()) {
          appended.push(yield* store.appendEvent(i === 0 ? { ...input, commandId: command } : input))
        }
        // Every type of the union is exercised.
        expect(new Set(appended.map((e) => e.type))).toEqual(new Set(Object.keys(samples)))
        for (const [i, event] of appended.entries()) {
          expect({ type: event.type, payload: event.payload }).toEqual({ type: inputs[i]!.type, payload: inputs[i]!.payload })
          expect(event.threadId).toBe("thr_a")
          expect(event.seq).toBe(i + 1)
          expect(event.eventId).toMatch(/^evt_[0-9a-f-]{36}$/)
          expect(event.commandId).toBe(i === 0 ? "cmd_1" : null)
          expect(DateTime.isDateTime(event.createdAt)).toBe(true)
        }
        expect(new Set(appended.map((e) => e.eventId)).size).toBe(inputs.length)
        const globalSeqs = appended.map((e) => e.globalSeq)
        expect(globalSeqs).toEqual([...globalSeqs].sort((a, b) => a - b))
        expect(new Set(globalSeqs).size).toBe(inputs.length)
        // What the store returned is exactly what a reader gets back.
        expect(yield* store.listEvents(thr("thr_a"))).toEqual(appended)
      }).pipe(Effect.provide(migratedStore(db))), { timeout: 30_000 })

    it.live("appendEvents appends a batch in one statement: in order after the thread's last event, as appendEvent would", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        yield* insertThread("thr_c")
        const inputs = allSamples(thr("thr_c"))
        const first = yield* store.appendEvent(inputs[0]!)
        const batch = yield* store.appendEvents(inputs.slice(1, 5).map((e, i) => (i === 0 ? { ...e, commandId: "cmd_2" as CommandId } : e)))
        expect(batch.map((e) => e.seq)).toEqual([2, 3, 4, 5])
        expect(batch.map((e) => ({ type: e.type, payload: e.payload }))).toEqual(inputs.slice(1, 5).map((e) => ({ type: e.type, payload: e.payload })))
        expect(batch.map((e) => e.commandId)).toEqual(["cmd_2", null, null, null])
        const globalSeqs = [first, ...batch].map((e) => e.globalSeq)
        expect(globalSeqs).toEqual([...globalSeqs].sort((a, b) => a - b))
        expect(new Set(globalSeqs).size).toBe(5)
        const after = yield* store.appendEvents(inputs.slice(5, 6))
        expect(after.map((e) => e.seq)).toEqual([6])
        expect(yield* store.appendEvents([])).toEqual([])
        // What the store returned is exactly what a reader gets back.
        expect(yield* store.listEvents(thr("thr_c"))).toEqual([first, ...batch, ...after])
        // A batch with an event that does not validate writes nothing.
        const bad = { threadId: thr("thr_c"), type: "run.completed", payload: { runId: run("run_1"), itemCount: -1 } } as NewThreadEvent
        const error = yield* Effect.flip(store.appendEvents([inputs[6]!, bad]))
        expect(error._tag === "PersistenceError" && error.operation).toBe("thread_events.encode")
        expect((yield* store.listEvents(thr("thr_c"))).length).toBe(6)
      }).pipe(Effect.provide(migratedStore(db))), { timeout: 30_000 })

    it.live("what an append publishes is strictly what a read of the log gives back: every type, batched or not, excess and undefined members dropped", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        const uow = yield* UnitOfWork
        const bus = yield* ThreadEventBus
        yield* insertThread("thr_p")
        const inputs = allSamples(thr("thr_p"))
        const odd: ReadonlyArray<NewThreadEvent> = [
          // A member the schema does not declare, and an optional member present as `undefined`: neither is stored.
          { threadId: thr("thr_p"), type: "run.completed", payload: { runId: run("run_1"), itemCount: 2, extra: "x" } as never },
          { threadId: thr("thr_p"), type: "thread.created", payload: { title: "t", parentThreadId: undefined } },
          { threadId: thr("thr_p"), type: "context.offloaded", payload: { ...samples["context.offloaded"], entrySeqs: [-0, 6] } }
        ]
        const published = yield* Effect.scoped(Effect.gen(function*() {
          const subscription = yield* bus.subscribe
          const returned = [
            ...(yield* uow.thread("thr_p", "test")(store.appendEvents(inputs.slice(0, 10)))),
            yield* uow.thread("thr_p", "test")(store.appendEvent(inputs[10]!)),
            ...(yield* uow.thread("thr_p", "test")(store.appendEvents([...inputs.slice(11), ...odd])))
          ]
          const seen = yield* subscription.takeUpTo(1_000)
          expect([...seen]).toStrictEqual(returned)
          return returned
        }))
        expect(published.length).toBe(inputs.length + odd.length)
        // Field for field, with the same types (a DateTime, numbers, no member read back absent but published present).
        expect(yield* store.listEvents(thr("thr_p"))).toStrictEqual(published)
        const last = published.slice(-3)
        expect(last[0]!.payload).toStrictEqual({ runId: "run_1", itemCount: 2 })
        expect(Object.keys(last[1]!.payload)).toEqual(["title"])
        expect(Object.is((last[2]!.payload as { entrySeqs: ReadonlyArray<number> }).entrySeqs[0], 0)).toBe(true)
      }).pipe(Effect.provide(UnitOfWork.Default.pipe(Layer.provideMerge(ThreadEventBus.Default), Layer.provideMerge(migratedStore(db))))), { timeout: 30_000 })

    it.live("a payload that does not match its type's schema is refused before anything is written", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        yield* insertThread("thr_b")
        const bad = { threadId: thr("thr_b"), type: "run.completed", payload: { runId: run("run_1"), itemCount: -1 } } as NewThreadEvent
        const error = yield* Effect.flip(store.appendEvent(bad))
        expect(error._tag).toBe("PersistenceError")
        expect(error._tag === "PersistenceError" && error.operation).toBe("thread_events.encode")
        expect(yield* store.listEvents(thr("thr_b"))).toEqual([])
      }).pipe(Effect.provide(migratedStore(db))), { timeout: 30_000 })

    it.live("cursor reads page per thread by seq, across threads by globalSeq, and by type newest first", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        yield* insertThread("thr_a")
        yield* insertThread("thr_b")
        const completed = (threadId: string, itemCount: number) =>
          store.appendEvent({ threadId: thr(threadId), type: "run.completed", payload: { runId: run("run_1"), itemCount } })
        const written = []
        // Interleaved: a1 b1 a2 a3 b2 a4 a5
        for (const [t, n] of [["thr_a", 1], ["thr_b", 1], ["thr_a", 2], ["thr_a", 3], ["thr_b", 2], ["thr_a", 4], ["thr_a", 5]] as const) {
          written.push(yield* completed(t, n))
        }
        const counts = (events: ReadonlyArray<{ readonly type: string; readonly payload: unknown }>) =>
          events.map((e) => `${(e.payload as { itemCount: number }).itemCount}`)

        expect(counts(yield* store.listEvents(thr("thr_a"), { limit: 2 }))).toEqual(["1", "2"])
        expect(counts(yield* store.listEvents(thr("thr_a"), { afterSeq: 2, limit: 2 }))).toEqual(["3", "4"])
        expect(counts(yield* store.listEvents(thr("thr_a"), { afterSeq: 4, limit: 2 }))).toEqual(["5"])
        expect(yield* store.listEvents(thr("thr_a"), { afterSeq: 5, limit: 2 })).toEqual([])
        expect(counts(yield* store.listEvents(thr("thr_b"), { afterSeq: 1 }))).toEqual(["2"])

        // The global feed, paged by 3 from the start: every event once, in the order written.
        const pages: Array<ReadonlyArray<string>> = []
        let after = 0
        for (;;) {
          const page = yield* store.listEventsGlobal({ afterGlobalSeq: after, limit: 3 })
          if (page.length === 0) break
          pages.push(page.map((e) => `${e.threadId}:${e.seq}`))
          after = page.at(-1)!.globalSeq
        }
        expect(pages).toEqual([["thr_a:1", "thr_b:1", "thr_a:2"], ["thr_a:3", "thr_b:2", "thr_a:4"], ["thr_a:5"]])
        expect((yield* store.listEventsGlobal({ afterGlobalSeq: written[4]!.globalSeq, limit: 10 })).map((e) => e.eventId))
          .toEqual([written[5]!.eventId, written[6]!.eventId])

        // By type, newest first, before a seq.
        yield* store.appendEvent({ threadId: thr("thr_a"), type: "native_thread.replaced", payload: { nativeThreadId: nat("nat_1"), reason: "r" } })
        const newest = yield* store.listEventsOfType(thr("thr_a"), "run.completed", { limit: 2 })
        expect(newest.map((e) => [e.seq, e.payload.itemCount])).toEqual([[5, 5], [4, 4]])
        expect((yield* store.listEventsOfType(thr("thr_a"), "run.completed", { beforeSeq: 4, limit: 10 })).map((e) => e.seq))
          .toEqual([3, 2, 1])
        expect(yield* store.listEventsOfType(thr("thr_b"), "native_thread.replaced", { limit: 1 })).toEqual([])
      }).pipe(Effect.provide(migratedStore(db))), { timeout: 30_000 })

    it.live("(thread_id, seq) stays unique: a second row with a taken seq is refused", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        const sql = yield* SqlClient.SqlClient
        yield* insertThread("thr_a")
        const first = yield* store.appendEvent({ threadId: thr("thr_a"), type: "thread.created", payload: { title: "t" } })
        const duplicate = yield* Effect.flip(sql`INSERT INTO thread_events (event_id, thread_id, seq, type, payload, created_at)
          VALUES ('evt_other', 'thr_a', ${first.seq}, 'thread.created', '{"title":"t"}', '2026-01-01T00:00:00.000Z')`)
        expect(duplicate._tag).toBe("SqlError")
        // The event id is unique too.
        const sameId = yield* Effect.flip(sql`INSERT INTO thread_events (event_id, thread_id, seq, type, payload, created_at)
          VALUES (${first.eventId}, 'thr_a', 2, 'thread.created', '{"title":"t"}', '2026-01-01T00:00:00.000Z')`)
        expect(sameId._tag).toBe("SqlError")
        expect((yield* store.listEvents(thr("thr_a"))).map((e) => e.eventId)).toEqual([first.eventId])
      }).pipe(Effect.provide(migratedStore(db))), { timeout: 30_000 })

    it.live("migration 0008 keeps the events of an older database: ids, global order by time, old payloads decode", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const before = Object.fromEntries(Object.entries(Migrations.migrations).filter(([key]) => Number(key.slice(0, 4)) < 8))
        yield* Migrator.make({})({ loader: Migrator.fromRecord(before) })
        const now = "2026-01-01T00:00:00.000Z"
        for (const id of ["thr_a", "thr_b"]) {
          yield* sql`INSERT INTO threads (id, title, active_provider_thread_id, created_at, updated_at)
            VALUES (${id}, 't', NULL, ${now}, ${now})`
        }
        // Rows as 0001 wrote them; b's first event is older than a's second. Payloads written before `state`
        // (thread.compacted) and `ratio` (delivery.pending) existed.
        const old = [
          ["thr_a", 1, "thread.created", { title: "a" }, "2026-01-01T00:00:01.000Z"],
          ["thr_a", 2, "thread.compacted", { nativeThreadId: "nat_1", usedBefore: 10, usedAfter: 5, delivered: 0 }, "2026-01-01T00:00:03.000Z"],
          ["thr_b", 1, "delivery.pending", {
            deliveryId: "dlv_1",
            handoffId: "hof_1",
            mode: "injected",
            runId: null,
            budget: 100,
            renderedTokens: 50,
            itemIds: [],
            omittedItemIds: []
          }, "2026-01-01T00:00:02.000Z"]
        ] as const
        for (const [threadId, seq, type, payload, createdAt] of old) {
          yield* sql`INSERT INTO thread_events (thread_id, seq, type, payload, created_at)
            VALUES (${threadId}, ${seq}, ${type}, ${JSON.stringify(payload)}, ${createdAt})`
        }
        yield* Migrations.run
        const store = yield* ThreadStore
        const feed = yield* store.listEventsGlobal({ limit: 10 })
        expect(feed.map((e) => [e.eventId, e.threadId, e.seq, e.type, e.commandId])).toEqual([
          ["evt_thr_a_1", "thr_a", 1, "thread.created", null],
          ["evt_thr_b_1", "thr_b", 1, "delivery.pending", null],
          ["evt_thr_a_2", "thr_a", 2, "thread.compacted", null]
        ])
        expect(feed.map((e) => e.globalSeq)).toEqual([1, 2, 3])
        expect(feed[2]!.payload).toEqual({ nativeThreadId: "nat_1", usedBefore: 10, usedAfter: 5, delivered: 0 })
        // A new event continues both sequences.
        const next = yield* store.appendEvent({ threadId: thr("thr_a"), type: "run.completed", payload: { runId: run("run_1"), itemCount: 0 } })
        expect([next.seq, next.globalSeq]).toEqual([3, 4])
      }).pipe(Effect.provide(ThreadStore.Default.pipe(Layer.provideMerge(db.empty())))), { timeout: 30_000 })
  })
}

describe("the event log's reads on SQLite use indexes", () => {
  it.live("the cursor and by-type reads search an index or the key, never scan the table", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const plan = (query: string) =>
        Effect.map(sql.unsafe<{ readonly detail: string }>(`EXPLAIN QUERY PLAN ${query}`), (rows) => rows.map((r) => r.detail).join("; "))
      const reads = [
        "SELECT * FROM thread_events WHERE thread_id = 'thr_a' AND seq > 3 ORDER BY seq LIMIT 10",
        "SELECT * FROM thread_events WHERE global_seq > 3 ORDER BY global_seq LIMIT 10",
        "SELECT * FROM thread_events WHERE thread_id = 'thr_a' AND type = 'thread.compacted' ORDER BY seq DESC LIMIT 8",
        "SELECT * FROM thread_events WHERE thread_id = 'thr_a' AND type = 'thread.compacted' AND seq < 9 ORDER BY seq DESC LIMIT 8"
      ]
      for (const query of reads) {
        const detail = yield* plan(query)
        expect(detail).toMatch(/^SEARCH thread_events USING (INDEX|INTEGER PRIMARY KEY)/)
        expect(detail).not.toContain("TEMP B-TREE")
      }
    }).pipe(Effect.provide(migratedStore(sqliteFile))))
})
