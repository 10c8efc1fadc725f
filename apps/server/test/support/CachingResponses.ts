/**
 * A loopback OpenAI Responses model for the gateway's cost tests: a scripted model (what it answers is computed from
 * each request) whose usage is computed honestly from the request, as OpenAI's automatic prompt caching bills it.
 *
 * The cache model (platform.openai.com/docs/guides/prompt-caching): a request's prompt is its segments in order, the
 * tools and instructions first (`{"instructions","tools"}` as JSON), then each `input` item (its JSON as sent); its
 * tokens are Baton's o200k counts of those texts. `cached_tokens` is the longest run of leading segments equal to the
 * leading segments of an earlier request (any earlier one: the cache keeps them), in tokens, rounded down to a
 * multiple of 128, and 0 for a prompt under 1,024 tokens (OpenAI caches from 1,024 tokens on, in 128-token steps).
 * `input_tokens` is the prompt's tokens (cached included), as OpenAI reports them. No expiry (the tests run in
 * minutes, under OpenAI's 5-10 minutes of retention).
 */
import { TokenCounter } from "@baton/context"
import { frame, type Received, type Reply, sse } from "../../../../packages/providers/test/support/Loopback.js"

/** What one request was billed: prompt tokens (cached included) and cached tokens. */
export interface Billed {
  readonly input: number
  readonly cached: number
}

/** The model: `reply` answers a request (the output items the script gives, with the honest usage); `billed` per request. */
export interface CachingModel {
  readonly reply: (request: Received) => Reply
  readonly billed: Array<Billed>
}

/** Weighted input of `billed` at `ratio` (cache read price / input price): uncached x 1 + cached x ratio, in input tokens. */
export const weighted = (billed: ReadonlyArray<Billed>, ratio: number) => billed.reduce((n, b) => n + (b.input - b.cached) + ratio * b.cached, 0)

/** The prompt segments of a Responses request body (see the module docblock). */
export const segmentsOf = (body: Record<string, unknown>): ReadonlyArray<string> => [
  JSON.stringify({ instructions: body.instructions ?? null, tools: body.tools ?? null }),
  ...(Array.isArray(body.input) ? body.input.map((i) => JSON.stringify(i)) : [JSON.stringify(body.input ?? null)])
]

/** The model over `script` (the output items answering a request). */
export const make = (script: (body: Record<string, unknown>) => ReadonlyArray<Record<string, unknown>>): CachingModel => {
  const counter = TokenCounter.make()
  const counts = new Map<string, number>()
  const count = (text: string) => {
    let n = counts.get(text)
    if (n === undefined) counts.set(text, n = counter.count(text))
    return n
  }
  const earlier: Array<ReadonlyArray<string>> = []
  const billed: Array<Billed> = []
  let responses = 0
  const reply = (request: Received): Reply => {
    const body = JSON.parse(request.body) as Record<string, unknown>
    const segments = segmentsOf(body)
    const tokens = segments.map(count)
    const total = tokens.reduce((n, t) => n + t, 0)
    let shared = 0
    for (const e of earlier) {
      let k = 0
      let sum = 0
      while (k < e.length && k < segments.length && e[k] === segments[k]) sum += tokens[k++]!
      shared = Math.max(shared, sum)
    }
    earlier.push(segments)
    const cached = total < 1_024 ? 0 : Math.floor(shared / 128) * 128
    billed.push({ input: total, cached })
    const items = script(body)
    const id = `resp_${++responses}`
    const lines: Array<object> = [{ type: "response.created", response: { id } }]
    items.forEach((item, i) => {
      lines.push({ type: "response.output_item.added", output_index: i, item }, { type: "response.output_item.done", output_index: i, item })
    })
    lines.push({
      type: "response.completed",
      response: {
        id,
        usage: { input_tokens: total, input_tokens_details: { cached_tokens: cached }, output_tokens: 20, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: total + 20 }
      }
    })
    return sse(frame("openai-responses", lines.map((l) => JSON.stringify(l))))
  }
  return { reply, billed }
}
