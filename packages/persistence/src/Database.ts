/**
 * Database: the SQL client Layers. SQLite (the embedded default) keeps one file under the data directory in WAL
 * mode; the data directory defaults to `./.baton/` and is overridden by `--data-dir` or `BATON_DATA_DIR`. Column
 * names are snake_case in SQL and camelCase in code (the client transforms both ways). Migrations run when the
 * Layer is built.
 */
import { SqlClient } from "@effect/sql"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { Effect, Layer, String as Str } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import * as Migrations from "./Migrations.js"

/** The default data directory, relative to the working directory. */
export const defaultDataDir = ".baton"
/** The SQLite file name inside the data directory. */
export const sqliteFileName = "baton.sqlite"

/** Resolves the SQLite file: an explicit `--db` path wins, then `dataDir`, then `BATON_DATA_DIR`, then `./.baton`. */
export const resolveSqlitePath = (options: { readonly db?: string | undefined; readonly dataDir?: string | undefined }) =>
  options.db ?? Path.join(options.dataDir ?? process.env.BATON_DATA_DIR ?? defaultDataDir, sqliteFileName)

const names = { transformQueryNames: Str.camelToSnake, transformResultNames: Str.snakeToCamel }

/**
 * A SQLite client on `filename` (`:memory:` allowed) with migrations applied. Creates the parent directory.
 * Fails with `SqlError`/`MigrationError` when the file cannot be opened or migrated.
 */
export const layerSqlite = (filename: string) =>
  Layer.effectDiscard(Effect.zipRight(
    // WAL with synchronous=NORMAL: a commit survives a process crash (the durability Baton's recovery relies
    // on); only a power loss can roll back the last commits. SQLite's recommended setting for WAL mode.
    // busy_timeout: a second process writing the same file waits for the lock (up to 5 s) instead of failing.
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      Effect.zipRight(sql`PRAGMA synchronous = NORMAL`, sql`PRAGMA busy_timeout = 5000`)),
    Migrations.run
  )).pipe(
    Layer.provideMerge(
      Layer.unwrapEffect(Effect.sync(() => {
        if (filename !== ":memory:") Fs.mkdirSync(Path.dirname(Path.resolve(filename)), { recursive: true })
        return SqliteClient.layer({ filename, ...names })
      }))
    )
  )
