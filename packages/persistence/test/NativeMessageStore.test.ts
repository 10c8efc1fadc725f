/**
 * The message lists of model-API native threads (migration 0012), on every dialect: entries come back in order with
 * their bodies byte for byte (non-ASCII, escapes, a 1 MB body), `load` reads only the tail after a seq, and a second
 * writer taking a seq already stored fails with `ConcurrentModification` instead of interleaving.
 */
import { Database, NativeMessageStore } from "@baton/persistence"
import type { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"

const dialects: ReadonlyArray<readonly [string, () => Layer.Layer<SqlClient.SqlClient, Database.DatabaseError>]> = [
  ["SQLite", () => Database.layerSqlite(":memory:")],
  ["Postgres", () => Database.layerPgIsolated()]
]

const entry = (seq: number, body: string, extra: Partial<NativeMessageStore.NativeEntry> = {}): NativeMessageStore.NativeEntry => ({
  seq,
  kind: "turn",
  runId: `run-${seq}`,
  deliveryIds: [],
  usage: null,
  body,
  ...extra
})

describe.each(dialects)("NativeMessageStore on %s", (_label, db) => {
  it.live("bodies come back byte for byte, in order; load reads the tail; a taken seq is a ConcurrentModification", () =>
    Effect.gen(function*() {
      const store = yield* NativeMessageStore.make
      const odd = `{"role":"user","content":[{"type":"text","text":"caf\\u00e9 \u{1F41B} \\"q\\" \\\\ \\n\u2028"}]}`
      const big = `{"role":"user","content":"${"x".repeat(1_000_000)}"}`
      yield* store.append("claude", "ref-1", [
        entry(1, odd),
        entry(2, big, { kind: "output", runId: "run-1", usage: { usedTokens: 1234, maxTokens: 200000 } }),
        entry(3, "{}", { kind: "history", runId: null, deliveryIds: ["d1", "d2"] })
      ])
      yield* store.append("claude", "ref-2", [entry(1, "{\"other\":true}")])
      expect(yield* store.lastSeq("ref-1")).toBe(3)
      expect(yield* store.lastSeq("ref-none")).toBe(0)
      const all = yield* store.load("ref-1", 0)
      expect(all.map((e) => e.seq)).toEqual([1, 2, 3])
      expect(all[0]!.body).toBe(odd)
      expect(all[1]!.body).toBe(big)
      expect(all[1]).toMatchObject({ kind: "output", runId: "run-1", usage: { usedTokens: 1234, maxTokens: 200000 } })
      expect(all[2]).toMatchObject({ kind: "history", runId: null, deliveryIds: ["d1", "d2"], usage: null })
      expect((yield* store.load("ref-1", 2)).map((e) => e.seq)).toEqual([3])
      const raced = yield* Effect.flip(store.append("claude", "ref-1", [entry(3, "{\"late\":1}")]))
      expect(raced._tag).toBe("ConcurrentModification")
      expect((yield* store.load("ref-1", 2))[0]!.body).toBe("{}")
    }).pipe(Effect.provide(Layer.orDie(db()))))
})
