/**
 * The gateway's tool-result offload on the way out (issue 14 item 3, docs/gateway.md "On the way out"), against a
 * loopback Anthropic upstream that records the bodies: a long tool-using conversation whose results (about 25,000
 * characters each) are stubbed at flushes and stay stubbed, each request extending the previous one except at the
 * reported flushes, the agent's newest message sent byte for byte, `thread_read` offered; with the instance's
 * `toolResultOffload` off, every body goes out as the agent sent it; a continuation after a hidden `thread_read` that
 * answers 2xx without a stream ends the agent's stream with an `error` event.
 */
import { describe, expect, it } from "@effect/vitest"
import { HttpClientRequest } from "@effect/platform"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { adminToken, client, get, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"
import * as Gateway from "../src/Gateway.js"
import { TokenCounter } from "@baton/context"

const usage = { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }
const tools = [{ name: "Bash", description: "Runs a command.", input_schema: { type: "object", properties: { command: { type: "string" } } } }]
const system = [{ type: "text", text: "You are a coding agent." }]

type Message = { role: string; content: Array<Record<string, unknown>> }
type StreamEvent = { type: string; index?: number; content_block: { type: string }; delta: { type: string; text?: string } }
type Body = { messages: Array<Message>; tools: Array<{ name: string }>; system: unknown }

/** About 25,000 characters of tool output (text the tokenizer counts like real output: about 4 characters a token). */
const output = (round: number) =>
  Array.from({ length: 420 }, (_, line) => `src/module${round}/file${line}.ts:${line * 7 + round}: export const value${line} = compute(${line}, "r${round}")`).join("\n")

/** The history with the agent's breakpoint on its newest message only (as Claude Code moves it). */
const withBreakpoint = (history: ReadonlyArray<Message>): Array<Message> =>
  history.map((m, i) =>
    i === history.length - 1
      ? { ...m, content: m.content.map((b, j) => (j === m.content.length - 1 ? { ...b, cache_control: { type: "ephemeral" } } : b)) }
      : m
  )

const post = (body: unknown) =>
  HttpClientRequest.post("/v1/messages?beta=true").pipe(
    HttpClientRequest.setHeaders({ "anthropic-version": "2023-06-01", "x-api-key": adminToken, "x-claude-code-session-id": "session-o" }),
    HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
  )

/** Plays `rounds` tool rounds through the gateway (each a Bash call answered with `output`), then a last answer; the agent's bodies. */
const converse = (upstream: ModelApi.ModelApi, rounds: number) =>
  Effect.gen(function*() {
    const history: Array<Message> = [{ role: "user", content: [{ type: "text", text: "explore the repository" }] }]
    const sent: Array<string> = []
    for (let round = 1; round <= rounds + 1; round++) {
      const calls = round <= rounds ? [{ id: `toolu_${round}`, name: "Bash", arguments: JSON.stringify({ command: `grep -rn value src/module${round}` }) }] : []
      upstream.enqueue(ModelApi.answer("anthropic-messages", round <= rounds ? "" : "Done.", usage, calls))
      const body = { model: "claude-x", max_tokens: 100, stream: true, system, tools, messages: withBreakpoint(history) }
      sent.push(JSON.stringify(body))
      const answer = yield* raw(post(body))
      expect(answer.status).toBe(200)
      if (round > rounds) break
      history.push({ role: "assistant", content: [{ type: "tool_use", id: `toolu_${round}`, name: "Bash", input: { command: `grep -rn value src/module${round}` } }] })
      history.push({ role: "user", content: [{ type: "tool_result", tool_use_id: `toolu_${round}`, content: output(round) }] })
    }
    return sent
  })

/** The messages of a body without the agent's breakpoints (they move with the newest message). */
const unmarked = (body: Body) =>
  body.messages.map((m) => JSON.stringify({ ...m, content: m.content.map(({ cache_control: _, ...b }) => b) }))

describe("Gateway tool-result offload", () => {
  it.live("stubs consumed results at flushes and keeps them stubbed; each request extends the previous one except at the reported flushes; the newest message goes out unchanged", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
      })
      yield* Effect.gen(function*() {
        const rounds = 30
        const sent = yield* converse(upstream, rounds)
        expect(upstream.requests.length).toBe(rounds + 1)
        const bodies = upstream.requests.map((r) => JSON.parse(r.body) as Body)

        // thread_read offered on every request, after the agent's tools; system and tools the same bytes throughout.
        for (const b of bodies) expect(b.tools.map((t) => t.name)).toEqual(["Bash", "thread_read"])
        expect(new Set(bodies.map((b) => JSON.stringify([b.system, b.tools]))).size).toBe(1)

        // The agent's newest message goes out byte for byte.
        sent.forEach((s, i) => {
          const newest = (JSON.parse(s) as Body).messages.at(-1)!
          expect(upstream.requests[i]!.body).toContain(JSON.stringify(newest))
          expect(bodies[i]!.messages.at(-1)).toEqual(newest)
        })

        // Flushes: the runs with a gateway.offloaded event.
        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: { limit: 100 } })).runs
        expect(runs.length).toBe(rounds + 1)
        const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
        const flushes = events.filter((e) => e.type === "gateway.offloaded").map((e) => e.payload as { runId: string; refs: Array<string>; tier: string; tokensBefore: number; tokensAfter: number })
        expect(flushes.length).toBeGreaterThanOrEqual(2)
        const flushAt = new Set(flushes.map((f) => runs.findIndex((r) => r.id === f.runId)))
        for (const f of flushes) expect(f.tokensAfter).toBeLessThan(f.tokensBefore)

        // Each request extends the previous one's messages, except at a reported flush (and only there).
        const breaks: Array<number> = []
        for (let i = 1; i < bodies.length; i++) {
          const previous = unmarked(bodies[i - 1]!)
          const next = unmarked(bodies[i]!)
          if (!previous.every((m, k) => next[k] === m)) breaks.push(i)
        }
        expect(breaks).toEqual([...flushAt].sort((a, b) => a - b))

        // A stubbed result stays stubbed, with its ref; what is stubbed is what the events reported.
        const stubbed = (b: Body) =>
          b.messages.flatMap((m) => m.content.filter((c) => c.type === "tool_result" && String(c.content).startsWith("[offloaded, thread_read tool:")).map((c) => String(c.tool_use_id)))
        const reported: Array<string> = []
        for (let i = 0; i < bodies.length; i++) {
          reported.push(...flushes.filter((f) => runs.findIndex((r) => r.id === f.runId) === i).flatMap((f) => f.refs.map((r) => r.slice("tool:".length))))
          expect(stubbed(bodies[i]!)).toEqual(reported)
        }
        const last = bodies.at(-1)!
        const stub = last.messages[2]!.content[0]!
        expect(stub).toEqual({ type: "tool_result", tool_use_id: "toolu_1", content: `[offloaded, thread_read tool:toolu_1]\nBash grep -rn value src/module1: ${output(1).length.toLocaleString("en-US")} chars` })
        // The last request is well under the agent's.
        expect(upstream.requests.at(-1)!.body.length).toBeLessThan(sent.at(-1)!.length / 2)
        // The thread holds the originals.
        const items = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
        expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === "toolu_1").map((i) => i.text)).toEqual([output(1)])

        // Visible (item 6): each request's usage as the upstream reported it (`gateway.usage`) and its cost on the
        // runs' pages; the dashboard's fold charts each request against the instance's window, marks each flush
        // after the run before the request it rewrote, and knows every stubbed ref.
        const usages = events.filter((e) => e.type === "gateway.usage").map((e) => e.payload as Record<string, unknown>)
        expect(usages.map((u) => u["runId"])).toEqual(runs.map((r) => r.id))
        for (const u of usages) {
          expect(u).toMatchObject({ providerInstance: "anthropic", inputTokens: 10, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 5, windowTokens: 200_000 })
        }
        const page = yield* api.runs.list({ path: { threadId }, urlParams: { limit: 100 } })
        expect(page.costs.map((c) => c.runId)).toEqual(runs.map((r) => r.id))
        expect(page.costs.every((c) => c.inputTokens === 10 && c.outputTokens === 5)).toBe(true)
        const timeline = yield* api.events.timeline({ path: { threadId } })
        expect(timeline.nativeThreads).toEqual(["gateway:anthropic"])
        expect(timeline.points.runIds).toEqual(runs.map((r) => r.id))
        expect(timeline.points.runSeqs).toEqual(runs.map((r) => r.seq))
        expect(new Set(timeline.points.usedTokens)).toEqual(new Set([10]))
        expect(new Set(timeline.points.maxTokens)).toEqual(new Set([200_000]))
        expect(timeline.marks.map((m) => [m.kind, m.runSeq])).toEqual(
          flushes.map((f) => ["tool results offloaded", runs.find((r) => r.id === f.runId)!.seq - 1])
        )
        expect([...timeline.stubbed].sort()).toEqual([...reported].sort())
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 120_000)

  it.live("a thread_read answer that would take the continuation over the instance's window is refused to the model, never sent (review finding: continuations were unchecked)", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      // A 20,000-token window; the agent's request (one ~8,000-token result) fits, the same result read back does not.
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream, { contextWindow: 20_000, autoCompactThreshold: null, maxOutputTokens: 2_000 })], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
      })
      yield* Effect.gen(function*() {
        const whole = (id: string, content: ReadonlyArray<unknown>) => ({
          status: 200,
          contentType: "application/json",
          body: JSON.stringify({ id, type: "message", role: "assistant", model: "m", content, stop_reason: "end_turn", usage: { input_tokens: 10, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 5 } })
        })
        const big = output(1) + "\n" + output(2).slice(0, 8_000)
        const history = [
          { role: "user", content: [{ type: "text", text: "grep it" }] },
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_big", name: "Bash", input: { command: "grep -rn value src" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_big", content: big }] },
          { role: "assistant", content: [{ type: "text", text: "Found them." }] },
          { role: "user", content: [{ type: "text", text: "and the first line again?" }] }
        ]
        upstream.enqueue(
          whole("msg_r1", [{ type: "tool_use", id: "toolu_read_big", name: "thread_read", input: { refs: "tool:toolu_big", limit: 32_000 } }]),
          whole("msg_r2", [{ type: "text", text: "I cannot read it all again." }])
        )
        const answer = yield* raw(post({ model: "claude-x", max_tokens: 1_000, system, tools, messages: history }))
        expect(answer.status).toBe(200)
        expect(answer.body).toMatchObject({ content: [{ type: "text", text: "I cannot read it all again." }] })
        expect(upstream.requests.length).toBe(2)
        const continuation = JSON.parse(upstream.requests[1]!.body) as Body
        const read = continuation.messages.at(-1)!.content[0]!
        expect(read).toMatchObject({ type: "tool_result", tool_use_id: "toolu_read_big", is_error: true })
        expect(String(read.content)).toContain("thread_read: not read: its")
        expect(String(read.content)).toContain("do not fit in this model's context window")
        // What went out stays under the window's fit: window less the output room and 5%, in Baton's count.
        const counter = TokenCounter.make()
        expect(counter.count(upstream.requests[1]!.body)).toBeLessThanOrEqual(Gateway.fitLimit(20_000, 2_000, { max_tokens: 1_000 }))
        // Without the check the original would have gone out again, over the window.
        expect(counter.count(upstream.requests[1]!.body) + counter.count(big)).toBeGreaterThan(20_000)
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 120_000)

  it.live("a thread_read call of the upstream (whole answers) is answered by the gateway with the original; the agent gets the round's text and the answer after it", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
      })
      yield* Effect.gen(function*() {
        const sent = yield* converse(upstream, 12)
        const before = upstream.requests.length
        const agentBody = JSON.parse(sent.at(-1)!) as Body
        const history = [...agentBody.messages, { role: "assistant", content: [{ type: "text", text: "Done." }] }, { role: "user", content: [{ type: "text", text: "what did the first grep print?" }] }]
        const whole = (content: ReadonlyArray<unknown>, u: Record<string, number>) => ({
          status: 200,
          contentType: "application/json",
          body: JSON.stringify({ id: `msg_w${before}_${content.length}`, type: "message", role: "assistant", model: "m", content, stop_reason: "end_turn", usage: u })
        })
        upstream.enqueue(
          whole([{ type: "text", text: "Let me look." }, { type: "tool_use", id: "toolu_read1", name: "thread_read", input: { refs: "tool:toolu_1" } }], { input_tokens: 100, cache_creation_input_tokens: 10, cache_read_input_tokens: 1000, output_tokens: 20 }),
          whole([{ type: "text", text: "It printed the values of module 1." }], { input_tokens: 50, cache_creation_input_tokens: 5, cache_read_input_tokens: 1100, output_tokens: 10 })
        )
        const sentBody = { model: "claude-x", max_tokens: 100, system, tools, messages: history }
        const answer = yield* raw(post(sentBody))
        expect(answer.status).toBe(200)
        // The agent sees the round's text, then the answer after the read (the read call never; before branch b47gw
        // the round's text was lost).
        expect(answer.body).toMatchObject({ content: [{ type: "text", text: "Let me look." }, { type: "text", text: "It printed the values of module 1." }] })
        expect(upstream.requests.length).toBe(before + 2)
        const first = JSON.parse(upstream.requests[before]!.body) as Body
        const second = JSON.parse(upstream.requests[before + 1]!.body) as Body
        // The continuation extends the request just sent with the call and the gateway's answer: the original output.
        // (the agent's breakpoint moved to the continuation's last block).
        expect(unmarked(second).slice(0, first.messages.length)).toEqual(unmarked(first))
        expect(second.messages.at(-2)).toEqual({ role: "assistant", content: [{ type: "text", text: "Let me look." }, { type: "tool_use", id: "toolu_read1", name: "thread_read", input: { refs: "tool:toolu_1" } }] })
        const read = second.messages.at(-1)!.content[0]!
        expect(read).toMatchObject({ type: "tool_result", tool_use_id: "toolu_read1" })
        expect(read.is_error).toBeUndefined()
        expect(String(read.content)).toContain(output(1).slice(0, 2_000))
        // The run's usage is both hops'.
        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: { limit: 100 } })).runs
        const view = yield* api.runs.get({ path: { runId: runs.at(-1)!.id }, urlParams: {} })
        expect(view.cost).toMatchObject({ inputTokens: 150, cacheWriteTokens: 15, cacheReadTokens: 2100, outputTokens: 30 })
        // The dashboard's point is what the last request carried (50 + 5 + 1,100), not both hops' sum (review finding:
        // the chart showed about twice the request, and could go over the window).
        const usage = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
          .filter((e) => e.type === "gateway.usage").map((e) => e.payload as Record<string, unknown>).find((u) => u["runId"] === runs.at(-1)!.id)
        expect(usage).toMatchObject({ inputTokens: 150, cacheWriteTokens: 15, cacheReadTokens: 2100, carriedTokens: 1155 })
        const timeline = yield* api.events.timeline({ path: { threadId } })
        expect(timeline.points.usedTokens[timeline.points.runIds.indexOf(runs.at(-1)!.id)]).toBe(1155)
        // The snapshot's fill of the conversation (the dashboard's thread list) is that request too (review r31: the
        // list showed the run's cost, both hops' 2,265).
        expect((yield* api.threads.get({ path: { threadId } })).gatewayRequest).toMatchObject({ runId: runs.at(-1)!.id, promptTokens: 1155 })

        // The agent's next request extends the continuation: the hidden round goes out again in place of the answer.
        upstream.enqueue(whole([{ type: "text", text: "Anything else?" }], { input_tokens: 1, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 1 }))
        const final = (answer.body as { content: Array<Record<string, unknown>> }).content
        expect((yield* raw(post({ ...sentBody, messages: [...history, { role: "assistant", content: final }, { role: "user", content: [{ type: "text", text: "thanks" }] }] }))).status).toBe(200)
        const third = JSON.parse(upstream.requests[before + 2]!.body) as Body
        // The same messages but for the breakpoint: the continuation carried the agent's on its last block (so the
        // upstream cached the hidden round), the agent's next request carries it where the agent put it.
        expect(unmarked(third).slice(0, second.messages.length)).toEqual(unmarked(second))
        expect(second.messages.flatMap((m) => m.content.filter((b) => b.cache_control !== undefined))).toEqual([second.messages.at(-1)!.content.at(-1)])
        expect(second.messages.at(-1)!.content.at(-1)!.cache_control).toEqual({ type: "ephemeral" })
        // In place of what the agent received (the round's text and the answer): the hidden round, then the answer as
        // the upstream sent it.
        expect(third.messages.slice(second.messages.length)).toEqual([
          { role: "assistant", content: [{ type: "text", text: "It printed the values of module 1." }] },
          { role: "user", content: [{ type: "text", text: "thanks" }] }
        ])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 120_000)

  it.live("the hidden round goes out again when the agent re-sends the answer without its thinking (Claude Code on a new prompt)", () =>
    // Found by reading (h14r): the rounds were keyed by the fingerprint of the message the agent received, which
    // Claude Code re-renders without earlier turns' thinking blocks once a new prompt follows; the round was then not
    // sent in its place and the upstream's prefix broke there. Keyed by the message's content print now.
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-x*", provider: "anthropic" }] }
      })
      yield* Effect.gen(function*() {
        const sent = yield* converse(upstream, 12)
        const before = upstream.requests.length
        const agentBody = JSON.parse(sent.at(-1)!) as Body
        const history = [...agentBody.messages, { role: "assistant", content: [{ type: "text", text: "Done." }] }, { role: "user", content: [{ type: "text", text: "what did the first grep print?" }] }]
        const whole = (content: ReadonlyArray<unknown>) => ({
          status: 200,
          contentType: "application/json",
          body: JSON.stringify({ id: `msg_t${before}_${content.length}`, type: "message", role: "assistant", model: "m", content, stop_reason: "end_turn", usage: { input_tokens: 10, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 5 } })
        })
        const thinking = { type: "thinking", thinking: "The first grep was module 1.", signature: "c2lnbmF0dXJl" }
        upstream.enqueue(
          whole([thinking, { type: "tool_use", id: "toolu_read9", name: "thread_read", input: { refs: "tool:toolu_1" } }]),
          whole([{ ...thinking, thinking: "I have it." }, { type: "text", text: "It printed the values of module 1." }])
        )
        const sentBody = { model: "claude-x", max_tokens: 100, system, tools, messages: history }
        const answer = yield* raw(post(sentBody))
        expect(answer.status).toBe(200)
        const final = (answer.body as { content: Array<Record<string, unknown>> }).content
        // The hidden round's thinking too, as a stream passes it on (before branch b47gw a whole answer lost it).
        expect(final.map((b) => b.type)).toEqual(["thinking", "thinking", "text"])
        const second = JSON.parse(upstream.requests[before + 1]!.body) as Body

        // A new prompt: the agent re-sends the answer without its thinking block.
        upstream.enqueue(whole([{ type: "text", text: "You are welcome." }]))
        const rerendered = { role: "assistant", content: final.filter((b) => b.type !== "thinking") }
        expect((yield* raw(post({ ...sentBody, messages: [...history, rerendered, { role: "user", content: [{ type: "text", text: "thanks" }] }] }))).status).toBe(200)
        const third = JSON.parse(upstream.requests[before + 2]!.body) as Body
        // The hidden round (the read call and its answer) and the continuation's answer go out in the received
        // message's place: the request extends the continuation.
        expect(unmarked(third).slice(0, second.messages.length)).toEqual(unmarked(second))
        expect(third.messages.slice(second.messages.length).map((m) => m.role)).toEqual(["assistant", "user"])
        expect(third.messages.at(-1)).toMatchObject({ role: "user", content: [{ type: "text", text: "thanks" }] })
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 120_000)

  it.live("a streamed thread_read call is held back from the thread_read block on, answered, and the continuation's blocks join the agent's message", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
      })
      yield* Effect.gen(function*() {
        const sent = yield* converse(upstream, 12)
        const before = upstream.requests.length
        const agentBody = JSON.parse(sent.at(-1)!) as Body
        const history = [...agentBody.messages, { role: "assistant", content: [{ type: "text", text: "Done." }] }, { role: "user", content: [{ type: "text", text: "what did the first grep print?" }] }]
        upstream.enqueue(
          ModelApi.answer("anthropic-messages", "Let me look.", { input: 100, cacheWrite: 10, cacheRead: 1000, output: 20 }, [{ id: "toolu_read2", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_1" }) }]),
          ModelApi.answer("anthropic-messages", "It printed module 1's values.", { input: 50, cacheWrite: 5, cacheRead: 1100, output: 10 }, [{ id: "toolu_next", name: "Bash", arguments: JSON.stringify({ command: "ls" }) }])
        )
        const answer = yield* raw(post({ model: "claude-x", max_tokens: 100, stream: true, system, tools, messages: history }))
        expect(answer.status).toBe(200)
        const events = answer.text.split("\n\n").filter((e) => e.trim() !== "").map((e) => JSON.parse(e.split("\n").find((l) => l.startsWith("data: "))!.slice(6)) as StreamEvent)
        // One message: one message_start, the text before the hidden call, then the continuation's blocks from index 1.
        expect(events.filter((e) => e.type === "message_start").length).toBe(1)
        expect(events.filter((e) => e.type === "message_stop").length).toBe(1)
        expect(JSON.stringify(events)).not.toContain("thread_read")
        expect(events.filter((e) => e.type === "content_block_start").map((e) => [e.index, e.content_block.type])).toEqual([[0, "text"], [1, "text"], [2, "tool_use"]])
        expect(events.filter((e) => e.type === "content_block_delta" && e.delta.type === "text_delta").map((e) => e.delta.text)).toEqual(["Let me look.", "It printed module 1's values."])
        // The upstream got the gateway's answer: the original output.
        expect(upstream.requests.length).toBe(before + 2)
        const second = JSON.parse(upstream.requests[before + 1]!.body) as Body
        expect(String(second.messages.at(-1)!.content[0]!.content)).toContain(output(1).slice(0, 2_000))
        // The thread records what the agent saw, and both hops' usage.
        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: { limit: 100 } })).runs
        expect(runs.at(-1)!.status).toBe("completed")
        const view = yield* api.runs.get({ path: { runId: runs.at(-1)!.id }, urlParams: {} })
        expect(view.cost).toMatchObject({ inputTokens: 150, cacheWriteTokens: 15, cacheReadTokens: 2100, outputTokens: 30 })
        const items = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
        expect(items.filter((i) => i.kind === "tool_call").map((i) => i.toolCallId)).not.toContain("toolu_read2")
        expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === "toolu_next").length).toBe(1)

        // The agent's next request (it echoes the message it received) extends the continuation request.
        upstream.enqueue(ModelApi.answer("anthropic-messages", "Fine.", usage))
        const echoed = { role: "assistant", content: [{ type: "text", text: "Let me look." }, { type: "text", text: "It printed module 1's values." }, { type: "tool_use", id: "toolu_next", name: "Bash", input: { command: "ls" } }] }
        const result = { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_next", content: "a b c" }] }
        expect((yield* raw(post({ model: "claude-x", max_tokens: 100, stream: true, system, tools, messages: [...history, echoed, result] }))).status).toBe(200)
        const third = JSON.parse(upstream.requests[before + 2]!.body) as Body
        // The same messages but for the breakpoint: the continuation carried the agent's on its last block (so the
        // upstream cached the hidden round), the agent's next request carries it where the agent put it.
        expect(unmarked(third).slice(0, second.messages.length)).toEqual(unmarked(second))
        expect(second.messages.flatMap((m) => m.content.filter((b) => b.cache_control !== undefined))).toEqual([second.messages.at(-1)!.content.at(-1)])
        expect(second.messages.at(-1)!.content.at(-1)!.cache_control).toEqual({ type: "ephemeral" })
        expect(third.messages.slice(second.messages.length)).toEqual([
          { role: "assistant", content: [{ type: "text", text: "It printed module 1's values." }, { type: "tool_use", id: "toolu_next", name: "Bash", input: { command: "ls" } }] },
          result
        ])
        const recorded = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
        expect(recorded.filter((e) => e.type === "gateway.diverged")).toEqual([])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 120_000)

  it.live("a streamed reply with thread_read beside a call of the agent's own tool reaches the agent without the read (GatewayOffloadBeside.test.ts); one without calls passes as sent", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
      })
      yield* Effect.gen(function*() {
        const mixed = ModelApi.answer("anthropic-messages", "Both.", usage, [
          { id: "toolu_a", name: "Bash", arguments: JSON.stringify({ command: "ls" }) },
          { id: "toolu_b", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_x" }) }
        ])
        const plain = ModelApi.answer("anthropic-messages", "Plain.", usage)
        upstream.enqueue(mixed, plain)
        const messages = [{ role: "user", content: [{ type: "text", text: "go" }] }]
        const first = yield* raw(post({ model: "claude-x", max_tokens: 100, stream: true, system, tools, messages }))
        // The events before the read pass as sent; the read's events are left out, the agent's call numbered on.
        expect(first.text).not.toContain("thread_read")
        const events = first.text.split("\n\n").filter((e) => e.trim() !== "").map((e) => JSON.parse(e.split("\n").find((l) => l.startsWith("data: "))!.slice(6)) as StreamEvent)
        expect(events.filter((e) => e.type === "content_block_start").map((e) => [e.index, e.content_block.type])).toEqual([[0, "text"], [1, "tool_use"]])
        expect(events.map((e) => e.type)).toEqual(["message_start", ...Array.from({ length: 2 }, () => ["content_block_start", "content_block_delta", "content_block_stop"]).flat(), "message_delta", "message_stop"])
        expect(first.text.startsWith(mixed.body.split("\n\n").slice(0, 4).join("\n\n"))).toBe(true)
        const second = yield* raw(post({ model: "claude-x", max_tokens: 100, stream: true, system, tools, messages: [{ role: "user", content: [{ type: "text", text: "again" }] }] }))
        expect(second.text).toBe(plain.body)
        expect(upstream.requests.length).toBe(2)
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 120_000)

  it.live("a restarted gateway sends the same stubs: the next request extends the last one sent before the restart", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-gateway-offload-restart-"))
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, dir, {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
      })
      const sent = yield* converse(upstream, 14).pipe(Effect.provide(serveSettings(settings)))
      const before = JSON.parse(upstream.requests.at(-1)!.body) as Body
      expect(JSON.stringify(before)).toContain("[offloaded, thread_read tool:toolu_1]")
      yield* Effect.gen(function*() {
        const agent = JSON.parse(sent.at(-1)!) as Body
        upstream.enqueue(ModelApi.answer("anthropic-messages", "Sure.", usage))
        const messages = withBreakpoint([...agent.messages, { role: "assistant", content: [{ type: "text", text: "Done." }] }, { role: "user", content: [{ type: "text", text: "and now?" }] }])
        expect((yield* raw(post({ model: "claude-x", max_tokens: 100, stream: true, system, tools, messages }))).status).toBe(200)
        const after = JSON.parse(upstream.requests.at(-1)!.body) as Body
        expect(unmarked(after).slice(0, before.messages.length)).toEqual(unmarked(before))
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 120_000)

  it.live("with the instance's toolResultOffload off, every body goes out as the agent sent it", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream, { toolResultOffload: false })], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
      })
      yield* Effect.gen(function*() {
        const sent = yield* converse(upstream, 12)
        expect(upstream.requests.map((r) => r.body)).toEqual(sent)
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 120_000)

  it.live("a continuation refused with a pretty-printed JSON body ends the agent's stream with one well-formed error event (its body compact, one data line); the run fails overflow", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
      })
      yield* Effect.gen(function*() {
        const refusal = { type: "error", error: { type: "invalid_request_error", message: "prompt is too long: 210000 tokens > 200000 maximum" } }
        upstream.enqueue(
          ModelApi.answer("anthropic-messages", "Let me look.", usage, [{ id: "toolu_read", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_1" }) }]),
          { status: 400, contentType: "application/json", body: JSON.stringify(refusal, null, 2) }
        )
        const messages = [
          { role: "user", content: "list the files" },
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "Bash", input: { command: "ls" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "a.ts" }] },
          { role: "assistant", content: [{ type: "text", text: "One file." }] },
          { role: "user", content: "what did ls print?" }
        ]
        const answer = yield* raw(post({ model: "claude-x", max_tokens: 100, stream: true, system, tools, messages }))
        expect(answer.status).toBe(200)
        // Every event is an `event:` line and one `data:` line of JSON (a body with line breaks written as it came
        // would put its lines outside the data field: the agent's SSE parser would drop or misread them).
        const blocks = answer.text.split("\n\n").filter((e) => e.trim() !== "")
        for (const block of blocks) expect(block.split("\n").map((l) => l.slice(0, l.indexOf(":")))).toEqual(["event", "data"])
        const events = blocks.map((e) => JSON.parse(e.split("\n")[1]!.slice(6)) as StreamEvent)
        expect(events.at(-1)).toEqual(refusal)
        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        expect((yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs.map((r) => [r.status, r.failureCode])).toEqual([["failed", "overflow"]])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 60_000 })

  it.live("a continuation that answers 2xx but not a stream (a JSON or HTML body) ends the agent's message with an error event; the run fails", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
      })
      yield* Effect.gen(function*() {
        upstream.enqueue(
          ModelApi.answer("anthropic-messages", "Let me look.", usage, [{ id: "toolu_read", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_1" }) }]),
          { status: 200, contentType: "application/json", body: "<html>upstream proxy page</html>" }
        )
        const messages = [
          { role: "user", content: "list the files" },
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "Bash", input: { command: "ls" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "a.ts" }] },
          { role: "assistant", content: [{ type: "text", text: "One file." }] },
          { role: "user", content: "what did ls print?" }
        ]
        const answer = yield* raw(post({ model: "claude-x", max_tokens: 100, stream: true, system, tools, messages }))
        expect(answer.status).toBe(200)
        const events = answer.text.split("\n\n").filter((e) => e.trim() !== "").map((e) => JSON.parse(e.split("\n").find((l) => l.startsWith("data: "))!.slice(6)) as StreamEvent)
        expect(events.map((e) => e.type)).toEqual(["message_start", "content_block_start", "content_block_delta", "content_block_stop", "error"])
        expect(events.at(-1)).toEqual({ type: "error", error: { type: "api_error", message: "the upstream could not continue after thread_read (HTTP 200)" } })
        expect(upstream.requests).toHaveLength(2)
        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        expect((yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs.map((r) => r.status)).toEqual(["failed"])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 60_000 })
})
