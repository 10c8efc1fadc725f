/**
 * `thread_read` beside the agent's own calls on a provider switch (issue 14, docs/gateway.md "`thread_read` beside the
 * agent's own calls"): the switched upstream's answer calls `thread_read` and a tool of the agent's. The agent must
 * answer its call, so the gateway does not continue: it answers the read from the thread, the agent gets the answer
 * without the read (whole, and streamed with its blocks or items numbered on without gaps), the thread records what
 * the agent got, and the expansion is recorded: the agent's next request goes upstream with the read call beside its
 * own call and the gateway's answer beside the agent's result, and the request after extends that one. On every
 * switch (`/v1/messages` to Chat Completions and to Responses, `/v1/responses` and `/v1/chat/completions` to
 * Anthropic), streamed and whole (before: the read was dropped unanswered, and the next request went out without it).
 * And after a hidden round in the same streamed answer (the first hop reads alone, the gateway continues, the second
 * reads beside the agent's call): the next request carries both rounds, each read answered (before: the second read
 * was dropped unanswered).
 */
import type { Item } from "@baton/contracts"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as GatewayAnthropic from "../src/GatewayAnthropic.js"
import * as GatewayChat from "../src/GatewayChat.js"
import * as GatewayResponses from "../src/GatewayResponses.js"
import { adminToken, client, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

const usage = { input: 900, cacheWrite: 0, cacheRead: 300, output: 40 }
const words = (seed: number, n: number) => Array.from({ length: n }, (_, i) => `w${(seed * 7919 + i * 104_729) % 100_003}`).join(" ")
const output = `hello-output ${words(9, 50)}`

type Json = Record<string, unknown>

/**
 * A gateway with `gpt-*` on a Chat Completions loopback upstream, `claude-*` on an Anthropic one and `o4-*` on a
 * Responses one.
 */
const withGateway = <A, E, R>(test: (chat: ModelApi.ModelApi, anthropic: ModelApi.ModelApi, openai: ModelApi.ModelApi) => Effect.Effect<A, E, R>) =>
  Effect.scoped(Effect.gen(function*() {
    const chat = yield* ModelApi.start
    const anthropic = yield* ModelApi.start
    const openai = yield* ModelApi.start
    const window = { contextWindow: 32_000, autoCompactThreshold: null, maxOutputTokens: 4_096 }
    const settings = yield* settingsFor(
      [
        instance("chat", "openai-chat", chat, window),
        instance("anthropic", "anthropic-messages", anthropic, window),
        instance("openai", "openai-responses", openai, window)
      ],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: [{ model: "gpt-*", provider: "chat" }, { model: "claude-*", provider: "anthropic" }, { model: "o4-*", provider: "openai" }] } }
    )
    return yield* test(chat, anthropic, openai).pipe(Effect.provide(serveSettings(settings)))
  }))

/** A whole Responses answer: `text` and `calls` (`function_call` items). */
const responsesWhole = (text: string, calls: ReadonlyArray<ModelApi.Call>): ModelApi.Reply => ({
  status: 200,
  contentType: "application/json",
  body: JSON.stringify({
    id: "resp_w",
    object: "response",
    status: "completed",
    output: [
      ...(text === "" ? [] : [{ type: "message", id: "msg_w", role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] }]),
      ...calls.map((c, i) => ({ type: "function_call", id: `fc_w${i}`, call_id: c.id, name: c.name, arguments: c.arguments, status: "completed" }))
    ],
    usage: { input_tokens: 1_200, input_tokens_details: { cached_tokens: 300 }, output_tokens: 40, total_tokens: 1_240 }
  })
})

/** The only thread's items. */
const onlyItems = Effect.gen(function*() {
  const api = yield* client()
  const threads = (yield* api.threads.list({ urlParams: {} })).threads
  expect(threads).toHaveLength(1)
  const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId: threads[0]!.id }, urlParams: { limit: 500 } })).items
  return items
})

/** A whole Chat Completions answer: `text` and `calls`. */
const chatWhole = (text: string, calls: ReadonlyArray<ModelApi.Call>): ModelApi.Reply => ({
  status: 200,
  contentType: "application/json",
  body: JSON.stringify({
    id: "chatcmpl-w",
    choices: [{
      index: 0,
      message: { role: "assistant", content: text, ...(calls.length === 0 ? {} : { tool_calls: calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })) }) },
      finish_reason: calls.length === 0 ? "stop" : "tool_calls"
    }],
    usage: { prompt_tokens: 1_200, completion_tokens: 40, prompt_tokens_details: { cached_tokens: 300 } }
  })
})

/** A whole Anthropic answer: `text` and `calls` (`tool_use` blocks). */
const anthropicWhole = (text: string, calls: ReadonlyArray<ModelApi.Call>): ModelApi.Reply => ({
  status: 200,
  contentType: "application/json",
  body: JSON.stringify({
    id: "msg_w",
    type: "message",
    role: "assistant",
    model: "m",
    content: [...(text === "" ? [] : [{ type: "text", text }]), ...calls.map((c) => ({ type: "tool_use", id: c.id, name: c.name, input: JSON.parse(c.arguments) }))],
    stop_reason: calls.length === 0 ? "end_turn" : "tool_use",
    stop_sequence: null,
    usage: { input_tokens: 900, cache_creation_input_tokens: 0, cache_read_input_tokens: 300, output_tokens: 40 }
  })
})

/** The `content_block_start` indices of an Anthropic SSE text, in order. */
const blockStarts = (text: string) =>
  [...text.matchAll(/^data: (.*)$/gm)].map((m) => JSON.parse(m[1]!) as Json).filter((e) => e.type === "content_block_start").map((e) => e.index)

describe("Gateway, thread_read beside the agent's own calls on a provider switch", () => {
  for (const streamed of [true, false]) {
    it.live(`/v1/messages to openai-chat (${streamed ? "streamed" : "whole"}): the read answered by the gateway, the agent gets its Bash call alone, the next request carries the read and its answer`, () =>
      withGateway((chat) =>
        Effect.gen(function*() {
          const system = [{ type: "text", text: "You are Claude Code." }]
          const tools = [{ name: "Bash", description: "Run a command", input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } }]
          const send = (history: ReadonlyArray<unknown>) =>
            raw(HttpClientRequest.post("/v1/messages?beta=true").pipe(
              HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "sess-beside", "user-agent": "claude-cli/2.1.332 (external, sdk-cli)" }),
              HttpClientRequest.bodyText(JSON.stringify({ model: "gpt-5", max_tokens: 1_000, stream: streamed, system, tools, messages: history }), "application/json")
            ))
          const history: Array<unknown> = [
            { role: "user", content: "run it" },
            { role: "assistant", content: [{ type: "tool_use", id: "toolu_a", name: "Bash", input: { command: "echo hello" } }] },
            { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_a", content: output }] }
          ]
          const read = { id: "call_r", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_a" }) }
          const bash = { id: "call_b", name: "Bash", arguments: JSON.stringify({ command: "ls" }) }
          chat.enqueue(streamed ? ModelApi.answer("openai-chat", "Let me check.", usage, [read, bash]) : chatWhole("Let me check.", [read, bash]))
          const first = yield* send(history)
          expect(first.status).toBe(200)
          expect(first.text).not.toContain("thread_read")
          let received: Json
          if (streamed) {
            // The read's block is not sent; the Bash call's block is numbered right after the text's.
            expect(blockStarts(first.text)).toEqual([0, 1])
            expect(first.text).toContain("\"stop_reason\":\"tool_use\"")
            const a = GatewayAnthropic.replyAssembler()
            a.push(new TextEncoder().encode(first.text))
            const outcome = a.outcome()
            if (outcome._tag !== "completed") throw new Error("the answer did not complete")
            received = outcome.reply.messages[0]!.message as Json
          } else {
            expect(first.body).toMatchObject({ stop_reason: "tool_use" })
            received = { role: "assistant", content: (first.body as Json).content }
          }
          expect(received.content).toEqual([{ type: "text", text: "Let me check." }, { type: "tool_use", id: "call_b", name: "Bash", input: { command: "ls" } }])

          // The agent answers its call: the upstream gets the read call beside it and the gateway's answer beside the agent's.
          chat.enqueue(streamed ? ModelApi.answer("openai-chat", "Done.", usage) : chatWhole("Done.", []))
          const second = [...history, { role: "assistant", content: received.content }, { role: "user", content: [{ type: "tool_result", tool_use_id: "call_b", content: "a.txt" }] }]
          expect((yield* send(second)).status).toBe(200)
          const sent = (JSON.parse(chat.requests[1]!.body) as { messages: ReadonlyArray<Json> }).messages
          expect(sent.slice(-3, -2)).toEqual([{
            role: "assistant",
            content: "Let me check.",
            tool_calls: [
              { id: "call_r", type: "function", function: { name: "thread_read", arguments: read.arguments } },
              { id: "call_b", type: "function", function: { name: "Bash", arguments: bash.arguments } }
            ]
          }])
          expect(sent.at(-2)).toMatchObject({ role: "tool", tool_call_id: "call_r" })
          expect(String(sent.at(-2)!.content)).toContain(output)
          expect(sent.at(-1)).toEqual({ role: "tool", tool_call_id: "call_b", content: "a.txt" })

          // The request after extends it: the same messages first.
          chat.enqueue(streamed ? ModelApi.answer("openai-chat", "Bye.", usage) : chatWhole("Bye.", []))
          expect((yield* send([...second, { role: "assistant", content: [{ type: "text", text: "Done." }] }, { role: "user", content: "thanks" }])).status).toBe(200)
          const third = (JSON.parse(chat.requests[2]!.body) as { messages: ReadonlyArray<Json> }).messages
          expect(third.slice(0, sent.length)).toEqual(sent)

          // The thread holds what the agent got: no thread_read call, the Bash call once.
          const items = yield* onlyItems
          expect(items.filter((i) => i.toolName === "thread_read" || i.text.includes("thread_read"))).toEqual([])
          expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === "call_b")).toHaveLength(1)
        })
      ), { timeout: 60_000 })

    it.live(`/v1/responses to anthropic-messages (${streamed ? "streamed" : "whole"}): the read answered by the gateway, the agent gets its exec_command call alone, the next request carries the read and its answer`, () =>
      withGateway((_chat, anthropic) =>
        Effect.gen(function*() {
          const tools = [{ type: "function", name: "exec_command", description: "Run a command", strict: false, parameters: { type: "object", properties: { cmd: { type: "string" } }, required: ["cmd"] } }]
          const send = (input: ReadonlyArray<unknown>) =>
            raw(HttpClientRequest.post("/v1/responses").pipe(
              HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "session-id": "sess-beside", "thread-id": "sess-beside", "user-agent": "codex_exec/0.171.0" }),
              HttpClientRequest.bodyText(JSON.stringify({ model: "claude-sonnet-4-5", stream: streamed, tools, input, store: false }), "application/json")
            ))
          const input: Array<unknown> = [
            { type: "message", role: "developer", content: [{ type: "input_text", text: "You are Codex." }] },
            { type: "message", role: "user", content: [{ type: "input_text", text: "run it" }] },
            { type: "function_call", id: "fc_a", call_id: "call_a", name: "exec_command", arguments: JSON.stringify({ cmd: "echo hello" }) },
            { type: "function_call_output", call_id: "call_a", output }
          ]
          const read = { id: "toolu_r", name: "thread_read", arguments: JSON.stringify({ refs: "tool:call_a" }) }
          const exec = { id: "toolu_b", name: "exec_command", arguments: JSON.stringify({ cmd: "ls" }) }
          anthropic.enqueue(streamed ? ModelApi.answer("anthropic-messages", "Let me check.", usage, [read, exec]) : anthropicWhole("Let me check.", [read, exec]))
          const first = yield* send(input)
          expect(first.status).toBe(200)
          expect(first.text).not.toContain("thread_read")
          let received: ReadonlyArray<Json>
          if (streamed) {
            // The agent's items numbered on without a gap where the read was.
            const indices = [...first.text.matchAll(/^data: (.*)$/gm)].map((m) => JSON.parse(m[1]!) as Json)
              .filter((e) => e.type === "response.output_item.done").map((e) => e.output_index)
            expect(indices).toEqual([0, 1])
            const a = GatewayResponses.replyAssembler()
            a.push(new TextEncoder().encode(first.text))
            const outcome = a.outcome()
            if (outcome._tag !== "completed") throw new Error("the answer did not complete")
            received = outcome.reply.messages.map((m) => m.message as Json)
          } else {
            received = (first.body as { output: ReadonlyArray<Json> }).output
          }
          expect(received.map((i) => [i.type, i.name ?? null])).toEqual([["message", null], ["function_call", "exec_command"]])
          const callId = String(received[1]!.call_id)

          anthropic.enqueue(streamed ? ModelApi.answer("anthropic-messages", "Done.", usage) : anthropicWhole("Done.", []))
          const second = [...input, ...received, { type: "function_call_output", call_id: callId, output: "a.txt" }]
          expect((yield* send(second)).status).toBe(200)
          const sent = (JSON.parse(anthropic.requests[1]!.body) as { messages: ReadonlyArray<{ role: string; content: ReadonlyArray<Json> }> }).messages
          const withCalls = sent.at(-2)!
          expect(withCalls.role).toBe("assistant")
          expect(withCalls.content.filter((b) => b.type === "tool_use").map((b) => [b.id, b.name, b.input])).toEqual([
            ["toolu_r", "thread_read", { refs: "tool:call_a" }],
            [callId, "exec_command", { cmd: "ls" }]
          ])
          // One user message answers both calls (Anthropic requires it): the gateway's answer, then the agent's result.
          const results = sent.at(-1)!
          expect(results.role).toBe("user")
          const blocks = results.content.filter((b) => b.type === "tool_result")
          expect(blocks.map((b) => b.tool_use_id)).toEqual(["toolu_r", callId])
          expect(JSON.stringify(blocks[0]!.content)).toContain(output.slice(0, 40))
          expect(JSON.stringify(blocks[1]!.content)).toContain("a.txt")

          // The request after extends it (breakpoints aside: the switch moves its prompt-cache breakpoint to the last block).
          anthropic.enqueue(streamed ? ModelApi.answer("anthropic-messages", "Bye.", usage) : anthropicWhole("Bye.", []))
          const done = { type: "message", role: "assistant", content: [{ type: "output_text", text: "Done.", annotations: [] }] }
          expect((yield* send([...second, done, { type: "message", role: "user", content: [{ type: "input_text", text: "thanks" }] }])).status).toBe(200)
          const third = (JSON.parse(anthropic.requests[2]!.body) as { messages: ReadonlyArray<unknown> }).messages
          const plain = (v: unknown) => JSON.parse(JSON.stringify(v, (k, x) => (k === "cache_control" ? undefined : x))) as unknown
          expect(plain(third.slice(0, sent.length))).toEqual(plain(sent))

          const items = yield* onlyItems
          expect(items.filter((i) => i.toolName === "thread_read" || i.text.includes("thread_read"))).toEqual([])
          expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === callId)).toHaveLength(1)
        })
      ), { timeout: 60_000 })

    it.live(`/v1/messages to openai-responses (${streamed ? "streamed" : "whole"}): the next request's input carries the read call beside the Bash call and the gateway's output beside the agent's`, () =>
      withGateway((_chat, _anthropic, openai) =>
        Effect.gen(function*() {
          const tools = [{ name: "Bash", description: "Run a command", input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } }]
          const send = (history: ReadonlyArray<unknown>) =>
            raw(HttpClientRequest.post("/v1/messages?beta=true").pipe(
              HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "sess-beside-r", "user-agent": "claude-cli/2.1.332 (external, sdk-cli)" }),
              HttpClientRequest.bodyText(JSON.stringify({ model: "o4-mini", max_tokens: 1_000, stream: streamed, system: "You are Claude Code.", tools, messages: history }), "application/json")
            ))
          const history: Array<unknown> = [
            { role: "user", content: "run it" },
            { role: "assistant", content: [{ type: "tool_use", id: "toolu_a", name: "Bash", input: { command: "echo hello" } }] },
            { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_a", content: output }] }
          ]
          const read = { id: "call_r", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_a" }) }
          const bash = { id: "call_b", name: "Bash", arguments: JSON.stringify({ command: "ls" }) }
          openai.enqueue(streamed ? ModelApi.answer("openai-responses", "Let me check.", usage, [read, bash]) : responsesWhole("Let me check.", [read, bash]))
          const first = yield* send(history)
          expect(first.status).toBe(200)
          expect(first.text).not.toContain("thread_read")
          let content: unknown
          if (streamed) {
            expect(blockStarts(first.text)).toEqual([0, 1])
            const a = GatewayAnthropic.replyAssembler()
            a.push(new TextEncoder().encode(first.text))
            const outcome = a.outcome()
            if (outcome._tag !== "completed") throw new Error("the answer did not complete")
            content = (outcome.reply.messages[0]!.message as Json).content
          } else {
            content = (first.body as Json).content
          }
          expect(content).toEqual([{ type: "text", text: "Let me check." }, { type: "tool_use", id: "call_b", name: "Bash", input: { command: "ls" } }])

          openai.enqueue(streamed ? ModelApi.answer("openai-responses", "Done.", usage) : responsesWhole("Done.", []))
          expect((yield* send([...history, { role: "assistant", content }, { role: "user", content: [{ type: "tool_result", tool_use_id: "call_b", content: "a.txt" }] }])).status).toBe(200)
          const input = (JSON.parse(openai.requests[1]!.body) as { input: ReadonlyArray<Json> }).input
          expect(input.filter((i) => i.type === "function_call").map((i) => [i.call_id, i.name])).toEqual([["toolu_a", "Bash"], ["call_r", "thread_read"], ["call_b", "Bash"]])
          const outputs = input.filter((i) => i.type === "function_call_output")
          expect(outputs.map((i) => i.call_id)).toEqual(["toolu_a", "call_r", "call_b"])
          expect(JSON.stringify(outputs[1]!.output)).toContain(output.slice(0, 40))
          expect(JSON.stringify(outputs[2]!.output)).toContain("a.txt")
          const items = yield* onlyItems
          expect(items.filter((i) => i.toolName === "thread_read" || i.text.includes("thread_read"))).toEqual([])
        })
      ), { timeout: 60_000 })

    it.live(`/v1/chat/completions to anthropic-messages (${streamed ? "streamed" : "whole"}): the next request carries the read call beside the agent's and both results in one user message`, () =>
      withGateway((_chat, anthropic) =>
        Effect.gen(function*() {
          const tools = [{ type: "function", function: { name: "bash", description: "Run a command", parameters: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } } }]
          const send = (messages: ReadonlyArray<unknown>) =>
            raw(HttpClientRequest.post("/v1/chat/completions").pipe(
              HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "x-session-id": "sess-beside-c" }),
              HttpClientRequest.bodyText(JSON.stringify({ model: "claude-sonnet-4-5", stream: streamed, tools, messages }), "application/json")
            ))
          const history: Array<unknown> = [
            { role: "system", content: "You are pi." },
            { role: "user", content: "run it" },
            { role: "assistant", content: null, tool_calls: [{ id: "call_a", type: "function", function: { name: "bash", arguments: JSON.stringify({ command: "echo hello" }) } }] },
            { role: "tool", tool_call_id: "call_a", content: output }
          ]
          const read = { id: "toolu_r", name: "thread_read", arguments: JSON.stringify({ refs: "tool:call_a" }) }
          const bash = { id: "toolu_b", name: "bash", arguments: JSON.stringify({ command: "ls" }) }
          anthropic.enqueue(streamed ? ModelApi.answer("anthropic-messages", "Let me check.", usage, [read, bash]) : anthropicWhole("Let me check.", [read, bash]))
          const first = yield* send(history)
          expect(first.status).toBe(200)
          expect(first.text).not.toContain("thread_read")
          let message: Json
          if (streamed) {
            const a = GatewayChat.replyAssembler()
            a.push(new TextEncoder().encode(first.text))
            const outcome = a.outcome()
            if (outcome._tag !== "completed") throw new Error("the answer did not complete")
            message = outcome.reply.messages[0]!.message as Json
          } else {
            message = ((first.body as { choices: ReadonlyArray<{ message: Json }> }).choices[0]!).message
          }
          const calls = message.tool_calls as ReadonlyArray<{ id: string; function: { name: string } }>
          expect(calls.map((c) => [c.id, c.function.name])).toEqual([["toolu_b", "bash"]])

          anthropic.enqueue(streamed ? ModelApi.answer("anthropic-messages", "Done.", usage) : anthropicWhole("Done.", []))
          expect((yield* send([...history, { role: "assistant", content: message.content ?? null, tool_calls: message.tool_calls }, { role: "tool", tool_call_id: "toolu_b", content: "a.txt" }])).status).toBe(200)
          const sent = (JSON.parse(anthropic.requests[1]!.body) as { messages: ReadonlyArray<{ role: string; content: ReadonlyArray<Json> }> }).messages
          expect(sent.at(-2)!.content.filter((b) => b.type === "tool_use").map((b) => [b.id, b.name])).toEqual([["toolu_r", "thread_read"], ["toolu_b", "bash"]])
          const results = sent.at(-1)!.content.filter((b) => b.type === "tool_result")
          expect(results.map((b) => b.tool_use_id)).toEqual(["toolu_r", "toolu_b"])
          expect(JSON.stringify(results[0]!.content)).toContain(output.slice(0, 40))
          const items = yield* onlyItems
          expect(items.filter((i) => i.toolName === "thread_read" || i.text.includes("thread_read"))).toEqual([])
        })
      ), { timeout: 60_000 })
  }

  for (const streamed of [true, false]) {
  it.live(`/v1/messages to openai-chat (${streamed ? "streamed" : "whole"}): a read whose answer fits beside the request sent but not with the upstream's answer too (its text and calls, which the next request carries) is refused to the model, as on the same-protocol path (review r23)`, () =>
    withGateway((chat) =>
      Effect.gen(function*() {
        // The history near the limit (26,400 tokens: the window 32,000 less 4,000 of output room and 5%): its tool
        // output, then an answer of about 3,000 tokens of text calling thread_read (about 1,800 tokens) beside Bash.
        const big = `hello-output ${words(9, 8_000)}`
        const send = (history: ReadonlyArray<unknown>) =>
          raw(HttpClientRequest.post("/v1/messages?beta=true").pipe(
            HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "sess-beside-w" }),
            HttpClientRequest.bodyText(JSON.stringify({ model: "gpt-5", max_tokens: 4_000, stream: streamed, system: "You are Claude Code.", tools: [{ name: "Bash", input_schema: { type: "object" } }], messages: history }), "application/json")
          ))
        const history = [
          { role: "user", content: "run it" },
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_a", name: "Bash", input: { command: "cat big" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_a", content: big }] }
        ]
        const read = { id: "call_r", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_a", limit: 4_000 }) }
        const bash = { id: "call_b", name: "Bash", arguments: JSON.stringify({ command: "ls" }) }
        chat.enqueue(streamed ? ModelApi.answer("openai-chat", words(3, 1_000), usage, [read, bash]) : chatWhole(words(3, 1_000), [read, bash]))
        const first = yield* send(history)
        expect(first.status).toBe(200)
        chat.enqueue(streamed ? ModelApi.answer("openai-chat", "Done.", usage) : chatWhole("Done.", []))
        let content: unknown = (first.body as Json | undefined)?.content
        if (streamed) {
          const a = GatewayAnthropic.replyAssembler()
          a.push(new TextEncoder().encode(first.text))
          const outcome = a.outcome()
          if (outcome._tag !== "completed") throw new Error("the answer did not complete")
          content = (outcome.reply.messages[0]!.message as Json).content
        }
        expect((yield* send([...history, { role: "assistant", content }, { role: "user", content: [{ type: "tool_result", tool_use_id: "call_b", content: "a.txt" }] }])).status).toBe(200)
        const sent = (JSON.parse(chat.requests[1]!.body) as { messages: ReadonlyArray<Json> }).messages
        const answer = sent.find((m) => m.role === "tool" && m.tool_call_id === "call_r")
        // Before: the answer was counted against the request sent alone, and went out (1,800 tokens over the limit).
        expect(String(answer?.content)).toContain("thread_read: not read")
        expect(String(answer?.content)).not.toContain(big.slice(0, 200))
      })
    ), { timeout: 60_000 })
  }
})

describe("Gateway, thread_read beside the agent's own calls after a hidden round in the same streamed answer on a provider switch", () => {
  it.live("/v1/messages to openai-chat: the first hop reads (hidden, continued), the second reads beside Bash: that read is answered too, and the next request carries both rounds with their answers", () =>
    withGateway((chat) =>
      Effect.gen(function*() {
        const system = [{ type: "text", text: "You are Claude Code." }]
        const tools = [{ name: "Bash", description: "Run a command", input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } }]
        const send = (history: ReadonlyArray<unknown>) =>
          raw(HttpClientRequest.post("/v1/messages?beta=true").pipe(
            HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "sess-beside-hop", "user-agent": "claude-cli/2.1.332 (external, sdk-cli)" }),
            HttpClientRequest.bodyText(JSON.stringify({ model: "gpt-5", max_tokens: 1_000, stream: true, system, tools, messages: history }), "application/json")
          ))
        const other = `other-output ${words(11, 50)}`
        const history: Array<unknown> = [
          { role: "user", content: "run it" },
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_a", name: "Bash", input: { command: "echo hello" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_a", content: output }] },
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_c", name: "Bash", input: { command: "echo other" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_c", content: other }] }
        ]
        const read1 = { id: "call_r1", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_a" }) }
        const read2 = { id: "call_r2", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_c" }) }
        const bash = { id: "call_b", name: "Bash", arguments: JSON.stringify({ command: "ls" }) }
        // The first hop calls thread_read alone (the gateway answers and continues); the continuation calls it beside Bash.
        chat.enqueue(ModelApi.answer("openai-chat", "Let me read.", usage, [read1]), ModelApi.answer("openai-chat", "Now run.", usage, [read2, bash]))
        const first = yield* send(history)
        expect(first.status).toBe(200)
        expect(first.text).not.toContain("thread_read")
        expect(chat.requests).toHaveLength(2)
        const a = GatewayAnthropic.replyAssembler()
        a.push(new TextEncoder().encode(first.text))
        const outcome = a.outcome()
        if (outcome._tag !== "completed") throw new Error("the answer did not complete")
        const received = (outcome.reply.messages[0]!.message as Json).content as ReadonlyArray<Json>
        expect(received.filter((b) => b.type === "tool_use").map((b) => [b.id, b.name])).toEqual([["call_b", "Bash"]])

        // The agent answers its call: the upstream gets the hidden round, then the read beside Bash with the gateway's answer.
        chat.enqueue(ModelApi.answer("openai-chat", "Done.", usage))
        const second = [...history, { role: "assistant", content: received }, { role: "user", content: [{ type: "tool_result", tool_use_id: "call_b", content: "a.txt" }] }]
        expect((yield* send(second)).status).toBe(200)
        const sent = (JSON.parse(chat.requests[2]!.body) as { messages: ReadonlyArray<Json> }).messages
        const tail = sent.slice(-5)
        expect(tail.map((m) => [m.role, m.tool_call_id ?? m.content])).toEqual([
          ["assistant", "Let me read."],
          ["tool", "call_r1"],
          ["assistant", "Now run."],
          ["tool", "call_r2"],
          ["tool", "call_b"]
        ])
        expect(tail[4]!.content).toBe("a.txt")
        expect(tail[0]!.tool_calls).toEqual([{ id: "call_r1", type: "function", function: { name: "thread_read", arguments: read1.arguments } }])
        expect(tail[2]!.tool_calls).toEqual([
          { id: "call_r2", type: "function", function: { name: "thread_read", arguments: read2.arguments } },
          { id: "call_b", type: "function", function: { name: "Bash", arguments: bash.arguments } }
        ])
        // Each read's answer is the output it asked for.
        expect(String(tail[1]!.content)).toContain(output)
        expect(String(tail[3]!.content)).toContain(other)

        // The request after extends it: the same messages first.
        chat.enqueue(ModelApi.answer("openai-chat", "Bye.", usage))
        expect((yield* send([...second, { role: "assistant", content: [{ type: "text", text: "Done." }] }, { role: "user", content: "thanks" }])).status).toBe(200)
        const third = (JSON.parse(chat.requests[3]!.body) as { messages: ReadonlyArray<Json> }).messages
        expect(third.slice(0, sent.length)).toEqual(sent)

        // The thread holds what the agent got: no thread_read call, the Bash call once.
        const items = yield* onlyItems
        expect(items.filter((i) => i.toolName === "thread_read" || i.text.includes("thread_read"))).toEqual([])
        expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === "call_b")).toHaveLength(1)
      })
    ), { timeout: 60_000 })

  it.live("/v1/responses to anthropic-messages: the same on Codex's side, the next request's messages carry both rounds, the second read's answer with the agent's result", () =>
    withGateway((_chat, anthropic) =>
      Effect.gen(function*() {
        const tools = [{ type: "function", name: "exec_command", description: "Run a command", strict: false, parameters: { type: "object", properties: { cmd: { type: "string" } }, required: ["cmd"] } }]
        const send = (input: ReadonlyArray<unknown>) =>
          raw(HttpClientRequest.post("/v1/responses").pipe(
            HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "session-id": "sess-beside-hop", "thread-id": "sess-beside-hop", "user-agent": "codex_exec/0.171.0" }),
            HttpClientRequest.bodyText(JSON.stringify({ model: "claude-sonnet-4-5", stream: true, tools, input, store: false }), "application/json")
          ))
        const other = `other-output ${words(11, 50)}`
        const input: Array<unknown> = [
          { type: "message", role: "developer", content: [{ type: "input_text", text: "You are Codex." }] },
          { type: "message", role: "user", content: [{ type: "input_text", text: "run it" }] },
          { type: "function_call", id: "fc_a", call_id: "call_a", name: "exec_command", arguments: JSON.stringify({ cmd: "echo hello" }) },
          { type: "function_call_output", call_id: "call_a", output },
          { type: "function_call", id: "fc_c", call_id: "call_c", name: "exec_command", arguments: JSON.stringify({ cmd: "echo other" }) },
          { type: "function_call_output", call_id: "call_c", output: other }
        ]
        const read1 = { id: "toolu_r1", name: "thread_read", arguments: JSON.stringify({ refs: "tool:call_a" }) }
        const read2 = { id: "toolu_r2", name: "thread_read", arguments: JSON.stringify({ refs: "tool:call_c" }) }
        const exec = { id: "toolu_b", name: "exec_command", arguments: JSON.stringify({ cmd: "ls" }) }
        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Let me read.", usage, [read1]), ModelApi.answer("anthropic-messages", "Now run.", usage, [read2, exec]))
        const first = yield* send(input)
        expect(first.status).toBe(200)
        expect(first.text).not.toContain("thread_read")
        expect(anthropic.requests).toHaveLength(2)
        const a = GatewayResponses.replyAssembler()
        a.push(new TextEncoder().encode(first.text))
        const outcome = a.outcome()
        if (outcome._tag !== "completed") throw new Error("the answer did not complete")
        const received = outcome.reply.messages.map((m) => m.message as Json)
        expect(received.map((i) => [i.type, i.name ?? null])).toEqual([["message", null], ["message", null], ["function_call", "exec_command"]])
        const callId = String(received[2]!.call_id)

        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Done.", usage))
        const second = [...input, ...received, { type: "function_call_output", call_id: callId, output: "a.txt" }]
        expect((yield* send(second)).status).toBe(200)
        const sent = (JSON.parse(anthropic.requests[2]!.body) as { messages: ReadonlyArray<{ role: string; content: ReadonlyArray<Json> }> }).messages
        const tail = sent.slice(-4)
        expect(tail.map((m) => [m.role, m.content.map((b) => [b.type, b.text ?? b.name ?? b.tool_use_id])])).toEqual([
          ["assistant", [["text", "Let me read."], ["tool_use", "thread_read"]]],
          ["user", [["tool_result", "toolu_r1"]]],
          ["assistant", [["text", "Now run."], ["tool_use", "thread_read"], ["tool_use", "exec_command"]]],
          ["user", [["tool_result", "toolu_r2"], ["tool_result", callId]]]
        ])
        expect(JSON.stringify(tail[1]!.content[0]!.content)).toContain(output.slice(0, 40))
        expect(JSON.stringify(tail[3]!.content[0]!.content)).toContain(other.slice(0, 40))
        expect(JSON.stringify(tail[3]!.content[1]!.content)).toContain("a.txt")

        // The request after extends it (breakpoints aside: the switch moves its prompt-cache breakpoint to the last block).
        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Bye.", usage))
        const done = { type: "message", role: "assistant", content: [{ type: "output_text", text: "Done.", annotations: [] }] }
        expect((yield* send([...second, done, { type: "message", role: "user", content: [{ type: "input_text", text: "thanks" }] }])).status).toBe(200)
        const third = (JSON.parse(anthropic.requests[3]!.body) as { messages: ReadonlyArray<unknown> }).messages
        const plain = (v: unknown) => JSON.parse(JSON.stringify(v, (k, x) => (k === "cache_control" ? undefined : x))) as unknown
        expect(plain(third.slice(0, sent.length))).toEqual(plain(sent))

        const items = yield* onlyItems
        expect(items.filter((i) => i.toolName === "thread_read" || i.text.includes("thread_read"))).toEqual([])
        expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === callId)).toHaveLength(1)
      })
    ), { timeout: 60_000 })

  it.live("/v1/chat/completions to anthropic-messages: the same on pi's side (the agent's one message holds both hops' text), the next request carries both rounds", () =>
    withGateway((_chat, anthropic) =>
      Effect.gen(function*() {
        const tools = [{ type: "function", function: { name: "bash", description: "Run a command", parameters: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } } }]
        const send = (messages: ReadonlyArray<unknown>) =>
          raw(HttpClientRequest.post("/v1/chat/completions").pipe(
            HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "x-session-id": "sess-beside-hop-c" }),
            HttpClientRequest.bodyText(JSON.stringify({ model: "claude-sonnet-4-5", stream: true, tools, messages }), "application/json")
          ))
        const other = `other-output ${words(11, 50)}`
        const history: Array<unknown> = [
          { role: "system", content: "You are pi." },
          { role: "user", content: "run it" },
          { role: "assistant", content: null, tool_calls: [{ id: "call_a", type: "function", function: { name: "bash", arguments: JSON.stringify({ command: "echo hello" }) } }] },
          { role: "tool", tool_call_id: "call_a", content: output },
          { role: "assistant", content: null, tool_calls: [{ id: "call_c", type: "function", function: { name: "bash", arguments: JSON.stringify({ command: "echo other" }) } }] },
          { role: "tool", tool_call_id: "call_c", content: other }
        ]
        const read1 = { id: "toolu_r1", name: "thread_read", arguments: JSON.stringify({ refs: "tool:call_a" }) }
        const read2 = { id: "toolu_r2", name: "thread_read", arguments: JSON.stringify({ refs: "tool:call_c" }) }
        const bash = { id: "toolu_b", name: "bash", arguments: JSON.stringify({ command: "ls" }) }
        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Let me read.", usage, [read1]), ModelApi.answer("anthropic-messages", "Now run.", usage, [read2, bash]))
        const first = yield* send(history)
        expect(first.status).toBe(200)
        expect(first.text).not.toContain("thread_read")
        const a = GatewayChat.replyAssembler()
        a.push(new TextEncoder().encode(first.text))
        const outcome = a.outcome()
        if (outcome._tag !== "completed") throw new Error("the answer did not complete")
        const message = outcome.reply.messages[0]!.message as Json
        const calls = message.tool_calls as ReadonlyArray<{ id: string; function: { name: string } }>
        expect(calls.map((c) => [c.id, c.function.name])).toEqual([["toolu_b", "bash"]])

        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Done.", usage))
        expect((yield* send([...history, { role: "assistant", content: message.content ?? null, tool_calls: message.tool_calls }, { role: "tool", tool_call_id: "toolu_b", content: "a.txt" }])).status).toBe(200)
        const sent = (JSON.parse(anthropic.requests[2]!.body) as { messages: ReadonlyArray<{ role: string; content: ReadonlyArray<Json> }> }).messages
        expect(sent.slice(-4).map((m) => [m.role, m.content.map((b) => [b.type, b.text ?? b.name ?? b.tool_use_id])])).toEqual([
          ["assistant", [["text", "Let me read."], ["tool_use", "thread_read"]]],
          ["user", [["tool_result", "toolu_r1"]]],
          ["assistant", [["text", "Now run."], ["tool_use", "thread_read"], ["tool_use", "bash"]]],
          ["user", [["tool_result", "toolu_r2"], ["tool_result", "toolu_b"]]]
        ])
        expect(JSON.stringify(sent.at(-1)!.content[0]!.content)).toContain(other.slice(0, 40))
        const items = yield* onlyItems
        expect(items.filter((i) => i.toolName === "thread_read" || i.text.includes("thread_read"))).toEqual([])
      })
    ), { timeout: 60_000 })
})
