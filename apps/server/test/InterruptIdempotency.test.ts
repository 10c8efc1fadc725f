/**
 * `POST /threads/{id}/interrupt` with an idempotency key, over real HTTP: a retry with the same key answers the first
 * interrupt's run and interrupts nothing else (before, it interrupted the run queued behind: a client retrying after a
 * timeout stopped two runs); a key another command used, or the same command with another payload, is 422
 * `IdempotencyKeyReused` (draft-ietf-httpapi-idempotency-key-header, "Error Scenarios"). On SQLite and Postgres.
 */
import { Harness } from "@baton/testing"
import { HttpClientRequest } from "@effect/platform"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect } from "effect"
import { client, get, post, raw, serve } from "./helpers.js"

const providers = () =>
  Harness.make([{ name: "codex", window: 44_000, autoCompactThreshold: 42_000, inject: true }], {
    config: { interruptTimeoutMillis: 500 }
  })

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("a retried interrupt answers the first one's run and leaves the queued run alone; another command's key is 422 IdempotencyKeyReused", () => {
    const h = providers()
    return Effect.gen(function*() {
      const api = yield* client()
      const created = yield* raw(post("/threads", { providerInstance: "codex" }))
      const threadId = created.body!.threadId as string
      const gate = yield* Deferred.make<void>()
      h.script.enqueue({ ...Harness.reply(20), hold: { afterItems: 1, gate } })
      const first = yield* raw(post(`/threads/${threadId}/messages`, { text: "long task" }).pipe(
        HttpClientRequest.setHeader("idempotency-key", "send-1")
      ))
      const runId = first.body!.runId as string
      for (let i = 0; i < 200; i++) {
        const view = yield* raw(get(`/runs/${runId}`))
        if ((view.body?.run as { status: string } | undefined)?.status === "running") break
        yield* Effect.sleep(Duration.millis(10))
      }
      const second = yield* raw(post(`/threads/${threadId}/messages`, { text: "then this" }))
      expect([second.status, second.body?.status]).toEqual([202, "queued"])

      // The send's key reused for an interrupt: another command, refused; nothing is interrupted.
      const reused = yield* raw(post(`/threads/${threadId}/interrupt`, {}).pipe(HttpClientRequest.setHeader("idempotency-key", "send-1")))
      expect([reused.status, reused.body?._tag, reused.body?.mismatch, reused.body?.message]).toEqual([
        422,
        "IdempotencyKeyReused",
        "command",
        `command id send-1 was already used by SendMessage on thread ${threadId}; send InterruptRun with a new command id`
      ])
      const stillRunning = yield* raw(get(`/runs/${runId}`))
      expect((stillRunning.body?.run as { status: string }).status).toBe("running")

      const interrupt = () => raw(post(`/threads/${threadId}/interrupt`, {}).pipe(HttpClientRequest.setHeader("idempotency-key", "stop-1")))
      const once = yield* interrupt()
      expect([once.status, once.body?.id, once.body?.status]).toEqual([200, runId, "interrupted"])
      // The client retries (its first request timed out): the same answer, the queued run untouched.
      const again = yield* interrupt()
      expect([again.status, again.body]).toEqual([200, once.body])
      yield* Deferred.succeed(gate, undefined)
      const secondRun = yield* api.runs.get({ path: { runId: second.body!.runId as never }, urlParams: { waitMs: 30_000 } })
      expect(secondRun.run.status).toBe("completed")
      // The same key for another thread is 422 too.
      const other = yield* raw(post("/threads", { providerInstance: "codex" }))
      const elsewhere = yield* raw(post(`/threads/${other.body!.threadId as string}/interrupt`, {}).pipe(
        HttpClientRequest.setHeader("idempotency-key", "stop-1")
      ))
      expect([elsewhere.status, elsewhere.body?._tag, elsewhere.body?.mismatch]).toEqual([422, "IdempotencyKeyReused", "thread"])
    }).pipe(Effect.provide(serve(h)))
  })

  // Was 400 `InvalidRequest`, a reason string only (b48srv): the draft answers a reused key with another payload 422.
  it.live("a message's key reused with another text is 422 IdempotencyKeyReused, typed; the first run stands alone", () => {
    const h = providers()
    return Effect.gen(function*() {
      const created = yield* raw(post("/threads", { providerInstance: "codex" }))
      const threadId = created.body!.threadId as string
      h.script.enqueue(Harness.reply(20))
      const send = (text: string) => raw(post(`/threads/${threadId}/messages`, { text }).pipe(HttpClientRequest.setHeader("idempotency-key", "msg-1")))
      const first = yield* send("fix the test")
      expect(first.status).toBe(202)
      const other = yield* send("fix the build")
      expect([other.status, other.body]).toEqual([422, {
        _tag: "IdempotencyKeyReused",
        commandId: "msg-1",
        commandType: "SendMessage",
        usedBy: "SendMessage",
        mismatch: "payload",
        message: "command id msg-1 was already used by SendMessage with a different payload; a retry must repeat the command " +
          "unchanged: send this SendMessage with a new command id"
      }])
      // The retry of the same message still answers the first run.
      const again = yield* send("fix the test")
      expect([again.status, again.body?.runId]).toEqual([202, first.body?.runId])
      const runs = yield* raw(get(`/threads/${threadId}/runs`))
      expect((runs.body?.runs as ReadonlyArray<{ readonly prompt: string }>).map((r) => r.prompt)).toEqual(["fix the test"])
    }).pipe(Effect.provide(serve(h)))
  })
})
