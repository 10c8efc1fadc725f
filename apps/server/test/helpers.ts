/**
 * The server under test: the real API (`Server.httpLayer`) over a harness orchestrator with its run driver, served on
 * `NodeHttpServer.layerTest` (a real HTTP server on a loopback port, and an `HttpClient` aimed at it).
 */
import { Api } from "@baton/contracts"
import { RunDriver } from "@baton/orchestration"
import { Server } from "@baton/server"
import type { Harness } from "@baton/testing"
import { HttpApiClient, HttpClient, HttpClientRequest, HttpServer } from "@effect/platform"
import { NodeHttpClient, NodeHttpServer } from "@effect/platform-node"
import * as Http from "node:http"
import { Effect, Layer, Redacted } from "effect"

export const adminToken = "admin-token-0123456789abcdef"
export const readToken = "read-token-0123456789abcdef"

/**
 * `NodeHttpServer.layerTest` on a Node server that answers Node's own refusals in the API's shape, as `baton serve`'s
 * listener does (`Server.answerNodeRefusals`): a real server on a loopback port and an `HttpClient` aimed at it.
 */
export const testListener = HttpServer.layerTestClient.pipe(
  Layer.provide(NodeHttpClient.layerWithoutAgent),
  Layer.provide(NodeHttpClient.makeAgentLayer({ keepAlive: false })),
  Layer.provideMerge(NodeHttpServer.layer(() => Server.answerNodeRefusals(Http.createServer()), { port: 0 }))
)

/**
 * The API served over `h`'s orchestrator with the two test tokens and `maxBodyBytes` (default 2 MiB); the dashboard
 * from `webDir` (default: the repository's `apps/web/dist`).
 */
export const serve = (h: Harness.Harness, options: { readonly maxBodyBytes?: number; readonly webDir?: string } = {}) =>
  Server.httpLayer({
    tokens: { admin: Redacted.make(adminToken), read: Redacted.make(readToken) },
    maxBodyBytes: options.maxBodyBytes ?? 2 * 1024 * 1024,
    ...(options.webDir === undefined ? {} : { webDir: options.webDir })
  }).pipe(
    Layer.provideMerge(testListener),
    Layer.provideMerge(RunDriver.RunDriver.Default),
    Layer.provideMerge(h.layer)
  )

/** A typed client of `BatonApi` sending `token` (default the admin token). */
export const client = (token: string = adminToken) =>
  HttpApiClient.make(Api.BatonApi, {
    transformClient: HttpClient.mapRequest(HttpClientRequest.bearerToken(token))
  })

/** A raw request's status, text, headers and JSON body (`null` unless the body is JSON). */
export const raw = (request: HttpClientRequest.HttpClientRequest) =>
  Effect.gen(function*() {
    const response = yield* HttpClient.execute(request)
    const text = yield* response.text
    const json = (response.headers["content-type"] ?? "").startsWith("application/json") && text !== ""
    return { status: response.status, body: json ? JSON.parse(text) as Record<string, unknown> : null, text, headers: response.headers }
  })

/** A JSON POST with the admin token (or `token`). */
export const post = (path: string, body: unknown, token: string | null = adminToken) =>
  HttpClientRequest.post(path).pipe(
    HttpClientRequest.bodyUnsafeJson(body),
    token === null ? (r) => r : HttpClientRequest.bearerToken(token)
  )

/** A GET with the admin token (or `token`). */
export const get = (path: string, token: string | null = adminToken) =>
  HttpClientRequest.get(path).pipe(token === null ? (r) => r : HttpClientRequest.bearerToken(token))

/** One parsed server-sent event. */
export interface SseEvent {
  readonly id: string | undefined
  readonly event: string
  readonly data: string
}

/** Parses a complete `text/event-stream` body (comments and `retry:` lines ignored). */
export const parseSse = (text: string): ReadonlyArray<SseEvent> =>
  text.split("\n\n").filter((block) => block.trim() !== "").flatMap((block) => {
    let id: string | undefined
    let event = "message"
    const data: Array<string> = []
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue
      const at = line.indexOf(":")
      const field = at < 0 ? line : line.slice(0, at)
      const value = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "")
      if (field === "id") id = value
      else if (field === "event") event = value
      else if (field === "data") data.push(value)
    }
    return data.length === 0 && id === undefined ? [] : [{ id, event, data: data.join("\n") }]
  })
