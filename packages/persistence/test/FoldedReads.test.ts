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
    it.effect("getThreadWithTools: the thread as getThread reads it, with the tools getThreadTools reads ([] for none); None for no thread", () =>
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
          const both = Option.getOrThrow(yield* store.getThreadWithTools(id as ThreadId))
          expect(both.thread).toEqual(Option.getOrThrow(yield* store.getThread(id as ThreadId)))
          expect(both.tools).toEqual(yield* store.getThreadTools(id as ThreadId))
        }
        expect(Option.getOrThrow(yield* store.getThreadWithTools("thr_a" as ThreadId)).tools.map((t) => t.name)).toEqual(["lookup", "noop"])
        expect(Option.getOrThrow(yield* store.getThreadWithTools("thr_b" as ThreadId)).tools).toEqual([])
        expect(yield* store.getThreadWithTools("thr_none" as ThreadId)).toEqual(Option.none())
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

    it.effect("findActiveRunWithNextSeq: findActiveRun and nextRunSeq as they read them, for no run, ended runs only and unfinished ones", () =>
      Effect.gen(function*() {
        const store = yield* ThreadStore
        const now = yield* DateTime.now
        yield* store.insertThread(thread("thr_q", now))
        yield* store.insertThread(thread("thr_r", now))
        const check = (threadId: string) =>
          Effect.gen(function*() {
            const both = yield* store.findActiveRunWithNextSeq(threadId as ThreadId)
            expect(both.active).toEqual(yield* store.findActiveRun(threadId as ThreadId))
            expect(both.nextSeq).toBe(yield* store.nextRunSeq(threadId as ThreadId))
            return both
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
        expect(yield* check("thr_none")).toEqual({ active: Option.none(), nextSeq: 1 })
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
