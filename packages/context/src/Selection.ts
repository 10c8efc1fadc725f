/**
 * Selection: which items of owed history fit the budget, rendered (docs/design.md, "Selection and rendering").
 *
 * Owns: the priority order, the greedy fill by tool unit, and the guarantee that the rendered history never costs
 * more than the budget. Does not own: the budget (`Budget`), the bytes (`Render`), the decision to defer a handoff
 * whose budget is below the useful minimum, or what happens to omitted items (they stay in the thread log, readable
 * by ref; `packages/orchestration` records them).
 */
import * as Render from "./Render.js"
import type { TokenCounterShape } from "./TokenCounter.js"
import * as ToolUnits from "./ToolUnits.js"

/**
 * An item as selection sees it; `Item` from `@baton/contracts` satisfies it. `tokens` is the item's cost in a rendered
 * history (`Render.itemTokens`, stored at write time); `seq` its position in the thread.
 */
export interface SelectableItem extends Render.RenderableItem, ToolUnits.UnitItem {
  readonly tokens: number
  readonly seq: number
}

/**
 * - `items`: the owed history, in thread order.
 * - `budget`: tokens for the whole rendered history, envelope and pointer included (`Budget.compute`'s `budget`).
 * - `threadId`: the thread the items belong to (named in the envelope and the pointer).
 * - `counter`: the counter the items' `tokens` were computed with; used to count the final render exactly.
 */
export interface SelectionInput<A extends SelectableItem> {
  readonly items: ReadonlyArray<A>
  readonly budget: number
  readonly threadId: string
  readonly counter: TokenCounterShape
}

/**
 * - `selected`: the items delivered, in thread order.
 * - `omittedItemIds`: every other input item's id, in thread order; each stays readable by ref.
 * - `tokens`: `counter.count(rendered)`, exact; 0 when nothing is selected. Always `<= budget`.
 * - `rendered`: `Render.renderHistory` of the selection with its pointer; `""` when nothing is selected.
 */
export interface Selection<A> {
  readonly selected: ReadonlyArray<A>
  readonly omittedItemIds: ReadonlyArray<string>
  readonly tokens: number
  readonly rendered: string
}

/**
 * Rounds of "drop lowest-priority units worth the overshoot, render, count" before falling back to a binary search
 * over how many chosen units to keep. Item costs are accurate to a few tokens per item, so one round nearly always
 * suffices; the bound keeps a wildly wrong `tokens` field from costing one render per unit.
 */
const ESTIMATE_ROUNDS = 3

/**
 * The tokens the envelope may cost with any pointer this selection can produce. A pointer holds at most
 * `Render.maxRefParts` ranges of seqs no wider than the largest seq, and the count of omitted items: bounded by a
 * pointer of that many two-ended ranges of the largest seq, independent of the number of items. Tokens, counted with
 * `counter`; `items` the owed history (`select`'s input).
 */
export const envelopeAllowance = (
  counter: TokenCounterShape,
  threadId: string,
  items: ReadonlyArray<SelectableItem>
): number => {
  const widest = items.reduce((m, item) => Math.max(m, item.seq), 1)
  const ranges = Array.from({ length: Math.min(items.length, Render.maxRefParts) }, (_, i) => [widest + 3 * i, widest + 3 * i + 1] as const)
  const parts = Render.refsOfRanges(ranges).refs
  return Render.envelopeTokens(counter, { threadId, omittedSeqs: [] }) +
    counter.count(`${items.length} earlier items were omitted to fit the context budget (the ranges below also hold ` +
      `items shown above); read them with thread_read ${JSON.stringify({ refs: parts })}\n\n`)
}

/**
 * Select the history that fits `budget` and render it.
 *
 * Items are grouped into tool units (`ToolUnits`), which are kept or left out whole. Units are taken greedily in
 * priority order (docs/design.md): the unit holding the last `user_message`, the unit holding the last
 * `assistant_message`, the unit holding the first `user_message`, then the remaining units newest to oldest (by
 * their first item). A unit whose cost (the sum of its items' `tokens`) does not fit what is left is skipped whole
 * and later, smaller units may still fit. Room is kept for the envelope and the largest pointer the result can
 * carry.
 *
 * The chosen units are rendered in thread order with a pointer to the omitted items and counted exactly. If the
 * count exceeds the budget (tokens merging differently across block boundaries, or inaccurate `tokens`), the
 * lowest-priority chosen units are dropped and the result is rendered and counted again until it fits. If it fits
 * at once, the slack left by the estimates is offered once more to the units left out, in the same order.
 *
 * Guarantees: `tokens <= budget`; `selected` and `omittedItemIds` are disjoint and together hold every input item;
 * a tool call and its results are selected together or omitted together; the same input gives the same bytes. When
 * nothing fits (or `items` is empty), `selected` is empty, every id is omitted, `rendered` is `""` and `tokens` 0.
 *
 * Cost: O(n log n) in the number of items plus, usually, one or two counts of the rendered result (about 16 ms
 * for 10,000 items and a 16,000-token budget); item texts are not re-tokenized.
 */
export const select = <A extends SelectableItem>(input: SelectionInput<A>): Selection<A> => {
  const { budget, counter, items, threadId } = input
  const n = items.length
  const nothing: Selection<A> = { selected: [], omittedItemIds: items.map((item) => item.id), tokens: 0, rendered: "" }
  if (n === 0 || !(budget > 0)) return nothing

  const units = ToolUnits.toolUnitIndices(items)
  const unitOf = new Int32Array(n)
  const cost = new Float64Array(units.length)
  units.forEach((unit, u) => {
    for (const i of unit) {
      unitOf[i] = u
      cost[u] += items[i]!.tokens
    }
  })

  const priority: Array<number> = []
  const ranked = new Uint8Array(units.length)
  const rank = (u: number) => {
    if (ranked[u] === 0) {
      ranked[u] = 1
      priority.push(u)
    }
  }
  let firstUser = -1
  let lastUser = -1
  let lastAssistant = -1
  for (let i = 0; i < n; i++) {
    const kind = items[i]!.kind
    if (kind === "user_message") {
      if (firstUser < 0) firstUser = i
      lastUser = i
    } else if (kind === "assistant_message") {
      lastAssistant = i
    }
  }
  for (const i of [lastUser, lastAssistant, firstUser]) if (i >= 0) rank(unitOf[i]!)
  for (let u = units.length - 1; u >= 0; u--) rank(u)

  /** Render the first `count` units of `chosen` (in priority order) in thread order, with the pointer. */
  const render = (chosen: ReadonlyArray<number>, count: number): Selection<A> => {
    const keep = new Uint8Array(units.length)
    for (let k = 0; k < count; k++) keep[chosen[k]!] = 1
    const selected: Array<A> = []
    const omittedItemIds: Array<string> = []
    const omittedSeqs: Array<number> = []
    for (let i = 0; i < n; i++) {
      if (keep[unitOf[i]!] === 1) selected.push(items[i]!)
      else {
        omittedItemIds.push(items[i]!.id)
        omittedSeqs.push(items[i]!.seq)
      }
    }
    const rendered = Render.renderHistory({ threadId, items: selected, omittedSeqs })
    return { selected, omittedItemIds, tokens: counter.count(rendered), rendered }
  }

  // Everything fits by estimate: no pointer, so no room for one is needed.
  let total = 0
  for (let u = 0; u < units.length; u++) total += cost[u]!
  if (Render.envelopeTokens(counter, { threadId, omittedSeqs: [] }) + total <= budget) {
    const all = render(priority, priority.length)
    if (all.tokens <= budget) return all
  }

  const capacity = budget - envelopeAllowance(counter, threadId, items)
  const chosen: Array<number> = []
  let used = 0
  for (const u of priority) {
    if (used + cost[u]! <= capacity) {
      chosen.push(u)
      used += cost[u]!
    }
  }

  /**
   * Item costs overstate a rendered history by about a token per block (a block ending in punctuation merges with
   * the following blank line) and the envelope room assumes the longest pointer, so a first fit usually leaves
   * room. One more greedy pass over the units left out spends the measured slack; kept only if it still fits.
   */
  const refill = (fit: Selection<A>, count: number): Selection<A> => {
    let room = budget - fit.tokens
    const taken = new Uint8Array(units.length)
    for (let k = 0; k < count; k++) taken[chosen[k]!] = 1
    const more = chosen.slice(0, count)
    for (const u of priority) {
      if (taken[u] === 0 && cost[u]! <= room) {
        more.push(u)
        room -= cost[u]!
      }
    }
    if (more.length === count) return fit
    const attempt = render(more, more.length)
    return attempt.tokens <= budget ? attempt : fit
  }

  // Drop the lowest-priority units worth the overshoot and count again; `failing` is a unit count known not to fit.
  let count = chosen.length
  let failing = 0
  for (let round = 0; count > 0 && round < ESTIMATE_ROUNDS; round++) {
    const attempt = render(chosen, count)
    const overshoot = attempt.tokens - budget
    if (overshoot <= 0) return round === 0 ? refill(attempt, count) : attempt
    failing = count
    let freed = 0
    while (count > 0 && freed < overshoot) freed += cost[chosen[--count]!]!
  }

  // The estimates keep missing: binary-search the longest prefix of `chosen` that fits below `failing`. Keeping
  // fewer units nearly always renders fewer tokens; whatever the search settles on was counted and fits.
  let best: Selection<A> = nothing
  let lo = 0
  let hi = failing
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1
    const attempt = render(chosen, mid)
    if (attempt.tokens <= budget) {
      lo = mid
      best = attempt
    } else {
      hi = mid
    }
  }
  return best
}
