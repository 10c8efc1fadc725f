/**
 * ItemLog: appends items to a thread's log. It assigns ids, the thread order (`seq`), the time and the token count
 * of each item's rendered form (so turn start never re-tokenizes history), and records each append as one
 * `items.appended` event in the caller's transaction. Items are never edited or deleted.
 */
import type { Item, ItemKind, NewThreadEvent, RunId, ThreadId, ToolCallState } from "@baton/contracts"
import { Render, TokenCounter } from "@baton/context"
import { ThreadStore } from "@baton/persistence"
import { DateTime, Effect } from "effect"
import { IdGenerator } from "./IdGenerator.js"
import * as Span from "./internal/Span.js"

/** The fields of an item the caller supplies; ids, order, time and token count are assigned by `append`. */
export interface NewItem {
  readonly kind: ItemKind
  readonly text: string
  readonly toolCallId: string | null
  readonly toolName: string | null
  readonly messageId: string | null
  readonly isError: boolean
  readonly toolCallState: ToolCallState | null
  /**
   * The item's token count, when the caller counted it ahead (`ItemLog.countAhead`), outside its unit of work: what
   * `stage` would count (`Render.itemTokens` of the item as stored, `seq` 0). Absent: `stage` counts it.
   */
  readonly tokens?: number
}

/** Whether `a` and `b` render alike (`Render.renderItem` reads these fields): the same count. */
const rendersAlike = (a: NewItem, b: NewItem): boolean =>
  a.text === b.text && a.kind === b.kind && a.toolName === b.toolName && a.toolCallId === b.toolCallId &&
  a.isError === b.isError && a.toolCallState === b.toolCallState

/**
 * `items` with the counts `ahead` holds for items that render alike (`ahead`: items `countAhead` returned, perhaps
 * built again since from the same request); the others as they are. For a caller that can only tell under its unit
 * of work's lock which items it stores (the gateway: the request's messages after what its conversation already
 * holds), having counted the likely ones before it. `items` is matched to `ahead` from the end (the usual case: the
 * same items, or their newest part), then each item not matched so is looked up among `ahead`'s long items by its
 * text's length. Linear in the items.
 */
export const withCountsFrom = (ahead: ReadonlyArray<NewItem>, items: ReadonlyArray<NewItem>): ReadonlyArray<NewItem> => {
  if (ahead.length === 0 || items.length === 0) return items
  const out = [...items]
  // From the end, while the two render alike.
  let matched = 0
  while (matched < out.length && matched < ahead.length) {
    const a = ahead[ahead.length - 1 - matched]!
    const i = out[out.length - 1 - matched]!
    if (!rendersAlike(a, i)) break
    if (i.tokens === undefined && a.tokens !== undefined) out[out.length - 1 - matched] = { ...i, tokens: a.tokens }
    matched++
  }
  if (matched === out.length) return out
  // The rest: long items only (few, and the only ones that take long to count), by their text's length.
  const byLength = new Map<number, Array<NewItem>>()
  for (const a of ahead) {
    if (a.tokens === undefined || a.text.length <= TokenCounter.sliceChars) continue
    const same = byLength.get(a.text.length)
    if (same === undefined) byLength.set(a.text.length, [a])
    else same.push(a)
  }
  if (byLength.size === 0) return out
  for (let k = 0; k < out.length - matched; k++) {
    const i = out[k]!
    if (i.tokens !== undefined) continue
    const found = byLength.get(i.text.length)?.find((a) => rendersAlike(a, i))
    if (found !== undefined) out[k] = { ...i, tokens: found.tokens! }
  }
  return out
}

/** How many items `countAhead` counts in one go before it hands the event loop back. */
const countAheadBatch = 256

export class ItemLog extends Effect.Service<ItemLog>()("@baton/orchestration/ItemLog", {
  effect: Effect.gen(function*() {
    const store = yield* ThreadStore
    const ids = yield* IdGenerator
    const counter = yield* TokenCounter.TokenCounter

    /**
     * `items` counted now, each count set as its `tokens` (`Render.itemTokens` of the item with `seq` 0, as `stage`
     * counts it), for callers to run before their unit of work: `stage` then takes the counts as given. Counted: each
     * long item (text over `TokenCounter.sliceChars` characters, the event loop handed back between its stretches),
     * and every item when there are more than 256 (the event loop handed back every 256). A request that stored 20
     * MB of text, or 100,000 messages, counted them for seconds under its unit of work's lock, and on SQLite (one
     * connection) every other thread's writes waited that out. A few short items are left to `stage` (a synchronous
     * count of microseconds).
     */
    const countAhead = (items: ReadonlyArray<NewItem>): Effect.Effect<ReadonlyArray<NewItem>> => {
      const all = items.length > countAheadBatch
      const wanted = (p: NewItem) => p.tokens === undefined && (all || p.text.length > TokenCounter.sliceChars)
      if (!items.some(wanted)) return Effect.succeed(items)
      return Effect.suspend(() => {
        const out = [...items]
        return Effect.forEach(out, (p, k) => {
          if (!wanted(p)) return Effect.void
          const renderable = { ...p, id: "", seq: 0 }
          if (p.text.length > TokenCounter.sliceChars) {
            return Effect.map(Render.itemTokensYielding(counter, renderable), (tokens) => void (out[k] = { ...p, tokens }))
          }
          out[k] = { ...p, tokens: Render.itemTokens(counter, renderable) }
          return k % countAheadBatch === countAheadBatch - 1 ? Effect.yieldNow() : Effect.void
        }, { discard: true }).pipe(Effect.as(out as ReadonlyArray<NewItem>))
      })
    }

    /**
     * `append` without its event: the items are written and their `items.appended` event is returned for the caller
     * to append (in the same unit of work, with its others: `ThreadStore.appendEvents`); `null` for no items.
     */
    const stage = Span.fn("ItemLog.stage")(function*(
      threadId: ThreadId,
      runId: RunId | null,
      items: ReadonlyArray<NewItem>
    ) {
      if (items.length === 0) return { items: [] as ReadonlyArray<Item>, event: null }
      const createdAt = yield* DateTime.now
      // Counted with the event loop handed back between long texts' stretches and every 256 items: a request
      // storing 20 MB of text or 300,000 messages counts for seconds, which every other request waited out.
      const built: Array<Item> = []
      for (const p of items) {
        if (built.length % 256 === 255) yield* Effect.yieldNow()
        const base = {
          id: ids.next("itm") as Item["id"],
          threadId,
          runId,
          // Assigned by the insert (the thread's last item's plus the place), set below.
          seq: 0,
          kind: p.kind,
          text: p.text,
          toolCallId: p.toolCallId as Item["toolCallId"],
          toolName: p.toolName,
          messageId: p.messageId,
          isError: p.isError,
          toolCallState: p.toolCallState,
          createdAt
        }
        // Counted ahead by the caller (outside its unit of work), else here; only a long text takes the yielding count
        // (the same number): a turn's usual items stay synchronous.
        const tokens = p.tokens ??
          (base.text.length > TokenCounter.sliceChars ? yield* Render.itemTokensYielding(counter, base) : Render.itemTokens(counter, base))
        built.push({ ...base, tokens })
      }
      // One statement: the rows and their `seq` (after the thread's last item), no read of the last `seq` first.
      const first = yield* store.insertItemsAfterLast(threadId, built)
      const stored: Array<Item> = built.map((item, i) => ({ ...item, seq: first + i }))
      const event: NewThreadEvent = {
        threadId,
        type: "items.appended",
        payload: { runId, itemIds: stored.map((i) => i.id), fromSeq: first, toSeq: first + stored.length - 1 }
      }
      return { items: stored as ReadonlyArray<Item>, event }
    })

    /**
     * Appends `items` (in order) to the thread, attributed to `runId`, with one `items.appended` event
     * `{runId, itemIds, fromSeq, toSeq}`. Returns the stored items (nothing is written for no items).
     */
    const append = (threadId: ThreadId, runId: RunId | null, items: ReadonlyArray<NewItem>) =>
      Effect.flatMap(stage(threadId, runId, items), ({ event, items }) => (event === null ? Effect.succeed(items) : Effect.as(store.appendEvent(event), items))).pipe(
        Span.withSpan("ItemLog.append")
      )

    return { append, countAhead, stage }
  })
}) {}
