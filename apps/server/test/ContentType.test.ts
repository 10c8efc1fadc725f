/**
 * A body the API would not decode as JSON is refused at once (415), never left hanging: a `+json` type such as
 * `application/vnd.baton+json`, or no `Content-Type` at all, used to make HttpApi read again, as bytes, a body the
 * guard had already consumed — the request waited forever (found by the fuzz test). Nothing of it is written.
 */
import { Harness } from "@baton/testing"
import { HttpClientRequest, HttpServer } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import * as Http from "node:http"
import { adminToken, get, raw, serve } from "./helpers.js"

/** A POST of `body` with exactly `headers` (raw pairs: no `Content-Type` unless given), answered status and body. */
const rawPost = (port: number, path: string, headers: ReadonlyArray<string>, body: string) =>
  Effect.async<{ readonly status: number; readonly body: string }>((resume) => {
    const request = Http.request({
      host: "127.0.0.1",
      port,
      method: "POST",
      path,
      headers: ["host", `127.0.0.1:${port}`, "content-length", String(Buffer.byteLength(body)), ...headers]
    })
    request.on("response", (response) => {
      let text = ""
      response.setEncoding("utf8").on("data", (chunk: string) => void (text += chunk))
      response.on("end", () => resume(Effect.succeed({ status: response.statusCode ?? 0, body: text })))
    })
    request.on("error", (e) => resume(Effect.succeed({ status: 0, body: e.message })))
    request.end(body)
    return Effect.sync(() => void request.destroy())
  })

describe("content types", () => {
  it.live("a +json type and a body without Content-Type are 415 at once; nothing is written", () =>
    Effect.gen(function*() {
      const created = yield* raw(HttpClientRequest.post("/threads").pipe(
        HttpClientRequest.bearerToken(adminToken),
        HttpClientRequest.bodyUnsafeJson({ providerInstance: "codex" })
      ))
      const threadId = created.body!.threadId as string
      const vendor = yield* raw(HttpClientRequest.post(`/threads/${threadId}/messages`).pipe(
        HttpClientRequest.bearerToken(adminToken),
        HttpClientRequest.bodyText(JSON.stringify({ text: "hello" }), "application/vnd.baton+json")
      )).pipe(Effect.timeout(Duration.seconds(5)))
      expect([vendor.status, vendor.body]).toEqual([415, {
        _tag: "UnsupportedMediaType",
        contentType: "application/vnd.baton+json",
        message: "unsupported Content-Type \"application/vnd.baton+json\"; send application/json"
      }])

      const server = yield* HttpServer.HttpServer
      const port = server.address._tag === "TcpAddress" ? server.address.port : 0
      const untyped = yield* rawPost(port, `/threads/${threadId}/messages`, ["authorization", `Bearer ${adminToken}`], JSON.stringify({ text: "hi" }))
        .pipe(Effect.timeout(Duration.seconds(5)))
      expect(untyped.status).toBe(415)
      expect(JSON.parse(untyped.body)).toMatchObject({ _tag: "UnsupportedMediaType", contentType: "" })

      const runs = yield* raw(get(`/threads/${threadId}/runs`))
      expect(runs.body?.runs).toEqual([])
    }).pipe(Effect.provide(serve(Harness.make([{ name: "codex", window: 200_000, inject: true }])))))
})
