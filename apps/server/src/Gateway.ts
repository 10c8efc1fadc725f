/**
 * Gateway: the agent-facing endpoints (issue 14, docs/gateway.md) on `baton serve`, for unmodified agents pointed at
 * Baton: Anthropic Messages (Claude Code, `ANTHROPIC_BASE_URL`: `GatewayAnthropic`) and OpenAI Responses (Codex with
 * `wire_api = "responses"`: `GatewayResponses`). Each protocol is a `GatewayDialect`: its error shape, its upstream
 * credentials, how its history, session and reply are read; forwarding, routing, authentication and the record are
 * this module's, shared. For Anthropic (Responses alike, see `GatewayResponses`):
 *
 * - `POST /v1/messages` (streamed or not) and `POST /v1/messages/count_tokens`, any query string (`?beta=true`)
 *   passed on. The agent authenticates with a Baton token (the admin token) in `x-api-key` or `Authorization:
 *   Bearer`; the upstream's key comes only from Baton's configuration.
 * - The request's `model` picks the provider instance by the configured routes (`gateway.routes`, first match;
 *   `*` matches any run of characters). The body is forwarded byte for byte with the agent's headers (its own key,
 *   hop-by-hop headers and `accept-encoding` left out; `anthropic-version` and `anthropic-beta` kept), and the
 *   upstream's answer comes back as the upstream sent it: status, its headers, its body bytes as they arrive. An
 *   upstream error reaches the agent as the upstream's own status and body.
 * - Each `/v1/messages` request is forwarded first and recorded alongside (`GatewayThreads`, in a fiber of its own
 *   started once the upstream request is under way): the request's new messages; then, once the answer is whole and
 *   before its last byte reaches the agent, the reply and its usage (an answer already whole when the request's
 *   record takes its turn is recorded with it, in its unit of work). A record that fails is logged and never keeps
 *   the answer from the agent: a failed request record leaves no run (the next request repeats the history, so its
 *   messages are stored then); a failed answer record marks the run `failed` (`output_not_recorded`).
 *   `count_tokens` is forwarded only (with offload on, as the conversation would go out: see "On the way out").
 * - Baton's own refusals are in Anthropic's error shape (`{"type":"error","error":{"type","message"}}`): a body
 *   that is not a Messages request 400 `invalid_request_error`, an unrouted model 404 `not_found_error`, a missing or
 *   unknown token 401 `authentication_error` (an `x-api-key` that is not one token named as such), a body over the
 *   limit 413 `request_too_large`, a compressed body (`Content-Encoding`) 415 `invalid_request_error`, an unreachable
 *   upstream 502 `api_error`, and anything unexpected (a defect) 500 `api_error`, logged with its cause (the handler's
 *   boundary). Headers over Node's limit are the listener's 431 (`nodeRefusalOf`, `Server.answerNodeRefusals`).
 *
 * - On the way out (`/v1/messages`, `/v1/responses` and `/v1/chat/completions`, the routed instance's
 *   `toolResultOffload` on; `GatewayOffload`, `GatewayResponsesOffload`, `GatewayChatOffload`): the request
 *   goes out with the conversation's tool-result stubs (a flush when the policy decides one, reported as
 *   `gateway.offloaded`), the hidden `thread_read` rounds of earlier answers in place of what the agent received, and
 *   `thread_read` offered; the agent's newest message unchanged. The upstream's `thread_read` calls are answered here
 *   from the conversation's thread and the conversation continued with the upstream (whole answers: the agent gets the
 *   last, after what the hidden rounds said, `Offload.withContent`; streams: the events from the call on are held, and
 *   the continuation's join the agent's message). On
 *   `/v1/messages`, `thread_read` calls beside calls of the agent's own tools are answered here too, the agent gets
 *   the reply without them (streams: their events left out, the blocks after them numbered on), and the expansion
 *   recorded makes the agent's next request carry the calls and the answers (`GatewayOffload.besideOf`). Off: the
 *   body goes out byte for byte.
 *
 * - A provider switch (a model routed to an instance of another protocol than its endpoint's: `/v1/messages` to
 *   `openai-chat` or `openai-responses`, `/v1/chat/completions` to `anthropic-messages` or `openai-responses`,
 *   `/v1/responses` to `anthropic-messages` or `openai-chat`; `GatewaySwitched`, `GatewaySwitchWire`,
 *   `GatewaySwitch`, `GatewaySwitchResponses`, `GatewaySwitchAnthropic`, `GatewaySwitchResponsesAnthropic`,
 *   `GatewaySwitchOpenAi`): the request is recorded first, its history
 *   converted to the upstream's protocol and fitted under the instance's window (stubs, then deferral with a pointer;
 *   the agent's newest turn unchanged), and the answer converted back to the agent's (whole or as SSE events as the
 *   upstream's arrive; the upstream's `thread_read` calls answered here) and recorded as the agent's reply. A request
 *   Baton cannot fit is answered the agent's own overflow error (Anthropic's "prompt is too long", OpenAI's
 *   `context_length_exceeded`) and never sent. Codex's `/v1/responses/compact` routed to another protocol is
 *   refused 404.
 */
import type { ProviderInstance, RunFailureCode } from "@baton/contracts"
import type { ThreadId } from "@baton/contracts"
import { GatewayMemo, GatewayThreads, ThreadOffload, ThreadRead } from "@baton/orchestration"
import { type GatewayConversations, ThreadStore } from "@baton/persistence"
import { HttpApiBuilder, HttpClient, type HttpClientError, HttpClientRequest, type HttpClientResponse, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpClient, NodeHttpServerRequest } from "@effect/platform-node"
import { TokenCounter } from "@baton/context"
import { ProviderFailure } from "@baton/providers"
import { Cause, Clock, Data, Effect, Either, Fiber, Layer, Option, Redacted, Stream } from "effect"
import * as Auth from "./Auth.js"
import { refuseAfterDrain, refuseUnread } from "./BodyDrain.js"
import * as GatewayAnthropic from "./GatewayAnthropic.js"
import * as GatewayBody from "./GatewayBody.js"
import * as GatewayDialect from "./GatewayDialect.js"
import * as GatewayMedia from "./GatewayMedia.js"
import { type Dialect, isRecord, parseJson, type Refusal, type StreamOutcome } from "./GatewayDialect.js"
import * as GatewayChat from "./GatewayChat.js"
import * as GatewayChatOffload from "./GatewayChatOffload.js"
import * as GatewayOffload from "./GatewayOffload.js"
import * as GatewayResponses from "./GatewayResponses.js"
import * as GatewayResponsesOffload from "./GatewayResponsesOffload.js"
import * as GatewaySwitched from "./GatewaySwitched.js"
import * as GatewayThoughtSignatures from "./GatewayThoughtSignatures.js"
import * as GatewaySwitchWire from "./GatewaySwitchWire.js"
import * as ServerConfig from "./ServerConfig.js"
import * as ServerShutdown from "./ServerShutdown.js"

/** Tokens an answer's framing adds beside its text (the result block or item, its call id). */
const answerOverhead = 16

/** The input limit hidden `thread_read` answers keep a continuation under (`GatewayDialect.fitLimit`). */
export const fitLimit = GatewayDialect.fitLimit

/** The paths the gateway serves (the guard leaves their bodies to it). */
export const paths = ["/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/v1/responses/compact", "/v1/chat/completions"] as const

/** Whether `url` (path and query) is one of the gateway's paths. */
export const isGatewayPath = (url: string) => (paths as ReadonlyArray<string>).includes(url.split("?")[0]!)

/**
 * The dialect of a gateway path (`url`: path and query): Anthropic's for `/v1/messages` and its `count_tokens`, OpenAI
 * Responses' for `/v1/responses` and `/compact`, Chat Completions' for `/v1/chat/completions`; `undefined` for another.
 */
export const dialectOf = (url: string): Dialect | undefined => {
  if (!isGatewayPath(url)) return undefined
  const path = url.split("?")[0]!
  return path.startsWith("/v1/messages") ? GatewayAnthropic.dialect : path.startsWith("/v1/responses") ? GatewayResponses.dialect : GatewayChat.dialect
}

/**
 * The answer to a request under `/v1/` that no endpoint serves (`method url`, `headers` its headers), in the protocol
 * an agent there speaks: 404 Anthropic `not_found_error` when it sends `anthropic-version` or `x-api-key`, else
 * OpenAI `invalid_request_error` / `unknown_url` (`/v1` is an OpenAI client's base URL: an SDK probing `GET /v1/models`
 * or `POST /v1/embeddings` reads Baton's `RouteNotFound` body as no error it knows). `null` outside `/v1/` and on the
 * gateway's own paths, whose other methods stay the API's `RouteNotFound` (new user r35).
 */
export const unknownPathRefusal = (method: string, url: string, headers: Readonly<Record<string, string | undefined>>) => {
  const path = url.split("?")[0]!
  if (!path.startsWith("/v1/") || isGatewayPath(url)) return null
  const dialect = headers["anthropic-version"] !== undefined || headers["x-api-key"] !== undefined ? GatewayAnthropic.dialect : GatewayResponses.dialect
  return dialect.refuse(
    "unknown_path",
    `Unknown request URL: ${method} ${path.slice(0, 300)}. Baton's gateway serves POST /v1/messages, /v1/messages/count_tokens, ` +
      `/v1/responses, /v1/responses/compact and /v1/chat/completions (docs/gateway.md)`
  )
}

/**
 * A refusal of the gateway's in the protocol of the request whose first bytes are `head` (a request line `POST
 * <gateway path> HTTP/1.x` at its start), as its status and JSON body, for the listener's answers to what Node refuses
 * before any handler runs (`Server.answerNodeRefusals`); `null` when `head` does not start with such a line (another
 * path, or the bytes Node had when it refused are not the request's first).
 */
export const nodeRefusalOf = (head: Buffer | undefined, reason: Refusal, message: string): { readonly status: number; readonly body: Uint8Array } | null => {
  const line = head === undefined ? null : /^POST (\S+) HTTP\/1\.[01]\r?\n/.exec(head.subarray(0, 2_100).toString("latin1"))
  return line === null ? null : refusalOn("POST", line[1]!, reason, message)
}

/**
 * A refusal of the gateway's for a request `method url` (path and query) whose head Node has parsed, as its status and
 * JSON body: in the path's protocol for a `POST` to a gateway path, else `null` (the API's). For the listener's answer
 * to an `Expect` other than `100-continue` (`Server.answerNodeRefusals`: 417), which came in the API's shape on the
 * gateway's paths too (review r39b).
 */
export const refusalOn = (method: string, url: string, reason: Refusal, message: string): { readonly status: number; readonly body: Uint8Array } | null => {
  const dialect = method === "POST" ? dialectOf(url) : undefined
  if (dialect === undefined) return null
  const response = dialect.refuse(reason, message)
  return response.body._tag === "Uint8Array" ? { status: response.status, body: response.body.body } : null
}

/** What the gateway needs: the tokens it accepts, its routes, the provider instances and the body limit (bytes). */
export interface GatewayOptions {
  readonly tokens: Auth.Tokens
  readonly routes: ReadonlyArray<ServerConfig.GatewayRouteJson>
  readonly providers: ReadonlyArray<ServerConfig.ProviderSetting>
  readonly maxBodyBytes: number
}

/** Whether `model` matches `pattern` (`*`: any run of characters, everything else literal). */
export const matches = (pattern: string, model: string) =>
  new RegExp(`^${pattern.split("*").map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join(".*")}$`).test(model)

/**
 * A request body's `model` field as a model id (a non-empty string), else the refusal's message: a missing field is
 * "Field required", a present one of another type says so and names the type it has (`{"model": 5}` was answered
 * "Field required", sending the agent's developer after a field that was there).
 */
export const modelId = (model: unknown): Either.Either<string, string> => {
  if (model === undefined) return Either.left("model: Field required (a model id)")
  if (typeof model !== "string") {
    const type = model === null ? "null" : Array.isArray(model) ? "an array" : typeof model === "object" ? "an object" : `a ${typeof model}`
    return Either.left(`model: expected a string (a model id), got ${type}`)
  }
  return model === "" ? Either.left("model: expected a model id, got an empty string") : Either.right(model)
}

/** Request headers never forwarded: the agent's credentials, the connection's own, and compression (see below). */
const dropped = new Set([
  "host",
  "connection",
  "keep-alive",
  "proxy-authorization",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "content-length",
  "authorization",
  "x-api-key",
  // The agent's `Expect: 100-continue` was met by this server (Node answers it before the body is read); forwarded, the
  // upstream client refused the request ("expect header not supported"): curl sends it for bodies over 1 MiB, and each
  // such request was a 502 saying the upstream could not be reached (new user hnew).
  "expect",
  // The answer is read on its way back (the record), so it must arrive uncompressed.
  "accept-encoding"
])

/**
 * A request's `Content-Encoding` when it names a coding other than `identity` (`gzip`, `deflate`, `br`, `zstd`, a list
 * of them), else `null`: the gateway reads and forwards bodies as they are and decodes none (an agent sends none:
 * Claude Code, Codex on an API key, the OpenAI-compatible clients), so such a body is refused, 415, not read as JSON.
 */
export const contentEncodingOf = (header: string | undefined): string | null => {
  if (header === undefined) return null
  const codings = header.split(",").map((c) => c.trim().toLowerCase()).filter((c) => c !== "" && c !== "identity")
  return codings.length === 0 ? null : header.trim()
}

/**
 * A request's `Transfer-Encoding` codings other than `chunked` (which Node's parser undoes) and `identity` (`gzip`,
 * `deflate`, `compress`, a list of them), else `null`: Node reads `Transfer-Encoding: gzip, chunked` as a chunked body
 * and hands on the gzip bytes, which the gateway would read as JSON, so it is refused 415 as a `Content-Encoding` is
 * (found at an earlier stop: `gzip, chunked` went through to the JSON check). The codings named, as sent.
 */
export const transferCodingOf = (header: string | undefined): string | null => {
  if (header === undefined) return null
  const codings = header.split(",").map((c) => c.trim()).filter((c) => c !== "" && !["chunked", "identity"].includes(c.toLowerCase()))
  return codings.length === 0 ? null : codings.join(", ")
}

/** Response headers not passed back (the connection's own; the length is the stream's). */
const droppedBack = new Set(["connection", "keep-alive", "transfer-encoding", "content-length"])

/**
 * Lets the event loop turn once (`setImmediate`): what was written to a socket goes out (Node sends a response's
 * head and first chunk on the next tick) and the I/O that arrived is handled, before the synchronous work that
 * follows (SQLite writes, tokenizing) holds the thread.
 */
const toEventLoop = Effect.async<void>((resume) => {
  const handle = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(handle))
})

/**
 * Cuts the agent's connection as an upstream's broken stream cut Baton's: what was written goes out first (the socket
 * ends, flushing it), then the socket is destroyed, so the agent's HTTP client sees the answer break off (no chunked
 * terminator) instead of a clean end. The platform's own end of the answer that follows writes nothing to a destroyed
 * socket.
 */
const cutConnection = (request: HttpServerRequest.HttpServerRequest) =>
  Effect.async<void>((resume) => {
    const socket = NodeHttpServerRequest.toServerResponse(request).socket
    if (socket === null || socket.destroyed) return resume(Effect.void)
    socket.end(() => {
      socket.destroy()
      resume(Effect.void)
    })
  })

/** The request body could not be read whole (`reason` says why). */
class BodyNotRead extends Data.TaggedError("BodyNotRead")<{ readonly reason: string }> {}

/**
 * The request's body, its chunks joined once at the end (the platform's `arrayBuffer` joins the body so far with each
 * chunk as it comes: quadratic copying, some 10 to 15 MB copied for a 0.7 MB body). `null` as soon as it goes over
 * `maxBytes` (the caller drains the rest: `BodyDrain.refuseAfterDrain`). Fails with `BodyNotRead` when the connection
 * breaks before the body ends.
 */
const readBody = (request: HttpServerRequest.HttpServerRequest, maxBytes: number) =>
  Effect.async<Uint8Array | null, BodyNotRead>((resume) => {
    const source = NodeHttpServerRequest.toIncomingMessage(request)
    if (source.readableEnded) return resume(Effect.fail(new BodyNotRead({ reason: "the body was read already" })))
    const chunks: Array<Buffer> = []
    let bytes = 0
    const onData = (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes <= maxBytes) chunks.push(chunk)
      else {
        cleanup()
        resume(Effect.succeed(null))
      }
    }
    const cleanup = () => {
      source.off("data", onData)
      source.off("end", onEnd)
      source.off("error", onError)
      source.off("close", onClose)
    }
    const onEnd = () => {
      cleanup()
      resume(Effect.succeed(Buffer.concat(chunks, bytes)))
    }
    const onError = (e: Error) => {
      cleanup()
      resume(Effect.fail(new BodyNotRead({ reason: e.message })))
    }
    const onClose = () => {
      cleanup()
      resume(Effect.fail(new BodyNotRead({ reason: "the connection closed before the body ended" })))
    }
    source.on("data", onData)
    source.once("end", onEnd)
    source.once("error", onError)
    source.once("close", onClose)
    return Effect.sync(cleanup)
  })

/**
 * The run failure code of an upstream's HTTP error: `provider_unavailable` for 429 and 5xx; `overflow` for another
 * status whose body is a context overflow in any provider's words (`ProviderFailure.overflowOf`: Anthropic's
 * "prompt is too long: N tokens > M maximum", OpenAI's `context_length_exceeded`, vLLM's "maximum context length is
 * …"); `provider_refused` otherwise. The body itself goes back to the agent as it came: it is already the agent's own
 * overflow error on a same-protocol path, so the agent's compaction runs.
 */
const failureCode = (status: number, text: string): "provider_unavailable" | "provider_refused" | "overflow" =>
  status === 429 || status >= 500
    ? "provider_unavailable"
    : ProviderFailure.overflowOf(text) !== null
    ? "overflow"
    : "provider_refused"

/**
 * Why a request to the upstream failed, in one line: the client's message (`Transport error (POST <url>)`) and the
 * cause's own words when it has them (`connect ECONNREFUSED 127.0.0.1:9`, `getaddrinfo ENOTFOUND …`). Never a
 * header: the upstream key is not in either.
 */
const transportReason = (error: { readonly message: string; readonly cause?: unknown }): string => {
  const cause = error.cause instanceof Error ? error.cause.message : typeof error.cause === "string" ? error.cause : ""
  return cause === "" || error.message.includes(cause) ? error.message : `${error.message}: ${cause.replace(/\s+/g, " ").slice(0, 200)}`
}

/** What an agent is, from its user agent (the thread's title says it). */
const agentOf = (userAgent: string | undefined) =>
  userAgent?.startsWith("claude-cli/") ? "Claude Code" : userAgent?.startsWith("codex") ? "Codex" : "Agent"

/** The run failure of a stream that did not complete: the upstream's own, or a protocol failure (cut short). */
const runFailure = (outcome: Exclude<StreamOutcome, { _tag: "completed" }>): { code: RunFailureCode; reason: string } =>
  outcome._tag === "failed" ? outcome : { code: "provider_protocol", reason: outcome.reason }

/**
 * `f` computed once, on the first call: its value, or what it threw (as `UnknownException`); later calls return the
 * same.
 */
const once = <A>(f: () => A): (() => Either.Either<A, Cause.UnknownException>) => {
  let done: Either.Either<A, Cause.UnknownException> | null = null
  return () => (done ??= Either.try({ try: f, catch: (e) => new Cause.UnknownException(e) }))
}

/** A completed answer's outcome as recorded (`GatewayThreads.Outcome`). */
const completed = (reply: GatewayThreads.Reply, expansion?: ReadonlyArray<GatewayThreads.Expansion>): GatewayThreads.Outcome => ({
  _tag: "completed",
  reply,
  expansion
})

/** A failed answer's outcome as recorded (`GatewayThreads.Outcome`). */
const failed = (code: RunFailureCode, reason: string): GatewayThreads.Outcome => ({ _tag: "ended", status: "failed", code, reason })

/** The dialects whose requests the gateway offloads on the way out, by instance kind. */
const offloads: Partial<Record<string, GatewayOffload.Offload>> = {
  "anthropic-messages": GatewayOffload.anthropic,
  "openai-responses": GatewayResponsesOffload.offload,
  "openai-chat": GatewayChatOffload.offload
}

/**
 * The most `thread_read` rounds the gateway continues for one agent request: a reply after them that still calls only
 * `thread_read` is answered as reads beside the agent's calls are (`Offload.besideOf` with `alone`), and the agent
 * gets it without the calls.
 */
const maxReadHops = 8

/** `reply` with the usage of the hidden hops (answered `thread_read` rounds) added to its own. */
const withHidden = (reply: GatewayThreads.Reply, hidden: ReadonlyArray<GatewayThreads.Reply["tokens"]>): GatewayThreads.Reply => {
  if (hidden.length === 0) return reply
  const all = [reply.tokens, ...hidden].filter((t) => t !== null)
  const last = reply.tokens
  return {
    ...reply,
    // What the last request carried (the dashboard's point); the run's tokens are every hop's.
    carriedTokens: last === null ? null : last.inputTokens + last.cacheWriteTokens + last.cacheReadTokens,
    tokens: all.length === 0 ? null : {
      inputTokens: all.reduce((n, t) => n + t.inputTokens, 0),
      cacheWriteTokens: all.reduce((n, t) => n + t.cacheWriteTokens, 0),
      cacheReadTokens: all.reduce((n, t) => n + t.cacheReadTokens, 0),
      outputTokens: all.reduce((n, t) => n + t.outputTokens, 0)
    }
  }
}

/** One gateway endpoint: its dialect, the upstream path (after the instance's `baseUrl`), and whether it is recorded. */
interface Endpoint {
  readonly dialect: Dialect
  readonly upstreamPath: string
  readonly record: boolean
}

/**
 * The gateway's routes on the API's router (see the module docblock). Requires `GatewayThreads` and an
 * `HttpClient` (the server provides undici's).
 */
export const layer = (options: GatewayOptions) =>
  HttpApiBuilder.Router.use((router) =>
    Effect.gen(function*() {
      const threads = yield* GatewayThreads.GatewayThreads
      const reader = yield* ThreadRead.ThreadRead
      const store = yield* ThreadStore
      const threadOffload = yield* ThreadOffload.ThreadOffload
      const scope = yield* Effect.scope
      const http = yield* HttpClient.HttpClient
      const shutdown = yield* ServerShutdown.ServerShutdown
      /** Whether the shutdown's deadline has come (an answer stopped then was cut by it, not by its agent). */
      const stopped = GatewayDialect.stoppedOf(shutdown.cutting)
      const unended = (u: GatewayDialect.Unended): GatewayThreads.Outcome => ({ _tag: "ended", ...u })
      // The read-only token is known (so its refusal says what it is) but never granted: a gateway request writes.
      const digests = {
        admin: Auth.digest(Redacted.value(options.tokens.admin)),
        read: options.tokens.read === null ? null : Auth.digest(Redacted.value(options.tokens.read))
      }
      const models = options.providers.filter(ServerConfig.isModelInstance)
      const counter = TokenCounter.make()
      const interner = GatewayMemo.makeInterner()
      /** Answered calls' `extra_content` (Gemini's thought signatures) for switched conversations. */
      const signatures = GatewayThoughtSignatures.make()
      const bodies = GatewayBody.makeParser()
      /** Token counts of message texts, kept while a conversation repeats them (cleared when large). */
      const counts = new Map<string, number>()
      /** Keeps `n` as `text`'s count (the memo cleared first when it holds 20,000). */
      const remember = (text: string, n: number) => {
        if (counts.size >= 20_000) counts.clear()
        counts.set(text, n)
        return n
      }
      const count = (text: string) => counts.get(text) ?? remember(text, counter.count(text))
      /**
       * `count` of each of `values`' JSON texts longer than `TokenCounter.sliceChars`, counted ahead with the event
       * loop handed back between their stretches (`TokenCounter.countYielding`) and kept in `counts`: the offload
       * plan, synchronous, then finds them there (a 20 MB message held every other request of the server for the
       * seconds its count took).
       */
      const countAhead = (values: ReadonlyArray<unknown>) =>
        Effect.forEach(values, (value) => {
          const { text } = GatewayMedia.countable(value)
          if (text.length <= TokenCounter.sliceChars || counts.has(text)) return Effect.void
          return Effect.map(TokenCounter.countYielding(counter, text), (n) => void remember(text, n))
        }, { discard: true })

      const upstreamHeaders = (request: HttpServerRequest.HttpServerRequest, dialect: Dialect, key: Option.Option<Redacted.Redacted>) => {
        const out: Record<string, string> = {}
        for (const [name, value] of Object.entries(request.headers)) {
          if (!dropped.has(name) && !name.startsWith("proxy-")) out[name] = value
        }
        dialect.upstreamHeaders(key, out)
        return out
      }

      const backHeaders = (response: HttpClientResponse.HttpClientResponse) =>
        Object.fromEntries(Object.entries(response.headers).filter(([name]) => !droppedBack.has(name)))

      /**
       * One request to `endpoint` (see `answer`). Interrupted before it has answered (the agent hung up, or the
       * shutdown's deadline cut its connection, while a whole answer was on its way or, switched, before the
       * upstream's head), its run is ended by what `answer` left in `onHangUp` (`GatewayDialect.hungUp`): without it the
       * run stayed `running` until the next start (found by the restart attack of branch b44gw,
       * `GatewayWholeHangUp.test.ts`). A streamed answer's hang-up is its stream's (`Stream.ensuring`).
       */
      const handle = (endpoint: Endpoint) =>
        Effect.suspend(() => {
          const onHangUp: GatewayDialect.HangUp = { record: Effect.void }
          return answer(endpoint, onHangUp).pipe(Effect.onInterrupt(() => onHangUp.record))
        })

      const answer = ({ dialect, record, upstreamPath }: Endpoint, onHangUp: GatewayDialect.HangUp) =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          // The protocol's key header when sent (its refusal names it), else `Authorization: Bearer`. A key header
          // sent empty beside an Authorization header is no key: the bearer token decides (found at an earlier stop:
          // `x-api-key:` with a valid bearer token was refused "the x-api-key header is empty"; a client that sets
          // both, one of them blank, is common). Empty without Authorization, it is still refused naming it.
          const keySent = dialect.keyHeader === undefined ? undefined : request.headers[dialect.keyHeader]
          const key = keySent !== undefined && keySent.trim() === "" && request.headers.authorization !== undefined ? undefined : keySent
          const verdict = key === undefined || dialect.keyHeader === undefined
            ? Auth.roleOf(request.headers.authorization, digests)
            : Auth.roleOfKey(dialect.keyHeader, key, digests)
          // Refused without reading the body beyond 64 KiB, then the connection closed (`refuseUnread`): answered kept
          // alive, Node read and discarded an unauthenticated client's whole body (up to the declared 32 MiB and more).
          if (verdict._tag === "denied") {
            return yield* refuseUnread(
              request,
              dialect.refuse("unauthenticated", `Baton gateway: ${verdict.reason}; send a Baton token as ${dialect.tokenHint}`)
            )
          }
          if (verdict.role !== "admin") {
            // Known but read-only: 403, as the API answers it on a write. Counting tokens writes nothing, but it goes
            // upstream with the instance's key, which the read-only token does not hold either.
            return yield* refuseUnread(
              request,
              dialect.refuse(
                "forbidden",
                record
                  ? `Baton gateway: the read-only token may not send model requests (each is recorded); send the admin token as ${dialect.tokenHint}`
                  : `Baton gateway: the read-only token may not send requests upstream (they go with the instance's key); send the admin token as ${dialect.tokenHint}`
              )
            )
          }
          const encoding = contentEncodingOf(request.headers["content-encoding"])
          if (encoding !== null) {
            // Read as it came, a compressed body was "not a JSON object". Refused before it is read (drained, then the
            // connection closed, as a body over the limit): the gateway decodes no content coding (docs/gateway.md).
            // `Accept-Encoding` says which coding it takes (RFC 9110 §15.5.16).
            return yield* refuseAfterDrain(
              request,
              dialect.refuse(
                "unsupported",
                `Content-Encoding: ${encoding.slice(0, 60)} is not supported by Baton's gateway; send the body uncompressed (identity)`
              ).pipe(HttpServerResponse.setHeader("accept-encoding", "identity"))
            )
          }
          const transfer = transferCodingOf(request.headers["transfer-encoding"])
          if (transfer !== null) {
            return yield* refuseAfterDrain(
              request,
              dialect.refuse(
                "unsupported",
                `Transfer-Encoding: ${transfer.slice(0, 60)} is not supported by Baton's gateway; send the body uncompressed (chunked alone, or with Content-Length)`
              ).pipe(HttpServerResponse.setHeader("accept-encoding", "identity"))
            )
          }
          const declared = request.headers["content-length"]
          if (declared !== undefined && Number(declared) > options.maxBodyBytes) {
            // Drained (bounded, as the API's guard does) and then the connection closed: answered at once and kept
            // alive, the body was read and discarded by node for as long as the client sent it (a declared gigabyte).
            return yield* refuseAfterDrain(
              request,
              dialect.refuse("too_large", `the request body (${declared} bytes) is over the gateway's limit of ${options.maxBodyBytes} bytes (gateway.maxBodyBytes)`)
            )
          }
          const bytes = yield* Effect.either(readBody(request, options.maxBodyBytes))
          if (bytes._tag === "Left") return dialect.refuse("invalid", "the body could not be read")
          if (bytes.right === null) {
            // The rest drained as above (a chunked body that never ended was read forever and never answered; new
            // user r35), then the connection closed.
            return yield* refuseAfterDrain(
              request,
              dialect.refuse("too_large", `the request body is over the gateway's limit of ${options.maxBodyBytes} bytes (gateway.maxBodyBytes)`)
            )
          }
          const body = bytes.right
          // Parsed with the scope's previous bodies where it shares their bytes (`GatewayBody`): the same value.
          const bodyScope = `${upstreamPath}\u0000${request.headers["x-claude-code-session-id"] ?? request.headers["thread-id"] ?? request.headers["session-id"] ?? ""}`
          const read = bodies.parse(bodyScope, body)
          const parsed = read.value
          if (!isRecord(parsed)) return dialect.refuse("invalid", "the body is not a JSON object")
          if (GatewayBody.nestsDeeperThan(parsed, GatewayBody.maxNesting)) {
            return dialect.refuse("invalid", `the body nests arrays and objects more than ${GatewayBody.maxNesting} levels deep`)
          }
          const modelField = modelId(parsed.model)
          if (Either.isLeft(modelField)) return dialect.refuse("invalid", modelField.left)
          const asSent = dialect.history(parsed, request.headers)
          if (typeof asSent === "string") return dialect.refuse("invalid", asSent)
          const model = modelField.right
          const route = options.routes.find((r) => matches(r.model, model))
          const target = route === undefined ? undefined : models.find((p) => p.name === route.provider)
          if (target === undefined) {
            return dialect.refuse("unrouted", `model: ${model.slice(0, 200)} is not routed by this Baton gateway (routes: ${options.routes.map((r) => r.model).join(", ") || "none"})`)
          }
          // From here on the request is forwarded and recorded: the shutdown waits for its outcome's record (the
          // request's scope closes once its answer is sent or cut and that outcome recorded; `ServerShutdown`).
          if (record) yield* shutdown.holdScoped
          // Codex's compaction requests (`/responses/compact`) are never switched (their answer is no Responses turn).
          const switchWire = upstreamPath === "/responses/compact" ? undefined : GatewaySwitchWire.forRoute(dialect.kind, target.config.kind)
          if (target.config.kind !== dialect.kind && record && switchWire !== undefined) {
            // Nothing beside the system prompt (a Chat Completions request of system messages alone, a Responses one
            // with `instructions` and no input): converted, no message is left for the other protocol, which Anthropic
            // Messages refuses and a model cannot answer. Refused before anything is recorded or sent (before branch
            // b48gw it was recorded, sent, and the upstream's refusal was the agent's answer).
            if (asSent.messages.length === 0) {
              return dialect.refuse(
                "invalid",
                `${dialect.kind === "openai-responses" ? "input" : "messages"}: expected at least one message beside the system prompt (model ${model.slice(0, 200)} routes to provider instance "${target.name}", ${GatewayDialect.withArticle(target.config.kind)} upstream, which needs one)`
              )
            }
            // A provider switch: the history converted and fitted for the other protocol, the answer converted back.
            // Its own parse: the switch's conversion is given objects no earlier request holds (not the frozen ones).
            const own = read.reused === 0 ? null : parseJson(new TextDecoder().decode(body))
            const switched = isRecord(own) ? { body: own, history: dialect.history(own, request.headers) } : null
            return yield* GatewaySwitched.serve({
              threads,
              reader,
              store,
              http,
              count,
              offloader: threadOffload,
              scope,
              target,
              body: switched?.body ?? parsed,
              history: switched !== null && typeof switched.history !== "string" ? switched.history : asSent,
              model,
              agent: agentOf(request.headers["user-agent"]),
              wire: switchWire,
              offload: offloads[dialect.kind],
              stopped,
              onHangUp,
              signatures
            })
          }
          if (target.config.kind !== dialect.kind && upstreamPath === "/v1/messages/count_tokens") {
            // `count_tokens` for a model routed to another protocol: no upstream counts Anthropic requests there, so
            // Baton answers with its own count (`TokenCounter`, o200k) of what the count covers: the system prompt,
            // the messages and the tools, each as its JSON; an estimate, as a switched request is fitted afresh anyway.
            // (`counter`, not the memo `count`: a whole history's JSON kept as a key per request would hold megabytes.)
            const counted = ["system", "messages", "tools"].reduce((n, key) => parsed[key] === undefined ? n : n + GatewayMedia.jsonTokens(counter.count, parsed[key]), 0)
            return HttpServerResponse.unsafeJson({ input_tokens: counted })
          }
          if (target.config.kind !== dialect.kind) {
            return dialect.refuse(
              "unrouted",
              `model: ${model.slice(0, 200)} routes to provider instance "${target.name}" (${target.config.kind}), not ${GatewayDialect.withArticle(dialect.kind)} upstream; this gateway converts model requests between protocols (a provider switch), not Codex's compaction requests (/v1/responses/compact)`
            )
          }

          // The history's messages the conversation's previous requests sent already are their objects (`GatewayMemo`):
          // what was computed of them (fingerprints, token counts, stubs, JSON) is not computed again.
          const historyKey = record ? Object.keys(parsed).find((k) => parsed[k] === asSent.messages) : undefined
          if (historyKey !== undefined) {
            interner.intern(`${dialect.kind}:${asSent.session ?? ""}`, parsed, historyKey)
            bodies.remember(bodyScope, body, parsed, historyKey)
          }
          const recognised = historyKey === undefined ? asSent : dialect.history(parsed, request.headers)
          const history = typeof recognised === "string" ? asSent : recognised

          // Tool-result offload on the way out (Anthropic Messages, OpenAI Responses and Chat Completions, the instance's
          // `toolResultOffload` on): the conversation's stubs, a flush when the policy says so, and `thread_read` offered.
          const offloader = upstreamPath === "/responses/compact" ? undefined : offloads[dialect.kind]
          let offload: GatewayThreads.GatewayOffloadState | undefined
          let sentBody = body
          // With offload on: the body as sent (the continuations after `thread_read` extend it), and the thread.
          let outBody: Record<string, unknown> | null = null
          let knownThread: Option.Option<ThreadId> = Option.none()
          // Whether `thread_read` is the gateway's (it offered it): a tool of that name the agent sent is the agent's, and
          // the upstream's calls of it go to the agent as they came.
          const ownsReads = offloader !== undefined && Array.isArray(parsed.tools) && offloader.shape.offer(parsed) !== parsed.tools
          // The stored conversation as read here (the record does not read it again before taking the thread's lock).
          let stored: GatewayConversations.Conversation | undefined
          let sentCount = 0
          /**
           * What later requests send in place of the message the agent received (`visible`) after hidden thread_read
           * rounds: the rounds the continuations added (`last` the request of the last one) and the final answer.
           */
          // Keyed by content print (`expansionKeyOf`): a re-rendered message (its thinking left out) still matches.
          const fingerprint = (m: unknown) => GatewayThreads.expansionKeyOf(dialect.wire, m)
          const expansionOf = (
            visible: ReadonlyArray<unknown>,
            last: Record<string, unknown>,
            final: ReadonlyArray<unknown>,
            beside?: ReadonlyArray<GatewayOffload.Answer>
          ) => offloader === undefined ? [] : offloader.expansions(visible, last, sentCount, final, fingerprint, beside)
          // `count_tokens` (same protocol) counts what Baton would send for the conversation: its stubs, its hidden
          // rounds and `thread_read` offered, as `/v1/messages` would send them now (planned, never recorded). Before
          // branch b48gw it counted the agent's body, the history the upstream no longer gets: an agent that sizes its
          // context by it (Claude Code's `/context`) saw the unstubbed conversation, its answers' usage the stubbed one.
          const counting = upstreamPath === "/v1/messages/count_tokens"
          if ((record || counting) && offloader !== undefined && target.toolResultOffload.enabled) {
            const conversation = yield* Effect.option(threads.conversationOf(dialect.wire, history.session, history.system, history.messages))
            const known = Option.flatten(conversation)
            const now = yield* Clock.currentTimeMillis
            yield* countAhead(offloader.shape.history(parsed) ?? [])
            const plan = GatewayOffload.plan(offloader.shape, {
              body: parsed,
              offloaded: Option.match(known, { onNone: () => [], onSome: (c) => c.offloaded }),
              settings: target.toolResultOffload.settings,
              windowTokens: target.config.contextWindow,
              prices: target.config.prices,
              requestsSoFar: Option.match(known, { onNone: () => 0, onSome: (c) => c.requests }),
              msSinceLastRequest: Option.match(known, { onNone: () => null, onSome: (c) => Math.max(0, now - Date.parse(c.updatedAt)) }),
              count,
              expansions: Option.match(known, { onNone: () => undefined, onSome: (c) => c.expansions }),
              fingerprint,
              fingerprintOf: (m) => GatewayThreads.fingerprintOf(dialect.wire, m)
            }, !counting)
            if (plan.changed) sentBody = new TextEncoder().encode(GatewayMemo.bodyJson(plan.body))
            if (!counting) {
              offload = { offloaded: plan.offloaded, flush: plan.flush }
              outBody = plan.body
              sentCount = offloader.shape.history(plan.body)?.length ?? 0
              knownThread = Option.map(known, (c) => c.threadId as ThreadId)
              stored = Option.getOrUndefined(known)
            }
          }

          const query = request.url.includes("?") ? request.url.slice(request.url.indexOf("?")) : ""
          const url = target.config.baseUrl.replace(/\/+$/, "") + upstreamPath + query
          const headersOut = upstreamHeaders(request, dialect, target.apiKey)
          const post = (bytes: Uint8Array) =>
            HttpClientRequest.post(url).pipe(
              HttpClientRequest.setHeaders(headersOut),
              HttpClientRequest.bodyUint8Array(bytes, request.headers["content-type"] ?? "application/json")
            )
          const outgoing = post(sentBody)
          const requestRecord: GatewayThreads.GatewayRequest = {
            wire: dialect.wire,
            session: history.session,
            parentSession: history.parent ?? null,
            agent: agentOf(request.headers["user-agent"]),
            system: history.system,
            messages: history.messages,
            model,
            providerInstance: target.name as ProviderInstance,
            contextWindow: target.config.contextWindow,
            prices: target.config.prices,
            offload,
            conversation: stored
          }
          // Forward first: the upstream request starts before anything is recorded.
          const sent = yield* Effect.fork(Effect.either(http.execute(outgoing)))
          // Interrupted before the upstream's head (the agent hung up, or the shutdown's deadline cut the connection),
          // the request the upstream had is recorded with that outcome (no run for it before branch b44gw).
          const response = yield* Fiber.join(sent).pipe(Effect.onInterrupt(() =>
            !record ? Effect.void : Effect.flatMap(stopped, (s) => threads.begin(requestRecord, unended(GatewayDialect.hungUp(s)))).pipe(
              Effect.catchAllCause((cause) => Effect.logError("gateway: could not record a request its agent hung up on (forwarded all the same)", cause))
            )
          ))
          // The answer's outcome when it was known before the request's record began (an upstream that answered at
          // once): the request's record takes it into its own unit of work (`settled`), one transaction instead of two.
          let early: GatewayThreads.Outcome | null = null
          let beginning = false
          /**
           * Whether an outcome is being written to the record, or was (`settleOf`): a hang-up after it records nothing
           * more. Set once the request's record is there and the write of the outcome begins (uninterruptible): set
           * before the record was joined, an agent that hung up while the record was still being written (a busy
           * database) interrupted the join, and neither the answer's outcome nor the hang-up was written, the run
           * `running` until the next start (review r44, `GatewaySettleHangUp.test.ts`).
           */
          let given = false
          // Record alongside: once the upstream's answer has begun and the event loop has turned (its head and first
          // bytes go out first), in a fiber of its own (it outlives this handler: the stream's end waits for it).
          // `null`: nothing to record (`count_tokens`); `None`: the record failed (logged; the agent still gets its answer).
          // A record with the answer that fails is logged and made again without it (then the answer's own record, or
          // `output_not_recorded`, as when they are apart).
          const recording = !record ? null : yield* toEventLoop.pipe(
            Effect.zipRight(Effect.suspend(() => {
              beginning = true
              const outcome = early
              if (outcome === null) return Effect.map(threads.begin(requestRecord), (begun) => ({ begun, settled: false }))
              return threads.begin(requestRecord, outcome).pipe(
                Effect.map((begun) => ({ begun, settled: true })),
                Effect.catchAllCause((cause) =>
                  Effect.logError("gateway: could not record a request with its answer; recording them apart", cause).pipe(
                    Effect.zipRight(Effect.map(threads.begin(requestRecord), (begun) => ({ begun, settled: false })))
                  )
                )
              )
            })),
            Effect.tapErrorCause((cause) => Effect.logError("gateway: could not record a request (forwarded all the same)", cause)),
            // A defect too is a record that failed (`None`): `Effect.option` let it through, and the handler that
            // joined it answered 500 in place of the upstream's answer (review r39b). An interruption stays one.
            Effect.map(Option.some),
            Effect.catchAllCause((cause) => Cause.isInterruptedOnly(cause) ? Effect.interrupt : Effect.succeed(Option.none())),
            // Waited for by the shutdown too (its handler may be gone: an agent that hung up on a whole answer).
            shutdown.hold,
            Effect.forkDaemon
          )
          const recorded: Effect.Effect<Option.Option<{ readonly begun: GatewayThreads.Begun; readonly settled: boolean }>> = recording === null
            ? Effect.succeed(Option.none())
            : Fiber.join(recording)
          /**
           * Answers the upstream's `thread_read` calls from the conversation's thread (the request's record, else the
           * stored conversation's); without a thread, each call is answered as a failed read, and a call whose input could
           * not be read as arguments (`invalid`) with that error. The continuation must
           * stay under the routed instance's window: `body` (the request just sent) and `content` (the reply that
           * called) are counted, and an answer that would take the continuation over `fitLimit` is refused to the
           * model with a message saying so (it may ask for a smaller `limit`), never sent.
           */
          const answerReads = (reads: ReadonlyArray<GatewayOffload.Read>, body: Record<string, unknown>, content: unknown) =>
            Effect.gen(function*() {
              const threadId = Option.orElse(Option.map(yield* recorded, (r) => r.begun.threadId), () => knownThread)
              const answers = yield* Effect.forEach(reads, (r) =>
                r.invalid !== undefined ? Effect.succeed({ id: r.id, output: r.invalid, isError: true }) : Option.match(threadId, {
                  onNone: () => Effect.succeed({ id: r.id, output: "thread_read: this conversation has no record to read from yet", isError: true }),
                  onSome: (id) => Effect.map(reader.answer(id, JSON.stringify(r.input ?? {})), (a) => ({ id: r.id, ...a }))
                }))
              const used = GatewayMedia.jsonTokens(counter.count, body) + GatewayMedia.jsonTokens(counter.count, content ?? null)
              const limit = fitLimit(target.config.contextWindow, target.config.maxOutputTokens, body)
              return GatewayDialect.fitAnswers(answers, used, limit, (a) => counter.count(a.output) + answerOverhead).answers
            })
          /**
           * Offers the answer's outcome to the request's record when that has not begun (it then records both in one
           * unit of work). Synchronous: called as soon as the outcome is known, before the event loop turns. An outcome
           * that cannot be made (`outcomeOf` throws) is not offered: `settle` records it as a failed answer record.
           */
          const offer = (outcomeOf: () => Either.Either<GatewayThreads.Outcome, Cause.UnknownException>) => {
            if (recording === null || beginning) return
            const outcome = outcomeOf()
            if (Either.isRight(outcome)) early = outcome.right
          }
          /**
           * Records an outcome once the request's record exists (nothing when it failed); failures logged, never the
           * agent's. `outcome` may be given as a function (computed once): what it throws is a failed answer record.
           */
          const settle = (outcome: GatewayThreads.Outcome | (() => GatewayThreads.Outcome)) =>
            settleOf(once(typeof outcome === "function" ? outcome : () => outcome))
          /** `settle` of an outcome computed once (`once`). */
          const settleOf = (outcomeOf: () => Either.Either<GatewayThreads.Outcome, Cause.UnknownException>) =>
            Effect.suspend(() => {
              offer(outcomeOf)
              return recorded
            }).pipe(
              Effect.flatMap((r) =>
                Effect.uninterruptible(Effect.suspend(() => {
                  given = true
                  return Option.match(r, {
                    onNone: () => Effect.void,
                    onSome: ({ begun, settled }) =>
                      settled ? Effect.void : Effect.flatMap(outcomeOf(), (o) => threads.settle(begun, o)).pipe(Effect.catchAllCause((cause) =>
                        Effect.logError("gateway: could not record an answer (the agent got it all the same); the run is marked failed", cause).pipe(
                          Effect.zipRight(threads.fail(begun, "failed", "output_not_recorded", "Baton could not record the upstream's answer (see the server's log)")),
                          Effect.catchAllCause((again) => Effect.logError("gateway: could not mark the run failed either", again))
                        )
                      ))
                  })
                }))
              )
            )

          // Interrupted before it answers (a whole answer on its way), the handler records the hang-up or the cut.
          onHangUp.record = Effect.suspend(() => given ? Effect.void : Effect.flatMap(stopped, (s) => settle(unended(GatewayDialect.hungUp(s)))))
          if (response._tag === "Left") {
            const why = transportReason(response.left)
            yield* settle(failed("provider_unavailable", `the upstream could not be reached: ${why}`))
            yield* Effect.logWarning(`gateway: the upstream of model ${model.slice(0, 200)} could not be reached: ${why}`)
            return dialect.refuse("unreachable", `Baton could not reach the upstream of model ${model.slice(0, 200)}: ${why}`)
          }
          const upstream = response.right
          const headers = backHeaders(upstream)
          const contentType = upstream.headers["content-type"] ?? "application/json"
          const ok = upstream.status >= 200 && upstream.status < 300

          if (!ok || recording === null || !contentType.includes("text/event-stream")) {
            // Whole answers (errors, count_tokens, non-streamed replies): read, recorded, passed back unchanged.
            const answer = yield* Effect.either(upstream.arrayBuffer)
            if (answer._tag === "Left") {
              yield* settle(failed("provider_unavailable", `the upstream's answer broke off: ${answer.left.message}`))
              return dialect.refuse("unreachable", "the upstream's answer broke off")
            }
            let bytesBack = new Uint8Array(answer.right)
            let status = upstream.status
            let back = { headers, contentType }
            // The upstream's own thread_read calls: answered here, the conversation continued with the upstream, so
            // the agent gets one answer: the last, after what the hidden rounds said (the usage of every hop is the run's).
            const hidden: Array<GatewayThreads.Reply["tokens"]> = []
            // The hidden rounds' content as the upstream sent it: what they show (their text) goes to the agent before
            // the last round's, as a stream passes it on (`Offload.withContent`).
            const rounds: Array<ReadonlyArray<unknown>> = []
            if (ok && outBody !== null && offloader !== undefined && ownsReads) {
              let reply = parseJson(new TextDecoder().decode(bytesBack))
              for (let hop = 0; hop < maxReadHops; hop++) {
                const content = offloader.contentOfBody(reply)
                const reads = content === null ? null : offloader.readsOf(content)
                if (reads === null || content === null) break
                hidden.push(dialect.replyOfBody(reply).tokens)
                rounds.push(offloader.roundOfBody?.(reply) ?? content)
                outBody = offloader.continuation(outBody, content, yield* answerReads(reads, outBody, content))
                const next = yield* Effect.either(Effect.flatMap(http.execute(post(new TextEncoder().encode(JSON.stringify(offloader.sendable(outBody))))), (r) => Effect.map(r.arrayBuffer, (b) => ({ r, b }))))
                if (next._tag === "Left") {
                  const why = transportReason(next.left)
                  yield* settle(failed("provider_unavailable", `the upstream could not be reached after thread_read: ${why}`))
                  yield* Effect.logWarning(`gateway: the upstream of model ${model.slice(0, 200)} could not be reached after thread_read: ${why}`)
                  return dialect.refuse("unreachable", `Baton could not reach the upstream of model ${model.slice(0, 200)}: ${why}`)
                }
                bytesBack = new Uint8Array(next.right.b)
                status = next.right.r.status
                back = { headers: backHeaders(next.right.r), contentType: next.right.r.headers["content-type"] ?? "application/json" }
                reply = parseJson(new TextDecoder().decode(bytesBack))
                if (status < 200 || status >= 300) break
              }
            }
            // thread_read calls beside the agent's own: answered here, the agent gets the reply without them, and the
            // agent's next request carries them again with these answers (the expansion).
            let beside: { readonly answers: ReadonlyArray<GatewayOffload.Answer>; readonly content: ReadonlyArray<unknown> } | null = null
            // The last round's content as the upstream sent it (the expansion's end; `null`: no whole reply to read).
            let final: ReadonlyArray<unknown> | null = null
            if (ok && status >= 200 && status < 300 && outBody !== null && offloader !== undefined && ownsReads) {
              const reply = parseJson(new TextDecoder().decode(bytesBack))
              const content = isRecord(reply) ? offloader.contentOfBody(reply) : null
              final = content
              // After the last round the gateway answers, a reply that still calls only thread_read is answered the same
              // way (the agent never gets the call; the reply without it ends the turn).
              const found = content === null || offloader.besideOf === undefined ? null : offloader.besideOf(content, hidden.length >= maxReadHops)
              if (isRecord(reply) && content !== null && found !== null) beside = { answers: yield* answerReads(found.reads, outBody, content), content }
              if (isRecord(reply)) {
                // What the agent receives, from the reply parsed once: after the hidden rounds' content, and with its
                // calls told apart as a stream's are (Chat Completions: ids made distinct); encoded again only if changed.
                let shown = content !== null && offloader.withContent !== undefined && (found !== null || rounds.length > 0)
                  ? offloader.withContent(reply, found?.visible ?? content, rounds, found !== null)
                  : reply
                if (offloader.callsApart !== undefined) shown = offloader.callsApart(shown)
                if (shown !== reply) bytesBack = new TextEncoder().encode(JSON.stringify(shown))
              }
            }
            if (recording !== null) {
              const text = new TextDecoder().decode(bytesBack)
              const whole = status >= 200 && status < 300
              // A 2xx whose body is not a JSON object (a proxy's HTML page) is no reply: the run fails, it is not a
              // completed run with nothing recorded (the agent gets the bytes as they came).
              const notJson = whole && !isRecord(parseJson(text))
              yield* settle(
                notJson
                  ? failed("provider_protocol", `the upstream answered HTTP ${status} with a body that is not JSON: ${text.slice(0, 300)}`)
                  : whole
                  ? () => {
                    const reply = dialect.replyOfBody(parseJson(text))
                    const content = offloader?.contentOfBody(parseJson(text)) ?? []
                    return completed(
                      withHidden(reply, hidden),
                      (hidden.length > 0 || beside !== null) && outBody !== null ? expansionOf(content, outBody, beside?.content ?? final ?? content, beside?.answers) : undefined
                    )
                  }
                  : failed(failureCode(status, text), GatewayDialect.upstreamFailureReason(status, text))
              )
            }
            return HttpServerResponse.uint8Array(bytesBack, { status, headers: back.headers, contentType: back.contentType })
          }

          // A stream: each chunk goes on to the agent as it arrives, and through the assembler; the reply is recorded
          // once the stream ends (after the request's own record), before the agent's connection sees the end.
          const assembler = dialect.assembler()
          // With offload on, the answer passes through hops: the upstream's thread_read calls are held back, answered
          // and continued with the upstream, whose next stream joins the message the agent is receiving.
          const hops: Array<GatewayOffload.Hop> = []
          let lastBody: Record<string, unknown> | null = null
          // The last hop's thread_read calls beside the agent's own: its content as the upstream sent it, the answers.
          let beside: { readonly answers: ReadonlyArray<GatewayOffload.Answer>; readonly content: ReadonlyArray<unknown> } | null = null
          const encoder = new TextEncoder()
          const spliced = (source: Stream.Stream<Uint8Array, HttpClientError.ResponseError>, hop: GatewayOffload.Hop, body: Record<string, unknown>): Stream.Stream<Uint8Array, HttpClientError.ResponseError> => {
            hops.push(hop)
            return source.pipe(
              Stream.map((chunk) => hop.push(chunk)),
              Stream.filter((text) => text !== ""),
              Stream.map((text) => encoder.encode(text)),
              Stream.concat(Stream.unwrap(Effect.gen(function*() {
                const end = hop.end(hops.length > maxReadHops)
                if (end._tag === "beside") {
                  // Answered here; the agent gets the message without the calls (the record keeps them, `finish`).
                  beside = { answers: yield* answerReads(end.reads, body, end.content), content: end.content }
                  return end.held === "" ? Stream.empty : Stream.make(encoder.encode(end.held))
                }
                if (end._tag === "release" || hops.length > maxReadHops) return end.held === "" ? Stream.empty : Stream.make(encoder.encode(end.held))
                // The held text goes on first (Chat Completions: text that came after the hidden call began), then the
                // continuation's stream or the error that ends the agent's.
                const said = end.said === undefined || end.said === "" ? Stream.empty : Stream.make(encoder.encode(end.said))
                const next = offloader!.continuation(body, end.content, yield* answerReads(end.reads, body, end.content))
                const response = yield* Effect.either(http.execute(post(encoder.encode(JSON.stringify(offloader!.sendable(next))))))
                lastBody = next
                // A 2xx that is not a stream (a JSON body, an HTML page) cannot join the message: an error, as a refusal.
                if (response._tag === "Right" && response.right.status >= 200 && response.right.status < 300 && (response.right.headers["content-type"] ?? "").includes("text/event-stream")) {
                  return Stream.concat(said, spliced(response.right.stream, offloader!.hop(end), next))
                }
                // The continuation failed: the agent gets an error event in the stream (the run fails: no message_stop,
                // no response.completed).
                const text = response._tag === "Left" ? "" : yield* Effect.orElseSucceed(response.right.text, () => "")
                return Stream.concat(said, Stream.make(encoder.encode((hop.error ?? offloader!.streamError)(
                  text,
                  `the upstream could not continue after thread_read${response._tag === "Left" ? `: ${response.left.message}` : ` (HTTP ${response.right.status})`}`
                ))))
              })))
            )
          }
          // Spliced only where thread_read is offered (the request has tools); events are re-encoded as `event:` and
          // `data:` lines, which is how Anthropic sends them (OpenAI's streams have `data:` lines only, re-encoded alike).
          const splicing = outBody !== null && offloader !== undefined && Array.isArray(outBody.tools) && ownsReads
          const visible = !splicing ? upstream.stream : spliced(upstream.stream, offloader!.hop(null), outBody!)
          let settled = false
          const finish = Effect.suspend(() => {
            settled = true
            const outcome = assembler.outcome()
            const recordedAs = once((): GatewayThreads.Outcome => {
              if (outcome._tag === "completed") {
                const answered = beside as { readonly answers: ReadonlyArray<GatewayOffload.Answer>; readonly content: ReadonlyArray<unknown> } | null
                // After hidden hops, the run's usage is every hop's.
                const hidden = hops.length > 1 && lastBody !== null
                if (!hidden && answered === null) return completed(outcome.reply)
                const visible = offloader!.contentOfReply(outcome.reply)
                return completed(
                  hidden ? withHidden({ ...outcome.reply, tokens: hops.at(-1)!.tokens() }, hops.slice(0, -1).map((h) => h.tokens())) : outcome.reply,
                  expansionOf(visible, lastBody ?? outBody!, answered?.content ?? hops.at(-1)!.content(), answered?.answers)
                )
              }
              const failure = runFailure(outcome)
              return failed(failure.code, failure.reason)
            })
            // Offered before the event loop turns: a request record still waiting for its turn takes it along.
            offer(recordedAs)
            return toEventLoop.pipe(Effect.zipRight(settleOf(recordedAs)))
          })
          const stream = visible.pipe(
            Stream.tap((chunk) => Effect.sync(() => assembler.push(chunk))),
            Stream.catchAll((e) =>
              Stream.fromEffect(Effect.suspend(() => {
                settled = true
                return Effect.flatMap(stopped, (s) => settle(unended(GatewayDialect.brokeOff(s, e.message))))
              })).pipe(
                // A spliced stream (re-encoded, its hops joined) ends with the protocol's error event, so the agent is
                // told rather than left with a stream that stops. A pass-through stream stops as the upstream's did:
                // its connection is cut (the platform would end the answer cleanly, and an agent reads a clean end of
                // a cut stream as a whole, malformed answer: Claude Code gave up where it retries a cut).
                Stream.flatMap(() =>
                  splicing
                    ? Stream.make(encoder.encode((hops.at(-1)?.error ?? offloader!.streamError)("", "the upstream's stream broke off")))
                    : Stream.drain(Stream.fromEffect(cutConnection(request)))
                )
              )
            ),
            Stream.concat(Stream.drain(Stream.fromEffect(Effect.suspend(() => (settled ? Effect.void : finish))))),
            // The agent hung up before the end: the run is interrupted (what arrived is not a reply).
            Stream.ensuring(Effect.suspend(() =>
              settled
                ? Effect.void
                : Effect.flatMap(stopped, (s) => settle(unended(GatewayDialect.hungUp(s))))
            ))
          )
          return HttpServerResponse.stream(stream, { status: upstream.status, headers, contentType })
        }).pipe(
          // The handler's boundary: anything it did not answer itself (a defect, a failure no step maps) is logged with
          // its cause and answered 500 in the agent's protocol (Anthropic `api_error`, OpenAI `server_error`). The
          // platform answered it an empty 500, which an agent reads as no error at all; the API's guard does the same
          // for the API's paths (`InternalError`), but leaves the gateway's answers to it. An interruption (the agent
          // hung up) is not a failure: nobody reads the answer. A stream that fails after its head went out is not
          // seen here (its status is sent): it is cut, as `cutConnection` says.
          Effect.catchAllCause((cause) =>
            Cause.isInterruptedOnly(cause)
              ? Effect.failCause(cause)
              : Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
                Effect.as(
                  Effect.logError(`gateway: POST ${request.url.split("?")[0]} failed unexpectedly`, cause),
                  dialect.refuse("internal", "Baton's gateway failed unexpectedly; the failure is logged (see the server's log)")
                ))
          ),
          // Without spans: the request's own work and its record (the fiber forked here inherits it) make none. Baton
          // installs no tracer, so they were never seen, and their creation was about a tenth of the record's time
          // (bench/gateway.ts); a failure's logged cause has no span frames (its message and stack stay). Not redundant
          // with the server's `tracing` (off by default): with it on, this keeps the gateway's requests without spans
          // (docs/server.md; Tracing.test.ts sees `GatewayThreads.begin` and `ItemLog.stage` without it).
          Effect.withTracerEnabled(false)
        )

      yield* router.post("/v1/messages", handle({ dialect: GatewayAnthropic.dialect, upstreamPath: "/v1/messages", record: true }))
      yield* router.post("/v1/messages/count_tokens", handle({ dialect: GatewayAnthropic.dialect, upstreamPath: "/v1/messages/count_tokens", record: false }))
      // An OpenAI instance's `baseUrl` ends with the version (`https://api.openai.com/v1`).
      yield* router.post("/v1/responses", handle({ dialect: GatewayResponses.dialect, upstreamPath: "/responses", record: true }))
      yield* router.post("/v1/responses/compact", handle({ dialect: GatewayResponses.dialect, upstreamPath: "/responses/compact", record: true }))
      yield* router.post("/v1/chat/completions", handle({ dialect: GatewayChat.dialect, upstreamPath: "/chat/completions", record: true }))
    })
  ).pipe(Layer.provide(NodeHttpClient.layerUndici))
