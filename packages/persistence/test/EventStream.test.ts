/**
 * `EventStream` (`@baton/contracts`): the SSE wire form of thread events, framed by `@effect/experimental`'s
 * `Sse.encoder` as the server does and read back by its parser as a client does. (Here rather than in contracts:
 * this package already depends on `@effect/experimental`.)
 */
import { EventStream, InvalidRequest, ThreadEvent } from "@baton/contracts"
import { Sse } from "@effect/experimental"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Schema } from "effect"

const event = Schema.decodeUnknownSync(ThreadEvent)({
  eventId: "evt_1",
  threadId: "thr_1",
  seq: 3,
  globalSeq: 41,
  commandId: null,
  createdAt: "2026-12-01T06:00:00.000Z",
  type: "run.completed",
  payload: { runId: "run_1", itemCount: 2 }
})

describe("EventStream", () => {
  it.effect("frames an event as id (its cursor on the feed), event (its type) and data (the stored event, one JSON line)", () =>
    Effect.gen(function*() {
      const data = `{"eventId":"evt_1","threadId":"thr_1","seq":3,"globalSeq":41,"commandId":null,"createdAt":"2026-12-01T06:00:00.000Z","type":"run.completed","payload":{"runId":"run_1","itemCount":2}}`
      expect(Sse.encoder.write(yield* EventStream.toSse("thread")(event))).toBe(`id: 3\nevent: run.completed\ndata: ${data}\n\n`)
      expect(Sse.encoder.write(yield* EventStream.toSse("all")(event))).toBe(`id: 41\nevent: run.completed\ndata: ${data}\n\n`)
    }))

  it.effect("a client's parser reads back the same event, ignoring heartbeats", () =>
    Effect.gen(function*() {
      const parsed: Array<Sse.AnyEvent> = []
      const parser = Sse.makeParser((e) => parsed.push(e))
      const wire = EventStream.heartbeat + Sse.encoder.write(yield* EventStream.toSse("thread")(event)) + EventStream.heartbeat
      // Fed in small pieces, as a socket delivers it.
      for (let i = 0; i < wire.length; i += 7) expect(parser.feed(wire.slice(i, i + 7))).toBeUndefined()
      expect(parsed).toHaveLength(1)
      const back = parsed[0] as Sse.Event
      expect([back.id, back.event]).toEqual(["3", "run.completed"])
      expect(yield* Schema.decodeUnknown(ThreadEvent)(JSON.parse(back.data))).toEqual(event)
    }))

  it.effect("Last-Event-ID: absent or blank is 0; a non-negative integer is the cursor; anything else is InvalidRequest", () =>
    Effect.gen(function*() {
      expect(yield* EventStream.parseLastEventId(undefined)).toBe(0)
      expect(yield* EventStream.parseLastEventId(" ")).toBe(0)
      expect(yield* EventStream.parseLastEventId("41")).toBe(41)
      for (const bad of ["-1", "1.5", "abc", "1e3x", "99999999999999999999"]) {
        const error = yield* Effect.flip(EventStream.parseLastEventId(bad))
        expect(error).toBeInstanceOf(InvalidRequest)
        expect(error.message).toContain("Last-Event-ID")
      }
    }))
})
