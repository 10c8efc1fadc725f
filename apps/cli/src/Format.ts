/** Plain-text rendering of the CLI's output: one line per run, the replay summary, thread and handoff listings. */
import type { ContextHandoff, HandoffDelivery, NativeThread, ProviderThread, Run, Thread } from "@baton/contracts"
import { DateTime } from "effect"
import type { ReplaySummary, RunLine } from "./Replay.js"

const nativeThreadId = (names: ReadonlyMap<string, string>, id: string) => names.get(id) ?? id

const n = (x: number) => x.toLocaleString("en-US")
const pad = (s: string, w: number) => s.padEnd(w)
const lpad = (s: string, w: number) => s.padStart(w)

const items = (k: number) => `${n(k)} item${k === 1 ? "" : "s"}`

/**
 * One run: `run  12 codex    g1  completed | start 31,204/42,000 budget 0 | deferred 143 items 20,511 tok | after 31,950`.
 * "start" is the native thread's usage and effective window the budget was computed from; "after" its usage once
 * the run ended (a drop means the provider compacted natively). A provider whose tokenizer calibration is not 1
 * shows it after the budget (`budget 16,000 x1.150`): the budget's estimates were scaled by it.
 */
export const runLine = (l: RunLine) => {
  const head = `${l.thread > 1 ? `t${l.thread} ` : ""}run ${lpad(String(l.run), 4)} ${pad(l.provider, 8)} ${pad(l.generation === null ? "-" : `g${l.generation}`, 3)} ${pad(l.status, 11)}`
  if (l.stopped !== null) return `${head} | ${l.stopped}`
  if (l.budget === null) {
    return `${head} | ${l.status === "interrupted" ? "interrupted before the provider started: its prompt is owed to the next turn" : "did not start"}`
  }
  const start = `start ${lpad(l.usedAtStart === null ? "-" : n(l.usedAtStart), 9)}/${pad(n(l.window), 9)} budget ${lpad(n(l.budget), 6)}` +
    (l.ratio === 1 ? "" : ` x${l.ratio.toFixed(3)}`)
  const parts: Array<string> = []
  if (l.deliveredItems > 0) parts.push(`${l.mode} ${items(l.deliveredItems)} ${n(l.deliveredTokens)} tok`)
  if (l.deferredItems > 0) parts.push(`deferred ${items(l.deferredItems)} ${n(l.deferredTokens)} tok`)
  if (l.omittedItems > 0) parts.push(`omitted ${items(l.omittedItems)}`)
  const after = l.usedAfter === null ? "" : ` | after ${n(l.usedAfter)}`
  return `${head} | ${start} | ${parts.length === 0 ? "nothing owed" : parts.join(", ")}${after}`
}

/** A 30-cell progress bar for stderr on a terminal. */
export const progressBar = (done: number, total: number) => {
  const cells = 30
  const filled = total === 0 ? cells : Math.round((done / total) * cells)
  return `[${"#".repeat(filled)}${".".repeat(cells - filled)}] ${done}/${total}`
}

export const summary = (s: ReplaySummary) =>
  [
    `replayed ${s.file} (${s.format}): ${s.threads} thread(s) ${s.threadIds.join(", ")}, ${n(s.runs)} runs, ${n(s.items)} items in ${n(s.elapsedMs)} ms`,
    `runs: ${s.completedRuns} completed, ${s.interruptedRuns} interrupted, ${s.faultFailedRuns} failed by faults, ${s.failedRuns} failed`,
    `switches ${s.switches}, /compact ${s.compactions}; handoffs: ${s.handoffs.created} created, ${s.handoffs.deferred} deferred at least once, ` +
    `${s.handoffs.delivered} delivered, ${s.handoffs.superseded} superseded, ${s.handoffs.stillOwed} still owed`,
    `deliveries: ${s.deliveries.injected} injected, ${s.deliveries.inline} inline; prompts unchanged ${s.promptsUnchanged}/${s.promptsSent}`,
    `providers: ${s.overflows.rejected} request(s) rejected as over the window, ${s.overflows.outputStopped} turn(s) stopped at the window, ` +
    `${s.overflows.usageAboveWindow} run(s) recorded above the window`,
    s.invariantViolations.length === 0
      ? "invariants: all hold"
      : `invariants: ${s.invariantViolations.length} violation(s)\n  ${s.invariantViolations.join("\n  ")}`
  ].join("\n")

export const threadLine = (t: Thread, runs: number, itemCount: number) =>
  `${t.id}  ${DateTime.formatIso(t.createdAt).slice(0, 19)}Z ${lpad(String(runs), 5)} runs ${lpad(String(itemCount), 6)} items  ${t.title.slice(0, 60)}`

export const threadShow = (
  t: Thread,
  providerThreads: ReadonlyArray<ProviderThread>,
  natives: ReadonlyArray<NativeThread>,
  runs: ReadonlyArray<Run>,
  itemCount: number
) => {
  const lines = [`thread ${t.id}: ${t.title}`, `  ${runs.length} runs, ${itemCount} items, created ${DateTime.formatIso(t.createdAt)}`]
  for (const p of providerThreads) {
    const active = p.id === t.activeProviderThreadId ? " (active)" : ""
    lines.push(`  provider ${p.providerInstance}${active}: window ${p.contextWindow ?? "unknown"}, synced through run ${p.syncedRunSeq}`)
    for (const nt of natives.filter((x) => x.providerThreadId === p.id)) {
      const used = nt.usage === null ? `estimated ${nt.estimatedTokens}` : `used ${nt.usage.usedTokens}`
      lines.push(`    native g${nt.generation} ${nt.nativeRef} ${nt.status}, ${used}`)
    }
  }
  const byStatus = new Map<string, number>()
  for (const r of runs) byStatus.set(r.status, (byStatus.get(r.status) ?? 0) + 1)
  lines.push(`  runs: ${[...byStatus].map(([s, c]) => `${c} ${s}`).join(", ") || "none"}`)
  return lines.join("\n")
}

export const handoffs = (
  list: ReadonlyArray<ContextHandoff & { readonly open: boolean }>,
  deliveries: ReadonlyArray<HandoffDelivery>,
  providerThreads: ReadonlyArray<ProviderThread>,
  natives: ReadonlyArray<NativeThread>
) => {
  if (list.length === 0) return "no handoffs"
  const name = new Map(providerThreads.map((p) => [p.id as string, p.providerInstance as string]))
  const nativeName = new Map(natives.map((nt) => [nt.id as string, `${name.get(nt.providerThreadId) ?? "?"} g${nt.generation}`]))
  const lines: Array<string> = []
  for (const h of list) {
    lines.push(`${h.id} ${h.kind} -> ${name.get(h.targetProviderThreadId) ?? h.targetProviderThreadId}: ${h.itemIds.length} items from ${h.sourceRunIds.length} run(s)${h.open ? " (open)" : ""}`)
    for (const d of deliveries.filter((x) => x.handoffId === h.id)) {
      lines.push(
        `  ${d.id} to ${nativeThreadId(nativeName, d.nativeThreadId)}: ${d.status}${d.status === "pending" && d.mode ? ` (${d.mode})` : ""}, delivered ${d.deliveredItemIds.length}, ` +
        `omitted ${d.omittedItemIds.length}, deferred ${d.deferCount}x${d.lastDeferReason ? ` (last: ${d.lastDeferReason})` : ""}`
      )
    }
  }
  return lines.join("\n")
}
