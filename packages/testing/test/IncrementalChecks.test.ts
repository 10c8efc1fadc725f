/**
 * The simulation's incremental record reads (`Checks.readRecords` over `Checks.installAudit`): each check reads only
 * the items and events after what it read before, yet a change to a row read before, a deleted row, a row lost
 * without a trigger firing and a thread that vanished are still caught, on both dialects.
 */
import type { ItemId } from "@baton/contracts"
import { InvariantChecks } from "@baton/orchestration"
import { Database, ThreadStore } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Option } from "effect"
import * as Checks from "../src/internal/Checks.js"
import { memoisedCounter, o200kLines, outsideTransaction } from "../src/internal/Execute.js"
import * as Prng from "../src/internal/Prng.js"
import { TokenCounter } from "@baton/context"

const ops = Harness.ops

/** A thread with two completed turns, the audit installed and read once (the cursors at the end of the log). */
const setUp = (h: Harness.Harness) =>
  Effect.gen(function*() {
    const o = yield* ops
    const t = yield* o.create("codex")
    for (const text of ["one", "two"]) {
      h.script.enqueue(Harness.reply(10))
      yield* o.send(t, text)
    }
    yield* Checks.installAudit
    yield* Checks.installAudit // idempotent: every incarnation installs it again
    const memory = Checks.emptyMemory()
    const first = yield* Checks.readRecords([t], memory)
    expect(first.violations).toEqual([])
    return { o, t, memory }
  })

describe.each(Harness.dialects)("incremental record reads (%s)", (_, db) => {
  it.live("read only the tail, yet hold the same record as a full read", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const { o, t, memory } = yield* setUp(h)
      const itemsBefore = memory.items.get(t)!.length
      h.script.enqueue(Harness.reply(10))
      yield* o.send(t, "three")
      const read = yield* Checks.readRecords([t], memory)
      expect(read.violations).toEqual([])
      const full = yield* InvariantChecks.readRecord(t)
      expect(read.records[0]!.items.length).toBeGreaterThan(itemsBefore)
      expect(read.records[0]!.items).toEqual(full.items)
      expect(read.records[0]!.events).toEqual(full.events)
      expect(read.records[0]!.runs).toEqual(full.runs)
    }).pipe(Effect.provide(h.layer))
  })

  it.live("a row read before that is changed or deleted after the cursor is caught", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const { t, memory } = yield* setUp(h)
      const sql = yield* SqlClient.SqlClient
      const first = memory.items.get(t)![0]!
      // A change of the text that keeps its length and both ends (the former check compared only those) is caught too.
      yield* sql`UPDATE items SET text = ${first.text.replace(/o/, "0")} WHERE id = ${first.id}`
      // An update that changes nothing is not a change.
      yield* sql`UPDATE items SET tokens = tokens WHERE thread_id = ${t}`
      yield* sql`UPDATE thread_events SET payload = '{}' WHERE thread_id = ${t} AND seq = 2`
      yield* sql`DELETE FROM thread_events WHERE thread_id = ${t} AND seq = (SELECT MAX(seq) FROM thread_events WHERE thread_id = ${t})`
      const read = yield* Checks.readRecords([t], memory)
      expect(read.violations).toEqual([
        `crash-safety: item ${first.id} changed`,
        `crash-safety: event ${t}#2 changed or disappeared (changed)`,
        `crash-safety: event ${t}#${memory.events.get(t)!.length} changed or disappeared (deleted)`,
        `crash-safety: event log of ${t} holds ${memory.events.get(t)!.length - 1} events, ${memory.events.get(t)!.length} read back in seq order`
      ])
      // Reported once: the next read starts after the audit rows it reported.
      expect((yield* Checks.readRecords([t], memory)).violations.filter((v) => v.includes("changed or disappeared"))).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.live("a change below the cursor to an item column the checks read (tool_name: isTransferable) is caught", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const { t, memory } = yield* setUp(h)
      const sql = yield* SqlClient.SqlClient
      const first = memory.items.get(t)![0]!
      // The former full read handed the checks the new tool name (InvariantChecks' owed items skip Baton's own tools).
      yield* sql`UPDATE items SET tool_name = 'thread_read' WHERE id = ${first.id}`
      const read = yield* Checks.readRecords([t], memory)
      const full = yield* InvariantChecks.readRecord(t)
      expect(read.violations.length > 0 || JSON.stringify(read.records[0]!.items) === JSON.stringify(full.items)).toBe(true)
      expect(read.violations).toEqual([`crash-safety: item ${first.id} changed`])
    }).pipe(Effect.provide(h.layer))
  })

  it.live.skipIf(db === ":memory:")("a change whose transaction commits after a later change's (its audit seq below one read) is caught (Postgres)", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const { t, memory } = yield* setUp(h)
      const sql = yield* SqlClient.SqlClient
      const [first, second] = memory.items.get(t)!
      // A sequence hands out its values in one order and transactions commit in another: the first change takes its
      // audit seq and waits to commit while a second change commits and is read.
      const written = yield* Deferred.make<void>()
      const commit = yield* Deferred.make<void>()
      const slow = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
        yield* sql`UPDATE items SET text = 'changed first' WHERE id = ${first!.id}`
        yield* Deferred.succeed(written, undefined)
        yield* Deferred.await(commit)
      })))
      yield* Deferred.await(written)
      yield* sql`UPDATE items SET text = 'changed second' WHERE id = ${second!.id}`
      const before = yield* Checks.readRecords([t], memory)
      yield* Deferred.succeed(commit, undefined)
      yield* Fiber.join(slow)
      const after = yield* Checks.readRecords([t], memory)
      expect(before.violations).toEqual([`crash-safety: item ${second!.id} changed`])
      expect(after.violations).toEqual([`crash-safety: item ${first!.id} changed`])
    }).pipe(Effect.provide(h.layer))
  })

  it.live.skipIf(db !== ":memory:")("an INSERT OR REPLACE of a row read before is caught (SQLite)", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const { t, memory } = yield* setUp(h)
      const sql = yield* SqlClient.SqlClient
      const first = memory.items.get(t)![0]!
      yield* sql`INSERT OR REPLACE INTO items (id, thread_id, run_id, seq, kind, text, tool_call_id, tool_name, message_id,
        is_error, tool_call_state, tokens, created_at) SELECT id, thread_id, run_id, seq, kind, 'replaced', tool_call_id,
        tool_name, message_id, is_error, tool_call_state, tokens, created_at FROM items WHERE id = ${first.id}`
      expect((yield* Checks.readRecords([t], memory)).violations).toEqual([`crash-safety: item ${first.id} was written and is gone`])
    }).pipe(Effect.provide(h.layer))
  })

  it.live("rows lost without a trigger firing, and a vanished thread, are caught by the counts", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const { t, memory } = yield* setUp(h)
      const sql = yield* SqlClient.SqlClient
      const n = memory.items.get(t)!.length
      // As a TRUNCATE or a table rebuild would: the rows go and no row trigger fires.
      yield* sql.onDialectOrElse({
        pg: () => sql`ALTER TABLE items DISABLE TRIGGER sim_audit_items`,
        orElse: () => sql`DROP TRIGGER sim_audit_items_delete`
      })
      yield* sql`DELETE FROM items WHERE thread_id = ${t} AND seq = 1`
      const read = yield* Checks.readRecords([t], memory)
      expect(read.violations).toEqual([
        `crash-safety: ${t} holds ${n - 1} items, ${n} read back in seq order (rows vanished or were inserted below a seq read before)`
      ])
      expect((yield* Checks.readRecords([], memory)).violations).toEqual([`crash-safety: thread ${t}, read back before, is gone`])
    }).pipe(Effect.provide(h.layer))
  })
})

/** Each table the change log covers, and the thread's rows of it (for a direct change behind Baton's back). */
const mutableTables = (t: string, fork: string) => [
  ["runs", `thread_id = '${t}'`],
  ["provider_threads", `thread_id = '${t}'`],
  ["native_threads", `provider_thread_id IN (SELECT id FROM provider_threads WHERE thread_id = '${t}')`],
  ["handoffs", `thread_id = '${t}'`],
  ["handoff_deliveries", `handoff_id IN (SELECT id FROM handoffs WHERE thread_id = '${t}')`],
  ["thread_links", `fork_thread_id = '${fork}'`],
  ["offloads", `thread_id = '${t}'`]
] as const

describe.each(Harness.dialects)("incremental reads of the mutable tables (%s)", (_, db) => {
  it.live("a row of any mutable table changed between two steps is read again: the record equals a full read", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }, { name: "claude", window: 200_000, inject: false }], { db })
    return Effect.gen(function*() {
      const o = yield* ops
      const sql = yield* SqlClient.SqlClient
      const t = yield* o.create("codex")
      for (const text of ["one", "two", "three"]) {
        h.script.enqueue(Harness.reply(400, { usedTokens: 1_000, maxTokens: 200_000 }))
        yield* o.send(t, text)
      }
      yield* o.switchTo(t, "claude")
      h.script.enqueue(Harness.reply(400))
      yield* o.send(t, "four")
      const offloaded = yield* o.offload(t, 1)
      expect(offloaded.offloaded).toBe(true)
      const fork = (yield* o.fork(t)).threadId
      yield* Checks.installAudit
      const memory = Checks.emptyMemory()
      const threads = [t, fork]
      expect((yield* Checks.readRecords(threads, memory, ["codex"])).violations).toEqual([])
      const full = () => Effect.all(threads.map((id) => InvariantChecks.readRecord(id)))
      for (const [table, rows] of mutableTables(t, fork)) {
        const [found] = yield* sql<{ readonly n: number | string }>`SELECT COUNT(*) AS n FROM ${sql(table)} WHERE ${sql.unsafe(rows)}`
        expect([table, Number(found!.n) > 0]).toEqual([table, true])
        yield* sql`UPDATE ${sql(table)} SET created_at = '2030-01-01T00:00:00.000Z' WHERE ${sql.unsafe(rows)}`
        const read = yield* Checks.readRecords(threads, memory, ["codex"])
        expect(read.violations).toEqual([])
        expect([table, read.records]).toEqual([table, yield* full()])
      }
      // A step that changed nothing reads no mutable table again, and still holds the same record.
      const again = yield* Checks.readRecords(threads, memory, ["codex"])
      expect(again.records).toEqual(yield* full())
      // The calibration, written, changed and removed behind Baton's back (on Postgres by a TRUNCATE, which fires no
      // row trigger).
      const ratio = Effect.map(Checks.readRecords(threads, memory, ["codex"]), (r) => Option.map(r.calibrations[0]!, (c) => c.ratio))
      yield* sql`DELETE FROM provider_calibrations WHERE provider_instance = 'codex'`
      yield* sql`INSERT INTO provider_calibrations (provider_instance, ratio, samples, weight, updated_at)
        VALUES ('codex', 1.25, 3, 900, '2030-01-01T00:00:00.000Z')`
      expect(yield* ratio).toEqual(Option.some(1.25))
      yield* sql`UPDATE provider_calibrations SET ratio = 1.5 WHERE provider_instance = 'codex'`
      expect(yield* ratio).toEqual(Option.some(1.5))
      yield* sql.onDialectOrElse({
        pg: () => sql`TRUNCATE provider_calibrations`,
        orElse: () => sql`DELETE FROM provider_calibrations`
      })
      expect(yield* ratio).toEqual(Option.none())
    }).pipe(Effect.provide(h.layer))
  })

  it.live("a provider thread new to a thread's list has its native threads read, though no native thread row changed", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }, { name: "claude", window: 200_000, inject: false }], { db })
    return Effect.gen(function*() {
      const o = yield* ops
      const sql = yield* SqlClient.SqlClient
      const t = yield* o.create("codex")
      const u = yield* o.create("claude")
      for (const thread of [t, u]) {
        h.script.enqueue(Harness.reply(10))
        yield* o.send(thread, "one")
      }
      yield* Checks.installAudit
      const memory = Checks.emptyMemory()
      const threads = [t, u]
      expect((yield* Checks.readRecords(threads, memory)).violations).toEqual([])
      // Behind Baton's back: `u`'s provider thread (with its native thread) moves to `t`. Only `provider_threads`
      // is logged (for both threads): the native thread's row is unchanged.
      yield* sql`UPDATE provider_threads SET thread_id = ${t} WHERE thread_id = ${u}`
      const read = yield* Checks.readRecords(threads, memory)
      const full = yield* Effect.all(threads.map((id) => InvariantChecks.readRecord(id)))
      expect(read.records[0]!.nativeThreads.length).toBe(2)
      expect(read.records.map((r) => r.nativeThreads)).toEqual(full.map((r) => r.nativeThreads))
      expect(read.records).toEqual(full)
    }).pipe(Effect.provide(h.layer))
  })

  it.live("every thread (no ids given): each read lists the threads (a thread made is read); the audit when it gains a row", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const { o, t, memory } = yield* setUp(h)
      const sql = yield* SqlClient.SqlClient
      expect((yield* Checks.readRecords(null, memory)).threadIds).toEqual([t])
      const other = yield* o.create("codex")
      const read = yield* Checks.readRecords(null, memory)
      expect(read.threadIds).toEqual([t, other])
      expect(read.records.map((r) => r.threadId)).toEqual([t, other])
      const first = memory.items.get(t)![0]!
      yield* sql`UPDATE items SET text = 'changed' WHERE id = ${first.id}`
      expect((yield* Checks.readRecords(null, memory)).violations).toEqual([`crash-safety: item ${first.id} changed`])
    }).pipe(Effect.provide(h.layer))
  })

  it.live("after a restart each item read back is looked up by id once; one that is not retrievable is reported", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const { o, t, memory } = yield* setUp(h)
      const asked: Array<number> = []
      const counting = Effect.map(ThreadStore, (real) =>
        ThreadStore.make({ ...real, getItems: (ids) => Effect.suspend(() => (asked.push(ids.length), real.getItems(ids))) }))
      const afterRestart = Checks.afterRestart(memory).pipe(Effect.provideServiceEffect(ThreadStore, counting))
      const before = memory.items.get(t)!.length
      expect(yield* afterRestart).toEqual([])
      h.script.enqueue(Harness.reply(10))
      yield* o.send(t, "three")
      expect((yield* Checks.readRecords([t], memory)).violations).toEqual([])
      expect(yield* afterRestart).toEqual([])
      expect(yield* afterRestart).toEqual([])
      // The first restart looks every item up, the second only those read since, the third none.
      expect(asked).toEqual([before, memory.items.get(t)!.length - before])
      const first = memory.items.get(t)![0]!
      memory.items.get(t)!.push({ ...first, id: "itm_never_written" as ItemId })
      expect(yield* afterRestart).toEqual(["crash-safety: item itm_never_written, committed before the crash, is not retrievable by id"])
    }).pipe(Effect.provide(h.layer))
  })

  it.live.skipIf(db !== ":memory:")("a later incarnation finds the audit in the database; a trigger gone is made again (SQLite)", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const { memory, t } = yield* setUp(h)
      const sql = yield* SqlClient.SqlClient
      yield* sql`DROP TRIGGER sim_changed_runs_update`
      yield* Checks.reconnectAudit
      yield* sql`UPDATE runs SET created_at = '2030-01-01T00:00:00.000Z' WHERE thread_id = ${t}`
      const read = yield* Checks.readRecords([t], memory)
      expect(read.records[0]!.runs).toEqual((yield* InvariantChecks.readRecord(t)).runs)
    }).pipe(Effect.provide(h.layer))
  })
})

describe("the simulation's memoised token counter", () => {
  it("counts as the counter does, and forgets everything once its texts reach the bound", () => {
    const counted: Array<string> = []
    const base = { name: "words", count: (text: string) => (counted.push(text), text.split(" ").length) }
    const memo = memoisedCounter(base, 10)
    expect(memo.count("a b c")).toBe(3)
    expect(memo.count("a b c")).toBe(3)
    expect(counted).toEqual(["a b c"])
    expect(memo.count("d e f g")).toBe(4) // 5 + 7 characters > 10: the memo starts again
    expect(memo.count("a b c")).toBe(3)
    expect(counted).toEqual(["a b c", "d e f g", "a b c"])
    expect(memo.name).toBe("words")
  })
})

describe("the simulation's counter by line (o200kLines)", () => {
  // Fragments that sit at the edges of the o200k split pattern: line breaks with and without a carriage return,
  // whitespace before and after them, punctuation that runs on through `\n` and `/`, contractions, digits, a
  // byte-order mark, CJK, combining marks, an emoji, and the rendered item headers of a history.
  const fragments = [
    "\n", "\n", "\n", "\r\n", "\n\n", " \n", "\t\n", "\n ", "\n\t", "/", "//", "\n/", "]\n", "]", "[", " ", "  ", "\t",
    "word", "Word", "WORD", " alpha", "beta", "'s", "'ll", "don't", "123", "45678", "x = await load(path)", ".", "...", "?!",
    "\uFEFF", "\uFEFFusing", "日本語のテキスト", "e\u0301", "😀", "\u00A0", "\u2028", "[assistant_message a b #3]\n", "[tool_call x c1 #4]\n"
  ]
  const randomText = (prng: Prng.Prng) => {
    const parts: Array<string> = []
    for (let i = prng.int(1, 40); i > 0; i--) parts.push(prng.pick(fragments))
    return parts.join("")
  }

  it("cuts only where the counts add up: every text counts as the tokenizer counts it whole", () => {
    const real = TokenCounter.make()
    const memo = memoisedCounter(TokenCounter.make(), 32_000_000, { byLine: true })
    const prng = Prng.make(8)
    let cut = 0
    for (let i = 0; i < 4_000; i++) {
      const text = randomText(prng)
      if (o200kLines(text).length > 1) cut++
      // A line counted in one text is reused in the next: each must count as it would within every text.
      expect(memo.count(text), JSON.stringify(text)).toBe(real.count(text))
    }
    expect(cut).toBeGreaterThan(1_000)
  })

  it("cuts after a line feed followed by neither whitespace nor '/', and nowhere else", () => {
    expect(o200kLines("a\nb\n\nc\n d\n/e\r\nf\n")).toEqual(["a\n", "b\n\n", "c\n d\n/e\r\n", "f\n"])
    expect(o200kLines("no line feed")).toEqual(["no line feed"])
    expect(o200kLines("")).toEqual([""])
  })

  it("counts a text it has not seen as the sum of its lines, each line once", () => {
    const counted: Array<string> = []
    const real = TokenCounter.make()
    const memo = memoisedCounter({ name: "o200k", count: (text) => (counted.push(text), real.count(text)) }, 32_000_000, { byLine: true })
    const history = "[user_message r1 #1]\nhello there\n[assistant_message r1 #2]\nhi\n"
    expect(memo.count(history)).toBe(real.count(history))
    expect(memo.count(`${history}[user_message r2 #3]\nagain\n`)).toBe(real.count(`${history}[user_message r2 #3]\nagain\n`))
    expect(counted).toEqual([
      "[user_message r1 #1]\n", "hello there\n", "[assistant_message r1 #2]\n", "hi\n", "[user_message r2 #3]\n", "again\n"
    ])
  })
})

describe("the simulation's kept connection", () => {
  it.live("a restart keeps the SQLite connection only outside a transaction: a transaction left open is seen", () =>
    Harness.withDbFile((file) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        expect(yield* outsideTransaction).toBe(true)
        // What a crashed incarnation could leave behind were its transaction not rolled back.
        yield* sql.unsafe("BEGIN")
        expect(yield* outsideTransaction).toBe(false)
        yield* sql.unsafe("ROLLBACK")
        expect(yield* outsideTransaction).toBe(true)
      }).pipe(Effect.provide(Database.layerSqlite(file)))))
})

