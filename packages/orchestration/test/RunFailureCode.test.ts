/**
 * Runs that do not complete carry a `failureCode` (read by code; `failureReason` is for people), on the run, in
 * the `SendResult` and in the `run.failed` / `run.interrupted` event.
 */
import { Commands, type CommandId, type RunId } from "@baton/contracts"
import { ScriptedProvider } from "@baton/providers"
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, FiberId, TestClock } from "effect"

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

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.effect("a user's interrupt wins over the provider's own \"interrupted\" recorded first: interrupted_by_user, not provider_interrupted", () => {
    // The turn waits until the provider is asked to stop, then ends with the provider's `interrupted` (as a model API
    // adapter's turn does when interrupted before the provider accepted the request). The provider's answer to the
    // interrupt call itself is slow (bounded by `interruptTimeoutMillis`), so the turn's end is recorded first, as
    // a tester saw over HTTP by chance.
    const started = Deferred.unsafeMake<RunId>(FiberId.none)
    const stop = Deferred.unsafeMake<void>(FiberId.none)
    const h = Harness.make([{
      name: "codex",
      window: 200_000,
      inject: true,
      faults: (c) => {
        if (c.operation === "startTurn" && c.call === 1) {
          Deferred.unsafeDone(started, Exit.succeed(c.runId as RunId))
          return ScriptedProvider.failAfterItems(0, "interrupted")
        }
        if (c.operation === "interrupt" && c.call === 1) {
          Deferred.unsafeDone(stop, Exit.void)
          return "ignore_interrupt"
        }
        return null
      }
    }], { config: { interruptTimeoutMillis: 5_000 } })
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue({ ...Harness.reply(50), hold: { afterItems: 0, gate: stop } })
      const sending = yield* Effect.fork(o.send(t, "hello"))
      const runId = yield* Deferred.await(started)
      const interrupting = yield* Effect.fork(o.service.interrupt(Commands.InterruptRun.make({ commandId: "cmd_int" as CommandId, threadId: t, runId })))
      // The turn ends (and is recorded) while the interrupt waits for the provider's answer.
      const sent = yield* Fiber.join(sending)
      expect([sent.status, sent.failureCode]).toEqual(["interrupted", "interrupted_by_user"])
      for (let i = 0; i < 20 && (yield* Fiber.poll(interrupting))._tag === "None"; i++) {
        yield* TestClock.adjust("1 second")
        yield* Effect.yieldNow()
      }
      const interrupted = yield* Fiber.join(interrupting)
      expect([interrupted.status, interrupted.failureCode]).toEqual(["interrupted", "interrupted_by_user"])
      const [run] = yield* o.store.listRuns(t)
      expect([run!.status, run!.stopPoint, run!.failureCode, run!.failureReason]).toEqual([
        "interrupted",
        "before_provider",
        "interrupted_by_user",
        "interrupted by the user (provider codex failed startTurn (interrupted): the turn failed after 0 item(s): the turn was interrupted)"
      ])
      const ended = (yield* o.store.listEvents(t)).filter((e) => e.type === "run.interrupted" || e.type === "run.failed")
      expect(ended.map((e) => [e.type, e.payload.code])).toEqual([["run.interrupted", "interrupted_by_user"]])
      expect(yield* o.check(t, h)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("two overlapping interrupts of one run: the later one given up first leaves the earlier one's code in force", () => {
    // The provider answers neither interrupt (each waits `interruptTimeoutMillis`). The second interrupt is given up
    // (its client went away) while the first still waits; the turn then ends with the provider's own "interrupted".
    // Before: the second's end removed the run's interrupt entry, so the turn's end was recorded provider_interrupted
    // and the first interrupt kept that ending.
    const started = Deferred.unsafeMake<RunId>(FiberId.none)
    const asked = [Deferred.unsafeMake<void>(FiberId.none), Deferred.unsafeMake<void>(FiberId.none)] as const
    const stop = Deferred.unsafeMake<void>(FiberId.none)
    const h = Harness.make([{
      name: "codex",
      window: 200_000,
      inject: true,
      faults: (c) => {
        if (c.operation === "startTurn" && c.call === 1) {
          Deferred.unsafeDone(started, Exit.succeed(c.runId as RunId))
          return ScriptedProvider.failAfterItems(0, "interrupted")
        }
        if (c.operation === "interrupt" && (c.call === 1 || c.call === 2)) {
          Deferred.unsafeDone(asked[c.call - 1]!, Exit.void)
          return "ignore_interrupt"
        }
        return null
      }
    }], { config: { interruptTimeoutMillis: 5_000 } })
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue({ ...Harness.reply(50), hold: { afterItems: 0, gate: stop } })
      const sending = yield* Effect.fork(o.send(t, "hello"))
      const runId = yield* Deferred.await(started)
      const interrupt = (commandId: string) => o.service.interrupt(Commands.InterruptRun.make({ commandId: commandId as CommandId, threadId: t, runId }))
      const first = yield* Effect.fork(interrupt("cmd_int_1"))
      yield* Deferred.await(asked[0])
      const second = yield* Effect.fork(interrupt("cmd_int_2"))
      yield* Deferred.await(asked[1])
      yield* Fiber.interrupt(second)
      // The turn ends with the provider's "interrupted" while the first interrupt still waits for the provider.
      yield* Deferred.succeed(stop, undefined)
      const sent = yield* Fiber.join(sending)
      expect([sent.status, sent.failureCode]).toEqual(["interrupted", "interrupted_by_user"])
      for (let i = 0; i < 20 && (yield* Fiber.poll(first))._tag === "None"; i++) {
        yield* TestClock.adjust("1 second")
        yield* Effect.yieldNow()
      }
      const interrupted = yield* Fiber.join(first)
      expect([interrupted.status, interrupted.failureCode]).toEqual(["interrupted", "interrupted_by_user"])
      const ended = (yield* o.store.listEvents(t)).filter((e) => e.type === "run.interrupted" || e.type === "run.failed")
      expect(ended.map((e) => [e.type, e.payload.code])).toEqual([["run.interrupted", "interrupted_by_user"]])
    }).pipe(Effect.provide(h.layer))
  })
})
