/**
 * ThreadOffload: the `/offload` path (docs/design.md vocabulary). It summarises a thread's older history into one
 * `summary` item and records what the summary stands for, so the model-visible history becomes
 * [latest summary] + every item after its cut. Originals are never edited or deleted (invariant 6), and the cut never
 * separates a tool call from its result (invariant 7).
 *
 * The summary chain: each offload summarises the previous summary's text together with *every* item between the
 * previous cut and the new one — including the items the previous pass kept verbatim — so after any number of
 * offloads the chain covers every item before the latest cut and nothing falls in a gap (the field bug this fixes:
 * a second summarisation that saw only the previous summary and the items after it dropped what the first kept).
 *
 * Deferred history converges: open handoffs whose deferred deliveries owe covered items are superseded by one
 * handoff per provider thread owing the summary plus the uncovered items (ContextHandoffDelivery.supersedeForSummary).
 *
 * The summariser's window: a history larger than the summariser's declared `inputWindow` is summarised in chunks
 * that fit, each call refining the summary so far (the "refine" strategy: previous summary + the next items), an
 * item too large for any call alone is given to it clipped (its original stays readable by id). A summary that is
 * not smaller than what it replaces (the previous summary plus the covered items) is refused: `/offload` never makes
 * the model-visible history larger (invariant 8).
 *
 * It owns the cut choice (via `@baton/context` OffloadCut), the summariser call and the offload record. It does not
 * own the native threads: nothing is sent to a provider here; the summary reaches a provider only as owed history.
 */
import {
  type Item,
  type ItemId,
  type Offload,
  OffloadFailed,
  OffloadReport,
  RunInProgress,
  ConcurrentModification,
  type ThreadId
} from "@baton/contracts"
import { OffloadCut, Render, TokenCounter } from "@baton/context"
import { ThreadStore, UnitOfWork } from "@baton/persistence"
import { Summariser } from "@baton/providers"
import { Data, DateTime, Effect } from "effect"
import * as CommandReceipts from "./CommandReceipts.js"
import { ContextHandoffDelivery } from "./ContextHandoffDelivery.js"
import { IdGenerator } from "./IdGenerator.js"
import { ItemLog } from "./ItemLog.js"

/**
 * A chunked summary cannot go on: the summary so far fills the summariser's input window (not retryable), or a call
 * answered with no less text than it was given (a verbose model: retryable).
 */
class SummaryRejected extends Data.TaggedError("SummaryRejected")<{ readonly reason: string; readonly retryable: boolean }> {}

/**
 * Below this many rendered tokens of replaced history (the previous summary plus the items the cut covers), a
 * summary that comes back no smaller is the history being too small to summarise, not the summariser failing:
 * `/offload` is then a no-op that says so instead of an `OffloadFailed` to retry. A summary costs a header and a
 * line per request (the scripted digest's header alone is about 15 tokens, a real model's structured summary
 * several hundred).
 */
export const minOffloadTokens = 512

/**
 * The most tokens of one pinned item a summary carries verbatim (`ThreadOffload`): a pinned item larger than that is
 * cut, its original readable by ref, so that pinning a huge first message cannot make every summary too large.
 */
export const maxPinnedTokens = 2_000

/**
 * The items an offload through item `cutSeq` must keep verbatim in its summary (issue "Server-owned /offload" item 3):
 * the thread's first user message, and the items of the thread's pins (`ToolResultOffloadControl.pinnedItemIds`), of
 * those at or before the cut, in thread order.
 */
export const pinnedItems = (items: ReadonlyArray<Item>, pinnedIds: ReadonlyArray<string>, cutSeq: number): ReadonlyArray<Item> => {
  const first = items.find((i) => i.kind === "user_message")
  const ids = new Set<string>(pinnedIds)
  if (first !== undefined) ids.add(first.id)
  return items.filter((i) => ids.has(i.id) && i.seq <= cutSeq)
}

/** The largest default verbatim tail, in tokens: docs/design.md's turn-start token cap (16,000). */
export const maxDefaultKeepTokens = 16_000

/**
 * The verbatim tail `/offload` keeps when the command does not say, in tokens: min(16,000, floor(window / 4)) of
 * the active provider thread's context window, 16,000 when the window is unknown. A quarter of the window leaves the
 * reserve (docs/design.md Budget: max(16,000, window/4)) and the summary room on small windows; 16,000 matches the
 * turn-start cap, so on large windows the recent tail is what one turn start could deliver in full.
 */
export const defaultKeepTokens = (window: number | null): number =>
  window === null ? maxDefaultKeepTokens : Math.min(maxDefaultKeepTokens, Math.floor(window / 4))

/** What `/offload` did (the schema lives in contracts). */
export { OffloadReport } from "@baton/contracts"

/** The model-visible history: the latest summary (if any) and the verbatim items after its cut. */
export interface VisibleHistory {
  readonly offload: Offload | null
  readonly summary: Item | null
  readonly items: ReadonlyArray<Item>
}

export class ThreadOffload extends Effect.Service<ThreadOffload>()("@baton/orchestration/ThreadOffload", {
  effect: Effect.gen(function*() {
    const uow = yield* UnitOfWork
    const store = yield* ThreadStore
    const ids = yield* IdGenerator
    const itemLog = yield* ItemLog
    const delivery = yield* ContextHandoffDelivery
    const summariser = yield* Summariser.Summariser
    const counter = yield* TokenCounter.TokenCounter

    /** `item` with its text cut to fit `room` rendered tokens, saying so, or `item` itself when it fits. */
    const clipped = (item: Item, room: number): Item => {
      if (item.tokens <= room) return item
      let chars = Math.floor((item.text.length * room) / item.tokens)
      for (;;) {
        const left = item.text.length - chars
        const text = `${item.text.slice(0, Math.max(0, chars))}\n[… ${left} characters left out for the summary; the original is readable with thread_read #${item.seq}]`
        const candidate = { ...item, text, tokens: Render.itemTokens(counter, { ...item, text }) }
        if (candidate.tokens <= room || chars === 0) return candidate
        chars = Math.floor(chars * 0.8)
      }
    }

    /**
     * The summary of `previousSummary` + `items`, in as many summariser calls as its `inputWindow` needs (one when
     * it declares none). Fails with `ProviderError` (a call failed) or with the reason no call can make progress
     * (the summary so far leaves no room in the window).
     */
    const summariseInChunks = (threadId: ThreadId, previousSummary: string | null, items: ReadonlyArray<Item>) =>
      Effect.gen(function*() {
        const window = summariser.inputWindow
        if (window === null) return { text: (yield* summariser.summarise({ threadId, previousSummary, items })).text, calls: 1 }
        let summary = previousSummary
        let calls = 0
        let next = 0
        while (next < items.length) {
          const room = window - (summary === null ? 0 : counter.count(summary))
          // Below this the summariser would see a clipped fragment per call: not a summary of anything.
          if (room < 256) {
            return yield* new SummaryRejected({
              reason: `the summary so far (${summary === null ? 0 : counter.count(summary)} tokens) leaves no room in the summariser's ${window}-token window`,
              retryable: false
            })
          }
          const chunk: Array<Item> = []
          let used = 0
          while (next < items.length) {
            const item = clipped(items[next]!, room)
            if (chunk.length > 0 && used + item.tokens > room) break
            chunk.push(item)
            used += item.tokens
            next++
          }
          const input = (summary === null ? 0 : counter.count(summary)) + used
          const answer = (yield* summariser.summarise({ threadId, previousSummary: summary, items: chunk })).text
          calls++
          // Each call of a chunked summary must shrink what it was given, or the summary so far outgrows the window
          // chunk by chunk (a summary of one call is judged against everything it replaces, by the caller).
          const answered = counter.count(answer)
          if (answered >= input && !(calls === 1 && next === items.length)) {
            return yield* new SummaryRejected({
              reason: `the summariser answered chunk ${calls} (${input} tokens) with ${answered} tokens: a summary must be ` +
                `smaller than what it replaces, so it was not applied`,
              retryable: true
            })
          }
          summary = answer
        }
        return { text: summary ?? "", calls }
      })

    /**
     * `summary` with every pinned item it does not already hold verbatim appended under `[pinned, verbatim]`, each
     * rendered with its ref (`Render.renderItem`) and cut to `maxPinnedTokens` (the rest readable by that ref): a
     * pinned item is never summarised away, whatever the summariser wrote.
     */
    const withPinned = (summary: string, pinned: ReadonlyArray<Item>): string => {
      const missing = pinned.filter((i) => !summary.includes(i.text.trim()))
      if (missing.length === 0) return summary
      return `${summary.trimEnd()}\n\n[pinned, verbatim]\n${missing.map((i) => Render.renderItem(clipped(i, maxPinnedTokens))).join("\n\n")}`
    }

    /**
     * The model-visible history of `threadId`: [latest summary] + every item after its cut (offload summaries
     * excepted); without an offload, every item. Fails with `PersistenceError`.
     */
    const visibleHistory = Effect.fn("ThreadOffload.visibleHistory")(function*(threadId: ThreadId) {
      const items = yield* store.listItems(threadId)
      const offloads = yield* store.listOffloads(threadId)
      const visible = OffloadCut.visibleHistory(items, offloads)
      return { offload: offloads.at(-1) ?? null, summary: visible.summary, items: visible.items } satisfies VisibleHistory
    })

    const failed = (threadId: ThreadId, keepTokens: number, cutSeq: number, reason: string, retryable: boolean) =>
      Effect.gen(function*() {
        // The only write of a failed offload: the audit event. No summary, no record, no handoff changes.
        yield* uow.thread(threadId, "ThreadOffload.failed")(store.appendEvent({ threadId, type: "thread.offload_failed", payload: { reason, keepTokens, cutSeq } }))
        return yield* new OffloadFailed({ threadId, reason, retryable })
      })

    /**
     * Offloads `threadId`, keeping the newest `keepTokens` (rendered tokens) verbatim; with `receiptKey`, records the
     * command receipt with the outcome. The caller checks the thread and that no run is active. The summariser is called outside any transaction; the summary item, the offload
     * record, the handoff supersession and the `thread.offloaded` event are then written in one transaction.
     * Returns a report (`offloaded: false` with the reason when there is nothing to offload). Fails with
     * `OffloadFailed` (summariser failure or empty summary; only a `thread.offload_failed` event is written),
     * `RunInProgress` / `ConcurrentModification` (a run or another offload got in between), `PersistenceError`.
     */
    const offload = Effect.fn("ThreadOffload.offload")(function*(
      threadId: ThreadId,
      keepTokens: number,
      receiptKey: CommandReceipts.Key | null = null
    ) {
      // The receipt is written with the outcome (in the same transaction when something is written), so a client
      // retrying after a crash gets this report back instead of running a second offload pass.
      const receipt = (report: OffloadReport) =>
        receiptKey === null ? Effect.succeed(report) : CommandReceipts.write(store, receiptKey, OffloadReport, report)
      const offloads = yield* store.listOffloads(threadId)
      const previous = offloads.at(-1) ?? null
      const summaryIds = new Set<string>(offloads.map((o) => o.summaryItemId))
      const all = yield* store.listItems(threadId)
      const previousCut = previous?.cutSeq ?? 0
      const candidates = all.filter((i) => i.seq > previousCut && !summaryIds.has(i.id))
      const cut = OffloadCut.chooseCut(candidates, keepTokens)
      const nothing = (reason: string): OffloadReport => ({
        offloaded: false,
        reason,
        offloadId: null,
        summaryItemId: null,
        cutSeq: previous?.cutSeq ?? null,
        coveredItems: 0,
        coveredTokens: 0,
        summaryTokens: 0,
        keptItems: candidates.length,
        keptTokens: cut.keptTokens,
        keepTokens,
        movedForToolUnits: 0,
        supersededHandoffIds: [],
        handoffIds: []
      })
      if (cut.cut === 0) {
        return yield* receipt(nothing(
          cut.naiveCut === 0
            ? `nothing to offload: the ${candidates.length} item(s) after the ${previous === null ? "start" : "last summary"} ` +
              `hold ${cut.keptTokens} tokens, within the ${keepTokens} kept verbatim`
            : `nothing to offload: every cut within the oldest ${cut.naiveCut} item(s) would split a tool unit`
        ))
      }
      const covered = candidates.slice(0, cut.cut)
      const cutSeq = covered[covered.length - 1]!.seq
      const previousItem = previous === null ? undefined : all.find((i) => i.id === previous.summaryItemId)
      const previousSummary = previousItem?.text ?? null
      // What the summary replaces in the model-visible history: the previous summary and the covered items.
      const replaced = (previousItem?.tokens ?? 0) + cut.coveredTokens

      const answer = yield* Effect.either(summariseInChunks(threadId, previousSummary, covered))
      if (answer._tag === "Left") {
        const error = answer.left
        return yield* error._tag === "SummaryRejected"
          ? failed(threadId, keepTokens, cutSeq, error.reason, error.retryable)
          : failed(threadId, keepTokens, cutSeq, `the summariser failed: ${error.message}`, error.retryable)
      }
      if (answer.right.text.trim().length === 0) return yield* failed(threadId, keepTokens, cutSeq, "the summariser returned an empty summary", true)
      const text = withPinned(answer.right.text, pinnedItems(all, (yield* store.getOffloadControl(threadId)).pinnedItemIds ?? [], cutSeq))
      const summaryTokens = Render.itemTokens(counter, {
        id: "",
        seq: cutSeq + 1,
        kind: "summary",
        text,
        toolCallId: null,
        toolName: null,
        isError: false,
        toolCallState: null
      })
      if (summaryTokens >= replaced && replaced < minOffloadTokens) {
        return yield* receipt(nothing(
          `nothing worth offloading: the ${replaced} tokens before the cut are fewer than their summary (${summaryTokens} tokens)`
        ))
      }
      if (summaryTokens >= replaced) {
        return yield* failed(
          threadId,
          keepTokens,
          cutSeq,
          `the summariser answered with ${summaryTokens} tokens for the ${replaced} tokens it was to replace: a summary must be ` +
            `smaller than what it replaces, so it was not applied`,
          true
        )
      }

      return yield* uow.thread(threadId, "ThreadOffload.offload")(Effect.gen(function*() {
        // Re-read under the transaction: another offload or a run that started meanwhile wins; this one stops.
        const latest = yield* store.latestOffload(threadId)
        if ((latest._tag === "Some" ? latest.value.id : null) !== (previous?.id ?? null)) {
          return yield* new ConcurrentModification({ threadId })
        }
        const active = yield* store.findActiveRun(threadId)
        if (active._tag === "Some") return yield* new RunInProgress({ threadId, runId: active.value.id })

        const [summary] = yield* itemLog.append(threadId, null, [{
          kind: "summary",
          text,
          toolCallId: null,
          toolName: null,
          messageId: null,
          isError: false,
          toolCallState: null
        }])
        const record: Offload = {
          id: ids.next("off") as Offload["id"],
          threadId,
          generation: (previous?.generation ?? 0) + 1,
          summaryItemId: summary!.id,
          previousOffloadId: previous?.id ?? null,
          fromSeq: covered[0]!.seq,
          cutSeq,
          coveredItemIds: covered.map((i) => i.id),
          coveredTokens: cut.coveredTokens,
          keepTokens,
          createdAt: yield* DateTime.now
        }
        yield* store.insertOffload(record)
        // Covered by the chain: every item up to the cut, and every earlier summary (this one extends them).
        const seqOf = new Map<string, number>(all.map((i) => [i.id, i.seq]))
        const isCovered = (id: ItemId) => summaryIds.has(id) || (seqOf.get(id) ?? Number.POSITIVE_INFINITY) <= cutSeq
        const handoffs = yield* delivery.supersedeForSummary(
          threadId,
          summary!,
          isCovered,
          `covered by summary ${summary!.id} (offload ${record.id}, items up to seq ${cutSeq})`
        )
        const report: OffloadReport = {
          offloaded: true,
          reason: null,
          offloadId: record.id,
          summaryItemId: summary!.id,
          cutSeq,
          coveredItems: covered.length,
          coveredTokens: cut.coveredTokens,
          summaryTokens: summary!.tokens,
          keptItems: candidates.length - cut.cut,
          keptTokens: cut.keptTokens,
          keepTokens,
          movedForToolUnits: cut.naiveCut - cut.cut,
          supersededHandoffIds: handoffs.superseded,
          handoffIds: handoffs.created
        }
        yield* store.appendEvent({ threadId, type: "thread.offloaded", payload: {
          offloadId: record.id,
          generation: record.generation,
          summaryItemId: summary!.id,
          previousOffloadId: record.previousOffloadId,
          fromSeq: record.fromSeq,
          cutSeq,
          coveredItems: report.coveredItems,
          coveredTokens: report.coveredTokens,
          summaryTokens: report.summaryTokens,
          keptItems: report.keptItems,
          keptTokens: report.keptTokens,
          keepTokens,
          supersededHandoffIds: handoffs.superseded,
          handoffIds: handoffs.created
        }, commandId: receiptKey?.commandId ?? null })
        return yield* receipt(report)
      }))
    })

    return { offload, visibleHistory }
  })
}) {}
