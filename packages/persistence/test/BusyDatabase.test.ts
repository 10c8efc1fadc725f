/**
 * A SQLite database another process holds the write lock of, past the busy timeout (5 s): the unit of work fails with
 * a `ConcurrentModification` that says the database was busy, and nothing of it is written. Found by a newcomer's walk
 * (b47ux): `baton replay` on a database another process held said "the record was changed by another writer
 * (DriverRegistry.register)", which sent the user looking for a writer that changed nothing.
 */
import { ConcurrentModification, type ThreadId } from "@baton/contracts"
import { Database, ThreadEventBus, ThreadStore, UnitOfWork } from "@baton/persistence"
import { describe, expect, it } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Context, DateTime, Effect, Layer, Option } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

describe("a SQLite database another process holds locked", () => {
  it.live("a unit of work is a ConcurrentModification with reason busy, saying so; nothing written", () =>
    Effect.gen(function*() {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-busy-"))
      const file = Path.join(dir, "baton.sqlite")
      const layer = UnitOfWork.Default.pipe(
        Layer.provideMerge(ThreadStore.Default),
        Layer.provideMerge(ThreadEventBus.Default),
        Layer.provideMerge(Layer.orDie(Database.layerSqlite(file)))
      )
      yield* Effect.gen(function*() {
        const store = yield* ThreadStore
        const uow = yield* UnitOfWork
        const now = yield* DateTime.now
        // Another connection to the file (as another process would have) takes the write lock and keeps it.
        const other = Context.get(yield* Layer.build(Database.layerSqlite(file)), SqlClient.SqlClient)
        yield* other.unsafe("BEGIN IMMEDIATE")
        const lost = yield* Effect.flip(uow.global("test.busy")(store.insertThread({
          id: "thr_busy" as ThreadId,
          title: "busy",
          activeProviderThreadId: null,
          createdAt: now,
          updatedAt: now
        })))
        yield* other.unsafe("ROLLBACK")
        expect(lost).toEqual(new ConcurrentModification({ operation: "test.busy", reason: "busy" }))
        expect(lost.message).toBe(
          "the database was busy: another process held its write lock past the busy timeout (test.busy); nothing was written, retry the command"
        )
        expect(yield* store.getThread("thr_busy" as ThreadId)).toEqual(Option.none())
      }).pipe(Effect.provide(layer), Effect.scoped, Effect.ensuring(Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))))
    }), 30_000)
})
