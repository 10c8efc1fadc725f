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
 */
import { Server, ServerConfig } from "@baton/server"
import { HttpServer } from "@effect/platform"
import { NodeRuntime } from "@effect/platform-node"
import { ConfigProvider, Context, Effect, Layer } from "effect"
import * as Fs from "node:fs"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import { performance } from "node:perf_hooks"

const token = "bench-token-0123456789abcdef"
const rounds = Number(process.env["ROUNDS"] ?? 60)
const resultChars = Number(process.env["RESULT_CHARS"] ?? 10_000)
const requests = Number(process.env["REQUESTS"] ?? 40)
const warmup = Number(process.env["WARMUP"] ?? 5)

/** The reply's tool call for a history of `n` messages: the same from both paths, so histories stay identical. */
const callOf = (n: number) => ({ type: "tool_use", id: `toolu_${n}`, name: "Bash", input: { command: `cat file-${n}.txt` } })

const sse = (n: number) => {
  const events = [
    { type: "message_start", message: { id: `msg_${n}`, type: "message", role: "assistant", model: "claude-bench", content: [], stop_reason: null, usage: { input_tokens: 150_000, output_tokens: 1 } } },
    { type: "content_block_start", index: 0, content_block: { ...callOf(n), input: {} } },
    { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: JSON.stringify(callOf(n).input) } },
    { type: "content_block_stop", index: 0 },
    { type: "message_delta", delta: { stop_reason: "tool_use", stop_sequence: null }, usage: { output_tokens: 20 } },
    { type: "message_stop" }
  ]
  return events.map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join("")
}

const startUpstream = () =>
  new Promise<{ server: Http.Server; url: string }>((resolve) => {
    const server = Http.createServer((req, res) => {
      const parts: Array<Buffer> = []
      req.on("data", (c: Buffer) => parts.push(c))
      req.on("end", () => {
        const body = JSON.parse(Buffer.concat(parts).toString("utf8")) as { messages: Array<unknown> }
        res.writeHead(200, { "content-type": "text/event-stream" })
        res.end(sse(body.messages.length))
      })
    })
    server.listen(0, "127.0.0.1", () => resolve({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }))
  })

/** Text that does not repeat (so no layer can shortcut it), `chars` long. */
const filler = (seed: number, chars: number) => {
  let out = ""
  let x = seed
  while (out.length < chars) {
    x = (x * 1_103_515_245 + 12_345) % 2_147_483_648
    out += `line ${x.toString(36)} of the output of a command run by the agent\n`
  }
  return out.slice(0, chars)
}

/** A tool round after a history of `n` messages: the reply's call and its result. */
const round = (n: number, chars = resultChars) => [
  { role: "assistant", content: [callOf(n)] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: `toolu_${n}`, content: filler(n, chars) }] }
]

/** POSTs `body` to `url`: milliseconds to the first response byte and to the end. */
const post = (url: string, body: string, headers: Record<string, string>) =>
  new Promise<{ first: number; total: number; status: number }>((resolve, reject) => {
    const start = performance.now()
    let first = -1
    const req = Http.request(url, { method: "POST", headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body), ...headers } }, (res) => {
      res.on("data", () => {
        if (first < 0) first = performance.now() - start
      })
      res.on("end", () => resolve({ first, total: performance.now() - start, status: res.statusCode ?? 0 }))
    })
    req.on("error", reject)
    req.end(body)
  })

const quantile = (xs: ReadonlyArray<number>, q: number) => {
  const sorted = [...xs].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!
}

const main = Effect.gen(function*() {
  const upstream = yield* Effect.promise(startUpstream)
  yield* Effect.addFinalizer(() => Effect.sync(() => upstream.server.close()))
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-gateway-bench-"))
  const config = Path.join(dir, "baton.json")
  Fs.writeFileSync(config, JSON.stringify({
    port: 0,
    providers: [{
      kind: "anthropic-messages",
      name: "anthropic",
      baseUrl: upstream.url,
      model: "claude-bench",
      apiKeyEnv: "BENCH_KEY",
      contextWindow: 1_000_000,
      autoCompactThreshold: null,
      maxOutputTokens: 32_000,
      prices: { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 }
    }],
    auth: { token },
    gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
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

  const system = [{ type: "text", text: "You are a coding agent." }]
  const messages: Array<unknown> = [{ role: "user", content: [{ type: "text", text: "Work through the files." }] }]
  for (let i = 0; i < rounds; i++) messages.push(...round(messages.length))
  const headers = { "anthropic-version": "2023-06-01", "x-claude-code-session-id": "bench-session" }
  const samples: Array<{ direct: { first: number; total: number }; via: { first: number; total: number } }> = []
  let bytes = 0
  for (let i = 0; i < warmup + requests; i++) {
    const body = JSON.stringify({ model: "claude-bench", max_tokens: 32_000, stream: true, system, messages })
    bytes = body.length
    const direct = yield* Effect.promise(() => post(`${upstream.url}/v1/messages`, body, { ...headers, "x-api-key": "sk-bench" }))
    const via = yield* Effect.promise(() => post(`${baton}/v1/messages`, body, { ...headers, "x-api-key": token }))
    if (direct.status !== 200 || via.status !== 200) return yield* Effect.die(new Error(`status ${direct.status} / ${via.status}`))
    if (i >= warmup) samples.push({ direct, via })
    // Measured rounds add short results, so the history stays near its starting size.
    messages.push(...round(messages.length, 1_000))
  }
  const row = (name: string, xs: ReadonlyArray<number>) =>
    `${name.padEnd(34)} p50 ${quantile(xs, 0.5).toFixed(2).padStart(7)} ms   p90 ${quantile(xs, 0.9).toFixed(2).padStart(7)} ms`
  console.log(`gateway bench: ${requests} request pairs, history ${messages.length - 2} messages, last body ${(bytes / 1e6).toFixed(2)} MB (~${Math.round(bytes / 4 / 1000)}k tokens at 4 chars/token)`)
  console.log(row("direct: first byte", samples.map((s) => s.direct.first)))
  console.log(row("through Baton: first byte", samples.map((s) => s.via.first)))
  console.log(row("added to the first byte", samples.map((s) => s.via.first - s.direct.first)))
  console.log(row("direct: whole answer", samples.map((s) => s.direct.total)))
  console.log(row("through Baton: whole answer", samples.map((s) => s.via.total)))
  console.log(row("added to the whole answer", samples.map((s) => s.via.total - s.direct.total)))
})

NodeRuntime.runMain(Effect.scoped(main))
