/**
 * Review r17 of the provider switch to an `openai-responses` instance (issue 14 item 4, docs/gateway.md "Routing and
 * switching"): the conversion on its own (`GatewaySwitchResponses`), inputs a user of the gateway sends or an upstream
 * answers that the switch's own tests do not: Claude Code's one-token probe (`max_tokens: 1`), whose Responses request
 * must carry a `max_output_tokens` the API accepts (at least 16), and a stream that gives its text as deltas but a call
 * only in its final `response.completed` output (no `output_item.done` for it), whose call must reach the agent.
 */
import { TokenCounter } from "@baton/context"
import { describe, expect, it } from "@effect/vitest"
import * as GatewayAnthropic from "../src/GatewayAnthropic.js"
import * as GatewaySwitched from "../src/GatewaySwitched.js"
import * as GatewaySwitchResponses from "../src/GatewaySwitchResponses.js"

const counter = TokenCounter.make()
const count = (t: string) => counter.count(t)
const pointer = (n: number) => `<deferred_history>${n} left out</deferred_history>`

/** Anthropic SSE frames of Responses events. */
const framed = (events: ReadonlyArray<Record<string, unknown>>) => events.map((e) => `event: ${String(e.type)}\ndata: ${JSON.stringify(e)}\n\n`).join("")

describe("GatewaySwitchResponses (review r17)", () => {
  it("Claude Code's one-token probe (max_tokens: 1) goes out with max_output_tokens of at least 16 (the Responses API's minimum), still within the window", () => {
    const body = { model: "gpt-x", max_tokens: 1, messages: [{ role: "user", content: "quota" }] }
    const result = GatewaySwitchResponses.toResponses({ body, windowTokens: 32_000, maxOutputTokens: 4_096, count, pointer })
    if (result._tag !== "fits") throw new Error("expected a fit")
    const sent = result.body as { max_output_tokens: number; input: ReadonlyArray<unknown> }
    expect(sent.max_output_tokens).toBeGreaterThanOrEqual(16)
    expect(result.fit.outputTokens).toBe(sent.max_output_tokens)
    expect(count(JSON.stringify(result.body)) + sent.max_output_tokens).toBeLessThanOrEqual(32_000)
    // The prompt unchanged.
    expect(sent.input).toEqual([{ type: "message", role: "user", content: [{ type: "input_text", text: "quota" }] }])
  })

  it("a stream whose text came as deltas and whose call is only in its final output (no output_item.done) gives the agent the call too, once", () => {
    const call = { type: "function_call", id: "fc_1", call_id: "call_1", name: "Bash", arguments: "{\"command\":\"ls\"}", status: "completed" }
    const message = { type: "message", id: "msg_1", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Listing.", annotations: [] }] }
    const body = framed([
      { type: "response.created", response: { id: "resp_1", status: "in_progress", output: [] } },
      { type: "response.output_item.added", output_index: 0, item: { ...message, status: "in_progress", content: [] } },
      { type: "response.output_text.delta", output_index: 0, content_index: 0, delta: "Listing." },
      { type: "response.output_item.done", output_index: 0, item: message },
      { type: "response.completed", response: { id: "resp_1", status: "completed", output: [message, call], usage: { input_tokens: 10, output_tokens: 5 } } }
    ])
    for (const size of [1, 9, body.length]) {
      const t = GatewaySwitchResponses.streamTranslator("gpt-x", new Set(), new Set(["Bash"]))
      const bytes = new TextEncoder().encode(body)
      let out = ""
      for (let i = 0; i < bytes.length; i += size) out += t.push(bytes.slice(i, i + size))
      out += t.end()
      const a = GatewayAnthropic.replyAssembler()
      a.push(new TextEncoder().encode(out))
      const outcome = a.outcome()
      if (outcome._tag !== "completed") throw new Error(`not completed: ${out}`)
      expect(outcome.reply.messages[0]!.message).toEqual({
        role: "assistant",
        content: [{ type: "text", text: "Listing." }, { type: "tool_use", id: "call_1", name: "Bash", input: { command: "ls" } }]
      })
      expect(out).toContain("\"stop_reason\":\"tool_use\"")
    }
  })
})

describe("GatewaySwitched.coveredBy (review r17)", () => {
  it("a message with any item at or before the cut is one the summary stands for (never sent verbatim beside it)", () => {
    // Messages of items [1, 2], [3, 4], [5]; a cut at 3 splits the second (an assistant's text summarised, its call not).
    const seqs = [[1, 2], [3, 4], [5]]
    expect(GatewaySwitched.coveredBy(seqs, 2)).toBe(1)
    // The summary stands for item 3: the second message must be left out with the first for it to go.
    expect(GatewaySwitched.coveredBy(seqs, 3)).toBe(2)
    expect(GatewaySwitched.coveredBy(seqs, 5)).toBe(3)
    expect(GatewaySwitched.coveredBy(seqs, 0)).toBe(0)
  })
})

describe("GatewaySwitchResponses.toResponses, the fit's third step on the Responses wire (review r17, the merge 0b6a99d)", () => {
  it("a summary goes before the pointer in the first input item, counted as Responses items: the body and max_output_tokens within the window, the prompt last and unchanged", () => {
    const words = (seed: number, n: number) => Array.from({ length: n }, (_, i) => `w${(seed * 7919 + i * 104_729) % 100_003}`).join(" ")
    // Many short messages (larger as Responses items than as Chat messages), then long ones, then the prompt.
    const history = [
      ...Array.from({ length: 120 }, (_, i) => ({ role: i % 2 === 0 ? "user" : "assistant", content: `ok ${i}` })),
      ...Array.from({ length: 10 }, (_, i) => ({ role: i % 2 === 0 ? "user" : "assistant", content: `long ${i} ${words(i + 1, 300)}` }))
    ]
    const body = { model: "gpt-x", max_tokens: 2_000, system: "You are Claude Code.", messages: [...history, { role: "user", content: "the prompt" }] }
    const small = 8_000
    const summary = `<conversation_summary>${words(99, 200)}</conversation_summary>`
    for (const covers of [10, 60, 119]) {
      const result = GatewaySwitchResponses.toResponses({ body, windowTokens: small, maxOutputTokens: 2_000, count, pointer, summaries: [{ covers, text: summary }] })
      if (result._tag !== "fits") throw new Error("expected a fit")
      const sent = result.body as { max_output_tokens: number; input: ReadonlyArray<{ content: ReadonlyArray<{ text: string }> }> }
      expect(result.fit.summarised).toBe(covers)
      expect(result.fit.leftOut).toBeGreaterThanOrEqual(covers)
      expect(sent.input[0]).toEqual({ type: "message", role: "user", content: [{ type: "input_text", text: `${summary}\n\n${pointer(result.fit.leftOut)}` }] })
      expect(count(JSON.stringify(result.body)) + sent.max_output_tokens).toBeLessThanOrEqual(small)
      const items = sent.input.reduce((n, item) => n + GatewaySwitchResponses.itemTokens(count, item), 0)
      expect(result.fit.tokensAfter).toBe(16 + GatewaySwitchResponses.itemTokens(count, { type: "message", role: "system", content: [{ type: "input_text", text: "You are Claude Code." }] }) + items)
      expect(sent.input.at(-1)).toEqual({ type: "message", role: "user", content: [{ type: "input_text", text: "the prompt" }] })
    }
  })
})
