import { Harness } from "@baton/testing"
import { describe, expect, it, beforeAll } from "@effect/vitest"
import { Effect, Tracer } from "effect"
import * as Fs from "node:fs"
import { createRequire } from "node:module"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const ops = Harness.ops

/**
 * Rows each driver hands back, whichever dialect runs: better-sqlite3's `all`/`get` (patched on the prototype every
 * prepared statement shares) and node-postgres's callback `Client.prototype.query` (what `@effect/sql-pg` calls).
 */
const driverRows = { rows: 0 }
{
  const pnpm = Path.resolve(Path.dirname(fileURLToPath(import.meta.url)), "../../../node_modules/.pnpm")
  const load = createRequire(import.meta.url)
  const at = (prefix: string, name: string) =>
    Path.join(pnpm, Fs.readdirSync(pnpm).find((d) => d.startsWith(prefix))!, "node_modules", name)
  const Sqlite = load(at("better-sqlite3@", "better-sqlite3"))
  const probe = new Sqlite(":memory:")
  const Statement = Object.getPrototypeOf(probe.prepare("SELECT 1"))
  probe.close()
  const all = Statement.all
  Statement.all = function(this: unknown, ...args: Array<unknown>) {
    const out = all.apply(this, args)
    driverRows.rows += out.length
    return out
  }
  const get = Statement.get
  Statement.get = function(this: unknown, ...args: Array<unknown>) {
    const out = get.apply(this, args)
    if (out !== undefined) driverRows.rows += 1
    return out
  }
  const Pg = load(at("pg@", "pg"))
  const query = Pg.Client.prototype.query
  Pg.Client.prototype.query = function(this: unknown, ...args: Array<unknown>) {
    const callback = args.at(-1)
    if (typeof callback === "function") {
      args[args.length - 1] = (err: unknown, result: unknown) => {
        const results = Array.isArray(result) ? result : result === undefined || result === null ? [] : [result]
        for (const r of results) driverRows.rows += (r as { rows?: Array<unknown> }).rows?.length ?? 0
        return callback(err, result)
      }
    }
    return query.apply(this, args)
  }
}

/**
 * A tracer that keeps, while `counting.on` is set, each statement `@effect/sql` runs (`sql.execute` spans) with the
 * rows the driver handed back for it.
 */
const counting = { on: false, statements: [] as Array<{ readonly text: string; readonly rows: number }>, rowsBefore: 0 }
const countingTracer = Tracer.make({
  span: (name, parent, context, links, startTime, kind) => {
    let text = ""
    return {
      _tag: "Span", name, spanId: "s", traceId: "t", parent, context, status: { _tag: "Started", startTime },
      attributes: new Map(), links: [...links], sampled: true, kind,
      end: () => {
        if (counting.on && name === "sql.execute") {
          counting.statements.push({ text, rows: driverRows.rows - counting.rowsBefore })
          counting.rowsBefore = driverRows.rows
        }
      },
      attribute: (key: string, value: unknown) => {
        if (key === "db.query.text") text = String(value)
      },
      event: () => {}, addLinks: () => {}
    }
  },
  context: (f) => f()
})

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  /**
   * An `/offload` on a thread of `earlier` runs (offloaded every ten, a provider switch every five) and then ten
   * more: its statements, and the rows its reads of the `runs` and of the handoff tables handed back.
   */
  const offloadAfter = (earlier: number) => {
    const h = Harness.make([
      { name: "claude", window: 1_000_000, inject: false },
      { name: "codex", window: 1_000_000, inject: false }
    ])
    return Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("claude")
      const send = (text: string) =>
        Effect.gen(function*() {
          h.script.enqueue(Harness.reply(40))
          expect((yield* o.send(threadId, text)).status).toBe("completed")
        })
      for (let i = 1; i <= earlier; i++) {
        // A switch every five runs: each leaves a handoff and its delivery behind.
        if (i % 5 === 0) yield* o.switchTo(threadId, i % 10 === 0 ? "claude" : "codex")
        yield* send(`step ${i}`)
        if (i % 10 === 0) expect((yield* o.offload(threadId, 100)).offloaded).toBe(true)
      }
      for (let i = 1; i <= 10; i++) yield* send(`recent ${i}`)
      counting.statements = []
      counting.rowsBefore = driverRows.rows
      counting.on = true
      const report = yield* o.offload(threadId, 100)
      counting.on = false
      expect(report.offloaded).toBe(true)
      const rowsFrom = (table: RegExp) => counting.statements.filter((s) => table.test(s.text)).reduce((n, s) => n + s.rows, 0)
      return {
        statements: counting.statements.length,
        runRows: rowsFrom(/\bFROM runs\b/i),
        handoffRows: rowsFrom(/\bFROM (handoffs|handoff_deliveries)\b/i)
      }
    }).pipe(Effect.withTracer(countingTracer), Effect.provide(h.layer))
  }

  // Regression (bench/growth.bench.ts): an offload asked whether the active native thread ran any run its summary
  // replaces by reading every run of the thread, and every delivery of the thread for the ones given to it; the
  // summary replaces the whole chain, so the read grew with the thread's history (1,024 rows at 1,000 runs). Now one
  // statement answers with at most one row, and only the native thread's own deliveries are read. Its supersession
  // of open handoffs read every handoff and delivery of the thread (every earlier switch's): now the open ones only.
  it.effect("an offload reads as many statements, run rows and handoff rows after 80 earlier runs as after 10", () =>
    Effect.gen(function*() {
      const short = yield* offloadAfter(10)
      const long = yield* offloadAfter(80)
      expect(long.statements).toBe(short.statements)
      expect(long.runRows).toBe(short.runRows)
      expect(long.handoffRows).toBe(short.handoffRows)
    }))
})
