/**
 * Database: the SQL client Layers, one schema on two dialects. SQLite (the embedded default, one process) keeps one
 * file under the data directory in WAL mode; the data directory defaults to `./.baton/` and is overridden by
 * `--data-dir` or `BATON_DATA_DIR`. Postgres (`BATON_DATABASE_URL`, or `--database-url`) serves several processes on
 * one database. Column names are snake_case in SQL and camelCase in code (the client transforms both ways).
 * Migrations run when the Layer is built, safely when several processes start at once.
 */
import { PersistenceError } from "@baton/contracts"
import * as Reactivity from "@effect/experimental/Reactivity"
import { SqlClient, Statement } from "@effect/sql"
import type { Migrator } from "@effect/sql"
import type { Connection } from "@effect/sql/SqlConnection"
import type { SqlError } from "@effect/sql/SqlError"
import type * as ConfigError from "effect/ConfigError"
import type { YieldWrap } from "effect/Utils"
import { PgClient } from "@effect/sql-pg"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { Cause, Config, Context, Data, Duration, Effect, Layer, Option, Redacted, Schedule } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { names } from "./internal/Names.js"
import * as Migrations from "./Migrations.js"
import * as WalCheckpointer from "./WalCheckpointer.js"

/** What building a database Layer can fail with: the server unreachable, the file unusable, a migration failing. */
export type DatabaseError = PersistenceError | SqlError | Migrator.MigrationError | MigrationsIncomplete | ConfigError.ConfigError

/** The default data directory, relative to the working directory. */
export const defaultDataDir = ".baton"
/** The SQLite file name inside the data directory. */
export const sqliteFileName = "baton.sqlite"

/** Resolves the SQLite file: an explicit `--db` path wins, then `dataDir`, then `BATON_DATA_DIR`, then `./.baton`. */
export const resolveSqlitePath = (options: { readonly db?: string | undefined; readonly dataDir?: string | undefined }) =>
  options.db ?? Path.join(options.dataDir ?? process.env.BATON_DATA_DIR ?? defaultDataDir, sqliteFileName)


/** A directory that `makeDirectories` could not create: `path` the level that failed, `code` the system's (`ENOENT`, ...). */
export class DirectoryNotMade extends Data.TaggedError("DirectoryNotMade")<{
  readonly path: string
  readonly code: string
  readonly message: string
}> {}

const notMade = (path: string) => (e: unknown) => {
  const code = (e as NodeJS.ErrnoException).code
  return new DirectoryNotMade({ path, code: code ?? "UNKNOWN", message: e instanceof Error ? e.message : String(e) })
}

const isDirectory = (path: string) => Fs.statSync(path, { throwIfNoEntry: false })?.isDirectory() === true

/**
 * Creates directory `dir` and its missing ancestors (`mkdir -p`), one level at a time from the nearest ancestor that
 * exists. Fails with `DirectoryNotMade` naming the first level that cannot be created (`ENOENT`, `EACCES`,
 * `ENOTDIR`, ...), or `EEXIST` when `dir` itself is a file; a level made meanwhile by another process is fine.
 * Node's `mkdirSync(dir, { recursive: true })` is not used: under a pseudo-filesystem such as `/proc`, where `mkdir`
 * answers `ENOENT` though the parent exists, Node 20's recursive mode retries forever (`baton serve --data-dir
 * /proc/x` hung without a word).
 */
export const makeDirectories = (dir: string): Effect.Effect<void, DirectoryNotMade> =>
  Effect.gen(function*() {
    const target = Path.resolve(dir)
    const missing: Array<string> = []
    for (let at = target; !Fs.existsSync(at);) {
      missing.unshift(at)
      const parent = Path.dirname(at)
      if (parent === at) break
      at = parent
    }
    for (const level of missing) {
      yield* Effect.try({ try: () => Fs.mkdirSync(level), catch: notMade(level) }).pipe(
        Effect.catchIf((e) => e.code === "EEXIST" && isDirectory(level), () => Effect.void)
      )
    }
    if (!isDirectory(target)) {
      // Found by a newcomer's walk (b45ux): `--data-dir FILE` said "EEXIST: file already exists, mkdir 'FILE'".
      return yield* new DirectoryNotMade({ path: target, code: "EEXIST", message: `${target} is a file, not a directory` })
    }
  })

/**
 * Runs the migrations until every registered one is recorded. Two processes starting on one fresh database race:
 * on Postgres the Migrator locks its table; on SQLite the loser of the race reports "already running" and would go
 * on with a half-made schema, so the applied ids are checked and the run retried (every 50 ms, up to 30 s) until the
 * winner has committed. A database already at the latest migration (every start but the first) costs one read: the
 * Migrator would apply nothing there (it applies the ids above the highest recorded, and records each in the
 * transaction that applies it), so it is not run (its table creation, transaction and lock cost about 5 ms per
 * start, measured over the simulator's crash-restarts). Fails with `MigrationError`/`SqlError`.
 */
const migrate = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const latest = Math.max(...Object.keys(Migrations.migrations).map((k) => Number(k.slice(0, k.indexOf("_")))))
  const applied = Effect.map(
    sql<{ readonly latest: number | string | null }>`SELECT MAX(migration_id) AS latest FROM effect_sql_migrations`,
    (rows) => Number(rows[0]?.latest ?? 0)
  )
  // A fresh database has no migrations table yet: the read fails and the Migrator makes it. Not `applied`'s text:
  // the SQLite client caches a statement that failed to prepare by its text, and `applied` runs again below.
  const known = yield* Effect.option(
    sql<{ readonly known: number | string | null }>`SELECT MAX(migration_id) AS known FROM effect_sql_migrations`
  )
  if (known._tag === "Some" && Number(known.value[0]?.known ?? 0) >= latest) return
  const once = Effect.gen(function*() {
    yield* Migrations.run
    const n = yield* applied
    if (n < latest) return yield* new MigrationsIncomplete({ applied: n, latest })
  })
  yield* Effect.retry(once, {
    schedule: Schedule.spaced(Duration.millis(50)).pipe(Schedule.upTo(Duration.seconds(30)))
  })
})

/** Another process is still applying the migrations (internal; retried by `migrate`). */
export class MigrationsIncomplete extends Data.TaggedError("MigrationsIncomplete")<{
  readonly applied: number
  readonly latest: number
}> {}

/**
 * `PersistenceError` (`database.open`) for a SQLite file the driver cannot open: better-sqlite3 throws from its
 * constructor and its first pragma (a directory, a file that is not SQLite), which was a defect (`baton serve`
 * printed "unexpected failure: SqliteError: …" and exited 1). Any other cause is passed on.
 */
const openError = (filename: string) => <E>(cause: Cause.Cause<E>): Layer.Layer<unknown, E | PersistenceError> =>
  Option.match(Cause.dieOption(cause), {
    onNone: () => Layer.failCause(cause),
    onSome: (defect) =>
      Layer.fail(new PersistenceError({
        operation: "database.open",
        detail: openFailureDetail(filename, defect instanceof Error ? defect.message : String(defect), writable)
      }))
  })

/** Whether this process may write `path` (an existing file or directory; false when it does not exist). */
const writable = (path: string): boolean => {
  try {
    Fs.accessSync(path, Fs.constants.W_OK)
    return true
  } catch {
    return false
  }
}

/**
 * The detail of `database.open`'s `PersistenceError` for `filename`, which the driver refused with `driverMessage`,
 * naming what cannot be written when that is why: the database file, or its directory (SQLite in WAL mode writes its
 * `-wal` and `-shm` files beside the database, even to read it). `canWrite(path)`: whether an existing path is
 * writable (false for a missing one). Found by a newcomer's walk (b45ux): a database in a read-only directory (a
 * read-only mount) said only "unable to open database file", as a path that is no database does.
 */
export const openFailureDetail = (filename: string, driverMessage: string, canWrite: (path: string) => boolean): string => {
  const base = `cannot open ${filename} as a SQLite database (${driverMessage})`
  if (!/unable to open database file|readonly database/.test(driverMessage)) return base
  const directory = Path.dirname(Path.resolve(filename))
  const isDirectory = Fs.existsSync(filename) && Fs.statSync(filename).isDirectory()
  if (isDirectory || !Fs.existsSync(directory)) return base
  if (!canWrite(directory)) {
    return `${base}: its directory ${directory} is read-only (SQLite writes the database's -wal and -shm files beside it)`
  }
  if (Fs.existsSync(filename) && !canWrite(filename)) return `${base}: the file is read-only`
  return base
}

/**
 * A SQLite client on `filename` (`:memory:` allowed) with migrations applied. Creates the parent directory.
 * Fails with `PersistenceError` (`database.open`) when the file cannot be opened (its directory not created, a
 * directory, not a SQLite file), `SqlError`/`MigrationError` when it cannot be migrated.
 */
export const layerSqlite = (filename: string): Layer.Layer<SqlClient.SqlClient, DatabaseError> =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    // WAL with synchronous=NORMAL: a commit survives a process crash (the durability Baton's recovery relies
    // on); only a power loss can roll back the last commits. SQLite's recommended setting for WAL mode.
    // busy_timeout: a second process writing the same file waits for the lock (up to 5 s) instead of failing;
    // every unit of work writes first (see UnitOfWork), so the wait applies.
    yield* sql`PRAGMA synchronous = NORMAL`
    yield* sql`PRAGMA busy_timeout = 5000`
    // Checkpoints run on WalCheckpointer's worker thread, not inside a commit on the event loop's thread; the
    // connection's own automatic checkpoint stays as a safety net at a higher threshold.
    if (filename !== ":memory:") yield* sql.unsafe(`PRAGMA wal_autocheckpoint = ${WalCheckpointer.fallbackPages}`)
    yield* migrate
    if (filename !== ":memory:") yield* WalCheckpointer.hold(filename)
  })).pipe(
    Layer.provideMerge(
      Layer.unwrapEffect(
        (filename === ":memory:" ? Effect.void : makeDirectories(Path.dirname(Path.resolve(filename))).pipe(Effect.orDie)).pipe(
          Effect.as(SqliteClient.layer({ filename, ...names }))
        )
      ).pipe(Layer.catchAllCause(openError(filename)))
    )
  )

/** Options of `layerPg`: the connection URL and the pool size (default 10 connections). */
export interface PgOptions {
  readonly url: string
  readonly maxConnections?: number
}

/** Whether `url` is a URL of the `postgres:` or `postgresql:` scheme (what the Postgres driver connects to). */
const isPostgresUrl = (url: string): boolean => {
  if (!URL.canParse(url)) return false
  const protocol = new URL(url).protocol
  return protocol === "postgres:" || protocol === "postgresql:"
}

/**
 * A Postgres client on `url` (e.g. `postgres://user@127.0.0.1:5432/baton`; a `?options=-c%20search_path%3DS` suffix
 * selects a schema) with migrations applied. Integer aggregates (`COUNT`, `MAX`) come back as numbers or strings
 * and every repository decodes both. Its statements run uninterruptibly (see `uninterruptibleStatements`); the
 * `PgClient` it also provides serves LISTEN/NOTIFY only. Fails with `SqlError` (unreachable server) or
 * `MigrationError`, and with `PersistenceError` (`database.connect`) for a `url` not of the `postgres:` or
 * `postgresql:` scheme, before any connection is tried.
 */
export const layerPg = (options: PgOptions): Layer.Layer<SqlClient.SqlClient, DatabaseError> =>
  !isPostgresUrl(options.url)
    // Found by a newcomer's walk (b46ux): `--database-url notaurl` was tried as a connection and reported as
    // "getaddrinfo ENOTFOUND base" (the driver's reading of it), naming nothing the user wrote.
    ? Layer.fail(new PersistenceError({
      operation: "database.connect",
      detail: `${withoutPassword(options.url)} is not a Postgres URL (e.g. postgres://user@127.0.0.1:5432/baton)`
    }))
    : Layer.effectDiscard(migrate).pipe(
      Layer.provideMerge(uninterruptibleStatements),
      Layer.provide(PgClient.layer({
        url: Redacted.make(options.url),
        maxConnections: options.maxConnections ?? 10,
        applicationName: "baton",
        ...names
      }).pipe(Layer.mapError((e) => new PersistenceError({ operation: "database.connect", detail: connectDetail(options.url, e) }))))
    )

/**
 * A connection whose statements cannot be interrupted: an interruption that arrives while a statement runs (or
 * waits for its connection) takes effect once the statement has finished. Streams (`executeStream`, a cursor) are
 * passed through: `@effect/sql-pg` never cancels a cursor's read, it closes the cursor.
 */
const uninterruptibleConnection = (conn: Connection): Connection => ({
  execute: (sql, params, transformRows) => Effect.uninterruptible(conn.execute(sql, params, transformRows)),
  executeRaw: (sql, params) => Effect.uninterruptible(conn.executeRaw(sql, params)),
  executeValues: (sql, params) => Effect.uninterruptible(conn.executeValues(sql, params)),
  executeUnprepared: (sql, params, transformRows) => Effect.uninterruptible(conn.executeUnprepared(sql, params, transformRows)),
  executeStream: (sql, params, transformRows) => conn.executeStream(sql, params, transformRows)
})

/**
 * Baton's `SqlClient` on Postgres: `@effect/sql-pg`'s pool, compiler and name transforms, with every statement
 * uninterruptible, and the `PgClient` passed on (for LISTEN; its own statements keep the driver's behaviour).
 *
 * Why: `@effect/sql-pg` (0.53) answers the interruption of a running statement by sending
 * `SELECT pg_cancel_backend(pid)` through the same pool (waiting at most 5 s) and releasing the connection. A
 * statement outside a transaction releases its connection as soon as it completes, and a cancel that timed out is
 * never withdrawn from the pool's queue; so when the pool is busy the cancel runs later, on another connection,
 * and cancels whatever the backend `pid` runs by then: another request's statement, which fails with 57014
 * (query_canceled). A client closing an event stream, or any request, mid-statement was enough (the fuzz test saw
 * it in `threads.insert`, `threads.get`, `ThreadService.queueRun`). A cancel aimed at one statement cannot be made
 * safe from outside the driver (a backend is addressed by pid, not by statement), so Baton never issues one:
 * Baton's statements are short (point reads, pages, one thread's writes), and an interrupted request now waits
 * for its statement to finish, then stops at the next statement boundary (a unit of work rolls back as before;
 * `withTransaction` already runs BEGIN/COMMIT/ROLLBACK uninterruptibly).
 *
 * How: a client is built with `SqlClient.make` whose connections come from `PgClient.reserve` (one pooled
 * connection per statement, or per transaction), acquired uninterruptibly (the driver's acquire has no canceller:
 * interrupted while waiting for the pool, it would leak the connection) and wrapped by `uninterruptibleConnection`.
 * Cost: an interruption (a closed stream, a shutdown) can wait for one statement, including a row lock a unit of
 * work waits for (`SELECT … FOR UPDATE`, held only for another unit of work's short transaction).
 */
const uninterruptibleStatements: Layer.Layer<SqlClient.SqlClient | PgClient.PgClient, never, PgClient.PgClient> = Layer.effectContext(
  Effect.gen(function*() {
    const pg = yield* PgClient.PgClient
    const acquirer = Effect.uninterruptible(Effect.map(pg.reserve, uninterruptibleConnection))
    const client = yield* SqlClient.make({
      acquirer,
      transactionAcquirer: acquirer,
      compiler: PgClient.makeCompiler(names.transformQueryNames),
      transformRows: Statement.defaultTransforms(names.transformResultNames).array,
      // The driver's own span attributes (OpenTelemetry database conventions).
      spanAttributes: [
        ["db.system.name", "postgresql"],
        ["db.namespace", pg.config.database ?? pg.config.username ?? "postgres"],
        ["server.address", pg.config.host ?? "localhost"],
        ["server.port", pg.config.port ?? 5432]
      ]
    })
    return Context.make(PgClient.PgClient, pg).pipe(Context.add(SqlClient.SqlClient, client))
  })
).pipe(Layer.provide(Reactivity.layer))

/**
 * Why a Postgres connection failed, for a person: the driver's code and message (`ECONNREFUSED 127.0.0.1:5999`,
 * `database "x" does not exist`, an invalid URL), and the URL without its password.
 */
const connectDetail = (url: string, e: { readonly message: string; readonly cause?: unknown }) => {
  const cause = e.cause as { readonly code?: unknown; readonly message?: unknown } | undefined
  const why = cause?.message === undefined ? e.message : `${cause.code === undefined ? "" : `${String(cause.code)}: `}${String(cause.message)}`
  return `cannot connect to ${withoutPassword(url)}: ${why}`
}

/**
 * `url` with its password replaced by `***`, read as the URL parser reads it: a password may hold a raw `@` (the
 * last `@` before the host ends the user information), and the regular expression used before stopped at the first,
 * showing the rest (`postgres://baton:p@ss@host` was shown as `postgres://baton:***@ss@host`). A string that does not
 * parse as a URL (a mistyped scheme, a password with a `/`, a libpq key=value string) has everything between `//` and
 * its last `@` hidden, and every `password=` value (review r46: `host=db password=s3cret` and
 * `postgress://baton:pa/ss@db` were shown whole in the "not a Postgres URL" message).
 */
const withoutPassword = (url: string): string => {
  // A `password=` value hidden anywhere: libpq's key=value form, and a URL's query (`?password=…`, which the driver reads).
  const masked = (text: string) => text.replace(/(password\s*=\s*)('[^']*'|"[^"]*"|[^&\s]*)/gi, "$1***")
  if (!URL.canParse(url)) return masked(url.replace(/\/\/[^@]*@/, "//***@"))
  const parsed = new URL(url)
  if (parsed.password !== "") parsed.password = "***"
  return masked(parsed.password === "" ? url : parsed.href)
}

/** What the apps may override of the configuration: `--database-url`, `--db`, `--data-dir`. */
export interface DatabaseOverrides {
  readonly databaseUrl?: string | undefined
  readonly db?: string | undefined
  readonly dataDir?: string | undefined
}

/**
 * The Postgres URL the configuration selects, or `undefined` for SQLite: `overrides.databaseUrl`, else
 * `BATON_DATABASE_URL` (Effect `Config`) when neither `db` nor `dataDir` names a SQLite file. Fails with
 * `ConfigError` only when the variable cannot be read.
 */
export const configuredDatabaseUrl = (overrides: DatabaseOverrides = {}) =>
  Effect.gen(function*() {
    if (overrides.databaseUrl !== undefined) return overrides.databaseUrl
    if (overrides.db !== undefined || overrides.dataDir !== undefined) return undefined
    const url = Option.getOrUndefined(yield* Config.option(Config.string("BATON_DATABASE_URL")))
    return url === "" ? undefined : url
  })

/**
 * The database from configuration: Postgres at `configuredDatabaseUrl(overrides)` when there is one, else SQLite at
 * `overrides.db`, else `BATON_DATA_DIR/baton.sqlite` (default `./.baton/baton.sqlite`).
 */
export const layerFromConfig = (overrides: DatabaseOverrides = {}) =>
  Layer.unwrapEffect(Effect.gen(function*(): Generator<
    YieldWrap<Effect.Effect<string | undefined | Option.Option<string>, ConfigError.ConfigError>>,
    Layer.Layer<SqlClient.SqlClient, DatabaseError>
  > {
    const url = yield* configuredDatabaseUrl(overrides)
    if (url !== undefined) return layerPg({ url })
    const dataDir = overrides.dataDir ?? Option.getOrUndefined(yield* Config.option(Config.string("BATON_DATA_DIR")))
    return layerSqlite(overrides.db ?? Path.join(dataDir ?? defaultDataDir, sqliteFileName))
  }))

/** The Postgres server tests and benchmarks use: `BATON_TEST_DATABASE_URL`, else the local server's `test` database. */
export const testPgUrl = () => process.env.BATON_TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test"

let isolatedCount = 0

/**
 * Whether the databases and schemas made for tests (`layerPgSchema`, `layerPgCopy`) run with `synchronous_commit`
 * off: `BATON_TEST_PG_SYNC_COMMIT=off`, set by the test runner's global setup (`vitest.global-setup.ts`), not by
 * benchmarks (their figures are for the server's default, a commit waiting for its WAL flush).
 *
 * Why: a commit then returns without waiting for the WAL to reach the disk. Visibility, locks and isolation are the
 * same; only a crash of the Postgres server itself could lose the newest commits, which no test does (the tests
 * crash Baton's processes, never the server). With the server's disk shared by the whole suite (and by other
 * processes on the machine), the flush was most of a Postgres test's time: `Offload.test.ts`'s Postgres property
 * (25 scenarios) took 75 s with it and 38 s without it, back to back at a load of 9-13.
 */
export const testPgAsyncCommit = (): boolean => process.env.BATON_TEST_PG_SYNC_COMMIT === "off"

/** The URL of a Postgres schema made by `layerPgSchema`: `layerPg({ url })` connects to it. */
export class PgSchemaUrl extends Context.Tag("@baton/persistence/PgSchemaUrl")<PgSchemaUrl, string>() {}

/**
 * A fresh, empty schema `baton_t_<pid>_<n>_<random>` on the Postgres server at `url` (default `testPgUrl()`), for
 * tests and benchmarks, dropped (`CASCADE`) when the Layer is released. Provides the schema's URL (`PgSchemaUrl`,
 * with `synchronous_commit=off` among its options under `testPgAsyncCommit`),
 * so several Layer builds (a restart, a second process) can share it. Fails with `SqlError` when the server is
 * unreachable (CI starts it; see `.ci/run`).
 */
export const layerPgSchema = (url: string = testPgUrl()) => {
  const schema = `baton_t_${process.pid}_${++isolatedCount}_${Math.random().toString(36).slice(2, 8)}`
  const separator = url.includes("?") ? "&" : "?"
  const options = `-c search_path=${schema}${testPgAsyncCommit() ? " -c synchronous_commit=off" : ""}`
  const schemaUrl = `${url}${separator}options=${encodeURIComponent(options)}`
  return Layer.scoped(
    PgSchemaUrl,
    Effect.as(
      Effect.acquireRelease(
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE SCHEMA ${sql(schema)}`),
        () => Effect.flatMap(SqlClient.SqlClient, (sql) => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`).pipe(Effect.orDie)
      ),
      schemaUrl
    )
  ).pipe(Layer.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 1 })))
}

/**
 * The name of a migrated Postgres database on the `testPgUrl()` server that `layerPgIsolated` copies instead of
 * migrating a fresh schema: `BATON_TEST_PG_TEMPLATE`, set by the test runner's global setup
 * (`vitest.global-setup.ts`, one per run, dropped after it); `undefined` when unset.
 *
 * Why: migrating an empty schema is about 150 DDL statements, 1.3 s of the Postgres server's time on a 2-core machine
 * (the same statements replayed by psql in one transaction take as long), paid by every Postgres test; copying a
 * migrated database (`CREATE DATABASE … TEMPLATE`, WAL-logged) and dropping it take about 0.3 s and 0.2 s.
 */
export const testPgTemplate = (): string | undefined => process.env.BATON_TEST_PG_TEMPLATE || undefined

/**
 * The URL of `database` on the server of `url` (its path replaced; its query, e.g. a `search_path` option, dropped).
 */
export const pgDatabaseUrl = (url: string, database: string): string => {
  const parsed = new URL(url)
  parsed.pathname = `/${database}`
  parsed.search = ""
  return parsed.toString()
}

/**
 * A fresh database `baton_t_<pid>_<n>_<random>` on the Postgres server at `url`, a copy of the migrated database
 * `template` (`CREATE DATABASE … TEMPLATE`: no session may be connected to the template meanwhile), with
 * `synchronous_commit` off under `testPgAsyncCommit`, dropped `WITH (FORCE)` when the Layer is released. Provides its URL (as `PgSchemaUrl`: its tables are in its `public`
 * schema). Fails with `SqlError` when the server is unreachable or the template is missing.
 */
export const layerPgCopy = (template: string, url: string = testPgUrl()) => {
  const database = `baton_t_${process.pid}_${++isolatedCount}_${Math.random().toString(36).slice(2, 8)}`
  return Layer.scoped(
    PgSchemaUrl,
    Effect.as(
      Effect.acquireRelease(
        Effect.flatMap(SqlClient.SqlClient, (sql) =>
          Effect.zipRight(
            sql`CREATE DATABASE ${sql(database)} TEMPLATE ${sql(template)}`,
            // Every session on it, a spawned process's too (a template's settings are not copied).
            testPgAsyncCommit() ? sql`ALTER DATABASE ${sql(database)} SET synchronous_commit = off` : Effect.void
          )),
        () => Effect.flatMap(SqlClient.SqlClient, (sql) => sql`DROP DATABASE IF EXISTS ${sql(database)} WITH (FORCE)`).pipe(Effect.orDie)
      ),
      pgDatabaseUrl(url, database)
    )
  ).pipe(Layer.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 1 })))
}

/** Runs `f` with a one-connection client on the Postgres server at `url` (its database as the URL names it). */
const onPgServer = <A, E>(url: string, f: (sql: SqlClient.SqlClient) => Effect.Effect<A, E>) =>
  Effect.scoped(Effect.flatMap(SqlClient.SqlClient, f).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 1 }))))

/**
 * Makes the migrated database `baton_tmpl_<pid>_<random>` on the Postgres server at `url` for `testPgTemplate` (the
 * test runner names it in `BATON_TEST_PG_TEMPLATE`) and closes its connections (a template must have none while it
 * is copied). Yields its name. Fails with `SqlError` (unreachable server) or `MigrationError`; a failed migration
 * leaves the database to `dropPgDatabase`.
 */
export const makePgTemplate = (url: string = testPgUrl()) => {
  const name = `baton_tmpl_${process.pid}_${Math.random().toString(36).slice(2, 8)}`
  return onPgServer(url, (sql) => sql`CREATE DATABASE ${sql(name)}`).pipe(
    Effect.zipRight(Effect.scoped(Layer.build(layerPg({ url: pgDatabaseUrl(url, name), maxConnections: 1 })))),
    Effect.as(name)
  )
}

/** Drops the database `name` on the Postgres server at `url`, its sessions ended (`WITH (FORCE)`). */
export const dropPgDatabase = (name: string, url: string = testPgUrl()) =>
  onPgServer(url, (sql) => sql`DROP DATABASE IF EXISTS ${sql(name)} WITH (FORCE)`).pipe(Effect.asVoid)

/**
 * A Postgres database of its own for one test or benchmark, migrated, dropped when released: a copy of the migrated
 * `testPgTemplate()` when there is one and `url` is `testPgUrl()` (`layerPgCopy`), else `layerPg` on a fresh
 * `layerPgSchema`, migrated. Fails with `SqlError` when the server is unreachable.
 */
export const layerPgIsolated = (url: string = testPgUrl()) => {
  const template = testPgTemplate()
  return Layer.unwrapEffect(Effect.map(PgSchemaUrl, (schemaUrl) => layerPg({ url: schemaUrl, maxConnections: 4 }))).pipe(
    Layer.provide(template !== undefined && url === testPgUrl() ? layerPgCopy(template, url) : layerPgSchema(url))
  )
}
