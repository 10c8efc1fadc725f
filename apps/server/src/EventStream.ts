/**
 * EventStream: thread events as server-sent events (`text/event-stream`, `@effect/experimental`'s `Sse` encoder).
 * Each event is `id: <cursor>` (the thread's `seq`, or the `globalSeq` on the all-threads stream), `event: <type>`,
 * `data: <the ThreadEvent as JSON>`.
 *
 * `live` replays what was committed after the cursor and then follows the live tail (`EventFeed`: across
 * processes, a bounded buffer per subscriber), with a heartbeat comment every `heartbeatIntervalMillis`; a client
 * that fell too far behind gets a last `subscriber_too_slow` event naming its cursor and the stream ends (it
 * reconnects with `Last-Event-ID`). When the server begins to stop (`Stopping`), a live stream ends at once with a
 * last `server_stopping` event (no id: the client resumes from the last id it received, from this process once it is
 * back or from another one), instead of holding the shutdown until its deadline. `replay` replays and ends
 * (`follow=false`).
 */
import { EventStream as Frames, InvalidRequest, type PersistenceError, type SubscriberTooSlow, ThreadEvent } from "@baton/contracts"
import { Sse } from "@effect/experimental"
import { HttpServerResponse } from "@effect/platform"
import { Chunk, Context, Deferred, Duration, Effect, Layer, Option, Schema, Stream } from "effect"

const encodeEvent = Schema.encodeSync(ThreadEvent)
const utf8 = new TextEncoder()

const utf8Frame = (event: Sse.Event) => utf8.encode(Sse.encoder.write(event))

/**
 * The server's shutdown has begun: completed by `Server.layer` as the first step of its shutdown (with the run
 * driver's `stopTaking`), before the listener gives open requests their deadline. Live event streams end on it.
 */
export class Stopping extends Context.Tag("@baton/server/EventStream/Stopping")<Stopping, Deferred.Deferred<void>>() {
  /** A fresh, not yet completed signal. */
  static readonly layer = Layer.effect(Stopping, Deferred.make<void>())
}

/** The last frame of a live stream ended by the server's shutdown (`Stopping`). */
export const serverStoppingFrame = utf8Frame({
  _tag: "Event",
  id: undefined,
  event: "server_stopping",
  data: JSON.stringify({ message: "the server is stopping: reconnect with Last-Event-ID (the last id received)" })
})

/** Events read per database page while replaying. */
export const pageSize = 500


/** One event as SSE bytes, `id` being its cursor on this stream. */
export const encode = (event: ThreadEvent, id: number) =>
  utf8.encode(Sse.encoder.write({ _tag: "Event", id: String(id), event: event.type, data: JSON.stringify(encodeEvent(event)) }))

/**
 * The cursor a stream starts after: `Last-Event-ID` (a reconnecting client) wins over the `after` query parameter;
 * 0 (from the start) without either. Fails with `InvalidRequest` when `Last-Event-ID` is not a decimal integer (digits only) from 0 to
 * `max` (a thread's stream: `Api.maxSeq`).
 */
export const startCursor = (lastEventId: string | undefined, after: number | undefined, max: number = Number.MAX_SAFE_INTEGER) => {
  if (lastEventId === undefined || lastEventId.trim() === "") return Effect.succeed(after ?? 0)
  // Decimal digits only, as the server writes ids: `Number` alone also read `0x3` as 3 and `1e3` as 1000.
  const trimmed = lastEventId.trim()
  const n = /^[0-9]+$/.test(trimmed) ? Number(trimmed) : Number.NaN
  return Number.isSafeInteger(n) && n >= 0 && n <= max
    ? Effect.succeed(n)
    : Effect.fail(new InvalidRequest({ reason: `Last-Event-ID: expected the id of an event received (a non-negative integer in decimal digits), got "${lastEventId.slice(0, 40)}"` }))
}

/**
 * Refuses a start cursor past the stream's last event (`last`: the thread's last `seq`, or the log's last `globalSeq`;
 * `of` names it in the message, e.g. "thread thr_1", "the log"): no stream has sent such an id, and following it
 * would skip, unseen, every event up to it. Names `Last-Event-ID` when the client sent one, else `after`. Fails with
 * `InvalidRequest`.
 */
export const notPastTheEnd = (after: number, last: number, lastEventId: string | undefined, of: string) =>
  after <= last
    ? Effect.void
    : Effect.fail(new InvalidRequest({
      reason: `${resumes(lastEventId) ? "Last-Event-ID" : "after"} ${after} is past the last event of ${of} (${last}): ` +
        "no event has that id yet; resume from the last id received, or from the start without one"
    }))

/** Whether the client sent a `Last-Event-ID` (a blank one counts as none). */
export const resumes = (lastEventId: string | undefined): boolean => lastEventId !== undefined && lastEventId.trim() !== ""

const sseHeaders = { "cache-control": "no-cache", "x-accel-buffering": "no" }

/**
 * The SSE response following `events` (`EventFeed.thread` / `EventFeed.all`: the replay after the cursor, then the
 * live tail), each event's id `cursorOf(event)`, opening with `Frames.heartbeat` and sending it every
 * `heartbeatMillis` (default `Frames.heartbeatIntervalMillis`). It ends when the feed ends (shutdown); a `SubscriberTooSlow` ends it with a
 * `subscriber_too_slow` event whose data is `{ message, cursor }`; a storage failure is logged and ends it (the
 * client reconnects by cursor either way). `stopping` completed (the server's shutdown has begun) ends it at once with
 * `serverStoppingFrame` (found by a tester: a follower, which the dashboard always is, held every shutdown until the
 * listener's deadline, 10 s by default).
 */
export const live = (
  events: Stream.Stream<ThreadEvent, SubscriberTooSlow | PersistenceError>,
  cursorOf: (event: ThreadEvent) => number,
  stopping: Deferred.Deferred<void>,
  heartbeatMillis: number = Frames.heartbeatIntervalMillis
) =>
  HttpServerResponse.stream(
    // A heartbeat first: the response's head and first bytes go out at once, so a client sees the stream open even
    // when nothing is to be replayed (without it, nothing was written until the first heartbeat, 15 s later: found
    // by the fuzz test as a request with no answer).
    Stream.concat(Stream.make(utf8.encode(Frames.heartbeat)), Stream.merge(
      events.pipe(
        Stream.map((e) => encode(e, cursorOf(e))),
        Stream.catchAll((error) =>
          error._tag === "SubscriberTooSlow"
            ? Stream.make(utf8.encode(Sse.encoder.write({
              _tag: "Event",
              id: String(error.cursor),
              event: "subscriber_too_slow",
              data: JSON.stringify({ message: error.message, cursor: error.cursor })
            })))
            : Stream.fromEffect(Effect.logWarning("event stream ended: the event log could not be read", error)).pipe(Stream.drain)
        )
      ),
      Stream.tick(Duration.millis(heartbeatMillis)).pipe(Stream.drop(1), Stream.map(() => utf8.encode(Frames.heartbeat))),
      { haltStrategy: "left" }
    ).pipe(
      Stream.interruptWhen(Deferred.await(stopping)),
      // Ended by the shutdown (not by the feed, a slow client or a storage failure): say so, last.
      Stream.concat(Stream.unwrap(Effect.map(Deferred.isDone(stopping), (done) => done ? Stream.make(serverStoppingFrame) : Stream.empty)))
    )),
    { contentType: "text/event-stream", headers: sseHeaders }
  )

/**
 * The SSE response replaying `events` (a finite stream: `EventFeed.replayAll`) and ending, `cursorOf` giving each
 * event's id on this stream.
 */
export const replayStream = <E>(events: Stream.Stream<ThreadEvent, E>, cursorOf: (event: ThreadEvent) => number) =>
  HttpServerResponse.stream(
    Stream.map(events, (e) => encode(e, cursorOf(e))),
    { contentType: "text/event-stream", headers: sseHeaders }
  )

/**
 * The SSE response replaying `read(after)` page by page (each page the events after the cursor, at most
 * `pageSize`) from `after`, `cursorOf` giving each event's id on this stream.
 */
export const replay = <E>(
  read: (after: number) => Effect.Effect<ReadonlyArray<ThreadEvent>, E>,
  cursorOf: (event: ThreadEvent) => number,
  after: number
) =>
  HttpServerResponse.stream(
    Stream.paginateChunkEffect(after, (cursor) =>
      Effect.map(read(cursor), (events) => {
        const last = events.at(-1)
        return [
          Chunk.fromIterable(events.map((e) => encode(e, cursorOf(e)))),
          events.length < pageSize || last === undefined ? Option.none() : Option.some(cursorOf(last))
        ] as const
      })),
    { contentType: "text/event-stream", headers: { "cache-control": "no-cache", "x-accel-buffering": "no" } }
  )
