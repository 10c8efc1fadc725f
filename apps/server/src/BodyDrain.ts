/**
 * BodyDrain: reading and discarding what is left of a refused request body, bounded in bytes and in time, before the
 * refusal is sent with `Connection: close` (the API's guard, `HttpGuard`, and the gateway's body limit, `Gateway`).
 */
import { type HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Effect } from "effect"

/** How much of a refused body is read and discarded before answering, in bytes past the limit. */
const drainCapBytes = 64 * 1024 * 1024
/** How long a refused body is drained before answering anyway, in milliseconds. */
const drainTimeoutMs = 5_000

/**
 * Reads and discards what is left of a request body (at most `drainCapBytes`, for at most `drainTimeoutMs`), so
 * that the refusal sent next reaches the client: closing a socket with unread data resets the connection and the
 * client may lose the answer. The deadline is a timer of its own, not `Effect.timeout`: the request's fiber runs
 * uninterruptibly here, so a timeout waited for the drain to end, and a client that declared a body over the limit
 * and sent less was never answered (new user r35; BodyLimitSlow.test.ts).
 */
export const drain = (request: HttpServerRequest.HttpServerRequest) =>
  Effect.async<void>((resume) => {
    const source = NodeHttpServerRequest.toIncomingMessage(request)
    if (source.readableEnded || source.destroyed) return resume(Effect.void)
    let bytes = 0
    const onData = (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes > drainCapBytes) finish()
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
