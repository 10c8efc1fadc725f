/**
 * 0009: a partial index of each thread's unfinished runs, in `seq` order.
 *
 * Queueing a run asks for the thread's active run and claiming one for its first unfinished run
 * (`status IN ('queued', 'starting', 'running')`, by `seq`). With only `(thread_id, seq)` and `(thread_id, status)`
 * to choose from, SQLite walked the thread's runs in `seq` order to the first unfinished one — every run of the
 * thread when none is active: 10,000 runs (100,000 items) cost about 10 ms per turn. The index holds only unfinished
 * runs (a handful per thread, whatever its length), so both reads cost the same on a thread of any length. The
 * condition is written exactly as the queries write it, which SQLite requires to use a partial index; Postgres
 * supports the same statement.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE INDEX runs_thread_unfinished ON runs (thread_id, seq)
    WHERE status IN ('queued', 'starting', 'running')`
})
