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
const rawPost = (port: number, path: string, headers: ReadonlyArray<string>, body: string | Buffer) =>
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
        message: "unsupported Content-Type \"application/vnd.baton+json\"; send application/json in UTF-8 (no charset, or charset=utf-8)"
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

  it.live("a body declared in a charset other than UTF-8 is 415 naming UTF-8, not decoded as UTF-8; nothing is written", () =>
    Effect.gen(function*() {
      const server = yield* HttpServer.HttpServer
      const port = server.address._tag === "TcpAddress" ? server.address.port : 0
      const threadId = (yield* raw(HttpClientRequest.post("/threads").pipe(
        HttpClientRequest.bearerToken(adminToken),
        HttpClientRequest.bodyUnsafeJson({ providerInstance: "codex" })
      ))).body!.threadId as string
      const auth = ["authorization", `Bearer ${adminToken}`]
      const body = JSON.stringify({ text: "caf\u00e9" })
      for (
        const contentType of [
          "application/json; charset=latin1",
          "application/json;charset=ISO-8859-1",
          "application/json; charset=\"utf-16\"",
          "application/json; foo=\"x; y\"; charset=latin1"
        ]
      ) {
        const answer = yield* rawPost(port, `/threads/${threadId}/messages`, [...auth, "content-type", contentType], body).pipe(Effect.timeout(Duration.seconds(5)))
        expect([answer.status, JSON.parse(answer.body)]).toEqual([415, {
          _tag: "UnsupportedMediaType",
          contentType,
          message: `unsupported Content-Type "${contentType}"; send application/json in UTF-8 (no charset, or charset=utf-8)`
        }])
      }
      expect((yield* raw(get(`/threads/${threadId}/runs`))).body?.runs).toEqual([])
      // UTF-8 declared in any of its spellings is accepted, and the text arrives intact.
      // A `charset=` inside another parameter's quoted value is that value, not the charset (it was read as the
      // charset, and this body refused as latin1; new user b46srv).
      for (
        const contentType of [
          "application/json; charset=UTF-8",
          "application/json; charset=\"utf-8\"",
          "application/json;charset=utf8",
          "application/json; foo=\"x; charset=latin1\"",
          "application/json; foo=\"a\\\"; charset=latin1\"; charset=utf-8"
        ]
      ) {
        const answer = yield* rawPost(port, `/threads/${threadId}/messages`, [...auth, "content-type", contentType], body).pipe(Effect.timeout(Duration.seconds(5)))
        expect([contentType, answer.status]).toEqual([contentType, 202])
      }
    }).pipe(Effect.provide(serve(Harness.make([{ name: "codex", window: 200_000, inject: true }])))))

  it.live("a JSON body that starts with a UTF-8 byte order mark is accepted (RFC 8259 §8.1) and its text stored without it", () =>
    Effect.gen(function*() {
      const server = yield* HttpServer.HttpServer
      const port = server.address._tag === "TcpAddress" ? server.address.port : 0
      const auth = ["authorization", `Bearer ${adminToken}`, "content-type", "application/json"]
      const created = yield* rawPost(port, "/threads", auth, "\uFEFF" + JSON.stringify({ providerInstance: "codex", title: "caf\u00e9" }))
      expect(created.status).toBe(201)
      const threadId = JSON.parse(created.body).threadId as string
      const sent = yield* rawPost(port, `/threads/${threadId}/messages`, auth, "\uFEFF" + JSON.stringify({ text: "\uFEFFhello" }))
      expect(sent.status).toBe(202)
      const thread = yield* raw(get(`/threads/${threadId}`))
      expect((thread.body!.thread as { title: string }).title).toBe("caf\u00e9")
      const items = yield* raw(get(`/threads/${threadId}/items`))
      // Only the mark before the JSON text goes: one inside a string is the client's text.
      expect((items.body!.items as ReadonlyArray<{ kind: string; text: string }>).filter((i) => i.kind === "user_message").map((i) => i.text)).toEqual(["\uFEFFhello"])
    }).pipe(Effect.provide(serve(Harness.make([{ name: "codex", window: 200_000, inject: true }])))))

  it.live("a body with a truncated 4-byte UTF-8 sequence is 400 not valid UTF-8, not stored with U+FFFD in its place", () =>
    Effect.gen(function*() {
      const server = yield* HttpServer.HttpServer
      const port = server.address._tag === "TcpAddress" ? server.address.port : 0
      const auth = ["authorization", `Bearer ${adminToken}`, "content-type", "application/json"]
      const threadId = JSON.parse((yield* rawPost(port, "/threads", auth, JSON.stringify({ providerInstance: "codex" }))).body).threadId as string
      // F0 9F 98 is 😀 (F0 9F 98 80) without its last byte: the platform's decoder made it one U+FFFD, 3 bytes long
      // like the sequence, so the length check that catches other invalid sequences let it through.
      const truncated = Buffer.concat([Buffer.from("{\"text\":\"a"), Buffer.from([0xf0, 0x9f, 0x98]), Buffer.from("b\"}")])
      const answer = yield* rawPost(port, `/threads/${threadId}/messages`, auth, truncated).pipe(Effect.timeout(Duration.seconds(5)))
      expect([answer.status, JSON.parse(answer.body).reason]).toEqual([400, "the body is not valid UTF-8"])
      expect((yield* raw(get(`/threads/${threadId}/runs`))).body?.runs).toEqual([])
      // A U+FFFD the client sends (EF BF BD) is text like any other.
      const replacement = yield* rawPost(port, `/threads/${threadId}/messages`, auth, JSON.stringify({ text: "a\uFFFDb" }))
      expect(replacement.status).toBe(202)
    }).pipe(Effect.provide(serve(Harness.make([{ name: "codex", window: 200_000, inject: true }])))))
})
