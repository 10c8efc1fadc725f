/**
 * Issue "Real model providers", item 1: Anthropic's `count_tokens` calibrates a new provider instance before its
 * first turn. A loopback server plays Anthropic with a tokenizer that counts 1.2 of its tokens per Baton token plus
 * a fixed framing, so the right ratio is known; the first turn on the instance is budgeted with it.
 */
import { type ProviderInstance } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { ScriptedProvider } from "@baton/providers"
import { answer, scriptedCodex } from "./support/ModelLoopback.js"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adapterFor, countTokensReply, httpLayer, json, loopback, type Received, sqliteFile } from "../../providers/test/support/Loopback.js"

const kind = "anthropic-messages" as const
const counter = TokenCounter.make()
/** The loopback model's tokens per Baton token, and what every request costs besides its message. */
const trueRatio = 1.2
const framing = 17

/** The text of a count request's only message. */
const messageText = (request: Received): string => {
  const content = (JSON.parse(request.body) as { messages: ReadonlyArray<{ content: string | ReadonlyArray<{ text: string }> }> }).messages[0]!.content
  return typeof content === "string" ? content : content.map((c) => c.text).join("")
}

/** `count_tokens` as the loopback model counts. */
const countReply = countTokensReply((text) => Math.round(trueRatio * counter.count(text)), framing)


const setup = Effect.gen(function*() {
  const loop = yield* loopback
  const file = yield* sqliteFile
  const model = yield* adapterFor(kind, loop, file, {}, { instance: "anthropic" as ProviderInstance })
  const script = ScriptedProvider.makeScript()
  const codex = scriptedCodex(script, counter)
  return { loop, script, layer: Harness.makeLayer([codex, model], counter, file, {}) }
})

// it.live: the adapter's retries and timeouts sleep on the real clock.
describe("count_tokens calibration", () => {
  it.live("a new Anthropic instance is calibrated from count_tokens before its first turn, once", () =>
    Effect.gen(function*() {
      const { layer, loop, script } = yield* setup
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const t = yield* o.create("codex")
        for (let i = 1; i <= 4; i++) {
          script.enqueue({ items: [Harness.produced("assistant_message", `answer ${i}: ${Harness.words(800)}`)] })
          yield* o.send(t, `question ${i}`)
        }
        yield* o.switchTo(t, "anthropic")
        loop.enqueue(countReply, countReply, answer("ok"))
        const first = yield* o.send(t, "go on")
        expect(first.status).toBe("completed")

        // Two count requests (the sample and a one-character request) came before the first turn's request.
        expect(loop.requests.map((r) => r.url)).toEqual(["/v1/messages/count_tokens", "/v1/messages/count_tokens", "/v1/messages"])
        const counted = loop.requests.slice(0, 2).map(messageText).sort((a, b) => b.length - a.length)
        expect(counted[1]).toBe(".")
        expect(counted[0]).toContain("answer 4: ")
        expect(counted[0]!.endsWith("go on")).toBe(true)

        // The ratio learned is the loopback's (framing cancels out), within rounding, and the turn was budgeted with it.
        const calibration = yield* o.store.getCalibration("anthropic" as ProviderInstance)
        expect(calibration._tag).toBe("Some")
        if (calibration._tag === "Some") {
          expect(calibration.value.samples).toBe(1)
          expect(Math.abs(calibration.value.ratio - trueRatio)).toBeLessThan(0.002)
        }
        expect(first.turnStart?.calibrationRatio).toBeCloseTo(trueRatio, 2)
        const updated = (yield* o.store.listEvents(t)).filter((e) => e.type === "calibration.updated" && e.payload.providerInstance === "anthropic")
        expect(updated.length).toBe(1)
        const sample = updated[0]!.payload as { estimatedTokens: number; reportedTokens: number }
        expect(sample.reportedTokens).toBe(Math.round(trueRatio * counter.count(counted[0]!)) - Math.round(trueRatio * counter.count(".")))

        // Calibrated: the next turn asks for no count.
        loop.enqueue(answer("still ok"))
        const second = yield* o.send(t, "and then?")
        expect(second.status).toBe("completed")
        expect(loop.requests.filter((r) => r.url.endsWith("count_tokens")).length).toBe(2)
      }).pipe(Effect.provide(layer))
    }).pipe(Effect.provide(httpLayer), Effect.scoped), { timeout: 60_000 })

  it.live("a count_tokens that fails teaches nothing and delays nothing but itself: the turn completes", () =>
    Effect.gen(function*() {
      const { layer, loop, script } = yield* setup
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const t = yield* o.create("codex")
        script.enqueue({ items: [Harness.produced("assistant_message", Harness.words(800))] })
        yield* o.send(t, "question")
        yield* o.switchTo(t, "anthropic")
        const refused = json(400, `{"type":"error","error":{"type":"invalid_request_error","message":"count_tokens is not supported"}}`)
        loop.enqueue(refused, refused, answer("ok"))
        const run = yield* o.send(t, "go on")
        expect(run.status).toBe("completed")
        expect(run.turnStart?.calibrationRatio).toBe(1)
        expect((yield* o.store.getCalibration("anthropic" as ProviderInstance))._tag).toBe("None")
      }).pipe(Effect.provide(layer))
    }).pipe(Effect.provide(httpLayer), Effect.scoped), { timeout: 60_000 })
})
