/**
 * 0023: `runs.interrupt_requested_at`, an interrupt asked of a process that does not drive the run (issue 7, two
 * server processes on one database): when a client asks one process to interrupt a `running` run whose driver
 * (`runs.driver_id`) is another live process, the first records the request here (ISO 8601; the first request's time
 * is kept) instead of ending the run itself, and the driving process, which polls the runs it has in flight, stops its
 * turn at the provider the way a local interrupt does and records the outcome. `NULL` otherwise (every run written
 * before this migration).
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE runs ADD COLUMN interrupt_requested_at TEXT`
})
