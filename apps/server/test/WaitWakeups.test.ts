/**
 * `GET /runs/{id}?waitMs` answers as soon as the run ends, over real HTTP: waits that nothing in this process would
 * otherwise wake until something unrelated happened (the run ahead ending, or the deadline).
 *
 * - A run queued behind a run in flight, interrupted here while a caller waits for it: before, the wait was answered
 *   only when the run ahead ended (the worker settled it on its next look at the queue), or at `waitMs`.
 */
import { RunDriver } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Fiber } from "effect"
import { get, post, raw, serve } from "./helpers.js"

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("a wait on a queued run that is interrupted here is answered while the run ahead is still in flight", () => {
    const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }])
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
})
