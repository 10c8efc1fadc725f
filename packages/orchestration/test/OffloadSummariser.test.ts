/**
 * `/offload` against a summariser with a truth of its own (issue "Truthful under concurrency", items 4 and 5): a
 * finite input window it enforces, answers longer than what it was given. A history larger than the window is
 * summarised in chunks that fit; a summary that is not smaller than what it replaces is refused and nothing changes.
 */
import { OffloadFailed } from "@baton/contracts"
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"

const ops = Harness.ops

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  /** Ten runs of a 200-token prompt and a 1,500-token answer: about 17,000 tokens of history. */
  const history = (h: Harness.Harness) =>
    Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      for (let i = 0; i < 10; i++) {
        h.script.enqueue(Harness.reply(1_500))
        yield* o.send(t, `${i}: ${Harness.words(200)}`)
      }
      return t
    })

  describe("/offload and the summariser's window", () => {
    it.effect("a history four times the summariser's 4,000-token window is summarised in chunks that each fit", () => {
      const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }], { summariser: { inputWindow: 4_000 } })
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* history(h)
        const report = yield* o.offload(t, 2_000)
        expect(report.offloaded).toBe(true)
        expect(report.coveredTokens).toBeGreaterThan(12_000)
        const calls = h.summariser.calls
        expect(calls.length).toBeGreaterThanOrEqual(4)
        for (const call of calls) {
          const input = (call.previousSummary === null ? 0 : h.counter.count(call.previousSummary)) +
            call.items.reduce((n, i) => n + i.tokens, 0)
          expect(input).toBeLessThanOrEqual(4_000)
        }
        // Each call refines the summary so far; together they cover every covered item once, in order.
        expect(calls[0]!.previousSummary).toBeNull()
        const covered = (yield* o.store.listItems(t)).filter((i) => i.seq <= report.cutSeq!).map((i) => i.id)
        expect(calls.flatMap((c) => c.items.map((i) => i.id))).toEqual(covered)
        expect(yield* o.check(t, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })

    it.effect("an item larger than the window alone is given to the summariser clipped; the original stays whole", () => {
      const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }], { summariser: { inputWindow: 1_000 } })
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* o.create("codex")
        h.script.enqueue(Harness.reply(3_000))
        yield* o.send(t, "print the log")
        h.script.enqueue(Harness.reply(20))
        yield* o.send(t, "thanks")
        h.script.enqueue(Harness.reply(300))
        yield* o.send(t, "what next?")
        const report = yield* o.offload(t, 300)
        expect(report.offloaded).toBe(true)
        const big = (yield* o.store.listItems(t))[1]!
        const given = h.summariser.calls.flatMap((c) => c.items).find((i) => i.id === big.id)!
        expect(given.text).toMatch(new RegExp(`\\[… \\d+ characters left out for the summary; the original is readable with thread_read #${big.seq}\\]$`))
        expect(given.tokens).toBeLessThanOrEqual(1_000)
        expect(big.text).toBe(Harness.words(3_000))
      }).pipe(Effect.provide(h.layer))
    })
  })

  describe("/offload of a history smaller than its summary", () => {
    it.effect("a no-op that says so (not an error to retry): nothing written", () => {
      const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }])
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* o.create("codex")
        h.script.enqueue(Harness.reply(1))
        yield* o.send(t, "hi")
        h.script.enqueue(Harness.reply(1))
        yield* o.send(t, "ok")
        const report = yield* o.offload(t, 5)
        expect(report.offloaded).toBe(false)
        expect(report.reason).toMatch(/^nothing worth offloading: the \d+ tokens before the cut are fewer than their summary \(\d+ tokens\)$/)
        expect(yield* o.store.listOffloads(t)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })
  })

  describe("/offload and a verbose summariser", () => {
    it.effect("a summary longer than what it replaces is refused: OffloadFailed, nothing changed; the next answer is applied", () => {
      let verbose = true
      const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }], { summariser: { verbose: () => verbose } })
      return Effect.gen(function*() {
        const o = yield* ops
        const t = yield* history(h)
        const before = yield* o.service.visibleHistory(t)
        const refused = yield* Effect.either(o.offload(t, 2_000))
        expect(Either.isLeft(refused)).toBe(true)
        const error = Either.isLeft(refused) ? refused.left : null
        expect(error).toBeInstanceOf(OffloadFailed)
        expect(error instanceof OffloadFailed && error.reason).toMatch(
          /^the summariser answered with \d+ tokens for the \d+ tokens it was to replace: a summary must be smaller than what it replaces, so it was not applied$/
        )
        expect(error instanceof OffloadFailed && error.retryable).toBe(true)
        expect(yield* o.store.listOffloads(t)).toEqual([])
        expect((yield* o.service.visibleHistory(t)).items.map((i) => i.id)).toEqual(before.items.map((i) => i.id))
        verbose = false
        const report = yield* o.offload(t, 2_000)
        expect(report.offloaded).toBe(true)
        expect(report.summaryTokens).toBeLessThan(report.coveredTokens)
        expect(yield* o.check(t, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })
  })
})
