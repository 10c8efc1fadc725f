/**
 * Runs that do not complete carry a `failureCode` (read by code; `failureReason` is for people), on the run, in
 * the `SendResult` and in the `run.failed` / `run.interrupted` event.
 */
import { Commands, type CommandId } from "@baton/contracts"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

const ops = Harness.ops

describe("run failure codes", () => {
  it.effect("a provider that refuses the turn: failed, provider_refused, before the provider", () => {
    const h = Harness.make([{
      name: "codex",
      window: 200_000,
      inject: true,
      faults: (c) => (c.operation === "startTurn" && c.call === 1 ? "refuse" : null)
    }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      const r = yield* o.send(t, "hello")
      expect([r.status, r.failureCode]).toEqual(["failed", "provider_refused"])
      const [run] = yield* o.store.listRuns(t)
      expect([run!.failureCode, run!.stopPoint]).toEqual(["provider_refused", "before_provider"])
      const failed = (yield* o.store.listEvents(t)).filter((e) => e.type === "run.failed")
      expect(failed.map((e) => e.payload.code)).toEqual(["provider_refused"])
      expect(yield* o.check(t, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.live("interrupted before the provider started: interrupted_by_user; a queued run at restart: process_restarted", () =>
    Harness.withDbFile((file) => {
      const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db: file })
      return Effect.gen(function*() {
        const { t, queued } = yield* Effect.gen(function*() {
          const o = yield* ops
          const t = yield* o.create("codex")
          const interrupted = yield* o.interruptBeforeStart(t, "first")
          expect([interrupted.status, interrupted.failureCode]).toEqual(["interrupted", "interrupted_by_user"])
          const queued = yield* o.service.enqueueMessage(Commands.SendMessage.make({ commandId: "cmd_q" as CommandId, threadId: t, text: "second" }))
          // This incarnation is alive: its own queued run is not recovery's to end.
          expect(yield* o.service.recover()).toEqual([])
          return { t, queued }
        }).pipe(Effect.provide(h.layer))
        // A restart (the first incarnation's Layer is released): its queued run is ended.
        yield* Effect.gen(function*() {
          const o = yield* ops
          const ended = yield* o.service.recover()
          expect(ended.map((r) => [r.id, r.status, r.failureCode])).toEqual([[queued.id, "interrupted", "process_restarted"]])
          expect((yield* o.store.listRuns(t)).map((r) => r.failureCode)).toEqual(["interrupted_by_user", "process_restarted"])
        }).pipe(Effect.provide(Harness.makeLayer(Object.values(h.providers), h.counter, file, {}, "p2_")))
      })
    }))
})
