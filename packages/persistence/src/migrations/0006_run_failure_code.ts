/**
 * 0006: contracts ready for HTTP.
 * - `runs.failure_code`: why a run did not complete, as a `RunFailureCode` (read by code instead of matching the
 *   `failure_reason` prose). Nullable: runs that completed, are not over, or ended before this migration have none.
 * - `command_receipts.payload_fingerprint`: a fingerprint of the command's payload, so a command id reused with a
 *   different payload is rejected instead of returning the first command's result. Nullable: receipts written
 *   before this migration have none and are not checked.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE runs ADD COLUMN failure_code TEXT`
  yield* sql`ALTER TABLE command_receipts ADD COLUMN payload_fingerprint TEXT`
})
