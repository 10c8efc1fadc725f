/**
 * `/offload` written by a real model (issue "Server-owned /offload" item 3): the config file's `offload.summariser`
 * names a model-API instance (here an Anthropic Messages instance on a loopback model API with a small window), and
 * `POST /threads/{id}/offload` summarises through it with the structured template, in chunks when the history is
 * larger than the summariser's window, each call refining the previous summary.
 */
import type { ThreadId } from "@baton/contracts"
import { ModelSummariser } from "@baton/providers"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { client } from "./helpers.js"
import { instance, sendAndWait, serveSettings, settingsFor } from "./support/ModelServer.js"
import * as ModelApi from "./support/ModelApi.js"

const usage = { input: 100, cacheWrite: 0, cacheRead: 0, output: 20 }

/** The user texts of an Anthropic request body. */
const userText = (body: string) =>
  (JSON.parse(body) as { messages: Array<{ role: string; content: string | Array<{ type: string; text?: string }> }> }).messages
    .filter((m) => m.role === "user")
    .map((m) => typeof m.content === "string" ? m.content : m.content.map((c) => c.text ?? "").join(""))
    .join("\n")

describe("/offload through a model-API summariser", () => {
  it.scoped("summarises with the template, in chunks that fit the summariser's window, and the summary is the model's text", () =>
    Effect.gen(function*() {
      const chat = yield* ModelApi.start
      const summariser = yield* ModelApi.start
      const settings = yield* settingsFor([
        instance("claude", "anthropic-messages", chat),
        instance("sum", "anthropic-messages", summariser, { contextWindow: 8_000, autoCompactThreshold: null, maxOutputTokens: 1_000 })
      ])
      expect(settings.offload).toEqual({ summariser: null })
      const configured = { ...settings, offload: { summariser: "sum" } }
      yield* Effect.gen(function*() {
        const api = yield* client()
        const { threadId } = yield* api.threads.create({ payload: { providerInstance: "claude" as never }, headers: {} })
        const standing = "Always run the tests before you commit."
        for (let i = 0; i < 6; i++) {
          chat.enqueue(ModelApi.answer("anthropic-messages", `done step ${i}`, usage))
          const text = i === 0 ? `${standing} Step 0: ${Harness.words(1_800)}` : `Step ${i}: ${Harness.words(1_800)}`
          expect((yield* sendAndWait(threadId as ThreadId, text)).run.status).toBe("completed")
        }
        for (let k = 0; k < 5; k++) {
          summariser.enqueue(ModelApi.answer("anthropic-messages", `## Goal\n- the steps (pass ${k + 1})\n## Standing instructions\n- ${standing}`, usage))
        }
        const report = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 500 }, headers: {} })
        expect(report.offloaded).toBe(true)
        // ~11,000 tokens of history against a window of (8,000 - 1,000) x 0.9 = 6,300: at least two calls, the later
        // ones refining the summary so far.
        const calls = summariser.requests.map((r) => userText(r.body))
        expect(calls.length).toBeGreaterThanOrEqual(2)
        for (const call of calls) expect(call.startsWith(ModelSummariser.template)).toBe(true)
        expect(calls[0]).toContain(standing)
        expect(calls[1]).toContain("<previous_summary>\n## Goal\n- the steps (pass 1)")
        const summary = yield* api.items.get({ path: { itemId: report.summaryItemId! }, urlParams: {} })
        expect(summary.item.text).toContain(`## Goal\n- the steps (pass ${calls.length})`)
        expect(summary.item.text).toContain(standing)
      }).pipe(Effect.provide(serveSettings(configured)))
    }), 120_000)
})
