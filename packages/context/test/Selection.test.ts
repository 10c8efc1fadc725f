import { describe, expect, it } from "@effect/vitest"
import { Effect, FastCheck as fc, Scheduler } from "effect"
import * as Render from "../src/Render.js"
import * as Selection from "../src/Selection.js"
import * as ToolUnits from "../src/ToolUnits.js"
import type { TokenCounterShape } from "../src/TokenCounter.js"
import {
  assistant,
  call,
  conversation,
  counter,
  type ItemSpec,
  items,
  result,
  type TestItem,
  user
} from "./fixtures.js"

const threadId = "thr_1"

const select = (history: ReadonlyArray<TestItem>, budget: number, tokenCounter: TokenCounterShape = counter) =>
  Selection.select({ items: history, budget, threadId, counter: tokenCounter })

const selectedIds = (selection: Selection.Selection<TestItem>) => selection.selected.map((item) => item.id)

const words = (n: number, word: string) => Array.from({ length: n }, (_, i) => `${word}${i}`).join(" ")

/** Room `Selection` keeps for the envelope and the largest pointer it can carry. */
const envelopeRoom = (history: ReadonlyArray<TestItem>) => Selection.envelopeAllowance(counter, threadId, history)

const cost = (history: ReadonlyArray<TestItem>, ...ids: Array<string>) =>
  history.filter((item) => ids.includes(item.id)).reduce((sum, item) => sum + item.tokens, 0)

/**
 * itm_1 first user message, itm_2 an answer, itm_3 a user message, itm_4..6 a tool unit with a large output,
 * itm_7 the last user message, itm_8 the last assistant message.
 */
const history = items([
  user(`First question: ${words(60, "alpha")}`),
  assistant(`First answer: ${words(40, "beta")}`, "msg_1"),
  user(`Second question: ${words(40, "gamma")}`),
  assistant("Let me check the logs.", "msg_2"),
  call("call_1", "msg_2", "{\"command\":\"cat build.log\"}"),
  result("call_1", words(400, "log")),
  user(`Last question: ${words(60, "delta")}`),
  assistant(`Last answer: ${words(60, "epsilon")}`, "msg_3")
])

describe("Selection.select priority", () => {
  it("keeps the last user message and the last assistant message first", () => {
    const budget = envelopeRoom(history) + cost(history, "itm_7", "itm_8") + 10
    const selection = select(history, budget)
    expect(selectedIds(selection)).toEqual(["itm_7", "itm_8"])
    expect(selection.omittedItemIds).toEqual(["itm_1", "itm_2", "itm_3", "itm_4", "itm_5", "itm_6"])
    expect(selection.tokens).toBeLessThanOrEqual(budget)
  })

  it("then the first user message", () => {
    const budget = envelopeRoom(history) + cost(history, "itm_1", "itm_7", "itm_8") + 10
    expect(selectedIds(select(history, budget))).toEqual(["itm_1", "itm_7", "itm_8"])
  })

  it("then newest to oldest, skipping a unit that does not fit for smaller older ones", () => {
    const budget = envelopeRoom(history) + cost(history, "itm_1", "itm_2", "itm_3", "itm_7", "itm_8") + 10
    const selection = select(history, budget)
    // The tool unit (itm_4..6) is newer than itm_2 and itm_3 but too large: omitted whole, the older ones fit.
    expect(selectedIds(selection)).toEqual(["itm_1", "itm_2", "itm_3", "itm_7", "itm_8"])
    expect(selection.omittedItemIds).toEqual(["itm_4", "itm_5", "itm_6"])
    expect(selection.rendered).toContain(
      "3 earlier items were omitted to fit the context budget; read them with thread_read {\"refs\":\"#4-#6\"}"
    )
  })

  it("prefers newer units over older, smaller ones", () => {
    const budget = envelopeRoom(history) + cost(history, "itm_1", "itm_4", "itm_5", "itm_6", "itm_7", "itm_8") + 10
    // After the top three, the tool unit (the newest left) takes the room itm_2 and itm_3 together would fit in.
    expect(cost(history, "itm_2", "itm_3")).toBeLessThan(cost(history, "itm_4", "itm_5", "itm_6"))
    expect(selectedIds(select(history, budget))).toEqual(["itm_1", "itm_4", "itm_5", "itm_6", "itm_7", "itm_8"])
  })

  it("delivers everything without a pointer when everything fits", () => {
    const total = Render.envelopeTokens(counter, { threadId, omittedSeqs: [] }) +
      cost(history, ...history.map((item) => item.id))
    const selection = select(history, total)
    expect(selection.selected).toEqual(history)
    expect(selection.omittedItemIds).toEqual([])
    expect(selection.rendered).toBe(Render.renderHistory({ threadId, items: history, omittedSeqs: [] }))
    expect(selection.tokens).toBe(counter.count(selection.rendered))
    expect(selection.tokens).toBeLessThanOrEqual(total)
  })
})

describe("Selection.select limits", () => {
  it("omits an item larger than the budget whole and records its id", () => {
    const big = items([
      user("Please summarise the log."),
      assistant("Reading it.", "msg_1"),
      call("call_1", "msg_1", "{\"path\":\"huge.log\"}"),
      result("call_1", words(5_000, "line")),
      assistant("Done.", "msg_2")
    ])
    const selection = select(big, 2_000)
    expect(big[3]!.tokens).toBeGreaterThan(2_000)
    expect(selectedIds(selection)).toEqual(["itm_1", "itm_5"])
    // The call goes with its result: the unit (itm_2..4) is omitted as a whole.
    expect(selection.omittedItemIds).toEqual(["itm_2", "itm_3", "itm_4"])
    expect(selection.rendered).not.toContain("line0")
    expect(selection.tokens).toBeLessThanOrEqual(2_000)
  })

  it("returns nothing, with every id omitted, when nothing fits", () => {
    for (const budget of [0, -5, Number.NaN, 10, envelopeRoom(history)]) {
      expect(select(history, budget)).toEqual({
        selected: [],
        omittedItemIds: history.map((item) => item.id),
        stubbedItemIds: [],
        tokens: 0,
        rendered: ""
      })
    }
    expect(select([], 16_000)).toEqual({ selected: [], omittedItemIds: [], stubbedItemIds: [], tokens: 0, rendered: "" })
  })

  it("stays within the budget when stored token counts are far too low", () => {
    const understated = history.map((item) => ({ ...item, tokens: 1 }))
    for (const budget of [150, 300, 600, 1_200]) {
      const selection = select(understated, budget)
      expect(selection.tokens).toBeLessThanOrEqual(budget)
      expect(selection.tokens).toBe(selection.selected.length === 0 ? 0 : counter.count(selection.rendered))
    }
    // With room for the envelope and the two top units, the search still finds them.
    const budget = envelopeRoom(history) + cost(history, "itm_7", "itm_8") + 10
    expect(selectedIds(select(understated, budget))).toContain("itm_7")
  })

  it("renders the same bytes for the same input", () => {
    const budget = envelopeRoom(history) + cost(history, "itm_1", "itm_7", "itm_8") + 10
    const first = select(history, budget)
    const second = select(structuredClone(history), budget)
    expect(second.rendered).toBe(first.rendered)
    expect(second).toEqual(first)
  })
})

/** Wraps a counter to record how much text `select` counts. */
const metered = () => {
  const usage = { calls: 0, characters: 0 }
  const tokenCounter: TokenCounterShape = {
    name: counter.name,
    count: (text) => {
      usage.calls++
      usage.characters += text.length
      return counter.count(text)
    }
  }
  return { usage, tokenCounter }
}

describe("Selection.select at scale", () => {
  // 10,000 items: 2,000 turns of user message, assistant message with a tool call, and its result.
  const specs: Array<ItemSpec> = []
  for (let turn = 0; turn < 2_000; turn++) {
    specs.push(user(`Turn ${turn}: please check file ${turn}.`))
    specs.push(assistant(`Checking file ${turn}.`, `msg_${turn}`))
    specs.push(call(`call_${turn}`, `msg_${turn}`, `{"path":"src/file${turn}.ts"}`))
    specs.push(result(`call_${turn}`, `export const value${turn} = ${turn} // ${words(20, "x")}`))
    specs.push(assistant(`File ${turn} is fine.`, `msg_${turn}_done`))
  }
  const large = items(specs)

  it("fills the budget counting only whole renders, never each item", () => {
    const { tokenCounter, usage } = metered()
    const selection = select(large, 16_000, tokenCounter)
    expect(selection.tokens).toBeLessThanOrEqual(16_000)
    // The estimates overstate by about a token per block; the refill pass spends that slack.
    expect(selection.tokens).toBeGreaterThan(15_900)
    expect(selection.selected.length + selection.omittedItemIds.length).toBe(10_000)
    expect(selectedIds(selection)).toContain("itm_1")
    expect(selectedIds(selection).slice(-5)).toEqual(["itm_9996", "itm_9997", "itm_9998", "itm_9999", "itm_10000"])
    // Envelope estimates (a few short strings) plus the first fit and the refilled selection.
    expect(usage.calls).toBeLessThanOrEqual(6)
    expect(usage.characters).toBeLessThan(2 * selection.rendered.length + 5_000)
  })
})

const budgetFor = (items: ReadonlyArray<TestItem>) =>
  fc.integer({ min: 0, max: items.reduce((sum, item) => sum + item.tokens, 0) + 200 })

const withBudget = conversation(12).chain((history) => fc.tuple(fc.constant(history), budgetFor(history)))

describe("Selection.select properties", () => {
  it.prop("never exceeds the budget and reports the exact count", [withBudget], ([[history, budget]]) => {
    const selection = select(history, budget)
    expect(selection.tokens).toBeLessThanOrEqual(budget)
    if (selection.selected.length === 0) {
      expect(selection).toMatchObject({ tokens: 0, rendered: "" })
    } else {
      expect(selection.rendered).toBe(
        Render.renderHistory({
          threadId,
          items: selection.selected,
          omittedSeqs: history.filter((item) => selection.omittedItemIds.includes(item.id)).map((item) => item.seq)
        })
      )
      expect(selection.tokens).toBe(counter.count(selection.rendered))
    }
  })

  it.prop("partitions the input: selected and omitted are disjoint, cover it, in thread order", [withBudget], ([
    [history, budget]
  ]) => {
    const selection = select(history, budget)
    const chosen = new Set(selectedIds(selection))
    expect(selectedIds(selection)).toEqual(history.filter((item) => chosen.has(item.id)).map((item) => item.id))
    expect(selection.omittedItemIds).toEqual(history.filter((item) => !chosen.has(item.id)).map((item) => item.id))
  })

  it.prop("never separates a tool call from its result", [withBudget], ([[history, budget]]) => {
    const chosen = new Set(selectedIds(select(history, budget)))
    const callSelected = new Map<string, boolean>()
    for (const item of history) {
      if (item.kind === "tool_call" && item.toolCallId !== null) callSelected.set(item.toolCallId, chosen.has(item.id))
    }
    for (const item of history) {
      if (item.kind === "tool_result" && item.toolCallId !== null && callSelected.has(item.toolCallId)) {
        expect(chosen.has(item.id)).toBe(callSelected.get(item.toolCallId))
      }
    }
  })

  it.prop("keeps the unit of the last user message whenever it fits", [withBudget], ([[history, budget]]) => {
    const lastUser = [...history].reverse().find((item) => item.kind === "user_message")
    if (lastUser === undefined) return
    const unit = ToolUnits.toolUnits(history).find((u) => u.includes(lastUser))!
    const room = Selection.envelopeAllowance(counter, threadId, history)
    const unitCost = unit.reduce((sum, item) => sum + item.tokens, 0)
    // A few tokens of margin for the pointer's id lengths and merges across block boundaries.
    if (unitCost + room + 10 <= budget) {
      expect(selectedIds(select(history, budget))).toContain(lastUser.id)
    }
  })

  it.prop("is deterministic", [withBudget], ([[history, budget]]) => {
    expect(select(structuredClone(history), budget)).toEqual(select(history, budget))
  })

  it.prop(
    "stays within the budget whatever the stored token counts say",
    [withBudget.chain(([history, budget]) =>
      fc.tuple(
        fc.constant(history),
        fc.constant(budget),
        // Stored counts from a fraction of the truth to half again as much (another counter, stale calibration).
        fc.array(fc.double({ min: 0, max: 1.5, noNaN: true }), { minLength: history.length, maxLength: history.length })
      )
    )],
    ([[history, budget, factors]]) => {
      const misstated = history.map((item, i) => ({ ...item, tokens: Math.floor(item.tokens * factors[i]!) }))
      const selection = select(misstated, budget)
      expect(selection.tokens).toBeLessThanOrEqual(budget)
      expect(selection.selected.length + selection.omittedItemIds.length).toBe(history.length)
    }
  )
})

const selectStubs = (history: ReadonlyArray<TestItem>, budget: number, tokenCounter: TokenCounterShape = counter) =>
  Selection.select({ items: history, budget, threadId, counter: tokenCounter, stubs: true })

/** Runs of `user, tool unit (call + large result), answer`, `runs` of them. */
const toolRuns = (runs: number) =>
  items(Array.from({ length: runs }, (_, r) => [
    user(`Question ${r + 1}: ${words(20, `q${r}w`)}`),
    call(`call_${r + 1}`, `msg_c${r + 1}`, JSON.stringify({ command: `grep -rn pattern${r + 1} src/` })),
    result(`call_${r + 1}`, words(600, `out${r}w`)),
    assistant(`Answer ${r + 1}: ${words(15, `a${r}w`)}`, `msg_a${r + 1}`)
  ]).flat())

describe("Selection.select with stubs (handoffs represent every owed run)", () => {
  it("older runs as user message, final answer and the tool unit's stub; the newest verbatim; the stub reads back by ref", () => {
    const history = toolRuns(6)
    const full = history.reduce((n, item) => n + item.tokens, 0)
    const budget = Math.floor(full / 3)
    const plain = select(history, budget)
    const stubbed = selectStubs(history, budget)
    expect(stubbed.tokens).toBeLessThanOrEqual(budget)
    expect(stubbed.tokens).toBe(counter.count(stubbed.rendered))
    // Without stubs the older tool units are left out with nothing in their place but the pointer; with them every
    // run's question, answer and tool calls are there.
    const shown = (s: Selection.Selection<TestItem>, text: string) => s.rendered.includes(text)
    expect(plain.rendered).not.toContain("[offloaded")
    expect([1, 2, 3, 4, 5, 6].filter((r) => !shown(plain, `pattern${r} `)).length).toBeGreaterThan(0)
    for (let r = 1; r <= 6; r++) {
      expect(shown(stubbed, `Question ${r}:`)).toBe(true)
      expect(shown(stubbed, `Answer ${r}:`)).toBe(true)
    }
    // The newest run's tool output is verbatim; every older unit not shown is a stub naming exactly its items.
    expect(shown(stubbed, "out5w599")).toBe(true)
    for (let r = 1; r <= 6; r++) {
      const callSeq = (r - 1) * 4 + 2
      if (shown(stubbed, `out${r - 1}w599`)) continue
      expect(stubbed.rendered).toContain(`[offloaded, thread_read #${callSeq}-#${callSeq + 1}]\nbash grep -rn pattern${r} src/: `)
      expect(stubbed.stubbedItemIds).toEqual(expect.arrayContaining([`itm_${callSeq}`, `itm_${callSeq + 1}`]))
    }
    expect(stubbed.stubbedItemIds.length).toBeGreaterThan(0)
    // Stubbed items are omitted (not delivered in full) but not in the pointer: their stub names them.
    expect(stubbed.stubbedItemIds.every((id) => stubbed.omittedItemIds.includes(id))).toBe(true)
    expect(stubbed.rendered).not.toContain("omitted to fit")
  })

  it("a pinned tool unit is never a stub: verbatim, or left out with the pointer", () => {
    const history = toolRuns(6)
    const full = history.reduce((n, item) => n + item.tokens, 0)
    const budget = Math.floor(full / 3)
    // Run 2's tool unit (call itm_6, result itm_7) is stubbed without a pin.
    expect(selectStubs(history, budget).stubbedItemIds).toEqual(expect.arrayContaining(["itm_6", "itm_7"]))
    const pinned = Selection.select({ items: history, budget, threadId, counter, stubs: true, pinned: new Set(["itm_7"]) })
    expect(pinned.tokens).toBeLessThanOrEqual(budget)
    expect(pinned.stubbedItemIds).not.toContain("itm_6")
    expect(pinned.stubbedItemIds).not.toContain("itm_7")
    expect(pinned.selected.map((i) => i.id)).toEqual(expect.arrayContaining(["itm_6", "itm_7"]))
    expect(pinned.rendered).toContain("out1w599")
    // A budget where, unpinned, the unit is a stub and, pinned, it does not fit verbatim: it is left out whole (named
    // by the pointer), never stubbed.
    const pin = new Set(["itm_7"])
    const tight = Array.from({ length: 60 }, (_, k) => 300 + 50 * k).flatMap((b) => {
      const p = Selection.select({ items: history, budget: b, threadId, counter, stubs: true, pinned: pin })
      return selectStubs(history, b).stubbedItemIds.includes("itm_7") && !p.selected.some((i) => i.id === "itm_7") ? [p] : []
    })
    expect(tight.length).toBeGreaterThan(0)
    for (const p of tight) {
      expect(p.stubbedItemIds).not.toContain("itm_7")
      expect(p.omittedItemIds).toContain("itm_7")
      expect(p.rendered).toContain("omitted to fit")
    }
  })

  it("falls back to omitting the oldest runs whole when even their skeletons do not fit", () => {
    const history = toolRuns(30)
    const budget = 2_000
    const s = selectStubs(history, budget)
    expect(s.tokens).toBeLessThanOrEqual(budget)
    expect(s.rendered).toContain("Question 30:")
    expect(s.rendered).toContain("Question 1:")
    expect(s.rendered).toContain("omitted to fit the context budget")
  })

  it("is the plain selection when everything fits", () => {
    const history = toolRuns(3)
    const budget = 100_000
    expect(selectStubs(history, budget)).toEqual(select(history, budget))
  })

  it.prop("never exceeds the budget, reports the exact count, partitions the input, keeps units whole and stubs whole units only", [withBudget], ([[history, budget]]) => {
    const s = selectStubs(history, budget)
    expect(s.tokens).toBeLessThanOrEqual(Math.max(0, budget))
    expect(s.tokens).toBe(s.rendered === "" ? 0 : counter.count(s.rendered))
    const selected = new Set(s.selected.map((item) => item.id))
    const omitted = new Set(s.omittedItemIds)
    expect(history.every((item) => selected.has(item.id) !== omitted.has(item.id))).toBe(true)
    expect(s.omittedItemIds).toEqual(history.filter((item) => omitted.has(item.id)).map((item) => item.id))
    const stubbed = new Set(s.stubbedItemIds)
    for (const unit of ToolUnits.toolUnits(history)) {
      const ids = unit.map((item) => item.id)
      const kept = ids.filter((id) => selected.has(id)).length
      expect(kept === 0 || kept === ids.length).toBe(true)
      const stubs = ids.filter((id) => stubbed.has(id)).length
      expect(stubs === 0 || (stubs === ids.length && unit.some((item) => item.kind === "tool_call"))).toBe(true)
    }
    // Every item left out is reachable: named by a stub or covered by the pointer.
    if (s.rendered !== "") for (const item of history) if (omitted.has(item.id) && !stubbed.has(item.id)) expect(s.rendered).toMatch(/thread_read/)
    expect(selectStubs(history, budget)).toEqual(s)
  })
})

describe("Selection.selectYielding", () => {
  it.prop("gives what select gives, with and without stubs", [withBudget, fc.boolean()], ([[history, budget], stubs]) => {
    const input = { items: history, budget, threadId, counter, stubs }
    expect(Effect.runSync(Selection.selectYielding(input))).toEqual(Selection.select(input))
  })

  it.live("lets the event loop turn between its steps (renders, exact counts) on a long history", () =>
    Effect.gen(function*() {
      const history = toolRuns(100)
      const input = { items: history, budget: 30_000, threadId, counter, stubs: true }
      let turns = 0
      let ticking = true
      const tick = () => {
        turns++
        if (ticking) setImmediate(tick)
      }
      setImmediate(tick)
      const selection = yield* Selection.selectYielding(input)
      ticking = false
      expect(selection).toEqual(Selection.select(input))
      expect(selection.stubbedItemIds.length).toBeGreaterThan(0)
      // At least: after the stubs, and after a render and its count.
      expect(turns).toBeGreaterThanOrEqual(3)
    }).pipe(Effect.withScheduler(Scheduler.makeBatched((runBatch) => setImmediate(runBatch)))))
})
