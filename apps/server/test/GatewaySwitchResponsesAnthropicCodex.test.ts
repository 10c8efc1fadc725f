/**
 * The Responses to Anthropic switch with the real Codex CLI (issue 14 items 4 and 5): `codex exec` (the pinned
 * `@openai/codex`, `test/support/CodexExec.ts`) with a model provider whose base URL is `baton serve`'s gateway and its
 * model routed to a loopback Anthropic Messages upstream scripted through two turns (the second a `codex exec resume`)
 * with three shell rounds (`exec_command`) in a temporary directory. Codex reads Baton's converted Responses events: it
 * runs every command and ends each turn with the model's text; the upstream receives Anthropic requests carrying
 * Codex's history (its calls as `tool_use`, their outputs as `tool_result`); Baton's thread holds every call, output
 * and prompt once, one completed run per request with the Anthropic usage.
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

const usage = { input: 900, cacheWrite: 100, cacheRead: 2_000, output: 40 }
const shell = (id: string, cmd: string) => ModelApi.answer("anthropic-messages", "", usage, [{ id, name: "exec_command", arguments: JSON.stringify({ cmd }) }])
const say = (text: string) => ModelApi.answer("anthropic-messages", text, usage)
const prompt1 = "Write a two-line note and count its lines."
const prompt2 = "Now show me the note."

type Block = { readonly type: string; readonly id?: string; readonly name?: string; readonly tool_use_id?: string; readonly content?: unknown; readonly text?: string }
type Sent = { readonly model: string; readonly system?: string; readonly tools: ReadonlyArray<{ name: string }>; readonly messages: ReadonlyArray<{ role: string; content: ReadonlyArray<Block> }> }

describe("Gateway, a provider switch with the real Codex CLI (Responses agent, anthropic-messages upstream)", () => {
  it.live("Codex completes two turns with three shell rounds on a model routed to Anthropic; the upstream gets Anthropic requests of Codex's history; the thread holds every item once", () =>
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
        [instance("anthropic", "anthropic-messages", upstream)],
        { TEST_MODEL_KEY: marker },
        undefined,
        // Codex's model (`gpt-loopback`) routed to the Anthropic instance.
        { gateway: { routes: [{ model: "gpt-*", provider: "anthropic" }] } }
      )
      const dir = Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-codex-switch-")))
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
        // Codex's own count of the turn's tokens: Anthropic's input with cache writes and reads, over the turn's requests.
        expect(first.usage.input_tokens).toBe(3 * (900 + 100 + 2_000))

        // The upstream got Anthropic requests of Codex's history: its calls and their outputs, the prompts.
        expect(upstream.requests.length).toBe(5)
        const sent = upstream.requests.map((r) => JSON.parse(r.body) as Sent)
        for (const r of upstream.requests) {
          expect(r.url).toBe("/v1/messages")
          expect(r.headers["x-api-key"]).toBe(marker)
        }
        for (const body of sent) {
          expect(body.model).toBe("gpt-loopback")
          expect((body.system ?? "").length).toBeGreaterThan(100)
          expect(body.tools.map((t) => t.name)).toEqual(expect.arrayContaining(["exec_command", "thread_read"]))
        }
        const last = sent.at(-1)!
        const uses = last.messages.flatMap((m) => m.content.filter((b) => b.type === "tool_use").map((b) => b.id))
        const answered = last.messages.flatMap((m) => m.content.filter((b) => b.type === "tool_result").map((b) => b.tool_use_id))
        expect(uses).toEqual(["call_1", "call_2", "call_4"])
        expect(answered).toEqual(uses)
        const texts = last.messages.flatMap((m) => m.content.flatMap((b) => (b.type === "text" ? [b.text ?? ""] : [])))
        expect(texts).toContain(prompt1)
        expect(texts.at(-1)).toBe(prompt2)
        expect(texts).toContain("The note has 2 lines.")

        // One thread, one completed run per request on the Anthropic instance with its usage.
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        expect(threads.length).toBe(1)
        const threadId = threads[0]!.id
        const page = yield* api.runs.list({ path: { threadId }, urlParams: {} })
        expect(page.runs.map((r) => r.status)).toEqual(["completed", "completed", "completed", "completed", "completed"])
        expect(page.costs.map((c) => [c.inputTokens, c.cacheWriteTokens, c.cacheReadTokens, c.outputTokens, c.providerInstance])).toEqual(page.runs.map(() => [900, 100, 2_000, 40, "anthropic"]))
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
