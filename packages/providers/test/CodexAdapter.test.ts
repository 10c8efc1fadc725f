/**
 * The Codex adapter (Baton's provider port over `codex app-server`) with the real pinned binary, its model provider a
 * loopback server playing OpenAI's Responses API: a turn's items, deltas and usage; Baton's `thread_read` as a
 * dynamic tool; native injection read back with `thread/read` and the rollout; compaction; overflow typed; an
 * interrupt; the child killed mid-turn (the turn fails retryably, the thread is resumed and stays usable); a missing
 * binary. The JSON-RPC exchange of the round trip is kept as a fixture.
 */
import type { ProviderInstance } from "@baton/contracts"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Data, Effect, Exit, Fiber, Option } from "effect"
import * as CodexAdapter from "../src/codex/CodexAdapter.js"
import type { TraceLine } from "../src/codex/CodexAppServer.js"
import { type LocalTool, type TextDelta, TurnEvent } from "../src/ProviderAdapter.js"
import {
  answer,
  binary,
  bodyOf,
  checkFixture,
  codexHome,
  cut,
  functionCall,
  isCompaction,
  normalise,
  overflow,
  slowAnswers,
  userTexts
} from "./support/CodexLoopback.js"
import { collect, itemsOf, type Loopback, loopback, type Received } from "./support/Loopback.js"

const failureOf = <A, E>(exit: Exit.Exit<A, E>) => (Exit.isFailure(exit) ? Option.getOrNull(Cause.failureOption(exit.cause)) : null)

const threadReadDefinition = {
  name: "thread_read",
  description: "Reads items of the Baton thread by ref.",
  inputSchema: { type: "object", properties: { refs: { type: "string" } }, required: ["refs"] }
}

const setup = (extra: {
  readonly trace?: (l: TraceLine) => void
  /** Changes the instance's config (given the CODEX_HOME directory). */
  readonly config?: (home: string) => Partial<CodexAdapter.CodexProviderConfig>
} = {}) =>
  Effect.gen(function*() {
    const loop = yield* loopback
    const home = yield* codexHome(loop.url)
    const { config, ...rest } = extra
    const adapter = yield* CodexAdapter.make({
      instance: "codex" as ProviderInstance,
      config: { kind: "codex", binary: binary(), codexHome: home, cwd: home, contextWindow: 44_000, autoCompactThreshold: 42_000, ...config?.(home) },
      dynamicTools: [threadReadDefinition],
      ...rest
    })
    return { loop, home, adapter }
  })

/** The request's conversation after Codex's own preamble (developer messages, environment context): `role: text`. */
const conversation = (request: Received) =>
  bodyOf(request).input.flatMap((i) => {
    if (i.type !== "message" || i.role === "developer") return []
    const text = (i.content as ReadonlyArray<{ readonly text?: string }>).map((c) => c.text ?? "").join("|")
    return text.startsWith("<environment_context>") || text.startsWith("# AGENTS.md") ? [] : [`${String(i.role)}: ${text}`]
  })

const hanging = { status: 200, headers: { "content-type": "text/event-stream" }, chunks: [": waiting\n\n", ": never\n\n"], gapMillis: 120_000 }

/** Waits until the loopback received `n` requests. */
const requestsReach = (loop: Loopback, n: number) =>
  Effect.gen(function*() {
    while (loop.requests.length < n) yield* Effect.sleep("20 millis")
  }).pipe(Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new TestTimeout({ waitingFor: `request ${n}` }) }))

/** A test waited too long. */
class TestTimeout extends Data.TaggedError("TestTimeout")<{ readonly waitingFor: string }> {}

describe("CodexAdapter (real binary, loopback Responses API)", () => {
  it.live("a turn: the prompt reaches the model unchanged after the inline history, the answer is an item, deltas stream, usage has Codex's window", () =>
    Effect.scoped(Effect.gen(function*() {
      const { adapter, loop } = yield* setup()
      loop.enqueue(answer("The answer.", 39_761, 12, 30_000))
      const { nativeRef } = yield* adapter.startThread()
      const deltas: Array<TextDelta> = []
      const { events, exit } = yield* collect(adapter.startTurn({
        nativeRef,
        runId: "run-1",
        prompt: "What is it?\n  (exactly these bytes)",
        inlineHistory: "<history>earlier</history>",
        onDelta: (d) => deltas.push(d)
      }))
      expect(exit._tag).toBe("Success")
      expect(itemsOf(events)).toEqual([["assistant_message", "The answer.", null, null]])
      expect(deltas.map((d) => d.text).join("")).toBe("The answer.")
      const usage = events.filter(TurnEvent.$is("usage_reported")).at(-1)!
      expect(usage.usage).toEqual({ usedTokens: 39_773, maxTokens: 41_800, autoCompactThreshold: 42_000 })
      expect(usage.tokens).toEqual({ inputTokens: 9_761, cacheWriteTokens: 0, cacheReadTokens: 30_000, outputTokens: 12 })
      expect(events.at(-1)).toEqual(TurnEvent.turn_ended({ interrupted: false }))
      expect(userTexts(loop.requests[0]!).slice(-2)).toEqual(["<history>earlier</history>", "What is it?\n  (exactly these bytes)"])
      const read = yield* adapter.readThread!(nativeRef)
      expect(read.runIds).toEqual(["run-1"])
      expect(read.usage).toEqual(usage.usage)
    })))

  it.live("the round trip: injection read back (thread/read + rollout), thread_read answered by Baton inside the turn, compaction; the exchange is the fixture", () =>
    Effect.scoped(Effect.gen(function*() {
      const trace: Array<TraceLine> = []
      const { adapter, home, loop } = yield* setup({ trace: (l) => trace.push(l) })
      const { nativeRef } = yield* adapter.startThread()
      const injected = yield* adapter.injectHistory!({ nativeRef, rendered: "<history>handoff body</history>", itemIds: ["item-1"], deliveryIds: ["delivery-1"] })
      expect(injected.usage).toBeNull()
      const calls: Array<string> = []
      const threadRead: LocalTool = {
        definition: threadReadDefinition,
        execute: ({ arguments: args, runId }) => Effect.sync(() => (calls.push(`${runId} ${args}`), { output: "[user #1] the original item", isError: false }))
      }
      loop.enqueue(functionCall("call_1", "thread_read", { refs: "#1" }), answer("Read it."))
      const { events, exit } = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Continue", inlineHistory: null, localTools: [threadRead] }))
      expect(exit._tag).toBe("Success")
      expect(calls).toEqual([`run-1 {"refs":"#1"}`])
      expect(itemsOf(events)).toEqual([
        ["tool_call", `{"refs":"#1"}`, "call_1", "thread_read"],
        ["tool_result", "[user #1] the original item", "call_1", "thread_read"],
        ["assistant_message", "Read it.", null, null]
      ])
      // The first request offered thread_read and carried the injection before the prompt; the second the result.
      expect(bodyOf(loop.requests[0]!).tools?.some((t) => t.name === "thread_read")).toBe(true)
      expect(userTexts(loop.requests[0]!).slice(-3)).toEqual(["<history>handoff body</history>", `<baton-deliveries ids="delivery-1"/>`, "Continue"])
      expect(bodyOf(loop.requests[1]!).input.at(-1)).toMatchObject({ type: "function_call_output", call_id: "call_1", output: "[user #1] the original item" })
      const read = yield* adapter.readThread!(nativeRef)
      expect(read.deliveryIds).toEqual(["delivery-1"])
      expect(read.runIds).toEqual(["run-1"])
      // /compact: Codex sends its compaction request to the model; the summary replaces the history.
      loop.enqueue(answer("SUMMARY of the thread", 2_000, 40))
      const compacted = yield* adapter.compactThread!(nativeRef)
      expect(isCompaction(loop.requests[2]!)).toBe(true)
      expect(compacted.usageBefore).not.toBeNull()
      expect(compacted.usageAfter).not.toBeNull()
      loop.enqueue(answer("After compaction."))
      const after = yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "Next", inlineHistory: null }))
      expect(after.exit._tag).toBe("Success")
      const texts = userTexts(loop.requests[3]!)
      expect(texts.some((t) => t.includes("SUMMARY of the thread"))).toBe(true)
      expect(texts.at(-1)).toBe("Next")
      const recorded = normalise(trace, home)
      expect(recorded).toBe(checkFixture("adapter-round-trip.jsonl", recorded))
    })))

  it.live("Codex's own compaction inside a turn is told as native_compacted (what a rejection proved no longer holds); a turn without one tells nothing", () =>
    Effect.scoped(Effect.gen(function*() {
      const { adapter, loop } = yield* setup()
      const { nativeRef } = yield* adapter.startThread()
      // The first turn leaves the thread past the auto-compact limit (42,000): Codex compacts it before the next.
      loop.enqueue(answer("Big.", 43_000, 20))
      const first = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Read everything", inlineHistory: null }))
      expect(first.exit._tag).toBe("Success")
      expect(first.events.filter(TurnEvent.$is("native_compacted"))).toEqual([])
      loop.enqueue(answer("SUMMARY of the thread", 2_000, 40), answer("After.", 3_000, 10))
      const second = yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "Next", inlineHistory: null }))
      expect(second.exit._tag).toBe("Success")
      expect(loop.requests.filter(isCompaction)).toHaveLength(1)
      expect(second.events.filter(TurnEvent.$is("native_compacted"))).toEqual([TurnEvent.native_compacted()])
      expect(itemsOf(second.events)).toEqual([["assistant_message", "After.", null, null]])
    })))

  it.live("forkThread: thread/fork gives a new Codex thread holding the parent's whole history (turns, injections, tools); the parent is unchanged; the exchange is the fixture", () =>
    Effect.scoped(Effect.gen(function*() {
      const trace: Array<TraceLine> = []
      const { adapter, home, loop } = yield* setup({ trace: (l) => trace.push(l) })
      const { nativeRef: parent } = yield* adapter.startThread()
      loop.enqueue(answer("Parent answer one.", 2_000, 10), answer("Parent answer two.", 2_050, 10))
      yield* collect(adapter.startTurn({ nativeRef: parent, runId: "run-1", prompt: "parent prompt one", inlineHistory: null }))
      yield* adapter.injectHistory!({ nativeRef: parent, rendered: "<history>injected into the parent</history>", itemIds: ["item-1"], deliveryIds: ["delivery-1"] })
      yield* collect(adapter.startTurn({ nativeRef: parent, runId: "run-2", prompt: "parent prompt two", inlineHistory: null }))
      const forked = yield* adapter.forkThread!(parent)
      expect(forked.nativeRef).not.toBe(parent)
      // Codex reports no usage for the new thread until its first turn: Baton never reuses the parent's report.
      expect(forked.usage).toBeNull()
      loop.enqueue(answer("Fork answer.", 2_100, 10), answer("Parent answer three.", 2_100, 10))
      const onFork = yield* collect(adapter.startTurn({ nativeRef: forked.nativeRef, runId: "run-3-fork", prompt: "fork prompt", inlineHistory: null }))
      expect(onFork.exit._tag).toBe("Success")
      expect(itemsOf(onFork.events)).toEqual([["assistant_message", "Fork answer.", null, null]])
      // The model saw the parent's whole history on the fork, in order, then the new prompt; the tools are the parent's.
      const parentSoFar = conversation(loop.requests[1]!)
      expect(parentSoFar).toEqual([
        "user: parent prompt one", "assistant: Parent answer one.",
        `user: <history>injected into the parent</history>|<baton-deliveries ids="delivery-1"/>`, "user: parent prompt two"
      ])
      expect(conversation(loop.requests[2]!)).toEqual([...parentSoFar, "assistant: Parent answer two.", "user: fork prompt"])
      expect(bodyOf(loop.requests[2]!).tools?.some((t) => t.name === "thread_read")).toBe(true)
      // The parent does not hold the fork's turn.
      const onParent = yield* collect(adapter.startTurn({ nativeRef: parent, runId: "run-3", prompt: "parent prompt three", inlineHistory: null }))
      expect(onParent.exit._tag).toBe("Success")
      expect(conversation(loop.requests[3]!)).toEqual([...parentSoFar, "assistant: Parent answer two.", "user: parent prompt three"])
      // Read back: thread/read of the fork lists the parent's turns and its own. Its rollout starts at the fork
      // (`forked_from_id`), so the parent's injection markers are not read back from the fork: deliveries toward the
      // fork are its own, written to its own rollout.
      const forkRead = yield* adapter.readThread!(forked.nativeRef)
      expect([forkRead.runIds, forkRead.deliveryIds]).toEqual([["run-1", "run-2", "run-3-fork"], []])
      const parentRead = yield* adapter.readThread!(parent)
      expect([parentRead.runIds, parentRead.deliveryIds]).toEqual([["run-1", "run-2", "run-3"], ["delivery-1"]])
      expect(failureOf(yield* Effect.exit(adapter.forkThread!("01a23512-0000-7000-8000-000000000000")))).toMatchObject({ code: "thread_not_found" })
      const recorded = normalise(trace, home)
      expect(recorded).toBe(checkFixture("adapter-fork.jsonl", recorded))
    })))

  it.live("forkThread after an injection no turn followed: Codex 0.171.0 closes that open turn in the fork with its <turn_aborted> note", () =>
    Effect.scoped(Effect.gen(function*() {
      const { adapter, loop } = yield* setup()
      const { nativeRef: parent } = yield* adapter.startThread()
      loop.enqueue(answer("Parent answer.", 2_000, 10), answer("Fork answer.", 2_100, 10))
      yield* collect(adapter.startTurn({ nativeRef: parent, runId: "run-1", prompt: "parent prompt", inlineHistory: null }))
      yield* adapter.injectHistory!({ nativeRef: parent, rendered: "<history>trailing</history>", itemIds: [], deliveryIds: ["delivery-1"] })
      const forked = yield* adapter.forkThread!(parent)
      yield* collect(adapter.startTurn({ nativeRef: forked.nativeRef, runId: "run-2", prompt: "fork prompt", inlineHistory: null }))
      const texts = conversation(loop.requests[1]!)
      expect(texts.slice(-3).map((t) => t.slice(0, 30))).toEqual([`user: <history>trailing</histo`, "user: <turn_aborted>\nThe user ", "user: fork prompt"])
    })))

  it.live("contextWindowExceeded is a typed overflow carrying Codex's window", () =>
    Effect.scoped(Effect.gen(function*() {
      const { adapter, loop } = yield* setup()
      // Small enough that Codex does not compact before the second turn (it did at 40,010 of 44,000 with the
      // configured limit at 42,000: its effective limit is lower).
      loop.enqueue(answer("first", 1_000, 10), overflow())
      const { nativeRef } = yield* adapter.startThread()
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "one", inlineHistory: null }))
      const { exit } = yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "two", inlineHistory: null }))
      const error = failureOf(exit)
      expect(error).toMatchObject({ _tag: "ProviderError", code: "overflow", retryable: false, limitTokens: 41_800 })
      expect(loop.requests.map(isCompaction)).toEqual([false, false])
    })))

  // Found by a review: with the model endpoint refusing connections, Codex 0.171.0 announced "Reconnecting..." with a
  // doubling backoff for about 20 minutes (its retry settings notwithstanding) and the run stayed running.
  it.live("an unreachable model endpoint: after maxReconnects announced retries the turn fails unavailable and Codex is told to stop", () =>
    Effect.scoped(Effect.gen(function*() {
      const home = yield* codexHome("http://127.0.0.1:9")
      const sent: Array<string> = []
      const adapter = yield* CodexAdapter.make({
        instance: "codex" as ProviderInstance,
        config: { kind: "codex", binary: binary(), codexHome: home, cwd: home, maxReconnects: 2 },
        trace: (l) => void (l.direction === "out" && sent.push(l.line))
      })
      const { nativeRef } = yield* adapter.startThread()
      const started = Date.now()
      const { exit } = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "hello", inlineHistory: null }))
      expect(failureOf(exit)).toMatchObject({ _tag: "ProviderError", code: "unavailable", retryable: true })
      expect(failureOf(exit)?.reason).toContain("Codex could not reach the model after 2 attempts: Reconnecting")
      // The second notice comes about 5 s after the first (Codex's backoff), far from the idle timeout.
      expect(Date.now() - started).toBeLessThan(30_000)
      expect(sent.some((line) => line.includes("\"turn/interrupt\""))).toBe(true)
    })), 60_000)

  it.live("a turn/start answered after the request bound: the turn Codex started is followed to its end and recorded, not failed as a timeout (review D4)", () =>
    Effect.scoped(Effect.gen(function*() {
      const trace: Array<TraceLine> = []
      const { adapter, loop } = yield* setup({
        trace: (l) => trace.push(l),
        // The real binary behind a pipe that holds back the answer to turn/start for 4 s (its notifications pass).
        config: (home) => ({ binary: slowAnswers(home, binary(), { "turn/start": 4_000 }), requestTimeoutMs: 2_000 })
      })
      loop.enqueue(answer("Late but here.", 1_000, 5, 0))
      const { nativeRef } = yield* adapter.startThread()
      const { events, exit } = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Go", inlineHistory: null }))
      expect(failureOf(exit)).toBeNull()
      expect(itemsOf(events)).toEqual([["assistant_message", "Late but here.", null, null]])
      expect(events.at(-1)).toEqual(TurnEvent.turn_ended({ interrupted: false }))
      // The answer to turn/start did come, after the bound: the delay was real.
      const startId = JSON.parse(trace.find((l) => l.direction === "out" && l.line.includes(`"method":"turn/start"`))!.line).id
      const answered = trace.findIndex((l) => l.direction === "in" && JSON.parse(l.line).id === startId)
      const completed = trace.findIndex((l) => l.direction === "in" && l.line.includes(`"method":"turn/completed"`))
      expect(answered === -1 || answered > completed).toBe(true)
      const read = yield* adapter.readThread!(nativeRef)
      expect(read.runIds).toEqual(["run-1"])
    })), 60_000)

  it.live("interrupt: the turn in progress stops and ends interrupted", () =>
    Effect.scoped(Effect.gen(function*() {
      const { adapter, loop } = yield* setup()
      loop.enqueue(hanging)
      const { nativeRef } = yield* adapter.startThread()
      const fiber = yield* Effect.fork(collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "long", inlineHistory: null })))
      yield* requestsReach(loop, 1)
      yield* adapter.interrupt(nativeRef)
      const { events, exit } = yield* Fiber.join(fiber).pipe(Effect.timeout("20 seconds"))
      expect(exit._tag).toBe("Success")
      expect(events.at(-1)).toEqual(TurnEvent.turn_ended({ interrupted: true }))
    })))

  it.live("a turn stream closed before the turn ended (abandoned) asks Codex to stop it: turn/interrupt is sent", () =>
    Effect.scoped(Effect.gen(function*() {
      const trace: Array<TraceLine> = []
      const { adapter, loop } = yield* setup({ trace: (l) => trace.push(l) })
      loop.enqueue(hanging)
      const { nativeRef } = yield* adapter.startThread()
      const fiber = yield* Effect.fork(collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "long", inlineHistory: null })))
      yield* requestsReach(loop, 1)
      yield* Fiber.interrupt(fiber)
      const interrupts = trace.filter((l) => l.direction === "out" && l.line.includes(`"method":"turn/interrupt"`))
      expect(interrupts).toHaveLength(1)
    })))

  it.live("a turn Baton's idle bound ends is stopped in Codex, so the next message is a turn of its own, answered and recorded (review D1)", () =>
    Effect.scoped(Effect.gen(function*() {
      const trace: Array<TraceLine> = []
      const { adapter, loop } = yield* setup({ trace: (l) => trace.push(l), config: () => ({ turnIdleTimeoutMs: 3_000 }) })
      loop.enqueue(hanging, answer("second answer"))
      const { nativeRef } = yield* adapter.startThread()
      const first = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "first", inlineHistory: null }))
      expect(failureOf(first.exit)).toMatchObject({ code: "timeout" })
      expect(trace.filter((l) => l.direction === "out" && l.line.includes(`"method":"turn/interrupt"`))).toHaveLength(1)
      const second = yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "second", inlineHistory: null }))
      expect(failureOf(second.exit)).toBeNull()
      expect(itemsOf(second.events)).toEqual([["assistant_message", "second answer", null, null]])
      // Two turns, not the second message folded into the first (Codex answers a turn/start on a running turn with
      // that turn's id).
      const turnIds = trace.flatMap((l) => {
        const m = JSON.parse(l.line) as { method?: string; params?: { turn?: { id?: string } } }
        return l.direction === "in" && m.method === "turn/started" ? [m.params?.turn?.id] : []
      })
      expect(new Set(turnIds).size).toBe(2)
      expect(userTexts(loop.requests[1]!).at(-1)).toBe("second")
    })), 60_000)

  it.live("a compaction Baton's idle bound ends is stopped in Codex: the next turn runs (was refused ActiveTurnNotSteerable) (review D1b)", () =>
    Effect.scoped(Effect.gen(function*() {
      const { adapter, loop } = yield* setup({ config: () => ({ turnIdleTimeoutMs: 3_000 }) })
      loop.enqueue(answer("first answer"), hanging, answer("after"))
      const { nativeRef } = yield* adapter.startThread()
      expect((yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "first", inlineHistory: null }))).exit._tag).toBe("Success")
      const compacted = yield* Effect.exit(adapter.compactThread!(nativeRef))
      expect(failureOf(compacted)).toMatchObject({ code: "timeout" })
      const next = yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "next", inlineHistory: null }))
      expect(failureOf(next.exit)).toBeNull()
      expect(itemsOf(next.events)).toEqual([["assistant_message", "after", null, null]])
    })), 60_000)

  it.live("an interrupt while the thread is resumed in a new child is honoured: turn/start is never sent, the turn fails interrupted (review D2)", () =>
    Effect.scoped(Effect.gen(function*() {
      const trace: Array<TraceLine> = []
      const { adapter, loop } = yield* setup({
        trace: (l) => trace.push(l),
        config: (home) => ({ binary: slowAnswers(home, binary(), { "thread/resume": 3_000 }) })
      })
      loop.enqueue(answer("first answer"))
      const { nativeRef } = yield* adapter.startThread()
      expect((yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "first", inlineHistory: null }))).exit._tag).toBe("Success")
      process.kill((yield* adapter.appServer.pid)!, "SIGKILL")
      while ((yield* adapter.appServer.pid) !== null) yield* Effect.sleep("20 millis")
      const fiber = yield* Effect.fork(collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "second", inlineHistory: null })))
      // Wait until the resume is on its way (held back 3 s by the relay), then interrupt.
      while (!trace.some((l) => l.direction === "out" && l.line.includes(`"method":"thread/resume"`))) yield* Effect.sleep("20 millis")
      yield* adapter.interrupt(nativeRef)
      const { exit } = yield* Fiber.join(fiber).pipe(Effect.timeout("20 seconds"))
      expect(failureOf(exit)).toMatchObject({ code: "interrupted" })
      expect(trace.filter((l) => l.direction === "out" && l.line.includes(`"method":"turn/start"`))).toHaveLength(1)
      expect(loop.requests).toHaveLength(1)
    })), 60_000)

  it.live("a model stream cut before its end is unavailable and retryable, not a refusal (review D3)", () =>
    Effect.scoped(Effect.gen(function*() {
      const { adapter, loop } = yield* setup()
      loop.enqueue(cut())
      const { nativeRef } = yield* adapter.startThread()
      const { exit } = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "go", inlineHistory: null }))
      expect(failureOf(exit)).toMatchObject({ code: "unavailable", retryable: true })
    })), 60_000)

  it.live("the child killed mid-turn: the turn fails unavailable (retryable); the next turn resumes the same thread in a new child, its history intact", () =>
    Effect.scoped(Effect.gen(function*() {
      const { adapter, loop } = yield* setup()
      loop.enqueue(answer("first answer"), hanging)
      const { nativeRef } = yield* adapter.startThread()
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "first", inlineHistory: null }))
      const fiber = yield* Effect.fork(collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "second", inlineHistory: null })))
      yield* requestsReach(loop, 2)
      const pid = (yield* adapter.appServer.pid)!
      process.kill(pid, "SIGKILL")
      const { exit } = yield* Fiber.join(fiber).pipe(Effect.timeout("20 seconds"))
      expect(failureOf(exit)).toMatchObject({ code: "unavailable", retryable: true })
      loop.enqueue(answer("third answer"))
      const third = yield* collect(adapter.startTurn({ nativeRef, runId: "run-3", prompt: "third", inlineHistory: null }))
      expect(third.exit._tag).toBe("Success")
      expect(itemsOf(third.events)).toEqual([["assistant_message", "third answer", null, null]])
      expect(yield* adapter.appServer.generation).toBe(2)
      const texts = userTexts(loop.requests[2]!)
      // The killed turn's prompt stayed in the thread (Codex wrote it to the rollout before the model answered), and
      // the dynamic tool declared at thread/start is still offered after thread/resume.
      expect(texts.filter((t) => ["first", "second", "third"].includes(t))).toEqual(["first", "second", "third"])
      expect(texts.at(-1)).toBe("third")
      expect(bodyOf(loop.requests[2]!).tools?.some((t) => t.name === "thread_read")).toBe(true)
      const read = yield* adapter.readThread!(nativeRef)
      expect(read.runIds).toEqual(["run-1", "run-2", "run-3"])
    })))

  it.live("after a restart (a new adapter on the same CODEX_HOME) the thread is read back and continued; an unknown thread is thread_not_found", () =>
    Effect.scoped(Effect.gen(function*() {
      const loop = yield* loopback
      const home = yield* codexHome(loop.url)
      const config = { kind: "codex" as const, binary: binary(), codexHome: home, cwd: home }
      loop.enqueue(answer("before the restart"), answer("after the restart"))
      const nativeRef = yield* Effect.scoped(Effect.gen(function*() {
        const before = yield* CodexAdapter.make({ instance: "codex" as ProviderInstance, config })
        const { nativeRef } = yield* before.startThread()
        yield* collect(before.startTurn({ nativeRef, runId: "run-1", prompt: "one", inlineHistory: null }))
        yield* before.injectHistory!({ nativeRef, rendered: "<history/>", itemIds: [], deliveryIds: ["delivery-9"] })
        return nativeRef
      }))
      const after = yield* CodexAdapter.make({ instance: "codex" as ProviderInstance, config })
      const read = yield* after.readThread!(nativeRef)
      expect([read.runIds, read.deliveryIds]).toEqual([["run-1"], ["delivery-9"]])
      const { exit } = yield* collect(after.startTurn({ nativeRef, runId: "run-2", prompt: "two", inlineHistory: null }))
      expect(exit._tag).toBe("Success")
      expect(userTexts(loop.requests[1]!).filter((t) => t === "one" || t === "two")).toEqual(["one", "two"])
      const unknown = "01a23512-0000-7000-8000-000000000000"
      expect(failureOf(yield* Effect.exit(after.resumeThread(unknown)))).toMatchObject({ code: "thread_not_found" })
      expect(failureOf(yield* Effect.exit(after.readThread!(unknown)))).toMatchObject({ code: "thread_not_found" })
    })))

  it.live("a fork after a restart: forkThread of a thread the new child never loaded, and the copy resumed in a third child, both carry the parent's history", () =>
    Effect.scoped(Effect.gen(function*() {
      const loop = yield* loopback
      const home = yield* codexHome(loop.url)
      const config = { kind: "codex" as const, binary: binary(), codexHome: home, cwd: home }
      loop.enqueue(answer("Parent answer."), answer("Fork answer."))
      const parent = yield* Effect.scoped(Effect.gen(function*() {
        const before = yield* CodexAdapter.make({ instance: "codex" as ProviderInstance, config })
        const { nativeRef } = yield* before.startThread()
        yield* collect(before.startTurn({ nativeRef, runId: "run-1", prompt: "parent prompt", inlineHistory: null }))
        return nativeRef
      }))
      const forked = yield* Effect.scoped(Effect.flatMap(CodexAdapter.make({ instance: "codex" as ProviderInstance, config }), (a) => a.forkThread!(parent)))
      const after = yield* CodexAdapter.make({ instance: "codex" as ProviderInstance, config })
      const { exit } = yield* collect(after.startTurn({ nativeRef: forked.nativeRef, runId: "run-2", prompt: "fork prompt", inlineHistory: null }))
      expect(exit._tag).toBe("Success")
      expect(conversation(loop.requests[1]!)).toEqual(["user: parent prompt", "assistant: Parent answer.", "user: fork prompt"])
      expect((yield* after.readThread!(forked.nativeRef)).runIds).toEqual(["run-1", "run-2"])
    })))

  it.live("a missing binary: startThread fails `unavailable`, not retryable, naming @openai/codex", () =>
    Effect.scoped(Effect.gen(function*() {
      const adapter = yield* CodexAdapter.make({
        instance: "codex" as ProviderInstance,
        config: { kind: "codex", binary: "/nonexistent/bin/codex", codexHome: "/nonexistent" }
      })
      const exit = yield* Effect.exit(adapter.startThread())
      const error = failureOf(exit)
      expect(error).toMatchObject({ code: "unavailable", retryable: false })
      expect(error?.reason).toContain("@openai/codex@0.171.0")
    })))
})
