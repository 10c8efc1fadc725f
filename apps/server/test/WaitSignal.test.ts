/**
 * `GET /runs/{id}?waitMs=…` is answered by a signal, not by polling: the run driver's fiber ending (with the run
 * ended, or waiting for the client's tool results) settles the wait. Run under the `TestClock`, which never moves
 * here, so any sleep on the way (the handler's 250 ms look at the run, the driver's backstop reads, the `waitMs`
 * bound) never fires: each answer can only come from the signal. Before, a run that came to wait for the client's tool
 * results was found by a read every 250 ms, and the waits below were never answered. On SQLite and Postgres; across
 * two server processes on one Postgres, where the run's thread's event feed (`LISTEN/NOTIFY`) wakes the wait.
 * Also: the signal of a turn that stopped with the run waiting is spent once given, so a wait that joins during the
 * continuation is answered by the continuation's end (a live test: it must join while the continuation is held).
 */
import { RunDriver } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import type { HttpClient } from "@effect/platform"
import type { RunId } from "@baton/contracts"
import { Context, Deferred, Duration, Effect, Fiber, Layer } from "effect"
import { get, post, raw, serve } from "./helpers.js"

const readFile = {
  name: "read_file",
  description: "Reads a file of the workspace",
  inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] }
}

type RunView = { readonly run: { readonly status: string }; readonly openToolCalls: ReadonlyArray<{ readonly toolCallId: string }> }

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.effect("a wait is answered when the run comes to wait for the client and when it ends, with no clock time passing", () => {
    const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }], { config: { toolResultTimeoutMillis: 120_000 } })
    return Effect.gen(function*() {
      const driver = yield* RunDriver.RunDriver
      const threadId = (yield* raw(post("/threads", { providerInstance: "codex", tools: [readFile] }))).body!.threadId as string
      const gate = yield* Deferred.make<void>()
      h.script.enqueue({
        items: [
          Harness.produced("assistant_message", "Reading a.ts.", { messageId: "m1" }),
          Harness.produced("tool_call", JSON.stringify({ path: "a.ts" }), { toolCallId: "call_1", toolName: "read_file", messageId: "m1" })
        ],
        hold: { afterItems: 1, gate }
      })
      const runId = (yield* raw(post(`/threads/${threadId}/messages`, { text: "Read a.ts" }))).body!.runId as string
      while (!driver.inFlight().includes(runId)) yield* Effect.yieldNow()
      const wait = yield* Effect.fork(raw(get(`/runs/${runId}?waitMs=60000`)))
      yield* Deferred.succeed(gate, undefined)
      const waiting = yield* Fiber.join(wait)
      const view = waiting.body as unknown as RunView
      expect([waiting.status, view.run.status, view.openToolCalls.map((c) => c.toolCallId)]).toEqual([200, "waiting", ["call_1"]])
      // The results posted, the run is continued and completes: the wait is answered by the continuation's end.
      const hold = yield* Deferred.make<void>()
      h.script.enqueue({ ...Harness.reply(20), hold: { afterItems: 1, gate: hold } })
      expect((yield* raw(post(`/threads/${threadId}/runs/${runId}/tool-results`, { results: [{ toolCallId: "call_1", output: "A" }] }))).status).toBe(202)
      const end = yield* Effect.fork(raw(get(`/runs/${runId}?waitMs=60000`)))
      yield* Deferred.succeed(hold, undefined)
      const ended = yield* Fiber.join(end)
      expect([ended.status, (ended.body!.run as { status: string }).status]).toEqual([200, "completed"])
    }).pipe(Effect.provide(serve(h)))
  }, 60_000)
  it.live("a wait that joins a run while its continuation is in flight is answered at the run's end, not by the earlier wait's signal", () => {
    const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }], { config: { toolResultTimeoutMillis: 120_000 } })
    return Effect.gen(function*() {
      const driver = yield* RunDriver.RunDriver
      const threadId = (yield* raw(post("/threads", { providerInstance: "codex", tools: [readFile] }))).body!.threadId as string
      const first = yield* Deferred.make<void>()
      h.script.enqueue({
        items: [
          Harness.produced("assistant_message", "Reading a.ts.", { messageId: "m1" }),
          Harness.produced("tool_call", JSON.stringify({ path: "a.ts" }), { toolCallId: "call_1", toolName: "read_file", messageId: "m1" })
        ],
        hold: { afterItems: 1, gate: first }
      })
      const runId = (yield* raw(post(`/threads/${threadId}/messages`, { text: "Read a.ts" }))).body!.runId as string
      while (!driver.inFlight().includes(runId)) yield* Effect.sleep(Duration.millis(2))
      // A caller waiting for the run's end (as `sendAndWait` or `awaitRun` do) joins while the first turn is in flight
      // and stays joined across the run's wait for the client.
      const whole = yield* Effect.fork(driver.awaitRun(runId as RunId))
      yield* Effect.sleep(Duration.millis(100))
      yield* Deferred.succeed(first, undefined)
      const waiting = yield* raw(get(`/runs/${runId}?waitMs=60000`))
      expect((waiting.body!.run as { status: string }).status).toBe("waiting")
      const gate = yield* Deferred.make<void>()
      h.script.enqueue({ ...Harness.reply(20), hold: { afterItems: 1, gate } })
      expect((yield* raw(post(`/threads/${threadId}/runs/${runId}/tool-results`, { results: [{ toolCallId: "call_1", output: "A" }] }))).status).toBe(202)
      while (!driver.inFlight().includes(runId)) yield* Effect.sleep(Duration.millis(2))
      const end = yield* Effect.fork(raw(get(`/runs/${runId}?waitMs=60000`)))
      // Let the wait join the run's waiters while the continuation is held. Before, it joined the deferred the first
      // turn's end had settled (with the run waiting) and was answered at once with the run still running.
      yield* Effect.sleep(Duration.millis(300))
      yield* Deferred.succeed(gate, undefined)
      const ended = yield* Fiber.join(end)
      expect([ended.status, (ended.body!.run as { status: string }).status]).toEqual([200, "completed"])
      expect((yield* Fiber.join(whole)).status).toBe("completed")
    }).pipe(Effect.provide(serve(h)))
  }, 60_000)

  if (db === "postgres") {
    it.effect("a wait in one process on a run another process drives is woken by the event feed when the run comes to wait for the client", () => {
      const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }])
      const codex = h.providers.codex!
      return Harness.withDbFile((file) =>
        Effect.gen(function*() {
          const config = { toolResultTimeoutMillis: 120_000 }
          const onA = yield* Layer.build(serve({ ...h, layer: Harness.makeLayer([codex], h.counter, file, config, "a") }))
          const onB = yield* Layer.build(serve({ ...h, layer: Harness.makeLayer([codex], h.counter, file, config, "b") }))
          const driverA = Context.get(onA, RunDriver.RunDriver)
          const a = <A, E>(e: Effect.Effect<A, E, HttpClient.HttpClient>) => Effect.provide(e, onA)
          const b = <A, E>(e: Effect.Effect<A, E, HttpClient.HttpClient>) => Effect.provide(e, onB)
          const threadId = (yield* a(raw(post("/threads", { providerInstance: "codex", tools: [readFile] })))).body!.threadId as string
          const gate = yield* Deferred.make<void>()
          h.script.enqueue({
            items: [
              Harness.produced("assistant_message", "Reading a.ts.", { messageId: "m1" }),
              Harness.produced("tool_call", JSON.stringify({ path: "a.ts" }), { toolCallId: "call_1", toolName: "read_file", messageId: "m1" })
            ],
            hold: { afterItems: 1, gate }
          })
          const runId = (yield* a(raw(post(`/threads/${threadId}/messages`, { text: "Read a.ts" })))).body!.runId as string
          while (!driverA.inFlight().includes(runId)) yield* Effect.yieldNow()
          // Asked of the process that does not drive the run: nothing there signals it.
          const wait = yield* Effect.fork(b(raw(get(`/runs/${runId}?waitMs=60000`))))
          yield* Deferred.succeed(gate, undefined)
          const answer = yield* Fiber.join(wait)
          const view = answer.body as unknown as RunView
          expect([answer.status, view.run.status, view.openToolCalls.map((c) => c.toolCallId)]).toEqual([200, "waiting", ["call_1"]])
        }).pipe(Effect.scoped)
      )
    }, 60_000)
  }
})
