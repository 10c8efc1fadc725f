/**
 * 0014: the client's tools (issue 9, item 2).
 *
 * - `thread_tools`: the tools a thread declared at creation (JSON array of `ClientTool`), offered by every run.
 * - `run_tools`: the tools one run offers (the thread's merged with its message's), written when the run is queued;
 *   no row: the run offers none.
 * - `tool_waits`: a run's wait for the client's tool results (one row per run, rewritten at each round): the open
 *   calls, the held tool unit, the results once posted, the deadline (ISO-8601 UTC text, compared as text).
 * - `runs_thread_unfinished` is rebuilt to hold `waiting` runs too: a waiting run blocks its thread's queue, and the
 *   partial index's condition must be written exactly as the queries write it (SQLite uses it only then).
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE thread_tools (
    thread_id TEXT PRIMARY KEY REFERENCES threads(id),
    tools TEXT NOT NULL
  )`
  yield* sql`CREATE TABLE run_tools (
    run_id TEXT PRIMARY KEY REFERENCES runs(id),
    tools TEXT NOT NULL
  )`
  yield* sql`CREATE TABLE tool_waits (
    run_id TEXT PRIMARY KEY REFERENCES runs(id),
    thread_id TEXT NOT NULL REFERENCES threads(id),
    native_thread_id TEXT NOT NULL,
    state TEXT NOT NULL,
    calls TEXT NOT NULL,
    held TEXT NOT NULL,
    results TEXT,
    round INTEGER NOT NULL,
    deadline_at TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
  )`
  yield* sql`CREATE INDEX tool_waits_state ON tool_waits (state, deadline_at)`
  yield* sql`DROP INDEX runs_thread_unfinished`
  yield* sql`CREATE INDEX runs_thread_unfinished ON runs (thread_id, seq)
    WHERE status IN ('queued', 'starting', 'running', 'waiting')`
})
