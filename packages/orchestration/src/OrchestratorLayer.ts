/**
 * The orchestration services as one Layer, with the unit of work, the post-commit event bus and this incarnation's
 * driver registration. It needs, from the app: `SqlClient` (migrated), `IdGenerator`,
 * `TokenCounter`, `ProviderRegistry`, `Summariser` (for `/offload`) and `OrchestratorConfig`.
 */
import { ThreadEventBus, ThreadStore, UnitOfWork } from "@baton/persistence"
import { Layer } from "effect"
import { ContextHandoffDelivery } from "./ContextHandoffDelivery.js"
import { DriverRegistry } from "./DriverRegistry.js"
import { ItemLog } from "./ItemLog.js"
import { ProviderCalibration } from "./ProviderCalibration.js"
import { ProviderTurnStartService } from "./ProviderTurnStartService.js"
import { ThreadCompaction } from "./ThreadCompaction.js"
import { ThreadLineage } from "./ThreadLineage.js"
import { ThreadOffload } from "./ThreadOffload.js"
import { ThreadService } from "./ThreadService.js"

/** Every orchestration service, still needing a `ThreadStore` (the simulation provides a crash-injecting one). */
export const services = ThreadService.Default.pipe(
  Layer.provideMerge(ThreadOffload.Default),
  Layer.provideMerge(ThreadCompaction.Default),
  Layer.provideMerge(ThreadLineage.Default),
  Layer.provideMerge(ProviderTurnStartService.Default),
  Layer.provideMerge(ContextHandoffDelivery.Default),
  Layer.provideMerge(ProviderCalibration.Default),
  Layer.provideMerge(ItemLog.Default),
  Layer.provideMerge(DriverRegistry.Default),
  Layer.provideMerge(UnitOfWork.Default),
  Layer.provideMerge(ThreadEventBus.Default)
)

/** The orchestration services over the real `ThreadStore`. */
export const layer = services.pipe(Layer.provideMerge(ThreadStore.Default))
