/**
 * Executes one scenario against the real orchestration services on a real SQLite file, with crash-restarts, and
 * checks the invariants after every operation and every restart.
 *
 * The SQLite file starts as a copy of a database migrated once per process (`templateDatabase`). One incarnation of
 * Baton = one build of the orchestrator's services in its own Scope (`OrchestratorLayer.serviceLayers`, one after
 * the other: `buildInOrder`) over what outlives it (`worldLayer`: configuration, counter, providers, summariser), with
 * sequential ids under a namespace of its own (`""`, `r2.`, `r3.`, ...) so ids of different incarnations never
 * collide. A crash closes that Scope (every
 * service and its state gone, every fiber interrupted; a transaction in progress was rolled back) and builds a fresh
 * incarnation on the same file, which runs `ThreadService.recover()`. The SQLite connection (opened with the first
 * incarnation: pragmas, migrations check, the audit's setting) is kept for the next one when the crash left it
 * outside any transaction, else closed and opened again (see `simulate`'s incarnations for why that is faithful);
 * on Postgres every incarnation connects again. The scripted providers are the external
 * world: they survive every restart. Time is logical (a clock that advances one millisecond per reading), so the same
 * scenario gives the same database and the same provider logs, byte for byte. (Every SQL statement reads the clock:
 * the SQLite client's prepared-statement cache checks its time to live. A change to the number of statements, the
 * checks' included, shifts the timestamps of everything after it, not what happens.)
 */
import { type ClientTool, Commands, type CommandId, type ProviderInstance, type ThreadId } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { Database, EventFeed, requireUnitOfWork, ThreadStore } from "@baton/persistence"
import { IdGenerator, InvariantChecks, ProviderTruthChecks, OrchestratorConfig, OrchestratorLayer, ThreadService } from "@baton/orchestration"
import { type ProviderAdapter, ProviderRegistry, ScriptedProvider, ScriptedSummariser } from "@baton/providers"
import { SqlClient } from "@effect/sql"
import { Cause, Chunk, Clock, Context, Data, Effect, Exit, FiberRef, HashSet, Layer, Logger, Option, Scope, Stream } from "effect"
import { createHash } from "node:crypto"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Harness from "../Harness.js"
import * as Checks from "./Checks.js"
import * as Crash from "./Crash.js"
import { produced } from "./Produced.js"
import { formatOperation, type Operation, promptText, responseFor, type Scenario, verboseCall } from "./Scenario.js"

/** Counts of what a run exercised. */
export interface Stats {
  readonly runs: Readonly<Record<string, number>>
  readonly deliveries: Readonly<Record<string, number>>
  readonly handoffs: number
  readonly nativeThreads: number
  readonly restarts: number
  readonly retries: number
  readonly faultsFired: number
  readonly interruptsLanded: number
  /**
   * The providers' truth: requests they rejected as over their window, and turns whose output stopped at the
   * window (see `ScriptedProvider.TruthRecord`).
   */
  readonly overflowsRejected: number
  readonly outputStopped: number
  /** The most durable steps one operation of each kind went through. */
  readonly maxSteps: Readonly<Record<string, number>>
}

/** The result of executing a scenario. */
export interface Outcome {
  readonly seed: number
  /** Operations executed (the run stops after the first operation with a violation). */
  readonly executed: number
  readonly violations: ReadonlyArray<string>
  /** Index of the operation after which the violations were found, `null` when there were none. */
  readonly failedAt: number | null
  readonly crashes: number
  /** Distinct crash points hit, as `<operation>: <site>#<occurrence within the operation>`. */
  readonly crashPoints: ReadonlyArray<string>
  /** One line per operation: what it was and what happened. */
  readonly trace: ReadonlyArray<string>
  /** SHA-256 of `dump`; the empty string when run with `digest: false`. */
  readonly digest: string
  /** Every table of the database (but the migrations table) and every provider's received log, canonically. */
  readonly dump: string | null
  readonly stats: Stats
}

export interface ExecuteOptions {
  /** Keep the full `dump` in the outcome (for determinism tests). */
  readonly keepDump?: boolean
  /**
   * `false`: neither dump nor digest (`digest` is the empty string); a soak reads neither, and dumping every table
   * at the end of each seed cost about 3% of its time. Default `true`; ignored with `keepDump`.
   */
  readonly digest?: boolean
  /**
   * The database: a fresh SQLite file (default) or a fresh schema on the real Postgres (`Database.layerPgSchema`,
   * dropped afterwards; every incarnation connects to it). The dump of a Postgres run lists each table's rows
   * sorted by their JSON (Postgres has no `rowid`) and renders values as the pg driver returns them, so it is
   * deterministic run to run but not byte-identical to the SQLite dump of the same seed.
   */
  readonly dialect?: "sqlite" | "postgres"
  /**
   * Deliberately broken behaviours (`OrchestratorConfig.mutations`), for the mutation tests that show an oracle
   * property catching a broken build. Default none.
   */
  readonly mutations?: ReadonlySet<OrchestratorConfig.Mutation>
}



class ProbeRollback extends Data.TaggedError("ProbeRollback") {}

/** A clock that advances one millisecond per reading, from 2025-01-01: deterministic timestamps. */
const logicalClock = (): Clock.Clock => {
  let now = Date.UTC(2025, 0, 1)
  const real = Clock.make()
  return {
    [Clock.ClockTypeId]: Clock.ClockTypeId,
    unsafeCurrentTimeMillis: () => ++now,
    currentTimeMillis: Effect.sync(() => ++now),
    unsafeCurrentTimeNanos: () => BigInt(now) * 1_000_000n,
    currentTimeNanos: Effect.sync(() => BigInt(now) * 1_000_000n),
    sleep: (duration) => real.sleep(duration)
  }
}

/**
 * Where an o200k_base count may be cut: after each line feed followed by a character that is neither whitespace nor
 * `/`. The counts of the lines so cut add up to the count of the whole text, because the cut is a boundary between
 * two pieces (pre-tokens: matches of the o200k split pattern, each merged on its own) and each side splits into the
 * same pieces alone as within the whole:
 *
 * - no piece spans the cut: a letter piece (its optional first character excludes line breaks) and a number piece
 *   hold no line feed; a whitespace piece ends before the non-whitespace character after it; a punctuation piece
 *   ` ?[^\s\p{L}\p{N}]+[\r\n/]*` may run on through line breaks and `/`, but the character after the cut is neither;
 * - the pattern has no look-behind, so the pieces after the cut are the same without the text before it; its one
 *   look-ahead, `\s+(?!\S)`, never decides the piece that ends at the cut: a whitespace run ending in a line feed is
 *   taken whole by `\s*[\r\n]+`, an earlier alternative, whether more text follows or not (the reason
 *   `O200k.makeCount` must not cut a stretch after a whitespace piece in general does not arise).
 *
 * Cutting is what makes rendered histories cheap to count: each is new text, but made of item blocks (lines) that
 * were counted before.
 */
export const o200kLines = (text: string): ReadonlyArray<string> => {
  const lines: Array<string> = []
  let start = 0
  for (let nl = text.indexOf("\n"); nl !== -1 && nl + 1 < text.length; nl = text.indexOf("\n", nl + 1)) {
    const next = text[nl + 1]!
    if (next === "/" || /\s/.test(next)) continue
    lines.push(text.slice(start, nl + 1))
    start = nl + 1
  }
  if (start === 0) return [text]
  lines.push(text.slice(start))
  return lines
}

/**
 * `counter`, memoised by text: the simulation counts the same texts again and again (each scripted provider counts
 * every request and output in its own units and Baton's, the summariser its input, the orchestrator each item it
 * writes and each history it renders). A count is a pure function of the text, so a remembered count is the count.
 * With `byLine` (for a counter that counts o200k_base pieces, as `TokenCounter.make()` does) a text not seen before is
 * counted as the sum of its lines' counts (`o200kLines`), each memoised: the same count (see `o200kLines`), without
 * counting again the lines a new text shares with earlier ones. Bounded: the memo is dropped whenever the texts it
 * holds reach `maxChars` characters.
 */
export const memoisedCounter = (
  counter: TokenCounter.TokenCounterShape,
  maxChars = 32_000_000,
  options: { readonly byLine?: boolean } = {}
): TokenCounter.TokenCounterShape => {
  let memo = new Map<string, number>()
  let chars = 0
  const remember = (text: string, n: number) => {
    if (chars + text.length > maxChars) {
      memo = new Map()
      chars = 0
    }
    memo.set(text, n)
    chars += text.length
    return n
  }
  const countLine = (line: string) => memo.get(line) ?? remember(line, counter.count(line))
  return {
    name: counter.name,
    count: (text) => {
      const known = memo.get(text)
      if (known !== undefined) return known
      if (options.byLine !== true) return remember(text, counter.count(text))
      const lines = o200kLines(text)
      if (lines.length === 1) return remember(text, counter.count(text))
      let n = 0
      for (const line of lines) n += countLine(line)
      return remember(text, n)
    }
  }
}

let counterInstance: TokenCounter.TokenCounterShape | undefined
const sharedCounter = () => (counterInstance ??= memoisedCounter(TokenCounter.make(), undefined, { byLine: true }))

/** The SQL client on `db`: a Postgres URL or a SQLite file; a failure to open or migrate it is a defect. */
const database = (db: string): Layer.Layer<SqlClient.SqlClient> =>
  db.startsWith("postgres://") ? Layer.orDie(Database.layerPg({ url: db, maxConnections: 4 })) : Layer.orDie(Database.layerSqlite(db))

/**
 * What outlives every incarnation of one run, built once: the configuration (a restarted process reads the same), the
 * token counter (a pure function), the providers and the summariser (the external world: they survive every
 * restart). None holds orchestrator state.
 */
const worldLayer = (
  adapters: ReadonlyArray<ProviderAdapter.ProviderAdapterShape>,
  counter: TokenCounter.TokenCounterShape,
  summariser: ScriptedSummariser.ScriptedSummariser,
  mutations: ReadonlySet<OrchestratorConfig.Mutation>
) =>
  Layer.mergeAll(
    ProviderRegistry.layer(adapters),
    ScriptedSummariser.layer(summariser),
    Layer.succeed(TokenCounter.TokenCounter, counter),
    OrchestratorConfig.layer(mutations.size === 0 ? simulationConfig : { ...simulationConfig, mutations })
  )

/**
 * The layers of one incarnation, each after what it needs: its ids (sequential under `namespace`), the event ids
 * drawn from them, the crash-injecting `ThreadStore` and `OrchestratorLayer.serviceLayers`: `OrchestratorLayer.services`
 * (without `OrchestratorLayer.layer`'s event feed) over `Crash.storeLayer` (`Incarnation.test.ts` checks that
 * `serviceLayers` hold the services of `services`, and that each incarnation builds every one of them again).
 */
const incarnationLayers = (namespace: string, steps: Crash.Steps): ReadonlyArray<Layer.Layer<never, unknown, unknown>> => [
  IdGenerator.layerSequential(namespace),
  OrchestratorLayer.eventIds,
  Crash.storeLayer(steps),
  ...OrchestratorLayer.serviceLayers
]

/** The services of one incarnation: the orchestrator's, the store, ids, the SQL client and the world. */
type Services =
  | Layer.Layer.Success<typeof OrchestratorLayer.services>
  | Layer.Layer.Success<ReturnType<typeof Crash.storeLayer>>
  | Layer.Layer.Success<typeof OrchestratorLayer.eventIds>
  | IdGenerator.IdGenerator
  | SqlClient.SqlClient
  | Layer.Layer.Success<ReturnType<typeof worldLayer>>

/**
 * Builds `layers` one after the other into `scope`, each given `base` and every service the layers before it built,
 * through one memo map (a layer two of them share is built once, as in a nested build): a new one unless `memoMap`
 * is given (a test's, to see which layers another build shares). The same services as the nested `provideMerge`
 * chain of the same layers, in about a third of the CPU time to build and release (a chain of 45 layers: 6.8 ms
 * against 1.4-2.2 ms). A failure is a defect.
 */
export const buildInOrder = (
  layers: ReadonlyArray<Layer.Layer<never, unknown, unknown>>,
  base: Context.Context<never>,
  scope: Scope.Scope,
  memoMap?: Layer.MemoMap
) =>
  Effect.gen(function*() {
    memoMap ??= yield* Layer.makeMemoMap
    let context = base
    // The layers' errors and requirements differ from one to the next, so they are `unknown` here: each is given
    // what the layers before it built (one missing is a defect, "Service not found"), and a failure is a defect.
    // @effect-diagnostics-next-line anyUnknownInErrorContext:off
    for (const layer of layers) {
      // @effect-diagnostics-next-line anyUnknownInErrorContext:off
      const built = Effect.provide(Layer.buildWithMemoMap(layer, memoMap, scope), context) as Effect.Effect<Context.Context<never>, unknown>
      // @effect-diagnostics-next-line anyUnknownInErrorContext:off
      context = Context.merge(context, yield* Effect.orDie(built))
    }
    return context
  })

/**
 * The simulation's policy: the defaults, with an interrupt timeout of 50 ms real time (the clock's sleeps are real)
 * so an interrupt the provider never acknowledges costs little. Scripted calls answer in microseconds, so only a
 * `ignore_interrupt` fault reaches it and the outcome stays deterministic. No driver heartbeat
 * (`driverLeaseMillis: 0`; one host, liveness by pid): the heartbeat fiber reads the logical clock at moments that
 * depend on I/O timing on Postgres, which would shift every later timestamp.
 */
const simulationConfig: Partial<OrchestratorConfig.OrchestratorConfigShape> = { interruptTimeoutMillis: 50, driverLeaseMillis: 0 }

type Attempt<A> =
  | { readonly _tag: "ok"; readonly value: A }
  | { readonly _tag: "crashed"; readonly step: number; readonly site: string }
  | { readonly _tag: "failed"; readonly message: string; readonly errorTag: string | null }

/** The `_tag` of the command's typed failure (`OffloadFailed`, …), `null` for a defect: read instead of the message. */
/**
 * The typed refusals a command racing a turn may answer with (each says what to do): the thread has work in
 * flight, it changed under the command, or the summariser could not summarise (the record unchanged).
 */
const raceRefusals = new Set(["RunInProgress", "ConcurrentModification", "OffloadFailed"])

const errorTagOf = (cause: Cause.Cause<unknown>): string | null => {
  const failure = Cause.failureOption(cause)
  if (failure._tag === "None") return null
  const tag = (failure.value as { readonly _tag?: unknown })._tag
  return typeof tag === "string" ? tag : null
}

const describeCause = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.failureOption(cause)
  if (failure._tag === "Some") {
    const e = failure.value as { readonly _tag?: unknown; readonly message?: unknown }
    return `${String(e._tag ?? "Error")}: ${String(e.message ?? JSON.stringify(e))}`
  }
  return Cause.pretty(cause).split("\n")[0] ?? "unknown defect"
}

/**
 * Where the simulation's SQLite files go: `BATON_SIM_DIR`, else `/dev/shm` where it exists (a restart closes the
 * database, and closing a WAL database checkpoints and syncs it: in memory-backed storage that costs nothing), else
 * the OS temporary directory.
 */
const simulationDir = () =>
  process.env.BATON_SIM_DIR ?? (Fs.existsSync("/dev/shm") ? "/dev/shm" : Os.tmpdir())

/** The template's bytes, once made (see `templateDatabase`). */
let template: Buffer | undefined

/**
 * The simulation's SQLite database as every run starts it: migrated, with the checks' audit installed
 * (`Checks.installAudit`), and nothing else. Made once per process (a migrated file, copied by `VACUUM INTO` into a
 * file of its own and kept as bytes) and written as each run's file, instead of running the migrations on a fresh
 * file for every seed: the run's first incarnation then finds its schema at the latest migration, as every later
 * one does. Made under a logical clock of its own, so that a seed's run does not depend on whether it is the
 * process's first.
 */
const templateDatabase: Effect.Effect<Buffer> = Effect.suspend(() => {
  if (template !== undefined) return Effect.succeed(template)
  return Effect.acquireUseRelease(
    Effect.sync(() => Fs.mkdtempSync(Path.join(simulationDir(), "baton-sim-template-"))),
    (dir) =>
      Effect.scoped(Effect.gen(function*() {
        const context = yield* Layer.build(database(Path.join(dir, "migrated.sqlite")))
        const copy = Path.join(dir, "template.sqlite")
        yield* Effect.provide(Effect.zipRight(Checks.installAudit, Effect.flatMap(SqlClient.SqlClient, (sql) => sql`VACUUM INTO ${copy}`)), context)
        return (template = Fs.readFileSync(copy))
      })).pipe(Effect.orDie, Effect.withClock(logicalClock())),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )
})

/**
 * Whether the SQLite connection is outside any transaction: `BEGIN` succeeds only there (SQLite refuses a
 * transaction within a transaction); it is rolled back at once. Decides whether a restart may keep the connection.
 */
export const outsideTransaction: Effect.Effect<boolean, never, SqlClient.SqlClient> = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.zipRight(sql.unsafe("BEGIN"), sql.unsafe("ROLLBACK")).pipe(Effect.as(true), Effect.orElseSucceed(() => false)))

const cid = (id: number, suffix = "") => `cmd_${id}${suffix}` as CommandId

/** The client tool a `queue_behind_wait` send declares: its call makes the run wait for the client's result. */
const clientTool: ClientTool = {
  name: "read_file",
  description: "Reads a file of the workspace",
  inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] }
}

/** `effect` with another application's write transaction open on the Postgres server meanwhile (`Harness.foreignTransaction`). */
const withForeignTransaction = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.scoped(Effect.zipRight(Harness.foreignTransaction, effect))

/**
 * Executes `scenario` on a fresh SQLite file in a temporary directory (removed afterwards), or with
 * `dialect: "postgres"` on a fresh Postgres schema (dropped afterwards), with another application's write
 * transaction open on the server meanwhile (`withForeignTransaction`). A thread event appended outside a unit of work
 * is a defect there (`requireUnitOfWork` of @baton/persistence). Never fails (an unreachable Postgres server is a defect).
 */
export const execute = (scenario: Scenario, options: ExecuteOptions = {}): Effect.Effect<Outcome> =>
  Effect.suspend(() =>
    (options.dialect === "postgres"
      ? withForeignTransaction(Effect.scoped(Effect.flatMap(Layer.build(Database.layerPgSchema()), (schema) =>
        simulate(scenario, Context.get(schema, Database.PgSchemaUrl), options)))).pipe(Effect.orDie)
      : Effect.acquireUseRelease(
        Effect.sync(() => Fs.mkdtempSync(Path.join(simulationDir(), "baton-sim-"))),
        (dir) =>
          Effect.flatMap(templateDatabase, (bytes) => {
            const file = Path.join(dir, "baton.sqlite")
            Fs.writeFileSync(file, bytes)
            return simulate(scenario, file, options)
          }),
        (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
      )).pipe(Effect.withClock(logicalClock()), Effect.locally(requireUnitOfWork, true))
  )

const simulate = (scenario: Scenario, file: string, options: ExecuteOptions) =>
  Effect.gen(function*() {
    const counter = sharedCounter()
    const script = ScriptedProvider.makeScript()
    const steps = new Crash.Steps()
    const armed: Record<ScriptedProvider.FaultCall["operation"], ScriptedProvider.Fault | null> = { startTurn: null, injectHistory: null, interrupt: null }
    let faultsFired = 0
    // The user's interrupt of an `interrupt_in_tool_call` operation, run by the provider when its turn is inside the call.
    let onToolCall: Effect.Effect<void> = Effect.void
    // Runs inside the summariser's next call (a race: a command issued while a summary is being written).
    let onSummariserCall: Effect.Effect<void> = Effect.void
    // Runs inside a provider's next compaction, once it compacted (a race: a send while /compact's call is in flight).
    let onCompact: Effect.Effect<void> = Effect.void
    const providers = scenario.providers.map((p) =>
      ScriptedProvider.make({
        instance: p.name as ProviderInstance,
        contextWindow: p.window,
        autoCompactThreshold: p.autoCompactThreshold,
        injectHistory: p.inject,
        readThread: p.readThread,
        ...(p.tokenScale === undefined ? {} : { tokenScale: p.tokenScale }),
        ...(p.requestOverhead === undefined ? {} : { requestOverhead: p.requestOverhead }),
        ...(p.enforceWindow === undefined ? {} : { enforceWindow: p.enforceWindow }),
        ...(p.overflowSignal === undefined ? {} : { overflowSignal: p.overflowSignal }),
        ...(p.modelApi === true ? { resumeMayReplay: false } : {}),
        ...(p.ackUsage === undefined ? {} : {
          ackUsage: ({ call }: { readonly call: number }) =>
            call % p.ackUsage!.missingEvery === 0 ? "missing" as const : call % p.ackUsage!.impossibleEvery === 0 ? "impossible" as const : "counted" as const
        }),
        faults: (call) => {
          const fault = armed[call.operation]
          if (fault === null) return null
          armed[call.operation] = null
          faultsFired++
          return fault
        },
        onToolCall: () => Effect.suspend(() => onToolCall),
        onCompact: () => Effect.suspend(() => onCompact)
      }, script, counter)
    )
    const adapters = providers.map((p) => Crash.wrapAdapter(p, steps))
    // The summariser is the external world too: it survives restarts.
    const onCall = () => Effect.suspend(() => onSummariserCall)
    const summariser = ScriptedSummariser.make(counter, scenario.summariser === undefined ? { onCall } : {
      inputWindow: scenario.summariser.inputWindow,
      verbose: (call) => verboseCall(scenario.seed, scenario.summariser!, call),
      onCall
    })
    const setupOf = new Map(scenario.providers.map((p) => [p.name as string, p]))
    const turnFaults = new Set<ScriptedProvider.Fault>(["refuse", "interrupt_before_start", "timeout", "overflow", "interrupt_in_tool_call"])
    const armFault = (fault: ScriptedProvider.Fault | null) => {
      armed.startTurn = fault !== null && (typeof fault === "object" || turnFaults.has(fault)) ? fault : null
      armed.injectHistory = fault === "fail_after_injection" || fault === "lose_injection_ack" ? fault : null
      armed.interrupt = fault === "ignore_interrupt" ? fault : null
    }

    // ---- incarnations
    // On SQLite the connection outlives an incarnation when the crash left it outside any transaction: everything
    // else is built again. Why that is the crash a real process has: the connection holds no orchestrator state,
    // only caches a new process would fill the same way (compiled statements, pages of committed data) and the
    // settings every incarnation makes alike (`Database.layerSqlite`'s pragmas, `reconnectAudit`'s); the file is
    // at the latest migration from the template on (a new process's migrations check reads that and does nothing).
    // What a crash must drop is dropped: every service and its in-memory state (caches, locks, the event bus, the
    // driver registration, ids under a new namespace) is built again, every fiber of the incarnation is interrupted
    // when its scope closes, and a transaction in progress was rolled back when the crash's defect left it. That
    // last point is checked, not assumed: after the incarnation's scope is closed, `BEGIN` must succeed on the kept
    // connection (SQLite refuses it inside a transaction), else the connection is closed and the next incarnation
    // opens a fresh one (what every restart did before). On Postgres every incarnation connects again.
    const keepConnection = !file.startsWith("postgres://")
    let incarnation = 0
    let scope: Scope.CloseableScope | null = null
    let context: Context.Context<Services> | null = null
    let connection: { readonly scope: Scope.CloseableScope; readonly context: Context.Context<SqlClient.SqlClient> } | null = null
    const connect = Effect.gen(function*() {
      const s = yield* Scope.make()
      const c = yield* Layer.buildWithScope(database(file), s).pipe(Effect.orDie)
      // The audit's tables and triggers are in the database from the template on; the connection's own setting is not.
      yield* Effect.provide(Checks.reconnectAudit, c).pipe(Effect.orDie)
      return { scope: s, context: c }
    })
    const disconnect = Effect.suspend(() => {
      const c = connection
      connection = null
      return c === null ? Effect.void : Scope.close(c.scope, Exit.void)
    })
    const idle = (c: Context.Context<SqlClient.SqlClient>) => Effect.provide(outsideTransaction, c)
    const world = yield* Effect.scoped(Layer.build(worldLayer(adapters, counter, summariser, options.mutations ?? new Set())))
    const open = Effect.gen(function*() {
      incarnation++
      const s = yield* Scope.make()
      const namespace = incarnation === 1 ? "" : `r${incarnation}.`
      let base: Context.Context<never> = world as Context.Context<never>
      let layers = incarnationLayers(namespace, steps)
      if (keepConnection) {
        if (connection === null) connection = yield* connect
        base = Context.merge(base, connection.context) as Context.Context<never>
      } else {
        // @effect-diagnostics-next-line anyUnknownInErrorContext:off
        layers = [database(file), ...layers]
      }
      context = (yield* buildInOrder(layers, base, s)) as Context.Context<Services>
      // The audit's tables and triggers are in the database from the template (or the first incarnation) on.
      if (!keepConnection) yield* Effect.provide(Checks.reconnectAudit, context).pipe(Effect.orDie)
      scope = s
    })
    /** Drops the incarnation: its scope closed; the kept connection too when it is inside a transaction (see above). */
    const close = Effect.suspend(() => {
      const s = scope
      scope = null
      context = null
      return Effect.zipRight(
        s === null ? Effect.void : Scope.close(s, Exit.void),
        Effect.suspend(() => connection === null ? Effect.void : Effect.flatMap(idle(connection.context), (ok) => ok ? Effect.void : disconnect))
      )
    })
    const within = <A, E>(effect: Effect.Effect<A, E, Services>) =>
      Effect.suspend(() => Effect.provide(effect, context as Context.Context<Services>))

    // ---- bookkeeping
    const trace: Array<string> = []
    const notes: Array<string> = []
    let crashes = 0
    let restarts = 0
    // Each provider's truth-log length at every restart (ProviderTruthChecks.checkRecord's `restarts`: a rejection
    // the crash kept Baton from recording is not Baton's information afterwards).
    const restartMarks: Array<ReadonlyArray<number>> = []
    let retries = 0
    let interruptsLanded = 0
    const crashPoints = new Set<string>()
    const maxSteps: Record<string, number> = {}
    const memory = Checks.emptyMemory()
    // The thread the user is on, and the parents of the forks they went into (innermost last).
    let threadId: ThreadId | null = null
    const parents: Array<ThreadId> = []

    const attempt = <A, E>(plan: Crash.StepPlan, effect: Effect.Effect<A, E, Services>) =>
      Effect.gen(function*() {
        steps.arm(plan)
        const exit = yield* Effect.exit(within(effect))
        steps.disarm()
        if (steps.interruptLanded !== null) {
          interruptsLanded++
          notes.push(`interrupt landed at ${steps.interruptLanded}`)
        }
        if (Exit.isSuccess(exit)) return { _tag: "ok", value: exit.value } as Attempt<A>
        const crash = Chunk.findFirst(Cause.defects(exit.cause), (d) => d instanceof Crash.SimulatedCrash)
        if (crash._tag === "Some" && steps.crashed !== null) {
          return { _tag: "crashed", step: steps.crashed.step, site: steps.crashed.site } as Attempt<A>
        }
        return { _tag: "failed", message: describeCause(exit.cause), errorTag: errorTagOf(exit.cause) } as Attempt<A>
      })
    const noteCrash = (kind: string, step: number, site: string) => {
      const occurrence = steps.sites.slice(0, step).filter((s) => s === site).length
      crashPoints.add(`${kind}: ${site}#${occurrence}`)
      crashes++
      notes.push(`crashed at step ${step} (${site})`)
    }
    const noPlan: Crash.StepPlan = { crashAt: null, interruptAt: null, onInterrupt: null }
    const crashPlan = (op: Operation, onInterrupt: Effect.Effect<void> | null = null): Crash.StepPlan => ({
      crashAt: "crash" in op && op.crash !== null ? op.crash.at : null,
      interruptAt: op.kind === "send" ? op.interruptAt : null,
      onInterrupt
    })

    const service = <A, E>(f: (s: ThreadService.ThreadService) => Effect.Effect<A, E, Services>) =>
      Effect.flatMap(ThreadService.ThreadService, f)

    /**
     * The thread accepts a new message: queue one in a transaction that is then rolled back (behind a run waiting for
     * the client's tool results, which a restart leaves waiting, as a client's message would be).
     */
    const probe = (thread: ThreadId) =>
      within(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const threads = yield* ThreadService.ThreadService
        const store = yield* ThreadStore
        const active = yield* store.findActiveRun(thread).pipe(Effect.orElseSucceed(() => Option.none()))
        const queueBehind = active._tag === "Some" && active.value.status === "waiting"
        const outcome = yield* sql.withTransaction(Effect.zipRight(
          threads.enqueueMessage(Commands.SendMessage.make({ commandId: "cmd_probe" as CommandId, threadId: thread, text: "probe" }), { queueBehind }),
          Effect.fail(new ProbeRollback())
        )).pipe(Effect.flip, Effect.either)
        if (outcome._tag === "Left") return ["crash-safety: the probe message was not rolled back"]
        if (outcome.right._tag === "ProbeRollback") return []
        const e = outcome.right as { readonly _tag: string; readonly message?: string }
        return [`crash-safety: the thread does not accept a new message after restart: ${e._tag}: ${e.message ?? ""}`]
      }))

    /** Drops the incarnation, builds a fresh one on the same file and runs restart recovery (which may crash too). */
    const restart = (kind: string, recoveryCrashAt: number | null) =>
      Effect.gen(function*() {
        const violations: Array<string> = []
        yield* close
        yield* open
        restarts++
        restartMarks.push(providers.map((p) => p.truth.length))
        const recover = service((s) => s.recover())
        let r = yield* attempt({ crashAt: recoveryCrashAt, interruptAt: null, onInterrupt: null }, recover)
        if (r._tag === "crashed") {
          noteCrash(`${kind} recovery`, r.step, r.site)
          yield* close
          yield* open
          restarts++
          restartMarks.push(providers.map((p) => p.truth.length))
          r = yield* attempt(noPlan, recover)
        }
        if (r._tag === "failed") violations.push(`crash-safety: restart recovery failed: ${r.message}`)
        const left = yield* within(Checks.afterRestart(memory)).pipe(Effect.orElseSucceed(() => ["crash-safety: cannot read runs after restart"]))
        violations.push(...left)
        if (threadId !== null) violations.push(...(yield* probe(threadId)))
        return violations
      })

    /**
     * Runs a command under the operation's plan; after a crash restarts and, when the client retries, runs it again
     * with the same command id (without a crash plan).
     */
    const command = <A, E>(
      op: Operation,
      effect: Effect.Effect<A, E, Services>,
      options: { readonly onInterrupt?: Effect.Effect<void>; readonly beforeRetry?: () => void; readonly neverRetry?: boolean } = {}
    ) =>
      Effect.gen(function*() {
        const violations: Array<string> = []
        let r = yield* attempt(crashPlan(op, options.onInterrupt ?? null), effect)
        maxSteps[op.kind] = Math.max(maxSteps[op.kind] ?? 0, steps.steps)
        let retried = false
        if (r._tag === "crashed" && "crash" in op && op.crash !== null) {
          noteCrash(op.kind, r.step, r.site)
          violations.push(...(yield* restart(op.kind, op.crash.inRecoveryAt)))
          if (options.neverRetry !== true && op.crash.retry) {
            options.beforeRetry?.()
            retries++
            retried = true
            notes.push("client retried")
            r = yield* attempt(noPlan, effect)
          }
        }
        return { result: r as Attempt<A>, violations, retried }
      })

    /** The thread's active provider as the scenario set it up: its window, and whether it plays a model API. */
    const activeProvider = (thread: ThreadId) =>
      within(Effect.gen(function*() {
        const store = yield* ThreadStore
        const t = yield* store.getThread(thread)
        if (t._tag === "None" || t.value.activeProviderThreadId === null) return null
        const p = yield* store.getProviderThread(t.value.activeProviderThreadId)
        return p._tag === "Some" ? setupOf.get(p.value.providerInstance) ?? null : null
      })).pipe(
        Effect.orElseSucceed(() => null),
        Effect.map((p) => ({ window: p?.window ?? null, modelApi: p?.modelApi === true }))
      )

    /**
     * The model-visible history: its item ids as one line (to compare before and after a failed offload) and its
     * rendered tokens (an offload never makes it larger).
     */
    const visibleOf = (thread: ThreadId) =>
      within(Effect.gen(function*() {
        const v = yield* (yield* ThreadService.ThreadService).visibleHistory(thread)
        return {
          ids: [v.summary?.id ?? "-", ...v.items.map((i) => i.id)].join(","),
          tokens: (v.summary?.tokens ?? 0) + v.items.reduce((n, i) => n + i.tokens, 0)
        }
      })).pipe(Effect.orElseSucceed(() => ({ ids: "unreadable", tokens: -1 })))

    const interruptHook = (id: number, thread: ThreadId): Effect.Effect<void> =>
      within(Effect.gen(function*() {
        const store = yield* ThreadStore
        const threads = yield* ThreadService.ThreadService
        const active = yield* store.findActiveRun(thread)
        if (active._tag === "None") {
          notes.push("nothing to interrupt")
          return
        }
        const run = yield* threads.interrupt(Commands.InterruptRun.make({ commandId: cid(id, "_interrupt"), threadId: thread, runId: active.value.id }))
        notes.push(`interrupted ${run.id} (${active.value.status} -> ${run.status})`)
      })).pipe(Effect.catchAll((e) => Effect.sync(() => void notes.push(`interrupt failed: ${String(e)}`))))

    const describeFailure = (op: Operation, message: string) =>
      op.kind === "send" || op.kind === "interrupt_in_tool_call" || op.kind === "race" ? `no-wedge: send m${op.id} failed: ${message}` : `command: ${op.kind} failed: ${message}`

    /** Executes one operation: the violations it raised itself and a short description of what happened. */
    const perform = (op: Operation) =>
      Effect.gen(function*() {
        const violations: Array<string> = []
        let result = ""
        switch (op.kind) {
          case "create": {
            const cmd = Commands.CreateThread.make({
              commandId: cid(op.id),
              title: `simulation ${scenario.seed}`,
              providerInstance: op.provider as ProviderInstance
            })
            // The thread is needed to go on: after a crash the client retries, or (without a retry) looks it up.
            const c = yield* command(op, service((s) => s.createThread(cmd)))
            violations.push(...c.violations)
            if (c.result._tag === "crashed") {
              const found = yield* within(Effect.flatMap(ThreadStore, (s) => s.listThreads())).pipe(Effect.orElseSucceed(() => []))
              c.result = found.length > 0 ? { _tag: "ok", value: found[0]!.id } : yield* attempt(noPlan, service((s) => s.createThread(cmd)))
            }
            if (c.result._tag === "ok") {
              threadId = c.result.value
              result = threadId
            } else if (c.result._tag === "failed") violations.push(describeFailure(op, c.result.message))
            const threads = yield* within(Effect.flatMap(ThreadStore, (s) => s.listThreads())).pipe(Effect.orElseSucceed(() => []))
            if (threads.length !== 1) {
              violations.push(`idempotency: CreateThread ${cmd.commandId} made ${threads.length} threads (retried after a crash)`)
            }
            break
          }
          case "send":
          case "interrupt_in_tool_call": {
            const thread = threadId!
            const text = promptText(op.id, op.prompt)
            const cmd = Commands.SendMessage.make({ commandId: cid(op.id), threadId: thread, text })
            const { window, modelApi } = yield* activeProvider(thread)
            script.clear()
            script.enqueue(responseFor(op.id, 1, op.reply, window, modelApi))
            if (op.kind === "send") armFault(op.fault)
            else {
              armFault("interrupt_in_tool_call")
              if (!op.answered) armed.interrupt = "ignore_interrupt"
              onToolCall = interruptHook(op.id, thread)
            }
            const c = yield* command(op, service((s) => s.sendMessage(cmd)), {
              onInterrupt: interruptHook(op.id, thread),
              beforeRetry: () => {
                script.clear()
                script.enqueue(responseFor(op.id, 2, op.reply, window, modelApi))
              }
            })
            armFault(null)
            onToolCall = Effect.void
            violations.push(...c.violations)
            if (c.result._tag === "ok") {
              const r = c.result.value
              const t = r.turnStart
              result = `${r.status}${r.failureReason === null ? "" : ` (${r.failureReason.slice(0, 80)})`}` +
                (t === null ? "" : `; budget ${t.budget.budget}, ${t.mode}, delivered ${t.deliveredItems}, deferred ${t.deferredItems}`) +
                `; gen ${r.nativeGeneration ?? "-"}, used ${r.usedTokens ?? "?"}`
            } else if (c.result._tag === "failed") violations.push(describeFailure(op, c.result.message))
            if (c.retried) {
              const runs = yield* within(Effect.flatMap(ThreadStore, (s) => s.listRuns(thread))).pipe(Effect.orElseSucceed(() => []))
              const same = runs.filter((r) => r.prompt === text)
              if (same.length > 1) {
                violations.push(`idempotency: SendMessage ${cmd.commandId} queued ${same.length} runs (${same.map((r) => r.id).join(", ")}): the retry after the crash ran it again`)
              }
            }
            break
          }
          case "race": {
            const thread = threadId!
            const text = promptText(op.id, op.prompt)
            const cmd = Commands.SendMessage.make({ commandId: cid(op.id), threadId: thread, text })
            const { window, modelApi } = yield* activeProvider(thread)
            script.clear()
            script.enqueue(responseFor(op.id, 1, op.reply, window, modelApi))
            const send = service((s) => Effect.map(s.sendMessage(cmd), (r) => `${r.status}; gen ${r.nativeGeneration ?? "-"}, used ${r.usedTokens ?? "?"}`))
            const offload = service((s) => Effect.map(
              s.offload(Commands.OffloadThread.make({ commandId: cid(op.id, op.outer === "offload" ? "" : "_race"), threadId: thread, keepTokens: op.keepTokens })),
              (r) => r.offloaded ? `offloaded up to seq ${r.cutSeq}` : `not offloaded: ${r.reason ?? ""}`.slice(0, 80)
            ))
            const exitOf = <E>(effect: Effect.Effect<string, E, Services>) => Effect.exit(within(effect))
            const inner = op.with === "compact"
              ? exitOf(service((s) => Effect.map(s.compact(Commands.CompactThread.make({ commandId: cid(op.id, "_race"), threadId: thread })), (r) =>
                r.compacted ? `compacted ${r.usedBefore ?? "?"} -> ${r.usedAfter ?? "?"}` : `not compacted: ${r.reason ?? ""}`.slice(0, 80))))
              : op.with === "offload"
              ? exitOf(offload)
              : op.with === "switch"
              ? exitOf(service((s) => Effect.map(
                s.switchProvider(Commands.SwitchProvider.make({ commandId: cid(op.id, "_race"), threadId: thread, providerInstance: op.to as ProviderInstance })),
                (r) => `handoff ${r.handoffId ?? "none"}`
              )))
              : op.with === "fork"
              // The user stays on the parent: the fork is checked as every thread is, after every step.
              ? exitOf(service((s) => Effect.map(
                s.fork(Commands.ForkThread.make({ commandId: cid(op.id, "_race"), threadId: thread, providerInstance: op.to as ProviderInstance })),
                (r) => `forked at run ${r.atRunSeq}: ${r.itemCount} items -> ${r.threadId}`
              )))
              : op.with === "interrupt"
              ? exitOf(service((s) =>
                Effect.flatMap(
                  s.enqueueMessage(cmd),
                  (run) => Effect.map(
                    s.interrupt(Commands.InterruptRun.make({ commandId: cid(op.id, "_interrupt"), threadId: thread, runId: run.id })),
                    (r) => `${r.status} ${r.stopPoint ?? ""}`
                  )
                )
              ))
              : exitOf(send)
            let raced = op.outer === "send" ? "the turn reached no tool call" : op.outer === "compact" ? "the provider did not compact" : "the summariser was not called"
            const hook = Effect.suspend(() => {
              onToolCall = Effect.void
              onSummariserCall = Effect.void
              onCompact = Effect.void
              return inner.pipe(Effect.map((exit: Exit.Exit<string, { readonly _tag?: string }>) => {
                if (Exit.isSuccess(exit)) raced = exit.value
                else {
                  const tag = errorTagOf(exit.cause)
                  const message = describeCause(exit.cause)
                  raced = `refused ${tag ?? "?"}: ${message}`.slice(0, 140)
                  if (tag === null || !raceRefusals.has(tag)) {
                    violations.push(`race: ${op.with} inside ${op.outer} failed instead of completing or being refused: ${message}`)
                  }
                }
              }))
            })
            if (op.outer === "send") {
              // The turn stops inside its first tool call and runs the hook; no interrupt comes, so the tool
              // finishes and the turn completes.
              armFault("interrupt_in_tool_call")
              onToolCall = hook
            } else if (op.outer === "compact") onCompact = hook
            else onSummariserCall = hook
            const compact = service((s) => Effect.map(s.compact(Commands.CompactThread.make({ commandId: cid(op.id, "_compact"), threadId: thread })), (r) =>
              r.compacted ? `compacted ${r.usedBefore ?? "?"} -> ${r.usedAfter ?? "?"}` : `not compacted: ${r.reason ?? ""}`.slice(0, 80)))
            const c = op.outer === "send" ? yield* command(op, send) : op.outer === "compact" ? yield* command(op, compact) : yield* command(op, offload)
            armFault(null)
            onToolCall = Effect.void
            onSummariserCall = Effect.void
            onCompact = Effect.void
            violations.push(...c.violations)
            if (c.result._tag === "ok") result = `${c.result.value}; ${op.with}: ${raced}`
            else if (c.result._tag === "failed") {
              if (op.outer === "offload" && c.result.errorTag !== null && raceRefusals.has(c.result.errorTag)) {
                result = `offload refused ${c.result.errorTag}: ${c.result.message}`.slice(0, 120) + `; send: ${raced}`
              } else violations.push(describeFailure(op, c.result.message))
            }
            break
          }
          case "interrupt_before_start": {
            const thread = threadId!
            const cmd = Commands.SendMessage.make({ commandId: cid(op.id), threadId: thread, text: promptText(op.id, op.prompt) })
            const c = yield* command(op, service((s) =>
              Effect.flatMap(s.enqueueMessage(cmd), (run) =>
                s.interrupt(Commands.InterruptRun.make({ commandId: cid(op.id, "_interrupt"), threadId: thread, runId: run.id })))
            ), { neverRetry: true })
            violations.push(...c.violations)
            if (c.result._tag === "ok") result = `${c.result.value.status} ${c.result.value.stopPoint ?? ""}`
            else if (c.result._tag === "failed") violations.push(describeFailure(op, c.result.message))
            break
          }
          case "queue_behind_wait": {
            const thread = threadId!
            const ahead = Commands.SendMessage.make({ commandId: cid(op.id), threadId: thread, text: promptText(op.id, op.prompt), tools: [clientTool] })
            const queued = Commands.SendMessage.make({ commandId: cid(op.id, "_queued"), threadId: thread, text: promptText(op.id + 1, 12) })
            script.clear()
            script.enqueue({
              items: [
                produced("assistant_message", `a${op.id}: reading`, { messageId: `msg_${op.id}_wait` }),
                produced("tool_call", JSON.stringify({ path: `src/file${op.id}.ts` }), { toolCallId: `call_${op.id}_client`, toolName: clientTool.name, messageId: `msg_${op.id}_wait` })
              ]
            })
            const c = yield* command(op, service((s) =>
              Effect.gen(function*() {
                const a = yield* s.sendMessage(ahead)
                const b = yield* s.enqueueMessage(queued, { queueBehind: true })
                const ended: Array<string> = []
                for (const [runId, suffix] of op.queuedFirst ? [[b.id, "_iq"], [a.runId, "_ia"]] as const : [[a.runId, "_ia"], [b.id, "_iq"]] as const) {
                  const run = yield* s.interrupt(Commands.InterruptRun.make({ commandId: cid(op.id, suffix), threadId: thread, runId }))
                  ended.push(`${run.status} ${run.stopPoint ?? ""}`)
                }
                return `${a.status}, then ${ended.join(", ")}`
              })
            ), { neverRetry: true })
            violations.push(...c.violations)
            if (c.result._tag === "ok") result = c.result.value
            else if (c.result._tag === "failed") violations.push(describeFailure(op, c.result.message))
            // After a crash the client interrupts what the restart left unfinished (a waiting run stays waiting).
            for (let k = 0; k < 3; k++) {
              const open = yield* within(Effect.flatMap(ThreadStore, (st) => st.findFirstUnfinishedRun(thread))).pipe(Effect.orElseSucceed(() => Option.none()))
              if (open._tag === "None") break
              const left = yield* attempt(noPlan, service((s) => s.interrupt(Commands.InterruptRun.make({ commandId: cid(op.id, `_left${k}`), threadId: thread, runId: open.value.id }))))
              if (left._tag === "failed") violations.push(describeFailure(op, left.message))
              result += `; left ${open.value.status}, interrupted`
            }
            break
          }
          case "switch": {
            const thread = threadId!
            const cmd = Commands.SwitchProvider.make({ commandId: cid(op.id), threadId: thread, providerInstance: op.to as ProviderInstance })
            const c = yield* command(op, service((s) => s.switchProvider(cmd)))
            violations.push(...c.violations)
            if (c.result._tag === "ok") result = `handoff ${c.result.value.handoffId ?? "none"}`
            else if (c.result._tag === "failed") violations.push(describeFailure(op, c.result.message))
            break
          }
          case "compact": {
            const thread = threadId!
            const cmd = Commands.CompactThread.make({ commandId: cid(op.id), threadId: thread })
            armFault(op.fault)
            const c = yield* command(op, service((s) => s.compact(cmd)))
            armFault(null)
            violations.push(...c.violations)
            if (c.result._tag === "ok") {
              const r = c.result.value
              result = r.compacted
                ? `compacted ${r.usedBefore ?? "?"} -> ${r.usedAfter ?? "?"}, delivered ${r.deliveredItems}, still deferred ${r.stillDeferred}`
                : `not compacted: ${r.reason ?? ""}`.slice(0, 100)
            } else if (c.result._tag === "failed") violations.push(describeFailure(op, c.result.message))
            break
          }
          case "offload": {
            const thread = threadId!
            const cmd = Commands.OffloadThread.make({ commandId: cid(op.id), threadId: thread, keepTokens: op.keepTokens })
            const before = yield* visibleOf(thread)
            summariser.failWith(op.summariserFails ? "simulated summariser outage" : null)
            const c = yield* command(op, service((s) => s.offload(cmd)))
            summariser.failWith(null)
            violations.push(...c.violations)
            if (c.result._tag === "ok") {
              const r = c.result.value
              result = r.offloaded
                ? `offloaded up to seq ${r.cutSeq}: ${r.coveredItems} items (${r.coveredTokens} tok) -> summary ${r.summaryTokens} tok, ` +
                  `kept ${r.keptItems}, handoffs superseded ${r.supersededHandoffIds.length}`
                : `not offloaded: ${r.reason ?? ""}`.slice(0, 100)
              const after = yield* visibleOf(thread)
              // Invariant 8: an offload never makes the model-visible history larger (a replayed receipt changes nothing).
              if (after.tokens > before.tokens) {
                violations.push(`truth: /offload made the visible history larger (${before.tokens} -> ${after.tokens} tokens)`)
              }
            } else if (c.result._tag === "failed") {
              // The summariser failed (an outage, an input over its window, a summary not smaller than its input).
              if (c.result.errorTag === "OffloadFailed") {
                result = `summariser failed; history unchanged: ${c.result.message}`.slice(0, 140)
                const after = yield* visibleOf(thread)
                if (before.ids !== after.ids) violations.push(`offload: a failed summariser changed the visible history (${before.ids} -> ${after.ids})`)
              } else violations.push(describeFailure(op, c.result.message))
            }
            break
          }
          case "fork": {
            const parent = threadId!
            const cmd = Commands.ForkThread.make({
              commandId: cid(op.id),
              threadId: parent,
              ...(op.provider === null ? {} : { providerInstance: op.provider as ProviderInstance })
            })
            const countThreads = within(Effect.map(Effect.flatMap(ThreadStore, (s) => s.listThreads()), (ts) => ts.length))
              .pipe(Effect.orElseSucceed(() => -1))
            const before = yield* countThreads
            const c = yield* command(op, service((s) => s.fork(cmd)))
            violations.push(...c.violations)
            if (c.result._tag === "ok") {
              const r = c.result.value
              parents.push(parent)
              threadId = r.threadId as ThreadId
              result = `forked at run ${r.atRunSeq}: ${r.itemCount} items (${r.tokens} tok) -> ${r.threadId}`
            } else if (c.result._tag === "failed") violations.push(describeFailure(op, c.result.message))
            // Without a retry the client does not know whether the fork exists and stays on the parent.
            if (c.retried && (yield* countThreads) > before + 1) {
              violations.push(`idempotency: ForkThread ${cmd.commandId} made ${(yield* countThreads) - before} threads (retried after a crash)`)
            }
            break
          }
          case "merge": {
            const fork = threadId!
            const parent = parents.at(-1)
            if (parent === undefined) {
              result = "not in a fork: nothing to merge"
              break
            }
            const cmd = Commands.MergeBack.make({ commandId: cid(op.id), forkThreadId: fork })
            if (op.behindWait) {
              // The parent's run waits on a client tool call while the fork is merged into it.
              script.clear()
              script.enqueue({
                items: [
                  produced("assistant_message", `m${op.id}: reading`, { messageId: `msg_${op.id}_mwait` }),
                  produced("tool_call", JSON.stringify({ path: `src/merge${op.id}.ts` }), { toolCallId: `call_${op.id}_mclient`, toolName: clientTool.name, messageId: `msg_${op.id}_mwait` })
                ]
              })
              const ahead = Commands.SendMessage.make({ commandId: cid(op.id, "_ahead"), threadId: parent, text: promptText(op.id, 12), tools: [clientTool] })
              const sent = yield* attempt(noPlan, service((s) => s.sendMessage(ahead)))
              if (sent._tag === "failed") violations.push(describeFailure(op, sent.message))
            }
            const copyRuns = within(Effect.map(Effect.flatMap(ThreadStore, (s) => s.listLinks(parent)), (ls) =>
              ls.filter((l) => l.kind === "merge" && l.parentThreadId === parent).length)).pipe(Effect.orElseSucceed(() => -1))
            const before = yield* copyRuns
            const c = yield* command(op, service((s) => s.mergeBack(cmd)))
            violations.push(...c.violations)
            if (c.result._tag === "ok") {
              const r = c.result.value
              result = r.runId === null
                ? `nothing new to merge (through run ${r.throughRunSeq})`
                : `merged runs ${r.fromRunSeq + 1}-${r.throughRunSeq}: ${r.itemCount} items (${r.tokens} tok)`
              if (op.leave) threadId = parents.pop()!
            } else if (c.result._tag === "failed") violations.push(describeFailure(op, c.result.message))
            const after = yield* copyRuns
            if (after > before + 1) violations.push(`idempotency: MergeBack ${cmd.commandId} merged ${after - before} times`)
            // The parent's run in progress is interrupted (after a crash: whatever the restart left unfinished).
            for (let k = 0; op.behindWait && k < 3; k++) {
              const open = yield* within(Effect.flatMap(ThreadStore, (st) => st.findFirstUnfinishedRun(parent))).pipe(Effect.orElseSucceed(() => Option.none()))
              if (open._tag === "None") break
              const left = yield* attempt(noPlan, service((s) => s.interrupt(Commands.InterruptRun.make({ commandId: cid(op.id, `_mleft${k}`), threadId: parent, runId: open.value.id }))))
              if (left._tag === "failed") violations.push(describeFailure(op, left.message))
              result += `; parent's ${open.value.status} run interrupted`
            }
            break
          }
          case "restart": {
            const change = op.reconfigure
            if (change !== undefined) {
              // The process comes back with a new configuration of one provider instance; its sessions stay.
              const provider = providers.find((p) => p.instance === change.provider)
              provider?.reconfigure({ model: change.model, contextWindow: change.window, autoCompactThreshold: change.autoCompactThreshold })
              const setup = setupOf.get(change.provider)
              if (setup !== undefined) setupOf.set(change.provider, { ...setup, window: change.window, autoCompactThreshold: change.autoCompactThreshold })
            }
            violations.push(...(yield* restart("restart", null)))
            result = change === undefined ? "restarted" : `restarted; ${change.provider} now ${change.model}, window ${change.window}`
            break
          }
        }
        return { violations, result }
      })

    // Every check of a step reads each thread's record once (`Checks.readRecords`: the append-only items and events
    // only after what the earlier steps read, under the audit `Checks.installAudit` installs) and checks it in memory.
    const check = within(Effect.gen(function*() {
      const observed: InvariantChecks.Observed = {
        turns: providers.flatMap((p) => p.received.flatMap((r) => r.type === "turn" ? [r] : [])),
        injections: providers.flatMap((p) => p.received.flatMap((r) => r.type === "inject" ? [r] : []))
      }
      const read = yield* Checks.readRecords(null, memory, providers.map((p) => p.instance))
      const violations: Array<string> = [...read.violations]
      const truths = providers.map((p) => p.truth)
      const received = providers.map((p) => p.received)
      for (const r of read.records) violations.push(...InvariantChecks.checkRecord(r, { observed }))
      const restartsOf = providers.map((_, i) => restartMarks.map((m) => m[i]!))
      for (const r of read.records) violations.push(...ProviderTruthChecks.checkRecord(r, truths, restartsOf))
      for (const r of read.records) violations.push(...ProviderTruthChecks.checkOffloadFreesLaneRecord(r, received))
      for (const r of read.records) violations.push(...ProviderTruthChecks.checkCompactionOrderRecord(r, received))
      for (const r of read.records) violations.push(...ProviderTruthChecks.checkBudgetRecord(r, truths))
      for (const r of read.records) violations.push(...ProviderTruthChecks.checkTrustedUsageRecord(r, truths))
      providers.forEach((p, i) => violations.push(...ProviderTruthChecks.checkCalibrationRecord(p.instance, p.tokenScale, read.calibrations[i]!)))
      violations.push(...Checks.check(read.records, providers))
      return violations
    })).pipe(Effect.catchAll((e) => Effect.succeed([`checks: could not read the record: ${String(e)}`])))

    // Orchestrator log lines (e.g. untrusted usage reports) go to the trace only, whichever loggers the caller has
    // installed (`pnpm sim` logs to stderr): the trace logger replaces them all.
    const traceLogger = Logger.make(({ logLevel, message }) =>
      void notes.push(`${logLevel.label}: ${Array.isArray(message) ? message.join(" ") : String(message)}`))

    /**
     * The feed of all threads (`EventFeed.replayAll` from the start, what `/events?follow=false` serves) against the
     * log read directly in the feed's order (`(xact_id, global_seq)` on Postgres, `global_seq` on SQLite): every
     * stored event once, in that order. A violation `feed: ...` names how many it replayed of how many stored.
     */
    const feedCheck = Effect.scoped(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const feed = yield* EventFeed.make({})
      const replayed = Chunk.toArray(yield* Stream.runCollect(yield* feed.replayAll({ afterGlobalSeq: 0 }))).map((e) => e.eventId as string)
      const stored = (yield* sql.onDialectOrElse({
        pg: () => sql<{ readonly eventId: string }>`SELECT event_id FROM thread_events ORDER BY xact_id, global_seq`,
        orElse: () => sql<{ readonly eventId: string }>`SELECT event_id FROM thread_events ORDER BY global_seq`
      })).map((r) => r.eventId)
      return replayed.length === stored.length && replayed.every((id, i) => id === stored[i])
        ? []
        : [`feed: the feed of all threads replayed ${replayed.length} events of the ${stored.length} stored${replayed.length === stored.length ? ", out of order" : ""}`]
    })).pipe(Effect.orDie)

    // ---- the run
    const run = Effect.gen(function*() {
      yield* open
      let violations: ReadonlyArray<string> = []
      let failedAt: number | null = null
      let executed = 0
      for (const [index, op] of scenario.ops.entries()) {
        if (op.kind !== "create" && threadId === null) break
        notes.length = 0
        const done = yield* perform(op)
        executed++
        const found = [...done.violations, ...(yield* check)]
        trace.push(`${String(index).padStart(3)}  ${formatOperation(op)}  =>  ${done.result}${notes.length > 0 ? `  [${notes.join("; ")}]` : ""}`)
        if (found.length > 0) {
          violations = found
          failedAt = index
          break
        }
      }

      // The event log as clients read it: the feed of all threads replays every stored event once, in its order.
      if (violations.length === 0) violations = yield* within(feedCheck)

      const summary = yield* within(Effect.gen(function*() {
        const store = yield* ThreadStore
        const sql = yield* SqlClient.SqlClient
        const runs: Record<string, number> = {}
        const deliveries: Record<string, number> = {}
        let handoffs = 0
        let nativeThreads = 0
        for (const t of yield* store.listThreads()) {
          for (const r of yield* store.listRuns(t.id)) runs[r.status] = (runs[r.status] ?? 0) + 1
          for (const d of yield* store.listDeliveriesOfThread(t.id)) deliveries[d.status] = (deliveries[d.status] ?? 0) + 1
          handoffs += (yield* store.listHandoffs(t.id)).length
          for (const p of yield* store.listProviderThreads(t.id)) nativeThreads += (yield* store.listNativeThreads(p.id)).length
        }
        if (options.digest === false && options.keepDump !== true) return { runs, deliveries, handoffs, nativeThreads, dump: null }
        // Every table but the migrations', `drivers` (this process's host and pid: not the simulated world),
        // `sim_audit` (the checks' own, empty unless a check failed) and `sim_changed` (the checks' change log).
        const tables = yield* sql.onDialectOrElse({
          pg: () =>
            sql<{ readonly name: string }>`SELECT table_name AS name FROM information_schema.tables
              WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
              AND table_name NOT LIKE 'effect_sql_%' AND table_name NOT IN ('drivers', 'sim_audit', 'sim_changed') ORDER BY table_name`,
          orElse: () =>
            sql<{ readonly name: string }>`SELECT name FROM sqlite_master WHERE type = 'table'
              AND name NOT LIKE 'sqlite_%' AND name NOT LIKE 'effect_sql_%' AND name NOT IN ('drivers', 'sim_audit', 'sim_changed') ORDER BY name`
        })
        const parts: Array<string> = []
        for (const { name } of tables) {
          const rows = yield* sql.onDialectOrElse({
            // No rowid on Postgres: rows in the canonical order of their JSON.
            // `thread_events.xact_id` (the writing transaction's id, see migration 0010) is the server's counter, not
            // the simulated world: left out, like `drivers`.
            pg: () =>
              Effect.map(sql`SELECT * FROM ${sql(name)}`, (rs) =>
                rs.map((row) => JSON.stringify(Object.fromEntries(Object.entries(row).filter(([column]) => column !== "xactId")))).sort()),
            orElse: () => Effect.map(sql`SELECT * FROM ${sql(name)} ORDER BY rowid`, (rs) => rs.map((row) => JSON.stringify(row)))
          })
          parts.push(`## ${name}`, ...rows)
        }
        for (const p of providers) parts.push(`## received by ${p.instance}`, ...p.received.map((r) => JSON.stringify(r)))
        return { runs, deliveries, handoffs, nativeThreads, dump: parts.join("\n") }
      })).pipe(Effect.orDie)

      return {
        seed: scenario.seed,
        executed,
        violations,
        failedAt,
        crashes,
        crashPoints: [...crashPoints].sort(),
        trace,
        digest: summary.dump === null ? "" : createHash("sha256").update(summary.dump).digest("hex"),
        dump: options.keepDump === true ? summary.dump : null,
        stats: {
          runs: summary.runs,
          deliveries: summary.deliveries,
          handoffs: summary.handoffs,
          nativeThreads: summary.nativeThreads,
          restarts,
          retries,
          faultsFired,
          overflowsRejected: providers.reduce((n, p) => n + p.truth.filter((t) => !t.accepted && t.operation !== "output").length, 0),
          outputStopped: providers.reduce((n, p) => n + p.truth.filter((t) => t.operation === "output" && !t.accepted).length, 0),
          interruptsLanded,
          maxSteps
        }
      } satisfies Outcome
    })
    // No tracing spans (every SQL statement would make one): nothing in the simulation reads them, and they cost
    // about 1% of a run (CPU profile of `pnpm sim --seeds 4 --seed-start 1900 --steps 40`).
    return yield* run.pipe(
      Effect.ensuring(Effect.zipRight(close, disconnect)),
      Effect.locally(FiberRef.currentLoggers, HashSet.make(traceLogger)),
      Effect.withTracerEnabled(false)
    )
  })
