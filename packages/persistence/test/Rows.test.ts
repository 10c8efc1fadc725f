import { ItemId } from "@baton/contracts"
import { describe, expect, it } from "@effect/vitest"
import { Either, FastCheck as fc, Schema } from "effect"
import { JsonIds, JsonSamples, JsonSamplesWalked } from "../src/internal/Rows.js"

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

// A calibration's `recent` column decodes and encodes what `Schema.parseJson(Schema.Array(Schema.Struct(...)))` did
// (plainly well-formed text by hand, the rest through the walked codec), and refuses what it refused.
describe("JsonSamples", () => {
  const finite = fc.double({ noNaN: true, noDefaultInfinity: true })
  const sample = fc.record({ ratio: finite, tokens: finite })

  it.prop("agrees with the walked codec both ways", [fc.array(sample)], ([samples]) => {
    const text = JSON.stringify(samples)
    expect(Schema.decodeUnknownSync(JsonSamples)(text)).toEqual(Schema.decodeUnknownSync(JsonSamplesWalked)(text))
    expect(Schema.encodeSync(JsonSamples)(samples)).toBe(Schema.encodeSync(JsonSamplesWalked)(samples))
  })

  const nearSamples = fc.array(
    fc.oneof(sample, fc.record({ ratio: fc.jsonValue(), tokens: fc.jsonValue() }, { requiredKeys: [] }), fc.jsonValue())
  ).map((a) => JSON.stringify(a))
  it.prop("agrees with the walked codec on any JSON text", [fc.oneof(fc.json(), nearSamples)], ([text]) => {
    const fast = Schema.decodeUnknownEither(JsonSamples)(text)
    const walked = Schema.decodeUnknownEither(JsonSamplesWalked)(text)
    expect(Either.isLeft(fast)).toBe(Either.isLeft(walked))
    if (Either.isRight(fast) && Either.isRight(walked)) expect(fast.right).toEqual(walked.right)
  })

  it("drops other keys, as Schema.Struct does", () => {
    const text = "[{\"ratio\":1.2,\"tokens\":900,\"extra\":true},{\"tokens\":5,\"ratio\":0.9}]"
    const decoded = Schema.decodeUnknownSync(JsonSamples)(text)
    expect(decoded).toStrictEqual([{ ratio: 1.2, tokens: 900 }, { ratio: 0.9, tokens: 5 }])
    expect(decoded).toStrictEqual(Schema.decodeUnknownSync(JsonSamplesWalked)(text))
  })

  it("refuses what the walked codec refuses, with a ParseError", () => {
    for (
      const text of [
        "x", "", "5", "null", "{\"ratio\":1,\"tokens\":2}", "[1]", "[null]", "[[1,2]]", "[{}]", "[{\"ratio\":1}]",
        "[{\"ratio\":\"1\",\"tokens\":2}]", "[{\"ratio\":1,\"tokens\":null}]", "[{\"ratio\":1,\"tokens\":2},3]",
        "[{\"ratio\":1,\"tokens\":2},]"
      ]
    ) {
      expect(Either.isLeft(Schema.decodeUnknownEither(JsonSamples)(text))).toBe(true)
      expect(Either.isLeft(Schema.decodeUnknownEither(JsonSamplesWalked)(text))).toBe(true)
    }
    expect(Either.isLeft(Schema.decodeUnknownEither(JsonSamples)(5))).toBe(true)
    const failure = Schema.decodeUnknownEither(JsonSamples)("[{\"ratio\":1,\"tokens\":\"2\"}]")
    expect(Either.isLeft(failure) && failure.left._tag).toBe("ParseError")
    expect(Either.isLeft(Schema.encodeUnknownEither(JsonSamples)([{ ratio: "1", tokens: 2 }]))).toBe(true)
  })
})
