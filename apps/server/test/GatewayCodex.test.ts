/**
 * The gateway with the real Codex CLI (issue 14): `codex exec` (the pinned `@openai/codex` 0.171.0) with a model
 * provider (`wire_api = "responses"`) whose base URL is a loopback Responses upstream scripted to lead it through two
 * turns (the second a `codex exec resume` of the same thread) with three shell tool rounds (`exec_command`) in a
 * temporary directory, once pointed at the upstream directly and once through `baton serve`'s gateway. Through Baton
 * the session ends the same, the upstream receives Codex's requests unchanged (with Baton's key instead of the
 * agent's token), and Baton's thread holds every input item of the conversation exactly once, one run per request.
 */
import type { Item } from "@baton/contracts"
import { HttpServer } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { codexHome, usage } from "../../../packages/providers/test/support/CodexLoopback.js"
import { frame, loopback, type Received, type Reply, sse } from "../../../packages/providers/test/support/Loopback.js"
import { adminToken, client, get, raw } from "./helpers.js"
import * as CodexExec from "./support/CodexExec.js"
import { marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"

const events = (lines: ReadonlyArray<object>): Reply => sse(frame("openai-responses", lines.map((l) => JSON.stringify(l))))

/** A response whose only output is an `exec_command` call of `cmd` (call id `call_<n>`), billed `input` tokens in. */
const shell = (n: number, cmd: string, input: number): Reply =>
  events([
    { type: "response.created", response: { id: `resp_${n}` } },
    { type: "response.output_item.done", output_index: 0, item: { type: "function_call", id: `fc_${n}`, call_id: `call_${n}`, name: "exec_command", arguments: JSON.stringify({ cmd }) } },
    { type: "response.completed", response: { id: `resp_${n}`, usage: usage(input, 12, input - 200) } }
  ])

/** A response saying `text` (message id `msg_<n>`). */
const say = (n: number, text: string, input: number): Reply =>
  events([
    { type: "response.created", response: { id: `resp_${n}` } },
    { type: "response.output_item.done", output_index: 0, item: { type: "message", role: "assistant", id: `msg_${n}`, status: "completed", content: [{ type: "output_text", text, annotations: [] }] } },
    { type: "response.completed", response: { id: `resp_${n}`, usage: usage(input, 8, input - 200) } }
  ])

/** The scripted session: turn 1 (two shell rounds, an answer), turn 2 (one shell round, an answer). */
const turn1 = [
  shell(1, "printf 'line one\\nline two\\n' > note.txt && echo written", 10_000),
  shell(2, "wc -l < note.txt", 10_300),
  say(3, "The note has 2 lines.", 10_600)
]
const turn2 = [shell(4, "cat note.txt", 10_900), say(5, "Done: the note reads line one, line two.", 11_200)]
const prompt1 = "Write a two-line note and count its lines."
const prompt2 = "Now show me the note."

/** Baton's `openai-responses` instance over the loopback upstream at `url` (its key in `TEST_MODEL_KEY`), `extra` settings added. */
const openAiInstance = (url: string, extra: Record<string, unknown> = {}) => ({
  kind: "openai-responses",
  name: "openai",
  baseUrl: `${url}/v1`,
  model: "gpt-loopback",
  apiKeyEnv: "TEST_MODEL_KEY",
  contextWindow: 200_000,
  autoCompactThreshold: null,
  maxOutputTokens: 32_000,
  prices: { input: 1.25, cacheWrite: 0, cacheRead: 0.125, output: 10 },
  maxRetries: 0,
  ...extra
})

/** A temporary working directory for Codex (its real path), removed with the scope. */
const tempDir = (prefix: string) =>
  Effect.acquireRelease(
    Effect.sync(() => Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), prefix)))),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )

/**
 * A request body with what differs between two runs of one session replaced: the directory and CODEX_HOME, uuids
 * (thread, turn, installation and item ids: time-based), the command runner's chunk ids and wall times, times.
 */
const comparable = (body: string, dir: string, home: string) =>
  body.split(dir).join("<dir>").split(home).join("<home>")
    .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, "<uuid>")
    .replace(/Chunk ID: [0-9a-f]+/g, "Chunk ID: <chunk>")
    .replace(/Wall time: [0-9.]+ seconds/g, "Wall time: <wall> seconds")
    .replace(/(turn_started_at_unix_ms\\*":)\d+/g, "$1<ms>")

/**
 * The body with its `client_metadata` keys sorted: Codex serialises that map in an order of its own each process
 * (seen: the same session's first request with the keys in two orders), the rest of the body in a fixed order.
 */
const stableMetadata = (body: string) => {
  const parsed = JSON.parse(body) as Record<string, unknown>
  const metadata = parsed["client_metadata"] as Record<string, unknown> | undefined
  if (metadata === undefined) return body
  return JSON.stringify({ ...parsed, client_metadata: Object.fromEntries(Object.entries(metadata).sort(([a], [b]) => a.localeCompare(b))) })
}

interface Body {
  readonly input: ReadonlyArray<Record<string, unknown>>
}

/** Runs the two turns against `baseUrl` with `key`: both results, the directory and CODEX_HOME. */
const session = (baseUrl: string, key: string) =>
  Effect.gen(function*() {
    const home = yield* codexHome(baseUrl, { envKey: "CODEX_TEST_KEY" })
    const dir = yield* tempDir("baton-codex-gw-")
    const env = { CODEX_TEST_KEY: key }
    const first = yield* CodexExec.exec({ codexHome: home, cwd: dir, prompt: prompt1, env })
    const second = yield* CodexExec.exec({ codexHome: home, cwd: dir, prompt: prompt2, env, resume: first.threadId })
    return { first, second, dir, home: Fs.realpathSync(home) }
  })

describe("Gateway with the real Codex CLI", () => {
  it.live("a two-turn session with three shell rounds completes the same directly and through Baton; the upstream gets the same bodies; the thread holds every item once", () =>
    Effect.scoped(Effect.gen(function*() {
      // Directly against the scripted upstream.
      const direct = yield* loopback
      direct.enqueue(...turn1, ...turn2)
      const d = yield* session(direct.url, "sk-direct-0123456789")

      // Through Baton: the agent's base URL is the gateway, its key a Baton token; Baton's instance holds the upstream's key.
      const upstream = yield* loopback
      upstream.enqueue(...turn1, ...turn2)
      // Offload off: this session is about pass-through (with it on, `thread_read` joins the tools; GatewayCodexOffload.test).
      const settings = yield* settingsFor(
        [openAiInstance(upstream.url, { toolResultOffload: false })],
        { TEST_MODEL_KEY: marker },
        undefined,
        { gateway: { routes: [{ model: "gpt-*", provider: "openai" }] } }
      )
      yield* Effect.gen(function*() {
        const server = yield* HttpServer.HttpServer
        const port = (server.address as HttpServer.TcpAddress).port
        const v = yield* session(`http://127.0.0.1:${port}`, adminToken)

        // The session ends the same way, with the same effects on disk.
        for (const [via, dir] of [[d.first, d.dir], [v.first, v.dir]] as const) {
          expect(via.messages).toEqual(["The note has 2 lines."])
          expect(via.commands.map((c) => [c.output, c.exitCode])).toEqual([["written\n", 0], ["2\n", 0]])
          expect(Fs.readFileSync(Path.join(dir, "note.txt"), "utf8")).toBe("line one\nline two\n")
        }
        expect(v.second.messages).toEqual(d.second.messages)
        expect(v.second.commands).toEqual(d.second.commands)
        expect(v.second.commands.map((c) => c.output)).toEqual(["line one\nline two\n"])
        expect(v.second.threadId).toBe(v.first.threadId)

        // The upstream got Codex's requests unchanged: the same bodies (but for directories, ids and times), the same
        // path, Baton's key instead of the agent's token.
        expect(upstream.requests.length).toBe(5)
        expect(direct.requests.length).toBe(5)
        upstream.requests.forEach((r: Received, i) => {
          const o = direct.requests[i]!
          expect(r.url).toBe(o.url)
          expect(r.url).toBe("/v1/responses")
          expect(comparable(stableMetadata(r.body), v.dir, v.home)).toBe(comparable(stableMetadata(o.body), d.dir, d.home))
          expect(r.headers["authorization"]).toBe(`Bearer ${marker}`)
          expect(o.headers["authorization"]).toBe("Bearer sk-direct-0123456789")
          expect(r.headers["session-id"]).toBe(v.first.threadId)
          expect(r.headers["originator"]).toBe(o.headers["originator"])
        })

        // One thread for the Codex thread, one completed run per request with its usage.
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        expect(threads.map((t) => t.title)).toEqual([`Codex session ${v.first.threadId}`])
        const threadId = threads[0]!.id
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
        expect(runs.map((r) => r.status)).toEqual(["completed", "completed", "completed", "completed", "completed"])
        expect(runs.map((r) => r.prompt)).toEqual([prompt1, "", "", prompt2, ""])
        const inputs = [10_000, 10_300, 10_600, 10_900, 11_200]
        for (const [i, r] of runs.entries()) {
          const view = yield* api.runs.get({ path: { runId: r.id }, urlParams: {} })
          expect(view.cost).toMatchObject({ inputTokens: 200, cacheReadTokens: inputs[i]! - 200, cacheWriteTokens: 0, providerInstance: "openai" })
        }

        // Every input item exactly once: the last request's items and the last reply, one message id each.
        const items: Array<Item> = []
        let afterSeq = 0
        for (;;) {
          const page = yield* api.items.list({ path: { threadId }, urlParams: { afterSeq, limit: 500 } })
          items.push(...page.items)
          if (page.nextAfterSeq === null) break
          afterSeq = page.nextAfterSeq
        }
        const last = JSON.parse(upstream.requests.at(-1)!.body) as Body
        expect(new Set(items.map((i) => i.messageId)).size).toBe(last.input.length + 1)
        for (const id of ["call_1", "call_2", "call_4"]) {
          expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === id).length).toBe(1)
          expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === id && i.toolName === "exec_command").length).toBe(1)
        }
        expect(items.filter((i) => i.kind === "user_message" && i.text === prompt1).length).toBe(1)
        expect(items.filter((i) => i.kind === "user_message" && i.text === prompt2).length).toBe(1)
        expect(items.filter((i) => i.kind === "assistant_message").map((i) => i.text)).toEqual(["The note has 2 lines.", "Done: the note reads line one, line two."])
        expect(items.find((i) => i.kind === "tool_result" && i.toolCallId === "call_2")?.text).toContain("2")
        const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
        expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 180_000 })

  it.live("a gateway restart between two turns of a Codex session loses nothing and stores nothing twice", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* loopback
      upstream.enqueue(...turn1, ...turn2)
      const data = yield* tempDir("baton-codex-restart-")
      const settings = yield* settingsFor([openAiInstance(upstream.url)], { TEST_MODEL_KEY: marker }, data, { gateway: { routes: [{ model: "gpt-*", provider: "openai" }] } })
      const dir = yield* tempDir("baton-codex-gw-")
      const port = Effect.map(HttpServer.HttpServer, (server) => (server.address as HttpServer.TcpAddress).port)
      // The first server process takes turn 1, then stops; a second one on the same database (another port: Codex's
      // base URL follows it) takes turn 2.
      const home = yield* codexHome("http://127.0.0.1:1", { envKey: "CODEX_TEST_KEY" })
      const turn = (prompt: string, resume?: string) =>
        Effect.gen(function*() {
          const baseUrl = `http://127.0.0.1:${yield* port}/v1`
          return yield* CodexExec.exec({
            codexHome: home,
            cwd: dir,
            prompt,
            env: { CODEX_TEST_KEY: adminToken },
            config: [`model_providers.loopback.base_url="${baseUrl}"`],
            ...(resume === undefined ? {} : { resume })
          })
        }).pipe(Effect.provide(serveSettings(settings)))
      const first = yield* turn(prompt1)
      const second = yield* turn(prompt2, first.threadId)
      expect(second.messages).toEqual(["Done: the note reads line one, line two."])
      yield* Effect.gen(function*() {
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        expect(threads.map((t) => t.title)).toEqual([`Codex session ${first.threadId}`])
        const threadId = threads[0]!.id
        const items = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
        const last = JSON.parse(upstream.requests.at(-1)!.body) as Body
        expect(new Set(items.map((i) => i.messageId)).size).toBe(last.input.length + 1)
        expect(items.filter((i) => i.kind === "user_message" && (i.text === prompt1 || i.text === prompt2)).map((i) => i.text)).toEqual([prompt1, prompt2])
        expect((yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs.map((r) => r.status)).toEqual(Array(5).fill("completed"))
        const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
        expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 180_000 })

  // Codex compacts by itself past `model_auto_compact_token_limit`: with a provider of its own (the default here) it
  // asks the model for a summary (a request ending with its CONTEXT CHECKPOINT COMPACTION prompt); with remote
  // compaction v2 (`capabilities.remote_compaction = "v2"`) it sends its history with a `compaction_trigger` item
  // and expects one `compaction` item back. Either way it is a `POST /v1/responses`, then Codex goes on from a rebuilt
  // history: through Baton that request is recorded as a divergence and becomes the new baseline.
  for (const mode of ["local", "remote v2"] as const) {
    it.live(`Codex's own compaction (${mode}) passes through; the rebuilt history is recorded as a divergence and the new baseline`, () =>
      Effect.scoped(Effect.gen(function*() {
        const upstream = yield* loopback
        const script = [shell(1, "echo one", 1_000), shell(2, "echo two", 9_000), shell(3, "echo three", 1_000), say(4, "Compacted and done.", 1_000)]
        const compacted: Array<Received> = []
        const model = (request: Received): Reply => {
          if (request.body.includes("\"compaction_trigger\"") || request.body.includes("CONTEXT CHECKPOINT COMPACTION")) {
            compacted.push(request)
            return request.body.includes("\"compaction_trigger\"")
              ? events([
                { type: "response.output_item.done", output_index: 0, item: { type: "compaction", id: "cmp_1", encrypted_content: "ENCRYPTED-SUMMARY" } },
                { type: "response.completed", response: { id: "resp_c", usage: usage(9_000, 30) } }
              ])
              : say(9, "SUMMARY: echoed one and two.", 9_000)
          }
          return script.shift() ?? say(99, "(no answer queued)", 100)
        }
        for (let i = 0; i < 5; i++) upstream.enqueue(model)
        const settings = yield* settingsFor(
          [openAiInstance(upstream.url)],
          { TEST_MODEL_KEY: marker },
          undefined,
          { gateway: { routes: [{ model: "gpt-*", provider: "openai" }] } }
        )
        yield* Effect.gen(function*() {
          const server = yield* HttpServer.HttpServer
          const port = (server.address as HttpServer.TcpAddress).port
          const home = yield* codexHome(`http://127.0.0.1:${port}`, { envKey: "CODEX_TEST_KEY", window: 20_000, autoCompact: 5_000 })
          const result = yield* CodexExec.exec({
            codexHome: home,
            cwd: yield* tempDir("baton-codex-compact-"),
            prompt: "Echo one, two and three.",
            env: { CODEX_TEST_KEY: adminToken },
            config: mode === "local" ? [] : ["model_providers.loopback.capabilities.remote_compaction=\"v2\""]
          })
          expect(result.messages).toEqual(["Compacted and done."])
          expect(result.commands.map((c) => c.output)).toEqual(["one\n", "two\n", "three\n"])
          expect(upstream.requests.map((r) => r.url)).toEqual(Array(5).fill("/v1/responses"))
          expect(compacted.length).toBe(1)
          expect(upstream.requests[2]).toBe(compacted[0])

          const api = yield* client()
          const threads = (yield* api.threads.list({ urlParams: {} })).threads
          expect(threads.length).toBe(1)
          const threadId = threads[0]!.id
          const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
          expect(runs.map((r) => r.status)).toEqual(Array(5).fill("completed"))
          // The request after the compaction starts again from Codex's rebuilt history: one divergence, at run 4, its
          // shared prefix shorter than what was stored; the next request extends it (no second divergence).
          const diverged = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text).filter((e) => e.type === "gateway.diverged")
          expect(diverged.map((e) => (e.payload as { runId: string }).runId)).toEqual([runs[3]!.id])
          const payload = diverged[0]!.payload as { sharedMessages: number; storedMessages: number; requestMessages: number }
          const stored = JSON.parse(upstream.requests[2]!.body).input.length + 1
          const rebuilt = JSON.parse(upstream.requests[3]!.body).input.length
          expect([payload.storedMessages, payload.requestMessages]).toEqual([stored, rebuilt])
          expect(payload.sharedMessages).toBeLessThan(stored)
          const items = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
          // The compaction's answer is on record (the summary, or Codex's opaque compaction item).
          expect(items.some((i) => i.text === (mode === "local" ? "SUMMARY: echoed one and two." : "[compaction]"))).toBe(true)
          expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === "call_3").length).toBe(1)
          expect(items.at(-1)?.text).toBe("Compacted and done.")
        }).pipe(Effect.provide(serveSettings(settings)))
      })), { timeout: 180_000 })
  }
})
