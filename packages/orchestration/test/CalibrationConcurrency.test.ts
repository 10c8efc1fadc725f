/**
 * Two threads' turns on one provider learn its calibration at the same time: each accepted sample is kept (the row
 * is read under a lock in the turn's unit of work). Regression: on Postgres the read-modify-write lost samples.
 */
import type { ProviderInstance } from "@baton/contracts"
import { ProviderCalibration } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

describe.each(Harness.dialects)("calibration under concurrency on %s", (_label, db) => {
  it.live("6 threads x 4 turns on one provider at once: the stored sample count equals the samples accepted", () => {
    const h = Harness.make([{ name: "codex", window: 350_000, inject: true, tokenScale: 1.15 }], { db })
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const threads = yield* Effect.forEach([1, 2, 3, 4, 5, 6], () => o.create("codex"))
      for (let i = 0; i < 24; i++) h.script.enqueue(Harness.reply(2_000))
      yield* Effect.forEach(threads, (t) =>
        Effect.forEach([0, 1, 2, 3], (i) => o.send(t, `step ${i}: ${Harness.words(300)}`), { discard: true }),
        { concurrency: "unbounded", discard: true })
      const updates = (yield* Effect.forEach(threads, (t) => o.store.listEvents(t))).flat()
        .filter((e) => e.type === "calibration.updated")
      const stored = yield* Effect.flatMap(ProviderCalibration.ProviderCalibration, (c) => c.current("codex" as ProviderInstance))
      expect(updates.length).toBeGreaterThan(6)
      expect(stored.samples).toBe(updates.length)
    }).pipe(Effect.provide(h.layer))
  })
})
