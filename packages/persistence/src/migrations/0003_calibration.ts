/**
 * 0003: the tokenizer calibration learned per provider instance (`Calibration` in `@baton/context`), so a restart
 * keeps what the provider's usage reports taught. One row per provider instance; `ratio` is provider tokens per
 * Baton token (DOUBLE PRECISION: Postgres `REAL` is single precision; SQLite gives the column REAL affinity),
 * `weight` the evidence held in Baton tokens.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE provider_calibrations (
    provider_instance TEXT PRIMARY KEY,
    ratio DOUBLE PRECISION NOT NULL,
    samples INTEGER NOT NULL,
    weight INTEGER NOT NULL,
    updated_at TEXT NOT NULL
  )`
})
