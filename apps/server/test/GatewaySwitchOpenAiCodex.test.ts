/**
 * The Responses to Chat Completions switch with the real Codex CLI (issue 14 items 4 and 5, `GatewaySwitchOpenAi`):
 * `codex exec` (as in `GatewaySwitchResponsesAnthropicCodex.test.ts`) with its model routed to a loopback
 * OpenAI-compatible Chat Completions upstream scripted through two turns (the second a `codex exec resume`) with three
 * shell rounds (`exec_command`). Codex reads Baton's converted Responses events: it runs every command and ends each
 * turn with the model's text; the upstream receives Chat Completions requests carrying Codex's history (its calls as
 * `tool_calls`, their outputs as `tool` messages with the same ids, its developer messages in the `system` message);
 * Baton's thread holds every call, output and prompt once, one completed run per request with the upstream's usage.
 */
import type { Item } from "@baton/contracts"
import { HttpServer } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { codexHome } from "../../../packages/providers/test/support/CodexLoopback.js"
import { adminToken, client } from "./helpers.js"
import * as CodexExec from "./support/CodexExec.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

const usage = { input: 900, cacheWrite: 0, cacheRead: 2_000, output: 40 }
const shell = (id: string, cmd: string) => ModelApi.answer("openai-chat", "", usage, [{ id, name: "exec_command", arguments: JSON.stringify({ cmd }) }])
const say = (text: string) => ModelApi.answer("openai-chat", text, usage)
const prompt1 = "Write a two-line note and count its lines."
const prompt2 = "Now show me the note."

type Message = { readonly role: string; readonly content: string | null; readonly tool_call_id?: string; readonly tool_calls?: ReadonlyArray<{ id: string; function: { name: string } }> }
type Sent = { readonly model: string; readonly stream?: boolean; readonly tools: ReadonlyArray<{ function: { name: string } }>; readonly messages: ReadonlyArray<Message> }

describe("Gateway, a provider switch with the real Codex CLI (Responses agent, openai-chat upstream)", () => {
  it.live("Codex completes two turns with three shell rounds on a model routed to a Chat Completions instance; the upstream gets Chat Completions requests of Codex's history; the thread holds every item once", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      upstream.enqueue(
        shell("call_1", "printf 'line one\\nline two\\n' > note.txt && echo written"),
        shell("call_2", "wc -l < note.txt"),
        say("The note has 2 lines."),
        shell("call_4", "cat note.txt"),
        say("Done: the note reads line one, line two.")
      )
      const settings = yield* settingsFor(
        [instance("chat", "openai-chat", upstream)],
        { TEST_MODEL_KEY: marker },
        undefined,
        // Codex's model (`gpt-loopback`) routed to the Chat Completions instance.
        { gateway: { routes: [{ model: "gpt-*", provider: "chat" }] } }
      )
      const dir = Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-codex-openai-switch-")))
      yield* Effect.gen(function*() {
        const server = yield* HttpServer.HttpServer
        const port = (server.address as HttpServer.TcpAddress).port
        const home = yield* codexHome(`http://127.0.0.1:${port}`, { envKey: "CODEX_TEST_KEY" })
        const env = { CODEX_TEST_KEY: adminToken }
        const first = yield* CodexExec.exec({ codexHome: home, cwd: dir, prompt: prompt1, env })
        const second = yield* CodexExec.exec({ codexHome: home, cwd: dir, prompt: prompt2, env, resume: first.threadId })

        // Codex ran every command and ended each turn with the model's text.
        expect(first.messages).toEqual(["The note has 2 lines."])
        expect(first.commands.map((c) => [c.output, c.exitCode])).toEqual([["written\n", 0], ["2\n", 0]])
        expect(Fs.readFileSync(Path.join(dir, "note.txt"), "utf8")).toBe("line one\nline two\n")
        expect(second.messages).toEqual(["Done: the note reads line one, line two."])
        expect(second.commands.map((c) => c.output)).toEqual(["line one\nline two\n"])
        // Codex's own count of the turn's tokens: the upstream's prompt tokens (cached ones included), over the turn's requests.
        expect(first.usage.input_tokens).toBe(3 * (900 + 2_000))

        // The upstream got Chat Completions requests of Codex's history: its calls and their outputs, the prompts.
        expect(upstream.requests.length).toBe(5)
        const sent = upstream.requests.map((r) => JSON.parse(r.body) as Sent)
        for (const r of upstream.requests) {
          expect(r.url).toBe("/v1/chat/completions")
          expect(r.headers["authorization"]).toBe(`Bearer ${marker}`)
        }
        for (const body of sent) {
          expect(body.model).toBe("gpt-loopback")
          expect(body.stream).toBe(true)
          // Codex's system prompt (its developer messages) first, as the one system message.
          expect(body.messages[0]!.role).toBe("system")
          expect((body.messages[0]!.content ?? "").length).toBeGreaterThan(100)
          expect(body.messages.filter((m) => m.role === "system")).toHaveLength(1)
          expect(body.tools.map((t) => t.function.name)).toEqual(expect.arrayContaining(["exec_command", "thread_read"]))
        }
        const last = sent.at(-1)!
        const uses = last.messages.flatMap((m) => (m.tool_calls ?? []).map((c) => c.id))
        const answered = last.messages.filter((m) => m.role === "tool").map((m) => m.tool_call_id)
        expect(uses).toEqual(["call_1", "call_2", "call_4"])
        expect(answered).toEqual(uses)
        const texts = last.messages.filter((m) => m.role === "user" || m.role === "assistant").flatMap((m) => m.content === null ? [] : [m.content])
        expect(texts.some((t) => t.includes(prompt1))).toBe(true)
        expect(texts.at(-1)).toContain(prompt2)
        expect(texts).toContain("The note has 2 lines.")

        // One thread, one completed run per request on the Chat Completions instance with its usage.
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        expect(threads.length).toBe(1)
        const threadId = threads[0]!.id
        const page = yield* api.runs.list({ path: { threadId }, urlParams: {} })
        expect(page.runs.map((r) => r.status)).toEqual(["completed", "completed", "completed", "completed", "completed"])
        expect(page.costs.map((c) => [c.inputTokens, c.cacheWriteTokens, c.cacheReadTokens, c.outputTokens, c.providerInstance])).toEqual(page.runs.map(() => [900, 0, 2_000, 40, "chat"]))
        const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
        for (const id of ["call_1", "call_2", "call_4"]) {
          expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === id).length).toBe(1)
          expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === id).length).toBe(1)
        }
        expect(items.filter((i) => i.kind === "user_message" && i.text === prompt1).length).toBe(1)
        expect(items.filter((i) => i.kind === "user_message" && i.text === prompt2).length).toBe(1)
        expect(items.filter((i) => i.kind === "assistant_message").map((i) => i.text)).toEqual(["The note has 2 lines.", "Done: the note reads line one, line two."])
      }).pipe(Effect.provide(serveSettings(settings)))
      Fs.rmSync(dir, { recursive: true, force: true })
    })), { timeout: 180_000 })
})
