/**
 * GatewayConversations: the repository of the gateway's agent conversations (table `gateway_conversations`, migration
 * 0016; docs/gateway.md). One row per conversation: its key, the Baton thread recording it, the baseline (the
 * fingerprints of the messages Baton stored for it, in order, with their content prints), how many requests it made
 * and how many of them did not extend the baseline (divergences and re-renders: the generation of its message ids). It owns SQL and row encoding only: what a fingerprint is, and when the baseline moves,
 * is the orchestration's `GatewayThreads`. Callers run these inside a unit of work (the thread's lock).
 */
import type { ConcurrentModification, PersistenceError } from "@baton/contracts"
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { orPersistence } from "./internal/errors.js"

/**
 * A conversation's baseline: `prints` the fingerprints of its messages in conversation order; `content` (the same
 * length) each message's content print (what the gateway compares when the agent re-renders its history; `""`: a
 * message of the agent's context only), `null` when not known; `replied` how many of the last `prints` are the reply
 * Baton recorded for the request before them (absent or 0: none recorded since that request, or a baseline written
 * before replies were counted), so that a retry of that request is recognised as one; `others` (only beside a
 * `replied` reply) the fingerprints of each other reply Baton recorded for that same request (answers to concurrent
 * requests repeating it), so that the agent's next request going on from one of them is recognised as such.
 */
export const Baseline = Schema.Struct({
  prints: Schema.Array(Schema.String),
  content: Schema.NullOr(Schema.Array(Schema.String)),
  replied: Schema.optional(Schema.Int.pipe(Schema.nonNegative())),
  others: Schema.optional(Schema.Array(Schema.Array(Schema.String)))
})
export type Baseline = typeof Baseline.Type

/**
 * The `baseline` column: a JSON array of the fingerprints (as migration 0016 wrote it: no content prints), or
 * `{"prints":[…],"content":[…]}` when the content prints are known, and `{"prints":[…],"content":[…] or
 * null,"replied":n}` when the baseline ends with a recorded reply (with `"others":[[…],…]` when other replies to its
 * request were recorded). The object form needs no new column: the column is
 * JSON text either way, and a row written in an earlier form still reads (its content `null`, no reply counted). A
 * baseline without a reply is written as before, so `extendBaseline`'s comparison of column texts holds.
 */
const BaselineColumn = Schema.transform(
  Schema.parseJson(Schema.Union(
    Schema.Array(Schema.String),
    Schema.Struct({
      prints: Schema.Array(Schema.String),
      content: Schema.NullOr(Schema.Array(Schema.String)),
      replied: Schema.optional(Schema.Int.pipe(Schema.nonNegative())),
      others: Schema.optional(Schema.Array(Schema.Array(Schema.String)))
    })
  )),
  Baseline,
  {
    strict: true,
    decode: (stored) => ("prints" in stored ? stored : { prints: stored, content: null }),
    encode: (b) => columnForm(b)
  }
)

/** A baseline in its column's form: the fingerprints alone, or the object (see `BaselineColumn`). */
const columnForm = (b: Baseline) =>
  b.replied !== undefined && b.replied > 0
    ? b.others !== undefined && b.others.length > 0
      ? { prints: b.prints, content: b.content, replied: b.replied, others: b.others }
      : { prints: b.prints, content: b.content, replied: b.replied }
    : b.content === null
    ? b.prints
    : { prints: b.prints, content: b.content }

/**
 * One conversation. `baseline`: its messages' fingerprints (and content prints) in conversation order; `requests`:
 * how many requests it made; `divergences`: how many of them did not extend the baseline (a divergence or a re-render:
 * each starts a generation of message ids).
 */
export const Conversation = Schema.Struct({
  conversationKey: Schema.String,
  threadId: Schema.String,
  baseline: BaselineColumn,
  requests: Schema.Int,
  divergences: Schema.Int,
  /** The `tool_use` ids whose results go out as stubs (gateway tool-result offload; only grows). */
  offloaded: Schema.parseJson(Schema.Array(Schema.String)),
  /** Fingerprint of a message the agent received -> the messages the upstream exchanged in its place (hidden `thread_read` rounds). */
  expansions: Schema.parseJson(Schema.Record({ key: Schema.String, value: Schema.Array(Schema.Unknown) })),
  createdAt: Schema.String,
  updatedAt: Schema.String
})
export type Conversation = typeof Conversation.Type

/** The repository's operations. */
export interface GatewayConversationsShape {
  /** The conversation of `key`, if any. Fails with `PersistenceError`. */
  readonly find: (key: string) => Effect.Effect<Option.Option<Conversation>, PersistenceError | ConcurrentModification>
  /** Inserts a new conversation; a key already taken fails with `ConcurrentModification`. */
  readonly insert: (c: Conversation) => Effect.Effect<void, PersistenceError | ConcurrentModification>
  /** Rewrites the baseline, the counts and the offloaded ids of `c.conversationKey`. */
  readonly update: (c: Conversation) => Effect.Effect<void, PersistenceError | ConcurrentModification>
  /**
   * `update(c)` only if the row is still `expected` (every column `update` writes holds `expected`'s value, as its
   * column's text): one statement, nothing read back. Returns whether it was; when not, nothing is written. For a
   * caller that holds the row as it last wrote it and would otherwise read it back to check (a read folded into the
   * write: another writer's change since is seen as `false`).
   */
  readonly updateIfUnchanged: (expected: Conversation, c: Conversation) => Effect.Effect<boolean, PersistenceError | ConcurrentModification>
  /**
   * Sets the baseline of `key` to `baseline` (and its `updatedAt`) only if it is still `expected`: one statement,
   * nothing read back. Returns whether it was (a request of the conversation that moved the baseline since leaves it).
   * The stored baseline is compared as its column's text: `expected` in the column's form (`{"prints":[…],"content":[…]}`
   * when its content prints are known) or as the fingerprints' array alone (a row written before content prints
   * existed, whose content is unknown); either way it is the same fingerprints.
   */
  readonly extendBaseline: (
    key: string,
    expected: Baseline,
    baseline: Baseline,
    updatedAt: string
  ) => Effect.Effect<boolean, PersistenceError | ConcurrentModification>
  /** The conversations recorded by `threadId` (normally one). */
  readonly ofThread: (threadId: string) => Effect.Effect<ReadonlyArray<Conversation>, PersistenceError | ConcurrentModification>
}

const encode = Schema.encode(Conversation)
const decode = Schema.decodeUnknown(Conversation)

const isStrings = (u: unknown): u is ReadonlyArray<string> => Array.isArray(u) && u.every((s) => typeof s === "string")
const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)
const parsedOrUndefined = (text: unknown): unknown => {
  if (typeof text !== "string") return undefined
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/**
 * A row as `Conversation` decodes it, without `Schema`'s walk over the baseline's hundreds of strings (each request
 * reads its conversation twice): `undefined` when the row is not plainly well-formed, and then `Schema` decodes it
 * (and its error is the repository's). The same value as `Conversation`'s decoding for every row it accepts.
 */
const decodeFast = (row: unknown): Conversation | undefined => {
  if (!isObject(row)) return undefined
  const { conversationKey, createdAt, divergences, requests, threadId, updatedAt } = row
  if (typeof conversationKey !== "string" || typeof threadId !== "string" || typeof createdAt !== "string" || typeof updatedAt !== "string") return undefined
  if (!Number.isInteger(requests) || !Number.isInteger(divergences)) return undefined
  const column = parsedOrUndefined(row.baseline)
  const replied = isObject(column) ? column.replied : undefined
  const others = isObject(column) ? column.others : undefined
  const baseline: Baseline | undefined = isStrings(column)
    ? { prints: column, content: null }
    : !isObject(column) || !isStrings(column.prints) || !(column.content === null || isStrings(column.content))
    ? undefined
    : replied === undefined
    ? others === undefined ? { prints: column.prints, content: column.content } : undefined
    : !Number.isInteger(replied) || (replied as number) < 0
    ? undefined
    : others === undefined
    ? { prints: column.prints, content: column.content, replied: replied as number }
    : Array.isArray(others) && others.every(isStrings)
    ? { prints: column.prints, content: column.content, replied: replied as number, others }
    : undefined
  if (baseline === undefined) return undefined
  const offloaded = parsedOrUndefined(row.offloaded)
  const expansions = parsedOrUndefined(row.expansions)
  if (!isStrings(offloaded) || !isObject(expansions) || !Object.values(expansions).every(Array.isArray)) return undefined
  return {
    conversationKey,
    threadId,
    baseline,
    requests: requests as number,
    divergences: divergences as number,
    offloaded,
    expansions: expansions as Conversation["expansions"],
    createdAt,
    updatedAt
  }
}

/** A row decoded as a `Conversation` (`decodeFast`, else `Schema`: fails with its `ParseError`). */
const decodeRow = (row: unknown) => {
  const fast = decodeFast(row)
  return fast === undefined ? decode(row) : Effect.succeed(fast)
}

/** `baselineColumn`'s texts by baseline (baselines are never changed once made: a conversation's next is a new one). */
const baselineTexts = new WeakMap<Baseline, string>()

/**
 * A baseline as its column holds it (the text `Conversation.baseline` decodes; `JSON.stringify`, as `Schema.parseJson`
 * encodes). Kept by baseline: the text written is the text `updateIfUnchanged` compares with next time.
 */
export const baselineColumn = (b: Baseline): string => {
  let text = baselineTexts.get(b)
  if (text === undefined) {
    text = JSON.stringify(columnForm(b))
    baselineTexts.set(b, text)
  }
  return text
}

/** Builds the repository on the ambient `SqlClient` (SQLite or Postgres; the same statements on both). */
export const make: Effect.Effect<GatewayConversationsShape, never, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const findOne = (key: string) =>
    Effect.flatMap(sql`SELECT * FROM gateway_conversations WHERE conversation_key = ${key}`, (rows) =>
      rows.length === 0 ? Effect.succeed(Option.none<Conversation>()) : Effect.map(decodeRow(rows[0]), Option.some))
  const ofThread = (threadId: string) =>
    Effect.flatMap(
      sql`SELECT * FROM gateway_conversations WHERE thread_id = ${threadId} ORDER BY created_at`,
      (rows) => Effect.forEach(rows, decodeRow)
    )
  return {
    find: (key) => findOne(key).pipe(orPersistence("gatewayConversations.find")),
    insert: (c) =>
      Effect.flatMap(encode(c), (row) => sql`INSERT INTO gateway_conversations ${sql.insert(row)}`).pipe(
        Effect.asVoid,
        orPersistence("gatewayConversations.insert")
      ),
    // The row's columns written directly (`Conversation`'s encoding: JSON text; the counts whole numbers).
    update: (c) =>
      sql`UPDATE gateway_conversations SET baseline = ${baselineColumn(c.baseline)}, requests = ${c.requests},
          divergences = ${c.divergences}, offloaded = ${JSON.stringify(c.offloaded)}, expansions = ${JSON.stringify(c.expansions)},
          updated_at = ${c.updatedAt} WHERE conversation_key = ${c.conversationKey}`.pipe(
        Effect.asVoid,
        orPersistence("gatewayConversations.update")
      ),
    updateIfUnchanged: (expected, c) =>
      sql`UPDATE gateway_conversations SET baseline = ${baselineColumn(c.baseline)}, requests = ${c.requests},
          divergences = ${c.divergences}, offloaded = ${JSON.stringify(c.offloaded)}, expansions = ${JSON.stringify(c.expansions)},
          updated_at = ${c.updatedAt} WHERE conversation_key = ${c.conversationKey} AND thread_id = ${expected.threadId}
          AND baseline = ${baselineColumn(expected.baseline)} AND requests = ${expected.requests} AND divergences = ${expected.divergences}
          AND offloaded = ${JSON.stringify(expected.offloaded)} AND expansions = ${JSON.stringify(expected.expansions)}
          AND updated_at = ${expected.updatedAt}
          RETURNING conversation_key`.pipe(
        Effect.map((rows) => rows.length > 0),
        orPersistence("gatewayConversations.updateIfUnchanged")
      ),
    extendBaseline: (key, expected, baseline, updatedAt) =>
      Effect.suspend(() =>
        sql`UPDATE gateway_conversations SET baseline = ${baselineColumn(baseline)}, updated_at = ${updatedAt}
            WHERE conversation_key = ${key} AND (baseline = ${baselineColumn(expected)} OR baseline = ${baselineColumn({ prints: expected.prints, content: null })})
            RETURNING conversation_key`
      ).pipe(
        Effect.map((rows) => rows.length > 0),
        orPersistence("gatewayConversations.extendBaseline")
      ),
    ofThread: (threadId) => ofThread(threadId).pipe(orPersistence("gatewayConversations.ofThread"))
  }
})
