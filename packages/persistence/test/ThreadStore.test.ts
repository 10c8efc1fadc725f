import type { CommandId, HandoffId, Item, ItemId, NativeThreadId, ProviderInstance, ProviderThreadId, Run, RunId, ThreadId, ToolCallId } from "@baton/contracts"
import { Database, Migrations, ThreadStore } from "@baton/persistence"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { DateTime, Effect, Layer, Option, Scheduler } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

const layerAt = (file: string) => ThreadStore.Default.pipe(Layer.provideMerge(Database.layerSqlite(file)))

const thread = (id: string, now: DateTime.Utc) => ({
  id: id as ThreadId,
  title: "a thread",
  activeProviderThreadId: null,
  createdAt: now,
  updatedAt: now
})

/** Provider thread `id` of thread `threadId` on `providerInstance` with `model`: no context window, nothing synced. */
const providerThread = (id: string, threadId: string, providerInstance: string, now: DateTime.Utc, model = "m") => ({
  id: id as ProviderThreadId,
  threadId: threadId as ThreadId,
  providerInstance: providerInstance as ProviderInstance,
  model,
  contextWindow: null,
  activeNativeThreadId: null,
  syncedRunSeq: 0,
  createdAt: now,
  updatedAt: now
})

/** Run `id`, number `seq` of thread `threadId` on `providerThreadId`: queued, prompt "p", no stop point or failure; `patch` over that. */
const runRow = (id: string, threadId: string, providerThreadId: string, seq: number, now: DateTime.Utc, patch: Partial<Run> = {}): Run => ({
  id: id as RunId,
  threadId: threadId as ThreadId,
  seq,
  providerThreadId: providerThreadId as ProviderThreadId,
  status: "queued",
  prompt: "p",
  stopPoint: null,
  failureReason: null,
  failureCode: null,
  nativeThreadId: null,
  createdAt: now,
  updatedAt: now,
  ...patch
})

const item = (threadId: ThreadId, seq: number, now: DateTime.Utc, patch: Partial<Item> = {}): Item => ({
  id: `itm_${seq}` as ItemId,
  threadId,
  runId: null,
  seq,
  kind: "user_message",
  text: `message ${seq}`,
  toolCallId: null,
  toolName: null,
  messageId: null,
  isError: false,
  toolCallState: null,
  tokens: 7,
  createdAt: now,
  ...patch
})

describe("ThreadStore on a SQLite file", () => {
  it.live("persists across reopening the file: threads, items (booleans, nulls), events", () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-store-"))
    const file = Path.join(dir, "nested", "baton.sqlite")
    return Effect.gen(function*() {
      const now = yield* DateTime.now
      yield* Effect.gen(function*() {
        const store = yield* ThreadStore
        yield* store.insertThread(thread("thr_1", now))
        yield* store.insertItems([
          item("thr_1" as ThreadId, 1, now),
          item("thr_1" as ThreadId, 2, now, {
            kind: "tool_result",
            isError: true,
            toolCallId: "call_1" as ToolCallId,
            toolName: "bash",
            runId: "run_1" as RunId
          })
        ])
        const queued = { runId: "run_1" as RunId, seq: 1, providerThreadId: "pth_1" as ProviderThreadId }
        expect((yield* store.appendEvent({ threadId: "thr_1" as ThreadId, type: "thread.created", payload: { title: "a thread" } })).seq).toBe(1)
        expect((yield* store.appendEvent({ threadId: "thr_1" as ThreadId, type: "run.queued", payload: queued })).seq).toBe(2)
      }).pipe(Effect.provide(layerAt(file)))

      expect(Fs.existsSync(file)).toBe(true)
      yield* Effect.gen(function*() {
        const store = yield* ThreadStore
        const items = yield* store.listItems("thr_1" as ThreadId)
        expect(items.map((i) => [i.seq, i.kind, i.isError, i.toolCallId, i.runId])).toEqual([
          [1, "user_message", false, null, null],
          [2, "tool_result", true, "call_1", "run_1"]
        ])
        expect(yield* store.nextItemSeq("thr_1" as ThreadId)).toBe(3)
        const events = yield* store.listEvents("thr_1" as ThreadId)
        expect(events.map((e) => [e.seq, e.type, e.payload])).toEqual([
          [1, "thread.created", { title: "a thread" }],
          [2, "run.queued", { runId: "run_1", seq: 1, providerThreadId: "pth_1" }]
        ])
        // Migrations are not re-applied on an existing file: each registered migration is recorded once.
        const sql = yield* SqlClient.SqlClient
        const applied = yield* sql<{ migrationId: number }>`SELECT migration_id FROM effect_sql_migrations ORDER BY migration_id`
        const registered = Object.keys(Migrations.migrations).map((key) => Number(key.slice(0, key.indexOf("_"))))
        expect(applied.map((m) => m.migrationId)).toEqual(registered)
      }).pipe(Effect.provide(layerAt(file)))
    }).pipe(Effect.ensuring(Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))))
  })

  it.effect("a second writer taking the same event seq fails with ConcurrentModification", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const sql = yield* SqlClient.SqlClient
      const now = yield* DateTime.now
      yield* store.insertThread(thread("thr_2", now))
      yield* store.appendEvent({ threadId: "thr_2" as ThreadId, type: "thread.created", payload: { title: "a thread" } })
      // Simulate the other writer: it inserted seq 2 between our read of MAX(seq) and our insert.
      yield* sql`CREATE TRIGGER steal BEFORE INSERT ON thread_events WHEN NEW.seq = 2 AND NEW.type = 'run.queued'
        BEGIN INSERT INTO thread_events (event_id, thread_id, seq, type, payload, created_at)
        VALUES ('evt_other', NEW.thread_id, 2, 'run.started', '{}', NEW.created_at); END`
      const payload = { runId: "run_1" as RunId, seq: 1, providerThreadId: "pth_1" as ProviderThreadId }
      const result = yield* Effect.flip(store.appendEvent({ threadId: "thr_2" as ThreadId, type: "run.queued", payload }))
      expect(result._tag).toBe("ConcurrentModification")
      expect(result.message).toContain("thr_2")
      // The failed statement is rolled back whole (the trigger's row with it): nothing half-written remains.
      const events = yield* store.listEvents("thr_2" as ThreadId)
      expect(events.map((e) => e.type)).toEqual(["thread.created"])
    }).pipe(Effect.provide(layerAt(":memory:"))))

  it.effect("an unknown id reads as None; a duplicate key is a ConcurrentModification (by driver code), a storage fault a PersistenceError, each naming the operation", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const sql = yield* SqlClient.SqlClient
      const now = yield* DateTime.now
      expect((yield* store.getThread("thr_missing" as ThreadId))._tag).toBe("None")
      yield* store.insertThread(thread("thr_3", now))
      yield* store.insertItems([item("thr_3" as ThreadId, 1, now)])
      const duplicate = yield* Effect.flip(store.insertItems([item("thr_3" as ThreadId, 1, now)]))
      expect(duplicate._tag).toBe("ConcurrentModification")
      expect(duplicate._tag === "ConcurrentModification" && duplicate.operation).toBe("items.insert")
      yield* sql`DROP TABLE offloads`
      const fault = yield* Effect.flip(store.listOffloads("thr_3" as ThreadId))
      expect(fault._tag).toBe("PersistenceError")
      expect(fault.message).toBe("storage error in offloads.list: SqlError: Failed to prepare statement  (SQLITE_ERROR: no such table: offloads)")
    }).pipe(Effect.provide(layerAt(":memory:"))))

  it.effect("recordNativeUsage writes a turn's usage and estimate only: a status written meanwhile (replaced) is kept and returned; an unknown id is None", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const now = yield* DateTime.now
      yield* store.insertThread(thread("thr_4", now))
      yield* store.insertProviderThread(providerThread("pth_1", "thr_4", "codex", now, "gpt-5"))
      const native = {
        id: "nat_1" as NativeThreadId,
        providerThreadId: "pth_1" as ProviderThreadId,
        generation: 2,
        nativeRef: "ref-1",
        status: "active" as const,
        usage: { usedTokens: 10, maxTokens: 100, autoCompactThreshold: 90 },
        estimatedTokens: 10,
        compactionsWithoutProgress: 1,
        createdAt: now,
        updatedAt: now
      }
      yield* store.insertNativeThread(native)
      yield* store.updateNativeThread({ ...native, status: "replaced" })
      expect(yield* store.recordNativeUsage(native.id, { usedTokens: 42 }, 40, now)).toEqual(Option.some("replaced"))
      const read = Option.getOrThrow(yield* store.getNativeThread(native.id))
      expect([read.status, read.usage, read.estimatedTokens, read.generation, read.compactionsWithoutProgress]).toEqual(["replaced", { usedTokens: 42 }, 40, 2, 1])
      yield* store.recordNativeUsage(native.id, null, 55, now)
      expect(Option.map(yield* store.getNativeThread(native.id), (n) => [n.usage, n.estimatedTokens])).toEqual(Option.some([null, 55]))
      expect(yield* store.recordNativeUsage("nat_missing" as NativeThreadId, null, 0, now)).toEqual(Option.none())
    }).pipe(Effect.provide(layerAt(":memory:"))))

  it.effect("a provider's calibration reads as None until written; an upsert replaces it (ratio kept to full precision, recent samples with it)", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const now = yield* DateTime.now
      const codex = "codex" as ProviderInstance
      expect((yield* store.getCalibration(codex))._tag).toBe("None")
      const first = { ratio: 1.1499999999999997, tokens: 4_000 }
      yield* store.upsertCalibration({ providerInstance: codex, ratio: 1.1499999999999997, samples: 1, weight: 4_000, recent: [first], updatedAt: now })
      const recent = [first, { ratio: 1.1522, tokens: 5_000 }]
      yield* store.upsertCalibration({ providerInstance: codex, ratio: 1.1512345678901235, samples: 2, weight: 9_000, recent, updatedAt: now })
      const read = yield* store.getCalibration(codex)
      expect(read._tag === "Some" && [read.value.ratio, read.value.samples, read.value.weight, read.value.recent])
        .toEqual([1.1512345678901235, 2, 9_000, recent])
      expect((yield* store.getCalibration("claude" as ProviderInstance))._tag).toBe("None")
    }).pipe(Effect.provide(layerAt(":memory:"))))

  it.effect("upsertCalibrationIfUnchanged writes only while the calibration is as read: no row (inserted unless one appeared), or the sample count read", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const now = yield* DateTime.now
      const codex = "codex" as ProviderInstance
      const at = (samples: number, ratio: number) => ({ providerInstance: codex, ratio, samples, weight: 1_000 * samples, recent: [{ ratio, tokens: 1_000 }], updatedAt: now })
      // Read as absent: inserted.
      expect(yield* store.upsertCalibrationIfUnchanged(at(1, 1.1), null)).toBe(true)
      // Read as absent, but a row appeared since: nothing written.
      expect(yield* store.upsertCalibrationIfUnchanged(at(1, 1.9), null)).toBe(false)
      // Read with 1 sample and still so: written.
      expect(yield* store.upsertCalibrationIfUnchanged(at(2, 1.2), 1)).toBe(true)
      // Read with 1 sample, but another learn made it 2 meanwhile: nothing written (the caller learns again, locked).
      expect(yield* store.upsertCalibrationIfUnchanged(at(2, 2.5), 1)).toBe(false)
      const read = yield* store.getCalibration(codex)
      expect(read._tag === "Some" && [read.value.ratio, read.value.samples, read.value.weight]).toEqual([1.2, 2, 2_000])
    }).pipe(Effect.provide(layerAt(":memory:"))))

  it.effect("migration 0006: a run's failure code and a command receipt's payload fingerprint are stored and read back", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const now = yield* DateTime.now
      yield* store.insertThread(thread("thr_6", now))
      yield* store.insertProviderThread(providerThread("pth_6", "thr_6", "codex", now))
      const run = runRow("run_6", "thr_6", "pth_6", 1, now)
      yield* store.insertRun(run)
      const read = (id: RunId) => Effect.map(store.getRun(id), Option.getOrThrow)
      expect((yield* read(run.id)).failureCode).toBe(null)
      yield* store.updateRun({ ...run, status: "failed", stopPoint: "before_provider", failureReason: "provider codex failed startTurn (timeout): t", failureCode: "provider_timeout" })
      expect([(yield* read(run.id)).status, (yield* read(run.id)).failureCode]).toEqual(["failed", "provider_timeout"])

      yield* store.insertReceipt({ commandId: "cmd_6" as CommandId, commandType: "SendMessage", threadId: "thr_6" as ThreadId, result: { runId: "run_6" }, payloadFingerprint: "abc", createdAt: now })
      const receipt = Option.getOrThrow(yield* store.findReceipt("cmd_6"))
      expect([receipt.payloadFingerprint, receipt.result]).toEqual(["abc", { runId: "run_6" }])
    }).pipe(Effect.provide(layerAt(":memory:"))))

  it.effect("updateRunIfRunning completes a running run once: a run another path ended, or none, is left as it is; updateRunEnded writes the run and answers whether a prompt is owed", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const now = yield* DateTime.now
      const later = DateTime.add(now, { seconds: 5 })
      yield* store.insertThread(thread("thr_7", now))
      yield* store.insertProviderThread(providerThread("pth_7", "thr_7", "claude", now))
      const run = (id: string, seq: number, status: Run["status"]) => runRow(id, "thr_7", "pth_7", seq, now, { status })
      yield* store.insertRun(run("run_7", 1, "running"))
      yield* store.insertRun(run("run_8", 2, "interrupted"))
      const read = (id: string) => Effect.map(store.getRun(id as RunId), Option.getOrThrow)
      expect(yield* store.updateRunIfRunning("run_7" as RunId, "completed", later)).toEqual({ moved: true, promptsOwed: false })
      expect(yield* read("run_7")).toEqual({ ...run("run_7", 1, "completed"), updatedAt: later })
      expect(yield* store.updateRunIfRunning("run_7" as RunId, "completed", now)).toEqual({ moved: false, promptsOwed: false })
      expect((yield* read("run_7")).updatedAt).toEqual(later)
      expect(yield* store.updateRunIfRunning("run_8" as RunId, "completed", later)).toEqual({ moved: false, promptsOwed: false })
      expect(yield* read("run_8")).toEqual(run("run_8", 2, "interrupted"))
      expect(yield* store.updateRunIfRunning("run_9" as RunId, "completed", later)).toEqual({ moved: false, promptsOwed: false })
      // `updateRunEnded` writes every field of the run and answers, in the same statement, whether a run of the
      // thread owes its prompt; a run that is not there is written nowhere and owes nothing.
      yield* store.insertRun(run("run_10", 3, "running"))
      yield* store.setPromptOwed("run_8" as RunId, true)
      const ended = { ...run("run_10", 3, "failed"), failureReason: "r", failureCode: "provider_timeout" as const, updatedAt: later }
      expect(yield* store.updateRunEnded(ended)).toBe(true)
      expect(yield* read("run_10")).toEqual(ended)
      yield* store.setPromptOwed("run_8" as RunId, false)
      expect(yield* store.updateRunEnded({ ...ended, status: "interrupted" })).toBe(false)
      expect((yield* read("run_10")).status).toBe("interrupted")
      expect(yield* store.updateRunEnded({ ...ended, id: "run_11" as RunId })).toBe(false)
      expect(yield* store.updateRunIfRunning("run_7" as RunId, "completed", later)).toEqual({ moved: false, promptsOwed: false })
      yield* store.setPromptOwed("run_8" as RunId, true)
      yield* store.insertRun(run("run_12", 4, "running"))
      expect(yield* store.updateRunIfRunning("run_12" as RunId, "completed", later)).toEqual({ moved: true, promptsOwed: true })
    }).pipe(Effect.provide(layerAt(":memory:"))))

  it.effect("findLinkOfRun finds the fork or merge whose synthetic run it is (None for another run); setLinkHandoff names a merge's handoff once its copies are written", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const now = yield* DateTime.now
      yield* store.insertThread(thread("thr_p", now))
      yield* store.insertThread(thread("thr_f", now))
      yield* store.insertProviderThread(providerThread("pth_p", "thr_p", "claude", now))
      const run = (id: string, seq: number) => runRow(id, "thr_p", "pth_p", seq, now, { status: "completed", prompt: "", stopPoint: "before_provider" })
      yield* store.insertRun(run("run_p1", 1))
      yield* store.insertRun(run("run_p2", 2))
      const link = {
        id: "lnk_m",
        kind: "merge" as const,
        parentThreadId: "thr_p" as ThreadId,
        forkThreadId: "thr_f" as ThreadId,
        runId: "run_p2" as RunId,
        fromRunSeq: 1,
        throughRunSeq: 3,
        itemCount: 4,
        handoffId: null,
        createdAt: now
      }
      yield* store.insertLink(link)
      expect(yield* store.findLinkOfRun("run_p2" as RunId)).toEqual(Option.some(link))
      expect(yield* store.findLinkOfRun("run_p1" as RunId)).toEqual(Option.none())
      yield* store.setLinkHandoff("lnk_m", "hnd_9" as HandoffId)
      expect(yield* store.findLinkOfRun("run_p2" as RunId)).toEqual(Option.some({ ...link, handoffId: "hnd_9" }))
    }).pipe(Effect.provide(layerAt(":memory:"))))

  it.live("long reads (a thread's runs by page, items by chunks of ids) yield to the event loop between statements, and return every row in order", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const now = yield* DateTime.now
      yield* store.insertThread(thread("thr_y", now))
      yield* store.insertProviderThread(providerThread("pth_y", "thr_y", "claude", now))
      for (let seq = 1; seq <= 2_500; seq++) {
        yield* store.insertRun(runRow(`run_y${seq}`, "thr_y", "pth_y", seq, now, { status: "completed" }))
      }
      yield* store.insertItems(Array.from({ length: 1_500 }, (_, i) => item("thr_y" as ThreadId, i + 1, now, { runId: `run_y${i + 1}` as RunId })))
      // Turns of the event loop while a read runs: with SQLite every statement is synchronous, so without the yields
      // between statements a read took none (live event streams waited for it to end).
      let turns = 0
      let ticking = true
      const tick = () => {
        turns++
        if (ticking) setImmediate(tick)
      }
      setImmediate(tick)
      const during = <A, E, R>(read: Effect.Effect<A, E, R>) =>
        Effect.gen(function*() {
          const before = turns
          const result = yield* read
          return { result, turns: turns - before }
        })
      const runs = yield* during(store.listRunsBetween("thr_y" as ThreadId, 10, 2_400))
      expect(runs.result.map((r) => r.seq)).toEqual(Array.from({ length: 2_389 }, (_, i) => i + 11))
      expect(runs.turns).toBeGreaterThanOrEqual(2)
      const ids = Array.from({ length: 1_500 }, (_, i) => `itm_${i + 1}` as ItemId)
      const items = yield* during(store.getItems(ids))
      expect(items.result.map((i) => i.id)).toEqual(ids)
      expect(items.turns).toBeGreaterThanOrEqual(2)
      const ofRuns = yield* during(store.listItemsOfRuns(Array.from({ length: 1_500 }, (_, i) => `run_y${i + 1}` as RunId)))
      expect(ofRuns.result.map((i) => i.seq)).toEqual(Array.from({ length: 1_500 }, (_, i) => i + 1))
      expect(ofRuns.turns).toBeGreaterThanOrEqual(2)
      ticking = false
    }).pipe(
      // Every yield resumed from `setImmediate`, so each is a turn of the loop (the CLI's `timeSliced` scheduler
      // turns it at such a yield once 10 ms of work went by; apps/cli CliRuntime).
      Effect.withScheduler(Scheduler.makeBatched((runBatch) => setImmediate(runBatch))),
      Effect.provide(layerAt(":memory:"))
    ))

  it.effect("activeProviderThreadOn names the thread's active provider thread only when it is the one on the instance", () =>
    Effect.gen(function*() {
      const store = yield* ThreadStore
      const now = yield* DateTime.now
      yield* store.insertThread(thread("thr_a", now))
      yield* store.insertProviderThread(providerThread("pth_a", "thr_a", "claude", now))
      yield* store.insertProviderThread(providerThread("pth_b", "thr_a", "codex", now))
      const on = (instance: string) => store.activeProviderThreadOn("thr_a" as ThreadId, instance as ProviderInstance)
      // No active provider thread yet.
      expect(yield* on("claude")).toEqual(Option.none())
      yield* store.updateThread({ ...thread("thr_a", now), activeProviderThreadId: "pth_a" as ProviderThreadId })
      expect(yield* on("claude")).toEqual(Option.some("pth_a"))
      // The thread's active one is on another instance; an unknown instance or thread has none.
      expect(yield* on("codex")).toEqual(Option.none())
      expect(yield* on("other")).toEqual(Option.none())
      expect(yield* store.activeProviderThreadOn("thr_none" as ThreadId, "claude" as ProviderInstance)).toEqual(Option.none())
    }).pipe(Effect.provide(layerAt(":memory:"))))
})
