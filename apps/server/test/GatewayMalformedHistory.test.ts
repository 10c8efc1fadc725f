/**
 * A request whose history is not one of its protocol's (a content block that is not an object with a type, a Chat
 * message without a known role, a content part that is not an object) is refused 400 in the agent's protocol before
 * anything is recorded or sent, on the same-protocol and the switched paths alike (branch b47gw). Before, it was
 * recorded as the conversation's messages (a thread, a run) and forwarded, or, switched, converted and sent to the
 * other upstream, whose answer came back as a 200.
 */
import { describe, expect, it } from "@effect/vitest"
import { HttpClientRequest } from "@effect/platform"
import { Effect } from "effect"
import { adminToken, client, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

const anthropic = { "x-api-key": adminToken, "anthropic-version": "2023-06-01" }
const openAi = { authorization: `Bearer ${adminToken}` }

/** Endpoint, headers, the body (its `model` filled in per route), and the error's place in the protocol's shape. */
const cases: ReadonlyArray<readonly [string, string, Record<string, string>, Record<string, unknown>]> = [
  ["a null content block", "/v1/messages", anthropic, { max_tokens: 10, messages: [{ role: "user", content: [null] }] }],
  ["a content block without a type", "/v1/messages", anthropic, { max_tokens: 10, messages: [{ role: "user", content: [{ text: "x" }] }] }],
  ["a content block that is not an object (count_tokens)", "/v1/messages/count_tokens", anthropic, { messages: [{ role: "user", content: [5] }] }],
  ["a message without a role", "/v1/chat/completions", openAi, { messages: [{ content: "x" }] }],
  ["a null content part", "/v1/chat/completions", openAi, { messages: [{ role: "user", content: [null] }] }],
  ["a message item whose content is a number", "/v1/responses", openAi, { input: [{ type: "message", role: "user", content: 5 }] }]
]

describe("Gateway: a history that is not the protocol's", () => {
  for (const [label, path, headers, body] of cases) {
    it.live(`${path}, ${label}: 400 in the agent's protocol, nothing recorded or sent, same protocol or switched`, () =>
      Effect.scoped(Effect.gen(function*() {
        const upstreams = { anthropic: yield* ModelApi.start, chat: yield* ModelApi.start, responses: yield* ModelApi.start }
        const settings = yield* settingsFor(
          [
            instance("anthropic", "anthropic-messages", upstreams.anthropic),
            instance("chat", "openai-chat", upstreams.chat, { contextWindow: 32_000, autoCompactThreshold: null }),
            instance("responses", "openai-responses", upstreams.responses)
          ],
          { TEST_MODEL_KEY: marker },
          undefined,
          { gateway: { routes: [{ model: "claude-*", provider: "anthropic" }, { model: "chat-*", provider: "chat" }, { model: "resp-*", provider: "responses" }] } }
        )
        yield* Effect.gen(function*() {
          for (const model of ["claude-x", "chat-x", "resp-x"]) {
            const answer = yield* raw(HttpClientRequest.post(path).pipe(
              HttpClientRequest.setHeaders({ ...headers, "x-claude-code-session-id": label, "x-session-id": label, "session-id": label }),
              HttpClientRequest.bodyText(JSON.stringify({ model, ...body }), "application/json")
            ))
            expect([model, answer.status]).toEqual([model, 400])
            expect(answer.body).toMatchObject(path.startsWith("/v1/messages")
              ? { type: "error", error: { type: "invalid_request_error" } }
              : { error: { type: "invalid_request_error" } })
          }
          expect([upstreams.anthropic, upstreams.chat, upstreams.responses].map((u) => u.requests.length)).toEqual([0, 0, 0])
          const api = yield* client()
          expect((yield* api.threads.list({ urlParams: {} })).threads).toEqual([])
        }).pipe(Effect.provide(serveSettings(settings)))
      })), 60_000)
  }
})
