/** The `thread_events` row codec shared by `ThreadStore` and `EventFeed`. */
import { ThreadEvent } from "@baton/contracts"
import { Schema } from "effect"
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
