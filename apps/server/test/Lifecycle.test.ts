/**
 * Shutdown with a turn in flight: closing the server's scope (what SIGTERM does) ends the running turn with a
 * recorded outcome — `interrupted`, `process_stopped` — and a queued run behind it is left for the next process,
 * which reconciles it at start. On SQLite and Postgres.
 */
import { RunId } from "@baton/contracts"
import { ThreadStore } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Server, type ServerConfig } from "@baton/server"
import { HttpServer, HttpServerResponse } from "@effect/platform"
import { Context, Deferred, Duration, Effect, Exit, Layer, Scope } from "effect"
import * as Http from "node:http"
import { client, get, raw, serve } from "./helpers.js"

const providers = (db: string, idNamespace: string) =>
  Harness.make([{ name: "codex", window: 200_000, inject: true }], { db, idNamespace, config: { interruptTimeoutMillis: 500 } })

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("a shutdown interrupts the turn in flight and records it; the next process reconciles the queued run", () =>
    Harness.withDbFile((file) =>
      Effect.gen(function*() {
        const h = providers(file, "first")
        const scope = yield* Scope.make()
        const context = yield* Layer.buildWithScope(serve(h), scope)
        const { running, queued } = yield* Effect.gen(function*() {
          const api = yield* client()
          const { threadId } = yield* api.threads.create({ payload: { providerInstance: "codex" as never }, headers: {} })
          const gate = yield* Deferred.make<void>()
          h.script.enqueue({ ...Harness.reply(10), hold: { afterItems: 1, gate } })
          const running = yield* api.messages.send({ path: { threadId }, payload: { text: "long" }, headers: {} })
          const queued = yield* api.messages.send({ path: { threadId }, payload: { text: "next" }, headers: {} })
          for (let i = 0; i < 300; i++) {
            const view = yield* raw(get(`/runs/${running.runId}`))
            if ((view.body?.run as { status: string } | undefined)?.status === "running") break
            yield* Effect.sleep(Duration.millis(10))
          }
          return { running, queued }
        }).pipe(Effect.provide(context))
        yield* Scope.close(scope, Exit.void)

        // The next process on the same database.
        const after = yield* Effect.gen(function*() {
          const store = yield* ThreadStore
          const first = yield* store.getRun(RunId.make(running.runId))
          const second = yield* store.getRun(RunId.make(queued.runId))
          return [first, second].map((r) => r._tag === "Some" ? [r.value.status, r.value.failureCode] : null)
        }).pipe(Effect.provide(serve(providers(file, "second"))))
        expect(after).toEqual([["interrupted", "process_stopped"], ["interrupted", "process_restarted"]])
      })
    ))
})

/**
 * A `POST path` with a JSON body on `127.0.0.1:port` on a connection of its own: its status, `Retry-After` and JSON
 * body (the reason of a failure as the body's `error`).
 */
const postTo = (port: number, path: string) =>
  Effect.async<{ status: number; retryAfter: string | undefined; body: unknown }>((resume) => {
    const request = Http.request({ host: "127.0.0.1", port, path, method: "POST", timeout: 5_000, agent: false, headers: { "content-type": "application/json" } }, (response) => {
      let body = ""
      response.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")))
      response.on("end", () => resume(Effect.succeed({ status: response.statusCode ?? 0, retryAfter: response.headers["retry-after"], body: JSON.parse(body) as unknown })))
    })
    request.on("timeout", () => request.destroy(new Error("no answer within 5 s")))
    request.on("error", (e) => resume(Effect.succeed({ status: 0, retryAfter: undefined, body: { error: e.message } })))
    request.end(JSON.stringify({ model: "m", messages: [] }))
  })

/**
 * `GET /healthz` on `127.0.0.1:port` on a connection of its own: its status, `Retry-After` and body; no answer within
 * 5 s or a refused connection is status 0 with the reason as the body.
 */
const healthz = (port: number) =>
  Effect.async<{ status: number; retryAfter: string | undefined; body: string }>((resume) => {
    const request = Http.get({ host: "127.0.0.1", port, path: "/healthz", timeout: 5_000, agent: false }, (response) => {
      let body = ""
      response.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")))
      response.on("end", () => resume(Effect.succeed({ status: response.statusCode ?? 0, retryAfter: response.headers["retry-after"], body })))
    })
    request.on("timeout", () => request.destroy(new Error("no answer within 5 s")))
    request.on("error", (e) => resume(Effect.succeed({ status: 0, retryAfter: undefined, body: e.message })))
  })

describe("start-up", () => {
  it.live("a request that reaches the socket before the API is attached gets 503 ServerStarting with Retry-After, not a hang", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(
        Server.listener({ host: "127.0.0.1", port: 0, limits: { shutdownTimeoutMs: 1_000 } as ServerConfig.ServerSettings["limits"] }),
        scope
      )
      const address = Context.get(context, HttpServer.HttpServer).address
      const port = address._tag === "TcpAddress" ? address.port : 0
      // No answer (the hang this test is about) or a refused connection: status 0, the reason as the body.
      const answer = yield* healthz(port)
      yield* Scope.close(scope, Exit.void)
      expect(answer.status).toBe(503)
      expect(answer.retryAfter).toBe("1")
      expect(JSON.parse(answer.body)).toMatchObject({ _tag: "ServerStarting" })
    }))

  // Found by a user: during a shutdown, a request on a connection still open was answered 503 "the server is
  // starting": the start-up answer stood in for the API once it had left, too.
  it.live("a request after the API has left the listener (the shutdown) gets 503 ServerStopping, not ServerStarting", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(
        Server.listener({ host: "127.0.0.1", port: 0, limits: { shutdownTimeoutMs: 5_000 } as ServerConfig.ServerSettings["limits"] }),
        scope
      )
      const address = Context.get(context, HttpServer.HttpServer).address
      const port = address._tag === "TcpAddress" ? address.port : 0
      const ask = healthz(port)
      // An app served on the listener, then gone (its scope closed, as the API's is first at a shutdown).
      const app = yield* Scope.make()
      yield* Layer.buildWithScope(HttpServer.serve(HttpServerResponse.text("served")), app).pipe(Effect.provide(context))
      const served = yield* ask
      yield* Scope.close(app, Exit.void)
      const after = yield* ask
      yield* Scope.close(scope, Exit.void)
      expect([served.status, served.body]).toEqual([200, "served"])
      expect([after.status, after.retryAfter]).toEqual([503, "1"])
      expect(JSON.parse(after.body)).toMatchObject({ _tag: "ServerStopping" })
    }))

  // Found at an earlier stop: an agent's request while the server started or stopped got Baton's `_tag` body, which
  // its SDK reads as no error it knows; in its own protocol it is an overload its SDK retries after Retry-After.
  it.live("a gateway request while starting or stopping gets 503 in the agent's protocol with Retry-After", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(
        Server.listener({ host: "127.0.0.1", port: 0, limits: { shutdownTimeoutMs: 5_000 } as ServerConfig.ServerSettings["limits"] }),
        scope
      )
      const address = Context.get(context, HttpServer.HttpServer).address
      const port = address._tag === "TcpAddress" ? address.port : 0
      const starting = "Baton: the server is starting; retry in a moment"
      const openAi = (message: string) => ({ error: { message, type: "server_error", param: null, code: null } })
      const early = yield* Effect.all([postTo(port, "/v1/messages"), postTo(port, "/v1/responses"), postTo(port, "/v1/chat/completions?x=1")])
      expect(early).toEqual([
        { status: 503, retryAfter: "1", body: { type: "error", error: { type: "overloaded_error", message: starting } } },
        { status: 503, retryAfter: "1", body: openAi(starting) },
        { status: 503, retryAfter: "1", body: openAi(starting) }
      ])
      // The API's paths keep the API's body.
      expect(yield* postTo(port, "/threads")).toMatchObject({ status: 503, body: { _tag: "ServerStarting" } })
      const app = yield* Scope.make()
      yield* Layer.buildWithScope(HttpServer.serve(HttpServerResponse.text("served")), app).pipe(Effect.provide(context))
      yield* Scope.close(app, Exit.void)
      const late = yield* postTo(port, "/v1/responses")
      yield* Scope.close(scope, Exit.void)
      expect(late).toEqual({ status: 503, retryAfter: "1", body: openAi("Baton: the server is stopping; retry in a moment (it or another process may serve then)") })
    }))
})
