/**
 * A provider switch whose upstream answers 429 (or 503) with its retry advice (`retry-after`, `retry-after-ms`): the
 * error comes back converted to the agent's protocol with that advice, as the same-protocol path passes the upstream's
 * headers back, so the agent's SDK waits as long as the provider asked instead of its own shorter backoff (the
 * converted error came back without the headers).
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

const advice = { "retry-after": "7", "retry-after-ms": "7000" }

const cases = [
  {
    from: "/v1/messages",
    to: "openai-chat" as const,
    headers: { "x-api-key": adminToken, "anthropic-version": "2023-06-01" },
    body: { model: "m-x", max_tokens: 10, stream: true, messages: [{ role: "user", content: "hi" }] },
    error: { type: "error", error: { type: "rate_limit_error", message: "Rate limit reached" } }
  },
  {
    from: "/v1/messages",
    to: "openai-responses" as const,
    headers: { "x-api-key": adminToken, "anthropic-version": "2023-06-01" },
    body: { model: "m-x", max_tokens: 10, stream: false, messages: [{ role: "user", content: "hi" }] },
    error: { type: "error", error: { type: "rate_limit_error", message: "Rate limit reached" } }
  },
  {
    from: "/v1/chat/completions",
    to: "anthropic-messages" as const,
    headers: { authorization: `Bearer ${adminToken}` },
    body: { model: "m-x", stream: true, messages: [{ role: "user", content: "hi" }] },
    error: { error: { message: "Rate limit reached" } }
  },
  {
    from: "/v1/responses",
    to: "anthropic-messages" as const,
    headers: { authorization: `Bearer ${adminToken}` },
    body: { model: "m-x", stream: true, input: "hi" },
    error: { error: { message: "Rate limit reached" } }
  }
]

describe("GatewaySwitch: the upstream's retry advice on an error", () => {
  for (const c of cases) {
    it.live(`${c.from} to ${c.to}: a 429's retry-after and retry-after-ms reach the agent with the converted error`, () =>
      Effect.scoped(Effect.gen(function*() {
        const upstream = yield* ModelApi.start
        const settings = yield* settingsFor([instance("up", c.to, upstream)], { TEST_MODEL_KEY: marker }, undefined, {
          gateway: { routes: [{ model: "m-*", provider: "up" }] }
        })
        yield* Effect.gen(function*() {
          upstream.enqueue({ status: 429, contentType: "text/plain", body: "Rate limit reached", headers: advice })
          const answer = yield* raw(HttpClientRequest.post(c.from).pipe(
            HttpClientRequest.setHeaders(c.headers),
            HttpClientRequest.bodyText(JSON.stringify(c.body), "application/json")
          ))
          expect(upstream.requests).toHaveLength(1)
          expect(answer.status).toBe(429)
          expect(answer.body).toMatchObject(c.error)
          expect([answer.headers["retry-after"], answer.headers["retry-after-ms"]]).toEqual(["7", "7000"])
        }).pipe(Effect.provide(serveSettings(settings)))
      })))
  }
})
