/**
 * The gateway's tool-result offload on `POST /v1/chat/completions` (issue 14 item 3, docs/gateway.md "On the way
 * out"), against a loopback Chat Completions upstream that records the bodies and streams its answers as OpenAI does
 * (`chat.completion.chunk`s: a role delta, content deltas, each tool call's first delta with its id and name then its
 * argument fragments, the `finish_reason`, a usage chunk, `[DONE]`): a long pi-like conversation whose tool results
 * (about 25,000 characters each) are stubbed at flushes and stay stubbed, each request extending the previous one
 * except at the reported flushes, the agent's newest messages sent byte for byte, a result with an image never
 * stubbed, `thread_read` offered as a function; the upstream's `thread_read` calls (whole and streamed) answered by
 * the gateway with the original, never seen by the agent; continuations kept under the window; usage events.
 */
import { TokenCounter } from "@baton/context"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Gateway from "../src/Gateway.js"
import * as GatewayChat from "../src/GatewayChat.js"
import * as GatewayChatOffload from "../src/GatewayChatOffload.js"
import * as GatewayDialect from "../src/GatewayDialect.js"
import { adminToken, client, get, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"

type Message = Record<string, unknown>
type Body = { messages: Array<Message>; tools: Array<{ type: string; function: { name: string } }> }

const tools = [{ type: "function", function: { name: "bash", description: "Runs a command.", parameters: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } } }]
const system = { role: "system", content: "You are a coding agent." }
const user = (text: string) => ({ role: "user", content: [{ type: "text", text }] })

/** About 25,000 characters of tool output. */
const output = (round: number) =>
  Array.from({ length: 420 }, (_, line) => `src/module${round}/file${line}.ts:${line * 7 + round}: export const value${line} = compute(${line}, "r${round}")`).join("\n")

/** An image part (pi's tool results may carry one; OpenAI-compatible agents put it in the content). */
const image = { type: "image_url", image_url: { url: `data:image/png;base64,${"iVBORw0KGgo".repeat(2_000)}` } }

/** A tool call of an assistant message. */
const call = (id: string, name: string, args: object) => ({ id, type: "function", function: { name, arguments: JSON.stringify(args) } })

/** Billed tokens of an answer: uncached input, cached input, output. */
type Usage = { readonly input: number; readonly cached: number; readonly output: number }
const small: Usage = { input: 10, cached: 0, output: 5 }
const usageOf = (u: Usage) => ({ prompt_tokens: u.input + u.cached, completion_tokens: u.output, total_tokens: u.input + u.cached + u.output, prompt_tokens_details: { cached_tokens: u.cached } })

let completions = 0

/** A streamed Chat Completions answer as OpenAI frames it (see the module docblock). */
const streamed = (text: string | null, calls: ReadonlyArray<ReturnType<typeof call>>, usage: Usage): ModelApi.Reply => {
  const id = `chatcmpl-${++completions}`
  const chunk = (choice: Record<string, unknown> | null, extra: Record<string, unknown> = {}) =>
    `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created: 1_700_000_000 + completions, model: "gpt-x", choices: choice === null ? [] : [{ index: 0, logprobs: null, finish_reason: null, ...choice }], ...extra })}\n\n`
  const parts = [chunk({ delta: { role: "assistant", content: "", refusal: null } })]
  if (text !== null) for (const piece of text.match(/.{1,6}/gs) ?? []) parts.push(chunk({ delta: { content: piece } }))
  calls.forEach((c, index) => {
    parts.push(chunk({ delta: { tool_calls: [{ index, id: c.id, type: "function", function: { name: c.function.name, arguments: "" } }] } }))
    for (const piece of c.function.arguments.match(/.{1,10}/gs) ?? []) parts.push(chunk({ delta: { tool_calls: [{ index, function: { arguments: piece } }] } }))
  })
  parts.push(chunk({ delta: {}, finish_reason: calls.length > 0 ? "tool_calls" : "stop" }))
  parts.push(chunk(null, { usage: usageOf(usage) }))
  parts.push("data: [DONE]\n\n")
  return { status: 200, contentType: "text/event-stream", body: parts.join("") }
}

/** A whole (non-streamed) Chat Completions answer. */
const whole = (text: string | null, calls: ReadonlyArray<ReturnType<typeof call>>, usage: Usage): ModelApi.Reply => ({
  status: 200,
  contentType: "application/json",
  body: JSON.stringify({
    id: `chatcmpl-${++completions}`,
    object: "chat.completion",
    created: 1_700_000_000,
    model: "gpt-x",
    choices: [{
      index: 0,
      message: { role: "assistant", content: text, refusal: null, annotations: [], ...(calls.length > 0 ? { tool_calls: calls } : {}) },
      logprobs: null,
      finish_reason: calls.length > 0 ? "tool_calls" : "stop"
    }],
    usage: usageOf(usage)
  })
})

const post = (body: unknown) =>
  HttpClientRequest.post("/v1/chat/completions").pipe(
    HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "x-session-id": "pi-session-o" }),
    HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
  )

const requestOf = (messages: ReadonlyArray<unknown>, stream = true) => ({
  model: "gpt-x",
  ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  max_completion_tokens: 4_096,
  tools,
  messages
})

/** The data of a stream's chunks (`[DONE]` as the string). */
const chunksOf = (text: string) =>
  text.split("\n\n").filter((e) => e.trim() !== "").map((e) => {
    const data = e.split("\n").find((l) => l.startsWith("data: "))!.slice(6)
    return data === "[DONE]" ? "[DONE]" : JSON.parse(data) as Record<string, unknown>
  })

/** The assistant message an agent assembles from a stream's text (what pi would send back). */
const assembled = (text: string) => {
  const assembler = GatewayChat.replyAssembler()
  assembler.push(new TextEncoder().encode(text))
  const outcome = assembler.outcome()
  if (outcome._tag !== "completed") throw new Error(`the stream did not complete: ${JSON.stringify(outcome)}`)
  return outcome.reply.messages[0]!.message as Message
}

/** The content of round `round`'s result: a string, text parts (round 2) or text and an image (round 3). */
const resultContent = (round: number): unknown =>
  round === 2 ? [{ type: "text", text: output(round) }] : round === 3 ? [{ type: "text", text: output(round) }, image] : output(round)

/** Plays `rounds` tool rounds through the gateway (each a bash call answered with `output`), then a last answer; the agent's bodies and history. */
const converse = (upstream: ModelApi.ModelApi, rounds: number) =>
  Effect.gen(function*() {
    const history: Array<unknown> = [system, user("explore the repository")]
    const sent: Array<string> = []
    for (let round = 1; round <= rounds + 1; round++) {
      const calls = round <= rounds ? [call(`call_${round}`, "bash", { command: `grep -rn value src/module${round}` })] : []
      const text = round <= rounds ? null : "Done."
      upstream.enqueue(streamed(text, calls, small))
      const body = requestOf(history)
      sent.push(JSON.stringify(body))
      const answer = yield* raw(post(body))
      expect(answer.status).toBe(200)
      history.push(assembled(answer.text))
      if (round > rounds) break
      history.push({ role: "tool", tool_call_id: `call_${round}`, content: resultContent(round) })
    }
    return { sent, history }
  })

const gatewayOf = (upstream: ModelApi.ModelApi, extra: Record<string, unknown> = {}) =>
  settingsFor(
    [instance("chat", "openai-chat", upstream, { prices: { input: 1.25, cacheWrite: 0, cacheRead: 0.125, output: 10 }, ...extra })],
    { TEST_MODEL_KEY: marker },
    undefined,
    { gateway: { routes: [{ model: "gpt-*", provider: "chat" }] } }
  )

const onlyThread = Effect.gen(function*() {
  const api = yield* client()
  const threads = (yield* api.threads.list({ urlParams: {} })).threads
  expect(threads.length).toBe(1)
  const threadId = threads[0]!.id
  const runs = (yield* api.runs.list({ path: { threadId }, urlParams: { limit: 100 } })).runs
  const items = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
  const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
  return { api, threadId, runs, items, events }
})

const stubOf = (id: string, round: number) => `[offloaded, thread_read tool:${id}]\nbash grep -rn value src/module${round}: ${output(round).length.toLocaleString("en-US")} chars`

describe("Gateway tool-result offload on /v1/chat/completions", () => {
  it.live("stubs consumed results at flushes and keeps them stubbed (never one with an image); each request extends the previous one except at the reported flushes; the newest messages go out unchanged; usage events", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewayOf(upstream)
      yield* Effect.gen(function*() {
        const rounds = 30
        const { sent } = yield* converse(upstream, rounds)
        expect(upstream.requests.length).toBe(rounds + 1)
        const bodies = upstream.requests.map((r) => JSON.parse(r.body) as Body)

        // thread_read offered on every request as a function, after the agent's tools; the same tools every time.
        for (const b of bodies) {
          expect(b.tools.map((t) => t.function.name)).toEqual(["bash", "thread_read"])
          expect(b.tools[1]!.type).toBe("function")
        }
        expect(new Set(bodies.map((b) => JSON.stringify(b.tools))).size).toBe(1)
        // The system prompt goes out first, as sent.
        for (const b of bodies) expect(b.messages[0]).toEqual(system)

        // The agent's newest messages (after the last assistant message) go out byte for byte.
        sent.forEach((s, i) => {
          const agent = (JSON.parse(s) as Body).messages
          let lastModel = agent.length - 1
          while (lastModel >= 0 && agent[lastModel]!.role !== "assistant") lastModel--
          const newest = agent.slice(lastModel + 1)
          expect(newest.length).toBeGreaterThan(0)
          for (const m of newest) expect(upstream.requests[i]!.body).toContain(JSON.stringify(m))
          expect(bodies[i]!.messages.slice(-newest.length)).toEqual(newest)
        })

        // Flushes: the runs with a gateway.offloaded event.
        const { api, threadId, items, runs, events } = yield* onlyThread
        expect(runs.length).toBe(rounds + 1)
        const flushes = events.filter((e) => e.type === "gateway.offloaded").map((e) => e.payload as { runId: string; refs: Array<string>; tokensBefore: number; tokensAfter: number })
        expect(flushes.length).toBeGreaterThanOrEqual(2)
        const flushAt = flushes.map((f) => runs.findIndex((r) => r.id === f.runId))
        for (const f of flushes) expect(f.tokensAfter).toBeLessThan(f.tokensBefore)

        // Each request extends the previous one's messages, except at a reported flush (and only there).
        const breaks: Array<number> = []
        for (let i = 1; i < bodies.length; i++) {
          const previous = bodies[i - 1]!.messages.map((m) => JSON.stringify(m))
          const next = bodies[i]!.messages.map((m) => JSON.stringify(m))
          if (!previous.every((m, k) => next[k] === m)) breaks.push(i)
        }
        expect(breaks.length).toBeGreaterThan(0)
        expect(breaks).toEqual([...new Set(flushAt)].sort((a, b) => a - b))

        // A stubbed result stays stubbed, with its ref; what is stubbed is what the events reported.
        const stubbed = (b: Body) =>
          b.messages.filter((m) => m.role === "tool" && typeof m.content === "string" && m.content.startsWith("[offloaded, thread_read tool:")).map((m) => String(m.tool_call_id))
        const reported: Array<string> = []
        for (let i = 0; i < bodies.length; i++) {
          reported.push(...flushes.filter((f) => runs.findIndex((r) => r.id === f.runId) === i).flatMap((f) => f.refs.map((r) => r.slice("tool:".length))))
          expect(stubbed(bodies[i]!)).toEqual([...reported].sort((a, b) => Number(a.slice(5)) - Number(b.slice(5))))
        }
        const last = bodies.at(-1)!
        const resultOf = (id: string) => last.messages.find((m) => m.role === "tool" && m.tool_call_id === id)!
        // A string result and a result of text parts are both stubbed to the stub line; the calls stay as sent.
        expect(resultOf("call_1")).toEqual({ role: "tool", tool_call_id: "call_1", content: stubOf("call_1", 1) })
        expect(resultOf("call_2")).toEqual({ role: "tool", tool_call_id: "call_2", content: stubOf("call_2", 2) })
        expect(last.messages[2]).toEqual({ role: "assistant", content: null, tool_calls: [call("call_1", "bash", { command: "grep -rn value src/module1" })] })
        // The result with an image is never stubbed: the thread could not give the image back.
        expect(reported).not.toContain("call_3")
        expect(reported).toContain("call_4")
        expect(resultOf("call_3").content).toEqual(resultContent(3))
        expect(upstream.requests.at(-1)!.body.length).toBeLessThan(sent.at(-1)!.length / 2)
        // The thread holds the originals.
        expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === "call_1").map((i) => i.text)).toEqual([output(1)])

        // Visible: each request's usage as the upstream reported it (gateway.usage), on the routed instance.
        const usages = events.filter((e) => e.type === "gateway.usage").map((e) => e.payload as Record<string, unknown>)
        expect(usages.map((u) => u["runId"])).toEqual(runs.map((r) => r.id))
        for (const u of usages) {
          expect(u).toMatchObject({ providerInstance: "chat", inputTokens: 10, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 5, windowTokens: 200_000 })
        }
        const timeline = yield* api.events.timeline({ path: { threadId } })
        expect(timeline.marks.map((m) => [m.kind, m.runSeq])).toEqual(
          flushes.map((f) => ["tool results offloaded", runs.find((r) => r.id === f.runId)!.seq - 1])
        )
        expect([...timeline.stubbed].sort()).toEqual([...reported].sort())
        expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 180_000)

  it.live("a thread_read call of the upstream (whole answers) is answered with the exact original; the agent gets the round's text and the answer after it; its next request extends the continuation", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewayOf(upstream)
      yield* Effect.gen(function*() {
        // Six rounds: no flush on the next requests (each extends the one before).
        const { history } = yield* converse(upstream, 6)
        const before = upstream.requests.length
        const messages = [...history, user("what did the first grep print?")]
        const read = call("call_read1", "thread_read", { refs: "tool:call_1", limit: 32_000 })
        upstream.enqueue(whole("Let me look.", [read], { input: 100, cached: 1000, output: 20 }), whole("It printed the values of module 1.", [], { input: 50, cached: 1100, output: 10 }))
        const answer = yield* raw(post(requestOf(messages, false)))
        expect(answer.status).toBe(200)
        // The agent sees the round's text joined with the answer after the read, as a stream gives it (before branch
        // b47gw the round's text was lost).
        const received = (answer.body as { choices: Array<{ message: Message }> }).choices[0]!.message
        expect(received).toMatchObject({ role: "assistant", content: "Let me look.It printed the values of module 1." })
        expect(answer.text).not.toContain("thread_read")
        expect(upstream.requests.length).toBe(before + 2)
        const first = JSON.parse(upstream.requests[before]!.body) as Body
        const second = JSON.parse(upstream.requests[before + 1]!.body) as Body
        // The continuation extends the request just sent with the assistant message and the gateway's answer.
        expect(second.messages.slice(0, first.messages.length)).toEqual(first.messages)
        expect(second.messages.slice(first.messages.length, -1)).toEqual([{ role: "assistant", content: "Let me look.", tool_calls: [read] }])
        const answered = second.messages.at(-1)!
        expect(answered).toMatchObject({ role: "tool", tool_call_id: "call_read1" })
        // The exact original: the call and its output, rendered by thread_read.
        expect(String(answered.content)).toContain(output(1))

        // The run's usage is both hops'; gateway.usage says what the last request carried.
        const { api, runs, threadId } = yield* onlyThread
        const view = yield* api.runs.get({ path: { runId: runs.at(-1)!.id }, urlParams: {} })
        expect(view.cost).toMatchObject({ inputTokens: 150, cacheReadTokens: 2100, outputTokens: 30 })
        const usage = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
          .filter((e) => e.type === "gateway.usage").map((e) => e.payload as Record<string, unknown>).find((u) => u["runId"] === runs.at(-1)!.id)
        expect(usage).toMatchObject({ inputTokens: 150, cacheWriteTokens: 0, cacheReadTokens: 2100, outputTokens: 30, carriedTokens: 1150 })

        // The agent's next request extends the continuation: the hidden round goes out again in place of the answer.
        upstream.enqueue(whole("Anything else?", [], small))
        const echo = { role: "assistant", content: "Let me look.It printed the values of module 1." }
        expect((yield* raw(post(requestOf([...messages, echo, user("thanks")], false)))).status).toBe(200)
        const third = JSON.parse(upstream.requests[before + 2]!.body) as Body
        expect(third.messages.slice(0, second.messages.length)).toEqual(second.messages)
        expect(third.messages.slice(second.messages.length)).toEqual([{ role: "assistant", content: "It printed the values of module 1." }, user("thanks")])
        const { items, events } = yield* onlyThread
        expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
        expect(items.filter((i) => i.toolName === "thread_read")).toEqual([])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 180_000)

  it.live("a streamed thread_read call is held back from its first delta on, answered, and the continuation's chunks join the completion the agent receives (one id, one role, one finish, one [DONE])", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewayOf(upstream)
      yield* Effect.gen(function*() {
        // Six rounds: no flush on the next requests (each extends the one before).
        const { history } = yield* converse(upstream, 6)
        const before = upstream.requests.length
        const messages = [...history, user("what did the first grep print?")]
        const read = call("call_read2", "thread_read", { refs: "tool:call_1", limit: 32_000 })
        const next = call("call_next", "bash", { command: "ls" })
        upstream.enqueue(streamed("Let me look. ", [read], { input: 100, cached: 1000, output: 20 }), streamed("It printed module 1's values.", [next], { input: 50, cached: 1100, output: 10 }))
        const answer = yield* raw(post(requestOf(messages)))
        expect(answer.status).toBe(200)
        expect(answer.text).not.toContain("thread_read")
        const chunks = chunksOf(answer.text)
        const data = chunks.filter((c): c is Record<string, unknown> => c !== "[DONE]")
        // One completion: the first hop's id and created on every chunk, one role delta, one finish_reason, one usage
        // chunk (the last hop's), [DONE] once at the end.
        const firstId = data[0]!.id
        expect(String(firstId)).toMatch(/^chatcmpl-/)
        expect(new Set(data.map((c) => c.id))).toEqual(new Set([firstId]))
        expect(new Set(data.map((c) => c.created))).toEqual(new Set([data[0]!.created]))
        const deltas = data.flatMap((c) => (c.choices as Array<{ delta: Record<string, unknown>; finish_reason: unknown }>))
        expect(deltas.filter((d) => d.delta.role !== undefined).length).toBe(1)
        expect(deltas.filter((d) => d.finish_reason !== null).map((d) => d.finish_reason)).toEqual(["tool_calls"])
        expect(data.filter((c) => c.usage !== undefined).map((c) => c.usage)).toEqual([usageOf({ input: 50, cached: 1100, output: 10 })])
        expect(chunks.filter((c) => c === "[DONE]").length).toBe(1)
        expect(chunks.at(-1)).toBe("[DONE]")
        // What the agent assembles: the text before the hidden call, the continuation's text and its call at index 0.
        const received = assembled(answer.text)
        expect(received).toEqual({ role: "assistant", content: "Let me look. It printed module 1's values.", tool_calls: [next] })
        // The upstream got the gateway's answer: the original output.
        expect(upstream.requests.length).toBe(before + 2)
        const second = JSON.parse(upstream.requests[before + 1]!.body) as Body
        expect(second.messages.at(-2)).toEqual({ role: "assistant", content: "Let me look. ", tool_calls: [read] })
        expect(String(second.messages.at(-1)!.content)).toContain(output(1))

        const { api, runs, items } = yield* onlyThread
        expect(runs.at(-1)!.status).toBe("completed")
        const view = yield* api.runs.get({ path: { runId: runs.at(-1)!.id }, urlParams: {} })
        expect(view.cost).toMatchObject({ inputTokens: 150, cacheReadTokens: 2100, outputTokens: 30 })
        expect(items.filter((i) => i.kind === "tool_call").map((i) => i.toolCallId)).not.toContain("call_read2")
        expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === "call_next").length).toBe(1)

        // The agent's next request (it echoes the message it assembled) extends the continuation's request.
        upstream.enqueue(streamed("Fine.", [], small))
        const result = { role: "tool", tool_call_id: "call_next", content: "a b c" }
        expect((yield* raw(post(requestOf([...messages, received, result])))).status).toBe(200)
        const third = JSON.parse(upstream.requests[before + 2]!.body) as Body
        expect(third.messages.slice(0, second.messages.length)).toEqual(second.messages)
        expect(third.messages.slice(second.messages.length)).toEqual([{ role: "assistant", content: "It printed module 1's values.", tool_calls: [next] }, result])
        expect((yield* onlyThread).events.filter((e) => e.type === "gateway.diverged")).toEqual([])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 180_000)

  for (const stream of [true, false]) {
    it.live(`a reply with thread_read beside a call of the agent's own tool (${stream ? "streamed" : "whole"}): the gateway answers the read, the agent gets its call alone, its next request (after a restart) carries the call and the original`, () =>
      Effect.scoped(Effect.gen(function*() {
        const upstream = yield* ModelApi.start
        const settings = yield* gatewayOf(upstream)
        const { history } = yield* converse(upstream, 2).pipe(Effect.provide(serveSettings(settings)))
        const before = upstream.requests.length
        // The read first: the agent's call (index 1 upstream) reaches it as index 0.
        const read = call("call_b", "thread_read", { refs: "tool:call_1" })
        const own = call("call_a", "bash", { command: "ls" })
        const messages = [...history, user("read the first grep, then list the files")]
        const received = yield* Effect.gen(function*() {
          upstream.enqueue(stream ? streamed("Both.", [read, own], small) : whole("Both.", [read, own], small))
          const answer = yield* raw(post(requestOf(messages, stream)))
          expect(answer.status).toBe(200)
          expect(answer.text).not.toContain("thread_read")
          expect(answer.text).not.toContain("call_b")
          expect(upstream.requests.length).toBe(before + 1)
          if (!stream) {
            const body = answer.body as { choices: Array<{ message: Message; finish_reason: string }> }
            expect(body.choices[0]!.finish_reason).toBe("tool_calls")
            expect(body.choices[0]!.message).toEqual({ role: "assistant", content: "Both.", refusal: null, annotations: [], tool_calls: [own] })
            return body.choices[0]!.message
          }
          const chunks = chunksOf(answer.text)
          expect(chunks.filter((c) => c === "[DONE]").length).toBe(1)
          const indexes = chunks.flatMap((c) => (typeof c === "string" ? [] : (c.choices as Array<{ delta?: { tool_calls?: Array<{ index: number }> } }>).flatMap((ch) => ch.delta?.tool_calls ?? []).map((t) => t.index)))
          expect(new Set(indexes)).toEqual(new Set([0]))
          const message = assembled(answer.text)
          expect(message).toEqual({ role: "assistant", content: "Both.", tool_calls: [own] })
          return message
        }).pipe(Effect.provide(serveSettings(settings)))

        // After a restart: the upstream gets the assistant message as it sent it, the gateway's answer, the agent's result.
        yield* Effect.gen(function*() {
          upstream.enqueue(streamed("Listed.", [], small))
          const result = { role: "tool", tool_call_id: "call_a", content: "a.ts b.ts" }
          expect((yield* raw(post(requestOf([...messages, received, result], stream)))).status).toBe(200)
          const previous = JSON.parse(upstream.requests[before]!.body) as Body
          const next = JSON.parse(upstream.requests[before + 1]!.body) as Body
          expect(next.messages.slice(0, previous.messages.length)).toEqual(previous.messages)
          const added = next.messages.slice(previous.messages.length)
          expect(added.map((m) => [m.role, m.tool_call_id])).toEqual([["assistant", undefined], ["tool", "call_b"], ["tool", "call_a"]])
          expect(added[0]).toEqual({ role: "assistant", content: "Both.", tool_calls: [read, own] })
          expect(String(added[1]!.content)).toContain(output(1).slice(0, 2_000))
          expect(added[2]).toEqual(result)
          const { events, items, runs } = yield* onlyThread
          expect(items.filter((i) => i.toolCallId === "call_b")).toEqual([])
          expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === "call_a").length).toBe(1)
          expect(runs.every((r) => r.status === "completed")).toBe(true)
          expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
        }).pipe(Effect.provide(serveSettings(settings)))
      })), 180_000)
  }

  it.live("a thread_read tool of the agent's own is the agent's: the upstream's calls of it reach the agent unchanged (streamed and whole), never answered by the gateway", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewayOf(upstream)
      yield* Effect.gen(function*() {
        const own = { type: "function", function: { name: "thread_read", description: "Reads one of my notes.", parameters: { type: "object", properties: { refs: { type: "string" } } } } }
        const calls = [call("call_own", "thread_read", { refs: "note:1" })]
        const one = streamed(null, calls, small)
        const two = whole(null, calls, small)
        upstream.enqueue(one, two)
        const messages = [system, user("read my first note")]
        expect((yield* raw(post({ ...requestOf(messages), tools: [...tools, own] }))).text).toBe(one.body)
        expect((yield* raw(post({ ...requestOf(messages, false), tools: [...tools, own] }))).text).toBe(two.body)
        expect(upstream.requests.length).toBe(2)
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 180_000)

  it("a chunk that carries text beside the first delta of a thread_read call: the text reaches the agent, the call is held", () => {
    const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: "chatcmpl-9", object: "chat.completion.chunk", created: 1, model: "gpt-x", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
    const hop = GatewayChatOffload.makeHop(null)
    const bytes = (t: string) => new TextEncoder().encode(t)
    let out = hop.push(bytes(chunk({ role: "assistant", content: "Let me look.", tool_calls: [{ index: 0, id: "call_r", type: "function", function: { name: "thread_read", arguments: "{}" } }] })))
    out += hop.push(bytes(chunk({}, "tool_calls") + "data: [DONE]\n\n"))
    const end = hop.end()
    expect(end._tag).toBe("reads")
    expect(out).not.toContain("thread_read")
    if (end._tag !== "reads") return
    expect(end.content).toEqual([{ role: "assistant", content: "Let me look.", tool_calls: [{ id: "call_r", type: "function", function: { name: "thread_read", arguments: "{}" } }] }])
    const next = GatewayChatOffload.makeHop(end)
    out += next.push(bytes(chunk({ role: "assistant", content: " Done." }) + chunk({}, "stop") + "data: [DONE]\n\n"))
    expect(next.end()._tag).toBe("release")
    // The agent assembles the text before the hidden call and the continuation's.
    expect(assembled(out)).toEqual({ role: "assistant", content: "Let me look. Done." })
  })

  it.live("a continuation the upstream refuses ends the agent's stream with an error chunk carrying the upstream's error; the run fails", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewayOf(upstream)
      yield* Effect.gen(function*() {
        const { history } = yield* converse(upstream, 4)
        const error = { message: "Rate limit reached.", type: "requests", param: null, code: "rate_limit_exceeded" }
        upstream.enqueue(
          streamed("Let me look.", [call("call_read3", "thread_read", { refs: "tool:call_1" })], small),
          { status: 429, contentType: "application/json", body: JSON.stringify({ error }) }
        )
        const answer = yield* raw(post(requestOf([...history, user("read it back")])))
        expect(answer.status).toBe(200)
        expect(answer.text).not.toContain("thread_read")
        const chunks = chunksOf(answer.text)
        expect(chunks).not.toContain("[DONE]")
        expect(chunks.at(-1)).toEqual({ error })
        const { runs } = yield* onlyThread
        expect(runs.at(-1)!.status).toBe("failed")
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 180_000)

  it.live("a continuation stream that breaks off (after the hidden call) ends the agent's stream with an error chunk, no [DONE]; the run fails", () =>
    Effect.scoped(Effect.gen(function*() {
      const first = streamed("Let me look.", [call("call_read4", "thread_read", { refs: "tool:call_1" })], small)
      const second = streamed("It printed the values.", [], small)
      let served = 0
      // A loopback upstream: the first request answered whole, the second (the continuation) cut after its first chunk.
      const server = yield* Effect.acquireRelease(
        Effect.async<Http.Server & { readonly url: string }>((resume) => {
          const s = Http.createServer((req, res) => {
            req.resume()
            req.on("end", () => {
              res.writeHead(200, { "content-type": "text/event-stream" })
              if (served++ === 0) res.end(first.body)
              else res.write(second.body.slice(0, second.body.indexOf("\n\n") + 2), () => setTimeout(() => res.destroy(), 50))
            })
          })
          s.listen(0, "127.0.0.1", () => resume(Effect.succeed(Object.assign(s, { url: `http://127.0.0.1:${(s.address() as AddressInfo).port}` }))))
        }),
        (s) => Effect.async<void>((resume) => {
          s.closeAllConnections()
          s.close(() => resume(Effect.void))
        })
      )
      const unused = yield* ModelApi.start
      const settings = yield* settingsFor(
        [{ ...instance("chat", "openai-chat", unused, { prices: { input: 1.25, cacheWrite: 0, cacheRead: 0.125, output: 10 } }), baseUrl: `${server.url}/v1` }],
        { TEST_MODEL_KEY: marker },
        undefined,
        { gateway: { routes: [{ model: "gpt-*", provider: "chat" }] } }
      )
      yield* Effect.gen(function*() {
        const history = [
          system,
          user("list the files"),
          { role: "assistant", content: null, tool_calls: [call("call_1", "bash", { command: "ls" })] },
          { role: "tool", tool_call_id: "call_1", content: "a.ts" },
          { role: "assistant", content: "One file." },
          user("what did ls print?")
        ]
        const answer = yield* raw(post(requestOf(history)))
        expect(answer.status).toBe(200)
        expect(answer.text).not.toContain("thread_read")
        const chunks = chunksOf(answer.text)
        expect(chunks).not.toContain("[DONE]")
        expect(chunks.at(-1)).toMatchObject({ error: { type: "server_error" } })
        expect(served).toBe(2)
        const { runs } = yield* onlyThread
        expect(runs.at(-1)!.status).toBe("failed")
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 180_000)

  it.live("a whole continuation that answers 2xx but not JSON (a proxy's HTML page) fails the run; it is not a completed run with no reply", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewayOf(upstream)
      yield* Effect.gen(function*() {
        const history = [
          system,
          user("list the files"),
          { role: "assistant", content: null, tool_calls: [call("call_1", "bash", { command: "ls" })] },
          { role: "tool", tool_call_id: "call_1", content: "a.ts" },
          { role: "assistant", content: "One file." },
          user("what did ls print?")
        ]
        upstream.enqueue(
          whole("Let me look.", [call("call_read5", "thread_read", { refs: "tool:call_1" })], small),
          { status: 200, contentType: "text/html", body: "<html>upstream proxy page</html>" }
        )
        const answer = yield* raw(post(requestOf(history, false)))
        expect(answer.text).not.toContain("thread_read")
        expect(upstream.requests.length).toBe(2)
        const { runs } = yield* onlyThread
        expect(runs.at(-1)!.status).toBe("failed")
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 180_000)

  it.live("a thread_read answer that would take the continuation over the instance's window is refused to the model, never sent", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      // A 20,000-token window; the agent's request (one ~10,000-token result) fits, the same result read back does not.
      const settings = yield* gatewayOf(upstream, { contextWindow: 20_000, autoCompactThreshold: null, maxOutputTokens: 2_000 })
      yield* Effect.gen(function*() {
        const big = output(1) + "\n" + output(2).slice(0, 8_000)
        const history = [
          system,
          user("grep it"),
          { role: "assistant", content: null, tool_calls: [call("call_big", "bash", { command: "grep -rn value src" })] },
          { role: "tool", tool_call_id: "call_big", content: big },
          { role: "assistant", content: "Found them." },
          user("and the first line again?")
        ]
        upstream.enqueue(
          whole(null, [call("call_read_big", "thread_read", { refs: "tool:call_big", limit: 32_000 })], small),
          whole("I cannot read it all again.", [], small)
        )
        // pi's output limit field (max_completion_tokens) is the output room the fit keeps.
        const body = { ...requestOf(history, false), max_completion_tokens: 1_000 }
        expect(GatewayDialect.outputRoom(20_000, 2_000, body)).toBe(1_000)
        const answer = yield* raw(post(body))
        expect(answer.status).toBe(200)
        expect((answer.body as { choices: Array<{ message: Message }> }).choices[0]!.message.content).toBe("I cannot read it all again.")
        expect(upstream.requests.length).toBe(2)
        const read = (JSON.parse(upstream.requests[1]!.body) as Body).messages.at(-1)!
        expect(read).toMatchObject({ role: "tool", tool_call_id: "call_read_big" })
        expect(String(read.content)).toContain("thread_read: not read: its")
        expect(String(read.content)).toContain("do not fit in this model's context window")
        // What went out stays under the window's fit: window less the output room and 5%, in Baton's count.
        const counter = TokenCounter.make()
        expect(counter.count(upstream.requests[1]!.body)).toBeLessThanOrEqual(Gateway.fitLimit(20_000, 2_000, body))
        // Without the check the original would have gone out again, over the window.
        expect(counter.count(upstream.requests[1]!.body) + counter.count(big)).toBeGreaterThan(20_000)
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 180_000)

  it.live("with the instance's toolResultOffload off, every body goes out as the agent sent it", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewayOf(upstream, { toolResultOffload: false })
      yield* Effect.gen(function*() {
        const { sent } = yield* converse(upstream, 12)
        expect(upstream.requests.map((r) => r.body)).toEqual(sent)
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 180_000)
})
