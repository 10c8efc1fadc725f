/**
 * NativeMessageLog: the durable message list of a model-API native thread (docs/design.md "Provider adapters": for
 * stateless APIs the native thread is the message list Baton keeps for that lane).
 *
 * Each entry is one or more wire messages exactly as Baton sends them (`body`: JSON text, already encoded, so a
 * request after a restart concatenates the very same bytes), numbered from 1 per native thread. The adapter owns
 * what goes in; the log owns keeping it. `@baton/persistence`'s `NativeMessageStore` implements it on SQLite and
 * Postgres.
 */
import type { ConcurrentModification, ContextUsage, PersistenceError } from "@baton/contracts"
import { Context, type Effect } from "effect"

/**
 * What an entry holds: the user's turn (its prompt, and inline history before it), an injected history block, the
 * model's output of one request, tool results sent back, or a tool-result offload (`offload`: not a wire message; its
 * body is `OffloadBody` JSON naming earlier `tool_results` entries and the stub bodies that replace them in every later
 * request; the originals stay in the log).
 */
export type NativeEntryKind = "turn" | "history" | "output" | "tool_results" | "offload"

/**
 * The body of an `offload` entry: each replaced entry's `seq` and the body requests carry instead (a flush), or the
 * `seq`s whose original bodies requests carry again (`restores`: an undone flush; those units are never stubbed again).
 * Offload entries apply in log order.
 */
export interface OffloadBody {
  readonly replaces: ReadonlyArray<{ readonly seq: number; readonly body: string }>
  readonly restores?: ReadonlyArray<number>
}

/**
 * One entry. `body` is a JSON array of the entry's wire messages without its brackets (comma-joined message texts),
 * so a request's message list is the entries' bodies joined by commas. `runId`: the Baton run of a `turn`, `output`
 * or `tool_results`; `deliveryIds`: the deliveries an injected `history` settles; `usage`: the context usage reported
 * after an `output`.
 */
export interface NativeEntry {
  readonly seq: number
  readonly kind: NativeEntryKind
  readonly runId: string | null
  readonly deliveryIds: ReadonlyArray<string>
  readonly usage: ContextUsage | null
  readonly body: string
}

export interface NativeMessageLogShape {
  /**
   * Appends `entries` (numbered `seq`, consecutive after the last stored one). Fails with `ConcurrentModification`
   * when another writer stored an entry with one of these numbers first.
   */
  readonly append: (
    providerInstance: string,
    nativeRef: string,
    entries: ReadonlyArray<NativeEntry>
  ) => Effect.Effect<void, PersistenceError | ConcurrentModification>
  /** The entries of `nativeRef` with `seq > afterSeq`, in order (all of them with 0). */
  readonly load: (nativeRef: string, afterSeq: number) => Effect.Effect<ReadonlyArray<NativeEntry>, PersistenceError>
  /** The highest stored `seq` of `nativeRef`, 0 when it holds nothing. */
  readonly lastSeq: (nativeRef: string) => Effect.Effect<number, PersistenceError>
}

export class NativeMessageLog extends Context.Tag("@baton/providers/NativeMessageLog")<
  NativeMessageLog,
  NativeMessageLogShape
>() {}
