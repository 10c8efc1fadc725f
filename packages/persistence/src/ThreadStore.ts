/**
 * ThreadStore: the repository of the thread aggregate — threads, runs, run attempts, items, provider threads,
 * native threads, context handoffs, handoff deliveries, offload records, the thread event log and command receipts.
 *
 * It owns SQL and row encoding only. It does not decide anything: transactions are opened by the orchestration
 * service method that owns the unit of work (`sql.withTransaction`), and every query here joins the ambient
 * transaction. Every failure is a `PersistenceError` naming the operation.
 *
 * Hot-path queries (turn start) are indexed and do not scan the thread: open handoffs by target, deliveries by
 * native thread and status, runs by provider thread and seq range.
 */
import {
  ClientTool,
  Commands,
  ConcurrentModification,
  type ContextUsage,
  type ContextHandoff,
  type HandoffDelivery,
  type HandoffId,
  type Item,
  type ItemId,
  type NativeThread,
  type NativeThreadId,
  NativeThreadStatus,
  type NewThreadEvent,
  type Offload,
  PersistenceError,
  type ProviderInstance,
  type ProviderThread,
  type ProviderThreadId,
  type Run,
  type RunAttempt,
  type RunId,
  RunCost,
  type Thread,
  ThreadEvent,
  type ThreadEventOf,
  type ThreadEventType,
  type ThreadId,
  type ThreadLink,
  ToolResult,
  ToolResultOffloadControl,
  ToolWait
} from "@baton/contracts"
import { SqlClient } from "@effect/sql"
import { DateTime, Effect, FiberRef, Option, type ParseResult, Schema } from "effect"
import { EventIds } from "./EventIds.js"
import { contentionReason, isContention, orPersistence, withReason } from "./internal/errors.js"
import { decodeEvents, encodesToItself, stringifyFaithful } from "./internal/EventRows.js"
import { Count, JsonSamples } from "./internal/Rows.js"
import { pendingEvents, requireUnitOfWork } from "./UnitOfWork.js"
import { migrations } from "./Migrations.js"
import * as Table from "./internal/Table.js"
import {
  DeliveryRow,
  HandoffRow,
  decodeItemRowFast,
  encodeItemRowFast,
  ItemRow,
  NativeThreadRow,
  OffloadRow,
  ProviderThreadRow,
  RunAttemptRow,
  RunRow,
  ThreadLinkRow,
  ThreadRow
} from "./internal/Tables.js"

/**
 * The tokenizer calibration of one provider instance (`Calibration.Calibration` of `@baton/context` plus its key and
 * time): `ratio` provider tokens per Baton token, `samples` accepted, `weight` evidence held in Baton tokens,
 * `recent` the last accepted samples `{ratio, tokens}` oldest first (column `recent`, JSON text).
 */
export const ProviderCalibration = Schema.Struct({
  providerInstance: Schema.String,
  ratio: Schema.Number,
  samples: Schema.Int,
  weight: Schema.Int,
  recent: JsonSamples,
  updatedAt: Schema.DateTimeUtc
})
export type ProviderCalibration = typeof ProviderCalibration.Type
const decodeCalibration = Schema.decodeUnknown(ProviderCalibration)

/**
 * One orchestrator incarnation (a process, or a restart of the orchestrator within one): restart recovery
 * reconciles only the runs of drivers that are gone (see the orchestration `RunDriver`).
 */
export const DriverRecord = Schema.Struct({
  id: Schema.String,
  host: Schema.String,
  pid: Schema.Int,
  startedAt: Schema.DateTimeUtc,
  heartbeatAt: Schema.DateTimeUtc,
  stoppedAt: Schema.NullOr(Schema.DateTimeUtc)
})
export type DriverRecord = typeof DriverRecord.Type

/**
 * One `/offload` operation (migrations 0017, 0019): its id, thread and payload fingerprint, `status` (`running` until its
 * outcome is written, then the outcome), `result` (the encoded `OffloadReport`, `null` while running), and what its
 * summariser calls were billed (`calls` with reported usage, tokens, `costUsd` at the instance's prices or `null`),
 * `costState` `prepared` while running, then `committed` or `abandoned`.
 */
export const OffloadOperationRecord = Schema.Struct({
  operationId: Schema.String,
  threadId: Schema.String,
  fingerprint: Schema.String,
  status: Schema.String,
  result: Schema.NullOr(Schema.parseJson(Schema.Unknown)),
  providerInstance: Schema.NullOr(Schema.String),
  calls: Count,
  inputTokens: Count,
  cacheWriteTokens: Count,
  cacheReadTokens: Count,
  outputTokens: Count,
  costUsd: Schema.NullOr(Schema.Number),
  costState: Schema.Literal("prepared", "committed", "abandoned"),
  createdAt: Schema.DateTimeUtc,
  finishedAt: Schema.NullOr(Schema.DateTimeUtc),
  /** The driver (orchestrator incarnation) running it (migration 0019); `null` for rows written before. */
  driverId: Schema.optionalWith(Schema.NullOr(Schema.String), { default: () => null }),
  /** When a client asked to cancel it (migration 0019), `null` unless asked. */
  cancelRequestedAt: Schema.optionalWith(Schema.NullOr(Schema.DateTimeUtc), { default: () => null })
})
export type OffloadOperationRecord = typeof OffloadOperationRecord.Type
const decodeOperations = Schema.decodeUnknown(Schema.Array(OffloadOperationRecord))

/** A handoff with its bookkeeping flag: `open` while some destination still owes a delivery. */
export type StoredHandoff = ContextHandoff & { readonly open: boolean }

/** `{type, payload}` of every event type: what `appendEvent` validates and encodes. */
const EventBody = Schema.Union(
  ...ThreadEvent.members.map((member) => Schema.Struct({ type: member.fields.type, payload: member.fields.payload }))
)
const encodeAnyBody = Schema.encodeUnknown(EventBody)
/** The one member of `ThreadEvent` of each event type (types with one member, each a single literal). */
const memberOfType = (() => {
  const byType = new Map<string, (typeof ThreadEvent.members)[number]>()
  const shared = new Set<string>()
  for (const member of ThreadEvent.members) {
    for (const type of member.fields.type.literals as ReadonlyArray<unknown>) {
      if (typeof type !== "string" || byType.has(type)) shared.add(String(type))
      else byType.set(type, member)
    }
  }
  for (const type of shared) byType.delete(type)
  return byType
})()
/**
 * Per event type, its member's body encoder and event decoder: the union's own choice (its members are told apart by
 * `type`) made once, so an event is checked against its type's schema alone, not searched for among the union's.
 */
const bodyEncoders = new Map([...memberOfType].map(([type, member]) => [type, Schema.encodeUnknown(Schema.Struct({ type: member.fields.type, payload: member.fields.payload }))]))
const eventDecoders = new Map([...memberOfType].map(([type, member]) => [type, Schema.decodeUnknown(member as Schema.Schema<ThreadEvent, Schema.Schema.Encoded<typeof ThreadEvent>>)]))
/** `{type, payload}` validated and encoded (`EventBody`). Fails with `ParseError`. */
const encodeBody = (body: { readonly type: string; readonly payload: unknown }) =>
  (bodyEncoders.get(body.type) ?? encodeAnyBody)(body) as ReturnType<typeof encodeAnyBody>
const ReceiptRow = Schema.Struct({ ...Commands.CommandReceipt.fields, result: Schema.parseJson(Schema.Unknown) })
const NextSeq = Schema.Array(Schema.Struct({ next: Count }))
/** `RETURNING seq` rows. */
const SeqRows = Schema.Array(Schema.Struct({ seq: Count }))
/** What `appendEvent`'s insert returns: the keys the database assigned (`globalSeq` a bigint string on Postgres). */
const decodeAssigned = Schema.decodeUnknown(Schema.Array(Schema.Struct({ globalSeq: Count, seq: Count })))
const decodeAnyEvent = Schema.decodeUnknown(ThreadEvent)
/**
 * The event types whose payload schema `encodesToItself`: an appended event of one of them is handed to the caller and
 * the bus as `JSON.parse` of the payload text written (what a read of the row decodes to), not decoded back.
 */
const payloadIsItsRow = new Set([...memberOfType].filter(([, member]) => encodesToItself(member.fields.payload.ast)).map(([type]) => type))
const decodeCreatedAt = Schema.decodeUnknown(Schema.DateTimeUtc)
/** A stored event decoded (`ThreadEvent`, by its type's member when its type is known). Fails with `ParseError`. */
const decodeEvent = (event: { readonly type: string } & Record<string, unknown>) =>
  (eventDecoders.get(event.type) ?? decodeAnyEvent)(event) as ReturnType<typeof decodeAnyEvent>
const decodeNative = Schema.decodeUnknown(NativeThreadRow)
const ToolsRow = Schema.Struct({ tools: Schema.parseJson(Schema.Array(ClientTool)) })
const decodeTools = Schema.decodeUnknown(Schema.Array(ToolsRow))
const decodeThreadRows = Schema.decodeUnknown(Schema.Array(ThreadRow))
const decodeProviderThread = Schema.decodeUnknown(ProviderThreadRow)
/**
 * The columns of a joined table that a query aliased with `prefix` (`pt_id AS …`, camel-cased by the client to
 * `ptId`), without it: `{ id, … }`, the row as that table's own schema decodes it. Other columns are left out.
 */
const unprefixed = (row: Record<string, unknown>, prefix: string): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(row)) {
    const rest = key.slice(prefix.length)
    if (key.startsWith(prefix) && /^[A-Z]/.test(rest)) out[rest[0]!.toLowerCase() + rest.slice(1)] = value
  }
  return out
}
const decodeRunRows = Schema.decodeUnknown(Schema.Array(RunRow))
const decodeNextRunSeq = Schema.decodeUnknown(Schema.Array(Schema.Struct({ nextRunSeq: Count })))
const decodeAttemptCounts = Schema.decodeUnknown(Schema.Array(Schema.Struct({ attemptCount: Count })))
/** `EXISTS (...)` as a result column: Postgres answers a boolean, SQLite `0` or `1`. */
const decodePromptsOwed = Schema.decodeUnknown(Schema.Array(Schema.Struct({ promptsOwed: Schema.Union(Schema.Boolean, Schema.Number) })))
/** What a statement ending a run answered (`promptsOwedReturning`): whether a run of its thread owes its prompt. */
const promptsOwedOf = (rows: ReadonlyArray<{ readonly promptsOwed: boolean | number }>) => rows.length > 0 && Boolean(rows[0]!.promptsOwed)
const decodeDeclaredTools = Schema.decodeUnknown(Schema.Array(Schema.Struct({ declaredTools: Schema.NullOr(ToolsRow.fields.tools) })))
const OffloadControlRow = Schema.Struct({ control: Schema.parseJson(ToolResultOffloadControl) })
const decodeOffloadControl = Schema.decodeUnknown(Schema.Array(OffloadControlRow))
/**
 * One entry of an offload's archive (migration 0018): an original the offload's summary replaced, by id, with its seq
 * in the thread and its rendered tokens (`Render.itemTokens`).
 */
export interface OffloadArchiveEntry {
  readonly itemId: ItemId
  readonly seq: number
  readonly tokens: number
}

/** A `tool_waits` row: the lists as JSON text. */
const ToolWaitRow = Schema.Struct({
  ...ToolWait.fields,
  calls: Schema.parseJson(ToolWait.fields.calls),
  held: Schema.parseJson(ToolWait.fields.held),
  results: Schema.NullOr(Schema.parseJson(Schema.Array(ToolResult)))
})
const decodeWaits = Schema.decodeUnknown(Schema.Array(ToolWaitRow))
// The row decoders below are built once: a schema built inside a call is a new AST each time, and the parser
// compiled for it (cached by AST) was compiled again at every call.
const decodeRunDrivers = Schema.decodeUnknown(Schema.Array(Schema.Struct({ id: Schema.String, driverId: Schema.NullOr(Schema.String) })))
const decodeRunIds = Schema.decodeUnknown(Schema.Array(Schema.Struct({ id: Schema.String })))
const decodeItemRefRows = Schema.decodeUnknown(Schema.Array(Schema.Struct({
  messageId: Schema.NullOr(Schema.String),
  toolCallId: Schema.NullOr(Schema.String),
  kind: Schema.String,
  text: Schema.String
})))
const decodeNativeStatusRows = Schema.decodeUnknown(Schema.Array(Schema.Struct({ status: NativeThreadStatus })))
const decodeDrivers = Schema.decodeUnknown(Schema.Array(DriverRecord))
const decodeHandoffRows = Schema.decodeUnknown(Schema.Array(HandoffRow))
const decodeDeliveryRows = Schema.decodeUnknown(Schema.Array(DeliveryRow))
const decodeCalibrations = Schema.decodeUnknown(Schema.Array(ProviderCalibration))
const decodeRunCosts = Schema.decodeUnknown(Schema.Array(RunCost))
const decodeStatusCounts = Schema.decodeUnknown(Schema.Array(Schema.Struct({ status: Schema.String, n: Count })))
const decodeItemTotals = Schema.decodeUnknown(Schema.Array(Schema.Struct({ n: Count, tokens: Count })))
const decodeHandoffTotals = Schema.decodeUnknown(Schema.Array(Schema.Struct({ n: Count, open: Count })))
const decodeApplied = Schema.decodeUnknown(Schema.Array(Schema.Struct({ applied: Schema.NullOr(Count) })))
const decodeReceipts = Schema.decodeUnknown(Schema.Array(ReceiptRow))
const decodeNextSeq = Schema.decodeUnknown(NextSeq)
const decodeSeqRows = Schema.decodeUnknown(SeqRows)
/**
 * The `seq`s of `RETURNING seq` rows: read directly when every one is a number (SQLite; Postgres `INTEGER`), else
 * through `SeqRows` (a `ParseError` for a row it does not take). The walk cost about 0.5 µs a row, 50 ms for the
 * 100,000 items a gateway conversation's first request stores.
 */
const seqsOf = (rows: ReadonlyArray<unknown>): Effect.Effect<ReadonlyArray<number>, ParseResult.ParseError> => {
  const seqs: Array<number> = new Array(rows.length)
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]
    const seq = typeof row === "object" && row !== null ? (row as { readonly seq?: unknown }).seq : undefined
    if (typeof seq !== "number") return Effect.map(decodeSeqRows(rows), (decoded) => decoded.map((r) => r.seq))
    seqs[i] = seq
  }
  return Effect.succeed(seqs)
}
/** The id of the newest migration this build registers (`0009_…` is 9). */
const latestMigration = Math.max(...Object.keys(migrations).map((k) => Number(k.slice(0, k.indexOf("_")))))

export class ThreadStore extends Effect.Service<ThreadStore>()("@baton/persistence/ThreadStore", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const threads = Table.make(sql, "threads", ThreadRow)
    const runs = Table.make(sql, "runs", RunRow)
    // What a statement that ends a run answers besides: does any run of its thread owe its prompt (a probe of
    // migration 0022's partial index; `updateRunEnded`, `updateRunIfRunning`).
    const promptsOwedReturning =
      sql`RETURNING EXISTS (SELECT 1 FROM runs AS owing WHERE owing.thread_id = runs.thread_id AND owing.prompt_owed = 1) AS prompts_owed`
    const attempts = Table.make(sql, "run_attempts", RunAttemptRow)
    const items = Table.make(sql, "items", ItemRow, decodeItemRowFast)
    const encodeItemRow = Schema.encode(ItemRow)
    const providerThreads = Table.make(sql, "provider_threads", ProviderThreadRow)
    const nativeThreads = Table.make(sql, "native_threads", NativeThreadRow)
    const handoffs = Table.make(sql, "handoffs", HandoffRow)
    /** Rows of handoffs' `source_run_ids` alone, decoded as the handoff row's column is. */
    const decodeSourceRunIds = Schema.decodeUnknown(Schema.Array(Schema.Struct({ sourceRunIds: HandoffRow.fields.sourceRunIds })))
    const deliveries = Table.make(sql, "handoff_deliveries", DeliveryRow)
    const links = Table.make(sql, "thread_links", ThreadLinkRow)
    const offloads = Table.make(sql, "offloads", OffloadRow)
    const eventIds = yield* EventIds
    const readEvents = (operation: string, query: Effect.Effect<ReadonlyArray<unknown>, { readonly message: string; readonly _tag: string }>) =>
      Effect.flatMap(query, decodeEvents).pipe(orPersistence(operation))

    const nextSeq = (operation: string, query: Effect.Effect<ReadonlyArray<unknown>, { readonly message: string; readonly _tag: string }>) =>
      Effect.flatMap(query, decodeNextSeq).pipe(
        Effect.map((rows) => Number(rows[0]?.next ?? 1)),
        orPersistence(operation)
      )

    /** Items per statement of `insertItemsAfterLast` (12 parameters each). */
    const itemPage = 500

    /** Runs per statement of `listRunsBetween`. */
    const runPage = 1_000
    // The sort key that puts a thread's run in progress before the runs queued behind it (`findActiveRun`).
    const inProgressFirst = sql.literal("CASE WHEN status = 'queued' THEN 1 ELSE 0 END")

    /**
     * `f` over `ids` in chunks of 500 (one statement each: SQLite binds at most 32,766 parameters, and a statement
     * that long costs more to prepare than it saves), the results concatenated in chunk order. Between chunks the
     * fiber yields (`Effect.yieldNow`; under the CLI's `timeSliced` scheduler a turn of the event loop once 10 ms of
     * work went by without one): on SQLite a statement is synchronous, and a read of a long thread's items (a turn
     * start that owes a replacement native thread a 10,000-item history: 20 statements and their rows decoded, 0.4 s
     * in all) otherwise held every socket write back until it ended, live event streams included (the dashboard's
     * bench: an event committed just before it reached the page 0.6 s later).
     */
    const inChunks = <A>(ids: ReadonlyArray<string>, f: (chunk: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<A>, PersistenceError | ConcurrentModification>) =>
      Effect.map(
        Effect.forEach(chunk(ids, 500), (part, i) => i === 0 ? f(part) : Effect.zipRight(Effect.yieldNow(), f(part))),
        (parts) => parts.flat()
      )

    /** The store's `appendEvents` (documented there); `appendEvent` is it for one event. */
    const appendEvents = (events: ReadonlyArray<NewThreadEvent>) =>
      Effect.gen(function*() {
        const threadId = events[0]?.threadId
        if (threadId === undefined) return [] as ReadonlyArray<ThreadEvent>
        if ((yield* FiberRef.get(requireUnitOfWork)) && (yield* FiberRef.get(pendingEvents)) === null) {
          return yield* Effect.dieMessage(`thread event ${events.map((e) => e.type).join(", ")} on ${threadId} appended outside a unit of work`)
        }
        if (events.some((e) => e.threadId !== threadId)) {
          return yield* new PersistenceError({ operation: "thread_events.append", detail: "a batch of events of several threads" })
        }
        const bodies = yield* Effect.forEach(events, (e) => encodeBody({ type: e.type, payload: e.payload })).pipe(orPersistence("thread_events.encode"))
        const createdAt = DateTime.formatIso(yield* DateTime.now)
        const rows = events.map((e, i) => {
          const body = bodies[i]!
          const { faithful, text } = stringifyFaithful(body.payload)
          return { eventId: eventIds.next(), commandId: e.commandId ?? null, body, text, asRow: faithful && payloadIsItsRow.has(body.type) }
        })
        // One statement: each row's `seq` is the thread's last before the statement plus its place (every arm reads the
        // table as it was before the insert, on SQLite and Postgres alike), under the thread's lock (see UnitOfWork).
        const arms = rows.map((r, i) =>
          sql`SELECT ${r.eventId}, ${threadId}, COALESCE(MAX(seq), 0) + ${sql.literal(String(i + 1))}, ${r.commandId}, ${r.body.type},
            ${r.text}, ${createdAt}
            FROM thread_events WHERE thread_id = ${threadId}`
        )
        const assigned = yield* sql`INSERT INTO thread_events (event_id, thread_id, seq, command_id, type, payload, created_at)
          ${sql.join(" UNION ALL ", false)(arms)}
          RETURNING global_seq, seq`.pipe(
          Effect.catchTag("SqlError", (e): Effect.Effect<never, ConcurrentModification | PersistenceError> =>
            isContention(e)
              ? Effect.fail(new ConcurrentModification(withReason({ threadId, operation: "thread_events.append" }, contentionReason(e))))
              : Effect.fail(new PersistenceError({ operation: "thread_events.append", detail: String(e.message) }))),
          Effect.flatMap(decodeAssigned),
          orPersistence("thread_events.append")
        )
        if (assigned.length !== rows.length) {
          return yield* new PersistenceError({ operation: "thread_events.append", detail: `the insert returned ${assigned.length} rows for ${rows.length} events` })
        }
        // The rows come back in no promised order: each is matched to its event by its `seq` (the smallest is the first).
        const first = Math.min(...assigned.map((a) => a.seq))
        const globalOf = new Map(assigned.map((a) => [a.seq - first, a.globalSeq]))
        // What a read of each row decodes to. When the payload's schema `encodesToItself` and its text is faithful JSON,
        // that is the text parsed (the encode checked it against the same schema), with the envelope's values: the
        // decode's walk is skipped (ThreadEvents.test compares each published event with the one read back).
        const created = rows.some((r) => r.asRow) ? yield* decodeCreatedAt(createdAt).pipe(orPersistence("thread_events.append")) : undefined
        const appended = yield* Effect.forEach(rows, (r, i) =>
          r.asRow && created !== undefined && globalOf.has(i)
            ? Effect.succeed({
              eventId: r.eventId,
              threadId,
              seq: first + i,
              globalSeq: globalOf.get(i),
              commandId: r.commandId,
              createdAt: created,
              type: r.body.type,
              payload: JSON.parse(r.text)
            } as ThreadEvent)
            : decodeEvent({
              eventId: r.eventId,
              threadId,
              seq: first + i,
              globalSeq: globalOf.get(i),
              commandId: r.commandId,
              type: r.body.type,
              payload: r.body.payload,
              createdAt
            })).pipe(orPersistence("thread_events.append"))
        const pending = yield* FiberRef.get(pendingEvents)
        if (pending !== null) pending.push(...appended)
        return appended as ReadonlyArray<ThreadEvent>
      })

    return {
      // ---- threads
      insertThread: (t: Thread) => threads.insert(t),
      updateThread: (t: Thread) => threads.update(t),
      getThread: (id: ThreadId) => threads.findOne("threads.get", sql`SELECT * FROM threads WHERE id = ${id}`),
      /**
       * Everything a run's queueing reads, in one statement: thread `id`, the client tools it declared at creation
       * (`tools`, `[]`: none), its active provider thread (`providerThread`, as `getProviderThread` reads it; `None`
       * when the thread has none or it is missing), its run in progress (`active`, as `findActiveRun` reads it; `None`:
       * no unfinished run) and the seq a new run of the thread takes (`nextSeq`, as `nextRunSeq` reads it: `1` for its
       * first). `None`: no such thread.
       */
      getThreadForQueue: (id: ThreadId) =>
        Effect.gen(function*() {
          const rows = yield* sql`SELECT threads.*, thread_tools.tools AS declared_tools,
                pt.id AS pt_id, pt.thread_id AS pt_thread_id, pt.provider_instance AS pt_provider_instance,
                pt.model AS pt_model, pt.context_window AS pt_context_window,
                pt.active_native_thread_id AS pt_active_native_thread_id, pt.synced_run_seq AS pt_synced_run_seq,
                pt.created_at AS pt_created_at, pt.updated_at AS pt_updated_at,
                (SELECT COALESCE(MAX(seq), 0) + 1 FROM runs WHERE thread_id = ${id}) AS next_run_seq,
                ar.id AS ar_id, ar.thread_id AS ar_thread_id, ar.seq AS ar_seq, ar.provider_thread_id AS ar_provider_thread_id,
                ar.status AS ar_status, ar.prompt AS ar_prompt, ar.stop_point AS ar_stop_point,
                ar.failure_reason AS ar_failure_reason, ar.failure_code AS ar_failure_code,
                ar.native_thread_id AS ar_native_thread_id, ar.created_at AS ar_created_at, ar.updated_at AS ar_updated_at
              FROM threads
              LEFT JOIN thread_tools ON thread_tools.thread_id = threads.id
              LEFT JOIN provider_threads pt ON pt.id = threads.active_provider_thread_id
              LEFT JOIN (SELECT * FROM runs WHERE thread_id = ${id}
                AND status IN ('queued', 'starting', 'running', 'waiting') ORDER BY ${inProgressFirst}, seq LIMIT 1) AS ar ON 1 = 1
              WHERE threads.id = ${id}`
          if (rows.length === 0) {
            return Option.none<{
              readonly thread: Thread
              readonly tools: ReadonlyArray<ClientTool>
              readonly providerThread: Option.Option<ProviderThread>
              readonly active: Option.Option<Run>
              readonly nextSeq: number
            }>()
          }
          const [thread] = yield* decodeThreadRows(rows)
          const [declared] = yield* decodeDeclaredTools(rows)
          const [next] = yield* decodeNextRunSeq(rows)
          const row = rows[0] as Record<string, unknown>
          const providerThread = row.ptId === null || row.ptId === undefined
            ? Option.none<ProviderThread>()
            : Option.some(yield* decodeProviderThread(unprefixed(row, "pt")))
          const active = row.arId === null || row.arId === undefined
            ? Option.none<Run>()
            : Option.some((yield* decodeRunRows([unprefixed(row, "ar")]))[0]!)
          return Option.some({ thread: thread!, tools: declared!.declaredTools ?? [], providerThread, active, nextSeq: next!.nextRunSeq })
        }).pipe(orPersistence("threads.getForQueue")),
      listThreads: () => threads.findAll("threads.list", sql`SELECT * FROM threads ORDER BY created_at, id`),
      /**
       * Records that thread `id` is a sub-agent spawned by thread `parentThreadId` (`threads.parent_thread_id`,
       * migration 0021; a gateway conversation whose agent named the conversation it runs under). Not a fork's parent:
       * forks and merges are links (`listLinks`).
       */
      setThreadParent: (id: ThreadId, parentThreadId: ThreadId) =>
        sql`UPDATE threads SET parent_thread_id = ${parentThreadId} WHERE id = ${id}`.pipe(Effect.asVoid, orPersistence("threads.setParent")),
      /** The thread that spawned thread `id` as a sub-agent (`None`: none, or no such thread). */
      getThreadParent: (id: ThreadId) =>
        Effect.map(
          sql<{ readonly parentThreadId: string | null }>`SELECT parent_thread_id FROM threads WHERE id = ${id}`,
          (rows) => Option.fromNullable(rows[0]?.parentThreadId ?? null).pipe(Option.map((p) => p as ThreadId))
        ).pipe(orPersistence("threads.getParent")),
      /** The sub-agent threads thread `id` spawned (see `setThreadParent`), oldest first (by `createdAt`, then `id`). */
      listSubThreads: (id: ThreadId) =>
        threads.findAll("threads.listSub", sql`SELECT * FROM threads WHERE parent_thread_id = ${id} ORDER BY created_at, id`),

      // ---- runs
      /** Inserts a run; `driverId`: the driver that accepted it (see `setRunDriver`), written in the same statement. */
      insertRun: (r: Run, driverId: string | null = null) =>
        driverId === null ? runs.insert(r) : Effect.flatMap(
          Schema.encode(RunRow)(r),
          (row) => sql`INSERT INTO runs ${sql.insert({ ...row, driverId })}`
        ).pipe(Effect.asVoid, orPersistence("runs.insert")),
      /**
       * Inserts a run as the thread's next (`nextRunSeq` and `insertRun` in one statement: its `seq` is the thread's
       * highest plus one, read by the insert itself) and returns the run as written. `driverId` as for `insertRun`.
       * Must run under the thread's lock (a unit of work), as a caller of `nextRunSeq` must; a lost race is the
       * `(thread_id, seq)` unique violation, a `ConcurrentModification` once the unit of work maps it.
       */
      insertNextRun: (r: Omit<Run, "seq">, driverId: string | null = null) =>
        Effect.gen(function*() {
          // Encoded with a placeholder seq (the statement computes it), then written without it.
          const { seq: _, ...row } = yield* Schema.encode(RunRow)({ ...r, seq: 1 } as Run)
          const values: Record<string, unknown> = driverId === null ? row : { ...row, driverId }
          const columns = Object.keys(values)
          const rows = yield* sql`INSERT INTO runs (${sql.join(", ", false)(columns.map((c) => sql`${sql(c)}`))}, seq)
            VALUES (${sql.join(", ", false)(columns.map((c) => sql`${values[c] as string | null}`))},
              (SELECT COALESCE(MAX(seq), 0) + 1 FROM runs WHERE thread_id = ${r.threadId}))
            RETURNING seq`
          const [assigned] = yield* decodeSeqRows(rows)
          return { ...r, seq: assigned!.seq } as Run
        }).pipe(orPersistence("runs.insert")),
      updateRun: (r: Run) => runs.update(r),
      /**
       * `updateRun` of a run that ends (moves to a terminal status), answering in the same statement whether any run of
       * its thread owes its prompt (`prompt_owed`, see `setPromptOwed`): `true` then, and the caller records the prompts
       * now due (`RunLifecycle.recordOwedPrompts`). One statement: the question is a probe of a partial index (migration
       * 0022), so a run's end costs no statement more for it.
       */
      updateRunEnded: (r: Run) =>
        Effect.map(runs.updateReturning(r, promptsOwedReturning, decodePromptsOwed, "runs.updateEnded"), promptsOwedOf),
      /**
       * Moves run `id` from `running` to `status` (`updatedAt` its time) in one statement, nothing read back but
       * whether any run of its thread owes its prompt (as `updateRunEnded`): `moved` is `false` when the run is not
       * `running` (another path ended it, or it is not there). For a caller that wrote the run itself and needs no other
       * field changed (the gateway's answer); the legality of the move (`RunLifecycle`'s table: `running` to
       * `completed`) is the caller's, and so is recording the prompts owed (`promptsOwed`).
       */
      updateRunIfRunning: (id: RunId, status: "completed", updatedAt: DateTime.Utc) =>
        Effect.flatMap(
          sql`UPDATE runs SET status = ${status}, updated_at = ${DateTime.formatIso(updatedAt)}
            WHERE id = ${id} AND status = 'running'
            ${promptsOwedReturning}`,
          decodePromptsOwed
        ).pipe(
          Effect.map((rows) => ({ moved: rows.length > 0, promptsOwed: promptsOwedOf(rows) })),
          orPersistence("runs.updateIfRunning")
        ),
      /**
       * Marks run `runId` as owing its prompt (`owed`: it ended while queued behind an unfinished run, its prompt not
       * yet recorded) or clears the mark (its prompt has just been recorded). A merge's synthetic run written behind an
       * unfinished run owes its copied history the same way (`ThreadLineage.mergeBack`). In the caller's unit of work,
       * with the run's end or the prompt's item. See migration 0022.
       */
      setPromptOwed: (runId: RunId, owed: boolean) =>
        sql`UPDATE runs SET prompt_owed = ${owed ? 1 : 0} WHERE id = ${runId}`.pipe(Effect.asVoid, orPersistence("runs.setPromptOwed")),
      /** The runs of `threadId` that owe their prompt (`setPromptOwed`), in seq order (none on almost every thread). */
      listPromptOwedRuns: (threadId: ThreadId) =>
        runs.findAll("runs.listPromptOwed", sql`SELECT * FROM runs WHERE thread_id = ${threadId} AND prompt_owed = 1 ORDER BY seq`),
      /** The ids of the threads with a run that owes its prompt (restart reconciliation: `RunRecovery.recover`). */
      listThreadsOwingPrompts: () =>
        Effect.map(
          sql<{ readonly threadId: string }>`SELECT DISTINCT thread_id FROM runs WHERE prompt_owed = 1`,
          (rows) => rows.map((r) => r.threadId as ThreadId)
        ).pipe(orPersistence("runs.listThreadsOwingPrompts")),
      getRun: (id: RunId) => runs.findOne("runs.get", sql`SELECT * FROM runs WHERE id = ${id}`),
      /**
       * Run `id` with the number of its attempts (`listAttempts(id).length`), in one statement (an attempt's start
       * needs both). `None`: no such run.
       */
      getRunWithAttemptCount: (id: RunId) =>
        Effect.gen(function*() {
          const rows = yield* sql`SELECT runs.*, (SELECT COUNT(*) FROM run_attempts WHERE run_attempts.run_id = runs.id) AS attempt_count
              FROM runs WHERE runs.id = ${id}`
          if (rows.length === 0) return Option.none<{ readonly run: Run; readonly attempts: number }>()
          const [run] = yield* decodeRunRows(rows)
          const [counted] = yield* decodeAttemptCounts(rows)
          return Option.some({ run: run!, attempts: counted!.attemptCount })
        }).pipe(orPersistence("runs.getWithAttemptCount")),
      /**
       * Moves run `id` from `starting` to `running` on native thread `nativeThreadId` (with `updatedAt`), only if it is
       * `starting`, in one statement that also counts its attempts so far. `None`: nothing written (the run is not
       * `starting`, or there is no such run). The status check is `RunLifecycle`'s to make (it calls this).
       */
      updateRunRunningIfStarting: (id: RunId, nativeThreadId: NativeThreadId, updatedAt: DateTime.Utc) =>
        Effect.gen(function*() {
          const rows = yield* sql`UPDATE runs SET status = 'running', native_thread_id = ${nativeThreadId}, updated_at = ${DateTime.formatIso(updatedAt)}
              WHERE id = ${id} AND status = 'starting'
              RETURNING (SELECT COUNT(*) FROM run_attempts WHERE run_attempts.run_id = runs.id) AS attempt_count`
          if (rows.length === 0) return Option.none<number>()
          const [counted] = yield* decodeAttemptCounts(rows)
          return Option.some(counted!.attemptCount)
        }).pipe(orPersistence("runs.startIfStarting")),
      nextRunSeq: (threadId: ThreadId) =>
        nextSeq("runs.nextSeq", sql`SELECT COALESCE(MAX(seq), 0) + 1 AS next FROM runs WHERE thread_id = ${threadId}`),
      listRuns: (threadId: ThreadId) =>
        runs.findAll("runs.list", sql`SELECT * FROM runs WHERE thread_id = ${threadId} ORDER BY seq`),
      /** Runs of a thread with `afterSeq < seq < beforeSeq`, in order. */
      listRunsBetween: (threadId: ThreadId, afterSeq: number, beforeSeq: number) =>
        Effect.gen(function*() {
          // Pages of `runPage` by seq, yielding between them (as `inChunks` does, for the same reason: a replacement
          // native thread is owed every earlier run; 5,000 runs read and decoded at once held the event loop 0.1 s).
          const out: Array<Run> = []
          for (let after = afterSeq;;) {
            if (out.length > 0) yield* Effect.yieldNow()
            const page = yield* runs.findAll(
              "runs.listBetween",
              sql`SELECT * FROM runs WHERE thread_id = ${threadId} AND seq > ${after} AND seq < ${beforeSeq} ORDER BY seq LIMIT ${runPage}`
            )
            out.push(...page)
            if (page.length < runPage) return out
            after = page[page.length - 1]!.seq
          }
        }),
      /** Runs of a thread with `seq > afterSeq`, in order (no upper bound: no sentinel is bound into a query). */
      listRunsAfter: (threadId: ThreadId, afterSeq: number) =>
        runs.findAll(
          "runs.listAfter",
          sql`SELECT * FROM runs WHERE thread_id = ${threadId} AND seq > ${afterSeq} ORDER BY seq`
        ),
      /** Records the driver that accepted (and drives) a run. */
      /**
       * Corrects a run recorded as never read by the provider (`stop_point = 'before_provider'`, e.g. an interrupt that
       * read the native thread back just before the turn reached it) to read on `nativeThreadId`: output of the
       * turn arrived, which proves it. One conditional statement; a run recorded otherwise is left as it is.
       */
      markRunRead: (runId: RunId, nativeThreadId: NativeThreadId, updatedAt: DateTime.Utc) =>
        sql`UPDATE runs SET stop_point = 'after_provider', native_thread_id = ${nativeThreadId}, updated_at = ${DateTime.formatIso(updatedAt)}
            WHERE id = ${runId} AND stop_point = 'before_provider'`.pipe(Effect.asVoid, orPersistence("runs.markRead")),
      setRunDriver: (runId: RunId, driverId: string) =>
        sql`UPDATE runs SET driver_id = ${driverId} WHERE id = ${runId}`.pipe(Effect.asVoid, orPersistence("runs.setDriver")),
      /** The driver of each run of `runIds` (`null`: accepted before drivers were recorded). */
      runDrivers: (runIds: ReadonlyArray<RunId>) =>
        inChunks(runIds, (c) =>
          Effect.flatMap(
            sql`SELECT id, driver_id FROM runs WHERE ${sql.in("id", c)}`,
            decodeRunDrivers
          ).pipe(orPersistence("runs.drivers"))).pipe(
            Effect.map((rows) => new Map(rows.map((r) => [r.id, r.driverId])))
          ),
      /**
       * Records that a client asked to interrupt run `runId` at `at` while another process drives it (migration
       * 0023; the first request's time is kept), if the run is `running` (the caller read it so under the thread's
       * lock); its driver sees the request (`runsInterruptRequested`).
       */
      requestRunInterrupt: (runId: RunId, at: DateTime.Utc) =>
        sql`UPDATE runs SET interrupt_requested_at = COALESCE(interrupt_requested_at, ${DateTime.formatIso(at)})
            WHERE id = ${runId} AND status = 'running'`.pipe(Effect.asVoid, orPersistence("runs.requestInterrupt")),
      /**
       * Which of `runIds` are `running` with an interrupt requested by another process (`requestRunInterrupt`): the
       * runs their driver must stop. One statement per chunk of ids.
       */
      runsInterruptRequested: (runIds: ReadonlyArray<RunId>) =>
        inChunks(runIds, (c) =>
          Effect.flatMap(
            sql`SELECT id FROM runs WHERE ${sql.in("id", c)} AND status = 'running' AND interrupt_requested_at IS NOT NULL`,
            decodeRunIds
          ).pipe(orPersistence("runs.interruptRequested"))).pipe(
            Effect.map((rows) => rows.map((r) => r.id as RunId))
          ),
      /**
       * The run that keeps a command from running now (the run a `RunInProgress` names, the one to interrupt): the
       * thread's unfinished run that is in progress (`starting`, `running`, `waiting`; the driver runs one at a time,
       * lowest seq first), else its first `queued` run, the one that runs next. `None`: every run ended. Never a run
       * queued behind the one in progress: interrupting that one would leave the blocking run running.
       */
      findActiveRun: (threadId: ThreadId) =>
        runs.findOne(
          "runs.findActive",
          sql`SELECT * FROM runs WHERE thread_id = ${threadId}
              AND status IN ('queued', 'starting', 'running', 'waiting') ORDER BY ${inProgressFirst}, seq LIMIT 1`
        ),

      /** The thread's unfinished run with the lowest seq: the one that runs next (or is running). */
      findFirstUnfinishedRun: (threadId: ThreadId) =>
        runs.findOne(
          "runs.findFirstUnfinished",
          sql`SELECT * FROM runs WHERE thread_id = ${threadId}
              AND status IN ('queued', 'starting', 'running', 'waiting') ORDER BY seq LIMIT 1`
        ),
      /** Every run of every thread that is not terminal (after a crash: the runs to reconcile). */
      listUnfinishedRuns: () =>
        runs.findAll(
          "runs.listUnfinished",
          sql`SELECT * FROM runs WHERE status IN ('queued', 'starting', 'running', 'waiting') ORDER BY thread_id, seq`
        ),

      // ---- client tools
      /** Records the tools thread `threadId` declared (at creation). */
      setThreadTools: (threadId: ThreadId, tools: ReadonlyArray<ClientTool>) =>
        Effect.flatMap(Schema.encode(ToolsRow)({ tools }), (row) =>
          sql`INSERT INTO thread_tools ${sql.insert({ threadId, tools: row.tools })}`).pipe(Effect.asVoid, orPersistence("thread_tools.set")),
      /** The tools thread `threadId` declared (`[]`: none). */
      getThreadTools: (threadId: ThreadId) =>
        Effect.flatMap(sql`SELECT tools FROM thread_tools WHERE thread_id = ${threadId}`, decodeTools).pipe(
          Effect.map((rows) => rows[0]?.tools ?? []),
          orPersistence("thread_tools.get")
        ),
      // ---- tool-result offload control
      /** Replaces thread `threadId`'s tool-result offload control (`ToolResultOffloadControl`). */
      setOffloadControl: (threadId: ThreadId, control: ToolResultOffloadControl) =>
        Effect.gen(function*() {
          const row = yield* Schema.encode(OffloadControlRow)({ control })
          const updatedAt = new Date().toISOString()
          yield* sql`DELETE FROM thread_offload_controls WHERE thread_id = ${threadId}`
          yield* sql`INSERT INTO thread_offload_controls ${sql.insert({ threadId, control: row.control, updatedAt })}`
        }).pipe(orPersistence("thread_offload_controls.set")),
      /** Thread `threadId`'s tool-result offload control (`{}`: it set none and inherits its instance's). */
      getOffloadControl: (threadId: ThreadId) =>
        Effect.flatMap(sql`SELECT control FROM thread_offload_controls WHERE thread_id = ${threadId}`, decodeOffloadControl).pipe(
          Effect.map((rows): ToolResultOffloadControl => rows[0]?.control ?? {}),
          orPersistence("thread_offload_controls.get")
        ),
      /** Records the tools run `runId` offers (written when it is queued). */
      setRunTools: (runId: RunId, tools: ReadonlyArray<ClientTool>) =>
        Effect.flatMap(Schema.encode(ToolsRow)({ tools }), (row) =>
          sql`INSERT INTO run_tools ${sql.insert({ runId, tools: row.tools })}`).pipe(Effect.asVoid, orPersistence("run_tools.set")),
      /** The tools run `runId` offers (`[]`: none). */
      getRunTools: (runId: RunId) =>
        Effect.flatMap(sql`SELECT tools FROM run_tools WHERE run_id = ${runId}`, decodeTools).pipe(
          Effect.map((rows) => rows[0]?.tools ?? []),
          orPersistence("run_tools.get")
        ),
      /** Writes run `w.runId`'s wait (inserted at its first round, replaced at each later one and on every change). */
      putToolWait: (w: ToolWait) =>
        Effect.flatMap(Schema.encode(ToolWaitRow)(w), (row) =>
          sql`INSERT INTO tool_waits ${sql.insert(row)}
              ON CONFLICT (run_id) DO UPDATE SET native_thread_id = ${row.nativeThreadId}, state = ${row.state},
              calls = ${row.calls}, held = ${row.held}, results = ${row.results}, round = ${row.round},
              deadline_at = ${row.deadlineAt}, updated_at = ${row.updatedAt}`).pipe(Effect.asVoid, orPersistence("tool_waits.put")),
      /** Run `runId`'s wait, if it ever waited. */
      getToolWait: (runId: RunId) =>
        Effect.flatMap(sql`SELECT * FROM tool_waits WHERE run_id = ${runId}`, decodeWaits).pipe(
          Effect.map((rows) => Option.fromNullable(rows[0])),
          orPersistence("tool_waits.get")
        ),
      /** The waits not over (`open` or `answered`), oldest deadline first: what a driver watches after a restart. */
      listLiveToolWaits: () =>
        Effect.flatMap(sql`SELECT * FROM tool_waits WHERE state IN ('open', 'answered') ORDER BY deadline_at, run_id`, decodeWaits).pipe(
          orPersistence("tool_waits.listLive")
        ),

      // ---- run attempts
      /** Attempts whose outcome was never recorded (after a crash: the provider turns to reconcile). */
      listOpenAttempts: () =>
        attempts.findAll(
          "run_attempts.listOpen",
          sql`SELECT * FROM run_attempts WHERE status IN ('starting', 'running') ORDER BY run_id, attempt`
        ),
      insertAttempt: (a: RunAttempt) => attempts.insert(a),
      updateAttempt: (a: RunAttempt) => attempts.update(a),
      listAttempts: (runId: RunId) =>
        attempts.findAll("run_attempts.list", sql`SELECT * FROM run_attempts WHERE run_id = ${runId} ORDER BY attempt`),

      // ---- items
      insertItems: (values: ReadonlyArray<Item>) => items.insertMany(values),
      /**
       * Inserts `values` (items of `threadId`, in order; their `seq` and `threadId` are ignored) after the thread's last
       * item, in one statement: the thread's last `seq` is read once by the statement (`last`, as the table was before
       * it, on SQLite and Postgres alike) and each row's `seq` is it plus the row's place, so no `nextItemSeq` read goes
       * first. To be run under the thread's lock (see UnitOfWork). Returns the first row's `seq` (the others follow it);
       * `1` and nothing written for no items. More than 500 items take one statement per 500 (each after the rows of
       * the one before; 12 parameters a row and 2 a statement: SQLite binds at most 32,766, Postgres 65,535). Fails with
       * `ConcurrentModification` (an item id already stored, or twice among `values`: nothing of the call is kept once
       * its unit of work rolls back) or `PersistenceError` (`items.insert`).
       *
       * Why the shape: each row used to read the last `seq` itself (a scalar subquery per row, 500 a statement). SQLite
       * spent about 14 µs a row on them, Postgres planned 500 subplans a statement: a gateway conversation's first
       * request of 100,000 messages spent 2.4-3 s (SQLite, CPU) and 34 s (Postgres) here under its thread's lock, which
       * on SQLite every other thread's writes wait for. Now about 0.8 s and 5 s (a 2-core machine under load).
       */
      insertItemsAfterLast: (threadId: ThreadId, values: ReadonlyArray<Item>) =>
        Effect.gen(function*() {
          if (values.length === 0) return 1
          const rows = yield* Effect.forEach(values, (v) => {
            const item = { ...v, threadId, seq: 1 }
            const fast = encodeItemRowFast(item)
            return fast === undefined ? encodeItemRow(item) : Effect.succeed(fast)
          })
          // One statement per `itemPage` rows: each reads the thread's last `seq` once, as the previous statement left
          // it, in the same transaction, so the rows still follow one another. The rows' values are bound as a
          // `VALUES` list (`page`), one placeholder tuple per row (`sql.in`, wrapped as a fragment for `sql.join`); Postgres types an all-parameter `VALUES`
          // column as text, so the INTEGER columns are cast back (a no-op on SQLite). Between statements the fiber
          // yields, as `inChunks` does.
          let first = Infinity
          for (let from = 0; from < rows.length; from += itemPage) {
            if (from > 0) yield* Effect.yieldNow()
            const page = rows.slice(from, from + itemPage)
            const tuples = page.map((r, i) =>
              sql`${sql.in([r.id, r.runId, i + 1, r.kind, r.text, r.toolCallId, r.toolName, r.messageId, r.isError, r.toolCallState, r.tokens, r.createdAt])}`
            )
            const assigned = yield* sql`INSERT INTO items (id, thread_id, run_id, seq, kind, text, tool_call_id, tool_name, message_id, is_error,
              tool_call_state, tokens, created_at)
              WITH page (id, run_id, place, kind, text, tool_call_id, tool_name, message_id, is_error, tool_call_state, tokens,
              created_at) AS (VALUES ${sql.join(", ", false)(tuples)}),
              last (seq) AS (SELECT COALESCE(MAX(seq), 0) FROM items WHERE thread_id = ${threadId})
              SELECT page.id, ${threadId}, page.run_id, last.seq + CAST(page.place AS INTEGER), page.kind, page.text,
              page.tool_call_id, page.tool_name, page.message_id, CAST(page.is_error AS INTEGER), page.tool_call_state,
              CAST(page.tokens AS INTEGER), page.created_at FROM page, last
              RETURNING seq`.pipe(Effect.flatMap(seqsOf))
            if (assigned.length !== page.length) {
              return yield* new PersistenceError({ operation: "items.insert", detail: `the insert returned ${assigned.length} rows for ${page.length} items` })
            }
            for (const seq of assigned) first = Math.min(first, seq)
          }
          return first
        }).pipe(orPersistence("items.insert")),
      nextItemSeq: (threadId: ThreadId) =>
        nextSeq("items.nextSeq", sql`SELECT COALESCE(MAX(seq), 0) + 1 AS next FROM items WHERE thread_id = ${threadId}`),
      listItems: (threadId: ThreadId) =>
        items.findAll("items.list", sql`SELECT * FROM items WHERE thread_id = ${threadId} ORDER BY seq`),
      listItemsOfRuns: (runIds: ReadonlyArray<RunId>) =>
        inChunks(runIds, (c) =>
          items.findAll("items.listOfRuns", sql`SELECT * FROM items WHERE ${sql.in("run_id", c)} ORDER BY seq`)).pipe(
            Effect.map((xs) => xs.sort((a, b) => a.seq - b.seq))
          ),
      /** Items of `threadId` with `fromSeq <= seq <= toSeq`, in seq order (the thread's key: no scan). */
      listItemsInRange: (threadId: ThreadId, fromSeq: number, toSeq: number) =>
        items.findAll("items.listInRange", sql`SELECT * FROM items WHERE thread_id = ${threadId} AND seq >= ${fromSeq} AND seq <= ${toSeq} ORDER BY seq`),
      /** The items of `threadId` carrying one of `toolCallIds` (a call and its results), in seq order. */
      listItemsOfToolCalls: (threadId: ThreadId, toolCallIds: ReadonlyArray<string>) =>
        inChunks(toolCallIds, (c) =>
          items.findAll("items.listOfToolCalls", sql`SELECT * FROM items WHERE thread_id = ${threadId} AND ${sql.in("tool_call_id", c)}`)).pipe(
            Effect.map((xs) => xs.sort((a, b) => a.seq - b.seq))
          ),
      getItems: (ids: ReadonlyArray<ItemId>) =>
        inChunks(ids, (c) => items.findAll("items.get", sql`SELECT * FROM items WHERE ${sql.in("id", c)}`)).pipe(
          Effect.map((xs) => xs.sort((a, b) => a.seq - b.seq))
        ),
      /**
       * What the thread's log already holds from runs on native thread `nativeThreadId`, as keys of kind, id and
       * text: `<kind>\u0000msg:<messageId>\u0000<text>` for `messageIds` and `<kind>\u0000tool:<toolCallId>\u0000<text>`
       * for `toolCallIds`. Used to recognise a resumed native thread replaying its history (same item, same text).
       */
      findReplayKeys: (
        threadId: ThreadId,
        nativeThreadId: NativeThreadId,
        messageIds: ReadonlyArray<string>,
        toolCallIds: ReadonlyArray<string>
      ) =>
        Effect.gen(function*() {
          const query = (column: "message_id" | "tool_call_id", ids: ReadonlyArray<string>) =>
            inChunks(ids, (c) =>
              Effect.flatMap(
                sql`SELECT i.message_id, i.tool_call_id, i.kind, i.text FROM items i JOIN runs r ON r.id = i.run_id
                    WHERE i.thread_id = ${threadId} AND r.native_thread_id = ${nativeThreadId} AND ${sql.in(`i.${column}`, c)}`,
                decodeItemRefRows
              ).pipe(orPersistence("items.findReplayKeys")))
          const byMessage = yield* query("message_id", messageIds)
          const byCall = yield* query("tool_call_id", toolCallIds)
          return new Set([
            ...byMessage.flatMap((r) => r.messageId === null ? [] : [`${r.kind}\u0000msg:${r.messageId}\u0000${r.text}`]),
            ...byCall.flatMap((r) => r.toolCallId === null ? [] : [`${r.kind}\u0000tool:${r.toolCallId}\u0000${r.text}`])
          ])
        }),
      /**
       * Whether a run of `threadId` that ran on native thread `nativeThreadId` has an item at or before `throughSeq`,
       * or is one of `alsoRunIds`: one statement answering with at most one row (the database walks the thread's runs
       * and each one's first item on the `items_run` index; no run or item is handed back). What an offload asks of
       * the history its summary replaces, which on a long thread covers every earlier run: it read every run of the
       * thread to answer (1,000 rows on a 1,000-run thread, bench/growth.bench.ts). Fails with `PersistenceError`.
       */
      anyRunOnNativeThrough: (
        threadId: ThreadId,
        nativeThreadId: NativeThreadId,
        throughSeq: number,
        alsoRunIds: ReadonlyArray<RunId>
      ) =>
        sql<{ readonly id: string }>`SELECT r.id FROM runs r WHERE r.thread_id = ${threadId}
            AND r.native_thread_id = ${nativeThreadId}
            AND (EXISTS (SELECT 1 FROM items i WHERE i.run_id = r.id AND i.seq <= ${throughSeq})${
          alsoRunIds.length === 0 ? sql`` : sql` OR ${sql.in("r.id", alsoRunIds)}`}) LIMIT 1`.pipe(
          Effect.map((rows) => rows.length > 0),
          orPersistence("runs.anyOnNativeThrough")
        ),
      countItems: (threadId: ThreadId) =>
        nextSeq("items.count", sql`SELECT COUNT(*) AS next FROM items WHERE thread_id = ${threadId}`),

      // ---- provider threads and native threads
      insertProviderThread: (p: ProviderThread) => providerThreads.insert(p),
      updateProviderThread: (p: ProviderThread) => providerThreads.update(p),
      /**
       * Moves provider thread `id`'s watermark to `runSeq` (`syncedRunSeq`, with `updatedAt`) only when it stands just
       * before it (`runSeq - 1`), in one statement. Returns the row as written; `None` (nothing written) when the
       * watermark stood elsewhere or there is no such provider thread.
       */
      updateSyncedRunSeqIfNext: (id: ProviderThreadId, runSeq: number, updatedAt: DateTime.Utc) =>
        providerThreads.findOne(
          "provider_threads.advanceSynced",
          sql`UPDATE provider_threads SET synced_run_seq = ${runSeq}, updated_at = ${DateTime.formatIso(updatedAt)}
              WHERE id = ${id} AND synced_run_seq = ${runSeq - 1} RETURNING *`
        ),
      getProviderThread: (id: ProviderThreadId) =>
        providerThreads.findOne("provider_threads.get", sql`SELECT * FROM provider_threads WHERE id = ${id}`),
      findProviderThread: (threadId: ThreadId, instance: ProviderInstance) =>
        providerThreads.findOne(
          "provider_threads.find",
          sql`SELECT * FROM provider_threads WHERE thread_id = ${threadId} AND provider_instance = ${instance}`
        ),
      /**
       * The id of thread `threadId`'s active provider thread when it is the one on `instance` (one statement, no row
       * decoded); `None` when the thread has no active provider thread on `instance` (none, another one active, or no
       * such thread).
       */
      activeProviderThreadOn: (threadId: ThreadId, instance: ProviderInstance) =>
        sql<{ readonly id: unknown }>`SELECT p.id FROM threads t JOIN provider_threads p ON p.id = t.active_provider_thread_id
          WHERE t.id = ${threadId} AND p.provider_instance = ${instance}`.pipe(
          Effect.map((rows) => (typeof rows[0]?.id === "string" ? Option.some(rows[0].id as ProviderThreadId) : Option.none<ProviderThreadId>())),
          orPersistence("provider_threads.activeOn")
        ),
      listProviderThreads: (threadId: ThreadId) =>
        providerThreads.findAll(
          "provider_threads.list",
          sql`SELECT * FROM provider_threads WHERE thread_id = ${threadId} ORDER BY created_at, id`
        ),
      insertNativeThread: (n: NativeThread) => nativeThreads.insert(n),
      updateNativeThread: (n: NativeThread) => nativeThreads.update(n),
      /**
       * Records a turn's outcome on a native thread in one statement: its context `usage` (`null`: none trusted) and
       * Baton's `estimatedTokens`, leaving every other column (status, generation, compaction count) as it is now.
       * `heldGrowth` (provider tokens, a non-negative integer, default 0) is what the turn added to the native thread:
       * a rejection's floor (`heldAtLeast`, where one is stored) rises by it, since the native thread grew past what
       * the rejection proved; a trusted `usage` at or above the raised floor moves it to the report's `usedTokens` (the
       * report says more, and it is a measure where the growth was an estimate). No report clears it: a later one can
       * be stale and fall below what the native thread holds (sim seed 22: a report of 198,792 cleared the floor, then
       * one stale by six turns said 1,542 and the next turn inlined history onto a full native thread). A compaction
       * does: the provider's own during the turn (`compacted`, default `false`: the floor is cleared here whatever the
       * report says), Baton's (`ThreadCompaction`), or a replacement native thread.
       * Returns the native thread's status as stored (`None`: no such native thread).
       */
      recordNativeUsage: (
        id: NativeThreadId,
        usage: ContextUsage | null,
        estimatedTokens: number,
        updatedAt: DateTime.Utc,
        heldGrowth = 0,
        compacted = false
      ) =>
        Effect.flatMap(
          sql`UPDATE native_threads SET used_tokens = ${usage?.usedTokens ?? null}, max_tokens = ${usage?.maxTokens ?? null},
              auto_compact_threshold = ${usage?.autoCompactThreshold ?? null}, estimated_tokens = ${estimatedTokens},
              held_at_least = ${compacted ? sql`NULL` : usage === null
                ? sql`held_at_least + ${heldGrowth}`
                : sql`CASE WHEN held_at_least + ${heldGrowth} <= ${usage.usedTokens} THEN ${usage.usedTokens} ELSE held_at_least + ${heldGrowth} END`},
              updated_at = ${DateTime.formatIso(updatedAt)} WHERE id = ${id} RETURNING status`,
          decodeNativeStatusRows
        ).pipe(Effect.map((rows) => Option.fromNullable(rows[0]?.status)), orPersistence("native_threads.recordUsage")),
      getNativeThread: (id: NativeThreadId) =>
        nativeThreads.findOne("native_threads.get", sql`SELECT * FROM native_threads WHERE id = ${id}`),
      /**
       * What turn start reads of the active native thread `id` of provider thread `providerThreadId`, in one statement:
       * the native thread; the driver holding its provider session (`sessionDriverId`, `null`: none); whether its
       * replay window is open (`replayWindow`, see `takeReplayWindow`); whether it has a `pending` delivery
       * (`hasPending`: `listDeliveriesByStatus(id, "pending")` is not empty) and whether a handoff toward
       * `providerThreadId` is open (`hasOpenHandoffs`: `listOpenHandoffs` is not empty); and the calibration of
       * `providerInstance` as `getCalibration` reads it (`calibration`; not locked). The common turn then reads
       * neither list nor the calibration.
       */
      getNativeThreadSession: (id: NativeThreadId, providerThreadId: ProviderThreadId, providerInstance: ProviderInstance) =>
        Effect.flatMap(
          sql`SELECT native_threads.*,
                EXISTS (SELECT 1 FROM handoff_deliveries WHERE native_thread_id = ${id} AND status = 'pending') AS has_pending,
                EXISTS (SELECT 1 FROM handoffs WHERE target_provider_thread_id = ${providerThreadId} AND open = 1) AS has_open_handoffs,
                c.provider_instance AS cal_provider_instance, c.ratio AS cal_ratio, c.samples AS cal_samples,
                c.weight AS cal_weight, c.recent AS cal_recent, c.updated_at AS cal_updated_at
              FROM native_threads LEFT JOIN provider_calibrations c ON c.provider_instance = ${providerInstance}
              WHERE native_threads.id = ${id}`,
          (rows) => Effect.all(rows.slice(0, 1).map((row) => Effect.gen(function*() {
            const native = yield* decodeNative(row)
            const r = row as Record<string, unknown>
            const calibration = r.calProviderInstance === null || r.calProviderInstance === undefined
              ? Option.none<ProviderCalibration>()
              : Option.some(yield* decodeCalibration(unprefixed(r, "cal")))
            return {
              native,
              sessionDriverId: (r.sessionDriverId as string | null | undefined) ?? null,
              replayWindow: Number(r.replayWindow ?? 0) !== 0,
              // SQLite answers 0/1, Postgres a boolean.
              hasPending: Number(r.hasPending) !== 0,
              hasOpenHandoffs: Number(r.hasOpenHandoffs) !== 0,
              calibration
            }
          })))
        ).pipe(Effect.map((found) => Option.fromNullable(found[0])), orPersistence("native_threads.getSession")),
      listNativeThreads: (providerThreadId: ProviderThreadId) =>
        nativeThreads.findAll(
          "native_threads.list",
          sql`SELECT * FROM native_threads WHERE provider_thread_id = ${providerThreadId} ORDER BY generation`
        ),

      /**
       * Records that `driverId` holds the provider session of `nativeThreadId`: it started the native thread itself
       * (`resumed: false`, nothing to replay) or resumed it (`resumed: true`: the next turn's output may replay the
       * session's history, the replay window opens; see `takeReplayWindow`).
       */
      holdSession: (nativeThreadId: NativeThreadId, driverId: string, resumed: boolean) =>
        sql`UPDATE native_threads SET session_driver_id = ${driverId}, replay_window = ${resumed ? 1 : 0}
            WHERE id = ${nativeThreadId}`.pipe(Effect.asVoid, orPersistence("native_threads.holdSession")),
      /** Closes the replay window of a native thread; `true` when it was open (the turn may hold a replay). */
      takeReplayWindow: (nativeThreadId: NativeThreadId) =>
        Effect.flatMap(
          sql`UPDATE native_threads SET replay_window = 0 WHERE id = ${nativeThreadId} AND replay_window <> 0 RETURNING id`,
          (rows) => Effect.succeed(rows.length > 0)
        ).pipe(orPersistence("native_threads.takeReplayWindow")),

      // ---- drivers (orchestrator incarnations)
      insertDriver: (d: DriverRecord) =>
        Effect.flatMap(Schema.encode(DriverRecord)(d), (row) => sql`INSERT INTO drivers ${sql.insert(row)}`).pipe(
          Effect.asVoid,
          orPersistence("drivers.insert")
        ),
      /** Refreshes a driver's heartbeat (`stopped`: it shut down cleanly). */
      touchDriver: (id: string, at: DateTime.Utc, stopped: boolean) =>
        sql`UPDATE drivers SET heartbeat_at = ${DateTime.formatIso(at)}, stopped_at = ${stopped ? DateTime.formatIso(at) : null}
            WHERE id = ${id}`.pipe(Effect.asVoid, orPersistence("drivers.touch")),
      getDrivers: (ids: ReadonlyArray<string>) =>
        inChunks(ids, (c) =>
          Effect.flatMap(sql`SELECT * FROM drivers WHERE ${sql.in("id", c)}`, decodeDrivers).pipe(
            orPersistence("drivers.get")
          )),

      // ---- handoffs and deliveries
      insertHandoff: (h: StoredHandoff) => handoffs.insert(h),
      updateHandoff: (h: StoredHandoff) => handoffs.update(h),
      /**
       * Opens or closes a handoff and sets its `omittedItemIds`, without reading it (a targeted update: the handoff's
       * item lists are neither decoded nor re-encoded). Returns whether the handoff exists.
       */
      setHandoffOpen: (id: HandoffId, open: boolean, omittedItemIds: ReadonlyArray<ItemId>, updatedAt: DateTime.Utc) =>
        sql`UPDATE handoffs SET open = ${open ? 1 : 0}, omitted_item_ids = ${JSON.stringify(omittedItemIds)},
            updated_at = ${DateTime.formatIso(updatedAt)} WHERE id = ${id} RETURNING id`.pipe(
          Effect.map((rows) => rows.length > 0),
          orPersistence("handoffs.setOpen")
        ),
      getHandoff: (id: HandoffId) => handoffs.findOne("handoffs.get", sql`SELECT * FROM handoffs WHERE id = ${id}`),
      listOpenHandoffs: (target: ProviderThreadId) =>
        handoffs.findAll(
          "handoffs.listOpen",
          sql`SELECT * FROM handoffs WHERE target_provider_thread_id = ${target} AND open = 1 ORDER BY created_at, id`
        ),
      /** Every handoff toward `target`, open or closed, oldest first. */
      listHandoffsTo: (target: ProviderThreadId) =>
        handoffs.findAll(
          "handoffs.listTo",
          sql`SELECT * FROM handoffs WHERE target_provider_thread_id = ${target} ORDER BY created_at, id`
        ),
      /**
       * The source runs of every handoff toward `target` that still covers them: open, or closed with its delivery
       * to `native` settled (`injected` or `inline`); with `native` null, open ones only. One statement that reads
       * only the handoffs' `source_run_ids` (never their item id lists, which grow with the thread), so a switch on
       * a thread with many handoffs costs one short read rather than one statement per handoff. Returns run ids in
       * no particular order, duplicates possible. Fails with `PersistenceError`.
       */
      listCoveredSourceRunIds: (target: ProviderThreadId, native: NativeThreadId | null) =>
        sql`
          SELECT h.source_run_ids FROM handoffs h WHERE h.target_provider_thread_id = ${target} AND (h.open = 1${
          native === null ? sql`` : sql` OR EXISTS (SELECT 1 FROM handoff_deliveries d WHERE d.handoff_id = h.id
            AND d.native_thread_id = ${native} AND d.status IN ('injected', 'inline'))`})`.pipe(
          Effect.flatMap(decodeSourceRunIds),
          Effect.map((rows) => rows.flatMap((row) => row.sourceRunIds)),
          orPersistence("handoffs.listCoveredSourceRunIds")
        ),
      listHandoffs: (threadId: ThreadId) =>
        handoffs.findAll("handoffs.list", sql`SELECT * FROM handoffs WHERE thread_id = ${threadId} ORDER BY created_at, id`),
      /**
       * A thread's handoffs (oldest first) and their deliveries with every id list left empty and its length counted
       * by the database (`json_array_length`): what `GET /threads/{id}/handoff-summaries` shows, without reading or
       * parsing a single id (a handoff after a switch on a long thread owes thousands). Counts are per handoff
       * (`sourceRuns`, `items`, `omitted`) and per delivery (`delivered`, `omitted`).
       */
      listHandoffCounts: (threadId: ThreadId) =>
        Effect.gen(function*() {
          const len = (column: string) =>
            sql.onDialectOrElse({ pg: () => sql`json_array_length(${sql(column)}::json)`, orElse: () => sql`json_array_length(${sql(column)})` })
          const handoffRows = yield* sql<Record<string, unknown>>`
            SELECT id, thread_id, kind, target_provider_thread_id, open, '[]' AS source_run_ids, '[]' AS item_ids, tokens,
              '[]' AS omitted_item_ids, created_at, updated_at, ${len("source_run_ids")} AS count_source_runs,
              ${len("item_ids")} AS count_items, ${len("omitted_item_ids")} AS count_omitted
            FROM handoffs WHERE thread_id = ${threadId} ORDER BY created_at, id`.pipe(orPersistence("handoffs.listCounts"))
          const deliveryRows = yield* sql<Record<string, unknown>>`
            SELECT d.id, d.handoff_id, d.native_thread_id, d.status, d.mode, d.run_id, '[]' AS delivered_item_ids,
              '[]' AS omitted_item_ids, d.delivered_tokens, d.defer_count, d.last_defer_reason, d.created_at, d.updated_at,
              ${len("d.delivered_item_ids")} AS count_delivered, ${len("d.omitted_item_ids")} AS count_omitted
            FROM handoff_deliveries d JOIN handoffs h ON h.id = d.handoff_id
            WHERE h.thread_id = ${threadId} ORDER BY d.created_at, d.id`.pipe(orPersistence("handoff_deliveries.listCounts"))
          const list = yield* decodeHandoffRows(handoffRows).pipe(orPersistence("handoffs.listCounts"))
          const of = yield* decodeDeliveryRows(deliveryRows).pipe(orPersistence("handoff_deliveries.listCounts"))
          const n = (row: Record<string, unknown> | undefined, key: string) => Number(row?.[key] ?? 0)
          return {
            handoffs: list.map((handoff, i) => ({
              handoff,
              sourceRuns: n(handoffRows[i], "countSourceRuns"),
              items: n(handoffRows[i], "countItems"),
              omitted: n(handoffRows[i], "countOmitted")
            })),
            deliveries: of.map((delivery, i) => ({
              delivery,
              delivered: n(deliveryRows[i], "countDelivered"),
              omitted: n(deliveryRows[i], "countOmitted")
            }))
          }
        }),
      insertDelivery: (d: HandoffDelivery) => deliveries.insert(d),
      updateDelivery: (d: HandoffDelivery) => deliveries.update(d),
      /**
       * Settles the delivery of `handoffId` to `nativeThreadId` as `status` if it is still `pending`, in one
       * statement that writes only its status and `updatedAt` (its id lists, written when it went `pending`, are
       * neither re-encoded nor rewritten). Returns the delivery as it was while `pending`, `updatedAt` the settling time
       * (`None`: no such delivery, or not `pending`: another path settled, reverted or superseded it).
       */
      settlePendingDelivery: (handoffId: HandoffId, nativeThreadId: NativeThreadId, status: "injected" | "inline", updatedAt: DateTime.Utc) =>
        deliveries.findOne(
          "handoff_deliveries.settle",
          sql`UPDATE handoff_deliveries SET status = ${status}, updated_at = ${DateTime.formatIso(updatedAt)}
              WHERE handoff_id = ${handoffId} AND native_thread_id = ${nativeThreadId} AND status = 'pending' RETURNING *`
        ).pipe(Effect.map(Option.map((d): HandoffDelivery => ({ ...d, status: "pending" })))),
      findDelivery: (handoffId: HandoffId, nativeThreadId: NativeThreadId) =>
        deliveries.findOne(
          "handoff_deliveries.find",
          sql`SELECT * FROM handoff_deliveries WHERE handoff_id = ${handoffId} AND native_thread_id = ${nativeThreadId}`
        ),
      listDeliveriesByStatus: (nativeThreadId: NativeThreadId, status: HandoffDelivery["status"]) =>
        deliveries.findAll(
          "handoff_deliveries.listByStatus",
          sql`SELECT * FROM handoff_deliveries WHERE native_thread_id = ${nativeThreadId} AND status = ${status}
              ORDER BY created_at, id`
        ),
      /**
       * The deliveries to native thread `nativeThreadId` whose status is one of `statuses` (oldest first), in one
       * statement on the `(native_thread_id, status)` index: never another native thread's, whatever the thread's
       * history. Fails with `PersistenceError`.
       */
      listDeliveriesToNative: (nativeThreadId: NativeThreadId, statuses: ReadonlyArray<HandoffDelivery["status"]>) =>
        statuses.length === 0 ? Effect.succeed([]) : deliveries.findAll(
          "handoff_deliveries.listToNative",
          sql`SELECT * FROM handoff_deliveries WHERE native_thread_id = ${nativeThreadId} AND ${sql.in("status", statuses)}
              ORDER BY created_at, id`
        ),
      /**
       * The deliveries of `threadId`'s open handoffs (oldest first), in one statement: what supersession by a summary
       * needs, not the deliveries of every handoff the thread ever made (their id lists grow with its history).
       * Fails with `PersistenceError`.
       */
      listDeliveriesOfOpenHandoffs: (threadId: ThreadId) =>
        deliveries.findAll(
          "handoff_deliveries.listOfOpenHandoffs",
          sql`SELECT d.* FROM handoff_deliveries d JOIN handoffs h ON h.id = d.handoff_id
              WHERE h.thread_id = ${threadId} AND h.open = 1 ORDER BY d.created_at, d.id`
        ),
      listDeliveriesOfThread: (threadId: ThreadId) =>
        deliveries.findAll(
          "handoff_deliveries.listOfThread",
          sql`SELECT d.* FROM handoff_deliveries d JOIN handoffs h ON h.id = d.handoff_id
              WHERE h.thread_id = ${threadId} ORDER BY d.created_at, d.id`
        ),

      // ---- forks and merges
      insertLink: (l: ThreadLink) => links.insert(l),
      /** Forks and merges where `threadId` is the parent or the fork, oldest first. */
      listLinks: (threadId: ThreadId) =>
        links.findAll(
          "thread_links.list",
          sql`SELECT * FROM thread_links WHERE parent_thread_id = ${threadId} OR fork_thread_id = ${threadId}
              ORDER BY created_at, id`
        ),
      /** The fork link of `forkThreadId` (how it was forked), if it is a fork. */
      findForkOf: (forkThreadId: ThreadId) =>
        links.findOne(
          "thread_links.findFork",
          sql`SELECT * FROM thread_links WHERE fork_thread_id = ${forkThreadId} AND kind = 'fork'`
        ),
      /**
       * The fork or merge whose synthetic run is `runId` (`ThreadLink.runId`), if it is one. Read for a run that owes its
       * history (`prompt_owed` on a merge run: `RunLifecycle.recordOwedPrompts`), so rarely.
       */
      findLinkOfRun: (runId: RunId) =>
        links.findOne("thread_links.findOfRun", sql`SELECT * FROM thread_links WHERE run_id = ${runId}`),
      /**
       * Names `handoffId` as the handoff that owes link `linkId`'s copies: a merge recorded behind a run in progress
       * (`ThreadLineage.recordOwedMerge`) has none until its copies are written. In the caller's unit of work.
       */
      setLinkHandoff: (linkId: ThreadLink["id"], handoffId: ContextHandoff["id"]) =>
        sql`UPDATE thread_links SET handoff_id = ${handoffId} WHERE id = ${linkId}`.pipe(Effect.asVoid, orPersistence("thread_links.setHandoff")),
      /** The newest merge of `forkThreadId` into its parent, if any. */
      findLastMerge: (forkThreadId: ThreadId) =>
        links.findOne(
          "thread_links.findLastMerge",
          sql`SELECT * FROM thread_links WHERE fork_thread_id = ${forkThreadId} AND kind = 'merge'
              ORDER BY through_run_seq DESC LIMIT 1`
        ),
      // ---- offloads
      /**
       * Reserves offload `o` (its row, not yet committed: in no summary chain until `commitOffload`). The first of
       * `/offload`'s three steps in its unit of work: reserve, `appendOffloadArchive`, `commitOffload`.
       */
      reserveOffload: (o: Offload) => offloads.insert(o),
      /**
       * Appends the originals offload `offloadId` replaces to its archive, in order (`position` from 0): each an item
       * of the thread's log with its seq and rendered tokens. Only under a reservation: fails with `PersistenceError`
       * (`offload_archive.append`) when the offload is not reserved (unknown, or already committed), so the archive
       * never holds entries of an offload that was not reserved first.
       */
      appendOffloadArchive: (offloadId: string, entries: ReadonlyArray<OffloadArchiveEntry>) =>
        Effect.gen(function*() {
          const reserved = yield* sql`SELECT id FROM offloads WHERE id = ${offloadId} AND committed_at IS NULL`
          if (reserved.length === 0) {
            return yield* new PersistenceError({
              operation: "offload_archive.append",
              detail: `offload ${offloadId} is not reserved: its archive is appended only after its summary is reserved`
            })
          }
          for (const [k, part] of chunk(entries.map((e, position) => ({ ...e, position })), 500).entries()) {
            yield* sql`INSERT INTO offload_archive ${
              sql.insert(part.map((e) => ({ offload_id: offloadId, position: e.position, item_id: e.itemId, item_seq: e.seq, tokens: e.tokens })))
            }`.pipe(Effect.withSpan("offload_archive.insert", { attributes: { chunk: k } }))
          }
        }).pipe(orPersistence("offload_archive.append")),
      /**
       * Commits reserved offload `offloadId` at `at`: from now on it is part of the summary chain. `false` when it was
       * not reserved (unknown or already committed): the caller rolls its unit of work back.
       */
      commitOffload: (offloadId: string, at: DateTime.Utc) =>
        sql`UPDATE offloads SET committed_at = ${DateTime.formatIso(at)} WHERE id = ${offloadId} AND committed_at IS NULL RETURNING id`.pipe(
          Effect.map((rows) => rows.length > 0),
          orPersistence("offloads.commit")
        ),
      /**
       * Page `offset`..`offset + limit` of offload `offloadId`'s archive (the originals it replaced, in order), with
       * the archive's size; empty for an unknown or uncommitted offload of `threadId`.
       */
      listOffloadArchive: (threadId: ThreadId, offloadId: string, offset: number, limit: number) =>
        Effect.gen(function*() {
          const total = yield* sql<{ readonly n: unknown }>`SELECT COUNT(*) AS n FROM offload_archive a JOIN offloads o ON o.id = a.offload_id
              WHERE a.offload_id = ${offloadId} AND o.thread_id = ${threadId} AND o.committed_at IS NOT NULL`
          const rows = yield* sql<{ readonly itemId: string; readonly itemSeq: unknown; readonly tokens: unknown }>`SELECT a.item_id, a.item_seq, a.tokens
              FROM offload_archive a JOIN offloads o ON o.id = a.offload_id
              WHERE a.offload_id = ${offloadId} AND o.thread_id = ${threadId} AND o.committed_at IS NOT NULL
              ORDER BY a.position LIMIT ${limit} OFFSET ${offset}`
          return {
            total: Number(total[0]?.n ?? 0),
            entries: rows.map((r): OffloadArchiveEntry => ({ itemId: r.itemId as ItemId, seq: Number(r.itemSeq), tokens: Number(r.tokens) }))
          }
        }).pipe(orPersistence("offload_archive.list")),
      /** Every committed offload of the thread not undone, oldest first (the summary chain). */
      listOffloads: (threadId: ThreadId) =>
        offloads.findAll(
          "offloads.list",
          sql`SELECT * FROM offloads WHERE thread_id = ${threadId} AND undone_at IS NULL AND committed_at IS NOT NULL ORDER BY generation`
        ),
      /** The newest committed offload of the thread not undone: its summary and cut define the model-visible history. */
      latestOffload: (threadId: ThreadId) =>
        offloads.findOne(
          "offloads.latest",
          sql`SELECT * FROM offloads WHERE thread_id = ${threadId} AND undone_at IS NULL AND committed_at IS NOT NULL ORDER BY generation DESC LIMIT 1`
        ),
      /** Marks offload `id` undone at `at` (it leaves the summary chain; its summary item stays in the log). */
      markOffloadUndone: (id: string, at: DateTime.Utc) =>
        sql`UPDATE offloads SET undone_at = ${DateTime.formatIso(at)} WHERE id = ${id}`.pipe(Effect.asVoid, orPersistence("offloads.undo")),
      /** The summary items of the thread's undone offloads (in the log, in no visible history). */
      listUndoneSummaryItemIds: (threadId: ThreadId) =>
        sql<{ readonly summaryItemId: string }>`SELECT summary_item_id FROM offloads WHERE thread_id = ${threadId} AND undone_at IS NOT NULL AND committed_at IS NOT NULL`.pipe(
          Effect.map((rows) => rows.map((r) => r.summaryItemId)),
          orPersistence("offloads.undone")
        ),
      /** The highest generation of the thread's offloads, undone ones included (0 without any). */
      maxOffloadGeneration: (threadId: ThreadId) =>
        sql<{ readonly g: unknown }>`SELECT COALESCE(MAX(generation), 0) AS g FROM offloads WHERE thread_id = ${threadId}`.pipe(
          Effect.map((rows) => Number(rows[0]?.g ?? 0)),
          orPersistence("offloads.maxGeneration")
        ),

      // ---- offload operations
      /** Records an `/offload` operation as it begins (`status` `running`, `costState` `prepared`). */
      insertOffloadOperation: (op: OffloadOperationRecord) =>
        Effect.flatMap(Schema.encode(OffloadOperationRecord)(op), (row) => sql`INSERT INTO offload_operations ${sql.insert(row)}`).pipe(
          Effect.asVoid,
          orPersistence("offload_operations.insert")
        ),
      /** The operation `operationId`, if any. */
      getOffloadOperation: (operationId: string) =>
        Effect.flatMap(sql`SELECT * FROM offload_operations WHERE operation_id = ${operationId}`, decodeOperations).pipe(
          Effect.map((rows) => Option.fromNullable(rows[0])),
          orPersistence("offload_operations.get")
        ),
      /**
       * Writes a running operation's outcome and its cost; `true` when it was still `running` (the first outcome
       * wins: a cancellation and a commit never both land).
       */
      finishOffloadOperation: (op: OffloadOperationRecord) =>
        Effect.flatMap(Schema.encode(OffloadOperationRecord)(op), (row) =>
          sql`UPDATE offload_operations SET status = ${row.status}, result = ${row.result}, provider_instance = ${row.providerInstance},
              calls = ${row.calls}, input_tokens = ${row.inputTokens}, cache_write_tokens = ${row.cacheWriteTokens},
              cache_read_tokens = ${row.cacheReadTokens}, output_tokens = ${row.outputTokens}, cost_usd = ${row.costUsd},
              cost_state = ${row.costState}, finished_at = ${row.finishedAt}
              WHERE operation_id = ${row.operationId} AND status = 'running' RETURNING operation_id`).pipe(
          Effect.map((rows) => rows.length > 0),
          orPersistence("offload_operations.finish")
        ),
      /**
       * Adds one summariser call's billed tokens to running operation `operationId` as soon as the call answered (its
       * own small unit of work), so that a charge is never lost with the process: the outcome's unit of work writes
       * the same totals, and an operation settled as lost keeps them (`abandoned`). `false` when it is not running.
       */
      addOffloadSpend: (operationId: string, tokens: { readonly inputTokens: number; readonly cacheWriteTokens: number; readonly cacheReadTokens: number; readonly outputTokens: number }) =>
        sql`UPDATE offload_operations SET calls = calls + 1, input_tokens = input_tokens + ${tokens.inputTokens},
            cache_write_tokens = cache_write_tokens + ${tokens.cacheWriteTokens}, cache_read_tokens = cache_read_tokens + ${tokens.cacheReadTokens},
            output_tokens = output_tokens + ${tokens.outputTokens}
            WHERE operation_id = ${operationId} AND status = 'running' RETURNING operation_id`.pipe(
          Effect.map((rows) => rows.length > 0),
          orPersistence("offload_operations.addSpend")
        ),
      /**
       * Records that a client asked to cancel operation `operationId` at `at` (the first request's time is kept);
       * `true` when the operation is still `running` (the process running it will see the request), `false` when it
       * already has an outcome or does not exist.
       */
      requestOffloadCancel: (operationId: string, at: DateTime.Utc) =>
        sql`UPDATE offload_operations SET cancel_requested_at = COALESCE(cancel_requested_at, ${DateTime.formatIso(at)})
            WHERE operation_id = ${operationId} AND status = 'running' RETURNING operation_id`.pipe(
          Effect.map((rows) => rows.length > 0),
          orPersistence("offload_operations.requestCancel")
        ),
      /**
       * Whether operation `operationId` should stop summarising: a client asked to cancel it, or it no longer is
       * `running` (another process settled it). `false` when it is running with no request (or does not exist).
       */
      offloadCancelRequested: (operationId: string) =>
        sql<{ readonly status: string; readonly cancelRequestedAt: string | null }>`SELECT status, cancel_requested_at FROM offload_operations
            WHERE operation_id = ${operationId}`.pipe(
          Effect.map((rows) => rows.length > 0 && (rows[0]!.status !== "running" || rows[0]!.cancelRequestedAt !== null)),
          orPersistence("offload_operations.cancelRequested")
        ),
      /** Every `/offload` operation of `threadId`, oldest first (with its summariser cost). */
      listOffloadOperations: (threadId: ThreadId) =>
        Effect.flatMap(
          sql`SELECT * FROM offload_operations WHERE thread_id = ${threadId} ORDER BY created_at, operation_id`,
          decodeOperations
        ).pipe(orPersistence("offload_operations.list")),
      /** The log's largest `global_seq` (0 without events): no event of any stream has a global cursor above it. */
      lastGlobalSeq: () =>
        sql<{ readonly v: unknown }>`SELECT COALESCE(MAX(global_seq), 0) AS v FROM thread_events`.pipe(
          Effect.map((rows) => Number(rows[0]?.v ?? 0)),
          orPersistence("thread_events.lastGlobalSeq")
        ),
      /** The thread's newest event seq (0 without events): its version, which every change of the thread advances. */
      threadVersion: (threadId: ThreadId) =>
        sql<{ readonly v: unknown }>`SELECT COALESCE(MAX(seq), 0) AS v FROM thread_events WHERE thread_id = ${threadId}`.pipe(
          Effect.map((rows) => Number(rows[0]?.v ?? 0)),
          orPersistence("thread_events.version")
        ),

      // ---- events
      /**
       * Appends one event with the next `seq` of its thread and returns it as stored (`eventId`, `seq`,
       * `globalSeq`, `commandId`, `createdAt` assigned). The payload is validated against the schema of its `type`
       * (`PersistenceError` "thread_events.encode" when it does not match). A concurrent writer that took the same
       * `seq` makes the unique `(thread_id, seq)` constraint fire: this fails with `ConcurrentModification` instead
       * of losing an update. (`appendEvents` of one event: the same statement.)
       */
      appendEvent: (event: NewThreadEvent) => Effect.map(appendEvents([event]), (appended) => appended[0]!),
      /**
       * Appends `events` (in order, all of one thread) in one statement: each as `appendEvent` appends it (validated,
       * encoded, its `seq` the thread's next in order, handed to the unit of work's `afterCommit` listeners). Returns
       * the appended events; nothing is written for none. Must run inside a unit of work on the thread, as
       * `appendEvent`. Fails with `PersistenceError` (an event that does not validate: nothing is written; events of
       * several threads) or `ConcurrentModification` (contention).
       */
      appendEvents,
      /**
       * The thread's events with `seq > afterSeq` (default 0: from the start) in `seq` order, at most `limit` of
       * them (default: all). A reader pages by passing the last `seq` it saw. Reads the `(thread_id, seq)` index.
       */
      listEvents: (threadId: ThreadId, options: { readonly afterSeq?: number; readonly limit?: number } = {}) => {
        const afterSeq = options.afterSeq ?? 0
        return readEvents(
          "thread_events.list",
          options.limit === undefined
            ? sql`SELECT * FROM thread_events WHERE thread_id = ${threadId} AND seq > ${afterSeq} ORDER BY seq`
            : sql`SELECT * FROM thread_events WHERE thread_id = ${threadId} AND seq > ${afterSeq} ORDER BY seq
                  LIMIT ${options.limit}`
        )
      },
      /**
       * The thread's events of `types` through its last event, in their stored JSON form (`ThreadEvent`'s encoded side,
       * as `appendEvent` wrote them: not decoded again, the timeline's cost is one `JSON.parse` per event), in `seq`
       * order, with `lastSeq`, the seq of the thread's last event of any type (0: none). Every event at or below
       * `lastSeq` is committed (writers to one thread hold its lock), so a reader that follows the log after
       * `lastSeq` misses nothing. Reads the `(thread_id, type, seq)` index. With `afterSeq`, only the events after it
       * (a fold that already holds the log through `afterSeq` continues from there). A stored payload that is not JSON
       * is a `PersistenceError`.
       */
      listEventJsonOfTypes: (threadId: ThreadId, types: ReadonlyArray<ThreadEventType>, afterSeq = 0) =>
        Effect.gen(function*() {
          const lastSeq = (yield* nextSeq("thread_events.lastSeq", sql`SELECT COALESCE(MAX(seq), 0) + 1 AS next FROM thread_events WHERE thread_id = ${threadId}`)) - 1
          if (lastSeq <= afterSeq || types.length === 0) return { lastSeq, events: [] as ReadonlyArray<typeof ThreadEvent.Encoded> }
          const rows = yield* sql<{ eventId: string; seq: number; globalSeq: number | string; commandId: string | null; type: string; payload: string; createdAt: string }>`
            SELECT event_id, seq, global_seq, command_id, type, payload, created_at FROM thread_events
            WHERE thread_id = ${threadId} AND ${sql.in("type", types)} AND seq > ${afterSeq} AND seq <= ${lastSeq} ORDER BY seq`.pipe(orPersistence("thread_events.listJsonOfTypes"))
          const events = yield* Effect.try({
            try: () => rows.map((r) => ({ ...r, seq: Number(r.seq), globalSeq: Number(r.globalSeq), payload: JSON.parse(r.payload) }) as unknown as typeof ThreadEvent.Encoded),
            catch: (e) => new PersistenceError({ operation: "thread_events.listJsonOfTypes", detail: `a stored event payload is not JSON: ${String(e)}` })
          })
          return { lastSeq, events }
        }),
      /**
       * Events of every thread with `globalSeq > afterGlobalSeq` (default 0) in `globalSeq` order, at most `limit`.
       * Reads the table's key. Not a feed cursor on Postgres: `globalSeq` is taken at insert and seen at commit, so a
       * reader paging by it can pass an event that commits later; `EventFeed.all` reads the log commit-safely.
       */
      listEventsGlobal: (options: { readonly afterGlobalSeq?: number; readonly limit: number }) =>
        readEvents(
          "thread_events.listGlobal",
          sql`SELECT * FROM thread_events WHERE global_seq > ${options.afterGlobalSeq ?? 0} ORDER BY global_seq
              LIMIT ${options.limit}`
        ),
      /**
       * The thread's events of type `type`, newest first, with `seq < beforeSeq` when given, at most `limit`.
       * Reads the `(thread_id, type, seq)` index: the cost is the events returned, not the length of the log.
       */
      listEventsOfType: <T extends ThreadEventType>(
        threadId: ThreadId,
        type: T,
        options: { readonly beforeSeq?: number; readonly limit: number }
      ) =>
        readEvents(
          "thread_events.listOfType",
          options.beforeSeq === undefined
            ? sql`SELECT * FROM thread_events WHERE thread_id = ${threadId} AND type = ${type}
                  ORDER BY seq DESC LIMIT ${options.limit}`
            : sql`SELECT * FROM thread_events WHERE thread_id = ${threadId} AND type = ${type}
                  AND seq < ${options.beforeSeq} ORDER BY seq DESC LIMIT ${options.limit}`
        ).pipe(Effect.map((events) => events.filter((e): e is ThreadEventOf<T> => e.type === type))),

      // ---- provider calibrations
      /** The calibration learned for `instance`, if any. */
      getCalibration: (instance: ProviderInstance) =>
        Effect.flatMap(
          sql`SELECT * FROM provider_calibrations WHERE provider_instance = ${instance}`,
          decodeCalibrations
        ).pipe(Effect.map((rows) => Option.fromNullable(rows[0])), orPersistence("provider_calibrations.get")),
      /**
       * The calibration of `instance`, locked until the transaction ends (Postgres `FOR UPDATE`; SQLite's unit of work
       * already holds the write lock): two threads learning from the same provider at once never lose a sample.
       */
      getCalibrationForUpdate: (instance: ProviderInstance) =>
        Effect.gen(function*() {
          const select = sql.onDialectOrElse({
            pg: () => sql`SELECT * FROM provider_calibrations WHERE provider_instance = ${instance} FOR UPDATE`,
            orElse: () => sql`SELECT * FROM provider_calibrations WHERE provider_instance = ${instance}`
          })
          const found = yield* Effect.flatMap(select, decodeCalibrations)
          if (found.length > 0 || sql.onDialectOrElse({ pg: () => false, orElse: () => true })) return Option.fromNullable(found[0])
          // No row to lock yet: create the identity row (a concurrent creator makes this wait for its commit, then
          // do nothing), and lock that.
          yield* sql`INSERT INTO provider_calibrations (provider_instance, ratio, samples, weight, updated_at)
                     VALUES (${instance}, 1, 0, 0, ${new Date(0).toISOString()}) ON CONFLICT (provider_instance) DO NOTHING`
          return Option.fromNullable((yield* Effect.flatMap(select, decodeCalibrations))[0])
        }).pipe(orPersistence("provider_calibrations.getForUpdate")),
      /** Inserts or replaces the calibration of `c.providerInstance` (same statement on SQLite and Postgres). */
      /** Records `cost` for its run (a second record of the same run replaces the first: a retried completion). */
      recordRunCost: (cost: RunCost) =>
        Effect.flatMap(Schema.encode(RunCost)(cost), (row) =>
          sql`INSERT INTO run_costs ${sql.insert(row)}
              ON CONFLICT (run_id) DO UPDATE SET input_tokens = ${row.inputTokens}, cache_write_tokens = ${row.cacheWriteTokens},
              cache_read_tokens = ${row.cacheReadTokens}, output_tokens = ${row.outputTokens}, cost_usd = ${row.costUsd}`).pipe(
            Effect.asVoid,
            orPersistence("run_costs.record")
          ),
      /** The recorded cost of run `runId`, if any. */
      getRunCost: (runId: RunId) =>
        Effect.flatMap(
          sql`SELECT * FROM run_costs WHERE run_id = ${runId}`,
          decodeRunCosts
        ).pipe(Effect.map((rows) => Option.fromNullable(rows[0])), orPersistence("run_costs.get")),
      /** The recorded costs of the runs `runIds` (those that recorded one), in no particular order. */
      listRunCostsOf: (runIds: ReadonlyArray<RunId>) =>
        inChunks(runIds, (c) =>
          Effect.flatMap(
            sql`SELECT * FROM run_costs WHERE ${sql.in("run_id", c)}`,
            decodeRunCosts
          ).pipe(orPersistence("run_costs.listOf"))),
      /**
       * The sums of `threadId`'s recorded run costs, added by the database in one row whatever the number of runs
       * (a snapshot no longer reads every run's cost): `runs` counted, the four token kinds summed, `priced` the runs
       * with a dollar cost and `pricedNanos` their dollars in whole nano-dollars (each run's cost rounded to 1e-9
       * before the sum, as `RunCosts.total` adds them). Fails with `PersistenceError`.
       */
      runCostSums: (threadId: ThreadId) =>
        sql<Record<string, unknown>>`
          SELECT COUNT(*) AS runs, COALESCE(SUM(input_tokens), 0) AS input_tokens,
            COALESCE(SUM(cache_write_tokens), 0) AS cache_write_tokens, COALESCE(SUM(cache_read_tokens), 0) AS cache_read_tokens,
            COALESCE(SUM(output_tokens), 0) AS output_tokens, COUNT(cost_usd) AS priced,
            COALESCE(SUM(ROUND(cost_usd * 1000000000)), 0) AS priced_nanos
          FROM run_costs WHERE thread_id = ${threadId}`.pipe(
          // Postgres answers COUNT and SUM of integers as bigint / numeric, which its driver gives as text.
          Effect.map(([row]) => ({
            runs: Number(row?.runs ?? 0),
            inputTokens: Number(row?.inputTokens ?? 0),
            cacheWriteTokens: Number(row?.cacheWriteTokens ?? 0),
            cacheReadTokens: Number(row?.cacheReadTokens ?? 0),
            outputTokens: Number(row?.outputTokens ?? 0),
            priced: Number(row?.priced ?? 0),
            pricedNanos: Number(row?.pricedNanos ?? 0)
          })),
          orPersistence("run_costs.sums")
        ),
      /** The recorded costs of `threadId`'s runs, oldest first. */
      listRunCosts: (threadId: ThreadId) =>
        Effect.flatMap(
          sql`SELECT * FROM run_costs WHERE thread_id = ${threadId} ORDER BY created_at, run_id`,
          decodeRunCosts
        ).pipe(orPersistence("run_costs.list")),
      /**
       * Writes `c` only when the stored calibration of `c.providerInstance` still has `seenSamples` samples (`null`: no
       * row yet, then inserted unless one appeared): a learn from a calibration read earlier without a lock, kept only
       * when nothing learned meanwhile (every write adds a sample). One statement; the row is locked by the write
       * itself. `true` when written.
       */
      upsertCalibrationIfUnchanged: (c: ProviderCalibration, seenSamples: number | null) =>
        Effect.flatMap(Schema.encode(ProviderCalibration)(c), (row) =>
          seenSamples === null
            ? sql`INSERT INTO provider_calibrations ${sql.insert(row)} ON CONFLICT (provider_instance) DO NOTHING RETURNING provider_instance`
            : sql`UPDATE provider_calibrations SET ratio = ${row.ratio}, samples = ${row.samples}, weight = ${row.weight},
                  recent = ${row.recent}, updated_at = ${row.updatedAt}
                  WHERE provider_instance = ${row.providerInstance} AND samples = ${seenSamples} RETURNING provider_instance`).pipe(
            Effect.map((rows) => rows.length > 0),
            orPersistence("provider_calibrations.upsert")
          ),
      upsertCalibration: (c: ProviderCalibration) =>
        Effect.flatMap(Schema.encode(ProviderCalibration)(c), (row) =>
          sql`INSERT INTO provider_calibrations ${sql.insert(row)}
              ON CONFLICT (provider_instance) DO UPDATE SET ratio = ${row.ratio}, samples = ${row.samples},
              weight = ${row.weight}, recent = ${row.recent}, updated_at = ${row.updatedAt}`).pipe(
            Effect.asVoid,
            orPersistence("provider_calibrations.upsert")
          ),

      // ---- paged reads (the query side: ThreadQuery)
      /**
       * Threads oldest first (by `createdAt`, then `id`) after the keyset `after` (the last thread of the previous
       * page), at most `limit`.
       */
      listThreadsPage: (options: { readonly after?: { readonly createdAt: string; readonly id: string } | undefined; readonly limit: number }) =>
        threads.findAll(
          "threads.listPage",
          options.after === undefined
            ? sql`SELECT * FROM threads ORDER BY created_at, id LIMIT ${options.limit}`
            : sql`SELECT * FROM threads WHERE created_at > ${options.after.createdAt}
                  OR (created_at = ${options.after.createdAt} AND id > ${options.after.id})
                  ORDER BY created_at, id LIMIT ${options.limit}`
        ),
      /** Runs of a thread with `seq > afterSeq`, in order, at most `limit`. */
      listRunsPage: (threadId: ThreadId, afterSeq: number, limit: number) =>
        runs.findAll(
          "runs.listPage",
          sql`SELECT * FROM runs WHERE thread_id = ${threadId} AND seq > ${afterSeq} ORDER BY seq LIMIT ${limit}`
        ),
      /** The thread's newest `limit` runs, oldest first. */
      listRecentRuns: (threadId: ThreadId, limit: number) =>
        runs.findAll(
          "runs.listRecent",
          sql`SELECT * FROM runs WHERE thread_id = ${threadId} ORDER BY seq DESC LIMIT ${limit}`
        ).pipe(Effect.map((rs) => [...rs].reverse())),
      /** Items of a thread with `seq > afterSeq`, in order, at most `limit`. */
      listItemsPage: (threadId: ThreadId, afterSeq: number, limit: number) =>
        items.findAll(
          "items.listPage",
          sql`SELECT * FROM items WHERE thread_id = ${threadId} AND seq > ${afterSeq} ORDER BY seq LIMIT ${limit}`
        ),
      getItem: (id: ItemId) => items.findOne("items.getOne", sql`SELECT * FROM items WHERE id = ${id}`),
      /** Counts over a thread: runs per status, items and their tokens, handoffs and open handoffs. */
      threadTotals: (threadId: ThreadId) =>
        Effect.gen(function*() {
          const byStatus = yield* Effect.flatMap(
            sql`SELECT status, COUNT(*) AS n FROM runs WHERE thread_id = ${threadId} GROUP BY status`,
            decodeStatusCounts
          )
          const itemRows = yield* Effect.flatMap(
            sql`SELECT COUNT(*) AS n, COALESCE(SUM(tokens), 0) AS tokens FROM items WHERE thread_id = ${threadId}`,
            decodeItemTotals
          )
          const handoffRows = yield* Effect.flatMap(
            sql`SELECT COUNT(*) AS n, COALESCE(SUM(open), 0) AS open FROM handoffs WHERE thread_id = ${threadId}`,
            decodeHandoffTotals
          )
          return {
            runsByStatus: new Map(byStatus.map((r) => [r.status, Number(r.n)])),
            items: Number(itemRows[0]?.n ?? 0),
            itemTokens: Number(itemRows[0]?.tokens ?? 0),
            handoffs: Number(handoffRows[0]?.n ?? 0),
            openHandoffs: Number(handoffRows[0]?.open ?? 0)
          }
        }).pipe(orPersistence("threads.totals")),
      /** The thread's handoffs that still owe something, oldest first. */
      listOpenHandoffsOfThread: (threadId: ThreadId) =>
        handoffs.findAll(
          "handoffs.listOpenOfThread",
          sql`SELECT * FROM handoffs WHERE thread_id = ${threadId} AND open = 1 ORDER BY created_at, id`
        ),
      /** The deliveries of one handoff, oldest first. */
      listDeliveriesOfHandoff: (handoffId: HandoffId) =>
        deliveries.findAll(
          "handoff_deliveries.listOfHandoff",
          sql`SELECT * FROM handoff_deliveries WHERE handoff_id = ${handoffId} ORDER BY created_at, id`
        ),
      /**
       * The schema's state, for readiness: the dialect, the newest migration applied and the newest this build knows.
       * Fails with `PersistenceError` when the database does not answer.
       */
      schemaStatus: () =>
        Effect.flatMap(
          sql`SELECT MAX(migration_id) AS applied FROM effect_sql_migrations`,
          decodeApplied
        ).pipe(
          Effect.map((rows) => ({
            dialect: sql.onDialectOrElse({ pg: () => "postgres" as const, orElse: () => "sqlite" as const }),
            applied: Number(rows[0]?.applied ?? 0),
            latest: latestMigration
          })),
          orPersistence("database.schemaStatus")
        ),

      // ---- command receipts
      findReceipt: (commandId: string) =>
        Effect.flatMap(
          sql`SELECT * FROM command_receipts WHERE command_id = ${commandId}`,
          decodeReceipts
        ).pipe(Effect.map((rows) => Option.fromNullable(rows[0])), orPersistence("command_receipts.find")),
      /** Replaces a receipt's result (a command recorded when it began, completed later). */
      updateReceipt: (commandId: string, result: unknown) =>
        sql`UPDATE command_receipts SET result = ${JSON.stringify(result)} WHERE command_id = ${commandId}`.pipe(
          Effect.asVoid,
          orPersistence("command_receipts.update")
        ),
      insertReceipt: (receipt: Commands.CommandReceipt) =>
        Effect.flatMap(
          Schema.encode(ReceiptRow)(receipt),
          (row) => sql`INSERT INTO command_receipts ${sql.insert(row)}`
        ).pipe(Effect.asVoid, orPersistence("command_receipts.insert")),
      /**
       * Writes `receipt` unless its command id has a receipt already, in one statement (`ON CONFLICT DO NOTHING`):
       * `true` when written, `false` when the id was seen before (nothing written; `findReceipt` tells which command).
       */
      insertReceiptIfNew: (receipt: Commands.CommandReceipt) =>
        Effect.flatMap(
          Schema.encode(ReceiptRow)(receipt),
          (row) => sql`INSERT INTO command_receipts ${sql.insert(row)} ON CONFLICT (command_id) DO NOTHING RETURNING command_id`
        ).pipe(Effect.map((rows) => rows.length > 0), orPersistence("command_receipts.insertIfNew"))
    }
  })
}) {}

const chunk = <A>(xs: ReadonlyArray<A>, size: number): ReadonlyArray<ReadonlyArray<A>> => {
  const out: Array<ReadonlyArray<A>> = []
  for (let i = 0; i < xs.length; i += size) out.push(xs.slice(i, i + size))
  return out
}
