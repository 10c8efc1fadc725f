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
 * [user #itm_1]
 * Fix the failing test.
 *
 * [tool_call bash toolu_01 #itm_2]
 * {"command":"npm test"}
 *
 * [tool_result bash toolu_01 #itm_3 error]
 * 1 failing
 *
 * 1 earlier item was omitted to fit the context budget; read it with thread_read {"threadId":"thr_1","itemIds":["itm_4"]}
 * </conversation_history>
 * ```
 */
import type { ItemKind, ToolCallState } from "@baton/contracts"
import type { TokenCounterShape } from "./TokenCounter.js"

/**
 * The fields of an item that rendering reads; `Item` from `@baton/contracts` satisfies it.
 * `text` is the model-visible content (prompt, answer, tool arguments as JSON, tool output, summary).
 */
export interface RenderableItem {
  readonly id: string
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
  "and done and is not a new instruction. Each entry starts with its kind and its item id (#id)."

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
 * One item as a block: a header line `[<kind> #<id>]` and the item's text on the following lines.
 *
 * - kinds read `user`, `assistant`, `reasoning`, `tool_call`, `tool_result`, `error`, `summary`, `handoff_marker`;
 * - tool calls and results carry the tool name and call id: `[tool_call <toolName> <toolCallId> #<id>]`;
 * - flags follow the id: a `tool_call` whose state is `dangling` or `interrupted` says so, an item with `isError`
 *   says `error` (`[tool_result bash toolu_01 #itm_3 error]`).
 *
 * The item id is always present, so a model can read the original back by ref (`thread_read`). Deterministic; the
 * block has no trailing separator (see `itemTokens`).
 */
export const renderItem = (item: RenderableItem): string => {
  let header = `[${kindLabels[item.kind]}`
  if (item.kind === "tool_call" || item.kind === "tool_result") {
    header += ` ${headerField(item.toolName)} ${headerField(item.toolCallId)}`
  }
  header += ` #${item.id}`
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
  counter.count(renderItem(item)) + counter.count(SEPARATOR)

/**
 * What to render: the thread the items come from, the items in the order to render them (thread order), and the ids
 * of items left out (thread order), which the envelope points to.
 */
export interface RenderInput {
  readonly threadId: string
  readonly items: ReadonlyArray<RenderableItem>
  readonly omittedItemIds: ReadonlyArray<string>
}

/** Up to this many omitted ids are listed in the pointer; beyond it only the first, the last and the count. */
const POINTER_MAX_IDS = 20

/**
 * The pointer to omitted items, or `undefined` when none were omitted. Bounded: at most `POINTER_MAX_IDS` ids, so
 * its cost does not grow with the number of items left out.
 */
const omittedPointer = (threadId: string, omitted: ReadonlyArray<string>): string | undefined => {
  const n = omitted.length
  if (n === 0) return undefined
  if (n === 1) {
    return `1 earlier item was omitted to fit the context budget; read it with thread_read ${
      JSON.stringify({ threadId, itemIds: omitted })
    }`
  }
  if (n <= POINTER_MAX_IDS) {
    return `${n} earlier items were omitted to fit the context budget; read them with thread_read ${
      JSON.stringify({ threadId, itemIds: omitted })
    }`
  }
  const first = omitted[0]!
  const last = omitted[n - 1]!
  return `${n} earlier items were omitted to fit the context budget, from #${first} to #${last}; read them with ` +
    `thread_read, e.g. ${JSON.stringify({ threadId, itemIds: [first, last] })}`
}

/**
 * The history as one text: an opening tag naming the thread, a preamble stating that what follows is earlier
 * history for context and not a new instruction, each item's block (`renderItem`) in the given order, the pointer
 * to omitted items when `omittedItemIds` is non-empty, and the closing tag; blocks are separated by a blank line.
 *
 * The pointer lists the omitted ids as `thread_read` arguments (`N earlier items were omitted to fit the context
 * budget; read them with thread_read {"threadId":"…","itemIds":[…]}`); beyond 20 ids it names the first and the
 * last and gives the count. Deterministic: the same input gives the same
 * bytes. With no items it renders the envelope (and pointer) alone.
 */
export const renderHistory = (input: RenderInput): string => {
  const blocks: Array<string> = [`<conversation_history thread=${JSON.stringify(input.threadId)}>\n${PREAMBLE}`]
  for (const item of input.items) blocks.push(renderItem(item))
  const pointer = omittedPointer(input.threadId, input.omittedItemIds)
  if (pointer !== undefined) blocks.push(pointer)
  return `${blocks.join(SEPARATOR)}\n${CLOSING_TAG}`
}

/**
 * The pointer sent when owed history is deferred whole (no budget): a short block, separate from the user's prompt,
 * telling the model that `deferredItemIds.length` earlier items exist, were not sent, and how to read them by ref
 * (`thread_read` arguments, at most 20 ids listed; beyond that the first and last with the count). It carries no
 * history and marks nothing as delivered. `""` when there is nothing deferred. Deterministic.
 */
export const renderDeferralPointer = (threadId: string, deferredItemIds: ReadonlyArray<string>): string => {
  const n = deferredItemIds.length
  if (n === 0) return ""
  const ids = n <= POINTER_MAX_IDS ? deferredItemIds : [deferredItemIds[0]!, deferredItemIds[n - 1]!]
  const range = n <= POINTER_MAX_IDS ? "" : ` (from #${deferredItemIds[0]} to #${deferredItemIds[n - 1]})`
  return `<deferred_history thread=${JSON.stringify(threadId)}>\n` +
    `${n} earlier item${n === 1 ? " of this conversation is" : "s of this conversation are"} not shown${range}: ` +
    `they did not fit the context budget and will be delivered later. This is context, not an instruction. ` +
    `If you need ${n === 1 ? "it" : "them"} now, read ${n === 1 ? "it" : "them"} with thread_read ` +
    `${JSON.stringify({ threadId, itemIds: ids })}\n</deferred_history>`
}

/**
 * The cost in tokens of the envelope and the pointer alone: `counter.count(renderHistory({ ...input, items: [] }))`.
 * A rendered history costs about this plus the `itemTokens` of its items.
 */
export const envelopeTokens = (counter: TokenCounterShape, input: Omit<RenderInput, "items">): number =>
  counter.count(renderHistory({ threadId: input.threadId, items: [], omittedItemIds: input.omittedItemIds }))
