/**
 * The gateway with the real Claude Code CLI (issue 14): a loopback Anthropic upstream scripted to lead `claude -p`
 * through tool rounds (Bash `echo`, Write, Read, and a parallel Read + Bash) in a temporary directory, once with the
 * agent pointed at the upstream directly and once through `baton serve`'s gateway. Through Baton the session ends
 * the same, the upstream receives the agent's requests unchanged (with Baton's key instead of the agent's token), and
 * Baton's thread holds every message of the conversation exactly once, one run per request with its usage.
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

/** The scripted session in `dir`: five model requests, four of them tool rounds. */
const script = (dir: string) => [
  ModelApi.answer("anthropic-messages", "Running echo.", usage, [
    { id: "toolu_01", name: "Bash", arguments: JSON.stringify({ command: "echo hello-from-bash", description: "echo" }) }
  ]),
  ModelApi.answer("anthropic-messages", "", usage, [
    { id: "toolu_02", name: "Write", arguments: JSON.stringify({ file_path: Path.join(dir, "note.txt"), content: "line one\nline two\n" }) }
  ]),
  ModelApi.answer("anthropic-messages", "", usage, [
    { id: "toolu_03", name: "Read", arguments: JSON.stringify({ file_path: Path.join(dir, "note.txt") }) },
    { id: "toolu_04", name: "Bash", arguments: JSON.stringify({ command: "ls", description: "list" }) }
  ]),
  ModelApi.answer("anthropic-messages", "", usage, [
    { id: "toolu_05", name: "Bash", arguments: JSON.stringify({ command: "cat note.txt | wc -l", description: "count" }) }
  ]),
  ModelApi.answer("anthropic-messages", "All done.", usage)
]

const tempDir = (prefix: string) => Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), prefix)))

interface Body {
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content: unknown }>
  readonly metadata?: unknown
}

/** A request body with what differs between two runs of one session removed: the directory, the session and device. */
const comparable = (body: string, dir: string, home: string, session: string) =>
  body.split(dir).join("<dir>").split(dir.replace(/[^A-Za-z0-9]/g, "-")).join("<dir>").split(home).join("<home>").split(session).join("<session>").replace(/"device_id\\*":\\*"[0-9a-f]+\\*"/g, "<device>")

describe("Gateway with the real Claude Code", () => {
  it.live("a tool-using session completes the same directly and through Baton; the thread holds every message once", () =>
    Effect.scoped(Effect.gen(function*() {
      // Directly against the scripted upstream.
      const direct = yield* ModelApi.start
      const directDir = tempDir("baton-cc-direct-")
      direct.enqueue(...script(directDir))
      const directHome = tempDir("baton-cc-home-")
      const directResult = yield* ClaudeCode.run({ baseUrl: direct.url, apiKey: "sk-direct-0123456789", cwd: directDir, home: directHome, prompt: "do the thing" })
      expect(directResult.is_error).toBe(false)
      expect(directResult.result).toBe("All done.")

      // Through Baton.
      const upstream = yield* ModelApi.start
      const viaDir = tempDir("baton-cc-via-")
      upstream.enqueue(...script(viaDir))
      const settings = yield* settingsFor(
        // Offload off: this session is about pass-through (with it on, `thread_read` joins the tools; GatewayOffload.test).
        [instance("anthropic", "anthropic-messages", upstream, { toolResultOffload: false })],
        { TEST_MODEL_KEY: marker },
        undefined,
        { gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] } }
      )
      yield* Effect.gen(function*() {
        const server = yield* HttpServer.HttpServer
        const port = (server.address as HttpServer.TcpAddress).port
        const viaHome = tempDir("baton-cc-home-")
        const viaResult = yield* ClaudeCode.run({ baseUrl: `http://127.0.0.1:${port}`, apiKey: adminToken, cwd: viaDir, home: viaHome, prompt: "do the thing" })

        // The session ends the same way, with the same effects on disk.
        expect(viaResult.is_error).toBe(false)
        expect(viaResult.result).toBe(directResult.result)
        expect(viaResult.num_turns).toBe(directResult.num_turns)
        expect(Fs.readFileSync(Path.join(viaDir, "note.txt"), "utf8")).toBe(Fs.readFileSync(Path.join(directDir, "note.txt"), "utf8"))

        // The upstream got the agent's requests unchanged: the same bodies (but for the directory and the session)
        // and protocol headers, Baton's key instead of the agent's token.
        expect(upstream.requests.length).toBe(direct.requests.length)
        expect(upstream.requests.length).toBe(5)
        upstream.requests.forEach((r, i) => {
          const d = direct.requests[i]!
          expect(r.url).toBe(d.url)
          const a = comparable(r.body, viaDir, viaHome, viaResult.session_id)
          const b = comparable(d.body, directDir, directHome, directResult.session_id)
          expect(a).toBe(b)
          expect(r.headers["anthropic-version"]).toBe(d.headers["anthropic-version"])
          expect(r.headers["anthropic-beta"]).toBe(d.headers["anthropic-beta"])
          expect(r.headers["x-api-key"]).toBe(marker)
          expect(r.headers["authorization"]).toBeUndefined()
        })

        // One thread for the session, one run per request, each completed with its usage.
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        expect(threads.map((t) => t.title)).toEqual([`Claude Code session ${viaResult.session_id}`])
        const threadId = threads[0]!.id
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
        expect(runs.map((r) => r.status)).toEqual(["completed", "completed", "completed", "completed", "completed"])
        for (const r of runs) {
          const view = yield* api.runs.get({ path: { runId: r.id }, urlParams: {} })
          expect(view.cost).toMatchObject({ inputTokens: 1_000, cacheWriteTokens: 200, cacheReadTokens: 3_000, outputTokens: 50, providerInstance: "anthropic" })
        }

        // Every message exactly once: the last request's messages and the last reply, each one message id's items.
        const items: Array<Item> = []
        let afterSeq = 0
        for (;;) {
          const page = yield* api.items.list({ path: { threadId }, urlParams: { afterSeq, limit: 500 } })
          items.push(...page.items)
          if (page.nextAfterSeq === null) break
          afterSeq = page.nextAfterSeq
        }
        const last = JSON.parse(upstream.requests.at(-1)!.body) as Body
        const messageIds = [...new Set(items.map((i) => i.messageId))]
        expect(messageIds.length).toBe(last.messages.length + 1)
        for (const id of ["toolu_01", "toolu_02", "toolu_03", "toolu_04", "toolu_05"]) {
          expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === id).length).toBe(1)
          expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === id).length).toBe(1)
        }
        expect(items.filter((i) => i.kind === "user_message" && i.text === "do the thing").length).toBe(1)
        expect(items.filter((i) => i.kind === "assistant_message").map((i) => i.text)).toEqual(["Running echo.", "All done."])
        expect(items.find((i) => i.toolCallId === "toolu_01" && i.kind === "tool_result")?.text).toBe("hello-from-bash")
        expect(items.find((i) => i.toolCallId === "toolu_05" && i.kind === "tool_result")?.text).toBe("2")
        // The runs' items: the first holds the agent's opening messages, each later one a tool round's results.
        expect(runs[0]!.prompt).toBe("do the thing")
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 180_000 })
})
