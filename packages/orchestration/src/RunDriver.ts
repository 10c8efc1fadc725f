/**
 * RunDriver: runs each thread's queued runs in order, one at a time, in the background of this process, so a send
 * returns its run id at once (the asynchronous surface a server needs); `sendAndWait` is the synchronous helper on
 * top of it.
 *
 * - `submit` queues the run (behind the thread's unfinished runs: never `RunInProgress`) and wakes the thread's
 *   worker. One worker fiber per thread with queued runs; it claims the next run under the thread's lock
 *   (ThreadService.processRun: a run starts only when every earlier run of its thread has ended), so across
 *   processes on one database a thread's runs still run in seq order, one at a time. A run sent to a thread with no
 *   unfinished run is claimed in its queueing unit of work (ThreadService.queueForDriver) and the worker drives it
 *   without claiming it again, or reading the queue first (it is the thread's first unfinished run by construction):
 *   one unit of work and about eleven statements fewer before the provider call. After each run the worker reads the
 *   queue once: runs queued behind it (by this process, another, or left queued) start at once. A run ahead that another
 *   process is driving is waited for (polled, 25 ms doubling to 1 s); if that driver is gone, its runs are
 *   reconciled (ThreadService.recover) and the thread goes on.
 * - Waiting for a run (`awaitRun`, `awaitEnd`): a caller joins the run's waiters, settled when this process's fiber for
 *   the run ends (a signal, no polling); a run this process is driving is joined without reading it. A run driven
 *   elsewhere is settled by the thread's worker here when it sees the run ended, or polled (25 ms doubling to 1 s)
 *   when there is no worker here (or when the worker stops with the run unsettled: `releaseWaiters`). An interrupt
 *   here of a run with no fiber here (queued, claimed, waiting) answers its waiters itself. `awaitEnd`'s `orWaiting`
 *   also answers when the run comes to wait for the client's tool results: the fiber's end carries the status.
 * - `interrupt` records the interrupt and asks the provider to stop (ThreadService.interrupt, bounded by
 *   `interruptTimeoutMillis`); if the run's fiber has not ended within that bound too, the fiber is interrupted: the
 *   run's outcome is already recorded and the thread takes the next run. An interrupt that another process received
 *   for a run in flight here is recorded on the run there (RunRecovery): one poller here reads those requests for all
 *   runs in flight, every `interruptPollMillis`, and stops each run asked the same way, so the driving process, whose
 *   fiber and adapter hold the turn, records its outcome before the thread takes its next run.
 * - At start it reconciles what gone drivers left unfinished (ThreadService.recover), and then every
 *   `goneDriverSweepMillis` what a driver that died since left (another process on the database, killed mid-turn);
 *   a gone driver's `waiting` runs are taken on by this driver's workers (their deadlines watched here). A turn that fails here without
 *   an outcome (its fiber failed: a defect, or the database as the turn ended) leaves its run unfinished and this
 *   live driver's, which no process would ever end: the driver ends it as recovery would (`failed`, `turn_crashed`;
 *   `endOrphan`, retried while it fails) and the thread takes its next run.
 * - A worker whose pass fails (a read of the queue, a wait or a record: the database gone for a moment) reads again
 *   after a pause (100 ms doubling to 5 s) rather than stopping with the thread's queued runs left for a later wake.
 * - A run `waiting` for the client's tool results holds its thread's queue without a fiber: the worker stops, and
 *   is woken when the results are posted here (`submitToolResults`: it continues the run), when the run is
 *   interrupted here (`interrupt`: the runs queued behind it start at once) or at the wait's deadline (it ends the
 *   run, `tool_results_timeout`). At start it watches every wait left open (a restart keeps them). Processes do not
 *   signal each other: the process that records the results or the interrupt wakes its own worker, which takes the
 *   thread's next run (a worker stopped elsewhere stays stopped until its own wake: the deadline timer or a send).
 * - At shutdown (its scope closing, e.g. on SIGTERM) it stops taking runs and interrupts the runs in flight the same
 *   way, so each ends with a recorded outcome. `stopTaking` stops taking runs earlier, while the server still gives
 *   open requests their deadline.
 *
 * Fiber bookkeeping (which threads have a worker here, which run each fiber drives) is process-local runtime state;
 * everything two processes must agree on is in the database.
 */
import { type Commands, type ProviderInstance, RunNotFound, terminalRunStatuses, type Run, type RunId, type ThreadId, type ToolWait } from "@baton/contracts"
import { ThreadStore } from "@baton/persistence"
import { Cause, DateTime, Deferred, Duration, Effect, Exit, Fiber, FiberId, Option, Predicate, Schedule } from "effect"
import * as CommandReceipts from "./CommandReceipts.js"
import { DriverRegistry } from "./DriverRegistry.js"
import { OrchestratorConfig } from "./OrchestratorConfig.js"
import { type SendResult, ThreadService } from "./ThreadService.js"
import { type ClaimedRun, resultFromRecord } from "./TurnExecution.js"

/** What `submit` answers at once: the queued run. */
export interface RunAccepted {
  readonly runId: RunId
  readonly runSeq: number
  readonly threadId: ThreadId
  readonly status: Run["status"]
}

/**
 * The interrupt a process gives a run it drives when another process recorded one for it (no receipt here: the
 * process that received the client's command answers it, with its receipt, once the run has ended).
 */
const remoteCommand = (run: { readonly id: RunId; readonly threadId: ThreadId }): Commands.InterruptRun => ({
  _tag: "InterruptRun",
  commandId: `cmd_remote_${run.id}` as Commands.InterruptRun["commandId"],
  threadId: run.threadId,
  runId: run.id
})

const backoff = (pause: number) => Math.min(1_000, pause * 2)

/** The pause before the next try after `failures` failures in a row: 100 ms doubling to 5 s. */
const retryPause = (failures: number) => Duration.millis(Math.min(5_000, 100 * 2 ** Math.min(6, failures)))

export class RunDriver extends Effect.Service<RunDriver>()("@baton/orchestration/RunDriver", {
  scoped: Effect.gen(function*() {
    const threads = yield* ThreadService
    const registry = yield* DriverRegistry
    const store = yield* ThreadStore
    const config = yield* OrchestratorConfig
    const autoOffloadOn = config.autoOffload !== null
    const scope = yield* Effect.scope
    const workers = new Map<string, Fiber.RuntimeFiber<void, never>>()
    const again = new Set<string>()
    const inFlight = new Map<string, Fiber.RuntimeFiber<SendResult, unknown>>()
    /** The run each fiber in `inFlight` drives (its thread and seq), by run id: set and cleared with `inFlight`. */
    const driving = new Map<string, Run>()
    /**
     * How many runs' fibers have ended here (each `drive`'s end counts one, before it settles the run's waiters): a
     * waiter that read its run unfinished and joins `waiting` after a yield compares it to know whether the run may
     * have ended, and settled nobody, in between (see `awaitEnded`).
     */
    let drivesEnded = 0
    /** Runs claimed in their queueing unit of work (`starting`, this driver's) that the thread's worker drives next. */
    const claimedHere = new Map<string, ClaimedRun>()
    /** Callers waiting for a run this process may drive: its result (rich turn-start report) or its failure. */
    const waiting = new Map<string, {
      readonly threadId: string
      readonly runSeq: number
      /** Replaced by a fresh one when the thread's worker stops with the run unsettled (see `releaseWaiters`). */
      deferred: Deferred.Deferred<SendResult, unknown>
      /** Callers awaiting it: the entry goes when the last one stops waiting (one giving up leaves the others). */
      waiters: number
    }>()
    let stopping = false
    const mutex = yield* Effect.makeSemaphore(1)
    /** Deadline timers of the waits this process watches, by run id. */
    const deadlines = new Map<string, Fiber.RuntimeFiber<void, never>>()

    /**
     * Waits until `runId` is no longer the thread's first unfinished run (it is driven elsewhere), until it is
     * `waiting` for the client's tool results (the worker's loop then looks at its wait: results posted here are this
     * worker's to continue), or until it is a run
     * this driver claimed at its queueing and `submit` has handed over (`claimedHere`: the worker read it before the
     * hand-over and took it for another driver's), polling. If the
     * driver driving it is gone (a crash, or a process that stopped mid-run), its runs are reconciled here
     * (ThreadService.recover) instead of being waited for until some process restarts.
     */
    const waitWhileFirst = (threadId: ThreadId, runId: RunId) =>
      Effect.gen(function*() {
        let pause = 25
        while (!stopping) {
          // Claimed at its queueing by this driver, and handed over since the worker read it: the worker drives it.
          if (claimedHere.has(runId)) return
          const first = yield* store.findFirstUnfinishedRun(threadId)
          if (first._tag === "None" || first.value.id !== runId) return
          // Gone `waiting` for the client's tool results: no process drives it until the results are posted or its
          // deadline passes, and they may be posted here, where this worker is what continues it. The loop looks at
          // the wait (continue, expire, or stop until a post or the deadline wakes it) instead of polling on.
          if (first.value.status === "waiting") return
          const owner = (yield* store.runDrivers([runId])).get(runId) ?? null
          if (!(yield* registry.aliveAmong([owner])).has(owner ?? "")) {
            yield* threads.recover().pipe(Effect.catchAllCause((cause) => Effect.logWarning(`reconciling run ${runId} of a gone driver failed`, cause)))
            continue
          }
          yield* Effect.sleep(Duration.millis(pause))
          pause = backoff(pause)
        }
      })

    /**
     * Polls the record until the run ends: the ended record. The first read at once, then after pauses of 25 ms
     * doubling to 1 s; with `firstPause` (the backstop of a caller waiting for a signal here: `waitBackstopMillis`)
     * the first read after that pause, doubling from it. Fails with `RunNotFound`.
     */
    const pollEnded = (runId: RunId, firstPause: number | null = null, orWaiting = false) =>
      Effect.gen(function*() {
        let pause = firstPause ?? 25
        if (firstPause !== null) {
          yield* Effect.sleep(Duration.millis(pause))
          pause = backoff(pause)
        }
        let found = yield* store.getRun(runId)
        while (found._tag === "Some" && !(yield* answers(found.value, orWaiting))) {
          yield* Effect.sleep(Duration.millis(pause))
          pause = backoff(pause)
          found = yield* store.getRun(runId)
        }
        if (found._tag === "None") return yield* new RunNotFound({ runId })
        return found.value
      })

    /**
     * Whether `run` waits for the client's tool results now: status `waiting` with its wait `open` (one read of the
     * wait; a wait whose results were posted is about to be continued, so the run goes on).
     */
    const waitsForClient = (run: Run) =>
      run.status !== "waiting"
        ? Effect.succeed(false)
        : Effect.map(store.getToolWait(run.id), (wait) => wait._tag === "Some" && wait.value.state === "open")

    /** Whether `run`, as read, answers a wait: it has ended, or (`orWaiting`) it waits for the client's tool results. */
    const answers = (run: Run, orWaiting: boolean) =>
      terminalRunStatuses.includes(run.status) ? Effect.succeed(true) : orWaiting ? waitsForClient(run) : Effect.succeed(false)

    const recorded = (r: Run) =>
      Effect.map(store.getProviderThread(r.providerThreadId), (p) =>
        resultFromRecord(r, p._tag === "Some" ? p.value.providerInstance : ("" as ProviderInstance)))

    /**
     * Settles the callers waiting for `runId` with its fiber's exit. An exit that leaves the run unfinished (it now
     * waits for the client's tool results) spends the deferred: callers that join later (while a continuation is in
     * flight) get a fresh one, settled by that continuation's end, rather than this stale answer at once.
     */
    const settle = (runId: string, exit: Exit.Exit<SendResult, unknown>) =>
      Effect.gen(function*() {
        const w = waiting.get(runId)
        if (w === undefined) return
        yield* Deferred.done(w.deferred, exit)
        if (Exit.isSuccess(exit) && !terminalRunStatuses.includes(exit.value.status)) {
          w.deferred = yield* Deferred.make<SendResult, unknown>()
        }
      })

    /** Settles the callers waiting for `run` (ended) with its record's result, unless they are settled already. */
    const settleWith = (runId: string, run: Run) =>
      Effect.gen(function*() {
        const w = waiting.get(runId)
        if (w === undefined || (yield* Deferred.isDone(w.deferred))) return
        yield* Deferred.succeed(w.deferred, yield* recorded(run))
      })

    /**
     * Settles the callers waiting for runs of `threadId` that ended without this process driving them (another
     * process did): every run before `firstUnfinishedSeq` (all of them when `null`) has ended, in seq order.
     */
    const settleEndedElsewhere = (threadId: ThreadId, firstUnfinishedSeq: number | null) =>
      Effect.gen(function*() {
        for (const [runId, w] of [...waiting]) {
          if (w.threadId !== threadId || inFlight.has(runId) || (firstUnfinishedSeq !== null && w.runSeq >= firstUnfinishedSeq)) continue
          if (yield* Deferred.isDone(w.deferred)) continue
          const found = yield* store.getRun(runId as RunId)
          if (found._tag === "Some" && terminalRunStatuses.includes(found.value.status)) {
            yield* Deferred.succeed(w.deferred, yield* recorded(found.value))
          }
        }
      })

    /**
     * Called as `threadId`'s worker stops (just after it leaves `workers`): the callers waiting for a run of
     * the thread that is not settled were counting on this worker (they joined while it ran), and nothing here will
     * look at the run again (it is `waiting`, and may be continued or ended by another process). Their deferred fails,
     * so they poll the record as a caller that joins with no worker here does; the entry gets a fresh deferred for
     * callers that join later (settled if a fiber here drives the run after all).
     */
    const releaseWaiters = (threadId: string) =>
      Effect.gen(function*() {
        for (const w of [...waiting.values()]) {
          if (w.threadId !== threadId || (yield* Deferred.isDone(w.deferred))) continue
          const stale = w.deferred
          w.deferred = yield* Deferred.make<SendResult, unknown>()
          yield* Deferred.die(stale, new Error(`the worker of thread ${threadId} stopped`))
        }
      })

    /** The poller of interrupts asked elsewhere (`pollRemoteInterrupts`), while runs are in flight here. */
    let interruptPoller: Fiber.RuntimeFiber<void, never> | null = null
    /**
     * The user's interrupts being carried out here, by command (id, thread, payload): each settles its `Deferred` with
     * its outcome, which a copy of the same command arriving meanwhile awaits (`interrupt`).
     */
    const interruptsInFlight = new Map<string, Deferred.Deferred<Run, Effect.Effect.Error<ReturnType<typeof stopRun>>>>()
    /** Runs in flight here that the poller is stopping (so a later poll does not stop them again). */
    const stoppingRemotely = new Set<string>()

    /**
     * Reads, every `interruptPollMillis` while runs are in flight here, which of them another process asked to
     * interrupt (`runs.interrupt_requested_at`, recorded by RunRecovery when it received the interrupt): one statement
     * for all of them (none for a turn shorter than one pause: the first read comes after it). Each one asked is
     * stopped as an interrupt sent here stops it (`stopRun`, by the user), beside the poll. A failed read counts as no
     * request (the next one retries). Ends when no run is in flight here (decided under the driver's mutex, so a run
     * that starts meanwhile starts a new poller: `watchInterrupts`).
     */
    const pollRemoteInterrupts: Effect.Effect<void> = Effect.gen(function*() {
      for (;;) {
        yield* Effect.sleep(Duration.millis(config.interruptPollMillis))
        const watched = [...inFlight.keys()].filter((id) => !stoppingRemotely.has(id)) as Array<RunId>
        const asked = watched.length === 0 ? [] : yield* Effect.orElseSucceed(store.runsInterruptRequested(watched), () => [])
        for (const runId of asked) {
          const run = driving.get(runId)
          if (run === undefined) continue
          stoppingRemotely.add(runId)
          yield* Effect.forkIn(
            stopRun(remoteCommand(run), "user").pipe(
              Effect.catchAllCause((cause) => Effect.logWarning(`interrupting run ${runId} as another process asked failed`, cause)),
              Effect.ensuring(Effect.sync(() => void stoppingRemotely.delete(runId)))
            ),
            scope
          )
        }
        const done = yield* mutex.withPermits(1)(Effect.sync(() => {
          if (inFlight.size > 0) return false
          interruptPoller = null
          return true
        }))
        if (done) return
      }
    })

    /** Starts the poller of interrupts asked elsewhere unless it runs (called once a run is in flight here). */
    const watchInterrupts = mutex.withPermits(1)(Effect.gen(function*() {
      if (interruptPoller === null) interruptPoller = yield* Effect.forkIn(pollRemoteInterrupts, scope)
    }))

    /**
     * After `run`'s turn failed here (not interrupted) and left it unfinished: ends it as restart recovery would
     * (`ThreadService.recover([run.id])`: `failed`, `turn_crashed`, the native thread read back), so the runs queued
     * behind it go on. Nothing else would: the thread's worker waits behind a run of a live driver, and restart
     * recovery leaves a live driver's runs alone, so the thread stayed wedged until the user interrupted the run or the
     * process restarted. A recovery that fails (the database may be what failed the turn) is tried again at pauses of
     * 100 ms doubling to 5 s until it succeeds or the driver stops (once only when it is stopping already: what is left
     * is restart recovery's). Whether it ended it (or found nothing to end).
     */
    const endOrphan = (run: Run) =>
      Effect.gen(function*() {
        for (let failures = 0;; failures++) {
          const done = yield* threads.recover([run.id]).pipe(
            Effect.as(true),
            Effect.catchAllCause((cause) => Effect.as(Effect.logWarning(`ending run ${run.id}, whose turn stopped without an outcome, failed`, cause), false))
          )
          if (done || stopping) return done
          yield* Effect.sleep(retryPause(failures))
        }
      })

    /** Runs `effect` (a turn of `run`) as this process's fiber for the run and settles its waiting callers. */
    /** Lost races in a row of each run taken again while still queued (`drive`), for their pauses. */
    const lostRaces = new Map<string, number>()

    const drive = (run: Run, effect: Effect.Effect<SendResult, unknown>) =>
      Effect.gen(function*() {
        const runId = run.id
        const fiber = yield* Effect.forkIn(effect, scope)
        inFlight.set(runId, fiber)
        driving.set(runId, run)
        yield* watchInterrupts
        const exit = yield* Fiber.await(fiber)
        // Cleared before the waiters are settled: a caller that still finds the run in `driving` is settled below.
        inFlight.delete(runId)
        driving.delete(runId)
        drivesEnded++
        // A turn that failed (a defect, storage) rather than being interrupted (an interrupt or the shutdown records
        // the run's outcome itself) is ended here, while the driver drains too (after `stopTaking` the runs in flight
        // go on until the scope closes, and one no longer in flight is not stopped there: review r42a, it stayed
        // `running` and its caller waited out the server's deadline). Draining, it is tried once (`endOrphan`).
        // A lost race (`ConcurrentModification`) that left the run `queued` is no crash: nothing of it ran, and the
        // thread's worker takes it again after a pause (100 ms doubling to 5 s per loss in a row) instead.
        if (Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause)) {
          const lostRace = Option.exists(Cause.failureOption(exit.cause), (e) => Predicate.isTagged(e, "ConcurrentModification"))
          const stillQueued = lostRace && Option.exists(yield* Effect.option(store.getRun(runId)), Option.exists((r) => r.status === "queued"))
          if (stillQueued && !stopping) {
            const losses = lostRaces.get(runId) ?? 0
            lostRaces.set(runId, losses + 1)
            yield* Effect.logWarning(`run ${run.id} lost a race before its turn; taking it again`, exit.cause)
            yield* Effect.sleep(retryPause(losses))
          } else {
            lostRaces.delete(runId)
            yield* Effect.logError(`the turn of run ${run.id} stopped without an outcome; ending the run`, exit.cause)
            yield* endOrphan(run)
          }
        }
        if (Exit.isSuccess(exit)) lostRaces.delete(runId)
        yield* settle(runId, exit)
        return exit
      })

    /**
     * The run claimed at its queueing for `threadId` that its worker has not taken yet, if any (at most one: a run is
     * claimed at its queueing only when its thread has no unfinished run).
     */
    const claimedFor = (threadId: ThreadId) => {
      for (const claimed of claimedHere.values()) if (claimed.run.threadId === threadId) return claimed
      return undefined
    }

    /** Wakes the worker of `wait`'s thread at its deadline (once per run; the timer goes with the driver's scope). */
    const watchDeadline = (wait: ToolWait) =>
      Effect.gen(function*() {
        if (deadlines.has(wait.runId)) return
        const now = yield* DateTime.now
        const millis = Math.max(0, DateTime.toEpochMillis(wait.deadlineAt) - DateTime.toEpochMillis(now))
        const timer = yield* Effect.forkIn(
          Effect.sleep(Duration.millis(millis + 1)).pipe(
            Effect.zipRight(Effect.sync(() => void deadlines.delete(wait.runId))),
            Effect.zipRight(wake(wait.threadId))
          ),
          scope
        )
        deadlines.set(wait.runId, timer)
      })

    /**
     * What a worker does with its thread's first run when that run is `waiting`: continue it (results posted), end it
     * (deadline passed), or nothing yet (its deadline watched).
     */
    const waitingStep = (run: Run) =>
      Effect.gen(function*() {
        const wait = yield* store.getToolWait(run.id)
        if (wait._tag === "None") return "idle" as const
        if (wait.value.state === "answered") return "continue" as const
        if (wait.value.state !== "open") return "idle" as const
        if (!DateTime.lessThan(yield* DateTime.now, wait.value.deadlineAt)) return "expire" as const
        yield* watchDeadline(wait.value)
        return "idle" as const
      })

    /**
     * One pass of `threadId`'s worker: drives the thread's queued runs until none is left (or the first is waiting
     * for the client, or the driver stops). Fails as the store fails (a read of the queue, a wait, a record).
     */
    const workPass = (threadId: ThreadId, progress: { drove: boolean }) =>
      Effect.gen(function*() {
        /** Continuations of a waiting run that failed in a row (their backoff). */
        let continueFailures = 0
        while (!stopping) {
          // A run claimed at its queueing is the thread's first unfinished run without reading the queue: it was
          // claimed under the thread's lock when the thread had no unfinished run (every earlier run had ended, and a
          // run queued since has a later seq), and it has not ended since unless interrupted (here: `stopRun` drops it
          // from `claimedHere`; by another process: TurnExecution's begin finds it no longer `starting` and ends the
          // turn before the provider, as it does for an interrupt landing just after this loop's read).
          const pending = claimedFor(threadId)
          const first = pending !== undefined ? Option.some(pending.run) : yield* store.findFirstUnfinishedRun(threadId)
          // A caller waiting here for a run another process drove is answered once the run has ended.
          yield* settleEndedElsewhere(threadId, first._tag === "None" ? null : first.value.seq)
          if (first._tag === "None") {
            const done = yield* mutex.withPermits(1)(Effect.sync(() => {
              if (again.delete(threadId)) return false
              workers.delete(threadId)
              return true
            }))
            if (done) return yield* releaseWaiters(threadId)
            continue
          }
          const run = first.value
          if (run.status === "waiting") {
            const step = yield* waitingStep(run)
            if (step === "continue") {
              const exit = yield* drive(run, threads.continueRun(run.id))
              progress.drove = true
              // A continuation that failed leaves the run `waiting` with its results posted (recovery leaves waiting
              // runs alone): the loop would continue it again at once, in a tight loop while the cause lasts (a
              // database failure, a provider thread gone; review r42a). Each failure in a row waits longer first:
              // 100 ms doubling to 5 s.
              if (Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause)) {
                yield* Effect.sleep(retryPause(continueFailures++))
              } else continueFailures = 0
              continue
            }
            if (step === "expire") {
              yield* threads.expireToolWait(run.threadId, run.id)
              continue
            }
            // Nothing to do until the results are posted or the deadline passes: the worker stops (a post here or
            // the deadline's timer wakes it; a post on another process continues the run there).
            const done = yield* mutex.withPermits(1)(Effect.sync(() => {
              if (again.delete(threadId)) return false
              workers.delete(threadId)
              return true
            }))
            if (done) return yield* releaseWaiters(threadId)
            continue
          }
          const claimed = claimedHere.get(run.id)
          if (claimed !== undefined) claimedHere.delete(run.id)
          else if (run.status !== "queued") {
            // Started by another driver (a gone driver's run is ended by recovery): wait until it ends.
            yield* waitWhileFirst(threadId, run.id)
            continue
          }
          const exit = yield* drive(run, threads.processRun(run.id, claimed))
          progress.drove = true
          // Near the window after a completed run: the automatic /offload (off unless configured) runs beside the
          // driver, so a run queued meanwhile is not held up (it makes the summary stale instead).
          if (Exit.isSuccess(exit) && exit.value.status === "completed" && autoOffloadOn) {
            yield* Effect.forkIn(
              threads.autoOffload(run.threadId, run.id).pipe(
                Effect.catchAllCause((cause) => Effect.logWarning(`automatic /offload after run ${run.id} failed`, cause))
              ),
              scope
            )
          }
          // Another process claimed the run meanwhile: wait until it ends there. (A run now waiting for tool results
          // is looked at again by the loop.)
          if (Exit.isSuccess(exit) && !terminalRunStatuses.includes(exit.value.status) && exit.value.status !== "waiting") {
            yield* waitWhileFirst(threadId, run.id)
          }
        }
      })

    /**
     * Drives the thread's queued runs until none is left (`workPass`). A pass that fails (the database unreachable
     * for a moment as the worker reads the queue, a tool wait or a record) is started again after a pause (100 ms
     * doubling to 5 s per failure in a row; a pass that drove a run meanwhile starts the count again): before, the
     * worker stopped for good, the runs queued behind stayed `queued` until a later send or a restart woke the thread,
     * and their callers were failed although nothing of their runs had run. Only a driver that is stopping gives up:
     * its thread's callers are failed with the cause (restart recovery takes what is left).
     */
    const work = (threadId: ThreadId): Effect.Effect<void> =>
      Effect.gen(function*() {
        let failures = 0
        for (;;) {
          const progress = { drove: false }
          const exit = yield* Effect.exit(workPass(threadId, progress))
          if (Exit.isSuccess(exit)) return
          if (stopping || Cause.isInterruptedOnly(exit.cause)) {
            yield* Effect.logError(`run driver for thread ${threadId} stopped`, exit.cause)
            yield* mutex.withPermits(1)(Effect.sync(() => void workers.delete(threadId)))
            for (const w of waiting.values()) if (w.threadId === threadId) yield* Deferred.failCause(w.deferred, exit.cause)
            return
          }
          if (progress.drove) failures = 0
          yield* Effect.logWarning(`run driver for thread ${threadId}: its pass failed; reading its runs again`, exit.cause)
          yield* Effect.sleep(retryPause(failures++))
        }
      })

    /** Starts the thread's worker, or tells the running one to look again. */
    const wake = (threadId: ThreadId) =>
      mutex.withPermits(1)(Effect.gen(function*() {
        if (stopping) return
        if (workers.has(threadId)) return void again.add(threadId)
        const fiber = yield* Effect.forkIn(work(threadId), scope)
        workers.set(threadId, fiber)
      }))

    const stopRun = (command: Commands.InterruptRun, by: "user" | "shutdown", receipt: CommandReceipts.Key | null = null) =>
      Effect.gen(function*() {
        const run = yield* threads.interrupt(command, by, receipt)
        const threadId = run.threadId
        const runId = run.id
        const fiber = inFlight.get(runId)
        if (fiber !== undefined) {
          const ended = yield* Fiber.await(fiber).pipe(Effect.timeout(Duration.millis(config.interruptTimeoutMillis)), Effect.option)
          if (Option.isNone(ended)) yield* Fiber.interrupt(fiber)
        }
        if (terminalRunStatuses.includes(run.status)) {
          // A run claimed at its queueing and ended before the worker took it is never driven: its hand-over goes.
          claimedHere.delete(runId)
          // Ended without a fiber here (queued, claimed, or waiting for tool results): nothing else settles its
          // callers now (the worker looks at the queue only when the run ahead ends), so they are answered here.
          if (fiber === undefined) yield* settleWith(runId, run)
          // An ended run's deadline timer has nothing left to do.
          const timer = deadlines.get(runId)
          if (timer !== undefined) {
            deadlines.delete(runId)
            yield* Fiber.interrupt(timer)
          }
          // The thread's worker may have stopped at this run (it was `waiting`, with no fiber): wake it so the runs
          // queued behind start now, not at the old wait's deadline. (A worker that is running only looks again.)
          yield* wake(threadId)
        }
        return run
      })

    /**
     * Waits for `runId`: through `deferred` while this process drives (or will drive) it, else by polling the
     * record. A result that is not terminal (another process claimed the run) falls back to polling too.
     */
    const awaitWith = (runId: RunId, deferred: Deferred.Deferred<SendResult, unknown>) =>
      Effect.gen(function*() {
        const found = yield* store.getRun(runId)
        if (found._tag === "None") return yield* new RunNotFound({ runId })
        if (terminalRunStatuses.includes(found.value.status)) {
          const done = yield* Deferred.poll(deferred)
          if (Option.isSome(done)) {
            const exit = yield* Effect.exit(done.value)
            if (Exit.isSuccess(exit)) return exit.value
          }
          return yield* recorded(found.value)
        }
        if (workers.has(found.value.threadId) || inFlight.has(runId)) {
          const exit = yield* Effect.exit(Deferred.await(deferred))
          if (Exit.isSuccess(exit) && terminalRunStatuses.includes(exit.value.status)) return exit.value
        }
        return yield* recorded(yield* pollEnded(runId))
      }).pipe(Effect.ensuring(Effect.sync(() => leave(runId))))

    /** Joins the callers waiting for `runId` (with `fresh` as their deferred when it is the first): their deferred. */
    const join = (runId: string, threadId: string, runSeq: number, fresh: Deferred.Deferred<SendResult, unknown>) => {
      const existing = waiting.get(runId)
      if (existing !== undefined) {
        existing.waiters++
        return existing.deferred
      }
      waiting.set(runId, { threadId, runSeq, deferred: fresh, waiters: 1 })
      return fresh
    }

    /** Leaves the callers waiting for `runId`: the entry goes with the last one. */
    const leave = (runId: string) => {
      const w = waiting.get(runId)
      if (w !== undefined && --w.waiters <= 0) waiting.delete(runId)
    }

    const register = (runId: string, threadId: string, runSeq: number) =>
      Effect.map(Deferred.make<SendResult, unknown>(), (fresh) => join(runId, threadId, runSeq, fresh))

    /**
     * How a waited-for run ended: this process's result for it, or its ended record; or, for a bounded wait, neither
     * (`timedOut`: the bound passed first).
     */
    type Ended =
      | { readonly result: SendResult; readonly run: null }
      | { readonly result: null; readonly run: Run }
      | { readonly result: null; readonly run: null }
    const endedHere = (result: SendResult): Ended => ({ result, run: null })
    const endedRecord = (run: Run): Ended => ({ result: null, run })
    const timedOut: Ended = { result: null, run: null }

    /**
     * Waits for `runId` to end: `result`, this process's result for it (rich turn-start report) when its fiber here
     * ended it while this caller waited, else `run`, its ended record as read here. At most one read of the run on
     * the way: none for a run this process is driving (its fiber's end settles the callers that joined before it),
     * one for any other (the answer when it has ended; else the callers are joined, and read again only if a run's
     * fiber ended here in between, so that an end which settled nobody is not missed). A run that is not this
     * process's to settle (driven elsewhere with no worker of its thread here; or a `waiting` run, or one another
     * process claimed) is polled as `awaitWith` does. `preferResult`: a run found ended answers the result another
     * caller's wait here was settled with, if there is one (as `awaitWith` does). `bound`: the longest wait, in
     * milliseconds (`null`: none), applied to the waiting alone, so a run found ended arms no timer; past it the
     * answer is `timedOut`. `orWaiting`: a run that waits for the client's tool results (status `waiting`, its wait
     * `open`) answers too, as an ended one does: found so (its record), or its fiber here ending with it (the fiber's
     * signal carries the status: `result`, the run `waiting`), or the poll finding it. Fails with `RunNotFound`.
     */
    const awaitEnded = (runId: RunId, preferResult: boolean, bound: number | null = null, orWaiting = false) =>
      Effect.gen(function*() {
        const bounded = <E>(wait: Effect.Effect<Ended, E>): Effect.Effect<Ended, E> =>
          bound === null ? wait : Effect.timeoutTo(wait, { duration: Duration.millis(bound), onSuccess: (ended) => ended, onTimeout: () => timedOut })
        const fresh = yield* Deferred.make<SendResult, unknown>()
        let joined = false
        return yield* Effect.gen(function*() {
          const here = driving.get(runId)
          let deferred: Deferred.Deferred<SendResult, unknown>
          if (here !== undefined) {
            // No yield since `driving` was read: its fiber's end (which clears `driving` first) settles this caller.
            deferred = join(runId, here.threadId, here.seq, fresh)
            joined = true
          } else {
            const endsBefore = drivesEnded
            let found = yield* store.getRun(runId)
            if (found._tag === "None") return yield* new RunNotFound({ runId })
            if (terminalRunStatuses.includes(found.value.status)) {
              const settled = preferResult ? waiting.get(runId) : undefined
              const done = settled === undefined ? Option.none() : yield* Deferred.poll(settled.deferred)
              if (Option.isSome(done)) {
                const exit = yield* Effect.exit(done.value)
                if (Exit.isSuccess(exit) && terminalRunStatuses.includes(exit.value.status)) return endedHere(exit.value)
              }
              return endedRecord(found.value)
            }
            if (orWaiting && (yield* waitsForClient(found.value))) return endedRecord(found.value)
            deferred = join(runId, found.value.threadId, found.value.seq, fresh)
            joined = true
            if (drivesEnded !== endsBefore) {
              // A fiber here ended a run between the read and the join; it may have been this one, with nobody to settle.
              found = yield* store.getRun(runId)
              if (found._tag === "None") return yield* new RunNotFound({ runId })
              if (yield* answers(found.value, orWaiting)) return endedRecord(found.value)
            }
            if (!workers.has(found.value.threadId) && !inFlight.has(runId)) {
              return yield* bounded(Effect.map(pollEnded(runId, null, orWaiting), endedRecord))
            }
          }
          const signalled = Effect.gen(function*() {
            const exit = yield* Effect.exit(Deferred.await(deferred))
            if (Exit.isSuccess(exit) && terminalRunStatuses.includes(exit.value.status)) return endedHere(exit.value)
            // The fiber here stopped with the run waiting for the client's tool results.
            if (orWaiting && Exit.isSuccess(exit) && exit.value.status === "waiting") return endedHere(exit.value)
            return endedRecord(yield* pollEnded(runId, null, orWaiting))
          })
          // A run this process is driving ends through its fiber here. Any other may end where nothing here looks
          // (interrupted by another process while queued behind a run in flight here: the worker looks at the queue
          // only when that run ends), so the record is also read now and then until the signal comes.
          if (here !== undefined) return yield* bounded(signalled)
          return yield* bounded(Effect.raceFirst(signalled, Effect.map(pollEnded(runId, config.waitBackstopMillis, orWaiting), endedRecord)))
        }).pipe(Effect.ensuring(Effect.sync(() => {
          if (joined) leave(runId)
        })))
      })

    // Runs left unfinished by drivers that are gone are reconciled before this driver takes any.
    yield* threads.recover()

    /**
     * Looks for unfinished runs of drivers that are gone. One not `waiting` is ended by restart recovery
     * (ThreadService.recover): a process on the same database killed mid-turn left its run `running` while this one
     * lived, until a message to its thread here, an interrupt or a restart looked, and a client waiting on the run
     * here waited for good. A `waiting` one outlives its driver: this driver's worker takes it on (below).
     */
    const sweepGone = Effect.gen(function*() {
      if (stopping) return
      const unfinished = yield* store.listUnfinishedRuns()
      if (unfinished.length === 0) return
      const ownerOf = yield* store.runDrivers(unfinished.map((r) => r.id))
      const alive = yield* registry.aliveAmong([...ownerOf.values()].filter((o): o is string => o !== null))
      const gone = (run: Run) => {
        const owner = ownerOf.get(run.id) ?? null
        return owner !== null && !alive.has(owner)
      }
      // A wait of a gone driver: only that driver watched its deadline (and would have continued results posted there),
      // so it never expired while other processes lived (review r43). This driver's worker takes it on: it watches the
      // deadline, or continues the run when its results are posted.
      for (const run of unfinished) if (run.status === "waiting" && gone(run) && !deadlines.has(run.id)) yield* wake(run.threadId)
      if (unfinished.some((run) => run.status !== "waiting" && gone(run))) yield* threads.recover()
    }).pipe(Effect.catchAllCause((cause) => Effect.logWarning("reconciling the runs of a gone driver failed", cause)))
    if (config.goneDriverSweepMillis > 0) {
      yield* Effect.forkScoped(Effect.repeat(sweepGone, Schedule.spaced(Duration.millis(config.goneDriverSweepMillis))))
    }
    // Waits survive a restart: their threads' workers continue those with posted results and watch the others'
    // deadlines.
    for (const wait of yield* store.listLiveToolWaits()) yield* wake(wait.threadId)

    /** The interrupt the process gives a run it stops at shutdown (no receipt: each is carried out as it comes). */
    const shutdownCommand = (run: { readonly id: RunId; readonly threadId: ThreadId }): Commands.InterruptRun => ({
      _tag: "InterruptRun",
      commandId: `cmd_shutdown_${run.id}` as Commands.InterruptRun["commandId"],
      threadId: run.threadId,
      runId: run.id
    })

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        yield* mutex.withPermits(1)(Effect.sync(() => void (stopping = true)))
        // Claimed at their queueing but not driven yet: ended as interrupted like the runs in flight.
        for (const [runId, claimed] of [...claimedHere]) {
          if (inFlight.has(runId)) continue
          claimedHere.delete(runId)
          yield* stopRun(shutdownCommand(claimed.run), "shutdown").pipe(Effect.ignore)
        }
        for (const [runId, fiber] of [...inFlight]) {
          const run = yield* store.getRun(runId as RunId)
          if (run._tag === "Some" && !terminalRunStatuses.includes(run.value.status)) {
            yield* stopRun(shutdownCommand(run.value), "shutdown").pipe(Effect.ignore)
          }
          yield* Fiber.interrupt(fiber)
        }
        yield* Effect.forEach([...workers.values()], Fiber.interrupt, { discard: true })
        yield* Effect.forEach([...deadlines.values()], Fiber.interrupt, { discard: true })
      }).pipe(Effect.ignore)
    )

    const submit = (command: Commands.SendMessage, awaitIt: boolean) =>
      Effect.gen(function*() {
        const { claimed, run } = yield* threads.queueForDriver(command)
        if (claimed !== null) claimedHere.set(run.id, claimed)
        const deferred = awaitIt ? yield* register(run.id, run.threadId, run.seq) : null
        if (!terminalRunStatuses.includes(run.status)) yield* wake(run.threadId)
        return { run, deferred }
      })

    return {
      /**
       * Queues a user message as a run behind the thread's unfinished runs and returns at once (`status` `queued`, or
       * the first answer for a repeated command id). Fails with `ThreadNotFound`, `InvalidRequest`,
       * `UnknownProvider`, `ConcurrentModification`, `PersistenceError`.
       */
      submit: (command: Commands.SendMessage) =>
        Effect.map(submit(command, false), ({ run }) =>
          ({ runId: run.id, runSeq: run.seq, threadId: run.threadId, status: run.status }) satisfies RunAccepted),
      /** `submit`, then wait for the run to end: its result with the turn-start report. Fails as `submit` does. */
      sendAndWait: (command: Commands.SendMessage) =>
        Effect.flatMap(submit(command, true), ({ deferred, run }) => awaitWith(run.id, deferred!)),
      /**
       * Waits for a run to end and returns its result: the turn-start report when this process drove it and was
       * asked before it ended, else what the record says. Fails with `RunNotFound`.
       */
      awaitRun: (runId: RunId) =>
        Effect.flatMap(awaitEnded(runId, true), (ended) =>
          ended.result !== null
            ? Effect.succeed(ended.result)
            // Unbounded: never `timedOut`; were it, the record is polled until the run ends.
            : Effect.flatMap(ended.run !== null ? Effect.succeed(ended.run) : pollEnded(runId), recorded)),
      /**
       * Waits for a run to end (as `awaitRun`) without building its result: the ended run's record when it was read
       * on the way (`null` when this process's fiber ended it while the caller waited, or when `waitMillis` passed
       * first: the caller reads the record if it needs it). For a caller that reads the run afterwards anyway (the
       * API's `GET /runs/{id}?waitMs`): at most one read of the run here, none of its provider thread; `waitMillis`
       * bounds the waiting alone (a run found ended arms no timer). `orWaiting`: a run that waits for the client's tool
       * results (status `waiting`, its wait `open`) answers too (its record when it was read so, else `null`): found
       * so, or signalled by its fiber here stopping there, with no polling (a run driven by another process is found
       * so by the backstop's reads, doubling to 1 s; the server also watches the thread's event feed). Fails with
       * `RunNotFound`.
       */
      awaitEnd: (runId: RunId, waitMillis?: number, options?: { readonly orWaiting?: boolean }) =>
        Effect.map(awaitEnded(runId, false, waitMillis ?? null, options?.orWaiting === true), (ended) => ended.run),
      /**
       * Interrupts a run (`command.runId`, else the thread's run in progress): recorded at once (a queued run ends
       * `interrupted` before the provider), the provider asked to stop, and the run's fiber interrupted if it has not
       * ended within `interruptTimeoutMillis`; then the thread's worker is woken, so the runs queued behind (e.g.
       * behind a `waiting` run) start at once. The command is answered once: its id again answers the run it
       * interrupted (never the run queued behind). Fails with `RunNotFound`, `ThreadNotFound`, `NoRunInProgress`,
       * `InvalidRequest` (a command id another command used).
       */
      interrupt: (command: Commands.InterruptRun) => {
        const receipt = CommandReceipts.keyOf(command, command.threadId)
        const key = JSON.stringify([receipt.commandId, receipt.threadId, receipt.fingerprint])
        // Carried out in the driver's scope, not the caller's fiber: a caller that stops waiting (a client that hangs
        // up, its connection cut) does not stop it half-way, so its answer is recorded with the command's key (docs/
        // server.md, Idempotency); and a copy of the same command
        // arriving meanwhile (the client's retry) waits for it rather than deciding alone. Before (review r47), a
        // hang-up stopped it half-way: before the provider was asked, the run went on as if never interrupted (the
        // dashboard's click lost with its tab); after, the run ended with no answer recorded for the key.
        return Effect.uninterruptibleMask((restore) =>
          Effect.suspend(() => {
            const inFlight = interruptsInFlight.get(key)
            if (inFlight !== undefined) return restore(Deferred.await(inFlight))
            const done = Deferred.unsafeMake<Run, Effect.Effect.Error<ReturnType<typeof stopRun>>>(FiberId.none)
            interruptsInFlight.set(key, done)
            return Effect.forkIn(
              // Interruptible within (its timeouts stop their waits): forked here it would inherit the mask.
              // Settled on every exit, its own interruption too (the driver's scope closing at shutdown): a caller
              // waiting for it is never left waiting.
              Effect.interruptible(stopRun(command, "user", receipt)).pipe(
                Effect.onExit((exit) => Effect.zipRight(Effect.sync(() => void interruptsInFlight.delete(key)), Deferred.done(done, exit)))
              ),
              scope
            ).pipe(Effect.zipRight(restore(Deferred.await(done))))
          })
        )
      },
      /**
       * Posts the client's tool results for a waiting run (ThreadService `submitToolResults`) and wakes the thread's
       * worker, which continues the run. Answers at once with the run as it stood when the results were recorded (a
       * repeated command id: what the first request answered). Fails with `RunNotFound`, `RunNotWaiting`,
       * `InvalidRequest`.
       */
      submitToolResults: (command: Commands.SubmitToolResults) =>
        Effect.gen(function*() {
          const accepted: RunAccepted = yield* threads.submitToolResults(command)
          if (!terminalRunStatuses.includes(accepted.status)) yield* wake(accepted.threadId)
          return accepted
        }),
      /**
       * Stops taking runs, the first step of a shutdown (the server calls it as soon as it stops accepting
       * connections, before open requests are given their deadline): each thread's worker ends after the run it
       * drives, which goes on until the driver's scope closes and interrupts it; runs queued meanwhile stay queued
       * for the next process, and a send accepted from now on is ended at the scope's close as a run in flight is.
       * Idempotent; never fails.
       */
      stopTaking: mutex.withPermits(1)(Effect.sync(() => void (stopping = true))),
      /** Runs this process drives right now. */
      inFlight: () => [...inFlight.keys()],
      /** Threads with a worker fiber here right now (one that has not yet found its thread's queue empty). */
      working: () => [...workers.keys()],
      /** Runs claimed at their queueing (`starting`, this driver's) that the thread's worker has not taken yet. */
      claimedPending: () => [...claimedHere.keys()]
    }
  })
}) {}
