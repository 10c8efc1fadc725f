/**
 * ServerShutdown: the shutdown waits for the gateway's records in flight, and no longer than its bound.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Scope } from "effect"
import * as ServerShutdown from "../src/ServerShutdown.js"

describe("ServerShutdown", () => {
  it.live("drain waits for the records in flight (held by an effect or a scope) and says how many its bound left", () =>
    Effect.gen(function*() {
      const shutdown = yield* ServerShutdown.make
      expect(yield* shutdown.drain(1_000)).toBe(0)
      const release = yield* Deferred.make<void>()
      const record = yield* Effect.fork(shutdown.hold(Deferred.await(release)))
      const request = yield* Scope.make()
      yield* Scope.extend(shutdown.holdScoped, request)
      yield* Effect.repeat(shutdown.inFlight, { until: (n) => n === 2 })
      // A record that does not end: the drain gives up at its bound, naming both.
      expect(yield* shutdown.drain(50)).toBe(2)
      const draining = yield* Effect.fork(shutdown.drain(10_000))
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(record)
      yield* Scope.close(request, Exit.void)
      expect(yield* Fiber.join(draining)).toBe(0)
    }))
})
