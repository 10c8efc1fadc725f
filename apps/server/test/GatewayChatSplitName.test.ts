/**
 * A Chat Completions upstream that streams a tool call's `function.name` over several deltas (the protocol allows it:
 * every field of a call's delta is a fragment, `name` included; OpenAI-compatible servers such as vLLM's and some
 * routers split it). A `thread_read` call named in pieces is Baton's own and stays hidden: on the pass-through path
 * (`/v1/chat/completions`) the agent received the chunk with the first piece (`"thread_"`) before the gateway
 * recognised the call, and on a switch (`/v1/messages`, `/v1/responses` to an `openai-chat` instance) only the first
 * piece was kept as the call's name, so the agent got a `tool_use` named `thread_` (or an own tool `Ba` for `Bash`).
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, parseSse, raw } from "./helpers.js"
import { withChatGateway } from "./support/ChatGateway.js"
import * as ModelApi from "./support/ModelApi.js"

type Json = Record<string, unknown>

/** A Chat Completions stream whose choice 0 carries `deltas` (each one chunk's `tool_calls`), then `tool_calls`. */
const split = (deltas: ReadonlyArray<ReadonlyArray<Json>>): ModelApi.Reply => {
  const chunk = (choice: Json, extra: Json = {}) =>
    `data: ${JSON.stringify({ id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, ...choice }], ...extra })}\n\n`
  return {
    status: 200,
    contentType: "text/event-stream",
    body: [
      ...deltas.map((calls, i) => chunk({ delta: { ...(i === 0 ? { role: "assistant", content: null } : {}), tool_calls: calls }, finish_reason: null })),
      chunk({ delta: {}, finish_reason: "tool_calls" }),
      chunk({ delta: {}, finish_reason: null }, { choices: [], usage: { prompt_tokens: 100, completion_tokens: 20 } }),
      "data: [DONE]\n\n"
    ].join("")
  }
}

/** A call of `name` at `index` whose name comes in the pieces of `pieces`, then `args`. */
const pieces = (index: number, id: string, parts: ReadonlyArray<string>, args: string): ReadonlyArray<ReadonlyArray<Json>> => [
  [{ index, id, type: "function", function: { name: parts[0], arguments: "" } }],
  ...parts.slice(1).map((p) => [{ index, function: { name: p } }]),
  [{ index, function: { arguments: args } }]
]

const send = (path: string, headers: Record<string, string>, body: Json) =>
  raw(HttpClientRequest.post(path).pipe(HttpClientRequest.setHeaders(headers), HttpClientRequest.bodyText(JSON.stringify(body), "application/json")))

const final = () => ModelApi.answer("openai-chat", "It says hi.", { input: 10, cacheWrite: 0, cacheRead: 0, output: 2 })

describe("Gateway, a streamed tool call's name in several deltas", () => {
  it.live("pass-through: a thread_read named in pieces is hidden and answered", () =>
    withChatGateway("m-*", (chat) =>
      Effect.gen(function*() {
        chat.enqueue(split(pieces(0, "call_r", ["thread_", "read"], "{\"refs\":\"#1\"}")), final())
        const answer = yield* send("/v1/chat/completions", { authorization: `Bearer ${adminToken}`, "x-session-id": "p" }, {
          model: "m-1",
          stream: true,
          tools: [{ type: "function", function: { name: "bash", description: "Run", parameters: { type: "object", properties: {} } } }],
          messages: [{ role: "user", content: "hi" }]
        })
        expect(answer.status).toBe(200)
        // Before the fix: the chunk naming "thread_" reached the agent.
        expect(answer.text).not.toContain("thread_")
        expect(answer.text).not.toContain("tool_calls\":[")
        expect(chat.requests).toHaveLength(2)
        const chunks = parseSse(answer.text).filter((e) => e.data !== "[DONE]").map((e) => JSON.parse(e.data) as Json)
        const content = chunks.map((c) => ((c.choices as Array<Json>)[0]?.delta as Json | undefined)?.content ?? "").join("")
        expect(content).toBe("It says hi.")
      })), { timeout: 60_000 })

  it.live("pass-through: an agent's tool whose name starts like thread_read passes on whole", () =>
    withChatGateway("m-*", (chat) =>
      Effect.gen(function*() {
        const reply = split(pieces(0, "call_t", ["thread", "_list"], "{}"))
        chat.enqueue(reply)
        const answer = yield* send("/v1/chat/completions", { authorization: `Bearer ${adminToken}`, "x-session-id": "q" }, {
          model: "m-1",
          stream: true,
          tools: [{ type: "function", function: { name: "thread_list", description: "List", parameters: { type: "object", properties: {} } } }],
          messages: [{ role: "user", content: "list" }]
        })
        expect(answer.status).toBe(200)
        expect(answer.text).toBe(reply.body)
        expect(chat.requests).toHaveLength(1)
      })), { timeout: 60_000 })

  it.live("switched to an Anthropic agent: the calls' names are whole, thread_read hidden and answered", () =>
    withChatGateway("m-*", (chat) =>
      Effect.gen(function*() {
        chat.enqueue(
          split(pieces(0, "call_r", ["thread", "_re", "ad"], "{\"refs\":\"#1\"}")),
          split(pieces(0, "call_b", ["Ba", "sh"], "{\"command\":\"ls\"}"))
        )
        const answer = yield* send("/v1/messages", { "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "s" }, {
          model: "m-1",
          max_tokens: 500,
          stream: true,
          tools: [{ name: "Bash", description: "Run", input_schema: { type: "object", properties: {} } }],
          messages: [{ role: "user", content: "hi" }]
        })
        expect(answer.status).toBe(200)
        expect(chat.requests).toHaveLength(2)
        const events = parseSse(answer.text).map((e) => JSON.parse(e.data) as Json)
        const blocks = events.filter((e) => e.type === "content_block_start").map((e) => e.content_block as Json)
        // Before the fix: a tool_use named "thread" reached the agent and the continuation's call was named "Ba".
        expect(blocks.map((b) => [b.type, b.name])).toEqual([["tool_use", "Bash"]])
        expect((events.find((e) => e.type === "message_delta")!.delta as Json).stop_reason).toBe("tool_use")
      })), { timeout: 60_000 })
})
