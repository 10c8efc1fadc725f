/**
 * Plain-text rendering of the CLI's output: one line per run, the replay summary, thread and handoff listings; and the
 * JSON documents `--json` prints in place of a result (`errorDocument`, `interruptedDocument`).
 */
import {
  type CompactReport,
  type CostTotals,
  type ContextHandoff,
  type HandoffDelivery,
  type NativeThread,
  type OffloadReport,
  type OffloadUndoReport,
  type ToolResultOffloadControlView,
  type ToolResultOffloadPreview,
  type ToolResultOffloadUndo,
  type ProviderThread,
  type Run,
  type RunStatus,
  type RunView,
  type SwitchResult,
  type Thread,
  type ThreadEvent,
  type ThreadSnapshot,
  type RunCost,
  snapshotRecentRuns,
  Thread as ThreadSchema,
  ThreadSnapshot as ThreadSnapshotSchema,
  ThreadTotals
} from "@baton/contracts"
import { DateTime, Schema } from "effect"
import type { StopSignal } from "./CliRuntime.js"
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
    return `${head} | ${
      l.status === "interrupted"
        ? "interrupted before the provider started: its prompt is owed to the next turn"
        : `did not start${l.failureReason === null ? "" : `: ${l.failureReason}`}`
    }`
  }
  const start = `start ${lpad(l.usedAtStart === null ? "-" : n(l.usedAtStart), 9)}/${pad(n(l.window), 9)} budget ${lpad(n(l.budget), 6)}` +
    (l.ratio === 1 ? "" : ` x${l.ratio.toFixed(3)}`)
  const parts: Array<string> = []
  if (l.deliveredItems > 0) parts.push(`${l.mode} ${items(l.deliveredItems)} ${n(l.deliveredTokens)} tok`)
  if (l.deferredItems > 0) parts.push(`deferred ${items(l.deferredItems)} ${n(l.deferredTokens)} tok`)
  if (l.omittedItems > l.stubbedItems) parts.push(`omitted ${items(l.omittedItems - l.stubbedItems)}`)
  if (l.stubbedItems > 0) parts.push(`stubbed ${items(l.stubbedItems)}`)
  if (l.owedRuns > 0 && l.deliveredItems > 0) parts.push(`runs ${n(l.representedRuns)}/${n(l.owedRuns)} represented`)
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
    `runs: ${s.completedRuns} completed, ${s.interruptedRuns} interrupted, ${s.overflowFailedRuns} failed as larger than the window, ` +
    `${s.faultFailedRuns} failed by faults, ${s.failedRuns} failed`,
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
  `${t.id}  ${DateTime.formatIso(t.createdAt).slice(0, 19)}Z ${lpad(String(runs), 5)} runs ${lpad(String(itemCount), 6)} items  ${Array.from(titleLine(t.title)).slice(0, 60).join("")}`

/**
 * A title as one line for the terminal: each run of control characters (C0, DEL, C1: a newline, a tab, the ESC of a
 * terminal escape) becomes one space. A title is any text a client set (`POST /threads`, a gateway conversation's
 * first prompt); printed as it is, a newline split `threads`' one line per thread and an escape reached the terminal.
 * The same for any outside text in a one-line event (a provider's failure reason: a proxy's HTML page).
 */
// eslint-disable-next-line no-control-regex
const titleLine = (title: string) => title.replace(/[\u0000-\u001f\u007f-\u009f]+/g, " ")

/** `text` cut to `max` code points (the last one `…` when cut), never half a surrogate pair. */
const cut = (text: string, max: number) => {
  const points = Array.from(text)
  return points.length > max ? `${points.slice(0, max - 1).join("")}…` : text
}

/** Dollars to the cent's ten-thousandth (`$0.012825`), or `unpriced`. */
const usd = (x: number | null) => x === null ? "unpriced" : `$${x.toFixed(6)}`

const billed = (c: { readonly inputTokens: number; readonly cacheWriteTokens: number; readonly cacheReadTokens: number; readonly outputTokens: number }) =>
  `input ${n(c.inputTokens)}, cache write ${n(c.cacheWriteTokens)}, cache read ${n(c.cacheReadTokens)}, output ${n(c.outputTokens)} tok`

/**
 * What a thread's runs cost: the totals, then one line per recent run that recorded a cost (`recent`, oldest first;
 * `seqOf` gives each run's number). Nothing when no run recorded a cost (scripted providers report no usage):
 *
 * ```
 *   cost: 2 runs, input 1,300, cache write 300, cache read 11,000, output 300 tok, $0.012825
 *     run 1 claude: input 1,200, cache write 300, cache read 5,000, output 250 tok, $0.009975
 * ```
 */
export const costLines = (totals: CostTotals, recent: ReadonlyArray<RunCost>, seqOf: ReadonlyMap<string, number>): ReadonlyArray<string> =>
  totals.runs === 0 ? [] : [
    `  cost: ${totals.runs} run${totals.runs === 1 ? "" : "s"}, ${billed(totals)}, ${usd(totals.costUsd)}`,
    ...recent.map((c) => `    run ${seqOf.get(c.runId) ?? "?"} ${c.providerInstance}: ${billed(c)}, ${usd(c.costUsd)}`)
  ]

/**
 * The in-process `thread show`: like `threadSnapshot`, from the store's rows. `costs` are the thread's recorded run
 * costs (all of them; the lines list those of its last `snapshotRecentRuns` runs, as the server's snapshot does) and
 * `totals` their sums (`RunCosts.total`).
 */
export const threadShow = (
  t: Thread,
  providerThreads: ReadonlyArray<ProviderThread>,
  natives: ReadonlyArray<NativeThread>,
  runs: ReadonlyArray<Run>,
  itemCount: number,
  costs: { readonly all: ReadonlyArray<RunCost>; readonly totals: CostTotals } = { all: [], totals: { runs: 0, inputTokens: 0, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 0, costUsd: null } }
) => {
  const byStatus = new Map<string, number>()
  for (const r of runs) byStatus.set(r.status, (byStatus.get(r.status) ?? 0) + 1)
  const recent = runs.slice(-snapshotRecentRuns)
  const costOf = new Map(costs.all.map((c) => [c.runId as string, c]))
  return threadShowLines(t, providerThreads, natives, runs.length, byStatus, itemCount,
    costLines(costs.totals, recent.flatMap((r) => costOf.get(r.id) ?? []), new Map(recent.map((r) => [r.id as string, r.seq]))))
}

const threadShowLines = (
  t: Thread,
  providerThreads: ReadonlyArray<ProviderThread>,
  natives: ReadonlyArray<NativeThread>,
  runCount: number,
  byStatus: ReadonlyMap<string, number>,
  itemCount: number,
  cost: ReadonlyArray<string>
) => {
  const lines = [`thread ${t.id}: ${titleLine(t.title)}`, `  ${runCount} runs, ${itemCount} items, created ${DateTime.formatIso(t.createdAt)}`]
  for (const p of providerThreads) {
    const active = p.id === t.activeProviderThreadId ? " (active)" : ""
    lines.push(`  provider ${p.providerInstance}${active}: window ${p.contextWindow ?? "unknown"}, synced through run ${p.syncedRunSeq}`)
    for (const nt of natives.filter((x) => x.providerThreadId === p.id)) {
      const used = nt.usage === null ? `estimated ${nt.estimatedTokens}` : `used ${nt.usage.usedTokens}`
      lines.push(`    native g${nt.generation} ${nt.nativeRef} ${nt.status}, ${used}`)
    }
  }
  lines.push(`  runs: ${[...byStatus].map(([s, c]) => `${c} ${s}`).join(", ") || "none"}`)
  lines.push(...cost)
  return lines.join("\n")
}

/** Run statuses in the order a run passes through them (the order `threadSnapshot` lists its counts in). */
const statusOrder: ReadonlyArray<RunStatus> = ["queued", "starting", "running", "waiting", "completed", "interrupted", "failed", "cancelled"]

/**
 * A server's thread snapshot (`GET /threads/{id}`) in `threadShow`'s format. The per-status counts are the
 * snapshot's totals, listed in `statusOrder` (the in-process command lists them in order of first appearance).
 */
export const threadSnapshot = (s: ThreadSnapshot) =>
  threadShowLines(
    s.thread,
    s.providerThreads,
    s.providerThreads.flatMap((p) => p.nativeThreads),
    s.totals.runs,
    new Map(statusOrder.filter((status) => (s.totals.runsByStatus[status] ?? 0) > 0).map((status) => [status, s.totals.runsByStatus[status]])),
    s.totals.items,
    costLines(s.costs.totals, s.costs.recentRuns, new Map(s.recentRuns.map((r) => [r.id as string, r.seq])))
  )

/** A switch: `switched thr_… to claude (provider thread pth_…; handoff hof_… owes it history | nothing owed)`. */
export const switched = (threadId: string, providerInstance: string, r: SwitchResult) =>
  `switched ${threadId} to ${providerInstance} (provider thread ${r.providerThreadId}; ${r.handoffId === null ? "nothing owed" : `handoff ${r.handoffId} owes it history`})`

const handoffCount = (k: number) => `${n(k)} handoff${k === 1 ? "" : "s"}`

/**
 * `/compact`'s report: usage before and after (tokens), what it delivered, omitted and left deferred (handoffs whose
 * delivery is still deferred). A report that did not compact gives its reason, and what it delivered when it drained
 * deferred history anyway (a model-API lane).
 */
export const compactReport = (r: CompactReport) => {
  const delivered = `delivered ${items(r.deliveredItems)} ${n(r.deliveredTokens)} tok, omitted ${items(r.omittedItems)}, still deferred ${handoffCount(r.stillDeferred)}`
  return r.compacted
    ? `compacted: used ${r.usedBefore === null ? "unknown" : n(r.usedBefore)} -> ${r.usedAfter === null ? "unknown" : n(r.usedAfter)}; ${delivered}`
    : r.deliveredItems > 0 || r.omittedItems > 0
    ? `not compacted: ${r.reason ?? "nothing to do"}; ${delivered}`
    // Nothing drained: the counts of nothing would only blur the reason (which says what is owed and when it goes out).
    : `not compacted: ${r.reason ?? "nothing to do"}${r.stillDeferred > 0 ? `; still deferred ${handoffCount(r.stillDeferred)}` : ""}`
}

/**
 * `/offload`'s report: the server's message for the user (e.g. "Offloaded 6 older messages, freeing up context window
 * space. Conversation: ~1.0K -> ~250 tokens (75% decrease), 4 messages kept."), then what the summary covers (or, for
 * a preview, would cover) and what stays verbatim (tokens are rendered tokens), the operation id (not for a preview,
 * which stores none) and the summariser's cost. The reason of an outcome that offloaded nothing is on the second line
 * only when the message does not already say it: it was printed twice (`Nothing was offloaded: X. …` then `nothing:
 * nothing to offload: X`), and a preview that would offload said `preview: nothing to do` under it (b48srv).
 */
export const offloadReport = (r: OffloadReport) => {
  const cost = r.cost === null
    ? null
    : `summariser ${r.cost.calls} call(s) ${n(r.cost.inputTokens + r.cost.cacheWriteTokens + r.cost.cacheReadTokens)} in / ` +
      `${n(r.cost.outputTokens)} out tok${r.cost.costUsd === null ? "" : ` $${r.cost.costUsd}`} (${r.cost.state})`
  const covers = (verb: string, summary: string) =>
    `${verb} through item ${r.cutSeq ?? "-"}: ${items(r.coveredItems)} ${n(r.coveredTokens)} tok -> ${summary} ${n(r.summaryTokens)} tok; ` +
    `kept ${items(r.keptItems)} ${n(r.keptTokens)} tok verbatim (asked ${n(r.keepTokens)})`
  const reason = r.reason ?? "nothing to do"
  const said = r.message.includes(reason.replace(/^nothing (to offload|worth offloading): /, ""))
  const detail = r.offloaded
    ? covers("offloaded", `summary ${r.summaryItemId ?? "-"}`)
    : r.outcome === "preview" && r.coveredItems > 0
    ? covers("would offload", "a summary of about")
    : r.outcome === "running"
    ? "running: the summary is being written or committed"
    : said
    ? null
    : `${r.outcome}: ${reason}`
  // A preview is not an operation (nothing is stored under its id: `--get` would answer "no /offload operation").
  const operation = r.outcome === "preview" ? null : `operation ${r.operationId}`
  const second = [detail, operation, cost].filter((part) => part !== null).join("; ")
  return second === "" ? r.message : `${r.message}\n${second}`
}

/**
 * An `/offload` undo (`baton offload ID --undo-summary`): the server's message, then the details, e.g.
 * `undid offload off_… (summary itm_…): 4 items restored; 1,422 -> 1,876 tok`, or `nothing undone: <why>`.
 */
export const offloadUndoReport = (u: OffloadUndoReport) =>
  `${u.message}\n` + (u.undone
    ? `undid offload ${u.offloadId ?? "-"} (summary ${u.summaryItemId ?? "-"}): ${items(u.restoredItems)} restored; ${n(u.tokensBefore)} -> ${n(u.tokensAfter)} tok`
    : `nothing undone: ${u.reason ?? "no offload to undo"}`)

/**
 * The tool-result offload dry run, e.g.:
 * `tool-result offload (dry run) on claude, native claude-…: mild — would stub 4 units (tool:toolu_1 read_file, …);
 * request 26,389 -> 8,938 tok; cache rewrite 2,310 tok ($0.00693), pays off after 1.3 requests; 0 entries already stubs`.
 */
export const toolResultOffloadPreview = (p: ToolResultOffloadPreview) => {
  const head = `tool-result offload (dry run) on ${p.providerInstance}, native ${p.nativeRef}: `
  if (!p.enabled) return head + `off (${p.reason})`
  const already = `${p.stubbedEntries} ${p.stubbedEntries === 1 ? "entry" : "entries"} already stubs`
  if (p.units.length === 0) return head + `${p.tier}, nothing to stub: ${p.reason}; request ${n(p.tokensBefore)} tok; ${already}`
  const calls = p.units.flatMap((u) => u.refs.map((ref, i) => `${ref} ${u.toolNames[i] ?? ""}`.trim()))
  const shown = calls.length <= 6 ? calls.join(", ") : `${calls.slice(0, 5).join(", ")}, … ${calls.length - 5} more`
  const payoff = p.breakEvenRequests === null ? "never pays off" : `pays off after ${p.breakEvenRequests.toFixed(1)} requests`
  return head + `${p.tier}: would stub ${p.units.length} ${p.units.length === 1 ? "unit" : "units"} (${shown}); ` +
    `request ${n(p.tokensBefore)} -> ${n(p.tokensAfter)} tok; cache rewrite ${n(p.rewriteCostTokens)} tok ($${p.rewriteCostUsd}), ${payoff}; ${already}`
}

/**
 * A thread's tool-result offload control, e.g.
 * `tool-result offload of thr_1 on claude: on; keepNewestUnits 1 (thread), aggressiveRatio 0.85, aggressiveTargetRatio
 * 0.6, emergencyRatio 0.95, minExpectedRequests 10; pinned itm_7 (call toolu_5)`; without an active model-API
 * instance, only the thread's own fields.
 */
export const toolResultOffloadControl = (v: ToolResultOffloadControlView) => {
  const own = v.control as Record<string, unknown>
  const pins = v.control.pinnedItemIds ?? []
  const pinned = pins.length === 0 ? "nothing pinned" : `pinned ${pins.join(", ")}` +
    (v.effective === null || v.effective.pinnedToolCallIds.length === 0 ? "" : ` (calls ${v.effective.pinnedToolCallIds.join(", ")})`)
  if (v.effective === null) {
    const fields = Object.entries(own).filter(([k]) => k !== "pinnedItemIds").map(([k, value]) => `${k} ${String(value)}`)
    return `tool-result offload of ${v.threadId}: no active model-API instance; thread sets ${fields.length === 0 ? "nothing" : fields.join(", ")}; ${pinned}`
  }
  const e = v.effective
  const mark = (k: string) => own[k] === undefined ? "" : " (thread)"
  const settings = Object.entries(e.settings).map(([k, value]) => `${k} ${value}${mark(k)}`).join(", ")
  return `tool-result offload of ${v.threadId} on ${e.providerInstance}: ${e.enabled ? "on" : "off"}${mark("enabled")}; ${settings}; ${pinned}`
}

/** An undone flush: `undid flush 41 on claude (native …): 4 entries carry their originals again` or why not. */
export const toolResultOffloadUndo = (u: ToolResultOffloadUndo) =>
  u.undone
    ? `undid flush ${u.flushSeq} on ${u.providerInstance} (native ${u.nativeRef}): ${u.entrySeqs.length} ${u.entrySeqs.length === 1 ? "entry carries its original" : "entries carry their originals"} again`
    : `nothing undone: ${u.reason}`

/** What an HTTP status of a retried request means, in the words the providers use. */
const retryStatus = (status: number | null) =>
  status === null
    ? "no answer"
    : status === 429
    ? `HTTP ${status} rate limited`
    : status === 529
    ? `HTTP ${status} overloaded`
    : status >= 500
    ? `HTTP ${status} server error`
    : `HTTP ${status}`

/**
 * A `run.retry_scheduled` event for people: `retrying in 2.0 s (attempt 2, HTTP 529 overloaded: <reason>)`. The
 * delay in seconds with one decimal; `attempt` is the request's attempt about to be sent (the event's retry number
 * + 1: the first retry is the second attempt); the reason is the provider's text, cut at 100 characters.
 */
export const retryLine = (p: { readonly attempt: number; readonly delayMs: number; readonly httpStatus: number | null; readonly reason: string }) => {
  const reason = cut(titleLine(p.reason), 100)
  return `retrying in ${(p.delayMs / 1000).toFixed(1)} s (attempt ${p.attempt + 1}, ${retryStatus(p.httpStatus)}: ${reason})`
}

/**
 * One event of a stream: `  seq type  detail` (with `withThread`, the thread id first: the stream of all threads).
 * Run events name the run and what happened to it; other events show their payload as compact JSON (at most 120
 * characters).
 */
export const eventLine = (e: ThreadEvent, withThread: boolean) => {
  const head = `${withThread ? `${e.threadId} ` : ""}${lpad(String(e.seq), 5)} ${pad(e.type, 22)}`
  switch (e.type) {
    case "run.queued":
      return `${head} run ${e.payload.seq} ${e.payload.runId}`
    case "run.started":
      return `${head} ${e.payload.runId} attempt ${e.payload.attempt} on ${e.payload.nativeThreadId}`
    case "run.completed":
      return `${head} ${e.payload.runId} ${items(e.payload.itemCount)}`
    case "run.failed":
    case "run.interrupted":
      return `${head} ${e.payload.runId} ${e.payload.stopPoint}${e.payload.code === undefined ? "" : ` ${e.payload.code}`}: ${titleLine(e.payload.reason)}`
    case "run.prompt_deferred":
      return `${head} ${e.payload.runId} prompt owed (queued behind ${e.payload.behindRunId}): recorded when every run ahead has ended`
    case "run.waiting":
      return `${head} ${e.payload.runId} round ${e.payload.round} waits for ${e.payload.calls.map((c) => `${c.name} ${c.toolCallId}`).join(", ")}`
    case "run.tool_results_recorded":
      return `${head} ${e.payload.runId} round ${e.payload.round} ${e.payload.source}: ${e.payload.toolCallIds.join(", ")}`
    case "items.appended":
      return `${head} items ${e.payload.fromSeq}..${e.payload.toSeq}${e.payload.runId === null ? "" : ` of ${e.payload.runId}`}`
    case "run.retry_scheduled":
      return `${head} ${e.payload.runId} ${retryLine(e.payload)}`
    case "thread.merged": {
      // The generic JSON line is cut at 120 characters, before `handoffId` and `behindRunId` (ids are UUIDs): a
      // merge behind an unfinished run read as a merge without a handoff (review r37).
      const p = e.payload
      if (!("forkThreadId" in p)) return `${head} merged into ${p.parentThreadId} through run ${p.throughRunSeq}`
      const merged = `${head} ${p.runId} from ${p.forkThreadId} (${p.itemCount} item(s) of runs ${p.fromRunSeq + 1}..${p.throughRunSeq})`
      return p.behindRunId === undefined
        ? `${merged}: handoff ${p.handoffId ?? "none"}`
        : `${merged} owed behind ${p.behindRunId}: its copies and handoff recorded when every run ahead has ended`
    }
    default: {
      // JSON escapes C0 controls but not DEL or C1 (U+009B, a CSI).
      return `${head} ${cut(titleLine(JSON.stringify(e.payload)), 120)}`
    }
  }
}

/**
 * A run as it ended: `run 3 completed` (with the failure code and reason when it did not complete), then the
 * assistant's messages of the run.
 */
export const runReply = (v: RunView) => {
  const r = v.run
  const head = `run ${r.seq} ${r.status}${r.failureCode === null ? "" : ` (${r.failureCode})`}${r.failureReason === null ? "" : `: ${titleLine(r.failureReason)}`}`
  return [head, ...v.items.filter((i) => i.kind === "assistant_message").map((i) => i.text)].join("\n")
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

const ThreadsDocument = Schema.Struct({
  threads: Schema.Array(Schema.Struct({ ...ThreadSchema.fields, totals: ThreadTotals }))
})

/**
 * `baton threads --json`: `{"threads": [...]}`, oldest first, each thread as the API serves it (`GET /threads`) with
 * its snapshot's `totals` (runs, runs by status, items, item tokens, handoffs) beside its fields.
 */
export const threadsDocument = (threads: ReadonlyArray<{ readonly thread: Thread; readonly totals: ThreadSnapshot["totals"] }>): string =>
  JSON.stringify(Schema.encodeSync(ThreadsDocument)({ threads: threads.map(({ thread, totals }) => ({ ...thread, totals })) }))

/** `baton thread show --json`: the thread's snapshot as `GET /threads/{id}` serves it. */
export const snapshotDocument = (snapshot: ThreadSnapshot): string => JSON.stringify(Schema.encodeSync(ThreadSnapshotSchema)(snapshot))

/** Where Claude Code and pi keep their sessions, for a user without the sample transcripts. */
const ownSessions = "pnpm baton replay ~/.claude/projects/<project-dir>/<session-id>.jsonl (Claude Code) or " +
  "pnpm baton replay ~/.pi/agent/sessions/<project-dir>/<timestamp>_<session-id>.jsonl (pi)"

/**
 * `baton demo`'s refusal when its transcript `file` is not in the samples directory `samples`: where it looked (the
 * directory `--samples DIR` gave, or the default beside the repository: `byDefault`), that `--samples DIR` says where
 * they are (the default's message did not name the flag: b48srv), and how to replay one's own sessions instead.
 * Found by a newcomer's walk (b46ux): `--samples DIR` was told the samples "are not beside this repository".
 */
export const samplesMissing = (samples: string, file: string, byDefault: boolean): string =>
  byDefault
    ? `the sample transcripts are not beside this repository (no ${file}); pass --samples DIR where they are, ` +
      `or replay one of your own agent sessions instead: ${ownSessions}`
    : `the sample transcripts are not in ${samples} (no ${file}); replay one of your own agent sessions instead: ${ownSessions}`

/**
 * The JSON document a command given `--json` prints on stdout when it exits 2 (its `baton: <message>` line still goes
 * to stderr), so `--json` prints exactly one JSON document on stdout whatever the outcome (issue 15):
 * `{"error":{"code","message"}}`, `code` `bad_input` (a missing file, a malformed transcript, an unknown provider or
 * thread, a server's refusal) or `usage` (a command line that does not parse), `message` the stderr line without
 * `baton: `.
 */
export const errorDocument = (code: "bad_input" | "usage", message: string): string => JSON.stringify({ error: { code, message } })

/**
 * What a command stopped by a signal had done, beside `signal` and `message` in its `interruptedDocument`: a replay's
 * runs recorded of `totalRuns` and the threads it created, the run `send`/`tool-results` follow (`runId`, `null`
 * before the server said which), the figures of the seeds `pnpm sim` finished; nothing more for a single request
 * (`compact`, `offload`, `offload-control`) or for `events`, whose lines are what it did.
 */
export type InterruptedProgress =
  | { readonly runs: number; readonly totalRuns: number | null; readonly threadIds: ReadonlyArray<string> }
  | { readonly runId: string | null }
  | {
    readonly seeds: number
    readonly operations: number
    readonly crashRestarts: number
    readonly violations: number
    readonly failingSeeds: ReadonlyArray<number>
  }
  | { readonly events: number }
  | Record<string, never>

/**
 * The one JSON document (or, for `send` and `events`, whose output is one JSON line per event, the last line) a
 * command given `--json` prints on stdout when SIGINT or SIGTERM stopped it (exit 130 or 143), in place of its result,
 * the same shape for every command: `{"interrupted":{"signal","message",...progress}}`, `signal` `SIGINT` or
 * `SIGTERM`, `message` the line the command printed on stderr without `baton: ` (what became of the work and how to
 * see it), then the command's `InterruptedProgress` fields. A script tells it from a result by its one key,
 * `interrupted`. Replay: `runs` the run lines recorded of `totalRuns` (the run in flight, ended `interrupted`, among
 * them), `threadIds` the threads created so far (for `baton thread show`), `totalRuns` `null` (and `runs` 0) when it
 * stopped before the transcript was read.
 */
export const interruptedDocument = (signal: StopSignal, message: string, progress: InterruptedProgress = {}): string =>
  JSON.stringify({ interrupted: { signal, message, ...progress } })
