/**
 * An inline PDF through the gateway, as Claude Code sends one it read (a `document` block in a tool result), against
 * loopback upstreams: on the Anthropic route the document's message goes out byte for byte (the payload never altered)
 * and the offload plan sizes the conversation with the PDF at its pages; `count_tokens` for a model routed to Chat Completions is answered with the PDF
 * counted by its pages. Before, its base64 was counted as text (about 400,000 tokens for a 600 KB scan): the offload
 * plan stubbed the conversation's tool results and the count answered hundreds of thousands.
 */
import { TokenCounter } from "@baton/context"
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as GatewayMedia from "../src/GatewayMedia.js"
import { adminToken, client, get, raw } from "./helpers.js"
import * as Media from "./support/Media.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"

const counter = TokenCounter.make()
const usage = { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 }
const system = [{ type: "text", text: "You are Claude Code." }]
const tools = [{ name: "Read", description: "Reads a file.", input_schema: { type: "object", properties: { file_path: { type: "string" } } } }]

/** A 3-page scan of about 600 KB (PDF 1.5, its pages in a compressed object stream). */
const scan = Media.pdf(3, { layout: "packed", imageBytes: 600_000 }).toString("base64")

/** Claude Code's history after reading `paper.pdf` and four text files, and a new question. */
const history = () => {
  const unit = (id: string, output: unknown) => [
    { role: "assistant", content: [{ type: "tool_use", id, name: "Read", input: { file_path: `${id}.txt` } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: id, content: output }] }
  ]
  return [
    { role: "user", content: [{ type: "text", text: "summarise paper.pdf against the notes" }] },
    ...unit("toolu_pdf", [{ type: "document", source: { type: "base64", media_type: "application/pdf", data: scan } }]),
    ...["one", "two", "three", "four"].flatMap((tag) => unit(`toolu_${tag}`, `${tag}: ${"0123456789 ".repeat(800)}`)),
    { role: "user", content: [{ type: "text", text: "and now?" }] }
  ]
}

const post = (path: string, body: unknown) =>
  HttpClientRequest.post(path).pipe(
    HttpClientRequest.setHeaders({ "anthropic-version": "2023-06-01", "x-api-key": adminToken, "x-claude-code-session-id": "session-pdf" }),
    HttpClientRequest.bodyText(JSON.stringify(body), "application/json")
  )

describe("Gateway inline documents", () => {
  it.live("a PDF Claude Code read goes upstream byte for byte and is not offloaded; the plan counts it by its pages (it counted about 400,000 tokens of base64)", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
      })
      yield* Effect.gen(function*() {
        upstream.enqueue(ModelApi.answer("anthropic-messages", "Done.", usage))
        const messages = history()
        const answer = yield* raw(post("/v1/messages?beta=true", { model: "claude-x", max_tokens: 100, stream: true, system, tools, messages }))
        expect(answer.status).toBe(200)
        expect(upstream.requests).toHaveLength(1)
        const sent = upstream.requests[0]!.body
        // The document's message goes out byte for byte.
        expect(sent).toContain(JSON.stringify(messages[2]))
        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
        // The offload plan saw the conversation's size with the PDF at its pages (about 26,000 tokens): a mild flush at
        // most, the PDF kept (before: its base64 counted as text put the request in the emergency tier).
        const flushes = events.filter((e) => e.type === "gateway.offloaded").map((e) => e.payload as { refs: Array<string>; tier: string; tokensBefore: number })
        for (const f of flushes) {
          expect(f.tier).toBe("mild")
          expect(f.tokensBefore).toBeLessThan(40_000)
          expect(f.refs).not.toContain("tool:toolu_pdf")
        }
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 60_000)

  it.live("count_tokens for a model routed to Chat Completions counts the PDF by its pages", () =>
    Effect.scoped(Effect.gen(function*() {
      const anthropic = yield* ModelApi.start
      const chat = yield* ModelApi.start
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", anthropic), instance("chat", "openai-chat", chat)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }, { model: "gpt-*", provider: "chat" }] }
      })
      yield* Effect.gen(function*() {
        const messages = history()
        const counted = yield* raw(post("/v1/messages/count_tokens?beta=true", { model: "gpt-5", system, tools, messages }))
        expect(counted.status).toBe(200)
        const withoutPayload = JSON.stringify(messages).replace(scan, "")
        const expected = counter.count(JSON.stringify(system)) + counter.count(withoutPayload) + 3 * GatewayMedia.pdfPageTokens + counter.count(JSON.stringify(tools))
        // About 26,000 (before: 564,261, the base64 counted as text).
        expect(counted.body).toEqual({ input_tokens: expected })
        expect([anthropic.requests.length, anthropic.counts.length, chat.requests.length]).toEqual([0, 0, 0])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 60_000)
})
