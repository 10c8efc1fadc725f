/**
 * OffloadControls: a thread's tool-result offload control (`ToolResultOffloadControl`, issue 11 item 4) as adapters
 * apply it (`ProviderAdapter.OffloadControl`): the thread's overrides, and its pinned items resolved to the tool calls
 * whose units they keep verbatim (a pinned tool call or tool result pins its call; a pinned message pins nothing in a
 * message list, where only tool units are ever stubbed).
 *
 * It owns that translation and the check of a new control; not the policy (`ToolResultOffload` in `@baton/context`)
 * nor where it is applied (the adapters, handoff selection).
 */
import type { ItemId, ThreadId, ToolResultOffloadControl } from "@baton/contracts"
import type { ThreadStore } from "@baton/persistence"
import type { ProviderAdapter } from "@baton/providers"
import { Effect } from "effect"

type Store = typeof ThreadStore.Service

/** The policy settings a control overrides (every field but `enabled` and `pinnedItemIds`). */
export const settingsOf = (control: ToolResultOffloadControl): NonNullable<ProviderAdapter.OffloadControl["settings"]> => ({
  ...(control.keepNewestUnits === undefined ? {} : { keepNewestUnits: control.keepNewestUnits }),
  ...(control.aggressiveRatio === undefined ? {} : { aggressiveRatio: control.aggressiveRatio }),
  ...(control.aggressiveTargetRatio === undefined ? {} : { aggressiveTargetRatio: control.aggressiveTargetRatio }),
  ...(control.emergencyRatio === undefined ? {} : { emergencyRatio: control.emergencyRatio }),
  ...(control.minExpectedRequests === undefined ? {} : { minExpectedRequests: control.minExpectedRequests })
})

/**
 * Thread `threadId`'s control as an adapter applies it. Pinned ids no longer among the thread's items are skipped.
 * Fails with `PersistenceError`.
 */
export const resolve = (store: Store, threadId: ThreadId) =>
  Effect.gen(function*() {
    const control = yield* store.getOffloadControl(threadId)
    const pinnedToolCallIds = yield* pinnedCalls(store, threadId, control.pinnedItemIds ?? [])
    const resolved: ProviderAdapter.OffloadControl = {
      ...(control.enabled === undefined ? {} : { enabled: control.enabled }),
      settings: settingsOf(control),
      pinnedToolCallIds
    }
    return { control, resolved }
  })

/** The tool calls the items `ids` of thread `threadId` pin, in item order without repeats. */
export const pinnedCalls = (store: Store, threadId: ThreadId, ids: ReadonlyArray<ItemId>) =>
  Effect.map(ids.length === 0 ? Effect.succeed([]) : store.getItems(ids), (items) => [
    ...new Set(items.flatMap((i) => i.threadId === threadId && i.toolCallId !== null ? [i.toolCallId] : []))
  ])
