/**
 * OffloadCut: where `/offload` cuts a thread's history (docs/design.md vocabulary `/offload`, invariant 7).
 *
 * Owns: the choice of the cut point — keep the newest `keepTokens` tokens verbatim, then move the cut earlier until
 * no tool unit straddles it — and the model-visible history an offload chain leaves. Pure: no I/O, no clock. Does not
 * own: the summary text (a `Summariser`), nor the records (`@baton/orchestration` ThreadOffload).
 */
import { toolUnitIndices, type UnitItem } from "./ToolUnits.js"

/** The fields the cut reads: `tokens` is the item's rendered cost (`Render.itemTokens`), `seq` its thread position. */
export interface CutItem extends UnitItem {
  readonly seq: number
  readonly tokens: number
}

/** Where to cut: `items[0..cut)` are summarised, `items[cut..]` stay verbatim. */
export interface Cut {
  /** The number of leading items summarised (0 = nothing to offload). */
  readonly cut: number
  /** Where the token rule alone would cut, before moving for tool units (`cut <= naiveCut`). */
  readonly naiveCut: number
  /** Rendered tokens of the items summarised / kept verbatim. */
  readonly coveredTokens: number
  readonly keptTokens: number
}

/**
 * Chooses the cut over `items` (the candidates: thread order, everything after the previous cut, offload summaries
 * excluded). The token rule walks back from the newest item until the kept tail reaches `keepTokens` (the item that
 * reaches it is kept whole, so the tail holds at least `keepTokens` when the candidates do); a tail below
 * `keepTokens` keeps everything (`cut = 0`). The cut then moves earlier while a tool unit (computed over `items`)
 * would have members on both sides, so a tool call is never separated from its result. O(n log n).
 */
export const chooseCut = (items: ReadonlyArray<CutItem>, keepTokens: number): Cut => {
  const n = items.length
  let naiveCut = n
  let kept = 0
  if (keepTokens > 0) {
    naiveCut = 0
    for (let i = n - 1; i >= 0; i--) {
      kept += items[i]!.tokens
      if (kept >= keepTokens) {
        naiveCut = i
        break
      }
    }
  }
  // blocked[k] > 0 iff some unit has a member before position k and one at or after it.
  const blocked = new Int32Array(n + 1)
  for (const unit of toolUnitIndices(items)) {
    const first = unit[0]!
    const last = unit[unit.length - 1]!
    if (last > first) {
      blocked[first + 1]!++
      blocked[last + 1]!--
    }
  }
  const legal = new Uint8Array(n + 1)
  let running = 0
  for (let k = 0; k <= n; k++) {
    running += blocked[k]!
    legal[k] = running === 0 ? 1 : 0
  }
  let cut = naiveCut
  while (cut > 0 && legal[cut] === 0) cut--
  let coveredTokens = 0
  for (let i = 0; i < cut; i++) coveredTokens += items[i]!.tokens
  let keptTokens = 0
  for (let i = cut; i < n; i++) keptTokens += items[i]!.tokens
  return { cut, naiveCut, coveredTokens, keptTokens }
}

/** The part of an offload record the visible history reads. */
export interface CutRecord {
  readonly summaryItemId: string
  readonly cutSeq: number
}

/**
 * The model-visible history of a thread after the offloads `records` (oldest first): the latest summary item, then
 * every item with `seq` above its cut, offload summaries excepted; without records, every item. `items` in thread
 * order. Returns `summary` (or `null`) and the verbatim `items`.
 */
export const visibleHistory = <A extends { readonly id: string; readonly seq: number }>(
  items: ReadonlyArray<A>,
  records: ReadonlyArray<CutRecord>
): { readonly summary: A | null; readonly items: ReadonlyArray<A> } => {
  const latest = records.at(-1)
  if (latest === undefined) return { summary: null, items }
  const summaries = new Set(records.map((r) => r.summaryItemId))
  return {
    summary: items.find((i) => i.id === latest.summaryItemId) ?? null,
    items: items.filter((i) => i.seq > latest.cutSeq && !summaries.has(i.id))
  }
}
