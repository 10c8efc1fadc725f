/**
 * The Chat Completions adapter (vLLM, llama.cpp, Ollama, LM Studio, OpenAI) against a loopback server: the recorded
 * fixture (streamed and JSON), streamed tool calls assembled by index, usage from `stream_options.include_usage`,
 * overflow bodies, a dropped connection, malformed chunks, and the bodies it sends across a restart.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Option } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { TurnEvent } from "../src/ProviderAdapter.js"
import { adapterFor, collect, fixtureLines, fixturesDir, frame, httpLayer, itemsOf, json, loopback, sqliteFile, sse } from "./support/Loopback.js"

const kind = "openai-chat" as const
const failureOf = <A, E>(exit: Exit.Exit<A, E>) => (Exit.isFailure(exit) ? Option.getOrNull(Cause.failureOption(exit.cause)) : null)
const usageOf = (events: ReadonlyArray<TurnEvent>) => {
  const reports = events.filter(TurnEvent.$is("usage_reported"))
  const last = reports[reports.length - 1]
  return last === undefined ? null : { used: last.usage.usedTokens, tokens: last.tokens }
}

/** A streamed answer with two parallel tool calls, in the chunk shapes vLLM and OpenAI send (deltas keyed by index). */
const toolCallChunks = [
  `{"id":"chatcmpl-t","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"Two lookups."},"finish_reason":null}]}`,
  `{"id":"chatcmpl-t","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"weather","arguments":""}}]},"finish_reason":null}]}`,
  `{"id":"chatcmpl-t","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"cityAttractions","arguments":"{\\"ci"}}]},"finish_reason":null}]}`,
  `{"id":"chatcmpl-t","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"location\\": "}}]},"finish_reason":null}]}`,
  `{"id":"chatcmpl-t","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"ty\\": \\"Rome\\"}"}}]},"finish_reason":null}]}`,
  `{"id":"chatcmpl-t","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\\"Paris\\"}"}}]},"finish_reason":null}]}`,
  `{"id":"chatcmpl-t","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
  `{"id":"chatcmpl-t","choices":[],"usage":{"prompt_tokens":120,"completion_tokens":40,"total_tokens":160,"prompt_tokens_details":{"cached_tokens":64}}}`
]

const turnWith = (...replies: ReadonlyArray<ReturnType<typeof sse>>) =>
  Effect.gen(function*() {
    const loop = yield* loopback
    const file = yield* sqliteFile
    loop.enqueue(...replies)
    const adapter = yield* adapterFor(kind, loop, file)
    const { nativeRef } = yield* adapter.startThread()
    const result = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Hi", inlineHistory: null }))
    return { ...result, loop, adapter, nativeRef, file }
  })

describe("Chat Completions", () => {
  it.scoped("openai-text: the text assembled from 300 deltas; usage from the final chunk (16 + 300)", () =>
    Effect.gen(function*() {
      const { events, exit, loop } = yield* turnWith(sse(frame(kind, fixtureLines("openai-chat/openai-text.chunks.txt"))))
      expect(Exit.isSuccess(exit)).toBe(true)
      const items = itemsOf(events)
      expect(items.map(([k, t]) => [k, t.length])).toEqual([["assistant_message", 1724]])
      expect(items[0]![1].startsWith("**Holiday Name:** Harmony Day\n\n**Date:** Celebrate")).toBe(true)
      expect(items[0]![1].endsWith("xperiences and mutual respect.")).toBe(true)
      expect(usageOf(events)).toEqual({ used: 316, tokens: { inputTokens: 16, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 300 } })
      const sent = JSON.parse(loop.requests[0]!.body)
      expect(sent).toEqual({
        model: "gpt-5",
        max_tokens: 4096,
        stream: true,
        stream_options: { include_usage: true },
        messages: [{ role: "user", content: "Hi" }]
      })
      expect(loop.requests[0]!.url).toBe("/v1/chat/completions")
      expect(loop.requests[0]!.headers.authorization).toBe("Bearer sk-test-key")
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("openai-text.json: the same from a non-streamed body (16 + 363)", () =>
    Effect.gen(function*() {
      const { events } = yield* turnWith(json(200, Fs.readFileSync(Path.join(fixturesDir, "openai-chat/openai-text.json"), "utf8")))
      expect(itemsOf(events).map(([k, t]) => [k, t.length])).toEqual([["assistant_message", 1842]])
      expect(usageOf(events)?.used).toBe(379)
    }).pipe(Effect.provide(httpLayer)))

  const tools = ["weather", "cityAttractions"].map((name) => ({ name, description: `looks up ${name}`, inputSchema: { type: "object" } }))

  it.scoped("two streamed tool calls with one id: the text and the first call stand, the response fails as a typed protocol error; the log holds the first call only", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const twice = toolCallChunks.map((l) => l.replace(`"id":"call_b"`, `"id":"call_a"`))
      loop.enqueue(sse(frame(kind, twice)), sse(frame(kind, fixtureLines("openai-chat/openai-text.chunks.txt"))))
      const adapter = yield* adapterFor(kind, loop, file)
      const { nativeRef } = yield* adapter.startThread()
      const { events, exit } = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Paris weather and Rome sights?", inlineHistory: null, tools }))
      expect(itemsOf(events)).toEqual([["reasoning", "Two lookups.", null, null], ["tool_call", `{"location": "Paris"}`, "call_a", "weather"]])
      const error = Exit.isFailure(exit) ? Option.getOrNull(Cause.failureOption(exit.cause)) : null
      expect([error?.code, error?.reason]).toEqual(["protocol", `the Chat Completions response holds two tool calls with id "call_a"; the duplicate is dropped and the response fails`])
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "go on", inlineHistory: null, tools }))
      expect(JSON.parse(loop.requests[1]!.body).messages.slice(1, 3)).toEqual([
        { role: "assistant", content: null, tool_calls: [{ id: "call_a", type: "function", function: { name: "weather", arguments: `{"location": "Paris"}` } }] },
        { role: "tool", tool_call_id: "call_a", content: "Error: [no result: the tool call was not answered before the conversation went on]" }
      ])
    }).pipe(Effect.provide(httpLayer)))

  // Found in review (stop 44, after the gateway's fix of the same, branch b44gwp): Google's OpenAI-compatible endpoint
  // sends tool-call deltas without `index`; each was call 0, so Gemini's parallel calls were glued into one call
  // (`{"location": "Paris"}{"city": "Rome"}` under the first id) and the second was lost.
  it.scoped("tool-call deltas without an index (Gemini's OpenAI-compatible form): each new id a call of its own, later argument pieces the previous call's", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const indexless = [
        `{"id":"chatcmpl-g","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"id":"call_a","type":"function","function":{"name":"weather","arguments":"{\\"location\\": "}}]},"finish_reason":null}]}`,
        `{"id":"chatcmpl-g","choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"\\"Paris\\"}"}}]},"finish_reason":null}]}`,
        `{"id":"chatcmpl-g","choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_b","type":"function","function":{"name":"cityAttractions","arguments":"{\\"city\\": \\"Rome\\"}"}}]},"finish_reason":null}]}`,
        `{"id":"chatcmpl-g","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`
      ]
      loop.enqueue(sse(frame(kind, indexless)), sse(frame(kind, fixtureLines("openai-chat/openai-text.chunks.txt"))))
      const adapter = yield* adapterFor(kind, loop, file)
      const { nativeRef } = yield* adapter.startThread()
      const { events, exit } = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Paris weather and Rome sights?", inlineHistory: null, tools }))
      expect(Exit.isSuccess(exit)).toBe(true)
      expect(itemsOf(events)).toEqual([
        ["tool_call", `{"location": "Paris"}`, "call_a", "weather"],
        ["tool_call", `{"city": "Rome"}`, "call_b", "cityAttractions"]
      ])
    }).pipe(Effect.provide(httpLayer)))

  // Found by a review: an answer cut by finish_reason "length" inside a call's arguments ran the call with truncated JSON.
  it.scoped("an answer cut by finish_reason length inside a tool call: the text and the complete call stand, the cut call is neither run nor stored and an error item says why", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const cut = [
        `{"id":"chatcmpl-c","choices":[{"index":0,"delta":{"role":"assistant","content":"Two writes."},"finish_reason":null}]}`,
        `{"id":"chatcmpl-c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"weather","arguments":"{\\"location\\": \\"Paris\\"}"}}]},"finish_reason":null}]}`,
        `{"id":"chatcmpl-c","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_big","type":"function","function":{"name":"cityAttractions","arguments":"{\\"city\\": \\"Ro"}}]},"finish_reason":null}]}`,
        `{"id":"chatcmpl-c","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`,
        `{"id":"chatcmpl-c","choices":[],"usage":{"prompt_tokens":120,"completion_tokens":40,"total_tokens":160}}`
      ]
      loop.enqueue(sse(frame(kind, cut)), sse(frame(kind, fixtureLines("openai-chat/openai-text.chunks.txt"))))
      const adapter = yield* adapterFor(kind, loop, file)
      const { nativeRef } = yield* adapter.startThread()
      const { events, exit } = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Paris weather and Rome sights?", inlineHistory: null, tools }))
      expect(Exit.isSuccess(exit)).toBe(true)
      expect(itemsOf(events).map(([k, t, id]) => [k, t, id])).toEqual([
        ["assistant_message", "Two writes.", null],
        ["tool_call", `{"location": "Paris"}`, "call_a"],
        ["error", "The answer reached its output limit (finish_reason length) inside a call to cityAttractions (call_big): the call was cut off and not run", null]
      ])
      expect(events.at(-1)).toEqual(TurnEvent.turn_ended({ interrupted: false, pendingToolCalls: ["call_a"] }))
      yield* collect(adapter.continueTurn!({ nativeRef, runId: "run-1", toolResults: [{ toolCallId: "call_a", output: "72F", isError: false }], tools }))
      expect(JSON.parse(loop.requests[1]!.body).messages.slice(1)).toEqual([
        { role: "assistant", content: "Two writes.", tool_calls: [{ id: "call_a", type: "function", function: { name: "weather", arguments: `{"location": "Paris"}` } }] },
        { role: "tool", tool_call_id: "call_a", content: "72F" }
      ])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("a failed tool result (isError) goes back marked: the tool message's content starts with \"Error: \" (the API has no error field)", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      loop.enqueue(sse(frame(kind, toolCallChunks)), sse(frame(kind, fixtureLines("openai-chat/openai-text.chunks.txt"))))
      const adapter = yield* adapterFor(kind, loop, file)
      const { nativeRef } = yield* adapter.startThread()
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Paris weather and Rome sights?", inlineHistory: null, tools }))
      yield* collect(adapter.continueTurn!({
        nativeRef,
        runId: "run-1",
        toolResults: [{ toolCallId: "call_a", output: "service down", isError: true }, { toolCallId: "call_b", output: "Colosseum", isError: false }],
        tools
      }))
      expect(loop.requests[1]!.body).toContain(
        `{"role":"tool","tool_call_id":"call_a","content":"Error: service down"},{"role":"tool","tool_call_id":"call_b","content":"Colosseum"}`
      )
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("streamed tool calls assembled by index; cached prompt tokens billed as cache reads; results paired after a restart, byte-identical", () =>
    Effect.gen(function*() {
      const run = (restart: boolean) =>
        Effect.gen(function*() {
          const loop = yield* loopback
          const file = yield* sqliteFile
          loop.enqueue(sse(frame(kind, toolCallChunks)), sse(frame(kind, fixtureLines("openai-chat/openai-text.chunks.txt"))))
          const a = yield* adapterFor(kind, loop, file, { systemPrompt: "Be brief." })
          const { nativeRef } = yield* a.startThread()
          const first = yield* collect(a.startTurn({ nativeRef, runId: "run-1", prompt: "Paris weather and Rome sights?", inlineHistory: null, tools }))
          const b = restart ? yield* adapterFor(kind, loop, file, { systemPrompt: "Be brief." }) : a
          yield* collect(b.continueTurn!({
            nativeRef,
            runId: "run-1",
            toolResults: [{ toolCallId: "call_b", output: "Colosseum", isError: false }, { toolCallId: "call_a", output: "18C", isError: false }],
            tools
          }))
          return { first, bodies: loop.requests.map((r) => r.body) }
        }).pipe(Effect.scoped)
      const { bodies, first } = yield* run(false)
      expect(itemsOf(first.events)).toEqual([
        ["reasoning", "Two lookups.", null, null],
        ["tool_call", `{"location": "Paris"}`, "call_a", "weather"],
        ["tool_call", `{"city": "Rome"}`, "call_b", "cityAttractions"]
      ])
      expect(usageOf(first.events)).toEqual({ used: 160, tokens: { inputTokens: 56, cacheWriteTokens: 0, cacheReadTokens: 64, outputTokens: 40 } })
      expect(first.events[first.events.length - 1]).toEqual(TurnEvent.turn_ended({ interrupted: false, pendingToolCalls: ["call_a", "call_b"] }))
      expect(JSON.parse(bodies[1]!).messages).toEqual([
        { role: "system", content: "Be brief." },
        { role: "user", content: "Paris weather and Rome sights?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [
            { id: "call_a", type: "function", function: { name: "weather", arguments: `{"location": "Paris"}` } },
            { id: "call_b", type: "function", function: { name: "cityAttractions", arguments: `{"city": "Rome"}` } }
          ]
        },
        { role: "tool", tool_call_id: "call_a", content: "18C" },
        { role: "tool", tool_call_id: "call_b", content: "Colosseum" }
      ])
      expect(bodies[1]!.startsWith(bodies[0]!.slice(0, -2))).toBe(true)
      const restarted = yield* run(true)
      expect(restarted.bodies).toEqual(bodies)
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("HTTP 400 context_length_exceeded (OpenAI's body): overflow 8227 > 8192", () =>
    Effect.gen(function*() {
      const { exit } = yield* turnWith(json(400, `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`))
      const error = failureOf(exit)
      expect([error?.code, error?.requestedTokens, error?.limitTokens]).toEqual(["overflow", 8227, 8192])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("HTTP 400 in llama.cpp's server shape (exceed_context_size_error, n_prompt_tokens, n_ctx): overflow 5000 > 4096", () =>
    Effect.gen(function*() {
      const { exit } = yield* turnWith(json(400, `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`))
      const error = failureOf(exit)
      expect([error?.code, error?.requestedTokens, error?.limitTokens]).toEqual(["overflow", 5000, 4096])
    }).pipe(Effect.provide(httpLayer)))

  it.live("503 then success: retried after the backoff", () =>
    Effect.gen(function*() {
      const { events, loop } = yield* turnWith(json(503, `{"error":{"message":"server busy","type":"server_error"}}`), sse(frame(kind, fixtureLines("openai-chat/openai-text.chunks.txt"))))
      expect(loop.requests).toHaveLength(2)
      expect(itemsOf(events)).toHaveLength(1)
    }).pipe(Effect.provide(httpLayer), Effect.scoped))

  it.live("a connection dropped before [DONE]: a retryable unavailable failure; a chunk that is not JSON: a protocol failure", () =>
    Effect.gen(function*() {
      const chunks = frame(kind, fixtureLines("openai-chat/openai-text.chunks.txt"))
      const dropped = yield* turnWith(sse(chunks, { dropAfter: 100, gapMillis: 1 }))
      expect([failureOf(dropped.exit)?.code, failureOf(dropped.exit)?.retryable]).toEqual(["unavailable", true])
      expect(itemsOf(dropped.events)).toEqual([])
      const malformed = yield* turnWith(sse(["data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\n\n"]))
      expect(failureOf(malformed.exit)?.code).toBe("protocol")
    }).pipe(Effect.provide(httpLayer), Effect.scoped))
})
