import { ConcurrentModification, PersistenceError } from "@baton/contracts"
import { Effect } from "effect"

interface DriverCause {
  readonly message?: unknown
  readonly code?: unknown
}
type SqlLike = { readonly message?: string; readonly _tag?: string; readonly cause?: unknown }

/** The most specific message of an error: its cause's (e.g. SQLite's `SQLITE_BUSY: database is locked`), else its own. */
const detailOf = (e: SqlLike) => {
  const cause = e.cause as DriverCause | undefined
  const causeText = cause?.message === undefined ? "" : `${cause.code === undefined ? "" : `${String(cause.code)}: `}${String(cause.message)}`
  return `${e._tag ?? "Error"}: ${String(e.message ?? e)}${causeText === "" ? "" : ` (${causeText})`}`
}

/** SQLite's codes for a write lock not got within the busy timeout: `ConcurrentModification`'s `busy`. */
const busyCodes = new Set(["SQLITE_BUSY", "SQLITE_BUSY_SNAPSHOT", "SQLITE_BUSY_RECOVERY", "SQLITE_BUSY_TIMEOUT", "SQLITE_LOCKED"])

/**
 * Driver error codes that mean "retry the command: nothing of it was written", never a storage fault: another writer
 * got there first (Postgres `23505` unique_violation, `40001` serialization_failure, `40P01` deadlock_detected;
 * SQLite's extended codes for a unique or primary-key violation and for a lock it did not get within the busy
 * timeout), or the server cancelled the statement (Postgres `57014` query_canceled: `pg_cancel_backend` from another
 * session, an operator's, or a `statement_timeout` set on the server; Baton itself never cancels a statement, see
 * `Database.layerPg`). Sources: PostgreSQL "Appendix A. Error Codes"; SQLite "Result and Error Codes"
 * (better-sqlite3 reports `code`).
 */
const contentionCodes = new Set([
  "23505",
  "40001",
  "40P01",
  "57014",
  "SQLITE_CONSTRAINT_UNIQUE",
  "SQLITE_CONSTRAINT_PRIMARYKEY",
  ...busyCodes
])

/** The driver's error code of a `SqlError` (its cause's `code`), if any. */
export const driverCode = (e: SqlLike): string | null => {
  const code = (e.cause as DriverCause | undefined)?.code
  return typeof code === "string" ? code : null
}

/**
 * The `reason` of the `ConcurrentModification` a contention code maps to: `busy` (a lock SQLite did not get within
 * its busy timeout), `cancelled` (Postgres 57014), else none (another writer changed the record first).
 */
export const contentionReason = (e: SqlLike): "busy" | "cancelled" | undefined => {
  const code = driverCode(e)
  return code === null ? undefined : busyCodes.has(code) ? "busy" : code === "57014" ? "cancelled" : undefined
}

/** Whether a `SqlError` is a lost race (unique violation or write contention) rather than a storage fault. */
export const isContention = (e: SqlLike) => {
  const code = driverCode(e)
  return code !== null && contentionCodes.has(code)
}

/** `fields` with `reason` when there is one (an absent optional field, not `undefined`). */
export const withReason = <A extends object>(fields: A, reason: "busy" | "cancelled" | undefined): A & { readonly reason?: "busy" | "cancelled" } =>
  reason === undefined ? fields : { ...fields, reason }

/**
 * `lost` (a `ConcurrentModification` that names no thread) as it happened on thread `threadId`: its operation (else
 * `operation`) and its `reason` kept.
 */
export const onThread = (lost: ConcurrentModification, threadId: string, operation: string): ConcurrentModification =>
  new ConcurrentModification(withReason({ threadId, operation: lost.operation ?? operation }, lost.reason))

/** Maps one `SqlError`/`ParseError` to `ConcurrentModification` (by driver code) or `PersistenceError`. */
export const toBoundary = (operation: string, e: SqlLike): ConcurrentModification | PersistenceError =>
  e._tag === "ConcurrentModification"
    ? e as ConcurrentModification
    : e._tag === "PersistenceError"
    ? e as PersistenceError
    : isContention(e)
    ? new ConcurrentModification(withReason({ operation }, contentionReason(e)))
    : new PersistenceError({ operation, detail: detailOf(e).slice(0, 2000) })

/**
 * Maps any `SqlError`/`ParseError` of a repository call to `ConcurrentModification` (a unique violation or write
 * contention, by driver code) or one `PersistenceError` carrying the operation name.
 */
export const orPersistence = (operation: string) =>
<A, E extends SqlLike, R>(
  self: Effect.Effect<A, E, R>
): Effect.Effect<A, PersistenceError | ConcurrentModification, R> =>
  Effect.mapError(self, (e) => toBoundary(operation, e))
