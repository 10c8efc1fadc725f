/**
 * Same-protocol Chat Completions, offload on, a whole (non-streamed) answer after a hidden `thread_read` round: the
 * round's `reasoning_content` (DeepSeek, vLLM and llama.cpp servers; `reasoning` on OpenRouter) reaches the agent in
 * front of the last round's, as its text does and as a stream passes both on as they come. Before branch b48gw the
 * whole answer carried the hidden round's text and lost its reasoning.
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, raw } from "./helpers.js"
import { withChatGateway } from "./support/ChatGateway.js"
import type * as ModelApi from "./support/ModelApi.js"

type Json = Record<string, unknown>

const completion = (message: Json, finish: string): ModelApi.Reply => ({
  status: 200,
  contentType: "application/json",
  body: JSON.stringify({ id: "chatcmpl-1", object: "chat.completion", choices: [{ index: 0, message, finish_reason: finish }], usage: { prompt_tokens: 10, completion_tokens: 5 } })
})
const read = { id: "call_read", type: "function", function: { name: "thread_read", arguments: "{\"refs\":\"#1\"}" } }

const ask = (session: string) =>
  raw(HttpClientRequest.post("/v1/chat/completions").pipe(
    HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "x-session-id": session }),
    HttpClientRequest.bodyText(JSON.stringify({
      model: "deepseek-r",
      tools: [{ type: "function", function: { name: "Bash", description: "Bash", parameters: { type: "object", properties: {} } } }],
      messages: [{ role: "user", content: "what did it print?" }]
    }), "application/json")
  ))

describe("Gateway whole Chat Completions answers after a hidden thread_read round", () => {
  it.live("carry the hidden round's reasoning_content before the last round's", () =>
    withChatGateway("deepseek-*", (chat) =>
      Effect.gen(function*() {
        chat.enqueue(
          completion({ role: "assistant", content: "Let me look. ", reasoning_content: "The output is in #1. ", tool_calls: [read] }, "tool_calls"),
          completion({ role: "assistant", content: "It printed hello.", reasoning_content: "It says hello." }, "stop")
        )
        const answer = yield* ask("rounds-reasoning-1")
        expect(answer.status).toBe(200)
        expect(chat.requests).toHaveLength(2)
        expect(answer.text).not.toContain("thread_read")
        // Before the fix: reasoning_content "It says hello." (the hidden round's lost).
        expect(answer.body).toMatchObject({
          choices: [{ message: { role: "assistant", content: "Let me look. It printed hello.", reasoning_content: "The output is in #1. It says hello." }, finish_reason: "stop" }]
        })
      })), { timeout: 60_000 })

  it.live("carry it when only the hidden round reasoned (OpenRouter's `reasoning`)", () =>
    withChatGateway("deepseek-*", (chat) =>
      Effect.gen(function*() {
        chat.enqueue(
          completion({ role: "assistant", content: null, reasoning: "Need #1.", tool_calls: [read] }, "tool_calls"),
          completion({ role: "assistant", content: "It printed hello." }, "stop")
        )
        const answer = yield* ask("rounds-reasoning-2")
        expect(answer.status).toBe(200)
        expect(answer.body).toMatchObject({ choices: [{ message: { content: "It printed hello.", reasoning: "Need #1." }, finish_reason: "stop" }] })
      })), { timeout: 60_000 })
})
