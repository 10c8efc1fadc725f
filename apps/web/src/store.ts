/**
 * The state of one open thread: its snapshot, runs, items (paged in, 500 at a time), handoffs (as counts: their id
 * lists are paged by the view when opened) and the fold of its events, kept current from the thread's event stream.
 *
 * Opening loads the first screen first: the first page of items, the snapshot (the header, and the last 20 runs for
 * the run headers on screen) and the timeline (the occupancy charts); then the handoffs; the other runs once every
 * item is in. One server on two cores answers them all, so what the first screen needs is not queued behind the
 * rest, and a drawer opened meanwhile waits for at most one page.
 *
 * Each event triggers the smallest refresh that shows it: `items.appended` fetches the items after the last one
 * held, a run event that run's page, a handoff or delivery event the handoffs and the snapshot, a usage or provider
 * event the snapshot. Refreshes of one kind never overlap and a burst of events coalesces into one (`Refresher`; the
 * snapshot at most every 250 ms). React reads it through `subscribe`/`version` (useSyncExternalStore).
 */
import type { TimelineJson } from "@baton/contracts/timeline"
import { get, loadsStartedAt } from "./api.js"
import { EventFold } from "./model.js"
import { follow, type Follow } from "./sse.js"
import type { EventJson, HandoffSummaryJson, HandoffSummaryListJson, ItemJson, ItemPageJson, RunCostJson, RunJson, RunPageJson, SnapshotJson } from "./types.js"

/**
 * Runs `task` on `trigger()`; triggers while it runs make exactly one more run after it. With `minGapMs`, a run
 * starts at least that many milliseconds after the previous one started (a burst of triggers costs one run per gap).
 */
export class Refresher {
  private running = false
  private again = false
  private lastStart = -Infinity
  constructor(private readonly task: () => Promise<void>, private readonly minGapMs = 0) {}
  trigger() {
    if (this.running) {
      this.again = true
      return
    }
    this.running = true
    const wait = this.lastStart + this.minGapMs - performance.now()
    const run = () => {
      this.lastStart = performance.now()
      void this.task().finally(() => {
        this.running = false
        if (this.again) {
          this.again = false
          this.trigger()
        }
      })
    }
    if (wait > 0) setTimeout(run, wait)
    else run()
  }
}

/** An event as the page received it (the event panel, and the figures the benchmark reads). */
export interface Received {
  readonly seq: number
  readonly type: string
  readonly createdAt: string
  /** `Date.now()` when the page got it, milliseconds. */
  readonly receivedAt: number
}

declare global {
  interface Window {
    /** What the page received, for the acceptance tests and the benchmark (bounded: the last 5,000 events). */
    __baton?: {
      received: Array<Received>
      firstRowsAt?: number
      /** The seq the stream started after (the timeline's `lastSeq`; 0 when the log was replayed from the start). */
      startSeq?: number
      /** The last event seq the page has folded. */
      lastSeq?: number
      /** When the timeline was in (`performance.now()`, milliseconds): the occupancy charts could be drawn. */
      timelineAt?: number
    }
  }
}

/** Items and runs per page. The first items page is also asked for by index.html's inline prefetch: keep both. */
const pageSize = 500
const keepEvents = 300

export class ThreadStore {
  snapshot: SnapshotJson | null = null
  snapshotError: string | null = null
  /**
   * The API's sentence when the thread does not exist (a 404 `ThreadNotFound` from any of its reads or its stream):
   * the view says so instead of loading forever, and nothing is asked for again.
   */
  missing: string | null = null
  /** Why the last page of items could not be read (the API's words), or `null`. */
  itemsError: string | null = null
  items: Array<ItemJson> = []
  private readonly byId = new Map<string, ItemJson>()
  /** The item with this id if it is paged in (the drawer shows it without a request). */
  held = (id: string): ItemJson | undefined => this.byId.get(id)
  itemsComplete = false
  runs = new Map<string, RunJson>()
  /** What each run cost (tokens, dollars), by run id: from the run pages and the snapshot's recent runs. */
  costs = new Map<string, RunCostJson>()
  handoffs: Array<HandoffSummaryJson> = []
  fold = new EventFold()
  readonly events: Array<Received> = []
  /** The event stream's state; `closed` once the server refused it for good (its reason in `snapshotError`). */
  connection: "connecting" | "open" | "reconnecting" | "closed" = "connecting"
  version = 0
  private readonly listeners = new Set<() => void>()
  private scheduled = false
  private stream: Follow | null = null
  private readonly dirtyRuns = new Set<number>()

  /**
   * When the page started loading (`Date.now()`). Used only when the stream replays the stored log from the start (a
   * server without `/timeline`): an event stamped well before it is in what the first loads read, so that replay
   * triggers no refresh for it. Assumes the browser's and the server's clocks agree (a browser clock ahead of the
   * server's would silence the refreshes of live events), so it is never used on the usual path: there the stream
   * starts after the timeline's `lastSeq` and every event it brings refreshes what it touched (an event stamped
   * before the loads but committed after they read, in a long unit of work, is not in them either).
   */
  private readonly openedAt = loadsStartedAt()
  /** Whether the stream replays the log from the start (no `/timeline`): see `openedAt`. */
  private replayingFromStart = false

  constructor(readonly threadId: string) {}

  subscribe = (listener: () => void) => {
    this.listeners.add(listener)
    return () => void this.listeners.delete(listener)
  }
  getVersion = () => this.version

  private lastFlush = 0

  /**
   * Schedules one render for everything changed since the last: on the next animation frame, but at most one per
   * 100 ms, so replaying a long stored log (tens of thousands of events) does not re-render the charts every frame.
   */
  private changed() {
    if (this.scheduled) return
    this.scheduled = true
    const flush = () => {
      this.scheduled = false
      this.lastFlush = performance.now()
      this.version++
      for (const l of this.listeners) l()
    }
    const wait = Math.max(0, 100 - (performance.now() - this.lastFlush))
    // A hidden tab gets no animation frames; a timer still renders its state.
    if (wait === 0 && document.visibilityState === "visible") requestAnimationFrame(flush)
    else setTimeout(flush, wait)
  }

  private readonly base = () => `/threads/${encodeURIComponent(this.threadId)}`

  private readonly itemsRefresher = new Refresher(async () => {
    for (;;) {
      const after = this.items.length === 0 ? 0 : this.items[this.items.length - 1]!.seq
      const page = await get<ItemPageJson>(`${this.base()}/items?afterSeq=${after}&limit=${pageSize}`)
      this.firstItems.resolve()
      if (!page.ok) {
        this.itemsError = page.message
        this.noteMissing(page)
        this.changed()
        return
      }
      this.itemsError = null
      if (page.value.items.length > 0) {
        this.items = this.items.concat(page.value.items)
        for (const item of page.value.items) this.byId.set(item.id, item)
        if (window.__baton && window.__baton.firstRowsAt === undefined) window.__baton.firstRowsAt = performance.now()
        this.changed()
      }
      if (page.value.nextAfterSeq === null) {
        this.itemsComplete = true
        this.changed()
        // Every item is in: now page every run (the first screen's run headers came with the snapshot).
        if (!this.runsLoaded) {
          this.runsLoaded = true
          this.dirtyRuns.add(1)
          this.runsRefresher.trigger()
        }
        return
      }
    }
  })

  /** Settled when the first page of items has been read (or failed): the first screen's rows. */
  private readonly firstItems = deferred()
  /** Whether every run has been asked for (after the items). */
  private runsLoaded = false

  private readonly runsRefresher = new Refresher(async () => {
    const from = this.dirtyRuns.size === 0 ? 0 : Math.min(...this.dirtyRuns)
    this.dirtyRuns.clear()
    let after = Math.max(0, from - 1)
    for (;;) {
      const page = await get<RunPageJson>(`${this.base()}/runs?afterSeq=${after}&limit=${pageSize}`)
      if (!page.ok) {
        // Asked for again on the next trigger (a run event, or the stream's reconnection after an outage).
        this.dirtyRuns.add(after + 1)
        return
      }
      for (const run of page.value.runs) this.runs.set(run.id, run)
      for (const cost of page.value.costs) this.costs.set(cost.runId, cost)
      this.changed()
      if (page.value.nextAfterSeq === null) return
      after = page.value.nextAfterSeq
    }
  })

  private readonly snapshotRefresher = new Refresher(async () => {
    const snapshot = await get<SnapshotJson>(this.base())
    if (snapshot.ok) {
      this.snapshot = snapshot.value
      this.snapshotError = null
      // The last 20 runs: the run headers of the first screen (the tail), before every run is paged in.
      for (const run of snapshot.value.recentRuns) {
        const held = this.runs.get(run.id)
        if (held === undefined || held.updatedAt <= run.updatedAt) this.runs.set(run.id, run)
      }
      for (const cost of snapshot.value.costs.recentRuns) this.costs.set(cost.runId, cost)
    } else {
      this.snapshotError = snapshot.message
      this.noteMissing(snapshot)
    }
    this.changed()
  }, 250)

  /**
   * A 404 `ThreadNotFound`, or a 400 `HttpApiDecodeError` of a thread read (whose only input is the id in the path:
   * too long, a NUL character): no thread has this id; stop following it.
   */
  private noteMissing(result: { readonly status: number; readonly tag: string; readonly message: string }) {
    const unknown = (result.status === 404 && result.tag === "ThreadNotFound") || (result.status === 400 && result.tag === "HttpApiDecodeError")
    if (!unknown || this.missing !== null) return
    this.missing = result.message
    this.stop()
  }

  private readonly handoffsRefresher = new Refresher(async () => {
    const handoffs = await get<HandoffSummaryListJson>(`${this.base()}/handoff-summaries`)
    if (handoffs.ok) this.handoffs = [...handoffs.value.handoffs]
    this.changed()
  })

  /**
   * Loads the thread and follows its event stream until `stop()`: the first screen first (the first page of items,
   * the snapshot, the timeline), then the handoffs, and every run once the items are in. The charts start from the
   * server's fold of the stored log (`/timeline`) and the stream from its `lastSeq`, so opening a long thread does
   * not replay its whole log; a server without `/timeline` (or an error) falls back on replaying the log from the
   * start.
   */
  start() {
    this.itemsRefresher.trigger()
    this.snapshotRefresher.trigger()
    const timeline = get<TimelineJson>(`${this.base()}/timeline`).then((timeline) => {
      const state = (window.__baton ??= { received: [] })
      state.startSeq = timeline.ok ? timeline.value.lastSeq : 0
      state.timelineAt = performance.now()
      if (timeline.ok) {
        this.fold = EventFold.fromJson(timeline.value)
        this.noteSeq(this.fold.lastSeq)
        this.changed()
      }
      this.startStream(timeline.ok ? timeline.value.lastSeq : null)
    })
    void Promise.all([this.firstItems.promise, timeline]).then(() => {
      if (!this.stopped) this.handoffsRefresher.trigger()
    })
  }

  private noteSeq(seq: number) {
    const state = (window.__baton ??= { received: [] })
    state.lastSeq = Math.max(state.lastSeq ?? 0, seq)
  }

  private stopped = false
  private streamOpened = false

  private startStream(from: number | null) {
    if (this.stream !== null || this.stopped) return
    this.replayingFromStart = from === null
    this.stream = follow({
      path: `${this.base()}/events`,
      monotonic: true,
      onState: (state) => {
        this.connection = state
        if (state === "open") this.snapshotRefresher.trigger()
        // After a reconnect the handoffs may have changed meanwhile (on the first open they are loaded after it), and
        // a read that failed while the server was away (items or runs an event announced) is not announced again:
        // ask for what is after the last item held, and the runs whose read failed.
        if (state === "open" && this.streamOpened) {
          this.handoffsRefresher.trigger()
          if (this.itemsComplete || this.itemsError !== null) this.itemsRefresher.trigger()
          if (this.dirtyRuns.size > 0) this.runsRefresher.trigger()
        }
        if (state === "open") this.streamOpened = true
        this.changed()
      },
      onEvent: (event) => this.onEvent(event),
      onRefused: (refusal) => {
        this.noteMissing(refusal)
        if (this.missing === null) this.snapshotError = refusal.message
        this.connection = "closed"
        this.changed()
      }
    }, from)
  }

  stop() {
    this.stopped = true
    this.stream?.close()
    if (this.stream !== null) this.connection = "closed"
  }

  /** Re-reads the snapshot, handoffs and runs (after an action). */
  refresh() {
    this.snapshotRefresher.trigger()
    this.handoffsRefresher.trigger()
    this.runsRefresher.trigger()
  }

  private onEvent(event: EventJson) {
    this.fold.apply(event)
    this.noteSeq(event.seq)
    const received = { seq: event.seq, type: event.type, createdAt: event.createdAt, receivedAt: Date.now() }
    // Trimmed in bulk: trimming one at a time shifts the whole array for every event of a long replay.
    this.events.push(received)
    if (this.events.length > 2 * keepEvents) this.events.splice(0, this.events.length - keepEvents)
    const log = (window.__baton ??= { received: [] }).received
    log.push(received)
    if (log.length > 10_000) log.splice(0, log.length - 5_000)
    this.changed()
    if (this.replayingFromStart && Date.parse(event.createdAt) < this.openedAt) return
    const last = this.items.length === 0 ? 0 : this.items[this.items.length - 1]!.seq
    if (event.type === "items.appended" && event.payload.toSeq > last) this.itemsRefresher.trigger()
    if (event.type.startsWith("run.")) {
      const runId = (event.payload as { readonly runId?: string }).runId
      const seq = runId === undefined ? undefined : this.fold.runSeq.get(runId)
      const known = runId === undefined ? undefined : this.runs.get(runId)
      // A run already held with this status needs no fetch (the replayed log repeats what the first page showed).
      if (seq !== undefined && !(known !== undefined && event.type === `run.${known.status}`)) {
        this.dirtyRuns.add(seq)
        this.runsRefresher.trigger()
      }
    }
    if (/^(handoff|delivery|usage|provider|native_thread|thread|context)\./.test(event.type) || event.type === "run.completed") {
      this.snapshotRefresher.trigger()
    }
    if (/^(handoff|delivery)\./.test(event.type)) this.handoffsRefresher.trigger()
  }
}

/** A promise with its `resolve` (resolving twice is harmless). */
const deferred = () => {
  let resolve = () => {}
  const promise = new Promise<void>((r) => {
    resolve = r
  })
  return { promise, resolve }
}
