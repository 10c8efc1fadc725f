/**
 * The gateway's Chat Completions endpoint with a real Chat Completions agent (issue 14 item 1: pi, opencode, aider):
 * the pi coding agent (`@mariozechner/pi-coding-agent`, pinned) run headless against a loopback Chat Completions
 * upstream scripted to lead it through tool rounds (bash, write, read beside a parallel bash, a long `seq` output) in a
 * temporary directory, once with pi pointed at the upstream directly and once through `baton serve`'s gateway. Through
 * Baton the session ends the same, the upstream receives pi's requests unchanged (Baton's key instead of the agent's
 * token), and Baton's thread holds every message exactly once, one completed run per request with its usage. A longer
 * session (16 bash rounds of about 28,000 characters each) with tool-result offload on: pi completes it the same way,
 * and the upstream's requests extend each other except at the flushes Baton reports, where only stubs differ from what
 * pi sent; the model's read-back of a stubbed output (`thread_read`) is answered by Baton, never seen by pi.
 */
import type { Item } from "@baton/contracts"
import { HttpServer } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { adminToken, client, get, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"
import * as Pi from "./support/Pi.js"

const usage = { input: 900, cacheWrite: 0, cacheRead: 2_000, output: 40 }

/** The scripted session in `dir`: five model requests, four of them tool rounds. */
const script = (dir: string) => [
  ModelApi.answer("openai-chat", "Running echo.", usage, [{ id: "call_1", name: "bash", arguments: JSON.stringify({ command: "echo hello-from-pi" }) }]),
  ModelApi.answer("openai-chat", "", usage, [{ id: "call_2", name: "write", arguments: JSON.stringify({ path: Path.join(dir, "note.txt"), content: "line one\nline two\n" }) }]),
  ModelApi.answer("openai-chat", "", usage, [
    { id: "call_3", name: "read", arguments: JSON.stringify({ path: Path.join(dir, "note.txt") }) },
    { id: "call_4", name: "bash", arguments: JSON.stringify({ command: "ls" }) }
  ]),
  ModelApi.answer("openai-chat", "", usage, [{ id: "call_5", name: "bash", arguments: JSON.stringify({ command: "seq 1 3000" }) }]),
  ModelApi.answer("openai-chat", "All done.", usage)
]

const tempDir = (prefix: string) => Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), prefix)))

/**
 * A request body with what differs between two runs of one session removed: the working directory, and the file pi
 * keeps a truncated bash output's whole text in (`/tmp/pi-bash-<random>.log`).
 */
const comparable = (body: string, dir: string) => body.split(dir).join("<dir>").replace(/pi-bash-[0-9a-f]+\.log/g, "pi-bash-<id>.log")

describe("Gateway with the real pi agent (Chat Completions)", () => {
  it.live("a tool-using session completes the same directly and through Baton; the thread holds every message once", () =>
    Effect.scoped(Effect.gen(function*() {
      // Directly against the scripted upstream.
      const direct = yield* ModelApi.start
      const directDir = tempDir("baton-pi-direct-")
      direct.enqueue(...script(directDir))
      const directResult = yield* Pi.run({ baseUrl: `${direct.url}/v1`, apiKey: "sk-direct-0123456789", model: "gpt-pi", cwd: directDir, prompt: "do the thing" })
      expect(directResult.lastText).toBe("All done.")
      expect(direct.requests.length).toBe(5)

      // Through Baton.
      const upstream = yield* ModelApi.start
      const viaDir = tempDir("baton-pi-via-")
      upstream.enqueue(...script(viaDir))
      // Offload off for this comparison (with it on, thread_read joins the tools; the offload session is below).
      const settings = yield* settingsFor(
        [instance("chat", "openai-chat", upstream, { toolResultOffload: false })],
        { TEST_MODEL_KEY: marker },
        undefined,
        { gateway: { routes: [{ model: "gpt-*", provider: "chat" }] } }
      )
      yield* Effect.gen(function*() {
        const server = yield* HttpServer.HttpServer
        const port = (server.address as HttpServer.TcpAddress).port
        const via = yield* Pi.run({ baseUrl: `http://127.0.0.1:${port}/v1`, apiKey: adminToken, model: "gpt-pi", cwd: viaDir, prompt: "do the thing" })

        // The session ends the same way, with the same effects on disk and the same tool results.
        expect(via.lastText).toBe(directResult.lastText)
        expect(Fs.readFileSync(Path.join(viaDir, "note.txt"), "utf8")).toBe("line one\nline two\n")
        const results = (r: Pi.Result) => r.messages.filter((m) => m.role === "toolResult").map((m) => [m.toolCallId, m.content.map((c) => c.text ?? "").join("")] as const)
        expect(results(via).map(([id, text]) => [id, comparable(text, viaDir)])).toEqual(results(directResult).map(([id, text]) => [id, comparable(text, directDir)]))
        // pi keeps the last 2,000 lines of a long output (and says where the whole is): what the model got.
        expect(results(via).find(([id]) => id === "call_5")![1]).toContain("[Showing lines 1002-3001 of 3001.")

        // The upstream got pi's requests unchanged (but for the directory), Baton's key as Bearer.
        expect(upstream.requests.length).toBe(direct.requests.length)
        upstream.requests.forEach((r, i) => {
          const d = direct.requests[i]!
          expect(r.url).toBe(d.url)
          expect(comparable(r.body, viaDir)).toBe(comparable(d.body, directDir))
          expect(r.headers["authorization"]).toBe(`Bearer ${marker}`)
        })

        // One thread, one completed run per request with the usage the upstream reported.
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        expect(threads.length).toBe(1)
        const threadId = threads[0]!.id
        const page = yield* api.runs.list({ path: { threadId }, urlParams: {} })
        expect(page.runs.map((r) => r.status)).toEqual(["completed", "completed", "completed", "completed", "completed"])
        expect(page.costs.map((c) => [c.inputTokens, c.cacheReadTokens, c.outputTokens])).toEqual(page.runs.map(() => [900, 2_000, 40]))

        // Every message exactly once: the prompt, each call and its result, the assistant's texts.
        const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
        expect(items.filter((i) => i.kind === "user_message").map((i) => i.text)).toEqual(["do the thing"])
        for (const id of ["call_1", "call_2", "call_3", "call_4", "call_5"]) {
          expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === id).length).toBe(1)
          expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === id).length).toBe(1)
        }
        expect(items.filter((i) => i.kind === "assistant_message").map((i) => i.text)).toEqual(["Running echo.", "All done."])
        expect(items.find((i) => i.kind === "tool_result" && i.toolCallId === "call_1")?.text.trim()).toBe("hello-from-pi")
        expect(items.find((i) => i.kind === "tool_result" && i.toolCallId === "call_5")?.text).toBe(results(via).find(([id]) => id === "call_5")![1])
        expect(items.length).toBe(1 + 5 * 2 + 2)
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 180_000 })

  it.live("a long session with offload on: pi completes it the same way (a thread_read round hidden from it); the upstream sees stubs exactly from the reported flushes, and otherwise what pi sent", () =>
    Effect.scoped(Effect.gen(function*() {
      const rounds = 16
      /** Round `r`'s command: about 28,000 characters of output (under pi's 2,000-line and 50 KB truncation). */
      const command = (r: number) => `seq -f "src/module${r}/file%g.ts: export const value = compute(r${r}) // a line long enough to weigh in the window" 1 300`
      const long = () => [
        ...Array.from({ length: rounds }, (_, i) => ModelApi.answer("openai-chat", "", usage, [{ id: `call_${i + 1}`, name: "bash", arguments: JSON.stringify({ command: command(i + 1) }) }])),
        ModelApi.answer("openai-chat", "All sixteen listed.", usage)
      ]
      const direct = yield* ModelApi.start
      const directDir = tempDir("baton-pi-long-direct-")
      direct.enqueue(...long())
      const directResult = yield* Pi.run({ baseUrl: `${direct.url}/v1`, apiKey: "sk-direct-0123456789", model: "gpt-pi", cwd: directDir, prompt: "list the modules" })
      expect(directResult.lastText).toBe("All sixteen listed.")
      expect(direct.requests.length).toBe(rounds + 1)

      const upstream = yield* ModelApi.start
      const viaDir = tempDir("baton-pi-long-via-")
      // Through Baton the model reads the first output back before its last answer (thread_read, offered only
      // through Baton): the gateway answers it and continues, pi never sees the call.
      const script = long()
      upstream.enqueue(
        ...script.slice(0, -1),
        ModelApi.answer("openai-chat", "", usage, [{ id: "call_read", name: "thread_read", arguments: JSON.stringify({ refs: "tool:call_1", limit: 32_000 }) }]),
        script.at(-1)!
      )
      const settings = yield* settingsFor(
        [instance("chat", "openai-chat", upstream, { prices: { input: 1.25, cacheWrite: 0, cacheRead: 0.125, output: 10 } })],
        { TEST_MODEL_KEY: marker },
        undefined,
        { gateway: { routes: [{ model: "gpt-*", provider: "chat" }] } }
      )
      yield* Effect.gen(function*() {
        const server = yield* HttpServer.HttpServer
        const port = (server.address as HttpServer.TcpAddress).port
        const via = yield* Pi.run({ baseUrl: `http://127.0.0.1:${port}/v1`, apiKey: adminToken, model: "gpt-pi", cwd: viaDir, prompt: "list the modules" })

        // The session ends the same way, with the same tool results (pi never sees a stub: it keeps its own history).
        expect(via.lastText).toBe(directResult.lastText)
        const results = (r: Pi.Result) => r.messages.filter((m) => m.role === "toolResult").map((m) => [m.toolCallId, m.content.map((c) => c.text ?? "").join("")] as const)
        expect(results(via)).toEqual(results(directResult))
        expect(results(via).every(([, text]) => text.length > 25_000)).toBe(true)
        expect(via.messages.flatMap((m) => m.content.filter((c) => c.type === "toolCall").map((c) => c.name))).toEqual(Array.from({ length: rounds }, () => "bash"))
        // The upstream got one request more: the continuation after the hidden read, carrying the exact original.
        expect(upstream.requests.length).toBe(direct.requests.length + 1)
        const continuation = JSON.parse(upstream.requests.at(-1)!.body) as { messages: Array<Record<string, unknown>> }
        expect(continuation.messages.at(-2)).toMatchObject({ role: "assistant", tool_calls: [{ id: "call_read", function: { name: "thread_read" } }] })
        expect(continuation.messages.at(-1)).toMatchObject({ role: "tool", tool_call_id: "call_read" })
        expect(String(continuation.messages.at(-1)!.content)).toContain(results(via)[0]![1])

        // Flushes reported; the upstream's requests extend each other except exactly at them.
        type Body = { messages: Array<Record<string, unknown>>; tools: Array<{ function: { name: string } }> }
        const bodies = upstream.requests.slice(0, -1).map((r) => JSON.parse(r.body) as Body)
        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: { limit: 100 } })).runs
        expect(runs.map((r) => r.status)).toEqual(bodies.map(() => "completed"))
        const items = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
        expect(items.filter((i) => i.toolName === "thread_read")).toEqual([])
        const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
        const flushes = events.filter((e) => e.type === "gateway.offloaded").map((e) => e.payload as { runId: string; refs: Array<string> })
        expect(flushes.length).toBeGreaterThanOrEqual(1)
        const flushAt = flushes.map((f) => runs.findIndex((r) => r.id === f.runId))
        const breaks: Array<number> = []
        for (let i = 1; i < bodies.length; i++) {
          const previous = bodies[i - 1]!.messages.map((m) => JSON.stringify(m))
          const next = bodies[i]!.messages.map((m) => JSON.stringify(m))
          if (!previous.every((m, k) => next[k] === m)) breaks.push(i)
        }
        expect(breaks).toEqual([...new Set(flushAt)].sort((a, b) => a - b))
        expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])

        // Each request is what pi sent (the direct run's request, modulo the directory) but for the stubs of the
        // reported refs so far and thread_read after pi's tools.
        const reported = new Set<string>()
        bodies.forEach((b, i) => {
          for (const f of flushes) if (runs.findIndex((r) => r.id === f.runId) === i) for (const ref of f.refs) reported.add(ref.slice("tool:".length))
          expect(b.tools.at(-1)!.function.name).toBe("thread_read")
          const sent = JSON.parse(comparable(direct.requests[i]!.body, directDir)) as Body
          const stubbed = b.messages.filter((m) => m.role === "tool" && String(m.content).startsWith("[offloaded, thread_read tool:")).map((m) => String(m.tool_call_id))
          expect(new Set(stubbed)).toEqual(new Set([...reported].filter((id) => sent.messages.some((m) => m.tool_call_id === id))))
          const restored = b.messages.map((m) => (m.role === "tool" && stubbed.includes(String(m.tool_call_id)) ? sent.messages.find((s) => s.role === "tool" && s.tool_call_id === m.tool_call_id)! : m))
          expect(JSON.parse(comparable(JSON.stringify({ ...b, messages: restored, tools: b.tools.slice(0, -1) }), viaDir))).toEqual(sent)
        })
        expect(reported.size).toBeGreaterThan(0)
        // The last request is well under pi's.
        expect(upstream.requests.at(-2)!.body.length).toBeLessThan(direct.requests.at(-1)!.body.length / 2)
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 300_000 })
})
