/**
 * Which received message a conversation's hidden `thread_read` rounds (`expansions`) go out in place of, since they
 * are keyed by the message's content print (`GatewayThreads.expansionKeyOf`, found by review r16): two answers that
 * differ only in their thinking have one content print, and expansions recorded before that rule are keyed by the
 * message's fingerprint. `GatewayOffload.plan` on hand-made bodies, with the keys the gateway passes.
 */
import { ToolResultOffload } from "@baton/context"
import { GatewayThreads } from "@baton/orchestration"
import { describe, expect, it } from "@effect/vitest"
import * as GatewayOffload from "../src/GatewayOffload.js"

const wire = GatewayThreads.anthropicMessages
const count = (text: string) => Math.ceil(text.length / 4)
const user = (text: string) => ({ role: "user", content: [{ type: "text", text }] })
const thinking = (text: string, signature: string) => ({ type: "thinking", thinking: text, signature })

/** The hidden round (the gateway's read and its answer) and the continuation's answer as the upstream sent it. */
const round = (answer: Record<string, unknown>) => [
  { role: "assistant", content: [{ type: "tool_use", id: "toolu_read9", name: "thread_read", input: { refs: "tool:toolu_1" } }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_read9", content: "[tool_result Bash toolu_1 #3]\n1 2 3" }] },
  answer
]

const plan = (messages: ReadonlyArray<unknown>, expansions: Record<string, ReadonlyArray<unknown>>) =>
  GatewayOffload.plan(GatewayOffload.anthropic.shape, {
    body: { model: "claude-x", system: [{ type: "text", text: "s" }], tools: [{ name: "Bash", input_schema: { type: "object" } }], messages },
    offloaded: [],
    settings: ToolResultOffload.defaults,
    windowTokens: 1_000_000,
    prices: { input: 3, cacheRead: 0.3, cacheWrite: 3.75 },
    requestsSoFar: 3,
    msSinceLastRequest: 1_000,
    count,
    expansions,
    fingerprint: (m) => GatewayThreads.expansionKeyOf(wire, m),
    fingerprintOf: (m) => GatewayThreads.fingerprintOf(wire, m)
  }).body.messages as ReadonlyArray<unknown>

describe("GatewayOffload expansions' keys", () => {
  it("two answers that differ only in their thinking: the rounds of one never go out in place of the other", () => {
    // The first answer came after a hidden round; the second, the same words with other thinking, did not. Claude
    // Code re-sends both without their thinking once a new prompt follows.
    const first = { role: "assistant", content: [thinking("The first grep was module 1.", "c2ln"), { type: "text", text: "Done." }] }
    const expansions = { [GatewayThreads.expansionKeyOf(wire, first)]: round(first) }
    const done = { role: "assistant", content: [{ type: "text", text: "Done." }] }
    const messages = [user("q1"), done, user("q2"), done, user("q3")]
    const out = plan(messages, expansions)
    // The second answer goes out as the agent sent it, and the hidden read goes out at most once.
    expect(out.slice(-3)).toEqual([user("q2"), done, user("q3")])
    const reads = out.flatMap((m) => (m as { content: Array<Record<string, unknown>> }).content).filter((b) => b.id === "toolu_read9")
    expect(reads.length).toBeLessThanOrEqual(1)
  })

  it("rounds recorded before content prints (keyed by the fingerprint of an answer with thinking) are still found", () => {
    const answer = { role: "assistant", content: [thinking("I have it.", "c2ln"), { type: "text", text: "It printed 1 2 3." }] }
    const expansions = { [GatewayThreads.fingerprintOf(wire, answer)]: round(answer) }
    const out = plan([user("q1"), answer, user("q2")], expansions)
    expect(out).toEqual([user("q1"), ...round(answer), user("q2")])
  })

  it("an answer re-sent without its thinking still gets its rounds (one answer with those words)", () => {
    const answer = { role: "assistant", content: [thinking("I have it.", "c2ln"), { type: "text", text: "It printed 1 2 3." }] }
    const expansions = { [GatewayThreads.expansionKeyOf(wire, answer)]: round(answer) }
    const rerendered = { role: "assistant", content: [{ type: "text", text: "It printed 1 2 3." }] }
    expect(plan([user("q1"), rerendered, user("q2")], expansions)).toEqual([user("q1"), ...round(answer), user("q2")])
  })
})
