/**
 * The gateway's retried requests as `GatewayThreads` records them (docs/gateway.md "Retried requests"), on SQLite and
 * Postgres, with the smallest inputs that showed a defect or check a rule:
 * - a retry sent while the request it repeats is still answered, whose answer came after hidden `thread_read` rounds
 *   (an `expansion`), ending after the first answer joined the baseline: the retry's answer is the conversation's
 *   (before: the first answer stayed, and the agent's next request was a divergence storing the retry's answer twice);
 * - two concurrent requests repeating one request: an answer equal to one recorded for it is stored once, and the
 *   agent's next request going on from either answer extends it (before: stored twice; a divergence storing it again);
 * - a retry's run names the prompt it retried, as the run it repeats did (before: `""`);
 * - a baseline stored before replies were counted (no `replied`, in either of its old column forms) is read, and the
 *   conversation goes on from it; a retry of its last request is a divergence, as documented.
 */
import { type CommandId, Commands, type ProviderInstance, type ThreadId } from "@baton/contracts"
import { GatewayThreads, InvariantChecks, RunDriver } from "@baton/orchestration"
import { GatewayConversations, ThreadStore } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Option } from "effect"

const wire = GatewayThreads.anthropicMessages
const system = [{ type: "text", text: "You are a coding agent." }]
const user = (text: string) => ({ role: "user", content: [{ type: "text", text }] })
const assistant = (text: string) => ({ role: "assistant", content: [{ type: "text", text }] })

const request = (session: string, messages: ReadonlyArray<unknown>) => ({
  wire,
  session,
  agent: "Claude Code",
  system,
  messages,
  model: "claude-x",
  providerInstance: "anthropic" as ProviderInstance,
  contextWindow: 200_000,
  prices: { input: 3, cacheRead: 0.3, cacheWrite: 3.75, output: 15 },
  offload: { offloaded: [], flush: null }
})

/** `text`'s reply, and when `hidden`, the hidden `thread_read` round the upstream exchanged before it (its expansion). */
const answer = (text: string, hidden: boolean) => {
  const message = assistant(text)
  const reply: GatewayThreads.Reply = { messages: [{ id: `msg_${text}`, message }], tokens: null }
  const expansion: ReadonlyArray<GatewayThreads.Expansion> = hidden
    ? [{
      fingerprint: GatewayThreads.expansionKeyOf(wire, message),
      messages: [
        { role: "assistant", content: [{ type: "tool_use", id: `toolu_read_${text}`, name: "thread_read", input: { refs: "tool:toolu_1" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: `toolu_read_${text}`, content: "1 2 3" }] },
        message
      ]
    }]
    : []
  return { reply, expansion }
}

const layer = (db: string) => Harness.make([{ name: "anthropic", window: 200_000, inject: false }], { db }).layer

/** The thread's items as `[kind, text]`, and its `gateway.diverged` / `gateway.retried` counts. */
const recordOf = (threadId: ThreadId) =>
  Effect.gen(function*() {
    const store = yield* ThreadStore
    const events = yield* store.listEvents(threadId)
    return {
      items: (yield* store.listItems(threadId)).map((i) => [i.kind, i.text]),
      diverged: events.filter((e) => e.type === "gateway.diverged").length,
      retried: events.filter((e) => e.type === "gateway.retried").length
    }
  })

describe.each(Harness.dialects)("GatewayThreads retries on %s", (_label, db) => {
  for (const [firstHidden, retryHidden] of [[false, true], [true, true], [true, false]] as const) {
    it.live(`a concurrent retry answered after the first (first ${firstHidden ? "with" : "without"} hidden rounds, retry ${retryHidden ? "with" : "without"}): the retry's answer is the conversation's`, () =>
      Effect.gen(function*() {
        const threads = yield* GatewayThreads.GatewayThreads
        const session = `concurrent-${firstHidden}-${retryHidden}`
        const first = yield* threads.begin(request(session, [user("hello")]))
        // The agent gave up on the first answer and sent the request again while it was still streaming.
        const retry = yield* threads.begin(request(session, [user("hello")]))
        expect(retry.repeats).toBe(true)
        const a = answer("A", firstHidden)
        const b = answer("B", retryHidden)
        yield* threads.complete(first, a.reply, a.expansion)
        yield* threads.complete(retry, b.reply, b.expansion)
        // The agent goes on from the answer it got.
        const next = yield* threads.begin(request(session, [user("hello"), assistant("B"), user("next")]))
        expect([next.diverged, next.newMessages]).toEqual([false, 1])
        const { diverged, items } = yield* recordOf(next.threadId)
        expect(diverged).toBe(0)
        expect(items).toEqual([["user_message", "hello"], ["assistant_message", "A"], ["assistant_message", "B"], ["user_message", "next"]])
      }).pipe(Effect.provide(layer(db))))
  }

  // Review r31: a retry of a retry, all three still answered: the agent goes on from the last retry's answer, whichever
  // order the three answers end in (before: an earlier retry's answer ending last superseded the later retry's, and the
  // agent's next request was a divergence storing the later answer twice).
  for (const hidden of [false, true]) {
    for (const order of [["second", "first", "third"], ["third", "second", "first"], ["first", "third", "second"]] as const) {
      it.live(`a retry of a retry (${hidden ? "with" : "without"} hidden rounds), answers ending ${order.join(", ")}: the last retry's answer is the conversation's`, () =>
        Effect.gen(function*() {
          const threads = yield* GatewayThreads.GatewayThreads
          const session = `twice-${hidden}-${order.join("-")}`
          const begun = {
            first: yield* threads.begin(request(session, [user("hello")])),
            second: yield* threads.begin(request(session, [user("hello")])),
            third: yield* threads.begin(request(session, [user("hello")]))
          }
          const text = { first: "A", second: "B", third: "C" }
          for (const which of order) {
            const a = answer(text[which], hidden)
            yield* threads.complete(begun[which], a.reply, a.expansion)
          }
          const next = yield* threads.begin(request(session, [user("hello"), assistant("C"), user("next")]))
          expect([next.diverged, next.newMessages]).toEqual([false, 1])
          const { diverged } = yield* recordOf(next.threadId)
          expect(diverged).toBe(0)
        }).pipe(Effect.provide(layer(db))))
    }
  }

  // Branch b43gw: two concurrent requests repeating one request (the same body sent twice before either answer ended).
  // Only the last begun's answer could supersede the one that joined the baseline first, so when the first begun
  // ended last, an answer equal to the joined one was stored again (the same message twice in the thread), and the
  // agent's next request going on from a different one was a divergence storing that answer a second time.
  for (const hidden of [false, true]) {
    it.live(`two concurrent requests answered alike, the first begun ending last (${hidden ? "with" : "without"} hidden rounds): the answer is stored once`, () =>
      Effect.gen(function*() {
        const threads = yield* GatewayThreads.GatewayThreads
        const session = `alike-${hidden}`
        const first = yield* threads.begin(request(session, [user("hello")]))
        const second = yield* threads.begin(request(session, [user("hello")]))
        for (const begun of [second, first]) {
          const a = answer("A", hidden)
          yield* threads.complete(begun, a.reply, a.expansion)
        }
        const next = yield* threads.begin(request(session, [user("hello"), assistant("A"), user("next")]))
        expect([next.diverged, next.newMessages]).toEqual([false, 1])
        const { diverged, items } = yield* recordOf(next.threadId)
        expect(diverged).toBe(0)
        expect(items).toEqual([["user_message", "hello"], ["assistant_message", "A"], ["user_message", "next"]])
      }).pipe(Effect.provide(layer(db))))

    for (const order of [["second", "first"], ["first", "second"]] as const) {
      it.live(`the agent goes on from the first begun's answer, answers ending ${order.join(", ")} (${hidden ? "with" : "without"} hidden rounds): no divergence, every message once`, () =>
        Effect.gen(function*() {
          const threads = yield* GatewayThreads.GatewayThreads
          const session = `other-${hidden}-${order.join("-")}`
          const begun = {
            first: yield* threads.begin(request(session, [user("hello")])),
            second: yield* threads.begin(request(session, [user("hello")]))
          }
          const text = { first: "A", second: "B" }
          for (const which of order) {
            const a = answer(text[which], hidden)
            yield* threads.complete(begun[which], a.reply, a.expansion)
          }
          const next = yield* threads.begin(request(session, [user("hello"), assistant("A"), user("next")]))
          expect([next.diverged, next.newMessages]).toEqual([false, 1])
          yield* threads.complete(next, answer("C", false).reply)
          // And the conversation goes on from there.
          const after = yield* threads.begin(request(session, [user("hello"), assistant("A"), user("next"), assistant("C"), user("more")]))
          expect([after.diverged, after.newMessages]).toEqual([false, 1])
          const { diverged, items } = yield* recordOf(next.threadId)
          expect(diverged).toBe(0)
          expect(items).toEqual([
            ["user_message", "hello"],
            ...order.map((which) => ["assistant_message", text[which]]),
            ["user_message", "next"],
            ["assistant_message", "C"],
            ["user_message", "more"]
          ])
        }).pipe(Effect.provide(layer(db))))
    }
  }

  // Review r35late: a run's end records the prompts owed behind it (RunLifecycle, c98f5f5): those of the later runs
  // that ended without starting. A gateway run never waits queued, yet a later gateway run may end first: the agent
  // hung up on the first request and its retry was answered before the hang-up was recorded. The first run's end then
  // took the retry's completed run for one that ended without starting and appended the retried prompt to it, after
  // its reply: the prompt recorded twice, the second time where the agent never sent it.
  it.live("a request whose retry was answered first, then ended by the agent's hang-up: the prompt is recorded once", () =>
    Effect.gen(function*() {
      const threads = yield* GatewayThreads.GatewayThreads
      const first = yield* threads.begin(request("hung-up", [user("hello")]))
      const retry = yield* threads.begin(request("hung-up", [user("hello")]))
      yield* threads.complete(retry, answer("B", false).reply)
      yield* threads.fail(first, "interrupted", "interrupted_by_user", "the agent hung up")
      const { items } = yield* recordOf(first.threadId)
      expect(items).toEqual([["user_message", "hello"], ["assistant_message", "B"]])
    }).pipe(Effect.provide(layer(db))))

  // Review r35late: a message sent to a gateway thread while a gateway run is in flight is queued behind it and
  // interrupted there; the gateway's answer then completes its run in one statement (`updateRunIfRunning`), past
  // `RunLifecycle.update`. The prompt is owed (`runs.prompt_owed`) until that run ends, and recorded once, after the
  // answer (while c98f5f5 deferred such a prompt to the run ahead's end, it was never recorded; before the durable
  // mark it was recorded at the interrupt, before the answer).
  it.live("a message queued behind a gateway run and interrupted there: its prompt is recorded once, after the gateway's answer", () => {
    const h = Harness.make([{ name: "anthropic", window: 200_000, inject: false }], { db })
    return Effect.gen(function*() {
      const threads = yield* GatewayThreads.GatewayThreads
      const driver = yield* RunDriver.RunDriver
      const first = yield* threads.begin(request("queued-behind", [user("hello")]))
      const queued = yield* driver.submit(Commands.SendMessage.make({ commandId: "cmd_gw_queued_1" as CommandId, threadId: first.threadId, text: "From the user." }))
      const interrupted = yield* driver.interrupt(Commands.InterruptRun.make({ commandId: "cmd_gw_queued_2" as CommandId, threadId: first.threadId, runId: queued.runId }))
      expect(interrupted.status).toBe("interrupted")
      yield* threads.complete(first, answer("A", false).reply)
      const { items } = yield* recordOf(first.threadId)
      expect(items).toEqual([["user_message", "hello"], ["assistant_message", "A"], ["user_message", "From the user."]])
    }).pipe(Effect.scoped, Effect.provide(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))))
  })

  // The two runs review r35last found alike, on one thread: a retry interrupted through the API (`interrupted`,
  // `before_provider`, no items, never queued) and a message queued behind the request it repeats and interrupted
  // there. Only the queued one owes its prompt (it alone carries the mark its end wrote): recorded once, after the
  // answer; the retry's prompt is not appended.
  it.live("a retry interrupted through the API and a queued message interrupted, both behind one request: only the queued prompt is recorded, after the answer", () => {
    const h = Harness.make([{ name: "anthropic", window: 200_000, inject: false }], { db })
    return Effect.gen(function*() {
      const threads = yield* GatewayThreads.GatewayThreads
      const driver = yield* RunDriver.RunDriver
      const store = yield* ThreadStore
      const first = yield* threads.begin(request("retry-and-queued", [user("hello")]))
      const retry = yield* threads.begin(request("retry-and-queued", [user("hello")]))
      const queued = yield* driver.submit(Commands.SendMessage.make({ commandId: "cmd_gw_both_1" as CommandId, threadId: first.threadId, text: "From the user." }))
      for (const [runId, k] of [[queued.runId, 2], [retry.run.id, 3]] as const) {
        const interrupted = yield* driver.interrupt(Commands.InterruptRun.make({ commandId: `cmd_gw_both_${k}` as CommandId, threadId: first.threadId, runId }))
        expect([interrupted.status, interrupted.stopPoint]).toEqual(["interrupted", "before_provider"])
      }
      expect((yield* store.listPromptOwedRuns(first.threadId)).map((r) => r.id)).toEqual([queued.runId])
      yield* threads.complete(first, answer("A", false).reply)
      const { items } = yield* recordOf(first.threadId)
      expect(items).toEqual([["user_message", "hello"], ["assistant_message", "A"], ["user_message", "From the user."]])
      expect(yield* store.listPromptOwedRuns(first.threadId)).toEqual([])
    }).pipe(Effect.scoped, Effect.provide(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))))
  })

  // Review r35last: InvariantChecks' prompt-once does not hold on a gateway's thread (its runs store the agent's
  // messages as sent). Told only by a `gateway.*` event, a thread whose answer reported no usage and that had no retry
  // wrote none: a user message of two text blocks (Claude Code's reminder, then the text) was a prompt recorded twice.
  it.live("InvariantChecks on a gateway's thread without a gateway event: no prompt-once violation", () =>
    Effect.gen(function*() {
      const threads = yield* GatewayThreads.GatewayThreads
      const first = yield* threads.begin(request("two-blocks", [{ role: "user", content: [{ type: "text", text: "<system-reminder>x</system-reminder>" }, { type: "text", text: "hello" }] }]))
      yield* threads.complete(first, answer("A", false).reply)
      expect((yield* recordOf(first.threadId)).items.filter(([kind]) => kind === "user_message")).toHaveLength(2)
      expect(yield* InvariantChecks.check(first.threadId)).toEqual([])
    }).pipe(Effect.provide(layer(db))))

  // Review r35last: a gateway run interrupted through the API (the user, or the process stopping) ends `interrupted`
  // before the provider (its native thread is unknown: nothing tells whether the upstream read it), like a queued run
  // that never started. While a run's end recorded the prompts of later runs so ended (c98f5f5, reverted), the run
  // ahead of it ending took the retry's run for one that owed its prompt and appended the retried prompt: twice.
  it.live("a retry interrupted through the API before the request it repeats ends: the prompt is recorded once", () => {
    const h = Harness.make([{ name: "anthropic", window: 200_000, inject: false }], { db })
    return Effect.gen(function*() {
      const threads = yield* GatewayThreads.GatewayThreads
      const driver = yield* RunDriver.RunDriver
      const first = yield* threads.begin(request("retry-interrupted", [user("hello")]))
      const retry = yield* threads.begin(request("retry-interrupted", [user("hello")]))
      const interrupted = yield* driver.interrupt(Commands.InterruptRun.make({ commandId: "cmd_gw_retry_int_1" as CommandId, threadId: first.threadId, runId: retry.run.id }))
      expect(interrupted.status).toBe("interrupted")
      yield* threads.complete(first, answer("A", false).reply)
      const { items } = yield* recordOf(first.threadId)
      expect(items).toEqual([["user_message", "hello"], ["assistant_message", "A"]])
    }).pipe(Effect.scoped, Effect.provide(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))))
  })

  it.live("a retry's run names the prompt it retried, as the first run did: after the reply was recorded, and while it streamed", () =>
    Effect.gen(function*() {
      const threads = yield* GatewayThreads.GatewayThreads
      const store = yield* ThreadStore
      const history = [user("one"), assistant("A"), user("two")]
      const first = yield* threads.begin(request("prompt", [user("one")]))
      yield* threads.complete(first, answer("A", false).reply)
      const second = yield* threads.begin(request("prompt", history))
      // Sent again while its answer streams (nothing recorded for it yet), then answered, then sent again.
      const streaming = yield* threads.begin(request("prompt", history))
      yield* threads.complete(second, answer("B", false).reply)
      yield* threads.complete(streaming, answer("B", false).reply)
      const afterReply = yield* threads.begin(request("prompt", history))
      expect([streaming.repeats, afterReply.retried !== null]).toEqual([true, true])
      const runs = yield* store.listRuns(first.threadId)
      expect(runs.map((r) => r.prompt)).toEqual(["one", "two", "two", "two"])
    }).pipe(Effect.provide(layer(db))))

  // Review r31: the first request Baton saw of a conversation (a resumed session, or one after a divergence) stores
  // every message, so its prompt is the newest user text among them, which may come before the model's last message
  // when the request ends with tool results; its retry's prompt was that newest input's ("": tool results only).
  it.live("a retry of a request that carried earlier history names the prompt the run it repeats named", () =>
    Effect.gen(function*() {
      const threads = yield* GatewayThreads.GatewayThreads
      const store = yield* ThreadStore
      const history = [
        user("resume the refactor"),
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "Bash", input: { command: "ls" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "a.ts b.ts" }] }
      ]
      const first = yield* threads.begin(request("resumed", history))
      const streaming = yield* threads.begin(request("resumed", history))
      yield* threads.complete(first, answer("A", false).reply)
      const afterReply = yield* threads.begin(request("resumed", history))
      expect([streaming.repeats, afterReply.retried !== null]).toEqual([true, true])
      const runs = yield* store.listRuns(first.threadId)
      expect(runs.map((r) => r.prompt)).toEqual(["resume the refactor", "resume the refactor", "resume the refactor"])
    }).pipe(Effect.provide(layer(db))))

  for (const [form, column] of [
    ["{prints, content} (before `replied`)", (b: GatewayConversations.Baseline) => JSON.stringify({ prints: b.prints, content: b.content })],
    ["an array of fingerprints (before content prints)", (b: GatewayConversations.Baseline) => JSON.stringify(b.prints)]
  ] as const) {
    it.live(`a baseline stored as ${form} is read: the next request extends it; a retry of its last request is a divergence`, () =>
      Effect.gen(function*() {
        const threads = yield* GatewayThreads.GatewayThreads
        const sql = yield* SqlClient.SqlClient
        const repository = yield* GatewayConversations.make
        const session = `old-${column.length}-${form.length}`
        const first = yield* threads.begin(request(session, [user("one")]))
        yield* threads.complete(first, answer("A", false).reply)
        // The row as a version without `replied` wrote it.
        const stored = Option.getOrThrow(yield* repository.find(first.conversationKey))
        expect(stored.baseline.replied).toBe(1)
        yield* sql`UPDATE gateway_conversations SET baseline = ${column(stored.baseline)} WHERE conversation_key = ${first.conversationKey}`
        const read = Option.getOrThrow(yield* repository.find(first.conversationKey))
        expect(read.baseline.prints).toEqual(stored.baseline.prints)
        expect(read.baseline.replied).toBeUndefined()

        const next = yield* threads.begin(request(session, [user("one"), assistant("A"), user("two")]))
        expect([next.diverged, next.newMessages]).toEqual([false, 1])
        yield* threads.complete(next, answer("B", false).reply)
        // Rewritten old again: a retry of "two" is a divergence (nothing says the last message is a reply), storing nothing.
        const again = Option.getOrThrow(yield* repository.find(first.conversationKey))
        yield* sql`UPDATE gateway_conversations SET baseline = ${column(again.baseline)} WHERE conversation_key = ${first.conversationKey}`
        const retry = yield* threads.begin(request(session, [user("one"), assistant("A"), user("two")]))
        expect([retry.diverged, retry.retried, retry.newMessages]).toEqual([true, null, 0])
        yield* threads.complete(retry, answer("C", false).reply)
        // And the conversation goes on from the retry's answer.
        const after = yield* threads.begin(request(session, [user("one"), assistant("A"), user("two"), assistant("C"), user("three")]))
        expect([after.diverged, after.newMessages]).toEqual([false, 1])
        const { diverged, items, retried } = yield* recordOf(first.threadId)
        expect([diverged, retried]).toEqual([1, 0])
        expect(items).toEqual([
          ["user_message", "one"],
          ["assistant_message", "A"],
          ["user_message", "two"],
          ["assistant_message", "B"],
          ["assistant_message", "C"],
          ["user_message", "three"]
        ])
      }).pipe(Effect.provide(layer(db))))
  }
})
