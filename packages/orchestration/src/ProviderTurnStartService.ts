/**
 * ProviderTurnStartService: decides, at the start of a run on provider thread P, what history P's native thread
 * still owes the model, and prepares it (docs/design.md "Turn start", steps 1-4):
 *
 * 1. ensure P has a native thread; a native thread with an uncertain (`pending`) delivery is not trusted and is
 *    replaced (generation + 1) with a `replacement` handoff covering the whole history;
 * 2. missed-run recovery: runs on P since its watermark that the provider never saw are owed, reusing a deferred
 *    handoff rather than allocating a new one;
 * 3. budget from P's context usage on *this* native thread (never another's), with Baton's estimates scaled by
 *    the provider instance's tokenizer calibration (`ProviderCalibration`);
 * 4. select under the budget (in the provider's units) and deliver natively (`injectHistory`) or prepare inline text; what does not fit (a
 *    budget below the useful minimum) stays `deferred` and the prompt goes out unchanged.
 *
 * It does not start the provider turn itself (ThreadService does, then settles inline deliveries).
 */
import { type HandoffDelivery, type Item, type NativeThread, type ProviderThread, type Run, type TurnStartReport } from "@baton/contracts"
import { Budget, Calibration, Render, TokenCounter } from "@baton/context"
import { type ProviderCalibration as StoredCalibration, ThreadStore, UnitOfWork } from "@baton/persistence"
import type { ProviderAdapter } from "@baton/providers"
import { DateTime, Effect, Option } from "effect"
import { ContextHandoffDelivery, type OwedHandoff } from "./ContextHandoffDelivery.js"
import { DriverRegistry } from "./DriverRegistry.js"
import { IdGenerator } from "./IdGenerator.js"
import { ItemLog } from "./ItemLog.js"
import { recordedToolResults } from "./TurnStream.js"
import * as UsageSanity from "./UsageSanity.js"
import { OrchestratorConfig } from "./OrchestratorConfig.js"
import { ProviderCalibration, type SampleBase } from "./ProviderCalibration.js"
import * as KnownUsage from "./internal/KnownUsage.js"
import * as Span from "./internal/Span.js"

/** What turn start decided, for the caller and for the replay's per-run line (the schema lives in contracts). */
export { TurnStartReport } from "@baton/contracts"

export interface TurnStartPlan {
  readonly native: NativeThread
  readonly providerThread: ProviderThread
  /** Rendered history to place before the prompt (inline mode), else `null`. */
  readonly inlineHistory: string | null
  /** Baton tokens of `inlineHistory` (0 when `null`), counted once at turn start. */
  readonly inlineTokens: number
  /** Deliveries written `pending` for inline mode; settle them once the provider accepted the turn. */
  readonly inlineDeliveries: ReadonlyArray<HandoffDelivery>
  readonly report: TurnStartReport
  /** Baton tokens of the prompt (the budget's `request` is in the provider's units). */
  readonly requestTokens: number
  /** Where this turn's calibration sample starts; `null`: the native thread has no trusted report, no sample. */
  readonly sampleBase: SampleBase | null
  /**
   * The native thread's replay window is known closed: turn start read it closed on the native thread this driver
   * already held the session of (no resume since), so the turn's output cannot be a replay and TurnStream does not
   * take the window (one statement less per turn). Absent or `false`: unknown, the window is taken.
   */
  readonly replayWindowClosed?: boolean
  /**
   * The provider's calibration as turn start read it with the native thread (not locked; `None`: no row), when the
   * plan's ratio came from it. The completion's sample is learned from it with one conditional write
   * (`ProviderCalibration.learn`'s `seen`), which falls back to the locked read when the row moved since. Absent:
   * read under the lock.
   */
  readonly calibrationSeen?: Option.Option<StoredCalibration>
}

export class ProviderTurnStartService extends Effect.Service<ProviderTurnStartService>()(
  "@baton/orchestration/ProviderTurnStartService",
  {
    effect: Effect.gen(function*() {
      const uow = yield* UnitOfWork
      const store = yield* ThreadStore
      const delivery = yield* ContextHandoffDelivery
      const ids = yield* IdGenerator
      const counter = yield* TokenCounter.TokenCounter
      const config = yield* OrchestratorConfig
      const itemLog = yield* ItemLog
      // Which driver holds each native thread's provider session is recorded in the database: a native thread this
      // driver did not start or resume is resumed (`resumeThread`) before its first use, and only the first turn
      // after that may replay the session's history (see `takeReplayWindow`).
      const driver = yield* DriverRegistry
      const calibration = yield* ProviderCalibration

      /**
       * Reconciles uncertain (`pending`) deliveries by reading the native thread back: an injection the thread holds
       * settles `injected`, inline history whose turn it holds settles `inline`, anything else returns to
       * `deferred`. Returns `false` (nothing written) when the adapter cannot read threads or the read fails, so
       * the caller falls back to a replacement native thread. The read-back usage is stored only when `UsageSanity`
       * trusts it against `providerThread`'s window (the same windows every other usage report is checked against).
       *
       * What the native thread is found to hold also enters Baton's estimate of it (`estimatedTokens`, Baton's
       * count), as an acknowledged injection's does: a trusted read-back usage sets it (at the calibration in force),
       * else the settled deliveries' tokens are added and the stored usage report (from before them) is cleared. The estimate is what the budget and the known-full check use
       * once a turn brings no usage report; a settled delivery left out of it made Baton believe a native thread
       * held 15,355 tokens less than it did, and turn start injected history up to the window (sim seed 220048).
       */
      const reconcile = Span.fn("ProviderTurnStartService.reconcile")(function*(
        threadId: Run["threadId"],
        providerThread: ProviderThread,
        native: NativeThread,
        uncertain: ReadonlyArray<HandoffDelivery>,
        adapter: ProviderAdapter.ProviderAdapterShape
      ) {
        if (adapter.readThread === undefined) return false
        const read = yield* Effect.either(adapter.readThread(native.nativeRef))
        if (read._tag === "Left") return false
        const deliveryIds = new Set(read.right.deliveryIds)
        const runIds = new Set(read.right.runIds)
        yield* uow.thread(threadId, "ProviderTurnStartService.reconcile")(Effect.gen(function*() {
          let heldTokens = 0
          for (const d of uncertain) {
            const held = d.mode === "injected" ? deliveryIds.has(d.id) : d.runId !== null && runIds.has(d.runId)
            if (held) {
              const settled = yield* delivery.markSettled(threadId, [d], d.mode === "inline" ? "inline" : "injected")
              heldTokens += settled.reduce((n, s) => n + s.deliveredTokens, 0)
            } else yield* delivery.revertToDeferred(threadId, [d], "reconciled: the native thread does not hold it")
          }
          const now = yield* DateTime.now
          const checked = UsageSanity.check(read.right.usage, providerThread.contextWindow, config.budget.defaultWindow).usage
          if (checked === null && heldTokens === 0) return
          // As stored now (another command may have written it since the caller read it), under this unit's lock.
          const stored = Option.getOrElse(yield* store.getNativeThread(native.id), () => native)
          const estimatedTokens = checked !== null
            ? Calibration.toRaw((yield* calibration.current(providerThread.providerInstance)).ratio, checked.usedTokens)
            : stored.estimatedTokens + heldTokens
          // Without a trusted read-back (and a delivery settled here), an earlier report no longer describes the
          // native thread: it is dropped, so the budget and the known-full check (which take a report over
          // the estimate) use the estimate that counts it (review r24: the turn start planned with the old report).
          yield* store.updateNativeThread({ ...stored, usage: checked, estimatedTokens, updatedAt: now })
        }))
        return true
      })

      /** Records a native thread the provider just started (generation = previous + 1) and makes it active. */
      const recordNative = Span.fn("ProviderTurnStartService.recordNative")(function*(
        providerThread: ProviderThread,
        previous: NativeThread | null,
        nativeRef: string
      ) {
        const now = yield* DateTime.now
        const native: NativeThread = {
          id: ids.next("nat") as NativeThread["id"],
          providerThreadId: providerThread.id,
          generation: (previous?.generation ?? 0) + 1,
          nativeRef,
          status: "active",
          usage: null,
          estimatedTokens: 0,
          compactionsWithoutProgress: 0,
          createdAt: now,
          updatedAt: now
        }
        yield* store.insertNativeThread(native)
        yield* store.holdSession(native.id, driver.driverId, false)
        const updated: ProviderThread = { ...providerThread, activeNativeThreadId: native.id, updatedAt: now }
        yield* store.updateProviderThread(updated)
        yield* store.appendEvent({ threadId: providerThread.threadId, type: "native_thread.started", payload: {
          nativeThreadId: native.id,
          providerThreadId: providerThread.id,
          generation: native.generation,
          replaces: previous?.id ?? null
        } })
        return { native, providerThread: updated }
      })

      /** Replaces an untrusted native thread: supersede its open deliveries, owe the whole history to the new one. */
      const replaceNative = Span.fn("ProviderTurnStartService.replaceNative")(function*(
        run: Run,
        providerThread: ProviderThread,
        old: NativeThread,
        nativeRef: string,
        reason: string
      ) {
        const now = yield* DateTime.now
        yield* store.updateNativeThread({ ...old, status: "replaced", updatedAt: now })
        yield* store.appendEvent({ threadId: run.threadId, type: "native_thread.replaced", payload: { nativeThreadId: old.id, reason } })
        yield* delivery.supersedeForReplacement(run.threadId, providerThread, old, reason)
        const started = yield* recordNative(providerThread, old, nativeRef)
        const earlier = yield* store.listRunsBetween(run.threadId, 0, run.seq)
        // Read once: the handoff is made of them, and this turn start's plan selects from them (`known`).
        const history = earlier.length === 0 ? [] : yield* store.listItemsOfRuns(earlier.map((r) => r.id))
        yield* delivery.createHandoff(run.threadId, "replacement", started.providerThread, earlier, history)
        const synced: ProviderThread = { ...started.providerThread, syncedRunSeq: run.seq - 1, updatedAt: now }
        yield* store.updateProviderThread(synced)
        return { native: started.native, providerThread: synced, history }
      })

      /**
       * Why `native` is known to be too full for `prompt`, or `null`: its last trusted usage report — or, when the
       * latest turn brought none (a missing or untrusted report), Baton's own estimate of what it holds, calibrated,
       * which counts from that report on — plus the prompt's calibrated size exceeds the window (invariant 1: a
       * request Baton knows would overflow is not sent; the turn goes to a replacement native thread, which is owed
       * the history under a fresh budget). A missing report used to make Baton forget a thread reported 97% full
       * (simulator seed 303). Reads the calibration only when even a 3x ratio could not fit
       * (`Calibration.defaultPolicy.maxRatio`).
       */
      const knownFull = (native: NativeThread, providerThread: ProviderThread, promptTokens: number) =>
        Effect.gen(function*() {
          const window = Math.min(providerThread.contextWindow ?? Infinity, native.usage?.maxTokens ?? Infinity)
          if (!Number.isFinite(window)) return null
          // A floor a rejection proved (`heldAtLeast`) counts over a lower report: the report was stale (sim seed 9101).
          const floor = native.heldAtLeast ?? 0
          if (native.usage !== null) {
            const used = Math.max(native.usage.usedTokens, floor)
            const over = yield* overflowing(used, promptTokens, window, providerThread.providerInstance)
            return over === null ? null : used > native.usage.usedTokens
              ? `the provider rejected a request that shows it holds at least ${used} of its ${window}-token window ` +
                `(its last report said ${native.usage.usedTokens}): the prompt (about ${over.tokens} tokens) does not fit`
              : `the provider reported ${native.usage.usedTokens} of its ${window}-token window used: the prompt (about ${over.tokens} tokens) does not fit`
          }
          const maxRatio = Calibration.defaultPolicy.maxRatio
          if ((native.estimatedTokens + promptTokens) * maxRatio <= window && floor + promptTokens * maxRatio <= window) return null
          // One calibration read for both figures (`overflowing` would read it again).
          const { ratio } = yield* calibration.current(providerThread.providerInstance)
          const used = Math.max(Calibration.apply(ratio, native.estimatedTokens), floor)
          const tokens = Calibration.apply(ratio, promptTokens)
          return used + tokens <= window ? null :
            `Baton estimates ${used} of its ${window}-token window used (no usage report since the last one): the prompt (about ${tokens} tokens) does not fit`
        })

      /**
       * The prompt's calibrated size when `usedTokens` plus it exceeds `window` (provider tokens), else `null`.
       * `promptTokens` is Baton's count; the calibration is read only when even the largest ratio
       * (`Calibration.defaultPolicy.maxRatio`) could not fit, so a turn far from the window reads nothing.
       */
      const overflowing = (usedTokens: number, promptTokens: number, window: number, instance: ProviderThread["providerInstance"]) =>
        Effect.gen(function*() {
          if (usedTokens + promptTokens * Calibration.defaultPolicy.maxRatio <= window) return null
          const { ratio } = yield* calibration.current(instance)
          const tokens = Calibration.apply(ratio, promptTokens)
          return usedTokens + tokens <= window ? null : { tokens, ratio }
        })

      /**
       * Why a prompt of `promptTokens` (Baton's count) cannot be sent to `providerThread` at all, or `null`: its
       * calibrated size exceeds the model's window, so no native thread, however empty, can take it.
       */
      const promptTooLarge = (promptTokens: number, providerThread: ProviderThread) =>
        Effect.gen(function*() {
          const window = providerThread.contextWindow
          if (window === null) return null
          const over = yield* overflowing(0, promptTokens, window, providerThread.providerInstance)
          return over === null ? null : `the prompt alone is about ${over.tokens} tokens of ${providerThread.providerInstance} ` +
            `(${promptTokens} counted x${over.ratio.toFixed(3)}), more than its ${window}-token context window: it was not sent. ` +
            `Shorten it, or switch the thread to a provider with a larger window`
        })

      /**
       * Prepares the turn of `run` on `providerThread`. Provider calls (`startThread`, `injectHistory`) are made
       * outside transactions; the bookkeeping between them is one transaction each, so the `pending` intent is
       * durable before `injectHistory` is called and the outcome is written after it returns.
       */
      const prepareOnce = Span.fn("ProviderTurnStartService.prepare")(function*(
        run: Run,
        providerThreadIn: ProviderThread,
        adapter: ProviderAdapter.ProviderAdapterShape,
        options: {
          /**
           * The retry after an overflow that carried history: the native thread's usage is the recovery's own
           * "full" marker (to defer everything), not a report, and the prompt goes alone to the same native thread.
           */
          readonly retryWithoutHistory?: boolean
          /**
           * The retry after an overflow of a request whose history was injected: the replacement native thread is
           * owed the history, which is deferred for this turn (the prompt goes alone, with a pointer), so the retry
           * cannot overflow the same way. Later turns deliver it under their budgets.
           */
          readonly deferHistory?: boolean
          /** Baton's count of the run's prompt, when the caller has it (the prompt is counted once per run). */
          readonly promptTokens?: number
          /** Internal: a second pass after a rejected injection showed the native thread full (see `prepare`). */
          readonly afterRejection?: boolean
        } = {}
      ) {
        const requestTokens = options.promptTokens ?? counter.count(run.prompt)
        // Is the active native thread usable? A native thread with an uncertain delivery is not trusted.
        let current: NativeThread | null = null
        let replaceReason: string | null = null
        // The active native thread's replay window was read closed, its session this driver's (see `TurnStartPlan`).
        let replayClosed = false
        // Whether a handoff toward the provider thread was open, as read with the native thread (same statement);
        // `null`: unknown (not read, or reconciling may have closed some since): read below when it matters.
        let openHandoffs: boolean | null = null
        // The provider's calibration as read with the native thread (same statement): the quiet plan's ratio.
        let calibrationRead: Option.Option<StoredCalibration> | null = null
        if (providerThreadIn.activeNativeThreadId !== null) {
          /** Why `native` is known too full for this turn (logged), or `null`; never on a retry without history. */
          const fullReason = (native: NativeThread) =>
            options.retryWithoutHistory === true || config.mutations.has("ignore_known_full")
              ? Effect.succeed<string | null>(null)
              : Effect.tap(knownFull(native, providerThreadIn, requestTokens), (reason) =>
                reason === null ? Effect.void : Effect.logWarning(`native thread ${native.id} is full (${reason}): the turn starts a replacement`))
          const found = yield* store.getNativeThreadSession(providerThreadIn.activeNativeThreadId, providerThreadIn.id, providerThreadIn.providerInstance)
          openHandoffs = found._tag === "Some" && found.value.hasOpenHandoffs
          if (found._tag === "Some") calibrationRead = found.value.calibration
          if (found._tag === "Some" && found.value.native.status === "replaced") {
            current = found.value.native
            replaceReason = "the native thread was marked replaced (lost by the provider, or no longer trusted after an interrupt, timeout or restart)"
          } else if (found._tag === "Some") {
            current = found.value.native
            replayClosed = found.value.sessionDriverId === driver.driverId && !found.value.replayWindow
            if (found.value.sessionDriverId !== driver.driverId) {
              // First use in this process (after a restart): resume the provider's session. A provider that no longer
              // has it gets a replacement; any other failure fails the turn before the provider read the prompt.
              const resumed = yield* Effect.either(adapter.resumeThread(current.nativeRef))
              if (resumed._tag === "Left" && resumed.left.code !== "thread_not_found") return yield* resumed.left
              if (resumed._tag === "Left") replaceReason = "the provider no longer has the native thread (resume failed)"
              // The replay window opens only where the provider's resumed session may replay (`resumeMayReplay`).
              else {
                const mayReplay = adapter.resumeMayReplay === true || config.mutations.has("resume_opens_replay_window")
                yield* uow.thread(run.threadId, "ProviderTurnStartService.resumed")(store.holdSession(current.id, driver.driverId, mayReplay))
                replayClosed = !mayReplay
              }
            }
            if (replaceReason === null) replaceReason = yield* fullReason(current)
            // Read only when the native thread's read found one (the common turn has none: one statement less).
            const uncertain = found.value.hasPending ? yield* store.listDeliveriesByStatus(current.id, "pending") : []
            if (replaceReason === null && uncertain.length > 0) {
              // Reconciling settles deliveries (and may close their handoffs): the open handoffs (and the calibration)
              // are read again after.
              openHandoffs = null
              calibrationRead = null
              if (!(yield* reconcile(run.threadId, providerThreadIn, current, uncertain, adapter))) {
                replaceReason = `${uncertain.length} delivery(ies) with an unconfirmed outcome`
              } else {
                // This turn start plans with what the read-back found (its usage; the deliveries it settled, in the
                // estimate), not with the native thread as read before it: the stale copy under-counted the settled
                // history in the budget, and the injection's outcome written from it erased the read-back usage
                // (sim seed 220048: history injected up to the window, the prompt then rejected).
                const reconciled: NativeThread = Option.getOrElse(yield* store.getNativeThread(current.id), () => current!)
                current = reconciled
                replaceReason = yield* fullReason(reconciled)
              }
            }
          }
        }
        const freshRef = current === null || replaceReason !== null ? (yield* adapter.startThread()).nativeRef : null
        // A run recorded as never read may have reached the provider after all (an interrupt or a crash raced the
        // turn). Where the adapter can read the native thread back, such a run is recognised and not owed again.
        let readByProvider = new Set<string>()
        if (current !== null && replaceReason === null && adapter.readThread !== undefined &&
          providerThreadIn.syncedRunSeq < run.seq - 1) {
          const between = yield* store.listRunsBetween(run.threadId, providerThreadIn.syncedRunSeq, run.seq)
          if (between.some((r) => r.stopPoint === "before_provider")) {
            const back = yield* Effect.option(adapter.readThread(current.nativeRef))
            if (back._tag === "Some") readByProvider = new Set(back.value.runIds)
          }
        }
        // A new instance that can count tokens is calibrated before its first turn, outside any transaction (two
        // count requests; a failure only leaves the calibration to the usage reports).
        if (adapter.countTokens !== undefined) {
          // It may write a first sample: the calibration read with the native thread is not used.
          calibrationRead = null
          yield* calibration.seedFromCount(run.threadId, providerThreadIn.providerInstance, adapter.countTokens, run.prompt)
        }
        // Nothing to write (a trusted native thread, no missed run, no open handoff toward P): the plan is decided
        // without a transaction, so the common turn takes no lock here. Anything owed is decided under the lock,
        // re-read there. A handoff committed just after this read is owed from the next turn on, as it would be
        // had it committed just after the locked decision.
        const quiet = current !== null && replaceReason === null && freshRef === null &&
          providerThreadIn.syncedRunSeq >= run.seq - 1 &&
          (openHandoffs === null ? (yield* store.listOpenHandoffs(providerThreadIn.id)).length === 0 : !openHandoffs)
        const decided = quiet
          ? yield* decide(run, providerThreadIn, adapter, current, null, null, readByProvider, requestTokens, true, false, calibrationRead)
          : yield* uow.thread(run.threadId, "ProviderTurnStartService.decide")(
            decide(run, providerThreadIn, adapter, current, replaceReason, freshRef, readByProvider, requestTokens, false, options.deferHistory === true)
          )
        const known = current
        const decidedPlan: TurnStartPlan = replayClosed && known !== null && decided.plan.native.id === known.id
          ? { ...decided.plan, replayWindowClosed: true }
          : decided.plan
        if (decided.injection === null) return decidedPlan
        const { injection } = decided
        const plan = decidedPlan
        const outcome = yield* adapter.injectHistory!({
          nativeRef: plan.native.nativeRef,
          rendered: injection.rendered,
          itemIds: injection.itemIds,
          deliveryIds: injection.pending.map((d) => d.id),
          recordedResults: recordedToolResults(store, run.threadId)
        }).pipe(Effect.either)
        if (outcome._tag === "Left") {
          // A rejection as over the window teaches the calibration first (as /compact's does), so the next turn
          // start plans the history with it rather than sending the rejected injection again; and, in the same unit
          // of work, it records the least the native thread holds by the rejection (`KnownUsage.floorOf`): the
          // rejected size less the injection, true whether or not the provider kept the injection, so it is recorded
          // in the first write after the rejection rather than after the read-back (sim seed 9101: a stale report
          // said 837 of 1,000,000, and the next turn start sent the very injection the native thread had rejected;
          // seed 44012: a crash after the read-back lost the floor and the injection was sent again). Later reports
          // do not lower it.
          yield* uow.thread(run.threadId, "ProviderTurnStartService.overflowLearned")(Effect.gen(function*() {
            const learned = yield* calibration.learnFromOverflow(run.threadId, plan.providerThread.providerInstance, plan.sampleBase, outcome.left, injection.tokens)
            const floor = KnownUsage.floorOf(outcome.left, learned.ratio, injection.tokens)
            if (floor !== null) yield* KnownUsage.raiseFloor(store, plan.native.id, floor)
          }))
          // The provider may hold the history. Read the native thread back where the adapter can: the deliveries
          // settle or return to `deferred`, and the turn goes on. Otherwise they stay `pending` (uncertain) and
          // the next turn start will not trust this native thread.
          if (yield* reconcile(run.threadId, plan.providerThread, plan.native, injection.pending, adapter)) {
            const reread = yield* store.getNativeThread(plan.native.id)
            // Whether the read-back usage covers the injection is unknown: this turn teaches the calibration nothing.
            const reconciled = { ...plan, native: reread._tag === "Some" ? reread.value : plan.native, sampleBase: null }
            // The native thread does not hold the injection: the history returned to `deferred` (the outcome is known,
            // so `injectionError` stays null and the turn goes on without it), and the report says so (found by a
            // review: it said "injected" while the model never saw it).
            const ids = new Set(injection.pending.map((d) => d.id))
            const lost = (yield* store.listDeliveriesOfThread(run.threadId)).some((d) => ids.has(d.id) && d.status === "deferred")
            if (!lost) return reconciled
            // What the rejection proved (the floor, recorded above) may leave no room for the prompt either: sent
            // anyway, it was rejected in turn (sim seed 4: a floor of 60,094 in a 64,000 window, then a 5,123-token
            // prompt). The turn start is done again, and its known-full check starts a replacement.
            if (options.afterRejection !== true && options.retryWithoutHistory !== true &&
              (yield* knownFull(reconciled.native, reconciled.providerThread, requestTokens)) !== null) return "native_full" as const
            return {
              ...reconciled,
              report: {
                ...plan.report,
                mode: "none" as const,
                deliveredItems: 0,
                deliveredTokens: 0,
                deferredItems: plan.report.deferredItems + plan.report.deliveredItems,
                deferredTokens: plan.report.deferredTokens + plan.report.deliveredTokens
              }
            }
          }
          return { ...plan, report: { ...plan.report, injectionError: outcome.left.message } }
        }
        const acknowledged = UsageSanity.check(outcome.right.usage, plan.providerThread.contextWindow, config.budget.defaultWindow).usage
        const native = yield* uow.thread(run.threadId, "ProviderTurnStartService.injected")(Effect.gen(function*() {
          yield* delivery.markSettled(run.threadId, injection.pending, "injected")
          const now = yield* DateTime.now
          const native: NativeThread = {
            // A rejection's floor rises by the injection (`KnownUsage.afterGrowth`).
            ...(plan.native.heldAtLeast === undefined ? plan.native : yield* KnownUsage.afterGrowth(
              store, plan.native, (yield* calibration.current(plan.providerThread.providerInstance)).ratio, injection.tokens, acknowledged
            )),
            // Without a trusted acknowledgement the earlier report no longer describes the native thread (it
            // leaves the injection out, and the budget takes a report over the estimate): cleared, so a turn start
            // before the next report budgets with the estimate that counts the injection (review r24).
            usage: acknowledged,
            estimatedTokens: plan.native.estimatedTokens + injection.tokens,
            updatedAt: now
          }
          yield* store.updateNativeThread(native)
          return native
        }))
        // A trusted acknowledgement is the new start of the sample; without one the injection is still unreported.
        const sampleBase: SampleBase | null = acknowledged !== null
          ? { usedTokens: acknowledged.usedTokens, unreportedTokens: 0 }
          : plan.sampleBase === null
          ? null
          : { ...plan.sampleBase, unreportedTokens: plan.sampleBase.unreportedTokens + injection.tokens }
        return { ...plan, native, sampleBase }
      })

      /**
       * The bookkeeping of turn start, in one transaction: native thread, missed runs, budget, defer or intent.
       * `nothingOpen`: the caller found no open handoff toward the provider thread and runs this without a
       * transaction (it then writes nothing).
       */
      const decide = (
        run: Run,
        providerThreadIn: ProviderThread,
        adapter: ProviderAdapter.ProviderAdapterShape,
        current: NativeThread | null,
        replaceReason: string | null,
        freshRef: string | null,
        readByProvider: ReadonlySet<string>,
        requestTokens: number,
        nothingOpen = false,
        deferHistory = false,
        /** The provider's calibration as the caller read it (the quiet plan, no lock); `null`: read here. */
        calibrationRead: Option.Option<StoredCalibration> | null = null
      ) => Effect.gen(function*() {
        let providerThread = providerThreadIn
        let native: NativeThread
        /** Items this unit of work already read (a replacement's history): the plan does not read them again. */
        let known: ReadonlyArray<Item> = []
        if (current !== null && replaceReason !== null && freshRef !== null) {
          ;({ native, providerThread, history: known } = yield* replaceNative(run, providerThread, current, freshRef, replaceReason))
        } else if (current === null && freshRef !== null) {
          ;({ native, providerThread } = yield* recordNative(providerThread, null, freshRef))
        } else {
          native = current!
        }

        // Missed-run recovery: runs on P after its watermark that the provider never read.
        if (providerThread.syncedRunSeq < run.seq - 1) {
          const between = yield* store.listRunsBetween(run.threadId, providerThread.syncedRunSeq, run.seq)
          const missed: Array<Run> = []
          for (const r of between) {
            if (r.stopPoint !== "before_provider") continue
            if (readByProvider.has(r.id)) {
              // The provider holds this run: record it as read on this native thread instead of owing it again.
              yield* store.updateRun({ ...r, stopPoint: "after_provider", nativeThreadId: native.id })
              continue
            }
            missed.push(r)
          }
          yield* delivery.recoverMissedRuns(run.threadId, providerThread, native, missed)
          const now = yield* DateTime.now
          providerThread = { ...providerThread, syncedRunSeq: run.seq - 1, updatedAt: now }
          yield* store.updateProviderThread(providerThread)
        }

        // A merge-back recorded after this run was queued is delivered from the next run on, so the model sees the
        // history in the order the thread records it.
        const owed: Array<OwedHandoff> = []
        for (const o of nothingOpen ? [] : yield* delivery.owedTo(run.threadId, providerThread, native)) {
          if (o.handoff.kind === "merge" && o.handoff.sourceRunIds.length > 0) {
            const mergeRun = yield* store.getRun(o.handoff.sourceRunIds[0]!)
            if (mergeRun._tag === "Some" && mergeRun.value.seq > run.seq) continue
          }
          owed.push(o)
        }
        const seen = calibrationRead !== null && providerThread.providerInstance === providerThreadIn.providerInstance ? calibrationRead : null
        const { ratio } = seen !== null ? calibration.currentOf(seen) : yield* calibration.current(providerThread.providerInstance)
        const budget = Budget.compute(
          {
            modelWindow: providerThread.contextWindow ?? undefined,
            usage: KnownUsage.of(native, ratio),
            estimatedUsedTokens: native.estimatedTokens,
            requestTokens,
            ratio
          },
          config.mutations.has("budget_ignores_reserve") ? { ...config.budget, reserveFloor: 0, reserveFraction: 0 } : config.budget
        )
        const nothing = (report: Partial<TurnStartReport>): TurnStartPlan => ({
          native,
          providerThread,
          inlineHistory: null,
          inlineTokens: 0,
          inlineDeliveries: [],
          requestTokens,
          sampleBase: native.usage === null ? null : { usedTokens: native.usage.usedTokens, unreportedTokens: 0 },
          ...(seen !== null ? { calibrationSeen: seen } : {}),
          report: {
            budget,
            calibrationRatio: ratio,
            mode: "none",
            deliveredItems: 0,
            deliveredTokens: 0,
            deferredItems: 0,
            deferredTokens: 0,
            omittedItems: 0,
            injectionError: null,
            ...report
          }
        })
        if (owed.length === 0) return { plan: nothing({}), injection: null }

        const deferAll = (reason: string) =>
          Effect.gen(function*() {
            const deferred = yield* delivery.defer(run.threadId, owed, budget.budget, reason)
            const deferredIds = owed.flatMap((o) => o.handoff.itemIds)
            const deferredTokens = owed.reduce((n, o) => n + o.handoff.tokens, 0)
            // Visible deferral: the first time a handoff is deferred toward this native thread, the thread says so.
            if (deferred.some((d) => d.deferCount === 1)) {
              yield* itemLog.append(run.threadId, run.id, [{
                kind: "handoff_marker",
                text: `Deferred ${deferredIds.length} earlier item(s) (${deferredTokens} tokens) owed to ` +
                  `${providerThread.providerInstance}: ${reason}. They stay readable by id and are retried at the ` +
                  `next turn, drained by /compact, or covered by a summary.`,
                toolCallId: null,
                toolName: null,
                messageId: null,
                isError: false,
                toolCallState: null
              }])
            }
            let pointer: { readonly text: string; readonly tokens: number } | null = null
            if (config.deferralPointer) {
              // The refs: each handoff's first to last item (its items are in thread order), two point reads per
              // handoff, however much is owed; the ranges may also hold items the model has seen.
              const ends = yield* store.getItems([...new Set(owed.flatMap((o) => {
                const ids = o.handoff.itemIds
                return ids.length === 0 ? [] : [ids[0]!, ids[ids.length - 1]!]
              }))])
              const seqOf = new Map(ends.map((i) => [i.id as string, i.seq]))
              const ranges = owed.flatMap((o) => {
                const ids = o.handoff.itemIds
                const from = ids.length === 0 ? undefined : seqOf.get(ids[0]!)
                const to = ids.length === 0 ? undefined : seqOf.get(ids[ids.length - 1]!)
                return from === undefined || to === undefined ? [] : [[from, to] as const]
              })
              const text = Render.renderDeferralPointer(run.threadId, deferredIds.length, ranges)
              const tokens = text.length > 0 ? counter.count(text) : 0
              if (text.length > 0 && Calibration.apply(ratio, tokens) <= budget.physicalHeadroom) pointer = { text, tokens }
            }
            return {
              plan: {
                ...nothing({ deferredItems: deferredIds.length, deferredTokens }),
                inlineHistory: pointer?.text ?? null,
                inlineTokens: pointer?.tokens ?? 0
              },
              injection: null
            }
          })
        if (deferHistory) return yield* deferAll("retry after a context overflow of a request with injected history")
        // Below the useful minimum nothing is read or selected: a deferral costs the same however much is owed.
        if (budget.budget < config.budget.minUsefulBudget) {
          return yield* deferAll(
            `budget ${budget.budget} below the useful minimum ${config.budget.minUsefulBudget} ` +
              `(window ${budget.window}, used ${budget.used}, request ${budget.request}, reserve ${budget.reserve})`
          )
        }
        const plan = yield* delivery.plan(run.threadId, owed, budget.budget, ratio, known)
        if (plan.selection.selected.length === 0) return yield* deferAll(`no tool unit fits the budget ${budget.budget}`)

        const shown = new Set<string>([...plan.selection.selected.map((i) => i.id), ...plan.selection.stubbedItemIds])
        const report = {
          deliveredItems: plan.selection.selected.length,
          deliveredTokens: plan.selection.tokens,
          omittedItems: plan.selection.omittedItemIds.length,
          stubbedItems: plan.selection.stubbedItemIds.length,
          owedRuns: new Set(plan.items.map((i) => i.runId)).size,
          representedRuns: new Set(plan.items.filter((i) => shown.has(i.id)).map((i) => i.runId)).size
        }
        if (adapter.injectHistory !== undefined) {
          const pending = yield* delivery.markPending(run.threadId, plan, "injected", run.id, budget.budget, ratio)
          return {
            plan: nothing({ ...report, mode: "injected" }),
            injection: {
              pending,
              rendered: plan.selection.rendered,
              itemIds: plan.selection.selected.map((i) => i.id as string),
              tokens: plan.selection.tokens
            }
          }
        }
        const pending = yield* delivery.markPending(run.threadId, plan, "inline", run.id, budget.budget, ratio)
        return {
          plan: {
            ...nothing({ ...report, mode: "inline" }),
            inlineHistory: plan.selection.rendered,
            inlineTokens: plan.selection.tokens,
            inlineDeliveries: pending
          } satisfies TurnStartPlan,
          injection: null
        }
      })

      /**
       * Whether a turn completing on `nativeThreadId` is the first since the native thread was resumed (its output
       * may start with the replayed history); answers `true` once per resume.
       */
      const takeReplayWindow = (nativeThreadId: NativeThread["id"]) => store.takeReplayWindow(nativeThreadId)

      /**
       * Prepares the turn of `run` on `providerThread` (`prepareOnce`). When an injection was rejected and what the
       * rejection proved leaves the native thread too full for the prompt, turn start runs once more: its known-full
       * check then starts a replacement, owed the history under a fresh budget, rather than sending the prompt to a
       * native thread Baton knows cannot take it (invariant 1).
       */
      const prepare = (
        run: Run,
        providerThread: ProviderThread,
        adapter: ProviderAdapter.ProviderAdapterShape,
        options: Omit<Parameters<typeof prepareOnce>[3] & {}, "afterRejection"> = {}
      ) =>
        Effect.flatMap(prepareOnce(run, providerThread, adapter, options), (plan) =>
          plan !== "native_full" ? Effect.succeed(plan) : Effect.flatMap(
            store.getProviderThread(providerThread.id),
            (fresh) => prepareOnce(run, Option.getOrElse(fresh, () => providerThread), adapter, { ...options, afterRejection: true })
          ).pipe(Effect.flatMap((again) =>
            // The second pass never answers `native_full` (`afterRejection`).
            again === "native_full" ? Effect.dieMessage("turn start answered native_full after a rejection") : Effect.succeed(again)
          )))

      return { prepare, reconcile, takeReplayWindow, promptTooLarge }
    })
  }
) {}

export type { OwedHandoff }
