/**
 * 0008: the typed event log. `thread_events` is rebuilt with the envelope of `ThreadEvent`: an `event_id` (unique),
 * a `global_seq` (the table's key, assigned on insert in increasing order: the cursor of cross-thread feeds) and
 * the causing `command_id`. `(thread_id, seq)` stays unique (the per-thread order and the lost-update guard).
 *
 * Existing rows are copied in the order they were written (`created_at`, then thread and seq), so their
 * `global_seq` follows that order; their `event_id` is `evt_<threadId>_<seq>` (unique because `(thread_id, seq)`
 * is, and it cannot collide with a new `evt_<uuid>`), their `command_id` is NULL (it was not recorded).
 *
 * Indexes: `(thread_id, seq)` (the unique constraint) serves the per-thread cursor, `global_seq` (the key) the
 * global cursor, and `(thread_id, type, seq)` the newest event of one type (`/compact`) without scanning the log.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // The one dialect difference: an auto-assigned, never reused, increasing 64-bit key. SQLite's AUTOINCREMENT
  // never reuses a rowid (even the highest one's after a delete); Postgres's identity column is a sequence.
  const globalSeqColumn = sql.onDialectOrElse({
    pg: () => sql.literal("global_seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"),
    orElse: () => sql.literal("global_seq INTEGER PRIMARY KEY AUTOINCREMENT")
  })
  yield* sql`CREATE TABLE thread_events_v2 (
    ${globalSeqColumn},
    event_id TEXT NOT NULL UNIQUE,
    thread_id TEXT NOT NULL REFERENCES threads(id),
    seq INTEGER NOT NULL,
    command_id TEXT,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (thread_id, seq)
  )`
  yield* sql`INSERT INTO thread_events_v2 (event_id, thread_id, seq, command_id, type, payload, created_at)
    SELECT 'evt_' || thread_id || '_' || seq, thread_id, seq, NULL, type, payload, created_at
    FROM thread_events ORDER BY created_at, thread_id, seq`
  yield* sql`DROP TABLE thread_events`
  yield* sql`ALTER TABLE thread_events_v2 RENAME TO thread_events`
  yield* sql`CREATE INDEX thread_events_thread_type ON thread_events (thread_id, type, seq)`
})
