/**
 * HttpGuard: what stands between the network and the API so that bad input never hurts. It wraps the whole HTTP
 * app (API routes, `/openapi.json`, `/docs`) and owns:
 *
 * - **The body limit.** A declared `Content-Length` over the limit is answered 413 before anything is read; a body
 *   without one (chunked) is read up to the limit and answered 413 past it. Nothing of such a request is written.
 * - **The body's form.** A body with a `Content-Type` other than JSON is 415; a JSON body that does not parse is 400
 *   `InvalidRequest` saying where. The body is read here once (the request caches it), so the API's own decoding
 *   never meets a transport failure it would turn into a 500.
 * - **Unknown routes** are 404 `RouteNotFound` as JSON (the router's default is an empty 404).
 * - **Error bodies** get a `message` (the error's sentence for people, with what to do) beside `_tag` and its fields.
 * - **Anything unexpected** (a defect) is logged with its cause and answered 500 `InternalError` as JSON, never with
 *   the defect's text.
 */
import {
  ConcurrentModification,
  Forbidden,
  HandoffNotFound,
  InvalidRequest,
  ItemNotFound,
  NoRunInProgress,
  NotReady,
  OffloadFailed,
  PayloadTooLarge,
  PersistenceError,
  ProviderError,
  RouteNotFound,
  RunInProgress,
  RunNotFound,
  ThreadNotFound,
  Unauthorized,
  UnknownProvider,
  UnsupportedMediaType
} from "@baton/contracts"
import { HttpApp, HttpIncomingMessage, HttpMethod, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Cause, Effect, Option, Schema } from "effect"

/** Every boundary error the API answers with, to give its body a `message`. */
const BoundaryError = Schema.Union(
  ThreadNotFound,
  RunNotFound,
  ItemNotFound,
  HandoffNotFound,
  UnknownProvider,
  InvalidRequest,
  RunInProgress,
  NoRunInProgress,
  ConcurrentModification,
  PersistenceError,
  ProviderError,
  OffloadFailed,
  Unauthorized,
  Forbidden,
  PayloadTooLarge,
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

/**
 * Adds `message` to a JSON error body that lacks one (a boundary error as HttpApi encoded it). Other responses
 * are returned as they are.
 */
const withMessage = (response: HttpServerResponse.HttpServerResponse) => {
  if (response.status < 400 || response.body._tag !== "Uint8Array") return response
  const parsed = Option.liftThrowable((text: string): unknown => JSON.parse(text))(textDecoder.decode(response.body.body))
  if (Option.isNone(parsed) || typeof parsed.value !== "object" || parsed.value === null || "message" in parsed.value) return response
  const error = decodeBoundary(parsed.value)
  if (Option.isNone(error)) return response
  return HttpServerResponse.unsafeJson({ ...parsed.value, message: error.value.message }, { status: response.status, headers: response.headers })
}

/** Whether a `Content-Type` is JSON (`application/json`, `application/x+json`, with parameters). */
const isJson = (contentType: string) => /^application\/([a-z0-9.+-]*\+)?json\s*(;|$)/i.test(contentType.trim())

/**
 * Checks and reads a request's body before the app sees it; returns the response to answer instead, if any.
 */
const checkBody = (request: HttpServerRequest.HttpServerRequest, maxBodyBytes: number) =>
  Effect.gen(function*() {
    if (!HttpMethod.hasBody(request.method)) return Option.none<HttpServerResponse.HttpServerResponse>()
    const declared = request.headers["content-length"]
    if (declared !== undefined && Number(declared) > maxBodyBytes) {
      return Option.some(errorResponse(new PayloadTooLarge({ limitBytes: maxBodyBytes }), 413))
    }
    const contentType = request.headers["content-type"]
    const text = yield* request.text.pipe(HttpIncomingMessage.withMaxBodySize(Option.some(maxBodyBytes)), Effect.either)
    if (text._tag === "Left") {
      // The reader fails past the limit, or when the connection breaks mid-body (then nobody reads the answer).
      return Option.some(errorResponse(new PayloadTooLarge({ limitBytes: maxBodyBytes }), 413))
    }
    if (text.right.length === 0) return Option.none()
    if (contentType !== undefined && !isJson(contentType)) {
      return Option.some(errorResponse(new UnsupportedMediaType({ contentType: contentType.slice(0, 200) }), 415))
    }
    const parsed = Option.liftThrowable((body: string): unknown => JSON.parse(body))(text.right)
    if (Option.isNone(parsed)) {
      return Option.some(errorResponse(new InvalidRequest({ reason: "the body is not valid JSON" }), 400))
    }
    return Option.none()
  })

/**
 * The last step before a response is sent: an empty 404 (the router found no route) becomes `RouteNotFound`, an
 * empty 5xx (a defect) becomes `InternalError`, both as JSON; an error body gets its `message`.
 */
const finish = (request: HttpServerRequest.HttpServerRequest, response: HttpServerResponse.HttpServerResponse) =>
  Effect.succeed(
    response.body._tag === "Empty" && response.status === 404
      ? errorResponse(new RouteNotFound({ method: request.method, path: request.url.split("?")[0]!.slice(0, 500) }), 404)
      : response.body._tag === "Empty" && response.status >= 500
      ? HttpServerResponse.unsafeJson(
        { _tag: "InternalError", message: "the server failed unexpectedly; the failure is logged" },
        { status: response.status }
      )
      : withMessage(response)
  )

/**
 * The guard as an HttpApp middleware (for `HttpApiBuilder.serve`), with the body limit `maxBodyBytes` in bytes.
 * The platform has answered a failure by the time the middleware sees it (through `finish`); what is left here is
 * logging a defect with its cause.
 */
export const middleware = (options: { readonly maxBodyBytes: number }) =>
  <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<E, R | HttpServerRequest.HttpServerRequest> =>
    Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const refused = yield* checkBody(request, options.maxBodyBytes)
      if (Option.isSome(refused)) return refused.value
      yield* HttpApp.appendPreResponseHandler(finish)
      return yield* app
    }).pipe(
      Effect.tapErrorCause((cause) =>
        Effect.gen(function*() {
          const failure = Cause.failureOption(cause)
          if (Cause.isInterruptedOnly(cause) || (Option.isSome(failure) && isRouteNotFound(failure.value))) return
          const request = yield* HttpServerRequest.HttpServerRequest
          yield* Effect.logError(`${request.method} ${request.url.split("?")[0]} failed unexpectedly`, cause)
        })
      )
    )

const isRouteNotFound = (e: unknown) =>
  typeof e === "object" && e !== null && "_tag" in e && (e as { readonly _tag: unknown })._tag === "RouteNotFound"
