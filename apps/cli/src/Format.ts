/** Plain-text rendering of the CLI's output: one line per run, the replay summary, thread and handoff listings. */
import type { ContextHandoff, HandoffDelivery, NativeThread, ProviderThread, Run, Thread } from "@baton/contracts"
import type { ReplaySummary, RunLine } from "./Replay.js"

const n = (x: number) => x.toLocaleString("en-US")
const pad = (s: string, w: number) => s.padEnd(w)
const lpad = (s: string, w: number) => s.padStart(w)

/** `run  12 codex   g1 completed  used 31,204/42,000 budget  0 | deferred 143 items 20,511 tok` */
export const runLine = (l: RunLine) => {
  const head = `${l.thread > 1 ? `t${l.thread} ` : ""}run ${lpad(String(l.run), 4)} ${pad(l.provider, 8)} ${pad(l.generation === null ? "-" : `g${l.generation}`, 3)} ${pad(l.status, 11)}`
  const usage = l.usedTokens === null ? pad("", 24) : `used ${lpad(n(l.usedTokens), 7)}/${pad(n(l.window), 9)}`
  const budget = l.budget === null ? pad("budget -", 15) : `budget ${lpad(n(l.budget), 6)}`
  const parts: Array<string> = []
  if (l.deliveredItems > 0) parts.push(`${l.mode} ${n(l.deliveredItems)} items ${n(l.deliveredTokens)} tok`)
  if (l.deferredItems > 0) parts.push(`deferred ${n(l.deferredItems)} items ${n(l.deferredTokens)} tok`)
  if (l.omittedItems > 0) parts.push(`omitted ${n(l.omittedItems)}`)
  return `${head} ${usage} ${budget} | ${parts.length === 0 ? "nothing owed" : parts.join(", ")}`
}

/** A 30-cell progress bar for stderr on a terminal. */
export const progressBar = (done: number, total: number) => {
  const cells = 30
  const filled = total === 0 ? cells : Math.round((done / total) * cells)
  return `[${"#".repeat(filled)}${".".repeat(cells - filled)}] ${done}/${total}`
}

export const summary = (s: ReplaySummary) =>
  [
    `replayed ${s.file} (${s.format}): ${s.threads} thread(s), ${n(s.runs)} runs, ${n(s.items)} items in ${n(s.elapsedMs)} ms`,
    `runs: ${s.completedRuns} completed, ${s.interruptedRuns} interrupted, ${s.faultFailedRuns} failed by faults, ${s.failedRuns} failed`,
    `switches ${s.switches}, /compact ${s.compactions}; handoffs: ${s.handoffs.created} created, ${s.handoffs.deferred} deferred at least once, ` +
    `${s.handoffs.delivered} delivered, ${s.handoffs.superseded} superseded, ${s.handoffs.stillOwed} still owed`,
    `deliveries: ${s.deliveries.injected} injected, ${s.deliveries.inline} inline; prompts unchanged ${s.promptsUnchanged}/${s.promptsSent}`,
    s.invariantViolations.length === 0
      ? "invariants: all hold"
      : `invariants: ${s.invariantViolations.length} violation(s)\n  ${s.invariantViolations.join("\n  ")}`
  ].join("\n")

export const threadLine = (t: Thread, runs: number, items: number) =>
  `${t.id}  ${lpad(String(runs), 5)} runs ${lpad(String(items), 6)} items  ${t.title}`

export const threadShow = (
  t: Thread,
  providerThreads: ReadonlyArray<ProviderThread>,
  natives: ReadonlyArray<NativeThread>,
  runs: ReadonlyArray<Run>,
  items: number
) => {
  const lines = [`thread ${t.id}: ${t.title}`, `  ${runs.length} runs, ${items} items, created ${t.createdAt.toString()}`]
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
  providerThreads: ReadonlyArray<ProviderThread>
) => {
  if (list.length === 0) return "no handoffs"
  const name = new Map(providerThreads.map((p) => [p.id as string, p.providerInstance as string]))
  const lines: Array<string> = []
  for (const h of list) {
    lines.push(`${h.id} ${h.kind} -> ${name.get(h.targetProviderThreadId) ?? h.targetProviderThreadId}: ${h.itemIds.length} items from ${h.sourceRunIds.length} run(s)${h.open ? " (open)" : ""}`)
    for (const d of deliveries.filter((x) => x.handoffId === h.id)) {
      lines.push(
        `  ${d.id} to ${d.nativeThreadId}: ${d.status}${d.mode ? ` (${d.mode})` : ""}, delivered ${d.deliveredItemIds.length}, ` +
        `omitted ${d.omittedItemIds.length}, deferred ${d.deferCount}x${d.lastDeferReason ? ` (last: ${d.lastDeferReason})` : ""}`
      )
    }
  }
  return lines.join("\n")
}
