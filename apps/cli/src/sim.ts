#!/usr/bin/env node
/**
 * `pnpm sim`: the deterministic simulation soak (see `@baton/testing` Simulation). Runs seeds `S .. S+N-1`, `M`
 * operations each, against the real orchestrator on SQLite with crash-restarts, and checks the invariants after every
 * step. Every failing seed is printed with its violations and, for the first few, the shrunk operation list and the
 * scenario as JSON (paste it into a regression test, or rerun it with `--scenario FILE`). The last line is a one-line
 * summary; the exit code is 1 on any violation, 2 on bad arguments, 130/143 when stopped by SIGINT/SIGTERM. Log lines
 * go to stderr (see CliRuntime).
 *
 * `--soak MINUTES` runs seeds from S until the time is up (a progress line on stderr every 10 s) and appends its
 * figures as one JSON line to `bench/soak-log.jsonl` (commit, date, seeds, operations, crash points covered,
 * violations, operations/s; `BATON_SOAK_LOG=FILE` writes them elsewhere).
 *
 * `--jobs J` (default 1) runs the seeds in J child processes at once, one per core: job `j` takes the seeds
 * `S + j, S + j + J, …`, so J jobs run the seeds one process would (`--seeds N`: the same N seeds; `--soak`: as many
 * as the time allows). Each seed's run is the same as in one process (a seed alone decides it); the summary adds the
 * jobs' figures up (crash points: the union), its operations/s is every job's operations over the longest job's
 * time, and the soak log gets one line with `jobs`. A job's stderr is relayed with `[job j]` before each line.
 *
 *   pnpm sim [--seeds N] [--steps M] [--seed-start S] [--soak MINUTES] [--jobs J] [--json]
 *            [--without crashes,retries,interrupts,faults,usage,stale,offload,forks,truth,races,queues,api,merges,reconfigure]
 *            [--shrink-limit K] [--no-shrink] [--trace] [--scenario FILE]
 */
import { Simulation } from "@baton/testing"
import { Cause, Data, Effect } from "effect"
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import * as Fs from "node:fs"
import { fileURLToPath } from "node:url"
import * as CliRuntime from "./CliRuntime.js"
import * as Format from "./Format.js"

interface Args {
  readonly seeds: number
  readonly steps: number
  readonly seedStart: number
  readonly json: boolean
  readonly without: ReadonlyArray<string>
  readonly shrinkLimit: number
  readonly trace: boolean
  readonly scenario: string | null
  /** `--soak`: minutes to run seeds for; `null` = run `seeds` seeds. */
  readonly soakMinutes: number | null
  /** `--jobs`: child processes that run the seeds together (1: this process runs them). */
  readonly jobs: number
  /** `--seed-step` (a job's, set by the parent): the distance between its seeds. */
  readonly seedStep: number
  /** `--job-report` (a job's, set by the parent): end with a `sim-job-report` line for the parent, no summary or log. */
  readonly jobReport: boolean
}

const featureNames: Record<string, keyof Simulation.Features> = {
  crashes: "crashes",
  retries: "retries",
  interrupts: "interrupts",
  faults: "faults",
  usage: "usageReports",
  stale: "staleUsage",
  offload: "offloads",
  forks: "forks",
  truth: "truth",
  races: "races",
  queues: "queues",
  api: "modelApi",
  merges: "mergesBehind",
  reconfigure: "reconfigures"
}

const usage = "usage: pnpm sim [--seeds N] [--steps M] [--seed-start S] [--soak MINUTES] [--jobs J] [--json] [--without " +
  `${Object.keys(featureNames).join(",")}] [--shrink-limit K] [--no-shrink] [--trace] [--scenario FILE]`

/** The integer flags: the field each sets and its least value. */
const integerFlags = new Map<string, readonly ["seeds" | "steps" | "seedStart" | "shrinkLimit" | "jobs" | "seedStep", number]>([
  ["--seeds", ["seeds", 1]],
  ["--jobs", ["jobs", 1]],
  ["--seed-step", ["seedStep", 1]],
  ["--steps", ["steps", 1]],
  ["--seed-start", ["seedStart", 0]],
  ["--shrink-limit", ["shrinkLimit", 0]]
])

const parse = (argv: ReadonlyArray<string>): Args | string => {
  const out = {
    seeds: 100,
    steps: 60,
    seedStart: 1,
    json: false,
    without: [] as Array<string>,
    shrinkLimit: 5,
    trace: false,
    scenario: null as string | null,
    soakMinutes: null as number | null,
    jobs: 1,
    seedStep: 1,
    jobReport: false
  }
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!
    const value = () => argv[++i]
    const integer = integerFlags.get(flag)
    if (integer !== undefined) {
      const [field, min] = integer
      const raw = value()
      const n = Number(raw)
      if (raw === undefined || !Number.isInteger(n) || n < min) return `${flag} needs an integer >= ${min}, got ${raw ?? "nothing"}`
      out[field] = n
      continue
    }
    switch (flag) {
      case "--no-shrink": out.shrinkLimit = 0; break
      case "--json": out.json = true; break
      case "--job-report": out.jobReport = true; break
      case "--trace": out.trace = true; break
      case "--soak": {
        const raw = value()
        const minutes = Number(raw)
        if (raw === undefined || !Number.isFinite(minutes) || minutes <= 0) return `--soak needs a number of minutes > 0, got ${raw ?? "nothing"}`
        out.soakMinutes = minutes
        break
      }
      case "--scenario": {
        const file = value()
        if (file === undefined) return "--scenario needs a file"
        out.scenario = file
        break
      }
      case "--without": {
        const names = (value() ?? "").split(",").filter((s) => s.length > 0)
        const unknown = names.filter((n) => !(n in featureNames))
        if (unknown.length > 0 || names.length === 0) return `--without takes ${Object.keys(featureNames).join(",")}; got ${names.join(",") || "nothing"}`
        out.without.push(...names)
        break
      }
      case "--help":
      case "-h":
        return usage
      default:
        return `unknown argument ${flag}\n${usage}`
    }
  }
  return out
}

/** Where `--soak` appends its figures: `bench/soak-log.jsonl` in the repository (`BATON_SOAK_LOG` overrides it). */
const soakLog = process.env["BATON_SOAK_LOG"] ?? fileURLToPath(new URL("../../../bench/soak-log.jsonl", import.meta.url))

/** The commit the soak ran on (`git rev-parse HEAD`, with `+dirty` for uncommitted changes), or `null` outside git. */
const commit = () => {
  try {
    const head = execFileSync("git", ["rev-parse", "HEAD"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim()
    const dirty = execFileSync("git", ["status", "--porcelain", "--untracked-files=no"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim()
    return dirty.length > 0 ? `${head}+dirty` : head
  } catch {
    return null
  }
}

/**
 * A soak's figures as JSON (`--json`, a job's report to its parent, the soak log): counts, the distinct crash points,
 * and each failing seed's violations, shrunk scenario and printed form (`lines`).
 */
interface Figures {
  /** The seeds that ran, as text (`S..E`, `every K` when K apart; the jobs' ranges joined by `; `). */
  readonly seedsText: string
  readonly seedStart: number
  readonly seeds: number
  readonly steps: number
  readonly operations: number
  readonly crashRestarts: number
  readonly crashPoints: ReadonlyArray<string>
  readonly overflowsRejected: number
  readonly outputStopped: number
  readonly failures: ReadonlyArray<{
    readonly seed: number
    readonly violations: ReadonlyArray<string>
    readonly shrunk: { readonly violations: ReadonlyArray<string>; readonly scenario: Simulation.Scenario } | null
    readonly lines: ReadonlyArray<string>
  }>
  /** The soak's own time, start-up excluded (jobs: the longest job's). */
  readonly elapsedMs: number
}

const figuresOf = (report: Simulation.SoakReport): Figures => ({
  seedsText: report.seeds === 0 ? "none" : Simulation.seedRange(report),
  seedStart: report.seedStart,
  seeds: report.seeds,
  steps: report.steps,
  operations: report.operations,
  crashRestarts: report.crashes,
  crashPoints: report.crashPoints,
  overflowsRejected: report.overflowsRejected,
  outputStopped: report.outputStopped,
  failures: report.failures.map((f) => ({
    seed: f.seed,
    violations: f.outcome.violations,
    shrunk: f.shrunk === null ? null : { violations: f.shrunk.outcome.violations, scenario: f.shrunk.scenario },
    lines: Simulation.formatFailure(f)
  })),
  elapsedMs: report.elapsedMs
})

/** Operations per second, to one decimal, of the soak's own time. */
const rateOf = (f: Figures) => f.elapsedMs === 0 ? 0 : Math.round((f.operations / f.elapsedMs) * 10_000) / 10

/** The jobs' figures added up: counts summed, crash points united, failures in seed order, the longest job's time. */
const combine = (jobs: ReadonlyArray<Figures>, steps: number, seedStart: number): Figures => ({
  seedsText: jobs.filter((j) => j.seeds > 0).map((j) => j.seedsText).join("; ") || "none",
  seedStart,
  seeds: jobs.reduce((n, j) => n + j.seeds, 0),
  steps,
  operations: jobs.reduce((n, j) => n + j.operations, 0),
  crashRestarts: jobs.reduce((n, j) => n + j.crashRestarts, 0),
  crashPoints: [...new Set(jobs.flatMap((j) => j.crashPoints))].sort(),
  overflowsRejected: jobs.reduce((n, j) => n + j.overflowsRejected, 0),
  outputStopped: jobs.reduce((n, j) => n + j.outputStopped, 0),
  failures: jobs.flatMap((j) => j.failures).sort((a, b) => a.seed - b.seed),
  elapsedMs: Math.max(0, ...jobs.map((j) => j.elapsedMs))
})

/**
 * The one-line summary: `sim: seeds S..E, N×M steps, C crash-restarts at K distinct crash points, …, V violations, T ms
 * (R operations/s)`, with the number of jobs when there were several.
 */
const summaryOf = (f: Figures, jobs: number) =>
  `sim: seeds ${f.seedsText}, ${f.seeds}×${f.steps} steps, ` +
  `${f.crashRestarts} crash-restarts at ${f.crashPoints.length} distinct crash points, ` +
  `${f.overflowsRejected} overflows rejected and ${f.outputStopped} turns stopped by the providers' windows, ` +
  `${f.failures.length} violations, ${f.elapsedMs} ms (${rateOf(f)} operations/s${jobs > 1 ? `, ${jobs} jobs` : ""})`

/** Appends one soak's figures to the soak log (one JSON object per line). */
const appendSoakLog = (f: Figures, args: Args) => {
  const line = {
    date: new Date().toISOString(),
    commit: commit(),
    command: `pnpm sim --soak ${args.soakMinutes} --seed-start ${args.seedStart} --steps ${args.steps}` +
      (args.jobs > 1 ? ` --jobs ${args.jobs}` : "") +
      (args.without.length > 0 ? ` --without ${args.without.join(",")}` : ""),
    jobs: args.jobs,
    seeds: f.seeds === 0 ? null : f.seedsText,
    seedCount: f.seeds,
    steps: f.steps,
    operations: f.operations,
    crashRestarts: f.crashRestarts,
    distinctCrashPoints: f.crashPoints.length,
    overflowsRejected: f.overflowsRejected,
    outputStopped: f.outputStopped,
    violations: f.failures.length,
    failingSeeds: f.failures.map((x) => x.seed),
    elapsedMs: f.elapsedMs,
    operationsPerSecond: rateOf(f)
  }
  Fs.appendFileSync(soakLog, `${JSON.stringify(line)}\n`)
  process.stderr.write(`soak: figures appended to ${soakLog}\n`)
}

/** What a job's last stdout line starts with: its figures as JSON follow. */
const jobReportMark = "sim-job-report "

/** What a job's stdout line after each seed starts with: its `Progress` so far as JSON follows. */
const jobProgressMark = "sim-job-progress "

/**
 * What the seeds finished so far add up to: what `--json` prints (`Format.interruptedDocument`) when a signal stops
 * the run before its figures are complete (a seed cut short is not counted).
 */
interface Progress {
  readonly seeds: number
  readonly operations: number
  readonly crashRestarts: number
  readonly violations: number
  readonly failingSeeds: ReadonlyArray<number>
}

const noProgress: Progress = { seeds: 0, operations: 0, crashRestarts: 0, violations: 0, failingSeeds: [] }

/** `progress` after one more seed (`outcome`). */
const afterSeed = (progress: Progress, outcome: Simulation.Outcome): Progress => ({
  seeds: progress.seeds + 1,
  operations: progress.operations + outcome.executed,
  crashRestarts: progress.crashRestarts + outcome.crashes,
  violations: progress.violations + (outcome.violations.length > 0 ? 1 : 0),
  failingSeeds: outcome.violations.length > 0 ? [...progress.failingSeeds, outcome.seed] : progress.failingSeeds
})

/** The jobs' progress added up (failing seeds in order). */
const addProgress = (all: ReadonlyArray<Progress>): Progress => ({
  seeds: all.reduce((n, p) => n + p.seeds, 0),
  operations: all.reduce((n, p) => n + p.operations, 0),
  crashRestarts: all.reduce((n, p) => n + p.crashRestarts, 0),
  violations: all.reduce((n, p) => n + p.violations, 0),
  failingSeeds: all.flatMap((p) => p.failingSeeds).sort((a, b) => a - b)
})

/**
 * The run's progress so far, for the interrupted document: this process's seeds, or each job's latest
 * `sim-job-progress` line. Set as seeds finish.
 */
const progressSoFar: { own: Progress; jobs: Array<Progress> } = { own: noProgress, jobs: [] }

/** The arguments job `j` of `args.jobs` runs with: its seeds `S + j, S + j + J, …`, the rest as given. */
const jobArgs = (args: Args, j: number): ReadonlyArray<string> | null => {
  const own = args.soakMinutes === null ? Math.ceil((args.seeds - j) / args.jobs) : null
  if (own !== null && own <= 0) return null
  return [
    "--seed-start", String(args.seedStart + j), "--seed-step", String(args.jobs), "--steps", String(args.steps),
    "--shrink-limit", String(args.shrinkLimit), "--job-report",
    ...(args.soakMinutes === null ? ["--seeds", String(own)] : ["--soak", String(args.soakMinutes)]),
    ...(args.without.length > 0 ? ["--without", args.without.join(",")] : []),
    ...(args.trace ? ["--trace"] : [])
  ]
}

/** A job ended without its report (it crashed): its exit code or signal and its last stderr lines say why. */
class JobFailed extends Data.TaggedError("JobFailed")<{ readonly message: string }> {}

/**
 * Runs one job: this script again in a child process (the same Node flags, so the same loader), its stderr relayed
 * line by line with `[job j]` before it; yields its figures from its `sim-job-report` line. Fails when the job
 * ended without one (it crashed; its exit code and last stderr lines say why). The child is killed (SIGTERM) when
 * this is interrupted (the parent was stopped).
 */
const runJob = (args: ReadonlyArray<string>, j: number, onProgress: (progress: Progress) => void) =>
  Effect.async<Figures, JobFailed>((resume) => {
    const child: ChildProcess = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), ...args], {
      stdio: ["ignore", "pipe", "pipe"]
    })
    let out = ""
    let err = ""
    let errTail: Array<string> = []
    let outLine = ""
    child.stdout!.setEncoding("utf8").on("data", (s: string) => {
      out += s
      const lines = (outLine + s).split("\n")
      outLine = lines.pop()!
      for (const line of lines) if (line.startsWith(jobProgressMark)) onProgress(JSON.parse(line.slice(jobProgressMark.length)) as Progress)
    })
    child.stderr!.setEncoding("utf8").on("data", (s: string) => {
      err += s
      const lines = err.split("\n")
      err = lines.pop()!
      for (const line of lines) process.stderr.write(`[job ${j}] ${line}\n`)
      errTail = [...errTail, ...lines].slice(-5)
    })
    child.on("close", (code, signal) => {
      if (err.length > 0) process.stderr.write(`[job ${j}] ${err}\n`)
      const line = out.split("\n").find((l) => l.startsWith(jobReportMark))
      if (line === undefined) {
        resume(Effect.fail(new JobFailed({ message: `job ${j} ended (${signal ?? `exit ${code}`}) without its report: ${errTail.join(" | ")}` })))
        return
      }
      resume(Effect.succeed(JSON.parse(line.slice(jobReportMark.length)) as Figures))
    })
    return Effect.sync(() => {
      child.kill("SIGTERM")
    })
  })

/** Prints the figures (the failures, then the summary line; or one JSON document) and sets the exit code. */
const report = (f: Figures, args: Args) => {
  if (args.json) {
    console.log(JSON.stringify({
      seedStart: f.seedStart,
      seeds: f.seeds,
      seedsRun: f.seedsText,
      steps: f.steps,
      jobs: args.jobs,
      operations: f.operations,
      crashRestarts: f.crashRestarts,
      distinctCrashPoints: f.crashPoints.length,
      overflowsRejected: f.overflowsRejected,
      outputStopped: f.outputStopped,
      violations: f.failures.length,
      operationsPerSecond: rateOf(f),
      failures: f.failures.map(({ seed, shrunk, violations }) => ({ seed, violations, shrunk })),
      elapsedMs: f.elapsedMs
    }))
  } else {
    for (const failure of f.failures) for (const line of failure.lines) console.log(line)
    console.log(summaryOf(f, args.jobs))
  }
  if (args.soakMinutes !== null) appendSoakLog(f, args)
  if (f.failures.length > 0) process.exitCode = 1
}

/**
 * The scenario of `--scenario FILE` (the `regression:` JSON a failing seed prints), or the one line saying why it
 * cannot be run: a missing file, a directory, an empty file, text that is not JSON, or JSON that is not a scenario
 * (an object with a numeric `seed`, a `providers` array and an `ops` array whose first operation is `create`; the
 * operations themselves are the simulator's own output and are not checked further). Found by a newcomer's walk
 * (b45ux): each of these printed a stack trace (`sim: Error: ENOENT …`, `TypeError: Cannot read properties of
 * undefined`) and exited 1, the code of a violation.
 */
const readScenario = (file: string): Simulation.Scenario | string => {
  const at = `--scenario ${file}`
  let text: string
  try {
    if (Fs.statSync(file).isDirectory()) return `${at}: is a directory; give the scenario's JSON file`
    text = Fs.readFileSync(file, "utf8")
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code
    return code === "ENOENT" ? `${at}: file not found` : `${at}: cannot read it (${e instanceof Error ? e.message : String(e)})`
  }
  if (text.trim().length === 0) return `${at}: empty file; give the scenario JSON a failing seed prints after "regression:"`
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch (e) {
    return `${at}: not JSON (${e instanceof Error ? e.message : String(e)})`
  }
  const o = json as { readonly seed?: unknown; readonly providers?: unknown; readonly ops?: unknown } | null
  const first = typeof o === "object" && o !== null && Array.isArray(o.ops) ? (o.ops[0] as { readonly kind?: unknown } | undefined) : undefined
  if (
    typeof o !== "object" || o === null || Array.isArray(o) || typeof o.seed !== "number" || !Array.isArray(o.providers) ||
    typeof first !== "object" || first === null || first.kind !== "create"
  ) {
    return `${at}: not a scenario: expected {"seed","providers":[…],"ops":[{"kind":"create",…},…]}, the JSON a failing seed prints after "regression:"`
  }
  return json as Simulation.Scenario
}

const main = Effect.gen(function*() {
  const args = parse(process.argv.slice(2))
  if (typeof args === "string") {
    console.error(`sim: ${args}`)
    // `--json` prints exactly one JSON document on stdout, a command line that does not parse included.
    if (process.argv.slice(2).includes("--json")) console.log(Format.errorDocument("usage", args.split("\n")[0]!))
    process.exitCode = 2
    return
  }

  if (args.scenario !== null) {
    const scenario = readScenario(args.scenario)
    if (typeof scenario === "string") {
      console.error(`sim: ${scenario}`)
      if (args.json) console.log(Format.errorDocument("bad_input", scenario))
      process.exitCode = 2
      return
    }
    const outcome = yield* Simulation.execute(scenario)
    for (const line of Simulation.formatScenario(scenario)) console.log(line)
    for (const line of outcome.trace) console.log(line)
    for (const v of outcome.violations) console.log(`violation: ${v}`)
    console.log(`sim: scenario ${args.scenario}, ${outcome.executed} operations, ${outcome.crashes} crash-restarts, ` +
      `${outcome.violations.length} violations, digest ${outcome.digest.slice(0, 16)}`)
    if (outcome.violations.length > 0) process.exitCode = 1
    return
  }

  if (args.jobs > 1) {
    const jobs = Array.from({ length: args.jobs }, (_, j) => jobArgs(args, j))
      .flatMap((a, j) => a === null ? [] : [runJob(a, j, (p) => void (progressSoFar.jobs[j] = p))])
    const figures = yield* Effect.all(jobs, { concurrency: "unbounded" })
    report(combine(figures, args.steps, args.seedStart), args)
    return
  }

  const features = { ...Simulation.allFeatures }
  for (const name of args.without) features[featureNames[name]!] = false
  // Per-seed lines on a terminal's stderr, `--json` or not (stdout stays the one document). Found by a newcomer's
  // walk (b46ux): `pnpm sim --json` showed nothing on a terminal while its seeds ran.
  const tty = process.stderr.isTTY === true && !args.jobReport
  const started = Date.now()
  const until = args.soakMinutes === null ? undefined : started + args.soakMinutes * 60_000
  let lastProgress = started
  let operations = 0
  let violations = 0
  const soaked = yield* Simulation.soak({
    seedStart: args.seedStart,
    seedStep: args.seedStep,
    seeds: until === undefined ? args.seeds : Number.MAX_SAFE_INTEGER,
    steps: args.steps,
    features,
    shrinkLimit: args.shrinkLimit,
    ...(until === undefined ? {} : { until }),
    onSeed: (outcome, index) =>
      Effect.sync(() => {
        const done = index + 1
        progressSoFar.own = afterSeed(progressSoFar.own, outcome)
        if (args.jobReport) console.log(jobProgressMark + JSON.stringify(progressSoFar.own))
        operations += outcome.executed
        if (outcome.violations.length > 0) violations++
        if (until !== undefined) {
          const now = Date.now()
          if (now - lastProgress >= 10_000) {
            lastProgress = now
            const rate = Math.round((operations / (now - started)) * 10_000) / 10
            const left = Math.max(0, until - now)
            const leftText = left >= 120_000 ? `${Math.ceil(left / 60_000)} min` : `${Math.ceil(left / 1000)} s`
            process.stderr.write(`soak: ${leftText} left, seeds ${args.seedStart}..${outcome.seed}, ` +
              `${operations} operations, ${rate} operations/s, ${violations} violations\n`)
          }
        } else if (tty) {
          process.stderr.write(`seed ${outcome.seed}: ${outcome.executed} operations, ${outcome.crashes} crashes, ` +
            `${outcome.violations.length === 0 ? "ok" : `VIOLATION ${outcome.violations[0]!.slice(0, 100)}`}\n`)
        } else if (done % 100 === 0 && !args.json) {
          process.stderr.write(`sim: ${done}/${args.seeds} seeds\n`)
        }
        if (args.trace) for (const line of outcome.trace) process.stderr.write(`  ${line}\n`)
      })
  })

  if (args.jobReport) {
    console.log(jobReportMark + JSON.stringify(figuresOf(soaked)))
    if (soaked.failures.length > 0) process.exitCode = 1
    return
  }
  report(figuresOf(soaked), args)
})

/**
 * When a signal stopped the run: `sim: stopped by SIGINT after N of M seeds` on stderr and, under `--json`, the one
 * interrupted document (`Format.interruptedDocument`) with the seeds finished so far (a job prints none: its parent
 * reads its progress lines). Found at an earlier stop: `pnpm sim --json` stopped by Ctrl-C printed nothing.
 */
const stopped = Effect.gen(function*() {
  const signal = yield* CliRuntime.receivedSignal
  const args = parse(process.argv.slice(2))
  if (typeof args === "string" || args.jobReport || args.scenario !== null) return
  const progress = args.jobs > 1 ? addProgress(progressSoFar.jobs.filter((p) => p !== undefined)) : progressSoFar.own
  const by = signal._tag === "Some" ? signal.value : "an interrupt"
  const message = `stopped by ${by} after ${progress.seeds}${args.soakMinutes === null ? ` of ${args.seeds}` : ""} seeds`
  process.stderr.write(`sim: ${message}\n`)
  if (args.json && signal._tag === "Some") console.log(Format.interruptedDocument(signal.value, message, progress))
})

main.pipe(
  Effect.onInterrupt(() => stopped),
  Effect.catchAllCause((cause) =>
    Effect.sync(() => {
      console.error(`sim: ${Cause.pretty(cause)}`)
      process.exitCode = 1
    })),
  CliRuntime.runMain
)
