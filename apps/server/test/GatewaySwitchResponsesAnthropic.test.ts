/**
 * A provider switch on the gateway's OpenAI Responses endpoint (issue 14 items 4 and 5): an agent speaking Responses
 * (Codex) whose model routes to an `anthropic-messages` instance. Against loopback upstreams (a Responses one for
 * `gpt-*`, an Anthropic one with a 32,000-token window for `claude-*`): the input items converted and fitted (stubs,
 * then deferral with a pointer; the prompt unchanged; every left-out original readable with `thread_read`), the answer
 * converted back (streamed as Responses events and whole, function calls and usage), the switch back to the first
 * model sending the agent's body as it is with nothing lost, the overflow Baton cannot fit answered as OpenAI's
 * `context_length_exceeded`, and upstream errors in OpenAI's shape (HTTP, and `response.failed` in the stream). And the
 * conversion (`GatewaySwitchResponsesAnthropic`) on its own, with recorded Anthropic traffic.
 */
import { ThreadRead } from "@baton/orchestration"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as GatewayResponses from "../src/GatewayResponses.js"
import * as GatewaySwitchResponsesAnthropic from "../src/GatewaySwitchResponsesAnthropic.js"
import { adminToken, client, raw } from "./helpers.js"
import * as AnthropicFixtures from "./support/AnthropicFixtures.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"
import { allItems, counter, readAll, window, words } from "./support/SwitchSummary.js"

const usage = { input: 900, cacheWrite: 200, cacheRead: 300, output: 40 }


const user = (text: string) => ({ type: "message", role: "user", content: [{ type: "input_text", text }] })
const developer = (text: string) => ({ type: "message", role: "developer", content: [{ type: "input_text", text }] })
const assistant = (text: string, id: string) => ({ type: "message", id, role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] })
const call = (callId: string, cmd: string) => ({ type: "function_call", id: `fc_${callId}`, call_id: callId, name: "exec_command", arguments: JSON.stringify({ cmd }) })
const output = (callId: string, text: string) => ({ type: "function_call_output", call_id: callId, output: text })

type Input = Record<string, unknown>

/**
 * A long Codex-like input (about 80,000 tokens): its developer message and prompt, 10 exchanges of long text (nothing
 * to stub), then 10 shell rounds with long outputs, ending with the assistant's last answer.
 */
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
const tools = [
  { type: "function", name: "exec_command", description: "Run a command", strict: false, parameters: { type: "object", properties: { cmd: { type: "string" } }, required: ["cmd"] } },
  { type: "custom", name: "apply_patch", description: "Apply a patch", format: { type: "grammar", syntax: "lark", definition: "start: /.+/" } },
  { type: "web_search" }
]

/** An agent's `/v1/responses` request (the Baton token as Bearer, Codex's session headers). */
const responses = (body: unknown) =>
  HttpClientRequest.post("/v1/responses").pipe(
    HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "session-id": "sess-codex-switch", "thread-id": "sess-codex-switch", "user-agent": "codex_exec/0.171.0" }),
    HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
  )

/** The reply an agent assembles from a Responses SSE answer. */
const assembled = (text: string) => {
  const a = GatewayResponses.replyAssembler()
  a.push(new TextEncoder().encode(text))
  const outcome = a.outcome()
  if (outcome._tag !== "completed") throw new Error(`the answer did not complete: ${text.slice(0, 500)}`)
  return outcome.reply
}

/** A gateway with `gpt-*` on a Responses loopback upstream and `claude-*` on an Anthropic one (32,000 tokens). */
const withGateway = <A, E, R>(test: (openai: ModelApi.ModelApi, anthropic: ModelApi.ModelApi) => Effect.Effect<A, E, R>) =>
  Effect.scoped(Effect.gen(function*() {
    const openai = yield* ModelApi.start
    const anthropic = yield* ModelApi.start
    const settings = yield* settingsFor(
      [
        instance("openai", "openai-responses", openai, { toolResultOffload: false }),
        instance("anthropic", "anthropic-messages", anthropic, { contextWindow: window, autoCompactThreshold: null, maxOutputTokens: 4_096 })
      ],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: [{ model: "gpt-*", provider: "openai" }, { model: "claude-*", provider: "anthropic" }] } }
    )
    return yield* test(openai, anthropic).pipe(Effect.provide(serveSettings(settings)))
  }))



describe("GatewaySwitchResponsesAnthropic (the conversion)", () => {
  it("converts the input: instructions, developer and user messages, an assistant's text and calls as one message, outputs and the user message after them as one, reasoning left out, custom tools", () => {
    const body = {
      model: "claude-x",
      instructions,
      max_output_tokens: 32_000,
      stream: true,
      store: false,
      tools,
      tool_choice: "auto",
      parallel_tool_calls: false,
      input: [
        developer("be careful"),
        user("list files"),
        developer("mid-conversation note"),
        { type: "reasoning", id: "rs_1", summary: [], encrypted_content: "opaque" },
        assistant("Listing.", "msg_1"),
        call("call_1", "ls"),
        { type: "custom_tool_call", id: "ctc_2", call_id: "call_2", name: "apply_patch", input: "*** Begin Patch" },
        output("call_1", "a.ts"),
        { type: "custom_tool_call_output", call_id: "call_2", output: "Done!" },
        user("and then?")
      ]
    }
    const result = GatewaySwitchResponsesAnthropic.toAnthropicFromResponses({ body, windowTokens: window, maxOutputTokens: 4_096, count: (t) => counter.count(t), pointer: () => "unused" })
    expect(result._tag).toBe("fits")
    if (result._tag !== "fits") return
    expect(result.body).toEqual({
      model: "claude-x",
      max_tokens: 4_096,
      system: `${instructions}\n\nbe careful`,
      stream: true,
      tools: [
        { name: "exec_command", description: "Run a command", input_schema: tools[0]!.parameters },
        { name: "apply_patch", description: "Apply a patch", input_schema: { type: "object", properties: { input: { type: "string", description: "The tool's whole input, as free text." } }, required: ["input"] } }
      ],
      tool_choice: { type: "auto", disable_parallel_tool_use: true },
      messages: [
        { role: "user", content: [{ type: "text", text: "list files" }] },
        { role: "user", content: [{ type: "text", text: "mid-conversation note" }] },
        {
          role: "assistant",
          content: [
            { type: "text", text: "Listing." },
            { type: "tool_use", id: "call_1", name: "exec_command", input: { cmd: "ls" } },
            { type: "tool_use", id: "call_2", name: "apply_patch", input: { input: "*** Begin Patch" } }
          ]
        },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "call_1", content: "a.ts" },
            { type: "tool_result", tool_use_id: "call_2", content: "Done!" },
            { type: "text", text: "and then?", cache_control: { type: "ephemeral" } }
          ]
        }
      ]
    })
  })

  it("a recorded Anthropic stream comes back as Responses events the agent's assembler completes; the recorded whole answer alike; a custom tool's call as a custom_tool_call", () => {
    const translator = GatewaySwitchResponsesAnthropic.streamTranslator("claude-x", new Set(["thread_read"]), { tools })
    const text = translator.push(new TextEncoder().encode(AnthropicFixtures.recordedStream("anthropic-tool-no-args.chunks.txt"))) + translator.end()
    const sequence = [...text.matchAll(/"sequence_number":(\d+)/g)].map((m) => Number(m[1]))
    expect(sequence).toEqual(sequence.map((_, i) => i))
    const reply = assembled(text)
    expect(reply.messages.map((m) => m.message)).toEqual([
      { type: "message", id: "msg_msg_01GE2RKp1VYsPzdFs3sS9z5S_0", status: "completed", role: "assistant", content: [{ type: "output_text", text: "I'll update the issue list for you.", annotations: [] }] },
      { type: "function_call", id: "fc_toolu_01QE1WLsSVp5hy5Q3GmGTmjP", call_id: "toolu_01QE1WLsSVp5hy5Q3GmGTmjP", name: "updateIssueList", arguments: "{}", status: "completed" }
    ])
    expect(reply.tokens).toEqual({ inputTokens: 565, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 48 })

    const whole = GatewaySwitchResponsesAnthropic.responseOf(AnthropicFixtures.recordedJson("anthropic-tool-no-args.json"), "claude-x", new Set(), [], { tools })
    expect(whole).toMatchObject({ id: "resp_msg_01GCBaV8gyWAYgMVggRqZbuQ", object: "response", status: "completed", model: "claude-x", usage: { input_tokens: 602, input_tokens_details: { cached_tokens: 0 } } })
    expect(GatewayResponses.replyOfBody(whole).messages.map((m) => (m.message as { type: string }).type)).toEqual(["message", "function_call"])
    expect(assembled(GatewaySwitchResponsesAnthropic.eventsOf(whole)).messages.map((m) => m.message)).toEqual(GatewayResponses.replyOfBody(whole).messages.map((m) => m.message))

    const custom = GatewaySwitchResponsesAnthropic.streamTranslator("claude-x", new Set(), { tools })
    const patched = custom.push(new TextEncoder().encode(ModelApi.answer("anthropic-messages", "", usage, [{ id: "toolu_p", name: "apply_patch", arguments: JSON.stringify({ input: "*** Begin Patch\n*** End Patch" }) }]).body)) + custom.end()
    expect(assembled(patched).messages.map((m) => m.message)).toEqual([
      { type: "custom_tool_call", id: "ctc_toolu_p", call_id: "toolu_p", name: "apply_patch", input: "*** Begin Patch\n*** End Patch", status: "completed" }
    ])
  })
})

describe("Gateway, a provider switch (Responses agent, anthropic-messages upstream)", () => {
  it.live("a long Codex conversation switched to a 32,000-token window fits (stubs, then a pointer), comes back as Responses events and whole, and switches back with nothing lost", () =>
    withGateway((openai, anthropic) =>
      Effect.gen(function*() {
        const reader = yield* ThreadRead.ThreadRead
        const history = longInput()
        const base = { instructions, tools, stream: true, store: false }
        // 1. On the Responses model: forwarded as sent.
        openai.enqueue(ModelApi.answer("openai-responses", "Noted.", usage))
        const body1 = { ...base, model: "gpt-5", input: [...history, user("summarise the outputs")] }
        const first = yield* raw(responses(body1))
        expect(first.status).toBe(200)
        const reply1 = assembled(first.text).messages.map((m) => m.message as Input)

        // 2. Switched to the Anthropic model: converted, fitted under its window, the answer as Responses events.
        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Checking.", usage, [{ id: "toolu_9", name: "exec_command", arguments: "{\"cmd\":\"ls\"}" }]))
        const prompt = user("now, on the other model: list the directory")
        const body2 = { ...base, model: "claude-sonnet-4-5", input: [...body1.input, ...reply1, prompt] }
        const second = yield* raw(responses(body2))
        expect(second.status).toBe(200)
        expect(second.headers["content-type"]).toContain("text/event-stream")
        const reply2 = assembled(second.text)
        expect(reply2.messages.map((m) => m.message)).toEqual([
          expect.objectContaining({ type: "message", role: "assistant", content: [{ type: "output_text", text: "Checking.", annotations: [] }] }),
          { type: "function_call", id: "fc_toolu_9", call_id: "toolu_9", name: "exec_command", arguments: "{\"cmd\":\"ls\"}", status: "completed" }
        ])
        expect(reply2.tokens).toEqual({ inputTokens: 900, cacheWriteTokens: 200, cacheReadTokens: 300, outputTokens: 40 })

        expect(anthropic.requests).toHaveLength(1)
        const sent = anthropic.requests[0]!
        expect(sent.url).toBe("/v1/messages")
        expect(sent.headers["x-api-key"]).toBe(marker)
        type Block = { type: string; text?: string; tool_use_id?: string; content?: string }
        const out = JSON.parse(sent.body) as { model: string; max_tokens: number; system: string; tools: Array<{ name: string }>; messages: Array<{ role: string; content: Array<Block> }> }
        expect(counter.count(JSON.stringify(body2))).toBeGreaterThan(2 * window)
        expect(counter.count(sent.body) + out.max_tokens).toBeLessThanOrEqual(window)
        expect(out.model).toBe("claude-sonnet-4-5")
        expect(out.system).toBe(`${instructions}\n\n<permissions instructions>sandboxed</permissions instructions>`)
        expect(out.tools.map((t) => t.name)).toEqual(["exec_command", "apply_patch", "thread_read"])
        expect(out.messages.at(-1)).toEqual({ role: "user", content: [{ type: "text", text: "now, on the other model: list the directory", cache_control: { type: "ephemeral" } }] })
        const results = out.messages.flatMap((m) => m.content.filter((b) => b.type === "tool_result"))
        expect(results.map((b) => b.tool_use_id)).toEqual(Array.from({ length: 10 }, (_, i) => `call_${i}`))
        const threadId = (yield* (yield* client()).threads.list({ urlParams: {} })).threads[0]!.id
        for (const [i, b] of results.entries()) {
          expect(b.content).toMatch(new RegExp(`^\\[offloaded, thread_read tool:call_${i}\\]\\nexec_command cat part${i}\\.txt: [\\d,]+ chars$`))
          expect(yield* readAll(reader, threadId, `tool:call_${i}`)).toContain(`output ${i} ${words(300 + i, 1_200)}`)
        }
        const pointer = out.messages[0]!
        expect(pointer.content[0]!.text).toContain(`<deferred_history thread="${threadId}">`)
        const refs = (JSON.parse(/thread_read (\{.*\})/.exec(pointer.content[0]!.text!)![1]!) as { refs: string }).refs
        const sentTexts = new Set(out.messages.flatMap((m) => m.content.map((b) => b.text)))
        const textOf = (item: Input) => ((item.content as Array<{ text: string }> | undefined)?.[0]?.text) ?? ""
        const keptFrom = history.findIndex((m) => m.type === "message" && sentTexts.has(textOf(m)))
        expect(keptFrom).toBeGreaterThan(2)
        expect(sentTexts.has(`start ${words(1, 600)}`)).toBe(false)
        const readBack = yield* readAll(reader, threadId, refs)
        for (const m of history.slice(0, keptFrom)) if (m.type === "message") expect(readBack).toContain(textOf(m))

        // 3. The next request whole (its call's output added): a Responses `response`.
        anthropic.enqueue({
          status: 200,
          contentType: "application/json",
          body: JSON.stringify({
            id: "msg_whole",
            type: "message",
            role: "assistant",
            model: "claude-sonnet-4-5",
            content: [{ type: "text", text: "Two files." }],
            stop_reason: "end_turn",
            stop_sequence: null,
            usage: { input_tokens: 50, cache_creation_input_tokens: 10, cache_read_input_tokens: 20, output_tokens: 7 }
          })
        })
        const body2w = { ...body2, stream: false, input: [...body2.input, ...reply2.messages.map((m) => m.message as Input), output("toolu_9", "a.ts\nb.ts")] }
        const whole = yield* raw(responses(body2w))
        expect(whole.status).toBe(200)
        expect(whole.body).toMatchObject({
          id: "resp_msg_whole",
          object: "response",
          status: "completed",
          model: "claude-sonnet-4-5",
          output: [{ type: "message", role: "assistant", content: [{ type: "output_text", text: "Two files." }] }],
          usage: { input_tokens: 80, input_tokens_details: { cached_tokens: 20, cache_write_tokens: 10 }, output_tokens: 7, total_tokens: 87 }
        })
        const sentWhole = JSON.parse(anthropic.requests[1]!.body) as { messages: Array<{ role: string; content: Array<Block> }> }
        expect(sentWhole.messages.slice(-2)).toEqual([
          { role: "assistant", content: [{ type: "text", text: "Checking." }, { type: "tool_use", id: "toolu_9", name: "exec_command", input: { cmd: "ls" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_9", content: "a.ts\nb.ts", cache_control: { type: "ephemeral" } }] }
        ])

        // 4. Back on the Responses model: the agent's body as sent.
        openai.enqueue(ModelApi.answer("openai-responses", "Back.", usage))
        const body3 = { ...base, model: "gpt-5", input: [...body2w.input, ...(whole.body as { output: Array<Input> }).output, user("thanks")] }
        const third = yield* raw(responses(body3))
        expect(third.status).toBe(200)
        expect(openai.requests).toHaveLength(2)
        expect(openai.requests[1]!.body).toBe(JSON.stringify(body3))

        const api = yield* client()
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
        expect(runs.map((r) => r.status)).toEqual(["completed", "completed", "completed", "completed"])
        const views = yield* Effect.forEach(runs, (r) => api.runs.get({ path: { runId: r.id }, urlParams: {} }))
        expect(views.map((v) => v.cost?.providerInstance)).toEqual(["openai", "anthropic", "anthropic", "openai"])
        expect(views[1]!.cost).toMatchObject({ inputTokens: 900, cacheWriteTokens: 200, cacheReadTokens: 300, outputTokens: 40 })
        const items = (yield* allItems(threadId)).filter((i) => i.kind !== "summary")
        expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === "toolu_9")).toHaveLength(1)
        expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === "toolu_9").map((i) => i.text)).toEqual(["a.ts\nb.ts"])
        expect(items.filter((i) => i.kind === "user_message" && i.text === "now, on the other model: list the directory")).toHaveLength(1)
        for (let i = 0; i < 10; i++) expect(items.filter((x) => x.kind === "tool_result" && x.toolCallId === `call_${i}`)).toHaveLength(1)
        const events = threadEvents((yield* raw(HttpClientRequest.get(`/threads/${threadId}/events?follow=false`).pipe(HttpClientRequest.bearerToken(adminToken)))).text)
        expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
      })
    ), { timeout: 120_000 })

  it.live("the Anthropic upstream's thread_read calls are answered by the gateway, streamed and whole; Codex never sees them", () =>
    withGateway((_openai, anthropic) =>
      Effect.gen(function*() {
        const out = `hello-output ${words(9, 50)}`
        const input = [developer("system prompt"), user("run it"), call("call_a", "echo hello"), output("call_a", out)]
        const read = { id: "toolu_r", name: "thread_read", arguments: JSON.stringify({ refs: "tool:call_a" }) }
        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Let me read.", usage, [read]), ModelApi.answer("anthropic-messages", "It said hello.", usage))
        const streamed = yield* raw(responses({ model: "claude-x", stream: true, tools, input }))
        expect(streamed.status).toBe(200)
        expect(streamed.text).not.toContain("thread_read")
        expect(streamed.text.match(/event: response\.created/g)).toHaveLength(1)
        expect(streamed.text.match(/event: response\.completed/g)).toHaveLength(1)
        const reply = assembled(streamed.text)
        expect(reply.messages.map((m) => (m.message as { content: Array<{ text: string }> }).content[0]!.text)).toEqual(["Let me read.", "It said hello."])
        expect(reply.tokens).toEqual({ inputTokens: 1_800, cacheWriteTokens: 400, cacheReadTokens: 600, outputTokens: 80 })
        expect(anthropic.requests).toHaveLength(2)
        const second = JSON.parse(anthropic.requests[1]!.body) as { messages: ReadonlyArray<{ role: string; content: ReadonlyArray<Record<string, unknown>> }> }
        expect(second.messages.at(-2)).toEqual({ role: "assistant", content: [{ type: "text", text: "Let me read." }, { type: "tool_use", id: "toolu_r", name: "thread_read", input: { refs: "tool:call_a" } }] })
        expect(String(second.messages.at(-1)!.content[0]!.content)).toContain(out)

        // Whole: the agent gets only the last answer, with every hop's usage.
        const whole = (content: ReadonlyArray<Record<string, unknown>>, stop: string) => ({
          status: 200,
          contentType: "application/json",
          body: JSON.stringify({ id: `msg_${stop}`, type: "message", role: "assistant", content, stop_reason: stop, usage: { input_tokens: 100, cache_read_input_tokens: 40, output_tokens: 5 } })
        })
        anthropic.enqueue(whole([{ type: "tool_use", id: "toolu_w", name: "thread_read", input: { refs: "tool:call_a" } }], "tool_use"), whole([{ type: "text", text: "Read: hello." }], "end_turn"))
        const again = yield* raw(responses({ model: "claude-x", tools, input: [...input, ...reply.messages.map((m) => m.message as Input), user("and again")] }))
        expect(again.status).toBe(200)
        expect(again.body).toMatchObject({ status: "completed", output: [{ type: "message", content: [{ type: "output_text", text: "Read: hello." }] }], usage: { input_tokens: 280, input_tokens_details: { cached_tokens: 80 }, output_tokens: 10 } })
        expect(anthropic.requests).toHaveLength(4)
        expect(anthropic.requests[3]!.body).toContain(JSON.stringify(out).slice(1, -1))
      })
    ), { timeout: 60_000 })

  it.live("errors in OpenAI's shape: a 429, an error in the stream as response.failed; an overflow Baton cannot fit as context_length_exceeded, never sent", () =>
    withGateway((_openai, anthropic) =>
      Effect.gen(function*() {
        const body = { model: "claude-x", instructions, input: [user("hi")] }
        anthropic.enqueue({ status: 429, contentType: "application/json", body: JSON.stringify({ type: "error", error: { type: "rate_limit_error", message: "Number of request tokens has exceeded your per-minute rate limit" } }) })
        const limited = yield* raw(responses(body))
        expect(limited.status).toBe(429)
        // OpenAI's own 429: `code` `rate_limit_exceeded`, `type` the limit (`rate_limit_error` is `slow_down`'s type only).
        expect(limited.body).toEqual({ error: { message: "Number of request tokens has exceeded your per-minute rate limit", type: "requests", param: null, code: "rate_limit_exceeded" } })

        anthropic.enqueue({
          status: 200,
          contentType: "text/event-stream",
          body: `event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { id: "msg_e", usage: { input_tokens: 5, output_tokens: 1 } } })}\n\n` +
            `event: error\ndata: ${JSON.stringify({ type: "error", error: { type: "overloaded_error", message: "Overloaded" } })}\n\n`
        })
        const failed = yield* raw(responses({ ...body, stream: true, input: [user("hi"), assistant("x", "msg_x"), user("again")] }))
        expect(failed.status).toBe(200)
        expect(failed.text).toContain("event: response.failed")
        expect(failed.text).toContain("\"code\":\"server_is_overloaded\"")

        const long = yield* raw(responses({ ...body, max_output_tokens: 8_000, stream: true, input: [user(`paste ${words(7, 16_000)}`)] }))
        expect(long.status).toBe(400)
        expect(long.body).toMatchObject({ error: { type: "invalid_request_error", code: "context_length_exceeded", param: "messages" } })
        expect(anthropic.requests).toHaveLength(2)

        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        const runs = (yield* Effect.forEach(threads, (t) => api.runs.list({ path: { threadId: t.id }, urlParams: {} }))).flatMap((p) => p.runs)
        expect(runs.map((r) => [r.status, r.failureCode]).sort()).toEqual([["failed", "overflow"], ["failed", "provider_unavailable"], ["failed", "provider_unavailable"]].sort())
      })
    ), { timeout: 60_000 })
})
