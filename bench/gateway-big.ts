/**
 * One large request through the gateway (`POST /v1/messages`), and what it does to every other client: the request's
 * time, and the worst stall of `GET /healthz` polled meanwhile by another client.
 *
 * One process: `baton serve`'s production graph (`Server.layer`: SQLite in a fresh directory, the gateway routed to a
 * loopback Anthropic upstream, on `baton serve`'s scheduler) on the main thread; the upstream (node http, every POST
 * answered with a short SSE reply), the agent and the `/healthz` poller in a worker thread (other processes in real
 * use: Baton's main thread must not hold their clocks).
 *
 * Cases (`BIG`, comma-separated; default `single,many`):
 * - `single`: one user message of `SINGLE_MB` (20) MB of text (words and numbers, ~5 characters a token);
 * - `many`: `MANY` (300,000) short messages, alternately user and assistant (~13 MB).
 * Each case runs `RUNS` (2) times on a fresh session each (the first time Baton sees the conversation: it stores every
 * message). The poller sends `GET /healthz` one after the other (a new request as soon as the last one answered) from
 * before the big request starts until it ends; the worst stall is the longest of those requests. A neighbour agent
 * meanwhile sends short `/v1/messages` requests of a conversation of its own, one after the other (each needs the
 * database: its worst time shows how long the big request's units of work held it; `NEIGHBOUR=off`: none).
 *
 * Run: `npx tsx bench/gateway-big.ts`. `CPUPROF=<file>`: a CPU profile of the runs (`.cpuprofile`).
 */
import { Server, ServerConfig } from "@baton/server"
import { timeSliced } from "../apps/cli/src/CliRuntime.js"
import { HttpServer } from "@effect/platform"
import { NodeRuntime } from "@effect/platform-node"
import { ConfigProvider, Context, Effect, Layer } from "effect"
import * as Fs from "node:fs"
import * as Inspector from "node:inspector"
import * as Os from "node:os"
import * as Path from "node:path"
import { Worker } from "node:worker_threads"

const token = "bench-token-0123456789abcdef"
const cases = (process.env["BIG"] ?? "single,many").split(",").map((s) => s.trim()).filter((s) => s !== "")
const singleMb = Number(process.env["SINGLE_MB"] ?? 20)
const many = Number(process.env["MANY"] ?? 300_000)
const runs = Number(process.env["RUNS"] ?? 2)

const workerSource = `
const { parentPort, workerData } = require("node:worker_threads")
const Http = require("node:http")
const { performance } = require("node:perf_hooks")
const { cases, singleMb, many, runs, neighbourOn } = workerData
const frame = (events) => events.map((e) => "event: " + e.type + "\\ndata: " + JSON.stringify(e) + "\\n\\n").join("")
const sse = () => frame([
  { type: "message_start", message: { id: "msg_big", type: "message", role: "assistant", model: "claude-bench", content: [], stop_reason: null, usage: { input_tokens: 100, output_tokens: 1 } } },
  { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
  { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "ok" } },
  { type: "content_block_stop", index: 0 },
  { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 2 } },
  { type: "message_stop" }
])
const filler = (seed, chars) => {
  const parts = []
  let length = 0
  let x = seed
  while (length < chars) {
    x = (x * 1103515245 + 12345) % 2147483648
    const line = "line " + x.toString(36) + " of the output of a command run by the agent\\n"
    parts.push(line)
    length += line.length
  }
  return parts.join("").slice(0, chars)
}
let upstreamBytes = 0
const server = Http.createServer((req, res) => {
  let n = 0
  req.on("data", (c) => { n += c.length })
  req.on("end", () => {
    upstreamBytes = Math.max(upstreamBytes, n)
    res.writeHead(200, { "content-type": "text/event-stream" })
    res.end(sse())
  })
})
const request = (url, method, body, headers) => new Promise((resolve, reject) => {
  const start = performance.now()
  const req = Http.request(url, { method, agent: false, headers: body === undefined ? headers : { "content-type": "application/json", "content-length": Buffer.byteLength(body), ...headers } }, (res) => {
    res.on("data", () => {})
    res.on("end", () => resolve({ ms: performance.now() - start, status: res.statusCode }))
  })
  req.on("error", reject)
  req.end(body)
})
const bodyOf = (kind, run) => {
  const messages = kind === "single"
    ? [{ role: "user", content: run + " " + filler(run + 1, singleMb * 1e6) }]
    : Array.from({ length: many }, (_, i) => ({ role: i % 2 === 0 ? "user" : "assistant", content: "message " + i + " of run " + run }))
  if (kind === "many" && many % 2 === 0) messages.push({ role: "user", content: "go on" })
  return JSON.stringify({ model: "claude-bench", max_tokens: 1024, stream: true, messages })
}
server.listen(0, "127.0.0.1", () => parentPort.postMessage({ upstream: "http://127.0.0.1:" + server.address().port }))
parentPort.once("message", async ({ baton, token }) => {
  const results = []
  for (const kind of cases) {
    for (let run = 0; run < runs; run++) {
      const body = bodyOf(kind, run)
      const headers = { "anthropic-version": "2023-06-01", "x-claude-code-session-id": "big-" + kind + "-" + run, "x-api-key": token }
      let polling = true
      let worst = 0
      let polls = 0
      let failed = 0
      const poller = (async () => {
        while (polling) {
          const r = await request(baton + "/healthz", "GET", undefined, {})
          if (r.status !== 200) failed++
          worst = Math.max(worst, r.ms)
          polls++
        }
      })()
      // Another agent's conversation meanwhile: one short request after another, each its history plus "ok" and a
      // new question (its records need the database: what the big request's units of work hold up).
      let neighbourWorst = 0
      let neighbourRequests = 0
      let neighbourFailed = 0
      const neighbourStatuses = []
      const neighbour = (async () => {
        const history = []
        const neighbourHeaders = { "anthropic-version": "2023-06-01", "x-claude-code-session-id": "neighbour-" + kind + "-" + run, "x-api-key": token }
        while (polling && neighbourOn) {
          if (history.length > 0) history.push({ role: "assistant", content: "ok" })
          history.push({ role: "user", content: "question " + history.length })
          const r = await request(baton + "/v1/messages", "POST", JSON.stringify({ model: "claude-bench", max_tokens: 64, stream: true, messages: history }), neighbourHeaders)
          if (r.status !== 200) { neighbourFailed++; neighbourStatuses.push(r.status) }
          neighbourWorst = Math.max(neighbourWorst, r.ms)
          neighbourRequests++
        }
      })()
      await new Promise((resolve) => setTimeout(resolve, 50))
      upstreamBytes = 0
      const r = await request(baton + "/v1/messages", "POST", body, headers)
      polling = false
      await poller
      await neighbour
      results.push({ kind, run, bytes: Buffer.byteLength(body), upstreamBytes, ms: r.ms, status: r.status, worst, polls, failed, neighbourWorst, neighbourRequests, neighbourFailed, neighbourStatuses })
    }
  }
  server.close()
  parentPort.postMessage({ results })
})
`

interface Result {
  readonly kind: string
  readonly run: number
  readonly bytes: number
  readonly upstreamBytes: number
  readonly ms: number
  readonly worst: number
  readonly polls: number
  readonly failed: number
  readonly status: number
  readonly neighbourWorst: number
  readonly neighbourRequests: number
  readonly neighbourFailed: number
  readonly neighbourStatuses: ReadonlyArray<number>
}

const main = Effect.gen(function*() {
  const worker = new Worker(workerSource, { eval: true, workerData: { cases, singleMb, many, runs, neighbourOn: process.env["NEIGHBOUR"] !== "off" } })
  yield* Effect.addFinalizer(() => Effect.promise(() => worker.terminate()))
  const upstream = yield* Effect.promise(() => new Promise<string>((resolve) => worker.once("message", (m: { upstream: string }) => resolve(m.upstream))))
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-gateway-big-"))
  const config = Path.join(dir, "baton.json")
  Fs.writeFileSync(config, JSON.stringify({
    port: 0,
    providers: [{
      kind: "anthropic-messages",
      name: "upstream",
      baseUrl: upstream,
      model: "bench-model",
      apiKeyEnv: "BENCH_KEY",
      contextWindow: 1_000_000,
      autoCompactThreshold: null,
      maxOutputTokens: 32_000,
      prices: { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 },
      toolResultOffload: process.env["OFFLOAD"] !== "off"
    }],
    auth: { token },
    gateway: { routes: [{ model: "claude-*", provider: "upstream" }], maxBodyBytes: 64 * 1024 * 1024 }
  }))
  const settings = yield* ServerConfig.resolve({ config, dataDir: dir }).pipe(
    Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["BENCH_KEY", "sk-bench"]])))
  )
  const context = yield* Layer.build(Server.httpLayer({
    tokens: { admin: settings.auth.adminToken, read: settings.auth.readToken },
    maxBodyBytes: settings.limits.maxBodyBytes,
    gateway: Server.gatewayOf(settings)
  }).pipe(Layer.provideMerge(Server.listener(settings)), Layer.provideMerge(Server.orchestratorLayer(settings))))
  const address = Context.get(context, HttpServer.HttpServer).address as HttpServer.TcpAddress
  const profile = process.env["CPUPROF"]
  const session = new Inspector.Session()
  const post = (method: string, params?: object) =>
    new Promise<unknown>((resolve, reject) => session.post(method, params, (e, r) => (e ? reject(e) : resolve(r))))
  if (profile !== undefined) {
    session.connect()
    yield* Effect.promise(() => post("Profiler.enable"))
    yield* Effect.promise(() => post("Profiler.start"))
  }
  const done = new Promise<{ results: Array<Result> }>((resolve, reject) => {
    worker.on("message", (m: { results: Array<Result> }) => resolve(m))
    worker.once("error", reject)
  })
  worker.postMessage({ baton: `http://127.0.0.1:${address.port}`, token })
  const { results } = yield* Effect.promise(() => done)
  if (profile !== undefined) {
    const { profile: data } = (yield* Effect.promise(() => post("Profiler.stop"))) as { profile: unknown }
    Fs.writeFileSync(profile, JSON.stringify(data))
    session.disconnect()
  }
  console.log(`gateway big-body bench (/v1/messages, tool-result offload ${process.env["OFFLOAD"] === "off" ? "off" : "on"})`)
  for (const r of results) {
    const label = r.kind === "single" ? `one message of ${singleMb} MB` : `${many.toLocaleString("en")} messages`
    console.log(
      `${label.padEnd(22)} run ${r.run}: body ${(r.bytes / 1e6).toFixed(1)} MB (upstream got ${(r.upstreamBytes / 1e6).toFixed(1)} MB)  request ${(r.ms / 1000).toFixed(2).padStart(6)} s (status ${r.status})  worst /healthz ${r.worst.toFixed(0).padStart(6)} ms (${r.polls} polls${r.failed > 0 ? `, ${r.failed} not answered 200` : ""})  worst neighbour request ${r.neighbourWorst.toFixed(0).padStart(6)} ms (${r.neighbourRequests} requests${r.neighbourFailed > 0 ? `, ${r.neighbourFailed} not answered 200: ${r.neighbourStatuses.join(", ")}` : ""})`
    )
  }
})

NodeRuntime.runMain(Effect.withScheduler(Effect.scoped(main), timeSliced()))
