/**
 * Issue 15's acceptance at full size: PROCESSES (default 2) OS processes x THREADS (20) threads x SENDS (50)
 * concurrent sends each, on one fresh Postgres schema (`Database.testPgUrl()`). Prints the figures (sends accepted
 * and refused, runs by status, native-thread replacements, times) and every violation; exits 1 on any violation.
 * `packages/orchestration/test/ConcurrentSends.test.ts` runs a smaller instance in the test suite.
 *
 *   npx tsx bench/concurrent-sends.ts        (from the repository root; THREADS=20 SENDS=50 PROCESSES=2)
 */
import { Database } from "@baton/persistence"
import { ConcurrentSends } from "@baton/testing"
import { Effect } from "effect"

const threads = Number(process.env.THREADS ?? 20)
const sendsPerThread = Number(process.env.SENDS ?? 50)
const processes = Number(process.env.PROCESSES ?? 2)

const main = Effect.gen(function*() {
  const url = yield* Database.PgSchemaUrl
  const threadIds = yield* Effect.scoped(Effect.provide(ConcurrentSends.createThreads(threads), ConcurrentSends.layer(url)))
  const started = Date.now()
  const summaries = yield* Effect.all(
    Array.from({ length: processes }, (_, i) => ConcurrentSends.spawnSender({ db: url, threadIds, sendsPerThread, label: `p${i + 1}` })),
    { concurrency: "unbounded" }
  )
  const wall = Date.now() - started
  const report = yield* Effect.provide(ConcurrentSends.verify(threadIds, summaries), ConcurrentSends.readLayer(url))
  console.log(`${processes} processes x ${threads} threads x ${sendsPerThread} concurrent sends on Postgres`)
  for (const s of summaries) {
    console.log(`  ${s.label}: ${s.outcomes.filter((o) => o.runId !== null).length} accepted in ${s.submitMillis} ms, its runs ended after ${s.totalMillis} ms`)
  }
  console.log(`  sends ${report.sends}, accepted ${report.accepted}, refused ${JSON.stringify(report.refused)}`)
  console.log(`  runs ${JSON.stringify(report.runs)}, failure codes ${JSON.stringify(report.failureCodes)}, native-thread replacements ${report.replacements}`)
  console.log(`  wall ${wall} ms for the senders (process start included), ${(report.accepted / (wall / 1000)).toFixed(1)} runs/s`)
  console.log(`  violations ${report.violations.length}`)
  for (const v of report.violations.slice(0, 50)) console.log(`    ${v}`)
  process.exitCode = report.violations.length === 0 ? 0 : 1
}).pipe(Effect.provide(Database.layerPgSchema()))

Effect.runPromise(main).catch((e: unknown) => {
  console.error(e)
  process.exitCode = 1
})
