/**
 * The simulation's own checks, on top of `InvariantChecks` (docs/design.md invariants 1-3 and 5-7):
 *
 * - crash safety (invariant 4): after a restart no run is left unfinished and every item read back before the crash
 *   is retrievable by id (`afterRestart`); after every step every item and every event written before is still
 *   there, unchanged (the log is append-only, `seq` gap-free: `readRecords`, over the audit of `installAudit`).
 *   (That the thread accepts a new message after a restart, and that a retried command does not run twice, is
 *   checked by the executor.)
 * - exactly once as the provider saw it (invariant 2): per native thread, no item arrives twice (injected or inline;
 *   an `/offload` summary carries every item it covers), none arrives as history that the thread saw natively,
 *   every delivery the record settles did arrive, and a run the record says a native thread saw was in fact received
 *   by it;
 * - lifecycle: a run reaches a terminal status once;
 * - nothing lost to the replay guard (invariant 6 as the provider saw it): the output Baton skips as a replay of a
 *   resumed native thread (`items.replay_skipped`) is at most what the provider re-emitted in that run's turns
 *   (`ScriptedProvider.replays`): anything more was a genuine answer, lost (tester r36);
 * - well-formed requests (invariant 7 as the provider saw it): every tool call in a history Baton sent (inline or
 *   injected) is followed by its result in the same text, and every tool call in the record has a result (a call a
 *   turn left open is closed with a synthetic result when it is recorded).
 *
 * Each violation is one line starting with its category (`crash-safety:`, `exactly-once:`, ...).
 */
import { type Item, type ItemId, type ProviderInstance, terminalRunStatuses, type ThreadEvent, type ThreadId } from "@baton/contracts"
import { InvariantChecks } from "@baton/orchestration"
import { type ProviderCalibration, ThreadStore } from "@baton/persistence"
import type { ScriptedProvider } from "@baton/providers"
import { SqlClient } from "@effect/sql"
import { Effect, type Option } from "effect"

/**
 * What the checks have read so far: per thread, every item and event (the log is append-only, so each check reads
 * only the rows after the last `seq` it holds, see `readRecords`), and how far the audit was read.
 */
export interface Memory {
  readonly items: Map<ThreadId, Array<Item>>
  readonly events: Map<ThreadId, Array<ThreadEvent>>
  /**
   * The `seq` of every `sim_audit` row reported. Not a cursor: on Postgres a sequence's values are handed out in one
   * order and committed in another, so a row can appear below one read before (the table is empty unless a check fails).
   */
  readonly audited: Set<number>
  /**
   * Per thread, the mutable tables as last read (`InvariantChecks.readMutable`); a table is read again only when
   * the change log (`sim_changed`, see `installAudit`) names it for the thread.
   */
  readonly mutable: Map<ThreadId, Mutable>
  /** Per provider instance, its calibration as last read (read again when the change log names it). */
  readonly calibrations: Map<string, Option.Option<ProviderCalibration>>
  /** Whether `sim_audit` was read yet (after its first read, only when the change log names it). */
  readonly cursor: { auditRead: boolean }
  /**
   * Per thread, how many of its items (the first of `items`) `afterRestart` has looked up by id: each item is looked
   * up at one restart only (see `afterRestart`; one not found is reported then).
   */
  readonly retrievable: Map<ThreadId, number>
}

type Mutable = Effect.Effect.Success<ReturnType<typeof InvariantChecks.readMutable>>

export const emptyMemory = (): Memory => ({
  items: new Map(),
  events: new Map(),
  audited: new Set(),
  mutable: new Map(),
  calibrations: new Map(),
  cursor: { auditRead: false },
  retrievable: new Map()
})

/**
 * The tables the change log covers, and the key each change is logged under: the thread whose record the row is
 * read with (`InvariantChecks.readMutable`, the tails of items and events), or the provider instance for
 * calibrations. A row whose thread cannot be found (its parent row gone) is logged with no key: every thread's copy
 * of that table is read again.
 */
const changeKeys: ReadonlyArray<{ readonly table: string; readonly keys: (row: "OLD" | "NEW") => ReadonlyArray<string> }> = [
  { table: "runs", keys: (r) => [`${r}.thread_id`] },
  { table: "handoffs", keys: (r) => [`${r}.thread_id`] },
  { table: "handoff_deliveries", keys: (r) => [`(SELECT thread_id FROM handoffs WHERE id = ${r}.handoff_id)`] },
  { table: "provider_threads", keys: (r) => [`${r}.thread_id`] },
  { table: "native_threads", keys: (r) => [`(SELECT thread_id FROM provider_threads WHERE id = ${r}.provider_thread_id)`] },
  { table: "thread_links", keys: (r) => [`${r}.parent_thread_id`, `${r}.fork_thread_id`] },
  { table: "offloads", keys: (r) => [`${r}.thread_id`] },
  { table: "provider_calibrations", keys: (r) => [`${r}.provider_instance`] },
  { table: "items", keys: (r) => [`${r}.thread_id`] },
  { table: "thread_events", keys: (r) => [`${r}.thread_id`] },
  // The audit's own rows: `sim_audit` is read again only when it gained one.
  { table: "sim_audit", keys: () => ["NULL"] }
]

/**
 * The audit behind the incremental reads, installed in the simulation's database by every incarnation (idempotent):
 * a table `sim_audit` (never written by Baton; left out of the simulation's dump) and triggers that add a row to it
 * whenever a row of `items` or `thread_events` is deleted, or updated so that a column the checks read changes
 * (items: every column of an `Item`; events: thread, seq, type, payload).
 *
 * Why the incremental form has the same power as re-reading and comparing everything: the former check compared
 * every item (by run, seq, kind, tokens, text length and both ends, tool call id, message id) and every event line
 * (seq, type, payload) read at any earlier check with the row read now, and flagged a row that was gone. A row can
 * only change or vanish by an UPDATE or DELETE (both fire a trigger, in the same transaction: a change that is
 * rolled back leaves no audit row, as it leaves no change; one that commits leaves both; on SQLite an
 * `INSERT OR REPLACE` deletes the row it replaces, which fires the delete trigger under `recursive_triggers`, set
 * here; an upsert's update fires the update trigger) or by a statement that
 * fires no row trigger (a TRUNCATE, a table rebuild), which the row counts of `readRecords` catch. The audit
 * compares the whole text rather than its length and ends, and flags a change made between two checks too: never
 * weaker. Rows a thread gains below the last `seq` read (an out-of-order insert the tail would not see) are caught
 * by the same counts.
 *
 * The change log behind the incremental reads of the mutable tables: a table `sim_changed` (left out of the dump
 * too) to which triggers add `(table, key)` on every INSERT, UPDATE (old and new row) and DELETE of a row of the
 * tables `InvariantChecks.readMutable` reads, of `provider_calibrations`, and of `items` and `thread_events` (see
 * `changeKeys`; also of `sim_audit` itself, so the audit is read only when it gained a row); on
 * Postgres a TRUNCATE adds `(table, NULL)`: every thread. `readRecords` takes the log and empties
 * it in one statement (`DELETE ... RETURNING`) and reads again exactly the tables it names for each thread. Why
 * that is the same as reading every table whole at every step: a table's rows for a thread can only change by a
 * row statement on it (which logs the thread, in the same transaction: a rolled-back change logs nothing, as it
 * changes nothing) or by a statement that fires no row trigger: on SQLite none (the truncate optimisation is off
 * on a table with triggers, an `INSERT OR REPLACE`'s deletion fires the delete trigger under `recursive_triggers`,
 * a foreign key's actions fire the child table's triggers), on Postgres a TRUNCATE (logged by its own trigger);
 * Baton runs no DDL after its migrations. Deliveries (read through their handoff) are read again when either table
 * changes for the thread; native threads (read by provider thread) when `native_threads` changes for the thread,
 * and those of a provider thread new to the thread's list when only `provider_threads` changes (a native thread's
 * row is logged under the thread of its provider thread, old and new).
 */
export const installAudit = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // Every column an `Item` is read from: the checks are handed the items as first read (tool_name: isTransferable).
  const itemColumns = ["id", "thread_id", "run_id", "seq", "kind", "text", "tokens", "tool_call_id", "message_id", "tool_name", "is_error", "tool_call_state", "created_at"]
  const eventColumns = ["thread_id", "seq", "type", "payload"]
  yield* sql.onDialectOrElse({
    pg: () =>
      Effect.gen(function*() {
        const differs = (columns: ReadonlyArray<string>) => columns.map((c) => `OLD.${c} IS DISTINCT FROM NEW.${c}`).join(" OR ")
        yield* sql`CREATE TABLE IF NOT EXISTS sim_audit (seq BIGSERIAL PRIMARY KEY, tbl TEXT NOT NULL, row_key TEXT NOT NULL, what TEXT NOT NULL)`
        yield* sql.unsafe(`CREATE OR REPLACE FUNCTION sim_audit_row() RETURNS trigger LANGUAGE plpgsql AS $$
          DECLARE k TEXT;
          BEGIN
            IF TG_TABLE_NAME = 'items' THEN k := OLD.id; ELSE k := OLD.thread_id || '#' || OLD.seq; END IF;
            IF TG_OP = 'DELETE' THEN
              INSERT INTO sim_audit (tbl, row_key, what) VALUES (TG_TABLE_NAME, k, 'deleted');
            ELSIF (TG_TABLE_NAME = 'items' AND (${differs(itemColumns)})) THEN
              INSERT INTO sim_audit (tbl, row_key, what) VALUES (TG_TABLE_NAME, k, 'changed');
            END IF;
            RETURN NULL;
          END $$`)
        yield* sql.unsafe(`CREATE OR REPLACE FUNCTION sim_audit_event() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN
            IF TG_OP = 'DELETE' THEN
              INSERT INTO sim_audit (tbl, row_key, what) VALUES ('thread_events', OLD.thread_id || '#' || OLD.seq, 'deleted');
            ELSIF (${differs(eventColumns)}) THEN
              INSERT INTO sim_audit (tbl, row_key, what) VALUES ('thread_events', OLD.thread_id || '#' || OLD.seq, 'changed');
            END IF;
            RETURN NULL;
          END $$`)
        yield* sql`DROP TRIGGER IF EXISTS sim_audit_items ON items`
        yield* sql`CREATE TRIGGER sim_audit_items AFTER UPDATE OR DELETE ON items FOR EACH ROW EXECUTE FUNCTION sim_audit_row()`
        yield* sql`DROP TRIGGER IF EXISTS sim_audit_events ON thread_events`
        yield* sql`CREATE TRIGGER sim_audit_events AFTER UPDATE OR DELETE ON thread_events FOR EACH ROW EXECUTE FUNCTION sim_audit_event()`
        yield* sql`CREATE TABLE IF NOT EXISTS sim_changed (tbl TEXT NOT NULL, key TEXT)`
        const branches = (row: "OLD" | "NEW") =>
          changeKeys.map(({ keys, table }) =>
            `WHEN '${table}' THEN INSERT INTO sim_changed (tbl, key) VALUES ${keys(row).map((k) => `('${table}', ${k})`).join(", ")};`
          ).join("\n")
        yield* sql.unsafe(`CREATE OR REPLACE FUNCTION sim_changed_row() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN
            IF TG_OP = 'TRUNCATE' THEN
              INSERT INTO sim_changed (tbl, key) VALUES (TG_TABLE_NAME, NULL);
              RETURN NULL;
            END IF;
            IF TG_OP IN ('UPDATE', 'DELETE') THEN
              CASE TG_TABLE_NAME ${branches("OLD")} END CASE;
            END IF;
            IF TG_OP IN ('INSERT', 'UPDATE') THEN
              CASE TG_TABLE_NAME ${branches("NEW")} END CASE;
            END IF;
            RETURN NULL;
          END $$`)
        for (const { table } of changeKeys) {
          yield* sql.unsafe(`DROP TRIGGER IF EXISTS sim_changed_rows ON ${table}`)
          yield* sql.unsafe(`CREATE TRIGGER sim_changed_rows AFTER INSERT OR UPDATE OR DELETE ON ${table} FOR EACH ROW EXECUTE FUNCTION sim_changed_row()`)
          yield* sql.unsafe(`DROP TRIGGER IF EXISTS sim_changed_truncate ON ${table}`)
          yield* sql.unsafe(`CREATE TRIGGER sim_changed_truncate AFTER TRUNCATE ON ${table} FOR EACH STATEMENT EXECUTE FUNCTION sim_changed_row()`)
        }
      }),
    orElse: () =>
      Effect.gen(function*() {
        const differs = (columns: ReadonlyArray<string>) => columns.map((c) => `OLD.${c} IS NOT NEW.${c}`).join(" OR ")
        // A row an `INSERT OR REPLACE` replaces fires its delete trigger only with recursive triggers on (this
        // connection's setting; Baton's schema has no SQLite trigger of its own).
        yield* sql`PRAGMA recursive_triggers = ON`
        yield* sql`CREATE TABLE IF NOT EXISTS sim_audit (seq INTEGER PRIMARY KEY, tbl TEXT NOT NULL, row_key TEXT NOT NULL, what TEXT NOT NULL)`
        const trigger = (name: string, on: string, event: string, when: string, key: string, what: string) =>
          sql.unsafe(`CREATE TRIGGER IF NOT EXISTS ${name} AFTER ${event} ON ${on} ${when}
            BEGIN INSERT INTO sim_audit (tbl, row_key, what) VALUES ('${on}', ${key}, '${what}'); END`)
        yield* trigger("sim_audit_items_update", "items", "UPDATE", `WHEN ${differs(itemColumns)}`, "OLD.id", "changed")
        yield* trigger("sim_audit_items_delete", "items", "DELETE", "", "OLD.id", "deleted")
        const eventKey = "OLD.thread_id || '#' || OLD.seq"
        yield* trigger("sim_audit_events_update", "thread_events", "UPDATE", `WHEN ${differs(eventColumns)}`, eventKey, "changed")
        yield* trigger("sim_audit_events_delete", "thread_events", "DELETE", "", eventKey, "deleted")
        yield* sql`CREATE TABLE IF NOT EXISTS sim_changed (tbl TEXT NOT NULL, key TEXT)`
        for (const { keys, table } of changeKeys) {
          const log = (row: "OLD" | "NEW") => keys(row).map((k) => `INSERT INTO sim_changed (tbl, key) VALUES ('${table}', ${k});`).join(" ")
          for (const [event, body] of [["INSERT", log("NEW")], ["UPDATE", `${log("OLD")} ${log("NEW")}`], ["DELETE", log("OLD")]] as const) {
            yield* sql.unsafe(`CREATE TRIGGER IF NOT EXISTS sim_changed_${table}_${event.toLowerCase()} AFTER ${event} ON ${table} BEGIN ${body} END`)
          }
        }
      })
  })
})

/** The triggers `installAudit` makes on SQLite: four of the audit, three per table of the change log. */
const sqliteTriggers = 4 + 3 * changeKeys.length

/**
 * `installAudit` for a later incarnation on the same database: the tables and triggers are in the database already
 * (made by the first incarnation's `installAudit`), so on SQLite only the connection's own setting
 * (`recursive_triggers`) is made, and the triggers are counted: should one be missing, `installAudit` makes it again
 * (as running it again at every incarnation did). On Postgres it is `installAudit`.
 */
export const reconnectAudit = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    pg: () => installAudit,
    orElse: () =>
      Effect.gen(function*() {
        yield* sql`PRAGMA recursive_triggers = ON`
        const [found] = yield* sql<{ readonly n: number }>`
          SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'trigger' AND (name LIKE 'sim_audit_%' OR name LIKE 'sim_changed_%')`
        if (Number(found?.n) !== sqliteTriggers) yield* installAudit
      })
  })
})

/**
 * Reads the record of the threads `threadIdsOrAll` (`null`: every thread, in `listThreads`' order) for one step's
 * checks: the change log (`installAudit`: which tables changed for which thread since the last step, taken and
 * emptied in one statement), new audit rows (read when the log names `sim_audit`, and at the first read), every
 * thread's id with its item and event counts (one statement: the ids alone, not the thread rows, which no check
 * reads), then for each thread the mutable tables the log names (`InvariantChecks.readMutable`'s reads; all of
 * them for a thread not read before), items and events only after the last `seq` `memory` holds (appended to it)
 * when the log names them. Returns the thread ids, the
 * records (from `memory`), the calibrations of `instances` (read again when the log names them) and the
 * crash-safety violations: an audited change or deletion, a count that differs from what was read (rows gone
 * without a trigger, or inserted below the last `seq` read), an event log that is not gap-free.
 */
export const readRecords = (threadIdsOrAll: ReadonlyArray<ThreadId> | null, memory: Memory, instances: ReadonlyArray<string> = []) =>
  Effect.gen(function*() {
    const store = yield* ThreadStore
    const sql = yield* SqlClient.SqlClient
    const violations: Array<string> = []
    // What changed since the last step: per table, the keys (threads, instances); `null` in a set: every key.
    const changed = new Map<string, Set<string | null>>()
    for (const c of yield* sql<{ readonly tbl: string; readonly key: string | null }>`DELETE FROM sim_changed RETURNING tbl, key`) {
      let keys = changed.get(c.tbl)
      if (keys === undefined) changed.set(c.tbl, keys = new Set())
      keys.add(c.key)
    }
    const stale = (table: string, key: string) => {
      const keys = changed.get(table)
      return keys !== undefined && (keys.has(key) || keys.has(null))
    }
    if (!memory.cursor.auditRead || changed.has("sim_audit")) {
      memory.cursor.auditRead = true
      for (const a of yield* sql<{ readonly seq: number | string; readonly tbl: string; readonly rowKey: string; readonly what: string }>`
        SELECT seq, tbl, row_key, what FROM sim_audit ORDER BY seq`) {
        if (memory.audited.has(Number(a.seq))) continue
        memory.audited.add(Number(a.seq))
        violations.push(a.tbl === "items"
          ? a.what === "deleted" ? `crash-safety: item ${a.rowKey} was written and is gone` : `crash-safety: item ${a.rowKey} changed`
          : `crash-safety: event ${a.rowKey} changed or disappeared (${a.what})`)
      }
    }
    // Every thread's id (`n`: its place in `listThreads`' order) and its item and event counts, in one statement.
    const counted = new Map<string, number>()
    const listedIds: Array<{ readonly id: ThreadId; readonly place: number }> = []
    for (const c of yield* sql<{ readonly tbl: string; readonly threadId: string; readonly n: number | string }>`
      SELECT 'threads' AS tbl, id AS thread_id, ROW_NUMBER() OVER (ORDER BY created_at, id) AS n FROM threads
      UNION ALL SELECT 'items' AS tbl, thread_id, COUNT(*) AS n FROM items GROUP BY thread_id
      UNION ALL SELECT 'events' AS tbl, thread_id, COUNT(*) AS n FROM thread_events GROUP BY thread_id`) {
      if (c.tbl === "threads") listedIds.push({ id: c.threadId as ThreadId, place: Number(c.n) })
      else counted.set(`${c.tbl} ${c.threadId}`, Number(c.n))
    }
    const threadIds = threadIdsOrAll ?? listedIds.sort((a, b) => a.place - b.place).map((t) => t.id)
    const listed = new Set<string>(threadIds)
    for (const threadId of memory.items.keys()) {
      if (!listed.has(threadId)) violations.push(`crash-safety: thread ${threadId}, read back before, is gone`)
    }
    const records: Array<InvariantChecks.ThreadRecord> = []
    for (const threadId of threadIds) {
      const known = memory.mutable.get(threadId)
      let mutable: Mutable
      if (known === undefined) mutable = yield* InvariantChecks.readMutable(threadId)
      else {
        const again = (table: string) => stale(table, threadId)
        const providerThreads = again("provider_threads") ? yield* store.listProviderThreads(threadId) : known.providerThreads
        // Native threads are read by provider thread. When only the provider threads changed, a provider thread
        // read before keeps the native threads read with it (their rows changed only if `native_threads` is logged
        // for this thread); only a provider thread new to this thread has its native threads read.
        let nativeThreads = known.nativeThreads
        if (again("provider_threads") || again("native_threads")) {
          const knownProviderThreads = new Set<string>(known.providerThreads.map((p) => p.id))
          const kept = again("native_threads") ? [] : known.nativeThreads
          nativeThreads = []
          for (const p of providerThreads) {
            if (knownProviderThreads.has(p.id) && !again("native_threads")) {
              nativeThreads.push(...kept.filter((n) => n.providerThreadId === p.id))
            } else nativeThreads.push(...(yield* store.listNativeThreads(p.id)))
          }
        }
        mutable = {
          threadId,
          runs: again("runs") ? yield* store.listRuns(threadId) : known.runs,
          handoffs: again("handoffs") ? yield* store.listHandoffs(threadId) : known.handoffs,
          deliveries: again("handoffs") || again("handoff_deliveries") ? yield* store.listDeliveriesOfThread(threadId) : known.deliveries,
          providerThreads,
          nativeThreads,
          links: again("thread_links") ? yield* store.listLinks(threadId) : known.links,
          offloads: again("offloads") ? yield* store.listOffloads(threadId) : known.offloads
        }
      }
      memory.mutable.set(threadId, mutable)
      let items = memory.items.get(threadId)
      const newThread = items === undefined
      if (items === undefined) memory.items.set(threadId, items = [])
      let events = memory.events.get(threadId)
      if (events === undefined) memory.events.set(threadId, events = [])
      // Through the largest seq a Postgres `integer` column holds.
      if (newThread || stale("items", threadId)) {
        items.push(...(yield* store.listItemsInRange(threadId, (items.at(-1)?.seq ?? 0) + 1, 2_147_483_647)))
      }
      if (newThread || stale("thread_events", threadId)) {
        events.push(...(yield* store.listEvents(threadId, { afterSeq: events.at(-1)?.seq ?? 0 })))
      }
      const itemCount = counted.get(`items ${threadId}`) ?? 0
      const eventCount = counted.get(`events ${threadId}`) ?? 0
      if (itemCount !== items.length) {
        violations.push(`crash-safety: ${threadId} holds ${itemCount} items, ${items.length} read back in seq order (rows vanished or were inserted below a seq read before)`)
      }
      if (eventCount !== events.length) {
        violations.push(`crash-safety: event log of ${threadId} holds ${eventCount} events, ${events.length} read back in seq order`)
      }
      // The event log is gap-free.
      events.forEach((e, i) => {
        if (e.seq !== i + 1) violations.push(`crash-safety: event log of ${threadId} has seq ${e.seq} at position ${i + 1}`)
      })
      records.push({ ...mutable, items, events })
    }
    const calibrations: Array<Option.Option<ProviderCalibration>> = []
    for (const instance of instances) {
      let found = memory.calibrations.get(instance)
      if (found === undefined || stale("provider_calibrations", instance)) {
        found = yield* store.getCalibration(instance as ProviderInstance)
        memory.calibrations.set(instance, found)
      }
      calibrations.push(found)
    }
    return { threadIds, records, calibrations, violations }
  })

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

/** The tool-pairing violation of one received request (`null`: none), computed once per request (it never changes). */
const pairingCache = new WeakMap<object, string | null>()
const pairingOf = (r: ScriptedProvider.Received): string | null => {
  let found = pairingCache.get(r)
  if (found !== undefined) return found
  const text = r.type === "turn" ? r.inlineHistory : r.type === "inject" ? r.rendered : null
  const open = text === null ? [] : unansweredCalls(text)
  found = open.length === 0 ? null :
    `tool-pairing: ${r.type === "turn" ? `inline history of run ${r.runId}` : `injection into ${r.nativeRef}`} carries tool call(s) ${open.slice(0, 3).join(", ")} without a result`
  pairingCache.set(r, found)
  return found
}

/** Checks every thread's record (`readRecords`) against what the providers received. */
export const check = (
  records: ReadonlyArray<InvariantChecks.ThreadRecord>,
  providers: ReadonlyArray<ScriptedProvider.ScriptedProvider>
): ReadonlyArray<string> => {
  const violations: Array<string> = []

  // Rendered history names items by `#<seq>` within the envelope's thread: the ids behind those refs.
  const idOfRef = new Map<string, string>()
  for (const r of records) for (const item of r.items) idOfRef.set(`${r.threadId}#${item.seq}`, item.id)

  // What an `/offload` summary stands for: the items its offload covered and the earlier summary it extends (with
  // what that one stands for), so a summary that reaches a native thread carries every item it covers.
  const covers = new Map<string, ReadonlyArray<string>>()
  for (const r of records) {
    const byId = new Map(r.offloads.map((o) => [o.id as string, o]))
    for (const o of r.offloads) {
      const ids: Array<string> = [...o.coveredItemIds]
      let previous = o.previousOffloadId === null ? undefined : byId.get(o.previousOffloadId)
      while (previous !== undefined) {
        ids.push(previous.summaryItemId, ...previous.coveredItemIds)
        previous = previous.previousOffloadId === null ? undefined : byId.get(previous.previousOffloadId)
      }
      covers.set(o.summaryItemId, ids)
    }
  }
  /** `ids` (one request's history, in order) plus what its summaries cover that it does not name itself. */
  const withCovered = (ids: ReadonlyArray<string>): ReadonlyArray<string> => {
    if (covers.size === 0 || !ids.some((id) => covers.has(id))) return ids
    const named = new Set(ids)
    const covered = new Set<string>()
    for (const id of ids) for (const c of covers.get(id) ?? []) if (!named.has(c)) covered.add(c)
    return [...ids, ...covered]
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
        if (r.inlineHistory !== null) carried(r.nativeRef).push(...withCovered(inlineRefs(r).map((ref) => idOfRef.get(ref) ?? ref)))
      } else if (r.type === "inject") {
        carried(r.nativeRef).push(...withCovered(r.itemIds))
      }
    }
  }

  // What each run's turns re-emitted of a resumed native thread (the only output that may be skipped as a replay).
  const replayedOf = new Map<string, number>()
  for (const p of providers) for (const r of p.replays) replayedOf.set(r.runId, (replayedOf.get(r.runId) ?? 0) + r.items)

  // Well-formed requests: no history Baton sent carries a tool call without its result.
  for (const p of providers) {
    for (const r of p.received) {
      const found = pairingOf(r)
      if (found !== null) violations.push(found)
    }
  }

  const carriedSets = new Map<string, Set<string>>()
  const carriedSet = (ref: string) => {
    let set = carriedSets.get(ref)
    if (set === undefined) carriedSets.set(ref, set = new Set(carriedOf.get(ref) ?? []))
    return set
  }

  for (const { items, runs, events, deliveries, providerThreads, nativeThreads } of records) {
    // Tool pairing in the record: every tool call has a result (a call a turn left open is closed when recorded).
    const answered = new Set<string>()
    for (const i of items) if (i.kind === "tool_result" && i.toolCallId !== null) answered.add(i.toolCallId)
    for (const c of items) {
      if (c.kind === "tool_call" && c.toolCallId !== null && !answered.has(c.toolCallId)) {
        violations.push(`tool-pairing: tool call ${c.id} (${c.toolCallId}) has no result in the record`)
      }
    }

    // Lifecycle: one terminal event per run.
    const ended = new Map<string, Array<string>>()
    for (const e of events) {
      if (!terminalEvents.has(e.type)) continue
      const payload = e.payload as { readonly runId?: unknown; readonly stopPoint?: unknown }
      const runId = String(payload.runId)
      ended.set(runId, [...(ended.get(runId) ?? []), `${e.type}${payload.stopPoint === undefined ? "" : `/${String(payload.stopPoint)}`}`])
    }
    for (const [runId, ends] of ended) {
      if (ends.length > 1) violations.push(`lifecycle: run ${runId} ended ${ends.length} times (${ends.join(", ")})`)
    }

    // Nothing lost to the replay guard: a run's skipped output is at most what the provider replayed in its turns.
    for (const e of events) {
      if (e.type !== "items.replay_skipped") continue
      const payload = e.payload as { readonly runId: string; readonly count: number; readonly messageIds: ReadonlyArray<string> }
      const replayed = replayedOf.get(payload.runId) ?? 0
      if (payload.count > replayed) {
        violations.push(
          `nothing-lost: run ${payload.runId} had ${payload.count} item(s) of its output skipped as a replay ` +
            `(message ids ${payload.messageIds.join(", ") || "none"}), but its provider replayed ${replayed}: an answer was lost`
        )
      }
    }

    // Exactly once, as the providers saw it.
    const refOf = new Map<string, string>()
    const activeNatives = new Set<string>()
    for (const p of providerThreads) if (p.activeNativeThreadId !== null) activeNatives.add(p.activeNativeThreadId)
    for (const n of nativeThreads) refOf.set(n.id, n.nativeRef)
    const itemsOfRun = new Map<string, Array<Item>>()
    for (const i of items) {
      if (i.runId === null) continue
      const list = itemsOfRun.get(i.runId)
      if (list === undefined) itemsOfRun.set(i.runId, [i])
      else list.push(i)
    }
    const threadItems = new Set<string>(items.map((i) => i.id))
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
  return violations
}

/**
 * After a restart: no run is left unfinished (but a run waiting for the client's tool results), and every item read back before the crash is retrievable by id through
 * the store (invariant 6 across the crash). Each item is looked up at the first restart after it was read back, not
 * again at every later one: once retrievable, an item stays so unless its row is changed or deleted, which the audit
 * reports at the next step's `readRecords` (every column, the id included), or rows vanish without a trigger, which
 * its counts report. (Looking every item up again at each restart cost about 2% of a soak, for nothing more.)
 */
export const afterRestart = (memory: Memory) =>
  Effect.gen(function*() {
    const store = yield* ThreadStore
    // A run waiting for the client's tool results stays waiting across a restart (its wait is durable, no provider
    // turn is in flight: RunRecovery.recover); every other unfinished run is ended.
    const unfinished = (yield* store.listUnfinishedRuns()).filter((r) => r.status !== "waiting")
    const violations = unfinished.map((r) => `crash-safety: run ${r.id} (seq ${r.seq}) left ${r.status} after restart recovery`)
    const ids: Array<ItemId> = []
    for (const [threadId, items] of memory.items) {
      for (let i = memory.retrievable.get(threadId) ?? 0; i < items.length; i++) ids.push(items[i]!.id)
    }
    if (ids.length === 0) return violations
    const found = new Set<string>((yield* store.getItems(ids)).map((i) => i.id))
    for (const id of ids) if (!found.has(id)) violations.push(`crash-safety: item ${id}, committed before the crash, is not retrievable by id`)
    for (const [threadId, items] of memory.items) memory.retrievable.set(threadId, items.length)
    return violations
  })
