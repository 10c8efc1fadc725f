/**
 * Issue 14's Codex acceptance with tool-result offload on: the real `codex exec` (0.171.0) with a model provider whose
 * base URL is Baton, over a loopback Responses upstream that plays the model (`support/CachingResponses.ts`: a
 * scripted model whose usage is computed from each request as OpenAI's automatic prompt caching bills it). A six-turn
 * session (`exec`, then `exec resume` five times) with ten shell rounds a turn (60 in all) whose outputs are over
 * 20,000 characters (`seq -f`), run once with Codex pointed at the upstream directly and once through `baton serve`:
 *
 * - the session completes the same way (answers, command outputs); through Baton, the model reads the first (stubbed)
 *   output back with `thread_read` before its last answer: the gateway answers it with the original and continues,
 *   and Codex never sees that call;
 * - prefix: through Baton, each upstream request's input extends the previous request's input, except at the
 *   requests whose run has a `gateway.offloaded` event (there is at least one);
 * - cost: the weighted input (uncached x 1 + cached x cacheRead / input, the instance's price ratio, 0.1) through
 *   Baton (its hidden round included) against the direct run's, printed; at most 0.6 (the issue's bound for Claude
 *   Code's 60-round session).
 */
import { HttpServer } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { codexHome } from "../../../packages/providers/test/support/CodexLoopback.js"
import { loopback } from "../../../packages/providers/test/support/Loopback.js"
import { adminToken, client, get, raw } from "./helpers.js"
import * as CachingResponses from "./support/CachingResponses.js"
import * as CodexExec from "./support/CodexExec.js"
import { marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"

type Item = Record<string, unknown>

const prices = { input: 1.25, cacheWrite: 0, cacheRead: 0.125, output: 10 }
const ratio = prices.cacheRead / prices.input

const prompts = Array.from({ length: 6 }, (_, t) => `List the next ranges (part ${t + 1}).`)
const perTurn = 10
/**
 * The shell rounds of each turn: 260 numbered lines of long words (`seq -f`), 22,000 to 23,000 characters (about
 * 2,500 tokens) each. Codex 0.171.0 compacts by itself once the usage it is told passes about 245,000 tokens for this
 * unknown model, whatever `model_auto_compact_token_limit` and `model_context_window` say (seen with bare `seq`
 * output, about 3 characters a token: the history was rebuilt at request 19); the direct run must not compact (its
 * prefix would break), so the 60 outputs of this session are dense in characters and sparse in tokens.
 */
const turns: ReadonlyArray<{ readonly prompt: string; readonly commands: ReadonlyArray<string>; readonly answer: string }> = prompts.map((prompt, t) => ({
  prompt,
  commands: Array.from({ length: perTurn }, (_, k) => `seq -f '%g internationalization telecommunications responsibilities characteristically' ${(t * perTurn + k) * 1_000 + 1} ${(t * perTurn + k) * 1_000 + 260}`),
  answer: `Listed ${perTurn} ranges (turn ${t + 1}).`
}))

const textOf = (item: Item) =>
  Array.isArray(item.content) ? item.content.map((p) => (typeof p === "object" && p !== null && "text" in p ? String(p.text) : "")).join("") : ""

/**
 * The scripted model: finds the turn by its prompt (the last user message that is one), counts the tool outputs
 * since, and calls the turn's next command (`exec_command`, call id `call_<turn>_<round>`) or gives the turn's answer.
 */
const script = (body: Record<string, unknown>): ReadonlyArray<Item> => {
  const input = body.input as ReadonlyArray<Item>
  let at = -1
  let turn = -1
  input.forEach((item, i) => {
    const t = item.role === "user" ? turns.findIndex((x) => textOf(item) === x.prompt) : -1
    if (t !== -1) {
      at = i
      turn = t
    }
  })
  if (turn === -1) return [{ type: "message", role: "assistant", id: "msg_lost", status: "completed", content: [{ type: "output_text", text: "(no prompt found)", annotations: [] }] }]
  const round = input.slice(at + 1).filter((i) => i.type === "function_call_output").length
  const { answer, commands } = turns[turn]!
  // At the end of the last turn, a model offered thread_read (through Baton) reads the first output back before answering.
  const offered = Array.isArray(body.tools) && body.tools.some((t) => typeof t === "object" && t !== null && (t as Item).name === "thread_read")
  if (round === commands.length && turn === turns.length - 1 && offered) {
    return [{ type: "function_call", id: "fc_read", call_id: "call_read", name: "thread_read", arguments: JSON.stringify({ refs: "tool:call_0_0", limit: 32_000 }), status: "completed" }]
  }
  if (round < commands.length) {
    return [{ type: "function_call", id: `fc_${turn}_${round}`, call_id: `call_${turn}_${round}`, name: "exec_command", arguments: JSON.stringify({ cmd: commands[round], max_output_tokens: 20_000 }), status: "completed" }]
  }
  return [{ type: "message", role: "assistant", id: `msg_${turn}`, status: "completed", content: [{ type: "output_text", text: answer, annotations: [] }] }]
}

const tempDir = (prefix: string) =>
  Effect.acquireRelease(
    Effect.sync(() => Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), prefix)))),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )

/**
 * Runs both turns against `baseUrl` with `key` (Codex's window large enough that it never compacts by itself, and its
 * tool output limit above the outputs').
 */
const session = (baseUrl: string, key: string) =>
  Effect.gen(function*() {
    const home = yield* codexHome(baseUrl, { envKey: "CODEX_TEST_KEY", window: 1_000_000, autoCompact: 950_000 })
    const dir = yield* tempDir("baton-codex-offload-")
    const env = { CODEX_TEST_KEY: key }
    // Codex cuts a tool's output for the model at about 10,000 characters by default; this session's are larger.
    const config = ["tool_output_token_limit=40000"]
    const results: Array<CodexExec.ExecResult> = []
    for (const prompt of prompts) {
      const resume = results[0]?.threadId
      results.push(yield* CodexExec.exec({ codexHome: home, cwd: dir, prompt, env, config, ...(resume === undefined ? {} : { resume }) }))
    }
    return results
  })

const inputOf = (body: string) => (JSON.parse(body) as { input: ReadonlyArray<Item> }).input.map((i) => JSON.stringify(i))
const extends_ = (previous: ReadonlyArray<string>, next: ReadonlyArray<string>) => previous.every((m, k) => next[k] === m)

describe("Gateway with the real Codex CLI, tool-result offload on", () => {
  it.live("a six-turn Codex session of 60 shell rounds with large outputs completes through Baton; the upstream's requests extend each other except at reported flushes; the weighted input is at most 0.6 of direct", () =>
    Effect.scoped(Effect.gen(function*() {
      const started = Date.now()
      const rounds = turns.reduce((n, t) => n + t.commands.length + 1, 0)

      // Directly against the model.
      const direct = yield* loopback
      const directModel = CachingResponses.make(script)
      for (let i = 0; i < rounds; i++) direct.enqueue(directModel.reply)
      const d = yield* session(direct.url, "sk-direct-0123456789")

      // Through Baton.
      const upstream = yield* loopback
      const model = CachingResponses.make(script)
      for (let i = 0; i < rounds + 1; i++) upstream.enqueue(model.reply)
      const settings = yield* settingsFor(
        [{
          kind: "openai-responses",
          name: "openai",
          baseUrl: `${upstream.url}/v1`,
          model: "gpt-loopback",
          apiKeyEnv: "TEST_MODEL_KEY",
          contextWindow: 400_000,
          autoCompactThreshold: null,
          maxOutputTokens: 32_000,
          prices,
          maxRetries: 0
        }],
        { TEST_MODEL_KEY: marker },
        undefined,
        { gateway: { routes: [{ model: "gpt-*", provider: "openai" }] } }
      )
      yield* Effect.gen(function*() {
        const server = yield* HttpServer.HttpServer
        const port = (server.address as HttpServer.TcpAddress).port
        const v = yield* session(`http://127.0.0.1:${port}`, adminToken)

        // The session completes the same way.
        for (const [t, via] of v.entries()) {
          expect(via.messages).toEqual([turns[t]!.answer])
          expect(via.commands.map((c) => [c.output, c.exitCode])).toEqual(d[t]!.commands.map((c) => [c.output, c.exitCode]))
          expect(via.commands.length).toBe(turns[t]!.commands.length)
          for (const c of via.commands) expect(c.output.length).toBeGreaterThan(20_000)
          expect(via.threadId).toBe(v[0]!.threadId)
        }
        // One more request upstream than Codex sent: the gateway's continuation after thread_read (the last).
        expect(upstream.requests.length).toBe(rounds + 1)
        expect(direct.requests.length).toBe(rounds)

        // The outputs reached the model over 20,000 characters (Codex did not cut them).
        const outputs = (JSON.parse(direct.requests.at(-1)!.body) as { input: ReadonlyArray<Item> }).input.filter((i) => i.type === "function_call_output")
        expect(outputs.length).toBe(prompts.length * perTurn)
        for (const o of outputs) expect(String(o.output).length).toBeGreaterThan(20_000)

        // Prefix: directly, every request extends the previous one; through Baton, except at the reported flushes.
        for (let i = 1; i < direct.requests.length; i++) expect(extends_(inputOf(direct.requests[i - 1]!.body), inputOf(direct.requests[i]!.body))).toBe(true)
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        expect(threads.length).toBe(1)
        const threadId = threads[0]!.id
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: { limit: 100 } })).runs
        expect(runs.length).toBe(rounds)
        expect(runs.every((r) => r.status === "completed")).toBe(true)
        const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
        const flushes = events.filter((e) => e.type === "gateway.offloaded").map((e) => e.payload as { runId: string; refs: ReadonlyArray<string> })
        expect(flushes.length).toBeGreaterThanOrEqual(1)
        const flushAt = [...new Set(flushes.map((f) => runs.findIndex((r) => r.id === f.runId)))].sort((a, b) => a - b)
        const breaks: Array<number> = []
        for (let i = 1; i < upstream.requests.length; i++) {
          if (!extends_(inputOf(upstream.requests[i - 1]!.body), inputOf(upstream.requests[i]!.body))) breaks.push(i)
        }
        expect(breaks).toEqual(flushAt)
        // Every stubbed original is in Baton's thread, as Codex sent it.
        const items = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
        // (The originals as Codex sent them through Baton: each output the first time it went upstream, before its stub.)
        const sentOutputs = new Map<string, string>()
        for (const r of upstream.requests) {
          for (const i of (JSON.parse(r.body) as { input: ReadonlyArray<Item> }).input) {
            if (i.type === "function_call_output" && !sentOutputs.has(String(i.call_id))) sentOutputs.set(String(i.call_id), String(i.output))
          }
        }
        const refs = flushes.flatMap((f) => f.refs.map((r) => r.slice("tool:".length)))
        expect(refs.length).toBeGreaterThan(0)
        for (const id of refs) {
          expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === id).map((i) => i.text)).toEqual([sentOutputs.get(id)])
        }

        // thread_read: answered with the exact original of the first output (stubbed at the first flush), hidden from
        // Codex (its last answer is the model's answer after the read; the thread has no thread_read call).
        expect(refs).toContain("call_0_0")
        const continued = (JSON.parse(upstream.requests.at(-1)!.body) as { input: ReadonlyArray<Item> }).input
        expect(continued.at(-2)).toMatchObject({ type: "function_call", call_id: "call_read", name: "thread_read" })
        expect(continued.at(-1)).toMatchObject({ type: "function_call_output", call_id: "call_read" })
        expect(String(continued.at(-1)!.output)).toContain(sentOutputs.get("call_0_0")!)
        expect(v.at(-1)!.messages).toEqual([turns.at(-1)!.answer])
        expect(items.filter((i) => i.toolName === "thread_read" || i.toolCallId === "call_read")).toEqual([])

        // Cost: weighted input through Baton (the hidden round included) against direct.
        const viaBaton = CachingResponses.weighted(model.billed, ratio)
        const viaDirect = CachingResponses.weighted(directModel.billed, ratio)
        const seconds = (Date.now() - started) / 1_000
        console.log(
          `Codex offload: ${rounds} requests from Codex (${upstream.requests.length} upstream through Baton), flushes at requests ${flushAt.map((i) => i + 1).join(", ")} (${refs.length} outputs stubbed); ` +
            `weighted input ${Math.round(viaBaton)} through Baton vs ${Math.round(viaDirect)} direct: ratio ${(viaBaton / viaDirect).toFixed(3)}; ` +
            `last request ${model.billed.at(-1)!.input} vs ${directModel.billed.at(-1)!.input} tokens; ${seconds.toFixed(1)} s`
        )
        expect(viaBaton / viaDirect).toBeLessThanOrEqual(0.6)
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 600_000 })
})
