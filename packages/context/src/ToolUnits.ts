/**
 * Tool units: the indivisible groups of history that selection, offload and compaction keep or drop as a whole, so
 * no delivery separates a tool call from its result (docs/design.md, vocabulary "tool unit" and invariant 7).
 *
 * Owns: the partition of a list of items into units. Does not own: what is done with a unit (select, offload,
 * summarise).
 */
import type { ItemKind } from "@baton/contracts"

/** The fields of an item that the partition reads; `Item` from `@baton/contracts` satisfies it. */
export interface UnitItem {
  readonly id: string
  readonly kind: ItemKind
  readonly toolCallId: string | null
  readonly messageId: string | null
}

/** Items an assistant response produces; they group by `messageId`. */
const isAssistantSide = (kind: ItemKind): boolean =>
  kind === "assistant_message" || kind === "reasoning" || kind === "tool_call"

/**
 * The partition of `toolUnits`, as positions into `items`: each unit is an ascending array of indices, units in
 * order of their first index. Same rules as `toolUnits`; for callers that keep per-position data (costs, flags).
 * Time O(n log n) at worst (O(n) unless tool call ids repeat), no string building.
 */
export const toolUnitIndices = (items: ReadonlyArray<UnitItem>): ReadonlyArray<ReadonlyArray<number>> => {
  const n = items.length
  // Provisional unit number of each item; renumbered in order of first item at the end.
  const unitOf = new Int32Array(n)
  let unitCount = 0

  // Pass 1: assistant-side items and every other non-result item.
  let groupMessageId: string | null = null
  let groupUnit = -1
  // In a stretch of assistant-side items without messageId: the unit of its latest assistant_message, or -1.
  let stretchUnit = -1
  const callsById = new Map<string, Array<number>>()
  for (let i = 0; i < n; i++) {
    const item = items[i]!
    // Results are placed in pass 2; they neither end a response nor a stretch (Claude Code interleaves each tool
    // call of one response with its result: call, result, call, result, all under one message id).
    if (item.kind === "tool_result") continue
    if (!isAssistantSide(item.kind)) {
      groupMessageId = null
      stretchUnit = -1
      unitOf[i] = unitCount++
      continue
    }
    if (item.messageId !== null) {
      stretchUnit = -1
      if (item.messageId !== groupMessageId) {
        groupMessageId = item.messageId
        groupUnit = unitCount++
      }
      unitOf[i] = groupUnit
    } else {
      groupMessageId = null
      if (item.kind === "assistant_message") {
        stretchUnit = unitCount++
        unitOf[i] = stretchUnit
      } else if (item.kind === "tool_call" && stretchUnit >= 0) {
        unitOf[i] = stretchUnit
      } else {
        unitOf[i] = unitCount++
      }
    }
    if (item.kind === "tool_call" && item.toolCallId !== null) {
      const calls = callsById.get(item.toolCallId)
      if (calls === undefined) callsById.set(item.toolCallId, [i])
      else calls.push(i)
    }
  }

  // Pass 2: a result joins the unit of the call it answers: the last call with its id before it, else (a result
  // logged before its call) the first call with its id; with no such call it is a unit of its own.
  for (let i = 0; i < n; i++) {
    const item = items[i]!
    if (item.kind !== "tool_result") continue
    const calls = item.toolCallId === null ? undefined : callsById.get(item.toolCallId)
    if (calls === undefined) {
      unitOf[i] = unitCount++
      continue
    }
    let lo = 0
    let hi = calls.length
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (calls[mid]! < i) lo = mid + 1
      else hi = mid
    }
    unitOf[i] = unitOf[lo > 0 ? calls[lo - 1]! : calls[0]!]!
  }

  const position = new Int32Array(unitCount).fill(-1)
  const units: Array<Array<number>> = []
  for (let i = 0; i < n; i++) {
    const provisional = unitOf[i]!
    if (position[provisional] === -1) {
      position[provisional] = units.length
      units.push([i])
    } else {
      units[position[provisional]!]!.push(i)
    }
  }
  return units
}

/**
 * Partition `items` (thread order) into tool units, returned in order of their first item, each unit's items in
 * thread order. Concatenating the units gives a permutation of `items`.
 *
 * - The assistant-side items of one response (`assistant_message`, `reasoning`, `tool_call` with the same non-null
 *   `messageId`, consecutive except for interleaved `tool_result`s) form one unit, together with every `tool_result`
 *   whose `toolCallId` matches one of its tool calls, wherever the result sits in the list.
 * - Without a `messageId`, a `tool_call` joins the unit of the latest `assistant_message` of the same stretch of
 *   messageId-less assistant-side items (again not broken by results), with its results; a `tool_call` with no such
 *   message before it starts a unit of its own with its results.
 * - A `tool_result` whose call is not in the list is a unit of its own; if a call id repeats, a result belongs to
 *   the nearest call with its id before it.
 * - Every other item is a unit of its own.
 */
export const toolUnits = <A extends UnitItem>(items: ReadonlyArray<A>): ReadonlyArray<ReadonlyArray<A>> =>
  toolUnitIndices(items).map((unit) => unit.map((i) => items[i]!))
