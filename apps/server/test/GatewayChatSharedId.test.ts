/**
 * A Chat Completions upstream whose streamed `tool_calls` deltas carry no `index` (Google's OpenAI-compatible
 * endpoint), where deltas are assigned to calls by their `id` (`OpenAiChat.callSlots`):
 *
 * - a call's later delta that is not adjacent to its first (Gemini's metadata-only delta with a call's
 *   `extra_content.google.thought_signature` after the next parallel call began) belongs to that call: before, an id
 *   other than the previous delta's started a new call, so the agent on a switch got a third `tool_use` without a name
 *   and the first call's signature was lost;
 * - two parallel calls that share one id (each delta naming its function, the first call's arguments whole before the
 *   second begins) are two calls: before, the second's delta went on with the first (name `ReadRead`, arguments
 *   `{…}{…}`, no JSON).
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, parseSse, raw } from "./helpers.js"
import { indexlessStream, withChatGateway } from "./support/ChatGateway.js"
import type * as ModelApi from "./support/ModelApi.js"

type Json = Record<string, unknown>

const call = (id: string, name: string, args: string): Json => ({ id, type: "function", function: { name, arguments: args } })

/** The `tool_use` blocks of an Anthropic SSE answer: id, name and input. */
const toolUses = (text: string) => {
  const events = parseSse(text).map((e) => JSON.parse(e.data) as Json)
  const blocks = new Map<number, { id: unknown; name: unknown; json: string }>()
  for (const e of events) {
    if (e.type === "content_block_start" && (e.content_block as Json).type === "tool_use") {
      const b = e.content_block as Json
      blocks.set(e.index as number, { id: b.id, name: b.name, json: "" })
    }
    if (e.type === "content_block_delta") {
      const b = blocks.get(e.index as number)
      if (b !== undefined) b.json += String((e.delta as Json).partial_json ?? "")
    }
  }
  return [...blocks.values()].map((b) => [b.id, b.name, b.json === "" ? {} : JSON.parse(b.json)])
}

const ask = (session: string) =>
  raw(HttpClientRequest.post("/v1/messages").pipe(
    HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": session }),
    HttpClientRequest.bodyText(
      JSON.stringify({
        model: "gemini-3",
        max_tokens: 500,
        stream: true,
        tools: ["Read", "Bash"].map((name) => ({ name, description: name, input_schema: { type: "object", properties: {} } })),
        messages: [{ role: "user", content: "read a.txt and list" }]
      }),
      "application/json"
    )
  ))

/** A Chat Completions stream of `deltas` (each the `tool_calls` of one chunk) as given, finished `"tool_calls"`. */
const indexed = (deltas: ReadonlyArray<ReadonlyArray<Json>>): ModelApi.Reply => {
  const reply = indexlessStream(deltas)
  return { ...reply, body: reply.body.replace("\"finish_reason\":\"stop\"", "\"finish_reason\":\"tool_calls\"") }
}

describe("Gateway, indexless tool-call deltas that share one call id", () => {
  // Seen in the field (proxies in front of Gemini, whose parallel calls come one a chunk, and which numbered each by
  // its place in its chunk): every call `index` 0, each with its own id. OpenAI never gives one index a second id,
  // so a new id at an index that has one is another call (before: glued into the first, as without an index).
  it.live("parallel calls each at index 0 with their own ids are two calls", () =>
    withChatGateway("gemini-*", (chat) =>
      Effect.gen(function*() {
        chat.enqueue(indexed([
          [{ index: 0, ...call("call_1", "Read", "{\"file_path\":") }],
          [{ index: 0, function: { arguments: "\"/a.txt\"}" } }],
          [{ index: 0, ...call("call_2", "Bash", "{\"command\":") }],
          [{ index: 0, function: { arguments: "\"ls\"}" } }]
        ]))
        const answer = yield* ask("c")
        expect(answer.status).toBe(200)
        expect(toolUses(answer.text)).toEqual([
          ["call_1", "Read", { file_path: "/a.txt" }],
          ["call_2", "Bash", { command: "ls" }]
        ])
      })), { timeout: 60_000 })

  // The same proxies, giving the parallel calls one shared id, or none: a delta naming a function at an index whose
  // call is named and whole is another call (before: glued into one call, `ReadBash` with `{…}{…}`).
  for (const [label, ids] of [["sharing one id", ["call_s", "call_s"]], ["without ids", [null, null]]] as const) {
    it.live(`parallel calls each at index 0 ${label} are two calls`, () =>
      withChatGateway("gemini-*", (chat) =>
        Effect.gen(function*() {
          const named = (id: string | null, name: string, args: string): Json => {
            const c = call(id ?? "", name, args)
            if (id === null) delete c.id
            return { index: 0, ...c }
          }
          chat.enqueue(indexed([
            [named(ids[0], "Read", "{\"file_path\":")],
            [{ index: 0, function: { arguments: "\"/a.txt\"}" } }],
            [named(ids[1], "Bash", "{\"command\":")],
            [{ index: 0, function: { arguments: "\"ls\"}" } }]
          ]))
          const answer = yield* ask(`d-${label}`)
          expect(answer.status).toBe(200)
          const uses = toolUses(answer.text)
          expect(uses.map(([, name, input]) => [name, input])).toEqual([
            ["Read", { file_path: "/a.txt" }],
            ["Bash", { command: "ls" }]
          ])
          // Two calls the agent can answer apart: distinct ids (the shared one on the first; a fresh one otherwise).
          expect(new Set(uses.map(([id]) => id)).size).toBe(2)
        })), { timeout: 60_000 })
  }

  it.live("a call's signature delta after the next call began belongs to its call", () =>
    withChatGateway("gemini-*", (chat) =>
      Effect.gen(function*() {
        const signature = { google: { thought_signature: "c2lnbmF0dXJl" } }
        chat.enqueue(indexlessStream([
          [call("call_1", "Read", "{\"file_path\":\"/a.txt\"}")],
          [call("call_2", "Bash", "{\"command\":\"ls\"}")],
          [{ id: "call_1", extra_content: signature }]
        ]))
        const answer = yield* ask("a")
        expect(answer.status).toBe(200)
        // Before the fix: a third tool_use, [call_1, "", {}].
        expect(toolUses(answer.text)).toEqual([
          ["call_1", "Read", { file_path: "/a.txt" }],
          ["call_2", "Bash", { command: "ls" }]
        ])
      })), { timeout: 60_000 })

  it.live("two parallel calls with one id are two calls", () =>
    withChatGateway("gemini-*", (chat) =>
      Effect.gen(function*() {
        chat.enqueue(indexlessStream([
          [call("call_x", "Read", "{\"file_path\":\"/a.txt\"}")],
          [call("call_x", "Read", "{\"file_path\":\"/b.txt\"}")]
        ]))
        const answer = yield* ask("b")
        expect(answer.status).toBe(200)
        // Before the fix: one call named ReadRead whose arguments were no JSON.
        expect(toolUses(answer.text).map(([, name, input]) => [name, input])).toEqual([
          ["Read", { file_path: "/a.txt" }],
          ["Read", { file_path: "/b.txt" }]
        ])
      })), { timeout: 60_000 })
})

describe("Gateway switch, a Chat Completions call's id", () => {
  // Some OpenAI-compatible servers send a call's name in its first delta and its id in a later one. The id is the
  // call's: before, it was fixed at the first delta, and the agent got a generated `call_…` instead.
  it.live("an id that arrives after the call's first delta is the call's id", () =>
    withChatGateway("gemini-*", (chat) =>
      Effect.gen(function*() {
        chat.enqueue(indexed([
          [{ index: 0, type: "function", function: { name: "Read", arguments: "" } }],
          [{ index: 0, id: "call_late", function: { arguments: "{\"file_path\":\"/a.txt\"}" } }]
        ]))
        const answer = yield* ask("late")
        expect(answer.status).toBe(200)
        expect(toolUses(answer.text)).toEqual([["call_late", "Read", { file_path: "/a.txt" }]])
      })), { timeout: 60_000 })

  // A whole answer whose thread_read calls have no id (or one id for two): the continuation's assistant message and
  // the gateway's answers name each call by an id of its own. Before, each answer's `tool_call_id` was "" (or the
  // shared id twice), matching no call the upstream could tell apart.
  it.live("whole thread_read calls without ids are answered by ids of their own", () =>
    withChatGateway("gemini-*", (chat) =>
      Effect.gen(function*() {
        const read = (id: string | null, offset: number): Json => ({
          ...(id === null ? {} : { id }),
          type: "function",
          function: { name: "thread_read", arguments: JSON.stringify({ refs: "#1", offset }) }
        })
        const whole = (message: Json): ModelApi.Reply => ({
          status: 200,
          contentType: "application/json",
          body: JSON.stringify({ id: "gem-w", object: "chat.completion", choices: [{ index: 0, message, finish_reason: "tool_calls" }], usage: { prompt_tokens: 100, completion_tokens: 20 } })
        })
        chat.enqueue(
          whole({ role: "assistant", content: null, tool_calls: [read(null, 0), read(null, 1)] }),
          whole({ role: "assistant", content: null, tool_calls: [read("call_s", 0), read("call_s", 1)] }),
          whole({ role: "assistant", content: "done" })
        )
        const answer = yield* raw(HttpClientRequest.post("/v1/messages").pipe(
          HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "whole-ids" }),
          HttpClientRequest.bodyText(JSON.stringify({
            model: "gemini-3",
            max_tokens: 500,
            tools: [{ name: "Read", description: "Read", input_schema: { type: "object", properties: {} } }],
            messages: [{ role: "user", content: "look back" }]
          }), "application/json")
        ))
        expect(answer.status).toBe(200)
        expect(chat.requests).toHaveLength(3)
        for (const [hop, request] of chat.requests.slice(1).entries()) {
          const messages = (JSON.parse(request.body) as { messages: Array<Json> }).messages
          // Each hidden round so far: the assistant's calls, then one tool answer per call.
          const rounds = messages.filter((m) => m.role === "assistant")
          expect(rounds).toHaveLength(hop + 1)
          const ids = rounds.flatMap((m) => (m.tool_calls as Array<Json>).map((c) => c.id))
          const answered = messages.filter((m) => m.role === "tool").map((m) => m.tool_call_id)
          expect(new Set(ids.slice(-2)).size).toBe(2)
          expect(ids.every((id) => typeof id === "string" && id !== "")).toBe(true)
          expect(answered).toEqual(ids)
        }
      })), { timeout: 60_000 })
})

describe("Gateway /v1/chat/completions (same protocol), parallel calls all at index 0", () => {
  /** The calls an agent assembles from a stream by each delta's `index` (as OpenAI's SDKs do): id, name, arguments. */
  const byIndex = (text: string) => {
    const calls = new Map<number, { id: string; name: string; arguments: string }>()
    for (const e of parseSse(text)) {
      if (e.data === "[DONE]") continue
      const choice = ((JSON.parse(e.data) as Json).choices as Array<Json> | undefined)?.[0]
      for (const c of ((choice?.delta as Json | undefined)?.tool_calls ?? []) as Array<Json>) {
        const at = calls.get(c.index as number) ?? { id: "", name: "", arguments: "" }
        const fn = (c.function ?? {}) as Json
        if (typeof c.id === "string") at.id = c.id
        at.name += String(fn.name ?? "")
        at.arguments += String(fn.arguments ?? "")
        calls.set(c.index as number, at)
      }
    }
    return [...calls.values()]
  }
  // The proxies' form (see above) reached a Chat agent unchanged: one index for both calls, so the agent glued them
  // (`ReadBash`, `{…}{…}`), and two calls of one id. The gateway numbers each call as its own and makes the ids distinct.
  for (const [label, ids] of [["sharing one id", ["call_s", "call_s"]], ["with their own ids", ["call_1", "call_2"]]] as const) {
    it.live(`calls ${label} reach the agent as two calls`, () =>
      withChatGateway("gemini-*", (chat) =>
        Effect.gen(function*() {
          chat.enqueue(indexed([
            [{ index: 0, ...call(ids[0], "Read", "{\"file_path\":") }],
            [{ index: 0, function: { arguments: "\"/a.txt\"}" } }],
            [{ index: 0, ...call(ids[1], "Bash", "{\"command\":") }],
            [{ index: 0, function: { arguments: "\"ls\"}" } }]
          ]))
          const answer = yield* raw(HttpClientRequest.post("/v1/chat/completions").pipe(
            HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "x-session-id": `same-${label}` }),
            HttpClientRequest.bodyText(JSON.stringify({
              model: "gemini-3",
              stream: true,
              tools: ["Read", "Bash"].map((name) => ({ type: "function", function: { name, description: name, parameters: { type: "object", properties: {} } } })),
              messages: [{ role: "user", content: "read a.txt and list" }]
            }), "application/json")
          ))
          expect(answer.status).toBe(200)
          const calls = byIndex(answer.text)
          expect(calls.map((c) => [c.name, JSON.parse(c.arguments)])).toEqual([["Read", { file_path: "/a.txt" }], ["Bash", { command: "ls" }]])
          expect(calls.map((c) => c.id)).toEqual(ids[0] === ids[1] ? ["call_s", "call_s_2"] : ["call_1", "call_2"])
        })), { timeout: 60_000 })
  }
})
