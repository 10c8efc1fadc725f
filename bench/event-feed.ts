/**
 * Event feed delivery: how long an event takes from its commit to each of many live subscribers, and how many reads
 * of the log the feed makes for them (one shared reader per process, not one per subscriber).
 *
 * One orchestrator "process" (a Harness Layer on a real SQLite file or a fresh schema on the real Postgres) holds
 * `SUBSCRIBERS` live subscribers, half on one thread's feed (`EventFeed.thread`) and half on the feed of all threads
 * (`EventFeed.all`). A writer appends `EVENTS` events, one per unit of work, one every `PACE_MS` milliseconds, to that
 * thread — in the same process, or with `BENCH_CROSS=1` in a second process on the same database (its own pool and
 * bus: the event arrives by NOTIFY on Postgres, by the 250 ms poll on SQLite). Latency = the time a subscriber gets
 * the event minus the time the writer's unit of work returned (after its commit; 0 when the subscriber got it
 * first), over every (subscriber, event) pair. Reads = `SELECT`s of `thread_events` the feed ran while the events were written (counted by a tracer on
 * `@effect/sql`'s `sql.execute` spans).
 *
 * Environment: `BENCH_DIALECT` (`sqlite`, the default, or `postgres`), `SUBSCRIBERS` (100), `EVENTS` (300),
 * `PACE_MS` (5), `BENCH_CROSS` (unset).
 *
 * Run: `npx tsx bench/event-feed.ts` from the repository root.
 */
import type { RunId, ThreadEvent } from "@baton/contracts"
import { Commands, type CommandId } from "@baton/contracts"
import { ThreadService } from "@baton/orchestration"
import { EventFeed, ThreadStore, UnitOfWork } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { Context, Duration, Effect, Fiber, Layer, Option, Stream, Tracer } from "effect"
import { performance } from "node:perf_hooks"

const dialect = process.env.BENCH_DIALECT === "postgres" ? "postgres" : "sqlite"
const subscribers = Number(process.env.SUBSCRIBERS ?? 100)
const events = Number(process.env.EVENTS ?? 300)
const paceMs = Number(process.env.PACE_MS ?? 5)
const cross = process.env.BENCH_CROSS === "1"
if (dialect === "postgres") Harness.useDb(Harness.postgres)

let feedReads = 0
let spanIds = 0
/** Counts the `SELECT`s of `thread_events` (the feed's reads); its spans export nowhere. */
const countingTracer = Tracer.make({
  span: (name, parent, context, links, startTime, kind) => {
    const attributes = new Map<string, unknown>()
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
        const text = String(attributes.get("db.query.text") ?? "")
        if (name === "sql.execute" && /^\s*SELECT/i.test(text) && text.includes("thread_events")) feedReads++
      },
      attribute: (key, value) => void attributes.set(key, value),
      event: () => {},
      addLinks: () => {}
    }
    return span
  },
  context: (f) => f()
})

const quantile = (sorted: ReadonlyArray<number>, q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN

const program = Harness.withDbFile((db) =>
  Effect.gen(function*() {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    const build = (ns: string) => Layer.build(Harness.makeLayer(Object.values(h.providers), h.counter, db, {}, ns))
    const here = yield* build("a")
    const there = cross ? yield* build("b") : here
    const feed = Context.get(here, EventFeed.EventFeed)
    const service = Context.get(there, ThreadService.ThreadService)
    const store = Context.get(there, ThreadStore)
    const uow = Context.get(there, UnitOfWork)
    const threadId = yield* service.createThread(
      Commands.CreateThread.make({ commandId: "cmd_bench" as CommandId, title: "bench", providerInstance: h.providers.codex!.instance })
    )
    const last = (yield* store.listEvents(threadId)).at(-1)!
    const committedAt = new Map<string, number>()
    const received: Array<readonly [string, number]> = []
    const receive = (e: ThreadEvent) => Effect.sync(() => received.push([e.eventId, performance.now()]))
    const fibers = yield* Effect.forEach(Array.from({ length: subscribers }, (_, i) => i), (i) =>
      Effect.flatMap(
        i % 2 === 0 ? feed.thread(threadId, { afterSeq: last.seq }) : feed.all({ afterGlobalSeq: last.globalSeq }),
        (stream) => Effect.fork(Stream.runForEach(Stream.take(stream, events), receive))
      ))
    yield* Effect.sleep(Duration.millis(500))
    const readsBefore = feedReads
    const started = performance.now()
    for (let i = 0; i < events; i++) {
      const [event] = yield* uow.thread(threadId, "bench.append")(
        Effect.all([store.appendEvent({ threadId, type: "run.completed", payload: { runId: "run_bench" as RunId, itemCount: i } })])
      )
      committedAt.set(event.eventId, performance.now())
      yield* Effect.sleep(Duration.millis(paceMs))
    }
    const timeout = yield* Effect.timeoutOption(Effect.forEach(fibers, Fiber.join), Duration.seconds(120))
    const wall = performance.now() - started
    const reads = feedReads - readsBefore
    // A subscriber can get an event before the writer's fiber resumes after its commit: that latency counts as 0.
    const sorted = received.map(([id, at]) => Math.max(0, at - (committedAt.get(id) ?? at))).sort((a, b) => a - b)
    return { timeout, sorted, reads, wall }
  }).pipe(Effect.scoped))

Effect.runPromise(program.pipe(Effect.withTracer(countingTracer))).then(({ reads, sorted, timeout, wall }) => {
  const fmt = (x: number) => x.toFixed(2)
  console.log(
    `${dialect}${cross ? " (writer in a second process)" : ""}: ${subscribers} subscribers x ${events} events, one every ${paceMs} ms; ` +
      `${sorted.length} deliveries in ${(wall / 1000).toFixed(1)} s${Option.isNone(timeout) ? " (TIMED OUT)" : ""}`
  )
  console.log(
    `  commit -> subscriber latency ms: p50 ${fmt(quantile(sorted, 0.5))}  p90 ${fmt(quantile(sorted, 0.9))}  ` +
      `p99 ${fmt(quantile(sorted, 0.99))}  max ${fmt(sorted.at(-1) ?? NaN)}`
  )
  console.log(`  feed reads of thread_events: ${reads} (${(reads / events).toFixed(2)} per event)`)
}, (e) => {
  console.error(e)
  process.exit(1)
})
