/**
 * 0007: what two processes on one database must agree on, moved out of process memory.
 *
 * - `threads.lock_version`: the row every unit of work on a thread writes first. On SQLite that first write takes
 *   the database's write lock before any read (the effect of `BEGIN IMMEDIATE`: a second process waits under the busy
 *   timeout instead of failing with `SQLITE_BUSY_SNAPSHOT`); on Postgres the thread row is locked `FOR UPDATE`.
 * - `database_lock`: one row that a SQLite unit of work concerning no existing thread (creating a thread, process
 *   bookkeeping) writes first, for the same reason. Postgres needs no such lock (unique keys decide those races).
 * - `drivers`: one row per orchestrator incarnation (a process, or a restart of the orchestrator within one), with
 *   its host, pid and heartbeat, so restart recovery reconciles only the runs of drivers that are gone.
 * - `runs.driver_id`: the driver that accepted (and drives) the run.
 * - `native_threads.session_driver_id` / `replay_window`: which driver holds a live provider session on a native
 *   thread (any other resumes it before use), and whether the next turn's output may replay its history.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE threads ADD COLUMN lock_version INTEGER NOT NULL DEFAULT 0`
  yield* sql`CREATE TABLE database_lock (id INTEGER PRIMARY KEY, version INTEGER NOT NULL)`
  yield* sql`INSERT INTO database_lock (id, version) VALUES (1, 0)`
  yield* sql`CREATE TABLE drivers (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    heartbeat_at TEXT NOT NULL,
    stopped_at TEXT
  )`
  yield* sql`ALTER TABLE runs ADD COLUMN driver_id TEXT`
  yield* sql`CREATE INDEX runs_unfinished ON runs (status, driver_id)`
  yield* sql`ALTER TABLE native_threads ADD COLUMN session_driver_id TEXT`
  yield* sql`ALTER TABLE native_threads ADD COLUMN replay_window INTEGER NOT NULL DEFAULT 0`
})
