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
  type CommandId,
  ConcurrentModification,
  InvalidRequest,
  type Item,
  type ItemId,
  type Offload,
  OffloadFailed,
  OffloadInProgress,
  OffloadOperationNotFound,
  OffloadReport,
  OffloadUndoReport,
  PersistenceError,
  RunInProgress,
  type SummariserCost,
  type ThreadId
} from "@baton/contracts"
import { OffloadCut, Render, TokenCounter, ToolResultOffload } from "@baton/context"
import { type OffloadOperationRecord, ThreadStore, UnitOfWork } from "@baton/persistence"
import { Summariser } from "@baton/providers"
import { Clock, Data, DateTime, Deferred, Duration, Effect, Fiber, Schedule, Schema } from "effect"
import * as CommandReceipts from "./CommandReceipts.js"
import * as Message from "./OffloadMessage.js"
import { PreCompactHook } from "./PreCompactHook.js"
import { NativeThreadTrust } from "./NativeThreadTrust.js"
import { OrchestratorConfig } from "./OrchestratorConfig.js"
import * as RunCosts from "./RunCosts.js"
import { ContextHandoffDelivery } from "./ContextHandoffDelivery.js"
import { DriverRegistry } from "./DriverRegistry.js"
import { IdGenerator } from "./IdGenerator.js"
import { ItemLog } from "./ItemLog.js"
import * as Span from "./internal/Span.js"

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

/** What separates a summary from the pinned items appended to it verbatim (`withPinned`). */
const pinnedMarker = "\n\n[pinned, verbatim]\n"

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

/** What identifies one `/offload` operation: its id (the command id) and its request's payload fingerprint. */
export interface OperationKey {
  readonly operationId: string
  readonly fingerprint: string
}

/**
 * What the offload's prompt-cache rewrite costs on the thread's active provider instance: its cache write and read
 * multipliers of base input (`ToolResultOffload.anthropicPricing` when it has no prices) and its input price in US
 * dollars per million tokens (`null` without prices).
 */
export interface CacheRewrite {
  readonly writeMultiplier: number
  readonly readMultiplier: number
  readonly inputUsdPerMillion: number | null
}

/** The cache rewrite without prices: Anthropic's multipliers, no dollars. */
export const noPrices: CacheRewrite = {
  writeMultiplier: ToolResultOffload.anthropicPricing.writeMultiplier,
  readMultiplier: ToolResultOffload.anthropicPricing.readMultiplier,
  inputUsdPerMillion: null
}

/**
 * A preview's estimate of a summary's size, as a share of what it replaces, and its cap (tokens): the offline digest
 * is capped at 2,000 tokens and a model's structured summary is typically a few hundred to two thousand.
 */
export const estimatedSummaryRatio = 0.25
export const maxEstimatedSummaryTokens = 2_000

/**
 * The approval mode a PreCompact hook is told for a client's `/offload`: the client asked for it (Baton asks no one
 * else's approval before an offload).
 */
export const manualApproval = "client-requested"

/** Who started an `/offload`, as the PreCompact hook is told: a client (`manual`) or Baton's policy (`automatic`). */
export interface Trigger {
  readonly trigger: "manual" | "automatic"
  readonly approvalMode: string
}
/** A client's `/offload`. */
export const manualTrigger: Trigger = { trigger: "manual", approvalMode: manualApproval }

/**
 * How an operation's commit judges the thread's changes since its plan. `appendsAllowed` (the gateway's summary of a
 * switched conversation's deferred history, written while the agent goes on): on a thread none of whose provider
 * threads has a native thread (the history lives with the client, as on the gateway's threads: no native thread holds
 * the items, none is owed them), items appended and runs recorded
 * meanwhile do not make the summary stale, since items are never edited and the summary covers only items at or before
 * its cut; another offload committed or undone meanwhile still does. The report's kept figures are then the plan's.
 * By default any change of the thread does (a client's `/offload`).
 */
export interface CommitRule {
  readonly appendsAllowed?: boolean
}
/**
 * How often a process polls an operation's row, in milliseconds: the process running it, for a cancellation asked
 * of another process (`offload_operations.cancel_requested_at`), while its summary is being written; another
 * process, for its outcome, while it waits for it. A cancellation is seen within this much of its request.
 */
export const cancelPollMillis = 200

/**
 * The longest another process waits for an operation running elsewhere to end, in milliseconds, before it answers
 * `running` (a cancellation: its request stays recorded, and the operation ends `cancelled` if still summarising).
 * A cancelled summary ends within a poll; a commit in progress within its unit of work.
 */
export const remoteWaitMillis = 30_000

/** The errors of an operation's fiber. */
type OffloadError = OffloadFailed | PersistenceError | ConcurrentModification | OffloadOperationNotFound

/** What `/offload` did (the schema lives in contracts). */
export { OffloadReport } from "@baton/contracts"

/** The model-visible history: the latest summary (if any) and the verbatim items after its cut. */
export interface VisibleHistory {
  readonly offload: Offload | null
  readonly summary: Item | null
  readonly items: ReadonlyArray<Item>
}

export class ThreadOffload extends Effect.Service<ThreadOffload>()("@baton/orchestration/ThreadOffload", {
  scoped: Effect.gen(function*() {
    const scope = yield* Effect.scope
    const uow = yield* UnitOfWork
    const store = yield* ThreadStore
    const ids = yield* IdGenerator
    const itemLog = yield* ItemLog
    const delivery = yield* ContextHandoffDelivery
    const summariser = yield* Summariser.Summariser
    const counter = yield* TokenCounter.TokenCounter
    const hook = yield* PreCompactHook
    const trust = yield* NativeThreadTrust
    const config = yield* OrchestratorConfig
    const drivers = yield* DriverRegistry

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

    /** Tokens the summariser calls of one operation were billed so far (calls with reported usage). */
    interface Spent {
      calls: number
      inputTokens: number
      cacheWriteTokens: number
      cacheReadTokens: number
      outputTokens: number
    }

    /** The cost of `spent` in `state`, `null` when no call reported usage (the offline summariser). */
    const costOf = (spent: Spent, state: SummariserCost["state"]): SummariserCost | null =>
      spent.calls === 0 ? null : {
        providerInstance: summariser.instance ?? null,
        calls: spent.calls,
        inputTokens: spent.inputTokens,
        cacheWriteTokens: spent.cacheWriteTokens,
        cacheReadTokens: spent.cacheReadTokens,
        outputTokens: spent.outputTokens,
        costUsd: RunCosts.price(spent, summariser.prices),
        state
      }

    /**
     * The summary of `previousSummary` + `items`, in as many summariser calls as its `inputWindow` needs (one when
     * it declares none), adding each call's billed tokens to `spent` as it answers. Fails with `ProviderError` (a
     * call failed) or with the reason no call can make progress (the summary so far leaves no room in the window).
     */
    const summariseInChunks = (threadId: ThreadId, previousSummary: string | null, items: ReadonlyArray<Item>, spent: Spent, operationId: string) =>
      Effect.gen(function*() {
        // Each call's charge is written to the operation's row as soon as it answers (never lost with the process).
        const call = (input: Summariser.SummariseInput) =>
          Effect.tap(summariser.summarise(input), (answer) =>
            Effect.gen(function*() {
              if (answer.tokens === undefined) return
              const tokens = answer.tokens
              spent.calls++
              spent.inputTokens += tokens.inputTokens
              spent.cacheWriteTokens += tokens.cacheWriteTokens
              spent.cacheReadTokens += tokens.cacheReadTokens
              spent.outputTokens += tokens.outputTokens
              // The operation's row only (one atomic UPDATE while it is running): no need to queue behind the
              // thread's lock, where a turn or another writer would delay it, and where it once let a cancel arrive
              // before the commit that was about to win (OffloadCancelAcrossProcesses, "while committing").
              yield* uow.global("ThreadOffload.spend")(store.addOffloadSpend(operationId, tokens)).pipe(
                Effect.catchAll((e) => Effect.logWarning(`/offload ${operationId}: a summariser call's charge could not be written yet (kept in memory)`, e))
              )
            }))
        const window = summariser.inputWindow
        if (window === null) return { text: (yield* call({ threadId, previousSummary, items })).text, calls: 1 }
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
          const answer = (yield* call({ threadId, previousSummary: summary, items: chunk })).text
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
      return `${summary.trimEnd()}${pinnedMarker}${missing.map((i) => Render.renderItem(clipped(i, maxPinnedTokens))).join("\n\n")}`
    }

    /**
     * `summary` without the `[pinned, verbatim]` section `withPinned` appended: what the next offload of the chain
     * gives its summariser as the previous summary. The next summary pins its items again (every item pinned up to
     * this cut is pinned up to the next), so the section is not carried into it as well: a clipped pinned item,
     * which the `includes` test above cannot find, came out twice (simulator seed 13001). The section is the first
     * marker whose rest is nothing but pinned renders of `items` at or before `cutSeq` (the previous summary's cut), in
     * thread order, joined as `withPinned` joins them: a marker inside a pinned item (a user message quoting a summary)
     * or inside the summariser's text is not where the section starts (review r20). `summary` unchanged when none is.
     */
    const withoutPinned = (summary: string, items: ReadonlyArray<Item>, cutSeq: number): string => {
      const bySeq = new Map<number, Item>()
      for (const i of items) if (i.seq <= cutSeq) bySeq.set(i.seq, i)
      const header = /\[[^\]\n]* #(\d+)[^\]\n]*\]/y
      const isSection = (tail: string): boolean => {
        let p = 0
        let last = 0
        for (;;) {
          header.lastIndex = p
          const m = header.exec(tail)
          const item = m === null ? undefined : bySeq.get(Number(m[1]))
          if (item === undefined || item.seq <= last) return false
          const rendered = Render.renderItem(clipped(item, maxPinnedTokens))
          if (!tail.startsWith(rendered, p)) return false
          p += rendered.length
          last = item.seq
          if (p === tail.length) return true
          if (!tail.startsWith("\n\n", p)) return false
          p += 2
        }
      }
      for (let at = summary.indexOf(pinnedMarker); at >= 0; at = summary.indexOf(pinnedMarker, at + 1)) {
        if (isSection(summary.slice(at + pinnedMarker.length))) return summary.slice(0, at)
      }
      return summary
    }

    /**
     * The model-visible history of `threadId`: [latest summary] + every item after its cut (offload summaries
     * excepted); without an offload, every item. Fails with `PersistenceError`.
     */
    const visibleHistory = Span.fn("ThreadOffload.visibleHistory")(function*(threadId: ThreadId) {
      // An undone offload's summary stays in the log but in no visible history.
      const undone = new Set(yield* store.listUndoneSummaryItemIds(threadId))
      const items = (yield* store.listItems(threadId)).filter((i) => !undone.has(i.id))
      const offloads = yield* store.listOffloads(threadId)
      const visible = OffloadCut.visibleHistory(items, offloads)
      return { offload: offloads.at(-1) ?? null, summary: visible.summary, items: visible.items } satisfies VisibleHistory
    })

    /**
     * What an offload of `threadId` keeping `keepTokens` would cover now, read without a lock: the thread's version
     * first (so that any change after the read makes the commit's re-check fail), then the chain and the items.
     */
    const planOf = (threadId: ThreadId, keepTokens: number) =>
      Effect.gen(function*() {
        const version = yield* store.threadVersion(threadId)
        const offloads = yield* store.listOffloads(threadId)
        const previous = offloads.at(-1) ?? null
        const summaryIds = new Set<string>(offloads.map((o) => o.summaryItemId))
        // Undone summaries are no history to summarise (their originals are still there).
        for (const id of yield* store.listUndoneSummaryItemIds(threadId)) summaryIds.add(id)
        const all = yield* store.listItems(threadId)
        const previousCut = previous?.cutSeq ?? 0
        const candidates = all.filter((i) => i.seq > previousCut && !summaryIds.has(i.id))
        const cut = OffloadCut.chooseCut(candidates, keepTokens)
        const covered = candidates.slice(0, cut.cut)
        const previousItem = previous === null ? undefined : all.find((i) => i.id === previous.summaryItemId)
        const previousTokens = previousItem?.tokens ?? 0
        return {
          version,
          // Undone offloads keep their generation: the next one comes after every one ever written.
          generation: (yield* store.maxOffloadGeneration(threadId)) + 1,
          previous,
          summaryIds,
          all,
          candidates,
          cut,
          covered,
          cutSeq: covered.at(-1)?.seq ?? null,
          previousSummary: previousItem === undefined || previous === null ? null : withoutPinned(previousItem.text, all, previous.cutSeq),
          // What the summary replaces in the model-visible history: the previous summary and the covered items.
          replaced: previousTokens + cut.coveredTokens,
          tokensBefore: previousTokens + candidates.reduce((n, i) => n + i.tokens, 0)
        }
      })
    type Plan = Effect.Effect.Success<ReturnType<typeof planOf>>

    /** The report of `plan` with `outcome`, before anything is known of a summary (tokens after = before). */
    /** A report without figures (an operation still running, lost, or committed but unreadable): every count 0. */
    const emptyReport = (
      head: Pick<OffloadReport, "operationId" | "outcome" | "message" | "offloaded" | "reason" | "retryable">
    ): OffloadReport => ({
      ...head,
      offloadId: null,
      summaryItemId: null,
      cutSeq: null,
      coveredItems: 0,
      coveredTokens: 0,
      summaryTokens: 0,
      keptItems: 0,
      keptTokens: 0,
      keepTokens: 0,
      movedForToolUnits: 0,
      supersededHandoffIds: [],
      handoffIds: [],
      coveredItemIds: [],
      tokensBefore: 0,
      tokensAfter: 0,
      cacheRewriteTokens: 0,
      cacheRewriteUsd: null,
      cost: null,
    })

    const baseReport = (plan: Plan, operationId: string, keepTokens: number, cache: CacheRewrite): OffloadReport => ({
      operationId,
      outcome: "nothing",
      message: "",
      offloaded: false,
      reason: null,
      offloadId: null,
      summaryItemId: null,
      cutSeq: plan.previous?.cutSeq ?? null,
      coveredItems: 0,
      coveredTokens: 0,
      summaryTokens: 0,
      // Nothing applied: every candidate is kept, and so are its tokens (the cut's covered ones too: a cancelled,
      // stale, failed or denied report said all 22 items were kept but counted only the 2 after the cut's tokens).
      keptItems: plan.candidates.length,
      keptTokens: plan.cut.coveredTokens + plan.cut.keptTokens,
      keepTokens,
      movedForToolUnits: 0,
      supersededHandoffIds: [],
      handoffIds: [],
      coveredItemIds: [],
      tokensBefore: plan.tokensBefore,
      tokensAfter: plan.tokensBefore,
      cacheRewriteTokens: 0,
      cacheRewriteUsd: cache.inputUsdPerMillion === null ? null : 0,
      cost: null,
      retryable: false
    })

    /** The cache-rewrite figures of a history of `tokensAfter` tokens under `cache`. */
    const rewrite = (tokensAfter: number, cache: CacheRewrite) => {
      const tokens = Math.ceil((cache.writeMultiplier - cache.readMultiplier) * tokensAfter)
      return {
        cacheRewriteTokens: tokens,
        cacheRewriteUsd: cache.inputUsdPerMillion === null ? null : Math.round(tokens * cache.inputUsdPerMillion * 1_000) / 1_000_000_000
      }
    }

    /** Why nothing would be offloaded under `plan` (no cut), or `null`. */
    const nothingReason = (plan: Plan, keepTokens: number): string | null =>
      plan.cut.cut !== 0 ? null : plan.cut.naiveCut === 0
        ? `nothing to offload: the ${plan.candidates.length} item(s) after the ${plan.previous === null ? "start" : "last summary"} ` +
          // Over keepTokens, the oldest item is the one that reaches it, kept whole (new user hnew: "hold 16 tokens,
          // within the 10 kept verbatim" for a --keep-tokens 10 that read as a contradiction).
          (plan.cut.keptTokens <= keepTokens
            ? `hold ${plan.cut.keptTokens} tokens, within the ${keepTokens} kept verbatim`
            : `hold ${plan.cut.keptTokens} tokens: keeping the newest ${keepTokens} verbatim keeps them all (the oldest reaches it and is kept whole)`)
        : `nothing to offload: every cut within the oldest ${plan.cut.naiveCut} item(s) would split a tool unit`

    /**
     * The dry run: what an offload of `threadId` keeping `keepTokens` would cover now (`outcome: "preview"`): the
     * items, tokens before, tokens after estimated (the summary at `estimatedSummaryRatio` of what it replaces, at
     * most `maxEstimatedSummaryTokens`, plus the pinned items), and the cache rewrite. Calls no summariser and writes
     * nothing. Fails with `PersistenceError`.
     */
    const preview = Span.fn("ThreadOffload.preview")(function*(
      threadId: ThreadId,
      keepTokens: number,
      operationId: string,
      cache: CacheRewrite
    ) {
      const plan = yield* planOf(threadId, keepTokens)
      const base = baseReport(plan, operationId, keepTokens, cache)
      const reason = nothingReason(plan, keepTokens)
      // The message says why nothing is offloaded.
      if (reason !== null) return { ...base, outcome: "preview", reason, message: Message.preview({ ...base, reason }) } satisfies OffloadReport
      const pinned = pinnedItems(plan.all, (yield* store.getOffloadControl(threadId)).pinnedItemIds ?? [], plan.cutSeq!)
      const summaryTokens = Math.min(plan.replaced,
        Math.min(maxEstimatedSummaryTokens, Math.ceil(plan.replaced * estimatedSummaryRatio)) +
          pinned.reduce((n, i) => n + Math.min(i.tokens, maxPinnedTokens), 0))
      const tokensAfter = summaryTokens + plan.cut.keptTokens
      const report: OffloadReport = {
        ...base,
        outcome: "preview",
        cutSeq: plan.cutSeq,
        coveredItems: plan.covered.length,
        coveredTokens: plan.cut.coveredTokens,
        summaryTokens,
        keptItems: plan.candidates.length - plan.cut.cut,
        keptTokens: plan.cut.keptTokens,
        movedForToolUnits: plan.cut.naiveCut - plan.cut.cut,
        coveredItemIds: plan.covered.map((i) => i.id),
        tokensAfter,
        ...rewrite(tokensAfter, cache)
      }
      return { ...report, message: Message.preview(report) } satisfies OffloadReport
    })

    /** An operation running in this process: its fiber, where it is, and the signal that cancels its summary. */
    interface InFlight {
      fiber: Fiber.RuntimeFiber<OffloadReport, OffloadError> | null
      phase: "summarising" | "committing" | "cancelling"
      readonly cancel: Deferred.Deferred<void>
    }
    const inFlight = new Map<string, InFlight>()
    /** The operation running in this process for each thread (one at a time: a second is refused). */
    const runningOn = new Map<ThreadId, string>()

    /** The operation record of `report` at its end, with `spent` in `state`. */
    const finished = (key: OperationKey, threadId: ThreadId, report: OffloadReport, at: DateTime.Utc, createdAt: DateTime.Utc): OffloadOperationRecord => ({
      operationId: key.operationId,
      threadId,
      fingerprint: key.fingerprint,
      status: report.outcome,
      result: Schema.encodeSync(OffloadReport)(report),
      providerInstance: report.cost?.providerInstance ?? null,
      calls: report.cost?.calls ?? 0,
      inputTokens: report.cost?.inputTokens ?? 0,
      cacheWriteTokens: report.cost?.cacheWriteTokens ?? 0,
      cacheReadTokens: report.cost?.cacheReadTokens ?? 0,
      outputTokens: report.cost?.outputTokens ?? 0,
      costUsd: report.cost?.costUsd ?? null,
      costState: report.cost?.state ?? (report.outcome === "offloaded" ? "committed" : "abandoned"),
      createdAt,
      finishedAt: at,
      driverId: drivers.driverId,
      cancelRequestedAt: null
    })

    /** Logs a charge that bought nothing (a discarded, failed or cancelled summary) as a warning. */
    const warnAbandoned = (threadId: ThreadId, report: OffloadReport) =>
      report.cost === null ? Effect.void : Effect.logWarning(
        `/offload ${report.operationId} on thread ${threadId} ended ${report.outcome}: the summariser's ` +
          `${report.cost.calls} call(s) cost ${report.cost.inputTokens + report.cost.cacheWriteTokens + report.cost.cacheReadTokens} input and ` +
          `${report.cost.outputTokens} output tokens` +
          (report.cost.costUsd === null ? "" : ` ($${report.cost.costUsd})`) + ", recorded as abandoned"
      )

    /**
     * Ends operation `key` without a summary (`failed`, `stale` or `cancelled`): in one unit of work, the audit event
     * `thread.offload_failed` and the operation's outcome with its cost `abandoned` (logged as a warning). When the
     * operation had already ended, nothing is written. Returns the operation's outcome as stored.
     */
    const endWithout = (key: OperationKey, threadId: ThreadId, report: OffloadReport, createdAt: DateTime.Utc) =>
      Effect.gen(function*() {
        const won = yield* uow.thread(threadId, "ThreadOffload.endWithout")(Effect.gen(function*() {
          const won = yield* store.finishOffloadOperation(finished(key, threadId, report, yield* DateTime.now, createdAt))
          if (won && report.outcome !== "nothing") {
            yield* store.appendEvent({
              threadId,
              type: "thread.offload_failed",
              payload: { reason: report.reason ?? report.outcome, keepTokens: report.keepTokens, cutSeq: report.cutSeq ?? 0 },
              commandId: key.operationId as CommandId
            })
          }
          return won
        }))
        if (won) yield* warnAbandoned(threadId, report)
        return yield* stored(threadId, key.operationId)
      })

    /**
     * The report of operation `operationId`, which committed (`offloaded`) but whose result could not be read back or
     * built (`reason` says why): outcome `offloaded` with the message saying it was applied but cannot be shown, the
     * figures unknown (zero). It is what a POST answers then, so that nobody offloads twice.
     */
    const undisplayable = (operationId: string, reason: string): OffloadReport =>
      emptyReport({ operationId, outcome: "offloaded", message: Message.undisplayable(operationId), offloaded: true, reason, retryable: false })

    /**
     * The stored outcome of `operationId` on `threadId` (`running` while in flight); an `offloaded` outcome whose
     * result cannot be read is answered as `undisplayable`. Fails with `OffloadOperationNotFound`, `PersistenceError`.
     */
    const stored = (threadId: ThreadId, operationId: string) =>
      Effect.gen(function*() {
        const row = yield* store.getOffloadOperation(operationId)
        if (row._tag === "None" || row.value.threadId !== threadId) return yield* new OffloadOperationNotFound({ threadId, operationId })
        if (row.value.result === null) return { row: row.value, report: null }
        const decoded = yield* Effect.either(Schema.decodeUnknown(OffloadReport)(row.value.result))
        if (decoded._tag === "Right") return { row: row.value, report: decoded.right }
        if (row.value.status === "offloaded") {
          return { row: row.value, report: undisplayable(operationId, `the stored result of operation ${operationId} cannot be read`) }
        }
        return yield* new PersistenceError({ operation: "offload_operations.decode", detail: `operation ${operationId}'s outcome cannot be read` })
      })

    /**
     * Marks the active native thread of `threadId`'s active provider thread replaced after offload `offloadId`
     * committed summary `summaryItemId` for `replaced` (the items it covers, every item up to `cutSeq`, and the
     * summaries it extends), inside the offload's unit of work, when that native thread holds any of them: a run
     * among them ran on it, or a delivery injected or inlined one into it. Returns the replaced native thread's id, or `null` when the lane has none, it
     * holds none of them (a lane whose handoff was deferred: it was never given the originals), or it was already
     * replaced.
     */
    const replaceActiveNative = (threadId: ThreadId, summaryItemId: ItemId, offloadId: string, cutSeq: number, replaced: ReadonlyArray<Item>) =>
      Effect.gen(function*() {
        if (config.mutations.has("offload_keeps_lane")) return null
        const thread = yield* store.getThread(threadId)
        if (thread._tag === "None" || thread.value.activeProviderThreadId === null) return null
        const lane = yield* store.getProviderThread(thread.value.activeProviderThreadId)
        if (lane._tag === "None" || lane.value.activeNativeThreadId === null) return null
        const native = yield* store.getNativeThread(lane.value.activeNativeThreadId)
        if (native._tag === "None") return null
        const nativeId = native.value.id
        const replacedIds = new Set<string>(replaced.map((i) => i.id))
        // Asked of the database (one row at most) and of this native thread's deliveries only: not of every run and
        // delivery of the thread, which grow with its history (bench/growth.bench.ts). The replaced items are every
        // item up to the cut and the chain's summaries (`isCovered`).
        const summaryRunIds = [...new Set(replaced.flatMap((i) => i.seq > cutSeq && i.runId !== null ? [i.runId] : []))]
        const ranOnIt = yield* store.anyRunOnNativeThrough(threadId, nativeId, cutSeq, summaryRunIds)
        // A delivery still `pending` (a crash or a lost acknowledgement left its outcome unconfirmed) may have reached
        // the native thread: it counts as given. Left alone, the next turn's reconciliation would settle it there, or
        // return it to `deferred` and inject the originals the summary replaces (supersedeForSummary skips it).
        const givenToIt = ranOnIt || (yield* store.listDeliveriesToNative(nativeId, ["injected", "inline", "pending"])).some((d) =>
          d.deliveredItemIds.some((id) => replacedIds.has(id))
        )
        if (!givenToIt) return null
        const changed = yield* trust.distrust(
          threadId,
          native.value,
          `offloaded: summary ${summaryItemId} (offload ${offloadId}) replaces the history it holds; the next turn starts a new native thread owed the summary and the items after it`
        )
        return changed ? native.value.id : null
      })

    /**
     * Runs operation `key` on `plan`: the summary (outside any lock; cancellable until it answers), then the commit
     * (under the thread's lock: the version re-check, the summary item, the offload record, the handoff
     * supersession, the `thread.offloaded` event and the operation's outcome with the summariser's cost, in one unit
     * of work). A thread that advanced meanwhile (its version changed, or a run is active) discards the summary:
     * outcome `stale`. Fails with `OffloadFailed` (the summariser failed or its summary was refused).
     */
    /**
     * Whether `threadId` changed since `plan` only by appends (see `CommitRule`): none of its provider threads has a
     * native thread and its offload chain is the plan's (the same newest offload, no offload written or undone since).
     */
    const onlyAppended = (threadId: ThreadId, plan: Plan) =>
      Effect.gen(function*() {
        // No lane has a native thread: the history lives with its client (the gateway's agent), not in a provider's state.
        if ((yield* store.listProviderThreads(threadId)).some((lane) => lane.activeNativeThreadId !== null)) return false
        const latest = yield* store.latestOffload(threadId)
        const latestId = latest._tag === "Some" ? latest.value.id : null
        return latestId === (plan.previous?.id ?? null) && (yield* store.maxOffloadGeneration(threadId)) === plan.generation - 1
      })

    const run = (
      threadId: ThreadId,
      keepTokens: number,
      key: OperationKey,
      plan: Plan,
      cache: CacheRewrite,
      entry: InFlight,
      createdAt: DateTime.Utc,
      rule: CommitRule
    ) =>
      Effect.gen(function*() {
        const base = baseReport(plan, key.operationId, keepTokens, cache)
        const cutSeq = plan.cutSeq!
        const spent: Spent = { calls: 0, inputTokens: 0, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 0 }
        const ended = (outcome: "failed" | "stale" | "cancelled", reason: string, retryable: boolean) => {
          const report: OffloadReport = { ...base, outcome, reason, retryable, cutSeq, cost: costOf(spent, "abandoned") }
          return endWithout(key, threadId, { ...report, message: Message.of(report) }, createdAt)
        }
        const failed = (reason: string, retryable: boolean) =>
          Effect.flatMap(ended("failed", reason, retryable), (s) => s.report?.outcome === "failed" || s.report === null
            ? Effect.fail(new OffloadFailed({ threadId, reason: s.report?.reason ?? reason, retryable: s.report?.retryable ?? retryable }))
            : Effect.succeed(s.report))

        // The summary, raced against a cancellation, asked of this process (the Deferred) or of another one (the
        // operation's row, polled): whichever comes first wins (the loser is interrupted).
        const answer = yield* Effect.raceAll([
          Effect.map(Effect.either(summariseInChunks(threadId, plan.previousSummary, plan.covered, spent, key.operationId)), (a) => ({ _tag: "answer" as const, a })),
          Effect.as(Deferred.await(entry.cancel), { _tag: "cancelled" as const }),
          Effect.as(cancelRequested(key.operationId), { _tag: "cancelled" as const })
        ])
        if (answer._tag === "cancelled") {
          return (yield* ended("cancelled", "cancelled by a client before the summary was applied", true)).report!
        }
        if (answer.a._tag === "Left") {
          const error = answer.a.left
          return yield* error._tag === "SummaryRejected"
            ? failed(error.reason, error.retryable)
            : failed(`the summariser failed: ${error.message}`, error.retryable)
        }
        if (answer.a.right.text.trim().length === 0) return yield* failed("the summariser returned an empty summary", true)
        const text = withPinned(answer.a.right.text, pinnedItems(plan.all, (yield* store.getOffloadControl(threadId)).pinnedItemIds ?? [], cutSeq))
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
        if (summaryTokens >= plan.replaced && plan.replaced < minOffloadTokens) {
          const reason = `nothing worth offloading: the ${plan.replaced} tokens before the cut are fewer than their summary (${summaryTokens} tokens)`
          const report: OffloadReport = { ...base, outcome: "nothing", reason, cost: costOf(spent, "abandoned") }
          return (yield* endWithout(key, threadId, { ...report, message: Message.of(report) }, createdAt)).report!
        }
        if (summaryTokens >= plan.replaced) {
          return yield* failed(
            `the summariser answered with ${summaryTokens} tokens for the ${plan.replaced} tokens it was to replace: a summary must be ` +
              `smaller than what it replaces, so it was not applied`,
            true
          )
        }
        // From here on the operation commits or is discarded as stale: a cancellation arriving now waits for it. One
        // asked of another process while the summary was answered is honoured (read once, after the summary).
        if (entry.phase === "cancelling" || (yield* Effect.orElseSucceed(store.offloadCancelRequested(key.operationId), () => false))) {
          return (yield* ended("cancelled", "cancelled by a client before the summary was applied", true)).report!
        }
        entry.phase = "committing"

        const committed = yield* Effect.either(uow.thread(threadId, "ThreadOffload.offload")(Effect.gen(function*() {
          // The version re-check under the thread's lock: a run queued or an item appended (or another offload)
          // after the plan was read means the summary describes a history that is no longer the thread's.
          const version = yield* store.threadVersion(threadId)
          const active = yield* store.findActiveRun(threadId)
          if ((version !== plan.version || active._tag === "Some") && !(rule.appendsAllowed === true && (yield* onlyAppended(threadId, plan)))) return null

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
            generation: plan.generation,
            summaryItemId: summary!.id,
            previousOffloadId: plan.previous?.id ?? null,
            fromSeq: plan.covered[0]!.seq,
            cutSeq,
            coveredItemIds: plan.covered.map((i) => i.id),
            coveredTokens: plan.cut.coveredTokens,
            keepTokens,
            createdAt: yield* DateTime.now
          }
          // Reserve, append, commit (issue 12 item 4), all in this unit of work: the summary item and the offload's
          // row are reserved (in no summary chain yet), the originals it replaces are appended to its archive (the
          // append checks the reservation), and the commit step below makes it part of the chain. A failure at any
          // step rolls the whole unit back, the archive append with it.
          yield* store.reserveOffload(record)
          const previousSummary = plan.previous === null ? [] : plan.all.filter((i) => i.id === plan.previous!.summaryItemId)
          yield* store.appendOffloadArchive(record.id, [...previousSummary, ...plan.covered].map((i) => ({ itemId: i.id, seq: i.seq, tokens: i.tokens })))
          // Covered by the chain: every item up to the cut, and every earlier summary (this one extends them).
          const seqOf = new Map<string, number>(plan.all.map((i) => [i.id, i.seq]))
          const isCovered = (id: ItemId) => plan.summaryIds.has(id) || (seqOf.get(id) ?? Number.POSITIVE_INFINITY) <= cutSeq
          const handoffs = yield* delivery.supersedeForSummary(
            threadId,
            summary!,
            isCovered,
            `covered by summary ${summary!.id} (offload ${record.id}, items up to seq ${cutSeq})`
          )
          // The active lane goes on from the summary: its native thread holds the originals, so it is replaced (the
          // next turn starts a new one, owed the summary and the items after the cut through a replacement handoff;
          // a prompt-cache rewrite of the history after, the preview's `cacheRewriteTokens`). Other lanes keep
          // theirs until a turn finds them full.
          // What the chain replaces, not only this offload's share: a lane that ran items an earlier summary covers
          // (it was not the active lane then) holds them still (sim seed 80012, its second violation).
          const replacedNative = yield* replaceActiveNative(threadId, summary!.id, record.id, cutSeq, plan.all.filter((i) => isCovered(i.id)))
          const tokensAfter = summary!.tokens + plan.cut.keptTokens
          const report: OffloadReport = {
            ...base,
            outcome: "offloaded",
            offloaded: true,
            offloadId: record.id,
            summaryItemId: summary!.id,
            cutSeq,
            coveredItems: plan.covered.length,
            coveredTokens: plan.cut.coveredTokens,
            summaryTokens: summary!.tokens,
            keptItems: plan.candidates.length - plan.cut.cut,
            keptTokens: plan.cut.keptTokens,
            movedForToolUnits: plan.cut.naiveCut - plan.cut.cut,
            supersededHandoffIds: handoffs.superseded,
            handoffIds: handoffs.created,
            coveredItemIds: record.coveredItemIds,
            tokensAfter,
            ...rewrite(tokensAfter, cache),
            cost: costOf(spent, "committed")
          }
          const withMessage: OffloadReport = { ...report, message: Message.of(report) }
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
            handoffIds: handoffs.created,
            ...(replacedNative === null ? {} : { replacedNativeThreadId: replacedNative })
          }, commandId: key.operationId as CommandId })
          if (!(yield* store.commitOffload(record.id, yield* DateTime.now))) {
            return yield* new PersistenceError({ operation: "offloads.commit", detail: `offload ${record.id} was not reserved at its commit` })
          }
          // The outcome and the summariser's cost in the same unit of work; if the operation already has an outcome
          // (settled as abandoned by another process), this commit rolls back whole.
          if (!(yield* store.finishOffloadOperation(finished(key, threadId, withMessage, yield* DateTime.now, createdAt)))) {
            return yield* new ConcurrentModification({ threadId, operation: "offload_operations.finish" })
          }
          return withMessage
        })))
        if (committed._tag === "Right" && committed.right !== null) return committed.right
        // The commit failed (its unit of work rolled back whole): the operation fails saying why, nothing applied.
        if (committed._tag === "Left" && committed.left._tag !== "ConcurrentModification") {
          const e = committed.left
          const detail = e._tag === "PersistenceError" ? `${e.operation}: ${e.detail}` : e.message
          return yield* failed(`the offload could not be written (${detail})`, true)
        }
        // Stale: the thread advanced while the summary was written (or another writer got in first).
        return (yield* ended(
          "stale",
          "the conversation changed while the summary was being written (a run or another offload got in first), so the summary was discarded",
          true
        )).report!
      })

    /**
     * Succeeds once operation `operationId` should stop summarising: a client asked another process to cancel it
     * (`cancel_requested_at`) or it was settled elsewhere, polled every `cancelPollMillis`. A failed poll counts as
     * no request (the next poll retries). Never fails; runs until interrupted otherwise.
     */
    const cancelRequested = (operationId: string) =>
      Effect.orElseSucceed(store.offloadCancelRequested(operationId), () => false).pipe(
        Effect.repeat({ schedule: Schedule.spaced(Duration.millis(cancelPollMillis)), until: (requested) => requested }),
        Effect.asVoid
      )

    /** The report of an operation still running (no figures yet), with `message`. */
    const runningReport = (operationId: string, message: string) =>
      emptyReport({ operationId, outcome: "running", message, offloaded: false, reason: null, retryable: false })

    /** Whether the driver `driverId` running an operation is alive (`DriverRegistry`; `null`, a row from before 0019: gone). */
    const ownerAlive = (driverId: string | null) =>
      driverId === null ? Effect.succeed(false) : Effect.map(drivers.aliveAmong([driverId]), (alive) => alive.has(driverId))

    /**
     * Settles operation `operationId`, left `running` by a process that is gone (or by a fiber of this one that ended
     * without an outcome: `reason`), as failed (nothing was applied: a commit writes its outcome in the same unit of
     * work); answers the stored outcome (another settlement may win).
     */
    const settleLost = (
      threadId: ThreadId,
      operationId: string,
      row: OffloadOperationRecord,
      reason = "the server stopped while the offload was running, before it was applied"
    ) => {
      // The charges its calls already wrote to the row are kept, as abandoned.
      const charged = { calls: row.calls, inputTokens: row.inputTokens, cacheWriteTokens: row.cacheWriteTokens, cacheReadTokens: row.cacheReadTokens, outputTokens: row.outputTokens }
      const lost = { ...emptyReport({ operationId, outcome: "failed", message: "", offloaded: false, reason, retryable: true }), cost: costOf(charged, "abandoned") }
      return Effect.map(
        endWithout({ operationId, fingerprint: row.fingerprint }, threadId, { ...lost, message: Message.of(lost) }, row.createdAt),
        (s) => s.report!
      )
    }

    /**
     * Reads operation `operationId`'s outcome as a retry, a read or a cancellation sees it: the stored outcome, or,
     * while it runs, its outcome once it ends when `wait` (in this process: its fiber; in another process: its row,
     * polled every `cancelPollMillis` for at most `remoteWaitMillis`, then `running` with `runningMessage`), else
     * `running`. An operation left `running` by a process that is gone (`DriverRegistry`) is settled as failed.
     */
    const outcome = (
      threadId: ThreadId,
      operationId: string,
      wait: boolean,
      runningMessage = "The offload is still running; the conversation is unchanged until it commits."
    ) =>
      Effect.gen(function*() {
        const entry = inFlight.get(operationId)
        if (entry !== undefined && entry.fiber !== null && wait) yield* Fiber.await(entry.fiber)
        const deadline = (yield* Clock.currentTimeMillis) + remoteWaitMillis
        for (;;) {
          const s = yield* stored(threadId, operationId)
          if (s.report !== null) return s.report
          if (inFlight.has(operationId)) return runningReport(operationId, runningMessage)
          // Running under this driver with no entry here: its fiber ended without an outcome (a defect), so nothing
          // was applied. Running in another process: read until it ends, while its owner lives.
          if (s.row.driverId === drivers.driverId) {
            return yield* settleLost(threadId, operationId, s.row, "the offload stopped before it was applied, without an outcome")
          }
          if (!(yield* ownerAlive(s.row.driverId))) return yield* settleLost(threadId, operationId, s.row)
          if (!wait || (yield* Clock.currentTimeMillis) >= deadline) return runningReport(operationId, runningMessage)
          yield* Effect.sleep(Duration.millis(cancelPollMillis))
        }
      })

    /**
     * Offloads `threadId`, keeping the newest `keepTokens` (rendered tokens) verbatim, as operation `key` (the same
     * id again answers the first outcome). The caller checks the thread and that no run is active. Returns the
     * report: `offloaded`, `nothing`, `stale` (discarded: retry) or `cancelled`. Fails with `OffloadFailed` (the
     * summariser failed or its summary was refused: only a `thread.offload_failed` event and the outcome are
     * written), `InvalidRequest` (the id names an operation with another payload or thread), `OffloadInProgress`
     * (another operation of the thread runs in this process), `PersistenceError`. `trigger` (default: a client's)
     * is what the PreCompact hook is told; `rule` (default: any change makes the summary stale) how the commit judges
     * the thread's changes meanwhile (`CommitRule`).
     */
    const offload = Span.fn("ThreadOffload.offload")(function*(
      threadId: ThreadId,
      keepTokens: number,
      key: OperationKey,
      cache: CacheRewrite = noPrices,
      trigger: Trigger = manualTrigger,
      rule: CommitRule = {}
    ) {
      const seen = yield* store.getOffloadOperation(key.operationId)
      if (seen._tag === "Some") {
        if (seen.value.threadId !== threadId || seen.value.fingerprint !== key.fingerprint) {
          return yield* new InvalidRequest({
            reason: seen.value.threadId === threadId
              ? `command id ${key.operationId} was already used by OffloadThread with a different payload; ` +
                `a retry must repeat the command unchanged: send this OffloadThread with a new command id`
              : `command id ${key.operationId} was already used by OffloadThread on thread ${seen.value.threadId}; ` +
                `send OffloadThread with a new command id`
          })
        }
        return yield* failedAsError(threadId, yield* outcome(threadId, key.operationId, true))
      }
      // One /offload per thread at a time in this process (across processes the later commit is discarded as stale).
      const running = runningOn.get(threadId)
      if (running !== undefined) return yield* new OffloadInProgress({ threadId, operationId: running })
      runningOn.set(threadId, key.operationId)
      return yield* begin(threadId, keepTokens, key, cache, trigger, rule).pipe(
        // Until its fiber runs (which clears it when it ends), the mark is this call's to clear.
        Effect.onExit(() => Effect.sync(() => {
          if (!inFlight.has(key.operationId) && runningOn.get(threadId) === key.operationId) runningOn.delete(threadId)
        }))
      )
    })

    /** `offload` once the thread is marked as running `key` (see there). */
    const begin = Span.fn("ThreadOffload.begin")(function*(
      threadId: ThreadId,
      keepTokens: number,
      key: OperationKey,
      cache: CacheRewrite,
      trigger: Trigger,
      rule: CommitRule
    ) {
      const plan = yield* planOf(threadId, keepTokens)
      const createdAt = yield* DateTime.now
      const reason = nothingReason(plan, keepTokens)
      const base: OffloadReport = baseReport(plan, key.operationId, keepTokens, cache)
      if (reason !== null) {
        const report: OffloadReport = { ...base, outcome: "nothing", reason }
        const withMessage = { ...report, message: Message.of(report) }
        yield* uow.thread(threadId, "ThreadOffload.nothing")(store.insertOffloadOperation(finished(key, threadId, withMessage, createdAt, createdAt)))
        return withMessage
      }
      // The PreCompact hook may deny it (with a reason for the user); nothing is summarised then.
      const decision = yield* hook.check({ threadId, trigger: trigger.trigger, approvalMode: trigger.approvalMode })
      if (!decision.allow) {
        const report: OffloadReport = { ...base, outcome: "denied", reason: decision.reason }
        const withMessage = { ...report, message: Message.of(report) }
        yield* uow.thread(threadId, "ThreadOffload.denied")(store.insertOffloadOperation(finished(key, threadId, withMessage, createdAt, createdAt)))
        return withMessage
      }
      // Registered in this process before its row exists, so that a reader here never finds the row `running` under
      // this driver without its entry (it would take the operation for one whose fiber is gone). A concurrent request
      // with the same id keeps the entry it finds; the one whose row is written registers its own.
      const entry: InFlight = { fiber: null, phase: "summarising", cancel: yield* Deferred.make<void>() }
      if (!inFlight.has(key.operationId)) inFlight.set(key.operationId, entry)
      // The operation is recorded before the summariser is called: its charge is prepared, to be committed with the
      // offload or abandoned, never lost.
      yield* uow.thread(threadId, "ThreadOffload.prepare")(store.insertOffloadOperation({
        operationId: key.operationId,
        threadId,
        fingerprint: key.fingerprint,
        status: "running",
        result: null,
        providerInstance: summariser.instance ?? null,
        calls: 0,
        inputTokens: 0,
        cacheWriteTokens: 0,
        cacheReadTokens: 0,
        outputTokens: 0,
        costUsd: null,
        costState: "prepared",
        createdAt,
        finishedAt: null,
        driverId: drivers.driverId,
        cancelRequestedAt: null
      })).pipe(Effect.tapError(() => Effect.sync(() => inFlight.get(key.operationId) === entry && inFlight.delete(key.operationId))))
      inFlight.set(key.operationId, entry)
      // The operation belongs to the server, not to the request: a client that goes away does not stop it.
      entry.fiber = yield* Effect.forkIn(
        run(threadId, keepTokens, key, plan, cache, entry, createdAt, rule).pipe(Effect.ensuring(Effect.sync(() => {
          inFlight.delete(key.operationId)
          if (runningOn.get(threadId) === key.operationId) runningOn.delete(threadId)
        }))),
        scope
      )
      const fiber = entry.fiber
      // Reading the outcome back may fail after the offload committed: the user is then told it was applied.
      const report = yield* outcome(threadId, key.operationId, true).pipe(
        Effect.catchTag("PersistenceError", (e) =>
          Effect.flatMap(Fiber.await(fiber), (exit) =>
            exit._tag === "Success" && exit.value.outcome === "offloaded"
              ? Effect.succeed(undisplayable(key.operationId, `the result could not be read back (${e.operation}: ${e.detail})`))
              : Effect.fail(e)))
      )
      return yield* failedAsError(threadId, report)
    })

    /** `report`, or `OffloadFailed` when its outcome is `failed` (what a POST answers; a read answers the report). */
    const failedAsError = (threadId: ThreadId, report: OffloadReport) =>
      report.outcome === "failed"
        ? Effect.fail(new OffloadFailed({ threadId, reason: report.reason ?? "the offload failed", retryable: report.retryable }))
        : Effect.succeed(report)

    /**
     * Cancels operation `operationId` of `threadId` if its summary is still being written, and answers its outcome
     * once settled: `cancelled`, or what it ended with (a commit in progress is waited for, never undone). The
     * operation may run in another process on the same database: the request is then recorded on its row (one unit
     * of work under the thread's lock), the running process sees it within `cancelPollMillis` and ends it
     * `cancelled`, and this process waits for the outcome (at most `remoteWaitMillis`, else it answers `running`:
     * the request stays recorded). An operation whose process is gone is settled as failed (nothing was applied).
     * Fails with `OffloadOperationNotFound`, `PersistenceError`.
     */
    const cancel = Span.fn("ThreadOffload.cancel")(function*(threadId: ThreadId, operationId: string) {
      const s = yield* stored(threadId, operationId)
      if (s.report !== null) return s.report
      const entry = inFlight.get(operationId)
      if (entry !== undefined) {
        if (entry.phase === "summarising") {
          entry.phase = "cancelling"
          yield* Deferred.succeed(entry.cancel, undefined)
        }
      } else if (yield* ownerAlive(s.row.driverId)) {
        const at = yield* DateTime.now
        yield* uow.thread(threadId, "ThreadOffload.requestCancel")(store.requestOffloadCancel(operationId, at))
      }
      return yield* outcome(
        threadId,
        operationId,
        true,
        `The cancellation was requested, but the offload is still running in another server process after ${remoteWaitMillis / 1_000} s; ` +
          `it is cancelled if its summary has not been applied yet. Read the operation ${operationId} again for its outcome.`
      )
    })

    /** The outcome of operation `operationId` of `threadId` (`running` while in flight). Fails with `OffloadOperationNotFound`. */
    const get = Span.fn("ThreadOffload.get")(function*(threadId: ThreadId, operationId: string) {
      return yield* outcome(threadId, operationId, false)
    })

    /** Rendered tokens of a visible history: its summary and its items. */
    const visibleTokens = (v: VisibleHistory) => (v.summary?.tokens ?? 0) + v.items.reduce((n, i) => n + i.tokens, 0)

    /**
     * Undoes `threadId`'s newest offload not yet undone, under the thread's lock: its record is marked undone (it
     * leaves the summary chain, so the visible history is again the previous summary and every item after that
     * summary's cut), a `thread.offload_undone` event is appended, and the receipt of `receiptKey` is written, all in
     * one unit of work. The summary item stays in the log. Nothing is undone (`undone: false`, with the reason) when
     * there is no offload, or a handoff owes or delivered its summary (the originals would have to be owed again).
     * Fails with `RunInProgress`, `PersistenceError`, `ConcurrentModification`.
     */
    const undo = Span.fn("ThreadOffload.undo")(function*(threadId: ThreadId, receiptKey: CommandReceipts.Key) {
      return yield* uow.thread(threadId, "ThreadOffload.undo")(Effect.gen(function*() {
        const active = yield* store.findActiveRun(threadId)
        if (active._tag === "Some") return yield* new RunInProgress({ threadId, runId: active.value.id })
        const before = yield* visibleHistory(threadId)
        const tokensBefore = visibleTokens(before)
        const none = (reason: string): OffloadUndoReport => ({
          undone: false,
          reason,
          offloadId: null,
          summaryItemId: null,
          restoredItems: 0,
          tokensBefore,
          tokensAfter: tokensBefore,
          message: `Nothing was undone: ${reason}. The conversation is unchanged.`
        })
        const latest = before.offload
        if (latest === null) return yield* CommandReceipts.write(store, receiptKey, OffloadUndoReport, none("the thread has no offload to undo"))
        const owing = (yield* store.listHandoffs(threadId)).filter((h) => h.itemIds.includes(latest.summaryItemId))
        // The active lane's replacement handoff (the offload replaced its native thread) can be taken back: the native
        // thread given the summary is replaced again, so the next turn owes it the originals. A handoff toward another
        // lane (a deferred switch the summary superseded) cannot yet.
        const thread = yield* store.getThread(threadId)
        const laneId = thread._tag === "Some" ? thread.value.activeProviderThreadId : null
        const blocking = owing.filter((h) => !(h.kind === "replacement" && h.targetProviderThreadId === laneId))
        if (blocking.length > 0) {
          return yield* CommandReceipts.write(store, receiptKey, OffloadUndoReport, none(
            `the summary ${latest.summaryItemId} of offload ${latest.id} is already owed to another provider thread ` +
              `(handoff ${blocking.map((h) => h.id).join(", ")}); undoing it would need its originals owed again, which is not supported yet`
          ))
        }
        const deliveries = (yield* Effect.forEach(owing, (h) => store.listDeliveriesOfHandoff(h.id))).flat()
        const uncertain = deliveries.filter((d) => d.status === "pending")
        if (uncertain.length > 0) {
          return yield* CommandReceipts.write(store, receiptKey, OffloadUndoReport, none(
            `the delivery of the summary ${latest.summaryItemId} (${uncertain.map((d) => d.id).join(", ")}) has an unconfirmed outcome; ` +
              `send a message first, then undo`
          ))
        }
        const now = yield* DateTime.now
        const why = `offload ${latest.id} undone`
        for (const d of deliveries) {
          if (d.status === "deferred") {
            yield* store.updateDelivery({ ...d, status: "superseded", updatedAt: now })
            yield* store.appendEvent({ threadId, type: "delivery.superseded", payload: { deliveryId: d.id, handoffId: d.handoffId, reason: why } })
          } else if (d.status === "injected" || d.status === "inline") {
            const native = yield* store.getNativeThread(d.nativeThreadId)
            if (native._tag === "Some") {
              yield* trust.distrust(threadId, native.value, `${why}: it holds the summary; the next turn starts a new native thread owed the originals`)
            }
          }
        }
        for (const h of owing) if (h.open) yield* store.updateHandoff({ ...h, open: false, updatedAt: now })
        yield* store.markOffloadUndone(latest.id, now)
        yield* store.appendEvent({
          threadId,
          type: "thread.offload_undone",
          payload: { offloadId: latest.id, generation: latest.generation, summaryItemId: latest.summaryItemId, cutSeq: latest.cutSeq },
          commandId: receiptKey.commandId
        })
        const after = yield* visibleHistory(threadId)
        const tokensAfter = visibleTokens(after)
        const restoredItems = after.items.length - before.items.length
        const report: OffloadUndoReport = {
          undone: true,
          reason: null,
          offloadId: latest.id,
          summaryItemId: latest.summaryItemId,
          restoredItems,
          tokensBefore,
          tokensAfter,
          message: `Undid the newest offload: ${restoredItems} message${restoredItems === 1 ? " is" : "s are"} visible again instead of its ` +
            `summary. Conversation: ${Message.approx(tokensBefore)} -> ${Message.approx(tokensAfter)} tokens. The summary stays in the log.`
        }
        return yield* CommandReceipts.write(store, receiptKey, OffloadUndoReport, report)
      }))
    })

    return { offload, preview, cancel, get, undo, visibleHistory }
  })
}) {}
