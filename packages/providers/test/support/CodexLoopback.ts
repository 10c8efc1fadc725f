/**
 * What the Codex tests share: a temporary `CODEX_HOME` whose `config.toml` points Codex's model provider at a
 * loopback server playing OpenAI's Responses API (`POST /v1/responses`, SSE; `wire_api = "responses"`, no retries, no
 * key), the Responses streams that server answers with, and the normalisation that turns a recorded JSON-RPC
 * exchange into a stable fixture (ids, times and paths replaced; only the messages Baton reads kept).
 */
import { Effect, type Scope } from "effect"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { defaultBinary, type TraceLine } from "../../src/codex/CodexAppServer.js"
import { frame, type Received, type Reply, sse } from "./Loopback.js"

/**
 * A `codex` executable (written into `dir`) that runs `real` behind a pipe holding back Codex's answers to the methods
 * in `delays` (method -> milliseconds); every other line, notifications included, passes at once: a Codex slow to
 * answer those requests.
 */
export const slowAnswers = (dir: string, real: string, delays: Readonly<Record<string, number>>): string => {
  const relay = Path.join(dir, "slow-answers.cjs")
  Fs.writeFileSync(relay, `
const { spawn } = require("node:child_process")
const readline = require("node:readline")
const delays = ${JSON.stringify(delays)}
const child = spawn(${JSON.stringify(real)}, process.argv.slice(2), { stdio: ["pipe", "pipe", "inherit"] })
process.stdin.pipe(child.stdin)
const held = new Map()
readline.createInterface({ input: process.stdin }).on("line", (line) => {
  try { const m = JSON.parse(line); if (m.id !== undefined && delays[m.method] !== undefined) held.set(m.id, delays[m.method]) } catch {}
})
readline.createInterface({ input: child.stdout }).on("line", (line) => {
  let m = {}
  try { m = JSON.parse(line) } catch {}
  const delay = m.method === undefined ? held.get(m.id) : undefined
  if (delay !== undefined) setTimeout(() => process.stdout.write(line + "\\n"), delay)
  else process.stdout.write(line + "\\n")
})
child.on("exit", (code) => process.exit(code ?? 1))
process.on("SIGTERM", () => child.kill("SIGKILL"))
`)
  const executable = Path.join(dir, "codex-slow")
  Fs.writeFileSync(executable, `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(relay)} "$@"\n`, { mode: 0o755 })
  return executable
}

/** The pinned binary; the tests fail at once (not skip) when it is missing. */
export const binary = (): string => {
  const found = defaultBinary()
  if (found === null) throw new Error("the @openai/codex platform binary is not installed: run pnpm install")
  return found
}

/**
 * A temporary CODEX_HOME (removed with the scope) whose config routes the model to `baseUrl` (the loopback root,
 * `/v1` appended), with the window and auto-compact limit given; `envKey`: the environment variable whose value Codex
 * sends as `Authorization: Bearer` (default none: no key).
 */
export const codexHome = (
  baseUrl: string,
  options: { readonly window?: number; readonly autoCompact?: number; readonly envKey?: string } = {}
): Effect.Effect<string, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => {
      // Not under /tmp: Codex refuses to create its helper aliases in a temporary directory (a warning only).
      const home = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-codex-home-"))
      Fs.writeFileSync(Path.join(home, "config.toml"), [
        `model = "gpt-loopback"`,
        `model_provider = "loopback"`,
        `model_context_window = ${options.window ?? 44_000}`,
        `model_auto_compact_token_limit = ${options.autoCompact ?? 42_000}`,
        `[model_providers.loopback]`,
        `name = "loopback"`,
        `base_url = "${baseUrl}/v1"`,
        `wire_api = "responses"`,
        ...(options.envKey === undefined ? [] : [`env_key = "${options.envKey}"`]),
        `request_max_retries = 0`,
        `stream_max_retries = 0`,
        ``
      ].join("\n"))
      return home
    }),
    (home) => Effect.sync(() => Fs.rmSync(home, { recursive: true, force: true }))
  )

/** A Responses usage object: `input` tokens in (of which `cached` from the cache), `output` out. */
export const usage = (input: number, output: number, cached = 0) => ({
  input_tokens: input,
  input_tokens_details: { cached_tokens: cached },
  output_tokens: output,
  output_tokens_details: { reasoning_tokens: 0 },
  total_tokens: input + output
})

const events = (lines: ReadonlyArray<object>): Reply => sse(frame("openai-responses", lines.map((l) => JSON.stringify(l))))

/** A Responses stream cut (the socket destroyed) after `response.created`: a model stream that disconnects. */
export const cut = (): Reply => ({ ...events([{ type: "response.created", response: { id: "resp_cut" } }, { type: "response.in_progress", response: { id: "resp_cut" } }]), dropAfter: 1 })

/** A Responses stream answering `text` (streamed in two deltas) with the given usage. */
export const answer = (text: string, input = 1_000, output = 10, cached = 0): Reply => {
  const id = `msg_${Math.random().toString(36).slice(2, 10)}`
  const half = Math.floor(text.length / 2)
  return events([
    { type: "response.created", response: { id: `resp_${id}` } },
    { type: "response.output_item.added", output_index: 0, item: { type: "message", role: "assistant", id, content: [] } },
    { type: "response.output_text.delta", output_index: 0, item_id: id, content_index: 0, delta: text.slice(0, half) },
    { type: "response.output_text.delta", output_index: 0, item_id: id, content_index: 0, delta: text.slice(half) },
    { type: "response.output_item.done", output_index: 0, item: { type: "message", role: "assistant", id, content: [{ type: "output_text", text, annotations: [] }] } },
    { type: "response.completed", response: { id: `resp_${id}`, usage: usage(input, output, cached) } }
  ])
}

/** A Responses stream whose answer is a function call of `name` with `args` (call id `callId`). */
export const functionCall = (callId: string, name: string, args: object, input = 1_000): Reply =>
  events([
    { type: "response.created", response: { id: `resp_${callId}` } },
    { type: "response.output_item.done", output_index: 0, item: { type: "function_call", id: `fc_${callId}`, call_id: callId, name, arguments: JSON.stringify(args) } },
    { type: "response.completed", response: { id: `resp_${callId}`, usage: usage(input, 12) } }
  ])

/** `response.failed` with `context_length_exceeded` (the model's window is full). */
export const overflow = (): Reply =>
  events([
    { type: "response.created", response: { id: "resp_overflow" } },
    { type: "response.failed", response: { id: "resp_overflow", error: { code: "context_length_exceeded", message: "Your input exceeds the context window of this model." } } }
  ])

/** The body of a request Codex sent, parsed. */
export const bodyOf = (request: Received): { readonly input: ReadonlyArray<Record<string, unknown>>; readonly tools?: ReadonlyArray<{ readonly name?: string }> } =>
  JSON.parse(request.body)

/** The texts of the `input_text` parts of the request's user messages, in order. */
export const userTexts = (request: Received): ReadonlyArray<string> =>
  bodyOf(request).input.flatMap((item) =>
    item.type === "message" && item.role === "user"
      ? (item.content as ReadonlyArray<{ readonly type: string; readonly text?: string }>).flatMap((c) => (c.type === "input_text" && c.text !== undefined ? [c.text] : []))
      : []
  )

/** Whether the request is Codex's compaction request (its checkpoint prompt last, no tools). */
export const isCompaction = (request: Received) => userTexts(request).at(-1)?.includes("CONTEXT CHECKPOINT COMPACTION") ?? false

/** The methods a fixture keeps (what Baton sends and reads); the rest depends on the machine (warnings, plugins). */
const kept = new Set([
  "initialize", "initialized", "thread/start", "thread/resume", "thread/fork", "thread/read", "thread/inject_items",
  "thread/compact/start", "turn/start", "turn/interrupt", "turn/started", "turn/completed", "item/started",
  "item/completed", "item/agentMessage/delta", "thread/tokenUsage/updated", "error", "item/tool/call"
])

/**
 * A recorded exchange as fixture text: one message a line, `->` sent / `<-` received, keeping requests and their
 * responses and the notifications of `kept`; uuids, times and temporary paths replaced by placeholders, keys sorted.
 */
export const normalise = (trace: ReadonlyArray<TraceLine>, home: string): string => {
  const ours = new Set<unknown>()
  const lines: Array<string> = []
  const stable = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(stable)
    if (value !== null && typeof value === "object") {
      const out: Record<string, unknown> = {}
      for (const key of Object.keys(value).sort()) {
        const v = (value as Record<string, unknown>)[key]
        out[key] = /(At|AtMs|durationMs|createdAt|updatedAt)$/.test(key) && typeof v === "number"
          ? 0
          : key === "userAgent" && typeof v === "string"
          ? v.replace(/\(.*$/, "(<platform>)")
          : stable(v)
      }
      return out
    }
    if (typeof value === "string" && value.length > 1_000) {
      // Long texts (rendered history, instructions) by length and digest: a change still shows, the file stays small.
      return `<${value.length} chars, sha256 ${Crypto.createHash("sha256").update(value.split(home).join("<home>")).digest("hex").slice(0, 16)}>`
    }
    if (typeof value === "string") {
      return value.split(home).join("<home>")
        .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, "<uuid>")
        .replace(/msg_[a-z0-9]{8}/g, "msg_<id>")
        .replace(/\d{4}\/\d{2}\/\d{2}/g, "<date>").replace(/\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}/g, "<time>")
    }
    return value
  }
  // After `thread/resume`, Codex repeats the thread's last usage report (of an earlier turn) at a moment of its own:
  // before or after Baton's next request. That report is placed right after the resume's answer.
  const resumes = new Set<unknown>()
  let lastTurn: unknown = null
  let afterResume: number | null = null
  for (const { direction, line } of trace) {
    const message = JSON.parse(line) as {
      id?: unknown
      method?: string
      params?: { turnId?: unknown; turn?: { id?: unknown } }
      result?: unknown
      error?: unknown
    }
    if (message.method !== undefined && !kept.has(message.method)) continue
    if (message.method === undefined) {
      // A response: keep those answering Baton's requests, and Baton's answers to the server's.
      if (direction === "in" && !ours.has(message.id)) continue
    } else if (direction === "out" && message.id !== undefined) {
      ours.add(message.id)
      if (message.method === "thread/resume") resumes.add(message.id)
    }
    if (message.method === "turn/started") {
      lastTurn = message.params?.turn?.id
      afterResume = null
    }
    const text = `${direction === "out" ? "->" : "<-"} ${JSON.stringify(stable(message))}`
    if (message.method === "thread/tokenUsage/updated" && afterResume !== null && message.params?.turnId !== lastTurn) {
      lines.splice(afterResume++, 0, text)
      continue
    }
    lines.push(text)
    if (direction === "in" && message.method === undefined && resumes.has(message.id)) afterResume = lines.length
  }
  // Codex writes a response and the notifications of the same moment in either order (a turn/start result and the
  // turn/started notification race on its stdout, seen under load): within each run of incoming lines, responses
  // come first, notifications after them in the order received.
  const ordered: Array<string> = []
  let block: Array<string> = []
  const isResponse = (line: string) => (JSON.parse(line.slice(3)) as { method?: unknown }).method === undefined
  const flush = () => {
    ordered.push(...block.filter(isResponse), ...block.filter((l) => !isResponse(l)))
    block = []
  }
  for (const line of lines) {
    if (line.startsWith("<-")) block.push(line)
    else {
      flush()
      ordered.push(line)
    }
  }
  flush()
  return ordered.join("\n") + "\n"
}

/** `test/fixtures/codex/` of this package. */
export const fixtureDir = fileURLToPath(new URL("../fixtures/codex/", import.meta.url))

/**
 * Compares `text` with the fixture `name`: returns the fixture's text. `BATON_UPDATE_FIXTURES=1` writes `text` as the
 * fixture first. A missing fixture is an error saying how to record it (it used to be written silently, so a deleted
 * or misnamed fixture passed and CI proved nothing).
 */
export const checkFixture = (name: string, text: string): string => {
  const file = Path.join(fixtureDir, name)
  if (process.env["BATON_UPDATE_FIXTURES"] === "1") {
    Fs.mkdirSync(fixtureDir, { recursive: true })
    Fs.writeFileSync(file, text)
  }
  if (!Fs.existsSync(file)) {
    throw new Error(`the fixture ${file} is missing: record it with BATON_UPDATE_FIXTURES=1 and commit it`)
  }
  return Fs.readFileSync(file, "utf8")
}
