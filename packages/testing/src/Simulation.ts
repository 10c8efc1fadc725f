/**
 * Simulation: a seeded, deterministic simulator of Baton. It drives the real orchestration services (real SQLite
 * file, real migrations, the real tokenizer, scripted providers) through random sequences of operations — send a
 * message, interrupt (before start, or while the run is processed), switch provider (between a 1,000,000-token
 * window, a small auto-compacting one and one without native injection, which plays a model API whose resume cannot
 * replay and whose response ids repeat), `/compact`, provider faults (refusal
 * before the prompt is read, turn start failing after a successful injection, lost injection acknowledgement),
 * scripted usage reports (missing, near full, impossible, stale), restarts with a provider instance reconfigured
 * (another model, window or threshold) — and crash-restarts at any durable step: the process
 * state is dropped between two writes or between a write and a provider call, and a fresh orchestrator resumes
 * from the database (`ThreadService.recover()`), after which the client may retry its command (every service is
 * built again; the SQLite connection is kept when the crash left it outside any transaction: see `Execute.ts`).
 *
 * After every operation and every restart it checks docs/design.md's invariants 1-3 and 5-7 (`InvariantChecks`) and
 * crash safety (invariant 4) — see `internal/Checks.ts`. A failing scenario is shrunk to a short operation list that
 * still fails the same way, printable and replayable as a regression test (`execute(scenario)`).
 *
 * Same seed, same run: every random choice is drawn from a mulberry32 stream when the scenario is generated; ids are
 * sequential per incarnation, time is a logical clock. `Outcome.digest` hashes the whole database and the
 * providers' logs.
 *
 * It does not own the invariants themselves (InvariantChecks does) nor the orchestrator's Layer graph (it mirrors
 * `OrchestratorLayer.layer` with a crash-injecting `ThreadStore`, and dies if the two drift apart).
 */
import { Effect } from "effect"
import { execute, type ExecuteOptions, type Outcome } from "./internal/Execute.js"
import { allFeatures, type Features, formatScenario, generate, type Operation, type Scenario } from "./internal/Scenario.js"

export { execute, type ExecuteOptions, type Outcome, type Stats } from "./internal/Execute.js"
export {
  allFeatures,
  type CrashSpec,
  type Features,
  formatOperation,
  formatScenario,
  generate,
  type Operation,
  type ProviderSetup,
  type Reconfiguration,
  type ReplySpec,
  type Scenario,
  type SummariserSetup,
  type UsageReport,
  verboseCall
} from "./internal/Scenario.js"

/** The category of a violation: the text before its first colon (`exactly-once`, `crash-safety`, ...). */
export const category = (violation: string) => violation.slice(0, Math.max(0, violation.indexOf(":")))

/**
 * The shape of a violation, with record ids, provider refs and numbers blanked: two violations with the same
 * signature are the same bug (`exactly-once: run X (seq N, ...) is recorded as seen by REF, which never ...`).
 */
export const signature = (violation: string) =>
  violation
    .replace(/\b[a-z]{3}_[A-Za-z0-9.]+/g, "X")
    .replace(/\b[a-z]+-n\d+\b/g, "REF")
    .replace(/\d+/g, "N")
    .slice(0, 80)

/**
 * Generates and executes the scenario of `seed`. It first yields to the event loop's I/O phase: a seed runs on
 * synchronous SQLite without ever waiting on I/O, so a host process (vitest's worker RPC) would otherwise get no
 * turn for the whole length of a soak. `options.dialect: "postgres"` runs it on a fresh Postgres schema.
 */
export const runSeed = (seed: number, steps: number, features: Features = allFeatures, options: ExecuteOptions = {}) =>
  Effect.zipRight(
    Effect.async<void>((resume) => void setImmediate(() => resume(Effect.void))),
    execute(generate(seed, steps, features), options)
  )

/** The single-step simplifications of an operation, most aggressive first. */
const simplifications = (op: Operation): ReadonlyArray<Operation> => {
  const out: Array<Operation> = []
  if ("crash" in op && op.crash !== null) {
    out.push({ ...op, crash: null } as Operation)
    if (op.crash.inRecoveryAt !== null) out.push({ ...op, crash: { ...op.crash, inRecoveryAt: null } } as Operation)
    if (op.crash.retry) out.push({ ...op, crash: { ...op.crash, retry: false } } as Operation)
  }
  switch (op.kind) {
    case "send":
      if (op.fault !== null) out.push({ ...op, fault: null })
      if (op.interruptAt !== null) out.push({ ...op, interruptAt: null })
      if (op.reply.tools.length > 0) out.push({ ...op, reply: { ...op.reply, tools: [] } })
      if (op.reply.reasoning) out.push({ ...op, reply: { ...op.reply, reasoning: false } })
      if (op.reply.same === true) out.push({ ...op, reply: { ...op.reply, same: false } })
      if (op.reply.usage.kind !== "counted") out.push({ ...op, reply: { ...op.reply, usage: { kind: "counted" } } })
      if (op.prompt > 20) out.push({ ...op, prompt: 20 }, { ...op, prompt: Math.floor(op.prompt / 2) })
      if (op.reply.tokens > 20) {
        out.push({ ...op, reply: { ...op.reply, tokens: 20 } }, { ...op, reply: { ...op.reply, tokens: Math.floor(op.reply.tokens / 2) } })
      }
      if (op.reply.tools.some((t) => t > 20)) out.push({ ...op, reply: { ...op.reply, tools: op.reply.tools.map(() => 20) } })
      break
    case "compact":
      if (op.fault !== null) out.push({ ...op, fault: null })
      break
    case "interrupt_in_tool_call":
      if (!op.answered) out.push({ ...op, answered: true })
      if (op.prompt > 20) out.push({ ...op, prompt: 20 })
      if (op.reply.tools.length > 1) out.push({ ...op, reply: { ...op.reply, tools: [op.reply.tools[0]!] } })
      break
    case "offload":
      if (op.summariserFails) out.push({ ...op, summariserFails: false })
      break
    case "fork":
      if (op.provider !== null) out.push({ ...op, provider: null })
      break
    case "merge":
      if (op.behindWait) out.push({ ...op, behindWait: false })
      break
    case "restart":
      if (op.reconfigure !== undefined) out.push({ kind: "restart", id: op.id })
      break
    case "interrupt_before_start":
      if (op.prompt > 20) out.push({ ...op, prompt: 20 }, { ...op, prompt: Math.floor(op.prompt / 2) })
      break
    case "queue_behind_wait":
      if (op.prompt > 20) out.push({ ...op, prompt: 20 })
      break
    case "race":
      if (op.prompt > 20) out.push({ ...op, prompt: 20 })
      if (op.reply.tools.length > 1) out.push({ ...op, reply: { ...op.reply, tools: [op.reply.tools[0]!] } })
      if (op.reply.usage.kind !== "counted") out.push({ ...op, reply: { ...op.reply, usage: { kind: "counted" } } })
      break
    default:
      break
  }
  return out
}

/**
 * Shrinks `scenario` while `fails` holds: deletes chunks of operations (halving the chunk size down to one), then
 * simplifies each remaining operation (drop its crash, fault, interrupt, tools, usage report; shrink its sizes),
 * and repeats until nothing changes or `maxRuns` candidates were tried. `ops[0]` (create) is kept. Returns the
 * smallest failing scenario found and the number of candidates tried.
 */
export const shrink = <R>(
  scenario: Scenario,
  fails: (candidate: Scenario) => Effect.Effect<boolean, never, R>,
  options: { readonly maxRuns?: number } = {}
) =>
  Effect.gen(function*() {
    const maxRuns = options.maxRuns ?? 300
    let best = scenario
    let runs = 0
    const attempt = (candidate: Scenario) =>
      Effect.suspend(() => {
        if (runs >= maxRuns) return Effect.succeed(false)
        runs++
        return fails(candidate)
      })
    let progress = true
    while (progress && runs < maxRuns) {
      progress = false
      for (let size = Math.max(1, Math.floor((best.ops.length - 1) / 2)); size >= 1; size = Math.floor(size / 2)) {
        for (let i = best.ops.length - size; i >= 1; i -= size) {
          const candidate = { ...best, ops: [...best.ops.slice(0, i), ...best.ops.slice(i + size)] }
          if (yield* attempt(candidate)) {
            best = candidate
            progress = true
          }
        }
      }
      for (let i = 0; i < best.ops.length; i++) {
        let changed = true
        while (changed) {
          changed = false
          for (const simpler of simplifications(best.ops[i]!)) {
            const candidate = { ...best, ops: best.ops.map((op, j) => (j === i ? simpler : op)) }
            if (yield* attempt(candidate)) {
              best = candidate
              progress = true
              changed = true
              break
            }
          }
        }
      }
    }
    return { scenario: best, runs }
  })

/**
 * Shrinks a failing outcome: the scenario is first cut after the failing operation, then shrunk while it still
 * produces a violation with the same `signature` as the first one (the same bug, not just the same invariant).
 */
export const shrinkFailure = (scenario: Scenario, outcome: Outcome, options: { readonly maxRuns?: number } = {}) =>
  Effect.gen(function*() {
    const wanted = signature(outcome.violations[0] ?? "")
    const cut = { ...scenario, ops: scenario.ops.slice(0, (outcome.failedAt ?? scenario.ops.length - 1) + 1) }
    const shrunk = yield* shrink(cut, (candidate) =>
      Effect.map(execute(candidate), (o) => o.violations.some((v) => signature(v) === wanted)), options)
    const final = yield* execute(shrunk.scenario)
    return { scenario: shrunk.scenario, outcome: final, runs: shrunk.runs }
  })

/** One failing seed of a soak. */
export interface Failure {
  readonly seed: number
  readonly outcome: Outcome
  /** The shrunk scenario and its outcome; `null` when shrinking was skipped. */
  readonly shrunk: { readonly scenario: Scenario; readonly outcome: Outcome; readonly runs: number } | null
}

export interface SoakOptions {
  readonly seedStart: number
  readonly seeds: number
  /**
   * The distance between consecutive seeds (default 1): seeds `seedStart, seedStart + seedStep, …`. `pnpm sim --jobs J`
   * gives job `j` the seeds `S + j, S + j + J, …`, so J jobs together run the seeds one process would.
   */
  readonly seedStep?: number
  readonly steps: number
  readonly features?: Features
  /** Shrink at most this many failing seeds (default 5; 0: none). */
  readonly shrinkLimit?: number
  /** Candidates tried per shrink (default 300). */
  readonly shrinkRuns?: number
  /** Called after each seed (progress output). */
  readonly onSeed?: (outcome: Outcome, index: number) => Effect.Effect<void>
  /** A deadline (epoch milliseconds): no seed starts after it (a soak by time; `seeds` is then an upper bound). */
  readonly until?: number
}

export interface SoakReport {
  readonly seedStart: number
  /** How many seeds ran: `seedStart, seedStart + seedStep, …` (`seedStep` 1 unless the options said otherwise). */
  readonly seeds: number
  readonly seedStep: number
  readonly steps: number
  readonly operations: number
  readonly crashes: number
  readonly crashPoints: ReadonlyArray<string>
  readonly failures: ReadonlyArray<Failure>
  /** Requests the providers rejected as over their window, and turns stopped at the window (their truth). */
  readonly overflowsRejected: number
  readonly outputStopped: number
  readonly elapsedMs: number
}

/**
 * Runs seeds `seedStart, seedStart + seedStep, …` (`seeds` of them, or until `until`), `steps` operations each;
 * shrinks the first failures.
 */
export const soak = (options: SoakOptions) =>
  Effect.gen(function*() {
    const started = performance.now()
    const crashPoints = new Set<string>()
    const failures: Array<Failure> = []
    let crashes = 0
    let operations = 0
    let overflowsRejected = 0
    let outputStopped = 0
    let ran = 0
    const shrinkLimit = options.shrinkLimit ?? 5
    const seedStep = options.seedStep ?? 1
    for (let i = 0; i < options.seeds && (options.until === undefined || Date.now() < options.until); i++) {
      ran++
      const seed = options.seedStart + i * seedStep
      const scenario = generate(seed, options.steps, options.features ?? allFeatures)
      // A soak reads no digest: no dump at the end of each seed.
      const outcome = yield* execute(scenario, { digest: false })
      crashes += outcome.crashes
      operations += outcome.executed
      overflowsRejected += outcome.stats.overflowsRejected
      outputStopped += outcome.stats.outputStopped
      for (const p of outcome.crashPoints) crashPoints.add(p)
      if (options.onSeed !== undefined) yield* options.onSeed(outcome, i)
      if (outcome.violations.length === 0) continue
      const shrunk = failures.length < shrinkLimit
        ? yield* shrinkFailure(scenario, outcome, options.shrinkRuns === undefined ? {} : { maxRuns: options.shrinkRuns })
        : null
      failures.push({ seed, outcome, shrunk })
    }
    return {
      seedStart: options.seedStart,
      seeds: ran,
      seedStep,
      steps: options.steps,
      operations,
      crashes,
      crashPoints: [...crashPoints].sort(),
      failures,
      overflowsRejected,
      outputStopped,
      elapsedMs: Math.round(performance.now() - started)
    } satisfies SoakReport
  })

/** The seeds a soak ran, as text: `S..E`, with `every K` when they were K apart. */
export const seedRange = (report: Pick<SoakReport, "seedStart" | "seeds" | "seedStep">) =>
  `${report.seedStart}..${report.seedStart + (report.seeds - 1) * report.seedStep}` + (report.seedStep === 1 ? "" : ` every ${report.seedStep}`)

/** A failure as text: the seed, its violations, the shrunk operation list and the scenario as JSON (a regression). */
export const formatFailure = (failure: Failure): ReadonlyArray<string> => {
  const lines = [`seed ${failure.seed}: ${failure.outcome.violations.length} violation(s) after operation ${failure.outcome.failedAt}`]
  for (const v of failure.outcome.violations) lines.push(`  ${v}`)
  if (failure.shrunk === null) {
    lines.push(`  (not shrunk; rerun with --seed-start ${failure.seed} --seeds 1)`)
    return lines
  }
  const s = failure.shrunk
  lines.push(`  shrunk from ${failure.outcome.executed} to ${s.scenario.ops.length} operations (${s.runs} candidates tried); it fails with:`)
  for (const v of s.outcome.violations) lines.push(`    ${v}`)
  lines.push("  operations:")
  for (const l of formatScenario(s.scenario)) lines.push(`    ${l}`)
  lines.push("  trace:")
  for (const l of s.outcome.trace) lines.push(`    ${l}`)
  lines.push(`  regression: ${JSON.stringify(s.scenario)}`)
  return lines
}
