/**
 * An upstream stream that breaks off mid-answer on a pass-through path (no `thread_read` spliced in: a request without
 * tools, or the instance's offload off): the agent's connection breaks off too, as it would have without Baton, so
 * its HTTP client reports the cut (and its retry runs) instead of reading a clean end of a partial answer as whole
 * (the OpenAI SDK of pi and opencode ends such a stream without an error: "The comp" was the assistant's message).
 * The run fails `provider_unavailable`; the request's message is recorded, once.
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { adminToken, client } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

const usage = { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }

const cases = [
  {
    kind: "anthropic-messages" as const,
    path: "/v1/messages?beta=true",
    headers: { "x-api-key": adminToken, "anthropic-version": "2023-06-01" },
    body: { model: "m-x", max_tokens: 10, stream: true, messages: [{ role: "user", content: "first" }] }
  },
  {
    kind: "openai-responses" as const,
    path: "/v1/responses",
    headers: { authorization: `Bearer ${adminToken}` },
    body: { model: "m-x", stream: true, input: [{ type: "message", role: "user", content: [{ type: "input_text", text: "first" }] }] }
  },
  {
    kind: "openai-chat" as const,
    path: "/v1/chat/completions",
    headers: { authorization: `Bearer ${adminToken}` },
    body: { model: "m-x", stream: true, messages: [{ role: "user", content: "first" }] }
  }
]

describe("Gateway, an upstream stream that breaks off", () => {
  for (const c of cases) {
    it.live(`${c.kind}: the agent's answer breaks off as the upstream's did (not a clean end); the run fails provider_unavailable`, () =>
      Effect.scoped(Effect.gen(function*() {
        const upstream = yield* ModelApi.start
        const settings = yield* settingsFor([instance("up", c.kind, upstream)], { TEST_MODEL_KEY: marker }, undefined, {
          gateway: { routes: [{ model: "m-*", provider: "up" }] }
        })
        yield* Effect.gen(function*() {
          // The answer's first half (head and first events), then the upstream's connection is destroyed.
          const whole = ModelApi.answer(c.kind, "The complete answer is forty-two.", usage)
          const cut = whole.body.indexOf("forty-two")
          upstream.enqueue({ ...whole, cut })
          const response = yield* HttpClient.execute(
            HttpClientRequest.post(c.path).pipe(
              HttpClientRequest.setHeaders(c.headers),
              HttpClientRequest.bodyText(JSON.stringify(c.body), "application/json")
            )
          )
          expect(response.status).toBe(200)
          let got = ""
          const decoder = new TextDecoder()
          const end = yield* Effect.either(Stream.runForEach(response.stream, (chunk) => Effect.sync(() => void (got += decoder.decode(chunk, { stream: true })))))
          // Before the fix: Right, the body ended cleanly after "The complete answer is ".
          expect(end._tag).toBe("Left")
          if (end._tag === "Left") expect(end.left._tag).toBe("ResponseError")
          // Every byte that came before the cut reached the agent, as it came (the socket ends, flushed, then is
          // destroyed), and nothing more.
          expect(got).toBe(whole.body.slice(0, cut))

          const api = yield* client()
          const threads = (yield* api.threads.list({ urlParams: {} })).threads
          expect(threads.length).toBe(1)
          const threadId = threads[0]!.id
          const items = (yield* api.items.list({ path: { threadId }, urlParams: {} })).items
          expect(items.map((i) => [i.kind, i.text])).toEqual([["user_message", "first"]])
          const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
          expect(runs.map((r) => [r.status, r.failureCode])).toEqual([["failed", "provider_unavailable"]])
          expect(runs[0]!.failureReason).toMatch(/^the upstream's stream broke off: /)
        }).pipe(Effect.provide(serveSettings(settings)))
      })))
  }
})
