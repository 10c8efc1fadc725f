/**
 * Gemini's thought signatures on a switched conversation (`GatewayThoughtSignatures`): Claude Code (Anthropic Messages)
 * switched to Gemini 3 on Google's OpenAI-compatible endpoint. Gemini returns a signature on a step's first call
 * (`extra_content.google.thought_signature`) and refuses a later request that has the call without it ("Function call
 * is missing a thought_signature in functionCall parts"); Anthropic's `tool_use` block has no place for it, so the
 * agent sends the call back bare. Before: the second tool round after a switch to Gemini went out with no signature on
 * any call (refused by Gemini). Now the gateway gives each call the signature it came with (streamed and whole; a
 * whole answer's call id made safe for Anthropic, too), a call Gemini did not make (Claude's, before the switch) gets
 * Google's documented bypass, and another model's request gets no `extra_content` at all.
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as GatewaySwitch from "../src/GatewaySwitch.js"
import * as GatewayThoughtSignatures from "../src/GatewayThoughtSignatures.js"
import { adminToken, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

type Json = Record<string, unknown>

const usage = { prompt_tokens: 1_200, completion_tokens: 40 }

/** Gemini's streamed answer: one call with its thought signature in the call's delta, then the finish and usage. */
const streamedCall = (id: string, signature: string): ModelApi.Reply => {
  const chunk = (body: Json) => `data: ${JSON.stringify({ id: "gem-s", object: "chat.completion.chunk", model: "gemini-3-pro-preview", ...body })}\n\n`
  return {
    status: 200,
    contentType: "text/event-stream",
    body: [
      chunk({
        choices: [{
          index: 0,
          delta: {
            role: "assistant",
            tool_calls: [{ index: 0, id, type: "function", function: { name: "Bash", arguments: JSON.stringify({ command: "ls" }) }, extra_content: { google: { thought_signature: signature } } }]
          },
          finish_reason: null
        }]
      }),
      chunk({ choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] }),
      chunk({ choices: [], usage }),
      "data: [DONE]\n\n"
    ].join("")
  }
}

/** Gemini's whole answer: one call with its thought signature. */
const wholeCall = (id: string, signature: string): ModelApi.Reply => ({
  status: 200,
  contentType: "application/json",
  body: JSON.stringify({
    id: "gem-w",
    object: "chat.completion",
    choices: [{
      index: 0,
      message: {
        role: "assistant",
        content: null,
        tool_calls: [{ id, type: "function", function: { name: "Bash", arguments: JSON.stringify({ command: "pwd" }) }, extra_content: { google: { thought_signature: signature } } }]
      },
      finish_reason: "tool_calls"
    }],
    usage
  })
})

const wholeText = (text: string): ModelApi.Reply => ({
  status: 200,
  contentType: "application/json",
  body: JSON.stringify({ id: "gem-t", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: text }, finish_reason: "stop" }], usage })
})

const tools = [{ name: "Bash", description: "Run a command", input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } }]
/** Claude's call before the switch (no signature: Gemini did not make it). */
const start = [
  { role: "user", content: "run it" },
  { role: "assistant", content: [{ type: "tool_use", id: "toolu_a", name: "Bash", input: { command: "echo hello" } }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_a", content: "hello" }] }
]
/** The round the agent sends back: the call as it got it (bare), then its result. */
const round = (id: string, command: string) => [
  { role: "assistant", content: [{ type: "tool_use", id, name: "Bash", input: { command } }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: id, content: "output" }] }
]

/** Each assistant call of an upstream request: its id and its thought signature (`null`: none, no `extra_content`). */
const signatures = (request: ModelApi.Received) =>
  ((JSON.parse(request.body) as Json).messages as ReadonlyArray<Json>).flatMap((m) =>
    m.role === "assistant" && Array.isArray(m.tool_calls)
      ? (m.tool_calls as ReadonlyArray<Json>).map((c) => ({
        id: c.id,
        signature: ((c.extra_content as Json | undefined)?.google as Json | undefined)?.thought_signature ?? null
      }))
      : []
  )

/**
 * `body` against `baton serve` whose gateway routes each of `models` (patterns) to one `openai-chat` instance, a
 * loopback upstream playing Gemini (`chat`: its received requests), with a 64,000-token window.
 */
const throughGemini = <A, E, R>(models: ReadonlyArray<string>, body: (chat: ModelApi.ModelApi) => Effect.Effect<A, E, R>) =>
  Effect.scoped(Effect.gen(function*() {
    const chat = yield* ModelApi.start
    const settings = yield* settingsFor(
      [instance("gemini", "openai-chat", chat, { contextWindow: 64_000, autoCompactThreshold: null })],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: models.map((model) => ({ model, provider: "gemini" })) } }
    )
    return yield* body(chat).pipe(Effect.provide(serveSettings(settings)))
  }))

describe("GatewaySwitch to Gemini: thought signatures", () => {
  it.live("each call goes back with its signature, Claude's call with Google's bypass; another model's with none", () =>
    throughGemini(["gemini-*", "gpt-*"], (chat) =>
      Effect.gen(function*() {
        const send = (session: string, model: string, stream: boolean, messages: ReadonlyArray<unknown>) =>
          raw(HttpClientRequest.post("/v1/messages?beta=true").pipe(
            HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": session }),
            HttpClientRequest.bodyText(JSON.stringify({ model, max_tokens: 1_000, stream, tools, messages }), "application/json")
          ))
        const model = "gemini-3-pro-preview"

        // Streamed: the call's id reaches the agent as Gemini sent it.
        chat.enqueue(streamedCall("function-call-1", "sig-streamed"))
        const first = yield* send("gem-1", model, true, start)
        expect(first.status).toBe(200)
        expect(first.text).toContain("function-call-1")
        // The first request: Claude's call (Gemini did not make it) with the bypass.
        expect(signatures(chat.requests.at(-1)!)).toEqual([{ id: "toolu_a", signature: GatewayThoughtSignatures.bypassSignature }])

        // Whole: an id Anthropic does not take (`functions.bash:0`, Kimi's and others' form) reaches the agent made safe.
        const rawId = "functions.bash:0"
        const safeId = GatewaySwitch.toolUseId(rawId)
        expect(safeId).not.toBe(rawId)
        chat.enqueue(wholeCall(rawId, "sig-whole"))
        const second = yield* send("gem-1", model, false, [...start, ...round("function-call-1", "ls")])
        expect(second.status).toBe(200)
        expect(JSON.stringify(second.body)).toContain(safeId)
        // Before the fix: [{ toolu_a, null }, { function-call-1, null }] (Gemini: 400, missing thought_signature).
        expect(signatures(chat.requests.at(-1)!)).toEqual([
          { id: "toolu_a", signature: GatewayThoughtSignatures.bypassSignature },
          { id: "function-call-1", signature: "sig-streamed" }
        ])

        chat.enqueue(wholeText("Done."))
        const third = yield* send("gem-1", model, false, [...start, ...round("function-call-1", "ls"), ...round(safeId, "pwd")])
        expect(third.status).toBe(200)
        expect(signatures(chat.requests.at(-1)!)).toEqual([
          { id: "toolu_a", signature: GatewayThoughtSignatures.bypassSignature },
          { id: "function-call-1", signature: "sig-streamed" },
          { id: safeId, signature: "sig-whole" }
        ])

        // Another model on the same upstream: the agent's calls go out as they are (no field OpenAI would refuse).
        chat.enqueue(wholeText("Done."))
        const other = yield* send("gpt-1", "gpt-5", false, start)
        expect(other.status).toBe(200)
        expect(signatures(chat.requests.at(-1)!)).toEqual([{ id: "toolu_a", signature: null }])
        expect(chat.requests.at(-1)!.body).not.toContain("extra_content")
      })), { timeout: 60_000 })
})

describe("GatewaySwitch to Gemini from Responses (Codex's protocol): thought signatures", () => {
  it.live("the call Codex sends back as a function_call item goes out with its signature", () =>
    throughGemini(["gemini-*"], (chat) =>
      Effect.gen(function*() {
        const responsesTools = [{ type: "function", name: "Bash", description: "Run a command", parameters: tools[0]!.input_schema }]
        const send = (input: ReadonlyArray<unknown>) =>
          raw(HttpClientRequest.post("/v1/responses").pipe(
            HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, session_id: "codex-gem-1" }),
            HttpClientRequest.bodyText(JSON.stringify({ model: "gemini-3-pro-preview", stream: true, tools: responsesTools, input }), "application/json")
          ))
        const prompt = { type: "message", role: "user", content: [{ type: "input_text", text: "list the files" }] }
        chat.enqueue(streamedCall("function-call-9", "sig-codex"))
        const first = yield* send([prompt])
        expect(first.status).toBe(200)
        expect(first.text).toContain("function-call-9")

        chat.enqueue(wholeText("Done."))
        const second = yield* send([
          prompt,
          { type: "function_call", call_id: "function-call-9", name: "Bash", arguments: JSON.stringify({ command: "ls" }) },
          { type: "function_call_output", call_id: "function-call-9", output: "a.txt" }
        ])
        expect(second.status).toBe(200)
        // Before the fix: [{ function-call-9, null }].
        expect(signatures(chat.requests.at(-1)!)).toEqual([{ id: "function-call-9", signature: "sig-codex" }])
      })), { timeout: 60_000 })
})

describe("GatewayThoughtSignatures.make", () => {
  it("forgets the least recently used call past its capacity", () => {
    const memo = GatewayThoughtSignatures.make(2)
    const extra = (s: string) => ({ google: { thought_signature: s } })
    memo.remember("t", "a", extra("A"))
    memo.remember("t", "b", extra("B"))
    expect(memo.recall("t", "a")).toEqual(extra("A"))
    memo.remember("t", "c", extra("C"))
    // `b` was the least recently used (`a` was recalled after it).
    expect(memo.recall("t", "b")).toBeUndefined()
    expect(memo.recall("t", "a")).toEqual(extra("A"))
    expect(memo.recall("u", "a")).toBeUndefined()
    expect(memo.size()).toBe(2)
  })
})
