/**
 * `/compact` writes a thread only under the thread's lock. It created the delivery of a handoff newly owed to the
 * native thread (`ContextHandoffDelivery.owedTo`) outside any unit of work: the delivery and its `delivery.created`
 * event committed apart, while another writer held the thread, and the event took the `seq` that writer was
 * appending. Two processes on one Postgres (tester r48: `/compact` and sends racing on one thread from two servers)
 * ended in a deadlock in `thread_events` (`40P01`), answered `409 ConcurrentModification`.
 *
 * Postgres only: on SQLite every write waits for the one write lock, so an unlocked write cannot slip in beside a
 * unit of work (it still committed apart from its event there; the fix covers both).
 */
import type { ThreadId } from "@baton/contracts"
import { UnitOfWork } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Deferred, Duration, Effect, Fiber } from "effect"

describe("/compact and another writer holding the thread (Postgres)", () => {
  it.live("writes nothing until the writer commits, then compacts: one delivery more, with its delivery.created, invariants hold", () => {
    const h = Harness.make([
      { name: "codex", window: 200_000, inject: true },
      { name: "claude", window: 200_000, inject: false }
    ], { db: Harness.postgres })
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const uow = yield* UnitOfWork
      const sql = yield* SqlClient.SqlClient
      // codex's native thread, then a claude run owed back to it by the switch: a handoff with no delivery yet.
      const t = yield* o.create("codex")
      yield* o.send(t, "first on codex")
      yield* o.switchTo(t, "claude")
      yield* o.send(t, "on claude")
      yield* o.switchTo(t, "codex")
      const deliveries = (threadId: ThreadId) =>
        Effect.map(o.store.listDeliveriesOfThread(threadId), (all) => all.length)
      // claude's delivery of the first switch; none yet to codex's native thread.
      const before = yield* deliveries(t)

      // Another writer of the thread (a send, say) holds its lock and has appended an event, uncommitted.
      const holder = yield* Deferred.make<number>()
      const release = yield* Deferred.make<void>()
      const writer = yield* Effect.fork(uow.thread(t, "test.writer")(Effect.gen(function*() {
        yield* o.store.appendEvent({ threadId: t, type: "thread.created", payload: { title: "another writer" } })
        const [row] = yield* sql<{ readonly pid: number }>`SELECT pg_backend_pid() AS pid`
        yield* Deferred.succeed(holder, row!.pid)
        yield* Deferred.await(release)
      })))
      const pid = yield* Deferred.await(holder)

      const compact = yield* Effect.fork(o.compact(t))
      // Wait until /compact waits on the writer (a backend blocked by the writer's): then it has gone as far as it can.
      const blocked = sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE ${pid} = ANY(pg_blocking_pids(pid))`
      let waiting = 0
      for (let i = 0; i < 600 && waiting === 0; i++) {
        waiting = (yield* blocked)[0]!.n
        if (waiting === 0) yield* Effect.sleep(Duration.millis(50))
      }
      expect(waiting).toBeGreaterThan(0)
      // Nothing of /compact is written while the thread is another writer's.
      expect(yield* deliveries(t)).toBe(before)

      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(writer)
      const report = yield* Fiber.join(compact)
      expect(report.deliveredItems).toBe(2)
      const created = (yield* o.store.listEvents(t)).filter((e) => e.type === "delivery.created")
      expect([yield* deliveries(t), created.length]).toEqual([before + 1, before + 1])
      expect(yield* o.check(t, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  }, 60_000)
})
