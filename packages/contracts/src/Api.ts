/**
 * The HTTP API, declared once: `BatonApi` (`HttpApi`) with one `HttpApiGroup` per resource. `apps/server` implements
 * it (`HttpApiBuilder.group`), serves its OpenAPI document at `/openapi.json`, and clients call it through
 * `HttpApiClient.make(BatonApi)` (the CLI as a client, tests, the fuzz and load tools).
 *
 * Conventions:
 * - Every group but `health` sits behind `Authorization` (bearer token): 401 without or with an unknown token, 403
 *   for the read-only token on anything but `GET`.
 * - A write takes an idempotency key: the `Idempotency-Key` header or the body's `commandId` (both: they must be
 *   equal). A key seen before answers with the first result (command receipts); reused for another command, thread
 *   or payload it is refused (422 `IdempotencyKeyReused`). Without one, the command is not deduplicated.
 * - Errors are JSON `{ "_tag", ...fields, "message" }` with the status of their class (`Errors.ts`); a body that does
 *   not match its schema is 400 `HttpApiDecodeError` whose `issues[].path` names the field.
 */
import { HttpApi, HttpApiEndpoint, HttpApiGroup, HttpApiMiddleware, HttpApiSchema, HttpApiSecurity, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { ClientTools, MessageText, storableText } from "./Commands.js"
import { Run, ToolResult, ToolResultOffloadControl } from "./Domain.js"
import {
  ConcurrentModification,
  Forbidden,
  HandoffNotFound,
  IdempotencyKeyReused,
  InvalidRequest,
  ItemNotFound,
  LengthRequired,
  NoRunInProgress,
  NotReady,
  OffloadFailed,
  OffloadInProgress,
  OffloadNotFound,
  OffloadOperationNotFound,
  PayloadTooLarge,
  PersistenceError,
  ProviderError,
  RouteNotFound,
  RunInProgress,
  RunNotFound,
  RunNotWaiting,
  ThreadNotFound,
  Unauthorized,
  UnknownProvider,
  UnsupportedMediaType
} from "./Errors.js"
import { DecimalFromString } from "./EventStream.js"
import { DeliveryId, HandoffId, ItemId, ProviderInstance, RunId, ThreadId } from "./Ids.js"
import {
  CompactReport,
  CreateThreadResult,
  ForkResult,
  MergeAnswer,
  OffloadReport,
  OffloadUndoReport,
  SwitchResult,
  ToolResultOffloadPreview,
  ToolResultOffloadControlView,
  ToolResultOffloadUndo
} from "./Results.js"
import {
  HandoffIdList,
  HandoffItemIds,
  HandoffList,
  HandoffSummaryList,
  HandoffView,
  Health,
  ItemPage,
  ItemText,
  OffloadArchivePage,
  Readiness,
  RunAccepted,
  RunPage,
  RunView,
  Session,
  ThreadPage,
  ThreadSnapshot,
  ThreadTimeline
} from "./Views.js"

/** The longest id accepted in a path (longer ones are 400, never looked up). */
const maxIdLength = 200

/** A client's idempotency key: 1 to 200 printable ASCII characters (no spaces). */
export const IdempotencyKey = Schema.String.pipe(
  Schema.minLength(1),
  Schema.maxLength(200),
  Schema.pattern(/^[\x21-\x7e]+$/, { message: () => "an idempotency key is 1 to 200 printable ASCII characters without spaces" })
)

/** The `Idempotency-Key` header of a write (header names are matched in lower case). */
export const IdempotencyHeaders = Schema.Struct({ "idempotency-key": Schema.optional(IdempotencyKey) })

const commandId = { commandId: Schema.optional(IdempotencyKey) }
/**
 * A thread's title: at most 500 characters of well-formed Unicode without NUL (a lone surrogate would be stored
 * altered; Postgres cannot store U+0000).
 */
const title = Schema.String.pipe(Schema.maxLength(500), Schema.filter(storableText("the title")))

/**
 * Ids as a client sends them: at most `maxIdLength` characters and no NUL (U+0000, as `%00` in a path): no id
 * contains one, and Postgres refuses it in a query (22021), so it is a 400 rather than a lookup.
 */
const noNul = (id: string) => !id.includes("\u0000") || "an id never contains a NUL character (U+0000)"
const clientThreadId = ThreadId.pipe(Schema.maxLength(maxIdLength), Schema.filter(noNul))
const clientRunId = RunId.pipe(Schema.maxLength(maxIdLength), Schema.filter(noNul))

const threadPath = Schema.Struct({ threadId: clientThreadId })
/** `/threads/{threadId}/offload/{operationId}`: an `/offload` operation id is an idempotency key. */
const offloadOperationPath = Schema.Struct({ threadId: clientThreadId, operationId: IdempotencyKey })
/** `/threads/{threadId}/offloads/{offloadId}/…`: an offload's id as Baton wrote it (`off_…`). */
const offloadPath = Schema.Struct({ threadId: clientThreadId, offloadId: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(maxIdLength), Schema.filter(noNul)) })
const runPath = Schema.Struct({ runId: clientRunId })
const threadRunPath = Schema.Struct({ threadId: clientThreadId, runId: clientRunId })
const itemPath = Schema.Struct({ itemId: ItemId.pipe(Schema.maxLength(maxIdLength), Schema.filter(noNul)) })
const handoffPath = Schema.Struct({ handoffId: HandoffId.pipe(Schema.maxLength(maxIdLength), Schema.filter(noNul)) })

/** A non-negative integer query parameter, in decimal digits (`0x3` or `1e3` is 400 naming the parameter). */
const IntParam = DecimalFromString.pipe(Schema.int(), Schema.nonNegative())
/** The largest thread-local `seq` (runs, items, a thread's events): the columns are 32-bit `INTEGER`s. */
export const maxSeq = 2_147_483_647
/** A cursor over a thread-local `seq`: 0..`maxSeq` (a larger one would not fit the column's type in a query). */
const SeqParam = DecimalFromString.pipe(Schema.int(), Schema.between(0, maxSeq))
/** A page size: 1..500 (default 100 where omitted). */
const LimitParam = DecimalFromString.pipe(Schema.int(), Schema.between(1, 500))
/** The longest window `GET /items/{id}` returns, in characters. */
export const maxItemTextChars = 1_048_576

// ---- payloads

/** A body that names a field the endpoint does not have is refused (400 naming it), not silently ignored. */
const strict = { parseOptions: { onExcessProperty: "error" } } as const

/**
 * `POST /threads`: a thread whose first provider is `providerInstance`; `title` defaults to "untitled"; `tools`: the
 * client's tools (name, description, JSON Schema `inputSchema`) every run of the thread offers the model.
 */
export const CreateThreadPayload = Schema.Struct({
  title: Schema.optional(title),
  providerInstance: ProviderInstance,
  tools: Schema.optional(ClientTools),
  ...commandId
}).annotations(strict)

/**
 * `POST /threads/{id}/messages`: a user message (`MessageText`: not blank); `text` reaches the provider
 * byte-identical; `tools`: client tools for this run over the thread's (one with a thread tool's name replaces it).
 */
export const SendMessagePayload = Schema.Struct({ text: MessageText, tools: Schema.optional(ClientTools), ...commandId }).annotations(strict)

/** `POST /threads/{id}/runs/{runId}/tool-results`: one result per open tool call of the waiting run. */
export const ToolResultsPayload = Schema.Struct({
  results: Schema.Array(ToolResult).pipe(Schema.minItems(1), Schema.maxItems(128)),
  ...commandId
}).annotations(strict)

/** `POST /threads/{id}/switch`: the provider instance for the next run. */
export const SwitchProviderPayload = Schema.Struct({ providerInstance: ProviderInstance, ...commandId }).annotations(strict)

/** `POST /threads/{id}/fork`: see `Commands.ForkThread`. */
export const ForkPayload = Schema.Struct({
  atRunSeq: Schema.optional(Schema.Int.pipe(Schema.nonNegative())),
  providerInstance: Schema.optional(ProviderInstance),
  title: Schema.optional(title),
  ...commandId
}).annotations(strict)

/** A command with nothing but its optional idempotency key (`/merge`, `/compact`). */
export const CommandPayload = Schema.Struct(commandId).annotations(strict)

/** `POST /threads/{id}/offload`: see `Commands.OffloadThread`. */
export const OffloadPayload = Schema.Struct({
  keepTokens: Schema.optional(Schema.Int.pipe(Schema.nonNegative())),
  /** The operation's id (else the command id or `Idempotency-Key`, else generated); all given must agree. */
  operationId: Schema.optional(IdempotencyKey),
  /** Change nothing and call no summariser: answer what would be summarised, tokens before and after, cache cost. */
  dryRun: Schema.optional(Schema.Boolean),
  ...commandId
}).annotations(strict)

/** `PUT /threads/{id}/tool-result-offload/control`: see `Commands.SetToolResultOffloadControl` (the control's fields). */
export const ToolResultOffloadControlPayload = Schema.Struct({
  ...ToolResultOffloadControl.fields,
  ...commandId
}).annotations(strict)

/** `POST /threads/{id}/interrupt`: the run to interrupt; without `runId`, the thread's run in progress. */
export const InterruptPayload = Schema.Struct({
  runId: Schema.optional(clientRunId),
  ...commandId
}).annotations(strict)

// ---- security

/**
 * Bearer-token authentication for every group but `health`: the admin token may do anything, the read-only token
 * only `GET`. Fails with `Unauthorized` (401) or `Forbidden` (403).
 */
export class Authorization extends HttpApiMiddleware.Tag<Authorization>()("@baton/contracts/Authorization", {
  failure: Schema.Union(Unauthorized, Forbidden),
  security: { bearer: HttpApiSecurity.bearer }
}) {}

// ---- groups

/** Threads: create, list, snapshot, switch provider, fork, merge back, `/compact`, `/offload`, interrupt. */
export class ThreadsGroup extends HttpApiGroup.make("threads")
  .add(
    HttpApiEndpoint.post("create", "/threads")
      .setPayload(CreateThreadPayload)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(CreateThreadResult, { status: 201 })
      .addError(UnknownProvider)
      .annotate(OpenApi.Description, "Creates a thread whose first provider is `providerInstance`.")
  )
  .add(
    HttpApiEndpoint.get("list", "/threads")
      .setUrlParams(Schema.Struct({ cursor: Schema.optional(Schema.String.pipe(Schema.maxLength(1000))), limit: Schema.optional(LimitParam) }))
      .addSuccess(ThreadPage)
      .annotate(OpenApi.Description, "Lists threads, oldest first, `limit` (1..500, default 100) per page; pass `nextCursor` as `cursor` for the next page.")
  )
  .add(
    HttpApiEndpoint.get("get", "/threads/:threadId")
      .setPath(threadPath)
      .addSuccess(ThreadSnapshot)
      .addError(ThreadNotFound)
      .annotate(OpenApi.Description, "A thread's snapshot: provider threads, native threads with usage and window, recent runs, open handoffs, links, totals.")
  )
  .add(
    HttpApiEndpoint.post("switchProvider", "/threads/:threadId/switch")
      .setPath(threadPath)
      .setPayload(SwitchProviderPayload)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(SwitchResult)
      .addError(ThreadNotFound)
      .addError(UnknownProvider)
      .addError(RunInProgress)
      .annotate(OpenApi.Description, "Switches the provider for the next run; the destination is owed what it has not seen (a `switch` handoff). 409 while a run is queued or running.")
  )
  .add(
    HttpApiEndpoint.post("fork", "/threads/:threadId/fork")
      .setPath(threadPath)
      .setPayload(ForkPayload)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(ForkResult, { status: 201 })
      .addError(ThreadNotFound)
      .addError(UnknownProvider)
      .annotate(OpenApi.Description, "Forks the thread at run `atRunSeq` (default: the last ended run) into a new thread owed that history by a `fork` handoff.")
  )
  .add(
    HttpApiEndpoint.post("mergeBack", "/threads/:threadId/merge")
      .setPath(threadPath)
      .setPayload(CommandPayload)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(MergeAnswer)
      .addError(ThreadNotFound)
      .annotate(OpenApi.Description, "Merges this fork's new runs back into its parent as one merge run owed by a `merge` handoff (`merged: false`, `runId: null`: nothing new was merged; `message` says what was merged or why nothing was).")
  )
  .add(
    HttpApiEndpoint.post("compact", "/threads/:threadId/compact")
      .setPath(threadPath)
      .setPayload(CommandPayload)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(CompactReport)
      .addError(ThreadNotFound)
      .addError(RunInProgress)
      .addError(UnknownProvider)
      .addError(ProviderError)
      .annotate(OpenApi.Description, "`/compact`: drains deferred history into the active native thread (natively where the provider can), then compacts it. 409 while a run is queued or running.")
  )
  .add(
    HttpApiEndpoint.post("offload", "/threads/:threadId/offload")
      .setPath(threadPath)
      .setPayload(OffloadPayload)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(OffloadReport)
      .addError(ThreadNotFound)
      .addError(RunInProgress)
      .addError(OffloadFailed)
      .addError(OffloadInProgress)
      .addError(OffloadOperationNotFound)
      .annotate(OpenApi.Description, "`/offload`: summarises older history into a summary item, keeping the newest `keepTokens` verbatim. Answers the operation's outcome (`offloaded`, `nothing`, `stale`: the thread advanced meanwhile and the summary was discarded, `cancelled`) with `operationId` and a `message` for the user; the same `operationId` again answers the first outcome. `dryRun: true` previews. 409 while a run is queued or running; 502 when the summariser failed (the conversation is unchanged).")
  )
  .add(
    HttpApiEndpoint.post("undoOffload", "/threads/:threadId/offload/undo")
      .setPath(threadPath)
      .setPayload(CommandPayload)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(OffloadUndoReport)
      .addError(ThreadNotFound)
      .addError(RunInProgress)
      .annotate(OpenApi.Description, "Undoes the newest `/offload` not yet undone: the visible history is again what it was before it; the summary stays in the log, its record marked undone. `undone: false` with the reason when there is none or its summary is already owed by a handoff. 409 while a run is queued or running.")
  )
  .add(
    HttpApiEndpoint.get("getOffload", "/threads/:threadId/offload/:operationId")
      .setPath(offloadOperationPath)
      .addSuccess(OffloadReport)
      .addError(ThreadNotFound)
      .addError(OffloadOperationNotFound)
      .annotate(OpenApi.Description, "The outcome of an `/offload` operation (`running` while in flight).")
  )
  .add(
    HttpApiEndpoint.post("cancelOffload", "/threads/:threadId/offload/:operationId/cancel")
      .setPath(offloadOperationPath)
      .addSuccess(OffloadReport)
      .addError(ThreadNotFound)
      .addError(OffloadOperationNotFound)
      .annotate(OpenApi.Description, "Cancels an `/offload` operation in flight, in this server process or another on the same database (the request is recorded on the operation; the process running it sees it within 200 ms). Answers its outcome once settled (waiting at most 30 s for another process, then `running`): `cancelled` (nothing was written; a summariser call already billed is recorded as abandoned) or, when it had already finished or was committing, that outcome.")
  )
  .add(
    HttpApiEndpoint.get("previewToolResultOffload", "/threads/:threadId/tool-result-offload")
      .setPath(threadPath)
      .addSuccess(ToolResultOffloadPreview)
      .addError(ThreadNotFound)
      .addError(UnknownProvider)
      .addError(InvalidRequest)
      .addError(ProviderError)
      .annotate(OpenApi.Description, "The dry run of tool-result offload on the active native thread: the tool units the policy would replace with stubs before the next request, tokens before and after, the cache-rewrite cost and break-even (docs/offload.md). Changes nothing. 400 when the active provider keeps no message list (scripted instances).")
  )
  .add(
    HttpApiEndpoint.post("undoToolResultOffload", "/threads/:threadId/tool-result-offload/undo")
      .setPath(threadPath)
      .setPayload(CommandPayload)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(ToolResultOffloadUndo)
      .addError(ThreadNotFound)
      .addError(UnknownProvider)
      .addError(InvalidRequest)
      .addError(RunInProgress)
      .addError(ProviderError)
      .annotate(OpenApi.Description, "Undoes the newest tool-result offload flush of the active native thread: its results go out verbatim again from the next request on, and those units are never stubbed again (the originals were never deleted). `undone: false` when there is none. 409 while a run is queued, running or waiting.")
  )
  .add(
    HttpApiEndpoint.get("getToolResultOffloadControl", "/threads/:threadId/tool-result-offload/control")
      .setPath(threadPath)
      .addSuccess(ToolResultOffloadControlView)
      .addError(ThreadNotFound)
      .annotate(OpenApi.Description, "The thread's tool-result offload control (on/off, the policy's settings, pinned items) and what it comes to on the active provider instance (docs/offload.md \"Control\").")
  )
  .add(
    HttpApiEndpoint.put("setToolResultOffloadControl", "/threads/:threadId/tool-result-offload/control")
      .setPath(threadPath)
      .setPayload(ToolResultOffloadControlPayload)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(ToolResultOffloadControlView)
      .addError(ThreadNotFound)
      .addError(InvalidRequest)
      .annotate(OpenApi.Description, "Replaces the thread's tool-result offload control: `enabled`, `keepNewestUnits`, the window ratios, `minExpectedRequests` and `pinnedItemIds`; an absent field inherits the provider instance's value. Applies from the next model request on. 400 names a pinned id that is not an item of the thread, or a setting that breaks the policy's rules.")
  )
  .add(
    HttpApiEndpoint.post("interrupt", "/threads/:threadId/interrupt")
      .setPath(threadPath)
      .setPayload(InterruptPayload)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Run)
      .addError(ThreadNotFound)
      .addError(RunNotFound)
      .addError(NoRunInProgress)
      .addError(UnknownProvider)
      .annotate(OpenApi.Description, "Interrupts `runId`, or the thread's run in progress: a queued run ends before the provider, a running one is stopped at the provider. Answers the run as it ended.")
  )
  .middleware(Authorization)
{}

/** Messages: a user message becomes a run, queued behind the thread's run in progress. */
export class MessagesGroup extends HttpApiGroup.make("messages")
  .add(
    HttpApiEndpoint.post("send", "/threads/:threadId/messages")
      .setPath(threadPath)
      .setPayload(SendMessagePayload)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(RunAccepted, { status: 202 })
      .addError(ThreadNotFound)
      .addError(UnknownProvider)
      .addError(RunInProgress)
      .annotate(OpenApi.Description, "Queues a user message as a run and answers at once (202) with the run id; the run starts when the thread's earlier runs have ended. Follow it with `GET /runs/{runId}?waitMs=` or the event stream.")
  )
  .middleware(Authorization)
{}

/** Runs: one run with its attempts and items; a thread's runs by seq. */
export class RunsGroup extends HttpApiGroup.make("runs")
  .add(
    HttpApiEndpoint.get("get", "/runs/:runId")
      .setPath(runPath)
      .setUrlParams(Schema.Struct({ waitMs: Schema.optional(DecimalFromString.pipe(Schema.int(), Schema.between(0, 60_000))) }))
      .addSuccess(RunView)
      .addError(RunNotFound)
      .annotate(OpenApi.Description, "A run with its attempts and items. `waitMs` (0..60000) waits up to that long for the run to end, or to wait for the client's tool results, before answering (it answers as the run stands then).")
  )
  .add(
    HttpApiEndpoint.get("list", "/threads/:threadId/runs")
      .setPath(threadPath)
      .setUrlParams(Schema.Struct({ afterSeq: Schema.optional(SeqParam), limit: Schema.optional(LimitParam) }))
      .addSuccess(RunPage)
      .addError(ThreadNotFound)
      .annotate(OpenApi.Description, "A thread's runs with `seq > afterSeq` (default 0), `limit` (1..500, default 100) per page.")
  )
  .add(
    HttpApiEndpoint.post("toolResults", "/threads/:threadId/runs/:runId/tool-results")
      .setPath(threadRunPath)
      .setPayload(ToolResultsPayload)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(RunAccepted, { status: 202 })
      .addError(ThreadNotFound)
      .addError(RunNotFound)
      .addError(RunNotWaiting)
      .annotate(OpenApi.Description, "Posts the client's results for the open tool calls of a `waiting` run (one per call: an unknown call id or a call left without a result is 400 naming it; a run not waiting is 409). Answers 202 at once: the results are recorded, each after its call, and the run continues with the next model request.")
  )
  .middleware(Authorization)
{}

/** Items: a thread's items by seq; one item by id with its text paged (the ref users and the model follow). */
export class ItemsGroup extends HttpApiGroup.make("items")
  .add(
    HttpApiEndpoint.get("list", "/threads/:threadId/items")
      .setPath(threadPath)
      .setUrlParams(Schema.Struct({
        afterSeq: Schema.optional(SeqParam),
        limit: Schema.optional(LimitParam),
        batonTools: Schema.optional(Schema.Literal("true", "false"))
      }))
      .addSuccess(ItemPage)
      .addError(ThreadNotFound)
      .annotate(OpenApi.Description, "A thread's items with `seq > afterSeq` (default 0), `limit` (1..500, default 100) per page. Calls to Baton's own tools (`thread_read`, `offload_context`) and their results are left out unless `batonTools=true`: Baton ran them inside the turn, the client never does (each stays readable by id).")
  )
  .add(
    HttpApiEndpoint.get("get", "/items/:itemId")
      .setPath(itemPath)
      .setUrlParams(Schema.Struct({
        offset: Schema.optional(IntParam),
        limit: Schema.optional(DecimalFromString.pipe(Schema.int(), Schema.between(1, maxItemTextChars)))
      }))
      .addSuccess(ItemText)
      .addError(ItemNotFound)
      .annotate(OpenApi.Description, "One item; its text from character `offset` (default 0), at most `limit` characters (default 65536, at most 1048576).")
  )
  .add(
    HttpApiEndpoint.get("offloadArchive", "/threads/:threadId/offloads/:offloadId/archive")
      .setPath(offloadPath)
      .setUrlParams(Schema.Struct({
        offset: Schema.optional(DecimalFromString.pipe(Schema.int(), Schema.between(0, maxSeq))),
        limit: Schema.optional(LimitParam)
      }))
      .addSuccess(OffloadArchivePage)
      .addError(ThreadNotFound)
      .addError(OffloadNotFound)
      .annotate(OpenApi.Description, "The archive of a committed `/offload` (its `offloadId`, as its report and the `thread.offloaded` event give it): the originals its summary replaced, in order, from position `offset` (default 0), `limit` (1..500, default 100) per page; each readable in full with `GET /items/{itemId}`. The model reads the same with `thread_read` and the ref `archive:<offloadId>`.")
  )
  .middleware(Authorization)
{}

/** Handoffs: a thread's context handoffs and one handoff, each with its deliveries. */
export class HandoffsGroup extends HttpApiGroup.make("handoffs")
  .add(
    HttpApiEndpoint.get("list", "/threads/:threadId/handoffs")
      .setPath(threadPath)
      .addSuccess(HandoffList)
      .addError(ThreadNotFound)
      .annotate(OpenApi.Description, "Every context handoff of the thread, oldest first, with its deliveries.")
  )
  .add(
    HttpApiEndpoint.get("summaries", "/threads/:threadId/handoff-summaries")
      .setPath(threadPath)
      .addSuccess(HandoffSummaryList)
      .addError(ThreadNotFound)
      .annotate(OpenApi.Description, "Every context handoff of the thread, oldest first, with its deliveries, the item id lists as counts (`itemCount`, `omittedCount`, `deliveredCount`): page the ids with `/handoffs/{handoffId}/item-ids`.")
  )
  .add(
    HttpApiEndpoint.get("itemIds", "/handoffs/:handoffId/item-ids")
      .setPath(handoffPath)
      .setUrlParams(Schema.Struct({
        list: HandoffIdList,
        deliveryId: Schema.optional(DeliveryId.pipe(Schema.maxLength(maxIdLength), Schema.filter(noNul))),
        offset: Schema.optional(IntParam),
        limit: Schema.optional(LimitParam)
      }))
      .addSuccess(HandoffItemIds)
      .addError(HandoffNotFound)
      .addError(InvalidRequest)
      .annotate(OpenApi.Description, "One page of a handoff's item ids (`list=items`: owed, `omitted`: left out when it settled) or, with `deliveryId`, of one of its deliveries' (`delivered`, `omitted`), from index `offset` (default 0), at most `limit` (default 500).")
  )
  .add(
    HttpApiEndpoint.get("get", "/handoffs/:handoffId")
      .setPath(handoffPath)
      .addSuccess(HandoffView)
      .addError(HandoffNotFound)
      .annotate(OpenApi.Description, "One context handoff with its deliveries.")
  )
  .middleware(Authorization)
{}

/** The `text/event-stream` body of the event endpoints (each SSE event's `data` is one `ThreadEvent` as JSON). */
export const EventStream = HttpApiSchema.Text({ contentType: "text/event-stream" })

/** Where an event stream starts: `Last-Event-ID` (a reconnecting client) wins over `after`. */
const EventCursorHeaders = Schema.Struct({ "last-event-id": Schema.optional(Schema.String.pipe(Schema.maxLength(100))) })

/**
 * Events: a thread's events (`id:` is the event's `seq`) or every thread's (`id:` is its `globalSeq`) as server-sent
 * events, replayed after the cursor (`Last-Event-ID`, else `after`, else from the start) then followed live, opening
 * with a heartbeat comment and sending one every 15 s; `follow=false` replays and closes. A client that falls too far behind gets a last
 * `subscriber_too_slow` event (its `data` names the cursor to resume from) and the stream ends: reconnect with
 * `Last-Event-ID`. Resume from the last event received (on `/events` under Postgres, ids follow commit order and are
 * not always increasing).
 */
const EventParams = { follow: Schema.optional(Schema.BooleanFromString) }

export class EventsGroup extends HttpApiGroup.make("events")
  .add(
    HttpApiEndpoint.get("thread", "/threads/:threadId/events")
      .setPath(threadPath)
      .setHeaders(EventCursorHeaders)
      .setUrlParams(Schema.Struct({ after: Schema.optional(SeqParam), ...EventParams }))
      .addSuccess(EventStream)
      .addError(ThreadNotFound)
      .annotate(OpenApi.Description, "The thread's events after `Last-Event-ID` (or `after`; a `seq`) as server-sent events, each `id:` its `seq`, `event:` its type, `data:` the event as JSON.")
  )
  .add(
    HttpApiEndpoint.get("timeline", "/threads/:threadId/timeline")
      .setPath(threadPath)
      .addSuccess(ThreadTimeline)
      .addError(ThreadNotFound)
      .annotate(OpenApi.Description, "The thread's event log folded into what the dashboard charts (`ThreadTimeline`): occupancy points (one per run that reported usage), marks (compacted, tool results offloaded, summarised, replaced), each delivery's steps, stubbed tool call ids, through event `lastSeq`. Follow `/threads/{id}/events` after `lastSeq` for the rest: a long thread opens without replaying its whole log.")
  )
  .add(
    HttpApiEndpoint.get("all", "/events")
      .setHeaders(EventCursorHeaders)
      .setUrlParams(Schema.Struct({
        after: Schema.optional(IntParam),
        /** `true`: start at the log's end (only events committed from now on) unless `Last-Event-ID` names a cursor. */
        tail: Schema.optional(Schema.BooleanFromString),
        ...EventParams
      }))
      .addSuccess(EventStream)
      .annotate(OpenApi.Description, "Every thread's events after `Last-Event-ID` (or `after`; a `globalSeq`; `tail=true`: after the log's last event, so only what is committed from now on; not with `after`: 400) as server-sent events, each `id:` its `globalSeq`.")
  )
  .middleware(Authorization)
{}

/**
 * Session: what the presented token may do, `{ role: "admin" | "read" }` (a dashboard hides its actions for the
 * read-only token). 401 without a token or with an unknown one.
 */
export class SessionGroup extends HttpApiGroup.make("session")
  .add(
    HttpApiEndpoint.get("get", "/session")
      .addSuccess(Session)
      .annotate(OpenApi.Description, "The role of the presented token: `admin` (any endpoint) or `read` (`GET` only).")
  )
  .middleware(Authorization)
{}

/** Health: liveness and readiness, without authentication. */
export class HealthGroup extends HttpApiGroup.make("health")
  .add(
    HttpApiEndpoint.get("live", "/healthz")
      .addSuccess(Health)
      .annotate(OpenApi.Description, "Liveness: 200 while the process serves requests. No token needed.")
  )
  .add(
    HttpApiEndpoint.get("ready", "/readyz")
      .addSuccess(Readiness)
      .addError(NotReady)
      .annotate(OpenApi.Description, "Readiness: 200 when the database answers and every migration is applied, else 503. No token needed.")
  )
{}

/**
 * The Baton HTTP API. Errors any endpoint may answer: 400 `InvalidRequest` (a command that cannot be carried out as
 * given), 422 `IdempotencyKeyReused` (a write's idempotency key first used for another request), 409
 * `ConcurrentModification` (another writer won; retry), 411, 413, 415, 404 `RouteNotFound`, 500 `PersistenceError`.
 */
export class BatonApi extends HttpApi.make("BatonApi")
  .add(ThreadsGroup)
  .add(MessagesGroup)
  .add(RunsGroup)
  .add(ItemsGroup)
  .add(HandoffsGroup)
  .add(EventsGroup)
  .add(SessionGroup)
  .add(HealthGroup)
  .addError(InvalidRequest)
  .addError(IdempotencyKeyReused)
  .addError(ConcurrentModification)
  .addError(PersistenceError)
  .addError(PayloadTooLarge)
  .addError(LengthRequired)
  .addError(UnsupportedMediaType)
  .addError(RouteNotFound)
  .annotate(OpenApi.Title, "Baton")
  .annotate(OpenApi.Version, "0.1.0")
  .annotate(OpenApi.Description, "Context orchestration for coding agents: durable threads across providers, deferred context handoffs, /compact and /offload.")
{}
