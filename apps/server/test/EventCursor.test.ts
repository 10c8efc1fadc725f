/**
 * A thread's event stream (and `/events`) refuses a cursor past the last event, over real HTTP: such an id was never sent
 * (a client of another database, a corrupted id), and following from it skipped every event up to it in silence (a
 * gap the client could not see). The last event's own id, and any below it, resume as before. An id is decimal digits
 * as the server writes it: `0x3` and `1e3` (which `Number` read as 3 and 1000) are 400 naming the header or parameter.
 * `/events?tail=true` with `after` too is 400 (two starts; `after` was dropped in silence). An integer parameter past
 * 2^53 - 1 is 400 "too large" naming the digits sent. On SQLite and Postgres.
 */
import type { RunId, ThreadId } from "@baton/contracts"
import { ThreadStore, UnitOfWork } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Stream } from "effect"
import { get, parseSse, post, raw, type SseEvent, serve } from "./helpers.js"

const providers = () => Harness.make([{ name: "codex", window: 44_000, autoCompactThreshold: 42_000, inject: true }])

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("Last-Event-ID or after past the thread's last event is 400; the last event's id resumes with nothing to replay", () =>
    Effect.gen(function*() {
      const created = yield* raw(post("/threads", { providerInstance: "codex" }))
      const threadId = created.body!.threadId as string
      const stored = parseSse((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
      const last = Number(stored.at(-1)!.id)
      expect(last).toBeGreaterThan(0)

      // (`follow=false`: without the refusal a followed stream would just wait, skipping what comes up to that id.)
      const future = yield* raw(get(`/threads/${threadId}/events?follow=false`).pipe(HttpClientRequest.setHeader("last-event-id", String(last + 5))))
      expect([future.status, future.body]).toEqual([400, {
        _tag: "InvalidRequest",
        reason: `Last-Event-ID ${last + 5} is past the last event of thread ${threadId} (${last}): no event has that id yet; resume from the last id received, or from the start without one`,
        message: `Last-Event-ID ${last + 5} is past the last event of thread ${threadId} (${last}): no event has that id yet; resume from the last id received, or from the start without one`
      }])
      const futureAfter = yield* raw(get(`/threads/${threadId}/events?after=${last + 1}`))
      expect([futureAfter.status, futureAfter.body?._tag]).toEqual([400, "InvalidRequest"])

      const atLast = yield* raw(get(`/threads/${threadId}/events?follow=false`).pipe(HttpClientRequest.setHeader("last-event-id", String(last))))
      expect([atLast.status, parseSse(atLast.text)]).toEqual([200, []])
    }).pipe(Effect.provide(serve(providers()))))

  it.live("on /events, a cursor past the log's last globalSeq is 400; the last one resumes with nothing to replay", () =>
    Effect.gen(function*() {
      yield* raw(post("/threads", { providerInstance: "codex" }))
      const stored = parseSse((yield* raw(get("/events?follow=false"))).text)
      const last = Number(stored.at(-1)!.id)
      const future = yield* raw(get("/events?follow=false").pipe(HttpClientRequest.setHeader("last-event-id", String(last + 5))))
      expect([future.status, future.body?._tag, future.body?.reason]).toEqual([
        400,
        "InvalidRequest",
        `Last-Event-ID ${last + 5} is past the last event of the log (${last}): no event has that id yet; resume from the last id received, or from the start without one`
      ])
      const futureAfter = yield* raw(get(`/events?after=${last + 1}`))
      expect([futureAfter.status, futureAfter.body?._tag]).toEqual([400, "InvalidRequest"])
      const atLast = yield* raw(get(`/events?follow=false&after=${last}`))
      expect([atLast.status, parseSse(atLast.text)]).toEqual([200, []])
    }).pipe(Effect.provide(serve(providers()))))

  it.live("a cursor not in decimal digits (0x3, 1e3) is 400 naming Last-Event-ID or after, on both streams", () =>
    Effect.gen(function*() {
      const created = yield* raw(post("/threads", { providerInstance: "codex" }))
      const threadId = created.body!.threadId as string
      for (const path of [`/threads/${threadId}/events`, "/events"]) {
        for (const bad of ["0x3", "1e3"]) {
          const header = yield* raw(get(`${path}?follow=false`).pipe(HttpClientRequest.setHeader("last-event-id", bad)))
          expect([path, bad, header.status, header.body?._tag, header.body?.reason]).toEqual([
            path,
            bad,
            400,
            "InvalidRequest",
            `Last-Event-ID: expected the id of an event received (a non-negative integer in decimal digits), got "${bad}"`
          ])
          const param = yield* raw(get(`${path}?follow=false&after=${bad}`))
          const issues = param.body?.issues as Array<{ path: Array<string>; message: string }> | undefined
          // (The second issue is the optional field's other member: "Expected undefined".)
          expect([path, bad, param.status, issues?.[0]?.path, issues?.[0]?.message]).toEqual([
            path,
            bad,
            400,
            ["after"],
            "expected a non-negative integer in decimal digits (e.g. 42)"
          ])
        }
        const decimal = yield* raw(get(`${path}?follow=false&after=1`))
        expect(decimal.status).toBe(200)
      }
    }).pipe(Effect.provide(serve(providers()))))

  it.live("on /events, tail=true starts at the log's end (nothing of the history replayed); a Last-Event-ID still resumes", () =>
    Effect.gen(function*() {
      yield* raw(post("/threads", { providerInstance: "codex" }))
      yield* raw(post("/threads", { providerInstance: "codex" }))
      const stored = parseSse((yield* raw(get("/events?follow=false"))).text)
      expect(stored.length).toBeGreaterThan(1)
      const tail = yield* raw(get("/events?follow=false&tail=true"))
      expect([tail.status, parseSse(tail.text)]).toEqual([200, []])
      const resumed = yield* raw(get("/events?follow=false&tail=true").pipe(HttpClientRequest.setHeader("last-event-id", stored[0]!.id!)))
      expect(parseSse(resumed.text).map((e) => e.id)).toEqual(stored.slice(1).map((e) => e.id))
    }).pipe(Effect.provide(serve(providers()))))

  it.live("on /events, tail=true with after is 400 naming both (after was silently ignored, even past the log's end)", () =>
    Effect.gen(function*() {
      yield* raw(post("/threads", { providerInstance: "codex" }))
      for (const after of ["0", "99"]) {
        const both = yield* raw(get(`/events?follow=false&tail=true&after=${after}`))
        expect([both.status, both.body?._tag, both.body?.reason]).toEqual([
          400,
          "InvalidRequest",
          `tail=true and after name two different starts (the log's end, globalSeq ${after}): send one`
        ])
      }
    }).pipe(Effect.provide(serve(providers()))))

  it.live("an integer parameter past 2^53 - 1 is 400 saying too large with the digits sent, not \"Expected an integer, actual 1e20\"", () =>
    Effect.gen(function*() {
      const created = yield* raw(post("/threads", { providerInstance: "codex" }))
      const threadId = created.body!.threadId as string
      for (const [path, name] of [["/events?follow=false&after=", "after"], ["/threads?limit=", "limit"], [`/threads/${threadId}/items?afterSeq=`, "afterSeq"]] as const) {
        for (const big of ["99999999999999999999", "9007199254740993"]) {
          const answer = yield* raw(get(`${path}${big}`))
          const issues = answer.body?.issues as Array<{ path: Array<string>; message: string }> | undefined
          expect([path, answer.status, issues?.[0]?.path, issues?.[0]?.message]).toEqual([
            path,
            400,
            [name],
            `expected an integer of at most 9007199254740991, got ${big}`
          ])
        }
      }
    }).pipe(Effect.provide(serve(providers()))))
})

/** The live SSE stream at `path` from `lastEventId` (it does not end) up to the first event satisfying `until`. */
const follow = (path: string, lastEventId: string, until: (e: SseEvent) => boolean) =>
  Effect.gen(function*() {
    const response = yield* HttpClient.execute(get(path).pipe(HttpClientRequest.setHeader("last-event-id", lastEventId)))
    let text = ""
    const decoder = new TextDecoder()
    yield* response.stream.pipe(
      Stream.map((bytes) => decoder.decode(bytes, { stream: true })),
      Stream.takeUntil((piece) => {
        text += piece
        return parseSse(text.slice(0, text.lastIndexOf("\n\n") + 2)).some(until)
      }),
      Stream.runDrain
    )
    return parseSse(text.slice(0, text.lastIndexOf("\n\n") + 2))
  }).pipe(Effect.scoped)

describe("Postgres: /events?follow=false in the live stream's order", () => {
  beforeAll(() => Harness.useDb(Harness.postgres))

  // Regression (hbreak, found with two server processes on one Postgres: a client following /events that resumed with
  // follow=false and its Last-Event-ID got events it had already received and missed one): follow=false paged by
  // globalSeq, while the live stream (and the cursor's meaning) follow the commit-safe order, where a transaction
  // that began first but inserted last comes first with the higher globalSeq.
  it.live("resumed from each id of the live stream, follow=false gives exactly the events after it", () =>
    Effect.gen(function*() {
      const a = (yield* raw(post("/threads", { providerInstance: "codex" }))).body!.threadId as ThreadId
      const b = (yield* raw(post("/threads", { providerInstance: "codex" }))).body!.threadId as ThreadId
      const before = parseSse((yield* raw(get("/events?follow=false"))).text)
      const cursor = before.at(-1)!.id!
      const store = yield* ThreadStore
      const uow = yield* UnitOfWork
      const append = (threadId: ThreadId, itemCount: number) =>
        store.appendEvent({ threadId, type: "run.completed", payload: { runId: "run_order" as RunId, itemCount } })
      // A locks its thread (its transaction id is taken), B inserts and commits, then A inserts and commits.
      const locked = yield* Deferred.make<void>()
      const insert = yield* Deferred.make<void>()
      const slow = yield* Effect.fork(uow.thread(a, "test.slow")(Effect.gen(function*() {
        yield* Deferred.succeed(locked, undefined)
        yield* Deferred.await(insert)
        yield* append(a, 1)
      })))
      yield* Deferred.await(locked)
      yield* uow.thread(b, "test.b1")(append(b, 2))
      yield* Deferred.succeed(insert, undefined)
      yield* Fiber.join(slow)
      yield* uow.thread(b, "test.b2")(append(b, 3))

      // The live stream's order after the cursor: A's event (the higher globalSeq) first.
      const live = (yield* follow("/events", cursor, (e) => e.data.includes("\"itemCount\":3"))).filter((e) => e.data.includes("run_order"))
      expect(live.map((e) => (JSON.parse(e.data) as { threadId: string }).threadId)).toEqual([a, b, b])
      expect(Number(live[0]!.id)).toBeGreaterThan(Number(live[1]!.id))
      const replayed = parseSse((yield* raw(get("/events?follow=false").pipe(HttpClientRequest.setHeader("last-event-id", cursor)))).text)
      expect(replayed.map((e) => e.id)).toEqual(live.map((e) => e.id))
      for (let i = 0; i < live.length; i++) {
        const after = parseSse((yield* raw(get("/events?follow=false").pipe(HttpClientRequest.setHeader("last-event-id", live[i]!.id!)))).text)
        expect([i, after.map((e) => e.id)]).toEqual([i, live.slice(i + 1).map((e) => e.id)])
      }
    }).pipe(Effect.provide(serve(providers()))))
})
