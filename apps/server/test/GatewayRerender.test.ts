/**
 * The gateway's record when the agent re-renders its history (issue 14, docs/gateway.md "Re-rendered history"), with
 * hand-built `/v1/messages` bodies in the forms Claude Code 2.1.332 sends (observed against a loopback upstream,
 * without Baton): for a Claude model its reminders are `<system-reminder>` text blocks in the user messages (and
 * trailing a tool result's text); for another model they are `system` messages of their own; a request that ends with
 * a new prompt leaves earlier turns' thinking out. Such a request holds the stored conversation re-rendered: no
 * divergence, nothing stored again (`gateway.rerendered`). A real edit, a compaction or a rewind is still a divergence.
 */
import type { Item } from "@baton/contracts"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Database } from "@baton/persistence"
import { Context, Effect, Layer } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { adminToken, client, get, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"

const usage = { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }
const session = { "x-api-key": adminToken, "x-claude-code-session-id": "session-rerender" }
const system = [{ type: "text", text: "You are Claude Code." }]

const reminder = (text: string) => ({ type: "text", text: `<system-reminder>\n${text}\n</system-reminder>` })
const text = (t: string) => ({ type: "text", text: t })
const user = (...content: ReadonlyArray<unknown>) => ({ role: "user", content })
const assistant = (...content: ReadonlyArray<unknown>) => ({ role: "assistant", content })
const sys = (content: unknown) => ({ role: "system", content })
const call = (id: string, command: string) => ({ type: "tool_use", id, name: "Bash", input: { command } })
const result = (id: string, content: string) => ({ type: "tool_result", tool_use_id: id, content, is_error: false })
const thinking = { type: "thinking", thinking: "I should run it.", signature: "c2lnLTE=" }

/** `reply` (an Anthropic SSE answer) with a thinking block (`thinking` above) before its other blocks. */
const withThinking = (reply: ModelApi.Reply): ModelApi.Reply => {
  const events = reply.body.split("\n\n").filter((e) => e !== "").map((e) => JSON.parse(e.slice(e.indexOf("data: ") + 6)) as Record<string, unknown>)
  const out = events.flatMap((e) => {
    const shifted = typeof e.index === "number" ? { ...e, index: e.index + 1 } : e
    return e.type !== "message_start" ? [shifted] : [
      shifted,
      { type: "content_block_start", index: 0, content_block: { type: "thinking", thinking: "", signature: "" } },
      { type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: thinking.thinking } },
      { type: "content_block_delta", index: 0, delta: { type: "signature_delta", signature: thinking.signature } },
      { type: "content_block_stop", index: 0 }
    ]
  })
  return { ...reply, body: out.map((e) => `event: ${String(e.type)}\ndata: ${JSON.stringify(e)}\n\n`).join("") }
}

/** A gateway over one loopback Anthropic upstream routed for `claude-*` and `gpt-*`, on SQLite (in `dir`) or Postgres. */
const gateway = (upstream: ModelApi.ModelApi, dir?: string) =>
  settingsFor([instance("anthropic", "anthropic-messages", upstream, { toolResultOffload: false })], { TEST_MODEL_KEY: marker }, dir, {
    gateway: { routes: [{ model: "claude-*", provider: "anthropic" }, { model: "gpt-*", provider: "anthropic" }] }
  })

const withGateway = <A, E, R>(test: (upstream: ModelApi.ModelApi) => Effect.Effect<A, E, R>, dialect: "SQLite" | "Postgres" = "SQLite") =>
  Effect.scoped(Effect.gen(function*() {
    const upstream = yield* ModelApi.start
    const sqlite = yield* gateway(upstream)
    const settings = dialect === "SQLite"
      ? sqlite
      : { ...sqlite, database: { _tag: "postgres" as const, url: Context.get(yield* Layer.build(Database.layerPgSchema()), Database.PgSchemaUrl) } }
    return yield* test(upstream).pipe(Effect.provide(serveSettings(settings)))
  }))

/** Sends `history` as a streamed `/v1/messages` request of the session on `model`, answered with `reply`. */
const send = (upstream: ModelApi.ModelApi, model: string, history: ReadonlyArray<unknown>, reply: ModelApi.Reply) =>
  Effect.gen(function*() {
    upstream.enqueue(reply)
    const response = yield* raw(HttpClientRequest.post("/v1/messages?beta=true").pipe(
      HttpClientRequest.setHeaders({ "anthropic-version": "2023-06-01", ...session }),
      HttpClientRequest.bodyText(JSON.stringify({ model, max_tokens: 100, stream: true, system, messages: history }), "application/json")
    ))
    expect(response.status).toBe(200)
  })

const answer = (t: string, calls: ReadonlyArray<ModelApi.Call> = []) => ModelApi.answer("anthropic-messages", t, usage, calls)

/** The only thread's items, runs, and its `gateway.diverged` / `gateway.rerendered` payloads. */
const record = Effect.gen(function*() {
  const api = yield* client()
  const threads = (yield* api.threads.list({ urlParams: {} })).threads
  expect(threads.length).toBe(1)
  const threadId = threads[0]!.id
  const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
  const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
  const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
  return {
    items,
    runs,
    diverged: events.filter((e) => e.type === "gateway.diverged").map((e) => e.payload),
    rerendered: events.filter((e) => e.type === "gateway.rerendered").map((e) => e.payload)
  }
})

/** The items as `[kind, text]`. */
const kinds = (items: ReadonlyArray<Item>) => items.map((i) => [i.kind, i.text])

// The first turn in the Claude rendering: the environment as a reminder block before the prompt.
const first = user(reminder("# Environment\ncwd: /tmp/x"), text("count for me"))

describe("Gateway: a re-rendered history is the same conversation", () => {
  it.live("the smallest input of the problem: a Claude-rendered turn, then the same turn rendered for another model, is no divergence and stores nothing twice", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        yield* send(upstream, "claude-x", [first], answer("one"))
        // The same conversation as Claude Code sends it to a non-Claude model: the reminder is a system message after
        // the prompt, and the new turn's reminders a system message of their own.
        yield* send(upstream, "gpt-5", [user(text("count for me")), sys("# Environment\ncwd: /tmp/x"), assistant(text("one")), user(text("second")), sys([{ type: "text", text: "You are powered by the model gpt-5." }])], answer("two"))
        const { diverged, items, rerendered, runs } = yield* record
        expect(diverged).toEqual([])
        expect(rerendered).toEqual([{ runId: runs[1]!.id, sharedMessages: 3, storedMessages: 2, requestMessages: 5 }])
        expect(kinds(items)).toEqual([
          ["user_message", "<system-reminder>\n# Environment\ncwd: /tmp/x\n</system-reminder>"],
          ["user_message", "count for me"],
          ["assistant_message", "one"],
          ["user_message", "second"],
          ["user_message", "You are powered by the model gpt-5."],
          ["assistant_message", "two"]
        ])
        // A re-render starts a generation of message ids (its positions count another rendering's messages).
        expect(items.map((i) => i.messageId).slice(3, 5)).toEqual(["user@1.3", "system@1.4"])
      })
    ))

  for (const dialect of ["SQLite", "Postgres"] as const) {
    it.live(`${dialect}: a Claude Code session with thinking and tool rounds, resumed on another model and back, is stored once`, () =>
      withGateway((upstream) =>
        Effect.gen(function*() {
          const r1 = assistant(thinking, text("Counting."), call("toolu_01", "seq 1 3"))
          const out = "1\n2\n3"
          // 1-2. On a Claude model: the tool round; the tool result carries a trailing reminder.
          yield* send(upstream, "claude-x", [first], withThinking(answer("Counting.", [{ id: "toolu_01", name: "Bash", arguments: JSON.stringify({ command: "seq 1 3" }) }])))
          const claudeResult = user(result("toolu_01", `${out}\n\n<system-reminder>\n<total_tokens>999 tokens left</total_tokens>\n</system-reminder>`))
          yield* send(upstream, "claude-x", [first, r1, claudeResult], answer("Counted."))
          // 3. Resumed on gpt-5: reminders as system messages, the tool result's reminder a system message after it,
          // the earlier turn's thinking left out (the request ends with a new prompt).
          const gpt = [
            user(text("count for me")),
            sys("# Environment\ncwd: /tmp/x"),
            assistant(text("Counting."), call("toolu_01", "seq 1 3")),
            user(result("toolu_01", out)),
            sys("<total_tokens>998 tokens left</total_tokens>"),
            assistant(text("Counted.")),
            user(reminder("Attribution: Claude Code"), text("now on gpt")),
            sys([{ type: "text", text: "You are powered by the model gpt-5.", cache_control: { type: "ephemeral" } }])
          ]
          yield* send(upstream, "gpt-5", gpt, answer("On gpt."))
          // 4. Back on the Claude model: the Claude rendering again, the other turn's reminders as reminder blocks.
          const back = [
            first,
            assistant(text("Counting."), call("toolu_01", "seq 1 3")),
            claudeResult,
            assistant(text("Counted.")),
            user(reminder("You are powered by the model gpt-5."), reminder("Attribution: Claude Code"), text("now on gpt")),
            assistant(text("On gpt.")),
            user(reminder("You are powered by the model claude-x."), text("and back"))
          ]
          yield* send(upstream, "claude-x", back, answer("Back."))
          // 5. A tool round on the same model sends the earlier thinking again: still the same conversation.
          yield* send(upstream, "claude-x", [first, r1, ...back.slice(2), assistant(text("Back.")), user(text("more"))], answer("Done."))

          const { diverged, items, rerendered, runs } = yield* record
          expect(diverged).toEqual([])
          expect(rerendered.map((e) => (e as { runId: string }).runId)).toEqual([runs[2]!.id, runs[3]!.id, runs[4]!.id])
          // Every message of the conversation once, in order (the agent's context as first sent, each once).
          expect(kinds(items).filter(([kind, t]) => !(kind === "user_message" && (t!.startsWith("<system-reminder>") || t!.startsWith("You are") || t!.startsWith("#") || t!.startsWith("<total"))))).toEqual([
            ["user_message", "count for me"],
            ["reasoning", "I should run it."],
            ["assistant_message", "Counting."],
            ["tool_call", "{\"command\":\"seq 1 3\"}"],
            ["tool_result", `${out}\n\n<system-reminder>\n<total_tokens>999 tokens left</total_tokens>\n</system-reminder>`],
            ["assistant_message", "Counted."],
            ["user_message", "now on gpt"],
            ["assistant_message", "On gpt."],
            ["user_message", "and back"],
            ["assistant_message", "Back."],
            ["user_message", "more"],
            ["assistant_message", "Done."]
          ])
          // No message id names two messages.
          const runOf = new Map<string | null, string | null>()
          for (const i of items) {
            expect(runOf.get(i.messageId) ?? i.runId).toBe(i.runId)
            runOf.set(i.messageId, i.runId)
          }
        }), dialect))
  }

  it.live("a real edit, a compaction and a rewind are still divergences, whatever the rendering", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        yield* send(upstream, "claude-x", [first], answer("Counting.", [{ id: "toolu_01", name: "Bash", arguments: JSON.stringify({ command: "seq 1 3" }) }]))
        const r1 = assistant(text("Counting."), call("toolu_01", "seq 1 3"))
        yield* send(upstream, "claude-x", [first, r1, user(result("toolu_01", "1\n2\n3"))], answer("Counted."))
        // The old tool result cleared (Claude Code's micro-compaction) in the other model's rendering: an edit.
        const edited = [user(text("count for me")), sys("# Environment\ncwd: /tmp/x"), r1, user(result("toolu_01", "[Old tool result content cleared]")), assistant(text("Counted.")), user(text("next"))]
        yield* send(upstream, "gpt-5", edited, answer("Next."))
        // A message left out (the assistant's answer) while the reminders move: an edit.
        const dropped = [first, r1, user(result("toolu_01", "[Old tool result content cleared]")), user(reminder("ctx"), text("next")), assistant(text("Next.")), user(text("again"))]
        yield* send(upstream, "claude-x", dropped, answer("Again."))
        // The agent compacted: a summary in place of the history.
        yield* send(upstream, "claude-x", [user(reminder("# Environment\ncwd: /tmp/x"), text("Summary: counted to 3.")), user(text("go on"))], answer("Going."))
        // A rewind: the previous request sent again (its reply was stored), in the other rendering.
        yield* send(upstream, "gpt-5", [user(text("Summary: counted to 3.")), sys("# Environment\ncwd: /tmp/x"), user(text("go on"))], answer("Going."))

        const { diverged, items, rerendered, runs } = yield* record
        expect(rerendered).toEqual([])
        expect(diverged).toEqual([
          { runId: runs[2]!.id, sharedMessages: 0, storedMessages: 4, requestMessages: 6 },
          { runId: runs[3]!.id, sharedMessages: 0, storedMessages: 7, requestMessages: 6 },
          { runId: runs[4]!.id, sharedMessages: 0, storedMessages: 7, requestMessages: 2 },
          { runId: runs[5]!.id, sharedMessages: 0, storedMessages: 3, requestMessages: 3 }
        ])
        // Each divergence stored its messages past the shared prefix again (the edit is in the thread).
        expect(items.filter((i) => i.kind === "tool_result").map((i) => i.text)).toEqual(["1\n2\n3", "[Old tool result content cleared]", "[Old tool result content cleared]"])
      })
    ))

  it.live("a re-render is recognised after a gateway restart (the content prints are in the conversation's record)", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-gateway-rerender-"))
      const settings = yield* gateway(upstream, dir)
      yield* send(upstream, "claude-x", [first], answer("one")).pipe(Effect.provide(serveSettings(settings)))
      yield* Effect.gen(function*() {
        yield* send(upstream, "gpt-5", [user(text("count for me")), sys("# Environment\ncwd: /tmp/x"), assistant(text("one")), user(text("second"))], answer("two"))
        const { diverged, items, rerendered } = yield* record
        expect(diverged).toEqual([])
        expect(rerendered).toHaveLength(1)
        expect(items.map((i) => i.text)).toEqual([
          "<system-reminder>\n# Environment\ncwd: /tmp/x\n</system-reminder>",
          "count for me",
          "one",
          "second",
          "two"
        ])
      }).pipe(Effect.provide(serveSettings(settings)))
    })))
})
