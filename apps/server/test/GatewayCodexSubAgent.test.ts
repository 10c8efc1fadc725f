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
 *
 * Codex tells the parent that its sub-agent ended with a `<subagent_notification>` user message (v2: an
 * `agent_message`) sent from a detached task that races the wait's own result (`maybe_start_completion_watcher` in
 * codex-rs). Usually the notification is in the parent's request after the wait; when it arrives while that request
 * is in flight, Codex asks the model once more with it and prints both answers (CI, once under load: `expected
 * [ …(2) ] to deeply equal [ Array(1) ]`, the scripted model having played its final answer again). The scripted model
 * answers such a follow-up with `noted`; the test takes either order and asserts it whole, and the last test forces
 * the late order.
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
/** The main agent's answer to a request whose news is only the sub-agent's notification (after `mainAnswer`). */
const noted = "MAIN: noted, the sub-agent is done."

const outputs = (body: Entry) => (body.input as ReadonlyArray<Entry>).filter((i) => i.type === "function_call_output")
/** The text of an assistant message item Codex sends back, else null. */
const assistantText = (item: Entry) =>
  item.type === "message" && item.role === "assistant" ? (item.content as ReadonlyArray<{ readonly text?: string }>).map((c) => c.text ?? "").join("") : null
/** Whether the input already holds the main agent's answer: Codex asks again after it (a late notification). */
const answered = (body: Entry) => (body.input as ReadonlyArray<Entry>).some((i) => assistantText(i) === mainAnswer)
/** Whether an input item tells the parent that its sub-agent ended with `subAnswer` (v1: a user message; v2: an `agent_message`). */
const notifies = (item: Entry) =>
  ((item.type === "message" && item.role === "user") || item.type === "agent_message") && JSON.stringify(item.content).includes(subAnswer) &&
  (item.type === "agent_message" || JSON.stringify(item.content).includes("<subagent_notification>"))

/** One line a request for a failed test's report: thread, arrival, input size, the last input item (shortened). */
const requestLine = (main: string, t0: number) => (r: Received) => {
  const input = (JSON.parse(r.body) as { input: ReadonlyArray<Entry> }).input
  return `${r.headers["thread-id"] === main ? "main" : `sub ${String(r.headers["thread-id"])}`} +${r.at - t0}ms ${r.url} ${input.length} items, last: ${JSON.stringify(input.at(-1)).slice(0, 200)}`
}

/** What a failed test prints: every request the upstream received, then everything Codex printed. */
const report = (requests: ReadonlyArray<Received>, result: CodexExec.ExecResult | null) =>
  [
    "upstream requests:",
    ...requests.map(requestLine(result?.threadId ?? "", requests[0]?.at ?? 0)),
    "codex printed:",
    result?.output ?? "(codex exec failed: its output is in the error)"
  ].join("\n")

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
    if (answered(body)) return events(n, [say(n, noted)])
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
    it.live(`a spawned sub-agent (${mode}) and its parent complete through Baton, each Codex thread its own Baton thread, every item once`, (ctx) =>
      Effect.scoped(Effect.gen(function*() {
        const upstream = yield* loopback
        let ran: CodexExec.ExecResult | null = null
        ctx.onTestFailed(() => console.error(report(upstream.requests, ran)))
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
          ran = result
          const main = upstream.requests.filter((r) => r.headers["thread-id"] === result.threadId)
          const sub = upstream.requests.filter((r) => r.headers["thread-id"] !== result.threadId)
          // The sub-agent's notification came while the parent's request after the wait was in flight (see the top):
          // Codex asked once more.
          const late = main.length === 4
          const answers = late ? [mainAnswer, noted] : [mainAnswer]

          // The session completes: the sub-agent ran its command, the main agent answered after waiting on it.
          expect(result.messages).toEqual(answers)
          expect(Fs.readFileSync(Path.join(dir, "sub.txt"), "utf8")).toBe("from the sub-agent\n")

          // What Codex sent: three requests of the main thread (four when late), two of the sub-agent's, its own
          // thread-id, the parent's session-id and prompt_cache_key, its parent named in the turn metadata; the
          // sub-agent has no agent tools.
          const namespace = mode === "v2" ? "collaboration" : "multi_agent_v1"
          expect([main.length, sub.length]).toEqual([late ? 4 : 3, 2])
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
          // Late: the fourth request is the third, its answer and the notification, nothing else.
          if (late) {
            expect(mainInputs[3]!.slice(0, mainInputs[2]!.length)).toEqual(mainInputs[2])
            expect(mainInputs[3]!.slice(mainInputs[2]!.length).map((i) => assistantText(i) ?? notifies(i))).toEqual([mainAnswer, true])
          }
          const notifications = mainInputs.at(-1)!.filter(notifies).length

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
            expect(items.filter((i) => i.kind === "assistant_message").map((i) => i.text)).toEqual(id === result.threadId ? answers : [answer])
            const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
            expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
            if (id === result.threadId) {
              // The main thread: the user's prompt, the spawn and the wait with their outputs, once; nothing of the
              // sub-agent's own rounds.
              expect(items.filter((i) => i.kind === "user_message" && i.text === prompt).length).toBe(1)
              // The sub-agent's notification as often as Codex sent it: once.
              expect(items.filter((i) => i.kind === "user_message" && i.text.includes(subAnswer)).length).toBe(notifications)
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

  // The late order of the race above, forced: the parent answers without waiting, its answer held back until the
  // sub-agent's last reply has been sent and Codex has had time to pass the notification on (5 s, a margin for a loaded
  // machine; it takes milliseconds). Codex then asks the parent once more, with its answer and the notification.
  it.live("a sub-agent that ends while its parent's last request is in flight: Codex asks the parent once more with the notification, recorded once", (ctx) =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* loopback
      let ran: CodexExec.ExecResult | null = null
      ctx.onTestFailed(() => console.error(report(upstream.requests, ran)))
      let subEnded = () => {}
      const settled = new Promise<void>((resolve) => {
        subEnded = () => void setTimeout(resolve, 5_000)
      })
      let main: string | null = null
      let n = 0
      const script = (request: Received): Reply => {
        n++
        const body = JSON.parse(request.body) as Entry
        const thread = String(request.headers["thread-id"])
        main ??= thread
        if (thread !== main) {
          return outputs(body).some((o) => o.call_id === "call_sub_shell")
            ? { ...events(n, [say(n, subAnswer)]), onEnd: subEnded }
            : events(n, [shell(n, "printf 'from the sub-agent\\n' > sub.txt && echo ok")])
        }
        if (answered(body)) return events(n, [say(n, noted)])
        if (outputs(body).some((o) => o.call_id === "call_spawn_agent")) return { ...events(n, [say(n, mainAnswer)]), headAfter: settled }
        return events(n, [agentCall("v1", n, "spawn_agent", { message: task })])
      }
      for (let i = 0; i < 6; i++) upstream.enqueue(script)
      const settings = yield* settingsFor([openAiInstance(upstream.url)], { TEST_MODEL_KEY: marker }, undefined, { gateway: { routes: [{ model: "gpt-*", provider: "openai" }] } })
      yield* Effect.gen(function*() {
        const server = yield* HttpServer.HttpServer
        const home = yield* codexHome(`http://127.0.0.1:${(server.address as HttpServer.TcpAddress).port}`, { envKey: "CODEX_TEST_KEY" })
        const dir = yield* tempDir("baton-codex-sub-")
        const result = yield* CodexExec.exec({ codexHome: home, cwd: dir, prompt, env: { CODEX_TEST_KEY: adminToken } })
        ran = result

        // Codex printed both answers; the parent's third request is its second, the answer and the notification.
        expect(result.messages).toEqual([mainAnswer, noted])
        const inputs = upstream.requests.filter((r) => r.headers["thread-id"] === result.threadId).map((r) => (JSON.parse(r.body) as { input: ReadonlyArray<Entry> }).input)
        expect(inputs.length).toBe(3)
        expect(inputs[2]!.slice(0, inputs[1]!.length)).toEqual(inputs[1])
        expect(inputs[2]!.slice(inputs[1]!.length).map((i) => assistantText(i) ?? notifies(i))).toEqual([mainAnswer, true])

        // Through Baton: three completed runs of the parent's thread, every item once, the notification once, both
        // answers once each, no divergence.
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        const threadId = threads.find((t) => t.title === `Codex session ${result.threadId}`)!.id
        expect((yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs.map((r) => r.status)).toEqual(["completed", "completed", "completed"])
        const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
        expect(new Set(items.map((i) => i.messageId)).size).toBe(inputs[2]!.length + 1)
        expect(items.filter((i) => i.kind === "assistant_message").map((i) => i.text)).toEqual([mainAnswer, noted])
        expect(items.filter((i) => i.kind === "user_message" && i.text.includes(subAnswer)).map((i) => i.text)).toEqual([
          expect.stringMatching(/^<subagent_notification>/)
        ])
        expect(threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text).filter((e) => e.type === "gateway.diverged")).toEqual([])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 180_000 })
})
