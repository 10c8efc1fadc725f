/**
 * ServerShutdown: what the server's shutdown owes the gateway's records (issue 14, docs/gateway.md "Forward first,
 * record alongside"). It owns two things: the signal that the shutdown's deadline has come (`cutting`: the listener
 * closes every connection still open, so an answer stopped from then on was stopped by the shutdown, not by its agent),
 * and the count of gateway records in flight, which the shutdown waits for (`recordGraceMs` at most) once the listener
 * has closed, before the database closes: every request Baton forwarded has its run recorded with its outcome when
 * the process exits. It does not own the deadline itself (`Server.listener`) nor the records (`Gateway`).
 */
import { Context, Deferred, Effect, Layer, type Scope, Stream, SubscriptionRef } from "effect"

/**
 * How long the shutdown waits, once the listener has closed (its open requests had `limits.shutdownTimeoutMs`), for
 * the gateway records still in flight to be written: 5,000 ms. A record is one or two short transactions (the request
 * with its answer, or the answer's outcome), so a record that takes longer is stuck (a database that stopped
 * answering): restart recovery ends its run (`process_restarted`).
 */
export const recordGraceMs = 5_000

/** The shutdown's side of the gateway's records (see the module docblock). */
export interface ServerShutdownShape {
  /**
   * Completed when the shutdown's deadline has come (`limits.shutdownTimeoutMs` after it began) and the listener
   * closes the connections still open: an answer that stops from then on was cut by the shutdown (`process_stopped`);
   * before it, during the grace period, an agent that closes its connection hung up on its own.
   */
  readonly cutting: Deferred.Deferred<void>
  /** Runs `self` counted as a record in flight: the shutdown waits for it (bounded, `drain`). */
  readonly hold: <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /** Counts a record in flight until `scope` closes (a gateway request's scope: its answer sent or cut, its outcome recorded). */
  readonly holdScoped: Effect.Effect<void, never, Scope.Scope>
  /** How many records are in flight now. */
  readonly inFlight: Effect.Effect<number>
  /** Waits until no record is in flight, at most `millis` milliseconds; succeeds with how many were left (0: none). */
  readonly drain: (millis: number) => Effect.Effect<number>
}

/** The server's shutdown state (see the module docblock). */
export class ServerShutdown extends Context.Tag("@baton/server/ServerShutdown")<ServerShutdown, ServerShutdownShape>() {}

/** A fresh `ServerShutdownShape`: nothing in flight, the deadline not come. */
export const make: Effect.Effect<ServerShutdownShape> = Effect.gen(function*() {
  const cutting = yield* Deferred.make<void>()
  const count = yield* SubscriptionRef.make(0)
  const enter = SubscriptionRef.update(count, (n) => n + 1)
  const leave = SubscriptionRef.update(count, (n) => n - 1)
  return {
    cutting,
    hold: (self) => Effect.acquireUseRelease(enter, () => self, () => leave),
    holdScoped: Effect.acquireRelease(enter, () => leave),
    inFlight: SubscriptionRef.get(count),
    drain: (millis) =>
      count.changes.pipe(
        Stream.takeUntil((n) => n === 0),
        Stream.runDrain,
        Effect.timeoutOption(millis),
        Effect.zipRight(SubscriptionRef.get(count))
      )
  }
})

/**
 * The shutdown state for one server, its release waiting (at most `recordGraceMs`) for the gateway records in flight,
 * and logging a warning naming how many were left. Shared by reference (one value, one instance per Layer build):
 * `Server.listener` merges it beneath its Node server and `Server.httpLayer` merges it too, so in a whole server it
 * is built once, before the listener, and released after the listener has closed (and before the orchestrator, its
 * database, which is built before the listener).
 */
export const layer: Layer.Layer<ServerShutdown> = Layer.scoped(
  ServerShutdown,
  Effect.tap(make, (shutdown) =>
    Effect.addFinalizer(() =>
      Effect.flatMap(shutdown.drain(recordGraceMs), (left) =>
        left === 0
          ? Effect.void
          : Effect.logWarning(
            `gateway: ${left} record(s) still being written ${recordGraceMs} ms after the listener closed; stopping without them (restart recovery ends their runs: process_restarted)`
          ))
    ))
)
