/**
 * 0019: cancellation of an `/offload` operation across processes (issue 12 item 7). `driver_id` is the run driver
 * (the orchestrator incarnation, `drivers.id`) running the operation, written when it begins: another process tells
 * from it whether the operation is still running somewhere (`DriverRegistry` liveness) or was left by a process that
 * is gone. `cancel_requested_at` is when a client asked to cancel it (ISO 8601, else `NULL`), written by whichever
 * process received the cancellation; the process running it polls the row while its summary is being written and
 * ends it `cancelled`. Rows written before this migration have neither (`NULL`): their owner counts as gone.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE offload_operations ADD COLUMN driver_id TEXT`
  yield* sql`ALTER TABLE offload_operations ADD COLUMN cancel_requested_at TEXT`
})
