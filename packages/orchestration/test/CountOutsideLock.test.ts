/**
 * Long texts are counted before the unit of work that stores them, not under its lock (`ItemLog.countAhead`), on SQLite
 * and Postgres. A gateway request holding a 20 MB message counted it for seconds inside `GatewayThreads.begin`'s unit
 * of work; on SQLite (one connection) every other conversation's and thread's writes waited that out. The same held
 * for a long reply (`complete`) and a long message sent through the API (`sendMessage`).
 *
 * A long text (over `TokenCounter.sliceChars` characters) is counted in stretches (`counter.stretches`); the test
 * records, for each such call, whether a transaction was open (a tracer counting open `sql.transaction` spans), and
 * checks the stored counts are the ones `stage` would have made.
 */
import { type ClientTool, Commands, type CommandId, type ProviderInstance, type RunId, type ThreadId, type ToolCallId } from "@baton/contracts"
import { Render, TokenCounter } from "@baton/context"
import { GatewayThreads, ItemLog, RunDriver, ThreadService } from "@baton/orchestration"
import { ThreadStore } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, FastCheck as fc, Layer, Tracer } from "effect"

/** Open `sql.transaction` spans, and for each long text counted, whether one was open. */
const tracked = { open: 0, counts: [] as Array<{ readonly chars: number; readonly inTransaction: boolean }>, countsInTransaction: 0 }
const tracer = Tracer.make({
  span: (name, parent, context, links, startTime, kind) => {
    if (name === "sql.transaction") tracked.open++
    return {
      _tag: "Span", name, spanId: "s", traceId: "t", parent, context, status: { _tag: "Started", startTime },
      attributes: new Map(), links: [...links], sampled: true, kind,
      end: () => {
        if (name === "sql.transaction") tracked.open--
      },
      attribute: () => {}, event: () => {}, addLinks: () => {}
    }
  },
  context: (f) => f()
})

type Writable = { stretches: (text: string) => ReadonlyArray<string>; count: (text: string) => number }

/**
 * Runs `effect` with `counter.stretches` recording each long count and whether a transaction was open, and
 * `counter.count` the number of counts made in one (`tracked.countsInTransaction`).
 */
const watching = <A, E, R>(counter: TokenCounter.TokenCounterShape, effect: Effect.Effect<A, E, R>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const original = { stretches: counter.stretches!, count: counter.count }
      tracked.counts = []
      tracked.countsInTransaction = 0
      const writable = counter as Writable
      writable.stretches = (text) => {
        tracked.counts.push({ chars: text.length, inTransaction: tracked.open > 0 })
        return original.stretches(text)
      }
      writable.count = (text) => {
        if (tracked.open > 0) tracked.countsInTransaction++
        return original.count(text)
      }
      return original
    }),
    () => effect,
    (original) => Effect.sync(() => void Object.assign(counter as Writable, original))
  )

/** About `chars` characters of a command's output: lines of words and numbers. */
const longText = (chars: number, seed: number) => {
  const lines: Array<string> = []
  let n = 0
  for (let i = 0; n < chars; i++) {
    const line = `line ${i * 7919 + seed} of a long output: ${(i * 2654435761) % 1000003}\n`
    lines.push(line)
    n += line.length
  }
  return lines.join("").slice(0, chars)
}

const wire = GatewayThreads.anthropicMessages
const gatewayRequest = (session: string, messages: ReadonlyArray<unknown>) => ({
  wire,
  session,
  agent: "Claude Code",
  system: [{ type: "text", text: "You are a coding agent." }],
  messages,
  model: "claude-x",
  providerInstance: "anthropic" as ProviderInstance,
  contextWindow: 1_000_000,
  prices: { input: 3, cacheRead: 0.3, cacheWrite: 3.75, output: 15 },
  offload: { offloaded: [], flush: null }
})

/** The thread's items of `chars` characters have the count `ItemLog.stage` makes (`Render.itemTokens`, `seq` 0). */
const expectCounted = (counter: TokenCounter.TokenCounterShape, threadId: ThreadId, chars: number) =>
  Effect.gen(function*() {
    const items = (yield* (yield* ThreadStore).listItems(threadId)).filter((i) => i.text.length === chars)
    expect(items).toHaveLength(1)
    expect(items[0]!.tokens).toBe(Render.itemTokens(counter, { ...items[0]!, seq: 0 }))
  })

const readFile: ClientTool = {
  name: "read_file",
  description: "Reads a file of the workspace",
  inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] }
}

/** A thread on `claude` offering the client's `read_file` tool. */
const toolThread = (commandId: string) =>
  Effect.flatMap(ThreadService.ThreadService, (service) =>
    service.createThread(Commands.CreateThread.make({
      commandId: commandId as CommandId,
      title: "tools",
      providerInstance: "claude" as ProviderInstance,
      tools: [readFile]
    })))

/** Polls the record until run `runId` waits for the client's tool results (at most 10 s). */
const untilWaiting = (runId: RunId) =>
  Effect.gen(function*() {
    const store = yield* ThreadStore
    for (;;) {
      const run = yield* store.getRun(runId)
      if (run._tag === "Some" && run.value.status === "waiting") return
      yield* Effect.sleep(Duration.millis(10))
    }
  }).pipe(Effect.timeout("10 seconds"))

describe.each(Harness.dialects)("long texts are counted outside the unit of work on %s", (_label, db) => {
  it.live("a gateway request's long message and its long reply", () => {
    const h = Harness.make([{ name: "anthropic", window: 1_000_000, inject: false }], { db })
    return Effect.gen(function*() {
      const threads = yield* GatewayThreads.GatewayThreads
      const message = longText(100_000, 1)
      const reply = longText(60_000, 2)
      const begun = yield* watching(
        h.counter,
        threads.begin(gatewayRequest("long-message", [{ role: "user", content: [{ type: "text", text: message }] }]))
      )
      expect(tracked.counts.filter((c) => c.chars >= message.length)).not.toEqual([])
      expect(tracked.counts.filter((c) => c.inTransaction)).toEqual([])
      yield* watching(
        h.counter,
        threads.complete(begun, { messages: [{ id: "msg_long", message: { role: "assistant", content: [{ type: "text", text: reply }] } }], tokens: null })
      )
      expect(tracked.counts.filter((c) => c.chars >= reply.length)).not.toEqual([])
      expect(tracked.counts.filter((c) => c.inTransaction)).toEqual([])
      yield* expectCounted(h.counter, begun.threadId, message.length)
      yield* expectCounted(h.counter, begun.threadId, reply.length)
      // The conversation's next request: only its new message is counted (ahead), the stored history not again.
      const next = longText(30_000, 3)
      yield* watching(
        h.counter,
        threads.begin(gatewayRequest("long-message", [
          { role: "user", content: [{ type: "text", text: message }] },
          { role: "assistant", content: [{ type: "text", text: reply }] },
          { role: "user", content: [{ type: "text", text: next }] }
        ]))
      )
      expect(tracked.counts.map((c) => c.chars >= next.length && c.chars < reply.length)).toEqual([true])
      expect(tracked.counts.filter((c) => c.inTransaction)).toEqual([])
      yield* expectCounted(h.counter, begun.threadId, next.length)
    }).pipe(Effect.withTracer(tracer), Effect.provide(h.layer))
  })

  // Review r41: `begin` counted the answer ahead, then, when the answer ended hidden `thread_read` rounds (recorded
  // by `completeIn`, not with the request's items), dropped those counts and counted the reply again under the lock.
  it.live("a gateway request answered at once after hidden rounds: its long reply is not counted under the lock", () => {
    const h = Harness.make([{ name: "anthropic", window: 1_000_000, inject: false }], { db })
    return Effect.gen(function*() {
      const threads = yield* GatewayThreads.GatewayThreads
      const text = longText(40_000, 6)
      const message = { role: "assistant", content: [{ type: "text", text }] }
      const expansion: ReadonlyArray<GatewayThreads.Expansion> = [{
        fingerprint: GatewayThreads.expansionKeyOf(wire, message),
        messages: [
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_read_1", name: "thread_read", input: { refs: "#1" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_read_1", content: "1 2 3" }] },
          message
        ]
      }]
      const begun = yield* watching(
        h.counter,
        threads.begin(gatewayRequest("hidden-rounds", [{ role: "user", content: [{ type: "text", text: "read #1 again" }] }]), {
          _tag: "completed",
          reply: { messages: [{ id: "msg_hidden", message }], tokens: null },
          expansion
        })
      )
      expect(tracked.counts.filter((c) => c.chars >= text.length)).not.toEqual([])
      expect(tracked.counts.filter((c) => c.inTransaction)).toEqual([])
      yield* expectCounted(h.counter, begun.threadId, text.length)
    }).pipe(Effect.withTracer(tracer), Effect.provide(h.layer))
  })

  it.live("a gateway request of 1,000 messages: none counted under the lock", () => {
    const h = Harness.make([{ name: "anthropic", window: 1_000_000, inject: false }], { db })
    return Effect.gen(function*() {
      const threads = yield* GatewayThreads.GatewayThreads
      const messages = Array.from({ length: 1_001 }, (_, i) => ({ role: i % 2 === 0 ? "user" : "assistant", content: [{ type: "text", text: `message ${i}` }] }))
      const begun = yield* watching(h.counter, threads.begin(gatewayRequest("many-messages", messages)))
      expect(tracked.countsInTransaction).toBe(0)
      const items = yield* (yield* ThreadStore).listItems(begun.threadId)
      expect(items).toHaveLength(1_001)
      expect(items.filter((i) => i.tokens !== Render.itemTokens(h.counter, { ...i, seq: 0 }))).toEqual([])
    }).pipe(Effect.withTracer(tracer), Effect.provide(h.layer))
  })

  it.live("a long message sent through the service", () => {
    const h = Harness.make([{ name: "claude", window: 1_000_000, inject: false }], { db })
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const threadId = yield* o.create("claude")
      const prompt = longText(80_000, 4)
      h.script.enqueue(Harness.reply(20))
      const sent = yield* watching(h.counter, o.send(threadId, prompt))
      expect(sent.status).toBe("completed")
      expect(tracked.counts.filter((c) => c.chars >= prompt.length)).not.toEqual([])
      expect(tracked.counts.filter((c) => c.inTransaction)).toEqual([])
      yield* expectCounted(h.counter, threadId, prompt.length)
    }).pipe(Effect.withTracer(tracer), Effect.provide(h.layer))
  })

  it.live("a client tool's long result", () => {
    const h = Harness.make([{ name: "claude", window: 1_000_000, inject: false }], { db })
    return Effect.gen(function*() {
      const driver = yield* RunDriver.RunDriver
      const threadId = yield* toolThread("cmd_count_tools_1")
      h.script.enqueue({ items: [Harness.produced("tool_call", JSON.stringify({ path: "big.log" }), { toolCallId: "call_big", toolName: "read_file", messageId: "msg_1" })] })
      h.script.enqueue({ items: [Harness.produced("assistant_message", "Read it.", { messageId: "msg_2" })] })
      const accepted = yield* driver.submit(Commands.SendMessage.make({ commandId: "cmd_count_tools_2" as CommandId, threadId, text: "Read big.log" }))
      yield* untilWaiting(accepted.runId)
      const output = longText(70_000, 5)
      yield* watching(h.counter, driver.submitToolResults(Commands.SubmitToolResults.make({
        commandId: "cmd_count_tools_3" as CommandId,
        threadId,
        runId: accepted.runId,
        results: [{ toolCallId: "call_big" as ToolCallId, output, isError: false }]
      })))
      expect(tracked.counts.filter((c) => c.chars >= output.length)).not.toEqual([])
      expect(tracked.counts.filter((c) => c.inTransaction)).toEqual([])
      expect((yield* driver.awaitRun(accepted.runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")
      yield* expectCounted(h.counter, threadId, output.length)
    }).pipe(Effect.withTracer(tracer), Effect.provide(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))))
  })

  it.live("a fork of a thread holding a long item: the copy takes the original's count", () => {
    const h = Harness.make([{ name: "claude", window: 1_000_000, inject: false }], { db })
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const parent = yield* o.create("claude")
      const prompt = longText(40_000, 7)
      h.script.enqueue(Harness.reply(20))
      expect((yield* o.send(parent, prompt)).status).toBe("completed")
      const fork = yield* watching(h.counter, o.fork(parent))
      expect(tracked.counts.filter((c) => c.inTransaction)).toEqual([])
      const forkId = fork.threadId as ThreadId
      yield* expectCounted(h.counter, parent, prompt.length)
      yield* expectCounted(h.counter, forkId, prompt.length)
    }).pipe(Effect.withTracer(tracer), Effect.provide(h.layer))
  })

  // Review r41: a long prompt queued behind an unfinished run was counted when its run started, in the claim's unit of
  // work (RunLifecycle.recordPrompt); only a prompt claimed with its queueing was counted ahead.
  it.live("a long message queued behind an unfinished run", () => {
    const h = Harness.make([{ name: "claude", window: 1_000_000, inject: false }], { db })
    return Effect.gen(function*() {
      const driver = yield* RunDriver.RunDriver
      const store = yield* ThreadStore
      const threadId = yield* toolThread("cmd_count_queued_1")
      // The first run waits for the client's tool result: the second queues behind it.
      h.script.enqueue({ items: [Harness.produced("tool_call", JSON.stringify({ path: "a.ts" }), { toolCallId: "call_a", toolName: "read_file", messageId: "msg_1" })] })
      h.script.enqueue({ items: [Harness.produced("assistant_message", "Read it.", { messageId: "msg_2" })] })
      h.script.enqueue(Harness.reply(20))
      const first = yield* driver.submit(Commands.SendMessage.make({ commandId: "cmd_count_queued_2" as CommandId, threadId, text: "Read a.ts" }))
      yield* untilWaiting(first.runId)
      const prompt = longText(50_000, 6)
      const second = yield* driver.submit(Commands.SendMessage.make({ commandId: "cmd_count_queued_3" as CommandId, threadId, text: prompt }))
      expect((yield* store.getRun(second.runId)).pipe((r) => r._tag === "Some" ? r.value.status : null)).toBe("queued")
      const done = yield* watching(h.counter, Effect.zipRight(
        driver.submitToolResults(Commands.SubmitToolResults.make({
          commandId: "cmd_count_queued_4" as CommandId,
          threadId,
          runId: first.runId,
          results: [{ toolCallId: "call_a" as ToolCallId, output: "export const a = 1", isError: false }]
        })),
        driver.awaitRun(second.runId).pipe(Effect.timeout("10 seconds"))
      ))
      expect(done.status).toBe("completed")
      expect(tracked.counts.filter((c) => c.chars >= prompt.length)).not.toEqual([])
      expect(tracked.counts.filter((c) => c.inTransaction)).toEqual([])
      yield* expectCounted(h.counter, threadId, prompt.length)
    }).pipe(Effect.withTracer(tracer), Effect.provide(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))))
  })
})

describe("withCountsFrom", () => {
  const kinds = ["user_message", "assistant_message", "tool_result"] as const
  const item = fc.record({
    kind: fc.constantFrom(...kinds),
    text: fc.oneof(fc.constantFrom("a", "b", "ab", ""), fc.string({ maxLength: 3 }), fc.constant("x".repeat(TokenCounter.sliceChars + 1)), fc.constant("y".repeat(TokenCounter.sliceChars + 1))),
    toolName: fc.constantFrom(null, "read"),
    toolCallId: fc.constantFrom(null, "call_1"),
    isError: fc.boolean()
  }).map((r): ItemLog.NewItem => ({ ...r, messageId: null, toolCallState: null }))
  /** A stand-in count that differs with everything an item's render shows. */
  const countOf = (i: ItemLog.NewItem) => i.text.length * 31 + i.kind.length * 7 + (i.toolName?.length ?? 0) * 3 + (i.isError ? 1 : 0) + (i.toolCallId === null ? 0 : 2)

  it.prop("every count taken is an item's that renders alike; nothing else changes", [fc.array(item, { maxLength: 12 }), fc.array(item, { maxLength: 12 })], ([items, others]) => {
    const ahead = others.map((i) => ({ ...i, tokens: countOf(i) }))
    const out = ItemLog.withCountsFrom(ahead, items)
    expect(out).toHaveLength(items.length)
    out.forEach((o, k) => {
      const { tokens, ...rest } = o
      expect(rest).toEqual(items[k])
      if (tokens !== undefined) expect(tokens).toBe(countOf(items[k]!))
    })
  })

  it.prop("the same items counted ahead, or the newest part of them: every one takes its count", [fc.array(item, { maxLength: 12 }), fc.nat(12)], ([items, from]) => {
    const ahead = items.map((i) => ({ ...i, tokens: countOf(i) }))
    const newest = items.slice(Math.min(from, items.length))
    expect(ItemLog.withCountsFrom(ahead, newest).map((o) => o.tokens)).toEqual(newest.map(countOf))
  })
})
