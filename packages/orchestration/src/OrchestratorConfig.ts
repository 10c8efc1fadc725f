/**
 * OrchestratorConfig: the policy knobs of turn start and `/compact`. Defaults follow DESIGN.md's Budget section
 * (reserve max(16,000, ceil(window/4)), cap 16,000, minimum useful budget 1,024 tokens).
 */
import { Budget, Calibration } from "@baton/context"
import { Context, Layer } from "effect"

export interface OrchestratorConfigShape {
  readonly budget: Budget.BudgetPolicy
  /**
   * When owed history is deferred whole but the window still has physical headroom, send a short pointer (not
   * history, not a delivery) telling the model that earlier items exist and how to read them by ref. Default on.
   */
  readonly deferralPointer: boolean
  /**
   * `/compact` attempts in a row that free nothing before `/compact` stops calling the provider and reports why.
   * Default 3.
   */
  readonly maxCompactionsWithoutProgress: number
  /**
   * Learn a per-provider tokenizer calibration from trusted usage reports and apply it to Baton's estimates
   * (`ProviderCalibration`). Default on; off, every ratio is 1 and nothing is learned.
   */
  readonly calibration: boolean
  /** The learning policy (`Calibration.defaultPolicy`: ratio clamped to [0.5, 2], samples >= 256 tokens). */
  readonly calibrationPolicy: Calibration.CalibrationPolicy
}

export class OrchestratorConfig extends Context.Tag("@baton/orchestration/OrchestratorConfig")<
  OrchestratorConfig,
  OrchestratorConfigShape
>() {}

export const defaults: OrchestratorConfigShape = {
  budget: Budget.defaultPolicy,
  deferralPointer: true,
  maxCompactionsWithoutProgress: 3,
  calibration: true,
  calibrationPolicy: Calibration.defaultPolicy
}

export const layer = (config: Partial<OrchestratorConfigShape> = {}) =>
  Layer.succeed(OrchestratorConfig, { ...defaults, ...config })
