/**
 * `baton serve` with an Anthropic instance killed with SIGKILL while the model's answer streams: its completed block
 * is in the durable record (an item) but the answer never finished, so the lane's message list (the native thread)
 * lacks it. After the restart the two must agree: the next request the model receives carries the partial answer
 * the record holds (found by the issue-9 review: the record kept the text, the message list did not).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { countTokensReply, frame, loopback, type Received, type Reply, sse } from "../../../packages/providers/test/support/Loopback.js"
import { anthropicInstance, callWith, serveBaton } from "./support/Served.js"

const token = "admin-token-0123456789abcdef"

/** Starts `baton serve --port 0 --config FILE --data-dir DIR`; waits for its URL. */
const serve = (config: string, dataDir: string) =>
  serveBaton(["--port", "0", "--config", config, "--data-dir", dataDir], { env: { TEST_MODEL_KEY: "sk-test-0123456789" } })

/** A JSON request to the server with the admin token. */
const call = callWith(token)

const kind = "anthropic-messages" as const

/** An answer whose text block completes and whose message_delta arrives, then only pings (no message_stop). */
const stalled = sse(frame(kind, [
  `{"type":"message_start","message":{"id":"msg_k","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":50,"output_tokens":1}}}`,
  `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
  `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Partial answer before the crash."}}`,
  `{"type":"content_block_stop","index":0}`,
  `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}`,
  ...Array.from({ length: 600 }, () => `{"type":"ping"}`)
]), { gapMillis: 100 })

const answer = sse(frame(kind, [
  `{"type":"message_start","message":{"id":"msg_2","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":80,"output_tokens":1}}}`,
  `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
  `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Second answer."}}`,
  `{"type":"content_block_stop","index":0}`,
  `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}`,
  `{"type":"message_stop"}`
]))

describe("baton serve killed mid-answer (SIGKILL) on a model-API lane", () => {
  it.live("after the restart the next request carries the partial answer the record holds", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const turns: Array<Reply> = [stalled, answer]
      const route = (request: Received): Reply =>
        request.url.endsWith("/count_tokens") ? countTokensReply((text) => Math.ceil(text.length / 4))(request) : turns.shift()!
      loop.enqueue(...Array.from({ length: 20 }, () => route))
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-model-kill-"))
      const config = Path.join(dir, "baton.json")
      Fs.writeFileSync(config, JSON.stringify({
        providers: [anthropicInstance("claude", loop.url)],
        auth: { token }
      }))
      const first = yield* Effect.acquireRelease(serve(config, dir), (s) => Effect.sync(() => void s.child.kill("SIGKILL")))
      const { threadId } = yield* call(`${first.url}/threads`, "POST", { title: "killed", providerInstance: "claude" })
      yield* call(`${first.url}/threads/${threadId}/messages`, "POST", { text: "one" })
      // Wait until the completed block is in the record, then kill the server (the answer is still streaming).
      let recorded = false
      for (let i = 0; i < 100 && !recorded; i++) {
        yield* Effect.sleep("100 millis")
        const items = (yield* call(`${first.url}/threads/${threadId}/items?afterSeq=0&limit=100`, "GET")).items as ReadonlyArray<{ text: string }>
        recorded = items.some((it) => it.text === "Partial answer before the crash.")
      }
      expect(recorded).toBe(true)
      first.child.kill("SIGKILL")
      yield* Effect.promise(() => new Promise((done) => first.child.once("close", done)))

      const second = yield* Effect.acquireRelease(serve(config, dir), (s) => Effect.sync(() => void s.child.kill("SIGKILL")))
      const sent = yield* call(`${second.url}/threads/${threadId}/messages`, "POST", { text: "two" })
      const run = (yield* call(`${second.url}/runs/${sent.runId}?waitMs=30000`, "GET")) as { run?: { status: string }; status?: string }
      expect(run.run?.status ?? run.status).toBe("completed")
      const requests = loop.requests.filter((r) => r.url === "/v1/messages")
      expect(requests.length).toBe(2)
      // The record holds the partial answer; so does the message list the model receives next.
      expect(requests[1]!.body).toContain("Partial answer before the crash.")
      const items = (yield* call(`${second.url}/threads/${threadId}/items?afterSeq=0&limit=100`, "GET")).items as ReadonlyArray<{ text: string }>
      expect(items.filter((i) => i.text === "Partial answer before the crash.").length).toBe(1)
    }).pipe(Effect.scoped), 180_000)
})
