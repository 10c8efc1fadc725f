/**
 * The Chat Completions to Anthropic switch with a real Chat Completions agent (issue 14 items 4 and 5): the pi coding
 * agent (`@mariozechner/pi-coding-agent`, pinned; `test/support/Pi.ts`) run headless through `baton serve`'s gateway
 * with a model routed to a loopback Anthropic Messages upstream scripted to lead it through tool rounds (bash, write,
 * read beside a parallel bash, a long `seq` output) in a temporary directory. pi reads Baton's converted
 * `chat.completion.chunk`s: it runs every call and ends the session with the model's last text; the upstream receives
 * Anthropic Messages requests carrying pi's history (its calls as `tool_use`, its results as `tool_result` with the
 * same ids); Baton's thread holds every message exactly once, one completed run per request with the Anthropic usage
 * (cache writes and reads).
 */
import type { Item } from "@baton/contracts"
import { HttpServer } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { adminToken, client } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"
import * as Pi from "./support/Pi.js"

const usage = { input: 900, cacheWrite: 100, cacheRead: 2_000, output: 40 }

/** The scripted session in `dir`: five model requests, four of them tool rounds, in Anthropic's stream. */
const script = (dir: string) => [
  ModelApi.answer("anthropic-messages", "Running echo.", usage, [{ id: "call_1", name: "bash", arguments: JSON.stringify({ command: "echo hello-from-pi" }) }]),
  ModelApi.answer("anthropic-messages", "", usage, [{ id: "call_2", name: "write", arguments: JSON.stringify({ path: Path.join(dir, "note.txt"), content: "line one\nline two\n" }) }]),
  ModelApi.answer("anthropic-messages", "", usage, [
    { id: "call_3", name: "read", arguments: JSON.stringify({ path: Path.join(dir, "note.txt") }) },
    { id: "call_4", name: "bash", arguments: JSON.stringify({ command: "ls" }) }
  ]),
  ModelApi.answer("anthropic-messages", "", usage, [{ id: "call_5", name: "bash", arguments: JSON.stringify({ command: "seq 1 3000" }) }]),
  ModelApi.answer("anthropic-messages", "All done.", usage)
]

type Block = { readonly type: string; readonly id?: string; readonly name?: string; readonly tool_use_id?: string; readonly content?: unknown; readonly text?: string }
type Sent = { readonly model: string; readonly system?: string; readonly stream?: boolean; readonly tools: ReadonlyArray<{ name: string }>; readonly messages: ReadonlyArray<{ role: string; content: ReadonlyArray<Block> }> }

describe("Gateway, a provider switch with the real pi agent (Chat Completions agent, anthropic-messages upstream)", () => {
  it.live("pi completes a tool-using session on a model routed to Anthropic; the upstream gets Anthropic requests of pi's history; the thread holds every message once", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const dir = Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-pi-switch-")))
      upstream.enqueue(...script(dir))
      const settings = yield* settingsFor(
        [instance("anthropic", "anthropic-messages", upstream)],
        { TEST_MODEL_KEY: marker },
        undefined,
        { gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] } }
      )
      yield* Effect.gen(function*() {
        const server = yield* HttpServer.HttpServer
        const port = (server.address as HttpServer.TcpAddress).port
        const via = yield* Pi.run({ baseUrl: `http://127.0.0.1:${port}/v1`, apiKey: adminToken, model: "claude-pi", cwd: dir, prompt: "do the thing" })

        // pi ran every call and ended with the model's last text.
        expect(via.lastText).toBe("All done.")
        expect(Fs.readFileSync(Path.join(dir, "note.txt"), "utf8")).toBe("line one\nline two\n")
        const results = via.messages.filter((m) => m.role === "toolResult").map((m) => [m.toolCallId, m.content.map((c) => c.text ?? "").join("")] as const)
        expect(results.map(([id]) => id)).toEqual(["call_1", "call_2", "call_3", "call_4", "call_5"])
        expect(results[0]![1].trim()).toBe("hello-from-pi")
        expect(results[2]![1]).toContain("line one")
        const calls = via.messages.flatMap((m) => m.content.filter((c) => c.type === "toolCall").map((c) => [c.id, c.name, c.arguments]))
        expect(calls).toEqual([
          ["call_1", "bash", { command: "echo hello-from-pi" }],
          ["call_2", "write", { path: Path.join(dir, "note.txt"), content: "line one\nline two\n" }],
          ["call_3", "read", { path: Path.join(dir, "note.txt") }],
          ["call_4", "bash", { command: "ls" }],
          ["call_5", "bash", { command: "seq 1 3000" }]
        ])

        // The upstream got Anthropic Messages requests: Baton's key, pi's history converted, the prompt first.
        expect(upstream.requests.length).toBe(5)
        const sent = upstream.requests.map((r) => JSON.parse(r.body) as Sent)
        /** A message without the prompt-cache breakpoint (on the last block of each request's last message). */
        const unmarked = (m: Sent["messages"][number]) => JSON.stringify({ ...m, content: m.content.map(({ cache_control: _, ...b }: Block & { cache_control?: unknown }) => b) })
        upstream.requests.forEach((r) => {
          expect(r.url).toBe("/v1/messages")
          expect(r.headers["x-api-key"]).toBe(marker)
          expect(r.headers["authorization"]).toBeUndefined()
        })
        for (const body of sent) {
          expect(body.model).toBe("claude-pi")
          expect(body.stream).toBe(true)
          expect(typeof body.system).toBe("string")
          expect(body.tools.map((t) => t.name)).toEqual(expect.arrayContaining(["bash", "read", "write", "thread_read"]))
          expect(JSON.parse(unmarked(body.messages[0]!))).toEqual({ role: "user", content: [{ type: "text", text: "do the thing" }] })
          // Roles alternate (tool results and any user text after them are one user message).
          body.messages.forEach((m, i) => expect(m.role).toBe(i % 2 === 0 ? "user" : "assistant"))
        }
        // Each call goes back as a tool_use with its results answering it in the next message, the same ids.
        const last = sent.at(-1)!
        const uses = last.messages.flatMap((m) => m.content.filter((b) => b.type === "tool_use").map((b) => b.id))
        const answered = last.messages.flatMap((m) => m.content.filter((b) => b.type === "tool_result").map((b) => b.tool_use_id))
        expect(uses).toEqual(["call_1", "call_2", "call_3", "call_4", "call_5"])
        expect(answered).toEqual(uses)
        const seq = last.messages.flatMap((m) => m.content.filter((b) => b.type === "tool_result" && b.tool_use_id === "call_5"))[0]!
        expect(seq.content).toBe(results[4]![1])
        // Every request extends the previous one (nothing to fit in a 200,000-token window) but for the prompt-cache
        // breakpoint, on the last block of each request's last message.
        for (let i = 1; i < sent.length; i++) {
          expect(sent[i]!.messages.slice(0, sent[i - 1]!.messages.length).map(unmarked)).toEqual(sent[i - 1]!.messages.map(unmarked))
        }
        for (const r of upstream.requests) expect(r.body.match(/"cache_control":\{"type":"ephemeral"\}/g)).toHaveLength(1)
        for (const body of sent) expect(body.messages.at(-1)!.content.at(-1)).toHaveProperty("cache_control", { type: "ephemeral" })

        // One thread, one completed run per request with the usage Anthropic reported (writes and reads).
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        expect(threads.length).toBe(1)
        const threadId = threads[0]!.id
        const page = yield* api.runs.list({ path: { threadId }, urlParams: {} })
        expect(page.runs.map((r) => r.status)).toEqual(["completed", "completed", "completed", "completed", "completed"])
        expect(page.costs.map((c) => [c.inputTokens, c.cacheWriteTokens, c.cacheReadTokens, c.outputTokens, c.providerInstance])).toEqual(page.runs.map(() => [900, 100, 2_000, 40, "anthropic"]))

        // Every message exactly once: the prompt, each call and its result, the assistant's texts.
        const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
        expect(items.filter((i) => i.kind === "user_message").map((i) => i.text)).toEqual(["do the thing"])
        for (const id of ["call_1", "call_2", "call_3", "call_4", "call_5"]) {
          expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === id).length).toBe(1)
          expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === id).length).toBe(1)
        }
        expect(items.filter((i) => i.kind === "assistant_message").map((i) => i.text)).toEqual(["Running echo.", "All done."])
        expect(items.length).toBe(1 + 5 * 2 + 2)
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 180_000 })
})
