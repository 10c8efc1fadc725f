/**
 * ProviderFailure: reads what a provider's failure means when its code does not say it. Real APIs signal a context
 * overflow in several ways: a typed code (`context_length_exceeded`, the stop reason `model_context_window_exceeded`)
 * or only the text of a plain HTTP 400 (`prompt is too long: 208310 tokens > 200000 maximum`; "This model's maximum
 * context length is 8192 tokens. However, your messages resulted in 8227 tokens."). An adapter that could not map the
 * error (or an OpenAI-compatible server that only sends text) reports `refused` or `protocol` with the provider's
 * text; Baton must still treat it as the overflow it is, or it retries a request that can never fit.
 *
 * It owns the recognition of those texts and nothing else: what to do about an overflow is TurnExecution's.
 * The message patterns are the ones listed in `../shared/provider-fixtures/SOURCES.md` (seen in the field) plus the
 * codes the providers document.
 */
import { ProviderError } from "@baton/contracts"

/** The sizes an overflow message carries: the request's tokens and the window, in the provider's units. */
export interface OverflowSizes {
  readonly requestedTokens: number | null
  readonly maximumTokens: number | null
}

const digits = (text: string | undefined) => (text === undefined ? null : Number(text.replace(/,/g, "")))

/** Overflow texts, most specific first; groups: requested, maximum (either may be absent). */
const patterns: ReadonlyArray<{ readonly re: RegExp; readonly requested: number | null; readonly maximum: number | null }> = [
  // Anthropic: "prompt is too long: 208310 tokens > 200000 maximum"
  { re: /prompt is too long:\s*([\d,]+)\s*tokens?\s*>\s*([\d,]+)\s*maximum/i, requested: 1, maximum: 2 },
  // OpenAI: "This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens."
  { re: /maximum context length is\s*([\d,]+)\s*tokens?.*?resulted in\s*([\d,]+)\s*tokens?/is, requested: 2, maximum: 1 },
  // OpenAI-compatible servers (vLLM): "... maximum context length is 4096 tokens ... you requested 5000 tokens"
  { re: /maximum context length is\s*([\d,]+)\s*tokens?.*?requested\s*([\d,]+)\s*tokens?/is, requested: 2, maximum: 1 },
  // llama.cpp's server: "the request exceeds the available context size, try increasing it" (its sizes are the JSON
  // fields n_prompt_tokens and n_ctx, not in the text); Anthropic when input and output room together do not fit:
  // "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or
  // `max_tokens` and try again" (no sizes taken: the input alone may fit).
  // Codes and phrases with no sizes.
  { re: /context_length_exceeded|model_context_window_exceeded|exceed_context_size_error|exceeds the available context size|exceed context limit|context window exceeded|exceeds? the (model's )?context (window|length)|input is too long|prompt is too long|contextWindowExceeded/i, requested: null, maximum: null }
]

/**
 * The overflow a provider's text describes, or `null` when the text is not an overflow. Sizes are `null` where the
 * text does not give them.
 */
export const overflowOf = (text: string): OverflowSizes | null => {
  for (const p of patterns) {
    const m = p.re.exec(text)
    if (m === null) continue
    return {
      requestedTokens: p.requested === null ? null : digits(m[p.requested]),
      maximumTokens: p.maximum === null ? null : digits(m[p.maximum])
    }
  }
  return null
}

/**
 * `error` with its code corrected where its text proves a context overflow the adapter did not classify (`refused`
 * or `protocol` with an overflow message). Every other error is returned unchanged.
 */
export const classify = (error: ProviderError): ProviderError => {
  if (error.code !== "refused" && error.code !== "protocol") return error
  const sizes = overflowOf(error.reason)
  if (sizes === null) return error
  return new ProviderError({
    provider: error.provider,
    operation: error.operation,
    reason: error.reason,
    code: "overflow",
    retryable: false,
    ...(sizes.requestedTokens === null ? {} : { requestedTokens: sizes.requestedTokens }),
    ...(sizes.maximumTokens === null ? {} : { limitTokens: sizes.maximumTokens }),
    ...(error.httpStatus === undefined ? {} : { httpStatus: error.httpStatus })
  })
}

/**
 * The size (provider tokens) of the request `error` rejected as over the window: its `requestedTokens`, else the size
 * its text gives (an adapter that classified the overflow by its code may leave the field empty); `null` when `error`
 * is no overflow (`classify`) or gives no size.
 */
export const requestedTokensOf = (error: ProviderError): number | null => {
  const classified = classify(error)
  if (classified.code !== "overflow") return null
  return classified.requestedTokens ?? overflowOf(classified.reason)?.requestedTokens ?? null
}
