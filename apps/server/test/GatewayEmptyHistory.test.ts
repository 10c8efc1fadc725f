/**
 * A model request with an empty history (`messages: []`): Anthropic Messages and Chat Completions both require at
 * least one message (Anthropic: "messages: at least one message is required"; OpenAI: "[] is too short -
 * 'messages'"), so the gateway refuses it, 400 in the agent's protocol, before anything is recorded or sent, on a
 * provider switch as on the same protocol.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, client } from "./helpers.js"
import { post, withAnthropicAndChat } from "./support/GatewayRounds.js"

const anthropicHeaders = { "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "empty" }
const chatHeaders = { authorization: `Bearer ${adminToken}`, "x-session-id": "empty" }

const threadCount = Effect.gen(function*() {
  const api = yield* client()
  return (yield* api.threads.list({ urlParams: {} })).threads.length
})

describe("Gateway requests with an empty history", () => {
  it.live("are refused 400 in the agent's protocol, recorded nowhere and sent nowhere", () =>
    withAnthropicAndChat((anthropic, chat) =>
      Effect.gen(function*() {
        // Before the fix: each went upstream (the upstream's refusal the agent's answer) and left a thread behind.
        for (const model of ["claude-x", "gpt-x"]) {
          const answer = yield* post("/v1/messages", anthropicHeaders, { model, max_tokens: 10, messages: [] })
          expect(answer.status, model).toBe(400)
          expect(answer.body).toEqual({ type: "error", error: { type: "invalid_request_error", message: "messages: at least one message is required" } })
          const chatAnswer = yield* post("/v1/chat/completions", chatHeaders, { model, messages: [] })
          expect(chatAnswer.status, model).toBe(400)
          expect(chatAnswer.body).toMatchObject({ error: { type: "invalid_request_error", message: "messages: expected at least one message" } })
        }
        // System messages alone: a Chat Completions request OpenAI answers, but nothing is left to send Anthropic.
        const system = yield* post("/v1/chat/completions", chatHeaders, { model: "claude-x", messages: [{ role: "system", content: "You are terse." }] })
        expect(system.status).toBe(400)
        expect(system.body).toMatchObject({
          error: {
            type: "invalid_request_error",
            message: "messages: expected at least one message beside the system prompt (model claude-x routes to provider instance \"a\", an anthropic-messages upstream, which needs one)"
          }
        })
        // A Responses request with instructions and no input, switched to Chat Completions.
        const responses = yield* post("/v1/responses", { authorization: `Bearer ${adminToken}`, "session-id": "empty" }, { model: "gpt-x", instructions: "Be terse.", input: [] })
        expect(responses.status).toBe(400)
        expect(responses.body).toMatchObject({ error: { type: "invalid_request_error", message: expect.stringContaining("input: expected at least one message beside the system prompt") } })
        expect(anthropic.requests).toHaveLength(0)
        expect(chat.requests).toHaveLength(0)
        expect(yield* threadCount).toBe(0)
      })), { timeout: 60_000 })
})
