/**
 * The feed of all threads on Postgres, at the moment a Baton transaction ends while a reader computes its own
 * horizon (`EventFeed`, `ownHorizon`). A committing backend leaves the in-progress list first, then releases its
 * fast-path relation locks, then its transaction id's lock; a reading of `pg_locks` in that window shows the
 * transaction id with no lock on Baton's schema, as a foreign transaction's. The window is microseconds wide, so
 * the test holds both backends in it with gdb (a breakpoint on `pg_lock_status` in the reader's backend, taken after
 * its snapshot; one in `LockReleaseAll` in the committing backend, stepped until its relation locks are gone). It
 * runs where gdb is installed and the test server's backends are processes of this machine; elsewhere it is skipped.
 */
import { type CommandId, Commands, type RunId, type ThreadEvent, type ThreadId } from "@baton/contracts"
import { ThreadService } from "@baton/orchestration"
import { Database, EventFeed, ThreadEventBus, ThreadStore, UnitOfWork } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { SqlClient } from "@effect/sql"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Chunk, Context, Data, Deferred, Duration, Effect, Fiber, Layer, Schedule, Stream } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"

const providers = [{ name: "codex", window: 200_000, inject: true }] as const
let k = 0
const cid = () => `cmd_ending_${++k}` as CommandId

const hasGdb = ChildProcess.spawnSync("gdb", ["--version"], { stdio: "ignore" }).status === 0

/** gdb did not say what was awaited in time. */
class GdbStuck extends Data.TaggedError("GdbStuck")<{ readonly pid: number; readonly awaited: string; readonly output: string }> {}

/**
 * gdb attached to the process `pid` (scoped: at the end its breakpoints are deleted and it detaches, so the
 * backend goes on unharmed). `command` sends a line; `until` waits for output matching `pattern`, 30 s at most
 * (attaching takes about 1.5 s, more under load).
 */
const attach = (pid: number) =>
  Effect.gen(function*() {
    const gdb = yield* Effect.acquireRelease(
      Effect.sync(() => ChildProcess.spawn("gdb", ["-q", "-nx", "-p", String(pid)], { stdio: ["pipe", "pipe", "pipe"] })),
      (p) =>
        Effect.async<void>((resume) => {
          p.once("exit", () => resume(Effect.void))
          p.stdin.write("delete\ndetach\nquit\n")
        }).pipe(Effect.timeout(Duration.seconds(10)), Effect.ignore)
    )
    let output = ""
    gdb.stdout.on("data", (d) => output += String(d))
    gdb.stderr.on("data", (d) => output += String(d))
    const command = (line: string) => Effect.sync(() => gdb.stdin.write(`${line}\n`))
    const until = (pattern: RegExp) =>
      Effect.gen(function*() {
        yield* Effect.repeat(Effect.sync(() => pattern.test(output)), { until: (seen) => seen, schedule: Schedule.spaced(Duration.millis(10)) })
        const match = output.match(pattern)!
        output = output.slice(output.indexOf(match[0]) + match[0].length)
      }).pipe(Effect.timeoutFail({ duration: Duration.seconds(30), onTimeout: () => new GdbStuck({ pid, awaited: String(pattern), output }) }))
    for (const line of ["set pagination off", "set confirm off", "handle SIGUSR1 SIGUSR2 SIGALRM SIGPIPE nostop noprint pass"]) yield* command(line)
    yield* until(/\(gdb\) /)
    return { command, until }
  })

const backendPid = (sql: SqlClient.SqlClient) =>
  Effect.map(sql<{ readonly pid: number }>`SELECT pg_backend_pid() AS pid`, (rows) => rows[0]!.pid).pipe(Effect.orDie)

describe("EventFeed on Postgres: a Baton transaction ending while the feed reads", () => {
  beforeAll(() => Harness.useDb(Harness.postgres))

  it.live.skipIf(!hasGdb)("is not taken for a foreign one: the feed does not pass its events", () => {
    const h = Harness.make([...providers])
    return Harness.withDbFile((db) =>
      Effect.gen(function*() {
        const ctx = yield* Layer.build(Harness.makeLayer(Object.values(h.providers), h.counter, db, {}, "a"))
        const [sql, store, uow, service] = [Context.get(ctx, SqlClient.SqlClient), Context.get(ctx, ThreadStore), Context.get(ctx, UnitOfWork), Context.get(ctx, ThreadService.ThreadService)]
        // The reader: a feed on a pool of one connection, so its backend is known.
        const readerCtx = yield* Layer.build(EventFeed.layer({ pollMillis: 600_000 }).pipe(
          Layer.provide(Layer.merge(ThreadStore.Default, ThreadEventBus.Default)),
          Layer.provideMerge(Database.layerPg({ url: db, maxConnections: 1 }))
        ))
        const reader = Context.get(readerCtx, EventFeed.EventFeed)
        const readerPid = yield* backendPid(Context.get(readerCtx, SqlClient.SqlClient))
        // The server is not on this machine (its backend is no process of ours): nothing to attach to.
        if (!(Fs.existsSync(`/proc/${readerPid}/cmdline`) && Fs.readFileSync(`/proc/${readerPid}/cmdline`, "utf8").startsWith("postgres"))) return
        const create = () => service.createThread(Commands.CreateThread.make({ commandId: cid(), title: "t", providerInstance: h.providers.codex!.instance }))
        const event = (threadId: ThreadId) => store.appendEvent({ threadId, type: "run.completed", payload: { runId: "run_ending" as RunId, itemCount: 0 } })
        const [a, b] = [yield* create(), yield* create()]
        const rows = yield* sql<{ readonly globalSeq: number }>`SELECT global_seq FROM thread_events ORDER BY xact_id DESC, global_seq DESC LIMIT 1`.pipe(Effect.orDie)
        const cursor = Number(rows[0]!.globalSeq)
        // T: a unit of work on `a` that appended and waits to commit; then one on `b`, younger, commits.
        const appended = yield* Deferred.make<number>()
        const commit = yield* Deferred.make<void>()
        const older = yield* Effect.fork(uow.thread(a, "test.older")(Effect.gen(function*() {
          yield* event(a)
          yield* Deferred.succeed(appended, yield* backendPid(sql))
          yield* Deferred.await(commit)
        })))
        const olderPid = yield* Deferred.await(appended)
        yield* uow.thread(b, "test.younger")(event(b))
        // The reader takes its snapshot (T in progress: `b`'s event held back, so it reads with its own horizon)
        // and stops where it is about to read pg_locks.
        const readerGdb = yield* attach(readerPid)
        yield* readerGdb.command("break pg_lock_status")
        yield* readerGdb.command("continue")
        const first = yield* Effect.fork(Effect.flatMap(reader.replayAll({ afterGlobalSeq: cursor }), Stream.runCollect))
        yield* readerGdb.until(/Breakpoint 1, [^\n]*pg_lock_status/)
        // T commits and stops in LockReleaseAll once its relation locks are released, its transaction id's not yet.
        const olderGdb = yield* attach(olderPid)
        yield* olderGdb.command("break LockReleaseAll if $rdi == 1")
        yield* olderGdb.command("continue")
        yield* Deferred.succeed(commit, undefined)
        yield* olderGdb.until(/Breakpoint 1, [^\n]*LockReleaseAll/)
        const relationLocks = sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pg_locks WHERE pid = ${olderPid} AND locktype = 'relation'`.pipe(
          Effect.map((r) => r[0]!.n),
          Effect.orDie
        )
        for (let step = 2; (yield* relationLocks) > 0; step++) {
          if (step > 12) return expect.fail("the committing backend kept its relation locks")
          yield* olderGdb.command("tbreak LWLockAcquire")
          yield* olderGdb.command("continue")
          yield* olderGdb.until(new RegExp(`Temporary breakpoint ${step}, [^\\n]*LWLockAcquire`))
        }
        // The reader reads pg_locks now, then T finishes.
        yield* readerGdb.command("delete")
        yield* readerGdb.command("continue")
        const firstEvents = Chunk.toArray(yield* Fiber.join(first))
        yield* olderGdb.command("delete")
        yield* olderGdb.command("continue")
        yield* Fiber.join(older)
        // Resumed from the last event the first read gave (a client's Last-Event-ID), nothing is passed.
        const from = firstEvents.at(-1)?.globalSeq ?? cursor
        const rest = Chunk.toArray(yield* Effect.flatMap(reader.replayAll({ afterGlobalSeq: from }), Stream.runCollect))
        const threadsOf = (events: ReadonlyArray<ThreadEvent>) => events.map((e) => e.threadId)
        expect([...threadsOf(firstEvents), ...threadsOf(rest)]).toEqual([a, b])
      })
    ).pipe(Effect.scoped)
  }, 150_000)
})
