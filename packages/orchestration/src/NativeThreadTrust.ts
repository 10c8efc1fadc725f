/**
 * NativeThreadTrust: the one place Baton stops trusting a native thread. A native thread marked `replaced` is never
 * used again: the next turn start on its provider thread starts a replacement and owes it the whole history (a
 * `replacement` handoff), so nothing the old one may or may not hold is lost or delivered twice.
 *
 * Reasons: the provider lost it, an interrupt it never acknowledged, a timeout or restart after which it cannot be
 * told whether the provider read a prompt, a context overflow with the prompt alone. It does not start the
 * replacement (ProviderTurnStartService does) and runs inside the caller's unit of work.
 */
import type { NativeThread, ThreadId } from "@baton/contracts"
import { ThreadStore } from "@baton/persistence"
import { DateTime, Effect, Option } from "effect"

export class NativeThreadTrust extends Effect.Service<NativeThreadTrust>()("@baton/orchestration/NativeThreadTrust", {
  effect: Effect.gen(function*() {
    const store = yield* ThreadStore
    return {
      /**
       * Marks `native` replaced with `reason` (a `native_thread.replaced` event), re-reading it first: a native
       * thread already replaced is left as it is (one event per replacement). Returns whether it changed anything.
       * Fails with `PersistenceError` / `ConcurrentModification`; call it inside a unit of work.
       */
      distrust: Effect.fn("NativeThreadTrust.distrust")(function*(threadId: ThreadId, native: NativeThread, reason: string) {
        const current = Option.getOrElse(yield* store.getNativeThread(native.id), () => native)
        if (current.status !== "active") return false
        yield* store.updateNativeThread({ ...current, status: "replaced", updatedAt: yield* DateTime.now })
        yield* store.appendEvent({ threadId, type: "native_thread.replaced", payload: { nativeThreadId: native.id, reason } })
        return true
      })
    }
  })
}) {}
