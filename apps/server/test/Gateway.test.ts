/**
 * The gateway's Anthropic Messages endpoints over HTTP (issue 14), against a loopback Anthropic upstream: Baton's own
 * refusals in Anthropic's error shape (no token, a body that is not a Messages request, an unrouted model), the
 * upstream's errors and answers passed back byte for byte (streamed, whole, count_tokens), and the record: a
 * conversation's shared prefix stored once (a retried request's too), a diverging history recorded as such and taken as
 * the new baseline; a record that fails after forwarding started never keeps the answer from the agent.
 */
import type { Item } from "@baton/contracts"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Database } from "@baton/persistence"
import { GatewayThreads } from "@baton/orchestration"
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { adminToken, client, get, raw, readToken } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"

const usage = { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }

/** A Messages request from an agent: `body` as given (a string is sent as is), the Baton token unless told. */
const messages = (body: unknown, headers: Record<string, string> = { "x-api-key": adminToken }, path = "/v1/messages?beta=true") =>
  HttpClientRequest.post(path).pipe(
    HttpClientRequest.setHeaders({ "anthropic-version": "2023-06-01", "anthropic-beta": "claude-code-20250219", ...headers }),
    HttpClientRequest.bodyText(typeof body === "string" ? body : JSON.stringify(body), "application/json")
  )

const user = (text: string) => ({ role: "user", content: [{ type: "text", text }] })
const assistant = (text: string) => ({ role: "assistant", content: [{ type: "text", text }] })

/** A gateway over one loopback upstream routed for `claude-*`, on SQLite or on a fresh Postgres schema. */
const withGateway = <A, E, R>(test: (upstream: ModelApi.ModelApi) => Effect.Effect<A, E, R>, dialect: "SQLite" | "Postgres" = "SQLite") =>
  Effect.scoped(Effect.gen(function*() {
    const upstream = yield* ModelApi.start
    const sqlite = yield* gatewaySettings(upstream)
    const settings = dialect === "SQLite"
      ? sqlite
      : { ...sqlite, database: { _tag: "postgres" as const, url: Context.get(yield* Layer.build(Database.layerPgSchema()), Database.PgSchemaUrl) } }
    return yield* test(upstream).pipe(Effect.provide(serveSettings(settings)))
  }))

/** The gateway's settings over one upstream, SQLite in `dir` (a second server on the same `dir` is a restart). */
const gatewaySettings = (upstream: ModelApi.ModelApi, dir?: string) =>
  settingsFor([instance("anthropic", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, dir, {
    gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
  })

/** Every item of the only thread, and the thread's id. */
const onlyThread = Effect.gen(function*() {
  const api = yield* client()
  const threads = (yield* api.threads.list({ urlParams: {} })).threads
  expect(threads.length).toBe(1)
  const threadId = threads[0]!.id
  const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
  const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
  return { threadId, items, runs }
})

describe("Gateway", () => {
  it.live("a restart between two requests of a conversation loses nothing and stores nothing twice", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-gateway-restart-"))
      const settings = yield* gatewaySettings(upstream, dir)
      const session = { "x-api-key": adminToken, "x-claude-code-session-id": "session-r" }
      const send = (history: ReadonlyArray<unknown>, answer: string) =>
        Effect.gen(function*() {
          upstream.enqueue(ModelApi.answer("anthropic-messages", answer, usage))
          expect((yield* raw(messages({ model: "claude-x", max_tokens: 10, stream: true, messages: history }, session))).status).toBe(200)
        })
      // The first server process answers the first request, then stops; a second one on the same database goes on.
      yield* send([user("first")], "one").pipe(Effect.provide(serveSettings(settings)))
      yield* Effect.gen(function*() {
        yield* send([user("first"), assistant("one"), user("second")], "two")
        const { items, threadId } = yield* onlyThread
        expect(items.map((i) => [i.kind, i.text])).toEqual([
          ["user_message", "first"],
          ["assistant_message", "one"],
          ["user_message", "second"],
          ["assistant_message", "two"]
        ])
        const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
        expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
      }).pipe(Effect.provide(serveSettings(settings)))
    })))

  it.live("refuses a missing or unknown token, a malformed body and an unrouted model in Anthropic's error shape, sending nothing upstream", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const request = { model: "claude-x", max_tokens: 10, messages: [user("hi")] }
        const none = yield* raw(messages(request, {}))
        expect(none.status).toBe(401)
        expect(none.body).toMatchObject({ type: "error", error: { type: "authentication_error" } })
        const wrong = yield* raw(messages(request, { "x-api-key": "sk-ant-not-a-baton-token-000" }))
        expect(wrong.status).toBe(401)
        expect(wrong.body).toMatchObject({ type: "error", error: { type: "authentication_error", message: "Baton gateway: unknown token; send a Baton token as x-api-key (ANTHROPIC_API_KEY) or Authorization: Bearer" } })

        const malformed = yield* raw(messages("{\"model\": \"claude-x\", "))
        expect(malformed.status).toBe(400)
        expect(malformed.body).toEqual({ type: "error", error: { type: "invalid_request_error", message: "the body is not a JSON object" } })
        const noMessages = yield* raw(messages({ model: "claude-x", max_tokens: 10 }))
        expect(noMessages.status).toBe(400)
        expect(noMessages.body).toEqual({ type: "error", error: { type: "invalid_request_error", message: "messages: expected an array of {role, content} (content a string or an array of blocks)" } })

        const unrouted = yield* raw(messages({ ...request, model: "gpt-5" }))
        expect(unrouted.status).toBe(404)
        expect(unrouted.body).toEqual({ type: "error", error: { type: "not_found_error", message: "model: gpt-5 is not routed by this Baton gateway (routes: claude-*)" } })

        expect(upstream.requests.length).toBe(0)
        const api = yield* client()
        expect((yield* api.threads.list({ urlParams: {} })).threads).toEqual([])
      })
    ))

  // New user hnew: a body nesting 100,000 arrays (in `metadata`, or in a new message's `tool_use` input after a
  // conversation's shared history) exhausted the stack of the gateway's walks over it: an empty 500, nothing said.
  it.live("refuses a body nesting deeper than 512 levels in Anthropic's error shape, in a new message or a top-level field; 512 levels go through", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        // A body's text with `"DEEP"` replaced by `levels` nested arrays (JSON.stringify cannot write 100,000 levels).
        const deep = (body: unknown, levels: number) => JSON.stringify(body).replace("\"DEEP\"", "[".repeat(levels) + "]".repeat(levels))
        const session = { "x-api-key": adminToken, "x-claude-code-session-id": "session-deep" }
        const call = { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "x", input: { a: "DEEP" } }] }
        const result = { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "ok" }] }
        // The call's `input` object is the body's 6th level: 506 arrays in it make 512.
        upstream.enqueue(ModelApi.answer("anthropic-messages", "fine", usage))
        const first = [user("first"), call, result]
        const deepest = yield* raw(messages(deep({ model: "claude-x", max_tokens: 10, messages: first }, 506), session))
        expect(deepest.status).toBe(200)

        const refusal = { type: "error", error: { type: "invalid_request_error", message: "the body nests arrays and objects more than 512 levels deep" } }
        const next = { model: "claude-x", max_tokens: 10, messages: [...first, assistant("fine"), user("again"), { ...call, content: [{ ...call.content[0]!, id: "toolu_2" }] }] }
        const inMessage = yield* raw(messages(deep(next, 506).replace("\"DEEP\"", "[".repeat(100_000) + "]".repeat(100_000)), session))
        expect([inMessage.status, inMessage.body]).toEqual([400, refusal])
        const inField = yield* raw(messages(deep({ model: "claude-x", max_tokens: 10, messages: [user("hi")], metadata: "DEEP" }, 100_000)))
        expect([inField.status, inField.body]).toEqual([400, refusal])
        expect(upstream.requests.length).toBe(1)
        expect((yield* onlyThread).items.map((i) => i.kind)).toEqual(["user_message", "tool_call", "tool_result", "assistant_message"])
      })
    ))

  // New user hnew: curl sends `Expect: 100-continue` with a body over 1 MiB; forwarded, the upstream's client refused
  // it ("expect header not supported") and the agent got a 502 saying the upstream could not be reached.
  it.live("an agent's Expect: 100-continue is met by Baton, not forwarded: the request goes upstream and is answered", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const reply = ModelApi.answer("anthropic-messages", "big one", usage)
        upstream.enqueue(reply)
        const body = { model: "claude-x", max_tokens: 10, stream: true, messages: [user("x".repeat(1_100_000))] }
        const answer = yield* raw(messages(body, { "x-api-key": adminToken, expect: "100-continue" }))
        expect([answer.status, answer.text]).toEqual([200, reply.body])
        expect(upstream.requests.length).toBe(1)
        expect(upstream.requests[0]!.headers["expect"]).toBeUndefined()
        expect((yield* onlyThread).runs.map((r) => r.status)).toEqual(["completed"])
      })
    ))

  it.live("another method than POST on a gateway path is the API's RouteNotFound in JSON, not an empty 404", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        for (const path of ["/v1/messages", "/v1/responses", "/v1/chat/completions"]) {
          const answer = yield* raw(get(path))
          expect([answer.status, answer.headers["content-type"]]).toEqual([404, "application/json"])
          expect(answer.body).toMatchObject({ _tag: "RouteNotFound", method: "GET", path })
        }
        expect(upstream.requests.length).toBe(0)
      })
    ))

  // 403 since stop 36 (it was 401 `authentication_error`, as for an unknown token, unlike the API's 403 for the same
  // token on a write), and count_tokens says why in its own words (it said "each is recorded": nothing is).
  it.live("refuses the read-only token as read-only (403, not as an unknown token), sending nothing upstream", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] },
        auth: { token: adminToken, readToken }
      })
      yield* Effect.gen(function*() {
        const request = { model: "claude-x", max_tokens: 10, messages: [user("hi")] }
        const refused = yield* raw(messages(request, { "x-api-key": readToken }))
        expect(refused.status).toBe(403)
        expect(refused.body).toEqual({
          type: "error",
          error: {
            type: "permission_error",
            message: "Baton gateway: the read-only token may not send model requests (each is recorded); send the admin token as x-api-key (ANTHROPIC_API_KEY) or Authorization: Bearer"
          }
        })
        const counted = yield* raw(messages({ model: "claude-x", messages: [user("count me")] }, { "x-api-key": readToken }, "/v1/messages/count_tokens?beta=true"))
        expect([counted.status, counted.body]).toEqual([403, {
          type: "error",
          error: {
            type: "permission_error",
            message: "Baton gateway: the read-only token may not send requests upstream (they go with the instance's key); send the admin token as x-api-key (ANTHROPIC_API_KEY) or Authorization: Bearer"
          }
        }])
        const responses = yield* raw(messages({ model: "claude-x", input: "hi" }, { authorization: `Bearer ${readToken}` }, "/v1/responses"))
        expect(responses.status).toBe(403)
        expect(responses.body).toMatchObject({ error: { type: "invalid_request_error", code: null, param: null } })
        expect(upstream.requests.length).toBe(0)
        const api = yield* client()
        expect((yield* api.threads.list({ urlParams: {} })).threads).toEqual([])
      }).pipe(Effect.provide(serveSettings(settings)))
    })))

  it.live("a session's next body that is no JSON only after its shared history (a raw line break in a later key) is refused as malformed", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const session = { "x-api-key": adminToken, "x-claude-code-session-id": "session-m" }
        const first = JSON.stringify({ model: "claude-x", max_tokens: 10, messages: [user("hi")] })
        upstream.enqueue(ModelApi.answer("anthropic-messages", "one", usage))
        expect((yield* raw(messages(first, session))).status).toBe(200)
        // The same bytes through the first message (GatewayBody reuses it), then a key no JSON allows.
        const next = `${first.slice(0, -2)},${JSON.stringify(assistant("one"))},${JSON.stringify(user("two"))}],"z\n":1}`
        const malformed = yield* raw(messages(next, session))
        expect(malformed.status).toBe(400)
        expect(malformed.body).toEqual({ type: "error", error: { type: "invalid_request_error", message: "the body is not a JSON object" } })
        expect(upstream.requests.length).toBe(1)
      })
    ))

  it.live("a record that fails after forwarding started never reaches the agent: no run, or the run failed; the next request stores what was missed, once", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewaySettings(upstream)
      if (settings.database._tag !== "sqlite") return yield* Effect.die("expected SQLite")
      // A second connection to the server's database file injects the failures (SQLite triggers).
      const sql = Context.get(yield* Layer.build(Database.layerSqlite(settings.database.path)), SqlClient.SqlClient)
      yield* Effect.gen(function*() {
        const session = { "x-api-key": adminToken, "x-claude-code-session-id": "session-f" }
        const send = (history: ReadonlyArray<unknown>, answer: string) =>
          Effect.gen(function*() {
            const reply = ModelApi.answer("anthropic-messages", answer, usage)
            upstream.enqueue(reply)
            const response = yield* raw(messages({ model: "claude-x", max_tokens: 10, stream: true, messages: history }, session))
            expect(response.status).toBe(200)
            expect(response.text).toBe(reply.body)
          })
        // The request's record fails (no run can be written): the agent gets its answer all the same.
        yield* sql`CREATE TRIGGER no_runs BEFORE INSERT ON runs BEGIN SELECT RAISE(ABORT, 'injected failure'); END`
        yield* send([user("first")], "one")
        yield* sql`DROP TRIGGER no_runs`
        expect((yield* onlyThread).runs).toEqual([])
        // The reply's record fails: the agent gets its answer, the run is marked failed.
        yield* sql`CREATE TRIGGER no_reply BEFORE INSERT ON items WHEN NEW.text = 'two' BEGIN SELECT RAISE(ABORT, 'injected failure'); END`
        yield* send([user("first"), assistant("one"), user("second")], "two")
        yield* sql`DROP TRIGGER no_reply`
        const failed = (yield* onlyThread).runs
        expect(failed.map((r) => [r.status, r.failureCode])).toEqual([["failed", "output_not_recorded"]])
        // The next request repeats the history: what was missed is stored now, everything once.
        yield* send([user("first"), assistant("one"), user("second"), assistant("two"), user("third")], "three")
        const { items, runs } = yield* onlyThread
        expect(items.map((i) => i.text)).toEqual(["first", "one", "second", "two", "third", "three"])
        expect(runs.map((r) => r.status)).toEqual(["failed", "completed"])
      }).pipe(Effect.provide(serveSettings(settings)))
    })))

  it.live("an answer already whole when the request's record begins is recorded with it in one unit of work (the thread's lock taken once per request)", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewaySettings(upstream)
      if (settings.database._tag !== "sqlite") return yield* Effect.die("expected SQLite")
      // A second connection to the server's database file reads the thread's lock counter (one per unit of work).
      const sql = Context.get(yield* Layer.build(Database.layerSqlite(settings.database.path)), SqlClient.SqlClient)
      yield* Effect.gen(function*() {
        const session = { "x-api-key": adminToken, "x-claude-code-session-id": "session-one" }
        const locks = Effect.map(sql<{ n: number }>`SELECT lock_version AS n FROM threads`, (rows) => rows.map((r) => r.n))
        const send = (history: ReadonlyArray<unknown>, answer: string, stream: boolean) =>
          Effect.gen(function*() {
            upstream.enqueue(stream ? ModelApi.answer("anthropic-messages", answer, usage) : {
              status: 200,
              contentType: "application/json",
              body: JSON.stringify({ id: `msg_${answer}`, type: "message", role: "assistant", model: "claude-x", content: [{ type: "text", text: answer }], stop_reason: "end_turn", usage: { input_tokens: 7, output_tokens: 3 } })
            })
            const response = yield* raw(messages({ model: "claude-x", max_tokens: 10, stream, messages: history }, session))
            expect(response.status).toBe(200)
          })
        // The loopback upstream answers at once: each answer is whole before the request's record takes its turn.
        yield* send([user("first")], "one", true)
        expect(yield* locks).toEqual([1])
        yield* send([user("first"), assistant("one"), user("second")], "two", true)
        expect(yield* locks).toEqual([2])
        yield* send([user("first"), assistant("one"), user("second"), assistant("two"), user("third")], "three", false)
        expect(yield* locks).toEqual([3])
        // Recorded as when apart: every message once, each run completed with its usage, the baseline with the replies.
        const { items, runs, threadId } = yield* onlyThread
        expect(items.map((i) => i.text)).toEqual(["first", "one", "second", "two", "third", "three"])
        expect(runs.map((r) => r.status)).toEqual(["completed", "completed", "completed"])
        const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
        expect(events.filter((e) => e.type === "gateway.usage").length).toBe(3)
        expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
        // Each run's events in order, the request's and the reply's items in one append.
        const runEvents = events.filter((e) => ["run.queued", "items.appended", "gateway.usage", "run.completed"].includes(e.type))
        expect(runEvents.map((e) => e.type)).toEqual(Array.from({ length: 3 }, () => ["run.queued", "items.appended", "gateway.usage", "run.completed"]).flat())
        const appended = runEvents.filter((e) => e.type === "items.appended").map((e) => (e.payload as { itemIds: ReadonlyArray<string> }).itemIds)
        expect(appended).toEqual([[items[0]!.id, items[1]!.id], [items[2]!.id, items[3]!.id], [items[4]!.id, items[5]!.id]])
      }).pipe(Effect.provide(serveSettings(settings)))
    })))

  it.live("a request of 3,001 new messages (more than one insert statement binds on SQLite) goes upstream as sent and is recorded once, in order", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* gatewaySettings(upstream)
      if (settings.database._tag !== "sqlite") return yield* Effect.die("expected SQLite")
      const sql = Context.get(yield* Layer.build(Database.layerSqlite(settings.database.path)), SqlClient.SqlClient)
      yield* Effect.gen(function*() {
        upstream.enqueue(ModelApi.answer("anthropic-messages", "done", usage))
        const history = Array.from({ length: 3_001 }, (_, i) => (i % 2 === 0 ? user(`question ${i}`) : assistant(`answer ${i}`)))
        const body = { model: "claude-x", max_tokens: 10, stream: true, messages: history }
        const answer = yield* raw(messages(body, { "x-api-key": adminToken, "x-claude-code-session-id": "session-many" }))
        expect(answer.status).toBe(200)
        expect(upstream.requests.map((r) => r.body)).toEqual([JSON.stringify(body)])
        const rows = yield* sql<{ seq: number; kind: string; text: string }>`SELECT seq, kind, text FROM items ORDER BY seq`
        expect(rows.length).toBe(3_002)
        const expected = [...history.map((m, i) => [i + 1, m.role === "user" ? "user_message" : "assistant_message", m.content[0]!.text]), [3_002, "assistant_message", "done"]]
        expect(rows.map((r) => [Number(r.seq), r.kind, r.text])).toEqual(expected)
        const runs = yield* sql<{ status: string }>`SELECT status FROM runs`
        expect(runs.map((r) => r.status)).toEqual(["completed"])
      }).pipe(Effect.provide(serveSettings(settings)))
    })))

  it.live("passes a stream back byte for byte with Baton's key upstream (Bearer works too); the reply and usage are recorded", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const reply = ModelApi.answer("anthropic-messages", "Hello there", usage)
        upstream.enqueue(reply)
        const body = { model: "claude-x", max_tokens: 10, stream: true, messages: [user("hi")] }
        const answer = yield* raw(messages(body, { authorization: `Bearer ${adminToken}` }))
        expect(answer.status).toBe(200)
        expect(answer.headers["content-type"]).toBe("text/event-stream")
        expect(answer.text).toBe(reply.body)
        const sent = upstream.requests[0]!
        expect(sent.url).toBe("/v1/messages?beta=true")
        expect(sent.body).toBe(JSON.stringify(body))
        expect(sent.headers["x-api-key"]).toBe(marker)
        expect(sent.headers["authorization"]).toBeUndefined()
        expect(sent.headers["anthropic-beta"]).toBe("claude-code-20250219")
        expect(sent.headers["anthropic-version"]).toBe("2023-06-01")

        const { items, runs } = yield* onlyThread
        expect(items.map((i) => [i.kind, i.text])).toEqual([["user_message", "hi"], ["assistant_message", "Hello there"]])
        expect(runs.map((r) => [r.status, r.prompt])).toEqual([["completed", "hi"]])
        const api = yield* client()
        const view = yield* api.runs.get({ path: { runId: runs[0]!.id }, urlParams: {} })
        expect(view.cost).toMatchObject({ inputTokens: 10, outputTokens: 5, costUsd: (10 * 3 + 5 * 15) / 1_000_000 })
        // The thread's snapshot (what the dashboard shows): its lane on the routed instance and the cost totals.
        const snapshot = yield* api.threads.get({ path: { threadId: runs[0]!.threadId } })
        expect(snapshot.activeProviderInstance).toBe("anthropic")
        expect(snapshot.costs.totals).toMatchObject({ runs: 1, inputTokens: 10, outputTokens: 5 })
      })
    ))

  it.live("passes an upstream error back as the upstream's status and body; the run fails with the upstream's reason (an overflow as overflow)", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const error = ModelApi.error(400, "prompt is too long: 300000 tokens > 200000 maximum")
        const refusal = ModelApi.error(400, "messages.0.content: Input should be a valid list")
        upstream.enqueue(error, refusal)
        const answer = yield* raw(messages({ model: "claude-x", max_tokens: 10, stream: true, messages: [user("hi")] }))
        expect(answer.status).toBe(400)
        expect(answer.text).toBe(error.body)
        const second = yield* raw(messages({ model: "claude-x", max_tokens: 10, messages: [user("hi"), { role: "assistant", content: "?" }, user("again")] }))
        expect(second.status).toBe(400)
        expect(second.text).toBe(refusal.body)
        const { runs } = yield* onlyThread
        // The overflow is the agent's own overflow error already (Anthropic's words, passed back as they came): the
        // run says overflow, so the API and the dashboard show it as one; another 400 is a refusal.
        expect(runs.map((r) => [r.status, r.failureCode])).toEqual([["failed", "overflow"], ["failed", "provider_refused"]])
        expect(runs[0]!.failureReason).toContain("prompt is too long: 300000 tokens > 200000 maximum")
      })
    ))

  it.live("an upstream that cannot be reached: the agent's 502 says why (the transport's own words, never the key); the run fails with the same reason", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      // Port 9 on loopback: nothing listens there (connection refused).
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream, { baseUrl: "http://127.0.0.1:9" })], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
      })
      yield* Effect.gen(function*() {
        const answer = yield* raw(messages({ model: "claude-x", max_tokens: 10, messages: [user("hi")] }))
        expect(answer.status).toBe(502)
        const body = JSON.parse(answer.text) as { type: string; error: { type: string; message: string } }
        expect(body.error.type).toBe("api_error")
        expect(body.error.message).toMatch(/^Baton could not reach the upstream of model claude-x: Transport error \(POST http:\/\/127\.0\.0\.1:9\/v1\/messages[^)]*\): connect ECONNREFUSED 127\.0\.0\.1:9$/)
        expect(answer.text).not.toContain(marker)
        const { runs } = yield* onlyThread
        expect(runs.map((r) => [r.status, r.failureCode])).toEqual([["failed", "provider_unavailable"]])
        expect(runs[0]!.failureReason).toContain("ECONNREFUSED")
      }).pipe(Effect.provide(serveSettings(settings)))
    })))

  it.live("an error event in the upstream's stream fails the run with what it says: overloaded is unavailable, prompt is too long is overflow", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const streamed = (type: string, message: string): ModelApi.Reply => ({
          status: 200,
          contentType: "text/event-stream",
          body: [
            { type: "message_start", message: { id: "msg_e", type: "message", role: "assistant", model: "m", content: [], stop_reason: null, usage: { input_tokens: 5, output_tokens: 1 } } },
            { type: "error", error: { type, message } }
          ].map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join("")
        })
        upstream.enqueue(streamed("overloaded_error", "Overloaded"), streamed("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"))
        const first = yield* raw(messages({ model: "claude-x", max_tokens: 10, stream: true, messages: [user("hi")] }))
        expect(first.status).toBe(200)
        expect(first.text).toContain("overloaded_error")
        const second = yield* raw(messages({ model: "claude-x", max_tokens: 10, stream: true, messages: [user("hi"), { role: "assistant", content: "?" }, user("again")] }))
        expect(second.text).toContain("prompt is too long")
        const { runs } = yield* onlyThread
        expect(runs.map((r) => [r.status, r.failureCode])).toEqual([["failed", "provider_unavailable"], ["failed", "overflow"]])
        expect(runs[0]!.failureReason).toBe("the upstream's stream reported an error: overloaded_error: Overloaded")
      })
    ))

  it.live("a session id sent as UTF-8 bytes is titled as written, not as Latin-1 mojibake; a title never cuts an emoji in half", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        upstream.enqueue(ModelApi.answer("anthropic-messages", "ok", { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }))
        // What an agent's UTF-8 header is on the wire: each byte one Latin-1 character of the header value.
        const session = "sess-日本-✓"
        const onWire = Buffer.from(session, "utf8").toString("latin1")
        const answer = yield* raw(messages({ model: "claude-x", max_tokens: 10, messages: [user("hi")] }, { "x-api-key": adminToken, "x-claude-code-session-id": onWire }))
        expect(answer.status).toBe(200)
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        expect(threads.map((t) => t.title)).toEqual([`Agent session ${session}`])
        expect(GatewayThreads.titlePart(`${"a".repeat(35)}🚀 and more`)).toBe(`${"a".repeat(35)}🚀`)
        expect(GatewayThreads.titlePart("séssion")).toBe("séssion")
      })
    ))

  // Found by a review (stop 35): an empty `x-claude-code-session-id` keyed the conversation like none (by its start)
  // but titled the thread "Agent session " (nothing after it).
  it.live("an empty session id is titled like none: by the conversation's start", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        upstream.enqueue(ModelApi.answer("anthropic-messages", "ok", { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }))
        const answer = yield* raw(messages({ model: "claude-x", max_tokens: 10, messages: [user("hi")] }, { "x-api-key": adminToken, "x-claude-code-session-id": "" }))
        expect(answer.status).toBe(200)
        const api = yield* client()
        const titles = (yield* api.threads.list({ urlParams: {} })).threads.map((t) => t.title)
        expect(titles).toHaveLength(1)
        expect(titles[0]).toMatch(/^Agent conversation [0-9a-f]{8}$/)
      })
    ))

  it.live("a failed run's reason says the upstream's error in words first (the dashboard's run header shows 80 characters)", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const body = JSON.stringify({ type: "error", error: { type: "overloaded_error", message: "Overloaded" }, request_id: "req_011CVq" })
        upstream.enqueue({ status: 529, contentType: "application/json", body })
        const answer = yield* raw(messages({ model: "claude-x", max_tokens: 10, messages: [user("hi")] }))
        expect(answer.status).toBe(529)
        expect(answer.text).toBe(body)
        const { runs } = yield* onlyThread
        expect(runs.map((r) => [r.status, r.failureCode])).toEqual([["failed", "provider_unavailable"]])
        expect(runs[0]!.failureReason!.slice(0, 80)).toContain("the upstream answered HTTP 529 (overloaded_error): Overloaded")
        // The body as it came stays after the words (its request id, for the provider's support).
        expect(runs[0]!.failureReason).toContain(body)
      })
    ))

  it.live("passes a whole (non-streamed) answer and count_tokens back unchanged; count_tokens records nothing", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const whole = JSON.stringify({
          id: "msg_whole",
          type: "message",
          role: "assistant",
          model: "claude-x",
          content: [{ type: "text", text: "whole answer" }],
          stop_reason: "end_turn",
          usage: { input_tokens: 7, output_tokens: 3 }
        })
        upstream.enqueue({ status: 200, contentType: "application/json", body: whole })
        const answer = yield* raw(messages({ model: "claude-x", max_tokens: 10, messages: [user("hello")] }))
        expect(answer.status).toBe(200)
        expect(answer.text).toBe(whole)
        const counted = yield* raw(messages({ model: "claude-x", messages: [user("count me")] }, { "x-api-key": adminToken }, "/v1/messages/count_tokens?beta=true"))
        expect(counted.status).toBe(200)
        expect(upstream.counts.length).toBe(1)
        expect(upstream.counts[0]!.headers["x-api-key"]).toBe(marker)
        expect(counted.body).toEqual({ input_tokens: Math.ceil(upstream.counts[0]!.body.length / 4) })
        const { items, runs } = yield* onlyThread
        expect(items.map((i) => [i.kind, i.text, i.messageId])).toEqual([["user_message", "hello", "user@0.0"], ["assistant_message", "whole answer", "msg_whole"]])
        expect(runs.length).toBe(1)
      })
    ))

  for (const dialect of ["SQLite", "Postgres"] as const) {
  it.live(`${dialect}: stores a conversation's shared prefix once; a diverging history is recorded and becomes the new baseline`, () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const session = { "x-api-key": adminToken, "x-claude-code-session-id": "session-1" }
        const system = [{ type: "text", text: "You are a test agent.", cache_control: { type: "ephemeral" } }]
        const send = (history: ReadonlyArray<unknown>, answer: string) =>
          Effect.gen(function*() {
            upstream.enqueue(ModelApi.answer("anthropic-messages", answer, usage))
            const response = yield* raw(messages({ model: "claude-x", max_tokens: 10, stream: true, system, messages: history }, session))
            expect(response.status).toBe(200)
          })
        yield* send([user("first")], "one")
        // The agent moves its cache breakpoint to the newest message: the same conversation, extended.
        yield* send([user("first"), assistant("one"), { role: "user", content: [{ type: "text", text: "second", cache_control: { type: "ephemeral" } }] }], "two")
        // A retry of the same request (its reply recorded) answered the same adds nothing.
        yield* send([user("first"), assistant("one"), user("second")], "two")
        // The agent compacted: its history now starts with a summary.
        yield* send([user("summary of first and second"), user("third")], "three")

        const { items, runs, threadId } = yield* onlyThread
        expect(items.map((i) => [i.kind, i.text])).toEqual([
          ["user_message", "first"],
          ["assistant_message", "one"],
          ["user_message", "second"],
          ["assistant_message", "two"],
          ["user_message", "summary of first and second"],
          ["user_message", "third"],
          ["assistant_message", "three"]
        ])
        expect(runs.map((r) => r.prompt)).toEqual(["first", "second", "second", "third"])
        const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
        const diverged = events.filter((e) => e.type === "gateway.diverged")
        // The retry (run 3) is no divergence (`gateway.retried`); the compaction is.
        expect(diverged.map((e) => e.payload)).toEqual([{ runId: runs[3]!.id, sharedMessages: 0, storedMessages: 4, requestMessages: 2 }])
        expect(events.filter((e) => e.type === "gateway.retried").map((e) => e.payload)).toEqual([{ runId: runs[2]!.id, requestMessages: 3, storedMessages: 4 }])
      }), dialect))
  }
})
