/**
 * The gateway's OpenAI Chat Completions endpoint over HTTP (issue 14: pi, opencode, aider), against a loopback Chat
 * Completions upstream: Baton's refusals in OpenAI's error shape, the upstream's stream and errors passed back byte for
 * byte with Baton's key upstream, and the record: a thread per conversation, a tool-using conversation over three
 * requests storing every message once (the assistant's reply recognised when the agent sends it back), usage recorded.
 */
import type { Item } from "@baton/contracts"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, client, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

const usage = { input: 100, cacheWrite: 0, cacheRead: 40, output: 5 }

/** A Chat Completions request from an agent, the Baton token as Bearer unless told. */
const chat = (body: unknown, headers: Record<string, string> = { authorization: `Bearer ${adminToken}` }) =>
  HttpClientRequest.post("/v1/chat/completions").pipe(
    HttpClientRequest.setHeaders({ accept: "text/event-stream", ...headers }),
    HttpClientRequest.bodyText(typeof body === "string" ? body : JSON.stringify(body), "application/json")
  )

/** A gateway over one loopback upstream: `gpt-*` to a Chat Completions instance. */
const withGateway = <A, E, R>(test: (upstream: ModelApi.ModelApi) => Effect.Effect<A, E, R>) =>
  Effect.scoped(Effect.gen(function*() {
    const upstream = yield* ModelApi.start
    const settings = yield* settingsFor(
      [instance("chat", "openai-chat", upstream)],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: [{ model: "gpt-*", provider: "chat" }] } }
    )
    return yield* test(upstream).pipe(Effect.provide(serveSettings(settings)))
  }))

const onlyThread = Effect.gen(function*() {
  const api = yield* client()
  const threads = (yield* api.threads.list({ urlParams: {} })).threads
  expect(threads.length).toBe(1)
  const threadId = threads[0]!.id
  const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
  const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
  return { threadId, items, runs }
})

describe("Gateway, OpenAI Chat Completions", () => {
  it.live("refuses a missing token, a body without messages and an unrouted model in OpenAI's error shape, sending nothing upstream", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const request = { model: "gpt-x", stream: true, messages: [{ role: "user", content: "hi" }] }
        const none = yield* raw(chat(request, {}))
        expect(none.status).toBe(401)
        expect(none.body).toMatchObject({ error: { type: "invalid_request_error", code: "invalid_api_key" } })
        const bad = yield* raw(chat({ model: "gpt-x", messages: "hi" }))
        expect(bad.status).toBe(400)
        expect(bad.body).toEqual({ error: { message: "messages: expected an array of messages", type: "invalid_request_error", param: null, code: null } })
        const unrouted = yield* raw(chat({ ...request, model: "claude-x" }))
        expect(unrouted.status).toBe(404)
        expect(unrouted.body).toMatchObject({ error: { code: "model_not_found" } })
        expect(upstream.requests).toHaveLength(0)
      })
    ))

  it.live("a tool-using conversation over three requests: each passed through byte for byte with Baton's key; every message stored once; usage recorded", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const system = { role: "system", content: "You are a coding agent." }
        const first = ModelApi.answer("openai-chat", "Let me look.", usage, [{ id: "call_1", name: "read", arguments: "{\"path\":\"a.ts\"}" }])
        upstream.enqueue(first)
        const body1 = { model: "gpt-x", stream: true, stream_options: { include_usage: true }, messages: [system, { role: "user", content: "what is in a.ts?" }] }
        const answer1 = yield* raw(chat(body1))
        expect(answer1.status).toBe(200)
        expect(answer1.text).toBe(first.body)
        expect(upstream.requests[0]!.url).toBe("/v1/chat/completions")
        expect(upstream.requests[0]!.body).toBe(JSON.stringify(body1))
        expect(upstream.requests[0]!.headers["authorization"]).toBe(`Bearer ${marker}`)

        // The agent sends the reply back as it assembled it, with the tool's result.
        const reply = { role: "assistant", content: "Let me look.", tool_calls: [{ id: "call_1", type: "function", function: { name: "read", arguments: "{\"path\":\"a.ts\"}" } }] }
        const result = { role: "tool", tool_call_id: "call_1", content: "export const a = 1" }
        const second = ModelApi.answer("openai-chat", "It exports a = 1.", usage)
        upstream.enqueue(second)
        const body2 = { ...body1, messages: [...body1.messages, reply, result] }
        expect((yield* raw(chat(body2))).text).toBe(second.body)
        const third = ModelApi.answer("openai-chat", "Done.", usage)
        upstream.enqueue(third)
        const body3 = { ...body1, messages: [...body2.messages, { role: "assistant", content: "It exports a = 1." }, { role: "user", content: "thanks" }] }
        expect((yield* raw(chat(body3))).text).toBe(third.body)

        const { items, runs } = yield* onlyThread
        expect(items.map((i) => [i.kind, i.text, i.toolCallId, i.toolName])).toEqual([
          ["user_message", "what is in a.ts?", null, null],
          ["assistant_message", "Let me look.", null, null],
          ["tool_call", "{\"path\":\"a.ts\"}", "call_1", "read"],
          ["tool_result", "export const a = 1", "call_1", "read"],
          ["assistant_message", "It exports a = 1.", null, null],
          ["user_message", "thanks", null, null],
          ["assistant_message", "Done.", null, null]
        ])
        expect(runs.map((r) => [r.status, r.prompt])).toEqual([["completed", "what is in a.ts?"], ["completed", ""], ["completed", "thanks"]])
        const api = yield* client()
        const view = yield* api.runs.get({ path: { runId: runs[0]!.id }, urlParams: {} })
        // prompt_tokens include the cached ones: 100 uncached, 40 read from the cache.
        expect(view.cost).toMatchObject({ inputTokens: 100, cacheReadTokens: 40, outputTokens: 5, providerInstance: "chat" })
        const events = (yield* raw(HttpClientRequest.get(`/threads/${runs[0]!.threadId}/events?follow=false`).pipe(
          HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}` })
        ))).text
        expect(events).not.toContain("gateway.diverged")
      })
    ))

  it.live("an upstream error passes back as its status and body; the run fails with the upstream's reason", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const body = JSON.stringify({ error: { message: "This model's maximum context length is 8192 tokens.", type: "invalid_request_error", param: "messages", code: "context_length_exceeded" } })
        upstream.enqueue({ status: 400, contentType: "application/json", body })
        const answer = yield* raw(chat({ model: "gpt-x", stream: true, messages: [{ role: "user", content: "hi" }] }))
        expect(answer.status).toBe(400)
        expect(answer.text).toBe(body)
        const { runs } = yield* onlyThread
        expect(runs.map((r) => r.status)).toEqual(["failed"])
        expect(runs[0]!.failureReason).toContain("context_length_exceeded")
      })
    ))

  // Review r31: an error in the stream was `overflow` only with OpenAI's code; an OpenAI-compatible server's overflow
  // (vLLM: its words, `code` 400) failed the run provider_unavailable, unlike the same body as a 4xx (overflow) and
  // an Anthropic stream's error (read by ProviderFailure.overflowOf). It is also what Baton's own stream error carries
  // when a continuation after thread_read is refused with such a body (GatewayChatOffload.streamError).
  it.live("an error in the stream fails the run by its words: an OpenAI-compatible overflow without OpenAI's code is overflow", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const overflow = "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion."
        const streams = [
          { error: { object: "error", message: overflow, type: "BadRequestError", param: null, code: 400 } },
          { error: { message: "The server is overloaded", type: "server_error", param: null, code: null } }
        ].map((e) => `data: ${JSON.stringify(e)}\n\n`)
        upstream.enqueue(...streams.map((body) => ({ status: 200, contentType: "text/event-stream", body })))
        for (const [i, body] of streams.entries()) {
          const answer = yield* raw(chat({ model: "gpt-x", stream: true, messages: [{ role: "user", content: `hi ${i}` }] }))
          expect(answer.text).toBe(body)
        }
        // Two conversations (no session, different first messages): each thread's one run, in the order sent.
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        const runs = (yield* Effect.forEach(threads, (t) => api.runs.list({ path: { threadId: t.id }, urlParams: {} }))).flatMap((p) => p.runs)
        const byPrompt = Object.fromEntries(runs.map((r) => [r.prompt, [r.status, r.failureCode]]))
        expect(byPrompt).toEqual({ "hi 0": ["failed", "overflow"], "hi 1": ["failed", "provider_unavailable"] })
      })
    ))
})
