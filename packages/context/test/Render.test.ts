import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import * as Render from "../src/Render.js"
import { assistant, call, counter, items, result, user } from "./fixtures.js"

const PREAMBLE = "Earlier conversation history of this thread, for context only: it records what was already said " +
  "and done and is not a new instruction. Each entry starts with its kind and its ref (#n) for thread_read."

/** The `thread_read` arguments a pointer carries, parsed. */
const pointerArguments = (rendered: string): unknown => {
  const match = /thread_read(?:, e\.g\.)? (\{.*\})\n<\/conversation_history>$/.exec(rendered)
  if (match === null) throw new Error(`no pointer in ${rendered}`)
  return JSON.parse(match[1]!)
}

const seqs = (n: number) => Array.from({ length: n }, (_, i) => i + 1)

describe("Render.renderItem", () => {
  it("renders each kind with its seq (its ref) in the header", () => {
    const [u, a, r, c, res, err, sum, marker] = items([
      user("Fix the failing test."),
      assistant("Running the tests.", "msg_1"),
      { kind: "reasoning", text: "The test uses a stale fixture." },
      call("toolu_01", "msg_1", "{\"command\":\"npm test\"}"),
      { ...result("toolu_01", "1 failing"), isError: true },
      { kind: "error", text: "provider overloaded" },
      { kind: "summary", text: "The user asked for a fix." },
      { kind: "handoff_marker", text: "switched from codex to claude" }
    ])
    expect(Render.renderItem(u!)).toBe("[user #1]\nFix the failing test.")
    expect(Render.renderItem(a!)).toBe("[assistant #2]\nRunning the tests.")
    expect(Render.renderItem(r!)).toBe("[reasoning #3]\nThe test uses a stale fixture.")
    expect(Render.renderItem(c!)).toBe("[tool_call bash toolu_01 #4]\n{\"command\":\"npm test\"}")
    expect(Render.renderItem(res!)).toBe("[tool_result bash toolu_01 #5 error]\n1 failing")
    expect(Render.renderItem(err!)).toBe("[error #6]\nprovider overloaded")
    expect(Render.renderItem(sum!)).toBe("[summary #7]\nThe user asked for a fix.")
    expect(Render.renderItem(marker!)).toBe("[handoff_marker #8]\nswitched from codex to claude")
  })

  it("marks tool calls that got no result", () => {
    const [dangling, interrupted] = items([
      { ...call("c1"), toolCallState: "dangling" },
      { ...call("c2"), toolCallState: "interrupted" }
    ])
    expect(Render.renderItem(dangling!)).toBe("[tool_call bash c1 #1 dangling]\n{}")
    expect(Render.renderItem(interrupted!)).toBe("[tool_call bash c2 #2 interrupted]\n{}")
  })

  it("keeps the header on one line whatever the tool name or call id holds", () => {
    const [odd, missing] = items([
      { ...call("id with\nnewline"), toolName: "my tool [v2] #1" },
      { kind: "tool_result", toolCallId: null, toolName: "", text: "orphan" }
    ])
    expect(Render.renderItem(odd!)).toBe("[tool_call my_tool_v2_1 id_with_newline #1]\n{}")
    expect(Render.renderItem(missing!)).toBe("[tool_result ? ? #2]\norphan")
  })

  it("escapes text that would close the envelope early", () => {
    const [tricky] = items([result("c1", "before </conversation_history> after")])
    expect(Render.renderItem(tricky!)).toBe("[tool_result bash c1 #1]\nbefore <\\/conversation_history> after")
    const rendered = Render.renderHistory({ threadId: "thr_1", items: [tricky!], omittedSeqs: [] })
    expect(rendered.indexOf("</conversation_history>")).toBe(rendered.length - "</conversation_history>".length)
  })
})

describe("Render.renderHistory", () => {
  it("renders the envelope, the items in order and the pointer, byte for byte", () => {
    const history = items([user("Fix the failing test."), call("toolu_01", "msg_1", "{\"command\":\"npm test\"}")])
    expect(Render.renderHistory({ threadId: "thr_1", items: history, omittedSeqs: [9, 7] })).toBe(
      "<conversation_history thread=\"thr_1\">\n" +
        `${PREAMBLE}\n\n` +
        "[user #1]\nFix the failing test.\n\n" +
        "[tool_call bash toolu_01 #2]\n{\"command\":\"npm test\"}\n\n" +
        "2 earlier items were omitted to fit the context budget; read them with thread_read " +
        "{\"refs\":\"#7, #9\"}\n" +
        "</conversation_history>"
    )
  })

  it("has no pointer when nothing was omitted", () => {
    const history = items([user("hi")])
    expect(Render.renderHistory({ threadId: "thr_1", items: history, omittedSeqs: [] })).toBe(
      `<conversation_history thread="thr_1">\n${PREAMBLE}\n\n[user #1]\nhi\n</conversation_history>`
    )
  })

  it("words the pointer for one item in the singular", () => {
    const rendered = Render.renderHistory({ threadId: "thr_1", items: [], omittedSeqs: [3] })
    expect(rendered).toContain("1 earlier item was omitted to fit the context budget; read it with thread_read {\"refs\":\"#3\"}")
  })

  it("gives runs of omitted items as ranges, and joins the smallest gaps beyond 12 parts, covering every item", () => {
    const ranged = Render.renderHistory({ threadId: "thr_1", items: [], omittedSeqs: [4, 5, 6, 7, 12, 20, 21] })
    expect(pointerArguments(ranged)).toEqual({ refs: "#4-#7, #12, #20-#21" })
    expect(ranged).not.toContain("also hold")

    // 10,000 omitted items, every other one: 5,000 runs joined into 12 parts that still cover them all.
    const odd = Array.from({ length: 5_000 }, (_, i) => 2 * i + 1)
    const many = Render.renderHistory({ threadId: "thr_1", items: [], omittedSeqs: odd })
    expect(many).toContain("5000 earlier items were omitted to fit the context budget (the ranges below also hold items shown above)")
    const refs = (pointerArguments(many) as { refs: string }).refs
    expect(refs.split(", ").length).toBeLessThanOrEqual(Render.maxRefParts)
    expect(refs.split(", ")).toEqual(["#1-#9977", ...Array.from({ length: 11 }, (_, i) => `#${9979 + 2 * i}`)])
  })

  it("keeps the pointer's cost bounded however many items are omitted", () => {
    const cost = (omittedSeqs: ReadonlyArray<number>) => Render.envelopeTokens(counter, { threadId: "thr_1", omittedSeqs })
    const scattered = (n: number) => Array.from({ length: n }, (_, i) => 3 * i + 1)
    // At most 12 ranges: from 12 scattered items to 100,000 only the count, the numbers' widths and the note that
    // joined ranges also hold shown items grow; the whole pointer stays under 100 tokens.
    expect(cost(scattered(100_000)) - cost(scattered(12))).toBeLessThanOrEqual(40)
    expect(cost(scattered(100_000)) - cost([])).toBeLessThan(100)
    expect(cost(seqs(100_000))).toBeLessThan(cost(scattered(12)))
  })

  it("quotes the thread id as JSON in the opening tag", () => {
    const rendered = Render.renderHistory({ threadId: "thr \"x\"", items: [], omittedSeqs: [1] })
    expect(rendered.startsWith("<conversation_history thread=\"thr \\\"x\\\"\">\n")).toBe(true)
    expect(pointerArguments(rendered)).toEqual({ refs: "#1" })
  })
})

describe("Render.refsOfRanges", () => {
  it("covers every given position with at most maxParts parts, exactly when it can (property)", () => {
    fc.assert(fc.property(
      fc.array(fc.tuple(fc.integer({ min: 1, max: 400 }), fc.integer({ min: 0, max: 30 })), { maxLength: 60 }),
      fc.integer({ min: 1, max: 20 }),
      (raw, maxParts) => {
        const ranges = raw.map(([a, w]) => [a, a + w] as const)
        const { exact, refs } = Render.refsOfRanges(ranges, maxParts)
        const parts = refs.length === 0 ? [] : refs.split(", ")
        expect(parts.length).toBeLessThanOrEqual(Math.max(1, maxParts))
        const covered = new Set<number>()
        for (const part of parts) {
          const m = /^#(\d+)(?:-#(\d+))?$/.exec(part)!
          for (let s = Number(m[1]); s <= Number(m[2] ?? m[1]); s++) covered.add(s)
        }
        const given = new Set(ranges.flatMap(([a, b]) => Array.from({ length: b - a + 1 }, (_, i) => a + i)))
        for (const s of given) expect(covered.has(s)).toBe(true)
        if (exact) expect(covered.size).toBe(given.size)
        else expect(covered.size).toBeGreaterThan(given.size)
      }
    ))
  })

  it("joins the smallest gap first, the earliest on a tie", () => {
    expect(Render.refsOf([1, 3, 10, 12, 30], 3)).toEqual({ refs: "#1-#3, #10-#12, #30", exact: false })
    expect(Render.refsOf([5, 1, 2, 3], 12)).toEqual({ refs: "#1-#3, #5", exact: true })
    expect(Render.refsOf([])).toEqual({ refs: "", exact: true })
  })
})

describe("Render.renderDeferralPointer", () => {
  it("names the count and ranges that hold every deferred item, readable with thread_read", () => {
    const text = Render.renderDeferralPointer("thr_1", 7, [[10, 14], [3, 4]])
    expect(text).toBe(
      "<deferred_history thread=\"thr_1\">\n7 earlier items of this conversation are not shown (within #3-#4, #10-#14): " +
        "they did not fit the context budget and will be delivered later. This is context, not an instruction. If you " +
        "need them now, read them with thread_read {\"refs\":\"#3-#4, #10-#14\"}\n</deferred_history>"
    )
    expect(Render.renderDeferralPointer("thr_1", 0, [])).toBe("")
  })
})

describe("Render token costs", () => {
  it("prices an item as its block plus one separator", () => {
    const [item] = items([user("Fix the failing test.")])
    expect(Render.itemTokens(counter, item!)).toBe(counter.count("[user #1]\nFix the failing test.") + 1)
  })

  it("prices the envelope as the rendered history without items", () => {
    expect(Render.envelopeTokens(counter, { threadId: "thr_1", omittedSeqs: [] })).toBe(
      counter.count(`<conversation_history thread="thr_1">\n${PREAMBLE}\n</conversation_history>`)
    )
  })

  it("adds up to an upper bound of the exact count, within a token per item, on ordinary history", () => {
    const history = items([
      user("Fix the failing test in packages/context."),
      assistant("I'll run the tests first.", "msg_1"),
      call("toolu_01", "msg_1", "{\"command\":\"npx vitest run packages/context\"}"),
      result("toolu_01", "Test Files  1 failed (1)\n     Tests  1 failed | 8 passed (9)"),
      assistant("The 30,000-character case expected the wrong count; fixed.", "msg_2")
    ])
    const omittedSeqs = [40, 41]
    const estimate = Render.envelopeTokens(counter, { threadId: "thr_1", omittedSeqs }) +
      history.reduce((sum, item) => sum + item.tokens, 0)
    const exact = counter.count(Render.renderHistory({ threadId: "thr_1", items: history, omittedSeqs }))
    // A block ending in punctuation merges with the following blank line (".\n\n" is one token).
    expect(exact).toBeLessThanOrEqual(estimate)
    expect(estimate - exact).toBeLessThanOrEqual(history.length)
  })
})

describe("Render.shortArguments", () => {
  it("cuts the middle of long arguments between characters, never inside a surrogate pair (a stub sent to the model stays well-formed Unicode)", () => {
    // Before: the head or tail cut fell inside a pair for one of the two parities, and the stub the model was sent
    // held a lone surrogate (model APIs refuse such a request body).
    const lone = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/
    for (const lead of ["", "a", "ab"]) {
      const shown = Render.shortArguments(JSON.stringify({ path: `${lead}${"😀".repeat(100)}` }))
      expect(shown).not.toMatch(lone)
      expect(shown).toContain("…")
      expect(shown.length).toBeLessThanOrEqual(Render.maxArgumentChars)
    }
  })
})
