/**
 * `GET /runs/{id}?waitMs=…` on a run that goes `waiting` (the model called the client's tool) answers once the run
 * waits, with its open calls: the run cannot end before the client posts their results, and the client held the whole
 * `waitMs` for it (`baton tool-results` waited 30 s a round before it printed the next round's calls; new user
 * b44srv). On SQLite and Postgres.
 */
import { RunDriver } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Fiber } from "effect"
import { get, post, raw, serve } from "./helpers.js"

const readFile = {
  name: "read_file",
  description: "Reads a file of the workspace",
  inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] }
}

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("a wait on a run that comes to wait for the client's tool results answers it waiting, with its open call", () => {
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
      while (!driver.inFlight().includes(runId)) yield* Effect.sleep(Duration.millis(2))
      // The wait starts while the run is in flight; the model then calls the tool and the run waits for the client.
      const wait = yield* Effect.fork(raw(get(`/runs/${runId}?waitMs=60000`)))
      yield* Effect.sleep(Duration.millis(100))
      yield* Deferred.succeed(gate, undefined)
      const answer = yield* Fiber.join(wait).pipe(Effect.timeout(Duration.seconds(5)))
      const view = answer.body as { readonly run: { readonly status: string }; readonly openToolCalls: ReadonlyArray<{ readonly toolCallId: string }> }
      expect([answer.status, view.run.status, view.openToolCalls.map((c) => c.toolCallId)]).toEqual([200, "waiting", ["call_1"]])
      // A wait on the run already waiting answers too (at once), not at waitMs.
      const again = yield* raw(get(`/runs/${runId}?waitMs=60000`)).pipe(Effect.timeout(Duration.seconds(5)))
      expect((again.body!.run as { status: string }).status).toBe("waiting")
      // Its results posted, the run goes on and a wait answers its end.
      h.script.enqueue(Harness.reply(20))
      expect((yield* raw(post(`/threads/${threadId}/runs/${runId}/tool-results`, { results: [{ toolCallId: "call_1", output: "A" }] }))).status).toBe(202)
      const ended = yield* raw(get(`/runs/${runId}?waitMs=60000`)).pipe(Effect.timeout(Duration.seconds(10)))
      expect((ended.body!.run as { status: string }).status).toBe("completed")
    }).pipe(Effect.provide(serve(h)))
  }, 60_000)
})
