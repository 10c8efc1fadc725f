/**
 * Timeline: the fold of a thread's event log into what the dashboard's charts and timelines show (issue "Baton
 * dashboard", item 3), shared by the server and the page so both compute the same points:
 *
 * - Occupancy: one point per run that reported usage: the last `usage.reported` of the native thread the run was
 *   started on (`run.started`) before the next run started there, i.e. the native thread's usage after the run. The
 *   window and auto-compact threshold are the report's own (`maxTokens`, `autoCompactThreshold`); an untrusted
 *   report is plotted at the estimate Baton used instead (`estimateUsed`) and flagged.
 * - Marks on the occupancy chart: `thread.compacted`, `context.offloaded` (tool results stubbed), `thread.offloaded`
 *   (summarised) and `native_thread.replaced`, each at the run seq it followed.
 * - A gateway conversation (docs/gateway.md) has no native thread: each request's `gateway.usage` is a point on the
 *   chart of its provider instance (`gatewayChartId`: what the request carried, uncached input plus cache writes and
 *   reads, against the instance's window), and each `gateway.offloaded` flush a "tool results offloaded" mark after
 *   the run before the request it rewrote, its refs stubbed: on that instance's chart once the request's
 *   `gateway.usage` names it (a flush whose request got no answer stays on every chart).
 * - Budget at each turn start: the `budget` of the run's `delivery.pending` (provider tokens), when history was owed.
 * - Delivery timelines: every event of a delivery (created, deferred with its count, pending, injected, inlined,
 *   superseded) with its time and reason.
 *
 * The fold reads only the event types in `timelineEventTypes`, so the server folds a thread's stored log from the
 * `(thread_id, type, seq)` index (`GET /threads/{id}/timeline`) and the page applies only the live tail after it: a
 * 10,000-item thread opens without the page replaying its whole log. Its state round-trips through JSON
 * (`EventFold.toJson` / `EventFold.fromJson`, schema `ThreadTimeline`).
 *
 * This module imports types only (the page bundles it without `effect`: `@baton/contracts/timeline`); the response's
 * schema is `ThreadTimeline` in `Views.ts`.
 */
import type { ThreadEvent } from "./Events.js"

/**
 * The chart id of a gateway conversation's requests to `providerInstance` (in place of a native thread id: the
 * gateway keeps no native thread).
 */
export const gatewayChartId = (providerInstance: string) => `gateway:${providerInstance}`

/** A stored event in its JSON form (what the event stream and the timeline carry). */
export type EventJson = typeof ThreadEvent.Encoded

/** The event types the fold reads; every other type only moves `lastSeq`. */
export const timelineEventTypes = [
  "run.queued",
  "run.started",
  "usage.reported",
  "delivery.created",
  "delivery.deferred",
  "delivery.pending",
  "delivery.injected",
  "delivery.inlined",
  "delivery.superseded",
  "thread.compacted",
  "context.offloaded",
  "thread.offloaded",
  "native_thread.replaced",
  "gateway.usage",
  "gateway.offloaded"
] as const satisfies ReadonlyArray<EventJson["type"]>

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

/** The fold's whole state as JSON: what `GET /threads/{id}/timeline` returns (`ThreadTimeline`). */
export interface TimelineJson {
  /** The last event seq folded: the page follows the stream after it. */
  readonly lastSeq: number
  readonly lastRunSeq: number
  /** `[runId, run seq]` of the runs queued that have no point yet or were the last started on a native thread (a later event may name them); the others' seqs are their points'. */
  readonly runSeqs: ReadonlyArray<readonly [string, number]>
  /** `[nativeThreadId, runId]`: the run last started on each native thread. */
  readonly startedOn: ReadonlyArray<readonly [string, string]>
  /** `[runId, budget]`: the turn-start budget of runs that were owed history. */
  readonly budgets: ReadonlyArray<readonly [string, number]>
  /** The native threads the points name (`points.nativeThreadIndexes`), each once. */
  readonly nativeThreads: ReadonlyArray<string>
  /** The occupancy points in columns (one entry per point in each; a 5,000-run thread's timeline stays small and quick to encode). */
  readonly points: {
    readonly runIds: ReadonlyArray<string>
    readonly runSeqs: ReadonlyArray<number>
    /** Each point's native thread as an index into `nativeThreads` (a thread has few native threads, and many points). */
    readonly nativeThreadIndexes: ReadonlyArray<number>
    readonly usedTokens: ReadonlyArray<number>
    readonly maxTokens: ReadonlyArray<number | null>
    readonly autoCompactThresholds: ReadonlyArray<number | null>
    readonly trusted: ReadonlyArray<boolean>
    readonly budgets: ReadonlyArray<number | null>
  }
  readonly marks: ReadonlyArray<OccupancyMark>
  readonly deliverySteps: ReadonlyArray<{ readonly deliveryId: string; readonly steps: ReadonlyArray<DeliveryStep> }>
  /** Tool call ids whose results a tool-result offload replaced with stubs. */
  readonly stubbed: ReadonlyArray<string>
}

/** The types whose events change what the views show (`version`); `run.queued` and `run.started` only set cursors. */
const shown: ReadonlySet<string> = new Set(timelineEventTypes.filter((t) => t !== "run.queued" && t !== "run.started"))

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
  /**
   * Bumped by every applied event that can change what the charts and timelines show (points, marks, delivery steps,
   * stubs), so a view can keep what it derived from them until it moves.
   */
  version = 0

  /** The fold's state as JSON (`TimelineJson`). */
  toJson(): TimelineJson {
    const points = [...this.points.values()]
    const named = new Set(this.startedOn.values())
    const nativeThreads = [...new Set(points.map((p) => p.nativeThreadId))]
    const nativeIndex = new Map(nativeThreads.map((id, i) => [id, i]))
    return {
      lastSeq: this.lastSeq,
      lastRunSeq: this.lastRunSeq,
      runSeqs: [...this.runSeq].filter(([runId, seq]) => named.has(runId) || this.points.get(runId)?.runSeq !== seq),
      startedOn: [...this.startedOn],
      budgets: [...this.budgets].filter(([runId]) => !this.points.has(runId) || named.has(runId)),
      nativeThreads,
      points: {
        runIds: points.map((p) => p.runId),
        runSeqs: points.map((p) => p.runSeq),
        nativeThreadIndexes: points.map((p) => nativeIndex.get(p.nativeThreadId)!),
        usedTokens: points.map((p) => p.usedTokens),
        maxTokens: points.map((p) => p.maxTokens),
        autoCompactThresholds: points.map((p) => p.autoCompactThreshold),
        trusted: points.map((p) => p.trusted),
        budgets: points.map((p) => p.budget)
      },
      marks: [...this.marks],
      deliverySteps: [...this.deliverySteps].map(([deliveryId, steps]) => ({ deliveryId, steps: [...steps] })),
      stubbed: [...this.stubbed]
    }
  }

  /** Moves the fold's cursor to `seq` (the log's last seq when the events after the last folded one are of other types). */
  advanceTo(seq: number) {
    this.lastSeq = Math.max(this.lastSeq, seq)
  }

  /** A fold in the state `json` describes (`toJson`'s output): applying the events after `json.lastSeq` continues it. */
  static fromJson(json: TimelineJson): EventFold {
    const fold = new EventFold()
    fold.lastSeq = json.lastSeq
    fold.lastRunSeq = json.lastRunSeq
    const p = json.points
    for (let i = 0; i < p.runIds.length; i++) {
      const runId = p.runIds[i]!
      fold.points.set(runId, {
        runId,
        runSeq: p.runSeqs[i]!,
        nativeThreadId: json.nativeThreads[p.nativeThreadIndexes[i]!]!,
        usedTokens: p.usedTokens[i]!,
        maxTokens: p.maxTokens[i] ?? null,
        autoCompactThreshold: p.autoCompactThresholds[i] ?? null,
        trusted: p.trusted[i]!,
        budget: p.budgets[i] ?? null
      })
      fold.runSeq.set(runId, p.runSeqs[i]!)
    }
    for (const [k, v] of json.runSeqs) fold.runSeq.set(k, v)
    for (const [k, v] of json.startedOn) fold.startedOn.set(k, v)
    for (const [k, v] of json.budgets) fold.budgets.set(k, v)
    fold.marks.push(...json.marks)
    for (const d of json.deliverySteps) fold.deliverySteps.set(d.deliveryId, [...d.steps])
    for (const s of json.stubbed) fold.stubbed.add(s)
    return fold
  }

  apply(event: EventJson) {
    this.lastSeq = event.seq
    if (shown.has(event.type)) this.version++
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
      case "gateway.usage": {
        const p = event.payload
        this.points.set(p.runId, {
          runId: p.runId,
          runSeq: this.runSeq.get(p.runId) ?? 0,
          nativeThreadId: gatewayChartId(p.providerInstance),
          // A request with hidden thread_read rounds reports every hop's sum; its point is what the last one carried.
          usedTokens: p.carriedTokens ?? p.inputTokens + p.cacheWriteTokens + p.cacheReadTokens,
          maxTokens: p.windowTokens,
          autoCompactThreshold: null,
          trusted: true,
          budget: null
        })
        // The flush that rewrote this request (marked after the run before it, on no chart yet: its event does not
        // name the instance) belongs to the chart of the instance the request was routed to, not to every chart (a
        // conversation switched to another instance charted the first instance's flushes as its own).
        const seq = this.runSeq.get(p.runId)
        if (seq !== undefined) {
          for (let i = this.marks.length - 1; i >= 0; i--) {
            const mark = this.marks[i]!
            if (mark.runSeq < seq - 1) break
            if (mark.nativeThreadId === "" && mark.kind === "tool results offloaded" && mark.runSeq === seq - 1) {
              this.marks[i] = { ...mark, nativeThreadId: gatewayChartId(p.providerInstance) }
              break
            }
          }
        }
        return
      }
      case "gateway.offloaded": {
        const p = event.payload
        for (const ref of p.refs) if (ref.startsWith("tool:")) this.stubbed.add(ref.slice(5))
        const seq = this.runSeq.get(p.runId)
        this.marks.push({
          nativeThreadId: "",
          runSeq: seq === undefined ? this.lastRunSeq : seq - 1,
          kind: "tool results offloaded",
          detail: `${p.refs.length} tool results stubbed (${p.tier}): ${p.tokensBefore} → ${p.tokensAfter} tokens`
        })
        return
      }
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
