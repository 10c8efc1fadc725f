/**
 * A switch to an Anthropic upstream (a Chat Completions or a Responses agent) whose stream restarts its answer: a
 * second `message_start` of another message (the recorded `spliced-message-start`: a thinking block, a call cut
 * mid-arguments, then the whole answer again). Baton's adapter keeps the second message only (Anthropic's SDK's MessageStream rejects the restart);
 * the agent had the first attempt's call already, cut mid-arguments, so its answer ends with the protocol's error (it
 * retries) and the run fails, instead of one answer holding both attempts' calls (`{"value":"Spark` among them, which
 * the agent would run). A restart before anything reached the agent goes on with the second message alone (the first
 * attempt's cut `thread_read` call was answered and the answer continued upstream); a repeated `message_start` of the
 * same message (`duplicate-message-start`) changes nothing.
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, client, raw } from "./helpers.js"
import { recordedStream } from "./support/AnthropicFixtures.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

const sse = (events: ReadonlyArray<Record<string, unknown>>) => events.map((e) => `event: ${String(e.type)}\ndata: ${JSON.stringify(e)}\n\n`).join("")
const streamed = (body: string): ModelApi.Reply => ({ status: 200, contentType: "text/event-stream", body })

const agents = [
  {
    name: "Chat Completions",
    path: "/v1/chat/completions",
    body: { model: "m-x", stream: true, tools: [{ type: "function", function: { name: "test-tool", parameters: { type: "object" } } }], messages: [{ role: "user", content: "hi" }] }
  },
  {
    name: "Responses",
    path: "/v1/responses",
    body: { model: "m-x", stream: true, tools: [{ type: "function", name: "test-tool", parameters: { type: "object" } }], input: "hi" }
  }
]

/** A gateway routing `m-*` to one Anthropic upstream; `test` gets the agent's call. */
const withGateway = <A, E, R>(test: (upstream: ModelApi.ModelApi, send: (path: string, body: unknown) => ReturnType<typeof raw>) => Effect.Effect<A, E, R>) =>
  Effect.scoped(Effect.gen(function*() {
    const upstream = yield* ModelApi.start
    const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
      gateway: { routes: [{ model: "m-*", provider: "anthropic" }] }
    })
    const send = (path: string, body: unknown) =>
      raw(HttpClientRequest.post(path).pipe(
        HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}` }),
        HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
      ))
    return yield* test(upstream, send).pipe(Effect.provide(serveSettings(settings)))
  }))

/** The runs (status, failure code) and items (kind, text) of the only thread. */
const record = Effect.gen(function*() {
  const api = yield* client()
  const threads = (yield* api.threads.list({ urlParams: {} })).threads
  expect(threads).toHaveLength(1)
  const threadId = threads[0]!.id
  const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs.map((r) => [r.status, r.failureCode])
  const items = (yield* api.items.list({ path: { threadId }, urlParams: {} })).items.map((i) => [i.kind, i.text])
  return { runs, items }
})

describe("GatewaySwitch: an Anthropic stream that restarts its answer", () => {
  for (const agent of agents) {
    it.live(`${agent.name}: a restart after a call reached the agent ends its answer with an error, never both attempts' calls; the run fails`, () =>
      withGateway((upstream, send) =>
        Effect.gen(function*() {
          upstream.enqueue(streamed(recordedStream("spliced-message-start.chunks.txt")))
          const answer = yield* send(agent.path, agent.body)
          expect(answer.status).toBe(200)
          // Before: the first attempt's call, cut at `{"value":"Spark`, and the second's, in one answer that ended well.
          expect(answer.text).toContain("the upstream restarted its answer (another message_start) after part of it was sent")
          expect(answer.text).not.toContain("toolu_second")
          expect(answer.text).not.toContain("[DONE]")
          expect(answer.text).not.toContain("response.completed")
          const { runs } = yield* record
          expect(runs).toEqual([["failed", "provider_unavailable"]])
        })
      ))

    it.live(`${agent.name}: a restart before anything reached the agent goes on with the second message alone; a repeated message_start changes nothing`, () =>
      withGateway((upstream, send) =>
        Effect.gen(function*() {
          const usage = { input_tokens: 17, output_tokens: 1 }
          // The first attempt: a thinking block (never shown to these agents) and a call of Baton's own thread_read, cut.
          upstream.enqueue(streamed(sse([
            { type: "message_start", message: { id: "msg_first", type: "message", role: "assistant", content: [], model: "m", usage } },
            { type: "content_block_start", index: 0, content_block: { type: "thinking", thinking: "" } },
            { type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "first try" } },
            { type: "content_block_stop", index: 0 },
            { type: "content_block_start", index: 1, content_block: { type: "tool_use", id: "toolu_read", name: "thread_read", input: {} } },
            { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: "{\"refs\": \"#1" } },
            { type: "message_start", message: { id: "msg_second", type: "message", role: "assistant", content: [], model: "m", usage } },
            { type: "message_start", message: { id: "msg_second", type: "message", role: "assistant", content: [], model: "m", usage } },
            { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
            { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Hello, World!" } },
            { type: "content_block_stop", index: 0 },
            { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 5 } },
            { type: "message_stop" }
          ])))
          const answer = yield* send(agent.path, agent.body)
          expect(answer.status).toBe(200)
          expect(answer.text).toContain("Hello, World!")
          expect(answer.text).not.toContain("restarted")
          // Before: the first attempt's thread_read call stayed, was answered, and the answer "continued" upstream.
          expect(upstream.requests).toHaveLength(1)
          const { items, runs } = yield* record
          expect(runs).toEqual([["completed", null]])
          expect(items).toEqual([["user_message", "hi"], ["assistant_message", "Hello, World!"]])
        })
      ))
  }
})
