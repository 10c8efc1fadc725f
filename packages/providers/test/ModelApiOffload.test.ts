/**
 * Tool-result offload on a stateless provider's message list (issue 11 item 3(a)): an Anthropic native thread over a
 * loopback HTTP server with 60 tool rounds. Each request extends the previous one except at the reported flushes;
 * the stubs are stored in the log, so a restarted adapter sends the same prefix.
 */
import { TokenCounter, ToolResultOffload } from "@baton/context"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import type { ProviderInstance } from "@baton/contracts"
import { type OffloadFlush, offloadReport } from "../src/ModelApiAdapter.js"
import type { TurnEvent } from "../src/ProviderAdapter.js"
import { adapterFor, collect, fixtureLines, frame, httpLayer, loopback, sqliteFile, sse } from "./support/Loopback.js"

const kind = "anthropic-messages" as const
const recordedId = "toolu_01QE1WLsSVp5hy5Q3GmGTmjP"
/** The recorded tool-call answer, its call id made unique per round. */
const toolReply = (round: number) =>
  sse(frame(kind, fixtureLines("anthropic/anthropic-tool-no-args.chunks.txt").map((l) => l.replace(recordedId, `toolu_r${round}`))))
const textReply = () => sse(frame(kind, fixtureLines("anthropic/anthropic-text.chunks.txt")))
const tools = [{ name: "updateIssueList", description: "Updates the issue list.", inputSchema: { type: "object", properties: {} } }]
/** A tool output of about 2,000 tokens, different per round. */
const output = (round: number) => Array.from({ length: 200 }, (_, i) => `round ${round} line ${i}: issue #${round * 1000 + i} is open`).join("\n")

/** The `messages` of a request body, cache markers removed (breakpoints move by design; the content must not). */
const messagesOf = (body: string): Array<string> => {
  const parsed = JSON.parse(body) as { messages: Array<unknown> }
  return parsed.messages.map((m) => JSON.stringify(m, (key, value: unknown) => key === "cache_control" ? undefined : value))
}
const firstDifference = (a: ReadonlyArray<string>, b: ReadonlyArray<string>) => {
  let k = 0
  while (k < a.length && k < b.length && a[k] === b[k]) k++
  return k
}

describe("ModelApiAdapter tool-result offload", () => {
  it.scoped("60 tool rounds: requests extend the previous prefix except at the reported flushes; stubs carry thread_read refs and survive a restart", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const counter = TokenCounter.make()
      const flushes: Array<OffloadFlush> = []
      const offload = { count: counter.count, onFlush: (f: OffloadFlush) => void flushes.push(f) }
      const adapter = yield* adapterFor(kind, loop, file, {}, { offload })
      const { nativeRef } = yield* adapter.startThread()
      const rounds = 60
      loop.enqueue(toolReply(1))
      yield* collect(adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Keep the issue list current.", inlineHistory: null, tools }))
      const flushedBefore: Array<number> = [0]
      const reported: Array<TurnEvent> = []
      for (let round = 1; round <= rounds; round++) {
        loop.enqueue(round < rounds ? toolReply(round + 1) : textReply())
        const { events, exit } = yield* collect(adapter.continueTurn!({
          nativeRef,
          runId: "run-1",
          toolResults: [{ toolCallId: `toolu_r${round}`, output: output(round), isError: false }],
          tools
        }))
        expect(Exit.isSuccess(exit)).toBe(true)
        flushedBefore.push(flushes.length)
        // A flush is reported in the turn's stream too, first, before the items of the request it was made for.
        const offloaded = events.filter((e) => e._tag === "context_offloaded")
        expect(offloaded.length).toBe(flushes.length - flushedBefore[round - 1]!)
        if (offloaded.length > 0) expect(events[0]!._tag).toBe("context_offloaded")
        reported.push(...offloaded)
      }
      expect(loop.requests).toHaveLength(rounds + 1)

      // Request i extends request i - 1 unless a flush came between them, and then it changes from the first stub on.
      const requests = loop.requests.map((r) => messagesOf(r.body))
      let breaks = 0
      for (let i = 1; i < requests.length; i++) {
        const k = firstDifference(requests[i - 1]!, requests[i]!)
        const flushed = flushedBefore[i]! > flushedBefore[i - 1]!
        if (flushed) {
          breaks++
          expect(k).toBeLessThan(requests[i - 1]!.length)
          expect(requests[i]![k]).toContain("[offloaded, thread_read tool:toolu_r")
        } else {
          expect(k).toBe(requests[i - 1]!.length)
        }
      }
      expect(flushes.length).toBeGreaterThan(0)
      expect(breaks).toBe(flushes.length)
      expect(reported.map((e) => e._tag === "context_offloaded" ? e.flush : null)).toEqual(flushes.map((f) => offloadReport(`test-${kind}` as ProviderInstance, f)))
      // Batched: far fewer flushes than rounds, every flush a mild one that pays for its rewrite.
      expect(flushes.length).toBeLessThan(rounds / 5)
      for (const f of flushes) {
        expect(f.decision.tier).toBe("mild")
        expect(f.decision.expectedSavings).toBeGreaterThan(f.decision.rewriteCost)
        expect(f.decision.tokensAfter).toBeLessThan(f.decision.tokensBefore)
      }

      // Every stubbed call's result is a one-line stub naming its ref; the 3 newest units stay verbatim.
      const last = requests.at(-1)!.join("\n")
      const stubbedRefs = flushes.flatMap((f) => f.refs)
      for (const ref of stubbedRefs) expect(last).toContain(`thread_read ${ref}]`)
      for (let round = rounds - ToolResultOffload.defaults.keepNewestUnits + 1; round <= rounds; round++) {
        expect(last).toContain(`round ${round} line 199`)
      }
      const lastBody = loop.requests.at(-1)!.body.length
      const unmanaged = rounds * output(1).length
      expect(lastBody).toBeLessThan(unmanaged / 2)

      // A restarted adapter on the same file renders the stubbed prefix, then appends the new turn.
      const restarted = yield* adapterFor(kind, loop, file, {}, { offload })
      yield* restarted.resumeThread(nativeRef)
      loop.enqueue(textReply())
      yield* collect(restarted.startTurn({ nativeRef, runId: "run-2", prompt: "Thanks.", inlineHistory: null, tools }))
      const afterRestart = messagesOf(loop.requests.at(-1)!.body)
      expect(firstDifference(requests.at(-1)!, afterRestart)).toBe(requests.at(-1)!.length)
    }).pipe(Effect.provide(httpLayer)))
})

describe("ModelApiAdapter tool-result offload: dry run and undo (issue 11 item 5)", () => {
  it.scoped("the dry run stores nothing; undo brings the newest flush's originals back once, for good, across a restart", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const counter = TokenCounter.make()
      const flushes: Array<OffloadFlush> = []
      const offload = { count: counter.count, onFlush: (f: OffloadFlush) => void flushes.push(f) }
      const adapter = yield* adapterFor(kind, loop, file, {}, { offload })
      const capability = adapter.toolResultOffload!
      const { nativeRef } = yield* adapter.startThread()
      let round = 0
      const rounds = (count: number) =>
        Effect.gen(function*() {
          for (let k = 0; k < count; k++) {
            round++
            loop.enqueue(toolReply(round))
            const { exit } = yield* collect(round === 1
              ? adapter.startTurn({ nativeRef, runId: "run-1", prompt: "Keep the issue list current.", inlineHistory: null, tools })
              : adapter.continueTurn!({ nativeRef, runId: "run-1", toolResults: [{ toolCallId: `toolu_r${round - 1}`, output: output(round - 1), isError: false }], tools }))
            expect(Exit.isSuccess(exit)).toBe(true)
          }
        })
      const stubbed = (body: string, r: number) => body.includes(`thread_read tool:toolu_r${r}]`)
      const verbatim = (body: string, r: number) => body.includes(`round ${r} line 199`)

      // Nothing flushed yet: nothing to undo; the preview of a young thread stubs nothing.
      yield* rounds(2)
      expect(yield* capability.undo(nativeRef)).toEqual({ nativeRef, undone: false, flushSeq: null, entrySeqs: [], reason: "no flush on this native thread to undo" })
      const young = yield* capability.preview(nativeRef)
      expect(young).toMatchObject({ enabled: true, units: [], entrySeqs: [], stubbedEntries: 0 })

      yield* rounds(30)
      expect(flushes.length).toBeGreaterThanOrEqual(2)
      const requestsBefore = loop.requests.length
      const preview = yield* capability.preview(nativeRef)
      expect(yield* capability.preview(nativeRef)).toEqual(preview)
      expect(loop.requests.length).toBe(requestsBefore)
      expect(preview.enabled).toBe(true)
      expect(preview.stubbedEntries).toBe(flushes.reduce((n, f) => n + f.entrySeqs.length, 0))
      expect(preview.tokensAfter).toBeLessThanOrEqual(preview.tokensBefore)
      if (preview.units.length === 0) expect(preview.reason).not.toBe("")

      // Undo the newest flush: its units go out verbatim again from the next request on, and stay so.
      const newest = flushes.at(-1)!
      const restoredRounds = newest.refs.map((ref) => Number(ref.replace("tool:toolu_r", "")))
      const undo = yield* capability.undo(nativeRef)
      expect(undo).toMatchObject({ nativeRef, undone: true, entrySeqs: newest.entrySeqs })
      const lastBefore = loop.requests.at(-1)!.body
      for (const r of restoredRounds) expect(stubbed(lastBefore, r)).toBe(true)
      yield* rounds(1)
      const afterUndo = loop.requests.at(-1)!.body
      for (const r of restoredRounds) {
        expect(stubbed(afterUndo, r)).toBe(false)
        expect(verbatim(afterUndo, r)).toBe(true)
      }
      // The request changes from the first restored entry on, not before it.
      const previous = messagesOf(lastBefore)
      const next = messagesOf(afterUndo)
      const k = firstDifference(previous, next)
      expect(k).toBeLessThan(previous.length)
      expect(previous[k]).toContain(`thread_read tool:toolu_r${Math.min(...restoredRounds)}]`)

      const flushesAfterUndo = flushes.length
      yield* rounds(25)
      expect(flushes.length).toBeGreaterThan(flushesAfterUndo)
      for (const f of flushes.slice(flushesAfterUndo)) for (const r of restoredRounds) expect(f.refs).not.toContain(`tool:toolu_r${r}`)
      const later = loop.requests.at(-1)!.body
      for (const r of restoredRounds) expect(verbatim(later, r)).toBe(true)

      // A restarted adapter renders the same list (the undo is in the log), and undoes the flushes newest first.
      const restarted = yield* adapterFor(kind, loop, file, {}, { offload })
      yield* restarted.resumeThread(nativeRef)
      const undone: Array<ReadonlyArray<number>> = []
      for (;;) {
        const u = yield* restarted.toolResultOffload!.undo(nativeRef)
        if (!u.undone) break
        undone.push(u.entrySeqs)
      }
      expect(undone).toEqual(flushes.filter((f) => f !== newest).map((f) => f.entrySeqs).reverse())
      loop.enqueue(textReply())
      yield* collect(restarted.continueTurn!({ nativeRef, runId: "run-1", toolResults: [{ toolCallId: `toolu_r${round}`, output: output(round), isError: false }], tools }))
      const everything = loop.requests.at(-1)!.body
      for (let r = 1; r <= round; r++) {
        expect(stubbed(everything, r)).toBe(false)
        expect(verbatim(everything, r)).toBe(true)
      }
    }).pipe(Effect.provide(httpLayer)))
})
