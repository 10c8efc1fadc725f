/**
 * Selection: which items of owed history fit the budget, rendered (docs/design.md, "Selection and rendering").
 *
 * Owns: the priority order, the greedy fill by tool unit, and the guarantee that the rendered history never costs
 * more than the budget. Does not own: the budget (`Budget`), the bytes (`Render`), the decision to defer a handoff
 * whose budget is below the useful minimum, or what happens to omitted items (they stay in the thread log, readable
 * by ref; `packages/orchestration` records them).
 */
import { Effect } from "effect"
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
  /**
   * Represent older runs coherently with tool-unit stubs (docs/design.md "Offload": handoffs use the same stubs):
   * see `select`. Default `false`: units are delivered verbatim or omitted.
   */
  readonly stubs?: boolean
  /**
   * Ids of pinned items (a thread's tool-result offload control, docs/offload.md "Control"): with `stubs`, a unit
   * holding one is never a stub: it is planned verbatim where its stub would have been, or left out whole (named by
   * the pointer). Ignored without `stubs`.
   */
  readonly pinned?: ReadonlySet<string>
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
  /**
   * The omitted items whose tool unit is represented by a stub in `rendered` (a subset of `omittedItemIds`, in
   * thread order; empty without `stubs`): the model sees the call, not its output, and reads it by the stub's ref.
   */
  readonly stubbedItemIds: ReadonlyArray<string>
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
  const steps = selectSteps(input)
  for (;;) {
    const step = steps.next()
    if (step.done === true) return step.value
  }
}

/**
 * `select` as an effect that yields (`Effect.yieldNow`: under the CLI's `timeSliced` scheduler a turn of the event
 * loop once 10 ms of work went by without one) between its steps: after the stubs are worked out, after each render and after each exact count. Same input, same
 * result as `select`. For 10,000 items the selection takes 40-90 ms of synchronous work; in one piece it held every
 * socket write of the server back (a turn start owing a replacement native thread a long history: live events
 * reached the dashboard that much later, issue 13). No error.
 */
export const selectYielding = <A extends SelectableItem>(input: SelectionInput<A>): Effect.Effect<Selection<A>> =>
  Effect.suspend(() => {
    const steps = selectSteps(input)
    const go = (): Effect.Effect<Selection<A>> => {
      const step = steps.next()
      return step.done === true ? Effect.succeed(step.value) : Effect.zipRight(Effect.yieldNow(), Effect.suspend(go))
    }
    return go()
  })

/** The selection's work, a `yield` (no value) at each point where a driver may let other work run. */
type Steps<T> = Generator<void, T, void>

function* selectSteps<A extends SelectableItem>(input: SelectionInput<A>): Steps<Selection<A>> {
  const { budget, counter, items, threadId } = input
  const n = items.length
  const nothing: Selection<A> = { selected: [], omittedItemIds: items.map((item) => item.id), stubbedItemIds: [], tokens: 0, rendered: "" }
  if (n === 0 || !(budget > 0)) return nothing
  if (input.stubs === true) return yield* selectWithStubs(input, nothing)

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
  function* render(chosen: ReadonlyArray<number>, count: number): Steps<Selection<A>> {
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
    yield
    const tokens = counter.count(rendered)
    yield
    return { selected, omittedItemIds, stubbedItemIds: [], tokens, rendered }
  }

  // Everything fits by estimate: no pointer, so no room for one is needed.
  let total = 0
  for (let u = 0; u < units.length; u++) total += cost[u]!
  if (Render.envelopeTokens(counter, { threadId, omittedSeqs: [] }) + total <= budget) {
    const all = yield* render(priority, priority.length)
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
  function* refill(fit: Selection<A>, count: number): Steps<Selection<A>> {
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
    const attempt = yield* render(more, more.length)
    return attempt.tokens <= budget ? attempt : fit
  }

  return yield* fitByCount(budget, chosen.length, (k) => cost[chosen[k]!]!, (count) => render(chosen, count), refill, nothing)
}

/**
 * The counted fit shared by both selections. `chosen` steps (in priority order, `stepCost(k)` the estimated cost of
 * the k-th) are rendered as a prefix of `count` steps (`renderPrefix`). Rounds of "render, count, drop the
 * lowest-priority steps worth the overshoot"; a first fit is offered to `refill` (the slack the estimates left); if
 * the estimates keep missing, a binary search for the longest prefix below the last failing count: keeping fewer
 * steps nearly always renders fewer tokens, and whatever the search settles on was counted and fits (`nothing` if no
 * prefix does).
 */
function* fitByCount<A>(
  budget: number,
  steps: number,
  stepCost: (k: number) => number,
  renderPrefix: (count: number) => Steps<Selection<A>>,
  refill: (fit: Selection<A>, count: number) => Steps<Selection<A>>,
  nothing: Selection<A>
): Steps<Selection<A>> {
  let count = steps
  let failing = 0
  for (let round = 0; count > 0 && round < ESTIMATE_ROUNDS; round++) {
    const attempt = yield* renderPrefix(count)
    const overshoot = attempt.tokens - budget
    if (overshoot <= 0) return round === 0 ? yield* refill(attempt, count) : attempt
    failing = count
    let freed = 0
    while (count > 0 && freed < overshoot) freed += stepCost(--count)
  }
  let best: Selection<A> = nothing
  let lo = 0
  let hi = failing
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1
    const attempt = yield* renderPrefix(mid)
    if (attempt.tokens <= budget) {
      lo = mid
      best = attempt
    } else {
      hi = mid
    }
  }
  return best
}

/** A step of the stub-aware fill: bring unit `unit` to `form` (a stub, or verbatim). */
interface Step {
  readonly unit: number
  readonly form: 1 | 2
}

/** Forms of a unit in the stub-aware fill (0: left out): as its stub, verbatim. */
const STUB = 1
const VERBATIM = 2

/**
 * `select` with `stubs`: every owed run is represented before any is shown in full, and what is left out is tool
 * output first. Priority, each step taken greedily if it fits what is left (as `select`):
 *
 * 1. verbatim: the unit of the last user message, of the last assistant message, of the first user message;
 * 2. the skeleton of every run (a run starts at a user message), in three sweeps over the runs, newest run first:
 *    each run's user message verbatim; then each run's final answer (its last assistant message, when that is not in
 *    a tool unit) verbatim; then each run's tool units as stubs (`Render.stubText`: tool, short arguments, characters
 *    left out, and the ref that reads it back), newest first; a tool unit whose stub would cost as much as the unit,
 *    or that holds a pinned item (`pinned`), goes verbatim;
 * 3. every unit verbatim, newest to oldest (a stub is upgraded to its unit).
 *
 * A step costs what it adds (a stub's tokens; an upgrade the unit's tokens less its stub's). Rendering, the exact
 * count, the overshoot rounds and the refill are `select`'s; the pointer covers the items neither shown nor stubbed
 * (a stub names its own). Guarantees as `select`, and: a unit is shown whole, as its stub, or not at all.
 */
function* selectWithStubs<A extends SelectableItem>(input: SelectionInput<A>, nothing: Selection<A>): Steps<Selection<A>> {
  const { budget, counter, items, threadId } = input
  const n = items.length
  const units = ToolUnits.toolUnitIndices(items)
  const unitOf = new Int32Array(n)
  const cost = new Float64Array(units.length)
  units.forEach((unit, u) => {
    for (const i of unit) {
      unitOf[i] = u
      cost[u] += items[i]!.tokens
    }
  })

  // Everything fits by estimate: as `select`, every item verbatim and no pointer (no stub is worked out).
  let total = 0
  for (let u = 0; u < units.length; u++) total += cost[u]!
  if (Render.envelopeTokens(counter, { threadId, omittedSeqs: [] }) + total <= budget) {
    const rendered = Render.renderHistory({ threadId, items, omittedSeqs: [] })
    yield
    const tokens = counter.count(rendered)
    if (tokens <= budget) return { selected: [...items], omittedItemIds: [], stubbedItemIds: [], tokens, rendered }
    yield
  }

  // Each tool unit's stub, when it costs less than the unit.
  const stubCost = new Float64Array(units.length)
  const stubs: Array<Render.UnitStub | null> = []
  const separator = counter.count("\n\n")
  units.forEach((unit, u) => {
    const calls = unit.filter((i) => items[i]!.kind === "tool_call").map((i): Render.StubCall => {
      const call = items[i]!
      const released = unit.reduce((m, j) =>
        items[j]!.kind === "tool_result" && items[j]!.toolCallId === call.toolCallId ? m + items[j]!.text.length : m, 0)
      return { toolName: call.toolName ?? "?", argumentsText: call.text, releasedChars: released }
    })
    const stub: Render.UnitStub | null = calls.length === 0 ? null : { kind: "unit_stub", seqs: unit.map((i) => items[i]!.seq), calls }
    const tokens = stub === null ? 0 : counter.count(Render.renderBlock(stub)) + separator
    const pinned = input.pinned !== undefined && unit.some((i) => input.pinned!.has(items[i]!.id))
    stubs.push(stub !== null && tokens < cost[u]! && !pinned ? stub : null)
    stubCost[u] = tokens
  })
  yield

  const plan: Array<Step> = []
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
  for (const i of [lastUser, lastAssistant, firstUser]) if (i >= 0) plan.push({ unit: unitOf[i]!, form: VERBATIM })
  // Runs, newest first: [start, end) index ranges split at user messages. Every run's user message first, then every
  // run's final answer, then every run's tool units as stubs, so that a tight budget still represents each run.
  const starts: Array<number> = [0]
  for (let i = 1; i < n; i++) if (items[i]!.kind === "user_message") starts.push(i)
  const runs = starts.map((start, r) => [start, r + 1 < starts.length ? starts[r + 1]! : n] as const).reverse()
  for (const [start] of runs) if (items[start]!.kind === "user_message") plan.push({ unit: unitOf[start]!, form: VERBATIM })
  for (const [start, end] of runs) {
    let answer = -1
    for (let i = end - 1; i >= start && answer < 0; i--) if (items[i]!.kind === "assistant_message") answer = i
    if (answer >= 0 && stubs[unitOf[answer]!] === null) plan.push({ unit: unitOf[answer]!, form: VERBATIM })
  }
  for (const [start, end] of runs) {
    const seen = new Set<number>()
    for (let i = end - 1; i >= start; i--) {
      const u = unitOf[i]!
      if (seen.has(u) || items[i]!.kind !== "tool_call") continue
      seen.add(u)
      plan.push({ unit: u, form: stubs[u] === null ? VERBATIM : STUB })
    }
  }
  for (let u = units.length - 1; u >= 0; u--) plan.push({ unit: u, form: VERBATIM })

  const costOf = (u: number, form: number) => form === VERBATIM ? cost[u]! : form === STUB ? stubCost[u]! : 0

  /** Render the first `count` steps of `taken`: each unit in the form its last step gives it. */
  function* render(taken: ReadonlyArray<Step>, count: number): Steps<Selection<A>> {
    const form = new Uint8Array(units.length)
    for (let k = 0; k < count; k++) form[taken[k]!.unit] = Math.max(form[taken[k]!.unit]!, taken[k]!.form)
    const blocks: Array<Render.HistoryBlock> = []
    const selected: Array<A> = []
    const omittedItemIds: Array<string> = []
    const stubbedItemIds: Array<string> = []
    const omittedSeqs: Array<number> = []
    for (let i = 0; i < n; i++) {
      const u = unitOf[i]!
      if (form[u] === VERBATIM) {
        selected.push(items[i]!)
        blocks.push(items[i]!)
        continue
      }
      omittedItemIds.push(items[i]!.id)
      if (form[u] === STUB) {
        stubbedItemIds.push(items[i]!.id)
        if (units[u]![0] === i) blocks.push(stubs[u]!)
      } else {
        omittedSeqs.push(items[i]!.seq)
      }
    }
    if (blocks.length === 0) return nothing
    const rendered = Render.renderHistory({ threadId, items: blocks, omittedSeqs })
    yield
    const tokens = counter.count(rendered)
    yield
    return { selected, omittedItemIds, stubbedItemIds, tokens, rendered }
  }

  const capacity = budget - envelopeAllowance(counter, threadId, items)
  /** Greedy over `plan` from the forms of `taken[0..count)`: the steps that fit `room`, appended to a copy. */
  const fill = (taken: ReadonlyArray<Step>, count: number, room: number) => {
    const form = new Uint8Array(units.length)
    for (let k = 0; k < count; k++) form[taken[k]!.unit] = Math.max(form[taken[k]!.unit]!, taken[k]!.form)
    const out = taken.slice(0, count)
    const added: Array<number> = []
    for (const step of plan) {
      if (form[step.unit]! >= step.form) continue
      const extra = costOf(step.unit, step.form) - costOf(step.unit, form[step.unit]!)
      if (extra <= room) {
        out.push(step)
        added.push(extra)
        form[step.unit] = step.form
        room -= extra
      }
    }
    return { out, added }
  }
  const first = fill([], 0, capacity)
  const chosen = first.out
  const extra = first.added

  /** The slack a first fit left, offered once more to the steps not taken (kept only if it still fits). */
  function* refill(fit: Selection<A>, count: number): Steps<Selection<A>> {
    const more = fill(chosen, count, budget - fit.tokens)
    if (more.out.length === count) return fit
    const refilled = yield* render(more.out, more.out.length)
    return refilled.tokens <= budget ? refilled : fit
  }
  return yield* fitByCount(budget, chosen.length, (k) => extra[k]!, (count) => render(chosen, count), refill, nothing)
}
