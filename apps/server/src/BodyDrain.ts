/**
 * BodyDrain: reading and discarding what is left of a refused request body, bounded in bytes and in time, before the
 * refusal is sent with `Connection: close` (the API's guard, `HttpGuard`, and the gateway's body limit, `Gateway`).
 */
import { type HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Context, Effect } from "effect"
import type * as Http from "node:http"

/** How much of a refused body is read and discarded before answering, in bytes past the limit. */
const drainCapBytes = 64 * 1024 * 1024
/**
 * How much of the body of a request without a valid token is read and discarded before its refusal (401/403): 64 KiB,
 * enough for any command a client with a mistyped or missing token sends, so that it gets its answer. A larger body is
 * not read at all (`refuseUnread`): a client without a token does not get the server to read megabytes for it.
 */
export const unauthenticatedDrainCapBytes = 64 * 1024
/**
 * How long a refused body is drained before answering anyway, in milliseconds: 5,000. A test that waits the bound out
 * on purpose provides a shorter one (`Layer.succeed(DrainTimeout, 300)` under the server's Layer: the request fibers
 * inherit the server's context); the server itself never changes it.
 */
export class DrainTimeout extends Context.Reference<DrainTimeout>()("@baton/server/BodyDrain/DrainTimeout", {
  defaultValue: () => 5_000
}) {}

/** Requests sent with `Expect: 100-continue` whose `100 Continue` has not been sent yet (`continueOnRead`). */
const awaitingContinue = new WeakSet<Http.IncomingMessage>()

/**
 * Makes `server` answer `Expect: 100-continue` lazily: the request goes to the app at once, and `100 Continue` is
 * sent when its body is first read, if no answer has started by then. A body refused before it is read (over the
 * limit: 413; chunked: 411; ...) is thus refused without the client having been told to send it, and `drain` skips
 * it. Node's default (without a `checkContinue` listener) sent `100 Continue` before the app saw the request, so a
 * client (curl, for any body over 1 MiB) uploaded a body over the limit only to be refused after it (new user
 * b44srv). Returns `server`.
 */
export const continueOnRead = (server: Http.Server): Http.Server =>
  server.on("checkContinue", (request: Http.IncomingMessage, response: Http.ServerResponse) => {
    awaitingContinue.add(request)
    // Readable calls `_read` whenever its consumer wants data (flowing or not): the first read asks for the body.
    const read = request._read
    request._read = function(this: Http.IncomingMessage, size: number) {
      request._read = read
      // Node reads (dumps) an unread body itself once the answer is sent: no 100 after a final answer.
      if (awaitingContinue.delete(request) && !response.headersSent) response.writeContinue()
      return read.call(this, size)
    }
    server.emit("request", request, response)
  })

/**
 * Reads and discards what is left of a request body (at most `drainCapBytes`, for at most `DrainTimeout`), so
 * that the refusal sent next reaches the client: closing a socket with unread data resets the connection and the
 * client may lose the answer. The deadline is a timer of its own, not `Effect.timeout`: the request's fiber runs
 * uninterruptibly here, so a timeout waited for the drain to end, and a client that declared a body over the limit
 * and sent less was never answered (new user r35; BodyLimitSlow.test.ts).
 */
export const drain = (request: HttpServerRequest.HttpServerRequest, capBytes: number = drainCapBytes) =>
  Effect.flatMap(DrainTimeout, (drainTimeoutMs) => drainFor(request, drainTimeoutMs, capBytes))

const drainFor = (request: HttpServerRequest.HttpServerRequest, drainTimeoutMs: number, capBytes: number) =>
  Effect.async<void>((resume) => {
    const source = NodeHttpServerRequest.toIncomingMessage(request)
    // A client waiting for `100 Continue` that was never sent (`continueOnRead`) sends no body: nothing to drain, and
    // reading would send the 100 and invite the body that is being refused.
    if (source.readableEnded || source.destroyed || awaitingContinue.has(source)) return resume(Effect.void)
    let bytes = 0
    const onData = (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes > capBytes) finish()
    }
    const stop = () => {
      clearTimeout(deadline)
      source.off("data", onData)
      source.off("end", finish)
      source.off("error", finish)
      source.off("close", finish)
    }
    const finish = () => {
      stop()
      resume(Effect.void)
    }
    const deadline = setTimeout(finish, drainTimeoutMs)
    source.on("data", onData)
    source.once("end", finish)
    source.once("error", finish)
    source.once("close", finish)
    source.resume()
    return Effect.sync(stop)
  })

/**
 * `response` (a refusal of the request's body) after `drain`, with `Connection: close`: the client gets the answer,
 * and what it still sends is not read on the kept-alive connection.
 */
export const refuseAfterDrain = (request: HttpServerRequest.HttpServerRequest, response: HttpServerResponse.HttpServerResponse) =>
  Effect.as(drain(request), HttpServerResponse.setHeader(response, "connection", "close"))

/**
 * `response` (the refusal of a request without a valid token: 401, or 403 for the read-only token on a write; the
 * API's guard and the gateway) with `Connection: close` when the request has a body, that body drained only when it declares at most `unauthenticatedDrainCapBytes` (a chunked body:
 * at most that much is read). A larger declared body is not read at all: the connection is closed after the answer,
 * and a client still sending may see it reset instead of reading the answer (`Expect: 100-continue` avoids that: no
 * `100 Continue` is sent, so no body comes). Answered kept alive, the unread body was read and discarded by Node for as
 * long as the client sent it.
 */
export const refuseUnread = (request: HttpServerRequest.HttpServerRequest, response: HttpServerResponse.HttpServerResponse) => {
  const declared = request.headers["content-length"]
  const chunked = request.headers["transfer-encoding"] !== undefined
  // Without a body there is nothing to read: the answer as it is, the connection kept.
  if (!chunked && (declared === undefined || Number(declared) === 0)) return Effect.succeed(response)
  const closed = HttpServerResponse.setHeader(response, "connection", "close")
  return chunked || Number(declared) <= unauthenticatedDrainCapBytes
    ? Effect.as(drain(request, unauthenticatedDrainCapBytes), closed)
    : Effect.succeed(closed)
}
