/**
 * The API's boundary over real HTTP: auth (401/403/200), the body limit (413), schema errors (400 naming the field),
 * unknown ids and routes (404), commands that cannot run now (409), idempotency keys, paging, health, and the
 * OpenAPI document and offline docs page. Each asserts the status and the JSON body a client sees. On SQLite and
 * Postgres.
 */
import { Migrations } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Stream } from "effect"
import { adminToken, client, get, post, raw, readToken, serve } from "./helpers.js"

/** Two scripted providers; a held turn that ignores an interrupt is given up after 500 ms (default 30 s). */
const providers = () =>
  Harness.make([
    { name: "codex", window: 44_000, autoCompactThreshold: 42_000, inject: true },
    { name: "claude", window: 200_000, inject: false }
  ], { config: { interruptTimeoutMillis: 500 } })

/** The newest migration this build registers (`0012_…` is 12). */
const latestMigration = Math.max(...Object.keys(Migrations.migrations).map((k) => Number(k.slice(0, k.indexOf("_")))))

/** Creates a thread on codex over HTTP; returns its id. */
const createThread = Effect.gen(function*() {
  const created = yield* raw(post("/threads", { providerInstance: "codex", title: "t" }))
  expect(created.status).toBe(201)
  return created.body!.threadId as string
})

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("auth: 401 without or with a wrong token, 403 for the read-only token on a write, 200 otherwise; /healthz open", () =>
    Effect.gen(function*() {
      const none = yield* raw(get("/threads", null))
      expect([none.status, none.body]).toEqual([401, {
        _tag: "Unauthorized",
        reason: "no bearer token",
        message: "no bearer token; send \"Authorization: Bearer <token>\""
      }])
      const wrong = yield* raw(get("/threads", "not-the-token-0123456789"))
      expect([wrong.status, wrong.body?._tag, wrong.body?.reason]).toEqual([401, "Unauthorized", "unknown token"])
      expect(wrong.text).not.toContain("not-the-token")
      const basic = yield* raw(HttpClientRequest.get("/threads").pipe(HttpClientRequest.setHeader("authorization", `Basic ${adminToken}`)))
      expect([basic.status, basic.body?.reason]).toEqual([401, "the Authorization header is not a bearer token"])
      // A token that is a prefix of the real one, or the real one with a suffix, is refused too.
      expect((yield* raw(get("/threads", adminToken.slice(0, -1)))).status).toBe(401)
      expect((yield* raw(get("/threads", adminToken + "x"))).status).toBe(401)

      const readWrite = yield* raw(post("/threads", { providerInstance: "codex" }, readToken))
      expect([readWrite.status, readWrite.body]).toEqual([403, {
        _tag: "Forbidden",
        reason: "the read-only token may not POST; use the admin token",
        message: "the read-only token may not POST; use the admin token"
      }])
      // Nothing was written by the refused request.
      expect((yield* raw(get("/threads", readToken))).body).toEqual({ threads: [], nextCursor: null })
      expect((yield* raw(post("/threads", { providerInstance: "codex" }))).status).toBe(201)
      expect(((yield* raw(get("/threads", readToken))).body!.threads as Array<unknown>)).toHaveLength(1)

      expect(yield* raw(get("/healthz", null))).toMatchObject({ status: 200, body: { status: "ok" } })
      const ready = yield* raw(get("/readyz", null))
      expect(ready.status).toBe(200)
      expect(ready.body).toEqual({
        status: "ready",
        dialect: db === Harness.postgres ? "postgres" : "sqlite",
        migrations: { applied: latestMigration, latest: latestMigration }
      })
    }).pipe(Effect.provide(serve(providers()))))

  it.live("bad input: 413 over the body limit, 400 naming the field, invalid JSON and 415; nothing written", () =>
    Effect.gen(function*() {
      const threadId = yield* createThread
      const big = "a".repeat(5_000)
      const tooLarge = yield* raw(post(`/threads/${threadId}/messages`, { text: big }))
      expect([tooLarge.status, tooLarge.body]).toEqual([413, {
        _tag: "PayloadTooLarge",
        limitBytes: 4_096,
        message: "the request body exceeds the limit of 4096 bytes"
      }])
      // A body without a Content-Length (chunked) is refused whatever its size.
      const chunked = yield* raw(HttpClientRequest.post(`/threads/${threadId}/messages`).pipe(
        HttpClientRequest.bearerToken(adminToken),
        HttpClientRequest.bodyStream(Stream.make(new TextEncoder().encode(JSON.stringify({ text: "small" }))), { contentType: "application/json" })
      ))
      expect([chunked.status, chunked.body]).toEqual([411, {
        _tag: "LengthRequired",
        message: "a request body needs a Content-Length header (chunked bodies are not accepted)"
      }])

      const wrongType = yield* raw(post(`/threads/${threadId}/messages`, { text: 5 }))
      expect(wrongType.status).toBe(400)
      expect(wrongType.body?._tag).toBe("HttpApiDecodeError")
      expect((wrongType.body?.issues as Array<{ path: Array<string> }>).map((i) => i.path)).toEqual([["text"]])
      // The message is a sentence naming the field and why, not the schema's dump ("{ readonly text: { minLength(1) …").
      expect(wrongType.body?.message).toBe("the request does not match the API: text: Expected string, actual 5")
      // A query parameter in the wrong form: one issue naming it (not a second one for not being absent).
      const exponent = yield* raw(get(`/threads/${threadId}/items?afterSeq=1e3`))
      expect([exponent.status, exponent.body?._tag, (exponent.body?.issues as Array<{ path: Array<string> }>).map((i) => i.path)])
        .toEqual([400, "HttpApiDecodeError", [["afterSeq"]]])
      expect(exponent.body?.message).toMatch(/^the request does not match the API: afterSeq: /)
      expect(exponent.body?.message).not.toContain("Expected undefined")
      // An element of an optional list in the wrong form: one issue naming the element's field, not a second one
      // saying the whole list should be absent (new user r35).
      const badTool = yield* raw(post(`/threads/${threadId}/messages`, { text: "hi", tools: [{ name: "bad name!", description: "d", inputSchema: {} }] }))
      expect([badTool.status, (badTool.body?.issues as Array<{ path: Array<string> }>).map((i) => i.path)]).toEqual([400, [["tools", 0, "name"]]])
      expect(badTool.body?.message).toBe(
        "the request does not match the API: tools.0.name: a tool name is 1 to 64 characters of A-Z, a-z, 0-9, _ and -"
      )
      const empty = yield* raw(HttpClientRequest.post("/threads").pipe(HttpClientRequest.bodyText("null", "application/json"), HttpClientRequest.bearerToken(adminToken)))
      expect([empty.status, empty.body?._tag]).toEqual([400, "HttpApiDecodeError"])
      expect((empty.body?.message as string).length).toBeLessThan(300)
      expect(empty.body?.message).not.toContain("readonly")
      const typo = yield* raw(post(`/threads/${threadId}/messages`, { txt: "hi", text: "hi" }))
      expect([typo.status, (typo.body?.issues as Array<{ path: Array<string>; message: string }>).map((i) => [i.path, i.message])])
        .toEqual([400, [[["txt"], "is unexpected, expected: \"text\" | \"tools\" | \"commandId\""]]])
      const missing = yield* raw(post("/threads", { title: "no provider" }))
      expect((missing.body?.issues as Array<{ path: Array<string> }>).map((i) => i.path)).toEqual([["providerInstance"]])
      const badProvider = yield* raw(post("/threads", { providerInstance: "Not A Name!" }))
      expect([badProvider.status, (badProvider.body?.issues as Array<{ path: Array<string> }>)[0]!.path]).toEqual([400, ["providerInstance"]])
      const lone = yield* raw(post(`/threads/${threadId}/messages`, { text: "broken \ud800 surrogate" }))
      expect(lone.status).toBe(400)
      expect(lone.text).toContain("lone surrogate at index 7")
      // Whitespace only (the dashboard's Send refuses it; the API and `baton send` queued a run of it): 400 naming the
      // field, whichever whitespace it is made of (Commands.test: whitespace around a word is kept).
      for (const text of ["   \n\t", " ", "\r\n", "\u00a0\u2028\ufeff"]) {
        const blank = yield* raw(post(`/threads/${threadId}/messages`, { text }))
        expect([blank.status, blank.body?._tag, (blank.body?.issues as Array<{ path: Array<string> }>).map((i) => i.path)])
          .toEqual([400, "HttpApiDecodeError", [["text"]]])
        expect(blank.body?.message).toBe("the request does not match the API: text: the message is blank (only whitespace): write something to send")
      }
      // A cursor past the 32-bit seq column is refused before it reaches a query (it was a Postgres error: 500).
      const hugeSeq = yield* raw(get(`/threads/${threadId}/items?afterSeq=9007199254740991`))
      expect([hugeSeq.status, (hugeSeq.body?.issues as Array<{ path: Array<string> }>)[0]!.path]).toEqual([400, ["afterSeq"]])
      const hugeEventId = yield* raw(get(`/threads/${threadId}/events`).pipe(HttpClientRequest.setHeader("last-event-id", "2147483648")))
      expect([hugeEventId.status, hugeEventId.body?._tag]).toEqual([400, "InvalidRequest"])
      const badQuery = yield* raw(get(`/threads/${threadId}/items?limit=0`))
      expect([badQuery.status, (badQuery.body?.issues as Array<{ path: Array<string> }>)[0]!.path]).toEqual([400, ["limit"]])

      const notJson = yield* raw(HttpClientRequest.post(`/threads/${threadId}/messages`).pipe(
        HttpClientRequest.bearerToken(adminToken),
        HttpClientRequest.bodyText("{\"text\": ", "application/json")
      ))
      expect([notJson.status, notJson.body]).toEqual([400, {
        _tag: "InvalidRequest",
        reason: "the body is not valid JSON",
        message: "the body is not valid JSON"
      }])
      const deep = yield* raw(HttpClientRequest.post(`/threads/${threadId}/messages`).pipe(
        HttpClientRequest.bearerToken(adminToken),
        HttpClientRequest.bodyText("[".repeat(2_000) + "]".repeat(2_000), "application/json")
      ))
      expect([deep.status, deep.body?.reason]).toEqual([400, "the body nests 2000 levels deep; at most 32 are accepted"])
      const notUtf8 = yield* raw(HttpClientRequest.post(`/threads/${threadId}/messages`).pipe(
        HttpClientRequest.bearerToken(adminToken),
        HttpClientRequest.bodyUint8Array(new Uint8Array([...new TextEncoder().encode("{\"text\":\"a"), 0xff, 0xfe, ...new TextEncoder().encode("\"}")]), "application/json")
      ))
      expect([notUtf8.status, notUtf8.body?.reason]).toEqual([400, "the body is not valid UTF-8"])
      const form = yield* raw(HttpClientRequest.post(`/threads/${threadId}/messages`).pipe(
        HttpClientRequest.bearerToken(adminToken),
        HttpClientRequest.bodyText("text=hi", "application/x-www-form-urlencoded")
      ))
      expect([form.status, form.body?._tag]).toEqual([415, "UnsupportedMediaType"])

      // None of the refused requests queued a run.
      expect((yield* raw(get(`/threads/${threadId}/runs`))).body).toEqual({ runs: [], costs: [], nextAfterSeq: null })
    }).pipe(Effect.provide(serve(providers(), { maxBodyBytes: 4_096 }))))

  it.live("unknown ids and routes are 404 with a JSON body", () =>
    Effect.gen(function*() {
      const cases = [
        [get("/threads/thr_nope"), { _tag: "ThreadNotFound", threadId: "thr_nope", message: "thread thr_nope not found (GET /threads lists the threads)" }],
        [get("/runs/run_nope"), { _tag: "RunNotFound", runId: "run_nope", message: "run run_nope not found (list a thread's runs with GET /threads/{threadId}/runs)" }],
        [get("/items/itm_nope"), { _tag: "ItemNotFound", itemId: "itm_nope", message: "item itm_nope not found" }],
        [get("/handoffs/hnd_nope"), { _tag: "HandoffNotFound", handoffId: "hnd_nope", message: "handoff hnd_nope not found (list a thread's handoffs with GET /threads/{threadId}/handoffs)" }],
        [post("/threads/thr_nope/messages", { text: "hi" }), { _tag: "ThreadNotFound", threadId: "thr_nope", message: "thread thr_nope not found (GET /threads lists the threads)" }],
        [get("/threads/thr_nope/events"), { _tag: "ThreadNotFound", threadId: "thr_nope", message: "thread thr_nope not found (GET /threads lists the threads)" }],
        [get("/no/such/route?x=1"), { _tag: "RouteNotFound", method: "GET", path: "/no/such/route", message: "no endpoint GET /no/such/route (the API is described at /openapi.json and /docs)" }],
        [HttpClientRequest.del("/threads"), { _tag: "RouteNotFound", method: "DELETE", path: "/threads", message: "no endpoint DELETE /threads (the API is described at /openapi.json and /docs)" }]
      ] as const
      for (const [request, body] of cases) {
        const answer = yield* raw(request)
        expect([answer.status, answer.body]).toEqual([404, body])
      }
      // An id whose percent-encoding is not UTF-8 reaches no endpoint, though `/threads/{id}` is one: it was 404
      // "no endpoint GET /threads/%FF%FE" (b47srv), now 400 naming the path.
      const undecodable = yield* raw(get("/threads/%FF%FE"))
      expect([undecodable.status, undecodable.body]).toEqual([400, {
        _tag: "InvalidRequest",
        reason: "the path /threads/%FF%FE is not valid percent-encoded UTF-8; percent-encode each id's UTF-8 bytes",
        message: "the path /threads/%FF%FE is not valid percent-encoded UTF-8; percent-encode each id's UTF-8 bytes"
      }])
      // An unknown /offload operation of a thread that exists (found by the fuzz test: its body had no message).
      const created = yield* raw(post("/threads", { title: "t", providerInstance: "codex" }))
      const threadId = (created.body as { threadId: string }).threadId
      const unknownOp = yield* raw(get(`/threads/${threadId}/offload/op_nope`))
      expect([unknownOp.status, unknownOp.body]).toEqual([404, { _tag: "OffloadOperationNotFound", threadId, operationId: "op_nope", message: `no /offload operation op_nope on thread ${threadId}` }])
      // An operation id of 150 characters (the API takes up to 200) reaches the endpoint: the router's default limit
      // of 100 answered it RouteNotFound (review finding).
      const longOp = `op-${"x".repeat(147)}`
      const unknownLong = yield* raw(get(`/threads/${threadId}/offload/${longOp}`))
      expect([unknownLong.status, unknownLong.body]).toEqual([404, { _tag: "OffloadOperationNotFound", threadId, operationId: longOp, message: `no /offload operation ${longOp} on thread ${threadId}` }])
      const unknownOffload = yield* raw(get(`/threads/${threadId}/offloads/off_nope/archive`))
      expect([unknownOffload.status, unknownOffload.body]).toEqual([404, { _tag: "OffloadNotFound", threadId, offloadId: "off_nope", message: `no offload off_nope on thread ${threadId}` }])
    }).pipe(Effect.provide(serve(providers()))))

  it.live("a command that cannot run now is 409 with the reason and what to do; a message queues behind the running run", () => {
    const h = providers()
    return Effect.gen(function*() {
      const api = yield* client()
      const threadId = yield* createThread
      const noRun = yield* raw(post(`/threads/${threadId}/interrupt`, {}))
      expect([noRun.status, noRun.body]).toEqual([409, {
        _tag: "NoRunInProgress",
        threadId,
        message: `thread ${threadId} has no run queued or running; there is nothing to interrupt`
      }])

      const gate = yield* Deferred.make<void>()
      h.script.enqueue({ ...Harness.reply(20), hold: { afterItems: 1, gate } })
      const first = yield* raw(post(`/threads/${threadId}/messages`, { text: "long task" }))
      // The thread is idle: the run is claimed as it is queued.
      expect([first.status, first.body?.status, first.body?.runSeq]).toEqual([202, "starting", 1])
      const runId = first.body!.runId as string
      // Wait until the run is running (its first item streamed).
      for (let i = 0; i < 200; i++) {
        const view = yield* raw(get(`/runs/${runId}`))
        if (view.body?.run !== undefined && (view.body.run as { status: string }).status === "running") break
        yield* Effect.sleep(Duration.millis(10))
      }
      const compact = yield* raw(post(`/threads/${threadId}/compact`, {}))
      expect([compact.status, compact.body]).toEqual([409, {
        _tag: "RunInProgress",
        threadId,
        runId,
        message: `thread ${threadId} already has run ${runId} in progress; interrupt it or wait`
      }])
      const switched = yield* raw(post(`/threads/${threadId}/switch`, { providerInstance: "claude" }))
      expect([switched.status, switched.body?._tag]).toEqual([409, "RunInProgress"])
      // A second message is accepted at once and queued behind the running run.
      const second = yield* raw(post(`/threads/${threadId}/messages`, { text: "then this" }))
      expect([second.status, second.body?.status, second.body?.runSeq]).toEqual([202, "queued", 2])
      // Interrupting the thread's run in progress ends the running one; the queued one runs next.
      const interrupted = yield* raw(post(`/threads/${threadId}/interrupt`, {}))
      expect([interrupted.status, interrupted.body?.id, interrupted.body?.status, interrupted.body?.failureCode])
        .toEqual([200, runId, "interrupted", "interrupted_by_user"])
      yield* Deferred.succeed(gate, undefined)
      const secondRun = yield* api.runs.get({ path: { runId: second.body!.runId as never }, urlParams: { waitMs: 30_000 } })
      expect(secondRun.run.status).toBe("completed")
      expect(secondRun.items.map((i) => i.kind)).toEqual(["user_message", "assistant_message"])
    }).pipe(Effect.provide(serve(h)))
  })

  it.live("idempotency: a repeated key answers the first result; a reused key for another payload is 422, a header/body mismatch 400", () => {
    const h = providers()
    return Effect.gen(function*() {
      const threadId = yield* createThread
      const send = (text: string, key: string) =>
        raw(post(`/threads/${threadId}/messages`, { text }).pipe(HttpClientRequest.setHeader("idempotency-key", key)))
      const first = yield* send("once", "key-1")
      const again = yield* send("once", "key-1")
      expect([again.status, again.body?.runId]).toEqual([202, first.body?.runId])
      const byBody = yield* raw(post(`/threads/${threadId}/messages`, { text: "once", commandId: "key-1" }))
      expect(byBody.body?.runId).toBe(first.body?.runId)
      const other = yield* send("something else", "key-1")
      expect([other.status, other.body?._tag, other.body?.mismatch]).toEqual([422, "IdempotencyKeyReused", "payload"])
      const mismatch = yield* raw(post(`/threads/${threadId}/messages`, { text: "x", commandId: "key-2" }).pipe(
        HttpClientRequest.setHeader("idempotency-key", "key-3")
      ))
      expect([mismatch.status, mismatch.body?.reason]).toEqual([400, "Idempotency-Key and the body's commandId differ; send one, or the same in both"])
      const runs = yield* raw(get(`/threads/${threadId}/runs`))
      expect((runs.body!.runs as Array<unknown>)).toHaveLength(1)
      // A created thread is answered once too.
      const t1 = yield* raw(post("/threads", { providerInstance: "codex" }).pipe(HttpClientRequest.setHeader("idempotency-key", "create-1")))
      const t2 = yield* raw(post("/threads", { providerInstance: "codex" }).pipe(HttpClientRequest.setHeader("idempotency-key", "create-1")))
      expect(t2.body?.threadId).toBe(t1.body?.threadId)
    }).pipe(Effect.provide(serve(h)))
  })

  it.live("paging: threads by cursor, items by seq, one item's text by offset/limit", () => {
    const h = providers()
    return Effect.gen(function*() {
      const api = yield* client()
      const ids: Array<string> = []
      for (let i = 0; i < 5; i++) ids.push(yield* createThread)
      const page1 = yield* api.threads.list({ urlParams: { limit: 2 } })
      const page2 = yield* api.threads.list({ urlParams: { limit: 2, cursor: page1.nextCursor! } })
      const page3 = yield* api.threads.list({ urlParams: { limit: 2, cursor: page2.nextCursor! } })
      expect([...page1.threads, ...page2.threads, ...page3.threads].map((t) => t.id)).toEqual(ids)
      expect(page3.nextCursor).toBeNull()
      const badCursor = yield* raw(get("/threads?cursor=zzz"))
      expect([badCursor.status, badCursor.body?._tag]).toEqual([400, "InvalidRequest"])

      const threadId = ids[0]! as never
      const text = "0123456789".repeat(10)
      h.script.enqueue({ items: [Harness.produced("assistant_message", text)] })
      const accepted = yield* api.messages.send({ path: { threadId }, payload: { text: "hi" }, headers: {} })
      const run = yield* api.runs.get({ path: { runId: accepted.runId }, urlParams: { waitMs: 30_000 } })
      const answer = run.items.find((i) => i.kind === "assistant_message")!
      const items = yield* api.items.list({ path: { threadId }, urlParams: { afterSeq: 1, limit: 1 } })
      expect(items.items.map((i) => i.id)).toEqual([answer.id])
      expect(items.nextAfterSeq).toBeNull()
      const window = yield* api.items.get({ path: { itemId: answer.id }, urlParams: { offset: 95, limit: 3 } })
      expect([window.item.text, window.offset, window.totalChars, window.nextOffset]).toEqual(["567", 95, 100, 98])
      const tail = yield* api.items.get({ path: { itemId: answer.id }, urlParams: { offset: 98 } })
      expect([tail.item.text, tail.nextOffset]).toEqual(["89", null])
    }).pipe(Effect.provide(serve(h)))
  })

  it.live("the OpenAPI document and an API reference page that loads nothing from another host", () =>
    Effect.gen(function*() {
      const spec = yield* raw(get("/openapi.json", null))
      expect(spec.status).toBe(200)
      const paths = Object.keys(spec.body!.paths as object).sort()
      expect(paths).toEqual([
        "/events",
        "/handoffs/{handoffId}",
        "/handoffs/{handoffId}/item-ids",
        "/healthz",
        "/items/{itemId}",
        "/readyz",
        "/runs/{runId}",
        "/session",
        "/threads",
        "/threads/{threadId}",
        "/threads/{threadId}/compact",
        "/threads/{threadId}/events",
        "/threads/{threadId}/fork",
        "/threads/{threadId}/handoff-summaries",
        "/threads/{threadId}/handoffs",
        "/threads/{threadId}/interrupt",
        "/threads/{threadId}/items",
        "/threads/{threadId}/merge",
        "/threads/{threadId}/messages",
        "/threads/{threadId}/offload",
        "/threads/{threadId}/offload/undo",
        "/threads/{threadId}/offload/{operationId}",
        "/threads/{threadId}/offload/{operationId}/cancel",
        "/threads/{threadId}/offloads/{offloadId}/archive",
        "/threads/{threadId}/runs",
        "/threads/{threadId}/runs/{runId}/tool-results",
        "/threads/{threadId}/switch",
        "/threads/{threadId}/timeline",
        "/threads/{threadId}/tool-result-offload",
        "/threads/{threadId}/tool-result-offload/control",
        "/threads/{threadId}/tool-result-offload/undo"
      ])
      const docs = yield* HttpClient.get("/docs")
      const html = yield* docs.text
      expect(docs.status).toBe(200)
      expect(html).toContain("<title>Baton</title>")
      // No script or stylesheet from a CDN: the page works offline.
      expect(/<script[^>]+src=["']https?:/.test(html)).toBe(false)
      expect(/<link[^>]+href=["']https?:/.test(html)).toBe(false)
      // The Scalar script is inlined whole (megabytes), not fetched.
      expect(html.length).toBeGreaterThan(1_000_000)
    }).pipe(Effect.provide(serve(providers()))))
})
