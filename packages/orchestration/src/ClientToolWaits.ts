/**
 * ClientToolWaits: a run's waits for the client's tool results (issue 9, item 2). When the model calls the client's
 * tools, the turn ends with the calls open; the run goes `waiting` with a durable wait (`tool_waits`): the open calls,
 * the held tool unit (the calls and what the model produced after them, not yet recorded, so the record never holds
 * a call without its result), the deadline. The wait ends one of three ways:
 *
 * - the client posts the results (`submit`): the held unit and one `tool_result` per call are recorded together,
 *   and the wait is `answered`: the run driver continues the turn (TurnExecution `continueRun`);
 * - the deadline passes (`expire`): error results are recorded for every open call and the run ends `failed`
 *   (`tool_results_timeout`);
 * - the run is interrupted (`interrupt`): the same with "interrupted" results, and the run ends `interrupted`.
 *
 * Each is one unit of work under the thread's lock, so a result posted at the deadline either wins whole or is
 * refused with `RunNotWaiting`. It does not run turns (TurnExecution) or decide when a deadline is watched (RunDriver).
 */
import {
  type ClientTool,
  Commands,
  InvalidRequest,
  type NativeThread,
  type OpenToolCall,
  type PendingItem,
  type Run,
  RunAccepted,
  RunId,
  RunNotFound,
  RunNotWaiting,
  ThreadNotFound,
  type ToolCallId,
  type ToolResult,
  type ToolWait
} from "@baton/contracts"
import { ThreadStore, UnitOfWork } from "@baton/persistence"
import { TokenCounter } from "@baton/context"
import type { ProviderAdapter } from "@baton/providers"
import { DateTime, Duration, Effect, Option, ParseResult, Schema } from "effect"
import * as CommandReceipts from "./CommandReceipts.js"
import { ItemLog, type NewItem, withCountsFrom } from "./ItemLog.js"
import { OrchestratorConfig } from "./OrchestratorConfig.js"
import { RunLifecycle } from "./RunLifecycle.js"
import * as Span from "./internal/Span.js"

/**
 * A SubmitToolResults receipt: what the first request answered (the run, its position and its status then), so a
 * repeated command id answers the same. Receipts written before it held only `runId` (`SubmitReceiptV1`).
 */
const SubmitReceipt = RunAccepted

/** The receipt's first shape (the run id alone): such a repeat is answered with the run as it stands. */
const SubmitReceiptV1 = Schema.Struct({ runId: RunId })

/** The error result Baton records for an open call whose result never came. */
export const missingResultText = (source: "deadline" | "interrupt", detail: string) =>
  source === "deadline"
    ? `[no result] The client posted no result for this tool call within ${detail}; the run ended.`
    : `[interrupted] ${detail} while the run waited for this tool call's result; it returned no result.`

/** The client's tools as the provider port takes them. */
export const toolDefinitions = (tools: ReadonlyArray<ClientTool>): ReadonlyArray<ProviderAdapter.ToolDefinition> =>
  tools.map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema }))

/**
 * Why `results` cannot answer `calls`, or `null`: results for unknown call ids, two results for one call, calls left
 * without a result (each named).
 */
export const resultsProblem = (calls: ReadonlyArray<OpenToolCall>, results: ReadonlyArray<ToolResult>): string | null => {
  const open = new Set<string>(calls.map((c) => c.toolCallId))
  const seen = new Set<string>()
  const unknown: Array<string> = []
  const twice: Array<string> = []
  for (const r of results) {
    if (!open.has(r.toolCallId)) unknown.push(r.toolCallId)
    else if (seen.has(r.toolCallId)) twice.push(r.toolCallId)
    seen.add(r.toolCallId)
  }
  const missing = calls.filter((c) => !seen.has(c.toolCallId)).map((c) => c.toolCallId)
  const problems = [
    unknown.length === 0 ? null : `no open tool call has the id ${unknown.map((id) => JSON.stringify(id)).join(", ")}`,
    twice.length === 0 ? null : `more than one result for ${twice.map((id) => JSON.stringify(id)).join(", ")}`,
    missing.length === 0 ? null : `no result for the open call ${missing.map((id) => JSON.stringify(id)).join(", ")}`
  ].filter((p) => p !== null)
  return problems.length === 0
    ? null
    : `${problems.join("; ")} (the open calls: ${calls.map((c) => `${c.toolCallId} ${c.name}`).join(", ")}); post exactly one result per open call`
}

const toPending = (i: NewItem): PendingItem => ({ ...i })
const fromPending = (i: PendingItem): NewItem => ({ ...i })

/**
 * One `tool_result` item per open call of `wait`, in the calls' order: the client's result for it, else an error
 * result `fallback`.
 */
const answersOf = (wait: ToolWait, results: ReadonlyArray<ToolResult>, fallback: string): ReadonlyArray<NewItem> =>
  wait.calls.map((c) => {
    const r = results.find((x) => x.toolCallId === c.toolCallId)
    return {
      kind: "tool_result",
      text: r?.output ?? fallback,
      toolCallId: c.toolCallId,
      toolName: c.name === "" ? null : c.name,
      messageId: null,
      isError: r === undefined ? true : r.isError,
      toolCallState: null
    }
  })

export class ClientToolWaits extends Effect.Service<ClientToolWaits>()("@baton/orchestration/ClientToolWaits", {
  effect: Effect.gen(function*() {
    const uow = yield* UnitOfWork
    const store = yield* ThreadStore
    const itemLog = yield* ItemLog
    const lifecycle = yield* RunLifecycle
    const config = yield* OrchestratorConfig

    /**
     * In the caller's unit of work (the turn's outcome): `run` (as read there, `running`) goes `waiting` for the
     * results of `callIds` on `native`; `held` is the turn's open tool unit (TurnStream `hold`). Writes the wait
     * (round +1, deadline `toolResultTimeoutMillis` from now) and `run.waiting`. Returns the waiting run.
     */
    const enter = (run: Run, native: NativeThread, callIds: ReadonlyArray<string>, held: ReadonlyArray<NewItem>) =>
      Effect.gen(function*() {
        const calls: ReadonlyArray<OpenToolCall> = callIds.map((id) => {
          const call = held.find((i) => i.kind === "tool_call" && i.toolCallId === id)
          return { toolCallId: id as ToolCallId, name: call?.toolName ?? "", arguments: call?.text ?? "" }
        })
        const previous = yield* store.getToolWait(run.id)
        const now = yield* DateTime.now
        const wait: ToolWait = {
          runId: run.id,
          threadId: run.threadId,
          nativeThreadId: native.id,
          state: "open",
          calls,
          held: held.map(toPending),
          results: null,
          round: Option.match(previous, { onNone: () => 1, onSome: (w) => w.round + 1 }),
          deadlineAt: DateTime.addDuration(now, Duration.millis(config.toolResultTimeoutMillis)),
          createdAt: Option.match(previous, { onNone: () => now, onSome: (w) => w.createdAt }),
          updatedAt: now
        }
        yield* store.putToolWait(wait)
        const waiting: Run = { ...run, status: "waiting", nativeThreadId: native.id, updatedAt: now }
        yield* lifecycle.update(run, waiting)
        yield* store.appendEvent({ threadId: run.threadId, type: "run.waiting", payload: {
          runId: run.id,
          round: wait.round,
          calls: [...calls],
          deadlineAt: wait.deadlineAt
        } })
        return waiting
      })

    /**
     * Records the wait's held unit and one `tool_result` per open call (`results` in the order of the calls; a
     * call without one gets an error result `fallback`), calls marked `callState`, with `run.tool_results_recorded`.
     */
    const record = (
      run: Run,
      wait: ToolWait,
      results: ReadonlyArray<ToolResult>,
      source: "client" | "deadline" | "interrupt",
      callState: "answered" | "dangling" | "interrupted",
      fallback: string,
      /** Items counted ahead (`ItemLog.countAhead`, before the caller's unit of work): their counts are taken. */
      ahead: ReadonlyArray<NewItem> = []
    ) =>
      Effect.gen(function*() {
        const open = new Set<string>(wait.calls.map((c) => c.toolCallId))
        const calls = wait.held.map(fromPending).map((i) =>
          i.kind === "tool_call" && i.toolCallId !== null && open.has(i.toolCallId) ? { ...i, toolCallState: callState } : i
        )
        yield* itemLog.append(run.threadId, run.id, [...calls, ...withCountsFrom(ahead, answersOf(wait, results, fallback))])
        yield* store.appendEvent({ threadId: run.threadId, type: "run.tool_results_recorded", payload: {
          runId: run.id,
          round: wait.round,
          toolCallIds: wait.calls.map((c) => c.toolCallId),
          source
        } })
      })

    /**
     * Posts the client's results for `command.runId` (see `Commands.SubmitToolResults`): checked against the open
     * calls, recorded (each result after the held calls, in the calls' order), the wait `answered`. Returns what
     * the request is answered: the run (id, thread, seq) and its status when the results were recorded (`waiting`);
     * the caller wakes the run driver to continue it. A repeated command id answers what the first request answered
     * (the receipt), not the run's status now. Fails with `ThreadNotFound`, `RunNotFound` (naming the thread the run
     * belongs to), `RunNotWaiting` (409), `InvalidRequest` (400, naming the ids).
     */
    const submit = Span.fn("ClientToolWaits.submit")(function*(command: Commands.SubmitToolResults) {
      yield* Schema.validate(Commands.SubmitToolResults)(command).pipe(
        Effect.mapError((e) => new InvalidRequest({ reason: ParseResult.ArrayFormatter.formatErrorSync(e).map((i) => i.message).join("; ") }))
      )
      // Long results are counted before the unit of work, for the calls of the wait as read now (under the lock the
      // counts of the answers that render alike are taken): a 2 MiB result took about a second to count, which every
      // other thread's writes waited out on SQLite. Only then is the wait read twice.
      const ahead = command.results.some((r) => r.output.length > TokenCounter.sliceChars)
        ? yield* Effect.flatMap(store.getToolWait(command.runId), (w) =>
          w._tag === "None" ? Effect.succeed([]) : itemLog.countAhead(answersOf(w.value, command.results, "")))
        : []
      return yield* uow.thread(command.threadId, "ClientToolWaits.submit")(Effect.gen(function*() {
        const key = CommandReceipts.keyOf(command, command.threadId)
        const seen = yield* CommandReceipts.find(store, key)
        const found = yield* store.getRun(command.runId)
        if (found._tag === "None" || found.value.threadId !== command.threadId) {
          // Under a thread that does not exist, the thread is what is not found (its runs' route would 404 too).
          if ((yield* store.getThread(command.threadId))._tag === "None") return yield* new ThreadNotFound({ threadId: command.threadId })
          return yield* RunNotFound.onThread(command.runId, command.threadId, found)
        }
        const run = found.value
        const accepted: RunAccepted = { runId: run.id, threadId: run.threadId, runSeq: run.seq, status: run.status }
        if (seen._tag === "Some") {
          const first = Schema.decodeUnknownOption(SubmitReceipt)(seen.value.result)
          if (first._tag === "Some") return first.value
          return yield* Effect.as(CommandReceipts.decode(SubmitReceiptV1, command.commandId, seen.value.result), accepted)
        }
        const wait = yield* store.getToolWait(run.id)
        if (run.status !== "waiting" || wait._tag === "None" || wait.value.state !== "open") {
          return yield* new RunNotWaiting({ runId: run.id, status: run.status === "waiting" ? "waiting (its results were posted already)" : run.status })
        }
        const problem = resultsProblem(wait.value.calls, command.results)
        if (problem !== null) return yield* new InvalidRequest({ reason: `run ${run.id}: ${problem}` })
        yield* record(run, wait.value, command.results, "client", "answered", "", ahead)
        const ordered = wait.value.calls.map((c) => command.results.find((r) => r.toolCallId === c.toolCallId)!)
        yield* store.putToolWait({ ...wait.value, state: "answered", results: ordered, updatedAt: yield* DateTime.now })
        return yield* CommandReceipts.write(store, key, SubmitReceipt, accepted)
      }))
    })

    /**
     * Ends a wait without the client's results, in the caller's unit of work: error results for an `open` wait's
     * calls (posted results stay as recorded), the wait `closed`.
     */
    const closeUnanswered = (run: Run, wait: ToolWait, source: "deadline" | "interrupt", detail: string) =>
      Effect.gen(function*() {
        if (wait.state === "open") {
          yield* record(run, wait, [], source, source === "deadline" ? "dangling" : "interrupted", missingResultText(source, detail))
        }
        yield* store.putToolWait({ ...wait, state: "closed", updatedAt: yield* DateTime.now })
      })

    /**
     * Ends run `runId` if it is still waiting past its deadline: error results for the open calls, then `failed`
     * after the provider with `tool_results_timeout`. Returns the run as it stands (unchanged when not due: results
     * came meanwhile, or another process expired it).
     */
    const expire = Span.fn("ClientToolWaits.expire")(function*(threadId: Run["threadId"], runId: Run["id"]) {
      return yield* uow.thread(threadId, "ClientToolWaits.expire")(Effect.gen(function*() {
        const found = yield* store.getRun(runId)
        if (found._tag === "None") return null
        const wait = yield* store.getToolWait(runId)
        const now = yield* DateTime.now
        if (found.value.status !== "waiting" || wait._tag === "None" || wait.value.state !== "open" ||
          DateTime.lessThan(now, wait.value.deadlineAt)) return found.value
        const limit = `${config.toolResultTimeoutMillis} ms`
        yield* closeUnanswered(found.value, wait.value, "deadline", limit)
        return yield* lifecycle.finish(found.value, "failed", "after_provider", `no tool results within ${limit} (the tool result deadline)`, "tool_results_timeout")
      }))
    })

    /**
     * Interrupts a waiting run, in the caller's unit of work: error results ("interrupted by `who`") for the open
     * calls, then `interrupted` after the provider with `code`.
     */
    const interrupt = (run: Run, who: string, code: "interrupted_by_user" | "process_stopped") =>
      Effect.gen(function*() {
        const wait = yield* store.getToolWait(run.id)
        if (wait._tag === "Some" && wait.value.state !== "closed") yield* closeUnanswered(run, wait.value, "interrupt", `Interrupted by ${who}`)
        return yield* lifecycle.finish(run, "interrupted", "after_provider", `interrupted by ${who} while the run waited for tool results`, code)
      })

    return { enter, submit, expire, interrupt }
  })
}) {}
