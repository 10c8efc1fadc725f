/**
 * Issue "Real model providers", acceptance: "the model calls `thread_read` on an item a handoff omitted and gets the
 * original back, paged". A thread's history is built on a scripted provider, then switched to a real Anthropic
 * Messages adapter (a loopback server speaking the wire protocol plays the model) whose window is too small for all
 * of it. The model reads the pointer in the request it received, calls `thread_read` with the ref it names, pages
 * through the original, and answers. Baton executes the tool inside the turn: the run completes with no open call.
 */
import { type CommandId, Commands, type ProviderInstance, type ToolCallId } from "@baton/contracts"
import { Render, TokenCounter } from "@baton/context"
import { InvariantChecks, RunDriver, ThreadService } from "@baton/orchestration"
import { ThreadStore } from "@baton/persistence"
import { ScriptedProvider } from "@baton/providers"
import { answer, scriptedCodex, toolCalls } from "./support/ModelLoopback.js"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Option } from "effect"
import {
  adapterFor,
  countTokensReply,
  httpLayer,
  loopback,
  type Received,
  sqliteFile,
} from "../../providers/test/support/Loopback.js"

const kind = "anthropic-messages" as const



/** Every text the request's messages carry (history blocks, prompts, tool results), joined. */
const textsOf = (request: Received): string => {
  const body = JSON.parse(request.body) as { messages: ReadonlyArray<{ content: string | ReadonlyArray<{ text?: string; content?: unknown }> }> }
  return body.messages.flatMap((m) =>
    typeof m.content === "string"
      ? [m.content]
      : m.content.map((c) => c.text ?? (typeof c.content === "string" ? c.content : JSON.stringify(c.content ?? "")))
  ).join("\n")
}

/** The last tool result the request carries (the answer to the model's last call). */
const lastToolResult = (request: Received): string => {
  const body = JSON.parse(request.body) as { messages: ReadonlyArray<{ content: string | ReadonlyArray<{ type: string; content?: unknown }> }> }
  const results = body.messages.flatMap((m) => typeof m.content === "string" ? [] : m.content.filter((c) => c.type === "tool_result"))
  const content = results[results.length - 1]?.content
  return typeof content === "string" ? content : (content as ReadonlyArray<{ text: string }>).map((c) => c.text).join("")
}

// it.live: the adapter's retries and timeouts sleep on the real clock.
describe("thread_read through a model", () => {
  it.live("the model reads an item a handoff omitted by the pointer's ref and gets the original back, paged", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      // The model: its window holds a few of the 12 earlier exchanges (each ~1,500 tokens), not all of them.
      const model = yield* adapterFor(kind, loop, file, { contextWindow: 24_000, autoCompactThreshold: null }, {
        instance: "anthropic" as ProviderInstance
      })
      const counter = TokenCounter.make()
      const script = ScriptedProvider.makeScript()
      const codex = scriptedCodex(script, counter)
      const layer = Harness.makeLayer([codex, model], counter, file, {})

      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const t = yield* o.create("codex")
        for (let i = 1; i <= 12; i++) {
          script.enqueue({ items: [Harness.produced("assistant_message", `answer ${i}: ${Harness.words(1_500)}`)] })
          yield* o.send(t, `question ${i}`)
        }
        yield* o.switchTo(t, "anthropic")

        // The instance is new: Baton calibrates it with two count_tokens requests (this model counts as Baton does).
        loop.enqueue(countTokensReply((text) => counter.count(text)), countTokensReply((text) => counter.count(text)))
        const pages: Array<string> = []
        let pointerRef = ""
        // 1. The model finds the pointer in its history and reads the first omitted ref, 2,000 characters at a time.
        loop.enqueue((request) => {
          const pointer = /earlier items? (?:was|were) omitted[^\n]*thread_read (\{[^\n]*\})/.exec(textsOf(request))
          if (pointer === null) throw new Error("no pointer in the request")
          pointerRef = (JSON.parse(pointer[1]!) as { refs: string }).refs.split(", ")[0]!.split("-")[0]!
          return toolCalls([["toolu_read1", "thread_read", { refs: pointerRef, limit: 2_000 }]])
        })
        // 2..n. Each page's footer names the next page; the model follows it until the end.
        const follow = (request: Received) => {
          const result = lastToolResult(request)
          const footer = /\n\[characters \d+-\d+ of \d+; (?:the next page: thread_read (\{.*\})|end)\]$/.exec(result)
          if (footer === null) throw new Error(`no page footer in ${result.slice(-200)}`)
          pages.push(result.slice(0, footer.index))
          if (footer[1] === undefined) return answer("The first answer began with alpha.")
          loop.enqueue(follow)
          return toolCalls([[`toolu_read${pages.length + 1}`, "thread_read", JSON.parse(footer[1]) as object]])
        }
        loop.enqueue(follow)

        const result = yield* o.send(t, "What did your first answer say, exactly?")
        expect(result.status).toBe("completed")

        // The item the model read was omitted by the switch's handoff, and what it got back is the original, whole.
        const items = yield* o.store.listItems(t)
        const seq = Number(pointerRef.slice(1))
        const original = items.find((i) => i.seq === seq)!
        const omitted = (yield* o.store.listDeliveriesOfThread(t)).flatMap((d) => d.omittedItemIds)
        expect(omitted).toContain(original.id)
        expect(pages.length).toBeGreaterThan(2)
        for (const page of pages) expect(page.length).toBeLessThanOrEqual(2_000)
        expect(pages.join("")).toBe(Render.renderItem(original))

        // Baton ran the tool inside the turn: the calls and their answers are recorded, paired, and nothing waits.
        const run = items.filter((i) => i.runId === result.runId)
        const calls = run.filter((i) => i.kind === "tool_call" && i.toolName === "thread_read")
        expect(calls.length).toBe(pages.length)
        for (const call of calls) {
          expect(run.some((i) => i.kind === "tool_result" && i.toolCallId === call.toolCallId)).toBe(true)
        }
        expect(run[run.length - 1]).toMatchObject({ kind: "assistant_message", text: "The first answer began with alpha." })
        // The invariants (nothing lost, nothing delivered twice, tool units whole), with what the scripted side saw.
        // The model's side: the prompt its first turn request ended with (the user's text, byte for byte).
        const first = JSON.parse(loop.requests.find((r) => r.url === "/v1/messages")!.body) as { messages: ReadonlyArray<{ role: string; content: string | ReadonlyArray<{ type: string; text?: string }> }> }
        const last = first.messages[first.messages.length - 1]!
        const prompt = typeof last.content === "string" ? last.content : last.content.filter((c) => c.type === "text").at(-1)?.text ?? ""
        const seen = codex.received
        expect(yield* InvariantChecks.check(t, {
          observed: {
            turns: [...seen.flatMap((r) => r.type === "turn" ? [r] : []), { runId: result.runId, prompt, nativeRef: "model" }],
            injections: seen.flatMap((r) => r.type === "inject" ? [r] : [])
          }
        })).toEqual([])

        // Back on codex: the run is owed with its question and answer, never with the thread_read calls and their
        // results (Baton's own, derived from history that is handed over itself).
        const back = yield* o.switchTo(t, "codex")
        const handoff = Option.getOrThrow(yield* o.store.getHandoff(back.handoffId!))
        const owed = new Set(handoff.itemIds)
        expect(run.filter((i) => owed.has(i.id)).map((i) => i.kind)).toEqual(["user_message", "assistant_message"])
        expect(calls.every((c) => !owed.has(c.id))).toBe(true)
      }).pipe(Effect.provide(layer))
    }).pipe(Effect.provide(httpLayer), Effect.scoped), { timeout: 60_000 })
})


// Found by a tester: thread_read called beside a client tool in one round lost its result in the record, and its
// result went in a user message of its own before the client's (Anthropic wants every result of a round in the one
// message after it).
describe("thread_read beside a client tool in one round", () => {
  it.live("both results are recorded, paired, and sent in one message after the round", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const counter = TokenCounter.make()
      const model = yield* adapterFor(kind, loop, file, {}, { instance: "anthropic" as ProviderInstance })
      const layer = RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([model], counter, file, {})))
      yield* Effect.gen(function*() {
        const service = yield* ThreadService.ThreadService
        const driver = yield* RunDriver.RunDriver
        const store = yield* ThreadStore
        const t = yield* service.createThread(Commands.CreateThread.make({
          commandId: "cmd_par_1" as CommandId,
          title: "parallel",
          providerInstance: "anthropic" as ProviderInstance,
          tools: [{ name: "run_tests", description: "Runs the tests", inputSchema: { type: "object" } }]
        }))
        loop.enqueue(toolCalls([["toolu_c", "run_tests", {}], ["toolu_r", "thread_read", { refs: "#1" }]]))
        let next: Received | null = null
        loop.enqueue((request) => {
          next = request
          return answer("Tests pass; your first message was read back.")
        })
        const accepted = yield* driver.submit(Commands.SendMessage.make({ commandId: "cmd_par_2" as CommandId, threadId: t, text: "run the tests" }))
        for (let i = 0; i < 500 && Option.getOrThrow(yield* store.getRun(accepted.runId)).status !== "waiting"; i++) yield* Effect.sleep("10 millis")
        expect(Option.getOrThrow(yield* store.getRun(accepted.runId)).status).toBe("waiting")
        yield* driver.submitToolResults(Commands.SubmitToolResults.make({
          commandId: "cmd_par_3" as CommandId,
          threadId: t,
          runId: accepted.runId,
          results: [{ toolCallId: "toolu_c" as ToolCallId, output: "12 passed", isError: false }]
        }))
        const ended = yield* driver.awaitRun(accepted.runId)
        expect(ended.status).toBe("completed")

        // The record: both calls, both results (each paired), then the answer.
        const items = (yield* store.listItems(t)).map((i) => [i.kind, i.toolCallId, i.kind === "tool_result" ? i.text.slice(0, 20) : ""])
        expect(items.filter(([k]) => k === "tool_call").map(([, id]) => id).sort()).toEqual(["toolu_c", "toolu_r"])
        expect(items.filter(([k]) => k === "tool_result").map(([, id]) => id).sort()).toEqual(["toolu_c", "toolu_r"])
        expect(items.find(([k, id]) => k === "tool_result" && id === "toolu_c")![2]).toBe("12 passed")
        expect(items.find(([k, id]) => k === "tool_result" && id === "toolu_r")![2]).toContain("[user #1]")
        // The wire: the message right after the round holds both results, in call order; no other user message between.
        const messages = (JSON.parse(next!.body) as { messages: ReadonlyArray<{ role: string; content: ReadonlyArray<{ type: string; tool_use_id?: string }> }> }).messages
        const round = messages.findIndex((m) => m.role === "assistant" && m.content.some((c) => c.type === "tool_use"))
        expect(messages.length).toBe(round + 2)
        expect(messages[round + 1]!.content.filter((c) => c.type === "tool_result").map((c) => c.tool_use_id)).toEqual(["toolu_c", "toolu_r"])
      }).pipe(Effect.provide(layer))
    }).pipe(Effect.provide(httpLayer), Effect.scoped), { timeout: 60_000 })
})
