/**
 * The `baseline` column of `gateway_conversations` (docs/gateway.md, "Re-rendered history"): a row written before
 * content prints existed (a JSON array of fingerprints) still reads, without content prints; a baseline with content
 * prints is written as an object and reads back the same, and one that ends with a recorded reply carries its count
 * (`replied`, docs/gateway.md "Retried requests"). `extendBaseline` (the reply joining the baseline in one
 * conditional statement), on every dialect: it extends a baseline stored in either form, and leaves one that moved.
 */
import { Database, GatewayConversations } from "@baton/persistence"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Option, Schema } from "effect"

const row = (baseline: string) => ({
  conversationKey: "session:s:abc",
  threadId: "thr_1",
  baseline,
  requests: 2,
  divergences: 0,
  offloaded: "[]",
  expansions: "{}",
  createdAt: "2026-12-03T00:00:00.000Z",
  updatedAt: "2026-12-03T00:00:00.000Z"
})

describe("GatewayConversations.Conversation", () => {
  it("reads a legacy baseline (an array of fingerprints) without content prints", () => {
    const decoded = Schema.decodeUnknownSync(GatewayConversations.Conversation)(row("[\"f1\",\"f2\"]"))
    expect(decoded.baseline).toEqual({ prints: ["f1", "f2"], content: null })
    // Written back unchanged while its content prints are unknown.
    expect(Schema.encodeSync(GatewayConversations.Conversation)(decoded).baseline).toBe("[\"f1\",\"f2\"]")
  })

  it("writes a baseline with content prints as an object and reads it back", () => {
    const baseline = { prints: ["f1", "f2", "f3"], content: ["c1", "", "f3"] }
    const encoded = Schema.encodeSync(GatewayConversations.Conversation)({ ...Schema.decodeUnknownSync(GatewayConversations.Conversation)(row("[]")), baseline })
    expect(JSON.parse(encoded.baseline)).toEqual(baseline)
    expect(Schema.decodeUnknownSync(GatewayConversations.Conversation)(encoded).baseline).toEqual(baseline)
  })

  it("writes a baseline that ends with a recorded reply as an object with `replied` (content prints known or not); without one, as before", () => {
    const empty = Schema.decodeUnknownSync(GatewayConversations.Conversation)(row("[]"))
    for (const baseline of [{ prints: ["f1", "f2"], content: ["c1", "f2"], replied: 1 }, { prints: ["f1", "f2", "f3"], content: null, replied: 2 }]) {
      const encoded = Schema.encodeSync(GatewayConversations.Conversation)({ ...empty, baseline })
      expect(encoded.baseline).toBe(GatewayConversations.baselineColumn(baseline))
      expect(JSON.parse(encoded.baseline)).toEqual(baseline)
      expect(Schema.decodeUnknownSync(GatewayConversations.Conversation)(encoded).baseline).toEqual(baseline)
    }
    expect(GatewayConversations.baselineColumn({ prints: ["f1"], content: null, replied: 0 })).toBe("[\"f1\"]")
    expect(GatewayConversations.baselineColumn({ prints: ["f1"], content: ["c1"], replied: 0 })).toBe("{\"prints\":[\"f1\"],\"content\":[\"c1\"]}")
  })

  it("writes the other replies recorded for the baseline's request (`others`) beside its reply, and reads them back; none: as before", () => {
    const empty = Schema.decodeUnknownSync(GatewayConversations.Conversation)(row("[]"))
    const baseline = { prints: ["f1", "f2"], content: ["c1", "f2"], replied: 1, others: [["f3"], ["f4", "f5"]] }
    const encoded = Schema.encodeSync(GatewayConversations.Conversation)({ ...empty, baseline })
    expect(encoded.baseline).toBe(GatewayConversations.baselineColumn(baseline))
    expect(JSON.parse(encoded.baseline)).toEqual(baseline)
    expect(Schema.decodeUnknownSync(GatewayConversations.Conversation)(encoded).baseline).toEqual(baseline)
    expect(GatewayConversations.baselineColumn({ prints: ["f1", "f2"], content: null, replied: 1, others: [] })).toBe(
      "{\"prints\":[\"f1\",\"f2\"],\"content\":null,\"replied\":1}"
    )
  })
})

const dialects: ReadonlyArray<readonly [string, () => Layer.Layer<SqlClient.SqlClient, Database.DatabaseError>]> = [
  ["SQLite", () => Database.layerSqlite(":memory:")],
  ["Postgres", () => Database.layerPgIsolated()]
]

describe.each(dialects)("GatewayConversations.extendBaseline on %s", (_label, db) => {
  it.live("extends a baseline stored with content prints or as a legacy array; one that moved is left as it is", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const conversations = yield* GatewayConversations.make
      const at = "2026-12-03T00:00:00.000Z"
      yield* sql`INSERT INTO threads (id, title, active_provider_thread_id, created_at, updated_at) VALUES ('thr_1', 't', NULL, ${at}, ${at})`
      const stored = (key: string) => Effect.map(conversations.find(key), (c) => Option.getOrThrow(c).baseline)
      const columnOf = (key: string) =>
        Effect.map(sql<{ baseline: string }>`SELECT baseline FROM gateway_conversations WHERE conversation_key = ${key}`, (rows) => rows[0]!.baseline)
      const base = yield* Schema.decodeUnknown(GatewayConversations.Conversation)(row("[]"))

      // Stored with content prints (as `begin` writes it): the reply's prints and content prints join it.
      yield* conversations.insert({ ...base, conversationKey: "with-content", baseline: { prints: ["f1", "f2"], content: ["c1", ""] } })
      const extended = { prints: ["f1", "f2", "f3"], content: ["c1", "", "f3"] }
      expect(yield* conversations.extendBaseline("with-content", { prints: ["f1", "f2"], content: ["c1", ""] }, extended, at)).toBe(true)
      expect(yield* stored("with-content")).toEqual(extended)

      // A legacy row (the fingerprints' array, written before content prints): extended too, now with its content prints.
      yield* sql`INSERT INTO gateway_conversations (conversation_key, thread_id, baseline, requests, divergences, offloaded, expansions, created_at, updated_at)
        VALUES ('legacy', 'thr_1', '["f1","f2"]', 1, 0, '[]', '{}', ${at}, ${at})`
      expect(yield* conversations.extendBaseline("legacy", { prints: ["f1", "f2"], content: ["c1", ""] }, extended, at)).toBe(true)
      expect(yield* stored("legacy")).toEqual(extended)
      expect(JSON.parse(yield* columnOf("legacy"))).toEqual(extended)

      // A wire without content prints: the array form both ways.
      yield* conversations.insert({ ...base, conversationKey: "no-content", baseline: { prints: ["f1"], content: null } })
      expect(yield* conversations.extendBaseline("no-content", { prints: ["f1"], content: null }, { prints: ["f1", "f2"], content: null }, at)).toBe(true)
      expect(yield* columnOf("no-content")).toBe("[\"f1\",\"f2\"]")
      // A reply joining it (the request's baseline, then the reply's count): the object form, read back with `replied`.
      expect(yield* conversations.extendBaseline("no-content", { prints: ["f1", "f2"], content: null }, { prints: ["f1", "f2", "f3"], content: null, replied: 1 }, at)).toBe(true)
      expect(yield* stored("no-content")).toEqual({ prints: ["f1", "f2", "f3"], content: null, replied: 1 })

      // Moved since (another request rewrote it): left as it is.
      expect(yield* conversations.extendBaseline("with-content", { prints: ["f1", "f2"], content: ["c1", ""] }, { prints: ["f1", "f2", "f9"], content: ["c1", "", "f9"] }, at)).toBe(false)
      expect(yield* stored("with-content")).toEqual(extended)
    }).pipe(Effect.provide(Layer.orDie(db()))))

  it.live("updateIfUnchanged: writes as update while every column is still the expected one; a row changed since is left as it is", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const conversations = yield* GatewayConversations.make
      const at = "2026-12-03T00:00:00.000Z"
      yield* sql`INSERT INTO threads (id, title, active_provider_thread_id, created_at, updated_at) VALUES ('thr_1', 't', NULL, ${at}, ${at})`
      const base = yield* Schema.decodeUnknown(GatewayConversations.Conversation)(row("[]"))
      const first = { ...base, conversationKey: "k", baseline: { prints: ["f1"], content: ["c1"] }, offloaded: ["toolu_1"], expansions: { f0: [{ role: "user" }] } }
      yield* conversations.insert(first)
      const second = { ...first, baseline: { prints: ["f1", "f2"], content: ["c1", "c2"] }, requests: 3, updatedAt: "2026-12-03T00:00:01.000Z" }
      expect(yield* conversations.updateIfUnchanged(first, second)).toBe(true)
      expect(Option.getOrThrow(yield* conversations.find("k"))).toEqual(second)
      // `first` is no longer the row: nothing written.
      expect(yield* conversations.updateIfUnchanged(first, { ...second, requests: 9 })).toBe(false)
      // Each column another writer may change makes the row another than the expected one.
      const third = { ...second, requests: 4 }
      for (const [column, value] of [["requests", 5], ["divergences", 1], ["offloaded", "[\"toolu_1\",\"toolu_2\"]"], ["expansions", "{}"], ["updated_at", "x"], ["baseline", "[\"f1\",\"f2\"]"]] as const) {
        yield* conversations.update(second)
        yield* sql`UPDATE gateway_conversations SET ${sql(column)} = ${value} WHERE conversation_key = 'k'`
        expect(yield* conversations.updateIfUnchanged(second, third)).toBe(false)
      }
      yield* conversations.update(second)
      expect(yield* conversations.updateIfUnchanged(second, third)).toBe(true)
      expect(Option.getOrThrow(yield* conversations.find("k"))).toEqual(third)
    }).pipe(Effect.provide(Layer.orDie(db()))))

  it.live("reads a row as the Conversation schema decodes it, in either baseline form; a malformed row still fails", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const conversations = yield* GatewayConversations.make
      const at = "2026-12-03T00:00:00.000Z"
      yield* sql`INSERT INTO threads (id, title, active_provider_thread_id, created_at, updated_at) VALUES ('thr_1', 't', NULL, ${at}, ${at})`
      const insert = (key: string, baseline: string, offloaded = "[\"toolu_1\"]", expansions = "{\"f1\":[{\"role\":\"assistant\"}]}") =>
        sql`INSERT INTO gateway_conversations (conversation_key, thread_id, baseline, requests, divergences, offloaded, expansions, created_at, updated_at)
          VALUES (${key}, 'thr_1', ${baseline}, 3, 1, ${offloaded}, ${expansions}, ${at}, ${at})`
      const raw = (key: string) =>
        Effect.map(sql`SELECT * FROM gateway_conversations WHERE conversation_key = ${key}`, (rows) => rows[0])
      for (const [key, baseline] of [
        ["legacy", "[\"f1\",\"f2\"]"],
        ["object", "{\"prints\":[\"f1\"],\"content\":[\"\"]}"],
        ["replied", "{\"prints\":[\"f1\",\"f2\"],\"content\":null,\"replied\":1}"],
        ["others", "{\"prints\":[\"f1\",\"f2\"],\"content\":null,\"replied\":1,\"others\":[[\"f3\"]]}"]
      ] as const) {
        yield* insert(key, baseline)
        const read = Option.getOrThrow(yield* conversations.find(key))
        expect(read).toEqual(yield* Schema.decodeUnknown(GatewayConversations.Conversation)(yield* raw(key)))
        expect(yield* conversations.ofThread("thr_1")).toContainEqual(read)
      }
      // Not JSON, or a print that is not a string: the repository's error, as before.
      yield* insert("broken", "[\"f1\",")
      expect((yield* Effect.flip(conversations.find("broken")))._tag).toBe("PersistenceError")
      yield* insert("not-strings", "[\"f1\",2]")
      expect((yield* Effect.flip(conversations.find("not-strings")))._tag).toBe("PersistenceError")
      yield* insert("bad-replied", "{\"prints\":[\"f1\"],\"content\":null,\"replied\":-1}")
      expect((yield* Effect.flip(conversations.find("bad-replied")))._tag).toBe("PersistenceError")
      yield* insert("bad-others", "{\"prints\":[\"f1\"],\"content\":null,\"replied\":1,\"others\":[[2]]}")
      expect((yield* Effect.flip(conversations.find("bad-others")))._tag).toBe("PersistenceError")
      yield* insert("bad-expansions", "[]", "[]", "{\"f1\":3}")
      expect((yield* Effect.flip(conversations.find("bad-expansions")))._tag).toBe("PersistenceError")
    }).pipe(Effect.provide(Layer.orDie(db()))))
})
