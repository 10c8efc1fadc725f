/**
 * ConcurrentSends: the multi-process acceptance of the run driver on one shared database (issue 15: "2 processes x
 * 20 threads x 50 concurrent sends: no lost update, per-thread run order equals acceptance order, every loser of a
 * race gets RunInProgress or is queued, invariants hold").
 *
 * - `createThreads` (the parent) creates the threads every sender shares.
 * - `sendAll` (one sender process, `bin/concurrentSender.ts`) builds its own orchestrator on the database (its own
 *   run driver, scripted providers that keep their native threads in memory, random ids), submits every send of
 *   every thread at once, records each outcome, then waits for each accepted run to end.
 * - `spawnSender` (the parent) runs `sendAll` in a child Node process (`node --import tsx`) and reads its summary.
 * - `verify` (the parent) reads the record back and names every broken promise; `[]` when all hold.
 *
 * It does not assert anything itself: the test asserts `verify`'s report, the benchmark prints it.
 */
import { Commands, type CommandId, type ProviderInstance, type RunFailureCode, type RunId, type RunStatus, terminalRunStatuses, type ThreadId } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { IdGenerator, InvariantChecks, OrchestratorConfig, OrchestratorLayer, RunDriver, ThreadService } from "@baton/orchestration"
import { Database, ThreadStore } from "@baton/persistence"
import { ProviderRegistry, ScriptedProvider, ScriptedSummariser } from "@baton/providers"
import { Cause, Clock, Data, Effect, Exit, Layer, Option, Schedule } from "effect"
import { spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

/** The provider instance every thread runs on (a scripted one with a 200,000-token window and native injection). */
export const provider = "codex" as ProviderInstance

/** What one sender process is asked to do. */
export interface SenderConfig {
  /** The Postgres URL (a schema from `Database.layerPgSchema`) or a SQLite file path every process shares. */
  readonly db: string
  readonly threadIds: ReadonlyArray<string>
  readonly sendsPerThread: number
  /** Names the process in command ids and prompts (`p1`, `p2`, …). */
  readonly label: string
}

/** One send: the prompt it carried and either the run it got or the tag of its error (`Defect` for a defect). */
export interface SendOutcome {
  readonly threadId: string
  readonly text: string
  readonly runId: string | null
  readonly runSeq: number | null
  readonly error: string | null
}

/** How an accepted run ended, as `awaitRun` reported it (`error`: `awaitRun` itself failed). */
export interface RunEnding {
  readonly runId: string
  readonly status: RunStatus | null
  readonly failureCode: RunFailureCode | null
  readonly error: string | null
}

/** What a sender process prints: its outcomes, its accepted runs' endings, and times in milliseconds. */
export interface SenderSummary {
  readonly label: string
  readonly pid: number
  readonly outcomes: ReadonlyArray<SendOutcome>
  readonly endings: ReadonlyArray<RunEnding>
  /** From the first submit to the last submit's answer. */
  readonly submitMillis: number
  /** From the first submit to the last accepted run's end. */
  readonly totalMillis: number
}

/**
 * The orchestrator a sender process (or the parent) runs on `db`: the real Layers, one scripted `codex` instance
 * (window 200,000, native injection, default replies), random ids (two processes never mint the same id) and the
 * run driver. Fails with the database's `SqlError`/`MigrationError`.
 */
export const layer = (db: string) => {
  const counter = TokenCounter.make()
  const adapter = ScriptedProvider.make(
    { instance: provider, contextWindow: 200_000, autoCompactThreshold: null, injectHistory: true },
    ScriptedProvider.makeScript(),
    counter
  )
  return RunDriver.RunDriver.Default.pipe(
    Layer.provideMerge(OrchestratorLayer.layer),
    Layer.provideMerge(db.startsWith("postgres://") ? Database.layerPg({ url: db, maxConnections: 10 }) : Database.layerSqlite(db)),
    Layer.provideMerge(ProviderRegistry.layer([adapter])),
    Layer.provideMerge(ScriptedSummariser.layer(ScriptedSummariser.make(counter))),
    Layer.provideMerge(Layer.succeed(TokenCounter.TokenCounter, counter)),
    Layer.provideMerge(IdGenerator.layerRandom),
    Layer.provideMerge(OrchestratorConfig.layer({}))
  )
}

/**
 * The record alone on `db` (the store, no orchestrator): what `verify` reads. No run driver, so nothing is
 * reconciled before it is read.
 */
export const readLayer = (db: string) =>
  ThreadStore.Default.pipe(
    Layer.provideMerge(db.startsWith("postgres://") ? Database.layerPg({ url: db, maxConnections: 2 }) : Database.layerSqlite(db))
  )

/** Creates `count` threads on the `codex` provider; returns their ids in creation order. */
export const createThreads = (count: number) =>
  Effect.gen(function*() {
    const service = yield* ThreadService.ThreadService
    const ids: Array<string> = []
    for (let i = 0; i < count; i++) {
      const threadId = yield* service.createThread(Commands.CreateThread.make({
        commandId: `cmd_create_${i}_${Math.random().toString(36).slice(2, 10)}` as CommandId,
        title: `concurrent ${i}`,
        providerInstance: provider
      }))
      ids.push(threadId)
    }
    return ids
  })

/** The tag of a failed exit's error, `Defect` for a defect or an interruption. */
const errorTag = (cause: Cause.Cause<{ readonly _tag: string }>) =>
  Option.match(Cause.failureOption(cause), { onNone: () => "Defect", onSome: (e) => e._tag })

/** The prompt of send `i` of `label` on `threadId` (unique across processes, so a run names the send that got it). */
export const promptOf = (threadId: string, label: string, i: number) => `${label} send ${i} on ${threadId}`

/**
 * One sender: submits `sendsPerThread` sends to each thread, all at once (unbounded concurrency), records each
 * outcome, waits for every accepted run to end, then until every run of the threads has ended (a server stays up).
 * Fails only when the store cannot be read while waiting (`PersistenceError`); every send's error is recorded.
 */
export const sendAll = (config: SenderConfig) =>
  Effect.gen(function*() {
    const driver = yield* RunDriver.RunDriver
    const store = yield* ThreadStore
    const sends = config.threadIds.flatMap((threadId) =>
      Array.from({ length: config.sendsPerThread }, (_, i) => ({
        threadId,
        text: promptOf(threadId, config.label, i),
        commandId: `cmd_${config.label}_${threadId}_${i}` as CommandId
      }))
    )
    const start = yield* Clock.currentTimeMillis
    const outcomes = yield* Effect.forEach(sends, (send) =>
      Effect.map(
        Effect.exit(driver.submit(Commands.SendMessage.make({ commandId: send.commandId, threadId: send.threadId as ThreadId, text: send.text }))),
        Exit.match({
          onFailure: (cause): SendOutcome => ({ threadId: send.threadId, text: send.text, runId: null, runSeq: null, error: errorTag(cause) }),
          onSuccess: (run): SendOutcome => ({ threadId: send.threadId, text: send.text, runId: run.runId, runSeq: run.runSeq, error: null })
        })
      ), { concurrency: "unbounded" })
    const submitted = yield* Clock.currentTimeMillis
    const endings = yield* Effect.forEach(outcomes.flatMap((o) => o.runId === null ? [] : [o.runId]), (runId) =>
      Effect.map(
        Effect.exit(driver.awaitRun(runId as RunId)),
        Exit.match({
          onFailure: (cause): RunEnding => ({ runId, status: null, failureCode: null, error: errorTag(cause) }),
          onSuccess: (r): RunEnding => ({ runId, status: r.status, failureCode: r.failureCode, error: null })
        })
      ), { concurrency: "unbounded" })
    const end = yield* Clock.currentTimeMillis
    // A server process stays up: this one leaves only once every thread's runs have ended (its driver may be
    // running the other process's runs; leaving mid-run would end them `interrupted`).
    yield* Effect.repeat(
      Effect.map(Effect.forEach(config.threadIds, (id) => store.findFirstUnfinishedRun(id as ThreadId)), (firsts) => firsts.every(Option.isNone)),
      { until: (done) => done, schedule: Schedule.spaced("50 millis") }
    )
    return {
      label: config.label,
      pid: process.pid,
      outcomes,
      endings,
      submitMillis: submitted - start,
      totalMillis: end - start
    } satisfies SenderSummary
  })

/** A sender process that exited non-zero or wrote no summary. */
export class SenderFailed extends Data.TaggedError("SenderFailed")<{
  readonly label: string
  readonly exitCode: number | null
  readonly stderr: string
}> {
  override get message() {
    return `sender ${this.label} exited ${this.exitCode}: ${this.stderr.trim().split("\n").slice(-12).join(" | ")}`
  }
}

/** The sender entry point (`node --import tsx <it> <config JSON> <summary file>`). */
export const senderEntry = Path.join(Path.dirname(fileURLToPath(import.meta.url)), "bin", "concurrentSender.ts")

/**
 * Runs `sendAll(config)` in a child Node process (`node --import tsx`, from the working directory, which must
 * resolve `tsx`) and returns its summary. The child is killed if this effect is interrupted. Fails with
 * `SenderFailed` when the child exits non-zero or writes no summary.
 */
export const spawnSender = (config: SenderConfig) =>
  Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-sender-"))),
      (d) => Effect.sync(() => Fs.rmSync(d, { recursive: true, force: true }))
    )
    const out = Path.join(dir, "summary.json")
    const { code, stderr } = yield* Effect.async<{ readonly code: number | null; readonly stderr: string }>((resume) => {
      const child = spawn(process.execPath, ["--import", "tsx", senderEntry, JSON.stringify(config), out], {
        stdio: ["ignore", "pipe", "pipe"]
      })
      // Effect's logger writes to stdout: both streams are kept for the failure message.
      let err = ""
      child.stdout.on("data", (d: Buffer) => (err += d.toString()))
      child.stderr.on("data", (d: Buffer) => (err += d.toString()))
      child.on("close", (exitCode) => resume(Effect.succeed({ code: exitCode, stderr: err })))
      return Effect.sync(() => void child.kill("SIGKILL"))
    })
    if (code !== 0 || !Fs.existsSync(out)) return yield* new SenderFailed({ label: config.label, exitCode: code, stderr })
    return JSON.parse(Fs.readFileSync(out, "utf8")) as SenderSummary
  }).pipe(Effect.scoped)

/** What `verify` found, with the figures a report prints. */
export interface Report {
  readonly threads: number
  readonly sends: number
  readonly accepted: number
  /** Refused sends by error tag. */
  readonly refused: Readonly<Record<string, number>>
  /** Runs by final status. */
  readonly runs: Readonly<Record<string, number>>
  /** Non-completed runs by failure code. */
  readonly failureCodes: Readonly<Record<string, number>>
  /** `native_thread.replaced` events across the threads (a thread moving between processes replaces them). */
  readonly replacements: number
  /** Every broken promise, one line each; empty when all hold. */
  readonly violations: ReadonlyArray<string>
}

/** Sends may be refused only as a lost race; anything else (`PersistenceError`, a defect) is a violation. */
const allowedRefusals = new Set(["RunInProgress", "ConcurrentModification"])
const startedOrEnded = new Set(["run.started", "run.completed", "run.failed", "run.interrupted"])

const bump = (counts: Record<string, number>, key: string) => void (counts[key] = (counts[key] ?? 0) + 1)

/**
 * Reads the record of `threadIds` back and checks what the senders were promised:
 * - every send was accepted (queued) or refused with `RunInProgress` / `ConcurrentModification`;
 * - each thread's runs are seq 1..N, N the sends accepted across all processes, each run the one a send got (same
 *   id and seq) carrying that send's prompt: no lost update, no duplicate;
 * - each thread's runs started in seq order, each after the previous one ended (one at a time across processes);
 * - every run ended, `completed` or with a provider fault code (InvariantChecks' allowed endings), and `awaitRun`
 *   reported the recorded ending;
 * - `InvariantChecks.check` finds nothing on any thread.
 */
export const verify = (threadIds: ReadonlyArray<string>, summaries: ReadonlyArray<SenderSummary>) =>
  Effect.gen(function*() {
    const store = yield* ThreadStore
    const violations: Array<string> = []
    const refused: Record<string, number> = {}
    const runCounts: Record<string, number> = {}
    const failureCodes: Record<string, number> = {}
    let replacements = 0
    const outcomes = summaries.flatMap((s) => s.outcomes)
    const endings = new Map(summaries.flatMap((s) => s.endings.map((e) => [e.runId, e] as const)))
    for (const o of outcomes) {
      if (o.error === null) continue
      bump(refused, o.error)
      if (!allowedRefusals.has(o.error)) violations.push(`${o.threadId}: "${o.text}" was refused with ${o.error}`)
    }
    for (const threadId of threadIds) {
      const accepted = outcomes.filter((o) => o.threadId === threadId && o.runId !== null)
      const byRun = new Map(accepted.map((o) => [o.runId!, o]))
      if (byRun.size !== accepted.length) violations.push(`${threadId}: two sends were answered with the same run`)
      const runs = yield* store.listRuns(threadId as ThreadId)
      const seqs = runs.map((r) => r.seq)
      if (seqs.join(",") !== Array.from({ length: accepted.length }, (_, i) => i + 1).join(",")) {
        violations.push(`${threadId}: run seqs ${seqs.join(",")} are not 1..${accepted.length} (the accepted sends)`)
      }
      for (const run of runs) {
        bump(runCounts, run.status)
        if (run.status !== "completed") bump(failureCodes, run.failureCode ?? "none")
        const send = byRun.get(run.id)
        if (send === undefined) {
          violations.push(`${threadId}: run ${run.id} (seq ${run.seq}) was not the answer to any send`)
          continue
        }
        if (send.runSeq !== run.seq) violations.push(`${threadId}: run ${run.id} was accepted as seq ${send.runSeq}, recorded as ${run.seq}`)
        if (run.prompt !== send.text) violations.push(`${threadId}: run ${run.id} carries "${run.prompt}", its send was "${send.text}"`)
        if (!terminalRunStatuses.includes(run.status)) violations.push(`${threadId}: run ${run.id} is still ${run.status}`)
        else if (run.status !== "completed" && !InvariantChecks.isFaultCode(run.failureCode)) {
          violations.push(`${threadId}: run ${run.id} ended ${run.status} with ${run.failureCode ?? "no code"}: ${run.failureReason ?? ""}`)
        }
        const ending = endings.get(run.id)
        if (ending === undefined || ending.status !== run.status) {
          violations.push(`${threadId}: awaitRun(${run.id}) reported ${ending?.status ?? ending?.error ?? "nothing"}, the record says ${run.status}`)
        }
      }
      const seqOf = new Map(runs.map((r) => [r.id as string, r.seq]))
      const events = yield* store.listEvents(threadId as ThreadId)
      replacements += events.filter((e) => e.type === "native_thread.replaced").length
      // Starts and ends in log order must read: (started+ ended) for seq 1, then for seq 2, … — one run at a time.
      let current = 0
      let ended = true
      for (const e of events) {
        if (!startedOrEnded.has(e.type)) continue
        const seq = seqOf.get(String((e.payload as { readonly runId?: unknown }).runId)) ?? -1
        if (e.type === "run.started") {
          if (seq === current && !ended) continue
          if (seq !== current + 1 || !ended) {
            violations.push(`${threadId}: run seq ${seq} started (event ${e.seq}) while run seq ${current} was ${ended ? "the last ended" : "unfinished"}`)
          }
          current = seq
          ended = false
        } else {
          // A run ended before it started (interrupted while queued) ends in turn too.
          if (seq === current + 1 && ended) current = seq
          else if (seq !== current || ended) violations.push(`${threadId}: run seq ${seq} ended (event ${e.seq}) out of turn (current ${current})`)
          ended = true
        }
      }
      for (const v of yield* InvariantChecks.check(threadId as ThreadId)) violations.push(`${threadId}: ${v}`)
    }
    return {
      threads: threadIds.length,
      sends: outcomes.length,
      accepted: outcomes.filter((o) => o.runId !== null).length,
      refused,
      runs: runCounts,
      failureCodes,
      replacements,
      violations
    } satisfies Report
  })
