/**
 * Turn-start overhead: the time Baton adds to a turn (everything but the provider's own time), on threads of
 * 100, 1,000, 10,000 and 100,000 items, on a real SQLite file or on the real Postgres server.
 *
 * For each size it builds a thread on one scripted provider (runs of 10 items: the prompt, an answer and four tool
 * call/result pairs), then measures `sendMessage` for 200 further runs, subtracting the time spent inside the
 * provider adapter's own calls. Half of the measured runs follow a provider switch, so they carry owed history
 * (selection, rendering, inline delivery); the other half owe nothing.
 *
 * It also times each measured `switchProvider` and prints the median of the first and of the last tenth of them (a
 * switch must cost the same after hundreds of earlier switches). It counts the SQL statements of each measured turn
 * and splits them, and the time, by phase. A tracer sees every `sql.execute` span (one statement) and
 * `sql.transaction` span (`BEGIN` + `COMMIT`, or one `SAVEPOINT` when nested) of `@effect/sql`, and the `Effect.fn`
 * spans that mark the phases:
 *   accept      `sendMessage` up to `ThreadService.queueRun` (the command receipt lookup)
 *   queue       `ThreadService.queueRun` (the run, its `user_message` item, the receipt)
 *   claim       after queueing, up to `ProviderTurnStartService.prepare` (provider lookup, `queued` -> `starting`)
 *   prepare     `ProviderTurnStartService.prepare` (native thread, missed runs, budget, owed history)
 *   begin       after prepare, up to the provider's `startTurn` (the attempt and `running`)
 *   completion  after `startTurn` returned, to the end of `TurnExecution.run` (items, usage, settle)
 *   receipt     after `TurnExecution.run` (the command receipt's result)
 * Provider calls (`startThread`, `injectHistory`, `startTurn`) are excluded from every phase.
 *
 * A warm-up thread of 60 runs (half after a switch) runs first, so the JIT and the statement caches are warm.
 *
 * Environment: `BENCH_SIZES` (default `100,1000,10000,100000`), `BENCH_DIALECT` (`sqlite`, the default, or
 * `postgres`: `Database.layerPgIsolated()` on `BATON_TEST_DATABASE_URL`, default the local server's `test`
 * database), `BENCH_RUNS` (measured runs per size, default 200), `BENCH_STATEMENTS=1` (also print each phase's
 * statements by total time), `BENCH_ITEM_CHUNKS=1` (replay the provider's turn to Baton one event per stream chunk,
 * as a provider that streams item by item with pauses between items; by default the played turn is replayed as
 * one chunk, as a provider that delivers the turn's items together), `BENCH_HEAP_PHASES=1` (also print the bytes
 * allocated per phase), `BENCH_SPANS=1` (also print each span's own time per turn: its time less its child spans', the
 * Effect runtime's work inside a service method counted to it), `BENCH_QUIET=1` (no switch between the measured turns: every one owes
 * nothing, for a profile of the quiet path alone), `BENCH_TRACING=0` (run with the tracer disabled, as `baton serve` runs by default: the
 * counting tracer's spans cost about a tenth of a turn; the phase clock then only tells the provider's time from
 * Baton's, so the report gives totals without the phase and statement split), `BENCH_HEAPPROF=<prefix>` (write a sampling heap profile of the measured turns, objects
 * collected since included, to `<prefix>.<size>.heapprofile`; `BENCH_HEAPPROF_LIVE=1`: only the objects still live), `BENCH_CPUPROF=<prefix>` (write a CPU profile of the measured turns, switches included, sampled every 100 µs, to `<prefix>.<size>.cpuprofile`).
 *
 * CPU: "CPU per turn" is the process's CPU time (`process.cpuUsage`, user + system, GC threads included) across the
 * measured `sendMessage`, the provider's share included: on a shared machine the wall time counts the time the
 * process waited for a core, its CPU time much less so (A/B runs under load compare it, and its low decile).
 *
 * Allocation: "allocated per turn" is the growth of V8's used heap across the measured `sendMessage` (the median
 * over the turns no GC ran inside; a turn with a GC in it is left out). It includes what the scripted provider and
 * this bench's tracer allocate (about 600 KiB of a quiet turn is the provider's: `BENCH_HEAP_PHASES=1`, `provider`).
 *
 * Run: `npx tsx bench/turn-start.bench.ts` from the repository root.
 */
import { Commands, type CommandId, type ProviderInstance, type ThreadId } from "@baton/contracts"
import { ThreadService } from "@baton/orchestration"
import type { ProviderAdapter } from "@baton/providers"
import { Harness } from "@baton/testing"
import { Effect, Option, Stream, Tracer } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Inspector from "node:inspector"
import { performance, PerformanceObserver } from "node:perf_hooks"
import * as V8 from "node:v8"

const sizes = (process.env.BENCH_SIZES ?? "100,1000,10000,100000").split(",").map(Number)
const dialect = process.env.BENCH_DIALECT === "postgres" ? "postgres" : "sqlite"
const measured = Number(process.env.BENCH_RUNS ?? 200)
const listStatements = process.env.BENCH_STATEMENTS === "1"
const itemChunks = process.env.BENCH_ITEM_CHUNKS === "1"
const heapProfile = process.env.BENCH_HEAPPROF
/** `BENCH_CPUPROF=<prefix>`: write a CPU profile of the measured turns (switches included) to `<prefix>.<size>.cpuprofile`. */
const cpuProfile = process.env.BENCH_CPUPROF
const heapLive = process.env.BENCH_HEAPPROF_LIVE === "1"
const heapPhases = process.env.BENCH_HEAP_PHASES === "1"
/** `BENCH_SPANS=1`: also print each span name's time per turn, its own (children's spans subtracted) and in all. */
const spanTimes = process.env.BENCH_SPANS === "1"
/** `BENCH_QUIET=1`: never switch between the measured turns (all of them owe nothing: a profile of the quiet path alone). */
const quietOnly = process.env.BENCH_QUIET === "1"
/** `BENCH_TRACING=0`: run as the server does by default (`tracing` off, no span opened); otherwise the counting tracer. */
const tracing = process.env.BENCH_TRACING !== "0"

/** Samples the measured turns' allocations (objects collected since included) into `BENCH_HEAPPROF`. */
const inspector = heapProfile === undefined && cpuProfile === undefined ? undefined : (() => {
  const session = new Inspector.Session()
  session.connect()
  const post = (method: string, params?: object) =>
    new Promise<unknown>((resolve, reject) => session.post(method, params, (e, r) => (e ? reject(e) : resolve(r))))
  return { post }
})()

const phases = ["accept", "queue", "claim", "prepare", "begin", "completion", "receipt"] as const
type Phase = typeof phases[number] | "provider" | "idle"

/** The phase clock: time and statements of the current phase accumulate until the next transition. */
const clock = {
  phase: "idle" as Phase,
  since: 0,
  ms: new Map<Phase, number>(),
  statements: new Map<Phase, number>(),
  /** Bytes allocated per phase (V8 heap used size deltas; a GC inside a phase makes its figure meaningless). */
  bytes: new Map<Phase, number>(),
  heap: 0,
  texts: new Map<string, { count: number; ms: number }>(),
  /** Per span name: calls, own time (ms, the child spans' time subtracted) and whole time, of the current turn. */
  spans: new Map<string, { count: number; self: number; total: number; bytes: number }>(),
  enter(next: Phase) {
    const now = performance.now()
    this.ms.set(this.phase, (this.ms.get(this.phase) ?? 0) + now - this.since)
    if (heapPhases) {
      const heap = V8.getHeapStatistics().used_heap_size
      this.bytes.set(this.phase, (this.bytes.get(this.phase) ?? 0) + heap - this.heap)
      this.heap = heap
    }
    this.phase = next
    this.since = performance.now()
  },
  reset() {
    this.ms.clear()
    this.statements.clear()
    this.bytes.clear()
    this.heap = V8.getHeapStatistics().used_heap_size
    this.texts.clear()
    this.spans.clear()
    this.phase = "idle"
    this.since = performance.now()
  },
  count(n: number, text: string, ms: number) {
    this.statements.set(this.phase, (this.statements.get(this.phase) ?? 0) + n)
    if (listStatements) {
      const key = `${this.phase}\t${text.replace(/\s+/g, " ").slice(0, 160)}`
      const t = this.texts.get(key) ?? { count: 0, ms: 0 }
      t.count += n
      t.ms += ms
      this.texts.set(key, t)
    }
  }
}

/** Phase transitions at the start and end of the spans that mark them (see the module docblock). */
const onStart: Record<string, Phase> = { "ThreadService.queueRun": "queue", "ProviderTurnStartService.prepare": "prepare" }
const onEnd: Record<string, Phase> = {
  "ThreadService.queueRun": "claim",
  "ProviderTurnStartService.prepare": "begin",
  // The run is driven by `TurnExecution.run` (ThreadService's `processRun` before the service was split).
  "TurnExecution.run": "receipt"
}

const insideTransaction = (parent: Option.Option<Tracer.AnySpan>): boolean => {
  let p = Option.getOrUndefined(parent)
  while (p !== undefined) {
    if (p._tag === "Span" && p.name === "sql.transaction") return true
    p = p._tag === "Span" ? Option.getOrUndefined(p.parent) : undefined
  }
  return false
}

/** The time of each open span's finished child spans (ms), to tell a span's own time (`BENCH_SPANS`). */
const childMs = new WeakMap<Tracer.AnySpan, number>()
/** The bytes allocated by each open span's finished child spans (`BENCH_SPANS`). */
const childBytes = new WeakMap<Tracer.AnySpan, number>()

let spanIds = 0
/** A tracer that counts statements and moves the phase clock; its spans are minimal and export nowhere. */
const countingTracer = Tracer.make({
  span: (name, parent, context, links, startTime, kind) => {
    const attributes = new Map<string, unknown>()
    const phase = onStart[name]
    if (phase !== undefined && clock.phase !== "idle") clock.enter(phase)
    const nested = name === "sql.transaction" && insideTransaction(parent)
    const t0 = performance.now()
    const heap0 = spanTimes ? V8.getHeapStatistics().used_heap_size : 0
    const span: Tracer.Span = {
      _tag: "Span",
      name,
      spanId: String(++spanIds),
      traceId: "bench",
      parent,
      context,
      status: { _tag: "Started", startTime },
      attributes,
      links: [...links],
      sampled: true,
      kind,
      end: () => {
        if (spanTimes && clock.phase !== "idle") {
          const total = performance.now() - t0
          // Negative when a GC ran inside: such a turn's bytes are not reported (see `report`).
          const bytes = V8.getHeapStatistics().used_heap_size - heap0
          const t = clock.spans.get(name) ?? { count: 0, self: 0, total: 0, bytes: 0 }
          t.bytes += bytes - (childBytes.get(span) ?? 0)
          t.count += 1
          t.self += total - (childMs.get(span) ?? 0)
          t.total += total
          clock.spans.set(name, t)
          const up = Option.getOrUndefined(parent)
          if (up !== undefined) {
            childMs.set(up, (childMs.get(up) ?? 0) + total)
            childBytes.set(up, (childBytes.get(up) ?? 0) + bytes)
          }
        }
        if (name === "sql.execute") clock.count(1, String(attributes.get("db.query.text") ?? ""), performance.now() - t0)
        else if (name === "sql.transaction") clock.count(nested ? 1 : 2, nested ? "SAVEPOINT" : "BEGIN + COMMIT", 0)
        const next = onEnd[name]
        if (next !== undefined && clock.phase !== "idle") clock.enter(next)
      },
      attribute: (key, value) => void attributes.set(key, value),
      event: () => {},
      addLinks: () => {}
    }
    return span
  },
  context: (f) => f()
})

/** Wraps the adapter's calls: their time is the provider's (excluded); `startTurn` starts the completion phase. */
const timed = (adapter: ProviderAdapter.ProviderAdapterShape) => {
  const wrap = <A extends ReadonlyArray<unknown>, B, E>(f: (...a: A) => Effect.Effect<B, E>, after: Phase | null) => (...a: A) =>
    Effect.suspend(() => {
      const back = after ?? clock.phase
      if (clock.phase !== "idle") clock.enter("provider")
      return Effect.ensuring(f(...a), Effect.sync(() => clock.phase !== "idle" && clock.enter(back)))
    })
  const mutable = adapter as { -readonly [K in keyof ProviderAdapter.ProviderAdapterShape]: ProviderAdapter.ProviderAdapterShape[K] }
  // The provider's own time of a streamed turn: it is played to its end first (timed), then replayed to Baton.
  // The adapter's own startTurn, taken before it is replaced below (the replacement must not call itself).
  const startTurn = adapter.startTurn
  const collect = wrap((input: ProviderAdapter.StartTurnInput) => Stream.runCollect(startTurn(input)), "completion")
  mutable.startTurn = (input) =>
    Stream.unwrap(Effect.map(collect(input), (events) => itemChunks ? Stream.fromIterable(events).pipe(Stream.rechunk(1)) : Stream.fromChunk(events)))
  mutable.startThread = wrap(adapter.startThread, null)
  mutable.resumeThread = wrap(adapter.resumeThread, null)
  if (adapter.injectHistory) mutable.injectHistory = wrap(adapter.injectHistory, null)
}

const runResponse = (i: number) => ({
  items: [
    { kind: "assistant_message" as const, text: `Looking at step ${i}: I will read the files and run the tests.`, toolCallId: null, toolName: null, messageId: `m${i}`, isError: false, toolCallState: null },
    ...[0, 1, 2, 3].flatMap((k) => [
      { kind: "tool_call" as const, text: JSON.stringify({ command: `cat src/module${k}.ts` }), toolCallId: `call_${i}_${k}`, toolName: "bash", messageId: `m${i}`, isError: false, toolCallState: "answered" as const },
      { kind: "tool_result" as const, text: `export const value${k} = ${i * k}\n`.repeat(8), toolCallId: `call_${i}_${k}`, toolName: "bash", messageId: null, isError: false, toolCallState: null }
    ])
  ]
})

const quantile = (xs: ReadonlyArray<number>, q: number) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!
}

interface Sample {
  readonly total: number
  readonly ms: ReadonlyMap<Phase, number>
  readonly statements: ReadonlyMap<Phase, number>
  readonly bytes_: ReadonlyMap<Phase, number>
  readonly spans: ReadonlyMap<string, { readonly count: number; readonly self: number; readonly total: number; readonly bytes: number }>
  /** When the measured `sendMessage` started and ended (`performance.now()`), to find the GC pauses inside it. */
  readonly from: number
  readonly to: number
  /** Bytes allocated on the V8 heap during the turn (its used size after minus before; NaN when a GC ran inside). */
  readonly bytes: number
  /** The process's CPU time (user + system, ms) during the measured `sendMessage`, provider included. */
  readonly cpu: number
}

/** Every garbage collection pause of the run (start and duration, ms): the slowest samples say how much was GC. */
const gcPauses: Array<{ readonly start: number; readonly duration: number; readonly kind: number }> = []
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) gcPauses.push({ start: e.startTime, duration: e.duration, kind: (e as { readonly detail?: { readonly kind?: number } }).detail?.kind ?? 0 })
}).observe({ entryTypes: ["gc"] })
/** GC pause time inside a sample (ms) and the pauses' kinds (1 scavenge, 2 mark-compact, 4 incremental, 8 weak callbacks). */
const gcIn = (s: Sample) => {
  const inside = gcPauses.filter((g) => g.start >= s.from && g.start + g.duration <= s.to)
  return { ms: inside.reduce((n, g) => n + g.duration, 0), kinds: [...new Set(inside.map((g) => g.kind))].join("+") }
}

const fmt = (x: number) => x.toFixed(3)
const median = (xs: ReadonlyArray<number>) => quantile(xs, 0.5)

const report = (label: string, samples: ReadonlyArray<Sample>) => {
  const totals = samples.map((s) => s.total)
  const statements = samples.map((s) => phases.reduce((n, p) => n + (s.statements.get(p) ?? 0), 0))
  const byPhase = phases.map((p) =>
    `${p} ${fmt(median(samples.map((s) => s.ms.get(p) ?? 0)))}/${median(samples.map((s) => s.statements.get(p) ?? 0))}`
  ).join(" ")
  const slowest = samples.reduce((a, b) => (b.total > a.total ? b : a))
  const slowPhases = phases.map((p) => `${p} ${fmt(slowest.ms.get(p) ?? 0)}/${slowest.statements.get(p) ?? 0}`).join(" ")
  const gc = gcIn(slowest)
  const gcTotals = samples.map((s) => gcIn(s).ms)
  const quiet = samples.filter((s, i) => gcTotals[i] === 0 && !Number.isNaN(s.bytes))
  const bytes = quiet.map((s) => s.bytes)
  const phaseBytes = heapPhases && quiet.length > 0
    ? `\n    KiB per phase (median of turns without GC): ${(["provider", ...phases] as const).map((p) => `${p} ${(median(quiet.map((s) => s.bytes_.get(p) ?? 0)) / 1024).toFixed(0)}`).join(" ")}`
    : ""
  const spanLines = spanTimes
    ? "\n    spans by own time per turn (median ms over the turns: own / whole, calls; own KiB allocated, turns without GC):" + [...new Set(samples.flatMap((s) => [...s.spans.keys()]))]
      .map((name) => {
        const of = (f: (t: { readonly count: number; readonly self: number; readonly total: number; readonly bytes: number }) => number, among = samples) =>
          median(among.map((s) => (s.spans.has(name) ? f(s.spans.get(name)!) : 0)))
        return { name, self: of((t) => t.self), total: of((t) => t.total), count: of((t) => t.count), bytes: quiet.length === 0 ? Number.NaN : of((t) => t.bytes, quiet) }
      })
      .sort((a, b) => b.self - a.self)
      .map((t) => `\n      ${fmt(t.self)} / ${fmt(t.total)} ms, ${t.count}x, ${(t.bytes / 1024).toFixed(0)} KiB ${t.name}`).join("")
    : ""
  const cpu = samples.map((s) => s.cpu)
  const cpuLine = `\n    CPU per turn (the process's user + system time across sendMessage, provider included; less disturbed by other ` +
    `processes than the wall time): median ${fmt(median(cpu))} ms, p10 ${fmt(quantile(cpu, 0.1))} ms`
  if (!tracing) {
    return `${label}: median ${fmt(median(totals))} ms, p99 ${fmt(quantile(totals, 0.99))} ms (tracing off: no phase or statement split)` + cpuLine +
      `\n    GC inside a turn: median ${fmt(median(gcTotals))} ms, p99 ${fmt(quantile(gcTotals, 0.99))} ms; ` +
      `allocated per turn: median ${bytes.length === 0 ? "n/a" : `${(median(bytes) / 1024).toFixed(0)} KiB`} (of ${bytes.length} turns without GC)`
  }
  return `${label}: median ${fmt(median(totals))} ms, p99 ${fmt(quantile(totals, 0.99))} ms, ` +
    `statements median ${median(statements)} (max ${Math.max(...statements)}); per phase ms/statements: ${byPhase}` +
    cpuLine +
    `\n    slowest ${fmt(slowest.total)} ms (GC ${fmt(gc.ms)} ms${gc.kinds === "" ? "" : `, kinds ${gc.kinds}`}): ${slowPhases}` +
    `\n    GC inside a turn: median ${fmt(median(gcTotals))} ms, p99 ${fmt(quantile(gcTotals, 0.99))} ms; ` +
    `without it: p99 ${fmt(quantile(samples.map((s, i) => s.total - gcTotals[i]!), 0.99))} ms; ` +
    `allocated per turn: median ${bytes.length === 0 ? "n/a" : `${(median(bytes) / 1024).toFixed(0)} KiB`} (of ${bytes.length} turns without GC)` + phaseBytes + spanLines
}

for (const size of sizes) {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-bench-"))
  const h = Harness.make([
    { name: "claude", window: 1_000_000, inject: false },
    { name: "codex", window: 1_000_000, inject: false }
  ], { db: dialect === "postgres" ? Harness.postgres : Path.join(dir, "baton.sqlite") })
  for (const p of Object.values(h.providers)) timed(p)
  let n = 0
  const cid = () => `cmd_${++n}` as CommandId
  const built0 = performance.now()
  const program = Effect.gen(function*() {
    const service = yield* ThreadService.ThreadService
    // Warm-up on a thread of its own (the JIT, the statement caches), switching as the measured runs do.
    const warm: ThreadId = yield* service.createThread(Commands.CreateThread.make({ commandId: cid(), title: "warm-up", providerInstance: "claude" as ProviderInstance }))
    for (let i = 0; i < 60; i++) {
      if (i % 2 === 0) {
        yield* service.switchProvider(Commands.SwitchProvider.make({ commandId: cid(), threadId: warm, providerInstance: (i % 4 === 0 ? "codex" : "claude") as ProviderInstance }))
      }
      h.script.enqueue(runResponse(i))
      yield* service.sendMessage(Commands.SendMessage.make({ commandId: cid(), threadId: warm, text: `Warm-up step ${i}.` }))
    }
    const threadId: ThreadId = yield* service.createThread(Commands.CreateThread.make({ commandId: cid(), title: "bench", providerInstance: "claude" as ProviderInstance }))
    const runsToBuild = Math.ceil(size / 10)
    for (let i = 0; i < runsToBuild; i++) {
      h.script.enqueue(runResponse(i))
      yield* service.sendMessage(Commands.SendMessage.make({ commandId: cid(), threadId, text: `Step ${i}: continue with the plan.` }))
    }
    const buildMs = performance.now() - built0
    /** The wall time of each measured `switchProvider` (ms, provider calls included: none with `inject: false`). */
    const switches: Array<number> = []
    const plain: Array<Sample> = []
    const owed: Array<Sample> = []
    let provider: "claude" | "codex" = "claude"
    for (let i = 0; i < measured; i++) {
      const switching = !quietOnly && i % 2 === 0
      if (switching) {
        provider = provider === "claude" ? "codex" : "claude"
        const switchedAt = performance.now()
        yield* service.switchProvider(Commands.SwitchProvider.make({ commandId: cid(), threadId, providerInstance: provider as ProviderInstance }))
        switches.push(performance.now() - switchedAt)
      }
      h.script.enqueue(runResponse(runsToBuild + i))
      const command = Commands.SendMessage.make({ commandId: cid(), threadId, text: `Measured step ${i}.` })
      if (i === 0 && inspector !== undefined && cpuProfile !== undefined) {
        yield* Effect.promise(() => inspector.post("Profiler.enable"))
        yield* Effect.promise(() => inspector.post("Profiler.setSamplingInterval", { interval: 100 }))
        yield* Effect.promise(() => inspector.post("Profiler.start"))
      }
      if (i === 0 && inspector !== undefined && heapProfile !== undefined) {
        yield* Effect.promise(() => inspector.post("HeapProfiler.enable"))
        yield* Effect.promise(() => inspector.post("HeapProfiler.startSampling", { samplingInterval: 1024, includeObjectsCollectedByMajorGC: !heapLive, includeObjectsCollectedByMinorGC: !heapLive }))
      }
      clock.reset()
      const heapBefore = V8.getHeapStatistics().used_heap_size
      const cpuBefore = process.cpuUsage()
      const from = performance.now()
      clock.enter("accept")
      yield* service.sendMessage(command)
      clock.enter("idle")
      const to = performance.now()
      const cpuUsed = process.cpuUsage(cpuBefore)
      const heapAfter = V8.getHeapStatistics().used_heap_size
      const ms = new Map(clock.ms)
      const total = phases.reduce((t, p) => t + (ms.get(p) ?? 0), 0)
      ;(switching ? owed : plain).push({ total, ms, statements: new Map(clock.statements), bytes_: new Map(clock.bytes), spans: new Map(clock.spans), from, to, bytes: heapAfter >= heapBefore ? heapAfter - heapBefore : Number.NaN, cpu: (cpuUsed.user + cpuUsed.system) / 1000 })
      if (listStatements && i >= measured - 2) {
        console.log(switching ? "statements of the last turn after a switch:" : "statements of the last turn with nothing owed:")
        for (const [key, t] of [...clock.texts].sort((a, b) => b[1].ms - a[1].ms)) console.log(`  ${t.count}x ${fmt(t.ms)} ms ${key}`)
      }
    }
    if (inspector !== undefined && cpuProfile !== undefined) {
      const { profile } = (yield* Effect.promise(() => inspector.post("Profiler.stop"))) as { profile: unknown }
      Fs.writeFileSync(`${cpuProfile}.${size}.cpuprofile`, JSON.stringify(profile))
    }
    if (inspector !== undefined && heapProfile !== undefined) {
      const { profile } = (yield* Effect.promise(() => inspector.post("HeapProfiler.stopSampling"))) as { profile: unknown }
      Fs.writeFileSync(`${heapProfile}.${size}.heapprofile`, JSON.stringify(profile))
    }
    return { plain, owed, buildMs, switches }
  })
  const { plain, owed, buildMs, switches } = await Effect.runPromise(
    program.pipe(tracing ? Effect.withTracer(countingTracer) : Effect.withTracerEnabled(false), Effect.provide(h.layer))
  )
  // The GC observer's entries arrive asynchronously: let them in before reporting.
  await new Promise((resolve) => setTimeout(resolve, 50))
  console.log(`${dialect} ${size} items (built in ${(buildMs / 1000).toFixed(1)} s)`)
  console.log(`  ${report("nothing owed", plain)}`)
  if (owed.length > 0) console.log(`  ${report("after a switch", owed)}`)
  if (switches.length >= 20) {
    // A switch must not slow down as switches accumulate: the first and the last tenth of them side by side.
    const tenth = Math.max(1, Math.floor(switches.length / 10))
    console.log(`  switches: ${switches.length}, median of the first ${tenth} ${fmt(median(switches.slice(0, tenth)))} ms, of the last ${tenth} ${fmt(median(switches.slice(-tenth)))} ms`)
  }
  Fs.rmSync(dir, { recursive: true, force: true })
}
