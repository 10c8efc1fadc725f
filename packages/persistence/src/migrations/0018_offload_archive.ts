/**
 * 0018: `/offload`'s reserve, append, commit (issue 12 item 4).
 *
 * `offloads.committed_at`: `NULL` while the offload is only reserved inside its unit of work, the commit time once
 * the unit reached its commit step. Only committed offloads form the summary chain (every read filters on it), so a
 * reservation is never part of a model-visible history. Offloads written before this migration were committed in
 * one step: they are committed at their creation time.
 *
 * `offload_archive`: the originals an offload replaced, appended in order (`position` from 0) under the reservation:
 * each row names an item of the thread's append-only log (never copied, never deleted), its seq and its rendered
 * tokens. `thread_read`'s `archive:<offload id>` ref and `GET /threads/{id}/items/{itemId}` read them back. The rows
 * are written in the offload's unit of work, so a commit that fails takes the append with it.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE offloads ADD COLUMN committed_at TEXT`
  yield* sql`UPDATE offloads SET committed_at = created_at`
  yield* sql`CREATE TABLE offload_archive (
    offload_id TEXT NOT NULL REFERENCES offloads(id),
    position INTEGER NOT NULL,
    item_id TEXT NOT NULL REFERENCES items(id),
    item_seq INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    PRIMARY KEY (offload_id, position)
  )`
  yield* sql`CREATE INDEX offload_archive_item ON offload_archive (item_id)`
})
