/**
 * ScriptedSummariser: a deterministic, offline `Summariser` — a bounded digest, not a model. Each user request of
 * the summarised items becomes one line with its outcome (the last assistant answer or error that followed it, and
 * how many tool calls it took); the previous summary's lines come first. The text is capped to `maxTokens` by
 * dropping the oldest lines (and saying how many were dropped), so a chain of offloads stays bounded.
 *
 * Test controls: `failWith(reason)` makes every later call fail with a `ProviderError` (`code: "unavailable"`,
 * retryable) until `failWith(null)`; `calls` records every input it was given.
 *
 * Imperfections (the simulator's summariser truth): `inputWindow` is enforced — an input larger than it fails as
 * an overflow (`prompt is too long: N tokens > M maximum`), as a model would; `verbose` decides per call (1-based)
 * whether it answers with more text than it was given (the whole input echoed back twice under the header), as a
 * model that ignores its instructions does.
 */
import { type Item, ProviderError } from "@baton/contracts"
import type { TokenCounter } from "@baton/context"
import { Effect, Layer } from "effect"
import { type SummariseInput, Summariser, type SummariserShape } from "./Summariser.js"

export interface ScriptedSummariserConfig {
  /** The largest summary, in tokens of `counter`. Default 2,000 (the scripted provider's compaction summary size). */
  readonly maxTokens?: number
  /** Characters kept of a request or an outcome in its line. Default 120. */
  readonly lineChars?: number
  /** The input window it declares and enforces, in Baton's tokens (see `SummariserShape.inputWindow`). Default none. */
  readonly inputWindow?: number | null
  /** Whether call `n` (1-based) answers verbosely (longer than its input). Default never. */
  readonly verbose?: (call: number) => boolean
  /**
   * Runs inside every call (1-based `call`) before it answers: the summary is being written while the hook runs
   * (the simulator issues a racing command from here). Default none.
   */
  readonly onCall?: (call: number) => Effect.Effect<void>
}

export interface ScriptedSummariser extends SummariserShape {
  /** Every input the summariser was called with, in order (failed calls included). */
  readonly calls: ReadonlyArray<SummariseInput>
  /** Fail every later call with `reason` (`null`: succeed again). */
  readonly failWith: (reason: string | null) => void
}

const HEADER = "Summary of earlier conversation (older items are readable by id):"

/** The first line of `text`, whitespace-collapsed, cut to `max` characters with an ellipsis. */
const clip = (text: string, max: number) => {
  const line = text.split("\n").find((l) => l.trim().length > 0)?.trim().replace(/\s+/g, " ") ?? ""
  return line.length <= max ? line : `${line.slice(0, max - 1)}…`
}

/** One line per user request: `- request: … -> outcome: … (n tool calls)`. Items before the first request group as one. */
const digestLines = (items: ReadonlyArray<Item>, lineChars: number): Array<string> => {
  const lines: Array<string> = []
  let request: string | null = null
  let outcome: string | null = null
  let calls = 0
  let open = false
  const flush = () => {
    if (!open) return
    const tools = calls === 0 ? "" : ` (${calls} tool call${calls === 1 ? "" : "s"})`
    lines.push(`- request: ${request ?? "(earlier context)"} -> outcome: ${outcome ?? "(none recorded)"}${tools}`)
  }
  for (const item of items) {
    if (item.kind === "user_message") {
      flush()
      request = clip(item.text, lineChars)
      outcome = null
      calls = 0
      open = true
      continue
    }
    if (item.kind === "reasoning" || item.kind === "handoff_marker") continue
    open = true
    if (item.kind === "tool_call") calls++
    else if (item.kind === "assistant_message" || item.kind === "summary") outcome = clip(item.text, lineChars)
    else if (item.kind === "error") outcome = `error: ${clip(item.text, lineChars - 7)}`
  }
  flush()
  return lines
}

/** Builds a scripted summariser counting tokens with `counter`. */
export const make = (counter: TokenCounter.TokenCounterShape, config: ScriptedSummariserConfig = {}): ScriptedSummariser => {
  const maxTokens = config.maxTokens ?? 2_000
  const lineChars = config.lineChars ?? 120
  const calls: Array<SummariseInput> = []
  let failure: string | null = null
  const inputWindow = config.inputWindow ?? null
  return {
    inputWindow,
    calls,
    failWith: (reason) => void (failure = reason),
    summarise: (input) =>
      Effect.zipRight(
        Effect.suspend(() => config.onCall?.(calls.length + 1) ?? Effect.void),
        answer(input)
      )
  }
  function answer(input: SummariseInput) {
    return Effect.suspend(() => {
        calls.push(input)
        const inputTokens = (input.previousSummary === null ? 0 : counter.count(input.previousSummary)) +
          input.items.reduce((n, i) => n + i.tokens, 0)
        if (inputWindow !== null && inputTokens > inputWindow) {
          return Effect.fail(new ProviderError({
            provider: "scripted-summariser",
            operation: "summarise",
            reason: `prompt is too long: ${inputTokens} tokens > ${inputWindow} maximum`,
            code: "overflow",
            retryable: false
          }))
        }
        if (config.verbose?.(calls.length) === true) {
          const echoed = [...(input.previousSummary === null ? [] : [input.previousSummary]), ...input.items.map((i) => i.text)].join("\n\n")
          return Effect.succeed({ text: `${HEADER}\n${echoed}\n\nIn other words, restated:\n${echoed}` })
        }
        if (failure !== null) {
          return Effect.fail(
            new ProviderError({ provider: "scripted-summariser", operation: "summarise", reason: failure, code: "unavailable", retryable: true })
          )
        }
        const previous = input.previousSummary === null
          ? []
          : input.previousSummary.split("\n").filter((l) => l !== HEADER && l.trim().length > 0)
        let lines = [...previous, ...digestLines(input.items, lineChars)]
        const text = (dropped: number) =>
          [HEADER, ...(dropped === 0 ? [] : [`- (${dropped} older line(s) dropped to fit ${maxTokens} tokens)`]), ...lines].join("\n")
        // Drop the oldest lines first; an earlier "dropped" note is itself an old line and goes first.
        let dropped = 0
        while (lines.length > 1 && counter.count(text(dropped)) > maxTokens) {
          const head = lines[0]!
          const note = /^- \((\d+) older line\(s\) dropped/.exec(head)
          dropped += note === null ? 1 : Number(note[1])
          lines = lines.slice(1)
        }
        return Effect.succeed({ text: text(dropped) })
      })
  }
}

/** A `Summariser` layer over `summariser`. */
export const layer = (summariser: SummariserShape): Layer.Layer<Summariser> => Layer.succeed(Summariser, summariser)
