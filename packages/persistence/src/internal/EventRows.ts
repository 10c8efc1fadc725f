/** The `thread_events` row codec shared by `ThreadStore` and `EventFeed`. */
import { ThreadEvent } from "@baton/contracts"
import { Schema } from "effect"
import type { SchemaAST } from "effect"
import { Count } from "./Rows.js"

/**
 * A `thread_events` row as the client returns it: `payload` JSON text, `globalSeq` a number (SQLite) or a bigint
 * string (Postgres `BIGINT`); decoded through `ThreadEvent` (the member its `type` names). Other columns are ignored.
 */
export const EventRow = Schema.compose(
  Schema.Struct(
    { globalSeq: Count, payload: Schema.parseJson() },
    Schema.Record({ key: Schema.String, value: Schema.Unknown })
  ),
  ThreadEvent,
  { strict: false }
)

/** Decodes rows of `thread_events` into stored events (`ParseError` when a row does not match its type). */
export const decodeEvents = Schema.decodeUnknown(Schema.Array(EventRow))

/**
 * Whether a schema's decoded side is its encoded side (JSON values alone: no transformation, no declaration such as
 * `DateTime` or a class, no suspended schema, which is not looked into): then a value it accepted on encode decodes
 * to the same value, checks included, and `ThreadStore` can hand the bus the payload it encoded instead of decoding
 * the row back.
 */
export const encodesToItself = (ast: SchemaAST.AST): boolean => {
  switch (ast._tag) {
    case "Literal":
    case "UndefinedKeyword":
    case "StringKeyword":
    case "NumberKeyword":
    case "BooleanKeyword":
    case "UnknownKeyword":
    case "AnyKeyword":
    case "Enums":
    case "TemplateLiteral":
      return true
    case "Refinement":
      return encodesToItself(ast.from)
    case "Union":
      return ast.types.every(encodesToItself)
    case "TupleType":
      return ast.elements.every((e) => encodesToItself(e.type)) && ast.rest.every((r) => encodesToItself(r.type))
    case "TypeLiteral":
      return ast.propertySignatures.every((p) => typeof p.name === "string" && encodesToItself(p.type)) &&
        ast.indexSignatures.every((s) => encodesToItself(s.type))
    default:
      return false
  }
}

/**
 * `JSON.stringify(value)`, and whether `JSON.parse` of it gives `value` back as a schema that `encodesToItself` reads
 * it (`faithful`): no number that JSON cannot hold (`NaN`, `±Infinity`, which it writes `null`) and no `undefined`
 * element of an array (written `null`). Object members that are `undefined` are dropped, as reading the row back
 * drops them; `-0` reads back `0`, as from the row.
 */
export const stringifyFaithful = (value: unknown): { readonly text: string; readonly faithful: boolean } => {
  let faithful = true
  const text = JSON.stringify(value, function(this: unknown, _key, v: unknown) {
    if (typeof v === "number" && !Number.isFinite(v)) faithful = false
    else if (v === undefined && Array.isArray(this)) faithful = false
    else if (typeof v === "bigint" || typeof v === "function" || typeof v === "symbol") faithful = false
    return v
  })
  return { text, faithful }
}
