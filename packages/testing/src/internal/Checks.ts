/**
 * The simulation's own checks, on top of `InvariantChecks` (docs/design.md invariants 1-3 and 5-7):
 *
 * - crash safety (invariant 4): after a restart no run is left unfinished and every item read back before the crash
 *   is retrievable by id (`afterRestart`); after every step every item and every event read back before is still
 *   there, unchanged (the log is append-only, `seq` gap-free). (That the thread accepts a new message after a
 *   restart, and that a retried command does not run twice, is checked by the executor.)
 * - exactly once as the provider saw it (invariant 2): per native thread, no item arrives twice (injected or inline),
 *   none arrives as history that the thread saw natively, every delivery the record settles did arrive, and a run
 *   the record says a native thread saw was in fact received by it;
 * - lifecycle: a run reaches a terminal status once;
 * - well-formed requests (invariant 7 as the provider saw it): every tool call in a history Baton sent (inline or
 *   injected) is followed by its result in the same text, and every tool call in the record has a result (a call a
 *   turn left open is closed with a synthetic result when it is recorded).
 *
 * Each violation is one line starting with its category (`crash-safety:`, `exactly-once:`, ...).
 */
import { type ItemId, terminalRunStatuses, type ThreadId } from "@baton/contracts"
import { ThreadStore } from "@baton/persistence"
import type { ScriptedProvider } from "@baton/providers"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** What was read back so far: items and events must never change or disappear. */
export interface Memory {
  readonly items: Map<string, string>
  readonly events: Map<string, ReadonlyArray<string>>
}

export const emptyMemory = (): Memory => ({ items: new Map(), events: new Map() })

/**
 * An item as read back for the nothing-lost check, straight from SQL (the text by its length and a hash computed by
 * SQLite would cost as much as reading it; the length and both ends catch a truncated or replaced text).
 */
interface ItemRow {
  readonly id: string
  readonly runId: string | null
  readonly key: string
}

/**
 * Item refs in a rendered history: each envelope opens with `<conversation_history thread="<id>">` and each block
 * starts with a header line `[<kind> ... #<seq>]`; a ref is `<threadId>#<seq>` (`idOfRef` maps it to the item id).
 */
const renderedRefs = (rendered: string): ReadonlyArray<string> => {
  const refs: Array<string> = []
  let thread = ""
  for (const m of rendered.matchAll(/^(?:<conversation_history thread=("(?:[^"\\]|\\.)*")>|\[[a-z_]+(?: [^\s\]]+ [^\s\]]+)? #(\d+)(?: [a-z]+)*\])$/gm)) {
    if (m[1] !== undefined) thread = JSON.parse(m[1]) as string
    else refs.push(`${thread}#${m[2]!}`)
  }
  return refs
}
const renderedCache = new WeakMap<object, ReadonlyArray<string>>()
const inlineRefs = (turn: { readonly inlineHistory: string | null }) => {
  let refs = renderedCache.get(turn)
  if (refs === undefined) renderedCache.set(turn, refs = turn.inlineHistory === null ? [] : renderedRefs(turn.inlineHistory))
  return refs
}

/** Tool calls of a rendered history without a `tool_result` block of the same call id in the same text. */
const unansweredCalls = (rendered: string): ReadonlyArray<string> => {
  const calls: Array<string> = []
  const answered = new Set<string>()
  for (const m of rendered.matchAll(/^\[(tool_call|tool_result) [^\s\]]+ ([^\s\]]+) #[^\s\]]+(?: [a-z]+)*\]$/gm)) {
    if (m[1] === "tool_call") calls.push(m[2]!)
    else answered.add(m[2]!)
  }
  return calls.filter((id) => !answered.has(id))
}

const terminalEvents = new Set(["run.completed", "run.failed", "run.interrupted"])

/** Checks every thread; updates `memory` with what it read. */
export const check = (
  threadIds: ReadonlyArray<ThreadId>,
  providers: ReadonlyArray<ScriptedProvider.ScriptedProvider>,
  memory: Memory
) =>
  Effect.gen(function*() {
    const store = yield* ThreadStore
    const sql = yield* SqlClient.SqlClient
    const violations: Array<string> = []

    // Rendered history names items by `#<seq>` within the envelope's thread: the ids behind those refs.
    const idOfRef = new Map<string, string>()
    for (const threadId of threadIds) {
      for (const row of yield* sql<{ readonly id: string; readonly seq: number }>`SELECT id, seq FROM items WHERE thread_id = ${threadId}`) {
        idOfRef.set(`${threadId}#${row.seq}`, row.id)
      }
    }

    // What each native thread (by provider ref) received.
    const turnsOf = new Map<string, Set<string>>()
    const carriedOf = new Map<string, Array<string>>()
    const carried = (ref: string) => {
      let list = carriedOf.get(ref)
      if (list === undefined) carriedOf.set(ref, list = [])
      return list
    }
    for (const p of providers) {
      for (const r of p.received) {
        if (r.type === "turn") {
          turnsOf.set(r.nativeRef, (turnsOf.get(r.nativeRef) ?? new Set()).add(r.runId))
          if (r.inlineHistory !== null) carried(r.nativeRef).push(...inlineRefs(r).map((ref) => idOfRef.get(ref) ?? ref))
        } else if (r.type === "inject") {
          carried(r.nativeRef).push(...r.itemIds)
        }
      }
    }

    // Well-formed requests: no history Baton sent carries a tool call without its result.
    for (const p of providers) {
      for (const r of p.received) {
        const text = r.type === "turn" ? r.inlineHistory : r.type === "inject" ? r.rendered : null
        if (text === null) continue
        const open = unansweredCalls(text)
        if (open.length > 0) {
          violations.push(`tool-pairing: ${r.type === "turn" ? `inline history of run ${r.runId}` : `injection into ${r.nativeRef}`} carries tool call(s) ${open.slice(0, 3).join(", ")} without a result`)
        }
      }
    }

    const carriedSets = new Map<string, Set<string>>()
    const carriedSet = (ref: string) => {
      let set = carriedSets.get(ref)
      if (set === undefined) carriedSets.set(ref, set = new Set(carriedOf.get(ref) ?? []))
      return set
    }

    const seenItems = new Set<string>()
    for (const threadId of threadIds) {
      const items = (yield* sql<{
        readonly id: string
        readonly runId: string | null
        readonly seq: number
        readonly kind: string
        readonly tokens: number
        readonly chars: number
        readonly ends: string
        readonly toolCallId: string | null
        readonly messageId: string | null
      }>`SELECT id, run_id, seq, kind, tokens, tool_call_id, message_id, length(text) AS chars,
          substr(text, 1, 40) || '…' || substr(text, -40) AS ends
          FROM items WHERE thread_id = ${threadId} ORDER BY seq`).map((i): ItemRow => ({
            id: i.id,
            runId: i.runId,
            key: JSON.stringify([i.runId, i.seq, i.kind, i.tokens, i.chars, i.ends, i.toolCallId, i.messageId])
          }))
      const runs = yield* store.listRuns(threadId)
      const openCalls = yield* sql<{ readonly id: string; readonly toolCallId: string }>`
        SELECT c.id, c.tool_call_id FROM items c WHERE c.thread_id = ${threadId} AND c.kind = 'tool_call'
          AND c.tool_call_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM items r WHERE r.thread_id = c.thread_id
          AND r.kind = 'tool_result' AND r.tool_call_id = c.tool_call_id)`
      for (const c of openCalls) violations.push(`tool-pairing: tool call ${c.id} (${c.toolCallId}) has no result in the record`)
      const events = (yield* sql<{ readonly seq: number; readonly type: string; readonly payload: string }>`
        SELECT seq, type, payload FROM thread_events WHERE thread_id = ${threadId} ORDER BY seq`).map((e) => ({
          seq: e.seq,
          type: e.type,
          payload: JSON.parse(e.payload) as Record<string, unknown>,
          line: `${e.seq} ${e.type} ${e.payload}`
        }))
      const deliveries = yield* store.listDeliveriesOfThread(threadId)
      const providerThreads = yield* store.listProviderThreads(threadId)

      // Nothing lost: every item read back before is still there, unchanged.
      for (const item of items) {
        seenItems.add(item.id)
        const key = item.key
        const before = memory.items.get(item.id)
        if (before !== undefined && before !== key) violations.push(`crash-safety: item ${item.id} changed`)
        memory.items.set(item.id, key)
      }

      // The event log is append-only and gap-free.
      const lines = events.map((e) => e.line)
      events.forEach((e, i) => {
        if (e.seq !== i + 1) violations.push(`crash-safety: event log of ${threadId} has seq ${e.seq} at position ${i + 1}`)
      })
      const previous = memory.events.get(threadId) ?? []
      for (let i = 0; i < previous.length; i++) {
        if (lines[i] !== previous[i]) {
          violations.push(`crash-safety: event ${i + 1} of ${threadId} changed or disappeared (was: ${previous[i]!.slice(0, 120)})`)
          break
        }
      }
      memory.events.set(threadId, lines)

      // Lifecycle: one terminal event per run.
      const ended = new Map<string, Array<string>>()
      for (const e of events) {
        if (!terminalEvents.has(e.type)) continue
        const runId = String(e.payload.runId)
        ended.set(runId, [...(ended.get(runId) ?? []), `${e.type}${e.payload.stopPoint === undefined ? "" : `/${String(e.payload.stopPoint)}`}`])
      }
      for (const [runId, ends] of ended) {
        if (ends.length > 1) violations.push(`lifecycle: run ${runId} ended ${ends.length} times (${ends.join(", ")})`)
      }

      // Exactly once, as the providers saw it.
      const refOf = new Map<string, string>()
      const activeNatives = new Set<string>()
      for (const p of providerThreads) {
        if (p.activeNativeThreadId !== null) activeNatives.add(p.activeNativeThreadId)
        for (const n of yield* store.listNativeThreads(p.id)) refOf.set(n.id, n.nativeRef)
      }
      const itemsOfRun = new Map<string, Array<ItemRow>>()
      for (const i of items) {
        if (i.runId === null) continue
        const list = itemsOfRun.get(i.runId)
        if (list === undefined) itemsOfRun.set(i.runId, [i])
        else list.push(i)
      }
      const threadItems = new Set(items.map((i) => i.id))
      for (const [ref, ids] of carriedOf) {
        const seen = new Set<string>()
        const natively = new Set<string>()
        for (const runId of turnsOf.get(ref) ?? []) for (const i of itemsOfRun.get(runId) ?? []) natively.add(i.id)
        for (const id of ids) {
          if (!threadItems.has(id)) continue
          if (seen.has(id)) violations.push(`exactly-once: ${ref} received item ${id} twice as history`)
          if (natively.has(id)) violations.push(`exactly-once: ${ref} received item ${id} as history after seeing it natively`)
          seen.add(id)
        }
      }
      for (const d of deliveries) {
        if (d.status !== "injected" && d.status !== "inline") continue
        const ref = refOf.get(d.nativeThreadId)
        const arrived = ref === undefined ? new Set<string>() : carriedSet(ref)
        const missing = d.deliveredItemIds.filter((id) => !arrived.has(id))
        if (missing.length > 0) {
          violations.push(`exactly-once: delivery ${d.id} is ${d.status} to ${ref ?? d.nativeThreadId} but ${missing.length} of its items never arrived (${missing.slice(0, 3).join(", ")})`)
        }
      }
      for (const run of runs) {
        if (run.nativeThreadId === null || !activeNatives.has(run.nativeThreadId)) continue
        const sawIt = run.status === "completed" || run.stopPoint === "after_provider"
        if (!sawIt || !terminalRunStatuses.includes(run.status)) continue
        const ref = refOf.get(run.nativeThreadId)
        if (ref !== undefined && !(turnsOf.get(ref)?.has(run.id) ?? false)) {
          violations.push(`exactly-once: run ${run.id} (seq ${run.seq}, ${run.status} ${run.stopPoint ?? ""}) is recorded as seen by ${ref}, which never received it`)
        }
      }
    }

    for (const id of memory.items.keys()) {
      if (!seenItems.has(id)) violations.push(`crash-safety: item ${id} was read back before and is gone`)
    }
    return violations
  })

/**
 * After a restart: no run is left unfinished, and every item read back before the crash is retrievable by id through
 * the store (invariant 6 across the crash).
 */
export const afterRestart = (memory: Memory) =>
  Effect.gen(function*() {
    const store = yield* ThreadStore
    const unfinished = yield* store.listUnfinishedRuns()
    const violations = unfinished.map((r) => `crash-safety: run ${r.id} (seq ${r.seq}) left ${r.status} after restart recovery`)
    const ids = [...memory.items.keys()].map((id) => id as ItemId)
    const found = new Set<string>((yield* store.getItems(ids)).map((i) => i.id))
    for (const id of ids) if (!found.has(id)) violations.push(`crash-safety: item ${id}, committed before the crash, is not retrievable by id`)
    return violations
  })
