/**
 * TurnExecution: drives one queued run to a terminal status — the claim (`queued` -> `starting`, only when every
 * earlier run of its thread has ended), turn start (ProviderTurnStartService), the attempt (`running` written before
 * the provider call), the streamed turn (TurnStream records items as they arrive) and the outcome: completed, or a
 * failure with its stop point and code, or a tagged `TurnRetry` (a context overflow, a lost native thread) that
 * `Effect.retry` attempts again within bounds.
 *
 * It does not queue runs (ThreadService), decide history (ProviderTurnStartService, ContextHandoffDelivery), or
 * interrupt and recover runs (RunRecovery).
 */
import {
  type ClientTool,
  InvalidRequest,
  type Item,
  ProviderError,
  type ProviderErrorCode,
  type NativeThread,
  type ConcurrentModification,
  type NewThreadEvent,
  type PersistenceError,
  type ProviderThread,
  type Run,
  type RunAttempt,
  RunNotFound,
  runFailureCodeOfProvider,
  type SendResult,
  terminalRunStatuses,
  type TurnStartReport
} from "@baton/contracts"
import { Calibration, TokenCounter } from "@baton/context"
import { ThreadStore, UnitOfWork } from "@baton/persistence"
import { type ProviderAdapter, ProviderFailure, ProviderRegistry } from "@baton/providers"
import { Clock, Data, DateTime, Duration, Effect, Option } from "effect"
import { ClientToolWaits, toolDefinitions } from "./ClientToolWaits.js"
import { ContextHandoffDelivery } from "./ContextHandoffDelivery.js"
import { DriverRegistry } from "./DriverRegistry.js"
import { IdGenerator } from "./IdGenerator.js"
import { ItemLog } from "./ItemLog.js"
import { NativeThreadTrust } from "./NativeThreadTrust.js"
import { OrchestratorConfig } from "./OrchestratorConfig.js"
import { ProviderCalibration } from "./ProviderCalibration.js"
import { ProviderTurnStartService, type TurnStartPlan } from "./ProviderTurnStartService.js"
import { promptItem, RunLifecycle } from "./RunLifecycle.js"
import * as RunCosts from "./RunCosts.js"
import * as OffloadControls from "./OffloadControls.js"
import { ThreadRead } from "./ThreadRead.js"
import { recordedToolResults, TurnStream } from "./TurnStream.js"
import * as UsageSanity from "./UsageSanity.js"
import * as KnownUsage from "./internal/KnownUsage.js"
import * as Span from "./internal/Span.js"

/**
 * A run's result as the record tells it, without a turn-start report (a continuation has none; another process
 * drove the run; the report is gone).
 */
export const resultFromRecord = (r: Run, providerInstance: ProviderThread["providerInstance"]): SendResult => ({
  runId: r.id,
  runSeq: r.seq,
  status: r.status,
  providerInstance,
  nativeGeneration: null,
  usedTokens: null,
  window: 0,
  turnStart: null,
  failureReason: r.failureReason,
  failureCode: r.failureCode
})

/**
 * Logs, at warning level (stderr in `baton serve`), that `run` ended `failed` on the provider error `error`: the thread,
 * the run, the provider instance, the operation and code (with the HTTP status when there was one) and the provider's
 * reason, from which the adapters have already redacted the instance's key. Annotated with `threadId`, `runId` and
 * `providerInstance` for structured loggers. An operator sees why runs fail without reading the run records.
 */
export const logProviderFailure = (run: Run, error: ProviderError) =>
  Effect.logWarning(
    `run ${run.id} of thread ${run.threadId} failed on provider ${error.provider} ` +
      `(${error.operation}, ${error.code}${error.httpStatus === undefined ? "" : `, HTTP ${error.httpStatus}`}): ${error.reason}`
  ).pipe(Effect.annotateLogs({ threadId: run.threadId, runId: run.id, providerInstance: error.provider }))

/** Provider error codes after which the provider did not read the prompt: the run is a missed run. */
export const promptNotReadCodes: ReadonlySet<ProviderErrorCode> = new Set(["refused", "interrupted", "unavailable", "overflow", "ack_lost", "thread_not_found"])

/**
 * Context overflows one run recovers from before it fails: inline history deferred, or a replacement native thread
 * (the prompt alone did not fit, or injected history the native thread keeps: the retry then defers it), and again
 * on the replacement. A fourth overflow means the prompt alone does not fit an empty native thread; the prompt is
 * never truncated, so the run fails.
 */
export const maxOverflowRetries = 3

/** An attempt ended in a way the same run recovers from by attempting the turn again (internal to `run`). */
class TurnRetry extends Data.TaggedError("TurnRetry")<{ readonly cause: "overflow" | "lost_native_thread" }> {}

/**
 * What `handOverLateOutput` looks at: the turn's plan and output `items`, and the native thread's status (`nativeStatus`),
 * the provider thread (`fresh`) and the run (`before`) as the caller's unit of work found them before writing the
 * turn's outcome.
 */
interface LateOutput {
  readonly plan: TurnStartPlan
  readonly items: ReadonlyArray<Item>
  readonly nativeStatus: NativeThread["status"]
  readonly fresh: Option.Option<ProviderThread>
  readonly before: Option.Option<Run>
}

/**
 * A run its queueing unit of work also claimed (`starting`, its driver this one): only a run queued on a thread
 * with no unfinished run, by a caller that drives it at once (`ThreadService.sendMessage`).
 */
export interface ClaimedRun {
  readonly run: Run
  readonly providerThread: ProviderThread
  readonly adapter: ProviderAdapter.ProviderAdapterShape
  /** The client tools the run offers, as its queueing wrote them (`[]`: none); a run's tools never change. */
  readonly tools: ReadonlyArray<ClientTool>
}

/**
 * A command receipt the caller completes with the run's result (`sendMessage`): `write` is run inside the unit of work
 * that completes the run, so the run and its receipt's result commit together (no crash between them leaves a
 * completed run whose receipt still names only the run), and the separate statement after the turn is saved.
 * `written` is set to `true` once that unit of work committed; otherwise (any other outcome) the caller writes the
 * receipt.
 */
export interface ReceiptCompletion {
  readonly write: (result: SendResult) => Effect.Effect<void, PersistenceError | ConcurrentModification>
  written: boolean
}

export class TurnExecution extends Effect.Service<TurnExecution>()("@baton/orchestration/TurnExecution", {
  effect: Effect.gen(function*() {
    const uow = yield* UnitOfWork
    const driver = yield* DriverRegistry
    const trust = yield* NativeThreadTrust
    const lifecycle = yield* RunLifecycle
    const itemLog = yield* ItemLog
    const store = yield* ThreadStore
    const ids = yield* IdGenerator
    const registry = yield* ProviderRegistry.ProviderRegistry
    const counter = yield* TokenCounter.TokenCounter
    const turnStart = yield* ProviderTurnStartService
    const delivery = yield* ContextHandoffDelivery
    const calibration = yield* ProviderCalibration
    const turnStream = yield* TurnStream
    const threadRead = yield* ThreadRead
    const config = yield* OrchestratorConfig
    const toolWaits = yield* ClientToolWaits
    const finishRun = lifecycle.finish

    /**
     * Consumes a provider turn under `turnTimeoutMillis` of the provider's working time: the waits the adapter announced
     * before sending a request again (`retry_scheduled`'s delay, counted by `output.retryWaitMillis`: a 429's or 529's
     * `retry-after`, the backoff) push the deadline back by as much. Found by the issue-9 review: a turn that waited
     * out long `retry-after`s was killed by the turn timeout while the provider had not yet started; the waits are
     * bounded by the adapter (`maxRetries`, a `retry-after` over 5 minutes fails the request), so this adds at most
     * those bounds. Fails with the `ProviderError` `timeout` of `operation` when the working time runs out.
     */
    const withinTurnTimeout = <A, E, R>(
      work: Effect.Effect<A, E, R>,
      output: { readonly retryWaitMillis: number },
      instance: ProviderAdapter.ProviderAdapterShape["instance"],
      operation: "startTurn" | "continueTurn"
    ): Effect.Effect<A, E | ProviderError, R> =>
      Effect.gen(function*() {
        const startedAt = yield* Clock.currentTimeMillis
        const watchdog = Effect.gen(function*() {
          for (;;) {
            const left = startedAt + config.turnTimeoutMillis + output.retryWaitMillis - (yield* Clock.currentTimeMillis)
            if (left <= 0) {
              return yield* new ProviderError({
                provider: instance,
                operation,
                code: "timeout",
                reason: `no answer within ${config.turnTimeoutMillis} ms (turn timeout)`,
                retryable: true
              })
            }
            yield* Effect.sleep(Duration.millis(left))
          }
        })
        return yield* Effect.raceFirst(work, watchdog)
      })
    const stopAndReadBack = trust.probe
    const distrustNative = trust.distrust

    /**
     * `providerThread` brought up to its instance's configuration: a model or window changed since the lane was
     * recorded (a new configuration between restarts) is written, with a `provider_thread.reconfigured` event, so
     * budgets and known-full checks use the window the provider enforces now. Unchanged: no statement.
     */
    const reconfigure = (run: Run, providerThread: ProviderThread, adapter: ProviderAdapter.ProviderAdapterShape) =>
      (adapter.model === providerThread.model && adapter.modelContextWindow === providerThread.contextWindow) ||
        config.mutations.has("ignore_reconfiguration")
        ? Effect.succeed(providerThread)
        : uow.thread(run.threadId, "TurnExecution.reconfigure")(Effect.gen(function*() {
          const current = Option.getOrElse(yield* store.getProviderThread(providerThread.id), () => providerThread)
          const updated: ProviderThread = {
            ...current,
            model: adapter.model,
            contextWindow: adapter.modelContextWindow,
            updatedAt: yield* DateTime.now
          }
          yield* store.updateProviderThread(updated)
          yield* store.appendEvent({ threadId: run.threadId, type: "provider_thread.reconfigured", payload: {
            providerThreadId: current.id,
            model: updated.model,
            contextWindow: updated.contextWindow,
            previousModel: current.model,
            previousContextWindow: current.contextWindow
          } })
          return updated
        }))

    /**
     * Drives a queued run through turn start and the provider turn to a terminal status. `claimed`: the run was
     * queued and claimed (`starting`, this driver's) in the caller's unit of work, with its provider thread and
     * adapter as read there and the tools it wrote; the lookup, the claim and the run's tools' read are skipped.
     */
    const processRun = Span.fn("TurnExecution.run")(function*(runId: Run["id"], claimed?: ClaimedRun, receipt?: ReceiptCompletion) {
      if (claimed !== undefined) return yield* drive(claimed.run, claimed.providerThread, claimed.adapter, claimed.tools, receipt ?? null)
      const found = yield* store.getRun(runId)
      if (found._tag === "None") return yield* new RunNotFound({ runId })
      const queued = found.value
      // The run's provider must be usable here; if not (e.g. a process configured without it), a queued run ends
      // `failed` before the provider instead of staying `queued` and blocking the thread, and the error is returned.
      const lookedUp = yield* Effect.either(Effect.gen(function*() {
        const run = queued
        const providerThread = yield* Effect.flatMap(store.getProviderThread(run.providerThreadId), Option.match({
          onNone: () => Effect.fail(new InvalidRequest({ reason: `run ${run.id} names a missing provider thread` })),
          onSome: Effect.succeed
        }))
        return { providerThread, adapter: yield* registry.get(providerThread.providerInstance) }
      }))
      if (lookedUp._tag === "Left") {
        if (queued.status === "queued") {
          yield* uow.thread(queued.threadId, "TurnExecution.failRun")(finishRun(queued, "failed", "before_provider", `provider unavailable: ${lookedUp.left.message}`,
            lookedUp.left._tag === "PersistenceError" ? "turn_start_failed" : "provider_missing"))
        }
        return yield* lookedUp.left
      }
      return yield* drive(queued, lookedUp.right.providerThread, lookedUp.right.adapter, null, receipt ?? null)
    })

    /**
     * `processRun` from the claim on. `claimedTools`: the run is `starting` and this driver's already, and these are
     * the client tools its queueing wrote (`null`: not claimed yet; the claim follows and the tools are read).
     */
    const drive = (
      queued: Run,
      providerThreadIn: ProviderThread,
      adapter: ProviderAdapter.ProviderAdapterShape,
      claimedTools: ReadonlyArray<ClientTool> | null,
      receipt: ReceiptCompletion | null
    ) => Effect.gen(function*() {
      const runId = queued.id
      const alreadyClaimed = claimedTools !== null
      let run = queued
      const providerThreadAtStart = yield* reconfigure(queued, providerThreadIn, adapter)
      // The prompt never changes: counted once for every attempt's checks and budget.
      const promptTokens = counter.count(queued.prompt)
      const providerThread = providerThreadAtStart
      const result = (report: TurnStartReport | null, native: { generation: number; used: number | null } | null, window: number): SendResult => ({
        runId: run.id,
        runSeq: run.seq,
        status: run.status,
        providerInstance: providerThread.providerInstance,
        nativeGeneration: native?.generation ?? null,
        usedTokens: native?.used ?? null,
        window,
        turnStart: report,
        failureReason: run.failureReason,
        failureCode: run.failureCode
      })
      if (!alreadyClaimed && run.status !== "queued") return result(null, null, providerThread.contextWindow ?? 0)

      // The prompt's item, a long one counted before the claim's unit of work (recorded in it: not counted under the
      // lock, where every other thread's writes would wait the count out on SQLite).
      const prompt = alreadyClaimed ? undefined : (yield* itemLog.countAhead([promptItem(run.prompt)]))[0]
      // Read and move to `starting` in one transaction: an interrupt written in between is never overwritten.
      const claimed = alreadyClaimed ? run : yield* uow.thread(run.threadId, "TurnExecution.claimRun")(Effect.gen(function*() {
        const current = yield* store.getRun(runId)
        if (current._tag === "None" || current.value.status !== "queued") return null
        // Runs of a thread start in seq order, one at a time (across processes: this runs under the thread's lock).
        const first = yield* store.findFirstUnfinishedRun(current.value.threadId)
        if (first._tag === "Some" && first.value.id !== runId) return null
        const starting: Run = { ...current.value, status: "starting", updatedAt: yield* DateTime.now }
        yield* lifecycle.update(current.value, starting, prompt)
        // From here the run is this driver's: recovery elsewhere reconciles it only once this driver is gone.
        yield* store.setRunDriver(runId, driver.driverId)
        return starting
      }))
      if (claimed === null) {
        run = Option.getOrElse(yield* store.getRun(runId), () => run)
        return result(null, null, providerThread.contextWindow ?? 0)
      }
      run = claimed

      /**
       * One attempt at the turn. A native thread the provider no longer has (`thread_not_found`) is marked replaced
       * and the turn is attempted once more on a replacement, which is owed the whole history: the run does not fail
       * because the provider lost its session. A context overflow is retried too (see `overflowRecovery`).
       */
      // `lastRecovery`: how the last overflow of this run was recovered (the next attempt's turn start follows it).
      // `deferNext`: the last overflow's request carried injected history; the retry defers it on the replacement.
      // `historyRefused`: a request of this run that carried history (injected or inline) overflowed: every later
      // attempt defers the owed history (a replacement is owed it again, but re-sending what the provider just refused
      // would overflow the same way).
      const retries = {
        lost: 0,
        overflow: 0,
        lastRecovery: null as "defer_history" | "replace_native_thread" | null,
        deferNext: false,
        historyRefused: false
      }
      // The native thread the run found active: any other one an attempt runs on was started during this run, and
      // holds nothing the provider accepted (every retried attempt was refused before the provider read it).
      const nativeAtStart = providerThreadAtStart.activeNativeThreadId

      /**
       * What a rejection (a context overflow before the provider read the request) teaches, whatever becomes of the
       * run: the calibration learns from the size the provider named (`ProviderCalibration.learn` via
       * `learnFromOverflow`), and the native thread's floor (`NativeThread.heldAtLeast`, `KnownUsage.floorOf`) rises
       * to what the rejection proves it holds, so no later turn start plans below it. Runs inside the caller's unit of
       * work, with the `context.overflowed` event that says the rejection was recorded (`overflowed`).
       */
      const learnRejection = (plan: TurnStartPlan, error: ProviderError) =>
        Effect.gen(function*() {
          const learned = yield* calibration.learnFromOverflow(
            run.threadId, plan.providerThread.providerInstance, plan.sampleBase, error, plan.requestTokens + plan.inlineTokens
          )
          const floor = KnownUsage.floorOf(error, learned.ratio, plan.requestTokens + plan.inlineTokens)
          if (floor !== null && !config.mutations.has("retry_overflow_on_same_native")) yield* KnownUsage.raiseFloor(store, plan.native.id, floor)
        })
      /**
       * The `context.overflowed` event of `attempt`'s rejection: `recovery` is how the run goes on (`none`: it does
       * not, a user interrupt ended it meanwhile or no retry is left). Written in the unit of work that records what
       * the rejection taught (`learnRejection`): a crash before it commits loses both, and the simulator's oracle
       * counts a rejection as known to Baton only when this event follows it (ProviderTruthChecks).
       */
      const overflowed = (plan: TurnStartPlan, attempt: RunAttempt, recovery: "defer_history" | "replace_native_thread" | "none") =>
        store.appendEvent({ threadId: run.threadId, type: "context.overflowed", payload: {
          runId: run.id,
          nativeThreadId: plan.native.id,
          attempt: attempt.attempt,
          recovery,
          window: plan.report.budget.window
        } })

      /**
       * Recovery from a context overflow (`ProviderError` code `overflow`: the provider rejected the request before
       * reading it). No run fails because history does not fit (invariant 1): the attempt's inline deliveries go
       * back to `deferred`, and the turn is attempted again with the prompt unchanged.
       * - If the attempt carried history inline (or a pointer), the native thread is recorded as full
       *   (`usedTokens` = the budget window): the next budget is 0, everything owed is deferred and the prompt goes
       *   alone. The next usage report (or `/compact`) corrects the figure.
       * - If the prompt went alone, the native thread itself is full; if history was injected into it, it holds that
       *   history for good (a model API's message list keeps the block, so a retry there would repeat the rejected
       *   request byte for byte). Either way it is no longer trusted and the retry starts a replacement, owed the
       *   whole history, which the retry defers when it was injected (the prompt goes alone to the replacement)
       *   and otherwise delivers under a fresh budget.
       * An overflow that names the request's size (`prompt is too long: N tokens > M maximum`) is a usage report
       * too: from the turn's sample base, it teaches the calibration what this request cost in the provider's units
       * (`ProviderCalibration.learn`, same policy as a completed turn), so the retry and later turns are budgeted
       * in the units the provider really counts.
       * Whatever became of the run, the rejection is information about the native thread: it teaches the calibration
       * and records the least the native thread holds (`NativeThread.heldAtLeast`, `KnownUsage.floorOf`), so no later
       * turn start plans below it.
       * Returns `false` (a `context.overflowed` of recovery `none`, nothing else written) when a user interrupt ended
       * the run meanwhile: it is not retried.
       */
      const overflowRecovery = (plan: TurnStartPlan, attempt: RunAttempt, error: ProviderError) =>
        uow.thread(run.threadId, "TurnExecution.overflowRecovery")(Effect.gen(function*() {
          // Whether or not a user interrupt ended the run meanwhile (`raced`), the rejection is learned and recorded:
          // an overflow raced by an interrupt used to teach nothing, and the next turn start sent the interrupted
          // run's prompt as a missed run's history to the native thread that had just rejected less (sim seed 44018).
          const current = yield* store.getRun(run.id)
          const raced = current._tag === "Some" && current.value.status === "interrupted"
          if (raced && config.mutations.has("race_forgets_rejection")) return false
          yield* learnRejection(plan, error)
          if (raced) {
            yield* overflowed(plan, attempt, "none")
            return false
          }
          const now = yield* DateTime.now
          // Inline history is part of the rejected request only: the retry can leave it out. Injected history is
          // in the native thread for good (for a model API, the lane's message list): a retry there would repeat
          // the rejected request, so the native thread is replaced instead.
          const injected = plan.report.mode === "injected"
          yield* delivery.revertToDeferred(run.threadId, plan.inlineDeliveries, "context overflow: the provider did not read the turn")
          yield* store.updateAttempt({ ...attempt, status: "failed", error: error.message, updatedAt: now })
          const window = plan.report.budget.window
          // The retry leaves the inline history out and goes to the same native thread only when the prompt alone
          // fits there by what Baton knows: the native thread's last trusted usage (or a rejection's floor above it)
          // plus the prompt at the calibration in force now (this overflow may just have taught it). Otherwise the
          // prompt alone would overflow too (sim seed 100087: 51,840 used + 11,592 x1.12 > 64,000, sent again): the
          // native thread is replaced instead.
          const native = plan.inlineHistory === null || injected
            ? null
            : Option.getOrElse(yield* store.getNativeThread(plan.native.id), () => plan.native)
          // What Baton knows it holds counts the floor this overflow just proved (`KnownUsage.of`): by the stale report
          // alone, the prompt went back to the native thread that had just rejected it with less history than its
          // size (sim seed 44052: a floor of 199,116 in a 200,000 window, then 12,204 tokens).
          const aloneFits = native === null ? false : yield* Effect.map(
            calibration.current(plan.providerThread.providerInstance),
            ({ ratio }) => {
              const known = KnownUsage.of(native, ratio)
              return known === null || known.usedTokens + Calibration.apply(ratio, plan.requestTokens) <= window
            }
          )
          const carriedHistory = native !== null && aloneFits
          if (native !== null && carriedHistory) {
            yield* store.updateNativeThread({
              ...native,
              usage: { usedTokens: window, maxTokens: window },
              estimatedTokens: Math.max(native.estimatedTokens, window),
              updatedAt: now
            })
          } else if (!config.mutations.has("retry_overflow_on_same_native")) {
            yield* distrustNative(run.threadId, plan.native, injected
              ? "context overflow after history was injected: the native thread holds more than the provider accepts"
              : plan.inlineHistory !== null
              ? "context overflow with inline history, and the prompt alone does not fit the native thread's last reported usage either"
              : "context overflow with the prompt alone: the native thread is full")
          }
          yield* overflowed(plan, attempt, carriedHistory ? "defer_history" : "replace_native_thread")
          const again: Run = { ...run, status: "starting", nativeThreadId: null, updatedAt: now }
          yield* lifecycle.update(run, again)
          run = again
          retries.overflow++
          retries.lastRecovery = carriedHistory ? "defer_history" : "replace_native_thread"
          retries.deferNext = injected
          retries.historyRefused = retries.historyRefused || injected || plan.inlineHistory !== null
          return true
        }))
      /** Whether `handOverLateOutput` may hand anything over: output, and its lane ended meanwhile. */
      const mayOweLateOutput = ({ before, fresh, items, nativeStatus, plan }: LateOutput) =>
        items.length > 0 && (nativeStatus !== "active" ||
          (fresh._tag === "Some" && fresh.value.activeNativeThreadId !== plan.native.id) ||
          (before._tag === "Some" && terminalRunStatuses.includes(before.value.status)))
      /**
       * Late output: the turn ran on a native thread that has since been replaced (an interrupt it never answered, a
       * timeout), or the user has moved to another provider meanwhile. Every provider thread that already holds or is
       * owed this run (its watermark is past it) but cannot have seen this output is owed it: the items of `items`
       * that no handoff toward it carries yet (items stream in, so a handoff built meanwhile may carry the first ones).
       * See `LateOutput` for the arguments.
       */
      const handOverLateOutput = (late: LateOutput) =>
        Effect.gen(function*() {
          if (!mayOweLateOutput(late)) return
          const { fresh, items, nativeStatus, plan } = late
          for (const other of yield* store.listProviderThreads(run.threadId)) {
            const own = other.id === plan.providerThread.id
            const sawIt = own && nativeStatus === "active" && other.activeNativeThreadId === plan.native.id
            const pastRun = own ? (fresh._tag === "Some" ? fresh.value.syncedRunSeq : 0) >= run.seq || !sawIt : other.syncedRunSeq >= run.seq
            if (sawIt || !pastRun) continue
            const target = own && fresh._tag === "Some" ? fresh.value : other
            const carried = new Set((yield* store.listHandoffsTo(target.id)).flatMap((h) => h.itemIds))
            const owed = items.filter((i) => !carried.has(i.id))
            if (owed.length > 0) yield* delivery.createHandoff(run.threadId, "missed_run", target, [run], owed, { lateOutputOf: run.id })
          }
        })

      // The provider thread as the claim read it serves the first attempt of a run claimed with its queueing (read
      // under the thread's lock a moment ago); otherwise, and for every retry, it is read again.
      let providerThreadFresh = alreadyClaimed
      const attemptTurn = () => Effect.gen(function*() {
        const providerThread = providerThreadFresh
          ? providerThreadAtStart
          : yield* Effect.map(store.getProviderThread(providerThreadAtStart.id), Option.getOrElse(() => providerThreadAtStart))
        providerThreadFresh = false
        // A prompt Baton knows cannot fit the model's window even alone is not sent (invariant 1: no request that
        // Baton knows would exceed the window); the run fails as an overflow with what to do.
        const tooLarge = config.mutations.has("ignore_known_full") ? null : yield* turnStart.promptTooLarge(promptTokens, providerThread)
        if (tooLarge !== null) {
          yield* Effect.logWarning(`run ${run.id} not sent: ${tooLarge}`)
          run = yield* uow.thread(run.threadId, "TurnExecution.promptTooLarge")(finishRun(run, "failed", "before_provider", tooLarge, "overflow"))
          return result(null, null, providerThread.contextWindow ?? 0)
        }
        const prepared = yield* turnStart.prepare(run, providerThread, adapter, {
          retryWithoutHistory: retries.lastRecovery === "defer_history",
          deferHistory: retries.deferNext || retries.historyRefused,
          promptTokens
        }).pipe(
          Effect.either
        )
        if (prepared._tag === "Left") {
          const failed = prepared.left
          const code = failed._tag === "ProviderError" ? runFailureCodeOfProvider(failed.code) : "turn_start_failed"
          run = yield* uow.thread(run.threadId, "TurnExecution.turnStartFailed")(finishRun(run, "failed", "before_provider", failed.message, code))
          if (failed._tag === "ProviderError" && run.status === "failed") yield* logProviderFailure(run, failed)
          return result(null, null, providerThread.contextWindow ?? 0)
        }
        const plan = prepared.right
        const window = plan.report.budget.window
        if (plan.report.injectionError !== null) {
          run = yield* uow.thread(run.threadId, "TurnExecution.injectionUnconfirmed")(
            finishRun(run, "failed", "before_provider", `history injection unconfirmed: ${plan.report.injectionError}`, "injection_unconfirmed")
          )
          return result(plan.report, { generation: plan.native.generation, used: plan.native.usage?.usedTokens ?? null }, window)
        }

        // One transaction: the attempt, the interrupt check and the move to `running`. A `starting` run's unit of
        // work opens with the write that moves it (`lifecycle.start`), so it needs no separate lock statement on SQLite.
        const queuedRun = run
        const beginUnit = queuedRun.status === "starting" ? uow.threadWritingFirst : uow.thread
        const begun = yield* beginUnit(queuedRun.threadId, "TurnExecution.beginAttempt")(Effect.gen(function*() {
          const startedAt = yield* DateTime.now
          // The common case in one statement: the run still `starting` moves to `running`, its attempts counted.
          const moved = queuedRun.status === "starting" ? yield* lifecycle.start(queuedRun, plan.native.id, startedAt) : Option.none()
          if (moved._tag === "Some") {
            const attempt: RunAttempt = {
              id: ids.next("att") as RunAttempt["id"],
              runId: queuedRun.id,
              attempt: moved.value.attempts + 1,
              nativeThreadId: plan.native.id,
              status: "running",
              error: null,
              createdAt: startedAt,
              updatedAt: startedAt
            }
            yield* store.insertAttempt(attempt)
            yield* store.appendEvent({ threadId: queuedRun.threadId, type: "run.started", payload: { runId: queuedRun.id, nativeThreadId: plan.native.id, attempt: attempt.attempt } })
            return { interrupted: null, running: moved.value.run, attempt } as const
          }
          // Otherwise re-read with its attempts' count, in one statement: an interrupt that arrived while history was
          // prepared stops the run before the provider starts.
          const found = yield* store.getRunWithAttemptCount(queuedRun.id)
          const attemptNo = (found._tag === "Some" ? found.value.attempts : 0) + 1
          const attempt = {
            id: ids.next("att") as RunAttempt["id"],
            runId: queuedRun.id,
            attempt: attemptNo,
            nativeThreadId: plan.native.id,
            status: "running" as const,
            error: null,
            createdAt: startedAt,
            updatedAt: startedAt
          }
          const current = Option.map(found, (f) => f.run)
          if (current._tag === "Some" && current.value.status === "interrupted") {
            yield* delivery.revertToDeferred(queuedRun.threadId, plan.inlineDeliveries, "run interrupted before the provider started")
            yield* store.insertAttempt({ ...attempt, status: "interrupted", error: "interrupted before start" })
            return { interrupted: current.value, attempt } as const
          }
          yield* store.insertAttempt(attempt)
          const running: Run = { ...queuedRun, status: "running", nativeThreadId: plan.native.id, updatedAt: startedAt }
          yield* lifecycle.update(queuedRun, running)
          yield* store.appendEvent({ threadId: queuedRun.threadId, type: "run.started", payload: { runId: queuedRun.id, nativeThreadId: plan.native.id, attempt: attemptNo } })
          return { interrupted: null, running, attempt } as const
        }))
        if (begun.interrupted !== null) {
          run = begun.interrupted
          return result(plan.report, { generation: plan.native.generation, used: plan.native.usage?.usedTokens ?? null }, window)
        }
        run = begun.running
        const attempt = begun.attempt

        // The turn streams: its items are recorded as they arrive (TurnStream), its outcome below once the stream
        // ends. A provider turn that never ends must not leave the run `running`: Baton stops waiting after
        // `turnTimeoutMillis` and handles it like a provider-reported timeout.
        const output = turnStream.output(run, plan.native, plan.inlineDeliveries, plan.replayWindowClosed === true)
        // Written once, when the run was queued: a run claimed with its queueing has them from there.
        const clientTools = toolDefinitions(claimedTools ?? (yield* store.getRunTools(run.id)))
        // Read only for adapters that apply it (a message list with tool-result offload): one statement less per turn
        // on the others (scripted, Codex).
        const offloadControl = adapter.toolResultOffload === undefined ? undefined : (yield* OffloadControls.resolve(store, run.threadId)).resolved
        const outcome = yield* output.consume(adapter.startTurn({
          nativeRef: plan.native.nativeRef,
          runId: run.id,
          prompt: run.prompt,
          inlineHistory: plan.inlineHistory,
          // The client's tools: the model's calls to them end the turn open, and the run waits for the results.
          ...(clientTools.length === 0 ? {} : { tools: clientTools }),
          // Baton's `thread_read`, offered on every turn: a tool list that changed from one request to the next would
          // rewrite the provider's prompt cache, and a model may need an earlier item at any turn (omitted, deferred,
          // summarised, or dropped by the provider's own compaction). Adapters without tools ignore it.
          localTools: [threadRead.tool(run.threadId)],
          // Calls an earlier turn left open are closed in the native thread with the texts the record holds.
          recordedResults: recordedToolResults(store, run.threadId),
          // The thread's tool-result offload control (on/off, settings, pins): adapters with a message list apply it.
          ...(offloadControl === undefined ? {} : { offloadControl })
        })).pipe(
          (work) => withinTurnTimeout(work, output, adapter.instance, "startTurn"),
          Effect.either
        )

        /** Never leaves a run `running`: the provider read the prompt, but (some of) its output could not be recorded. */
        const outputNotRecorded = (failure: { readonly message: string }) =>
          Effect.gen(function*() {
            const reason = `provider output could not be recorded: ${failure.message}`
            const startedRun = run
            run = yield* uow.thread(startedRun.threadId, "TurnExecution.outputNotRecorded")(Effect.gen(function*() {
              yield* store.updateAttempt({ ...attempt, status: "failed", error: reason, updatedAt: yield* DateTime.now })
              return yield* finishRun(startedRun, "failed", "after_provider", reason, "output_not_recorded")
            }))
            return result(plan.report, { generation: plan.native.generation, used: plan.native.usage?.usedTokens ?? null }, window)
          })

        if (outcome._tag === "Left" && outcome.left._tag !== "ProviderError") return yield* outputNotRecorded(outcome.left)
        if (outcome._tag === "Left" && outcome.left._tag === "ProviderError") {
          // An overflow the adapter reported only in its text (a plain HTTP 400) is an overflow all the same.
          const classified = ProviderFailure.classify(outcome.left)
          // The prompt went alone (no history inline or injected) to a native thread this run started, which holds
          // nothing: no recovery can make it fit, so the run fails now as an overflow saying so.
          // Likewise when the prompt went with inline history (a deferral pointer) to such a native thread and the
          // size the provider gave, less that history at the calibration, still exceeds the window: the prompt alone
          // would be rejected too (Baton would send a request it knows cannot fit, invariant 1), and a replacement
          // would be as empty.
          const emptyNative = classified.code === "overflow" && plan.report.mode !== "injected" && plan.native.id !== nativeAtStart
          const requested = ProviderFailure.requestedTokensOf(classified)
          const promptAloneOnEmpty = emptyNative && (plan.inlineHistory === null || (requested !== null && window > 0 &&
            requested - Calibration.apply((yield* calibration.current(plan.providerThread.providerInstance)).ratio, plan.inlineTokens) > window))
          const error = promptAloneOnEmpty
            ? new ProviderError({
              provider: classified.provider,
              operation: classified.operation,
              code: classified.code,
              retryable: false,
              ...(classified.requestedTokens === undefined ? {} : { requestedTokens: classified.requestedTokens }),
              ...(classified.limitTokens === undefined ? {} : { limitTokens: classified.limitTokens }),
              ...(classified.httpStatus === undefined ? {} : { httpStatus: classified.httpStatus }),
              reason: `${classified.reason} (the prompt alone does not fit the model's context window on an empty ` +
                `native thread: shorten the message or switch to a model with a larger window)`
            })
            : classified
          // Output before the failure (a mid-stream failure) proves the provider read the prompt: the items stay
          // recorded, the turn is not retried (a retry would produce them twice) and the run ends after the provider.
          const arrived = output.arrived > 0
          // A rejection is recorded once (what it taught, its `context.overflowed`): by the recovery, or, when no
          // recovery runs (no retry left, the prompt alone on an empty native thread), with the run's failure below.
          let rejectionRecorded = false
          if (!arrived && error.code === "overflow" && retries.overflow < maxOverflowRetries && !promptAloneOnEmpty) {
            const retried = yield* overflowRecovery(plan, attempt, error)
            if (retried) return yield* new TurnRetry({ cause: "overflow" })
            rejectionRecorded = true
          }
          if (!arrived && error.code === "thread_not_found" && retries.lost === 0) {
            retries.lost++
            const lostRun = run
            run = yield* uow.thread(lostRun.threadId, "TurnExecution.lostNativeThread")(Effect.gen(function*() {
              const now = yield* DateTime.now
              yield* delivery.revertToDeferred(lostRun.threadId, plan.inlineDeliveries, "the provider lost the native thread")
              yield* store.updateAttempt({ ...attempt, status: "failed", error: error.message, updatedAt: now })
              yield* store.updateNativeThread({ ...plan.native, status: "replaced", updatedAt: now })
              yield* store.appendEvent({ threadId: lostRun.threadId, type: "native_thread.replaced", payload: {
                nativeThreadId: plan.native.id,
                reason: "the provider no longer has it"
              } })
              const again: Run = { ...lostRun, status: "starting", nativeThreadId: null, updatedAt: now }
              yield* lifecycle.update(lostRun, again)
              return again
            }))
            return yield* new TurnRetry({ cause: "lost_native_thread" })
          }
          // A timeout leaves it unknown whether the provider read the prompt: stop the turn and read the native
          // thread back. Where that cannot tell, or the provider does not acknowledge the interrupt (it may still be
          // running the turn), the native thread is no longer trusted.
          let read: boolean | "unknown" = arrived || !promptNotReadCodes.has(error.code)
          let untrustedReason: string | null = null
          if (error.code === "timeout") {
            const probe = yield* stopAndReadBack(adapter, plan.native, run.id)
            read = arrived || probe.read
            if (!probe.answered) untrustedReason = "turn timed out and the provider did not acknowledge the interrupt"
            else if (read === "unknown") untrustedReason = "turn timed out: cannot tell whether the provider read the prompt"
          }
          const notRead = read !== true
          const status = error.code === "interrupted" ? "interrupted" as const : "failed" as const
          const finished = Effect.gen(function*() {
            if (!arrived && error.code === "overflow" && !rejectionRecorded) {
              yield* learnRejection(plan, error)
              yield* overflowed(plan, attempt, "none")
            }
            // As found before this outcome is written (see `handOverLateOutput`).
            const before = yield* store.getRun(run.id)
            const nativeBefore = yield* store.getNativeThread(plan.native.id)
            if (read === false) {
              yield* delivery.revertToDeferred(run.threadId, plan.inlineDeliveries, `turn did not start: ${error.code}`)
            } else if (read === true && (error.code === "timeout" || arrived)) {
              yield* delivery.markSettled(run.threadId, plan.inlineDeliveries, "inline")
            }
            // (Unknown: the inline deliveries stay `pending`; the replacement supersedes them.)
            // A turn that failed after the provider reported usage was billed all the same (the report says it read
            // the request, even when the stream broke before an item completed).
            if (output.tokens !== null) yield* store.recordRunCost(RunCosts.of(run, adapter, output.tokens, yield* DateTime.now))
            if (arrived) {
              // What the stream held back (an open tool unit, a possible replay) is recorded now, its calls closed.
              const items = yield* output.flush(error.code === "interrupted")
              const fresh = yield* store.getProviderThread(plan.providerThread.id)
              yield* handOverLateOutput({ plan, items, nativeStatus: nativeBefore._tag === "Some" ? nativeBefore.value.status : plan.native.status, fresh, before })
              if (error.code === "overflow") {
                // The native thread reached its window while producing: recorded as full, so the next turn start
                // defers owed history (and the next usage report or `/compact` corrects the figure).
                const native = Option.getOrElse(yield* store.getNativeThread(plan.native.id), () => plan.native)
                const full = plan.report.budget.window
                yield* store.updateNativeThread({
                  ...native,
                  usage: { usedTokens: full, maxTokens: full },
                  estimatedTokens: Math.max(native.estimatedTokens, full),
                  updatedAt: yield* DateTime.now
                })
              }
            }
            if (untrustedReason !== null) yield* distrustNative(run.threadId, plan.native, untrustedReason)
            yield* store.updateAttempt({ ...attempt, status: status === "interrupted" ? "interrupted" : "failed", error: error.message, updatedAt: yield* DateTime.now })
            // A user interrupt that arrived meanwhile stays; only where the run stopped is corrected.
            const current = yield* store.getRun(run.id)
            if (current._tag === "Some" && current.value.status === "interrupted") {
              const kept: Run = {
                ...current.value,
                stopPoint: notRead ? "before_provider" : current.value.stopPoint,
                nativeThreadId: notRead ? null : current.value.nativeThreadId
              }
              yield* lifecycle.update(current.value, kept)
              return kept
            }
            return yield* finishRun(
              { ...run, nativeThreadId: notRead ? null : run.nativeThreadId },
              status,
              notRead ? "before_provider" : "after_provider",
              error.message,
              runFailureCodeOfProvider(error.code)
            )
          })
          run = yield* uow.thread(run.threadId, "TurnExecution.turnFailed")(finished)
          if (run.status === "failed") yield* logProviderFailure(run, error)
          return result(plan.report, { generation: plan.native.generation, used: plan.native.usage?.usedTokens ?? null }, window)
        }

        const completed = Effect.gen(function*() {
          // The run under this unit's lock; then the turn's last arrival, when it came with the turn's end (TurnStream
          // `settle`): its items are recorded here, not in a unit of work of their own. Output proves the provider
          // read the prompt: a run recorded as never read is corrected (and read again), as an arrival's own unit did.
          const found = yield* store.getRun(run.id)
          const neverRead = found._tag === "Some" && found.value.stopPoint === "before_provider"
          // This unit's events up to the outcome (the arrival's `items.appended`, `calibration.updated`,
          // `usage.reported`), in order: appended with `run.completed` in one statement when the run completes and
          // hands no late output over, else after the provider thread's read below (nothing between appends an
          // event: the thread's order is kept; `settle` stages the arrival's event only when `flush`/`hold` below
          // append nothing).
          const pendingEvents: Array<NewThreadEvent> = []
          const marked = yield* output.settle(neverRead, pendingEvents)
          if (!output.inlineSettled) yield* delivery.markSettled(run.threadId, plan.inlineDeliveries, "inline")
          // Whether the turn stopped at an interrupt: the provider says so, or a user interrupt already ended the run.
          const before = marked && neverRead ? yield* store.getRun(run.id) : found
          const interrupted = output.interrupted || (before._tag === "Some" && before.value.status === "interrupted")
          // Most items are recorded already (as they arrived); what the stream still holds is recorded now: a
          // possible replay of a resumed native thread is skipped, the tool calls the turn left open are closed —
          // except the client's calls the run now waits for: that unit is held in the wait (ClientToolWaits).
          const waitFor = interrupted ? [] : output.pendingToolCalls.filter((id) => output.openCallIds.includes(id))
          const settled = waitFor.length > 0 ? yield* output.hold() : { recorded: yield* output.flush(interrupted), held: [] }
          const items = settled.recorded
          const now = yield* DateTime.now
          const inlineTokens = plan.inlineTokens
          const sent = plan.requestTokens + inlineTokens + items.reduce((n, i) => n + i.tokens, 0)
          // Usage sanity: a report above the window is impossible and not trusted; a missing report is not replaced
          // by the previous one. Either way Baton's own estimate (what it sent plus what came back) is used.
          const { usage: checked, anomaly } = UsageSanity.check(output.usage, plan.providerThread.contextWindow, config.budget.defaultWindow)
          const trusted = checked !== null
          // Calibration: between two trusted reports, the usage growth against Baton's count of the same texts (the
          // item texts as the provider counts them, not their rendered cost) teaches the provider's ratio.
          if (output.tokens !== null) yield* store.recordRunCost(RunCosts.of(run, adapter, output.tokens, now))
          const outputTokens = items.reduce((n, i) => n + counter.count(i.text), 0)
          const learned = yield* calibration.learn(run.threadId, plan.providerThread.providerInstance, {
            base: plan.sampleBase,
            reportedUsedTokens: checked?.usedTokens ?? null,
            estimatedTokens: plan.requestTokens + inlineTokens + (config.mutations.has("sample_omits_output") ? 0 : outputTokens)
          }, pendingEvents, plan.calibrationSeen ?? null)
          // `estimatedTokens` is Baton's count: a trusted report is stored in Baton's units (the budget scales the
          // estimate back by the ratio when no trusted report exists).
          const estimatedTokens = checked !== null ? Calibration.toRaw(learned.ratio, checked.usedTokens) : plan.native.estimatedTokens + sent
          // Only the usage columns are written; the status comes back as stored: an interrupt or timeout may have
          // stopped trusting the native thread meanwhile. A rejection's floor (`heldAtLeast`) rises by what the turn
          // added (the texts as the provider counts them, at the calibration): the native thread grew past what the
          // rejection proved, and a stale report after it must not let the next turn start plan below that.
          const heldGrowth = config.mutations.has("floor_ignores_growth") ? 0 : Calibration.apply(learned.ratio, plan.requestTokens + inlineTokens + outputTokens)
          // The provider's own compaction during the turn frees what a rejection proved: the floor goes.
          const statusNow = yield* store.recordNativeUsage(plan.native.id, checked, estimatedTokens, now, heldGrowth, output.compacted)
          const native = {
            ...plan.native,
            status: statusNow._tag === "Some" ? statusNow.value : plan.native.status,
            usage: checked,
            estimatedTokens,
            updatedAt: now
          }
          if (output.usage !== null) {
            pendingEvents.push({ threadId: run.threadId, type: "usage.reported", payload: {
              nativeThreadId: native.id,
              usage: anomaly === null ? output.usage : JSON.parse(JSON.stringify(output.usage)),
              trusted,
              ...(anomaly === null ? {} : { anomaly, estimateUsed: native.estimatedTokens })
            } })
            if (anomaly !== null) {
              yield* Effect.logWarning(`untrusted usage report on ${native.id}: ${anomaly}; using the estimate ${native.estimatedTokens}`)
            }
          }
          // The watermark moves to this run when it stood just before it (a waiting run is not over: it moves when
          // the run completes), in one statement that returns the provider thread; where it did not move, the
          // provider thread is read. `fresh`: the provider thread as found before this write.
          const advanced = waitFor.length === 0 ? yield* store.updateSyncedRunSeqIfNext(plan.providerThread.id, run.seq, now) : Option.none()
          const fresh = advanced._tag === "Some"
            ? Option.some<ProviderThread>({ ...advanced.value, syncedRunSeq: run.seq - 1 })
            : yield* store.getProviderThread(plan.providerThread.id)
          const completes = !(before._tag === "Some" && before.value.status === "interrupted") && !output.interrupted && waitFor.length === 0
          const late: LateOutput = { plan, items, nativeStatus: native.status, fresh, before }
          const withOutcome = completes && !mayOweLateOutput(late)
          if (!withOutcome) yield* store.appendEvents(pendingEvents)
          yield* handOverLateOutput(late)
          yield* store.updateAttempt({ ...attempt, status: output.interrupted ? "interrupted" : "completed", updatedAt: now })
          // An interrupt that arrived while the provider ran is kept: the output is recorded, the status stays. (The
          // run as read above, under this unit's lock: nothing here writes it before this point.)
          const current = before
          if (current._tag === "Some" && current.value.status === "interrupted") {
            // The provider did read the prompt (the turn completed): record that, whatever the interrupt assumed.
            const kept: Run = { ...current.value, stopPoint: "after_provider", nativeThreadId: plan.native.id, updatedAt: now }
            yield* lifecycle.update(current.value, kept)
            return { done: kept, native }
          }
          if (output.interrupted) {
            // The provider stopped at an interrupt before the user's interrupt command recorded it (or one from
            // elsewhere): the run ends interrupted, after the provider read the prompt.
            const ended = yield* finishRun({ ...run, nativeThreadId: plan.native.id }, "interrupted", "after_provider", "interrupted by the user during the provider turn", "interrupted_by_user")
            return { done: ended, native }
          }
          if (waitFor.length > 0) return { done: yield* toolWaits.enter(run, plan.native, waitFor, settled.held), native }
          const done: Run = { ...run, status: "completed", updatedAt: now }
          yield* lifecycle.update(run, done)
          yield* store.appendEvents([...(withOutcome ? pendingEvents : []), { threadId: run.threadId, type: "run.completed", payload: { runId: run.id, itemCount: items.length } }])
          // The caller's command receipt, completed with the run (see `ReceiptCompletion`).
          if (receipt !== null) yield* receipt.write(resultOf(done, native))
          return { done, native }
        })
        // The result of the completed `done` (pure: `run` is set only once the unit of work committed).
        const resultOf = (done: Run, native: NativeThread): SendResult => ({
          ...result(plan.report, { generation: native.generation, used: native.usage?.usedTokens ?? native.estimatedTokens }, window),
          runId: done.id,
          runSeq: done.seq,
          status: done.status,
          failureReason: done.failureReason,
          failureCode: done.failureCode
        })
        const recorded = yield* Effect.either(uow.thread(run.threadId, "TurnExecution.turnCompleted")(completed))
        if (recorded._tag === "Left") return yield* outputNotRecorded(recorded.left)
        const { done, native } = recorded.right
        if (receipt !== null && done.status === "completed") receipt.written = true
        run = done
        return resultOf(done, native)
      })

      // An attempt that ends in `TurnRetry` is attempted again: at most once for a lost native thread and
      // `maxOverflowRetries` times for overflows (bounded by `retries` inside the attempt).
      return yield* attemptTurn().pipe(
        Effect.retry({ while: (e) => e._tag === "TurnRetry", times: 1 + maxOverflowRetries }),
        Effect.catchTag("TurnRetry", (e) => Effect.dieMessage(`unreachable: more attempts than the retry bounds allow (${e.cause})`))
      )
    })

    /**
     * The record of what `run`'s turn was billed, `tokens` added to what its earlier requests were (a run that waited
     * for tool results is billed per continuation).
     */
    const addRunCost = (run: Run, adapter: ProviderAdapter.ProviderAdapterShape, tokens: ProviderAdapter.TurnTokens, now: DateTime.Utc) =>
      Effect.gen(function*() {
        const before = yield* store.getRunCost(run.id)
        const sum = before._tag === "None" ? tokens : {
          inputTokens: before.value.inputTokens + tokens.inputTokens,
          cacheWriteTokens: before.value.cacheWriteTokens + tokens.cacheWriteTokens,
          cacheReadTokens: before.value.cacheReadTokens + tokens.cacheReadTokens,
          outputTokens: before.value.outputTokens + tokens.outputTokens
        }
        yield* store.recordRunCost(RunCosts.of(run, adapter, sum, now))
      })

    /**
     * Continues a `waiting` run whose results the client posted (its wait `answered`): claimed under the thread's
     * lock (`running`, a new attempt on the wait's native thread, this driver's), then `continueTurn` with the
     * results and the run's tools, the model's answer recorded as it streams (TurnStream), and the outcome: completed,
     * waiting again (the model called the client's tools again), or failed/interrupted after the provider. A run that
     * is not waiting with posted results is returned as it is. Fails with `RunNotFound`, `PersistenceError`,
     * `ConcurrentModification`.
     */
    const continueRun = Span.fn("TurnExecution.continueRun")(function*(runId: Run["id"]) {
      const found = yield* store.getRun(runId)
      if (found._tag === "None") return yield* new RunNotFound({ runId })
      const providerThread = yield* Effect.flatMap(store.getProviderThread(found.value.providerThreadId), Option.match({
        onNone: () => Effect.fail(new InvalidRequest({ reason: `run ${runId} names a missing provider thread` })),
        onSome: Effect.succeed
      }))
      const claimed = yield* uow.thread(found.value.threadId, "TurnExecution.continueClaim")(Effect.gen(function*() {
        const current = yield* store.getRun(runId)
        const wait = yield* store.getToolWait(runId)
        if (current._tag === "None" || current.value.status !== "waiting" || wait._tag === "None" || wait.value.state !== "answered") return null
        const now = yield* DateTime.now
        const attempt: RunAttempt = {
          id: ids.next("att") as RunAttempt["id"],
          runId,
          attempt: (yield* store.listAttempts(runId)).length + 1,
          nativeThreadId: wait.value.nativeThreadId,
          status: "running",
          error: null,
          createdAt: now,
          updatedAt: now
        }
        yield* store.insertAttempt(attempt)
        const running: Run = { ...current.value, status: "running", updatedAt: now }
        yield* lifecycle.update(current.value, running)
        yield* store.setRunDriver(runId, driver.driverId)
        yield* store.putToolWait({ ...wait.value, state: "closed", updatedAt: now })
        yield* store.appendEvent({ threadId: running.threadId, type: "run.started", payload: { runId, nativeThreadId: wait.value.nativeThreadId, attempt: attempt.attempt } })
        return { run: running, wait: wait.value, attempt }
      }))
      if (claimed === null) {
        const now = Option.getOrElse(yield* store.getRun(runId), () => found.value)
        return resultFromRecord(now, providerThread.providerInstance)
      }
      let run = claimed.run
      const attempt = claimed.attempt
      const fail = (reason: string, code: "provider_missing" | "provider_protocol" | "output_not_recorded") =>
        Effect.gen(function*() {
          const failing = run
          run = yield* uow.thread(failing.threadId, "TurnExecution.continueFailed")(Effect.gen(function*() {
            yield* store.updateAttempt({ ...attempt, status: "failed", error: reason, updatedAt: yield* DateTime.now })
            return yield* finishRun(failing, "failed", "after_provider", reason, code)
          }))
          return resultFromRecord(run, providerThread.providerInstance)
        })
      const adapter = yield* Effect.either(registry.get(providerThread.providerInstance))
      if (adapter._tag === "Left") return yield* fail(`provider unavailable: ${adapter.left.message}`, "provider_missing")
      const native = Option.getOrNull(yield* store.getNativeThread(claimed.wait.nativeThreadId))
      const continueTurn = adapter.right.continueTurn
      if (native === null || continueTurn === undefined) {
        return yield* fail(native === null ? "the native thread of the tool calls is gone" : `provider ${adapter.right.instance} cannot continue a turn after tool results`, native === null ? "provider_missing" : "provider_protocol")
      }
      const output = turnStream.output(run, native, [])
      const clientTools = toolDefinitions(yield* store.getRunTools(runId))
      const offloadControl = (yield* OffloadControls.resolve(store, run.threadId)).resolved
      const outcome = yield* output.consume(continueTurn({
        nativeRef: native.nativeRef,
        runId,
        toolResults: (claimed.wait.results ?? []).map((r) => ({ toolCallId: r.toolCallId, output: r.output, isError: r.isError })),
        ...(clientTools.length === 0 ? {} : { tools: clientTools }),
        localTools: [threadRead.tool(run.threadId)],
        offloadControl
      })).pipe(
        (work) => withinTurnTimeout(work, output, adapter.right.instance, "continueTurn"),
        Effect.either
      )
      if (outcome._tag === "Left" && outcome.left._tag !== "ProviderError") return yield* fail(`provider output could not be recorded: ${outcome.left.message}`, "output_not_recorded")
      const settledRun = run
      const written = yield* Effect.either(uow.thread(run.threadId, "TurnExecution.continued")(Effect.gen(function*() {
        const now = yield* DateTime.now
        // The run under this unit's lock, then the turn's last arrival if it came with the turn's end (as `completed`).
        const found = yield* store.getRun(runId)
        const neverRead = found._tag === "Some" && found.value.stopPoint === "before_provider"
        const marked = yield* output.settle(neverRead)
        const before = marked && neverRead ? yield* store.getRun(runId) : found
        const stoppedByUser = before._tag === "Some" && before.value.status === "interrupted"
        if (outcome._tag === "Left") {
          // The provider failed after it read the results (or could not tell): what arrived stays, the run ends.
          const error = ProviderFailure.classify(outcome.left as ProviderError)
          yield* output.flush(error.code === "interrupted")
          if (output.tokens !== null) yield* addRunCost(settledRun, adapter.right, output.tokens, now)
          if (error.code === "timeout") yield* distrustNative(settledRun.threadId, native, "continuation timed out")
          const status = error.code === "interrupted" ? "interrupted" as const : "failed" as const
          yield* store.updateAttempt({ ...attempt, status: status === "interrupted" ? "interrupted" : "failed", error: error.message, updatedAt: now })
          if (stoppedByUser) return before.value
          return yield* finishRun(settledRun, status, "after_provider", error.message, runFailureCodeOfProvider(error.code))
        }
        const interrupted = output.interrupted || stoppedByUser
        const waitFor = interrupted ? [] : output.pendingToolCalls.filter((id) => output.openCallIds.includes(id))
        const settled = waitFor.length > 0 ? yield* output.hold() : { recorded: yield* output.flush(interrupted), held: [] }
        const items = settled.recorded
        if (output.tokens !== null) yield* addRunCost(settledRun, adapter.right, output.tokens, now)
        const { usage: checked, anomaly } = UsageSanity.check(output.usage, providerThread.contextWindow, config.budget.defaultWindow)
        // Baton's estimate grows by what this request added (the results) and what came back; a trusted report is
        // stored in Baton's units under the calibration in force (a continuation teaches no sample: the turn's
        // sample base was the first request's).
        const currentNative = Option.getOrElse(yield* store.getNativeThread(native.id), () => native)
        const added = (claimed.wait.results ?? []).reduce((n, r) => n + counter.count(r.output), 0) + items.reduce((n, i) => n + i.tokens, 0)
        const ratio = (yield* calibration.current(providerThread.providerInstance)).ratio
        const estimatedTokens = checked !== null ? Calibration.toRaw(ratio, checked.usedTokens) : currentNative.estimatedTokens + added
        // A rejection's floor rises by what the continuation added (see `turnCompleted`).
        yield* store.recordNativeUsage(native.id, checked, estimatedTokens, now, Calibration.apply(ratio, added))
        if (output.usage !== null) {
          yield* store.appendEvent({ threadId: settledRun.threadId, type: "usage.reported", payload: {
            nativeThreadId: native.id,
            usage: anomaly === null ? output.usage : JSON.parse(JSON.stringify(output.usage)),
            trusted: checked !== null,
            ...(anomaly === null ? {} : { anomaly, estimateUsed: estimatedTokens })
          } })
        }
        yield* store.updateAttempt({ ...attempt, status: output.interrupted ? "interrupted" : "completed", updatedAt: now })
        if (stoppedByUser) return before.value
        if (interrupted) {
          return yield* finishRun(settledRun, "interrupted", "after_provider", "interrupted by the user during the provider turn", "interrupted_by_user")
        }
        if (waitFor.length > 0) return yield* toolWaits.enter(settledRun, native, waitFor, settled.held)
        // The watermark moves to this run when it stood just before it (one statement).
        yield* store.updateSyncedRunSeqIfNext(providerThread.id, settledRun.seq, now)
        const done: Run = { ...settledRun, status: "completed", updatedAt: now }
        yield* lifecycle.update(settledRun, done)
        yield* store.appendEvent({ threadId: settledRun.threadId, type: "run.completed", payload: { runId, itemCount: items.length } })
        return done
      })))
      if (written._tag === "Left") return yield* fail(`provider output could not be recorded: ${written.left.message}`, "output_not_recorded")
      run = written.right
      if (outcome._tag === "Left" && run.status === "failed") yield* logProviderFailure(run, ProviderFailure.classify(outcome.left as ProviderError))
      return resultFromRecord(run, providerThread.providerInstance)
    })

    return {
      /**
       * Drives the queued run `runId` to a terminal status and returns its result; a run that is not queued (or not
       * the thread's first unfinished run) is returned as it is. Provider faults end the run `failed`/`interrupted`
       * (they do not fail this effect). Fails with `RunNotFound`, `UnknownProvider`/`InvalidRequest` (the run's
       * provider is not usable here: the run is ended `failed`), `PersistenceError`, `ConcurrentModification`.
       */
      run: processRun,
      /** Continues a waiting run whose tool results were posted (see `continueRun`). */
      continueRun
    }
  })
}) {}
