/**
 * One thread: its header (providers, totals, cost), the actions (admin token), the conversation as runs of items in
 * a virtualised list, context occupancy per native thread, the handoff timelines, cost per run, the live event tail,
 * and the drawer that reads originals by ref.
 */
import { useVirtualizer } from "@tanstack/react-virtual"
import { lazy, Suspense, useEffect, useMemo, useRef, useState, useSyncExternalStore } from "react"
import { Actions } from "./Actions.js"
import { Drawer } from "./Drawer.js"
import { chartTitle, fmt, runInProgress, toRows, usd, type Row } from "./model.js"
import { ThreadStore } from "./store.js"
import { get } from "./api.js"
import type { HandoffItemIdsJson, HandoffSummaryJson, ItemJson, RunCostJson, RunJson } from "./types.js"
import type { EventFold } from "./model.js"

// The charts (uPlot, a quarter of the script) load in a chunk of their own, after the first screen: the rows and the
// drawer do not wait for them to be parsed.
const loadOccupancy = () => import("./Occupancy.js")
const Occupancy = lazy(() => loadOccupancy().then((m) => ({ default: m.Occupancy })))

const oneLine = (text: string, max = 160) => {
  const line = text.replace(/\s+/g, " ").trim()
  return line.length > max ? `${line.slice(0, max)}…` : line
}

const kindLabel: Record<string, string> = {
  user_message: "user",
  assistant_message: "assistant",
  reasoning: "reasoning",
  error: "error",
  summary: "summary",
  handoff_marker: "handoff",
  tool_call: "tool call",
  tool_result: "tool result"
}

function RowView(props: {
  readonly row: Row
  readonly runs: Map<string, RunJson>
  readonly costs: Map<string, RunCostJson>
  readonly stubbed: Set<string>
  readonly open: (id: string) => void
}) {
  const row = props.row
  if (row.kind === "run") {
    const run = row.runId === null ? undefined : props.runs.get(row.runId)
    const cost = row.runId === null ? undefined : props.costs.get(row.runId)
    return (
      <div className="row run-header" data-testid="run-header" data-run-id={row.runId ?? ""} data-run-seq={run?.seq ?? ""} data-status={run?.status ?? ""}>
        <strong>{row.runId === null ? "outside any run" : `run ${run?.seq ?? "…"}`}</strong>
        {run !== undefined && <span className={`status ${run.status}`}>{run.status}</span>}
        {run?.failureReason != null && <span className="reason" title={run.failureReason}>{oneLine(run.failureReason, 80)}</span>}
        {cost !== undefined && (
          <span className="cost">in {fmt(cost.inputTokens)} · cache write {fmt(cost.cacheWriteTokens)} · cache read {fmt(cost.cacheReadTokens)} · out {fmt(cost.outputTokens)} · {usd(cost.costUsd)}</span>
        )}
      </div>
    )
  }
  if (row.kind === "tool") {
    const stub = row.call.toolCallId !== null && props.stubbed.has(row.call.toolCallId)
    return (
      <div className="row tool" data-testid="tool-row" data-item-id={row.call.id}>
        <span className="badge tool">tool</span>
        {stub && <span className="badge stub" title="its result goes to the provider as a one-line stub; the original is readable here">stubbed</span>}
        <button className="link" onClick={() => props.open(row.call.id)}>{row.call.toolName ?? "?"}({oneLine(row.call.text, 60)})</button>
        <span> → </span>
        {row.result === null
          ? <span className="dim">{row.call.toolCallState ?? "no result"}</span>
          : <button className="link" onClick={() => props.open(row.result!.id)}>{row.result.isError ? "error: " : ""}{oneLine(row.result.text, 60)}</button>}
        <span className="dim tokens">{fmt(row.call.tokens + (row.result?.tokens ?? 0))} tokens</span>
      </div>
    )
  }
  const item: ItemJson = row.item
  return (
    <div className={`row item ${item.kind}`} data-testid="item-row" data-item-id={item.id} data-kind={item.kind}>
      <span className={`badge ${item.kind}`}>{kindLabel[item.kind] ?? item.kind}</span>
      <button className="link text" onClick={() => props.open(item.id)}>{oneLine(item.text)}</button>
      <span className="dim tokens">{fmt(item.tokens)} tokens</span>
    </div>
  )
}

function Conversation(props: { readonly store: ThreadStore; readonly open: (id: string) => void }) {
  const { store } = props
  const rows = useMemo(() => toRows(store.items), [store.items])
  const parent = useRef<HTMLDivElement | null>(null)
  const [follow, setFollow] = useState(true)
  const virtualizer = useVirtualizer({ count: rows.length, getScrollElement: () => parent.current, estimateSize: () => 28, overscan: 20 })
  // When the list last scrolled itself to the tail (`performance.now()`): its own scroll events are not the user's.
  const selfScrolled = useRef(-Infinity)
  useEffect(() => {
    if (follow && rows.length > 0) {
      selfScrolled.current = performance.now()
      virtualizer.scrollToIndex(rows.length - 1, { align: "end" })
    }
  }, [rows.length, follow, virtualizer])
  // Any scroll away from the tail that the list did not make itself (the wheel, keys, the scroll bar, a script)
  // stops following: pages still arriving must not pull the rows the user is reading away from under them.
  const onScroll = (el: HTMLDivElement) => {
    if (!follow || performance.now() - selfScrolled.current < 250) return
    if (el.scrollHeight - el.scrollTop - el.clientHeight > 3 * 28) setFollow(false)
  }
  return (
    <section className="conversation">
      <h2>Conversation <span className="dim">{fmt(store.items.length)} items{store.itemsComplete ? "" : store.itemsError !== null ? "" : " (loading…)"}, {fmt(store.runs.size)} runs</span>
        {store.itemsError !== null && <span className="error" data-testid="items-error"> {store.itemsError}</span>}
        <label className="follow"><input type="checkbox" checked={follow} onChange={(e) => setFollow(e.target.checked)} /> follow</label></h2>
      <div ref={parent} className="scroller" data-testid="conversation" onWheel={() => setFollow(false)} onKeyDown={() => setFollow(false)} onScroll={(e) => onScroll(e.currentTarget)}>
        <div style={{ height: virtualizer.getTotalSize(), position: "relative" }}>
          {virtualizer.getVirtualItems().map((v) => (
            <div key={rows[v.index]!.key} style={{ position: "absolute", top: 0, left: 0, right: 0, height: v.size, transform: `translateY(${v.start}px)` }}>
              <RowView row={rows[v.index]!} runs={store.runs} costs={store.costs} stubbed={store.fold.stubbed} open={props.open} />
            </div>
          ))}
        </div>
      </div>
    </section>
  )
}

/**
 * One id list of a handoff or delivery (`list`), `count` ids: read from `GET /handoffs/{id}/item-ids` 200 at a time
 * when the user opens it ("more" for the next 200), each id opening the original in the drawer. An open list is read
 * again when its count changes (a delivery settled), and when it is opened again after its first page failed.
 */
function IdList(props: {
  readonly handoffId: string
  readonly deliveryId: string | null
  readonly list: "items" | "omitted" | "delivered"
  readonly count: number
  readonly label: string
  readonly testId?: string
  readonly refTestId?: string
  readonly open: (id: string) => void
}) {
  // The ids read so far and where the next page starts (`null`: none), replaced together.
  const [read, setRead] = useState<{ readonly ids: ReadonlyArray<string>; readonly next: number | null }>({ ids: [], next: null })
  const { ids, next } = read
  const [error, setError] = useState<string | null>(null)
  const [opened, setOpened] = useState(false)
  const load = async (offset: number) => {
    const delivery = props.deliveryId === null ? "" : `&deliveryId=${encodeURIComponent(props.deliveryId)}`
    const page = await get<HandoffItemIdsJson>(`/handoffs/${encodeURIComponent(props.handoffId)}/item-ids?list=${props.list}${delivery}&offset=${offset}&limit=${idPage}`)
    if (!page.ok) return setError(page.message)
    setError(null)
    // A page joins the list only where it ends: a second "more" before the first answered asks for the same offset,
    // and a page asked for before the list was read again (its count changed) no longer fits.
    setRead((old) => offset === 0
      ? { ids: page.value.ids, next: page.value.nextOffset }
      : old.ids.length === offset ? { ids: [...old.ids, ...page.value.ids], next: page.value.nextOffset } : old)
  }
  useEffect(() => {
    if (opened) void load(0)
  }, [opened, props.count])
  return (
    <details data-testid={props.testId} onToggle={(e) => {
      if (!e.currentTarget.open) return
      // Opened again after its first page failed: read it again (a failed "more" keeps its button).
      if (opened && error !== null && ids.length === 0) void load(0)
      else setOpened(true)
    }}>
      <summary>{fmt(props.count)} {props.label}</summary>
      {ids.map((id) => <button key={id} className={`link ref ${props.list}`} data-testid={props.refTestId} onClick={() => props.open(id)}>{id}</button>)}
      {next !== null && <button onClick={() => void load(next)}>more ({fmt(props.count - ids.length)} left)</button>}
      {error !== null && <span className="error">{error}</span>}
    </details>
  )
}

const idPage = 200

function Handoffs(props: { readonly handoffs: ReadonlyArray<HandoffSummaryJson>; readonly fold: EventFold; readonly native: Map<string, string>; readonly open: (id: string) => void }) {
  if (props.handoffs.length === 0) return <section className="handoffs"><h2>Handoffs</h2><p className="dim">none</p></section>
  return (
    <section className="handoffs">
      <h2>Handoffs</h2>
      {props.handoffs.map((h) => (
        <div key={h.id} className="handoff" data-testid="handoff" data-handoff-id={h.id}>
          <div><strong>{h.kind}</strong> {h.id} · {fmt(h.itemCount)} items ({fmt(h.tokens)} tokens) · created {new Date(h.createdAt).toLocaleTimeString()} {h.open ? <span className="badge owed">owed</span> : <span className="badge done">settled</span>}</div>
          <div className="ids">
            {h.itemCount > 0 && <IdList handoffId={h.id} deliveryId={null} list="items" count={h.itemCount} label="owed" open={props.open} />}
          </div>
          {h.deliveries.map((d) => (
            <div key={d.id} className="delivery" data-testid="delivery" data-delivery-id={d.id} data-status={d.status} data-defer-count={d.deferCount}>
              <div>→ {props.native.get(d.nativeThreadId) ?? d.nativeThreadId}: <span className={`status ${d.status}`} data-testid="delivery-status">{d.status}</span>
                {d.mode !== null && <span> ({d.mode})</span>} · deferred ×{d.deferCount}
                {d.lastDeferReason !== null && <span className="dim"> · why: {d.lastDeferReason}</span>}</div>
              <ol className="timeline">
                {(props.fold.deliverySteps.get(d.id) ?? []).map((s) => (
                  <li key={s.seq} data-testid="delivery-step" data-type={s.type}><time>{new Date(s.at).toLocaleTimeString()}</time> {s.type.replace("delivery.", "")}: {s.detail}</li>
                ))}
              </ol>
              <div className="ids">
                {d.deliveredCount > 0 && <IdList handoffId={h.id} deliveryId={d.id} list="delivered" count={d.deliveredCount} label="delivered" open={props.open} />}
                {d.omittedCount > 0 && (
                  <IdList handoffId={h.id} deliveryId={d.id} list="omitted" count={d.omittedCount} label="omitted (read each by its ref)"
                    testId="omitted" refTestId="omitted-ref" open={props.open} />
                )}
              </div>
            </div>
          ))}
        </div>
      ))}
    </section>
  )
}

export function ThreadView(props: { readonly threadId: string; readonly admin: boolean; readonly navigate: (threadId: string | null) => void }) {
  const store = useMemo(() => new ThreadStore(props.threadId), [props.threadId])
  useEffect(() => {
    store.start()
    // The charts' chunk, while the first screen's data is on its way (the charts need the timeline anyway).
    void loadOccupancy()
    return () => store.stop()
  }, [store])
  useSyncExternalStore(store.subscribe, store.getVersion)
  const [drawer, setDrawer] = useState<string | null>(null)
  const snap = store.snapshot
  const native = new Map<string, string>()
  for (const pt of snap?.providerThreads ?? []) for (const n of pt.nativeThreads) native.set(n.id, `${pt.providerInstance} gen ${n.generation}`)
  // Derived from the fold only when it moved (`version`): a live event that does not touch the charts re-renders
  // nothing of them, and a 5,000-run chart is not rebuilt on every event.
  const byNative = useMemo(() => store.fold.pointsByNativeThread(), [store.fold, store.fold.version])
  const marksOf = useMemo(() => {
    const by = new Map<string, Array<EventFold["marks"][number]>>()
    for (const nativeId of byNative.keys()) by.set(nativeId, store.fold.marks.filter((m) => m.nativeThreadId === nativeId || m.nativeThreadId === ""))
    return by
  }, [byNative, store.fold, store.fold.version])
  const active = snap?.providerThreads.find((p) => p.active)

  if (store.missing !== null) {
    // An unknown thread (a mistyped or stale address, another server's thread): say so, offer no actions.
    return (
      <div className="thread" data-testid="thread" data-thread-id={props.threadId}>
        <header className="thread-header">
          <button className="link" onClick={() => props.navigate(null)}>← threads</button>
          <h1>{props.threadId}</h1>
        </header>
        <p className="error" data-testid="thread-missing">{store.missing}</p>
      </div>
    )
  }

  return (
    <div className="thread" data-testid="thread" data-thread-id={props.threadId}>
      <header className="thread-header">
        <button className="link" onClick={() => props.navigate(null)}>← threads</button>
        <h1>{snap?.thread.title ?? props.threadId}</h1>
        <span className={`conn ${store.connection}`} data-testid="connection">{store.connection}</span>
        {store.snapshotError !== null && <span className="error">{store.snapshotError}</span>}
      </header>
      {snap !== null && (
        <div className="summary">
          <span>active: <strong data-testid="active-provider">{snap.activeProviderInstance ?? "none"}</strong></span>
          <span>providers: {snap.providerThreads.map((p) => p.providerInstance).join(", ")}</span>
          <span>runs: {fmt(snap.totals.runs)}</span>
          <span>items: {fmt(snap.totals.items)} ({fmt(snap.totals.itemTokens)} tokens)</span>
          <span>handoffs: {fmt(snap.totals.handoffs)} ({fmt(snap.totals.openHandoffs)} open)</span>
          {snap.parentThreadId !== null && (
            <span data-testid="sub-agent-of">sub-agent of <button className="link" onClick={() => props.navigate(snap.parentThreadId)}>{snap.parentThreadId}</button></span>
          )}
          {snap.subAgents.length > 0 && (
            <span data-testid="sub-agents">sub-agents: {snap.subAgents.map((t) => (
              <button key={t.id} className="link" onClick={() => props.navigate(t.id)}>{t.title}</button>
            ))}</span>
          )}
          <span data-testid="cost-totals">cost: {snap.costs.totals.runs === 0 ? "not reported by these providers" : `${fmt(snap.costs.totals.runs)} runs · in ${fmt(snap.costs.totals.inputTokens)} · cache write ${fmt(snap.costs.totals.cacheWriteTokens)} · cache read ${fmt(snap.costs.totals.cacheReadTokens)} · out ${fmt(snap.costs.totals.outputTokens)} · ${usd(snap.costs.totals.costUsd)}`}</span>
        </div>
      )}
      {props.admin && (
        <Actions threadId={props.threadId} providers={[...new Set((snap?.providerThreads ?? []).map((p) => p.providerInstance))]}
          runInProgress={runInProgress(store.runs.values(), snap?.totals.runsByStatus)} onDone={() => store.refresh()} navigate={(id) => props.navigate(id)} />
      )}
      <div className="columns">
        <div className="left">
          <Conversation store={store} open={setDrawer} />
          <Drawer itemId={drawer} onClose={() => setDrawer(null)} onOpen={setDrawer} held={store.held} />
        </div>
        <div className="right">
          <h2>Context occupancy</h2>
          <Suspense fallback={<p className="dim">loading the charts…</p>}>
            {[...byNative.entries()].map(([nativeId, points]) => {
              const view = snap?.providerThreads.flatMap((p) => p.nativeThreads).find((n) => n.id === nativeId)
              return (
                <Occupancy key={nativeId} nativeThreadId={nativeId} title={`${chartTitle(nativeId, native)}${active?.activeNativeThreadId === nativeId ? " (active)" : ""}`}
                  points={points} marks={marksOf.get(nativeId) ?? []} window={view?.window ?? null} />
              )
            })}
          </Suspense>
          <Handoffs handoffs={store.handoffs} fold={store.fold} native={native} open={setDrawer} />
          <section className="events">
            <h2>Events <span className="dim">({store.events.length} received since this page opened; the thread is at seq {store.fold.lastSeq})</span></h2>
            <ol data-testid="events">
              {store.events.slice(-60).map((e) => <li key={e.seq} data-seq={e.seq} data-type={e.type}>{e.seq} {e.type}</li>)}
            </ol>
          </section>
        </div>
      </div>
    </div>
  )
}
