/**
 * 0024: `native_threads.held_at_least`, the least a native thread holds by the provider's own count (provider tokens),
 * learned from a request the provider rejected as over its window: the size it gave for the rejected request less
 * what that request added. Later usage reports do not lower it (a report can be stale: the simulator's seed 9101 sent
 * the very injection the native thread had rejected again, after a stale report said it was nearly empty); a
 * compaction clears it. `NULL`: nothing rejected (every native thread written before this migration).
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE native_threads ADD COLUMN held_at_least INTEGER`
})
