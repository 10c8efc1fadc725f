/**
 * Set-up for the switch fit's summary tests over HTTP (issue 14 item 4, docs/gateway.md "Routing and switching"):
 * a gateway with `claude-*` on a loopback Anthropic upstream and `gpt-*` on a loopback Chat Completions one with a
 * 32,000-token window (`withGateway`), a long Claude Code-like history (`longHistory`, about 80,000 tokens), the
 * agent's requests (`messages`) and what it assembles of an answer (`assembled`), the thread's items and events, and
 * the first two requests of a switched conversation (`firstTwo`: on the Anthropic model, then switched with the
 * pointer alone). Shared by `GatewaySwitchSummary.test.ts` and `GatewaySwitchSummaryReview.test.ts`.
 */
import type { Item } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { Database } from "@baton/persistence"
import { ThreadRead } from "@baton/orchestration"
import { HttpClientRequest } from "@effect/platform"
import { expect } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import * as GatewayAnthropic from "../../src/GatewayAnthropic.js"
import { adminToken, client, raw } from "../helpers.js"
import * as ModelApi from "./ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./ModelServer.js"

export const counter = TokenCounter.make()
export const usage = { input: 900, cacheWrite: 0, cacheRead: 300, output: 40 }
export const window = 32_000

/** `n` words that do not repeat much (so they cost about as many tokens as real text). */
export const words = (seed: number, n: number) => Array.from({ length: n }, (_, i) => `w${(seed * 7919 + i * 104_729) % 100_003}`).join(" ")

export type Message = { readonly role: string; readonly content: unknown }
export type ChatOut = { readonly max_tokens: number; readonly messages: ReadonlyArray<{ readonly role: string; readonly content: string | null }> }

/**
 * A long Claude Code-like history (about 80,000 tokens): 10 exchanges of long text (nothing to stub), then 10 Bash
 * rounds with long outputs, ending with the assistant's last answer.
 */
export const longHistory = (): Array<Message> => {
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

/** A message's first text (the prompt's, an answer's, or a tool output's). */
export const textOf = (m: Message): string => {
  if (typeof m.content === "string") return m.content
  const b = (m.content as ReadonlyArray<{ type: string; text?: string; content?: string }>)[0]!
  return b.type === "tool_result" ? b.content! : b.text!
}

export const system = [{ type: "text", text: "You are Claude Code." }]
export const tools = [{ name: "Bash", description: "Run a command", input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } }]
export const base = { max_tokens: 32_000, stream: true, system, tools }

/** An agent's `/v1/messages` request (the Baton token as `x-api-key`, the session header Claude Code sends). */
export const messages = (body: unknown) =>
  HttpClientRequest.post("/v1/messages?beta=true").pipe(
    HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "sess-summary", "user-agent": "claude-cli/2.1.332 (external, sdk-cli)" }),
    HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
  )

/** The assistant message an agent assembles from an Anthropic SSE answer. */
export const assembled = (text: string): Message => {
  const a = GatewayAnthropic.replyAssembler()
  a.push(new TextEncoder().encode(text))
  const outcome = a.outcome()
  if (outcome._tag !== "completed") throw new Error(`the answer did not complete: ${text.slice(0, 500)}`)
  return outcome.reply.messages[0]!.message as Message
}

export type Dialect = "SQLite" | "Postgres"

/**
 * A gateway with `claude-*` on an Anthropic loopback upstream and `gpt-*` on a Chat Completions one (32,000 tokens),
 * on SQLite or Postgres; with `modelSummariser`, `/offload` summaries are written by a model instance on the third
 * loopback upstream (it answers 500 when nothing is queued), else by the default offline digest.
 */
export const withGateway = <A, E, R>(
  dialect: Dialect,
  test: (anthropic: ModelApi.ModelApi, chat: ModelApi.ModelApi, summariser: ModelApi.ModelApi) => Effect.Effect<A, E, R>,
  modelSummariser = false
) =>
  Effect.scoped(Effect.gen(function*() {
    const anthropic = yield* ModelApi.start
    const chat = yield* ModelApi.start
    const summariser = yield* ModelApi.start
    const sqlite = yield* settingsFor(
      [
        instance("anthropic", "anthropic-messages", anthropic, { toolResultOffload: false }),
        instance("chat", "openai-chat", chat, { contextWindow: window, autoCompactThreshold: null, maxOutputTokens: 4_096 }),
        instance("summariser", "anthropic-messages", summariser, { toolResultOffload: false })
      ],
      { TEST_MODEL_KEY: marker },
      undefined,
      {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }, { model: "gpt-*", provider: "chat" }] },
        ...(modelSummariser ? { offload: { summariser: "summariser" } } : {})
      }
    )
    const settings = dialect === "SQLite"
      ? sqlite
      : { ...sqlite, database: { _tag: "postgres" as const, url: Context.get(yield* Layer.build(Database.layerPgSchema()), Database.PgSchemaUrl) } }
    return yield* test(anthropic, chat, summariser).pipe(Effect.provide(serveSettings(settings)))
  }))

export const allItems = (threadId: Item["threadId"]) =>
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
export const readAll = (reader: ThreadRead.ThreadRead, threadId: string, refs: string) =>
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

/** The thread's events (its timeline, not followed). */
export const eventsOf = (threadId: string) =>
  Effect.map(raw(HttpClientRequest.get(`/threads/${threadId}/events?follow=false`).pipe(HttpClientRequest.bearerToken(adminToken))), (r) => threadEvents(r.text))

/** Waits (up to 20 s) for an event of one of `types` on the thread; its type and payload. */
export const eventually = (threadId: string, types: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 200; i++) {
      const found = (yield* eventsOf(threadId)).find((e) => types.includes(e.type))
      if (found !== undefined) return found
      yield* Effect.sleep("100 millis")
    }
    throw new Error(`no ${types.join(" or ")} event on thread ${threadId}`)
  })

/** The one thread of the gateway. */
export const theThread = Effect.gen(function*() {
  const threads = (yield* (yield* client()).threads.list({ urlParams: {} })).threads
  expect(threads).toHaveLength(1)
  return threads[0]!.id
})

/** The first two requests: the long history on the Anthropic model, then switched (pointer alone: no summary yet). */
export const firstTwo = (anthropic: ModelApi.ModelApi, chat: ModelApi.ModelApi) =>
  Effect.gen(function*() {
    const history = longHistory()
    anthropic.enqueue(ModelApi.answer("anthropic-messages", "Noted.", usage))
    const body1 = { ...base, model: "claude-sonnet-4-5", messages: [...history, { role: "user", content: "summarise the outputs" }] }
    const first = yield* raw(messages(body1))
    expect(first.status).toBe(200)
    chat.enqueue(ModelApi.answer("openai-chat", "Checking.", usage))
    const body2 = { ...base, model: "gpt-5", messages: [...body1.messages, assembled(first.text), { role: "user", content: [{ type: "text", text: "now, on the other model: what did part0 say?" }] }] }
    const second = yield* raw(messages(body2))
    expect(second.status).toBe(200)
    const sent = chat.requests[0]!
    const out = JSON.parse(sent.body) as ChatOut
    // No summary exists yet: the pointer alone, and the request fits.
    expect(out.messages[1]!.content).toMatch(/^<deferred_history thread=/)
    expect(sent.body).not.toContain("<conversation_summary")
    expect(counter.count(sent.body) + out.max_tokens).toBeLessThanOrEqual(window)
    return { history, body2, reply2: assembled(second.text) }
  })
