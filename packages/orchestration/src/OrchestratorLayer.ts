/**
 * The orchestration services (commands, and `ThreadQuery` to read) as one Layer, with the unit of work, the
 * post-commit event bus, the live event feed and this incarnation's driver registration. It needs, from the app:
 * `SqlClient` (migrated), `IdGenerator`,
 * `TokenCounter`, `ProviderRegistry`, `Summariser` (for `/offload`) and `OrchestratorConfig`.
 */
import { EventFeed, EventIds, ThreadEventBus, ThreadStore, UnitOfWork } from "@baton/persistence"
import { Effect, Layer } from "effect"
import { ClientToolWaits } from "./ClientToolWaits.js"
import { ContextHandoffDelivery } from "./ContextHandoffDelivery.js"
import { DriverRegistry } from "./DriverRegistry.js"
import { GatewayThreads } from "./GatewayThreads.js"
import { IdGenerator } from "./IdGenerator.js"
import { ItemLog } from "./ItemLog.js"
import { NativeThreadTrust } from "./NativeThreadTrust.js"
import { RunLifecycle } from "./RunLifecycle.js"
import { ProviderCalibration } from "./ProviderCalibration.js"
import { ProviderTurnStartService } from "./ProviderTurnStartService.js"
import { ThreadCompaction } from "./ThreadCompaction.js"
import { ThreadLineage } from "./ThreadLineage.js"
import { ThreadOffload } from "./ThreadOffload.js"
import { ThreadRead } from "./ThreadRead.js"
import { RunRecovery } from "./RunRecovery.js"
import { ThreadQuery } from "./ThreadQuery.js"
import { ThreadService } from "./ThreadService.js"
import { TurnExecution } from "./TurnExecution.js"
import { TurnStream } from "./TurnStream.js"

/**
 * Every orchestration service (commands and the read side, `ThreadQuery`), still needing a `ThreadStore` (the
 * simulation provides a crash-injecting one). Its layers are listed again, in build order, in `serviceLayers` (which
 * the simulation builds): a layer added, removed or wired differently here is changed there too.
 * (`Incarnation.test.ts` checks that both hold the same services, built from the same layer objects; a layer
 * wrapped here, e.g. given a dependency of its own, would still pass as the same.)
 */
export const services = Layer.mergeAll(ThreadQuery.Default, ThreadService.Default, GatewayThreads.Default).pipe(
  Layer.provideMerge(TurnExecution.Default),
  Layer.provideMerge(RunRecovery.Default),
  Layer.provideMerge(ClientToolWaits.Default),
  Layer.provideMerge(TurnStream.Default),
  Layer.provideMerge(ThreadRead.Default),
  Layer.provideMerge(ThreadOffload.Default),
  Layer.provideMerge(ThreadCompaction.Default),
  // Above ThreadLineage: a run's end records a merge-back owed behind it (RunLifecycle.recordOwedPrompts).
  Layer.provideMerge(RunLifecycle.Default),
  Layer.provideMerge(ThreadLineage.Default),
  Layer.provideMerge(ProviderTurnStartService.Default),
  Layer.provideMerge(ContextHandoffDelivery.Default),
  Layer.provideMerge(ProviderCalibration.Default),
  Layer.provideMerge(NativeThreadTrust.Default),
  // Below RunLifecycle: a run leaving `queued` records its prompt (RunLifecycle.update).
  Layer.provideMerge(ItemLog.Default),
  Layer.provideMerge(DriverRegistry.Default),
  Layer.provideMerge(UnitOfWork.Default),
  Layer.provideMerge(ThreadEventBus.Default)
)

/**
 * The layers of `services`, each after every layer it needs (the order `services` provides them in; the last is its
 * three top services, merged), for a caller that builds them one after the other into one context instead of through
 * `services`' seventeen nested `provideMerge`s: the same services, built and released in about a third of the CPU
 * time (the simulation, which builds them again at every crash-restart). `@baton/testing`'s `Incarnation.test.ts`
 * checks that they are the services of `services`, no more and no fewer.
 */
export const serviceLayers = [
  ThreadEventBus.Default,
  UnitOfWork.Default,
  DriverRegistry.Default,
  ItemLog.Default,
  NativeThreadTrust.Default,
  ProviderCalibration.Default,
  ContextHandoffDelivery.Default,
  ProviderTurnStartService.Default,
  ThreadLineage.Default,
  RunLifecycle.Default,
  ThreadCompaction.Default,
  ThreadOffload.Default,
  ThreadRead.Default,
  TurnStream.Default,
  ClientToolWaits.Default,
  RunRecovery.Default,
  TurnExecution.Default,
  Layer.mergeAll(ThreadQuery.Default, ThreadService.Default, GatewayThreads.Default)
] as const

/**
 * Event ids (`evt_…`) from the app's `IdGenerator`, for the `ThreadStore` (its default is a UUID): a sequential
 * generator makes the event log as deterministic as every other id. Needs `IdGenerator`.
 */
export const eventIds = Layer.effect(EventIds.EventIds, Effect.map(IdGenerator, (ids) => ({ next: () => ids.next("evt") })))

/**
 * The orchestration services over the real `ThreadStore` (event ids from the `IdGenerator`), with the live event
 * feed (`EventFeed`: it starts nothing until a first subscriber, so apps that never stream pay nothing).
 */
export const layer = EventFeed.EventFeed.Default.pipe(
  Layer.provideMerge(services),
  Layer.provideMerge(ThreadStore.Default),
  Layer.provide(eventIds)
)
