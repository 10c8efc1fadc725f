/**
 * A thin typed table accessor: encodes domain values through their row schema on the way in and decodes rows on
 * the way out, mapping every failure to `PersistenceError` with the operation name.
 */
import type { ConcurrentModification, PersistenceError } from "@baton/contracts"
import type { SqlClient } from "@effect/sql"
import type { Statement } from "@effect/sql"
import { Effect, Option, type ParseResult, Schema } from "effect"
import { orPersistence } from "./errors.js"

export interface Table<A> {
  readonly insert: (value: A) => Effect.Effect<void, PersistenceError | ConcurrentModification>
  readonly insertMany: (values: ReadonlyArray<A>) => Effect.Effect<void, PersistenceError | ConcurrentModification>
  /** Replaces every column of the row with the same `id`. */
  readonly update: (value: A) => Effect.Effect<void, PersistenceError | ConcurrentModification>
  /**
   * `update`, in the same one statement answering `returning` (a `RETURNING …` fragment) for the row: its result
   * rows (none when no row has the `id`) through `decode`. Fails with `PersistenceError` named `operation`.
   */
  readonly updateReturning: <B>(
    value: A,
    returning: Statement.Fragment,
    decode: (rows: unknown) => Effect.Effect<B, ParseResult.ParseError>,
    operation: string
  ) => Effect.Effect<B, PersistenceError | ConcurrentModification>
  readonly findAll: (
    operation: string,
    query: Statement.Statement<unknown>
  ) => Effect.Effect<ReadonlyArray<A>, PersistenceError | ConcurrentModification>
  readonly findOne: (
    operation: string,
    query: Statement.Statement<unknown>
  ) => Effect.Effect<Option.Option<A>, PersistenceError | ConcurrentModification>
}

/**
 * `fast`: an optional decoder for well-formed rows (the schema's value, or `undefined` for a row it does not take:
 * then the whole result is decoded through `schema`, with its errors), e.g. `Tables.decodeItemRowFast`.
 */
export const make = <A, I extends { readonly id?: unknown }>(
  sql: SqlClient.SqlClient,
  name: string,
  schema: Schema.Schema<A, I>,
  fast?: (row: unknown) => A | undefined
): Table<A> => {
  const encode = Schema.encode(schema)
  const decodeSchema = Schema.decodeUnknown(Schema.Array(schema))
  const decodeAll = fast === undefined ? decodeSchema : (rows: unknown) => {
    if (!Array.isArray(rows)) return decodeSchema(rows)
    const out: Array<A> = new Array(rows.length)
    for (let i = 0; i < rows.length; i++) {
      const value = fast(rows[i])
      if (value === undefined) return decodeSchema(rows)
      out[i] = value
    }
    return Effect.succeed(out as ReadonlyArray<A>)
  }
  const insertMany = (values: ReadonlyArray<A>) =>
    values.length === 0 ? Effect.void : Effect.flatMap(
      Effect.forEach(values, (v) => encode(v)),
      (rows) => sql`INSERT INTO ${sql(name)} ${sql.insert(rows as ReadonlyArray<Record<string, unknown>>)}`
    ).pipe(Effect.asVoid, orPersistence(`${name}.insert`))
  /** The statement that replaces the encoded `row`'s columns (with `returning`, answering it). */
  const updateOf = (row: I, returning?: Statement.Fragment) => {
    const { id, ...rest } = row as Record<string, unknown>
    return returning === undefined
      ? sql`UPDATE ${sql(name)} SET ${sql.update(rest)} WHERE id = ${id as string}`
      : sql`UPDATE ${sql(name)} SET ${sql.update(rest)} WHERE id = ${id as string} ${returning}`
  }
  return {
    insert: (value) => insertMany([value]),
    insertMany,
    update: (value) => Effect.flatMap(encode(value), (row) => updateOf(row)).pipe(Effect.asVoid, orPersistence(`${name}.update`)),
    updateReturning: (value, returning, decode, operation) =>
      Effect.flatMap(encode(value), (row) => Effect.flatMap(updateOf(row, returning), decode)).pipe(orPersistence(operation)),
    findAll: (operation, query) => Effect.flatMap(query, decodeAll).pipe(orPersistence(operation)),
    findOne: (operation, query) =>
      Effect.flatMap(query, decodeAll).pipe(Effect.map((rows) => Option.fromNullable(rows[0])), orPersistence(operation))
  }
}
