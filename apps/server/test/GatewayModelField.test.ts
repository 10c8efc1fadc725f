/**
 * The gateway's refusal of a request whose `model` is not a model id, over HTTP on all three endpoints (Anthropic
 * Messages, OpenAI Responses, Chat Completions), each in its protocol's error shape, nothing sent upstream: a `model`
 * of another type says it has the wrong type (`{"model": 5}` was answered "model: Field required", a field that was
 * there), a missing one says it is required.
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

/** A request to `path` with `body` as JSON and the Baton token as the endpoint's agent sends it. */
const request = (path: string, body: unknown) =>
  HttpClientRequest.post(path).pipe(
    HttpClientRequest.setHeaders(path === "/v1/messages"
      ? { "anthropic-version": "2023-06-01", "x-api-key": adminToken }
      : { authorization: `Bearer ${adminToken}` }),
    HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
  )

/** Each endpoint, a valid history for it, and its protocol's 400 body for `message`. */
const endpoints = [
  {
    path: "/v1/messages",
    body: { max_tokens: 10, messages: [{ role: "user", content: "hi" }] },
    refusal: (message: string) => ({ type: "error", error: { type: "invalid_request_error", message } })
  },
  {
    path: "/v1/responses",
    body: { input: "hi" },
    refusal: (message: string) => ({ error: { message, type: "invalid_request_error", param: null, code: null } })
  },
  {
    path: "/v1/chat/completions",
    body: { messages: [{ role: "user", content: "hi" }] },
    refusal: (message: string) => ({ error: { message, type: "invalid_request_error", param: null, code: null } })
  }
] as const

describe("Gateway, the model field", () => {
  it.live("a model that is not a string is 400 saying it has the wrong type, a missing one that it is required, on every endpoint", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor(
        [instance("anthropic", "anthropic-messages", upstream)],
        { TEST_MODEL_KEY: marker },
        undefined,
        { gateway: { routes: [{ model: "*", provider: "anthropic" }] } }
      )
      yield* Effect.gen(function*() {
        for (const { body, path, refusal } of endpoints) {
          for (
            const [model, message] of [
              [5, "model: expected a string (a model id), got a number"],
              [null, "model: expected a string (a model id), got null"],
              [["claude-x"], "model: expected a string (a model id), got an array"],
              [undefined, "model: Field required (a model id)"],
              ["", "model: expected a model id, got an empty string"]
            ] as const
          ) {
            const refused = yield* raw(request(path, { ...body, model }))
            expect([path, model, refused.status, refused.body]).toEqual([path, model, 400, refusal(message)])
          }
        }
      }).pipe(Effect.provide(serveSettings(settings)))
      expect(upstream.requests).toEqual([])
    })))
})
