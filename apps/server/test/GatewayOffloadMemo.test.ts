/**
 * `GatewayOffload.plan` on interned bodies (`GatewayMemo`: the messages a request repeats are its previous request's
 * objects, and what was computed of them is kept) decides and writes exactly what it does on freshly parsed bodies:
 * the same body (as `JSON.stringify` writes it, and as `GatewayMemo.bodyJson` does), the same stubs and flushes, on
 * Anthropic Messages and OpenAI Responses, over a conversation whose flushes come as it grows.
 */
import { ToolResultOffload } from "@baton/context"
import { GatewayMemo } from "@baton/orchestration"
import { describe, expect, it } from "@effect/vitest"
import * as GatewayOffload from "../src/GatewayOffload.js"
import * as GatewayResponsesOffload from "../src/GatewayResponsesOffload.js"

const count = (text: string) => Math.ceil(text.length / 4)
const output = (n: number) => `${n}: ${"line of a command's output\n".repeat(40 + (n % 7) * 30)}`

const anthropicRound = (n: number) => [
  { role: "assistant", content: [{ type: "text", text: `step ${n}` }, { type: "tool_use", id: `toolu_${n}`, name: "Bash", input: { command: `cat f${n}` } }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: `toolu_${n}`, content: output(n), ...(n % 5 === 4 ? { is_error: true } : {}) }] }
]
const responsesRound = (n: number) => [
  { type: "function_call", id: `fc_${n}`, call_id: `call_${n}`, name: "exec_command", arguments: JSON.stringify({ cmd: `cat f${n}` }) },
  { type: "function_call_output", call_id: `call_${n}`, output: output(n) }
]

const cases = [
  {
    name: "Anthropic Messages",
    shape: GatewayOffload.anthropicShape,
    historyKey: "messages",
    body: (rounds: number) => {
      const messages: Array<unknown> = [{ role: "user", content: [{ type: "text", text: "Work through the files." }] }]
      for (let i = 0; i < rounds; i++) messages.push(...anthropicRound(i))
      // Claude Code's breakpoint on the newest message: the previous request's newest is another object.
      const last = messages.at(-1) as { content: Array<Record<string, unknown>> }
      last.content = last.content.map((b, i) => (i === last.content.length - 1 ? { ...b, cache_control: { type: "ephemeral" } } : b))
      return { model: "claude-x", max_tokens: 4096, system: [{ type: "text", text: "You are a coding agent." }], tools: [{ name: "Bash", input_schema: { type: "object" } }], messages }
    }
  },
  {
    name: "OpenAI Responses",
    shape: GatewayResponsesOffload.shape,
    historyKey: "input",
    body: (rounds: number) => {
      const input: Array<unknown> = [{ type: "message", role: "user", content: [{ type: "input_text", text: "Work through the files." }] }]
      for (let i = 0; i < rounds; i++) input.push(...responsesRound(i))
      return { model: "gpt-x", instructions: "You are a coding agent.", tools: [{ type: "function", name: "exec_command" }], input, stream: true }
    }
  }
]

describe("GatewayOffload.plan on interned bodies", () => {
  for (const c of cases) {
    it(`${c.name}: the same rewrites, stubs and flushes as on parsed bodies, over 30 requests`, () => {
      const interner = GatewayMemo.makeInterner()
      let offloaded: ReadonlyArray<string> = []
      let flushes = 0
      for (let request = 0; request < 30; request++) {
        const text = JSON.stringify(c.body(4 + request))
        const input = (body: Record<string, unknown>) => ({
          body,
          offloaded,
          settings: ToolResultOffload.defaults,
          // Small enough that the conversation reaches the aggressive tier as it grows.
          windowTokens: 40_000,
          prices: { input: 3, cacheRead: 0.3, cacheWrite: 3.75 },
          requestsSoFar: request,
          msSinceLastRequest: 2_000,
          count
        })
        const interned = JSON.parse(text) as Record<string, unknown>
        interner.intern("session", interned, c.historyKey)
        const fast = GatewayOffload.plan(c.shape, input(interned))
        const plain = GatewayOffload.plan(c.shape, input(JSON.parse(text) as Record<string, unknown>))
        expect(JSON.stringify(fast.body)).toBe(JSON.stringify(plain.body))
        expect(GatewayMemo.bodyJson(fast.body)).toBe(JSON.stringify(plain.body))
        expect({ changed: fast.changed, offloaded: fast.offloaded, flush: fast.flush }).toEqual({ changed: plain.changed, offloaded: plain.offloaded, flush: plain.flush })
        if (plain.flush !== null) flushes++
        offloaded = plain.offloaded
      }
      // The conversation flushed (so stubs were rendered and kept) more than once.
      expect(flushes).toBeGreaterThan(1)
      expect(offloaded.length).toBeGreaterThan(10)
    })
  }
})
