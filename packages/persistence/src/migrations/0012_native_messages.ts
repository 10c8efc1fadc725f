/**
 * 0012: the message lists of model-API native threads (Anthropic Messages, OpenAI Responses, Chat Completions).
 * These APIs are stateless: the native thread is the list Baton sends with every request, kept here so that the
 * request after a restart is byte-identical to the one without it. One row per entry (`seq` from 1 per native
 * thread); `body` is the entry's wire messages as JSON text, stored and read back unchanged. The primary key makes
 * two writers racing on one native thread fail (`ConcurrentModification`) instead of interleaving.
 *
 * Numbered 0012 (0010 and 0011 are taken by branches in flight); the Migrator applies ids in order, whatever gaps.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE native_messages (
    native_ref TEXT NOT NULL,
    seq INTEGER NOT NULL,
    provider_instance TEXT NOT NULL,
    kind TEXT NOT NULL,
    run_id TEXT,
    delivery_ids TEXT NOT NULL,
    usage TEXT,
    body TEXT NOT NULL,
    PRIMARY KEY (native_ref, seq)
  )`
})
