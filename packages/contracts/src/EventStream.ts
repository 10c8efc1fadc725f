/**
 * EventStream: the wire form of the live event streams (`GET /threads/{id}/events`, `GET /events`) as server-sent
 * events — pure values, no HTTP dependency, so the server, the CLI client and tests share one definition.
 *
 * - Each event is one SSE event: `id:` its cursor (`seq` on a thread's stream, `globalSeq` on the stream of all
 *   threads), `event:` its `type` (`run.queued`, `items.appended`, …), `data:` the stored event as JSON (the
 *   `ThreadEvent` encoding: envelope and payload, `createdAt` ISO 8601).
 * - A client resumes by sending the id of the LAST event it received as `Last-Event-ID` (what `EventSource` does);
 *   on the stream of all threads that is not always the largest id it saw (see `EventFeed` in
 *   `@baton/persistence`: Postgres delivers in commit-safe order).
 * - Heartbeats are SSE comment lines (`heartbeat`), which clients ignore and proxies count as traffic.
 *
 * `toSse` builds `@effect/experimental`'s `Sse.Event` (structurally; this package does not depend on it): the server
 * frames it with `Sse.encoder.write(event)`.
 */
import { Effect, Schema } from "effect"
import type { ParseError } from "effect/ParseResult"
import { InvalidRequest } from "./Errors.js"
import { ThreadEvent } from "./Events.js"

/** Which stream: one thread's (`thread`, cursor `seq`) or every thread's (`all`, cursor `globalSeq`). */
export type Feed = "thread" | "all"

/** The cursor an event has on `feed`: its `seq` (thread) or `globalSeq` (all), the SSE `id`. */
export const cursorOf = (feed: Feed, event: ThreadEvent): number => feed === "thread" ? event.seq : event.globalSeq

/** One server-sent event; the shape of `@effect/experimental`'s `Sse.Event` (`Sse.encoder.write` frames it). */
export interface SseEvent {
  readonly _tag: "Event"
  /** The SSE `event:` field: the event's `type`. */
  readonly event: string
  /** The SSE `id:` field: the event's cursor on its feed, in decimal. */
  readonly id: string
  /** The SSE `data:` field: the stored event as JSON (one line). */
  readonly data: string
}

const encodeEvent = Schema.encode(ThreadEvent)

/**
 * The server-sent event of `event` on `feed`. Fails with `ParseError` only if `event` is not a valid `ThreadEvent`
 * (every event the store returns is one).
 */
export const toSse = (feed: Feed) => (event: ThreadEvent): Effect.Effect<SseEvent, ParseError> =>
  Effect.map(encodeEvent(event), (encoded) => ({
    _tag: "Event",
    event: event.type,
    id: String(cursorOf(feed, event)),
    data: JSON.stringify(encoded)
  }))

/** A heartbeat: an SSE comment line and the blank line that ends it, written as is (`: heartbeat\n\n`). */
export const heartbeat = ": heartbeat\n\n"

/** How often a server sends `heartbeat` on an idle stream, in milliseconds (below common 30–60 s proxy timeouts). */
export const heartbeatIntervalMillis = 15_000

/**
 * A non-negative integer written as the server writes one: decimal digits only (`42`), at most `Number.MAX_SAFE_INTEGER`. `Schema.NumberFromString` alone
 * (it is `Number(...)`) also took `0x2a`, `4.2e1`, `0b101010`, `+42` and `42.0` — ids the server never sent, read as
 * other numbers. Decodes to the number; the issue's message names what is expected.
 */
export const DecimalFromString = Schema.String.pipe(
  Schema.pattern(/^[0-9]+$/, { message: () => "expected a non-negative integer in decimal digits (e.g. 42)" }),
  // Digits past 2^53 - 1 are read as another number (`99999999999999999999` as 1e20, `9007199254740993` as
  // 9007199254740992): refused as too large, naming the digits sent, not as "Expected an integer, actual 1e20".
  Schema.filter((s) => Number(s) <= Number.MAX_SAFE_INTEGER, {
    message: (issue) => `expected an integer of at most ${Number.MAX_SAFE_INTEGER}, got ${String(issue.actual).slice(0, 40)}`
  }),
  Schema.compose(Schema.NumberFromString)
)

/** A cursor as clients send it (`Last-Event-ID`, or a query parameter): a non-negative integer in decimal. */
export const Cursor = DecimalFromString.pipe(Schema.int(), Schema.nonNegative(), Schema.lessThanOrEqualTo(Number.MAX_SAFE_INTEGER))

const decodeCursor = Schema.decodeUnknown(Cursor)

/**
 * The cursor to resume from: `0` (from the first event) when `header` is absent or empty, else its value. Fails with
 * `InvalidRequest` (HTTP 400) naming the header when it is not a non-negative integer.
 */
export const parseLastEventId = (header: string | null | undefined): Effect.Effect<number, InvalidRequest> =>
  header === null || header === undefined || header.trim() === ""
    ? Effect.succeed(0)
    : decodeCursor(header.trim()).pipe(
      Effect.mapError(() => new InvalidRequest({ reason: `Last-Event-ID must be a non-negative integer cursor, got ${JSON.stringify(header.slice(0, 40))}` }))
    )
