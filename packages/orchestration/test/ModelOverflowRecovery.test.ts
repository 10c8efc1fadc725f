/**
 * Issue "Real model providers", acceptance: "a turn that overflows and is recovered (deferral, or compaction and one
 * retry)", with a real adapter. A thread's history is built on a scripted provider and switched to an Anthropic
 * Messages adapter (a loopback server plays the model) whose real window is smaller than it declares: the first
 * request, which carries the injected history, is answered with Anthropic's real overflow error naming its size.
 * The injected block is in the lane's message list for good, so retrying there would repeat the rejected request
 * byte for byte (found by this test: the retry went to the same list and was identical, 37,178 bytes). Baton
 * replaces the native thread and retries once with the history deferred (a pointer beside the prompt, unchanged);
 * the run completes and nothing owed is lost.
 */
import { type ProviderInstance } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { InvariantChecks } from "@baton/orchestration"
import { ScriptedProvider } from "@baton/providers"
import { answer, scriptedCodex } from "./support/ModelLoopback.js"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adapterFor, countTokensReply, httpLayer, json, loopback, sqliteFile } from "../../providers/test/support/Loopback.js"

const kind = "anthropic-messages" as const
const counter = TokenCounter.make()


/** The user's text blocks of the last message of a request body, and whether it carried a history block. */
const lastUserTexts = (body: string): ReadonlyArray<string> => {
  const messages = (JSON.parse(body) as { messages: ReadonlyArray<{ role: string; content: string | ReadonlyArray<{ type: string; text?: string }> }> }).messages
  const last = messages[messages.length - 1]!
  return typeof last.content === "string" ? [last.content] : last.content.flatMap((c) => c.type === "text" ? [c.text ?? ""] : [])
}

// it.live: the adapter's retries and timeouts sleep on the real clock.
describe("context overflow through a real adapter", () => {
  it.live("the request carrying injected history is rejected as too long; Baton retries once on a replacement native thread, the prompt unchanged", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const model = yield* adapterFor(kind, loop, file, {}, { instance: "anthropic" as ProviderInstance })
      const script = ScriptedProvider.makeScript()
      const codex = scriptedCodex(script, counter)
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const t = yield* o.create("codex")
        for (let i = 1; i <= 6; i++) {
          script.enqueue({ items: [Harness.produced("assistant_message", `answer ${i}: ${Harness.words(1_000)}`)] })
          yield* o.send(t, `question ${i}`)
        }
        yield* o.switchTo(t, "anthropic")
        const prompt = "Summarise where we are — in one line, please."
        loop.enqueue(
          countTokensReply((text) => counter.count(text)),
          countTokensReply((text) => counter.count(text)),
          // Anthropic's real error body for a request over the window (../shared/provider-fixtures SOURCES.md).
          json(400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 212345 tokens > 200000 maximum"}}`),
          answer("We are on question 7.")
        )
        const run = yield* o.send(t, prompt)

        expect(run.status).toBe("completed")
        const turns = loop.requests.filter((r) => r.url === "/v1/messages")
        expect(turns.length).toBe(2)
        // Both requests end with the prompt, byte for byte; the first carried the injected history.
        expect(lastUserTexts(turns[0]!.body).at(-1)).toBe(prompt)
        expect(lastUserTexts(turns[1]!.body).at(-1)).toBe(prompt)
        expect(turns[0]!.body).toContain("conversation_history")
        // The retry carries no history: it is deferred on the replacement (a pointer says how to read it).
        expect(turns[1]!.body).not.toContain("conversation_history")
        expect(turns[1]!.body).toContain("deferred_history")
        expect(turns[1]!.body.length).toBeLessThan(turns[0]!.body.length / 4)

        // Recorded: the overflow and its recovery; the retry went to a replacement native thread (a fresh message
        // list owed the history again), not to the list that keeps the rejected block.
        const events = yield* o.store.listEvents(t)
        expect(events.filter((e) => e.type === "context.overflowed").map((e) => e.payload.recovery)).toEqual(["replace_native_thread"])
        const started = events.filter((e) => e.type === "native_thread.started").map((e) => e.payload as { nativeThreadId: string; generation: number })
        expect(started.map((e) => e.generation)).toEqual([1, 1, 2])
        const runs = yield* o.store.listRuns(t)
        expect(runs.find((r) => r.id === run.runId)?.nativeThreadId).toBe(started[2]!.nativeThreadId)
        // Nothing owed is lost: whatever the replacement did not receive is still owed.
        const items = yield* o.store.listItems(t)
        const delivered = new Set((yield* o.store.listDeliveriesOfThread(t)).filter((d) => d.status === "injected" || d.status === "inline").flatMap((d) => d.deliveredItemIds))
        const owed = new Set((yield* o.store.listHandoffs(t)).filter((h) => h.open).flatMap((h) => h.itemIds))
        for (const item of items.filter((i) => i.runId !== run.runId)) expect(delivered.has(item.id) || owed.has(item.id)).toBe(true)
        // The invariants, with what each side received (the model's turn once: the retry, the one it accepted).
        const seen = codex.received
        expect(yield* InvariantChecks.check(t, {
          observed: {
            turns: [...seen.flatMap((r) => r.type === "turn" ? [r] : []), { runId: run.runId, prompt, nativeRef: "model" }],
            injections: seen.flatMap((r) => r.type === "inject" ? [r] : [])
          }
        })).toEqual([])
      }).pipe(Effect.provide(Harness.makeLayer([codex, model], counter, file, {})))
    }).pipe(Effect.provide(httpLayer), Effect.scoped), { timeout: 60_000 })

  it.live("an overflow on every attempt: history is never sent again after the first overflow, and the run fails as a typed overflow once an empty native thread proves the prompt alone cannot fit", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const model = yield* adapterFor(kind, loop, file, {}, { instance: "anthropic" as ProviderInstance })
      const script = ScriptedProvider.makeScript()
      const codex = scriptedCodex(script, counter)
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const t = yield* o.create("codex")
        for (let i = 1; i <= 6; i++) {
          script.enqueue({ items: [Harness.produced("assistant_message", `answer ${i}: ${Harness.words(1_000)}`)] })
          yield* o.send(t, `question ${i}`)
        }
        yield* o.switchTo(t, "anthropic")
        const prompt = "Summarise where we are — in one line, please."
        const tooLong = () => json(400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 212345 tokens > 200000 maximum"}}`)
        loop.enqueue((r) => r.url.endsWith("/count_tokens") ? countTokensReply((text) => counter.count(text))(r) : tooLong())
        for (let i = 0; i < 8; i++) loop.enqueue((r) => r.url.endsWith("/count_tokens") ? countTokensReply((text) => counter.count(text))(r) : tooLong())
        const run = yield* o.send(t, prompt)

        const turns = loop.requests.filter((r) => r.url === "/v1/messages")
        expect(turns[0]!.body).toContain("conversation_history")
        // After the first overflow, no request re-sends the history the provider already refused.
        expect(turns.slice(1).map((r) => r.body.includes("conversation_history"))).toEqual(turns.slice(1).map(() => false))
        // 1: injected history (replaced); 2: the prompt and a deferral pointer on the replacement, which holds
        // nothing: the size the provider gave less the pointer is still over the window, so the prompt alone would be
        // refused too and is not sent (it was, as a third request, before the rejection's floor counted); retrying
        // cannot help, the run fails as a typed overflow.
        expect(turns.length).toBe(2)
        expect(run.status).toBe("failed")
        const runs = yield* o.store.listRuns(t)
        const failed = runs.find((r) => r.id === run.runId)!
        expect(failed.failureCode).toBe("overflow")
        expect(failed.failureReason).toContain("the prompt alone does not fit the model's context window on an empty native thread")
      }).pipe(Effect.provide(Harness.makeLayer([codex, model], counter, file, {})))
    }).pipe(Effect.provide(httpLayer), Effect.scoped), { timeout: 60_000 })
})
