/**
 * NativeMessageStore: the repository of model-API native threads' message lists (table `native_messages`, migration
 * 0011). It implements `@baton/providers`' `NativeMessageLog` port structurally (this package does not depend on the
 * providers package; the app provides `make` under that tag). It owns SQL and row encoding only: what an entry means
 * is the adapter's.
 *
 * `body` is stored and read back as the exact text the adapter wrote: a request rebuilt after a restart is
 * byte-identical to the one the process would have sent.
 */
import { type ConcurrentModification, ContextUsage, PersistenceError } from "@baton/contracts"
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { orPersistence, toBoundary } from "./internal/errors.js"

/** A read's failure: always a `PersistenceError` naming the operation (a read has no race to report). */
const readFailure = (operation: string) => (e: { readonly message?: string; readonly _tag?: string; readonly cause?: unknown }) => {
  const mapped = toBoundary(operation, e)
  return mapped._tag === "PersistenceError" ? mapped : new PersistenceError({ operation, detail: "the database was busy" })
}

/** An entry of a native thread's message list (see `@baton/providers` NativeMessageLog.NativeEntry). */
export interface NativeEntry {
  readonly seq: number
  readonly kind: "turn" | "history" | "output" | "tool_results" | "offload"
  readonly runId: string | null
  readonly deliveryIds: ReadonlyArray<string>
  readonly usage: ContextUsage | null
  readonly body: string
}

const Row = Schema.Struct({
  seq: Schema.Int,
  kind: Schema.Literal("turn", "history", "output", "tool_results", "offload"),
  runId: Schema.NullOr(Schema.String),
  deliveryIds: Schema.parseJson(Schema.Array(Schema.String)),
  usage: Schema.NullOr(Schema.parseJson(ContextUsage)),
  body: Schema.String
})

/** The repository's operations (the `NativeMessageLog` shape). */
export interface NativeMessageStoreShape {
  /** Appends entries; a `seq` already taken fails with `ConcurrentModification`, any other fault `PersistenceError`. */
  readonly append: (
    providerInstance: string,
    nativeRef: string,
    entries: ReadonlyArray<NativeEntry>
  ) => Effect.Effect<void, PersistenceError | ConcurrentModification>
  /** Entries with `seq > afterSeq`, in `seq` order. */
  readonly load: (nativeRef: string, afterSeq: number) => Effect.Effect<ReadonlyArray<NativeEntry>, PersistenceError>
  /** The highest `seq` stored for `nativeRef`, 0 when none. */
  readonly lastSeq: (nativeRef: string) => Effect.Effect<number, PersistenceError>
}

/** Builds the repository on the ambient `SqlClient` (SQLite or Postgres; the same statements on both). */
export const make: Effect.Effect<NativeMessageStoreShape, never, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const loadRows = SqlSchema.findAll({
    Request: Schema.Struct({ nativeRef: Schema.String, afterSeq: Schema.Int }),
    Result: Row,
    execute: ({ afterSeq, nativeRef }) =>
      sql`SELECT seq, kind, run_id, delivery_ids, usage, body FROM native_messages
        WHERE native_ref = ${nativeRef} AND seq > ${afterSeq} ORDER BY seq`
  })
  return {
    append: (providerInstance, nativeRef, entries) =>
      entries.length === 0 ? Effect.void : sql`INSERT INTO native_messages ${
        sql.insert(entries.map((e) => ({
          nativeRef,
          seq: e.seq,
          providerInstance,
          kind: e.kind,
          runId: e.runId,
          deliveryIds: JSON.stringify(e.deliveryIds),
          usage: e.usage === null ? null : JSON.stringify(e.usage),
          body: e.body
        })))
      }`.pipe(Effect.asVoid, orPersistence("nativeMessages.append")),
    load: (nativeRef, afterSeq) =>
      Effect.mapError(loadRows({ nativeRef, afterSeq }), readFailure("nativeMessages.load")),
    lastSeq: (nativeRef) =>
      sql<{ readonly last: number | string | null }>`SELECT MAX(seq) AS last FROM native_messages WHERE native_ref = ${nativeRef}`.pipe(
        Effect.map((rows) => Number(rows[0]?.last ?? 0)),
        Effect.mapError(readFailure("nativeMessages.lastSeq"))
      )
  }
})
