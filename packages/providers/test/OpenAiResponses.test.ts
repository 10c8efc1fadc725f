/**
 * The OpenAI Responses adapter against a loopback server replaying every recorded Responses fixture (streamed and
 * JSON), the real error bodies, and the bodies it sends (store: false, the input list Baton keeps, calls and outputs
 * paired, each request extending the previous one byte for byte, a restart changing nothing).
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Option } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { type ToolDefinition, TurnEvent } from "../src/ProviderAdapter.js"
import { adapterFor, collect, eventType, fixtureLines, fixturesDir, frame, httpLayer, itemsOf, json, loopback, sqliteFile, sse } from "./support/Loopback.js"

const kind = "openai-responses" as const
const streamed = (file: string) => sse(frame(kind, fixtureLines(`openai-responses/${file}`)))
const body = (file: string) => json(200, Fs.readFileSync(Path.join(fixturesDir, "openai-responses", file), "utf8"))
const failureOf = <A, E>(exit: Exit.Exit<A, E>) => (Exit.isFailure(exit) ? Option.getOrNull(Cause.failureOption(exit.cause)) : null)

const usageOf = (events: ReadonlyArray<TurnEvent>) => {
  const reports = events.filter(TurnEvent.$is("usage_reported"))
  const last = reports[reports.length - 1]
  return last === undefined ? null : { used: last.usage.usedTokens, tokens: last.tokens }
}
const tokens = (inputTokens: number, cacheReadTokens: number, outputTokens: number) => ({ inputTokens, cacheWriteTokens: 0, cacheReadTokens, outputTokens })

/** Client tools named `names` (an empty object schema each), as a client declares them on a message. */
const declared = (...names: ReadonlyArray<string>): ReadonlyArray<ToolDefinition> =>
  names.map((name) => ({ name, description: `the fixture's ${name}`, inputSchema: { type: "object" } }))

/**
 * One turn of `replies` on a fresh adapter offering the client tools `tools` (a call to a tool not offered is answered
 * by Baton with an error result and the turn goes on, so a fixture that calls a tool must declare it).
 */
const turnDeclaring = (tools: ReadonlyArray<ToolDefinition>, ...replies: ReadonlyArray<ReturnType<typeof sse>>) =>
  Effect.gen(function*() {
    const loop = yield* loopback
    const file = yield* sqliteFile
    loop.enqueue(...replies)
    const adapter = yield* adapterFor(kind, loop, file)
    const { nativeRef } = yield* adapter.startThread()
    const result = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Hi", inlineHistory: null, tools }))
    return { ...result, loop, adapter, nativeRef, file }
  })

/** One turn of `replies` on a fresh adapter with no client tools. */
const turnWith = (...replies: ReadonlyArray<ReturnType<typeof sse>>) => turnDeclaring([], ...replies)

/** `openai-custom-tool` (the follow-up reply of several tests) calls `write_sql`. */
const sql = declared("write_sql")

describe("OpenAI Responses: every recorded fixture", () => {
  it.scoped("openai-reasoning-encrypted-content: a 4-request tool loop; reasoning carried back encrypted; each request extends the last byte for byte", () =>
    Effect.gen(function*() {
      // The fixture is four responses recorded back to back: served as four requests.
      const responses: Array<Array<string>> = []
      for (const line of fixtureLines("openai-responses/openai-reasoning-encrypted-content.1.chunks.txt")) {
        if (eventType(line) === "response.created") responses.push([])
        responses[responses.length - 1]!.push(line)
      }
      expect(responses).toHaveLength(4)
      const loop = yield* loopback
      const file = yield* sqliteFile
      loop.enqueue(...responses.map((r) => sse(frame(kind, r))))
      const adapter = yield* adapterFor(kind, loop, file, { systemPrompt: "Use the calculator." })
      const { nativeRef } = yield* adapter.startThread()
      const calculator = { name: "calculator", description: "a op b", inputSchema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" }, op: { type: "string" } } } }
      const prompt = "Compute (12 + 7) * 3 * 10 step by step."
      const first = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt, inlineHistory: null, tools: [calculator] }))
      expect(itemsOf(first.events)).toEqual([
        ["reasoning", "**Calculating step-by-step using calculator**\n\nI'll compute 12 plus 7, then multiply the result by 3, and finally multiply that by 10, reporting the final product.", null, null],
        ["tool_call", `{"a":12,"b":7,"op":"add"}`, "call_AB6AaRZ1FYZB2RwS6A5vbdqn", "calculator"]
      ])
      expect(usageOf(first.events)).toEqual({ used: 162, tokens: tokens(134, 0, 28) })
      expect(first.events[first.events.length - 1]).toEqual(TurnEvent.turn_ended({ interrupted: false, pendingToolCalls: ["call_AB6AaRZ1FYZB2RwS6A5vbdqn"] }))
      const results = ["19", "57", "570"]
      const calls = ["call_AB6AaRZ1FYZB2RwS6A5vbdqn", "call_Q6pW65MUgW9vF59BmItYGos3", "call_Zl5vIMnD7dVAjgU6FkhmiCZh"]
      const outcomes = []
      for (let i = 0; i < 3; i++) {
        outcomes.push(yield* collect(adapter.continueTurn!({ nativeRef, runId: "run-1", toolResults: [{ toolCallId: calls[i]!, output: results[i]!, isError: false }], tools: [calculator] })))
      }
      expect(outcomes.map((o) => itemsOf(o.events))).toEqual([
        [["tool_call", `{"a":19,"b":3,"op":"multiply"}`, "call_Q6pW65MUgW9vF59BmItYGos3", "calculator"]],
        [["tool_call", `{"a":57,"b":10,"op":"multiply"}`, "call_Zl5vIMnD7dVAjgU6FkhmiCZh", "calculator"]],
        [["assistant_message", "The final result is **570**.", null, null]]
      ])
      expect(outcomes.map((o) => usageOf(o.events))).toEqual([
        { used: 247, tokens: tokens(221, 0, 26) },
        { used: 286, tokens: tokens(260, 0, 26) },
        { used: 311, tokens: tokens(299, 0, 12) }
      ])
      const bodies = loop.requests.map((r) => r.body)
      const sent = bodies.map((b) => JSON.parse(b))
      expect(sent[0]).toMatchObject({ model: "gpt-5", store: false, stream: true, include: ["reasoning.encrypted_content"], prompt_cache_key: nativeRef, instructions: "Use the calculator." })
      expect(sent[0].input).toEqual([{ type: "message", role: "user", content: [{ type: "input_text", text: prompt }] }])
      expect(sent[3].input.map((i: { type: string; call_id?: string }) => [i.type, i.call_id ?? null])).toEqual([
        ["message", null],
        ["reasoning", null],
        ["function_call", calls[0]],
        ["function_call_output", calls[0]],
        ["function_call", calls[1]],
        ["function_call_output", calls[1]],
        ["function_call", calls[2]],
        ["function_call_output", calls[2]]
      ])
      // Stateless: nothing refers to a stored item (no ids), the reasoning goes back by its encrypted content.
      expect(sent[3].input[1].encrypted_content.length).toBe(1060)
      expect(bodies[3]).not.toContain(`"id":"rs_`)
      expect(bodies[3]).not.toContain(`"id":"fc_`)
      for (let i = 1; i < 4; i++) expect(bodies[i]!.startsWith(bodies[i - 1]!.slice(0, -2))).toBe(true)
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("openai-reasoning-encrypted-content.json: reasoning and the answer from a non-streamed body", () =>
    Effect.gen(function*() {
      const { events } = yield* turnWith(body("openai-reasoning-encrypted-content.1.json"))
      expect(itemsOf(events).map(([k]) => k)).toEqual(["reasoning", "assistant_message"])
      expect(usageOf(events)).toEqual({ used: 1028, tokens: tokens(865, 0, 163) })
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("parallel-tool-call-wrapper: the wrapper is unwrapped into two calls; its completion event is not JSON (as recorded): a typed protocol error after them", () =>
    Effect.gen(function*() {
      const { events, exit, adapter, nativeRef, loop } = yield* turnDeclaring(declared("weather", "cityAttractions", "write_sql"), streamed("parallel-tool-call-wrapper.1.chunks.txt"), streamed("openai-custom-tool.1.chunks.txt"))
      expect(itemsOf(events)).toEqual([
        ["tool_call", `{"location":"San Francisco"}`, "call_parallel_0", "weather"],
        ["tool_call", `{"city":"Rome"}`, "call_parallel_1", "cityAttractions"]
      ])
      // The recorded response.created and response.completed lines lack their closing brace: response.created is
      // never read (Baton skips events it does not use), response.completed is, and cannot be.
      const error = failureOf(exit)
      expect(error?.code).toBe("protocol")
      expect(error?.reason).toContain("unreadable OpenAI Responses event response.completed")
      // The calls stand in the native thread: the next turn answers them (with error results) before its prompt.
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "go on", inlineHistory: null, tools: sql }))
      const input = JSON.parse(loop.requests[1]!.body).input
      expect(input.slice(1)).toEqual([
        { type: "function_call", call_id: "call_parallel_0", name: "weather", arguments: `{"location":"San Francisco"}` },
        { type: "function_call", call_id: "call_parallel_1", name: "cityAttractions", arguments: `{"city":"Rome"}` },
        { type: "function_call_output", call_id: "call_parallel_0", output: "Error: [no result: the tool call was not answered before the conversation went on]" },
        { type: "function_call_output", call_id: "call_parallel_1", output: "Error: [no result: the tool call was not answered before the conversation went on]" },
        { type: "message", role: "user", content: [{ type: "input_text", text: "go on" }] }
      ])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("parallel-tool-call-wrapper.json: two pending calls, usage 34 + 28; their results go back paired", () =>
    Effect.gen(function*() {
      const { events, adapter, nativeRef, loop } = yield* turnDeclaring(declared("weather", "cityAttractions"), body("parallel-tool-call-wrapper.1.json"), streamed("openai-custom-tool.1.chunks.txt"))
      expect(itemsOf(events).map(([k, , id, name]) => [k, id, name])).toEqual([["tool_call", "call_parallel_0", "weather"], ["tool_call", "call_parallel_1", "cityAttractions"]])
      expect(usageOf(events)).toEqual({ used: 62, tokens: tokens(34, 0, 28) })
      expect(events[events.length - 1]).toEqual(TurnEvent.turn_ended({ interrupted: false, pendingToolCalls: ["call_parallel_0", "call_parallel_1"] }))
      yield* collect(adapter.continueTurn!({
        nativeRef,
        runId: "run-1",
        toolResults: [{ toolCallId: "call_parallel_1", output: "Colosseum", isError: false }, { toolCallId: "call_parallel_0", output: "72F", isError: false }],
        tools: sql
      }))
      const input = JSON.parse(loop.requests[1]!.body).input
      expect(input.slice(3)).toEqual([
        { type: "function_call_output", call_id: "call_parallel_0", output: "72F" },
        { type: "function_call_output", call_id: "call_parallel_1", output: "Colosseum" }
      ])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("two function calls with one call_id: the first stands, the response fails as a typed protocol error; the next request answers the id once", () =>
    Effect.gen(function*() {
      const call = (args: string) => ({ type: "function_call", id: "fc_1", call_id: "call_same", name: "weather", arguments: args, status: "completed" })
      const twice = json(200, JSON.stringify({
        id: "resp_d",
        status: "completed",
        output: [call(`{"location":"Paris"}`), call(`{"location":"Rome"}`)],
        usage: { input_tokens: 30, output_tokens: 10, input_tokens_details: { cached_tokens: 0 } }
      }))
      const { adapter, events, exit, loop, nativeRef } = yield* turnDeclaring(declared("weather", "write_sql"), twice, streamed("openai-custom-tool.1.chunks.txt"))
      expect(itemsOf(events)).toEqual([["tool_call", `{"location":"Paris"}`, "call_same", "weather"]])
      expect([failureOf(exit)?.code, failureOf(exit)?.reason]).toEqual([
        "protocol",
        `the OpenAI Responses response holds two tool calls with id "call_same"; the duplicate is dropped and the response fails`
      ])
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "go on", inlineHistory: null, tools: sql }))
      const input = JSON.parse(loop.requests[1]!.body).input
      expect(input.slice(1, 3)).toEqual([
        { type: "function_call", call_id: "call_same", name: "weather", arguments: `{"location":"Paris"}` },
        { type: "function_call_output", call_id: "call_same", output: "Error: [no result: the tool call was not answered before the conversation went on]" }
      ])
    }).pipe(Effect.provide(httpLayer)))

  // Found by a review: a call cut by max_output_tokens while its arguments streamed was run with truncated JSON.
  it.scoped("an answer cut by max_output_tokens inside a function_call (streamed and JSON): the text stands, the cut call is neither run nor stored and an error item says why; the turn ends normally", () =>
    Effect.gen(function*() {
      const message = { type: "message", id: "msg_1", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Writing the file now." }] }
      const cutCall = { type: "function_call", id: "fc_big", call_id: "call_big", name: "write_file", arguments: `{"path":"x","content":"aaaa`, status: "incomplete" }
      const response = { id: "resp_cut", status: "incomplete", incomplete_details: { reason: "max_output_tokens" }, output: [message, cutCall], usage: { input_tokens: 10, output_tokens: 4096, input_tokens_details: { cached_tokens: 0 } } }
      const streamedCut = sse(frame(kind, [
        JSON.stringify({ type: "response.output_item.done", output_index: 0, item: message }),
        JSON.stringify({ type: "response.function_call_arguments.delta", output_index: 1, item_id: "fc_big", delta: `{"path":"x","content":"aaaa` }),
        JSON.stringify({ type: "response.output_item.done", output_index: 1, item: cutCall }),
        JSON.stringify({ type: "response.incomplete", response })
      ]))
      // The same cut where the call's output_item.done never came: the call is only in the final output list.
      const neverDone = sse(frame(kind, [
        JSON.stringify({ type: "response.output_item.done", output_index: 0, item: message }),
        JSON.stringify({ type: "response.incomplete", response: { ...response, output: [message, { ...cutCall, status: "in_progress" }] } })
      ]))
      for (const reply of [streamedCut, neverDone, json(200, JSON.stringify(response))]) {
        const { adapter, events, exit, loop, nativeRef } = yield* turnDeclaring(declared("write_file"), reply, streamed("openai-custom-tool.1.chunks.txt"))
        expect(Exit.isSuccess(exit)).toBe(true)
        expect(itemsOf(events).map(([k, t]) => [k, t])).toEqual([
          ["assistant_message", "Writing the file now."],
          ["error", "The answer reached its output limit (max_output_tokens) inside a call to write_file (call_big): the call was cut off and not run"]
        ])
        expect(events.at(-1)).toEqual(TurnEvent.turn_ended({ interrupted: false }))
        // The next request carries the text, not the cut call (nothing open to close).
        yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "go on", inlineHistory: null, tools: sql }))
        const input = JSON.parse(loop.requests[1]!.body).input
        expect(input.slice(1).map((i: { type: string }) => i.type)).toEqual(["message", "message"])
        expect(loop.requests[1]!.body).not.toContain("call_big")
      }
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("a failed tool result (isError) goes back marked: function_call_output's output starts with \"Error: \" (the API has no error field)", () =>
    Effect.gen(function*() {
      const { adapter, nativeRef, loop } = yield* turnDeclaring(declared("weather", "cityAttractions"), body("parallel-tool-call-wrapper.1.json"), streamed("openai-custom-tool.1.chunks.txt"))
      yield* collect(adapter.continueTurn!({
        nativeRef,
        runId: "run-1",
        toolResults: [{ toolCallId: "call_parallel_0", output: "72F", isError: false }, { toolCallId: "call_parallel_1", output: "no such city", isError: true }],
        tools: sql
      }))
      expect(loop.requests[1]!.body).toContain(
        `{"type":"function_call_output","call_id":"call_parallel_0","output":"72F"},{"type":"function_call_output","call_id":"call_parallel_1","output":"Error: no such city"}`
      )
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("openai-custom-tool (and .json): a custom tool call; its result goes back as custom_tool_call_output", () =>
    Effect.gen(function*() {
      const { events, adapter, nativeRef, loop } = yield* turnDeclaring(sql, streamed("openai-custom-tool.1.chunks.txt"), streamed("openai-custom-tool.1.chunks.txt"))
      expect(itemsOf(events)).toEqual([["tool_call", "SELECT * FROM users WHERE age > 25", "call_custom_sql_001", "write_sql"]])
      expect(usageOf(events)).toEqual({ used: 70, tokens: tokens(50, 0, 20) })
      yield* collect(adapter.continueTurn!({ nativeRef, runId: "run-1", toolResults: [{ toolCallId: "call_custom_sql_001", output: "3 rows", isError: false }], tools: sql }))
      const input = JSON.parse(loop.requests[1]!.body).input
      expect(input.slice(1)).toEqual([
        { type: "custom_tool_call", call_id: "call_custom_sql_001", name: "write_sql", input: "SELECT * FROM users WHERE age > 25" },
        { type: "custom_tool_call_output", call_id: "call_custom_sql_001", output: "3 rows" }
      ])
      const fromJson = yield* turnDeclaring(sql, body("openai-custom-tool.1.json"))
      expect(itemsOf(fromJson.events)).toEqual([["tool_call", "SELECT * FROM users WHERE age > 25", "call_custom_sql_001", "write_sql"]])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("openai-local-shell-tool (and .json): a local_shell call; the reasoning without encrypted content is not kept", () =>
    Effect.gen(function*() {
      const { events, adapter, nativeRef, loop } = yield* turnDeclaring(declared("local_shell"), streamed("openai-local-shell-tool.1.chunks.txt"), streamed("openai-custom-tool.1.chunks.txt"))
      expect(itemsOf(events)).toEqual([["tool_call", `{"type":"exec","command":["ls","-a","~"],"env":{}}`, "call_h3nm8hUG0KO9tVNuRACkL1ri", "local_shell"]])
      expect(usageOf(events)).toEqual({ used: 558, tokens: tokens(407, 0, 151) })
      yield* collect(adapter.continueTurn!({ nativeRef, runId: "run-1", toolResults: [{ toolCallId: "call_h3nm8hUG0KO9tVNuRACkL1ri", output: ".\n..", isError: false }], tools: sql }))
      const input = JSON.parse(loop.requests[1]!.body).input
      expect(input.slice(1).map((i: { type: string }) => i.type)).toEqual(["local_shell_call", "local_shell_call_output"])
      const fromJson = yield* turnDeclaring(declared("local_shell"), body("openai-local-shell-tool.1.json"))
      expect(usageOf(fromJson.events)).toEqual({ used: 431, tokens: tokens(407, 0, 24) })
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("openai-compaction (and .json): the answer and a summary item; 49,792 of 51,097 input tokens cached; the compaction item goes back unchanged", () =>
    Effect.gen(function*() {
      const { events, adapter, nativeRef, loop } = yield* turnWith(streamed("openai-compaction.1.chunks.txt"), streamed("openai-custom-tool.1.chunks.txt"))
      expect(itemsOf(events).map(([k, t]) => [k, t.length])).toEqual([["assistant_message", 3483], ["summary", 67]])
      expect(usageOf(events)).toEqual({ used: 53602, tokens: tokens(1305, 49792, 2505) })
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "next", inlineHistory: null, tools: sql }))
      const input = JSON.parse(loop.requests[1]!.body).input
      expect(input.map((i: { type: string }) => i.type)).toEqual(["message", "message", "compaction", "message"])
      expect(Object.keys(input[2])).toEqual(["type", "encrypted_content"])
      expect(input[2].encrypted_content.length).toBe(42360)
      const fromJson = yield* turnWith(body("openai-compaction.1.json"))
      expect(itemsOf(fromJson.events).map(([k]) => k)).toEqual(["assistant_message", "summary"])
      expect(usageOf(fromJson.events)).toEqual({ used: 53153, tokens: tokens(51097, 0, 2056) })
    }).pipe(Effect.provide(httpLayer)))
})

describe("OpenAI Responses: errors", () => {
  it.scoped("HTTP 400 context_length_exceeded: a typed overflow with N = 8227 and M = 8192, not retried", () =>
    Effect.gen(function*() {
      const { exit, loop } = yield* turnWith(json(400, `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`))
      const error = failureOf(exit)
      expect([error?.code, error?.requestedTokens, error?.limitTokens, error?.retryable, error?.httpStatus]).toEqual(["overflow", 8227, 8192, false, 400])
      expect(loop.requests).toHaveLength(1)
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("response.failed with context_length_exceeded mid-stream: the items before stand, then a typed overflow", () =>
    Effect.gen(function*() {
      const lines = fixtureLines("openai-responses/openai-custom-tool.1.chunks.txt").filter((l) => eventType(l) !== "response.completed")
      lines.push(`{"type":"response.failed","response":{"id":"resp_x","status":"failed","error":{"code":"context_length_exceeded","message":"Your input exceeds the context window of this model. Please adjust your input and try again."},"usage":null}}`)
      const { events, exit } = yield* turnWith(sse(frame(kind, lines)))
      expect(itemsOf(events).map(([k]) => k)).toEqual(["tool_call"])
      const error = failureOf(exit)
      expect([error?.code, error?.operation]).toEqual(["overflow", "startTurn"])
      expect(error?.reason).toContain("Your input exceeds the context window of this model")
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("a connection dropped mid-stream: the completed item stands, then a retryable unavailable error", () =>
    Effect.gen(function*() {
      const chunks = frame(kind, fixtureLines("openai-responses/openai-local-shell-tool.1.chunks.txt"))
      const { events, exit } = yield* turnWith(sse(chunks, { dropAfter: 6, gapMillis: 5 }))
      expect(itemsOf(events).map(([k]) => k)).toEqual(["tool_call"])
      expect([failureOf(exit)?.code, failureOf(exit)?.retryable]).toEqual(["unavailable", true])
    }).pipe(Effect.provide(httpLayer)))
})
