/**
 * `GET /runs/{id}?waitMs=…` waiting on a run in flight when the server's shutdown begins answers at once with the run
 * as it stands, as a live event stream ends at once with `server_stopping`. The run in flight goes on until the open
 * requests have finished (docs/server.md), so the wait could not end by itself: it held the shutdown until the
 * listener's deadline (10 s by default), was then cut without an answer, and the server logged the cut request as an
 * unexpected error (new user b44srv).
 */
import { EventStream } from "@baton/server"
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Fiber } from "effect"
import { get, post, raw, serve } from "./helpers.js"

const providers = () => Harness.make([{ name: "codex", window: 44_000, autoCompactThreshold: 42_000, inject: true }])

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("a run's long wait answers the run as it stands once the shutdown begins", () => {
    const h = providers()
    return Effect.gen(function*() {
      const created = yield* raw(post("/threads", { providerInstance: "codex" }))
      const threadId = created.body!.threadId as string
      const gate = yield* Deferred.make<void>()
      h.script.enqueue({ ...Harness.reply(20), hold: { afterItems: 1, gate } })
      const runId = (yield* raw(post(`/threads/${threadId}/messages`, { text: "long task" }))).body!.runId as string
      for (let i = 0; i < 200; i++) {
        const view = yield* raw(get(`/runs/${runId}`))
        if ((view.body?.run as { status: string } | undefined)?.status === "running") break
        yield* Effect.sleep(Duration.millis(10))
      }
      const waiting = yield* Effect.fork(raw(get(`/runs/${runId}?waitMs=60000`)))
      yield* Effect.sleep(Duration.millis(300))
      // The shutdown begins (what `Server.layer`'s finalizer completes first).
      yield* Deferred.succeed(yield* EventStream.Stopping, undefined)
      const answered = yield* Fiber.join(waiting).pipe(Effect.timeout(Duration.seconds(5)))
      expect([answered.status, (answered.body?.run as { status: string }).status]).toEqual([200, "running"])
      yield* Deferred.succeed(gate, undefined)
    }).pipe(Effect.provide(serve(h)))
  }, 30_000)
})
