/**
 * The gateway's OpenAI Responses wire (issue 14, Codex): an input item's fingerprint ignores what Codex changes when it
 * sends an item back or rebuilds its history (item ids, status, a text part's annotations; a string content), and
 * keeps what the model reads; the items of each input item; the conversation key carries the wire's name.
 */
import { GatewayResponsesWire, GatewayThreads } from "@baton/orchestration"
import { describe, expect, it } from "@effect/vitest"

const wire = GatewayResponsesWire.openAiResponses
const print = (m: unknown) => GatewayThreads.fingerprintOf(wire, m)

describe("GatewayResponsesWire", () => {
  it("fingerprints an item as the model reads it: ids, status and annotations aside; text, calls and outputs kept", () => {
    // A reply's output item, and the same item as Codex sends it back in its next request.
    const answered = { type: "message", id: "msg_3", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Done.", annotations: [] }] }
    const echoed = { type: "message", role: "assistant", content: [{ type: "output_text", text: "Done." }] }
    expect(print(echoed)).toBe(print(answered))
    // Codex gives its own messages new ids when it rebuilds its history (after a compaction): the same message.
    expect(print({ type: "message", id: "msg_a", role: "user", content: [{ type: "input_text", text: "hi" }] }))
      .toBe(print({ type: "message", id: "msg_b", role: "user", content: "hi" }))
    const call = { type: "function_call", id: "fc_1", call_id: "call_1", name: "exec_command", arguments: "{\"cmd\":\"ls\"}", status: "completed" }
    expect(print({ ...call, id: "fc_other", status: undefined })).toBe(print(call))
    // What the model reads changes the fingerprint.
    expect(print({ ...call, arguments: "{\"cmd\":\"ls -a\"}" })).not.toBe(print(call))
    expect(print({ type: "function_call_output", call_id: "call_1", output: "a" }))
      .not.toBe(print({ type: "function_call_output", call_id: "call_1", output: "b" }))
    expect(print({ ...echoed, role: "user" })).not.toBe(print(echoed))
    // The incremental cache gives the same fingerprints with this wire.
    const cache = GatewayThreads.makePrintCache()
    const items = [echoed, call, { type: "function_call_output", call_id: "call_1", output: "a\nb" }]
    expect(cache.printsOf("k", items, wire).prints).toEqual(items.map(print))
    expect(cache.printsOf("k", [...JSON.parse(JSON.stringify(items)), echoed], wire)).toEqual({ prints: [...items, echoed].map(print), content: null, hashed: 1 })
  })

  it("gives each input item its items: messages by part, calls and outputs paired by call id, reasoning by summary, the rest as [type]", () => {
    const names = wire.toolNamesOf([{ type: "function_call", call_id: "call_1", name: "exec_command", arguments: "{}" }])
    const items = (m: unknown) => wire.itemsOf(m, "id", names).map((i) => [i.kind, i.text, i.toolCallId, i.toolName])
    expect(items({ type: "message", role: "developer", content: [{ type: "input_text", text: "rules" }, { type: "input_image", image_url: "data:" }] }))
      .toEqual([["user_message", "rules", null, null], ["user_message", "[input_image]", null, null]])
    expect(items({ type: "function_call", call_id: "call_1", name: "exec_command", arguments: "{\"cmd\":\"ls\"}" })).toEqual([["tool_call", "{\"cmd\":\"ls\"}", "call_1", "exec_command"]])
    expect(items({ type: "function_call_output", call_id: "call_1", output: "a\nb" })).toEqual([["tool_result", "a\nb", "call_1", "exec_command"]])
    expect(items({ type: "function_call_output", call_id: "call_1", output: [{ type: "input_text", text: "x" }, { type: "input_image" }] }))
      .toEqual([["tool_result", "x\n[input_image]", "call_1", "exec_command"]])
    expect(items({ type: "reasoning", summary: [{ type: "summary_text", text: "thinking" }], encrypted_content: "E" })).toEqual([["reasoning", "thinking", null, null]])
    expect(items({ type: "reasoning", summary: [], encrypted_content: "E" })).toEqual([])
    expect(items({ type: "compaction_trigger" })).toEqual([["user_message", "[compaction_trigger]", null, null]])
    expect(items({ type: "compaction", encrypted_content: "E" })).toEqual([["assistant_message", "[compaction]", null, null]])
    // Codex's message between agents (multi_agent_v2): the agent's input, its text parts as text.
    expect(items({ type: "agent_message", content: [{ type: "input_text", text: "Message Type: NEW_TASK\nPayload:\n" }, { type: "encrypted_content", encrypted_content: "E" }] }))
      .toEqual([["user_message", "Message Type: NEW_TASK\nPayload:\n", null, null], ["user_message", "[encrypted_content]", null, null]])
    expect(wire.promptOf([{ type: "message", role: "user", content: [{ type: "input_text", text: "do it" }] }, { type: "function_call_output", call_id: "c", output: "" }])).toBe("do it")
  })

  it("keys a conversation by the agent's session with the wire's name, else by its start", () => {
    const start = [{ type: "message", role: "developer", content: "rules" }, { type: "message", role: "user", content: "hi" }]
    expect(GatewayThreads.conversationKey("thread-1", undefined, start, wire)).toMatch(/^openai-responses:session:thread-1:[0-9a-f]{32}$/)
    const a = GatewayThreads.conversationKey(null, undefined, start, wire)
    expect(a).toMatch(/^openai-responses:start:[0-9a-f]{32}$/)
    // The same start with other ids is the same conversation.
    expect(GatewayThreads.conversationKey(null, undefined, start.map((m, i) => ({ ...m, id: `msg_${i}` })), wire)).toBe(a)
    // The Anthropic wire's keys are unchanged (no prefix).
    expect(GatewayThreads.conversationKey("s", undefined, [{ role: "user", content: "hi" }])).toMatch(/^session:s:/)
  })
})
