/**
 * `/v1/messages` to an Anthropic upstream whose stream restarts its answer: a `message_start` of another message
 * mid-stream (a stream spliced after a retry upstream, as the recorded `spliced-message-start`). Anthropic's SDK, and so
 * Claude Code, keeps the second message only; so does Baton's adapter, and so must the gateway's reading of the answer:
 * a `thread_read` call the first attempt left cut is no call of the answer's (it was answered and the answer continued
 * upstream in its place, the model's real answer lost), and the reply recorded is the second message alone (the first
 * attempt's blocks stayed in it, and the agent's next request, which echoes the second message, was a divergence).
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
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
})
