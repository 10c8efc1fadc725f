import { PersistenceError } from "@baton/contracts"
import { Effect } from "effect"

/** The most specific message of an error: its cause's (e.g. SQLite's `SQLITE_BUSY: database is locked`), else its own. */
const detailOf = (e: { readonly message?: string; readonly _tag?: string; readonly cause?: unknown }) => {
  const cause = e.cause as { readonly message?: unknown; readonly code?: unknown } | undefined
  const causeText = cause?.message === undefined ? "" : `${cause.code === undefined ? "" : `${String(cause.code)}: `}${String(cause.message)}`
  return `${e._tag ?? "Error"}: ${String(e.message ?? e)}${causeText === "" ? "" : ` (${causeText})`}`
}

/** Maps any `SqlError`/`ParseError` of a repository call to one `PersistenceError` carrying the operation name. */
export const orPersistence = (operation: string) =>
<A, E extends { readonly message?: string; readonly _tag?: string; readonly cause?: unknown }, R>(
  self: Effect.Effect<A, E, R>
): Effect.Effect<A, PersistenceError, R> =>
  Effect.mapError(self, (e) => new PersistenceError({ operation, detail: detailOf(e).slice(0, 2000) }))
