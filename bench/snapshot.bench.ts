/**
 * Snapshot cost: the time of `ThreadQuery.snapshot` (what `GET /threads/{id}` answers, and what the dashboard's
 * header and thread list read on every burst of events) on a thread of `N` runs that each recorded a cost, on a real
 * SQLite file. A snapshot must not grow with the thread's length: it reads the recent runs, not every run.
 *
 * Environment: `N` runs (default 3,000), `SAMPLES` snapshots timed after the build (default 60).
 * Run: `npx tsx bench/snapshot.bench.ts` from the repository root; prints the median.
 */
import { ThreadQuery } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { Effect, Option } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { performance } from "node:perf_hooks"

const n = Number(process.env.N ?? 3_000)
const samples = Number(process.env.SAMPLES ?? 60)
const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-snapshot-"))
const h = Harness.make([{ name: "claude", window: 10_000_000, inject: true }], { db: Path.join(dir, "baton.sqlite") })

const program = Effect.gen(function*() {
  const o = yield* Harness.ops
  const threadId = yield* o.create("claude")
  for (let i = 0; i < n; i++) {
    h.script.enqueue(Harness.reply(5))
    const sent = yield* o.send(threadId, `step ${i}`)
    const run = Option.getOrThrow(yield* o.store.getRun(sent.runId))
    yield* o.store.recordRunCost({
      runId: run.id, threadId, providerInstance: "claude" as never, inputTokens: 1_000, cacheWriteTokens: 200,
      cacheReadTokens: 30_000, outputTokens: 400, costUsd: 0.0131, createdAt: run.createdAt
    })
  }
  const query = yield* ThreadQuery.ThreadQuery
  const ms: Array<number> = []
  for (let i = 0; i < samples; i++) {
    const t0 = performance.now()
    yield* query.snapshot(threadId)
    ms.push(performance.now() - t0)
  }
  ms.sort((a, b) => a - b)
  console.log(`${n} runs with costs: snapshot median ${ms[Math.floor(ms.length / 2)]!.toFixed(2)} ms, slowest ${ms.at(-1)!.toFixed(2)} ms (${samples} samples)`)
})

await Effect.runPromise(Effect.provide(program, h.layer))
Fs.rmSync(dir, { recursive: true, force: true })
