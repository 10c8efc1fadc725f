/**
 * The simulation builds each incarnation's services one layer after the other (`buildInOrder` over
 * `OrchestratorLayer.serviceLayers`) instead of through `OrchestratorLayer.services`' nested chain: the same
 * services, none missing and none extra, so that a crash-restart rebuilds everything a real restart does.
 */
import { TokenCounter } from "@baton/context"
import { IdGenerator, OrchestratorConfig, OrchestratorLayer } from "@baton/orchestration"
import { Database, ThreadStore } from "@baton/persistence"
import { ProviderRegistry, ScriptedSummariser } from "@baton/providers"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { buildInOrder } from "../src/internal/Execute.js"

const counter = TokenCounter.make()
const below = Layer.mergeAll(
  Database.layerSqlite(":memory:"),
  ProviderRegistry.layer([]),
  ScriptedSummariser.layer(ScriptedSummariser.make(counter)),
  Layer.succeed(TokenCounter.TokenCounter, counter),
  IdGenerator.layerSequential(""),
  OrchestratorConfig.layer()
)

/** The keys of every service a context holds, sorted. */
const keysOf = (context: Context.Context<never>) => [...context.unsafeMap.keys()].sort()

describe("an incarnation built layer by layer", () => {
  it.scoped("holds exactly the services of OrchestratorLayer.services", () =>
    Effect.gen(function*() {
      const base = yield* Layer.build(below)
      const nested = yield* Layer.build(OrchestratorLayer.services.pipe(
        Layer.provideMerge(ThreadStore.Default),
        Layer.provideMerge(OrchestratorLayer.eventIds),
        Layer.provide(Layer.succeedContext(base))
      ))
      const layers = [OrchestratorLayer.eventIds, ThreadStore.Default, ...OrchestratorLayer.serviceLayers]
      const flat = yield* buildInOrder(layers, base as Context.Context<never>, yield* Effect.scope)
      expect(keysOf(flat)).toEqual(keysOf(Context.merge(base, nested) as Context.Context<never>))
      expect(keysOf(flat).length).toBeGreaterThan(keysOf(base as Context.Context<never>).length + 18)
    }))
})
