/**
 * ThreadService: the orchestrator's command facade — create a thread, send a user message (a run), interrupt a run,
 * switch the provider for the next run, fork and merge back, `/compact`, `/offload` — each command once per command
 * id (CommandReceipts), each state change in a unit of work.
 *
 * It queues runs; TurnExecution drives them (claim, turn start, the streamed turn, the outcome), RunRecovery
 * interrupts and recovers them, RunLifecycle owns their status machine, NativeThreadTrust the trust in native
 * threads. History decisions are ProviderTurnStartService's and ContextHandoffDelivery's, `/compact`
 * ThreadCompaction's, `/offload` ThreadOffload's, forks and merges ThreadLineage's.
 */
import {
  Commands,
  CompactReport,
  mergeTools,
  CreateThreadResult,
  ForkResult,
  InvalidRequest,
  MergeResult,
  type ProviderInstance,
  type ProviderThread,
  type Run,
  RunId,
  RunInProgress,
  SendResult,
  SwitchResult,
  terminalRunStatuses,
  type Thread,
  ThreadNotFound,
  type ThreadId,
  OffloadUndoReport,
  type ToolResultOffloadControl,
  ToolResultOffloadControlView,
  type ToolResultOffloadPreview,
  ToolResultOffloadUndo
} from "@baton/contracts"
import { ToolResultOffload } from "@baton/context"
import { ThreadStore, UnitOfWork } from "@baton/persistence"
import { type ProviderAdapter, ProviderRegistry } from "@baton/providers"
import { DateTime, Duration, Effect, Option, ParseResult, Schema } from "effect"
import { ClientToolWaits } from "./ClientToolWaits.js"
import * as CommandReceipts from "./CommandReceipts.js"
import { ContextHandoffDelivery } from "./ContextHandoffDelivery.js"
import { DriverRegistry } from "./DriverRegistry.js"
import { NativeThreadTrust } from "./NativeThreadTrust.js"
import { RunRecovery } from "./RunRecovery.js"
import { type ClaimedRun, type ReceiptCompletion, TurnExecution } from "./TurnExecution.js"
import { IdGenerator } from "./IdGenerator.js"
import { ItemLog, type NewItem } from "./ItemLog.js"
import { promptItem } from "./RunLifecycle.js"
import { notCompacted, ThreadCompaction } from "./ThreadCompaction.js"
import { ThreadLineage } from "./ThreadLineage.js"
import * as OffloadControls from "./OffloadControls.js"
import { defaultKeepTokens, noPrices, ThreadOffload } from "./ThreadOffload.js"
import { OrchestratorConfig } from "./OrchestratorConfig.js"
import * as Span from "./internal/Span.js"

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


/** Closing open tool calls moved to TurnStream with the streaming record; re-exported under their old names. */
export { closeOpenToolCalls, unansweredToolResultText } from "./TurnStream.js"

export class ThreadService extends Effect.Service<ThreadService>()("@baton/orchestration/ThreadService", {
  effect: Effect.gen(function*() {
    const uow = yield* UnitOfWork
    const driver = yield* DriverRegistry
    const store = yield* ThreadStore
    const ids = yield* IdGenerator
    const registry = yield* ProviderRegistry.ProviderRegistry
    const delivery = yield* ContextHandoffDelivery
    const compaction = yield* ThreadCompaction
    const offloader = yield* ThreadOffload
    const itemLog = yield* ItemLog
    const lineage = yield* ThreadLineage
    const trust = yield* NativeThreadTrust
    const turns = yield* TurnExecution
    const recovery = yield* RunRecovery
    const toolWaits = yield* ClientToolWaits
    const config = yield* OrchestratorConfig

    /**
     * Drives a queued run to a terminal status (see TurnExecution). `claimed`: the run was queued and claimed in one
     * unit of work (`queueForDriver`); its claim and lookups are skipped.
     */
    const processRun = (runId: Run["id"], claimed?: ClaimedRun) => turns.run(runId, claimed)
    /** Interrupts a run (see RunRecovery). */
    const interrupt = recovery.interrupt
    /** Restart recovery: ends the unfinished runs of drivers that are gone (see RunRecovery). */
    const recover = recovery.recover

    const getThread = (threadId: ThreadId) =>
      Effect.flatMap(store.getThread(threadId), Option.match({
        onNone: () => Effect.fail(new ThreadNotFound({ threadId })),
        onSome: Effect.succeed
      }))

    /**
     * `thread`'s active provider thread: `known` when the caller read it already (queueing reads it with the thread),
     * else read here. Fails with `InvalidRequest` when the thread has none or lost it.
     */
    const getProviderThread = (thread: Thread, known?: Option.Option<ProviderThread>) =>
      thread.activeProviderThreadId === null
        ? Effect.fail(new InvalidRequest({ reason: `thread ${thread.id} has no provider; switch to one first` }))
        : Effect.flatMap(known !== undefined ? Effect.succeed(known) : store.getProviderThread(thread.activeProviderThreadId), Option.match({
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

    const ensureProviderThread = Span.fn("ThreadService.ensureProviderThread")(function*(
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
    const createThread = Span.fn("ThreadService.createThread")(function*(command: Commands.CreateThread) {
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
          if (command.tools !== undefined && command.tools.length > 0) yield* store.setThreadTools(thread.id, command.tools)
          yield* store.appendEvent({ threadId: thread.id, type: "thread.created", payload: { title: thread.title }, commandId: command.commandId })
          const providerThread = yield* ensureProviderThread(thread.id, adapter)
          yield* store.updateThread({ ...thread, activeProviderThreadId: providerThread.id })
          return { threadId: thread.id }
        })
      ).pipe(
        uow.global("ThreadService.createThread"),
        // One command id twice at once (a client's retry racing its original): on Postgres a unit with no thread takes
        // no lock that orders the two, so the later insert of the receipt waits for the first's commit and fails on
        // its unique key (`ConcurrentModification`, nothing written). Run again, the unit finds that receipt and
        // answers the first result (or `InvalidRequest` for another payload), as a sequential retry would.
        Effect.retry({ times: 1, while: (e) => e._tag === "ConcurrentModification" }),
        Effect.map((r) => r.threadId)
      )
    })

    /**
     * Switches the provider for the next run. The destination is owed every run it has not seen: a `switch`
     * handoff covers them (none when there is nothing new), except its own runs recorded as never read, which the
     * next turn start's missed-run recovery owes after reading the native thread back (they may have reached it).
     * Fails with `ThreadNotFound`, `UnknownProvider`, `RunInProgress`.
     */
    const switchProvider = Span.fn("ThreadService.switchProvider")(function*(command: Commands.SwitchProvider) {
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
          const between = yield* store.listRunsBetween(thread.id, target.syncedRunSeq, nextSeq)
          // The destination's own runs recorded as never read (interrupted or crashed before the provider) may have
          // reached it after all (an interrupt's read-back raced the turn): they stay behind its watermark, for the
          // next turn start's missed-run recovery, which reads the native thread back before owing them again.
          const ownMissed = between.filter((r) => r.providerThreadId === target.id && r.stopPoint === "before_provider")
          const unseen = between.filter((r) =>
            !(target.activeNativeThreadId !== null && r.nativeThreadId === target.activeNativeThreadId &&
              r.stopPoint !== "before_provider") && !covered.has(r.id) && !ownMissed.includes(r)
          )
          const handoff = yield* delivery.createHandoff(thread.id, "switch", target, unseen)
          const now = yield* DateTime.now
          const syncedRunSeq = ownMissed.length > 0 ? ownMissed[0]!.seq - 1 : nextSeq - 1
          yield* store.updateProviderThread({ ...target, syncedRunSeq, updatedAt: now })
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

    /**
     * Queues a run: the run row, its `user_message` item and the `run.queued` event, in one transaction. `claim`:
     * the caller drives the run at once when the thread has no unfinished run, so the same transaction also claims it
     * — the run is written `starting`, this driver's, as `TurnExecution`'s claim would write it a moment later (a
     * thread with no unfinished run has no run to start before it) — and `claimed` carries what the turn needs, read
     * under the lock. With an unfinished run ahead, `behind` queues the run behind it (`claimed` null), else the
     * command fails with `RunInProgress`.
     */
    const queueRun = (command: Commands.SendMessage, behind: boolean, claim = false) =>
      Effect.gen(function*() {
        yield* validateCommand(Commands.SendMessage, command)
        // A long prompt is counted before the unit of work (a 2 MiB message took about a second, which every other
        // thread's writes waited out on SQLite); the rest of the prompt item's recording is in it.
        const [prompt] = claim ? yield* itemLog.countAhead([promptItem(command.text)]) : [undefined]
        return yield* queueRunLocked(command, behind, claim, prompt)
      })

    const queueRunLocked = Span.fn("ThreadService.queueRun")(function*(
      command: Commands.SendMessage,
      behind: boolean,
      claim: boolean,
      counted: NewItem | undefined
    ) {
      // The command is recorded with the run it creates, in this transaction, first thing (one statement: written
      // unless the id was seen before; a write, so on SQLite it takes the database's write lock itself:
      // `UnitOfWork.threadWritingFirst`): a retry after a crash finds the run instead of queueing a second one. A
      // failure below (no thread, a run in progress, an unknown provider) rolls the receipt back with the rest. The
      // receipt's result is completed when the run ends.
      const key = CommandReceipts.keyOf(command, command.threadId)
      const runId = ids.next("run") as Run["id"]
      const fresh = yield* CommandReceipts.writeIfNew(store, key, QueuedReceipt, { runId })
      if (!fresh) {
        // Under the thread's lock: the same command sent concurrently may have queued its run first (a retry that
        // raced the original). Then that run is the answer; a different payload under the same id is refused by `find`.
        const seen = yield* CommandReceipts.find(store, key)
        if (seen._tag === "Some") {
          const { runId: queuedId } = yield* CommandReceipts.decode(SendReceipt, command.commandId, seen.value.result)
          const existing = yield* store.getRun(queuedId)
          if (existing._tag === "Some") return { run: existing.value, created: false, claimed: null }
        }
      }
      // The thread, the tools it declared, its active provider thread, the unfinished run ahead (if any) and the new
      // run's seq, in one statement.
      const { thread, tools: threadTools, providerThread: activeProviderThread, active, nextSeq } = yield* Effect.flatMap(
        store.getThreadForQueue(command.threadId),
        Option.match({
          onNone: () => Effect.fail(new ThreadNotFound({ threadId: command.threadId })),
          onSome: Effect.succeed
        })
      )
      if (active._tag === "Some" && !behind) return yield* new RunInProgress({ threadId: thread.id, runId: active.value.id })
      // Read with the thread (same statement); the same failures as `getProviderThread`.
      const providerThread = yield* getProviderThread(thread, activeProviderThread)
      // A provider this process does not have fails the command before anything is written (UnknownProvider).
      const adapter = yield* registry.get(providerThread.providerInstance)
      const now = yield* DateTime.now
      const claimNow = claim && active._tag === "None"
      const run: Run = {
        id: runId,
        threadId: thread.id,
        seq: nextSeq,
        providerThreadId: providerThread.id,
        status: claimNow ? "starting" : "queued",
        prompt: command.text,
        stopPoint: null,
        failureReason: null,
        failureCode: null,
        nativeThreadId: null,
        createdAt: now,
        updatedAt: now
      }
      yield* store.insertRun(run, driver.driverId)
      // The tools this run offers: the thread's, with the message's over them.
      const tools = mergeTools(threadTools, command.tools ?? [])
      if (tools.length > 0) yield* store.setRunTools(run.id, tools)
      // The prompt joins the thread's items when the run leaves `queued` (RunLifecycle): at once when claimed here,
      // else when the driver starts it (or it ends unstarted), after the items of the runs before it.
      // Its `items.appended` event and `run.queued` in one statement, in that order.
      const prompt = claimNow ? (yield* itemLog.stage(thread.id, run.id, [counted ?? promptItem(command.text)])).event : null
      yield* store.appendEvents([
        ...(prompt === null ? [] : [prompt]),
        { threadId: thread.id, type: "run.queued", payload: { runId: run.id, seq: run.seq, providerThreadId: providerThread.id }, commandId: command.commandId }
      ])
      // The id was seen but its run is gone (never, outside a damaged record): the plain insert fails as it always
      // did (a unique violation: `ConcurrentModification`).
      if (!fresh) yield* CommandReceipts.write(store, key, QueuedReceipt, { runId: run.id })
      return { run, created: true, claimed: claimNow ? { run, providerThread, adapter, tools } : null }
    }, (effect, command) => uow.threadWritingFirst(command.threadId, "ThreadService.queueRun")(effect))

    /**
     * The result of a SendMessage whose run a concurrent caller with the same command id queued and drives: waits
     * (polling, 25 ms doubling to 1 s) until the run has ended or waits for the client's tool results, then answers with that caller's receipt, or with
     * what the record says if the receipt was never completed (that caller's process stopped).
     */
    const awaitSent = (command: Commands.SendMessage, runId: Run["id"]) =>
      Effect.gen(function*() {
        let pause = 25
        for (;;) {
          const run = yield* store.getRun(runId)
          // A run waiting for the client's tool results is driven by nobody until the client posts them: answered
          // as it stands (`waiting`), as the first call was.
          if (run._tag === "None" || run.value.status === "waiting" || terminalRunStatuses.includes(run.value.status)) break
          yield* Effect.sleep(Duration.millis(pause))
          pause = Math.min(1_000, pause * 2)
        }
        const seen = yield* CommandReceipts.find(store, CommandReceipts.keyOf(command, command.threadId))
        if (seen._tag === "Some") {
          const recorded = yield* CommandReceipts.decode(SendReceipt, command.commandId, seen.value.result)
          if ("status" in recorded) return recorded
        }
        return yield* processRun(runId)
      })

    /**
     * Sends a user message: queues a run and drives it to a terminal status. The prompt reaches the provider
     * byte-identical whatever happens to owed history. Fails with `ThreadNotFound`, `RunInProgress`,
     * `InvalidRequest`; provider faults end the run as `failed`/`interrupted` (they do not fail the command).
     */
    const sendMessage = Span.fn("ThreadService.sendMessage")(function*(command: Commands.SendMessage) {
      const queued = yield* queueRun(command, false, true)
      if (queued.created) {
        // A run that completes has its receipt completed in the same unit of work (`ReceiptCompletion`); any other
        // outcome has it completed here.
        const receipt: ReceiptCompletion = {
          write: (result) => CommandReceipts.complete(store, command.commandId, SendResult, result),
          written: false
        }
        const result = yield* turns.run(queued.run.id, queued.claimed ?? undefined, receipt)
        // A run waiting for tool results has not ended: its receipt keeps naming the run until it does.
        if (result.status !== "waiting" && !receipt.written) yield* CommandReceipts.complete(store, command.commandId, SendResult, result)
        return result
      }
      // The command was seen before: its result if the run ended and was recorded; a run left queued by a crash is
      // finished here (the same run, never a second one); one that another call is driving is waited for.
      const seen = yield* CommandReceipts.find(store, CommandReceipts.keyOf(command, command.threadId))
      if (seen._tag === "Some") {
        const recorded = yield* CommandReceipts.decode(SendReceipt, command.commandId, seen.value.result)
        if ("status" in recorded) return recorded
      }
      const result = yield* processRun(queued.run.id)
      // A run waiting for tool results has not ended but nobody drives it (the client does, by posting them): the
      // answer is `waiting`, as the first call's was, not a wait for the client's next command.
      if (result.status === "waiting") return result
      if (!terminalRunStatuses.includes(result.status)) return yield* awaitSent(command, queued.run.id)
      yield* CommandReceipts.complete(store, command.commandId, SendResult, result)
      return result
    })

    /**
     * Queues a run without starting it (the run driver starts it; or a client about to interrupt). A repeated command
     * id returns the run it queued first. With `queueBehind` the run is queued behind the thread's unfinished runs
     * (they run first, in seq order); without it a thread with a run in progress fails with `RunInProgress`.
     */
    const enqueueMessage = (command: Commands.SendMessage, options: { readonly queueBehind?: boolean } = {}) =>
      Effect.map(queueRun(command, options.queueBehind === true), (queued) => queued.run)

    /**
     * The run driver's queueing: the run queued behind the thread's unfinished runs, and, on a thread with none,
     * claimed in the same unit of work (`claimed`: `starting`, this driver's; the caller must drive it at once with
     * `processRun(run.id, claimed)`, else recovery ends it once this driver is gone). A repeated command id answers
     * the run it queued first (`claimed` null). Fails as `enqueueMessage` does.
     */
    const queueForDriver = (command: Commands.SendMessage) =>
      Effect.map(queueRun(command, true, true), ({ claimed, run }) => ({ run, claimed }))

    /**
     * Where `command` forks its parent: the parent, its runs, the fork point `atRunSeq` (default: the last run that
     * has ended) and the fork's adapter (default: the parent's provider). Fails with `ThreadNotFound`,
     * `UnknownProvider`, `InvalidRequest` (a fork point past the last ended run).
     */
    const forkPoint = (command: Commands.ForkThread) =>
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
        return { parent, adapter, runs, atRunSeq }
      })

    /**
     * The parent's native thread a fork can copy natively (`forkThread`), or `null` (the fork falls back to a `fork`
     * handoff). Exact only when that native thread holds precisely the parent's history through `atRunSeq`: the fork
     * is on the parent's own provider instance, whose adapter can fork; the fork point is the parent's latest run and
     * no run is queued or running (a running turn would be half in the copy); the parent's active native thread is
     * trusted (`active`), owes nothing (no open handoff toward its provider thread, which is synced through
     * `atRunSeq`) and has no uncertain (`pending`) delivery; every run through `atRunSeq` ran on that native thread
     * (the provider read it) or is covered by a handoff delivered to it whole (nothing omitted); and no `/offload`
     * summary stands for part of the parent's history (the fork copies the summary, the native thread holds the
     * originals). A native thread Codex compacted still counts: Baton never owes a compacted thread its history
     * again, and the copy holds what the parent's model holds.
     */
    const nativeForkSource = (
      parent: Thread,
      adapter: ProviderAdapter.ProviderAdapterShape,
      runs: ReadonlyArray<Run>,
      atRunSeq: number
    ) =>
      Effect.gen(function*() {
        if (adapter.forkThread === undefined || parent.activeProviderThreadId === null || atRunSeq === 0) return null
        if (runs.at(-1)?.seq !== atRunSeq || runs.some((r) => !terminalRunStatuses.includes(r.status))) return null
        const providerThread = Option.getOrNull(yield* store.getProviderThread(parent.activeProviderThreadId))
        if (providerThread === null || providerThread.providerInstance !== adapter.instance) return null
        if (providerThread.activeNativeThreadId === null || providerThread.syncedRunSeq < atRunSeq) return null
        const native = Option.getOrNull(yield* store.getNativeThread(providerThread.activeNativeThreadId))
        if (native === null || native.status !== "active") return null
        if ((yield* store.listOpenHandoffs(providerThread.id)).length > 0) return null
        if ((yield* store.listDeliveriesByStatus(native.id, "pending")).length > 0) return null
        if ((yield* store.listOffloads(parent.id)).length > 0) return null
        const toNative = (yield* store.listDeliveriesOfThread(parent.id)).filter((d) => d.nativeThreadId === native.id)
        if (toNative.some((d) => (d.status === "injected" || d.status === "inline") && d.omittedItemIds.length > 0)) return null
        const covered = yield* delivery.coveredRuns(providerThread, native.id)
        const held = runs.every((r) => (r.nativeThreadId === native.id && r.stopPoint !== "before_provider") || covered.has(r.id))
        return held ? { providerThread, native } : null
      })

    /**
     * Forks a thread (see `Commands.ForkThread` and ThreadLineage): a new thread on the requested provider (default:
     * the parent's), whose first run holds a copy of the parent's history through `atRunSeq` (default: the last run
     * that has ended). The copy is owed to the fork's provider thread by a `fork` handoff, delivered at its first
     * turn start — or, when the parent's native thread holds exactly that history and its adapter can fork natively
     * (`nativeForkSource`), the fork's provider thread starts on the provider's own copy of it (Codex `thread/fork`)
     * and nothing is owed. The provider call is made between two units of work (decide, fork, then record after
     * re-deciding under the lock: a parent that changed meanwhile gets the handoff, and the unused native copy
     * holds nothing Baton owes). A turn running on the parent is not waited for (the fork then takes the handoff).
     * Fails with `ThreadNotFound`, `UnknownProvider`, `InvalidRequest`.
     */
    const fork = Span.fn("ThreadService.fork")(function*(command: Commands.ForkThread) {
      const seen = yield* CommandReceipts.find(store, CommandReceipts.keyOf(command, command.threadId))
      const source = seen._tag === "Some" ? null : yield* Effect.gen(function*() {
        const point = yield* forkPoint(command)
        const found = yield* nativeForkSource(point.parent, point.adapter, point.runs, point.atRunSeq)
        return found === null ? null : { ...found, adapter: point.adapter, atRunSeq: point.atRunSeq }
        // A failure here (an unknown thread, a bad fork point) is only no native fork: the recording step fails with it.
      }).pipe(uow.thread(command.threadId, "ThreadService.fork.source"), Effect.orElseSucceed(() => null))
      const forked = source === null ? null : yield* source.adapter.forkThread!(source.native.nativeRef).pipe(
        Effect.tapError((e) => Effect.logWarning(`native fork of ${source.native.id} failed (${e.code}: ${e.reason}): the fork takes a handoff`)),
        Effect.option,
        Effect.map(Option.getOrNull)
      )
      return yield* withReceipt(
        command,
        command.threadId,
        ForkResult,
        Effect.gen(function*() {
          const { adapter, atRunSeq, parent, runs } = yield* forkPoint(command)
          // The native copy stands only if the parent is where it was when it was copied: the same fork point, still
          // exact, on the same native thread with the same record (a usage report or a compaction meanwhile changes it,
          // and the copy may predate it).
          const again = forked === null ? null : yield* nativeForkSource(parent, adapter, runs, atRunSeq)
          const unchanged = source !== null && again !== null && atRunSeq === source.atRunSeq && again.native.id === source.native.id &&
            again.native.estimatedTokens === source.native.estimatedTokens &&
            JSON.stringify(again.native.usage) === JSON.stringify(source.native.usage)
          const held = forked !== null && source !== null && unchanged
            ? { nativeRef: forked.nativeRef, source: source.native, driverId: driver.driverId }
            : null
          if (forked !== null && held === null) {
            yield* Effect.logWarning(`the parent ${parent.id} changed while it was forked natively: native thread ${forked.nativeRef} is left unused, the fork takes a handoff`)
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
          const forkedRecord = yield* lineage.fork(parent, forkThread, providerThread, atRunSeq, runs.filter((r) => r.seq <= atRunSeq), held)
          return {
            threadId: forkThread.id,
            providerThreadId: providerThread.id,
            atRunSeq,
            runId: forkedRecord.run.id,
            itemCount: forkedRecord.itemCount,
            tokens: forkedRecord.tokens,
            handoffId: forkedRecord.handoff?.id ?? null,
            ...(forkedRecord.native === null ? {} : { nativeThreadId: forkedRecord.native.id })
          }
        })
      ).pipe(uow.thread(command.threadId, "ThreadService.fork"))
    })

    /**
     * Merges a fork back into its parent (see `Commands.MergeBack` and ThreadLineage): the fork's runs that ended
     * since the fork or its previous merge (up to its first run still in progress) become one merge run of the
     * parent, owed to the parent's active provider thread by a `merge` handoff. Merging again merges only what is
     * new; nothing new is a no-op (`runId: null`). A turn running on the parent is not disturbed: the merge is
     * delivered at its next turn start, and takes its place in the parent's order after every unfinished run ahead of
     * it (`behindRunId`: its copies and handoff are recorded when they have ended, see ThreadLineage). Fails with
     * `ThreadNotFound`, `InvalidRequest` (not a fork).
     */
    const mergeBack = Span.fn("ThreadService.mergeBack")(function*(command: Commands.MergeBack) {
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
          // The merge writes a run, items, a handoff and events into the parent: the parent's lock too.
          yield* uow.alsoLock(link.value.parentThreadId, "ThreadService.mergeBack")
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
            handoffId: merged?.handoff?.id ?? null,
            ...(merged?.behind == null ? {} : { behindRunId: merged.behind.id })
          }
        })
      ).pipe(uow.thread(command.forkThreadId, "ThreadService.mergeBack"))
    })

    /** `/compact` on the thread's active provider thread (see ThreadCompaction). */
    const compact = Span.fn("ThreadService.compact")(function*(command: Commands.CompactThread) {
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
              return yield* uow.thread(thread.id, "ThreadService.compactLost")(Effect.gen(function*() {
                if (native._tag === "Some") yield* trust.distrust(thread.id, native.value, "the provider no longer has it")
                // What is still owed goes to the replacement: the handoffs open toward the provider thread.
                const report: CompactReport = {
                  ...notCompacted(`${e.message}; the next turn starts a replacement native thread and redelivers the history`, "native_thread_lost"),
                  stillDeferred: (yield* store.listOpenHandoffs(providerThread.id)).length
                }
                return yield* CommandReceipts.write(store, receiptKey, CompactReport, report)
              }))
            })
        )
      )
    })

    /**
     * `/offload` (see ThreadOffload): summarises the thread's older history, keeping `keepTokens` (default
     * `defaultKeepTokens` of the active provider thread's window) verbatim, as operation `command.commandId`: the
     * same id again answers the first outcome (`CommandReceipts`' rule: the same payload, else `InvalidRequest`).
     * `dryRun` answers the preview and changes nothing. Fails with `ThreadNotFound`, `RunInProgress` (a run is
     * queued, running or waiting), `OffloadFailed` (the summariser failed: nothing was changed),
     * `InvalidRequest`, `PersistenceError`.
     */
    const offload = Span.fn("ThreadService.offload")(function*(command: Commands.OffloadThread) {
      const receiptKey = CommandReceipts.keyOf(command, command.threadId)
      // An id another command type used is refused (the offload's own outcomes are its operation records).
      yield* CommandReceipts.find(store, receiptKey)
      const key = { operationId: command.commandId, fingerprint: receiptKey.fingerprint }
      const thread = yield* getThread(command.threadId)
      const providerThread = thread.activeProviderThreadId === null
        ? Option.none()
        : yield* store.getProviderThread(thread.activeProviderThreadId)
      const keepTokens = command.keepTokens ??
        defaultKeepTokens(providerThread._tag === "Some" ? providerThread.value.contextWindow : null)
      const cache = providerThread._tag === "None" ? noPrices : yield* cacheRewriteOf(providerThread.value.providerInstance)
      if (command.dryRun === true) return yield* offloader.preview(thread.id, keepTokens, command.commandId, cache)
      if ((yield* store.getOffloadOperation(command.commandId))._tag === "None") {
        const active = yield* store.findActiveRun(thread.id)
        if (active._tag === "Some") return yield* new RunInProgress({ threadId: thread.id, runId: active.value.id })
      }
      return yield* offloader.offload(thread.id, keepTokens, key, cache)
    })

    /**
     * The automatic `/offload` after run `runId` of `threadId` completed (OrchestratorConfig `autoOffload`): when the
     * active native thread's last reported usage is at least `thresholdRatio` of its window (the reported maximum,
     * else the provider thread's configured window) and no run is queued or active, offloads the thread as operation
     * `auto-<runId>` (so two processes, or a repeat, offload once), the PreCompact hook told trigger `automatic`.
     * Returns the report, or `null` when the policy is off, the thread is below the threshold or busy, or its newest
     * offload was undone (the user's call stands until they offload again). Fails like
     * `offload`.
     */
    const autoOffload = Span.fn("ThreadService.autoOffload")(function*(threadId: ThreadId, runId: Run["id"]) {
      const policy = config.autoOffload
      if (policy === null) return null
      const thread = yield* getThread(threadId)
      if (thread.activeProviderThreadId === null) return null
      const lane = yield* store.getProviderThread(thread.activeProviderThreadId)
      if (lane._tag === "None" || lane.value.activeNativeThreadId === null) return null
      const native = yield* store.getNativeThread(lane.value.activeNativeThreadId)
      if (native._tag === "None" || native.value.status !== "active" || native.value.usage === null) return null
      const window = native.value.usage.maxTokens ?? lane.value.contextWindow
      if (window === null || window <= 0 || native.value.usage.usedTokens < policy.thresholdRatio * window) return null
      if ((yield* store.findActiveRun(threadId))._tag === "Some") return null
      // The user undid the newest offload: Baton does not redo it on its own (a manual /offload clears this).
      const latest = yield* store.latestOffload(threadId)
      if ((yield* store.maxOffloadGeneration(threadId)) > (latest._tag === "Some" ? latest.value.generation : 0)) return null
      const keepTokens = policy.keepTokens ?? defaultKeepTokens(lane.value.contextWindow)
      const operationId = `auto-${runId}`
      const key = { operationId, fingerprint: `automatic:${threadId}:${keepTokens}` }
      const cache = yield* cacheRewriteOf(lane.value.providerInstance)
      yield* Effect.logInfo(
        `thread ${threadId}: the native thread holds ${native.value.usage.usedTokens} of ${window} tokens ` +
          `(threshold ${Math.round(policy.thresholdRatio * 100)}%): automatic /offload ${operationId}`
      )
      return yield* offloader.offload(threadId, keepTokens, key, cache, { trigger: "automatic", approvalMode: policy.approvalMode })
    })

    /** The cache-rewrite pricing of `instance` (`noPrices`' multipliers when it has no prices or is unknown). */
    const cacheRewriteOf = (instance: string) =>
      Effect.map(Effect.option(registry.get(instance as ProviderInstance)), (adapter) => {
        const prices = adapter._tag === "Some" ? adapter.value.prices : undefined
        if (prices === undefined || prices.input <= 0) return noPrices
        // A write price of 0 is no separate write charge (OpenAI): multiplier 1, not 0 (`ToolResultOffload.pricingOf`).
        const pricing = ToolResultOffload.pricingOf(prices)
        return { writeMultiplier: pricing.writeMultiplier, readMultiplier: pricing.readMultiplier, inputUsdPerMillion: prices.input }
      })

    /**
     * Undoes the thread's newest `/offload` (see `Commands.UndoOffload`, ThreadOffload.undo). A repeated command id
     * answers as the first time. Fails with `ThreadNotFound`, `RunInProgress`, `InvalidRequest` (a reused id).
     */
    const undoOffload = Span.fn("ThreadService.undoOffload")(function*(command: Commands.UndoOffload) {
      const receiptKey = CommandReceipts.keyOf(command, command.threadId)
      const seen = yield* CommandReceipts.find(store, receiptKey)
      if (seen._tag === "Some") return yield* CommandReceipts.decode(OffloadUndoReport, command.commandId, seen.value.result)
      const thread = yield* getThread(command.threadId)
      return yield* offloader.undo(thread.id, receiptKey)
    })

    /** The outcome of `/offload` operation `operationId` of `threadId`. Fails with `ThreadNotFound`, `OffloadOperationNotFound`. */
    const getOffload = Span.fn("ThreadService.getOffload")(function*(threadId: ThreadId, operationId: string) {
      const thread = yield* getThread(threadId)
      return yield* offloader.get(thread.id, operationId)
    })

    /**
     * Cancels `/offload` operation `operationId` of `threadId` if its summary is still being written; answers the
     * settled outcome (`cancelled`, or what it finished with). Fails with `ThreadNotFound`, `OffloadOperationNotFound`.
     */
    const cancelOffload = Span.fn("ThreadService.cancelOffload")(function*(threadId: ThreadId, operationId: string) {
      const thread = yield* getThread(threadId)
      return yield* offloader.cancel(thread.id, operationId)
    })

    /**
     * The active native thread of `thread` on an adapter that keeps a message list with tool-result offload. Fails
     * with `InvalidRequest` (no provider, a provider without a message list, no native thread yet), `UnknownProvider`.
     */
    const offloadLane = (thread: Thread) =>
      Effect.gen(function*() {
        const providerThread = yield* getProviderThread(thread)
        const adapter = yield* registry.get(providerThread.providerInstance)
        const capability = adapter.toolResultOffload
        if (capability === undefined) {
          return yield* new InvalidRequest({
            reason: `provider instance "${adapter.instance}" keeps no message list of its own: tool-result offload applies to model-API instances (docs/offload.md)`
          })
        }
        const native = providerThread.activeNativeThreadId === null
          ? Option.none()
          : yield* store.getNativeThread(providerThread.activeNativeThreadId)
        if (native._tag === "None") {
          return yield* new InvalidRequest({
            reason: `thread ${thread.id} has no native thread on "${adapter.instance}" yet: nothing is offloaded before its first turn`
          })
        }
        return { providerThread, capability, native: native.value }
      })

    /**
     * The dry run of tool-result offload on the thread's active native thread (see `ToolResultOffloadPreview`):
     * stores nothing, so it may run beside a turn (it then shows the state before that turn's next request). Fails
     * with `ThreadNotFound`, `InvalidRequest` (see `offloadLane`), `UnknownProvider`, `ProviderError` (the message list
     * could not be read).
     */
    const previewToolResultOffload = Span.fn("ThreadService.previewToolResultOffload")(function*(threadId: ThreadId) {
      const thread = yield* getThread(threadId)
      const { capability, native, providerThread } = yield* offloadLane(thread)
      const { resolved } = yield* OffloadControls.resolve(store, thread.id)
      const preview = yield* capability.preview(native.nativeRef, resolved)
      const result: ToolResultOffloadPreview = { threadId: thread.id, providerInstance: providerThread.providerInstance, ...preview }
      return result
    })

    /**
     * Undoes the newest tool-result offload flush of the thread's active native thread (see
     * `Commands.UndoToolResultOffload`), under the thread's lock with no run queued, running or waiting, and records
     * a `context.offload_undone` event. A repeated command id answers as the first time.
     */
    const undoToolResultOffload = Span.fn("ThreadService.undoToolResultOffload")(function*(command: Commands.UndoToolResultOffload) {
      return yield* withReceipt(
        command,
        command.threadId,
        ToolResultOffloadUndo,
        Effect.gen(function*() {
          const thread = yield* getThread(command.threadId)
          const active = yield* store.findActiveRun(thread.id)
          if (active._tag === "Some") return yield* new RunInProgress({ threadId: thread.id, runId: active.value.id })
          const { capability, native, providerThread } = yield* offloadLane(thread)
          const undo = yield* capability.undo(native.nativeRef)
          if (undo.undone && undo.flushSeq !== null) {
            yield* store.appendEvent({
              threadId: thread.id,
              type: "context.offload_undone",
              payload: {
                providerInstance: providerThread.providerInstance,
                nativeThreadId: native.id,
                nativeRef: native.nativeRef,
                flushSeq: undo.flushSeq,
                entrySeqs: undo.entrySeqs
              },
              commandId: command.commandId
            })
          }
          return { threadId: thread.id, providerInstance: providerThread.providerInstance, ...undo }
        })
      ).pipe(uow.thread(command.threadId, "ThreadService.undoToolResultOffload"))
    })

    /**
     * `control` on `thread`'s active provider instance (`ToolResultOffloadControlView`), with the problems that make
     * its settings unusable there (empty when usable, or when the instance keeps no message list).
     */
    const controlView = (thread: Thread, control: ToolResultOffloadControl) =>
      Effect.gen(function*() {
        const none = { view: { threadId: thread.id, control, effective: null } satisfies ToolResultOffloadControlView, problems: [] as ReadonlyArray<string> }
        const providerThread = thread.activeProviderThreadId === null ? Option.none() : yield* store.getProviderThread(thread.activeProviderThreadId)
        if (providerThread._tag === "None") return none
        const adapter = yield* Effect.either(registry.get(providerThread.value.providerInstance))
        const capability = adapter._tag === "Right" ? adapter.right.toolResultOffload : undefined
        if (capability === undefined) return none
        const pinnedToolCallIds = yield* OffloadControls.pinnedCalls(store, thread.id, control.pinnedItemIds ?? [])
        const effective = capability.effective({
          ...(control.enabled === undefined ? {} : { enabled: control.enabled }),
          settings: OffloadControls.settingsOf(control),
          pinnedToolCallIds
        })
        const view: ToolResultOffloadControlView = {
          threadId: thread.id,
          control,
          effective: { providerInstance: providerThread.value.providerInstance, enabled: effective.enabled, settings: effective.settings, pinnedToolCallIds }
        }
        return { view, problems: effective.problems }
      })

    /** Thread `threadId`'s tool-result offload control and what it comes to (see `controlView`). Fails with `ThreadNotFound`. */
    const getToolResultOffloadControl = Span.fn("ThreadService.getToolResultOffloadControl")(function*(threadId: ThreadId) {
      const thread = yield* getThread(threadId)
      return (yield* controlView(thread, yield* store.getOffloadControl(thread.id))).view
    })

    /**
     * Replaces the thread's tool-result offload control (see `Commands.SetToolResultOffloadControl`) and records a
     * `context.offload_control_set` event; turns read it when they start or continue after tool results. Checks that
     * every pinned id is an item of the thread and that the settings, merged with the active instance's (the policy's
     * defaults when the thread has no model-API instance yet), keep the policy's rules (`InvalidRequest` naming the
     * field otherwise).
     */
    const setToolResultOffloadControl = Span.fn("ThreadService.setToolResultOffloadControl")(function*(command: Commands.SetToolResultOffloadControl) {
      return yield* withReceipt(
        command,
        command.threadId,
        ToolResultOffloadControlView,
        Effect.gen(function*() {
          const thread = yield* getThread(command.threadId)
          const control = command.control
          const pinned = [...new Set(control.pinnedItemIds ?? [])]
          const found = new Set((yield* store.getItems(pinned)).filter((i) => i.threadId === thread.id).map((i) => i.id))
          const missing = pinned.filter((id) => !found.has(id))
          if (missing.length > 0) {
            return yield* new InvalidRequest({ reason: `pinnedItemIds: ${missing.join(", ")} ${missing.length === 1 ? "is not an item" : "are not items"} of thread ${thread.id}` })
          }
          // Checked against what it overrides: the active instance's settings, or the defaults without one (found by a
          // review: checking against both refused a control valid on its instance).
          const { problems, view } = yield* controlView(thread, control)
          const all = view.effective === null
            ? ToolResultOffload.problems(ToolResultOffload.withOverrides(ToolResultOffload.defaults, OffloadControls.settingsOf(control)))
            : problems
          if (all.length > 0) return yield* new InvalidRequest({ reason: `tool-result offload control: ${all.join("; ")}` })
          yield* store.setOffloadControl(thread.id, control)
          yield* store.appendEvent({ threadId: thread.id, type: "context.offload_control_set", payload: { control }, commandId: command.commandId })
          return view
        })
      ).pipe(uow.thread(command.threadId, "ThreadService.setToolResultOffloadControl"))
    })

    /**
     * Posts the client's tool results for a waiting run (see `Commands.SubmitToolResults` and ClientToolWaits): they
     * are recorded and the run's wait is answered; `continueRun` (the run driver) then continues the turn. Fails with
     * `RunNotFound`, `RunNotWaiting`, `InvalidRequest`.
     */
    const submitToolResults = toolWaits.submit

    /**
     * Continues a waiting run whose results were posted (TurnExecution `continueRun`); returns the run's result
     * (`waiting` again when the model called the client's tools again).
     */
    const continueRun = (runId: Run["id"]) => turns.continueRun(runId)

    /** Ends `runId` if it waited for tool results past its deadline (see ClientToolWaits `expire`). */
    const expireToolWait = toolWaits.expire

    return {
      createThread,
      switchProvider,
      submitToolResults,
      continueRun,
      expireToolWait,
      sendMessage,
      enqueueMessage,
      queueForDriver,
      processRun,
      interrupt,
      compact,
      fork,
      mergeBack,
      offload,
      autoOffload,
      undoOffload,
      getOffload,
      cancelOffload,
      previewToolResultOffload,
      undoToolResultOffload,
      getToolResultOffloadControl,
      setToolResultOffloadControl,
      visibleHistory: offloader.visibleHistory,
      recover,
      getThread,
      listThreads: store.listThreads
    }
  })
}) {}

export type { ProviderInstance }
