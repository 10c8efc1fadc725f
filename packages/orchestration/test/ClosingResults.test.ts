/**
 * A tool call an interrupt (or a missed deadline) leaves open is closed with one text: the `tool_result` the record
 * holds is the one the next model request carries in the native thread's message list. Found by the issue-9 review:
 * the record said "[interrupted] …" while the adapter closed the call with its own "[no result: …]" text.
 */
import { type ClientTool, type CommandId, Commands, type ProviderInstance, type RunId, type RunStatus } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { RunDriver, ThreadService } from "@baton/orchestration"
import { ThreadStore } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Layer } from "effect"
import { adapterFor, countTokensReply, httpLayer, loopback, type Received, sqliteFile } from "../../providers/test/support/Loopback.js"
import { answer, toolCalls } from "./support/ModelLoopback.js"

const counter = TokenCounter.make()
let n = 0
const cid = () => `cmd_closing_${++n}` as CommandId

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

/** The `tool_result` blocks of an Anthropic request, as `[tool_use_id, content, is_error]`. */
const toolResultsOf = (request: Received) =>
  (JSON.parse(request.body).messages as ReadonlyArray<{ content: unknown }>).flatMap((m) =>
    Array.isArray(m.content)
      ? (m.content as ReadonlyArray<Record<string, unknown>>).filter((c) => c["type"] === "tool_result").map((c) => [c["tool_use_id"], c["content"], c["is_error"]])
      : []
  )

// it.live: a real adapter on loopback HTTP and the run driver's fibers.
describe("the text closing a call left open is the record's", () => {
  it.live("a waiting run interrupted: the next request closes both calls with the record's '[interrupted] …' results, byte for byte", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const model = yield* adapterFor("anthropic-messages", loop, file, {}, { instance: "anthropic" as ProviderInstance })
      const layer = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([model], counter, file, {})))
      yield* Effect.gen(function*() {
        const service = yield* ThreadService.ThreadService
        const driver = yield* RunDriver.RunDriver
        const store = yield* ThreadStore
        const threadId = yield* service.createThread(Commands.CreateThread.make({
          commandId: cid(),
          title: "closing",
          providerInstance: "anthropic" as ProviderInstance,
          tools: [readFile]
        }))
        const turnReplies = [toolCalls([["toolu_a", "read_file", { path: "a.ts" }], ["toolu_b", "read_file", { path: "b.ts" }]]), answer("on to something else")]
        const reply = (request: Received) =>
          request.url.endsWith("/count_tokens") ? countTokensReply((text) => counter.count(text))(request) : turnReplies.shift()!
        loop.enqueue(...Array.from({ length: 8 }, () => reply))
        const first = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Compare a.ts and b.ts" }))
        yield* untilStatus(first.runId, "waiting")
        yield* driver.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: first.runId }))
        const second = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Something else." }))
        expect((yield* driver.awaitRun(second.runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")

        const recorded = (yield* store.listItems(threadId)).filter((i) => i.kind === "tool_result").map((i) => [i.toolCallId, i.text, i.isError])
        expect(recorded).toEqual([
          ["toolu_a", "[interrupted] Interrupted by the user while the run waited for this tool call's result; it returned no result.", true],
          ["toolu_b", "[interrupted] Interrupted by the user while the run waited for this tool call's result; it returned no result.", true]
        ])
        const turns = loop.requests.filter((r) => r.url === "/v1/messages")
        expect(turns.length).toBe(2)
        expect(toolResultsOf(turns[1]!)).toEqual(recorded)
      }).pipe(Effect.scoped, Effect.provide(layer))
    }).pipe(Effect.provide(httpLayer), Effect.scoped), { timeout: 60_000 })

  it.live("a turn interrupted after a tool_use block completed: the call is recorded interrupted, and the next request closes it with the record's text", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const model = yield* adapterFor("anthropic-messages", loop, file, {}, { instance: "anthropic" as ProviderInstance })
      const layer = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([model], counter, file, {})))
      yield* Effect.gen(function*() {
        const service = yield* ThreadService.ThreadService
        const driver = yield* RunDriver.RunDriver
        const store = yield* ThreadStore
        const threadId = yield* service.createThread(Commands.CreateThread.make({
          commandId: cid(),
          title: "closing",
          providerInstance: "anthropic" as ProviderInstance,
          tools: [readFile]
        }))
        // The tool_use block completes in the first chunk; the message ends only 20 s later (after the interrupt).
        const stream = toolCalls([["toolu_c", "read_file", { path: "c.ts" }]])
        const events = stream.chunks.join("")
        const cut = events.indexOf("event: message_delta")
        const slow = { ...stream, chunks: [events.slice(0, cut), events.slice(cut)], gapMillis: 20_000 }
        const turnReplies = [slow, answer("on to something else")]
        const reply = (request: Received) =>
          request.url.endsWith("/count_tokens") ? countTokensReply((text) => counter.count(text))(request) : turnReplies.shift()!
        loop.enqueue(...Array.from({ length: 8 }, () => reply))
        const first = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Read c.ts" }))
        yield* untilStatus(first.runId, "running")
        while (loop.requests.filter((r) => r.url === "/v1/messages").length === 0) yield* Effect.sleep(Duration.millis(10))
        yield* Effect.sleep(Duration.millis(1_000))
        yield* driver.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: first.runId }))
        const second = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "Something else." }))
        expect((yield* driver.awaitRun(second.runId).pipe(Effect.timeout("30 seconds"))).status).toBe("completed")

        const items = yield* store.listItems(threadId)
        expect(items.filter((i) => i.kind === "tool_call").map((i) => [i.toolCallId, i.toolCallState])).toEqual([["toolu_c", "interrupted"]])
        const recorded = items.filter((i) => i.kind === "tool_result").map((i) => [i.toolCallId, i.text, i.isError])
        expect(recorded).toEqual([["toolu_c", "[interrupted] The user interrupted the turn while this tool call ran; it returned no result.", true]])
        const turns = loop.requests.filter((r) => r.url === "/v1/messages")
        expect(toolResultsOf(turns.at(-1)!)).toEqual(recorded)
      }).pipe(Effect.scoped, Effect.provide(layer))
    }).pipe(Effect.provide(httpLayer), Effect.scoped), { timeout: 60_000 })
})
