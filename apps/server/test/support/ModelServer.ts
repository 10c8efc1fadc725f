/**
 * The production server over model-API instances from a config file, for tests: config entries for loopback model
 * APIs (`instance`), settings resolved from a config file (`settingsFor`), the API on a loopback port
 * (`serveSettings`), sending a message and waiting for its run (`sendAndWait`), the events of a stream body.
 */
import type { ThreadId } from "@baton/contracts"
import { Server, ServerConfig } from "@baton/server"
import { NodeHttpServer } from "@effect/platform-node"
import { ConfigProvider, Effect, Layer } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { adminToken, client, parseSse } from "../helpers.js"
import * as ModelApi from "./ModelApi.js"

/** The thread events of a `follow=false` event stream body. */
export const threadEvents = (text: string) =>
  parseSse(text).filter((e) => e.event !== "heartbeat").map((e) => JSON.parse(e.data) as { readonly type: string; readonly payload: unknown })

/** A key value that must never leave the upstream request's auth header. */
export const marker = "sk-MARKER-7f3a9c21d5e84b06"

const prices = { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 }

/** A model instance entry of the config file. */
export const instance = (name: string, kind: ModelApi.Kind, api: ModelApi.ModelApi, extra: Record<string, unknown> = {}) => ({
  kind,
  name,
  baseUrl: ModelApi.baseUrl(kind, api),
  model: `${kind}-model`,
  apiKeyEnv: "TEST_MODEL_KEY",
  contextWindow: 200_000,
  autoCompactThreshold: 180_000,
  maxOutputTokens: 4_096,
  prices,
  maxRetries: 0,
  ...extra
})

/**
 * Settings resolved from a config file holding `providers` and the `extra` top-level fields (e.g. `gateway`; SQLite in
 * a fresh directory), the key in the environment.
 */
export const settingsFor = (
  providers: ReadonlyArray<unknown>,
  env: Record<string, string> = { TEST_MODEL_KEY: marker },
  dir?: string,
  extra: Record<string, unknown> = {}
) =>
  Effect.gen(function*() {
    const data = dir ?? Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-models-"))
    const config = Path.join(data, "baton.json")
    Fs.writeFileSync(config, JSON.stringify({ providers, auth: { token: adminToken }, ...extra }))
    return yield* ServerConfig.resolve({ config, dataDir: data }).pipe(
      Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))
    )
  })

/** The API over the production orchestrator of `settings`, on a loopback port. */
export const serveSettings = (settings: ServerConfig.ServerSettings) =>
  Server.httpLayer({
    tokens: { admin: settings.auth.adminToken, read: settings.auth.readToken },
    maxBodyBytes: settings.limits.maxBodyBytes,
    gateway: Server.gatewayOf(settings)
  }).pipe(
    Layer.provideMerge(NodeHttpServer.layerTest),
    Layer.provideMerge(Server.orchestratorLayer(settings))
  )

/**
 * Runs `test` against a gateway that routes `gpt-*` to an `openai-responses` instance named `openai` on a fresh
 * loopback upstream (given to `test`), the server's API and gateway on a loopback port (SQLite in a fresh directory).
 */
export const withResponsesGateway = <A, E, R>(test: (upstream: ModelApi.ModelApi) => Effect.Effect<A, E, R>) =>
  Effect.scoped(Effect.gen(function*() {
    const upstream = yield* ModelApi.start
    const settings = yield* settingsFor([instance("openai", "openai-responses", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
      gateway: { routes: [{ model: "gpt-*", provider: "openai" }] }
    })
    return yield* test(upstream).pipe(Effect.provide(serveSettings(settings)))
  }))

/** Sends `text` on `threadId` and waits for its run to end: the run view. */
export const sendAndWait = (threadId: ThreadId, text: string) =>
  Effect.gen(function*() {
    const api = yield* client()
    const accepted = yield* api.messages.send({ path: { threadId }, payload: { text }, headers: {} })
    return yield* api.runs.get({ path: { runId: accepted.runId }, urlParams: { waitMs: 30_000 } })
  })

