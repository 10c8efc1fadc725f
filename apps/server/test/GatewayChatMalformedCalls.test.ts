/**
 * A Chat Completions history whose assistant message has `tool_calls` entries that are not objects (`null`, a number):
 * such an entry names no call. Before, reading the history's tool names failed on it (`toolNamesOf`): the request's
 * record failed on the same-protocol path (forwarded, nothing recorded), and a switched request was answered 500.
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, client, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

const body = {
  model: "m-1",
  messages: [
    { role: "user", content: "list" },
    { role: "assistant", content: null, tool_calls: [null, 3, { id: "call_1", type: "function", function: { name: "bash", arguments: "{}" } }] },
    { role: "tool", tool_call_id: "call_1", content: "a b" },
    { role: "user", content: "go on" }
  ]
}

describe("Gateway /v1/chat/completions, tool_calls entries that are not objects", () => {
  for (const to of ["anthropic-messages", "openai-chat"] as const) {
    it.live(`${to === "openai-chat" ? "same protocol" : `switched to ${to}`}: answered and recorded`, () =>
      Effect.scoped(Effect.gen(function*() {
        const upstream = yield* ModelApi.start
        const settings = yield* settingsFor([instance("up", to, upstream, { contextWindow: 200_000 })], { TEST_MODEL_KEY: marker }, undefined, {
          gateway: { routes: [{ model: "m-*", provider: "up" }] }
        })
        yield* Effect.gen(function*() {
          upstream.enqueue(ModelApi.answer(to, "ok", { input: 10, cacheWrite: 0, cacheRead: 0, output: 2 }))
          const answer = yield* raw(HttpClientRequest.post("/v1/chat/completions").pipe(
            HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}` }),
            HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
          ))
          // Before the fix: 500 (switched), and on the same protocol no thread at all.
          expect(answer.status).toBe(200)
          const api = yield* client()
          const threads = (yield* api.threads.list({ urlParams: {} })).threads
          expect(threads).toHaveLength(1)
          const runs = (yield* api.runs.list({ path: { threadId: threads[0]!.id }, urlParams: {} })).runs
          expect(runs.map((r) => r.status)).toEqual(["completed"])
        }).pipe(Effect.provide(serveSettings(settings)))
      })), { timeout: 60_000 })
  }
})

describe("Gateway /v1/chat/completions (same protocol), a whole answer's thread_read call without an id", () => {
  it.live("is the gateway's: answered under an id of its own, never the agent's", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("up", "openai-chat", upstream, { contextWindow: 200_000 })], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "m-*", provider: "up" }] }
      })
      yield* Effect.gen(function*() {
        const whole = (message: Record<string, unknown>): ModelApi.Reply => ({
          status: 200,
          contentType: "application/json",
          body: JSON.stringify({ id: "chatcmpl-w", object: "chat.completion", choices: [{ index: 0, message, finish_reason: "stop" }], usage: { prompt_tokens: 100, completion_tokens: 20 } })
        })
        upstream.enqueue(
          whole({ role: "assistant", content: null, tool_calls: [{ type: "function", function: { name: "thread_read", arguments: "{\"refs\":\"#1\"}" } }] }),
          whole({ role: "assistant", content: "It said list." })
        )
        const answer = yield* raw(HttpClientRequest.post("/v1/chat/completions").pipe(
          HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}` }),
          HttpClientRequest.bodyText(JSON.stringify({
            model: "m-1",
            tools: [{ type: "function", function: { name: "bash", description: "Run", parameters: { type: "object", properties: {} } } }],
            messages: [{ role: "user", content: "what did I ask?" }]
          }), "application/json")
        ))
        expect(answer.status).toBe(200)
        // Before the fix: the agent got the thread_read call (a tool it never offered), and one upstream request.
        expect(answer.text).not.toContain("thread_read")
        expect(upstream.requests).toHaveLength(2)
        const messages = (JSON.parse(upstream.requests[1]!.body) as { messages: Array<Record<string, unknown>> }).messages
        const id = ((messages.at(-2)!.tool_calls as Array<Record<string, unknown>>)[0]!).id
        expect(typeof id === "string" && id !== "").toBe(true)
        expect(messages.at(-1)).toMatchObject({ role: "tool", tool_call_id: id })
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 60_000 })
})
