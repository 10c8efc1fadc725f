/**
 * Tool-result offload control (issue 11 item 4) on an Anthropic native thread over a loopback HTTP server: the
 * model's `offload_context` tool (applied at the next request, a step boundary), a thread's on/off, settings and
 * pins over the instance's, and the `thread_read` results of the turn in flight kept verbatim.
 */
import { TokenCounter, ToolResultOffload } from "@baton/context"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { type OffloadFlush, offloadContextTool, resultChars } from "../src/ModelApiAdapter.js"
import type { LocalTool, OffloadControl, ProviderAdapterShape, TurnEvent } from "../src/ProviderAdapter.js"
import { adapterFor, collect, fixtureLines, frame, httpLayer, json, type Loopback, loopback, sqliteFile, sse } from "./support/Loopback.js"

const kind = "anthropic-messages" as const
const recordedId = "toolu_01QE1WLsSVp5hy5Q3GmGTmjP"
/** The recorded tool-call answer with its call id, tool name and arguments replaced. */
const callReply = (id: string, name = "updateIssueList", input = "") =>
  sse(frame(
    kind,
    fixtureLines("anthropic/anthropic-tool-no-args.chunks.txt").map((l) =>
      l.replace(recordedId, id)
        .replace("\"name\":\"updateIssueList\"", `"name":"${name}"`)
        .replace("\"partial_json\":\"\"", `"partial_json":${JSON.stringify(input)}`)
    )
  ))
const toolReply = (round: number) => callReply(`toolu_r${round}`)
const textReply = () => sse(frame(kind, fixtureLines("anthropic/anthropic-text.chunks.txt")))
const tools = [{ name: "updateIssueList", description: "Updates the issue list.", inputSchema: { type: "object", properties: {} } }]
/** A tool output of about 2,000 tokens, different per round. */
const output = (round: number) => Array.from({ length: 200 }, (_, i) => `round ${round} line ${i}: issue #${round * 1000 + i} is open`).join("\n")

const stubbed = (body: string, r: number) => body.includes(`thread_read tool:toolu_r${r}]`)
const verbatim = (body: string, r: number) => body.includes(`round ${r} line 199`)
const toolNamesOf = (body: string) => (JSON.parse(body) as { tools?: Array<{ name: string }> }).tools?.map((t) => t.name) ?? []

/**
 * `count` tool rounds of run-1 on a fresh native thread: the model calls `updateIssueList` (ids `toolu_r1..`), the
 * client answers each with `output(round)`; the last answer is followed by `last` (default: a text answer).
 */
const rounds = (
  adapter: ProviderAdapterShape,
  loop: Loopback,
  nativeRef: string,
  count: number,
  options: { readonly control?: OffloadControl; readonly last?: ReadonlyArray<ReturnType<typeof textReply>>; readonly localTools?: ReadonlyArray<LocalTool> } = {}
) =>
  Effect.gen(function*() {
    const all: Array<TurnEvent> = []
    const common = { tools, ...(options.control === undefined ? {} : { offloadControl: options.control }), ...(options.localTools === undefined ? {} : { localTools: options.localTools }) }
    loop.enqueue(toolReply(1))
    const first = yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Keep the issue list current.", inlineHistory: null, ...common }))
    expect(Exit.isSuccess(first.exit)).toBe(true)
    for (let round = 1; round <= count; round++) {
      if (round < count) loop.enqueue(toolReply(round + 1))
      else for (const reply of options.last ?? [textReply()]) loop.enqueue(reply)
      const { events, exit } = yield* collect(adapter.continueTurn!({
        nativeRef,
        runId: "run-1",
        toolResults: [{ toolCallId: `toolu_r${round}`, output: output(round), isError: false }],
        ...common
      }))
      expect(Exit.isSuccess(exit)).toBe(true)
      all.push(...events)
    }
    return all
  })

describe("offload_context: the model frees context itself (issue 11 item 4)", () => {
  it.scoped("named units (a kept newest one included) become stubs at the next request, once, with one prefix break; refused ids say why", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const counter = TokenCounter.make()
      const flushes: Array<OffloadFlush> = []
      const adapter = yield* adapterFor(kind, loop, file, {}, { offload: { count: counter.count, onFlush: (f) => void flushes.push(f) } })
      const { nativeRef } = yield* adapter.startThread()
      const ask = JSON.stringify({ tool_call_ids: ["toolu_r2", "toolu_r5", "toolu_nope"] })
      const events = yield* rounds(adapter, loop, nativeRef, 6, { last: [callReply("toolu_ask", "offload_context", ask), textReply()] })

      // The cache-aware tiers alone flushed nothing in six rounds: every flush below is the model's.
      expect(flushes).toHaveLength(1)
      const flush = flushes[0]!
      expect(flush.decision.tier).toBe("requested")
      // r2 and r5 as asked (r5 is among the 3 newest tool units, with r6 and the offload_context call itself, so kept
      // otherwise); r3 and r4 ride along (the cache breaks at r2 anyway); r1, before the break, and r6 stay.
      expect(flush.refs).toEqual(["tool:toolu_r2", "tool:toolu_r3", "tool:toolu_r4", "tool:toolu_r5"])
      expect(events.filter((e) => e._tag === "context_offloaded")).toHaveLength(1)

      // The answer to the model: what goes, what does not and why.
      const answer = events.flatMap((e) => e._tag === "item_produced" && e.item.kind === "tool_result" && e.item.toolCallId === "toolu_ask" ? [e.item.text] : [])
      expect(answer).toHaveLength(1)
      expect(answer[0]).toContain("tool:toolu_r2 (updateIssueList), tool:toolu_r5 (updateIssueList)")
      expect(answer[0]).toContain("Not offloaded: toolu_nope (no such tool call in this conversation)")

      // The request that carried the answer: stubs for r2, r3, r5, the rest verbatim; offered with the tool every time.
      const [before, after] = loop.requests.slice(-2).map((r) => r.body)
      for (const r of [2, 3, 4, 5]) expect([stubbed(after!, r), verbatim(after!, r), verbatim(before!, r)]).toEqual([true, false, true])
      for (const r of [1, 6]) expect([stubbed(after!, r), verbatim(after!, r)]).toEqual([false, true])
      for (const request of loop.requests) expect(toolNamesOf(request.body)).toEqual(["updateIssueList", "offload_context"])
      // Each stub line gives the characters of that call's own output (found by a review: it gave a share of the
      // whole results entry's JSON).
      expect(after).toContain(`updateIssueList: ${output(2).length.toLocaleString("en-US")} chars`)

      // Once applied, the request is spent: a later turn does not flush again.
      loop.enqueue(textReply())
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "Thanks.", inlineHistory: null, tools }))
      expect(flushes).toHaveLength(1)
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("all: every eligible unit; bad arguments are answered, not failed", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const counter = TokenCounter.make()
      const flushes: Array<OffloadFlush> = []
      const adapter = yield* adapterFor(kind, loop, file, {}, { offload: { count: counter.count, onFlush: (f) => void flushes.push(f) } })
      const { nativeRef } = yield* adapter.startThread()
      const flood = JSON.stringify({ tool_call_ids: Array.from({ length: 5_000 }, (_, i) => `toolu_unknown_${i}`) })
      const events = yield* rounds(adapter, loop, nativeRef, 6, {
        last: [
          callReply("toolu_bad", "offload_context", "{\"ids\":3}"),
          callReply("toolu_extra", "offload_context", "{\"all\":true,\"extra\":1}"),
          callReply("toolu_none", "offload_context", "{\"all\":false}"),
          callReply("toolu_flood", "offload_context", flood),
          callReply("toolu_all", "offload_context", "{\"all\":true}"),
          textReply()
        ]
      })
      const answers = new Map(events.flatMap((e) => e._tag === "item_produced" && e.item.kind === "tool_result" && e.item.toolCallId !== null ? [[e.item.toolCallId, e.item.text] as const] : []))
      expect(answers.get("toolu_bad")).toBe("offload_context: the arguments are not {\"tool_call_ids\": [\"<call id>\", ...]} or {\"all\": true}")
      // Its own schema says additionalProperties: false (found by a review: an extra field was taken).
      expect(answers.get("toolu_extra")).toBe(answers.get("toolu_bad"))
      expect(answers.get("toolu_none")).toBe("offload_context: nothing to offload.")
      // 5,000 unknown ids: ten named, the rest counted (found by a review: the answer echoed all 5,000, ~73k tokens).
      expect(answers.get("toolu_flood")).toMatch(/^offload_context: nothing to offload\. Not offloaded: toolu_unknown_0 \(no such tool call in this conversation\), .*toolu_unknown_9 \(no such tool call in this conversation\), and 4990 more\.$/)
      // all: every eligible unit; the 3 newest tool units (the last offload_context calls) stay.
      // (The requests in between let a mild flush come first.)
      expect(flushes.at(-1)!.decision.tier).toBe("requested")
      expect(flushes.flatMap((f) => f.refs)).toEqual(expect.arrayContaining([1, 2, 3, 4, 5, 6].map((r) => `tool:toolu_r${r}`)))
      const last = loop.requests.at(-1)!.body
      expect([verbatim(last, 5), verbatim(last, 6)]).toEqual([false, false])
    }).pipe(Effect.provide(httpLayer)))
})

describe("a thread's control over the instance's settings (issue 11 item 4)", () => {
  /** Aggressive settings: any request over 1% of the window flushes the oldest eligible units. */
  const eager = { aggressiveRatio: 0.02, aggressiveTargetRatio: 0.01, keepNewestUnits: 1 }

  it.scoped("settings and pins: an aggressive thread flushes everything eligible but its pinned unit and its newest", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const counter = TokenCounter.make()
      const flushes: Array<OffloadFlush> = []
      const adapter = yield* adapterFor(kind, loop, file, {}, { offload: { count: counter.count, onFlush: (f) => void flushes.push(f) } })
      const { nativeRef } = yield* adapter.startThread()
      const control: OffloadControl = { settings: eager, pinnedToolCallIds: ["toolu_r2"] }
      yield* rounds(adapter, loop, nativeRef, 5, { control })
      expect(flushes.length).toBeGreaterThan(0)
      expect(flushes.every((f) => f.decision.tier === "aggressive")).toBe(true)
      const last = loop.requests.at(-1)!.body
      expect([1, 3, 4].map((r) => stubbed(last, r))).toEqual([true, true, true])
      expect([verbatim(last, 2), verbatim(last, 5)]).toEqual([true, true])
      // The preview under the same control agrees: nothing more to stub; under the instance's own settings, nothing
      // either (the defaults never stub units this young), and the pins show in neither as a unit.
      const preview = yield* adapter.toolResultOffload!.preview(nativeRef, control)
      expect([preview.enabled, preview.units]).toEqual([true, []])
      expect(adapter.toolResultOffload!.effective(control)).toEqual({
        enabled: true,
        settings: { ...ToolResultOffload.defaults, ...eager },
        problems: []
      })
    }).pipe(Effect.provide(httpLayer)))

  // Found by a reviewer: the flush's entry was stored before the request, but its event only joined the stream once the
  // request was answered, so a refused request left a flush nobody was told of.
  it.scoped("a flush is reported even when the request it was made for is refused", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const counter = TokenCounter.make()
      const flushes: Array<OffloadFlush> = []
      const adapter = yield* adapterFor(kind, loop, file, { maxRetries: 0 }, { offload: { count: counter.count, onFlush: (f) => void flushes.push(f) } })
      const { nativeRef } = yield* adapter.startThread()
      yield* rounds(adapter, loop, nativeRef, 3)
      expect(flushes).toEqual([])
      loop.enqueue(json(400, JSON.stringify({ type: "error", error: { type: "invalid_request_error", message: "refused" } })))
      const { events, exit } = yield* collect(adapter.startTurn({ nativeRef, runId: "run-2", prompt: "Next.", inlineHistory: null, tools, offloadControl: { settings: eager } }))
      expect(Exit.isFailure(exit)).toBe(true)
      expect(flushes).toHaveLength(1)
      expect(events.map((e) => e._tag)).toEqual(["context_offloaded"])
    }).pipe(Effect.provide(httpLayer)))

  // Found by a review: a stub's ref is `tool:<call id>`; a call id with a space (or none) could not be read back.
  it.scoped("a unit whose call id cannot be a ref is never stubbed; one with any other characters is, and reads back", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const counter = TokenCounter.make()
      const flushes: Array<OffloadFlush> = []
      const adapter = yield* adapterFor(kind, loop, file, {}, { offload: { count: counter.count, onFlush: (f) => void flushes.push(f) } })
      const { nativeRef } = yield* adapter.startThread()
      const ids = ["toolu bad", "functions.read_file:0", "toolu_r3", "toolu_r4"]
      const common = { tools, offloadControl: { settings: eager } }
      loop.enqueue(callReply(ids[0]!))
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Go.", inlineHistory: null, ...common }))
      for (const [k, id] of ids.entries()) {
        loop.enqueue(k + 1 < ids.length ? callReply(ids[k + 1]!) : textReply())
        const { exit } = yield* collect(adapter.continueTurn!({ nativeRef, runId: "run-1", toolResults: [{ toolCallId: id, output: output(k + 1), isError: false }], ...common }))
        expect(Exit.isSuccess(exit)).toBe(true)
      }
      const refs = flushes.flatMap((f) => f.refs)
      expect(refs).toContain("tool:functions.read_file:0")
      expect(refs).not.toContain("tool:toolu bad")
      expect(verbatim(loop.requests.at(-1)!.body, 1)).toBe(true)
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("settings that break the policy's rules are not applied: the instance's hold", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const counter = TokenCounter.make()
      const flushes: Array<OffloadFlush> = []
      const adapter = yield* adapterFor(kind, loop, file, {}, { offload: { count: counter.count, onFlush: (f) => void flushes.push(f) } })
      const { nativeRef } = yield* adapter.startThread()
      const control: OffloadControl = { settings: { ...eager, aggressiveTargetRatio: 0.5 } }
      expect(adapter.toolResultOffload!.effective(control).problems).toEqual(["aggressiveTargetRatio (0.5) must be below aggressiveRatio (0.02)"])
      yield* rounds(adapter, loop, nativeRef, 5, { control })
      expect(flushes).toEqual([])
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("on/off: a thread turns offload off (no flush, no offload_context offered) or on where the instance has it off", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const counter = TokenCounter.make()
      const run = (instanceEnabled: boolean, threadEnabled: boolean | undefined) =>
        Effect.gen(function*() {
          const file = yield* sqliteFile
          const flushes: Array<OffloadFlush> = []
          const adapter = yield* adapterFor(kind, loop, file, {}, { offload: { count: counter.count, enabled: instanceEnabled, onFlush: (f) => void flushes.push(f) } })
          const { nativeRef } = yield* adapter.startThread()
          const from = loop.requests.length
          yield* rounds(adapter, loop, nativeRef, 4, { control: { settings: eager, ...(threadEnabled === undefined ? {} : { enabled: threadEnabled }) } })
          const offered = loop.requests.slice(from).map((r) => toolNamesOf(r.body).includes(offloadContextTool.name))
          return { flushes: flushes.length, offered: [...new Set(offered)] }
        })
      expect(yield* run(true, undefined)).toEqual({ flushes: 3, offered: [true] })
      expect(yield* run(true, false)).toEqual({ flushes: 0, offered: [false] })
      expect(yield* run(false, undefined)).toEqual({ flushes: 0, offered: [false] })
      expect(yield* run(false, true)).toEqual({ flushes: 3, offered: [true] })
    }).pipe(Effect.provide(httpLayer)))

  it.scoped("what thread_read returned stays verbatim while among the 3 newest tool units, even with keepNewestUnits 0; then it may go", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const counter = TokenCounter.make()
      const flushes: Array<OffloadFlush> = []
      const adapter = yield* adapterFor(kind, loop, file, {}, { offload: { count: counter.count, onFlush: (f) => void flushes.push(f) } })
      const { nativeRef } = yield* adapter.startThread()
      const original = Array.from({ length: 300 }, (_, i) => `original line ${i}`).join("\n")
      const threadRead: LocalTool = {
        definition: { name: "thread_read", description: "Reads history.", inputSchema: { type: "object", properties: { refs: { type: "string" } } } },
        execute: () => Effect.succeed({ output: original, isError: false })
      }
      const control: OffloadControl = { settings: { ...eager, keepNewestUnits: 0 } }
      const common = { tools, localTools: [threadRead], offloadControl: control }
      // After client round 2 the model reads with thread_read, then calls the client's tool again (rounds 3, 4, ...).
      loop.enqueue(toolReply(1))
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Go.", inlineHistory: null, ...common }))
      const answer = (round: number, ...replies: ReadonlyArray<ReturnType<typeof textReply>>) =>
        Effect.gen(function*() {
          for (const reply of replies) loop.enqueue(reply)
          const { exit } = yield* collect(adapter.continueTurn!({
            nativeRef,
            runId: "run-1",
            toolResults: [{ toolCallId: `toolu_r${round}`, output: output(round), isError: false }],
            ...common
          }))
          expect(Exit.isSuccess(exit)).toBe(true)
          return loop.requests.at(-1)!.body
        })
      yield* answer(1, toolReply(2))
      yield* answer(2, callReply("toolu_read", "thread_read", "{\"refs\":\"#1\"}"), toolReply(3))
      const third = yield* answer(3, toolReply(4))
      // Newest tool units: r3's (its results are what this request adds), the read, r2's: the read stays while r1
      // and r2 go (keepNewestUnits 0).
      expect(third).toContain("original line 299")
      expect([1, 2].map((r) => stubbed(third, r))).toEqual([true, true])
      const fourth = yield* answer(4, toolReply(5))
      expect(fourth).toContain("original line 299")
      // Three newer tool units (r3, r4, r5): the read is no longer kept and goes like any other unit.
      const fifth = yield* answer(5, textReply())
      expect(fifth).not.toContain("original line 299")
      expect(fifth).toContain("thread_read tool:toolu_read]")
    }).pipe(Effect.provide(httpLayer)))
})

describe("resultChars", () => {
  it("reads each call's output length from any dialect's tool_results entry", () => {
    const anthropic = JSON.stringify({ role: "user", content: [
      { type: "tool_result", tool_use_id: "toolu_a", content: "x".repeat(12) },
      { type: "tool_result", tool_use_id: "toolu_b", content: [{ type: "text", text: "yy" }, { type: "text", text: "zzz" }] }
    ] })
    // Chat's and Responses' entries: items joined by commas, as their dialects write them.
    const responses = [{ type: "function_call_output", call_id: "call_a", output: "abcd" }, { type: "function_call_output", call_id: "call_b", output: "" }].map((o) => JSON.stringify(o)).join(",")
    const chat = [{ role: "tool", tool_call_id: "c1", content: "hello" }, { role: "tool", tool_call_id: "c2", content: "hi" }].map((o) => JSON.stringify(o)).join(",")
    expect([...resultChars(anthropic)]).toEqual([["toolu_a", 12], ["toolu_b", 5]])
    expect([...resultChars(responses)]).toEqual([["call_a", 4], ["call_b", 0]])
    expect([...resultChars(chat)]).toEqual([["c1", 5], ["c2", 2]])
    expect(resultChars("not json").size).toBe(0)
  })
})
