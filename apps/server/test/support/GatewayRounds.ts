/**
 * What the tests of the gateway's hidden `thread_read` rounds share (GatewayWholeRounds, GatewayHeldAfterRead): a
 * gateway routed to one loopback model API, a JSON POST through it, and the assistant texts its thread recorded.
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
