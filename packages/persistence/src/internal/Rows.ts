/** Column codecs shared by the repositories: 0/1 booleans and JSON arrays in TEXT columns. */
import { Schema } from "effect"

/** A boolean stored as INTEGER 0/1 (portable across SQLite and Postgres). */
export const BoolInt = Schema.transform(Schema.Number, Schema.Boolean, {
  strict: true,
  decode: (n) => n !== 0,
  encode: (b) => (b ? 1 : 0)
})

/** A JSON array stored in a TEXT column. */
export const JsonArray = <A, I>(item: Schema.Schema<A, I>) => Schema.parseJson(Schema.Array(item))

/** A count column: SQLite returns numbers, Postgres may return bigint strings for aggregates. */
export const Count = Schema.Union(Schema.Number, Schema.NumberFromString)
