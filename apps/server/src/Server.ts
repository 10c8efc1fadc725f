/**
 * Server: the Baton HTTP server's Layer graph and its lifecycle.
 *
 * - `httpLayer` is the API over an orchestrator the caller provides: `BatonApi` with its handlers and bearer-token
 *   auth, `/openapi.json`, the offline API reference at `/docs` (Scalar, its script inlined from
 *   `@effect/platform`: no CDN), all behind `HttpGuard`. Tests serve it on `NodeHttpServer.layerTest`.
 * - `orchestratorLayer` is the embedded default: the database of the settings (SQLite file or Postgres), scripted
 *   provider instances, random ids, and the `RunDriver` (which reconciles runs left by a dead process when built).
 * - `run` serves both on `host:port` until interrupted (SIGINT/SIGTERM under the CLI's runtime), then shuts down in
 *   order: the listener stops accepting and open requests get `shutdownTimeoutMs` to finish before their
 *   connections are closed; then the run driver interrupts the turns in flight (each bounded by
 *   `interruptTimeoutMs`) so each ends with a recorded outcome (`process_stopped`).
 */
import { Api } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { IdGenerator, OrchestratorConfig, OrchestratorLayer, RunDriver } from "@baton/orchestration"
import { Database } from "@baton/persistence"
import { type ProviderAdapter, ProviderRegistry, ProviderSpec, ScriptedProvider, ScriptedSummariser } from "@baton/providers"
import { HttpApiBuilder, HttpApiScalar, HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Console, Effect, Layer } from "effect"
import * as Http from "node:http"
import * as Auth from "./Auth.js"
import * as Handlers from "./Handlers.js"
import * as HttpGuard from "./HttpGuard.js"
import * as ServerConfig from "./ServerConfig.js"

/** What `httpLayer` needs to know: the tokens it accepts and the request body limit in bytes. */
export interface HttpOptions {
  readonly tokens: Auth.Tokens
  readonly maxBodyBytes: number
}

/**
 * The API, `/openapi.json` and `/docs`, behind the guard, served on whatever `HttpServer` the caller provides.
 * Requires the orchestration services (`OrchestratorLayer.layer`), `RunDriver` and `IdGenerator`.
 */
export const httpLayer = (options: HttpOptions) =>
  HttpApiBuilder.serve(HttpGuard.middleware({ maxBodyBytes: options.maxBodyBytes })).pipe(
    Layer.provide(HttpApiScalar.layer({ path: "/docs", scalar: { withDefaultFonts: false } })),
    Layer.provide(HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" })),
    Layer.provide(HttpApiBuilder.api(Api.BatonApi).pipe(
      Layer.provide(Handlers.layer),
      Layer.provide(Auth.layer(options.tokens))
    ))
  )

/** The database Layer of the settings. */
export const databaseLayer = (database: ServerConfig.DatabaseSetting) =>
  database._tag === "postgres" ? Database.layerPg({ url: database.url }) : Database.layerSqlite(database.path)

/**
 * The embedded orchestrator of the settings: database, one scripted instance per provider spec, the `/offload`
 * summariser, the tokenizer, random ids, the driver's timeouts, and the `RunDriver`. `wrapAdapter` (default: none)
 * decorates each provider adapter (the load benchmark times the provider call with it).
 */
export const orchestratorLayer = (
  settings: ServerConfig.ServerSettings,
  wrapAdapter: (adapter: ProviderAdapter.ProviderAdapterShape) => ProviderAdapter.ProviderAdapterShape = (adapter) => adapter
) => {
  const counter = TokenCounter.make()
  const adapters = ProviderSpec.scripted(settings.providers, ScriptedProvider.makeScript(), counter).map(wrapAdapter)
  return RunDriver.RunDriver.Default.pipe(
    Layer.provideMerge(OrchestratorLayer.layer),
    Layer.provideMerge(databaseLayer(settings.database)),
    Layer.provideMerge(ProviderRegistry.layer(adapters)),
    Layer.provide(ScriptedSummariser.layer(ScriptedSummariser.make(counter))),
    Layer.provide(Layer.succeed(TokenCounter.TokenCounter, counter)),
    Layer.provideMerge(IdGenerator.layerRandom),
    Layer.provide(OrchestratorConfig.layer({
      interruptTimeoutMillis: settings.limits.interruptTimeoutMs,
      turnTimeoutMillis: settings.limits.turnTimeoutMs,
      toolResultTimeoutMillis: settings.limits.toolResultTimeoutMs
    }))
  )
}

/**
 * A Node HTTP server on `host:port` whose open connections are closed `shutdownTimeoutMs` after shutdown begins
 * (the listener stops accepting at once; requests still open by the deadline are cut).
 */
const listener = (settings: ServerConfig.ServerSettings) =>
  Layer.unwrapEffect(Effect.sync(() => {
    const server = Http.createServer()
    // Built after the server, so its finalizer runs before the server's close (which waits for open connections).
    const deadline = Layer.scopedDiscard(Effect.flatMap(HttpServer.HttpServer, () =>
      Effect.addFinalizer(() =>
        Effect.sync(() => {
          server.closeIdleConnections()
          setTimeout(() => server.closeAllConnections(), settings.limits.shutdownTimeoutMs).unref()
        })
      )))
    return Layer.provideMerge(deadline, NodeHttpServer.layer(() => server, { host: settings.host, port: settings.port }))
  }))

/** The startup lines (stderr): database, providers, where the admin token is, and a warning beyond loopback. */
const describe = (settings: ServerConfig.ServerSettings) =>
  Effect.gen(function*() {
    const db = settings.database._tag === "sqlite"
      ? `SQLite ${settings.database.path}`
      : `Postgres ${settings.database.url.replace(/\/\/([^:@/]*):[^@/]*@/, "//$1:***@")}`
    yield* Effect.logInfo(`database: ${db}`)
    yield* Effect.logInfo(`providers: ${settings.providers.map((p) => `${p.name} (window ${p.window}${p.inject ? ", injects" : ""})`).join(", ")}`)
    const source = settings.auth.source
    yield* Effect.logInfo(
      source._tag === "file"
        ? `admin token: ${source.created ? "created in" : "read from"} ${source.path} (send it as "Authorization: Bearer <token>")`
        : `admin token: from ${source._tag === "env" ? "BATON_TOKEN" : "the config file"}`
    )
    if (settings.auth.readToken !== null) yield* Effect.logInfo("read-only token: configured")
    if (!ServerConfig.isLoopback(settings.host)) {
      yield* Effect.logWarning(`listening on ${settings.host}, beyond loopback: anyone who can reach it and holds a token can use it; serve it behind TLS`)
    }
  })

/**
 * The whole server of the settings: orchestrator, API and listener; prints `listening on http://HOST:PORT` on
 * stdout once it accepts connections.
 */
export const layer = (settings: ServerConfig.ServerSettings) =>
  Layer.effectDiscard(Effect.flatMap(HttpServer.HttpServer, (server) =>
    Console.log(`listening on ${HttpServer.formatAddress(server.address)}`)
  )).pipe(
    Layer.provideMerge(httpLayer({
      tokens: { admin: settings.auth.adminToken, read: settings.auth.readToken },
      maxBodyBytes: settings.limits.maxBodyBytes
    })),
    // Built in this order, released in the reverse: the orchestrator (recovery at start), then the listener, then
    // the API on it. At shutdown the listener closes (open requests get the deadline) before the run driver stops.
    Layer.provide(listener(settings)),
    Layer.provide(orchestratorLayer(settings))
  )

/** Serves until interrupted, then shuts down in order (see the module's docblock). */
export const run = (settings: ServerConfig.ServerSettings) =>
  Effect.zipRight(describe(settings), Layer.launch(layer(settings)))
