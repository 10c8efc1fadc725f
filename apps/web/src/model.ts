/**
 * What the thread view derives from the thread's event log and items, as pure functions and one incremental fold
 * (`EventFold`), so the page and the tests agree on what a point or a row is.
 *
 * - Occupancy: one point per run that reported usage: the last `usage.reported` of the native thread the run was
 *   started on (`run.started`) before the next run started there, i.e. the native thread's usage after the run. The
 *   window and auto-compact threshold are the report's own (`maxTokens`, `autoCompactThreshold`); an untrusted
 *   report is plotted at the estimate Baton used instead (`estimateUsed`) and flagged.
 * - Marks on the occupancy chart: `thread.compacted`, `context.offloaded` (tool results stubbed), `thread.offloaded`
 *   (summarised) and `native_thread.replaced`, each at the run seq it followed.
 * - Budget at each turn start: the `budget` of the run's `delivery.pending` (provider tokens), when history was owed.
 * - Delivery timelines: every event of a delivery (created, deferred with its count, pending, injected, inlined,
 *   superseded) with its time and reason.
 */
import type { EventJson, ItemJson } from "./types.js"

/** One occupancy point: the native thread's usage after run `runSeq`, in tokens. */
export interface OccupancyPoint {
  readonly runId: string
  readonly runSeq: number
  readonly nativeThreadId: string
  readonly usedTokens: number
  readonly maxTokens: number | null
  readonly autoCompactThreshold: number | null
  readonly trusted: boolean
  readonly budget: number | null
}

/** A mark on the occupancy chart: what happened to the native thread after run `runSeq`. */
export interface OccupancyMark {
  readonly nativeThreadId: string
  readonly runSeq: number
  readonly kind: "compacted" | "tool results offloaded" | "summarised" | "replaced"
  readonly detail: string
}

/** One step of a delivery's life, from its event. */
export interface DeliveryStep {
  readonly seq: number
  readonly type: string
  readonly at: string
  readonly detail: string
}

const num = (x: unknown): number | null => typeof x === "number" && Number.isFinite(x) ? x : null

/** The fold of a thread's events into what the charts and timelines show. Apply each event once, in seq order. */
export class EventFold {
  readonly runSeq = new Map<string, number>()
  /** The run last started on each native thread. */
  private readonly startedOn = new Map<string, string>()
  private readonly budgets = new Map<string, number>()
  readonly points = new Map<string, OccupancyPoint>()
  readonly marks: Array<OccupancyMark> = []
  readonly deliverySteps = new Map<string, Array<DeliveryStep>>()
  /** Tool call ids whose results a tool-result offload replaced with stubs (`tool:<id>` refs). */
  readonly stubbed = new Set<string>()
  private lastRunSeq = 0
  lastSeq = 0

  apply(event: EventJson) {
    this.lastSeq = event.seq
    switch (event.type) {
      case "run.queued":
        this.runSeq.set(event.payload.runId, event.payload.seq)
        this.lastRunSeq = Math.max(this.lastRunSeq, event.payload.seq)
        return
      case "run.started":
        this.startedOn.set(event.payload.nativeThreadId, event.payload.runId)
        return
      case "usage.reported": {
        const runId = this.startedOn.get(event.payload.nativeThreadId)
        if (runId === undefined) return
        const usage = event.payload.usage
        const used = event.payload.trusted ? num(usage.usedTokens) : num(event.payload.estimateUsed) ?? num(usage.usedTokens)
        if (used === null) return
        this.points.set(runId, {
          runId,
          runSeq: this.runSeq.get(runId) ?? 0,
          nativeThreadId: event.payload.nativeThreadId,
          usedTokens: used,
          maxTokens: num(usage.maxTokens),
          autoCompactThreshold: num(usage.autoCompactThreshold),
          trusted: event.payload.trusted,
          budget: this.budgets.get(runId) ?? null
        })
        return
      }
      case "delivery.pending":
        if (event.payload.runId !== null) this.budgets.set(event.payload.runId, event.payload.budget)
        this.step(event, event.payload.deliveryId, `${event.payload.mode}: ${event.payload.itemIds.length} items, ${event.payload.omittedItemIds.length} omitted, budget ${event.payload.budget}`)
        return
      case "delivery.created":
        this.step(event, event.payload.deliveryId, `owed to ${event.payload.nativeThreadId}`)
        return
      case "delivery.deferred":
        this.step(event, event.payload.deliveryId, `deferred ×${event.payload.deferCount}: ${event.payload.reason}`)
        return
      case "delivery.injected":
      case "delivery.inlined":
        this.step(event, event.payload.deliveryId, `${event.payload.deliveredItemIds.length} items delivered (${event.payload.tokens} tokens), ${event.payload.omittedItemIds.length} omitted`)
        return
      case "delivery.superseded":
        this.step(event, event.payload.deliveryId, event.payload.reason)
        return
      case "thread.compacted":
        this.marks.push({
          nativeThreadId: event.payload.nativeThreadId,
          runSeq: this.lastRunSeq,
          kind: "compacted",
          detail: `${event.payload.usedBefore ?? "?"} → ${event.payload.usedAfter ?? "?"} tokens, ${event.payload.delivered} delivered`
        })
        return
      case "context.offloaded":
        for (const ref of event.payload.refs) if (ref.startsWith("tool:")) this.stubbed.add(ref.slice(5))
        this.marks.push({
          nativeThreadId: event.payload.nativeThreadId,
          runSeq: this.runSeq.get(event.payload.runId) ?? this.lastRunSeq,
          kind: "tool results offloaded",
          detail: `${event.payload.units} units (${event.payload.tier}): ${event.payload.tokensBefore} → ${event.payload.tokensAfter} tokens`
        })
        return
      case "thread.offloaded":
        this.marks.push({ nativeThreadId: "", runSeq: this.lastRunSeq, kind: "summarised", detail: `${event.payload.coveredItems} items summarised up to seq ${event.payload.cutSeq}` })
        return
      case "native_thread.replaced":
        this.marks.push({ nativeThreadId: event.payload.nativeThreadId, runSeq: this.lastRunSeq, kind: "replaced", detail: event.payload.reason })
        return
      default:
        return
    }
  }

  private step(event: EventJson, deliveryId: string, detail: string) {
    const steps = this.deliverySteps.get(deliveryId) ?? []
    steps.push({ seq: event.seq, type: event.type, at: event.createdAt, detail })
    this.deliverySteps.set(deliveryId, steps)
  }

  /** The occupancy points of each native thread, in run order. */
  pointsByNativeThread(): Map<string, Array<OccupancyPoint>> {
    const out = new Map<string, Array<OccupancyPoint>>()
    for (const p of this.points.values()) {
      const list = out.get(p.nativeThreadId) ?? []
      list.push(p)
      out.set(p.nativeThreadId, list)
    }
    for (const list of out.values()) list.sort((a, b) => a.runSeq - b.runSeq)
    return out
  }
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

/** `n` tokens as `12,345` (or `–` when unknown). */
export const fmt = (n: number | null | undefined) => n === null || n === undefined ? "–" : n.toLocaleString("en-US")

/** US dollars with four decimals, or `–`. */
export const usd = (n: number | null | undefined) => n === null || n === undefined ? "–" : `$${n.toFixed(4)}`
