/**
 * 0015: a thread's tool-result offload control (issue 11 item 4): `thread_offload_controls` holds one row per thread
 * that set one (`control`: the JSON of `ToolResultOffloadControl`; no row: the thread inherits its provider
 * instance's settings). Rewritten whole by each `SetToolResultOffloadControl`.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE thread_offload_controls (
    thread_id TEXT PRIMARY KEY REFERENCES threads(id),
    control TEXT NOT NULL,
    updated_at TEXT NOT NULL
  )`
})
