/**
 * Whole (non-streamed) answers after hidden `thread_read` rounds, and whole Chat Completions answers whose calls share
 * an id, as the agent receives them (branch b47gw): what a stream shows the agent, a whole answer gives it too.
 *
 * - Same protocol (Anthropic Messages, OpenAI Responses, Chat Completions), offload on: a round that carries text
 *   before its hidden `thread_read` call. A stream passes that text on as it comes; the whole answer returned only
 *   the last round's content, so the text was lost to the agent (and to the thread).
 * - Switched (an Anthropic agent on a Chat Completions upstream): the same, the earlier rounds' text lost.
 * - Same-protocol Chat Completions: a whole answer whose parallel calls share one id (proxies in front of Gemini)
 *   reached the agent with duplicate ids (a stream's calls are told apart, `distinctIds`).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken } from "./helpers.js"
import { anthropicUsage, assistantTexts, post, withGateway } from "./support/GatewayRounds.js"
import { withChatGateway } from "./support/ChatGateway.js"
import type * as ModelApi from "./support/ModelApi.js"

type Json = Record<string, unknown>

const json = (body: Json): ModelApi.Reply => ({ status: 200, contentType: "application/json", body: JSON.stringify(body) })

const anthropicTools = [{ name: "Bash", description: "Runs a command.", input_schema: { type: "object", properties: { command: { type: "string" } } } }]
/** A whole Anthropic Messages answer of `content`, stopped for `stop`. */
const message = (id: string, content: ReadonlyArray<Json>, stop: string) =>
  json({ id, type: "message", role: "assistant", model: "m", content, stop_reason: stop, stop_sequence: null, usage: anthropicUsage })
const anthropicHeaders = { "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "whole-rounds" }

describe("Gateway whole answers after hidden thread_read rounds", () => {
  it.live("Anthropic Messages: the text of a round with a hidden thread_read call reaches the agent before the last round's", () =>
    withGateway("anthropic-messages", "claude-*", (upstream) =>
      Effect.gen(function*() {
        upstream.enqueue(
          message("msg_1", [{ type: "text", text: "Let me look." }, { type: "tool_use", id: "toolu_read", name: "thread_read", input: { refs: "#1" } }], "tool_use"),
          message("msg_2", [{ type: "text", text: "It printed hello." }], "end_turn")
        )
        const answer = yield* post("/v1/messages", anthropicHeaders, {
          model: "claude-x",
          max_tokens: 100,
          tools: anthropicTools,
          messages: [{ role: "user", content: "what did it print?" }]
        })
        expect(answer.status).toBe(200)
        expect(upstream.requests).toHaveLength(2)
        expect(answer.body).toMatchObject({ content: [{ type: "text", text: "Let me look." }, { type: "text", text: "It printed hello." }], stop_reason: "end_turn" })
        expect(answer.text).not.toContain("thread_read")
        expect(yield* assistantTexts).toEqual(["Let me look.", "It printed hello."])
      })), { timeout: 60_000 })

  it.live("OpenAI Responses: the items of a round with a hidden thread_read call reach the agent before the last round's", () =>
    withGateway("openai-responses", "gpt-*", (upstream) =>
      Effect.gen(function*() {
        const said = (id: string, text: string) => ({ type: "message", id, role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] })
        const read = { type: "function_call", id: "fc_read", call_id: "call_read", name: "thread_read", arguments: JSON.stringify({ refs: "#1" }), status: "completed" }
        const usage = { input_tokens: 10, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5, total_tokens: 15 }
        upstream.enqueue(
          json({ id: "resp_1", object: "response", status: "completed", output: [said("msg_1", "Let me look."), read], usage }),
          json({ id: "resp_2", object: "response", status: "completed", output: [said("msg_2", "It printed hello.")], usage })
        )
        const answer = yield* post("/v1/responses", { authorization: `Bearer ${adminToken}`, "session-id": "whole-rounds" }, {
          model: "gpt-x",
          stream: false,
          tools: [{ type: "function", name: "exec_command", description: "Runs a command.", strict: false, parameters: { type: "object", properties: {} } }],
          input: [{ type: "message", role: "user", content: [{ type: "input_text", text: "what did it print?" }] }]
        })
        expect(answer.status).toBe(200)
        expect(upstream.requests).toHaveLength(2)
        expect((answer.body as { output: Array<Json> }).output).toEqual([said("msg_1", "Let me look."), said("msg_2", "It printed hello.")])
        expect(yield* assistantTexts).toEqual(["Let me look.", "It printed hello."])
      })), { timeout: 60_000 })

  it.live("Chat Completions: the text of a round with a hidden thread_read call reaches the agent before the last round's", () =>
    withChatGateway("gemini-*", (chat) =>
      Effect.gen(function*() {
        const completion = (message: Json, finish: string) =>
          json({ id: "chatcmpl-1", object: "chat.completion", choices: [{ index: 0, message, finish_reason: finish }], usage: { prompt_tokens: 10, completion_tokens: 5 } })
        chat.enqueue(
          completion({ role: "assistant", content: "Let me look. ", tool_calls: [{ id: "call_read", type: "function", function: { name: "thread_read", arguments: "{\"refs\":\"#1\"}" } }] }, "tool_calls"),
          completion({ role: "assistant", content: "It printed hello." }, "stop")
        )
        const answer = yield* post("/v1/chat/completions", { authorization: `Bearer ${adminToken}`, "x-session-id": "whole-rounds" }, {
          model: "gemini-3",
          tools: [{ type: "function", function: { name: "Bash", description: "Bash", parameters: { type: "object", properties: {} } } }],
          messages: [{ role: "user", content: "what did it print?" }]
        })
        expect(answer.status).toBe(200)
        expect(chat.requests).toHaveLength(2)
        expect(answer.body).toMatchObject({ choices: [{ message: { role: "assistant", content: "Let me look. It printed hello." }, finish_reason: "stop" }] })
        expect(answer.text).not.toContain("thread_read")
      })), { timeout: 60_000 })

  it.live("switched (Anthropic agent, Chat Completions upstream): every round's text reaches the agent, not the last round's alone", () =>
    withChatGateway("gpt-*", (chat) =>
      Effect.gen(function*() {
        const completion = (message: Json, finish: string) =>
          json({ id: "chatcmpl-1", object: "chat.completion", choices: [{ index: 0, message, finish_reason: finish }], usage: { prompt_tokens: 10, completion_tokens: 5 } })
        const read = (id: string) => ({ id, type: "function", function: { name: "thread_read", arguments: "{\"refs\":\"#1\"}" } })
        chat.enqueue(
          completion({ role: "assistant", content: "Let me look.", tool_calls: [read("call_r1")] }, "tool_calls"),
          completion({ role: "assistant", content: "Once more.", tool_calls: [read("call_r2")] }, "tool_calls"),
          completion({ role: "assistant", content: "It printed hello." }, "stop")
        )
        const answer = yield* post("/v1/messages", anthropicHeaders, {
          model: "gpt-5",
          max_tokens: 100,
          tools: anthropicTools,
          messages: [{ role: "user", content: "what did it print?" }]
        })
        expect(answer.status).toBe(200)
        expect(chat.requests).toHaveLength(3)
        expect(answer.body).toMatchObject({
          content: [{ type: "text", text: "Let me look." }, { type: "text", text: "Once more." }, { type: "text", text: "It printed hello." }],
          stop_reason: "end_turn"
        })
        expect(answer.text).not.toContain("thread_read")
        expect(yield* assistantTexts).toEqual(["Let me look.", "Once more.", "It printed hello."])
      })), { timeout: 60_000 })

  it.live("switched (Responses agent, Anthropic upstream): the hidden round's text reaches the agent as an output message before the last answer's", () =>
    withGateway("anthropic-messages", "claude-*", (upstream) =>
      Effect.gen(function*() {
        upstream.enqueue(
          message("msg_1", [{ type: "text", text: "Let me look." }, { type: "tool_use", id: "toolu_read", name: "thread_read", input: { refs: "#1" } }], "tool_use"),
          message("msg_2", [{ type: "text", text: "It printed hello." }], "end_turn")
        )
        const answer = yield* post("/v1/responses", { authorization: `Bearer ${adminToken}`, "session-id": "whole-rounds-switched" }, {
          model: "claude-x",
          stream: false,
          tools: [{ type: "function", name: "exec_command", description: "Runs a command.", strict: false, parameters: { type: "object", properties: {} } }],
          input: [{ type: "message", role: "user", content: [{ type: "input_text", text: "what did it print?" }] }]
        })
        expect(answer.status).toBe(200)
        expect(upstream.requests).toHaveLength(2)
        const output = (answer.body as { output: Array<{ type: string; content?: Array<{ text: string }> }> }).output
        expect(output.map((i) => [i.type, i.content?.map((c) => c.text).join("")])).toEqual([["message", "Let me look."], ["message", "It printed hello."]])
        expect(answer.text).not.toContain("thread_read")
      })), { timeout: 60_000 })
})

describe("Gateway whole Chat Completions answers (same protocol)", () => {
  it.live("parallel calls sharing one id reach the agent with distinct ids, as a stream's do", () =>
    withChatGateway("gemini-*", (chat) =>
      Effect.gen(function*() {
        const call = (name: string, args: string) => ({ id: "call_s", type: "function", function: { name, arguments: args } })
        chat.enqueue(json({
          id: "chatcmpl-1",
          object: "chat.completion",
          choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls: [call("Read", "{\"file_path\":\"/a.txt\"}"), call("Bash", "{\"command\":\"ls\"}")] }, finish_reason: "tool_calls" }],
          usage: { prompt_tokens: 10, completion_tokens: 5 }
        }))
        const answer = yield* post("/v1/chat/completions", { authorization: `Bearer ${adminToken}`, "x-session-id": "whole-shared" }, {
          model: "gemini-3",
          tools: ["Read", "Bash"].map((name) => ({ type: "function", function: { name, description: name, parameters: { type: "object", properties: {} } } })),
          messages: [{ role: "user", content: "read a.txt and list" }]
        })
        expect(answer.status).toBe(200)
        const calls = (answer.body as { choices: Array<{ message: { tool_calls: Array<Json> } }> }).choices[0]!.message.tool_calls
        expect(calls.map((c) => [c.id, (c.function as Json).name])).toEqual([["call_s", "Read"], ["call_s_2", "Bash"]])
      })), { timeout: 60_000 })
})
