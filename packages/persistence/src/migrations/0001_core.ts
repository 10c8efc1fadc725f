/**
 * 0001: the core tables. Portable SQL: TEXT ids and ISO-8601 timestamps, INTEGER counts and 0/1 booleans, JSON
 * arrays in TEXT, so the same statements run on SQLite and Postgres.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE threads (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    active_provider_thread_id TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
  )`
  yield* sql`CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL REFERENCES threads(id),
    seq INTEGER NOT NULL,
    provider_thread_id TEXT NOT NULL,
    status TEXT NOT NULL,
    prompt TEXT NOT NULL,
    stop_point TEXT,
    failure_reason TEXT,
    native_thread_id TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    UNIQUE (thread_id, seq)
  )`
  yield* sql`CREATE INDEX runs_provider_thread ON runs (provider_thread_id, seq)`
  yield* sql`CREATE INDEX runs_thread_status ON runs (thread_id, status)`
  yield* sql`CREATE TABLE run_attempts (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(id),
    attempt INTEGER NOT NULL,
    native_thread_id TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    UNIQUE (run_id, attempt)
  )`
  yield* sql`CREATE TABLE items (
    id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL REFERENCES threads(id),
    run_id TEXT,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    tool_call_id TEXT,
    tool_name TEXT,
    message_id TEXT,
    is_error INTEGER NOT NULL,
    tool_call_state TEXT,
    tokens INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (thread_id, seq)
  )`
  yield* sql`CREATE INDEX items_run ON items (run_id, seq)`
  yield* sql`CREATE TABLE provider_threads (
    id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL REFERENCES threads(id),
    provider_instance TEXT NOT NULL,
    model TEXT NOT NULL,
    context_window INTEGER,
    active_native_thread_id TEXT,
    synced_run_seq INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    UNIQUE (thread_id, provider_instance)
  )`
  yield* sql`CREATE TABLE native_threads (
    id TEXT PRIMARY KEY,
    provider_thread_id TEXT NOT NULL REFERENCES provider_threads(id),
    generation INTEGER NOT NULL,
    native_ref TEXT NOT NULL,
    status TEXT NOT NULL,
    used_tokens INTEGER,
    max_tokens INTEGER,
    auto_compact_threshold INTEGER,
    estimated_tokens INTEGER NOT NULL,
    compactions_without_progress INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    UNIQUE (provider_thread_id, generation)
  )`
  yield* sql`CREATE TABLE handoffs (
    id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL REFERENCES threads(id),
    kind TEXT NOT NULL,
    target_provider_thread_id TEXT NOT NULL REFERENCES provider_threads(id),
    open INTEGER NOT NULL,
    source_run_ids TEXT NOT NULL,
    item_ids TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    omitted_item_ids TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
  )`
  yield* sql`CREATE INDEX handoffs_target_open ON handoffs (target_provider_thread_id, open)`
  yield* sql`CREATE INDEX handoffs_thread ON handoffs (thread_id)`
  yield* sql`CREATE TABLE handoff_deliveries (
    id TEXT PRIMARY KEY,
    handoff_id TEXT NOT NULL REFERENCES handoffs(id),
    native_thread_id TEXT NOT NULL REFERENCES native_threads(id),
    status TEXT NOT NULL,
    mode TEXT,
    run_id TEXT,
    delivered_item_ids TEXT NOT NULL,
    omitted_item_ids TEXT NOT NULL,
    delivered_tokens INTEGER NOT NULL,
    defer_count INTEGER NOT NULL,
    last_defer_reason TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    UNIQUE (handoff_id, native_thread_id)
  )`
  yield* sql`CREATE INDEX deliveries_native_status ON handoff_deliveries (native_thread_id, status)`
  yield* sql`CREATE TABLE thread_events (
    thread_id TEXT NOT NULL REFERENCES threads(id),
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (thread_id, seq)
  )`
  yield* sql`CREATE TABLE command_receipts (
    command_id TEXT PRIMARY KEY,
    command_type TEXT NOT NULL,
    thread_id TEXT,
    result TEXT NOT NULL,
    created_at TEXT NOT NULL
  )`
})
