/**
 * Cancelling an `/offload` operation from another server process (issue 12 item 7, docs/offload.md "/offload as an
 * operation", "Cancellation"): two servers, each with its own orchestrator and run driver, on one Postgres schema; the
 * operation runs on the first (its summariser, a loopback Anthropic instance, holds its answer), the cancellation is
 * sent to the second. The second records the request on the operation's row, the first sees it while the summary is
 * being written and ends it `cancelled` (nothing written, the summariser's spent cost abandoned), and the second
 * answers that outcome. A cancellation that arrives after the commit, or while the commit waits for the thread's
 * lock, answers `offloaded` (a commit is never undone).
 */
import type { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import { client } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { held, itemsOf, sumUsage, summaryText, until, withThread } from "./support/Offload.js"

/** The `sum` instance: a 2,000-token window less 500 of output, less the 10 % margin: 1,350 tokens a call. */
const smallSummariser = { contextWindow: 2_000, maxOutputTokens: 500, autoCompactThreshold: 1_800 }

/** The row of operation `operationId`: its status, cost state and whether a cancellation was requested. */
const operationRow = (sql: SqlClient.SqlClient, operationId: string) =>
  Effect.orDie(sql<{ readonly status: string; readonly costState: string; readonly cancelRequestedAt: string | null; readonly driverId: string | null }>`
    SELECT status, cost_state, cancel_requested_at, driver_id FROM offload_operations WHERE operation_id = ${operationId}`).pipe(
    Effect.map((rows) => rows.map((r) => ({ status: r.status, costState: r.costState, cancelRequested: r.cancelRequestedAt !== null, driverId: r.driverId })))
  )

describe.each([["Postgres", true], ["SQLite", false]] as const)("/offload cancelled from another server process (%s, two servers on one database)", (_, postgres) => {
  it.live("a cancel sent to the other process while the summary is written: cancelled, nothing written, the spent call abandoned", () =>
    withThread(6, ({ secondServer, sql, summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const other = yield* secondServer
        const apiB = yield* Effect.provide(client(), other)
        // Two calls: the first answers (billed), the second is held (the model has it and has not answered).
        const preview = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, dryRun: true }, headers: {} })
        expect(preview.coveredTokens).toBeGreaterThan(1_350)
        expect(preview.coveredTokens).toBeLessThanOrEqual(2 * 1_350)
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        const { reply, release } = held(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        summariser.enqueue(reply)
        const offloading = yield* Effect.fork(api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-x" }, headers: {} }))
        yield* until(() => summariser.requests.length === 2)
        // The other process reads it as running (it is not settled as lost: its process is alive).
        expect(yield* apiB.threads.getOffload({ path: { threadId, operationId: "op-x" } })).toMatchObject({ outcome: "running" })
        const cancelled = yield* apiB.threads.cancelOffload({ path: { threadId, operationId: "op-x" } })
        expect(cancelled).toMatchObject({ operationId: "op-x", outcome: "cancelled", offloaded: false, summaryItemId: null, retryable: true })
        expect(cancelled.message).toBe(
          "The offload was cancelled before it was applied. The conversation is unchanged. The summariser's 1 call (1000 input, 200 output tokens, $0.006) was recorded as spent."
        )
        // The call that answered is kept, as abandoned; the held one was cut short and is not counted.
        expect(cancelled.cost).toEqual({
          providerInstance: "sum",
          calls: 1,
          inputTokens: 1_000,
          cacheWriteTokens: 0,
          cacheReadTokens: 0,
          outputTokens: 200,
          costUsd: 0.006,
          state: "abandoned"
        })
        // The request that started it, on the first process, answers the same outcome; the late answer changes nothing.
        expect(yield* Fiber.join(offloading)).toEqual(cancelled)
        release()
        expect(yield* api.threads.getOffload({ path: { threadId, operationId: "op-x" } })).toEqual(cancelled)
        expect(yield* apiB.threads.getOffload({ path: { threadId, operationId: "op-x" } })).toEqual(cancelled)
        expect(yield* itemsOf(threadId, "summary")).toEqual([])
        expect(yield* operationRow(sql, "op-x")).toEqual([expect.objectContaining({ status: "cancelled", costState: "abandoned", cancelRequested: true })])
        const snapshot = yield* apiB.threads.get({ path: { threadId } })
        expect(snapshot.costs.summariser).toMatchObject({ operations: 1, costUsd: 0.006, abandonedUsd: 0.006 })
        // The same id, on either process, answers the first outcome without a third call.
        expect(yield* apiB.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-x" }, headers: {} })).toEqual(cancelled)
        expect(summariser.requests).toHaveLength(2)
      }), { summariserExtra: smallSummariser, postgres }), 120_000)

  it.live("a cancel for an operation whose process is gone: settled as failed (nothing applied), the running fiber stops", () =>
    withThread(4, ({ secondServer, sql, summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const apiB = yield* Effect.provide(client(), yield* secondServer)
        const { reply, release } = held(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        summariser.enqueue(reply)
        const offloading = yield* Effect.fork(Effect.either(api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-gone" }, headers: {} })))
        yield* until(() => summariser.requests.length === 1)
        // The row now names a driver no database knows: to the other process, its owner is gone.
        yield* Effect.orDie(sql`UPDATE offload_operations SET driver_id = 'drv_gone' WHERE operation_id = 'op-gone'`)
        const lost = yield* apiB.threads.cancelOffload({ path: { threadId, operationId: "op-gone" } })
        expect(lost).toMatchObject({ operationId: "op-gone", outcome: "failed", reason: "the server stopped while the offload was running, before it was applied" })
        // The first process sees its row settled and stops summarising; its request answers the same failure.
        const first = yield* Fiber.join(offloading)
        expect(first._tag === "Left" && first.left._tag).toBe("OffloadFailed")
        release()
        expect(yield* api.threads.getOffload({ path: { threadId, operationId: "op-gone" } })).toEqual(lost)
        expect(yield* itemsOf(threadId, "summary")).toEqual([])
      }), { postgres }), 120_000)
})

describe("/offload charges survive a lost process (review finding: they were kept in memory only)", () => {
  it.live("two chunk calls answered and billed, the third held, the process gone: settled failed with both calls' cost abandoned and in the thread's totals", () =>
    withThread(12, ({ secondServer, sql, summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const apiB = yield* Effect.provide(client(), yield* secondServer)
        const { reply, release } = held(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage), ModelApi.answer("anthropic-messages", summaryText, sumUsage), reply)
        const offloading = yield* Effect.fork(Effect.either(api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-charged" }, headers: {} })))
        yield* until(() => summariser.requests.length === 3)
        // Each answered call's charge is on the row already.
        const [row] = yield* Effect.orDie(sql<{ calls: number; inputTokens: number; outputTokens: number }>`SELECT calls, input_tokens, output_tokens FROM offload_operations WHERE operation_id = 'op-charged'`)
        expect([Number(row!.calls), Number(row!.inputTokens), Number(row!.outputTokens)]).toEqual([2, 2_000, 400])
        yield* Effect.orDie(sql`UPDATE offload_operations SET driver_id = 'drv_gone' WHERE operation_id = 'op-charged'`)
        const lost = yield* apiB.threads.getOffload({ path: { threadId, operationId: "op-charged" } })
        expect(lost).toMatchObject({ outcome: "failed", cost: { calls: 2, inputTokens: 2_000, outputTokens: 400, state: "abandoned" } })
        expect(lost.cost!.costUsd).toBeCloseTo(0.012, 9)
        release()
        yield* Fiber.join(offloading)
        const snapshot = yield* api.threads.get({ path: { threadId } })
        expect(snapshot.costs.summariser).toMatchObject({ operations: 1 })
        expect(snapshot.costs.summariser.abandonedUsd).toBeCloseTo(0.012, 9)
        expect(yield* itemsOf(threadId, "summary")).toEqual([])
      }), { summariserExtra: smallSummariser }), 120_000)
})

describe("/offload cancelled from another server process while committing (Postgres)", () => {

  it.live("a cancel sent to the other process after the commit, or while the commit waits for the thread's lock: offloaded", () =>
    withThread(4, ({ secondServer, sql, summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const apiB = yield* Effect.provide(client(), yield* secondServer)
        // After the commit: the outcome, nothing undone, no request recorded.
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        const done = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-done" }, headers: {} })
        expect(done.outcome).toBe("offloaded")
        expect(yield* apiB.threads.cancelOffload({ path: { threadId, operationId: "op-done" } })).toEqual(done)
        expect(yield* operationRow(sql, "op-done")).toEqual([expect.objectContaining({ status: "offloaded", costState: "committed", cancelRequested: false })])
        expect(yield* itemsOf(threadId, "summary")).toHaveLength(1)
        // Undone, so that the thread has history to offload again.
        expect(yield* api.threads.undoOffload({ path: { threadId }, payload: {}, headers: {} })).toMatchObject({ undone: true })

        // While committing: another writer holds the thread's row; the summary answers and the commit waits for it.
        const { reply, release } = held(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        summariser.enqueue(reply)
        const offloading = yield* Effect.fork(api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-lock" }, headers: {} }))
        yield* until(() => summariser.requests.length === 2)
        const locked = yield* Deferred.make<number>()
        const unlock = yield* Deferred.make<void>()
        const holder = yield* Effect.fork(Effect.orDie(sql.withTransaction(Effect.gen(function*() {
          yield* sql`SELECT id FROM threads WHERE id = ${threadId} FOR UPDATE`
          const [row] = yield* sql<{ readonly pid: number }>`SELECT pg_backend_pid() AS pid`
          yield* Deferred.succeed(locked, Number(row!.pid))
          yield* Deferred.await(unlock)
        }))))
        const pid = yield* Deferred.await(locked)
        release()
        // Backends waiting for the holder, directly or behind another waiter (a row lock's queue: the second waiter
        // is reported blocked by the first).
        const blockedBy = Effect.map(
          Effect.orDie(sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity a
            WHERE pg_blocking_pids(a.pid) && (ARRAY[${pid}::int] || ARRAY(SELECT b.pid FROM pg_stat_activity b WHERE ${pid} = ANY(pg_blocking_pids(b.pid))))`),
          (rows) => Number(rows[0]!.n)
        )
        // The commit waits for the lock; then the cancellation, on the other process, queues behind it too.
        while ((yield* blockedBy) < 1) yield* Effect.sleep("5 millis")
        const cancelling = yield* Effect.fork(apiB.threads.cancelOffload({ path: { threadId, operationId: "op-lock" } }))
        while ((yield* blockedBy) < 2) yield* Effect.sleep("5 millis")
        yield* Deferred.succeed(unlock, undefined)
        yield* Fiber.join(holder)
        const committed = yield* Fiber.join(offloading)
        expect(committed).toMatchObject({ operationId: "op-lock", outcome: "offloaded", offloaded: true })
        expect(yield* Fiber.join(cancelling)).toEqual(committed)
        expect(yield* operationRow(sql, "op-lock")).toEqual([expect.objectContaining({ status: "offloaded", costState: "committed" })])
        const summaries = yield* itemsOf(threadId, "summary")
        expect(summaries.map((s) => s.id)).toContain(committed.summaryItemId)
      }), { postgres: true }), 120_000)
})
