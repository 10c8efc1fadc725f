/**
 * `/offload` as a server-owned operation over HTTP (issue 12), with a loopback model API as the summariser (the
 * config's `offload.summariser` names an Anthropic Messages instance): operation ids and the first outcome kept,
 * the summary discarded as stale when a run got in while it was being written (never both), cancellation before and
 * after the provider answered, the summariser's cost committed or abandoned and counted in the thread's totals, the
 * message the user sees, and the preview matching what the offload then does.
 */
import type { ThreadId } from "@baton/contracts"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { client } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, sendAndWait, serveSettings, settingsFor } from "./support/ModelServer.js"
import { hookServer, itemsOf, until } from "./support/Offload.js"

const chatUsage = { input: 100, cacheWrite: 0, cacheRead: 0, output: 20 }
/** What each summariser call is billed: at $3 / $15 per million, (1,000 x 3 + 200 x 15) / 1e6 = $0.006. */
const sumUsage = { input: 1_000, cacheWrite: 0, cacheRead: 0, output: 200 }
const summaryText = "## Goal\n- the steps\n## Standing instructions\n- none"

/** A reply that waits for `release()` before it is written (the model has the request and has not answered). */
const held = (reply: ModelApi.Reply) => {
  let release: () => void = () => undefined
  const hold = new Promise<void>((resolve) => {
    release = resolve
  })
  return { reply: { ...reply, hold }, release: () => release() }
}

/**
 * A server whose `/offload` summariser is a loopback Anthropic instance `sum`, a thread on a loopback `claude`
 * instance with `turns` completed runs of about 600 tokens each, and `body` run against them.
 */
const withThread = <A, E, R>(
  turns: number,
  body: (ctx: { readonly chat: ModelApi.ModelApi; readonly summariser: ModelApi.ModelApi; readonly threadId: ThreadId }) => Effect.Effect<A, E, R>,
  hook?: { readonly url: string; readonly timeoutMs: number }
) =>
  Effect.scoped(Effect.gen(function*() {
    const chat = yield* ModelApi.start
    const summariser = yield* ModelApi.start
    const settings = yield* settingsFor([
      instance("claude", "anthropic-messages", chat),
      instance("sum", "anthropic-messages", summariser)
    ])
    return yield* Effect.gen(function*() {
      const api = yield* client()
      const { threadId } = yield* api.threads.create({ payload: { providerInstance: "claude" as never }, headers: {} })
      for (let i = 0; i < turns; i++) {
        chat.enqueue(ModelApi.answer("anthropic-messages", `done step ${i}`, chatUsage))
        expect((yield* sendAndWait(threadId as ThreadId, `Step ${i}: ${Harness.words(450)}`)).run.status).toBe("completed")
      }
      return yield* body({ chat, summariser, threadId: threadId as ThreadId })
    }).pipe(Effect.provide(serveSettings({ ...settings, offload: { summariser: "sum", ...(hook === undefined ? {} : { preCompactHook: hook }) } })))
  }))

describe("/offload over HTTP: server-owned operations", () => {
  it.live("an operation id names the outcome: the same id answers it again, GET reads it, the cost is committed and counted", () =>
    withThread(4, ({ summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        const report = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-1" }, headers: {} })
        expect(report).toMatchObject({ operationId: "op-1", outcome: "offloaded", offloaded: true, retryable: false })
        expect(report.message).toMatch(
          /^Offloaded \d+ older messages, freeing up context window space\. Conversation: ~\d\.\dK -> ~[\d.]+K? tokens \(\d+% decrease\), \d+ messages? kept\.$/
        )
        expect(report.message).toContain(`Offloaded ${report.coveredItems} older messages`)
        expect(report.message).toContain(`${report.keptItems} message`)
        expect(report.tokensAfter).toBe(report.summaryTokens + report.keptTokens)
        expect(report.tokensAfter).toBeLessThan(report.tokensBefore)
        expect(report.cost).toEqual({
          providerInstance: "sum",
          calls: 1,
          inputTokens: 1_000,
          cacheWriteTokens: 0,
          cacheReadTokens: 0,
          outputTokens: 200,
          costUsd: 0.006,
          state: "committed"
        })
        // The same id again: the first outcome, and no second summariser call nor second summary.
        const again = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-1" }, headers: {} })
        expect(again).toEqual(report)
        expect(yield* api.threads.getOffload({ path: { threadId, operationId: "op-1" } })).toEqual(report)
        expect(summariser.requests).toHaveLength(1)
        expect(yield* itemsOf(threadId, "summary")).toHaveLength(1)
        // The same id with another payload is refused; an unknown id is 404.
        const reused = yield* Effect.flip(api.threads.offload({ path: { threadId }, payload: { keepTokens: 100, operationId: "op-1" }, headers: {} }))
        expect(reused._tag).toBe("InvalidRequest")
        const unknown = yield* Effect.flip(api.threads.getOffload({ path: { threadId, operationId: "op-nope" } }))
        expect(unknown._tag).toBe("OffloadOperationNotFound")
        // The thread's totals: its 4 runs ((100 x 3 + 20 x 15) / 1e6 = $0.0006 each) and the summary ($0.006).
        const snapshot = yield* api.threads.get({ path: { threadId } })
        expect(snapshot.costs.summariser).toEqual({
          operations: 1,
          inputTokens: 1_000,
          cacheWriteTokens: 0,
          cacheReadTokens: 0,
          outputTokens: 200,
          costUsd: 0.006,
          abandonedUsd: null
        })
        expect(snapshot.costs.totals).toMatchObject({ runs: 4, inputTokens: 4 * 100 + 1_000, outputTokens: 4 * 20 + 200, costUsd: 0.0084 })
      })), 120_000)

  it.live("a run queued while the summary is written: the summary is discarded as stale, never both; an offload that commits first comes before the run", () =>
    withThread(4, ({ chat, summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const { reply, release } = held(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        summariser.enqueue(reply)
        const offloading = yield* Effect.fork(api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-stale" }, headers: {} }))
        yield* until(() => summariser.requests.length === 1)
        // The summariser has the request: a message now is queued (not refused) and runs to completion.
        chat.enqueue(ModelApi.answer("anthropic-messages", "done meanwhile", chatUsage))
        expect((yield* sendAndWait(threadId, "a message during the summary")).run.status).toBe("completed")
        expect(yield* api.threads.getOffload({ path: { threadId, operationId: "op-stale" } })).toMatchObject({ outcome: "running" })
        release()
        const stale = yield* Fiber.join(offloading)
        expect(stale).toMatchObject({ operationId: "op-stale", outcome: "stale", offloaded: false, offloadId: null, summaryItemId: null, retryable: true })
        expect(stale.message).toMatch(/^The conversation changed while the summary was being written .*The conversation is unchanged; run \/offload again\./)
        // The spent cost is kept, as abandoned.
        expect(stale.cost).toMatchObject({ calls: 1, costUsd: 0.006, state: "abandoned" })
        expect(yield* itemsOf(threadId, "summary")).toEqual([])
        const snapshot = yield* api.threads.get({ path: { threadId } })
        expect(snapshot.costs.summariser).toMatchObject({ operations: 1, costUsd: 0.006, abandonedUsd: 0.006 })

        // Retried with a new id, the offload commits first; a message sent after it runs after the summary.
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        const committed = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-retry" }, headers: {} })
        expect(committed.outcome).toBe("offloaded")
        chat.enqueue(ModelApi.answer("anthropic-messages", "done after", chatUsage))
        expect((yield* sendAndWait(threadId, "a message after the summary")).run.status).toBe("completed")
        const [summary] = yield* itemsOf(threadId, "summary")
        const users = yield* itemsOf(threadId, "user_message")
        expect(summary!.id).toBe(committed.summaryItemId)
        expect(users.at(-1)!.seq).toBeGreaterThan(summary!.seq)
      })), 120_000)

  it.live("cancellation before the provider answered: cancelled, nothing written; after it answered: the finished outcome", () =>
    withThread(4, ({ summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const { reply, release } = held(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        summariser.enqueue(reply)
        const preview = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, dryRun: true }, headers: {} })
        expect(preview.coveredItems).toBeGreaterThan(0)
        const offloading = yield* Effect.fork(api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-cancel" }, headers: {} }))
        yield* until(() => summariser.requests.length === 1)
        const cancelled = yield* api.threads.cancelOffload({ path: { threadId, operationId: "op-cancel" } })
        expect(cancelled).toMatchObject({ operationId: "op-cancel", outcome: "cancelled", offloaded: false, summaryItemId: null })
        expect(cancelled.message).toBe("The offload was cancelled before it was applied. The conversation is unchanged.")
        // Nothing applied: every item is kept, and every token with it (the kept tokens once counted only those after
        // the cut it would have made).
        expect([cancelled.keptItems, cancelled.keptTokens, cancelled.tokensAfter]).toEqual([
          preview.coveredItems + preview.keptItems,
          preview.coveredTokens + preview.keptTokens,
          preview.tokensBefore
        ])
        // The request that started it answers the same outcome; the provider's late answer changes nothing.
        expect(yield* Fiber.join(offloading)).toEqual(cancelled)
        release()
        expect(yield* api.threads.getOffload({ path: { threadId, operationId: "op-cancel" } })).toEqual(cancelled)
        expect(yield* itemsOf(threadId, "summary")).toEqual([])
        // Cancelled is the first outcome: the same id does not run it again.
        expect(yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-cancel" }, headers: {} })).toEqual(cancelled)
        expect(summariser.requests).toHaveLength(1)

        // After the provider answered (the offload finished): cancelling confirms it finished.
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        const done = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-done" }, headers: {} })
        expect(done.outcome).toBe("offloaded")
        expect(yield* api.threads.cancelOffload({ path: { threadId, operationId: "op-done" } })).toEqual(done)
        expect(yield* itemsOf(threadId, "summary")).toHaveLength(1)
      })), 120_000)

  it.live("a failing summariser: 502 saying the conversation is unchanged; the outcome is kept under its id", () =>
    withThread(4, ({ summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        summariser.enqueue(ModelApi.error(400, "the summariser refuses"))
        const error = yield* Effect.flip(api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-fail" }, headers: {} }))
        expect(error._tag).toBe("OffloadFailed")
        expect(error.message).toMatch(/the summariser refuses.*The history is unchanged/)
        const stored = yield* api.threads.getOffload({ path: { threadId, operationId: "op-fail" } })
        expect(stored).toMatchObject({ outcome: "failed", offloaded: false })
        expect(stored.message).toMatch(/^The offload failed: the summariser failed: .*the summariser refuses.*\. The conversation is unchanged/)
        expect(yield* itemsOf(threadId, "summary")).toEqual([])
      })), 120_000)

  it.live("the preview shows what the offload then does: the same items, tokens before, kept; it calls no summariser", () =>
    withThread(4, ({ summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const preview = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, dryRun: true }, headers: {} })
        expect(preview.outcome).toBe("preview")
        expect(preview.coveredItemIds.length).toBeGreaterThan(0)
        expect(preview.tokensAfter).toBeLessThan(preview.tokensBefore)
        // The cache rewrite at the instance's prices: (3.75 - 0.3) / 3 = 1.15 input-token equivalents per token.
        expect(preview.cacheRewriteTokens).toBe(Math.ceil(1.15 * preview.tokensAfter))
        expect(preview.cacheRewriteUsd).toBeCloseTo(preview.cacheRewriteTokens * 3 / 1_000_000, 9)
        expect(preview.message).toMatch(/^Would offload \d+ older messages .*estimated.*Nothing was changed\.$/)
        expect(summariser.requests).toHaveLength(0)
        expect(yield* itemsOf(threadId, "summary")).toEqual([])

        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        const done = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700 }, headers: {} })
        expect(done.outcome).toBe("offloaded")
        expect(done.coveredItemIds).toEqual(preview.coveredItemIds)
        expect(done).toMatchObject({
          cutSeq: preview.cutSeq,
          coveredItems: preview.coveredItems,
          coveredTokens: preview.coveredTokens,
          keptItems: preview.keptItems,
          keptTokens: preview.keptTokens,
          tokensBefore: preview.tokensBefore
        })
      })), 120_000)

  it.live("undo: the visible history is again what it was before the newest offload; the summary stays in the log; offloading again works", () =>
    withThread(4, ({ summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const before = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, dryRun: true }, headers: {} })
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        const done = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700 }, headers: {} })
        expect(done.outcome).toBe("offloaded")
        // After the offload nothing is left to summarise within the kept tail; the preview's message says why (it said
        // "Nothing would be offloaded: nothing to do." whatever the reason: b48srv).
        const nothingLeft = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, dryRun: true }, headers: {} })
        expect(nothingLeft.coveredItems).toBe(0)
        expect(nothingLeft.reason).toMatch(/^nothing (to|worth) offload/)
        expect(nothingLeft.message).toBe(`Nothing would be offloaded: ${nothingLeft.reason!.replace(/^nothing (to offload|worth offloading): /, "")}.`)

        const undone = yield* api.threads.undoOffload({ path: { threadId }, payload: { commandId: "undo-1" }, headers: {} })
        expect(undone).toMatchObject({
          undone: true,
          offloadId: done.offloadId,
          summaryItemId: done.summaryItemId,
          restoredItems: done.coveredItems,
          tokensBefore: done.tokensAfter,
          tokensAfter: done.tokensBefore
        })
        expect(undone.message).toMatch(/^Undid the newest offload: \d+ messages are visible again instead of its summary\. Conversation: ~.* tokens\. The summary stays in the log\.$/)
        // The same command id answers the same; the summary item is still readable by id.
        expect(yield* api.threads.undoOffload({ path: { threadId }, payload: { commandId: "undo-1" }, headers: {} })).toEqual(undone)
        expect((yield* api.items.get({ path: { itemId: done.summaryItemId! }, urlParams: {} })).item.text).toContain("## Goal")
        // The visible history is the one before: the preview covers the same items with the same tokens.
        const again = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, dryRun: true }, headers: {} })
        expect(again.coveredItemIds).toEqual(before.coveredItemIds)
        expect(again.tokensBefore).toBe(before.tokensBefore)
        // Nothing more to undo; offloading again commits a new summary.
        const nothing = yield* api.threads.undoOffload({ path: { threadId }, payload: {}, headers: {} })
        expect(nothing).toMatchObject({ undone: false, reason: "the thread has no offload to undo" })
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        const redone = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700 }, headers: {} })
        expect(redone).toMatchObject({ outcome: "offloaded", coveredItemIds: done.coveredItemIds, tokensBefore: done.tokensBefore })
        expect(yield* itemsOf(threadId, "summary")).toHaveLength(2)
      })), 120_000)

  it.live("a PreCompact hook that denies: outcome denied with its reason, the summariser never called; one that misses its deadline denies saying so", () =>
    Effect.scoped(Effect.gen(function*() {
      const denying = yield* hookServer({ decision: "deny", reason: "a release is being cut: no offloads until 18:00" })
      yield* withThread(4, ({ summariser, threadId }) =>
        Effect.gen(function*() {
          const api = yield* client()
          const report = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-hook" }, headers: {} })
          expect(report).toMatchObject({ operationId: "op-hook", outcome: "denied", offloaded: false, reason: "a release is being cut: no offloads until 18:00" })
          expect(report.message).toBe(
            "The PreCompact hook denied the offload: a release is being cut: no offloads until 18:00. The conversation is unchanged."
          )
          expect(denying.bodies).toEqual([{ threadId, trigger: "manual", approvalMode: "client-requested" }])
          expect(summariser.requests).toHaveLength(0)
          expect(yield* itemsOf(threadId, "summary")).toEqual([])
          expect(yield* api.threads.getOffload({ path: { threadId, operationId: "op-hook" } })).toEqual(report)
        }), { url: denying.url, timeoutMs: 10_000 })

      const silent = yield* hookServer(null)
      yield* withThread(4, ({ summariser, threadId }) =>
        Effect.gen(function*() {
          const api = yield* client()
          const report = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700 }, headers: {} })
          expect(report).toMatchObject({ outcome: "denied", reason: "the PreCompact hook did not answer within 300 ms" })
          expect(silent.bodies).toHaveLength(1)
          expect(summariser.requests).toHaveLength(0)
        }), { url: silent.url, timeoutMs: 300 })
    })), 120_000)
})
