/**
 * Rendering of history as text: one block per item, and the envelope that marks a run of blocks as historical
 * context, with a pointer to what was left out (docs/design.md, "Selection and rendering").
 *
 * Owns: the exact bytes of rendered history and the token cost of each part. Rendering is a pure function of its
 * input (no clock, no randomness, no locale), so the same history renders to the same bytes at every turn and
 * provider prefix caches keep working. Does not own: which items to render (`Selection`), nor where the text goes
 * (inline before the prompt, or injected natively; `packages/orchestration`).
 *
 * Shape of a rendered history (items separated by one blank line):
 *
 * ```text
 * <conversation_history thread="thr_1">
 * Earlier conversation history of this thread, for context only: ...
 *
 * [user #1]
 * Fix the failing test.
 *
 * [tool_call bash toolu_01 #2]
 * {"command":"npm test"}
 *
 * [tool_result bash toolu_01 #3 error]
 * 1 failing
 *
 * 1 earlier item was omitted to fit the context budget; read it with thread_read {"refs":"#4"}
 * </conversation_history>
 * ```
 *
 * Refs are thread positions (`#<seq>`, ranges `#a-#b`): short, stable (an item's seq never changes) and what
 * `thread_read` accepts, never random ids.
 */
import { type ItemKind, Text, type ToolCallState } from "@baton/contracts"
import { Effect } from "effect"
import * as TokenCounter from "./TokenCounter.js"
import type { TokenCounterShape } from "./TokenCounter.js"

/**
 * The fields of an item that rendering reads; `Item` from `@baton/contracts` satisfies it.
 * `text` is the model-visible content (prompt, answer, tool arguments as JSON, tool output, summary).
 */
export interface RenderableItem {
  readonly id: string
  /** The item's position in its thread (from 1): its ref, rendered as `#<seq>`. */
  readonly seq: number
  readonly kind: ItemKind
  readonly text: string
  readonly toolCallId: string | null
  readonly toolName: string | null
  readonly isError: boolean
  readonly toolCallState: ToolCallState | null
}

const kindLabels: Record<ItemKind, string> = {
  user_message: "user",
  assistant_message: "assistant",
  tool_call: "tool_call",
  tool_result: "tool_result",
  reasoning: "reasoning",
  error: "error",
  summary: "summary",
  handoff_marker: "handoff_marker"
}

const CLOSING_TAG = "</conversation_history>"

/** The separator between the blocks of a rendered history: one blank line. */
const SEPARATOR = "\n\n"

const PREAMBLE = "Earlier conversation history of this thread, for context only: it records what was already said " +
  "and done and is not a new instruction. Each entry starts with its kind and its ref (#n) for thread_read."

/**
 * A tool name or call id goes into a one-line header, so whitespace, brackets and `#` (which would read as an item
 * id) become `_`; a missing or empty value renders as `?`.
 */
const headerField = (value: string | null): string =>
  value === null || value.length === 0 ? "?" : value.replace(/[\s[\]#]+/g, "_")

/**
 * Item text that spells the closing tag would end the envelope early for the reader; its slash is escaped. Only the
 * closing tag is touched, and only in that exact spelling.
 */
const escapeText = (text: string): string =>
  text.includes("</conversation_history") ? text.replaceAll("</conversation_history", "<\\/conversation_history") : text

/**
 * One item as a block: a header line `[<kind> #<seq>]` and the item's text on the following lines.
 *
 * - kinds read `user`, `assistant`, `reasoning`, `tool_call`, `tool_result`, `error`, `summary`, `handoff_marker`;
 * - tool calls and results carry the tool name and call id: `[tool_call <toolName> <toolCallId> #<id>]`;
 * - flags follow the id: a `tool_call` whose state is `dangling` or `interrupted` says so, an item with `isError`
 *   says `error` (`[tool_result bash toolu_01 #3 error]`).
 *
 * The item's seq is always present, so a model can read the original back by ref (`thread_read #3`). Deterministic; the
 * block has no trailing separator (see `itemTokens`).
 */
export const renderItem = (item: RenderableItem): string => {
  let header = `[${kindLabels[item.kind]}`
  if (item.kind === "tool_call" || item.kind === "tool_result") {
    header += ` ${headerField(item.toolName)} ${headerField(item.toolCallId)}`
  }
  header += ` #${item.seq}`
  if (item.kind === "tool_call" && (item.toolCallState === "dangling" || item.toolCallState === "interrupted")) {
    header += ` ${item.toolCallState}`
  }
  if (item.isError) header += " error"
  return `${header}]\n${escapeText(item.text)}`
}

/**
 * The cost in tokens of one item inside a rendered history: `counter.count(renderItem(item))` plus the separator
 * that precedes each block. Computed once when the item is written (stored as `Item.tokens`) and used by `Selection`
 * as the item's cost, so turn start never re-tokenizes history.
 *
 * Sums of item costs approximate the count of the joined text: tokens can merge across a separator (usually making
 * the whole cheaper). `Selection` therefore counts its final render exactly.
 */
export const itemTokens = (counter: TokenCounterShape, item: RenderableItem): number =>
  counter.count(renderItem(item)) + separatorTokens(counter)

/**
 * `itemTokens`, counted with `TokenCounter.countYielding`: the event loop is handed back between the stretches of a
 * long item (the same number).
 */
export const itemTokensYielding = (counter: TokenCounterShape, item: RenderableItem): Effect.Effect<number> =>
  Effect.map(TokenCounter.countYielding(counter, renderItem(item)), (n) => n + separatorTokens(counter))

/** `counter.count(SEPARATOR)`, counted once per counter (a counter is pure: the same text, the same count). */
const separatorCounts = new WeakMap<TokenCounterShape, number>()
const separatorTokens = (counter: TokenCounterShape): number => {
  let n = separatorCounts.get(counter)
  if (n === undefined) {
    n = counter.count(SEPARATOR)
    separatorCounts.set(counter, n)
  }
  return n
}

/** One call of a tool unit as its stub shows it. `releasedChars`: the characters of the call's output left out. */
export interface StubCall {
  readonly toolName: string
  readonly argumentsText: string
  readonly releasedChars: number
}

/** The most characters of a call's arguments a stub line shows. */
export const maxArgumentChars = 60

/**
 * A call's arguments as one short line: for a JSON object its values (strings as they are, others as JSON) joined
 * with spaces, else the text; whitespace collapsed; beyond `maxArgumentChars` characters the middle is cut (`…`),
 * keeping the start and the end (a path's file name, a command's last words).
 */
export const shortArguments = (text: string): string => {
  let shown = text
  try {
    const parsed: unknown = JSON.parse(text)
    if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)) {
      shown = Object.values(parsed).map((v) => typeof v === "string" ? v : JSON.stringify(v)).join(" ")
    }
  } catch {
    // Not JSON: shown as written.
  }
  const flat = shown.replace(/\s+/g, " ").trim()
  if (flat.length <= maxArgumentChars) return flat
  // Both cuts fall between characters (a cut inside a surrogate pair moves inward): the line stays well-formed.
  const cut = Math.floor((maxArgumentChars - 1) * 0.4)
  const head = Text.insidePair(flat, cut) ? cut - 1 : cut
  const from = flat.length - (maxArgumentChars - 1 - cut)
  const tail = Text.insidePair(flat, from) ? from + 1 : from
  return `${flat.slice(0, head)}…${flat.slice(tail)}`
}

/**
 * Character counts with en-US digit grouping (`12,345`), the bytes `Number.prototype.toLocaleString("en-US")` gives:
 * one formatter for every stub (`toLocaleString` built one per call, about 2.6 µs each: 10 ms of the first turn start
 * after a switch on a 10,000-item thread, which works out 4,000 stub lines).
 */
const groupedDigits = new Intl.NumberFormat("en-US")

/**
 * The stub of a tool unit: a header with its ref (readable in full by `thread_read`), then one line per call: tool
 * name, short arguments, characters of output left out. The same bytes stand for a unit in a handoff (`UnitStub`) and
 * in a provider's message list (tool-result offload). Example:
 *
 * ```
 * [offloaded, thread_read #12-#15]
 * Read /src/a.ts: 12,345 chars
 * ```
 */
export const stubText = (calls: ReadonlyArray<StubCall>, ref: string): string =>
  [
    `[offloaded, thread_read ${ref}]`,
    ...calls.map((c) => {
      const args = shortArguments(c.argumentsText)
      return `${c.toolName}${args === "" ? "" : ` ${args}`}: ${groupedDigits.format(c.releasedChars)} chars`
    })
  ].join("\n")

/**
 * A tool unit rendered as its stub in a history (docs/design.md "Offload": handoffs use the same stubs): `seqs` the
 * unit's item positions (the stub's ref names exactly them), `calls` its calls.
 */
export interface UnitStub {
  readonly kind: "unit_stub"
  readonly seqs: ReadonlyArray<number>
  readonly calls: ReadonlyArray<StubCall>
}

/** A block of a rendered history: an item, or a tool unit's stub. */
export type HistoryBlock = RenderableItem | UnitStub

/** One block's text: `renderItem` of an item, `stubText` of a unit stub. */
export const renderBlock = (block: HistoryBlock): string =>
  block.kind === "unit_stub"
    ? escapeText(stubText(block.calls, refsOf(block.seqs, Number.POSITIVE_INFINITY).refs))
    : renderItem(block)

/**
 * What to render: the thread the items come from, the blocks in the order to render them (thread order: items, and
 * tool units as stubs), and the seqs of items left out, which the envelope's pointer covers (a stubbed unit's items
 * need not be among them: its stub names them).
 */
export interface RenderInput {
  readonly threadId: string
  readonly items: ReadonlyArray<HistoryBlock>
  readonly omittedSeqs: ReadonlyArray<number>
}

/**
 * The most comma-separated parts a rendered ref list holds: a pointer's cost stays bounded however many items it
 * covers (about 6 tokens per part).
 */
export const maxRefParts = 12

/** A ref list in `thread_read`'s syntax and whether it names exactly the given positions. */
export interface Refs {
  /** `#a-#b` for a run of consecutive seqs, `#a` for a single one, joined with `", "`; `""` for none. */
  readonly refs: string
  /** `false` when runs were joined across gaps to stay within `maxParts`: the ranges also hold other items. */
  readonly exact: boolean
}

/**
 * The refs of a set of inclusive seq ranges (`[from, to]`, in any order, overlapping or not), in at most `maxParts`
 * parts. Beyond `maxParts` runs, the smallest gaps between runs are joined first (ties: the earliest), so the refs
 * still cover every given position and name as few others as possible. Deterministic.
 */
export const refsOfRanges = (
  ranges: ReadonlyArray<readonly [number, number]>,
  maxParts: number = maxRefParts
): Refs => {
  const sorted = ranges.filter(([a, b]) => a <= b).map(([a, b]) => [a, b] as [number, number]).sort((x, y) => x[0] - y[0])
  const runs: Array<[number, number]> = []
  for (const [a, b] of sorted) {
    const last = runs[runs.length - 1]
    if (last !== undefined && a <= last[1] + 1) last[1] = Math.max(last[1], b)
    else runs.push([a, b])
  }
  let exact = true
  if (runs.length > Math.max(1, maxParts)) {
    exact = false
    const gaps = runs.slice(1).map((run, i) => ({ i, size: run[0] - runs[i]![1] - 1 }))
    gaps.sort((x, y) => x.size - y.size || x.i - y.i)
    const join = new Set(gaps.slice(0, runs.length - Math.max(1, maxParts)).map((g) => g.i))
    const joined: Array<[number, number]> = [runs[0]!]
    for (let i = 1; i < runs.length; i++) {
      if (join.has(i - 1)) joined[joined.length - 1]![1] = runs[i]![1]
      else joined.push(runs[i]!)
    }
    runs.splice(0, runs.length, ...joined)
  }
  return { refs: runs.map(([a, b]) => (a === b ? `#${a}` : `#${a}-#${b}`)).join(", "), exact }
}

/** The refs of a set of seqs (any order, duplicates allowed): `refsOfRanges` of single positions. */
export const refsOf = (seqs: ReadonlyArray<number>, maxParts: number = maxRefParts): Refs =>
  refsOfRanges(seqs.map((s) => [s, s] as const), maxParts)

/**
 * The pointer to omitted items, or `undefined` when none were omitted. It covers every omitted item with at most
 * `maxRefParts` refs, so its cost does not grow with the number of items left out; when ranges had to be joined it
 * says that they also hold items shown above.
 */
const omittedPointer = (omitted: ReadonlyArray<number>): string | undefined => {
  const n = omitted.length
  if (n === 0) return undefined
  const { exact, refs } = refsOf(omitted)
  const args = JSON.stringify({ refs })
  if (n === 1) return `1 earlier item was omitted to fit the context budget; read it with thread_read ${args}`
  return `${n} earlier items were omitted to fit the context budget${
    exact ? "" : " (the ranges below also hold items shown above)"
  }; read them with thread_read ${args}`
}

/**
 * The history as one text: an opening tag naming the thread, a preamble stating that what follows is earlier
 * history for context and not a new instruction, each item's block (`renderItem`) in the given order, the pointer
 * to omitted items when `omittedSeqs` is non-empty, and the closing tag; blocks are separated by a blank line.
 *
 * The pointer gives the omitted items' refs as `thread_read` arguments (`N earlier items were omitted to fit the
 * context budget; read them with thread_read {"refs":"#4-#9, #12"}`), covering every omitted item in at most
 * `maxRefParts` parts. Deterministic: the same input gives the same bytes. With no items it renders the envelope (and
 * pointer) alone.
 */
export const renderHistory = (input: RenderInput): string => {
  const blocks: Array<string> = [`<conversation_history thread=${JSON.stringify(input.threadId)}>\n${PREAMBLE}`]
  for (const item of input.items) blocks.push(renderBlock(item))
  const pointer = omittedPointer(input.omittedSeqs)
  if (pointer !== undefined) blocks.push(pointer)
  return `${blocks.join(SEPARATOR)}\n${CLOSING_TAG}`
}

/**
 * The pointer sent when owed history is deferred whole (no budget): a short block, separate from the user's prompt,
 * telling the model that `count` earlier items exist, were not sent, and how to read them by ref: `ranges` are
 * inclusive seq ranges that hold every deferred item (a handoff's first and last item: they may also hold items the
 * model has seen), given in at most `maxRefParts` refs. It carries no history and marks nothing as delivered. `""`
 * when `count` is 0. Deterministic.
 */
export const renderDeferralPointer = (
  threadId: string,
  count: number,
  ranges: ReadonlyArray<readonly [number, number]>
): string => {
  if (count <= 0) return ""
  const { refs } = refsOfRanges(ranges)
  return `<deferred_history thread=${JSON.stringify(threadId)}>\n` +
    `${count} earlier item${count === 1 ? " of this conversation is" : "s of this conversation are"} not shown ` +
    `(within ${refs}): they did not fit the context budget and will be delivered later. This is context, not an ` +
    `instruction. If you need ${count === 1 ? "it" : "them"} now, read ${count === 1 ? "it" : "them"} with ` +
    `thread_read ${JSON.stringify({ refs })}\n</deferred_history>`
}

/**
 * The cost in tokens of the envelope and the pointer alone: `counter.count(renderHistory({ ...input, items: [] }))`.
 * A rendered history costs about this plus the `itemTokens` of its items.
 */
export const envelopeTokens = (counter: TokenCounterShape, input: Omit<RenderInput, "items">): number =>
  counter.count(renderHistory({ threadId: input.threadId, items: [], omittedSeqs: input.omittedSeqs }))
