/**
 * Row schemas: the domain schemas with their column encodings (`Type` = domain value, `Encoded` = the row as the
 * SQL client returns it after snake_case -> camelCase name transformation).
 */
import {
  ContextHandoff,
  HandoffDelivery,
  Item,
  ItemId,
  ItemKind,
  NativeThread,
  NativeThreadId,
  NativeThreadStatus,
  Offload,
  ProviderThread,
  ProviderThreadId,
  Run,
  RunAttempt,
  RunId,
  Thread,
  ThreadLink,
  Tokens,
  ToolCallState
} from "@baton/contracts"
import { DateTime, Schema } from "effect"
import { BoolInt, JsonIds } from "./Rows.js"

export const ThreadRow = Thread
export const RunRow = Run
export const RunAttemptRow = RunAttempt
export const ProviderThreadRow = ProviderThread
export const ThreadLinkRow = ThreadLink

export const ItemRow = Schema.Struct({ ...Item.fields, isError: BoolInt })

const itemKinds: ReadonlySet<unknown> = new Set(ItemKind.literals)
const toolCallStates: ReadonlySet<unknown> = new Set(ToolCallState.literals)
const nullOrString = (v: unknown) => v === null || typeof v === "string"

/**
 * The checks an item and its row share (`decodeItemRowFast`, `encodeItemRowFast`): ids and texts strings (`runId`,
 * `toolCallId`, `toolName`, `messageId` or `null`), `seq` a positive and `tokens` a non-negative safe integer, the
 * kind and the tool call state among their literals. `isError` and `createdAt` differ by side and are checked there.
 */
const sharedFieldsOk = (r: Record<string, unknown>): r is Record<string, unknown> & {
  readonly id: string
  readonly threadId: string
  readonly seq: number
  readonly text: string
  readonly tokens: number
} =>
  typeof r.id === "string" && typeof r.threadId === "string" && nullOrString(r.runId) &&
  typeof r.seq === "number" && Number.isSafeInteger(r.seq) && r.seq > 0 &&
  itemKinds.has(r.kind) && typeof r.text === "string" &&
  nullOrString(r.toolCallId) && nullOrString(r.toolName) && nullOrString(r.messageId) &&
  (r.toolCallState === null || toolCallStates.has(r.toolCallState)) &&
  typeof r.tokens === "number" && Number.isSafeInteger(r.tokens) && r.tokens >= 0

/**
 * `ItemRow`'s decoding without `Schema`'s walk, for the rows it would accept: the same checks by hand (strings, the
 * kind and tool call state among their literals, `seq` a positive and `tokens` a non-negative safe integer,
 * `isError` a number, `createdAt` a string `DateTime.unsafeMake` takes) and the same value (extra columns dropped).
 * `undefined` for any other row: the caller decodes it through `ItemRow` then, so a malformed row fails as before.
 * Why: items are the rows Baton reads most (a long thread's turn start after a switch reads all of them, the
 * simulator's checks every step); `Schema` took about 35 ms for 10,000 rows warm, this about 5 ms.
 * `test/ItemRows.test.ts` checks it against `ItemRow` on random rows, well-formed and not.
 */
export const decodeItemRowFast = (row: unknown): Item | undefined => {
  if (typeof row !== "object" || row === null) return undefined
  const r = row as Record<string, unknown>
  const { createdAt, isError } = r
  if (!sharedFieldsOk(r) || typeof isError !== "number" || typeof createdAt !== "string") return undefined
  let at: DateTime.Utc
  try {
    at = DateTime.unsafeMake(createdAt)
  } catch {
    return undefined
  }
  return {
    id: r.id as Item["id"],
    threadId: r.threadId as Item["threadId"],
    runId: r.runId as Item["runId"],
    seq: r.seq,
    kind: r.kind as Item["kind"],
    text: r.text,
    toolCallId: r.toolCallId as Item["toolCallId"],
    toolName: r.toolName as Item["toolName"],
    messageId: r.messageId as Item["messageId"],
    isError: isError !== 0,
    toolCallState: r.toolCallState as Item["toolCallState"],
    tokens: r.tokens,
    createdAt: at
  }
}

/**
 * `ItemRow`'s encoding without `Schema`'s walk, for the items it would accept: the same checks by hand (strings, the
 * kind and tool call state among their literals, `seq` a positive and `tokens` a non-negative safe integer, `isError`
 * a boolean, `createdAt` a `DateTime.Utc`) and the same row (`isError` 0/1, `createdAt` ISO text, extra fields
 * dropped). `undefined` for any other value: the caller encodes it through `ItemRow` then, so a malformed item fails
 * as before. Why: every turn writes its items (`ThreadStore.insertItemsAfterLast`), and `Schema` took about 5-7 µs an
 * item. `test/ItemRows.test.ts` checks it against `ItemRow` on random items, well-formed and not.
 */
export const encodeItemRowFast = (item: unknown): typeof ItemRow.Encoded | undefined => {
  if (typeof item !== "object" || item === null) return undefined
  const r = item as Record<string, unknown>
  const { createdAt, isError } = r
  if (!sharedFieldsOk(r) || typeof isError !== "boolean" || !DateTime.isDateTime(createdAt) || !DateTime.isUtc(createdAt)) return undefined
  return {
    id: r.id,
    threadId: r.threadId,
    runId: r.runId as string | null,
    seq: r.seq,
    kind: r.kind as Item["kind"],
    text: r.text,
    toolCallId: r.toolCallId as string | null,
    toolName: r.toolName as string | null,
    messageId: r.messageId as string | null,
    isError: isError ? 1 : 0,
    toolCallState: r.toolCallState as Item["toolCallState"],
    tokens: r.tokens,
    createdAt: isoOf(createdAt)
  }
}

/**
 * `DateTime.formatIso(at)`, remembering the last instant formatted: the items of one append share their `createdAt`,
 * and formatting it again for each of 100,000 items cost about 60 ms under the unit of work's lock.
 */
const isoOf = (() => {
  let lastMillis = Number.NaN
  let lastIso = ""
  return (at: DateTime.Utc): string => {
    if (at.epochMillis !== lastMillis) {
      lastIso = DateTime.formatIso(at)
      lastMillis = at.epochMillis
    }
    return lastIso
  }
})()

export const HandoffRow = Schema.Struct({
  ...ContextHandoff.fields,
  open: BoolInt,
  sourceRunIds: JsonIds(RunId),
  itemIds: JsonIds(ItemId),
  omittedItemIds: JsonIds(ItemId)
})
export type HandoffRow = typeof HandoffRow.Type

export const DeliveryRow = Schema.Struct({
  ...HandoffDelivery.fields,
  deliveredItemIds: JsonIds(ItemId),
  omittedItemIds: JsonIds(ItemId)
})

/** Native threads store their usage flattened in three nullable columns. */
export const NativeThreadRow = Schema.transform(
  Schema.Struct({
    id: NativeThreadId,
    providerThreadId: ProviderThreadId,
    generation: Schema.Int,
    nativeRef: Schema.String,
    status: NativeThreadStatus,
    usedTokens: Schema.NullOr(Tokens),
    maxTokens: Schema.NullOr(Tokens),
    autoCompactThreshold: Schema.NullOr(Tokens),
    estimatedTokens: Tokens,
    compactionsWithoutProgress: Schema.Int,
    heldAtLeast: Schema.NullOr(Tokens),
    createdAt: Schema.String,
    updatedAt: Schema.String
  }),
  NativeThread,
  {
    strict: false,
    decode: (row) => ({
      id: row.id,
      providerThreadId: row.providerThreadId,
      generation: row.generation,
      nativeRef: row.nativeRef,
      status: row.status,
      usage: row.usedTokens === null ? null : {
        usedTokens: row.usedTokens,
        ...(row.maxTokens === null ? {} : { maxTokens: row.maxTokens }),
        ...(row.autoCompactThreshold === null ? {} : { autoCompactThreshold: row.autoCompactThreshold })
      },
      estimatedTokens: row.estimatedTokens,
      compactionsWithoutProgress: row.compactionsWithoutProgress,
      ...(row.heldAtLeast === null ? {} : { heldAtLeast: row.heldAtLeast }),
      createdAt: row.createdAt,
      updatedAt: row.updatedAt
    }),
    encode: (n) => ({
      id: n.id,
      providerThreadId: n.providerThreadId,
      generation: n.generation,
      nativeRef: n.nativeRef,
      status: n.status,
      usedTokens: n.usage?.usedTokens ?? null,
      maxTokens: n.usage?.maxTokens ?? null,
      autoCompactThreshold: n.usage?.autoCompactThreshold ?? null,
      estimatedTokens: n.estimatedTokens,
      compactionsWithoutProgress: n.compactionsWithoutProgress,
      heldAtLeast: n.heldAtLeast ?? null,
      createdAt: n.createdAt,
      updatedAt: n.updatedAt
    })
  }
)

export const OffloadRow = Schema.Struct({ ...Offload.fields, coveredItemIds: JsonIds(ItemId) })
