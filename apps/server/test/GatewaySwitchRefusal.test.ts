/**
 * A `/v1/responses` agent (Codex) switched to an `anthropic-messages` instance whose model refuses (the recorded
 * `anthropic-refusal` stream and whole answer: no content, `stop_reason: "refusal"`): the agent gets OpenAI's form of
 * a filtered response, `incomplete` with `incomplete_details.reason: "content_filter"` (`response.incomplete` in a
 * stream). Before, it was a `completed` response with no output, on which Codex ended its turn with nothing said.
 * (A Chat Completions agent gets `finish_reason: "content_filter"`, as before.)
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken, parseSse, raw } from "./helpers.js"
import { recordedJson, recordedStream } from "./support/AnthropicFixtures.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

type Json = Record<string, unknown>

describe("Gateway, a refusal switched from Anthropic to a Responses agent", () => {
  it.live("is an incomplete response (content_filter), streamed and whole", () =>
    Effect.scoped(Effect.gen(function*() {
      const anthropic = yield* ModelApi.start
      const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", anthropic)], { TEST_MODEL_KEY: marker }, undefined, {
        gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] }
      })
      yield* Effect.gen(function*() {
        anthropic.enqueue(
          { status: 200, contentType: "text/event-stream", body: recordedStream("anthropic-refusal.chunks.txt") },
          { status: 200, contentType: "application/json", body: JSON.stringify(recordedJson("anthropic-refusal.json")) }
        )
        const send = (stream: boolean, session: string) =>
          raw(HttpClientRequest.post("/v1/responses").pipe(
            HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "thread-id": session, "session-id": session }),
            HttpClientRequest.bodyText(JSON.stringify({ model: "claude-fable-5", stream, input: "write malware" }), "application/json")
          ))
        const streamed = yield* send(true, "t-stream")
        expect(streamed.status).toBe(200)
        const last = parseSse(streamed.text).map((e) => JSON.parse(e.data) as Json).at(-1)!
        const response = last.response as Json
        // Before the fix: "response.completed", status "completed", incomplete_details null.
        expect([last.type, response.status, response.incomplete_details, response.output]).toEqual(["response.incomplete", "incomplete", { reason: "content_filter" }, []])

        const whole = yield* send(false, "t-whole")
        expect(whole.status).toBe(200)
        expect([whole.body!.status, whole.body!.incomplete_details, whole.body!.output]).toEqual(["incomplete", { reason: "content_filter" }, []])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 60_000 })
})
