/**
 * Review r26 of `thread_read` beside the agent's own calls after a hidden round in the same streamed answer on a
 * provider switch (issue 14, docs/gateway.md "Routing and switching"): two hidden rounds before the read beside the
 * agent's call; a continuation whose stream breaks off; the agent hanging up during the continuation. The next request
 * carries every round answered, or (no answer completed) none of them.
 */
import type { Item } from "@baton/contracts"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Schedule } from "effect"
import * as GatewayAnthropic from "../src/GatewayAnthropic.js"
import * as GatewayChat from "../src/GatewayChat.js"
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

/** The only thread's items. */
const onlyItems = Effect.gen(function*() {
  const api = yield* client()
  const threads = (yield* api.threads.list({ urlParams: {} })).threads
  expect(threads).toHaveLength(1)
  const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId: threads[0]!.id }, urlParams: { limit: 500 } })).items
  return items
})

const system = [{ type: "text", text: "You are Claude Code." }]
const tools = [{ name: "Bash", description: "Run a command", input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } }]
const request = (history: ReadonlyArray<unknown>) =>
  HttpClientRequest.post("/v1/messages?beta=true").pipe(
    HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "sess-beside-review", "user-agent": "claude-cli/2.1.332 (external, sdk-cli)" }),
    HttpClientRequest.bodyText(JSON.stringify({ model: "gpt-5", max_tokens: 1_000, stream: true, system, tools, messages: history }), "application/json")
  )
const other = `other-output ${words(11, 50)}`
const history: ReadonlyArray<unknown> = [
  { role: "user", content: "run it" },
  { role: "assistant", content: [{ type: "tool_use", id: "toolu_a", name: "Bash", input: { command: "echo hello" } }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_a", content: output }] },
  { role: "assistant", content: [{ type: "tool_use", id: "toolu_c", name: "Bash", input: { command: "echo other" } }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_c", content: other }] }
]
const read = (id: string, ref: string) => ({ id, name: "thread_read", arguments: JSON.stringify({ refs: ref }) })
const bash = { id: "call_b", name: "Bash", arguments: JSON.stringify({ command: "ls" }) }

/** The Anthropic message the agent received in a streamed answer. */
const receivedOf = (text: string) => {
  const a = GatewayAnthropic.replyAssembler()
  a.push(new TextEncoder().encode(text))
  const outcome = a.outcome()
  if (outcome._tag !== "completed") throw new Error("the answer did not complete")
  return (outcome.reply.messages[0]!.message as Json).content as ReadonlyArray<Json>
}

/** The only thread's runs' statuses. */
const statuses = Effect.gen(function*() {
  const api = yield* client()
  const threads = (yield* api.threads.list({ urlParams: {} })).threads
  return threads.length === 0 ? [] : (yield* api.runs.list({ path: { threadId: threads[0]!.id }, urlParams: {} })).runs.map((r) => r.status)
})

/** No `thread_read` in `messages` (a Chat Completions request's). */
const noReads = (messages: ReadonlyArray<Json>) => {
  expect(JSON.stringify(messages)).not.toContain("thread_read")
  expect(messages.filter((m) => m.role === "tool").map((m) => m.tool_call_id)).toEqual(["toolu_a", "toolu_c"])
}

describe("Gateway switch, thread_read beside the agent's calls after hidden rounds, review r26", () => {
  it.live("/v1/messages to openai-chat: two hidden rounds, then a read beside Bash: the next request carries the three rounds, each read answered", () =>
    withGateway((chat) =>
      Effect.gen(function*() {
        chat.enqueue(
          ModelApi.answer("openai-chat", "Let me read.", usage, [read("call_r1", "tool:toolu_a")]),
          ModelApi.answer("openai-chat", "More.", usage, [read("call_r2", "tool:toolu_c")]),
          ModelApi.answer("openai-chat", "Now run.", usage, [read("call_r3", "tool:toolu_a"), bash])
        )
        const first = yield* raw(request(history))
        expect(first.status).toBe(200)
        expect(first.text).not.toContain("thread_read")
        expect(chat.requests).toHaveLength(3)
        const received = receivedOf(first.text)
        expect(received.filter((b) => b.type === "tool_use").map((b) => b.id)).toEqual(["call_b"])

        chat.enqueue(ModelApi.answer("openai-chat", "Done.", usage))
        const second = [...history, { role: "assistant", content: received }, { role: "user", content: [{ type: "tool_result", tool_use_id: "call_b", content: "a.txt" }] }]
        expect((yield* raw(request(second))).status).toBe(200)
        const sent = (JSON.parse(chat.requests[3]!.body) as { messages: ReadonlyArray<Json> }).messages
        expect(sent.slice(-7).map((m) => [m.role, m.tool_call_id ?? m.content])).toEqual([
          ["assistant", "Let me read."],
          ["tool", "call_r1"],
          ["assistant", "More."],
          ["tool", "call_r2"],
          ["assistant", "Now run."],
          ["tool", "call_r3"],
          ["tool", "call_b"]
        ])
        expect(String(sent.at(-6)!.content)).toContain(output)
        expect(String(sent.at(-4)!.content)).toContain(other)
        expect(String(sent.at(-2)!.content)).toContain(output)
        const items: ReadonlyArray<Item> = yield* onlyItems
        expect(items.filter((i) => i.text.includes("thread_read"))).toEqual([])
        expect(items.filter((i) => i.toolCallId === "call_b").map((i) => i.kind)).toEqual(["tool_call", "tool_result"])
      })
    ), { timeout: 60_000 })

  it.live("/v1/messages to openai-chat: the continuation's stream breaks off: the run fails, and the agent's retry goes out without any round", () =>
    withGateway((chat) =>
      Effect.gen(function*() {
        const broken = ModelApi.answer("openai-chat", "Now run.", usage, [read("call_r2", "tool:toolu_c"), bash])
        chat.enqueue(
          ModelApi.answer("openai-chat", "Let me read.", usage, [read("call_r1", "tool:toolu_a")]),
          { ...broken, body: broken.body.slice(0, broken.body.indexOf("finish_reason\":\"tool_calls")) }
        )
        const first = yield* raw(request(history))
        expect(first.text).not.toContain("message_stop")
        expect(yield* statuses).toEqual(["failed"])
        // The agent retries: the upstream gets its history, no read of the broken answer.
        chat.enqueue(ModelApi.answer("openai-chat", "Fine.", usage))
        expect((yield* raw(request(history))).status).toBe(200)
        noReads((JSON.parse(chat.requests[2]!.body) as { messages: ReadonlyArray<Json> }).messages)
        chat.enqueue(ModelApi.answer("openai-chat", "Bye.", usage))
        expect((yield* raw(request([...history, { role: "assistant", content: [{ type: "text", text: "Fine." }] }, { role: "user", content: "thanks" }]))).status).toBe(200)
        noReads((JSON.parse(chat.requests[3]!.body) as { messages: ReadonlyArray<Json> }).messages)
        expect(yield* statuses).toEqual(["failed", "completed", "completed"])
      })
    ), { timeout: 60_000 })

  it.live("/v1/messages to openai-chat: the agent hangs up during the continuation: the run is interrupted, and its next request goes out without any round", () =>
    withGateway((chat) =>
      Effect.gen(function*() {
        let release = () => {}
        const hold = new Promise<void>((resolve) => (release = resolve))
        const second = ModelApi.answer("openai-chat", "Now run.", usage, [read("call_r2", "tool:toolu_c"), bash])
        chat.enqueue(
          ModelApi.answer("openai-chat", "Let me read.", usage, [read("call_r1", "tool:toolu_a")]),
          { ...second, rest: { at: second.body.indexOf("\n\n") + 2, hold } }
        )
        const fiber = yield* Effect.fork(raw(request(history)))
        yield* Effect.repeat(Effect.sync(() => chat.requests.length), { until: (n) => n === 2, schedule: Schedule.spaced("10 millis") })
        yield* Fiber.interrupt(fiber)
        // The rest of the continuation once the gateway has (most likely) seen the hang-up; if it has not, the answer
        // completes (recorded whole, its rounds with it) and the agent's next request is a retry: no round either way.
        yield* Effect.sleep("200 millis")
        release()
        yield* Effect.repeat(statuses, { until: (s) => s.length === 1 && s[0] !== "running", schedule: Schedule.spaced("20 millis") })
        expect(["interrupted", "completed"]).toContain((yield* statuses)[0])
        chat.enqueue(ModelApi.answer("openai-chat", "Fine.", usage))
        expect((yield* raw(request(history))).status).toBe(200)
        noReads((JSON.parse(chat.requests[2]!.body) as { messages: ReadonlyArray<Json> }).messages)
      })
    ), { timeout: 60_000 })

  it.live("/v1/chat/completions to anthropic-messages: two hidden rounds (the first without text), then a read beside bash; a retry of that request answered plainly: its next request carries no round", () =>
    withGateway((_chat, anthropic) =>
      Effect.gen(function*() {
        const tools = [{ type: "function", function: { name: "bash", description: "Run a command", parameters: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } } }]
        const send = (messages: ReadonlyArray<unknown>) =>
          raw(HttpClientRequest.post("/v1/chat/completions").pipe(
            HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "x-session-id": "sess-beside-review-c" }),
            HttpClientRequest.bodyText(JSON.stringify({ model: "claude-sonnet-4-5", stream: true, tools, messages }), "application/json")
          ))
        const pi: ReadonlyArray<unknown> = [
          { role: "system", content: "You are pi." },
          { role: "user", content: "run it" },
          { role: "assistant", content: null, tool_calls: [{ id: "call_a", type: "function", function: { name: "bash", arguments: JSON.stringify({ command: "echo hello" }) } }] },
          { role: "tool", tool_call_id: "call_a", content: output },
          { role: "assistant", content: null, tool_calls: [{ id: "call_c", type: "function", function: { name: "bash", arguments: JSON.stringify({ command: "echo other" }) } }] },
          { role: "tool", tool_call_id: "call_c", content: other }
        ]
        const run = { id: "toolu_b", name: "bash", arguments: JSON.stringify({ command: "ls" }) }
        anthropic.enqueue(
          ModelApi.answer("anthropic-messages", "", usage, [read("toolu_r1", "tool:call_a")]),
          ModelApi.answer("anthropic-messages", "More.", usage, [read("toolu_r2", "tool:call_c")]),
          ModelApi.answer("anthropic-messages", "Now run.", usage, [read("toolu_r3", "tool:call_a"), run])
        )
        const first = yield* send(pi)
        expect(first.status).toBe(200)
        expect(first.text).not.toContain("thread_read")
        const a = GatewayChat.replyAssembler()
        a.push(new TextEncoder().encode(first.text))
        const outcome = a.outcome()
        if (outcome._tag !== "completed") throw new Error("the answer did not complete")
        const message = outcome.reply.messages[0]!.message as Json

        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Done.", usage))
        const answered = [...pi, { role: "assistant", content: message.content ?? null, tool_calls: message.tool_calls }, { role: "tool", tool_call_id: "toolu_b", content: "a.txt" }]
        expect((yield* send(answered)).status).toBe(200)
        const sent = (JSON.parse(anthropic.requests[3]!.body) as { messages: ReadonlyArray<{ role: string; content: ReadonlyArray<Json> }> }).messages
        expect(sent.slice(-6).map((m) => [m.role, m.content.map((b) => [b.type, b.text ?? b.name ?? b.tool_use_id])])).toEqual([
          ["assistant", [["tool_use", "thread_read"]]],
          ["user", [["tool_result", "toolu_r1"]]],
          ["assistant", [["text", "More."], ["tool_use", "thread_read"]]],
          ["user", [["tool_result", "toolu_r2"]]],
          ["assistant", [["text", "Now run."], ["tool_use", "thread_read"], ["tool_use", "bash"]]],
          ["user", [["tool_result", "toolu_r3"], ["tool_result", "toolu_b"]]]
        ])

        // The agent retries that request (its side timed out): answered plainly, the conversation goes on from it.
        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Plain.", usage))
        expect((yield* send(answered)).status).toBe(200)
        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Bye.", usage))
        expect((yield* send([...answered, { role: "assistant", content: "Plain." }, { role: "user", content: "thanks" }])).status).toBe(200)
        const last = (JSON.parse(anthropic.requests[5]!.body) as { messages: ReadonlyArray<unknown> }).messages
        const plain = (v: unknown) => JSON.parse(JSON.stringify(v, (k, x) => (k === "cache_control" ? undefined : x))) as unknown
        // The retried request's messages (the rounds of the first answer) first, then "Plain." and the new prompt.
        expect(plain(last.slice(0, sent.length))).toEqual(plain(sent))
        expect(plain(last.slice(sent.length))).toEqual([
          { role: "assistant", content: [{ type: "text", text: "Plain." }] },
          { role: "user", content: [{ type: "text", text: "thanks" }] }
        ])
        const items: ReadonlyArray<Item> = yield* onlyItems
        expect(items.filter((i) => i.text.includes("thread_read"))).toEqual([])
        expect(items.filter((i) => i.kind === "assistant_message").map((i) => i.text)).toEqual(["More.\n\nNow run.", "Done.", "Plain.", "Bye."])
      })
    ), { timeout: 60_000 })
})
