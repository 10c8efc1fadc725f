/**
 * The gateway's record when an agent retries a request whose reply Baton already recorded (issue 14, docs/gateway.md
 * "Retried requests"): the agent sends the same body again (after a network error or a timeout on its side), so its
 * history is the stored conversation without the reply Baton recorded for that same request. Not a divergence:
 * nothing of the request is stored again, a `gateway.retried` event says so; the retry's answer is stored as its run's
 * only when it differs from the recorded reply, and the conversation goes on from it; the first answer stays in the
 * thread, readable by id. Loopback upstreams over real HTTP, on SQLite and Postgres; the reply recorded with the
 * request (an answer already whole) and apart (an answer still streaming when the request is recorded).
 */
import type { Item } from "@baton/contracts"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Database } from "@baton/persistence"
import { Context, Effect, Fiber, Layer, Schedule } from "effect"
import { adminToken, client, get, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"

const usage = { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }

/** A gateway over one loopback upstream: `claude-*` to Anthropic, `gpt-*` to Responses; SQLite or a fresh Postgres schema. */
const withGateway = <A, E, R>(test: (upstream: ModelApi.ModelApi) => Effect.Effect<A, E, R>, dialect: "SQLite" | "Postgres" = "SQLite") =>
  Effect.scoped(Effect.gen(function*() {
    const upstream = yield* ModelApi.start
    const sqlite = yield* settingsFor(
      [instance("anthropic", "anthropic-messages", upstream), instance("openai", "openai-responses", upstream)],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: [{ model: "claude-*", provider: "anthropic" }, { model: "gpt-*", provider: "openai" }] } }
    )
    const settings = dialect === "SQLite"
      ? sqlite
      : { ...sqlite, database: { _tag: "postgres" as const, url: Context.get(yield* Layer.build(Database.layerPgSchema()), Database.PgSchemaUrl) } }
    return yield* test(upstream).pipe(Effect.provide(serveSettings(settings)))
  }))

const user = (text: string) => ({ role: "user", content: [{ type: "text", text }] })
const assistant = (text: string) => ({ role: "assistant", content: [{ type: "text", text }] })

/** A streamed `/v1/messages` request of one Claude Code session. */
const messages = (history: ReadonlyArray<unknown>) =>
  HttpClientRequest.post("/v1/messages?beta=true").pipe(
    HttpClientRequest.setHeaders({ "anthropic-version": "2023-06-01", "x-api-key": adminToken, "x-claude-code-session-id": "session-retry" }),
    HttpClientRequest.bodyText(JSON.stringify({ model: "claude-x", max_tokens: 10, stream: true, system: [{ type: "text", text: "You are Claude Code." }], messages: history }), "application/json")
  )

/** The only thread: its id, items, runs, and its `gateway.diverged` / `gateway.retried` payloads. */
const record = Effect.gen(function*() {
  const api = yield* client()
  const threads = (yield* api.threads.list({ urlParams: {} })).threads
  expect(threads.length).toBe(1)
  const threadId = threads[0]!.id
  const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
  const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
  const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
  return {
    items,
    runs,
    diverged: events.filter((e) => e.type === "gateway.diverged").map((e) => e.payload),
    retried: events.filter((e) => e.type === "gateway.retried").map((e) => e.payload)
  }
})

/** How many runs the thread has (0 before its first request). */
const runCount = Effect.gen(function*() {
  const api = yield* client()
  const threads = (yield* api.threads.list({ urlParams: {} })).threads
  return threads.length === 0 ? 0 : (yield* api.runs.list({ path: { threadId: threads[0]!.id }, urlParams: {} })).runs.length
})

/**
 * Sends `request` answered with `reply`. `apart`: the answer's head and first event go out at once and the rest only
 * once the request's run is recorded (so the reply is recorded apart from the request, at the stream's end); else the
 * answer is whole at once (recorded with the request).
 */
const send = (upstream: ModelApi.ModelApi, request: HttpClientRequest.HttpClientRequest, reply: ModelApi.Reply, apart: boolean) =>
  Effect.gen(function*() {
    if (!apart) {
      upstream.enqueue(reply)
      expect((yield* raw(request)).status).toBe(200)
      return
    }
    const runs = yield* runCount
    let release = () => {}
    const hold = new Promise<void>((resolve) => (release = resolve))
    upstream.enqueue({ ...reply, rest: { at: reply.body.indexOf("\n\n") + 2, hold } })
    const response = yield* Effect.fork(raw(request))
    // The request's run is recorded while the answer streams.
    yield* Effect.repeat(runCount, { until: (n) => n === runs + 1, schedule: Schedule.spaced("10 millis") })
    release()
    expect((yield* Fiber.join(response)).status).toBe(200)
  })

const answer = (text: string) => ModelApi.answer("anthropic-messages", text, usage)

describe("Gateway: a retried request whose reply was recorded", () => {
  for (const dialect of ["SQLite", "Postgres"] as const) {
    for (const apart of [false, true]) {
      it.live(`${dialect}${apart ? ", the reply recorded apart" : ""}: a retry is no divergence; every message is stored once and the first answer stays readable`, () =>
        withGateway((upstream) =>
          Effect.gen(function*() {
            yield* send(upstream, messages([user("hello")]), answer("first answer"), apart)
            // The agent did not get the answer (its side timed out) and sends the same request again: another answer.
            yield* send(upstream, messages([user("hello")]), answer("second answer"), apart)
            // The conversation goes on from the answer the agent got.
            yield* send(upstream, messages([user("hello"), assistant("second answer"), user("next")]), answer("third answer"), apart)
            // That request retried too, and answered the same: nothing is stored again.
            yield* send(upstream, messages([user("hello"), assistant("second answer"), user("next")]), answer("third answer"), apart)
            yield* send(upstream, messages([user("hello"), assistant("second answer"), user("next"), assistant("third answer"), user("last")]), answer("fourth answer"), apart)

            const { diverged, items, retried, runs } = yield* record
            expect(diverged).toEqual([])
            expect(retried).toEqual([
              { runId: runs[1]!.id, requestMessages: 1, storedMessages: 2 },
              { runId: runs[3]!.id, requestMessages: 3, storedMessages: 4 }
            ])
            // Every message once: the first answer as its run's (superseded by the retry's), the rest of the conversation.
            const runOf = new Map(runs.map((r, i) => [r.id, i]))
            expect(items.map((i) => [runOf.get(i.runId!), i.kind, i.text])).toEqual([
              [0, "user_message", "hello"],
              [0, "assistant_message", "first answer"],
              [1, "assistant_message", "second answer"],
              [2, "user_message", "next"],
              [2, "assistant_message", "third answer"],
              [4, "user_message", "last"],
              [4, "assistant_message", "fourth answer"]
            ])
            expect(runs.map((r) => r.status)).toEqual(["completed", "completed", "completed", "completed", "completed"])
            // The first answer is still readable by id.
            const api = yield* client()
            expect((yield* api.items.get({ path: { itemId: items[1]!.id }, urlParams: {} })).item.text).toBe("first answer")
          }), dialect))
    }
  }

  it.live("Responses (Codex): a retried request whose reply (a message and a call) was recorded is no divergence, its answer stored once", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const responses = (input: ReadonlyArray<unknown>) =>
          HttpClientRequest.post("/v1/responses").pipe(
            HttpClientRequest.setHeaders({ accept: "text/event-stream", authorization: `Bearer ${adminToken}`, "thread-id": "codex-retry" }),
            HttpClientRequest.bodyText(JSON.stringify({ model: "gpt-x", stream: true, instructions: "You are Codex.", input }), "application/json")
          )
        const prompt = { type: "message", role: "user", content: [{ type: "input_text", text: "list files" }] }
        const reply = (text: string, callId: string) =>
          ModelApi.answer("openai-responses", text, usage, [{ id: callId, name: "exec_command", arguments: JSON.stringify({ cmd: "ls" }) }])
        yield* send(upstream, responses([prompt]), reply("Listing.", "call_1"), false)
        yield* send(upstream, responses([prompt]), reply("Listing now.", "call_2"), false)
        const answered = [
          prompt,
          { type: "message", role: "assistant", content: [{ type: "output_text", text: "Listing now." }] },
          { type: "function_call", name: "exec_command", arguments: JSON.stringify({ cmd: "ls" }), call_id: "call_2" },
          { type: "function_call_output", call_id: "call_2", output: "a.txt" }
        ]
        yield* send(upstream, responses(answered), ModelApi.answer("openai-responses", "One file.", usage), false)

        const { diverged, items, retried, runs } = yield* record
        expect(diverged).toEqual([])
        expect(retried).toEqual([{ runId: runs[1]!.id, requestMessages: 1, storedMessages: 3 }])
        expect(items.map((i) => [i.kind, i.text])).toEqual([
          ["user_message", "list files"],
          ["assistant_message", "Listing."],
          ["tool_call", JSON.stringify({ cmd: "ls" })],
          ["assistant_message", "Listing now."],
          ["tool_call", JSON.stringify({ cmd: "ls" })],
          ["tool_result", "a.txt"],
          ["assistant_message", "One file."]
        ])
        expect(items.map((i) => i.toolCallId).filter((id) => id !== null)).toEqual(["call_1", "call_2", "call_2"])
      })
    ))
})
