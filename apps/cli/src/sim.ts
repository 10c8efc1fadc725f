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
 * violations, operations/s).
 *
 *   pnpm sim [--seeds N] [--steps M] [--seed-start S] [--soak MINUTES] [--json]
 *            [--without crashes,retries,interrupts,faults,usage,offload,forks,truth,races]
 *            [--shrink-limit K] [--no-shrink] [--trace] [--scenario FILE]
 */
import { Simulation } from "@baton/testing"
import { Cause, Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import { fileURLToPath } from "node:url"
import * as CliRuntime from "./CliRuntime.js"

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
}

const featureNames: Record<string, keyof Simulation.Features> = {
  crashes: "crashes",
  retries: "retries",
  interrupts: "interrupts",
  faults: "faults",
  usage: "usageReports",
  offload: "offloads",
  forks: "forks",
  truth: "truth",
  races: "races"
}

const usage = "usage: pnpm sim [--seeds N] [--steps M] [--seed-start S] [--soak MINUTES] [--json] [--without " +
  `${Object.keys(featureNames).join(",")}] [--shrink-limit K] [--no-shrink] [--trace] [--scenario FILE]`

/** The integer flags: the field each sets and its least value. */
const integerFlags = new Map<string, readonly ["seeds" | "steps" | "seedStart" | "shrinkLimit", number]>([
  ["--seeds", ["seeds", 1]],
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
    soakMinutes: null as number | null
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

/** Where `--soak` appends its figures: `bench/soak-log.jsonl` in the repository. */
const soakLog = fileURLToPath(new URL("../../../bench/soak-log.jsonl", import.meta.url))

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

/** Appends one soak's figures to the soak log (one JSON object per line). */
const appendSoakLog = (report: Simulation.SoakReport, args: Args) => {
  const line = {
    date: new Date().toISOString(),
    commit: commit(),
    command: `pnpm sim --soak ${args.soakMinutes} --seed-start ${args.seedStart} --steps ${args.steps}` +
      (args.without.length > 0 ? ` --without ${args.without.join(",")}` : ""),
    seeds: report.seeds === 0 ? null : `${report.seedStart}..${report.seedStart + report.seeds - 1}`,
    steps: report.steps,
    operations: report.operations,
    crashRestarts: report.crashes,
    distinctCrashPoints: report.crashPoints.length,
    overflowsRejected: report.overflowsRejected,
    outputStopped: report.outputStopped,
    violations: report.failures.length,
    failingSeeds: report.failures.map((f) => f.seed),
    elapsedMs: report.elapsedMs,
    operationsPerSecond: Simulation.operationsPerSecond(report)
  }
  Fs.appendFileSync(soakLog, `${JSON.stringify(line)}\n`)
  process.stderr.write(`soak: figures appended to ${soakLog}\n`)
}

const main = Effect.gen(function*() {
  const args = parse(process.argv.slice(2))
  if (typeof args === "string") {
    console.error(`sim: ${args}`)
    process.exitCode = 2
    return
  }

  if (args.scenario !== null) {
    const scenario = JSON.parse(Fs.readFileSync(args.scenario, "utf8")) as Simulation.Scenario
    const outcome = yield* Simulation.execute(scenario)
    for (const line of Simulation.formatScenario(scenario)) console.log(line)
    for (const line of outcome.trace) console.log(line)
    for (const v of outcome.violations) console.log(`violation: ${v}`)
    console.log(`sim: scenario ${args.scenario}, ${outcome.executed} operations, ${outcome.crashes} crash-restarts, ` +
      `${outcome.violations.length} violations, digest ${outcome.digest.slice(0, 16)}`)
    if (outcome.violations.length > 0) process.exitCode = 1
    return
  }

  const features = { ...Simulation.allFeatures }
  for (const name of args.without) features[featureNames[name]!] = false
  const tty = process.stderr.isTTY === true && !args.json
  const started = Date.now()
  const until = args.soakMinutes === null ? undefined : started + args.soakMinutes * 60_000
  let lastProgress = started
  let operations = 0
  let violations = 0
  const report = yield* Simulation.soak({
    seedStart: args.seedStart,
    seeds: until === undefined ? args.seeds : Number.MAX_SAFE_INTEGER,
    steps: args.steps,
    features,
    shrinkLimit: args.shrinkLimit,
    ...(until === undefined ? {} : { until }),
    onSeed: (outcome, index) =>
      Effect.sync(() => {
        const done = index + 1
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

  if (args.json) {
    console.log(JSON.stringify({
      seedStart: report.seedStart,
      seeds: report.seeds,
      steps: report.steps,
      operations: report.operations,
      crashRestarts: report.crashes,
      distinctCrashPoints: report.crashPoints.length,
      overflowsRejected: report.overflowsRejected,
      outputStopped: report.outputStopped,
      violations: report.failures.length,
      operationsPerSecond: Simulation.operationsPerSecond(report),
      failures: report.failures.map((f) => ({
        seed: f.seed,
        violations: f.outcome.violations,
        shrunk: f.shrunk === null ? null : { violations: f.shrunk.outcome.violations, scenario: f.shrunk.scenario }
      })),
      elapsedMs: report.elapsedMs
    }))
  } else {
    for (const failure of report.failures) for (const line of Simulation.formatFailure(failure)) console.log(line)
    console.log(Simulation.summaryLine(report))
  }
  if (until !== undefined) appendSoakLog(report, args)
  if (report.failures.length > 0) process.exitCode = 1
})

main.pipe(
  Effect.catchAllCause((cause) =>
    Effect.sync(() => {
      console.error(`sim: ${Cause.pretty(cause)}`)
      process.exitCode = 1
    })),
  CliRuntime.runMain
)
