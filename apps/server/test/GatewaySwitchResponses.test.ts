/**
 * A provider switch from the gateway's Anthropic Messages endpoint to an `openai-responses` instance (issue 14 item 4,
 * docs/gateway.md "Routing and switching"). The conversion on its own (`GatewaySwitchResponses`: the history as
 * Responses input items, recorded Responses streams and whole answers from ../shared/provider-fixtures converted into
 * Anthropic's protocol whatever their cut, errors), and over real HTTP on loopback (an Anthropic upstream for
 * `claude-*`, a Responses one with a 32,000-token window for `gpt-*`, on SQLite and Postgres): a Claude Code-shaped
 * conversation switched fits (Baton's count of the sent body plus `max_output_tokens` within the window), the prompt
 * unchanged, the recorded calculator session's four answers (streamed and whole) reach the agent as Anthropic messages
 * with their `tool_use` calls, each call's result goes back as a `function_call_output`, and the switch back to the
 * Anthropic model sends the agent's body as it is, every message stored once. Also the upstream's `thread_read`
 * calls answered by the gateway, the overflow Baton cannot fit, and upstream errors (HTTP and in the stream).
 */
import type { Item } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { Database } from "@baton/persistence"
import { ThreadRead } from "@baton/orchestration"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import * as GatewayAnthropic from "../src/GatewayAnthropic.js"
import * as GatewaySwitch from "../src/GatewaySwitch.js"
import * as GatewaySwitchResponses from "../src/GatewaySwitchResponses.js"
import { adminToken, client, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"

const counter = TokenCounter.make()
const count = (t: string) => counter.count(t)
const usage = { input: 900, cacheWrite: 0, cacheRead: 300, output: 40 }
const window = 32_000

/** `../shared/provider-fixtures/openai-responses/` beside the repository. */
const fixtures = fileURLToPath(new URL("../../../../shared/provider-fixtures/openai-responses/", import.meta.url))

/** The event lines of a recorded stream, one array per response (a file may hold several, each from `response.created`). */
const recorded = (file: string): ReadonlyArray<ReadonlyArray<string>> => {
  const out: Array<Array<string>> = []
  for (const line of Fs.readFileSync(Path.join(fixtures, file), "utf8").split("\n").filter((l) => l.trim() !== "")) {
    if (line.includes("\"type\":\"response.created\"") || out.length === 0) out.push([])
    out.at(-1)!.push(line)
  }
  return out
}

/** A recorded stream framed as OpenAI frames it (SOURCES.md: `event: <type>\ndata: <json>\n\n`). */
const framed = (lines: ReadonlyArray<string>) => lines.map((l) => `event: ${/"type":"([^"]+)"/.exec(l)![1]}\ndata: ${l}\n\n`).join("")

/** The recorded calculator session: four responses (a call, a call, a call, the answer in eight text deltas). */
const calculator = recorded("openai-reasoning-encrypted-content.1.chunks.txt")

/** A recorded response's final `response` object (its `response.completed` event's), as a whole answer's body. */
const finalResponse = (lines: ReadonlyArray<string>) =>
  (JSON.parse(lines.find((l) => l.includes("\"type\":\"response.completed\""))!) as { response: Record<string, unknown> }).response

const streamReply = (lines: ReadonlyArray<string>): ModelApi.Reply => ({ status: 200, contentType: "text/event-stream", body: framed(lines) })

/** `n` words that do not repeat much (so they cost about as many tokens as real text). */
const words = (seed: number, n: number) => Array.from({ length: n }, (_, i) => `w${(seed * 7919 + i * 104_729) % 100_003}`).join(" ")

type Message = { readonly role: string; readonly content: unknown }

/** A long Claude Code-like history (about 80,000 tokens): 10 long exchanges, then 10 Bash rounds with long outputs. */
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
const bash = { name: "Bash", description: "Run a command", input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } }
const calc = {
  name: "calculator",
  description: "Compute a op b",
  input_schema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" }, op: { type: "string" } }, required: ["a", "b", "op"] }
}
const tools = [bash, calc]

/** An agent's `/v1/messages` request (the Baton token as `x-api-key`, the session header Claude Code sends). */
const messages = (body: unknown) =>
  HttpClientRequest.post("/v1/messages?beta=true").pipe(
    HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "sess-responses", "user-agent": "claude-cli/2.1.332 (external, sdk-cli)" }),
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

/** The SSE event types of an Anthropic stream, in order. */
const eventTypes = (text: string) => [...text.matchAll(/^event: (\S+)$/gm)].map((m) => m[1])

/** A translated stream, its bytes fed `size` at a time. */
const translate = (body: string, size: number, hidden: ReadonlySet<string> = new Set()) => {
  const bytes = new TextEncoder().encode(body)
  const t = GatewaySwitchResponses.streamTranslator("gpt-x", hidden)
  let out = ""
  for (let i = 0; i < bytes.length; i += size) out += t.push(bytes.slice(i, i + size))
  return out + t.end()
}

/** A gateway with `claude-*` on an Anthropic loopback upstream and `gpt-*` on a Responses one (32,000 tokens). */
const withGateway = <A, E, R>(test: (anthropic: ModelApi.ModelApi, responses: ModelApi.ModelApi) => Effect.Effect<A, E, R>, dialect: "SQLite" | "Postgres" = "SQLite") =>
  Effect.scoped(Effect.gen(function*() {
    const anthropic = yield* ModelApi.start
    const responses = yield* ModelApi.start
    const sqlite = yield* settingsFor(
      [
        instance("anthropic", "anthropic-messages", anthropic, { toolResultOffload: false }),
        instance("responses", "openai-responses", responses, { contextWindow: window, autoCompactThreshold: null, maxOutputTokens: 4_096 })
      ],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: [{ model: "claude-*", provider: "anthropic" }, { model: "gpt-*", provider: "responses" }] } }
    )
    const settings = dialect === "SQLite"
      ? sqlite
      : { ...sqlite, database: { _tag: "postgres" as const, url: Context.get(yield* Layer.build(Database.layerPgSchema()), Database.PgSchemaUrl) } }
    return yield* test(anthropic, responses).pipe(Effect.provide(serveSettings(settings)))
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
      text += answer.output.replace(/\n\[characters \d+-\d+ of \d+; [^\n]*\]$/, "")
      const next = /the next page: .*"offset":(\d+)/.exec(answer.output)
      if (next === null) return text
      offset = Number(next[1])
    }
  })

type SentItem = { type?: string; role?: string; content?: unknown; call_id?: string; name?: string; arguments?: string; output?: string }
type Sent = { model: string; instructions?: string; max_output_tokens: number; input: Array<SentItem>; tools?: Array<{ name: string }>; store: boolean; stream?: boolean }

/** A user message item with one text (as the switch writes one). */
const userItem = (text: string) => ({ type: "message", role: "user", content: [{ type: "input_text", text }] })

describe("GatewaySwitchResponses (the conversion)", () => {
  it("converts the history into Responses input items: instructions, messages, function_call and function_call_output, tools as functions", () => {
    const body = {
      model: "gpt-x",
      max_tokens: 32_000,
      stream: true,
      system,
      tools: [bash, { type: "web_search_20250305", name: "web_search" }],
      tool_choice: { type: "tool", name: "Bash", disable_parallel_tool_use: true },
      temperature: 0.5,
      stop_sequences: ["END"],
      messages: [
        { role: "user", content: "list files" },
        { role: "assistant", content: [{ type: "thinking", thinking: "hm", signature: "s" }, { type: "text", text: "Listing." }, { type: "tool_use", id: "toolu_1", name: "Bash", input: { command: "ls" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "a.ts" }] }, { type: "text", text: "and then?" }, { type: "image", source: {} }] },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_2", name: "Bash", input: { command: "false" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_2", content: "exit 1", is_error: true }] },
        { role: "system", content: "a reminder" }
      ]
    }
    const result = GatewaySwitchResponses.toResponses({ body, windowTokens: window, maxOutputTokens: 4_096, count, pointer: () => "unused" })
    expect(result._tag).toBe("fits")
    if (result._tag !== "fits") return
    expect(result.body).toEqual({
      model: "gpt-x",
      instructions: "You are Claude Code.",
      max_output_tokens: 4_096,
      store: false,
      stream: true,
      temperature: 0.5,
      tools: [{ type: "function", name: "Bash", description: "Run a command", parameters: bash.input_schema, strict: false }],
      tool_choice: { type: "function", name: "Bash" },
      parallel_tool_calls: false,
      input: [
        userItem("list files"),
        { type: "message", role: "assistant", content: [{ type: "output_text", text: "Listing." }] },
        { type: "function_call", call_id: "toolu_1", name: "Bash", arguments: "{\"command\":\"ls\"}" },
        { type: "function_call_output", call_id: "toolu_1", output: "a.ts" },
        userItem("and then?\n\n[image]"),
        { type: "function_call", call_id: "toolu_2", name: "Bash", arguments: "{\"command\":\"false\"}" },
        { type: "function_call_output", call_id: "toolu_2", output: "Error: exit 1" },
        { type: "message", role: "system", content: [{ type: "input_text", text: "a reminder" }] }
      ]
    })
    expect(result.fit).toMatchObject({ stubbed: [], leftOut: 0, outputTokens: 4_096 })
  })

  it("fits a long conversation as the Chat switch does, counting what goes out: the sent body and the output room within the window", () => {
    const body = { model: "gpt-x", max_tokens: 32_000, system, tools, messages: [...longHistory(), { role: "user", content: "the prompt" }] }
    const chat = GatewaySwitch.toChat({ body, windowTokens: window, maxOutputTokens: 4_096, count, pointer: (n) => `<deferred_history>${n} left out</deferred_history>` })
    const result = GatewaySwitchResponses.toResponses({ body, windowTokens: window, maxOutputTokens: 4_096, count, pointer: (n) => `<deferred_history>${n} left out</deferred_history>` })
    expect(result._tag).toBe("fits")
    expect(chat._tag).toBe("fits")
    if (result._tag !== "fits" || chat._tag !== "fits") return
    expect(count(JSON.stringify(body))).toBeGreaterThan(2 * window)
    expect(count(JSON.stringify(result.body)) + result.fit.outputTokens).toBeLessThanOrEqual(window)
    expect(result.fit.tokensAfter).toBeLessThanOrEqual(result.fit.limit)
    // The same fit (stubs, then deferral): the same results stubbed, about as many messages left out.
    expect(result.fit.stubbed).toEqual(chat.fit.stubbed)
    expect(result.fit.stubbed).toHaveLength(10)
    expect(Math.abs(result.fit.leftOut - chat.fit.leftOut)).toBeLessThanOrEqual(2)
    const input = (result.body as unknown as Sent).input
    expect(input[0]).toEqual(userItem(`<deferred_history>${result.fit.leftOut} left out</deferred_history>`))
    expect(input.at(-1)).toEqual(userItem("the prompt"))
  })

  it("counts each message as the Responses items it becomes (larger than its Chat form): many short messages are fitted for what goes out", () => {
    // 160 short messages: under a 4,000-token window's limit as Chat messages, over it as Responses items.
    const history = Array.from({ length: 160 }, (_, i) => ({ role: i % 2 === 0 ? "user" : "assistant", content: `ok ${i}` }))
    const body = { model: "gpt-x", max_tokens: 1_000, system, messages: [...history, { role: "user", content: "the prompt" }] }
    const small = 4_000
    const pointer = (n: number) => `<deferred_history>${n} left out</deferred_history>`
    const chat = GatewaySwitch.toChat({ body, windowTokens: small, maxOutputTokens: 1_000, count, pointer })
    const result = GatewaySwitchResponses.toResponses({ body, windowTokens: small, maxOutputTokens: 1_000, count, pointer })
    if (result._tag !== "fits" || chat._tag !== "fits") throw new Error("expected both to fit")
    expect(chat.fit.leftOut).toBe(0)
    expect(result.fit.leftOut).toBeGreaterThan(0)
    const sent = result.body as unknown as Sent
    expect(count(JSON.stringify(result.body)) + sent.max_output_tokens).toBeLessThanOrEqual(small)
    // The fit's count is exactly that of the items sent (and of the system prompt as an item, the tools, 16 for the frame).
    const items = sent.input.reduce((n, item) => n + GatewaySwitchResponses.itemTokens(count, item), 0)
    expect(result.fit.tokensAfter).toBe(16 + GatewaySwitchResponses.itemTokens(count, { type: "message", role: "system", content: [{ type: "input_text", text: "You are Claude Code." }] }) + items)
    expect(sent.input.at(-1)).toEqual(userItem("the prompt"))
  })

  it("converts the recorded calculator session's streams into Anthropic's events whatever their cut: calls as tool_use blocks, text deltas as they come, usage", () => {
    // Response 1: a reasoning item (left out) and a function call.
    const first = framed(calculator[0]!)
    const whole = translate(first, first.length)
    for (const size of [1, 7, 64, 1_000]) expect(translate(first, size)).toBe(whole)
    expect(eventTypes(whole)).toEqual(["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"])
    const reply = assembled(whole)
    expect(reply.messages[0]!.message).toEqual({
      role: "assistant",
      content: [{ type: "tool_use", id: "call_AB6AaRZ1FYZB2RwS6A5vbdqn", name: "calculator", input: { a: 12, b: 7, op: "add" } }]
    })
    expect(reply.tokens).toEqual({ inputTokens: 134, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 28 })
    expect(whole).toContain("\"stop_reason\":\"tool_use\"")
    expect(whole).toContain("\"id\":\"msg_resp_01830d662ab3856501693c321345c88190b0de00f3b9975691\"")

    // Response 4: the answer in eight text deltas, each passed on as one.
    const last = framed(calculator[3]!)
    const text = translate(last, 13)
    expect(eventTypes(text).filter((t) => t === "content_block_delta")).toHaveLength(8)
    expect(assembled(text).messages[0]!.message).toEqual({ role: "assistant", content: [{ type: "text", text: "The final result is **570**." }] })
    expect(text).toContain("\"stop_reason\":\"end_turn\"")

    // The compaction recording: text deltas, then an encrypted compaction item (left out); cached input as cache reads.
    const compaction = assembled(translate(framed(recorded("openai-compaction.1.chunks.txt")[0]!), 4_096))
    const content = (compaction.messages[0]!.message as Message).content as ReadonlyArray<{ type: string; text: string }>
    expect(content.map((b) => b.type)).toEqual(["text"])
    expect(content[0]!.text.startsWith("### T")).toBe(true)
    expect(compaction.tokens).toEqual({ inputTokens: 51_097 - 49_792, cacheWriteTokens: 0, cacheReadTokens: 49_792, outputTokens: 2_505 })

    // A stream cut before its terminal event: an error event, no message_stop.
    const cut = translate(first.slice(0, first.indexOf("response.output_item.done")), 50)
    expect(cut).toContain("event: error")
    expect(cut).not.toContain("message_stop")
  })

  it("converts recorded whole answers (the parallel-call wrapper unwrapped, reasoning left out) and stream failures", () => {
    const parallel = JSON.parse(Fs.readFileSync(Path.join(fixtures, "parallel-tool-call-wrapper.1.json"), "utf8")) as unknown
    const message = GatewaySwitchResponses.messageOf(parallel, "gpt-x")
    expect(message).toMatchObject({
      id: "msg_resp_parallel",
      content: [
        { type: "tool_use", id: "call_parallel_0", name: "weather", input: { location: "San Francisco" } },
        { type: "tool_use", id: "call_parallel_1", name: "cityAttractions", input: { city: "Rome" } }
      ],
      stop_reason: "tool_use"
    })
    // The same message as a stream's events (an agent that asked for a stream of an upstream that answered whole).
    expect(assembled(GatewaySwitch.eventsOf(message)).messages[0]!.message).toEqual({ role: "assistant", content: message.content })
    const reasoning = JSON.parse(Fs.readFileSync(Path.join(fixtures, "openai-reasoning-encrypted-content.1.json"), "utf8")) as unknown
    expect(GatewaySwitchResponses.messageOf(reasoning, "gpt-x")).toMatchObject({
      content: [{ type: "text", text: "12 + 7 = 19\n19 × 3 = 57\n57 × 10 = 570\n\nFinal result: 570" }],
      stop_reason: "end_turn",
      usage: { input_tokens: 865, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 163 }
    })
    // Cut by the output limit: max_tokens; a call the limit cut off (`status: "incomplete"`) is not passed on to be run.
    const cutCall = {
      id: "r",
      status: "incomplete",
      incomplete_details: { reason: "max_output_tokens" },
      output: [
        { type: "message", role: "assistant", content: [{ type: "output_text", text: "Writing." }] },
        { type: "function_call", call_id: "call_cut", name: "Write", arguments: "{\"content\":\"abc", status: "incomplete" }
      ]
    }
    expect(GatewaySwitchResponses.messageOf(cutCall, "gpt-x")).toMatchObject({ content: [{ type: "text", text: "Writing." }], stop_reason: "max_tokens" })
    const cutStream = translate(framed([
      JSON.stringify({ type: "response.created", response: { id: "r" } }),
      ...cutCall.output.map((item, i) => JSON.stringify({ type: "response.output_item.done", output_index: i, item })),
      JSON.stringify({ type: "response.incomplete", response: cutCall })
    ]), 11)
    expect(assembled(cutStream).messages[0]!.message).toEqual({ role: "assistant", content: [{ type: "text", text: "Writing." }] })
    expect(cutStream).toContain("\"stop_reason\":\"max_tokens\"")
    // A whole answer that reports a failure: its error in Anthropic's shape (not an empty message).
    expect(GatewaySwitchResponses.failureOf({ id: "r", status: "failed", error: { code: "rate_limit_exceeded", message: "slow down" }, output: [] }))
      .toEqual({ status: 429, body: { type: "error", error: { type: "rate_limit_error", message: "slow down" } } })
    expect(GatewaySwitchResponses.failureOf(parallel)).toBeNull()

    // response.failed with an overflow: Anthropic's prompt-is-too-long error event; any other failure its error type.
    const failed = (error: Record<string, unknown>) =>
      translate(framed([JSON.stringify({ type: "response.created", response: { id: "r1" } }), JSON.stringify({ type: "response.failed", response: { id: "r1", status: "failed", error } })]), 9)
    const overflow = failed({ code: "context_length_exceeded", message: "Your input exceeds the context window of this model." })
    expect(overflow).toContain("event: error")
    expect(overflow).toContain("\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: ")
    expect(overflow).not.toContain("message_stop")
    expect(failed({ code: "rate_limit_exceeded", message: "slow down" })).toContain("\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow down\"}")
    expect(translate(framed([JSON.stringify({ type: "error", code: "server_error", message: "boom" })]), 5)).toContain("\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}")
  })

  it("a hop whose only calls are hidden leaves the message open; its output goes back as input items; the continuation joins the message", () => {
    const read = ModelApi.answer("openai-responses", "Let me look.", usage, [{ id: "call_r", name: "thread_read", arguments: "{\"refs\":\"tool:t\"}" }])
    const t = GatewaySwitchResponses.streamTranslator("gpt-x", new Set(["thread_read"]))
    const first = t.push(new TextEncoder().encode(read.body)) + t.end()
    expect(first).not.toContain("message_stop")
    expect(first).not.toContain("thread_read")
    expect(t.hidden()).toEqual([{ id: "call_r", arguments: "{\"refs\":\"tool:t\"}" }])
    expect(t.assistant()).toEqual([
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "Let me look." }] },
      { type: "function_call", call_id: "call_r", name: "thread_read", arguments: "{\"refs\":\"tool:t\"}" }
    ])
    t.next()
    const second = t.push(new TextEncoder().encode(ModelApi.answer("openai-responses", "Found it.", usage).body)) + t.end()
    expect(eventTypes(first + second).filter((e) => e === "message_start")).toHaveLength(1)
    const reply = assembled(first + second)
    expect((reply.messages[0]!.message as Message).content).toEqual([{ type: "text", text: "Let me look." }, { type: "text", text: "Found it." }])
    expect(reply.tokens).toEqual({ inputTokens: 1_800, cacheWriteTokens: 0, cacheReadTokens: 600, outputTokens: 80 })
    expect(t.hops()).toEqual({ count: 2, carried: 1_200 })
  })
})

/**
 * A Responses stream as OpenAI frames it of responses `parts` spliced one after the other (each its `response.created`,
 * its items' `output_item.done` events, then its `response.completed` unless `cut`), sequence numbers going on.
 */
const spliced = (parts: ReadonlyArray<{ readonly id: string; readonly items: ReadonlyArray<Record<string, unknown>>; readonly cut?: boolean }>) => {
  let seq = 0
  const framed = (e: Record<string, unknown>) => `event: ${String(e.type)}\ndata: ${JSON.stringify({ ...e, sequence_number: seq++ })}\n\n`
  return parts.map(({ id, items, cut }) =>
    [
      framed({ type: "response.created", response: { id, status: "in_progress", output: [] } }),
      ...items.map((item, i) => framed({ type: "response.output_item.done", output_index: i, item })),
      cut === true ? "" : framed({ type: "response.completed", response: { id, status: "completed", output: items, usage: { input_tokens: 10, output_tokens: 5 } } })
    ].join("")
  ).join("")
}
const textItem = (id: string, text: string) => ({ type: "message", id, role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] })
const readItem = { type: "function_call", id: "fc_read", call_id: "call_read", name: "thread_read", arguments: "{\"refs\":\"tool:t\"}", status: "completed" }

// Found in review: a `response.created` of another response mid-stream (a stream spliced after a retry upstream) was
// read as more of the same message: both attempts' text went out as one answer, and a hidden thread_read call the
// first attempt made was answered and continued upstream in place of the second response's answer.
describe("GatewaySwitchResponses.streamTranslator, a restarted upstream stream", () => {
  it("a first attempt of which nothing reached the agent (a hidden thread_read call) is dropped: the message is the second response's", () => {
    const t = GatewaySwitchResponses.streamTranslator("gpt-x", new Set(["thread_read"]))
    const out = t.push(new TextEncoder().encode(spliced([{ id: "resp_first", items: [readItem], cut: true }, { id: "resp_second", items: [textItem("msg_2", "Hello, World!")] }]))) + t.end()
    expect(t.hidden()).toBeNull()
    expect(eventTypes(out).filter((e) => e === "message_start" || e === "message_stop" || e === "error")).toEqual(["message_start", "message_stop"])
    expect((assembled(out).messages[0]!.message as Message).content).toEqual([{ type: "text", text: "Hello, World!" }])
  })

  it("a repeated response.created of the same response changes nothing", () => {
    const t = GatewaySwitchResponses.streamTranslator("gpt-x")
    const body = spliced([{ id: "resp_one", items: [textItem("msg_1", "Hello")], cut: true }, { id: "resp_one", items: [] }])
    const out = t.push(new TextEncoder().encode(body)) + t.end()
    expect((assembled(out).messages[0]!.message as Message).content).toEqual([{ type: "text", text: "Hello" }])
  })

  it("a restart after part of the first attempt reached the agent: the answer ends with an error event, not as two answers in one", () => {
    const t = GatewaySwitchResponses.streamTranslator("gpt-x")
    const out = t.push(new TextEncoder().encode(spliced([
      { id: "resp_first", items: [textItem("msg_1", "Retracted words.")], cut: true },
      { id: "resp_second", items: [textItem("msg_2", "Hello, World!")] }
    ]))) + t.end()
    expect(eventTypes(out).at(-1)).toBe("error")
    expect(out).not.toContain("message_stop")
    expect(out).not.toContain("Hello, World!")
  })
})

describe("Gateway, a provider switch (Anthropic Messages agent, openai-responses upstream)", () => {
  for (const dialect of ["SQLite", "Postgres"] as const) {
    it.live(`${dialect}: a long Claude Code conversation switched to a 32,000-token Responses window fits, runs the recorded calculator session (streamed and whole), and switches back with nothing lost`, () =>
      withGateway((anthropic, responses) =>
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

          // 2. Resumed on the Responses model: the first recorded answer (a calculator call), streamed.
          responses.enqueue(streamReply(calculator[0]!))
          const prompt = { role: "user", content: [{ type: "text", text: "now, on the other model: what is (12 + 7) * 3 * 10? use the calculator" }] }
          let agentMessages: Array<unknown> = [...body1.messages, reply1, prompt]
          const second = yield* raw(messages({ ...base, model: "gpt-5", messages: agentMessages }))
          expect(second.status).toBe(200)
          expect(second.headers["content-type"]).toContain("text/event-stream")
          expect(eventTypes(second.text)).toEqual(["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"])
          const reply2 = assembled(second.text)
          expect(reply2.messages[0]!.message).toEqual({ role: "assistant", content: [{ type: "tool_use", id: "call_AB6AaRZ1FYZB2RwS6A5vbdqn", name: "calculator", input: { a: 12, b: 7, op: "add" } }] })
          expect(reply2.tokens).toEqual({ inputTokens: 134, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 28 })

          expect(responses.requests).toHaveLength(1)
          const sent = responses.requests[0]!
          expect(sent.url).toBe("/v1/responses")
          expect(sent.headers["authorization"]).toBe(`Bearer ${marker}`)
          expect(sent.headers["x-api-key"]).toBeUndefined()
          const out = JSON.parse(sent.body) as Sent
          // The agent's request is about 80,000 tokens; what went out fits the window with the output room.
          expect(count(JSON.stringify({ ...base, model: "gpt-5", messages: agentMessages }))).toBeGreaterThan(2 * window)
          expect(count(sent.body) + out.max_output_tokens).toBeLessThanOrEqual(window)
          expect(out).toMatchObject({ model: "gpt-5", instructions: "You are Claude Code.", store: false, stream: true, max_output_tokens: 4_096 })
          expect(out.tools!.map((t) => t.name)).toEqual(["Bash", "calculator", "thread_read"])
          // The prompt unchanged, last.
          expect(out.input.at(-1)).toEqual(userItem("now, on the other model: what is (12 + 7) * 3 * 10? use the calculator"))
          // Stubs for every tool output, each readable by its ref.
          const threads = (yield* (yield* client()).threads.list({ urlParams: {} })).threads
          expect(threads).toHaveLength(1)
          const threadId = threads[0]!.id
          const results = out.input.filter((i) => i.type === "function_call_output")
          expect(results.map((i) => i.call_id)).toEqual(Array.from({ length: 10 }, (_, i) => `toolu_${i}`))
          for (const [i, r] of results.entries()) {
            expect(r.output).toMatch(new RegExp(`^\\[offloaded, thread_read tool:toolu_${i}\\]\\nBash cat part${i}\\.txt: [\\d,]+ chars$`))
            expect(yield* readAll(reader, threadId, `tool:toolu_${i}`)).toContain(`output ${i} ${words(300 + i, 1_200)}`)
          }
          expect(out.input.filter((i) => i.type === "function_call").map((i) => [i.call_id, i.name])).toEqual(Array.from({ length: 10 }, (_, i) => [`toolu_${i}`, "Bash"]))
          // Then deferral: a pointer first, whose refs read every left-out message back.
          const pointer = ((out.input[0]!.content as Array<{ text: string }>)[0]!).text
          expect(out.input[0]!.role).toBe("user")
          expect(pointer).toContain(`<deferred_history thread="${threadId}">`)
          expect(sent.body).not.toContain(`start ${words(1, 600)}`)
          const readBack = yield* readAll(reader, threadId, (JSON.parse(/thread_read (\{.*\})/.exec(pointer)![1]!) as { refs: string }).refs)
          expect(readBack).toContain(`start ${words(1, 600)}`)
          expect(readBack).toContain(`answer 0 ${words(100, 600)}`)

          // 3. The agent ran the call: its result goes back as a function_call_output after the call, then the second
          //    recorded answer (another call), streamed.
          const toolRound = (reply: Message, id: string, result: string) => [reply, { role: "user", content: [{ type: "tool_result", tool_use_id: id, content: result }] }]
          agentMessages = [...agentMessages, ...toolRound(reply2.messages[0]!.message as Message, "call_AB6AaRZ1FYZB2RwS6A5vbdqn", "19")]
          responses.enqueue(streamReply(calculator[1]!))
          const third = yield* raw(messages({ ...base, model: "gpt-5", messages: agentMessages }))
          const reply3 = assembled(third.text).messages[0]!.message as Message
          expect(reply3.content).toEqual([{ type: "tool_use", id: "call_Q6pW65MUgW9vF59BmItYGos3", name: "calculator", input: { a: 19, b: 3, op: "multiply" } }])
          const out3 = JSON.parse(responses.requests[1]!.body) as Sent
          expect(out3.input.slice(-3)).toEqual([
            userItem("now, on the other model: what is (12 + 7) * 3 * 10? use the calculator"),
            { type: "function_call", call_id: "call_AB6AaRZ1FYZB2RwS6A5vbdqn", name: "calculator", arguments: "{\"a\":12,\"b\":7,\"op\":\"add\"}" },
            { type: "function_call_output", call_id: "call_AB6AaRZ1FYZB2RwS6A5vbdqn", output: "19" }
          ])
          expect(count(responses.requests[1]!.body) + out3.max_output_tokens).toBeLessThanOrEqual(window)

          // 4. Whole: the agent asks without a stream; the upstream answers the third recorded response whole.
          agentMessages = [...agentMessages, ...toolRound(reply3, "call_Q6pW65MUgW9vF59BmItYGos3", "57")]
          responses.enqueue({ status: 200, contentType: "application/json", body: JSON.stringify(finalResponse(calculator[2]!)) })
          const fourth = yield* raw(messages({ ...base, stream: false, model: "gpt-5", messages: agentMessages }))
          expect(fourth.status).toBe(200)
          expect(fourth.body).toEqual({
            id: "msg_resp_01830d662ab3856501693c3216bef88190bf0e034cff24137b",
            type: "message",
            role: "assistant",
            model: "gpt-5",
            content: [{ type: "tool_use", id: "call_Zl5vIMnD7dVAjgU6FkhmiCZh", name: "calculator", input: { a: 57, b: 10, op: "multiply" } }],
            stop_reason: "tool_use",
            stop_sequence: null,
            usage: { input_tokens: 260, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 26 }
          })
          expect((JSON.parse(responses.requests[2]!.body) as Sent).stream).toBeUndefined()
          const reply4 = { role: "assistant", content: (fourth.body as Message).content } as Message

          // 5. The last recorded answer: text in eight deltas, passed on as they come.
          agentMessages = [...agentMessages, ...toolRound(reply4, "call_Zl5vIMnD7dVAjgU6FkhmiCZh", "570")]
          responses.enqueue(streamReply(calculator[3]!))
          const fifth = yield* raw(messages({ ...base, model: "gpt-5", messages: agentMessages }))
          expect(eventTypes(fifth.text).filter((t) => t === "content_block_delta")).toHaveLength(8)
          const reply5 = assembled(fifth.text).messages[0]!.message as Message
          expect(reply5.content).toEqual([{ type: "text", text: "The final result is **570**." }])
          expect(responses.requests).toHaveLength(4)
          for (const r of responses.requests) expect(count(r.body) + (JSON.parse(r.body) as Sent).max_output_tokens).toBeLessThanOrEqual(window)

          // 6. Back on the Anthropic model: the agent's body as sent, the other model's turns as the agent received them.
          anthropic.enqueue(ModelApi.answer("anthropic-messages", "Back.", usage))
          const body6 = { ...base, model: "claude-sonnet-4-5", messages: [...agentMessages, reply5, { role: "user", content: "thanks, back on claude" }] }
          const sixth = yield* raw(messages(body6))
          expect(sixth.status).toBe(200)
          expect(anthropic.requests).toHaveLength(2)
          expect(anthropic.requests[1]!.body).toBe(JSON.stringify(body6))

          // The record: six runs on the instances used; every message once.
          const api = yield* client()
          const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
          expect(runs.map((r) => r.status)).toEqual(Array(6).fill("completed"))
          const views = yield* Effect.forEach(runs, (r) => api.runs.get({ path: { runId: r.id }, urlParams: {} }))
          expect(views.map((v) => v.cost?.providerInstance)).toEqual(["anthropic", "responses", "responses", "responses", "responses", "anthropic"])
          expect(views[1]!.cost).toMatchObject({ inputTokens: 134, cacheReadTokens: 0, outputTokens: 28, providerInstance: "responses" })
          // Besides the messages, the summaries the gateway may have written of the fit's deferred history (the fit's
          // third step, written after a deferring request's answer: GatewaySwitchSummary.test.ts).
          const items = (yield* allItems(threadId)).filter((i) => i.kind !== "summary")
          expect(new Set(items.map((i) => i.messageId)).size).toBe(body6.messages.length + 1)
          for (const [id, result] of [["call_AB6AaRZ1FYZB2RwS6A5vbdqn", "19"], ["call_Q6pW65MUgW9vF59BmItYGos3", "57"], ["call_Zl5vIMnD7dVAjgU6FkhmiCZh", "570"]] as const) {
            expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === id)).toHaveLength(1)
            expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === id).map((i) => i.text)).toEqual([result])
          }
          expect(items.filter((i) => i.kind === "assistant_message" && i.text === "The final result is **570**.")).toHaveLength(1)
          expect(items.filter((i) => i.kind === "user_message" && i.text === "now, on the other model: what is (12 + 7) * 3 * 10? use the calculator")).toHaveLength(1)
          expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === "toolu_3")).toHaveLength(1)
          const events = threadEvents((yield* raw(HttpClientRequest.get(`/threads/${threadId}/events?follow=false`).pipe(HttpClientRequest.bearerToken(adminToken)))).text)
          expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
          expect(events.filter((e) => e.type === "gateway.usage").map((e) => {
            const p = e.payload as { providerInstance: string; windowTokens: number | null }
            return [p.providerInstance, p.windowTokens]
          })).toEqual([["anthropic", 200_000], ...Array(4).fill(["responses", window]), ["anthropic", 200_000]])
        }), dialect
      ), { timeout: 120_000 })
  }

  it.live("the switched upstream's thread_read calls are answered by the gateway, streamed and whole; the agent never sees them", () =>
    withGateway((_anthropic, responses) =>
      Effect.gen(function*() {
        const output = `hello-output ${words(9, 50)}`
        const history = [
          { role: "user", content: "run it" },
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_a", name: "Bash", input: { command: "echo hello" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_a", content: output }] }
        ]
        const read = { id: "call_r", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_a" }) }
        // Streamed: the first hop's text reaches the agent, its call does not; the continuation joins the message.
        responses.enqueue(ModelApi.answer("openai-responses", "Let me read.", usage, [read]), ModelApi.answer("openai-responses", "It said hello.", usage))
        const body = { model: "gpt-5", max_tokens: 1_000, stream: true, system, tools: [bash], messages: history }
        const streamed = yield* raw(messages(body))
        expect(streamed.status).toBe(200)
        expect(streamed.text.match(/event: message_start/g)).toHaveLength(1)
        expect(streamed.text).not.toContain("thread_read")
        const reply = assembled(streamed.text)
        expect((reply.messages[0]!.message as Message).content).toEqual([{ type: "text", text: "Let me read." }, { type: "text", text: "It said hello." }])
        expect(reply.tokens).toEqual({ inputTokens: 1_800, cacheWriteTokens: 0, cacheReadTokens: 600, outputTokens: 80 })
        expect(responses.requests).toHaveLength(2)
        const second = JSON.parse(responses.requests[1]!.body) as Sent
        expect(second.input.slice(-3, -1)).toEqual([
          { type: "message", role: "assistant", content: [{ type: "output_text", text: "Let me read." }] },
          { type: "function_call", call_id: "call_r", name: "thread_read", arguments: read.arguments }
        ])
        expect(second.input.at(-1)!.type).toBe("function_call_output")
        expect(second.input.at(-1)!.call_id).toBe("call_r")
        expect(second.input.at(-1)!.output).toContain(output)

        // Whole: the agent gets the last answer, with every hop's usage.
        const whole = (id: string, text: string, calls: ReadonlyArray<typeof read>) => ({
          status: 200,
          contentType: "application/json",
          body: JSON.stringify({
            id,
            status: "completed",
            output: [
              ...(text === "" ? [] : [{ type: "message", id: `msg_${id}`, role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] }]),
              ...calls.map((c) => ({ type: "function_call", id: `fc_${c.id}`, call_id: c.id, name: c.name, arguments: c.arguments, status: "completed" }))
            ],
            usage: { input_tokens: 100, input_tokens_details: { cached_tokens: 40 }, output_tokens: 5 }
          })
        })
        responses.enqueue(whole("resp_1", "", [read]), whole("resp_2", "Read: hello.", []))
        const again = yield* raw(messages({ ...body, stream: false, messages: [...history, reply.messages[0]!.message, { role: "user", content: "and again" }] }))
        expect(again.status).toBe(200)
        expect(again.body).toMatchObject({ id: "msg_resp_2", content: [{ type: "text", text: "Read: hello." }], stop_reason: "end_turn", usage: { input_tokens: 120, cache_read_input_tokens: 80, output_tokens: 10 } })
        expect(responses.requests).toHaveLength(4)
        expect(responses.requests[3]!.body).toContain(JSON.stringify(output).slice(1, -1))

        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        const items = yield* allItems(threadId)
        expect(items.filter((i) => i.toolName === "thread_read")).toEqual([])
        expect(items.filter((i) => i.kind === "assistant_message").map((i) => i.text)).toEqual(["Let me read.", "It said hello.", "Read: hello."])
        const events = threadEvents((yield* raw(HttpClientRequest.get(`/threads/${threadId}/events?follow=false`).pipe(HttpClientRequest.bearerToken(adminToken)))).text)
        expect(events.filter((e) => e.type === "gateway.usage").map((e) => {
          const p = e.payload as { inputTokens: number; cacheReadTokens: number; carriedTokens?: number }
          return [p.inputTokens + p.cacheReadTokens, p.carriedTokens]
        })).toEqual([[2_400, 1_200], [200, 100]])
      })
    ), { timeout: 60_000 })

  it.live("upstream errors in Anthropic's shape (HTTP and in the stream); overflows as the prompt-is-too-long 400, Baton's own never sent", () =>
    withGateway((_anthropic, responses) =>
      Effect.gen(function*() {
        const body = { model: "gpt-5", max_tokens: 1_000, system, messages: [{ role: "user", content: "hi" }] }
        responses.enqueue({ status: 429, contentType: "application/json", body: JSON.stringify({ error: { message: "Rate limit reached for gpt-5", type: "requests", param: null, code: "rate_limit_exceeded" } }) })
        const limited = yield* raw(messages(body))
        expect(limited.status).toBe(429)
        expect(limited.body).toEqual({ type: "error", error: { type: "rate_limit_error", message: "Rate limit reached for gpt-5" } })

        // The upstream's overflow (SOURCES.md's recorded body), whole: the prompt-is-too-long 400 with its numbers.
        responses.enqueue({
          status: 400,
          contentType: "application/json",
          body: JSON.stringify({ error: { message: "This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens. Please reduce the length of the messages.", type: "invalid_request_error", param: "messages", code: "context_length_exceeded" } })
        })
        const over = yield* raw(messages({ ...body, messages: [{ role: "user", content: "hi again" }] }))
        expect(over.status).toBe(400)
        expect(over.body).toEqual({ type: "error", error: { type: "invalid_request_error", message: "prompt is too long: 8227 tokens > 8192 maximum" } })

        // In the stream (response.failed): an Anthropic error event, no message_stop.
        responses.enqueue(streamReply([
          JSON.stringify({ type: "response.created", response: { id: "resp_f", status: "in_progress" } }),
          JSON.stringify({ type: "response.failed", response: { id: "resp_f", status: "failed", error: { code: "context_length_exceeded", message: "Your input exceeds the context window of this model. Please adjust your input and try again." } } })
        ]))
        const failed = yield* raw(messages({ ...body, stream: true, messages: [{ role: "user", content: "third" }] }))
        expect(failed.status).toBe(200)
        expect(failed.text).toContain("event: error")
        expect(failed.text).toContain("prompt is too long")
        expect(failed.text).not.toContain("message_stop")

        // A 2xx whole answer whose status is failed: its error, not an empty message.
        responses.enqueue({ status: 200, contentType: "application/json", body: JSON.stringify({ id: "resp_w", status: "failed", error: { code: "context_length_exceeded", message: "Your input exceeds the context window of this model." }, output: [] }) })
        const failedWhole = yield* raw(messages({ ...body, messages: [{ role: "user", content: "fourth" }] }))
        expect(failedWhole.status).toBe(400)
        expect((failedWhole.body as { error: { type: string; message: string } }).error).toMatchObject({ type: "invalid_request_error" })
        expect((failedWhole.body as { error: { message: string } }).error.message).toMatch(/^prompt is too long: /)

        // Baton's own overflow: the prompt alone is over the window; nothing goes out.
        const sentBefore = responses.requests.length
        const huge = yield* raw(messages({ ...body, max_tokens: 8_000, stream: true, messages: [{ role: "user", content: `paste ${words(7, 16_000)}` }] }))
        expect(huge.status).toBe(400)
        const [, tokens, maximum] = /^prompt is too long: (\d+) tokens > (\d+) maximum$/.exec((huge.body as { error: { message: string } }).error.message) ?? []
        expect(Number(tokens)).toBeGreaterThan(window)
        expect(Number(maximum)).toBeLessThan(window)
        expect(responses.requests).toHaveLength(sentBefore)

        const api = yield* client()
        const runs = (yield* Effect.forEach((yield* api.threads.list({ urlParams: {} })).threads, (t) => api.runs.list({ path: { threadId: t.id }, urlParams: {} }))).flatMap((r) => r.runs)
        expect(runs.map((r) => [r.status, r.failureCode]).sort()).toEqual([["failed", "overflow"], ["failed", "overflow"], ["failed", "overflow"], ["failed", "overflow"], ["failed", "provider_unavailable"]].sort())
      })
    ), { timeout: 60_000 })
})
