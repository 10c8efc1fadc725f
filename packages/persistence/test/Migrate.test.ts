/**
 * `Database.layerSqlite`'s migrations check: a fresh file is migrated; a file already at the latest migration (every
 * start but the first, and every crash-restart of the simulator) is opened with one read of the migrations table.
 */
import { Database, Migrations } from "@baton/persistence"
import { Migrator, SqlClient, Statement } from "@effect/sql"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

const tempFile = () => Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-migrate-")), "baton.sqlite")

/** Builds `layerSqlite(file)` and closes it; returns every statement it ran, as SQL text. */
const open = (file: string) =>
  Effect.gen(function*() {
    const ran: Array<string> = []
    yield* Effect.scoped(Layer.build(Database.layerSqlite(file))).pipe(
      Statement.withTransformer((statement) => Effect.sync(() => (ran.push(statement.compile()[0]), statement)))
    )
    return ran
  })

describe("migrations check", () => {
  it.live("a fresh file is migrated; at the latest migration the Migrator is not run, one read says so", () =>
    Effect.gen(function*() {
      const file = tempFile()
      const first = yield* open(file)
      expect(first.some((q) => q.includes("CREATE TABLE"))).toBe(true)
      const again = yield* open(file)
      expect(again.filter((q) => q.includes("effect_sql_migrations"))).toEqual([
        "SELECT MAX(migration_id) AS known FROM effect_sql_migrations"
      ])
      // Still at the latest migration, and usable.
      const ids = yield* Effect.scoped(Effect.flatMap(Layer.build(Database.layerSqlite(file)), (context) =>
        Effect.provide(Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ readonly n: number }>`SELECT COUNT(*) AS n FROM threads`), context)))
      expect(ids).toEqual([{ n: 0 }])
      Fs.rmSync(Path.dirname(file), { recursive: true, force: true })
    }))

  it.live("a file migrated by an earlier version (all but the latest migration) is migrated the rest of the way", () =>
    Effect.gen(function*() {
      const file = tempFile()
      const names = Object.keys(Migrations.migrations)
      const earlier = Object.fromEntries(names.slice(0, -1).map((name) => [name, Migrations.migrations[name as keyof typeof Migrations.migrations]]))
      yield* Effect.scoped(Effect.provide(
        Migrator.make({})({ loader: Migrator.fromRecord(earlier) }),
        SqliteClient.layer({ filename: file })
      ))
      const again = yield* open(file)
      // The latest migration's statements ran (0024: native_threads.held_at_least).
      expect(again.some((q) => q.includes("held_at_least"))).toBe(true)
      const rows = yield* Effect.scoped(Effect.flatMap(Layer.build(Database.layerSqlite(file)), (context) =>
        Effect.provide(Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql<{ readonly n: number }>`SELECT COUNT(*) AS n FROM effect_sql_migrations`), context)))
      expect(rows).toEqual([{ n: names.length }])
      Fs.rmSync(Path.dirname(file), { recursive: true, force: true })
    }))
})
