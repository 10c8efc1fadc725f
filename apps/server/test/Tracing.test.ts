/**
 * The server's `tracing` setting (`Server.withTracing`, applied by `Server.run`): off (the default) no fiber of the
 * server opens a span, neither a request's (`http.server`, the handlers' service calls, `sql.execute`) nor the run
 * driver's that runs the turn (`TurnExecution.run`, the provider turn); on, they all reach the installed tracer. The
 * gateway's requests open none either way (docs/server.md, `tracing`): its own `Effect.withTracerEnabled(false)`.
 */
import { RunDriver } from "@baton/orchestration"
import { Server } from "@baton/server"
import { Harness } from "@baton/testing"
import { HttpClientRequest } from "@effect/platform"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Tracer } from "effect"
import { adminToken, client, get, post, raw, serve } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

/** A tracer noting the name of every span it is asked to open. */
const recording = () => {
  const names: Array<string> = []
  const tracer = Tracer.make({
    span: (name, parent, context, links, startTime, kind) => {
      names.push(name)
      return {
        _tag: "Span", name, spanId: "s", traceId: "t", parent, context, status: { _tag: "Started", startTime },
        attributes: new Map(), links: [...links], sampled: true, kind,
        end: () => {}, attribute: () => {}, event: () => {}, addLinks: () => {}
      }
    },
    context: (f) => f()
  })
  return { names, tracer }
}

/** One turn over HTTP (create, send, wait for the run's end, the driver idle); the run's final status. */
const turn = (h: Harness.Harness) =>
  Effect.gen(function*() {
    const driver = yield* RunDriver.RunDriver
    const created = yield* raw(post("/threads", { providerInstance: "codex" }))
    const threadId = created.body!.threadId as string
    h.script.enqueue(Harness.reply(20))
    const sent = yield* raw(post(`/threads/${threadId}/messages`, { text: "hello" }).pipe(HttpClientRequest.setHeader("idempotency-key", "k1")))
    expect(sent.status).toBe(202)
    const waited = yield* raw(get(`/runs/${sent.body!.runId as string}?waitMs=60000`))
    while (driver.working().length > 0 || driver.inFlight().length > 0) yield* Effect.sleep(Duration.millis(2))
    return (waited.body!.run as { status: string }).status
  })

describe.each(Harness.dialects.slice(0, 1))("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("tracing off (the default): a whole turn through the API and the run driver opens no span", () => {
    const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }])
    const { names, tracer } = recording()
    return Effect.gen(function*() {
      expect(yield* turn(h)).toBe("completed")
      expect(names).toEqual([])
    }).pipe(Effect.provide(serve(h)), Effect.withTracer(tracer), Server.withTracing({}))
  })

  it.live("tracing on: the requests', the handlers', the statements' and the run driver's spans reach the tracer", () => {
    const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }])
    const { names, tracer } = recording()
    return Effect.gen(function*() {
      expect(yield* turn(h)).toBe("completed")
      const seen = new Set(names)
      for (const name of ["http.server POST", "http.server GET", "ThreadService.createThread", "ThreadService.queueRun", "TurnExecution.run", "ThreadQuery.run", "sql.execute"]) {
        expect(seen, name).toContain(name)
      }
    }).pipe(Effect.provide(serve(h)), Effect.withTracer(tracer), Server.withTracing({ tracing: true }))
  })
})

describe("the gateway's requests", () => {
  /** One streamed Messages request through the gateway to a loopback upstream, under `tracing`; the span names. */
  const gatewayRequest = (tracing: boolean) =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
      })
      const { names, tracer } = recording()
      yield* Effect.gen(function*() {
        upstream.enqueue(ModelApi.answer("anthropic-messages", "one", { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }))
        const response = yield* raw(HttpClientRequest.post("/v1/messages").pipe(
          HttpClientRequest.setHeaders({ "anthropic-version": "2023-06-01", "x-api-key": adminToken }),
          HttpClientRequest.bodyText(JSON.stringify({ model: "claude-x", max_tokens: 10, stream: true, messages: [{ role: "user", content: "hi" }] }), "application/json")
        ))
        expect(response.status).toBe(200)
        expect(response.text).toContain("one")
        // The record runs beside the answer: wait until its run has ended.
        const api = yield* client()
        for (let i = 0; i < 500; i++) {
          const threads = (yield* api.threads.list({ urlParams: {} })).threads
          const runs = threads.length === 0 ? [] : (yield* api.runs.list({ path: { threadId: threads[0]!.id }, urlParams: {} })).runs
          if (runs.length > 0 && runs.every((r) => r.status === "completed")) break
          yield* Effect.sleep(Duration.millis(5))
        }
      }).pipe(Effect.provide(serveSettings(settings)), Effect.withTracer(tracer), Server.withTracing({ tracing }))
      return names
    }))

  it.live("tracing off: a request and its record open no span", () =>
    Effect.map(gatewayRequest(false), (names) => expect(names).toEqual([])))

  // With tracing on, the server's own spans reach the tracer (its recovery at start, the request's `http.server`, the
  // API's reads) but the gateway's work opens none: it was measured as about a tenth of a record's time, for spans
  // no one asked about (removing the gateway's `withTracerEnabled(false)` made `GatewayThreads.begin`, `ItemLog.stage`
  // and the record's statements appear here).
  it.live("tracing on: the gateway's record opens no span of its own", () =>
    Effect.map(gatewayRequest(true), (names) => {
      expect(names).toContain("http.server POST")
      expect(names.filter((n) => /^(Gateway|ItemLog|ThreadStore|UnitOfWork|TurnStream)/.test(n))).toEqual([])
    }))
})
