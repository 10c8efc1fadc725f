#!/usr/bin/env node
/**
 * `baton`: the command-line app. Assembles the Layer graph (SQLite under the data directory, scripted providers,
 * the orchestrator) and runs one command. Bad input (a missing file, a malformed transcript, an unknown provider,
 * an unknown thread, `baton demo` without the sample transcripts, a command line that does not parse) prints one line
 * `baton: …` naming the problem and exits 2,
 * before anything is written; an invariant violation in a replay exits 1. stdout carries only the command's output
 * (with `--json`, one JSON document); log lines go to stderr. SIGINT/SIGTERM stop a replay once the run in flight is
 * recorded, and exit 130/143 (see CliRuntime). With `--server URL` (or `BATON_SERVER`) the thread commands and
 * `send`, `switch`, `compact`, `offload`, `events` talk to a Baton server over HTTP instead (see Remote).
 */
import { Args, Command, HelpDoc, Options, ValidationError } from "@effect/cli"
import { Cause, Console, Effect, Either, Layer, Option, Redacted } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { Database, ThreadStore } from "@baton/persistence"
import { ProviderSpec } from "@baton/providers"
import { RunCosts, ThreadQuery } from "@baton/orchestration"
import { Server, ServerConfig } from "@baton/server"
import { Commands, type ThreadId } from "@baton/contracts"
import type { HttpClient } from "@effect/platform"
import type { SqlClient } from "@effect/sql"
import { NodeHttpClient } from "@effect/platform-node"
import * as Replay from "./Replay.js"
import * as CliRuntime from "./CliRuntime.js"
import * as Format from "./Format.js"
import * as Remote from "./Remote.js"
import * as UsageError from "./UsageError.js"

/** A thread's id argument (`thr_…`, as `baton threads` lists them). */
const threadIdArg = Args.text({ name: "thread-id" }).pipe(Args.withDescription("the thread's id (thr_…, as `baton threads` lists them)"))

const dbOption = Options.text("db").pipe(
  Options.withDescription("SQLite file (default: $BATON_DATA_DIR/baton.sqlite, else ./.baton/baton.sqlite)"),
  Options.optional
)
const dataDirOption = Options.text("data-dir").pipe(
  Options.withDescription("data directory holding baton.sqlite (default: $BATON_DATA_DIR or ./.baton)"),
  Options.optional
)

const databaseUrlOption = Options.text("database-url").pipe(
  Options.withDescription("Postgres URL, e.g. postgres://user@127.0.0.1:5432/baton (default: $BATON_DATABASE_URL; --db/--data-dir win)"),
  Options.optional
)

/** The database options every database command takes (`--db`, `--data-dir`, `--database-url`). */
interface DatabaseOptions {
  readonly db: Option.Option<string>
  readonly dataDir: Option.Option<string>
  readonly databaseUrl: Option.Option<string>
}

/**
 * A command's database options, or when it gives none of them, those given before the command
 * (`baton --data-dir DIR threads` as `baton threads --data-dir DIR`); the command's own never mix with the root's.
 */
const databaseOptions = <O extends DatabaseOptions>(o: O) =>
  Effect.map(root, (g): O =>
    Option.isSome(o.db) || Option.isSome(o.dataDir) || Option.isSome(o.databaseUrl)
      ? o
      : { ...o, db: g.db, dataDir: g.dataDir, databaseUrl: g.databaseUrl })

const resolveDb = (db: Option.Option<string>, dataDir: Option.Option<string>) =>
  Database.resolveSqlitePath({ db: Option.getOrUndefined(db), dataDir: Option.getOrUndefined(dataDir) })

/** The Postgres URL a command uses (`--database-url`, else `BATON_DATABASE_URL` unless `--db`/`--data-dir`), or SQLite. */
const resolveDatabaseUrl = (url: Option.Option<string>, db: Option.Option<string>, dataDir: Option.Option<string>) =>
  Database.configuredDatabaseUrl({
    databaseUrl: Option.getOrUndefined(url),
    db: Option.getOrUndefined(db),
    dataDir: Option.getOrUndefined(dataDir)
  })

/** The first line of a message, trimmed: errors are reported on one line. */
const oneLine = (text: string) => text.split("\n").map((l) => l.trim()).find((l) => l.length > 0) ?? text

/**
 * Prints `baton: <message>` on stderr (with `json`, also `Format.errorDocument` on stdout) and sets exit code 2 (bad input)
 * for any typed failure, and for a defect raised while opening the database (a directory, a non-SQLite file), which
 * is bad input too.
 */
const badInputAs = (json: boolean) => <A, E extends { readonly message: string }, R>(self: Effect.Effect<A, E, R>) => {
  const report = (message: string) =>
    Effect.all([
      Console.error(`baton: ${message}`),
      json ? Console.log(Format.errorDocument("bad_input", message)) : Effect.void,
      Effect.sync(() => void (process.exitCode = 2))
    ], { discard: true })
  return self.pipe(
    Effect.catchAll((e) => report(oneLine(e.message))),
    Effect.catchAllDefect((defect) => report(oneLine(defect instanceof Error ? defect.message : String(defect))))
  )
}

/** `badInputAs` for a command without `--json`. */
const badInput = badInputAs(false)

/** Prints `baton: <message>` on stderr and sets exit code 2 for a typed failure (not a defect): a server that could not start. */
const startFailure = <A, E extends { readonly message: string }, R>(self: Effect.Effect<A, E, R>) =>
  Effect.catchAll(self, (e) => Effect.zipRight(Console.error(`baton: ${oneLine(e.message)}`), Effect.sync(() => void (process.exitCode = 2))))

/**
 * An integer flag read in decimal digits only (an optional leading `-`): `Options.integer` reads its value with
 * `Number`, so `--port 0x50` listened on port 80, `--port 8e3` on 8000 and `--seed 1e3` seeded 1000. Such a value is
 * refused as a non-number is (one line naming the flag, exit 2). `what` completes "expected ..." (the range, where
 * the command checks one itself). Shape: `Options<number>`; the caller adds its default or `Options.optional`. Its
 * help says it takes "An integer in decimal digits" (UsageError.helpText: the text primitive's own paragraph would
 * call it "A user-defined piece of text.").
 */
const integerOption = (name: string, what: string, description: string) =>
  Options.text(name).pipe(
    Options.withPseudoName("integer"),
    Options.mapEffect((text) => {
      const n = text.startsWith("-") ? -ServerConfig.decimal(text.slice(1)) : ServerConfig.decimal(text)
      return Number.isInteger(n)
        ? Effect.succeed(n === 0 ? 0 : n)
        : Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--${name}: expected ${what} in decimal digits, got '${text}'`)))
    }),
    Options.withDescription(description)
  )

const replayOptions = {
  providers: Options.text("providers").pipe(
    Options.withDefault(ProviderSpec.defaultProviders),
    Options.withDescription("NAME:WINDOW[:AUTOCOMPACT][:inject|:noinject],...")
  ),
  switchEvery: integerOption("switch-every", "an integer (0: never)", "switch provider every N runs (0: never)").pipe(Options.withDefault(10)),
  interruptRate: Options.float("interrupt-rate").pipe(
    Options.withDefault(0.05),
    Options.withDescription("fraction of runs interrupted before the provider starts, 0..1")
  ),
  compactEvery: integerOption("compact-every", "an integer (0: never)", "/compact every N runs (0: never)").pipe(Options.withDefault(40)),
  seed: integerOption("seed", "an integer", "seed of the replay's random choices (interrupts)").pipe(Options.withDefault(1)),
  skipInvalid: Options.boolean("skip-invalid").pipe(Options.withDescription("import the valid records and report the rest")),
  json: Options.boolean("json").pipe(Options.withDescription(
    "print one JSON document on stdout: the summary; on bad input (exit 2) {\"error\":{\"code\",\"message\"}}; " +
      "stopped by a signal (exit 130/143) {\"interrupted\":{\"signal\",\"message\",\"runs\",\"totalRuns\",\"threadIds\"}} (log lines go to stderr)"
  )),
  db: dbOption,
  dataDir: dataDirOption,
  databaseUrl: databaseUrlOption
}

interface ReplayCommand {
  readonly file: string
  readonly providers: string
  readonly switchEvery: number
  readonly interruptRate: number
  readonly compactEvery: number
  readonly seed: number
  readonly skipInvalid: boolean
  readonly json: boolean
  readonly db: Option.Option<string>
  readonly dataDir: Option.Option<string>
  readonly databaseUrl: Option.Option<string>
}

/** Why `baton <name> --server URL` is refused: the command runs in this process, on the database. */
const serverIgnored = (name: string) =>
  `\`baton ${name}\` runs in this process on the database (--db, --data-dir or --database-url), not on a server: ` +
  "--server is for threads, thread show, handoffs and the commands that need a server"

/**
 * `baton replay`: validates the whole input before the database is opened (bad input writes nothing), prints one
 * line per run on stdout and the summary, or with `--json` only the summary as one JSON document (either way a
 * progress bar on stderr when it is a terminal) (`Format.errorDocument` for bad input, `Format.interruptedDocument` when a signal stopped it). Exit
 * code 1 when an invariant is violated. A signal stops it after the run in flight is recorded (see CliRuntime).
 */
const runReplay = (command: ReplayCommand) => {
  // What a signal's report says: the runs shown, of how many (`null` until the transcript is read), the threads created.
  let done = 0
  let total: number | null = null
  const threadIds: Array<string> = []
  // A progress bar on stderr when it is a terminal, `--json` or not: stdout (the runs' lines, or the one JSON
  // document) never carries it. Found by a newcomer's walk (b46ux): under `--json` a long replay showed nothing.
  const tty = process.stderr.isTTY === true
  return Effect.gen(function*() {
    const o = yield* databaseOptions(command)
    // `--server` names a server for the commands that talk to one; a replay runs here, on the database. Given
    // before `replay`, it was ignored in silence and the replay wrote to ./.baton/baton.sqlite (newcomer's walk, b47ux).
    if (Option.isSome((yield* root).server)) {
      return yield* Effect.fail({ message: serverIgnored("replay") })
    }
    const providers = ProviderSpec.parse(o.providers)
    if (Either.isLeft(providers)) return yield* Effect.fail(providers.left)
    if (!(o.interruptRate >= 0 && o.interruptRate <= 1)) {
      return yield* Effect.fail({ message: `--interrupt-rate must be within 0..1, got ${o.interruptRate}` })
    }
    if (o.switchEvery < 0 || o.compactEvery < 0) {
      return yield* Effect.fail({ message: "--switch-every and --compact-every must be 0 (never) or positive" })
    }
    // Validate the whole input before the database is opened: bad input writes nothing.
    if (Fs.existsSync(o.file) && Fs.statSync(o.file).isDirectory()) {
      return yield* Effect.fail({ message: `${o.file} is a directory; give one transcript file` })
    }
    const imported = yield* Replay.load({ file: o.file, skipInvalid: o.skipInvalid })
    for (const s of imported.skipped) yield* Console.error(`baton: skipped ${o.file}:${s.line}${s.field ? ` (${s.field})` : ""}: ${s.reason}`)
    if (imported.threads.every((t) => t.turns.length === 0)) {
      return yield* Effect.fail({ message: `${o.file}: no user turn to replay${imported.skipped.length > 0 ? ` (${imported.skipped.length} record(s) skipped)` : ""}` })
    }
    for (const p of providers.right) {
      const warning = ProviderSpec.warning(p)
      if (warning !== null) yield* Console.error(`baton: warning: ${warning}`)
    }
    const options: Replay.ReplayOptions = {
      file: o.file,
      providers: providers.right,
      switchEvery: o.switchEvery,
      interruptRate: o.interruptRate,
      compactEvery: o.compactEvery,
      seed: o.seed,
      db: resolveDb(o.db, o.dataDir),
      databaseUrl: yield* resolveDatabaseUrl(o.databaseUrl, o.db, o.dataDir),
      skipInvalid: o.skipInvalid
    }
    const runs = imported.threads.reduce((n, t) => n + t.turns.length, 0)
    total = runs
    const summary = yield* Replay.replay(imported, options, (line) =>
      Effect.sync(() => {
        done++
        if (tty) process.stderr.write("\r\x1b[K")
        if (!o.json) process.stdout.write(Format.runLine(line) + "\n")
        if (tty) process.stderr.write(Format.progressBar(done, runs))
      }), (threadId) => Effect.sync(() => void threadIds.push(threadId)))
    if (tty) process.stderr.write("\r\x1b[K")
    yield* Console.log(o.json ? JSON.stringify(summary) : Format.summary(summary))
    if (summary.invariantViolations.length > 0) process.exitCode = 1
  }).pipe(
    // The whole command, not only the replay: found in review, a signal while the transcript was being read (seconds
    // for a large one) ended it with exit 143 and nothing on either stream, under `--json` no document.
    Effect.onInterrupt(() =>
      Effect.gen(function*() {
        if (tty) process.stderr.write("\r\x1b[K")
        const signal = yield* CliRuntime.receivedSignal
        const by = Option.getOrElse(signal, () => "an interrupt")
        const message = total === null ? `stopped by ${by} before the replay started` : `stopped by ${by} after ${done} of ${total} runs`
        yield* Console.error(`baton: ${message}`)
        // Stopped by a signal, `--json` still prints its one document (stdout is gone when its reader went away).
        if (command.json && Option.isSome(signal)) {
          yield* Console.log(Format.interruptedDocument(signal.value, message, { runs: done, totalRuns: total, threadIds }))
        }
      })
    ),
    badInputAs(command.json)
  )
}

const replay = Command.make(
  "replay",
  {
    file: Args.text({ name: "file" }).pipe(Args.withDescription(
      "transcript: Claude Code JSONL (~/.claude/projects/<project-dir>/<session-id>.jsonl), pi JSONL " +
        "(~/.pi/agent/sessions/<project-dir>/*.jsonl), OpenHands output JSONL or SWE-agent .traj"
    )),
    ...replayOptions
  },
  runReplay
)

/** The sample transcripts beside the repository (`../shared/transcripts` from its root). */
const defaultSamples = fileURLToPath(new URL("../../../../shared/transcripts", import.meta.url))
/** The demo's transcript inside the samples: a real pi session of 990 messages. */
const demoTranscript = (samples: string) => Path.join(samples, "raw", "pi", "before-compaction.jsonl")

const demo = Command.make(
  "demo",
  {
    samples: Options.directory("samples", { exists: "either" }).pipe(
      Options.withDefault(defaultSamples),
      Options.withDescription("the sample transcripts directory (default: ../shared/transcripts beside the repository)")
    ),
    ...replayOptions
  },
  ({ samples, ...o }) => {
    const file = demoTranscript(samples)
    return Fs.existsSync(file)
      ? runReplay({ ...o, file })
      : Effect.fail({ message: Format.samplesMissing(samples, file, samples === defaultSamples) }).pipe(badInputAs(o.json))
  }
).pipe(Command.withDescription("replays the sample pi session (../shared/transcripts/raw/pi/before-compaction.jsonl)"))

/**
 * The root command and its options, before any subcommand: `--server URL` (else `BATON_SERVER`) makes `threads`,
 * `thread show`, `handoffs` and the server-only commands talk to a Baton server over HTTP, sending `--token` (else
 * `BATON_TOKEN`) as the bearer token; without a server the commands read the database in-process. `--db`, `--data-dir`
 * and `--database-url` may come here too: a command that gives none of its own uses these.
 */
const root = Command.make("baton", {
  server: Options.text("server").pipe(
    Options.withDescription("a Baton server's URL, e.g. http://127.0.0.1:8787 (default: $BATON_SERVER; none: in-process)"),
    Options.optional
  ),
  token: Options.text("token").pipe(
    Options.withDescription("the bearer token to send to --server (default: $BATON_TOKEN)"),
    Options.optional
  ),
  db: dbOption,
  dataDir: dataDirOption,
  databaseUrl: databaseUrlOption
})

const fromEnv = (name: string) => Option.fromNullable(process.env[name]).pipe(Option.filter((v) => v.trim() !== ""))

/** The server the command talks to (`--server`, else `BATON_SERVER`), or none: in-process. */
const remoteTarget: Effect.Effect<Option.Option<Remote.Target>, never, Command.Command.Context<"baton">> = Effect.map(root, (g) =>
  Option.map(Option.orElse(g.server, () => fromEnv("BATON_SERVER")), (url): Remote.Target => ({
    url: url.replace(/\/+$/, ""),
    token: Option.orElse(g.token, () => fromEnv("BATON_TOKEN"))
  })))

/**
 * The database flag given with a server (`--db`, `--data-dir` or `--database-url`, the command's own or before it),
 * as the refusal says it, or `undefined`: none given.
 */
const databaseFlag = (options: ReadonlyArray<DatabaseOptions>): string | undefined => {
  for (const o of options) {
    if (Option.isSome(o.db)) return `--db ${o.db.value}`
    if (Option.isSome(o.dataDir)) return `--data-dir ${o.dataDir.value}`
    if (Option.isSome(o.databaseUrl)) return "--database-url"
  }
  return undefined
}

/**
 * Runs `f` against the server when there is one (with an HTTP client), else `inProcess`. With a server, a database
 * flag (`command`'s or the root's) contradicts it: the server reads its own database, and `baton --server URL threads
 * --db X` listed the server's threads, not X's, without a word (b48srv). Without a server, `--token` has nobody to go
 * to. Both refused (a `{ message }`, exit 2) before anything is read or asked.
 */
const remoteOr = <A, E, R, A2, E2, R2>(
  f: (target: Remote.Target) => Effect.Effect<A, E, R>,
  inProcess: Effect.Effect<A2, E2, R2>,
  command?: DatabaseOptions
) =>
  Effect.flatMap(Effect.zip(remoteTarget, root), ([target, g]): Effect.Effect<
    A | A2,
    E | E2 | Remote.RemoteFailure | { readonly message: string },
    Exclude<R, HttpClient.HttpClient> | R2
  > => {
    if (Option.isNone(target)) {
      // `--token` is what a client sends to a server: without one it was ignored in silence.
      return Option.isSome(g.token)
        ? Effect.fail({ message: "--token is sent to a Baton server: pass --server URL too (or set BATON_SERVER), or drop --token to read the database in this process" })
        : inProcess
    }
    const flag = databaseFlag(command === undefined ? [g] : [command, g])
    if (flag !== undefined) {
      const server = Option.isSome(g.server) ? `--server ${target.value.url}` : `BATON_SERVER (${target.value.url})`
      return Effect.fail({
        message: `${flag} and ${server} contradict: with a server the command reads the server's database, not this one; ` +
          `drop ${flag.split(" ")[0]}, or ${Option.isSome(g.server) ? "--server" : "unset BATON_SERVER"} to read the database in this process`
      })
    }
    return Effect.provide(Effect.zipRight(Remote.checkTarget(target.value), f(target.value)), NodeHttpClient.layerUndici)
  })

/** A command that only a server can carry out: without `--server`/`BATON_SERVER` it fails naming both. */
const remoteOnly = (name: string) => <A, E, R>(f: (target: Remote.Target) => Effect.Effect<A, E, R>) =>
  remoteOr(f, Effect.fail({ message: `\`baton ${name}\` talks to a Baton server: pass --server URL before the command (or set BATON_SERVER)` }))

/**
 * Runs `f` over the database of `command` (Postgres of `--database-url`/`BATON_DATABASE_URL`, else the SQLite file of
 * `--db`/`--data-dir`, which must exist), with its `ThreadStore` and the read side the server answers from
 * (`ThreadQuery`: a `--json` document in-process is the server's). Fails with a `{ message }` when there is no database.
 */
const withStore = <A, E, R>(command: DatabaseOptions, f: (store: ThreadStore) => Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const o = yield* databaseOptions(command)
    const url = yield* resolveDatabaseUrl(o.databaseUrl, o.db, o.dataDir)
    const read = <E2>(database: Layer.Layer<SqlClient.SqlClient, E2>) =>
      Layer.provideMerge(ThreadQuery.ThreadQuery.Default, ThreadStore.Default).pipe(Layer.provide(database))
    if (url !== undefined) {
      return yield* Effect.flatMap(ThreadStore, f).pipe(Effect.provide(read(Database.layerPg({ url, maxConnections: 2 }))))
    }
    const path = resolveDb(o.db, o.dataDir)
    if (path !== ":memory:" && !Fs.existsSync(path)) {
      return yield* Effect.fail({ message: `no database at ${path} (run \`baton replay\` first, or pass --db)` })
    }
    return yield* Effect.flatMap(ThreadStore, f).pipe(Effect.provide(read(Database.layerSqlite(path))))
  })

/** The `--json` of `threads` and `thread show`. */
const readJsonOption = (what: string) => Options.boolean("json").pipe(Options.withDescription(what))

const threads = Command.make(
  "threads",
  {
    db: dbOption,
    dataDir: dataDirOption,
    databaseUrl: databaseUrlOption,
    json: readJsonOption("print {\"threads\": [...]} as one JSON object: each thread as the API serves it, with its snapshot's totals")
  },
  (o) =>
    remoteOr((target) => Remote.threads(target, o.json), withStore(o, (store) =>
      Effect.gen(function*() {
        const list = yield* store.listThreads()
        if (o.json) {
          const query = yield* ThreadQuery.ThreadQuery
          const totals = yield* Effect.forEach(list, (t) => Effect.map(query.snapshot(t.id), (s) => s.totals))
          return yield* Console.log(Format.threadsDocument(list.map((thread, i) => ({ thread, totals: totals[i]! }))))
        }
        if (list.length === 0) return yield* Console.log("no threads")
        for (const t of list) {
          const runs = yield* store.listRuns(t.id)
          const items = yield* store.countItems(t.id)
          yield* Console.log(Format.threadLine(t, runs.length, items))
        }
      })), o).pipe(badInputAs(o.json))
)

const threadShow = Command.make(
  "show",
  {
    id: threadIdArg,
    db: dbOption,
    dataDir: dataDirOption,
    databaseUrl: databaseUrlOption,
    json: readJsonOption("print the thread's snapshot as one JSON object, as GET /threads/{id} serves it")
  },
  (o) =>
    remoteOr((target) => Remote.threadShow(target, o.id, o.json), withStore(o, (store) =>
      Effect.gen(function*() {
        const thread = yield* store.getThread(o.id as ThreadId)
        if (thread._tag === "None") return yield* Effect.fail({ message: `thread ${o.id} not found (list threads with \`baton threads\`)` })
        if (o.json) return yield* Console.log(Format.snapshotDocument(yield* (yield* ThreadQuery.ThreadQuery).snapshot(thread.value.id)))
        const runs = yield* store.listRuns(thread.value.id)
        const providerThreads = yield* store.listProviderThreads(thread.value.id)
        const natives = yield* Effect.forEach(providerThreads, (p) => store.listNativeThreads(p.id))
        const items = yield* store.countItems(thread.value.id)
        const costs = yield* store.listRunCosts(thread.value.id)
        yield* Console.log(Format.threadShow(thread.value, providerThreads, natives.flat(), runs, items, { all: costs, totals: RunCosts.total(costs) }))
      })), o).pipe(badInputAs(o.json))
)

const threadCreate = Command.make(
  "create",
  {
    provider: Options.text("provider").pipe(Options.withDescription("the provider instance of the thread's first run, e.g. codex")),
    title: Options.text("title").pipe(Options.withDescription("the thread's title (default: none)"), Options.optional),
    tools: Options.text("tools").pipe(
      Options.withDescription("the client's tools every run offers: a JSON array of {name, description, inputSchema}, inline or a file"),
      Options.optional
    )
  },
  (o) => remoteOnly("thread create")((target) => Remote.createThread(target, o.provider, o.title, o.tools)).pipe(badInput)
).pipe(Command.withDescription("creates a thread on the server and prints its id (needs --server)"))

/**
 * `baton thread` names a subcommand: without one it is refused as a usage error (one `baton:` line, exit 2). It
 * exited 0 having done nothing, and a script took that for success (b47srv).
 */
const thread = Command.make("thread", {}, () =>
  Effect.zipRight(
    Console.error("baton: `baton thread` needs a subcommand: `baton thread show THREAD-ID` or `baton thread create --provider P` (see `baton thread --help`)"),
    Effect.sync(() => void (process.exitCode = 2))
  )).pipe(Command.withSubcommands([threadShow, threadCreate]))

const handoffs = Command.make(
  "handoffs",
  { id: threadIdArg, db: dbOption, dataDir: dataDirOption, databaseUrl: databaseUrlOption },
  (o) =>
    remoteOr((target) => Remote.handoffs(target, o.id), withStore(o, (store) =>
      Effect.gen(function*() {
        const found = yield* store.getThread(o.id as ThreadId)
        if (found._tag === "None") return yield* Effect.fail({ message: `thread ${o.id} not found (list threads with \`baton threads\`)` })
        const list = yield* store.listHandoffs(found.value.id)
        const deliveries = yield* store.listDeliveriesOfThread(found.value.id)
        const providerThreads = yield* store.listProviderThreads(found.value.id)
        const natives = yield* Effect.forEach(providerThreads, (p) => store.listNativeThreads(p.id))
        yield* Console.log(Format.handoffs(list, deliveries, providerThreads, natives.flat()))
      })), o).pipe(badInput)
)

const jsonOption = (what: string) => Options.boolean("json").pipe(Options.withDescription(what))

/**
 * The message `send` sends: `text` as given, or for `-` standard input read whole, byte for byte (a trailing newline
 * included). An argument is limited by the system (about 128 KiB) and decoded lossily by Node (invalid UTF-8 becomes
 * U+FFFD unseen); standard input is neither. Fails with a `{ message }` for input that is empty, not UTF-8, or only
 * whitespace (`Commands.isBlank`, which the API refuses too: an argument of only whitespace is refused by the API's
 * schema before it is sent).
 */
const messageText = (text: string) =>
  text !== "-"
    ? Effect.succeed(text)
    // Read as a stream: `readFileSync(0)` fails with EAGAIN on a pipe node set non-blocking.
    : Effect.tryPromise({
      try: async () => {
        const chunks: Array<Buffer> = []
        for await (const chunk of process.stdin) chunks.push(chunk as Buffer)
        return Buffer.concat(chunks)
      },
      catch: (e) => ({ message: `cannot read the message from standard input (${e instanceof Error ? e.message : String(e)})` })
    }).pipe(Effect.flatMap((bytes) =>
      bytes.length === 0
        ? Effect.fail({ message: "standard input was empty: no message to send" })
        : Effect.try({
          try: () => new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes),
          catch: () => ({ message: `standard input is not UTF-8 text (${bytes.length} bytes): not sent` })
        }).pipe(Effect.filterOrFail(
          (decoded) => !Commands.isBlank(decoded),
          () => ({ message: `standard input holds only whitespace (${bytes.length} bytes): no message to send` })
        ))
    ))

const send = Command.make(
  "send",
  {
    id: threadIdArg,
    text: Args.text({ name: "text" }).pipe(Args.withDescription("the message; - reads it from standard input, byte for byte")),
    json: jsonOption("print each event as one JSON line, nothing else; bad input is one {\"error\":…} line (exit 2), Ctrl-C ends with one {\"interrupted\":{\"signal\",\"message\",\"runId\"}} line (exit 130)")
  },
  (o) =>
    remoteOnly("send")((target) => Effect.flatMap(messageText(o.text), (text) => Remote.send(target, o.id, text, o.json))).pipe(badInputAs(o.json))
).pipe(Command.withDescription("sends a message and prints the run's events until it ends; exit 1 if it failed; Ctrl-C stops the command, not the run (needs --server)"))

const switchCommand = Command.make(
  "switch",
  { id: threadIdArg, provider: Args.text({ name: "provider" }).pipe(Args.withDescription("the provider instance to switch to (a name the server's providers list, e.g. claude)")) },
  (o) => remoteOnly("switch")((target) => Remote.switchProvider(target, o.id, o.provider)).pipe(badInput)
).pipe(Command.withDescription("switches the thread's provider for its next run (needs --server)"))

const compact = Command.make(
  "compact",
  { id: threadIdArg, json: jsonOption("print the report as one JSON object") },
  (o) => remoteOnly("compact")((target) => Remote.compact(target, o.id, o.json)).pipe(badInputAs(o.json))
).pipe(Command.withDescription("/compact: drains deferred history into the active native thread, then compacts it (needs --server)"))

/**
 * What `baton offload` does, from its options: `/offload` itself (`run`), or one of the modes, at most one given.
 * `--keep-tokens` and `--operation-id` belong to `run` and `--preview` (an operation's id for `--get` and `--cancel`
 * is their value). Fails with the message naming the options that exclude each other.
 */
const offloadMode = (o: {
  readonly dryRun: boolean
  readonly undo: boolean
  readonly preview: boolean
  readonly get: Option.Option<string>
  readonly cancel: Option.Option<string>
  readonly undoSummary: boolean
  readonly keepTokens: Option.Option<number>
  readonly operationId: Option.Option<string>
}) => {
  const modes = [
    ...(o.preview ? ["--preview" as const] : []),
    ...(o.dryRun ? ["--dry-run" as const] : []),
    ...(o.undo ? ["--undo" as const] : []),
    ...(Option.isSome(o.get) ? ["--get" as const] : []),
    ...(Option.isSome(o.cancel) ? ["--cancel" as const] : []),
    ...(o.undoSummary ? ["--undo-summary" as const] : [])
  ]
  if (modes.length > 1) return Effect.fail({ message: `${modes.join(", ")} exclude each other: give at most one` })
  const mode: (typeof modes)[number] | "run" = modes.length === 0 ? "run" : modes[0]!
  if (mode === "run" || mode === "--preview") return Effect.succeed(mode)
  const what = mode === "--dry-run" || mode === "--undo" ? `${mode} (tool-result offload)` : mode
  if (Option.isSome(o.keepTokens)) return Effect.fail({ message: `--keep-tokens applies to /offload itself and --preview, not to ${what}` })
  if (Option.isSome(o.operationId)) {
    return Effect.fail({
      message: mode === "--get" || mode === "--cancel"
        ? `--operation-id names the operation /offload starts; ${mode} takes the operation's id as its value (${mode} OP)`
        : `--operation-id applies to /offload itself and --preview, not to ${what}`
    })
  }
  return Effect.succeed(mode)
}

const offload = Command.make(
  "offload",
  {
    id: threadIdArg,
    keepTokens: integerOption("keep-tokens", "a number of tokens", "tokens of newest history kept verbatim").pipe(Options.optional),
    dryRun: Options.boolean("dry-run").pipe(Options.withDescription(
      "change nothing: show the tool units tool-result offload would replace with stubs before the next request, tokens before and after, the cache-rewrite cost and break-even"
    )),
    undo: Options.boolean("undo").pipe(Options.withDescription("undo the newest tool-result offload flush: the stubbed results go out verbatim again")),
    preview: Options.boolean("preview").pipe(Options.withDescription(
      "change nothing: show what /offload would summarise, the conversation's tokens before and after (estimated) and the cache-rewrite cost"
    )),
    get: Options.text("get").pipe(Options.withDescription(
      "print the outcome of /offload operation OP (running while in flight, on this server process or another)"
    ), Options.optional),
    cancel: Options.text("cancel").pipe(Options.withDescription(
      "cancel /offload operation OP if its summary is still being written, and print its settled outcome: cancelled, or what it finished with (a commit is never undone)"
    ), Options.optional),
    undoSummary: Options.boolean("undo-summary").pipe(Options.withDescription(
      "undo the newest /offload summary: its messages are visible again, the summary stays in the log (--undo is tool-result offload's)"
    )),
    operationId: Options.text("operation-id").pipe(Options.withDescription("the operation's id: the same id again answers the first outcome"), Options.optional),
    json: jsonOption("print the report as one JSON object")
  },
  (o) =>
    remoteOnly("offload")((target) =>
      Effect.flatMap(offloadMode(o), (mode) => {
        switch (mode) {
          case "--dry-run":
            return Remote.offloadPreview(target, o.id, o.json)
          case "--undo":
            return Remote.offloadUndo(target, o.id, o.json)
          case "--get":
            return Remote.offloadGet(target, o.id, Option.getOrThrow(o.get), o.json)
          case "--cancel":
            return Remote.offloadCancel(target, o.id, Option.getOrThrow(o.cancel), o.json)
          case "--undo-summary":
            return Remote.offloadUndoSummary(target, o.id, o.json)
          default:
            return Remote.offload(target, o.id, o.keepTokens, o.json, { operationId: o.operationId, preview: mode === "--preview" })
        }
      })
    ).pipe(badInputAs(o.json))
).pipe(Command.withDescription(
  "/offload: summarises older history, keeping the newest verbatim; --preview shows what it would do, --get OP reads an operation's outcome, " +
    "--cancel OP cancels one in flight, --undo-summary undoes the newest summary; --dry-run previews and --undo undoes tool-result offload (needs --server)"
))

/**
 * An option that may be given any number of times, none included: `Options.repeated`, shown in usage lines in
 * brackets like every other optional option (`[--pin text]...`; the library's own rendering, `--pin text...`, reads
 * as required). Shape: `Options<ReadonlyArray<A>>`, empty when not given.
 */
const repeatedOption = <A>(option: Options.Options<A>): Options.Options<ReadonlyArray<A>> =>
  option.pipe(Options.repeated, Options.withDefault<ReadonlyArray<A>>([]))

const offloadControl = Command.make(
  "offload-control",
  {
    id: threadIdArg,
    on: Options.boolean("on").pipe(Options.withDescription("turn tool-result offload on for this thread")),
    off: Options.boolean("off").pipe(Options.withDescription("turn tool-result offload off for this thread")),
    keepNewest: integerOption("keep-newest", "a number of tool units", "tool units always kept verbatim (the newest N)").pipe(Options.optional),
    pin: repeatedOption(Options.text("pin").pipe(Options.withDescription("an item id never offloaded (repeatable)"))),
    unpin: repeatedOption(Options.text("unpin").pipe(Options.withDescription("an item id to unpin (repeatable)"))),
    reset: Options.boolean("reset").pipe(Options.withDescription("drop the thread's own settings and pins first (inherit the instance's)")),
    json: jsonOption("print the control as one JSON object")
  },
  (o) =>
    remoteOnly("offload-control")((target) =>
      o.on && o.off
        ? Effect.fail({ message: "--on and --off exclude each other" })
        : Option.isSome(o.keepNewest) && !(o.keepNewest.value >= 0 && o.keepNewest.value <= 1_000)
        ? Effect.fail({ message: `--keep-newest must be a whole number from 0 to 1000 (got ${o.keepNewest.value})` })
        : Remote.offloadControl(target, o.id, {
          reset: o.reset,
          enabled: o.on ? Option.some(true) : o.off ? Option.some(false) : Option.none(),
          keepNewestUnits: o.keepNewest,
          pin: o.pin,
          unpin: o.unpin
        }, o.json)
    ).pipe(badInputAs(o.json))
).pipe(Command.withDescription("shows, and with options changes, the thread's tool-result offload control: on/off, units kept verbatim, pinned items (needs --server)"))

const toolResults = Command.make(
  "tool-results",
  {
    id: threadIdArg,
    runId: Args.text({ name: "run-id" }).pipe(Args.withDescription("the run's id (run_…, as `baton send` and the thread's events name it)")),
    results: Options.text("results").pipe(
      Options.withDescription("the results: a JSON array of {toolCallId, output, isError?} (or {\"results\": [...]}), inline or a file")
    ),
    json: jsonOption("print the run as one JSON object once it ended or waits again")
  },
  (o) => remoteOnly("tool-results")((target) => Remote.toolResults(target, o.id, o.runId, o.results, o.json)).pipe(badInputAs(o.json))
).pipe(Command.withDescription("posts the results of a waiting run's tool calls, then prints its reply or its next calls (needs --server)"))

const events = Command.make(
  "events",
  {
    thread: Options.text("thread").pipe(Options.withDescription("one thread's events (default: every thread's)"), Options.optional),
    follow: Options.boolean("follow").pipe(Options.withDescription("keep printing new events until interrupted")),
    json: jsonOption("print each event as one JSON line")
  },
  (o) => remoteOnly("events")((target) => Remote.events(target, o.thread, o.follow, o.json)).pipe(badInputAs(o.json))
).pipe(Command.withDescription("prints the event log (of one thread or all), then with --follow the live tail (needs --server)"))

/**
 * `baton --server URL serve` and `baton --token T serve` are refused (a `{ message }`, exit 2): the client's flags
 * before `serve` were ignored in silence, and it served this machine's database with another token (b48srv).
 * `BATON_SERVER` set in the environment is a client's setting and does not stop a server.
 */
const serveRefusesClientFlags = Effect.flatMap(root, (g) =>
  Option.isSome(g.server)
    ? Effect.fail({ message: serverIgnored("serve") })
    : Option.isSome(g.token)
    ? Effect.fail({
      message: "`baton serve` takes its admin token from BATON_TOKEN or the config file's auth.token (else its token file), " +
        "not --token: --token is what a client sends to --server"
    })
    : Effect.void)

/** `--port N` (0..65535, ServerConfig checks the range; 0: any free port). */
const portOption = integerOption("port", "an integer from 0 to 65535", "port (default 8787; 0: any free port)").pipe(Options.optional)

/**
 * `baton serve`: the HTTP server (see apps/server and docs/server.md) on the embedded default — SQLite under
 * ./.baton/, scripted providers — or on what the flags, `--config FILE` and the environment say. A configuration
 * error names the field and exits 2 before anything starts. Serves until SIGINT/SIGTERM, then shuts down in order.
 */
const serve = Command.make(
  "serve",
  {
    host: Options.text("host").pipe(Options.withDescription("address to bind (default 127.0.0.1: loopback only)"), Options.optional),
    port: portOption,
    // Read (and a missing or unreadable file refused, one `baton: FILE: …` line) by ServerConfig. A path, not
    // `Options.file`, which takes a regular file only: `--config <(generate-config)` (a FIFO) was refused (b48srv).
    config: Options.text("config").pipe(
      Options.withPseudoName("file"),
      Options.withDescription("JSON config file, or any readable path such as a pipe (see docs/server.md)"),
      Options.optional
    ),
    db: dbOption,
    dataDir: dataDirOption,
    databaseUrl: databaseUrlOption
  },
  (command) =>
    Effect.zipRight(serveRefusesClientFlags, databaseOptions(command)).pipe(
      Effect.map((o): ServerConfig.ServeFlags => ({
        host: Option.getOrUndefined(o.host),
        port: Option.getOrUndefined(o.port),
        config: Option.getOrUndefined(o.config),
        db: Option.getOrUndefined(o.db),
        dataDir: Option.getOrUndefined(o.dataDir),
        databaseUrl: Option.getOrUndefined(o.databaseUrl)
      })),
      // The config file read once (a FIFO or a file changed meanwhile read twice was inconsistent), then the port:
      // taken, it is said (one line, exit 2) before the token file and the database are created.
      Effect.flatMap((flags) =>
        Effect.flatMap(ServerConfig.load(flags), (loaded) =>
          ServerConfig.address(flags, loaded).pipe(Effect.flatMap(Server.checkListen), Effect.zipRight(ServerConfig.resolve(flags, loaded))))),
      badInput,
      // A server that cannot start (its port taken, its database unreachable) says why in one line, exit 2.
      // The token file `resolve` created is removed again then: nothing is left of a server that never started.
      Effect.flatMap((settings) =>
        settings === undefined
          ? Effect.void
          : Server.run(settings).pipe(
            Effect.tapError(() => ServerConfig.removeCreatedTokenFile(settings.auth.source, Redacted.value(settings.auth.adminToken))),
            // The in-use mark on a token file another serve created goes when this one stops, however it stops.
            Effect.ensuring(ServerConfig.releaseTokenFile(settings.auth.source)),
            startFailure
          ))
    )
).pipe(Command.withDescription("serves the HTTP API (default http://127.0.0.1:8787; see docs/server.md)"))

const baton = root.pipe(Command.withSubcommands([
  replay, demo, threads, thread, handoffs, send, switchCommand, compact, offload, offloadControl, toolResults, events, serve
]))

// A command's own output and log lines are not usage errors: its handler runs with the console UsageError wraps.
const cli = Command.run(baton.pipe(Command.transformHandler((effect) => UsageError.unreworded(effect))), { name: "baton", version: "0.1.0" })

/** The command line after the program. */
const argv = process.argv.slice(2)

/**
 * Every flag of a command that takes a value (a text, number, file or directory option): given last with nothing after
 * it, the command line is refused in one line naming it (`UsageError.missingValue`). Shape: `--name` strings.
 */
const valueFlags: ReadonlySet<string> = new Set([
  "--server", "--token", "--db", "--data-dir", "--database-url", "--providers", "--switch-every", "--compact-every",
  "--interrupt-rate", "--seed", "--samples", "--provider", "--title", "--tools", "--thread", "--keep-tokens",
  "--operation-id", "--get", "--cancel", "--keep-newest", "--pin", "--unpin", "--results", "--host", "--port", "--config"
])

/** A flag given last without its value: one `baton:` line (and the JSON error document under `--json`), exit 2. */
const refuseMissingValue = (message: string) =>
  Effect.zipRight(
    Effect.zipRight(
      Console.error(`baton: ${message}`),
      UsageError.asksForJson(argv) ? Console.log(Format.errorDocument("usage", message)) : Effect.void
    ),
    Effect.sync(() => void (process.exitCode = 2))
  )

const missing = UsageError.missingValue(argv, valueFlags)

;(missing === undefined ? cli(process.argv) : refuseMissingValue(missing)).pipe(
  // @effect/cli prints its usage errors itself: as `baton: <message>` lines like every other error (UsageError).
  UsageError.reworded(argv),
  // @effect/cli has already printed a usage error on stderr: exit 2 (bad input) without a second report there; a
  // command line asking for `--json` gets its one JSON document on stdout too (the options did not parse, so only the
  // command line can tell).
  Effect.catchIf(ValidationError.isValidationError, (e) =>
    Effect.zipRight(
      UsageError.asksForJson(argv) && e._tag !== "HelpRequested"
        ? Console.log(Format.errorDocument("usage", UsageError.message(HelpDoc.toAnsiText(e.error), argv)))
        : Effect.void,
      Effect.sync(() => void (process.exitCode = 2))
    )),
  // Anything unexpected still gets one line, never a stack trace on stdout.
  Effect.catchAllCause((cause) =>
    Effect.sync(() => {
      process.stderr.write(`baton: unexpected failure: ${oneLine(Cause.pretty(cause))}\n`)
      process.exitCode = 1
    })),
  CliRuntime.runMain
)
