/**
 * Growth hunt: every command and read a client makes per turn or per page view, timed and its SQL statements counted
 * on a thread with a short and a long history, on a real SQLite file. An operation whose answer does not depend on the
 * history should run as many statements on the long thread as on the short one; one that runs more is flagged.
 *
 * Each size builds a thread of that many runs on two providers (`claude` injects natively, `codex` takes history
 * inline) with a provider switch every 25 runs, a fork with one run merged back every 200 runs, a `/compact` every 250
 * runs and an `/offload` every 500 runs; then it measures each operation `SAMPLES` times. A tracer counts the
 * statements `@effect/sql` runs (`sql.execute` spans; a transaction counts `BEGIN` + `COMMIT`).
 *
 * Environment: `SIZES` (default `50,1000`), `SAMPLES` (default 9), `BENCH_STATEMENTS=operation` to print the
 * statements of those operations' last samples at each size (e.g. `BENCH_STATEMENTS=snapshot,compact`).
 * Run: `npx tsx bench/growth.bench.ts` from the repository root; prints a table.
 */
import type { ThreadId } from "@baton/contracts"
import { Commands, type CommandId } from "@baton/contracts"
import { ThreadQuery } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { Effect, Tracer } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { createRequire } from "node:module"
import { performance } from "node:perf_hooks"

const sizes = (process.env.SIZES ?? "50,1000").split(",").map(Number)
const samples = Number(process.env.SAMPLES ?? 9)
const listStatementsOf = new Set((process.env.BENCH_STATEMENTS ?? "").split(",").filter((s) => s !== ""))

/** Counts `sql.execute` spans (and keeps their statement text with the rows each read) while `counting.on` is set. */
const counting = { on: false, statements: [] as Array<string>, rowsBefore: 0 }
const countingTracer = Tracer.make({
  span: (name, parent, context, links, startTime, kind) => {
    let statement = ""
    return {
      _tag: "Span", name, spanId: "s", traceId: "t", parent, context, status: { _tag: "Started", startTime },
      attributes: new Map(), links: [...links], sampled: true, kind,
      end: () => {
        if (counting.on && name === "sql.execute") {
          counting.statements.push(`${String(rowCount.rows - counting.rowsBefore).padStart(5)} rows  ${statement}`)
          counting.rowsBefore = rowCount.rows
        }
      },
      attribute: (key: string, value: unknown) => {
        if (key === "db.query.text") statement = String(value)
      },
      event: () => {}, addLinks: () => {}
    }
  },
  context: (f) => f()
})

/**
 * Rows the SQLite driver hands back (better-sqlite3's `all`, `get`, `iterate`, patched on the prototype every prepared
 * statement shares) while `counting.on` is set: a statement whose rows grow with the history grows the operation's
 * work even when the statement count stays flat.
 */
const rowCount = { rows: 0 }
{
  const pnpm = Path.join(process.cwd(), "node_modules/.pnpm")
  const found = Fs.readdirSync(pnpm).find((d) => d.startsWith("better-sqlite3@"))!
  const Sqlite = createRequire(import.meta.url)(Path.join(pnpm, found, "node_modules/better-sqlite3"))
  const probe = new Sqlite(":memory:")
  const Statement = Object.getPrototypeOf(probe.prepare("SELECT 1"))
  probe.close()
  const all = Statement.all
  Statement.all = function(this: unknown, ...args: Array<unknown>) {
    const out = all.apply(this, args)
    if (counting.on) rowCount.rows += out.length
    return out
  }
  const get = Statement.get
  Statement.get = function(this: unknown, ...args: Array<unknown>) {
    const out = get.apply(this, args)
    if (counting.on && out !== undefined) rowCount.rows += 1
    return out
  }
  const iterate = Statement.iterate
  Statement.iterate = function*(this: unknown, ...args: Array<unknown>) {
    for (const row of iterate.apply(this, args)) {
      if (counting.on) rowCount.rows += 1
      yield row
    }
  }
}

/** Why an operation's work may grow with the history (its answer needs it); absent: it should not grow. */
const legitimate: Record<string, string> = {
  "sendMessage after a switch": "selects and renders the owed history",
  "fork": "records a handoff of every run up to the fork point",
  "compact": "drains deferred history before compacting",
  "offload": "plans over every item: pins and the first user message may lie anywhere before the cut",
  "handoffs": "lists every handoff with its id lists",
  "handoffSummaries": "lists every handoff (counts only)",
  "timeline (first view)": "folds the whole event log once"
}

interface Row {
  readonly statements: number
  readonly rows: number
  readonly ms: number
}

const median = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

let commandNo = 0
const cid = () => `growth_${++commandNo}` as CommandId

const measureSize = (n: number) => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-growth-"))
  const h = Harness.make([
    { name: "claude", window: 10_000_000, inject: true },
    { name: "codex", window: 10_000_000, inject: false }
  ], { db: Path.join(dir, "baton.sqlite") })
  const results = new Map<string, Array<Row>>()
  const program = Effect.gen(function*() {
    const o = yield* Harness.ops
    const query = yield* ThreadQuery.ThreadQuery
    const threadId = yield* o.create("claude")
    let provider = "claude"
    const other = () => (provider === "claude" ? "codex" : "claude")
    const send = (thread: ThreadId, text: string) =>
      Effect.gen(function*() {
        h.script.enqueue(Harness.reply(40))
        return yield* o.send(thread, text)
      })
    const switchProvider = Effect.suspend(() => {
      provider = other()
      return o.switchTo(threadId, provider)
    })
    const forkAndMerge = (counted: boolean) =>
      Effect.gen(function*() {
        const fork = yield* o.fork(threadId)
        yield* send(fork.threadId, "on the fork")
        return yield* measured("merge-back", o.merge(fork.threadId), counted)
      })
    /** Runs `effect`, recording its statements and time under `label` when `counted`. */
    const measured = <A, E, R>(label: string, effect: Effect.Effect<A, E, R>, counted = true) =>
      Effect.gen(function*() {
        if (!counted) return yield* effect
        counting.statements = []
        rowCount.rows = 0
        counting.rowsBefore = 0
        counting.on = true
        const t0 = performance.now()
        const out = yield* effect
        const ms = performance.now() - t0
        counting.on = false
        const rows = results.get(label) ?? []
        rows.push({ statements: counting.statements.length, rows: rowCount.rows, ms })
        results.set(label, rows)
        if (listStatementsOf.has(label)) lastStatements.set(label, [...counting.statements])
        return out
      })

    // The history.
    for (let i = 1; i <= n; i++) {
      if (i % 25 === 0) yield* switchProvider
      yield* send(threadId, `step ${i}`)
      if (i % 200 === 0) yield* forkAndMerge(false)
      if (i % 250 === 0) yield* o.compact(threadId)
      if (i % 500 === 0) yield* o.offload(threadId, 2_000)
    }

    // The first view of the timeline folds the whole log; later views read the tail.
    yield* measured("timeline (first view)", query.timeline(threadId))
    for (let s = 0; s < samples; s++) {
      // The previous sample's merge-back and interrupted run are owed: a turn delivers them first.
      yield* send(threadId, `settle ${s}`)
      const lastRun = (yield* measured("sendMessage (nothing owed)", send(threadId, `quiet ${s}`))).runId
      yield* measured("switchProvider", switchProvider)
      yield* measured("sendMessage after a switch", send(threadId, `after switch ${s}`))
      yield* send(threadId, `before compact ${s}`)
      yield* measured("compact", o.compact(threadId))
      yield* send(threadId, `before offload ${s}`)
      yield* measured("offload", o.offload(threadId, 2_000))
      yield* measured("fork", o.fork(threadId))
      yield* forkAndMerge(true)
      const queued = yield* o.service.enqueueMessage(Commands.SendMessage.make({ commandId: cid(), threadId, text: `interrupted ${s}` }))
      yield* measured("interrupt", o.service.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: queued.id })))
      yield* measured("snapshot", query.snapshot(threadId))
      yield* measured("listRuns (first page)", query.listRuns(threadId, {}))
      yield* measured("listItems (first page)", query.listItems(threadId, {}))
      yield* measured("run(runId)", query.run(lastRun))
      yield* measured("handoffs", query.handoffs(threadId))
      yield* measured("handoffSummaries", query.handoffSummaries(threadId))
      yield* measured("timeline", query.timeline(threadId))
      yield* measured("threadEvents (page of 100)", query.threadEvents(threadId, 0, 100))
      yield* measured("listThreads (first page)", query.listThreads({}))
    }
  })
  return Effect.runPromise(Effect.provide(program.pipe(Effect.withTracer(countingTracer)), h.layer)).then(() => {
    Fs.rmSync(dir, { recursive: true, force: true })
    return results
  })
}

const lastStatements = new Map<string, Array<string>>()
const bySize: Array<Map<string, Array<Row>>> = []
for (const n of sizes) {
  const t0 = performance.now()
  bySize.push(await measureSize(n))
  console.error(`${n} runs built and measured in ${((performance.now() - t0) / 1000).toFixed(1)} s`)
  for (const label of listStatementsOf) {
    console.log(`-- ${label} at ${n} runs:`)
    for (const s of lastStatements.get(label) ?? []) console.log(`   ${s.replace(/\s+/g, " ").slice(0, 240)}`)
  }
}

// Statements: the median, with the samples' range when they differ; rows read and time: the median.
const header = sizes.flatMap((n) => [`statements @${n}`, `rows @${n}`, `median ms @${n}`])
console.log(`| operation | ${header.join(" | ")} | grows? |`)
console.log(`| --- | ${header.map(() => "---").join(" | ")} | --- |`)
for (const label of bySize[0]!.keys()) {
  const cells = bySize.map((m) => {
    const rows = m.get(label) ?? []
    const statements = rows.map((r) => r.statements)
    const [low, high] = [Math.min(...statements), Math.max(...statements)]
    return {
      statements: high,
      range: low === high ? String(low) : `${median(statements)} (${low}-${high})`,
      rows: median(rows.map((r) => r.rows)),
      ms: median(rows.map((r) => r.ms))
    }
  })
  // Rows read: more than twice the short thread's (and 20 more) is growth, not a page filling up.
  // Statements: the most any sample ran (a sample that found deferred history runs one more at either size).
  const grows = cells.at(-1)!.statements > cells[0]!.statements || cells.at(-1)!.rows > Math.max(2 * cells[0]!.rows, cells[0]!.rows + 20)
  const verdict = !grows ? "no" : legitimate[label] !== undefined ? `yes, legitimately: ${legitimate[label]}` : "**YES**"
  console.log(`| ${label} | ${cells.flatMap((c) => [c.range, String(c.rows), c.ms.toFixed(2)]).join(" | ")} | ${verdict} |`)
}
