/**
 * Baton against the provider's truth (issue "Truthful under concurrency", items 1, 2 and 5): scripted providers that
 * count in their own units and enforce their windows, the oracle `ProviderTruthChecks`, and the mechanisms it guards.
 * Each oracle property is also shown catching a deliberately broken build (`OrchestratorConfig.mutations`), so it
 * cannot pass vacuously.
 */
import type { NativeThread, ProviderThread, ThreadEvent, ThreadId } from "@baton/contracts"
import { type OrchestratorConfig, ProviderTruthChecks } from "@baton/orchestration"
import { ProviderFailure } from "@baton/providers"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

const ops = Harness.ops

const truthOf = (h: Harness.Harness, threadId: ThreadId) =>
  ProviderTruthChecks.check(threadId, Object.values(h.providers).map((p) => p.truth))

const harness = (
  provider: Partial<Harness.HarnessProvider>,
  mutations: ReadonlyArray<OrchestratorConfig.Mutation> = []
) =>
  Harness.make([{ name: "codex", window: 4_000, inject: true, ...provider }], { config: { mutations: new Set(mutations) } })

describe("ProviderFailure: an overflow signalled only by text", () => {
  it("reads the sizes of the field's messages", () => {
    expect(ProviderFailure.overflowOf("prompt is too long: 208310 tokens > 200000 maximum")).toEqual({
      requestedTokens: 208_310,
      maximumTokens: 200_000
    })
    expect(ProviderFailure.overflowOf(
      "This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens. Please reduce the length of the messages."
    )).toEqual({ requestedTokens: 8_227, maximumTokens: 8_192 })
    expect(ProviderFailure.overflowOf("error code: context_length_exceeded")).toEqual({ requestedTokens: null, maximumTokens: null })
    expect(ProviderFailure.overflowOf("the request exceeds the available context size, try increasing it")).toEqual({ requestedTokens: null, maximumTokens: null })
    expect(ProviderFailure.overflowOf(
      "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again"
    )).toEqual({ requestedTokens: null, maximumTokens: null })
    expect(ProviderFailure.overflowOf("rate limit exceeded, retry in 20s")).toBeNull()
    expect(ProviderFailure.overflowOf("max_tokens: 300000 > 64000, which is the maximum allowed number of output tokens")).toBeNull()
  })
})

for (const signal of ["code", "text"] as const) {
  describe(`an overflow Baton could not foresee (signalled by ${signal})`, () => {
    // The provider holds a 3,000-token system prompt Baton never sees, and reports no usage: the second turn
    // overflows although Baton's own estimate says it fits. Baton must recover (a replacement native thread) and
    // never send the same request again.
    const scenario = (h: Harness.Harness) =>
      Effect.gen(function*() {
        const o = yield* ops
        const threadId = yield* o.create("codex")
        h.script.enqueue(Harness.reply(200, null))
        expect((yield* o.send(threadId, Harness.words(400))).status).toBe("completed")
        h.script.enqueue(Harness.reply(50, null))
        const second = yield* o.send(threadId, Harness.words(600))
        return { threadId, second }
      })

    it.effect("is recovered on a replacement native thread: the run completes, the prompt unchanged, no oracle violation", () => {
      const h = harness({ requestOverhead: 3_000, overflowSignal: signal })
      return Effect.gen(function*() {
        const { threadId, second } = yield* scenario(h)
        expect(second.status).toBe("completed")
        const codex = h.providers.codex!
        const rejected = codex.truth.filter((t) => !t.accepted)
        expect(rejected).toHaveLength(1)
        expect(rejected[0]!.nativeRef).toBe("codex-n1")
        const turns = codex.received.filter((r) => r.type === "turn")
        expect(turns.map((t) => t.nativeRef)).toEqual(["codex-n1", "codex-n2"])
        expect(turns[1]!.type === "turn" && turns[1]!.prompt).toBe(Harness.words(600))
        expect(yield* truthOf(h, threadId)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })
  })
}

describe("oracle: a request Baton knew would not fit", () => {
  // A turn fills the 4,000-token window (a trusted report of 3,900): the next prompt cannot fit that native thread.
  const fillThenSend = (h: Harness.Harness) =>
    Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(20, { usedTokens: 3_900, maxTokens: 4_000 }))
      yield* o.send(threadId, "fill it")
      h.script.enqueue(Harness.reply(20))
      const next = yield* o.send(threadId, Harness.words(300))
      return { threadId, next }
    })

  it.effect("a native thread reported full is replaced before the turn: nothing is rejected, no violation", () => {
    const h = harness({})
    return Effect.gen(function*() {
      const { threadId, next } = yield* fillThenSend(h)
      expect(next.status).toBe("completed")
      expect(next.nativeGeneration).toBe(2)
      expect(h.providers.codex!.truth.filter((t) => !t.accepted)).toEqual([])
      expect(yield* truthOf(h, threadId)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("mutation ignore_known_full: the request is sent to the full thread and the oracle names it", () => {
    const h = harness({}, ["ignore_known_full"])
    return Effect.gen(function*() {
      const { threadId } = yield* fillThenSend(h)
      const violations = yield* truthOf(h, threadId)
      expect(violations.length).toBeGreaterThan(0)
      expect(violations[0]).toMatch(/^truth: run \S+ was sent to codex-n1 although Baton knew it would not fit: last known usage 3900 \+ request \d+ x1\.000 = \d+ > window 4000/)
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("a prompt larger than the window alone is not sent: the run fails as an overflow saying what to do", () => {
    const h = harness({})
    return Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("codex")
      const r = yield* o.send(threadId, Harness.words(5_000))
      expect(r.status).toBe("failed")
      expect(r.failureCode).toBe("overflow")
      expect(r.failureReason).toMatch(/^the prompt alone is about \d+ tokens of codex \(\d+ counted x1\.000\), more than its 4000-token context window: it was not sent\. Shorten it, or switch the thread to a provider with a larger window$/)
      expect(h.providers.codex!.truth).toEqual([])
      expect(yield* truthOf(h, threadId)).toEqual([])
      // The thread stays usable.
      h.script.enqueue(Harness.reply(20))
      expect((yield* o.send(threadId, "shorter")).status).toBe("completed")
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("mutation ignore_known_full: the oversized prompt is sent and the oracle names it", () => {
    const h = harness({}, ["ignore_known_full"])
    return Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("codex")
      yield* o.send(threadId, Harness.words(5_000))
      const violations = yield* truthOf(h, threadId)
      expect(violations.some((v) => /^truth: run \S+ was sent to codex-n1 although Baton knew it would not fit: last known usage 0 \+ request \d+ x1\.000/.test(v))).toBe(true)
    }).pipe(Effect.provide(h.layer))
  })
})

describe("oracle: a request the provider had already rejected", () => {
  it.effect("mutation retry_overflow_on_same_native: the same request goes to the same native thread again and the oracle names it", () => {
    const h = harness({ requestOverhead: 3_000 }, ["retry_overflow_on_same_native"])
    return Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(200, null))
      yield* o.send(threadId, Harness.words(400))
      h.script.enqueue(Harness.reply(50, null))
      const second = yield* o.send(threadId, Harness.words(600))
      expect(second.status).toBe("failed")
      const violations = yield* truthOf(h, threadId)
      expect(violations[0]).toMatch(/^truth: codex-n1 was sent a startTurn request of (\d+) tokens \(window 4000\) after it already rejected one of \1 tokens, with nothing compacted in between$/)
    }).pipe(Effect.provide(h.layer))
  })
})

// What a restart does to a rejection the oracle counts (review r45, on `checkRecord` directly): a rejection whose
// `context.overflowed` Baton recorded is Baton's information after any restart; one it did not record is lost with
// the process, and counts until the restart only. The record: run r1's attempt rejected on codex-n1, then run r2 sends
// a request as large to codex-n1 (nothing compacted in between), with or without r1's event, a restart in between or
// not.
describe("oracle: a rejection and a restart", () => {
  const record = (recorded: boolean) => {
    const at = (seq: number, type: string, payload: Record<string, unknown>) => ({ seq, type, payload }) as unknown as ThreadEvent
    return {
      providerThreads: [{ id: "pt_1", providerInstance: "codex" }] as unknown as ReadonlyArray<ProviderThread>,
      nativeThreads: [{ id: "nt_1", providerThreadId: "pt_1", nativeRef: "codex-n1" }] as unknown as ReadonlyArray<NativeThread>,
      events: [
        at(1, "run.started", { runId: "r1", nativeThreadId: "nt_1", attempt: 1 }),
        ...(recorded ? [at(2, "context.overflowed", { runId: "r1", nativeThreadId: "nt_1", attempt: 1, recovery: "none", window: 4_000 })] : []),
        at(3, "run.started", { runId: "r2", nativeThreadId: "nt_1", attempt: 1 })
      ]
    }
  }
  const request = (runId: string) => ({ nativeRef: "codex-n1", operation: "startTurn", runId, tokens: 5_000, addedBatonTokens: 100, window: null, accepted: false }) as const
  const log = [request("r1"), request("r2")]
  const flagged = (recorded: boolean, restarts: ReadonlyArray<number>) => ProviderTruthChecks.checkRecord(record(recorded), [log], [restarts]).length

  it("recorded: counted after a restart; not recorded: counted without a restart, not after one", () => {
    expect([flagged(true, []), flagged(true, [1]), flagged(false, []), flagged(false, [1])]).toEqual([1, 1, 1, 0])
  })
})

describe("oracle: the calibration converges to the provider's true ratio", () => {
  // Sixteen turns of about 1,300 tokens each (a 1,000-token prompt, a 300-token answer) on a provider counting 1.2
  // of its tokens per Baton token, with a 2,000-token system prompt of its own: the learned ratio ends within 10%.
  const converse = (h: Harness.Harness) =>
    Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("codex")
      for (let i = 0; i < 16; i++) {
        h.script.enqueue(Harness.reply(300))
        yield* o.send(threadId, `${i}: ${Harness.words(1_000)}`)
      }
      return yield* ProviderTruthChecks.checkCalibration([{ instance: "codex", trueRatio: 1.2 }])
    })

  it.effect("converges: no violation, and the evidence threshold was reached", () => {
    const h = harness({ window: 1_000_000, tokenScale: 1.2, requestOverhead: 2_000 })
    return Effect.gen(function*() {
      expect(yield* converse(h)).toEqual([])
      const store = yield* Harness.ops.pipe(Effect.map((o) => o.store))
      const c = yield* store.getCalibration("codex" as never)
      expect(c._tag === "Some" && c.value.samples).toBeGreaterThanOrEqual(ProviderTruthChecks.convergence.minSamples)
      expect(c._tag === "Some" && Math.abs(c.value.ratio - 1.2)).toBeLessThan(0.12)
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("mutation sample_omits_output: the ratio learned is too high and the oracle names it", () => {
    const h = harness({ window: 1_000_000, tokenScale: 1.2, requestOverhead: 2_000 }, ["sample_omits_output"])
    return Effect.gen(function*() {
      const violations = yield* converse(h)
      expect(violations).toHaveLength(1)
      expect(violations[0]).toMatch(/^truth: the calibration of codex is \d\.\d{3} after \d+ samples \(\d+ tokens of evidence\), more than 10% from the provider's true ratio 1\.200$/)
    }).pipe(Effect.provide(h.layer))
  })
})

describe("a provider instance reconfigured between restarts", () => {
  it.live("a smaller window takes effect at the next turn start: the lane is updated with an event, the turn runs under it, nothing rejected", () =>
    Harness.withDbFile((file) =>
      Effect.gen(function*() {
        const before = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db: file })
        const threadId = yield* Effect.gen(function*() {
          const o = yield* ops
          const t = yield* o.create("codex")
          before.script.enqueue(Harness.reply(50, { usedTokens: 10_000, maxTokens: 200_000 }))
          yield* o.send(t, "before the restart")
          return t
        }).pipe(Effect.provide(before.layer))

        // The provider instance, now configured with an 8,000-token model (a new process: its sessions are gone).
        const after = Harness.make([{ name: "codex", window: 8_000, inject: true }], { db: file, idNamespace: "p2_" })
        yield* Effect.gen(function*() {
          const o = yield* ops
          after.script.enqueue(Harness.reply(20))
          const r = yield* o.send(threadId, "after the restart")
          expect(r.status).toBe("completed")
          expect(r.window).toBe(8_000)
          const [lane] = yield* o.store.listProviderThreads(threadId)
          expect(lane!.contextWindow).toBe(8_000)
          const reconfigured = (yield* o.store.listEvents(threadId)).filter((e) => e.type === "provider_thread.reconfigured")
          expect(reconfigured.map((e) => e.payload)).toEqual([{
            providerThreadId: lane!.id,
            model: "scripted-codex",
            contextWindow: 8_000,
            previousModel: "scripted-codex",
            previousContextWindow: 200_000
          }])
          expect(after.providers.codex!.truth.filter((t) => !t.accepted)).toEqual([])
          expect(yield* truthOf(after, threadId)).toEqual([])
        }).pipe(Effect.provide(after.layer))
      })
    ))
})

describe("an overflow teaches the calibration", () => {
  it.effect("the size an overflow names is a usage report: the ratio learned from it lets the retry fit", () => {
    // The provider counts 1.5 of its tokens per Baton token; Baton has learned nothing yet (ratio 1), so a
    // 2,000-token prompt looks like it fits next to the 1,560 tokens the thread reported. The provider says
    // "prompt is too long: N tokens > 4000 maximum": N teaches the ratio, and the retry (on a replacement) fits.
    const h = harness({ tokenScale: 1.5 })
    return Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(40))
      yield* o.send(threadId, Harness.words(1_000))
      h.script.enqueue(Harness.reply(20))
      const r = yield* o.send(threadId, Harness.words(2_000))
      expect(r.status).toBe("completed")
      const rejected = h.providers.codex!.truth.filter((t) => !t.accepted)
      expect(rejected).toHaveLength(1)
      const learned = (yield* o.store.listEvents(threadId)).filter((e) => e.type === "calibration.updated")
      expect(learned).toHaveLength(1)
      expect(learned[0]!.payload.reportedTokens).toBe(rejected[0]!.tokens - 1_560)
      expect(learned[0]!.payload.newRatio).toBeCloseTo(1.5, 1)
      expect(yield* truthOf(h, threadId)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })
})

// A rejection that ends the run is recorded too (review r45): the provider holds a 3,000-token system prompt Baton
// never sees; a prompt of 1,200 words overflows codex-n1, then alone the replacement codex-n2 that the run started,
// which holds nothing: the run fails. That last rejection still teaches what it proved: its `context.overflowed`
// (`none`), and codex-n2's floor (`heldAtLeast`: the system prompt, what the provider counted less the prompt).
describe("a rejection that ends the run", () => {
  it.effect("is recorded with recovery none, and the native thread that rejected it keeps its floor", () => {
    const h = harness({ requestOverhead: 3_000 })
    return Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("codex")
      h.script.enqueue(Harness.reply(200, null))
      expect((yield* o.send(threadId, Harness.words(400))).status).toBe("completed")
      const second = yield* o.send(threadId, Harness.words(1_200))
      expect([second.status, second.failureCode]).toEqual(["failed", "overflow"])
      expect(h.providers.codex!.truth.filter((t) => !t.accepted).map((t) => t.nativeRef)).toEqual(["codex-n1", "codex-n2"])
      const overflowed = (yield* o.store.listEvents(threadId)).filter((e) => e.type === "context.overflowed")
      expect(overflowed.map((e) => e.payload.recovery)).toEqual(["replace_native_thread", "none"])
      const [lane] = yield* o.store.listProviderThreads(threadId)
      const n2 = (yield* o.store.listNativeThreads(lane!.id)).find((n) => n.nativeRef === "codex-n2")!
      // Before: no floor (the run's last rejection taught nothing).
      expect(n2.heldAtLeast).toBeGreaterThanOrEqual(2_900)
      expect(yield* truthOf(h, threadId)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })
})

describe("oracle: a compaction's outcome and a run retried after a restart", () => {
  // Run r1's first attempt reached the provider before the compaction and reported 10,000; the process restarted
  // before the run ended; /compact compacted (to 2,000, which it recorded); r1's second attempt ran after it. The
  // provider took r1's second turn after compacting, but that turn is the later attempt's, not one the compaction
  // raced: 2,000 was right. Review r46: `checkCompactionOrderRecord` read the first attempt's report as the raced turn's.
  const at = (seq: number, type: string, payload: Record<string, unknown>) => ({ seq, type, payload }) as unknown as ThreadEvent
  const record = (retried: boolean) => ({
    nativeThreads: [{ id: "nt_1", providerThreadId: "pt_1", nativeRef: "codex-n1" }] as unknown as ReadonlyArray<NativeThread>,
    events: [
      at(1, "run.started", { runId: "r1", nativeThreadId: "nt_1", attempt: 1 }),
      at(2, "usage.reported", { nativeThreadId: "nt_1", trusted: true, usage: { usedTokens: 10_000 } }),
      at(3, "thread.compacted", { nativeThreadId: "nt_1", usedBefore: 10_000, usedAfter: 2_000, delivered: 0 }),
      ...(retried ? [at(4, "run.started", { runId: "r1", nativeThreadId: "nt_1", attempt: 2 })] : [])
    ]
  })
  const received = [
    { type: "turn", nativeRef: "codex-n1", runId: "r1", prompt: "p", inlineHistory: null },
    { type: "compact", nativeRef: "codex-n1", usedBefore: 10_000, usedAfter: 2_000 },
    { type: "turn", nativeRef: "codex-n1", runId: "r1", prompt: "p", inlineHistory: null }
  ] as const

  it("no violation for the retried run's later attempt; the same log without the retry is still a race the oracle names", () => {
    expect(ProviderTruthChecks.checkCompactionOrderRecord(record(true), [received])).toEqual([])
    expect(ProviderTruthChecks.checkCompactionOrderRecord(record(false), [received])).toHaveLength(1)
  })
})

describe("oracle: an /offload frees the lane that goes on", () => {
  // Four turns of ~600 tokens on one lane, an /offload keeping ~700 tokens verbatim, then the next turn.
  const offloadThenSend = (h: Harness.Harness) =>
    Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("codex")
      for (let i = 0; i < 4; i++) {
        h.script.enqueue(Harness.reply(20))
        yield* o.send(threadId, `Step ${i}: ${Harness.words(450)}`)
      }
      const report = yield* o.offload(threadId, 700)
      expect(report.outcome).toBe("offloaded")
      h.script.enqueue(Harness.reply(20))
      const next = yield* o.send(threadId, "go on")
      expect(next.status).toBe("completed")
      return { threadId, report }
    })
  const laneOf = (h: Harness.Harness, threadId: ThreadId) =>
    ProviderTruthChecks.checkOffloadFreesLane(threadId, Object.values(h.providers).map((p) => p.received))

  it.effect("the next turn runs on a new native thread given the summary, not the originals: no violation", () => {
    const h = harness({ window: 200_000 })
    return Effect.gen(function*() {
      const { threadId, report } = yield* offloadThenSend(h)
      const received = h.providers.codex!.received
      const turns = received.flatMap((r) => r.type === "turn" ? [r.nativeRef] : [])
      expect(new Set(turns.slice(0, 4)).size).toBe(1)
      expect(turns[4]).not.toBe(turns[0])
      // The new native thread was given the summary (and the kept items), not the items it covers.
      const given = received.flatMap((r) => r.type === "inject" && r.nativeRef === turns[4] ? r.itemIds : [])
      expect(given).toContain(report.summaryItemId)
      for (const id of report.coveredItemIds) expect(given).not.toContain(id)
      expect(yield* laneOf(h, threadId)).toEqual([])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("mutation offload_keeps_lane: the next turn goes on the native thread holding the originals and the oracle names it", () => {
    const h = harness({ window: 200_000 }, ["offload_keeps_lane"])
    return Effect.gen(function*() {
      const { threadId } = yield* offloadThenSend(h)
      const violations = yield* laneOf(h, threadId)
      expect(violations).toHaveLength(1)
      expect(violations[0]).toMatch(/^truth: run \S+, the first after offload \S+ \(items up to seq \d+ summarised\), went to codex-n1, which still holds what the summary replaced \(run \S+\)$/)
    }).pipe(Effect.provide(h.layer))
  })
})
