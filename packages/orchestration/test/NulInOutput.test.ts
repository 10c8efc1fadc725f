/**
 * Regression (review r32): a provider item whose text holds a NUL character (a tool's output read from a binary
 * file, say) failed the run on Postgres as `output_not_recorded` (Postgres text cannot hold NUL: the whole arrival
 * was lost), while SQLite kept it; a lone surrogate was stored altered, differently per dialect (one U+FFFD on
 * Postgres, three on SQLite), so the record differed from the text Baton held. Each is recorded as U+FFFD now, the
 * same on both dialects.
 */
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

describe.each(Harness.dialects)("text Postgres cannot hold as given in the provider's output on %s", (_label, db) => {
  it.live("a NUL: the run completes and the item is recorded with U+FFFD in its place", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const threadId = yield* o.create("codex")
      h.script.enqueue({ items: [Harness.produced("assistant_message", "before\u0000after", { messageId: "msg_1" })] })
      const result = yield* o.send(threadId, "read the file")
      expect([result.status, result.failureCode]).toEqual(["completed", null])
      const items = yield* o.store.listItems(threadId)
      expect(items.map((i) => [i.kind, i.text])).toEqual([["user_message", "read the file"], ["assistant_message", "before\uFFFDafter"]])
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })
  it.live("a lone surrogate: recorded as U+FFFD, the text read back equal to the text the turn recorded", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const threadId = yield* o.create("codex")
      h.script.enqueue({ items: [Harness.produced("assistant_message", "half \ud83d of a pair", { messageId: "msg_1" })] })
      const result = yield* o.send(threadId, "emoji please")
      expect(result.status).toBe("completed")
      expect((yield* o.store.listItems(threadId)).map((i) => i.text)).toEqual(["emoji please", "half \uFFFD of a pair"])
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })
})
