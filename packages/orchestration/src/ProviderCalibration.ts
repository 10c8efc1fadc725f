/**
 * ProviderCalibration: the tokenizer calibration of each provider instance, as the orchestrator uses it — read at
 * turn start and `/compact` to put Baton's estimates in the provider's units, and taught by every completed turn
 * that lies between two trusted usage reports (`Calibration` in `@baton/context` holds the policy).
 *
 * It owns the sample's bookkeeping (which turns make a sample, the `calibration.updated` event). It does not own
 * the learning arithmetic (`Calibration.learn`), the storage (`ThreadStore`, table `provider_calibrations`) nor the
 * transaction: `learn` joins the caller's, so a calibration moves only with the turn that taught it.
 */
import type { ProviderInstance, ThreadId } from "@baton/contracts"
import { Calibration } from "@baton/context"
import { ThreadStore } from "@baton/persistence"
import { DateTime, Effect } from "effect"
import { OrchestratorConfig } from "./OrchestratorConfig.js"

/**
 * Where a turn's sample starts: the native thread's last trusted reported usage (`usedTokens`, provider tokens) and
 * the Baton tokens sent to it since then without a trusted report (`unreportedTokens`, e.g. an injection whose
 * acknowledgement carried no usage). `null` when the native thread has no trusted report: no sample is taken.
 */
export interface SampleBase {
  readonly usedTokens: number
  readonly unreportedTokens: number
}

/** What a completed turn contributes: Baton's count of what it sent and produced (tokens). */
export interface TurnSample {
  readonly base: SampleBase | null
  /** The trusted usage the turn reported, provider tokens; `null` when the report was missing or untrusted. */
  readonly reportedUsedTokens: number | null
  /** Baton tokens of what the turn sent (prompt, inline history) and produced (item texts). */
  readonly estimatedTokens: number
}

export class ProviderCalibration extends Effect.Service<ProviderCalibration>()(
  "@baton/orchestration/ProviderCalibration",
  {
    effect: Effect.gen(function*() {
      const store = yield* ThreadStore
      const config = yield* OrchestratorConfig

      /** The calibration in force for `instance`: the stored one, `Calibration.identity` if none or turned off. */
      const current = Effect.fn("ProviderCalibration.current")(function*(instance: ProviderInstance) {
        if (!config.calibration) return Calibration.identity
        const found = yield* store.getCalibration(instance)
        return found._tag === "Some"
          ? { ratio: found.value.ratio, samples: found.value.samples, weight: found.value.weight, recent: found.value.recent }
          : Calibration.identity
      })

      /**
       * Teaches `instance`'s calibration with one completed turn, in the caller's transaction. No sample is taken
       * when calibration is off, when the turn's report or the previous one was not trusted (`UsageSanity`), or
       * when usage went down (a compaction happened inside the span: the growth no longer measures what was sent).
       * A sample `Calibration.learn` rejects (too small, implausible) changes nothing. When the calibration moves,
       * it is stored and `calibration.updated` `{providerInstance, oldRatio, newRatio, samples, estimatedTokens,
       * reportedTokens}` is appended to `threadId`'s log. Returns the calibration in force afterwards.
       */
      const learn = Effect.fn("ProviderCalibration.learn")(function*(
        threadId: ThreadId,
        instance: ProviderInstance,
        turn: TurnSample
      ) {
        if (!config.calibration || turn.base === null || turn.reportedUsedTokens === null) return yield* current(instance)
        // Read under a lock: another thread's turn on the same provider may be learning right now.
        const found = yield* store.getCalibrationForUpdate(instance)
        const before = found._tag === "Some"
          ? { ratio: found.value.ratio, samples: found.value.samples, weight: found.value.weight, recent: found.value.recent }
          : Calibration.identity
        const reportedTokens = turn.reportedUsedTokens - turn.base.usedTokens
        if (reportedTokens < 0) return before
        const sample = { estimatedTokens: turn.base.unreportedTokens + turn.estimatedTokens, reportedTokens }
        const after = Calibration.learn(before, sample, config.calibrationPolicy)
        if (after === before) return before
        yield* store.upsertCalibration({
          providerInstance: instance,
          ratio: after.ratio,
          samples: after.samples,
          weight: after.weight,
          recent: after.recent ?? [],
          updatedAt: yield* DateTime.now
        })
        yield* store.appendEvent({ threadId, type: "calibration.updated", payload: {
          providerInstance: instance,
          oldRatio: before.ratio,
          newRatio: after.ratio,
          samples: after.samples,
          ...sample
        } })
        return after
      })

      return { current, learn }
    })
  }
) {}
