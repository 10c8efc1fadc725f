/**
 * Server: the Baton HTTP server's Layer graph and its lifecycle.
 *
 * - `httpLayer` is the API over an orchestrator the caller provides: `BatonApi` with its handlers and bearer-token
 *   auth, the agent-facing gateway (`Gateway`: `/v1/messages`), `/openapi.json`, the offline API reference at `/docs` (Scalar, its script inlined from
 *   `@effect/platform`: no CDN), the dashboard at `/` (`WebApp`), all behind `HttpGuard`. Tests serve it on `NodeHttpServer.layerTest`.
 * - `orchestratorLayer` is the embedded default: the database of the settings (SQLite file or Postgres), its provider
 *   instances (scripted, or model APIs: Anthropic Messages, OpenAI Responses, Chat Completions), random ids, and the `RunDriver` (which reconciles runs left by a dead process when built).
 * - `run` serves both on `host:port` until interrupted (SIGINT/SIGTERM under the CLI's runtime), then shuts down in
 *   order: the run driver stops taking runs, the listener stops accepting and open requests get `shutdownTimeoutMs` to finish before their
 *   connections are closed; then the gateway's records still in flight are waited for (`ServerShutdown`, at most
 *   `recordGraceMs`), so each request the gateway forwarded has its outcome recorded; then the run driver interrupts
 *   the turns in flight (each bounded by `interruptTimeoutMs`) so each ends with a recorded outcome (`process_stopped`).
 */
import * as PreCompactHooks from "./PreCompactHooks.js"
import { Api } from "@baton/contracts"
import { Budget, TokenCounter } from "@baton/context"
import { IdGenerator, OrchestratorConfig, OrchestratorLayer, RunDriver, ThreadRead } from "@baton/orchestration"
import type { ProviderInstance } from "@baton/contracts"
import { Database, NativeMessageStore } from "@baton/persistence"
import { CodexAdapter, ModelProviders, ModelSummariser, type ProviderAdapter, ProviderRegistry, ProviderSpec, ScriptedProvider, ScriptedSummariser, Summariser } from "@baton/providers"
import { HttpApiBuilder, HttpApiScalar, HttpClient, HttpMiddleware, HttpRouter, HttpServer } from "@effect/platform"
import { NodeHttpClient, NodeHttpServer } from "@effect/platform-node"
import { Console, Data, Deferred, Effect, Exit, Function, Layer, type Scope } from "effect"
import * as Http from "node:http"
import * as Net from "node:net"
import type { Duplex } from "node:stream"
import * as Auth from "./Auth.js"
import { continueOnRead } from "./BodyDrain.js"
import * as EventStream from "./EventStream.js"
import * as Gateway from "./Gateway.js"
import * as Handlers from "./Handlers.js"
import * as HttpGuard from "./HttpGuard.js"
import * as ServerConfig from "./ServerConfig.js"
import * as ServerShutdown from "./ServerShutdown.js"
import * as WebApp from "./WebApp.js"

/** What `httpLayer` needs to know: the tokens it accepts and the request body limit in bytes. */
export interface HttpOptions {
  readonly tokens: Auth.Tokens
  readonly maxBodyBytes: number
  /** Where the built dashboard is (default `WebApp.defaultDir()`: `apps/web/dist`). */
  readonly webDir?: string
  /** The gateway's routes, the provider instances they name and its body limit (absent: no route, every model 404). */
  readonly gateway?: Omit<Gateway.GatewayOptions, "tokens">
}

/**
 * The API, `/openapi.json` and `/docs`, behind the guard, served on whatever `HttpServer` the caller provides.
 * Requires the orchestration services (`OrchestratorLayer.layer`), `RunDriver` and `IdGenerator`.
 */
export const httpLayer = (options: HttpOptions) =>
  HttpApiBuilder.serve(HttpGuard.middleware({ maxBodyBytes: options.maxBodyBytes, tokens: options.tokens })).pipe(
    Layer.provide(WebApp.layer(options.webDir)),
    Layer.provide(Gateway.layer({ tokens: options.tokens, routes: [], providers: [], maxBodyBytes: ServerConfig.defaultGatewayMaxBodyBytes, ...options.gateway })),
    Layer.provide(HttpApiScalar.layer({ path: "/docs", scalar: { withDefaultFonts: false } })),
    Layer.provide(HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" })),
    Layer.provide(HttpApiBuilder.api(Api.BatonApi).pipe(
      Layer.provide(Handlers.layer),
      Layer.provide(Auth.sessionLayer(options.tokens)),
      Layer.provide(Auth.layer(options.tokens))
    )),
    // Path parameters up to the longest id the API accepts (200 characters, percent-encoded up to 3 bytes each):
    // the router's default (100) answered a longer, valid operation id 404 RouteNotFound (review finding).
    Layer.provide(HttpRouter.setRouterConfig({ maxParamLength: 1_024 })),
    // The shutdown signal the live event streams end on (completed by `layer`'s shutdown), also in the output.
    Layer.provideMerge(EventStream.Stopping.layer),
    // The gateway's records in flight, which the shutdown waits for, and the deadline's signal (`ServerShutdown`):
    // the same value `listener` merges beneath its server, so one instance in a whole server.
    Layer.provideMerge(ServerShutdown.layer)
  )

/** The database Layer of the settings. */
export const databaseLayer = (database: ServerConfig.DatabaseSetting) =>
  database._tag === "postgres" ? Database.layerPg({ url: database.url }) : Database.layerSqlite(database.path)

/**
 * The provider registry of the settings, in their order: a scripted adapter per scripted spec (all playing back one
 * script, counting with `counter`), a model-API adapter per model instance (its key read at start, its native
 * threads in the database's `NativeMessageStore`, requests over undici, tool-result offload as configured), each
 * decorated by `wrapAdapter`. Requires the database's `SqlClient`.
 */
export const registryLayer = (
  settings: ServerConfig.ServerSettings,
  counter: TokenCounter.TokenCounterShape,
  wrapAdapter: (adapter: ProviderAdapter.ProviderAdapterShape) => ProviderAdapter.ProviderAdapterShape
) =>
  Layer.scoped(ProviderRegistry.ProviderRegistry, Effect.gen(function*() {
    const log = yield* NativeMessageStore.make
    const http = yield* HttpClient.HttpClient
    const script = ScriptedProvider.makeScript()
    const adapters = yield* Effect.forEach(settings.providers, (p): Effect.Effect<ProviderAdapter.ProviderAdapterShape, never, Scope.Scope> =>
      ServerConfig.isModelInstance(p)
        ? Effect.succeed(ModelProviders.make({
          instance: p.name as ProviderInstance,
          config: p.config,
          apiKey: p.apiKey,
          log,
          http,
          // Always with a counter: a thread may turn offload on where the instance has it off (docs/offload.md).
          offload: { count: counter.count, enabled: p.toolResultOffload.enabled, settings: p.toolResultOffload.settings }
        }))
        : ServerConfig.isCodexInstance(p)
        // One `codex app-server` child per instance, started at its first use and killed when the layer closes.
        ? CodexAdapter.make({ instance: p.name as ProviderInstance, config: p.config, dynamicTools: [ThreadRead.definition] })
        : Effect.succeed(ProviderSpec.scripted([p], script, counter)[0]!))
    return ProviderRegistry.make(adapters.map(wrapAdapter))
  })).pipe(Layer.provide(NodeHttpClient.layerUndici))

/**
 * The embedded orchestrator of the settings: database, the provider instances (`registryLayer`), the `/offload`
 * summariser, the tokenizer, random ids, the driver's timeouts, and the `RunDriver`. `wrapAdapter` (default: none)
 * decorates each provider adapter (the load benchmark times the provider call with it).
 */
export const orchestratorLayer = (
  settings: ServerConfig.ServerSettings,
  wrapAdapter: (adapter: ProviderAdapter.ProviderAdapterShape) => ProviderAdapter.ProviderAdapterShape = (adapter) => adapter
) => {
  const counter = TokenCounter.make()
  const registry = registryLayer(settings, counter, wrapAdapter)
  const summariser = settings.offload?.summariser ?? null
  // The configured instance writes `/offload` summaries (ModelSummariser, on the registry's adapter: the config
  // check made sure it is a model-API instance), else the offline digest.
  const summariserLayer = summariser === null
    ? ScriptedSummariser.layer(ScriptedSummariser.make(counter))
    : Layer.effect(
      Summariser.Summariser,
      Effect.map(Effect.orDie(Effect.flatMap(ProviderRegistry.ProviderRegistry, (r) => r.get(summariser as ProviderInstance))), (adapter) => ModelSummariser.make(adapter))
    )
  return RunDriver.RunDriver.Default.pipe(
    Layer.provideMerge(OrchestratorLayer.layer),
    Layer.provide(PreCompactHooks.layer(settings.offload?.preCompactHook ?? null)),
    Layer.provideMerge(summariserLayer),
    Layer.provideMerge(registry),
    Layer.provideMerge(databaseLayer(settings.database)),
    Layer.provide(Layer.succeed(TokenCounter.TokenCounter, counter)),
    Layer.provideMerge(IdGenerator.layerRandom),
    Layer.provide(OrchestratorConfig.layer({
      interruptTimeoutMillis: settings.limits.interruptTimeoutMs,
      turnTimeoutMillis: settings.limits.turnTimeoutMs,
      toolResultTimeoutMillis: settings.limits.toolResultTimeoutMs,
      autoOffload: settings.offload?.auto ?? null
    }))
  )
}

/**
 * Makes `server` answer the requests Node refuses before the API sees them (malformed HTTP: 400, headers over Node's
 * limit: 431, a request timeout: 408, an `Expect` other than `100-continue`: 417) in the API's error shape (JSON with
 * `_tag`, `reason` and `message`, `connection: close`) instead of Node's bodyless answers; a 431, 400 or 417 of a
 * request to a gateway path, in its agent's protocol (`Gateway.nodeRefusalOf`, `Gateway.refusalOn`: Anthropic's or
 * OpenAI's error shape); and `Expect: 100-continue` answered lazily (`BodyDrain.continueOnRead`: `100 Continue` once
 * the body is read, so a body refused unread is refused without it). Returns `server`.
 */
export const answerNodeRefusals = (server: Http.Server): Http.Server => {
  // Requests Node refuses before the API sees them (malformed HTTP, headers over its limit, an `Expect` other than
  // `100-continue`) get the API's error shape too, not Node's bodyless answers (the fuzz test's last exemption).
  server.on("clientError", (error: NodeJS.ErrnoException & { readonly rawPacket?: Buffer }, socket: Duplex) => {
    // As Node's own handler: nothing is written on a socket whose current answer has started (the API or the 417
    // below answered, and the parser then failed on what followed; a second answer would corrupt the stream).
    const answering = (socket as Duplex & { readonly _httpMessage?: { readonly headersSent?: boolean } | null })._httpMessage
    if (error.code === "ECONNRESET" || !socket.writable || answering?.headersSent === true) {
      socket.destroy()
      return
    }
    const [status, text, tag, reason] = error.code === "HPE_HEADER_OVERFLOW"
      ? [431, "Request Header Fields Too Large", "RequestHeadersTooLarge", "the request's headers are larger than the server accepts (16 KiB)"]
      : error.code === "ERR_HTTP_REQUEST_TIMEOUT"
      ? [408, "Request Timeout", "RequestTimeout", "the request did not arrive in time"]
      : [400, "Bad Request", "InvalidRequest", `malformed HTTP request (${error.code ?? "parse error"})`]
    // On the gateway's paths (a `POST /v1/messages` request line in the bytes Node refused), in the agent's protocol:
    // its client reads Baton's `_tag` body as no error it knows. A request timeout stays the API's (no agent protocol
    // has an error of its own for it, and its request line is long gone).
    const agents = status === 408 ? null : Gateway.nodeRefusalOf(error.rawPacket, status === 431 ? "headers_too_large" : "invalid", reason)
    const body = agents === null ? JSON.stringify({ _tag: tag, reason, message: reason }) : Buffer.from(agents.body).toString("utf8")
    // The answer to a HEAD request carries no body (a client would read it as the start of the next answer).
    const head = error.rawPacket?.subarray(0, 5).toString("latin1") === "HEAD "
    socket.end(`HTTP/1.1 ${status} ${text}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${head ? "" : body}`)
  })
  server.on("checkExpectation", (request: Http.IncomingMessage, response: Http.ServerResponse) => {
    const reason = `Expect: only 100-continue is supported, got ${JSON.stringify(String(request.headers["expect"] ?? "").slice(0, 60))}`
    // On the gateway's paths in the agent's protocol, as the 431 and 400 above.
    const agents = Gateway.refusalOn(request.method ?? "", request.url ?? "", "expectation", reason)
    response.writeHead(417, { "content-type": "application/json", connection: "close" })
    response.end(agents === null ? JSON.stringify({ _tag: "InvalidRequest", reason, message: reason }) : agents.body)
  })
  return continueOnRead(server)
}

/**
 * A Node HTTP server on `host:port` whose open connections are closed `shutdownTimeoutMs` after shutdown begins
 * (the listener stops accepting at once; requests still open by the deadline are cut, `ServerShutdown.cutting`
 * completed first), and whose release then waits for the gateway's records in flight (`ServerShutdown`, at most
 * `recordGraceMs`). Until the API is served on it,
 * every request is answered 503 `ServerStarting` with `Retry-After: 1`; once the API has left it (the shutdown: a
 * request on a connection still open), 503 `ServerStopping` with `Retry-After: 1` and `connection: close`. A `POST`
 * to a gateway path gets the same 503 in its agent's protocol (`Gateway.refusalOn`, `unavailable`).
 */
export const listener = (settings: Pick<ServerConfig.ServerSettings, "host" | "port" | "limits">) =>
  Layer.unwrapEffect(Effect.sync(() => {
    const server = Http.createServer()
    // The socket listens before the API is attached (the API is built on the listening server): a request in that
    // window would find no handler and hang. Until the API's handler joins this one, answer 503 with Retry-After.
    // After the API's handler has joined and left again, the server is stopping, not starting (found by a user: a
    // request on a kept-alive connection during the shutdown was told "the server is starting").
    // On the gateway's paths the 503 is in the agent's protocol (Anthropic `overloaded_error`, OpenAI `server_error`),
    // which its SDK retries after `Retry-After`: found at an earlier stop, an agent was given Baton's `_tag` body, no
    // error it knows.
    let served = false
    server.on("request", (request: Http.IncomingMessage, response: Http.ServerResponse) => {
      if (server.listenerCount("request") > 1) return
      const [tag, message, close] = served
        ? ["ServerStopping", "the server is stopping; retry in a moment (it or another process may serve then)", true] as const
        : ["ServerStarting", "the server is starting; retry in a moment", false] as const
      const agents = Gateway.refusalOn(request.method ?? "", request.url ?? "", "unavailable", `Baton: ${message}`)
      response.writeHead(503, { "content-type": "application/json", "retry-after": "1", ...(close ? { connection: "close" } : {}) })
      response.end(agents === null ? JSON.stringify({ _tag: tag, message }) : agents.body)
    })
    server.on("newListener", (event: string | symbol) => {
      if (event === "request") served = true
    })
    answerNodeRefusals(server)
    // Built after the server, so its finalizer runs before the server's close (which waits for open connections).
    // At the deadline the shutdown's `cutting` is completed first: an answer the close cuts is the shutdown's doing
    // (`process_stopped`), one its agent stopped reading before it is the agent's hang-up.
    const deadline = Layer.scopedDiscard(Effect.flatMap(Effect.zipRight(HttpServer.HttpServer, ServerShutdown.ServerShutdown), ({ cutting }) =>
      Effect.addFinalizer(() =>
        Effect.sync(() => {
          server.closeIdleConnections()
          setTimeout(() => {
            Deferred.unsafeDone(cutting, Exit.void)
            server.closeAllConnections()
          }, settings.limits.shutdownTimeoutMs).unref()
        })
      )))
    // `ServerShutdown` beneath the server (built before it, released after its close): the gateway's records still in
    // flight once the connections are closed are waited for (`ServerShutdown.recordGraceMs` at most) before what
    // was built before the listener (the orchestrator, its database) is released. The same value `httpLayer`
    // merges: one instance in a whole server.
    return Layer.provideMerge(deadline, NodeHttpServer.layer(() => server, { host: ServerConfig.listenHost(settings.host), port: settings.port })).pipe(
      Layer.provideMerge(ServerShutdown.layer)
    )
  }))

/** `url` with the password of its user info, if any, shown as `***`. */
const hidePassword = (url: string) => url.replace(/\/\/([^:@/]*):[^@/]*@/, "//$1:***@")

/**
 * The startup lines (stderr): database, providers, a warning for each instance whose window is too small for the
 * turn-start reserve (`Budget.turnStartWarning`) and where the admin token is. (The warning for a host beyond
 * loopback comes once the listener is up, in `layer`: a listen that fails says only why.)
 */
export const describeSettings = (settings: ServerConfig.ServerSettings) =>
  Effect.gen(function*() {
    const db = settings.database._tag === "sqlite"
      ? `SQLite ${settings.database.path}`
      : `Postgres ${hidePassword(settings.database.url)}`
    yield* Effect.logInfo(`database: ${db}`)
    // A model instance shows its kind, model, endpoint and the *name* of its key's variable, never the key.
    yield* Effect.logInfo(`providers: ${
      settings.providers.map((p) =>
        ServerConfig.isModelInstance(p)
          ? `${p.name} (${p.config.kind} ${p.config.model} at ${hidePassword(p.config.baseUrl)}, window ${p.config.contextWindow}` +
            `${p.config.apiKeyEnv === undefined ? "" : `, key from ${p.config.apiKeyEnv}`}${p.toolResultOffload.enabled ? "" : ", no tool-result offload"})`
          : ServerConfig.isCodexInstance(p)
          ? `${p.name} (codex app-server ${p.config.binary ?? "of @openai/codex 0.171.0"}, CODEX_HOME ${p.config.codexHome ?? "default"}` +
            `${p.config.model === undefined ? "" : `, model ${p.config.model}`}${p.config.contextWindow === undefined ? "" : `, window ${p.config.contextWindow}`})`
          : `${p.name} (window ${p.window}${p.inject ? ", injects" : ""})`
      ).join(", ")
    }`)
    // An instance whose window is below the turn-start reserve never gets owed history at a turn start: say so now,
    // not when a user wonders where the history went (the same sentence `baton replay` prints).
    for (const p of settings.providers) {
      const { autoCompactThreshold, window } = ServerConfig.windowOf(p)
      // A Codex instance without a configured window learns it from Codex's usage reports: nothing to warn about yet.
      if (window === null) continue
      const warning = Budget.turnStartWarning({
        name: p.name,
        window,
        autoCompactThreshold,
        canInject: ServerConfig.isModelInstance(p) || ServerConfig.isCodexInstance(p) || p.inject
      })
      if (warning !== null) yield* Effect.logWarning(`provider ${warning}`)
    }
    const source = settings.auth.source
    yield* Effect.logInfo(
      source._tag === "file"
        ? `admin token: ${source.created ? "created in" : "read from"} ${source.path} (send it as "Authorization: Bearer <token>")`
        : `admin token: from ${source._tag === "env" ? "BATON_TOKEN" : "the config file"}`
    )
    if (settings.auth.readToken !== null) yield* Effect.logInfo("read-only token: configured")
  })

/** The gateway options of the settings. */
export const gatewayOf = (settings: ServerConfig.ServerSettings): Omit<Gateway.GatewayOptions, "tokens"> => ({
  routes: settings.gateway?.routes ?? [],
  providers: settings.providers,
  maxBodyBytes: settings.gateway?.maxBodyBytes ?? ServerConfig.defaultGatewayMaxBodyBytes
})

/**
 * The whole server of the settings: orchestrator, API and listener; prints `listening on http://HOST:PORT` on
 * stdout once it accepts connections (after a warning on stderr when the host is beyond loopback). Its shutdown
 * begins by telling the run driver to stop taking runs (`RunDriver.stopTaking`), before the listener gives open
 * requests their deadline: a live event stream holds the shutdown until that deadline, and the driver must not start
 * the queued runs meanwhile (each would reach the provider only to be interrupted).
 */
export const layer = (settings: ServerConfig.ServerSettings) =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const server = yield* HttpServer.HttpServer
    const driver = yield* RunDriver.RunDriver
    const stopping = yield* EventStream.Stopping
    // Built last, so released first: before the listener's deadline and close. The live event streams end now too
    // (each with a `server_stopping` event), so a follower does not hold the shutdown till the deadline.
    yield* Effect.addFinalizer(() => Effect.zipRight(driver.stopTaking, Deferred.succeed(stopping, undefined)))
    yield* ServerConfig.isLoopback(settings.host)
      ? Effect.void
      : Effect.logWarning(`listening on ${settings.host}, beyond loopback: anyone who can reach it and holds a token can use it; serve it behind TLS`)
    yield* Console.log(`listening on ${server.address._tag === "TcpAddress" ? ServerConfig.serverUrl(server.address) : HttpServer.formatAddress(server.address)}`)
  })).pipe(
    Layer.provideMerge(httpLayer({
      tokens: { admin: settings.auth.adminToken, read: settings.auth.readToken },
      maxBodyBytes: settings.limits.maxBodyBytes,
      gateway: gatewayOf(settings)
    })),
    // Built in this order, released in the reverse: the orchestrator (recovery at start), then the listener, then
    // the API on it. At shutdown the listener closes (open requests get the deadline) before the run driver stops.
    Layer.provide(listener(settings)),
    Layer.provide(orchestratorLayer(settings))
  )

/**
 * The listener could not start on the settings' host and port: the port is taken (`EADDRINUSE`), the host is not an
 * address of this machine or cannot be resolved, or binding is not allowed; `message` says which, in the system's
 * words, and what to do.
 */
export class ListenError extends Data.TaggedError("ListenError")<{ readonly message: string }> {}

/** The `ListenError` of the platform's `ServeError` (its cause the `listen` error of node). */
const listenError = (settings: Pick<ServerConfig.ServerSettings, "host" | "port">, cause: unknown) => {
  const e = typeof cause === "object" && cause !== null ? cause as { readonly code?: unknown; readonly message?: unknown } : {}
  const said = typeof e.message === "string" ? e.message : String(cause)
  const hint = e.code === "EADDRINUSE"
    ? "another process holds that port: stop it, or pass another --port (0: any free port)"
    : "check --host (an address of this machine, e.g. 127.0.0.1) and --port"
  return new ListenError({ message: `cannot listen on ${ServerConfig.hostPort(settings.host, settings.port)} (${said}); ${hint}` })
}

/**
 * Checks, before anything is written, that the listener of `settings` can start: binds a probe on the host and port
 * and closes it at once. Fails with the `ListenError` the listener itself would (the port taken, the host not an
 * address of this machine), so `baton serve` on a busy port says so without leaving a token file or a database
 * behind (found by a newcomer's walk, b46ux: both were created before the listen failed). Port 0 (any free port)
 * needs no check. A port taken between the check and the listen still fails the listen, with the same message.
 */
export const checkListen = (settings: Pick<ServerConfig.ServerSettings, "host" | "port">): Effect.Effect<void, ListenError> =>
  settings.port === 0 ? Effect.void : Effect.async<void, ListenError>((resume) => {
    const probe = Net.createServer()
    probe.once("error", (e) => resume(Effect.fail(listenError(settings, e))))
    probe.listen({ host: ServerConfig.listenHost(settings.host), port: settings.port, exclusive: true }, () =>
      probe.close(() => resume(Effect.void)))
    return Effect.sync(() => void probe.close())
  })

/**
 * Runs `self` (the server's launch: every request's fiber and the run driver's are forked beneath it and inherit this)
 * with the tracer enabled as the settings say (`tracing`, default off). Off, no span is opened: `sql.execute` spans
 * become no-ops, the platform's `http.server` middleware steps aside, and the orchestrator's `Effect.fn` service methods skip theirs entirely (its
 * `internal/Span.fn`), about a tenth of a turn's CPU (bench/README.md, "Tracing off"). Logged failures then carry no
 * span frames (their messages and stacks stay). The gateway's requests run without spans either way.
 */
export const withTracing = (settings: Pick<ServerConfig.ServerSettings, "tracing">) =>
<A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  settings.tracing === true
    ? Effect.withTracerEnabled(self, true)
    // The platform's `http.server` middleware asks only its own predicate: without it each request still parsed its
    // URL and trace headers, copied its headers and provided a no-op span.
    : Effect.withTracerEnabled(HttpMiddleware.withTracerDisabledWhenEffect(self, Function.constTrue), false)

/**
 * Serves until interrupted, then shuts down in order (see the module's docblock). Fails with `ListenError` when the
 * listener cannot start (before, "ServeError: An error has occurred" without its cause), and with the storage's error
 * when the database cannot be opened.
 */
export const run = (settings: ServerConfig.ServerSettings) =>
  Effect.zipRight(
    describeSettings(settings),
    Layer.launch(layer(settings)).pipe(
      withTracing(settings),
      Effect.catchTag("ServeError", (e) => Effect.fail(listenError(settings, e.cause)))
    )
  )
