/**
 * NativeThreadTrust: the one place Baton stops trusting a native thread. A native thread marked `replaced` is never
 * used again: the next turn start on its provider thread starts a replacement and owes it the whole history (a
 * `replacement` handoff), so nothing the old one may or may not hold is lost or delivered twice.
 *
 * Reasons: the provider lost it, an interrupt it never acknowledged, a timeout or restart after which it cannot be
 * told whether the provider read a prompt, a context overflow with the prompt alone. `probe` asks the provider to stop
 * a turn and reads the native thread back (is it still trustworthy, did it read a prompt). It does not start the
 * replacement (ProviderTurnStartService does) and runs inside the caller's unit of work.
 */
import type { NativeThread, ThreadId } from "@baton/contracts"
import type { ProviderAdapter } from "@baton/providers"
import { ThreadStore } from "@baton/persistence"
import { DateTime, Duration, Effect, Option } from "effect"
import { OrchestratorConfig } from "./OrchestratorConfig.js"
import * as Span from "./internal/Span.js"

export class NativeThreadTrust extends Effect.Service<NativeThreadTrust>()("@baton/orchestration/NativeThreadTrust", {
  effect: Effect.gen(function*() {
    const store = yield* ThreadStore
    const config = yield* OrchestratorConfig
    const interruptTimeout = Duration.millis(config.interruptTimeoutMillis)

    /**
     * Asks the provider to stop the turn on `native` and reads the native thread back to learn whether it read
     * `runId`'s prompt. Each call is bounded by `interruptTimeoutMillis`. `answered`: the provider acknowledged the
     * interrupt (when it did not, the native thread may still be running a turn Baton no longer follows); `read`:
     * `"unknown"` when the adapter cannot read threads back or the read failed.
     */
    const probe = (adapter: ProviderAdapter.ProviderAdapterShape, native: NativeThread, runId: string) =>
      Effect.gen(function*() {
        const stopped = yield* adapter.interrupt(native.nativeRef).pipe(Effect.timeout(interruptTimeout), Effect.either)
        let read: boolean | "unknown" = "unknown"
        if (adapter.readThread !== undefined) {
          const back = yield* adapter.readThread(native.nativeRef).pipe(Effect.timeout(interruptTimeout), Effect.option)
          if (back._tag === "Some") read = back.value.runIds.includes(runId)
        }
        return { answered: stopped._tag === "Right", read }
      })

    return {
      probe,
      /**
       * Marks `native` replaced with `reason` (a `native_thread.replaced` event), re-reading it first: a native
       * thread already replaced is left as it is (one event per replacement). Returns whether it changed anything.
       * Fails with `PersistenceError` / `ConcurrentModification`; call it inside a unit of work.
       */
      distrust: Span.fn("NativeThreadTrust.distrust")(function*(threadId: ThreadId, native: NativeThread, reason: string) {
        const current = Option.getOrElse(yield* store.getNativeThread(native.id), () => native)
        if (current.status !== "active") return false
        yield* store.updateNativeThread({ ...current, status: "replaced", updatedAt: yield* DateTime.now })
        yield* store.appendEvent({ threadId, type: "native_thread.replaced", payload: { nativeThreadId: native.id, reason } })
        return true
      })
    }
  })
}) {}
