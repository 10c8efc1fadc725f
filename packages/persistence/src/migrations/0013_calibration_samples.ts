/**
 * 0013: the recent samples a provider instance's calibration rests on (`Calibration.Calibration.recent` of
 * `@baton/context`: the ratio is a trimmed mean around their median, robust to a usage report that grew for reasons
 * other than the tokenizer). `recent` is a JSON array of `{ratio, tokens}`, oldest first; rows stored before it
 * start with `[]`, and their `ratio` and `weight` count as one sample at the next update.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE provider_calibrations ADD COLUMN recent TEXT NOT NULL DEFAULT '[]'`
})
