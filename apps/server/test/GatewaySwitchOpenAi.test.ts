/**
 * Provider switches between the two OpenAI protocols (issue 14 items 4 and 5, `GatewaySwitchOpenAi`): a Chat
 * Completions agent (pi, opencode, aider) whose model routes to an `openai-responses` instance, and a Responses agent
 * (Codex) whose model routes to an `openai-chat` one. The conversion on its own (the history both ways, recorded
 * OpenAI traffic from ../shared/provider-fixtures through the chained translators), and against loopback upstreams on
 * SQLite and Postgres: an ~80,000-token conversation fitted under a 32,000-token window (stubs, then a pointer, then
 * the `/offload` summary written after the first deferring request; the prompt unchanged; every left-out original
 * readable with `thread_read`), the answer streamed and whole in the agent's
 * protocol with its usage, the switch back sending the agent's body byte for byte, hidden `thread_read` rounds, and
 * the overflow and upstream errors as the agent's `context_length_exceeded` / error shapes.
 */
import { Database } from "@baton/persistence"
import { ThreadRead } from "@baton/orchestration"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import * as Fs from "node:fs"
import { fileURLToPath } from "node:url"
import * as GatewayChat from "../src/GatewayChat.js"
import * as GatewayResponses from "../src/GatewayResponses.js"
import * as GatewaySwitchWire from "../src/GatewaySwitchWire.js"
import { adminToken, client, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"
import { allItems, counter, eventually, readAll, window, words } from "./support/SwitchSummary.js"

type Json = Record<string, unknown>
const isRecord = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v)

/** OpenAI bills no cache writes. */
const usage = { input: 900, cacheWrite: 0, cacheRead: 300, output: 40 }
const count = (t: string) => counter.count(t)

/** `../shared/provider-fixtures/` beside the repository (recorded OpenAI traffic). */
const fixtures = fileURLToPath(new URL("../../../../shared/provider-fixtures/", import.meta.url))
const fixtureLines = (file: string) => Fs.readFileSync(`${fixtures}${file}`, "utf8").split("\n").filter((l) => l.trim() !== "")

/** The recorded Responses calculator session: one array of event lines per response. */
const calculator = (() => {
  const out: Array<Array<string>> = []
  for (const line of fixtureLines("openai-responses/openai-reasoning-encrypted-content.1.chunks.txt")) {
    if (line.includes("\"type\":\"response.created\"") || out.length === 0) out.push([])
    out.at(-1)!.push(line)
  }
  return out
})()
const responsesFramed = (lines: ReadonlyArray<string>) => lines.map((l) => `event: ${/"type":"([^"]+)"/.exec(l)![1]}\ndata: ${l}\n\n`).join("")
const chatFramed = (lines: ReadonlyArray<string>) => lines.map((l) => `data: ${l}\n\n`).join("") + "data: [DONE]\n\n"

/** A translator fed `body` in pieces of `size` bytes, then ended. */
const translate = (t: GatewaySwitchWire.Translator, body: string, size = 97) => {
  const bytes = new TextEncoder().encode(body)
  let out = ""
  for (let i = 0; i < bytes.length; i += size) out += t.push(bytes.slice(i, i + size))
  return out + t.end()
}

const assembledChat = (text: string) => {
  const a = GatewayChat.replyAssembler()
  a.push(new TextEncoder().encode(text))
  const outcome = a.outcome()
  if (outcome._tag !== "completed") throw new Error(`the answer did not complete: ${text.slice(0, 500)}`)
  return outcome.reply
}

const assembledResponses = (text: string) => {
  const a = GatewayResponses.replyAssembler()
  a.push(new TextEncoder().encode(text))
  const outcome = a.outcome()
  if (outcome._tag !== "completed") throw new Error(`the answer did not complete: ${text.slice(0, 500)}`)
  return outcome.reply
}

/** The events of a Responses SSE text, parsed. */
const responsesEvents = (text: string) => text.split("\n\n").filter((b) => b.trim() !== "").map((b) => JSON.parse(/^data: (.*)$/m.exec(b)![1]!) as Json)

// --- Chat Completions agent (pi-like) ---

type ChatMessage = { readonly role: string; readonly content: unknown; readonly tool_calls?: unknown; readonly tool_call_id?: string }

/** A long pi-like history (about 80,000 tokens): 10 exchanges of long text, then 10 bash rounds with long outputs. */
const longChatHistory = (): Array<ChatMessage> => {
  const out: Array<ChatMessage> = [{ role: "user", content: `start ${words(1, 600)}` }]
  for (let i = 0; i < 10; i++) {
    out.push({ role: "assistant", content: `answer ${i} ${words(100 + i, 600)}` })
    out.push({ role: "user", content: `question ${i} ${words(200 + i, 600)}` })
  }
  for (let i = 0; i < 10; i++) {
    out.push({ role: "assistant", content: `Running ${i}.`, tool_calls: [{ id: `call_${i}`, type: "function", function: { name: "bash", arguments: JSON.stringify({ command: `cat part${i}.txt` }) } }] })
    out.push({ role: "tool", tool_call_id: `call_${i}`, content: `output ${i} ${words(300 + i, 1_200)}` })
  }
  out.push({ role: "assistant", content: "Read them all." })
  return out
}
const chatSystem = { role: "system", content: "You are pi, a coding agent." }
const chatTools = [{ type: "function", function: { name: "bash", description: "Run a command", parameters: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } } }]

const chat = (body: unknown) =>
  HttpClientRequest.post("/v1/chat/completions").pipe(
    HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "x-session-id": "sess-openai-switch", "user-agent": "pi/0.30" }),
    HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
  )

// --- Responses agent (Codex-like) ---

type Input = Record<string, unknown>
const user = (text: string) => ({ type: "message", role: "user", content: [{ type: "input_text", text }] })
const developer = (text: string) => ({ type: "message", role: "developer", content: [{ type: "input_text", text }] })
const assistant = (text: string, id: string) => ({ type: "message", id, role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] })
const call = (callId: string, cmd: string) => ({ type: "function_call", id: `fc_${callId}`, call_id: callId, name: "exec_command", arguments: JSON.stringify({ cmd }) })
const output = (callId: string, text: string) => ({ type: "function_call_output", call_id: callId, output: text })

/** A long Codex-like input (about 80,000 tokens), reasoning items before each call (another provider's: left out). */
const longInput = (): Array<Input> => {
  const out: Array<Input> = [developer("<permissions instructions>sandboxed</permissions instructions>"), user(`start ${words(1, 600)}`)]
  for (let i = 0; i < 10; i++) {
    out.push(assistant(`answer ${i} ${words(100 + i, 600)}`, `msg_a${i}`))
    out.push(user(`question ${i} ${words(200 + i, 600)}`))
  }
  for (let i = 0; i < 10; i++) {
    out.push({ type: "reasoning", id: `rs_${i}`, summary: [], encrypted_content: "opaque" })
    out.push(call(`call_${i}`, `cat part${i}.txt`))
    out.push(output(`call_${i}`, `output ${i} ${words(300 + i, 1_200)}`))
  }
  out.push(assistant("Read them all.", "msg_last"))
  return out
}
const instructions = "You are Codex, a coding agent."
const responsesTools = [
  { type: "function", name: "exec_command", description: "Run a command", strict: false, parameters: { type: "object", properties: { cmd: { type: "string" } }, required: ["cmd"] } },
  { type: "custom", name: "apply_patch", description: "Apply a patch", format: { type: "grammar", syntax: "lark", definition: "start: /.+/" } }
]

const responses = (body: unknown) =>
  HttpClientRequest.post("/v1/responses").pipe(
    HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "session-id": "sess-codex-openai", "thread-id": "sess-codex-openai", "user-agent": "codex_exec/0.171.0" }),
    HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
  )

/**
 * A gateway with `gpt-*` on a Chat Completions loopback upstream and `o*` on a Responses one; the instance the agent
 * switches to (`small`) has the 32,000-token window, the other 200,000.
 */
const withGateway = <A, E, R>(small: "chat" | "responses", test: (chatApi: ModelApi.ModelApi, responsesApi: ModelApi.ModelApi) => Effect.Effect<A, E, R>, dialect: "SQLite" | "Postgres" = "SQLite") =>
  Effect.scoped(Effect.gen(function*() {
    const chatApi = yield* ModelApi.start
    const responsesApi = yield* ModelApi.start
    const fitted = { contextWindow: window, autoCompactThreshold: null, maxOutputTokens: 4_096 }
    const sqlite = yield* settingsFor(
      [
        instance("chat", "openai-chat", chatApi, small === "chat" ? fitted : { toolResultOffload: false }),
        instance("responses", "openai-responses", responsesApi, small === "responses" ? fitted : { toolResultOffload: false })
      ],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: [{ model: "gpt-*", provider: "chat" }, { model: "o*", provider: "responses" }] } }
    )
    const settings = dialect === "SQLite"
      ? sqlite
      : { ...sqlite, database: { _tag: "postgres" as const, url: Context.get(yield* Layer.build(Database.layerPgSchema()), Database.PgSchemaUrl) } }
    return yield* test(chatApi, responsesApi).pipe(Effect.provide(serveSettings(settings)))
  }))

describe("GatewaySwitchOpenAi (the conversion)", () => {
  it("a Chat Completions request as a Responses one: system as instructions, calls and results with the agent's ids, tools, tool_choice", () => {
    const body = {
      model: "o4",
      max_completion_tokens: 2_000,
      stream: true,
      stream_options: { include_usage: true },
      tools: chatTools,
      tool_choice: "required",
      parallel_tool_calls: false,
      temperature: 1.5,
      messages: [
        chatSystem,
        { role: "user", content: "list files" },
        { role: "assistant", content: null, tool_calls: [{ id: "call.1", type: "function", function: { name: "bash", arguments: "{\"command\":\"ls\"}" } }] },
        { role: "tool", tool_call_id: "call.1", content: "a.ts" },
        { role: "user", content: "and then?" }
      ]
    }
    const result = GatewaySwitchWire.chatToResponses.fit({ body, windowTokens: window, maxOutputTokens: 4_096, count, pointer: () => "unused" })
    expect(result._tag).toBe("fits")
    if (result._tag !== "fits") return
    expect(result.body).toEqual({
      model: "o4",
      instructions: "You are pi, a coding agent.",
      input: [
        { type: "message", role: "user", content: [{ type: "input_text", text: "list files" }] },
        // The agent's own call id (an OpenAI upstream takes it; Anthropic's safe form is not needed).
        { type: "function_call", call_id: "call.1", name: "bash", arguments: "{\"command\":\"ls\"}" },
        { type: "function_call_output", call_id: "call.1", output: "a.ts" },
        { type: "message", role: "user", content: [{ type: "input_text", text: "and then?" }] }
      ],
      max_output_tokens: 2_000,
      tools: [{ type: "function", name: "bash", description: "Run a command", parameters: chatTools[0]!.function.parameters, strict: false }],
      tool_choice: "required",
      parallel_tool_calls: false,
      temperature: 1.5,
      store: false,
      stream: true
    })
    expect(result.fit).toMatchObject({ leftOut: 0, stubbed: [] })
  })

  it("a Responses request as a Chat Completions one: instructions and developer messages as system, reasoning left out, calls and outputs, a custom tool as a function", () => {
    const body = {
      model: "gpt-5",
      instructions,
      max_output_tokens: 1_000,
      tools: responsesTools,
      input: [
        developer("Be brief."),
        user("patch it"),
        { type: "reasoning", id: "rs_1", summary: [], encrypted_content: "opaque" },
        assistant("On it.", "msg_1"),
        call("call_1", "ls"),
        { type: "custom_tool_call", call_id: "call_2", name: "apply_patch", input: "*** Begin Patch" },
        output("call_1", "a.ts"),
        { type: "custom_tool_call_output", call_id: "call_2", output: "Done!" },
        user("and then?")
      ]
    }
    const result = GatewaySwitchWire.responsesToChat.fit({ body, windowTokens: window, maxOutputTokens: 4_096, count, pointer: () => "unused" })
    expect(result._tag).toBe("fits")
    if (result._tag !== "fits") return
    expect(result.body).toMatchObject({
      model: "gpt-5",
      max_tokens: 1_000,
      messages: [
        { role: "system", content: `${instructions}\n\nBe brief.` },
        { role: "user", content: "patch it" },
        {
          role: "assistant",
          content: "On it.",
          tool_calls: [
            { id: "call_1", type: "function", function: { name: "exec_command", arguments: "{\"cmd\":\"ls\"}" } },
            { id: "call_2", type: "function", function: { name: "apply_patch", arguments: "{\"input\":\"*** Begin Patch\"}" } }
          ]
        },
        { role: "tool", tool_call_id: "call_1", content: "a.ts" },
        { role: "tool", tool_call_id: "call_2", content: "Done!" },
        { role: "user", content: "and then?" }
      ]
    })
    expect((result.body.tools as ReadonlyArray<{ function: { name: string } }>).map((t) => t.function.name)).toEqual(["exec_command", "apply_patch"])
    expect(JSON.stringify(result.body)).not.toContain("opaque")
  })

  it("the recorded Responses calculator session comes back as chat.completion chunks (calls, text, usage with cached tokens) and whole", () => {
    for (const lines of calculator) {
      const final = (JSON.parse(lines.find((l) => l.includes("\"type\":\"response.completed\""))!) as { response: { output: Array<Json>; usage: Json } }).response
      const calls = final.output.filter((i) => i.type === "function_call")
      const text = final.output.filter((i) => i.type === "message").flatMap((i) => (i.content as Array<{ text: string }>).map((p) => p.text)).join("")
      for (const size of [7, 97, 100_000]) {
        const t = GatewaySwitchWire.chatToResponses.translator("o4", new Set(["thread_read"]), new Set(["calculator"]), { stream_options: { include_usage: true } })
        const out = translate(t, responsesFramed(lines), size)
        expect(out.match(/data: \[DONE\]/g)).toHaveLength(1)
        const reply = assembledChat(out)
        const message = reply.messages[0]!.message as { content: string | null; tool_calls?: Array<{ id: string; function: { name: string; arguments: string } }> }
        expect(message.content ?? "").toBe(text)
        expect((message.tool_calls ?? []).map((c) => [c.id, c.function.name, JSON.parse(c.function.arguments)])).toEqual(
          calls.map((c) => [c.call_id, c.name, JSON.parse(String(c.arguments))])
        )
        const u = final.usage as { input_tokens: number; output_tokens: number; input_tokens_details: { cached_tokens: number } }
        expect(reply.tokens).toEqual({ inputTokens: u.input_tokens - u.input_tokens_details.cached_tokens, cacheWriteTokens: 0, cacheReadTokens: u.input_tokens_details.cached_tokens, outputTokens: u.output_tokens })
      }
      const whole = GatewaySwitchWire.chatToResponses.messageOf(final, "o4", new Set(), [], new Set(["calculator"]), {})
      expect(whole).toMatchObject({ object: "chat.completion", model: "o4", choices: [{ finish_reason: calls.length > 0 ? "tool_calls" : "stop" }] })
      expect(GatewayChat.replyOfBody(whole).messages).toHaveLength(1)
    }
  })

  it("the recorded Chat Completions stream comes back as Responses events numbered from 0 without a gap, assembled; the recorded whole answer as a response", () => {
    const lines = fixtureLines("openai-chat/openai-text.chunks.txt")
    const text = lines.map((l) => (JSON.parse(l) as { choices: Array<{ delta: { content?: string } }> }).choices[0]?.delta.content ?? "").join("")
    for (const size of [5, 97, 100_000]) {
      const t = GatewaySwitchWire.responsesToChat.translator("gpt-5", new Set(["thread_read"]), new Set(), {})
      const out = translate(t, chatFramed(lines), size)
      const events = responsesEvents(out)
      expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i))
      expect(events[0]!.type).toBe("response.created")
      expect(events.at(-1)!.type).toBe("response.completed")
      const reply = assembledResponses(out)
      expect(reply.messages.map((m) => m.message)).toEqual([expect.objectContaining({ type: "message", role: "assistant", content: [{ type: "output_text", text, annotations: [] }] })])
      expect(reply.tokens).toEqual({ inputTokens: 16, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 300 })
    }
    const whole = GatewaySwitchWire.responsesToChat.messageOf(JSON.parse(Fs.readFileSync(`${fixtures}openai-chat/openai-text.json`, "utf8")), "gpt-5", new Set(), [], new Set(), {})
    expect(whole).toMatchObject({ object: "response", status: "completed", model: "gpt-5", output: [{ type: "message", role: "assistant" }] })
    expect(GatewayResponses.replyOfBody(whole).messages).toHaveLength(1)
  })

  it("an upstream's call ids with characters Anthropic refuses (Kimi's functions.bash:0) reach the agent unchanged, streamed and whole, both directions, and go back out as they came", () => {
    const odd = ["functions.bash:0", "call|1/a b"]
    // A Responses upstream for a Chat agent.
    const fc = (i: number, id: string) => [
      { type: "response.output_item.added", output_index: i, item: { type: "function_call", id: `fc_${i}`, call_id: id, name: "bash", arguments: "", status: "in_progress" } },
      { type: "response.function_call_arguments.delta", item_id: `fc_${i}`, output_index: i, delta: `{"command":"ls ${i}"}` },
      { type: "response.output_item.done", output_index: i, item: { type: "function_call", id: `fc_${i}`, call_id: id, name: "bash", arguments: `{"command":"ls ${i}"}`, status: "completed" } }
    ]
    const output = odd.map((id, i) => ({ type: "function_call", id: `fc_${i}`, call_id: id, name: "bash", arguments: `{"command":"ls ${i}"}`, status: "completed" }))
    const completed = { id: "resp_1", object: "response", status: "completed", output, usage: { input_tokens: 10, output_tokens: 5 } }
    const events = [
      { type: "response.created", response: { id: "resp_1", status: "in_progress", output: [] } },
      ...odd.flatMap((id, i) => fc(i, id)),
      { type: "response.completed", response: completed }
    ].map((e, i) => JSON.stringify({ ...e, sequence_number: i }))
    for (const size of [1, 100_000]) {
      const reply = assembledChat(translate(GatewaySwitchWire.chatToResponses.translator("o4", new Set(["thread_read"]), new Set(["bash"]), {}), responsesFramed(events), size))
      expect((reply.messages[0]!.message as { tool_calls: Array<{ id: string }> }).tool_calls.map((c) => c.id)).toEqual(odd)
    }
    const whole = GatewaySwitchWire.chatToResponses.messageOf(completed, "o4", new Set(), [], new Set(["bash"]), {}) as { choices: Array<{ message: { tool_calls: Array<{ id: string }> } }> }
    expect(whole.choices[0]!.message.tool_calls.map((c) => c.id)).toEqual(odd)
    // The agent's next request: the ids go out as the upstream gave them.
    const next = GatewaySwitchWire.chatToResponses.fit({
      body: { model: "o4", messages: [{ role: "user", content: "go" }, { role: "assistant", content: null, tool_calls: whole.choices[0]!.message.tool_calls }, ...odd.map((id) => ({ role: "tool", tool_call_id: id, content: "ok" }))] },
      windowTokens: window,
      maxOutputTokens: 4_096,
      count,
      pointer: () => "unused"
    })
    expect(next._tag === "fits" && (next.body.input as Array<Json>).flatMap((i) => i.call_id === undefined ? [] : [i.call_id])).toEqual([...odd, ...odd])
    // A Chat Completions upstream for a Responses agent.
    const base = { id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "gpt-5" }
    const chunks = [
      { ...base, choices: [{ index: 0, delta: { role: "assistant", content: null }, finish_reason: null }] },
      ...odd.map((id, i) => ({ ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: i, id, type: "function", function: { name: "exec_command", arguments: `{"cmd":"ls ${i}"}` } }] }, finish_reason: null }] })),
      { ...base, choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] }
    ].map((c) => JSON.stringify(c))
    for (const size of [1, 100_000]) {
      const reply = assembledResponses(translate(GatewaySwitchWire.responsesToChat.translator("gpt-5", new Set(["thread_read"]), new Set(), {}), chatFramed(chunks), size))
      expect(reply.messages.map((m) => (m.message as { call_id: string }).call_id)).toEqual(odd)
    }
    const completion = { id: "chatcmpl-1", object: "chat.completion", model: "gpt-5", choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls: odd.map((id) => ({ id, type: "function", function: { name: "exec_command", arguments: "{}" } })) }, finish_reason: "tool_calls" }] }
    const response = GatewaySwitchWire.responsesToChat.messageOf(completion, "gpt-5", new Set(), [], new Set(), {}) as { output: Array<{ call_id: string }> }
    expect(response.output.map((i) => i.call_id)).toEqual(odd)
  })

  it("a Chat upstream's calls without an id (or with an empty one) each get an id of their own for the Responses agent, streamed and whole: no two calls of an answer or of two answers share one", () => {
    const base = { object: "chat.completion.chunk", created: 1, model: "gpt-5" }
    const streamed = (n: number, id: Json) => [
      { ...base, id: `chatcmpl-${n}`, choices: [{ index: 0, delta: { role: "assistant", content: null }, finish_reason: null }] },
      ...[0, 1].map((i) => ({ ...base, id: `chatcmpl-${n}`, choices: [{ index: 0, delta: { tool_calls: [{ index: i, ...id, type: "function", function: { name: "exec_command", arguments: `{"cmd":"ls ${i}"}` } }] }, finish_reason: null }] })),
      { ...base, id: `chatcmpl-${n}`, choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] }
    ].map((c) => JSON.stringify(c))
    const ids: Array<string> = []
    for (const [n, id] of [[1, {}], [2, {}], [3, { id: "" }]] as const) {
      const reply = assembledResponses(translate(GatewaySwitchWire.responsesToChat.translator("gpt-5", new Set(["thread_read"]), new Set(), {}), chatFramed(streamed(n, id))))
      ids.push(...reply.messages.map((m) => String((m.message as { call_id: string }).call_id)))
    }
    for (const id of [undefined, ""]) {
      for (let n = 0; n < 2; n++) {
        const completion = { id: "chatcmpl-w", object: "chat.completion", model: "gpt-5", choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls: [0, 1].map((i) => ({ ...(id === undefined ? {} : { id }), type: "function", function: { name: "exec_command", arguments: `{"cmd":"ls ${i}"}` } })) }, finish_reason: "tool_calls" }] }
        const response = GatewaySwitchWire.responsesToChat.messageOf(completion, "gpt-5", new Set(), [], new Set(), {}) as { output: Array<{ call_id: string }> }
        ids.push(...response.output.map((i) => i.call_id))
      }
    }
    expect(ids).toHaveLength(14)
    expect(ids.every((id) => /^[A-Za-z0-9_-]+$/.test(id))).toBe(true)
    expect(new Set(ids).size).toBe(ids.length)
  })

  it("upstream errors in the agent's OpenAI shape: an overflow (OpenAI's and llama.cpp's) as context_length_exceeded with the upstream's figures, another error as it came", () => {
    const openAi = JSON.stringify({ error: { message: "This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens. Please reduce the length of the messages.", type: "invalid_request_error", param: "messages", code: "context_length_exceeded" } })
    for (const wire of [GatewaySwitchWire.chatToResponses, GatewaySwitchWire.responsesToChat]) {
      const overflow = wire.agent.upstreamError(400, openAi)
      expect(overflow).toEqual({ status: 400, body: JSON.parse(openAi) })
      expect(wire.agent.isOverflow(overflow.body)).toBe(true)
      const llama = wire.agent.upstreamError(400, JSON.stringify({ error: { code: 400, message: "the request exceeds the available context size", type: "exceed_context_size_error", n_prompt_tokens: 40_000, n_ctx: 32_768 } }))
      expect(llama.body).toMatchObject({ error: { code: "context_length_exceeded", message: expect.stringContaining("maximum context length is 32768 tokens. However, your messages resulted in 40000 tokens") } })
      const limited = { error: { message: "Rate limit reached", type: "requests", param: null, code: "rate_limit_exceeded" } }
      expect(wire.agent.upstreamError(429, JSON.stringify(limited))).toEqual({ status: 429, body: limited })
    }
    // A response.failed in a Responses stream: an error chunk for the Chat agent (an overflow the run's `overflow`).
    const t = GatewaySwitchWire.chatToResponses.translator("o4", new Set(), new Set(), {})
    const failed = translate(t, responsesFramed([
      JSON.stringify({ type: "response.created", sequence_number: 0, response: { id: "resp_1", status: "in_progress", output: [] } }),
      JSON.stringify({ type: "response.failed", sequence_number: 1, response: { id: "resp_1", status: "failed", error: { code: "context_length_exceeded", message: "Your input exceeds the context window of this model." } } })
    ]))
    expect(failed).not.toContain("[DONE]")
    expect(GatewaySwitchWire.chatToResponses.agent.streamFailureOf(failed)).toMatchObject({ code: "overflow" })
    // A Chat stream cut before its finish_reason: response.failed for Codex (the run fails provider_protocol).
    const cut = GatewaySwitchWire.responsesToChat.translator("gpt-5", new Set(), new Set(), {})
    const partial = translate(cut, fixtureLines("openai-chat/openai-text.chunks.txt").slice(0, 4).map((l) => `data: ${l}\n\n`).join(""))
    expect(partial).toContain("event: response.failed")
    const a = GatewayResponses.replyAssembler()
    a.push(new TextEncoder().encode(partial))
    expect(a.outcome()._tag).not.toBe("completed")
  })
})

describe("Gateway, a provider switch between the OpenAI protocols", () => {
  for (const dialect of ["SQLite", "Postgres"] as const) {
    it.live(`${dialect}: a long pi conversation switched to a 32,000-token Responses window fits (stubs, a pointer, then the summary written meanwhile), comes back as chunks and whole, and switches back byte for byte`, () =>
      withGateway("responses", (chatApi, responsesApi) =>
        Effect.gen(function*() {
          const reader = yield* ThreadRead.ThreadRead
          const history = longChatHistory()
          const base = { max_tokens: 32_000, stream: true, stream_options: { include_usage: true }, tools: chatTools }
          // 1. On the Chat Completions model: forwarded as sent.
          chatApi.enqueue(ModelApi.answer("openai-chat", "Noted.", usage))
          const body1 = { ...base, model: "gpt-5", messages: [chatSystem, ...history, { role: "user", content: "summarise the outputs" }] }
          const first = yield* raw(chat(body1))
          expect(first.status).toBe(200)
          const reply1 = assembledChat(first.text).messages[0]!.message as ChatMessage

          // 2. Switched to the Responses model: converted, fitted, the answer as chat.completion chunks.
          responsesApi.enqueue(ModelApi.answer("openai-responses", "Checking.", usage, [{ id: "call_r9", name: "bash", arguments: "{\"command\":\"ls\"}" }]))
          const prompt = { role: "user", content: "now, on the other model: list the directory" }
          const body2 = { ...base, model: "o4-mini", messages: [...body1.messages, reply1, prompt] }
          const second = yield* raw(chat(body2))
          expect(second.status).toBe(200)
          expect(second.headers["content-type"]).toContain("text/event-stream")
          expect(second.text.endsWith("data: [DONE]\n\n")).toBe(true)
          const reply2 = assembledChat(second.text)
          expect(reply2.messages[0]!.message).toEqual({
            role: "assistant",
            content: "Checking.",
            tool_calls: [{ id: "call_r9", type: "function", function: { name: "bash", arguments: "{\"command\":\"ls\"}" } }]
          })
          expect(reply2.tokens).toEqual({ inputTokens: 900, cacheWriteTokens: 0, cacheReadTokens: 300, outputTokens: 40 })

          expect(responsesApi.requests).toHaveLength(1)
          const sent = responsesApi.requests[0]!
          expect(sent.url).toBe("/v1/responses")
          expect(sent.headers["authorization"]).toBe(`Bearer ${marker}`)
          type Item = { type: string; role?: string; content?: Array<{ text: string }>; call_id?: string; output?: string }
          const out = JSON.parse(sent.body) as { model: string; instructions: string; max_output_tokens: number; store: boolean; stream: boolean; tools: Array<{ name: string }>; input: Array<Item> }
          expect(counter.count(JSON.stringify(body2))).toBeGreaterThan(2 * window)
          expect(counter.count(sent.body) + out.max_output_tokens).toBeLessThanOrEqual(window)
          expect(out).toMatchObject({ model: "o4-mini", instructions: "You are pi, a coding agent.", store: false, stream: true })
          expect(out.tools.map((t) => t.name)).toEqual(["bash", "thread_read"])
          // The prompt unchanged, last.
          expect(out.input.at(-1)).toEqual({ type: "message", role: "user", content: [{ type: "input_text", text: "now, on the other model: list the directory" }] })
          const results = out.input.filter((i) => i.type === "function_call_output")
          expect(results.map((i) => i.call_id)).toEqual(Array.from({ length: 10 }, (_, i) => `call_${i}`))
          const threads = (yield* (yield* client()).threads.list({ urlParams: {} })).threads
          expect(threads).toHaveLength(1)
          const threadId = threads[0]!.id
          for (const [i, r] of results.entries()) {
            expect(r.output).toMatch(new RegExp(`^\\[offloaded, thread_read tool:call_${i}\\]\\nbash cat part${i}\\.txt: [\\d,]+ chars$`))
            expect(yield* readAll(reader, threadId, `tool:call_${i}`)).toContain(`output ${i} ${words(300 + i, 1_200)}`)
          }
          const pointer = out.input[0]!
          expect(pointer.role).toBe("user")
          expect(pointer.content![0]!.text).toContain(`<deferred_history thread="${threadId}">`)
          const refs = (JSON.parse(/thread_read (\{.*\})/.exec(pointer.content![0]!.text)![1]!) as { refs: string }).refs
          const sentTexts = new Set(out.input.flatMap((i) => (i.content ?? []).map((p) => p.text)))
          const keptFrom = history.findIndex((m) => typeof m.content === "string" && sentTexts.has(m.content))
          expect(keptFrom).toBeGreaterThan(1)
          expect(sentTexts.has(`start ${words(1, 600)}`)).toBe(false)
          const readBack = yield* readAll(reader, threadId, refs)
          for (const m of history.slice(0, keptFrom)) if (typeof m.content === "string") expect(readBack).toContain(m.content)

          // The fit left out history no summary covers: the thread is summarised after the answer (off the request path).
          expect((yield* eventually(threadId, ["thread.offloaded", "thread.offload_failed"])).type).toBe("thread.offloaded")

          // 3. The next request whole (its tool's result added): a chat.completion from a whole Responses answer; the
          // summary now goes before the pointer.
          responsesApi.enqueue({
            status: 200,
            contentType: "application/json",
            body: JSON.stringify({
              id: "resp_whole",
              object: "response",
              status: "completed",
              output: [
                { type: "reasoning", id: "rs_1", summary: [], encrypted_content: "opaque" },
                { type: "message", id: "msg_w", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Two files.", annotations: [] }] }
              ],
              usage: { input_tokens: 70, input_tokens_details: { cached_tokens: 20 }, output_tokens: 7, total_tokens: 77 }
            })
          })
          const body2w = { ...body2, stream: false, stream_options: undefined, messages: [...body2.messages, reply2.messages[0]!.message as ChatMessage, { role: "tool", tool_call_id: "call_r9", content: "a.ts\nb.ts" }] }
          const whole = yield* raw(chat(body2w))
          expect(whole.status).toBe(200)
          expect(whole.body).toMatchObject({
            object: "chat.completion",
            model: "o4-mini",
            choices: [{ index: 0, message: { role: "assistant", content: "Two files." }, finish_reason: "stop" }],
            usage: { prompt_tokens: 70, completion_tokens: 7, total_tokens: 77, prompt_tokens_details: { cached_tokens: 20 } }
          })
          const sentWhole = JSON.parse(responsesApi.requests[1]!.body) as { stream?: boolean; input: Array<Item> }
          expect(sentWhole.stream).toBeUndefined()
          expect(sentWhole.input[0]!.content![0]!.text).toMatch(new RegExp(`^<conversation_summary thread="${threadId}">[\\s\\S]*<deferred_history thread="${threadId}">`))
          expect(counter.count(responsesApi.requests[1]!.body) + out.max_output_tokens).toBeLessThanOrEqual(window)
          expect(sentWhole.input.slice(-3)).toEqual([
            { type: "message", role: "assistant", content: [{ type: "output_text", text: "Checking." }] },
            { type: "function_call", call_id: "call_r9", name: "bash", arguments: "{\"command\":\"ls\"}" },
            { type: "function_call_output", call_id: "call_r9", output: "a.ts\nb.ts" }
          ])
          const reply3 = (whole.body as { choices: Array<{ message: ChatMessage }> }).choices[0]!.message

          // 4. Back on the Chat Completions model: the agent's body byte for byte.
          chatApi.enqueue(ModelApi.answer("openai-chat", "Back.", usage))
          const body3 = { ...base, model: "gpt-5", messages: [...body2w.messages, reply3, { role: "user", content: "thanks" }] }
          const third = yield* raw(chat(body3))
          expect(third.status).toBe(200)
          expect(chatApi.requests).toHaveLength(2)
          expect(chatApi.requests[1]!.body).toBe(JSON.stringify(body3))

          const api = yield* client()
          const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
          expect(runs.map((r) => r.status)).toEqual(["completed", "completed", "completed", "completed"])
          const views = yield* Effect.forEach(runs, (r) => api.runs.get({ path: { runId: r.id }, urlParams: {} }))
          expect(views.map((v) => v.cost?.providerInstance)).toEqual(["chat", "responses", "responses", "chat"])
          expect(views[1]!.cost).toMatchObject({ inputTokens: 900, cacheWriteTokens: 0, cacheReadTokens: 300, outputTokens: 40 })
          const items = (yield* allItems(threadId)).filter((i) => i.kind !== "summary")
          expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === "call_r9")).toHaveLength(1)
          expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === "call_r9").map((i) => i.text)).toEqual(["a.ts\nb.ts"])
          expect(items.filter((i) => i.kind === "user_message" && i.text === "now, on the other model: list the directory")).toHaveLength(1)
          for (let i = 0; i < 10; i++) expect(items.filter((x) => x.kind === "tool_result" && x.toolCallId === `call_${i}`)).toHaveLength(1)
          const events = threadEvents((yield* raw(HttpClientRequest.get(`/threads/${threadId}/events?follow=false`).pipe(HttpClientRequest.bearerToken(adminToken)))).text)
          expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
          expect(events.filter((e) => e.type === "gateway.usage").map((e) => (e.payload as { providerInstance: string; windowTokens: number | null }).windowTokens)).toEqual([200_000, window, window, 200_000])
        })
      , dialect), { timeout: 120_000 })

    it.live(`${dialect}: a long Codex conversation switched to a 32,000-token Chat Completions window fits (stubs, a pointer, then the summary), comes back as numbered Responses events and whole, and switches back byte for byte`, () =>
      withGateway("chat", (chatApi, responsesApi) =>
        Effect.gen(function*() {
          const reader = yield* ThreadRead.ThreadRead
          const history = longInput()
          const base = { instructions, tools: responsesTools, stream: true, store: false }
          // 1. On the Responses model: forwarded as sent.
          responsesApi.enqueue(ModelApi.answer("openai-responses", "Noted.", usage))
          const body1 = { ...base, model: "o4", input: [...history, user("summarise the outputs")] }
          const first = yield* raw(responses(body1))
          expect(first.status).toBe(200)
          const reply1 = assembledResponses(first.text).messages.map((m) => m.message as Input)

          // 2. Switched to the Chat Completions model: the answer as Responses events, numbered from 0.
          chatApi.enqueue(ModelApi.answer("openai-chat", "Checking.", usage, [{ id: "call_c9", name: "exec_command", arguments: "{\"cmd\":\"ls\"}" }]))
          const prompt = user("now, on the other model: list the directory")
          const body2 = { ...base, model: "gpt-5", input: [...body1.input, ...reply1, prompt] }
          const second = yield* raw(responses(body2))
          expect(second.status).toBe(200)
          const events = responsesEvents(second.text)
          expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i))
          expect(events.map((e) => e.type)).toEqual([
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
          ])
          expect(events.filter((e) => e.type === "response.output_item.added").map((e) => e.output_index)).toEqual([0, 1])
          const reply2 = assembledResponses(second.text)
          expect(reply2.messages.map((m) => m.message)).toEqual([
            expect.objectContaining({ type: "message", role: "assistant", content: [{ type: "output_text", text: "Checking.", annotations: [] }] }),
            { type: "function_call", id: "fc_call_c9", call_id: "call_c9", name: "exec_command", arguments: "{\"cmd\":\"ls\"}", status: "completed" }
          ])
          expect(reply2.tokens).toEqual({ inputTokens: 900, cacheWriteTokens: 0, cacheReadTokens: 300, outputTokens: 40 })

          expect(chatApi.requests).toHaveLength(1)
          const sent = chatApi.requests[0]!
          expect(sent.url).toBe("/v1/chat/completions")
          expect(sent.headers["authorization"]).toBe(`Bearer ${marker}`)
          type Message = { role: string; content: string | null; tool_call_id?: string; tool_calls?: Array<{ id: string }> }
          const out = JSON.parse(sent.body) as { model: string; max_tokens: number; stream: boolean; stream_options: unknown; tools: Array<{ function: { name: string } }>; messages: Array<Message> }
          expect(counter.count(JSON.stringify(body2))).toBeGreaterThan(2 * window)
          expect(counter.count(sent.body) + out.max_tokens).toBeLessThanOrEqual(window)
          expect(out).toMatchObject({ model: "gpt-5", stream: true, stream_options: { include_usage: true } })
          expect(out.messages[0]).toEqual({ role: "system", content: `${instructions}\n\n<permissions instructions>sandboxed</permissions instructions>` })
          expect(out.tools.map((t) => t.function.name)).toEqual(["exec_command", "apply_patch", "thread_read"])
          expect(out.messages.at(-1)).toEqual({ role: "user", content: "now, on the other model: list the directory" })
          expect(sent.body).not.toContain("opaque")
          const results = out.messages.filter((m) => m.role === "tool")
          expect(results.map((m) => m.tool_call_id)).toEqual(Array.from({ length: 10 }, (_, i) => `call_${i}`))
          const threadId = (yield* (yield* client()).threads.list({ urlParams: {} })).threads[0]!.id
          for (const [i, m] of results.entries()) {
            expect(m.content).toMatch(new RegExp(`^\\[offloaded, thread_read tool:call_${i}\\]\\nexec_command cat part${i}\\.txt: [\\d,]+ chars$`))
            expect(yield* readAll(reader, threadId, `tool:call_${i}`)).toContain(`output ${i} ${words(300 + i, 1_200)}`)
          }
          const pointer = out.messages[1]!
          expect(pointer.role).toBe("user")
          expect(pointer.content).toContain(`<deferred_history thread="${threadId}">`)
          const refs = (JSON.parse(/thread_read (\{.*\})/.exec(pointer.content!)![1]!) as { refs: string }).refs
          const sentTexts = new Set(out.messages.map((m) => m.content))
          const textOf = (item: Input) => ((item.content as Array<{ text: string }> | undefined)?.[0]?.text) ?? ""
          const keptFrom = history.findIndex((m) => m.type === "message" && sentTexts.has(textOf(m)))
          expect(keptFrom).toBeGreaterThan(2)
          const readBack = yield* readAll(reader, threadId, refs)
          for (const m of history.slice(1, keptFrom)) if (m.type === "message") expect(readBack).toContain(textOf(m))

          expect((yield* eventually(threadId, ["thread.offloaded", "thread.offload_failed"])).type).toBe("thread.offloaded")

          // 3. The next request whole: a Responses `response` from a whole chat.completion; the summary before the pointer.
          chatApi.enqueue({
            status: 200,
            contentType: "application/json",
            body: JSON.stringify({
              id: "chatcmpl-whole",
              object: "chat.completion",
              model: "gpt-5",
              choices: [{ index: 0, message: { role: "assistant", content: "Two files." }, finish_reason: "stop" }],
              usage: { prompt_tokens: 70, completion_tokens: 7, total_tokens: 77, prompt_tokens_details: { cached_tokens: 20 } }
            })
          })
          const body2w = { ...body2, stream: false, input: [...body2.input, ...reply2.messages.map((m) => m.message as Input), output("call_c9", "a.ts\nb.ts")] }
          const whole = yield* raw(responses(body2w))
          expect(whole.status).toBe(200)
          expect(whole.body).toMatchObject({
            object: "response",
            status: "completed",
            model: "gpt-5",
            output: [{ type: "message", role: "assistant", content: [{ type: "output_text", text: "Two files." }] }],
            usage: { input_tokens: 70, input_tokens_details: { cached_tokens: 20 }, output_tokens: 7, total_tokens: 77 }
          })
          const sentWhole = JSON.parse(chatApi.requests[1]!.body) as { stream?: boolean; messages: Array<Message> }
          expect(sentWhole.stream).toBeUndefined()
          expect(sentWhole.messages[1]!.content).toMatch(new RegExp(`^<conversation_summary thread="${threadId}">[\\s\\S]*<deferred_history thread="${threadId}">`))
          expect(counter.count(chatApi.requests[1]!.body) + out.max_tokens).toBeLessThanOrEqual(window)
          expect(sentWhole.messages.slice(-2)).toEqual([
            { role: "assistant", content: "Checking.", tool_calls: [{ id: "call_c9", type: "function", function: { name: "exec_command", arguments: "{\"cmd\":\"ls\"}" } }] },
            { role: "tool", tool_call_id: "call_c9", content: "a.ts\nb.ts" }
          ])

          // 4. Back on the Responses model: the agent's body byte for byte.
          responsesApi.enqueue(ModelApi.answer("openai-responses", "Back.", usage))
          const body3 = { ...base, model: "o4", input: [...body2w.input, ...(whole.body as { output: Array<Input> }).output, user("thanks")] }
          const third = yield* raw(responses(body3))
          expect(third.status).toBe(200)
          expect(responsesApi.requests).toHaveLength(2)
          expect(responsesApi.requests[1]!.body).toBe(JSON.stringify(body3))

          const api = yield* client()
          const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
          expect(runs.map((r) => r.status)).toEqual(["completed", "completed", "completed", "completed"])
          const views = yield* Effect.forEach(runs, (r) => api.runs.get({ path: { runId: r.id }, urlParams: {} }))
          expect(views.map((v) => v.cost?.providerInstance)).toEqual(["responses", "chat", "chat", "responses"])
          const items = (yield* allItems(threadId)).filter((i) => i.kind !== "summary")
          expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === "call_c9")).toHaveLength(1)
          expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === "call_c9").map((i) => i.text)).toEqual(["a.ts\nb.ts"])
          for (let i = 0; i < 10; i++) expect(items.filter((x) => x.kind === "tool_result" && x.toolCallId === `call_${i}`)).toHaveLength(1)
          const timeline = threadEvents((yield* raw(HttpClientRequest.get(`/threads/${threadId}/events?follow=false`).pipe(HttpClientRequest.bearerToken(adminToken)))).text)
          expect(timeline.filter((e) => e.type === "gateway.diverged")).toEqual([])
        })
      , dialect), { timeout: 120_000 })
  }

  it.live("the Responses upstream's thread_read calls are answered by the gateway for a Chat agent: one streamed answer, one [DONE], every hop's usage", () =>
    withGateway("responses", (_chatApi, responsesApi) =>
      Effect.gen(function*() {
        const result = `hello-output ${words(9, 50)}`
        const messages = [
          chatSystem,
          { role: "user", content: "run it" },
          { role: "assistant", content: null, tool_calls: [{ id: "call_a", type: "function", function: { name: "bash", arguments: "{\"command\":\"echo hello\"}" } }] },
          { role: "tool", tool_call_id: "call_a", content: result }
        ]
        responsesApi.enqueue(
          ModelApi.answer("openai-responses", "Let me read.", usage, [{ id: "call_read", name: "thread_read", arguments: JSON.stringify({ refs: "tool:call_a" }) }]),
          ModelApi.answer("openai-responses", "It said hello.", usage)
        )
        const answer = yield* raw(chat({ model: "o4", stream: true, tools: chatTools, messages }))
        expect(answer.status).toBe(200)
        expect(answer.text).not.toContain("thread_read")
        expect(answer.text.match(/data: \[DONE\]/g)).toHaveLength(1)
        const reply = assembledChat(answer.text)
        expect(reply.messages[0]!.message).toEqual({ role: "assistant", content: "Let me read.\n\nIt said hello." })
        expect(reply.tokens).toEqual({ inputTokens: 1_800, cacheWriteTokens: 0, cacheReadTokens: 600, outputTokens: 80 })
        expect(responsesApi.requests).toHaveLength(2)
        const second = JSON.parse(responsesApi.requests[1]!.body) as { input: Array<Record<string, unknown>> }
        expect(second.input.at(-2)).toMatchObject({ type: "function_call", call_id: "call_read", name: "thread_read" })
        expect(second.input.at(-1)).toMatchObject({ type: "function_call_output", call_id: "call_read" })
        expect(String(second.input.at(-1)!.output)).toContain(result)
      })
    ), { timeout: 60_000 })

  it.live("overflows as the agent's context_length_exceeded 400: one Baton cannot fit (never sent) from either agent, the upstream's own passed on; the runs fail overflow", () =>
    withGateway("responses", (chatApi, responsesApi) =>
      Effect.gen(function*() {
        // Chat agent on the 32,000-token Responses instance, its prompt alone over the window.
        const tooLong = yield* raw(chat({ model: "o4", max_tokens: 8_000, stream: true, messages: [chatSystem, { role: "user", content: `paste ${words(7, 16_000)}` }] }))
        expect(tooLong.status).toBe(400)
        expect(tooLong.body).toMatchObject({ error: { type: "invalid_request_error", code: "context_length_exceeded", param: "messages" } })
        expect(responsesApi.requests).toHaveLength(0)
        // The upstream's own overflow (HTTP 400) passed on in OpenAI's words.
        const upstreamOverflow = { error: { message: "This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens. Please reduce the length of the messages.", type: "invalid_request_error", param: "messages", code: "context_length_exceeded" } }
        responsesApi.enqueue({ status: 400, contentType: "application/json", body: JSON.stringify(upstreamOverflow) })
        const passed = yield* raw(chat({ model: "o4", messages: [chatSystem, { role: "user", content: "hi" }] }))
        expect(passed.status).toBe(400)
        expect(passed.body).toEqual(upstreamOverflow)
        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
        expect(runs.map((r) => [r.status, r.failureCode])).toEqual([["failed", "overflow"], ["failed", "overflow"]])
        expect(chatApi.requests).toHaveLength(0)
      })
    ), { timeout: 60_000 })

  it.live("a Codex request Baton cannot fit on the 32,000-token Chat Completions instance is context_length_exceeded, never sent; a 429 comes back as the upstream sent it", () =>
    withGateway("chat", (chatApi) =>
      Effect.gen(function*() {
        const tooLong = yield* raw(responses({ model: "gpt-5", instructions, max_output_tokens: 8_000, input: [user(`paste ${words(7, 16_000)}`)] }))
        expect(tooLong.status).toBe(400)
        expect(tooLong.body).toMatchObject({ error: { type: "invalid_request_error", code: "context_length_exceeded" } })
        expect(chatApi.requests).toHaveLength(0)
        const limited = { error: { message: "Rate limit reached for gpt-5", type: "requests", param: null, code: "rate_limit_exceeded" } }
        chatApi.enqueue({ status: 429, contentType: "application/json", body: JSON.stringify(limited) })
        const answer = yield* raw(responses({ model: "gpt-5", instructions, input: [user("hi")] }))
        expect(answer.status).toBe(429)
        expect(answer.body).toEqual(limited)
        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
        expect(runs.map((r) => [r.status, r.failureCode])).toEqual([["failed", "overflow"], ["failed", "provider_unavailable"]])
      })
    ), { timeout: 60_000 })

  it.live("a continuation after thread_read that the Chat upstream refuses is Codex's response.failed numbered on from the events it got (one response id, sequence_numbers without a gap); the run fails", () =>
    withGateway("chat", (chatApi) =>
      Effect.gen(function*() {
        chatApi.enqueue(
          ModelApi.answer("openai-chat", "Let me read.", usage, [{ id: "call_read", name: "thread_read", arguments: JSON.stringify({ refs: "#1" }) }]),
          { status: 500, contentType: "application/json", body: JSON.stringify({ error: { message: "The server had an error", type: "server_error", param: null, code: null } }) }
        )
        const answer = yield* raw(responses({ model: "gpt-5", instructions, stream: true, tools: responsesTools, input: [user("run it")] }))
        expect(answer.status).toBe(200)
        expect(chatApi.requests).toHaveLength(2)
        const events = responsesEvents(answer.text)
        expect(events.at(-1)).toMatchObject({ type: "response.failed", response: { status: "failed", error: { message: "The server had an error" } } })
        expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i))
        expect(new Set(events.filter((e) => isRecord(e.response)).map((e) => (e.response as Json).id)).size).toBe(1)
        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        expect((yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs.map((r) => r.status)).toEqual(["failed"])
      })
    ), { timeout: 60_000 })
})
