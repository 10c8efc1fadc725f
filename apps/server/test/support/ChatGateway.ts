/**
 * Test set-ups shared by the gateway's Chat Completions stream suites: a server whose gateway routes `models` to one
 * `openai-chat` instance (32,000-token window) over a loopback upstream, and Gemini's indexless tool-call streams.
 */
import { Effect } from "effect"
import * as ModelApi from "./ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./ModelServer.js"

type Json = Record<string, unknown>

/**
 * Runs `test` against `baton serve`'s gateway (the test layer of `serveSettings`) whose route `model` (a glob such as
 * `gemini-*`) goes to the `openai-chat` instance `chat`, served by a fresh loopback upstream `ModelApi`.
 */
export const withChatGateway = <A, E, R>(model: string, test: (chat: ModelApi.ModelApi) => Effect.Effect<A, E, R>) =>
  Effect.scoped(Effect.gen(function*() {
    const chat = yield* ModelApi.start
    const settings = yield* settingsFor(
      [instance("chat", "openai-chat", chat, { contextWindow: 32_000, autoCompactThreshold: null })],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: [{ model, provider: "chat" }] } }
    )
    return yield* test(chat).pipe(Effect.provide(serveSettings(settings)))
  }))

/**
 * A Chat Completions stream of `deltas` (each the `tool_calls` of one chunk, as given: without `index` for Gemini's
 * OpenAI-compatible endpoint), finished `"stop"` as Gemini does, with usage 100 in / 20 out.
 */
export const indexlessStream = (deltas: ReadonlyArray<ReadonlyArray<Json>>): ModelApi.Reply => {
  const chunk = (choice: Json, extra: Json = {}) => `data: ${JSON.stringify({ id: "gem-1", object: "chat.completion.chunk", model: "gemini", choices: [{ index: 0, ...choice }], ...extra })}\n\n`
  return {
    status: 200,
    contentType: "text/event-stream",
    body: [
      ...deltas.map((calls, i) => chunk({ delta: { ...(i === 0 ? { role: "assistant" } : {}), tool_calls: calls }, finish_reason: null })),
      chunk({ delta: {}, finish_reason: "stop" }, { usage: { prompt_tokens: 100, completion_tokens: 20 } }),
      "data: [DONE]\n\n"
    ].join("")
  }
}
