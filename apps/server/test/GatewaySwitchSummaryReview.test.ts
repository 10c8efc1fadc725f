/**
 * Review r17 of the switch fit's third step (a summary before the deferral pointer; issue 14 item 4, docs/gateway.md
 * "Routing and switching"): after the agent rewinds (Claude Code's Esc Esc: an earlier prompt edited, the rest of the
 * conversation dropped; the gateway records a divergence on the same thread), a switched request must not carry the
 * summary the gateway wrote of the dropped branch: that summary stands for items that are no longer the conversation's.
 * Over real HTTP on loopback (an Anthropic upstream for `claude-*`, a Chat Completions one with a 32,000-token window
 * for `gpt-*`), on SQLite.
 */
import type { Item } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { Database } from "@baton/persistence"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import * as GatewayAnthropic from "../src/GatewayAnthropic.js"
import { adminToken, client, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"

const counter = TokenCounter.make()
const usage = { input: 900, cacheWrite: 0, cacheRead: 300, output: 40 }
const window = 32_000

/** `n` words that do not repeat much (so they cost about as many tokens as real text). */
const words = (seed: number, n: number) => Array.from({ length: n }, (_, i) => `w${(seed * 7919 + i * 104_729) % 100_003}`).join(" ")

type Message = { readonly role: string; readonly content: unknown }
type ChatOut = { readonly max_tokens: number; readonly messages: ReadonlyArray<{ readonly role: string; readonly content: string | null }> }

/**
 * A long Claude Code-like history (about 80,000 tokens): 10 exchanges of long text (nothing to stub), then 10 Bash
 * rounds with long outputs, ending with the assistant's last answer.
 */
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

/** A message's first text (the prompt's, an answer's, or a tool output's). */
const textOf = (m: Message): string => {
  if (typeof m.content === "string") return m.content
  const b = (m.content as ReadonlyArray<{ type: string; text?: string; content?: string }>)[0]!
  return b.type === "tool_result" ? b.content! : b.text!
}

const system = [{ type: "text", text: "You are Claude Code." }]
const tools = [{ name: "Bash", description: "Run a command", input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } }]
const base = { max_tokens: 32_000, stream: true, system, tools }

/** An agent's `/v1/messages` request (the Baton token as `x-api-key`, the session header Claude Code sends). */
const messages = (body: unknown) =>
  HttpClientRequest.post("/v1/messages?beta=true").pipe(
    HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "sess-summary", "user-agent": "claude-cli/2.1.332 (external, sdk-cli)" }),
    HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
  )

/** The assistant message an agent assembles from an Anthropic SSE answer. */
const assembled = (text: string): Message => {
  const a = GatewayAnthropic.replyAssembler()
  a.push(new TextEncoder().encode(text))
  const outcome = a.outcome()
  if (outcome._tag !== "completed") throw new Error(`the answer did not complete: ${text.slice(0, 500)}`)
  return outcome.reply.messages[0]!.message as Message
}

type Dialect = "SQLite" | "Postgres"

/**
 * A gateway with `claude-*` on an Anthropic loopback upstream and `gpt-*` on a Chat Completions one (32,000 tokens),
 * on SQLite or Postgres; with `modelSummariser`, `/offload` summaries are written by a model instance on the third
 * loopback upstream (it answers 500 when nothing is queued), else by the default offline digest.
 */
const withGateway = <A, E, R>(
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

/** The thread's events (its timeline, not followed). */
const eventsOf = (threadId: string) =>
  Effect.map(raw(HttpClientRequest.get(`/threads/${threadId}/events?follow=false`).pipe(HttpClientRequest.bearerToken(adminToken))), (r) => threadEvents(r.text))

/** Waits (up to 20 s) for an event of one of `types` on the thread; its type and payload. */
const eventually = (threadId: string, types: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 200; i++) {
      const found = (yield* eventsOf(threadId)).find((e) => types.includes(e.type))
      if (found !== undefined) return found
      yield* Effect.sleep("100 millis")
    }
    throw new Error(`no ${types.join(" or ")} event on thread ${threadId}`)
  })

/** The one thread of the gateway. */
const theThread = Effect.gen(function*() {
  const threads = (yield* (yield* client()).threads.list({ urlParams: {} })).threads
  expect(threads).toHaveLength(1)
  return threads[0]!.id
})

/** The first two requests: the long history on the Anthropic model, then switched (pointer alone: no summary yet). */
const firstTwo = (anthropic: ModelApi.ModelApi, chat: ModelApi.ModelApi) =>
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

describe("Gateway, a switched fit's summary after the agent rewound (review r17)", () => {
  it.live("a summary of the branch the agent rewound away is not sent with the new branch (only the shared start is the conversation's)", () =>
    withGateway("SQLite", (anthropic, chat) =>
      Effect.gen(function*() {
        const { history } = yield* firstTwo(anthropic, chat)
        const threadId = yield* theThread
        const offloaded = yield* eventually(threadId, ["thread.offloaded", "thread.offload_failed"])
        expect(offloaded.type).toBe("thread.offloaded")
        const { cutSeq } = offloaded.payload as { cutSeq: number }
        // The summary stands for the items through the cut: the start and more of the old branch than the rewind keeps.
        const items = yield* allItems(threadId)
        const kept = history.slice(0, 3)
        const lastKept = Math.max(...items.filter((i) => kept.some((m) => textOf(m) === i.text)).map((i) => i.seq))
        expect(cutSeq).toBeGreaterThan(lastKept)
        // The rewind: the first three messages kept, a new (long) branch from there, switched.
        const branch: Array<Message> = []
        for (let i = 0; i < 15; i++) {
          branch.push({ role: "assistant", content: [{ type: "text", text: `new answer ${i} ${words(700 + i, 600)}` }] })
          branch.push({ role: "user", content: [{ type: "text", text: `new question ${i} ${words(800 + i, 600)}` }] })
        }
        chat.enqueue(ModelApi.answer("openai-chat", "On the new branch.", usage))
        const body3 = { ...base, model: "gpt-5", messages: [...kept, ...branch, { role: "assistant", content: [{ type: "text", text: "ok" }] }, { role: "user", content: "go on" }] }
        const third = yield* raw(messages(body3))
        expect(third.status).toBe(200)
        const sent = chat.requests.at(-1)!.body
        const out = JSON.parse(sent) as ChatOut
        expect(out.messages.at(-1)).toEqual({ role: "user", content: "go on" })
        expect((yield* eventsOf(threadId)).some((e) => e.type === "gateway.diverged")).toBe(true)
        // Messages were left out (the pointer), but the summary of the dropped branch is not the conversation's.
        expect(out.messages[1]!.content).toMatch(/<deferred_history thread=/)
        // What the request must not carry: the text of the messages the rewind dropped (the summary's digest quotes them).
        for (const dropped of history.slice(3, 8)) expect(sent).not.toContain(textOf(dropped).slice(0, 40))
        expect(sent).not.toContain("<conversation_summary")
      })
    ), { timeout: 120_000 })
})
