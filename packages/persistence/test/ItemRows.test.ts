import type { Item } from "@baton/contracts"
import { describe, expect, it } from "@effect/vitest"
import { DateTime, Either, FastCheck as fc, Schema } from "effect"
import { decodeItemRowFast, encodeItemRowFast, ItemRow } from "../src/internal/Tables.js"

const decodeSchema = Schema.decodeUnknownEither(ItemRow)

/** An item row as the SQL client returns it (camelCase names, `isError` an integer, `createdAt` an ISO string). */
const wellFormed = fc.record({
  id: fc.string({ minLength: 1, maxLength: 12 }),
  threadId: fc.string({ maxLength: 12 }),
  runId: fc.option(fc.string({ maxLength: 12 }), { nil: null }),
  seq: fc.integer({ min: 1, max: 2 ** 40 }),
  kind: fc.constantFrom("user_message", "assistant_message", "tool_call", "tool_result", "reasoning", "error", "summary", "handoff_marker"),
  text: fc.string({ maxLength: 40 }),
  toolCallId: fc.option(fc.string({ maxLength: 8 }), { nil: null }),
  toolName: fc.option(fc.string({ maxLength: 8 }), { nil: null }),
  messageId: fc.option(fc.string({ maxLength: 8 }), { nil: null }),
  isError: fc.constantFrom(0, 1, 2),
  toolCallState: fc.constantFrom(null, "answered", "dangling", "interrupted"),
  tokens: fc.integer({ min: 0, max: 2 ** 31 }),
  createdAt: fc.date({ min: new Date("1970-01-01T00:00:00Z"), max: new Date("2999-12-31T00:00:00Z"), noInvalidDate: true }).map((d) => d.toISOString())
})

const keys = ["id", "threadId", "runId", "seq", "kind", "text", "toolCallId", "toolName", "messageId", "isError", "toolCallState", "tokens", "createdAt"]

/** A row with one column replaced by an odd value (wrong type, out of range, unknown literal, unparsable date) or an extra column. */
const mutated = fc.tuple(wellFormed, fc.constantFrom(...keys, "extra"), fc.constantFrom<unknown>(
  undefined, null, "", "x", "not a date", -1, 0, 1.5, Number.NaN, Infinity, 2 ** 60, true, {}, [], "answered", "user_message", "2026-13-45T00:00:00Z", "2026-12-04"
)).map(([row, key, value]) => {
  const copy: Record<string, unknown> = { ...row }
  if (value === undefined) delete copy[key]
  else copy[key] = value
  return copy
})

const same = (fast: Item, schema: Item) => {
  const { createdAt: a, ...restFast } = fast
  const { createdAt: b, ...restSchema } = schema
  expect(restFast).toStrictEqual(restSchema)
  expect(DateTime.toEpochMillis(a)).toBe(DateTime.toEpochMillis(b))
  expect(DateTime.isUtc(a)).toBe(true)
  expect(Object.keys(fast)).toEqual(Object.keys(schema))
}

describe("decodeItemRowFast", () => {
  it("decodes every well-formed row to ItemRow's value", () => {
    fc.assert(fc.property(wellFormed, (row) => {
      const fast = decodeItemRowFast(row)
      const schema = decodeSchema(row)
      expect(Either.isRight(schema)).toBe(true)
      expect(fast).toBeDefined()
      same(fast!, Either.getOrThrow(schema))
    }), { numRuns: 2000 })
  })

  it("never takes a row ItemRow refuses, and agrees with it on every row it takes", () => {
    fc.assert(fc.property(mutated, (row) => {
      const fast = decodeItemRowFast(row)
      const schema = decodeSchema(row)
      if (fast !== undefined) {
        expect(Either.isRight(schema)).toBe(true)
        same(fast, Either.getOrThrow(schema))
      }
    }), { numRuns: 5000 })
  })

  it("leaves odd rows to the schema: a string seq, a boolean isError, an unknown kind, a date it cannot read", () => {
    const [row] = fc.sample(wellFormed, { numRuns: 1, seed: 7 })
    for (const odd of [{ seq: "1" }, { isError: false }, { kind: "note" }, { createdAt: "yesterday" }, { tokens: -1 }]) {
      expect(decodeItemRowFast({ ...row, ...odd })).toBeUndefined()
      expect(Either.isLeft(decodeSchema({ ...row, ...odd }))).toBe(true)
    }
  })
})

const encodeSchema = Schema.encodeUnknownEither(ItemRow)

/** An item as Baton builds one (branded ids are strings, `isError` a boolean, `createdAt` a `DateTime.Utc`). */
const wellFormedItem = wellFormed.map((row) => ({
  ...row,
  isError: row.isError !== 0,
  createdAt: DateTime.unsafeMake(row.createdAt)
}))

/** An item with one field replaced by an odd value (as `mutated`, plus values only an item could hold wrongly). */
const mutatedItem = fc.tuple(wellFormedItem, fc.constantFrom(...keys, "extra"), fc.constantFrom<unknown>(
  undefined, null, "", "x", -1, 0, 1, 1.5, Number.NaN, Infinity, 2 ** 60, true, false, {}, [], "answered", "user_message",
  "2026-12-04T00:00:00.000Z", new Date(0), DateTime.unsafeMakeZoned(0, { timeZone: "Europe/Paris" }), DateTime.unsafeMake(0)
)).map(([item, key, value]) => {
  const copy: Record<string, unknown> = { ...item }
  if (value === undefined) delete copy[key]
  else copy[key] = value
  return copy
})

describe("encodeItemRowFast", () => {
  it("encodes every well-formed item to ItemRow's row", () => {
    fc.assert(fc.property(wellFormedItem, (item) => {
      const fast = encodeItemRowFast(item)
      const schema = encodeSchema(item)
      expect(Either.isRight(schema)).toBe(true)
      expect(fast).toStrictEqual(Either.getOrThrow(schema))
    }), { numRuns: 2000 })
  })

  it("never takes an item ItemRow refuses, and agrees with it on every item it takes", () => {
    fc.assert(fc.property(mutatedItem, (item) => {
      const fast = encodeItemRowFast(item)
      const schema = encodeSchema(item)
      if (fast !== undefined) {
        expect(Either.isRight(schema)).toBe(true)
        expect(fast).toStrictEqual(Either.getOrThrow(schema))
      }
    }), { numRuns: 5000 })
  })

  it("encodes each item's own createdAt when items of one instant and of others alternate (the last instant is remembered)", () => {
    const [item] = fc.sample(wellFormedItem, { numRuns: 1, seed: 11 })
    const instants = [1_000, 1_000, 1_001, 1_000, 86_400_000 * 365 * 30, 1_001, 1_001].map((ms) => DateTime.unsafeMake(ms))
    expect(instants.map((createdAt) => encodeItemRowFast({ ...item, createdAt })?.createdAt)).toEqual(instants.map((at) => DateTime.formatIso(at)))
  })

  it("leaves odd items to the schema: a numeric isError, an ISO string date, a zoned date, an unknown kind", () => {
    const [item] = fc.sample(wellFormedItem, { numRuns: 1, seed: 7 })
    for (const odd of [{ isError: 1 }, { createdAt: "2026-12-04T00:00:00.000Z" }, { createdAt: DateTime.unsafeMakeZoned(0, { timeZone: "Europe/Paris" }) }, { kind: "note" }, { tokens: -1 }]) {
      expect(encodeItemRowFast({ ...item, ...odd })).toBeUndefined()
      expect(Either.isLeft(encodeSchema({ ...item, ...odd }))).toBe(true)
    }
  })
})
