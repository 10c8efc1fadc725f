/**
 * `baton serve` stopped (SIGTERM) while an agent's answer streams through the gateway, then started again on the same
 * data directory (issue 14, docs/gateway.md "Forward first, record alongside").
 */
import { Database } from "@baton/persistence"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { frame, loopback, type Reply, sse } from "../../../packages/providers/test/support/Loopback.js"
import { anthropicInstance, callWith, serveBaton } from "./support/Served.js"

const token = "admin-token-0123456789abcdef"

/** Starts `baton serve --port 0 --config FILE --data-dir DIR` (or `--database-url URL`); waits for its URL. */
const serve = (config: string, dataDir: string, databaseUrl?: string) =>
  serveBaton(["--port", "0", "--config", config, ...(databaseUrl === undefined ? ["--data-dir", dataDir] : ["--database-url", databaseUrl])], {
    env: { TEST_MODEL_KEY: "sk-test-0123456789" },
    timeoutMillis: 90_000
  })

const call = callWith(token)

/** An Anthropic answer: its head, pings `gapMillis` apart for about `millis`, then `text` and the end of the message. */
const answer = (text: string, millis: number, gapMillis = 100): Reply =>
  sse(frame("anthropic-messages", [
    `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","usage":{"input_tokens":50,"output_tokens":1}}}`,
    ...Array.from({ length: Math.ceil(millis / gapMillis) }, () => `{"type":"ping"}`),
    `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
    `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":${JSON.stringify(text)}}}`,
    `{"type":"content_block_stop","index":0}`,
    `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}`,
    `{"type":"message_stop"}`
  ]), { gapMillis })

/** A config file in a fresh directory: one Anthropic instance at `upstream`, `claude-*` routed to it, `limits`. */
const configIn = (upstream: string, limits: Record<string, number>) => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-gateway-shutdown-"))
  const config = Path.join(dir, "baton.json")
  Fs.writeFileSync(config, JSON.stringify({
    providers: [{ ...anthropicInstance("up", upstream), toolResultOffload: false }],
    gateway: { routes: [{ model: "claude-*", provider: "up" }] },
    auth: { token },
    limits
  }))
  return { dir, config }
}

/** The agent's streamed request (Claude Code's shape): `messages` as given; the response, its body not read yet. */
const ask = (url: string, messages: ReadonlyArray<unknown>, signal?: AbortSignal) =>
  fetch(`${url}/v1/messages`, {
    method: "POST",
    headers: { "x-api-key": token, "anthropic-version": "2023-06-01", "content-type": "application/json" },
    body: JSON.stringify({ model: "claude-sonnet-4-5", max_tokens: 100, stream: true, system: "You are terse.", messages }),
    ...(signal === undefined ? {} : { signal })
  })

/** Reads `response`'s body to its end or its cut; resolves with what arrived (never rejects). */
const readAll = (response: Response) => {
  let text = ""
  let first: () => void = () => {}
  const started = new Promise<void>((resolve) => (first = resolve))
  const done = response.body!.pipeThrough(new TextDecoderStream()).pipeTo(new WritableStream({
    write: (chunk) => {
      text += chunk
      first()
    }
  })).then(() => "ended" as const, () => "cut" as const).then((how) => ({ how, text: () => text }))
  return { started, done }
}

interface RunView {
  readonly id: string
  readonly status: string
  readonly failureCode: string | null
  readonly failureReason: string | null
}

/** The one gateway thread's runs (oldest first), `[]` before it exists. */
const runsOf = (url: string) =>
  Effect.gen(function*() {
    const threads = (yield* call(`${url}/threads`, "GET")).threads as ReadonlyArray<{ id: string }>
    if (threads.length === 0) return [] as ReadonlyArray<RunView>
    expect(threads.length).toBe(1)
    return (yield* call(`${url}/threads/${threads[0]!.id}/runs`, "GET")).runs as ReadonlyArray<RunView>
  })

/** Polls `runsOf` until `until` holds (at most 20 s). */
const runsUntil = (url: string, until: (runs: ReadonlyArray<RunView>) => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 400; i++) {
      const runs = yield* runsOf(url)
      if (until(runs)) return runs
      yield* Effect.sleep("50 millis")
    }
    return yield* runsOf(url)
  })

const stoppedReason = "the server stopped before the answer ended (its shutdown closes the connections still open after limits.shutdownTimeoutMs)"

describe("baton serve stopped (SIGTERM) with a gateway answer streaming", () => {
  it.live("an answer the shutdown's deadline cuts is recorded process_stopped before the process exits", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      // Streams for 30 s: the 1 s deadline cuts it.
      loop.enqueue(answer("never seen", 30_000))
      const { config, dir } = configIn(loop.url, { shutdownTimeoutMs: 1_000 })
      const served = yield* Effect.acquireRelease(serve(config, dir), (s) => Effect.sync(() => void s.child.kill("SIGKILL")))
      const reading = readAll(yield* Effect.promise(() => ask(served.url, [{ role: "user", content: "hello" }])))
      yield* Effect.promise(() => reading.started)
      expect((yield* runsUntil(served.url, (r) => r.length === 1)).map((r) => r.status)).toEqual(["running"])
      served.child.kill("SIGTERM")
      const code = yield* Effect.promise(() => served.exited)
      expect(code).toBe(143)
      expect((yield* Effect.promise(() => reading.done)).how).toBe("cut")

      // Started again: what the stopped process recorded (restart recovery would say process_restarted instead).
      const next = yield* Effect.acquireRelease(serve(config, dir), (s) => Effect.sync(() => void s.child.kill("SIGKILL")))
      const runs = yield* runsOf(next.url)
      expect(runs.map((r) => [r.status, r.failureCode, r.failureReason])).toEqual([["interrupted", "process_stopped", stoppedReason]])
    }).pipe(Effect.scoped), 120_000)

  // Found by stopping the server a moment after the agent gave up on its answer (branch b44gw): the agent's hang-up
  // during the grace period let the listener close at once, and the hang-up's record (in the request's fiber, which
  // the shutdown did not wait for) found the database closed ("The database connection is not open"), so the run
  // stayed `running` till the next start said `process_restarted`. With the record waited for, it said
  // `process_stopped` (the shutdown's start taken for its cut) where the agent had hung up on its own.
  it.live("an agent that hangs up during the grace period: its run is recorded as its hang-up before the process exits", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      loop.enqueue(answer("never seen", 30_000))
      const { config, dir } = configIn(loop.url, { shutdownTimeoutMs: 20_000 })
      const served = yield* Effect.acquireRelease(serve(config, dir), (s) => Effect.sync(() => void s.child.kill("SIGKILL")))
      const agent = new AbortController()
      const reading = readAll(yield* Effect.promise(() => ask(served.url, [{ role: "user", content: "hello" }], agent.signal)))
      yield* Effect.promise(() => reading.started)
      expect((yield* runsUntil(served.url, (r) => r.length === 1)).map((r) => r.status)).toEqual(["running"])
      served.child.kill("SIGTERM")
      // The shutdown has begun (its 20 s deadline far off) when the agent gives up.
      yield* Effect.sleep("300 millis")
      agent.abort()
      expect(yield* Effect.promise(() => served.exited)).toBe(143)
      expect(served.output().stderr).not.toContain("could not record")

      const next = yield* Effect.acquireRelease(serve(config, dir), (s) => Effect.sync(() => void s.child.kill("SIGKILL")))
      const runs = yield* runsOf(next.url)
      expect(runs.map((r) => [r.status, r.failureCode, r.failureReason])).toEqual([
        ["interrupted", "interrupted_by_user", "the agent closed the connection before the answer ended"]
      ])
    }).pipe(Effect.scoped), 120_000)

  // The deadline's cut recorded while the shutdown went on (the record's own fiber, which nothing waited for) raced the
  // database's close: on SQLite it lost now and then ("The database connection is not open", the run left `running`
  // till the next start said `process_restarted`). Made certain here: the test holds the thread's row lock (another
  // process of the same database writing to the thread) from before the cut until the server exits or 2.5 s after the
  // cut, whichever comes first; the shutdown waits for the record (at most `ServerShutdown.recordGraceMs`, 5 s).
  it.live("Postgres: an answer cut at the deadline whose record waits on the thread's lock is recorded before the process exits", () =>
    Effect.gen(function*() {
      const databaseUrl = yield* Database.PgSchemaUrl
      const loop = yield* loopback
      loop.enqueue(answer("never seen", 30_000))
      const { config, dir } = configIn(loop.url, { shutdownTimeoutMs: 1_000 })
      const served = yield* Effect.acquireRelease(serve(config, dir, databaseUrl), (s) => Effect.sync(() => void s.child.kill("SIGKILL")))
      const reading = readAll(yield* Effect.promise(() => ask(served.url, [{ role: "user", content: "hello" }])))
      yield* Effect.promise(() => reading.started)
      expect((yield* runsUntil(served.url, (r) => r.length === 1)).map((r) => r.status)).toEqual(["running"])
      const threadId = ((yield* call(`${served.url}/threads`, "GET")).threads as ReadonlyArray<{ id: string }>)[0]!.id
      const sql = yield* SqlClient.SqlClient
      const locked = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      yield* Effect.forkScoped(sql.withTransaction(
        sql`SELECT id FROM threads WHERE id = ${threadId} FOR UPDATE`.pipe(
          Effect.zipRight(Deferred.succeed(locked, undefined)),
          Effect.zipRight(Deferred.await(release))
        )
      ))
      yield* Deferred.await(locked)
      served.child.kill("SIGTERM")
      expect((yield* Effect.promise(() => reading.done)).how).toBe("cut")
      yield* Effect.promise(() => Promise.race([served.exited, new Promise((r) => setTimeout(r, 2_500))]))
      yield* Deferred.succeed(release, undefined)
      expect(yield* Effect.promise(() => served.exited)).toBe(143)

      const next = yield* Effect.acquireRelease(serve(config, dir, databaseUrl), (s) => Effect.sync(() => void s.child.kill("SIGKILL")))
      const runs = yield* runsOf(next.url)
      // Before the fix: [["interrupted", "process_restarted", "process restarted while the gateway's request was with the upstream"]].
      expect(runs.map((r) => [r.status, r.failureCode, r.failureReason])).toEqual([["interrupted", "process_stopped", stoppedReason]])
    }).pipe(
      Effect.scoped,
      Effect.provide(Layer.unwrapEffect(Effect.map(Database.PgSchemaUrl, (url) => Database.layerPg({ url, maxConnections: 1 }))).pipe(
        Layer.provideMerge(Database.layerPgSchema())
      ))
    ), 180_000)
})

interface ItemView {
  readonly kind: string
  readonly text?: string | null
}

describe("baton serve stopped mid-answer, started again, and the agent's retry", () => {
  // The agent (Claude Code) retries a request whose answer was cut with the same request. Whatever the stop (SIGKILL:
  // nothing runs after it; SIGTERM: the shutdown's 1 s deadline cuts the answer) and wherever the answer was (before
  // the upstream's head, mid-stream), after the retry: every message once, the reply once, no run left `running`.
  for (const signal of ["SIGKILL", "SIGTERM"] as const) {
    for (const phase of ["before the head", "mid-stream"] as const) {
      it.live(`${signal} ${phase}`, () =>
        Effect.gen(function*() {
          const loop = yield* loopback
          const never = new Promise<void>(() => {})
          loop.enqueue(
            phase === "before the head" ? { ...answer("never seen", 0), headAfter: never } : answer("never seen", 30_000),
            answer("the answer", 0)
          )
          const { config, dir } = configIn(loop.url, { shutdownTimeoutMs: 1_000 })
          const served = yield* Effect.acquireRelease(serve(config, dir), (s) => Effect.sync(() => void s.child.kill("SIGKILL")))
          const messages = [{ role: "user", content: "hello" }]
          const asked = Effect.promise(() => ask(served.url, messages).then((r) => readAll(r).done, () => ({ how: "cut" as const, text: () => "" })))
          const answered = yield* Effect.fork(asked)
          if (phase === "mid-stream") yield* runsUntil(served.url, (r) => r.length === 1)
          else for (let i = 0; i < 200 && loop.requests.length === 0; i++) yield* Effect.sleep("20 millis")
          expect(loop.requests.length).toBe(1)
          served.child.kill(signal)
          yield* Effect.promise(() => served.exited)
          const next = yield* Effect.acquireRelease(serve(config, dir), (s) => Effect.sync(() => void s.child.kill("SIGKILL")))
          const retried = yield* Effect.promise(() => ask(next.url, messages).then((r) => r.text()))
          expect(retried).toContain("the answer")
          const runs = yield* runsUntil(next.url, (r) => r.every((run) => run.status !== "running"))
          const threads = (yield* call(`${next.url}/threads`, "GET")).threads as ReadonlyArray<{ id: string }>
          const items = (yield* call(`${next.url}/threads/${threads[0]!.id}/items`, "GET")).items as ReadonlyArray<ItemView>
          expect(items.map((i) => [i.kind, i.text])).toEqual([["user_message", "hello"], ["assistant_message", "the answer"]])
          const stopped = signal === "SIGKILL"
            ? [["interrupted", "process_restarted"]]
            : [["interrupted", "process_stopped"]]
          // SIGKILL before the head: the request was never recorded (the process died between forwarding and
          // recording): its retry is the conversation's first run.
          expect(runs.map((r) => [r.status, r.failureCode])).toEqual([
            ...(signal === "SIGKILL" && phase === "before the head" ? [] : stopped),
            ["completed", null]
          ])
          yield* Fiber.interrupt(answered)
        }).pipe(Effect.scoped), 120_000)
    }
  }
})
