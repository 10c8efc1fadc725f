/**
 * A Chat Completions upstream whose streamed `tool_calls` deltas carry no `index` (Google's OpenAI-compatible
 * endpoint: each parallel call a delta of its own with its `id`; a call's arguments possibly over several deltas, the
 * later ones without an `id`; `finish_reason: "stop"`). On a switch from `/v1/messages` the agent gets each call as
 * a `tool_use` block of its own with its whole input (before: a missing `index` was 0, so the parallel calls became
 * one call named after the first, its arguments the glued `{…}{…}`, parsed to `{}`, and the second call was lost); on
 * the pass-through path the thread records the calls as made (before: each indexless delta was a call of its own, so
 * a call's later argument pieces were recorded as calls without a name). And a hidden `thread_read` round's
 * continuation sends the call back with the `extra_content` (Gemini 3's `thought_signature`) its deltas carried,
 * which Gemini expects on the assistant's call (before, the assembled call dropped it).
 */
import type { Item } from "@baton/contracts"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, client, parseSse, raw } from "./helpers.js"
import { indexlessStream, withChatGateway } from "./support/ChatGateway.js"
import * as ModelApi from "./support/ModelApi.js"

type Json = Record<string, unknown>

const call = (id: string | null, name: string | null, args: string): Json => ({
  ...(id === null ? {} : { id, type: "function" }),
  function: { ...(name === null ? {} : { name }), arguments: args }
})

const onlyItems = Effect.gen(function*() {
  const api = yield* client()
  const threads = (yield* api.threads.list({ urlParams: {} })).threads
  expect(threads).toHaveLength(1)
  const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId: threads[0]!.id }, urlParams: {} })).items
  return items.map((i) => [i.kind, i.text])
})

// Two parallel calls, each a delta of its own; the second's arguments in two pieces (the later without an id).
const deltas = [
  [call("call_1", "Read", "{\"file_path\":\"/a.txt\"}")],
  [call("call_2", "Bash", "{\"command\":")],
  [call(null, null, "\"ls\"}")]
]

describe("Gateway, streamed tool calls without an index", () => {
  it.live("switched to an Anthropic agent: each call a tool_use block with its whole input", () =>
    withChatGateway("gemini-*", (chat) =>
      Effect.gen(function*() {
        chat.enqueue(indexlessStream(deltas))
        const tools = ["Read", "Bash"].map((name) => ({ name, description: name, input_schema: { type: "object", properties: {} } }))
        const answer = yield* raw(HttpClientRequest.post("/v1/messages?beta=true").pipe(
          HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01" }),
          HttpClientRequest.bodyText(JSON.stringify({ model: "gemini-3", max_tokens: 500, stream: true, tools, messages: [{ role: "user", content: "read a.txt and list" }] }), "application/json")
        ))
        expect(answer.status).toBe(200)
        const events = parseSse(answer.text).map((e) => JSON.parse(e.data) as Json)
        const blocks = new Map<number, { name: unknown; id: unknown; json: string }>()
        for (const e of events) {
          if (e.type === "content_block_start") {
            const b = e.content_block as Json
            blocks.set(e.index as number, { name: b.name, id: b.id, json: "" })
          }
          if (e.type === "content_block_delta") blocks.get(e.index as number)!.json += String((e.delta as Json).partial_json ?? "")
        }
        // Before the fix: one block, Read, whose input was `{"file_path":"/a.txt"}{"command":"ls"}` (not JSON).
        expect([...blocks.values()].map((b) => [b.id, b.name, JSON.parse(b.json)])).toEqual([
          ["call_1", "Read", { file_path: "/a.txt" }],
          ["call_2", "Bash", { command: "ls" }]
        ])
        expect((events.find((e) => e.type === "message_delta")!.delta as Json).stop_reason).toBe("tool_use")
        expect((yield* onlyItems).filter(([kind]) => kind === "tool_call")).toEqual([
          ["tool_call", "{\"file_path\":\"/a.txt\"}"],
          ["tool_call", "{\"command\":\"ls\"}"]
        ])
      })), { timeout: 60_000 })

  it.live("on /v1/chat/completions (pass-through): the agent gets the bytes as they came, the thread records the two calls", () =>
    withChatGateway("gemini-*", (chat) =>
      Effect.gen(function*() {
        const reply = indexlessStream(deltas)
        chat.enqueue(reply)
        const answer = yield* raw(HttpClientRequest.post("/v1/chat/completions").pipe(
          HttpClientRequest.bearerToken(adminToken),
          HttpClientRequest.bodyText(JSON.stringify({ model: "gemini-3", stream: true, messages: [{ role: "user", content: "read a.txt and list" }] }), "application/json")
        ))
        expect(answer.status).toBe(200)
        expect(answer.text).toBe(reply.body)
        // Before the fix: three calls, the third without a name holding `"ls"}`, the second `{"command":`.
        expect(yield* onlyItems).toEqual([
          ["user_message", "read a.txt and list"],
          ["tool_call", "{\"file_path\":\"/a.txt\"}"],
          ["tool_call", "{\"command\":\"ls\"}"]
        ])
      })), { timeout: 60_000 })

  it.live("a hidden thread_read round's continuation carries the call's thought signature (pass-through and switched)", () =>
    withChatGateway("gemini-*", (chat) =>
      Effect.gen(function*() {
        const signature = { google: { thought_signature: "c2lnbmF0dXJl" } }
        // The call (no index), then its signature in a metadata-only delta, as Gemini streams them.
        const reads = [[call("call_r", "thread_read", "{\"refs\":\"#1\"}")], [{ id: "call_r", extra_content: signature }]]
        const send = (path: string, headers: Record<string, string>, body: Json) =>
          raw(HttpClientRequest.post(path).pipe(HttpClientRequest.setHeaders(headers), HttpClientRequest.bodyText(JSON.stringify(body), "application/json")))
        // Pass-through (/v1/chat/completions), then switched (/v1/messages).
        chat.enqueue(indexlessStream(reads), ModelApi.answer("openai-chat", "It says hi.", { input: 10, cacheWrite: 0, cacheRead: 0, output: 2 }))
        const passed = yield* send("/v1/chat/completions", { authorization: `Bearer ${adminToken}`, "x-session-id": "p" }, {
          model: "gemini-3",
          stream: true,
          tools: [{ type: "function", function: { name: "bash", description: "Run", parameters: { type: "object", properties: {} } } }],
          messages: [{ role: "user", content: "hi" }]
        })
        expect(passed.status).toBe(200)
        expect(passed.text).not.toContain("thread_read")
        chat.enqueue(indexlessStream(reads), ModelApi.answer("openai-chat", "It says hi.", { input: 10, cacheWrite: 0, cacheRead: 0, output: 2 }))
        const switched = yield* send("/v1/messages", { "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "s" }, {
          model: "gemini-3",
          max_tokens: 500,
          stream: true,
          tools: [{ name: "Bash", description: "Run", input_schema: { type: "object", properties: {} } }],
          messages: [{ role: "user", content: "hi" }]
        })
        expect(switched.status).toBe(200)
        expect(switched.text).not.toContain("thread_read")
        expect(chat.requests).toHaveLength(4)
        for (const continued of [chat.requests[1]!, chat.requests[3]!]) {
          const messages = (JSON.parse(continued.body) as { messages: Array<Json> }).messages
          const assistant = messages.find((m) => m.role === "assistant")!
          // Before the fix: the call without its extra_content.
          expect((assistant.tool_calls as Array<Json>).map((c) => c.extra_content)).toEqual([signature])
        }
      })), { timeout: 60_000 })
})
