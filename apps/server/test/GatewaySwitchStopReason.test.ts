/**
 * A provider switch from `/v1/messages` to an `openai-chat` instance whose answer calls a tool with
 * `finish_reason: "stop"` (OpenAI's answer to a named `tool_choice`; vLLM's and older Ollama's to any call): the agent
 * gets `stop_reason: "tool_use"`, Anthropic's contract whenever the turn ends with a call the client must run. Before,
 * the stop reason was read from `finish_reason` alone, so the agent got a `tool_use` block with `end_turn`, and an
 * agent looping on `stop_reason === "tool_use"` ended its turn with the call unrun. A hop that calls only
 * `thread_read` with `"stop"` is still a hidden round (the gateway continues; the agent gets `end_turn`).
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, parseSse, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

type Json = Record<string, unknown>
const usage = { input: 900, cacheWrite: 0, cacheRead: 300, output: 40 }

/** `reply` with every `finish_reason: "tool_calls"` written `"stop"` (streamed and whole). */
const finishStop = (reply: ModelApi.Reply): ModelApi.Reply => ({ ...reply, body: reply.body.replaceAll("\"finish_reason\":\"tool_calls\"", "\"finish_reason\":\"stop\"") })

/** A whole Chat Completions answer with `calls`, `finish_reason: "stop"`. */
const wholeStop = (calls: ReadonlyArray<ModelApi.Call>): ModelApi.Reply => ({
  status: 200,
  contentType: "application/json",
  body: JSON.stringify({
    id: "chatcmpl-w",
    object: "chat.completion",
    choices: [{
      index: 0,
      message: { role: "assistant", content: null, tool_calls: calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })) },
      finish_reason: "stop"
    }],
    usage: { prompt_tokens: 1_200, completion_tokens: 40, prompt_tokens_details: { cached_tokens: 300 } }
  })
})

const wholeText = (text: string): ModelApi.Reply => ({
  status: 200,
  contentType: "application/json",
  body: JSON.stringify({
    id: "chatcmpl-t",
    object: "chat.completion",
    choices: [{ index: 0, message: { role: "assistant", content: text }, finish_reason: "stop" }],
    usage: { prompt_tokens: 1_200, completion_tokens: 40 }
  })
})

const tools = [{ name: "Bash", description: "Run a command", input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } }]
const history = [
  { role: "user", content: "run it" },
  { role: "assistant", content: [{ type: "tool_use", id: "toolu_a", name: "Bash", input: { command: "echo hello" } }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_a", content: "hello output ".repeat(40) }] }
]

/** The answer's stop reason and its `tool_use` blocks' names (a whole message, or the stream's events). */
const outcome = (answer: { readonly text: string; readonly body: Json | null }, streamed: boolean) => {
  if (!streamed) {
    const content = answer.body!.content as ReadonlyArray<Json>
    return { stop: answer.body!.stop_reason, calls: content.filter((b) => b.type === "tool_use").map((b) => b.name) }
  }
  const events = parseSse(answer.text).map((e) => JSON.parse(e.data) as Json)
  const delta = events.find((e) => e.type === "message_delta")!.delta as Json
  const calls = events.filter((e) => e.type === "content_block_start").map((e) => e.content_block as Json).filter((b) => b.type === "tool_use").map((b) => b.name)
  return { stop: delta.stop_reason, calls }
}

describe("GatewaySwitch: a call answered with finish_reason stop", () => {
  it.live("the Anthropic agent gets stop_reason tool_use with the call (streamed and whole); a hidden thread_read with stop still continues", () =>
    Effect.scoped(Effect.gen(function*() {
      const chat = yield* ModelApi.start
      const settings = yield* settingsFor(
        [instance("chat", "openai-chat", chat, { contextWindow: 32_000, autoCompactThreshold: null })],
        { TEST_MODEL_KEY: marker },
        undefined,
        { gateway: { routes: [{ model: "gpt-*", provider: "chat" }] } }
      )
      yield* Effect.gen(function*() {
        const send = (session: string, stream: boolean) =>
          raw(HttpClientRequest.post("/v1/messages?beta=true").pipe(
            HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": session }),
            HttpClientRequest.bodyText(
              JSON.stringify({ model: "gpt-5", max_tokens: 1_000, stream, tools, tool_choice: { type: "tool", name: "Bash" }, messages: history }),
              "application/json"
            )
          ))
        const bash = { id: "call_b", name: "Bash", arguments: JSON.stringify({ command: "ls" }) }
        const read = { id: "call_r", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_a" }) }
        for (const streamed of [true, false]) {
          chat.enqueue(streamed ? finishStop(ModelApi.answer("openai-chat", "", usage, [bash])) : wholeStop([bash]))
          const called = yield* send(`call-${streamed}`, streamed)
          expect(called.status).toBe(200)
          // Before the fix: { stop: "end_turn", calls: ["Bash"] }.
          expect(outcome(called, streamed)).toEqual({ stop: "tool_use", calls: ["Bash"] })

          chat.enqueue(streamed ? finishStop(ModelApi.answer("openai-chat", "", usage, [read])) : wholeStop([read]))
          chat.enqueue(streamed ? ModelApi.answer("openai-chat", "It printed hello.", usage) : wholeText("It printed hello."))
          const requests = chat.requests.length
          const read1 = yield* send(`read-${streamed}`, streamed)
          expect(read1.status).toBe(200)
          expect(read1.text).not.toContain("thread_read")
          expect(outcome(read1, streamed)).toEqual({ stop: "end_turn", calls: [] })
          expect(chat.requests.length).toBe(requests + 2)
        }
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 60_000 })
})
