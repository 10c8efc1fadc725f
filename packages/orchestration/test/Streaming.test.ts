import { Commands, type CommandId, type RunId, type ThreadEvent, type ThreadId } from "@baton/contracts"
import { RunDriver } from "@baton/orchestration"
import { ThreadEventBus } from "@baton/persistence"
import { ScriptedProvider } from "@baton/providers"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Layer, Option, Queue, Stream, Tracer } from "effect"

let n = 0
const cid = () => `cmd_stream_${++n}` as CommandId
const send = (threadId: ThreadId, text: string) => Commands.SendMessage.make({ commandId: cid(), threadId, text })
const failOnFirstTurn = (fault: ScriptedProvider.Fault): ScriptedProvider.FaultPlan => (c) =>
  c.operation === "startTurn" && c.call === 1 ? fault : null

type Appended = Extract<ThreadEvent, { readonly type: "items.appended" }>["payload"]

const statusOf = (o: Effect.Effect.Success<typeof Harness.ops>, runId: RunId) =>
  Effect.map(o.store.getRun(runId), Option.match({ onNone: () => null, onSome: (r) => r.status }))

/**
 * A tracer that records each statement `@effect/sql` runs (`sql.execute` spans) with the outermost transaction it
 * ran in (`sql.transaction` spans; `null`: outside any), in order.
 */
const statementTracer = () => {
  const statements: Array<{ readonly text: string; readonly unit: string | null }> = []
  let ids = 0
  const outermost = (parent: Option.Option<Tracer.AnySpan>): string | null => {
    let found: string | null = null
    for (let p = Option.getOrUndefined(parent); p !== undefined; p = p._tag === "Span" ? Option.getOrUndefined(p.parent) : undefined) {
      if (p._tag === "Span" && p.name === "sql.transaction") found = p.spanId
    }
    return found
  }
  const tracer = Tracer.make({
    span: (name, parent, context, links, startTime, kind) => {
      const attributes = new Map<string, unknown>()
      const spanId = String(++ids)
      return {
        _tag: "Span",
        name,
        spanId,
        traceId: "statements",
        parent,
        context,
        status: { _tag: "Started", startTime },
        attributes,
        links: [...links],
        sampled: true,
        kind,
        end: () => {
          if (name === "sql.execute") statements.push({ text: String(attributes.get("db.query.text") ?? ""), unit: outermost(parent) })
          if (name === "sql.transaction" && outermost(parent) === null) statements.push({ text: "BEGIN + COMMIT", unit: spanId })
        },
        attribute: (key, value) => void attributes.set(key, value),
        event: () => {},
        addLinks: () => {}
      }
    },
    context: (f) => f()
  })
  return { tracer, statements }
}

describe.each(Harness.dialects)("a streamed turn on %s", (_label, db) => {
  it.effect("a turn whose items come with its end (one chunk): items and outcome in one unit of work, each item's seq assigned by its insert, the run seq, attempt count and watermark read with their writes; three units of work in all", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    const adapter = h.providers.codex!
    const startTurn = adapter.startTurn
    ;(adapter as { startTurn: typeof startTurn }).startTurn = (input) =>
      Stream.unwrap(Effect.map(Stream.runCollect(startTurn(input)), Stream.fromChunk))
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const threadId = yield* o.create("codex")
      h.script.enqueue({ items: [Harness.produced("assistant_message", "first")] })
      expect((yield* o.send(threadId, "warm up")).status).toBe("completed")
      h.script.enqueue({
        items: [
          Harness.produced("assistant_message", "I will list the files"),
          Harness.produced("tool_call", "{\"cmd\":\"ls\"}", { toolCallId: "call_1", toolName: "bash" }),
          Harness.produced("tool_result", "a.ts b.ts", { toolCallId: "call_1", toolName: "bash" }),
          Harness.produced("assistant_message", "two files")
        ]
      })
      const traced = statementTracer()
      const r = yield* Effect.withTracer(o.send(threadId, "what is in the repo?"), traced.tracer)
      expect(r.status).toBe("completed")
      const units = [...new Set(traced.statements.flatMap((s) => s.unit === null ? [] : [s.unit]))]
      // Queueing (claimed at once), the attempt's start, and the items with the outcome.
      expect(units.length).toBe(3)
      const itemsInsert = traced.statements.filter((s) => s.text.startsWith("INSERT INTO items"))
      expect(itemsInsert.length).toBe(2)
      expect(itemsInsert[1]!.unit).toBe(units[2])
      // Their `items.appended` goes with the outcome's events, in one statement.
      expect(traced.statements.filter((s) => s.unit === units[2] && s.text.startsWith("INSERT INTO thread_events")).length).toBe(1)
      expect(traced.statements.filter((s) => /MAX\(seq\)[^]*FROM items/.test(s.text) && !s.text.startsWith("INSERT"))).toEqual([])
      // Reads folded into the statements beside them: the next run seq (with the active run), the run and its
      // attempts before `running` (the conditional move), the provider thread before its watermark moves.
      expect(traced.statements.filter((s) => s.text.includes("AS next FROM runs"))).toEqual([])
      expect(traced.statements.filter((s) => s.text.includes("AS attempt_count") && s.text.startsWith("SELECT"))).toEqual([])
      expect(traced.statements.filter((s) => s.unit === units[2] && s.text.startsWith("SELECT * FROM provider_threads"))).toEqual([])
      const items = yield* o.store.listItems(threadId)
      expect(items.map((i) => [i.seq, i.kind, i.text])).toEqual([
        [1, "user_message", "warm up"],
        [2, "assistant_message", "first"],
        [3, "user_message", "what is in the repo?"],
        [4, "assistant_message", "I will list the files"],
        [5, "tool_call", "{\"cmd\":\"ls\"}"],
        [6, "tool_result", "a.ts b.ts"],
        [7, "assistant_message", "two files"]
      ])
      // The turn's items are announced after its start and before its outcome.
      const all = yield* o.store.listEvents(threadId)
      const events = all.slice(all.map((e) => e.type).lastIndexOf("run.started") + 1)
      expect(events.map((e) => e.type)).toEqual(["items.appended", "usage.reported", "run.completed"])
      expect(events[0]!.type === "items.appended" ? [events[0]!.payload.fromSeq, events[0]!.payload.toSeq] : null).toEqual([4, 7])
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })


  it.live("a send returns its run id at once; the run's first 2 items are announced while the turn is held open; after release it completes with each item once", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const driver = yield* RunDriver.RunDriver
      const bus = yield* ThreadEventBus
      const appended = yield* Queue.unbounded<Appended>()
      const subscription = yield* bus.subscribe
      yield* Effect.forkScoped(Stream.fromQueue(subscription).pipe(
        Stream.filterMap((e) => e.type === "items.appended" ? Option.some(e.payload) : Option.none()),
        Stream.runForEach((e) => Queue.offer(appended, e))
      ))
      const threadId = yield* o.create("codex")
      const gate = yield* Deferred.make<void>()
      h.script.enqueue({
        items: [
          Harness.produced("assistant_message", "first, I read the failing test"),
          Harness.produced("reasoning", "the assertion compares seconds with milliseconds"),
          Harness.produced("assistant_message", "fixed: the timeout is in milliseconds now")
        ],
        hold: { afterItems: 2, gate }
      })

      const accepted = yield* driver.submit(send(threadId, "fix the flaky test"))
      // An idle thread: the run is claimed in its queueing unit of work.
      expect(accepted).toMatchObject({ runSeq: 1, status: "starting" })
      // The prompt's append (at queueing), then one event per streamed item, while the provider holds the turn.
      const prompt = yield* Queue.take(appended)
      expect(prompt).toMatchObject({ runId: accepted.runId, fromSeq: 1, toSeq: 1 })
      const first = yield* Queue.take(appended)
      const second = yield* Queue.take(appended)
      expect([first, second].map((p) => [p.runId, p.fromSeq, p.toSeq])).toEqual([
        [accepted.runId, 2, 2],
        [accepted.runId, 3, 3]
      ])
      expect(yield* statusOf(o, accepted.runId)).toBe("running")
      const whileHeld = yield* o.store.listItems(threadId)
      expect(whileHeld.map((i) => i.kind)).toEqual(["user_message", "assistant_message", "reasoning"])

      yield* Deferred.succeed(gate, undefined)
      const done = yield* driver.awaitRun(accepted.runId)
      expect([done.status, done.failureCode]).toEqual(["completed", null])
      const items = yield* o.store.listItems(threadId)
      expect(items.map((i) => [i.seq, i.kind, i.text])).toEqual([
        [1, "user_message", "fix the flaky test"],
        [2, "assistant_message", "first, I read the failing test"],
        [3, "reasoning", "the assertion compares seconds with milliseconds"],
        [4, "assistant_message", "fixed: the timeout is in milliseconds now"]
      ])
      // Every item was announced exactly once, in order, on the live bus and in the log.
      const third = yield* Queue.take(appended)
      expect(third).toMatchObject({ runId: accepted.runId, fromSeq: 4, toSeq: 4 })
      const logged = (yield* o.store.listEvents(threadId)).filter((e) => e.type === "items.appended")
      expect(logged.flatMap((e) => e.payload.itemIds)).toEqual(items.map((i) => i.id))
      const completed = (yield* o.store.listEvents(threadId)).filter((e) => e.type === "run.completed")
      expect(completed.map((e) => e.payload)).toEqual([{ runId: accepted.runId, itemCount: 3 }])
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.scoped, Effect.provide(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))))
  })

  it.effect("a failure after 2 streamed items: both stay recorded exactly once, the run failed after the provider as unavailable; the next message completes", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true, faults: failOnFirstTurn(ScriptedProvider.failAfterItems(2)) }], { db })
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const threadId = yield* o.create("codex")
      h.script.enqueue({
        items: [
          Harness.produced("assistant_message", "reading the logs"),
          Harness.produced("assistant_message", "the disk is full"),
          Harness.produced("assistant_message", "never arrives")
        ]
      })
      const r = yield* o.send(threadId, "why does the build fail?")
      expect([r.status, r.failureCode, r.failureReason]).toEqual([
        "failed",
        "provider_unavailable",
        "provider codex failed startTurn (unavailable): the turn failed after 2 item(s): the stream was disconnected"
      ])
      const run = yield* o.store.getRun(r.runId)
      expect(Option.map(run, (x) => x.stopPoint)).toEqual(Option.some("after_provider"))
      const items = yield* o.store.listItems(threadId)
      expect(items.map((i) => i.text)).toEqual(["why does the build fail?", "reading the logs", "the disk is full"])
      // Not retried: the provider read the prompt once.
      expect(h.providers.codex!.received.filter((x) => x.type === "turn").length).toBe(1)
      expect(yield* o.check(threadId, h)).toEqual([])

      h.script.enqueue(Harness.reply(10))
      const next = yield* o.send(threadId, "go on")
      expect([next.status, next.runSeq]).toEqual(["completed", 2])
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("an overflow mid-stream inside a tool call: the call is recorded dangling with its error result, the native thread recorded full, the run failed as overflow", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true, faults: failOnFirstTurn(ScriptedProvider.failAfterItems(2, "overflow")) }], { db })
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const threadId = yield* o.create("codex")
      h.script.enqueue({
        items: [
          Harness.produced("assistant_message", "I will list the files"),
          Harness.produced("tool_call", "{\"cmd\":\"ls\"}", { toolCallId: "call_1", toolName: "bash" }),
          Harness.produced("tool_result", "a.ts b.ts", { toolCallId: "call_1", toolName: "bash" })
        ]
      })
      const r = yield* o.send(threadId, "what is in the repo?")
      expect([r.status, r.failureCode]).toEqual(["failed", "overflow"])
      const items = yield* o.store.listItems(threadId)
      expect(items.map((i) => [i.kind, i.toolCallState, i.isError, i.text])).toEqual([
        ["user_message", null, false, "what is in the repo?"],
        ["assistant_message", null, false, "I will list the files"],
        ["tool_call", "dangling", false, "{\"cmd\":\"ls\"}"],
        ["tool_result", null, true, "[no result] The turn ended without a result for this tool call."]
      ])
      const thread = yield* o.store.getThread(threadId)
      const providerThread = yield* o.store.getProviderThread(Option.getOrThrow(thread).activeProviderThreadId!)
      const native = yield* o.store.getNativeThread(Option.getOrThrow(providerThread).activeNativeThreadId!)
      expect(Option.getOrThrow(native).usage).toEqual({ usedTokens: r.window, maxTokens: r.window })
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("items a provider delivers together (one stream chunk) are recorded in one unit of work: one items.appended event for the burst, an open tool unit still recorded whole", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    // A provider that delivers its turn's events together: the scripted turn, played to its end, then handed to
    // Baton as one chunk (as the turn-start benchmark does).
    const adapter = h.providers.codex!
    const startTurn = adapter.startTurn
    ;(adapter as { startTurn: typeof startTurn }).startTurn = (input) =>
      Stream.unwrap(Effect.map(Stream.runCollect(startTurn(input)), Stream.fromChunk))
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const threadId = yield* o.create("codex")
      h.script.enqueue({
        items: [
          Harness.produced("assistant_message", "I will list the files"),
          Harness.produced("tool_call", "{\"cmd\":\"ls\"}", { toolCallId: "call_1", toolName: "bash" }),
          Harness.produced("tool_result", "a.ts b.ts", { toolCallId: "call_1", toolName: "bash" }),
          Harness.produced("assistant_message", "two files"),
          Harness.produced("tool_call", "{\"cmd\":\"cat a.ts\"}", { toolCallId: "call_2", toolName: "bash" })
        ]
      })
      const r = yield* o.send(threadId, "what is in the repo?")
      expect(r.status).toBe("completed")
      const items = yield* o.store.listItems(threadId)
      expect(items.map((i) => [i.kind, i.toolCallState, i.text])).toEqual([
        ["user_message", null, "what is in the repo?"],
        ["assistant_message", null, "I will list the files"],
        ["tool_call", null, "{\"cmd\":\"ls\"}"],
        ["tool_result", null, "a.ts b.ts"],
        ["assistant_message", null, "two files"],
        ["tool_call", "dangling", "{\"cmd\":\"cat a.ts\"}"],
        ["tool_result", null, "[no result] The turn ended without a result for this tool call."]
      ])
      // The prompt; the burst up to the open call; the open call closed with the turn's outcome.
      const appended = (yield* o.store.listEvents(threadId)).flatMap((e) => e.type === "items.appended" ? [[e.payload.fromSeq, e.payload.toSeq]] : [])
      expect(appended).toEqual([[1, 1], [2, 5], [6, 7]])
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })
})
