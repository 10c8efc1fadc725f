/**
 * The numbered migrations, statically imported and registered with `Migrator.fromRecord`, run by the dialect-neutral
 * `Migrator.make` so SQLite and Postgres apply the very same statements.
 */
import { Migrator } from "@effect/sql"
import migration0001 from "./migrations/0001_core.js"
import migration0002 from "./migrations/0002_thread_links.js"
import migration0003 from "./migrations/0003_calibration.js"
import migration0004 from "./migrations/0004_offload.js"
import migration0005 from "./migrations/0005_item_message_ids.js"
import migration0006 from "./migrations/0006_run_failure_code.js"
import migration0007 from "./migrations/0007_unit_of_work.js"
import migration0008 from "./migrations/0008_typed_events.js"
import migration0009 from "./migrations/0009_unfinished_runs.js"
import migration0010 from "./migrations/0010_event_feed.js"
import migration0011 from "./migrations/0011_native_messages.js"
import migration0012 from "./migrations/0012_run_costs.js"
import migration0013 from "./migrations/0013_calibration_samples.js"
import migration0014 from "./migrations/0014_client_tools.js"
import migration0015 from "./migrations/0015_offload_controls.js"
import migration0016 from "./migrations/0016_gateway_conversations.js"
import migration0017 from "./migrations/0017_offload_operations.js"
import migration0018 from "./migrations/0018_offload_archive.js"
import migration0019 from "./migrations/0019_offload_cancel_requests.js"
import migration0020 from "./migrations/0020_gateway_offload.js"
import migration0021 from "./migrations/0021_thread_parents.js"
import migration0022 from "./migrations/0022_run_prompt_owed.js"
import migration0023 from "./migrations/0023_run_interrupt_requests.js"
import migration0024 from "./migrations/0024_native_held_at_least.js"

/** `{"0001_core": Effect}`: keys are `<id>_<name>`, ids strictly increasing. */
export const migrations = {
  "0001_core": migration0001,
  "0002_thread_links": migration0002,
  "0003_calibration": migration0003,
  "0004_offload": migration0004,
  "0005_item_message_ids": migration0005,
  "0006_run_failure_code": migration0006,
  "0007_unit_of_work": migration0007,
  "0008_typed_events": migration0008,
  "0009_unfinished_runs": migration0009,
  "0010_event_feed": migration0010,
  "0011_native_messages": migration0011,
  "0012_run_costs": migration0012,
  "0013_calibration_samples": migration0013,
  "0014_client_tools": migration0014,
  "0015_offload_controls": migration0015,
  "0016_gateway_conversations": migration0016,
  "0017_offload_operations": migration0017,
  "0018_offload_archive": migration0018,
  "0019_offload_cancel_requests": migration0019,
  "0020_gateway_offload": migration0020,
  "0021_thread_parents": migration0021,
  "0022_run_prompt_owed": migration0022,
  "0023_run_interrupt_requests": migration0023,
  "0024_native_held_at_least": migration0024
}

/** Runs every pending migration. Fails with `MigrationError` or `SqlError`; requires `SqlClient`. */
export const run = Migrator.make({})({ loader: Migrator.fromRecord(migrations) })
