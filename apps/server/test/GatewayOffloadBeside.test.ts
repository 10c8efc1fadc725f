/**
 * The upstream's `thread_read` calls beside calls of the agent's own tools on `/v1/messages` (issue 14 item 3,
 * docs/gateway.md "`thread_read` beside the agent's own calls"), against a loopback Anthropic upstream that records
 * the bodies, on SQLite and Postgres, streamed and whole: the gateway answers the read from the thread and the agent
 * gets the reply without the call (its blocks renumbered, `stop_reason` still `tool_use`); the agent's next request,
 * sent after a restart of the gateway, goes upstream with the assistant message as the upstream sent it and the
 * gateway's answer (the exact original) beside the agent's own result, extending the previous request; the request
 * after that extends it again; the thread holds every agent message once and no `thread_read` call.
 */
import { describe, expect, it } from "@effect/vitest"
import { HttpClientRequest } from "@effect/platform"
import { Database } from "@baton/persistence"
import { Context, Effect, Layer } from "effect"
import { adminToken, client, get, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"

const usage = { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }
const tools = [{ name: "Bash", description: "Runs a command.", input_schema: { type: "object", properties: { command: { type: "string" } } } }]
const system = [{ type: "text", text: "You are a coding agent." }]
const bp = { type: "ephemeral" }

type Block = Record<string, unknown>
type Message = { role: string; content: Array<Block> }
type Body = { messages: Array<Message>; tools: Array<{ name: string }> }

/** About 6,000 characters of tool output. */
const output = Array.from({ length: 100 }, (_, line) => `src/file${line}.ts:${line * 7}: export const value${line} = compute(${line})`).join("\n")

/** `messages` with the agent's breakpoint on the newest message's last block only (as Claude Code sends it). */
const marked = (messages: ReadonlyArray<Message>): Array<Message> =>
  messages.map((m, i) => (i < messages.length - 1 ? m : { ...m, content: m.content.map((b, j) => (j === m.content.length - 1 ? { ...b, cache_control: bp } : b)) }))

/** The messages of a body without breakpoints (they move with the newest message). */
const unmarked = (body: Body) => body.messages.map((m) => JSON.stringify({ ...m, content: m.content.map(({ cache_control: _, ...b }) => b) }))

const post = (body: unknown) =>
  HttpClientRequest.post("/v1/messages?beta=true").pipe(
    HttpClientRequest.setHeaders({ "anthropic-version": "2023-06-01", "x-api-key": adminToken, "x-claude-code-session-id": "session-beside" }),
    HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
  )

const text = (t: string) => ({ type: "text", text: t })
const use = (id: string, name: string, input: Record<string, unknown>) => ({ type: "tool_use", id, name, input })

/** The upstream's reply: text, a thread_read call, then a call of the agent's Bash (whole or streamed). */
const calls = [{ id: "toolu_r", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_1" }) }, { id: "toolu_2", name: "Bash", arguments: JSON.stringify({ command: "ls" }) }]
const original = { role: "assistant", content: [text("Let me look."), use("toolu_r", "thread_read", { refs: "tool:toolu_1" }), use("toolu_2", "Bash", { command: "ls" })] }
const mixed = (streamed: boolean): ModelApi.Reply =>
  streamed ? ModelApi.answer("anthropic-messages", "Let me look.", usage, calls) : {
    status: 200,
    contentType: "application/json",
    body: JSON.stringify({
      id: "msg_mixed",
      type: "message",
      role: "assistant",
      model: "m",
      content: original.content,
      stop_reason: "tool_use",
      stop_sequence: null,
      usage: { input_tokens: 10, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 5 }
    })
  }

/** The content the agent received (streamed: assembled from the events, which must be numbered without gaps). */
const received = (answer: { text: string; body: unknown }, streamed: boolean): { content: Array<Block>; stopReason: unknown } => {
  if (!streamed) {
    const body = answer.body as { content: Array<Block>; stop_reason: unknown }
    return { content: body.content, stopReason: body.stop_reason }
  }
  type Event = { type: string; index: number; content_block: Block; delta: { type: string; text: string; partial_json: string; stop_reason: unknown } }
  const events = answer.text.split("\n\n").filter((e) => e.trim() !== "").map((e) => JSON.parse(e.split("\n").find((l) => l.startsWith("data: "))!.slice(6)) as Event)
  expect(events.filter((e) => e.type === "message_start").length).toBe(1)
  expect(events.at(-1)!.type).toBe("message_stop")
  const starts = events.filter((e) => e.type === "content_block_start")
  expect(starts.map((e) => e.index)).toEqual(starts.map((_, i) => i))
  const content: Array<Block> = starts.map((e) => ({ ...e.content_block }))
  const json: Array<string> = content.map(() => "")
  for (const e of events) {
    if (e.type !== "content_block_delta") continue
    expect(e.index).toBeLessThan(content.length)
    if (e.delta.type === "text_delta") content[e.index]!.text = String(content[e.index]!.text) + e.delta.text
    if (e.delta.type === "input_json_delta") json[e.index] += e.delta.partial_json
  }
  for (const e of events.filter((e) => e.type === "content_block_stop")) expect(e.index).toBeLessThan(content.length)
  content.forEach((b, i) => {
    if (b.type === "tool_use") b.input = JSON.parse(json[i] || "{}")
  })
  return { content, stopReason: events.find((e) => e.type === "message_delta")?.delta.stop_reason }
}

/** A gateway over `upstream` on SQLite or a fresh Postgres schema; `serve` runs an effect on a gateway started for it. */
const gateway = (upstream: ModelApi.ModelApi, dialect: "SQLite" | "Postgres") =>
  Effect.gen(function*() {
    const sqlite = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
      gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
    })
    const settings = dialect === "SQLite"
      ? sqlite
      : { ...sqlite, database: { _tag: "postgres" as const, url: Context.get(yield* Layer.build(Database.layerPgSchema()), Database.PgSchemaUrl) } }
    return <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.scoped(effect.pipe(Effect.provide(serveSettings(settings))))
  })

describe("Gateway: thread_read beside the agent's own calls (/v1/messages)", () => {
  for (const dialect of ["SQLite", "Postgres"] as const) {
    for (const streamed of [true, false]) {
      it.live(`${dialect}, ${streamed ? "streamed" : "whole"}: the gateway answers the read, the agent never sees it, the next request (after a restart) carries the call and the original, extending the prefix`, () =>
        Effect.scoped(Effect.gen(function*() {
          const upstream = yield* ModelApi.start
          const serve = yield* gateway(upstream, dialect)
          const request = (messages: ReadonlyArray<Message>) => ({ model: "claude-x", max_tokens: 100, stream: streamed, system, tools, messages: marked(messages) })
          const prompt: Message = { role: "user", content: [text("grep the values, then list the files")] }
          const a1: Message = { role: "assistant", content: [use("toolu_1", "Bash", { command: "grep -rn value src" })] }
          const u1: Message = { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: output }] }

          const visible = yield* serve(Effect.gen(function*() {
            upstream.enqueue(ModelApi.answer("anthropic-messages", "", usage, [{ id: "toolu_1", name: "Bash", arguments: JSON.stringify({ command: "grep -rn value src" }) }]))
            expect((yield* raw(post(request([prompt])))).status).toBe(200)
            upstream.enqueue(mixed(streamed))
            const answer = yield* raw(post(request([prompt, a1, u1])))
            expect(answer.status).toBe(200)
            // One upstream request: the agent must answer its own call, so the gateway does not continue.
            expect(upstream.requests.length).toBe(2)
            expect(answer.text).not.toContain("thread_read")
            expect(answer.text).not.toContain("toolu_r")
            const got = received(answer, streamed)
            expect(got.content).toEqual([text("Let me look."), use("toolu_2", "Bash", { command: "ls" })])
            expect(got.stopReason).toBe("tool_use")
            return got.content
          }))

          // The gateway restarts between the two requests: the expansion is durable.
          const a2: Message = { role: "assistant", content: visible }
          const u2: Message = { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_2", content: "a.ts b.ts" }, text("<system-reminder>keep going</system-reminder>")] }
          yield* serve(Effect.gen(function*() {
            upstream.enqueue(ModelApi.answer("anthropic-messages", "Found them.", usage))
            expect((yield* raw(post(request([prompt, a1, u1, a2, u2])))).status).toBe(200)
            const second = JSON.parse(upstream.requests[1]!.body) as Body
            const third = JSON.parse(upstream.requests[2]!.body) as Body
            // It extends the request that got the reply: the assistant message as the upstream sent it, then the
            // gateway's answer (the original output) with the agent's own result and text in the same user message.
            expect(unmarked(third).slice(0, second.messages.length)).toEqual(unmarked(second))
            expect(third.messages.length).toBe(second.messages.length + 2)
            expect(third.messages.at(-2)).toEqual(original)
            const joined = third.messages.at(-1)!
            expect(joined.role).toBe("user")
            expect(joined.content.map((b) => [b.type, b.tool_use_id])).toEqual([["tool_result", "toolu_r"], ["tool_result", "toolu_2"], ["text", undefined]])
            expect(joined.content[0]!.is_error).toBeUndefined()
            expect(String(joined.content[0]!.content)).toContain(output)
            // The agent's own blocks as it sent them (its breakpoint where it put it).
            expect(joined.content.slice(1)).toEqual(marked([u2])[0]!.content)

            // The request after that extends it again (the joined message goes out the same way).
            upstream.enqueue(ModelApi.answer("anthropic-messages", "You are welcome.", usage))
            const a3: Message = { role: "assistant", content: [text("Found them.")] }
            expect((yield* raw(post(request([prompt, a1, u1, a2, u2, a3, { role: "user", content: [text("thanks")] }])))).status).toBe(200)
            const fourth = JSON.parse(upstream.requests[3]!.body) as Body
            expect(unmarked(fourth).slice(0, third.messages.length)).toEqual(unmarked(third))
            expect(upstream.requests.length).toBe(4)

            // The thread: every agent message once, no thread_read call nor its result; no divergence.
            const api = yield* client()
            const threads = (yield* api.threads.list({ urlParams: {} })).threads
            expect(threads.length).toBe(1)
            const threadId = threads[0]!.id
            const items = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
            expect(items.filter((i) => i.toolCallId === "toolu_r")).toEqual([])
            expect(items.filter((i) => i.kind === "tool_call").map((i) => i.toolCallId)).toEqual(["toolu_1", "toolu_2"])
            expect(items.filter((i) => i.kind === "tool_result").map((i) => i.toolCallId)).toEqual(["toolu_1", "toolu_2"])
            expect(items.filter((i) => i.text === "Let me look.").length).toBe(1)
            expect(items.filter((i) => i.text === "thanks").length).toBe(1)
            const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
            expect(runs.map((r) => r.status)).toEqual(["completed", "completed", "completed", "completed"])
            const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
            expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
          }))
        })), 120_000)
    }
  }

  it.live("a read beside the agent's call that would take the request over the window is answered as refused (an error result), never the original", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      // A 20,000-token window: the agent's request (one ~8,000-token result) fits, the same result read back does not.
      const settings = yield* settingsFor(
        [instance("anthropic", "anthropic-messages", upstream, { contextWindow: 20_000, autoCompactThreshold: null, maxOutputTokens: 2_000 })],
        { TEST_MODEL_KEY: marker },
        undefined,
        { gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] } }
      )
      yield* Effect.gen(function*() {
        const big = Array.from({ length: 420 }, (_, line) => `src/module/file${line}.ts:${line * 7}: export const value${line} = compute(${line}, "big")`).join("\n").slice(0, 32_000)
        const history: Array<Message> = [
          { role: "user", content: [text("grep it")] },
          { role: "assistant", content: [use("toolu_big", "Bash", { command: "grep -rn value src" })] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_big", content: big }] },
          { role: "assistant", content: [text("Found them.")] },
          { role: "user", content: [text("read it all again and list the files")] }
        ]
        const reply = [use("toolu_rb", "thread_read", { refs: "tool:toolu_big", limit: 32_000 }), use("toolu_ls", "Bash", { command: "ls" })]
        upstream.enqueue({
          status: 200,
          contentType: "application/json",
          body: JSON.stringify({ id: "msg_b", type: "message", role: "assistant", model: "m", content: reply, stop_reason: "tool_use", usage: { input_tokens: 10, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 5 } })
        })
        const first = yield* raw(post({ model: "claude-x", max_tokens: 1_000, system, tools, messages: history }))
        expect((first.body as { content: Array<Block> }).content).toEqual([reply[1]])
        upstream.enqueue(ModelApi.answer("anthropic-messages", "Listed.", usage))
        const u: Message = { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_ls", content: "a.ts" }] }
        expect((yield* raw(post({ model: "claude-x", max_tokens: 1_000, system, tools, messages: [...history, { role: "assistant", content: [reply[1]!] }, u] }))).status).toBe(200)
        const next = JSON.parse(upstream.requests[1]!.body) as Body
        expect(next.messages.at(-2)).toEqual({ role: "assistant", content: reply })
        const read = next.messages.at(-1)!.content[0]!
        expect(read).toMatchObject({ type: "tool_result", tool_use_id: "toolu_rb", is_error: true })
        expect(String(read.content)).toContain("do not fit in this model's context window")
        expect(String(read.content)).not.toContain(big.slice(0, 2_000))
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 120_000)

  for (const streamed of [true, false]) {
    it.live(`${streamed ? "streamed" : "whole"}: a hidden round, then a continuation with a read beside the agent's call: the agent's blocks numbered on, the next request extends the continuation`, () =>
      Effect.scoped(Effect.gen(function*() {
        const upstream = yield* ModelApi.start
        const serve = yield* gateway(upstream, "SQLite")
        const request = (messages: ReadonlyArray<Message>) => ({ model: "claude-x", max_tokens: 100, stream: streamed, system, tools, messages: marked(messages) })
        const prompt: Message = { role: "user", content: [text("grep the values")] }
        const a1: Message = { role: "assistant", content: [use("toolu_1", "Bash", { command: "grep -rn value src" })] }
        const u1: Message = { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: output }] }
        const a2: Message = { role: "assistant", content: [text("Grepped.")] }
        const ask: Message = { role: "user", content: [text("what did it print? then list the files")] }
        const whole = (id: string, content: ReadonlyArray<unknown>): ModelApi.Reply => ({
          status: 200,
          contentType: "application/json",
          body: JSON.stringify({ id, type: "message", role: "assistant", model: "m", content, stop_reason: "tool_use", stop_sequence: null, usage: { input_tokens: 10, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 5 } })
        })
        const read1 = { id: "toolu_r1", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_1" }) }
        const read2 = { id: "toolu_r2", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_1", offset: 10 }) }
        const bash = { id: "toolu_2", name: "Bash", arguments: JSON.stringify({ command: "ls" }) }
        const hop1 = [text("Let me look."), use("toolu_r1", "thread_read", { refs: "tool:toolu_1" })]
        const hop2 = [text("Now the files."), use("toolu_r2", "thread_read", { refs: "tool:toolu_1", offset: 10 }), use("toolu_2", "Bash", { command: "ls" })]
        yield* serve(Effect.gen(function*() {
          upstream.enqueue(ModelApi.answer("anthropic-messages", "Grepped.", usage))
          expect((yield* raw(post(request([prompt, a1, u1])))).status).toBe(200)
          upstream.enqueue(
            streamed ? ModelApi.answer("anthropic-messages", "Let me look.", usage, [read1]) : whole("msg_h1", hop1),
            streamed ? ModelApi.answer("anthropic-messages", "Now the files.", usage, [read2, bash]) : whole("msg_h2", hop2)
          )
          const answer = yield* raw(post(request([prompt, a1, u1, a2, ask])))
          expect(answer.status).toBe(200)
          expect(upstream.requests.length).toBe(3)
          expect(answer.text).not.toContain("thread_read")
          const got = received(answer, streamed)
          // Streamed and whole alike: the text before the hidden call, then the continuation's blocks (before branch
          // b47gw a whole answer was the last answer alone).
          expect(got.content).toEqual([text("Let me look."), text("Now the files."), use("toolu_2", "Bash", { command: "ls" })])
          expect(got.stopReason).toBe("tool_use")

          const continuation = JSON.parse(upstream.requests[2]!.body) as Body
          upstream.enqueue(ModelApi.answer("anthropic-messages", "Done.", usage))
          const u2: Message = { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_2", content: "a.ts" }] }
          expect((yield* raw(post(request([prompt, a1, u1, a2, ask, { role: "assistant", content: got.content }, u2])))).status).toBe(200)
          const next = JSON.parse(upstream.requests[3]!.body) as Body
          expect(unmarked(next).slice(0, continuation.messages.length)).toEqual(unmarked(continuation))
          expect(next.messages.slice(continuation.messages.length - 2).map((m) => m.content.map((b) => b.type === "tool_result" ? ["tool_result", b.tool_use_id] : b))).toEqual([
            hop1,
            [["tool_result", "toolu_r1"]],
            hop2,
            [["tool_result", "toolu_r2"], ["tool_result", "toolu_2"]]
          ])
          const api = yield* client()
          const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
          const items = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
          expect(items.filter((i) => i.kind === "tool_call").map((i) => i.toolCallId)).toEqual(["toolu_1", "toolu_2"])
        }))
      })), 120_000)
  }
})
