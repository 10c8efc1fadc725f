/**
 * The event stream followed live (issue "Baton server", item 5): replay after the cursor, then the live tail, no gap
 * and no duplicate, on SQLite and Postgres; a reconnect with `Last-Event-ID` resumes exactly after it.
 */
import { type ThreadId, Timeline } from "@baton/contracts"
import { Harness } from "@baton/testing"
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Stream } from "effect"
import { client, get, parseSse, type SseEvent, serve } from "./helpers.js"

/** Reads the SSE stream at `path` (a live one: it does not end) until an event satisfies `until`. */
const follow = (path: string, until: (e: SseEvent) => boolean, lastEventId?: string) =>
  Effect.gen(function*() {
    const request = lastEventId === undefined ? get(path) : get(path).pipe(HttpClientRequest.setHeader("last-event-id", lastEventId))
    const response = yield* HttpClient.execute(request)
    expect(response.status).toBe(200)
    expect(response.headers["content-type"]).toMatch(/^text\/event-stream/)
    let text = ""
    const decoder = new TextDecoder()
    yield* response.stream.pipe(
      Stream.map((bytes) => decoder.decode(bytes, { stream: true })),
      Stream.takeUntil((piece) => {
        text += piece
        const complete = text.slice(0, text.lastIndexOf("\n\n") + 2)
        return parseSse(complete).some(until)
      }),
      Stream.runDrain
    )
    return parseSse(text.slice(0, text.lastIndexOf("\n\n") + 2))
  }).pipe(Effect.scoped)

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("a live subscriber sees the replay, then a run's events as they are committed: ids = the event log's seqs", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    return Effect.gen(function*() {
      const api = yield* client()
      const { threadId } = yield* api.threads.create({ payload: { title: "live", providerInstance: "codex" as never }, headers: {} })
      h.script.enqueue(Harness.reply(20))
      const first = yield* api.messages.send({ path: { threadId }, payload: { text: "before subscribing" }, headers: {} })
      yield* api.runs.get({ path: { runId: first.runId }, urlParams: { waitMs: 30_000 } })
      // Subscribe (replay of the first run's events), then send: the second run's events arrive live.
      const live = yield* Effect.fork(follow(`/threads/${threadId}/events`, (e) => e.event === "run.completed" && !e.data.includes(first.runId)))
      yield* Effect.sleep("200 millis")
      h.script.enqueue(Harness.reply(20))
      const second = yield* api.messages.send({ path: { threadId }, payload: { text: "after subscribing" }, headers: {} })
      yield* api.runs.get({ path: { runId: second.runId }, urlParams: { waitMs: 30_000 } })
      const received = yield* Fiber.join(live).pipe(Effect.timeout("20 seconds"))
      const log = yield* (yield* Harness.ops).store.listEvents(threadId as ThreadId)
      expect(received.map((e) => e.id)).toEqual(log.map((e) => String(e.seq)))
      expect(received.at(-1)!.event).toBe("run.completed")
      expect(JSON.parse(received.at(-1)!.data).payload.runId).toBe(second.runId)
      // A reconnect after the 3rd event resumes exactly after it.
      const resumed = yield* follow(`/threads/${threadId}/events`, (e) => e.id === String(log.at(-1)!.seq), "3").pipe(Effect.timeout("20 seconds"))
      expect(resumed.map((e) => e.id)).toEqual(log.filter((e) => e.seq > 3).map((e) => String(e.seq)))
      // The stream of every thread follows live too.
      const all = yield* follow("/events", (e) => e.id === String(log.at(-1)!.globalSeq)).pipe(Effect.timeout("20 seconds"))
      expect(all.map((e) => e.id)).toEqual(log.map((e) => String(e.globalSeq)))
    }).pipe(Effect.provide(Layer.fresh(serve(h))))
  }, 120_000)

  it.live("the timeline (the server's fold of the stored log) equals folding every event; the tail after its lastSeq continues it", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }, { name: "claude", window: 200_000, inject: false }])
    return Effect.gen(function*() {
      const api = yield* client()
      const { threadId } = yield* api.threads.create({ payload: { title: "timeline", providerInstance: "codex" as never }, headers: {} })
      const send = (text: string) =>
        Effect.gen(function*() {
          h.script.enqueue(Harness.reply(50))
          const { runId } = yield* api.messages.send({ path: { threadId }, payload: { text }, headers: {} })
          yield* api.runs.get({ path: { runId }, urlParams: { waitMs: 30_000 } })
        })
      yield* send("one")
      yield* send("two")
      // A switch: the next run is owed history (deliveries, a turn-start budget).
      yield* api.threads.switchProvider({ path: { threadId }, payload: { providerInstance: "claude" as never }, headers: {} })
      yield* send("three")
      const middle = yield* api.events.timeline({ path: { threadId } })
      yield* send("four")
      yield* api.threads.switchProvider({ path: { threadId }, payload: { providerInstance: "codex" as never }, headers: {} })
      yield* send("five")
      const timeline = yield* api.events.timeline({ path: { threadId } })
      const replay = parseSse(yield* (yield* HttpClient.execute(get(`/threads/${threadId}/events?follow=false`))).text)
      const events = replay.map((e) => JSON.parse(e.data) as Timeline.EventJson)
      const whole = new Timeline.EventFold()
      for (const e of events) whole.apply(e)
      expect(timeline.lastSeq).toBe(events.at(-1)!.seq)
      expect(timeline).toEqual(whole.toJson())
      // Not vacuous: a point per run (5), a budget where history was owed, delivery steps.
      expect(timeline.points.runSeqs).toEqual([1, 2, 3, 4, 5])
      expect(timeline.points.budgets.some((b) => b !== null)).toBe(true)
      expect(timeline.deliverySteps.length).toBeGreaterThan(0)
      // The points name their native thread by index into `nativeThreads` (codex's and claude's).
      expect(timeline.nativeThreads).toHaveLength(2)
      expect(new Set(timeline.points.nativeThreadIndexes)).toEqual(new Set([0, 1]))
      // The server kept the fold of its last answer (`timeline` continued the fold of `middle`): asked again, twice
      // at once, it reads only what came after it, and answers the same.
      const again = yield* Effect.all([api.events.timeline({ path: { threadId } }), api.events.timeline({ path: { threadId } })], { concurrency: 2 })
      expect(again).toEqual([timeline, timeline])
      // The page's path: the fold of an earlier timeline plus the events after its lastSeq is the whole fold.
      expect(middle.lastSeq).toBeLessThan(timeline.lastSeq)
      const continued = Timeline.EventFold.fromJson(middle)
      for (const e of events) if (e.seq > middle.lastSeq) continued.apply(e)
      expect(continued.toJson()).toEqual(timeline)
      const unknown = yield* Effect.flip(api.events.timeline({ path: { threadId: "thr_nope" as never } }))
      expect(unknown._tag).toBe("ThreadNotFound")
    }).pipe(Effect.provide(Layer.fresh(serve(h))))
  }, 120_000)

  it.live("a live stream with nothing to replay opens at once: its first bytes are a heartbeat, long before the 15 s interval", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    return Effect.gen(function*() {
      const api = yield* client()
      const { threadId } = yield* api.threads.create({ payload: { title: "quiet", providerInstance: "codex" as never }, headers: {} })
      const log = yield* (yield* Harness.ops).store.listEvents(threadId as ThreadId)
      // Found by the fuzz test: following from the last event, nothing was written (not even the head) until the
      // first heartbeat. The wait below is a liveness bound well under the heartbeat interval, not a speed target.
      const first = yield* Effect.gen(function*() {
        const response = yield* HttpClient.execute(get(`/threads/${threadId}/events`).pipe(HttpClientRequest.setHeader("last-event-id", String(log.at(-1)!.seq))))
        expect(response.status).toBe(200)
        const chunk = yield* response.stream.pipe(Stream.take(1), Stream.runCollect)
        return new TextDecoder().decode([...chunk][0])
      }).pipe(Effect.scoped, Effect.timeout("8 seconds"))
      expect(first).toBe(": heartbeat\n\n")
    }).pipe(Effect.provide(Layer.fresh(serve(h))))
  }, 60_000)
})
