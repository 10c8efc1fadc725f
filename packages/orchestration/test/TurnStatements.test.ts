import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect, Option, Tracer } from "effect"

const ops = Harness.ops

/**
 * A tracer that records, while `recording.on` is set, each statement `@effect/sql` runs (`sql.execute` spans, by text)
 * and whether it ran inside a transaction, and counts the outermost transactions (`sql.transaction` spans).
 */
const recording = { on: false, statements: [] as Array<{ readonly text: string; readonly inTransaction: boolean }>, transactions: 0 }
const inTransaction = (parent: Option.Option<Tracer.AnySpan>): boolean => {
  let p = Option.getOrUndefined(parent)
  while (p !== undefined) {
    if (p._tag === "Span" && p.name === "sql.transaction") return true
    p = p._tag === "Span" ? Option.getOrUndefined(p.parent) : undefined
  }
  return false
}
const recordingTracer = Tracer.make({
  span: (name, parent, context, links, startTime, kind) => {
    const attributes = new Map<string, unknown>()
    const nested = inTransaction(parent)
    return {
      _tag: "Span", name, spanId: "s", traceId: "t", parent, context, status: { _tag: "Started", startTime },
      attributes, links: [...links], sampled: true, kind,
      end: () => {
        if (!recording.on) return
        if (name === "sql.execute") {
          recording.statements.push({ text: String(attributes.get("db.query.text") ?? "").replace(/\s+/g, " "), inTransaction: nested })
        } else if (name === "sql.transaction" && !nested) recording.transactions++
      },
      attribute: (key, value) => void attributes.set(key, value), event: () => {}, addLinks: () => {}
    }
  },
  context: (f) => f()
})

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  // Regression pin for the turn-start overhead (issue 15's performance line): a send on a thread that owes nothing
  // (the scripted provider streams its item in a chunk of its own: recorded in a unit of work of its own) ran 31
  // statements in 4 transactions plus one after them (the receipt's result). Removed: the receipt read before
  // its insert (INSERT ... ON CONFLICT DO NOTHING), the provider thread's read (joined to the thread's), turn start's
  // reads of pending deliveries and open handoffs (EXISTS in the native thread's read) and of the calibration (joined
  // to it), the replay window's update (known closed at turn start), and the receipt's completion in a statement of
  // its own (it joins the run's completion), and the queueing's read of the active run and next run seq (joined to
  // the thread's read). Any of them coming back fails this test. Then (issue 15, b48perf) on SQLite the thread's lock
  // statement (`lock_version`) of the two units of work that open with a write (the queueing's receipt insert, the
  // attempt's move to `running`): that write takes the database's write lock itself. 22 statements on SQLite; on
  // Postgres every unit of work still locks the thread's row first (24).
  it.effect("a send that owes nothing runs 22 statements on SQLite (24 on Postgres) in 4 transactions, none of the removed ones", () => {
    const h = Harness.make([{ name: "claude", window: 1_000_000, inject: false }])
    return Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("claude")
      // Two sends first: the native thread starts (their samples are too small to teach the calibration).
      for (const [i, usedTokens] of [1_000, 2_000].entries()) {
        h.script.enqueue(Harness.reply(20, { usedTokens, maxTokens: 1_000_000 }))
        expect((yield* o.send(threadId, `warm-up ${i}`)).status).toBe("completed")
      }
      const counts: Array<number> = []
      for (let i = 0; i < 3; i++) {
        h.script.enqueue(Harness.reply(20, { usedTokens: 2_500 + 500 * i, maxTokens: 1_000_000 }))
        recording.statements = []
        recording.transactions = 0
        recording.on = true
        const sent = yield* o.send(threadId, `step ${i}`)
        recording.on = false
        expect(sent.status).toBe("completed")
        const texts = recording.statements.map((s) => s.text)
        expect(texts.filter((t) => /SELECT \* FROM command_receipts/.test(t))).toEqual([])
        expect(texts.filter((t) => /SELECT \* FROM provider_threads WHERE id/.test(t))).toEqual([])
        expect(texts.filter((t) => /FROM handoff_deliveries WHERE native_thread_id = \S+ AND status = \S+ ORDER BY/.test(t))).toEqual([])
        expect(texts.filter((t) => /SELECT \* FROM handoffs WHERE target_provider_thread_id/.test(t))).toEqual([])
        expect(texts.filter((t) => /replay_window = 0/.test(t))).toEqual([])
        expect(texts.filter((t) => /^SELECT \(SELECT COALESCE\(MAX\(seq\), 0\) \+ 1 FROM runs/.test(t))).toEqual([])
        // Turn start reads the calibration with the native thread; the completion, whose sample is too small to teach
        // it, reads it again in its unit of work, without locking it or writing a row (on Postgres the locked read
        // inserted the identity row first, and made other threads' turns on the provider wait for this one).
        expect(recording.statements.filter((s) => /FROM provider_calibrations WHERE/.test(s.text)).map((s) => s.inTransaction)).toEqual([true])
        expect(texts.filter((t) => /provider_calibrations .*FOR UPDATE|INSERT INTO provider_calibrations/.test(t))).toEqual([])
        // The receipt's result is written once, inside the run's completion.
        expect(recording.statements.filter((s) => /UPDATE command_receipts SET result/.test(s.text)).map((s) => s.inTransaction)).toEqual([true])
        expect(recording.transactions).toBe(4)
        // The thread's lock: on Postgres first in every unit of work; on SQLite only in the two that may read before
        // their first write (the arrival of the streamed item, the outcome).
        expect(texts.filter((t) => (db === Harness.postgres ? /^SELECT id FROM threads WHERE id = \S+ FOR UPDATE$/ : /lock_version/).test(t)).length).toBe(db === Harness.postgres ? 4 : 2)
        counts.push(recording.statements.length)
      }
      expect(counts).toEqual(db === Harness.postgres ? [24, 24, 24] : [22, 22, 22])
    }).pipe(Effect.withTracer(recordingTracer), Effect.provide(h.layer))
  })

  // A quiet send whose usage teaches the calibration learns it from the row turn start read with the native thread:
  // one conditional write (`UPDATE … WHERE samples = <as read>`), no read under the lock and no upsert (they were two
  // statements). The locked read coming back fails this test.
  // Issue 15, the first turn start after a switch (helper hswitch): settling its inline delivery writes the status
  // alone, in one conditional statement. Before: the delivery re-read, then its row written whole again (its omitted
  // ids re-encoded and rewritten, as when it went pending): two statements and every id list once more.
  it.effect("the first turn after a switch settles its delivery in one statement, without rewriting its id lists", () => {
    const h = Harness.make([{ name: "claude", window: 1_000_000, inject: false }, { name: "codex", window: 1_000_000, inject: false }])
    return Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("claude")
      for (let r = 0; r < 10; r++) {
        h.script.enqueue(Harness.reply(20))
        expect((yield* o.send(threadId, `step ${r}`)).status).toBe("completed")
      }
      yield* o.switchTo(threadId, "codex")
      h.script.enqueue(Harness.reply(20))
      recording.statements = []
      recording.on = true
      const sent = yield* o.send(threadId, "after the switch")
      recording.on = false
      expect(sent.status).toBe("completed")
      expect(sent.turnStart?.mode).toBe("inline")
      const texts = recording.statements.map((s) => s.text)
      // The delivery: read once, written whole as it is made and goes pending, then settled by its status alone (no
      // second read, no third whole write).
      const shape = (t: string) =>
        /^SELECT \* FROM "?handoff_deliveries"?/.test(t)
          ? "read"
          : /omitted_item_ids/.test(t)
          ? "whole"
          : /^UPDATE handoff_deliveries SET status = \S+, updated_at = \S+ WHERE handoff_id = \S+ AND native_thread_id = \S+ AND status = 'pending' RETURNING \*$/.test(t)
          ? "settle"
          : t
      expect(texts.filter((t) => /handoff_deliveries/.test(t)).map(shape)).toEqual(["read", "whole", "whole", "settle"])
      const settled = (yield* o.store.listEvents(threadId)).filter((e) => e.type === "delivery.inlined")
      expect(settled).toHaveLength(1)
    }).pipe(Effect.provide(h.layer), Effect.withTracer(recordingTracer))
  })

  it.effect("a send that owes nothing and teaches the calibration writes it in one statement, without reading it again", () => {
    const h = Harness.make([{ name: "claude", window: 1_000_000, inject: false }])
    return Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("claude")
      for (const [i, usedTokens] of [1_000, 2_000].entries()) {
        h.script.enqueue(Harness.reply(20, { usedTokens, maxTokens: 1_000_000 }))
        expect((yield* o.send(threadId, `warm-up ${i}`)).status).toBe("completed")
      }
      const counts: Array<number> = []
      const samples: Array<number> = []
      for (let i = 0; i < 3; i++) {
        // About 400 tokens out, 500 more reported: a sample the policy takes (ratio about 1.2).
        h.script.enqueue(Harness.reply(400, { usedTokens: 2_500 + 500 * i, maxTokens: 1_000_000 }))
        recording.statements = []
        recording.transactions = 0
        recording.on = true
        const sent = yield* o.send(threadId, `step ${i}`)
        recording.on = false
        expect(sent.status).toBe("completed")
        const texts = recording.statements.map((s) => s.text)
        expect(texts.filter((t) => /FROM provider_calibrations WHERE/.test(t))).toEqual([])
        // The calibration's one write: the first sample inserts the row unless one appeared (none yet: the warm-ups'
        // samples were too small, and a rejected sample reads the row without locking it), later ones update it where
        // its sample count is still as read.
        const writes = recording.statements.filter((s) => /(INSERT INTO|UPDATE) provider_calibrations/.test(s.text))
        expect(writes.map((s) => s.inTransaction)).toEqual([true])
        expect(writes[0]!.text).toMatch(/ON CONFLICT \(provider_instance\) DO NOTHING RETURNING|WHERE provider_instance = \S+ AND samples = \S+ RETURNING/)
        expect(recording.transactions).toBe(4)
        counts.push(recording.statements.length)
        const events = yield* o.store.listEvents(threadId)
        samples.push(events.filter((e) => e.type === "calibration.updated").length)
      }
      // Each send's sample was learned (one calibration.updated each).
      expect(samples[1]! - samples[0]!).toBe(1)
      expect(samples[2]! - samples[1]!).toBe(1)
      expect(counts).toEqual(db === Harness.postgres ? [24, 24, 24] : [22, 22, 22])
    }).pipe(Effect.withTracer(recordingTracer), Effect.provide(h.layer))
  })
})
