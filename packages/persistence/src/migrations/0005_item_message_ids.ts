/**
 * 0005: an index on the provider's message id of items, so turn completion can recognise items a resumed native
 * thread replays (already recorded under the same message id) without scanning the thread.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE INDEX items_thread_message ON items (thread_id, message_id)`
})
