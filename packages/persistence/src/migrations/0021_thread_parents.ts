/**
 * 0021: sub-agent threads (issue 14, docs/gateway.md "Codex's sub-agents"). `threads.parent_thread_id` is the thread
 * that spawned this one as a sub-agent (a gateway conversation whose agent named the conversation it runs under, as
 * Codex's `x-codex-turn-metadata` `parent_thread_id` does), else `NULL`. Not a fork's parent: forks and merges are
 * `thread_links`. Written once, when the sub-agent's thread is created; indexed to list a thread's sub-agents.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE threads ADD COLUMN parent_thread_id TEXT REFERENCES threads(id)`
  yield* sql`CREATE INDEX threads_parent ON threads (parent_thread_id)`
})
