/**
 * Same-protocol `count_tokens` (`/v1/messages/count_tokens`) with tool-result offload on: it counts what Baton would
 * send for the conversation (the hidden `thread_read` rounds in place of the message the agent received, the stubs,
 * `thread_read` offered), the history the next `/v1/messages` request sends, not the agent's body. Before branch b48gw
 * the agent's body went to the count as it came, so the count was of a history the upstream no longer gets.
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, client, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

type Json = Record<string, unknown>

const headers = { "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "count-planned" }
const post = (path: string, body: unknown) =>
  raw(HttpClientRequest.post(path).pipe(HttpClientRequest.setHeaders(headers), HttpClientRequest.bodyText(JSON.stringify(body), "application/json")))

const usage = { input_tokens: 10, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 5 }
const message = (id: string, content: ReadonlyArray<Json>, stop: string): ModelApi.Reply => ({
  status: 200,
  contentType: "application/json",
  body: JSON.stringify({ id, type: "message", role: "assistant", model: "m", content, stop_reason: stop, stop_sequence: null, usage })
})
const tools = [{ name: "Bash", description: "Runs a command.", input_schema: { type: "object", properties: {} } }]

describe("Gateway count_tokens with offload on", () => {
  it.live("counts the history the next request sends (hidden rounds, thread_read offered), not the agent's body", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("up", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-*", provider: "up" }] }
      })
      yield* Effect.gen(function*() {
        upstream.enqueue(
          message("msg_1", [{ type: "tool_use", id: "toolu_read", name: "thread_read", input: { refs: "#1" } }], "tool_use"),
          message("msg_2", [{ type: "text", text: "It printed hello." }], "end_turn"),
          message("msg_3", [{ type: "text", text: "You're welcome." }], "end_turn")
        )
        const first = [{ role: "user", content: "what did it print?" }]
        expect((yield* post("/v1/messages", { model: "claude-x", max_tokens: 100, tools, messages: first })).status).toBe(200)
        const next = [...first, { role: "assistant", content: [{ type: "text", text: "It printed hello." }] }, { role: "user", content: "thanks" }]
        const counted = yield* post("/v1/messages/count_tokens", { model: "claude-x", tools, messages: next })
        expect(counted.status).toBe(200)
        expect((yield* post("/v1/messages", { model: "claude-x", max_tokens: 100, tools, messages: next })).status).toBe(200)
        expect(upstream.requests).toHaveLength(3)
        expect(upstream.counts).toHaveLength(1)
        const count = JSON.parse(upstream.counts[0]!.body) as Json
        const sent = JSON.parse(upstream.requests[2]!.body) as Json
        // Before the fix: the agent's three messages and its one tool.
        expect(count.messages).toEqual(sent.messages)
        expect(count.tools).toEqual(sent.tools)
        expect(JSON.stringify(count.messages)).toContain("toolu_read")
        expect(counted.body).toEqual({ input_tokens: Math.ceil(upstream.counts[0]!.body.length / 4) })
        // Counting records nothing: the conversation has its two requests' runs.
        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        expect((yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs).toHaveLength(2)
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 60_000 })
})
