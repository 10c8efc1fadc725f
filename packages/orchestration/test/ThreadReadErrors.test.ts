/**
 * A failed `thread_read` (a ref that matches nothing, arguments that are not its schema) goes back to the model as a
 * failed tool result, the way each wire marks one: Anthropic's `tool_result` with `is_error: true`, OpenAI Responses'
 * `function_call_output` starting with `Error: `; the recorded `tool_result` item has `isError`. A read that finds its
 * item is no error. Found by the issue-9 review: the port's local-tool answer had no error flag, so a failed read was
 * sent as if it had succeeded.
 */
import type { ProviderInstance } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adapterFor, countTokensReply, frame, httpLayer, json, loopback, type Received, sqliteFile, sse } from "../../providers/test/support/Loopback.js"
import { answer, toolCalls } from "./support/ModelLoopback.js"

const counter = TokenCounter.make()

/** A Responses answer calling `thread_read` with `args` (call id `call_<n>`). */
const responsesCall = (n: number, args: object) =>
  json(200, JSON.stringify({
    id: `resp_${n}`,
    status: "completed",
    output: [{ type: "function_call", id: `fc_${n}`, call_id: `call_${n}`, name: "thread_read", arguments: JSON.stringify(args), status: "completed" }],
    usage: { input_tokens: 30, output_tokens: 10, input_tokens_details: { cached_tokens: 0 } }
  }))
const responsesAnswer = (text: string) =>
  sse(frame("openai-responses", [
    JSON.stringify({ type: "response.output_item.done", output_index: 0, item: { type: "message", id: "msg_a", role: "assistant", status: "completed", content: [{ type: "output_text", text }] } }),
    JSON.stringify({ type: "response.completed", response: { id: "resp_end", status: "completed", usage: { input_tokens: 40, output_tokens: 5, input_tokens_details: { cached_tokens: 0 } } } })
  ]))

// it.live: the adapter runs on the real clock over loopback HTTP.
describe("a failed thread_read is sent as a failed tool result", () => {
  it.live("Anthropic: an unknown ref and bad arguments go back with is_error: true and are recorded isError; a read that finds its item has no is_error", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const model = yield* adapterFor("anthropic-messages", loop, file, {}, { instance: "anthropic" as ProviderInstance })
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const t = yield* o.create("anthropic")
        const turnReplies = [
          answer("first answer"),
          toolCalls([["toolu_unknown", "thread_read", { refs: "#999" }], ["toolu_bad", "thread_read", { refs: 7 }], ["toolu_good", "thread_read", { refs: "#1" }]]),
          answer("done")
        ]
        const reply = (request: Received) =>
          request.url.endsWith("/count_tokens") ? countTokensReply((text) => counter.count(text))(request) : turnReplies.shift()!
        loop.enqueue(...Array.from({ length: 8 }, () => reply))
        expect((yield* o.send(t, "hello")).status).toBe("completed")
        const run = yield* o.send(t, "what did I say first?")
        expect(run.status).toBe("completed")
        const turns = loop.requests.filter((r) => r.url === "/v1/messages")
        const messages = JSON.parse(turns.at(-1)!.body).messages as ReadonlyArray<{ role: string; content: unknown }>
        const results = (messages.at(-1)!.content as ReadonlyArray<Record<string, unknown>>).map((c) => [c["tool_use_id"], c["is_error"] ?? false])
        expect(results).toEqual([["toolu_unknown", true], ["toolu_bad", true], ["toolu_good", false]])
        const recorded = (yield* o.store.listItems(t)).filter((i) => i.kind === "tool_result").map((i) => [i.toolCallId, i.isError, i.text.split("\n")[0]])
        expect(recorded).toEqual([
          ["toolu_unknown", true, "thread_read: no item of this conversation matches #999"],
          ["toolu_bad", true, `thread_read: the arguments are not {"refs": "...", "offset"?: n, "limit"?: n}`],
          ["toolu_good", false, expect.stringContaining("#1")]
        ])
      }).pipe(Effect.provide(Harness.makeLayer([model], counter, file, {})))
    }).pipe(Effect.provide(httpLayer), Effect.scoped), { timeout: 60_000 })

  it.live("OpenAI Responses: an unknown ref goes back as function_call_output starting with \"Error: \"", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const model = yield* adapterFor("openai-responses", loop, file, {}, { instance: "openai" as ProviderInstance })
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const t = yield* o.create("openai")
        loop.enqueue(responsesCall(1, { refs: "#999" }), responsesAnswer("done"))
        expect((yield* o.send(t, "hello")).status).toBe("completed")
        const input = JSON.parse(loop.requests[1]!.body).input as ReadonlyArray<Record<string, unknown>>
        expect(input.at(-1)).toEqual({ type: "function_call_output", call_id: "call_1", output: "Error: thread_read: no item of this conversation matches #999" })
      }).pipe(Effect.provide(Harness.makeLayer([model], counter, file, {})))
    }).pipe(Effect.provide(httpLayer), Effect.scoped), { timeout: 60_000 })
})
