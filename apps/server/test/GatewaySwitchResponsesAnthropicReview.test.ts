/**
 * Review r21's flagged cases of the switch from `/v1/responses` to an `anthropic-messages` instance
 * (`GatewaySwitchResponsesAnthropic`, docs/gateway.md "From `/v1/responses` to an `anthropic-messages` instance"):
 *
 * - Codex's `local_shell_call` (its built-in shell, no tool Anthropic is given) was left out of the conversion: its
 *   `local_shell_call_output` was dropped too (the model never saw what the shell printed), and an output Codex sends
 *   as a `function_call_output` for it became a `tool_result` without its `tool_use` (Anthropic refuses the request).
 *   Now the call is the assistant's text, its output a text block, and every `tool_result` answers a `tool_use` of the
 *   message before it, the results first in their message.
 * - One prompt-cache breakpoint on the last block: Anthropic looks for a cached prefix only 20 blocks before a
 *   breakpoint, so after a round of more than 20 blocks (many parallel calls and their results) the previous request's
 *   cached prefix was not found and was written again. Now a second breakpoint goes where the previous request ended.
 *   (The same fit serves `/v1/chat/completions` to Anthropic: `GatewaySwitchAnthropic.withBreakpoint`.)
 */
import { TokenCounter } from "@baton/context"
import { describe, expect, it } from "@effect/vitest"
import * as GatewaySwitchAnthropic from "../src/GatewaySwitchAnthropic.js"
import * as GatewaySwitchResponsesAnthropic from "../src/GatewaySwitchResponsesAnthropic.js"

type Json = Record<string, unknown>
const counter = TokenCounter.make()

const developer = { type: "message", role: "developer", content: [{ type: "input_text", text: "You are Codex." }] }
const user = (text: string) => ({ type: "message", role: "user", content: [{ type: "input_text", text }] })
const shell = (id: string) => ({ type: "local_shell_call", id: `lsh_${id}`, call_id: id, status: "completed", action: { type: "exec", command: ["ls", "-a"], env: {} } })
const call = (id: string) => ({ type: "function_call", id: `fc_${id}`, call_id: id, name: "exec_command", arguments: JSON.stringify({ cmd: `echo ${id}` }) })
const output = (id: string, text: string, type = "function_call_output") => ({ type, call_id: id, output: text })

/**
 * Anthropic's pairing rules on converted messages: every `tool_result` answers a `tool_use` of the assistant message
 * right before it, and a user message's `tool_result` blocks come before its other blocks.
 */
const checkPairs = (messages: ReadonlyArray<{ readonly role: string; readonly content: ReadonlyArray<Json> }>) =>
  messages.forEach((m, i) => {
    const results = m.content.filter((b) => b.type === "tool_result")
    if (results.length === 0) return
    const uses = new Set((messages[i - 1]?.role === "assistant" ? messages[i - 1]!.content : []).filter((b) => b.type === "tool_use").map((b) => b.id))
    for (const r of results) expect(uses.has(r.tool_use_id), `tool_result ${String(r.tool_use_id)} without its tool_use`).toBe(true)
    expect(m.content.slice(0, results.length).every((b) => b.type === "tool_result")).toBe(true)
  })

const textOf = (messages: ReadonlyArray<{ readonly content: ReadonlyArray<Json> }>) => JSON.stringify(messages)

describe("GatewaySwitchResponsesAnthropic, review r21", () => {
  it("a local_shell_call and its local_shell_call_output: the call as text, its output kept as text, no tool_result without its tool_use", () => {
    const converted = GatewaySwitchResponsesAnthropic.anthropicOfResponses({
      input: [developer, user("list the files"), shell("call_ls"), output("call_ls", "a.txt\nb.txt", "local_shell_call_output"), user("and now?")]
    })
    const messages = converted.messages as ReadonlyArray<{ role: string; content: ReadonlyArray<Json> }>
    checkPairs(messages)
    expect(messages.map((m) => m.role)).toEqual(["user", "assistant", "user"])
    expect(messages[1]!.content).toEqual([{ type: "text", text: "[local_shell_call call_ls: {\"type\":\"exec\",\"command\":[\"ls\",\"-a\"],\"env\":{}}]" }])
    expect(messages[2]!.content).toEqual([{ type: "text", text: "[local_shell_call_output call_ls]\na.txt\nb.txt" }, { type: "text", text: "and now?" }])
  })

  it("a local_shell_call answered by a function_call_output (Codex's form), beside a function call of the same answer: one tool_result, for the tool_use, first", () => {
    const converted = GatewaySwitchResponsesAnthropic.anthropicOfResponses({
      input: [developer, user("go"), call("call_f"), shell("call_ls"), output("call_ls", "a.txt"), output("call_f", "f-out"), user("next")]
    })
    const messages = converted.messages as ReadonlyArray<{ role: string; content: ReadonlyArray<Json> }>
    checkPairs(messages)
    expect(messages[2]!.content.map((b) => b.type === "tool_result" ? `result ${String(b.tool_use_id)}` : String(b.text))).toEqual([
      "result call_f",
      "[function_call_output call_ls]\na.txt",
      "next"
    ])
    expect(textOf(messages)).toContain("a.txt")
  })

  /** A Codex input whose newest round is one answer of `n` parallel calls and their outputs, then the next prompt. */
  const round = (n: number) => {
    const ids = Array.from({ length: n }, (_, i) => `call_${i}`)
    return [
      developer,
      user("start"),
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "Ready." }] },
      user("run them all"),
      ...ids.map(call),
      ...ids.map((id) => output(id, `out ${id}`))
    ]
  }
  const fitted = (input: ReadonlyArray<unknown>) => {
    const result = GatewaySwitchResponsesAnthropic.toAnthropicFromResponses({
      body: { model: "claude-x", input },
      windowTokens: 200_000,
      maxOutputTokens: 4_096,
      count: (t) => counter.count(t),
      pointer: () => "unused"
    })
    if (result._tag !== "fits") throw new Error("did not fit")
    return (result.body as { messages: ReadonlyArray<{ role: string; content: ReadonlyArray<Json> }> }).messages
  }
  /** Where the breakpoints are: [message index, block index]. */
  const breakpoints = (messages: ReadonlyArray<{ content: ReadonlyArray<Json> | string }>) =>
    messages.flatMap((m, i) => (Array.isArray(m.content) ? m.content as ReadonlyArray<Json> : []).flatMap((b, j) => (b.cache_control === undefined ? [] : [[i, j]])))

  it("a round of more than 20 blocks gets a second breakpoint where the previous request ended; a short round one breakpoint", () => {
    // 12 calls and their 12 results: 24 blocks after the previous request's last message (the prompt).
    const long = fitted(round(12))
    checkPairs(long)
    expect(long.map((m) => m.role)).toEqual(["user", "assistant", "user", "assistant", "user"])
    expect(breakpoints(long)).toEqual([[2, 0], [4, 11]])
    // The previous request (the prompt last) had its breakpoint on that same block: its prefix is read, not written.
    const previous = fitted(round(12).slice(0, 4))
    expect(breakpoints(previous)).toEqual([[2, 0]])
    expect(JSON.stringify(previous)).toBe(JSON.stringify(long.slice(0, 3)))

    const short = fitted(round(3))
    expect(breakpoints(short)).toEqual([[4, 2]])
  })

  it("withBreakpoint: the second breakpoint from 20 blocks in the newest round, on the last message with blocks before the newest reply", () => {
    const blocks = (n: number, type: string) => Array.from({ length: n }, (_, i) => ({ type, text: `${type} ${i}` }))
    const at = (messages: ReadonlyArray<Json>) => breakpoints(GatewaySwitchAnthropic.withBreakpoint(messages) as ReadonlyArray<{ content: ReadonlyArray<Json> | string }>)
    const before = [{ role: "user", content: blocks(2, "text") }]
    expect(at([...before, { role: "assistant", content: blocks(10, "text") }, { role: "user", content: blocks(9, "text") }])).toEqual([[2, 8]])
    expect(at([...before, { role: "assistant", content: blocks(10, "text") }, { role: "user", content: blocks(10, "text") }])).toEqual([[0, 1], [2, 9]])
    // A string-content message is skipped back to one with blocks; no reply: one breakpoint.
    expect(at([...before, { role: "user", content: "plain" }, { role: "assistant", content: blocks(25, "text") }, { role: "user", content: blocks(1, "text") }])).toEqual([[0, 1], [3, 0]])
    expect(at([{ role: "user", content: blocks(30, "text") }])).toEqual([[0, 29]])
  })
})

/**
 * Review r23: Codex's `agent_message` (`multi_agent_v2`: a sub-agent's task, the parent's follow-up, a sub-agent's
 * final answer to its parent) was left out of the conversion like a reasoning item: on a switch to Anthropic the
 * parent never read its sub-agent's answer, a sub-agent never read its task's header, and a request whose newest
 * input is one ended with the assistant's message. Now it goes as the user's text (its encrypted part, which another
 * provider cannot read, left out).
 */
describe("GatewaySwitchResponsesAnthropic, review r23", () => {
  const agentMessage = (text: string, encrypted = false) => ({
    type: "agent_message",
    content: [{ type: "input_text", text }, ...(encrypted ? [{ type: "encrypted_content", encrypted_content: "ENC" }] : [])]
  })

  it("a sub-agent's final answer to its parent (an agent_message after the wait's output) is the user's text the parent's model reads", () => {
    const answer = "Message Type: FINAL_ANSWER\nFrom: /root/writer\nPayload:\nwrote sub.txt (12 lines)"
    const converted = GatewaySwitchResponsesAnthropic.anthropicOfResponses({
      input: [developer, user("use a sub-agent"), call("call_spawn"), output("call_spawn", "{\"agent_id\":\"t-s\"}"), { type: "message", role: "assistant", content: [{ type: "output_text", text: "Waiting." }] }, agentMessage(answer)]
    })
    const messages = converted.messages as ReadonlyArray<{ role: string; content: ReadonlyArray<Json> }>
    checkPairs(messages)
    expect(messages.at(-1)).toEqual({ role: "user", content: [{ type: "text", text: answer }] })
  })

  it("a sub-agent's task: its header text, the encrypted message left out; after its tool results, joined with them", () => {
    const task = agentMessage("Message Type: NEW_TASK\nFrom: /root\nTask name: writer", true)
    const first = GatewaySwitchResponsesAnthropic.anthropicOfResponses({ input: [developer, user("<environment_context/>"), task] })
    expect(first.messages).toEqual([{ role: "user", content: [{ type: "text", text: "<environment_context/>" }] }, { role: "user", content: [{ type: "text", text: "Message Type: NEW_TASK\nFrom: /root\nTask name: writer" }] }])
    expect(textOf(first.messages as ReadonlyArray<{ content: ReadonlyArray<Json> }>)).not.toContain("ENC")
    const later = GatewaySwitchResponsesAnthropic.anthropicOfResponses({ input: [developer, user("go"), call("call_f"), output("call_f", "f-out"), agentMessage("Message Type: FOLLOWUP_TASK\nmore")] })
    const messages = later.messages as ReadonlyArray<{ role: string; content: ReadonlyArray<Json> }>
    checkPairs(messages)
    expect(messages.map((m) => m.role)).toEqual(["user", "assistant", "user"])
    expect(messages[2]!.content.map((b) => b.type === "text" ? b.text : b.type)).toEqual(["tool_result", "Message Type: FOLLOWUP_TASK\nmore"])
  })
})
