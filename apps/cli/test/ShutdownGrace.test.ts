/**
 * `baton serve` stopped (SIGTERM) while a client follows a thread's events and runs are queued behind the run in
 * flight: the shutdown gives open requests `limits.shutdownTimeoutMs`, so the run driver must stop taking runs when
 * the shutdown begins, not when the deadline ends (found by trying it: the driver went on starting the queued runs
 * during the deadline, each reaching the provider only to be interrupted a few seconds later), and the live event
 * stream must not be one of those open requests: it ends at once with a `server_stopping` event (found by the same
 * tester: a follower, which the dashboard always is, held every shutdown till the deadline).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { frame, loopback, type Reply, sse } from "../../../packages/providers/test/support/Loopback.js"
import { anthropicInstance, callWith, serveBaton } from "./support/Served.js"

const token = "admin-token-0123456789abcdef"
const kind = "anthropic-messages" as const

/** Starts `baton serve --port 0 --config FILE --data-dir DIR`; waits for its URL. */
const serve = (config: string, dataDir: string) =>
  serveBaton(["--port", "0", "--config", config, "--data-dir", dataDir], { env: { TEST_MODEL_KEY: "sk-test-0123456789" } })

/** A JSON request to the server with the admin token. */
const call = callWith(token)

/** An answer that streams for about `millis` (pings 100 ms apart) and then ends the turn with `text`. */
const answer = (text: string, millis: number): Reply =>
  sse(frame(kind, [
    `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":50,"output_tokens":1}}}`,
    ...Array.from({ length: Math.ceil(millis / 100) }, () => `{"type":"ping"}`),
    `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
    `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":${JSON.stringify(text)}}}`,
    `{"type":"content_block_stop","index":0}`,
    `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}`,
    `{"type":"message_stop"}`
  ]), { gapMillis: 100 })

describe("baton serve stopped (SIGTERM) with a follower connected and runs queued", () => {
  it.live("the queued runs never reach the provider during the shutdown's deadline", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      // The turn in flight would end about 6 s after the SIGTERM, inside the 8 s deadline an open stream held before.
      loop.enqueue(answer("first", 6_000), answer("second", 0), answer("third", 0))
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-shutdown-grace-"))
      const config = Path.join(dir, "baton.json")
      Fs.writeFileSync(config, JSON.stringify({
        providers: [{ ...anthropicInstance("claude", loop.url), toolResultOffload: false }],
        auth: { token },
        limits: { shutdownTimeoutMs: 8_000 }
      }))
      const served = yield* Effect.acquireRelease(serve(config, dir), (s) => Effect.sync(() => void s.child.kill("SIGKILL")))
      const { threadId } = yield* call(`${served.url}/threads`, "POST", { title: "grace", providerInstance: "claude" })
      // A follower (the dashboard, `baton events --follow`): its stream is ended when the shutdown begins.
      const follower = new AbortController()
      const stream = yield* Effect.promise(() =>
        fetch(`${served.url}/threads/${threadId}/events`, { headers: { authorization: `Bearer ${token}` }, signal: follower.signal })
      )
      expect(stream.status).toBe(200)
      let streamed = ""
      const reading = stream.body!.pipeThrough(new TextDecoderStream()).pipeTo(new WritableStream({ write: (chunk) => void (streamed += chunk) })).catch(() => undefined)
      const runs: Array<string> = []
      for (const text of ["one", "two", "three"]) {
        runs.push((yield* call(`${served.url}/threads/${threadId}/messages`, "POST", { text })).runId as string)
      }
      // The first run's request is at the provider: stop the server.
      const turns = () => loop.requests.filter((r) => r.url === "/v1/messages").length
      for (let i = 0; i < 200 && turns() === 0; i++) yield* Effect.sleep("50 millis")
      expect(turns()).toBe(1)
      served.child.kill("SIGTERM")
      const code = yield* Effect.promise(() => served.exited)
      follower.abort()
      yield* Effect.promise(() => reading)
      expect(code).toBe(143)
      // Only the run in flight reached the provider; the queued ones stayed queued for the next process.
      expect(turns()).toBe(1)
      // The follower's stream ended with the server's word, last (it resumes with Last-Event-ID elsewhere or later).
      expect(streamed.endsWith(`event: server_stopping\ndata: {"message":"the server is stopping: reconnect with Last-Event-ID (the last id received)"}\n\n`)).toBe(true)

      const next = yield* Effect.acquireRelease(serve(config, dir), (s) => Effect.sync(() => void s.child.kill("SIGKILL")))
      const statuses = []
      for (const runId of runs) {
        const view = (yield* call(`${next.url}/runs/${runId}`, "GET")) as { run: { status: string; failureCode: string | null } }
        statuses.push([view.run.status, view.run.failureCode])
      }
      // The follower no longer held the shutdown till the deadline: the turn in flight was interrupted and recorded
      // (before, the open stream kept the server up past the turn's end, 6 s in, and it completed).
      expect(statuses).toEqual([
        ["interrupted", "process_stopped"],
        ["interrupted", "process_restarted"],
        ["interrupted", "process_restarted"]
      ])
    }).pipe(Effect.scoped), 180_000)
})
