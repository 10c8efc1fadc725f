/**
 * 0022: `runs.prompt_owed`, the durable mark of a run that ended while queued behind an unfinished run (interrupted,
 * cancelled or failed before it ever started) and whose prompt is therefore not yet in the thread's items: it joins
 * them, after everything the runs ahead record, when the last of those runs ends (RunLifecycle, docs/server.md
 * "Queued messages"). `1` from that end until the prompt is recorded, `0` otherwise (every run written before this
 * migration: their prompts were recorded when they left `queued`).
 *
 * A column of its own, not a stop point: a run that ended while queued and a run that ended before the provider read
 * its prompt once it had started (a gateway retry interrupted through the API) are both `interrupted` at
 * `before_provider`, and only the first owes its prompt (review r35last: the second had its prompt recorded twice).
 *
 * The partial index holds only the runs that owe (none on almost every thread), so a run's end asks "does any run of
 * this thread owe its prompt?" inside the statement that ends it (`ThreadStore.updateRunEnded`) at the cost of one
 * index probe. The condition is written exactly as the queries write it (SQLite needs that to use a partial index).
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE runs ADD COLUMN prompt_owed INTEGER NOT NULL DEFAULT 0`
  yield* sql`CREATE INDEX runs_thread_prompt_owed ON runs (thread_id, seq) WHERE prompt_owed = 1`
})
