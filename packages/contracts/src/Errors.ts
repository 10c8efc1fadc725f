/**
 * Boundary errors: failures that reach a user (CLI, HTTP, persisted run failure). Each carries what the user needs
 * to act and is annotated with its HTTP status through `HttpApiSchema.annotations({ status })`, the annotation
 * HttpApi reads when it encodes an error response (a plain `{ status }` object is ignored and served as 500).
 */
import { HttpApiSchema } from "@effect/platform"
import { Option, Schema } from "effect"

export class ThreadNotFound extends Schema.TaggedError<ThreadNotFound>()(
  "ThreadNotFound",
  { threadId: Schema.String },
  HttpApiSchema.annotations({ status: 404 })
) {
  override get message() {
    // Any client reads it (curl, a web UI, the CLI under --server, which names its own command): the API's list.
    return `thread ${this.threadId} not found (GET /threads lists the threads)`
  }
}

/**
 * No run `runId`, or none where the request looked for it: addressed under thread `threadId` (a path
 * `/threads/{threadId}/…`), a run of another thread is not found there, and `ownerThreadId` names the thread it belongs
 * to (absent: no run has this id). Its message names the API's list of a thread's runs, as `ThreadNotFound`'s names
 * the API's list of threads; the CLI under `--server` says its own command instead.
 */
export class RunNotFound extends Schema.TaggedError<RunNotFound>()(
  "RunNotFound",
  { runId: Schema.String, threadId: Schema.optional(Schema.String), ownerThreadId: Schema.optional(Schema.String) },
  HttpApiSchema.annotations({ status: 404 })
) {
  override get message() {
    if (this.threadId === undefined) return `run ${this.runId} not found (list a thread's runs with GET /threads/{threadId}/runs)`
    if (this.ownerThreadId === undefined) return `run ${this.runId} not found: no run has this id (thread ${this.threadId}'s runs: GET /threads/${this.threadId}/runs)`
    return `run ${this.runId} is not a run of thread ${this.threadId}: it belongs to thread ${this.ownerThreadId}; ` +
      `address it under /threads/${this.ownerThreadId}`
  }

  /**
   * The refusal of run `runId` addressed under thread `threadId` where `found` (the run the store holds under that
   * id, if any) is not a run of that thread: naming the thread it belongs to, or saying that no run has the id.
   */
  static onThread(runId: string, threadId: string, found: Option.Option<{ readonly threadId: string }>) {
    return new RunNotFound({ runId, threadId, ...(Option.isSome(found) ? { ownerThreadId: found.value.threadId } : {}) })
  }
}

export class UnknownProvider extends Schema.TaggedError<UnknownProvider>()(
  "UnknownProvider",
  { provider: Schema.String, known: Schema.Array(Schema.String) },
  HttpApiSchema.annotations({ status: 400 })
) {
  override get message() {
    return `unknown provider "${this.provider}" (configured: ${this.known.join(", ") || "none"})`
  }
}

/** A request that cannot be carried out as given: malformed option, bad value, wrong state. */
export class InvalidRequest extends Schema.TaggedError<InvalidRequest>()(
  "InvalidRequest",
  { reason: Schema.String },
  HttpApiSchema.annotations({ status: 400 })
) {
  override get message() {
    return this.reason
  }
}

/**
 * An idempotency key (the `Idempotency-Key` header, or the body's `commandId`) that a request reuses for another
 * request: `commandId` was first used by `usedBy` (a command type: `SendMessage`, …), on thread `threadId` when it had
 * one, and this request is `commandType`; `mismatch` says what differs: `command` (another command type), `thread`
 * (the same command on another thread), `payload` (the same command and thread, other fields). Nothing was written and
 * the first command's result stands. HTTP 422 Unprocessable Content, as draft-ietf-httpapi-idempotency-key-header
 * ("Error Scenarios") answers a key reused with a different request payload.
 */
export class IdempotencyKeyReused extends Schema.TaggedError<IdempotencyKeyReused>()(
  "IdempotencyKeyReused",
  {
    commandId: Schema.String,
    commandType: Schema.String,
    usedBy: Schema.String,
    threadId: Schema.optional(Schema.String),
    mismatch: Schema.Literal("command", "thread", "payload")
  },
  HttpApiSchema.annotations({ status: 422 })
) {
  override get message() {
    const on = this.threadId === undefined ? "" : ` on thread ${this.threadId}`
    return this.mismatch === "payload"
      ? `command id ${this.commandId} was already used by ${this.usedBy}${on} with a different payload; ` +
        `a retry must repeat the command unchanged: send this ${this.commandType} with a new command id`
      : `command id ${this.commandId} was already used by ${this.usedBy}${on}; send ${this.commandType} with a new command id`
  }
}

/** A run is already in progress on the thread; wait for it or interrupt it. */
export class RunInProgress extends Schema.TaggedError<RunInProgress>()(
  "RunInProgress",
  { threadId: Schema.String, runId: Schema.String },
  HttpApiSchema.annotations({ status: 409 })
) {
  override get message() {
    return `thread ${this.threadId} already has run ${this.runId} in progress; interrupt it or wait`
  }
}

/**
 * Another writer changed the same record first: a unique constraint fired (Postgres `23505`, SQLite
 * `SQLITE_CONSTRAINT_UNIQUE`/`_PRIMARYKEY`), or the database reported write contention it would not wait out
 * (Postgres `40001`/`40P01`, SQLite `SQLITE_BUSY` after the busy timeout), or the server cancelled the statement
 * (Postgres `57014`: another session's `pg_cancel_backend`, a server-side `statement_timeout`; Baton never cancels
 * one itself). Nothing of the command was written; retry it.
 * `threadId` is set when the unit of work knew its thread; `operation` names the statement that lost; `reason` says
 * when it was a busy database or a cancelled statement rather than another writer's change (the message says which).
 */
export class ConcurrentModification extends Schema.TaggedError<ConcurrentModification>()(
  "ConcurrentModification",
  {
    threadId: Schema.optional(Schema.String),
    operation: Schema.optional(Schema.String),
    /**
     * What stopped the write, when it was not another writer's change: `busy` (SQLite: another process held the
     * database's write lock past the busy timeout), `cancelled` (Postgres: the server cancelled the statement, 57014).
     * Absent: another writer changed the record first (a unique violation, a serialization failure, a deadlock).
     */
    reason: Schema.optional(Schema.Literal("busy", "cancelled"))
  },
  HttpApiSchema.annotations({ status: 409 })
) {
  override get message() {
    const what = this.threadId === undefined ? "the record" : `thread ${this.threadId}`
    const where = this.operation === undefined ? "" : ` (${this.operation})`
    if (this.reason === "busy") {
      return `the database was busy: another process held its write lock past the busy timeout${where}; nothing was written, retry the command`
    }
    if (this.reason === "cancelled") return `the database server cancelled the statement${where}; nothing was written, retry the command`
    return `${what} was changed by another writer${where}; retry the command`
  }
}

/**
 * The durable store failed; `operation` names the repository call. HTTP 500, not 503: it covers transient driver
 * failures and rows that do not decode alike, and a 503 would invite automatic retries of a fault that a retry
 * cannot fix; a lost race is `ConcurrentModification` (409), never this.
 */
export class PersistenceError extends Schema.TaggedError<PersistenceError>()(
  "PersistenceError",
  { operation: Schema.String, detail: Schema.String },
  HttpApiSchema.annotations({ status: 500 })
) {
  override get message() {
    return `storage error in ${this.operation}: ${this.detail}`
  }
}

/**
 * Why a provider call failed:
 * - `refused`: the provider rejected the request before reading it;
 * - `interrupted`: the turn was interrupted before the provider started it;
 * - `timeout`: no answer before the deadline (the provider may or may not have read the prompt);
 * - `overflow`: the request exceeds the model's context window (rejected before it was read);
 * - `ack_lost`: the call reached the provider but its acknowledgement was lost (outcome uncertain);
 * - `unavailable`: the provider could not be reached or could not serve the call;
 * - `thread_not_found`: the provider no longer has the native thread;
 * - `protocol`: the provider answered something Baton cannot interpret.
 */
export const ProviderErrorCode = Schema.Literal(
  "refused",
  "interrupted",
  "timeout",
  "overflow",
  "ack_lost",
  "unavailable",
  "thread_not_found",
  "protocol"
)
export type ProviderErrorCode = typeof ProviderErrorCode.Type

/**
 * The provider failed a call. `retryable` tells whether the same call may succeed later. An `overflow` carries, when
 * the provider said so, `requestedTokens` (the size of the request in the provider's tokens, Anthropic's N in
 * `prompt is too long: N tokens > M maximum`, OpenAI's "your messages resulted in N tokens") and `limitTokens` (M,
 * the model's window); `httpStatus` is the provider's HTTP status when it answered with an error status.
 */
export class ProviderError extends Schema.TaggedError<ProviderError>()(
  "ProviderError",
  {
    provider: Schema.String,
    operation: Schema.String,
    reason: Schema.String,
    code: ProviderErrorCode,
    retryable: Schema.Boolean,
    requestedTokens: Schema.optional(Schema.Int),
    limitTokens: Schema.optional(Schema.Int),
    httpStatus: Schema.optional(Schema.Int)
  },
  HttpApiSchema.annotations({ status: 502 })
) {
  override get message() {
    return `provider ${this.provider} failed ${this.operation} (${this.code}): ${this.reason}`
  }
}

/**
 * `/offload` could not summarise: the summariser failed (or returned an empty summary). Nothing was replaced and no
 * placeholder was written: the history, its visible form and every handoff are exactly as before. `retryable` tells
 * whether the same command may succeed later.
 */
export class OffloadFailed extends Schema.TaggedError<OffloadFailed>()(
  "OffloadFailed",
  { threadId: Schema.String, reason: Schema.String, retryable: Schema.Boolean },
  HttpApiSchema.annotations({ status: 502 })
) {
  override get message() {
    return `could not offload thread ${this.threadId}: ${this.reason}. The history is unchanged (nothing was ` +
      `summarised or replaced)${this.retryable ? "; retry /offload later (with a new operation id)" : ""}`
  }
}

/** An `/offload` operation id that names no operation of the thread. */
export class OffloadOperationNotFound extends Schema.TaggedError<OffloadOperationNotFound>()(
  "OffloadOperationNotFound",
  { threadId: Schema.String, operationId: Schema.String },
  HttpApiSchema.annotations({ status: 404 })
) {
  override get message() {
    return `no /offload operation ${this.operationId} on thread ${this.threadId}`
  }
}

/** Another `/offload` of thread `threadId` (operation `operationId`) is still running: read it or cancel it. */
export class OffloadInProgress extends Schema.TaggedError<OffloadInProgress>()(
  "OffloadInProgress",
  { threadId: Schema.String, operationId: Schema.String },
  HttpApiSchema.annotations({ status: 409 })
) {
  override get message() {
    return `thread ${this.threadId} already has /offload ${this.operationId} running; GET /threads/${this.threadId}/offload/${this.operationId} ` +
      `to wait for its outcome, or cancel it, then offload again`
  }
}

/** No committed `/offload` `offloadId` on thread `threadId` (an unknown id, or one of another thread). */
export class OffloadNotFound extends Schema.TaggedError<OffloadNotFound>()(
  "OffloadNotFound",
  { threadId: Schema.String, offloadId: Schema.String },
  HttpApiSchema.annotations({ status: 404 })
) {
  override get message() {
    return `no offload ${this.offloadId} on thread ${this.threadId}`
  }
}

/** A transcript file could not be read or parsed. `line` is 1-based; `field` is a JSON path within the line. */
export class TranscriptError extends Schema.TaggedError<TranscriptError>()(
  "TranscriptError",
  {
    file: Schema.String,
    line: Schema.optional(Schema.Int),
    field: Schema.optional(Schema.String),
    reason: Schema.String
  },
  HttpApiSchema.annotations({ status: 400 })
) {
  override get message() {
    const at = this.line === undefined ? "" : `:${this.line}`
    const field = this.field === undefined ? "" : ` (field ${this.field})`
    return `${this.file}${at}${field}: ${this.reason}`
  }
}

/**
 * A live event stream fell more than `bufferSize` events behind what was being committed: the stream ends (the
 * server's memory per subscriber stays bounded) and the client resumes by cursor — over SSE, by reconnecting with
 * `Last-Event-ID: <cursor>`, which replays what it missed with no gap and no duplicate. `cursor` is the last event
 * the stream delivered (`seq` on a thread's stream, `threadId` set; `globalSeq` on the stream of all threads,
 * `threadId` null), or the cursor it started from when it delivered none. 503: the service is fine, retry now.
 */
export class SubscriberTooSlow extends Schema.TaggedError<SubscriberTooSlow>()(
  "SubscriberTooSlow",
  { threadId: Schema.NullOr(Schema.String), cursor: Schema.Int, bufferSize: Schema.Int },
  HttpApiSchema.annotations({ status: 503 })
) {
  override get message() {
    const stream = this.threadId === null ? "the event stream" : `the event stream of thread ${this.threadId}`
    return `${stream} fell more than ${this.bufferSize} events behind; reconnect with Last-Event-ID: ${this.cursor} to resume`
  }
}

/** An item id that names no item. */
export class ItemNotFound extends Schema.TaggedError<ItemNotFound>()(
  "ItemNotFound",
  { itemId: Schema.String },
  HttpApiSchema.annotations({ status: 404 })
) {
  override get message() {
    return `item ${this.itemId} not found`
  }
}

/** A handoff id that names no handoff. */
export class HandoffNotFound extends Schema.TaggedError<HandoffNotFound>()(
  "HandoffNotFound",
  { handoffId: Schema.String },
  HttpApiSchema.annotations({ status: 404 })
) {
  override get message() {
    return `handoff ${this.handoffId} not found (list a thread's handoffs with GET /threads/{threadId}/handoffs)`
  }
}

/** An interrupt asked of a thread with no run queued or running: nothing to interrupt. */
export class NoRunInProgress extends Schema.TaggedError<NoRunInProgress>()(
  "NoRunInProgress",
  { threadId: Schema.String },
  HttpApiSchema.annotations({ status: 409 })
) {
  override get message() {
    return `thread ${this.threadId} has no run queued or running; there is nothing to interrupt`
  }
}

/**
 * Tool results were posted for a run that is not waiting for them: it has not called a client tool yet (`queued`,
 * `starting`, `running`), its results were already posted, or it has ended. `status` is the run's status now.
 */
export class RunNotWaiting extends Schema.TaggedError<RunNotWaiting>()(
  "RunNotWaiting",
  { runId: Schema.String, status: Schema.String },
  HttpApiSchema.annotations({ status: 409 })
) {
  override get message() {
    return `run ${this.runId} is not waiting for tool results (it is ${this.status}); results are accepted only while the run is waiting`
  }
}

/** The request carried no bearer token, or one the server does not know. */
export class Unauthorized extends Schema.TaggedError<Unauthorized>()(
  "Unauthorized",
  { reason: Schema.String },
  HttpApiSchema.annotations({ status: 401 })
) {
  override get message() {
    return `${this.reason}; send "Authorization: Bearer <token>"`
  }
}

/** The token is valid but may not do this: the read-only token on a write. */
export class Forbidden extends Schema.TaggedError<Forbidden>()(
  "Forbidden",
  { reason: Schema.String },
  HttpApiSchema.annotations({ status: 403 })
) {
  override get message() {
    return this.reason
  }
}

/** The request body is larger than the server's limit (`limitBytes`, in bytes). Nothing was read past it or written. */
export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()(
  "PayloadTooLarge",
  { limitBytes: Schema.Int },
  HttpApiSchema.annotations({ status: 413 })
) {
  override get message() {
    return `the request body exceeds the limit of ${this.limitBytes} bytes`
  }
}

/**
 * The body is not JSON in UTF-8: a `Content-Type` other than `application/json`, or one that declares a charset
 * other than UTF-8 (`charset=utf-8`, or none; RFC 8259 §8.1).
 */
export class UnsupportedMediaType extends Schema.TaggedError<UnsupportedMediaType>()(
  "UnsupportedMediaType",
  { contentType: Schema.String },
  HttpApiSchema.annotations({ status: 415 })
) {
  override get message() {
    return `unsupported Content-Type "${this.contentType}"; send application/json in UTF-8 (no charset, or charset=utf-8)`
  }
}

/** No endpoint has this method and path. */
export class RouteNotFound extends Schema.TaggedError<RouteNotFound>()(
  "RouteNotFound",
  { method: Schema.String, path: Schema.String },
  HttpApiSchema.annotations({ status: 404 })
) {
  override get message() {
    return `no endpoint ${this.method} ${this.path} (the API is described at /openapi.json and /docs)`
  }
}

/** `/readyz`: the server cannot serve yet — the database is unreachable or its migrations are not all applied. */
export class NotReady extends Schema.TaggedError<NotReady>()(
  "NotReady",
  { reason: Schema.String },
  HttpApiSchema.annotations({ status: 503 })
) {
  override get message() {
    return `not ready: ${this.reason}`
  }
}

/** A request body sent without `Content-Length` (chunked): the server takes only bodies of declared length. */
export class LengthRequired extends Schema.TaggedError<LengthRequired>()(
  "LengthRequired",
  {},
  HttpApiSchema.annotations({ status: 411 })
) {
  override get message() {
    return "a request body needs a Content-Length header (chunked bodies are not accepted)"
  }
}
