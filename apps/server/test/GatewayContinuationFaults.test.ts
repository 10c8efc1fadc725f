/**
 * Faults in the middle of a hidden `thread_read` round's continuation (same protocol, offload on, streamed), on the
 * three endpoints: the upstream's continuation stream breaking off ends the agent's stream with the protocol's error
 * event (Anthropic `error`, Responses `response.failed`, Chat Completions `{"error":...}`) and the run fails
 * `provider_unavailable`; the agent hanging up mid-continuation ends the run `interrupted` and aborts the upstream's
 * continuation. In both the request's message stays recorded. Attacks of branch b48gw (they held).
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { adminToken, client, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"
import { until } from "./support/Offload.js"

const u = { input: 1, cacheWrite: 0, cacheRead: 0, output: 1 }
const kinds = [
  { kind: "anthropic-messages" as const, path: "/v1/messages", body: { model: "m-x", max_tokens: 10, stream: true, tools: [{ name: "Bash", description: "b", input_schema: { type: "object", properties: {} } }], messages: [{ role: "user", content: "go" }] } },
  { kind: "openai-responses" as const, path: "/v1/responses", body: { model: "m-x", stream: true, tools: [{ type: "function", name: "Bash", description: "b", parameters: { type: "object", properties: {} } }], input: [{ role: "user", content: "go" }] } },
  { kind: "openai-chat" as const, path: "/v1/chat/completions", body: { model: "m-x", stream: true, tools: [{ type: "function", function: { name: "Bash", description: "b", parameters: { type: "object", properties: {} } } }], messages: [{ role: "user", content: "go" }] } }
]
describe("Gateway, faults during the continuation of a hidden round", () => {
  for (const k of kinds) {
    for (const fault of ["upstream cut", "client hang-up"] as const) {
      it.live(`${k.kind} ${fault}`, () =>
        Effect.scoped(Effect.gen(function*() {
          const up = yield* ModelApi.start
          const settings = yield* settingsFor([instance("up", k.kind, up)], { TEST_MODEL_KEY: marker }, undefined, { gateway: { routes: [{ model: "m-*", provider: "up" }] } })
          yield* Effect.gen(function*() {
            const read = ModelApi.answer(k.kind, "Looking.", u, [{ id: "call_r", name: "thread_read", arguments: JSON.stringify({ refs: "#1" }) }])
            const cont = ModelApi.answer(k.kind, "The long continuation text that will be cut.", u)
            const never = new Promise<void>(() => {})
            up.enqueue(read, fault === "upstream cut" ? { ...cont, cut: Math.floor(cont.body.length / 2) } : { ...cont, rest: { at: Math.floor(cont.body.length / 2), hold: never } })
            const headers = { "x-api-key": adminToken, authorization: `Bearer ${adminToken}`, "anthropic-version": "2023-06-01" }
            const req = HttpClientRequest.post(k.path).pipe(HttpClientRequest.setHeaders(headers), HttpClientRequest.bodyText(JSON.stringify(k.body), "application/json"))
            if (fault === "upstream cut") {
              const answer = yield* raw(req)
              expect(answer.status).toBe(200)
              expect(answer.text).toContain("the upstream's stream broke off")
              expect(answer.text).toContain(k.kind === "anthropic-messages" ? "event: error" : k.kind === "openai-responses" ? "event: response.failed" : "data: {\"error\"")
            } else {
              // Reads until the continuation's first bytes have come (the upstream holds its rest), then hangs up.
              yield* Effect.scoped(Effect.gen(function*() {
                const res = yield* HttpClient.execute(req)
                let text = ""
                yield* res.stream.pipe(
                  Stream.takeUntil((chunk) => (text += new TextDecoder().decode(chunk)).includes("Looking.")),
                  Stream.runDrain
                )
                yield* until(() => up.requests.length >= 2)
              }))
            }
            const api = yield* client()
            yield* until(() => up.requests.length >= 2)
            const runsNow = Effect.gen(function*() {
              const threads = (yield* api.threads.list({ urlParams: {} })).threads
              return threads.length === 0 ? [] : (yield* api.runs.list({ path: { threadId: threads[0]!.id }, urlParams: {} })).runs
            })
            let runs = yield* runsNow
            while (runs.length === 0 || runs.some((r) => r.status === "running")) {
              yield* Effect.sleep("20 millis")
              runs = yield* runsNow
            }
            expect(runs.map((r) => [r.status, r.failureCode])).toEqual([fault === "upstream cut" ? ["failed", "provider_unavailable"] : ["interrupted", "interrupted_by_user"]])
            yield* until(() => up.requests[1]!.ended() !== null)
            expect(up.requests[1]!.ended()).toBe("aborted")
            const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
            const items = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 50 } })).items
            expect(items.map((i) => [i.kind, i.text])).toEqual([["user_message", "go"]])
          }).pipe(Effect.provide(serveSettings(settings)))
        })), { timeout: 60_000 })
    }
  }
})
