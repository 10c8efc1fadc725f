/**
 * GatewayMedia: how the gateway counts the tokens of a message that holds inline media (an image, a document, audio).
 *
 * The gateway sizes what it forwards by Baton's counter over each message's JSON (the offload plan, the fit of a
 * switched request, `thread_read` answers, `count_tokens` on a switch, the counts made ahead). An inline payload is
 * base64 that the model never reads as text: a 1 MB screenshot counted as its JSON is about 700,000 tokens, a 5 MB PDF
 * that Claude Code read about 2-3 million, which made one attachment read as a conversation several times over any
 * window (the offload plan flushed every eligible unit at once, a switched request did not fit, a request was refused
 * as an overflow), and its count alone took seconds. The provider bills an image by its pixels, a PDF by its pages,
 * audio by its duration.
 *
 * Here a media part counts as the JSON of the part with its payload left out, plus an estimate of what the provider
 * bills for the payload (`imageTokens`, `documentTokens`, `audioTokens`). The parts known:
 * - Anthropic Messages: `{type: "image" | "document", source: {type: "base64", media_type, data}}` (also inside a
 *   `tool_result`'s content);
 * - OpenAI Chat Completions: `{type: "image_url", image_url: {url: "data:image/…;base64,…"}}`,
 *   `{type: "file", file: {file_data: "data:application/pdf;base64,…"}}`, `{type: "input_audio", input_audio: {data,
 *   format}}`;
 * - OpenAI Responses: `{type: "input_image", image_url: "data:image/…;base64,…"}`, `{type: "input_file", file_data}`,
 *   `{type: "input_audio", input_audio: {data, format}}`.
 * An image by reference (an Anthropic `image` with a `url` or `file` source, a Chat `image_url` whose `url` is no
 * `data:` URL, a Responses `input_image` with an `image_url` that is none or a `file_id`) is its JSON plus
 * `imageTokens`: the provider fetches it and bills its pixels as for an inline one (a switch sends an agent's image URL
 * as an image part, and 20 of them counted as their JSON, about 400 tokens, overflowed a 16,000-token window upstream).
 * Anything else is counted as its JSON, as before: a plain-text document (`source: {type: "text", data}`: its text is
 * what the model reads), documents by URL or file id (their pages unknown), base64 inside a tool result's text (text the model does
 * read), and anything inside an Anthropic tool call's `input` (text the model wrote, whatever its shape: a
 * `{type: "base64", media_type: "image/png", data}` the model passes to a tool is no image block).
 */
import { GatewayMemo } from "@baton/orchestration"
import { Either } from "effect"
import * as Zlib from "node:zlib"

/**
 * Tokens counted for one inline image: Anthropic's documented ceiling. Anthropic counts an image as about
 * `width x height / 750` tokens and scales one whose long edge is over 1,568 pixels (or over about 1.15 megapixels)
 * down first, so an image costs at most about 1,600 tokens (Anthropic, "Vision", "Calculate image costs"). OpenAI's
 * high-detail images on GPT-4o cost at most 85 + 170 x 8 tiles = 1,445 (OpenAI, "Images and vision").
 */
export const imageTokens = 1_600

/**
 * Tokens counted for one page of a PDF: the upper end of Anthropic's documented range. Anthropic bills a PDF as the
 * text extracted from each page plus an image of each page, and documents "1,500-3,000 tokens per page depending on
 * content density" (Anthropic, "PDF support", "Estimate your costs"); OpenAI's file inputs likewise put each page's
 * extracted text and an image of it into the context (OpenAI, "File inputs"). The upper end, as an estimate that falls
 * short would let the gateway send a request over the window.
 */
export const pdfPageTokens = 3_000

/**
 * Bytes of PDF counted as one page when the pages cannot be counted (`pdfPages` found none: an encrypted or damaged
 * file, object streams past the inflate budget): a judgement, not a provider's figure, between a text page (a few
 * kilobytes) and a scanned one (a few hundred), so a 5 MB scan counts as 100 pages (300,000 tokens), not millions.
 */
export const pdfBytesPerPage = 50_000

/**
 * Bytes of a file other than a PDF (an OpenAI `input_file` of another type, whose text the provider extracts) counted
 * as one token: the rule of thumb of about 4 characters of English per token (OpenAI, "What are tokens and how to
 * count them"), over its decoded size, which bounds its text from above for a compressed format.
 */
export const fileBytesPerToken = 4

/**
 * Tokens counted per second of input audio: Google's documented 32 tokens per second (Gemini API, "Understand and
 * count tokens"), the higher of the documented rates: OpenAI bills user audio at about 1 token per 100 ms, 10 per
 * second (OpenAI, "Realtime API: Managing costs"), and an OpenAI-compatible upstream may be either.
 */
export const audioTokensPerSecond = 32

/**
 * Bytes per second assumed for compressed audio (`mp3` and any format other than `wav`, whose header gives its rate):
 * 32 kbit/s, the low end of speech MP3 bitrates, so the duration, and the count, err high rather than low.
 */
export const audioBytesPerSecond = 4_000

/** The bytes that `base64` decodes to, from its length and padding (nothing decoded). */
const decodedBytes = (base64: string): number => {
  const padding = base64.endsWith("==") ? 2 : base64.endsWith("=") ? 1 : 0
  return Math.max(0, Math.floor((base64.length * 3) / 4) - padding)
}

/** The first `bytes` bytes of `base64` decoded (as Latin-1 text, one character a byte). */
const head = (base64: string, bytes: number): string =>
  Buffer.from(base64.slice(0, Math.ceil(bytes / 3) * 4), "base64").toString("latin1")

/** Whether `byte` is PDF white space (ISO 32000-1, 7.2.2). */
const isWhite = (byte: number | undefined): boolean => byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09 || byte === 0x0c || byte === 0x00
/** Whether `byte` ends a PDF name: white space, a delimiter, or the end of the data. */
const endsName = (byte: number | undefined): boolean => byte === undefined || isWhite(byte) || "/<>[]()%{}".includes(String.fromCharCode(byte))

/**
 * The objects of `bytes` whose type entry is `/Type /<name>` (`/Type/Page` too; not `/Pages`: a name ends at a
 * delimiter), found by a byte search for `/Type` (no text made of the bytes); `each` is given the offset after each.
 */
const typed = (bytes: Buffer, name: string, each: (end: number) => void = () => {}): number => {
  const target = Buffer.from(`/${name}`, "latin1")
  let n = 0
  for (let at = bytes.indexOf("/Type"); at >= 0; at = bytes.indexOf("/Type", at + 5)) {
    let value = at + 5
    while (isWhite(bytes[value])) value++
    const end = value + target.length
    if (end <= bytes.length && bytes.compare(target, 0, target.length, value, end) === 0 && endsName(bytes[end])) {
      n++
      each(end)
    }
  }
  return n
}

/** Bytes of object streams inflated to look for pages in one PDF at most (32 MiB): the scan's work is bounded. */
const inflateBudget = 32 * 1024 * 1024

/**
 * The pages of the PDF whose bytes `base64` encodes, counted cheaply, or `undefined` when that fails (not a PDF, or no
 * page object found): the decoded file is searched once for page objects (`/Type /Page`), and when it has none in the
 * clear (pages of a PDF 1.5 file may be packed, compressed, in object streams), its object streams (`/Type /ObjStm`)
 * are inflated (at most `inflateBudget` bytes in all) and searched. An estimate: an incrementally updated file's
 * replaced pages count too. Work: one decode and two byte searches of the file, plus the bounded inflation; nothing
 * is kept.
 */
export const pdfPages = (base64: string): number | undefined => {
  if (!head(base64, 1_024).includes("%PDF-")) return undefined
  const bytes = Buffer.from(base64, "base64")
  const clear = typed(bytes, "Page")
  if (clear > 0) return clear
  let packed = 0
  let budget = inflateBudget
  let after = 0
  typed(bytes, "ObjStm", (end) => {
    if (budget <= 0 || end < after) return
    const keyword = bytes.indexOf("stream", end)
    if (keyword < 0) return
    const from = keyword + (bytes[keyword + 6] === 0x0d && bytes[keyword + 7] === 0x0a ? 8 : 7)
    const to = bytes.indexOf("endstream", from)
    if (to < 0) return
    after = to
    // A stream that does not inflate (another filter, encrypted, damaged) holds no page we can see: the next one may.
    const inflated = Either.try(() => Zlib.inflateSync(bytes.subarray(from, to), { maxOutputLength: budget }))
    if (Either.isRight(inflated)) {
      budget -= inflated.right.length
      packed += typed(inflated.right, "Page")
    }
  })
  return packed > 0 ? packed : undefined
}

/**
 * Tokens counted for an inline file of media type `mediaType` whose bytes `base64` encodes: a PDF (by its media type
 * or its `%PDF` header) as `pdfPages` x `pdfPageTokens`, its pages estimated at `pdfBytesPerPage` when they cannot be
 * counted; any other file as its decoded bytes / `fileBytesPerToken`. At least one page's or one token's worth.
 */
export const documentTokens = (mediaType: string, base64: string): number => {
  const bytes = decodedBytes(base64)
  // `JVBER` is the base64 of `%PDF`: a PDF sent under another media type (or none) is still billed by its pages.
  if (mediaType === "application/pdf" || base64.startsWith("JVBER")) {
    return (pdfPages(base64) ?? Math.max(1, Math.ceil(bytes / pdfBytesPerPage))) * pdfPageTokens
  }
  return Math.max(1, Math.ceil(bytes / fileBytesPerToken))
}

/**
 * The seconds of sound in the WAV file `base64` encodes: the bytes after its `data` chunk's header over the byte rate
 * its `fmt ` chunk declares, read from its first 512 bytes; `undefined` when they do not hold a RIFF/WAVE header with
 * a positive byte rate.
 */
const wavSeconds = (base64: string): number | undefined => {
  const bytes = Buffer.from(head(base64, 512), "latin1")
  if (bytes.length < 12 || bytes.toString("latin1", 0, 4) !== "RIFF" || bytes.toString("latin1", 8, 12) !== "WAVE") return undefined
  let rate = 0
  for (let at = 12; at + 8 <= bytes.length;) {
    const id = bytes.toString("latin1", at, at + 4)
    if (id === "fmt " && at + 20 <= bytes.length) rate = bytes.readUInt32LE(at + 16)
    if (id === "data") return rate > 0 ? Math.max(0, decodedBytes(base64) - at - 8) / rate : undefined
    const size = bytes.readUInt32LE(at + 4)
    at += 8 + size + (size % 2)
  }
  return rate > 0 ? decodedBytes(base64) / rate : undefined
}

/**
 * Tokens counted for inline audio of format `format` (`wav`, `mp3`, …) whose bytes `base64` encodes: its duration
 * (a WAV header's, else its size at `audioBytesPerSecond`) x `audioTokensPerSecond`, at least one.
 */
export const audioTokens = (format: string, base64: string): number => {
  const seconds = (format === "wav" ? wavSeconds(base64) : undefined) ?? decodedBytes(base64) / audioBytesPerSecond
  return Math.max(1, Math.ceil(seconds * audioTokensPerSecond))
}

/**
 * `value`'s media type and base64 payload when it is a base64 data URL (`data:<type>[;…];base64,<payload>`, the header
 * at most 256 characters); `undefined` for anything else.
 */
export const dataUrl = (value: unknown): { readonly mediaType: string; readonly base64: string } | undefined => {
  if (typeof value !== "string" || !value.startsWith("data:")) return undefined
  const comma = value.indexOf(",")
  if (comma < 0 || comma > 256 || !value.slice(0, comma).endsWith(";base64")) return undefined
  return { mediaType: value.slice(5, value.indexOf(";")), base64: value.slice(comma + 1) }
}

const isImageDataUrl = (value: unknown): boolean => typeof value === "string" && value.startsWith("data:image/")

/** An image URL by reference (a non-empty URL that is no `data:` URL): the provider fetches the image. */
const isReference = (value: unknown): boolean => typeof value === "string" && value !== "" && !value.startsWith("data:")

/** An object's string field, or `""`. */
const field = (value: object, key: string): string => {
  const v = (value as Record<string, unknown>)[key]
  return typeof v === "string" ? v : ""
}

// The estimates, once per interned part (a history entry an agent sends again is the same object from one request to
// the next: a PDF is decoded and scanned once, not on every request that carries it).
/** An Anthropic `base64` source that is not an image. */
const sourceTokens = GatewayMemo.memo((source: object) => documentTokens(field(source, "media_type"), field(source, "data")))
/** A Chat Completions `file` object or a Responses `input_file` part: its `file_data` (a data URL, or bare base64). */
const fileDataTokens = GatewayMemo.memo((holder: object) => {
  const data = field(holder, "file_data")
  const url = dataUrl(data)
  return url === undefined ? documentTokens("", data) : documentTokens(url.mediaType, url.base64)
})
/** An `input_audio` object: `{data, format}`. */
const inputAudioTokens = GatewayMemo.memo((audio: object) => audioTokens(field(audio, "format"), field(audio, "data")))

/** What `dropPayloads` found: how many parts of each kind, and the tokens estimated for their payloads. */
interface Found {
  images: number
  documents: number
  audio: number
  tokens: number
}

/** Tool-call block types whose `input` the model wrote (Anthropic Messages). */
const toolCallTypes = new Set(["tool_use", "server_tool_use", "mcp_tool_use"])

const isObject = (value: unknown): value is object => typeof value === "object" && value !== null

/**
 * `JSON.stringify`'s replacer: a media part's payload as `""` (`this` is the object holding `key`), counted in `found`.
 * A part is recognised at its own key beside its `type` (a Chat Completions image at its `image_url` object, not at any
 * `url` key), and nothing under a tool call's `input` is (`written` holds the objects there: the replacer visits a
 * holder before what it holds).
 */
const dropPayloads = (found: Found) => {
  const written = new Set<object>()
  return function(this: unknown, key: string, value: unknown): unknown {
    const holder = this as Record<string, unknown>
    if (written.has(holder)) {
      if (isObject(value)) written.add(value)
      return value
    }
    if (key === "input" && isObject(value) && typeof holder.type === "string" && toolCallTypes.has(holder.type)) {
      written.add(value)
      return value
    }
    if (key === "data" && holder.type === "base64" && typeof holder.media_type === "string" && typeof value === "string") {
      if (holder.media_type.startsWith("image/")) found.images += 1
      else {
        found.documents += 1
        found.tokens += sourceTokens(holder)
      }
      return ""
    }
    // An image by reference: counted as an image, its JSON kept (short).
    if (key === "source" && holder.type === "image" && isObject(value) && (field(value, "type") === "url" || field(value, "type") === "file")) {
      found.images += 1
      return value
    }
    if (key === "image_url" && holder.type === "image_url" && isObject(value) && isReference(field(value, "url"))) {
      found.images += 1
      return value
    }
    if (key === "type" && value === "input_image" && (isReference(holder.image_url) || (holder.image_url === undefined && typeof holder.file_id === "string"))) {
      found.images += 1
      return value
    }
    if (key === "image_url" && holder.type === "input_image" && isImageDataUrl(value)) {
      found.images += 1
      return ""
    }
    if (key === "image_url" && holder.type === "image_url" && isObject(value) && isImageDataUrl((value as Record<string, unknown>).url)) {
      found.images += 1
      return { ...value, url: "" }
    }
    if (key === "file_data" && holder.type === "input_file" && typeof value === "string" && value !== "") {
      found.documents += 1
      found.tokens += fileDataTokens(holder)
      return ""
    }
    if (key === "file" && holder.type === "file" && isObject(value) && field(value, "file_data") !== "") {
      found.documents += 1
      found.tokens += fileDataTokens(value)
      return { ...value, file_data: "" }
    }
    if (key === "input_audio" && holder.type === "input_audio" && isObject(value) && field(value, "data") !== "") {
      found.audio += 1
      found.tokens += inputAudioTokens(value)
      return { ...value, data: "" }
    }
    return value
  }
}

/**
 * What `jsonTokens` counts of a value: `text`, its JSON with the media payloads left out; `images`, `documents` and
 * `audio`, the media parts found; `tokens`, what their payloads are estimated to cost (images at `imageTokens` each).
 */
export interface Countable {
  readonly text: string
  readonly images: number
  readonly documents: number
  readonly audio: number
  readonly tokens: number
}

/** `value`'s JSON with every inline media payload left out, and what was left out. */
const withoutPayloads = GatewayMemo.memo((value: object): Countable => {
  const found: Found = { images: 0, documents: 0, audio: 0, tokens: 0 }
  const text = JSON.stringify(value, dropPayloads(found))
  return { text, ...found, tokens: found.tokens + found.images * imageTokens }
})

const nothing = { images: 0, documents: 0, audio: 0, tokens: 0 } as const

/** Whether a JSON text may hold an image by reference (`dropPayloads`: an `image_url`, an `input_image`, a `url` or `file` source). */
const hasReference = (json: string): boolean =>
  json.includes("\"image_url\"") || json.includes("\"input_image\"") || json.includes("\"type\":\"url\"") || json.includes("\"type\":\"file\"")

/**
 * What `jsonTokens` counts of `value` (see `Countable`): its JSON text (`GatewayMemo.json`, kept for an interned
 * value), or, when that text may hold an inline payload, the text with the payloads left out and their estimates.
 * For a value whose JSON is `undefined` (a function, `undefined`): an empty text.
 */
export const countable = (value: unknown): Countable => {
  const json = GatewayMemo.json(value) as string | undefined
  if (json === undefined) return { text: "", ...nothing }
  // Every payload recognised is base64 named as such (a `base64` source, a `;base64,` data URL) or sits under a
  // `file_data` or `input_audio` key, and every image by reference is an `image_url` or an `image` block's `url` or
  // `file` source: a text without any of these has none (a scan, not a parse).
  if (!isObject(value) || !(json.includes("base64") || json.includes("\"file_data\"") || json.includes("\"input_audio\"") || hasReference(json))) {
    return { text: json, ...nothing }
  }
  return withoutPayloads(value)
}

/**
 * The tokens of `value` as the gateway counts a message, a history entry or a tool list: `count` of its JSON, inline
 * media counted by the estimates of what the provider bills (`imageTokens` an image, `documentTokens` a document,
 * `audioTokens` audio) instead of by their base64 payload (see the module docblock). `count`: Baton's counter (tokens
 * of a text).
 */
export const jsonTokens = (count: (text: string) => number, value: unknown): number => {
  const { text, tokens } = countable(value)
  return (text === "" ? 0 : count(text)) + tokens
}
