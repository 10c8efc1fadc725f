/**
 * ProviderTurnStartService: decides, at the start of a run on provider thread P, what history P's native thread
 * still owes the model, and prepares it (DESIGN.md "Turn start", steps 1-4):
 *
 * 1. ensure P has a native thread; a native thread with an uncertain (`pending`) delivery is not trusted and is
 *    replaced (generation + 1) with a `replacement` handoff covering the whole history;
 * 2. missed-run recovery: runs on P since its watermark that the provider never saw are owed, reusing a deferred
 *    handoff rather than allocating a new one;
 * 3. budget from P's context usage on *this* native thread (never another's);
 * 4. select under the budget and deliver natively (`injectHistory`) or prepare inline text; what does not fit (a
 *    budget below the useful minimum) stays `deferred` and the prompt goes out unchanged.
 *
 * It does not start the provider turn itself (ThreadService does, then settles inline deliveries).
 */
import { type HandoffDelivery, type NativeThread, type ProviderThread, type Run } from "@baton/contracts"
import { Budget, TokenCounter } from "@baton/context"
import { ThreadStore } from "@baton/persistence"
import type { ProviderAdapter } from "@baton/providers"
import { DateTime, Effect } from "effect"
import { ContextHandoffDelivery, type OwedHandoff } from "./ContextHandoffDelivery.js"
import { IdGenerator } from "./IdGenerator.js"
import { OrchestratorConfig } from "./OrchestratorConfig.js"

/** What turn start decided, for the caller and for the replay's per-run line. */
export interface TurnStartReport {
  readonly budget: Budget.Budget
  /** `none` when nothing was owed or everything was deferred. */
  readonly mode: "injected" | "inline" | "none"
  readonly deliveredItems: number
  readonly deliveredTokens: number
  readonly deferredItems: number
  readonly deferredTokens: number
  readonly omittedItems: number
  /** Set when the injection's outcome is uncertain (lost acknowledgement); the run must not start. */
  readonly injectionError: string | null
}

export interface TurnStartPlan {
  readonly native: NativeThread
  readonly providerThread: ProviderThread
  /** Rendered history to place before the prompt (inline mode), else `null`. */
  readonly inlineHistory: string | null
  /** Deliveries written `pending` for inline mode; settle them once the provider accepted the turn. */
  readonly inlineDeliveries: ReadonlyArray<HandoffDelivery>
  readonly report: TurnStartReport
}

export class ProviderTurnStartService extends Effect.Service<ProviderTurnStartService>()(
  "@baton/orchestration/ProviderTurnStartService",
  {
    effect: Effect.gen(function*() {
      const store = yield* ThreadStore
      const delivery = yield* ContextHandoffDelivery
      const ids = yield* IdGenerator
      const counter = yield* TokenCounter.TokenCounter
      const config = yield* OrchestratorConfig

      /** Starts a fresh native thread for P (generation = previous + 1) and makes it active. */
      const startNative = Effect.fn("ProviderTurnStartService.startNative")(function*(
        providerThread: ProviderThread,
        adapter: ProviderAdapter.ProviderAdapterShape,
        previous: NativeThread | null
      ) {
        const { nativeRef } = yield* adapter.startThread()
        const now = yield* DateTime.now
        const native: NativeThread = {
          id: ids.next("nat") as NativeThread["id"],
          providerThreadId: providerThread.id,
          generation: (previous?.generation ?? 0) + 1,
          nativeRef,
          status: "active",
          usage: null,
          estimatedTokens: 0,
          compactionsWithoutProgress: 0,
          createdAt: now,
          updatedAt: now
        }
        yield* store.insertNativeThread(native)
        const updated: ProviderThread = { ...providerThread, activeNativeThreadId: native.id, updatedAt: now }
        yield* store.updateProviderThread(updated)
        yield* store.appendEvent(providerThread.threadId, "native_thread.started", {
          nativeThreadId: native.id,
          providerThreadId: providerThread.id,
          generation: native.generation,
          replaces: previous?.id ?? null
        })
        return { native, providerThread: updated }
      })

      /** Replaces an untrusted native thread: supersede its open deliveries, owe the whole history to the new one. */
      const replaceNative = Effect.fn("ProviderTurnStartService.replaceNative")(function*(
        run: Run,
        providerThread: ProviderThread,
        adapter: ProviderAdapter.ProviderAdapterShape,
        old: NativeThread,
        reason: string
      ) {
        const now = yield* DateTime.now
        yield* store.updateNativeThread({ ...old, status: "replaced", updatedAt: now })
        yield* store.appendEvent(run.threadId, "native_thread.replaced", { nativeThreadId: old.id, reason })
        yield* delivery.supersedeForReplacement(run.threadId, providerThread, old, reason)
        const started = yield* startNative(providerThread, adapter, old)
        const earlier = yield* store.listRunsBetween(run.threadId, 0, run.seq)
        yield* delivery.createHandoff(run.threadId, "replacement", started.providerThread, earlier)
        const synced: ProviderThread = { ...started.providerThread, syncedRunSeq: run.seq - 1, updatedAt: now }
        yield* store.updateProviderThread(synced)
        return { native: started.native, providerThread: synced }
      })

      /**
       * Prepares the turn of `run` on `providerThread`. Writes happen in the caller's transaction boundaries:
       * bookkeeping is durable before `injectHistory` is called.
       */
      const prepare = Effect.fn("ProviderTurnStartService.prepare")(function*(
        run: Run,
        providerThreadIn: ProviderThread,
        adapter: ProviderAdapter.ProviderAdapterShape
      ) {
        let providerThread = providerThreadIn
        let native: NativeThread
        if (providerThread.activeNativeThreadId === null) {
          ;({ native, providerThread } = yield* startNative(providerThread, adapter, null))
        } else {
          const found = yield* store.getNativeThread(providerThread.activeNativeThreadId)
          if (found._tag === "None") {
            ;({ native, providerThread } = yield* startNative(providerThread, adapter, null))
          } else {
            native = found.value
            const uncertain = yield* store.listDeliveriesByStatus(native.id, "pending")
            if (uncertain.length > 0) {
              ;({ native, providerThread } = yield* replaceNative(
                run,
                providerThread,
                adapter,
                native,
                `${uncertain.length} delivery(ies) with an unconfirmed outcome`
              ))
            }
          }
        }

        // Missed-run recovery: runs on P after its watermark that the provider never read.
        if (providerThread.syncedRunSeq < run.seq - 1) {
          const between = yield* store.listRunsBetween(run.threadId, providerThread.syncedRunSeq, run.seq)
          const missed = between.filter((r) => r.stopPoint === "before_provider")
          yield* delivery.recoverMissedRuns(run.threadId, providerThread, native, missed)
          const now = yield* DateTime.now
          providerThread = { ...providerThread, syncedRunSeq: run.seq - 1, updatedAt: now }
          yield* store.updateProviderThread(providerThread)
        }

        const owed = yield* delivery.owedTo(run.threadId, providerThread, native)
        const budget = Budget.compute(
          {
            modelWindow: providerThread.contextWindow ?? undefined,
            usage: native.usage,
            estimatedUsedTokens: native.estimatedTokens,
            requestTokens: counter.count(run.prompt)
          },
          config.budget
        )
        const nothing = (report: Partial<TurnStartReport>): TurnStartPlan => ({
          native,
          providerThread,
          inlineHistory: null,
          inlineDeliveries: [],
          report: {
            budget,
            mode: "none",
            deliveredItems: 0,
            deliveredTokens: 0,
            deferredItems: 0,
            deferredTokens: 0,
            omittedItems: 0,
            injectionError: null,
            ...report
          }
        })
        if (owed.length === 0) return nothing({})

        const plan = yield* delivery.plan(run.threadId, owed, budget.budget)
        const owedTokens = plan.items.reduce((n, i) => n + i.tokens, 0)
        if (budget.budget < config.budget.minUsefulBudget || plan.selection.selected.length === 0) {
          const reason = budget.budget < config.budget.minUsefulBudget
            ? `budget ${budget.budget} below the useful minimum ${config.budget.minUsefulBudget} ` +
              `(window ${budget.window}, used ${budget.used}, request ${budget.request}, reserve ${budget.reserve})`
            : `no tool unit fits the budget ${budget.budget}`
          yield* delivery.defer(run.threadId, owed, budget.budget, reason)
          return nothing({ deferredItems: plan.items.length, deferredTokens: owedTokens })
        }

        const report = {
          deliveredItems: plan.selection.selected.length,
          deliveredTokens: plan.selection.tokens,
          omittedItems: plan.selection.omittedItemIds.length
        }
        if (adapter.injectHistory !== undefined) {
          const pending = yield* delivery.markPending(run.threadId, plan, "injected", run.id, budget.budget)
          const outcome = yield* adapter.injectHistory({
            nativeRef: native.nativeRef,
            rendered: plan.selection.rendered,
            itemIds: plan.selection.selected.map((i) => i.id),
            deliveryId: pending.map((d) => d.id).join(",")
          }).pipe(Effect.either)
          if (outcome._tag === "Left") {
            // The provider may hold the history: leave the deliveries `pending` (uncertain) for the next turn
            // start, which will not trust this native thread.
            return nothing({ ...report, mode: "injected", injectionError: outcome.left.message })
          }
          yield* delivery.markSettled(run.threadId, pending, "injected")
          const now = yield* DateTime.now
          native = {
            ...native,
            usage: outcome.right.usage ?? native.usage,
            estimatedTokens: native.estimatedTokens + plan.selection.tokens,
            updatedAt: now
          }
          yield* store.updateNativeThread(native)
          return nothing({ ...report, mode: "injected" })
        }
        const pending = yield* delivery.markPending(run.threadId, plan, "inline", run.id, budget.budget)
        return {
          ...nothing({ ...report, mode: "inline" }),
          inlineHistory: plan.selection.rendered,
          inlineDeliveries: pending
        } satisfies TurnStartPlan
      })

      return { prepare, startNative }
    })
  }
) {}

export type { OwedHandoff }
