/**
 * The state of one open thread: its snapshot, runs, items (paged in, 500 at a time), handoffs and the fold of its
 * events, kept current from the thread's event stream. Each event triggers the smallest refresh that shows it:
 * `items.appended` fetches the items after the last one held, a run event that run's page, a handoff, delivery,
 * usage or provider event the snapshot and handoffs. Refreshes of one kind never overlap and a burst of events
 * coalesces into one (`Refresher`). React reads it through `subscribe`/`version` (useSyncExternalStore).
 */
import type { TimelineJson } from "@baton/contracts/timeline"
import { get } from "./api.js"
import { EventFold } from "./model.js"
import { follow, type Follow } from "./sse.js"
import type { EventJson, HandoffJson, HandoffListJson, ItemJson, ItemPageJson, RunJson, RunPageJson, SnapshotJson } from "./types.js"

/** Runs `task` on `trigger()`; triggers while it runs make exactly one more run after it. */
export class Refresher {
  private running = false
  private again = false
  constructor(private readonly task: () => Promise<void>) {}
  trigger() {
    if (this.running) {
      this.again = true
      return
    }
    this.running = true
    void this.task().finally(() => {
      this.running = false
      if (this.again) {
        this.again = false
        this.trigger()
      }
    })
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
    }
  }
}

const pageSize = 500
const keepEvents = 300

export class ThreadStore {
  snapshot: SnapshotJson | null = null
  snapshotError: string | null = null
  items: Array<ItemJson> = []
  itemsComplete = false
  runs = new Map<string, RunJson>()
  handoffs: Array<HandoffJson> = []
  fold = new EventFold()
  readonly events: Array<Received> = []
  connection: "connecting" | "open" | "reconnecting" = "connecting"
  version = 0
  private readonly listeners = new Set<() => void>()
  private scheduled = false
  private stream: Follow | null = null
  private readonly dirtyRuns = new Set<number>()

  /**
   * When the page started loading (`Date.now()`). An event stamped before it is already in what the first loads
   * read (they started after it was committed), so replaying the stored log triggers no refresh; an event missed
   * while disconnected is newer and does. Assumes the browser's and the server's clocks agree within the load time
   * (true on one machine; a skewed remote clock costs redundant refreshes or, when the browser is ahead, a stale
   * panel until the next event).
   */
  private readonly openedAt = Date.now()

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
      if (!page.ok) return
      if (page.value.items.length > 0) {
        this.items = this.items.concat(page.value.items)
        if (window.__baton && window.__baton.firstRowsAt === undefined) window.__baton.firstRowsAt = performance.now()
        this.changed()
      }
      if (page.value.nextAfterSeq === null) {
        this.itemsComplete = true
        this.changed()
        return
      }
    }
  })

  private readonly runsRefresher = new Refresher(async () => {
    const from = this.dirtyRuns.size === 0 ? 0 : Math.min(...this.dirtyRuns)
    this.dirtyRuns.clear()
    let after = Math.max(0, from - 1)
    for (;;) {
      const page = await get<RunPageJson>(`${this.base()}/runs?afterSeq=${after}&limit=${pageSize}`)
      if (!page.ok) return
      for (const run of page.value.runs) this.runs.set(run.id, run)
      this.changed()
      if (page.value.nextAfterSeq === null) return
      after = page.value.nextAfterSeq
    }
  })

  private readonly snapshotRefresher = new Refresher(async () => {
    const [snapshot, handoffs] = await Promise.all([
      get<SnapshotJson>(this.base()),
      get<HandoffListJson>(`${this.base()}/handoffs`)
    ])
    if (snapshot.ok) this.snapshot = snapshot.value
    else this.snapshotError = snapshot.message
    if (handoffs.ok) this.handoffs = [...handoffs.value.handoffs]
    this.changed()
  })

  /**
   * Loads everything and follows the event stream until `stop()`. The charts start from the server's fold of the
   * stored log (`/timeline`) and the stream from its `lastSeq`, so opening a long thread does not replay its whole
   * log; a server without `/timeline` (or an error) falls back on replaying the log from the start.
   */
  start() {
    this.itemsRefresher.trigger()
    this.snapshotRefresher.trigger()
    this.runsRefresher.trigger()
    void get<TimelineJson>(`${this.base()}/timeline`).then((timeline) => {
      ;(window.__baton ??= { received: [] }).startSeq = timeline.ok ? timeline.value.lastSeq : 0
      if (timeline.ok) {
        this.fold = EventFold.fromJson(timeline.value)
        this.noteSeq(this.fold.lastSeq)
        this.changed()
      }
      this.startStream(timeline.ok ? timeline.value.lastSeq : null)
    })
  }

  private noteSeq(seq: number) {
    const state = (window.__baton ??= { received: [] })
    state.lastSeq = Math.max(state.lastSeq ?? 0, seq)
  }

  private stopped = false

  private startStream(from: number | null) {
    if (this.stream !== null || this.stopped) return
    this.stream = follow({
      path: `${this.base()}/events`,
      monotonic: true,
      onState: (state) => {
        this.connection = state
        if (state === "open") this.snapshotRefresher.trigger()
        this.changed()
      },
      onEvent: (event) => this.onEvent(event)
    }, from)
  }

  stop() {
    this.stopped = true
    this.stream?.close()
  }

  /** Re-reads the snapshot, handoffs and runs (after an action). */
  refresh() {
    this.snapshotRefresher.trigger()
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
    if (Date.parse(event.createdAt) < this.openedAt) return
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
  }
}
