/**
 * A provider switch on the gateway's Anthropic Messages endpoint (issue 14 items 4 and 5): an agent speaking Anthropic
 * Messages whose model routes to an `openai-chat` instance. Against loopback upstreams (an Anthropic one for
 * `claude-*`, a Chat Completions one with a 32,000-token window for `gpt-*`): the history converted and fitted (stubs,
 * then deferral with a pointer; the prompt unchanged; every left-out original readable with `thread_read`), the answer
 * converted back (streamed and whole, usage with cached tokens), the switch back to the Anthropic model sending the
 * agent's body as it is with nothing lost, the overflow Baton cannot fit answered as Anthropic's "prompt is too long",
 * and upstream errors in Anthropic's shape. And the conversion itself (`GatewaySwitch`) on its own.
 */
import type { Item } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { ThreadRead } from "@baton/orchestration"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as GatewayAnthropic from "../src/GatewayAnthropic.js"
import * as GatewaySwitch from "../src/GatewaySwitch.js"
import { adminToken, client, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"

const counter = TokenCounter.make()
const usage = { input: 900, cacheWrite: 0, cacheRead: 300, output: 40 }
const window = 32_000

/** `n` words that do not repeat much (so they cost about as many tokens as real text). */
const words = (seed: number, n: number) => Array.from({ length: n }, (_, i) => `w${(seed * 7919 + i * 104_729) % 100_003}`).join(" ")

type Message = { readonly role: string; readonly content: unknown }

/**
 * A long Claude Code-like history (about 80,000 tokens): 10 exchanges of long text (nothing to stub), then 10 Bash
 * rounds with long outputs, ending with the assistant's last answer.
 */
const longHistory = (): Array<Message> => {
  const out: Array<Message> = [{ role: "user", content: `start ${words(1, 600)}` }]
  for (let i = 0; i < 10; i++) {
    out.push({ role: "assistant", content: [{ type: "text", text: `answer ${i} ${words(100 + i, 600)}` }] })
    out.push({ role: "user", content: [{ type: "text", text: `question ${i} ${words(200 + i, 600)}` }] })
  }
  for (let i = 0; i < 10; i++) {
    out.push({ role: "assistant", content: [{ type: "text", text: `Running ${i}.` }, { type: "tool_use", id: `toolu_${i}`, name: "Bash", input: { command: `cat part${i}.txt` } }] })
    out.push({ role: "user", content: [{ type: "tool_result", tool_use_id: `toolu_${i}`, content: `output ${i} ${words(300 + i, 1_200)}` }] })
  }
  out.push({ role: "assistant", content: [{ type: "text", text: "Read them all." }] })
  return out
}

const system = [{ type: "text", text: "You are Claude Code." }]
const tools = [{ name: "Bash", description: "Run a command", input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } }]

/** An agent's `/v1/messages` request (the Baton token as `x-api-key`, the session header Claude Code sends). */
const messages = (body: unknown) =>
  HttpClientRequest.post("/v1/messages?beta=true").pipe(
    HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "sess-switch", "user-agent": "claude-cli/2.1.332 (external, sdk-cli)" }),
    HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
  )

/** The reply an agent assembles from an Anthropic SSE answer. */
const assembled = (text: string) => {
  const a = GatewayAnthropic.replyAssembler()
  a.push(new TextEncoder().encode(text))
  const outcome = a.outcome()
  if (outcome._tag !== "completed") throw new Error(`the answer did not complete: ${text.slice(0, 500)}`)
  return outcome.reply
}

/** A gateway with `claude-*` on an Anthropic loopback upstream and `gpt-*` on a Chat Completions one (32,000 tokens). */
const withGateway = <A, E, R>(test: (anthropic: ModelApi.ModelApi, chat: ModelApi.ModelApi) => Effect.Effect<A, E, R>) =>
  Effect.scoped(Effect.gen(function*() {
    const anthropic = yield* ModelApi.start
    const chat = yield* ModelApi.start
    const settings = yield* settingsFor(
      [
        instance("anthropic", "anthropic-messages", anthropic, { toolResultOffload: false }),
        instance("chat", "openai-chat", chat, { contextWindow: window, autoCompactThreshold: null, maxOutputTokens: 4_096 })
      ],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: [{ model: "claude-*", provider: "anthropic" }, { model: "gpt-*", provider: "chat" }] } }
    )
    return yield* test(anthropic, chat).pipe(Effect.provide(serveSettings(settings)))
  }))

const allItems = (threadId: Item["threadId"]) =>
  Effect.gen(function*() {
    const api = yield* client()
    const items: Array<Item> = []
    let afterSeq = 0
    for (;;) {
      const page = yield* api.items.list({ path: { threadId }, urlParams: { afterSeq, limit: 500 } })
      items.push(...page.items)
      if (page.nextAfterSeq === null) break
      afterSeq = page.nextAfterSeq
    }
    return items
  })

/** Everything `thread_read` returns for `refs`, page after page. */
const readAll = (reader: ThreadRead.ThreadRead, threadId: string, refs: string) =>
  Effect.gen(function*() {
    let text = ""
    for (let offset = 0; ;) {
      const answer = yield* reader.answer(threadId as Item["threadId"], JSON.stringify({ refs, offset, limit: ThreadRead.maxLimit }))
      expect(answer.isError).toBe(false)
      // Each page ends with a line saying where the next one starts (or that it is the end).
      text += answer.output.replace(/\n\[characters \d+-\d+ of \d+; [^\n]*\]$/, "")
      const next = /the next page: .*"offset":(\d+)/.exec(answer.output)
      if (next === null) return text
      offset = Number(next[1])
    }
  })

describe("GatewaySwitch (the conversion)", () => {
  it("converts the history: system, text, tool calls with their results paired, tools, max_tokens, stream", () => {
    const body = {
      model: "gpt-x",
      max_tokens: 32_000,
      stream: true,
      system,
      tools,
      tool_choice: { type: "auto" },
      messages: [
        { role: "user", content: "list files" },
        { role: "assistant", content: [{ type: "thinking", thinking: "hm", signature: "s" }, { type: "text", text: "Listing." }, { type: "tool_use", id: "toolu_1", name: "Bash", input: { command: "ls" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "a.ts" }] }, { type: "text", text: "and then?" }] },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_2", name: "Bash", input: { command: "false" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_2", content: "exit 1", is_error: true }] }
      ]
    }
    const result = GatewaySwitch.toChat({ body, windowTokens: window, maxOutputTokens: 4_096, count: (t) => counter.count(t), pointer: () => "unused" })
    expect(result._tag).toBe("fits")
    if (result._tag !== "fits") return
    expect(result.body).toEqual({
      model: "gpt-x",
      max_tokens: 4_096,
      stream: true,
      stream_options: { include_usage: true },
      tools: [{ type: "function", function: { name: "Bash", description: "Run a command", parameters: tools[0]!.input_schema } }],
      tool_choice: "auto",
      messages: [
        { role: "system", content: "You are Claude Code." },
        { role: "user", content: "list files" },
        { role: "assistant", content: "Listing.", tool_calls: [{ id: "toolu_1", type: "function", function: { name: "Bash", arguments: "{\"command\":\"ls\"}" } }] },
        { role: "tool", tool_call_id: "toolu_1", content: "a.ts" },
        { role: "user", content: "and then?" },
        { role: "assistant", content: null, tool_calls: [{ id: "toolu_2", type: "function", function: { name: "Bash", arguments: "{\"command\":\"false\"}" } }] },
        { role: "tool", tool_call_id: "toolu_2", content: "Error: exit 1" }
      ]
    })
    expect(result.fit).toMatchObject({ stubbed: [], leftOut: 0, outputTokens: 4_096 })
  })

  it("converts a streamed answer into Anthropic's events as the chunks arrive, whatever their cut; a whole answer into a message", () => {
    const upstream = ModelApi.answer("openai-chat", "Checking both.", usage, [
      { id: "call_a", name: "Bash", arguments: "{\"command\":\"ls\"}" },
      { id: "functions.read:1", name: "Read", arguments: "{\"file_path\":\"a.ts\"}" }
    ])
    const bytes = new TextEncoder().encode(upstream.body)
    const translate = (size: number) => {
      const t = GatewaySwitch.streamTranslator("gpt-x")
      let out = ""
      for (let i = 0; i < bytes.length; i += size) out += t.push(bytes.slice(i, i + size))
      return out + t.end()
    }
    const whole = translate(bytes.length)
    expect(translate(7)).toBe(whole)
    const types = [...whole.matchAll(/^event: (\S+)$/gm)].map((m) => m[1])
    expect(types).toEqual([
      "message_start",
      "content_block_start", "content_block_delta", "content_block_stop",
      "content_block_start", "content_block_delta", "content_block_stop",
      "content_block_start", "content_block_delta", "content_block_stop",
      "message_delta", "message_stop"
    ])
    const reply = assembled(whole)
    expect((reply.messages[0]!.message as Message).content).toEqual([
      { type: "text", text: "Checking both." },
      { type: "tool_use", id: "call_a", name: "Bash", input: { command: "ls" } },
      // An id Anthropic would refuse (`.`, `:`): its characters replaced, and a digest of it kept it one of a kind.
      { type: "tool_use", id: "functions_read_1_08bea971", name: "Read", input: { file_path: "a.ts" } }
    ])
    expect(reply.tokens).toEqual({ inputTokens: 900, cacheWriteTokens: 0, cacheReadTokens: 300, outputTokens: 40 })
    expect(whole).toContain("\"stop_reason\":\"tool_use\"")

    // A stream cut before its answer ended: an error event, no message_stop.
    const cut = GatewaySwitch.streamTranslator("gpt-x")
    const partial = cut.push(bytes.slice(0, upstream.body.indexOf("\n\n") + 2)) + cut.end()
    expect(partial).toContain("event: error")
    expect(partial).not.toContain("message_stop")

    const message = GatewaySwitch.messageOf({
      id: "chatcmpl-1",
      choices: [{ index: 0, message: { role: "assistant", content: "Done.", tool_calls: [{ id: "call_b", type: "function", function: { name: "Bash", arguments: "{\"command\":\"pwd\"}" } }] }, finish_reason: "tool_calls" }],
      usage: { prompt_tokens: 1_000, completion_tokens: 7, prompt_tokens_details: { cached_tokens: 600 } }
    }, "gpt-x")
    expect(message).toEqual({
      id: "msg_chatcmpl-1",
      type: "message",
      role: "assistant",
      model: "gpt-x",
      content: [{ type: "text", text: "Done." }, { type: "tool_use", id: "call_b", name: "Bash", input: { command: "pwd" } }],
      stop_reason: "tool_use",
      stop_sequence: null,
      usage: { input_tokens: 400, cache_creation_input_tokens: 0, cache_read_input_tokens: 600, output_tokens: 7 }
    })
    // The same message as a stream's events, for an agent that asked for a stream of an upstream that answered whole.
    expect(assembled(GatewaySwitch.eventsOf(message)).messages[0]!.message).toEqual({ role: "assistant", content: message.content })
  })

  it("converts upstream errors into Anthropic's shape; a context overflow into the prompt-is-too-long 400", () => {
    expect(GatewaySwitch.anthropicError(429, JSON.stringify({ error: { message: "Rate limit reached", type: "requests", code: "rate_limit_exceeded" } }))).toEqual({
      status: 429,
      body: { type: "error", error: { type: "rate_limit_error", message: "Rate limit reached" } }
    })
    expect(GatewaySwitch.anthropicError(503, "upstream down")).toEqual({ status: 503, body: { type: "error", error: { type: "overloaded_error", message: "upstream down" } } })
    expect(GatewaySwitch.anthropicError(400, JSON.stringify({
      error: { message: "This model's maximum context length is 32000 tokens. However, your messages resulted in 40123 tokens.", type: "invalid_request_error", code: "context_length_exceeded" }
    }))).toEqual({ status: 400, body: { type: "error", error: { type: "invalid_request_error", message: "prompt is too long: 40123 tokens > 32000 maximum" } } })
    expect(GatewaySwitch.anthropicError(400, JSON.stringify({ error: { code: 400, message: "request exceeds the available context size", type: "exceed_context_size_error", n_prompt_tokens: 40_000, n_ctx: 32_768 } })).body)
      .toEqual({ type: "error", error: { type: "invalid_request_error", message: "prompt is too long: 40000 tokens > 32768 maximum" } })
  })

  it("a stream whose tool calls' deltas interleave (by index) comes back as one complete tool_use block per call, in index order", () => {
    const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: "chatcmpl-1", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
    const translator = GatewaySwitch.streamTranslator("gpt-x")
    const text = [
      chunk({ role: "assistant", content: "Two calls." }),
      chunk({ tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "Bash", arguments: "" } }] }),
      chunk({ tool_calls: [{ index: 1, id: "call_b", type: "function", function: { name: "Read", arguments: "" } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: "{\"command\":" } }] }),
      chunk({ tool_calls: [{ index: 1, function: { arguments: "{\"file_path\":\"a.ts\"}" } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: "\"ls\"}" } }] }),
      chunk({}, "tool_calls"),
      "data: [DONE]\n\n"
    ].map((c) => translator.push(new TextEncoder().encode(c))).join("") + translator.end()
    expect(assembled(text).messages[0]!.message).toEqual({
      role: "assistant",
      content: [
        { type: "text", text: "Two calls." },
        { type: "tool_use", id: "call_a", name: "Bash", input: { command: "ls" } },
        { type: "tool_use", id: "call_b", name: "Read", input: { file_path: "a.ts" } }
      ]
    })
  })

  it("a continuation (after hidden calls) whose stream is only data lines that are not JSON, then [DONE], is an error event, not an empty end_turn; non-JSON lines before valid chunks are skipped", () => {
    const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: "chatcmpl-1", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
    const push = (t: GatewaySwitch.StreamTranslator, text: string) => t.push(new TextEncoder().encode(text))
    const translator = GatewaySwitch.streamTranslator("gpt-x", new Set(["thread_read"]))
    const first = push(translator, [
      chunk({ role: "assistant", content: "Let me look." }),
      chunk({ tool_calls: [{ index: 0, id: "call_r", type: "function", function: { name: "thread_read", arguments: "{}" } }] }),
      chunk({}, "tool_calls"),
      "data: [DONE]\n\n"
    ].join("")) + translator.end()
    expect(first).not.toContain("message_stop")
    expect(translator.hidden()).toEqual([{ id: "call_r", arguments: "{}" }])
    translator.next()
    const second = push(translator, "data: <html>bad gateway</html>\n\ndata: [DONE]\n\n") + translator.end()
    expect(second).toContain("event: error")
    expect(second).not.toContain("message_stop")
    const agent = GatewayAnthropic.replyAssembler()
    agent.push(new TextEncoder().encode(first + second))
    expect(agent.outcome()._tag).not.toBe("completed")

    // Non-JSON lines before valid chunks: skipped, the continuation's answer joins the message.
    const again = GatewaySwitch.streamTranslator("gpt-x", new Set(["thread_read"]))
    push(again, chunk({ tool_calls: [{ index: 0, id: "call_r", type: "function", function: { name: "thread_read", arguments: "{}" } }] }, "tool_calls") + "data: [DONE]\n\n")
    again.end()
    again.next()
    const joined = push(again, "data: not json\n\n" + chunk({ content: "Done." }, "stop") + "data: [DONE]\n\n") + again.end()
    expect(joined).not.toContain("event: error")
    expect(joined).toContain("message_stop")
  })
})

describe("Gateway, a provider switch (Anthropic Messages agent, openai-chat upstream)", () => {
  it.live("a long conversation switched to a 32,000-token window fits (stubs, then a pointer), comes back in Anthropic's stream, and switches back with nothing lost", () =>
    withGateway((anthropic, chat) =>
      Effect.gen(function*() {
        const reader = yield* ThreadRead.ThreadRead
        const history = longHistory()
        const base = { max_tokens: 32_000, stream: true, system, tools }
        // 1. On the Anthropic model: forwarded as sent.
        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Noted.", usage))
        const body1 = { ...base, model: "claude-sonnet-4-5", messages: [...history, { role: "user", content: "summarise the outputs" }] }
        const first = yield* raw(messages(body1))
        expect(first.status).toBe(200)
        const reply1 = assembled(first.text).messages[0]!.message as Message

        // 2. Resumed on the Chat Completions model: converted, fitted under its window, the answer converted back.
        chat.enqueue(ModelApi.answer("openai-chat", "Checking.", usage, [{ id: "call_9", name: "Bash", arguments: "{\"command\":\"ls\"}" }]))
        const prompt = { role: "user", content: [{ type: "text", text: "now, on the other model: list the directory" }] }
        const body2 = { ...base, model: "gpt-5", messages: [...body1.messages, reply1, prompt] }
        const second = yield* raw(messages(body2))
        expect(second.status).toBe(200)
        expect(second.headers["content-type"]).toContain("text/event-stream")
        const reply2 = assembled(second.text)
        expect(reply2.messages[0]!.message).toEqual({ role: "assistant", content: [{ type: "text", text: "Checking." }, { type: "tool_use", id: "call_9", name: "Bash", input: { command: "ls" } }] })
        expect(reply2.tokens).toEqual({ inputTokens: 900, cacheWriteTokens: 0, cacheReadTokens: 300, outputTokens: 40 })

        expect(chat.requests).toHaveLength(1)
        const sent = chat.requests[0]!
        expect(sent.url).toBe("/v1/chat/completions")
        expect(sent.headers["authorization"]).toBe(`Bearer ${marker}`)
        const out = JSON.parse(sent.body) as { model: string; max_tokens: number; messages: Array<{ role: string; content: string | null; tool_call_id?: string }> }
        // The agent's whole request is about 80,000 tokens; what went out fits the window with the output room.
        expect(counter.count(JSON.stringify(body2))).toBeGreaterThan(2 * window)
        expect(counter.count(sent.body) + out.max_tokens).toBeLessThanOrEqual(window)
        expect(out.model).toBe("gpt-5")
        // The prompt unchanged, last.
        expect(out.messages.at(-1)).toEqual({ role: "user", content: "now, on the other model: list the directory" })
        expect(out.messages[0]).toEqual({ role: "system", content: "You are Claude Code." })
        // Stubs for every tool output, each readable by its ref.
        const results = out.messages.filter((m) => m.role === "tool")
        expect(results.map((m) => m.tool_call_id)).toEqual(Array.from({ length: 10 }, (_, i) => `toolu_${i}`))
        const threads = (yield* (yield* client()).threads.list({ urlParams: {} })).threads
        expect(threads).toHaveLength(1)
        const threadId = threads[0]!.id
        for (const [i, m] of results.entries()) {
          expect(m.content).toMatch(new RegExp(`^\\[offloaded, thread_read tool:toolu_${i}\\]\\nBash cat part${i}\\.txt: [\\d,]+ chars$`))
          expect(yield* readAll(reader, threadId, `tool:toolu_${i}`)).toContain(`output ${i} ${words(300 + i, 1_200)}`)
        }
        // Then deferral: the oldest messages left out, a pointer first, whose refs read every one of them back.
        const pointer = out.messages[1]!
        expect(pointer.role).toBe("user")
        expect(pointer.content).toContain(`<deferred_history thread="${threadId}">`)
        const refs = (JSON.parse(/thread_read (\{.*\})/.exec(pointer.content!)![1]!) as { refs: string }).refs
        const keptFrom = history.findIndex((m) => out.messages.some((o) => typeof o.content === "string" && typeof (m.content as Array<{ text?: string }>)[0]?.text === "string" && o.content === (m.content as Array<{ text: string }>)[0]!.text))
        expect(keptFrom).toBeGreaterThan(1)
        expect(out.messages.some((o) => o.content === `start ${words(1, 600)}`)).toBe(false)
        const readBack = yield* readAll(reader, threadId, refs)
        for (const m of history.slice(0, keptFrom)) {
          const text = typeof m.content === "string" ? m.content : (m.content as Array<{ text: string }>)[0]!.text
          expect(readBack).toContain(text)
        }

        // 3. Back on the Anthropic model, with the converted reply and its tool's result: the agent's body as sent.
        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Back.", usage))
        const reply2Message = reply2.messages[0]!.message as Message
        const body3 = {
          ...base,
          model: "claude-sonnet-4-5",
          messages: [...body2.messages, reply2Message, { role: "user", content: [{ type: "tool_result", tool_use_id: "call_9", content: "a.ts\nb.ts" }] }]
        }
        const third = yield* raw(messages(body3))
        expect(third.status).toBe(200)
        expect(anthropic.requests).toHaveLength(2)
        expect(anthropic.requests[1]!.body).toBe(JSON.stringify(body3))

        // The record: three runs on the instances used, the switched one with its usage; every message once.
        const api = yield* client()
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
        expect(runs.map((r) => r.status)).toEqual(["completed", "completed", "completed"])
        const views = yield* Effect.forEach(runs, (r) => api.runs.get({ path: { runId: r.id }, urlParams: {} }))
        expect(views.map((v) => v.cost?.providerInstance)).toEqual(["anthropic", "chat", "anthropic"])
        expect(views[1]!.cost).toMatchObject({ inputTokens: 900, cacheWriteTokens: 0, cacheReadTokens: 300, outputTokens: 40, providerInstance: "chat" })
        // Besides the messages, the summary the gateway had written of the deferred history (GatewaySwitchSummary.test.ts).
        const all = yield* allItems(threadId)
        const items = all.filter((i) => i.kind !== "summary")
        expect(all.length - items.length).toBeLessThanOrEqual(1)
        expect(new Set(items.map((i) => i.messageId)).size).toBe(body3.messages.length + 1)
        expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === "call_9")).toHaveLength(1)
        expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === "call_9").map((i) => i.text)).toEqual(["a.ts\nb.ts"])
        expect(items.filter((i) => i.kind === "user_message" && i.text === "now, on the other model: list the directory")).toHaveLength(1)
        const events = threadEvents((yield* raw(HttpClientRequest.get(`/threads/${threadId}/events?follow=false`).pipe(HttpClientRequest.bearerToken(adminToken)))).text)
        expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
        // The switch is visible in the timeline: each answer's gateway.usage names its instance and window.
        expect(events.filter((e) => e.type === "gateway.usage").map((e) => {
          const p = e.payload as { providerInstance: string; windowTokens: number | null; inputTokens: number }
          return [p.providerInstance, p.windowTokens, p.inputTokens]
        })).toEqual([["anthropic", 200_000, 900], ["chat", window, 900], ["anthropic", 200_000, 900]])
      })
    ), { timeout: 120_000 })

  it.live("the switched upstream's thread_read calls are answered by the gateway from the thread, streamed and whole; the agent never sees them", () =>
    withGateway((_anthropic, chat) =>
      Effect.gen(function*() {
        const output = `hello-output ${words(9, 50)}`
        const history = [
          { role: "user", content: "run it" },
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_a", name: "Bash", input: { command: "echo hello" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_a", content: output }] }
        ]
        const read = { id: "call_r", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_a" }) }
        // Streamed: the first hop's text reaches the agent, its thread_read call does not; the continuation joins.
        chat.enqueue(ModelApi.answer("openai-chat", "Let me read.", usage, [read]), ModelApi.answer("openai-chat", "It said hello.", usage))
        const body = { model: "gpt-5", max_tokens: 1_000, stream: true, system, tools, messages: history }
        const streamed = yield* raw(messages(body))
        expect(streamed.status).toBe(200)
        expect(streamed.text.match(/event: message_start/g)).toHaveLength(1)
        expect(streamed.text).not.toContain("thread_read")
        const reply = assembled(streamed.text)
        expect((reply.messages[0]!.message as Message).content).toEqual([{ type: "text", text: "Let me read." }, { type: "text", text: "It said hello." }])
        expect(reply.tokens).toEqual({ inputTokens: 1_800, cacheWriteTokens: 0, cacheReadTokens: 600, outputTokens: 80 })
        expect(streamed.text).toContain("\"stop_reason\":\"end_turn\"")
        expect(chat.requests).toHaveLength(2)
        const first = JSON.parse(chat.requests[0]!.body) as { tools: ReadonlyArray<{ function: { name: string } }> }
        expect(first.tools.map((t) => t.function.name)).toEqual(["Bash", "thread_read"])
        const second = JSON.parse(chat.requests[1]!.body) as { messages: ReadonlyArray<{ role: string; content: string | null; tool_calls?: unknown; tool_call_id?: string }> }
        expect(second.messages.at(-2)).toEqual({ role: "assistant", content: "Let me read.", tool_calls: [{ id: "call_r", type: "function", function: { name: "thread_read", arguments: read.arguments } }] })
        expect(second.messages.at(-1)!.tool_call_id).toBe("call_r")
        expect(second.messages.at(-1)!.content).toContain(output)

        // Whole: the agent gets only the last answer, with every hop's usage.
        const whole = (text: string, calls: ReadonlyArray<typeof read>) => ({
          status: 200,
          contentType: "application/json",
          body: JSON.stringify({
            id: `chatcmpl-${calls.length}`,
            choices: [{ index: 0, message: { role: "assistant", content: text, ...(calls.length === 0 ? {} : { tool_calls: calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })) }) }, finish_reason: calls.length === 0 ? "stop" : "tool_calls" }],
            usage: { prompt_tokens: 100, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 40 } }
          })
        })
        chat.enqueue(whole("", [read]), whole("Read: hello.", []))
        const again = yield* raw(messages({ ...body, stream: false, messages: [...history, reply.messages[0]!.message, { role: "user", content: "and again" }] }))
        expect(again.status).toBe(200)
        expect(again.body).toMatchObject({ content: [{ type: "text", text: "Read: hello." }], stop_reason: "end_turn", usage: { input_tokens: 120, cache_read_input_tokens: 80, output_tokens: 10 } })
        expect(chat.requests).toHaveLength(4)
        expect(chat.requests[3]!.body).toContain(JSON.stringify(output).slice(1, -1))

        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        const items = yield* allItems(threadId)
        expect(items.filter((i) => i.toolName === "thread_read")).toEqual([])
        expect(items.filter((i) => i.kind === "assistant_message").map((i) => i.text)).toEqual(["Let me read.", "It said hello.", "Read: hello."])
        // Each run's gateway.usage: every hop's tokens (the cost), and what the last request carried (the chart's
        // point: 900 + 300 streamed, 100 whole), not their sum.
        const events = threadEvents((yield* raw(HttpClientRequest.get(`/threads/${threadId}/events?follow=false`).pipe(HttpClientRequest.bearerToken(adminToken)))).text)
        expect(events.filter((e) => e.type === "gateway.usage").map((e) => {
          const p = e.payload as { inputTokens: number; cacheReadTokens: number; carriedTokens?: number }
          return [p.inputTokens + p.cacheReadTokens, p.carriedTokens]
        })).toEqual([[2_400, 1_200], [200, 100]])
      })
    ), { timeout: 60_000 })

  it.live("a whole (non-streamed) switched answer comes back as an Anthropic message; an upstream error in Anthropic's shape", () =>
    withGateway((_anthropic, chat) =>
      Effect.gen(function*() {
        chat.enqueue({
          status: 200,
          contentType: "application/json",
          body: JSON.stringify({
            id: "chatcmpl-7",
            object: "chat.completion",
            choices: [{ index: 0, message: { role: "assistant", content: "Hello there." }, finish_reason: "stop" }],
            usage: { prompt_tokens: 50, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 20 } }
          })
        })
        const body = { model: "gpt-5", max_tokens: 1_000, system, messages: [{ role: "user", content: "hi" }] }
        const whole = yield* raw(messages(body))
        expect(whole.status).toBe(200)
        expect(whole.body).toEqual({
          id: "msg_chatcmpl-7",
          type: "message",
          role: "assistant",
          model: "gpt-5",
          content: [{ type: "text", text: "Hello there." }],
          stop_reason: "end_turn",
          stop_sequence: null,
          usage: { input_tokens: 30, cache_creation_input_tokens: 0, cache_read_input_tokens: 20, output_tokens: 3 }
        })
        expect(JSON.parse(chat.requests[0]!.body)).toEqual({ model: "gpt-5", max_tokens: 1_000, messages: [{ role: "system", content: "You are Claude Code." }, { role: "user", content: "hi" }] })

        chat.enqueue({ status: 429, contentType: "application/json", body: JSON.stringify({ error: { message: "Rate limit reached for gpt-5", type: "requests", param: null, code: "rate_limit_exceeded" } }) })
        const limited = yield* raw(messages({ ...body, messages: [...body.messages, { role: "assistant", content: "Hello there." }, { role: "user", content: "again" }] }))
        expect(limited.status).toBe(429)
        expect(limited.body).toEqual({ type: "error", error: { type: "rate_limit_error", message: "Rate limit reached for gpt-5" } })

        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
        expect(runs.map((r) => [r.status, r.failureCode])).toEqual([["completed", null], ["failed", "provider_unavailable"]])
        const views = yield* Effect.forEach(runs, (r) => api.runs.get({ path: { runId: r.id }, urlParams: {} }))
        expect(views[0]!.cost).toMatchObject({ inputTokens: 30, cacheReadTokens: 20, outputTokens: 3, providerInstance: "chat" })
      })
    ), { timeout: 60_000 })

  it.live("a whole answer's thread_read continuation refused 429 fails the run provider_unavailable, as the first request's 429 does", () =>
    withGateway((_anthropic, chat) =>
      Effect.gen(function*() {
        const read = { id: "call_r", type: "function", function: { name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_a" }) } }
        chat.enqueue(
          {
            status: 200,
            contentType: "application/json",
            body: JSON.stringify({
              id: "chatcmpl-1",
              object: "chat.completion",
              choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls: [read] }, finish_reason: "tool_calls" }],
              usage: { prompt_tokens: 100, completion_tokens: 5 }
            })
          },
          { status: 429, contentType: "application/json", body: JSON.stringify({ error: { message: "Rate limit reached for gpt-5", type: "requests", param: null, code: "rate_limit_exceeded" } }) }
        )
        const limited = yield* raw(messages({ model: "gpt-5", max_tokens: 1_000, system, tools, messages: [{ role: "user", content: "hi" }] }))
        expect(limited.status).toBe(429)
        expect(limited.body).toEqual({ type: "error", error: { type: "rate_limit_error", message: "Rate limit reached for gpt-5" } })
        expect(chat.requests).toHaveLength(2)

        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
        expect(runs.map((r) => [r.status, r.failureCode])).toEqual([["failed", "provider_unavailable"]])
      })
    ), { timeout: 60_000 })

  it.live("an overflow Baton cannot fit (the newest message alone is over the window) is Anthropic's prompt-is-too-long 400, never sent", () =>
    withGateway((_anthropic, chat) =>
      Effect.gen(function*() {
        const body = { model: "gpt-5", max_tokens: 8_000, stream: true, system, messages: [{ role: "user", content: `paste ${words(7, 16_000)}` }] }
        const answer = yield* raw(messages(body))
        expect(answer.status).toBe(400)
        const message = (answer.body as { error: { message: string } }).error.message
        expect(answer.body).toMatchObject({ type: "error", error: { type: "invalid_request_error" } })
        const [, tokens, maximum] = /^prompt is too long: (\d+) tokens > (\d+) maximum$/.exec(message) ?? []
        expect(Number(tokens)).toBeGreaterThan(window)
        expect(Number(maximum)).toBeLessThan(window)
        expect(chat.requests).toHaveLength(0)
        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
        expect(runs.map((r) => [r.status, r.failureCode])).toEqual([["failed", "overflow"]])
      })
    ), { timeout: 60_000 })

  // Found by a new user (hgw): count_tokens for a model routed to the Chat Completions instance was refused 404 with a
  // message about compaction requests. No upstream there counts an Anthropic request: Baton answers with its own count.
  it.live("count_tokens for a switched model is answered with Baton's own count of system, messages and tools; nothing goes upstream, nothing is recorded", () =>
    withGateway((anthropic, chat) =>
      Effect.gen(function*() {
        const history = longHistory()
        const body = { model: "gpt-5", system, tools, messages: [...history, { role: "user", content: "How long is this?" }] }
        const counted = yield* raw(
          HttpClientRequest.post("/v1/messages/count_tokens?beta=true").pipe(
            HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01" }),
            HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
          )
        )
        expect(counted.status).toBe(200)
        const expected = counter.count(JSON.stringify(system)) + counter.count(JSON.stringify(body.messages)) + counter.count(JSON.stringify(tools))
        expect(counted.body).toEqual({ input_tokens: expected })
        expect(expected).toBeGreaterThan(window)
        expect([chat.requests.length, anthropic.requests.length, anthropic.counts.length]).toEqual([0, 0, 0])
        const api = yield* client()
        expect((yield* api.threads.list({ urlParams: {} })).threads).toEqual([])
      })
    ), { timeout: 60_000 })

  it.live("thread_read continuations stay under the window: an answer that does not fit is refused to the model, never sent", () =>
    withGateway((_anthropic, chat) =>
      Effect.gen(function*() {
        // Four rounds of two reads of whole outputs (each about 3,000 tokens) against a fit just under the limit.
        for (let round = 0; round < 4; round++) {
          chat.enqueue(ModelApi.answer("openai-chat", "", usage, [0, 1].map((k) => ({ id: `call_r${round}${k}`, name: "thread_read", arguments: JSON.stringify({ refs: `tool:toolu_${round * 2 + k}`, limit: ThreadRead.maxLimit }) }))))
        }
        chat.enqueue(ModelApi.answer("openai-chat", "Done.", usage))
        const body = { model: "gpt-5", max_tokens: 32_000, stream: true, system, tools, messages: [...longHistory(), { role: "user", content: "what did they print?" }] }
        const answer = yield* raw(messages(body))
        expect(answer.status).toBe(200)
        expect(assembled(answer.text).messages[0]!.message).toEqual({ role: "assistant", content: [{ type: "text", text: "Done." }] })
        expect(chat.requests).toHaveLength(5)
        for (const sent of chat.requests) {
          const out = JSON.parse(sent.body) as { max_tokens: number }
          expect(counter.count(sent.body) + out.max_tokens).toBeLessThanOrEqual(window)
        }
        // The model was told why a read was not answered.
        const last = JSON.parse(chat.requests.at(-1)!.body) as { messages: Array<{ role: string; content: string | null }> }
        expect(last.messages.filter((m) => m.role === "tool" && String(m.content).includes("do not fit in this model's context window")).length).toBeGreaterThan(0)
      })
    ), { timeout: 60_000 })
})
