/**
 * A rate-limited model request is waited out visibly: the adapter's `retry_scheduled` turn event is recorded as the
 * thread event `run.retry_scheduled` before the wait (a client following the event stream sees why nothing streams),
 * and the run then completes. Found by the issue-9 review: a long `retry-after` was waited out with no event.
 */
import { type ProviderInstance, type ThreadEventOf } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { DateTime, Effect } from "effect"
import { adapterFor, countTokensReply, httpLayer, json, loopback, type Received, sqliteFile } from "../../providers/test/support/Loopback.js"
import { answer } from "./support/ModelLoopback.js"

const counter = TokenCounter.make()

// it.live: the adapter waits out the retry on the real clock.
describe("a rate-limited request through a real adapter", () => {
  it.live("429 with retry-after-ms: 120 then an answer: run.retry_scheduled (attempt 1, 120 ms, HTTP 429) is recorded before the retried request; the run completes", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const model = yield* adapterFor("anthropic-messages", loop, file, {}, { instance: "anthropic" as ProviderInstance })
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const t = yield* o.create("anthropic")
        // Calibration's count_tokens requests are answered by URL; the turn's requests get a 429, then the answer.
        const turnReplies = [
          json(429, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`, { "retry-after-ms": "120" }),
          answer("done")
        ]
        const reply = (request: Received) =>
          request.url.endsWith("/count_tokens") ? countTokensReply((text) => counter.count(text))(request) : turnReplies.shift()!
        loop.enqueue(reply, reply, reply, reply)
        const run = yield* o.send(t, "hello")
        expect(run.status).toBe("completed")
        const retries = (yield* o.store.listEvents(t)).filter((e) => e.type === "run.retry_scheduled")
        expect(retries.map((e) => e.payload as ThreadEventOf<"run.retry_scheduled">["payload"])).toEqual([{
          runId: run.runId,
          providerInstance: "anthropic",
          attempt: 1,
          delayMs: 120,
          reason: "HTTP 429: Anthropic rate_limit_error: Number of request tokens has exceeded your per-minute rate limit",
          httpStatus: 429
        }])
        // Written before the wait: before the retried request reached the provider.
        const turns = loop.requests.filter((r) => r.url === "/v1/messages")
        expect(turns.length).toBe(2)
        expect(DateTime.toEpochMillis(retries[0]!.createdAt)).toBeLessThanOrEqual(turns[1]!.at)
      }).pipe(Effect.provide(Harness.makeLayer([model], counter, file, {})))
    }).pipe(Effect.provide(httpLayer), Effect.scoped), { timeout: 60_000 })

  // Found by the issue-9 review: the turn timeout counted the announced retry waits, so a turn waiting out a long
  // retry-after was killed before the provider even started answering.
  it.live("the turn timeout measures the provider's working time: a 429 with retry-after: 3 s under a 1.5 s turn timeout is waited out and the run completes", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const model = yield* adapterFor("anthropic-messages", loop, file, {}, { instance: "anthropic" as ProviderInstance })
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const t = yield* o.create("anthropic")
        const turnReplies = [
          json(429, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`, { "retry-after": "3" }),
          answer("done after the wait")
        ]
        const reply = (request: Received) =>
          request.url.endsWith("/count_tokens") ? countTokensReply((text) => counter.count(text))(request) : turnReplies.shift()!
        loop.enqueue(reply, reply, reply, reply)
        const run = yield* o.send(t, "hello")
        expect([run.status, run.failureCode ?? null]).toEqual(["completed", null])
        const retries = (yield* o.store.listEvents(t)).filter((e) => e.type === "run.retry_scheduled")
        expect(retries.map((e) => (e.payload as ThreadEventOf<"run.retry_scheduled">["payload"]).delayMs)).toEqual([3_000])
        expect(loop.requests.filter((r) => r.url === "/v1/messages").length).toBe(2)
      }).pipe(Effect.provide(Harness.makeLayer([model], counter, file, { turnTimeoutMillis: 1_500 })))
    }).pipe(Effect.provide(httpLayer), Effect.scoped), { timeout: 60_000 })
})
