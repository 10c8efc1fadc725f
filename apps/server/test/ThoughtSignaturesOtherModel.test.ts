/**
 * `GatewayThoughtSignatures.restore` after a thread switched from Gemini to another model: the memo still has the
 * Gemini calls' `extra_content` for the thread, and the agent sends those calls back bare. Before: the request to the
 * other model (`gpt-5`) got Gemini's signatures on them (a field an OpenAI server may refuse); now it goes out as the
 * agent sent it, and a Gemini model of the same thread still gets them back.
 */
import { describe, expect, it } from "vitest"
import * as GatewayThoughtSignatures from "../src/GatewayThoughtSignatures.js"

const extra = { google: { thought_signature: "sig-1" } }
const body = (model: string) => ({
  model,
  messages: [
    { role: "user", content: "run it" },
    { role: "assistant", content: null, tool_calls: [{ id: "call-1", type: "function", function: { name: "Bash", arguments: "{}" } }] },
    { role: "tool", tool_call_id: "call-1", content: "ok" }
  ]
})

describe("GatewayThoughtSignatures.restore on a thread switched away from Gemini", () => {
  it("gives the remembered extra_content back to a Gemini model only", () => {
    const memo = GatewayThoughtSignatures.make()
    GatewayThoughtSignatures.recordAnswer(memo, "thread-1", {
      choices: [{ message: { role: "assistant", tool_calls: [{ id: "call-1", type: "function", function: { name: "Bash", arguments: "{}" }, extra_content: extra }] } }]
    })
    const other = body("gpt-5")
    expect(GatewayThoughtSignatures.restore(memo, "thread-1", other)).toBe(other)
    const gemini = GatewayThoughtSignatures.restore(memo, "thread-1", body("gemini-3-pro-preview"))
    expect((gemini.messages as Array<{ tool_calls?: Array<unknown> }>)[1]!.tool_calls).toEqual([
      { id: "call-1", type: "function", function: { name: "Bash", arguments: "{}" }, extra_content: extra }
    ])
  })
})
