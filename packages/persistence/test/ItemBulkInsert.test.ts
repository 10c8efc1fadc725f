import type { Item, ItemId, ItemKind, RunId, ThreadId, ToolCallState } from "@baton/contracts"
import { Database, ThreadEventBus, ThreadStore, UnitOfWork } from "@baton/persistence"
import type { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { DateTime, Effect, Layer } from "effect"

/**
 * `ThreadStore.insertItemsAfterLast` with more items than one statement takes (500 a statement): what a gateway
 * conversation's first request stores (every message of it, 100,000 in the big-body bench) in one unit of work.
 * On every dialect: a `:memory:` SQLite database and a fresh schema on the real Postgres.
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

const kinds: ReadonlyArray<ItemKind> = ["user_message", "assistant_message", "tool_call", "tool_result", "reasoning", "error", "summary", "handoff_marker"]
const states: ReadonlyArray<ToolCallState | null> = [null, "answered", "dangling", "interrupted"]
/** Texts a row must keep byte for byte: empty, quotes, SQL, newlines, non-ASCII, astral characters, a long one. */
const texts: ReadonlyArray<string> = [
  "",
  "it's \"quoted\"; DROP TABLE items; --",
  "line one\nline two\r\n\ttabbed",
  "ünïcödé — 日本語 — 🙂🚀",
  "$1 ? :name @p0 %s",
  "x".repeat(5_000)
]

/** Item `n` of `threadId`: every field varied with `n` (nulls and values, every kind and tool call state). */
const itemOf = (threadId: string, n: number, at: DateTime.Utc, id = `itm_${threadId}_${n}`): Item => ({
  id: id as ItemId,
  threadId: threadId as ThreadId,
  runId: n % 3 === 0 ? null : `run_${n % 7}` as RunId,
  seq: 0,
  kind: kinds[n % kinds.length]!,
  text: `${texts[n % texts.length]!} #${n}`,
  toolCallId: n % 2 === 0 ? null : `call_${n}` as Item["toolCallId"],
  toolName: n % 5 === 0 ? null : `tool ${n % 4}`,
  messageId: n % 4 === 0 ? null : `assistant@0.${n}`,
  isError: n % 11 === 0,
  toolCallState: states[n % states.length]!,
  tokens: n === 1_234 ? 2_000_000_000 : n % 13 === 0 ? 0 : n * 3,
  createdAt: at
})

/** An item as compared: its fields, `createdAt` as its ISO text (a read decodes a new `DateTime`). */
const comparable = (i: Item) => ({ ...i, createdAt: DateTime.formatIso(i.createdAt) })

describe.each(dialects)("ItemBulkInsert on %s", (_label, db) => {
  it.live("2,500 items in one call (five statements) after the thread's last item: every item reads back identical, seqs following it, other threads apart", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const uow = yield* UnitOfWork
      const now = yield* DateTime.now
      const at = DateTime.unsafeMake(DateTime.toEpochMillis(now))
      for (const id of ["thr_bulk", "thr_other"]) {
        yield* uow.global("test.create")(store.insertThread({ id: id as ThreadId, title: id, activeProviderThreadId: null, createdAt: now, updatedAt: now }))
      }
      yield* uow.thread("thr_other", "test.other")(store.insertItemsAfterLast("thr_other" as ThreadId, [itemOf("thr_other", 0, at)]))
      const before = [itemOf("thr_bulk", 0, at), itemOf("thr_bulk", 1, at), itemOf("thr_bulk", 2, at)]
      expect(yield* uow.thread("thr_bulk", "test.before")(store.insertItemsAfterLast("thr_bulk" as ThreadId, before))).toBe(1)
      const bulk = Array.from({ length: 2_500 }, (_, k) => itemOf("thr_bulk", k + 3, at))
      expect(yield* uow.thread("thr_bulk", "test.bulk")(store.insertItemsAfterLast("thr_bulk" as ThreadId, bulk))).toBe(4)
      const expected = [...before, ...bulk].map((item, k) => comparable({ ...item, seq: k + 1 }))
      expect((yield* store.listItems("thr_bulk" as ThreadId)).map(comparable)).toEqual(expected)
      // Read one by one too (another statement, another decode path for a single row).
      for (const k of [0, 3, 502, 1_234, 2_502]) {
        const one = yield* store.getItem(expected[k]!.id)
        expect(one._tag === "Some" ? comparable(one.value) : null).toEqual(expected[k])
      }
      expect(yield* store.nextItemSeq("thr_bulk" as ThreadId)).toBe(2_504)
      expect((yield* store.listItems("thr_other" as ThreadId)).map((i) => [i.id, i.seq])).toEqual([["itm_thr_other_0", 1]])
    }).pipe(Effect.provide(layerOn(db))), 60_000)

  it.live("a duplicate item id in the middle of a statement (item 1,700 of 2,500, the fourth statement) fails the unit of work with ConcurrentModification naming the thread and items.insert; nothing of it is written", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const uow = yield* UnitOfWork
      const now = yield* DateTime.now
      yield* uow.global("test.create")(store.insertThread({ id: "thr_dup" as ThreadId, title: "dup", activeProviderThreadId: null, createdAt: now, updatedAt: now }))
      const stored = itemOf("thr_dup", 0, now)
      yield* uow.thread("thr_dup", "test.first")(store.insertItemsAfterLast("thr_dup" as ThreadId, [stored]))
      const eventsBefore = (yield* store.listEvents("thr_dup" as ThreadId)).length
      // Another item of the same batch (the same statement) and an item stored before: both fail the same way.
      for (const clash of ["in the batch", "stored before"] as const) {
        const bulk = Array.from({ length: 2_500 }, (_, k) => itemOf("thr_dup", k + 1, now))
        bulk[1_700] = { ...bulk[1_700]!, id: clash === "stored before" ? stored.id : bulk[1_650]!.id }
        const lost = yield* Effect.flip(uow.thread("thr_dup", "test.bulk")(Effect.gen(function*() {
          yield* store.appendEvent({ threadId: "thr_dup" as ThreadId, type: "thread.created", payload: { title: "x" } })
          return yield* store.insertItemsAfterLast("thr_dup" as ThreadId, bulk)
        })))
        expect(lost._tag).toBe("ConcurrentModification")
        expect(lost.message).toBe("thread thr_dup was changed by another writer (items.insert); retry the command")
        expect((yield* store.listItems("thr_dup" as ThreadId)).map((i) => [i.id, i.seq])).toEqual([[stored.id, 1]])
        expect((yield* store.listEvents("thr_dup" as ThreadId)).length).toBe(eventsBefore)
      }
      // The thread takes the same items once the clash is gone.
      const clean = Array.from({ length: 2_500 }, (_, k) => itemOf("thr_dup", k + 1, now))
      expect(yield* uow.thread("thr_dup", "test.clean")(store.insertItemsAfterLast("thr_dup" as ThreadId, clean))).toBe(2)
      expect((yield* store.listItems("thr_dup" as ThreadId)).length).toBe(2_501)
    }).pipe(Effect.provide(layerOn(db))), 60_000)
})
