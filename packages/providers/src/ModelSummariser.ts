/**
 * ModelSummariser: a `Summariser` backed by a configured provider instance (any `ProviderAdapterShape`: Anthropic
 * Messages, OpenAI Responses or Chat), for `/offload` (issue "Server-owned /offload" item 3). Each summary is one turn
 * on a fresh native thread of that instance: the prompt is a structured template that keeps the task's state (the
 * goal, decisions, what is done and what remains, files touched, open questions, and the user's standing instructions
 * verbatim) followed by the previous summary and the items, rendered as history blocks (`Render.renderItem`, with
 * their refs). The answer's text is the summary; the turn's billed tokens (its last usage report) are its cost.
 *
 * `inputWindow` (Baton tokens) is what one call may carry: the instance's window less its output limit and a margin
 * for the template and the count's error, so `/offload` chunks larger histories (ThreadOffload's refine strategy).
 *
 * It owns the prompt and reading the answer; not which items are summarised nor what the summary replaces.
 */
import { type Item, ProviderError } from "@baton/contracts"
import { Render } from "@baton/context"
import { Effect, Layer, Stream } from "effect"
import type { ProviderAdapterShape, TurnTokens } from "./ProviderAdapter.js"
import { type SummariseInput, Summariser, type SummariserShape } from "./Summariser.js"

/**
 * The instructions the summary is written under. The sections follow what users of coding agents ask a summary to
 * keep (the task's state across a summary, issue "Server-owned /offload" item 3): a model that must go on with the
 * task needs the goal, what was decided, what is done and what is not, which files it touched, what is still open, and
 * the user's standing instructions word for word.
 */
export const template = [
  "You are summarising the earlier part of a coding conversation so that the work can go on without it.",
  "Write the summary in these sections, in this order, each a short list (write \"none\" when empty):",
  "## Goal — what the user wants done, in their terms.",
  "## Decisions — what was decided and why.",
  "## Done — what has been completed.",
  "## Remaining — what is still to do, in order.",
  "## Files touched — paths, one per line, with what changed.",
  "## Open questions — what is unresolved or waiting on the user.",
  "## Standing instructions — every instruction of the user that still applies, copied word for word.",
  "Keep refs like #12 when you mention an item, so it can be read back in full. Do not invent anything. Answer with",
  "the summary only."
].join("\n")

/** The share of the window the template, the count's error and the answer's framing may take beyond the output limit. */
const marginRatio = 0.1

/** The prompt of one call: the template, then the previous summary (when there is one), then the items. */
export const prompt = (input: SummariseInput): string =>
  [
    template,
    "",
    input.previousSummary === null ? "" : `<previous_summary>\n${input.previousSummary}\n</previous_summary>\n`,
    "<conversation>",
    input.items.map((i: Item) => Render.renderItem(i)).join("\n\n"),
    "</conversation>"
  ].join("\n")

export interface ModelSummariserOptions {
  /** Overrides the input window derived from the instance (Baton tokens). */
  readonly inputWindow?: number
}

/**
 * A summariser on `adapter`. Fails a call with the adapter's `ProviderError`, or with a `protocol` one when the model
 * answered no text (the caller then changes nothing).
 */
export const make = (adapter: ProviderAdapterShape, options: ModelSummariserOptions = {}): SummariserShape => {
  const window = adapter.modelContextWindow
  const output = adapter.maxOutputTokens ?? 0
  const derived = window === null ? null : Math.max(1_000, Math.floor((window - output) * (1 - marginRatio)))
  let calls = 0
  return {
    inputWindow: options.inputWindow ?? derived,
    instance: adapter.instance,
    prices: adapter.prices,
    summarise: (input) =>
      Effect.gen(function*() {
        const { nativeRef } = yield* adapter.startThread()
        const texts: Array<string> = []
        // The turn's billed tokens: model APIs report the turn's running total, so the last report counts.
        let tokens: TurnTokens | undefined
        yield* adapter.startTurn({ nativeRef, runId: `summary-${input.threadId}-${++calls}`, prompt: prompt(input), inlineHistory: null }).pipe(
          Stream.runForEach((event) =>
            Effect.sync(() => {
              if (event._tag === "item_produced" && event.item.kind === "assistant_message") texts.push(event.item.text)
              if (event._tag === "usage_reported" && event.tokens !== undefined) tokens = event.tokens
            })
          )
        )
        const text = texts.join("\n\n").trim()
        if (text === "") {
          return yield* new ProviderError({
            provider: adapter.instance,
            operation: "summarise",
            code: "protocol",
            reason: "the summariser answered no text",
            retryable: true
          })
        }
        return { text, tokens }
      })
  }
}

/** `make` as the `Summariser` layer. */
export const layer = (adapter: ProviderAdapterShape, options: ModelSummariserOptions = {}) =>
  Layer.succeed(Summariser, make(adapter, options))
