/**
 * `POST /threads/{fork}/merge` says what it merged, and says when it merged nothing: a fork without a run ended since
 * it was forked (or since its last merge) was answered with only the fields, `fromRunSeq` 1 and `throughRunSeq` 1
 * reading as a range that had been merged (new user b46srv). `merged` tells a program, `message` a person.
 */
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { get, post, raw, serve } from "./helpers.js"

describe("merge-back", () => {
  it.live("with nothing new it answers merged: false and says nothing was merged; after a run it says what it merged", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    return Effect.gen(function*() {
      const parent = (yield* raw(post("/threads", { providerInstance: "codex" }))).body!.threadId as string
      h.script.enqueue(Harness.reply(20))
      const first = (yield* raw(post(`/threads/${parent}/messages`, { text: "hello" }))).body!.runId as string
      yield* raw(get(`/runs/${first}?waitMs=30000`))
      const fork = (yield* raw(post(`/threads/${parent}/fork`, {}))).body!.threadId as string

      const nothing = yield* raw(post(`/threads/${fork}/merge`, {}))
      expect([nothing.status, nothing.body]).toEqual([200, {
        parentThreadId: parent,
        runId: null,
        fromRunSeq: 1,
        throughRunSeq: 1,
        itemCount: 0,
        tokens: 0,
        handoffId: null,
        merged: false,
        message: "nothing was merged: the fork has no ended run since it was forked; a run still in progress is merged once it has ended"
      }])

      h.script.enqueue(Harness.reply(20))
      const onFork = (yield* raw(post(`/threads/${fork}/messages`, { text: "on the fork" }))).body!.runId as string
      yield* raw(get(`/runs/${onFork}?waitMs=30000`))
      const merged = yield* raw(post(`/threads/${fork}/merge`, {}))
      const body = merged.body!
      expect([merged.status, body.merged, body.fromRunSeq, body.throughRunSeq]).toEqual([200, true, 1, 2])
      expect(body.message).toBe(
        `merged the fork's run 2 (${body.itemCount} items, ${body.tokens} tokens) into thread ${parent} as run ${body.runId}, ` +
          `owed to the parent's active provider by handoff ${body.handoffId}`
      )
      // Merging again: nothing new since that merge.
      const again = yield* raw(post(`/threads/${fork}/merge`, {}))
      expect([again.body?.merged, again.body?.runId, again.body?.message]).toEqual([
        false,
        null,
        "nothing was merged: the fork has no ended run since its last merge (through run 2); a run still in progress is merged once it has ended"
      ])
    }).pipe(Effect.provide(serve(h)))
  })
})
