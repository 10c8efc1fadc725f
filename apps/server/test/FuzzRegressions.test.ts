/**
 * The smallest inputs with which the fuzz test (`Fuzz.test.ts`) found a 5xx, each kept as a regression test, on
 * SQLite and Postgres. Each asserts the status and the error a client sees, and that nothing was written.
 */
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { HttpClientRequest } from "@effect/platform"
import { Data, Effect } from "effect"
import { adminToken, get, post, raw, serve } from "./helpers.js"

/** A request that got no answer within the test's limit (a hang). */
class NoAnswer extends Data.TaggedError("NoAnswer")<{ readonly contentType: string }> {}

const providers = () => Harness.make([{ name: "codex", window: 44_000, inject: true }])
const cursorOf = (text: string) => Buffer.from(text, "utf8").toString("base64url")

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("an empty body declared multipart/form-data (or another form that is not JSON) is 415 at once, not an answer that never comes (fuzz seed 1230212957: a fork hung)", () =>
    Effect.gen(function*() {
      const created = yield* raw(post("/threads", { providerInstance: "codex", title: "t" }))
      const threadId = created.body!.threadId as string
      for (const contentType of ["multipart/form-data; boundary=x", "application/x-www-form-urlencoded", "text/plain"]) {
        const forked = yield* raw(HttpClientRequest.post(`/threads/${threadId}/fork`).pipe(
          HttpClientRequest.bodyText("", contentType),
          HttpClientRequest.bearerToken(adminToken)
        )).pipe(Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => new NoAnswer({ contentType }) }))
        expect([contentType, forked.status, forked.body?._tag]).toEqual([contentType, 415, "UnsupportedMediaType"])
      }
      // An empty body with no Content-Type is still read as no body (fork needs an object: the schema's 400, as
      // before); a JSON body forks.
      const plain = yield* raw(HttpClientRequest.post(`/threads/${threadId}/fork`).pipe(HttpClientRequest.bearerToken(adminToken)))
      expect([plain.status, plain.body?._tag]).toEqual([400, "HttpApiDecodeError"])
      expect((yield* raw(post(`/threads/${threadId}/fork`, {}))).status).toBe(201)
      // Nothing was written by the refused ones: one fork.
      const listed = yield* raw(get("/threads"))
      expect((listed.body!.threads as Array<unknown>).length).toBe(2)
    }).pipe(Effect.provide(serve(providers()))))

  it.live("a schema error quotes at most 1,000 characters of the bad value (a 300,000-character title came back whole in the 400)", () =>
    Effect.gen(function*() {
      const titled = yield* raw(post("/threads", { providerInstance: "codex", title: "x".repeat(300_000) }))
      expect(titled.status).toBe(400)
      expect(titled.body?._tag).toBe("HttpApiDecodeError")
      const issues = titled.body?.issues as Array<{ readonly path: unknown; readonly message: string }>
      expect(issues.length).toBeGreaterThan(0)
      for (const issue of issues) {
        expect(issue.path).toEqual(["title"])
        expect(issue.message.length).toBeLessThan(1_100)
      }
      expect(issues.some((i) => /… \(\d+ characters\)$/.test(i.message))).toBe(true)
      expect((titled.body?.message as string).length).toBeLessThan(1_100)
      // Nothing was written.
      const listed = yield* raw(get("/threads"))
      expect((listed.body!.threads as Array<{ readonly title: string }>).filter((t) => t.title.startsWith("xxx"))).toEqual([])
    }).pipe(Effect.provide(serve(providers()))))

  it.live("the clipped quote of a schema error never ends in half a surrogate pair (a lone \\ud83d in the 400's JSON)", () =>
    Effect.gen(function*() {
      // Whichever code unit the 1,000-character clip falls on, the body stays well-formed Unicode.
      for (const lead of ["", "a"]) {
        const refused = yield* raw(post("/threads", { providerInstance: "codex", title: [`${lead}${"😀".repeat(1_000)}`] }))
        expect(refused.status).toBe(400)
        expect(refused.text).not.toMatch(/\\ud[89ab][0-9a-f]{2}|\\ud[c-f][0-9a-f]{2}/i)
        const issues = refused.body?.issues as Array<{ readonly message: string }>
        expect(issues.some((i) => /😀… \(\d+ characters\)$/.test(i.message))).toBe(true)
      }
    }).pipe(Effect.provide(serve(providers()))))

  it.live("a NUL character (U+0000) in a prompt, a title or a thread cursor is 400 naming it, not a 500 from Postgres", () =>
    Effect.gen(function*() {
      const created = yield* raw(post("/threads", { providerInstance: "codex", title: "t" }))
      expect(created.status).toBe(201)
      const threadId = created.body!.threadId as string

      // Postgres cannot store U+0000 in text (22021): the message used to fail in runs.insert with a 500.
      const sent = yield* raw(post(`/threads/${threadId}/messages`, { text: "\u0000" }))
      expect(sent.status).toBe(400)
      expect(sent.body?._tag).toBe("HttpApiDecodeError")
      expect(sent.body?.issues).toEqual([expect.objectContaining({
        path: ["text"],
        message: "the prompt contains a NUL character (U+0000) at index 0, which cannot be stored"
      })])
      const titled = yield* raw(post("/threads", { providerInstance: "codex", title: "a\u0000" }))
      expect([titled.status, (titled.body?.issues as Array<{ path: unknown }>)[0]?.path]).toEqual([400, ["title"]])
      const forked = yield* raw(post(`/threads/${threadId}/fork`, { title: "\u0000" }))
      expect([forked.status, (forked.body?.issues as Array<{ path: unknown }>)[0]?.path]).toEqual([400, ["title"]])

      // A cursor is opaque, but one this server did not issue must be refused, not sent to the database.
      const listed = yield* raw(get(`/threads?cursor=${cursorOf(`["x","\\u0000"]`)}`))
      expect([listed.status, listed.body?._tag, listed.body?.reason]).toEqual([
        400,
        "InvalidRequest",
        "cursor: not a thread cursor; pass a nextCursor this server returned"
      ])

      // Nothing of the refused requests was written: one thread, no run.
      const threads = yield* raw(get("/threads"))
      expect((threads.body!.threads as Array<unknown>).length).toBe(1)
      expect((yield* raw(get(`/threads/${threadId}/runs`))).body).toEqual({ runs: [], costs: [], nextAfterSeq: null })
    }).pipe(Effect.provide(serve(providers()))))

  it.live("an id with a NUL (%00 in a path, or an interrupt's runId) is 400, not a 500 from Postgres; nothing written", () =>
    Effect.gen(function*() {
      const created = yield* raw(post("/threads", { providerInstance: "codex", title: "t" }))
      const threadId = created.body!.threadId as string
      // The fuzz test's input: POST /threads/<id with %00>/messages failed in ThreadService.queueRun with a 500.
      const sent = yield* raw(post("/threads/a%00/messages", { text: "hello" }))
      expect([sent.status, sent.body?._tag]).toEqual([400, "HttpApiDecodeError"])
      expect(sent.body?.issues).toEqual([expect.objectContaining({ path: ["threadId"], message: "an id never contains a NUL character (U+0000)" })])
      for (const path of ["/threads/%00", "/threads/%00/items", "/runs/%00", "/items/%00", "/handoffs/%00"]) {
        const read = yield* raw(get(path))
        expect([path, read.status, read.body?._tag]).toEqual([path, 400, "HttpApiDecodeError"])
      }
      const interrupted = yield* raw(post(`/threads/${threadId}/interrupt`, { runId: "run\u0000" }))
      expect([interrupted.status, (interrupted.body?.issues as Array<{ path: unknown }>)[0]?.path]).toEqual([400, ["runId"]])
      expect((yield* raw(get("/threads"))).body!.threads as Array<unknown>).toHaveLength(1)
      expect((yield* raw(get(`/threads/${threadId}/runs`))).body).toEqual({ runs: [], costs: [], nextAfterSeq: null })
    }).pipe(Effect.provide(serve(providers()))))
})
