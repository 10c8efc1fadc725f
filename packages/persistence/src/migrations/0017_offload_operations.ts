/**
 * 0017: `/offload` operations (issue 12 items 1, 5, 7): one row per operation id, written when the operation begins
 * (`status` `running`: the summariser's charge is prepared before the first call) and completed in the unit of work
 * of its outcome (`offloaded`, `nothing`, `stale`, `cancelled`, `failed`; `result` the JSON of its `OffloadReport`).
 * The summariser's billed tokens and their price are kept with it, `cost_state` `committed` with an offload that
 * committed, `abandoned` otherwise (never lost: a thread's cost totals add both). `fingerprint` is the request's
 * payload fingerprint: the same id with another payload is refused.
 *
 * `offloads.undone_at`: when the offload was undone (`POST /threads/{id}/offload/undo`), else `NULL`. An undone
 * offload is no longer part of the summary chain; its summary item stays in the log.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE offload_operations (
    operation_id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL REFERENCES threads(id),
    fingerprint TEXT NOT NULL,
    status TEXT NOT NULL,
    result TEXT,
    provider_instance TEXT,
    calls INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cost_usd DOUBLE PRECISION,
    cost_state TEXT NOT NULL,
    created_at TEXT NOT NULL,
    finished_at TEXT
  )`
  yield* sql`CREATE INDEX offload_operations_thread ON offload_operations (thread_id)`
  yield* sql`ALTER TABLE offloads ADD COLUMN undone_at TEXT`
})
