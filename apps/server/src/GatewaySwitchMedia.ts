/**
 * GatewaySwitchMedia: how inline media (images, documents) of one wire format become another's on a provider switch
 * (docs/gateway.md "Media on a switch"). Pure: the switch modules (`GatewaySwitch`, `GatewaySwitchResponses`,
 * `GatewaySwitchAnthropic`, `GatewaySwitchResponsesAnthropic`) call it for each block or part; how media is counted is
 * `GatewayMedia`'s, not this module's.
 *
 * The forms, as the providers document them:
 * - Anthropic Messages: `{type: "image", source}` with a `base64` source (`media_type`, `data`), a `url` source or a
 *   `file` source (an id of Anthropic's Files API); `{type: "document", source, title?}` with a `base64` source (a
 *   PDF), a `text` source (`media_type: "text/plain"`, `data` the text), a `url` source (a PDF by URL), a `content`
 *   source (a string or text and image blocks) or a `file` source. Both also inside a `tool_result`'s content.
 * - OpenAI Chat Completions: `{type: "image_url", image_url: {url, detail?}}` (`url` a `data:` URL or an http(s) one),
 *   `{type: "file", file: {file_data?, file_id?, filename?}}` (`file_data` a `data:` URL). No file by URL; a `tool`
 *   message carries text only.
 * - OpenAI Responses: `{type: "input_image", image_url, detail}`, `{type: "input_file", file_data?, file_id?, file_url?,
 *   filename?}`.
 *
 * What has no counterpart becomes a one-line text in brackets that names it (a file id of the other provider, a
 * document by URL on Chat Completions, a file type Anthropic cannot read), never a silent `[type]`.
 */
import { isRecord } from "./GatewayDialect.js"
import * as GatewayMedia from "./GatewayMedia.js"

type Json = Record<string, unknown>

/** A text content part of Chat Completions (also Anthropic's text block: the same shape). */
const text = (t: string): Json => ({ type: "text", text: t })

/** A source's string field, or `""`. */
const str = (value: unknown): string => typeof value === "string" ? value : ""

/** Whether an Anthropic block is an image or a document (what `chatPartsOf` converts). */
export const isMedia = (block: unknown): boolean => isRecord(block) && (block.type === "image" || block.type === "document")

/** Whether an Anthropic block goes out on Chat Completions as a part other than text (an image, a PDF). */
export const isBinaryMedia = (block: unknown): boolean => chatPartsOf(block)?.some((p) => p.type !== "text") === true

/**
 * A PDF's filename for OpenAI (its `file_data` needs one): the document's `title` with `.pdf` added when it has no such
 * ending, else `document.pdf`.
 */
const pdfName = (title: unknown): string => {
  const t = str(title).trim()
  return t === "" ? "document.pdf" : /\.pdf$/i.test(t) ? t : `${t}.pdf`
}

/**
 * An Anthropic `image` or `document` block as Chat Completions content parts; `null` for any other block. With
 * `media` false (an instance whose model reads no images or files: `ModelProviderConfig.media`), every part but text
 * is a text `[image: not sent, this model reads no images or files]` (`[document …]` likewise). Else:
 * - an image: an `image_url` part (a `base64` source as a `data:<media_type>;base64,` URL, a `url` source its URL);
 * - a `base64` document (a PDF): a `file` part, `file_data` a `data:` URL, `filename` its title (`pdfName`);
 * - a `text` document: a text part of its text (after a `[document: <title>]` line when it has a title);
 * - a `content` document: its string, or its blocks converted the same way;
 * - a `url` document: a text `[document at <url>]` (Chat Completions takes no file by URL);
 * - a `file` source (an id of Anthropic's Files API, which no OpenAI upstream reads): a text naming the id.
 */
export const chatPartsOf = (block: unknown, media = true): ReadonlyArray<Json> | null => {
  if (!isRecord(block) || !isMedia(block)) return null
  if (!media) {
    return (chatPartsOf(block) ?? []).map((p) => p.type === "text" ? p : text(`[${String(block.type)}: not sent, this model reads no images or files]`))
  }
  const source = isRecord(block.source) ? block.source : {}
  const title = str(block.title)
  // A block without a source's type is no media the model could read: `[type]`, as any unknown block.
  if (typeof source.type !== "string") return [text(`[${String(block.type)}]`)]
  if (block.type === "image") {
    if (source.type === "base64") return [{ type: "image_url", image_url: { url: `data:${str(source.media_type)};base64,${str(source.data)}` } }]
    if (source.type === "url") return [{ type: "image_url", image_url: { url: str(source.url) } }]
    return [text(`[image: ${source.type === "file" ? `Anthropic file ${str(source.file_id)}` : source.type}, not readable by this model]`)]
  }
  switch (source.type) {
    case "base64": {
      const mediaType = str(source.media_type)
      return [{ type: "file", file: { filename: mediaType === "application/pdf" || mediaType === "" ? pdfName(title) : title === "" ? "document" : title, file_data: `data:${mediaType === "" ? "application/pdf" : mediaType};base64,${str(source.data)}` } }]
    }
    case "text":
      return [text(title === "" ? str(source.data) : `[document: ${title}]\n${str(source.data)}`)]
    case "content": {
      const inner = typeof source.content === "string" ? [text(source.content)] : (Array.isArray(source.content) ? source.content : []).flatMap((b): ReadonlyArray<Json> =>
        chatPartsOf(b) ?? [text(isRecord(b) && typeof b.text === "string" ? b.text : `[${isRecord(b) ? String(b.type) : "block"}]`)]
      )
      return title === "" ? inner : [text(`[document: ${title}]`), ...inner]
    }
    case "url":
      return [text(`[document at ${str(source.url)}${title === "" ? "" : `: ${title}`}]`)]
    default:
      return [text(`[document${title === "" ? "" : ` ${title}`}: ${source.type === "file" ? `Anthropic file ${str(source.file_id)}` : source.type}, not readable by this model]`)]
  }
}

/**
 * A Chat Completions content part as a Responses input part: text `input_text`, `image_url` `input_image` (its URL,
 * `detail` kept or `auto`), `file` `input_file` (its `file_data`, `file_id`, `filename`); another part a one-line
 * `[type]` text.
 */
export const responsesPartOf = (part: unknown): Json => {
  if (!isRecord(part)) return { type: "input_text", text: "[part]" }
  if (part.type === "text") return { type: "input_text", text: str(part.text) }
  if (part.type === "image_url") {
    const image = isRecord(part.image_url) ? part.image_url : { url: part.image_url }
    return { type: "input_image", image_url: str(image.url), detail: typeof image.detail === "string" ? image.detail : "auto" }
  }
  if (part.type === "file" && isRecord(part.file)) {
    const f = part.file
    return {
      type: "input_file",
      ...(typeof f.filename === "string" ? { filename: f.filename } : {}),
      ...(typeof f.file_data === "string" ? { file_data: f.file_data } : {}),
      ...(typeof f.file_id === "string" ? { file_id: f.file_id } : {})
    }
  }
  return { type: "input_text", text: `[${String(part.type)}]` }
}

/** The image types Anthropic reads in a `base64` source (Anthropic, "Vision": JPEG, PNG, GIF, WebP). */
const anthropicImageTypes: ReadonlySet<string> = new Set(["image/jpeg", "image/png", "image/gif", "image/webp"])

/**
 * The image type a base64 payload's first bytes show (PNG, JPEG, GIF, WebP signatures); `undefined` for others.
 * Anthropic refuses a `base64` image whose bytes do not match its `media_type` ("Image does not match the provided
 * media type"), which OpenAI upstreams accept: an agent's `data:image/jpeg` PNG would fail every request on a switch.
 */
const sniffedImageType = (base64: string): string | undefined => {
  const head = Buffer.from(base64.slice(0, 24), "base64")
  if (head.length >= 8 && head.subarray(0, 8).equals(Buffer.from("89504e470d0a1a0a", "hex"))) return "image/png"
  if (head.length >= 3 && head[0] === 0xff && head[1] === 0xd8 && head[2] === 0xff) return "image/jpeg"
  if (head.length >= 6 && /^GIF8[79]a$/.test(head.toString("latin1", 0, 6))) return "image/gif"
  if (head.length >= 12 && head.toString("latin1", 0, 4) === "RIFF" && head.toString("latin1", 8, 12) === "WEBP") return "image/webp"
  return undefined
}

/**
 * An OpenAI image URL (a Chat `image_url` part's `url`, a Responses `input_image`'s `image_url`) as an Anthropic block:
 * - a base64 `data:` URL (`GatewayMedia.dataUrl`, parameters allowed): an `image` block with a `base64` source, its
 *   `media_type` the type its bytes show (`sniffedImageType`), else the URL's; a type Anthropic does not read (not
 *   JPEG, PNG, GIF or WebP) a text naming it;
 * - another `data:` URL (no `;base64`): a text naming it (Anthropic reads no such URL);
 * - an http(s) URL: an `image` block with a `url` source;
 * - anything else (empty, a relative path): a text naming it.
 * Anthropic refuses a request holding an image it cannot read, and the conversation keeps it: each of these as a
 * block would fail every later request of the switch.
 */
export const anthropicImageOfUrl = (url: string): Json => {
  if (url.startsWith("data:")) {
    const data = GatewayMedia.dataUrl(url)
    if (data === undefined) return text("[image: a data: URL that is not base64, not readable by this model]")
    const mediaType = sniffedImageType(data.base64) ?? data.mediaType
    return anthropicImageTypes.has(mediaType)
      ? { type: "image", source: { type: "base64", media_type: mediaType, data: data.base64 } }
      : text(`[image (${mediaType === "" ? "no type" : mediaType}): a type this model cannot read]`)
  }
  if (/^https?:\/\//i.test(url)) return { type: "image", source: { type: "url", url } }
  return text(`[image at ${url === "" ? "an empty URL" : url.slice(0, 200)}: not a URL this model reads]`)
}

/** A URL's path ends in `.pdf` (its query and fragment aside). */
const isPdfUrl = (url: string) => /\.pdf$/i.test(url.split(/[?#]/)[0] ?? "")

/**
 * An OpenAI file (a Chat Completions `file` part's `file` object, or a Responses `input_file` part: `file_data`,
 * `file_id`, `file_url`, `filename`) as an Anthropic block:
 * - a PDF (`file_data` a `data:application/pdf;base64,` URL, or base64 whose bytes start `%PDF`): a `document` block
 *   with a `base64` source, its `filename` the `title`;
 * - a text file (`data:text/…;base64,`): a `document` block with a `text` source of the decoded text (UTF-8);
 * - an image sent as a file (`data:image/…;base64,`): an `image` block with a `base64` source (`anthropicImageOfUrl`);
 * - a PDF by URL (`file_url` ending `.pdf`): a `document` block with a `url` source;
 * - anything else (an OpenAI file id, which Anthropic cannot read; another file type; another URL): a text block
 *   naming it.
 */
export const anthropicBlockOfFile = (file: Json): Json => {
  const filename = str(file.filename)
  const title = filename === "" ? {} : { title: filename }
  const data = str(file.file_data)
  const url = GatewayMedia.dataUrl(data)
  const base64 = url?.base64 ?? (data.startsWith("JVBER") ? data : "")
  if (base64 !== "" && (url === undefined || url.mediaType === "application/pdf" || base64.startsWith("JVBER"))) {
    return { type: "document", source: { type: "base64", media_type: "application/pdf", data: base64 }, ...title }
  }
  if (url !== undefined && url.mediaType.startsWith("image/")) return anthropicImageOfUrl(data)
  if (url !== undefined && url.mediaType.startsWith("text/")) {
    return { type: "document", source: { type: "text", media_type: "text/plain", data: Buffer.from(url.base64, "base64").toString("utf8") }, ...title }
  }
  const fileUrl = str(file.file_url)
  if (fileUrl !== "" && isPdfUrl(fileUrl)) return { type: "document", source: { type: "url", url: fileUrl }, ...title }
  const named = filename === "" ? "" : ` ${filename}`
  if (fileUrl !== "") return text(`[file${named} at ${fileUrl}]`)
  if (typeof file.file_id === "string") return text(`[file${named}: OpenAI file ${file.file_id}, not readable by this model]`)
  return text(`[file${named}${url === undefined ? "" : ` (${url.mediaType})`}: a type this model cannot read]`)
}
