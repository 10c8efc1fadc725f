/**
 * Every error of the gateway's endpoints in the agent's own protocol (Anthropic's `{"type":"error","error":{…}}`,
 * OpenAI's `{"error":{"message","type","param","code"}}`), as a tester found them answered otherwise: an unexpected
 * failure (an empty 500), an `x-api-key` that is not one token (refused as a malformed Authorization header that was
 * never sent), headers over Node's limit (the API's `RequestHeadersTooLarge`), a compressed body ("the body is not a
 * JSON object"). (The article of "not an openai-responses upstream" is GatewayResponses.test.ts's.)
 */
import { GatewayThreads } from "@baton/orchestration"
import { Server } from "@baton/server"
import { HttpClientRequest, HttpServer } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Logger } from "effect"
import * as Net from "node:net"
import * as Zlib from "node:zlib"
import { adminToken, raw, testListener } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, settingsFor } from "./support/ModelServer.js"

const routes = [{ model: "claude-*", provider: "anthropic" }, { model: "gpt-*", provider: "openai" }, { model: "chat-*", provider: "chat" }]

/**
 * The production server (on the listener of the API's tests) over one loopback upstream serving the three protocols (`claude-*`, `gpt-*`, `chat-*`), with
 * `GatewayThreads` as `swap` makes it (the seam a test replaces: the gateway's record service).
 */
const withGateway = <A, E, R>(
  test: (upstream: ModelApi.ModelApi) => Effect.Effect<A, E, R>,
  swap: (threads: GatewayThreads.GatewayThreads) => GatewayThreads.GatewayThreads = (t) => t
) =>
  Effect.scoped(Effect.gen(function*() {
    const upstream = yield* ModelApi.start
    const settings = yield* settingsFor(
      [instance("anthropic", "anthropic-messages", upstream), instance("openai", "openai-responses", upstream), instance("chat", "openai-chat", upstream)],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes } }
    )
    const swapped = Layer.effect(GatewayThreads.GatewayThreads, Effect.map(GatewayThreads.GatewayThreads, swap))
    const layer = Server.httpLayer({
      tokens: { admin: settings.auth.adminToken, read: settings.auth.readToken },
      maxBodyBytes: settings.limits.maxBodyBytes,
      gateway: Server.gatewayOf(settings)
    }).pipe(
      Layer.provide(swapped),
      // The listener as `baton serve`'s answers what Node refuses (`Server.answerNodeRefusals`).
      Layer.provideMerge(testListener),
      Layer.provideMerge(Server.orchestratorLayer(settings))
    )
    return yield* test(upstream).pipe(Effect.provide(layer))
  }))

/** A POST to a gateway path with `headers` and `body` (a string is sent as is). */
const post = (path: string, headers: Record<string, string>, body: unknown) =>
  HttpClientRequest.post(path).pipe(
    HttpClientRequest.setHeaders(headers),
    HttpClientRequest.bodyText(typeof body === "string" ? body : JSON.stringify(body), "application/json")
  )

const anthropicKey = { "x-api-key": adminToken, "anthropic-version": "2023-06-01" }
const bearer = { authorization: `Bearer ${adminToken}` }
const hi = [{ role: "user", content: "hi" }]

/**
 * Sends `head` (the request line and headers, CRLF-separated, without the blank line) and `body` in one write to the
 * test server, on a socket of its own (headers the HTTP client would not send: one twice, 20 KiB of them); the answer's
 * status and JSON body once the server closes or has sent `content-length` bytes.
 */
const rawHttp = (head: string, body = "") =>
  Effect.flatMap(HttpServer.HttpServer, (server) =>
    Effect.async<{ readonly status: number; readonly body: unknown }>((resume) => {
      const port = server.address._tag === "TcpAddress" ? server.address.port : 0
      const socket = Net.connect(port, "127.0.0.1")
      let text = ""
      const done = () => {
        socket.destroy()
        const at = text.indexOf("\r\n\r\n")
        const top = at < 0 ? text : text.slice(0, at)
        let rest = at < 0 ? "" : text.slice(at + 4)
        // A chunked answer (Node's own `response.end`) as its one chunk's text.
        if (/transfer-encoding: chunked/i.test(top)) rest = rest.split("\r\n")[1] ?? ""
        resume(Effect.succeed({ status: Number(top.split(" ")[1]), body: rest === "" ? null : JSON.parse(rest) }))
      }
      socket.on("data", (chunk) => {
        text += chunk.toString("utf8")
        const length = /content-length: (\d+)/i.exec(text)
        const at = text.indexOf("\r\n\r\n")
        if (length !== null && at >= 0 && Buffer.byteLength(text.slice(at + 4)) >= Number(length[1])) done()
      })
      socket.on("end", done)
      socket.on("error", done)
      // A head naming its Transfer-Encoding frames the body itself (no Content-Length beside it).
      const length = /transfer-encoding:/i.test(head) ? "" : `content-length: ${Buffer.byteLength(body)}\r\n`
      socket.write(`${head}\r\n${length}content-type: application/json\r\n\r\n${body}`)
      return Effect.sync(() => socket.destroy())
    }))

describe("Gateway errors in the agent's protocol", () => {
  // Found by a tester: a defect on a gateway path was an empty 500 (no content type, no body), which Claude Code and
  // Codex read as no error they know; the API's paths answer it `InternalError` as JSON.
  it.live("answers an unexpected failure 500 in the agent's protocol and logs it with its cause", () => {
    const logs: Array<string> = []
    const capture = Logger.replace(Logger.defaultLogger, Logger.make(({ cause, message }) => void logs.push(`${String(message)} ${cause}`)))
    return withGateway(
      (upstream) =>
        Effect.gen(function*() {
          const anthropic = yield* raw(post("/v1/messages", anthropicKey, { model: "claude-x", max_tokens: 10, messages: hi }))
          expect([anthropic.status, anthropic.body]).toEqual([500, {
            type: "error",
            error: { type: "api_error", message: "Baton's gateway failed unexpectedly; the failure is logged (see the server's log)" }
          }])
          const openai = { message: "Baton's gateway failed unexpectedly; the failure is logged (see the server's log)", type: "server_error", param: null, code: null }
          const responses = yield* raw(post("/v1/responses", bearer, { model: "gpt-x", input: "hi" }))
          expect([responses.status, responses.body]).toEqual([500, { error: openai }])
          const chat = yield* raw(post("/v1/chat/completions", bearer, { model: "chat-x", messages: hi }))
          expect([chat.status, chat.body]).toEqual([500, { error: openai }])
          expect(upstream.requests.length).toBe(0)
          const failures = logs.filter((l) => l.includes("failed unexpectedly"))
          expect(failures.map((l) => l.split(" failed unexpectedly")[0])).toEqual([
            "gateway: POST /v1/messages",
            "gateway: POST /v1/responses",
            "gateway: POST /v1/chat/completions"
          ])
          for (const l of failures) expect(l).toContain("Error: the conversation's lookup broke")
        }),
      // The lookup of the conversation (tool-result offload is on) dies: an unexpected failure inside the handler.
      (t) => new GatewayThreads.GatewayThreads({ ...t, conversationOf: () => Effect.die(new Error("the conversation's lookup broke")) })
    ).pipe(Effect.provide(capture))
  })

  // Found by review r39b: a record that failed with a defect (not a typed failure) reached the agent: `Effect.option`
  // let the defect through the record's fiber, and joining it failed the handler, 500 for an answer that had come.
  it.live("gives the agent the upstream's answer when its record dies (a defect), logged", () => {
    const logs: Array<string> = []
    const capture = Logger.replace(Logger.defaultLogger, Logger.make(({ cause, message }) => void logs.push(`${String(message)} ${cause}`)))
    return withGateway(
      (upstream) =>
        Effect.gen(function*() {
          // A whole answer (the upstream's error, passed back as it came): the record is settled before it is sent.
          upstream.enqueue(ModelApi.error(529, "Overloaded"))
          const answer = yield* raw(post("/v1/messages", anthropicKey, { model: "claude-x", max_tokens: 10, messages: hi }))
          expect([answer.status, answer.body]).toEqual([529, { type: "error", error: { type: "invalid_request_error", message: "Overloaded" } }])
          expect(logs.some((l) => l.includes("could not record a request") && l.includes("the record broke"))).toBe(true)
          expect(logs.some((l) => l.includes("failed unexpectedly"))).toBe(false)
        }),
      (t) => new GatewayThreads.GatewayThreads({ ...t, begin: () => Effect.die(new Error("the record broke")) })
    ).pipe(Effect.provide(capture))
  })

  // Found by a tester: `x-api-key: a b`, or the key sent twice (Node joins the values with ", "), was refused as "the
  // Authorization header is not a bearer token" though no Authorization header was sent.
  it.live("names the x-api-key header when its value is not one token: a space, sent twice, empty (alone)", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const refusal = (reason: string) => ({
          type: "error",
          error: { type: "authentication_error", message: `Baton gateway: ${reason}; send a Baton token as x-api-key (ANTHROPIC_API_KEY) or Authorization: Bearer` }
        })
        const notOne = "the x-api-key header is not one token (it holds a space or a comma; a header sent twice arrives as its values joined by \", \")"
        const body = JSON.stringify({ model: "claude-x", max_tokens: 10, messages: hi })
        const spaced = yield* rawHttp("POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: a b", body)
        expect(spaced).toEqual({ status: 401, body: refusal(notOne) })
        const twice = yield* rawHttp(`POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: ${adminToken}\r\nx-api-key: ${adminToken}`, body)
        expect(twice).toEqual({ status: 401, body: refusal(notOne) })
        const empty = yield* rawHttp("POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: ", body)
        expect(empty).toEqual({ status: 401, body: refusal("the x-api-key header is empty") })
        // A present but empty key beside a valid bearer token is no key: the token decides (found at an earlier
        // stop: refused "the x-api-key header is empty"); beside an unknown one, that one is refused.
        upstream.enqueue(ModelApi.answer("anthropic-messages", "fine", { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }))
        const emptyBesideBearer = yield* raw(post("/v1/messages", { "x-api-key": "", authorization: `Bearer ${adminToken}` }, body))
        expect(emptyBesideBearer.status).toBe(200)
        expect(upstream.requests.length).toBe(1)
        const emptyBesideWrong = yield* rawHttp("POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: \r\nauthorization: Bearer wrong", body)
        expect(emptyBesideWrong).toEqual({ status: 401, body: refusal("unknown token") })
        // Without x-api-key, a malformed Authorization header is still named as such.
        const basic = yield* raw(post("/v1/messages", { authorization: "Basic abc" }, body))
        expect(basic.body).toEqual(refusal("the Authorization header is not a bearer token"))
        expect(upstream.requests.length).toBe(1)
      })
    ))

  // Found by a tester: Node's 431 for headers over its limit came back as the API's `RequestHeadersTooLarge` on the
  // gateway's paths too.
  it.live("answers headers over Node's limit 431 in the agent's protocol on gateway paths, in the API's on the API's", () =>
    withGateway(() =>
      Effect.gen(function*() {
        const big = `x-big: ${"a".repeat(20_000)}`
        const reason = "the request's headers are larger than the server accepts (16 KiB)"
        const anthropic = yield* rawHttp(`POST /v1/messages?beta=true HTTP/1.1\r\nhost: x\r\n${big}`, "{}")
        expect(anthropic).toEqual({ status: 431, body: { type: "error", error: { type: "invalid_request_error", message: reason } } })
        const responses = yield* rawHttp(`POST /v1/responses HTTP/1.1\r\nhost: x\r\n${big}`, "{}")
        expect(responses).toEqual({ status: 431, body: { error: { message: reason, type: "invalid_request_error", param: null, code: null } } })
        const chat = yield* rawHttp(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n${big}`, "{}")
        expect(chat.body).toEqual({ error: { message: reason, type: "invalid_request_error", param: null, code: null } })
        const api = yield* rawHttp(`POST /threads HTTP/1.1\r\nhost: x\r\n${big}`, "{}")
        expect(api).toEqual({ status: 431, body: { _tag: "RequestHeadersTooLarge", reason, message: reason } })
      })
    ))

  // Found by review r39b: an `Expect` other than `100-continue` (Node's 417, answered by the listener) was the API's
  // `InvalidRequest` body on the gateway's paths too.
  it.live("answers an Expect other than 100-continue 417 in the agent's protocol on gateway paths, in the API's on the API's", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const reason = "Expect: only 100-continue is supported, got \"200-ok\""
        const anthropic = yield* rawHttp("POST /v1/messages HTTP/1.1\r\nhost: x\r\nexpect: 200-ok", "{}")
        expect(anthropic).toEqual({ status: 417, body: { type: "error", error: { type: "invalid_request_error", message: reason } } })
        const responses = yield* rawHttp("POST /v1/responses?x=1 HTTP/1.1\r\nhost: x\r\nexpect: 200-ok", "{}")
        expect(responses).toEqual({ status: 417, body: { error: { message: reason, type: "invalid_request_error", param: null, code: null } } })
        const api = yield* rawHttp("POST /threads HTTP/1.1\r\nhost: x\r\nexpect: 200-ok", "{}")
        expect(api).toEqual({ status: 417, body: { _tag: "InvalidRequest", reason, message: reason } })
        // Another method on a gateway path is the API's (as the guard answers it: RouteNotFound's shape).
        const get = yield* rawHttp("GET /v1/messages HTTP/1.1\r\nhost: x\r\nexpect: 200-ok", "")
        expect(get).toEqual({ status: 417, body: { _tag: "InvalidRequest", reason, message: reason } })
        expect(upstream.requests.length).toBe(0)
      })
    ))

  // Found by a tester: a gzip body was refused "the body is not a JSON object".
  it.live("refuses a compressed body 415 naming its Content-Encoding or Transfer-Encoding, in the agent's protocol; identity goes through", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const body = JSON.stringify({ model: "claude-x", max_tokens: 10, messages: hi })
        const gzip = yield* raw(HttpClientRequest.post("/v1/messages").pipe(
          HttpClientRequest.setHeaders({ ...anthropicKey, "content-encoding": "gzip" }),
          HttpClientRequest.bodyUint8Array(Zlib.gzipSync(body), "application/json")
        ))
        expect(gzip.headers["accept-encoding"]).toBe("identity")
        expect([gzip.status, gzip.body]).toEqual([415, {
          type: "error",
          error: { type: "invalid_request_error", message: "Content-Encoding: gzip is not supported by Baton's gateway; send the body uncompressed (identity)" }
        }])
        const zstd = yield* raw(post("/v1/responses", { ...bearer, "content-encoding": "zstd" }, "(zstd bytes)"))
        expect([zstd.status, zstd.body]).toEqual([415, {
          error: {
            message: "Content-Encoding: zstd is not supported by Baton's gateway; send the body uncompressed (identity)",
            type: "invalid_request_error",
            param: null,
            code: "unsupported_content_encoding"
          }
        }])
        expect(upstream.requests.length).toBe(0)
        // Found at an earlier stop: a gzip transfer coding (Node undoes only `chunked`) went through to the JSON check.
        const chunk = (text: string) => `${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n0\r\n\r\n`
        const transfer = (message: string) => `Transfer-Encoding: ${message} is not supported by Baton's gateway; send the body uncompressed (chunked alone, or with Content-Length)`
        const gzipChunked = yield* rawHttp(`POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: ${adminToken}\r\ntransfer-encoding: gzip, chunked`, chunk("(gzip bytes)"))
        expect(gzipChunked).toEqual({ status: 415, body: { type: "error", error: { type: "invalid_request_error", message: transfer("gzip") } } })
        const chatChunked = yield* rawHttp(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${adminToken}\r\ntransfer-encoding: deflate, chunked`, chunk("(deflate bytes)"))
        expect(chatChunked).toEqual({
          status: 415,
          body: { error: { message: transfer("deflate"), type: "invalid_request_error", param: null, code: "unsupported_content_encoding" } }
        })
        expect(upstream.requests.length).toBe(0)
        upstream.enqueue(ModelApi.answer("anthropic-messages", "fine", { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }))
        const identity = yield* raw(post("/v1/messages", { ...anthropicKey, "content-encoding": "identity" }, body))
        expect(identity.status).toBe(200)
        expect(upstream.requests.length).toBe(1)
      })
    ))

  // Found at an earlier stop: a path under `/v1/` that no endpoint serves (an OpenAI SDK's `GET /v1/models`, `POST
  // /v1/embeddings`) was answered Baton's `RouteNotFound` body, no error an agent's SDK knows.
  it.live("answers a path under /v1/ that no endpoint serves 404 in the agent's protocol; the gateway's paths' other methods stay the API's", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const served = "Baton's gateway serves POST /v1/messages, /v1/messages/count_tokens, /v1/responses, /v1/responses/compact and /v1/chat/completions (docs/gateway.md)"
        const openAi = (what: string) => ({ error: { message: `Unknown request URL: ${what}. ${served}`, type: "invalid_request_error", param: null, code: "unknown_url" } })
        const embeddings = yield* raw(post("/v1/embeddings", bearer, { model: "gpt-x", input: "hi" }))
        expect([embeddings.status, embeddings.body]).toEqual([404, openAi("POST /v1/embeddings")])
        const models = yield* raw(HttpClientRequest.get("/v1/models?limit=1").pipe(HttpClientRequest.setHeaders(bearer)))
        expect([models.status, models.body]).toEqual([404, openAi("GET /v1/models")])
        const complete = yield* raw(post("/v1/complete", anthropicKey, { model: "claude-x", prompt: "hi" }))
        expect([complete.status, complete.body]).toEqual([404, { type: "error", error: { type: "not_found_error", message: `Unknown request URL: POST /v1/complete. ${served}` } }])
        const getMessages = yield* raw(HttpClientRequest.get("/v1/messages").pipe(HttpClientRequest.setHeaders(anthropicKey)))
        expect([getMessages.status, (getMessages.body as { _tag?: string })._tag]).toEqual([404, "RouteNotFound"])
        const api = yield* raw(HttpClientRequest.get("/v2/models").pipe(HttpClientRequest.setHeaders(bearer)))
        expect([api.status, (api.body as { _tag?: string })._tag]).toEqual([404, "RouteNotFound"])
        expect(upstream.requests.length).toBe(0)
      })
    ))
})
