/**
 * Postgres only: a client that goes away mid-statement must never cancel another request's statement.
 *
 * The bug: `@effect/sql-pg` answered the interruption of a running statement with `SELECT pg_cancel_backend(pid)`
 * sent through the pool. With the pool full, that cancel waited in the pool's queue while the interrupted statement
 * finished and its connection went to the next request; the cancel then landed on that request's statement, which
 * failed with 57014 ("canceling statement due to user request") and was answered 500 (found by the fuzz test when it
 * cut live event streams: `threads.insert`, `threads.get`, `ThreadService.queueRun`).
 *
 * The test makes the interleaving deterministic with two table locks taken by the test's own connections: every
 * pooled connection is held by a request blocked mid-statement (lock on `threads`), two more requests queue for a
 * connection (their statements will block on `runs`), the blocked requests' clients disconnect, and the lock on
 * `threads` is released. Before the fix the four queued cancels took the two free connections and cancelled the two
 * queued requests' statements (500 with 57014); now they answer 404.
 */
import { Database } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { HttpServer } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import type { Connection } from "@effect/sql/SqlConnection"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Layer, Schedule } from "effect"
import * as Http from "node:http"
import { adminToken, get, post, raw, serve } from "./helpers.js"

/** The pool size of the server under test (`Harness.makeLayer` on a Postgres URL): every connection gets blocked. */
const poolSize = 4

/** A GET the client abandons: resolves once the request is written; `abort` destroys the socket. */
const abandonedGet = (port: number, path: string) => {
  const req = Http.request({ host: "127.0.0.1", port, method: "GET", path, headers: { authorization: `Bearer ${adminToken}` }, agent: false })
  req.on("error", () => {})
  req.end()
  return { abort: () => req.destroy() }
}

/** Runs `statement` on a connection of its own (a transaction the test holds open: its locks stay until `COMMIT`). */
const exec = (conn: Connection, statement: string) => conn.executeUnprepared(statement, [], undefined)

/** How many backends wait on a lock held by the backend `pid` (Postgres' own view; other tests' sessions excluded). */
const blockedBy = (sql: SqlClient.SqlClient, pid: number) =>
  Effect.map(
    sql<{ readonly n: number | string }>`SELECT COUNT(*) AS n FROM pg_stat_activity WHERE ${pid} = ANY(pg_blocking_pids(pid))`,
    (rows) => Number(rows[0]?.n ?? 0)
  )

/** Polls `blockedBy` until it reaches `n` (every 20 ms, up to 5 s; not reaching it is a defect). */
const awaitBlocked = (sql: SqlClient.SqlClient, pid: number, n: number) =>
  blockedBy(sql, pid).pipe(
    Effect.filterOrFail((k) => k >= n, (k) => `${k} of ${n} backends blocked by ${pid} after 5 s`),
    Effect.retry(Schedule.spaced(Duration.millis(20)).pipe(Schedule.upTo(Duration.seconds(5)))),
    Effect.orDie
  )

describe("Postgres: a disconnected client's statement", () => {
  it.live("never cancels another request's statement (queued pg_cancel_backend landed on the next user of the connection: 57014, 500)", () =>
    Effect.gen(function*() {
      const url = yield* Database.PgSchemaUrl
      const h = Harness.make([{ name: "codex", window: 44_000, inject: true }], { db: url })
      yield* Effect.gen(function*() {
        const server = yield* HttpServer.HttpServer
        const port = (server.address as HttpServer.TcpAddress).port
        const created = yield* raw(post("/threads", { providerInstance: "codex", title: "t" }))
        expect(created.status).toBe(201)
        const threadId = created.body!.threadId as string

        // The test's own client on the same schema: two connections, each a transaction holding one table lock.
        const locks = yield* Layer.build(Database.layerPg({ url, maxConnections: 3 }))
        const sql = yield* Effect.provide(SqlClient.SqlClient, locks)
        const onThreads = yield* sql.reserve
        const onRuns = yield* sql.reserve
        const pidOf = (conn: Connection) =>
          Effect.map(conn.executeUnprepared("SELECT pg_backend_pid() AS pid", [], undefined), (rows) => Number((rows[0] as { readonly pid: number }).pid))
        const threadsPid = yield* pidOf(onThreads)
        const runsPid = yield* pidOf(onRuns)
        // Whatever happens, the locks go (a lock left behind would hang the schema's DROP).
        yield* Effect.addFinalizer(() => Effect.ignore(Effect.zip(exec(onThreads, "ROLLBACK"), exec(onRuns, "ROLLBACK"))))
        yield* exec(onThreads, "BEGIN")
        yield* exec(onThreads, "LOCK TABLE threads IN ACCESS EXCLUSIVE MODE")
        yield* exec(onRuns, "BEGIN")
        yield* exec(onRuns, "LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")

        // Every pooled connection runs a statement that waits on `threads` (`threads.get`).
        const abandoned = Array.from({ length: poolSize }, () => abandonedGet(port, `/threads/${threadId}`))
        yield* awaitBlocked(sql, threadsPid, poolSize)

        // Two requests queue for a connection: their first statement (`runs.get`) will wait on `runs`.
        const queued = yield* Effect.forkAll(Array.from({ length: 2 }, (_, i) => raw(get(`/runs/run_missing_${i}`))))
        yield* Effect.sleep(Duration.millis(200))

        // The blocked requests' clients go away; then their statements may finish and free the connections.
        for (const a of abandoned) a.abort()
        yield* Effect.sleep(Duration.millis(300))
        yield* exec(onThreads, "COMMIT")

        // The queued requests now run on the freed connections and wait on `runs`; a stray cancel would hit them here.
        yield* awaitBlocked(sql, runsPid, 2)
        yield* Effect.sleep(Duration.millis(500))
        yield* exec(onRuns, "COMMIT")

        const answers = yield* queued.await
        expect(answers._tag).toBe("Success")
        const results = answers._tag === "Success" ? answers.value : []
        expect(results.map((r) => [r.status, r.body?._tag, r.text.includes("57014") || r.text.includes("cancel")])).toEqual([
          [404, "RunNotFound", false],
          [404, "RunNotFound", false]
        ])
        // The server still answers on every pooled connection.
        const again = yield* Effect.all(Array.from({ length: poolSize + 2 }, () => raw(get(`/threads/${threadId}`))), { concurrency: "unbounded" })
        expect(again.map((r) => r.status)).toEqual(Array.from({ length: poolSize + 2 }, () => 200))
      }).pipe(Effect.scoped, Effect.provide(serve(h)))
    }).pipe(Effect.provide(Database.layerPgSchema())), 20_000)
})
