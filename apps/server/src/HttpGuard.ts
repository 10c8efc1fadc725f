/**
 * HttpGuard: what stands between the network and the API so that bad input never hurts. It wraps the whole HTTP
 * app (API routes, `/openapi.json`, `/docs`) and owns:
 *
 * - **Auth before the body.** A request that carries a body to a write method is refused 401 without a valid bearer
 *   token (403 with the read-only token) before anything of its body is checked or read: a client without a token
 *   learns nothing from the body's refusal (411, 413, 415, 400) and does not get the server to read a large body
 *   (`BodyDrain.refuseUnread`: at most 64 KiB is drained, a larger body is not read and the connection is closed).
 *   Any other request is authorised by the API's `Authorization` middleware, as before (the open endpoints take no
 *   body); the gateway's paths by the gateway. A refused body of a request without a valid token is drained at most
 *   64 KiB too, and a larger body of such a request that is not refused for its token (a `GET` with a body, a path
 *   under `/v1/` that is not the gateway's) is refused unread as well (401; the gateway protocol's 404 under `/v1/`).
 * - **The body limit.** A body must declare its `Content-Length` (411 otherwise: chunked bodies are refused); one
 *   over the limit is answered 413 without being parsed (it is drained first, up to 64 MiB, so that the answer
 *   reaches the client, then the connection is closed). Nothing of such a request is written.
 * - **The body's form.** A body whose `Content-Type` is absent or not `application/json`, or declares a charset other
 *   than UTF-8, is 415; a JSON body that does not parse is 400 `InvalidRequest`, and so is a body that is not valid
 *   UTF-8 (strictly: no sequence is replaced) or nests deeper than `maxNesting` levels (a deep value would exhaust the
 *   stack of the schema error formatter). A leading byte order mark is ignored. The body is read here once, as bytes,
 *   and the API is served the text decoded here, so its own decoding never meets a transport failure it would turn
 *   into a 500.
 * - **Unknown routes** are 404 `RouteNotFound` as JSON (the router's default is an empty 404); a path whose
 *   percent-encoding is not UTF-8 is 400 `InvalidRequest` (no endpoint could take it).
 * - **Error bodies** get a `message` (the error's sentence for people, with what to do) beside `_tag` and its fields.
 * - **Anything unexpected** (a defect) is logged with its cause and answered 500 `InternalError` as JSON, never with
 *   the defect's text.
 */
import {
  ConcurrentModification,
  Forbidden,
  HandoffNotFound,
  IdempotencyKeyReused,
  InvalidRequest,
  ItemNotFound,
  LengthRequired,
  NoRunInProgress,
  NotReady,
  OffloadFailed,
  OffloadInProgress,
  OffloadNotFound,
  OffloadOperationNotFound,
  PayloadTooLarge,
  PersistenceError,
  ProviderError,
  RouteNotFound,
  RunInProgress,
  RunNotFound,
  RunNotWaiting,
  Text,
  ThreadNotFound,
  Unauthorized,
  UnknownProvider,
  UnsupportedMediaType
} from "@baton/contracts"
import { HttpApp, HttpMethod, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Cause, Chunk, Effect, Either, Option, Schema } from "effect"
import { MIMEType } from "node:util"
import * as Auth from "./Auth.js"
import { refuseAfterDrain as refuseDrained, refuseUnread, unauthenticatedDrainCapBytes } from "./BodyDrain.js"
import { isGatewayPath, unknownPathRefusal } from "./Gateway.js"

/** Every boundary error the API answers with, to give its body a `message`. */
const BoundaryError = Schema.Union(
  ThreadNotFound,
  RunNotFound,
  ItemNotFound,
  HandoffNotFound,
  UnknownProvider,
  InvalidRequest,
  IdempotencyKeyReused,
  RunInProgress,
  NoRunInProgress,
  RunNotWaiting,
  ConcurrentModification,
  PersistenceError,
  ProviderError,
  OffloadFailed,
  OffloadOperationNotFound,
  OffloadNotFound,
  OffloadInProgress,
  Unauthorized,
  Forbidden,
  PayloadTooLarge,
  LengthRequired,
  UnsupportedMediaType,
  RouteNotFound,
  NotReady
)
const decodeBoundary = Schema.decodeUnknownOption(BoundaryError)
const encodeBoundary = Schema.encodeSync(BoundaryError)

/** An error as the API serves it: its encoded fields, its `message`, with its class's status. */
export const errorResponse = (error: typeof BoundaryError.Type, status: number) =>
  HttpServerResponse.unsafeJson({ ...encodeBoundary(error), message: error.message }, { status })

const textDecoder = new TextDecoder()

/** The most characters of a schema error's message a 400 carries (the value it quotes is clipped, not echoed whole). */
export const maxIssueChars = 1_000

/** `text` clipped to `maxIssueChars`, never inside a surrogate pair (`Text.characterWindow`: the 400 stays well-formed Unicode). */
const clip = (text: unknown) =>
  typeof text === "string" && text.length > maxIssueChars
    ? `${text.slice(0, Text.characterWindow(text, 0, maxIssueChars).end)}… (${text.length} characters)`
    : text

/** One issue of an `HttpApiDecodeError` as HttpApi encodes it: where (`path`, field names and indices) and why. */
interface Issue {
  readonly path?: ReadonlyArray<unknown>
  readonly message?: unknown
}

/** How many issues a schema error's `message` sentence names (every issue stays in `issues`). */
const issuesInMessage = 5

/**
 * An `HttpApiDecodeError` body as the API serves it:
 * - `issues` without an optional field's other alternative ("Expected undefined, actual …") where the same path, or a
 *   path inside it, has an issue of its own (a query parameter `afterSeq=1e3` was refused twice: for its form, and for
 *   not being absent; a bad tool name as `tools.0.name: …; tools: Expected undefined, actual [the whole list]`);
 * - each issue's `message` clipped to `maxIssueChars` (the platform quotes the offending value in full: a 2 MiB string
 *   came back in the 400 whole), the `path` that names the field kept as it is;
 * - `message` a sentence naming the issues (`the request does not match the API: text: Expected string, actual 42`),
 *   clipped too, instead of the platform's dump of the whole schema (`{ readonly text: { minLength(1) & … } }`).
 * `null` for any other body.
 */
const decodeErrorBody = (body: { readonly _tag?: unknown; readonly message?: unknown; readonly issues?: unknown }) => {
  if (body._tag !== "HttpApiDecodeError") return null
  const all = (Array.isArray(body.issues) ? body.issues as Array<unknown> : []).filter((i): i is Issue => typeof i === "object" && i !== null)
  const pathOf = (i: Issue): ReadonlyArray<unknown> => Array.isArray(i.path) ? i.path as ReadonlyArray<unknown> : []
  // `o`'s path is `i`'s or inside it (`["tools", 0, "name"]` inside `["tools"]`).
  const within = (o: Issue, i: Issue) => pathOf(i).every((key, n) => pathOf(o)[n] === key) && pathOf(o).length >= pathOf(i).length
  const undefinedAlternative = (i: Issue) => typeof i.message === "string" && i.message.startsWith("Expected undefined, actual")
  const issues = all.filter((i) => !undefinedAlternative(i) || !all.some((o) => o !== i && !undefinedAlternative(o) && within(o, i)))
  const where = (i: Issue) => (i.path ?? []).map(String).join(".") || "(body)"
  // A struct's whole signature ("Expected { readonly providerInstance: …; … }, actual null") says "an object".
  const why = (i: Issue) => String(i.message ?? "").replace(/\s+/g, " ").trim().replace(/^Expected \{ .* \}, actual /, "Expected an object, actual ")
  const named = issues.slice(0, issuesInMessage).map((i) => `${where(i)}: ${why(i)}`)
  const more = issues.length > issuesInMessage ? `; and ${issues.length - issuesInMessage} more (see issues)` : ""
  return {
    ...body,
    message: clip(named.length === 0 ? body.message : `the request does not match the API: ${named.join("; ")}${more}`),
    issues: issues.map((i) => ({ ...i, message: clip(i.message) }))
  }
}

/**
 * Adds `message` to a JSON error body that lacks one (a boundary error as HttpApi encoded it) and serves a schema
 * error as `decodeErrorBody` says. Other responses are returned as they are.
 */
const withMessage = (response: HttpServerResponse.HttpServerResponse) => {
  if (response.status < 400 || response.body._tag !== "Uint8Array") return response
  const parsed = Option.liftThrowable((text: string): unknown => JSON.parse(text))(textDecoder.decode(response.body.body))
  if (Option.isNone(parsed) || typeof parsed.value !== "object" || parsed.value === null) return response
  const decodeError = decodeErrorBody(parsed.value)
  if (decodeError !== null) return HttpServerResponse.unsafeJson(decodeError, { status: response.status, headers: response.headers })
  if ("message" in parsed.value) return response
  const error = decodeBoundary(parsed.value)
  if (Option.isNone(error)) return response
  return HttpServerResponse.unsafeJson({ ...parsed.value, message: error.value.message }, { status: response.status, headers: response.headers })
}

/**
 * A `Content-Type` parsed as a media type (RFC 9110 §8.3.1) by Node's WHATWG MIME type parser: its essence
 * (`type/subtype`, lower-cased) and its parameters, a quoted value read as one value (`foo="x; charset=latin1"` is
 * `foo`'s value, not a charset). `None` when it does not parse as one media type (`application/json, text/plain`).
 */
const mediaType = Option.liftThrowable((contentType: string) => new MIMEType(contentType))

/**
 * Whether a `Content-Type` is JSON: `application/json`, with parameters, in UTF-8 (`isUtf8`). Only that type: it is
 * the one HttpApi decodes as JSON; any other (`application/x+json` included) it would read again as bytes from a body
 * this guard has already consumed, and the request would hang.
 */
const isJson = (contentType: string) => {
  const parsed = mediaType(contentType)
  return Option.isSome(parsed) && parsed.value.essence === "application/json" && isUtf8(parsed.value.params.get("charset"))
}

/**
 * Whether a declared charset is UTF-8: none (JSON's only encoding between systems, RFC 8259 §8.1), `utf-8`/`utf8` or
 * `us-ascii` (a subset of UTF-8; its bytes are checked as UTF-8 all the same). A body in another charset (`latin1`,
 * `iso-8859-1`, `utf-16`...) is refused (415, naming UTF-8) rather than decoded as UTF-8: its non-ASCII characters
 * would be stored altered (or refused as invalid UTF-8 for some texts and not others), and transcoding every legacy
 * charset is not worth a surface no JSON client needs. The charset is the media type's own parameter, never one
 * written inside another parameter's quoted value (it was: `foo="x; charset=latin1"` was refused as latin1).
 */
const isUtf8 = (charset: string | null) => {
  if (charset === null) return true
  const name = charset.trim().toLowerCase()
  return name === "utf-8" || name === "utf8" || name === "us-ascii"
}

/**
 * The body's bytes as UTF-8, strictly: any invalid sequence (a truncated one included) is an error, never a U+FFFD in
 * the stored text. A leading byte order mark is dropped (RFC 8259 §8.1 lets a parser ignore it; one inside a string
 * is the client's text and stays).
 */
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false })

/** The deepest nesting of arrays and objects a body may have (none of the API's bodies nests beyond 2). */
export const maxNesting = 32

/**
 * The deepest nesting of `[`/`{` in a JSON text, outside strings (a linear scan that never recurses: a body of a
 * million brackets must not exhaust the stack of whatever reads it next).
 */
export const nestingDepth = (text: string) => {
  let depth = 0
  let deepest = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 0x5c) i++
      else if (c === 0x22) inString = false
    } else if (c === 0x22) inString = true
    else if (c === 0x5b || c === 0x7b) deepest = Math.max(deepest, ++depth)
    else if (c === 0x5d || c === 0x7d) depth--
  }
  return deepest
}

/**
 * Checks and reads a request's body before the app sees it: the response to answer instead (`Left`), or the body's
 * text for the app (`Right`; `null` for a request without a body). A body must declare its length (411 otherwise);
 * one longer than the limit is refused (413) before it is read.
 */
const checkBody = (request: HttpServerRequest.HttpServerRequest, maxBodyBytes: number, authenticated: boolean) =>
  Effect.gen(function*() {
    // A refused body is drained so that the answer reaches the client: up to 64 MiB for a client with a valid token,
    // up to 64 KiB (nothing of a larger one) for a client without (a GET with a body reaches here unauthenticated).
    const refuseAfterDrain = (request: HttpServerRequest.HttpServerRequest, response: HttpServerResponse.HttpServerResponse) =>
      authenticated ? refuseDrained(request, response) : refuseUnread(request, response)
    const none = Either.right<string | null>(null)
    const refused = (response: HttpServerResponse.HttpServerResponse) => Either.left(response)
    const declared = request.headers["content-length"]
    if (declared === undefined) {
      // A refusal sent after draining the body; the connection is closed after it (as for 413 below).
      return request.headers["transfer-encoding"] === undefined ? none : refused(yield* refuseAfterDrain(request, errorResponse(new LengthRequired(), 411)))
    }
    // Node's parser has already refused a malformed Content-Length; a body is exactly this long.
    const length = Number(declared)
    if (length > maxBodyBytes) return refused(yield* refuseAfterDrain(request, errorResponse(new PayloadTooLarge({ limitBytes: maxBodyBytes }), 413)))
    if (!HttpMethod.hasBody(request.method)) return none
    if (length === 0) {
      // An empty body is no body (the command's defaults) without a Content-Type or with JSON's; declared as another
      // form it is 415 like a non-empty one: HttpApi would parse it in that form (an empty multipart body waited for
      // parts that never came, and the request never got an answer).
      const declaredType = request.headers["content-type"]
      return declaredType === undefined || declaredType.trim() === "" || isJson(declaredType)
        ? none
        : refused(errorResponse(new UnsupportedMediaType({ contentType: declaredType.slice(0, 200) }), 415))
    }
    // The bytes, not the platform's text: its decoder turns an invalid sequence into U+FFFD, and a truncated 4-byte
    // sequence (3 bytes, like the U+FFFD it becomes) could not be told from a U+FFFD the client sent: the prompt was
    // stored altered (new user b45srv). The bytes are read once; the app is served the text decoded here.
    const bytes = yield* Effect.either(request.arrayBuffer)
    if (bytes._tag === "Left") {
      // The connection broke mid-body: nobody reads the answer, but it is a client's fault, not the server's.
      return refused(errorResponse(new InvalidRequest({ reason: "the body could not be read (the connection broke)" }), 400))
    }
    // A body without a Content-Type is refused too: HttpApi would read it again as bytes (see `isJson`).
    const contentType = request.headers["content-type"] ?? ""
    if (!isJson(contentType)) {
      return refused(errorResponse(new UnsupportedMediaType({ contentType: contentType.slice(0, 200) }), 415))
    }
    const text = Option.liftThrowable((body: ArrayBuffer) => utf8.decode(body))(bytes.right)
    if (Option.isNone(text)) {
      return refused(errorResponse(new InvalidRequest({ reason: "the body is not valid UTF-8" }), 400))
    }
    const depth = nestingDepth(text.value)
    if (depth > maxNesting) {
      return refused(errorResponse(new InvalidRequest({ reason: `the body nests ${depth} levels deep; at most ${maxNesting} are accepted` }), 400))
    }
    const parsed = Option.liftThrowable((body: string): unknown => JSON.parse(body))(text.value)
    if (Option.isNone(parsed)) {
      return refused(errorResponse(new InvalidRequest({ reason: "the body is not valid JSON" }), 400))
    }
    return Either.right<string | null>(text.value)
  })

/**
 * `request` serving `text` as its body's text to the app (the API's decoding reads `text`, as `json` does): the body's
 * bytes were read by `checkBody`, and the stream cannot be read again.
 */
const withText = (request: HttpServerRequest.HttpServerRequest, text: string): HttpServerRequest.HttpServerRequest =>
  // The request's own methods read `text` through `this`: a request that shadows it serves them all this text.
  Object.create(request, { text: { value: Effect.succeed(text) } }) as HttpServerRequest.HttpServerRequest

/**
 * The last step before a response is sent: an empty 404 (the router found no route) becomes `RouteNotFound` (under
 * `/v1/`, outside the gateway's paths, the agent's protocol's 404: `Gateway.unknownPathRefusal`), an
 * empty 5xx (a defect) becomes `InternalError`, both as JSON; an error body gets its `message`.
 */
const finish = (request: HttpServerRequest.HttpServerRequest, response: HttpServerResponse.HttpServerResponse) =>
  Effect.succeed(
    response.status === 401
      ? withChallenge(request, withMessage(response))
      : response.body._tag === "Empty" && response.status === 404
      ? unknownPathRefusal(request.method, request.url, request.headers) ?? unroutable(request)
      : response.body._tag === "Empty" && response.status >= 500
      ? HttpServerResponse.unsafeJson(
        { _tag: "InternalError", message: "the server failed unexpectedly; the failure is logged" },
        { status: response.status }
      )
      : withMessage(response)
  )

/**
 * The refusal of a request the router matched to no endpoint: 400 `InvalidRequest` when its path's percent-encoding
 * is not UTF-8 (`/threads/%FF`: the router cannot decode it, so no endpoint matches, though `/threads/{id}` is one;
 * it was 404 "no endpoint GET /threads/%FF", b47srv), else 404 `RouteNotFound`.
 */
const unroutable = (request: HttpServerRequest.HttpServerRequest) => {
  const path = request.url.split("?")[0]!
  return Option.isNone(Option.liftThrowable(decodeURIComponent)(path))
    ? errorResponse(new InvalidRequest({ reason: `the path ${path.slice(0, 500)} is not valid percent-encoded UTF-8; percent-encode each id's UTF-8 bytes` }), 400)
    : errorResponse(new RouteNotFound({ method: request.method, path: path.slice(0, 500) }), 404)
}

/**
 * The guard as an HttpApp middleware (for `HttpApiBuilder.serve`), with the body limit `maxBodyBytes` in bytes.
 * The platform has answered a failure by the time the middleware sees it (through `finish`); what is left here is
 * logging a defect with its cause.
 */
export const middleware = (options: { readonly maxBodyBytes: number; readonly tokens: Auth.Tokens }) => {
  const digests = Auth.digestsOf(options.tokens)
  return <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<E, R | HttpServerRequest.HttpServerRequest> =>
    Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      // The gateway's endpoints speak the agent's protocol (Anthropic's error shape, its own body limit): their
      // bodies and answers are the gateway's (Gateway.ts), not the API's. They are POST only: another method on their
      // paths is the API's RouteNotFound (it was an empty 404 without a content type; new user r35).
      if (request.method === "POST" && isGatewayPath(request.url)) return yield* app
      const carriesBody = request.headers["transfer-encoding"] !== undefined ||
        (request.headers["content-length"] !== undefined && request.headers["content-length"] !== "0")
      // Only a request with a body is authorised here (the API's middleware authorises every request again): the
      // token is hashed and compared once more per write, not per read.
      const verdict = carriesBody ? Auth.roleOf(request.headers.authorization, digests) : null
      const refusal = verdict === null ? null : authRefusal(request, verdict) ?? largeUnauthenticated(request, verdict, options.maxBodyBytes)
      if (refusal !== null) return yield* refuseUnread(request, refusal)
      const body = yield* checkBody(request, options.maxBodyBytes, verdict === null || verdict._tag === "granted")
      if (Either.isLeft(body)) return body.left
      yield* HttpApp.appendPreResponseHandler(finish)
      return yield* body.right === null ? app : Effect.provideService(app, HttpServerRequest.HttpServerRequest, withText(request, body.right))
    }).pipe(
      Effect.tapErrorCause((cause) =>
        Effect.gen(function*() {
          const failure = Cause.failureOption(cause)
          if (isClientGone(cause) || (Option.isSome(failure) && isRouteNotFound(failure.value))) return
          const request = yield* HttpServerRequest.HttpServerRequest
          yield* Effect.logError(`${request.method} ${request.url.split("?")[0]} failed unexpectedly`, cause)
        })
      )
    )
}

/**
 * `response` (a 401) with the `WWW-Authenticate` challenge a 401 must carry (RFC 9110 §11.6.1): the Bearer scheme
 * (RFC 6750 §3), with `error="invalid_token"` when a bearer token was sent and refused. It had none, and a client that
 * reads the scheme from the challenge (as HTTP libraries do) was not told which to use.
 */
const withChallenge = (request: HttpServerRequest.HttpServerRequest, response: HttpServerResponse.HttpServerResponse) =>
  HttpServerResponse.setHeader(
    response,
    "www-authenticate",
    /^bearer\s+\S/i.test(request.headers.authorization ?? "") ? `Bearer realm="baton", error="invalid_token"` : `Bearer realm="baton"`
  )

/**
 * The refusal of a write carrying a body, answered before its body is looked at: 401 `Unauthorized` without a valid
 * token, 403 `Forbidden` for the read-only token; `null` when the token may write, and for a read or a path under
 * `/v1/` (the gateway's protocol, whose agents send their token as `x-api-key`: an unknown path there is answered 404
 * in that protocol, whatever the token).
 */
const authRefusal = (request: HttpServerRequest.HttpServerRequest, verdict: Auth.Verdict) => {
  if (!HttpMethod.hasBody(request.method) || request.url.startsWith("/v1/")) return null
  if (verdict._tag === "denied") return withChallenge(request, errorResponse(new Unauthorized({ reason: verdict.reason }), 401))
  return verdict.role === "admin"
    ? null
    : errorResponse(new Forbidden({ reason: `the read-only token may not ${request.method}; use the admin token` }), 403)
}

/**
 * The refusal of a body over `unauthenticatedDrainCapBytes` or over the body limit `maxBodyBytes`, whichever is
 * smaller, that a request without a valid token declares where `authRefusal` does not refuse it (a read with a body; a
 * path under `/v1/` that is not the gateway's): 401 with the challenge, or, under `/v1/`, the gateway protocol's 404 for
 * the unknown path (what it is answered whatever the token). `null` otherwise. Before, such a body was read up to the
 * body limit (2 MiB by default) and parsed, and a client without a token was answered 400 for invalid JSON after the
 * server had read 1.5 MB for it; under a body limit below 64 KiB a `GET` with a body over it was answered 413, and a
 * chunked `GET` 411: the body's refusal before the token's (b47srv). A chunked body is refused so too.
 */
const largeUnauthenticated = (request: HttpServerRequest.HttpServerRequest, verdict: Auth.Verdict, maxBodyBytes: number) => {
  if (verdict._tag !== "denied") return null
  const declared = request.headers["content-length"]
  // A chunked body declares no length: it is refused for its token too (it was 411, the body's refusal).
  const chunked = request.headers["transfer-encoding"] !== undefined
  if (!chunked && (declared === undefined || Number(declared) <= Math.min(unauthenticatedDrainCapBytes, maxBodyBytes))) return null
  return unknownPathRefusal(request.method, request.url, request.headers) ??
    withChallenge(request, errorResponse(new Unauthorized({ reason: verdict.reason }), 401))
}

/**
 * Whether `cause` is the client's going away and nothing else: interruptions only, or interruptions beside the empty
 * 499 answer the platform gives a client that closed its connection (`HttpApp.toHandled` answers an interrupted
 * request and fails on with the interruption then that answer as a defect, which is the cause a middleware sees). It
 * was logged as a failure ("POST /v1/messages failed unexpectedly" with the 499 as its cause) each time an agent hung
 * up before its answer was sent (branch b44gw, `GatewayWholeHangUp.test.ts`).
 */
const isClientGone = (cause: Cause.Cause<unknown>) =>
  Cause.isInterruptedOnly(cause) || (
    Cause.isInterrupted(cause) && Chunk.isEmpty(Cause.failures(cause)) &&
    Chunk.every(Cause.defects(cause), (d) => HttpServerResponse.isServerResponse(d) && d.status === 499)
  )

const isRouteNotFound = (e: unknown) =>
  typeof e === "object" && e !== null && "_tag" in e && (e as { readonly _tag: unknown })._tag === "RouteNotFound"
