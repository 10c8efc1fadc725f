/**
 * Inline media on a provider switch (`GatewaySwitchMedia` and the switch modules that call it), in every direction:
 * the exact parts each switch sends for an image pasted in a user message, an image a tool returned (Claude Code's
 * Read of a PNG: an `image` block in a `tool_result`'s content), a PDF (a base64 `document` block), a plain-text
 * document and media by URL; and the fit counting the converted media by `GatewayMedia` (a 1 MB screenshot is an
 * image's tokens, not its base64's). Before, every switch sent the new model `[image]` / `[document]` (Chat and
 * Responses agents' `file` / `input_file` PDFs too, to Anthropic).
 *
 * The block shapes are Anthropic's documented ones (no Claude Code transcript in ../shared holds an image): a pasted
 * screenshot is `{type: "image", source: {type: "base64", media_type: "image/png", data}}` beside the prompt's text
 * block; Read's result of an image file is a `tool_result` whose content is that block.
 */
import { TokenCounter } from "@baton/context"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Crypto from "node:crypto"
import * as GatewayAnthropic from "../src/GatewayAnthropic.js"
import * as GatewayMedia from "../src/GatewayMedia.js"
import * as GatewaySwitch from "../src/GatewaySwitch.js"
import * as GatewaySwitchAnthropic from "../src/GatewaySwitchAnthropic.js"
import * as GatewaySwitchResponses from "../src/GatewaySwitchResponses.js"
import * as GatewaySwitchResponsesAnthropic from "../src/GatewaySwitchResponsesAnthropic.js"
import * as GatewaySwitchWire from "../src/GatewaySwitchWire.js"
import { adminToken, client, raw } from "./helpers.js"
import * as Media from "./support/Media.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

const counter = TokenCounter.make()
const count = (t: string) => counter.count(t)
const window = 32_000

/** A PNG's signature, then random bytes: a screenshot's worth of base64 (`bytes` decoded). */
const png = (bytes: number) => Buffer.concat([Buffer.from("89504e470d0a1a0a", "hex"), Crypto.randomBytes(bytes - 8)]).toString("base64")
const shot = png(30_000)
const readPng = png(20_000)
const pdf = Media.pdf(2, { layout: "classic" }).toString("base64")

const image = (data: string) => ({ type: "image", source: { type: "base64", media_type: "image/png", data } })
const fitInput = (body: Record<string, unknown>) => ({ body, windowTokens: window, maxOutputTokens: 4_096, count, pointer: () => "unused" })

/** A Claude Code conversation: a pasted screenshot, a Read of a PNG, a PDF, a text document, media by URL. */
const claudeCode = () => ({
  model: "gpt-x",
  max_tokens: 32_000,
  system: [{ type: "text", text: "You are Claude Code." }],
  tools: [{ name: "Read", description: "Reads a file.", input_schema: { type: "object", properties: { file_path: { type: "string" } } } }],
  messages: [
    { role: "user", content: [image(shot), { type: "text", text: "what is wrong in this screenshot?" }] },
    { role: "assistant", content: [{ type: "text", text: "Reading the icon." }, { type: "tool_use", id: "toolu_1", name: "Read", input: { file_path: "/repo/icon.png" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [image(readPng)] }] },
    { role: "assistant", content: [{ type: "text", text: "The icon is cut off." }] },
    {
      role: "user",
      content: [
        { type: "document", source: { type: "base64", media_type: "application/pdf", data: pdf }, title: "spec" },
        { type: "document", source: { type: "text", media_type: "text/plain", data: "line one\nline two" }, title: "notes.txt" },
        { type: "document", source: { type: "url", url: "https://example.com/paper.pdf" } },
        { type: "image", source: { type: "url", url: "https://example.com/logo.png" } },
        { type: "text", text: "compare with these" }
      ]
    }
  ]
})

describe("Media on a switch from Anthropic Messages", () => {
  it("to Chat Completions: images as image_url parts, a PDF as a file part, a text document as text, a URL document named; a tool result's image after the tool message", () => {
    const result = GatewaySwitch.toChat(fitInput(claudeCode()))
    expect(result._tag).toBe("fits")
    if (result._tag !== "fits") return
    expect(result.body.messages).toEqual([
      { role: "system", content: "You are Claude Code." },
      { role: "user", content: [{ type: "image_url", image_url: { url: `data:image/png;base64,${shot}` } }, { type: "text", text: "what is wrong in this screenshot?" }] },
      { role: "assistant", content: "Reading the icon.", tool_calls: [{ id: "toolu_1", type: "function", function: { name: "Read", arguments: "{\"file_path\":\"/repo/icon.png\"}" } }] },
      { role: "tool", tool_call_id: "toolu_1", content: "[image: attached in the user message after the tool results]" },
      { role: "user", content: [{ type: "text", text: "Attached from the tool result toolu_1:" }, { type: "image_url", image_url: { url: `data:image/png;base64,${readPng}` } }] },
      { role: "assistant", content: "The icon is cut off." },
      {
        role: "user",
        content: [
          { type: "file", file: { filename: "spec.pdf", file_data: `data:application/pdf;base64,${pdf}` } },
          { type: "text", text: "[document: notes.txt]\nline one\nline two" },
          { type: "text", text: "[document at https://example.com/paper.pdf]" },
          { type: "image_url", image_url: { url: "https://example.com/logo.png" } },
          { type: "text", text: "compare with these" }
        ]
      }
    ])
    // Counted by GatewayMedia: three images and a 2-page PDF, not their base64 (about 70,000 characters).
    expect(result.fit).toMatchObject({ stubbed: [], leftOut: 0 })
    expect(result.fit.tokensAfter).toBeLessThan(3 * 1_600 + 2 * 3_000 + 1_000)
  })

  it("text alone stays one string; a text document alone too; a result's text stays beside the image note; a stubbed result's image is left out", () => {
    const messages = GatewaySwitch.chatMessagesOf({
      role: "user",
      content: [
        { type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "Read 1 image" }, image(readPng)] },
        { type: "tool_result", tool_use_id: "toolu_2", content: [image(readPng)] },
        { type: "document", source: { type: "text", media_type: "text/plain", data: "notes" } },
        { type: "text", text: "go on" }
      ]
    }, new Set(["toolu_2"]), new Map([["toolu_2", { name: "Read", input: { file_path: "b.png" } }]]))
    expect(messages).toEqual([
      { role: "tool", tool_call_id: "toolu_1", content: "Read 1 image\n[image: attached in the user message after the tool results]" },
      { role: "tool", tool_call_id: "toolu_2", content: expect.stringMatching(/^\[offloaded, thread_read tool:toolu_2\]/) },
      { role: "user", content: [{ type: "text", text: "Attached from the tool result toolu_1:" }, { type: "image_url", image_url: { url: `data:image/png;base64,${readPng}` } }, { type: "text", text: "notes" }, { type: "text", text: "go on" }] }
    ])
    expect(GatewaySwitch.chatMessagesOf({ role: "user", content: [{ type: "document", source: { type: "text", media_type: "text/plain", data: "notes" } }, { type: "text", text: "go on" }] }))
      .toEqual([{ role: "user", content: "notes\n\ngo on" }])
  })

  it("to Responses: input_image and input_file parts in the user message items; the tool result's image in a user message after its function_call_output", () => {
    const result = GatewaySwitchResponses.toResponses(fitInput(claudeCode()))
    expect(result._tag).toBe("fits")
    if (result._tag !== "fits") return
    expect(result.body.input).toEqual([
      { type: "message", role: "user", content: [{ type: "input_image", image_url: `data:image/png;base64,${shot}`, detail: "auto" }, { type: "input_text", text: "what is wrong in this screenshot?" }] },
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "Reading the icon." }] },
      { type: "function_call", call_id: "toolu_1", name: "Read", arguments: "{\"file_path\":\"/repo/icon.png\"}" },
      { type: "function_call_output", call_id: "toolu_1", output: "[image: attached in the user message after the tool results]" },
      { type: "message", role: "user", content: [{ type: "input_text", text: "Attached from the tool result toolu_1:" }, { type: "input_image", image_url: `data:image/png;base64,${readPng}`, detail: "auto" }] },
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "The icon is cut off." }] },
      {
        type: "message",
        role: "user",
        content: [
          { type: "input_file", filename: "spec.pdf", file_data: `data:application/pdf;base64,${pdf}` },
          { type: "input_text", text: "[document: notes.txt]\nline one\nline two" },
          { type: "input_text", text: "[document at https://example.com/paper.pdf]" },
          { type: "input_image", image_url: "https://example.com/logo.png", detail: "auto" },
          { type: "input_text", text: "compare with these" }
        ]
      }
    ])
    expect(result.fit.tokensAfter).toBeLessThan(3 * 1_600 + 2 * 3_000 + 1_000)
  })

  it("the fit counts a 1 MB screenshot as an image: an old one and a tool result's fit a 32,000-token window untouched (counted as their base64 JSON, about 700,000 tokens each)", () => {
    const big = png(1_000_000)
    const body = {
      model: "gpt-x",
      max_tokens: 4_096,
      messages: [
        { role: "user", content: [image(big), { type: "text", text: "what is this?" }] },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "Read", input: { file_path: "/repo/shot.png" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [image(big)] }] },
        { role: "assistant", content: [{ type: "text", text: "A screenshot." }] },
        { role: "user", content: "and now?" }
      ]
    }
    for (const fit of [GatewaySwitch.toChat, GatewaySwitchResponses.toResponses]) {
      const result = fit(fitInput(body))
      expect(result._tag).toBe("fits")
      if (result._tag !== "fits") return
      expect(result.fit).toMatchObject({ stubbed: [], leftOut: 0 })
      expect(result.fit.tokensAfter).toBeGreaterThan(2 * 1_600)
      expect(result.fit.tokensAfter).toBeLessThan(2 * 1_600 + 500)
      expect(JSON.stringify(result.body).split(big).length - 1).toBe(2)
    }
  })
})

describe("Media by URL in the fit", () => {
  it("an image by URL counts as an image in every switch's fit (20 of them counted as their JSON, about 400 tokens, went out to a 16,000-token window the upstream bills some 30,000 for)", () => {
    const urls = Array.from({ length: 20 }, (_, i) => ({ type: "image", source: { type: "url", url: `https://example.com/${i}.png` } }))
    const body = { model: "gpt-x", max_tokens: 1_000, messages: [{ role: "user", content: [...urls, { type: "text", text: "describe them" }] }] }
    const input = { body, windowTokens: 16_000, maxOutputTokens: 4_096, count, pointer: () => "unused" }
    // The agent's newest message alone is over: an overflow, as for 20 inline screenshots, not a request sent over the window.
    expect(GatewaySwitch.toChat(input)._tag).toBe("overflow")
    expect(GatewaySwitchResponses.toResponses(input)._tag).toBe("overflow")
    const roomy = GatewaySwitch.toChat({ ...input, windowTokens: 64_000 })
    if (roomy._tag !== "fits") throw new Error("expected a fit")
    expect(roomy.fit.tokensBefore).toBeGreaterThan(20 * GatewayMedia.imageTokens)
    // From a Chat agent to Anthropic (the image URL an image block with a url source) likewise.
    const chat = { model: "claude-x", max_tokens: 1_000, messages: [{ role: "user", content: [...urls.map((u) => ({ type: "image_url", image_url: { url: u.source.url } })), { type: "text", text: "describe them" }] }] }
    expect(GatewaySwitchAnthropic.toAnthropic({ ...input, body: chat })._tag).toBe("overflow")
  })
})

describe("Media on a switch to Anthropic Messages", () => {
  it("from Chat Completions: a file part's PDF a base64 document, a text file a text document, an image file and an image_url an image; a file id and audio named", () => {
    const text = Buffer.from("a,b\n1,2\n").toString("base64")
    const converted = GatewaySwitchAnthropic.anthropicOf({
      messages: [{
        role: "user",
        content: [
          { type: "text", text: "read these" },
          { type: "file", file: { filename: "spec.pdf", file_data: `data:application/pdf;base64,${pdf}` } },
          { type: "file", file: { filename: "data.csv", file_data: `data:text/csv;base64,${text}` } },
          { type: "file", file: { file_id: "file-abc123" } },
          { type: "file", file: { filename: "icon.png", file_data: `data:image/png;base64,${readPng}` } },
          { type: "image_url", image_url: { url: `data:image/png;base64,${shot}`, detail: "high" } },
          { type: "input_audio", input_audio: { data: "UklGRg==", format: "wav" } }
        ]
      }]
    })
    expect(converted.messages).toEqual([{
      role: "user",
      content: [
        { type: "text", text: "read these" },
        { type: "document", source: { type: "base64", media_type: "application/pdf", data: pdf }, title: "spec.pdf" },
        { type: "document", source: { type: "text", media_type: "text/plain", data: "a,b\n1,2\n" }, title: "data.csv" },
        { type: "text", text: "[file: OpenAI file file-abc123, not readable by this model]" },
        image(readPng),
        { type: "image", source: { type: "base64", media_type: "image/png", data: shot } },
        { type: "text", text: "[input_audio]" }
      ]
    }])
  })

  it("from Responses: an input_file PDF a document; a function_call_output's input_image kept in its tool_result", () => {
    const converted = GatewaySwitchResponsesAnthropic.anthropicOfResponses({
      input: [
        { type: "message", role: "user", content: [{ type: "input_text", text: "read it" }, { type: "input_file", filename: "spec.pdf", file_data: `data:application/pdf;base64,${pdf}` }] },
        { type: "function_call", call_id: "call_1", name: "view_image", arguments: "{\"path\":\"icon.png\"}" },
        { type: "function_call_output", call_id: "call_1", output: [{ type: "input_text", text: "the image:" }, { type: "input_image", image_url: `data:image/png;base64,${readPng}` }] },
        { type: "function_call", call_id: "call_2", name: "shell", arguments: "{}" },
        { type: "function_call_output", call_id: "call_2", output: [{ type: "input_text", text: "a" }, { type: "input_text", text: "b" }] },
        { type: "message", role: "user", content: [{ type: "input_file", file_url: "https://example.com/paper.pdf" }, { type: "input_file", file_id: "file-xyz", filename: "x.docx" }] }
      ]
    })
    expect(converted.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "read it" }, { type: "document", source: { type: "base64", media_type: "application/pdf", data: pdf }, title: "spec.pdf" }] },
      { role: "assistant", content: [{ type: "tool_use", id: "call_1", name: "view_image", input: { path: "icon.png" } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "call_1", content: [{ type: "text", text: "the image:" }, image(readPng)] }] },
      { role: "assistant", content: [{ type: "tool_use", id: "call_2", name: "shell", input: {} }] },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "call_2", content: "a\n\nb" },
          { type: "document", source: { type: "url", url: "https://example.com/paper.pdf" } },
          { type: "text", text: "[file x.docx: OpenAI file file-xyz, not readable by this model]" }
        ]
      }
    ])
  })

  it("an image Anthropic would refuse never goes as an image block: a mislabelled data: URL typed by its bytes, one without ;base64, another type or URL named (each failed every request of the switch)", () => {
    const jpeg = Buffer.concat([Buffer.from("ffd8ffe000104a464946", "hex"), Crypto.randomBytes(64)]).toString("base64")
    const svg = Buffer.from("<svg xmlns='http://www.w3.org/2000/svg'/>").toString("base64")
    const url = (u: string) => ({ type: "image_url", image_url: { url: u } })
    const converted = GatewaySwitchAnthropic.anthropicOf({
      messages: [{
        role: "user",
        content: [
          url(`data:image/jpeg;base64,${readPng}`),
          url(`data:image/png;charset=binary;base64,${jpeg}`),
          url("data:image/png,%89PNG"),
          url(`data:image/svg+xml;base64,${svg}`),
          url("file:///tmp/shot.png"),
          url(""),
          url("https://example.com/logo.png"),
          { type: "file", file: { filename: "a.png", file_data: `data:image/webp;base64,${readPng}` } }
        ]
      }]
    })
    expect(converted.messages).toEqual([{
      role: "user",
      content: [
        image(readPng),
        { type: "image", source: { type: "base64", media_type: "image/jpeg", data: jpeg } },
        { type: "text", text: "[image: a data: URL that is not base64, not readable by this model]" },
        { type: "text", text: "[image (image/svg+xml): a type this model cannot read]" },
        { type: "text", text: "[image at file:///tmp/shot.png: not a URL this model reads]" },
        { type: "text", text: "[image at an empty URL: not a URL this model reads]" },
        { type: "image", source: { type: "url", url: "https://example.com/logo.png" } },
        image(readPng)
      ]
    }])
    // From Responses likewise (Codex's input_image).
    const responses = GatewaySwitchResponsesAnthropic.anthropicOfResponses({
      input: [{ type: "message", role: "user", content: [{ type: "input_image", image_url: `data:image/gif;base64,${readPng}` }, { type: "input_image", image_url: "data:image/png,raw" }] }]
    })
    expect(responses.messages).toEqual([{
      role: "user",
      content: [image(readPng), { type: "text", text: "[image: a data: URL that is not base64, not readable by this model]" }]
    }])
  })
})

describe("Media between the two OpenAI protocols", () => {
  it("a Chat agent on a Responses upstream: image_url and file parts as input_image and input_file", () => {
    const body = {
      model: "gpt-x",
      messages: [{ role: "user", content: [{ type: "text", text: "look" }, { type: "image_url", image_url: { url: `data:image/png;base64,${shot}` } }, { type: "file", file: { filename: "spec.pdf", file_data: `data:application/pdf;base64,${pdf}` } }] }]
    }
    const result = GatewaySwitchWire.chatToResponses.fit(fitInput(body))
    expect(result._tag).toBe("fits")
    if (result._tag !== "fits") return
    expect(result.body.input).toEqual([{
      type: "message",
      role: "user",
      content: [
        { type: "input_text", text: "look" },
        { type: "input_image", image_url: `data:image/png;base64,${shot}`, detail: "auto" },
        { type: "input_file", filename: "spec.pdf", file_data: `data:application/pdf;base64,${pdf}` }
      ]
    }])
  })

  it("a Responses agent on a Chat upstream: input_image and input_file as image_url and file parts; a function_call_output's image after the tool message", () => {
    const body = {
      model: "gpt-x",
      input: [
        { type: "message", role: "user", content: [{ type: "input_text", text: "look" }, { type: "input_image", image_url: `data:image/png;base64,${shot}` }, { type: "input_file", filename: "spec.pdf", file_data: `data:application/pdf;base64,${pdf}` }] },
        { type: "function_call", call_id: "call_1", name: "view_image", arguments: "{}" },
        { type: "function_call_output", call_id: "call_1", output: [{ type: "input_image", image_url: `data:image/png;base64,${readPng}` }] }
      ]
    }
    const result = GatewaySwitchWire.responsesToChat.fit(fitInput(body))
    expect(result._tag).toBe("fits")
    if (result._tag !== "fits") return
    expect(result.body.messages).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "look" },
          { type: "image_url", image_url: { url: `data:image/png;base64,${shot}` } },
          { type: "file", file: { filename: "spec.pdf", file_data: `data:application/pdf;base64,${pdf}` } }
        ]
      },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "view_image", arguments: "{}" } }] },
      { role: "tool", tool_call_id: "call_1", content: "[image: attached in the user message after the tool results]" },
      { role: "user", content: [{ type: "text", text: "Attached from the tool result call_1:" }, { type: "image_url", image_url: { url: `data:image/png;base64,${readPng}` } }] }
    ])
  })
})

/** The Claude Code request of the loopback tests: a 1 MB screenshot pasted, a Read's 1 MB image, a new prompt. */
const withImages = () => {
  const pasted = png(1_000_000)
  const read = png(1_000_000)
  const body = {
    model: "gpt-5",
    max_tokens: 32_000,
    stream: true,
    system: [{ type: "text", text: "You are Claude Code." }],
    tools: claudeCode().tools,
    messages: [
      { role: "user", content: [image(pasted), { type: "text", text: "what is wrong in this screenshot?" }] },
      { role: "assistant", content: [{ type: "tool_use", id: "toolu_01", name: "Read", input: { file_path: "/repo/icon.png" } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_01", content: [image(read)] }] },
      { role: "assistant", content: [{ type: "text", text: "I have both images." }] },
      { role: "user", content: [{ type: "text", text: "so what is wrong?" }] }
    ]
  }
  return { pasted, read, body }
}

/**
 * `body` sent by a Claude Code session through a gateway whose `gpt-*` models route to a loopback Chat Completions
 * instance with a 32,000-token window (`extra`: more of its config); the messages the upstream received.
 */
const sendSwitched = (body: unknown, extra: Record<string, unknown> = {}) =>
  Effect.scoped(Effect.gen(function*() {
    const chat = yield* ModelApi.start
    const settings = yield* settingsFor(
      [instance("chat", "openai-chat", chat, { contextWindow: window, autoCompactThreshold: null, maxOutputTokens: 4_096, ...extra })],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: [{ model: "gpt-*", provider: "chat" }] } }
    )
    return yield* Effect.gen(function*() {
      chat.enqueue(ModelApi.answer("openai-chat", "The icon is cut off on the right.", { input: 3_500, cacheWrite: 0, cacheRead: 0, output: 12 }))
      const answer = yield* raw(
        HttpClientRequest.post("/v1/messages?beta=true").pipe(
          HttpClientRequest.setHeaders({ "x-api-key": adminToken, "anthropic-version": "2023-06-01", "x-claude-code-session-id": "sess-media" }),
          HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
        )
      )
      expect(answer.status).toBe(200)
      const a = GatewayAnthropic.replyAssembler()
      a.push(new TextEncoder().encode(answer.text))
      expect(a.outcome()._tag).toBe("completed")
      expect(chat.requests).toHaveLength(1)
      // The run is recorded completed on the Chat instance.
      const api = yield* client()
      const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
      expect((yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs.map((r) => r.status)).toEqual(["completed"])
      return (JSON.parse(chat.requests[0]!.body) as { messages: ReadonlyArray<unknown> }).messages
    }).pipe(Effect.provide(serveSettings(settings)))
  }))

describe("Gateway, media on a switch (Anthropic Messages agent, openai-chat upstream over loopback HTTP)", () => {
  it.live("a pasted 1 MB screenshot and a Read's 1 MB image reach the Chat Completions upstream as image_url parts, untouched by the fit; the prompt unchanged", () =>
    Effect.gen(function*() {
      const { body, pasted, read } = withImages()
      // Counted as their base64 (2.7 million characters), the two images alone would be far over the 32,000-token
      // window: an overflow 400, never sent.
      expect(JSON.stringify(body).length).toBeGreaterThan(2_600_000)
      const sent = yield* sendSwitched(body)
      expect(sent).toEqual([
        { role: "system", content: "You are Claude Code." },
        { role: "user", content: [{ type: "image_url", image_url: { url: `data:image/png;base64,${pasted}` } }, { type: "text", text: "what is wrong in this screenshot?" }] },
        { role: "assistant", content: null, tool_calls: [{ id: "toolu_01", type: "function", function: { name: "Read", arguments: "{\"file_path\":\"/repo/icon.png\"}" } }] },
        { role: "tool", tool_call_id: "toolu_01", content: "[image: attached in the user message after the tool results]" },
        { role: "user", content: [{ type: "text", text: "Attached from the tool result toolu_01:" }, { type: "image_url", image_url: { url: `data:image/png;base64,${read}` } }] },
        { role: "assistant", content: "I have both images." },
        { role: "user", content: "so what is wrong?" }
      ])
      // The fit's counts: the two images at 1,600 tokens each beside a few hundred of text, nothing stubbed or left out.
      const fitted = GatewaySwitch.toChat(fitInput(body))
      expect(fitted._tag).toBe("fits")
      if (fitted._tag !== "fits") return
      expect(fitted.fit).toMatchObject({ stubbed: [], leftOut: 0, summarised: 0 })
      expect(fitted.fit.tokensBefore).toBe(fitted.fit.tokensAfter)
      expect(fitted.fit.tokensAfter).toBeGreaterThan(2 * 1_600)
      expect(fitted.fit.tokensAfter).toBeLessThan(2 * 1_600 + 1_000)
    }), { timeout: 120_000 })

  it.live("an instance configured media: false (a text-only model) gets each image as a line of text, as before media were converted", () =>
    Effect.gen(function*() {
      const sent = yield* sendSwitched(withImages().body, { media: false })
      expect(sent).toEqual([
        { role: "system", content: "You are Claude Code." },
        { role: "user", content: "[image: not sent, this model reads no images or files]\n\nwhat is wrong in this screenshot?" },
        { role: "assistant", content: null, tool_calls: [{ id: "toolu_01", type: "function", function: { name: "Read", arguments: "{\"file_path\":\"/repo/icon.png\"}" } }] },
        { role: "tool", tool_call_id: "toolu_01", content: "[image: not sent, this model reads no images or files]" },
        { role: "assistant", content: "I have both images." },
        { role: "user", content: "so what is wrong?" }
      ])
    }), { timeout: 120_000 })
})
