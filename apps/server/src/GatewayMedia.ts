/**
 * GatewayMedia: how the gateway counts the tokens of a message that holds an inline image.
 *
 * The gateway sizes what it forwards by Baton's counter over each message's JSON (the offload plan, the fit of a
 * switched request, `thread_read` answers, `count_tokens` on a switch). An inline image's payload is base64 text
 * that the model never reads as text: a 1 MB screenshot counted as its JSON is about 700,000 tokens, which made one
 * image read as a conversation several times over any window (the offload plan flushed every eligible unit at once,
 * a switched request did not fit), and its count alone took seconds. The model is billed for an image by its pixels.
 *
 * Here an image part counts as the JSON of the part with its payload left out, plus `imageTokens`. The parts known:
 * - Anthropic Messages: `{type: "image", source: {type: "base64", media_type: "image/…", data}}`;
 * - OpenAI Chat Completions: `{type: "image_url", image_url: {url: "data:image/…;base64,…"}}`;
 * - OpenAI Responses: `{type: "input_image", image_url: "data:image/…;base64,…"}`.
 * Anything else is counted as its JSON, as before: a document (a PDF's pages cost by their text, which its size
 * bounds better than a constant), audio, an image by URL (its URL is short), and base64 text inside a tool result's
 * text (text the model does read).
 */
import { GatewayMemo } from "@baton/orchestration"

/**
 * Tokens counted for one inline image: Anthropic's documented ceiling. Anthropic counts an image as about
 * `width x height / 750` tokens and scales one whose long edge is over 1,568 pixels (or over about 1.15 megapixels)
 * down first, so an image costs at most about 1,600 tokens (Anthropic, "Vision", "Calculate image costs"). OpenAI's
 * high-detail images on GPT-4o cost at most 85 + 170 x 8 tiles = 1,445 (OpenAI, "Images and vision").
 */
export const imageTokens = 1_600

const isImageDataUrl = (value: unknown): boolean => typeof value === "string" && value.startsWith("data:image/")

/**
 * `JSON.stringify`'s replacer: an image part's payload as `""` (`this` is the object holding `key`), counted in
 * `found`. A Chat Completions part is recognised at its `image_url` object (the part's `type` beside it), not at any
 * `url` key: a data URL the model wrote in a tool call's input (`{"url": "data:image/…"}`) is text it reads.
 */
const dropPayloads = (found: { images: number }) =>
  function(this: unknown, key: string, value: unknown): unknown {
    const holder = this as Record<string, unknown>
    if (
      (key === "data" && holder.type === "base64" && typeof holder.media_type === "string" && holder.media_type.startsWith("image/") && typeof value === "string") ||
      (key === "image_url" && holder.type === "input_image" && isImageDataUrl(value))
    ) {
      found.images += 1
      return ""
    }
    if (key === "image_url" && holder.type === "image_url" && typeof value === "object" && value !== null && isImageDataUrl((value as Record<string, unknown>).url)) {
      found.images += 1
      return { ...value, url: "" }
    }
    return value
  }

/** `value`'s JSON with every inline image's payload left out, and how many images there were. */
const withoutImages = GatewayMemo.memo((value: object): { readonly text: string; readonly images: number } => {
  const found = { images: 0 }
  const text = JSON.stringify(value, dropPayloads(found))
  return { text, images: found.images }
})

/**
 * What `jsonTokens` counts of `value` with the counter: its JSON text (`GatewayMemo.json`, kept for an interned
 * value), or, when that text holds base64, the text with inline images' payloads left out; and the images left out.
 * For a value whose JSON is `undefined` (a function, `undefined`): an empty text.
 */
export const countable = (value: unknown): { readonly text: string; readonly images: number } => {
  const json = GatewayMemo.json(value) as string | undefined
  if (json === undefined) return { text: "", images: 0 }
  // Every payload recognised is base64 (a `base64` source, a `;base64,` data URL): a text without the word has none.
  if (typeof value !== "object" || value === null || !json.includes("base64")) return { text: json, images: 0 }
  return withoutImages(value)
}

/**
 * The tokens of `value` as the gateway counts a message, a history entry or a tool list: `count` of its JSON, inline
 * images counted as `imageTokens` each instead of by their base64 payload (see the module docblock). `count`: Baton's
 * counter (tokens of a text).
 */
export const jsonTokens = (count: (text: string) => number, value: unknown): number => {
  const { images, text } = countable(value)
  return (text === "" ? 0 : count(text)) + images * imageTokens
}
