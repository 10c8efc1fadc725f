/**
 * `GET /runs/{id}?waitMs` answers as soon as the run ends, over real HTTP: waits that nothing in this process would
 * otherwise wake until something unrelated happened (the run ahead ending, or the deadline).
 *
 * - A run queued behind a run in flight, interrupted here while a caller waits for it: before, the wait was answered
 *   only when the run ahead ended (the worker settled it on its next look at the queue), or at `waitMs`.
 * - A run queued behind a run that goes `waiting` (client tools) here, whose results are posted to another process
 *   (which continues it and then drives the queued run): the wait had joined the run's waiters while this process's
 *   worker was driving the run ahead, and the worker then stopped at the waiting run without answering them; nothing
 *   here looked at the run again, and the wait was answered only at `waitMs`.
 * - A run queued behind a run in flight here, interrupted by another process: nothing here looks at it until the run
 *   ahead ends (processes do not signal each other); the wait now reads the record now and then as a backstop
 *   (`waitBackstopMillis`).
 */
import { RunDriver } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import type { HttpClient } from "@effect/platform"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Duration, Effect, Fiber, Layer } from "effect"
import { get, post, raw, serve } from "./helpers.js"

const readFile = {
  name: "read_file",
  description: "Reads a file of the workspace",
  inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] }
}

/**
 * The wait's backstop read (see `waitBackstopMillis`) put out of reach: what is tested is the signal that answers the
 * wait, not the polling that would answer it within a second without it.
 */
const noBackstop = { waitBackstopMillis: 600_000 }

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("a wait on an unknown run id is 404 at once", () => {
    const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }])
    return Effect.gen(function*() {
      const answer = yield* raw(get("/runs/run_nope?waitMs=60000"))
      expect([answer.status, answer.body!._tag]).toEqual([404, "RunNotFound"])
    }).pipe(Effect.provide(serve(h)))
  })

  it.live("a wait that outlasts waitMs answers the run as it stands then: in flight here, and queued behind it", () => {
    const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }], { config: noBackstop })
    return Effect.gen(function*() {
      const driver = yield* RunDriver.RunDriver
      const threadId = (yield* raw(post("/threads", { providerInstance: "codex" }))).body!.threadId as string
      const gate = yield* Deferred.make<void>()
      h.script.enqueue({ ...Harness.reply(20), hold: { afterItems: 1, gate } })
      const ahead = (yield* raw(post(`/threads/${threadId}/messages`, { text: "ahead" }))).body!.runId as string
      while (!driver.inFlight().includes(ahead)) yield* Effect.sleep(Duration.millis(2))
      const queued = (yield* raw(post(`/threads/${threadId}/messages`, { text: "behind" }))).body!.runId as string
      // Neither run ends while the gate is shut: each wait is answered at its 300 ms bound, not when the run ends.
      const statusAt = (runId: string) =>
        raw(get(`/runs/${runId}?waitMs=300`)).pipe(
          Effect.map((answer) => [answer.status, (answer.body!.run as { status: string }).status]),
          Effect.timeout(Duration.seconds(10)),
          Effect.option
        )
      const [inFlight, behind] = yield* Effect.all([statusAt(ahead), statusAt(queued)], { concurrency: 2 })
      expect(driver.inFlight()).toContain(ahead)
      expect(inFlight._tag === "Some" ? inFlight.value : "not answered within 10 s").toEqual([200, "running"])
      expect(behind._tag === "Some" ? behind.value : "not answered within 10 s").toEqual([200, "queued"])
      yield* Deferred.succeed(gate, undefined)
    }).pipe(Effect.provide(serve(h)))
  }, 60_000)

  it.live("a wait on a queued run that is interrupted here is answered while the run ahead is still in flight", () => {
    const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }], { config: noBackstop })
    return Effect.gen(function*() {
      const driver = yield* RunDriver.RunDriver
      const created = yield* raw(post("/threads", { providerInstance: "codex" }))
      const threadId = created.body!.threadId as string
      const gate = yield* Deferred.make<void>()
      h.script.enqueue({ ...Harness.reply(20), hold: { afterItems: 1, gate } })
      const ahead = (yield* raw(post(`/threads/${threadId}/messages`, { text: "ahead" }))).body!.runId as string
      while (!driver.inFlight().includes(ahead)) yield* Effect.sleep(Duration.millis(2))
      const queued = (yield* raw(post(`/threads/${threadId}/messages`, { text: "behind" }))).body!.runId as string
      const wait = yield* Effect.fork(raw(get(`/runs/${queued}?waitMs=60000`)))
      // Let the wait read the run (queued) and join its waiters before the interrupt.
      yield* Effect.sleep(Duration.millis(200))
      const interrupted = yield* raw(post(`/threads/${threadId}/interrupt`, { runId: queued }))
      expect(interrupted.status).toBe(200)
      // Answered now, with the run interrupted, while the run ahead is still held (not at its end or the deadline).
      const answer = yield* Fiber.join(wait).pipe(Effect.timeout(Duration.seconds(10)), Effect.option)
      expect(driver.inFlight()).toContain(ahead)
      expect(answer._tag).toBe("Some")
      if (answer._tag === "Some") expect([answer.value.status, (answer.value.body!.run as { status: string }).status]).toEqual([200, "interrupted"])
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.interrupt(wait)
    }).pipe(Effect.provide(serve(h)))
  }, 60_000)

  it.live("a wait here on a run queued behind a waiting run continued by another process is answered when that process ends it", () => {
    const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }])
    const codex = h.providers.codex!
    return Harness.withDbFile((file) =>
      Effect.gen(function*() {
        const config = { toolResultTimeoutMillis: 60_000, ...noBackstop }
        const onA = yield* Layer.build(serve({ ...h, layer: Harness.makeLayer([codex], h.counter, file, config, "a") }))
        const onB = yield* Layer.build(serve({ ...h, layer: Harness.makeLayer([codex], h.counter, file, config, "b") }))
        const driverA = Context.get(onA, RunDriver.RunDriver)
        const a = <A, E>(e: Effect.Effect<A, E, HttpClient.HttpClient>) => Effect.provide(e, onA)
        const b = <A, E>(e: Effect.Effect<A, E, HttpClient.HttpClient>) => Effect.provide(e, onB)
        const threadId = (yield* a(raw(post("/threads", { providerInstance: "codex" })))).body!.threadId as string
        // The run ahead calls the client's tool once it is let go (held in flight here until then); the queued run
        // answers.
        const gate = yield* Deferred.make<void>()
        h.script.enqueue({
          items: [
            Harness.produced("assistant_message", "Reading a.ts.", { messageId: "m1" }),
            Harness.produced("tool_call", JSON.stringify({ path: "a.ts" }), { toolCallId: "call_1", toolName: "read_file", messageId: "m1" })
          ],
          hold: { afterItems: 1, gate }
        })
        h.script.enqueue(Harness.reply(20))
        h.script.enqueue(Harness.reply(20))
        const ahead = (yield* a(raw(post(`/threads/${threadId}/messages`, { text: "Read a.ts", tools: [readFile] })))).body!.runId as string
        while (!driverA.inFlight().includes(ahead)) yield* Effect.sleep(Duration.millis(2))
        const queued = (yield* a(raw(post(`/threads/${threadId}/messages`, { text: "Then this." })))).body!.runId as string
        const wait = yield* Effect.fork(a(raw(get(`/runs/${queued}?waitMs=60000`))))
        // Let the wait read the run (queued) and join its waiters while the worker here drives the run ahead.
        yield* Effect.sleep(Duration.millis(200))
        yield* Deferred.succeed(gate, undefined)
        while ((yield* a(raw(get(`/runs/${ahead}`)))).body!.run && ((yield* a(raw(get(`/runs/${ahead}`)))).body!.run as { status: string }).status !== "waiting") {
          yield* Effect.sleep(Duration.millis(5))
        }
        // The worker here stops at the waiting run; the results go to the other process, which ends both runs.
        const posted = yield* b(raw(post(`/threads/${threadId}/runs/${ahead}/tool-results`, { results: [{ toolCallId: "call_1", output: "A", isError: false }] })))
        expect(posted.status).toBe(202)
        for (;;) {
          const seen = yield* b(raw(get(`/runs/${queued}`)))
          if ((seen.body!.run as { status: string }).status === "completed") break
          yield* Effect.sleep(Duration.millis(5))
        }
        // The wait here is answered now that the run has ended (not at its 60 s deadline).
        const answer = yield* Fiber.join(wait).pipe(Effect.timeout(Duration.seconds(10)), Effect.option)
        expect(answer._tag).toBe("Some")
        if (answer._tag === "Some") expect([answer.value.status, (answer.value.body!.run as { status: string }).status]).toEqual([200, "completed"])
        yield* Fiber.interrupt(wait)
      }).pipe(Effect.scoped)
    )
  }, 60_000)

  it.live("a wait here on a queued run that another process interrupts is answered while the run ahead is still in flight here", () => {
    const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }])
    const codex = h.providers.codex!
    return Harness.withDbFile((file) =>
      Effect.gen(function*() {
        const onA = yield* Layer.build(serve({ ...h, layer: Harness.makeLayer([codex], h.counter, file, {}, "a") }))
        const onB = yield* Layer.build(serve({ ...h, layer: Harness.makeLayer([codex], h.counter, file, {}, "b") }))
        const driverA = Context.get(onA, RunDriver.RunDriver)
        const a = <A, E>(e: Effect.Effect<A, E, HttpClient.HttpClient>) => Effect.provide(e, onA)
        const b = <A, E>(e: Effect.Effect<A, E, HttpClient.HttpClient>) => Effect.provide(e, onB)
        const threadId = (yield* a(raw(post("/threads", { providerInstance: "codex" })))).body!.threadId as string
        const gate = yield* Deferred.make<void>()
        h.script.enqueue({ ...Harness.reply(20), hold: { afterItems: 1, gate } })
        const ahead = (yield* a(raw(post(`/threads/${threadId}/messages`, { text: "ahead" })))).body!.runId as string
        while (!driverA.inFlight().includes(ahead)) yield* Effect.sleep(Duration.millis(2))
        const queued = (yield* a(raw(post(`/threads/${threadId}/messages`, { text: "behind" })))).body!.runId as string
        const wait = yield* Effect.fork(a(raw(get(`/runs/${queued}?waitMs=60000`))))
        yield* Effect.sleep(Duration.millis(200))
        const interrupted = yield* b(raw(post(`/threads/${threadId}/interrupt`, { runId: queued })))
        expect(interrupted.status).toBe(200)
        // Answered while the run ahead is still held here (not when it ends, nor at the 60 s deadline).
        const answer = yield* Fiber.join(wait).pipe(Effect.timeout(Duration.seconds(10)), Effect.option)
        expect(driverA.inFlight()).toContain(ahead)
        expect(answer._tag).toBe("Some")
        if (answer._tag === "Some") expect([answer.value.status, (answer.value.body!.run as { status: string }).status]).toEqual([200, "interrupted"])
        yield* Deferred.succeed(gate, undefined)
        yield* Fiber.interrupt(wait)
      }).pipe(Effect.scoped)
    )
  }, 60_000)
})
