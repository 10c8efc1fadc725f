/**
 * `/v1/responses` with tool-result offload on (the stream passes through `GatewayResponsesOffload.makeHop`, which holds
 * the upstream's `thread_read` calls back) whose upstream stream restarts its answer: a `response.created` of another
 * response mid-stream (a stream spliced after a retry upstream). As on the Anthropic side (GatewayRestartedMessage.test.ts,
 * a second `message_start`): what the first attempt held back is dropped, the second response is the answer (its own
 * `thread_read` calls answered at its own output indexes), and a continuation that restarts after part of it reached the
 * agent ends with `response.failed`. The upstream is a loopback server streaming OpenAI's framing (`event: <type>` and
 * `data: <json>` with sequence numbers; the second attempt of the first test is the recorded
 * ../shared/provider-fixtures/openai-responses/openai-custom-tool.1 stream).
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import { fileURLToPath } from "node:url"
import { adminToken, client, raw } from "./helpers.js"
import type * as ModelApi from "./support/ModelApi.js"
import { withResponsesGateway } from "./support/ModelServer.js"

type Item = Record<string, unknown>

const fixtures = fileURLToPath(new URL("../../../../shared/provider-fixtures/openai-responses/", import.meta.url))
/** The recorded custom tool call response (`write_sql`, output 0), its events parsed. */
const custom = Fs.readFileSync(`${fixtures}openai-custom-tool.1.chunks.txt`, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as Item)

const tools = [
  { type: "function", name: "exec_command", description: "Runs a command.", strict: false, parameters: { type: "object", properties: { cmd: { type: "string" } } } },
  { type: "custom", name: "write_sql", description: "Writes SQL." }
]
const said = (id: string, text: string): Item => ({ type: "message", id, role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] })
const read = (callId: string): Item => ({ type: "function_call", id: `fc_${callId}`, call_id: callId, name: "thread_read", arguments: JSON.stringify({ refs: "#1" }), status: "completed" })
const usage = { input_tokens: 20, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5, total_tokens: 25 }

/**
 * The events of response `id` streaming `items` as OpenAI frames them (created, in_progress; added, one delta, done
 * per item; completed). `cut`: the events of the last item after its delta (its done) and the completion left out.
 */
const responseEvents = (id: string, items: ReadonlyArray<Item>, cut = false): Array<Item> => {
  const events: Array<Item> = [
    { type: "response.created", response: { id, status: "in_progress", output: [] } },
    { type: "response.in_progress", response: { id, status: "in_progress", output: [] } }
  ]
  items.forEach((item, i) => {
    const last = i === items.length - 1
    events.push({ type: "response.output_item.added", output_index: i, item: { ...item, status: "in_progress", ...(item.type === "message" ? { content: [] } : { arguments: "" }) } })
    if (item.type === "message") {
      events.push({ type: "response.output_text.delta", output_index: i, item_id: item.id, content_index: 0, delta: (item.content as Array<{ text: string }>)[0]!.text })
    } else {
      events.push({ type: "response.function_call_arguments.delta", output_index: i, item_id: item.id, delta: cut && last ? String(item.arguments).slice(0, 5) : item.arguments })
    }
    if (!(cut && last)) events.push({ type: "response.output_item.done", output_index: i, item })
  })
  if (!cut) events.push({ type: "response.completed", response: { id, status: "completed", output: items, usage } })
  return events
}

/** A stream of `events`, numbered as one stream (the sequence numbers of a spliced stream go on). */
const stream = (events: ReadonlyArray<Item>): ModelApi.Reply => ({
  status: 200,
  contentType: "text/event-stream",
  body: events.map((e, i) => `event: ${String(e.type)}\ndata: ${JSON.stringify({ ...e, sequence_number: i })}\n\n`).join("")
})

/** The SSE events of a stream's text (data parsed). */
const eventsOf = (text: string) =>
  text.split("\n\n").filter((e) => e.trim() !== "").map((e) => JSON.parse(e.split("\n").find((l) => l.startsWith("data: "))!.slice(6)) as Item)

/** The agent's view of a stream: the response after its last `response.created`, its items done by output index. */
const lastResponse = (events: ReadonlyArray<Item>) => {
  const from = events.map((e) => e.type).lastIndexOf("response.created")
  return {
    id: (events[from]?.response as Item | undefined)?.id,
    done: events.slice(from).filter((e) => e.type === "response.output_item.done").map((e) => [e.output_index, (e.item as Item).id])
  }
}

const withGateway = withResponsesGateway

const send = raw(HttpClientRequest.post("/v1/responses").pipe(
  HttpClientRequest.setHeaders({ accept: "text/event-stream", authorization: `Bearer ${adminToken}`, "thread-id": "codex-restart" }),
  HttpClientRequest.bodyText(
    JSON.stringify({ model: "gpt-x", stream: true, tools, input: [{ type: "message", role: "user", content: [{ type: "input_text", text: "hi" }] }] }),
    "application/json"
  )
))

/** The only thread's items (kind, message id) and its runs' statuses. */
const record = Effect.gen(function*() {
  const api = yield* client()
  const threads = (yield* api.threads.list({ urlParams: {} })).threads
  expect(threads).toHaveLength(1)
  const threadId = threads[0]!.id
  const items = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items.map((i) => [i.kind, i.messageId])
  const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs.map((r) => r.status)
  return { items, runs }
})

/** A first hop whose only item is a thread_read call (answered, continued upstream). */
const readRound = stream(responseEvents("resp_read", [read("call_read")]))

describe("Gateway, OpenAI Responses with offload: a stream that restarts its answer", () => {
  it.live("a thread_read call the first attempt left cut is dropped: the agent gets the second response, one upstream request", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        upstream.enqueue(stream([...responseEvents("resp_first", [said("msg_retracted", "Let me look."), read("call_cut")], true), ...custom]))
        const answer = yield* send
        expect(answer.status).toBe(200)
        expect(upstream.requests).toHaveLength(1)
        const events = eventsOf(answer.text)
        // Before: the cut thread_read call's events were held, then released with the second response's behind them:
        // the agent got a call of a tool it does not have.
        expect(answer.text).not.toContain("thread_read")
        expect(lastResponse(events)).toEqual({ id: "resp_custom_tool_test_001", done: [[0, "ct_abc123def456"]] })
        expect(events.at(-1)!.type).toBe("response.completed")
        const { items, runs } = yield* record
        expect(items).toEqual([["user_message", "user@0.0"], ["tool_call", "ct_abc123def456"]])
        expect(runs).toEqual(["completed"])
      })
    ))

  it.live("the second response calling thread_read (the first attempt's done but cut): answered at the second's own index, the agent sees the restart", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        upstream.enqueue(
          stream([
            ...responseEvents("resp_first", [said("msg_retracted", "Retracted words."), read("call_first")]).filter((e) => e.type !== "response.completed"),
            ...responseEvents("resp_second", [read("call_read")])
          ]),
          stream(responseEvents("resp_cont", [said("msg_found", "Found it.")]))
        )
        const answer = yield* send
        expect(answer.status).toBe(200)
        expect(upstream.requests).toHaveLength(2)
        // The continuation answers the second response's call.
        const continued = JSON.parse(upstream.requests[1]!.body) as { input: Array<Item> }
        expect(continued.input.slice(-2).map((i) => [i.type, i.call_id])).toEqual([["function_call", "call_read"], ["function_call_output", "call_read"]])
        const events = eventsOf(answer.text)
        expect(answer.text).not.toContain("thread_read")
        // Before: the second response.created was held and hidden with the read, so the agent kept "Retracted words."
        // at output 0 and got the continuation's item at output 1 (the first attempt's index of its call).
        expect(lastResponse(events)).toEqual({ id: "resp_second", done: [[0, "msg_found"]] })
        expect(((events.at(-1)!.response as Item).output as Array<Item>).map((i) => i.id)).toEqual(["msg_found"])
        const { items, runs } = yield* record
        expect(items).toEqual([["user_message", "user@0.0"], ["assistant_message", "msg_found"]])
        expect(runs).toEqual(["completed"])
      })
    ))

  it.live("a continuation that restarts before any of it reached the agent: its first attempt's cut thread_read is dropped", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        upstream.enqueue(readRound, stream([...responseEvents("resp_cont1", [read("call_cut")], true), ...responseEvents("resp_cont2", [said("msg_hello", "Hello, World!")])]))
        const answer = yield* send
        expect(answer.status).toBe(200)
        expect(upstream.requests).toHaveLength(2)
        const events = eventsOf(answer.text)
        // Before: the cut call went to the agent (held, then released with the second attempt's events).
        expect(answer.text).not.toContain("thread_read")
        expect(events.filter((e) => e.type === "response.created").length).toBe(1)
        expect(lastResponse(events)).toEqual({ id: "resp_read", done: [[0, "msg_hello"]] })
        const sequence = events.map((e) => e.sequence_number)
        expect(sequence).toEqual(sequence.map((_, i) => i))
        const { items, runs } = yield* record
        expect(items).toEqual([["user_message", "user@0.0"], ["assistant_message", "msg_hello"]])
        expect(runs).toEqual(["completed"])
      })
    ))

  it.live("a continuation that restarts after part of it reached the agent: the answer ends with response.failed, the run fails", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        upstream.enqueue(
          readRound,
          stream([
            ...responseEvents("resp_cont1", [said("msg_retracted", "Retracted words.")]).filter((e) => e.type !== "response.completed"),
            ...responseEvents("resp_cont2", [said("msg_hello", "Hello, World!")])
          ])
        )
        const answer = yield* send
        expect(answer.status).toBe(200)
        const events = eventsOf(answer.text)
        // Before: "Retracted words." and "Hello, World!" both at output 0 of one response, which completed.
        expect(events.filter((e) => e.type === "response.output_item.done").map((e) => (e.item as Item).id)).toEqual(["msg_retracted"])
        expect(events.at(-1)).toMatchObject({ type: "response.failed", response: { status: "failed", error: { code: "server_error" } } })
        expect(events.some((e) => e.type === "response.completed")).toBe(false)
        const { runs } = yield* record
        expect(runs).toEqual(["failed"])
      })
    ))
})
