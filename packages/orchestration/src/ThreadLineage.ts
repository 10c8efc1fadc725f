/**
 * ThreadLineage: forks and merge-backs as portable context handoffs.
 *
 * A fork is a new thread whose history starts with its parent's history through one run; a merge-back brings what a
 * fork did since the fork (or since its last merge) into the parent. Both copy that history, in order, into one
 * synthetic run of the receiving thread (a `handoff_marker` saying what was copied, then copies of the transferable
 * items) and owe it to the receiving provider thread with a `fork` or `merge` handoff. From then on the copied history
 * is ordinary history of the receiving thread: deferred when it does not fit, forwarded on a switch, redelivered on a
 * native-thread replacement, drained by `/compact`. The originals stay where they were (nothing is moved or edited).
 *
 * A synthetic run is `completed`, never reached a provider as a prompt (`prompt` is empty, `stopPoint` is
 * `before_provider`) and is recorded in `thread_links`, so its handoff — not missed-run recovery nor a switch — owes
 * its items (see `ContextHandoffDelivery.coveredRuns`).
 *
 * A native fork (`fork` with `held`): the provider copied the parent's native thread itself (`forkThread`, e.g. Codex
 * `thread/fork`) and the fork's provider thread starts on that copy. The synthetic run is then recorded as seen by
 * that native thread (`nativeThreadId`, `stopPoint: "after_provider"`: its history reached the provider, natively)
 * and no handoff owes it: nothing is replayed, and everything else (a switch, a replacement native thread, a merge)
 * treats it as the history of a run that native thread ran. ThreadService decides when a native fork is exact.
 *
 * It owns the copying and the link records. It does not own command receipts or validation (ThreadService).
 */
import {
  type ContextHandoff,
  type Item,
  type NativeThread,
  type ProviderThread,
  type Run,
  type Thread,
  type ThreadLink
} from "@baton/contracts"
import { ThreadStore } from "@baton/persistence"
import { DateTime, Effect } from "effect"
import { ContextHandoffDelivery, isTransferable } from "./ContextHandoffDelivery.js"
import { IdGenerator } from "./IdGenerator.js"
import { ItemLog } from "./ItemLog.js"
import * as Span from "./internal/Span.js"

/**
 * What a fork or a merge-back wrote: the link, its synthetic run, the copied item count, the handoff, and (a native
 * fork) the native thread that holds the copied history.
 */
export interface LinkOutcome {
  readonly link: ThreadLink
  readonly run: Run
  readonly itemCount: number
  readonly tokens: number
  readonly handoff: ContextHandoff | null
  readonly native: NativeThread | null
}

/**
 * A native thread the provider forked from the parent's (`ProviderAdapterShape.forkThread`): its reference, the
 * parent's native thread it copies (`source`), and the driver whose provider session holds it (the process that
 * forked it, so the first turn does not resume it).
 */
export interface HeldFork {
  readonly nativeRef: string
  readonly source: NativeThread
  readonly driverId: string
}

const range = (from: number, through: number) => (from + 1 === through ? `run ${through}` : `runs ${from + 1}–${through}`)

export class ThreadLineage extends Effect.Service<ThreadLineage>()("@baton/orchestration/ThreadLineage", {
  effect: Effect.gen(function*() {
    const store = yield* ThreadStore
    const ids = yield* IdGenerator
    const itemLog = yield* ItemLog
    const delivery = yield* ContextHandoffDelivery

    /**
     * Appends to `threadId` a synthetic run on `providerThread` holding `marker` (a `handoff_marker` item) and copies
     * of `source` (same kind, text, tool call id, name and state; new ids), then owes the copies to `providerThread`
     * with a handoff of `kind` — unless `held`, the native thread that already holds them (a native fork): the run is
     * then recorded as seen by it and nothing is owed. Joins the caller's transaction.
     */
    const copyInto = (
      kind: "fork" | "merge",
      threadId: Thread["id"],
      providerThread: ProviderThread,
      marker: string,
      source: ReadonlyArray<Item>,
      held: NativeThread | null = null
    ) =>
      Effect.gen(function*() {
        const now = yield* DateTime.now
        const run: Run = {
          id: ids.next("run") as Run["id"],
          threadId,
          seq: yield* store.nextRunSeq(threadId),
          providerThreadId: providerThread.id,
          status: "completed",
          prompt: "",
          stopPoint: held === null ? "before_provider" : "after_provider",
          failureReason: null,
          failureCode: null,
          nativeThreadId: held?.id ?? null,
          createdAt: now,
          updatedAt: now
        }
        yield* store.insertRun(run)
        const copies = yield* itemLog.append(threadId, run.id, [
          {
            kind: "handoff_marker",
            text: marker,
            toolCallId: null,
            toolName: null,
            messageId: null,
            isError: false,
            toolCallState: null
          },
          ...source.map((i) => ({
            kind: i.kind,
            text: i.text,
            toolCallId: i.toolCallId,
            toolName: i.toolName,
            messageId: i.messageId,
            isError: i.isError,
            toolCallState: i.toolCallState
          }))
        ])
        const handoff = held === null ? yield* delivery.createHandoff(threadId, kind, providerThread, [run]) : null
        return { run, handoff, tokens: copies.slice(1).reduce((n, i) => n + i.tokens, 0) }
      })

    /**
     * Records the native thread the provider forked (`heldFork`) as the first, active native thread (generation 1)
     * of `providerThread`, held by the forking driver's session, with a `native_thread.started` event. It starts with
     * its source's usage and estimate: the copy holds the source's context byte for byte (Codex 0.171.0: the fork's
     * first request is the parent's conversation plus the new prompt), so what Baton knew of the source's size is
     * what it knows of the copy's (invariant 1: a near-full parent makes a near-full fork). This is not another
     * native thread's telemetry reused for different content (a replacement starts at 0).
     */
    const recordHeldFork = (providerThread: ProviderThread, heldFork: HeldFork) =>
      Effect.gen(function*() {
        const now = yield* DateTime.now
        const native: NativeThread = {
          id: ids.next("nat") as NativeThread["id"],
          providerThreadId: providerThread.id,
          generation: 1,
          nativeRef: heldFork.nativeRef,
          status: "active",
          usage: heldFork.source.usage,
          estimatedTokens: heldFork.source.estimatedTokens,
          compactionsWithoutProgress: 0,
          createdAt: now,
          updatedAt: now
        }
        yield* store.insertNativeThread(native)
        yield* store.holdSession(native.id, heldFork.driverId, false)
        yield* store.appendEvent({ threadId: providerThread.threadId, type: "native_thread.started", payload: {
          nativeThreadId: native.id,
          providerThreadId: providerThread.id,
          generation: native.generation,
          replaces: null
        } })
        return native
      })

    /**
     * Forks `parent` into the new thread `fork` (already created, with its provider thread `providerThread`, which has
     * no native thread yet): copies the transferable items of `sourceRuns` (the parent's runs `1..atRunSeq`, all
     * ended) into the fork's first run and owes them to `providerThread` with a `fork` handoff. With `heldFork` (a
     * native fork of the parent's native thread, which holds exactly that history: ThreadService decides) the
     * provider thread starts on that native thread instead, which holds the copies already: no handoff, and the
     * provider thread is synced through the fork's run. Joins the caller's transaction.
     */
    const fork = Span.fn("ThreadLineage.fork")(function*(
      parent: Thread,
      forkThread: Thread,
      providerThread: ProviderThread,
      atRunSeq: number,
      sourceRuns: ReadonlyArray<Run>,
      heldFork: HeldFork | null = null
    ) {
      const original = (yield* store.listItemsOfRuns(sourceRuns.map((r) => r.id))).filter(isTransferable)
      // The parent's model-visible history: where an /offload summary covers only history up to the fork point, the
      // fork gets the summary instead of the originals it covers (the newest such summary of the chain).
      const sourceIds = new Set<string>(original.map((i) => i.id))
      let source: ReadonlyArray<Item> = original
      const covered = new Set<string>()
      let usable: { readonly summaryItemId: Item["id"]; readonly covered: ReadonlySet<string> } | null = null
      for (const offload of yield* store.listOffloads(parent.id)) {
        for (const id of offload.coveredItemIds) covered.add(id)
        if ([...covered].every((id) => sourceIds.has(id))) usable = { summaryItemId: offload.summaryItemId, covered: new Set(covered) }
      }
      if (usable !== null) {
        const summary = yield* store.getItems([usable.summaryItemId])
        source = [...summary, ...original.filter((i) => !usable.covered.has(i.id))]
      }
      const marker = atRunSeq === 0
        ? `Forked from thread ${parent.id} before its first run: no earlier history.`
        : heldFork !== null
        ? `Forked from thread ${parent.id} at ${range(0, atRunSeq)}: ${source.length} earlier item(s), held natively by ` +
          `${providerThread.providerInstance}'s fork of the parent's native thread. The originals stay readable by id in ${parent.id}.`
        : `Forked from thread ${parent.id} at ${range(0, atRunSeq)}: ${source.length} earlier item(s), owed to ` +
          `${providerThread.providerInstance} as a fork handoff. The originals stay readable by id in ${parent.id}.`
      const native = heldFork === null ? null : yield* recordHeldFork(providerThread, heldFork)
      const copied = yield* copyInto("fork", forkThread.id, providerThread, marker, source, native)
      if (native !== null) {
        const now = yield* DateTime.now
        yield* store.updateProviderThread({ ...providerThread, activeNativeThreadId: native.id, syncedRunSeq: copied.run.seq, updatedAt: now })
      }
      const link: ThreadLink = {
        id: ids.next("lnk"),
        kind: "fork",
        parentThreadId: parent.id,
        forkThreadId: forkThread.id,
        runId: copied.run.id,
        fromRunSeq: 0,
        throughRunSeq: atRunSeq,
        itemCount: source.length,
        handoffId: copied.handoff?.id ?? null,
        createdAt: yield* DateTime.now
      }
      yield* store.insertLink(link)
      yield* store.appendEvent({ threadId: parent.id, type: "thread.forked", payload: { linkId: link.id, forkThreadId: forkThread.id, atRunSeq } })
      yield* store.appendEvent({ threadId: forkThread.id, type: "thread.forked", payload: {
        linkId: link.id,
        parentThreadId: parent.id,
        atRunSeq,
        runId: copied.run.id,
        itemCount: source.length,
        handoffId: link.handoffId,
        ...(native === null ? {} : { nativeThreadId: native.id })
      } })
      return { link, run: copied.run, itemCount: source.length, tokens: copied.tokens, handoff: copied.handoff, native } satisfies LinkOutcome
    })

    /**
     * Merges the fork's runs `(fromRunSeq, throughRunSeq]` (all ended) back into `parent`: copies their transferable
     * items into a new run of the parent and owes them to `providerThread` (the parent's active provider thread) with
     * a `merge` handoff. Returns `null` (writes nothing) when those runs hold no transferable item. A turn running on
     * the parent is not disturbed: the handoff is delivered at the parent's next turn start. Joins the caller's
     * transaction.
     */
    const mergeBack = Span.fn("ThreadLineage.mergeBack")(function*(
      forkThread: Thread,
      parent: Thread,
      providerThread: ProviderThread,
      fromRunSeq: number,
      sourceRuns: ReadonlyArray<Run>
    ) {
      const throughRunSeq = sourceRuns.at(-1)?.seq ?? fromRunSeq
      const source = (yield* store.listItemsOfRuns(sourceRuns.map((r) => r.id))).filter(isTransferable)
      if (source.length === 0) return null
      const marker = `Merged back from fork ${forkThread.id} (${range(fromRunSeq, throughRunSeq)}): ` +
        `${source.length} item(s), owed to ${providerThread.providerInstance} as a merge handoff. The originals stay ` +
        `readable by id in ${forkThread.id}.`
      const copied = yield* copyInto("merge", parent.id, providerThread, marker, source)
      const link: ThreadLink = {
        id: ids.next("lnk"),
        kind: "merge",
        parentThreadId: parent.id,
        forkThreadId: forkThread.id,
        runId: copied.run.id,
        fromRunSeq,
        throughRunSeq,
        itemCount: source.length,
        handoffId: copied.handoff?.id ?? null,
        createdAt: yield* DateTime.now
      }
      yield* store.insertLink(link)
      yield* store.appendEvent({ threadId: parent.id, type: "thread.merged", payload: {
        linkId: link.id,
        forkThreadId: forkThread.id,
        runId: copied.run.id,
        fromRunSeq,
        throughRunSeq,
        itemCount: source.length,
        handoffId: link.handoffId
      } })
      yield* store.appendEvent({ threadId: forkThread.id, type: "thread.merged", payload: { linkId: link.id, parentThreadId: parent.id, throughRunSeq } })
      return { link, run: copied.run, itemCount: source.length, tokens: copied.tokens, handoff: copied.handoff, native: null } satisfies LinkOutcome
    })

    return { fork, mergeBack }
  })
}) {}
