/**
 * 0012: what each run cost, as the provider billed it (issue "Real model providers", item 5): tokens read uncached,
 * written to the prompt cache, read from it, and produced, and their price in US dollars under the instance's
 * configured prices (`NULL` when the instance has none). One row per run, written with the run's outcome.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE run_costs (
    run_id TEXT PRIMARY KEY REFERENCES runs(id),
    thread_id TEXT NOT NULL REFERENCES threads(id),
    provider_instance TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cost_usd DOUBLE PRECISION,
    created_at TEXT NOT NULL
  )`
  yield* sql`CREATE INDEX run_costs_thread ON run_costs (thread_id)`
})
