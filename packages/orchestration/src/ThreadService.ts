/**
 * ThreadService: the orchestrator's command surface — create a thread, send a user message (a run), interrupt a
 * run, switch the provider for the next run, `/compact`, `/offload` — plus the reads the apps need.
 *
 * It owns the run lifecycle (`queued` -> `starting` -> `running` -> terminal) and the command receipts (a command
 * id seen before returns its first result). History decisions are delegated to ProviderTurnStartService and
 * ContextHandoffDelivery, `/compact` to ThreadCompaction, `/offload` to ThreadOffload.
 */
import {
  Commands,
  CompactReport,
  CreateThreadResult,
  ForkResult,
  InvalidRequest,
  MergeResult,
  OffloadReport,
  type ProviderInstance,
  ProviderError,
  type ProviderErrorCode,
  type NativeThread,
  type ProviderThread,
  type Run,
  type RunAttempt,
  RunId,
  RunInProgress,
  RunNotFound,
  type RunFailureCode,
  runFailureCodeOfProvider,
  type RunStopPoint,
  SendResult,
  SwitchResult,
  terminalRunStatuses,
  type Thread,
  ThreadNotFound,
  type ThreadId,
  type TurnStartReport
} from "@baton/contracts"
import { Calibration, TokenCounter } from "@baton/context"
import { ThreadStore, UnitOfWork } from "@baton/persistence"
import { type ProviderAdapter, ProviderRegistry } from "@baton/providers"
import { DateTime, Duration, Effect, Option, ParseResult, Schema } from "effect"
import * as CommandReceipts from "./CommandReceipts.js"
import { ContextHandoffDelivery } from "./ContextHandoffDelivery.js"
import { DriverRegistry } from "./DriverRegistry.js"
import { IdGenerator } from "./IdGenerator.js"
import { ItemLog, type NewItem } from "./ItemLog.js"
import { OrchestratorConfig } from "./OrchestratorConfig.js"
import * as UsageSanity from "./UsageSanity.js"
import { ProviderCalibration } from "./ProviderCalibration.js"
import { ProviderTurnStartService, type TurnStartPlan } from "./ProviderTurnStartService.js"
import { notCompacted, ThreadCompaction } from "./ThreadCompaction.js"
import { ThreadLineage } from "./ThreadLineage.js"
import { defaultKeepTokens, ThreadOffload } from "./ThreadOffload.js"

/** The results of the commands (schemas in contracts), under the names this module exported before. */
export { ForkResult, MergeResult, SendResult } from "@baton/contracts"

/** A SendMessage receipt as written when the run was queued, before the run ended. */
const QueuedReceipt = Schema.Struct({ runId: RunId })

/** A SendMessage receipt: the run's `SendResult` once it ended, else the queued run (members tried in this order). */
const SendReceipt = Schema.Union(SendResult, QueuedReceipt)

/**
 * Checks a command against its schema (a caller may have built it without validation): a violation is an
 * `InvalidRequest` whose reason is the schema's messages (e.g. the lone surrogate of `Commands.PromptText`).
 */
const validateCommand = <A, I>(schema: Schema.Schema<A, I>, command: A) =>
  Schema.validate(schema)(command).pipe(
    Effect.mapError((e) =>
      new InvalidRequest({ reason: ParseResult.ArrayFormatter.formatErrorSync(e).map((i) => i.message).join("; ") })
    )
  )

const producedKinds = new Set(["assistant_message", "tool_call", "tool_result", "reasoning", "error", "summary"])
const toolCallStates = new Set(["answered", "dangling", "interrupted"])

/**
 * Keeps a provider's output recordable whatever an adapter returns: an unknown kind becomes an `error` item that
 * quotes it, an unknown tool-call state becomes `null`, non-string text is stringified. Nothing is dropped.
 */
const normalizeProduced = (p: ProviderAdapter.ProducedItem): NewItem => {
  const text = typeof p.text === "string" ? p.text : JSON.stringify(p.text) ?? ""
  const known = producedKinds.has(p.kind)
  return {
    kind: known ? p.kind : "error",
    text: known ? text : `unrecognised ${JSON.stringify(String(p.kind))} item from the provider: ${text}`,
    toolCallId: typeof p.toolCallId === "string" ? p.toolCallId : null,
    toolName: typeof p.toolName === "string" ? p.toolName : null,
    messageId: typeof p.messageId === "string" ? p.messageId : null,
    isError: p.isError === true,
    toolCallState: p.toolCallState !== null && toolCallStates.has(p.toolCallState) ? p.toolCallState : null
  }
}

/** Provider error codes after which the provider did not read the prompt: the run is a missed run. */
const promptNotReadCodes: ReadonlySet<ProviderErrorCode> = new Set(["refused", "interrupted", "unavailable", "overflow", "ack_lost", "thread_not_found"])

/**
 * Context overflows one run recovers from before it fails: history deferred, then a replacement native thread, then
 * (the replacement was owed history) history deferred again. A fourth overflow means the prompt alone does not fit
 * an empty native thread; the prompt is never truncated, so the run fails.
 */
const maxOverflowRetries = 3

/** The text of the `tool_result` Baton records for a tool call its turn left without one. */
export const unansweredToolResultText = (state: "interrupted" | "dangling") =>
  state === "interrupted"
    ? "[interrupted] The user interrupted the turn while this tool call ran; it returned no result."
    : "[no result] The turn ended without a result for this tool call."

/**
 * Closes the tool calls a turn left open, at append time (items are never edited): each `tool_call` of `items`
 * with a call id and no later `tool_result` of the same id gets `toolCallState` `interrupted` (the turn stopped at
 * an interrupt) or `dangling` (it ended without the result), and a synthetic error `tool_result` answering it is
 * appended after the turn's items. Every tool call in the record then has its result, so any history Baton later
 * renders (inline or injected) keeps the tool unit whole and is a well-formed request for APIs that reject a tool
 * use without its result. Returns `items` unchanged when nothing is open.
 */
export const closeOpenToolCalls = (items: ReadonlyArray<NewItem>, interrupted: boolean): ReadonlyArray<NewItem> => {
  const state = interrupted ? "interrupted" as const : "dangling" as const
  const out: Array<NewItem> = []
  const answers: Array<NewItem> = []
  items.forEach((item, i) => {
    const open = item.kind === "tool_call" && item.toolCallId !== null &&
      !items.some((r, j) => j > i && r.kind === "tool_result" && r.toolCallId === item.toolCallId)
    if (!open) return void out.push(item)
    out.push({ ...item, toolCallState: state })
    answers.push({
      kind: "tool_result",
      text: unansweredToolResultText(state),
      toolCallId: item.toolCallId,
      toolName: item.toolName,
      messageId: null,
      isError: true,
      toolCallState: null
    })
  })
  return answers.length === 0 ? items : [...out, ...answers]
}

export class ThreadService extends Effect.Service<ThreadService>()("@baton/orchestration/ThreadService", {
  effect: Effect.gen(function*() {
    const uow = yield* UnitOfWork
    const driver = yield* DriverRegistry
    const store = yield* ThreadStore
    const ids = yield* IdGenerator
    const registry = yield* ProviderRegistry.ProviderRegistry
    const counter = yield* TokenCounter.TokenCounter
    const turnStart = yield* ProviderTurnStartService
    const delivery = yield* ContextHandoffDelivery
    const compaction = yield* ThreadCompaction
    const offloader = yield* ThreadOffload
    const itemLog = yield* ItemLog
    const lineage = yield* ThreadLineage
    const calibration = yield* ProviderCalibration
    const config = yield* OrchestratorConfig
    const interruptTimeout = Duration.millis(config.interruptTimeoutMillis)

    /**
     * Asks the provider to stop the turn on `native` and reads the native thread back to learn whether it read
     * `runId`'s prompt. Each call is bounded by `interruptTimeoutMillis`. `answered`: the provider acknowledged the
     * interrupt (when it did not, the native thread may still be running a turn Baton no longer follows); `read`:
     * `"unknown"` when the adapter cannot read threads back or the read failed.
     */
    const stopAndReadBack = (adapter: ProviderAdapter.ProviderAdapterShape, native: NativeThread, runId: string) =>
      Effect.gen(function*() {
        const stopped = yield* adapter.interrupt(native.nativeRef).pipe(Effect.timeout(interruptTimeout), Effect.either)
        let read: boolean | "unknown" = "unknown"
        if (adapter.readThread !== undefined) {
          const back = yield* adapter.readThread(native.nativeRef).pipe(Effect.timeout(interruptTimeout), Effect.option)
          if (back._tag === "Some") read = back.value.runIds.includes(runId)
        }
        return { answered: stopped._tag === "Right", read }
      })

    /** Stops trusting a native thread: the next turn start replaces it and owes the new one the whole history. */
    const distrustNative = (threadId: ThreadId, native: NativeThread, reason: string) =>
      Effect.gen(function*() {
        const current = Option.getOrElse(yield* store.getNativeThread(native.id), () => native)
        if (current.status !== "active") return
        yield* store.updateNativeThread({ ...current, status: "replaced", updatedAt: yield* DateTime.now })
        yield* store.appendEvent({ threadId, type: "native_thread.replaced", payload: { nativeThreadId: native.id, reason } })
      })

    const getThread = (threadId: ThreadId) =>
      Effect.flatMap(store.getThread(threadId), Option.match({
        onNone: () => Effect.fail(new ThreadNotFound({ threadId })),
        onSome: Effect.succeed
      }))

    const getProviderThread = (thread: Thread) =>
      thread.activeProviderThreadId === null
        ? Effect.fail(new InvalidRequest({ reason: `thread ${thread.id} has no provider; switch to one first` }))
        : Effect.flatMap(store.getProviderThread(thread.activeProviderThreadId), Option.match({
          onNone: () => Effect.fail(new InvalidRequest({ reason: `thread ${thread.id} lost its provider thread` })),
          onSome: Effect.succeed
        }))

    /**
     * Runs `effect` once per command: a repeated command id returns the stored result (decoded with `schema`); one
     * reused for another command type, thread or payload fails with `InvalidRequest` (see CommandReceipts).
     */
    const withReceipt = <A, I, E, R>(
      command: Commands.Command,
      threadId: ThreadId | null,
      schema: Schema.Schema<A, I>,
      effect: Effect.Effect<A, E, R>
    ) =>
      Effect.gen(function*() {
        const key = CommandReceipts.keyOf(command, threadId)
        const seen = yield* CommandReceipts.find(store, key)
        if (seen._tag === "Some") return yield* CommandReceipts.decode(schema, command.commandId, seen.value.result)
        return yield* CommandReceipts.write(store, key, schema, yield* effect)
      })

    const ensureProviderThread = Effect.fn("ThreadService.ensureProviderThread")(function*(
      threadId: ThreadId,
      adapter: ProviderAdapter.ProviderAdapterShape
    ) {
      const found = yield* store.findProviderThread(threadId, adapter.instance)
      if (found._tag === "Some") return found.value
      const now = yield* DateTime.now
      const providerThread: ProviderThread = {
        id: ids.next("pth") as ProviderThread["id"],
        threadId,
        providerInstance: adapter.instance,
        model: adapter.model,
        contextWindow: adapter.modelContextWindow,
        activeNativeThreadId: null,
        syncedRunSeq: 0,
        createdAt: now,
        updatedAt: now
      }
      yield* store.insertProviderThread(providerThread)
      yield* store.appendEvent({ threadId, type: "provider_thread.created", payload: {
        providerThreadId: providerThread.id,
        providerInstance: adapter.instance
      } })
      return providerThread
    })

    /** Creates a thread whose first provider is `providerInstance`. Fails with `UnknownProvider`. */
    const createThread = Effect.fn("ThreadService.createThread")(function*(command: Commands.CreateThread) {
      return yield* withReceipt(
        command,
        null,
        CreateThreadResult,
        Effect.gen(function*() {
          const adapter = yield* registry.get(command.providerInstance)
          const now = yield* DateTime.now
          const thread: Thread = {
            id: ids.next("thr") as ThreadId,
            title: command.title,
            activeProviderThreadId: null,
            createdAt: now,
            updatedAt: now
          }
          yield* store.insertThread(thread)
          yield* store.appendEvent({ threadId: thread.id, type: "thread.created", payload: { title: thread.title }, commandId: command.commandId })
          const providerThread = yield* ensureProviderThread(thread.id, adapter)
          yield* store.updateThread({ ...thread, activeProviderThreadId: providerThread.id })
          return { threadId: thread.id }
        })
      ).pipe(uow.global("ThreadService.createThread"), Effect.map((r) => r.threadId))
    })

    /**
     * Switches the provider for the next run. The destination is owed every run it has not seen: a `switch`
     * handoff covers them (none when there is nothing new). Fails with `ThreadNotFound`, `UnknownProvider`.
     */
    const switchProvider = Effect.fn("ThreadService.switchProvider")(function*(command: Commands.SwitchProvider) {
      return yield* withReceipt(
        command,
        command.threadId,
        SwitchResult,
        Effect.gen(function*() {
          const thread = yield* getThread(command.threadId)
          const adapter = yield* registry.get(command.providerInstance)
          const active = yield* store.findActiveRun(thread.id)
          if (active._tag === "Some") return yield* new RunInProgress({ threadId: thread.id, runId: active.value.id })
          const target = yield* ensureProviderThread(thread.id, adapter)
          if (target.id === thread.activeProviderThreadId) return { providerThreadId: target.id, handoffId: null }
          const nextSeq = yield* store.nextRunSeq(thread.id)
          // Runs the destination's active native thread ran itself (the provider read them) are not owed again.
          // So are runs whose history a handoff toward it already owes or delivered (a fork or merge run, forwarding).
          const covered = yield* delivery.coveredRuns(target, target.activeNativeThreadId)
          const unseen = (yield* store.listRunsBetween(thread.id, target.syncedRunSeq, nextSeq)).filter((r) =>
            !(target.activeNativeThreadId !== null && r.nativeThreadId === target.activeNativeThreadId &&
              r.stopPoint !== "before_provider") && !covered.has(r.id)
          )
          const handoff = yield* delivery.createHandoff(thread.id, "switch", target, unseen)
          const now = yield* DateTime.now
          yield* store.updateProviderThread({ ...target, syncedRunSeq: nextSeq - 1, updatedAt: now })
          yield* store.updateThread({ ...thread, activeProviderThreadId: target.id, updatedAt: now })
          yield* store.appendEvent({ threadId: thread.id, type: "provider.switched", payload: {
            from: thread.activeProviderThreadId,
            to: target.id,
            handoffId: handoff?.id ?? null
          }, commandId: command.commandId })
          return { providerThreadId: target.id, handoffId: handoff?.id ?? null }
        })
      ).pipe(uow.thread(command.threadId, "ThreadService.switchProvider"))
    })

    const appendItems = (threadId: ThreadId, run: Run, items: ReadonlyArray<NewItem>) =>
      itemLog.append(threadId, run.id, items)

    /** Queues a run: the run row, its `user_message` item and the `run.queued` event, in one transaction. */
    const queueRun = Effect.fn("ThreadService.queueRun")(function*(command: Commands.SendMessage, behind: boolean) {
      yield* validateCommand(Commands.SendMessage, command)
      const thread = yield* getThread(command.threadId)
      const active = yield* store.findActiveRun(thread.id)
      if (active._tag === "Some" && !behind) return yield* new RunInProgress({ threadId: thread.id, runId: active.value.id })
      const providerThread = yield* getProviderThread(thread)
      // A provider this process does not have fails the command before anything is written (UnknownProvider).
      yield* registry.get(providerThread.providerInstance)
      const now = yield* DateTime.now
      const run: Run = {
        id: ids.next("run") as Run["id"],
        threadId: thread.id,
        seq: yield* store.nextRunSeq(thread.id),
        providerThreadId: providerThread.id,
        status: "queued",
        prompt: command.text,
        stopPoint: null,
        failureReason: null,
        failureCode: null,
        nativeThreadId: null,
        createdAt: now,
        updatedAt: now
      }
      yield* store.insertRun(run)
      yield* store.setRunDriver(run.id, driver.driverId)
      yield* appendItems(thread.id, run, [{
        kind: "user_message",
        text: command.text,
        toolCallId: null,
        toolName: null,
        messageId: null,
        isError: false,
        toolCallState: null
      }])
      yield* store.appendEvent({ threadId: thread.id, type: "run.queued", payload: { runId: run.id, seq: run.seq, providerThreadId: providerThread.id }, commandId: command.commandId })
      // The command is recorded with the run it created, in the same transaction: a retry after a crash finds the
      // run instead of queueing a second one. The receipt's result is completed when the run ends.
      yield* CommandReceipts.write(store, CommandReceipts.keyOf(command, thread.id), QueuedReceipt, { runId: run.id })
      return run
    }, (effect, command) => uow.thread(command.threadId, "ThreadService.queueRun")(effect))

    /**
     * Ends a run once: a run that another path already ended (an interrupt, recovery) keeps its first ending.
     * `reason` is the one-line reason for people, `code` the same for code.
     */
    const finishRun = (run: Run, status: "interrupted" | "failed", stopPoint: RunStopPoint, reason: string, code: RunFailureCode) =>
      Effect.gen(function*() {
        const current = yield* store.getRun(run.id)
        if (current._tag === "Some" && terminalRunStatuses.includes(current.value.status)) return current.value
        const now = yield* DateTime.now
        const done: Run = { ...run, status, stopPoint, failureReason: reason, failureCode: code, updatedAt: now }
        yield* store.updateRun(done)
        yield* store.appendEvent({ threadId: run.threadId, type: status === "failed" ? "run.failed" : "run.interrupted", payload: {
          runId: run.id,
          stopPoint,
          reason,
          code
        } })
        return done
      })

    /** Drives a queued run through turn start and the provider turn to a terminal status. */
    const processRun = Effect.fn("ThreadService.processRun")(function*(runId: Run["id"]) {
      const found = yield* store.getRun(runId)
      if (found._tag === "None") return yield* new RunNotFound({ runId })
      let run = found.value
      // The run's provider must be usable here; if not (e.g. a process configured without it), a queued run ends
      // `failed` before the provider instead of staying `queued` and blocking the thread, and the error is returned.
      const lookedUp = yield* Effect.either(Effect.gen(function*() {
        const providerThread = yield* Effect.flatMap(store.getProviderThread(run.providerThreadId), Option.match({
          onNone: () => Effect.fail(new InvalidRequest({ reason: `run ${run.id} names a missing provider thread` })),
          onSome: Effect.succeed
        }))
        return { providerThread, adapter: yield* registry.get(providerThread.providerInstance) }
      }))
      if (lookedUp._tag === "Left") {
        if (run.status === "queued") {
          yield* uow.thread(run.threadId, "ThreadService.failRun")(finishRun(run, "failed", "before_provider", `provider unavailable: ${lookedUp.left.message}`,
            lookedUp.left._tag === "PersistenceError" ? "turn_start_failed" : "provider_missing"))
        }
        return yield* lookedUp.left
      }
      const providerThreadAtStart = lookedUp.right.providerThread
      const providerThread = providerThreadAtStart
      const adapter = lookedUp.right.adapter
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
      if (run.status !== "queued") return result(null, null, providerThread.contextWindow ?? 0)

      // Read and move to `starting` in one transaction: an interrupt written in between is never overwritten.
      const claimed = yield* uow.thread(run.threadId, "ThreadService.claimRun")(Effect.gen(function*() {
        const current = yield* store.getRun(runId)
        if (current._tag === "None" || current.value.status !== "queued") return null
        // Runs of a thread start in seq order, one at a time (across processes: this runs under the thread's lock).
        const first = yield* store.findFirstUnfinishedRun(current.value.threadId)
        if (first._tag === "Some" && first.value.id !== runId) return null
        const starting: Run = { ...current.value, status: "starting", updatedAt: yield* DateTime.now }
        yield* store.updateRun(starting)
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
      const retries = { lost: 0, overflow: 0 }

      /**
       * Recovery from a context overflow (`ProviderError` code `overflow`: the provider rejected the request before
       * reading it). No run fails because history does not fit (invariant 1): the attempt's inline deliveries go
       * back to `deferred`, and the turn is attempted again with the prompt unchanged.
       * - If the attempt carried history (inline, injected or a pointer), the native thread is recorded as full
       *   (`usedTokens` = the budget window): the next budget is 0, everything owed is deferred and the prompt goes
       *   alone. The next usage report (or `/compact`) corrects the figure.
       * - If the prompt went alone, the native thread itself is full: it is no longer trusted and the retry starts
       *   a replacement, owed the whole history under a fresh budget.
       * Returns `false` (nothing written) when a user interrupt ended the run meanwhile: it is not retried.
       */
      const overflowRecovery = (plan: TurnStartPlan, attempt: RunAttempt, error: ProviderError) =>
        uow.thread(run.threadId, "ThreadService.overflowRecovery")(Effect.gen(function*() {
          const current = yield* store.getRun(run.id)
          if (current._tag === "Some" && current.value.status === "interrupted") return false
          const now = yield* DateTime.now
          const carriedHistory = plan.inlineHistory !== null || plan.report.mode === "injected"
          yield* delivery.revertToDeferred(run.threadId, plan.inlineDeliveries, "context overflow: the provider did not read the turn")
          yield* store.updateAttempt({ ...attempt, status: "failed", error: error.message, updatedAt: now })
          const window = plan.report.budget.window
          if (carriedHistory) {
            const native = Option.getOrElse(yield* store.getNativeThread(plan.native.id), () => plan.native)
            yield* store.updateNativeThread({
              ...native,
              usage: { usedTokens: window, maxTokens: window },
              estimatedTokens: Math.max(native.estimatedTokens, window),
              updatedAt: now
            })
          } else {
            yield* distrustNative(run.threadId, plan.native, "context overflow with the prompt alone: the native thread is full")
          }
          yield* store.appendEvent({ threadId: run.threadId, type: "context.overflowed", payload: {
            runId: run.id,
            nativeThreadId: plan.native.id,
            attempt: attempt.attempt,
            recovery: carriedHistory ? "defer_history" : "replace_native_thread",
            window
          } })
          const again: Run = { ...run, status: "starting", nativeThreadId: null, updatedAt: now }
          yield* store.updateRun(again)
          run = again
          retries.overflow++
          return true
        }))
      const attemptTurn = () => Effect.gen(function*() {
        const providerThread = yield* Effect.map(store.getProviderThread(providerThreadAtStart.id), Option.getOrElse(() => providerThreadAtStart))
        const prepared = yield* turnStart.prepare(run, providerThread, adapter).pipe(
          Effect.either
        )
        if (prepared._tag === "Left") {
          const failed = prepared.left
          const code = failed._tag === "ProviderError" ? runFailureCodeOfProvider(failed.code) : "turn_start_failed"
          run = yield* finishRun(run, "failed", "before_provider", failed.message, code)
          return result(null, null, providerThread.contextWindow ?? 0)
        }
        const plan = prepared.right
        const window = plan.report.budget.window
        if (plan.report.injectionError !== null) {
          run = yield* finishRun(run, "failed", "before_provider", `history injection unconfirmed: ${plan.report.injectionError}`, "injection_unconfirmed")
          return result(plan.report, { generation: plan.native.generation, used: plan.native.usage?.usedTokens ?? null }, window)
        }

        // One transaction: the attempt, the interrupt check and the move to `running`.
        const queuedRun = run
        const begun = yield* uow.thread(queuedRun.threadId, "ThreadService.beginAttempt")(Effect.gen(function*() {
          const attemptNo = (yield* store.listAttempts(queuedRun.id)).length + 1
          const startedAt = yield* DateTime.now
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
          // Re-read: an interrupt that arrived while history was prepared stops the run before the provider starts.
          const current = yield* store.getRun(queuedRun.id)
          if (current._tag === "Some" && current.value.status === "interrupted") {
            yield* delivery.revertToDeferred(queuedRun.threadId, plan.inlineDeliveries, "run interrupted before the provider started")
            yield* store.insertAttempt({ ...attempt, status: "interrupted", error: "interrupted before start" })
            return { interrupted: current.value, attempt } as const
          }
          yield* store.insertAttempt(attempt)
          const running: Run = { ...queuedRun, status: "running", nativeThreadId: plan.native.id, updatedAt: startedAt }
          yield* store.updateRun(running)
          yield* store.appendEvent({ threadId: queuedRun.threadId, type: "run.started", payload: { runId: queuedRun.id, nativeThreadId: plan.native.id, attempt: attemptNo } })
          return { interrupted: null, running, attempt } as const
        }))
        if (begun.interrupted !== null) {
          run = begun.interrupted
          return result(plan.report, { generation: plan.native.generation, used: plan.native.usage?.usedTokens ?? null }, window)
        }
        run = begun.running
        const attempt = begun.attempt

        // A provider turn that never returns must not leave the run `running`: Baton stops waiting after
        // `turnTimeoutMillis` and handles it like a provider-reported timeout.
        const outcome = yield* adapter.startTurn({
          nativeRef: plan.native.nativeRef,
          runId: run.id,
          prompt: run.prompt,
          inlineHistory: plan.inlineHistory
        }).pipe(
          Effect.timeoutFail({
            duration: Duration.millis(config.turnTimeoutMillis),
            onTimeout: () =>
              new ProviderError({
                provider: adapter.instance,
                operation: "startTurn",
                code: "timeout",
                reason: `no answer within ${config.turnTimeoutMillis} ms (turn timeout)`,
                retryable: true
              })
          }),
          Effect.either
        )

        if (outcome._tag === "Left") {
          const error = outcome.left
          if (error.code === "overflow" && retries.overflow < maxOverflowRetries) {
            const retried = yield* overflowRecovery(plan, attempt, error)
            if (retried) return "retry" as const
          }
          if (error.code === "thread_not_found" && retries.lost === 0) {
            retries.lost++
            const lostRun = run
            run = yield* uow.thread(lostRun.threadId, "ThreadService.lostNativeThread")(Effect.gen(function*() {
              const now = yield* DateTime.now
              yield* delivery.revertToDeferred(lostRun.threadId, plan.inlineDeliveries, "the provider lost the native thread")
              yield* store.updateAttempt({ ...attempt, status: "failed", error: error.message, updatedAt: now })
              yield* store.updateNativeThread({ ...plan.native, status: "replaced", updatedAt: now })
              yield* store.appendEvent({ threadId: lostRun.threadId, type: "native_thread.replaced", payload: {
                nativeThreadId: plan.native.id,
                reason: "the provider no longer has it"
              } })
              const again: Run = { ...lostRun, status: "starting", nativeThreadId: null, updatedAt: now }
              yield* store.updateRun(again)
              return again
            }))
            return "retry" as const
          }
          // A timeout leaves it unknown whether the provider read the prompt: stop the turn and read the native
          // thread back. Where that cannot tell, or the provider does not acknowledge the interrupt (it may still be
          // running the turn), the native thread is no longer trusted.
          let read: boolean | "unknown" = !promptNotReadCodes.has(error.code)
          let untrustedReason: string | null = null
          if (error.code === "timeout") {
            const probe = yield* stopAndReadBack(adapter, plan.native, run.id)
            read = probe.read
            if (!probe.answered) untrustedReason = "turn timed out and the provider did not acknowledge the interrupt"
            else if (probe.read === "unknown") untrustedReason = "turn timed out: cannot tell whether the provider read the prompt"
          }
          const notRead = read !== true
          const status = error.code === "interrupted" ? "interrupted" as const : "failed" as const
          const finished = Effect.gen(function*() {
            if (read === false) {
              yield* delivery.revertToDeferred(run.threadId, plan.inlineDeliveries, `turn did not start: ${error.code}`)
            } else if (read === true && error.code === "timeout") {
              yield* delivery.markSettled(run.threadId, plan.inlineDeliveries, "inline")
            }
            // (Unknown: the inline deliveries stay `pending`; the replacement supersedes them.)
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
              yield* store.updateRun(kept)
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
          run = yield* uow.thread(run.threadId, "ThreadService.turnFailed")(finished)
          return result(plan.report, { generation: plan.native.generation, used: plan.native.usage?.usedTokens ?? null }, window)
        }

        const turn = outcome.right
        const completed = Effect.gen(function*() {
          yield* delivery.markSettled(run.threadId, plan.inlineDeliveries, "inline")
          // Whether the turn stopped at an interrupt: the provider says so, or a user interrupt already ended the run.
          const before = yield* store.getRun(run.id)
          const interrupted = turn.interrupted === true || (before._tag === "Some" && before.value.status === "interrupted")
          // The first turn after a resume may replay the session's history at the start of its output: the leading
          // items this native thread already produced — the same item (kind and text) under the same provider id (a
          // tool call or result by its call id, anything else by its message id) — are that replay, not new output,
          // and are not recorded again. Any other turn records everything it returns.
          const produced = turn.items.map(normalizeProduced)
          const afterResume = yield* turnStart.takeReplayWindow(plan.native.id)
          const isTool = (i: NewItem) => (i.kind === "tool_call" || i.kind === "tool_result") && i.toolCallId !== null
          const messageIds = afterResume ? produced.flatMap((i) => isTool(i) || i.messageId === null ? [] : [i.messageId]) : []
          const toolCallIds = afterResume ? produced.flatMap((i) => isTool(i) ? [i.toolCallId!] : []) : []
          const known = messageIds.length + toolCallIds.length === 0
            ? new Set<string>()
            : yield* store.findReplayKeys(run.threadId, plan.native.id, messageIds, toolCallIds)
          const replayed = (i: NewItem) =>
            isTool(i)
              ? known.has(`${i.kind}\u0000tool:${i.toolCallId}\u0000${i.text}`)
              : i.messageId !== null && known.has(`${i.kind}\u0000msg:${i.messageId}\u0000${i.text}`)
          let replay = 0
          while (replay < produced.length && replayed(produced[replay]!)) replay++
          // A tool call and its results are skipped together or kept together (invariant 7).
          for (let moved = true; moved;) {
            const keptResults = new Set(produced.slice(replay).flatMap((i) => i.kind === "tool_result" && i.toolCallId !== null ? [i.toolCallId] : []))
            const split = produced.slice(0, replay).findIndex((i) => i.kind === "tool_call" && i.toolCallId !== null && keptResults.has(i.toolCallId))
            moved = split >= 0
            if (moved) replay = split
          }
          const newItems = produced.slice(replay)
          if (replay > 0) {
            yield* store.appendEvent({ threadId: run.threadId, type: "items.replay_skipped", payload: {
              runId: run.id,
              count: replay,
              messageIds: [...new Set(produced.slice(0, replay).flatMap((i) => i.messageId === null ? [] : [i.messageId]))],
              toolCallIds: [...new Set(produced.slice(0, replay).flatMap((i) => i.toolCallId === null ? [] : [i.toolCallId]))]
            } })
          }
          const items = yield* appendItems(run.threadId, run, closeOpenToolCalls(newItems, interrupted))
          const now = yield* DateTime.now
          const inlineTokens = plan.inlineHistory === null ? 0 : counter.count(plan.inlineHistory)
          const sent = plan.requestTokens + inlineTokens + items.reduce((n, i) => n + i.tokens, 0)
          // Usage sanity: a report above the window is impossible and not trusted; a missing report is not replaced
          // by the previous one. Either way Baton's own estimate (what it sent plus what came back) is used.
          const { usage: checked, anomaly } = UsageSanity.check(turn.usage, plan.providerThread.contextWindow, config.budget.defaultWindow)
          const trusted = checked !== null
          // The status is re-read: an interrupt or timeout may have stopped trusting the native thread meanwhile.
          const nativeNow = yield* store.getNativeThread(plan.native.id)
          // Calibration: between two trusted reports, the usage growth against Baton's count of the same texts (the
          // item texts as the provider counts them, not their rendered cost) teaches the provider's ratio.
          const learned = yield* calibration.learn(run.threadId, plan.providerThread.providerInstance, {
            base: plan.sampleBase,
            reportedUsedTokens: checked?.usedTokens ?? null,
            estimatedTokens: plan.requestTokens + inlineTokens + items.reduce((n, i) => n + counter.count(i.text), 0)
          })
          const native = {
            ...plan.native,
            status: nativeNow._tag === "Some" ? nativeNow.value.status : plan.native.status,
            usage: checked,
            // `estimatedTokens` is Baton's count: a trusted report is stored in Baton's units (the budget scales
            // the estimate back by the ratio when no trusted report exists).
            estimatedTokens: checked !== null
              ? Calibration.toRaw(learned.ratio, checked.usedTokens)
              : plan.native.estimatedTokens + sent,
            updatedAt: now
          }
          yield* store.updateNativeThread(native)
          if (turn.usage !== null) {
            yield* store.appendEvent({ threadId: run.threadId, type: "usage.reported", payload: {
              nativeThreadId: native.id,
              usage: anomaly === null ? turn.usage : JSON.parse(JSON.stringify(turn.usage)),
              trusted,
              ...(anomaly === null ? {} : { anomaly, estimateUsed: native.estimatedTokens })
            } })
            if (anomaly !== null) {
              yield* Effect.logWarning(`untrusted usage report on ${native.id}: ${anomaly}; using the estimate ${native.estimatedTokens}`)
            }
          }
          const fresh = yield* store.getProviderThread(plan.providerThread.id)
          if (fresh._tag === "Some" && fresh.value.syncedRunSeq === run.seq - 1) {
            yield* store.updateProviderThread({ ...fresh.value, syncedRunSeq: run.seq, updatedAt: now })
          }
          // Late output: the turn ran on a native thread that has since been replaced (an interrupt it never answered,
          // a timeout), or the user has moved to another provider meanwhile. Every provider thread that already
          // holds or is owed this run (its watermark is past it) but cannot have seen this output is owed it.
          const endedMeanwhile = native.status !== "active" ||
            (fresh._tag === "Some" && fresh.value.activeNativeThreadId !== plan.native.id) ||
            (before._tag === "Some" && terminalRunStatuses.includes(before.value.status))
          if (items.length > 0 && endedMeanwhile) {
            for (const other of yield* store.listProviderThreads(run.threadId)) {
              const own = other.id === plan.providerThread.id
              const sawIt = own && native.status === "active" && other.activeNativeThreadId === plan.native.id
              const pastRun = own ? (fresh._tag === "Some" ? fresh.value.syncedRunSeq : 0) >= run.seq || !sawIt : other.syncedRunSeq >= run.seq
              if (sawIt || !pastRun) continue
              const target = own && fresh._tag === "Some" ? fresh.value : other
              yield* delivery.createHandoff(run.threadId, "missed_run", target, [run], items, { lateOutputOf: run.id })
            }
          }
          yield* store.updateAttempt({ ...attempt, status: turn.interrupted === true ? "interrupted" : "completed", updatedAt: now })
          // An interrupt that arrived while the provider ran is kept: the output is recorded, the status stays.
          const current = yield* store.getRun(run.id)
          if (current._tag === "Some" && current.value.status === "interrupted") {
            // The provider did read the prompt (the turn completed): record that, whatever the interrupt assumed.
            const kept: Run = { ...current.value, stopPoint: "after_provider", nativeThreadId: plan.native.id, updatedAt: now }
            yield* store.updateRun(kept)
            return { done: kept, native }
          }
          if (turn.interrupted === true) {
            // The provider stopped at an interrupt before the user's interrupt command recorded it (or one from
            // elsewhere): the run ends interrupted, after the provider read the prompt.
            const ended = yield* finishRun({ ...run, nativeThreadId: plan.native.id }, "interrupted", "after_provider", "interrupted by the user during the provider turn", "interrupted_by_user")
            return { done: ended, native }
          }
          const done: Run = { ...run, status: "completed", updatedAt: now }
          yield* store.updateRun(done)
          yield* store.appendEvent({ threadId: run.threadId, type: "run.completed", payload: { runId: run.id, itemCount: items.length } })
          return { done, native }
        })
        const recorded = yield* Effect.either(uow.thread(run.threadId, "ThreadService.turnCompleted")(completed))
        if (recorded._tag === "Left") {
          // Never leave a run `running`: the provider read the prompt, but its output could not be recorded.
          const reason = `provider output could not be recorded: ${recorded.left.message}`
          const startedRun = run
          run = yield* uow.thread(startedRun.threadId, "ThreadService.outputNotRecorded")(Effect.gen(function*() {
            yield* store.updateAttempt({ ...attempt, status: "failed", error: reason, updatedAt: yield* DateTime.now })
            return yield* finishRun(startedRun, "failed", "after_provider", reason, "output_not_recorded")
          }))
          return result(plan.report, { generation: plan.native.generation, used: plan.native.usage?.usedTokens ?? null }, window)
        }
        const { done, native } = recorded.right
        run = done
        return result(plan.report, { generation: native.generation, used: native.usage?.usedTokens ?? native.estimatedTokens }, window)
      })

      // At most one retry for a lost native thread and `maxOverflowRetries` for overflows.
      for (let i = 0; i <= 1 + maxOverflowRetries; i++) {
        const attempted = yield* attemptTurn()
        if (attempted !== "retry") return attempted
      }
      return yield* Effect.dieMessage("unreachable: more attempts than the retry bounds allow")
    })

    /**
     * Sends a user message: queues a run and drives it to a terminal status. The prompt reaches the provider
     * byte-identical whatever happens to owed history. Fails with `ThreadNotFound`, `RunInProgress`,
     * `InvalidRequest`; provider faults end the run as `failed`/`interrupted` (they do not fail the command).
     */
    const sendMessage = Effect.fn("ThreadService.sendMessage")(function*(command: Commands.SendMessage) {
      const seen = yield* CommandReceipts.find(store, CommandReceipts.keyOf(command, command.threadId))
      if (seen._tag === "Some") {
        const recorded = yield* CommandReceipts.decode(SendReceipt, command.commandId, seen.value.result)
        if ("status" in recorded) return recorded
        // Recorded when the run was queued, never completed (a crash): finish the same run, never a second one.
        const result = yield* processRun(recorded.runId)
        yield* CommandReceipts.complete(store, command.commandId, SendResult, result)
        return result
      }
      const run = yield* queueRun(command, false)
      const result = yield* processRun(run.id)
      yield* CommandReceipts.complete(store, command.commandId, SendResult, result)
      return result
    })

    /**
     * Queues a run without starting it (the run driver starts it; or a client about to interrupt). A repeated command
     * id returns the run it queued first. With `queueBehind` the run is queued behind the thread's unfinished runs
     * (they run first, in seq order); without it a thread with a run in progress fails with `RunInProgress`.
     */
    const enqueueMessage = (command: Commands.SendMessage, options: { readonly queueBehind?: boolean } = {}) =>
      Effect.gen(function*() {
        const seen = yield* CommandReceipts.find(store, CommandReceipts.keyOf(command, command.threadId))
        if (seen._tag === "Some") {
          const { runId } = yield* CommandReceipts.decode(SendReceipt, command.commandId, seen.value.result)
          const run = yield* store.getRun(runId)
          if (run._tag === "Some") return run.value
        }
        return yield* queueRun(command, options.queueBehind === true)
      })

    /**
     * Interrupts a run. A run not yet started ends `interrupted` before the provider (a missed run); a running run
     * is interrupted at the provider. A terminal run is left as it is. Fails with `RunNotFound`.
     */
    const interrupt = Effect.fn("ThreadService.interrupt")(function*(command: Commands.InterruptRun) {
      const found = yield* store.getRun(command.runId)
      if (found._tag === "None" || found.value.threadId !== command.threadId) return yield* new RunNotFound({ runId: command.runId })
      const run = found.value
      if (run.status === "queued" || run.status === "starting") {
        return yield* finishRun(run, "interrupted", "before_provider", "interrupted by the user before the provider started", "interrupted_by_user")
      }
      if (run.status === "running") {
        // `running` is written just before the provider call: read the native thread back, where the adapter can,
        // to record whether the provider read the prompt (a turn that starts after this is corrected on completion).
        // Where it cannot be told, the native thread is no longer trusted: the next turn start replaces it and owes
        // it the whole history, so the prompt is neither lost nor delivered twice.
        // A provider that does not acknowledge the interrupt within `interruptTimeoutMillis` may still be running the
        // turn: the run ends `interrupted` anyway (the thread accepts the next message) and that native thread is no
        // longer trusted either.
        let read: boolean | "unknown" = "unknown"
        let untrusted: { readonly native: NativeThread; readonly reason: string } | null = null
        const providerThread = yield* store.getProviderThread(run.providerThreadId)
        if (providerThread._tag === "Some" && run.nativeThreadId !== null) {
          const adapter = yield* registry.get(providerThread.value.providerInstance)
          const native = Option.getOrNull(yield* store.getNativeThread(run.nativeThreadId))
          if (native !== null) {
            const probe = yield* stopAndReadBack(adapter, native, run.id)
            read = probe.read
            if (!probe.answered) {
              untrusted = { native, reason: "interrupted mid-turn: the provider did not acknowledge the interrupt" }
            } else if (probe.read === "unknown") {
              untrusted = { native, reason: "interrupted mid-turn: cannot tell whether the provider read the prompt" }
            }
          }
        }
        return yield* uow.thread(run.threadId, "ThreadService.interrupt")(Effect.gen(function*() {
          if (untrusted !== null) yield* distrustNative(run.threadId, untrusted.native, untrusted.reason)
          return yield* finishRun(
            read === true ? run : { ...run, nativeThreadId: null },
            "interrupted",
            read === true ? "after_provider" : "before_provider",
            "interrupted by the user",
            "interrupted_by_user"
          )
        }))
      }
      return run
    })

    /**
     * Restart recovery: ends every run a crashed process left unfinished, so each thread accepts new messages and
     * the next turn start reconciles what the provider may hold. A run that never reached the provider
     * (`queued`/`starting`) ends `interrupted` before the provider (a missed run, recovered at the next turn
     * start); a `running` run ends `interrupted` after the provider: the provider read its prompt, and whatever it
     * produced after the last durable write is not recorded (never replayed into the record from the provider).
     * Returns the runs it ended.
     */
    const recover = Effect.fn("ThreadService.recover")(function*() {
      const unfinished = yield* store.listUnfinishedRuns()
      const openAttempts = yield* store.listOpenAttempts()
      const candidates = new Map<string, Run>(unfinished.map((r) => [r.id as string, r]))
      for (const a of openAttempts) {
        if (!candidates.has(a.runId)) {
          const r = yield* store.getRun(a.runId)
          if (r._tag === "Some") candidates.set(a.runId, r.value)
        }
      }
      // Only the runs of drivers that are gone: another process on the same database (or this incarnation) may be
      // driving the others right now.
      const owners = yield* store.runDrivers([...candidates.values()].map((r) => r.id))
      const alive = yield* driver.aliveAmong([...owners.values()])
      const toCheck = new Map([...candidates].filter(([id]) => {
        const owner = owners.get(id) ?? null
        return owner === null || !alive.has(owner)
      }))
      const ended: Array<Run> = []
      for (const run of toCheck.values()) {
        // An attempt without a recorded outcome (`running` is written just before the provider call) leaves it
        // unknown whether the provider read the prompt: read the native thread back; if that is impossible, stop
        // trusting the native thread (the next turn start replaces it and owes it the whole history, this prompt
        // included). A run still queued or starting never reached the provider.
        const attempt = openAttempts.filter((a) => a.runId === run.id).at(-1) ?? null
        const nativeId = attempt?.nativeThreadId ?? run.nativeThreadId
        let read: boolean | "unknown" = false
        let native: NativeThread | null = null
        if (attempt !== null && nativeId !== null) {
          native = Option.getOrNull(yield* store.getNativeThread(nativeId))
          const providerThread = Option.getOrNull(yield* store.getProviderThread(run.providerThreadId))
          const adapter = providerThread === null ? null : Option.getOrNull(yield* Effect.option(registry.get(providerThread.providerInstance)))
          const back = native === null || adapter?.readThread === undefined
            ? null
            : yield* Effect.option(adapter.readThread(native.nativeRef))
          read = back === null || back._tag === "None" ? "unknown" : back.value.runIds.includes(run.id)
        }
        const untrusted = read === "unknown" ? native : null
        const stopPoint: RunStopPoint = read === true ? "after_provider" : "before_provider"
        const nativeThreadId = read === true ? nativeId : null
        ended.push(yield* uow.thread(run.threadId, "ThreadService.recover")(Effect.gen(function*() {
          const now = yield* DateTime.now
          if (untrusted !== null && untrusted.status === "active") {
            yield* store.updateNativeThread({ ...untrusted, status: "replaced", updatedAt: now })
            yield* store.appendEvent({ threadId: run.threadId, type: "native_thread.replaced", payload: {
              nativeThreadId: untrusted.id,
              reason: "restart: cannot tell whether the provider read an unfinished run"
            } })
          }
          if (attempt !== null) {
            yield* store.updateAttempt({ ...attempt, status: "interrupted", error: "process restarted", updatedAt: now })
          }
          if (terminalRunStatuses.includes(run.status)) {
            // Already ended (e.g. by an interrupt) but its turn's outcome was never recorded: correct where it stopped.
            const corrected: Run = { ...run, stopPoint, nativeThreadId, updatedAt: now }
            yield* store.updateRun(corrected)
            return corrected
          }
          return yield* finishRun(
            { ...run, nativeThreadId },
            "interrupted",
            stopPoint,
            read === true ? "process restarted during the provider turn" : "process restarted before the provider started",
            "process_restarted"
          )
        })))
      }
      return ended
    })

    /**
     * Forks a thread (see `Commands.ForkThread` and ThreadLineage): a new thread on the requested provider (default:
     * the parent's), whose first run holds a copy of the parent's history through `atRunSeq` (default: the last run
     * that has ended), owed by a `fork` handoff. A turn running on the parent is not waited for. Fails with
     * `ThreadNotFound`, `UnknownProvider`, `InvalidRequest`.
     */
    const fork = Effect.fn("ThreadService.fork")(function*(command: Commands.ForkThread) {
      return yield* withReceipt(
        command,
        command.threadId,
        ForkResult,
        Effect.gen(function*() {
          const parent = yield* getThread(command.threadId)
          const instance = command.providerInstance ?? (yield* getProviderThread(parent)).providerInstance
          const adapter = yield* registry.get(instance)
          const runs = yield* store.listRuns(parent.id)
          const firstOpen = runs.find((r) => !terminalRunStatuses.includes(r.status))
          const lastEnded = firstOpen === undefined ? (runs.at(-1)?.seq ?? 0) : firstOpen.seq - 1
          const atRunSeq = command.atRunSeq ?? lastEnded
          if (atRunSeq > lastEnded) {
            return yield* new InvalidRequest({
              reason: firstOpen !== undefined && atRunSeq >= firstOpen.seq
                ? `cannot fork ${parent.id} at run ${atRunSeq}: run ${firstOpen.seq} has not ended; fork at ${lastEnded} or wait`
                : `cannot fork ${parent.id} at run ${atRunSeq}: it has ${lastEnded} run(s)`
            })
          }
          const now = yield* DateTime.now
          const forkThread: Thread = {
            id: ids.next("thr") as ThreadId,
            title: command.title ?? `${parent.title} (fork)`.slice(0, 500),
            activeProviderThreadId: null,
            createdAt: now,
            updatedAt: now
          }
          yield* store.insertThread(forkThread)
          yield* store.appendEvent({ threadId: forkThread.id, type: "thread.created", payload: { title: forkThread.title, parentThreadId: parent.id }, commandId: command.commandId })
          const providerThread = yield* ensureProviderThread(forkThread.id, adapter)
          yield* store.updateThread({ ...forkThread, activeProviderThreadId: providerThread.id })
          const forked = yield* lineage.fork(parent, forkThread, providerThread, atRunSeq, runs.filter((r) => r.seq <= atRunSeq))
          return {
            threadId: forkThread.id,
            providerThreadId: providerThread.id,
            atRunSeq,
            runId: forked.run.id,
            itemCount: forked.itemCount,
            tokens: forked.tokens,
            handoffId: forked.handoff?.id ?? null
          }
        })
      ).pipe(uow.thread(command.threadId, "ThreadService.fork"))
    })

    /**
     * Merges a fork back into its parent (see `Commands.MergeBack` and ThreadLineage): the fork's runs that ended
     * since the fork or its previous merge (up to its first run still in progress) become one merge run of the
     * parent, owed to the parent's active provider thread by a `merge` handoff. Merging again merges only what is
     * new; nothing new is a no-op (`runId: null`). A turn running on the parent is not disturbed: the merge is
     * delivered at its next turn start. Fails with `ThreadNotFound`, `InvalidRequest` (not a fork).
     */
    const mergeBack = Effect.fn("ThreadService.mergeBack")(function*(command: Commands.MergeBack) {
      return yield* withReceipt(
        command,
        command.forkThreadId,
        MergeResult,
        Effect.gen(function*() {
          const forkThread = yield* getThread(command.forkThreadId)
          const link = yield* store.findForkOf(forkThread.id)
          if (link._tag === "None") {
            return yield* new InvalidRequest({ reason: `thread ${forkThread.id} is not a fork: there is nothing to merge it into` })
          }
          const parent = yield* getThread(link.value.parentThreadId)
          const providerThread = yield* getProviderThread(parent)
          const last = yield* store.findLastMerge(forkThread.id)
          // The fork's own history starts after its first (synthetic) run.
          const fromRunSeq = last._tag === "Some" ? last.value.throughRunSeq : 1
          const after = yield* store.listRunsAfter(forkThread.id, fromRunSeq)
          const firstOpen = after.findIndex((r) => !terminalRunStatuses.includes(r.status))
          const ended = firstOpen === -1 ? after : after.slice(0, firstOpen)
          const merged = ended.length === 0 ? null : yield* lineage.mergeBack(forkThread, parent, providerThread, fromRunSeq, ended)
          return {
            parentThreadId: parent.id,
            runId: merged?.run.id ?? null,
            fromRunSeq,
            throughRunSeq: merged?.link.throughRunSeq ?? fromRunSeq,
            itemCount: merged?.itemCount ?? 0,
            tokens: merged?.tokens ?? 0,
            handoffId: merged?.handoff?.id ?? null
          }
        })
      ).pipe(uow.thread(command.forkThreadId, "ThreadService.mergeBack"))
    })

    /** `/compact` on the thread's active provider thread (see ThreadCompaction). */
    const compact = Effect.fn("ThreadService.compact")(function*(command: Commands.CompactThread) {
      const receiptKey = CommandReceipts.keyOf(command, command.threadId)
      const seen = yield* CommandReceipts.find(store, receiptKey)
      if (seen._tag === "Some") return yield* CommandReceipts.decode(CompactReport, command.commandId, seen.value.result)
      const thread = yield* getThread(command.threadId)
      const active = yield* store.findActiveRun(thread.id)
      if (active._tag === "Some") return yield* new RunInProgress({ threadId: thread.id, runId: active.value.id })
      const providerThread = yield* getProviderThread(thread)
      const adapter = yield* registry.get(providerThread.providerInstance)
      // The receipt is written with each outcome (ThreadCompaction writes it in the compaction's transaction), so a
      // client retrying after a crash gets the first report back instead of compacting again.
      return yield* compaction.compact(thread.id, providerThread, adapter, receiptKey).pipe(
        Effect.catchIf(
          (e) => e._tag === "ProviderError" && e.code === "thread_not_found",
          (e) =>
            Effect.gen(function*() {
              // The provider lost the native thread: the next turn start replaces it and redelivers the history.
              const native = providerThread.activeNativeThreadId === null
                ? Option.none()
                : yield* store.getNativeThread(providerThread.activeNativeThreadId)
              const report = notCompacted(`${e.message}; the next turn starts a replacement native thread and redelivers the history`)
              yield* uow.thread(thread.id, "ThreadService.compactLost")(Effect.gen(function*() {
                if (native._tag === "Some") {
                  yield* store.updateNativeThread({ ...native.value, status: "replaced", updatedAt: yield* DateTime.now })
                  yield* store.appendEvent({ threadId: thread.id, type: "native_thread.replaced", payload: {
                    nativeThreadId: native.value.id,
                    reason: "the provider no longer has it"
                  } })
                }
                yield* CommandReceipts.write(store, receiptKey, CompactReport, report)
              }))
              return report
            })
        )
      )
    })

    /**
     * `/offload` (see ThreadOffload): summarises the thread's older history, keeping `keepTokens` (default
     * `defaultKeepTokens` of the active provider thread's window) verbatim. A repeated command id returns the first
     * report (the receipt is written in the offload's own transaction). Fails with `ThreadNotFound`, `RunInProgress`, `OffloadFailed` (the summariser failed: nothing was
     * changed and no receipt is kept, so the same command may be retried), `ConcurrentModification`.
     */
    const offload = Effect.fn("ThreadService.offload")(function*(command: Commands.OffloadThread) {
      const receiptKey = CommandReceipts.keyOf(command, command.threadId)
      const seen = yield* CommandReceipts.find(store, receiptKey)
      if (seen._tag === "Some") return yield* CommandReceipts.decode(OffloadReport, command.commandId, seen.value.result)
      const thread = yield* getThread(command.threadId)
      const active = yield* store.findActiveRun(thread.id)
      if (active._tag === "Some") return yield* new RunInProgress({ threadId: thread.id, runId: active.value.id })
      const providerThread = thread.activeProviderThreadId === null
        ? Option.none()
        : yield* store.getProviderThread(thread.activeProviderThreadId)
      const keepTokens = command.keepTokens ??
        defaultKeepTokens(providerThread._tag === "Some" ? providerThread.value.contextWindow : null)
      return yield* offloader.offload(thread.id, keepTokens, receiptKey)
    })

    return {
      createThread,
      switchProvider,
      sendMessage,
      enqueueMessage,
      processRun,
      interrupt,
      compact,
      fork,
      mergeBack,
      offload,
      visibleHistory: offloader.visibleHistory,
      recover,
      getThread,
      listThreads: store.listThreads
    }
  })
}) {}

export type { ProviderInstance }
