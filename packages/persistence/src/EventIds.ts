/**
 * EventIds: where `ThreadStore.appendEvent` gets each new event's id. The default mints `evt_<uuid>` (unique
 * across processes and databases); a deterministic replay or simulation provides `layer` over its own id source so
 * the same inputs write the same bytes.
 */
import { Context, Layer } from "effect"
import { randomUUID } from "node:crypto"

export interface EventIdsShape {
  /** A new event id, `evt_…`, never returned before by any process writing the same database. */
  readonly next: () => string
}

export class EventIds extends Context.Reference<EventIds>()("@baton/persistence/EventIds", {
  defaultValue: (): EventIdsShape => ({ next: () => `evt_${randomUUID()}` })
}) {}

/** Event ids from `next` (e.g. the orchestrator's sequential `IdGenerator` with prefix `evt`). */
export const layer = (next: () => string) => Layer.succeed(EventIds, { next })
