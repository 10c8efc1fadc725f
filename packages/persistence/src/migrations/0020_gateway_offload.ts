/**
 * 0020: the gateway's tool-result offload state (issue 14 item 3, docs/gateway.md). `gateway_conversations.offloaded`
 * is the JSON array of the `tool_use` ids whose results the gateway sends as stubs on every request of the
 * conversation (in the order the flushes stubbed them). It only grows (a flush adds ids), so each request extends the
 * previous one's prefix except at a flush; a restarted gateway reads it back and sends the same stubs.
 * `gateway_conversations.expansions` (a JSON object) maps the fingerprint of an assistant message the agent received
 * after the gateway answered the upstream's `thread_read` calls to the messages the upstream actually exchanged (the
 * calls, the gateway's answers, the continuation), which later requests send in its place.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE gateway_conversations ADD COLUMN offloaded TEXT NOT NULL DEFAULT '[]'`
  yield* sql`ALTER TABLE gateway_conversations ADD COLUMN expansions TEXT NOT NULL DEFAULT '{}'`
})
