import { PersistenceError } from "@baton/contracts"
import { Effect } from "effect"

/** Maps any `SqlError`/`ParseError` of a repository call to one `PersistenceError` carrying the operation name. */
export const orPersistence = (operation: string) =>
<A, E extends { readonly message?: string; readonly _tag?: string }, R>(
  self: Effect.Effect<A, E, R>
): Effect.Effect<A, PersistenceError, R> =>
  Effect.mapError(self, (e) =>
    new PersistenceError({
      operation,
      detail: `${e._tag ?? "Error"}: ${String(e.message ?? e)}`.slice(0, 2000)
    }))
