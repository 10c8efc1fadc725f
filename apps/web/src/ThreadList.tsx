/**
 * The thread list, most recently active first: title, providers, runs, the context fill of the active native
 * thread (a gateway conversation's: its last request's prompt), deferred and owed items, cost. Live: any event on `/events?tail=true` (from the log's end) re-reads the list and the snapshots of the threads
 * whose events arrived (a burst coalesces into one refresh); each opening of the stream reads every snapshot.
 */
import { useEffect, useState } from "react"
import { get, type Result } from "./api.js"
import { contextFill, fmt, usd } from "./model.js"
import { follow } from "./sse.js"
import { Refresher } from "./store.js"
import type { SnapshotJson, ThreadPageJson } from "./types.js"

interface Entry {
  readonly snapshot: SnapshotJson
}

/** A thread's last activity (ms since the epoch): its newest run's last change, or the thread's own update. */
const activity = (s: SnapshotJson) => {
  const run = s.recentRuns.at(-1)
  return Math.max(Date.parse(s.thread.updatedAt), run === undefined ? 0 : Date.parse(run.updatedAt))
}

/** Most recently active first; among equal, the newest created first; then by id (a stable order). */
const byRecent = (a: SnapshotJson, b: SnapshotJson) =>
  activity(b) - activity(a) ||
  Date.parse(b.thread.createdAt) - Date.parse(a.thread.createdAt) ||
  (a.thread.id < b.thread.id ? -1 : a.thread.id > b.thread.id ? 1 : 0)

const owed = (s: SnapshotJson) => {
  let deferred = 0
  let owedItems = 0
  for (const h of s.openHandoffs) {
    for (const d of h.deliveries) {
      if (d.status === "deferred") deferred += h.itemIds.length
      if (d.status === "deferred" || d.status === "pending") owedItems += h.itemIds.length
    }
  }
  return { deferred, owedItems }
}

export function ThreadList(props: { readonly open: (threadId: string) => void }) {
  const [entries, setEntries] = useState<ReadonlyArray<Entry> | null>(null)
  const [error, setError] = useState<string | null>(null)
  const [connection, setConnection] = useState<"connecting" | "open" | "reconnecting">("connecting")
  useEffect(() => {
    // The snapshots held, and the threads whose events arrived since they were read: a refresh reads the list (its
    // order, new threads) and the snapshot of only a new thread or one whose events arrived, not every thread's (a
    // list of 300 gateway conversations re-read 300 snapshots for each request an agent made). `all`: read every one
    // (the first read, and after a reconnection, which may have missed events).
    const held = new Map<string, SnapshotJson>()
    const dirty = new Set<string>()
    let all = true
    const refresher = new Refresher(async () => {
      const threads: Array<ThreadPageJson["threads"][number]> = []
      let cursor: string | null = null
      do {
        const page: Result<ThreadPageJson> = await get<ThreadPageJson>(`/threads?limit=500${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`)
        if (!page.ok) {
          // Shown above the last list read; the next event or reconnection reads it again and clears it.
          setError(page.message)
          return
        }
        threads.push(...page.value.threads)
        cursor = page.value.nextCursor
      } while (cursor !== null)
      const everyOne = all
      all = false
      const stale = threads.filter((t) => everyOne || dirty.has(t.id) || !held.has(t.id))
      for (const t of stale) dirty.delete(t.id)
      const snapshots = await Promise.all(stale.map((t) => get<SnapshotJson>(`/threads/${encodeURIComponent(t.id)}`)))
      snapshots.forEach((s, i) => {
        const id = stale[i]!.id
        if (s.ok) held.set(id, s.value)
        else dirty.add(id)
      })
      const listed = new Set(threads.map((t) => t.id))
      for (const id of held.keys()) if (!listed.has(id)) held.delete(id)
      // Most recently active first (the conversation an agent is working in at the top), then newest created.
      setEntries(threads.flatMap((t) => {
        const snapshot = held.get(t.id)
        return snapshot === undefined ? [] : [{ snapshot }]
      }).sort((a, b) => byRecent(a.snapshot, b.snapshot)))
      setError(null)
    })
    // The stream starts at the log's end (`tail=true`: the list is read from the threads, not by replaying every
    // event ever stored, megabytes on a long-used server), so the list is read once the stream is open, and again,
    // every snapshot, at each reopening: a read that failed while the server was away is not followed by an event
    // that would, and events may have been missed. A stream that does not open still gets the list read (and its
    // error shown).
    let read = false
    const stream = follow({
      path: "/events?tail=true",
      monotonic: false,
      onEvent: (event) => {
        dirty.add(event.threadId)
        refresher.trigger()
      },
      onState: (state) => {
        setConnection(state)
        if (state === "open") all = true
        if (state === "open" || (state === "reconnecting" && !read)) {
          read = true
          refresher.trigger()
        }
      },
      onRefused: () => {
        if (read) return
        read = true
        refresher.trigger()
      }
    })
    return () => stream.close()
  }, [])
  if (entries === null) return error !== null ? <p className="error" data-testid="list-error">{error}</p> : <p className="dim">loading…</p>
  return (
    <section className="thread-list">
      <h1>Threads <span className={`conn ${connection}`} data-testid="list-connection">{connection}</span></h1>
      {error !== null && <p className="error" data-testid="list-error">{error}</p>}
      <table data-testid="thread-list">
        <thead>
          <tr><th>title</th><th>providers</th><th>runs</th><th>context fill (active)</th><th>deferred items</th><th>owed items</th><th>cost</th><th>last active</th></tr>
        </thead>
        <tbody>
          {entries.map(({ snapshot: s }) => {
            const o = owed(s)
            return (
              <tr key={s.thread.id} data-testid="thread-row" data-thread-id={s.thread.id} data-runs={s.totals.runs}>
                <td><button className="link" onClick={() => props.open(s.thread.id)}>{s.thread.title}</button></td>
                <td>{s.providerThreads.map((p) => p.active ? <strong key={p.id}>{p.providerInstance} </strong> : <span key={p.id}>{p.providerInstance} </span>)}</td>
                <td>{fmt(s.totals.runs)}</td>
                <td data-testid="context-fill">{contextFill(s)}</td>
                <td>{fmt(o.deferred)}</td>
                <td>{fmt(o.owedItems)}</td>
                <td>{s.costs.totals.runs === 0 ? "–" : usd(s.costs.totals.costUsd)}</td>
                <td>{new Date(activity(s)).toLocaleString()}</td>
              </tr>
            )
          })}
        </tbody>
      </table>
    </section>
  )
}
