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
 * A merge-back into a parent with an unfinished run (a turn running, waiting on a client tool, or messages queued)
 * takes its place in the parent's order after that run, as a message queued behind it would: its synthetic run is
 * written at once (the next seq, with the link and `thread.merged` naming `behindRunId`) but owes its copies
 * (`runs.prompt_owed`, the mark a queued message's owed prompt uses), and they and the handoff are written by the end
 * of the last run ahead of it (`recordOwedMerge`, called from `RunLifecycle.recordOwedPrompts`), after everything
 * that run records. Written at once, the copies took seqs between the running turn's prompt and its answer: the record
 * read as if the model had seen the merged history before it answered, and a provider later given that history got
 * the answer after content its model never saw. A crash in between loses nothing: the mark is durable, and the run
 * ahead is ended by restart recovery, which records what is owed.
 *
 * It owns the copying and the link records. It does not own command receipts or validation (ThreadService).
 */
import {
  type ContextHandoff,
  type Item,
  type NativeThread,
  PersistenceError,
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
  /** A merge written behind an unfinished run of the parent: that run; its copies and handoff are owed till it ends. */
  readonly behind: Run | null
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

/** The `handoff_marker` text of a merge-back's copies. */
const mergeMarker = (forkThreadId: Thread["id"], fromRunSeq: number, throughRunSeq: number, itemCount: number, providerInstance: string) =>
  `Merged back from fork ${forkThreadId} (${range(fromRunSeq, throughRunSeq)}): ${itemCount} item(s), owed to ` +
  `${providerInstance} as a merge handoff. The originals stay readable by id in ${forkThreadId}.`

export class ThreadLineage extends Effect.Service<ThreadLineage>()("@baton/orchestration/ThreadLineage", {
  effect: Effect.gen(function*() {
    const store = yield* ThreadStore
    const ids = yield* IdGenerator
    const itemLog = yield* ItemLog
    const delivery = yield* ContextHandoffDelivery

    /** Inserts the synthetic run of a fork or merge into `threadId` (see `copyInto`), with the next seq. */
    const insertCopyRun = (threadId: Thread["id"], providerThread: ProviderThread, held: NativeThread | null) =>
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
        return run
      })

    /**
     * Appends to synthetic `run` its `marker` and copies of `source`, and owes them to `providerThread` with a handoff
     * of `kind` (none when `held`: see `copyInto`). Returns the handoff and the copies' tokens.
     */
    const writeCopies = (
      kind: "fork" | "merge",
      run: Run,
      providerThread: ProviderThread,
      marker: string,
      source: ReadonlyArray<Item>,
      held: NativeThread | null
    ) =>
      Effect.gen(function*() {
        const threadId = run.threadId
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
          // A copy renders as its original does (no field of the render differs; `seq` is not counted): it takes the
          // original's count, so a fork or merge of a long thread counts nothing under its unit of work's lock.
          ...source.map((i) => ({
            kind: i.kind,
            text: i.text,
            toolCallId: i.toolCallId,
            toolName: i.toolName,
            messageId: i.messageId,
            isError: i.isError,
            toolCallState: i.toolCallState,
            tokens: i.tokens
          }))
        ])
        const handoff = held === null ? yield* delivery.createHandoff(threadId, kind, providerThread, [run]) : null
        return { run, handoff, tokens: copies.slice(1).reduce((n, i) => n + i.tokens, 0) }
      })

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
      Effect.flatMap(insertCopyRun(threadId, providerThread, held), (run) => writeCopies(kind, run, providerThread, marker, source, held))

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
      return { link, run: copied.run, itemCount: source.length, tokens: copied.tokens, handoff: copied.handoff, native, behind: null } satisfies LinkOutcome
    })

    /**
     * Merges the fork's runs `(fromRunSeq, throughRunSeq]` (all ended) back into `parent`: copies their transferable
     * items into a new run of the parent and owes them to `providerThread` (the parent's active provider thread) with
     * a `merge` handoff. Returns `null` (writes nothing) when those runs hold no transferable item. A turn running on
     * the parent is not disturbed: the handoff is delivered at the parent's next turn start. With an unfinished run of
     * the parent ahead of the new run (`behind`), only the run, the link and the events are written now, the run marked
     * as owing its copies (see the module's docblock; `recordOwedMerge` writes them). Joins the caller's transaction.
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
      const run = yield* insertCopyRun(parent.id, providerThread, null)
      const ahead = yield* store.findFirstUnfinishedRun(parent.id)
      const behind = ahead._tag === "Some" && ahead.value.seq < run.seq ? ahead.value : null
      let copied: { readonly handoff: ContextHandoff | null; readonly tokens: number }
      if (behind === null) {
        const marker = mergeMarker(forkThread.id, fromRunSeq, throughRunSeq, source.length, providerThread.providerInstance)
        copied = yield* writeCopies("merge", run, providerThread, marker, source, null)
      } else {
        yield* store.setPromptOwed(run.id, true)
        // The copies' counts are their originals' (the same rendered form, counted by the same counter).
        copied = { handoff: null, tokens: source.reduce((n, i) => n + i.tokens, 0) }
      }
      const link: ThreadLink = {
        id: ids.next("lnk"),
        kind: "merge",
        parentThreadId: parent.id,
        forkThreadId: forkThread.id,
        runId: run.id,
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
        runId: run.id,
        fromRunSeq,
        throughRunSeq,
        itemCount: source.length,
        handoffId: link.handoffId,
        ...(behind === null ? {} : { behindRunId: behind.id })
      } })
      yield* store.appendEvent({ threadId: forkThread.id, type: "thread.merged", payload: { linkId: link.id, parentThreadId: parent.id, throughRunSeq } })
      return { link, run, itemCount: source.length, tokens: copied.tokens, handoff: copied.handoff, native: null, behind } satisfies LinkOutcome
    })

    /**
     * Writes the copies a merge recorded behind an unfinished run owes (`mergeBack`): merge `link`'s synthetic `run`
     * gets its marker and the fork's transferable items of runs `(fromRunSeq, throughRunSeq]` — the first
     * `link.itemCount` of them, in seq order: the items there were at the merge (output a fork's run records after
     * its end comes later in the fork's order, and is not part of this merge) — owed to the run's provider thread by
     * a `merge` handoff, named on the link. The caller clears the run's mark (`RunLifecycle.recordOwedPrompts`, once
     * every run ahead has ended; no switch can happen meanwhile: a thread with an unfinished run refuses one). Joins
     * the caller's transaction. Fails with `PersistenceError` (the run's provider thread missing included).
     */
    const recordOwedMerge = Span.fn("ThreadLineage.recordOwedMerge")(function*(run: Run, link: ThreadLink) {
      const forkRuns = yield* store.listRunsBetween(link.forkThreadId, link.fromRunSeq, link.throughRunSeq + 1)
      const source = (yield* store.listItemsOfRuns(forkRuns.map((r) => r.id))).filter(isTransferable).slice(0, link.itemCount)
      const found = yield* store.getProviderThread(run.providerThreadId)
      if (found._tag === "None") {
        return yield* new PersistenceError({ operation: "ThreadLineage.recordOwedMerge", detail: `provider thread ${run.providerThreadId} of merge run ${run.id} not found` })
      }
      const providerThread = found.value
      const marker = mergeMarker(link.forkThreadId, link.fromRunSeq, link.throughRunSeq, source.length, providerThread.providerInstance)
      const copied = yield* writeCopies("merge", run, providerThread, marker, source, null)
      if (copied.handoff !== null) yield* store.setLinkHandoff(link.id, copied.handoff.id)
      return copied
    })

    return { fork, mergeBack, recordOwedMerge }
  })
}) {}
