/**
 * Crash injection without touching orchestration code. Every durable step of the orchestrator passes through a
 * `Steps.point`: each `ThreadStore` write (insert, update, append, ...) and each provider call, before and after it
 * (after it: the provider did the work but the process never heard back). The simulation arms `Steps` per
 * operation with the step at which the process dies (a `SimulatedCrash` defect: nothing in the orchestrator
 * catches defects, a transaction in progress rolls back, and the runtime is then dropped) and the step at which the
 * user's interrupt arrives.
 */
import type { ProviderError } from "@baton/contracts"
import { ThreadStore } from "@baton/persistence"
import type { ProviderAdapter } from "@baton/providers"
import { SqlClient } from "@effect/sql"
import { Data, Effect, Layer, Stream } from "effect"

/** The defect a planned crash dies with. */
export class SimulatedCrash extends Data.TaggedError("SimulatedCrash")<{ readonly step: number; readonly site: string }> {}

/** Store methods that write: every other method reads and is not a durable step. */
const writeMethod = /^(insert|update|append|delete|upsert|put|set|mark|record|write|save)/

export interface StepPlan {
  readonly crashAt: number | null
  readonly interruptAt: number | null
  /** The user's interrupt: runs at the step where it lands, with step counting paused. */
  readonly onInterrupt: Effect.Effect<void> | null
}

/** Counts the durable steps of one operation and fires its planned crash and interrupt. */
export class Steps {
  private counting = false
  private plan: StepPlan = { crashAt: null, interruptAt: null, onInterrupt: null }
  private count = 0
  /** The sites passed in the current operation, in order (for the trace and crash-point coverage). */
  sites: Array<string> = []
  crashed: { readonly step: number; readonly site: string } | null = null
  interruptLanded: string | null = null

  arm(plan: StepPlan) {
    this.plan = plan
    this.count = 0
    this.sites = []
    this.crashed = null
    this.interruptLanded = null
    this.counting = true
  }

  disarm() {
    this.counting = false
  }

  get steps() {
    return this.count
  }

  /** A durable step at `site`: dies here if the crash is planned here; lets a due interrupt in if outside a transaction. */
  point(site: string): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (!this.counting) return Effect.void
      const step = ++this.count
      this.sites.push(site)
      if (this.plan.crashAt === step) {
        this.counting = false
        this.crashed = { step, site }
        return Effect.die(new SimulatedCrash({ step, site }))
      }
      const hook = this.plan.onInterrupt
      if (hook === null || this.plan.interruptAt === null || step < this.plan.interruptAt) return Effect.void
      // A concurrent command cannot run inside this operation's transaction: the interrupt waits for the next
      // step outside one (SQLite serialises writers).
      return Effect.flatMap(Effect.serviceOption(SqlClient.TransactionConnection), (tx) => {
        if (tx._tag === "Some") return Effect.void
        this.plan = { ...this.plan, interruptAt: null }
        this.interruptLanded = site
        this.counting = false
        return Effect.ensuring(hook, Effect.sync(() => void (this.counting = this.crashed === null)))
      })
    })
  }
}

type AnyMethod = (...args: ReadonlyArray<unknown>) => Effect.Effect<unknown, unknown, unknown>

/** `ThreadStore` whose write methods pass a durable step first. Reads are untouched. */
export const wrapStore = (real: ThreadStore, steps: Steps): ThreadStore => {
  const wrapped: Record<string, unknown> = {}
  for (const [name, value] of Object.entries(real)) {
    if (typeof value !== "function" || !writeMethod.test(name)) {
      wrapped[name] = value
      continue
    }
    const method = value as AnyMethod
    // One forwarder for every write method cannot name each method's error and requirements, so they are `unknown`
    // here; the object is typed as the store's shape again when handed to `ThreadStore.make`.
    // @effect-diagnostics-next-line anyUnknownInErrorContext:off
    wrapped[name] = (...args: ReadonlyArray<unknown>) => Effect.zipRight(steps.point(`store.${name}`), method(...args))
  }
  return ThreadStore.make(wrapped as unknown as Parameters<typeof ThreadStore.make>[0])
}

/** A Layer of `ThreadStore` that is the real one (from `ThreadStore.Default`) with crash points on every write. */
export const storeLayer = (steps: Steps) =>
  Layer.effect(ThreadStore, Effect.map(ThreadStore, (real) => wrapStore(real, steps))).pipe(Layer.provide(ThreadStore.Default))

/**
 * An adapter whose provider calls pass a durable step before and after the call. The wrapped adapter (the external
 * provider) is kept across restarts; only the orchestrator is rebuilt.
 */
export const wrapAdapter = (
  adapter: ProviderAdapter.ProviderAdapterShape,
  steps: Steps
): ProviderAdapter.ProviderAdapterShape => {
  const around = <A, E>(operation: string, call: Effect.Effect<A, E>) =>
    Effect.gen(function*() {
      yield* steps.point(`before provider.${operation}`)
      const exit = yield* Effect.exit(call)
      yield* steps.point(`after provider.${operation}`)
      return yield* exit
    })
  /**
   * A turn streams: "before" when it starts; "after" once the provider has finished it, just before the process
   * hears of its end (`turn_ended`, the stream's end or its failure). The items in between pass through: recording
   * each is a store write, so each has its own crash points.
   */
  const aroundTurn = (turn: Stream.Stream<ProviderAdapter.TurnEvent, ProviderError>) => {
    let heard = false
    const after = Effect.suspend(() => {
      if (heard) return Effect.void
      heard = true
      return steps.point("after provider.startTurn")
    })
    return Stream.unwrap(Effect.as(
      steps.point("before provider.startTurn"),
      Stream.concat(
        turn.pipe(
          Stream.mapEffect((e): Effect.Effect<ProviderAdapter.TurnEvent> => e._tag === "turn_ended" ? Effect.as(after, e) : Effect.succeed(e)),
          Stream.catchAll((e): Stream.Stream<ProviderAdapter.TurnEvent, ProviderError> => Stream.unwrap(Effect.as(after, Stream.fail(e))))
        ),
        Stream.execute(after)
      )
    ))
  }
  const { compactThread, injectHistory, readThread } = adapter
  const wrapped: ProviderAdapter.ProviderAdapterShape = {
    ...adapter,
    startThread: () => around("startThread", adapter.startThread()),
    resumeThread: (nativeRef) => around("resumeThread", adapter.resumeThread(nativeRef)),
    startTurn: (input) => aroundTurn(adapter.startTurn(input)),
    interrupt: (nativeRef) => around("interrupt", adapter.interrupt(nativeRef)),
    ...(injectHistory === undefined ? {} : { injectHistory: (input) => around("injectHistory", injectHistory(input)) }),
    ...(compactThread === undefined ? {} : { compactThread: (nativeRef) => around("compactThread", compactThread(nativeRef)) }),
    ...(readThread === undefined ? {} : { readThread: (nativeRef) => around("readThread", readThread(nativeRef)) })
  }
  // The model and window are read from the adapter each time: a scripted instance reconfigured between restarts
  // (`ScriptedProvider.reconfigure`) advertises its new ones.
  return Object.defineProperties(wrapped, {
    model: { get: () => adapter.model, enumerable: true, configurable: true },
    modelContextWindow: { get: () => adapter.modelContextWindow, enumerable: true, configurable: true }
  })
}
