/**
 * ProviderTruthChecks: the simulator's oracle (docs/design.md invariants 1 and 8, issue "Truthful under concurrency").
 * InvariantChecks compares Baton's record with itself; this compares it with the provider's own truth: what each
 * native thread really held, in the provider's units, and which requests the provider rejected as over its window
 * (`ScriptedProvider.TruthRecord`). It flags a request the provider rejected when Baton had the information to know
 * it would not fit:
 *
 * - **known full:** before the request, Baton's last accepted knowledge of that native thread (a trusted usage
 *   report, a compaction's result, or a fresh start at 0) plus what the request added (Baton's own count times the
 *   calibration ratio Baton had learned by then, or 1) already exceeds the window the provider advertised;
 * - **rejected before:** the same native thread already rejected a request no larger, and nothing was compacted
 *   in between (a provider's rejection is information too; a crash can lose a turn's rejection before Baton records
 *   it, its `context.overflowed`: such a rejection is not counted after the restart);
 * - **held since a rejection:** a rejection that gave its size proves the native thread held at least that size
 *   less what the request added; what the native thread took after it (accepted requests, the items its turns
 *   produced, which Baton records) only adds to that, until a compaction. That floor plus the request exceeds the
 *   window.
 *
 * All lower-bound what Baton knew (growth since the last report is not counted; a rejection's floor takes the
 * largest ratio Baton held for what the rejected request added and the smallest for what came after), so a flag is
 * never a judgment call. `checkCalibration` adds the third property: once a provider instance's calibration rests on enough
 * evidence, its ratio is within 10% of the provider's true tokenizer ratio. It owns these checks only; the other
 * invariants stay in InvariantChecks.
 */
import type { NativeThread, ProviderInstance, ThreadEvent, ThreadId } from "@baton/contracts"
import { type ProviderCalibration, ThreadStore } from "@baton/persistence"
import { Budget } from "@baton/context"
import type { ScriptedProvider } from "@baton/providers"
import { Effect, type Option } from "effect"
import type * as InvariantChecks from "./InvariantChecks.js"

/** What one provider instance's truth log holds (see `ScriptedProvider.truth`). */
export type TruthLog = ReadonlyArray<ScriptedProvider.TruthRecord>

/**
 * Evidence after which a calibration must have converged: at least `minSamples` accepted samples and `minWeight`
 * Baton tokens of evidence (the policy's samples are at least 256 tokens each). Tolerance 10% (the issue's bound).
 */
export const convergence = { minSamples: 8, minWeight: 10_000, tolerance: 0.1 } as const

/**
 * Checks that each instance's stored calibration, once it holds `convergence` evidence, is within 10% of the
 * instance's true ratio (`trueRatio`: the scripted provider's `tokenScale`). One line per violation.
 */
export const checkCalibration = (instances: ReadonlyArray<{ readonly instance: string; readonly trueRatio: number }>) =>
  Effect.gen(function*() {
    const store = yield* ThreadStore
    const violations: Array<string> = []
    for (const { instance, trueRatio } of instances) {
      violations.push(...checkCalibrationRecord(instance, trueRatio, yield* store.getCalibration(instance as ProviderInstance)))
    }
    return violations
  })

/**
 * `checkCalibration` for one instance on a calibration already read (`ThreadStore.getCalibration`): pure; at most
 * one line.
 */
export const checkCalibrationRecord = (
  instance: string,
  trueRatio: number,
  found: Option.Option<ProviderCalibration>
): ReadonlyArray<string> => {
  if (found._tag === "None") return []
  const c = found.value
  if (c.samples < convergence.minSamples || c.weight < convergence.minWeight) return []
  if (Math.abs(c.ratio - trueRatio) <= convergence.tolerance * trueRatio) return []
  return [
    `truth: the calibration of ${instance} is ${c.ratio.toFixed(3)} after ${c.samples} samples (${Math.round(c.weight)} ` +
    `tokens of evidence), more than 10% from the provider's true ratio ${trueRatio.toFixed(3)}`
  ]
}

/**
 * Checks that a committed `/offload` frees the lane that goes on: the first turn after each `thread.offloaded` event
 * (unless a switch or an undo comes first) runs on a native thread that, by the provider's own log (`received`, one
 * list per provider instance, in arrival order), never received what the summary covered: no earlier turn of a
 * covered run (a run with an item at or before the cut) and no injection of a covered item. A lane that goes on
 * holding the originals after "freeing up context window space" is the defect this catches (the active lane kept
 * sending every original). Inline history is text without ids and is not looked at. One line per violation.
 */
export const checkOffloadFreesLane = (threadId: ThreadId, received: ReadonlyArray<ReadonlyArray<ScriptedProvider.Received>>) =>
  Effect.gen(function*() {
    const store = yield* ThreadStore
    return checkOffloadFreesLaneRecord({ events: yield* store.listEvents(threadId), items: yield* store.listItems(threadId) }, received)
  })

/** `checkOffloadFreesLane` on the thread's events and items already read (`InvariantChecks.readRecord`): pure. */
export const checkOffloadFreesLaneRecord = (
  record: Pick<InvariantChecks.ThreadRecord, "events" | "items">,
  received: ReadonlyArray<ReadonlyArray<ScriptedProvider.Received>>
): ReadonlyArray<string> => {
    const { events, items } = record
    const violations: Array<string> = []
    for (const [k, e] of events.entries()) {
      if (e.type !== "thread.offloaded") continue
      const cutSeq = e.payload.cutSeq
      const next = events.slice(k + 1).find((x) =>
        x.type === "run.started" || x.type === "provider.switched" || x.type === "thread.offload_undone" || x.type === "thread.offloaded"
      )
      if (next === undefined || next.type !== "run.started") continue
      const runId = next.payload.runId
      const coveredItems = new Set<string>(items.filter((i) => i.seq <= cutSeq).map((i) => i.id))
      const coveredRuns = new Set<string>(items.filter((i) => i.seq <= cutSeq && i.runId !== null).map((i) => i.runId!))
      coveredRuns.delete(runId)
      for (const log of received) {
        const at = log.findIndex((r) => r.type === "turn" && r.runId === runId)
        if (at < 0) continue
        const nativeRef = log[at]!.nativeRef
        const held = log.slice(0, at).find((r) =>
          r.nativeRef === nativeRef &&
          ((r.type === "turn" && coveredRuns.has(r.runId)) || (r.type === "inject" && r.itemIds.some((id) => coveredItems.has(id))))
        )
        if (held !== undefined) {
          violations.push(
            `truth: run ${runId}, the first after offload ${e.payload.offloadId} (items up to seq ${cutSeq} summarised), ` +
              `went to ${nativeRef}, which still holds what the summary replaced (${held.type === "turn" ? `run ${held.runId}` : "an injection of covered items"})`
          )
        }
      }
    }
    return violations
}

/** Baton's lower bound on a native thread's size, from the events before position `beforeSeq` of the thread log. */
const knownBefore = (events: ReadonlyArray<ThreadEvent>, nativeThreadId: string, instance: string, beforeSeq: number) => {
  let used = 0
  let ratio = 1
  for (const e of events) {
    if (e.seq >= beforeSeq) break
    switch (e.type) {
      case "native_thread.started":
        if (e.payload.nativeThreadId === nativeThreadId) used = 0
        break
      case "usage.reported":
        if (e.payload.nativeThreadId === nativeThreadId && e.payload.trusted && typeof e.payload.usage.usedTokens === "number") {
          used = e.payload.usage.usedTokens
        }
        break
      case "thread.compacted":
        if (e.payload.nativeThreadId === nativeThreadId) used = e.payload.usedAfter ?? 0
        break
      case "calibration.updated":
        if (e.payload.providerInstance === instance) ratio = e.payload.newRatio
        break
      default:
        break
    }
  }
  return { used, ratio }
}

/**
 * Checks `threadId`'s requests against the providers' truth logs (all instances of the process; records of other
 * threads' native threads are ignored). Returns one line per violation, prefixed `truth:`.
 */
export const check = (threadId: ThreadId, logs: ReadonlyArray<TruthLog>) =>
  Effect.gen(function*() {
    const store = yield* ThreadStore
    const providerThreads = yield* store.listProviderThreads(threadId)
    const nativeThreads: Array<NativeThread> = []
    for (const p of providerThreads) nativeThreads.push(...(yield* store.listNativeThreads(p.id)))
    return checkRecord({ providerThreads, nativeThreads, events: yield* store.listEvents(threadId) }, logs)
  })

/**
 * `check` on the thread's record already read (`InvariantChecks.readRecord`): pure. `restarts[i]`: where the process
 * restarted in `logs[i]` (the log's length at each restart, ascending; none by default): a turn's rejection Baton
 * did not record (no `context.overflowed` follows the attempt's `run.started`) and a restart then lost is not
 * counted for the requests after that restart.
 */
export const checkRecord = (
  record: Pick<InvariantChecks.ThreadRecord, "providerThreads" | "nativeThreads" | "events">,
  logs: ReadonlyArray<TruthLog>,
  restarts: ReadonlyArray<ReadonlyArray<number>> = []
): ReadonlyArray<string> => {
    const violations: Array<string> = []
    const instanceOf = new Map<string, string>(record.providerThreads.map((pt) => [pt.id, pt.providerInstance]))
    const natives = new Map<string, { readonly id: string; readonly instance: string }>()
    for (const n of record.nativeThreads) {
      const instance = instanceOf.get(n.providerThreadId)
      if (instance !== undefined) natives.set(n.nativeRef, { id: n.id, instance })
    }
    const events = record.events
    const startsOf = new Map<string, Array<ThreadEvent>>()
    for (const e of events) {
      if (e.type !== "run.started") continue
      const list = startsOf.get(e.payload.runId) ?? []
      list.push(e)
      startsOf.set(e.payload.runId, list)
    }
    /** The least and largest ratio `instance`'s calibration held (the identity first) before position `beforeSeq`. */
    const ratiosBefore = (instance: string, beforeSeq: number) => {
      let min = 1
      let max = 1
      for (const e of events) {
        if (e.seq >= beforeSeq) break
        if (e.type !== "calibration.updated" || e.payload.providerInstance !== instance) continue
        min = Math.min(min, e.payload.newRatio)
        max = Math.max(max, e.payload.newRatio)
      }
      return { min, max }
    }
    /** Whether the rejection of the attempt `started` began was recorded (see the check below). */
    const overflowRecorded = (started: ThreadEvent) => {
      if (started.type !== "run.started") return false
      const runId = started.payload.runId
      for (const e of events) {
        if (e.seq <= started.seq) continue
        if (e.type === "run.started" && e.payload.runId === runId) return false
        if (e.type === "context.overflowed" && e.payload.runId === runId) return true
      }
      return false
    }
    for (const [l, log] of logs.entries()) {
      const restartMarks = restarts[l] ?? []
      // Each native thread's rejections (`lostAt`: the log position from which a restart lost it, else infinite).
      const rejections = new Map<string, Array<{ readonly tokens: number; readonly lostAt: number }>>()
      // What a rejection proved of each native thread (its size, what the rejected request added) and what the
      // native thread took since (Baton tokens), until a compaction.
      const rejection = new Map<string, { readonly tokens: number; readonly added: number; since: number; readonly lostAt: number }>()
      const sentOf = new Map<string, number>()
      for (const [j, r] of log.entries()) {
        const native = natives.get(r.nativeRef)
        if (native === undefined) continue
        if (r.operation === "compact") {
          rejections.delete(r.nativeRef)
          rejection.delete(r.nativeRef)
          continue
        }
        const stillKnown = (rejections.get(r.nativeRef) ?? []).filter((x) => x.lostAt > j)
        const lostProof = rejection.get(r.nativeRef)
        if (lostProof !== undefined && lostProof.lostAt <= j) rejection.delete(r.nativeRef)
        const proof = rejection.get(r.nativeRef)
        if (r.accepted && proof !== undefined) proof.since += r.addedBatonTokens
        if (r.operation === "output") continue
        // The k-th request of a run is its k-th attempt (`run.started` is written before each one).
        let started: ThreadEvent | undefined
        if (r.operation === "startTurn" && r.runId !== null) {
          const k = sentOf.get(r.runId) ?? 0
          sentOf.set(r.runId, k + 1)
          started = startsOf.get(r.runId)?.[k]
        }
        if (r.accepted) continue
        const before = stillKnown.length === 0 ? undefined : Math.min(...stillKnown.map((x) => x.tokens))
        if (before !== undefined && r.tokens >= before) {
          violations.push(
            `truth: ${r.nativeRef} was sent a ${r.operation} request of ${r.tokens} tokens (window ${r.window}) after it ` +
              `already rejected one of ${before} tokens, with nothing compacted in between`
          )
        }
        if (started !== undefined && r.window !== null) {
          const known = knownBefore(events, native.id, native.instance, started.seq)
          const expected = known.used + r.addedBatonTokens * known.ratio
          const ratios = ratiosBefore(native.instance, started.seq)
          const floor = proof === undefined ? null : proof.tokens - proof.added * ratios.max + proof.since * ratios.min
          const proved = floor === null ? null : floor + r.addedBatonTokens * ratios.min
          if (expected > r.window) {
            violations.push(
              `truth: run ${r.runId} was sent to ${r.nativeRef} although Baton knew it would not fit: last known usage ` +
                `${known.used} + request ${r.addedBatonTokens} x${known.ratio.toFixed(3)} = ${Math.round(expected)} > window ` +
                `${r.window} (the provider counted ${r.tokens})`
            )
          } else if (proved !== null && proved > r.window) {
            violations.push(
              `truth: run ${r.runId} was sent to ${r.nativeRef} although Baton knew it would not fit: an earlier rejection ` +
                `and what the native thread took since prove it held at least ${Math.floor(floor!)}, + request ` +
                `${r.addedBatonTokens} x${ratios.min.toFixed(3)} = ${Math.round(proved)} > window ${r.window} (the provider counted ${r.tokens})`
            )
          }
        }
        // A turn's rejection is Baton's information once recorded: its `context.overflowed` (written in the unit of
        // work that records what it taught) follows the attempt's `run.started`. A crash before that unit commits
        // loses it (sim seed 44018: the restart ends the run `before_provider`, and nothing says the native thread is
        // full): a rejection not recorded counts only until the next restart. Without a restart it counts: Baton had
        // it and should have recorded it.
        const lostAt = started === undefined || overflowRecorded(started)
          ? Number.POSITIVE_INFINITY
          : restartMarks.find((p) => p > j) ?? Number.POSITIVE_INFINITY
        rejections.set(r.nativeRef, [...stillKnown, { tokens: r.tokens, lostAt }])
        // A rejection that gave its size (both overflow signals do) proves what the native thread held without it.
        // Only the latest is kept: a weaker bound at worst, never a flag Baton could not have known.
        rejection.set(r.nativeRef, { tokens: r.tokens, added: r.addedBatonTokens, since: 0, lostAt })
      }
    }
    return violations
}

/**
 * Checks that a compaction's outcome is never recorded over a newer report (invariant 8: Baton's record of a native
 * thread is never older than the last report it accepted; the outcome of a compaction never overwrites what a later
 * operation wrote). For each `thread.compacted` event of a native thread, the compaction it reports is the provider's
 * last compaction of that thread before the first turn that Baton started after the event (by the provider's own log,
 * `received`, one list per instance in arrival order). A turn the provider took after that compaction whose attempt
 * Baton started before the event raced the compaction: the usage Baton accepted for it (a trusted `usage.reported` of
 * that native thread after the attempt's `run.started`, before the event) is newer than what the compaction
 * answered, and the event's `usedAfter` (what Baton then records and plans the next turn with) must not be below it.
 * One line per violation. Found by the simulator's race "/compact, inside its provider call, send": the compaction's
 * 2,000 tokens overwrote the turn's report of 10,000, so the next turn start planned as if the thread were nearly empty.
 */
export const checkCompactionOrderRecord = (
  record: Pick<InvariantChecks.ThreadRecord, "nativeThreads" | "events">,
  received: ReadonlyArray<ReadonlyArray<ScriptedProvider.Received>>
): ReadonlyArray<string> => {
  const violations: Array<string> = []
  const refOf = new Map<string, string>(record.nativeThreads.map((n) => [n.id, n.nativeRef]))
  const events = record.events
  // Read once (the checks run after every step of long seeds): each run's attempt starts per native thread, and each
  // native thread's trusted usage reports, both in seq order; each provider log's requests per native thread.
  const starts = new Map<string, Array<number>>()
  const reports = new Map<string, Array<{ readonly seq: number; readonly used: number }>>()
  for (const x of events) {
    if (x.type === "run.started") {
      const key = `${x.payload.runId}\u0000${x.payload.nativeThreadId}`
      starts.set(key, [...(starts.get(key) ?? []), x.seq])
    } else if (x.type === "usage.reported" && x.payload.trusted && typeof x.payload.usage.usedTokens === "number") {
      const list = reports.get(x.payload.nativeThreadId) ?? []
      list.push({ seq: x.seq, used: x.payload.usage.usedTokens })
      reports.set(x.payload.nativeThreadId, list)
    }
  }
  for (const list of starts.values()) list.sort((a, b) => a - b)
  for (const list of reports.values()) list.sort((a, b) => a.seq - b.seq)
  const byRef = received.map((log) => {
    const out = new Map<string, Array<ScriptedProvider.Received>>()
    for (const r of log) out.set(r.nativeRef, [...(out.get(r.nativeRef) ?? []), r])
    return out
  })
  for (const e of events) {
    if (e.type !== "thread.compacted" || e.payload.usedAfter === null) continue
    const nativeId = e.payload.nativeThreadId
    const ref = refOf.get(nativeId)
    if (ref === undefined) continue
    const startsOf = (runId: string) => starts.get(`${runId}\u0000${nativeId}`) ?? []
    /** The seq of the first attempt of `runId` on this native thread Baton started before the event, if any. */
    const startedBefore = (runId: string) => {
      const first = startsOf(runId)[0]
      return first !== undefined && first < e.seq ? first : undefined
    }
    /** Whether an attempt of `runId` on this native thread started after the event. */
    const startedAfter = (runId: string) => (startsOf(runId).at(-1) ?? -1) > e.seq
    for (const logByRef of byRef) {
      const mine = logByRef.get(ref) ?? []
      if (mine.length === 0) continue
      const bound = mine.findIndex((r) => r.type === "turn" && startedBefore(r.runId) === undefined)
      const end = bound < 0 ? mine.length : bound
      const compactedAt = mine.slice(0, end).map((r) => r.type).lastIndexOf("compact")
      if (compactedAt < 0) continue
      for (const r of mine.slice(compactedAt + 1, end)) {
        if (r.type !== "turn") continue
        // A run started again on this native thread after the event (a retry after a restart): the turn the provider
        // took after compacting is that later attempt's, not one raced by the compaction; the reports before the event
        // are the earlier attempt's, from before the compaction (review r46: a false violation).
        if (startedAfter(r.runId)) continue
        const from = startedBefore(r.runId)!
        const accepted = (reports.get(nativeId) ?? []).filter((x) => x.seq > from && x.seq < e.seq)
        if (accepted.length === 0) continue
        const newest = accepted.at(-1)!.used
        if (e.payload.usedAfter < newest) {
          violations.push(
            `truth: the compaction recorded at seq ${e.seq} (${ref}: used ${e.payload.usedAfter} after) is older than the usage ` +
              `report Baton accepted before it for run ${r.runId} (${newest} used), which the provider took after compacting: ` +
              `the compaction's outcome overwrote a newer record`
          )
        }
      }
    }
  }
  return violations
}

/** The largest `window` of the truth logs' requests, by `keyOf` (requests without a window or a key left out). */
const largestWindows = (logs: ReadonlyArray<TruthLog>, keyOf: (r: TruthLog[number]) => string | null): ReadonlyMap<string, number> => {
  const out = new Map<string, number>()
  for (const log of logs) {
    for (const r of log) {
      const key = keyOf(r)
      if (r.window === null || key === null) continue
      out.set(key, Math.max(out.get(key) ?? r.window, r.window))
    }
  }
  return out
}

/**
 * Checks each turn start's delivery budget against the design's formula on the provider's own window, independently
 * of the budget Baton recorded (invariant 5 as the design states it: InvariantChecks compares what was sent with the
 * `budget` of its `delivery.pending` event, which a wrong budget passes). A turn start's budget is never above
 * `min(tokenCap, window - reserve)`, `reserve = max(reserveFloor, ceil(window * reserveFraction))` (`policy`, default
 * `Budget.defaultPolicy`), where `window` is the largest the provider had when it received that run (its truth log:
 * the window Baton plans with is never larger than the provider's). `/compact`'s injections (no run) use the physical
 * headroom and are not looked at. One line per violation.
 */
export const checkBudgetRecord = (
  record: Pick<InvariantChecks.ThreadRecord, "events">,
  logs: ReadonlyArray<TruthLog>,
  policy: Budget.BudgetPolicy = Budget.defaultPolicy
): ReadonlyArray<string> => {
  const violations: Array<string> = []
  // The largest window each run's requests had (read once, not per event).
  const windowOf = largestWindows(logs, (r) => r.runId)
  for (const e of record.events) {
    if (e.type !== "delivery.pending" || e.payload.runId === null) continue
    const runId = e.payload.runId
    const window = windowOf.get(runId)
    if (window === undefined) continue
    const reserve = Math.max(policy.reserveFloor, Math.ceil(window * policy.reserveFraction))
    const most = Math.max(0, Math.min(policy.tokenCap, window - reserve))
    if (e.payload.budget > most) {
      violations.push(
        `budget: delivery ${e.payload.deliveryId} of run ${runId} was planned under a budget of ${e.payload.budget} tokens, ` +
          `above the design's most for the provider's window of ${window} (cap ${policy.tokenCap}, reserve ${reserve}): ${most}`
      )
    }
  }
  return violations
}

/**
 * Checks that Baton never trusts a usage report that cannot be true (invariant 8: a report Baton did not trust never
 * changes a decision, so one it must not trust must not be trusted): a trusted `usage.reported` whose `usedTokens`
 * exceeds the provider's real window for that native thread (its truth log: the largest window of any request the
 * native thread received) or the maximum the report itself states. A mutation run found the gap: with UsageSanity's
 * two window checks removed, 8 seeds × 80 steps of impossible reports (777,000 used of 258,000) raised nothing.
 * One line per violation.
 */
export const checkTrustedUsageRecord = (
  record: Pick<InvariantChecks.ThreadRecord, "nativeThreads" | "events">,
  logs: ReadonlyArray<TruthLog>
): ReadonlyArray<string> => {
  const violations: Array<string> = []
  const refOf = new Map<string, string>(record.nativeThreads.map((n) => [n.id, n.nativeRef]))
  // The largest window of any request each native thread received (read once, not per event).
  const windowOf = largestWindows(logs, (r) => r.nativeRef)
  for (const e of record.events) {
    if (e.type !== "usage.reported" || !e.payload.trusted) continue
    const used = e.payload.usage.usedTokens
    if (typeof used !== "number") continue
    const ref = refOf.get(e.payload.nativeThreadId)
    const window = ref === undefined ? null : windowOf.get(ref) ?? null
    const stated = e.payload.usage.maxTokens ?? null
    if ((window !== null && used > window) || (stated !== null && used > stated)) {
      violations.push(
        `truth: a usage report of ${used} tokens on ${ref ?? e.payload.nativeThreadId} was trusted (seq ${e.seq}) although it exceeds ` +
          `${window !== null && used > window ? `the provider's window of ${window}` : `the maximum it states, ${stated}`}`
      )
    }
  }
  return violations
}
