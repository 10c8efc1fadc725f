/**
 * A gateway request's run left unfinished by a process that died (kill -9, or a shutdown that closed the database
 * before the answer was recorded) is ended by the next start's recovery as what it was: the gateway forwards a request
 * to the upstream before it records it, so the upstream had the request. Before, recovery took a run without an
 * attempt for one that never reached the provider: `before_provider`, "process restarted before the provider started"
 * (review b43gw).
 */
import { type ProviderInstance, type RunId } from "@baton/contracts"
import { GatewayThreads, ThreadService } from "@baton/orchestration"
import { ThreadStore } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Option, Scope } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

const request = (session: string) => ({
  wire: GatewayThreads.anthropicMessages,
  session,
  agent: "Claude Code",
  system: [{ type: "text", text: "You are a coding agent." }],
  messages: [{ role: "user", content: [{ type: "text", text: "list the files" }] }],
  model: "claude-x",
  providerInstance: "anthropic" as ProviderInstance,
  contextWindow: 200_000,
  prices: { input: 3, cacheRead: 0.3, cacheWrite: 3.75, output: 15 },
  offload: { offloaded: [], flush: null }
})

describe("a gateway request's run left by a process that died", () => {
  it.live("is ended after the provider by the next start's recovery: the upstream had the request", () =>
    Effect.acquireUseRelease(
      Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-gwrecover-"))),
      (dir) =>
        Effect.gen(function*() {
          const file = Path.join(dir, "baton.sqlite")
          const h = Harness.make([{ name: "anthropic", window: 200_000, inject: false }])
          const layer = (ns: string) => Harness.makeLayer([h.providers.anthropic!], h.counter, file, {}, ns)
          // The first process records the request (its run `running`) and dies before the answer is recorded.
          const scopeA = yield* Scope.make()
          const a = yield* Layer.buildWithScope(layer("a"), scopeA)
          const begun = yield* Effect.provide(Effect.flatMap(GatewayThreads.GatewayThreads, (t) => t.begin(request("s1"))), a)
          expect(begun.run.status).toBe("running")
          yield* Scope.close(scopeA, Exit.void)
          // The next start reconciles it.
          const b = yield* Layer.build(layer("b"))
          yield* Effect.provide(Effect.flatMap(ThreadService.ThreadService, (s) => s.recover()), b)
          const run = Option.getOrThrow(yield* Context.get(b, ThreadStore).getRun(begun.run.id as RunId))
          expect({ status: run.status, code: run.failureCode, stopPoint: run.stopPoint, reason: run.failureReason }).toEqual({
            status: "interrupted",
            code: "process_restarted",
            stopPoint: "after_provider",
            reason: "process restarted while the gateway's request was with the upstream"
          })
        }).pipe(Effect.scoped),
      (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
    ))
})
