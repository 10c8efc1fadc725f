/**
 * An upstream that keeps calling only `thread_read` past the rounds the gateway continues for one agent request (8; a
 * model paging through a long original makes that many): the agent never gets the call. The reply after the last
 * round is answered as reads beside the agent's calls are (the gateway answers the reads, records the round for the
 * agent's next request) and reaches the agent without the call, its stop reason without a call (`end_turn`, `stop`).
 * On each endpoint, streamed and whole; and when the model gave the agent no text, the agent gets Baton's note
 * (`GatewayOffload.readLimitNote`), never an answer without content (before: a message without content, a completion
 * with `content: null`, a response without output). Before, that reply went to the agent as it came: a `thread_read` call, a tool
 * the agent does not have (Claude Code answers "No such tool available"), recorded in the thread as the agent's.
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { readLimitNote } from "../src/GatewayOffload.js"
import { adminToken, client, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

type Json = Record<string, unknown>
const usage = { input: 900, cacheWrite: 0, cacheRead: 0, output: 20 }
const output = "hello output ".repeat(60)
const read = (i: number): ModelApi.Call => ({ id: `call_r${i}`, name: "thread_read", arguments: JSON.stringify({ refs: "tool:call_a", offset: i }) })

/** A whole answer of `kind` calling `call` (Anthropic, Responses and Chat Completions bodies). */
const whole = (kind: ModelApi.Kind, call: ModelApi.Call): ModelApi.Reply => {
  const body = kind === "anthropic-messages"
    ? { id: "msg_w", type: "message", role: "assistant", model: "m", content: [{ type: "tool_use", id: call.id, name: call.name, input: JSON.parse(call.arguments) }], stop_reason: "tool_use", stop_sequence: null, usage: { input_tokens: 900, output_tokens: 20 } }
    : kind === "openai-responses"
    ? { id: "resp_w", object: "response", status: "completed", output: [{ type: "function_call", id: `fc_${call.id}`, call_id: call.id, name: call.name, arguments: call.arguments, status: "completed" }], usage: { input_tokens: 900, output_tokens: 20, total_tokens: 920 } }
    : { id: "chatcmpl-w", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls: [{ id: call.id, type: "function", function: { name: call.name, arguments: call.arguments } }] }, finish_reason: "tool_calls" }], usage: { prompt_tokens: 900, completion_tokens: 20 } }
  return { status: 200, contentType: "application/json", body: JSON.stringify(body) }
}

/** A streamed Responses answer with `sequence_number`s, as OpenAI numbers its events (other kinds as they are). */
const numbered = (kind: ModelApi.Kind, reply: ModelApi.Reply): ModelApi.Reply => {
  if (kind !== "openai-responses") return reply
  let seq = 0
  return {
    ...reply,
    body: reply.body.split("\n\n").filter((e) => e.trim() !== "").map((e) => {
      const [event, data] = e.split("\n")
      return `${event}\ndata: ${JSON.stringify({ ...JSON.parse(data!.slice(6)) as Json, sequence_number: seq++ })}\n\n`
    }).join("")
  }
}

/** Each endpoint's request: a history whose tool result `call_a` is what the reads read. */
const cases = [
  {
    kind: "anthropic-messages" as const,
    path: "/v1/messages",
    headers: { "x-api-key": adminToken, "anthropic-version": "2023-06-01" },
    body: {
      model: "m-1",
      max_tokens: 1_000,
      tools: [{ name: "Bash", description: "Run", input_schema: { type: "object", properties: { command: { type: "string" } } } }],
      messages: [
        { role: "user", content: "run it" },
        { role: "assistant", content: [{ type: "tool_use", id: "call_a", name: "Bash", input: { command: "echo" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "call_a", content: output }] }
      ]
    },
    stop: (text: string, streamed: boolean) => streamed ? /"stop_reason":"([a-z_]+)"/.exec(text.slice(text.lastIndexOf("message_delta")))?.[1] : (JSON.parse(text) as Json).stop_reason
  },
  {
    kind: "openai-responses" as const,
    path: "/v1/responses",
    headers: { authorization: `Bearer ${adminToken}` },
    body: {
      model: "m-1",
      tools: [{ type: "function", name: "shell", description: "Run", parameters: { type: "object", properties: { command: { type: "string" } } } }],
      input: [
        { type: "message", role: "user", content: [{ type: "input_text", text: "run it" }] },
        { type: "function_call", call_id: "call_a", name: "shell", arguments: "{\"command\":\"echo\"}" },
        { type: "function_call_output", call_id: "call_a", output }
      ]
    },
    stop: () => undefined
  },
  {
    kind: "openai-chat" as const,
    path: "/v1/chat/completions",
    headers: { authorization: `Bearer ${adminToken}` },
    body: {
      model: "m-1",
      tools: [{ type: "function", function: { name: "bash", description: "Run", parameters: { type: "object", properties: { command: { type: "string" } } } } }],
      messages: [
        { role: "user", content: "run it" },
        { role: "assistant", content: null, tool_calls: [{ id: "call_a", type: "function", function: { name: "bash", arguments: "{\"command\":\"echo\"}" } }] },
        { role: "tool", tool_call_id: "call_a", content: output }
      ]
    },
    stop: (text: string, streamed: boolean) =>
      streamed
        ? [...text.matchAll(/"finish_reason":"([a-z_]+)"/g)].map((m) => m[1]).at(-1)
        : ((JSON.parse(text) as { choices: Array<Json> }).choices[0]!.finish_reason)
  }
]

describe("Gateway, a reply that still calls only thread_read after the last round", () => {
  for (const c of cases) {
    for (const streamed of [true, false]) {
      it.live(`${c.kind} (${streamed ? "streamed" : "whole"}): the agent never gets the call, its turn ends, the record holds none`, () =>
        Effect.scoped(Effect.gen(function*() {
          const upstream = yield* ModelApi.start
          const settings = yield* settingsFor([instance("up", c.kind, upstream, { contextWindow: 200_000 })], { TEST_MODEL_KEY: marker }, undefined, {
            gateway: { routes: [{ model: "m-*", provider: "up" }] }
          })
          yield* Effect.gen(function*() {
            for (let i = 0; i < 9; i++) upstream.enqueue(streamed ? numbered(c.kind, ModelApi.answer(c.kind, "", usage, [read(i)])) : whole(c.kind, read(i)))
            const answer = yield* raw(HttpClientRequest.post(c.path).pipe(
              HttpClientRequest.setHeaders(c.headers),
              HttpClientRequest.bodyText(JSON.stringify({ ...c.body, stream: streamed }), "application/json")
            ))
            expect(answer.status).toBe(200)
            // The first request and 8 continuations.
            expect(upstream.requests).toHaveLength(9)
            // Before the fix: the ninth reply's thread_read call reached the agent.
            expect(answer.text).not.toContain("thread_read")
            expect(answer.text).not.toContain("call_r8")
            if (c.kind === "anthropic-messages") {
              expect(c.stop(answer.text, streamed)).toBe("end_turn")
              // Not an answer without content: Baton's note (before, a message with no content block).
              const text = streamed
                ? answer.text.split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)) as Json)
                  .filter((e) => e.type === "content_block_delta").map((e) => String((e.delta as Json).text ?? "")).join("")
                : ((JSON.parse(answer.text) as { content: Array<Json> }).content.map((b) => String(b.text ?? "")).join(""))
              expect(text).toBe(readLimitNote)
            }
            if (c.kind === "openai-responses") {
              // Not a response without output: Baton's note as an output message (before, no output at all).
              const events = answer.text.split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)) as Json)
              const text = streamed
                ? events.filter((e) => e.type === "response.output_text.delta").map((e) => String(e.delta)).join("")
                : ((JSON.parse(answer.text) as { output: Array<Json> }).output.flatMap((o) => (o.content as Array<Json> | undefined) ?? []).map((p) => String(p.text ?? "")).join(""))
              expect(text).toBe(readLimitNote)
              if (streamed) {
                // Numbered on from the events the agent received: no gap, no repeat.
                const numbers = events.map((e) => e.sequence_number)
                expect(numbers).toEqual(numbers.map((_, i) => i))
                const completed = events.find((e) => e.type === "response.completed")!.response as { output: Array<Json> }
                expect(completed.output.map((o) => o.type)).toEqual(["message"])
              }
            }
            if (c.kind === "openai-chat") {
              expect(c.stop(answer.text, streamed)).toBe("stop")
              // Not an answer without content: Baton's note (before, `content` null or no content delta).
              const text = streamed
                ? answer.text.split("\n").filter((l) => l.startsWith("data: ") && l !== "data: [DONE]").map((l) => JSON.parse(l.slice(6)) as { choices: Array<Json> })
                  .map((e) => String((e.choices[0]?.delta as Json | undefined)?.content ?? "")).join("")
                : String(((JSON.parse(answer.text) as { choices: Array<Json> }).choices[0]!.message as Json).content)
              expect(text).toBe(readLimitNote)
            }
            // The record holds the agent's conversation, no thread_read call in it; the run completed.
            const api = yield* client()
            const threads = (yield* api.threads.list({ urlParams: {} })).threads
            expect(threads).toHaveLength(1)
            const items = (yield* api.items.list({ path: { threadId: threads[0]!.id }, urlParams: {} })).items
            expect(items.map((i) => i.kind)).toEqual(["user_message", "tool_call", "tool_result", "assistant_message"])
            const runs = (yield* api.runs.list({ path: { threadId: threads[0]!.id }, urlParams: {} })).runs
            expect(runs.map((r) => r.status)).toEqual(["completed"])
            if (c.kind === "openai-chat") {
              // The ninth read was answered by the gateway: when the agent goes on, the upstream gets it answered
              // (the agent's echo of the message it received, Baton's note, is expanded into the rounds).
              upstream.enqueue(ModelApi.answer(c.kind, "done", usage))
              const more = yield* raw(HttpClientRequest.post(c.path).pipe(
                HttpClientRequest.setHeaders(c.headers),
                HttpClientRequest.bodyText(JSON.stringify({ ...c.body, messages: [...c.body.messages!, { role: "assistant", content: readLimitNote }, { role: "user", content: "go on" }], stream: true }), "application/json")
              ))
              expect(more.status).toBe(200)
              const sent = JSON.parse(upstream.requests.at(-1)!.body) as { messages: Array<Json> }
              expect(sent.messages.filter((m) => m.role === "tool").map((m) => m.tool_call_id)).toEqual(["call_a", ...Array.from({ length: 9 }, (_, i) => `call_r${i}`)])
            }
          }).pipe(Effect.provide(serveSettings(settings)))
        })), { timeout: 60_000 })
    }
  }
})
