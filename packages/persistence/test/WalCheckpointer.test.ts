import { Database, WalCheckpointer } from "@baton/persistence"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

const tempFile = () => Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-wal-")), "baton.sqlite")

/** 80 commits of 100 KB each (8 MB), a short pause after each, as a busy server writes. */
const writeMegabytes = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE scratch (n INTEGER PRIMARY KEY, body TEXT NOT NULL)`
  const body = "x".repeat(100_000)
  for (let n = 0; n < 80; n++) {
    yield* sql.withTransaction(sql`INSERT INTO scratch (n, body) VALUES (${n}, ${body})`)
    yield* Effect.sleep("15 millis")
  }
})

describe("WalCheckpointer", () => {
  it.live("a SQLite file's WAL is checkpointed by the worker while the process writes: it is rewound and nothing is lost", () =>
    Effect.gen(function*() {
      const file = tempFile()
      const portsBefore = process.getActiveResourcesInfo().filter((r) => r === "MessagePort")
      yield* Effect.scoped(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        // The connection's own checkpoint is only a safety net, 10,000 pages (about 40 MB) away.
        const [pragma] = yield* sql<{ walAutocheckpoint: number }>`PRAGMA wal_autocheckpoint`
        expect(pragma.walAutocheckpoint).toBe(WalCheckpointer.fallbackPages)
        yield* writeMegabytes
        // 8 MB went through the WAL; without the worker no checkpoint would have run (far below 10,000 pages), so the
        // WAL would never have been rewound. A rewind after a complete checkpoint counts in the WAL header's
        // checkpoint sequence number (bytes 12-15): looked at after each of a few more commits, as the worker may
        // lag on a busy machine (its size at a given moment depends on that lag, so it is not asserted).
        let rewinds = 0
        for (let n = 1000; n < 1050 && rewinds === 0; n++) {
          yield* Effect.sleep(`${WalCheckpointer.intervalMs} millis`)
          yield* sql.withTransaction(sql`INSERT INTO scratch (n, body) VALUES (${n}, ${"y"})`)
          rewinds = Buffer.from(Fs.readFileSync(`${file}-wal`).subarray(12, 16)).readUInt32BE(0)
        }
        expect(rewinds).toBeGreaterThan(0)
        expect(WalCheckpointer.stats(file).checkpoints).toBeGreaterThan(0)
        // The worker never keeps the process alive: its port is not among the process's active handles.
        expect(process.getActiveResourcesInfo().filter((r) => r === "MessagePort")).toEqual(portsBefore)
      }).pipe(Effect.provide(Layer.orDie(Database.layerSqlite(file)))))
      // Reopened: every commit is there.
      yield* Effect.scoped(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const [row] = yield* sql<{ n: number; bytes: number }>`SELECT COUNT(*) AS n, SUM(LENGTH(body)) AS bytes FROM scratch WHERE n < 1000`
        expect(row).toEqual({ n: 80, bytes: 8_000_000 })
        const [late] = yield* sql<{ n: number }>`SELECT COUNT(*) AS n FROM scratch WHERE n >= 1000 AND body = 'y'`
        expect(late.n).toBeGreaterThan(0)
      }).pipe(Effect.provide(Layer.orDie(Database.layerSqlite(file)))))
    }), 30_000)

  it.live("a worker that dies while a file is held is started again, and the file's WAL is still checkpointed", () =>
    Effect.gen(function*() {
      const file = tempFile()
      yield* Effect.scoped(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE scratch (n INTEGER PRIMARY KEY, body TEXT NOT NULL)`
        yield* Effect.promise(() => WalCheckpointer.terminateWorkerForTest())
        const before = WalCheckpointer.stats(file).checkpoints
        let after = before
        for (let n = 0; n < 100 && after === before; n++) {
          yield* sql.withTransaction(sql`INSERT INTO scratch (n, body) VALUES (${n}, ${"x".repeat(10_000)})`)
          yield* Effect.sleep(`${WalCheckpointer.intervalMs} millis`)
          after = WalCheckpointer.stats(file).checkpoints
        }
        expect(after).toBeGreaterThan(before)
      }).pipe(Effect.provide(Layer.orDie(Database.layerSqlite(file)))))
    }), 30_000)

  it.live("an in-memory database is not registered and keeps SQLite's own checkpoint", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const [pragma] = yield* sql<{ walAutocheckpoint: number }>`PRAGMA wal_autocheckpoint`
      expect(pragma.walAutocheckpoint).toBe(1000)
      expect(WalCheckpointer.stats(":memory:")).toEqual({ checkpoints: 0, failures: 0 })
    }).pipe(Effect.provide(Layer.orDie(Database.layerSqlite(":memory:")))))

  it.live("a file removed and made again at the same path while it is registered: the new file's WAL is checkpointed", () =>
    Effect.gen(function*() {
      const file = tempFile()
      yield* Effect.scoped(Effect.gen(function*() {
        // The first file, registered (held open by this scope) and checkpointed once by the worker.
        const first = yield* Layer.build(Layer.orDie(Database.layerSqlite(file)))
        const sql = Context.get(first, SqlClient.SqlClient)
        yield* sql`CREATE TABLE first (n INTEGER)`
        yield* sql`INSERT INTO first (n) VALUES (1)`
        for (let n = 0; n < 50 && WalCheckpointer.stats(file).checkpoints === 0; n++) yield* Effect.sleep(`${WalCheckpointer.intervalMs} millis`)
        expect(WalCheckpointer.stats(file).checkpoints).toBeGreaterThan(0)
        // Removed (as a test removes its temporary directory) and a new database made at the same path.
        for (const suffix of ["", "-wal", "-shm"]) Fs.rmSync(`${file}${suffix}`, { force: true })
        yield* Effect.scoped(Effect.gen(function*() {
          yield* writeMegabytes
          // The new WAL is rewound after a complete checkpoint (its header's checkpoint sequence number, bytes 12-15,
          // counts the rewinds): looked at after each of a few more commits, as the worker may lag on a busy machine.
          const sql = yield* SqlClient.SqlClient
          let rewinds = 0
          for (let n = 1000; n < 1050 && rewinds === 0; n++) {
            yield* Effect.sleep(`${WalCheckpointer.intervalMs} millis`)
            yield* sql.withTransaction(sql`INSERT INTO scratch (n, body) VALUES (${n}, ${"y"})`)
            rewinds = Buffer.from(Fs.readFileSync(`${file}-wal`).subarray(12, 16)).readUInt32BE(0)
          }
          expect(rewinds).toBeGreaterThan(0)
        }).pipe(Effect.provide(Layer.orDie(Database.layerSqlite(file)))))
      }))
    }), 30_000)
})
