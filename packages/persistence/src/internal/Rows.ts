/** Column codecs shared by the repositories: 0/1 booleans and JSON arrays in TEXT columns. */
import { Effect, ParseResult, Schema } from "effect"

/** A boolean stored as INTEGER 0/1 (portable across SQLite and Postgres). */
export const BoolInt = Schema.transform(Schema.Number, Schema.Boolean, {
  strict: true,
  decode: (n) => n !== 0,
  encode: (b) => (b ? 1 : 0)
})

/**
 * A JSON array of ids stored in a TEXT column: `id` a brand of `Schema.String` (`ItemId`, `RunId`: the brand checks
 * nothing at run time). Decoded with `JSON.parse` and one `typeof` check per element, encoded with `JSON.stringify`.
 * `Schema.parseJson(Schema.Array(id))` walked every element through `ParseResult` both ways: for a handoff's 19,000
 * item ids (every item of a long thread, read and written again at the first turn start after a switch) about 3-6 ms
 * a decode and 2-3 ms an encode, against 1.3 and 0.4 (the parse and the stringify themselves). Fails with a
 * `ParseError` on text that is not JSON or not an array of strings.
 */
export const JsonIds = <A extends string>(id: Schema.Schema<A, string>) =>
  Schema.transformOrFail(
    Schema.String,
    Schema.declare((u): u is ReadonlyArray<A> => Array.isArray(u) && u.every((x) => typeof x === "string"), {
      identifier: `JsonIds<${String(id.ast)}>`
    }),
    {
      // Not strict: the parsed value is `unknown` until the declaration's check takes it.
      strict: false,
      decode: (text, _, ast) =>
        Effect.try({ try: (): unknown => JSON.parse(text), catch: (e) => new ParseResult.Type(ast, text, `not JSON: ${String(e)}`) }),
      encode: (ids) => ParseResult.succeed(JSON.stringify(ids))
    }
  )

/** A count column: SQLite returns numbers, Postgres may return bigint strings for aggregates. */
export const Count = Schema.Union(Schema.Number, Schema.NumberFromString)

/** One accepted calibration sample: `ratio` provider tokens per Baton token, `tokens` Baton tokens it measured. */
export interface CalibrationSample {
  readonly ratio: number
  readonly tokens: number
}

/** The reference codec of a calibration's `recent` column: what `JsonSamples` decodes and encodes as. */
export const JsonSamplesWalked = Schema.parseJson(Schema.Array(Schema.Struct({ ratio: Schema.Number, tokens: Schema.Number })))
const decodeSamplesWalked = ParseResult.decodeUnknown(JsonSamplesWalked)
const encodeSamplesWalked = ParseResult.encodeUnknown(JsonSamplesWalked)

const isSamples = (u: unknown): u is ReadonlyArray<CalibrationSample> =>
  Array.isArray(u) &&
  u.every((s: unknown) =>
    typeof s === "object" && s !== null && typeof (s as Record<string, unknown>).ratio === "number" &&
    typeof (s as Record<string, unknown>).tokens === "number"
  )

/**
 * The `recent` samples of a provider calibration, a JSON array of `{ratio, tokens}` in a TEXT column (read at every
 * turn start with the native thread, `getNativeThreadSession`). Decodes what `JsonSamplesWalked`
 * (`Schema.parseJson(Schema.Array(Schema.Struct({ratio: Number, tokens: Number})))`) decodes, to the same values:
 * plainly well-formed text (a JSON array of plain objects whose `ratio` and `tokens` are numbers) is decoded by hand,
 * `JSON.parse` and `typeof` checks, each sample copied to `{ratio, tokens}` (other keys dropped, as `Schema.Struct`
 * does); anything else goes through `JsonSamplesWalked`, so a malformed row fails with its `ParseError` as before.
 * The walk cost about 59 KiB per turn start. Encodes through `JsonSamplesWalked`.
 */
export const JsonSamples = Schema.transformOrFail(
  Schema.String,
  Schema.declare(isSamples, { identifier: "JsonSamples" }),
  {
    // Not strict: the walked decode's value is `unknown` to the compiler until the declaration's check takes it.
    strict: false,
    decode: (text, options) => {
      let parsed: unknown
      try {
        parsed = JSON.parse(text)
      } catch {
        return decodeSamplesWalked(text, options)
      }
      if (!Array.isArray(parsed)) return decodeSamplesWalked(text, options)
      const samples: Array<CalibrationSample> = []
      for (const s of parsed as ReadonlyArray<unknown>) {
        if (typeof s !== "object" || s === null || Array.isArray(s)) return decodeSamplesWalked(text, options)
        const { ratio, tokens } = s as Record<string, unknown>
        if (typeof ratio !== "number" || typeof tokens !== "number") return decodeSamplesWalked(text, options)
        samples.push({ ratio, tokens })
      }
      return ParseResult.succeed(samples)
    },
    encode: (samples, options) => encodeSamplesWalked(samples, options)
  }
)
