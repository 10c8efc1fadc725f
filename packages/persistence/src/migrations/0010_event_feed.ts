/**
 * 0010: what the live event feed (`EventFeed`) needs from the event log.
 *
 * Postgres only (SQLite has one writer at a time, so its `global_seq` is already in commit order):
 *
 * - `xact_id xid8`: the id of the top-level transaction that wrote the row (`pg_current_xact_id()`, also inside a
 *   savepoint). `global_seq` is taken at insert but becomes visible at commit, so two transactions can commit out of
 *   `global_seq` order and a reader paging by `global_seq` alone can pass a row that commits a moment later. Every
 *   transaction whose id is below `pg_snapshot_xmin(pg_current_snapshot())` has ended, so the rows with such an
 *   `xact_id` are final: no row can still appear among them. The cross-thread feed reads only final rows, in
 *   `(xact_id, global_seq)` order, which no later commit can insert into. Rows written before this migration keep
 *   `xact_id = 0` (they were all committed): they sort first, in `global_seq` order.
 * - the index `(xact_id, global_seq)`: that order as a cursor, read without a sort.
 * - a trigger that sends `NOTIFY baton_events, '<schema>:<thread id>'` for each inserted event. Postgres delivers a
 *   notification only when its transaction commits (and folds identical ones of one transaction into one), so it is
 *   a post-commit wake-up for the feeds of every process on the database, whichever process wrote. It carries no
 *   event: readers read the log.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    pg: () =>
      Effect.gen(function*() {
        yield* sql`ALTER TABLE thread_events ADD COLUMN xact_id xid8 NOT NULL DEFAULT '0'`
        yield* sql`ALTER TABLE thread_events ALTER COLUMN xact_id SET DEFAULT pg_current_xact_id()`
        yield* sql`CREATE INDEX thread_events_feed ON thread_events (xact_id, global_seq)`
        yield* sql`CREATE FUNCTION baton_notify_event() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN
            PERFORM pg_notify('baton_events', TG_TABLE_SCHEMA || ':' || NEW.thread_id);
            RETURN NULL;
          END $$`
        yield* sql`CREATE TRIGGER thread_events_notify AFTER INSERT ON thread_events
          FOR EACH ROW EXECUTE FUNCTION baton_notify_event()`
      }),
    orElse: () => Effect.void
  })
})
