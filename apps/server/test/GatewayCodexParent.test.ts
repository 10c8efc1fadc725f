/**
 * Codex's sub-agents and their parent through the gateway (issue 14, docs/gateway.md "Codex's sub-agents"), with
 * hand-built `/v1/responses` requests in the form `codex exec` 0.171.0 sends them (`GatewayCodexSubAgent.test.ts`
 * runs the real one): a sub-agent's requests carry its own `thread-id`, the parent's `session-id` and
 * `x-codex-turn-metadata` with `parent_thread_id`. The sub-agent's thread records the parent's thread: the snapshot
 * names it (`parentThreadId`), the parent's lists the sub-agent (`subAgents`), the title says it is a sub-agent; with
 * `multi_agent_v2` its first run's prompt is the `agent_message`'s text. The same on a switch to Anthropic, on SQLite
 * and Postgres.
 */
import type { Item, Run } from "@baton/contracts"
import { Database } from "@baton/persistence"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { adminToken, client, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

const usage = { input: 100, cacheWrite: 0, cacheRead: 0, output: 5 }

const developer = (text: string) => ({ type: "message", role: "developer", content: [{ type: "input_text", text }] })
const user = (text: string) => ({ type: "message", role: "user", content: [{ type: "input_text", text }] })
const spawn = { type: "function_call", id: "fc_spawn", call_id: "call_spawn", name: "spawn_agent", namespace: "collaboration", arguments: "{\"task_name\":\"writer\",\"message\":\"write it\"}" }
const spawned = (id: string) => ({ type: "function_call_output", call_id: "call_spawn", output: JSON.stringify({ agent_id: id, nickname: "writer" }) })
/** `multi_agent_v2`'s task as Codex sends it to the sub-agent: a header part, the message encrypted. */
const task = {
  type: "agent_message",
  content: [{ type: "input_text", text: "Message Type: NEW_TASK\nFrom: /root\nTask name: writer" }, { type: "encrypted_content", encrypted_content: "ENC" }]
}
const start = [developer("You are Codex."), user("<environment_context/>")]

/** The headers of a Codex request of thread `thread` under session `session`, a sub-agent's when `parent` is given. */
const headersOf = (thread: string, session: string, parent?: string) => ({
  authorization: `Bearer ${adminToken}`,
  accept: "text/event-stream",
  "user-agent": "codex_exec/0.171.0 (test)",
  "thread-id": thread,
  "session-id": session,
  "x-codex-turn-metadata": JSON.stringify({
    turn_id: `turn-${thread}`,
    request_kind: "turn",
    ...(parent === undefined ? {} : { parent_thread_id: parent, thread_source: "subagent", subagent_kind: "thread_spawn" })
  })
})

type Dialect = "SQLite" | "Postgres"

/** A gateway over one loopback upstream: `gpt-*` to a Responses instance, `claude-*` to an Anthropic one (a switch). */
const withGateway = <A, E, R>(test: (upstream: ModelApi.ModelApi) => Effect.Effect<A, E, R>, dialect: Dialect) =>
  Effect.scoped(Effect.gen(function*() {
    const upstream = yield* ModelApi.start
    const sqlite = yield* settingsFor(
      [instance("anthropic", "anthropic-messages", upstream), instance("openai", "openai-responses", upstream)],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: [{ model: "claude-*", provider: "anthropic" }, { model: "gpt-*", provider: "openai" }] } }
    )
    const settings = dialect === "SQLite"
      ? sqlite
      : { ...sqlite, database: { _tag: "postgres" as const, url: Context.get(yield* Layer.build(Database.layerPgSchema()), Database.PgSchemaUrl) } }
    return yield* test(upstream).pipe(Effect.provide(serveSettings(settings)))
  }))

/** Sends a streamed `/v1/responses` request of `input` on `model` with `headers`; the upstream answers `reply`. */
const send = (upstream: ModelApi.ModelApi, model: string, input: ReadonlyArray<unknown>, headers: Record<string, string>, reply: ModelApi.Reply) =>
  Effect.gen(function*() {
    upstream.enqueue(reply)
    const response = yield* raw(HttpClientRequest.post("/v1/responses").pipe(
      HttpClientRequest.setHeaders(headers),
      HttpClientRequest.bodyText(JSON.stringify({ model, stream: true, input, prompt_cache_key: headers["session-id"] }), "application/json")
    ))
    expect(response.status).toBe(200)
  })

/** Every thread with its snapshot, runs and items, by title. */
const threadsByTitle = Effect.gen(function*() {
  const api = yield* client()
  const threads = (yield* api.threads.list({ urlParams: {} })).threads
  const out = new Map<string, { id: string; parentThreadId: string | null; subAgents: ReadonlyArray<string>; runs: ReadonlyArray<Run>; items: ReadonlyArray<Item> }>()
  for (const t of threads) {
    const snapshot = yield* api.threads.get({ path: { threadId: t.id } })
    const runs = (yield* api.runs.list({ path: { threadId: t.id }, urlParams: {} })).runs
    const items = (yield* api.items.list({ path: { threadId: t.id }, urlParams: { limit: 500 } })).items
    out.set(t.title, { id: t.id, parentThreadId: snapshot.parentThreadId, subAgents: snapshot.subAgents.map((s) => s.id), runs, items })
  }
  return out
})

describe("Gateway, Codex's sub-agents and their parent", () => {
  for (const dialect of ["SQLite", "Postgres"] as const) {
    for (const model of ["gpt-5", "claude-sonnet-4-5"]) {
      const kind = model.startsWith("gpt") ? "openai-responses" : "anthropic-messages"
      it.live(`a sub-agent's thread names its parent's and the parent lists it; the title says sub-agent; an agent_message task is the prompt (${dialect}, ${kind} upstream)`, () =>
        withGateway((upstream) =>
          Effect.gen(function*() {
            const parent = headersOf("thread-p", "thread-p")
            const sub = headersOf("thread-s", "thread-p", "thread-p")
            const prompt = user("Use a sub-agent to write sub.txt.")
            yield* send(upstream, model, [...start, prompt], parent, ModelApi.answer(kind, "", usage, [{ id: "call_spawn", name: "spawn_agent", arguments: spawn.arguments }]))
            // The sub-agent's first request: the start, then its task as an agent_message (multi_agent_v2).
            yield* send(upstream, model, [...start, task], sub, ModelApi.answer(kind, "SUB: done.", usage))
            const byTitle = yield* threadsByTitle
            expect([...byTitle.keys()].sort()).toEqual(["Codex session thread-p", "Codex sub-agent thread-s (of thread-p)"])
            const p = byTitle.get("Codex session thread-p")!
            const s = byTitle.get("Codex sub-agent thread-s (of thread-p)")!
            expect([p.parentThreadId, p.subAgents]).toEqual([null, [s.id]])
            expect([s.parentThreadId, s.subAgents]).toEqual([p.id, []])
            // The sub-agent's run's prompt is its task's text part (before: "", the run's prompt came from user messages).
            expect(s.runs.map((r) => r.prompt)).toEqual([task.content[0]!.text])
            expect(p.runs.map((r) => r.prompt)).toEqual(["Use a sub-agent to write sub.txt."])

            // The parent goes on (the spawn's output), the sub-agent's next request extends its own conversation.
            yield* send(upstream, model, [...start, prompt, { ...spawn }, spawned("thread-s")], parent, ModelApi.answer(kind, "MAIN: done.", usage))
            const again = yield* threadsByTitle
            expect(again.size).toBe(2)
            expect(again.get("Codex sub-agent thread-s (of thread-p)")!.parentThreadId).toBe(p.id)
            expect(again.get("Codex session thread-p")!.subAgents).toEqual([s.id])
            expect(again.get("Codex session thread-p")!.runs.map((r) => r.status)).toEqual(["completed", "completed"])
          }), dialect))
    }
  }

  it.live("a sub-agent whose parent Baton has not seen is titled a sub-agent with no parent thread; a thread naming itself as parent is not a sub-agent", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        yield* send(upstream, "gpt-5", [...start, user("task")], headersOf("thread-orphan", "thread-gone", "thread-gone"), ModelApi.answer("openai-responses", "ok", usage))
        yield* send(upstream, "gpt-5", [...start, user("hi")], headersOf("thread-self", "thread-self", "thread-self"), ModelApi.answer("openai-responses", "ok", usage))
        const byTitle = yield* threadsByTitle
        expect([...byTitle.keys()].sort()).toEqual(["Codex session thread-self", "Codex sub-agent thread-orphan (of thread-gone)"])
        for (const t of byTitle.values()) expect([t.parentThreadId, t.subAgents]).toEqual([null, []])
      }), "SQLite"))
})
