/**
 * `/v1/messages` to an Anthropic upstream whose stream restarts its answer: a `message_start` of another message
 * mid-stream (a stream spliced after a retry upstream, as the recorded `spliced-message-start`). Baton's adapter keeps the
 * second message only (Anthropic's SDK's MessageStream rejects the restart), and so must the gateway's reading:
 * a `thread_read` call the first attempt left cut is no call of the answer's (it was answered and the answer continued
 * upstream in its place, the model's real answer lost), and the reply recorded is the second message alone (the first
 * attempt's blocks stayed in it, and the agent's next request, which echoes the second message, was a divergence).
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as GatewayAnthropic from "../src/GatewayAnthropic.js"
import { adminToken, client, get, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"

const sse = (events: ReadonlyArray<Record<string, unknown>>) => events.map((e) => `event: ${String(e.type)}\ndata: ${JSON.stringify(e)}\n\n`).join("")
const usage = { input_tokens: 17, output_tokens: 1 }
const tools = [{ name: "Bash", input_schema: { type: "object" } }]

/** An answer whose first attempt (`first`'s blocks) is cut by a second message answering "Hello, World!". */
const restarted = (first: ReadonlyArray<Record<string, unknown>>): ModelApi.Reply => ({
  status: 200,
  contentType: "text/event-stream",
  body: sse([
    { type: "message_start", message: { id: "msg_first", type: "message", role: "assistant", content: [], model: "m", usage } },
    ...first,
    { type: "message_start", message: { id: "msg_second", type: "message", role: "assistant", content: [], model: "m", usage } },
    { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
    { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Hello, World!" } },
    { type: "content_block_stop", index: 0 },
    { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 5 } },
    { type: "message_stop" }
  ])
})

const withGateway = <A, E, R>(extra: Record<string, unknown>, test: (upstream: ModelApi.ModelApi) => Effect.Effect<A, E, R>) =>
  Effect.scoped(Effect.gen(function*() {
    const upstream = yield* ModelApi.start
    const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream, extra)], { TEST_MODEL_KEY: marker }, undefined, {
      gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
    })
    return yield* test(upstream).pipe(Effect.provide(serveSettings(settings)))
  }))

const send = (messages: ReadonlyArray<unknown>) =>
  raw(HttpClientRequest.post("/v1/messages?beta=true").pipe(
    HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "s-restart" }),
    HttpClientRequest.bodyText(JSON.stringify({ model: "claude-x", max_tokens: 100, stream: true, tools, messages }), "application/json")
  ))

/** The only thread's items (kind, text), its runs' statuses and its gateway events' types. */
const record = Effect.gen(function*() {
  const api = yield* client()
  const threads = (yield* api.threads.list({ urlParams: {} })).threads
  expect(threads).toHaveLength(1)
  const threadId = threads[0]!.id
  const items = (yield* api.items.list({ path: { threadId }, urlParams: {} })).items.map((i) => [i.kind, i.text])
  const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs.map((r) => r.status)
  const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text).map((e) => e.type).filter((t) => t.startsWith("gateway."))
  return { items, runs, events }
})

describe("Gateway: an Anthropic stream that restarts its answer", () => {
  it.live("a thread_read call the first attempt left cut is not answered: the agent gets the second message, one upstream request", () =>
    withGateway({}, (upstream) =>
      Effect.gen(function*() {
        upstream.enqueue(restarted([
          { type: "content_block_start", index: 0, content_block: { type: "thinking", thinking: "" } },
          { type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "I will read it." } },
          { type: "content_block_stop", index: 0 },
          { type: "content_block_start", index: 1, content_block: { type: "tool_use", id: "toolu_read", name: "thread_read", input: {} } },
          { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: "{\"refs\": \"#1" } }
        ]))
        const answer = yield* send([{ role: "user", content: "hi" }])
        expect(answer.status).toBe(200)
        // Before: the cut call was answered and the conversation continued upstream (here: no reply scripted, an error).
        expect(upstream.requests).toHaveLength(1)
        expect(answer.text).toContain("Hello, World!")
        expect(answer.text).not.toContain("event: error")
        const { items, runs } = yield* record
        expect(items).toEqual([["user_message", "hi"], ["assistant_message", "Hello, World!"]])
        expect(runs).toEqual(["completed"])
      })
    ))

  // The restart came while a thread_read call was held back (the first attempt's text had reached the agent): the
  // second message's message_start was held with it and hidden with its read, so the agent never saw the restart and
  // held the first attempt's text glued to the continuation's answer (and its SDK numbered blocks on from it).
  it.live("a restart after the first attempt's text reached the agent, the second message calling thread_read: the agent sees the restart", () =>
    withGateway({}, (upstream) =>
      Effect.gen(function*() {
        upstream.enqueue(
          {
            status: 200,
            contentType: "text/event-stream",
            body: sse([
              { type: "message_start", message: { id: "msg_first", type: "message", role: "assistant", content: [], model: "m", usage } },
              { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
              { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Retracted words." } },
              { type: "content_block_stop", index: 0 },
              { type: "content_block_start", index: 1, content_block: { type: "tool_use", id: "toolu_cut", name: "thread_read", input: {} } },
              { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: "{\"refs\": \"#1" } },
              { type: "message_start", message: { id: "msg_second", type: "message", role: "assistant", content: [], model: "m", usage } },
              { type: "content_block_start", index: 0, content_block: { type: "tool_use", id: "toolu_read", name: "thread_read", input: {} } },
              { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: "{\"refs\": \"#1\"}" } },
              { type: "content_block_stop", index: 0 },
              { type: "message_delta", delta: { stop_reason: "tool_use", stop_sequence: null }, usage: { output_tokens: 5 } },
              { type: "message_stop" }
            ])
          },
          ModelApi.answer("anthropic-messages", "Hello, World!", { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 })
        )
        const answer = yield* send([{ role: "user", content: "hi" }])
        expect(answer.status).toBe(200)
        expect(upstream.requests).toHaveLength(2)
        // As a client that reads on reads the stream: the message after the last message_start, its blocks numbered from 0.
        const events = answer.text.split("\n\n").flatMap((e) => e.split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)) as Record<string, unknown>))
        const last = events.map((e) => e.type).lastIndexOf("message_start")
        const held = events.slice(last).filter((e) => e.type === "content_block_start").map((e) => e.index)
        const text = events.slice(last).flatMap((e) => e.type === "content_block_delta" && (e.delta as Record<string, unknown>).type === "text_delta" ? [(e.delta as Record<string, unknown>).text] : [])
        // Before: one message_start (the first attempt's), "Retracted words." then "Hello, World!" numbered 1.
        expect({ held, text }).toEqual({ held: [0], text: ["Hello, World!"] })
        const { items, runs } = yield* record
        expect(items.filter(([kind]) => kind === "assistant_message")).toEqual([["assistant_message", "Hello, World!"]])
        expect(runs).toEqual(["completed"])
      })
    ))

  // A continuation (after a hidden thread_read round) that restarts: its message_start is not the agent's (the
  // agent's message began with the first hop), so the restart cannot be shown to the agent.
  const readRound: ModelApi.Reply = {
    status: 200,
    contentType: "text/event-stream",
    body: sse([
      { type: "message_start", message: { id: "msg_read", type: "message", role: "assistant", content: [], model: "m", usage } },
      { type: "content_block_start", index: 0, content_block: { type: "tool_use", id: "toolu_read", name: "thread_read", input: {} } },
      { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: "{\"refs\": \"#1\"}" } },
      { type: "content_block_stop", index: 0 },
      { type: "message_delta", delta: { stop_reason: "tool_use", stop_sequence: null }, usage: { output_tokens: 5 } },
      { type: "message_stop" }
    ])
  }
  const contentEvents = (text: string) =>
    text.split("\n\n").flatMap((e) => e.split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)) as Record<string, unknown>))

  it.live("a continuation that restarts before any of it reached the agent: its first attempt's cut thread_read is dropped", () =>
    withGateway({}, (upstream) =>
      Effect.gen(function*() {
        upstream.enqueue(readRound, restarted([
          { type: "content_block_start", index: 0, content_block: { type: "tool_use", id: "toolu_cut", name: "thread_read", input: {} } },
          { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: "{\"refs\": \"#1" } }
        ]))
        const answer = yield* send([{ role: "user", content: "hi" }])
        expect(answer.status).toBe(200)
        expect(upstream.requests).toHaveLength(2)
        // Before: the cut thread_read block went to the agent (a call of a tool it does not have), then the text at
        // the same index.
        const starts = contentEvents(answer.text).filter((e) => e.type === "content_block_start").map((e) => [e.index, (e.content_block as Record<string, unknown>).type])
        expect(starts).toEqual([[0, "text"]])
        const { items, runs } = yield* record
        expect(items.filter(([kind]) => kind === "assistant_message")).toEqual([["assistant_message", "Hello, World!"]])
        expect(runs).toEqual(["completed"])
      })
    ))

  it.live("a continuation that restarts after part of it reached the agent: the answer ends with the protocol's error", () =>
    withGateway({}, (upstream) =>
      Effect.gen(function*() {
        upstream.enqueue(readRound, restarted([
          { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
          { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Retracted words." } }
        ]))
        const answer = yield* send([{ role: "user", content: "hi" }])
        expect(answer.status).toBe(200)
        // Before: "Retracted words." and the second message's "Hello, World!" as two blocks of one index 0, ending well.
        const events = contentEvents(answer.text)
        expect(events.map((e) => e.type).slice(-1)).toEqual(["error"])
        expect(events.some((e) => e.type === "message_stop")).toBe(false)
        const { runs } = yield* record
        expect(runs).toEqual(["failed"])
      })
    ))

  it.live("the reply recorded is the second message alone; the agent's next request, echoing it, extends the conversation", () =>
    withGateway({ toolResultOffload: false }, (upstream) =>
      Effect.gen(function*() {
        upstream.enqueue(restarted([
          { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
          { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Let me run it." } },
          { type: "content_block_stop", index: 0 },
          { type: "content_block_start", index: 1, content_block: { type: "tool_use", id: "toolu_bash", name: "Bash", input: {} } },
          { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: "{\"command\": \"ls" } }
        ]))
        expect((yield* send([{ role: "user", content: "hi" }])).status).toBe(200)
        upstream.enqueue(ModelApi.answer("anthropic-messages", "two", { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }))
        expect((yield* send([
          { role: "user", content: "hi" },
          { role: "assistant", content: [{ type: "text", text: "Hello, World!" }] },
          { role: "user", content: "next" }
        ])).status).toBe(200)
        const { events, items, runs } = yield* record
        // Before: the first attempt's call stayed in the reply recorded ([tool_call, {"command": "ls} ...]), and the
        // next request was a divergence.
        expect(items).toEqual([["user_message", "hi"], ["assistant_message", "Hello, World!"], ["user_message", "next"], ["assistant_message", "two"]])
        expect(runs).toEqual(["completed", "completed"])
        expect(events.filter((e) => e === "gateway.diverged" || e === "gateway.rerendered")).toEqual([])
      })
    ))

  // The second message is the answer: a first one that had ended (message_stop) does not make the second whole.
  it("a restart after the first message's message_stop, the second cut before its own: the answer is unfinished", () => {
    const assembler = GatewayAnthropic.replyAssembler()
    assembler.push(new TextEncoder().encode(sse([
      { type: "message_start", message: { id: "msg_first", type: "message", role: "assistant", content: [], model: "m", usage } },
      { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "First." } },
      { type: "content_block_stop", index: 0 },
      { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 5 } },
      { type: "message_stop" },
      { type: "message_start", message: { id: "msg_second", type: "message", role: "assistant", content: [], model: "m", usage } },
      { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Sec" } }
    ])))
    // Before: "completed", the reply the second message's cut "Sec".
    expect(assembler.outcome()._tag).toBe("unfinished")
  })
})
