/**
 * The simulation builds each incarnation's services one layer after the other (`buildInOrder` over
 * `OrchestratorLayer.serviceLayers`) instead of through `OrchestratorLayer.services`' nested chain: the same
 * services, none missing and none extra, built from the very layer objects of `services` (the keys alone would not
 * see another implementation of a service), so that a crash-restart rebuilds everything a real restart does; and an
 * incarnation built after the previous one's scope closed holds no service object of it (nor would they see a
 * service whose layer keeps its instance across builds). The world below (configuration, counter, providers,
 * summariser) is shared, as in the simulation.
 */
import { TokenCounter } from "@baton/context"
import { IdGenerator, OrchestratorConfig, OrchestratorLayer } from "@baton/orchestration"
import { Database, ThreadStore } from "@baton/persistence"
import { ProviderRegistry, ScriptedSummariser } from "@baton/providers"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Scope } from "effect"
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

  it.scoped("is built from the very layers of OrchestratorLayer.services: through one memo map, the same objects", () =>
    Effect.gen(function*() {
      const world = yield* Layer.build(below)
      const base = world as Context.Context<never>
      const memoMap = yield* Layer.makeMemoMap
      const scope = yield* Effect.scope
      const nestedLayer = OrchestratorLayer.services.pipe(
        Layer.provideMerge(ThreadStore.Default),
        Layer.provideMerge(OrchestratorLayer.eventIds),
        Layer.provide(Layer.succeedContext(world))
      )
      const nested = (yield* Layer.buildWithMemoMap(nestedLayer, memoMap, scope)) as Context.Context<never>
      const layers = [OrchestratorLayer.eventIds, ThreadStore.Default, ...OrchestratorLayer.serviceLayers]
      const flat = yield* buildInOrder(layers, base, scope, memoMap)
      // A layer of `serviceLayers` that is not the object `services` holds (another implementation of the service,
      // or one that keeps its instance) builds a service of its own.
      expect(keysOf(nested).filter((k) => flat.unsafeMap.get(k) !== nested.unsafeMap.get(k))).toEqual([])
    }))

  it.scoped("a second incarnation, built after the first one's scope closed (a crash), shares no service with it", () =>
    Effect.gen(function*() {
      const base = (yield* Layer.build(below)) as Context.Context<never>
      const layers = [OrchestratorLayer.eventIds, ThreadStore.Default, ...OrchestratorLayer.serviceLayers]
      const incarnation = Effect.acquireUseRelease(Scope.make(), (s) => buildInOrder(layers, base, s), (s) => Scope.close(s, Exit.void))
      const first = yield* incarnation
      const second = yield* incarnation
      const built = keysOf(first).filter((k) => !base.unsafeMap.has(k))
      expect(built.length).toBeGreaterThan(18)
      // What the base holds (the world: configuration, counter, providers, summariser) is the same object in both.
      for (const k of keysOf(base)) expect(second.unsafeMap.get(k)).toBe(first.unsafeMap.get(k))
      // Every orchestrator service is built again: none of its in-memory state survives the crash.
      expect(built.filter((k) => second.unsafeMap.get(k) === first.unsafeMap.get(k))).toEqual([])
    }))
})
