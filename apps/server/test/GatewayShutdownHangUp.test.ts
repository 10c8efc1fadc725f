/**
 * A gateway answer that stops before its end once the server's shutdown has begun (`EventStream.Stopping`, the signal
 * the live event streams end on): the shutdown closes the connections still open after `limits.shutdownTimeoutMs`,
 * so the run ends `interrupted` with `process_stopped`, as the run driver records a turn stopped by a shutdown; before
 * it, the agent's hang-up (`interrupted_by_user`). Found by stopping `baton serve` (SIGTERM) with an answer streaming
 * past the deadline (branch b43gw): the run said "the agent closed the connection before the answer ended" though the
 * agent was still reading (or, when the close cut the upstream's stream first, that the upstream had failed). On the
 * pass-through path (`/v1/messages` to an `anthropic-messages` instance) and a switched one (`/v1/chat/completions` to
 * the same instance).
 *
 * Only once the deadline has come (`ServerShutdown.cutting`, completed as the listener closes the connections still
 * open): an agent that hangs up during the grace period before it hung up on its own (`interrupted_by_user`). Found
 * by stopping `baton serve` with an agent that hung up a moment after the SIGTERM (branch b44gw): its run said the
 * server had stopped the answer (`process_stopped`), because the shutdown's start was taken for its cut.
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Stream } from "effect"
import * as EventStream from "../src/EventStream.js"
import * as ServerShutdown from "../src/ServerShutdown.js"
import { adminToken, client } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

const usage = { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }

const cases = [
  { path: "/v1/messages?beta=true", body: { model: "m-x", max_tokens: 10, stream: true, messages: [{ role: "user", content: "first" }] } },
  { path: "/v1/chat/completions", body: { model: "m-x", stream: true, messages: [{ role: "user", content: "first" }] } }
]

describe("Gateway, an answer stopped by the server's shutdown", () => {
  for (const c of cases) {
    for (const when of ["cut", "grace", "serving"] as const) {
      const title = when === "cut"
        ? "cut at the shutdown's deadline: process_stopped"
        : when === "grace"
        ? "stopped by the agent during the shutdown's grace period: the agent's hang-up"
        : "stopped by the agent before any shutdown: the agent's hang-up"
      it.live(`${c.path}: the answer is ${title}`, () =>
        Effect.scoped(Effect.gen(function*() {
          const upstream = yield* ModelApi.start
          const settings = yield* settingsFor([instance("up", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
            gateway: { routes: [{ model: "m-*", provider: "up" }] }
          })
          yield* Effect.gen(function*() {
            // The answer's head and first events, then nothing more until the test ends.
            const whole = ModelApi.answer("anthropic-messages", "The complete answer is forty-two.", usage)
            const never = new Promise<void>(() => {})
            upstream.enqueue({ ...whole, rest: { at: whole.body.indexOf("forty-two"), hold: never } })
            const response = yield* HttpClient.execute(
              HttpClientRequest.post(c.path).pipe(
                HttpClientRequest.setHeaders({ "x-api-key": adminToken, authorization: `Bearer ${adminToken}`, "anthropic-version": "2023-06-01" }),
                HttpClientRequest.bodyText(JSON.stringify(c.body), "application/json")
              )
            )
            expect(response.status).toBe(200)
            const first = yield* Deferred.make<void>()
            const reading = yield* Effect.fork(Stream.runForEach(response.stream, () => Deferred.succeed(first, undefined)))
            yield* Deferred.await(first)
            const api = yield* client()
            const threadId = (yield* Effect.repeat(api.threads.list({ urlParams: {} }), { until: (p) => p.threads.length === 1 })).threads[0]!.id
            yield* Effect.repeat(api.runs.list({ path: { threadId }, urlParams: {} }), { until: (p) => p.runs.length === 1 })
            // The shutdown begins (the live event streams end on it); at its deadline the listener cuts the connections.
            if (when !== "serving") yield* Deferred.succeed(yield* EventStream.Stopping, undefined)
            if (when === "cut") yield* Deferred.succeed((yield* ServerShutdown.ServerShutdown).cutting, undefined)
            // The connection closes before the answer's end (the shutdown's close at its deadline, or the agent).
            yield* Fiber.interrupt(reading)
            const runs = yield* Effect.repeat(api.runs.list({ path: { threadId }, urlParams: {} }), {
              until: (p) => p.runs[0]!.status !== "running"
            })
            const run = runs.runs[0]!
            // Before b43gw: ["interrupted", "interrupted_by_user", "the agent closed the connection …"] either way;
            // before b44gw, "grace" was ["interrupted", "process_stopped", …] as "cut" is.
            expect([run.status, run.failureCode, run.failureReason]).toEqual(when === "cut"
              ? ["interrupted", "process_stopped", "the server stopped before the answer ended (its shutdown closes the connections still open after limits.shutdownTimeoutMs)"]
              : ["interrupted", "interrupted_by_user", "the agent closed the connection before the answer ended"])
          }).pipe(Effect.provide(serveSettings(settings)))
        })), { timeout: 60_000 })
    }
  }
})
