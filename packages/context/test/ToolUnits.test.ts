import { describe, expect, it } from "@effect/vitest"
import * as ToolUnits from "../src/ToolUnits.js"
import { assistant, call, conversation, type ItemSpec, items, result, user } from "./fixtures.js"

/** The units of `specs` as lists of item numbers (`itm_<n>` -> n). */
const unitsOf = (specs: ReadonlyArray<ItemSpec>): Array<Array<number>> =>
  ToolUnits.toolUnits(items(specs)).map((unit) => unit.map((item) => Number(item.id.slice(4))))

describe("ToolUnits.toolUnits", () => {
  it("keeps one response's text, reasoning, tool calls and results together", () => {
    expect(
      unitsOf([
        user("run the tests"),
        { kind: "reasoning", text: "check first", messageId: "msg_1" },
        assistant("Running both suites.", "msg_1"),
        call("c1", "msg_1"),
        call("c2", "msg_1"),
        result("c1"),
        result("c2"),
        assistant("Both pass.", "msg_2")
      ])
    ).toEqual([[1], [2, 3, 4, 5, 6, 7], [8]])
  })

  it("keeps a response together when each call is followed by its result (Claude Code's log layout)", () => {
    // From raw/claude-code/fa812bfe…: one message id, call, result, call, result.
    expect(
      unitsOf([
        assistant("Let me look.", "msg_ZPz3Xq"),
        call("c1", "msg_ZPz3Xq"),
        result("c1"),
        call("c2", "msg_ZPz3Xq"),
        result("c2"),
        assistant("Next.", "msg_3MmAbp")
      ])
    ).toEqual([[1, 2, 3, 4, 5], [6]])
  })

  it("separates responses with different message ids, and the same id after a user message", () => {
    expect(
      unitsOf([
        call("c1", "msg_1"),
        result("c1"),
        call("c2", "msg_2"),
        result("c2"),
        user("and again"),
        assistant("again", "msg_2")
      ])
    ).toEqual([[1, 2], [3, 4], [5], [6]])
  })

  it("groups messageId-less tool calls with the preceding assistant message of the stretch", () => {
    // SWE-agent style: thought and action per step, no message ids.
    expect(
      unitsOf([
        user("fix it"),
        assistant("look at the file"),
        call("c1"),
        result("c1"),
        assistant("edit it"),
        call("c2"),
        call("c3"),
        result("c2"),
        result("c3")
      ])
    ).toEqual([[1], [2, 3, 4], [5, 6, 7, 8, 9]])
  })

  it("makes a messageId-less tool call without a preceding assistant message a unit with its results", () => {
    expect(unitsOf([user("go"), call("c1"), result("c1"), { kind: "reasoning", text: "hm" }, call("c2"), result("c2")]))
      .toEqual([[1], [2, 3], [4], [5, 6]])
  })

  it("makes a result without its call, and a call without a result, units of their own", () => {
    expect(unitsOf([result("gone"), { ...call("c1"), toolCallState: "dangling" }, user("hello")]))
      .toEqual([[1], [2], [3]])
  })

  it("places a result logged before its call in the call's unit, ordered by that first item", () => {
    expect(unitsOf([user("go"), result("c1"), user("meanwhile"), assistant("calling", "msg_1"), call("c1", "msg_1")]))
      .toEqual([[1], [2, 4, 5], [3]])
  })

  it("binds a result to the nearest earlier call when a call id repeats", () => {
    expect(unitsOf([call("c1", "msg_1"), result("c1"), user("again"), call("c1", "msg_2"), result("c1")])).toEqual([
      [1, 2],
      [3],
      [4, 5]
    ])
  })

  it("returns nothing for no items", () => {
    expect(ToolUnits.toolUnits([])).toEqual([])
  })

  it("agrees with toolUnitIndices", () => {
    const history = items([user("a"), call("c1", "m"), result("c1")])
    expect(ToolUnits.toolUnitIndices(history)).toEqual([[0], [1, 2]])
  })
})

describe("ToolUnits properties", () => {
  it.prop("concatenating the units is a permutation of the input", [conversation(20)], ([history]) => {
    const units = ToolUnits.toolUnits(history)
    const flat = units.flat()
    expect(flat.length).toBe(history.length)
    expect(new Set(flat).size).toBe(history.length)
    expect(flat.map((item) => item.seq).sort((a, b) => a - b)).toEqual(history.map((item) => item.seq))
  })

  it.prop("never splits a tool call from its results", [conversation(20)], ([history]) => {
    const unitOf = new Map<string, number>()
    ToolUnits.toolUnits(history).forEach((unit, u) => unit.forEach((item) => unitOf.set(item.id, u)))
    const callUnit = new Map<string, number>()
    for (const item of history) {
      if (item.kind === "tool_call" && item.toolCallId !== null) callUnit.set(item.toolCallId, unitOf.get(item.id)!)
    }
    for (const item of history) {
      if (item.kind === "tool_result" && item.toolCallId !== null && callUnit.has(item.toolCallId)) {
        expect(unitOf.get(item.id)).toBe(callUnit.get(item.toolCallId))
      }
    }
  })

  it.prop("orders units by their first item and each unit's items by thread order", [conversation(20)], ([history]) => {
    const firsts = ToolUnits.toolUnits(history).map((unit) => {
      const seqs = unit.map((item) => item.seq)
      expect(seqs).toEqual([...seqs].sort((a, b) => a - b))
      return seqs[0]!
    })
    expect(firsts).toEqual([...firsts].sort((a, b) => a - b))
  })

  it.prop("keeps non-assistant items other than answered results alone", [conversation(20)], ([history]) => {
    for (const unit of ToolUnits.toolUnits(history)) {
      for (const item of unit) {
        if (item.kind === "user_message" || item.kind === "summary") expect(unit).toEqual([item])
      }
    }
  })

  it.prop("is deterministic and does not touch its input", [conversation(20)], ([history]) => {
    const copy = structuredClone(history)
    expect(ToolUnits.toolUnits(history)).toEqual(ToolUnits.toolUnits(copy))
    expect(history).toEqual(copy)
  })

  it("handles 10,000 items with one call id repeated throughout", () => {
    const specs: Array<ItemSpec> = []
    for (let i = 0; i < 5_000; i++) specs.push(call("same", `msg_${i}`), result("same"))
    const units = ToolUnits.toolUnits(items(specs))
    expect(units.length).toBe(5_000)
    expect(units.every((unit) => unit.length === 2 && unit[0]!.seq + 1 === unit[1]!.seq)).toBe(true)
  })

})
