/**
 * The run driver's liveness under a storage that fails for a while (a property): sends and interrupts on two threads
 * while store calls fail at random (an error as a lost connection gives, or a defect), then the storage heals. Every
 * run a send was accepted for must then end (no run left `queued`, `starting` or `running` with the driver alive),
 * every caller waiting for one gets an answer, a run's prompt is recorded at most once (exactly once when it
 * completed), and the record's invariants hold.
 *
 * The faults a real database gives a server in the field (a restart, a failover, a full disk for a moment) were each
 * found once as a wedge of the driver (stop 42: a crashed turn, a lost race, a failing continuation; then a failed read
 * of the queue that stopped the thread's worker for good): this property is the search that finds such wedges.
 */
import { Commands, type CommandId, PersistenceError, type RunId, type ThreadId } from "@baton/contracts"
import { RunDriver } from "@baton/orchestration"
import { Harness, Prng } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Database, ThreadStore } from "@baton/persistence"
import { Cause, Context, Duration, Effect, Exit, FastCheck as fc, Layer, Option, Scope } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

let n = 0
const cid = () => `cmd_liveness_${++n}` as CommandId

type Slot = 0 | 1
type Op =
  | { readonly kind: "send"; readonly thread: Slot; readonly via: Slot }
  | { readonly kind: "interrupt"; readonly thread: Slot; readonly via: Slot }
  | { readonly kind: "pause"; readonly millis: number }
  | { readonly kind: "restart"; readonly via: Slot }
  | { readonly kind: "compact" | "offload" | "switch"; readonly thread: Slot; readonly via: Slot }

const slot = fc.constantFrom(0 as const, 1 as const)
const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant("send" as const), thread: slot, via: slot }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("interrupt" as const), thread: slot, via: slot }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("pause" as const), millis: fc.integer({ min: 1, max: 40 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("restart" as const), via: slot }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constantFrom("compact" as const, "offload" as const, "switch" as const), thread: slot, via: slot }) }
)

const terminal = new Set(["completed", "failed", "interrupted", "cancelled"])

/**
 * One case on a SQLite file shared by two drivers (two processes' incarnations; `restart` closes one, as SIGTERM
 * does, and starts another in its place): the outcome's violations (empty when the drivers stayed live and the record
 * whole).
 */
const runCase = (db: string, ops: ReadonlyArray<Op>, seed: number, failRate: number, healAfter: number) => {
  const h = Harness.make([{ name: "codex", window: 200_000, inject: true }, { name: "claude", window: 200_000, inject: false }])
  const random = Prng.make(seed).next
  const faults = { on: false, injected: 0 }
  const flaky = Harness.interceptStore((name, _args, call) => {
    if (!faults.on || random() >= failRate) return call()
    faults.injected++
    return random() < 0.75
      ? Effect.fail(new PersistenceError({ operation: name, detail: "connection terminated unexpectedly" }))
      : Effect.dieMessage(`storage failed in ${name}`)
  })
  let incarnation = 0
  /** An incarnation's driver and context; its start is tried again while the storage fails it (a supervisor's restart). */
  const start = (file: string) => Effect.gen(function*() {
    for (let tries = 1;; tries++) {
      const scope = yield* Scope.make()
      const layer = RunDriver.RunDriver.Default.pipe(
        Layer.provideMerge(Harness.makeLayer([h.providers.codex!, h.providers.claude!], h.counter, file, {}, `v${++incarnation}_`, undefined, flaky))
      )
      // A start has many statements (registration, recovery): past ten failed tries the storage heals for it.
      const faulty = faults.on
      if (tries > 10) faults.on = false
      const built = yield* Effect.exit(Layer.buildWithScope(layer, scope))
      faults.on = faulty
      if (Exit.isSuccess(built)) return { scope, context: built.value, driver: Context.get(built.value, RunDriver.RunDriver) }
      yield* Effect.exit(Scope.close(scope, Exit.void))
      if (tries > 11) return yield* Effect.dieMessage(`no incarnation started with the storage healed: ${Cause.pretty(built.cause)}`)
    }
  })
  return shared(db, (file) => Effect.gen(function*() {
    const drivers = [yield* start(file), yield* start(file)]
    const o = yield* Effect.provide(Harness.ops, drivers[0]!.context)
    const threads: Array<ThreadId> = [yield* o.create("codex"), yield* o.create("codex")]
    const accepted: Array<{ readonly runId: RunId; readonly threadId: ThreadId; readonly prompt: string }> = []
    /** Each thread's provider instance, as the switches that succeeded left it. */
    const active = ["codex", "codex"]
    faults.on = true
    for (const [i, step] of ops.entries()) {
      if (step.kind === "pause") {
        yield* Effect.sleep(Duration.millis(step.millis))
        continue
      }
      if (step.kind === "restart") {
        // A shutdown the storage fails (a defect injected in a finalizer) is still a shutdown: the incarnation is gone.
        yield* Effect.exit(Scope.close(drivers[step.via]!.scope, Exit.void))
        drivers[step.via] = yield* start(file)
        continue
      }
      const threadId = threads[step.thread]!
      const driver = drivers[step.via]!.driver
      if (step.kind === "compact" || step.kind === "offload" || step.kind === "switch") {
        // Beside the runs in flight: each either happens whole or fails (typed, or the injected defect).
        const via = yield* Effect.provide(Harness.ops, drivers[step.via]!.context)
        if (step.kind === "compact") yield* Effect.exit(via.compact(threadId))
        else if (step.kind === "offload") yield* Effect.exit(via.offload(threadId, 50))
        else {
          const to = active[step.thread] === "codex" ? "claude" : "codex"
          if (Exit.isSuccess(yield* Effect.exit(via.switchTo(threadId, to)))) active[step.thread] = to
        }
        continue
      }
      if (step.kind === "send") {
        const prompt = `prompt ${i} of case ${seed}`
        const sent = yield* Effect.exit(driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: prompt })))
        if (Exit.isSuccess(sent)) accepted.push({ runId: sent.value.runId as RunId, threadId, prompt })
        continue
      }
      const last = [...accepted].reverse().find((a) => a.threadId === threadId)
      yield* Effect.exit(driver.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, ...(last === undefined ? {} : { runId: last.runId }) })))
    }
    // The storage stays faulty a while after the last command, as the drivers run the queued turns in the background.
    yield* Effect.sleep(Duration.millis(healAfter))
    faults.on = false
    const violations: Array<string> = []
    const store = Context.get(drivers[0]!.context, ThreadStore)
    // Liveness: every accepted run ends within 30 s of the storage healing (the drivers' retry pauses are at most 5 s),
    // with both drivers still running: no restart is needed to end it.
    for (const a of accepted) {
      const ended = yield* drivers[0]!.driver.awaitRun(a.runId).pipe(Effect.exit, Effect.timeout("30 seconds"), Effect.option)
      const status = Option.map(yield* store.getRun(a.runId), (r) => r.status)
      if (Option.isNone(ended)) violations.push(`run ${a.runId} (${a.prompt}) did not end: ${Option.getOrElse(status, () => "gone")}`)
      else if (!Option.exists(status, (s) => terminal.has(s))) violations.push(`run ${a.runId} answered but is ${Option.getOrElse(status, () => "gone")}`)
    }
    // Nothing recorded twice; a completed run's prompt exactly once.
    for (const threadId of threads) {
      const prompts = (yield* store.listItems(threadId)).filter((i) => i.kind === "user_message").map((i) => i.text)
      for (const a of accepted.filter((x) => x.threadId === threadId)) {
        const times = prompts.filter((p) => p === a.prompt).length
        const run = yield* store.getRun(a.runId)
        if (times > 1) violations.push(`prompt "${a.prompt}" recorded ${times} times`)
        if (Option.exists(run, (r) => r.status === "completed") && times !== 1) violations.push(`completed run ${a.runId}'s prompt recorded ${times} times`)
      }
      // A turn the storage failed ends `failed` with a code that says so (the fault injected here), not a wedge.
      for (const v of yield* Effect.provide(o.check(threadId, h), drivers[0]!.context)) {
        if (!/^no-wedge: run \S+ failed \((turn_crashed|output_not_recorded|turn_start_failed)\)/.test(v)) violations.push(`${threadId}: ${v}`)
      }
    }
    for (const d of drivers) yield* Scope.close(d.scope, Exit.void)
    return { violations, injected: faults.injected, accepted: accepted.length }
  }).pipe(Effect.scoped))
}

/** `f` over a database two drivers share: a fresh SQLite file, or a fresh Postgres schema (dropped after). */
const shared = <A, E>(db: string, f: (file: string) => Effect.Effect<A, E>) =>
  db === Harness.postgres
    ? Effect.scoped(Effect.flatMap(Database.PgSchemaUrl, f).pipe(Effect.provide(Database.layerPgSchema())))
    : Effect.acquireUseRelease(
      Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-liveness-"))),
      (dir) => f(Path.join(dir, "baton.sqlite")),
      (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
    )

describe.each(Harness.dialects)("the run driver under a storage that fails for a while (%s)", (label, db) => {
  it("ends every accepted run once the storage heals, records each prompt at most once, and keeps the invariants", async () => {
    let cases = 0
    let injected = 0
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 3, maxLength: 12 }), fc.integer({ min: 1, max: 2 ** 31 - 1 }), fc.constantFrom(0.05, 0.15, 0.3), fc.integer({ min: 0, max: 400 }), async (ops, seed, failRate, healAfter) => {
        const outcome = await Effect.runPromise(runCase(db, ops, seed, failRate, healAfter))
        cases++
        injected += outcome.injected
        if (outcome.violations.length > 0) console.error(outcome.violations.join("\n"))
        expect(outcome.violations.join("\n"), JSON.stringify({ ops, seed, failRate, healAfter })).toBe("")
      }),
      // Postgres cases are slower (two pools per case, a schema each): fewer of them.
      { numRuns: Number(process.env["LIVENESS_RUNS"] ?? (label === "SQLite" ? 15 : 6)), endOnFailure: true }
    )
    // The search searched: faults were injected (a property that never failed a store call would pass vacuously).
    expect(cases).toBeGreaterThan(0)
    expect(injected).toBeGreaterThan(0)
  }, 600_000)
})
