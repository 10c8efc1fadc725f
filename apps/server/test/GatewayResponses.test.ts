/**
 * The gateway's OpenAI Responses endpoints over HTTP (issue 14, Codex), against a loopback Responses upstream: Baton's
 * own refusals in OpenAI's error shape (no token, a body that is not a Responses request, an unrouted model, a model
 * routed to another protocol's instance), the upstream's errors and answers passed back byte for byte (streamed and
 * whole, `/v1/responses/compact`), and the record: one thread per Codex thread (`thread-id`), every input item stored
 * once, the reply's output items and usage recorded, Codex's compaction recorded as a divergence and new baseline.
 */
import type { Item } from "@baton/contracts"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, client, get, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"

const usage = { input: 100, cacheWrite: 0, cacheRead: 40, output: 5 }

/** A Responses request from an agent: `body` as given (a string is sent as is), the Baton token as Bearer unless told. */
const responses = (body: unknown, headers: Record<string, string> = { authorization: `Bearer ${adminToken}` }, path = "/v1/responses") =>
  HttpClientRequest.post(path).pipe(
    HttpClientRequest.setHeaders({ accept: "text/event-stream", ...headers }),
    HttpClientRequest.bodyText(typeof body === "string" ? body : JSON.stringify(body), "application/json")
  )

const user = (text: string, id?: string) => ({ type: "message", ...(id === undefined ? {} : { id }), role: "user", content: [{ type: "input_text", text }] })
const developer = (text: string) => ({ type: "message", role: "developer", content: [{ type: "input_text", text }] })
const assistant = (text: string, id: string) => ({ type: "message", id, role: "assistant", content: [{ type: "output_text", text }] })
const call = (callId: string, cmd: string) => ({ type: "function_call", id: `fc_${callId}`, name: "exec_command", arguments: JSON.stringify({ cmd }), call_id: callId })
const output = (callId: string, text: string) => ({ type: "function_call_output", id: `fco_${callId}`, call_id: callId, output: text })

/** A gateway over one loopback upstream serving both protocols: `claude-*` to Anthropic, `gpt-*` to Responses. */
const withGateway = <A, E, R>(test: (upstream: ModelApi.ModelApi) => Effect.Effect<A, E, R>) =>
  Effect.scoped(Effect.gen(function*() {
    const upstream = yield* ModelApi.start
    const settings = yield* settingsFor(
      [instance("anthropic", "anthropic-messages", upstream), instance("openai", "openai-responses", upstream)],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: [{ model: "claude-*", provider: "anthropic" }, { model: "gpt-*", provider: "openai" }] } }
    )
    return yield* test(upstream).pipe(Effect.provide(serveSettings(settings)))
  }))

/** Every item of the only thread, its runs, its title and its id. */
const onlyThread = Effect.gen(function*() {
  const api = yield* client()
  const threads = (yield* api.threads.list({ urlParams: {} })).threads
  expect(threads.length).toBe(1)
  const threadId = threads[0]!.id
  const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
  const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
  return { threadId, title: threads[0]!.title, items, runs }
})

describe("Gateway, OpenAI Responses", () => {
  it.live("refuses a missing or unknown token, a malformed body, an unrouted model and a model of another protocol in OpenAI's error shape, sending nothing upstream", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const request = { model: "gpt-x", stream: true, input: [user("hi")] }
        const none = yield* raw(responses(request, {}))
        expect(none.status).toBe(401)
        expect(none.body).toEqual({
          error: {
            message: "Baton gateway: no bearer token; send a Baton token as Authorization: Bearer (the model provider's env_key)",
            type: "invalid_request_error",
            param: null,
            code: "invalid_api_key"
          }
        })
        const wrong = yield* raw(responses(request, { authorization: "Bearer sk-proj-not-a-baton-token" }))
        expect(wrong.status).toBe(401)
        expect(wrong.body).toMatchObject({ error: { type: "invalid_request_error", code: "invalid_api_key", message: "Baton gateway: unknown token; send a Baton token as Authorization: Bearer (the model provider's env_key)" } })

        const malformed = yield* raw(responses("{\"model\": \"gpt-x\", "))
        expect(malformed.status).toBe(400)
        expect(malformed.body).toEqual({ error: { message: "the body is not a JSON object", type: "invalid_request_error", param: null, code: null } })
        const badInput = yield* raw(responses({ model: "gpt-x", input: 42 }))
        expect(badInput.status).toBe(400)
        expect(badInput.body).toEqual({ error: { message: "input: expected a string or an array of input items", type: "invalid_request_error", param: null, code: null } })

        const unrouted = yield* raw(responses({ ...request, model: "o9-unknown" }))
        expect(unrouted.status).toBe(404)
        expect(unrouted.body).toEqual({
          error: { message: "model: o9-unknown is not routed by this Baton gateway (routes: claude-*, gpt-*)", type: "invalid_request_error", param: null, code: "model_not_found" }
        })
        // A compaction request is never switched (a Responses turn to Anthropic is: GatewaySwitchResponsesAnthropic.test.ts).
        const otherProtocol = yield* raw(responses({ ...request, model: "claude-x" }, undefined, "/v1/responses/compact"))
        expect(otherProtocol.status).toBe(404)
        expect(otherProtocol.body).toMatchObject({
          error: {
            message: "model: claude-x routes to provider instance \"anthropic\" (anthropic-messages), not an openai-responses upstream; this gateway converts model requests between protocols (a provider switch), not Codex's compaction requests (/v1/responses/compact)",
            code: "model_not_found"
          }
        })

        expect(upstream.requests.length).toBe(0)
        const api = yield* client()
        expect((yield* api.threads.list({ urlParams: {} })).threads).toEqual([])
      })
    ))

  it.live("passes a stream back byte for byte with Baton's key as Bearer upstream; the reply's items and usage are recorded on a Codex thread", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const reply = ModelApi.answer("openai-responses", "Hello there", usage, [{ id: "call_1", name: "exec_command", arguments: "{\"cmd\":\"ls\"}" }])
        upstream.enqueue(reply)
        const body = { model: "gpt-x", stream: true, input: [developer("You are Codex."), user("hi")], prompt_cache_key: "thread-a" }
        const answer = yield* raw(responses(body, {
          authorization: `Bearer ${adminToken}`,
          "session-id": "thread-a",
          "thread-id": "thread-a",
          "user-agent": "codex_exec/0.171.0 (Debian 12.0.0; x86_64)",
          originator: "codex_exec"
        }))
        expect(answer.status).toBe(200)
        expect(answer.headers["content-type"]).toBe("text/event-stream")
        expect(answer.text).toBe(reply.body)
        const sent = upstream.requests[0]!
        expect(sent.url).toBe("/v1/responses")
        expect(sent.body).toBe(JSON.stringify(body))
        expect(sent.headers["authorization"]).toBe(`Bearer ${marker}`)
        expect(sent.headers["x-api-key"]).toBeUndefined()
        expect(sent.headers["anthropic-version"]).toBeUndefined()
        expect(sent.headers["session-id"]).toBe("thread-a")
        expect(sent.headers["originator"]).toBe("codex_exec")

        const { items, runs, title } = yield* onlyThread
        expect(title).toBe("Codex session thread-a")
        expect(items.map((i) => [i.kind, i.text, i.toolCallId])).toEqual([
          ["user_message", "You are Codex.", null],
          ["user_message", "hi", null],
          ["assistant_message", "Hello there", null],
          ["tool_call", "{\"cmd\":\"ls\"}", "call_1"]
        ])
        expect(items.map((i) => i.messageId).slice(0, 2)).toEqual(["developer@0.0", "user@0.1"])
        expect(runs.map((r) => [r.status, r.prompt])).toEqual([["completed", "hi"]])
        const api = yield* client()
        const view = yield* api.runs.get({ path: { runId: runs[0]!.id }, urlParams: {} })
        // Responses' input_tokens include the cached ones: 100 uncached, 40 read from the cache.
        expect(view.cost).toMatchObject({ inputTokens: 100, cacheReadTokens: 40, cacheWriteTokens: 0, outputTokens: 5, providerInstance: "openai" })
        expect(view.cost?.costUsd).toBeCloseTo((100 * 3 + 40 * 0.3 + 5 * 15) / 1_000_000, 12)
      })
    ))

  it.live("passes an upstream error back as the upstream's status and body, streamed or not; the run fails with the upstream's reason", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const body = JSON.stringify({ error: { message: "Your input exceeds the context window of this model.", type: "invalid_request_error", param: "input", code: "context_length_exceeded" } })
        upstream.enqueue({ status: 400, contentType: "application/json", body }, { status: 429, contentType: "application/json", body: "{\"error\":{\"message\":\"Rate limit reached\",\"type\":\"requests\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}" })
        const streamed = yield* raw(responses({ model: "gpt-x", stream: true, input: [user("hi")] }))
        expect(streamed.status).toBe(400)
        expect(streamed.text).toBe(body)
        const whole = yield* raw(responses({ model: "gpt-x", input: [user("hi")] }))
        expect(whole.status).toBe(429)
        expect(whole.text).toBe("{\"error\":{\"message\":\"Rate limit reached\",\"type\":\"requests\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}")
        const { runs } = yield* onlyThread
        expect(runs.map((r) => [r.status, r.failureCode])).toEqual([["failed", "overflow"], ["failed", "provider_unavailable"]])
        expect(runs[0]!.failureReason).toContain("context_length_exceeded")
      })
    ))

  it.live("a response.failed in the stream passes through unchanged and fails the run (overflow for context_length_exceeded)", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const failed = [
          { type: "response.created", response: { id: "resp_f" } },
          { type: "response.failed", response: { id: "resp_f", error: { code: "context_length_exceeded", message: "Your input exceeds the context window of this model." } } }
        ].map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join("")
        upstream.enqueue({ status: 200, contentType: "text/event-stream", body: failed })
        const answer = yield* raw(responses({ model: "gpt-x", stream: true, input: [user("hi")] }))
        expect(answer.status).toBe(200)
        expect(answer.text).toBe(failed)
        const { runs } = yield* onlyThread
        expect(runs.map((r) => [r.status, r.failureCode])).toEqual([["failed", "overflow"]])
        expect(runs[0]!.failureReason).toBe("the upstream's response failed: context_length_exceeded Your input exceeds the context window of this model.")
      })
    ))

  // Review r31: a failed stream was `overflow` only with OpenAI's code, and anything else in response.failed was
  // provider_refused: an OpenAI-compatible server's overflow in its words (or Baton's own response.failed for a
  // continuation after thread_read refused with such a body, GatewayResponsesOffload.streamError) and a server_error
  // failed the run refused, unlike the same body as a 4xx and an Anthropic stream's error.
  it.live("a failed stream fails the run by its words and code: an overflow without OpenAI's code, a server_error, an error event", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const overflow = "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion)."
        const sse = (events: ReadonlyArray<Record<string, unknown>>) => events.map((e) => `event: ${String(e.type)}\ndata: ${JSON.stringify(e)}\n\n`).join("")
        const streams = [
          sse([{ type: "response.created", response: { id: "resp_a" } }, { type: "response.failed", response: { id: "resp_a", error: { code: "server_error", message: overflow } } }]),
          sse([{ type: "response.created", response: { id: "resp_b" } }, { type: "response.failed", response: { id: "resp_b", error: { code: "server_error", message: "The server had an error while processing your request." } } }]),
          sse([{ type: "response.created", response: { id: "resp_c" } }, { type: "error", code: null, message: overflow }]),
          sse([{ type: "response.created", response: { id: "resp_d" } }, { type: "response.failed", response: { id: "resp_d", error: { code: "invalid_prompt", message: "Invalid prompt: flagged." } } }])
        ]
        upstream.enqueue(...streams.map((body) => ({ status: 200, contentType: "text/event-stream", body })))
        for (const [i, body] of streams.entries()) {
          const answer = yield* raw(responses({ model: "gpt-x", stream: true, input: [user(`hi ${i}`)] }))
          expect(answer.text).toBe(body)
        }
        // Four conversations (no session, different first messages): each thread's one run, by its prompt.
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        const runs = (yield* Effect.forEach(threads, (t) => api.runs.list({ path: { threadId: t.id }, urlParams: {} }))).flatMap((p) => p.runs)
        expect(Object.fromEntries(runs.map((r) => [r.prompt, [r.status, r.failureCode]]))).toEqual({
          "hi 0": ["failed", "overflow"],
          "hi 1": ["failed", "provider_unavailable"],
          "hi 2": ["failed", "overflow"],
          "hi 3": ["failed", "provider_refused"]
        })
      })
    ))

  it.live("passes a whole (non-streamed) answer and /v1/responses/compact back unchanged, recording both", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const whole = JSON.stringify({
          id: "resp_whole",
          object: "response",
          status: "completed",
          output: [{ type: "message", id: "msg_whole", role: "assistant", status: "completed", content: [{ type: "output_text", text: "whole answer", annotations: [] }] }],
          usage: { input_tokens: 7, input_tokens_details: { cached_tokens: 0 }, output_tokens: 3, total_tokens: 10 }
        })
        upstream.enqueue({ status: 200, contentType: "application/json", body: whole })
        const session = { authorization: `Bearer ${adminToken}`, "thread-id": "thread-w" }
        const answer = yield* raw(responses({ model: "gpt-x", input: [user("hello")] }, session))
        expect(answer.status).toBe(200)
        expect(answer.text).toBe(whole)

        const compacted = JSON.stringify({
          id: "resp_compact",
          object: "response.compaction",
          output: [user("hello"), { type: "compaction", id: "cmp_1", encrypted_content: "ENC" }],
          usage: { input_tokens: 20, input_tokens_details: { cached_tokens: 0 }, output_tokens: 4, total_tokens: 24 }
        })
        upstream.enqueue({ status: 200, contentType: "application/json", body: compacted })
        const compactBody = { model: "gpt-x", input: [user("hello"), assistant("whole answer", "msg_whole")], instructions: null }
        const compact = yield* raw(responses(compactBody, session, "/v1/responses/compact"))
        expect(compact.status).toBe(200)
        expect(compact.text).toBe(compacted)
        expect(upstream.requests.map((r) => r.url)).toEqual(["/v1/responses", "/v1/responses/compact"])
        expect(upstream.requests[1]!.body).toBe(JSON.stringify(compactBody))

        const { items, runs } = yield* onlyThread
        expect(items.map((i) => [i.kind, i.text, i.messageId])).toEqual([
          ["user_message", "hello", "user@0.0"],
          ["assistant_message", "whole answer", "msg_whole"],
          // The compaction's output: the history Codex goes on with.
          ["user_message", "hello", "user@reply2.2"],
          ["assistant_message", "[compaction]", "cmp_1"]
        ])
        expect(runs.map((r) => r.status)).toEqual(["completed", "completed"])
      })
    ))

  it.live("stores every input item of a Codex session once across tool rounds; Codex's compaction is recorded as a divergence and the new baseline", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const headers = { authorization: `Bearer ${adminToken}`, "session-id": "thread-c", "thread-id": "thread-c" }
        const send = (input: ReadonlyArray<unknown>, reply: ModelApi.Reply) =>
          Effect.gen(function*() {
            upstream.enqueue(reply)
            const response = yield* raw(responses({ model: "gpt-x", stream: true, input, prompt_cache_key: "thread-c" }, headers))
            expect(response.status).toBe(200)
            expect(response.text).toBe(reply.body)
          })
        const start = [developer("You are Codex."), user("<environment_context/>", "msg_env"), user("count the files", "msg_prompt")]
        const round1 = [call("call_1", "ls"), output("call_1", "a\nb")]
        const round2 = [call("call_2", "wc -l a"), output("call_2", "1 a")]
        yield* send(start, ModelApi.answer("openai-responses", "", usage, [{ id: "call_1", name: "exec_command", arguments: JSON.stringify({ cmd: "ls" }) }]))
        yield* send([...start, ...round1], ModelApi.answer("openai-responses", "", usage, [{ id: "call_2", name: "exec_command", arguments: JSON.stringify({ cmd: "wc -l a" }) }]))
        // Codex's remote compaction (v2): the history with a compaction trigger; the upstream answers a compaction item.
        const compaction = [
          { type: "response.output_item.done", output_index: 0, item: { type: "compaction", id: "cmp_1", encrypted_content: "ENC" } },
          { type: "response.completed", response: { id: "resp_c", usage: { input_tokens: 300, input_tokens_details: { cached_tokens: 0 }, output_tokens: 20 } } }
        ].map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join("")
        yield* send([...start, ...round1, ...round2, { type: "compaction_trigger" }], { status: 200, contentType: "text/event-stream", body: compaction })
        // Codex goes on from the rebuilt history (its start with new ids, the compaction item): a divergence.
        const rebuilt = [developer("You are Codex."), user("<environment_context/>", "msg_env2"), user("count the files", "msg_prompt2"), { type: "compaction", id: "cmp_1", encrypted_content: "ENC" }]
        yield* send(rebuilt, ModelApi.answer("openai-responses", "There are 2 files.", usage))

        const { items, runs, threadId } = yield* onlyThread
        expect(items.map((i) => [i.kind, i.text])).toEqual([
          ["user_message", "You are Codex."],
          ["user_message", "<environment_context/>"],
          ["user_message", "count the files"],
          ["tool_call", "{\"cmd\":\"ls\"}"],
          ["tool_result", "a\nb"],
          ["tool_call", "{\"cmd\":\"wc -l a\"}"],
          ["tool_result", "1 a"],
          ["user_message", "[compaction_trigger]"],
          ["assistant_message", "[compaction]"],
          ["assistant_message", "[compaction]"],
          ["assistant_message", "There are 2 files."]
        ])
        expect(items.filter((i) => i.kind === "tool_result").map((i) => [i.toolCallId, i.toolName])).toEqual([["call_1", "exec_command"], ["call_2", "exec_command"]])
        expect(runs.map((r) => [r.status, r.prompt])).toEqual([["completed", "count the files"], ["completed", ""], ["completed", ""], ["completed", ""]])
        const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
        // The rebuilt history shares its start (ids aside) with the stored one: 3 items shared of the 9 stored.
        expect(events.filter((e) => e.type === "gateway.diverged").map((e) => e.payload)).toEqual([
          { runId: runs[3]!.id, sharedMessages: 3, storedMessages: 9, requestMessages: 4 }
        ])
      })
    ))
})
