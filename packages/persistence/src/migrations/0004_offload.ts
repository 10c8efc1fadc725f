/**
 * 0004: `/offload` records. One row per offload pass: the summary item, the history it covers (every item with
 * `seq <= cut_seq` but offload summaries, as a chain through `previous_offload_id`), the items it summarised for the
 * first time and the tail it was asked to keep. `UNIQUE (thread_id, generation)` makes two concurrent offloads of
 * one thread fail fast instead of both extending the same previous summary.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE offloads (
    id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL REFERENCES threads(id),
    generation INTEGER NOT NULL,
    summary_item_id TEXT NOT NULL REFERENCES items(id),
    previous_offload_id TEXT REFERENCES offloads(id),
    from_seq INTEGER NOT NULL,
    cut_seq INTEGER NOT NULL,
    covered_item_ids TEXT NOT NULL,
    covered_tokens INTEGER NOT NULL,
    keep_tokens INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (thread_id, generation)
  )`
})
