/**
 * Harness: a complete orchestrator on a real SQLite database (a file or `:memory:`) with scripted provider
 * instances, sequential ids and the real tokenizer — the Layer graph tests and benchmarks run against.
 */
import { Commands, type CommandId, type ConcurrentModification, type ContextUsage, PersistenceError, type ProviderInstance, type ThreadId } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { IdGenerator, InvariantChecks, OrchestratorConfig, OrchestratorLayer, ThreadService } from "@baton/orchestration"
import { Database, EventFeed, ThreadStore } from "@baton/persistence"
import { type ProviderAdapter, ProviderRegistry, ScriptedProvider, ScriptedSummariser } from "@baton/providers"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Context, Deferred, Effect, Layer, Redacted, Stream } from "effect"
import * as Produced from "./internal/Produced.js"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

export interface HarnessProvider {
  readonly name: string
  readonly window: number | null
  readonly autoCompactThreshold?: number | null
  readonly inject: boolean
  /** Offer `readThread` (default true). */
  readonly readThread?: boolean
  readonly faults?: ScriptedProvider.FaultPlan
  /** A resumed native thread re-emits its history with the next turn (see `ScriptedConfig.replayOnResume`). */
  readonly replayOnResume?: boolean
  /** The provider's tokens per Baton token (default 1); see `ScriptedConfig.tokenScale`. */
  readonly tokenScale?: number
  /** Tokens every native thread holds that Baton never sees (default 0); see `ScriptedConfig.requestOverhead`. */
  readonly requestOverhead?: number
  /** Whether the window is enforced (default true); see `ScriptedConfig.enforceWindow`. */
  readonly enforceWindow?: boolean
  /** How overflows are signalled (default a typed code); see `ScriptedConfig.overflowSignal`. */
  readonly overflowSignal?: "code" | "text"
  /** Prices per million tokens (default none); see `ScriptedConfig.prices`. */
  readonly prices?: ScriptedProvider.ScriptedConfig["prices"]
}

export interface Harness {
  readonly layer: ReturnType<typeof makeLayer>
  readonly providers: Readonly<Record<string, ScriptedProvider.ScriptedProvider>>
  readonly script: ScriptedProvider.Script
  readonly counter: TokenCounter.TokenCounterShape
  /** The `/offload` summariser (deterministic digest; `failWith` makes it fail). */
  readonly summariser: ScriptedSummariser.ScriptedSummariser
}

/**
 * The `db` that selects the real Postgres server (a fresh schema per Layer build, dropped after) instead of a SQLite
 * file: see `Database.layerPgIsolated` (`BATON_TEST_DATABASE_URL`, default the local server's `test` database).
 */
export const postgres = "postgres"

/** The dialects every storage and orchestration core suite runs on: `[label, db]` pairs for `make` / `makeLayer`. */
export const dialects = [["SQLite", ":memory:"], ["Postgres", postgres]] as const

let defaultDb = ":memory:"
/**
 * Sets the database `make` uses when a test names none (`:memory:` or `postgres`): a suite written once runs on
 * every dialect as `describe.each(Harness.dialects)(…, (_, db) => { beforeAll(() => Harness.useDb(db)); … })`
 * (vitest runs a file's blocks one after another).
 */
export const useDb = (db: string) => void (defaultDb = db)
/** The database `make` uses when a test names none (see `useDb`). */
export const currentDb = () => defaultDb

/**
 * The orchestrator over `adapters` on the SQLite database `db` (or `postgres`) (a path or `:memory:`), with sequential ids and
 * `config` over the defaults — for tests that wrap an adapter (e.g. to hold a turn open) or restart on the same file
 * (a second process on the same database needs its own `idNamespace` for the sequential ids). `wrapStore`: the
 * orchestrator's `ThreadStore` made from the real one (e.g. `dyingStore`, for a process that dies mid-run).
 */
export const makeLayer = (
  adapters: ReadonlyArray<ProviderAdapter.ProviderAdapterShape>,
  counter: TokenCounter.TokenCounterShape,
  db: string,
  config: Partial<OrchestratorConfig.OrchestratorConfigShape>,
  idNamespace = "",
  summariser: ScriptedSummariser.ScriptedSummariser = ScriptedSummariser.make(counter),
  wrapStore?: (real: ThreadStore) => ThreadStore
) =>
  (wrapStore === undefined ? OrchestratorLayer.layer : EventFeed.EventFeed.Default.pipe(
    Layer.provideMerge(OrchestratorLayer.services),
    Layer.provideMerge(Layer.effect(ThreadStore, Effect.map(ThreadStore, wrapStore)).pipe(Layer.provide(ThreadStore.Default))),
    Layer.provide(OrchestratorLayer.eventIds)
  )).pipe(
    Layer.provideMerge(
      db === postgres
        ? Database.layerPgIsolated()
        : db.startsWith("postgres://")
        ? Database.layerPg({ url: db, maxConnections: 4 })
        : Database.layerSqlite(db)
    ),
    Layer.provideMerge(ProviderRegistry.layer(adapters)),
    Layer.provideMerge(ScriptedSummariser.layer(summariser)),
    Layer.provideMerge(Layer.succeed(TokenCounter.TokenCounter, counter)),
    Layer.provideMerge(IdGenerator.layerSequential(idNamespace)),
    Layer.provideMerge(OrchestratorConfig.layer(config))
  )

/**
 * Builds a harness. `db` defaults to `:memory:`. One token counter is shared (it is pure). `idNamespace` prefixes
 * the sequential ids (default none): a second harness on the same database file (a restart) needs its own.
 */
export const make = (
  providers: ReadonlyArray<HarnessProvider>,
  options: {
    readonly db?: string
    readonly config?: Partial<OrchestratorConfig.OrchestratorConfigShape>
    readonly idNamespace?: string
    /** The scripted summariser's configuration (input window, verbosity; see `ScriptedSummariserConfig`). */
    readonly summariser?: ScriptedSummariser.ScriptedSummariserConfig
  } = {}
): Harness => {
  const counter = sharedCounter()
  const script = ScriptedProvider.makeScript()
  const adapters = providers.map((p) =>
    ScriptedProvider.make({
      instance: p.name as ProviderInstance,
      contextWindow: p.window,
      autoCompactThreshold: p.autoCompactThreshold ?? null,
      injectHistory: p.inject,
      ...(p.readThread === undefined ? {} : { readThread: p.readThread }),
      ...(p.faults === undefined ? {} : { faults: p.faults }),
      ...(p.replayOnResume === undefined ? {} : { replayOnResume: p.replayOnResume }),
      ...(p.tokenScale === undefined ? {} : { tokenScale: p.tokenScale }),
      ...(p.requestOverhead === undefined ? {} : { requestOverhead: p.requestOverhead }),
      ...(p.enforceWindow === undefined ? {} : { enforceWindow: p.enforceWindow }),
      ...(p.overflowSignal === undefined ? {} : { overflowSignal: p.overflowSignal }),
      ...(p.prices === undefined ? {} : { prices: p.prices })
    }, script, counter)
  )
  const summariser = ScriptedSummariser.make(counter, options.summariser)
  return {
    layer: makeLayer(adapters, counter, options.db ?? defaultDb, options.config ?? {}, options.idNamespace ?? "", summariser),
    providers: Object.fromEntries(adapters.map((a) => [a.instance, a])),
    script,
    counter,
    summariser
  }
}

let counterInstance: TokenCounter.TokenCounterShape | undefined
const sharedCounter = () => (counterInstance ??= TokenCounter.make())

/**
 * `adapter` with its turns held at a gate: each `startTurn` waits until `open` has run, then plays the adapter's turn.
 * For tests that queue runs behind a turn in flight, or change the world (a fault, a second process) meanwhile.
 */
export const gated = (adapter: ProviderAdapter.ProviderAdapterShape) =>
  Effect.map(Deferred.make<void>(), (gate) => ({
    adapter: { ...adapter, startTurn: (input) => Stream.unwrap(Effect.as(Deferred.await(gate), adapter.startTurn(input))) } satisfies ProviderAdapter.ProviderAdapterShape,
    open: Deferred.succeed(gate, undefined)
  }))

/** What the store's methods fail with. */
export type StoreError = PersistenceError | ConcurrentModification

/**
 * A `ThreadStore` over `real` whose every call goes through `intercept(name, args, call)`: `call()` is the real
 * method's effect; `intercept` returns it, or another effect in its place (a failure, a defect, a delay), to inject
 * faults at a chosen store call. One forwarder for every method cannot name each method's error and requirements.
 */
export const interceptStore = (
  intercept: (
    name: string,
    args: ReadonlyArray<unknown>,
    call: () => Effect.Effect<unknown, StoreError>
  ) => Effect.Effect<unknown, StoreError>
) =>
(real: ThreadStore): ThreadStore => {
  const wrapped: Record<string, unknown> = {}
  for (const [name, value] of Object.entries(real)) {
    if (typeof value !== "function") {
      wrapped[name] = value
      continue
    }
    const method = value as (...args: ReadonlyArray<unknown>) => Effect.Effect<unknown, unknown, unknown>
    // @effect-diagnostics-next-line anyUnknownInErrorContext:off
    wrapped[name] = (...args: ReadonlyArray<unknown>) => Effect.suspend(() => intercept(name, args, () => method(...args) as Effect.Effect<unknown, StoreError>))
  }
  return ThreadStore.make(wrapped as unknown as Parameters<typeof ThreadStore.make>[0])
}

/**
 * A `ThreadStore` over `real` for a process that dies (a crash, or `kill -9`): once `dead.now` is set, every call
 * fails (a `PersistenceError` naming the method) before it reaches the database, so nothing the process does after
 * that point is durable — its shutdown (interrupting the runs in flight) and its driver's `stopped` mark included.
 * The durable state is exactly what it committed before, as after a real crash between two units of work.
 */
export const dyingStore = (dead: { now: boolean }) =>
  interceptStore((name, _args, call) => dead.now ? Effect.fail(new PersistenceError({ operation: name, detail: "the process died" })) : call())

/** A scripted response of one assistant message of about `tokens` tokens (ASCII words), reporting `usage`. */
export const reply = (tokens: number, usage?: ContextUsage | null) => ({
  items: [{
    kind: "assistant_message" as const,
    text: words(tokens),
    toolCallId: null,
    toolName: null,
    messageId: null,
    isError: false,
    toolCallState: null
  }],
  ...(usage === undefined ? {} : { usage })
})

/** One item a scripted provider produces: `kind` and `text`, everything else empty unless given in `extra`. */
export const produced = Produced.produced

/**
 * Runs `f` with a database that outlives one Layer build (restart tests): on SQLite the path of a file in a fresh
 * temporary directory, removed afterwards; when the current dialect is Postgres (`useDb("postgres")`), the URL of a
 * fresh schema on the test server, dropped afterwards.
 */
export const withDbFile = <A, E, R>(f: (file: string) => Effect.Effect<A, E, R>) =>
  defaultDb === postgres
    ? Effect.scoped(Effect.flatMap(
      Layer.build(Database.layerPgSchema()),
      (context) => f(Context.get(context, Database.PgSchemaUrl))
    ))
    : Effect.acquireUseRelease(
      Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-test-"))),
      (dir) => f(Path.join(dir, "baton.sqlite")),
      (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
    )

/** About `tokens` tokens of text: distinct short words, one token each with o200k_base plus a leading space. */
export const words = (tokens: number) => {
  const out: Array<string> = []
  for (let i = 0; i < tokens; i++) out.push(vocabulary[i % vocabulary.length]!)
  return out.join(" ")
}
const vocabulary = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "green", "table", "light", "north", "south"]

let n = 0
const cid = () => `cmd_${++n}` as CommandId

/** Short-hands over ThreadService for tests: commands with fresh command ids, and the invariant check. */
export const ops = Effect.gen(function*() {
  const service = yield* ThreadService.ThreadService
  const store = yield* ThreadStore
  return {
    service,
    store,
    create: (provider: string) =>
      service.createThread(Commands.CreateThread.make({ commandId: cid(), title: "t", providerInstance: provider as ProviderInstance })),
    send: (threadId: ThreadId, text: string) => service.sendMessage(Commands.SendMessage.make({ commandId: cid(), threadId, text })),
    switchTo: (threadId: ThreadId, provider: string) =>
      service.switchProvider(Commands.SwitchProvider.make({ commandId: cid(), threadId, providerInstance: provider as ProviderInstance })),
    compact: (threadId: ThreadId) => service.compact(Commands.CompactThread.make({ commandId: cid(), threadId })),
    fork: (threadId: ThreadId, options: { readonly atRunSeq?: number; readonly provider?: string } = {}) =>
      service.fork(Commands.ForkThread.make({
        commandId: cid(),
        threadId,
        ...(options.atRunSeq === undefined ? {} : { atRunSeq: options.atRunSeq }),
        ...(options.provider === undefined ? {} : { providerInstance: options.provider as ProviderInstance })
      })),
    merge: (forkThreadId: ThreadId) => service.mergeBack(Commands.MergeBack.make({ commandId: cid(), forkThreadId })),
    offload: (threadId: ThreadId, keepTokens?: number) =>
      service.offload(Commands.OffloadThread.make({ commandId: cid(), threadId, ...(keepTokens === undefined ? {} : { keepTokens }) })),
    interruptBeforeStart: (threadId: ThreadId, text: string) =>
      Effect.gen(function*() {
        const run = yield* service.enqueueMessage(Commands.SendMessage.make({ commandId: cid(), threadId, text }))
        return yield* service.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: run.id }))
      }),
    check: (threadId: ThreadId, h: Harness) =>
      InvariantChecks.check(threadId, {
        observed: {
          turns: Object.values(h.providers).flatMap((p) => p.received.flatMap((r) => r.type === "turn" ? [r] : [])),
          injections: Object.values(h.providers).flatMap((p) => p.received.flatMap((r) => r.type === "inject" ? [r] : []))
        }
      })
  }
})

/**
 * Another application's write transaction on the test Postgres server, open until the scope closes: a transaction
 * holding a transaction id (and no lock on any of Baton's relations) in database `postgres`, beside the test
 * database, as a long batch job of another application on a shared server. It holds back the server's snapshot
 * horizon (`pg_snapshot_xmin`), which stopped Baton's feed of all threads before the feed learnt to tell other
 * databases' transactions from its own (`EventFeed`, its own horizon). Fails with `SqlError` when that database is
 * unreachable.
 */
export const foreignTransaction = Effect.gen(function*() {
  const url = new URL(Database.testPgUrl())
  url.pathname = "/postgres"
  const other = Context.get(yield* Layer.build(PgClient.layer({ url: Redacted.make(url.toString()), maxConnections: 1 })), SqlClient.SqlClient)
  const opened = yield* Deferred.make<void>()
  const release = yield* Deferred.make<void>()
  yield* Effect.forkScoped(other.withTransaction(Effect.gen(function*() {
    yield* other`SELECT pg_current_xact_id()`
    yield* Deferred.succeed(opened, undefined)
    yield* Deferred.await(release)
  })).pipe(Effect.orDie))
  yield* Effect.addFinalizer(() => Deferred.succeed(release, undefined))
  yield* Deferred.await(opened)
})
