/**
 * A provider switch (`/v1/messages` to an `openai-chat` instance) whose upstream misbehaves after answering 2xx: a
 * whole answer that is not JSON, a stream that breaks off mid-block, and a stream whose data lines are not JSON. The agent gets a clear error in Anthropic's
 * protocol (a 502 `api_error`; an SSE `error` event after the blocks already sent), never an empty "completed" message
 * or a stream that simply stops, and the run is failed, not completed.
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { adminToken, client, parseSse, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

const messages = (body: unknown) =>
  HttpClientRequest.post("/v1/messages?beta=true").pipe(
    HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01" }),
    HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
  )

/** A loopback Chat Completions upstream that answers every request with `handler`. */
const upstream = (handler: (res: Http.ServerResponse) => void) =>
  Effect.acquireRelease(
    Effect.async<Http.Server & { readonly url: string }>((resume) => {
      const server = Http.createServer((req, res) => {
        req.resume()
        req.on("end", () => handler(res))
      })
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed(Object.assign(server, { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }))))
    }),
    (server) =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  )

/** A gateway routing `gpt-*` to an `openai-chat` instance at `url` (`claude-*` to an unused Anthropic one). */
const withGateway = <A, E, R>(url: string, test: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const anthropic = yield* ModelApi.start
    const settings = yield* settingsFor(
      [
        instance("anthropic", "anthropic-messages", anthropic),
        { ...instance("chat", "openai-chat", anthropic, { contextWindow: 32_000, autoCompactThreshold: null }), baseUrl: `${url}/v1` }
      ],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: [{ model: "claude-*", provider: "anthropic" }, { model: "gpt-*", provider: "chat" }] } }
    )
    return yield* test.pipe(Effect.provide(serveSettings(settings)))
  })

/** The statuses of the only gateway thread's runs. */
const runStatuses = Effect.gen(function*() {
  const threads = (yield* (yield* client()).threads.list({ urlParams: {} })).threads
  expect(threads).toHaveLength(1)
  const page = yield* raw(HttpClientRequest.get(`/threads/${threads[0]!.id}/runs`).pipe(HttpClientRequest.bearerToken(adminToken)))
  return (page.body!.runs as ReadonlyArray<{ readonly status: string }>).map((r) => r.status)
})

describe("GatewaySwitch: an upstream that misbehaves after a 2xx", () => {
  it.live("a whole answer that is not JSON is a 502 api_error (whole and streamed), and the run fails", () =>
    Effect.scoped(Effect.gen(function*() {
      const up = yield* upstream((res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.end("<html>bad gateway</html>")
      })
      yield* withGateway(up.url, Effect.gen(function*() {
        for (const stream of [false, true]) {
          const answer = yield* raw(messages({ model: "gpt-x", max_tokens: 100, stream, messages: [{ role: "user", content: "hi" }] }))
          expect(answer.status).toBe(502)
          expect(answer.body).toEqual({ type: "error", error: { type: "api_error", message: "the upstream's answer is not a JSON object" } })
        }
        expect(yield* runStatuses).toEqual(["failed", "failed"])
      }))
    })), { timeout: 60_000 })

  it.live("a stream that breaks off mid-block ends with an Anthropic error event, and the run fails", () =>
    Effect.scoped(Effect.gen(function*() {
      const up = yield* upstream((res) => {
        res.writeHead(200, { "content-type": "text/event-stream" })
        res.write(`data: ${JSON.stringify({ id: "c1", choices: [{ index: 0, delta: { role: "assistant", content: "Hello" }, finish_reason: null }] })}\n\n`)
        setTimeout(() => res.socket?.destroy(), 100)
      })
      yield* withGateway(up.url, Effect.gen(function*() {
        const answer = yield* raw(messages({ model: "gpt-x", max_tokens: 100, stream: true, messages: [{ role: "user", content: "hi" }] }))
        expect(answer.status).toBe(200)
        const events = parseSse(answer.text).map((e) => JSON.parse(e.data) as { readonly type: string })
        expect(events.map((e) => e.type)).toEqual(["message_start", "content_block_start", "content_block_delta", "error"])
        expect(events.at(-1)).toEqual({ type: "error", error: { type: "api_error", message: "the upstream's stream broke off" } })
        expect(yield* runStatuses).toEqual(["failed"])
      }))
    })), { timeout: 60_000 })

  it.live("a stream of data lines that are not JSON, then [DONE], is an Anthropic error event (no empty message), and the run fails", () =>
    Effect.scoped(Effect.gen(function*() {
      const up = yield* upstream((res) => {
        res.writeHead(200, { "content-type": "text/event-stream" })
        res.end("data: <html>bad gateway</html>\n\ndata: not json either\n\ndata: [DONE]\n\n")
      })
      yield* withGateway(up.url, Effect.gen(function*() {
        const answer = yield* raw(messages({ model: "gpt-x", max_tokens: 100, stream: true, messages: [{ role: "user", content: "hi" }] }))
        expect(answer.status).toBe(200)
        const events = parseSse(answer.text).map((e) => JSON.parse(e.data) as { readonly type: string })
        expect(events).toEqual([{ type: "error", error: { type: "api_error", message: "the upstream's stream carried no answer (no JSON chunk before [DONE])" } }])
        expect(yield* runStatuses).toEqual(["failed"])
      }))
    })), { timeout: 60_000 })
})
