/**
 * What gateway tests share (GatewayWholeRounds, GatewayHeldAfterRead, GatewayEmptyHistory,
 * GatewaySwitchSharedIdHistory): a gateway routed to loopback model APIs, a JSON POST through it, and the assistant
 * texts its thread recorded.
 */
import { HttpClientRequest } from "@effect/platform"
import { Effect } from "effect"
import { client, raw } from "../helpers.js"
import * as ModelApi from "./ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./ModelServer.js"

/** A gateway routing `model` to one loopback instance of `kind` (offload on, the default). */
export const withGateway = <A, E, R>(
  kind: "anthropic-messages" | "openai-responses",
  model: string,
  test: (upstream: ModelApi.ModelApi) => Effect.Effect<A, E, R>
) =>
  Effect.scoped(Effect.gen(function*() {
    const upstream = yield* ModelApi.start
    const settings = yield* settingsFor([instance("up", kind, upstream)], { TEST_MODEL_KEY: marker }, undefined, {
      gateway: { routes: [{ model, provider: "up" }] }
    })
    return yield* test(upstream).pipe(Effect.provide(serveSettings(settings)))
  }))

/** A gateway routing `claude-*` to an Anthropic instance and `gpt-*` to a Chat Completions one. */
export const withAnthropicAndChat = <A, E, R>(test: (anthropic: ModelApi.ModelApi, chat: ModelApi.ModelApi) => Effect.Effect<A, E, R>) =>
  Effect.scoped(Effect.gen(function*() {
    const anthropic = yield* ModelApi.start
    const chat = yield* ModelApi.start
    const settings = yield* settingsFor([instance("a", "anthropic-messages", anthropic), instance("c", "openai-chat", chat)], { TEST_MODEL_KEY: marker }, undefined, {
      gateway: { routes: [{ model: "claude-*", provider: "a" }, { model: "gpt-*", provider: "c" }] }
    })
    return yield* test(anthropic, chat).pipe(Effect.provide(serveSettings(settings)))
  }))

/** `body` POSTed as JSON to the gateway's `path` with `headers` (the raw response). */
export const post = (path: string, headers: Record<string, string>, body: unknown) =>
  raw(HttpClientRequest.post(path).pipe(HttpClientRequest.setHeaders(headers), HttpClientRequest.bodyText(JSON.stringify(body), "application/json")))

/** The assistant texts the conversation's thread holds (the server's first thread). */
export const assistantTexts = Effect.gen(function*() {
  const api = yield* client()
  const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
  const items = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
  return items.filter((i) => i.kind === "assistant_message").map((i) => i.text)
})

/** The usage of a short Anthropic answer. */
export const anthropicUsage = { input_tokens: 10, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 5 }
