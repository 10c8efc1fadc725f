/**
 * The numbered migrations, statically imported and registered with `Migrator.fromRecord`, run by the dialect-neutral
 * `Migrator.make` so SQLite and Postgres apply the very same statements.
 */
import { Migrator } from "@effect/sql"
import migration0001 from "./migrations/0001_core.js"
import migration0004 from "./migrations/0004_offload.js"

/** `{"0001_core": Effect}`: keys are `<id>_<name>`, ids strictly increasing. */
export const migrations = {
  "0001_core": migration0001,
  "0004_offload": migration0004
}

/** Runs every pending migration. Fails with `MigrationError` or `SqlError`; requires `SqlClient`. */
export const run = Migrator.make({})({ loader: Migrator.fromRecord(migrations) })
