/**
 * `GatewayMedia`: an inline image counts as its part without the payload plus `imageTokens`, in the three protocols;
 * base64 that is text (a tool's output) is counted as text. And the regression found with it: one screenshot in a
 * tool result made the offload plan read a short conversation as several windows' worth and flush every eligible
 * unit (`GatewayOffload.rewrite`), and its count took seconds.
 */
import { TokenCounter, ToolResultOffload } from "@baton/context"
import { describe, expect, it } from "@effect/vitest"
import * as Crypto from "node:crypto"
import * as GatewayMedia from "../src/GatewayMedia.js"
import * as GatewayOffload from "../src/GatewayOffload.js"
import * as GatewaySwitchAnthropic from "../src/GatewaySwitchAnthropic.js"
import * as Media from "./support/Media.js"

const counter = TokenCounter.make()
const count = counter.count
/** A screenshot's worth of base64 (about 400 KB of PNG). */
const payload = Crypto.randomBytes(300_000).toString("base64")

/**
 * The offload plan of a short Claude Code conversation (200,000-token window): `prompt`, one `Read` whose result is
 * `media` (an image or document block), four Reads of about 2,000 tokens each, and a last question.
 */
const planWithMedia = (prompt: string, mediaCallId: string, media: unknown) => {
  const unit = (id: string, output: unknown) => [
    { role: "assistant", content: [{ type: "tool_use", id, name: "Read", input: { file_path: id } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: id, content: output }] }
  ]
  return GatewayOffload.rewrite({
    body: {
      model: "claude-x",
      tools: [{ name: "Read", input_schema: { type: "object" } }],
      messages: [
        { role: "user", content: prompt },
        ...unit(mediaCallId, [media]),
        ...["one", "two", "three", "four"].flatMap((tag) => unit(`toolu_${tag}`, `${tag}: ${"0123456789 ".repeat(800)}`)),
        { role: "user", content: "and now?" }
      ]
    },
    offloaded: [],
    settings: ToolResultOffload.defaults,
    windowTokens: 200_000,
    prices: { input: 3, cacheRead: 0.3, cacheWrite: 3.75 },
    requestsSoFar: 20,
    msSinceLastRequest: 1_000,
    count
  })
}

describe("GatewayMedia", () => {
  it("counts an Anthropic image block, a Chat Completions image_url part and a Responses input_image as imageTokens beside their JSON", () => {
    const anthropic = { type: "image", source: { type: "base64", media_type: "image/png", data: payload } }
    const chat = { type: "image_url", image_url: { url: `data:image/png;base64,${payload}`, detail: "high" } }
    const responses = { type: "input_image", image_url: `data:image/jpeg;base64,${payload}` }
    expect(GatewayMedia.jsonTokens(count, anthropic)).toBe(count(JSON.stringify({ ...anthropic, source: { ...anthropic.source, data: "" } })) + GatewayMedia.imageTokens)
    expect(GatewayMedia.jsonTokens(count, chat)).toBe(count(JSON.stringify({ ...chat, image_url: { ...chat.image_url, url: "" } })) + GatewayMedia.imageTokens)
    expect(GatewayMedia.jsonTokens(count, responses)).toBe(count(JSON.stringify({ ...responses, image_url: "" })) + GatewayMedia.imageTokens)
    // In a message, twice: each image once.
    const message = { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [anthropic, anthropic] }] }
    expect(GatewayMedia.countable(message).images).toBe(2)
    expect(GatewayMedia.jsonTokens(count, message)).toBeLessThan(2 * GatewayMedia.imageTokens + 100)
  })

  it("counts base64 that is text, plain-text documents and documents by URL as their JSON", () => {
    const text = { type: "tool_result", tool_use_id: "toolu_1", content: `$ base64 shot.png\n${payload.slice(0, 20_000)}` }
    const notes = { type: "document", source: { type: "text", media_type: "text/plain", data: "Release notes: the base64 encoder is faster.\n".repeat(50) } }
    const pdfByUrl = { type: "document", source: { type: "url", url: "https://example.com/paper.pdf" } }
    for (const value of [text, notes, pdfByUrl, "plain", null, [1, 2]]) {
      expect(GatewayMedia.jsonTokens(count, value)).toBe(count(JSON.stringify(value)))
    }
    expect(GatewayMedia.jsonTokens(count, undefined)).toBe(0)
  })

  it("counts an image by URL or file id as its JSON plus imageTokens (the provider fetches it and bills its pixels), in each wire format", () => {
    const byReference = [
      { type: "image_url", image_url: { url: "https://example.com/shot.png" } },
      { type: "image", source: { type: "url", url: "https://example.com/shot.png" } },
      { type: "image", source: { type: "file", file_id: "file_011" } },
      { type: "input_image", image_url: "https://example.com/shot.png", detail: "auto" },
      { type: "input_image", file_id: "file-abc", detail: "auto" }
    ]
    for (const value of byReference) {
      expect(GatewayMedia.countable(value).images).toBe(1)
      expect(GatewayMedia.jsonTokens(count, value)).toBe(count(JSON.stringify(value)) + GatewayMedia.imageTokens)
    }
    // A tool call's input shaped like one is text the model wrote.
    const call = { type: "tool_use", id: "toolu_1", name: "show", input: { type: "image", source: { type: "url", url: "https://example.com/a.png" } } }
    expect(GatewayMedia.jsonTokens(count, call)).toBe(count(JSON.stringify(call)))
  })

  it("counts a data URL the model wrote in a tool call's input as its JSON (text the model wrote and reads), not as an image", () => {
    // Anthropic `tool_use` inputs are objects: a `url` key there is no Chat Completions `image_url` part.
    const call = { type: "tool_use", id: "toolu_1", name: "browser_navigate", input: { url: `data:image/png;base64,${payload.slice(0, 4_000)}` } }
    expect(GatewayMedia.countable(call).images).toBe(0)
    expect(GatewayMedia.jsonTokens(count, call)).toBe(count(JSON.stringify(call)))
  })

  it("a screenshot in a tool result does not make the offload plan flush a short conversation (it counted the payload)", () => {
    const image = { type: "image", source: { type: "base64", media_type: "image/png", data: payload } }
    const out = planWithMedia("go", "toolu_shot", image)
    // About 12,000 tokens of a 200,000-token window: nothing to flush (before: about 400,000 tokens counted, every
    // eligible unit stubbed at once).
    expect(out.flush).toBeNull()
    expect(out.offloaded).toEqual([])
  })

  it("a screenshot in the agent's newest message fits a 32,000-token Anthropic instance on a switch from Chat Completions (it was an overflow)", () => {
    const body = {
      model: "claude-x",
      messages: [
        { role: "system", content: "You are pi." },
        { role: "user", content: [{ type: "text", text: "what is wrong in this screenshot?" }, { type: "image_url", image_url: { url: `data:image/png;base64,${payload}` } }] }
      ]
    }
    const result = GatewaySwitchAnthropic.toAnthropic({ body, windowTokens: 32_000, maxOutputTokens: 4_096, count, pointer: () => "unused" })
    expect(result._tag).toBe("fits")
    if (result._tag !== "fits") return
    // The image goes out whole, as a base64 image block, counted as one image.
    expect(JSON.stringify(result.body)).toContain(payload)
    expect(result.fit.tokensAfter).toBeLessThan(GatewayMedia.imageTokens + 200)
  })

  it("counts the pages of a PDF, in the clear (PDF 1.4) and packed in compressed object streams (PDF 1.5), and nothing else", () => {
    expect(GatewayMedia.pdfPages(Media.pdf(3, { layout: "classic" }).toString("base64"))).toBe(3)
    expect(GatewayMedia.pdfPages(Media.pdf(5, { layout: "packed" }).toString("base64"))).toBe(5)
    expect(GatewayMedia.pdfPages(Media.pdf(1, { layout: "packed", imageBytes: 50_000 }).toString("base64"))).toBe(1)
    // Names with no space between them (`/Type/Page/Parent`), and the page tree's `/Type/Pages` not taken for a page.
    expect(GatewayMedia.pdfPages(Media.pdf(4, { layout: "classic", compact: true }).toString("base64"))).toBe(4)
    expect(GatewayMedia.pdfPages(Media.pdf(2, { layout: "packed", compact: true }).toString("base64"))).toBe(2)
    // Not a PDF; a PDF header over bytes that hold no page (damaged, or encrypted object streams).
    expect(GatewayMedia.pdfPages(payload)).toBeUndefined()
    expect(GatewayMedia.pdfPages(Buffer.concat([Buffer.from("%PDF-1.7\n"), Crypto.randomBytes(120_000)]).toString("base64"))).toBeUndefined()
  })

  it("counts a PDF as its pages x pdfPageTokens beside its JSON, in the three protocols and inside a tool result", () => {
    const classic = Media.pdf(3, { layout: "classic" }).toString("base64")
    const packed = Media.pdf(5, { layout: "packed" }).toString("base64")
    const anthropic = { type: "document", source: { type: "base64", media_type: "application/pdf", data: classic }, title: "paper.pdf" }
    const chat = { type: "file", file: { filename: "paper.pdf", file_data: `data:application/pdf;base64,${packed}` } }
    const responses = { type: "input_file", filename: "paper.pdf", file_data: `data:application/pdf;base64,${packed}` }
    expect(GatewayMedia.jsonTokens(count, anthropic)).toBe(count(JSON.stringify({ ...anthropic, source: { ...anthropic.source, data: "" } })) + 3 * GatewayMedia.pdfPageTokens)
    expect(GatewayMedia.jsonTokens(count, chat)).toBe(count(JSON.stringify({ ...chat, file: { ...chat.file, file_data: "" } })) + 5 * GatewayMedia.pdfPageTokens)
    expect(GatewayMedia.jsonTokens(count, responses)).toBe(count(JSON.stringify({ ...responses, file_data: "" })) + 5 * GatewayMedia.pdfPageTokens)
    // Claude Code's Read of a PDF: the document block in the tool result's content.
    const read = { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [anthropic] }] }
    expect(GatewayMedia.countable(read)).toMatchObject({ images: 0, documents: 1, audio: 0, tokens: 3 * GatewayMedia.pdfPageTokens })
    // Counting leaves the message as it was (the payload goes upstream whole).
    expect(JSON.stringify(read)).toContain(classic)
  })

  it("counts a PDF whose pages cannot be counted by its size, and another file by its bytes", () => {
    const damaged = Buffer.concat([Buffer.from("%PDF-1.7\n"), Crypto.randomBytes(120_000)])
    const block = { type: "document", source: { type: "base64", media_type: "application/pdf", data: damaged.toString("base64") } }
    const pages = Math.ceil(damaged.length / GatewayMedia.pdfBytesPerPage)
    expect(pages).toBe(3)
    expect(GatewayMedia.jsonTokens(count, block)).toBe(count(JSON.stringify({ ...block, source: { ...block.source, data: "" } })) + pages * GatewayMedia.pdfPageTokens)
    // A PDF sent without its media type is known by its header; a CSV file by its size.
    const bare = { type: "input_file", filename: "paper.pdf", file_data: Media.pdf(2, { layout: "classic" }).toString("base64") }
    expect(GatewayMedia.countable(bare).tokens).toBe(2 * GatewayMedia.pdfPageTokens)
    const csv = Buffer.from("id,name\n".repeat(10_001))
    const table = { type: "input_file", filename: "t.csv", file_data: `data:text/csv;base64,${csv.toString("base64")}` }
    expect(GatewayMedia.countable(table).tokens).toBe(Math.ceil(csv.length / GatewayMedia.fileBytesPerToken))
  })

  it("counts inline audio by its duration: a WAV file's from its header, another format's from its size", () => {
    const wav = Media.wav(10)
    const chat = { type: "input_audio", input_audio: { data: wav.toString("base64"), format: "wav" } }
    expect(GatewayMedia.jsonTokens(count, chat)).toBe(count(JSON.stringify({ ...chat, input_audio: { ...chat.input_audio, data: "" } })) + 10 * GatewayMedia.audioTokensPerSecond)
    // 40,000 bytes of MP3 at the assumed 4,000 bytes a second: 10 seconds.
    const mp3 = { type: "input_audio", input_audio: { data: Crypto.randomBytes(40_000).toString("base64"), format: "mp3" } }
    expect(GatewayMedia.countable(mp3)).toMatchObject({ audio: 1, tokens: 10 * GatewayMedia.audioTokensPerSecond })
  })

  it("counts an image or a document the model wrote in a tool call's input as its JSON, not as media (review: the base64 source was taken for an image block)", () => {
    const image = { type: "base64", media_type: "image/png", data: payload.slice(0, 4_000) }
    const pdf = { type: "base64", media_type: "application/pdf", data: Media.pdf(2, { layout: "classic" }).toString("base64") }
    const call = { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "upload", input: { attachments: [{ image }, { nested: { pdf } }] } }] }
    expect(GatewayMedia.countable(call)).toMatchObject({ images: 0, documents: 0, tokens: 0 })
    expect(GatewayMedia.jsonTokens(count, call)).toBe(count(JSON.stringify(call)))
    // The same source in a tool result is an image block.
    const result = { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "image", source: image }] }] }
    expect(GatewayMedia.countable(result).images).toBe(1)
  })

  it("a PDF Claude Code read does not make the offload plan flush a short conversation (it counted the payload: about 400,000 tokens)", () => {
    // A 3-page scan of about 600 KB.
    const scan = Media.pdf(3, { layout: "packed", imageBytes: 600_000 }).toString("base64")
    const document = { type: "document", source: { type: "base64", media_type: "application/pdf", data: scan } }
    const out = planWithMedia("summarise paper.pdf", "toolu_pdf", document)
    expect(out.flush).toBeNull()
    expect(out.offloaded).toEqual([])
  })
})
