/**
 * RunLifecycle: the run status machine of docs/design.md in production code — which status a run may move to from
 * which — and the one write that moves a run (`RunLifecycle.update`), checked against the table.
 *
 * ```
 * queued   -> starting | interrupted | failed | cancelled
 * starting -> starting | running | interrupted | failed | cancelled     (starting -> starting: a retry's reset)
 * running  -> starting | waiting | completed | interrupted | failed     (running -> starting: overflow or lost thread retry)
 * waiting  -> running | interrupted | failed                            (running: the client's results are in, the turn goes on)
 * interrupted -> interrupted, failed -> failed                          (corrections of where it stopped)
 * completed, cancelled: final
 * ```
 *
 * An illegal move is a defect (a bug in Baton, never a user's error): `IllegalRunTransition`. `finish` ends a run
 * once (failed or interrupted, with its reason and code, and its event). It does not decide when a run moves;
 * TurnExecution, RunRecovery and the run driver do. `interrupting` records who asked a run to stop while the
 * provider is being asked, so a turn that ends with the provider's own "interrupted" first is ended with the code
 * of whoever asked (the user, a shutdown), not `provider_interrupted`.
 *
 * A run's prompt joins the thread's items when the run leaves `queued` (`update`): when it starts, or when it ends
 * without starting and no run ahead of it is unfinished. A run that ends while queued behind an unfinished run owes
 * its prompt: it is marked so durably (`runs.prompt_owed`, with a `run.prompt_deferred` event) in the unit of work
 * that ends it, and its prompt is recorded by the end of the last run ahead of it (`recordOwedPrompts`), after
 * everything that run records — a client tool call and its result, held in the run's tool wait, are recorded only
 * when the wait ends. A message queued behind a run therefore takes its place in the thread's order after
 * everything that run produces, so `seq` follows the conversation the model saw (handoffs, `thread_read` ranges,
 * item pages). Only that mark makes a run owe its prompt: a run that ended `before_provider` otherwise (a gateway
 * retry interrupted through the API, a starting run interrupted) never has its prompt appended by another run's end.
 * A merge-back written behind an unfinished run owes its copied history by the same mark, and the same end records
 * it (`ThreadLineage.recordOwedMerge`), in the same seq order as the prompts owed.
 */
import type { NativeThreadId, Run, RunFailureCode, RunStatus, RunStopPoint } from "@baton/contracts"
import { terminalRunStatuses } from "@baton/contracts"
import { ThreadStore } from "@baton/persistence"
import { Data, DateTime, Effect, Option } from "effect"
import { ItemLog, type NewItem, withCountsFrom } from "./ItemLog.js"
import { ThreadLineage } from "./ThreadLineage.js"

/** For each status, the statuses a run may move to (the same status: a correction or a retry's reset). */
export const transitions: Readonly<Record<RunStatus, ReadonlyArray<RunStatus>>> = {
  queued: ["starting", "interrupted", "failed", "cancelled"],
  starting: ["starting", "running", "interrupted", "failed", "cancelled"],
  running: ["starting", "waiting", "completed", "interrupted", "failed"],
  waiting: ["running", "interrupted", "failed"],
  interrupted: ["interrupted"],
  failed: ["failed"],
  completed: [],
  cancelled: []
}

/** Whether a run may move from `from` to `to`. */
export const canMove = (from: RunStatus, to: RunStatus) => transitions[from].includes(to)

/** A run's prompt as its `user_message` item (the text byte-identical). */
export const promptItem = (prompt: string): NewItem => ({
  kind: "user_message",
  text: prompt,
  toolCallId: null,
  toolName: null,
  messageId: null,
  isError: false,
  toolCallState: null
})

/** A run was about to move in a way the lifecycle forbids (a defect). */
export class IllegalRunTransition extends Data.TaggedError("IllegalRunTransition")<{
  readonly runId: string
  readonly from: RunStatus
  readonly to: RunStatus
}> {
  override get message() {
    return `run ${this.runId} cannot move from ${this.from} to ${this.to}`
  }
}

/** Who asked a run to stop: the failure code and the one-line reason its interrupt records (e.g. "interrupted by the user"). */
export interface InterruptRequest {
  readonly code: "interrupted_by_user" | "process_stopped"
  readonly reason: string
}

export class RunLifecycle extends Effect.Service<RunLifecycle>()("@baton/orchestration/RunLifecycle", {
  effect: Effect.gen(function*() {
    const store = yield* ThreadStore
    const itemLog = yield* ItemLog
    const lineage = yield* ThreadLineage
    // Interrupts being carried out by this process, by run id. In memory on purpose: a provider reports a turn
    // `interrupted` only in answer to an interrupt asked of it, and that is asked through this process's own adapter
    // (a turn in flight elsewhere is not stopped by it), so the request and the turn's end meet in this process. A
    // crash loses nothing durable: restart recovery ends the run. Each run's requests in the order they were made:
    // interrupts of one run may overlap (a retry, a shutdown during a user's interrupt), and each removes only its own,
    // so the run keeps an entry while any of them is still being carried out.
    const interrupts = new Map<Run["id"], Array<InterruptRequest>>()

    /**
     * Runs `effect` (an interrupt asking the provider to stop `runId`'s turn, then recording the outcome) with
     * `request` known to `finish`: a turn that ends meanwhile with the provider's `interrupted` is ended with
     * `request.code`. Found by a tester: the provider's turn ended before the user's interrupt was recorded and the
     * run's code was `provider_interrupted`. Overlapping interrupts of one run each hold their own entry until they
     * end (however they end: an interrupt given up when its client went away included); while several are carried
     * out, the first one asked gives the code.
     */
    const interrupting = <A, E, R>(runId: Run["id"], request: InterruptRequest, effect: Effect.Effect<A, E, R>) =>
      Effect.acquireUseRelease(
        Effect.sync(() => {
          const held = interrupts.get(runId)
          if (held === undefined) interrupts.set(runId, [request])
          else held.push(request)
        }),
        () => effect,
        () =>
          Effect.sync(() => {
            const held = interrupts.get(runId)
            if (held === undefined) return
            const at = held.indexOf(request)
            if (at >= 0) held.splice(at, 1)
            if (held.length === 0) interrupts.delete(runId)
          })
      )

    /**
     * Appends `run`'s prompt as its `user_message` item, unless the run has one (a run queued by an earlier version,
     * which wrote it at queue time). In the caller's unit of work.
     */
    const recordPrompt = (run: Run, counted?: NewItem) =>
      Effect.gen(function*() {
        const items = yield* store.listItemsOfRuns([run.id])
        if (items.some((i) => i.kind === "user_message")) return
        yield* itemLog.append(run.threadId, run.id, withCountsFrom(counted === undefined ? [] : [counted], [promptItem(run.prompt)]))
      })

    /**
     * Records the prompts owed on `threadId` (runs that ended while queued behind an unfinished run: `update`) whose
     * runs ahead have all ended now, in seq order, each clearing its mark; the others stay owed (a run ahead of them
     * is still unfinished). A merge run owing its copies (`ThreadLineage.mergeBack` behind an unfinished run) is one
     * of them: its copies and handoff are recorded in its place (`ThreadLineage.recordOwedMerge`). In the caller's unit
     * of work, after the end of a run (`update` calls it when the run's end reports a prompt owed; so must a path that
     * ends a run without `update`: the gateway's one-statement completion; restart reconciliation calls it for every
     * thread that owes one). Fails with the store's errors.
     */
    const recordOwedPrompts = (threadId: Run["threadId"]) =>
      Effect.gen(function*() {
        const owed = yield* store.listPromptOwedRuns(threadId)
        if (owed.length === 0) return
        const ahead = yield* store.findFirstUnfinishedRun(threadId)
        for (const run of owed) {
          if (ahead._tag === "Some" && ahead.value.seq < run.seq) return
          const link = yield* store.findLinkOfRun(run.id)
          if (link._tag === "Some" && link.value.kind === "merge") yield* lineage.recordOwedMerge(run, link.value)
          else yield* recordPrompt(run)
          yield* store.setPromptOwed(run.id, false)
        }
      })

    /**
     * The end of a run that leaves `queued` for a terminal status (interrupted, cancelled, failed: it never started),
     * already written: with an unfinished run ahead of it, it owes its prompt (marked durably, `run.prompt_deferred`;
     * `true`); else its prompt is recorded now (`false`).
     */
    const endQueued = (run: Run) =>
      Effect.gen(function*() {
        const ahead = yield* store.findFirstUnfinishedRun(run.threadId)
        if (ahead._tag === "Some" && ahead.value.seq < run.seq) {
          yield* store.setPromptOwed(run.id, true)
          yield* store.appendEvent({ threadId: run.threadId, type: "run.prompt_deferred", payload: { runId: run.id, behindRunId: ahead.value.id } })
          return true
        }
        yield* recordPrompt(run)
        return false
      })

    /**
     * Writes `next` over `previous` (the run as the caller read it in this unit of work) after checking the move
     * against `transitions`, in the same unit of work: a run leaving `queued` has its prompt recorded (`recordPrompt`)
     * when it starts, and when it ends without starting unless a run ahead of it is unfinished (then it owes its
     * prompt: `endQueued`); a run's end records the prompts owed that are now due (`recordOwedPrompts`; the statement
     * that ends the run tells whether any is owed, so a thread that owes none pays no statement for it). Dies with
     * `IllegalRunTransition` on an illegal move; fails with the store's errors. `prompt`: the prompt's item as the
     * caller counted it ahead (`ItemLog.countAhead`, before its unit of work), its count taken when the prompt is
     * recorded here (a long prompt is not counted under the lock).
     */
    const update = (previous: Run, next: Run, prompt?: NewItem) =>
      !canMove(previous.status, next.status)
        ? Effect.die(new IllegalRunTransition({ runId: next.id, from: previous.status, to: next.status }))
        : !terminalRunStatuses.includes(next.status) || terminalRunStatuses.includes(previous.status)
        ? previous.status === "queued" && next.status !== "queued"
          ? Effect.zipRight(store.updateRun(next), recordPrompt(next, prompt))
          : store.updateRun(next)
        : Effect.gen(function*() {
          const owed = yield* store.updateRunEnded(next)
          if (previous.status === "queued" && (yield* endQueued(next))) return
          if (owed) yield* recordOwedPrompts(next.threadId)
        })

    /**
     * `update` of a `starting` run to `running` on `nativeThreadId` in one statement, without reading the run first:
     * written only if the run is still `starting` in the record (an interrupt recorded meanwhile is never
     * overwritten). Returns the run as written with its attempts' count before this one; `None` when nothing was
     * written (the caller reads the run then). Dies with `IllegalRunTransition` when `run` is not `starting`.
     */
    const start = (run: Run, nativeThreadId: NativeThreadId, at: DateTime.Utc) =>
      run.status !== "starting"
        ? Effect.die(new IllegalRunTransition({ runId: run.id, from: run.status, to: "running" }))
        : Effect.map(store.updateRunRunningIfStarting(run.id, nativeThreadId, at), Option.map((attempts) => ({
          run: { ...run, status: "running" as const, nativeThreadId, updatedAt: at },
          attempts
        })))

    /**
     * Ends a run once: a run that another path already ended (an interrupt, recovery) keeps its first ending.
     * `reason` is the one-line reason for people, `code` the same for code. A `provider_interrupted` ending while an
     * interrupt of the run is being carried out (`interrupting`) is the provider answering it: recorded with that
     * interrupt's code, its reason first.
     */
    const finish = (run: Run, status: "interrupted" | "failed", stopPoint: RunStopPoint, given: string, givenCode: RunFailureCode) =>
      Effect.gen(function*() {
        const current = yield* store.getRun(run.id)
        if (current._tag === "Some" && terminalRunStatuses.includes(current.value.status)) return current.value
        const asked = givenCode === "provider_interrupted" ? interrupts.get(run.id)?.[0] : undefined
        const code = asked === undefined ? givenCode : asked.code
        const reason = asked === undefined ? given : `${asked.reason} (${given})`
        const now = yield* DateTime.now
        const done: Run = { ...run, status, stopPoint, failureReason: reason, failureCode: code, updatedAt: now }
        yield* update(current._tag === "Some" ? current.value : run, done)
        yield* store.appendEvent({ threadId: run.threadId, type: status === "failed" ? "run.failed" : "run.interrupted", payload: {
          runId: run.id,
          stopPoint,
          reason,
          code
        } })
        return done
      })

    /**
     * Whether `runId` has provider output in the record (its turn streams items as they arrive): proof that the
     * provider read its prompt. The prompt and the pointer turn start writes (`handoff_marker`) are Baton's own.
     */
    const hasOutput = (runId: Run["id"]) =>
      Effect.map(store.listItemsOfRuns([runId]), (items) => items.some((i) => i.kind !== "user_message" && i.kind !== "handoff_marker"))

    return { update, start, finish, interrupting, hasOutput, recordPrompt, recordOwedPrompts }
  })
}) {}
