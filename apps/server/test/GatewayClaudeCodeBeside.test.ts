/**
 * The real Claude Code CLI through the gateway with offload on, when the upstream calls `thread_read` beside a call of
 * the agent's own tool (docs/gateway.md "`thread_read` beside the agent's own calls"): a loopback Anthropic upstream
 * scripted to run Bash, then to read that output back with `thread_read` in the same reply as a second Bash call, then
 * to finish. Claude Code never sees the read (it runs its Bash call and the session completes); the upstream's next
 * request extends the one that got the reply, with the read call as the upstream sent it and the gateway's answer
 * (the first command's output) beside Claude Code's own result; the thread holds no `thread_read` call.
 */
import type { Item } from "@baton/contracts"
import { HttpServer } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { adminToken, client } from "./helpers.js"
import * as ClaudeCode from "./support/ClaudeCode.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

const usage = { input: 1_000, cacheWrite: 200, cacheRead: 3_000, output: 50 }

type Block = Record<string, unknown>
type Body = { messages: Array<{ role: string; content: string | Array<Block> }> }

/** The messages of a body without breakpoints (Claude Code moves them with the newest message). */
const unmarked = (body: Body) =>
  body.messages.map((m) => JSON.stringify({ ...m, content: typeof m.content === "string" ? m.content : m.content.map(({ cache_control: _, ...b }) => b) }))

describe("Gateway with the real Claude Code: thread_read beside its own call", () => {
  it.live("Claude Code never sees the read; the next upstream request carries the call and the gateway's answer, extending the prefix", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const dir = Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-cc-beside-")))
      upstream.enqueue(
        ModelApi.answer("anthropic-messages", "Running echo.", usage, [
          { id: "toolu_01", name: "Bash", arguments: JSON.stringify({ command: "echo hello-from-bash", description: "echo" }) }
        ]),
        ModelApi.answer("anthropic-messages", "Checking it and echoing again.", usage, [
          { id: "toolu_r1", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_01" }) },
          { id: "toolu_02", name: "Bash", arguments: JSON.stringify({ command: "echo second-echo", description: "echo again" }) }
        ]),
        ModelApi.answer("anthropic-messages", "All done.", usage)
      )
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
      })
      yield* Effect.gen(function*() {
        const server = yield* HttpServer.HttpServer
        const port = (server.address as HttpServer.TcpAddress).port
        const home = Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-cc-home-")))
        const result = yield* ClaudeCode.run({ baseUrl: `http://127.0.0.1:${port}`, apiKey: adminToken, cwd: dir, home, prompt: "do the thing" })
        expect(result.is_error).toBe(false)
        expect(result.result).toBe("All done.")

        // Three upstream requests: the reply with the read went to Claude Code (its Bash call run), no continuation.
        expect(upstream.requests.length).toBe(3)
        const second = JSON.parse(upstream.requests[1]!.body) as Body
        const third = JSON.parse(upstream.requests[2]!.body) as Body
        expect(unmarked(third).slice(0, second.messages.length)).toEqual(unmarked(second))
        expect(third.messages.length).toBe(second.messages.length + 2)
        const assistant = third.messages.at(-2)!.content as Array<Block>
        expect(assistant.filter((b) => b.type === "tool_use").map((b) => [b.id, b.name, b.input])).toEqual([
          ["toolu_r1", "thread_read", { refs: "tool:toolu_01" }],
          ["toolu_02", "Bash", { command: "echo second-echo", description: "echo again" }]
        ])
        const results = (third.messages.at(-1)!.content as Array<Block>).filter((b) => b.type === "tool_result")
        expect(results.map((b) => b.tool_use_id)).toEqual(["toolu_r1", "toolu_02"])
        expect(String(results[0]!.content)).toContain("hello-from-bash")
        expect(JSON.stringify(results[1]!.content)).toContain("second-echo")

        // The thread: Claude Code's calls once each, no thread_read call or result.
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        expect(threads.length).toBe(1)
        const threadId = threads[0]!.id
        const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
        expect(items.filter((i) => i.toolCallId === "toolu_r1")).toEqual([])
        expect(items.filter((i) => i.kind === "tool_call").map((i) => i.toolCallId)).toEqual(["toolu_01", "toolu_02"])
        expect(items.filter((i) => i.kind === "tool_result").map((i) => i.toolCallId)).toEqual(["toolu_01", "toolu_02"])
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
        expect(runs.map((r) => r.status)).toEqual(["completed", "completed", "completed"])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 180_000 })
})
