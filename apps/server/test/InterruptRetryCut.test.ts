/**
 * A keyed interrupt whose client hangs up while the provider is being stopped (the dashboard's "status 0": a cut
 * connection) is carried out all the same and its answer recorded with its key, so the client's retry with the same
 * `Idempotency-Key` gets 200 with the run it interrupted. Before (review r47 of b47srv), the hang-up stopped the
 * interrupt half-way: the provider had been asked and the turn ended `interrupted`, but no answer was recorded, and
 * the retry was refused 409 `RunAlreadyEnded` ("nothing was interrupted").
 */
import { Harness } from "@baton/testing"
import type { ScriptedProvider } from "@baton/providers"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, FiberId } from "effect"
import { client, post, raw, serve } from "./helpers.js"

const toolTurn: ScriptedProvider.ScriptedResponse = {
  items: [
    Harness.produced("assistant_message", "Let me run the tests.", { messageId: "m1" }),
    Harness.produced("tool_call", "{\"command\":\"pnpm test\"}", { toolCallId: "call_1", toolName: "bash", messageId: "m1", toolCallState: "answered" }),
    Harness.produced("tool_result", "3 passed", { toolCallId: "call_1", toolName: "bash" }),
    Harness.produced("assistant_message", "All tests pass.", { messageId: "m2" })
  ]
}

describe("a keyed interrupt whose client hung up", () => {
  it.live("is carried out and recorded: the retry with its key is 200 with the run it interrupted", () => {
    const h = Harness.make([{
      name: "codex",
      window: 200_000,
      inject: true,
      faults: (c) => (c.operation === "startTurn" && c.call === 1 ? "interrupt_in_tool_call" : null)
    }])
    const real = h.providers.codex!
    const asked = Deferred.unsafeMake<void>(FiberId.none)
    const release = Deferred.unsafeMake<void>(FiberId.none)
    const abandoned = Deferred.unsafeMake<void>(FiberId.none)
    // The provider stops the turn at once (it ends `interrupted`), then its acknowledgement is held until the test
    // releases it: the client hangs up in between.
    const slowToAcknowledge = {
      ...real,
      interrupt: (nativeRef: string) =>
        real.interrupt(nativeRef).pipe(
          Effect.zipRight(Deferred.succeed(asked, undefined)),
          Effect.zipRight(Deferred.await(release).pipe(Effect.onInterrupt(() => Deferred.succeed(abandoned, undefined))))
        )
    }
    const layer = Harness.makeLayer([slowToAcknowledge], h.counter, Harness.currentDb(), { interruptTimeoutMillis: 60_000 })
    return Effect.gen(function*() {
      const api = yield* client()
      const threadId = (yield* raw(post("/threads", { providerInstance: "codex" }))).body!.threadId as string
      h.script.enqueue(toolTurn)
      const sent = yield* raw(post(`/threads/${threadId}/messages`, { text: "run the tests" }))
      const runId = sent.body!.runId as string
      yield* real.awaitToolCall
      const interrupt = raw(post(`/threads/${threadId}/interrupt`, { runId }).pipe(HttpClientRequest.setHeader("idempotency-key", "stop-1")))
      const first = yield* Effect.fork(interrupt)
      yield* Deferred.await(asked)
      // The client hangs up (its request aborted) while the provider is being stopped.
      yield* Fiber.interrupt(first)
      // Without the fix the hang-up interrupts the server's handler, and with it the held acknowledgement (`abandoned`);
      // with it nothing is abandoned: the wait only gives the hang-up time to reach the server (it decides nothing).
      yield* Effect.race(Deferred.await(abandoned), Effect.sleep("2 seconds"))
      yield* Deferred.succeed(release, undefined)
      const ended = yield* api.runs.get({ path: { runId: runId as never }, urlParams: { waitMs: 30_000 } })
      expect(ended.run.status).toBe("interrupted")
      // The client retries with the same key: the first interrupt's answer, not "nothing was interrupted".
      const again = yield* interrupt
      expect([again.status, again.body?._tag, again.body?.id, again.body?.status]).toEqual([200, undefined, runId, "interrupted"])
    }).pipe(Effect.provide(serve({ ...h, layer })))
  }, 60_000)
})
