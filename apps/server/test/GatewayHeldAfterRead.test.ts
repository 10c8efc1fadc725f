/**
 * Same-protocol streamed answers with offload on (Anthropic Messages, OpenAI Responses): the upstream's events are held
 * from its first `thread_read` call on. What the model streams after that call in the same round (a text block, an
 * output message) is the agent's: when the round's calls are all `thread_read` (answered here, continued), it goes on
 * before the continuation's, numbered on. Before branch b48gw it was dropped with the calls (the whole answer and
 * Chat Completions' stream kept it: `Offload.withContent`, `said`), so the agent and the thread lost the model's words.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as GatewayAnthropic from "../src/GatewayAnthropic.js"
import * as GatewayResponses from "../src/GatewayResponses.js"
import { adminToken } from "./helpers.js"
import { anthropicUsage, assistantTexts, post, withGateway } from "./support/GatewayRounds.js"
import type * as ModelApi from "./support/ModelApi.js"

type Json = Record<string, unknown>

const sse = (events: ReadonlyArray<Json>): ModelApi.Reply => ({
  status: 200,
  contentType: "text/event-stream",
  body: events.map((e) => `event: ${String(e.type)}\ndata: ${JSON.stringify(e)}\n\n`).join("")
})


/** An Anthropic text block's events at `index`. */
const textBlock = (index: number, text: string): Array<Json> => [
  { type: "content_block_start", index, content_block: { type: "text", text: "" } },
  { type: "content_block_delta", index, delta: { type: "text_delta", text } },
  { type: "content_block_stop", index }
]

/** An Anthropic stream of `blocks` (events), stopped for `stop`. */
const anthropicStream = (id: string, blocks: ReadonlyArray<Json>, stop: string) =>
  sse([
    { type: "message_start", message: { id, type: "message", role: "assistant", model: "m", content: [], stop_reason: null, usage: anthropicUsage } },
    ...blocks,
    { type: "message_delta", delta: { stop_reason: stop, stop_sequence: null }, usage: anthropicUsage },
    { type: "message_stop" }
  ])

describe("Gateway streamed answers: what the model says after a hidden thread_read call in the same round", () => {
  it.live("Anthropic Messages: a text block after the call reaches the agent, numbered on, before the continuation's", () =>
    withGateway("anthropic-messages", "claude-*", (upstream) =>
      Effect.gen(function*() {
        upstream.enqueue(
          anthropicStream("msg_1", [
            ...textBlock(0, "Let me look."),
            { type: "content_block_start", index: 1, content_block: { type: "tool_use", id: "toolu_read", name: "thread_read", input: {} } },
            { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: "{\"refs\":\"#1\"}" } },
            { type: "content_block_stop", index: 1 },
            ...textBlock(2, "Reading the start.")
          ], "tool_use"),
          anthropicStream("msg_2", textBlock(0, "It printed hello."), "end_turn")
        )
        const answer = yield* post("/v1/messages", { "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "held-after" }, {
          model: "claude-x",
          max_tokens: 100,
          stream: true,
          tools: [{ name: "Bash", description: "Runs a command.", input_schema: { type: "object", properties: {} } }],
          messages: [{ role: "user", content: "what did it print?" }]
        })
        expect(answer.status).toBe(200)
        expect(upstream.requests).toHaveLength(2)
        expect(answer.text).not.toContain("thread_read")
        const assembler = GatewayAnthropic.replyAssembler()
        assembler.push(new TextEncoder().encode(answer.text))
        const outcome = assembler.outcome()
        if (outcome._tag !== "completed") throw new Error(`the agent's stream did not complete: ${JSON.stringify(outcome)}`)
        // Before the fix: "Let me look." and "It printed hello." (the text after the call dropped).
        expect(outcome.reply.messages[0]!.message).toMatchObject({
          content: [{ type: "text", text: "Let me look." }, { type: "text", text: "Reading the start." }, { type: "text", text: "It printed hello." }]
        })
        expect([...answer.text.matchAll(/"index":(\d+)/g)].map((m) => Number(m[1]))).toEqual([0, 0, 0, 1, 1, 1, 2, 2, 2])
        expect(yield* assistantTexts).toEqual(["Let me look.", "Reading the start.", "It printed hello."])
      })), { timeout: 60_000 })

  it.live("OpenAI Responses: an output message after the call reaches the agent, numbered on, before the continuation's", () =>
    withGateway("openai-responses", "gpt-*", (upstream) =>
      Effect.gen(function*() {
        const said = (id: string, text: string) => ({ type: "message", id, role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] })
        const read = { type: "function_call", id: "fc_read", call_id: "call_read", name: "thread_read", arguments: JSON.stringify({ refs: "#1" }), status: "completed" }
        const usage = { input_tokens: 10, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5, total_tokens: 15 }
        const response = (id: string, items: ReadonlyArray<Json>) => {
          let n = 0
          return sse([
            { type: "response.created", sequence_number: n++, response: { id, status: "in_progress", output: [] } },
            ...items.map((item, i) => ({ type: "response.output_item.done", sequence_number: n++, output_index: i, item })),
            { type: "response.completed", sequence_number: n++, response: { id, status: "completed", output: items, usage } }
          ])
        }
        upstream.enqueue(
          response("resp_1", [said("msg_1", "Let me look."), read, said("msg_2", "Reading the start.")]),
          response("resp_2", [said("msg_3", "It printed hello.")])
        )
        const answer = yield* post("/v1/responses", { authorization: `Bearer ${adminToken}`, "session-id": "held-after" }, {
          model: "gpt-x",
          stream: true,
          tools: [{ type: "function", name: "exec_command", description: "Runs a command.", strict: false, parameters: { type: "object", properties: {} } }],
          input: [{ type: "message", role: "user", content: [{ type: "input_text", text: "what did it print?" }] }]
        })
        expect(answer.status).toBe(200)
        expect(upstream.requests).toHaveLength(2)
        expect(answer.text).not.toContain("thread_read")
        const assembler = GatewayResponses.replyAssembler()
        assembler.push(new TextEncoder().encode(answer.text))
        const outcome = assembler.outcome()
        if (outcome._tag !== "completed") throw new Error(`the agent's stream did not complete: ${JSON.stringify(outcome)}`)
        // Before the fix: msg_1 and msg_3 (the message after the call dropped).
        expect(outcome.reply.messages.map((m) => m.message)).toEqual([said("msg_1", "Let me look."), said("msg_2", "Reading the start."), said("msg_3", "It printed hello.")])
        expect([...answer.text.matchAll(/"output_index":(\d+)/g)].map((m) => Number(m[1]))).toEqual([0, 1, 2])
        expect([...answer.text.matchAll(/"sequence_number":(\d+)/g)].map((m) => Number(m[1]))).toEqual([0, 1, 2, 3, 4])
        expect(yield* assistantTexts).toEqual(["Let me look.", "Reading the start.", "It printed hello."])
      })), { timeout: 60_000 })
})
