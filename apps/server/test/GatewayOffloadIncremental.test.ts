/**
 * `GatewayOffload.plan` reuses its scan of the history and its stubbed entries from the conversation's previous
 * request (its `Snapshot`, by the identity of the interned entries the bodies share): the output is the same as the plan
 * computed from the start (`incremental: false`) and as the plan of a freshly parsed body, on random conversations
 * that grow, rewind, edit an earlier message, call `thread_read` (and have the gateway's hidden rounds put back in a
 * reply's place), return an image, answer
 * several calls in one message, reuse an earlier call's id with other arguments, flush and lose their stubbed ids
 * (another state), on Anthropic Messages (with the
 * breakpoint moving to the newest message) and OpenAI Responses (a response's items one unit).
 */
import { ToolResultOffload } from "@baton/context"
import { GatewayMemo } from "@baton/orchestration"
import { describe, expect, it } from "@effect/vitest"
import * as GatewayOffload from "../src/GatewayOffload.js"
import * as GatewayResponsesOffload from "../src/GatewayResponsesOffload.js"

/** A seeded generator of numbers in [0, 1) (mulberry32). */
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

const count = (text: string) => Math.ceil(text.length / 4)
const output = (n: number, size: number) => `${n}: ${"line of a command's output\n".repeat(size)}`

/** One round of a wire: the model's calls (`reads` of them `thread_read`) and the results (`image`: one is an image). */
interface Wire {
  readonly name: string
  readonly shape: GatewayOffload.Shape
  readonly historyKey: string
  readonly start: () => unknown
  readonly round: (ids: ReadonlyArray<number>, reads: number, image: boolean, size: number, together: boolean) => Array<unknown>
  readonly text: (n: number) => Array<unknown>
  readonly body: (history: ReadonlyArray<unknown>) => Record<string, unknown>
}

const readArgs = (n: number) => ({ refs: n % 3 === 0 ? "bad]ref" : `tool:toolu_${n}` })

const anthropic: Wire = {
  name: "Anthropic Messages",
  shape: GatewayOffload.anthropicShape,
  historyKey: "messages",
  start: () => ({ role: "user", content: [{ type: "text", text: "Work through the files." }] }),
  round: (ids, reads, image, size, together) => {
    const uses = ids.map((n, k) => (k < reads ?
      { type: "tool_use", id: `toolu_${n}`, name: "thread_read", input: readArgs(n) } :
      { type: "tool_use", id: `toolu_${n}`, name: "Bash", input: { command: `cat f${n}` } }))
    const results = ids.map((n, k) => ({
      type: "tool_result",
      tool_use_id: `toolu_${n}`,
      content: image && k === 0 ? [{ type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } }] : output(n, size)
    }))
    return together
      ? [{ role: "assistant", content: [{ type: "text", text: "next" }, ...uses] }, { role: "user", content: results }]
      : [{ role: "assistant", content: uses }, ...results.map((r) => ({ role: "user", content: [r] }))]
  },
  text: (n) => [{ role: "assistant", content: [{ type: "text", text: `thought ${n}` }] }, { role: "user", content: [{ type: "text", text: `go on ${n}` }] }],
  body: (history) => {
    const messages = structuredClone(history) as Array<{ content: Array<Record<string, unknown>> }>
    // Claude Code's breakpoint on the newest message's last block: the previous newest is another object now.
    const last = messages.at(-1)!
    last.content = last.content.map((b, i) => (i === last.content.length - 1 ? { ...b, cache_control: { type: "ephemeral" } } : b))
    return { model: "claude-x", max_tokens: 4096, system: [{ type: "text", text: "You are a coding agent." }], tools: [{ name: "Bash", input_schema: { type: "object" } }], messages }
  }
}

const responses: Wire = {
  name: "OpenAI Responses",
  shape: GatewayResponsesOffload.shape,
  historyKey: "input",
  start: () => ({ type: "message", role: "user", content: [{ type: "input_text", text: "Work through the files." }] }),
  round: (ids, reads, image, size) => [
    ...ids.map((n, k) => ({
      type: "function_call",
      id: `fc_${n}`,
      call_id: `call_${n}`,
      name: k < reads ? "thread_read" : "exec_command",
      arguments: JSON.stringify(k < reads ? { refs: readArgs(n).refs.replace("toolu", "call") } : { cmd: `cat f${n}` })
    })),
    ...ids.map((n, k) => ({
      type: "function_call_output",
      call_id: `call_${n}`,
      output: image && k === 0 ? [{ type: "input_image", image_url: "data:image/png;base64,AAAA" }] : output(n, size)
    }))
  ],
  text: (n) => [
    { type: "message", role: "assistant", content: [{ type: "output_text", text: `thought ${n}` }] },
    { type: "message", role: "user", content: [{ type: "input_text", text: `go on ${n}` }] }
  ],
  body: (history) => ({ model: "gpt-x", instructions: "You are a coding agent.", tools: [{ type: "function", name: "exec_command" }], input: structuredClone(history), stream: true })
}

describe("GatewayOffload.plan incremental", () => {
  for (const wire of [anthropic, responses]) {
    it(`${wire.name}: the same output as the plan from the start, over random growing and rewound conversations`, () => {
      let reusedRequests = 0
      let flushes = 0
      let expanded = 0
      for (let seed = 1; seed <= 6; seed++) {
        const next = random(seed)
        const pick = (n: number) => Math.floor(next() * n)
        const interner = GatewayMemo.makeInterner()
        let history: Array<unknown> = [wire.start()]
        let offloaded: ReadonlyArray<string> = []
        let expansions: Record<string, ReadonlyArray<unknown>> | undefined
        let n = 0
        for (let request = 0; request < 60; request++) {
          const action = next()
          if (action < 0.12 && history.length > 2) {
            // Rewound: the agent's context cut back to an earlier point.
            history = history.slice(0, 1 + pick(history.length - 1))
          } else if (action < 0.2 && history.length > 2) {
            // An earlier message edited (another object, another value, at the same place).
            const at = 1 + pick(history.length - 1)
            history = history.map((m, i) => (i === at ? { ...(m as object), edited: request } : m))
          } else if (action < 0.25) {
            history = [...history, ...wire.text(n++)]
          } else if (action < 0.3 && n > 0) {
            // A round that reuses an earlier call's id with other arguments (the later call is the one the id names now).
            const old = pick(n)
            const round = JSON.stringify(wire.round([old], 0, false, 20 + pick(50), next() < 0.5)).replaceAll(`cat f${old}`, `cat --number f${old}`)
            history = [...history, ...(JSON.parse(round) as Array<unknown>)]
          } else {
            for (let r = 1 + pick(2); r > 0; r--) {
              const ids = Array.from({ length: 1 + pick(3) }, () => n++)
              history = [...history, ...wire.round(ids, next() < 0.2 ? 1 + pick(ids.length) : 0, next() < 0.08, 20 + pick(200), next() < 0.5)]
            }
          }
          // Sometimes the conversation's stubbed ids are not the last plan's (another process's state, a lost row).
          const state = next()
          if (state < 0.05) offloaded = []
          else if (state < 0.1) offloaded = offloaded.filter(() => next() < 0.5)
          // Sometimes a hidden thread_read round recorded after a reply of the history (its messages go out in the
          // reply's place: entries that are not interned), kept as one object over several requests.
          const replies = history.filter((m) => wire.shape.model(m as Record<string, unknown>))
          if (next() < 0.1 && replies.length > 1) {
            const reply = replies[pick(replies.length - 1)]
            expansions = { [JSON.stringify(reply)]: [...wire.round([n++], 1, false, 10, true), reply] }
          } else if (next() < 0.05) expansions = undefined
          const text = JSON.stringify(wire.body(history))
          const interned = JSON.parse(text) as Record<string, unknown>
          interner.intern("session", interned, wire.historyKey)
          const since = 2_000 + pick(600_000)
          const input = (body: Record<string, unknown>) => ({
            body,
            offloaded,
            settings: ToolResultOffload.defaults,
            // Small enough that the conversation flushes as it grows.
            windowTokens: 30_000,
            prices: { input: 3, cacheRead: 0.3, cacheWrite: 3.75 },
            requestsSoFar: request,
            msSinceLastRequest: since,
            count,
            expansions,
            fingerprint: (m: unknown) => JSON.stringify(m)
          })
          const before = GatewayMemo.json(interned)
          if (GatewayOffload.reusable(wire.shape, interned) > 0) reusedRequests++
          const incremental = GatewayOffload.plan(wire.shape, input(interned))
          const full = GatewayOffload.plan(wire.shape, input(interned), false)
          const parsed = GatewayOffload.plan(wire.shape, input(JSON.parse(text) as Record<string, unknown>), false)
          expect(GatewayMemo.json(interned)).toBe(before)
          for (const other of [full, parsed]) {
            expect(JSON.stringify(incremental.body)).toBe(JSON.stringify(other.body))
            expect({ changed: incremental.changed, offloaded: incremental.offloaded, flush: incremental.flush }).toEqual({
              changed: other.changed,
              offloaded: other.offloaded,
              flush: other.flush
            })
          }
          expect(GatewayMemo.bodyJson(incremental.body)).toBe(JSON.stringify(parsed.body))
          if (incremental.flush !== null) flushes++
          if (wire.shape.history(incremental.body)!.length > wire.shape.history(interned)!.length) expanded++
          offloaded = incremental.offloaded
        }
      }
      // The snapshots were used (most requests extend the previous one), the conversations flushed, rounds went back in.
      expect(reusedRequests).toBeGreaterThan(150)
      expect(flushes).toBeGreaterThan(5)
      expect(expanded).toBeGreaterThan(10)
    })
  }
})
