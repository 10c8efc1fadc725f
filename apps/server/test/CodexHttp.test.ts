/**
 * A `codex` instance from the server's config file (issue 10), served over real HTTP by the production orchestrator
 * (`Server.orchestratorLayer` builds a `CodexAdapter` running the pinned `codex app-server`), its model provider a
 * loopback server playing OpenAI's Responses API. The seed case through the API: a Codex thread completed at 39,761 of
 * 41,800; a switch to `claude` (an Anthropic Messages instance on a second loopback model API) and back, a ~20,000-token
 * handoff owed, with a run interrupted before start on the way (queued behind claude's last turn, which the model API
 * holds until the interrupt is answered: deterministic, not a race with the run driver); "Continue" completes on the
 * same Codex thread with its text unchanged in the request Codex sent, the handoff deferred; `/compact` delivers it
 * once (inject, then compact), the interrupted run's prompt with it; the next turn replays nothing.
 */
import type { ThreadId } from "@baton/contracts"
import { Server, ServerConfig } from "@baton/server"
import { Harness } from "@baton/testing"
import { NodeHttpServer } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { answer, binary, codexHome, isCompaction, userTexts } from "../../../packages/providers/test/support/CodexLoopback.js"
import { loopback, type Received, type Reply } from "../../../packages/providers/test/support/Loopback.js"
import { adminToken, client } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"

/** Settings resolved from a config file holding `providers` (SQLite in a fresh directory, removed with the scope). */
const settingsFor = (providers: ReadonlyArray<unknown>) =>
  Effect.gen(function*() {
    const data = yield* Effect.acquireRelease(
      Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-codex-http-"))),
      (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
    )
    const config = Path.join(data, "baton.json")
    Fs.writeFileSync(config, JSON.stringify({ providers, auth: { token: adminToken } }))
    return yield* ServerConfig.resolve({ config, dataDir: data }).pipe(Effect.withConfigProvider(ConfigProvider.fromMap(new Map())))
  })

/** The API over the production orchestrator of `settings`, on a loopback port. */
const serveSettings = (settings: ServerConfig.ServerSettings) =>
  Server.httpLayer({ tokens: { admin: settings.auth.adminToken, read: settings.auth.readToken }, maxBodyBytes: settings.limits.maxBodyBytes }).pipe(
    Layer.provideMerge(NodeHttpServer.layerTest),
    Layer.provideMerge(Server.orchestratorLayer(settings))
  )

/** Sends `text` on `threadId` and waits for its run to end: the run. */
const send = (threadId: ThreadId, text: string) =>
  Effect.gen(function*() {
    const api = yield* client()
    const accepted = yield* api.messages.send({ path: { threadId }, payload: { text }, headers: {} })
    return (yield* api.runs.get({ path: { runId: accepted.runId }, urlParams: { waitMs: 30_000 } })).run
  })

const tricky = "Start the refactor ✓ — naïve café 🎉\r\n\tkeep   these  spaces  "

/** About 2,000 tokens (the scripted claude answers briefly: the prompts make the ~20,000 tokens owed). */
const bigPrompt = (i: number) => `claude step ${i}: ${Harness.words(2_000)}`

describe("a codex instance from the config file, over HTTP", () => {
  it.live("the seed case: near full, owed handoff, a run interrupted before start, deferred at Continue (same Codex thread, prompt unchanged), /compact delivers it once, Next replays nothing", () =>
    Effect.scoped(Effect.gen(function*() {
      const loop = yield* loopback
      const home = yield* codexHome(loop.url, { window: 44_000, autoCompact: 42_000 })
      const answers: Array<Reply> = []
      const model = (request: Received) => (isCompaction(request) ? answer("SUMMARY: the refactor so far.", 3_000, 40) : answers.shift() ?? answer("(no answer queued)"))
      for (let i = 0; i < 20; i++) loop.enqueue(model)
      const claude = yield* ModelApi.start
      const settings = yield* settingsFor([
        { kind: "codex", name: "codex", binary: binary(), codexHome: home, cwd: home, contextWindow: 44_000, autoCompactThreshold: 42_000 },
        {
          kind: "anthropic-messages",
          name: "claude",
          baseUrl: ModelApi.baseUrl("anthropic-messages", claude),
          model: "claude-test",
          contextWindow: 200_000,
          autoCompactThreshold: 180_000,
          maxOutputTokens: 4_096,
          prices: { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 },
          maxRetries: 0
        }
      ])
      yield* Effect.gen(function*() {
        const api = yield* client()
        const { threadId } = yield* api.threads.create({ payload: { title: "refactor", providerInstance: "codex" as never }, headers: {} })
        answers.push(answer("Refactor started.", 39_700, 61))
        const first = yield* send(threadId, tricky)
        expect(first.status).toBe("completed")
        expect(userTexts(loop.requests[0]!).at(-1)).toBe(tricky)
        const lane = () => Effect.map(api.threads.get({ path: { threadId } }), (s) => s.providerThreads.find((p) => p.providerInstance === "codex")!)
        const native = (yield* lane()).nativeThreads
        expect(native.map((n) => [n.generation, n.usage?.usedTokens, n.usage?.maxTokens])).toEqual([[1, 39_761, 41_800]])

        yield* api.threads.switchProvider({ path: { threadId }, payload: { providerInstance: "claude" as never }, headers: {} })
        const usage = { input: 100, cacheWrite: 0, cacheRead: 0, output: 10 }
        for (let i = 0; i < 9; i++) {
          claude.enqueue(ModelApi.answer("anthropic-messages", `ok ${i}`, usage))
          expect((yield* send(threadId, bigPrompt(i))).status).toBe("completed")
        }
        // Claude's last turn is held by its model API; a message sent meanwhile queues behind it and is interrupted
        // before it starts (the provider never reads it: a missed run, its prompt owed).
        let release = () => {}
        claude.enqueue({ ...ModelApi.answer("anthropic-messages", "ok 9", usage), hold: new Promise<void>((done) => release = done) })
        const held = yield* api.messages.send({ path: { threadId }, payload: { text: bigPrompt(9) }, headers: {} })
        const missed = yield* api.messages.send({ path: { threadId }, payload: { text: "Please also update the docs" }, headers: {} })
        const interrupted = yield* api.threads.interrupt({ path: { threadId }, payload: { runId: missed.runId }, headers: {} })
        expect([interrupted.status, interrupted.stopPoint]).toEqual(["interrupted", "before_provider"])
        release()
        expect((yield* api.runs.get({ path: { runId: held.runId }, urlParams: { waitMs: 30_000 } })).run.status).toBe("completed")
        expect(claude.requests.map((r) => r.body).filter((b) => b.includes("Please also update the docs"))).toEqual([])
        const back = yield* api.threads.switchProvider({ path: { threadId }, payload: { providerInstance: "codex" as never }, headers: {} })
        expect(back.handoffId).not.toBeNull()
        const handoffId = back.handoffId!

        const before = loop.requests.length
        answers.push(answer("Continuing.", 2_000, 20))
        const cont = yield* send(threadId, "Continue")
        expect(cont.status).toBe("completed")
        const modelRequests = loop.requests.slice(before).filter((r) => !isCompaction(r))
        expect(modelRequests).toHaveLength(1)
        expect(userTexts(modelRequests[0]!).at(-1)).toBe("Continue")
        expect(userTexts(modelRequests[0]!).some((t) => t.includes("claude step") || t.includes("update the docs"))).toBe(false)
        const deferred = yield* api.handoffs.get({ path: { handoffId } })
        expect(deferred.open).toBe(true)
        expect(deferred.deliveries.map((d) => [d.status, d.deferCount])).toEqual([["deferred", 1]])
        // The same Codex thread (generation 1) took both turns.
        expect((yield* lane()).nativeThreads.map((n) => n.generation)).toEqual([1])

        const compactFrom = loop.requests.length
        const compacted = yield* api.threads.compact({ path: { threadId }, payload: {}, headers: {} })
        // Claude's 10 prompts and answers, and the interrupted run's prompt.
        expect([compacted.compacted, compacted.deliveredItems, compacted.omittedItems]).toEqual([true, 21, 0])
        const compaction = loop.requests.slice(compactFrom).filter(isCompaction)
        expect(compaction).toHaveLength(1)
        expect(userTexts(compaction[0]!).some((t) => t.includes("claude step 9"))).toBe(true)
        expect(userTexts(compaction[0]!).some((t) => t.includes("Please also update the docs"))).toBe(true)
        expect((yield* api.handoffs.get({ path: { handoffId } })).open).toBe(false)

        const nextFrom = loop.requests.length
        answers.push(answer("Next done.", 4_000, 20))
        expect((yield* send(threadId, "Next")).status).toBe("completed")
        const nextRequests = loop.requests.slice(nextFrom).filter((r) => !isCompaction(r))
        expect(nextRequests).toHaveLength(1)
        expect(userTexts(nextRequests[0]!).at(-1)).toBe("Next")
        // Nothing was injected again: the handoff's block appears once (Codex's compaction keeps recent user messages,
        // the injected one among them), not twice.
        expect(userTexts(nextRequests[0]!).filter((t) => t.includes("claude step 9"))).toHaveLength(1)
        expect((yield* lane()).nativeThreads.map((n) => n.generation)).toEqual([1])
      }).pipe(Effect.provide(serveSettings(settings)))
    })), 120_000)
})
