/**
 * Provider request overhead: Baton's own time per model request on a conversation of 150,000 tokens, and the latency
 * Baton adds to the first streamed token, for each model-API adapter, on loopback.
 *
 * Setup: a native thread of about 150,000 o200k tokens (counted with `@baton/context`'s counter) cut from real Claude
 * Code sessions (`../shared/transcripts/raw/claude-code/*.jsonl`) into prompts, answers with a tool call, and tool
 * results, stored in the adapter's message log on a real SQLite file; the model API is
 * `provider-loopback-server.ts`, a separate process answering with recorded fixtures (Anthropic `anthropic-text`,
 * Responses the final answer of `openai-reasoning-encrypted-content`, Chat `openai-text`).
 *
 * 1. Per request: a full turn (`startTurn` run to its end: the prompt appended to the log, the body rendered from the
 *    stored entries, the request sent, the answer parsed, the output appended), against the floor: the same body
 *    POSTed by a bare `fetch`, reading the same answer to its end. Turns and floor requests alternate. Reported as
 *    wall time and as this process's CPU time (`process.cpuUsage`, user + system): the server runs elsewhere, so the
 *    CPU time of a turn is Baton's work plus the HTTP client's, and CPU time is far less disturbed than wall time by
 *    other load on the machine. Baton's own = turn - floor. Also the parts alone: rendering the body, parsing the
 *    answer's bytes, and the log's calls during a turn (wall).
 * 2. First streamed token: the server writes the answer's head, waits 25 ms, then writes the first text delta
 *    carrying the wall-clock time of the write; the delay until `onDelta` sees it, against the delay until a bare
 *    `fetch` reader sees the same bytes.
 *
 * Environment: `BENCH_TOKENS` (default 150000), `BENCH_REQUESTS` (per adapter, default 200).
 * Run: `npx tsx bench/provider-request.bench.ts` from the repository root.
 */
import type { ProviderInstance } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { Database, NativeMessageStore } from "@baton/persistence"
import { AnthropicMessages, type ModelApiAdapter, OpenAiChat, OpenAiResponses, type ProviderConfig } from "@baton/providers"
import { HttpClient } from "@effect/platform"
import { NodeHttpClient } from "@effect/platform-node"
import { Effect, Layer, Option, Redacted, Stream } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { performance } from "node:perf_hooks"
// The adapters' body rendering and SSE decoder, measured alone (internal to the package, so imported by path).
import { bodyText } from "../packages/providers/src/internal/Dialect.js"
import { makeDecoder } from "../packages/providers/src/internal/Sse.js"

const targetTokens = Number(process.env.BENCH_TOKENS ?? 150_000)
const requests = Number(process.env.BENCH_REQUESTS ?? 200)
const shared = Path.resolve(import.meta.dirname, "../../shared")

type Kind = ProviderConfig.ModelApiKind
type Dialect = typeof AnthropicMessages.dialect

/** Starts the server process; resolves with its port. */
const startServer = () =>
  new Promise<{ readonly port: number; readonly stop: () => void }>((resolve, reject) => {
    const child = ChildProcess.spawn(process.execPath, ["--import", "tsx", Path.join(import.meta.dirname, "provider-loopback-server.ts")], {
      stdio: ["ignore", "pipe", "inherit"]
    })
    child.once("error", reject)
    child.stdout.once("data", (d: Buffer) => resolve({ port: Number(d.toString().trim()), stop: () => child.kill() }))
  })

/** A non-streamed answer of `dialect` with `text` and one call (fed to its `synthesize` to get its stored form). */
const answerBody = (dialect: Dialect, text: string, call: { readonly id: string; readonly name: string; readonly arguments: string }) =>
  dialect.api === "Anthropic Messages"
    ? { id: "msg", content: [{ type: "text", text }, { type: "tool_use", id: call.id, name: call.name, input: JSON.parse(call.arguments) }], stop_reason: "tool_use", usage: { input_tokens: 1, output_tokens: 1 } }
    : dialect.api === "OpenAI Responses"
    ? { status: "completed", output: [{ type: "message", role: "assistant", content: [{ type: "output_text", text }] }, { type: "function_call", call_id: call.id, name: call.name, arguments: call.arguments }], usage: { input_tokens: 1, output_tokens: 1 } }
    : { id: "c", choices: [{ index: 0, message: { role: "assistant", content: text, tool_calls: [{ id: call.id, type: "function", function: { name: call.name, arguments: call.arguments } }] }, finish_reason: "tool_calls" }], usage: { prompt_tokens: 1, completion_tokens: 1 } }

/** Entries of about `targetTokens` tokens in `dialect`'s wire form, cut from real sessions. */
const conversation = (dialect: Dialect, counter: TokenCounter.TokenCounterShape) => {
  const dir = Path.join(shared, "transcripts/raw/claude-code")
  const text = Fs.readdirSync(dir).filter((f) => f.endsWith(".jsonl")).map((f) => Fs.readFileSync(Path.join(dir, f), "utf8")).join("\n")
  const entries: Array<{ readonly kind: "turn" | "output" | "tool_results"; readonly body: string }> = []
  let tokens = 0
  let at = 0
  const piece = (size: number) => {
    if (at + size > text.length) at = 0
    const s = text.slice(at, at + size)
    at += size
    tokens += counter.count(s)
    return s
  }
  for (let n = 0; tokens < targetTokens; n++) {
    entries.push({ kind: "turn", body: dialect.userTurn(piece(400), null) })
    const call = { id: `call_${n}`, name: "read_file", arguments: JSON.stringify({ path: `src/file${n}.ts` }), wire: "function_call" }
    const parser = dialect.parser(new Set(["read_file"]), null)
    for (const e of dialect.synthesize(answerBody(dialect, piece(600), call))) parser.onEvent(e)
    entries.push({ kind: "output", body: parser.outcome().output ?? "" })
    entries.push({ kind: "tool_results", body: dialect.toolResults([{ toolCallId: call.id, output: piece(3000), isError: false }], [call]) })
  }
  return { entries, tokens }
}

const quantile = (xs: ReadonlyArray<number>, q: number) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!
}
const fmt = (xs: ReadonlyArray<number>) => `${quantile(xs, 0.5).toFixed(2)} / ${quantile(xs, 0.99).toFixed(2)}`
const cpuMs = () => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1000
}
const wallClock = () => performance.timeOrigin + performance.now()

const adapters = { "anthropic-messages": AnthropicMessages, "openai-responses": OpenAiResponses, "openai-chat": OpenAiChat } as const
/** Where the answer's bytes are, for parsing them alone. */
const answerFile: Record<Kind, string> = {
  "anthropic-messages": "anthropic/anthropic-text.chunks.txt",
  "openai-responses": "openai-responses/openai-reasoning-encrypted-content.1.chunks.txt",
  "openai-chat": "openai-chat/openai-text.chunks.txt"
}

const benchKind = (kind: Kind, port: number, counter: TokenCounter.TokenCounterShape) =>
  Effect.gen(function*() {
    const module = adapters[kind]
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-provider-bench-"))
    const context = yield* Layer.build(Database.layerSqlite(Path.join(dir, "baton.sqlite")))
    const store = yield* Effect.provide(NativeMessageStore.make, context)
    const logMs = { now: 0 }
    const timed = <A, E>(effect: Effect.Effect<A, E>) =>
      Effect.suspend(() => {
        const t0 = performance.now()
        return Effect.ensuring(effect, Effect.sync(() => void (logMs.now += performance.now() - t0)))
      })
    const log: typeof store = {
      append: (i, r, e) => timed(store.append(i, r, e)),
      load: (r, a) => timed(store.load(r, a)),
      lastSeq: (r) => timed(store.lastSeq(r))
    }
    const http = yield* HttpClient.HttpClient
    const config = (mode: "fast" | "first"): ProviderConfig.ModelProviderConfig => ({
      kind,
      baseUrl: `http://127.0.0.1:${port}/${kind}/${mode}`,
      model: "bench-model",
      contextWindow: 400_000,
      autoCompactThreshold: null,
      maxOutputTokens: 8_192,
      prices: { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 },
      systemPrompt: "You are a coding agent."
    })
    const options = (mode: "fast" | "first"): ModelApiAdapter.ModelApiOptions => ({
      instance: "bench" as ProviderInstance,
      config: config(mode),
      apiKey: Option.some(Redacted.make("sk-bench")),
      log,
      http
    })
    const adapter = module.make(options("fast"))
    const { entries, tokens } = conversation(module.dialect, counter)
    const nativeRef = "bench-ref"
    yield* log.append("bench", nativeRef, entries.map((e, i) => ({ seq: i + 1, kind: e.kind, runId: "run-0", deliveryIds: [], usage: null, body: e.body })))
    yield* adapter.resumeThread(nativeRef)
    const tools = [{ name: "read_file", description: "Reads a file", inputSchema: { type: "object", properties: { path: { type: "string" } } } }]

    // The parts alone.
    // Rendering as the adapter does it: the parts, stored entries copied from their cached UTF-8, the rest encoded.
    const bodies = entries.map((e) => e.body)
    const encoded = bodies.map((b) => Buffer.from(b, "utf8"))
    const renderMs: Array<number> = []
    const renderInput = { model: "bench-model", maxOutputTokens: 8_192, system: "You are a coding agent.", tools, entries: bodies, breakpoints: [bodies.length - 3, bodies.length - 1], cacheKey: nativeRef }
    for (let i = 0; i < 100; i++) {
      const t0 = performance.now()
      const parts = module.dialect.render(renderInput)
      Buffer.concat(parts.map((p) => (typeof p === "number" ? encoded[p]! : Buffer.from(p, "utf8"))))
      renderMs.push(performance.now() - t0)
    }
    const body = bodyText(module.dialect.render(renderInput), bodies)
    const answer = new TextEncoder().encode(Fs.readFileSync(Path.join(shared, "provider-fixtures", answerFile[kind]), "utf8").split("\n").filter((l) => l !== "").map((l) => kind === "openai-chat" ? `data: ${l}\n\n` : `event: ${/"type":"([^"]+)"/.exec(l)?.[1]}\ndata: ${l}\n\n`).join(""))
    const parseMs: Array<number> = []
    for (let i = 0; i < 200; i++) {
      const t0 = performance.now()
      const parser = module.dialect.parser(new Set(["read_file"]), null)
      for (const m of makeDecoder().push(answer)) parser.onEvent(m)
      parseMs.push(performance.now() - t0)
    }

    // Full turns against the floor, alternating.
    const url = `${config("fast").baseUrl}${module.dialect.path}`
    const wall = { turn: [] as Array<number>, floor: [] as Array<number>, log: [] as Array<number> }
    const cpu = { turn: [] as Array<number>, floor: [] as Array<number> }
    for (let i = 0; i < requests + 20; i++) {
      logMs.now = 0
      const c0 = cpuMs()
      const t0 = performance.now()
      yield* Stream.runDrain(adapter.startTurn({ nativeRef, runId: `run-${i + 1}`, prompt: `Next step ${i}.`, inlineHistory: null, tools }))
      const turnWall = performance.now() - t0
      const turnCpu = cpuMs() - c0
      const sent = body
      const f = yield* Effect.promise(async () => {
        const c1 = cpuMs()
        const t1 = performance.now()
        const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: Buffer.from(sent, "utf8") })
        await res.arrayBuffer()
        return { wall: performance.now() - t1, cpu: cpuMs() - c1 }
      })
      if (i >= 20) {
        wall.turn.push(turnWall)
        wall.floor.push(f.wall)
        wall.log.push(logMs.now)
        cpu.turn.push(turnCpu)
        cpu.floor.push(f.cpu)
      }
    }

    // First streamed token.
    const slow = module.make(options("first"))
    yield* slow.resumeThread(nativeRef)
    const first = { baton: [] as Array<number>, floor: [] as Array<number> }
    const firstUrl = `${config("first").baseUrl}${module.dialect.path}`
    for (let i = 0; i < 60; i++) {
      let delay = Number.NaN
      yield* Stream.runDrain(slow.startTurn({
        nativeRef,
        runId: `run-first-${i}`,
        prompt: `Again ${i}.`,
        inlineHistory: null,
        tools,
        onDelta: (d) => {
          if (Number.isNaN(delay)) delay = wallClock() - Number(d.text)
        }
      }))
      const floorDelay = yield* Effect.promise(async () => {
        const res = await fetch(firstUrl, { method: "POST", headers: { "content-type": "application/json" }, body: Buffer.from(body, "utf8") })
        const reader = res.body!.getReader()
        const decoder = new TextDecoder()
        let seen = ""
        let found = Number.NaN
        for (;;) {
          const chunk = await reader.read()
          if (chunk.done) break
          seen += decoder.decode(chunk.value, { stream: true })
          const stamp = /:"(\d{13}\.\d{3})"/.exec(seen)
          if (Number.isNaN(found) && stamp !== null) found = wallClock() - Number(stamp[1])
        }
        return found
      })
      if (i >= 10) {
        first.baton.push(delay)
        first.floor.push(floorDelay)
      }
    }
    Fs.rmSync(dir, { recursive: true, force: true })
    const own = (t: ReadonlyArray<number>, f: ReadonlyArray<number>) => t.map((x, i) => x - f[i]!)
    return {
      kind,
      conversation: `${tokens.toLocaleString("en")} tokens, ${entries.length} entries, ${Math.round(body.length / 1024)} KB`,
      render: fmt(renderMs),
      parse: fmt(parseMs),
      log: fmt(wall.log),
      wallTurn: fmt(wall.turn),
      wallFloor: fmt(wall.floor),
      wallOwn: fmt(own(wall.turn, wall.floor)),
      cpuTurn: fmt(cpu.turn),
      cpuFloor: fmt(cpu.floor),
      cpuOwn: fmt(own(cpu.turn, cpu.floor)),
      first: fmt(first.baton),
      firstFloor: fmt(first.floor),
      firstAdded: (quantile(first.baton, 0.5) - quantile(first.floor, 0.5)).toFixed(2)
    }
  }).pipe(Effect.scoped)

const main = Effect.gen(function*() {
  const { port, stop } = yield* Effect.promise(startServer)
  const counter = TokenCounter.make()
  const rows = []
  for (const kind of ["anthropic-messages", "openai-responses", "openai-chat"] as const) rows.push(yield* benchKind(kind, port, counter))
  stop()
  console.log(`provider request overhead: ${requests} requests per adapter; median / p99 in ms; load average ${Os.loadavg().map((l) => l.toFixed(1)).join(" ")}`)
  console.log("| adapter | conversation | render + encode | parse answer | log calls | turn wall | fetch wall | own wall | turn CPU | fetch CPU | own CPU |")
  console.log("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
  for (const r of rows) {
    console.log(`| ${r.kind} | ${r.conversation} | ${r.render} | ${r.parse} | ${r.log} | ${r.wallTurn} | ${r.wallFloor} | ${r.wallOwn} | ${r.cpuTurn} | ${r.cpuFloor} | ${r.cpuOwn} |`)
  }
  console.log("")
  console.log("| adapter | first token: Baton | first token: bare fetch | added (medians) |")
  console.log("| --- | --- | --- | --- |")
  for (const r of rows) console.log(`| ${r.kind} | ${r.first} | ${r.firstFloor} | ${r.firstAdded} |`)
}).pipe(Effect.provide(NodeHttpClient.layerUndici))

Effect.runPromise(main).then(() => process.exit(0), (e: unknown) => {
  console.error(e)
  process.exit(1)
})
