/**
 * The 409 `RunInProgress` a command gets while a run is in progress names the run in progress, not the newest run
 * queued behind it: a client that follows the error's advice ("interrupt it") with its `runId` stops the run that
 * blocks the command. Before, `/compact`, `/switch` and `/offload` named the queued run; interrupting it left the
 * running one running and the command still refused. On SQLite and Postgres.
 */
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect } from "effect"
import { client, get, post, raw, serve } from "./helpers.js"

const providers = () =>
  Harness.make([
    { name: "codex", window: 44_000, autoCompactThreshold: 42_000, inject: true },
    { name: "claude", window: 44_000, autoCompactThreshold: 42_000, inject: true }
  ], { config: { interruptTimeoutMillis: 500 } })

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("a run in progress with a run queued behind it: /compact, /switch and /offload name the running run; interrupting it lets the queue go on", () => {
    const h = providers()
    return Effect.gen(function*() {
      const api = yield* client()
      const created = yield* raw(post("/threads", { providerInstance: "codex" }))
      const threadId = created.body!.threadId as string
      const gate = yield* Deferred.make<void>()
      h.script.enqueue({ ...Harness.reply(20), hold: { afterItems: 1, gate } })
      const first = yield* raw(post(`/threads/${threadId}/messages`, { text: "long task" }))
      const running = first.body!.runId as string
      for (let i = 0; i < 200; i++) {
        const view = yield* raw(get(`/runs/${running}`))
        if ((view.body?.run as { status: string } | undefined)?.status === "running") break
        yield* Effect.sleep(Duration.millis(10))
      }
      const second = yield* raw(post(`/threads/${threadId}/messages`, { text: "then this" }))
      expect([second.status, second.body?.status]).toEqual([202, "queued"])
      const queued = second.body!.runId as string

      for (const [path, body] of [["compact", {}], ["switch", { providerInstance: "claude" }], ["offload", {}]] as const) {
        const refused = yield* raw(post(`/threads/${threadId}/${path}`, body))
        expect([path, refused.status, refused.body?._tag, refused.body?.runId]).toEqual([path, 409, "RunInProgress", running])
      }

      // The client does what the error says: it interrupts the run named. The queued run then runs.
      const refused = yield* raw(post(`/threads/${threadId}/compact`, {}))
      const stopped = yield* raw(post(`/threads/${threadId}/interrupt`, { runId: refused.body!.runId }))
      expect([stopped.status, stopped.body?.id, stopped.body?.status]).toEqual([200, running, "interrupted"])
      yield* Deferred.succeed(gate, undefined)
      const next = yield* api.runs.get({ path: { runId: queued as never }, urlParams: { waitMs: 30_000 } })
      expect(next.run.status).toBe("completed")
      expect((yield* raw(post(`/threads/${threadId}/compact`, {}))).status).toBe(200)
    }).pipe(Effect.provide(serve(h)))
  })
})
