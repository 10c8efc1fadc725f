/**
 * An Anthropic upstream that compacted the conversation server-side (`context_management`'s compaction: a
 * `compaction` block, and `usage.iterations` with the compaction's iteration beside the message's), replayed from the
 * recorded traffic (`anthropic-compaction.1`). The request's recorded usage and cost are every iteration's (the
 * top-level figures are the message iteration's alone), and what the request carried (`carriedTokens`) is the
 * top-level input: on the same-protocol path (`/v1/messages`) and on a switch (`/v1/chat/completions`,
 * `/v1/responses` to an `anthropic-messages` instance), streamed and whole. Before, the compaction's 60,385 input
 * tokens were in no recorded usage nor cost.
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { recordedJson, recordedStream } from "./support/AnthropicFixtures.js"
import { adminToken, client, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"

type Usage = { inputTokens: number; cacheWriteTokens: number; cacheReadTokens: number; outputTokens: number; carriedTokens?: number }

const cases = [
  {
    path: "/v1/messages",
    headers: { "x-api-key": adminToken, "anthropic-version": "2023-06-01", "anthropic-beta": "compact-2026-01-12" },
    body: { model: "m-1", max_tokens: 4_000, messages: [{ role: "user", content: "and the final question?" }], context_management: { edits: [{ type: "compact_20260112" }] } }
  },
  {
    path: "/v1/chat/completions",
    headers: { authorization: `Bearer ${adminToken}` },
    body: { model: "m-1", messages: [{ role: "user", content: "and the final question?" }] }
  },
  {
    path: "/v1/responses",
    headers: { authorization: `Bearer ${adminToken}` },
    body: { model: "m-1", input: [{ type: "message", role: "user", content: [{ type: "input_text", text: "and the final question?" }] }] }
  }
]

describe("Gateway, an Anthropic upstream's compaction iterations", () => {
  for (const c of cases) {
    for (const streamed of [true, false]) {
      it.live(`${c.path} (${streamed ? "streamed" : "whole"}): the recorded usage is every iteration's, the carried input the message's`, () =>
        Effect.scoped(Effect.gen(function*() {
          const upstream = yield* ModelApi.start
          const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream, { contextWindow: 200_000 })], { TEST_MODEL_KEY: marker }, undefined, {
            gateway: { routes: [{ model: "m-*", provider: "anthropic" }] }
          })
          yield* Effect.gen(function*() {
            upstream.enqueue(
              streamed
                ? { status: 200, contentType: "text/event-stream", body: recordedStream("anthropic-compaction.1.chunks.txt") }
                : { status: 200, contentType: "application/json", body: JSON.stringify(recordedJson("anthropic-compaction.1.json")) }
            )
            const answer = yield* raw(HttpClientRequest.post(c.path).pipe(
              HttpClientRequest.setHeaders(c.headers),
              HttpClientRequest.bodyText(JSON.stringify({ ...c.body, stream: streamed }), "application/json")
            ))
            expect(answer.status).toBe(200)
            const api = yield* client()
            const threads = (yield* api.threads.list({ urlParams: {} })).threads
            expect(threads).toHaveLength(1)
            const events = threadEvents((yield* raw(HttpClientRequest.get(`/threads/${threads[0]!.id}/events?follow=false`).pipe(HttpClientRequest.bearerToken(adminToken)))).text)
            const usage = events.filter((e) => e.type === "gateway.usage").map((e) => e.payload as Usage)
            expect(usage).toHaveLength(1)
            // The recorded stream: iterations 60,385 + 612 input, 522 + 2,819 output; the whole answer: 60,385 + 682
            // input, 592 + 1,320 output. Before the fix: 612 and 2,819 (682 and 1,320), no carriedTokens.
            const [input, output, carried] = streamed ? [60_385 + 612, 522 + 2_819, 612] : [60_385 + 682, 592 + 1_320, 682]
            expect([usage[0]!.inputTokens, usage[0]!.cacheWriteTokens, usage[0]!.cacheReadTokens, usage[0]!.outputTokens, usage[0]!.carriedTokens]).toEqual([input, 0, 0, output, carried])
          }).pipe(Effect.provide(serveSettings(settings)))
        })), { timeout: 60_000 })
    }
  }
})
