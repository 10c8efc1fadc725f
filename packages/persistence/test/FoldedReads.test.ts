import type { DeliveryId, DeliveryStatus, HandoffId, Item, ItemId, NativeThreadId, ProviderInstance, ProviderThreadId, Run, RunAttemptId, RunId, ThreadId } from "@baton/contracts"
import { Database, ThreadStore } from "@baton/persistence"
import type { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { DateTime, Effect, Layer, Option } from "effect"

/** Reads a turn's start folds into one statement, on every dialect: a `:memory:` SQLite database and a fresh Postgres schema. */
const dialects: ReadonlyArray<readonly [string, () => Layer.Layer<SqlClient.SqlClient, Database.DatabaseError>]> = [
  ["SQLite", () => Database.layerSqlite(":memory:")],
  ["Postgres", () => Database.layerPgIsolated()]
]

const layerOn = (db: () => Layer.Layer<SqlClient.SqlClient, Database.DatabaseError>) =>
  ThreadStore.Default.pipe(Layer.provideMerge(Layer.orDie(db())))

const thread = (id: string, now: DateTime.Utc) => ({
  id: id as ThreadId,
  title: `thread ${id}`,
  activeProviderThreadId: null,
  createdAt: now,
  updatedAt: now
})

const run = (id: string, threadId: string, seq: number, now: DateTime.Utc): Run => ({
  id: id as RunId,
  threadId: threadId as ThreadId,
  seq,
  providerThreadId: "pth_1" as ProviderThreadId,
  status: "starting",
  prompt: `prompt ${seq}`,
  stopPoint: null,
  failureReason: null,
  failureCode: null,
  nativeThreadId: null,
  createdAt: now,
  updatedAt: now
})

for (const [dialect, db] of dialects) {
  describe(`ThreadStore folded reads on ${dialect}`, () => {
    it.effect("getThreadForQueue: the thread as getThread reads it, with the tools getThreadTools reads ([] for none); None for no thread", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        const now = yield* DateTime.now
        yield* store.insertThread(thread("thr_a", now))
        yield* store.insertThread(thread("thr_b", now))
        const tools = [
          { name: "lookup", description: "looks a word up", inputSchema: { type: "object", properties: { word: { type: "string" } } } },
          { name: "noop", description: "does nothing", inputSchema: { type: "object" } }
        ]
        yield* store.setThreadTools("thr_a" as ThreadId, tools)
        for (const id of ["thr_a", "thr_b"] as const) {
          const both = Option.getOrThrow(yield* store.getThreadForQueue(id as ThreadId))
          expect(both.thread).toEqual(Option.getOrThrow(yield* store.getThread(id as ThreadId)))
          expect(both.tools).toEqual(yield* store.getThreadTools(id as ThreadId))
        }
        expect(Option.getOrThrow(yield* store.getThreadForQueue("thr_a" as ThreadId)).tools.map((t) => t.name)).toEqual(["lookup", "noop"])
        expect(Option.getOrThrow(yield* store.getThreadForQueue("thr_b" as ThreadId)).tools).toEqual([])
        expect(yield* store.getThreadForQueue("thr_none" as ThreadId)).toEqual(Option.none())
      }).pipe(Effect.provide(layerOn(db))))

    it.effect("getThreadForQueue: the active provider thread as getProviderThread reads it; None when the thread has none or it is missing", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        const now = yield* DateTime.now
        yield* store.insertThread(thread("thr_p", now))
        yield* store.insertThread(thread("thr_q", now))
        const providerThread = {
          id: "pth_p" as ProviderThreadId, threadId: "thr_p" as ThreadId, providerInstance: "claude" as ProviderInstance, model: "m",
          contextWindow: 200_000, activeNativeThreadId: "nat_p" as NativeThreadId, syncedRunSeq: 3, createdAt: now, updatedAt: now
        }
        yield* store.insertProviderThread(providerThread)
        // A thread with no provider thread reads None; one naming a provider thread reads it as getProviderThread does.
        expect(Option.getOrThrow(yield* store.getThreadForQueue("thr_p" as ThreadId)).providerThread).toEqual(Option.none())
        yield* store.updateThread({ ...thread("thr_p", now), activeProviderThreadId: "pth_p" as ProviderThreadId })
        const read = Option.getOrThrow(yield* store.getThreadForQueue("thr_p" as ThreadId))
        expect(read.providerThread).toEqual(yield* store.getProviderThread("pth_p" as ProviderThreadId))
        expect(Option.getOrThrow(read.providerThread).syncedRunSeq).toBe(3)
        expect(read.thread).toEqual(Option.getOrThrow(yield* store.getThread("thr_p" as ThreadId)))
        // A thread naming a provider thread that is not there (a damaged record) reads None.
        yield* store.updateThread({ ...thread("thr_q", now), activeProviderThreadId: "pth_gone" as ProviderThreadId })
        expect(Option.getOrThrow(yield* store.getThreadForQueue("thr_q" as ThreadId)).providerThread).toEqual(Option.none())
      }).pipe(Effect.provide(layerOn(db))))

    it.effect("getNativeThreadSession: the native thread as getNativeThread reads it, its session's driver and replay window, whether listDeliveriesByStatus(pending) and listOpenHandoffs would find anything, and the calibration as getCalibration reads it", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        const now = yield* DateTime.now
        yield* store.insertThread(thread("thr_n", now))
        for (const id of ["pth_n", "pth_m"]) {
          yield* store.insertProviderThread({
            id: id as ProviderThreadId, threadId: "thr_n" as ThreadId, providerInstance: id as ProviderInstance, model: "m",
            contextWindow: null, activeNativeThreadId: null, syncedRunSeq: 0, createdAt: now, updatedAt: now
          })
        }
        for (const [id, pth] of [["nat_n", "pth_n"], ["nat_m", "pth_m"]] as const) {
          yield* store.insertNativeThread({
            id: id as NativeThreadId, providerThreadId: pth as ProviderThreadId, generation: 1, nativeRef: id, status: "active",
            usage: null, estimatedTokens: 0, compactionsWithoutProgress: 0, createdAt: now, updatedAt: now
          })
        }
        const session = (native: string, pth: string) =>
          Effect.map(store.getNativeThreadSession(native as NativeThreadId, pth as ProviderThreadId, "claude" as ProviderInstance), Option.getOrThrow)
        // The long way: each list read on its own.
        const check = (native: string, pth: string) =>
          Effect.gen(function*() {
            const got = yield* session(native, pth)
            expect(got.native).toEqual(Option.getOrThrow(yield* store.getNativeThread(native as NativeThreadId)))
            expect(got.hasPending).toBe((yield* store.listDeliveriesByStatus(native as NativeThreadId, "pending")).length > 0)
            expect(got.hasOpenHandoffs).toBe((yield* store.listOpenHandoffs(pth as ProviderThreadId)).length > 0)
            expect(got.calibration).toEqual(yield* store.getCalibration("claude" as ProviderInstance))
            return got
          })
        const first = yield* check("nat_n", "pth_n")
        expect([first.sessionDriverId, first.replayWindow, first.hasPending, first.hasOpenHandoffs]).toEqual([null, false, false, false])
        expect(first.calibration).toEqual(Option.none())
        yield* store.upsertCalibration({
          providerInstance: "claude", ratio: 1.25, samples: 3, weight: 9_000, recent: [{ ratio: 1.25, tokens: 3_000 }], updatedAt: now
        })
        expect(Option.getOrThrow((yield* check("nat_n", "pth_n")).calibration).ratio).toBe(1.25)
        yield* store.holdSession("nat_n" as NativeThreadId, "drv_1", true)
        const resumed = yield* check("nat_n", "pth_n")
        expect([resumed.sessionDriverId, resumed.replayWindow]).toEqual(["drv_1", true])
        expect(yield* store.takeReplayWindow("nat_n" as NativeThreadId)).toBe(true)
        expect((yield* check("nat_n", "pth_n")).replayWindow).toBe(false)
        // A closed handoff toward pth_n, an open one toward pth_m; deliveries: deferred and pending, to nat_m only.
        for (const [name, open, target] of [["closed", false, "pth_n"], ["open", true, "pth_m"]] as const) {
          yield* store.insertHandoff({
            id: `hof_${name}` as HandoffId, threadId: "thr_n" as ThreadId, kind: "switch", targetProviderThreadId: target as ProviderThreadId,
            sourceRunIds: [], itemIds: [], tokens: 1, omittedItemIds: [], open, createdAt: now, updatedAt: now
          })
        }
        for (const [handoff, status] of [["closed", "deferred"], ["open", "pending"]] as const) {
          yield* store.insertDelivery({
            id: `dlv_${handoff}` as DeliveryId, handoffId: `hof_${handoff}` as HandoffId, nativeThreadId: "nat_m" as NativeThreadId,
            status, mode: null, runId: null, deliveredItemIds: [], omittedItemIds: [], deliveredTokens: 0, deferCount: 0,
            lastDeferReason: null, createdAt: now, updatedAt: now
          })
        }
        const n = yield* check("nat_n", "pth_n")
        expect([n.hasPending, n.hasOpenHandoffs]).toEqual([false, false])
        const m = yield* check("nat_m", "pth_m")
        expect([m.hasPending, m.hasOpenHandoffs]).toEqual([true, true])
        expect(yield* store.getNativeThreadSession("nat_none" as NativeThreadId, "pth_n" as ProviderThreadId, "claude" as ProviderInstance)).toEqual(Option.none())
      }).pipe(Effect.provide(layerOn(db))))

    // Sim seed 9101: the least a native thread holds, proved by a rejection, outlives later (stale) usage reports.
    it.effect("a native thread's heldAtLeast: stored and read back by getNativeThread and getNativeThreadSession, kept by recordNativeUsage, gone when written without it", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        const now = yield* DateTime.now
        yield* store.insertThread(thread("thr_h", now))
        yield* store.insertProviderThread({
          id: "pth_h" as ProviderThreadId, threadId: "thr_h" as ThreadId, providerInstance: "big" as ProviderInstance, model: "m",
          contextWindow: 1_000_000, activeNativeThreadId: null, syncedRunSeq: 0, createdAt: now, updatedAt: now
        })
        const native = {
          id: "nat_h" as NativeThreadId, providerThreadId: "pth_h" as ProviderThreadId, generation: 1, nativeRef: "h", status: "active" as const,
          usage: { usedTokens: 837 }, estimatedTokens: 700, compactionsWithoutProgress: 0, createdAt: now, updatedAt: now
        }
        yield* store.insertNativeThread(native)
        const held = () => Effect.map(store.getNativeThread(native.id), (n) => Option.getOrThrow(n).heldAtLeast)
        expect(yield* held()).toBeUndefined()
        yield* store.updateNativeThread({ ...native, heldAtLeast: 999_741 })
        expect(yield* held()).toBe(999_741)
        const session = Option.getOrThrow(yield* store.getNativeThreadSession(native.id, native.providerThreadId, "big" as ProviderInstance))
        expect(session.native.heldAtLeast).toBe(999_741)
        yield* store.recordNativeUsage(native.id, { usedTokens: 837 }, 700, now)
        expect(yield* held()).toBe(999_741)
        yield* store.updateNativeThread(native)
        expect(yield* held()).toBeUndefined()
      }).pipe(Effect.provide(layerOn(db))))

    // Sim scenario R with a 250-token prompt: the floor must grow with the native thread, or a stale report after the
    // rejection lets turn start plan below what the native thread holds by then.
    it.effect("recordNativeUsage's heldGrowth: raises a stored floor (none stays none), and a report at or above the raised floor moves it to the report, where a later lower report leaves it rising, and the provider's own compaction clears it", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        const now = yield* DateTime.now
        yield* store.insertThread(thread("thr_g", now))
        yield* store.insertProviderThread({
          id: "pth_g" as ProviderThreadId, threadId: "thr_g" as ThreadId, providerInstance: "big" as ProviderInstance, model: "m",
          contextWindow: 1_000_000, activeNativeThreadId: null, syncedRunSeq: 0, createdAt: now, updatedAt: now
        })
        const native = {
          id: "nat_g" as NativeThreadId, providerThreadId: "pth_g" as ProviderThreadId, generation: 1, nativeRef: "g", status: "active" as const,
          usage: { usedTokens: 837 }, estimatedTokens: 700, compactionsWithoutProgress: 0, createdAt: now, updatedAt: now
        }
        yield* store.insertNativeThread(native)
        const held = () => Effect.map(store.getNativeThread(native.id), (n) => Option.getOrThrow(n).heldAtLeast)
        yield* store.recordNativeUsage(native.id, { usedTokens: 837 }, 700, now, 46)
        expect(yield* held()).toBeUndefined()
        yield* store.updateNativeThread({ ...native, heldAtLeast: 999_705 })
        yield* store.recordNativeUsage(native.id, { usedTokens: 837 }, 700, now, 46)
        expect(yield* held()).toBe(999_751)
        yield* store.recordNativeUsage(native.id, null, 760, now, 49)
        expect(yield* held()).toBe(999_800)
        yield* store.recordNativeUsage(native.id, { usedTokens: 999_820 }, 870_000, now, 20)
        expect(yield* held()).toBe(999_820)
        // A report that falls (stale: sim seed 22) does not lower or clear it; the growth still raises it.
        yield* store.recordNativeUsage(native.id, { usedTokens: 1_542 }, 870_100, now, 30)
        expect(yield* held()).toBe(999_850)
        // The provider's own compaction during the turn (`compacted`) clears it, whatever the report says.
        yield* store.recordNativeUsage(native.id, { usedTokens: 2_000 }, 1_800, now, 30, true)
        expect(yield* held()).toBeUndefined()
      }).pipe(Effect.provide(layerOn(db))))

    it.effect("getRunWithAttemptCount: the run as getRun reads it, with listAttempts' length (only its own attempts); None for no run", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        const now = yield* DateTime.now
        yield* store.insertThread(thread("thr_c", now))
        yield* store.insertRun(run("run_1", "thr_c", 1, now))
        yield* store.insertRun(run("run_2", "thr_c", 2, now))
        const attempt = (runId: string, n: number) => ({
          id: `att_${runId}_${n}` as RunAttemptId,
          runId: runId as RunId,
          attempt: n,
          nativeThreadId: "nth_1" as NativeThreadId,
          status: "failed" as const,
          error: null,
          createdAt: now,
          updatedAt: now
        })
        const check = (runId: string) =>
          Effect.gen(function*() {
            const both = Option.getOrThrow(yield* store.getRunWithAttemptCount(runId as RunId))
            expect(both.run).toEqual(Option.getOrThrow(yield* store.getRun(runId as RunId)))
            expect(both.attempts).toBe((yield* store.listAttempts(runId as RunId)).length)
            return both.attempts
          })
        expect(yield* check("run_1")).toBe(0)
        yield* store.insertAttempt(attempt("run_1", 1))
        yield* store.insertAttempt(attempt("run_1", 2))
        yield* store.insertAttempt(attempt("run_2", 1))
        expect(yield* check("run_1")).toBe(2)
        expect(yield* check("run_2")).toBe(1)
        expect(yield* store.getRunWithAttemptCount("run_none" as RunId)).toEqual(Option.none())
      }).pipe(Effect.provide(layerOn(db))))

    it.effect("insertItemsAfterLast: the rows numbered after the thread's last item in one statement (first and later inserts, other threads apart)", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        const now = yield* DateTime.now
        yield* store.insertThread(thread("thr_i", now))
        yield* store.insertThread(thread("thr_j", now))
        const item = (id: string, threadId: string, text: string, patch: Partial<Item> = {}): Item => ({
          id: id as ItemId,
          threadId: threadId as ThreadId,
          runId: null,
          seq: 0,
          kind: "assistant_message",
          text,
          toolCallId: null,
          toolName: null,
          messageId: null,
          isError: false,
          toolCallState: null,
          tokens: 3,
          createdAt: now,
          ...patch
        })
        expect(yield* store.insertItemsAfterLast("thr_i" as ThreadId, [])).toBe(1)
        expect(yield* store.insertItemsAfterLast("thr_i" as ThreadId, [item("itm_1", "thr_i", "one"), item("itm_2", "thr_i", "two")])).toBe(1)
        expect(yield* store.insertItemsAfterLast("thr_j" as ThreadId, [item("itm_j", "thr_j", "other")])).toBe(1)
        expect(yield* store.insertItemsAfterLast("thr_i" as ThreadId, [
          item("itm_3", "thr_i", "three", { kind: "tool_result", isError: true, toolCallId: "call_1" as Item["toolCallId"], toolName: "bash", runId: "run_1" as RunId }),
          item("itm_4", "thr_i", "four"),
          item("itm_5", "thr_i", "five")
        ])).toBe(3)
        const stored = yield* store.listItems("thr_i" as ThreadId)
        expect(stored.map((i) => [i.id, i.seq, i.text, i.isError, i.toolCallId, i.runId])).toEqual([
          ["itm_1", 1, "one", false, null, null],
          ["itm_2", 2, "two", false, null, null],
          ["itm_3", 3, "three", true, "call_1", "run_1"],
          ["itm_4", 4, "four", false, null, null],
          ["itm_5", 5, "five", false, null, null]
        ])
        expect(yield* store.nextItemSeq("thr_i" as ThreadId)).toBe(6)
        expect((yield* store.listItems("thr_j" as ThreadId)).map((i) => i.seq)).toEqual([1])
      }).pipe(Effect.provide(layerOn(db))))

    it.effect("insertItemsAfterLast: 3,000 items at once (more parameters than one SQLite statement binds) all stored, in order, after the last", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        const now = yield* DateTime.now
        yield* store.insertThread(thread("thr_many", now))
        const item = (n: number): Item => ({
          id: `itm_${n}` as ItemId,
          threadId: "thr_many" as ThreadId,
          runId: null,
          seq: 0,
          kind: "user_message",
          text: `message ${n}`,
          toolCallId: null,
          toolName: null,
          messageId: `user@0.${n}`,
          isError: false,
          toolCallState: null,
          tokens: 2,
          createdAt: now
        })
        expect(yield* store.insertItemsAfterLast("thr_many" as ThreadId, [item(0)])).toBe(1)
        const many = Array.from({ length: 3_000 }, (_, i) => item(i + 1))
        expect(yield* store.insertItemsAfterLast("thr_many" as ThreadId, many)).toBe(2)
        const stored = yield* store.listItems("thr_many" as ThreadId)
        expect(stored.length).toBe(3_001)
        expect(stored.every((s, i) => s.seq === i + 1 && s.id === `itm_${i}` && s.text === `message ${i}`)).toBe(true)
        expect(yield* store.nextItemSeq("thr_many" as ThreadId)).toBe(3_002)
      }).pipe(Effect.provide(layerOn(db))))

    it.effect("getThreadForQueue: the active run and the next run seq as findActiveRun and nextRunSeq read them, for no run, ended runs only and unfinished ones; None for no thread", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        const now = yield* DateTime.now
        yield* store.insertThread(thread("thr_q", now))
        yield* store.insertThread(thread("thr_r", now))
        const check = (threadId: string) =>
          Effect.gen(function*() {
            const read = Option.getOrThrow(yield* store.getThreadForQueue(threadId as ThreadId))
            expect(read.active).toEqual(yield* store.findActiveRun(threadId as ThreadId))
            expect(read.nextSeq).toBe(yield* store.nextRunSeq(threadId as ThreadId))
            expect(read.thread).toEqual(Option.getOrThrow(yield* store.getThread(threadId as ThreadId)))
            return { active: read.active, nextSeq: read.nextSeq }
          })
        expect(yield* check("thr_q")).toEqual({ active: Option.none(), nextSeq: 1 })
        yield* store.insertRun({ ...run("run_q1", "thr_q", 1, now), status: "completed" })
        yield* store.insertRun({ ...run("run_r1", "thr_r", 1, now), status: "running" })
        expect(yield* check("thr_q")).toEqual({ active: Option.none(), nextSeq: 2 })
        yield* store.insertRun({ ...run("run_q2", "thr_q", 2, now), status: "running" })
        yield* store.insertRun({ ...run("run_q3", "thr_q", 3, now), status: "queued" })
        yield* store.insertRun({ ...run("run_q4", "thr_q", 4, now), status: "failed" })
        const found = yield* check("thr_q")
        expect(Option.map(found.active, (r) => r.id)).toEqual(Option.some("run_q2"))
        expect(found.nextSeq).toBe(5)
        expect(Option.map((yield* check("thr_r")).active, (r) => r.id)).toEqual(Option.some("run_r1"))
        expect(yield* store.getThreadForQueue("thr_none" as ThreadId)).toEqual(Option.none())
      }).pipe(Effect.provide(layerOn(db))))

    it.effect("listCoveredSourceRunIds: the source runs of handoffs toward the target that are open or settled (injected/inline) to the native thread, as a read of every handoff and its delivery finds them", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        const now = yield* DateTime.now
        yield* store.insertThread(thread("thr_c", now))
        const pth = (id: string) => ({
          id: id as ProviderThreadId, threadId: "thr_c" as ThreadId, providerInstance: id as ProviderInstance, model: "m",
          contextWindow: null, activeNativeThreadId: null, syncedRunSeq: 0, createdAt: now, updatedAt: now
        })
        yield* store.insertProviderThread(pth("pth_t"))
        yield* store.insertProviderThread(pth("pth_other"))
        for (const [generation, id] of ["nat_a", "nat_b"].entries()) {
          yield* store.insertNativeThread({
            id: id as NativeThreadId, providerThreadId: "pth_t" as ProviderThreadId, generation: generation + 1, nativeRef: id,
            status: id === "nat_a" ? "replaced" : "active",
            usage: null, estimatedTokens: 0, compactionsWithoutProgress: 0, createdAt: now, updatedAt: now
          })
        }
        // Each handoff: whether open, its target, its delivery to nat_a (status or none) and to nat_b.
        const cases: ReadonlyArray<readonly [string, boolean, string, DeliveryStatus | null, DeliveryStatus | null]> = [
          ["open_none", true, "pth_t", null, null],
          ["open_deferred", true, "pth_t", "deferred", null],
          ["closed_injected", false, "pth_t", "injected", null],
          ["closed_inline", false, "pth_t", "inline", "superseded"],
          ["closed_superseded", false, "pth_t", "superseded", "inline"],
          ["closed_pending", false, "pth_t", "pending", null],
          ["closed_none", false, "pth_t", null, "injected"],
          ["elsewhere", true, "pth_other", null, null]
        ]
        for (const [name, open, target, toA, toB] of cases) {
          yield* store.insertHandoff({
            id: `hof_${name}` as HandoffId, threadId: "thr_c" as ThreadId, kind: "switch", targetProviderThreadId: target as ProviderThreadId,
            sourceRunIds: [`run_${name}_1`, `run_${name}_2`] as Array<RunId>, itemIds: [`itm_${name}`] as Array<ItemId>, tokens: 1,
            omittedItemIds: [], open, createdAt: now, updatedAt: now
          })
          for (const [native, status] of [["nat_a", toA], ["nat_b", toB]] as const) {
            if (status === null) continue
            yield* store.insertDelivery({
              id: `dlv_${name}_${native}` as DeliveryId, handoffId: `hof_${name}` as HandoffId, nativeThreadId: native as NativeThreadId,
              status, mode: null, runId: null, deliveredItemIds: [], omittedItemIds: [], deliveredTokens: 0, deferCount: 0,
              lastDeferReason: null, createdAt: now, updatedAt: now
            })
          }
        }
        // The definition, read the long way: every handoff toward the target, and its delivery to the native thread.
        const expected = (native: NativeThreadId | null) =>
          Effect.gen(function*() {
            const out: Array<string> = []
            for (const h of yield* store.listHandoffsTo("pth_t" as ProviderThreadId)) {
              if (!h.open) {
                if (native === null) continue
                const d = yield* store.findDelivery(h.id, native)
                if (d._tag === "None" || (d.value.status !== "injected" && d.value.status !== "inline")) continue
              }
              out.push(...h.sourceRunIds)
            }
            return out.sort()
          })
        const runsOf = (...names: Array<string>) => names.flatMap((n) => [`run_${n}_1`, `run_${n}_2`]).sort()
        for (const native of ["nat_a", "nat_b", null] as const) {
          const got = [...(yield* store.listCoveredSourceRunIds("pth_t" as ProviderThreadId, native as NativeThreadId | null))].sort()
          expect(got).toEqual(yield* expected(native as NativeThreadId | null))
        }
        expect([...(yield* store.listCoveredSourceRunIds("pth_t" as ProviderThreadId, "nat_a" as NativeThreadId))].sort())
          .toEqual(runsOf("open_none", "open_deferred", "closed_injected", "closed_inline"))
        expect([...(yield* store.listCoveredSourceRunIds("pth_t" as ProviderThreadId, "nat_b" as NativeThreadId))].sort())
          .toEqual(runsOf("open_none", "open_deferred", "closed_superseded", "closed_none"))
        expect([...(yield* store.listCoveredSourceRunIds("pth_t" as ProviderThreadId, null))].sort()).toEqual(runsOf("open_none", "open_deferred"))
        expect(yield* store.listCoveredSourceRunIds("pth_none" as ProviderThreadId, null)).toEqual([])
      }).pipe(Effect.provide(layerOn(db))))

    it.effect("anyRunOnNativeThrough, listDeliveriesToNative, listDeliveriesOfOpenHandoffs: what an offload asks, as reads of every run, item and delivery of the thread find it", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        const now = yield* DateTime.now
        yield* store.insertThread(thread("thr_o", now))
        yield* store.insertThread(thread("thr_x", now))
        // Each run of thr_o: the native thread it ran on and how many items it has (in seq order, run by run).
        const runs: ReadonlyArray<readonly [string, string | null, number]> = [
          ["run_1", "nat_a", 2], ["run_2", "nat_b", 1], ["run_3", "nat_a", 1], ["run_4", null, 1], ["run_5", "nat_b", 1],
          ["run_6", "nat_a", 0], ["run_7", "nat_a", 1]
        ]
        const item = (id: string, threadId: string, runId: string | null): Item => ({
          id: id as ItemId, threadId: threadId as ThreadId, runId: runId as RunId | null, seq: 0, kind: "assistant_message",
          text: id, toolCallId: null, toolName: null, messageId: null, isError: false, toolCallState: null, tokens: 1, createdAt: now
        })
        for (const [seq, [id, native, items]] of runs.entries()) {
          yield* store.insertRun({ ...run(id, "thr_o", seq + 1, now), nativeThreadId: native as NativeThreadId | null })
          for (let k = 0; k < items; k++) yield* store.insertItemsAfterLast("thr_o" as ThreadId, [item(`itm_${id}_${k}`, "thr_o", id)])
          // A summary between run_3's and run_4's items (no run).
          if (id === "run_3") yield* store.insertItemsAfterLast("thr_o" as ThreadId, [item("itm_summary", "thr_o", null)])
        }
        // Another thread's run on nat_a, with an early item: never counted for thr_o.
        yield* store.insertRun({ ...run("run_x", "thr_x", 1, now), nativeThreadId: "nat_a" as NativeThreadId })
        yield* store.insertItemsAfterLast("thr_x" as ThreadId, [item("itm_x", "thr_x", "run_x")])
        const items = yield* store.listItems("thr_o" as ThreadId)
        const all = yield* store.listRuns("thr_o" as ThreadId)
        for (const native of ["nat_a", "nat_b", "nat_none"]) {
          for (let through = 0; through <= items.length + 1; through++) {
            for (const also of [[], ["run_6"], ["run_5", "run_x"]] as ReadonlyArray<ReadonlyArray<string>>) {
              const covered = new Set<string>([...items.flatMap((i) => i.seq <= through && i.runId !== null ? [i.runId] : []), ...also])
              const expected = all.some((r) => covered.has(r.id) && r.nativeThreadId === native)
              const got = yield* store.anyRunOnNativeThrough("thr_o" as ThreadId, native as NativeThreadId, through, also as ReadonlyArray<RunId>)
              expect([native, through, also, got]).toEqual([native, through, also, expected])
            }
          }
        }
        expect(yield* store.anyRunOnNativeThrough("thr_o" as ThreadId, "nat_a" as NativeThreadId, 1, [])).toBe(true)
        expect(yield* store.anyRunOnNativeThrough("thr_o" as ThreadId, "nat_b" as NativeThreadId, 2, [])).toBe(false)
        expect(yield* store.anyRunOnNativeThrough("thr_o" as ThreadId, "nat_a" as NativeThreadId, 0, ["run_6"] as Array<RunId>)).toBe(true)

        // Handoffs, open or not, with deliveries to nat_a and nat_b in every status.
        yield* store.insertProviderThread({
          id: "pth_o" as ProviderThreadId, threadId: "thr_o" as ThreadId, providerInstance: "p" as ProviderInstance, model: "m",
          contextWindow: null, activeNativeThreadId: null, syncedRunSeq: 0, createdAt: now, updatedAt: now
        })
        for (const [generation, id] of ["nat_a", "nat_b"].entries()) {
          yield* store.insertNativeThread({
            id: id as NativeThreadId, providerThreadId: "pth_o" as ProviderThreadId, generation: generation + 1, nativeRef: id,
            status: "active", usage: null, estimatedTokens: 0, compactionsWithoutProgress: 0, createdAt: now, updatedAt: now
          })
        }
        const statuses: ReadonlyArray<DeliveryStatus> = ["deferred", "pending", "injected", "inline", "superseded"]
        for (const open of [true, false]) {
          for (const [k, status] of statuses.entries()) {
            const h = `hof_${open ? "open" : "closed"}_${status}`
            yield* store.insertHandoff({
              id: h as HandoffId, threadId: "thr_o" as ThreadId, kind: "switch", targetProviderThreadId: "pth_o" as ProviderThreadId,
              sourceRunIds: [], itemIds: [], tokens: 1, omittedItemIds: [], open, createdAt: now, updatedAt: now
            })
            for (const [native, s] of [["nat_a", status], ["nat_b", statuses[(k + 2) % statuses.length]!]] as const) {
              yield* store.insertDelivery({
                id: `dlv_${h}_${native}` as DeliveryId, handoffId: h as HandoffId, nativeThreadId: native as NativeThreadId,
                status: s, mode: null, runId: null, deliveredItemIds: [], omittedItemIds: [], deliveredTokens: 0, deferCount: 0,
                lastDeferReason: null, createdAt: now, updatedAt: now
              })
            }
          }
        }
        const everyDelivery = yield* store.listDeliveriesOfThread("thr_o" as ThreadId)
        const ids = (ds: ReadonlyArray<{ readonly id: string }>) => ds.map((d) => d.id).sort()
        for (const native of ["nat_a", "nat_b"]) {
          for (const wanted of [["injected", "inline", "pending"], ["deferred"], []] as ReadonlyArray<ReadonlyArray<DeliveryStatus>>) {
            expect(ids(yield* store.listDeliveriesToNative(native as NativeThreadId, wanted)))
              .toEqual(ids(everyDelivery.filter((d) => d.nativeThreadId === native && wanted.includes(d.status))))
          }
        }
        const open = new Set<string>((yield* store.listHandoffs("thr_o" as ThreadId)).filter((h) => h.open).map((h) => h.id))
        expect(ids(yield* store.listDeliveriesOfOpenHandoffs("thr_o" as ThreadId))).toEqual(ids(everyDelivery.filter((d) => open.has(d.handoffId))))
        expect((yield* store.listDeliveriesOfOpenHandoffs("thr_o" as ThreadId)).length).toBe(10)
      }).pipe(Effect.provide(layerOn(db))))

    it.effect("insertNextRun: the run written as insertRun writes it, with the seq nextRunSeq reads (1 for a thread's first), its driver too", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        const now = yield* DateTime.now
        yield* store.insertThread(thread("thr_n", now))
        yield* store.insertThread(thread("thr_o", now))
        const { seq: _, ...draft } = run("run_n1", "thr_n", 0, now)
        const first = yield* store.insertNextRun(draft, "drv_1")
        expect(first).toEqual({ ...draft, seq: 1 })
        yield* store.insertRun(run("run_o1", "thr_o", 1, now))
        yield* store.insertRun(run("run_n2", "thr_n", 2, now))
        const third = yield* store.insertNextRun({ ...draft, id: "run_n3" as RunId, status: "running", failureCode: null }, null)
        expect(third.seq).toBe(3)
        expect(Option.getOrThrow(yield* store.getRun("run_n3" as RunId))).toEqual(third)
        expect(Option.getOrThrow(yield* store.getRun("run_n1" as RunId))).toEqual(first)
        expect((yield* store.runDrivers(["run_n1" as RunId, "run_n3" as RunId])).get("run_n1")).toBe("drv_1")
        expect((yield* store.runDrivers(["run_n1" as RunId, "run_n3" as RunId])).get("run_n3")).toBe(null)
        expect(yield* store.nextRunSeq("thr_n" as ThreadId)).toBe(4)
        expect((yield* store.insertNextRun({ ...draft, id: "run_o2" as RunId, threadId: "thr_o" as ThreadId })).seq).toBe(2)
      }).pipe(Effect.provide(layerOn(db))))
  })
}
