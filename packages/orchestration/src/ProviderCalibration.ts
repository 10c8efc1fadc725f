/**
 * ProviderCalibration: the tokenizer calibration of each provider instance, as the orchestrator uses it — read at
 * turn start and `/compact` to put Baton's estimates in the provider's units, and taught by every completed turn
 * that lies between two trusted usage reports (`Calibration` in `@baton/context` holds the policy).
 *
 * A new instance whose adapter can count tokens (Anthropic's `count_tokens`) is calibrated before its first turn
 * from a count of the thread's recent history (`seedFromCount`), so its first handoff is budgeted in its units.
 *
 * It owns the sample's bookkeeping (which turns make a sample, the `calibration.updated` event). It does not own
 * the learning arithmetic (`Calibration.learn`), the storage (`ThreadStore`, table `provider_calibrations`) nor the
 * transaction: `learn` joins the caller's, so a calibration moves only with the turn that taught it.
 */
import type { NewThreadEvent, ProviderError, ProviderInstance, ThreadId } from "@baton/contracts"
import { Calibration, Render, TokenCounter } from "@baton/context"
import { type ProviderCalibration as StoredCalibration, ThreadStore, UnitOfWork } from "@baton/persistence"
import { ProviderFailure } from "@baton/providers"
import { DateTime, Effect, type Option } from "effect"
import { OrchestratorConfig } from "./OrchestratorConfig.js"
import * as Span from "./internal/Span.js"

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

/** How much recent history `seedFromCount` measures: at most this many items ... */
const seedItems = 60
/** A stored calibration as read (`None`: never learned) as `Calibration`: its figures, else `Calibration.identity`. */
const storedOf = (found: Option.Option<StoredCalibration>): Calibration.Calibration =>
  found._tag === "Some"
    ? { ratio: found.value.ratio, samples: found.value.samples, weight: found.value.weight, recent: found.value.recent }
    : Calibration.identity

/** ... and this many characters (about 6,000 tokens: a sample far above the noise, one cheap count request). */
const seedChars = 24_000

export class ProviderCalibration extends Effect.Service<ProviderCalibration>()(
  "@baton/orchestration/ProviderCalibration",
  {
    effect: Effect.gen(function*() {
      const store = yield* ThreadStore
      const config = yield* OrchestratorConfig
      const uow = yield* UnitOfWork
      const counter = yield* TokenCounter.TokenCounter
      /** Instances seen with a sample: samples are never removed, so their turns skip `seedFromCount`'s read. */
      const calibrated = new Set<ProviderInstance>()

      /**
       * The calibration in force given `found`, the stored calibration as read (`ThreadStore.getCalibration`, or with
       * another read): it, `Calibration.identity` if none or turned off.
       */
      const currentOf = (found: Option.Option<StoredCalibration>): Calibration.Calibration =>
        config.calibration ? storedOf(found) : Calibration.identity

      /** The calibration in force for `instance`: the stored one, `Calibration.identity` if none or turned off. */
      const current = Span.fn("ProviderCalibration.current")(function*(instance: ProviderInstance) {
        if (!config.calibration) return Calibration.identity
        return currentOf(yield* store.getCalibration(instance))
      })

      /**
       * Applies one sample (`estimatedTokens` Baton tokens measured as `reportedTokens` provider tokens) to
       * `instance`'s calibration, in the caller's transaction: read under a lock (another thread's turn on the same
       * provider may be learning right now), `Calibration.learn`, stored with a `calibration.updated` event
       * `{providerInstance, oldRatio, newRatio, samples, estimatedTokens, reportedTokens}` on `threadId` when it
       * moved (`collect`: pushed there instead, for the caller to append in the same unit of work, in order with its
       * others). Returns the calibration in force afterwards.
       */
      const learnSample = (
        threadId: ThreadId,
        instance: ProviderInstance,
        sample: Calibration.Sample,
        collect: Array<NewThreadEvent> | null = null,
        seen: Option.Option<StoredCalibration> | null = null
      ) =>
        Effect.gen(function*() {
          const row = (after: Calibration.Calibration, updatedAt: DateTime.Utc): StoredCalibration => ({
            providerInstance: instance,
            ratio: after.ratio,
            samples: after.samples,
            weight: after.weight,
            recent: after.recent ?? [],
            updatedAt
          })
          // From the row as turn start read it (not locked): one conditional write, kept only when the row is still
          // as read (its sample count unchanged: every write of a calibration adds a sample); the result is then what
          // the locked read below would have given. A sample `learn` rejects, or a row that moved, goes the locked way.
          let learned: { readonly before: Calibration.Calibration; readonly after: Calibration.Calibration } | null = null
          if (seen !== null) {
            const before = storedOf(seen)
            const after = Calibration.learn(before, sample, config.calibrationPolicy)
            if (after !== before && (yield* store.upsertCalibrationIfUnchanged(row(after, yield* DateTime.now), seen._tag === "Some" ? seen.value.samples : null))) {
              learned = { before, after }
            }
          }
          if (learned === null) {
            // A sample `learn` rejects teaches nothing whatever the row holds (`Calibration.rejection` looks at the
            // sample alone): the calibration in force is read without the lock (on Postgres the locked read made every
            // other thread's turn on this provider wait for this unit of work, and inserted a placeholder row first).
            if (Calibration.rejection(sample, config.calibrationPolicy) !== null) return storedOf(yield* store.getCalibration(instance))
            const before = storedOf(yield* store.getCalibrationForUpdate(instance))
            const after = Calibration.learn(before, sample, config.calibrationPolicy)
            if (after === before) return before
            yield* store.upsertCalibration(row(after, yield* DateTime.now))
            learned = { before, after }
          }
          const { after, before } = learned
          const event: NewThreadEvent = { threadId, type: "calibration.updated", payload: {
            providerInstance: instance,
            oldRatio: before.ratio,
            newRatio: after.ratio,
            samples: after.samples,
            ...sample
          } }
          if (collect === null) yield* store.appendEvent(event)
          else collect.push(event)
          return after
        })

      /**
       * Teaches `instance`'s calibration with one completed turn, in the caller's transaction. No sample is taken
       * when calibration is off, when the turn's report or the previous one was not trusted (`UsageSanity`), or
       * when usage went down (a compaction happened inside the span: the growth no longer measures what was sent).
       * A sample `Calibration.learn` rejects (too small, implausible) changes nothing (`learnSample`). Returns the
       * calibration in force afterwards. `collect`: its `calibration.updated` event is pushed there instead of appended
       * (the caller appends it in the same unit of work, before any event it appends later).
       */
      const learn = Span.fn("ProviderCalibration.learn")(function*(
        threadId: ThreadId,
        instance: ProviderInstance,
        turn: TurnSample,
        collect: Array<NewThreadEvent> | null = null,
        seen: Option.Option<StoredCalibration> | null = null
      ) {
        if (!config.calibration || turn.base === null || turn.reportedUsedTokens === null) return yield* current(instance)
        const reportedTokens = turn.reportedUsedTokens - turn.base.usedTokens
        if (reportedTokens < 0) return yield* current(instance)
        return yield* learnSample(threadId, instance, { estimatedTokens: turn.base.unreportedTokens + turn.estimatedTokens, reportedTokens }, collect, seen)
      })

      /**
       * Teaches `instance`'s calibration with a request of `sentTokens` Baton tokens (an injection; a turn's prompt and
       * inline history) that the provider rejected as over its window (`error`, classified by
       * `ProviderFailure.classify`, so an overflow told only in the text counts), in the caller's transaction: the size
       * the provider gives for the rejected request (provider tokens) less `base.usedTokens` (the native thread's last
       * trusted usage) measures `base.unreportedTokens + sentTokens` (a rejection is information too, sim seed 140048:
       * a retried `/compact` sent the very injection the provider had rejected). Nothing is learned when `error` is no overflow, gives no requested size, or `base`
       * is `null` (no trusted usage; the same rules as `learn`). Returns the calibration in force afterwards.
       */
      const learnFromOverflow = Span.fn("ProviderCalibration.learnFromOverflow")(function*(
        threadId: ThreadId,
        instance: ProviderInstance,
        base: SampleBase | null,
        error: ProviderError,
        sentTokens: number
      ) {
        if (ProviderFailure.classify(error).code !== "overflow") return yield* current(instance)
        const requested = ProviderFailure.requestedTokensOf(error)
        return yield* learn(threadId, instance, {
          base,
          reportedUsedTokens: requested,
          estimatedTokens: sentTokens
        })
      })

      /**
       * Calibrates `instance` from the provider's own count before its first turn (issue "Real model providers":
       * `count_tokens` calibrates a new instance). Only while the instance has no sample and calibration is on.
       * The sample is the thread's recent history as Baton renders it (`seedItems` most recent items, at most
       * `seedChars` characters, with `prompt`): the provider counts it and a one-character request, and the
       * difference (its framing, system prompt and tools cancel out) against Baton's count of the same text is one
       * sample, applied under the thread's lock (`learnSample`). A text under the policy's minimum sample, or a count
       * that fails, teaches nothing and is logged: the turn never waits on it beyond the two count requests.
       */
      const seedFromCount = Span.fn("ProviderCalibration.seedFromCount")(function*(
        threadId: ThreadId,
        instance: ProviderInstance,
        count: (text: string) => Effect.Effect<number, ProviderError>,
        prompt: string
      ) {
        if (!config.calibration || calibrated.has(instance)) return
        if ((yield* current(instance)).samples > 0) {
          calibrated.add(instance)
          return
        }
        const next = yield* store.nextItemSeq(threadId)
        const recent = next <= 1 ? [] : yield* store.listItemsInRange(threadId, Math.max(1, next - seedItems), next - 1)
        const text = [...recent.map((i) => Render.renderItem(i)), prompt].join("\n\n").slice(-seedChars)
        const empty = "."
        const estimatedTokens = counter.count(text) - counter.count(empty)
        if (estimatedTokens < config.calibrationPolicy.minSampleTokens) return
        const counted = yield* Effect.either(Effect.all([count(text), count(empty)], { concurrency: 2 }))
        if (counted._tag === "Left") {
          yield* Effect.logWarning(`count_tokens on ${instance} failed; its calibration waits for usage reports`, counted.left)
          return
        }
        const [whole, framing] = counted.right
        yield* uow.thread(threadId, "ProviderCalibration.seedFromCount")(
          learnSample(threadId, instance, { estimatedTokens, reportedTokens: whole - framing })
        )
      })

      return { current, currentOf, learn, learnFromOverflow, seedFromCount }
    })
  }
) {}
