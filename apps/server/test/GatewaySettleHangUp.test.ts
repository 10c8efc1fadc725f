/**
 * An agent that hangs up while the gateway records its whole answer's outcome (the answer came, the request's record
 * is still being written: the database busy): the run still gets an outcome. Found by review r44 attacking branch
 * b44gw: `settle` marked the outcome given before it was written, so the hang-up's interruption cut the write and
 * the hang-up recorded nothing either; the run stayed `running` until the next start (`process_restarted`).
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Database } from "@baton/persistence"
import { Context, Effect, Fiber, Layer } from "effect"
import * as ChildProcess from "node:child_process"
import { adminToken, client } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

const whole = JSON.stringify({
  id: "msg_1",
  type: "message",
  role: "assistant",
  model: "m",
  content: [{ type: "text", text: "forty-two" }],
  stop_reason: "end_turn",
  stop_sequence: null,
  usage: { input_tokens: 10, output_tokens: 5 }
})

/**
 * Holds the `runs` table against writes (reads go on) from another session (`psql` on `url`, its commands on stdin): a
 * busy database. Succeeds once the lock is held, with an effect that releases it (`COMMIT`) and waits for the session
 * to end. The lock is held until then, however slow the machine: a lock for a fixed time (1.5 s before) could end
 * before the hang-up on a loaded machine, and the outcome was then written before it (`completed`).
 */
const lockRuns = (url: string) =>
  Effect.async<Effect.Effect<void>>((resume) => {
    const child = ChildProcess.spawn("psql", [url, "-q"], { stdio: ["pipe", "pipe", "inherit"] })
    const exited = new Promise<void>((done) => void child.on("exit", () => done()))
    const release = Effect.promise(() => {
      child.stdin.end("COMMIT;\n")
      return exited
    })
    child.stdout.on("data", (d) => String(d).includes("locked") && resume(Effect.succeed(release)))
    child.stdin.write("BEGIN;\nLOCK TABLE runs IN EXCLUSIVE MODE;\nSELECT 'locked';\n")
  })

describe("Gateway, a hang-up while a whole answer's outcome is recorded", () => {
  it.live("the run ends interrupted, not running", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("up", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "m-*", provider: "up" }] }
      })
      const url = Context.get(yield* Layer.build(Database.layerPgSchema()), Database.PgSchemaUrl)
      yield* Effect.gen(function*() {
        const released = yield* lockRuns(url)
        // The head at once (the request's record begins: it waits for the lock), the rest of the answer a moment later.
        upstream.enqueue({ status: 200, contentType: "application/json", body: whole, rest: { at: 10, hold: new Promise((ok) => setTimeout(ok, 200)) } })
        const asking = yield* Effect.fork(HttpClient.execute(
          HttpClientRequest.post("/v1/messages").pipe(
            HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01" }),
            HttpClientRequest.bodyText(JSON.stringify({ model: "m-x", max_tokens: 10, messages: [{ role: "user", content: "first" }] }), "application/json")
          )
        ))
        // The upstream answered whole; the handler waits for the request's record (the write lock is held).
        yield* Effect.repeat(Effect.sync(() => upstream.requests.length).pipe(Effect.delay("20 millis")), { until: (n) => n === 1 })
        yield* Effect.sleep("300 millis")
        yield* Fiber.interrupt(asking)
        yield* released
        const api = yield* client()
        const threads = yield* Effect.repeat(api.threads.list({ urlParams: {} }).pipe(Effect.delay("20 millis")), { until: (p) => p.threads.length === 1, times: 200 })
        const threadId = threads.threads[0]!.id
        const runs = yield* Effect.repeat(api.runs.list({ path: { threadId }, urlParams: {} }).pipe(Effect.delay("50 millis")), {
          until: (p) => p.runs.length === 1 && p.runs[0]!.status !== "running",
          times: 60
        })
        // Before the fix: ["running", null] (nothing recorded its outcome).
        expect([runs.runs[0]!.status, runs.runs[0]!.failureCode]).toEqual(["interrupted", "interrupted_by_user"])
      }).pipe(Effect.provide(serveSettings({ ...settings, database: { _tag: "postgres", url } })))
    })), { timeout: 60_000 })

  it.live("switched (recorded before it is forwarded): the run ends, not running", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("up", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "m-*", provider: "up" }] }
      })
      const url = Context.get(yield* Layer.build(Database.layerPgSchema()), Database.PgSchemaUrl)
      yield* Effect.gen(function*() {
        let open = () => {}
        upstream.enqueue({ status: 200, contentType: "application/json", body: whole, hold: new Promise<void>((ok) => (open = ok)) })
        const asking = yield* Effect.fork(HttpClient.execute(
          HttpClientRequest.post("/v1/chat/completions").pipe(
            HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}` }),
            HttpClientRequest.bodyText(JSON.stringify({ model: "m-x", messages: [{ role: "user", content: "first" }] }), "application/json")
          )
        ))
        const api = yield* client()
        const threads = yield* Effect.repeat(api.threads.list({ urlParams: {} }).pipe(Effect.delay("20 millis")), { until: (p) => p.threads.length === 1, times: 200 })
        const threadId = threads.threads[0]!.id
        yield* Effect.repeat(api.runs.list({ path: { threadId }, urlParams: {} }).pipe(Effect.delay("20 millis")), { until: (p) => p.runs.length === 1, times: 200 })
        // The run is recorded; its outcome's write will wait for the lock. The upstream answers whole.
        const released = yield* lockRuns(url)
        open()
        yield* Effect.sleep("400 millis")
        yield* Fiber.interrupt(asking)
        yield* released
        const runs = yield* Effect.repeat(api.runs.list({ path: { threadId }, urlParams: {} }).pipe(Effect.delay("50 millis")), {
          until: (p) => p.runs[0]!.status !== "running",
          times: 60
        })
        // Before the fix: "running" (the hang-up cut the outcome's write, and recorded nothing itself).
        expect(runs.runs[0]!.status).not.toBe("running")
      }).pipe(Effect.provide(serveSettings({ ...settings, database: { _tag: "postgres", url } })))
    })), { timeout: 60_000 })
})
