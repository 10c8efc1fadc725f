/**
 * Codex's sub-agents through the gateway (issue 14): the real `codex exec` (`@openai/codex` 0.171.0) spawns sub-agents
 * offline with its default features (`multi_agent`, on by default: the main agent's tools carry a `namespace` tool
 * `multi_agent_v1` with `spawn_agent`, `wait_agent`, `send_input`, `resume_agent`, `close_agent`). A loopback
 * Responses upstream plays the model: the main agent calls `spawn_agent` (the call item carries
 * `"namespace":"multi_agent_v1"`), then `wait_agent` on the id the spawn returned, then answers; the sub-agent runs a
 * shell round (`exec_command`) and answers. Each sub-agent request carries its own `thread-id` (its Codex thread),
 * the parent's `session-id` and `prompt_cache_key`, and `x-codex-turn-metadata` with `parent_thread_id` and
 * `thread_source: "subagent"`; Baton keys a Responses conversation by `thread-id` first, so through Baton each Codex
 * thread is its own Baton thread: every request recorded once in its own thread, every input item exactly once, no
 * divergence, nothing of one conversation in the other; the sub-agent's thread names its parent's (`parentThreadId`,
 * the parent's `subAgents`) and is titled as a sub-agent. Run with the sub-agent started empty and with
 * `fork_context` (its history the parent's, then its task), and with `multi_agent_v2`.
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

type Entry = Record<string, unknown>

const events = (n: number, items: ReadonlyArray<Entry>): Reply =>
  sse(frame("openai-responses", [
    { type: "response.created", response: { id: `resp_${n}` } },
    ...items.map((item, i) => ({ type: "response.output_item.done", output_index: i, item })),
    { type: "response.completed", response: { id: `resp_${n}`, usage: usage(2_000 + n * 100, 10, 1_000) } }
  ].map((l) => JSON.stringify(l))))

const say = (n: number, text: string) => ({ type: "message", role: "assistant", id: `msg_${n}`, status: "completed", content: [{ type: "output_text", text, annotations: [] }] })
/**
 * How the session spawns: Codex's default `multi_agent` (namespace `multi_agent_v1`; `fork`: with `fork_context`), or
 * `multi_agent_v2` (namespace `collaboration`; the task and the answer travel as `agent_message` input items).
 */
type Mode = "v1" | "v1 fork" | "v2"

/** A call of a tool of Codex's sub-agent namespace. */
const agentCall = (mode: Mode, n: number, name: string, args: object) => ({
  type: "function_call",
  id: `fc_${n}`,
  call_id: `call_${name}`,
  name,
  namespace: mode === "v2" ? "collaboration" : "multi_agent_v1",
  arguments: JSON.stringify(args)
})
const shell = (n: number, cmd: string) => ({ type: "function_call", id: `fc_${n}`, call_id: "call_sub_shell", name: "exec_command", arguments: JSON.stringify({ cmd }) })

const prompt = "Use a sub-agent to write sub.txt, then tell me what it did."
const task = "Write sub.txt containing 'from the sub-agent' and report."
const subAnswer = "SUB: wrote sub.txt."
const mainAnswer = "MAIN: the sub-agent wrote sub.txt."

const outputs = (body: Entry) => (body.input as ReadonlyArray<Entry>).filter((i) => i.type === "function_call_output")

/**
 * The scripted model, for both conversations: the first `thread-id` it sees is the main agent's. The main agent spawns
 * (as `mode` says), waits on the spawned id, answers; the sub-agent writes the file, answers.
 */
const model = (mode: Mode) => {
  let main: string | null = null
  let n = 0
  return (request: Received): Reply => {
    n++
    const body = JSON.parse(request.body) as Entry
    const thread = String(request.headers["thread-id"])
    main ??= thread
    const done = outputs(body)
    if (thread !== main) {
      return events(n, done.some((o) => o.call_id === "call_sub_shell") ? [say(n, subAnswer)] : [shell(n, "printf 'from the sub-agent\\n' > sub.txt && echo ok")])
    }
    const spawned = done.find((o) => o.call_id === "call_spawn_agent")
    if (spawned === undefined) {
      const args = mode === "v2" ? { task_name: "writer", message: task, fork_turns: "none" } : { message: task, ...(mode === "v1 fork" ? { fork_context: true } : {}) }
      return events(n, [agentCall(mode, n, "spawn_agent", args)])
    }
    if (!done.some((o) => o.call_id === "call_wait_agent")) {
      if (mode === "v2") return events(n, [agentCall(mode, n, "wait_agent", { timeout_ms: 60_000 })])
      const id = (JSON.parse(String(spawned.output)) as { agent_id: string }).agent_id
      return events(n, [agentCall(mode, n, "wait_agent", { targets: [id], timeout_ms: 60_000 })])
    }
    return events(n, [say(n, mainAnswer)])
  }
}

const openAiInstance = (url: string) => ({
  kind: "openai-responses",
  name: "openai",
  baseUrl: `${url}/v1`,
  model: "gpt-loopback",
  apiKeyEnv: "TEST_MODEL_KEY",
  contextWindow: 200_000,
  autoCompactThreshold: null,
  maxOutputTokens: 32_000,
  prices: { input: 1.25, cacheWrite: 0, cacheRead: 0.125, output: 10 },
  maxRetries: 0
})

const tempDir = (prefix: string) =>
  Effect.acquireRelease(
    Effect.sync(() => Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), prefix)))),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )

const metadataOf = (r: Received) => JSON.parse(String(r.headers["x-codex-turn-metadata"])) as Record<string, unknown>

describe("Gateway with Codex's sub-agents", () => {
  for (const mode of ["v1", "v1 fork", "v2"] as const) {
    const fork = mode === "v1 fork"
    it.live(`a spawned sub-agent (${mode}) and its parent complete through Baton, each Codex thread its own Baton thread, every item once`, () =>
      Effect.scoped(Effect.gen(function*() {
        const upstream = yield* loopback
        const script = model(mode)
        for (let i = 0; i < 8; i++) upstream.enqueue(script)
        const settings = yield* settingsFor([openAiInstance(upstream.url)], { TEST_MODEL_KEY: marker }, undefined, { gateway: { routes: [{ model: "gpt-*", provider: "openai" }] } })
        yield* Effect.gen(function*() {
          const server = yield* HttpServer.HttpServer
          const port = (server.address as HttpServer.TcpAddress).port
          const home = yield* codexHome(`http://127.0.0.1:${port}`, { envKey: "CODEX_TEST_KEY" })
          const dir = yield* tempDir("baton-codex-sub-")
          const result = yield* CodexExec.exec({
            codexHome: home,
            cwd: dir,
            prompt,
            env: { CODEX_TEST_KEY: adminToken },
            config: mode === "v2" ? ["features.multi_agent_v2=true"] : []
          })

          // The session completes: the sub-agent ran its command, the main agent answered after waiting on it.
          expect(result.messages).toEqual([mainAnswer])
          expect(Fs.readFileSync(Path.join(dir, "sub.txt"), "utf8")).toBe("from the sub-agent\n")

          // What Codex sent: three requests of the main thread, two of the sub-agent's, its own thread-id, the parent's
          // session-id and prompt_cache_key, its parent named in the turn metadata; the sub-agent has no agent tools.
          const namespace = mode === "v2" ? "collaboration" : "multi_agent_v1"
          const main = upstream.requests.filter((r) => r.headers["thread-id"] === result.threadId)
          const sub = upstream.requests.filter((r) => r.headers["thread-id"] !== result.threadId)
          expect([main.length, sub.length]).toEqual([3, 2])
          const subThread = String(sub[0]!.headers["thread-id"])
          expect(subThread).not.toBe(result.threadId)
          for (const r of sub) {
            expect(r.headers["thread-id"]).toBe(subThread)
            expect(r.headers["session-id"]).toBe(result.threadId)
            expect((JSON.parse(r.body) as Entry).prompt_cache_key).toBe(result.threadId)
            expect(metadataOf(r)).toMatchObject({ parent_thread_id: result.threadId, thread_source: "subagent", subagent_kind: "thread_spawn" })
            expect(((JSON.parse(r.body) as Entry).tools as ReadonlyArray<Entry>).map((t) => t.name)).not.toContain(namespace)
          }
          for (const r of main) expect(r.headers["session-id"]).toBe(result.threadId)
          expect(((JSON.parse(main[0]!.body) as Entry).tools as ReadonlyArray<Entry>).map((t) => t.name)).toContain(namespace)
          const mainInputs = main.map((r) => (JSON.parse(r.body) as { input: ReadonlyArray<Entry> }).input)
          const subInputs = sub.map((r) => (JSON.parse(r.body) as { input: ReadonlyArray<Entry> }).input)
          // With fork_context, the sub-agent's history starts with its parent's (up to the spawn), then its task.
          if (fork) expect(subInputs[0]!.slice(1, mainInputs[0]!.length)).toEqual(mainInputs[0]!.slice(1))

          // Through Baton: one thread per Codex thread, every request a completed run of its own thread.
          const api = yield* client()
          const threads = (yield* api.threads.list({ urlParams: {} })).threads
          // The sub-agent's thread is titled as one and names its parent's, which lists it (x-codex-turn-metadata's
          // parent_thread_id).
          const subTitle = `Codex sub-agent ${subThread} (of ${result.threadId})`
          expect(threads.map((t) => t.title).sort()).toEqual([`Codex session ${result.threadId}`, subTitle].sort())
          const mainThreadId = threads.find((t) => t.title === `Codex session ${result.threadId}`)!.id
          const subThreadId = threads.find((t) => t.title === subTitle)!.id
          const [mainSnapshot, subSnapshot] = [yield* api.threads.get({ path: { threadId: mainThreadId } }), yield* api.threads.get({ path: { threadId: subThreadId } })]
          expect([mainSnapshot.parentThreadId, mainSnapshot.subAgents.map((t) => t.id)]).toEqual([null, [subThreadId]])
          expect([subSnapshot.parentThreadId, subSnapshot.subAgents]).toEqual([mainThreadId, []])
          for (const [id, requests, inputs, answer] of [[result.threadId, main, mainInputs, mainAnswer], [subThread, sub, subInputs, subAnswer]] as const) {
            const threadId = id === result.threadId ? mainThreadId : subThreadId
            const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
            // The sub-agent's first run's prompt is its task (v2: the agent_message's text, its header).
            if (id === subThread) expect(runs[0]!.prompt).toEqual(mode === "v2" ? expect.stringMatching(/^Message Type: NEW_TASK/) : task)
            expect(runs.map((r) => r.status)).toEqual(Array(requests.length).fill("completed"))
            const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
            // Every input item of the conversation once (message ids: the last request's items and the last reply).
            expect(new Set(items.map((i) => i.messageId)).size).toBe(inputs.at(-1)!.length + 1)
            expect(items.filter((i) => i.kind === "assistant_message").map((i) => i.text)).toEqual([answer])
            const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
            expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
            if (id === result.threadId) {
              // The main thread: the user's prompt, the spawn and the wait with their outputs, once; nothing of the
              // sub-agent's own rounds.
              expect(items.filter((i) => i.kind === "user_message" && i.text === prompt).length).toBe(1)
              for (const call of ["call_spawn_agent", "call_wait_agent"]) {
                expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === call).length).toBe(1)
                expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === call).length).toBe(1)
              }
              expect(items.filter((i) => i.toolCallId === "call_sub_shell")).toEqual([])
              expect(items.filter((i) => i.kind === "user_message" && i.text === task)).toEqual([])
              // v2: the sub-agent's answer reaches the parent as an agent_message, recorded as the agent's text.
              if (mode === "v2") expect(items.filter((i) => i.kind === "user_message" && i.text.includes(`Payload:\n${subAnswer}`)).length).toBe(1)
            } else {
              // The sub-agent's thread: its task once, its shell round once, nothing of the parent after the spawn.
              if (mode === "v2") {
                // The task arrives as an agent_message: its header as text, its (encrypted) payload as a part.
                expect(items.filter((i) => i.kind === "user_message" && i.text.startsWith("Message Type: NEW_TASK")).length).toBe(1)
                expect(items.filter((i) => i.kind === "user_message" && i.text === "[encrypted_content]").length).toBe(1)
              } else {
                expect(items.filter((i) => i.kind === "user_message" && i.text === task).length).toBe(1)
              }
              expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === "call_sub_shell").length).toBe(1)
              const results = items.filter((i) => i.kind === "tool_result" && i.toolCallId === "call_sub_shell")
              expect(results.length).toBe(1)
              expect(results[0]!.text).toContain("ok")
              expect(items.filter((i) => i.toolCallId === "call_spawn_agent" || i.toolCallId === "call_wait_agent")).toEqual([])
              expect(items.filter((i) => i.kind === "user_message" && i.text === prompt).length).toBe(fork ? 1 : 0)
            }
          }
        }).pipe(Effect.provide(serveSettings(settings)))
      })), { timeout: 180_000 })
  }
})
