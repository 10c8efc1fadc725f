/**
 * What the thread view derives from the thread's items, as pure functions, so the page and the tests agree on what a
 * row is. The fold of the event log into occupancy points, marks and delivery timelines is `EventFold`, shared with
 * the server (`@baton/contracts/timeline`: `GET /threads/{id}/timeline` folds the stored log; the page applies the
 * live tail).
 */
import type { ItemJson, ItemTextJson, RunJson, SnapshotJson } from "./types.js"

export { EventFold, gatewayChartId, type DeliveryStep, type OccupancyMark, type OccupancyPoint } from "@baton/contracts/timeline"

/** A chart's title: its native thread's name (`names`), or for a gateway conversation's chart its instance's requests. */
export const chartTitle = (chartId: string, names: ReadonlyMap<string, string>): string =>
  names.get(chartId) ?? (chartId.startsWith("gateway:") ? `${chartId.slice("gateway:".length)} requests (gateway)` : chartId)

/** The statuses of a run that has not ended (`RunStatus` less the terminal ones). */
const unfinished: ReadonlySet<string> = new Set(["queued", "starting", "running", "waiting"])

/**
 * The thread's run in progress as the page holds its runs: the unfinished run with the lowest `seq` (the run an
 * interrupt without `runId` stops), or `null` when none is, or when `runsByStatus` (the snapshot's totals) counts
 * more unfinished runs than the page holds (the one in progress may be among those it does not hold).
 */
export const runInProgress = (
  runs: Iterable<RunJson>,
  runsByStatus?: Readonly<Partial<Record<RunJson["status"], number>>>
): RunJson | null => {
  let first: RunJson | null = null
  let held = 0
  for (const run of runs) {
    if (!unfinished.has(run.status)) continue
    held++
    if (first === null || run.seq < first.seq) first = run
  }
  // The page holds the newest runs (the snapshot's 20, then what it paged and what events brought): when the thread
  // has more unfinished runs than it holds (more than 20 queued behind one waiting for a client tool), the lowest it
  // holds may be a queued run, not the one in progress: name none (the server interrupts its run in progress).
  if (runsByStatus !== undefined) {
    let total = 0
    for (const status of unfinished) total += runsByStatus[status as RunJson["status"]] ?? 0
    if (held < total) return null
  }
  return first
}

/** A row of the conversation list. */
export type Row =
  | { readonly kind: "run"; readonly runId: string | null; readonly key: string }
  | { readonly kind: "item"; readonly item: ItemJson; readonly key: string }
  | { readonly kind: "tool"; readonly call: ItemJson; readonly result: ItemJson | null; readonly key: string }

/**
 * The conversation as rows: a header row where the run changes, then its items; a tool call and its result (same
 * `toolCallId`) are one `tool` row at the call's place. Items in seq order.
 */
export const toRows = (items: ReadonlyArray<ItemJson>): Array<Row> => {
  const results = new Map<string, ItemJson>()
  for (const item of items) if (item.kind === "tool_result" && item.toolCallId !== null) results.set(item.toolCallId, item)
  const paired = new Set<string>()
  for (const item of items) if (item.kind === "tool_call" && item.toolCallId !== null && results.has(item.toolCallId)) paired.add(item.toolCallId)
  const rows: Array<Row> = []
  let run: string | null | undefined = undefined
  for (const item of items) {
    if (item.runId !== run) {
      run = item.runId
      rows.push({ kind: "run", runId: run, key: `run:${run ?? "none"}:${item.seq}` })
    }
    if (item.kind === "tool_result" && item.toolCallId !== null && paired.has(item.toolCallId)) continue
    if (item.kind === "tool_call" && item.toolCallId !== null) {
      rows.push({ kind: "tool", call: item, result: results.get(item.toolCallId) ?? null, key: item.id })
    } else {
      rows.push({ kind: "item", item, key: item.id })
    }
  }
  return rows
}

// One formatter for every number on the page: `Number.prototype.toLocaleString` builds its formatter again on each
// call, which showed in the profile of a 10,000-item thread's live updates (a few hundred numbers per render).
const numbers = new Intl.NumberFormat("en-US")

/** `n` tokens as `12,345` (or `–` when unknown). */
export const fmt = (n: number | null | undefined) => n === null || n === undefined ? "–" : numbers.format(n)

/** US dollars with four decimals, or `–`. */
export const usd = (n: number | null | undefined) => n === null || n === undefined ? "–" : `$${n.toFixed(4)}`

/** The drawer's window: characters of an item's text per page. */
export const drawerWindow = 4_096

/**
 * The first window of an item the page holds whole, as `GET /items/{id}?offset=0&limit=4096` answers it (the text's
 * first `drawerWindow` characters, `totalChars`, `nextOffset` where the next window starts or `null`).
 */
export const firstWindow = (item: ItemJson): ItemTextJson => ({
  item: { ...item, text: item.text.slice(0, drawerWindow) },
  offset: 0,
  totalChars: item.text.length,
  nextOffset: item.text.length > drawerWindow ? drawerWindow : null
})

/**
 * A thread's context fill as the thread list shows it: the active native thread's (its reported usage, else Baton's
 * estimate, against its window). A thread with no native thread (a gateway conversation: the agent holds its context,
 * each request is sent whole) shows its newest answered request's prompt (`gatewayRequest`: what its last upstream
 * request carried, so after hidden `thread_read` rounds the last hop's, not the run's cost, which is every hop's sum),
 * else the prompt of its newest run that recorded a cost (a server without `gatewayRequest`), or `–` before any.
 */
export const contextFill = (s: SnapshotJson): string => {
  const pt = s.providerThreads.find((p) => p.active)
  const nt = pt?.nativeThreads.find((n) => n.id === pt.activeNativeThreadId)
  if (nt === undefined) {
    const request = s.gatewayRequest
    if (request !== undefined && request !== null) return `${fmt(request.promptTokens)} tokens (last request)`
    const last = s.costs.recentRuns.at(-1)
    return last === undefined ? "–" : `${fmt(last.inputTokens + last.cacheWriteTokens + last.cacheReadTokens)} tokens (last request)`
  }
  const used = nt.usage?.usedTokens ?? nt.estimatedTokens
  return nt.window === null ? `${fmt(used)} tokens` : `${Math.round((100 * used) / nt.window)}% (${fmt(used)} / ${fmt(nt.window)})`
}
