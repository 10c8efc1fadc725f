/**
 * ThreadRead: Baton's own `thread_read` tool (docs/design.md "Provider adapters"; issue "Real model providers" item
 * 3). History a handoff omitted or deferred, or `/offload` summarised, is announced to the model by ref; this is
 * how the model reads the original back. It is executed by Baton inside the turn (a `LocalTool` of the adapter) and
 * never shown to the client as a tool call.
 *
 * Refs: `#<seq>` (an item's position in the thread, as rendered), `#<from>-#<to>` (a range, inclusive), `run:<n>`
 * (the items of the thread's run n: its prompt, answers and tool units), an item id (`itm_…`), `tool:<call id>` (a tool call and its results: the ref of a tool-result offload stub in a stateless
 * provider's message list), or `archive:<offload id>` (the originals an `/offload` summary replaced, from its archive); several separated by commas or spaces. What it returns is the items rendered as history blocks
 * (`Render.renderItem`), paged by characters (`offset`, `limit`; default 8,000, at most 32,000 characters per call)
 * so that a large original never overflows the window: the answer says which characters it holds and how to ask for
 * the next page. A range reads at most `maxItemsPerCall` items.
 *
 * It owns the tool's definition, argument parsing and paging; not when the tool is offered (TurnExecution) nor
 * whether its results may be offloaded (tool-result offload).
 */
import { type Item, Text, type ThreadId } from "@baton/contracts"
import { Render } from "@baton/context"
import { ThreadStore } from "@baton/persistence"
import type { ProviderAdapter } from "@baton/providers"
import { Effect, Either, Schema } from "effect"
import * as Span from "./internal/Span.js"

/** Characters per page when the call does not say. */
export const defaultLimit = 8_000
/** The most characters one call returns (about 8,000 tokens: a page never crowds a window). */
export const maxLimit = 32_000
/** The most items one call reads (a range beyond it is cut, and the answer says so). */
export const maxItemsPerCall = 200

/** The tool as offered to the model. The schema is a fixed object, so the same bytes go out on every request. */
export const definition: ProviderAdapter.ToolDefinition = {
  name: "thread_read",
  description: "Read earlier items of this conversation that are not in your context (omitted, deferred, " +
    "offloaded or summarised) by their ref, as given in the history: \"#12\" for one item, \"#4-#9\" for a range, " +
    "\"run:3\" for a whole run, \"tool:<call id>\" for an offloaded tool result, \"archive:<offload id>\" for what " +
    "a summary replaced, several separated by commas. Long " +
    "results are paged by characters: pass offset (and limit) to read further.",
  inputSchema: {
    type: "object",
    properties: {
      refs: { type: "string", description: "Item refs: \"#12\", \"#4-#9\", \"#4-#9, #12\", \"run:3\", \"tool:<call id>\", \"archive:<offload id>\", or item ids." },
      offset: { type: "integer", minimum: 0, description: "First character to return (default 0)." },
      limit: { type: "integer", minimum: 1, maximum: maxLimit, description: `Characters to return (default ${defaultLimit}).` }
    },
    required: ["refs"],
    additionalProperties: false
  }
}

/** The arguments the model writes (JSON text). Legacy pointers wrote `itemIds` (a list of ids): accepted too. */
const Arguments = Schema.parseJson(Schema.Struct({
  refs: Schema.optional(Schema.String),
  itemIds: Schema.optional(Schema.Array(Schema.String)),
  threadId: Schema.optional(Schema.String),
  offset: Schema.optional(Schema.Int.pipe(Schema.nonNegative())),
  limit: Schema.optional(Schema.Int.pipe(Schema.positive()))
}))

/** One parsed ref: a seq range (inclusive), a run's number in its thread, an item id, or a tool call id. */
export type Ref =
  | { readonly _tag: "range"; readonly from: number; readonly to: number }
  | { readonly _tag: "run"; readonly seq: number }
  | { readonly _tag: "id"; readonly id: string }
  | { readonly _tag: "tool"; readonly toolCallId: string }
  | { readonly _tag: "archive"; readonly offloadId: string }

/**
 * Parses `refs` ("#12", "#4-#9", "#4-9", "run:3", "itm_x", "tool:toolu_x", separated by commas or spaces); `Left`
 * names the bad part.
 */
export const parseRefs = (refs: string): Either.Either<ReadonlyArray<Ref>, string> => {
  const out: Array<Ref> = []
  for (const part of refs.split(/[\s,]+/).filter((p) => p.length > 0)) {
    const range = /^#(\d+)(?:-#?(\d+))?$/.exec(part)
    if (range !== null) {
      const from = Number(range[1])
      const to = range[2] === undefined ? from : Number(range[2])
      if (from < 1 || to < from) return Either.left(`"${part}" is not a range of item positions (#from-#to, from 1, from <= to)`)
      out.push({ _tag: "range", from, to })
    } else if (/^run:\d+$/.test(part)) {
      const seq = Number(part.slice("run:".length))
      if (seq < 1) return Either.left(`"${part}" is not a run (runs are numbered from 1)`)
      out.push({ _tag: "run", seq })
    } else if (/^tool:\S+$/.test(part)) {
      // Any call id a provider gave (OpenAI-compatible servers send ids like "functions.read_file:0"); the split
      // above already cut at spaces and commas.
      out.push({ _tag: "tool", toolCallId: part.slice("tool:".length) })
    } else if (/^archive:[A-Za-z]+_[A-Za-z0-9._-]+$/.test(part)) {
      out.push({ _tag: "archive", offloadId: part.slice("archive:".length) })
    } else if (/^[A-Za-z]+_[A-Za-z0-9._-]+$/.test(part)) {
      out.push({ _tag: "id", id: part })
    } else {
      return Either.left(`"${part}" is not a ref (use "#12", "#4-#9", "run:3", "tool:<call id>", "archive:<offload id>" or an item id)`)
    }
  }
  return out.length === 0 ? Either.left("no ref given") : Either.right(out)
}

/**
 * A page of `text`: the characters `offset .. offset + limit` (never half a surrogate pair: `Text.characterWindow`),
 * and a line telling the reader where the next page starts (or that this is the end).
 */
export const page = (text: string, offset: number, limit: number, again: (offset: number) => string) => {
  const { end, start } = Text.characterWindow(text, offset, limit)
  const more = end < text.length ? `\n[characters ${start}-${end} of ${text.length}; the next page: ${again(end)}]` : `\n[characters ${start}-${end} of ${text.length}; end]`
  return `${text.slice(start, end)}${more}`
}

export class ThreadRead extends Effect.Service<ThreadRead>()("@baton/orchestration/ThreadRead", {
  effect: Effect.gen(function*() {
    const store = yield* ThreadStore

    /** The items `refs` name in `threadId`, thread order, at most `maxItemsPerCall`; whether the cap cut some. */
    const itemsOf = (threadId: ThreadId, refs: ReadonlyArray<Ref>) =>
      Effect.gen(function*() {
        const found = new Map<string, Item>()
        let archived = 0
        for (const ref of refs) {
          if (found.size >= maxItemsPerCall) break
          const items = ref._tag === "range"
            ? yield* store.listItemsInRange(threadId, ref.from, Math.min(ref.to, ref.from + maxItemsPerCall - 1))
            : ref._tag === "run"
            ? yield* Effect.flatMap(
              store.listRunsPage(threadId, ref.seq - 1, 1),
              (runs) => runs[0]?.seq === ref.seq ? store.listItemsOfRuns([runs[0].id]) : Effect.succeed([])
            )
            : ref._tag === "tool"
            ? yield* store.listItemsOfToolCalls(threadId, [ref.toolCallId])
            : ref._tag === "archive"
            ? yield* Effect.flatMap(store.listOffloadArchive(threadId, ref.offloadId, 0, maxItemsPerCall), (page) => {
              archived += page.total
              return store.getItems(page.entries.map((e) => e.itemId))
            })
            : (yield* store.getItems([ref.id as Item["id"]])).filter((i) => i.threadId === threadId)
          for (const i of items) if (found.size < maxItemsPerCall) found.set(i.id, i)
        }
        const asked = archived + refs.reduce((n, r) => n + (r._tag === "range" ? r.to - r.from + 1 : r._tag === "archive" ? 0 : 1), 0)
        return { items: [...found.values()].sort((a, b) => a.seq - b.seq), cut: asked > maxItemsPerCall && found.size >= maxItemsPerCall }
      })

    /**
     * Answers one `thread_read` call on `threadId` (`args`: the JSON text the model wrote). Never fails: a bad call
     * (arguments, a ref that is no ref, nothing matching) is answered with an error text the model can act on and
     * `isError` (sent as a failed tool result: Anthropic `is_error`, OpenAI's `Error: ` marker); a storage failure
     * is answered as "could not read", also an error, and logged.
     */
    const answer = Span.fn("ThreadRead.answer")(function*(threadId: ThreadId, args: string) {
      const failed = (output: string): ProviderAdapter.LocalToolAnswer => ({ output, isError: true })
      const parsed = Schema.decodeUnknownEither(Arguments)(args)
      if (Either.isLeft(parsed)) return failed(`thread_read: the arguments are not {"refs": "...", "offset"?: n, "limit"?: n}`)
      const { offset = 0, limit = defaultLimit } = parsed.right
      const refsText = parsed.right.refs ?? (parsed.right.itemIds ?? []).join(",")
      const refs = parseRefs(refsText)
      if (Either.isLeft(refs)) return failed(`thread_read: ${refs.left}`)
      const found = yield* Effect.either(itemsOf(threadId, refs.right))
      if (Either.isLeft(found)) {
        yield* Effect.logWarning(`thread_read on ${threadId} could not read ${refsText}`, found.left)
        return failed("thread_read: could not read the thread's history right now; try again")
      }
      const { items, cut } = found.right
      if (items.length === 0) return failed(`thread_read: no item of this conversation matches ${refsText}`)
      const text = items.map((i) => Render.renderItem(i)).join("\n\n") +
        (cut ? `\n\n[only the first ${maxItemsPerCall} items were read; ask for the rest by range]` : "")
      const size = Math.min(limit, maxLimit)
      const output = page(text, offset, size, (next) => `thread_read ${JSON.stringify({ refs: refsText, offset: next, limit: size })}`)
      return { output, isError: false } satisfies ProviderAdapter.LocalToolAnswer
    })

    /** `answer`'s text alone (failed or not). */
    const read = (threadId: ThreadId, args: string) => Effect.map(answer(threadId, args), (a) => a.output)

    /** The tool for turns of `threadId`, as an adapter's `LocalTool`. */
    const tool = (threadId: ThreadId): ProviderAdapter.LocalTool => ({
      definition,
      execute: (call) => answer(threadId, call.arguments)
    })

    return { answer, read, tool }
  })
}) {}
