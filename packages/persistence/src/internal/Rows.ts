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
