/**
 * A write that carries a body is authorised before its body is looked at: without a valid token it is 401, with the
 * read-only token 403, whatever is wrong with the body (over the limit, chunked, not JSON, another media type). The
 * body guard ran first, and a client without a token was answered 413, 411, 415 or 400 (new user b46srv), and the
 * server read up to the whole limit of an unauthenticated client's body. Now a body of a client without a valid token
 * is read at most 64 KiB (`BodyDrain.refuseUnread`): a larger one is not waited for, the answer comes at once and the
 * connection is closed; the gateway's refusals of a token likewise (Node read such a body whole, the connection kept).
 * Nothing of a refused request is written.
 */
import { Harness } from "@baton/testing"
import { HttpServer } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Data, Effect } from "effect"
import * as Net from "node:net"
import { adminToken, get, post, raw, readToken, serve } from "./helpers.js"

/** A request that got no answer (a hang): the server waited for a body it should not read. */
class NoAnswer extends Data.TaggedError("NoAnswer")<{ readonly head: string }> {}

/**
 * Sends `head` (request line and headers, without the blank line) then `body` on a fresh connection and keeps the
 * connection open; resolves once the server has closed it, with the answer's status, JSON body and `Connection` header.
 */
const exchange = (head: string, body: string) =>
  Effect.flatMap(HttpServer.HttpServer, (server) =>
    Effect.async<{ readonly status: number; readonly body: unknown; readonly connection: string | null}>((resume) => {
      const port = (server.address as HttpServer.TcpAddress).port
      const socket = Net.connect(port, "127.0.0.1", () => void socket.write(`${head}\r\n\r\n${body}`))
      let text = ""
      const parse = () => {
        const at = text.indexOf("\r\n\r\n")
        const top = at < 0 ? text : text.slice(0, at)
        const rest = at < 0 ? "" : text.slice(at + 4)
        return {
          status: Number(top.split(" ")[1]),
          body: rest === "" ? null : JSON.parse(rest) as unknown,
          connection: /^connection: (.*)$/im.exec(top)?.[1]?.trim() ?? null
        }
      }
      socket.on("data", (chunk) => void (text += chunk.toString("utf8")))
      socket.on("end", () => resume(Effect.succeed(parse())))
      socket.on("error", () => resume(Effect.succeed(parse())))
      return Effect.sync(() => socket.destroy())
    })).pipe(Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => new NoAnswer({ head }) }))

/** The head of `POST /threads` with `headers` (raw lines). */
const postHead = (...headers: ReadonlyArray<string>) => ["POST /threads HTTP/1.1", "host: x", ...headers].join("\r\n")

const json = "content-type: application/json"
const providers = () => Harness.make([{ name: "codex", window: 44_000, inject: true }])

describe("auth before the body", () => {
  it.live("no token or a wrong one is 401, the read-only token 403, whatever is wrong with the body; nothing written", () =>
    Effect.gen(function*() {
      const noToken = { status: 401, body: { _tag: "Unauthorized", reason: "no bearer token", message: "no bearer token; send \"Authorization: Bearer <token>\"" } }
      const unknown = { status: 401, body: { _tag: "Unauthorized", reason: "unknown token", message: "unknown token; send \"Authorization: Bearer <token>\"" } }
      const forbidden = {
        status: 403,
        body: { _tag: "Forbidden", reason: "the read-only token may not POST; use the admin token", message: "the read-only token may not POST; use the admin token" }
      }
      const over = "x".repeat(5_000)
      const cases = [
        // Over the 4,096-byte limit: was 413.
        [postHead(json, `content-length: ${over.length}`), over, noToken],
        [postHead(json, `content-length: ${over.length}`, "authorization: Bearer wrong-token-0123456789"), over, unknown],
        [postHead(json, `content-length: ${over.length}`, `authorization: Bearer ${readToken}`), over, forbidden],
        // Chunked: was 411.
        [postHead(json, "transfer-encoding: chunked"), "2\r\n{}\r\n0\r\n\r\n", noToken],
        // Another media type: was 415.
        [postHead("content-type: text/plain", "content-length: 2"), "{}", noToken],
        // Not JSON: was 400.
        [postHead(json, "content-length: 1", "authorization: Bearer wrong-token-0123456789"), "{", unknown],
        [postHead(json, "content-length: 1", `authorization: Bearer ${readToken}`), "{", forbidden]
      ] as const
      for (const [head, body, expected] of cases) {
        const answer = yield* exchange(head, body)
        expect([head, answer.status, answer.body]).toEqual([head, expected.status, expected.body])
        // The connection is closed after the refusal (`exchange` resolves once it is).
        expect([head, answer.connection]).toEqual([head, "close"])
      }
      // With the admin token the body's own refusal still comes.
      const admin = yield* exchange(postHead(json, "content-length: 1", `authorization: Bearer ${adminToken}`, "connection: close"), "{")
      expect([admin.status, (admin.body as { reason: string }).reason]).toEqual([400, "the body is not valid JSON"])
      expect((yield* raw(get("/threads"))).body).toEqual({ threads: [], nextCursor: null })
    }).pipe(Effect.provide(serve(providers(), { maxBodyBytes: 4096 }))))

  it.live("a large body of a client without a token is not waited for: answered 401 at once, the connection closed", () =>
    Effect.gen(function*() {
      // 1,000,000 bytes declared (under the 2 MiB limit), 10 sent: the guard read the body before auth and waited for
      // the rest, and the client waiting for an answer never got one (NoAnswer).
      const answer = yield* exchange(postHead(json, "content-length: 1000000"), "{\"title\":\"")
      expect([answer.status, (answer.body as { _tag: string })._tag, answer.connection]).toEqual([401, "Unauthorized", "close"])
      // A token sent in the wrong scheme is no token either.
      const basic = yield* exchange(postHead(json, "content-length: 1000000", `authorization: Basic ${adminToken}`), "{")
      expect([basic.status, (basic.body as { reason: string }).reason]).toEqual([401, "the Authorization header is not a bearer token"])
      expect((yield* raw(get("/threads"))).body).toEqual({ threads: [], nextCursor: null })
    }).pipe(Effect.provide(serve(providers()))))

  it.live("a large body of a client without a token is not read on a GET or an unknown /v1/ path either", () =>
    Effect.gen(function*() {
      // 1,000,000 bytes declared, 10 sent: the guard authorised only writes before the body, so it went on reading this
      // one (answered only after ~6 s, the connection kept alive for more); sent whole, 1.5 MB was read and parsed (400
      // "not valid JSON" to a client without a token, `curl -X PUT /v1/foo --data-binary @1.5MB`).
      const read = yield* exchange(["GET /threads HTTP/1.1", "host: x", json, "content-length: 1000000"].join("\r\n"), "{\"title\":\"")
      expect([read.status, (read.body as { _tag: string })._tag, read.connection]).toEqual([401, "Unauthorized", "close"])
      const unknown = yield* exchange(["PUT /v1/foo HTTP/1.1", "host: x", json, "content-length: 1000000"].join("\r\n"), "{\"a\":")
      expect([unknown.status, (unknown.body as { error: { code: string } }).error.code, unknown.connection]).toEqual([404, "unknown_url", "close"])
      // A small body is still read (the API's own 401 for a read; the gateway's 404 under /v1/).
      const small = yield* exchange(["GET /threads HTTP/1.1", "host: x", json, "connection: close", "content-length: 2"].join("\r\n"), "{}")
      expect([small.status, (small.body as { _tag: string })._tag]).toEqual([401, "Unauthorized"])
    }).pipe(Effect.provide(serve(providers()))))

  it.live("a GET with a body over the limit or chunked and no token is 401, not 413 or 411", () =>
    Effect.gen(function*() {
      // Under a 4,096-byte limit a 5,000-byte body (below the 64 KiB the guard reads of a client without a token) was
      // answered 413 and a chunked one 411: the body's refusal before the token's (b47srv).
      const over = "x".repeat(5_000)
      const large = yield* exchange(["GET /threads HTTP/1.1", "host: x", json, `content-length: ${over.length}`].join("\r\n"), over)
      expect([large.status, (large.body as { reason: string }).reason]).toEqual([401, "no bearer token"])
      const chunked = yield* exchange(["GET /threads HTTP/1.1", "host: x", json, "transfer-encoding: chunked"].join("\r\n"), "2\r\n{}\r\n0\r\n\r\n")
      expect([chunked.status, (chunked.body as { reason: string }).reason]).toEqual([401, "no bearer token"])
      // With the admin token the body's own refusal still comes.
      const admin = yield* exchange(
        ["GET /threads HTTP/1.1", "host: x", json, `authorization: Bearer ${adminToken}`, "connection: close", `content-length: ${over.length}`].join("\r\n"),
        over
      )
      expect(admin.status).toBe(413)
    }).pipe(Effect.provide(serve(providers(), { maxBodyBytes: 4096 }))))

  it.live("every 401 of the API carries the Bearer challenge (RFC 9110 §11.6.1), invalid_token when a token was refused", () =>
    Effect.gen(function*() {
      // It carried none (new user b46srv).
      const none = yield* raw(get("/threads", null))
      expect([none.status, none.headers["www-authenticate"]]).toEqual([401, "Bearer realm=\"baton\""])
      const wrong = yield* raw(get("/threads", "wrong-token-0123456789"))
      expect([wrong.status, wrong.headers["www-authenticate"]]).toEqual([401, "Bearer realm=\"baton\", error=\"invalid_token\""])
      // The guard's own 401, before the body.
      const guarded = yield* raw(post("/threads", { providerInstance: "codex" }, "wrong-token-0123456789"))
      expect([guarded.status, guarded.headers["www-authenticate"]]).toEqual([401, "Bearer realm=\"baton\", error=\"invalid_token\""])
      expect((yield* raw(get("/threads"))).headers["www-authenticate"]).toBeUndefined()
    }).pipe(Effect.provide(serve(providers()))))

  it.live("the gateway's 401 and 403 do not read a large body either: answered at once, the connection closed", () =>
    Effect.gen(function*() {
      // Answered kept alive, Node read the unauthenticated body on for as long as it came (here: it waited for it).
      const head = (key: string) => ["POST /v1/messages HTTP/1.1", "host: x", json, "anthropic-version: 2023-06-01", key, "content-length: 1000000"].join("\r\n")
      const unknown = yield* exchange(head("x-api-key: wrong-token-0123456789"), "{")
      expect([unknown.status, unknown.connection]).toEqual([401, "close"])
      expect(unknown.body).toEqual({
        type: "error",
        error: { type: "authentication_error", message: "Baton gateway: unknown token; send a Baton token as x-api-key (ANTHROPIC_API_KEY) or Authorization: Bearer" }
      })
      const readOnly = yield* exchange(head(`x-api-key: ${readToken}`), "{")
      expect([readOnly.status, readOnly.connection]).toEqual([403, "close"])
    }).pipe(Effect.provide(serve(providers()))))
})
