/**
 * CommandReceipts: the rules of command receipts, in one place. A command id seen before returns the result stored
 * with its first run, decoded through the result's schema (`@baton/contracts` Results); the id must come back with
 * the same command: the same type, the same thread and the same payload (compared by fingerprint). Anything else is
 * an `InvalidRequest` telling the user to send the command with a new command id — otherwise the second command
 * would be silently dropped and the first one's result returned.
 *
 * It does not decide when a receipt is written (each command writes it in the transaction of its outcome).
 */
import { type CommandId, type Commands, IdempotencyKeyReused, InvalidRequest, type ThreadId } from "@baton/contracts"
import type { ThreadStore } from "@baton/persistence"
import { hash } from "node:crypto"
import { DateTime, Effect, Schema } from "effect"

/** What identifies one command's receipt: its id, type, thread (`null`: not about one thread) and payload fingerprint. */
export interface Key {
  readonly commandId: CommandId
  readonly commandType: Commands.Command["_tag"]
  readonly threadId: ThreadId | null
  readonly fingerprint: string
}

/**
 * JSON with object keys sorted, so the same payload always gives the same text (members that are `undefined` left out;
 * an array element that JSON cannot write, as `undefined`, written empty). One string built by concatenation: the
 * text every receipt stored so far was fingerprinted with (`CommandReceipts.test` holds it to the earlier
 * map/filter/join form on arbitrary values), so a retry across an upgrade still matches its receipt.
 */
export const canonical = (value: unknown): string => {
  if (typeof value !== "object" || value === null) return JSON.stringify(value)
  if (Array.isArray(value)) {
    let text = "["
    for (let i = 0; i < value.length; i++) text += (i === 0 ? "" : ",") + (canonical(value[i]) ?? "")
    return text + "]"
  }
  const record = value as Record<string, unknown>
  let text = "{"
  let first = true
  for (const key of Object.keys(record).sort()) {
    const member = record[key]
    if (member === undefined) continue
    text += (first ? "" : ",") + JSON.stringify(key) + ":" + String(canonical(member))
    first = false
  }
  return text + "}"
}

/**
 * The fingerprint of a command's payload: the SHA-256 (hex) of its encoded form without `commandId`, keys sorted.
 * Two commands have the same fingerprint exactly when every field but the command id is equal (an omitted optional
 * field differs from one given explicitly, even when it equals the default).
 */
export const fingerprint = (command: Commands.Command): string => {
  const { commandId: _, ...payload } = command
  return hash("sha256", canonical(payload), "hex")
}

/** The receipt key of `command`, on `threadId`. */
export const keyOf = (command: Commands.Command, threadId: ThreadId | null): Key => ({
  commandId: command.commandId,
  commandType: command._tag,
  threadId,
  fingerprint: fingerprint(command)
})

/**
 * The receipt of `key.commandId` if the command was seen before, checked to be the same command. Fails with
 * `IdempotencyKeyReused` when the id was used by another command type, on another thread, or with another payload;
 * `PersistenceError`.
 */
export const find = (store: ThreadStore, key: Key) =>
  Effect.gen(function*() {
    const seen = yield* store.findReceipt(key.commandId)
    if (seen._tag === "None") return seen
    const r = seen.value
    const mismatch = r.commandType !== key.commandType
      ? "command"
      : key.threadId !== null && r.threadId !== null && r.threadId !== key.threadId
      ? "thread"
      : r.payloadFingerprint !== null && r.payloadFingerprint !== key.fingerprint
      ? "payload"
      : null
    if (mismatch === null) return seen
    return yield* new IdempotencyKeyReused({
      commandId: key.commandId,
      commandType: key.commandType,
      usedBy: r.commandType,
      ...(r.threadId === null || mismatch === "payload" ? {} : { threadId: r.threadId }),
      mismatch
    })
  })

/** Decodes a stored result; one that does not decode (a receipt of an older shape) is an `InvalidRequest`. */
export const decode = <A, I>(schema: Schema.Schema<A, I>, commandId: CommandId, result: unknown) =>
  Schema.decodeUnknown(schema)(result).pipe(
    Effect.mapError(() =>
      new InvalidRequest({ reason: `the stored result of command ${commandId} cannot be read; use a new command id` })
    )
  )

/** The receipt row of `key` with `result` encoded by `schema`, stamped now (an encoding failure is a defect). */
const receiptRow = <A, I>(key: Key, schema: Schema.Schema<A, I>, result: A) =>
  Effect.gen(function*() {
    return {
      commandId: key.commandId,
      commandType: key.commandType,
      threadId: key.threadId,
      result: yield* Schema.encode(schema)(result).pipe(Effect.orDie),
      payloadFingerprint: key.fingerprint,
      createdAt: yield* DateTime.now
    }
  })

/** Writes the receipt of `key` with `result` encoded by `schema`; returns `result`. Fails with `PersistenceError`. */
export const write = <A, I>(store: ThreadStore, key: Key, schema: Schema.Schema<A, I>, result: A) =>
  Effect.gen(function*() {
    yield* store.insertReceipt(yield* receiptRow(key, schema, result))
    return result
  })

/**
 * Writes the receipt of `key` with `result` encoded by `schema` unless the command id was seen before, in one
 * statement: `true` when written; `false` when a receipt exists (nothing written: `find` it to check it is the same
 * command). Fails with `PersistenceError`.
 */
export const writeIfNew = <A, I>(store: ThreadStore, key: Key, schema: Schema.Schema<A, I>, result: A) =>
  Effect.gen(function*() {
    return yield* store.insertReceiptIfNew(yield* receiptRow(key, schema, result))
  })

/** Replaces the result of a receipt written when its command began (encoded by `schema`). Fails with `PersistenceError`. */
export const complete = <A, I>(store: ThreadStore, commandId: CommandId, schema: Schema.Schema<A, I>, result: A) =>
  Effect.flatMap(Schema.encode(schema)(result).pipe(Effect.orDie), (encoded) => store.updateReceipt(commandId, encoded))
