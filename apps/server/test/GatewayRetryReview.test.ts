/**
 * Review r26 of the gateway's retried requests (issue 14, docs/gateway.md "Retried requests"): retries on
 * `/v1/chat/completions` (whose replies carry no upstream message id), a retry of a retry, a retry after a divergence,
 * a retry after a failed retry, a request with a changed tool result (a divergence, not a retry), a retry whose first
 * reply was a tool call, and a retry routed to another provider (a switch). The thread holds every message once, each
 * answer its own response (`messageId`), nothing lost. And a retry sent while the request it repeats is still
 * answered (a concurrent retry): whichever answer is recorded first, the retry's is the conversation's.
 */
import type { Item } from "@baton/contracts"
import { ToolUnits } from "@baton/context"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Database } from "@baton/persistence"
import { Context, Effect, Fiber, Layer, Schedule } from "effect"
import { adminToken, client, get, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"

const usage = { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }

/** A gateway: `gpt-*` to a Chat Completions upstream, `claude-*` to an Anthropic one; SQLite or a fresh Postgres schema. */
const withGateway = <A, E, R>(
  test: (chat: ModelApi.ModelApi, anthropic: ModelApi.ModelApi) => Effect.Effect<A, E, R>,
  dialect: "SQLite" | "Postgres" = "SQLite"
) =>
  Effect.scoped(Effect.gen(function*() {
    const chat = yield* ModelApi.start
    const anthropic = yield* ModelApi.start
    const sqlite = yield* settingsFor(
      [instance("chat", "openai-chat", chat), instance("anthropic", "anthropic-messages", anthropic)],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: [{ model: "gpt-*", provider: "chat" }, { model: "claude-*", provider: "anthropic" }] } }
    )
    const settings = dialect === "SQLite"
      ? sqlite
      : { ...sqlite, database: { _tag: "postgres" as const, url: Context.get(yield* Layer.build(Database.layerPgSchema()), Database.PgSchemaUrl) } }
    return yield* test(chat, anthropic).pipe(Effect.provide(serveSettings(settings)))
  }))

/** The only thread: items, runs, and its `gateway.diverged` / `gateway.retried` payloads. */
const record = Effect.gen(function*() {
  const api = yield* client()
  const threads = (yield* api.threads.list({ urlParams: {} })).threads
  expect(threads.length).toBe(1)
  const threadId = threads[0]!.id
  const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
  const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
  const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
  const runOf = new Map(runs.map((r, i) => [r.id, i]))
  return {
    items,
    runs,
    rows: items.map((i) => [runOf.get(i.runId!), i.kind, i.text]),
    diverged: events.filter((e) => e.type === "gateway.diverged").length,
    retried: events.filter((e) => e.type === "gateway.retried").length
  }
})

/** A streamed Chat Completions request (pi). */
const chatRequest = (messages: ReadonlyArray<unknown>) =>
  HttpClientRequest.post("/v1/chat/completions").pipe(
    HttpClientRequest.setHeaders({ accept: "text/event-stream", authorization: `Bearer ${adminToken}` }),
    HttpClientRequest.bodyText(JSON.stringify({ model: "gpt-x", stream: true, messages: [{ role: "system", content: "You are pi." }, ...messages] }), "application/json")
  )

/** A streamed `/v1/messages` request of one Claude Code session, to `model`. */
const messagesRequest = (history: ReadonlyArray<unknown>, model = "claude-x") =>
  HttpClientRequest.post("/v1/messages?beta=true").pipe(
    HttpClientRequest.setHeaders({ "anthropic-version": "2023-06-01", "x-api-key": adminToken, "x-claude-code-session-id": "session-retry-review" }),
    HttpClientRequest.bodyText(JSON.stringify({ model, max_tokens: 10, stream: true, system: [{ type: "text", text: "You are Claude Code." }], messages: history }), "application/json")
  )

const send = (upstream: ModelApi.ModelApi, request: HttpClientRequest.HttpClientRequest, reply: ModelApi.Reply, status = 200) =>
  Effect.gen(function*() {
    upstream.enqueue(reply)
    expect((yield* raw(request)).status).toBe(status)
  })

const user = (text: string) => ({ role: "user", content: [{ type: "text", text }] })
const assistant = (text: string) => ({ role: "assistant", content: [{ type: "text", text }] })

/** Each answer (a run's assistant-side items) is a tool unit of its own: no two answers grouped as one response. */
const answersApart = (items: ReadonlyArray<Item>) => {
  for (const unit of ToolUnits.toolUnits(items)) {
    const runs = new Set(unit.filter((i) => i.kind !== "tool_result").map((i) => i.runId))
    expect(runs.size, `one response across runs: ${JSON.stringify(unit.map((i) => [i.kind, i.text, i.messageId]))}`).toBeLessThanOrEqual(1)
  }
}

describe("Gateway retries, review r26", () => {
  it.live("/v1/chat/completions: a retry answered differently is no divergence; the two answers are two responses (their message ids differ)", () =>
    withGateway((chat) =>
      Effect.gen(function*() {
        const hi = { role: "user", content: "hello" }
        yield* send(chat, chatRequest([hi]), ModelApi.answer("openai-chat", "first answer", usage))
        yield* send(chat, chatRequest([hi]), ModelApi.answer("openai-chat", "second answer", usage))
        yield* send(chat, chatRequest([hi, { role: "assistant", content: "second answer" }, { role: "user", content: "next" }]), ModelApi.answer("openai-chat", "third answer", usage))
        const { diverged, items, retried, rows } = yield* record
        expect(diverged).toBe(0)
        expect(retried).toBe(1)
        expect(rows).toEqual([
          [0, "user_message", "hello"],
          [0, "assistant_message", "first answer"],
          [1, "assistant_message", "second answer"],
          [2, "user_message", "next"],
          [2, "assistant_message", "third answer"]
        ])
        expect(items[1]!.messageId).not.toBe(items[2]!.messageId)
        answersApart(items)
      })
    ))

  it.live("/v1/chat/completions: a retry whose first reply was a tool call, answered with another call; the agent answers the second: the first call stays, apart", () =>
    withGateway((chat) =>
      Effect.gen(function*() {
        const hi = { role: "user", content: "list files" }
        const call = (id: string) => ({ id, name: "bash", arguments: JSON.stringify({ cmd: "ls" }) })
        yield* send(chat, chatRequest([hi]), ModelApi.answer("openai-chat", "", usage, [call("call_1")]))
        yield* send(chat, chatRequest([hi]), ModelApi.answer("openai-chat", "", usage, [call("call_2")]))
        const answered = [
          hi,
          { role: "assistant", content: "", tool_calls: [{ id: "call_2", type: "function", function: { name: "bash", arguments: JSON.stringify({ cmd: "ls" }) } }] },
          { role: "tool", tool_call_id: "call_2", content: "a.txt" }
        ]
        yield* send(chat, chatRequest(answered), ModelApi.answer("openai-chat", "One file.", usage))
        const { diverged, items, retried } = yield* record
        expect(diverged).toBe(0)
        expect(retried).toBe(1)
        expect(items.map((i) => [i.kind, i.toolCallId])).toEqual([
          ["user_message", null],
          ["tool_call", "call_1"],
          ["tool_call", "call_2"],
          ["tool_result", "call_2"],
          ["assistant_message", null]
        ])
        answersApart(items)
      })
    ))

  it.live("/v1/chat/completions: a retry after a retry that failed upstream: the two answers are two responses", () =>
    withGateway((chat) =>
      Effect.gen(function*() {
        const hi = { role: "user", content: "hello" }
        yield* send(chat, chatRequest([hi]), ModelApi.answer("openai-chat", "first answer", usage))
        yield* send(chat, chatRequest([hi]), ModelApi.error(500, "upstream down"), 500)
        yield* send(chat, chatRequest([hi]), ModelApi.answer("openai-chat", "third answer", usage))
        const { diverged, items, rows } = yield* record
        expect(diverged).toBe(0)
        expect(rows).toEqual([
          [0, "user_message", "hello"],
          [0, "assistant_message", "first answer"],
          [2, "assistant_message", "third answer"]
        ])
        answersApart(items)
      })
    ))

  it.live("/v1/messages: a retry of a retry (three different answers), then the conversation goes on from the last", () =>
    withGateway((_chat, anthropic) =>
      Effect.gen(function*() {
        const answer = (text: string) => ModelApi.answer("anthropic-messages", text, usage)
        yield* send(anthropic, messagesRequest([user("hello")]), answer("A"))
        yield* send(anthropic, messagesRequest([user("hello")]), answer("B"))
        yield* send(anthropic, messagesRequest([user("hello")]), answer("C"))
        // The third answered as the second: not stored.
        yield* send(anthropic, messagesRequest([user("hello")]), answer("C"))
        yield* send(anthropic, messagesRequest([user("hello"), assistant("C"), user("next")]), answer("D"))
        const { diverged, items, retried, rows } = yield* record
        expect(diverged).toBe(0)
        expect(retried).toBe(3)
        expect(rows).toEqual([
          [0, "user_message", "hello"],
          [0, "assistant_message", "A"],
          [1, "assistant_message", "B"],
          [2, "assistant_message", "C"],
          [4, "user_message", "next"],
          [4, "assistant_message", "D"]
        ])
        answersApart(items)
      })
    ))

  it.live("/v1/messages: a retry after a divergence is a retry; a changed tool result is a divergence, not a retry", () =>
    withGateway((_chat, anthropic) =>
      Effect.gen(function*() {
        const answer = (text: string, calls: ReadonlyArray<ModelApi.Call> = []) => ModelApi.answer("anthropic-messages", text, usage, calls)
        yield* send(anthropic, messagesRequest([user("one")]), answer("A"))
        yield* send(anthropic, messagesRequest([user("one"), assistant("A"), user("two")]), answer("B"))
        // Rewound: a divergence.
        yield* send(anthropic, messagesRequest([user("one"), assistant("A"), user("three")]), answer("C", [{ id: "toolu_1", name: "Bash", arguments: "{\"command\":\"ls\"}" }]))
        // Retried: no divergence.
        yield* send(anthropic, messagesRequest([user("one"), assistant("A"), user("three")]), answer("D", [{ id: "toolu_2", name: "Bash", arguments: "{\"command\":\"ls\"}" }]))
        const call = { role: "assistant", content: [{ type: "text", text: "D" }, { type: "tool_use", id: "toolu_2", name: "Bash", input: { command: "ls" } }] }
        const result = (text: string) => ({ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_2", content: text }] })
        yield* send(anthropic, messagesRequest([user("one"), assistant("A"), user("three"), call, result("a.txt")]), answer("E"))
        // The same request with another tool result: a divergence.
        yield* send(anthropic, messagesRequest([user("one"), assistant("A"), user("three"), call, result("b.txt")]), answer("F"))
        const { diverged, items, retried, rows } = yield* record
        expect(retried).toBe(1)
        expect(diverged).toBe(2)
        expect(rows).toEqual([
          [0, "user_message", "one"],
          [0, "assistant_message", "A"],
          [1, "user_message", "two"],
          [1, "assistant_message", "B"],
          [2, "user_message", "three"],
          [2, "assistant_message", "C"],
          [2, "tool_call", "{\"command\":\"ls\"}"],
          [3, "assistant_message", "D"],
          [3, "tool_call", "{\"command\":\"ls\"}"],
          [4, "tool_result", "a.txt"],
          [4, "assistant_message", "E"],
          [5, "tool_result", "b.txt"],
          [5, "assistant_message", "F"]
        ])
        answersApart(items)
      })
    ))

  it.live("/v1/messages retried on another provider (a switch to Chat Completions): no divergence, both answers kept apart, and the conversation goes on", () =>
    withGateway((chat, anthropic) =>
      Effect.gen(function*() {
        yield* send(anthropic, messagesRequest([user("hello")]), ModelApi.answer("anthropic-messages", "from claude", usage))
        yield* send(chat, messagesRequest([user("hello")], "gpt-x"), ModelApi.answer("openai-chat", "from gpt", usage))
        yield* send(anthropic, messagesRequest([user("hello"), assistant("from gpt"), user("next")]), ModelApi.answer("anthropic-messages", "again claude", usage))
        const { diverged, items, retried, rows } = yield* record
        expect(diverged).toBe(0)
        expect(retried).toBe(1)
        expect(rows).toEqual([
          [0, "user_message", "hello"],
          [0, "assistant_message", "from claude"],
          [1, "assistant_message", "from gpt"],
          [2, "user_message", "next"],
          [2, "assistant_message", "again claude"]
        ])
        answersApart(items)
      })
    ))

  for (const [dialect, order] of [["SQLite", "the first answer ends first"], ["SQLite", "the retry's answer ends first"], ["Postgres", "the first answer ends first"]] as const) {
    it.live(`${dialect}, /v1/messages: a retry sent while the first answer streams (${order}): the retry's answer is the conversation's, every message stored once`, () =>
      withGateway((_chat, anthropic) =>
        Effect.gen(function*() {
          const runs = Effect.gen(function*() {
            const api = yield* client()
            const threads = (yield* api.threads.list({ urlParams: {} })).threads
            return threads.length === 0 ? 0 : (yield* api.runs.list({ path: { threadId: threads[0]!.id }, urlParams: {} })).runs.length
          })
          /** An answer whose head and first event go out at once, the rest when released. */
          const held = (text: string) => {
            let release = () => {}
            const hold = new Promise<void>((resolve) => (release = resolve))
            const reply = ModelApi.answer("anthropic-messages", text, usage)
            return { reply: { ...reply, rest: { at: reply.body.indexOf("\n\n") + 2, hold } }, release }
          }
          const a = held("A")
          const b = held("B")
          anthropic.enqueue(a.reply, b.reply)
          const first = yield* Effect.fork(raw(messagesRequest([user("hello")])))
          yield* Effect.repeat(runs, { until: (n) => n === 1, schedule: Schedule.spaced("10 millis") })
          const retry = yield* Effect.fork(raw(messagesRequest([user("hello")])))
          yield* Effect.repeat(runs, { until: (n) => n === 2, schedule: Schedule.spaced("10 millis") })
          const [one, two] = order === "the first answer ends first" ? [a, b] as const : [b, a] as const
          const [oneFiber, twoFiber] = order === "the first answer ends first" ? [first, retry] as const : [retry, first] as const
          one.release()
          expect((yield* Fiber.join(oneFiber)).status).toBe(200)
          two.release()
          expect((yield* Fiber.join(twoFiber)).status).toBe(200)
          // The agent goes on with the retry's answer.
          yield* send(anthropic, messagesRequest([user("hello"), assistant("B"), user("next")]), ModelApi.answer("anthropic-messages", "C", usage))
          const { diverged, items, rows } = yield* record
          expect(diverged).toBe(0)
          expect(rows).toEqual([
            [0, "user_message", "hello"],
            ...(order === "the first answer ends first"
              ? [[0, "assistant_message", "A"], [1, "assistant_message", "B"]]
              : [[1, "assistant_message", "B"], [0, "assistant_message", "A"]]),
            [2, "user_message", "next"],
            [2, "assistant_message", "C"]
          ])
          answersApart(items)
        }), dialect))
  }
})
