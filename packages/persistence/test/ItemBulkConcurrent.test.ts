import type { Item, ItemId, RunId, ThreadId } from "@baton/contracts"
import { Database, ThreadEventBus, ThreadStore, UnitOfWork } from "@baton/persistence"
import type { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { DateTime, Effect, Layer } from "effect"

/**
 * `ThreadStore.insertItemsAfterLast` called concurrently on one thread (review r42a): each call takes more than one
 * statement (700 items: 500 + 200), and the thread's lock must keep each call's rows together and the seqs gapless;
 * a page whose nullable columns are all null, or whose texts look like numbers, JSON or nothing, keeps them as given
 * (Postgres types an all-parameter `VALUES` column from the whole column). Both dialects.
 */
const dialects: ReadonlyArray<readonly [string, () => Layer.Layer<SqlClient.SqlClient, Database.DatabaseError>]> = [
  ["SQLite", () => Database.layerSqlite(":memory:")],
  ["Postgres", () => Database.layerPgIsolated()]
]

const layerOn = (db: () => Layer.Layer<SqlClient.SqlClient, Database.DatabaseError>) =>
  UnitOfWork.Default.pipe(
    Layer.provideMerge(ThreadStore.Default),
    Layer.provideMerge(ThreadEventBus.Default),
    Layer.provideMerge(Layer.orDie(db()))
  )

const item = (threadId: string, id: string, text: string, at: DateTime.Utc, fields: Partial<Item> = {}): Item => ({
  id: id as ItemId,
  threadId: threadId as ThreadId,
  runId: null,
  seq: 0,
  kind: "assistant_message",
  text,
  toolCallId: null,
  toolName: null,
  messageId: null,
  isError: false,
  toolCallState: null,
  tokens: 0,
  createdAt: at,
  ...fields
})

describe.each(dialects)("ItemBulkConcurrent on %s", (_label, db) => {
  it.live("six calls of 700 items each on one thread at once (and another thread beside): each call's rows contiguous, seqs 1..4,200", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const uow = yield* UnitOfWork
      const now = yield* DateTime.now
      for (const id of ["thr_c", "thr_d"]) {
        yield* uow.global("test.create")(store.insertThread({ id: id as ThreadId, title: id, activeProviderThreadId: null, createdAt: now, updatedAt: now }))
      }
      // Each call its own instant (the createdAt cache sees them interleave).
      const calls = Array.from({ length: 6 }, (_, c) => {
        const at = DateTime.unsafeMake(DateTime.toEpochMillis(now) + c * 1_001)
        const threadId = "thr_c"
        return Array.from({ length: 700 }, (_, k) => item(threadId, `itm_c${c}_${k}`, `call ${c} item ${k}`, at, { tokens: k, runId: `run_${c}` as RunId }))
      })
      const other = Array.from({ length: 700 }, (_, k) => item("thr_d", `itm_d_${k}`, `d ${k}`, DateTime.unsafeMake(DateTime.toEpochMillis(now) + 7)))
      yield* Effect.all([
        ...calls.map((values) => uow.thread("thr_c", "test.concurrent")(store.insertItemsAfterLast("thr_c" as ThreadId, values))),
        uow.thread("thr_d", "test.other")(store.insertItemsAfterLast("thr_d" as ThreadId, other))
      ], { concurrency: "unbounded" })
      const stored = yield* store.listItems("thr_c" as ThreadId)
      expect(stored.map((i) => i.seq)).toEqual(Array.from({ length: 4_200 }, (_, k) => k + 1))
      // Each call's 700 rows follow one another, in order, with their own createdAt.
      for (let block = 0; block < 6; block++) {
        const rows = stored.slice(block * 700, block * 700 + 700)
        const c = Number(rows[0]!.id.slice(5, rows[0]!.id.indexOf("_", 5)))
        expect(rows.map((r) => r.id)).toEqual(calls[c]!.map((i) => i.id))
        expect(new Set(rows.map((r) => DateTime.formatIso(r.createdAt)))).toEqual(new Set([DateTime.formatIso(calls[c]![0]!.createdAt)]))
      }
      expect((yield* store.listItems("thr_d" as ThreadId)).map((i) => [i.seq, DateTime.toEpochMillis(i.createdAt)])).toEqual(
        other.map((_, k) => [k + 1, DateTime.toEpochMillis(now) + 7])
      )
    }).pipe(Effect.provide(layerOn(db))), 120_000)

  it.live("pages whose columns are all null, all true, numeric-looking, JSON-looking or empty texts read back as given", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const uow = yield* UnitOfWork
      const now = yield* DateTime.now
      const at = DateTime.unsafeMake(DateTime.toEpochMillis(now))
      yield* uow.global("test.create")(store.insertThread({ id: "thr_v" as ThreadId, title: "v", activeProviderThreadId: null, createdAt: now, updatedAt: now }))
      const pages: ReadonlyArray<ReadonlyArray<Item>> = [
        [item("thr_v", "itm_v1", "", at)],
        [item("thr_v", "itm_v2", "0", at, { isError: true, tokens: 2_147_483_647, toolCallId: "1" as Item["toolCallId"], toolName: "", messageId: "" })],
        [item("thr_v", "itm_v3", "{\"a\":1}", at, { isError: true }), item("thr_v", "itm_v4", "null", at, { isError: true, toolCallState: "answered" })],
        [item("thr_v", "itm_v5", "true", at, { runId: "12" as RunId, tokens: 1 }), item("thr_v", "itm_v6", " 1e3 ", at, { tokens: 0 })]
      ]
      let expectedSeq = 1
      for (const page of pages) {
        expect(yield* uow.thread("thr_v", "test.page")(store.insertItemsAfterLast("thr_v" as ThreadId, page))).toBe(expectedSeq)
        expectedSeq += page.length
      }
      const comparable = (i: Item) => ({ ...i, createdAt: DateTime.formatIso(i.createdAt) })
      expect((yield* store.listItems("thr_v" as ThreadId)).map(comparable)).toEqual(pages.flat().map((i, k) => comparable({ ...i, seq: k + 1 })))
    }).pipe(Effect.provide(layerOn(db))), 60_000)
})
