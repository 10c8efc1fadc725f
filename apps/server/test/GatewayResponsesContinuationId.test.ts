/**
 * A streamed `/v1/responses` answer after a hidden `thread_read` round (the first hop calls only `thread_read`, the
 * gateway answers it and continues upstream): the agent receives one response, so every `response` object it gets
 * carries the `id` and `created_at` of the `response.created` it got. Before, the continuation's `response.completed`
 * carried the continuation's own response id (OpenAI gives each request its own), so the agent's one response began
 * as `resp_1` and completed as `resp_2`.
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, parseSse, raw } from "./helpers.js"
import type * as ModelApi from "./support/ModelApi.js"
import { withResponsesGateway } from "./support/ModelServer.js"

type Json = Record<string, unknown>

/** A Responses stream as OpenAI sends it: `response.created`, the items' events, `response.completed`. */
const stream = (id: string, createdAt: number, items: ReadonlyArray<Json>): ModelApi.Reply => {
  let sequence = 0
  const events: Array<Json> = [
    { type: "response.created", response: { id, object: "response", created_at: createdAt, status: "in_progress", output: [] } },
    { type: "response.in_progress", response: { id, object: "response", created_at: createdAt, status: "in_progress", output: [] } },
    ...items.flatMap((item, i) => [
      { type: "response.output_item.added", output_index: i, item: { ...item, status: "in_progress" } },
      { type: "response.output_item.done", output_index: i, item }
    ]),
    {
      type: "response.completed",
      response: { id, object: "response", created_at: createdAt, status: "completed", output: items, usage: { input_tokens: 900, input_tokens_details: { cached_tokens: 0 }, output_tokens: 20, total_tokens: 920 } }
    }
  ]
  return {
    status: 200,
    contentType: "text/event-stream",
    body: events.map((e) => `event: ${String(e.type)}\ndata: ${JSON.stringify({ ...e, sequence_number: sequence++ })}\n\n`).join("")
  }
}

describe("Gateway /v1/responses, a streamed answer after a hidden thread_read round", () => {
  it.live("every response object the agent gets carries the first response.created's id and created_at", () =>
    withResponsesGateway((upstream) =>
      Effect.gen(function*() {
        upstream.enqueue(
          stream("resp_first", 1_700_000_000, [{ type: "function_call", id: "fc_r", call_id: "call_r", name: "thread_read", arguments: "{\"refs\":\"tool:call_a\"}", status: "completed" }]),
          stream("resp_second", 1_700_000_005, [{ type: "message", id: "msg_2", role: "assistant", status: "completed", content: [{ type: "output_text", text: "It printed hello.", annotations: [] }] }])
        )
        const tools = [{ type: "function", name: "shell", description: "Run", parameters: { type: "object", properties: { command: { type: "string" } } } }]
        const input = [
          { type: "message", role: "user", content: [{ type: "input_text", text: "run it" }] },
          { type: "function_call", call_id: "call_a", name: "shell", arguments: "{\"command\":\"echo hello\"}" },
          { type: "function_call_output", call_id: "call_a", output: "hello ".repeat(100) }
        ]
        const answer = yield* raw(HttpClientRequest.post("/v1/responses").pipe(
          HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "thread-id": "t-1", "session-id": "t-1" }),
          HttpClientRequest.bodyText(JSON.stringify({ model: "gpt-5", stream: true, tools, input }), "application/json")
        ))
        expect(answer.status).toBe(200)
        expect(upstream.requests).toHaveLength(2)
        const events = parseSse(answer.text).map((e) => JSON.parse(e.data) as Json)
        expect(answer.text).not.toContain("thread_read")
        const responses = events.filter((e) => e.response !== undefined).map((e) => [e.type, (e.response as Json).id, (e.response as Json).created_at])
        // Before the fix: the last was ["response.completed", "resp_second", 1700000005].
        expect(responses).toEqual([
          ["response.created", "resp_first", 1_700_000_000],
          ["response.in_progress", "resp_first", 1_700_000_000],
          ["response.completed", "resp_first", 1_700_000_000]
        ])
        expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i))
      })), { timeout: 60_000 })
})
