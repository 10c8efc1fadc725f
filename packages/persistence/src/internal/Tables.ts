/**
 * Row schemas: the domain schemas with their column encodings (`Type` = domain value, `Encoded` = the row as the
 * SQL client returns it after snake_case -> camelCase name transformation).
 */
import {
  ContextHandoff,
  HandoffDelivery,
  Item,
  ItemId,
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
  Tokens
} from "@baton/contracts"
import { Schema } from "effect"
import { BoolInt, JsonArray } from "./Rows.js"

export const ThreadRow = Thread
export const RunRow = Run
export const RunAttemptRow = RunAttempt
export const ProviderThreadRow = ProviderThread
export const ThreadLinkRow = ThreadLink

export const ItemRow = Schema.Struct({ ...Item.fields, isError: BoolInt })

export const HandoffRow = Schema.Struct({
  ...ContextHandoff.fields,
  open: BoolInt,
  sourceRunIds: JsonArray(RunId),
  itemIds: JsonArray(ItemId),
  omittedItemIds: JsonArray(ItemId)
})
export type HandoffRow = typeof HandoffRow.Type

export const DeliveryRow = Schema.Struct({
  ...HandoffDelivery.fields,
  deliveredItemIds: JsonArray(ItemId),
  omittedItemIds: JsonArray(ItemId)
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
      createdAt: n.createdAt,
      updatedAt: n.updatedAt
    })
  }
)

export const OffloadRow = Schema.Struct({ ...Offload.fields, coveredItemIds: JsonArray(ItemId) })
