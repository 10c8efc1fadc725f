/**
 * The Anthropic adapter against a loopback server replaying every recorded Anthropic fixture (streamed and JSON), the
 * real error bodies, faults (429 then success, a dropped connection, malformed SSE), the request bodies it sends
 * (cache breakpoints, byte-for-byte extension, tool pairing) and a restart.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Option, Stream } from "effect"
import * as AnthropicMessages from "../src/AnthropicMessages.js"
import * as ModelApiAdapter from "../src/ModelApiAdapter.js"
import { type ToolDefinition, TurnEvent } from "../src/ProviderAdapter.js"
import { adapterFor, collect, configFor, fixtureLines, frame, httpLayer, itemsOf, json, logOn, loopback, sqliteFile, sse } from "./support/Loopback.js"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fixturesDir } from "./support/Loopback.js"
import { HttpClient } from "@effect/platform"
import { Redacted } from "effect"
import type { ProviderInstance } from "@baton/contracts"

const kind = "anthropic-messages" as const
const streamed = (file: string) => sse(frame(kind, fixtureLines(`anthropic/${file}`)))
const body = (file: string) => json(200, Fs.readFileSync(Path.join(fixturesDir, "anthropic", file), "utf8"))

const usageOf = (events: ReadonlyArray<TurnEvent>) => {
  const reports = events.filter(TurnEvent.$is("usage_reported"))
  const last = reports[reports.length - 1]
  return last === undefined ? null : { used: last.usage.usedTokens, tokens: last.tokens }
}
const tokens = (inputTokens: number, cacheWriteTokens: number, cacheReadTokens: number, outputTokens: number) => ({
  inputTokens,
  cacheWriteTokens,
  cacheReadTokens,
  outputTokens
})

/** Client tools named `names` (an empty object schema each), as a client declares them on a message. */
const declared = (...names: ReadonlyArray<string>): ReadonlyArray<ToolDefinition> =>
  names.map((name) => ({ name, description: `the fixture's ${name}`, inputSchema: { type: "object" } }))

/**
 * One turn of `replies` on a fresh adapter, offering the client tools `tools` (a call to a tool not offered is
 * answered by Baton with an error result, so a fixture that calls a tool must declare it): the events and the exit.
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

/** One turn of `replies` on a fresh adapter with no client tools: the events and the exit. */
const turnWith = (...replies: ReadonlyArray<ReturnType<typeof sse>>) => turnDeclaring([], ...replies)

describe("Anthropic Messages: every recorded fixture", () => {
  it.scoped("anthropic-text: one text item; usage 12 in + 30 out", () =>
    Effect.gen(function*() {
      const { events, exit } = yield* turnWith(streamed("anthropic-text.chunks.txt"))
      expect(Exit.isSuccess(exit)).toBe(true)
      expect(itemsOf(events)).toEqual([["assistant_message", "Hello! I'm doing well, thank you for asking. How are you doing today? Is there anything I can help you with?", null, null]])
      expect(usageOf(events)).toEqual({ used: 42, tokens: tokens(12, 0, 0, 30) })
      expect(events[events.length - 1]).toEqual(TurnEvent.turn_ended({ interrupted: false }))
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("onDelta receives the text as it streams: six pieces, joined equal to the item, all before it", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      loop.enqueue(streamed("anthropic-text.chunks.txt"))
      const adapter = yield* adapterFor(kind, loop, file)
      const { nativeRef } = yield* adapter.startThread()
      const seen: Array<string> = []
      const { events } = yield* collect(adapter.startTurn({
        nativeRef,
        runId: "run-1",
        prompt: "Hi",
        inlineHistory: null,
        onDelta: (d) => void seen.push(`${d.kind}:${d.text}`)
      }).pipe(Stream.tap((e) => Effect.sync(() => void seen.push(`event:${e._tag}`)))))
      expect(seen.slice(0, 7)).toEqual([
        "text:Hello",
        "text:! I",
        "text:'m doing well, thank you for asking",
        "text:. How are you doing today?",
        "text: Is",
        "text: there anything I can help you with?",
        "event:item_produced"
      ])
      expect(itemsOf(events)[0]![1]).toBe(seen.slice(0, 6).map((s) => s.slice(5)).join(""))
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("anthropic-text.json (non-streamed body): the same text", () =>
    Effect.gen(function*() {
      const { events } = yield* turnWith(body("anthropic-text.json"))
      const parsed = JSON.parse(Fs.readFileSync(Path.join(fixturesDir, "anthropic/anthropic-text.json"), "utf8"))
      expect(itemsOf(events)).toEqual([["assistant_message", parsed.content[0].text, null, null]])
      expect(usageOf(events)?.tokens?.outputTokens).toBe(parsed.usage.output_tokens)
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("anthropic-message-delta-input-tokens: message_delta's input_tokens (61) replaces message_start's (43)", () =>
    Effect.gen(function*() {
      const { events } = yield* turnWith(streamed("anthropic-message-delta-input-tokens.chunks.txt"))
      expect(itemsOf(events)).toEqual([["assistant_message", "pong", null, null]])
      expect(usageOf(events)).toEqual({ used: 63, tokens: tokens(61, 0, 0, 2) })
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("duplicate-message-start: the repeated message_start is ignored (one text item, usage 17 + 227)", () =>
    Effect.gen(function*() {
      const { events } = yield* turnWith(streamed("duplicate-message-start.chunks.txt"))
      expect(itemsOf(events)).toEqual([["assistant_message", "Hello, World!", null, null]])
      expect(usageOf(events)).toEqual({ used: 244, tokens: tokens(17, 0, 0, 227) })
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("spliced-message-start: the restarted message wins; the first attempt's reasoning is dropped (never streamed); its tool call is the open call; the log holds only it", () =>
    Effect.gen(function*() {
      const { adapter, events, loop, nativeRef } = yield* turnDeclaring(declared("test-tool"), streamed("spliced-message-start.chunks.txt"), streamed("anthropic-text.chunks.txt"))
      expect(itemsOf(events)).toEqual([
        // The first attempt's thinking completed before the splice, but a message's items are held until it is
        // final: the discarded attempt never reaches the record (the native thread never holds it either).
        ["reasoning", "Let me call the tool.", null, null],
        ["tool_call", `{"value":"Sparkle Day"}`, "toolu_second", "test-tool"]
      ])
      expect(events[events.length - 1]).toEqual(TurnEvent.turn_ended({ interrupted: false, pendingToolCalls: ["toolu_second"] }))
      yield* collect(adapter.continueTurn!({ nativeRef, runId: "run-1", toolResults: [{ toolCallId: "toolu_second", output: "sparkles", isError: false }] }))
      const sent = JSON.parse(loop.requests[1]!.body)
      expect(sent.messages.slice(1)).toEqual([
        {
          role: "assistant",
          content: [
            { type: "thinking", thinking: "Let me call the tool.", signature: "sig-second" },
            { type: "tool_use", id: "toolu_second", name: "test-tool", input: { value: "Sparkle Day" } }
          ]
        },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_second", content: "sparkles", cache_control: { type: "ephemeral" } }] }
      ])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("anthropic-tool-no-args: text, then a call with empty input ({}), pending", () =>
    Effect.gen(function*() {
      const { events } = yield* turnDeclaring(declared("updateIssueList"), streamed("anthropic-tool-no-args.chunks.txt"))
      expect(itemsOf(events)).toEqual([
        ["assistant_message", "I'll update the issue list for you.", null, null],
        ["tool_call", "{}", "toolu_01QE1WLsSVp5hy5Q3GmGTmjP", "updateIssueList"]
      ])
      expect(usageOf(events)).toEqual({ used: 613, tokens: tokens(565, 0, 0, 48) })
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("anthropic-tool-no-args.json: the same call from a non-streamed body", () =>
    Effect.gen(function*() {
      const { events } = yield* turnDeclaring(declared("updateIssueList"), body("anthropic-tool-no-args.json"))
      expect(itemsOf(events).map(([k, , id]) => [k, id])).toEqual([["assistant_message", null], ["tool_call", "toolu_01LRmxn9vGM1d2DZSDBowdZ1"]])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("anthropic-json-tool (and .json): the tool input assembled from its deltas", () =>
    Effect.gen(function*() {
      const { events } = yield* turnDeclaring(declared("json"), streamed("anthropic-json-tool.1.chunks.txt"))
      expect(itemsOf(events)).toEqual([[
        "tool_call",
        `{"elements": [{"location": "San Francisco", "temperature": 58, "condition": "sunny"}]}`,
        "toolu_01KFbKqPYSuAKujiL6mTfzYA",
        "json"
      ]])
      expect(usageOf(events)).toEqual({ used: 896, tokens: tokens(849, 0, 0, 47) })
      const fromJson = yield* turnDeclaring(declared("json"), body("anthropic-json-tool.1.json"))
      expect(itemsOf(fromJson.events).map(([k, , , name]) => [k, name])).toEqual([["tool_call", "json"]])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("anthropic-refusal (and .json): an error item explaining the refusal; the turn ends normally", () =>
    Effect.gen(function*() {
      const { events, exit } = yield* turnWith(streamed("anthropic-refusal.chunks.txt"))
      expect(Exit.isSuccess(exit)).toBe(true)
      expect(itemsOf(events)).toEqual([[
        "error",
        "The model declined to answer (stop reason refusal): This request triggered restrictions on violative cyber content and was blocked under Anthropic's Usage Policy.",
        null,
        null
      ]])
      expect(usageOf(events)).toEqual({ used: 23, tokens: tokens(18, 0, 0, 5) })
      const fromJson = yield* turnWith(body("anthropic-refusal.json"))
      expect(itemsOf(fromJson.events).map(([k]) => k)).toEqual(["error"])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("anthropic-clear-thinking (and .json): reasoning then text", () =>
    Effect.gen(function*() {
      const { events, loop, adapter, nativeRef } = yield* turnWith(streamed("anthropic-clear-thinking.1.chunks.txt"), streamed("anthropic-text.chunks.txt"))
      expect(itemsOf(events).map(([k, t]) => [k, t.length])).toEqual([["reasoning", 75], ["assistant_message", 13]])
      expect(itemsOf(events)[1]![1]).toBe("925 ÷ 5 = 185")
      expect(usageOf(events)).toEqual({ used: 122, tokens: tokens(69, 0, 0, 53) })
      // The thinking block goes back with its signature.
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "next", inlineHistory: null }))
      const assistant = JSON.parse(loop.requests[1]!.body).messages[1]
      expect(assistant.content[0].type).toBe("thinking")
      expect(assistant.content[0].signature.startsWith("EvQBCkYICxgCKkAxhD4NUKFz")).toBe(true)
      const fromJson = yield* turnWith(body("anthropic-clear-thinking.1.json"))
      expect(itemsOf(fromJson.events).map(([k]) => k)).toEqual(["reasoning", "assistant_message"])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("anthropic-clear-tool-uses (and .json): context editing applied; one text item, usage 859 + 122", () =>
    Effect.gen(function*() {
      const { events } = yield* turnWith(streamed("anthropic-clear-tool-uses.1.chunks.txt"))
      expect(itemsOf(events).map(([k, t]) => [k, t.length])).toEqual([["assistant_message", 440]])
      expect(usageOf(events)).toEqual({ used: 981, tokens: tokens(859, 0, 0, 122) })
      const fromJson = yield* turnWith(body("anthropic-clear-tool-uses.1.json"))
      expect(itemsOf(fromJson.events).map(([k]) => k)).toEqual(["assistant_message"])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("anthropic-combined-context-editing (and .json): reasoning and text; the empty text block is not an item", () =>
    Effect.gen(function*() {
      const { events } = yield* turnWith(streamed("anthropic-combined-context-editing.1.chunks.txt"))
      expect(itemsOf(events).map(([k, t]) => [k, t.length])).toEqual([["reasoning", 563], ["assistant_message", 362]])
      expect(usageOf(events)).toEqual({ used: 535, tokens: tokens(50, 0, 0, 485) })
      const fromJson = yield* turnWith(body("anthropic-combined-context-editing.1.json"))
      expect(itemsOf(fromJson.events).map(([k]) => k)[0]).toBe("reasoning")
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("anthropic-compaction (and .json): a summary item, then the answer; billed over both iterations, context after compaction", () =>
    Effect.gen(function*() {
      const { adapter, events, loop, nativeRef } = yield* turnWith(streamed("anthropic-compaction.1.chunks.txt"), streamed("anthropic-text.chunks.txt"))
      const items = itemsOf(events)
      // Lengths in code points (the fixture's text has characters outside the BMP).
      expect(items.map(([k, t]) => [k, [...t].length])).toEqual([["summary", 2192], ["assistant_message", 8512]])
      expect(items[0]![1].startsWith("## Summary of Conversation")).toBe(true)
      // Context: the compacted prompt (612) + output (2,819); billed: 60,385 + 612 in, 522 + 2,819 out.
      expect(usageOf(events)).toEqual({ used: 3431, tokens: tokens(60997, 0, 0, 3341) })
      // The compaction block goes back on the next request, first in the assistant message.
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "next", inlineHistory: null }))
      const assistant = JSON.parse(loop.requests[1]!.body).messages[1]
      expect(assistant.content.map((b: { type: string }) => b.type)).toEqual(["compaction", "text"])
      const fromJson = yield* turnWith(body("anthropic-compaction.1.json"))
      expect(itemsOf(fromJson.events).map(([k]) => k)).toEqual(["summary", "assistant_message"])
      expect(usageOf(fromJson.events)).toEqual({ used: 2002, tokens: tokens(61067, 0, 0, 1912) })
    }).pipe(Effect.provide(httpLayer)))
})

describe("Anthropic Messages: errors and faults", () => {
  // Found by a tester: a 401 whose body echoed the key put it in the run's failure reason, its attempts and events.
  it.scoped("an error body that echoes the API key: the failure's reason names <redacted>, never the key (turn and count_tokens)", () =>
    Effect.gen(function*() {
      const echo = `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key sk-test-key"}}`
      const { exit, loop } = yield* turnWith(json(401, echo))
      const error = Exit.isFailure(exit) ? Option.getOrNull(Cause.failureOption(exit.cause)) : null
      expect(error?.code).toBe("refused")
      expect(error?.reason).toContain("invalid x-api-key <redacted>")
      expect(JSON.stringify(error)).not.toContain("sk-test-key")
      const adapter = yield* adapterFor(kind, loop, yield* sqliteFile)
      loop.enqueue(json(401, echo))
      const counted = yield* Effect.either(adapter.countTokens!("hello"))
      expect(counted._tag).toBe("Left")
      if (counted._tag === "Left") {
        expect(counted.left.reason).toContain("<redacted>")
        expect(JSON.stringify(counted.left)).not.toContain("sk-test-key")
      }
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("HTTP 400 prompt is too long: a typed overflow carrying N = 208310 and M = 200000, not retried", () =>
    Effect.gen(function*() {
      const { exit, loop } = yield* turnWith(json(400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}`))
      const error = Exit.isFailure(exit) ? Option.getOrNull(Cause.failureOption(exit.cause)) : null
      expect(error?.code).toBe("overflow")
      expect(error?.requestedTokens).toBe(208310)
      expect(error?.limitTokens).toBe(200000)
      expect(error?.httpStatus).toBe(400)
      expect(error?.retryable).toBe(false)
      expect(loop.requests).toHaveLength(1)
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("a refused request leaves the native thread as it was: the retried turn is sent once, not twice", () =>
    Effect.gen(function*() {
      const { adapter, loop, nativeRef } = yield* turnWith(
        json(400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}`),
        streamed("anthropic-text.chunks.txt")
      )
      expect((yield* adapter.readThread!(nativeRef)).runIds).toEqual([])
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Hi", inlineHistory: null }))
      expect(loop.requests[1]!.body).toBe(loop.requests[0]!.body)
      expect((yield* adapter.readThread!(nativeRef)).runIds).toEqual(["run-1"])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("stop reason model_context_window_exceeded: the items before stand, then a typed overflow with M", () =>
    Effect.gen(function*() {
      const lines = fixtureLines("anthropic/anthropic-text.chunks.txt").map((l) => l.replace(`"stop_reason":"end_turn"`, `"stop_reason":"model_context_window_exceeded"`))
      const { events, exit } = yield* turnWith(sse(frame(kind, lines)))
      expect(itemsOf(events).map(([k]) => k)).toEqual(["assistant_message"])
      const error = Exit.isFailure(exit) ? Option.getOrNull(Cause.failureOption(exit.cause)) : null
      expect([error?.code, error?.limitTokens]).toEqual(["overflow", 200000])
    }).pipe(Effect.provide(httpLayer)))

  it.live("429 with retry-after: 1 then success: retried once, after at least one second", () =>
    Effect.gen(function*() {
      const { events, exit, loop } = yield* turnWith(
        json(429, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`, { "retry-after": "1" }),
        streamed("anthropic-text.chunks.txt")
      )
      expect(Exit.isSuccess(exit)).toBe(true)
      expect(itemsOf(events).map(([k]) => k)).toEqual(["assistant_message"])
      expect(loop.requests).toHaveLength(2)
      expect(loop.requests[1]!.at - loop.requests[0]!.at).toBeGreaterThanOrEqual(1000)
      expect(loop.requests[1]!.body).toBe(loop.requests[0]!.body)
    }).pipe(Effect.provide(httpLayer), Effect.scoped))

  // Found by a review: a retry-after of a day was waited out in the turn.
  it.live("a 429 asking to retry after a day fails at once, saying how long the provider asked for", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      loop.enqueue(json(429, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, { "retry-after": "86400" }))
      const adapter = yield* adapterFor(kind, loop, file)
      const { nativeRef } = yield* adapter.startThread()
      const started = Date.now()
      const { events, exit } = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Hi", inlineHistory: null }))
      expect(Date.now() - started).toBeLessThan(5_000)
      expect(events).toEqual([])
      expect(Exit.isFailure(exit) && String(Cause.squash(exit.cause))).toContain("(the provider asked to retry after 86400 s, longer than Baton waits in a turn)")
      expect(loop.requests).toHaveLength(1)
    }).pipe(Effect.provide(httpLayer), Effect.scoped))

  it.live("a 429 asking retry-after-ms: 80: a retry_scheduled event (attempt 1, 80 ms, HTTP 429, the provider's text) arrives before the wait, then the answer", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      loop.enqueue(
        json(429, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`, { "retry-after-ms": "80" }),
        streamed("anthropic-text.chunks.txt")
      )
      const adapter = yield* adapterFor(kind, loop, file)
      const { nativeRef } = yield* adapter.startThread()
      const seen: Array<{ readonly tag: string; readonly at: number }> = []
      const { events, exit } = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Hi", inlineHistory: null }).pipe(
        Stream.tap((e) => Effect.sync(() => void seen.push({ tag: e._tag, at: Date.now() })))
      ))
      expect(Exit.isSuccess(exit)).toBe(true)
      expect(events[0]).toEqual(TurnEvent.retry_scheduled({
        providerInstance: "test-anthropic-messages" as ProviderInstance,
        attempt: 1,
        delayMillis: 80,
        reason: "HTTP 429: Anthropic rate_limit_error: Number of request tokens has exceeded your per-minute rate limit",
        httpStatus: 429
      }))
      expect(events.slice(1).map((e) => e._tag)).toEqual(["item_produced", "usage_reported", "turn_ended"])
      // Told before the wait: the event came before the retried request reached the server.
      expect(seen[0]!.at).toBeLessThanOrEqual(loop.requests[1]!.at)
      expect(loop.requests[1]!.at - loop.requests[0]!.at).toBeGreaterThanOrEqual(80)
    }).pipe(Effect.provide(httpLayer), Effect.scoped))

  it.live("529 overloaded four times: retried maxRetries (3) times, then a retryable unavailable error", () =>
    Effect.gen(function*() {
      const overloaded = json(529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
      const { exit, loop } = yield* turnWith(overloaded, overloaded, overloaded, overloaded)
      const error = Exit.isFailure(exit) ? Option.getOrNull(Cause.failureOption(exit.cause)) : null
      expect([error?.code, error?.retryable, error?.httpStatus]).toEqual(["unavailable", true, 529])
      expect(loop.requests).toHaveLength(4)
    }).pipe(Effect.provide(httpLayer), Effect.scoped))

  it.scoped("a connection dropped mid-stream: the completed block stands, a typed retryable unavailable error follows", () =>
    Effect.gen(function*() {
      // The text block and the start of a tool_use, then the socket is destroyed.
      const chunks = frame(kind, fixtureLines("anthropic/anthropic-tool-no-args.chunks.txt"))
      const { adapter, events, exit, loop, nativeRef } = yield* turnWith(sse(chunks, { dropAfter: 8, gapMillis: 5 }), streamed("anthropic-text.chunks.txt"))
      expect(itemsOf(events)).toEqual([["assistant_message", "I'll update the issue list for you.", null, null]])
      const error = Exit.isFailure(exit) ? Option.getOrNull(Cause.failureOption(exit.cause)) : null
      expect([error?.code, error?.retryable, error?.operation]).toEqual(["unavailable", true, "startTurn"])
      // The native thread holds what stood: the next request carries the text, not the half tool call.
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "again", inlineHistory: null }))
      const messages = JSON.parse(loop.requests[1]!.body).messages
      expect(messages[1]).toEqual({ role: "assistant", content: [{ type: "text", text: "I'll update the issue list for you." }] })
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("an error event mid-stream (overloaded_error after a block): the block stands, a typed retryable unavailable error", () =>
    Effect.gen(function*() {
      const lines = fixtureLines("anthropic/anthropic-tool-no-args.chunks.txt").slice(0, 6)
      lines.push(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
      const { events, exit } = yield* turnWith(sse(frame(kind, lines)))
      expect(itemsOf(events).map(([k]) => k)).toEqual(["assistant_message"])
      const error = Exit.isFailure(exit) ? Option.getOrNull(Cause.failureOption(exit.cause)) : null
      expect([error?.code, error?.retryable, error?.reason]).toEqual(["unavailable", true, "Anthropic overloaded_error: Overloaded"])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("malformed SSE (an event whose data is not JSON): a typed protocol error, no crash", () =>
    Effect.gen(function*() {
      const chunks = frame(kind, fixtureLines("anthropic/anthropic-text.chunks.txt"))
      const broken = [...chunks.slice(0, 4), "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\n\n", ...chunks.slice(4)]
      const { exit } = yield* turnWith(sse(broken))
      const error = Exit.isFailure(exit) ? Option.getOrNull(Cause.failureOption(exit.cause)) : null
      expect(error?.code).toBe("protocol")
      expect(error?.reason).toContain("unreadable Anthropic event content_block_delta")
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("a stream that ends without message_stop: a typed retryable failure", () =>
    Effect.gen(function*() {
      const chunks = frame(kind, fixtureLines("anthropic/anthropic-text.chunks.txt"))
      const { exit } = yield* turnWith(sse(chunks.slice(0, -1)))
      const error = Exit.isFailure(exit) ? Option.getOrNull(Cause.failureOption(exit.cause)) : null
      expect([error?.code, error?.retryable]).toEqual(["unavailable", true])
    }).pipe(Effect.provide(httpLayer)))
})

describe("Anthropic Messages: the bodies Baton sends", () => {
  const tool = { name: "read_file", description: "Reads a file", inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } }
  const toolUse = (id: string) =>
    [
      `{"type":"message_start","message":{"id":"msg_${id}","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":10,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":1}}}`,
      `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"${id}","name":"read_file","input":{}}}`,
      `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\\"path\\":\\"a.ts\\"}"}}`,
      `{"type":"content_block_stop","index":0}`,
      `{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":20}}`,
      `{"type":"message_stop"}`
    ]
  const strip = (b: string) => b.replaceAll(`,"cache_control":{"type":"ephemeral"}`, "")

  it.scoped("prompt byte-identical; breakpoints on the system prompt and the last two request ends; request n+1 extends request n byte for byte; a restart changes nothing", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const system = "You are a coding agent."
      const adapter = yield* adapterFor(kind, loop, file, { systemPrompt: system })
      const { nativeRef } = yield* adapter.startThread()
      const prompt = "Fix the bug in a.ts \u{1F41B} — \"quoted\" \\ backslash\n\ttab"
      loop.enqueue(sse(frame(kind, toolUse("toolu_1"))), sse(frame(kind, toolUse("toolu_2"))), streamed("anthropic-text.chunks.txt"))
      const first = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt, inlineHistory: "<history>earlier</history>", tools: [tool] }))
      expect(first.events[first.events.length - 1]).toEqual(TurnEvent.turn_ended({ interrupted: false, pendingToolCalls: ["toolu_1"] }))
      expect(usageOf(first.events)).toEqual({ used: 1130, tokens: tokens(10, 100, 1000, 20) })
      yield* collect(adapter.continueTurn!({ nativeRef, runId: "run-1", toolResults: [{ toolCallId: "toolu_1", output: "contents 1", isError: false }], tools: [tool] }))
      // A restart: a new adapter on a new connection to the same file; the log is all it has.
      const restarted = yield* adapterFor(kind, loop, file, { systemPrompt: system })
      yield* restarted.resumeThread(nativeRef)
      // A model API's resume re-reads nothing: Baton opens no replay window for its next turn (tester r36).
      expect(restarted.resumeMayReplay).toBeUndefined()
      yield* collect(restarted.continueTurn!({ nativeRef, runId: "run-1", toolResults: [{ toolCallId: "toolu_2", output: "contents 2", isError: true }], tools: [tool] }))
      const [r1, r2, r3] = loop.requests.map((r) => r.body)
      const b1 = JSON.parse(r1!)
      // The prompt is its own block, byte-identical; the inline history is the block before it.
      expect(b1.messages[0].content[1].text).toBe(prompt)
      expect(r1).toContain(JSON.stringify(prompt))
      expect(b1.messages[0].content[0].text).toBe("<history>earlier</history>")
      expect(b1.system).toEqual([{ type: "text", text: system, cache_control: { type: "ephemeral" } }])
      expect(b1.tools).toEqual([{ name: "read_file", description: "Reads a file", input_schema: tool.inputSchema }])
      // Breakpoints: request 1 marks its last message; request 2 the previous request's end and its own.
      const marked = (b: { messages: ReadonlyArray<{ content: ReadonlyArray<{ cache_control?: unknown }> }> }) =>
        b.messages.flatMap((m, i) => (m.content[m.content.length - 1]!.cache_control === undefined ? [] : [i]))
      expect(marked(b1)).toEqual([0])
      const b2 = JSON.parse(r2!)
      expect(marked(b2)).toEqual([0, 2])
      const b3 = JSON.parse(r3!)
      expect(marked(b3)).toEqual([2, 4])
      // Each request, breakpoints aside, extends the previous one byte for byte (up to the closing brackets).
      expect(strip(r2!).startsWith(strip(r1!).slice(0, -2))).toBe(true)
      expect(strip(r3!).startsWith(strip(r2!).slice(0, -2))).toBe(true)
      // Request n+1 marks again the block request n marked last (entry 2 in both b2 and b3 above), so the prefix
      // request n wrote to the cache is read whatever the number of blocks added since.
      // Calls and results are paired: each tool_use is answered by the next message, error results flagged.
      expect(b3.messages.slice(1).map((m: { role: string; content: ReadonlyArray<Record<string, unknown>> }) => [m.role, m.content.map((c) => c.type === "tool_use" ? c.id : c.type === "tool_result" ? `result:${String(c.tool_use_id)}:${String(c.is_error ?? false)}` : c.type)])).toEqual([
        ["assistant", ["toolu_1"]],
        ["user", ["result:toolu_1:false"]],
        ["assistant", ["toolu_2"]],
        ["user", ["result:toolu_2:true"]]
      ])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("after a restart the next request is byte-identical to the one without the restart", () =>
    Effect.gen(function*() {
      const run = (restart: boolean) =>
        Effect.gen(function*() {
          const loop = yield* loopback
          const file = yield* sqliteFile
          loop.enqueue(sse(frame(kind, toolUse("toolu_1"))), streamed("anthropic-clear-thinking.1.chunks.txt"), streamed("anthropic-text.chunks.txt"))
          const a = yield* adapterFor(kind, loop, file, { systemPrompt: "sys" })
          const { nativeRef } = yield* a.startThread()
          yield* collect(a.startTurn({ nativeRef, runId: "run-1", prompt: "one", inlineHistory: null, tools: [tool] }))
          yield* collect(a.continueTurn!({ nativeRef, runId: "run-1", toolResults: [{ toolCallId: "toolu_1", output: "x", isError: false }], tools: [tool] }))
          yield* a.injectHistory!({ nativeRef, rendered: "<baton-history>owed</baton-history>", itemIds: ["i1"], deliveryIds: ["d1"] })
          const b = restart ? yield* adapterFor(kind, loop, file, { systemPrompt: "sys" }) : a
          yield* collect(b.startTurn({ nativeRef, runId: "run-2", prompt: "two", inlineHistory: null, tools: [tool] }))
          const read = yield* b.readThread!(nativeRef)
          return { body: loop.requests[2]!.body, read }
        }).pipe(Effect.scoped)
      const without = yield* run(false)
      const withRestart = yield* run(true)
      expect(withRestart.body).toBe(without.body)
      expect(withRestart.read).toEqual(without.read)
      expect(without.read.deliveryIds).toEqual(["d1"])
      expect(without.read.runIds).toEqual(["run-1", "run-2"])
      expect(without.read.usage?.usedTokens).toBe(42)
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("a call left unanswered is closed with an error result before the next prompt", () =>
    Effect.gen(function*() {
      const { adapter, loop, nativeRef } = yield* turnDeclaring([tool], sse(frame(kind, toolUse("toolu_9"))), streamed("anthropic-text.chunks.txt"))
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "never mind", inlineHistory: null }))
      const messages = JSON.parse(loop.requests[1]!.body).messages
      expect(messages[2]).toEqual({ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_9", content: "[no result: the tool call was not answered before the conversation went on]", is_error: true }] })
      expect(messages[3].content[0].text).toBe("never mind")
    }).pipe(Effect.provide(httpLayer)))

  // Found by a review: history injected while a call was open went between the tool_use and its tool_result (after
  // a refused request, the next turn start injected first), which Anthropic and Chat Completions reject.
  it.scoped("history injected while a call is open goes after that call's closing result, never between them", () =>
    Effect.gen(function*() {
      const { adapter, loop, nativeRef } = yield* turnDeclaring([tool], sse(frame(kind, toolUse("toolu_9"))), streamed("anthropic-text.chunks.txt"))
      yield* adapter.injectHistory!({ nativeRef, rendered: "<baton-history>owed</baton-history>", itemIds: ["i1"], deliveryIds: ["d1"] })
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "never mind", inlineHistory: null }))
      const messages = JSON.parse(loop.requests[1]!.body).messages as Array<{ role: string; content: Array<{ type: string; text?: string }> }>
      expect(messages.map((m) => [m.role, m.content.map((c) => c.type === "text" ? c.text!.slice(0, 16) : c.type)])).toEqual([
        ["user", [expect.any(String)]],
        ["assistant", ["tool_use"]],
        ["user", ["tool_result"]],
        ["user", ["<baton-history>o"]],
        ["user", ["never mind"]]
      ])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("a call to a tool nobody offered: Baton answers it with an error result naming the offered tools and the turn goes on (never waiting)", () =>
    Effect.gen(function*() {
      const { events, exit, loop } = yield* turnDeclaring(declared("write_file"), sse(frame(kind, toolUse("toolu_x"))), streamed("anthropic-text.chunks.txt"))
      expect(Exit.isSuccess(exit)).toBe(true)
      expect(itemsOf(events).map(([k, t, id]) => [k, k === "assistant_message" ? t.slice(0, 5) : t, id])).toEqual([
        ["tool_call", `{"path":"a.ts"}`, "toolu_x"],
        ["tool_result", "unknown tool read_file; available: write_file", "toolu_x"],
        ["assistant_message", "Hello", null]
      ])
      expect(events[events.length - 1]).toEqual(TurnEvent.turn_ended({ interrupted: false }))
      expect(JSON.parse(loop.requests[1]!.body).messages[2]).toEqual({
        role: "user",
        content: [{ type: "tool_result", tool_use_id: "toolu_x", content: "unknown tool read_file; available: write_file", is_error: true, cache_control: { type: "ephemeral" } }]
      })
    }).pipe(Effect.provide(httpLayer)))

  // Found by a review: a model that kept calling tools Baton answers looped until the turn timeout.
  it.scoped("a turn answering only Baton's tools is bounded: past maxBatonRounds the calls are asked to stop, then the turn fails", () =>
    Effect.gen(function*() {
      const replies = Array.from({ length: ModelApiAdapter.maxBatonRounds + 8 }, (_, i) => sse(frame(kind, toolUse(`toolu_${i}`))))
      const { events, exit, loop } = yield* turnDeclaring(declared("write_file"), ...replies)
      expect(Exit.isFailure(exit)).toBe(true)
      expect(Exit.isFailure(exit) && String(Cause.squash(exit.cause))).toContain("the model kept calling tools Baton answers past 68 requests in one turn")
      expect(loop.requests).toHaveLength(ModelApiAdapter.maxBatonRounds + 5)
      const results = itemsOf(events).filter(([k]) => k === "tool_result").map(([, t]) => t)
      expect(results.slice(0, ModelApiAdapter.maxBatonRounds).every((t) => t.startsWith("unknown tool read_file"))).toBe(true)
      expect(results.slice(ModelApiAdapter.maxBatonRounds)).toEqual(Array.from({ length: 4 }, (_, k) =>
        `[not run: this turn already made ${ModelApiAdapter.maxBatonRounds + k} requests for tools Baton answers; answer with what you have now]`))
    }).pipe(Effect.provide(httpLayer)))

  // Found by a review: a large file write cut by max_tokens inside its tool_use failed the run as a protocol fault.
  it.scoped("an answer cut by max_tokens inside a tool_use: the text stands, the cut call is not run and an error item says why; any other stop with such a call is a protocol fault", () =>
    Effect.gen(function*() {
      const cutAnswer = (stop: string) => sse(frame(kind, [
        `{"type":"message_start","message":{"id":"msg_cut_${stop}","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":10,"output_tokens":1}}}`,
        `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
        `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Writing the file now."}}`,
        `{"type":"content_block_stop","index":0}`,
        `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_big","name":"write_file","input":{}}}`,
        `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"path\\":\\"x\\",\\"content\\":\\"aaaa"}}`,
        `{"type":"content_block_stop","index":1}`,
        `{"type":"message_delta","delta":{"stop_reason":"${stop}"},"usage":{"output_tokens":4096}}`,
        `{"type":"message_stop"}`
      ]))
      const limited = yield* turnDeclaring(declared("write_file"), cutAnswer("max_tokens"))
      expect(Exit.isSuccess(limited.exit)).toBe(true)
      expect(itemsOf(limited.events).map(([k, t]) => [k, t])).toEqual([
        ["assistant_message", "Writing the file now."],
        ["error", "The answer reached its output limit (max_tokens) inside a call to write_file (toolu_big): the call was cut off and not run"]
      ])
      expect(limited.events.at(-1)).toEqual(TurnEvent.turn_ended({ interrupted: false }))
      const malformed = yield* turnDeclaring(declared("write_file"), cutAnswer("tool_use"))
      expect(Exit.isFailure(malformed.exit) && String(Cause.squash(malformed.exit.cause))).toContain("tool_use toolu_big has input that is not a JSON object")
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("an unknown call beside a declared one: only the declared call waits; both results go in one message", () =>
    Effect.gen(function*() {
      const two = [
        toolUse("toolu_a")[0]!,
        ...toolUse("toolu_a").slice(1, 4),
        ...toolUse("toolu_b").slice(1, 4).map((l) => l.replaceAll(`"index":0`, `"index":1`).replace(`"name":"read_file"`, `"name":"grep"`)),
        ...toolUse("toolu_a").slice(4)
      ]
      const { adapter, events, loop, nativeRef } = yield* turnDeclaring([tool], sse(frame(kind, two)), streamed("anthropic-text.chunks.txt"))
      expect(events[events.length - 1]).toEqual(TurnEvent.turn_ended({ interrupted: false, pendingToolCalls: ["toolu_a"] }))
      expect(loop.requests.length).toBe(1)
      yield* collect(adapter.continueTurn!({ nativeRef, runId: "run-1", toolResults: [{ toolCallId: "toolu_a", output: "contents", isError: false }], tools: [tool] }))
      expect(JSON.parse(loop.requests[1]!.body).messages[2].content.map((c: { tool_use_id: string; content: string }) => [c.tool_use_id, c.content])).toEqual([
        ["toolu_a", "contents"],
        ["toolu_b", "unknown tool grep; available: read_file"]
      ])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("two tool calls with one id in a response: the first stands, the response fails as a typed protocol error; the next request answers the id once", () =>
    Effect.gen(function*() {
      const twice = [
        ...toolUse("toolu_d").slice(0, 4),
        ...toolUse("toolu_d").slice(1, 4).map((l) => l.replaceAll(`"index":0`, `"index":1`).replace("a.ts", "b.ts")),
        ...toolUse("toolu_d").slice(4)
      ]
      const { adapter, events, exit, loop, nativeRef } = yield* turnDeclaring([tool], sse(frame(kind, twice)), streamed("anthropic-text.chunks.txt"))
      expect(itemsOf(events).map(([k, t, id]) => [k, t, id])).toEqual([["tool_call", `{"path":"a.ts"}`, "toolu_d"]])
      const error = Exit.isFailure(exit) ? Option.getOrNull(Cause.failureOption(exit.cause)) : null
      expect([error?.code, error?.retryable, error?.reason]).toEqual([
        "protocol",
        false,
        `the Anthropic Messages response holds two tool calls with id "toolu_d"; the duplicate is dropped and the response fails`
      ])
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "go on", inlineHistory: null, tools: [tool] }))
      const messages = JSON.parse(loop.requests[1]!.body).messages
      expect(messages.slice(1, 3)).toEqual([
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_d", name: "read_file", input: { path: "a.ts" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_d", content: "[no result: the tool call was not answered before the conversation went on]", is_error: true }] }
      ])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("a Baton tool (thread_read) is executed inside the turn and answered on the next request; the client sees no open call", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const adapter = yield* adapterFor(kind, loop, file)
      const { nativeRef } = yield* adapter.startThread()
      const threadRead = {
        definition: { name: "thread_read", description: "Reads an omitted item by ref", inputSchema: { type: "object", properties: { ref: { type: "string" } } } },
        execute: (call: { readonly arguments: string }) => Effect.succeed({ output: `original of ${JSON.parse(call.arguments).path}`, isError: false })
      }
      const call = toolUse("toolu_tr").map((l) => l.replace(`"name":"read_file"`, `"name":"thread_read"`))
      loop.enqueue(sse(frame(kind, call)), streamed("anthropic-text.chunks.txt"))
      const { events } = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "what did I say?", inlineHistory: null, tools: [tool], localTools: [threadRead] }))
      expect(itemsOf(events).map(([k, t, id]) => [k, k === "assistant_message" ? t.slice(0, 5) : t, id])).toEqual([
        ["tool_call", `{"path":"a.ts"}`, "toolu_tr"],
        ["tool_result", "original of a.ts", "toolu_tr"],
        ["assistant_message", "Hello", null]
      ])
      expect(events[events.length - 1]).toEqual(TurnEvent.turn_ended({ interrupted: false }))
      // Usage billed over both requests: (10 + 12) in, 100 written, 1,000 read, (20 + 30) out.
      expect(usageOf(events)?.tokens).toEqual(tokens(22, 100, 1000, 50))
      const second = JSON.parse(loop.requests[1]!.body)
      expect(second.tools.map((t: { name: string }) => t.name)).toEqual(["read_file", "thread_read"])
      expect(second.messages[2].content[0]).toMatchObject({ type: "tool_result", tool_use_id: "toolu_tr", content: "original of a.ts" })
    }).pipe(Effect.provide(httpLayer)))

  it.live("a lane read while an append is being stored does not take the stored entries twice (the next request carries the history once)", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const log = yield* logOn(file)
      // Another fiber reads the lane (a fork's read-back, a preview) after the insert, before the appender's own
      // bookkeeping: found by a storm of forks beside a turn start's injection, whose history then went out twice.
      let adapter: ReturnType<typeof ModelApiAdapter.make> | null = null
      const racing = { ...log, append: (...args: Parameters<typeof log.append>) => Effect.tap(log.append(...args), () => Effect.ignore(adapter!.readThread!(args[1]))) }
      adapter = yield* adapterFor(kind, loop, file, {}, { log: racing })
      const { nativeRef } = yield* adapter.startThread()
      yield* adapter.injectHistory!({ nativeRef, rendered: "[user #1]\nearlier", itemIds: ["itm_1"], deliveryIds: ["dlv_1"] })
      loop.enqueue(streamed("anthropic-text.chunks.txt"))
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Hi", inlineHistory: null }))
      const messages = JSON.parse(loop.requests[0]!.body).messages as ReadonlyArray<{ readonly content: unknown }>
      expect(messages.filter((m) => JSON.stringify(m.content).includes("earlier"))).toHaveLength(1)
      // The stored log has no gap either (a restart renders the same request).
      expect(yield* log.lastSeq(nativeRef)).toBe((yield* log.load(nativeRef, 0)).length)
    }).pipe(Effect.provide(httpLayer), Effect.scoped))

  it.live("interrupt: the turn ends with turn_ended { interrupted: true }", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const adapter = yield* adapterFor(kind, loop, file)
      const { nativeRef } = yield* adapter.startThread()
      loop.enqueue(sse(frame(kind, fixtureLines("anthropic/anthropic-text.chunks.txt")), { gapMillis: 200 }))
      const fiber = yield* Effect.fork(collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Hi", inlineHistory: null })))
      yield* Effect.sleep("300 millis")
      yield* adapter.interrupt(nativeRef)
      const { events } = yield* fiber.await.pipe(Effect.flatten)
      expect(events[events.length - 1]).toEqual(TurnEvent.turn_ended({ interrupted: true }))
    }).pipe(Effect.provide(httpLayer), Effect.scoped))

  it.live("interrupt while the accepted request's entries are being stored: the turn ends interrupted after the provider, as the native thread (which holds the prompt) says", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const log = yield* logOn(file)
      // The provider accepted the request: its entries (the prompt) are inserted, and the interrupt lands before the
      // append's own bookkeeping (a Postgres insert's round trip is that long). Before, the turn failed `interrupted`
      // ("the provider did not read the prompt", a missed run owed again) while the stored lane held the prompt: the
      // next turn's request carried it twice.
      const stored = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const slow = {
        ...log,
        append: (...args: Parameters<typeof log.append>) =>
          log.append(...args).pipe(Effect.zipLeft(Deferred.succeed(stored, undefined)), Effect.zipLeft(Deferred.await(gate)))
      }
      const adapter = yield* adapterFor(kind, loop, file, {}, { log: slow })
      const { nativeRef } = yield* adapter.startThread()
      loop.enqueue(streamed("anthropic-text.chunks.txt"))
      const fiber = yield* Effect.fork(collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Hi", inlineHistory: null })))
      yield* Deferred.await(stored)
      yield* adapter.interrupt(nativeRef)
      // The interrupt is delivered to the turn while its append waits; then the append finishes.
      yield* Effect.sleep("50 millis")
      yield* Deferred.succeed(gate, undefined)
      const { events, exit } = yield* fiber.await.pipe(Effect.flatten)
      expect(Exit.isSuccess(exit)).toBe(true)
      expect(events[events.length - 1]).toEqual(TurnEvent.turn_ended({ interrupted: true }))
      expect((yield* adapter.readThread!(nativeRef)).runIds).toEqual(["run-1"])
    }).pipe(Effect.provide(httpLayer), Effect.scoped))

  it.live("interrupt before the provider accepted the request: the turn fails `interrupted` (prompt not read) and the native thread does not hold the prompt", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const adapter = yield* adapterFor(kind, loop, file)
      const { nativeRef } = yield* adapter.startThread()
      // The provider takes 2 s to answer the request's head: the interrupt comes first.
      loop.enqueue({ ...streamed("anthropic-text.chunks.txt"), headMillis: 2_000 }, streamed("anthropic-text.chunks.txt"))
      const fiber = yield* Effect.fork(collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Hi", inlineHistory: null })))
      yield* Effect.sleep("300 millis")
      yield* adapter.interrupt(nativeRef)
      const { events, exit } = yield* fiber.await.pipe(Effect.flatten)
      // Before: turn_ended { interrupted: true }, which the orchestrator reads as "the provider read the prompt",
      // while the message list never got it: the prompt was lost from every later request.
      expect(events.filter(TurnEvent.$is("turn_ended"))).toEqual([])
      const error = Exit.isFailure(exit) ? Option.getOrNull(Cause.failureOption(exit.cause)) : null
      expect([error?._tag, error?.code]).toEqual(["ProviderError", "interrupted"])
      const back = yield* adapter.readThread!(nativeRef)
      expect(back.runIds).toEqual([])
    }).pipe(Effect.provide(httpLayer), Effect.scoped))

  it.live("interrupt after a completed block of an unfinished message: the block is streamed before turn_ended, and the native thread holds the same partial answer", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const adapter = yield* adapterFor(kind, loop, file)
      const { nativeRef } = yield* adapter.startThread()
      const lines = [
        `{"type":"message_start","message":{"id":"msg_p","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":10,"output_tokens":1}}}`,
        `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
        `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Partial answer."}}`,
        `{"type":"content_block_stop","index":0}`,
        ...Array.from({ length: 40 }, () => `{"type":"ping"}`)
      ]
      loop.enqueue(sse(frame(kind, lines), { gapMillis: 50 }), streamed("anthropic-text.chunks.txt"))
      const fiber = yield* Effect.fork(collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Hi", inlineHistory: null })))
      yield* Effect.sleep("600 millis")
      yield* adapter.interrupt(nativeRef)
      const { events } = yield* fiber.await.pipe(Effect.flatten)
      expect(itemsOf(events)).toEqual([["assistant_message", "Partial answer.", null, null]])
      expect(events[events.length - 1]).toEqual(TurnEvent.turn_ended({ interrupted: true }))
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "go on", inlineHistory: null }))
      expect(JSON.parse(loop.requests[1]!.body).messages[1]).toEqual({ role: "assistant", content: [{ type: "text", text: "Partial answer." }] })
    }).pipe(Effect.provide(httpLayer), Effect.scoped))

  it.scoped("count_tokens: the request as Baton would send it, without streaming; the key in x-api-key", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      loop.enqueue(json(200, `{"input_tokens":1234}`))
      const http = yield* HttpClient.HttpClient
      const counted = yield* AnthropicMessages.countTokens({
        instance: "claude" as ProviderInstance,
        config: configFor(kind, loop.url, { systemPrompt: "sys" }),
        apiKey: Option.some(Redacted.make("sk-ant-test")),
        http
      }, { prompt: "hello" })
      expect(counted).toBe(1234)
      expect(loop.requests[0]!.url).toBe("/v1/messages/count_tokens")
      expect(loop.requests[0]!.headers["x-api-key"]).toBe("sk-ant-test")
      expect(loop.requests[0]!.headers["anthropic-version"]).toBe("2023-06-01")
      expect(JSON.parse(loop.requests[0]!.body)).toEqual({
        model: "claude-sonnet-4-5",
        system: [{ type: "text", text: "sys", cache_control: { type: "ephemeral" } }],
        messages: [{ role: "user", content: [{ type: "text", text: "hello" }] }]
      })
    }).pipe(Effect.provide(httpLayer)))
})
