/**
 * 0002: forks and merge-backs (`thread_links`). One row per fork or merge; `run_id` is the synthetic run that holds
 * the copied history. A merge of the same fork range twice is rejected by the unique index.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE thread_links (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    parent_thread_id TEXT NOT NULL REFERENCES threads(id),
    fork_thread_id TEXT NOT NULL REFERENCES threads(id),
    run_id TEXT NOT NULL REFERENCES runs(id),
    from_run_seq INTEGER NOT NULL,
    through_run_seq INTEGER NOT NULL,
    item_count INTEGER NOT NULL,
    handoff_id TEXT,
    created_at TEXT NOT NULL,
    UNIQUE (kind, fork_thread_id, from_run_seq)
  )`
  yield* sql`CREATE INDEX thread_links_parent ON thread_links (parent_thread_id)`
  yield* sql`CREATE INDEX thread_links_fork ON thread_links (fork_thread_id)`
  yield* sql`CREATE UNIQUE INDEX thread_links_run ON thread_links (run_id)`
})
