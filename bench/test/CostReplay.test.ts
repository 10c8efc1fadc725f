import { TokenCounter } from "@baton/context"
import { ThreadRead } from "@baton/orchestration"
import type { Transcript } from "@baton/transcripts"
import { TranscriptImporter } from "@baton/transcripts"
import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as CostReplay from "../CostReplay.js"

/** One character, one token: exact arithmetic for the small cases. */
const chars = (text: string) => text.length

const item = (kind: Transcript.ImportedItemKind, text: string, extra: Partial<Transcript.ImportedItem> = {}): Transcript.ImportedItem => ({
  kind,
  text,
  toolCallId: null,
  toolName: null,
  messageId: null,
  isError: false,
  toolCallState: null,
  ...extra
})

/** A prompt, two responses with one tool call each (1,000-character results), and a closing answer. */
const thread: Transcript.ImportedThread = {
  format: "claude-code",
  file: "synthetic.jsonl",
  threadKey: "synthetic",
  title: "u",
  preamble: [],
  turns: [{
    userText: "u",
    sourceLine: 1,
    items: [
      item("assistant_message", "a".repeat(10), { messageId: "m1" }),
      item("tool_call", "c".repeat(10), { messageId: "m1", toolCallId: "c1", toolName: "T", toolCallState: "answered" }),
      item("tool_result", "r".repeat(1_000), { toolCallId: "c1", toolName: "T" }),
      item("tool_call", "d".repeat(10), { messageId: "m2", toolCallId: "c2", toolName: "T", toolCallState: "answered" }),
      item("tool_result", "s".repeat(1_000), { toolCallId: "c2", toolName: "T" }),
      item("assistant_message", "done", { messageId: "m3" })
    ]
  }]
}

describe("CostReplay.sessionOf", () => {
  it("makes one request per response, one message per tool result, and units of a response with its results", () => {
    const s = CostReplay.sessionOf("synthetic", thread, chars)
    expect(s.messages.map((m) => [m.kind, m.tokens, m.seqs])).toEqual([
      ["user", 1, [1]],
      ["assistant", 21, [2, 3]],
      ["result", 1_000, [4]],
      ["assistant", 11, [5]],
      ["result", 1_000, [6]],
      ["assistant", 4, [7]]
    ])
    expect(s.requests.map((r) => [r.start, r.end])).toEqual([[0, 1], [0, 3], [0, 5]])
    expect(s.units.map((u) => [u.messages, u.isTool, u.answeredAt])).toEqual([
      [[0], false, -1],
      [[1, 2], true, 2],
      [[3, 4], true, 4],
      [[5], false, -1]
    ])
  })

  it("reads response times as the importers key responses", () => {
    const times = CostReplay.responseTimes([
      JSON.stringify({ type: "session", id: "p" }),
      JSON.stringify({ type: "message", timestamp: "2025-01-01T00:00:00Z", message: { role: "assistant", timestamp: 1_000 } }),
      JSON.stringify({ type: "assistant", timestamp: "2025-01-01T00:00:02Z", message: { id: "msg_1" } })
    ].join("\n"))
    expect([...times]).toEqual([["pi:L2", 1_000], ["msg_1", Date.parse("2025-01-01T00:00:02Z")]])
  })
})

describe("CostReplay.run", () => {
  const s = CostReplay.sessionOf("synthetic", thread, chars)

  it("weights 0.1 x cache read + 1.25 x cache write, the cached part the common prefix with the previous request", () => {
    const r = CostReplay.run(s, CostReplay.none, CostReplay.mainRun, chars)
    // 3,001 written; then 3,001 read + 1,021 written; then 4,022 read + 1,011 written.
    expect(r.cacheRead).toBe(3_001 + 4_022)
    expect(r.cacheWrite).toBe(3_001 + 1_021 + 1_011)
    expect(r.weighted).toBeCloseTo(1.25 * 3_001 + 0.1 * 3_001 + 1.25 * 1_021 + 0.1 * 4_022 + 1.25 * 1_011)
    expect(r.prefixBreaks).toBe(0)
  })

  it("counts a cleared result as a prefix break and rewrites the suffix after it", () => {
    const r = CostReplay.run(s, CostReplay.clearToolUses(3_500, 1), CostReplay.mainRun, chars)
    // The third request clears the first result ("[cleared]", 9): 3,022 read, 9 + 11 + 1,000 written.
    expect(r.weighted).toBeCloseTo(1.25 * 3_001 + 0.1 * 3_001 + 1.25 * 1_021 + 0.1 * 3_022 + 1.25 * 1_020)
    expect(r.prefixBreaks).toBe(1)
  })

  it("treats the whole request as written when the gap since the previous one exceeds the TTL", () => {
    const timed: CostReplay.Session = { ...s, requests: s.requests.map((r, i) => ({ ...r, timeMs: i * 400_000 })) }
    const r = CostReplay.run(timed, CostReplay.none, { ...CostReplay.mainRun, ttlMs: 300_000 }, chars)
    expect(r.cacheRead).toBe(0)
    expect(r.cacheWrite).toBe(3_001 + 4_022 + 5_033)
  })
})

describe("CostReplay on a real pi session (raw/pi/large-session.jsonl)", () => {
  const file = path.resolve(import.meta.dirname, "..", "..", "..", "shared", "transcripts", "raw", "pi", "large-session.jsonl")
  const text = fs.readFileSync(file, "utf8")
  const imported = TranscriptImporter.importText(file, text, { skipInvalid: true })
  if (Either.isLeft(imported)) throw new Error(imported.left.reason)
  const counter = TokenCounter.make()
  const session = CostReplay.sessionOf("large-session", imported.right.threads[0]!, counter.count, CostReplay.responseTimes(text))
  const flushes: Array<number> = []
  const baton = CostReplay.run(session, CostReplay.baton((r) => flushes.push(r)), CostReplay.mainRun, counter.count)
  const none = CostReplay.run(session, CostReplay.none, CostReplay.mainRun, counter.count)

  it("costs Baton at most half of no management, with one prefix break per flush", () => {
    expect(session.requests.length).toBe(439)
    expect(baton.weighted).toBeLessThanOrEqual(0.5 * none.weighted)
    expect(baton.prefixBreaks).toBe(flushes.length)
    expect(flushes.length).toBeGreaterThan(0)
  })

  it("reads every stubbed original back by the ref its stub names", () => {
    expect(baton.stubbedUnits.length).toBeGreaterThan(100)
    for (const unit of baton.stubbedUnits) {
      const refs = ThreadRead.parseRefs(CostReplay.stubRef(session, unit)!)
      if (Either.isLeft(refs)) throw new Error(refs.left)
      const read = refs.right.flatMap((r) => r._tag === "range" ? session.items.slice(r.from - 1, r.to) : [])
      const original = [...session.units[unit]!.seqs].sort((a, b) => a - b).map((seq) => session.items[seq - 1]!)
      expect(read).toEqual(original)
    }
  })

  it("never stubs a unit with an unanswered call", () => {
    for (const unit of baton.stubbedUnits) expect(session.units[unit]!.answeredAt).not.toBe(Infinity)
    expect(session.units.some((u) => u.answeredAt === Infinity)).toBe(true)
  })
})
