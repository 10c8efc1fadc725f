/**
 * The orchestration services as one Layer. It needs, from the app: `SqlClient` (migrated), `IdGenerator`,
 * `TokenCounter`, `ProviderRegistry` and `OrchestratorConfig`.
 */
import { ThreadStore } from "@baton/persistence"
import { Layer } from "effect"
import { ContextHandoffDelivery } from "./ContextHandoffDelivery.js"
import { ItemLog } from "./ItemLog.js"
import { ProviderCalibration } from "./ProviderCalibration.js"
import { ProviderTurnStartService } from "./ProviderTurnStartService.js"
import { ThreadCompaction } from "./ThreadCompaction.js"
import { ThreadService } from "./ThreadService.js"

export const layer = ThreadService.Default.pipe(
  Layer.provideMerge(ThreadCompaction.Default),
  Layer.provideMerge(ProviderTurnStartService.Default),
  Layer.provideMerge(ContextHandoffDelivery.Default),
  Layer.provideMerge(ProviderCalibration.Default),
  Layer.provideMerge(ItemLog.Default),
  Layer.provideMerge(ThreadStore.Default)
)
