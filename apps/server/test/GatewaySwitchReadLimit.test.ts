/**
 * A switched upstream that keeps calling only `thread_read` past the rounds the gateway continues for one agent
 * request (8): the agent never gets an empty answer because Baton hid the calls. Before, the ninth answer's reads were
 * left out and nothing else was there: the agent got a message with no content (`end_turn`, `stop`, an empty
 * Responses output), which Claude Code and Codex take as the model's final, empty answer. Now the answer is Baton's
 * note saying why it stopped and what to do (`GatewaySwitched.readLimitNote`), streamed and whole, on each direction
 * (an Anthropic agent on a Chat instance, a Chat agent on an Anthropic instance, a Responses agent on a Chat one).
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { readLimitNote } from "../src/GatewaySwitched.js"
import { adminToken, client, parseSse, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

type Json = Record<string, unknown>
const usage = { input: 900, cacheWrite: 0, cacheRead: 0, output: 20 }
const read = (i: number): ModelApi.Call => ({ id: `call_r${i}`, name: "thread_read", arguments: JSON.stringify({ refs: "#1", offset: i }) })

/** A whole answer of `kind` calling `call`. */
const whole = (kind: ModelApi.Kind, call: ModelApi.Call): ModelApi.Reply => {
  const body = kind === "anthropic-messages"
    ? { id: "msg_w", type: "message", role: "assistant", model: "m", content: [{ type: "tool_use", id: call.id, name: call.name, input: JSON.parse(call.arguments) }], stop_reason: "tool_use", stop_sequence: null, usage: { input_tokens: 900, output_tokens: 20 } }
    : { id: "chatcmpl-w", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls: [{ id: call.id, type: "function", function: { name: call.name, arguments: call.arguments } }] }, finish_reason: "tool_calls" }], usage: { prompt_tokens: 900, completion_tokens: 20 } }
  return { status: 200, contentType: "application/json", body: JSON.stringify(body) }
}

/** The text the agent got, from its answer (streamed or whole) in its protocol. */
const textOf = (path: string, text: string, streamed: boolean): string => {
  if (!streamed) {
    const b = JSON.parse(text) as Json
    if (path === "/v1/messages") return (b.content as Array<Json>).map((c) => String(c.text ?? "")).join("")
    if (path === "/v1/chat/completions") return String(((b.choices as Array<Json>)[0]!.message as Json).content ?? "")
    return (b.output as Array<Json>).flatMap((o) => (Array.isArray(o.content) ? o.content as Array<Json> : [])).map((c) => String(c.text ?? "")).join("")
  }
  const events = parseSse(text).filter((e) => e.data !== "[DONE]").map((e) => JSON.parse(e.data) as Json)
  if (path === "/v1/messages") return events.filter((e) => e.type === "content_block_delta").map((e) => String((e.delta as Json).text ?? "")).join("")
  if (path === "/v1/chat/completions") return events.map((e) => String((((e.choices as Array<Json> | undefined)?.[0]?.delta as Json | undefined)?.content) ?? "")).join("")
  return events.filter((e) => e.type === "response.output_text.delta").map((e) => String(e.delta)).join("")
}

const cases = [
  {
    upstream: "openai-chat" as const,
    path: "/v1/messages",
    headers: { "x-api-key": adminToken, "anthropic-version": "2023-06-01" },
    body: { model: "m-1", max_tokens: 1_000, tools: [{ name: "Bash", description: "Run", input_schema: { type: "object", properties: {} } }], messages: [{ role: "user", content: "look back" }] }
  },
  {
    upstream: "anthropic-messages" as const,
    path: "/v1/chat/completions",
    headers: { authorization: `Bearer ${adminToken}` },
    body: { model: "m-1", tools: [{ type: "function", function: { name: "bash", description: "Run", parameters: { type: "object", properties: {} } } }], messages: [{ role: "user", content: "look back" }] }
  },
  {
    upstream: "openai-chat" as const,
    path: "/v1/responses",
    headers: { authorization: `Bearer ${adminToken}` },
    body: { model: "m-1", tools: [{ type: "function", name: "shell", description: "Run", parameters: { type: "object", properties: {} } }], input: [{ type: "message", role: "user", content: [{ type: "input_text", text: "look back" }] }] }
  }
]

describe("Gateway switch, an upstream that still calls only thread_read after the last round", () => {
  for (const c of cases) {
    for (const streamed of [true, false]) {
      it.live(`${c.path} on ${c.upstream} (${streamed ? "streamed" : "whole"}): the agent gets Baton's note, not an empty answer`, () =>
        Effect.scoped(Effect.gen(function*() {
          const upstream = yield* ModelApi.start
          const settings = yield* settingsFor([instance("up", c.upstream, upstream, { contextWindow: 200_000 })], { TEST_MODEL_KEY: marker }, undefined, {
            gateway: { routes: [{ model: "m-*", provider: "up" }] }
          })
          yield* Effect.gen(function*() {
            for (let i = 0; i < 9; i++) upstream.enqueue(streamed ? ModelApi.answer(c.upstream, "", usage, [read(i)]) : whole(c.upstream, read(i)))
            const answer = yield* raw(HttpClientRequest.post(c.path).pipe(
              HttpClientRequest.setHeaders(c.headers),
              HttpClientRequest.bodyText(JSON.stringify({ ...c.body, stream: streamed }), "application/json")
            ))
            expect(answer.status).toBe(200)
            expect(upstream.requests).toHaveLength(9)
            expect(answer.text).not.toContain("thread_read")
            // Before the fix: "" (an answer with no content).
            expect(textOf(c.path, answer.text, streamed)).toBe(readLimitNote)
            const api = yield* client()
            const threads = (yield* api.threads.list({ urlParams: {} })).threads
            const runs = (yield* api.runs.list({ path: { threadId: threads[0]!.id }, urlParams: {} })).runs
            expect(runs.map((r) => r.status)).toEqual(["completed"])
          }).pipe(Effect.provide(serveSettings(settings)))
        })), { timeout: 60_000 })
    }
  }
})

// Review r45: the last round's answer says something beside its thread_read calls. The calls are left out and the
// text is the answer: Baton's note is only for an answer that would otherwise be empty. Before the fix, a whole
// answer whose calls were all hidden was replaced by the note, the model's text lost.
describe("Gateway switch, the last round's answer has text beside its thread_read calls", () => {
  const said = "Found it: the config sets the limit to 8."
  /** A whole answer of `kind` saying `said` and calling `call`. */
  const saying = (kind: ModelApi.Kind, call: ModelApi.Call): ModelApi.Reply => {
    const body = JSON.parse(whole(kind, call).body) as Json
    if (kind === "anthropic-messages") return { ...whole(kind, call), body: JSON.stringify({ ...body, content: [{ type: "text", text: said }, ...(body.content as Array<Json>)] }) }
    const choice = (body.choices as Array<Json>)[0]!
    return { ...whole(kind, call), body: JSON.stringify({ ...body, choices: [{ ...choice, message: { ...(choice.message as Json), content: said } }] }) }
  }
  for (const c of cases) {
    it.live(`${c.path} on ${c.upstream} (whole): the agent gets the text, not Baton's note`, () =>
      Effect.scoped(Effect.gen(function*() {
        const upstream = yield* ModelApi.start
        const settings = yield* settingsFor([instance("up", c.upstream, upstream, { contextWindow: 200_000 })], { TEST_MODEL_KEY: marker }, undefined, {
          gateway: { routes: [{ model: "m-*", provider: "up" }] }
        })
        yield* Effect.gen(function*() {
          for (let i = 0; i < 8; i++) upstream.enqueue(whole(c.upstream, read(i)))
          upstream.enqueue(saying(c.upstream, read(8)))
          const answer = yield* raw(HttpClientRequest.post(c.path).pipe(
            HttpClientRequest.setHeaders(c.headers),
            HttpClientRequest.bodyText(JSON.stringify({ ...c.body, stream: false }), "application/json")
          ))
          expect(answer.status).toBe(200)
          expect(upstream.requests).toHaveLength(9)
          expect(answer.text).not.toContain("thread_read")
          // Before the fix: readLimitNote (the text dropped).
          expect(textOf(c.path, answer.text, false)).toBe(said)
        }).pipe(Effect.provide(serveSettings(settings)))
      })), { timeout: 60_000 })
  }
})

// A streamed answer's text goes to the agent as it comes, so after the last round the agent has it already: it is the
// answer, ended there (`end_turn`, `stop`, a completed response), as a whole answer with text beside its reads is.
// Before branch `b46gw` Baton's note was appended after it (the text, then "[Baton] … gave no answer yet").
describe("Gateway switch, a streamed answer whose text reached the agent before the read limit", () => {
  const said = "Found it: the config sets the limit to 8."
  // The three other directions too (their translators end the answer through another reader's `stop`).
  const others = [
    { ...cases[0]!, upstream: "openai-responses" as const },
    { ...cases[1]!, upstream: "openai-responses" as const },
    { ...cases[2]!, upstream: "anthropic-messages" as const }
  ]
  for (const c of [...cases, ...others]) {
    for (const where of ["the last round", "the first round"] as const) {
      it.live(`${c.path} on ${c.upstream} (streamed, text in ${where}): the agent gets the text alone, not Baton's note`, () =>
        Effect.scoped(Effect.gen(function*() {
          const upstream = yield* ModelApi.start
          const settings = yield* settingsFor([instance("up", c.upstream, upstream, { contextWindow: 200_000 })], { TEST_MODEL_KEY: marker }, undefined, {
            gateway: { routes: [{ model: "m-*", provider: "up" }] }
          })
          yield* Effect.gen(function*() {
            const at = where === "the last round" ? 8 : 0
            for (let i = 0; i < 9; i++) upstream.enqueue(ModelApi.answer(c.upstream, i === at ? said : "", usage, [read(i)]))
            const answer = yield* raw(HttpClientRequest.post(c.path).pipe(
              HttpClientRequest.setHeaders(c.headers),
              HttpClientRequest.bodyText(JSON.stringify({ ...c.body, stream: true }), "application/json")
            ))
            expect(answer.status).toBe(200)
            expect(upstream.requests).toHaveLength(9)
            expect(answer.text).not.toContain("thread_read")
            // Before the fix: said + readLimitNote.
            expect(textOf(c.path, answer.text, true)).toBe(said)
            // The answer ends its turn, once.
            if (c.path === "/v1/messages") expect(answer.text.match(/"stop_reason":"end_turn"/g)).toHaveLength(1)
            if (c.path === "/v1/chat/completions") expect(answer.text.match(/"finish_reason":"stop"/g)).toHaveLength(1)
            if (c.path === "/v1/responses") expect(answer.text.match(/event: response\.completed/g)).toHaveLength(1)
            const api = yield* client()
            const threads = (yield* api.threads.list({ urlParams: {} })).threads
            const runs = (yield* api.runs.list({ path: { threadId: threads[0]!.id }, urlParams: {} })).runs
            expect(runs.map((r) => r.status)).toEqual(["completed"])
          }).pipe(Effect.provide(serveSettings(settings)))
        })), { timeout: 60_000 })
    }
  }
})
