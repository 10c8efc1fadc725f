/**
 * Two `baton serve` processes on one Postgres database (issue 7's acceptance): each started as `pnpm start` starts
 * it (`baton serve --database-url URL`, scripted providers at zero latency), on a fresh schema of the test server,
 * on different ports. 50 clients send messages to 10 shared threads, alternating between the two processes, while an
 * SSE subscriber on each process follows `/events`. It asserts:
 *
 * - no lost update: every accepted message (202) has exactly one run, each thread's runs are numbered 1..n without
 *   gap or duplicate, every run completes, and each thread's items are exactly its runs' items, each message's text
 *   once;
 * - per-thread order: one client's messages to one thread (sent one after the other, each after its 202) get
 *   increasing run seqs, and each thread's runs started in seq order (`startedAt`);
 * - every event reaches both subscribers: each received every event of the stored log (`/events?follow=false`)
 *   exactly once, with each thread's events in `seq` order (across threads, commit order may differ between
 *   processes: docs/server.md, "Events").
 *
 * A `ConcurrentModification` (409: another writer changed the thread first, nothing written) is retried with the
 * same idempotency key, as the API says; the number of retries is printed.
 */
import { Database } from "@baton/persistence"
import { describe, expect, it } from "@effect/vitest"
import { Data, Effect } from "effect"
import * as Http from "node:http"
import { type Served, serveBaton } from "./support/Served.js"

const token = "two-servers-admin-token-0123456789"
const clients = 50
const threadCount = 10
/**
 * Messages each client sends: two in a row to each of `messagesPerClient / 2` threads, the second through the other
 * process (`BATON_TWO_SERVERS_MESSAGES` overrides it).
 */
const messagesPerClient = Number(process.env.BATON_TWO_SERVERS_MESSAGES ?? 4)

/** A phase did not end within the test's bound: which, and how far it got. */
class Stuck extends Data.TaggedError("Stuck")<{ readonly phase: string; readonly progress: string }> {}

/** Where the test is, how far it got and the processes it started, for the failure report. */
const diagnostics = { phase: "start", progress: "", servers: [] as Array<Served>, since: Date.now(), stuckOnExit: [] as Array<string> }
const phase = (name: string) => {
  console.log(`${name} (${Date.now() - diagnostics.since} ms)`)
  diagnostics.phase = name
  diagnostics.progress = ""
}

/**
 * Starts `baton serve --port 0 --database-url URL` with the admin token and waits (at most 90 s) for its URL; on
 * release, stops it (SIGTERM) and waits for it to exit: at most 30 s (its shutdown deadline is shorter), after which
 * it is killed and the test fails naming it (a server that does not end on SIGTERM is a defect, not a slow test).
 */
const start = (databaseUrl: string) =>
  Effect.acquireRelease(
    serveBaton(["--port", "0", "--database-url", databaseUrl], { env: { BATON_TOKEN: token }, timeoutMillis: 90_000 }),
    (server) =>
      Effect.promise(async () => {
        server.child.kill("SIGTERM")
        const timer = setTimeout(() => {
          diagnostics.stuckOnExit.push(`${server.url}:\n${server.output().stderr.slice(-3_000)}`)
          server.child.kill("SIGKILL")
        }, 30_000)
        await server.exited
        clearTimeout(timer)
      })
  )

/** A connection per request: a reused keep-alive socket the server is closing as idle would reset a request. */
const agent = new Http.Agent({ keepAlive: false, maxSockets: 64 })

/** A JSON request with the admin token: status and parsed body. */
const call = (url: string, method = "GET", body?: unknown, headers: Record<string, string> = {}) =>
  new Promise<{ readonly status: number; readonly body: Record<string, unknown> }>((done, fail) => {
    const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body))
    const req = Http.request(url, {
      method,
      agent,
      headers: {
        authorization: `Bearer ${token}`,
        ...(data === undefined ? {} : { "content-type": "application/json", "content-length": String(data.length) }),
        ...headers
      }
    }, (res) => {
      let text = ""
      res.setEncoding("utf8").on("data", (c: string) => void (text += c))
      res.on("end", () => done({ status: res.statusCode ?? 0, body: JSON.parse(text) as Record<string, unknown> }))
      res.on("error", (e) => fail(new Error(`${method} ${url}: ${e.message}`)))
    })
    req.on("error", (e) => fail(new Error(`${method} ${url}: ${e.message}`)))
    req.end(data)
  })

interface Received {
  readonly globalSeq: number
  readonly threadId: string
  readonly seq: number
}

/** An SSE subscriber of `/events` from the start: every event it receives, in order. */
const subscribe = (url: string) => {
  const received: Array<Received> = []
  let buffer = ""
  const req = Http.get(`${url}/events`, { headers: { authorization: `Bearer ${token}` } }, (res) => {
    res.setEncoding("utf8").on("data", (chunk: string) => {
      buffer += chunk
      let end: number
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end)
        buffer = buffer.slice(end + 2)
        const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n")
        const id = block.split("\n").find((l) => l.startsWith("id:"))?.slice(3).trim()
        if (data === "" || id === undefined) continue
        const event = JSON.parse(data) as { threadId: string; seq: number; globalSeq: number }
        expect(Number(id)).toBe(event.globalSeq)
        received.push({ globalSeq: event.globalSeq, threadId: event.threadId, seq: event.seq })
      }
    })
  })
  req.on("error", () => undefined)
  return { received, close: () => req.destroy() }
}

interface Sent {
  readonly client: number
  readonly threadId: string
  readonly text: string
  readonly runId: string
  readonly runSeq: number
}

describe("two server processes on one Postgres", () => {
  it.live(`${clients} clients x ${threadCount} threads, round-robin over both: no lost update, per-thread order, every event on both streams`, () =>
    Effect.gen(function*() {
      const databaseUrl = yield* Database.PgSchemaUrl
      diagnostics.since = Date.now()
      // One after the other: the first applies the migrations to the fresh schema.
      const a = yield* start(databaseUrl)
      const b = yield* start(databaseUrl)
      diagnostics.servers.push(a, b)
      phase("started")
      expect(a.url).not.toBe(b.url)
      const servers = [a.url, b.url]
      const subscribers = servers.map(subscribe)

      phase("send")
      const result = yield* Effect.promise(async () => {
        const threads: Array<string> = []
        for (let t = 0; t < threadCount; t++) {
          const created = await call(`${servers[t % 2]}/threads`, "POST", { title: `thread ${t}`, providerInstance: "codex" })
          expect(created.status).toBe(201)
          threads.push(created.body.threadId as string)
        }
        let retries = 0
        const sent: Array<Sent> = []
        await Promise.all(Array.from({ length: clients }, async (_, client) => {
          for (let m = 0; m < messagesPerClient; m++) {
            // Two messages in a row to each of five threads, the second through the other process.
            const threadId = threads[(client + Math.floor(m / 2)) % threadCount]!
            const server = servers[(client + m) % 2]!
            const text = `client ${client} message ${m}`
            for (;;) {
              const answer = await call(`${server}/threads/${threadId}/messages`, "POST", { text }, { "idempotency-key": `c${client}-m${m}` })
              if (answer.status === 409 && answer.body._tag === "ConcurrentModification") {
                retries++
                continue
              }
              // Queued behind the thread's unfinished runs, or claimed at once on an idle thread.
              expect(answer.status).toBe(202)
              expect(["queued", "starting"]).toContain(answer.body.status)
              sent.push({ client, threadId, text, runId: answer.body.runId as string, runSeq: answer.body.runSeq as number })
              break
            }
          }
        }))
        return { threads, sent, retries }
      })
      const { retries, sent, threads } = result
      expect(sent).toHaveLength(clients * messagesPerClient)

      // Every run ends, completed (asked of either process).
      phase("await runs")
      let ended = 0
      const runs = yield* Effect.promise(() =>
        Promise.all(sent.map(async (s, i) => {
          for (;;) {
            diagnostics.progress = `${ended} of ${sent.length} runs ended`
            const view = await call(`${servers[i % 2]}/runs/${s.runId}?waitMs=30000`)
            expect(view.status).toBe(200)
            const run = view.body.run as { status: string; seq: number; threadId: string; startedAt: string | null }
            if (run.status === "queued" || run.status === "starting" || run.status === "running") continue
            ended++
            return { sent: s, run, items: view.body.items as Array<{ id: string; seq: number; kind: string; text: string }> }
          }
        }))
      )
      expect(runs.filter((r) => r.run.status !== "completed").map((r) => [r.sent.runId, r.run.status])).toEqual([])

      // No lost update: one run per accepted message, each thread's runs 1..n, its items exactly its runs' items.
      expect(new Set(sent.map((s) => s.runId)).size).toBe(sent.length)
      for (const threadId of threads) {
        const mine = runs.filter((r) => r.sent.threadId === threadId)
        expect(mine.map((r) => r.run.seq).sort((x, y) => x - y)).toEqual(mine.map((_, i) => i + 1))
        expect(mine.every((r) => r.run.seq === r.sent.runSeq && r.run.threadId === threadId)).toBe(true)
        // Runs ran one at a time in seq order.
        const started = [...mine].sort((x, y) => x.run.seq - y.run.seq).map((r) => r.run.startedAt ?? "")
        expect(started).toEqual([...started].sort())
        const items = yield* Effect.promise(async () => {
          const all: Array<{ id: string; text: string; kind: string }> = []
          let after = 0
          for (;;) {
            const page = await call(`${servers[all.length % 2]}/threads/${threadId}/items?afterSeq=${after}&limit=500`)
            all.push(...(page.body.items as Array<{ id: string; text: string; kind: string }>))
            if (page.body.nextAfterSeq === null) return all
            after = page.body.nextAfterSeq as number
          }
        })
        expect(items.map((i) => i.id).sort()).toEqual(mine.flatMap((r) => r.items.map((i) => i.id)).sort())
        for (const r of mine) expect(items.filter((i) => i.text === r.sent.text)).toHaveLength(1)
      }

      // Per-thread order for each client: its later message to a thread has a later run.
      for (let client = 0; client < clients; client++) {
        for (const threadId of threads) {
          const seqs = sent.filter((s) => s.client === client && s.threadId === threadId).map((s) => s.runSeq)
          expect(seqs).toEqual([...seqs].sort((x, y) => x - y))
        }
      }

      phase("events")
      // Every stored event reaches both subscribers once, each thread's in seq order.
      const stored = yield* Effect.promise(async () => {
        const all: Array<Received> = []
        let after = 0
        for (;;) {
          const response = await new Promise<string>((done, fail) =>
            Http.get(`${a.url}/events?follow=false&after=${after}`, { headers: { authorization: `Bearer ${token}` } }, (res) => {
              let text = ""
              res.setEncoding("utf8").on("data", (c: string) => void (text += c)).on("end", () => done(text))
            }).on("error", fail)
          )
          const page = response.split("\n").filter((l) => l.startsWith("data:")).map((l) => JSON.parse(l.slice(5)) as Received)
          if (page.length === 0) return all
          all.push(...page.map((e) => ({ globalSeq: e.globalSeq, threadId: e.threadId, seq: e.seq })))
          after = Math.max(...page.map((e) => e.globalSeq))
        }
      })
      expect(stored.length).toBeGreaterThan(sent.length * 3)
      // The subscribers catch up (bounded by the test's timeout: a lost event never arrives).
      while (subscribers.some((s) => s.received.length < stored.length)) {
        diagnostics.progress = `stored ${stored.length} events; the subscribers received ${subscribers.map((s) => s.received.length).join(" and ")}`
        yield* Effect.sleep("100 millis")
      }
      yield* Effect.sleep("500 millis")
      const key = (e: Received) => e.globalSeq
      for (const s of subscribers) {
        s.close()
        expect(s.received.length).toBe(stored.length)
        expect(new Set(s.received.map(key)).size).toBe(s.received.length)
        expect([...s.received.map(key)].sort((x, y) => x - y)).toEqual(stored.map(key).sort((x, y) => x - y))
        for (const threadId of threads) {
          const seqs = s.received.filter((e) => e.threadId === threadId).map((e) => e.seq)
          expect(seqs).toEqual(seqs.map((_, i) => i + 1))
        }
      }
      console.log(
        `two servers: ${sent.length} messages from ${clients} clients to ${threadCount} threads, ${retries} ConcurrentModification retries, ` +
          `${stored.length} events seen by both subscribers`
      )
      agent.destroy()
    }).pipe(
      // Bounded here, under vitest's timeout, so that a stuck phase fails with the report below.
      Effect.timeoutFail({ duration: "200 seconds", onTimeout: () => new Stuck({ phase: diagnostics.phase, progress: diagnostics.progress }) }),
      // On a failure, what the processes said (and whether they are still alive).
      Effect.tapErrorCause(() =>
        Effect.sync(() => {
          for (const server of diagnostics.servers) {
            console.log(
              `phase ${diagnostics.phase} (${diagnostics.progress}); ${server.url} exit ${server.child.exitCode}:\n${server.output().stderr.slice(-3_000)}`
            )
          }
        })
      ),
      Effect.scoped,
      // Stopped on SIGTERM within 30 s, each of them.
      Effect.tap(() => expect(diagnostics.stuckOnExit).toEqual([])),
      Effect.provide(Database.layerPgSchema())
    ), 240_000)
})
