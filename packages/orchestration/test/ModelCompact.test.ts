/**
 * `/compact` on a thread whose active provider is a model API (a loopback server plays Anthropic Messages), and the
 * `stillDeferred` figure of every `/compact` report.
 *
 * Found by a fresh-tester review: `/compact` there was refused ("cannot compact natively") while the history a switch
 * owed the lane stayed deferred, and reports said `stillDeferred: 0` whatever was still owed. Now the deferred history
 * is injected into the lane as far as the window allows, keeping `maxOutputTokens` free for the next answer, the
 * report says `compacted: false` with what was delivered and what to do to free room (`/offload`), and `stillDeferred`
 * is the number of deliveries left deferred.
 */
import type { ProviderInstance, ThreadId } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { ScriptedProvider } from "@baton/providers"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adapterFor, countTokensReply, httpLayer, loopback, sqliteFile } from "../../providers/test/support/Loopback.js"
import { answer, scriptedCodex } from "./support/ModelLoopback.js"

const kind = "anthropic-messages" as const
const counter = TokenCounter.make()

/** Three runs of about 1,000 tokens each on `codex`, then a switch to `anthropic`. */
const historyThenSwitch = (script: ScriptedProvider.Script) =>
  Effect.gen(function*() {
    const o = yield* Harness.ops
    const t = yield* o.create("codex")
    for (let i = 1; i <= 3; i++) {
      script.enqueue({ items: [Harness.produced("assistant_message", `answer ${i}: ${Harness.words(1_000)}`)] })
      yield* o.send(t, `question ${i}`)
    }
    yield* o.switchTo(t, "anthropic")
    return t
  })

/** Deliveries of `t` still deferred. */
const deferredOf = (t: ThreadId) =>
  Effect.flatMap(Harness.ops, (o) => Effect.map(o.store.listDeliveriesOfThread(t), (ds) => ds.filter((d) => d.status === "deferred").length))

describe("/compact on a model-API lane", () => {
  // A 17,000-token window is below the turn-start reserve (16,000) plus the minimum useful budget: the switch's
  // history is deferred at every turn start, and only /compact (physical headroom) can bring it in.
  it.live("injects the deferred history into the message list, keeping maxOutputTokens free; the next request carries it", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const model = yield* adapterFor(kind, loop, file, { contextWindow: 17_000, autoCompactThreshold: null, maxOutputTokens: 4_096 }, {
        instance: "anthropic" as ProviderInstance
      })
      const script = ScriptedProvider.makeScript()
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const t = yield* historyThenSwitch(script)
        loop.enqueue(countTokensReply((text) => counter.count(text)), countTokensReply((text) => counter.count(text)), answer("first", 900))
        const first = yield* o.send(t, "hello")
        expect(first.status).toBe("completed")
        expect([first.turnStart?.mode, first.turnStart?.deliveredItems]).toEqual(["none", 0])
        expect(yield* deferredOf(t)).toBe(1)

        const report = yield* o.compact(t)
        expect([report.compacted, report.reasonCode]).toEqual([false, "not_supported"])
        expect(report.deliveredItems).toBe(6)
        expect(report.omittedItems).toBe(0)
        expect(report.stillDeferred).toBe(0)
        expect(report.usedBefore).toBe(912)
        expect(report.usedAfter).toBeGreaterThan(3_000)
        expect(report.reason).toContain("anthropic cannot compact natively")
        expect(report.reason).toContain("/offload")
        expect(yield* deferredOf(t)).toBe(0)
        const injected = (yield* o.store.listEvents(t)).filter((e) => e.type === "delivery.injected")
        expect(injected.length).toBe(1)

        // The next request carries the injected block, then the prompt alone (no new deferral pointer).
        loop.enqueue(answer("second", 4_200))
        const second = yield* o.send(t, "go on")
        expect(second.status).toBe("completed")
        const last = JSON.parse(loop.requests.filter((r) => r.url === "/v1/messages").at(-1)!.body) as {
          messages: ReadonlyArray<{ role: string; content: ReadonlyArray<{ text?: string }> }>
        }
        const texts = last.messages.map((m) => m.content.map((c) => c.text ?? "").join(""))
        expect(texts.at(-1)).toBe("go on")
        expect(texts.at(-2)).toMatch(/^<conversation_history [^]*\[assistant #6\]\nanswer 3: alpha/)
      }).pipe(Effect.provide(Harness.makeLayer([scriptedCodex(script, counter), model], counter, file, {})))
    }).pipe(Effect.provide(httpLayer), Effect.scoped), { timeout: 60_000 })

  it.live("history that does not fit beside the next answer stays deferred, and the report counts it", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      // maxOutputTokens 16,500 of 17,000: no room for any of it.
      const model = yield* adapterFor(kind, loop, file, { contextWindow: 17_000, autoCompactThreshold: null, maxOutputTokens: 16_500 }, {
        instance: "anthropic" as ProviderInstance
      })
      const script = ScriptedProvider.makeScript()
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const t = yield* historyThenSwitch(script)
        loop.enqueue(countTokensReply((text) => counter.count(text)), countTokensReply((text) => counter.count(text)), answer("first", 900))
        expect((yield* o.send(t, "hello")).status).toBe("completed")
        const report = yield* o.compact(t)
        expect([report.compacted, report.deliveredItems, report.stillDeferred]).toEqual([false, 0, 1])
        expect(report.reason).toContain("did not fit")
        expect(yield* deferredOf(t)).toBe(1)
      }).pipe(Effect.provide(Harness.makeLayer([scriptedCodex(script, counter), model], counter, file, {})))
    }).pipe(Effect.provide(httpLayer), Effect.scoped), { timeout: 60_000 })
})

describe("/compact's stillDeferred", () => {
  it.live("before the lane's first turn, the handoff a switch left open is counted (it was reported as 0)", () =>
    Effect.gen(function*() {
      const script = ScriptedProvider.makeScript()
      const file = yield* sqliteFile
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const t = yield* historyThenSwitch(script)
        const report = yield* o.compact(t)
        expect(report.compacted).toBe(false)
        // Found by a newcomer's walk (b46ux): "no native thread yet: nothing to compact", silent about the handoff owed.
        expect(report.reason).toBe(
          "no native thread yet on anthropic (no turn has run on it): nothing to compact, and no thread to drain the handoff owed " +
            "to it into; its first turn starts one and delivers that history as the turn's budget allows (what does not fit stays " +
            "deferred for later turns and /compact)"
        )
        expect(report.reasonCode).toBe("no_native_thread")
        expect(report.stillDeferred).toBe(1)
      }).pipe(Effect.provide(Harness.makeLayer([
        scriptedCodex(script, counter),
        ScriptedProvider.make({ instance: "anthropic" as ProviderInstance, contextWindow: 200_000, autoCompactThreshold: null, injectHistory: true }, script, counter)
      ], counter, file, {})))
    }).pipe(Effect.scoped))
})
