/**
 * OrchestratorConfig: the policy knobs of turn start and `/compact`. Defaults follow docs/design.md's Budget section
 * (reserve max(16,000, ceil(window/4)), cap 16,000, minimum useful budget 1,024 tokens), and the provider timeouts
 * of the run lifecycle (interrupt acknowledgement, turn).
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
   * How long an interrupt waits for the provider to acknowledge it, in milliseconds, before the run ends
   * `interrupted` anyway and the native thread (still busy with a turn Baton can no longer follow) is no longer
   * trusted. Default 30,000 (30 s).
   */
  readonly interruptTimeoutMillis: number
  /**
   * How often a run driver reads whether another process asked to interrupt the runs it has in flight (two server
   * processes on one database: the process that receives an interrupt of a run driven elsewhere records the request
   * on the run, `runs.interrupt_requested_at`), in milliseconds: one statement per poll while runs are in flight, none
   * for a turn shorter than it. The interrupt reaches the turn within this much of its request. Default 200 (as
   * `/offload`'s cancellation across processes, `ThreadOffload.cancelPollMillis`).
   */
  readonly interruptPollMillis: number
  /**
   * A caller waiting for a run this process is not driving (`RunDriver.awaitRun` / `awaitEnd`, the API's
   * `GET /runs/{id}?waitMs`) reads the run's record after this many milliseconds, then at doubling pauses up to
   * 1 s, until a signal here answers it: the backstop for a run that ends where nothing here looks (e.g. interrupted
   * by another process while queued behind a run in flight here). Default 250.
   */
  readonly waitBackstopMillis: number
  /**
   * How long one provider turn may run, in milliseconds, before Baton stops waiting: the turn fails with
   * `ProviderError` code `timeout` and the run ends instead of staying `running`. Default 1,800,000 (30 min: coding
   * agents' turns run long tool calls). It measures the provider's working time: the waits an adapter announces
   * before sending a request again (`retry_scheduled`: a `retry-after`, the backoff) do not count.
   */
  readonly turnTimeoutMillis: number
  /**
   * How long a run waits for the client's tool results, in milliseconds, before it ends `failed`
   * (`tool_results_timeout`) with an error result recorded for every open call (the history stays well-formed and
   * the thread takes its next message). Default 600,000 (10 min).
   */
  readonly toolResultTimeoutMillis: number
  /**
   * Learn a per-provider tokenizer calibration from trusted usage reports and apply it to Baton's estimates
   * (`ProviderCalibration`). Default on; off, every ratio is 1 and nothing is learned.
   */
  readonly calibration: boolean
  /** The learning policy (`Calibration.defaultPolicy`: ratio clamped to [1/3, 3], samples >= 256 tokens). */
  readonly calibrationPolicy: Calibration.CalibrationPolicy
  /**
   * How long a driver on another host counts as alive without a heartbeat, in milliseconds (heartbeats every third
   * of it). Default 30,000; 0 turns heartbeats off (one host: liveness by pid alone, as tests and the simulation do).
   */
  readonly driverLeaseMillis: number
  /**
   * How often the run driver looks for unfinished runs of drivers that are gone (another process on the same database
   * killed mid-turn) and reconciles them (restart recovery), in milliseconds. Default 5,000; 0 turns it off (they are
   * then reconciled only when a worker here meets one, or at a start).
   */
  readonly goneDriverSweepMillis: number
  /**
   * Deliberately broken behaviours, for the simulator's mutation tests only: each proves that an oracle property
   * (`ProviderTruthChecks`) fails when the mechanism it guards is broken, so that it cannot pass vacuously. Empty
   * by default; never set outside tests.
   */
  readonly mutations: ReadonlySet<Mutation>
  /**
   * Automatic `/offload` (issue 12 item 6's `automatic` trigger): after a run completes, when the active native
   * thread's reported usage reaches `thresholdRatio` of its window and no run is queued, Baton offloads the thread
   * itself, keeping `keepTokens` (`null`: the default of the window) verbatim, as operation `auto-<run id>`; the
   * PreCompact hook is asked with trigger `automatic` and approval mode `approvalMode`. `null` (the default): off.
   */
  readonly autoOffload: AutoOffloadPolicy | null
}

/** See `OrchestratorConfigShape.autoOffload`. `thresholdRatio` in (0, 1]. */
export interface AutoOffloadPolicy {
  readonly thresholdRatio: number
  readonly keepTokens: number | null
  readonly approvalMode: string
}

/**
 * - `ignore_known_full`: turn start sends a request even when Baton knows it would exceed the window (a trusted
 *   usage report leaves no room for the prompt, or the prompt alone is larger than the window);
 * - `retry_overflow_on_same_native`: after an overflow with the prompt alone, the retry goes to the same native
 *   thread instead of a replacement (and the overflow records no floor, which would make turn start replace it);
 * - `sample_omits_output`: a turn's calibration sample leaves out what the turn produced, so the provider's growth
 *   is compared with the prompt alone and the ratio learned is too high;
 * - `offload_keeps_lane`: a committed `/offload` leaves the active lane's native thread as it is, so the next turn
 *   goes on holding every original the summary replaced;
 * - `resume_opens_replay_window`: a resumed native thread's replay window opens whatever the adapter's
 *   `resumeMayReplay` says (the build before tester r36's fix), so a model API's answer equal to an earlier one,
 *   same id, is skipped as a replay;
 * - `floor_ignores_growth`: a rejection's floor (`NativeThread.heldAtLeast`) stays where the rejection put it while
 *   the native thread grows (the build before this property), so a stale report after it lets turn start send a
 *   prompt that fits the floor but not what the native thread holds by then;
 * - `race_forgets_rejection`: a context overflow raced by a user interrupt records nothing (no calibration sample,
 *   no floor, no `context.overflowed`: the build before sim seed 44018's fix), so the next turn start sends the
 *   interrupted run's prompt, as a missed run's history, to the native thread that had just rejected less;
 * - `compaction_overwrites_later`: `/compact` records the provider's answer over the native thread whatever was
 *   written meanwhile (the build before the sim race "/compact, inside its provider call, send" was fixed), so a
 *   turn sent while the provider compacted has its usage report overwritten by the compaction's older figure;
 * - `budget_ignores_reserve`: turn start computes the history budget without the reserve (`window - used -
 *   request`, capped), so history crowds the model's own room; the budget Baton records is the wrong one, and the
 *   check that compares a delivery with it passes (found by a mutation run: only an exactly-once side effect in one
 *   seed of eight named it before `ProviderTruthChecks.checkBudgetRecord`);
 * - `ignore_reconfiguration`: turn start keeps the model and window the lane recorded when the provider instance
 *   comes back from a restart with another configuration (no `provider_thread.reconfigured`), so budgets and
 *   known-full checks use a window the provider no longer enforces (the simulator's reconfiguring restarts);
 * - `owed_outside_unit_of_work`: `/compact` reads what is owed to the native thread outside a unit of work (the
 *   build before reviewer r48's fix), so the owed delivery it creates and its `delivery.created` event are written
 *   without the thread's lock (on Postgres that deadlocked a concurrent send; the simulator appends events only in
 *   a unit of work, `requireUnitOfWork`).
 */
export type Mutation =
  | "ignore_known_full"
  | "retry_overflow_on_same_native"
  | "sample_omits_output"
  | "offload_keeps_lane"
  | "resume_opens_replay_window"
  | "floor_ignores_growth"
  | "race_forgets_rejection"
  | "compaction_overwrites_later"
  | "budget_ignores_reserve"
  | "ignore_reconfiguration"
  | "owed_outside_unit_of_work"

export class OrchestratorConfig extends Context.Tag("@baton/orchestration/OrchestratorConfig")<
  OrchestratorConfig,
  OrchestratorConfigShape
>() {}

export const defaults: OrchestratorConfigShape = {
  budget: Budget.defaultPolicy,
  deferralPointer: true,
  maxCompactionsWithoutProgress: 3,
  interruptTimeoutMillis: 30_000,
  interruptPollMillis: 200,
  waitBackstopMillis: 250,
  turnTimeoutMillis: 1_800_000,
  toolResultTimeoutMillis: 600_000,
  calibration: true,
  calibrationPolicy: Calibration.defaultPolicy,
  driverLeaseMillis: 30_000,
  goneDriverSweepMillis: 5_000,
  mutations: new Set(),
  autoOffload: null
}

export const layer = (config: Partial<OrchestratorConfigShape> = {}) =>
  Layer.succeed(OrchestratorConfig, { ...defaults, ...config })
