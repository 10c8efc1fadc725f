/**
 * Shutdown with a turn in flight: closing the server's scope (what SIGTERM does) ends the running turn with a
 * recorded outcome — `interrupted`, `process_stopped` — and a queued run behind it is left for the next process,
 * which reconciles it at start. On SQLite and Postgres.
 */
import { RunId } from "@baton/contracts"
import { ThreadStore } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Exit, Layer, Scope } from "effect"
import { client, get, raw, serve } from "./helpers.js"

const providers = (db: string, idNamespace: string) =>
  Harness.make([{ name: "codex", window: 200_000, inject: true }], { db, idNamespace, config: { interruptTimeoutMillis: 500 } })

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("a shutdown interrupts the turn in flight and records it; the next process reconciles the queued run", () =>
    Harness.withDbFile((file) =>
      Effect.gen(function*() {
        const h = providers(file, "first")
        const scope = yield* Scope.make()
        const context = yield* Layer.buildWithScope(serve(h), scope)
        const { running, queued } = yield* Effect.gen(function*() {
          const api = yield* client()
          const { threadId } = yield* api.threads.create({ payload: { providerInstance: "codex" as never }, headers: {} })
          const gate = yield* Deferred.make<void>()
          h.script.enqueue({ ...Harness.reply(10), hold: { afterItems: 1, gate } })
          const running = yield* api.messages.send({ path: { threadId }, payload: { text: "long" }, headers: {} })
          const queued = yield* api.messages.send({ path: { threadId }, payload: { text: "next" }, headers: {} })
          for (let i = 0; i < 300; i++) {
            const view = yield* raw(get(`/runs/${running.runId}`))
            if ((view.body?.run as { status: string } | undefined)?.status === "running") break
            yield* Effect.sleep(Duration.millis(10))
          }
          return { running, queued }
        }).pipe(Effect.provide(context))
        yield* Scope.close(scope, Exit.void)

        // The next process on the same database.
        const after = yield* Effect.gen(function*() {
          const store = yield* ThreadStore
          const first = yield* store.getRun(RunId.make(running.runId))
          const second = yield* store.getRun(RunId.make(queued.runId))
          return [first, second].map((r) => r._tag === "Some" ? [r.value.status, r.value.failureCode] : null)
        }).pipe(Effect.provide(serve(providers(file, "second"))))
        expect(after).toEqual([["interrupted", "process_stopped"], ["interrupted", "process_restarted"]])
      })
    ))
})
