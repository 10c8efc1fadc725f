/**
 * RunRecovery: ends runs that cannot go on by themselves — a user's interrupt (a run not yet started ends before the
 * provider, a running run is stopped at the provider and read back) and restart recovery (the runs of drivers that
 * are gone). Where it cannot be told whether the provider read a prompt, the native thread is no longer trusted, so
 * the prompt is neither lost nor delivered twice. A running run that another live process drives is not ended here:
 * the interrupt is recorded on the run for its driver (the run driver there polls for it and stops the run as a local
 * interrupt does), and this process answers once the run has ended there (or stops it itself if that driver dies).
 *
 * It does not run turns (TurnExecution) or decide when to recover (the run driver and the CLI's write commands do).
 */
import {
  type Commands,
  DeliveryStatus,
  type Item,
  type NativeThread,
  NoRunInProgress,
  Run,
  type RunId,
  type RunStopPoint,
  RunNotFound,
  ThreadNotFound,
  terminalRunStatuses
} from "@baton/contracts"
import { ThreadStore, UnitOfWork } from "@baton/persistence"
import { ProviderRegistry } from "@baton/providers"
import { DateTime, Duration, Effect, Option, Schedule } from "effect"
import { ClientToolWaits } from "./ClientToolWaits.js"
import * as CommandReceipts from "./CommandReceipts.js"
import { ContextHandoffDelivery } from "./ContextHandoffDelivery.js"
import { DriverRegistry } from "./DriverRegistry.js"
import { NativeThreadTrust } from "./NativeThreadTrust.js"
import { OrchestratorConfig } from "./OrchestratorConfig.js"
import { type InterruptRequest, RunLifecycle } from "./RunLifecycle.js"
import * as Span from "./internal/Span.js"

export class RunRecovery extends Effect.Service<RunRecovery>()("@baton/orchestration/RunRecovery", {
  effect: Effect.gen(function*() {
    const uow = yield* UnitOfWork
    const driver = yield* DriverRegistry
    const trust = yield* NativeThreadTrust
    const lifecycle = yield* RunLifecycle
    const store = yield* ThreadStore
    const registry = yield* ProviderRegistry.ProviderRegistry
    const finishRun = lifecycle.finish
    const stopAndReadBack = trust.probe
    const distrustNative = trust.distrust
    const hasOutput = lifecycle.hasOutput
    const toolWaits = yield* ClientToolWaits
    const delivery = yield* ContextHandoffDelivery
    const config = yield* OrchestratorConfig
    /** See `awaitRemote`: the driver's interrupt and read-back, each bounded, with a margin for its poll. */
    const remoteInterruptWaitMillis = 2 * config.interruptTimeoutMillis + 10 * config.interruptPollMillis
    /** 25 ms doubling, at most 1 s apart (the run driver's polls of a run driven elsewhere). */
    const remotePolls = Schedule.union(Schedule.exponential(Duration.millis(25)), Schedule.spaced(Duration.seconds(1)))

    /** Whether run `runId`'s driver (`runs.driver_id`) is another process's, and alive. */
    const drivenElsewhere = (runId: Run["id"]) =>
      Effect.gen(function*() {
        const owner = (yield* store.runDrivers([runId])).get(runId) ?? null
        return owner !== null && owner !== driver.driverId && (yield* driver.aliveAmong([owner])).has(owner)
      })

    /**
     * Inside an interrupt's unit of work: with a receipt key, a command id recorded meanwhile (a concurrent copy of
     * the same request) answers its first result; else `effect`'s run is recorded as the command's result.
     */
    const answeredOnce = <E, R>(command: Commands.InterruptRun, receipt: CommandReceipts.Key | null, effect: Effect.Effect<Run, E, R>) =>
      receipt === null ? effect : Effect.gen(function*() {
        const seen = yield* CommandReceipts.find(store, receipt)
        if (seen._tag === "Some") return yield* CommandReceipts.decode(Run, command.commandId, seen.value.result)
        return yield* CommandReceipts.write(store, receipt, Run, yield* effect)
      })

    /**
     * What an interrupt does, decided in one unit of work under the thread's lock from the run as read there: the
     * command's `runId`, else the thread's first unfinished run. With a receipt key, a command id seen before answers
     * its first result (read in the same transaction, so a retry never resolves to the run queued behind the one it
     * interrupted). A run not yet started ends `interrupted` before the provider, a waiting run's open calls are
     * answered with error results, an ended run is answered as it is — all in this unit of work (`Answered`); a
     * running run must be stopped at the provider first, outside the lock (`Running`), by the process that drives it:
     * when that is another live process, the request is recorded on the run for it (`Remote`) and the run is left
     * running (its attempt open) for that driver to end. Read before the lock, the
     * run could move on before it was taken (review: a run read `starting` whose turn then moved it to `running` and
     * called the provider was ended `before_provider`, its native thread dropped, the provider never asked to stop).
     * Fails with `RunNotFound`, `ThreadNotFound`, `NoRunInProgress`, `InvalidRequest` (a key another command used).
     */
    const decide = (command: Commands.InterruptRun, receipt: CommandReceipts.Key | null, who: string, code: InterruptRequest["code"]) =>
      uow.thread(command.threadId, "RunRecovery.interrupt")(Effect.gen(function*() {
        if (receipt !== null) {
          const seen = yield* CommandReceipts.find(store, receipt)
          if (seen._tag === "Some") {
            return { _tag: "Answered", run: yield* CommandReceipts.decode(Run, command.commandId, seen.value.result) } as const
          }
        }
        let runId: RunId
        if (command.runId !== undefined) runId = command.runId
        else {
          if ((yield* store.getThread(command.threadId))._tag === "None") return yield* new ThreadNotFound({ threadId: command.threadId })
          const current = yield* store.findFirstUnfinishedRun(command.threadId)
          if (current._tag === "None") return yield* new NoRunInProgress({ threadId: command.threadId })
          runId = current.value.id
        }
        const found = yield* store.getRun(runId)
        if (found._tag === "None" || found.value.threadId !== command.threadId) {
          // Under a thread that does not exist, the thread is what is not found (its runs' route would 404 too).
          if ((yield* store.getThread(command.threadId))._tag === "None") return yield* new ThreadNotFound({ threadId: command.threadId })
          return yield* RunNotFound.onThread(runId, command.threadId, found)
        }
        const run = found.value
        if (run.status === "running") {
          // Driven by another live process: only its fiber and its adapter can stop the turn (this process's adapter
          // has no call to stop, and could not tell that the provider read the prompt). The request is recorded for
          // that driver, which stops the run as a local interrupt does; the run is left to it meanwhile. (A run with
          // no native thread, a gateway's, has no provider turn of Baton's to stop: it is ended here as before.)
          if (run.nativeThreadId !== null && (yield* drivenElsewhere(run.id))) {
            yield* store.requestRunInterrupt(run.id, yield* DateTime.now)
            return { _tag: "Remote", run } as const
          }
          return { _tag: "Running", run } as const
        }
        const answered = run.status === "queued" || run.status === "starting"
          ? finishRun(run, "interrupted", "before_provider", `interrupted by ${who} before the provider started`, code)
          // No provider turn is in flight: the open calls are answered with error results and the run ends after the
          // provider (which read the prompt and called the tools).
          : run.status === "waiting"
          ? toolWaits.interrupt(run, who, code)
          // Already ended: answered as it is (and, with a receipt, that answer recorded).
          : Effect.succeed(run)
        return { _tag: "Answered", run: yield* answeredOnce(command, receipt, answered) } as const
      }))

    /**
     * Stops running `run` at the provider (outside the lock: asks it to stop and reads the native thread back), then
     * ends it under the lock with the stop point that read-back gives — if the run, read again there, is still
     * running on the same native thread, or has ended (it keeps its ending; an untrusted native thread is distrusted
     * all the same); else `null` (it moved on, unfinished, meanwhile: the caller decides again).
     */
    const stopRunning = (command: Commands.InterruptRun, receipt: CommandReceipts.Key | null, run: Run, who: string, code: InterruptRequest["code"]) =>
      // `running` is written just before the provider call: read the native thread back, where the adapter can,
      // to record whether the provider read the prompt (a turn that starts after this is corrected on completion).
      // Where it cannot be told, the native thread is no longer trusted: the next turn start replaces it and owes
      // it the whole history, so the prompt is neither lost nor delivered twice.
      // A provider that does not acknowledge the interrupt within `interruptTimeoutMillis` may still be running the
      // turn: the run ends `interrupted` anyway (the thread accepts the next message) and that native thread is no
      // longer trusted either.
      // Who asked is known to the turn while the provider is asked: a turn that ends with the provider's own
      // "interrupted" before this records the interrupt is ended with this code (RunLifecycle.interrupting).
      lifecycle.interrupting(run.id, { code, reason: `interrupted by ${who}` }, Effect.gen(function*() {
        let read: boolean | "unknown" = "unknown"
        let untrusted: { readonly native: NativeThread; readonly reason: string } | null = null
        const providerThread = yield* store.getProviderThread(run.providerThreadId)
        if (providerThread._tag === "Some" && run.nativeThreadId !== null) {
          const adapter = yield* registry.get(providerThread.value.providerInstance)
          const native = Option.getOrNull(yield* store.getNativeThread(run.nativeThreadId))
          if (native !== null) {
            const probe = yield* stopAndReadBack(adapter, native, run.id)
            // Output the turn already recorded proves the provider read the prompt, whatever the read-back says.
            read = (yield* hasOutput(run.id)) || probe.read
            if (!probe.answered) {
              untrusted = { native, reason: "interrupted mid-turn: the provider did not acknowledge the interrupt" }
            } else if (probe.read === "unknown") {
              untrusted = { native, reason: "interrupted mid-turn: cannot tell whether the provider read the prompt" }
            }
          }
        }
        return yield* uow.thread(run.threadId, "RunRecovery.interruptRunning")(Effect.gen(function*() {
          // Read again under the lock: the provider was asked outside it, and the run may have moved on meanwhile. A
          // turn that ended (most often: answering this interrupt) keeps its ending, and what the read-back showed
          // of its native thread still holds. A run still unfinished but no longer running there (waiting on a
          // client tool call, or restarted by a retry) is decided again: the read-back is not about where it is now.
          const current = yield* store.getRun(run.id)
          if (current._tag === "None") return yield* new RunNotFound({ runId: run.id })
          const ended = terminalRunStatuses.includes(current.value.status)
          if (!ended && (current.value.status !== "running" || current.value.nativeThreadId !== run.nativeThreadId)) return null
          return yield* answeredOnce(command, receipt, Effect.gen(function*() {
            if (untrusted !== null) yield* distrustNative(run.threadId, untrusted.native, untrusted.reason)
            // The attempt's outcome is known now too (the turn's own completion may still correct it if it returns).
            const now = yield* DateTime.now
            for (const a of yield* store.listAttempts(run.id)) {
              if (a.status === "running" || a.status === "starting") {
                yield* store.updateAttempt({ ...a, status: "interrupted", error: `interrupted by ${who}`, updatedAt: now })
              }
            }
            return yield* finishRun(
              read === true ? current.value : { ...current.value, nativeThreadId: null },
              "interrupted",
              read === true ? "after_provider" : "before_provider",
              `interrupted by ${who}`,
              code
            )
          }))
        }))
      }))

    /**
     * Whether `run` is still held by a live driver other than this one: still `running` on the same native thread,
     * and `drivenElsewhere`. `false` when the run is gone too (deciding again answers `RunNotFound`).
     */
    const heldElsewhere = (run: Run) =>
      Effect.gen(function*() {
        const current = yield* store.getRun(run.id)
        if (current._tag === "None" || current.value.status !== "running" || current.value.nativeThreadId !== run.nativeThreadId) return false
        return yield* drivenElsewhere(run.id)
      })

    /**
     * Waits while another live process drives `run` after an interrupt was requested of it (`decide`'s `Remote`):
     * polled at pauses of 25 ms doubling to 1 s, until the run ended or moved on (`None`: decide again, from the
     * record) or its driver is gone (`None` too: deciding again stops it here, as a gone driver's run). Bounded by
     * `remoteInterruptWaitMillis`, what the driver may take to stop it (its two provider calls, interrupt and
     * read-back, each bounded by its `interruptTimeoutMillis`, after its poll): past it, `Some` with the run as it
     * stands (its request stays recorded, and the driver ends it when it sees it).
     */
    const awaitRemote = (run: Run) =>
      Effect.repeat(heldElsewhere(run), { schedule: remotePolls, while: (held) => held }).pipe(
        Effect.timeoutOption(Duration.millis(remoteInterruptWaitMillis)),
        Effect.flatMap((done) =>
          Option.isSome(done) ? Effect.succeedNone : Effect.map(store.getRun(run.id), (current) =>
            // Ended just now after all: decided again (answered with its receipt).
            Option.isSome(current) && terminalRunStatuses.includes(current.value.status) ? Option.none() : Option.orElseSome(current, () => run))
        )
      )

    /**
     * Interrupts a run: `command.runId`, else the thread's run in progress. A run not yet started ends `interrupted`
     * before the provider (a missed run); a running run is interrupted at the provider. A terminal run is left as it
     * is. Which applies is decided from the run as read under the thread's lock (`decide`). `by`: `user` (failure
     * code `interrupted_by_user`) or `shutdown` (the process is stopping: `process_stopped`). With `receipt` (the key
     * of the command as the client sent it) the command is answered once: its result is recorded with the interrupt,
     * and the same command id again answers that run without interrupting another. Fails with `RunNotFound`,
     * `ThreadNotFound`, `NoRunInProgress`, `InvalidRequest`.
     */
    const interrupt = Span.fn("RunRecovery.interrupt")(function*(
      command: Commands.InterruptRun,
      by: "user" | "shutdown" = "user",
      receipt: CommandReceipts.Key | null = null
    ) {
      const who = by === "user" ? "the user" : "the process stopping"
      const code = by === "user" ? "interrupted_by_user" as const : "process_stopped" as const
      for (let target = command;;) {
        const decided = yield* decide(target, receipt, who, code)
        if (decided._tag === "Answered") return decided.run
        if (decided._tag === "Remote") {
          // Its driver stops it and records the outcome; then it is decided again here (answered as it ended, with
          // the receipt), or, when the driver is gone meanwhile, stopped here.
          const standing = yield* awaitRemote(decided.run)
          if (Option.isSome(standing)) return standing.value
          target = { ...target, runId: decided.run.id }
          continue
        }
        const stopped = yield* stopRunning(target, receipt, decided.run, who, code)
        if (stopped !== null) return stopped
        // The run moved on while the provider was asked: decided again, from the record, for the same run.
        target = { ...target, runId: decided.run.id }
      }
    })

    /**
     * Restart recovery: ends every run a crashed process left unfinished, so each thread accepts new messages and
     * the next turn start reconciles what the provider may hold. A run that never reached the provider
     * (`queued`/`starting`) ends `interrupted` before the provider (a missed run, recovered at the next turn
     * start); a `running` run ends `interrupted` after the provider: the provider read its prompt, and whatever it
     * produced after the last durable write is not recorded (never replayed into the record from the provider).
     * A `waiting` run is left as it is: its wait is durable (no provider turn is in flight), it still accepts the
     * client's results, and its deadline ends it otherwise. Then records the prompts owed (runs that ended while
     * queued) whose runs ahead have all ended (`RunLifecycle.recordOwedPrompts`). Returns the runs it ended.
     *
     * With `orphans`: only those runs, each this driver's own and left unfinished by a turn that stopped in this
     * process without an outcome (its fiber failed or died: a defect, or the database failing as the turn ended; the
     * run driver calls it). No process will drive them on, and the driver is alive, so restart recovery would never
     * end them: the thread was wedged behind them until the user interrupted or the process restarted. They are ended
     * the same way (the native thread read back), `failed` with `turn_crashed`; so is such a run still `queued`,
     * whichever driver accepted it (its turn died before the claim: ended before the provider). A run another driver
     * claimed is left alone.
     */
    const recover = Span.fn("RunRecovery.recover")(function*(orphans: ReadonlyArray<RunId> = []) {
      const orphaned = orphans.length > 0
      const openAttempts = orphaned ? (yield* store.listOpenAttempts()).filter((a) => orphans.includes(a.runId)) : yield* store.listOpenAttempts()
      const unfinished = orphaned
        ? (yield* Effect.forEach(orphans, (id) => store.getRun(id))).flatMap((r) =>
          Option.isSome(r) && !terminalRunStatuses.includes(r.value.status) ? [r.value] : []
        )
        : yield* store.listUnfinishedRuns()
      const candidates = new Map<string, Run>(unfinished.filter((r) => r.status !== "waiting").map((r) => [r.id as string, r]))
      for (const a of openAttempts) {
        if (!candidates.has(a.runId)) {
          const r = yield* store.getRun(a.runId)
          if (r._tag === "Some") candidates.set(a.runId, r.value)
        }
      }
      // Only the runs of drivers that are gone: another process on the same database (or this incarnation) may be
      // driving the others right now. Orphans: only this driver's.
      const owners = yield* store.runDrivers([...candidates.values()].map((r) => r.id))
      const alive = yield* driver.aliveAmong([...owners.values()])
      const toCheck = new Map([...candidates].filter(([id]) => {
        const owner = owners.get(id) ?? null
        // A turn that died before its claim leaves its run `queued`, the driver's that accepted it (another process's,
        // alive; review r42a: this worker took it again and again, about 460 times a second, and the runs behind it
        // waited for good). No turn of a queued run is in flight anywhere: it is ended here as an interrupt would end
        // it; a driver that claims it meanwhile moves it on, and the check under the lock below leaves it to that one.
        if (orphaned) return owner === driver.driverId || candidates.get(id)?.status === "queued"
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
        // What the record holds of an answer the native thread lacks (see below).
        let unanswered: ReadonlyArray<Item> = []
        if (attempt !== null && nativeId !== null) {
          native = Option.getOrNull(yield* store.getNativeThread(nativeId))
          const providerThread = Option.getOrNull(yield* store.getProviderThread(run.providerThreadId))
          const adapter = providerThread === null ? null : Option.getOrNull(yield* Effect.option(registry.get(providerThread.providerInstance)))
          const back = native === null || adapter?.readThread === undefined
            ? null
            : yield* Effect.option(adapter.readThread(native.nativeRef))
          // Output the turn recorded before the crash proves the provider read the prompt.
          read = (yield* hasOutput(run.id)) || (back === null || back._tag === "None" ? "unknown" : back.value.runIds.includes(run.id))
          // A model API's message list that holds the run's last request but not its answer (the process died while
          // it streamed) lacks what the record holds of that answer: it is handed to the lane below.
          if (read === true && back !== null && back._tag === "Some" && (back.value.unansweredRunIds ?? []).includes(run.id)) {
            const items = yield* store.listItemsOfRuns([run.id])
            const lastResult = items.map((i) => i.kind).lastIndexOf("tool_result")
            unanswered = items.slice(lastResult + 1).filter((i) => i.kind !== "user_message" && i.kind !== "handoff_marker")
          }
        }
        // A run `running` with no attempt at all is a gateway request's (a turn's run moves to `running` with its
        // attempt, in one unit of work): the gateway forwards a request before it records it, so the upstream had it.
        // Review b43gw: it was ended `before_provider`, "process restarted before the provider started".
        const forwarded = attempt === null && run.status === "running" &&
          Option.exists(yield* store.getRunWithAttemptCount(run.id), (r) => r.attempts === 0)
        if (forwarded) read = true
        const untrusted = read === "unknown" ? native : null
        const stopPoint: RunStopPoint = read === true ? "after_provider" : "before_provider"
        const nativeThreadId = read === true ? nativeId : null
        const settled = yield* uow.thread(run.threadId, "RunRecovery.recover")(Effect.gen(function*() {
          // Under the thread's lock, the run as it is now: a live driver may have claimed it since it was read (its
          // owner changed and is alive); then it is not recovery's to end.
          const current = yield* store.getRun(run.id)
          if (current._tag === "None") return null
          // Moved on since it was read (another process's recovery ended it, or an interrupt did): what was read of it
          // is stale, and acting on it closed its attempt again and handed a cut answer's recorded part to the lane a
          // second time (review r43: every live process's gone-driver sweep meets the others' on one gone run).
          // Left as it is; a run a gone driver still holds is read again by the next recovery.
          if (current.value.status !== run.status) return null
          const ownerNow = (yield* store.runDrivers([run.id])).get(run.id) ?? null
          const ownerBefore = owners.get(run.id) ?? null
          if (ownerNow !== ownerBefore && ownerNow !== null && (yield* driver.aliveAmong([ownerNow])).has(ownerNow)) return null
          const now = yield* DateTime.now
          if (untrusted !== null) {
            yield* distrustNative(run.threadId, untrusted, "restart: cannot tell whether the provider read an unfinished run")
          }
          if (attempt !== null) {
            yield* store.updateAttempt({ ...attempt, status: "interrupted", error: orphaned ? "the turn crashed" : "process restarted", updatedAt: now })
          }
          if (attempt !== null && stopPoint === "after_provider" && untrusted === null && nativeThreadId !== null) {
            // The provider took the turn, and its usage report died with the turn's completion: as for a turn that
            // reports none, the last report no longer says what the native thread holds (the turn added its prompt,
            // inline history and answer). It is dropped, and Baton's estimate grows by what the record holds of the
            // turn, so the next turn start plans with the estimate instead of the stale report (sim seed 55017: a
            // crash while the completion recorded the usage left the report of before that turn, and the next turn
            // start sent 13,100 tokens of history into a native thread the turn had filled to 31,000 of 44,000).
            const stored = yield* store.getNativeThread(nativeThreadId)
            if (stored._tag === "Some") {
              const items = yield* store.listItemsOfRuns([run.id])
              const inline = (yield* store.listDeliveriesToNative(stored.value.id, DeliveryStatus.literals)).filter((d) => d.runId === run.id && d.mode === "inline")
              const added = items.reduce((n, i) => n + i.tokens, 0) + inline.reduce((n, d) => n + d.deliveredTokens, 0)
              yield* store.recordNativeUsage(stored.value.id, null, stored.value.estimatedTokens + added, now)
            }
          }
          if (unanswered.length > 0 && untrusted === null) {
            // The partial answer joins the lane's native thread at its next turn start (a late-output handoff), so
            // the record and the message list the model receives agree.
            const providerThread = yield* store.getProviderThread(run.providerThreadId)
            if (providerThread._tag === "Some") {
              yield* delivery.createHandoff(run.threadId, "missed_run", providerThread.value, [run], unanswered, { lateOutputOf: run.id })
            }
          }
          if (terminalRunStatuses.includes(run.status)) {
            // Already ended (e.g. by an interrupt) but its turn's outcome was never recorded: correct where it stopped.
            const corrected: Run = { ...run, stopPoint, nativeThreadId, updatedAt: now }
            yield* lifecycle.update(run, corrected)
            return corrected
          }
          if (orphaned) {
            return yield* finishRun(
              { ...run, nativeThreadId },
              "failed",
              stopPoint,
              forwarded
                ? "the gateway's request stopped in this process without an outcome while it was with the upstream"
                : read === true
                ? "the turn stopped in this process without an outcome during the provider turn"
                : "the turn stopped in this process without an outcome before the provider started",
              "turn_crashed"
            )
          }
          return yield* finishRun(
            { ...run, nativeThreadId },
            "interrupted",
            stopPoint,
            forwarded
              ? "process restarted while the gateway's request was with the upstream"
              : read === true
              ? "process restarted during the provider turn"
              : "process restarted before the provider started",
            "process_restarted"
          )
        }))
        if (settled !== null) ended.push(settled)
      }
      // Prompts owed by runs that ended while queued are recorded by the end of the last run ahead of them, in that
      // end's unit of work (RunLifecycle), so a crash leaves each either owed behind an unfinished run or recorded.
      // Reconciled here anyway, for every thread that owes one (none almost always: one statement), so that a prompt
      // whose runs ahead all ended is never left owed.
      for (const threadId of yield* store.listThreadsOwingPrompts()) {
        yield* uow.thread(threadId, "RunRecovery.recordOwedPrompts")(lifecycle.recordOwedPrompts(threadId))
      }
      return ended
    })

    return { interrupt, recover }
  })
}) {}
