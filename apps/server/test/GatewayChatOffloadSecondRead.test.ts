/**
 * `/v1/chat/completions` with `thread_read` spliced in: a streamed reply whose calls are a read, the agent's own call,
 * and a second read, each call's deltas in chunks of their own (as OpenAI streams parallel calls). The gateway answers
 * both reads; the agent gets its own call alone (`index` 0) and never the second read. Before, only the calls begun
 * before the first read was seen were named, so the second read reached the agent as its call at `index` 1, a tool it
 * does not have.
 */
import type { Item } from "@baton/contracts"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, client, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

type Json = Record<string, unknown>

const chunk = (body: Json) => `data: ${JSON.stringify({ id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "m", ...body })}\n\n`
/** One call's deltas as OpenAI streams them: its id and name first, then its arguments. */
const call = (index: number, id: string, name: string, args: string) => [
  chunk({ choices: [{ index: 0, delta: { tool_calls: [{ index, id, type: "function", function: { name, arguments: "" } }] }, finish_reason: null }] }),
  chunk({ choices: [{ index: 0, delta: { tool_calls: [{ index, function: { arguments: args } }] }, finish_reason: null }] })
]

describe("Gateway /v1/chat/completions, a second thread_read after the agent's own call", () => {
  it.live("both reads are answered by the gateway; the agent gets its call alone", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("up", "openai-chat", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "m-*", provider: "up" }] }
      })
      yield* Effect.gen(function*() {
        upstream.enqueue({
          status: 200,
          contentType: "text/event-stream",
          body: [
            chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] }),
            ...call(0, "call_r1", "thread_read", "{\"refs\":\"tool:call_a\"}"),
            ...call(1, "call_b", "bash", "{\"command\":\"ls\"}"),
            ...call(2, "call_r2", "thread_read", "{\"refs\":\"tool:call_a\",\"offset\":5}"),
            chunk({ choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] }),
            chunk({ choices: [], usage: { prompt_tokens: 900, completion_tokens: 30 } }),
            "data: [DONE]\n\n"
          ].join("")
        })
        const answer = yield* raw(HttpClientRequest.post("/v1/chat/completions").pipe(
          HttpClientRequest.bearerToken(adminToken),
          HttpClientRequest.bodyText(
            JSON.stringify({
              model: "m-1",
              stream: true,
              tools: [{ type: "function", function: { name: "bash", description: "Run", parameters: { type: "object", properties: {} } } }],
              messages: [
                { role: "user", content: "run it" },
                { role: "assistant", content: null, tool_calls: [{ id: "call_a", type: "function", function: { name: "bash", arguments: "{}" } }] },
                { role: "tool", tool_call_id: "call_a", content: "hello ".repeat(100) }
              ]
            }),
            "application/json"
          )
        ))
        expect(answer.status).toBe(200)
        // Before the fix: the second read's deltas reached the agent as call index 1.
        expect(answer.text).not.toContain("thread_read")
        expect(answer.text).not.toContain("call_r2")
        const deltas = answer.text.split("\n\n").filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6)) as { choices: Array<{ delta?: { tool_calls?: Array<Json> } }> })
        const calls = deltas.flatMap((d) => d.choices.flatMap((c) => c.delta?.tool_calls ?? []))
        expect(calls.map((c) => [c.index, c.id ?? null])).toEqual([[0, "call_b"], [0, null]])
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId: threads[0]!.id }, urlParams: {} })).items
        expect(items.filter((i) => i.kind === "tool_call").map((i) => i.text)).toEqual(["{}", "{\"command\":\"ls\"}"])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 60_000 })
})
