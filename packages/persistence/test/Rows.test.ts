import { ItemId } from "@baton/contracts"
import { describe, expect, it } from "@effect/vitest"
import { Either, FastCheck as fc, Schema } from "effect"
import { JsonIds } from "../src/internal/Rows.js"

// The id lists' column codec decodes and encodes what `Schema.parseJson(Schema.Array(ItemId))` did (without its walk
// over every element), and refuses what it refused.
describe("JsonIds", () => {
  const fast = JsonIds(ItemId)
  const walked = Schema.parseJson(Schema.Array(ItemId))

  it.prop("agrees with parseJson(Array(id)) both ways", [fc.array(fc.string())], ([ids]) => {
    const text = JSON.stringify(ids)
    expect(Schema.decodeUnknownSync(fast)(text)).toEqual(Schema.decodeUnknownSync(walked)(text))
    expect(Schema.encodeSync(fast)(ids as Array<ItemId>)).toBe(Schema.encodeSync(walked)(ids as Array<ItemId>))
  })

  it("refuses text that is not JSON, or not an array of strings", () => {
    for (const text of ["x", "[1]", "[\"a\", null]", "{\"a\":1}", "\"a\"", "null", "[[\"a\"]]", "[\"a\", [\"b\"]]", "[true]", "[{}]", "[\"a\",]", "", "5"]) {
      expect(Either.isLeft(Schema.decodeUnknownEither(fast)(text))).toBe(true)
      expect(Either.isLeft(Schema.decodeUnknownEither(walked)(text))).toBe(true)
    }
    expect(Either.isLeft(Schema.decodeUnknownEither(fast)(5))).toBe(true)
    expect(Either.isLeft(Schema.decodeUnknownEither(fast)(null))).toBe(true)
    // The failure is a ParseError (the repositories' typed decode failure), never a thrown exception.
    const failure = Schema.decodeUnknownEither(fast)("[\"a\", 1]")
    expect(Either.isLeft(failure) && failure.left._tag).toBe("ParseError")
    expect(Either.isLeft(Schema.encodeUnknownEither(fast)([1]))).toBe(true)
  })

  it("decodes very long ids and long lists", () => {
    const ids = ["x".repeat(200_000), ...Array.from({ length: 20_000 }, (_, i) => `itm_${i}`)]
    expect(Schema.decodeUnknownSync(fast)(JSON.stringify(ids))).toEqual(ids)
  })
})
