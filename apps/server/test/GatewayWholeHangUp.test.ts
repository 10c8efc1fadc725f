/**
 * An agent that hangs up while its whole (non-streamed) answer is still on its way: the run is `interrupted`
 * (`interrupted_by_user`), or `process_stopped` when the shutdown's deadline cut it, as a streamed answer's is. Found
 * attacking the gateway's restart story (branch b44gw): the handler, interrupted while it read the upstream's body,
 * never recorded an outcome, so the run stayed `running` (the dashboard showed it in flight) until the next start
 * said `process_restarted`; on a switched request (recorded before it is forwarded) even a hang-up before the
 * upstream's head did. A pass-through request its agent hung up on before the upstream's head had no run at all (the
 * upstream had it): it is recorded with that outcome too, so every request Baton forwarded has its run.
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Logger } from "effect"
import * as ServerShutdown from "../src/ServerShutdown.js"
import { adminToken, client } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

const whole = JSON.stringify({
  id: "msg_1",
  type: "message",
  role: "assistant",
  model: "m",
  content: [{ type: "text", text: "The complete answer is forty-two." }],
  stop_reason: "end_turn",
  stop_sequence: null,
  usage: { input_tokens: 10, output_tokens: 5 }
})

const cases = [
  { label: "pass-through", path: "/v1/messages", body: { model: "m-x", max_tokens: 10, messages: [{ role: "user", content: "first" }] } },
  { label: "switched", path: "/v1/chat/completions", body: { model: "m-x", messages: [{ role: "user", content: "first" }] } }
]

const hangUp = "the agent closed the connection before the answer ended"
const stopped = "the server stopped before the answer ended (its shutdown closes the connections still open after limits.shutdownTimeoutMs)"

describe("Gateway, an agent that hangs up on a whole answer", () => {
  for (const c of cases) {
    for (const when of ["after the head", "before the head", "cut by the shutdown"] as const) {
      it.live(`${c.label} ${c.path}: ${when}`, () => {
        const logs: Array<string> = []
        const capture = Logger.replace(Logger.defaultLogger, Logger.make(({ cause, message }) => void logs.push(`${String(message)} ${cause}`)))
        return Effect.scoped(Effect.gen(function*() {
          const upstream = yield* ModelApi.start
          const settings = yield* settingsFor([instance("up", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
            gateway: { routes: [{ model: "m-*", provider: "up" }] }
          })
          yield* Effect.gen(function*() {
            const never = new Promise<void>(() => {})
            upstream.enqueue(
              when === "before the head"
                ? { status: 200, contentType: "application/json", body: whole, hold: never }
                : { status: 200, contentType: "application/json", body: whole, rest: { at: 10, hold: never } }
            )
            const asking = yield* Effect.fork(HttpClient.execute(
              HttpClientRequest.post(c.path).pipe(
                HttpClientRequest.setHeaders({ "x-api-key": adminToken, authorization: `Bearer ${adminToken}`, "anthropic-version": "2023-06-01" }),
                HttpClientRequest.bodyText(JSON.stringify(c.body), "application/json")
              )
            ))
            const api = yield* client()
            const threadOf = Effect.map(
              Effect.repeat(api.threads.list({ urlParams: {} }).pipe(Effect.delay("20 millis")), { until: (p) => p.threads.length === 1, times: 150 }),
              (p) => p.threads[0]?.id ?? "no thread"
            )
            // The upstream has the request (and, after the head, the request is recorded).
            yield* Effect.repeat(Effect.sync(() => upstream.requests.length).pipe(Effect.delay("20 millis")), { until: (n) => n === 1 })
            // A pass-through request is recorded once its upstream's head came; a switched one before it is forwarded.
            const recorded = c.label === "switched" || when !== "before the head"
            if (recorded) {
              const threadId = yield* threadOf
              yield* Effect.repeat(api.runs.list({ path: { threadId }, urlParams: {} }), { until: (p) => p.runs.length === 1 })
            }
            if (when === "cut by the shutdown") yield* Deferred.succeed((yield* ServerShutdown.ServerShutdown).cutting, undefined)
            // The agent's connection closes before the answer came (its hang-up, or the shutdown's close at its deadline).
            yield* Fiber.interrupt(asking)
            const threadId = yield* threadOf
            const run = (yield* Effect.repeat(api.runs.list({ path: { threadId }, urlParams: {} }).pipe(Effect.delay("20 millis")), {
              until: (p) => p.runs[0]!.status !== "running",
              times: 150
            })).runs[0]!
            // The request's prompt is on its run, however far it got.
            expect(run.prompt).toBe("first")
            // Before the fix: still ["running", null, null] (pass-through before the head: no run at all).
            expect([run.status, run.failureCode, run.failureReason]).toEqual(
              when === "cut by the shutdown" ? ["interrupted", "process_stopped", stopped] : ["interrupted", "interrupted_by_user", hangUp]
            )
            // A hang-up is no failure of the server's: nothing logged as one (it was, "POST … failed unexpectedly"
            // with the platform's 499 answer as its cause, an error line for every agent that hung up).
            expect(logs.filter((l) => l.includes("failed unexpectedly"))).toEqual([])
          }).pipe(Effect.provide(serveSettings(settings)))
        })).pipe(Effect.provide(capture))
      }, { timeout: 60_000 })
    }
  }
})
