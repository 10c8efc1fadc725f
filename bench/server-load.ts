/**
 * Server load: turns per second and server-side overhead per turn of the Baton HTTP server under autocannon, at 1,
 * 10 and 100 concurrent threads, on SQLite and on Postgres, against a bare HttpApi endpoint measured in the same run
 * as the machine's limit.
 *
 * Each server is its own process on loopback (this file, run with a role), the load generator (autocannon 8, in this
 * process) another:
 * - `bare`: an `HttpApi` with one endpoint, `POST /noop` (a `{text}` JSON body decoded, `{ok:true}` answered) on
 *   `NodeHttpServer`: what one HTTP request through `@effect/platform` costs on this machine;
 * - `baton`: the server's production graph (`ServerConfig.resolve`, the API with `HttpGuard` and bearer auth, the
 *   embedded orchestrator, the `RunDriver`) with the scripted providers at zero latency, on a fresh SQLite file or a
 *   fresh Postgres schema. Two bench hooks: a middleware outside the guard notes when each request with an
 *   `Idempotency-Key` arrived, and each provider adapter's `startTurn` notes when the turn reached it (the prompt is
 *   the key): overhead = provider call - request in, the server's share of a turn (guard, auth, decode, the queueing
 *   unit of work, the driver's hand-off, turn start) without the load generator or the network.
 *
 * One autocannon connection per thread, each a closed loop: `POST /threads/{id}/messages` (202 with the run id), then
 * `GET /runs/{id}?waitMs=60000`, which answers when the run has ended. A turn = one such pair that ended `completed`;
 * turns/s = turns / duration. Baton's turns/s is reported as a ratio to the bare endpoint's requests/s at the same
 * concurrency (a turn is two requests and a run). CPU time, which other processes on the machine disturb far less than
 * rates: the Baton server's per turn (its `process.cpuUsage()`, every thread of the process), the load generator's per
 * turn (this process: it is not the bottleneck while this stays well below the server's), and the bare server's per
 * request (from `/proc`, on Linux).
 *
 * Environment: `DURATION` seconds per measurement (10), `WARMUP` seconds (3), `CONCURRENCY` (`1,10,100`), `DIALECTS`
 * (`sqlite,postgres`; Postgres at `BATON_TEST_DATABASE_URL` or 127.0.0.1:5432/test), `BENCH_PROFILE=DIR` (a V8 CPU profile
 * of each Baton server process, written to DIR when it stops), `BENCH_SPANS=FILE` (each span's wall time by name and
 * each statement's by the operation it ran in, written to FILE when the Baton server stops; see `withSpanTotals`).
 *
 * Run: `pnpm bench:server` (= `npx tsx bench/server-load.ts`) from the repository root. SSE delivery latency to 100
 * subscribers is `bench/event-feed.ts`.
 */
import { Api } from "@baton/contracts"
import { Database } from "@baton/persistence"
import type { ProviderAdapter } from "@baton/providers"
import { Auth, EventStream, Handlers, HttpGuard, Server, ServerConfig } from "@baton/server"
import { HttpApi, HttpApiBuilder, HttpApiEndpoint, HttpApiGroup, HttpServer, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServer, NodeRuntime } from "@effect/platform-node"
import autocannon from "autocannon"
import { timeSliced } from "../apps/cli/src/CliRuntime.js"
import { Console, Data, Effect, Layer, Option, Scheduler, Schema, Stream, Tracer } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Http from "node:http"
import * as Os from "node:os"
import * as Path from "node:path"
import { performance } from "node:perf_hooks"
import { fileURLToPath } from "node:url"

const token = "bench-token-0123456789abcdef"
const self = fileURLToPath(import.meta.url)

// ---- the bare endpoint

class BareGroup extends HttpApiGroup.make("bare").add(
  HttpApiEndpoint.post("noop", "/noop")
    .setPayload(Schema.Struct({ text: Schema.String }))
    .addSuccess(Schema.Struct({ ok: Schema.Boolean }))
) {}
class BareApi extends HttpApi.make("bare").add(BareGroup) {}

const listening = Layer.effectDiscard(Effect.flatMap(HttpServer.HttpServer, (server) =>
  Console.log(`listening on ${HttpServer.formatAddress(server.address)}`)))

const loopback = NodeHttpServer.layer(() => Http.createServer(), { host: "127.0.0.1", port: 0 })

const bareLayer = listening.pipe(
  Layer.provideMerge(HttpApiBuilder.serve()),
  Layer.provide(HttpApiBuilder.api(BareApi).pipe(
    Layer.provide(HttpApiBuilder.group(BareApi, "bare", (handlers) => handlers.handle("noop", () => Effect.succeed({ ok: true }))))
  )),
  Layer.provide(loopback)
)

// ---- Baton with the two hooks

/** When each keyed request arrived (ms, `performance.now()`), until its turn reaches the provider. */
const arrived = new Map<string, number>()
/** Request in -> provider call, in ms, since the last collection. */
const overheads: Array<number> = []

/**
 * Notes the arrival of keyed requests; `GET /__bench/overhead` answers the samples so far (and clears them) with the
 * process's CPU time so far (user + system, µs): the server's CPU per turn is the difference over a measurement
 * divided by its turns, a figure that other processes on the machine disturb far less than turns/s.
 */
const timing = <E, R>(app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>) =>
  Effect.gen(function*() {
    const at = performance.now()
    const request = yield* HttpServerRequest.HttpServerRequest
    if (request.url === "/__bench/overhead") {
      const samples = overheads.splice(0)
      arrived.clear()
      const cpu = process.cpuUsage()
      return HttpServerResponse.unsafeJson({ samples, cpuMicros: cpu.user + cpu.system })
    }
    const key = request.headers["idempotency-key"]
    if (key !== undefined) arrived.set(key, at)
    return yield* app
  })

/** The adapter with its turns' start noted against the arrival of the request whose key is the prompt. */
const timed = (adapter: ProviderAdapter.ProviderAdapterShape): ProviderAdapter.ProviderAdapterShape => ({
  ...adapter,
  startTurn: (input) =>
    Stream.suspend(() => {
      const at = arrived.get(input.prompt)
      if (at !== undefined) {
        overheads.push(performance.now() - at)
        arrived.delete(input.prompt)
      }
      return adapter.startTurn(input)
    })
})

/** `Server.layer` as production builds it, with `timing` outside the guard and timed adapters (no /docs). */
const batonLayer = (settings: ServerConfig.ServerSettings) => {
  const orchestrator = Server.orchestratorLayer(settings, timed)
  const tokens = { admin: settings.auth.adminToken, read: settings.auth.readToken }
  const guard = HttpGuard.middleware({ maxBodyBytes: settings.limits.maxBodyBytes, tokens })
  return listening.pipe(
    Layer.provideMerge(HttpApiBuilder.serve((app) => timing(guard(app)))),
    Layer.provide(HttpApiBuilder.api(Api.BatonApi).pipe(
      Layer.provide(Handlers.layer),
      Layer.provide(EventStream.Stopping.layer),
      Layer.provide(Auth.sessionLayer(tokens)),
      Layer.provide(Auth.layer(tokens))
    )),
    Layer.provide(loopback),
    Layer.provide(orchestrator)
  )
}

// ---- the load generator

interface Child {
  readonly url: string
  readonly process: ChildProcess
}

/** A server process exited before it printed its "listening on" line. */
class ServerDidNotStart extends Data.TaggedError("ServerDidNotStart")<{ readonly role: string; readonly code: number | null; readonly stderr: string }> {}

/** Starts this file as `role` and waits for its "listening on" line. */
const start = (role: string, args: ReadonlyArray<string> = []) =>
  Effect.async<Child, ServerDidNotStart>((resume) => {
    const profile = process.env.BENCH_PROFILE !== undefined && role === "serve-baton" ? ["--cpu-prof", "--cpu-prof-dir", process.env.BENCH_PROFILE] : []
    const child = spawn(process.execPath, [...profile, "--import", "tsx", self, role, ...args], {
      env: { ...process.env, BATON_TOKEN: token, BATON_CONFIG: "", BATON_DATA_DIR: "", BATON_DATABASE_URL: "", BATON_PORT: "", BATON_HOST: "" },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let out = ""
    let err = ""
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => void (err += chunk))
    child.on("exit", (code) => resume(Effect.fail(new ServerDidNotStart({ role, code, stderr: err }))))
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      out += chunk
      const found = /listening on (http:\/\/\S+)/.exec(out)
      if (found !== null) resume(Effect.succeed({ url: found[1]!, process: child }))
    })
  })

const stop = (child: Child) =>
  Effect.async<void>((resume) => {
    child.process.removeAllListeners("exit")
    child.process.on("exit", () => resume(Effect.void))
    child.process.kill("SIGTERM")
  })

/**
 * A process's CPU time so far (user + system, ms) from `/proc/<pid>/stat` at Linux's 100 ticks per second, or `null`
 * where there is no `/proc` (the bare server has no hook of its own to answer it).
 */
const processCpuMillis = (pid: number | undefined): number | null => {
  try {
    const fields = Fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
    return (Number(fields[11]) + Number(fields[12])) * 10
  } catch {
    return null
  }
}

const json = (url: string, init: RequestInit = {}) =>
  Effect.promise(async () => {
    const response = await fetch(url, { ...init, headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...init.headers } })
    return await response.json() as unknown
  })

const cannon = (options: autocannon.Options) =>
  Effect.async<autocannon.Result>((resume) => {
    void autocannon(options, (error, result) => {
      if (error !== null && error !== undefined) throw error
      resume(Effect.succeed(result))
    })
  })

const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!

interface BareFigure {
  readonly concurrency: number
  readonly requestsPerSecond: number
  readonly latencyP50: number
}

let keys = 0

/** An autocannon connection's context: its thread, and the run its last send queued. */
const connection = (context: object) => context as { threadId?: string; runId?: string }

/** One measurement on the Baton server at `url`: `concurrency` threads, each a closed loop of send + wait. */
const batonRun = (url: string, concurrency: number, duration: number) =>
  Effect.gen(function*() {
    const threadIds: Array<string> = []
    for (let i = 0; i < concurrency; i++) {
      const created = (yield* json(`${url}/threads`, { method: "POST", body: JSON.stringify({ providerInstance: "codex", title: `load ${i}` }) })) as { threadId: string }
      threadIds.push(created.threadId)
    }
    let next = 0
    let completed = 0
    let other = 0
    /** Answers that were not 202 (send) or 200 (wait), by `request status`. */
    const refused = new Map<string, number>()
    const tally = (what: string, status: number, body: string) => {
      const tag = /"_tag":"(\w+)"/.exec(body)?.[1] ?? ""
      refused.set(`${what} ${status} ${tag}`, (refused.get(`${what} ${status} ${tag}`) ?? 0) + 1)
    }
    const cpuBefore = ((yield* json(`${url}/__bench/overhead`)) as { cpuMicros: number }).cpuMicros
    const clientBefore = process.cpuUsage()
    const result = yield* cannon({
      url,
      connections: concurrency,
      duration,
      // The wait answers when the run ends: give it as long as the server may take (its own bound is 60 s).
      timeout: 90,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      initialContext: {},
      requests: [
        {
          method: "POST",
          setupRequest: (request, raw) => {
            const context = connection(raw)
            context.threadId ??= threadIds[next++ % threadIds.length]!
            const key = `k${++keys}`
            return {
              ...request,
              path: `/threads/${context.threadId}/messages`,
              headers: { ...request.headers, "idempotency-key": key },
              body: JSON.stringify({ text: key })
            }
          },
          onResponse: (status, body, raw) => {
            if (status === 202) connection(raw).runId = (JSON.parse(body) as { runId: string }).runId
            else tally("send", status, body)
          }
        },
        {
          method: "GET",
          setupRequest: (request, raw) => ({ ...request, path: `/runs/${connection(raw).runId!}?waitMs=60000` }),
          onResponse: (status, body) => {
            if (status !== 200) return tally("wait", status, body)
            const view = JSON.parse(body) as { run?: { status?: string } }
            if (view.run?.status === "completed") completed++
            else other++
          }
        }
      ]
    })
    const client = process.cpuUsage(clientBefore)
    const after = (yield* json(`${url}/__bench/overhead`)) as { samples: Array<number>; cpuMicros: number }
    const samples = after.samples.sort((a, b) => a - b)
    return {
      concurrency,
      turnsPerSecond: completed / result.duration,
      completed,
      other,
      errors: result.errors + result.timeouts,
      refused: [...refused].map(([k, v]) => `${k}: ${v}`).join(", ") || "none",
      overheadP50: percentile(samples, 50),
      overheadP99: percentile(samples, 99),
      samples: samples.length,
      requestP50: result.latency.p50,
      cpuPerTurn: (after.cpuMicros - cpuBefore) / 1000 / Math.max(1, completed),
      clientCpuPerTurn: (client.user + client.system) / 1000 / Math.max(1, completed)
    }
  })

const main = Effect.gen(function*() {
  const duration = Number(process.env.DURATION ?? 10)
  const warmup = Number(process.env.WARMUP ?? 3)
  const levels = (process.env.CONCURRENCY ?? "1,10,100").split(",").map(Number)
  const dialects = (process.env.DIALECTS ?? "sqlite,postgres").split(",")
  yield* Console.log(`server load: ${duration} s per measurement, ${Os.cpus().length} cores, load average ${Os.loadavg().map((l) => l.toFixed(1)).join(" ")}`)

  const bareServer = yield* start("serve-bare")
  const noop = (connections: number, seconds: number) =>
    Effect.map(Effect.zip(Effect.sync(() => processCpuMillis(bareServer.process.pid)), cannon({
      url: `${bareServer.url}/noop`,
      connections,
      duration: seconds,
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ text: "bench" })
    })), ([before, result]) => {
      const after = processCpuMillis(bareServer.process.pid)
      return { ...result, cpuPerRequest: before === null || after === null ? null : (after - before) / Math.max(1, result.requests.total) }
    })
  yield* noop(10, warmup)
  const bareFigures = new Map<number, BareFigure>()
  for (const c of levels) {
    const r = yield* noop(c, duration)
    bareFigures.set(c, { concurrency: c, requestsPerSecond: r.requests.total / r.duration, latencyP50: r.latency.p50 })
    yield* Console.log(
      `bare HttpApi POST /noop, ${c} connection(s): ${(r.requests.total / r.duration).toFixed(0)} req/s, p50 ${r.latency.p50} ms, ` +
        `${r.cpuPerRequest === null ? "" : `server CPU ${(r.cpuPerRequest * 1000).toFixed(0)} µs per request, `}errors ${r.errors + r.non2xx}`
    )
  }
  yield* stop(bareServer)

  const rows: Array<string> = []
  for (const dialect of dialects) {
    const figures = yield* Effect.gen(function*() {
      const db = dialect === "postgres"
        ? ["--database-url", yield* Database.PgSchemaUrl]
        : ["--db", Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-load-")), "baton.sqlite")]
      const server = yield* start("serve-baton", db)
      yield* batonRun(server.url, 10, warmup)
      const out = []
      for (const c of levels) {
        const f = yield* batonRun(server.url, c, duration)
        const ratio = f.turnsPerSecond / bareFigures.get(c)!.requestsPerSecond
        yield* Console.log(
          `baton ${dialect}, ${c} thread(s): ${f.turnsPerSecond.toFixed(1)} turns/s (${(ratio * 100).toFixed(1)}% of bare req/s), ` +
            `overhead p50 ${f.overheadP50.toFixed(2)} ms p99 ${f.overheadP99.toFixed(2)} ms (${f.samples} turns), ` +
            `request p50 ${f.requestP50} ms, server CPU ${f.cpuPerTurn.toFixed(2)} ms per turn (load generator ${f.clientCpuPerTurn.toFixed(2)}), runs not completed ${f.other}, refused ${f.refused}, transport errors ${f.errors}`
        )
        out.push({ ...f, ratio })
      }
      yield* stop(server)
      return out
    }).pipe(Effect.provide(dialect === "postgres" ? Database.layerPgSchema() : Layer.succeed(Database.PgSchemaUrl, "")))
    for (const f of figures) {
      const b = bareFigures.get(f.concurrency)!
      rows.push(
        `| ${dialect} | ${f.concurrency} | ${f.turnsPerSecond.toFixed(0)} | ${b.requestsPerSecond.toFixed(0)} | ${(f.ratio * 100).toFixed(1)}% | ` +
          `${f.overheadP50.toFixed(2)} | ${f.overheadP99.toFixed(2)} | ${f.cpuPerTurn.toFixed(2)} |`
      )
    }
  }
  yield* Console.log("\n| database | threads | turns/s | bare req/s | turns/s ÷ bare req/s | overhead p50 ms | overhead p99 ms | server CPU ms per turn |")
  yield* Console.log("| --- | --- | --- | --- | --- | --- | --- | --- |")
  for (const row of rows) yield* Console.log(row)
})

/**
 * Both servers run on the scheduler `baton serve` runs on (`CliRuntime.timeSliced`). `SCHEDULER=default`: Effect's
 * default scheduler instead (what this benchmark measured before 2026-12-04, while `baton serve` ran on the next one);
 * `SCHEDULER=batched`: every yield from `setImmediate` (`baton serve`'s scheduler before 2026-12-04).
 */
const onProductionScheduler = <A, E>(self: Effect.Effect<A, E>) =>
  process.env["SCHEDULER"] === "default"
    ? self
    : Effect.withScheduler(self, process.env["SCHEDULER"] === "batched" ? Scheduler.makeBatched((run) => setImmediate(run)) : timeSliced())

/**
 * `BENCH_SPANS=FILE`: the Baton server process records every span's wall time (inclusive, ms) by span name (a statement by the operation it ran in and its text) and writes
 * the totals to FILE when it exits (total, count, mean, median; sorted by total): where a turn's time goes by operation
 * (`http.server`, `ThreadService.*`, `TurnExecution.*`, `sql.execute`, ...), which a CPU profile cannot say because
 * the fibers' stacks end at the scheduler.
 */
const withSpanTotals = <A, E>(self: Effect.Effect<A, E>) => {
  const file = process.env["BENCH_SPANS"]
  if (file === undefined || file === "") return self
  const totals = new Map<string, { count: number; ms: number; all: Array<number> }>()
  process.on("exit", () => {
    const rows = [...totals].sort((a, b) => b[1].ms - a[1].ms)
      .map(([name, t]) => {
        const sorted = t.all.sort((a, b) => a - b)
        return `${t.ms.toFixed(1).padStart(10)} ms ${String(t.count).padStart(8)}x mean ${(t.ms / t.count).toFixed(3).padStart(8)} ms p50 ${sorted[Math.floor(sorted.length / 2)]!.toFixed(3).padStart(8)} ms  ${name}`
      })
    Fs.writeFileSync(file, rows.join("\n") + "\n")
  })
  /** The nearest enclosing span that is not the SQL client's own (`sql.*`). */
  const within = (parent: Option.Option<Tracer.AnySpan>): string => {
    for (let p = Option.getOrUndefined(parent); p !== undefined; p = p._tag === "Span" ? Option.getOrUndefined(p.parent) : undefined) {
      if (p._tag === "Span" && !p.name.startsWith("sql.")) return p.name
    }
    return "(none)"
  }
  const tracer = Tracer.make({
    span: (name, parent, context, links, startTime, kind) => {
      const t0 = performance.now()
      const attributes = new Map<string, unknown>()
      return {
        _tag: "Span", name, spanId: "s", traceId: "t", parent, context, status: { _tag: "Started", startTime },
        attributes, links: [...links], sampled: true, kind,
        end: () => {
          const key = name === "sql.execute" ? `sql in ${within(parent)}: ${String(attributes.get("db.query.text") ?? "").replace(/\s+/g, " ").slice(0, 100)}` : name
          const t = totals.get(key) ?? { count: 0, ms: 0, all: [] }
          const ms = performance.now() - t0
          t.count++
          t.ms += ms
          t.all.push(ms)
          totals.set(key, t)
        },
        attribute: (k, v) => void attributes.set(k, v), event: () => {}, addLinks: () => {}
      }
    },
    context: (f) => f()
  })
  return Effect.withTracer(self, tracer)
}

const role = process.argv[2]
const withSpans = (process.env["BENCH_SPANS"] ?? "") !== ""
if (role === "serve-bare") {
  NodeRuntime.runMain(onProductionScheduler(Layer.launch(bareLayer)))
} else if (role === "serve-baton") {
  const flag = process.argv[3]
  const value = process.argv[4]
  NodeRuntime.runMain(onProductionScheduler(Effect.gen(function*() {
    const settings = yield* ServerConfig.resolve({
      host: "127.0.0.1",
      port: 0,
      ...(flag === "--database-url" ? { databaseUrl: value } : { db: value })
    })
    // As `Server.run` does (tracing off unless configured), except that BENCH_SPANS needs the spans.
    return yield* Layer.launch(batonLayer(settings)).pipe(Server.withTracing({ tracing: settings.tracing === true || withSpans }))
  }).pipe(withSpanTotals)))
} else {
  NodeRuntime.runMain(main)
}
