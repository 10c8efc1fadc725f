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

const counter = TokenCounter.make()
const count = counter.count
/** A screenshot's worth of base64 (about 400 KB of PNG). */
const payload = Crypto.randomBytes(300_000).toString("base64")

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

  it("counts base64 that is text, documents and images by URL as their JSON", () => {
    const text = { type: "tool_result", tool_use_id: "toolu_1", content: `$ base64 shot.png\n${payload.slice(0, 20_000)}` }
    const pdf = { type: "document", source: { type: "base64", media_type: "application/pdf", data: payload.slice(0, 5_000) } }
    const byUrl = { type: "image_url", image_url: { url: "https://example.com/shot.png" } }
    for (const value of [text, pdf, byUrl, "plain", null, [1, 2]]) {
      expect(GatewayMedia.jsonTokens(count, value)).toBe(count(JSON.stringify(value)))
    }
    expect(GatewayMedia.jsonTokens(count, undefined)).toBe(0)
  })

  it("counts a data URL the model wrote in a tool call's input as its JSON (text the model wrote and reads), not as an image", () => {
    // Anthropic `tool_use` inputs are objects: a `url` key there is no Chat Completions `image_url` part.
    const call = { type: "tool_use", id: "toolu_1", name: "browser_navigate", input: { url: `data:image/png;base64,${payload.slice(0, 4_000)}` } }
    expect(GatewayMedia.countable(call).images).toBe(0)
    expect(GatewayMedia.jsonTokens(count, call)).toBe(count(JSON.stringify(call)))
  })

  it("a screenshot in a tool result does not make the offload plan flush a short conversation (it counted the payload)", () => {
    const unit = (id: string, output: unknown) => [
      { role: "assistant", content: [{ type: "tool_use", id, name: "Read", input: { file_path: id } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: id, content: output }] }
    ]
    const image = { type: "image", source: { type: "base64", media_type: "image/png", data: payload } }
    const body = {
      model: "claude-x",
      tools: [{ name: "Read", input_schema: { type: "object" } }],
      messages: [
        { role: "user", content: "go" },
        ...unit("toolu_shot", [image]),
        ...["one", "two", "three", "four"].flatMap((tag) => unit(`toolu_${tag}`, `${tag}: ${"0123456789 ".repeat(800)}`)),
        { role: "user", content: "and now?" }
      ]
    }
    const out = GatewayOffload.rewrite({
      body,
      offloaded: [],
      settings: ToolResultOffload.defaults,
      windowTokens: 200_000,
      prices: { input: 3, cacheRead: 0.3, cacheWrite: 3.75 },
      requestsSoFar: 20,
      msSinceLastRequest: 1_000,
      count
    })
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
})
