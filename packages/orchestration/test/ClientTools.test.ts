/**
 * The client's tools (issue 9, item 2) with the scripted provider on both dialects: a run whose model calls the
 * client's tools (two in parallel) goes `waiting` with the open calls, the results posted continue it, the loop can
 * repeat; the deadline and an interrupt end it with error results (an interrupt, here or posted on a second process,
 * starts the run queued behind at once); a restart keeps the wait.
 */
import { type ClientTool, Commands, type CommandId, mergeTools, type RunId, type RunStatus, type ThreadId, type ToolCallId } from "@baton/contracts"
import { RunDriver, ThreadQuery, ThreadService } from "@baton/orchestration"
import { ThreadStore } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import type { ProviderAdapter } from "@baton/providers"
import { Context, DateTime, Deferred, Duration, Effect, Layer, Stream } from "effect"

let n = 0
const cid = () => `cmd_tools_${++n}` as CommandId

const readFile: ClientTool = {
  name: "read_file",
  description: "Reads a file of the workspace",
  inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] }
}
const grep: ClientTool = {
  name: "grep",
  description: "Searches the workspace",
  inputSchema: { type: "object", properties: { pattern: { type: "string" } }, required: ["pattern"] }
}

/** A response calling `read_file` on each of `paths` in parallel (one assistant message), after a line of text. */
const callsFor = (round: number, paths: ReadonlyArray<string>) => ({
  items: [
    Harness.produced("assistant_message", `Round ${round}: reading ${paths.join(" and ")}.`, { messageId: `msg_${round}` }),
    ...paths.map((p, k) =>
      Harness.produced("tool_call", JSON.stringify({ path: p }), { toolCallId: `call_${round}_${k}`, toolName: "read_file", messageId: `msg_${round}` })
    )
  ]
})
const finalAnswer = { items: [Harness.produced("assistant_message", "Both files read: they agree.", { messageId: "msg_final" })] }

const result = (toolCallId: string, output: string, isError = false) => ({ toolCallId: toolCallId as ToolCallId, output, isError })

/** Polls the record until run `runId` has `status` (at most 10 s, else `TimeoutException`). */
const untilStatus = (runId: RunId, status: RunStatus) =>
  Effect.gen(function*() {
    const store = yield* ThreadStore
    for (;;) {
      const run = yield* store.getRun(runId)
      if (run._tag === "Some" && run.value.status === status) return run.value
      yield* Effect.sleep(Duration.millis(10))
    }
  }).pipe(Effect.timeout("10 seconds"))

const setup = (threadTools: ReadonlyArray<ClientTool>) =>
  Effect.gen(function*() {
    const service = yield* ThreadService.ThreadService
    const threadId = yield* service.createThread(Commands.CreateThread.make({
      commandId: cid(),
      title: "tools",
      providerInstance: "claude" as Commands.CreateThread["providerInstance"],
      tools: threadTools
    }))
    return threadId
  })

const send = (threadId: ThreadId, text: string, tools?: ReadonlyArray<ClientTool>) =>
  Effect.flatMap(RunDriver.RunDriver, (driver) =>
    driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text, ...(tools === undefined ? {} : { tools }) })))

const post = (threadId: ThreadId, runId: RunId, results: ReadonlyArray<ReturnType<typeof result>>, commandId: CommandId = cid()) =>
  Effect.flatMap(RunDriver.RunDriver, (driver) => driver.submitToolResults(Commands.SubmitToolResults.make({ commandId, threadId, runId, results })))

describe("mergeTools", () => {
  it("a message's tool replaces the thread's tool of the same name in place; the others are added after", () => {
    const newer = { ...readFile, description: "Reads a file (v2)" }
    expect(mergeTools([readFile, grep], [newer]).map((t) => t.description)).toEqual(["Reads a file (v2)", "Searches the workspace"])
    expect(mergeTools([readFile], [grep]).map((t) => t.name)).toEqual(["read_file", "grep"])
    expect(mergeTools([], [])).toEqual([])
  })
})

describe.each(Harness.dialects)("client tools on %s", (_label, db) => {
  const providers = [{ name: "claude", window: 200_000, inject: false }]

  it.live("parallel calls: the run waits with both open calls, the results continue it, the queue behind it runs after", () => {
    const h = Harness.make(providers, { db })
    const layer = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))
    return Effect.gen(function*() {
      const store = yield* ThreadStore
      const query = yield* ThreadQuery.ThreadQuery
      const driver = yield* RunDriver.RunDriver
      const threadId = yield* setup([readFile])
      h.script.enqueue(callsFor(1, ["a.ts", "b.ts"]))
      h.script.enqueue(finalAnswer)
      const accepted = yield* send(threadId, "Compare a.ts and b.ts")
      yield* untilStatus(accepted.runId, "waiting")

      const view = yield* query.run(accepted.runId)
      expect(view.openToolCalls).toEqual([
        { toolCallId: "call_1_0", name: "read_file", arguments: "{\"path\":\"a.ts\"}" },
        { toolCallId: "call_1_1", name: "read_file", arguments: "{\"path\":\"b.ts\"}" }
      ])
      expect(view.toolResultsDeadline).not.toBeNull()
      // The calls are held with the wait: the record never holds a call without its result.
      expect(view.items.map((i) => i.kind)).toEqual(["user_message", "assistant_message"])
      const waiting = (yield* store.listEvents(threadId)).filter((e) => e.type === "run.waiting")
      expect(waiting.map((e) => e.type === "run.waiting" ? e.payload.calls.map((c) => c.toolCallId) : [])).toEqual([["call_1_0", "call_1_1"]])

      // The thread's queue is blocked behind the waiting run.
      const second = yield* send(threadId, "And now c.ts?")
      yield* Effect.sleep(Duration.millis(100))
      expect(statusOf(yield* store.getRun(second.runId))).toBe("queued")

      // Results that do not answer the open calls are refused, naming the ids.
      const wrong = yield* Effect.flip(post(threadId, accepted.runId, [result("call_1_0", "A"), result("call_9", "?")]))
      expect(wrong._tag).toBe("InvalidRequest")
      expect(wrong.message).toContain("no open tool call has the id \"call_9\"")
      expect(wrong.message).toContain("no result for the open call \"call_1_1\"")
      const twice = yield* Effect.flip(post(threadId, accepted.runId, [result("call_1_0", "A"), result("call_1_0", "A"), result("call_1_1", "B")]))
      expect(twice.message).toContain("more than one result for \"call_1_0\"")

      // Posted in the other order: recorded in the calls' order, each after the held calls.
      const commandId = cid()
      const posted = yield* post(threadId, accepted.runId, [result("call_1_1", "contents of b"), result("call_1_0", "contents of a")], commandId)
      expect(posted).toMatchObject({ runId: accepted.runId, status: "waiting" })
      const again = yield* post(threadId, accepted.runId, [result("call_1_1", "contents of b"), result("call_1_0", "contents of a")], commandId)
      expect(again.runId).toBe(accepted.runId)
      const done = yield* driver.awaitRun(accepted.runId).pipe(Effect.timeout("10 seconds"))
      expect(done.status).toBe("completed")
      const late = yield* Effect.flip(post(threadId, accepted.runId, [result("call_1_0", "A"), result("call_1_1", "B")]))
      expect(late._tag).toBe("RunNotWaiting")

      const items = (yield* query.run(accepted.runId)).items
      expect(items.map((i) => [i.kind, i.toolCallId, i.text, i.toolCallState, i.isError])).toEqual([
        ["user_message", null, "Compare a.ts and b.ts", null, false],
        ["assistant_message", null, "Round 1: reading a.ts and b.ts.", null, false],
        ["tool_call", "call_1_0", "{\"path\":\"a.ts\"}", "answered", false],
        ["tool_call", "call_1_1", "{\"path\":\"b.ts\"}", "answered", false],
        ["tool_result", "call_1_0", "contents of a", null, false],
        ["tool_result", "call_1_1", "contents of b", null, false],
        ["assistant_message", null, "Both files read: they agree.", null, false]
      ])
      const sent = h.providers.claude!.received.filter((r) => r.type === "tool_results")
      expect(sent.map((r) => r.type === "tool_results" ? [r.results.map((x) => [x.toolCallId, x.output]), r.tools] : null)).toEqual([
        [[["call_1_0", "contents of a"], ["call_1_1", "contents of b"]], ["read_file"]]
      ])
      expect((yield* driver.awaitRun(second.runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")
      const o = yield* Harness.ops
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.scoped, Effect.provide(layer))
  })

  it.live("a loop of three rounds, the message's tools over the thread's: each round waits, the last answer completes the run", () => {
    const h = Harness.make(providers, { db })
    const layer = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))
    return Effect.gen(function*() {
      const query = yield* ThreadQuery.ThreadQuery
      const driver = yield* RunDriver.RunDriver
      // The thread offers only grep; the message adds read_file, which the script calls.
      const threadId = yield* setup([grep])
      for (let round = 1; round <= 3; round++) h.script.enqueue(callsFor(round, [`r${round}.ts`]))
      h.script.enqueue(finalAnswer)
      const accepted = yield* send(threadId, "Read three files", [readFile])
      for (let round = 1; round <= 3; round++) {
        yield* untilStatus(accepted.runId, "waiting")
        const view = yield* query.run(accepted.runId)
        expect(view.openToolCalls.map((c) => c.toolCallId)).toEqual([`call_${round}_0`])
        yield* post(threadId, accepted.runId, [result(`call_${round}_0`, `file ${round}`)])
        // The run leaves `waiting` once its continuation is claimed.
        yield* Effect.gen(function*() {
          for (;;) {
            const v = yield* query.run(accepted.runId)
            if (v.run.status !== "waiting" || (v.openToolCalls.length > 0 && v.openToolCalls[0]!.toolCallId !== `call_${round}_0`)) return
            yield* Effect.sleep(Duration.millis(10))
          }
        }).pipe(Effect.timeout("10 seconds"))
      }
      expect((yield* driver.awaitRun(accepted.runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")
      const view = yield* query.run(accepted.runId)
      expect(view.items.filter((i) => i.kind === "tool_call" || i.kind === "tool_result").map((i) => `${i.kind}:${i.toolCallId}`)).toEqual([
        "tool_call:call_1_0", "tool_result:call_1_0", "tool_call:call_2_0", "tool_result:call_2_0", "tool_call:call_3_0", "tool_result:call_3_0"
      ])
      // One attempt for the turn, one per continuation.
      expect(view.attempts.map((a) => a.status)).toEqual(["completed", "completed", "completed", "completed"])
      const sent = h.providers.claude!.received.filter((r) => r.type === "tool_results")
      expect(sent.map((r) => r.type === "tool_results" ? r.tools : [])).toEqual([["grep", "read_file"], ["grep", "read_file"], ["grep", "read_file"]])
      const o = yield* Harness.ops
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.scoped, Effect.provide(layer))
  })

  it.live("the deadline: a run waiting past toolResultTimeoutMillis fails (tool_results_timeout) with an error result per open call", () => {
    const h = Harness.make(providers, { db, config: { toolResultTimeoutMillis: 150 } })
    const layer = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))
    return Effect.gen(function*() {
      const query = yield* ThreadQuery.ThreadQuery
      const store = yield* ThreadStore
      const driver = yield* RunDriver.RunDriver
      const threadId = yield* setup([readFile])
      h.script.enqueue(callsFor(1, ["a.ts", "b.ts"]))
      const accepted = yield* send(threadId, "Compare a.ts and b.ts")
      const failed = yield* untilStatus(accepted.runId, "failed")
      expect([failed.failureCode, failed.stopPoint]).toEqual(["tool_results_timeout", "after_provider"])
      const items = (yield* query.run(accepted.runId)).items
      expect(items.filter((i) => i.kind === "tool_call").map((i) => [i.toolCallId, i.toolCallState])).toEqual([["call_1_0", "dangling"], ["call_1_1", "dangling"]])
      const results = items.filter((i) => i.kind === "tool_result")
      expect(results.map((i) => [i.toolCallId, i.isError])).toEqual([["call_1_0", true], ["call_1_1", true]])
      expect(results[0]!.text).toBe("[no result] The client posted no result for this tool call within 150 ms; the run ended.")
      const recorded = (yield* store.listEvents(threadId)).filter((e) => e.type === "run.tool_results_recorded")
      expect(recorded.map((e) => e.type === "run.tool_results_recorded" ? e.payload.source : null)).toEqual(["deadline"])
      // Results after the deadline are refused; the thread takes its next message.
      expect((yield* Effect.flip(post(threadId, accepted.runId, [result("call_1_0", "A"), result("call_1_1", "B")])))._tag).toBe("RunNotWaiting")
      const next = yield* send(threadId, "Never mind.")
      expect((yield* driver.awaitRun(next.runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")
      const o = yield* Harness.ops
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.scoped, Effect.provide(layer))
  })

  it.live("an interrupt of a waiting run: error results 'interrupted by the user', the run interrupted after the provider, the thread free", () => {
    const h = Harness.make(providers, { db })
    const layer = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))
    return Effect.gen(function*() {
      const query = yield* ThreadQuery.ThreadQuery
      const driver = yield* RunDriver.RunDriver
      const threadId = yield* setup([readFile])
      h.script.enqueue(callsFor(1, ["a.ts", "b.ts"]))
      const accepted = yield* send(threadId, "Compare a.ts and b.ts")
      yield* untilStatus(accepted.runId, "waiting")
      const stopped = yield* driver.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: accepted.runId }))
      expect([stopped.status, stopped.stopPoint, stopped.failureCode]).toEqual(["interrupted", "after_provider", "interrupted_by_user"])
      const items = (yield* query.run(accepted.runId)).items
      expect(items.filter((i) => i.kind === "tool_call").map((i) => i.toolCallState)).toEqual(["interrupted", "interrupted"])
      expect(items.filter((i) => i.kind === "tool_result").map((i) => i.text)).toEqual([
        "[interrupted] Interrupted by the user while the run waited for this tool call's result; it returned no result.",
        "[interrupted] Interrupted by the user while the run waited for this tool call's result; it returned no result."
      ])
      const next = yield* send(threadId, "Something else.")
      expect((yield* driver.awaitRun(next.runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")
      const o = yield* Harness.ops
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.scoped, Effect.provide(layer))
  })

  it.live("an interrupt of a waiting run starts the run queued behind it at once, not at the wait's deadline", () => {
    // Regression: the worker had stopped at the waiting run and only its deadline timer (or another send) woke it.
    const h = Harness.make(providers, { db, config: { toolResultTimeoutMillis: 60_000 } })
    const layer = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))
    return Effect.gen(function*() {
      const store = yield* ThreadStore
      const query = yield* ThreadQuery.ThreadQuery
      const driver = yield* RunDriver.RunDriver
      const threadId = yield* setup([readFile])
      h.script.enqueue(callsFor(1, ["a.ts"]))
      h.script.enqueue(finalAnswer)
      const accepted = yield* send(threadId, "Read a.ts")
      yield* untilStatus(accepted.runId, "waiting")
      const queued = yield* send(threadId, "Something else.")
      yield* Effect.sleep(Duration.millis(100))
      expect(statusOf(yield* store.getRun(queued.runId))).toBe("queued")
      const deadline = (yield* query.run(accepted.runId)).toolResultsDeadline
      if (deadline === null) return expect.fail("the waiting run has no deadline")

      const started = Date.now()
      const stopped = yield* driver.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: accepted.runId }))
      expect(stopped.status).toBe("interrupted")
      const done = yield* driver.awaitRun(queued.runId).pipe(Effect.timeout("5 seconds"))
      const elapsed = Date.now() - started
      expect(done.status).toBe("completed")
      // Well before the 60 s deadline (real clock): the interrupt woke the worker, the deadline did not.
      expect(elapsed).toBeLessThan(5_000)
      expect(Date.now()).toBeLessThan(DateTime.toEpochMillis(deadline) - 50_000)
      const o = yield* Harness.ops
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.scoped, Effect.provide(layer))
  })

  it.live("an interrupt of a waiting run posted on another process starts the queued run there at once", () => {
    // Processes do not signal each other: the process recording the interrupt wakes its own worker, which takes the
    // queued run (the first process's worker stopped at the waiting run and sleeps until the 60 s deadline).
    Harness.useDb(db)
    const h = Harness.make(providers, { db })
    const claude = h.providers.claude!
    return Harness.withDbFile((file) =>
      Effect.gen(function*() {
        const config = { toolResultTimeoutMillis: 60_000 }
        const a = Context.get(yield* Layer.build(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([claude], h.counter, file, config, "w1")))), RunDriver.RunDriver)
        const contextB = yield* Layer.build(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([claude], h.counter, file, config, "w2"))))
        const b = Context.get(contextB, RunDriver.RunDriver)
        yield* Effect.gen(function*() {
          const threadId = yield* setup([readFile])
          h.script.enqueue(callsFor(1, ["a.ts"]))
          h.script.enqueue(finalAnswer)
          const first = yield* a.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Read a.ts" }))
          yield* untilStatus(first.runId, "waiting")
          const queued = yield* a.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Something else." }))
          yield* Effect.sleep(Duration.millis(100))

          const started = Date.now()
          const stopped = yield* b.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: first.runId }))
          expect(stopped.status).toBe("interrupted")
          const done = yield* b.awaitRun(queued.runId).pipe(Effect.timeout("5 seconds"))
          expect(done.status).toBe("completed")
          expect(Date.now() - started).toBeLessThan(5_000)
          const o = yield* Harness.ops
          expect(yield* o.check(threadId, h)).toEqual([])
        }).pipe(Effect.provide(contextB))
      }).pipe(Effect.scoped)
    ).pipe(Effect.ensuring(Effect.sync(() => Harness.useDb(":memory:"))))
  })

  // Regression (hbreak, found by two servers on one Postgres with sends and tool results posted round-robin): a
  // process whose worker was waiting for a run another process drove (a message queued here behind it) kept polling
  // while that run went `waiting`; results posted here only told that busy worker to look again, which it never did
  // until the run ended, and the driving process's worker had stopped at the wait: the answered run and the queue
  // behind it stood still until the wait's deadline (10 minutes by default).
  it.live("results posted on the process queued behind a run another process drives into a wait: the run continues there", () => {
    Harness.useDb(db)
    const h = Harness.make(providers, { db })
    const claude = h.providers.claude!
    return Harness.withDbFile((file) =>
      Effect.gen(function*() {
        const entered = yield* Deferred.make<void>()
        const gate = yield* Deferred.make<void>()
        // Process a holds its first turn open until process b has queued a message behind it.
        let turns = 0
        const held: ProviderAdapter.ProviderAdapterShape = {
          ...claude,
          startTurn: (input) =>
            ++turns === 1
              ? Stream.unwrap(Effect.as(Effect.zipRight(Deferred.succeed(entered, undefined), Deferred.await(gate)), claude.startTurn(input)))
              : claude.startTurn(input)
        }
        const config = { toolResultTimeoutMillis: 600_000 }
        const a = Context.get(yield* Layer.build(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([held], h.counter, file, config, "w1")))), RunDriver.RunDriver)
        const contextB = yield* Layer.build(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([claude], h.counter, file, config, "w2"))))
        const b = Context.get(contextB, RunDriver.RunDriver)
        yield* Effect.gen(function*() {
          const threadId = yield* setup([readFile])
          h.script.enqueue(callsFor(1, ["a.ts"]))
          h.script.enqueue(finalAnswer)
          h.script.enqueue(Harness.reply(10))
          const first = yield* a.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Read a.ts" }))
          yield* Deferred.await(entered)
          // b's worker starts on the thread and finds a's run ahead of its own.
          const queued = yield* b.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Something else." }))
          yield* Deferred.succeed(gate, undefined)
          yield* untilStatus(first.runId, "waiting")
          yield* b.submitToolResults(Commands.SubmitToolResults.make({
            commandId: cid(),
            threadId,
            runId: first.runId,
            results: [result("call_1_0", "export const a = 1")]
          }))
          const done = yield* b.awaitRun(first.runId).pipe(Effect.timeout("20 seconds"))
          expect(done.status).toBe("completed")
          const after = yield* b.awaitRun(queued.runId).pipe(Effect.timeout("20 seconds"))
          expect(after.status).toBe("completed")
          const o = yield* Harness.ops
          expect(yield* o.check(threadId, h)).toEqual([])
        }).pipe(Effect.provide(contextB))
      }).pipe(Effect.scoped)
    ).pipe(Effect.ensuring(Effect.sync(() => Harness.useDb(":memory:"))))
  })

  it.live("a restart while waiting: the new process finds the run waiting with its calls, accepts the results and completes it", () => {
    Harness.useDb(db)
    const h = Harness.make(providers, { db })
    const claude = h.providers.claude!
    return Harness.withDbFile((file) =>
      Effect.gen(function*() {
        const first = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([claude], h.counter, file, {}, "p1")))
        const { threadId, runId } = yield* Effect.gen(function*() {
          const threadId = yield* setup([readFile])
          h.script.enqueue(callsFor(1, ["a.ts", "b.ts"]))
          h.script.enqueue(finalAnswer)
          const accepted = yield* send(threadId, "Compare a.ts and b.ts")
          yield* untilStatus(accepted.runId, "waiting")
          return { threadId, runId: accepted.runId }
        }).pipe(Effect.scoped, Effect.provide(first))

        const second = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([claude], h.counter, file, {}, "p2")))
        yield* Effect.gen(function*() {
          const query = yield* ThreadQuery.ThreadQuery
          const driver = yield* RunDriver.RunDriver
          const view = yield* query.run(runId)
          expect(view.run.status).toBe("waiting")
          expect(view.openToolCalls.map((c) => c.toolCallId)).toEqual(["call_1_0", "call_1_1"])
          yield* post(threadId, runId, [result("call_1_0", "contents of a"), result("call_1_1", "contents of b")])
          expect((yield* driver.awaitRun(runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")
          const items = (yield* query.run(runId)).items
          expect(items.map((i) => i.kind)).toEqual(["user_message", "assistant_message", "tool_call", "tool_call", "tool_result", "tool_result", "assistant_message"])
          const o = yield* Harness.ops
          expect(yield* o.check(threadId, h)).toEqual([])
        }).pipe(Effect.scoped, Effect.provide(second))
      })
    ).pipe(Effect.ensuring(Effect.sync(() => Harness.useDb(":memory:"))))
  })

  it.live("results posted just before a restart (the continuation never started): the new process continues the run at start", () => {
    Harness.useDb(db)
    const h = Harness.make(providers, { db })
    const claude = h.providers.claude!
    return Harness.withDbFile((file) =>
      Effect.gen(function*() {
        const first = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([claude], h.counter, file, {}, "q1")))
        const { threadId, runId } = yield* Effect.gen(function*() {
          const service = yield* ThreadService.ThreadService
          const threadId = yield* setup([readFile])
          h.script.enqueue(callsFor(1, ["a.ts"]))
          h.script.enqueue(finalAnswer)
          const accepted = yield* send(threadId, "Read a.ts")
          yield* untilStatus(accepted.runId, "waiting")
          // Recorded through the service (no run driver is woken): the process stops before continuing the run.
          yield* service.submitToolResults(Commands.SubmitToolResults.make({
            commandId: cid(),
            threadId,
            runId: accepted.runId,
            results: [result("call_1_0", "contents of a")]
          }))
          return { threadId, runId: accepted.runId }
        }).pipe(Effect.scoped, Effect.provide(first))

        const second = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([claude], h.counter, file, {}, "q2")))
        yield* Effect.gen(function*() {
          const driver = yield* RunDriver.RunDriver
          const query = yield* ThreadQuery.ThreadQuery
          expect((yield* driver.awaitRun(runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")
          expect((yield* query.run(runId)).items.map((i) => i.kind)).toEqual(["user_message", "assistant_message", "tool_call", "tool_result", "assistant_message"])
          const o = yield* Harness.ops
          expect(yield* o.check(threadId, h)).toEqual([])
        }).pipe(Effect.scoped, Effect.provide(second))
      })
    ).pipe(Effect.ensuring(Effect.sync(() => Harness.useDb(":memory:"))))
  })

  it.live("a deadline that passed while no process ran: the next process ends the run at start (tool_results_timeout)", () => {
    Harness.useDb(db)
    const h = Harness.make(providers, { db })
    const claude = h.providers.claude!
    return Harness.withDbFile((file) =>
      Effect.gen(function*() {
        const config = { toolResultTimeoutMillis: 1_000 }
        const first = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([claude], h.counter, file, config, "e1")))
        const { threadId, runId } = yield* Effect.gen(function*() {
          const threadId = yield* setup([readFile])
          h.script.enqueue(callsFor(1, ["a.ts"]))
          const accepted = yield* send(threadId, "Read a.ts")
          yield* untilStatus(accepted.runId, "waiting")
          return { threadId, runId: accepted.runId }
        }).pipe(Effect.scoped, Effect.provide(first))
        yield* Effect.sleep(Duration.millis(1_100))

        const second = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([claude], h.counter, file, config, "e2")))
        yield* Effect.gen(function*() {
          const failed = yield* untilStatus(runId, "failed")
          expect(failed.failureCode).toBe("tool_results_timeout")
          const o = yield* Harness.ops
          expect(yield* o.check(threadId, h)).toEqual([])
        }).pipe(Effect.scoped, Effect.provide(second))
      })
    ).pipe(Effect.ensuring(Effect.sync(() => Harness.useDb(":memory:"))))
  })
})

/** The status of a run read from the store (`Option` of it), for a one-line assertion. */
function statusOf(found: { readonly _tag: "None" } | { readonly _tag: "Some"; readonly value: { readonly status: RunStatus } }) {
  return found._tag === "Some" ? found.value.status : null
}
