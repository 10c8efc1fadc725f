/** The Claude Code decisions of `ClaudeCodeImporter`'s docblock, each on the smallest input that shows it. */
import { describe, expect, it } from "@effect/vitest"
import { jsonl, rows, threadOf } from "./helpers.js"

const base = { sessionId: "sess-1", isSidechain: false }
const user = (content: unknown, extra: object = {}) => ({ ...base, ...extra, type: "user", message: { role: "user", content } })
const assistant = (id: string, block: unknown, extra: object = {}) => ({
  ...base,
  ...extra,
  type: "assistant",
  message: { id, role: "assistant", content: [block] }
})

describe("ClaudeCodeImporter", () => {
  it("groups one record per block by message.id and pairs tool results by tool_use_id", () => {
    const thread = threadOf("s.jsonl", jsonl(
      { type: "file-history-snapshot", messageId: "x", snapshot: {} },
      user("Fix the bug\nin parser.ts"),
      { ...base, type: "progress", data: { type: "hook_progress" } },
      assistant("msg_1", { type: "thinking", thinking: "Look first.", signature: "[REDACTED_SIGNATURE]" }),
      assistant("msg_1", { type: "text", text: "Reading." }),
      assistant("msg_1", { type: "tool_use", id: "t1", name: "Read", input: { file_path: "a.ts" } }),
      assistant("msg_1", { type: "tool_use", id: "t2", name: "Bash", input: { command: "false" } }),
      user([{ type: "tool_result", tool_use_id: "t1", content: [{ type: "text", text: "line 1" }, { type: "text", text: "line 2" }] }]),
      user([{ type: "tool_result", tool_use_id: "t2", content: "Exit code 1", is_error: true }]),
      assistant("msg_2", { type: "text", text: "Done." }),
      { ...base, type: "system", subtype: "turn_duration", durationMs: 5 }
    ))
    expect(thread.threadKey).toBe("sess-1")
    expect(thread.title).toBe("Fix the bug")
    expect(thread.turns).toHaveLength(1)
    expect(thread.turns[0]!.userText).toBe("Fix the bug\nin parser.ts")
    expect(thread.turns[0]!.sourceLine).toBe(2)
    expect(rows(thread.turns[0]!.items)).toEqual([
      ["reasoning", "Look first.", null, null, "msg_1", false, null],
      ["assistant_message", "Reading.", null, null, "msg_1", false, null],
      ["tool_call", "{\"file_path\":\"a.ts\"}", "t1", "Read", "msg_1", false, "answered"],
      ["tool_call", "{\"command\":\"false\"}", "t2", "Bash", "msg_1", false, "answered"],
      ["tool_result", "line 1\nline 2", "t1", "Read", null, false, null],
      ["tool_result", "Exit code 1", "t2", "Bash", null, true, null],
      ["assistant_message", "Done.", null, null, "msg_2", false, null]
    ])
  })

  it("a compact boundary's summary record is a summary item, not a turn; command echoes and isMeta are skipped", () => {
    const thread = threadOf("s.jsonl", jsonl(
      user("first"),
      assistant("m1", { type: "text", text: "ok" }),
      { ...base, type: "system", subtype: "compact_boundary", compactMetadata: { trigger: "manual", preTokens: 100 } },
      user("This session is being continued…", { isCompactSummary: true, isVisibleInTranscriptOnly: true }),
      user("<local-command-caveat>Caveat: …</local-command-caveat>", { isMeta: true }),
      user("<command-name>/compact</command-name>\n<command-args>and go on</command-args>"),
      user("<local-command-stdout>Compacted</local-command-stdout>"),
      user([{ type: "text", text: "Base directory for this skill: …" }], { isMeta: true }),
      user("<task-notification>\n<status>completed</status>\n</task-notification>"),
      assistant("m2", { type: "text", text: "noted" })
    ))
    expect(thread.turns.map((turn) => [turn.userText, turn.sourceLine])).toEqual([
      ["first", 1],
      ["<task-notification>\n<status>completed</status>\n</task-notification>", 9]
    ])
    expect(rows(thread.turns[0]!.items).map((row) => row.slice(0, 2))).toEqual([
      ["assistant_message", "ok"],
      ["summary", "This session is being continued…"]
    ])
  })

  it("an interrupted call stays dangling and the interruption marker is an error item", () => {
    const thread = threadOf("s.jsonl", jsonl(
      user("run it"),
      assistant("m1", { type: "tool_use", id: "t1", name: "Bash", input: { command: "sleep 100" } }),
      user([{ type: "text", text: "[Request interrupted by user for tool use]" }]),
      user("never mind")
    ))
    expect(thread.turns.map((turn) => turn.userText)).toEqual(["run it", "never mind"])
    expect(rows(thread.turns[0]!.items)).toEqual([
      ["tool_call", "{\"command\":\"sleep 100\"}", "t1", "Bash", "m1", false, "dangling"],
      ["error", "[Request interrupted by user for tool use]", null, null, null, true, null]
    ])
  })

  it("a tool result without a call is kept unpaired; API error messages are error items", () => {
    const thread = threadOf("s.jsonl", jsonl(
      user("go"),
      user([{ type: "tool_result", tool_use_id: "ghost", content: "late output" }]),
      assistant("m1", { type: "text", text: "API Error: overloaded" }, { isApiErrorMessage: true })
    ))
    expect(rows(thread.turns[0]!.items)).toEqual([
      ["tool_result", "late output", "ghost", null, null, false, null],
      ["error", "API Error: overloaded", null, null, "m1", true, null]
    ])
  })

  it("sidechain records are skipped in a main session", () => {
    const thread = threadOf("s.jsonl", jsonl(
      user("main prompt"),
      user("subagent prompt", { isSidechain: true }),
      assistant("side", { type: "text", text: "subagent answer" }, { isSidechain: true }),
      assistant("m1", { type: "text", text: "main answer" })
    ))
    expect(thread.turns.map((turn) => turn.userText)).toEqual(["main prompt"])
    expect(rows(thread.turns[0]!.items).map((row) => row[1])).toEqual(["main answer"])
  })

  it("a subagent file is its own thread, keyed by session and agent", () => {
    const side = { isSidechain: true, agentId: "a2898e3" }
    const thread = threadOf("agent-a2898e3.jsonl", jsonl(
      user("Explore the renderer", side),
      assistant("m1", { type: "text", text: "Exploring." }, side)
    ))
    expect(thread.threadKey).toBe("sess-1/agent-a2898e3")
    expect(thread.turns.map((turn) => turn.userText)).toEqual(["Explore the renderer"])
  })

  it("assistant text before any prompt is preamble", () => {
    const thread = threadOf("s.jsonl", jsonl(assistant("m0", { type: "text", text: "Welcome back." }), user("hi")))
    expect(rows(thread.preamble)).toEqual([["assistant_message", "Welcome back.", null, null, "m0", false, null]])
    expect(thread.turns).toHaveLength(1)
  })
})
