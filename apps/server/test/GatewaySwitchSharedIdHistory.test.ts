/**
 * A Chat Completions history whose parallel calls share one id (proxies in front of Gemini; an agent gets them so
 * through the gateway with offload off, where answers pass as they came), switched to an Anthropic Messages upstream:
 * the calls go out under distinct `tool_use` ids and each result names its own call, in order. Anthropic refuses a
 * message whose `tool_use` ids repeat; before branch b48gw they went out as they came, and every later request of such
 * a conversation routed to Claude was refused.
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, raw } from "./helpers.js"
import { withAnthropicAndChat } from "./support/GatewayRounds.js"
import * as ModelApi from "./support/ModelApi.js"

describe("Gateway provider switch, Chat Completions history to Anthropic Messages", () => {
  it.live("calls sharing one id go out under distinct tool_use ids, each result paired with its call in order", () =>
    withAnthropicAndChat((anthropic) =>
      Effect.gen(function*() {
        anthropic.enqueue(ModelApi.answer("anthropic-messages", "ok", { input: 1, cacheWrite: 0, cacheRead: 0, output: 1 }))
        const call = (name: string) => ({ id: "call_s", type: "function", function: { name, arguments: "{}" } })
        const answer = yield* raw(HttpClientRequest.post("/v1/chat/completions").pipe(
          HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "x-session-id": "s" }),
          HttpClientRequest.bodyText(JSON.stringify({
            model: "claude-x",
            tools: ["Read", "Bash"].map((name) => ({ type: "function", function: { name, description: name, parameters: { type: "object", properties: {} } } })),
            messages: [
              { role: "user", content: "go" },
              { role: "assistant", content: null, tool_calls: [call("Read"), call("Bash")] },
              { role: "tool", tool_call_id: "call_s", content: "read out" },
              { role: "tool", tool_call_id: "call_s", content: "bash out" },
              { role: "user", content: "and?" }
            ]
          }), "application/json")
        ))
        expect(answer.status).toBe(200)
        const sent = JSON.parse(anthropic.requests[0]!.body) as { messages: Array<{ content: Array<Record<string, unknown>> }> }
        // Before the fix: call_s twice, both results call_s.
        expect(sent.messages[1]!.content.map((b) => [b.id, b.name])).toEqual([["call_s", "Read"], ["call_s_2", "Bash"]])
        expect(sent.messages[2]!.content.slice(0, 2).map((b) => [b.tool_use_id, b.content])).toEqual([["call_s", "read out"], ["call_s_2", "bash out"]])
      })), { timeout: 60_000 })
})
