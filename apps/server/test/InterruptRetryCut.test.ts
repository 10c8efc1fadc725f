/**
 * A keyed interrupt whose client hangs up before it is answered (a closed dashboard tab, a cut connection: the
 * dashboard's "status 0") is carried out all the same: the provider is asked to stop, the run ends `interrupted`, and
 * the answer is recorded with its key (the client's retry with the same `Idempotency-Key` gets it). Before (review
 * r47), the hang-up interrupted the server's handler and the interrupt with it: hung up before the provider was
 * asked, the run went on as if no interrupt had been sent.
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
  it.live("is carried out: the run ends interrupted, and the retry with its key is 200 with that run", () => {
    const h = Harness.make([{
      name: "codex",
      window: 200_000,
      inject: true,
      // The turn stops inside its tool call until the provider is asked to interrupt it.
      faults: (c) => (c.operation === "startTurn" && c.call === 1 ? "interrupt_in_tool_call" : null)
    }])
    const real = h.providers.codex!
    const asked = Deferred.unsafeMake<void>(FiberId.none)
    const release = Deferred.unsafeMake<void>(FiberId.none)
    const abandoned = Deferred.unsafeMake<void>(FiberId.none)
    // The provider's interrupt call is held until the test releases it: the client hangs up meanwhile.
    const slowToReach = {
      ...real,
      interrupt: (nativeRef: string) =>
        Deferred.succeed(asked, undefined).pipe(
          Effect.zipRight(Deferred.await(release).pipe(Effect.onInterrupt(() => Deferred.succeed(abandoned, undefined)))),
          Effect.zipRight(real.interrupt(nativeRef))
        )
    }
    const layer = Harness.makeLayer([slowToReach], h.counter, Harness.currentDb(), { interruptTimeoutMillis: 60_000 })
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
      // The client hangs up (its request aborted) before the provider is reached.
      yield* Fiber.interrupt(first)
      // Without the fix the hang-up interrupts the server's handler, and the held call with it (`abandoned`); with it
      // nothing is abandoned, and the pause only gives the hang-up time to reach the server (it decides nothing).
      yield* Effect.race(Deferred.await(abandoned), Effect.sleep("2 seconds"))
      yield* Deferred.succeed(release, undefined)
      const ended = yield* api.runs.get({ path: { runId: runId as never }, urlParams: { waitMs: 10_000 } })
      expect(ended.run.status).toBe("interrupted")
      // The client retries with the same key: the first interrupt's answer.
      const again = yield* interrupt
      expect([again.status, again.body?.id, again.body?.status]).toEqual([200, runId, "interrupted"])
    }).pipe(Effect.provide(serve({ ...h, layer })))
  }, 60_000)
})
