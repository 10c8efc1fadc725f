/**
 * A provider switch on the gateway's Chat Completions endpoint (issue 14 items 4 and 5): an agent speaking OpenAI Chat
 * Completions (pi, opencode, aider) whose model routes to an `anthropic-messages` instance. Against loopback upstreams
 * (a Chat Completions one for `gpt-*`, an Anthropic one with a 32,000-token window for `claude-*`): the history
 * converted and fitted (stubs, then deferral with a pointer; the prompt unchanged; every left-out original readable
 * with `thread_read`), the answer converted back (streamed as `chat.completion.chunk`s and whole, tool calls and
 * usage), the switch back to the first model sending the agent's body as it is with nothing lost, the overflow Baton
 * cannot fit answered as OpenAI's `context_length_exceeded`, and upstream errors in OpenAI's shape. And the conversion
 * (`GatewaySwitchAnthropic`) on its own, with recorded Anthropic traffic (../shared/provider-fixtures).
 */
import { ThreadRead } from "@baton/orchestration"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as GatewayChat from "../src/GatewayChat.js"
import * as GatewaySwitchAnthropic from "../src/GatewaySwitchAnthropic.js"
import { adminToken, client, raw } from "./helpers.js"
import * as AnthropicFixtures from "./support/AnthropicFixtures.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"
import { allItems, counter, readAll, window, words } from "./support/SwitchSummary.js"

const usage = { input: 900, cacheWrite: 200, cacheRead: 300, output: 40 }


type Message = { readonly role: string; readonly content: unknown; readonly tool_calls?: unknown; readonly tool_call_id?: string }

/**
 * A long pi-like Chat Completions history (about 80,000 tokens): 10 exchanges of long text (nothing to stub), then 10
 * bash rounds with long outputs (`tool` messages), ending with the assistant's last answer.
 */
const longHistory = (): Array<Message> => {
  const out: Array<Message> = [{ role: "user", content: `start ${words(1, 600)}` }]
  for (let i = 0; i < 10; i++) {
    out.push({ role: "assistant", content: `answer ${i} ${words(100 + i, 600)}` })
    out.push({ role: "user", content: [{ type: "text", text: `question ${i} ${words(200 + i, 600)}` }] })
  }
  for (let i = 0; i < 10; i++) {
    out.push({ role: "assistant", content: `Running ${i}.`, tool_calls: [{ id: `call_${i}`, type: "function", function: { name: "bash", arguments: JSON.stringify({ command: `cat part${i}.txt` }) } }] })
    out.push({ role: "tool", tool_call_id: `call_${i}`, content: `output ${i} ${words(300 + i, 1_200)}` })
  }
  out.push({ role: "assistant", content: "Read them all." })
  return out
}

const system = { role: "system", content: "You are pi, a coding agent." }
const tools = [{ type: "function", function: { name: "bash", description: "Run a command", parameters: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } } }]

/** An agent's `/v1/chat/completions` request (the Baton token as Bearer, pi's session header). */
const chat = (body: unknown) =>
  HttpClientRequest.post("/v1/chat/completions").pipe(
    HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "x-session-id": "sess-chat-switch", "user-agent": "pi/0.30" }),
    HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
  )

/** The reply an agent assembles from a Chat Completions SSE answer. */
const assembled = (text: string) => {
  const a = GatewayChat.replyAssembler()
  a.push(new TextEncoder().encode(text))
  const outcome = a.outcome()
  if (outcome._tag !== "completed") throw new Error(`the answer did not complete: ${text.slice(0, 500)}`)
  return outcome.reply
}

/** A gateway with `gpt-*` on a Chat Completions loopback upstream and `claude-*` on an Anthropic one (32,000 tokens). */
const withGateway = <A, E, R>(test: (chatApi: ModelApi.ModelApi, anthropic: ModelApi.ModelApi) => Effect.Effect<A, E, R>) =>
  Effect.scoped(Effect.gen(function*() {
    const chatApi = yield* ModelApi.start
    const anthropic = yield* ModelApi.start
    const settings = yield* settingsFor(
      [
        instance("chat", "openai-chat", chatApi, { toolResultOffload: false }),
        instance("anthropic", "anthropic-messages", anthropic, { contextWindow: window, autoCompactThreshold: null, maxOutputTokens: 4_096 })
      ],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: [{ model: "gpt-*", provider: "chat" }, { model: "claude-*", provider: "anthropic" }] } }
    )
    return yield* test(chatApi, anthropic).pipe(Effect.provide(serveSettings(settings)))
  }))



describe("GatewaySwitchAnthropic (the conversion)", () => {
  it("converts the history: system, parts, tool calls, consecutive tool results and the user message after them, tools, tool_choice, stop", () => {
    const body = {
      model: "claude-x",
      max_tokens: 32_000,
      stream: true,
      stream_options: { include_usage: true },
      tools,
      tool_choice: "required",
      parallel_tool_calls: false,
      temperature: 1.5,
      stop: "END",
      messages: [
        system,
        { role: "developer", content: [{ type: "text", text: "Be brief." }] },
        { role: "user", content: [{ type: "text", text: "list files" }, { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }] },
        {
          role: "assistant",
          content: null,
          tool_calls: [
            { id: "call_1", type: "function", function: { name: "bash", arguments: "{\"command\":\"ls\"}" } },
            { id: "call.2", type: "function", function: { name: "bash", arguments: "" } }
          ]
        },
        { role: "tool", tool_call_id: "call_1", content: "a.ts" },
        { role: "tool", tool_call_id: "call.2", content: [{ type: "text", text: "b.ts" }] },
        { role: "user", content: "and then?" }
      ]
    }
    const result = GatewaySwitchAnthropic.toAnthropic({ body, windowTokens: window, maxOutputTokens: 4_096, count: (t) => counter.count(t), pointer: () => "unused" })
    expect(result._tag).toBe("fits")
    if (result._tag !== "fits") return
    expect(result.body).toEqual({
      model: "claude-x",
      max_tokens: 4_096,
      system: "You are pi, a coding agent.\n\nBe brief.",
      stream: true,
      tools: [{ name: "bash", description: "Run a command", input_schema: tools[0]!.function.parameters }],
      tool_choice: { type: "any", disable_parallel_tool_use: true },
      temperature: 1,
      stop_sequences: ["END"],
      messages: [
        { role: "user", content: [{ type: "text", text: "list files" }, { type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } }] },
        {
          role: "assistant",
          content: [
            { type: "tool_use", id: "call_1", name: "bash", input: { command: "ls" } },
            { type: "tool_use", id: "call_2_bf9fb854", name: "bash", input: {} }
          ]
        },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "call_1", content: "a.ts" },
            { type: "tool_result", tool_use_id: "call_2_bf9fb854", content: "b.ts" },
            // The prompt-cache breakpoint on the last block (the text as sent).
            { type: "text", text: "and then?", cache_control: { type: "ephemeral" } }
          ]
        }
      ]
    })
    expect(result.fit).toMatchObject({ leftOut: 0, stubbed: [] })
  })

  // Regression (review r21): `a.b` and `a:b` both became `a_b`, so the second result answered the first call.
  it("two call ids that differ only in characters Anthropic refuses stay two ids, each result with its own call", () => {
    const body = {
      model: "claude-x",
      tools,
      messages: [
        { role: "user", content: "run both" },
        {
          role: "assistant",
          content: null,
          tool_calls: [
            { id: "run.1", type: "function", function: { name: "bash", arguments: "{\"command\":\"ls\"}" } },
            { id: "run:1", type: "function", function: { name: "bash", arguments: "{\"command\":\"pwd\"}" } },
            { id: "run_1", type: "function", function: { name: "bash", arguments: "{\"command\":\"id\"}" } }
          ]
        },
        { role: "tool", tool_call_id: "run:1", content: "/work" },
        { role: "tool", tool_call_id: "run.1", content: "a.ts" },
        { role: "tool", tool_call_id: "run_1", content: "uid=0" },
        { role: "user", content: "and then?" }
      ]
    }
    const result = GatewaySwitchAnthropic.toAnthropic({ body, windowTokens: 200_000, maxOutputTokens: 4_096, count: (t) => counter.count(t), pointer: () => "unused" })
    expect(result._tag).toBe("fits")
    if (result._tag !== "fits") return
    const messages = result.body.messages as ReadonlyArray<{ readonly content: ReadonlyArray<Record<string, unknown>> }>
    const uses = messages[1]!.content.map((b) => [b.id, (b.input as { command: string }).command])
    expect(new Set(uses.map(([id]) => id)).size).toBe(3)
    for (const [id] of uses) expect(id).toMatch(/^[A-Za-z0-9_-]+$/)
    // A valid id is kept as it is; each result names its own call.
    expect(uses[2]).toEqual(["run_1", "id"])
    const commandOf = new Map(uses.map(([id, command]) => [id, command]))
    const results = messages[2]!.content.filter((b) => b.type === "tool_result").map((b) => [commandOf.get(b.tool_use_id as string), b.content])
    expect(results).toEqual([["pwd", "/work"], ["ls", "a.ts"], ["id", "uid=0"]])
  })

  it("a recorded Anthropic stream (text, then a tool call without arguments) comes back as chunks the agent assembles; the recorded whole answer alike", () => {
    const translator = GatewaySwitchAnthropic.streamTranslator("claude-x", new Set(["thread_read"]), { stream_options: { include_usage: true } })
    const text = translator.push(new TextEncoder().encode(AnthropicFixtures.recordedStream("anthropic-tool-no-args.chunks.txt"))) + translator.end()
    expect(text.endsWith("data: [DONE]\n\n")).toBe(true)
    for (const line of text.split("\n\n").filter((l) => l !== "" && l !== "data: [DONE]")) {
      expect(JSON.parse(line.replace(/^data: /, ""))).toMatchObject({ id: "chatcmpl-msg_01GE2RKp1VYsPzdFs3sS9z5S", object: "chat.completion.chunk", model: "claude-x" })
    }
    const reply = assembled(text)
    expect(reply.messages[0]!.message).toEqual({
      role: "assistant",
      content: "I'll update the issue list for you.",
      tool_calls: [{ id: "toolu_01QE1WLsSVp5hy5Q3GmGTmjP", type: "function", function: { name: "updateIssueList", arguments: "{}" } }]
    })
    expect(text).toContain("\"finish_reason\":\"tool_calls\"")
    // message_delta's usage replaces message_start's: 565 in, 48 out.
    expect(reply.tokens).toEqual({ inputTokens: 565, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 48 })

    const whole = GatewaySwitchAnthropic.completionOf(AnthropicFixtures.recordedJson("anthropic-tool-no-args.json"), "claude-x")
    expect(whole).toMatchObject({
      id: "chatcmpl-msg_01GCBaV8gyWAYgMVggRqZbuQ",
      object: "chat.completion",
      model: "claude-x",
      choices: [{ index: 0, finish_reason: "tool_calls", message: { role: "assistant", tool_calls: [{ id: "toolu_01LRmxn9vGM1d2DZSDBowdZ1", type: "function", function: { name: "updateIssueList", arguments: "{}" } }] } }],
      usage: { prompt_tokens: 602, prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 } }
    })
    expect(GatewayChat.replyOfBody(whole).messages).toHaveLength(1)
  })

  it("a stream that ends before message_stop, and an error event, end with an error chunk the agent's assembler fails on", () => {
    const cut = GatewaySwitchAnthropic.streamTranslator("claude-x", new Set())
    const lines = AnthropicFixtures.recordedStream("anthropic-text.chunks.txt").split("\n\n").filter((l) => l !== "")
    const partial = cut.push(new TextEncoder().encode(lines.slice(0, 3).map((l) => `${l}\n\n`).join(""))) + cut.end()
    expect(partial).toContain("\"error\":{")
    const a = GatewayChat.replyAssembler()
    a.push(new TextEncoder().encode(partial))
    expect(a.outcome()._tag).not.toBe("completed")

    const failing = GatewaySwitchAnthropic.streamTranslator("claude-x", new Set())
    const overloaded = failing.push(new TextEncoder().encode(
      lines.slice(0, 2).map((l) => `${l}\n\n`).join("") + `event: error\ndata: ${JSON.stringify({ type: "error", error: { type: "overloaded_error", message: "Overloaded" } })}\n\n`
    )) + failing.end()
    expect(GatewaySwitchAnthropic.streamFailureOf(overloaded)).toMatchObject({ code: "provider_unavailable" })
  })
})

describe("Gateway, a provider switch (Chat Completions agent, anthropic-messages upstream)", () => {
  it.live("a long tool-using conversation switched to a 32,000-token window fits (stubs, then a pointer), comes back as chat.completion chunks and whole, and switches back with nothing lost", () =>
    withGateway((chatApi, anthropic) =>
      Effect.gen(function*() {
        const reader = yield* ThreadRead.ThreadRead
        const history = longHistory()
        const base = { max_tokens: 32_000, stream: true, stream_options: { include_usage: true }, tools }
        // 1. On the Chat Completions model: forwarded as sent.
        chatApi.enqueue(ModelApi.answer("openai-chat", "Noted.", usage))
        const body1 = { ...base, model: "gpt-5", messages: [system, ...history, { role: "user", content: "summarise the outputs" }] }
        const first = yield* raw(chat(body1))
        expect(first.status).toBe(200)
        const reply1 = assembled(first.text).messages[0]!.message as Message

        // 2. Switched to the Anthropic model: converted, fitted under its window, the answer converted back.
        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Checking.", usage, [{ id: "toolu_9", name: "bash", arguments: "{\"command\":\"ls\"}" }]))
        const prompt = { role: "user", content: "now, on the other model: list the directory" }
        const body2 = { ...base, model: "claude-sonnet-4-5", messages: [...body1.messages, reply1, prompt] }
        const second = yield* raw(chat(body2))
        expect(second.status).toBe(200)
        expect(second.headers["content-type"]).toContain("text/event-stream")
        expect(second.text).toContain("\"object\":\"chat.completion.chunk\"")
        expect(second.text.endsWith("data: [DONE]\n\n")).toBe(true)
        const reply2 = assembled(second.text)
        expect(reply2.messages[0]!.message).toEqual({
          role: "assistant",
          content: "Checking.",
          tool_calls: [{ id: "toolu_9", type: "function", function: { name: "bash", arguments: "{\"command\":\"ls\"}" } }]
        })
        expect(reply2.tokens).toEqual({ inputTokens: 900, cacheWriteTokens: 200, cacheReadTokens: 300, outputTokens: 40 })

        expect(anthropic.requests).toHaveLength(1)
        const sent = anthropic.requests[0]!
        expect(sent.url).toBe("/v1/messages")
        expect(sent.headers["x-api-key"]).toBe(marker)
        expect(sent.headers["anthropic-version"]).toBe("2023-06-01")
        expect(sent.headers["authorization"]).toBeUndefined()
        type Block = { type: string; text?: string; tool_use_id?: string; content?: string }
        const out = JSON.parse(sent.body) as { model: string; max_tokens: number; system: string; stream: boolean; tools: Array<{ name: string }>; messages: Array<{ role: string; content: Array<Block> }> }
        // The agent's whole request is about 80,000 tokens; what went out fits the window with the output room.
        expect(counter.count(JSON.stringify(body2))).toBeGreaterThan(2 * window)
        expect(counter.count(sent.body) + out.max_tokens).toBeLessThanOrEqual(window)
        expect(out.model).toBe("claude-sonnet-4-5")
        expect(out.stream).toBe(true)
        expect(out.system).toBe("You are pi, a coding agent.")
        expect(out.tools.map((t) => t.name)).toEqual(["bash", "thread_read"])
        // The prompt unchanged, last, with the prompt-cache breakpoint (the only one).
        expect(out.messages.at(-1)).toEqual({ role: "user", content: [{ type: "text", text: "now, on the other model: list the directory", cache_control: { type: "ephemeral" } }] })
        expect(sent.body.match(/cache_control/g)).toHaveLength(1)
        // Stubs for every tool output, each readable by its ref.
        const results = out.messages.flatMap((m) => m.content.filter((b) => b.type === "tool_result"))
        expect(results.map((b) => b.tool_use_id)).toEqual(Array.from({ length: 10 }, (_, i) => `call_${i}`))
        const threads = (yield* (yield* client()).threads.list({ urlParams: {} })).threads
        expect(threads).toHaveLength(1)
        const threadId = threads[0]!.id
        for (const [i, b] of results.entries()) {
          expect(b.content).toMatch(new RegExp(`^\\[offloaded, thread_read tool:call_${i}\\]\\nbash cat part${i}\\.txt: [\\d,]+ chars$`))
          expect(yield* readAll(reader, threadId, `tool:call_${i}`)).toContain(`output ${i} ${words(300 + i, 1_200)}`)
        }
        // Then deferral: the oldest messages left out, a pointer first, whose refs read every one of them back.
        const pointer = out.messages[0]!
        expect(pointer.role).toBe("user")
        expect(pointer.content[0]!.text).toContain(`<deferred_history thread="${threadId}">`)
        const refs = (JSON.parse(/thread_read (\{.*\})/.exec(pointer.content[0]!.text!)![1]!) as { refs: string }).refs
        const textOf = (m: Message) => typeof m.content === "string" ? m.content : (m.content as Array<{ text: string }>)[0]!.text
        const sentTexts = new Set(out.messages.flatMap((m) => m.content.map((b) => b.text)))
        const keptFrom = history.findIndex((m) => m.role !== "tool" && sentTexts.has(textOf(m)))
        expect(keptFrom).toBeGreaterThan(1)
        expect(sentTexts.has(`start ${words(1, 600)}`)).toBe(false)
        const readBack = yield* readAll(reader, threadId, refs)
        for (const m of history.slice(0, keptFrom)) expect(readBack).toContain(textOf(m))

        // 3. The next request whole (the agent asked for no stream, its tool's result added): an OpenAI chat.completion.
        anthropic.enqueue({
          status: 200,
          contentType: "application/json",
          body: JSON.stringify({
            id: "msg_whole",
            type: "message",
            role: "assistant",
            model: "claude-sonnet-4-5",
            content: [{ type: "text", text: "Checking again." }, { type: "tool_use", id: "toolu_10", name: "bash", input: { command: "ls -a" } }],
            stop_reason: "tool_use",
            stop_sequence: null,
            usage: { input_tokens: 50, cache_creation_input_tokens: 10, cache_read_input_tokens: 20, output_tokens: 7 }
          })
        })
        const reply2Message = reply2.messages[0]!.message as Message
        const body2w = { ...body2, stream: false, stream_options: undefined, messages: [...body2.messages, reply2Message, { role: "tool", tool_call_id: "toolu_9", content: "a.ts\nb.ts" }] }
        const whole = yield* raw(chat(body2w))
        expect(whole.status).toBe(200)
        expect(whole.body).toMatchObject({
          id: "chatcmpl-msg_whole",
          object: "chat.completion",
          model: "claude-sonnet-4-5",
          choices: [{
            index: 0,
            message: { role: "assistant", content: "Checking again.", tool_calls: [{ id: "toolu_10", type: "function", function: { name: "bash", arguments: "{\"command\":\"ls -a\"}" } }] },
            finish_reason: "tool_calls"
          }],
          usage: { prompt_tokens: 80, completion_tokens: 7, total_tokens: 87, prompt_tokens_details: { cached_tokens: 20, cache_write_tokens: 10 } }
        })
        const sentWhole = JSON.parse(anthropic.requests[1]!.body) as { messages: Array<{ role: string; content: Array<Block> }> }
        expect(sentWhole).not.toHaveProperty("stream")
        expect(sentWhole.messages.slice(-2)).toEqual([
          { role: "assistant", content: [{ type: "text", text: "Checking." }, { type: "tool_use", id: "toolu_9", name: "bash", input: { command: "ls" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_9", content: "a.ts\nb.ts", cache_control: { type: "ephemeral" } }] }
        ])
        expect(counter.count(anthropic.requests[1]!.body) + out.max_tokens).toBeLessThanOrEqual(window)
        const reply3Message = (whole.body as { choices: Array<{ message: Message }> }).choices[0]!.message

        // 4. Back on the Chat Completions model, with the switched reply and its tool's result: the agent's body as sent.
        chatApi.enqueue(ModelApi.answer("openai-chat", "Back.", usage))
        const body3 = {
          ...base,
          model: "gpt-5",
          messages: [...body2w.messages, reply3Message, { role: "tool", tool_call_id: "toolu_10", content: "c.ts" }]
        }
        const third = yield* raw(chat(body3))
        expect(third.status).toBe(200)
        expect(chatApi.requests).toHaveLength(2)
        expect(chatApi.requests[1]!.body).toBe(JSON.stringify(body3))

        // The record: four runs on the instances used, the switched ones with their usage; every message once.
        const api = yield* client()
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
        expect(runs.map((r) => r.status)).toEqual(["completed", "completed", "completed", "completed"])
        const views = yield* Effect.forEach(runs, (r) => api.runs.get({ path: { runId: r.id }, urlParams: {} }))
        expect(views.map((v) => v.cost?.providerInstance)).toEqual(["chat", "anthropic", "anthropic", "chat"])
        expect(views[1]!.cost).toMatchObject({ inputTokens: 900, cacheWriteTokens: 200, cacheReadTokens: 300, outputTokens: 40, providerInstance: "anthropic" })
        const all = yield* allItems(threadId)
        const items = all.filter((i) => i.kind !== "summary")
        expect(all.length - items.length).toBeLessThanOrEqual(1)
        // Every message of the agent's (after its system prompt) once, and the last reply.
        expect(new Set(items.map((i) => i.messageId)).size).toBe(body3.messages.length - 1 + 1)
        expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === "toolu_9")).toHaveLength(1)
        expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === "toolu_9").map((i) => i.text)).toEqual(["a.ts\nb.ts"])
        expect(items.filter((i) => i.kind === "user_message" && i.text === "now, on the other model: list the directory")).toHaveLength(1)
        expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === "toolu_10")).toHaveLength(1)
        expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === "toolu_10").map((i) => i.text)).toEqual(["c.ts"])
        for (let i = 0; i < 10; i++) expect(items.filter((x) => x.kind === "tool_result" && x.toolCallId === `call_${i}`)).toHaveLength(1)
        const events = threadEvents((yield* raw(HttpClientRequest.get(`/threads/${threadId}/events?follow=false`).pipe(HttpClientRequest.bearerToken(adminToken)))).text)
        expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
        expect(events.filter((e) => e.type === "gateway.usage").map((e) => {
          const p = e.payload as { providerInstance: string; windowTokens: number | null }
          return [p.providerInstance, p.windowTokens]
        })).toEqual([["chat", 200_000], ["anthropic", window], ["anthropic", window], ["chat", 200_000]])
      })
    ), { timeout: 120_000 })

  it.live("the Anthropic upstream's thread_read calls are answered by the gateway, streamed; the agent never sees them", () =>
    withGateway((_chat, anthropic) =>
      Effect.gen(function*() {
        const output = `hello-output ${words(9, 50)}`
        const history = [
          system,
          { role: "user", content: "run it" },
          { role: "assistant", content: null, tool_calls: [{ id: "call_a", type: "function", function: { name: "bash", arguments: "{\"command\":\"echo hello\"}" } }] },
          { role: "tool", tool_call_id: "call_a", content: output }
        ]
        const read = { id: "toolu_r", name: "thread_read", arguments: JSON.stringify({ refs: "tool:call_a" }) }
        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Let me read.", usage, [read]), ModelApi.answer("anthropic-messages", "It said hello.", usage))
        const answer = yield* raw(chat({ model: "claude-x", stream: true, tools, messages: history }))
        expect(answer.status).toBe(200)
        expect(answer.text).not.toContain("thread_read")
        expect(answer.text.match(/data: \[DONE\]/g)).toHaveLength(1)
        const reply = assembled(answer.text)
        expect(reply.messages[0]!.message).toEqual({ role: "assistant", content: "Let me read.\n\nIt said hello." })
        // Every hop's usage (no stream_options: on the finish chunk).
        expect(reply.tokens).toEqual({ inputTokens: 1_800, cacheWriteTokens: 400, cacheReadTokens: 600, outputTokens: 80 })
        expect(anthropic.requests).toHaveLength(2)
        const second = JSON.parse(anthropic.requests[1]!.body) as { messages: ReadonlyArray<{ role: string; content: ReadonlyArray<Record<string, unknown>> }> }
        expect(second.messages.at(-2)).toEqual({ role: "assistant", content: [{ type: "text", text: "Let me read." }, { type: "tool_use", id: "toolu_r", name: "thread_read", input: { refs: "tool:call_a" } }] })
        expect(second.messages.at(-1)!.content[0]).toMatchObject({ type: "tool_result", tool_use_id: "toolu_r" })
        expect(String(second.messages.at(-1)!.content[0]!.content)).toContain(output)
      })
    ), { timeout: 60_000 })

  it.live("upstream errors reach the agent in OpenAI's shape: a 529 overloaded as OpenAI's 503 server_is_overloaded, an Anthropic prompt-is-too-long as context_length_exceeded", () =>
    withGateway((_chat, anthropic) =>
      Effect.gen(function*() {
        const body = { model: "claude-x", messages: [system, { role: "user", content: "hi" }] }
        anthropic.enqueue({ status: 529, contentType: "application/json", body: JSON.stringify({ type: "error", error: { type: "overloaded_error", message: "Overloaded" } }) })
        const overloaded = yield* raw(chat(body))
        // OpenAI's overload: 503 `server_is_overloaded` (OpenAI sends no 529; Anthropic's type is no OpenAI code).
        expect(overloaded.status).toBe(503)
        expect(overloaded.body).toEqual({ error: { message: "Overloaded", type: "service_unavailable_error", param: null, code: "server_is_overloaded" } })

        anthropic.enqueue({ status: 400, contentType: "application/json", body: JSON.stringify({ type: "error", error: { type: "invalid_request_error", message: "prompt is too long: 208310 tokens > 200000 maximum" } }) })
        const long = yield* raw(chat({ ...body, messages: [...body.messages, { role: "assistant", content: "x" }, { role: "user", content: "again" }] }))
        expect(long.status).toBe(400)
        expect(long.body).toEqual({
          error: {
            message: "This model's maximum context length is 200000 tokens. However, your messages resulted in 208310 tokens. Please reduce the length of the messages.",
            type: "invalid_request_error",
            param: "messages",
            code: "context_length_exceeded"
          }
        })
        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
        expect(runs.map((r) => [r.status, r.failureCode])).toEqual([["failed", "provider_unavailable"], ["failed", "overflow"]])
      })
    ), { timeout: 60_000 })

  it.live("an overflow Baton cannot fit (the newest message alone is over the window) is OpenAI's context_length_exceeded 400, never sent", () =>
    withGateway((_chat, anthropic) =>
      Effect.gen(function*() {
        const body = { model: "claude-x", max_tokens: 8_000, stream: true, messages: [system, { role: "user", content: `paste ${words(7, 16_000)}` }] }
        const answer = yield* raw(chat(body))
        expect(answer.status).toBe(400)
        expect(answer.body).toMatchObject({ error: { type: "invalid_request_error", code: "context_length_exceeded", param: "messages" } })
        const message = (answer.body as { error: { message: string } }).error.message
        const [, maximum, tokens] = /^This model's maximum context length is (\d+) tokens\. However, your messages resulted in (\d+) tokens\./.exec(message) ?? []
        expect(Number(tokens)).toBeGreaterThan(window)
        expect(Number(maximum)).toBeLessThan(window)
        expect(anthropic.requests).toHaveLength(0)
        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
        expect(runs.map((r) => [r.status, r.failureCode])).toEqual([["failed", "overflow"]])
      })
    ), { timeout: 60_000 })
})
