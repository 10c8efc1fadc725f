/**
 * The cost floor of one SQL statement on this machine: the same point read (`SELECT * FROM runs WHERE id = ?`, one
 * row of a table of 10,000) and the same empty unit of work (`BEGIN`, the thread-lock `UPDATE`, `COMMIT`), run
 * through better-sqlite3 directly and through `@effect/sql-sqlite-node` as Baton configures it (name transforms),
 * with and without decoding the row through a schema, with and without a tracer.
 *
 * Why: turn start runs tens of statements; this says how much of a turn's time is the statement count itself.
 *
 * Run: `npx tsx bench/statement-floor.bench.ts` from the repository root (`FLOOR_N`, default 20,000 per case).
 */
import { Database } from "@baton/persistence"
import { SqlClient } from "@effect/sql"
import { Effect, Schema, Tracer } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { performance } from "node:perf_hooks"
import { createRequire } from "node:module"

const n = Number(process.env.FLOOR_N ?? 20_000)
const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-floor-"))
const file = Path.join(dir, "floor.sqlite")

const Row = Schema.Struct({ id: Schema.String, threadId: Schema.String, seq: Schema.Number, status: Schema.String, prompt: Schema.String })
const decode = Schema.decodeUnknown(Schema.Array(Row))

/** Runs `self` twice (a warm-up, then timed) and prints the time per repetition in µs (`n` repetitions each). */
const time = <E>(label: string, self: Effect.Effect<unknown, E>) =>
  Effect.gen(function*() {
    yield* self
    const t0 = performance.now()
    yield* self
    const us = ((performance.now() - t0) / n) * 1000
    console.log(`${label.padEnd(64)} ${us.toFixed(1)} µs`)
  })

const timeSync = (label: string, f: () => void) => {
  f()
  const t0 = performance.now()
  f()
  console.log(`${label.padEnd(64)} ${(((performance.now() - t0) / n) * 1000).toFixed(1)} µs`)
}

const nullTracer = Tracer.make({
  span: (name, parent, context, links, startTime, kind) => ({
    _tag: "Span", name, spanId: "s", traceId: "t", parent, context, status: { _tag: "Started", startTime },
    attributes: new Map(), links: [...links], sampled: true, kind,
    end: () => {}, attribute: () => {}, event: () => {}, addLinks: () => {}
  }),
  context: (f) => f()
})

const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`INSERT INTO threads (id, title, active_provider_thread_id, created_at, updated_at) VALUES ('thr_1', 't', NULL, '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')`
  yield* sql.withTransaction(Effect.forEach(Array.from({ length: 10_000 }, (_, i) => i), (i) =>
    sql`INSERT INTO runs (id, thread_id, seq, provider_thread_id, status, prompt, created_at, updated_at)
        VALUES (${`run_${i}`}, 'thr_1', ${i + 1}, 'pth_1', 'completed', 'a prompt', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')`, { discard: true }))
  const ids = Array.from({ length: n }, (_, i) => `run_${(i * 7919) % 10_000}`)
  const each = <A, E>(f: (id: string) => Effect.Effect<A, E>) => Effect.forEach(ids, f, { discard: true })
  yield* time("effect: point read, raw rows", each((id) => sql`SELECT * FROM runs WHERE id = ${id}`))
  yield* time("effect: point read + schema decode", each((id) => Effect.flatMap(sql`SELECT * FROM runs WHERE id = ${id}`, decode)))
  yield* time("effect: point read + decode, with a tracer", Effect.withTracer(each((id) => Effect.flatMap(sql`SELECT * FROM runs WHERE id = ${id}`, decode)), nullTracer))
  yield* time("effect: point read + decode, tracing disabled", Effect.withTracerEnabled(each((id) => Effect.flatMap(sql`SELECT * FROM runs WHERE id = ${id}`, decode)), false))
  yield* time("effect: unit of work, tracing disabled", Effect.withTracerEnabled(each(() => sql.withTransaction(sql`UPDATE threads SET lock_version = lock_version + 1 WHERE id = 'thr_1'`)), false))
  yield* time("effect: unit of work (BEGIN, lock UPDATE, COMMIT)", each(() => sql.withTransaction(sql`UPDATE threads SET lock_version = lock_version + 1 WHERE id = 'thr_1'`)))
})

const require = createRequire(import.meta.url)
const main = async () => {
  await Effect.runPromise(Effect.provide(program, Database.layerSqlite(file)))
  // better-sqlite3 directly, the same file and statements (the driver @effect/sql-sqlite-node wraps).
  const BetterSqlite = require(require.resolve("better-sqlite3", { paths: [require.resolve("@effect/sql-sqlite-node")] })) as new (f: string) => {
    prepare: (s: string) => { all: (...a: Array<unknown>) => Array<unknown>; run: (...a: Array<unknown>) => unknown }
    pragma: (s: string) => unknown
  }
  const db = new BetterSqlite(file)
  db.pragma("synchronous = NORMAL")
  const select = db.prepare("SELECT * FROM runs WHERE id = ?")
  const ids = Array.from({ length: n }, (_, i) => `run_${(i * 7919) % 10_000}`)
  timeSync("better-sqlite3: point read (prepared once)", () => { for (const id of ids) select.all(id) })
  timeSync("better-sqlite3: point read (prepared each time)", () => { for (const id of ids) db.prepare("SELECT * FROM runs WHERE id = ?").all(id) })
  const begin = db.prepare("BEGIN"), lock = db.prepare("UPDATE threads SET lock_version = lock_version + 1 WHERE id = 'thr_1'"), commit = db.prepare("COMMIT")
  timeSync("better-sqlite3: BEGIN, lock UPDATE, COMMIT", () => { for (const _ of ids) { begin.run(); lock.run(); commit.run() } })
  Fs.rmSync(dir, { recursive: true, force: true })
}
void main()
