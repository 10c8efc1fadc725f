/**
 * `/offload`'s refusals over HTTP (issue 12 item 2), with a loopback Anthropic summariser: a thread with work in
 * flight (a running run, a run waiting for the client's tool results, another `/offload` running) is refused with
 * 409 and what to do, and nothing is summarised; a thread whose last run failed is accepted (that is when users need
 * it); an unknown thread is 404 and a bad option 400 naming it.
 */
import type { ThreadId } from "@baton/contracts"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { client, get, post, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { chatUsage, held, itemsOf, sumUsage, summaryText, until, withThread } from "./support/Offload.js"

describe("/offload refusals over HTTP", () => {
  it.live("a running run: 409 RunInProgress naming it, nothing summarised; once it ended the offload runs", () =>
    withThread(4, ({ chat, summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const { reply, release } = held(ModelApi.answer("anthropic-messages", "slow", chatUsage))
        const asked = chat.requests.length
        chat.enqueue(reply)
        const accepted = yield* api.messages.send({ path: { threadId }, payload: { text: "a long step" }, headers: {} })
        yield* until(() => chat.requests.length > asked)
        const refused = yield* raw(post(`/threads/${threadId}/offload`, { keepTokens: 700 }))
        expect(refused.status).toBe(409)
        expect(refused.body).toMatchObject({ _tag: "RunInProgress", threadId, runId: accepted.runId })
        expect(String(refused.body!["message"])).toMatch(/interrupt it or wait/)
        expect(summariser.requests).toHaveLength(0)
        release()
        expect((yield* api.runs.get({ path: { runId: accepted.runId }, urlParams: { waitMs: 30_000 } })).run.status).toBe("completed")
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        expect((yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700 }, headers: {} })).outcome).toBe("offloaded")
      })), 120_000)

  it.live("a run waiting for the client's tool results: 409 RunInProgress, nothing summarised", () =>
    withThread(1, ({ chat, summariser }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const tool = { name: "read_file", description: "Reads a file", inputSchema: { type: "object", properties: { path: { type: "string" } } } }
        const { threadId } = yield* api.threads.create({ payload: { providerInstance: "claude" as never, tools: [tool] }, headers: {} })
        chat.enqueue(ModelApi.answer("anthropic-messages", "", chatUsage, [{ id: "toolu_w", name: "read_file", arguments: JSON.stringify({ path: "a.ts" }) }]))
        const accepted = yield* api.messages.send({ path: { threadId: threadId as ThreadId }, payload: { text: "read a.ts" }, headers: {} })
        for (;;) {
          const view = yield* api.runs.get({ path: { runId: accepted.runId }, urlParams: {} })
          if (view.run.status === "waiting") break
          expect(["queued", "starting", "running"]).toContain(view.run.status)
          yield* Effect.sleep("10 millis")
        }
        const refused = yield* raw(post(`/threads/${threadId}/offload`, {}))
        expect(refused.status).toBe(409)
        expect(refused.body).toMatchObject({ _tag: "RunInProgress", threadId, runId: accepted.runId })
        expect(summariser.requests).toHaveLength(0)
      })), 120_000)

  it.live("another /offload running on the thread: 409 OffloadInProgress naming it and what to do; the first commits; then a new one runs", () =>
    withThread(5, ({ summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const { reply, release } = held(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        summariser.enqueue(reply)
        const first = yield* Effect.fork(api.threads.offload({ path: { threadId }, payload: { keepTokens: 1_300, operationId: "op-first" }, headers: {} }))
        yield* until(() => summariser.requests.length === 1)
        const refused = yield* raw(post(`/threads/${threadId}/offload`, { keepTokens: 700, operationId: "op-second" }))
        expect(refused.status).toBe(409)
        expect(refused.body).toMatchObject({ _tag: "OffloadInProgress", threadId, operationId: "op-first" })
        expect(String(refused.body!["message"])).toContain(`GET /threads/${threadId}/offload/op-first`)
        // The refused one left no operation behind: its id is free.
        expect((yield* raw(get(`/threads/${threadId}/offload/op-second`))).status).toBe(404)
        release()
        expect(yield* Fiber.join(first)).toMatchObject({ operationId: "op-first", outcome: "offloaded" })
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        expect((yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-second" }, headers: {} })).outcome)
          .toBe("offloaded")
        expect(yield* itemsOf(threadId, "summary")).toHaveLength(2)
      })), 120_000)

  it.live("a thread whose last run failed is accepted: the offload commits", () =>
    withThread(4, ({ chat, summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        chat.enqueue(ModelApi.error(400, "invalid request: the model refused"))
        const accepted = yield* api.messages.send({ path: { threadId }, payload: { text: "this one fails" }, headers: {} })
        expect((yield* api.runs.get({ path: { runId: accepted.runId }, urlParams: { waitMs: 30_000 } })).run.status).toBe("failed")
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        expect(yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700 }, headers: {} })).toMatchObject({ outcome: "offloaded", offloaded: true })
      })), 120_000)

  it.live("an unknown thread is 404; a bad option is 400 naming it; nothing is written", () =>
    withThread(1, ({ summariser, threadId }) =>
      Effect.gen(function*() {
        const unknown = yield* raw(post("/threads/thr_nope/offload", {}))
        expect(unknown.status).toBe(404)
        expect(unknown.body).toMatchObject({ _tag: "ThreadNotFound", threadId: "thr_nope" })
        const bad = yield* raw(post(`/threads/${threadId}/offload`, { keepTokens: -5 }))
        expect(bad.status).toBe(400)
        expect(String(bad.body!["message"])).toContain("keepTokens")
        const extra = yield* raw(post(`/threads/${threadId}/offload`, { messages: [] }))
        expect(extra.status).toBe(400)
        expect(String(extra.body!["message"])).toContain("messages")
        expect(summariser.requests).toHaveLength(0)
      })), 120_000)
})
