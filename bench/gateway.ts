/**
 * Gateway time (issue 14, "Performance"): what `POST /v1/messages` through Baton's gateway adds to a request of a
 * ~150,000-token conversation, against the same request sent directly to the upstream, in the same run.
 *
 * One process: a loopback Anthropic upstream (node http; every POST answered at once with a short SSE reply that
 * calls a tool) and `baton serve`'s production graph (`Server.layer`: SQLite in a fresh directory, the gateway routed
 * to the upstream). The conversation starts with `ROUNDS` (60) tool rounds whose results are `RESULT_CHARS` (10,000)
 * characters each (~600,000 characters, ~150,000 tokens); each measured request extends it by the previous reply and
 * its tool result (1,000 characters, so the size stays near 150,000 tokens), as an agent does, so Baton stores two new messages per request and recognises the rest. Requests
 * alternate direct / through Baton; `WARMUP` (5) pairs are dropped (the first through Baton stores the whole history).
 *
 * Figures: time to the first response byte and to the last, direct and through Baton, p50 and p90 over `REQUESTS`
 * (40) pairs, and the added time (through Baton minus direct, per pair). Run: `npx tsx bench/gateway.ts`.
 * `OFFLOAD=off`: the instance's `toolResultOffload` off (the body forwarded as received; on by default).
 *
 * `PROTOCOL=responses`: the same with `POST /v1/responses` (a Codex-like conversation of `function_call` /
 * `function_call_output` input items, the upstream an `openai-responses` instance) instead of `/v1/messages`.
 *
 * Beside the wall-clock figures (noisy when other processes share the cores), what Baton's main thread spent per
 * measured request: its CPU time (the scheduler's nanoseconds, `/proc/self/task/<pid>/schedstat`; user + system
 * from `stat`, 10 ms ticks, where that is missing), its event loop's busy time (`performance.eventLoopUtilization`), and the SQL statements it executed (every
 * better-sqlite3 statement run, counted). The agent and the upstream run in a worker thread, so these are Baton's
 * alone. `SQL=1` lists the statements by text; `CPUPROF=<file>`: a CPU profile of the measured requests only (the
 * warm-up left out), written as a `.cpuprofile`.
 */
import { Server, ServerConfig } from "@baton/server"
import { timeSliced } from "../apps/cli/src/CliRuntime.js"
import { HttpServer } from "@effect/platform"
import { NodeRuntime } from "@effect/platform-node"
import { ConfigProvider, Context, Effect, Layer, Scheduler } from "effect"
import * as Fs from "node:fs"
import * as Inspector from "node:inspector"
import { createRequire } from "node:module"
import * as Os from "node:os"
import * as Path from "node:path"
import { performance } from "node:perf_hooks"
import { Worker } from "node:worker_threads"

const token = "bench-token-0123456789abcdef"
const rounds = Number(process.env["ROUNDS"] ?? 60)
const resultChars = Number(process.env["RESULT_CHARS"] ?? 10_000)
const requests = Number(process.env["REQUESTS"] ?? 40)
const warmup = Number(process.env["WARMUP"] ?? 5)
const protocol = process.env["PROTOCOL"] === "responses" ? "responses" : "messages"

/**
 * The agent and the upstream, in a worker thread of their own (plain JavaScript): they are other processes in real
 * use, so Baton's work on the main thread must not hold their clocks (the first byte is timed where the agent reads
 * it). The upstream answers every POST at once with a short SSE reply that calls a tool; the agent sends each request
 * directly, then through Baton, and posts the timings back.
 */
const workerSource = `
const { parentPort, workerData } = require("node:worker_threads")
const Http = require("node:http")
const { performance } = require("node:perf_hooks")
const { rounds, resultChars, requests, warmup, protocol } = workerData
const responses = protocol === "responses"
const callOf = (n) => ({ type: "tool_use", id: "toolu_" + n, name: "Bash", input: { command: "cat file-" + n + ".txt" } })
const frame = (events) => events.map((e) => "event: " + e.type + "\\ndata: " + JSON.stringify(e) + "\\n\\n").join("")
const functionCallOf = (n) => ({ type: "function_call", id: "fc_" + n, call_id: "call_" + n, name: "exec_command", arguments: JSON.stringify({ cmd: "cat file-" + n + ".txt" }) })
const sse = (n) => responses ? frame([
  { type: "response.created", response: { id: "resp_" + n } },
  { type: "response.output_item.done", output_index: 0, item: functionCallOf(n) },
  { type: "response.completed", response: { id: "resp_" + n, usage: { input_tokens: 150000, input_tokens_details: { cached_tokens: 140000 }, output_tokens: 20 } } }
]) : frame([
  { type: "message_start", message: { id: "msg_" + n, type: "message", role: "assistant", model: "claude-bench", content: [], stop_reason: null, usage: { input_tokens: 150000, output_tokens: 1 } } },
  { type: "content_block_start", index: 0, content_block: { ...callOf(n), input: {} } },
  { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: JSON.stringify(callOf(n).input) } },
  { type: "content_block_stop", index: 0 },
  { type: "message_delta", delta: { stop_reason: "tool_use", stop_sequence: null }, usage: { output_tokens: 20 } },
  { type: "message_stop" }
])
const filler = (seed, chars) => {
  let out = ""
  let x = seed
  while (out.length < chars) {
    x = (x * 1103515245 + 12345) % 2147483648
    out += "line " + x.toString(36) + " of the output of a command run by the agent\\n"
  }
  return out.slice(0, chars)
}
const round = (n, chars = resultChars) => responses ? [
  functionCallOf(n),
  { type: "function_call_output", call_id: "call_" + n, output: filler(n, chars) }
] : [
  { role: "assistant", content: [callOf(n)] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_" + n, content: filler(n, chars) }] }
]
const post = (url, body, headers) => new Promise((resolve, reject) => {
  const start = performance.now()
  let first = -1
  const req = Http.request(url, { method: "POST", headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body), ...headers } }, (res) => {
    res.on("data", () => { if (first < 0) first = performance.now() - start })
    res.on("end", () => resolve({ first, total: performance.now() - start, status: res.statusCode }))
  })
  req.on("error", reject)
  req.end(body)
})
const server = Http.createServer((req, res) => {
  const parts = []
  req.on("data", (c) => parts.push(c))
  req.on("end", () => {
    const body = JSON.parse(Buffer.concat(parts).toString("utf8"))
    res.writeHead(200, { "content-type": "text/event-stream" })
    res.end(sse((body.messages ?? body.input).length))
  })
})
server.listen(0, "127.0.0.1", () => parentPort.postMessage({ upstream: "http://127.0.0.1:" + server.address().port }))
parentPort.once("message", async ({ baton, token }) => {
  const upstream = "http://127.0.0.1:" + server.address().port
  const system = [{ type: "text", text: "You are a coding agent." }]
  const messages = responses
    ? [
      { type: "message", role: "developer", content: [{ type: "input_text", text: "You are a coding agent." }] },
      { type: "message", role: "user", content: [{ type: "input_text", text: "Work through the files." }] }
    ]
    : [{ role: "user", content: [{ type: "text", text: "Work through the files." }] }]
  for (let i = 0; i < rounds; i++) messages.push(...round(messages.length))
  const headers = responses ? { "session-id": "bench-session", "thread-id": "bench-session" } : { "anthropic-version": "2023-06-01", "x-claude-code-session-id": "bench-session" }
  const path = responses ? "/v1/responses" : "/v1/messages"
  const key = (k) => responses ? { authorization: "Bearer " + k } : { "x-api-key": k }
  const samples = []
  let bytes = 0
  for (let i = 0; i < warmup + requests; i++) {
    const body = JSON.stringify(responses
      ? { model: "gpt-bench", stream: true, input: messages, store: false, prompt_cache_key: "bench-session" }
      : { model: "claude-bench", max_tokens: 32000, stream: true, system, messages })
    bytes = body.length
    const direct = await post(upstream + path, body, { ...headers, ...key("sk-bench") })
    const via = await post(baton + path, body, { ...headers, ...key(token) })
    if (direct.status !== 200 || via.status !== 200) throw new Error("status " + direct.status + " / " + via.status)
    if (i >= warmup) samples.push({ direct, via })
    if (i === warmup - 1) await new Promise((resolve) => { parentPort.once("message", resolve); parentPort.postMessage({ warm: true }) })
    // Measured rounds add short results, so the history stays near its starting size.
    messages.push(...round(messages.length, 1000))
  }
  server.close()
  parentPort.postMessage({ samples, bytes, historyMessages: messages.length - 2 })
})
`

interface Timing {
  readonly first: number
  readonly total: number
}

/**
 * CPU time of this process's main thread (ms): the scheduler's nanosecond count (`/proc/self/task/<pid>/schedstat`,
 * its first field), else user + system from `stat` (clock ticks of 10 ms).
 */
const mainThreadCpuMs = () => {
  try {
    return Number(Fs.readFileSync(`/proc/self/task/${process.pid}/schedstat`, "utf8").split(" ")[0]) / 1e6
  } catch {
    const stat = Fs.readFileSync(`/proc/self/task/${process.pid}/stat`, "utf8")
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return (Number(fields[11]) + Number(fields[12])) * 10
  }
}

/**
 * Counts every statement better-sqlite3 runs (the module `@effect/sql-sqlite-node` loads), by SQL text, while `on`.
 */
const sqlCounter = () => {
  const requireSqlite = createRequire(createRequire(import.meta.url).resolve("@effect/sql-sqlite-node/package.json", { paths: [Path.join(process.cwd(), "packages/persistence")] }))
  const Database = requireSqlite("better-sqlite3") as new(file: string) => { prepare: (sql: string) => object; close: () => void }
  const probe = new Database(":memory:")
  const proto = Object.getPrototypeOf(probe.prepare("select 1")) as Record<string, (...args: Array<unknown>) => unknown>
  probe.close()
  const counts = new Map<string, { n: number; ms: number }>()
  const state = { on: false }
  for (const method of ["run", "get", "all", "iterate"] as const) {
    const original = proto[method]!
    proto[method] = function(this: { source: string }, ...args: Array<unknown>) {
      if (!state.on) return original.apply(this, args)
      const start = performance.now()
      try {
        return original.apply(this, args)
      } finally {
        const c = counts.get(this.source) ?? { n: 0, ms: 0 }
        c.n++
        c.ms += performance.now() - start
        counts.set(this.source, c)
      }
    }
  }
  return { counts, state }
}

const quantile = (xs: ReadonlyArray<number>, q: number) => {
  const sorted = [...xs].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!
}

const main = Effect.gen(function*() {
  const sql = sqlCounter()
  const worker = new Worker(workerSource, { eval: true, workerData: { rounds, resultChars, requests, warmup, protocol } })
  yield* Effect.addFinalizer(() => Effect.promise(() => worker.terminate()))
  const upstream = yield* Effect.promise(() => new Promise<{ url: string }>((resolve) => worker.once("message", (m: { upstream: string }) => resolve({ url: m.upstream }))))
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-gateway-bench-"))
  const config = Path.join(dir, "baton.json")
  Fs.writeFileSync(config, JSON.stringify({
    port: 0,
    providers: [{
      kind: protocol === "responses" ? "openai-responses" : "anthropic-messages",
      name: "upstream",
      baseUrl: protocol === "responses" ? `${upstream.url}/v1` : upstream.url,
      model: "bench-model",
      apiKeyEnv: "BENCH_KEY",
      contextWindow: 1_000_000,
      autoCompactThreshold: null,
      maxOutputTokens: 32_000,
      prices: { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 },
      toolResultOffload: process.env["OFFLOAD"] !== "off"
    }],
    auth: { token },
    gateway: { routes: [{ model: protocol === "responses" ? "gpt-*" : "claude-*", provider: "upstream" }] }
  }))
  const settings = yield* ServerConfig.resolve({ config, dataDir: dir }).pipe(
    Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["BENCH_KEY", "sk-bench"]])))
  )
  // `Server.layer`'s graph, with the listener kept in the context to read its port.
  const context = yield* Layer.build(Server.httpLayer({
    tokens: { admin: settings.auth.adminToken, read: settings.auth.readToken },
    maxBodyBytes: settings.limits.maxBodyBytes,
    gateway: Server.gatewayOf(settings)
  }).pipe(Layer.provideMerge(Server.listener(settings)), Layer.provideMerge(Server.orchestratorLayer(settings))))
  const address = Context.get(context, HttpServer.HttpServer).address as HttpServer.TcpAddress
  const baton = `http://127.0.0.1:${address.port}`
  const profile = process.env["CPUPROF"]
  const session = new Inspector.Session()
  const post = (method: string, params?: object) =>
    new Promise<unknown>((resolve, reject) => session.post(method, params, (e, r) => (e ? reject(e) : resolve(r))))
  let start = { cpu: 0, elu: performance.eventLoopUtilization() }
  const done = new Promise<{ samples: Array<{ direct: Timing; via: Timing }>; bytes: number; historyMessages: number }>((resolve, reject) => {
    worker.on("message", (m: { warm?: true }) => {
      if (m.warm !== true) return resolve(m as never)
      // The measured requests start: the warm-up (the whole history stored) is left out of the main thread's figures.
      void (async () => {
        if (profile !== undefined) {
          session.connect()
          await post("Profiler.enable")
          // 100 µs between samples (the default 1 ms leaves a few samples per request).
          await post("Profiler.setSamplingInterval", { interval: Number(process.env["CPUPROF_US"] ?? 100) })
          await post("Profiler.start")
        }
        sql.state.on = true
        start = { cpu: mainThreadCpuMs(), elu: performance.eventLoopUtilization() }
        worker.postMessage({ go: true })
      })()
    })
    worker.once("error", reject)
  })
  worker.postMessage({ baton, token })
  const { bytes, historyMessages, samples } = yield* Effect.promise(() => done)
  const cpu = mainThreadCpuMs() - start.cpu
  const elu = performance.eventLoopUtilization(start.elu)
  sql.state.on = false
  if (profile !== undefined) {
    const { profile: data } = (yield* Effect.promise(() => post("Profiler.stop"))) as { profile: unknown }
    Fs.writeFileSync(profile, JSON.stringify(data))
    session.disconnect()
  }
  const statements = [...sql.counts.values()].reduce((a, b) => a + b.n, 0)
  const statementMs = [...sql.counts.values()].reduce((a, b) => a + b.ms, 0)
  const row = (name: string, xs: ReadonlyArray<number>) =>
    `${name.padEnd(34)} p50 ${quantile(xs, 0.5).toFixed(2).padStart(7)} ms   p90 ${quantile(xs, 0.9).toFixed(2).padStart(7)} ms`
  console.log(`gateway bench (${protocol === "responses" ? "/v1/responses" : "/v1/messages"}): ${requests} request pairs, history ${historyMessages} messages, last body ${(bytes / 1e6).toFixed(2)} MB (~${Math.round(bytes / 4 / 1000)}k tokens at 4 chars/token)`)
  console.log(row("direct: first byte", samples.map((s) => s.direct.first)))
  console.log(row("through Baton: first byte", samples.map((s) => s.via.first)))
  console.log(row("added to the first byte", samples.map((s) => s.via.first - s.direct.first)))
  console.log(row("direct: whole answer", samples.map((s) => s.direct.total)))
  console.log(row("through Baton: whole answer", samples.map((s) => s.via.total)))
  console.log(row("added to the whole answer", samples.map((s) => s.via.total - s.direct.total)))
  console.log(`Baton's main thread per request: CPU ${(cpu / requests).toFixed(2)} ms, event loop busy ${(elu.active / requests).toFixed(2)} ms, ${(statements / requests).toFixed(1)} SQL statements (${(statementMs / requests).toFixed(2)} ms in SQLite)`)
  if (process.env["SQL"] === "1") {
    for (const [text, c] of [...sql.counts].sort((a, b) => b[1].ms - a[1].ms)) {
      console.log(`${(c.n / requests).toFixed(2).padStart(6)} x ${(c.ms / requests).toFixed(3).padStart(7)} ms  ${text.replace(/\s+/g, " ").slice(0, 130)}`)
    }
  }
})

/**
 * Baton runs on the scheduler `baton serve` runs on (`CliRuntime.timeSliced`); `SCHEDULER=default`: Effect's default
 * scheduler (what this benchmark measured before 2026-12-04); `SCHEDULER=batched`: every yield from `setImmediate`
 * (`baton serve`'s scheduler before 2026-12-04). The agent and the upstream are in the worker, on neither.
 */
const scheduler = process.env["SCHEDULER"] === "default"
  ? null
  : process.env["SCHEDULER"] === "batched"
  ? Scheduler.makeBatched((run) => setImmediate(run))
  : timeSliced()

NodeRuntime.runMain(scheduler === null ? Effect.scoped(main) : Effect.withScheduler(Effect.scoped(main), scheduler))
