/**
 * The gateway's tool-result offload on `POST /v1/responses` (issue 14 item 3, docs/gateway.md "On the way out"),
 * against a loopback Responses upstream that records the bodies and streams its answers as OpenAI does
 * (`response.created`, `response.output_item.added` / `.done` per item, `response.completed`, with sequence numbers):
 * a long Codex-like conversation whose tool outputs (about 25,000 characters each) are stubbed at flushes and stay
 * stubbed, each request extending the previous one except at the reported flushes, the agent's newest input sent byte
 * for byte, `thread_read` offered as a function; the upstream's `thread_read` calls (whole and streamed) answered by
 * the gateway with the original output, never seen by the agent; the same for `thread_read` as a custom tool call
 * (its free-text input read as JSON, an error result when it is not).
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

type Item = Record<string, unknown>
type Body = { input: Array<Item>; tools: Array<{ name: string; type?: string }> }

const tools = [{ type: "function", name: "exec_command", description: "Runs a command.", strict: false, parameters: { type: "object", properties: { cmd: { type: "string" } }, required: ["cmd"] } }]
const developer = { type: "message", role: "developer", content: [{ type: "input_text", text: "You are a coding agent." }] }
const user = (text: string) => ({ type: "message", role: "user", content: [{ type: "input_text", text }] })

/** About 25,000 characters of tool output. */
const output = (round: number) =>
  Array.from({ length: 420 }, (_, line) => `src/module${round}/file${line}.ts:${line * 7 + round}: export const value${line} = compute(${line}, "r${round}")`).join("\n")

let responses = 0

/** Billed tokens of an answer: uncached input, cached input, output. */
type Usage = { readonly input: number; readonly cached: number; readonly output: number }
const small: Usage = { input: 10, cached: 0, output: 5 }

/** An output message item. */
const said = (text: string) => ({ type: "message", id: `msg_r${++responses}`, role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] })
/** An output function call item. */
const called = (callId: string, name: string, args: object) => ({ type: "function_call", id: `fc_${callId}`, call_id: callId, name, arguments: JSON.stringify(args), status: "completed" })

/** An output custom tool call item (its `input` free text). */
const customCalled = (callId: string, name: string, input: string) => ({ type: "custom_tool_call", id: `ctc_${callId}`, call_id: callId, name, input, status: "completed" })

/** A streamed Responses answer of `items` as OpenAI frames it (added, deltas, done per item; sequence numbers). */
const streamed = (items: ReadonlyArray<Item>, usage: Usage): ModelApi.Reply => {
  const id = `resp_${++responses}`
  let seq = 0
  const events: Array<Record<string, unknown>> = [
    { type: "response.created", response: { id, status: "in_progress", output: [] } },
    { type: "response.in_progress", response: { id, status: "in_progress", output: [] } }
  ]
  items.forEach((item, i) => {
    const start = item.type === "message" ? { content: [] } : item.type === "custom_tool_call" ? { input: "" } : { arguments: "" }
    events.push({ type: "response.output_item.added", output_index: i, item: { ...item, status: "in_progress", ...start } })
    if (item.type === "message") {
      const text = (item.content as Array<{ text: string }>)[0]!.text
      events.push({ type: "response.output_text.delta", output_index: i, item_id: item.id, content_index: 0, delta: text })
    } else if (item.type === "custom_tool_call") {
      events.push({ type: "response.custom_tool_call_input.delta", output_index: i, item_id: item.id, delta: item.input })
    } else {
      events.push({ type: "response.function_call_arguments.delta", output_index: i, item_id: item.id, delta: item.arguments })
    }
    events.push({ type: "response.output_item.done", output_index: i, item })
  })
  events.push({ type: "response.completed", response: { id, status: "completed", output: items, usage: usageOf(usage) } })
  return {
    status: 200,
    contentType: "text/event-stream",
    body: events.map((e) => `event: ${String(e.type)}\ndata: ${JSON.stringify({ ...e, sequence_number: seq++ })}\n\n`).join("")
  }
}

const usageOf = (u: Usage) => ({ input_tokens: u.input + u.cached, input_tokens_details: { cached_tokens: u.cached }, output_tokens: u.output, total_tokens: u.input + u.cached + u.output })

/** A whole (non-streamed) Responses answer of `items`. */
const whole = (items: ReadonlyArray<Item>, usage: Usage): ModelApi.Reply => ({
  status: 200,
  contentType: "application/json",
  body: JSON.stringify({ id: `resp_${++responses}`, object: "response", status: "completed", output: items, usage: usageOf(usage) })
})

const post = (body: unknown) =>
  HttpClientRequest.post("/v1/responses").pipe(
    HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "thread-id": "codex-thread-o", "session-id": "codex-thread-o" }),
    HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
  )

const requestOf = (input: ReadonlyArray<unknown>, stream = true) => ({ model: "gpt-x", stream, store: false, tools, tool_choice: "auto", parallel_tool_calls: false, input })

/** The SSE events of a stream's text (data parsed). */
const eventsOf = (text: string) =>
  text.split("\n\n").filter((e) => e.trim() !== "").map((e) => JSON.parse(e.split("\n").find((l) => l.startsWith("data: "))!.slice(6)) as Record<string, unknown>)

/** Plays `rounds` tool rounds through the gateway (each an exec_command answered with `output`), then a last answer; the agent's bodies and history. */
const converse = (upstream: ModelApi.ModelApi, rounds: number) =>
  Effect.gen(function*() {
    const history: Array<unknown> = [developer, user("explore the repository")]
    const sent: Array<string> = []
    for (let round = 1; round <= rounds + 1; round++) {
      const items = round <= rounds ? [called(`call_${round}`, "exec_command", { cmd: `grep -rn value src/module${round}` })] : [said("Done.")]
      upstream.enqueue(streamed(items, small))
      const body = requestOf(history)
      sent.push(JSON.stringify(body))
      const answer = yield* raw(post(body))
      expect(answer.status).toBe(200)
      if (round > rounds) {
        history.push(...items)
        break
      }
      history.push(...items, { type: "function_call_output", call_id: `call_${round}`, output: output(round) })
    }
    return { sent, history }
  })

const gatewayOf = (upstream: ModelApi.ModelApi, extra: Record<string, unknown> = {}) =>
  settingsFor(
    [instance("openai", "openai-responses", upstream, { prices: { input: 1.25, cacheWrite: 0, cacheRead: 0.125, output: 10 }, ...extra })],
    { TEST_MODEL_KEY: marker },
    undefined,
    { gateway: { routes: [{ model: "gpt-*", provider: "openai" }] } }
  )

const onlyThread = Effect.gen(function*() {
  const api = yield* client()
  const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
  const runs = (yield* api.runs.list({ path: { threadId }, urlParams: { limit: 100 } })).runs
  const items = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
  const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
  return { api, threadId, runs, items, events }
})

describe("Gateway tool-result offload on /v1/responses", () => {
  it.live("stubs consumed outputs at flushes and keeps them stubbed; each request extends the previous one except at the reported flushes; the newest input goes out unchanged", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewayOf(upstream)
      yield* Effect.gen(function*() {
        const rounds = 30
        const { sent } = yield* converse(upstream, rounds)
        expect(upstream.requests.length).toBe(rounds + 1)
        const bodies = upstream.requests.map((r) => JSON.parse(r.body) as Body)

        // thread_read offered on every request as a function, after the agent's tools.
        for (const b of bodies) {
          expect(b.tools.map((t) => t.name)).toEqual(["exec_command", "thread_read"])
          expect(b.tools[1]!.type).toBe("function")
        }
        expect(new Set(bodies.map((b) => JSON.stringify(b.tools))).size).toBe(1)

        // The agent's newest input (the items after the last model item) goes out byte for byte.
        sent.forEach((s, i) => {
          const agent = (JSON.parse(s) as Body).input
          let lastModel = agent.length - 1
          while (lastModel >= 0 && agent[lastModel]!.type !== "function_call" && agent[lastModel]!.role !== "assistant") lastModel--
          const newest = agent.slice(lastModel + 1)
          expect(newest.length).toBeGreaterThan(0)
          for (const m of newest) expect(upstream.requests[i]!.body).toContain(JSON.stringify(m))
          expect(bodies[i]!.input.slice(-newest.length)).toEqual(newest)
        })

        // Flushes: the runs with a gateway.offloaded event.
        const { items, runs, events } = yield* onlyThread
        expect(runs.length).toBe(rounds + 1)
        const flushes = events.filter((e) => e.type === "gateway.offloaded").map((e) => e.payload as { runId: string; refs: Array<string>; tokensBefore: number; tokensAfter: number })
        expect(flushes.length).toBeGreaterThanOrEqual(2)
        const flushAt = flushes.map((f) => runs.findIndex((r) => r.id === f.runId))
        for (const f of flushes) expect(f.tokensAfter).toBeLessThan(f.tokensBefore)

        // Each request extends the previous one's input, except at a reported flush (and only there).
        const breaks: Array<number> = []
        for (let i = 1; i < bodies.length; i++) {
          const previous = bodies[i - 1]!.input.map((m) => JSON.stringify(m))
          const next = bodies[i]!.input.map((m) => JSON.stringify(m))
          if (!previous.every((m, k) => next[k] === m)) breaks.push(i)
        }
        expect(breaks).toEqual([...new Set(flushAt)].sort((a, b) => a - b))

        // A stubbed output stays stubbed, with its ref; what is stubbed is what the events reported.
        const stubbed = (b: Body) =>
          b.input.filter((m) => m.type === "function_call_output" && String(m.output).startsWith("[offloaded, thread_read tool:")).map((m) => String(m.call_id))
        const reported: Array<string> = []
        for (let i = 0; i < bodies.length; i++) {
          reported.push(...flushes.filter((f) => runs.findIndex((r) => r.id === f.runId) === i).flatMap((f) => f.refs.map((r) => r.slice("tool:".length))))
          expect(stubbed(bodies[i]!)).toEqual(reported)
        }
        const stub = bodies.at(-1)!.input[3]!
        expect(stub).toEqual({ type: "function_call_output", call_id: "call_1", output: `[offloaded, thread_read tool:call_1]\nexec_command grep -rn value src/module1: ${output(1).length.toLocaleString("en-US")} chars` })
        // The calls stay as sent.
        expect(bodies.at(-1)!.input[2]).toEqual(called("call_1", "exec_command", { cmd: "grep -rn value src/module1" }))
        expect(upstream.requests.at(-1)!.body.length).toBeLessThan(sent.at(-1)!.length / 2)
        // The thread holds the originals.
        expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === "call_1").map((i) => i.text)).toEqual([output(1)])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 180_000)

  it.live("a thread_read call of the upstream (whole answers) is answered with the exact original; the agent gets the round's message and the answer after it; its next request extends the continuation", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewayOf(upstream)
      yield* Effect.gen(function*() {
        const { history } = yield* converse(upstream, 12)
        const before = upstream.requests.length
        const input = [...history, user("what did the first grep print?")]
        const read = called("call_read1", "thread_read", { refs: "tool:call_1", limit: 32_000 })
        const final = said("It printed the values of module 1.")
        const look = said("Let me look.")
        upstream.enqueue(whole([look, read], { input: 100, cached: 1000, output: 20 }), whole([final], { input: 50, cached: 1100, output: 10 }))
        const answer = yield* raw(post(requestOf(input, false)))
        expect(answer.status).toBe(200)
        // The agent sees the round's message, then the answer after the read (the read call never; before branch
        // b47gw the round's message was lost).
        expect((answer.body as { output: Array<Item> }).output).toEqual([look, final])
        expect(JSON.stringify(answer.body)).not.toContain("thread_read")
        expect(upstream.requests.length).toBe(before + 2)
        const first = JSON.parse(upstream.requests[before]!.body) as Body
        const second = JSON.parse(upstream.requests[before + 1]!.body) as Body
        // The continuation extends the request just sent with the response's items and the gateway's answer.
        expect(second.input.slice(0, first.input.length)).toEqual(first.input)
        expect(second.input.slice(first.input.length, -1)).toEqual([look, read])
        const answered = second.input.at(-1)!
        expect(answered).toMatchObject({ type: "function_call_output", call_id: "call_read1" })
        // The exact original: the call and its output, rendered by thread_read.
        expect(String(answered.output)).toContain(output(1))

        const { api, runs } = yield* onlyThread
        const view = yield* api.runs.get({ path: { runId: runs.at(-1)!.id }, urlParams: {} })
        expect(view.cost).toMatchObject({ inputTokens: 150, cacheReadTokens: 2100, outputTokens: 30 })

        // The agent's next request extends the continuation: the hidden round goes out again before the answer.
        upstream.enqueue(whole([said("Anything else?")], small))
        expect((yield* raw(post(requestOf([...input, look, final, user("thanks")], false)))).status).toBe(200)
        const third = JSON.parse(upstream.requests[before + 2]!.body) as Body
        expect(third.input.slice(0, second.input.length)).toEqual(second.input)
        expect(third.input.slice(second.input.length)).toEqual([final, user("thanks")])
        const { items, events } = yield* onlyThread
        expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
        expect(items.filter((i) => i.toolName === "thread_read")).toEqual([])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 180_000)

  it.live("a streamed thread_read call is held back from its output item on, answered, and the continuation's items join the response the agent receives", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewayOf(upstream)
      yield* Effect.gen(function*() {
        const { history } = yield* converse(upstream, 12)
        const before = upstream.requests.length
        const input = [...history, user("what did the first grep print?")]
        const look = said("Let me look.")
        const read = called("call_read2", "thread_read", { refs: "tool:call_1", limit: 32_000 })
        const found = said("It printed module 1's values.")
        const next = called("call_next", "exec_command", { cmd: "ls" })
        upstream.enqueue(streamed([look, read], { input: 100, cached: 1000, output: 20 }), streamed([found, next], { input: 50, cached: 1100, output: 10 }))
        const answer = yield* raw(post(requestOf(input)))
        expect(answer.status).toBe(200)
        const events = eventsOf(answer.text)
        // One response: one response.created, the item before the hidden call, then the continuation's from index 1.
        expect(JSON.stringify(events)).not.toContain("thread_read")
        expect(events.filter((e) => e.type === "response.created").length).toBe(1)
        expect(events.filter((e) => e.type === "response.completed").length).toBe(1)
        expect(events.filter((e) => e.type === "response.output_item.done").map((e) => [e.output_index, e.item])).toEqual([[0, look], [1, found], [2, next]])
        const sequence = events.map((e) => e.sequence_number)
        expect(sequence).toEqual(sequence.map((_, i) => i))
        expect((events.at(-1)!.response as { output: Array<Item> }).output).toEqual([look, found, next])
        // The upstream got the gateway's answer: the original output.
        expect(upstream.requests.length).toBe(before + 2)
        const second = JSON.parse(upstream.requests[before + 1]!.body) as Body
        expect(second.input.at(-2)).toEqual(read)
        expect(String(second.input.at(-1)!.output)).toContain(output(1))

        const { api, runs, items } = yield* onlyThread
        expect(runs.at(-1)!.status).toBe("completed")
        const view = yield* api.runs.get({ path: { runId: runs.at(-1)!.id }, urlParams: {} })
        expect(view.cost).toMatchObject({ inputTokens: 150, cacheReadTokens: 2100, outputTokens: 30 })
        expect(items.filter((i) => i.kind === "tool_call").map((i) => i.toolCallId)).not.toContain("call_read2")
        expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === "call_next").length).toBe(1)

        // The agent's next request (it echoes the items it received) extends the continuation's request.
        upstream.enqueue(streamed([said("Fine.")], small))
        const result = { type: "function_call_output", call_id: "call_next", output: "a b c" }
        expect((yield* raw(post(requestOf([...input, look, found, next, result])))).status).toBe(200)
        const third = JSON.parse(upstream.requests[before + 2]!.body) as Body
        expect(third.input.slice(0, second.input.length)).toEqual(second.input)
        expect(third.input.slice(second.input.length)).toEqual([found, next, result])
        const recorded = (yield* onlyThread).events
        expect(recorded.filter((e) => e.type === "gateway.diverged")).toEqual([])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 180_000)

  for (const stream of [true, false]) {
    it.live(`a response with thread_read beside a call of the agent's own tool (${stream ? "streamed" : "whole"}): the gateway answers the read, the agent gets its items alone, its next request (after a restart) carries the call and the original`, () =>
      Effect.scoped(Effect.gen(function*() {
        const upstream = yield* ModelApi.start
        const settings = yield* gatewayOf(upstream)
        const { history } = yield* converse(upstream, 2).pipe(Effect.provide(serveSettings(settings)))
        const before = upstream.requests.length
        const input = [...history, user("read the first grep, then list the files")]
        const both = said("Both.")
        const read = called("call_b", "thread_read", { refs: "tool:call_1" })
        const own = called("call_a", "exec_command", { cmd: "ls" })
        yield* Effect.gen(function*() {
          upstream.enqueue(stream ? streamed([both, read, own], small) : whole([both, read, own], small))
          const answer = yield* raw(post(requestOf(input, stream)))
          expect(answer.status).toBe(200)
          expect(answer.text).not.toContain("thread_read")
          expect(answer.text).not.toContain("call_b")
          expect(upstream.requests.length).toBe(before + 1)
          if (!stream) {
            expect((answer.body as { output: Array<Item> }).output).toEqual([both, own])
            return
          }
          const events = eventsOf(answer.text)
          expect(events.filter((e) => e.type === "response.output_item.done").map((e) => [e.output_index, e.item])).toEqual([[0, both], [1, own]])
          expect(events.filter((e) => typeof e.output_index === "number").every((e) => (e.output_index as number) < 2)).toBe(true)
          const sequence = events.map((e) => e.sequence_number)
          expect(sequence).toEqual(sequence.map((_, i) => i))
          expect((events.at(-1)!.response as { output: Array<Item> }).output).toEqual([both, own])
        }).pipe(Effect.provide(serveSettings(settings)))

        // After a restart: the upstream gets the items as it sent them, the gateway's answer, then the agent's output.
        yield* Effect.gen(function*() {
          upstream.enqueue(streamed([said("Listed.")], small))
          const result = { type: "function_call_output", call_id: "call_a", output: "a.ts b.ts" }
          expect((yield* raw(post(requestOf([...input, both, own, result], stream)))).status).toBe(200)
          const previous = JSON.parse(upstream.requests[before]!.body) as Body
          const next = JSON.parse(upstream.requests[before + 1]!.body) as Body
          expect(next.input.slice(0, previous.input.length)).toEqual(previous.input)
          const added = next.input.slice(previous.input.length)
          expect(added.slice(0, 3)).toEqual([both, read, own])
          expect(added[3]).toMatchObject({ type: "function_call_output", call_id: "call_b" })
          expect(String(added[3]!.output)).toContain(output(1).slice(0, 2_000))
          expect(added.slice(4)).toEqual([result])
          const { events, items, runs } = yield* onlyThread
          expect(items.filter((i) => i.toolCallId === "call_b")).toEqual([])
          expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === "call_a").length).toBe(1)
          expect(runs.every((r) => r.status === "completed")).toBe(true)
          expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
        }).pipe(Effect.provide(serveSettings(settings)))
      })), 180_000)
  }

  it.live("a stream that sends only output_item.done events is held from the thread_read call's done", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewayOf(upstream)
      yield* Effect.gen(function*() {
        const { history } = yield* converse(upstream, 4)
        upstream.enqueue(
          ModelApi.answer("openai-responses", "Let me look.", { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }, [{ id: "call_read4", name: "thread_read", arguments: JSON.stringify({ refs: "tool:call_1", limit: 32_000 }) }]),
          ModelApi.answer("openai-responses", "Read it.", { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 })
        )
        const answer = yield* raw(post(requestOf([...history, user("read it back")])))
        expect(answer.status).toBe(200)
        const events = eventsOf(answer.text)
        expect(JSON.stringify(events)).not.toContain("thread_read")
        expect(events.filter((e) => e.type === "response.output_item.done").map((e) => [e.output_index, (e.item as { content: Array<{ text: string }> }).content[0]!.text])).toEqual([[0, "Let me look."], [1, "Read it."]])
        expect(String((JSON.parse(upstream.requests.at(-1)!.body) as Body).input.at(-1)!.output)).toContain(output(1))
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 180_000)

  it.live("a thread_read custom tool call (whole answers) is answered with a custom_tool_call_output holding the exact original; a custom input that is not JSON gets an error result", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewayOf(upstream)
      yield* Effect.gen(function*() {
        const { history } = yield* converse(upstream, 4)
        const before = upstream.requests.length
        const input = [...history, user("what did the first grep print?")]
        const look = said("Let me look.")
        const read = customCalled("call_cread1", "thread_read", JSON.stringify({ refs: "tool:call_1", limit: 32_000 }))
        const final = said("It printed the values of module 1.")
        upstream.enqueue(whole([look, read], { input: 100, cached: 1000, output: 20 }), whole([final], { input: 50, cached: 1100, output: 10 }))
        const answer = yield* raw(post(requestOf(input, false)))
        expect(answer.status).toBe(200)
        expect((answer.body as { output: Array<Item> }).output).toEqual([look, final])
        expect(JSON.stringify(answer.body)).not.toContain("thread_read")
        expect(upstream.requests.length).toBe(before + 2)
        const first = JSON.parse(upstream.requests[before]!.body) as Body
        const second = JSON.parse(upstream.requests[before + 1]!.body) as Body
        expect(second.input.slice(0, first.input.length)).toEqual(first.input)
        expect(second.input.slice(first.input.length, -1)).toEqual([look, read])
        const answered = second.input.at(-1)!
        expect(Object.keys(answered).sort()).toEqual(["call_id", "output", "type"])
        expect(answered).toMatchObject({ type: "custom_tool_call_output", call_id: "call_cread1" })
        expect(String(answered.output)).toContain(output(1))

        // A custom input that is not JSON: the model gets an error result saying what to send, and goes on.
        const bad = customCalled("call_cread2", "thread_read", "tool:call_2")
        const gaveUp = said("I could not read it.")
        upstream.enqueue(whole([bad], small), whole([gaveUp], small))
        const next = [...input, look, final, user("and the second?")]
        const again = yield* raw(post(requestOf(next, false)))
        expect(again.status).toBe(200)
        expect((again.body as { output: Array<Item> }).output).toEqual([gaveUp])
        const continued = JSON.parse(upstream.requests.at(-1)!.body) as Body
        expect(continued.input.slice(-2)).toEqual([
          bad,
          { type: "custom_tool_call_output", call_id: "call_cread2", output: `thread_read: the input is not JSON; send the arguments as a JSON object: {"refs": "...", "offset"?: n, "limit"?: n}` }
        ])
        expect(String(continued.input.at(-1)!.output)).not.toContain(output(2).slice(0, 200))

        const { runs, items, events } = yield* onlyThread
        expect(runs.map((r) => r.status)).toEqual(Array(runs.length).fill("completed"))
        expect(items.filter((i) => i.toolName === "thread_read")).toEqual([])
        expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 180_000)

  it.live("a streamed thread_read custom tool call is held back from its output item on, answered with a custom_tool_call_output, and the continuation's items join the response", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewayOf(upstream)
      yield* Effect.gen(function*() {
        const { history } = yield* converse(upstream, 4)
        const before = upstream.requests.length
        const input = [...history, user("what did the first grep print?")]
        const look = said("Let me look.")
        const read = customCalled("call_cread3", "thread_read", JSON.stringify({ refs: "tool:call_1", limit: 32_000 }))
        const found = said("It printed module 1's values.")
        const next = called("call_next", "exec_command", { cmd: "ls" })
        upstream.enqueue(streamed([look, read], { input: 100, cached: 1000, output: 20 }), streamed([found, next], { input: 50, cached: 1100, output: 10 }))
        const answer = yield* raw(post(requestOf(input)))
        expect(answer.status).toBe(200)
        const events = eventsOf(answer.text)
        expect(JSON.stringify(events)).not.toContain("thread_read")
        expect(events.filter((e) => e.type === "response.custom_tool_call_input.delta")).toEqual([])
        expect(events.filter((e) => e.type === "response.created").length).toBe(1)
        expect(events.filter((e) => e.type === "response.output_item.done").map((e) => [e.output_index, e.item])).toEqual([[0, look], [1, found], [2, next]])
        const sequence = events.map((e) => e.sequence_number)
        expect(sequence).toEqual(sequence.map((_, i) => i))
        expect((events.at(-1)!.response as { output: Array<Item> }).output).toEqual([look, found, next])
        expect(upstream.requests.length).toBe(before + 2)
        const second = JSON.parse(upstream.requests[before + 1]!.body) as Body
        expect(second.input.at(-2)).toEqual(read)
        expect(second.input.at(-1)).toMatchObject({ type: "custom_tool_call_output", call_id: "call_cread3" })
        expect(String(second.input.at(-1)!.output)).toContain(output(1))

        // The agent's next request (it echoes the items it received) extends the continuation's request.
        upstream.enqueue(streamed([said("Fine.")], small))
        const result = { type: "function_call_output", call_id: "call_next", output: "a b c" }
        expect((yield* raw(post(requestOf([...input, look, found, next, result])))).status).toBe(200)
        const third = JSON.parse(upstream.requests[before + 2]!.body) as Body
        expect(third.input.slice(0, second.input.length)).toEqual(second.input)
        expect(third.input.slice(second.input.length)).toEqual([found, next, result])
        const { runs, items, events: recorded } = yield* onlyThread
        expect(runs.map((r) => r.status)).toEqual(Array(runs.length).fill("completed"))
        expect(items.filter((i) => i.kind === "tool_call").map((i) => i.toolCallId)).not.toContain("call_cread3")
        expect(recorded.filter((e) => e.type === "gateway.diverged")).toEqual([])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 180_000)

  it.live("a continuation the upstream refuses ends the agent's stream with response.failed carrying the upstream's error; the run fails", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewayOf(upstream)
      yield* Effect.gen(function*() {
        const { history } = yield* converse(upstream, 4)
        const look = said("Let me look.")
        upstream.enqueue(
          streamed([look, called("call_read3", "thread_read", { refs: "tool:call_1" })], small),
          { status: 400, contentType: "application/json", body: JSON.stringify({ error: { message: "Invalid 'input': too long.", type: "invalid_request_error", param: "input", code: "string_above_max_length" } }) }
        )
        const answer = yield* raw(post(requestOf([...history, user("read it back")])))
        expect(answer.status).toBe(200)
        const events = eventsOf(answer.text)
        expect(JSON.stringify(events)).not.toContain("thread_read")
        expect(events.filter((e) => e.type === "response.output_item.done").map((e) => e.item)).toEqual([look])
        // Numbered on from the events the agent received (created, in_progress, the message's added, delta and done:
        // 0 to 4; the call's events from 5 were held), of the response it is receiving. Before: neither.
        expect(events.at(-1)).toEqual({
          type: "response.failed",
          sequence_number: 5,
          response: { id: (events[0]!.response as Item).id, object: "response", status: "failed", error: { code: "string_above_max_length", message: "Invalid 'input': too long." }, output: [] }
        })
        const { runs } = yield* onlyThread
        expect(runs.at(-1)!.status).toBe("failed")
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 180_000)

  it.live("a restarted gateway sends the same stubs: the next request extends the last one sent before the restart", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-gateway-responses-restart-"))
      const settings = yield* settingsFor(
        [instance("openai", "openai-responses", upstream, { prices: { input: 1.25, cacheWrite: 0, cacheRead: 0.125, output: 10 } })],
        { TEST_MODEL_KEY: marker },
        dir,
        { gateway: { routes: [{ model: "gpt-*", provider: "openai" }] } }
      )
      const { history } = yield* converse(upstream, 14).pipe(Effect.provide(serveSettings(settings)))
      const before = JSON.parse(upstream.requests.at(-1)!.body) as Body
      expect(JSON.stringify(before)).toContain("[offloaded, thread_read tool:call_1]")
      yield* Effect.gen(function*() {
        upstream.enqueue(streamed([said("Sure.")], small))
        expect((yield* raw(post(requestOf([...history, user("and now?")])))).status).toBe(200)
        const after = JSON.parse(upstream.requests.at(-1)!.body) as Body
        expect(after.input.slice(0, before.input.length)).toEqual(before.input)
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
