/**
 * 0016: gateway conversations (issue 14, docs/gateway.md): `gateway_conversations` holds one row per agent
 * conversation the gateway has seen, keyed by what identifies it (`conversation_key`: the agent's session header and
 * its system prompt's fingerprint, else the fingerprint of the conversation's start), with the Baton thread that
 * records it and the baseline (`baseline`: the JSON array of the fingerprints of every message of the conversation
 * as Baton stored it, the last upstream reply included) that the next request's history is compared with.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE gateway_conversations (
    conversation_key TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL REFERENCES threads(id),
    baseline TEXT NOT NULL,
    requests INTEGER NOT NULL,
    divergences INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
  )`
  yield* sql`CREATE INDEX gateway_conversations_thread ON gateway_conversations (thread_id)`
})
