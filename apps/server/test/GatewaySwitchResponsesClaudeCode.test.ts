/**
 * A provider switch to an OpenAI Responses upstream with the real Claude Code CLI (issue 14's acceptance "A switch",
 * as `GatewaySwitchClaudeCode.test.ts` for Chat Completions): a tool-using session on a `claude-*` model through Baton
 * to a loopback Anthropic upstream (two Bash rounds with outputs over 20,000 characters and a Write), then the same
 * conversation resumed with `--resume <session id> --model gpt-5`, which Baton routes to a loopback Responses
 * upstream with a 32,000-token window (a tool round there too), then resumed again on the first model. The switched requests fit the window with the user's prompt unchanged; the Anthropic
 * upstream then receives the whole history, the other provider's turn included. Claude Code re-renders its history
 * when its model changes to a non-Claude model and back; Baton recognises the same conversation, so the thread holds
 * every message of the whole session exactly once and records no divergence.
 */
import type { Item } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { HttpClientRequest, HttpServer } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { adminToken, client, raw } from "./helpers.js"
import * as ClaudeCode from "./support/ClaudeCode.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"

const usage = { input: 1_000, cacheWrite: 200, cacheRead: 3_000, output: 50 }
const responsesUsage = { input: 700, cacheWrite: 0, cacheRead: 0, output: 30 }
const window = 32_000
const counter = TokenCounter.make()

const tempDir = (prefix: string) => Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), prefix)))

type Block = { readonly type: string; readonly text?: string; readonly id?: string; readonly name?: string; readonly input?: unknown; readonly tool_use_id?: string; readonly content?: unknown }
type Message = { readonly role: string; readonly content: string | ReadonlyArray<Block> }
type InputItem = { readonly type: string; readonly role?: string; readonly content?: ReadonlyArray<{ readonly type: string; readonly text: string }>; readonly call_id?: string; readonly name?: string; readonly arguments?: string; readonly output?: string }

const blocks = (m: Message): ReadonlyArray<Block> => (typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content)
const resultText = (b: Block) => typeof b.content === "string" ? b.content : Array.isArray(b.content) ? (b.content as ReadonlyArray<Block>).map((c) => c.text ?? "").join("\n") : ""

describe("Gateway provider switch to OpenAI Responses with the real Claude Code", () => {
  it.live("a session resumed on a model routed to a 32,000-token Responses upstream fits, and resumed again on the first model loses nothing", () =>
    Effect.scoped(Effect.gen(function*() {
      const anthropic = yield* ModelApi.start
      const responses = yield* ModelApi.start
      const dir = tempDir("baton-cc-switch-")
      const home = tempDir("baton-cc-home-")
      anthropic.enqueue(
        ModelApi.answer("anthropic-messages", "Counting.", usage, [{ id: "toolu_01", name: "Bash", arguments: JSON.stringify({ command: "seq 1 6000", description: "count" }) }]),
        ModelApi.answer("anthropic-messages", "", usage, [{ id: "toolu_02", name: "Bash", arguments: JSON.stringify({ command: "seq 100001 104000", description: "count more" }) }]),
        ModelApi.answer("anthropic-messages", "", usage, [{ id: "toolu_03", name: "Write", arguments: JSON.stringify({ file_path: Path.join(dir, "note.txt"), content: "first part\n" }) }]),
        ModelApi.answer("anthropic-messages", "First part done.", usage)
      )
      responses.enqueue(
        ModelApi.answer("openai-responses", "Checking from the other model.", responsesUsage, [{ id: "call_1", name: "Bash", arguments: JSON.stringify({ command: "echo from-responses", description: "echo" }) }]),
        ModelApi.answer("openai-responses", "Switched done.", responsesUsage)
      )
      const settings = yield* settingsFor(
        [
          // Offload off on the Anthropic instance: its requests go out as the agent sent them (compared below).
          instance("anthropic", "anthropic-messages", anthropic, { toolResultOffload: false }),
          instance("responses", "openai-responses", responses, { contextWindow: window, autoCompactThreshold: null, maxOutputTokens: 4_096 })
        ],
        { TEST_MODEL_KEY: marker },
        undefined,
        { gateway: { routes: [{ model: "claude-*", provider: "anthropic" }, { model: "gpt-*", provider: "responses" }] } }
      )
      yield* Effect.gen(function*() {
        const server = yield* HttpServer.HttpServer
        const baseUrl = `http://127.0.0.1:${(server.address as HttpServer.TcpAddress).port}`
        const run = (prompt: string, args: ReadonlyArray<string>) => ClaudeCode.run({ baseUrl, apiKey: adminToken, cwd: dir, home, prompt, args })

        // 1. The tool-using session on the Anthropic model.
        const first = yield* run("count for me", ["--model", "claude-sonnet-4-5"])
        expect(first.is_error).toBe(false)
        expect(first.result).toBe("First part done.")
        expect(anthropic.requests).toHaveLength(4)

        // 2. Resumed on gpt-5 (Claude Code accepts the name against a custom base URL): Baton's Responses upstream.
        const prompt2 = "continue on the other model: echo something"
        const second = yield* run(prompt2, ["--resume", first.session_id, "--model", "gpt-5"])
        expect(second.is_error).toBe(false)
        expect(second.result).toBe("Switched done.")
        expect(responses.requests).toHaveLength(2)
        for (const r of responses.requests) {
          const body = JSON.parse(r.body) as { model: string; max_output_tokens: number; store: boolean; input: ReadonlyArray<InputItem> }
          expect(r.url).toBe("/v1/responses")
          expect(r.headers["authorization"]).toBe(`Bearer ${marker}`)
          expect(body.model).toBe("gpt-5")
          expect(body.store).toBe(false)
          // The request fits the window with its output room (in Baton's count of the whole body).
          expect(counter.count(r.body) + body.max_output_tokens).toBeLessThanOrEqual(window)
        }
        const switched = JSON.parse(responses.requests[0]!.body) as { instructions: string; input: ReadonlyArray<InputItem> }
        expect(switched.instructions.length).toBeGreaterThan(0)
        // The user's prompt unchanged: Claude Code's newest user message is a reminder block then the prompt's block
        // (their texts joined by a blank line), followed by a system message of its own.
        const newestUser = switched.input[switched.input.map((i) => i.role).lastIndexOf("user")]!
        expect(newestUser.content![0]!.text.endsWith(`\n\n${prompt2}`)).toBe(true)
        expect(switched.input.indexOf(newestUser)).toBe(switched.input.length - 2)
        expect(switched.input.at(-1)!.role).toBe("system")
        // The long Bash outputs were stubbed to fit (their originals in the thread, read with thread_read tool:<id>).
        const outputs = switched.input.filter((i) => i.type === "function_call_output")
        expect(outputs.map((i) => i.call_id)).toEqual(expect.arrayContaining(["toolu_01", "toolu_02"]))
        expect(outputs.find((i) => i.call_id === "toolu_01")!.output).toMatch(/^\[offloaded, thread_read tool:toolu_01\]/)
        // The second switched request carries the Responses model's call and Claude Code's real result.
        const again = JSON.parse(responses.requests[1]!.body) as { input: ReadonlyArray<InputItem> }
        expect(again.input.some((i) => i.type === "function_call" && i.call_id === "call_1" && i.name === "Bash")).toBe(true)
        expect(again.input.at(-1)).toMatchObject({ type: "function_call_output", call_id: "call_1" })
        expect(again.input.at(-1)!.output).toContain("from-responses")

        // 3. Resumed again on the first model: the Anthropic upstream gets the whole history, the other turn included.
        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Back on Claude.", usage))
        const third = yield* run("and back: summarise", ["--resume", first.session_id, "--model", "claude-sonnet-4-5"])
        expect(third.is_error).toBe(false)
        expect(third.result).toBe("Back on Claude.")
        expect(anthropic.requests).toHaveLength(5)
        const back = JSON.parse(anthropic.requests[4]!.body) as { messages: ReadonlyArray<Message> }
        const all = back.messages.flatMap(blocks)
        expect(all.filter((b) => b.type === "tool_use").map((b) => b.id)).toEqual(["toolu_01", "toolu_02", "toolu_03", "call_1"])
        // The long outputs in full, as Claude Code ran them.
        expect(resultText(all.find((b) => b.type === "tool_result" && b.tool_use_id === "toolu_01")!)).toContain("5999\n6000")
        expect(resultText(all.find((b) => b.type === "tool_result" && b.tool_use_id === "toolu_02")!)).toContain("103999\n104000")
        expect(resultText(all.find((b) => b.type === "tool_result" && b.tool_use_id === "call_1")!)).toContain("from-responses")
        const texts = back.messages.filter((m) => m.role === "assistant").flatMap(blocks).filter((b) => b.type === "text").map((b) => b.text)
        expect(texts).toEqual(expect.arrayContaining(["Counting.", "First part done.", "Checking from the other model.", "Switched done."]))
        expect(Fs.readFileSync(Path.join(dir, "note.txt"), "utf8")).toBe("first part\n")

        // The record: the session's thread, a run per request on the instance used, every message once.
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        const thread = threads.find((t) => t.title === `Claude Code session ${first.session_id}`)
        expect(thread).toBeDefined()
        const threadId = thread!.id
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
        const views = yield* Effect.forEach(runs, (r) => api.runs.get({ path: { runId: r.id }, urlParams: {} }))
        expect(runs.map((r) => r.status)).toEqual(Array(7).fill("completed"))
        expect(views.map((v) => v.cost?.providerInstance)).toEqual(["anthropic", "anthropic", "anthropic", "anthropic", "responses", "responses", "anthropic"])
        const items: Array<Item> = []
        for (let afterSeq = 0; ;) {
          const page = yield* api.items.list({ path: { threadId }, urlParams: { afterSeq, limit: 500 } })
          items.push(...page.items)
          if (page.nextAfterSeq === null) break
          afterSeq = page.nextAfterSeq
        }
        // Claude Code re-renders its history when its model changes from a Claude model to another and back (its
        // reminders move between the user messages and `system` messages of their own, a tool result's trailing
        // reminder becomes a `system` message; it does so against the upstream directly too): Baton recognises the
        // same conversation (`gateway.rerendered`), so nothing diverges and nothing is stored again.
        const events = threadEvents((yield* raw(HttpClientRequest.get(`/threads/${threadId}/events?follow=false`).pipe(HttpClientRequest.bearerToken(adminToken)))).text)
        expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
        expect(events.filter((e) => e.type === "gateway.rerendered").map((e) => (e.payload as { runId: string }).runId)).toEqual([runs[4]!.id, runs[6]!.id])
        // The thread holds the whole conversation, every message exactly once.
        for (const id of ["toolu_01", "toolu_02", "toolu_03", "call_1"]) {
          expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === id)).toHaveLength(1)
          expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === id)).toHaveLength(1)
        }
        expect(items.find((i) => i.kind === "tool_result" && i.toolCallId === "toolu_01")!.text).toContain("5999\n6000")
        for (const prompt of ["count for me", prompt2, "and back: summarise"]) {
          expect(items.filter((i) => i.kind === "user_message" && i.text === prompt)).toHaveLength(1)
        }
        expect(items.filter((i) => i.kind === "assistant_message").map((i) => i.text)).toEqual(["Counting.", "First part done.", "Checking from the other model.", "Switched done.", "Back on Claude."])
        // The conversation as the thread holds it (the agent's reminders aside) is the last request's and its reply, in order.
        const reminder = /^\s*(<system-reminder>(?:(?!<\/system-reminder>)[\s\S])*<\/system-reminder>\s*)+$/
        const trailing = /(\s*<system-reminder>(?:(?!<\/system-reminder>)[\s\S])*<\/system-reminder>)+\s*$/
        const conversation = (entries: ReadonlyArray<readonly [string, string, string | null]>) =>
          entries.filter(([kind, text]) => !(kind === "user_message" && reminder.test(text))).map(([kind, text, id]) => [kind, kind === "tool_result" ? text.replace(trailing, "") : text, id])
        const fromThread = conversation(items.filter((i) => !(i.messageId ?? "").startsWith("system@")).map((i) => [i.kind, i.text, i.toolCallId] as const))
        type Entry = readonly [string, string, string | null]
        const fromRequest = conversation(back.messages.filter((m) => m.role !== "system").flatMap((m) =>
          blocks(m).flatMap((b): ReadonlyArray<Entry> =>
            b.type === "text" ? [[m.role === "assistant" ? "assistant_message" : "user_message", b.text!, null]]
            : b.type === "tool_use" ? [["tool_call", JSON.stringify(b.input), b.id!]]
            : b.type === "tool_result" ? [["tool_result", resultText(b), b.tool_use_id!]]
            : [])))
        expect(fromThread).toEqual([...fromRequest, ["assistant_message", "Back on Claude.", null]])
        // Each message has its own message id (a re-render starts a generation of ids: positions count another rendering).
        const runOfMessage = new Map<string, string | null>()
        for (const i of items) {
          const messageId = i.messageId ?? ""
          expect(runOfMessage.get(messageId) ?? i.runId).toBe(i.runId)
          runOfMessage.set(messageId, i.runId)
        }
        // Unstubbed, the switched request would have been over the window: its stubs' originals alone are large.
        const originals = items.filter((i) => i.kind === "tool_result" && (i.toolCallId === "toolu_01" || i.toolCallId === "toolu_02"))
        expect(counter.count(responses.requests[0]!.body) + originals.reduce((n, i) => n + counter.count(i.text), 0)).toBeGreaterThan(window)
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 400_000 })
})
