/** The OpenHands decisions of `OpenHandsImporter`'s docblock, each on the smallest input that shows it. */
import { describe, expect, it } from "@effect/vitest"
import { jsonl, rows, threadsOf } from "./helpers.js"

const metadata = (callId: string, name: string, responseId: string, args: string) => ({
  function_name: name,
  tool_call_id: callId,
  total_calls_in_response: 1,
  model_response: {
    id: responseId,
    choices: [{ message: { content: "thinking aloud", tool_calls: [{ id: callId, function: { name, arguments: args } }] } }]
  }
})

const instance = (id: string, history: ReadonlyArray<object>) => ({ instance_id: id, instruction: "fix", history })

describe("OpenHandsImporter", () => {
  it("one thread per line: system and recall skipped, tool actions paired, think and finish are not tool calls", () => {
    const threads = threadsOf("o.jsonl", jsonl(
      instance("repo__1", [
        { id: 0, source: "agent", action: "system", args: { content: "You are OpenHands" } },
        { id: 1, source: "user", message: "Fix the crash", action: "message", args: { content: "Fix the crash" } },
        { id: 2, source: "user", action: "recall", args: { query: "Fix the crash" } },
        { id: 3, source: "environment", observation: "recall", cause: 2, content: "Added workspace context" },
        {
          id: 4,
          source: "agent",
          action: "run",
          args: { command: "ls", thought: "Look around." },
          tool_call_metadata: metadata("toolu_01", "execute_bash", "gen-1", "{\"command\": \"ls\"}")
        },
        {
          id: 5,
          source: "agent",
          observation: "run",
          cause: 4,
          content: "README.md",
          extras: { metadata: { exit_code: 0 } },
          tool_call_metadata: metadata("toolu_01", "execute_bash", "gen-1", "{\"command\": \"ls\"}")
        },
        { id: 6, source: "agent", action: "run", args: { command: "make", thought: "" } },
        { id: 7, source: "agent", observation: "run", cause: 6, content: "Error 2", extras: { metadata: { exit_code: 2 } } },
        { id: 8, source: "agent", observation: "error", content: "Parameter 'command' is expected to be one of […]" },
        {
          id: 9,
          source: "agent",
          action: "think",
          args: { thought: "Maybe the parser." },
          tool_call_metadata: metadata("toolu_02", "think", "gen-2", "{}")
        },
        {
          id: 10,
          source: "agent",
          observation: "think",
          cause: 9,
          content: "Your thought has been logged.",
          tool_call_metadata: metadata("toolu_02", "think", "gen-2", "{}")
        },
        {
          id: 11,
          source: "agent",
          action: "finish",
          args: { thought: "Wrapping up.", final_thought: "Fixed the parser." },
          tool_call_metadata: metadata("toolu_03", "finish", "gen-3", "{}")
        }
      ]),
      instance("repo__2", [{ id: 0, source: "user", action: "message", args: { content: "Second task" } }])
    ))
    expect(threads.map((thread) => [thread.threadKey, thread.title, thread.turns[0]!.sourceLine])).toEqual([
      ["repo__1", "Fix the crash", 1],
      ["repo__2", "Second task", 2]
    ])
    expect(rows(threads[0]!.turns[0]!.items)).toEqual([
      ["assistant_message", "Look around.", null, null, "gen-1", false, null],
      ["tool_call", "{\"command\": \"ls\"}", "toolu_01", "execute_bash", "gen-1", false, "answered"],
      ["tool_result", "README.md", "toolu_01", "execute_bash", null, false, null],
      ["tool_call", "{\"command\":\"make\"}", "openhands:event:6", "run", "openhands:event:6", false, "answered"],
      ["tool_result", "Error 2", "openhands:event:6", "run", null, true, null],
      ["error", "Parameter 'command' is expected to be one of […]", null, null, null, true, null],
      ["reasoning", "Maybe the parser.", null, null, "gen-2", false, null],
      ["assistant_message", "Wrapping up.", null, null, "gen-3", false, null],
      ["assistant_message", "Fixed the parser.", null, null, "gen-3", false, null]
    ])
  })
})
