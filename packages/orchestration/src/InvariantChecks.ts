/**
 * InvariantChecks: docs/design.md's invariants, checked against the durable record of one thread and (optionally) what
 * the providers actually received. Used by the replay (`baton replay` exits non-zero on any violation) and by tests.
 * Crash safety (invariant 4) is checked by the simulation, which restarts between durable steps.
 *
 * Each violation is one line naming the invariant, the record and what is wrong.
 */
import {
  type HandoffDelivery,
  type Item,
  type NativeThread,
  type Offload,
  type ProviderThread,
  type Run,
  type RunFailureCode,
  terminalRunStatuses,
  type ThreadEvent,
  type ThreadId,
  type ThreadLink
} from "@baton/contracts"
import { Calibration } from "@baton/context"
import { type StoredHandoff, ThreadStore } from "@baton/persistence"
import { Effect } from "effect"
import { isTransferable } from "./ContextHandoffDelivery.js"

/** What a provider instance received, as recorded by the scripted adapter. */
export interface Observed {
  readonly turns: ReadonlyArray<{ readonly runId: string; readonly prompt: string; readonly nativeRef: string }>
  readonly injections: ReadonlyArray<{ readonly nativeRef: string; readonly itemIds: ReadonlyArray<string> }>
}

export interface CheckOptions {
  /** The number of items the caller appended (prompts + produced items); checks nothing was lost. */
  readonly expectedItemCount?: number
  readonly observed?: Observed
}

/**
 * Run failure codes that are allowed endings (invariant 1): a provider fault (`overflow` only after the recovery
 * that defers history and replaces the native thread: the prompt alone does not fit), an unconfirmed injection, the
 * run's provider missing in this process, the user, a restart. Not allowed: `turn_start_failed` (Baton's own turn
 * start failed) and `output_not_recorded` (the provider answered but Baton lost the output: if the cause persists,
 * every later turn too).
 */
const faultCodes: ReadonlySet<RunFailureCode> = new Set<RunFailureCode>([
  "provider_refused",
  "provider_interrupted",
  "provider_timeout",
  "overflow",
  "provider_ack_lost",
  "provider_unavailable",
  "provider_lost_thread",
  "provider_protocol",
  "provider_missing",
  "injection_unconfirmed",
  "interrupted_by_user",
  "process_restarted",
  "process_stopped",
  // The client posted no tool results before the deadline: the client's doing, like an interrupt.
  "tool_results_timeout"
])

/**
 * Whether a run that did not complete stopped for an allowed reason — a provider fault, an unconfirmed injection,
 * the user, a restart, a client that posted no tool results in time — rather than because history did not fit or its output could not be stored (a wedge).
 * Reads the run's `failureCode`, never its prose.
 */
export const isFaultCode = (code: RunFailureCode | null): boolean => code !== null && faultCodes.has(code)

/**
 * Checks invariants 1, 2, 3, 5, 6 and 7 for `threadId`, offload records included (an owed item is settled by a
 * summary that really covers it; the summary chain has no gap; no cut splits a tool call from its result); returns
 * the violations (empty when all hold).
 */
export const check = (threadId: ThreadId, options: CheckOptions = {}) =>
  Effect.map(readRecord(threadId), (record) => checkRecord(record, options))

/**
 * Everything the checks read of one thread's durable record: each table once, in the store's order (runs, items and
 * events by `seq`; handoffs, deliveries, provider threads, links by creation; native threads by provider thread, then
 * generation; offloads: the committed chain, oldest first). Read once and handed to every check of a step
 * (`checkRecord`, `ProviderTruthChecks.checkRecord`, ...), instead of each check reading the tables again.
 */
export interface ThreadRecord {
  readonly threadId: ThreadId
  readonly runs: ReadonlyArray<Run>
  readonly items: ReadonlyArray<Item>
  readonly handoffs: ReadonlyArray<StoredHandoff>
  readonly deliveries: ReadonlyArray<HandoffDelivery>
  readonly events: ReadonlyArray<ThreadEvent>
  readonly providerThreads: ReadonlyArray<ProviderThread>
  readonly nativeThreads: ReadonlyArray<NativeThread>
  readonly links: ReadonlyArray<ThreadLink>
  readonly offloads: ReadonlyArray<Offload>
}

/**
 * The parts of `threadId`'s record that rows are updated in (runs, handoffs, deliveries, provider and native threads,
 * links, offloads): everything but the append-only items and events. Fails with the store's `PersistenceError`.
 */
export const readMutable = (threadId: ThreadId) =>
  Effect.gen(function*() {
    const store = yield* ThreadStore
    const providerThreads = yield* store.listProviderThreads(threadId)
    const nativeThreads: Array<NativeThread> = []
    for (const p of providerThreads) nativeThreads.push(...(yield* store.listNativeThreads(p.id)))
    return {
      threadId,
      runs: yield* store.listRuns(threadId),
      handoffs: yield* store.listHandoffs(threadId),
      deliveries: yield* store.listDeliveriesOfThread(threadId),
      providerThreads,
      nativeThreads,
      links: yield* store.listLinks(threadId),
      offloads: yield* store.listOffloads(threadId)
    }
  })

/** Reads `threadId`'s whole record (see `ThreadRecord`). Fails with the store's `PersistenceError`. */
export const readRecord = (threadId: ThreadId) =>
  Effect.gen(function*() {
    const store = yield* ThreadStore
    const mutable = yield* readMutable(threadId)
    const record: ThreadRecord = { ...mutable, items: yield* store.listItems(threadId), events: yield* store.listEvents(threadId) }
    return record
  })

/** `check` on a record already read (`readRecord`): pure; the violations, empty when all hold. */
export const checkRecord = (record: ThreadRecord, options: CheckOptions = {}): ReadonlyArray<string> => {
    const { threadId, runs, items, handoffs, deliveries, events, providerThreads, offloads } = record
    const violations: Array<string> = []
    // Fork and merge runs of this thread hold copied history: they never reach a provider as a prompt.
    const copyRuns = new Set<string>(record.links.flatMap((l) => {
      const receiving = l.kind === "fork" ? l.forkThreadId : l.parentThreadId
      return receiving === threadId ? [l.runId] : []
    }))
    const itemById = new Map<string, Item>(items.map((i) => [i.id, i]))

    // 1. No wedge: every run is terminal; a run that did not complete stopped for a provider fault or the user;
    //    every started run's prompt reached the provider byte-identical.
    for (const run of runs) {
      if (!terminalRunStatuses.includes(run.status)) violations.push(`no-wedge: run ${run.id} left ${run.status}`)
      if (run.status !== "completed" && run.failureCode !== null && !isFaultCode(run.failureCode)) {
        violations.push(`no-wedge: run ${run.id} ${run.status} (${run.failureCode}): ${run.failureReason}`)
      }
    }
    // The user's prompt recorded exactly once, unchanged: each ended run (not a copy run) holds one `user_message`,
    // its prompt byte-identical (RunLifecycle records it when the run leaves `queued`), except a run that ended while
    // queued behind an unfinished run (`run.prompt_deferred`) while a run ahead of it is still unfinished: it owes its
    // prompt until the last of them ends, and holds none till then. Not on a gateway's thread: its runs' items are the
    // agent's messages as sent, several user messages or none. A gateway's thread is told by a `gateway.*` event or
    // by a user message stored with the agent's message id (a run's prompt has none): an answer without usage and with
    // no retry, divergence or offload writes no `gateway.*` event (review r35last: a request whose user message has
    // two text blocks, Claude Code's reminder and the text, was reported as a prompt recorded twice).
    const gateway = events.some((e) => e.type.startsWith("gateway.")) || items.some((i) => i.kind === "user_message" && i.messageId !== null)
    if (!gateway) {
      const promptsOf = new Map<string, Array<string>>()
      for (const i of items) {
        if (i.kind === "user_message" && i.runId !== null) promptsOf.set(i.runId, [...(promptsOf.get(i.runId) ?? []), i.text])
      }
      const deferred = new Set<string>(events.flatMap((e) => e.type === "run.prompt_deferred" ? [e.payload.runId] : []))
      const firstOpen = runs.find((r) => !terminalRunStatuses.includes(r.status))?.seq
      for (const run of runs) {
        if (copyRuns.has(run.id) || !terminalRunStatuses.includes(run.status)) continue
        const recorded = promptsOf.get(run.id) ?? []
        if (recorded.length === 0 && deferred.has(run.id) && firstOpen !== undefined && firstOpen < run.seq) continue
        if (recorded.length !== 1) violations.push(`prompt-once: run ${run.id} (seq ${run.seq}, ${run.status}) has ${recorded.length} user messages`)
        else if (recorded[0] !== run.prompt) violations.push(`prompt-once: run ${run.id} (seq ${run.seq}) recorded its prompt changed`)
      }
      // Run order: the items follow the runs, as the model saw them: no item of a run comes after an item of a later
      // run (a run starts only when every run ahead has ended, and a prompt owed by a run that ended while queued is
      // recorded after everything the runs ahead record). Found by a tester (r35): the prompt of a message queued
      // behind a run waiting on a client tool call and interrupted there came before that run's call and result.
      // Output recorded after its run ended (an `items.appended` after the run's `run.interrupted` or `run.failed`: a
      // turn the provider never stopped, whose native thread is no longer trusted) is late by design and not checked;
      // a prompt owed by a run that ended while queued (`run.prompt_deferred`) is recorded after its run's end and is.
      // So is a fork's or a merge's copied history: a merge behind an unfinished run records its copies when every run
      // ahead has ended (ThreadLineage), so no copy lands inside a run's span, between its prompt and its output (found
      // in review: a merge during a running turn took seqs between the turn's prompt and its answer).
      const endedAt = new Map<string, number>()
      const late = new Set<string>()
      for (const e of events) {
        // Not `run.completed`: a completed turn's output is all recorded before its end (review r36q: counting it hid
        // output recorded after the run completed, behind a later run's items).
        if ((e.type === "run.interrupted" || e.type === "run.failed") && !endedAt.has(e.payload.runId)) {
          endedAt.set(e.payload.runId, e.seq)
        } else if (e.type === "items.appended" && e.payload.runId !== null && endedAt.has(e.payload.runId) && !deferred.has(e.payload.runId)) {
          for (const id of e.payload.itemIds) late.add(id)
        }
      }
      const seqOfRun = new Map<string, number>(runs.map((r) => [r.id, r.seq]))
      let latest: { readonly runSeq: number; readonly itemSeq: number } | null = null
      for (const i of items) {
        const runSeq = i.runId === null || late.has(i.id) ? undefined : seqOfRun.get(i.runId)
        if (runSeq === undefined) continue
        if (latest !== null && runSeq < latest.runSeq) {
          violations.push(`run-order: item ${i.id} (${i.kind}, seq ${i.seq}) of run seq ${runSeq} follows item seq ${latest.itemSeq} of run seq ${latest.runSeq}`)
          break
        }
        if (latest === null || runSeq > latest.runSeq) latest = { runSeq, itemSeq: i.seq }
      }
    }
    // A merge's copies are recorded once every run ahead of its run has ended (owed till then: ThreadLineage): its
    // marker and `itemCount` copies. A merge run still empty with nothing unfinished ahead lost them.
    const firstUnfinished = runs.find((r) => !terminalRunStatuses.includes(r.status))?.seq
    for (const link of record.links) {
      if (link.kind !== "merge" || link.parentThreadId !== threadId) continue
      const run = runs.find((r) => r.id === link.runId)
      if (run === undefined || (firstUnfinished !== undefined && firstUnfinished < run.seq)) continue
      const held = items.filter((i) => i.runId === run.id).length
      if (held !== link.itemCount + 1) {
        violations.push(`nothing-lost: merge ${link.id} (run seq ${run.seq}) holds ${held} items, ${link.itemCount} copies and a marker owed`)
      }
    }
    if (options.observed !== undefined) {
      const byRun = new Map<string, Array<string>>()
      for (const t of options.observed.turns) byRun.set(t.runId, [...(byRun.get(t.runId) ?? []), t.prompt])
      for (const run of runs) {
        const prompts = byRun.get(run.id) ?? []
        if (copyRuns.has(run.id)) {
          if (prompts.length > 0) violations.push(`no-wedge: copied-history run ${run.id} reached the provider as a prompt`)
          continue
        }
        if (run.status === "completed" && prompts.length !== 1) {
          violations.push(`no-wedge: completed run ${run.id} reached the provider ${prompts.length} times`)
        }
        for (const p of prompts) if (p !== run.prompt) violations.push(`no-wedge: run ${run.id} prompt changed on the way to the provider`)
      }
    }

    // 2. Exactly once per native thread: no item delivered twice, none delivered that the thread saw natively (a
    //    summary delivers every item it covers).
    const nativeOfRun = new Map<string, string | null>(runs.map((r) => [r.id, r.nativeThreadId]))
    const runById = new Map(runs.map((r) => [r.id as string, r]))
    // An `/offload` summary stands for the items its offload covers and for the earlier summary it extends.
    const offloadById = new Map(offloads.map((o) => [o.id as string, o]))
    const coveredBySummary = new Map<string, ReadonlyArray<string>>()
    for (const o of offloads) {
      const ids: Array<string> = [...o.coveredItemIds]
      let previous = o.previousOffloadId === null ? undefined : offloadById.get(o.previousOffloadId)
      while (previous !== undefined) {
        ids.push(previous.summaryItemId, ...previous.coveredItemIds)
        previous = previous.previousOffloadId === null ? undefined : offloadById.get(previous.previousOffloadId)
      }
      coveredBySummary.set(o.summaryItemId, ids)
    }
    const deliveredTo = new Map<string, Set<string>>()
    for (const d of deliveries) {
      if (d.status !== "injected" && d.status !== "inline") continue
      const seen = deliveredTo.get(d.nativeThreadId) ?? new Set<string>()
      const named = new Set<string>(d.deliveredItemIds)
      const carried = d.deliveredItemIds.flatMap((id) => [
        { id, via: null as string | null },
        ...(coveredBySummary.get(id) ?? []).filter((c) => !named.has(c)).map((c) => ({ id: c, via: id as string | null }))
      ])
      for (const { id, via } of carried) {
        const inside = via === null ? "" : ` (inside summary ${via})`
        if (seen.has(id)) violations.push(`exactly-once: item ${id} delivered twice to native thread ${d.nativeThreadId}${inside}`)
        seen.add(id)
        const item = itemById.get(id)
        if (item?.runId != null && nativeOfRun.get(item.runId) === d.nativeThreadId) {
          violations.push(`exactly-once: item ${id} delivered to native thread ${d.nativeThreadId}${inside}, which saw it natively`)
        }
      }
      deliveredTo.set(d.nativeThreadId, seen)
    }
    if (options.observed !== undefined) {
      const byRef = new Map<string, Set<string>>()
      for (const inj of options.observed.injections) {
        const seen = byRef.get(inj.nativeRef) ?? new Set<string>()
        for (const id of inj.itemIds) {
          if (seen.has(id)) violations.push(`exactly-once: provider native thread ${inj.nativeRef} received item ${id} twice`)
          seen.add(id)
        }
        byRef.set(inj.nativeRef, seen)
      }
    }
    // ...and eventually: every transferable item of runs at or below a provider thread's watermark is seen natively
    // by its active native thread, delivered to it, omitted with a ref, or still owed by an open handoff.
    const accounted = new Map<string, Set<string>>()
    for (const h of handoffs) {
      const set = accounted.get(h.targetProviderThreadId) ?? new Set<string>()
      const settledTo = deliveries.filter((d) => d.handoffId === h.id)
      if (h.open) for (const id of h.itemIds) set.add(id)
      for (const d of settledTo) for (const id of [...d.deliveredItemIds, ...d.omittedItemIds]) set.add(id)
      accounted.set(h.targetProviderThreadId, set)
    }
    // An item is also settled by a summary that covers it (invariant 2), but only when an offload record really
    // covers it (seq at or below the record's cut) and that summary is itself delivered to, or owed to, the thread.
    for (const p of providerThreads) {
      if (p.activeNativeThreadId === null) continue
      const native = p.activeNativeThreadId
      const covered = accounted.get(p.id) ?? new Set<string>()
      const delivered = deliveredTo.get(native) ?? new Set<string>()
      const summaryCut = offloads
        .filter((o) => delivered.has(o.summaryItemId) || covered.has(o.summaryItemId))
        .reduce((cut, o) => Math.max(cut, o.cutSeq), 0)
      for (const item of items) {
        if (item.runId === null || !isTransferable(item)) continue
        const run = runById.get(item.runId)
        if (run === undefined || run.seq > p.syncedRunSeq) continue
        if (run.nativeThreadId === native) continue
        if (delivered.has(item.id) || covered.has(item.id) || item.seq <= summaryCut) continue
        violations.push(`exactly-once: item ${item.id} (run ${run.seq}) owed to ${p.providerInstance} is neither seen, delivered, omitted nor owed`)
      }
    }

    // 3. Bounded records: handoffs grow with switches, missed runs, replacements and offloads (at most one handoff
    //    per provider thread per offload, owing the summary in place of the handoffs it supersedes), never with turns.
    const switches = events.filter((e) => e.type === "provider.switched" && e.payload.handoffId != null).length
    const missed = runs.filter((r) => r.stopPoint === "before_provider").length
    const replacements = events.filter((e) => e.type === "native_thread.replaced").length +
      // Late output of a turn on a native thread since replaced is owed to its successor: one handoff per such turn.
      events.filter((e) => e.type === "handoff.created" && e.payload.lateOutputOf !== undefined).length
    let bySummary = 0
    for (const e of events) {
      if (e.type !== "thread.offloaded") continue
      const created = Array.isArray(e.payload.handoffIds) ? e.payload.handoffIds.length : 0
      if (created > providerThreads.length) {
        violations.push(`bounded-records: offload ${String(e.payload.offloadId)} created ${created} handoffs for ${providerThreads.length} provider threads`)
      }
      bySummary += created
    }
    if (handoffs.length > switches + missed + replacements + bySummary) {
      violations.push(
        `bounded-records: ${handoffs.length} handoffs for ${switches} switches, ${missed} missed runs, ${replacements} replacements, ` +
          `${bySummary} offload supersessions`
      )
    }
    const perPair = new Set<string>()
    for (const d of deliveries) {
      const key = `${d.handoffId}/${d.nativeThreadId}`
      if (perPair.has(key)) violations.push(`bounded-records: two deliveries of ${d.handoffId} to ${d.nativeThreadId}`)
      perPair.add(key)
    }

    // 5. Budget: what was sent never exceeded the budget it was planned under, in the provider's units (Baton's
    //    count scaled by the calibration ratio in force; events written before calibration carry none: ratio 1).
    for (const e of events) {
      if (e.type !== "delivery.pending") continue
      const budget = Number(e.payload.budget)
      const ratio = e.payload.ratio === undefined ? 1 : Number(e.payload.ratio)
      const tokens = Calibration.apply(ratio, Number(e.payload.renderedTokens))
      if (!(tokens <= budget)) {
        violations.push(`budget: delivery ${String(e.payload.deliveryId)} sent ${tokens} tokens (ratio ${ratio}) over a budget of ${budget}`)
      }
    }

    // 6. Nothing lost: every item referenced by a handoff exists; the log holds every appended item.
    for (const h of handoffs) {
      for (const id of h.itemIds) if (!itemById.has(id)) violations.push(`nothing-lost: handoff ${h.id} owes missing item ${id}`)
    }
    // ...and an offload chain leaves no gap: every item at or below the latest cut (summaries aside) is summarised by
    // exactly one offload of the chain, and every summary exists.
    const summaryIds = new Set<string>(offloads.map((o) => o.summaryItemId))
    const summarisedBy = new Map<string, number>()
    for (const o of offloads) {
      if (!itemById.has(o.summaryItemId)) violations.push(`nothing-lost: offload ${o.id} names missing summary ${o.summaryItemId}`)
      for (const id of o.coveredItemIds) summarisedBy.set(id, (summarisedBy.get(id) ?? 0) + 1)
    }
    const lastCut = offloads.at(-1)?.cutSeq ?? 0
    for (const item of items) {
      if (item.seq > lastCut || summaryIds.has(item.id)) continue
      const times = summarisedBy.get(item.id) ?? 0
      if (times !== 1) violations.push(`nothing-lost: item ${item.id} (seq ${item.seq}) before the offload cut ${lastCut} is summarised ${times} times`)
    }
    if (options.expectedItemCount !== undefined && items.length !== options.expectedItemCount) {
      violations.push(`nothing-lost: ${items.length} items in the log, ${options.expectedItemCount} appended`)
    }

    // 7. Tool pairing in the record: every tool result answers a tool call recorded before it in the thread.
    const calls = new Set<string>()
    for (const item of items) {
      if (item.toolCallId === null) continue
      if (item.kind === "tool_call") calls.add(item.toolCallId)
      else if (item.kind === "tool_result" && !calls.has(item.toolCallId)) {
        violations.push(`tool-pairing: tool result ${item.id} answers call ${item.toolCallId}, which is not in the record before it`)
      }
    }
    // 7. Tool pairing: a delivery carries a tool call iff it carries the results answering it (when both are owed).
    for (const d of deliveries) {
      if (d.status !== "injected" && d.status !== "inline") continue
      const handoff = handoffs.find((h) => h.id === d.handoffId)
      if (handoff === undefined) continue
      const delivered = new Set<string>(d.deliveredItemIds)
      const owedItems = handoff.itemIds.map((id) => itemById.get(id)).filter((i): i is Item => i !== undefined)
      const byCall = new Map<string, Array<Item>>()
      for (const i of owedItems) {
        if (i.toolCallId === null || (i.kind !== "tool_call" && i.kind !== "tool_result")) continue
        byCall.set(i.toolCallId, [...(byCall.get(i.toolCallId) ?? []), i])
      }
      for (const [callId, pair] of byCall) {
        const inside = pair.filter((i) => delivered.has(i.id)).length
        if (inside !== 0 && inside !== pair.length) {
          violations.push(`tool-pairing: delivery ${d.id} split tool call ${callId}`)
        }
      }
    }
    // ...and no offload cut falls between a tool call and a result answering it.
    const seqsOfCall = new Map<string, Array<number>>()
    for (const i of items) {
      if (i.toolCallId === null || (i.kind !== "tool_call" && i.kind !== "tool_result")) continue
      seqsOfCall.set(i.toolCallId, [...(seqsOfCall.get(i.toolCallId) ?? []), i.seq])
    }
    for (const o of offloads) {
      for (const [callId, seqs] of seqsOfCall) {
        const before = seqs.filter((seq) => seq <= o.cutSeq).length
        if (before !== 0 && before !== seqs.length) violations.push(`tool-pairing: offload ${o.id} (cut at seq ${o.cutSeq}) split tool call ${callId}`)
      }
    }
    return violations
}
