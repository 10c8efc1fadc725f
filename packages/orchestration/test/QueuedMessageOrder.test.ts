/**
 * A message queued while a run is still working (its tool rounds) takes its place in the thread's order after that
 * run: its prompt joins the items when its own run starts (RunLifecycle), so `seq` follows the conversation the model
 * saw, and a handoff renders the first run's tool calls and results before the queued message. Found by the issue-9
 * review: the queued prompt took its seq at queue time, and a rendered handoff showed the run's tool unit after it.
 */
import { type ClientTool, type CommandId, Commands, type RunId, type RunStatus, type ThreadId, type ToolCallId } from "@baton/contracts"
import { RunDriver, ThreadService } from "@baton/orchestration"
import { ThreadStore } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Exit, Layer, Option, Scope } from "effect"

let n = 0
const cid = () => `cmd_order_${++n}` as CommandId

const readFile: ClientTool = {
  name: "read_file",
  description: "Reads a file of the workspace",
  inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] }
}

/** Polls the record until run `runId` has `status` (at most 10 s). */
const untilStatus = (runId: RunId, status: RunStatus) =>
  Effect.gen(function*() {
    const store = yield* ThreadStore
    for (;;) {
      const run = yield* store.getRun(runId)
      if (run._tag === "Some" && run.value.status === status) return run.value
      yield* Effect.sleep(Duration.millis(10))
    }
  }).pipe(Effect.timeout("10 seconds"))

/** Polls the record until run `runId` waits for the client's result of `toolCallId` (at most 10 s). */
const untilWaitingOn = (runId: RunId, toolCallId: string) =>
  Effect.gen(function*() {
    const store = yield* ThreadStore
    for (;;) {
      const run = yield* store.getRun(runId)
      const wait = yield* store.getToolWait(runId)
      if (run._tag === "Some" && run.value.status === "waiting" && wait._tag === "Some" && wait.value.results === null &&
        wait.value.calls.some((c) => c.toolCallId === toolCallId)) return
      yield* Effect.sleep(Duration.millis(10))
    }
  }).pipe(Effect.timeout("10 seconds"))

/**
 * The turn of run A that a test holds ahead of queued work: "waiting", A says "Reading." and calls `read_file`
 * (`call_a`), then waits on the client; "running", A says "Reading." and is held after that item till `gate`, then
 * says "Done.".
 */
const aheadTurn = (ahead: "waiting" | "running", gate: Deferred.Deferred<void>) =>
  ahead === "waiting"
    ? {
      items: [
        Harness.produced("assistant_message", "Reading.", { messageId: "msg_a" }),
        Harness.produced("tool_call", JSON.stringify({ path: "a.ts" }), { toolCallId: "call_a", toolName: "read_file", messageId: "msg_a" })
      ]
    }
    : {
      items: [Harness.produced("assistant_message", "Reading.", { messageId: "msg_a" }), Harness.produced("assistant_message", "Done.", { messageId: "msg_a2" })],
      hold: { afterItems: 1, gate }
    }

/** Waits until run `runId` is where a test holds it: waiting on `call_a`, or running with its first answer recorded. */
const untilAhead = (runId: RunId, ahead: "waiting" | "running") =>
  ahead === "waiting"
    ? untilWaitingOn(runId, "call_a")
    : Effect.gen(function*() {
      const store = yield* ThreadStore
      yield* untilStatus(runId, "running")
      for (;;) {
        if ((yield* store.listItemsOfRuns([runId])).some((i) => i.kind === "assistant_message")) return
        yield* Effect.sleep(Duration.millis(10))
      }
    }).pipe(Effect.timeout("10 seconds"))

describe.each(Harness.dialects)("a message queued behind a run's tool rounds, on %s", (_label, db) => {
  const providers = [{ name: "claude", window: 200_000, inject: false }, { name: "codex", window: 200_000, inject: false }]

  it.live("its prompt is recorded after every item of the run before it; a handoff renders the tool rounds before it", () => {
    const h = Harness.make(providers, { db })
    const layer = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))
    return Effect.gen(function*() {
      const service = yield* ThreadService.ThreadService
      const driver = yield* RunDriver.RunDriver
      const store = yield* ThreadStore
      const threadId: ThreadId = yield* service.createThread(Commands.CreateThread.make({
        commandId: cid(),
        title: "order",
        providerInstance: "claude" as Commands.CreateThread["providerInstance"],
        tools: [readFile]
      }))
      // Run 1: two tool rounds (each a call the client answers), then the answer. Run 2 is queued during round 1.
      for (const round of [1, 2]) {
        h.script.enqueue({
          items: [
            Harness.produced("assistant_message", `Round ${round}: reading.`, { messageId: `msg_${round}` }),
            Harness.produced("tool_call", JSON.stringify({ path: `f${round}.ts` }), { toolCallId: `call_${round}`, toolName: "read_file", messageId: `msg_${round}` })
          ]
        })
      }
      h.script.enqueue({ items: [Harness.produced("assistant_message", "Both read.", { messageId: "msg_end" })] })
      h.script.enqueue({ items: [Harness.produced("assistant_message", "Queued one answered.", { messageId: "msg_q" })] })
      const first = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Read f1.ts then f2.ts" }))
      yield* untilStatus(first.runId, "waiting")
      const queued = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Then summarise them." }))
      for (const round of [1, 2]) {
        yield* untilWaitingOn(first.runId, `call_${round}`)
        yield* driver.submitToolResults(Commands.SubmitToolResults.make({
          commandId: cid(),
          threadId,
          runId: first.runId,
          results: [{ toolCallId: `call_${round}` as ToolCallId, output: `contents of f${round}`, isError: false }]
        }))
      }
      expect((yield* driver.awaitRun(first.runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")
      expect((yield* driver.awaitRun(queued.runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")

      const items = yield* store.listItems(threadId)
      expect(items.map((i) => [i.runId === first.runId ? 1 : 2, i.kind, i.kind === "tool_result" || i.kind === "tool_call" ? i.toolCallId : i.text])).toEqual([
        [1, "user_message", "Read f1.ts then f2.ts"],
        [1, "assistant_message", "Round 1: reading."],
        [1, "tool_call", "call_1"],
        [1, "tool_result", "call_1"],
        [1, "assistant_message", "Round 2: reading."],
        [1, "tool_call", "call_2"],
        [1, "tool_result", "call_2"],
        [1, "assistant_message", "Both read."],
        [2, "user_message", "Then summarise them."],
        [2, "assistant_message", "Queued one answered."]
      ])
      expect(items.map((i) => i.seq)).toEqual(items.map((_, k) => k + 1))

      // A switch: the handoff to codex renders the runs in conversation order.
      yield* service.switchProvider(Commands.SwitchProvider.make({ commandId: cid(), threadId, providerInstance: "codex" as Commands.SwitchProvider["providerInstance"] }))
      h.script.enqueue({ items: [Harness.produced("assistant_message", "Caught up.", { messageId: "msg_c" })] })
      const third = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Go on." }))
      expect((yield* driver.awaitRun(third.runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")
      const turn = h.providers["codex"]!.received.find((r) => r.type === "turn")
      const inline = turn !== undefined && turn.type === "turn" ? turn.inlineHistory ?? "" : ""
      const at = (text: string) => inline.indexOf(text)
      expect([at("Read f1.ts then f2.ts"), at("contents of f1"), at("contents of f2"), at("Both read."), at("Then summarise them.")].every((p) => p >= 0)).toBe(true)
      expect(at("contents of f2")).toBeLessThan(at("Then summarise them."))
      expect(at("Both read.")).toBeLessThan(at("Then summarise them."))
      const o = yield* Harness.ops
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.scoped, Effect.provide(layer))
  })

  // Found by a tester (r35): run A waits on a client tool call, B is queued behind it; B is interrupted, then A. The
  // log read A's prompt, A's assistant message, B's prompt, A's call, A's result: B's prompt took its seq at B's
  // interrupt, while A's call is held in its tool wait (the record never holds a call without its result) and recorded
  // with its error result only at A's interrupt, so A's tool unit was split and fell in B's run.
  // Fixed: B, ended while queued behind A, owes its prompt — a durable mark (`runs.prompt_owed`, `run.prompt_deferred`)
  // written with B's end, not inferred from `interrupted` at `before_provider` (c98f5f5 did, and took a gateway retry
  // interrupted through the API for such a run: its prompt recorded twice, reviews r35late, r35last) — and A's end
  // records it after A's call and result (RunLifecycle.recordOwedPrompts).
  it.live("a queued message interrupted before the run ahead of it ends: its prompt follows that run's tool unit", () => {
    const h = Harness.make(providers, { db, config: { toolResultTimeoutMillis: 60_000 } })
    const layer = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))
    return Effect.gen(function*() {
      const service = yield* ThreadService.ThreadService
      const driver = yield* RunDriver.RunDriver
      const store = yield* ThreadStore
      const threadId: ThreadId = yield* service.createThread(Commands.CreateThread.make({
        commandId: cid(),
        title: "order",
        providerInstance: "claude" as Commands.CreateThread["providerInstance"],
        tools: [readFile]
      }))
      h.script.enqueue({
        items: [
          Harness.produced("assistant_message", "Reading.", { messageId: "msg_a" }),
          Harness.produced("tool_call", JSON.stringify({ path: "a.ts" }), { toolCallId: "call_a", toolName: "read_file", messageId: "msg_a" })
        ]
      })
      h.script.enqueue({ items: [Harness.produced("assistant_message", "Next answered.", { messageId: "msg_n" })] })
      const a = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Read a.ts" }))
      yield* untilWaitingOn(a.runId, "call_a")
      const b = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Then summarise it." }))
      expect((yield* driver.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: b.runId }))).status).toBe("interrupted")
      expect((yield* driver.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: a.runId }))).status).toBe("interrupted")

      const label = (runId: RunId | null) => runId === a.runId ? "A" : runId === b.runId ? "B" : "C"
      const listed = (items: ReadonlyArray<{ readonly runId: RunId | null; readonly kind: string; readonly text: string; readonly toolCallId: string | null }>) =>
        items.map((i) => [label(i.runId), i.kind, i.kind === "tool_result" || i.kind === "tool_call" ? i.toolCallId : i.text])
      const interruptedUnit = [
        ["A", "user_message", "Read a.ts"],
        ["A", "assistant_message", "Reading."],
        ["A", "tool_call", "call_a"],
        ["A", "tool_result", "call_a"],
        ["B", "user_message", "Then summarise it."]
      ]
      expect(listed(yield* store.listItems(threadId))).toEqual(interruptedUnit)

      // The thread goes on: the next run's prompt follows, and the record holds.
      const next = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Go on." }))
      expect((yield* driver.awaitRun(next.runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")
      const items = yield* store.listItems(threadId)
      expect(listed(items)).toEqual([...interruptedUnit, ["C", "user_message", "Go on."], ["C", "assistant_message", "Next answered."]])
      expect(items.map((i) => i.seq)).toEqual(items.map((_, k) => k + 1))
      const o = yield* Harness.ops
      expect(yield* o.check(threadId, h)).toEqual([])
    }).pipe(Effect.scoped, Effect.provide(layer))
  })

  // Review r35late: two messages queued behind A, both interrupted before A ends (the later one first). Their prompts
  // follow everything A records, in the order they were queued (seq), whether A waits on a client tool call or is
  // running (a turn streaming) when they are interrupted.
  for (const ahead of ["waiting", "running"] as const) {
    // Fixed like the test above: each prompt owed until A ends, then recorded in seq order.
    it.live(`two queued messages interrupted in reverse order while the run ahead is ${ahead}: their prompts follow that run's items in seq order`, () => {
      const h = Harness.make(providers, { db, config: { toolResultTimeoutMillis: 60_000 } })
      const layer = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))
      return Effect.gen(function*() {
        const service = yield* ThreadService.ThreadService
        const driver = yield* RunDriver.RunDriver
        const store = yield* ThreadStore
        const threadId: ThreadId = yield* service.createThread(Commands.CreateThread.make({
          commandId: cid(),
          title: "order",
          providerInstance: "claude" as Commands.CreateThread["providerInstance"],
          tools: [readFile]
        }))
        const gate = yield* Deferred.make<void>()
        h.script.enqueue(aheadTurn(ahead, gate))
        const a = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Read a.ts" }))
        yield* untilAhead(a.runId, ahead)
        const b = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Then summarise it." }))
        const c = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "And list its exports." }))
        for (const run of [c, b]) {
          expect((yield* driver.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: run.runId }))).status).toBe("interrupted")
        }
        expect((yield* store.getRun(a.runId)).pipe(Option.map((r) => r.status))).toEqual(Option.some(ahead))
        if (ahead === "waiting") {
          expect((yield* driver.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: a.runId }))).status).toBe("interrupted")
        } else {
          yield* Deferred.succeed(gate, undefined)
          expect((yield* driver.awaitRun(a.runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")
        }
        const label = (runId: RunId | null) => runId === a.runId ? "A" : runId === b.runId ? "B" : runId === c.runId ? "C" : "?"
        const items = yield* store.listItems(threadId)
        const aItems = ahead === "waiting"
          ? [["A", "user_message", "Read a.ts"], ["A", "assistant_message", "Reading."], ["A", "tool_call", "call_a"], ["A", "tool_result", "call_a"]]
          : [["A", "user_message", "Read a.ts"], ["A", "assistant_message", "Reading."], ["A", "assistant_message", "Done."]]
        expect(items.map((i) => [label(i.runId), i.kind, i.kind === "tool_result" || i.kind === "tool_call" ? i.toolCallId : i.text])).toEqual([
          ...aItems,
          ["B", "user_message", "Then summarise it."],
          ["C", "user_message", "And list its exports."]
        ])
        expect(items.map((i) => i.seq)).toEqual(items.map((_, k) => k + 1))
        const o = yield* Harness.ops
        expect(yield* o.check(threadId, h)).toEqual([])
      }).pipe(Effect.scoped, Effect.provide(layer))
    })
  }
})

// A crash between B's end (interrupted while queued behind A: its prompt owed, marked in the unit of work that ended
// it) and A's end: the process dies (`Harness.dyingStore`: nothing it does after that point is durable, its shutdown
// included) and the next process ends A, by the user's interrupt (A was waiting: restart recovery leaves a waiting
// run as it is) or by restart recovery (A was running). B's prompt is recorded once, after every item of A.
describe.each(Harness.dialects)("a crash between a queued message's end and the end of the run ahead of it, on %s", (_label, db) => {
  const providers = [{ name: "claude", window: 200_000, inject: false }]

  for (const ahead of ["waiting", "running"] as const) {
    it.live(`the run ahead ${ahead === "waiting" ? "waits on a client tool call (interrupted in the next process)" : "streams a turn (ended by restart recovery)"}: the queued prompt is recorded once, after its items`, () => {
      Harness.useDb(db)
      const h = Harness.make(providers, { db })
      const claude = h.providers.claude!
      const config = { toolResultTimeoutMillis: 60_000 }
      return Harness.withDbFile((file) =>
        Effect.gen(function*() {
          const dead = { now: false }
          const gate = yield* Deferred.make<void>()
          const first = yield* Scope.make()
          const p1 = yield* Layer.buildWithScope(
            RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([claude], h.counter, file, config, `c1${ahead}`, undefined, Harness.dyingStore(dead)))),
            first
          )
          const { a, b, threadId } = yield* Effect.gen(function*() {
            const service = yield* ThreadService.ThreadService
            const driver = yield* RunDriver.RunDriver
            const store = yield* ThreadStore
            const threadId: ThreadId = yield* service.createThread(Commands.CreateThread.make({
              commandId: cid(),
              title: "order",
              providerInstance: "claude" as Commands.CreateThread["providerInstance"],
              tools: [readFile]
            }))
            h.script.enqueue(aheadTurn(ahead, gate))
            const a = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Read a.ts" }))
            yield* untilAhead(a.runId, ahead)
            const b = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Then summarise it." }))
            expect((yield* driver.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: b.runId }))).status).toBe("interrupted")
            // B owes its prompt: marked, nothing recorded for it yet.
            expect((yield* store.listPromptOwedRuns(threadId)).map((r) => r.id)).toEqual([b.runId])
            expect(yield* store.listItemsOfRuns([b.runId])).toEqual([])
            return { a, b, threadId }
          }).pipe(Effect.provide(p1))
          // The process dies here: B ended, A did not.
          dead.now = true
          yield* Effect.exit(Scope.close(first, Exit.void))

          const p2 = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([claude], h.counter, file, config, `c2${ahead}`)))
          yield* Effect.gen(function*() {
            const driver = yield* RunDriver.RunDriver
            const store = yield* ThreadStore
            if (ahead === "waiting") {
              expect((yield* store.getRun(a.runId)).pipe(Option.map((r) => r.status))).toEqual(Option.some("waiting"))
              expect(yield* store.listItemsOfRuns([b.runId])).toEqual([])
              expect((yield* driver.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: a.runId }))).status).toBe("interrupted")
            } else {
              const ended = yield* untilStatus(a.runId, "interrupted")
              expect(ended.failureCode).toBe("process_restarted")
            }
            const label = (runId: RunId | null) => runId === a.runId ? "A" : runId === b.runId ? "B" : "?"
            const items = yield* store.listItems(threadId)
            expect(items.map((i) => [label(i.runId), i.kind, i.kind === "tool_result" || i.kind === "tool_call" ? i.toolCallId : i.text])).toEqual([
              ["A", "user_message", "Read a.ts"],
              ["A", "assistant_message", "Reading."],
              ...(ahead === "waiting" ? [["A", "tool_call", "call_a"], ["A", "tool_result", "call_a"]] : []),
              ["B", "user_message", "Then summarise it."]
            ])
            expect(yield* store.listPromptOwedRuns(threadId)).toEqual([])
            const events = yield* store.listEvents(threadId)
            expect(events.filter((e) => e.type === "run.prompt_deferred").map((e) => e.payload)).toEqual([{ runId: b.runId, behindRunId: a.runId }])
            const o = yield* Harness.ops
            expect(yield* o.check(threadId, h)).toEqual([])
          }).pipe(Effect.scoped, Effect.provide(p2))
        })
      ).pipe(Effect.ensuring(Effect.sync(() => Harness.useDb(":memory:"))))
    })
  }
})

// A merge-back into a thread whose run A is in progress (waiting on a client tool call, or streaming) owes its copies
// till A ends (ThreadLineage: written at once, they took seqs inside A's span, between its prompt and its answer).
// A crash between the merge and A's end: the next process ends A (the user's interrupt, or restart recovery) and the
// merge's marker and copies are recorded once, after every item of A, with their handoff named on the link.
describe.each(Harness.dialects)("a crash between a merge-back behind a run and that run's end, on %s", (_label, db) => {
  const providers = [{ name: "claude", window: 200_000, inject: false }]

  for (const ahead of ["waiting", "running"] as const) {
    it.live(`the run ahead ${ahead === "waiting" ? "waits on a client tool call" : "streams a turn"}: the merge's copies are recorded once, after its items`, () => {
      Harness.useDb(db)
      const h = Harness.make(providers, { db })
      const claude = h.providers.claude!
      const config = { toolResultTimeoutMillis: 60_000 }
      return Harness.withDbFile((file) =>
        Effect.gen(function*() {
          const dead = { now: false }
          const gate = yield* Deferred.make<void>()
          const first = yield* Scope.make()
          const p1 = yield* Layer.buildWithScope(
            RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([claude], h.counter, file, config, `m1${ahead}`, undefined, Harness.dyingStore(dead)))),
            first
          )
          const { a, merged, threadId } = yield* Effect.gen(function*() {
            const service = yield* ThreadService.ThreadService
            const driver = yield* RunDriver.RunDriver
            const store = yield* ThreadStore
            const threadId: ThreadId = yield* service.createThread(Commands.CreateThread.make({
              commandId: cid(),
              title: "merge order",
              providerInstance: "claude" as Commands.CreateThread["providerInstance"],
              tools: [readFile]
            }))
            const fork = yield* service.fork(Commands.ForkThread.make({ commandId: cid(), threadId }))
            h.script.enqueue({ items: [Harness.produced("assistant_message", "Found the bug.", { messageId: "msg_f" })] })
            const f = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId: fork.threadId, text: "Find the bug" }))
            expect((yield* driver.awaitRun(f.runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")
            h.script.enqueue(aheadTurn(ahead, gate))
            const a = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Read a.ts" }))
            yield* untilAhead(a.runId, ahead)
            const merged = yield* service.mergeBack(Commands.MergeBack.make({ commandId: cid(), forkThreadId: fork.threadId }))
            expect(merged).toMatchObject({ itemCount: 2, handoffId: null, behindRunId: a.runId })
            // The merge owes its copies: marked, nothing recorded for it yet.
            expect((yield* store.listPromptOwedRuns(threadId)).map((r) => r.id)).toEqual([merged.runId])
            expect(yield* store.listItemsOfRuns([merged.runId!])).toEqual([])
            return { a, merged, threadId }
          }).pipe(Effect.provide(p1))
          // The process dies here: the merge is recorded, A did not end.
          dead.now = true
          yield* Effect.exit(Scope.close(first, Exit.void))

          const p2 = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([claude], h.counter, file, config, `m2${ahead}`)))
          yield* Effect.gen(function*() {
            const driver = yield* RunDriver.RunDriver
            const store = yield* ThreadStore
            if (ahead === "waiting") {
              expect(yield* store.listItemsOfRuns([merged.runId!])).toEqual([])
              expect((yield* driver.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: a.runId }))).status).toBe("interrupted")
            } else {
              expect((yield* untilStatus(a.runId, "interrupted")).failureCode).toBe("process_restarted")
            }
            const label = (runId: RunId | null) => runId === a.runId ? "A" : runId === merged.runId ? "M" : "?"
            const items = yield* store.listItems(threadId)
            expect(items.map((i) => [label(i.runId), i.kind])).toEqual([
              ["A", "user_message"],
              ["A", "assistant_message"],
              ...(ahead === "waiting" ? [["A", "tool_call"], ["A", "tool_result"]] : []),
              ["M", "handoff_marker"],
              ["M", "user_message"],
              ["M", "assistant_message"]
            ])
            expect(yield* store.listPromptOwedRuns(threadId)).toEqual([])
            const link = (yield* store.listLinks(threadId)).find((l) => l.kind === "merge")!
            const handoffs = yield* store.listHandoffs(threadId)
            expect(handoffs.filter((x) => x.kind === "merge").map((x) => x.id)).toEqual([link.handoffId])
            const o = yield* Harness.ops
            expect(yield* o.check(threadId, h)).toEqual([])
          }).pipe(Effect.scoped, Effect.provide(p2))
        })
      ).pipe(Effect.ensuring(Effect.sync(() => Harness.useDb(":memory:"))))
    })
  }
})
