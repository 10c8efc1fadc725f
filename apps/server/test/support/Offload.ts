/**
 * Set-up for `/offload` tests over HTTP (issue 12): a server whose summariser is a loopback Anthropic instance `sum`,
 * a thread on a loopback `claude` instance with completed runs, a SQL client on the database the server writes (its
 * SQLite file or Postgres schema: for snapshots, failures injected with triggers, locks held), and polling helpers.
 */
import type { ThreadId } from "@baton/contracts"
import { Database } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { expect } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import type { HttpClient } from "@effect/platform"
import { Context, Effect, Layer, type Scope } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { client } from "../helpers.js"
import * as ModelApi from "./ModelApi.js"
import { instance, sendAndWait, serveSettings, settingsFor } from "./ModelServer.js"

/** What each chat run is billed. */
export const chatUsage = { input: 100, cacheWrite: 0, cacheRead: 0, output: 20 }
/** What each summariser call is billed: $0.006 at $3 / $15 per million. */
export const sumUsage = { input: 1_000, cacheWrite: 0, cacheRead: 0, output: 200 }
export const summaryText = "## Goal\n- the steps\n## Standing instructions\n- none"

/** What `withThread`'s body gets: the loopback APIs, the thread, and a SQL client on the server's SQLite file. */
export interface Ctx {
  readonly chat: ModelApi.ModelApi
  readonly summariser: ModelApi.ModelApi
  readonly threadId: ThreadId
  readonly sql: SqlClient.SqlClient
  /**
   * Another server process on the same database and config (its own orchestrator, run driver and listener): the
   * context whose `HttpClient` reaches it (`client()` under `Effect.provide(context)`), for the scope.
   */
  readonly secondServer: Effect.Effect<Context.Context<HttpClient.HttpClient>, never, Scope.Scope>
}

/** Options of `withThread`: extra fields of the `sum` instance (e.g. a small `contextWindow`), the first message. */
export interface Options {
  readonly summariserExtra?: Record<string, unknown>
  readonly extraInstances?: (chat: ModelApi.ModelApi) => ReadonlyArray<unknown>
  readonly first?: string
  /** The server on a fresh Postgres schema (default: a SQLite file). */
  readonly postgres?: boolean
  /** More of the server's `offload` settings (e.g. `auto`, `preCompactHook`), beside the `sum` summariser. */
  readonly offload?: Record<string, unknown>
}

/** A reply that waits for `release()` before it is written (the model has the request and has not answered). */
export const held = (reply: ModelApi.Reply) => {
  let release: () => void = () => undefined
  const hold = new Promise<void>((resolve) => {
    release = resolve
  })
  return { reply: { ...reply, hold }, release: () => release() }
}

/**
 * A server whose `/offload` summariser is the loopback Anthropic instance `sum`, a thread on the loopback `claude`
 * instance with `turns` completed runs of about 600 tokens each (the first message `options.first` when given), and
 * `body` run against them.
 */
export const withThread = <A, E, R>(turns: number, body: (ctx: Ctx) => Effect.Effect<A, E, R>, options: Options = {}) =>
  Effect.scoped(Effect.gen(function*() {
    const chat = yield* ModelApi.start
    const summariser = yield* ModelApi.start
    const sqlite = yield* settingsFor([
      instance("claude", "anthropic-messages", chat),
      instance("sum", "anthropic-messages", summariser, options.summariserExtra ?? {}),
      ...(options.extraInstances?.(chat) ?? [])
    ])
    const settings = options.postgres === true
      ? { ...sqlite, database: { _tag: "postgres" as const, url: Context.get(yield* Layer.build(Database.layerPgSchema()), Database.PgSchemaUrl) } }
      : sqlite
    const sql = yield* Layer.build(
      settings.database._tag === "sqlite" ? Database.layerSqlite(settings.database.path) : Database.layerPg({ url: settings.database.url, maxConnections: 2 })
    ).pipe(
      Effect.map((ctx) => Context.get(ctx, SqlClient.SqlClient)),
      Effect.orDie
    )
    const served = { ...settings, offload: { summariser: "sum", ...options.offload } }
    const secondServer = Effect.orDie(Layer.build(serveSettings(served)))
    return yield* Effect.gen(function*() {
      const api = yield* client()
      const { threadId } = yield* api.threads.create({ payload: { providerInstance: "claude" as never }, headers: {} })
      for (let i = 0; i < turns; i++) {
        chat.enqueue(ModelApi.answer("anthropic-messages", `done step ${i}`, chatUsage))
        const text = i === 0 && options.first !== undefined ? options.first : `Step ${i}: ${Harness.words(450)}`
        expect((yield* sendAndWait(threadId as ThreadId, text)).run.status).toBe("completed")
      }
      return yield* body({ chat, summariser, threadId: threadId as ThreadId, sql, secondServer })
    }).pipe(Effect.provide(serveSettings(served)))
  }))

/** The thread's items of `kind`. */
export const itemsOf = (threadId: ThreadId, kind: string) =>
  Effect.gen(function*() {
    const api = yield* client()
    const page = yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })
    return page.items.filter((i) => i.kind === kind)
  })

/** Waits (polling, no deadline asserted) until `ready()` holds. */
export const until = (ready: () => boolean) =>
  Effect.gen(function*() {
    while (!ready()) yield* Effect.sleep("5 millis")
  })

/**
 * A loopback PreCompact hook for the scope: each POST's JSON body is recorded and answered with `answer` (`null`:
 * never answered, a hook that misses its deadline).
 */
export const hookServer = (answer: Record<string, unknown> | null): Effect.Effect<{ readonly url: string; readonly bodies: Array<unknown> }, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<{ readonly server: Http.Server; readonly url: string; readonly bodies: Array<unknown> }>((resume) => {
      const bodies: Array<unknown> = []
      const server = Http.createServer((req, res) => {
        const parts: Array<Buffer> = []
        req.on("data", (c: Buffer) => parts.push(c))
        req.on("end", () => {
          bodies.push(JSON.parse(Buffer.concat(parts).toString("utf8")))
          if (answer === null) return
          res.writeHead(200, { "content-type": "application/json" })
          res.end(JSON.stringify(answer))
        })
      })
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/pre-compact`, bodies })))
    }),
    ({ server }) => Effect.async<void>((resume) => {
      server.closeAllConnections()
      server.close(() => resume(Effect.void))
    })
  )
