/**
 * Model-API provider instances from the server's config file (issue 9 items 4 and 5): the production orchestrator
 * (`Server.orchestratorLayer`) built from a resolved config whose providers are Anthropic Messages, OpenAI Responses
 * and Chat Completions instances pointed at loopback model APIs, served over real HTTP. A message posted through the
 * API runs on the model and its text is recorded; the key is sent upstream and nowhere else (no response, no log
 * line, no error), even when the upstream fails.
 */
import type { Item, ThreadEventOf, ThreadId } from "@baton/contracts"
import { TokenCounter, ToolResultOffload } from "@baton/context"
import { NativeMessageStore } from "@baton/persistence"
import type { NativeMessageLog } from "@baton/providers"
import { Server, ServerConfig } from "@baton/server"
import { HttpClientRequest } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, Logger } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { adminToken, client, get, parseSse, post, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"

/** The thread events of a `follow=false` event stream body. */
export const threadEvents = (text: string) =>
  parseSse(text).filter((e) => e.event !== "heartbeat").map((e) => JSON.parse(e.data) as { readonly type: string; readonly payload: unknown })

/** A key value that must never leave the upstream request's auth header. */
const marker = "sk-MARKER-7f3a9c21d5e84b06"

const prices = { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 }

/** A model instance entry of the config file. */
export const instance = (name: string, kind: ModelApi.Kind, api: ModelApi.ModelApi, extra: Record<string, unknown> = {}) => ({
  kind,
  name,
  baseUrl: ModelApi.baseUrl(kind, api),
  model: `${kind}-model`,
  apiKeyEnv: "TEST_MODEL_KEY",
  contextWindow: 200_000,
  autoCompactThreshold: 180_000,
  maxOutputTokens: 4_096,
  prices,
  maxRetries: 0,
  ...extra
})

/** Settings resolved from a config file holding `providers` (SQLite in a fresh directory), the key in the environment. */
export const settingsFor = (providers: ReadonlyArray<unknown>, env: Record<string, string> = { TEST_MODEL_KEY: marker }, dir?: string) =>
  Effect.gen(function*() {
    const data = dir ?? Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-models-"))
    const config = Path.join(data, "baton.json")
    Fs.writeFileSync(config, JSON.stringify({ providers, auth: { token: adminToken } }))
    return yield* ServerConfig.resolve({ config, dataDir: data }).pipe(
      Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))
    )
  })

/** The API over the production orchestrator of `settings`, on a loopback port. */
export const serveSettings = (settings: ServerConfig.ServerSettings) =>
  Server.httpLayer({ tokens: { admin: settings.auth.adminToken, read: settings.auth.readToken }, maxBodyBytes: settings.limits.maxBodyBytes }).pipe(
    Layer.provideMerge(NodeHttpServer.layerTest),
    Layer.provideMerge(Server.orchestratorLayer(settings))
  )

/** Sends `text` on `threadId` and waits for its run to end: the run view. */
export const sendAndWait = (threadId: ThreadId, text: string) =>
  Effect.gen(function*() {
    const api = yield* client()
    const accepted = yield* api.messages.send({ path: { threadId }, payload: { text }, headers: {} })
    return yield* api.runs.get({ path: { runId: accepted.runId }, urlParams: { waitMs: 30_000 } })
  })

const kinds: ReadonlyArray<ModelApi.Kind> = ["anthropic-messages", "openai-responses", "openai-chat"]

describe("model-API provider instances from the config file", () => {
  it.scoped("a message posted over HTTP runs on each kind of instance and the model's text is recorded; the key goes upstream only", () =>
    Effect.gen(function*() {
      const apis = yield* Effect.forEach(kinds, () => ModelApi.start)
      const names = ["claude", "gpt", "local"]
      const settings = yield* settingsFor([
        instance("claude", "anthropic-messages", apis[0]!),
        instance("gpt", "openai-responses", apis[1]!),
        instance("local", "openai-chat", apis[2]!, { apiKeyEnv: undefined })
      ])
      const logs: Array<string> = []
      const capture = Logger.replace(Logger.defaultLogger, Logger.make(({ message }) => void logs.push(JSON.stringify(message))))
      const texts: Array<string> = []
      yield* Effect.gen(function*() {
        yield* Server.describeSettings(settings)
        const api = yield* client()
        for (const [i, kind] of kinds.entries()) {
          const { threadId } = yield* api.threads.create({ payload: { title: kind, providerInstance: names[i] as never }, headers: {} })
          apis[i]!.enqueue(ModelApi.answer(kind, `hello from ${kind}`, { input: 100, cacheWrite: 0, cacheRead: 0, output: 10 }))
          const view = yield* sendAndWait(threadId, `hi ${kind}`)
          expect(view.run.status).toBe("completed")
          expect(view.items.map((item) => [item.kind, item.text])).toEqual([["user_message", `hi ${kind}`], ["assistant_message", `hello from ${kind}`]])
          // The request went to the instance's endpoint with its model; the prompt is in it, byte for byte.
          const request = apis[i]!.requests.at(-1)!
          expect(request.url).toBe(kind === "anthropic-messages" ? "/v1/messages" : kind === "openai-responses" ? "/v1/responses" : "/v1/chat/completions")
          expect(request.body).toContain(`"model":"${kind}-model"`)
          expect(request.body).toContain(`hi ${kind}`)
          for (const path of [`/threads/${threadId}`, `/runs/${view.run.id}`, `/threads/${threadId}/items`, `/threads/${threadId}/events?follow=false`]) {
            texts.push((yield* raw(get(path))).text)
          }
        }
        // The key travels in the auth header of the instances that name one, and nowhere in a body.
        expect(apis[0]!.requests[0]!.headers["x-api-key"]).toBe(marker)
        expect(apis[1]!.requests[0]!.headers.authorization).toBe(`Bearer ${marker}`)
        expect(apis[2]!.requests[0]!.headers.authorization).toBeUndefined()

        // A failing upstream (the key refused): the run fails with the provider's message, without the key.
        const { threadId } = yield* api.threads.create({ payload: { providerInstance: "claude" as never }, headers: {} })
        apis[0]!.enqueue(ModelApi.error(401, "invalid x-api-key"))
        const failed = yield* sendAndWait(threadId, "again")
        expect(failed.run.status).toBe("failed")
        expect(failed.run.failureReason ?? "").toContain("invalid x-api-key")
        for (const path of [`/threads/${threadId}`, `/runs/${failed.run.id}`, `/threads/${threadId}/events?follow=false`, "/threads", "/events?follow=false", "/openapi.json"]) {
          texts.push((yield* raw(get(path))).text)
        }
      }).pipe(Effect.provide(Layer.provideMerge(serveSettings(settings), capture)))
      expect(texts.length).toBeGreaterThan(10)
      expect(logs.join("\n")).toContain("providers: claude (anthropic-messages anthropic-messages-model at http://127.0.0.1")
      expect(logs.join("\n")).toContain("key from TEST_MODEL_KEY")
      for (const text of [...texts, ...logs, JSON.stringify(settings), ...apis.flatMap((a) => a.requests.map((r) => r.body))]) {
        expect(text).not.toContain(marker)
      }
    }), 60_000)

  it.effect("the start-up log hides a password in an instance's base URL", () =>
    Effect.gen(function*() {
      const settings = yield* settingsFor([{ ...instance("local", "openai-chat", { url: "http://proxy:s3cret-pass@127.0.0.1:9", requests: [], counts: [], enqueue: () => undefined }), apiKeyEnv: undefined }])
      const logs: Array<string> = []
      yield* Server.describeSettings(settings).pipe(
        Effect.provide(Logger.replace(Logger.defaultLogger, Logger.make(({ message }) => void logs.push(JSON.stringify(message)))))
      )
      expect(logs.join("\n")).toContain("at http://proxy:***@127.0.0.1:9/v1")
      expect(logs.join("\n")).not.toContain("s3cret-pass")
    }))

  it.effect("an instance whose window is below the turn-start reserve is named at start with its window and the reserve", () =>
    Effect.gen(function*() {
      const api = { url: "http://127.0.0.1:9", requests: [], counts: [], enqueue: () => undefined }
      // 16,000 is below reserve + the minimum useful budget (16,000 + 1,024); 17,024 and 200,000 are not.
      const settings = yield* settingsFor([
        instance("tiny", "openai-chat", api, { apiKeyEnv: undefined, contextWindow: 16_000, autoCompactThreshold: null, maxOutputTokens: 2_000 }),
        instance("edge", "openai-chat", api, { apiKeyEnv: undefined, contextWindow: 17_024, autoCompactThreshold: null, maxOutputTokens: 2_000 }),
        instance("big", "openai-chat", api, { apiKeyEnv: undefined })
      ])
      const logs: Array<{ level: string; message: string }> = []
      yield* Server.describeSettings(settings).pipe(
        Effect.provide(Logger.replace(Logger.defaultLogger, Logger.make(({ logLevel, message }) =>
          void logs.push({ level: logLevel.label, message: Array.isArray(message) ? message.join(" ") : String(message) }))))
      )
      const warnings = logs.filter((l) => l.level === "WARN").map((l) => l.message)
      expect(warnings).toEqual([
        "provider tiny: a window of 16000 tokens leaves no history budget after the 16000-token reserve; owed history is deferred at every turn and only /compact drains it"
      ])
    }))

  it.scoped("a changed model or window takes effect at the next turn start after a restart (snapshot and event)", () =>
    Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-models-"))
      const kind = "anthropic-messages" as const
      const first = yield* settingsFor([instance("claude", kind, upstream)], undefined, dir)
      const threadId = yield* Effect.gen(function*() {
        const api = yield* client()
        const { threadId } = yield* api.threads.create({ payload: { providerInstance: "claude" as never }, headers: {} })
        upstream.enqueue(ModelApi.answer(kind, "one", { input: 50, cacheWrite: 0, cacheRead: 0, output: 5 }))
        expect((yield* sendAndWait(threadId, "first")).run.status).toBe("completed")
        const lane = (yield* api.threads.get({ path: { threadId } })).providerThreads[0]!
        expect([lane.model, lane.contextWindow, lane.nativeThreads.map((n) => n.window)]).toEqual([`${kind}-model`, 200_000, [180_000]])
        return threadId
      }).pipe(Effect.provide(serveSettings(first)))

      // The next process on the same database, its instance changed in the file: smaller window, another model.
      const second = yield* settingsFor([instance("claude", kind, upstream, { model: "claude-haiku-4-5", contextWindow: 100_000, autoCompactThreshold: 90_000 })], undefined, dir)
      yield* Effect.gen(function*() {
        const api = yield* client()
        // Until a turn starts, the lane shows what it was recorded with.
        expect((yield* api.threads.get({ path: { threadId } })).providerThreads[0]!.contextWindow).toBe(200_000)
        upstream.enqueue(ModelApi.answer(kind, "two", { input: 60, cacheWrite: 0, cacheRead: 0, output: 5 }))
        expect((yield* sendAndWait(threadId, "second")).run.status).toBe("completed")
        expect(upstream.requests.at(-1)!.body).toContain(`"model":"claude-haiku-4-5"`)
        const lane = (yield* api.threads.get({ path: { threadId } })).providerThreads[0]!
        expect([lane.model, lane.contextWindow, lane.nativeThreads.map((n) => n.window)]).toEqual(["claude-haiku-4-5", 100_000, [90_000]])
        const events = yield* raw(get(`/threads/${threadId}/events?follow=false`))
        const reconfigured = threadEvents(events.text).filter((e) => e.type === "provider_thread.reconfigured")
        expect(reconfigured.map((e) => e.payload)).toEqual([{
          providerThreadId: lane.id,
          model: "claude-haiku-4-5",
          contextWindow: 100_000,
          previousModel: `${kind}-model`,
          previousContextWindow: 200_000
        }])
      }).pipe(Effect.provide(serveSettings(second)))
    }), 60_000)

  it.scoped("each run's cost (tokens billed, dollars at the configured prices) is in the run view and the snapshot, with thread totals", () =>
    Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const local = yield* ModelApi.start
      const settings = yield* settingsFor([
        instance("claude", "anthropic-messages", upstream),
        instance("gpt", "openai-responses", local, { prices: { input: 1.25, cacheWrite: 0, cacheRead: 0.125, output: 10 } })
      ])
      yield* Effect.gen(function*() {
        const api = yield* client()
        const { threadId } = yield* api.threads.create({ payload: { providerInstance: "claude" as never }, headers: {} })
        upstream.enqueue(
          ModelApi.answer("anthropic-messages", "one", { input: 1_200, cacheWrite: 300, cacheRead: 5_000, output: 250 }),
          ModelApi.answer("anthropic-messages", "two", { input: 100, cacheWrite: 0, cacheRead: 6_000, output: 50 })
        )
        const first = yield* sendAndWait(threadId, "first")
        const second = yield* sendAndWait(threadId, "second")
        // 1,200 x $3 + 300 x $3.75 + 5,000 x $0.30 + 250 x $15 per million = $0.009975.
        expect(first.cost).toMatchObject({ runId: first.run.id, providerInstance: "claude", inputTokens: 1_200, cacheWriteTokens: 300, cacheReadTokens: 5_000, outputTokens: 250 })
        expect(first.cost!.costUsd).toBeCloseTo(0.009975, 12)
        expect(second.cost!.costUsd).toBeCloseTo(0.00285, 12)

        // A switch to an OpenAI instance: its cached tokens are billed as cache reads (input 2,000 of which 1,500 cached).
        yield* api.threads.switchProvider({ path: { threadId }, payload: { providerInstance: "gpt" as never }, headers: {} })
        local.enqueue(ModelApi.answer("openai-responses", "three", { input: 500, cacheWrite: 0, cacheRead: 1_500, output: 100 }))
        const third = yield* sendAndWait(threadId, "third")
        expect(third.run.status).toBe("completed")
        expect(third.cost).toMatchObject({ providerInstance: "gpt", inputTokens: 500, cacheWriteTokens: 0, cacheReadTokens: 1_500, outputTokens: 100 })
        // 500 x $1.25 + 1,500 x $0.125 + 100 x $10 per million = $0.0018125.
        expect(third.cost!.costUsd).toBeCloseTo(0.0018125, 12)

        const snapshot = yield* api.threads.get({ path: { threadId } })
        expect(snapshot.costs.recentRuns.map((c) => [c.runId, c.inputTokens, c.outputTokens])).toEqual([
          [first.run.id, 1_200, 250],
          [second.run.id, 100, 50],
          [third.run.id, 500, 100]
        ])
        expect(snapshot.costs.totals).toMatchObject({ runs: 3, inputTokens: 1_800, cacheWriteTokens: 300, cacheReadTokens: 12_500, outputTokens: 400 })
        expect(snapshot.costs.totals.costUsd).toBeCloseTo(0.009975 + 0.00285 + 0.0018125, 12)
        // The raw JSON carries the same figures.
        const json = (yield* raw(get(`/runs/${first.run.id}`))).body as { readonly cost: Record<string, unknown> }
        expect(json.cost).toMatchObject({ inputTokens: 1_200, cacheWriteTokens: 300, cacheReadTokens: 5_000, outputTokens: 250, costUsd: 0.009975 })
      }).pipe(Effect.provide(serveSettings(settings)))
    }), 60_000)

  it.scoped("a run failing on a provider error is logged as a warning naming the thread, run, instance and reason, the key redacted", () =>
    Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("claude", "anthropic-messages", upstream)])
      const logs: Array<{ level: string; message: string; annotations: Record<string, unknown> }> = []
      const capture = Logger.replace(Logger.defaultLogger, Logger.make(({ annotations, logLevel, message }) =>
        void logs.push({
          level: logLevel.label,
          message: Array.isArray(message) ? message.join(" ") : String(message),
          annotations: Object.fromEntries(annotations)
        })))
      yield* Effect.gen(function*() {
        const api = yield* client()
        const { threadId } = yield* api.threads.create({ payload: { providerInstance: "claude" as never }, headers: {} })
        // A proxy that echoes the key it was sent: the reason reaches the log with the key redacted.
        upstream.enqueue(ModelApi.error(401, `invalid x-api-key ${marker}`))
        const failed = yield* sendAndWait(threadId, "hello")
        expect(failed.run.status).toBe("failed")
        const warnings = logs.filter((l) => l.level === "WARN" && l.message.includes(failed.run.id))
        expect(warnings.map((l) => l.message)).toEqual([
          `run ${failed.run.id} of thread ${threadId} failed on provider claude (startTurn, refused, HTTP 401): HTTP 401: Anthropic invalid_request_error: invalid x-api-key <redacted>`
        ])
        expect(warnings[0]!.annotations).toMatchObject({ threadId, runId: failed.run.id, providerInstance: "claude" })
      }).pipe(Effect.provide(Layer.provideMerge(serveSettings(settings), capture)))
      for (const l of logs) expect(JSON.stringify(l)).not.toContain(marker)
    }), 60_000)

  it.scoped("a run whose stream breaks off after the provider reported usage shows that usage and its cost", () =>
    Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("claude", "anthropic-messages", upstream)])
      /** An Anthropic answer cut just before `event` (the connection closes there: no message_stop). */
      const cut = (text: string, event: string): ModelApi.Reply => {
        const whole = ModelApi.answer("anthropic-messages", text, { input: 1_200, cacheWrite: 300, cacheRead: 5_000, output: 250 })
        return { ...whole, body: whole.body.slice(0, whole.body.indexOf(`event: ${event}`)) }
      }
      yield* Effect.gen(function*() {
        const api = yield* client()
        const { threadId } = yield* api.threads.create({ payload: { providerInstance: "claude" as never }, headers: {} })
        // The text completed, then the stream ended before message_delta: message_start's usage is what was billed
        // (1,200 in, 300 cache write, 5,000 cache read, 1 out).
        upstream.enqueue(cut("partial answer", "message_delta"))
        const broken = yield* sendAndWait(threadId, "first")
        expect(broken.run.status).toBe("failed")
        expect(broken.items.map((i) => i.text)).toEqual(["first", "partial answer"])
        expect(broken.cost).toMatchObject({ inputTokens: 1_200, cacheWriteTokens: 300, cacheReadTokens: 5_000, outputTokens: 1 })
        // 1,200 x $3 + 300 x $3.75 + 5,000 x $0.30 + 1 x $15 per million.
        expect(broken.cost!.costUsd).toBeCloseTo(0.006240, 12)
        // Cut right after message_start: nothing completed, but the request was read and billed.
        upstream.enqueue(cut("never seen", "content_block_start"))
        const early = yield* sendAndWait(threadId, "second")
        expect(early.run.status).toBe("failed")
        expect(early.cost).toMatchObject({ inputTokens: 1_200, cacheWriteTokens: 300, cacheReadTokens: 5_000, outputTokens: 1 })
        const snapshot = yield* api.threads.get({ path: { threadId } })
        expect(snapshot.costs.totals).toMatchObject({ runs: 2, inputTokens: 2_400, outputTokens: 2 })
      }).pipe(Effect.provide(serveSettings(settings)))
    }), 60_000)

  /**
   * One turn of a tool-heavy conversation: the model calls Baton's `thread_read` `rounds` times (each result a page
   * of the long first message), then answers. Returns the run, the thread's `context.offloaded` events and the
   * requests the upstream received.
   */
  const toolHeavyTurn = (toolResultOffload: boolean, rounds: number) =>
    Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("claude", "anthropic-messages", upstream, { toolResultOffload })])
      return yield* Effect.gen(function*() {
        const api = yield* client()
        const { threadId } = yield* api.threads.create({ payload: { providerInstance: "claude" as never }, headers: {} })
        for (let i = 1; i <= rounds; i++) {
          upstream.enqueue(ModelApi.answer("anthropic-messages", "", { input: 100, cacheWrite: 0, cacheRead: 1_000, output: 20 }, [
            { id: `toolu_${i}`, name: "thread_read", arguments: JSON.stringify({ refs: "#1" }) }
          ]))
        }
        upstream.enqueue(ModelApi.answer("anthropic-messages", "done", { input: 100, cacheWrite: 0, cacheRead: 1_000, output: 5 }))
        const long = Array.from({ length: 120 }, (_, i) => `line ${i}: the module ${i} imports ${i + 1} and exports ${i * 7}`).join("\n")
        const view = yield* sendAndWait(threadId, long)
        const turnRequests = upstream.requests.length
        // Then the model reads the first stubbed unit back by its stub's ref.
        upstream.enqueue(
          ModelApi.answer("anthropic-messages", "", { input: 100, cacheWrite: 0, cacheRead: 1_000, output: 20 }, [
            { id: "toolu_back", name: "thread_read", arguments: JSON.stringify({ refs: "tool:toolu_1" }) }
          ]),
          ModelApi.answer("anthropic-messages", "read", { input: 100, cacheWrite: 0, cacheRead: 1_000, output: 5 })
        )
        const readBack = yield* sendAndWait(threadId, "read the first page back")
        const page = (query: string) => Effect.map(raw(get(`/threads/${threadId}/items?limit=500${query}`)), (r) => r.body!["items"] as ReadonlyArray<Item>)
        const clientItems = yield* page("")
        const allItems = yield* page("&batonTools=true")
        const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
        const snapshot = yield* api.threads.get({ path: { threadId } })
        const log = yield* NativeMessageStore.make
        const nativeRef = snapshot.providerThreads[0]!.nativeThreads[0]!.nativeRef
        return { view, readBack, clientItems, allItems, events, requests: upstream.requests.slice(0, turnRequests), nativeRef, entries: yield* log.load(nativeRef, 0), nativeThreadId: snapshot.providerThreads[0]!.nativeThreads[0]!.id }
      }).pipe(Effect.provide(serveSettings(settings)))
    })

  it.scoped("tool-result offload over HTTP, 60 tool rounds: each request extends the previous except at the reported flushes (context.offloaded events with their figures); thread_read on a stub returns the original; off, none", () =>
    Effect.gen(function*() {
      const rounds = 60
      const on = yield* toolHeavyTurn(true, rounds)
      expect(on.view.run.status).toBe("completed")
      expect(on.requests).toHaveLength(rounds + 1)
      const flushes = on.events.filter((e) => e.type === "context.offloaded").map((e) => e.payload as ThreadEventOf<"context.offloaded">["payload"])
      expect(flushes.length).toBeGreaterThan(0)
      // The log's offload entries are the flushes, one for one, in order.
      const offloadEntries = on.entries.filter((e) => e.kind === "offload")
      expect(offloadEntries).toHaveLength(flushes.length)
      const counter = TokenCounter.make()
      const bodyOf = new Map(on.entries.map((e) => [e.seq, e.body]))
      for (const [i, f] of flushes.entries()) {
        expect(f).toMatchObject({ runId: on.view.run.id, providerInstance: "claude", nativeThreadId: on.nativeThreadId, nativeRef: on.nativeRef })
        expect(f.units).toBe(f.refs.length)
        expect(f.refs.every((r) => /^tool:toolu_\d+$/.test(r))).toBe(true)
        const replaces = (JSON.parse(offloadEntries[i]!.body) as NativeMessageLog.OffloadBody).replaces
        expect(replaces.map((r) => r.seq)).toEqual(f.entrySeqs)
        // The tokens released are the stubbed results' tokens less their stubs' (Baton's count of the stored bodies).
        const released = replaces.reduce((n, r) => n + counter.count(bodyOf.get(r.seq)!) - counter.count(r.body), 0)
        expect(f.tokensBefore - f.tokensAfter).toBe(released)
        expect(released).toBeGreaterThan(0)
        // The next request carries the stubs in place of the results.
        for (const ref of f.refs) expect(on.requests.at(-1)!.body).toContain(`thread_read ${ref}]`)
      }
      // Request i extends request i - 1 byte for byte (cache markers aside), except right after a flush: one prefix
      // break per flush, at the first stub.
      const messagesOf = (body: string) =>
        (JSON.parse(body) as { messages: Array<unknown> }).messages.map((m) => JSON.stringify(m, (key, value: unknown) => key === "cache_control" ? undefined : value))
      let breaks = 0
      for (let i = 1; i < on.requests.length; i++) {
        const before = messagesOf(on.requests[i - 1]!.body)
        const after = messagesOf(on.requests[i]!.body)
        let k = 0
        while (k < before.length && before[k] === after[k]) k++
        if (k === before.length) continue
        breaks++
        expect(after[k]).toContain("[offloaded, thread_read tool:toolu_")
      }
      expect(breaks).toBe(flushes.length)
      // The stub's ref reads the original back in full: the call and its result, the page of the first message.
      expect(flushes[0]!.refs[0]).toBe("tool:toolu_1")
      // Baton ran thread_read inside the turn: the client never sees it as a tool call (run views and item pages leave
      // it out), but the record keeps it, readable with batonTools=true or by id.
      for (const items of [on.view.items, on.readBack.items, on.clientItems]) {
        expect(items.filter((i) => i.kind === "tool_call" || i.kind === "tool_result")).toEqual([])
      }
      expect(on.readBack.items.map((i) => i.kind)).toEqual(["user_message", "assistant_message"])
      expect(on.allItems.filter((i) => i.kind === "tool_call").length).toBe(rounds + 1)
      const back = on.allItems.find((i) => i.kind === "tool_result" && i.toolCallId === "toolu_back")!
      expect(back.text).toMatch(/^\[tool_call thread_read toolu_1 #2\]\n\{"refs":"#1"\}\n\n\[tool_result thread_read toolu_1 #3\]\n\[user #1\]\nline 0: /)
      expect(back.text).toContain("line 60: the module 60 imports 61 and exports 420")
      expect(back.text).not.toContain("[offloaded")

      const off = yield* toolHeavyTurn(false, rounds)
      expect(off.view.run.status).toBe("completed")
      expect(off.events.filter((e) => e.type === "context.offloaded")).toEqual([])
      expect(off.entries.filter((e) => e.kind === "offload")).toEqual([])
      expect(off.requests.at(-1)!.body).not.toContain("[offloaded")
      expect(off.requests.at(-1)!.body.length).toBeGreaterThan(on.requests.at(-1)!.body.length * 2)
    }), 120_000)

  it.scoped("tool-result offload over HTTP: the dry run changes nothing, undo brings the newest flush's originals back (idempotent, an event), a scripted thread is refused", () =>
    Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("claude", "anthropic-messages", upstream), { name: "codex", window: 44_000 }])
      yield* Effect.gen(function*() {
        const api = yield* client()
        const { threadId } = yield* api.threads.create({ payload: { providerInstance: "claude" as never }, headers: {} })
        // No native thread yet: the dry run says so.
        const early = yield* raw(get(`/threads/${threadId}/tool-result-offload`))
        expect(early.status).toBe(400)
        expect(early.body).toMatchObject({ _tag: "InvalidRequest" })
        expect(String(early.body!["reason"])).toContain("no native thread")
        const rounds = 40
        for (let i = 1; i <= rounds; i++) {
          upstream.enqueue(ModelApi.answer("anthropic-messages", "", { input: 100, cacheWrite: 0, cacheRead: 1_000, output: 20 }, [
            { id: `toolu_${i}`, name: "thread_read", arguments: JSON.stringify({ refs: "#1" }) }
          ]))
        }
        upstream.enqueue(ModelApi.answer("anthropic-messages", "done", { input: 100, cacheWrite: 0, cacheRead: 1_000, output: 5 }))
        const long = Array.from({ length: 120 }, (_, i) => `line ${i}: the module ${i} imports ${i + 1} and exports ${i * 7}`).join("\n")
        expect((yield* sendAndWait(threadId, long)).run.status).toBe("completed")
        const eventsOf = Effect.map(raw(get(`/threads/${threadId}/events?follow=false`)), (r) => threadEvents(r.text))
        const flushes = (yield* eventsOf).filter((e) => e.type === "context.offloaded").map((e) => e.payload as ThreadEventOf<"context.offloaded">["payload"])
        expect(flushes.length).toBeGreaterThan(0)
        const newest = flushes.at(-1)!

        const preview = yield* api.threads.previewToolResultOffload({ path: { threadId } })
        expect(preview).toMatchObject({ threadId, providerInstance: "claude", nativeRef: newest.nativeRef, enabled: true })
        expect(preview.stubbedEntries).toBe(flushes.reduce((n, f) => n + f.entrySeqs.length, 0))
        expect(preview.tokensAfter).toBeLessThanOrEqual(preview.tokensBefore)

        const key = "undo-1"
        const undo = yield* api.threads.undoToolResultOffload({ path: { threadId }, payload: {}, headers: { "idempotency-key": key } })
        expect(undo).toMatchObject({ threadId, providerInstance: "claude", nativeRef: newest.nativeRef, undone: true, entrySeqs: newest.entrySeqs })
        // The same key answers the first answer and undoes nothing more.
        expect(yield* api.threads.undoToolResultOffload({ path: { threadId }, payload: {}, headers: { "idempotency-key": key } })).toEqual(undo)
        const undoneEvents = (yield* eventsOf).filter((e) => e.type === "context.offload_undone")
        expect(undoneEvents.map((e) => e.payload)).toEqual([{
          providerInstance: "claude",
          nativeThreadId: newest.nativeThreadId,
          nativeRef: newest.nativeRef,
          flushSeq: undo.flushSeq,
          entrySeqs: newest.entrySeqs
        }])
        // The next request carries the undone results verbatim again, the older flushes' stubs still.
        upstream.enqueue(ModelApi.answer("anthropic-messages", "ok", { input: 100, cacheWrite: 0, cacheRead: 1_000, output: 5 }))
        const after = yield* sendAndWait(threadId, "and now?")
        expect(after.run.status).toBe("completed")
        const body = upstream.requests.at(-1)!.body
        for (const ref of newest.refs) expect(body).not.toContain(`thread_read ${ref}]`)
        for (const f of flushes.slice(0, -1)) for (const ref of f.refs) expect(body).toContain(`thread_read ${ref}]`)

        // A thread on a scripted instance keeps no message list: a clear 400.
        const scripted = yield* api.threads.create({ payload: { providerInstance: "codex" as never }, headers: {} })
        const refused = yield* raw(get(`/threads/${scripted.threadId}/tool-result-offload`))
        expect(refused.status).toBe(400)
        expect(String(refused.body!["reason"])).toContain("keeps no message list")
      }).pipe(Effect.provide(serveSettings(settings)))
    }), 120_000)

  it.scoped("tool-result offload control over HTTP: the model's offload_context, a thread's settings and pins, on/off; bad controls named (issue 11 item 4)", () =>
    Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("claude", "anthropic-messages", upstream)])
      yield* Effect.gen(function*() {
        const api = yield* client()
        const { threadId } = yield* api.threads.create({ payload: { providerInstance: "claude" as never }, headers: {} })
        const usage = { input: 100, cacheWrite: 0, cacheRead: 1_000, output: 20 }
        const controlUrl = `/threads/${threadId}/tool-result-offload/control`
        const put = (body: unknown) => raw(post(controlUrl, body).pipe(HttpClientRequest.setMethod("PUT")))
        const eventsOf = Effect.map(raw(get(`/threads/${threadId}/events?follow=false`)), (r) => threadEvents(r.text))

        // Nothing set: the instance's settings.
        const initial = yield* api.threads.getToolResultOffloadControl({ path: { threadId } })
        expect(initial).toEqual({
          threadId,
          control: {},
          effective: { providerInstance: "claude", enabled: true, settings: ToolResultOffload.defaults, pinnedToolCallIds: [] }
        })

        // Turn 1: six pages read with thread_read, then the model frees two of them with offload_context.
        for (let i = 1; i <= 6; i++) upstream.enqueue(ModelApi.answer("anthropic-messages", "", usage, [{ id: `toolu_${i}`, name: "thread_read", arguments: JSON.stringify({ refs: "#1" }) }]))
        upstream.enqueue(ModelApi.answer("anthropic-messages", "", usage, [{ id: "toolu_free", name: "offload_context", arguments: JSON.stringify({ tool_call_ids: ["toolu_1", "toolu_2"] }) }]))
        upstream.enqueue(ModelApi.answer("anthropic-messages", "done", usage))
        const long = Array.from({ length: 120 }, (_, i) => `line ${i}: the module ${i} imports ${i + 1} and exports ${i * 7}`).join("\n")
        expect((yield* sendAndWait(threadId, long)).run.status).toBe("completed")
        const flushes = (yield* eventsOf).filter((e) => e.type === "context.offloaded").map((e) => e.payload as ThreadEventOf<"context.offloaded">["payload"])
        // toolu_3 and toolu_4 ride along (the prefix breaks at toolu_1 anyway); the 3 newest tool units (toolu_5,
        // toolu_6 and offload_context's own) stay.
        expect(flushes.map((f) => [f.tier, f.refs])).toEqual([["requested", [1, 2, 3, 4].map((n) => `tool:toolu_${n}`)]])
        const offered = (JSON.parse(upstream.requests[0]!.body) as { tools: Array<{ name: string }> }).tools.map((t) => t.name)
        expect(offered).toEqual(["thread_read", "offload_context"])
        const lastBody = upstream.requests.at(-1)!.body
        for (const id of ["toolu_1", "toolu_2", "toolu_3", "toolu_4"]) expect(lastBody).toContain(`thread_read tool:${id}]`)
        for (const id of ["toolu_5", "toolu_6"]) expect(lastBody).not.toContain(`thread_read tool:${id}]`)

        // Bad controls: each a 400 naming what is wrong; nothing stored.
        const unknownPin = yield* put({ pinnedItemIds: ["itm_nope"] })
        expect([unknownPin.status, unknownPin.body!["reason"]]).toEqual([400, `pinnedItemIds: itm_nope is not an item of thread ${threadId}`])
        const badRatio = yield* put({ aggressiveRatio: 0.5 })
        expect([badRatio.status, badRatio.body!["reason"]]).toEqual([400, "tool-result offload control: aggressiveTargetRatio (0.6) must be below aggressiveRatio (0.5)"])
        const outOfRange = yield* put({ keepNewestUnits: -1 })
        expect(outOfRange.status).toBe(400)
        expect((yield* api.threads.getToolResultOffloadControl({ path: { threadId } })).control).toEqual({})

        // Pin offload_context's result and flush eagerly: everything eligible goes but the pin and the reads still in
        // use (toolu_5 and toolu_6, among the 3 newest tool units).
        const items = (yield* raw(get(`/threads/${threadId}/items?limit=200&batonTools=true`))).body!["items"] as Array<{ id: string; toolCallId: string | null; kind: string }>
        const pinnedItem = items.find((i) => i.kind === "tool_result" && i.toolCallId === "toolu_free")!
        const settingsOnly = { keepNewestUnits: 0, aggressiveRatio: 0.02, aggressiveTargetRatio: 0.01 }
        expect((yield* put(settingsOnly)).status).toBe(200)
        const unpinned = yield* api.threads.previewToolResultOffload({ path: { threadId } })
        expect([unpinned.tier, unpinned.units.flatMap((u) => u.refs)]).toEqual(["aggressive", ["tool:toolu_free"]])
        const eager = { ...settingsOnly, pinnedItemIds: [pinnedItem.id] }
        const set = yield* put({ ...eager, commandId: "control-1" })
        expect(set.status).toBe(200)
        expect(set.body!["effective"]).toMatchObject({ enabled: true, pinnedToolCallIds: ["toolu_free"], settings: { keepNewestUnits: 0, aggressiveRatio: 0.02 } })
        // The same command id answers the same, once.
        expect((yield* put({ ...eager, commandId: "control-1" })).body).toEqual(set.body)
        const controlEvents = (yield* eventsOf).filter((e) => e.type === "context.offload_control_set")
        expect(controlEvents.map((e) => e.payload)).toEqual([{ control: settingsOnly }, { control: eager }])
        const preview = yield* api.threads.previewToolResultOffload({ path: { threadId } })
        expect([preview.tier, preview.units]).toEqual(["none", []])
        upstream.enqueue(ModelApi.answer("anthropic-messages", "ok", usage))
        expect((yield* sendAndWait(threadId, "and now?")).run.status).toBe("completed")
        const pinnedBody = upstream.requests.at(-1)!.body
        expect(pinnedBody).toContain("offload_context: from your next step on, 2 tool results")
        for (const id of ["toolu_free", "toolu_5", "toolu_6"]) expect(pinnedBody).not.toContain(`thread_read tool:${id}]`)

        // Off for this thread: the dry run says so, and offload_context is no longer offered.
        yield* api.threads.setToolResultOffloadControl({ path: { threadId }, payload: { enabled: false }, headers: {} })
        const off = yield* api.threads.previewToolResultOffload({ path: { threadId } })
        expect([off.enabled, off.reason]).toEqual([false, "tool-result offload is off for this thread"])
        upstream.enqueue(ModelApi.answer("anthropic-messages", "fine", usage))
        expect((yield* sendAndWait(threadId, "still there?")).run.status).toBe("completed")
        expect((JSON.parse(upstream.requests.at(-1)!.body) as { tools: Array<{ name: string }> }).tools.map((t) => t.name)).toEqual(["thread_read"])
      }).pipe(Effect.provide(serveSettings(settings)))
    }), 120_000)

  // Found by a reviewer: a flush whose request was refused was stored but never recorded as an event.
  it.scoped("a tool-result offload flush whose request is refused is still a context.offloaded event", () =>
    Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("claude", "anthropic-messages", upstream)])
      yield* Effect.gen(function*() {
        const api = yield* client()
        const { threadId } = yield* api.threads.create({ payload: { providerInstance: "claude" as never }, headers: {} })
        const usage = { input: 100, cacheWrite: 0, cacheRead: 1_000, output: 20 }
        for (let i = 1; i <= 6; i++) upstream.enqueue(ModelApi.answer("anthropic-messages", "", usage, [{ id: `toolu_${i}`, name: "thread_read", arguments: JSON.stringify({ refs: "#1" }) }]))
        upstream.enqueue(ModelApi.answer("anthropic-messages", "done", usage))
        const long = Array.from({ length: 120 }, (_, i) => `line ${i}: the module ${i} imports ${i + 1} and exports ${i * 7}`).join("\n")
        expect((yield* sendAndWait(threadId, long)).run.status).toBe("completed")
        yield* api.threads.setToolResultOffloadControl({ path: { threadId }, payload: { keepNewestUnits: 0, aggressiveRatio: 0.02, aggressiveTargetRatio: 0.01 }, headers: {} })
        upstream.enqueue(ModelApi.error(400, "refused"))
        expect((yield* sendAndWait(threadId, "next")).run.status).toBe("failed")
        const preview = yield* api.threads.previewToolResultOffload({ path: { threadId } })
        const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
        const flushes = events.filter((e) => e.type === "context.offloaded").map((e) => e.payload as ThreadEventOf<"context.offloaded">["payload"])
        expect(flushes).toHaveLength(1)
        expect(flushes[0]!.entrySeqs).toHaveLength(preview.stubbedEntries)
      }).pipe(Effect.provide(serveSettings(settings)))
    }), 60_000)

  // Found by a reviewer: a thread control was also checked against the policy's defaults, so a control valid on its
  // instance's own settings was refused, citing a value not in effect.
  it.scoped("a thread control is checked against its instance's settings", () =>
    Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const settings = yield* settingsFor([instance("claude", "anthropic-messages", upstream, { toolResultOffload: { aggressiveRatio: 0.95, aggressiveTargetRatio: 0.9 } })])
      yield* Effect.gen(function*() {
        const api = yield* client()
        const { threadId } = yield* api.threads.create({ payload: { providerInstance: "claude" as never }, headers: {} })
        const set = yield* api.threads.setToolResultOffloadControl({ path: { threadId }, payload: { aggressiveTargetRatio: 0.88 }, headers: {} })
        expect(set.effective?.settings).toMatchObject({ aggressiveRatio: 0.95, aggressiveTargetRatio: 0.88 })
        const bad = yield* raw(post(`/threads/${threadId}/tool-result-offload/control`, { aggressiveTargetRatio: 0.96 }).pipe(HttpClientRequest.setMethod("PUT")))
        expect([bad.status, bad.body!["reason"]]).toEqual([400, "tool-result offload control: aggressiveTargetRatio (0.96) must be below aggressiveRatio (0.95)"])
      }).pipe(Effect.provide(serveSettings(settings)))
    }), 60_000)
})
