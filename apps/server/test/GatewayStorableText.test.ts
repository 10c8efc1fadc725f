/**
 * A gateway request or answer whose text holds a NUL character (U+0000) or a lone surrogate is forwarded as sent and
 * recorded with each such character as U+FFFD (`Text.toStorableText`), as a provider's output is: on Postgres, which
 * refuses NUL in text (22021), the request's run and items were not recorded at all (the conversation lost from the
 * thread, an error logged), and SQLite kept the raw NUL, so the two dialects differed (new user r35). A
 * whitespace-only message, which the API refuses, is the agent's to send: recorded as it came. Loopback
 * upstream over real HTTP, on SQLite and Postgres.
 */
import type { Item } from "@baton/contracts"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Database } from "@baton/persistence"
import { Context, Effect, Layer } from "effect"
import { adminToken, client, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

const usage = { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }

const withGateway = <A, E, R>(test: (upstream: ModelApi.ModelApi) => Effect.Effect<A, E, R>, dialect: "SQLite" | "Postgres") =>
  Effect.scoped(Effect.gen(function*() {
    const upstream = yield* ModelApi.start
    const sqlite = yield* settingsFor(
      [instance("anthropic", "anthropic-messages", upstream), instance("openai", "openai-responses", upstream), instance("chat", "openai-chat", upstream)],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: [{ model: "claude-*", provider: "anthropic" }, { model: "gpt-*", provider: "openai" }, { model: "chat-*", provider: "chat" }] } }
    )
    const settings = dialect === "SQLite"
      ? sqlite
      : { ...sqlite, database: { _tag: "postgres" as const, url: Context.get(yield* Layer.build(Database.layerPgSchema()), Database.PgSchemaUrl) } }
    return yield* test(upstream).pipe(Effect.provide(serveSettings(settings)))
  }))

const messages = (history: ReadonlyArray<unknown>) =>
  HttpClientRequest.post("/v1/messages").pipe(
    HttpClientRequest.setHeaders({ "anthropic-version": "2023-06-01", "x-api-key": adminToken, "x-claude-code-session-id": "session-nul" }),
    HttpClientRequest.bodyText(JSON.stringify({ model: "claude-x", max_tokens: 10, stream: true, messages: history }), "application/json")
  )

describe("Gateway: text that cannot be stored as sent", () => {
  for (const dialect of ["SQLite", "Postgres"] as const) {
    it.live(`${dialect}: a NUL or a lone surrogate in a request or an answer is recorded as U+FFFD; nothing is lost`, () =>
      withGateway((upstream) =>
        Effect.gen(function*() {
          upstream.enqueue(ModelApi.answer("anthropic-messages", "an answer with a NUL: \u0000.", usage))
          const history = [
            { role: "user", content: [{ type: "text", text: "a NUL \u0000 and a lone \ud800 surrogate" }] }
          ]
          const response = yield* raw(messages(history))
          expect(response.status).toBe(200)
          // Forwarded as the agent sent it.
          expect(JSON.parse(upstream.requests[0]!.body).messages).toEqual(history)

          const api = yield* client()
          const threads = (yield* api.threads.list({ urlParams: {} })).threads
          expect(threads.length).toBe(1)
          const threadId = threads[0]!.id
          const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
          expect(items.map((i) => [i.kind, i.text])).toEqual([
            ["user_message", "a NUL \uFFFD and a lone \uFFFD surrogate"],
            ["assistant_message", "an answer with a NUL: \uFFFD."]
          ])
          const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
          expect(runs.map((r) => [r.status, r.prompt])).toEqual([["completed", "a NUL \uFFFD and a lone \uFFFD surrogate"]])
        }), dialect), 60_000)

    // The API refuses a whitespace-only message (`Commands.MessageText`, as the dashboard does); an agent's message
    // reaches the gateway as the agent sent it and is forwarded and recorded so, whitespace only or not.
    it.live(`${dialect}: an agent's whitespace-only message is forwarded and recorded as it came (the API's refusal is not the gateway's)`, () =>
      withGateway((upstream) =>
        Effect.gen(function*() {
          upstream.enqueue(ModelApi.answer("anthropic-messages", "still here", usage))
          const history = [{ role: "user", content: [{ type: "text", text: "   \n\t" }] }]
          const response = yield* raw(messages(history))
          expect(response.status).toBe(200)
          expect(JSON.parse(upstream.requests[0]!.body).messages).toEqual(history)
          const api = yield* client()
          const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
          const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
          expect(items.map((i) => [i.kind, i.text])).toEqual([["user_message", "   \n\t"], ["assistant_message", "still here"]])
          const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
          expect(runs.map((r) => [r.status, r.prompt])).toEqual([["completed", "   \n\t"]])
        }), dialect), 60_000)

    it.live(`${dialect}: an upstream error whose body holds a NUL: the run fails with the upstream's words, not output_not_recorded`, () =>
      withGateway((upstream) =>
        Effect.gen(function*() {
          // The message holds a NUL (written \u0000 in the body's JSON).
          const body = JSON.stringify({ type: "error", error: { type: "invalid_request_error", message: "bad \u0000" } })
          upstream.enqueue({ status: 400, contentType: "application/json", body })
          const response = yield* raw(messages([{ role: "user", content: "hi" }]))
          expect([response.status, response.text]).toEqual([400, body])
          const api = yield* client()
          const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
          const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
          expect(runs.map((r) => [r.status, r.failureCode])).toEqual([["failed", "provider_refused"]])
          expect(runs[0]!.failureReason).toBe(
            `the upstream answered HTTP 400 (invalid_request_error): bad \uFFFD; body: ${body}`
          )
        }), dialect), 60_000)

    it.live(`${dialect}: the same on /v1/responses and /v1/chat/completions`, () =>
      withGateway((upstream) =>
        Effect.gen(function*() {
          const post = (path: string, body: unknown) =>
            raw(HttpClientRequest.post(path).pipe(
              HttpClientRequest.setHeaders({ accept: "text/event-stream", authorization: `Bearer ${adminToken}` }),
              HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
            ))
          upstream.enqueue(ModelApi.answer("openai-responses", "responses \u0000 answer", usage))
          const responses = yield* post("/v1/responses", {
            model: "gpt-x",
            stream: true,
            input: [{ type: "message", role: "user", content: [{ type: "input_text", text: "responses \u0000 prompt" }] }]
          })
          upstream.enqueue(ModelApi.answer("openai-chat", "chat \u0000 answer", usage))
          const chat = yield* post("/v1/chat/completions", { model: "chat-x", stream: true, messages: [{ role: "user", content: "chat \u0000 prompt" }] })
          expect([responses.status, chat.status]).toEqual([200, 200])
          const api = yield* client()
          const threads = (yield* api.threads.list({ urlParams: {} })).threads
          const texts = yield* Effect.forEach(threads, (t) =>
            Effect.map(api.items.list({ path: { threadId: t.id }, urlParams: {} }), (page) => page.items.map((i) => i.text)))
          expect(texts).toEqual([
            ["responses \uFFFD prompt", "responses \uFFFD answer"],
            ["chat \uFFFD prompt", "chat \uFFFD answer"]
          ])
          // Without a session the title shows the start of the key's fingerprint, not of the wire's name
          // (`Agent conversation -respons`, `Agent conversation -chat:st`).
          expect(threads.map((t) => t.title)).toEqual([
            expect.stringMatching(/^Agent conversation [0-9a-f]{8}$/),
            expect.stringMatching(/^Agent conversation [0-9a-f]{8}$/)
          ])
        }), dialect), 60_000)

    it.live(`${dialect}: a NUL in the session key or the model: the conversation is recorded (title, key, model as U+FFFD)`, () =>
      withGateway((upstream) =>
        Effect.gen(function*() {
          // Codex's session may come from the body (`prompt_cache_key`) and the model is the agent's own string: both
          // can hold any JSON string; a routed model matches `gpt-*` whatever follows.
          const send = () =>
            raw(HttpClientRequest.post("/v1/responses").pipe(
              HttpClientRequest.setHeaders({ accept: "text/event-stream", authorization: `Bearer ${adminToken}` }),
              HttpClientRequest.bodyText(JSON.stringify({
                model: "gpt-\u0000x",
                stream: true,
                prompt_cache_key: "key \u0000 \ud800",
                input: [{ type: "message", role: "user", content: [{ type: "input_text", text: "hello" }] }]
              }), "application/json")
            ))
          upstream.enqueue(ModelApi.answer("openai-responses", "first", usage))
          expect((yield* send()).status).toBe(200)
          const api = yield* client()
          const threads = (yield* api.threads.list({ urlParams: {} })).threads
          expect(threads.map((t) => t.title)).toEqual(["Agent session key \uFFFD \uFFFD"])
          const runs = (yield* api.runs.list({ path: { threadId: threads[0]!.id }, urlParams: {} })).runs
          expect(runs.map((r) => [r.status, r.prompt])).toEqual([["completed", "hello"]])
          // The same session again is the same conversation (its key is found as it was stored).
          upstream.enqueue(ModelApi.answer("openai-responses", "second", usage))
          expect((yield* send()).status).toBe(200)
          expect((yield* api.threads.list({ urlParams: {} })).threads.map((t) => t.id)).toEqual([threads[0]!.id])
        }), dialect), 60_000)
  }
})
