/**
 * The token counter port: how many tokens a piece of text costs a model.
 *
 * Owns: the `TokenCounter` tag, the default counter (o200k_base, the encoding of OpenAI's GPT-4o/o-series/GPT-5
 * models) and its Layer. Does not own: per-provider calibration against reported usage (`Calibration`, a ratio
 * applied to this counter's counts where they meet a provider's), nor any caching of counts (items store their count at write time, see `Render`).
 *
 * Counting is pure and synchronous, so the shape is a plain function rather than an `Effect`: Selection calls it on
 * the hot path and a counter cannot fail.
 */
import { Context, Effect, Layer } from "effect"
import * as O200k from "./internal/O200k.js"

/**
 * A token counter.
 *
 * - `name`: a human-readable identifier of the encoding and implementation, e.g. `"o200k_base (gpt-tokenizer 3.4.0)"`,
 *   recorded next to stored counts so a change of counter is visible.
 * - `count(text)`: the exact number of tokens (a non-negative integer) `text` encodes to. Total: never throws, for any
 *   JavaScript string, including lone surrogates (encoded as U+FFFD, as UTF-8 encoders do) and text that spells a
 *   special token such as `<|endoftext|>` (counted as the plain text it is, since history is data, not control).
 * - `stretches(text)` (optional): `text` cut into consecutive parts whose counts add up to `count(text)` exactly, each
 *   short enough to count in a few milliseconds; `countYielding` hands the event loop back between them. Without
 *   it, a text is counted in one go.
 */
export interface TokenCounterShape {
  readonly name: string
  readonly count: (text: string) => number
  readonly stretches?: (text: string) => ReadonlyArray<string>
}

/** The token counter service. Implementations: `make()` (o200k_base); tests may provide their own. */
export class TokenCounter extends Context.Tag("@baton/context/TokenCounter")<TokenCounter, TokenCounterShape>() {}

/**
 * The default counter: o200k_base, counted by gpt-tokenizer 3.4.0's `countTokens` (which counts without building
 * the token array), with two repairs in `internal/O200k.ts`: pieces holding U+FEFF, which gpt-tokenizer miscounts
 * (`"\uFEFFusing System;"`: 5 instead of 3), and pre-tokens longer than 3,000 characters, on which its O(n²) merge
 * takes seconds, are merged by an exact O(n log n) byte-pair merge over the same rank table.
 *
 * Chosen by `bench/tokenizers.bench.ts` over js-tiktoken 1.0.21 (same encoding): on a real 2.4 MB pi transcript both
 * agree on every line and gpt-tokenizer is about five times faster (figures in `bench/README.md`); the property
 * tests check this counter against js-tiktoken on random text.
 * The gpt-tokenizer rank table (a 2.2 MB module) is loaded when this module is first imported.
 */
export const make = (): TokenCounterShape => ({
  name: "o200k_base (gpt-tokenizer 3.4.0)",
  count: O200k.makeCount(),
  stretches: (text) => O200k.stretchesOf(text, sliceChars)
})

/**
 * Texts up to this many UTF-16 code units are counted in one go by `countYielding`; longer ones in `stretches` of
 * about this size (a few milliseconds each: gpt-tokenizer counts 3-6 MB a second here).
 */
export const sliceChars = 16_384

/**
 * `counter.count(text)`, handing the event loop back (`Effect.yieldNow`: under `baton serve`'s scheduler a turn of
 * the loop once 10 ms of work went by without one) between the `stretches` of a long text: counting 20 MB of text
 * takes seconds, during which every other request of the server would otherwise wait. The same number as `count`.
 */
export const countYielding = (counter: TokenCounterShape, text: string): Effect.Effect<number> => {
  const stretches = counter.stretches
  if (stretches === undefined || text.length <= sliceChars) return Effect.sync(() => counter.count(text))
  return Effect.suspend(() => {
    let total = 0
    return Effect.forEach(stretches(text), (s) => Effect.zipRight(Effect.yieldNow(), Effect.sync(() => {
      total += counter.count(s)
    })), { discard: true }).pipe(Effect.map(() => total))
  })
}

/** `TokenCounter` provided by `make()`. */
export const layer: Layer.Layer<TokenCounter> = Layer.sync(TokenCounter, make)
