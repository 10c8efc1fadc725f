/** The SWE-agent decisions of `SweAgentImporter`'s docblock, each on the smallest input that shows it. */
import { describe, expect, it } from "@effect/vitest"
import { rows, threadOf } from "./helpers.js"

describe("SweAgentImporter", () => {
  it("skips system and demo messages; a parsed command pairs with the next user message; a last one dangles", () => {
    const thread = threadOf("dir/task-1.traj", JSON.stringify({
      environment: "swe_main",
      trajectory: [],
      history: [
        { role: "system", content: "SETTING: …", agent: "primary" },
        { role: "user", content: "Here is a demonstration …", agent: "primary", is_demo: true },
        { role: "assistant", content: "demo reply\n```\nls\n```", thought: "demo reply", action: "ls\n", is_demo: true },
        { role: "user", content: "ISSUE: it crashes", agent: "primary" },
        { role: "assistant", content: "Let me look.\n\n```\nls\n```", thought: "Let me look.\n\n", action: "ls\n" },
        { role: "user", content: "a.py\nb.py" },
        { role: "assistant", content: "Submit.\n\n```\nsubmit\n```", thought: "Submit.\n\n", action: "submit\n" }
      ],
      info: {}
    }, null, 2))
    expect(thread.threadKey).toBe("task-1")
    expect(thread.turns.map((turn) => [turn.userText, turn.sourceLine])).toEqual([["ISSUE: it crashes", 1]])
    expect(rows(thread.turns[0]!.items)).toEqual([
      ["assistant_message", "Let me look.", null, null, "swe-agent:history:4", false, null],
      ["tool_call", "{\"command\":\"ls\\n\"}", "swe-agent:history:4", "bash", "swe-agent:history:4", false, "answered"],
      ["tool_result", "a.py\nb.py", "swe-agent:history:4", "bash", null, false, null],
      ["assistant_message", "Submit.", null, null, "swe-agent:history:6", false, null],
      ["tool_call", "{\"command\":\"submit\\n\"}", "swe-agent:history:6", "bash", "swe-agent:history:6", false, "dangling"]
    ])
  })

  it("native tool calls pair with tool messages; a reused call id gets a suffix per use", () => {
    const call = (id: string, command: string) => ({
      id,
      type: "function",
      function: { name: "bash", arguments: JSON.stringify({ command }) }
    })
    const thread = threadOf("t.traj", JSON.stringify({
      history: [
        { role: "system", content: "SETTING", message_type: "system_prompt" },
        { role: "user", content: "ISSUE", message_type: "observation" },
        { role: "assistant", content: "Run it.", action: "python r.py", tool_calls: [call("call_x", "python r.py")] },
        { role: "tool", content: "344", tool_call_ids: ["call_x"], message_type: "observation" },
        { role: "assistant", content: "Again.", action: "python r.py", tool_calls: [call("call_x", "python r.py")] },
        { role: "tool", content: "345", tool_call_ids: ["call_x"], message_type: "observation" }
      ],
      info: {}
    }))
    expect(rows(thread.turns[0]!.items)).toEqual([
      ["assistant_message", "Run it.", null, null, "swe-agent:history:2", false, null],
      ["tool_call", "{\"command\":\"python r.py\"}", "call_x", "bash", "swe-agent:history:2", false, "answered"],
      ["tool_result", "344", "call_x", "bash", null, false, null],
      ["assistant_message", "Again.", null, null, "swe-agent:history:4", false, null],
      ["tool_call", "{\"command\":\"python r.py\"}", "call_x#2", "bash", "swe-agent:history:4", false, "answered"],
      ["tool_result", "345", "call_x#2", "bash", null, false, null]
    ])
  })
})
