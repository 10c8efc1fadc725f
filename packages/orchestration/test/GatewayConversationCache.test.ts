/**
 * The gateway's conversation before forwarding (`GatewayThreads.conversationOf`, issue 14 gateway time): on SQLite (one
 * process) it is the conversation as this process's committed units of work last wrote it, without reading the row;
 * on Postgres (several processes may serve a conversation) it is read every time. Either way, after `begin` and
 * `complete` it equals the stored row.
 */
import type { ProviderInstance } from "@baton/contracts"
import { GatewayThreads } from "@baton/orchestration"
import { GatewayConversations, ThreadEventBus } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { SqlClient, Statement } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Option } from "effect"

const wire = GatewayThreads.anthropicMessages
const system = [{ type: "text", text: "You are a coding agent." }]
const first = { role: "user", content: [{ type: "text", text: "explore the repository" }] }
const call = { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "Bash", input: { command: "ls" } }] }
const result = { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "a\nb" }] }

const request = (messages: ReadonlyArray<unknown>, offloaded: ReadonlyArray<string>, conversation?: GatewayConversations.Conversation) => ({
  wire,
  session: "session-c",
  agent: "Claude Code",
  system,
  messages,
  model: "claude-x",
  providerInstance: "anthropic" as ProviderInstance,
  contextWindow: 200_000,
  prices: { input: 3, cacheRead: 0.3, cacheWrite: 3.75, output: 15 },
  offload: { offloaded, flush: null },
  conversation
})

describe.each(Harness.dialects)("GatewayThreads.conversationOf on %s", (label, db) => {
  it.live("equals the stored row after begin and complete; on SQLite it is kept, on Postgres read again", () =>
    Effect.gen(function*() {
      const threads = yield* GatewayThreads.GatewayThreads
      const repository = yield* GatewayConversations.make
      const sql = yield* SqlClient.SqlClient
      const key = GatewayThreads.conversationKey("session-c", system, [first], wire)
      const read = () => threads.conversationOf(wire, "session-c", system, [first])
      const stored = () => Effect.map(repository.find(key), Option.getOrThrow)

      expect(Option.isNone(yield* read())).toBe(true)
      const begun = yield* threads.begin(request([first], ["toolu_0"]))
      expect(Option.getOrThrow(yield* read())).toEqual(yield* stored())
      yield* threads.complete(begun, { messages: [{ id: "msg_1", message: call }], tokens: null })
      const afterComplete = Option.getOrThrow(yield* read())
      expect(afterComplete).toEqual(yield* stored())
      expect(afterComplete.requests).toBe(1)
      expect(afterComplete.offloaded).toEqual(["toolu_0"])

      // The next request, which passes the conversation it read to `begin`.
      const next = yield* threads.begin(request([first, call, result], ["toolu_0", "toolu_1"], afterComplete))
      expect(Option.getOrThrow(yield* read())).toEqual(yield* stored())
      yield* threads.complete(next, { messages: [{ id: "msg_2", message: { role: "assistant", content: [{ type: "text", text: "done" }] } }], tokens: null })
      const row = yield* stored()
      expect(Option.getOrThrow(yield* read())).toEqual(row)
      expect(row.requests).toBe(2)
      expect(row.offloaded).toEqual(["toolu_0", "toolu_1"])

      // A write this process did not make (another process's): seen on Postgres; on SQLite the kept conversation
      // stands (the embedded database has one serving process), which shows the row is not read.
      yield* sql`UPDATE gateway_conversations SET offloaded = ${JSON.stringify(["toolu_0", "toolu_1", "toolu_x"])} WHERE conversation_key = ${key}`
      const seen = Option.getOrThrow(yield* read())
      expect(seen.offloaded).toEqual(label === "SQLite" ? ["toolu_0", "toolu_1"] : ["toolu_0", "toolu_1", "toolu_x"])

      // Under the thread's lock `begin` sees that write on both dialects: on SQLite it uses the kept conversation without
      // reading the row only while the row is still it (its update is conditional on that), else it reads the row.
      yield* sql`UPDATE gateway_conversations SET requests = 7 WHERE conversation_key = ${key}`
      const done = { role: "assistant", content: [{ type: "text", text: "done" }] }
      const more = { role: "user", content: [{ type: "text", text: "and the tests?" }] }
      const third = yield* threads.begin(request([first, call, result, done, more], ["toolu_0", "toolu_1"], seen))
      const after = yield* stored()
      expect(after.requests).toBe(8)
      expect(third.newMessages).toBe(1)
      expect(after.baseline.prints.length).toBe(5)
      expect(Option.getOrThrow(yield* read())).toEqual(after)
      // And with no other write since, the next request extends it as well (the kept conversation is the row).
      yield* threads.begin(request([first, call, result, done, more, call], ["toolu_0", "toolu_1"], after))
      expect((yield* stored()).requests).toBe(9)
      expect(Option.getOrThrow(yield* read())).toEqual(yield* stored())
    }).pipe(Effect.provide(Harness.make([{ name: "anthropic", window: 200_000, inject: false }], { db }).layer)))
})

describe("GatewayThreads: a unit of work's kept conversation on SQLite", () => {
  it.live("is its own: a unit ending while another request's unit of work is open does not keep that one's uncommitted write", () =>
    Effect.gen(function*() {
      const threads = yield* GatewayThreads.GatewayThreads
      const repository = yield* GatewayConversations.make
      const key = GatewayThreads.conversationKey("session-c", system, [first], wire)
      const read = () => threads.conversationOf(wire, "session-c", system, [first])
      // A live subscriber (an event stream): a committing unit of work hands the event loop over before it returns.
      const subscription = yield* (yield* ThreadEventBus).subscribe
      expect(subscription).toBeDefined()
      const begun = yield* threads.begin(request([first], []))
      yield* threads.complete(begun, { messages: [{ id: "msg_1", message: call }], tokens: null })
      const seen = Option.getOrThrow(yield* read())

      // Request B's unit of work is held open after it wrote the conversation (at its events' append), then given up
      // (the agent hung up): its write is rolled back. Request A's unit of work commits just before it.
      const reached = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const holdAtEvents: Statement.Statement.Transformer = (statement) => {
        const [text] = statement.compile()
        return text.includes("INSERT INTO thread_events") && !text.includes("gateway_conversations")
          ? Effect.as(Effect.zipRight(Deferred.succeed(reached, undefined), Deferred.await(release)), statement)
          : Effect.succeed(statement)
      }
      const a = yield* Effect.fork(threads.begin(request([first, call, result], ["toolu_1"], seen)))
      const b = yield* Effect.fork(Statement.withTransformer(threads.begin(request([first, call, result], ["toolu_1", "toolu_b"], seen)), holdAtEvents))
      yield* Deferred.await(reached)
      yield* Fiber.join(a)
      // Read while B's unit of work is open: never B's uncommitted conversation (it waits for the row instead).
      const during = yield* Effect.fork(read())
      for (let i = 0; i < 5; i++) yield* Effect.yieldNow()
      yield* Fiber.interrupt(b)
      const row = yield* Effect.map(repository.find(key), Option.getOrThrow)
      expect(row.requests).toBe(2)
      expect(row.offloaded).toEqual(["toolu_1"])
      expect(Option.getOrThrow(yield* Fiber.join(during))).toEqual(row)
      expect(Option.getOrThrow(yield* read())).toEqual(row)
    }).pipe(Effect.scoped, Effect.provide(Harness.make([{ name: "anthropic", window: 200_000, inject: false }], { db: ":memory:" }).layer)))
})
