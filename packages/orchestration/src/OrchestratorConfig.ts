/**
 * OrchestratorConfig: the policy knobs of turn start and `/compact`. Defaults follow DESIGN.md's Budget section
 * (reserve max(16,000, ceil(window/4)), cap 16,000, minimum useful budget 1,024 tokens).
 */
import { Budget } from "@baton/context"
import { Context, Layer } from "effect"

export interface OrchestratorConfigShape {
  readonly budget: Budget.BudgetPolicy
}

export class OrchestratorConfig extends Context.Tag("@baton/orchestration/OrchestratorConfig")<
  OrchestratorConfig,
  OrchestratorConfigShape
>() {}

export const defaults: OrchestratorConfigShape = { budget: Budget.defaultPolicy }

export const layer = (config: Partial<OrchestratorConfigShape> = {}) =>
  Layer.succeed(OrchestratorConfig, { ...defaults, ...config })
