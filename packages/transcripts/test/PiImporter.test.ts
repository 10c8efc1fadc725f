/** The pi decisions of `PiImporter`'s docblock, each on the smallest input that shows it. */
import { describe, expect, it } from "@effect/vitest"
import { jsonl, rows, threadOf } from "./helpers.js"

const message = (message: object) => ({ type: "message", timestamp: "2025-12-08T23:22:54.411Z", message })
const userMessage = (text: string) => message({ role: "user", content: [{ type: "text", text }] })

describe("PiImporter", () => {
  it("maps assistant blocks in order with a synthesized message id, pairs results, keeps aborted calls dangling", () => {
    const thread = threadOf("p.jsonl", jsonl(
      { type: "session", id: "sess-pi", cwd: "/repo", provider: "anthropic", modelId: "m", thinkingLevel: "off" },
      { type: "thinking_level_change", thinkingLevel: "high" },
      userMessage("read a.ts"),
      message({
        role: "assistant",
        content: [
          { type: "thinking", thinking: "Read it.", thinkingSignature: "sig" },
          { type: "text", text: "Reading." },
          { type: "toolCall", id: "c1", name: "read", arguments: { path: "a.ts" } }
        ],
        stopReason: "toolUse"
      }),
      message({ role: "toolResult", toolCallId: "c1", toolName: "read", content: [{ type: "text", text: "x = 1" }], isError: false }),
      { type: "model_change", provider: "openai", modelId: "gpt" },
      message({
        role: "assistant",
        content: [{ type: "toolCall", id: "c2", name: "edit", arguments: { path: "a.ts" }, partialJson: "{\"path\": \"a.ts\"" }],
        stopReason: "aborted",
        errorMessage: "Request was aborted."
      }),
      userMessage("stop")
    ))
    expect(thread.threadKey).toBe("sess-pi")
    expect(thread.turns.map((turn) => [turn.userText, turn.sourceLine])).toEqual([["read a.ts", 3], ["stop", 8]])
    expect(rows(thread.turns[0]!.items)).toEqual([
      ["reasoning", "Read it.", null, null, "pi:L4", false, null],
      ["assistant_message", "Reading.", null, null, "pi:L4", false, null],
      ["tool_call", "{\"path\":\"a.ts\"}", "c1", "read", "pi:L4", false, "answered"],
      ["tool_result", "x = 1", "c1", "read", null, false, null],
      ["tool_call", "{\"path\":\"a.ts\"}", "c2", "edit", "pi:L7", false, "dangling"],
      ["error", "Request was aborted.", null, null, "pi:L7", true, null]
    ])
  })

  it("a user's bash execution is a tool call answered at once; a compaction is a summary item", () => {
    const thread = threadOf("p.jsonl", jsonl(
      { type: "session", id: "s" },
      userMessage("hello"),
      { type: "compaction", summary: "# Context Checkpoint", firstKeptEntryIndex: 1, tokensBefore: 175004 },
      message({ role: "bashExecution", command: "ls", output: "a\nb\n", exitCode: 0, cancelled: false, truncated: false }),
      message({ role: "bashExecution", command: "false", output: "", exitCode: 1, cancelled: false, truncated: false })
    ))
    expect(rows(thread.turns[0]!.items)).toEqual([
      ["summary", "# Context Checkpoint", null, null, null, false, null],
      ["tool_call", "{\"command\":\"ls\"}", "pi:bash:L4", "bash", "pi:bash:L4", false, "answered"],
      ["tool_result", "a\nb\n", "pi:bash:L4", "bash", null, false, null],
      ["tool_call", "{\"command\":\"false\"}", "pi:bash:L5", "bash", "pi:bash:L5", false, "answered"],
      ["tool_result", "", "pi:bash:L5", "bash", null, true, null]
    ])
  })

  it("a file without a session entry is keyed by its stem", () => {
    expect(threadOf("dir/old-session.jsonl", jsonl(userMessage("hi"))).threadKey).toBe("old-session")
  })
})
