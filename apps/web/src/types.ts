/**
 * The JSON shapes the dashboard reads: the encoded side of the contracts' schemas (type-only imports: nothing of
 * `effect` is bundled), so a change to the API is a type error here.
 */
import type { HandoffItemIds, HandoffList, HandoffSummaryList, ItemPage, ItemText, RunPage, Session, ThreadEvent, ThreadPage, ThreadSnapshot } from "@baton/contracts"

export type ThreadPageJson = typeof ThreadPage.Encoded
export type SnapshotJson = typeof ThreadSnapshot.Encoded
export type ItemPageJson = typeof ItemPage.Encoded
export type ItemJson = ItemPageJson["items"][number]
export type ItemTextJson = typeof ItemText.Encoded
export type RunPageJson = typeof RunPage.Encoded
export type RunJson = RunPageJson["runs"][number]
export type RunCostJson = RunPageJson["costs"][number]
export type HandoffListJson = typeof HandoffList.Encoded
export type HandoffJson = HandoffListJson["handoffs"][number]
export type DeliveryJson = HandoffJson["deliveries"][number]
export type HandoffSummaryListJson = typeof HandoffSummaryList.Encoded
export type HandoffSummaryJson = HandoffSummaryListJson["handoffs"][number]
export type HandoffItemIdsJson = typeof HandoffItemIds.Encoded
export type SessionJson = typeof Session.Encoded
export type EventJson = typeof ThreadEvent.Encoded
export type EventOf<T extends EventJson["type"]> = Extract<EventJson, { readonly type: T }>
export type Role = SessionJson["role"]
