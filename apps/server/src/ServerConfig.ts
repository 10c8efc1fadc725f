/**
 * ServerConfig: what the server is told at start — where it listens, its database, its provider instances, its
 * tokens and its limits — from four sources, later ones winning: the defaults, a JSON config file (`--config FILE`
 * or `BATON_CONFIG`), environment variables, command-line flags. The file is validated whole before anything starts:
 * an unknown field, a wrong type or a bad value fails with `ConfigInvalid` naming the field's path
 * (`providers[1].window`). It owns reading and validating; the server (Server.ts) acts on the result.
 *
 * Tokens: an admin token (any request) and an optional read-only token (`GET` only). Without an admin token in the
 * file or `BATON_TOKEN`, the server reads one from its token file (`auth.tokenFile`, default
 * `<data dir>/token`), creating it (32 random bytes, base64url, mode 0600) on first start: the API is never served
 * without a token, even on loopback, and a local client reads the file. Token values are never logged or echoed.
 */
import { ToolResultOffloadControl } from "@baton/contracts"
import { ToolResultOffload } from "@baton/context"
import { CodexAdapter, CodexAppServer, ProviderConfig, ProviderSpec } from "@baton/providers"
import { Database } from "@baton/persistence"
import { Config, Data, Effect, Either, Option, ParseResult, Redacted, Schema } from "effect"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import * as Net from "node:net"
import * as Path from "node:path"

/** The default address: loopback only. */
export const defaultHost = "127.0.0.1"
/** The default port. */
export const defaultPort = 8787
/** The default request body limit, in bytes (2 MiB). */
export const defaultMaxBodyBytes = 2 * 1024 * 1024
/** The default shutdown deadline for open requests and streams, in milliseconds. */
export const defaultShutdownTimeoutMs = 10_000
/** The default bound on a provider's interrupt acknowledgement (user interrupt and shutdown), in milliseconds. */
export const defaultInterruptTimeoutMs = 10_000

/** A token: 16 to 512 printable ASCII characters (shorter ones are too easy to guess). */
const Token = Schema.String.pipe(
  Schema.pattern(/^[\x21-\x7e]{16,512}$/, { message: () => "a token is 16 to 512 printable ASCII characters without spaces" })
)

/**
/**
 * A model-API provider instance in the config file (docs/providers.md): a `ProviderConfig.ModelProviderConfig`
 * (`kind` one of `anthropic-messages`, `openai-responses`, `openai-chat`; `baseUrl`, `model`, `apiKeyEnv`,
 * `contextWindow`, `autoCompactThreshold`, `maxOutputTokens`, `prices`, `maxRetries`, `systemPrompt`, `media`) with its
 * instance `name` (a free identifier: a lowercase letter, then up to 39 of `a-z 0-9 _ -`) and `toolResultOffload`
 * (default true: answered tool results are stubbed in the message list when that pays, docs/offload.md; `true`,
 * `false`, or `ToolResultOffloadJson`). The threshold must not exceed the window, nor the output limit reach it.
 */
/**
 * An instance's tool-result offload in the config file (issue 11 item 4, docs/offload.md "Control"): `enabled`
 * (default true) and any of the policy's settings (`ToolResultOffload.Settings`: `keepNewestUnits`,
 * `aggressiveRatio`, `aggressiveTargetRatio`, `emergencyRatio`, `minExpectedRequests`; absent ones keep the
 * defaults). Threads override any of them (`PUT /threads/{id}/tool-result-offload/control`).
 */
export const ToolResultOffloadJson = Schema.Struct({
  enabled: Schema.optional(Schema.Boolean),
  ...Schema.Struct(ToolResultOffloadControl.fields).omit("enabled", "pinnedItemIds").fields
})
export type ToolResultOffloadJson = typeof ToolResultOffloadJson.Type

export const ModelInstanceJson = Schema.Struct({
  ...ProviderConfig.ModelProviderConfig.fields,
  name: Schema.String.pipe(Schema.pattern(/^[a-z][a-z0-9_-]{0,39}$/, {
    message: () => "a provider name is a lowercase letter then up to 39 of a-z, 0-9, _ and -"
  })),
  toolResultOffload: Schema.optional(Schema.Union(Schema.Boolean, ToolResultOffloadJson))
}).pipe(Schema.filter((p) =>
  // Found by a review: a baseUrl with the endpoint's path passed and failed only at the first turn (a 404 on
  // /v1/messages/v1/messages).
  /\/(messages|responses|chat\/completions)\/?$/.test(p.baseUrl)
    ? { path: ["baseUrl"], message: `baseUrl is the API root without the endpoint's path (Baton appends it): ${p.baseUrl}` }
    : p.autoCompactThreshold !== null && p.autoCompactThreshold > p.contextWindow
    ? { path: ["autoCompactThreshold"], message: `autoCompactThreshold ${p.autoCompactThreshold} exceeds contextWindow ${p.contextWindow}` }
    : p.maxOutputTokens >= p.contextWindow
    ? { path: ["maxOutputTokens"], message: `maxOutputTokens ${p.maxOutputTokens} must be below contextWindow ${p.contextWindow}` }
    : true
))
export type ModelInstanceJson = typeof ModelInstanceJson.Type

/** Whether `path` is a regular file this process may execute. */
const isExecutableFile = (path: string): boolean => {
  try {
    if (!Fs.statSync(path).isFile()) return false
    Fs.accessSync(path, Fs.constants.X_OK)
    return true
  } catch {
    return false
  }
}

/**
 * A Codex instance in the config file (docs/providers.md, "Codex"): a `CodexAdapter.CodexProviderConfig` (`kind`
 * `codex`; optional `binary`, `codexHome`, `model`, `contextWindow`, `autoCompactThreshold`, `cwd`,
 * `requestTimeoutMs`, `turnIdleTimeoutMs`, `maxReconnects`, `prices`) with its instance `name`. The threshold must not
 * exceed the window.
 */
export const CodexInstanceJson = Schema.Struct({
  ...CodexAdapter.CodexProviderConfig.fields,
  name: Schema.String.pipe(Schema.pattern(/^[a-z][a-z0-9_-]{0,39}$/, {
    message: () => "a provider name is a lowercase letter then up to 39 of a-z, 0-9, _ and -"
  }))
}).pipe(Schema.filter((p) =>
  p.autoCompactThreshold !== undefined && p.autoCompactThreshold !== null && p.contextWindow !== undefined && p.autoCompactThreshold > p.contextWindow
    ? { path: ["autoCompactThreshold"], message: `autoCompactThreshold ${p.autoCompactThreshold} exceeds contextWindow ${p.contextWindow}` }
    : true
))
export type CodexInstanceJson = typeof CodexInstanceJson.Type

/**
 * One entry of the file's `providers`: a model-API instance (`kind` one of the model kinds), or a scripted one
 * (`kind` absent or `scripted`). Decoded by `decodeProviderEntry`, which picks the schema by `kind` so an error names
 * only the fields of the kind given.
 */
export type ProviderEntryJson = ModelInstanceJson | CodexInstanceJson | ProviderSpec.ProviderSpecJson

/** Whether a decoded entry is a model-API instance. */
export const isModelEntry = (p: ProviderEntryJson): p is ModelInstanceJson => p.kind !== undefined && p.kind !== "scripted" && p.kind !== "codex"

/** Whether a decoded entry is a Codex instance. */
export const isCodexEntry = (p: ProviderEntryJson): p is CodexInstanceJson => p.kind === "codex"

/** The `kind`s a provider entry may have. */
export const providerKinds = ["scripted", "codex", ...ProviderConfig.ModelApiKind.literals] as const

const decodeModelEntry = Schema.decodeUnknownEither(ModelInstanceJson, { onExcessProperty: "error", errors: "all" })
const decodeScriptedEntry = Schema.decodeUnknownEither(ProviderSpec.ProviderSpecJson, { onExcessProperty: "error", errors: "all" })
const decodeCodexEntry = Schema.decodeUnknownEither(CodexInstanceJson, { onExcessProperty: "error", errors: "all" })

/** Decodes `providers[index]`: the entry, or the reason naming each bad field (`providers[1].baseUrl: ...`). */
export const decodeProviderEntry = (entry: unknown, index: number): Either.Either<ProviderEntryJson, string> => {
  const at = `providers[${index}]`
  const kind = typeof entry === "object" && entry !== null && "kind" in entry ? (entry as { readonly kind: unknown }).kind : undefined
  if (kind !== undefined && !(providerKinds as ReadonlyArray<unknown>).includes(kind)) {
    return Either.left(`${at}.kind: expected one of ${providerKinds.map((k) => `"${k}"`).join(", ")}, actual ${JSON.stringify(kind)}`)
  }
  const decoded: Either.Either<ProviderEntryJson, ParseResult.ParseError> = kind === undefined || kind === "scripted"
    ? decodeScriptedEntry(entry)
    : kind === "codex"
    ? decodeCodexEntry(entry)
    : decodeModelEntry(entry)
  return Either.mapLeft(decoded, (error) => describeIssues(error, at))
}

/**
 * One gateway route: requests naming a model that matches `model` (a model id, `*` matching any run of characters:
 * `claude-*`) go to the provider instance `provider`, which must be an `anthropic-messages` or `openai-responses`
 * model-API instance of the same config (checked at start; an endpoint serves the models routed to its own protocol).
 */
export const GatewayRouteJson = Schema.Struct({
  model: Schema.String.pipe(Schema.pattern(/^[\x21-\x7e]{1,200}$/, { message: () => "a model pattern is 1 to 200 printable ASCII characters" })),
  provider: Schema.String.pipe(Schema.minLength(1))
})
export type GatewayRouteJson = typeof GatewayRouteJson.Type

/**
 * The instance kinds a gateway route may name: the protocols the gateway serves (`/v1/messages`, `/v1/responses`,
 * `/v1/chat/completions`).
 */
const gatewayKinds: ReadonlyArray<string> = ["anthropic-messages", "openai-responses", "openai-chat"]

/** The default limit of an agent's request body through the gateway, in bytes (32 MiB: long sessions are large). */
export const defaultGatewayMaxBodyBytes = 32 * 1024 * 1024

/**
 * The JSON config file. Every field is optional; unknown fields are errors.
 * - `host`, `port` (0: any free port);
 * - `database`: `url` (Postgres) or `sqlitePath` (a SQLite file) or `dataDir` (SQLite at `<dataDir>/baton.sqlite`);
 * - `providers`: the provider instances (`ProviderEntryJson`: model-API or scripted); the first is the default of
 *   new threads;
 * - `auth`: `token` (admin), `readToken` (read-only), `tokenFile` (where the generated admin token lives);
 * - `limits`: `maxBodyBytes` (request body, bytes), `shutdownTimeoutMs` (open requests at shutdown),
 *   `interruptTimeoutMs` (a provider's interrupt acknowledgement), `turnTimeoutMs` (one provider turn),
 *   `toolResultTimeoutMs` (how long a run waits for the client's tool results);
 * - `offload`: `summariser`, the name of a model-API provider instance that writes `/offload` summaries
 *   (`ModelSummariser`; default: the offline digest summariser); `preCompactHook`, asked before each `/offload`
 *   summarises: `url` (an HTTP endpoint) or `command` (an executable's argv), and `timeoutMs` (default 10,000);
 *   `auto`, the automatic `/offload` after a run (off when absent): `thresholdRatio` (0.05..1 of the native
 *   thread's window its reported usage must reach), `keepTokens` (default: the window's default), `approvalMode`
 *   (what the PreCompact hook is told; default `server-policy`);
 * - `gateway`: the agent-facing gateway (docs/gateway.md): `routes` (`GatewayRouteJson`, first match wins) and
 *   `maxBodyBytes` (an agent's request body, bytes; default 32 MiB);
 * - `tracing`: whether the server opens its spans (`Effect.fn` service methods, `sql.execute`, `http.server`; default
 *   false: Baton ships no tracer or exporter, so they would only add span frames to logged failures).
 */
export const ConfigFile = Schema.Struct({
  host: Schema.optional(Schema.String.pipe(Schema.minLength(1))),
  port: Schema.optional(Schema.Int.pipe(Schema.between(0, 65_535))),
  database: Schema.optional(Schema.Struct({
    url: Schema.optional(Schema.String.pipe(Schema.pattern(/^postgres(ql)?:\/\//, { message: () => "a Postgres URL starts with postgres://" }))),
    sqlitePath: Schema.optional(Schema.String.pipe(Schema.minLength(1))),
    dataDir: Schema.optional(Schema.String.pipe(Schema.minLength(1)))
  })),
  // Each entry is checked by `decodeProviderEntry` (its schema depends on its `kind`).
  providers: Schema.optional(Schema.Array(Schema.Unknown).pipe(Schema.minItems(1))),
  auth: Schema.optional(Schema.Struct({
    token: Schema.optional(Token),
    readToken: Schema.optional(Token),
    tokenFile: Schema.optional(Schema.String.pipe(Schema.minLength(1)))
  })),
  limits: Schema.optional(Schema.Struct({
    maxBodyBytes: Schema.optional(Schema.Int.pipe(Schema.between(1_024, 1_073_741_824))),
    shutdownTimeoutMs: Schema.optional(Schema.Int.pipe(Schema.between(0, 600_000))),
    interruptTimeoutMs: Schema.optional(Schema.Int.pipe(Schema.between(100, 600_000))),
    turnTimeoutMs: Schema.optional(Schema.Int.pipe(Schema.between(1_000, 86_400_000))),
    toolResultTimeoutMs: Schema.optional(Schema.Int.pipe(Schema.between(1_000, 86_400_000)))
  })),
  offload: Schema.optional(Schema.Struct({
    summariser: Schema.optional(Schema.String.pipe(Schema.minLength(1))),
    preCompactHook: Schema.optional(Schema.Struct({
      url: Schema.optional(Schema.String.pipe(Schema.pattern(/^https?:\/\//, { message: () => "a hook URL starts with http:// or https://" }))),
      command: Schema.optional(Schema.Array(Schema.String.pipe(Schema.minLength(1))).pipe(Schema.minItems(1))),
      timeoutMs: Schema.optional(Schema.Int.pipe(Schema.between(100, 600_000)))
    })),
    auto: Schema.optional(Schema.Struct({
      thresholdRatio: Schema.Number.pipe(Schema.between(0.05, 1)),
      keepTokens: Schema.optional(Schema.Int.pipe(Schema.between(1, 10_000_000))),
      approvalMode: Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200)))
    }))
  })),
  gateway: Schema.optional(Schema.Struct({
    routes: Schema.Array(GatewayRouteJson),
    maxBodyBytes: Schema.optional(Schema.Int.pipe(Schema.between(1_024, 1_073_741_824)))
  })),
  tracing: Schema.optional(Schema.Boolean)
})
/** A config file as read: `ConfigFile` with its provider entries decoded. */
export type ConfigFile = Omit<typeof ConfigFile.Type, "providers"> & { readonly providers?: ReadonlyArray<ProviderEntryJson> }

/** The configuration is unusable: `source` (a file, a variable, a flag) and what is wrong, naming the field. */
export class ConfigInvalid extends Data.TaggedError("ConfigInvalid")<{ readonly source: string; readonly reason: string }> {
  override get message() {
    return `${this.source}: ${this.reason}`
  }
}

/** Where the admin token came from: the config file, `BATON_TOKEN`, or the token file (generated when missing). */
export type TokenSource =
  | { readonly _tag: "config" }
  | { readonly _tag: "env" }
  | {
    readonly _tag: "file"
    readonly path: string
    readonly created: boolean
    /** The outermost directory created for the token file (`null`: none; its directory existed). */
    readonly madeDirectory: string | null
    /**
     * The in-use mark this process holds on a token file another process created (`null`: none, it created the file):
     * while it exists, that process's cleanup leaves the file (`removeCreatedTokenFile`). Removed by `releaseTokenFile`.
     */
    readonly held: string | null
  }

/** The database the server opens. */
export type DatabaseSetting =
  | { readonly _tag: "sqlite"; readonly path: string }
  | { readonly _tag: "postgres"; readonly url: string }

/**
 * A model-API instance as resolved: its `config`, its key read from `config.apiKeyEnv` (a `Redacted`, never printed;
 * none when no variable is named) and whether tool-result offload is on.
 */
export interface ModelInstanceSetting {
  readonly _tag: "model"
  readonly name: string
  readonly config: ProviderConfig.ModelProviderConfig
  readonly apiKey: Option.Option<Redacted.Redacted>
  /** On or off, and the policy's settings (the defaults with the file's overrides). */
  readonly toolResultOffload: { readonly enabled: boolean; readonly settings: ToolResultOffload.Settings }
}

/** A Codex instance as resolved: its name and `CodexAdapter.CodexProviderConfig`. */
export interface CodexInstanceSetting {
  readonly _tag: "codex"
  readonly name: string
  readonly config: CodexAdapter.CodexProviderConfig
}

/** One provider instance of the settings: a scripted spec, a model-API instance, or a Codex instance. */
export type ProviderSetting = ProviderSpec.ProviderSpec | ModelInstanceSetting | CodexInstanceSetting

/** Whether `p` is a model-API instance. */
export const isModelInstance = (p: ProviderSetting): p is ModelInstanceSetting => "_tag" in p && p._tag === "model"

/** Whether `p` is a Codex instance. */
export const isCodexInstance = (p: ProviderSetting): p is CodexInstanceSetting => "_tag" in p && p._tag === "codex"

/**
 * The window of an instance (tokens; `null` for a Codex instance that leaves it to its config.toml) and its
 * auto-compact threshold (`null`: none, or Codex's own).
 */
export const windowOf = (p: ProviderSetting) =>
  isModelInstance(p)
    ? { window: p.config.contextWindow, autoCompactThreshold: p.config.autoCompactThreshold }
    : isCodexInstance(p)
    ? { window: p.config.contextWindow ?? null, autoCompactThreshold: p.config.autoCompactThreshold ?? null }
    : { window: p.window, autoCompactThreshold: p.autoCompactThreshold }

/** The resolved configuration: every source applied, every value checked. */
export interface ServerSettings {
  readonly host: string
  readonly port: number
  readonly database: DatabaseSetting
  readonly providers: ReadonlyArray<ProviderSetting>
  readonly auth: {
    readonly adminToken: Redacted.Redacted<string>
    readonly readToken: Redacted.Redacted<string> | null
    readonly source: TokenSource
  }
  readonly limits: {
    readonly maxBodyBytes: number
    readonly shutdownTimeoutMs: number
    readonly interruptTimeoutMs: number
    readonly turnTimeoutMs: number
    readonly toolResultTimeoutMs: number
  }
  /** `/offload`: `summariser`, the model-API instance writing summaries (`null` or absent: the offline digest). */
  readonly offload?: {
    readonly summariser: string | null
    /** The PreCompact hook (absent: none, every offload allowed). */
    readonly preCompactHook?: { readonly url?: string | undefined; readonly command?: ReadonlyArray<string> | undefined; readonly timeoutMs: number }
    /** The automatic `/offload` after a run (absent: off); see OrchestratorConfig `autoOffload`. */
    readonly auto?: { readonly thresholdRatio: number; readonly keepTokens: number | null; readonly approvalMode: string }
  }
  /** The gateway's routes (in order; none: the gateway answers every model 404) and its body limit (bytes). */
  readonly gateway?: { readonly routes: ReadonlyArray<GatewayRouteJson>; readonly maxBodyBytes: number }
  /**
   * Whether the server's fibers open spans (default false: no tracer is installed, and a span costs its call even
   * then: bench/README.md, "Tracing off"). `Server.run` applies it with `Effect.withTracerEnabled`.
   */
  readonly tracing?: boolean
}

/** The command-line flags of `baton serve` (each overrides the file and the environment). */
export interface ServeFlags {
  readonly host?: string | undefined
  readonly port?: number | undefined
  readonly db?: string | undefined
  readonly dataDir?: string | undefined
  readonly databaseUrl?: string | undefined
  readonly config?: string | undefined
}

/** `a.b[2].c` from a parse issue's path. */
const formatPath = (path: ReadonlyArray<PropertyKey>) =>
  path.reduce<string>((out, key) => typeof key === "number" ? `${out}[${key}]` : out === "" ? String(key) : `${out}.${String(key)}`, "")

/**
 * Every field a parse error names, once each (an optional field's "Expected undefined" alternative is dropped):
 * `path: message; path: message`.
 */
export const describeIssues = (error: ParseResult.ParseError, prefix = "") => {
  const byPath = new Map<string, string>()
  const issues = ParseResult.ArrayFormatter.formatErrorSync(error)
  const meaningful = issues.filter((issue) => !issue.message.startsWith("Expected undefined"))
  for (const issue of meaningful.length > 0 ? meaningful : issues) {
    const path = issue.path.length === 0 ? (prefix === "" ? "(root)" : prefix) : formatPath([...(prefix === "" ? [] : [prefix]), ...issue.path])
    if (!byPath.has(path)) byPath.set(path, issue.message)
  }
  return [...byPath].map(([path, message]) => `${path}: ${message}`).join("; ")
}

const decodeFile = Schema.decodeUnknownEither(ConfigFile, { onExcessProperty: "error", errors: "all" })

/** Reads and validates a config file. Fails with `ConfigInvalid` naming the file and the fields. */
export const readConfigFile = (file: string) =>
  Effect.gen(function*() {
    const text = yield* Effect.try({
      try: () => Fs.readFileSync(file, "utf8"),
      catch: (e) =>
        new ConfigInvalid({
          source: file,
          reason: (e as NodeJS.ErrnoException).code === "EISDIR"
            ? "is a directory; give the JSON config file (docs/server.md)"
            : `cannot read it (${e instanceof Error ? e.message : String(e)})`
        })
    })
    const json = yield* Effect.try({
      try: (): unknown => JSON.parse(text),
      catch: (e) => new ConfigInvalid({ source: file, reason: `not valid JSON (${e instanceof Error ? e.message : String(e)})` })
    })
    const decoded = yield* Either.match(decodeFile(json), {
      onLeft: (error) => Effect.fail(new ConfigInvalid({ source: file, reason: describeIssues(error) })),
      onRight: Effect.succeed
    })
    if (decoded.providers === undefined) return decoded as ConfigFile
    const entries = decoded.providers.map(decodeProviderEntry)
    const bad = entries.flatMap((e) => Either.isLeft(e) ? [e.left] : [])
    if (bad.length > 0) return yield* new ConfigInvalid({ source: file, reason: bad.join("; ") })
    return { ...decoded, providers: entries.flatMap((e) => Either.isRight(e) ? [e.right] : []) } satisfies ConfigFile
  })

/** An optional environment variable (empty counts as unset). */
const env = (name: string) =>
  Effect.map(Config.option(Config.string(name)), (v) => Option.filter(v, (s) => s.length > 0)).pipe(
    Effect.mapError((e) => new ConfigInvalid({ source: name, reason: e.message })),
    Effect.map(Option.getOrUndefined)
  )

/** An optional environment variable holding a switch: `1`, `true`, `on` or `0`, `false`, `off` (any case). */
const envBoolean = (name: string) =>
  Effect.flatMap(env(name), (text) => {
    if (text === undefined) return Effect.succeed(undefined)
    const word = text.toLowerCase()
    if (word === "1" || word === "true" || word === "on") return Effect.succeed(true)
    if (word === "0" || word === "false" || word === "off") return Effect.succeed(false)
    return Effect.fail(new ConfigInvalid({ source: name, reason: `expected 1, true, on, 0, false or off, got "${text}"` }))
  })

/**
 * An optional environment variable holding an integer within `[min, max]`, in decimal digits: `Number` alone also
 * read `0x50` as 80 (`BATON_PORT=0x50` listened on port 80) and `1e6` as 1,000,000.
 */
const envInt = (name: string, min: number, max: number) =>
  Effect.flatMap(env(name), (text) => {
    if (text === undefined) return Effect.succeed(Option.none<number>())
    const n = decimal(text.trim())
    return Number.isInteger(n) && n >= min && n <= max
      ? Effect.succeed(Option.some(n))
      : Effect.fail(new ConfigInvalid({ source: name, reason: `expected an integer from ${min} to ${max}, got "${text}"` }))
  }).pipe(Effect.map(Option.getOrUndefined))

/** A token from the environment, checked like the file's. */
const envToken = (name: string) =>
  Effect.flatMap(env(name), (text) =>
    text === undefined ? Effect.succeed(Option.none<string>()) : Either.match(Schema.decodeUnknownEither(Token)(text), {
      onLeft: () => Effect.fail(new ConfigInvalid({ source: name, reason: "a token is 16 to 512 printable ASCII characters without spaces" })),
      onRight: (t) => Effect.succeed(Option.some(t))
    })).pipe(Effect.map(Option.getOrUndefined))

/**
 * Writes a new token to `file` (mode 0600) unless the file exists, in which case its token is read: several
 * `baton serve` processes started on one data directory at once all end with the one token that was written. The
 * token is written to a file of this process's own and linked into place, so `file` appears whole (a bare
 * `open(wx)` + write let another process read it empty, and refused the process that lost the race with `EEXIST`).
 * Where the file system has no hard links, written in place (`wx`). Fails with `ConfigInvalid` on any other error.
 */
export const createTokenFile = (file: string): Effect.Effect<{ readonly token: string; readonly created: boolean }, ConfigInvalid> =>
  Effect.suspend(() => {
    const unusable = unusableTokenFile(file)
    const token = Crypto.randomBytes(32).toString("base64url")
    const own = `${file}.${process.pid}.${Crypto.randomBytes(6).toString("hex")}.tmp`
    const existing = Effect.try({ try: () => ({ token: Fs.readFileSync(file, "utf8").trim(), created: false }), catch: unusable })
    const written = (write: () => void, otherwise: (code: string | undefined, e: unknown) => Effect.Effect<{ readonly token: string; readonly created: boolean }, ConfigInvalid>) =>
      Effect.try({ try: write, catch: (e) => new FileSystemError({ code: (e as NodeJS.ErrnoException).code, cause: e }) }).pipe(
        Effect.as({ token, created: true }),
        Effect.catchTag("FileSystemError", (e) => (e.code === "EEXIST" ? existing : otherwise(e.code, e.cause)))
      )
    const inPlace = written(() => Fs.writeFileSync(file, token + "\n", { mode: 0o600, flag: "wx" }), (_, e) => Effect.fail(unusable(e)))
    return written(() => {
      Fs.writeFileSync(own, token + "\n", { mode: 0o600, flag: "wx" })
      Fs.linkSync(own, file)
    }, (code, e) => (code !== undefined && noHardLinks.has(code) ? inPlace : Effect.fail(unusable(e)))).pipe(
      Effect.ensuring(Effect.sync(() => Fs.rmSync(own, { force: true })))
    )
  })

/** A file-system call that failed: its `errno` code (`EEXIST`, ...) and the error. */
class FileSystemError extends Data.TaggedError("FileSystemError")<{ readonly code: string | undefined; readonly cause: unknown }> {}

/** The errors of `link` on a file system without hard links. */
const noHardLinks = new Set(["EPERM", "ENOTSUP", "EOPNOTSUPP", "ENOSYS"])

/** The token file's `ConfigInvalid` for a file-system error. */
const unusableTokenFile = (file: string) => (e: unknown) =>
  new ConfigInvalid({ source: file, reason: `cannot read or create the token file (${e instanceof Error ? e.message : String(e)})` })

/**
 * The admin token in `file`, or a new one written there (mode 0600, its directory created): `created` whether this
 * call wrote it, `madeDirectory` the outermost directory it created for it (`null`: none), `held` the in-use mark it
 * put beside a file it read (`inUseMark`; `null` when it created the file). Fails with `ConfigInvalid` when the file
 * cannot be read or written, or holds no usable token.
 */
export const tokenFromFile = (file: string): Effect.Effect<
  { readonly token: string; readonly created: boolean; readonly madeDirectory: string | null; readonly held: string | null },
  ConfigInvalid
> => {
  const unusable = unusableTokenFile(file)
  const create = Effect.suspend(() => {
    const madeDirectory = outermostMissing(Path.dirname(Path.resolve(file)))
    return Database.makeDirectories(Path.dirname(Path.resolve(file))).pipe(
      Effect.mapError(unusable),
      Effect.zipRight(createTokenFile(file)),
      Effect.map((found) => ({ ...found, madeDirectory, held: null }))
    )
  })
  return Effect.suspend(() => {
    if (!Fs.existsSync(file)) return create
    // Marked before it is read: a cleanup that has not seen the mark yet has moved the file away first, so the read
    // below finds no file (or another process's new one) instead of a token about to be deleted.
    const held = inUseMark(file)
    // The marks of killed processes are swept here too, so restarts after SIGKILL do not pile them up.
    liveMarks(file)
    const fileSystem = (e: unknown) => new FileSystemError({ code: (e as NodeJS.ErrnoException).code, cause: e })
    // A directory this process may not write (a token file provisioned read-only) takes no mark: the file is read
    // all the same (it was not created by a serve that could not write there either, so no cleanup removes it).
    const marked = Either.isRight(Either.try(() => Fs.writeFileSync(held, "", { flag: "wx" })))
    return Effect.try({ try: () => Fs.readFileSync(file, "utf8").trim(), catch: fileSystem }).pipe(
      Effect.matchEffect({
        onSuccess: (token) => Effect.succeed({ token, created: false, madeDirectory: null, held: marked ? held : null }),
        onFailure: (e) => {
          Fs.rmSync(held, { force: true })
          // Removed between the look and the read: created here after all.
          return e.code === "ENOENT" ? create : Effect.fail(unusable(e.cause))
        }
      })
    )
  }).pipe(Effect.flatMap((found) => {
    if (Schema.is(Token)(found.token)) return Effect.succeed(found)
    if (found.held !== null) Fs.rmSync(found.held, { force: true })
    return Effect.fail(new ConfigInvalid({ source: file, reason: "the token file holds no usable token (16 to 512 printable ASCII characters)" }))
  }))
}

/**
 * A fresh in-use mark for the token file `file`: `FILE.in-use.PID.RANDOM` beside it, named by the process that holds
 * it so that a mark left by a killed process is told apart (`liveMarks`).
 */
const inUseMark = (file: string) => `${file}.in-use.${process.pid}.${Crypto.randomBytes(6).toString("hex")}`

/**
 * The in-use marks beside the token file `file` whose process is alive; the marks of processes that are gone are
 * removed on the way (a `baton serve` killed with SIGKILL leaves its mark).
 */
const liveMarks = (file: string): ReadonlyArray<string> => {
  const dir = Path.dirname(Path.resolve(file))
  const prefix = `${Path.basename(file)}.in-use.`
  const names = Either.getOrElse(Either.try(() => Fs.readdirSync(dir)), (): Array<string> => [])
  return names.filter((name) => {
    if (!name.startsWith(prefix)) return false
    const pid = Number(name.slice(prefix.length).split(".")[0])
    if (!Number.isInteger(pid) || pid <= 0 || processAlive(pid)) return true
    Either.try(() => Fs.rmSync(Path.join(dir, name), { force: true }))
    return false
  })
}

/** Whether process `pid` exists (signal 0 checks without sending; `EPERM`: it exists under another user). */
const processAlive = (pid: number) =>
  Either.match(Either.try(() => process.kill(pid, 0)), {
    onLeft: (e) => (e as NodeJS.ErrnoException).code === "EPERM",
    onRight: () => true
  })

/**
 * Removes this process's in-use mark on a token file another process created (`source.held`), when it stops serving
 * with that file's token. Nothing for any other source. Never fails.
 */
export const releaseTokenFile = (source: TokenSource): Effect.Effect<void> =>
  Effect.sync(() => {
    if (source._tag === "file" && source.held !== null) Either.try(() => Fs.rmSync(source.held!, { force: true }))
  })

/** The outermost of `dir` and its ancestors that does not exist (`null`: `dir` exists). */
const outermostMissing = (dir: string): string | null => {
  let missing: string | null = null
  for (let at = dir; !Fs.existsSync(at);) {
    missing = at
    const parent = Path.dirname(at)
    if (parent === at) break
    at = parent
  }
  return missing
}

/**
 * Undoes what `resolve` wrote for a server that then could not start (its database unreachable, its port taken
 * meanwhile): the token file it created, `token` its admin token, and the directories it created for it, those left
 * empty (a SQLite database created meanwhile keeps its directory). Nothing when the token came from elsewhere or the
 * file was there before. `baton serve --database-url URL` of an unreachable database left `./.baton/token` behind
 * (b47srv). The file stays when it no longer holds `token` (removed and written again by another process) or when a
 * live process holds an in-use mark on it (it read the token and serves with it): two `baton serve` started at once on
 * a fresh data directory, the one that could not start removed the token file the other served with (b48srv). The
 * file is first moved aside, then the marks are read, so a process that marks it later finds it gone and writes its
 * own; one that wrote a new file in that instant keeps it, and a reader that marked it just before then serves a
 * token no file holds. Never fails: what cannot be removed stays.
 */
export const removeCreatedTokenFile = (source: TokenSource, token: string): Effect.Effect<void> =>
  Effect.sync(() => {
    if (source._tag !== "file" || !source.created) return
    const holds = (path: string) => Either.getOrElse(Either.try(() => Fs.readFileSync(path, "utf8").trim() === token), () => false)
    if (!holds(source.path)) return
    const aside = `${source.path}.removing.${process.pid}.${Crypto.randomBytes(6).toString("hex")}`
    if (Either.isLeft(Either.try(() => Fs.renameSync(source.path, aside)))) return
    if (!holds(aside) || liveMarks(source.path).length > 0) {
      // Put back where it was, unless another process has written a new one meanwhile.
      Either.try(() => Fs.linkSync(aside, source.path))
      Either.try(() => Fs.rmSync(aside, { force: true }))
      return
    }
    Fs.rmSync(aside, { force: true })
    if (source.madeDirectory === null) return
    const outermost = Path.resolve(source.madeDirectory)
    for (let dir = Path.dirname(Path.resolve(source.path)); ; dir = Path.dirname(dir)) {
      // An empty directory only (rmdir refuses any other), up to the outermost one created.
      if (Either.isLeft(Either.try(() => Fs.rmdirSync(dir))) || dir === outermost || Path.dirname(dir) === dir) return
    }
  })

/** The host and port of `flags`, else the environment, else the config file `file`, else the defaults. */
const addressOf = (flags: ServeFlags, file: ConfigFile) =>
  Effect.gen(function*() {
    const host = flags.host ?? (yield* env("BATON_HOST")) ?? file.host ?? defaultHost
    const port = flags.port ?? (yield* envInt("BATON_PORT", 0, 65_535)) ?? file.port ?? defaultPort
    if (!Number.isInteger(port) || port < 0 || port > 65_535) {
      return yield* new ConfigInvalid({ source: "--port", reason: `expected 0 to 65535, got ${port}` })
    }
    return { host, port }
  })

/**
 * The config file of `flags` (`flags.config`, else `BATON_CONFIG`), read and validated once: `path` (absent: none)
 * and its content (`{}` without one). `baton serve` hands it to both `address` and `resolve`: each read the file
 * again, so a file changed between the reads was served half old, half new, and a FIFO (`--config <(...)`) was
 * read empty the second time and the start hung there (b47srv). Fails with `ConfigInvalid`.
 */
export const load = (flags: ServeFlags = {}): Effect.Effect<LoadedConfig, ConfigInvalid> =>
  Effect.gen(function*() {
    const path = flags.config ?? (yield* env("BATON_CONFIG"))
    return { path, file: path === undefined ? {} : yield* readConfigFile(path) }
  })

/** A config file as `load` read it: where from (`undefined`: none given) and what it says. */
export interface LoadedConfig {
  readonly path: string | undefined
  readonly file: ConfigFile
}

/**
 * The host and port the server of `flags` listens on, as `resolve` reads them (flags, `BATON_HOST`/`BATON_PORT`,
 * the config file, the defaults 127.0.0.1:8787), without writing anything: `baton serve` checks the port is free
 * before `resolve` creates the token file and the server its database. `loaded` is the config file as `load` read it
 * (absent: read here). Fails with `ConfigInvalid`.
 */
export const address = (flags: ServeFlags = {}, loaded?: LoadedConfig) =>
  Effect.flatMap(loaded === undefined ? load(flags) : Effect.succeed(loaded), ({ file }) => addressOf(flags, file))

/**
 * Resolves the configuration: defaults, then the config file (`flags.config`, else `BATON_CONFIG`), then the
 * environment (`BATON_HOST`, `BATON_PORT`, `BATON_DATABASE_URL`, `BATON_DATA_DIR`, `BATON_PROVIDERS`,
 * `BATON_TOKEN`, `BATON_READ_TOKEN`, `BATON_MAX_BODY_BYTES`, `BATON_TRACING`), then the flags. Creates the token file when it
 * supplies the admin token, once everything else has been checked. `loaded` is the config file as `load` read it
 * (absent: read here). Fails with `ConfigInvalid`.
 */
export const resolve = (flags: ServeFlags = {}, loaded?: LoadedConfig) =>
  Effect.gen(function*() {
    const { path: configPath, file } = loaded ?? (yield* load(flags))
    const { host, port } = yield* addressOf(flags, file)

    // The database: a flag wins, then BATON_DATABASE_URL / BATON_DATA_DIR, then the file, then ./.baton.
    const envUrl = yield* env("BATON_DATABASE_URL")
    const envDataDir = yield* env("BATON_DATA_DIR")
    const dataDir = flags.dataDir ?? envDataDir ?? file.database?.dataDir ?? Database.defaultDataDir
    const database: DatabaseSetting = flags.databaseUrl !== undefined
      ? { _tag: "postgres", url: flags.databaseUrl }
      : flags.db !== undefined || flags.dataDir !== undefined
      ? { _tag: "sqlite", path: flags.db ?? Path.join(dataDir, Database.sqliteFileName) }
      : envUrl !== undefined
      ? { _tag: "postgres", url: envUrl }
      : file.database?.url !== undefined
      ? { _tag: "postgres", url: file.database.url }
      : { _tag: "sqlite", path: file.database?.sqlitePath ?? Path.join(dataDir, Database.sqliteFileName) }

    const envProviders = yield* env("BATON_PROVIDERS")
    let providers: ReadonlyArray<ProviderSetting>
    if (envProviders !== undefined || file.providers === undefined) {
      const parsed = ProviderSpec.parse(envProviders ?? ProviderSpec.defaultProviders)
      if (Either.isLeft(parsed)) return yield* new ConfigInvalid({ source: "BATON_PROVIDERS", reason: parsed.left.message })
      providers = parsed.right
    } else {
      const names = file.providers.map((p) => p.name)
      const twice = names.findIndex((n, i) => names.indexOf(n) !== i)
      if (twice >= 0) return yield* new ConfigInvalid({ source: configPath ?? "config", reason: `providers[${twice}].name: "${names[twice]}" given twice` })
      const resolved: Array<ProviderSetting> = []
      for (const [i, p] of file.providers.entries()) {
        if (isCodexEntry(p)) {
          const { name, ...config } = p
          // Codex refuses a CODEX_HOME that is not a directory, and only when a turn starts it: say so at start.
          if (config.codexHome !== undefined && !(Fs.existsSync(config.codexHome) && Fs.statSync(config.codexHome).isDirectory())) {
            return yield* new ConfigInvalid({ source: configPath ?? "config", reason: `providers[${i}].codexHome: ${config.codexHome} is not a directory (Codex's CODEX_HOME must exist)` })
          }
          // A missing binary is said at start too, not at the instance's first use (found by a review).
          const binary = config.binary ?? CodexAppServer.defaultBinary()
          if (binary === null) {
            return yield* new ConfigInvalid({ source: configPath ?? "config", reason: `providers[${i}].binary: the @openai/codex platform binary is not installed (pnpm add @openai/codex@0.171.0, or name an executable)` })
          }
          if (!isExecutableFile(binary)) {
            return yield* new ConfigInvalid({ source: configPath ?? "config", reason: `providers[${i}].binary: ${binary} is not an executable file` })
          }
          resolved.push({ _tag: "codex", name, config })
          continue
        }
        if (!isModelEntry(p)) {
          resolved.push(ProviderSpec.fromJson(p))
          continue
        }
        const { name, toolResultOffload, ...config } = p
        // A named key variable that is unset stops the start: a request without a key would only fail later.
        const unset = new ConfigInvalid({
          source: configPath ?? "config",
          reason: `providers[${i}].apiKeyEnv: the environment variable ${config.apiKeyEnv} (the key of provider "${name}") is not set`
        })
        const apiKey = yield* Effect.mapError(ProviderConfig.apiKey(config), () => unset)
        if (Option.isSome(apiKey) && Redacted.value(apiKey.value) === "") return yield* unset
        const { enabled = true, ...overrides } = typeof toolResultOffload === "object" ? toolResultOffload : { enabled: toolResultOffload ?? true }
        const settings = ToolResultOffload.withOverrides(ToolResultOffload.defaults, overrides)
        const problems = ToolResultOffload.problems(settings)
        if (problems.length > 0) {
          return yield* new ConfigInvalid({ source: configPath ?? "config", reason: `providers[${i}].toolResultOffload: ${problems.join("; ")}` })
        }
        resolved.push({ _tag: "model", name, config, apiKey, toolResultOffload: { enabled, settings } })
      }
      providers = resolved
    }

    const maxBodyBytes = (yield* envInt("BATON_MAX_BODY_BYTES", 1_024, 1_073_741_824)) ?? file.limits?.maxBodyBytes ?? defaultMaxBodyBytes
    const summariser = file.offload?.summariser ?? null
    if (summariser !== null && !providers.some((p) => isModelInstance(p) && p.name === summariser)) {
      const models = providers.filter(isModelInstance).map((p) => `"${p.name}"`)
      return yield* new ConfigInvalid({
        source: configPath ?? "config",
        reason: `offload.summariser: "${summariser}" is not a model-API provider instance of this config` +
          (models.length === 0 ? " (it has none)" : ` (one of ${models.join(", ")})`)
      })
    }
    const routes = file.gateway?.routes ?? []
    for (const [i, route] of routes.entries()) {
      const target = providers.find((p) => p.name === route.provider)
      if (target === undefined || !isModelInstance(target) || !gatewayKinds.includes(target.config.kind)) {
        const candidates = providers.filter((p) => isModelInstance(p) && gatewayKinds.includes(p.config.kind)).map((p) => `"${p.name}"`)
        return yield* new ConfigInvalid({
          source: configPath ?? "config",
          reason: `gateway.routes[${i}].provider: "${route.provider}" is not an anthropic-messages, openai-responses or openai-chat provider instance of this config` +
            (candidates.length === 0 ? " (it has none)" : ` (one of ${candidates.join(", ")})`)
        })
      }
    }
    const hook = file.offload?.preCompactHook
    const auto = file.offload?.auto
    if (hook !== undefined && (hook.url === undefined) === (hook.command === undefined)) {
      return yield* new ConfigInvalid({ source: configPath ?? "config", reason: "offload.preCompactHook: give exactly one of url and command" })
    }
    // The token file last: a configuration refused above leaves no file behind.
    const envToken_ = yield* envToken("BATON_TOKEN")
    const readToken = (yield* envToken("BATON_READ_TOKEN")) ?? file.auth?.readToken
    let adminToken: string
    let source: TokenSource
    if (envToken_ !== undefined) {
      adminToken = envToken_
      source = { _tag: "env" }
    } else if (file.auth?.token !== undefined) {
      adminToken = file.auth.token
      source = { _tag: "config" }
    } else {
      const tokenFile = file.auth?.tokenFile ?? Path.join(dataDir, "token")
      const found = yield* tokenFromFile(tokenFile)
      adminToken = found.token
      source = { _tag: "file", path: tokenFile, created: found.created, madeDirectory: found.madeDirectory, held: found.held }
    }
    if (readToken !== undefined && readToken === adminToken) {
      yield* releaseTokenFile(source)
      return yield* new ConfigInvalid({ source: "auth", reason: "the read-only token must differ from the admin token" })
    }

    return {
      host,
      port,
      database,
      providers,
      auth: {
        adminToken: Redacted.make(adminToken),
        readToken: readToken === undefined ? null : Redacted.make(readToken),
        source
      },
      limits: {
        maxBodyBytes,
        shutdownTimeoutMs: file.limits?.shutdownTimeoutMs ?? defaultShutdownTimeoutMs,
        interruptTimeoutMs: file.limits?.interruptTimeoutMs ?? defaultInterruptTimeoutMs,
        turnTimeoutMs: file.limits?.turnTimeoutMs ?? 1_800_000,
        toolResultTimeoutMs: file.limits?.toolResultTimeoutMs ?? 600_000
      },
      offload: {
        summariser,
        ...(hook === undefined ? {} : { preCompactHook: { url: hook.url, command: hook.command, timeoutMs: hook.timeoutMs ?? 10_000 } }),
        ...(auto === undefined ? {} : {
          auto: { thresholdRatio: auto.thresholdRatio, keepTokens: auto.keepTokens ?? null, approvalMode: auto.approvalMode ?? defaultAutoApprovalMode }
        })
      },
      gateway: { routes, maxBodyBytes: file.gateway?.maxBodyBytes ?? defaultGatewayMaxBodyBytes },
      tracing: (yield* envBoolean("BATON_TRACING")) ?? file.tracing ?? false
    } satisfies ServerSettings
  })

/** What the PreCompact hook is told of an automatic `/offload`'s approval: the server's configured policy. */
export const defaultAutoApprovalMode = "server-policy"

/**
 * The host to hand the listener: `host` without the brackets of an IPv6 literal (`[::1]` -> `::1`; node's `listen`
 * resolves a bracketed literal as a host name and fails with `ENOTFOUND`); anything else as given.
 */
export const listenHost = (host: string): string =>
  host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host

/** `host:port`, an IPv6 address in brackets (`[::1]:8787`) so the port is told apart; `host` as given or bare. */
export const hostPort = (host: string, port: number): string => {
  const bare = listenHost(host)
  return `${bare.includes(":") ? `[${bare}]` : bare}:${port}`
}

/**
 * The base URL of a listener at `hostname`:`port` (a TCP address as node reports it): `http://HOST:PORT`, an IPv6
 * address in brackets (`http://[::1]:8787`), so the printed line is a usable `--server` URL.
 */
export const serverUrl = (address: { readonly hostname: string; readonly port: number }): string =>
  `http://${hostPort(address.hostname, address.port)}`

/**
 * `text` read as a non-negative integer in decimal digits only, else `NaN`: `Number` alone also reads `0x50` as 80
 * and `1e6` as 1,000,000 (`--port`, `BATON_PORT`, `BATON_MAX_BODY_BYTES`).
 */
export const decimal = (text: string): number => /^[0-9]+$/.test(text) ? Number(text) : Number.NaN

/**
 * Whether `host` (as `--host`, `BATON_HOST` or the file's `host` give it) binds only the loopback interface:
 * `localhost` (any case), an IPv4 address of 127.0.0.0/8 (a dotted quad), or an IPv6 address (brackets allowed) that
 * is `::1` or an IPv4-mapped address of 127.0.0.0/8 (`::ffff:127.0.0.1`, `::ffff:7f00:1`, `::ffff:127.x.y.z`), in any
 * spelling of either. Anything else is beyond loopback: the wildcards `0.0.0.0` and `::`, another address, an address
 * with a zone (`fe80::1%eth0`), or a host name, even one that starts with `127.` (DNS says where it points).
 */
export const isLoopback = (host: string): boolean => {
  const name = host.toLowerCase()
  if (name === "localhost") return true
  if (Net.isIPv4(name)) return name.startsWith("127.")
  const bare = listenHost(name)
  if (!Net.isIPv6(bare) || bare.includes("%")) return false
  // The URL standard's serialisation of an IPv6 address is canonical: compressed, lower case, a mapped IPv4 address
  // as two hex groups (`::ffff:127.0.0.1` is `[::ffff:7f00:1]`).
  const canonical = new URL(`http://[${bare}]/`).hostname
  if (canonical === "[::1]") return true
  const mapped = /^\[::ffff:([0-9a-f]{1,4}):[0-9a-f]{1,4}\]$/.exec(canonical)
  return mapped !== null && Number.parseInt(mapped[1]!, 16) >> 8 === 127
}
