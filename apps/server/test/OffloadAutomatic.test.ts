/**
 * The automatic `/offload` (issue 12 item 6's `automatic` trigger; config `offload.auto`): after a completed run whose
 * native thread reports usage at or above the threshold, the server offloads the thread as operation `auto-<run id>`,
 * asking the PreCompact hook with trigger `automatic`; below the threshold, or denied by the hook, nothing changes.
 */
import type { OffloadReport, ThreadId } from "@baton/contracts"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { client } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { sendAndWait } from "./support/ModelServer.js"
import { chatUsage, hookServer, itemsOf, sumUsage, summaryText, withThread } from "./support/Offload.js"

/** The automatic operation of run `runId` once it has an outcome (polling; `null` while there is none). */
const settled = (threadId: ThreadId, runId: string) =>
  Effect.gen(function*() {
    const api = yield* client()
    for (;;) {
      const found = yield* Effect.either(api.threads.getOffload({ path: { threadId, operationId: `auto-${runId}` } }))
      if (found._tag === "Right" && found.right.outcome !== "running") return found.right as OffloadReport
      yield* Effect.sleep("10 millis")
    }
  })

/** A usage report of `used` tokens in all (the 200,000-token window of the test instance). */
const usageOf = (used: number) => ({ input: used - 1_000, cacheWrite: 0, cacheRead: 1_000, output: 50 })

describe("automatic /offload", () => {
  it.live("a run that leaves the native thread at 90% of its window: offloaded as auto-<run id>, the hook told trigger automatic; a run at 10% is left alone", () =>
    Effect.scoped(Effect.gen(function*() {
      const hook = yield* hookServer({ decision: "allow" })
      yield* withThread(4, ({ chat, summariser, threadId }) =>
        Effect.gen(function*() {
          const api = yield* client()
          // Below the threshold: no operation.
          chat.enqueue(ModelApi.answer("anthropic-messages", "quiet", usageOf(20_000)))
          const low = yield* sendAndWait(threadId, "a small step")
          expect(low.run.status).toBe("completed")
          // The check runs after the run: give it time, then there is still no operation of that run.
          yield* Effect.sleep("300 millis")
          const none = yield* Effect.flip(api.threads.getOffload({ path: { threadId, operationId: `auto-${low.run.id}` } }))
          expect(none._tag).toBe("OffloadOperationNotFound")
          expect(hook.bodies).toEqual([])

          // At 90% (threshold 80%): the server offloads the thread itself.
          summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
          chat.enqueue(ModelApi.answer("anthropic-messages", "full", usageOf(180_000)))
          const high = yield* sendAndWait(threadId, "a big step")
          expect(high.run.status).toBe("completed")
          const report = yield* settled(threadId, high.run.id)
          expect(report).toMatchObject({ operationId: `auto-${high.run.id}`, outcome: "offloaded", offloaded: true, keepTokens: 700 })
          expect(hook.bodies).toEqual([{ threadId, trigger: "automatic", approvalMode: "server-policy" }])
          expect(summariser.requests).toHaveLength(1)
          expect(yield* itemsOf(threadId, "summary")).toHaveLength(1)
          // The next turn goes on from the summary, on a new native thread.
          chat.enqueue(ModelApi.answer("anthropic-messages", "after", chatUsage))
          expect((yield* sendAndWait(threadId, "next")).run.status).toBe("completed")
          const snapshot = yield* api.threads.get({ path: { threadId } })
          expect(snapshot.providerThreads[0]!.nativeThreads.map((n) => n.status)).toEqual(["replaced", "active"])
          // The user undoes it: a later run at 90% again is not offloaded on Baton's own (review finding: it redid it).
          expect((yield* api.threads.undoOffload({ path: { threadId }, payload: {}, headers: {} })).undone).toBe(true)
          chat.enqueue(ModelApi.answer("anthropic-messages", "full again", usageOf(185_000)))
          const again = yield* sendAndWait(threadId, "another big step")
          expect(again.run.status).toBe("completed")
          yield* Effect.sleep("300 millis")
          const skipped = yield* Effect.flip(api.threads.getOffload({ path: { threadId, operationId: `auto-${again.run.id}` } }))
          expect(skipped._tag).toBe("OffloadOperationNotFound")
          expect(summariser.requests).toHaveLength(1)
        }), { offload: { auto: { thresholdRatio: 0.8, keepTokens: 700, approvalMode: "server-policy" }, preCompactHook: { url: hook.url, timeoutMs: 5_000 } } })
    })), 120_000)

  it.live("a hook that denies the automatic offload: outcome denied, nothing summarised; the conversation goes on", () =>
    Effect.scoped(Effect.gen(function*() {
      const hook = yield* hookServer({ decision: "deny", reason: "no automatic summaries on this project" })
      yield* withThread(3, ({ chat, summariser, threadId }) =>
        Effect.gen(function*() {
          chat.enqueue(ModelApi.answer("anthropic-messages", "full", usageOf(190_000)))
          const high = yield* sendAndWait(threadId, "a big step")
          const report = yield* settled(threadId, high.run.id)
          expect(report).toMatchObject({ outcome: "denied", offloaded: false, reason: "no automatic summaries on this project" })
          expect(hook.bodies).toEqual([{ threadId, trigger: "automatic", approvalMode: "ask-the-lead" }])
          expect(summariser.requests).toHaveLength(0)
          expect(yield* itemsOf(threadId, "summary")).toEqual([])
          chat.enqueue(ModelApi.answer("anthropic-messages", "still here", chatUsage))
          expect((yield* sendAndWait(threadId, "go on")).run.status).toBe("completed")
        }), { offload: { auto: { thresholdRatio: 0.8, keepTokens: 700, approvalMode: "ask-the-lead" }, preCompactHook: { url: hook.url, timeoutMs: 5_000 } } })
    })), 120_000)
})
