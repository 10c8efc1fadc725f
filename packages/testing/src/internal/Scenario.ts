/**
 * The simulation's scenario: the provider set-up of one seed and the operations to drive through the orchestrator,
 * as plain data (JSON), so a shrunk failure can be printed, stored and replayed as a regression test. Every random
 * choice is made here, at generation time; execution is a pure function of the scenario.
 *
 * Texts are derived from each operation's `id` (not its position), so deleting operations while shrinking leaves
 * the others byte-identical.
 */
import type { ContextUsage } from "@baton/contracts"
import type { ProviderAdapter, ScriptedProvider } from "@baton/providers"
import * as Prng from "./Prng.js"
import { produced } from "./Produced.js"

/** One scripted provider instance of the scenario. Windows and thresholds in tokens. */
export interface ProviderSetup {
  readonly name: string
  readonly window: number | null
  readonly autoCompactThreshold: number | null
  readonly inject: boolean
  /** Offers `readThread`, so uncertain deliveries are reconciled instead of replacing the native thread. */
  readonly readThread: boolean
  /** The provider's tokens per Baton token (`ScriptedConfig.tokenScale`); absent = 1. */
  readonly tokenScale?: number
  /** Tokens every native thread holds that Baton never sees (`ScriptedConfig.requestOverhead`); absent = 0. */
  readonly requestOverhead?: number
  /** Whether the provider enforces its window (`ScriptedConfig.enforceWindow`); absent = true. */
  readonly enforceWindow?: boolean
  /**
   * Acknowledgements and read-backs without usage (every `missingEvery`-th call) or with an impossible one (every
   * `impossibleEvery`-th; `ScriptedConfig.ackUsage`, a missing one wins); absent = always the provider's count.
   */
  readonly ackUsage?: { readonly missingEvery: number; readonly impossibleEvery: number }
  /** How it signals an overflow (`ScriptedConfig.overflowSignal`); absent = a typed code. */
  readonly overflowSignal?: "code" | "text"
  /**
   * `true`: it plays a stateless model API (an OpenAI-compatible server): its resume opens no replay window
   * (`resumeMayReplay: false`) and its response ids repeat, the id of an answer being derived from the answer's text
   * (`chatcmpl-<hash>`), so the same answer comes back under the same id, after a restart too (tester r36's server).
   * Absent: a session runtime with ids unique per answer.
   */
  readonly modelApi?: boolean
}

/**
 * The usage a scripted reply reports: the provider's own count, none (`usage: null`), a thread set near full
 * (`fraction` of the active provider's window), an impossible report (`777,000` used of `258,000`), or a stale one
 * (the native thread's count from before the request of its `lag`-th most recent turn, 1 = this one, lower than the
 * provider's own count, which it leaves unchanged: `ScriptedResponse.staleUsage`; with a `fillLeaving`, the turn also
 * truly filled the thread to that many tokens short of its auto-compaction point with content Baton never sees,
 * hidden by the stale figure).
 */
export type UsageReport =
  | { readonly kind: "counted" }
  | { readonly kind: "missing" }
  | { readonly kind: "near_full"; readonly fraction: number }
  | { readonly kind: "impossible" }
  | { readonly kind: "stale"; readonly lag: number; readonly fillLeaving: number | null }

/** What the provider answers to a turn: an assistant message of `tokens` tokens and tool call/result pairs. */
export interface ReplySpec {
  readonly tokens: number
  /** The size in tokens of each tool result; one tool call/result pair per entry. */
  readonly tools: ReadonlyArray<number>
  readonly reasoning: boolean
  readonly usage: UsageReport
  /**
   * The answer is the same short text every time (`Done.`), whatever `tokens` says: a model answering two questions
   * alike. On a `modelApi` provider it comes back under the same response id. Absent: a text of its own.
   */
  readonly same?: boolean
}

/** A crash planned inside an operation. */
export interface CrashSpec {
  /** The 1-based durable step of the operation at which the process dies (no crash if the operation has fewer). */
  readonly at: number
  /** The process dies again at this durable step of restart recovery; `null`: recovery completes. */
  readonly inRecoveryAt: number | null
  /** After the restart the client repeats the command with the same command id. */
  readonly retry: boolean
}

export type Operation =
  | { readonly kind: "create"; readonly id: number; readonly provider: string; readonly crash: CrashSpec | null }
  | {
    readonly kind: "send"
    readonly id: number
    /** Prompt size in tokens. */
    readonly prompt: number
    readonly reply: ReplySpec
    readonly fault: ScriptedProvider.Fault | null
    /** The user interrupts the run at the first durable step at or after this one outside a transaction. */
    readonly interruptAt: number | null
    readonly crash: CrashSpec | null
  }
  | { readonly kind: "interrupt_before_start"; readonly id: number; readonly prompt: number; readonly crash: CrashSpec | null }
  | {
    /**
     * A send whose turn stops inside its first tool call, where the user interrupts it (from inside the provider
     * call, so the order of events is fixed). `answered: false`: the provider never acknowledges the interrupt (it
     * times out) and its tool call then finishes, so the turn completes late.
     */
    readonly kind: "interrupt_in_tool_call"
    readonly id: number
    readonly prompt: number
    /** Has at least one tool. */
    readonly reply: ReplySpec
    readonly answered: boolean
    readonly crash: CrashSpec | null
  }
  | { readonly kind: "switch"; readonly id: number; readonly to: string; readonly crash: CrashSpec | null }
  | { readonly kind: "compact"; readonly id: number; readonly fault: "lose_injection_ack" | null; readonly crash: CrashSpec | null }
  | {
    readonly kind: "offload"
    readonly id: number
    /** The verbatim tail to keep, in tokens. */
    readonly keepTokens: number
    /** The summariser fails this offload (the record must stay unchanged). */
    readonly summariserFails: boolean
    readonly crash: CrashSpec | null
  }
  | {
    /**
     * The user forks the thread they are on (at its last ended run) and continues in the fork; `provider`: the
     * fork's provider (`null`: the parent's).
     */
    readonly kind: "fork"
    readonly id: number
    readonly provider: string | null
    readonly crash: CrashSpec | null
  }
  | {
    /**
     * The user merges the fork they are on back into its parent (a no-op on a thread that is not a fork); `leave`:
     * they then go back to the parent, else they keep working in the fork (a later merge brings only what is new).
     */
    readonly kind: "merge"
    readonly id: number
    readonly leave: boolean
    /**
     * The parent has a run in progress when the fork is merged: a send on the parent whose turn calls a client
     * tool (the run waits for the client's result), then the merge, then that run interrupted (after a crash: whatever
     * the restart left unfinished). Review: the merge's copies took seqs inside that run's span, between its prompt
     * and its call's result.
     */
    readonly behindWait: boolean
    readonly crash: CrashSpec | null
  }
  | {
    readonly kind: "restart"
    readonly id: number
    /**
     * The process restarts with a new configuration of one provider instance (issue 8 item 4: "a provider instance
     * whose model or window changes between restarts"): it advertises `model` and `window` from then on, enforces
     * that window and compacts at `autoCompactThreshold`; its native threads stay (`ScriptedProvider.reconfigure`).
     * Absent: a plain restart.
     */
    readonly reconfigure?: Reconfiguration
  }
  | {
    /**
     * A send whose turn calls a client tool (the run waits for the client's result, its call held in the tool wait),
     * a message queued behind it, then both interrupted: the queued one first (`queuedFirst`: it ends while queued
     * behind the waiting run, owing its prompt), or the waiting one first (the queued one starts, or is interrupted
     * before it does). After a crash the client interrupts whatever the restart left unfinished. Tester r35: the
     * queued prompt was recorded before the waiting run's call and result.
     */
    readonly kind: "queue_behind_wait"
    readonly id: number
    readonly prompt: number
    readonly queuedFirst: boolean
    readonly crash: CrashSpec | null
  }
  | {
    /**
     * Two commands on one thread in flight at once. `outer: "send"`: a send whose turn pauses inside its first tool
     * call (the provider call in progress), where the user issues `with` on the same thread (`/compact`, `/offload`
     * keeping `keepTokens`, or a switch to `to`); then the turn goes on. `outer: "offload"`: an `/offload` keeping
     * `keepTokens` whose summariser call pauses while the user sends the message (`with: "send"`: a whole turn),
     * then the summary is written. The inner command either completes or is refused with a typed error saying
     * what to do; neither fails otherwise nor waits forever, and the invariants and the oracle hold after both.
     */
    readonly kind: "race"
    readonly id: number
    /**
     * `"compact"`: a `/compact` whose provider call, once the provider has compacted and before it answers, lets the
     * user send the message (`with: "send"`: a whole turn on the same native thread), then the compaction's answer
     * is recorded. The compaction's outcome must not overwrite the turn's newer record. There the user may instead
     * fork the thread onto provider `to` (`with: "fork"`: they stay on the parent; the fork is a thread of its own from
     * then on, checked like every other) or send the message and interrupt its run before it starts (`with:
     * "interrupt"`: its prompt is then owed as a missed run).
     */
    readonly outer: "send" | "offload" | "compact"
    readonly prompt: number
    /** Has at least one tool, except under `outer: "compact"` (its send needs no tool call to pause in). */
    readonly reply: ReplySpec
    readonly with: "compact" | "offload" | "switch" | "send" | "fork" | "interrupt"
    readonly to: string
    readonly keepTokens: number
  }

/** A provider instance's new configuration at a restart (see `Operation` `restart`). */
export interface Reconfiguration {
  readonly provider: string
  readonly model: string
  readonly window: number
  readonly autoCompactThreshold: number | null
}

/**
 * The `/offload` summariser's truth: the input window it declares and enforces (Baton's tokens) and how often it
 * answers verbosely (longer than its input). Absent: no window, never verbose.
 *
 * `verboseOneIn` (generated): each call is verbose with probability `1 / verboseOneIn`, drawn from the scenario's
 * seed and the call's number (`verboseCall`), so an offload of several chunks commits unless one of its own calls
 * draws verbose. `verboseEvery` (older scenario files, read when `verboseOneIn` is absent): every `verboseEvery`-th
 * call of the run is verbose; with a global count every offload of `verboseEvery` chunks or more failed.
 */
export interface SummariserSetup {
  readonly inputWindow: number
  readonly verboseOneIn?: number
  readonly verboseEvery?: number
}

/**
 * Whether the summariser's call `call` (1-based, counted over the whole run: the summariser survives restarts) answers
 * verbosely under `setup`, for the scenario of `seed`. Deterministic: the same seed and call give the same answer.
 */
export const verboseCall = (seed: number, setup: SummariserSetup, call: number): boolean =>
  setup.verboseOneIn !== undefined
    ? Prng.make((Math.imul(seed, 0x9E3779B1) + call) >>> 0).next() < 1 / setup.verboseOneIn
    : setup.verboseEvery !== undefined && call % setup.verboseEvery === 0

export interface Scenario {
  readonly seed: number
  readonly providers: ReadonlyArray<ProviderSetup>
  readonly summariser?: SummariserSetup
  /** `ops[0]` is always `create`. */
  readonly ops: ReadonlyArray<Operation>
}

/** What generation may include; everything is on by default. */
export interface Features {
  /** Crash-restarts inside operations (and inside restart recovery). */
  readonly crashes: boolean
  /** After a crash, the client repeats the interrupted command with the same command id. */
  readonly retries: boolean
  /** Users interrupting a run while it is processed (at a durable step outside a transaction). */
  readonly interrupts: boolean
  /**
   * Provider faults (refusal, interrupt before start, failure after injection, lost injection acknowledgement,
   * timeout, context overflow) and interrupts inside a tool call (acknowledged or not).
   */
  readonly faults: boolean
  /** Scripted usage reports: missing, near full, impossible. */
  readonly usageReports: boolean
  /**
   * Stale usage reports (issue 8): about one send in six reports the usage its native thread had before the request
   * of one of its last 1-6 turns, lower than the provider's true count, which the report leaves as it is; half of
   * them also hide that the turn truly filled the thread to within 2,000 tokens of its auto-compaction point (content
   * Baton never sees). Baton believes it has more room than it does, and the provider's window (with `truth`)
   * rejects a request that no longer fits, as an overflow (a typed code, or on `plain` a plain-text HTTP 400): the
   * overflows `retry_overflow_on_same_native` needs. Drawn from a PRNG of its own, so every other draw of a seed
   * stays as it was. The oracle stays fair: a stale report is Baton's last knowledge, so it lowers what Baton is
   * held to have known.
   */
  readonly staleUsage: boolean
  /** `/offload` between operations (from a PRNG of its own, so the other operations of a seed stay the same). */
  readonly offloads: boolean
  /** Forks and merge-backs between operations (from a PRNG of their own, like offloads). */
  readonly forks: boolean
  /**
   * Provider truth: each provider keeps its own count (a tokenizer ratio and a system-prompt overhead, drawn from a
   * PRNG of their own), enforces its window (overflow by code, or for one provider only by the text of a plain
   * HTTP 400), and the oracle (`ProviderTruthChecks`) checks Baton against it after every step. Off: providers
   * accept whatever they are sent, as before.
   */
  readonly truth: boolean
  /**
   * A message queued behind a run waiting on a client tool call, both then interrupted in either order
   * (`queue_behind_wait`), from a PRNG of its own like offloads.
   */
  readonly queues: boolean
  /**
   * Merge-backs into a parent whose run waits on a client tool call (`merge` with `behindWait`), from a PRNG of their
   * own like offloads.
   */
  readonly mergesBehind: boolean
  /**
   * Commands racing a turn on the same thread (`race`: `/compact`, `/offload` or a switch issued while a turn is
   * inside a provider call), from a PRNG of their own like offloads.
   */
  readonly races: boolean
  /**
   * A model-API provider: `plain` plays a stateless model API whose resume cannot replay and whose response ids
   * repeat (`ProviderSetup.modelApi`), and about a third of the answers are the same short text (`ReplySpec.same`,
   * from a PRNG of its own like offloads), so a restart (a crash, the client's retry, a clean restart) between two
   * alike answers on its native thread resumes it with an answer equal to an earlier one, same id. Tester r36: such
   * an answer was skipped as a replay and lost.
   */
  readonly modelApi: boolean
  /**
   * Restarts with a provider instance reconfigured (another model, window or auto-compaction threshold: see
   * `Reconfiguration`), about one operation in fifty, from a PRNG of its own like offloads.
   */
  readonly reconfigures: boolean
}

export const allFeatures: Features = {
  crashes: true,
  retries: true,
  interrupts: true,
  faults: true,
  usageReports: true,
  staleUsage: true,
  offloads: true,
  forks: true,
  truth: true,
  races: true,
  queues: true,
  modelApi: true,
  mergesBehind: true,
  reconfigures: true
}

/**
 * The provider set-up of a seed: a large window, a small auto-compacting one, and one without native injection.
 * The small one counts 15% more tokens than Baton (the field's tokenizer gap), so budgets there are calibrated; set
 * without drawing from the PRNG, so every seed keeps the scenario it had.
 */
const providersFor = (r: Prng.Prng, rt: Prng.Prng, truth: boolean): ReadonlyArray<ProviderSetup> => {
  const small = r.pick([
    { window: 44_000, autoCompactThreshold: 42_000 },
    { window: 64_000, autoCompactThreshold: 60_000 }
  ])
  const setups: ReadonlyArray<ProviderSetup> = [
    { name: "big", window: 1_000_000, autoCompactThreshold: null, inject: true, readThread: r.chance(0.7) },
    { name: "small", ...small, inject: r.chance(0.85), readThread: r.chance(0.7), tokenScale: 1.15 },
    { name: "plain", window: 200_000, autoCompactThreshold: null, inject: false, readThread: r.chance(0.7) }
  ]
  if (!truth) return setups.map((p) => ({ ...p, enforceWindow: false }))
  // The truth of each provider, from its own stream: a ratio of 1.00-1.30 provider tokens per Baton token (the
  // field saw about 1.15) and a system prompt of 500-3,000 tokens; `plain` (an OpenAI-compatible server) signals
  // overflows only in the text of a plain HTTP 400.
  return setups.map((p) => ({
    ...p,
    tokenScale: 1 + rt.int(0, 30) / 100,
    requestOverhead: rt.int(500, 3_000),
    overflowSignal: p.name === "plain" ? "text" as const : "code" as const
  }))
}

/**
 * The durable steps an operation of each kind goes through at most (measured: a send with a replacement, an
 * injection and a completed turn is the longest); a crash step is drawn uniformly up to it, so most planned crashes
 * land inside the operation.
 */
const stepsOf: Record<Operation["kind"], number> = {
  create: 6,
  send: 40,
  interrupt_before_start: 5,
  interrupt_in_tool_call: 40,
  switch: 9,
  compact: 16,
  offload: 12,
  fork: 12,
  merge: 10,
  restart: 0,
  queue_behind_wait: 40,
  // A race carries no crash: the crash points of its commands are covered by send, /compact, /offload and switch.
  race: 0
}

const crashFor = (r: Prng.Prng, features: Features, kind: Operation["kind"], p: number): CrashSpec | null =>
  features.crashes && r.chance(p)
    ? {
      at: r.int(1, stepsOf[kind]),
      inRecoveryAt: r.chance(0.2) ? r.int(1, 3) : null,
      retry: features.retries && r.chance(0.5)
    }
    : null

const promptSize = (r: Prng.Prng) =>
  r.weighted<() => number>([
    [70, () => r.int(3, 80)],
    [20, () => r.int(100, 2_500)],
    [10, () => r.int(5_000, 20_000)]
  ])()

/**
 * A new configuration of provider `name`: a window among those its kind of model has (a smaller one, the original,
 * a larger one; `small`'s with an auto-compaction threshold below it), and half the time another model.
 */
const reconfigurationFor = (r: Prng.Prng, name: string): Reconfiguration => {
  const window = name === "big"
    ? r.pick([200_000, 400_000, 1_000_000])
    : name === "small"
    ? r.pick([32_000, 44_000, 64_000, 128_000])
    : r.pick([64_000, 128_000, 200_000])
  return {
    provider: name,
    model: r.chance(0.5) ? `scripted-${name}` : `scripted-${name}-${r.pick(["mini", "v2", "long"])}`,
    window,
    autoCompactThreshold: name === "small" ? window - r.int(2_000, 4_000) : null
  }
}

/** The share of sends whose reply reports stale usage (with `Features.staleUsage`). */
const staleShare = 0.17

const replyFor = (r: Prng.Prng, features: Features): ReplySpec => {
  const tokens = r.weighted<() => number>([
    [60, () => r.int(5, 300)],
    [30, () => r.int(300, 3_000)],
    [10, () => r.int(5_000, 15_000)]
  ])()
  const tools = r.chance(0.25) ? Array.from({ length: r.int(1, 3) }, () => r.int(20, 2_500)) : []
  const usage: UsageReport = !features.usageReports
    ? { kind: "counted" }
    : r.weighted<UsageReport>([
      [76, { kind: "counted" }],
      [10, { kind: "missing" }],
      [10, { kind: "near_full", fraction: 0.8 + r.int(0, 17) / 100 }],
      [4, { kind: "impossible" }]
    ])
  return { tokens, tools, reasoning: r.chance(0.15), usage }
}

/**
 * Generates the scenario of `seed`: `steps` operations after `create`. Operation mix (by weight): send 56 (with
 * faults on: send 50 and interrupt inside a tool call 6, itself a send, so the share of every other operation is
 * unchanged), switch 16, `/compact` 12, interrupt before start 8, clean restart 4; about one operation in five
 * carries a crash. After about one operation in eight an `/offload` follows (its own PRNG stream; ids `steps + id`),
 * and after about one in ten a fork or a merge-back (another stream; ids `2 * steps + id`; at most two forks deep),
 * and after about one in twelve a race: a send with `/compact`, `/offload` or a switch issued inside its turn
 * (another stream; ids `3 * steps + id`); after about one in twenty-five a `/compact` inside whose provider call the
 * user sends a message (another stream; ids `5 * steps + id`); after about one in fifty a restart with a provider
 * instance reconfigured (another stream; ids `6 * steps + id`); after about one in thirty-three a `/compact` inside
 * whose provider call the user forks the thread or sends a message and interrupts it (another stream; ids
 * `7 * steps + id`).
 */
/**
 * With usage reports on, about half the providers answer some acknowledgements and read-backs without usage or with
 * an impossible one (`ProviderSetup.ackUsage`), from a PRNG stream of their own (`salt`), so every other draw of a
 * seed stays as it was.
 */
const withAckUsage = (providers: ReadonlyArray<ProviderSetup>, salt: number, on: boolean): ReadonlyArray<ProviderSetup> => {
  if (!on) return providers
  const ra = Prng.make(salt)
  return providers.map((p) => ra.chance(0.5) ? { ...p, ackUsage: { missingEvery: ra.int(2, 4), impossibleEvery: ra.int(3, 7) } } : p)
}

export const generate = (seed: number, steps: number, features: Features = allFeatures): Scenario => {
  const r = Prng.make(seed)
  // Offloads draw from their own stream: adding them leaves every other operation of a seed as it was.
  const ro = Prng.make((seed ^ 0x0ff10ad) >>> 0)
  // So do forks and merges; `depth` is how many forks deep the user is (at most 2).
  const rl = Prng.make((seed ^ 0x11ea9e) >>> 0)
  let depth = 0
  // And so does the providers' truth.
  const rt = Prng.make((seed ^ 0x7e57) >>> 0)
  // And so do races.
  const rr = Prng.make((seed ^ 0x4ace5) >>> 0)
  // And so do messages queued behind a waiting run.
  const rq = Prng.make((seed ^ 0x0e0e0e) >>> 0)
  // And so do alike answers (the model-API feature).
  const rm = Prng.make((seed ^ 0xa91a11) >>> 0)
  // And so do merges behind a waiting run.
  const rb = Prng.make((seed ^ 0x3e76eb) >>> 0)
  // And so do stale usage reports.
  const rs = Prng.make((seed ^ 0x57a1e) >>> 0)
  // And so do sends inside a /compact's provider call.
  const rk = Prng.make((seed ^ 0xc0ac7) >>> 0)
  // And so do reconfigurations between restarts.
  const rc = Prng.make((seed ^ 0x2ec0f) >>> 0)
  // And so do forks and interrupts inside a /compact's provider call.
  const rf = Prng.make((seed ^ 0xf0c4c7) >>> 0)
  const providers = withAckUsage(providersFor(r, rt, features.truth), (seed ^ 0xac4a6e) >>> 0, features.usageReports)
    .map((p) => features.modelApi && p.name === "plain" ? { ...p, modelApi: true } : p)
  const names = providers.map((p) => p.name)
  let active = r.pick(names)
  const ops: Array<Operation> = [{ kind: "create", id: 0, provider: active, crash: crashFor(r, features, "create", 0.3) }]
  for (let id = 1; id <= steps; id++) {
    const kind = r.weighted<Operation["kind"]>([
      [features.faults ? 50 : 56, "send"],
      [features.faults ? 6 : 0, "interrupt_in_tool_call"],
      [16, "switch"],
      [12, "compact"],
      [8, "interrupt_before_start"],
      [4, "restart"]
    ])
    switch (kind) {
      case "send": {
        const prompt = promptSize(r)
        const drawn = replyFor(r, features)
        const alike = features.modelApi && rm.chance(0.35) ? { ...drawn, same: true } : drawn
        const reply: ReplySpec = features.staleUsage && rs.chance(staleShare) ? { ...alike, usage: { kind: "stale", lag: rs.int(1, 6), fillLeaving: rs.chance(0.5) ? rs.int(1, 2_000) : null } } : alike
        const fault = features.faults && r.chance(0.2)
          ? r.weighted<ScriptedProvider.Fault>([
            [30, "refuse"],
            [20, "interrupt_before_start"],
            [25, "fail_after_injection"],
            [25, "lose_injection_ack"],
            [20, "timeout"],
            [20, "overflow"]
          ])
          : null
        const interruptAt = features.interrupts && r.chance(0.1) ? r.int(1, 16) : null
        ops.push({ kind, id, prompt, reply, fault, interruptAt, crash: crashFor(r, features, kind, 0.25) })
        break
      }
      case "interrupt_in_tool_call": {
        const reply = replyFor(r, features)
        const tools = reply.tools.length > 0 ? reply.tools : [r.int(20, 2_500)]
        ops.push({
          kind,
          id,
          prompt: promptSize(r),
          reply: { ...reply, tools },
          answered: r.chance(0.7),
          crash: crashFor(r, features, kind, 0.25)
        })
        break
      }
      case "switch": {
        const to = r.pick(names.filter((n) => n !== active))
        active = to
        ops.push({ kind, id, to, crash: crashFor(r, features, kind, 0.2) })
        break
      }
      case "compact":
        ops.push({ kind, id, fault: features.faults && r.chance(0.15) ? "lose_injection_ack" : null, crash: crashFor(r, features, kind, 0.2) })
        break
      case "interrupt_before_start": {
        // Queue-then-interrupt is two commands: the client does not replay it after a crash.
        const crash = crashFor(r, features, kind, 0.2)
        ops.push({ kind, id, prompt: promptSize(r), crash: crash === null ? null : { ...crash, retry: false } })
        break
      }
      case "restart":
        ops.push({ kind, id })
        break
    }
    if (features.offloads && ro.chance(0.12)) {
      ops.push({
        kind: "offload",
        id: steps + id,
        keepTokens: ro.pick([0, 300, 2_000, 16_000]),
        summariserFails: features.faults && ro.chance(0.15),
        crash: crashFor(ro, features, "offload", 0.25)
      })
    }
    if (features.races && rr.chance(0.08)) {
      const reply = replyFor(rr, features)
      const withKind = rr.pick(["compact", "offload", "switch", "send"] as const)
      const to = rr.pick(names.filter((n) => n !== active))
      ops.push({
        kind: "race",
        id: 3 * steps + id,
        outer: withKind === "send" ? "offload" : "send",
        prompt: promptSize(rr),
        reply: { ...reply, tools: reply.tools.length > 0 ? reply.tools : [rr.int(20, 2_500)] },
        with: withKind,
        to,
        keepTokens: rr.pick([0, 300, 2_000])
      })
    }
    if (features.races && rk.chance(0.04)) {
      const reply = replyFor(rk, features)
      ops.push({
        kind: "race",
        id: 5 * steps + id,
        outer: "compact",
        prompt: promptSize(rk),
        reply,
        with: "send",
        to: active,
        keepTokens: 0
      })
    }
    if (features.races && rf.chance(0.03)) {
      ops.push({
        kind: "race",
        id: 7 * steps + id,
        outer: "compact",
        prompt: promptSize(rf),
        reply: replyFor(rf, features),
        with: rf.chance(0.5) ? "fork" : "interrupt",
        to: rf.pick(names),
        keepTokens: 0
      })
    }
    if (features.reconfigures && rc.chance(0.02)) {
      ops.push({ kind: "restart", id: 6 * steps + id, reconfigure: reconfigurationFor(rc, rc.pick(names)) })
    }
    if (features.queues && rq.chance(0.06)) {
      ops.push({ kind: "queue_behind_wait", id: 4 * steps + id, prompt: promptSize(rq), queuedFirst: rq.chance(0.5), crash: crashFor(rq, features, "queue_behind_wait", 0.3) })
    }
    if (features.forks && rl.chance(0.1)) {
      const id2 = 2 * steps + id
      if (depth < 2 && (depth === 0 || rl.chance(0.4))) {
        depth++
        ops.push({ kind: "fork", id: id2, provider: rl.chance(0.5) ? null : rl.pick(names), crash: crashFor(rl, features, "fork", 0.25) })
      } else {
        const leave = rl.chance(0.6)
        if (leave) depth--
        const crash = crashFor(rl, features, "merge", 0.25)
        ops.push({ kind: "merge", id: id2, leave, behindWait: features.mergesBehind && rb.chance(0.5), crash })
      }
    }
  }
  // A summariser with a 6,000-token window that answers about one call in 16-24 verbosely (from the truth stream too).
  // An offload takes one call per chunk, 8 on average in seeds 59000-59009 × 80 (up to 30): at one in 6-10, 20 of
  // their 121 offloads committed against 44 failed by a verbose chunk; at one in 16-24, 38 against 20.
  const summariser: SummariserSetup | null = features.truth ? { inputWindow: 6_000, verboseOneIn: rt.int(16, 24) } : null
  return summariser === null ? { seed, providers, ops } : { seed, providers, summariser, ops }
}

// ---- texts

const vocabulary = [
  "alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "green", "table", "light", "north", "south",
  "file", "test", "build", "error", "value", "return", "import", "string", "number", "array", "index", "check",
  "parse", "write", "read", "thread", "run", "item", "queue", "event", "state", "order", "fix", "patch"
]
const snippets = [
  "const x = await load(path)\n",
  "if (!ok) throw new Error(`bad ${id}`)\n",
  "SELECT * FROM runs WHERE seq > 3;\n",
  "{\"path\": \"src/index.ts\", \"line\": 42}\n",
  "naïve café — ünïcödé ✓\n",
  "$ pnpm test -- --run\n"
]

/** About `tokens` tokens of text, determined by `salt` (short words, with code-like snippets now and then). */
export const filler = (salt: number, tokens: number): string => {
  const r = Prng.make(salt)
  const out: Array<string> = []
  let n = 0
  while (n < tokens) {
    if (r.chance(0.01)) {
      out.push(r.pick(snippets))
      n += 8
    } else {
      out.push(r.pick(vocabulary) + (r.chance(0.06) ? "." : ""))
      n += 1
    }
  }
  return out.join(" ")
}

/** The prompt of operation `id` (and retry `attempt`): distinct per operation, about `tokens` tokens. */
export const promptText = (id: number, tokens: number) => `m${id}: ${filler(Prng.mix(id, 1), Math.max(1, tokens - 3))}`

/** Usage the reply reports to the orchestrator, given the active provider's window. */
const usageOf = (usage: UsageReport, window: number | null): ContextUsage | null | undefined => {
  switch (usage.kind) {
    case "counted":
    case "stale":
      return undefined
    case "missing":
      return null
    case "near_full": {
      const max = window ?? 200_000
      return { usedTokens: Math.floor(max * usage.fraction), maxTokens: max }
    }
    case "impossible":
      return { usedTokens: 777_000, maxTokens: 258_000 }
  }
}

/** A model API's response id for an answer: derived from its text (FNV-1a), so the same answer has the same id. */
const responseIdOf = (text: string) => {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193)
  return `chatcmpl-${(h >>> 0).toString(16)}`
}

/** The text of a send's answer: its own (`a<id>: ...`, about `reply.tokens` tokens), or `Done.` when `reply.same`. */
const answerText = (id: number, reply: ReplySpec) => reply.same === true ? "Done." : `a${id}: ${filler(Prng.mix(id, 3), reply.tokens)}`

/**
 * The scripted response of a send operation. Tool call ids are unique per attempt (`call_<id>_<attempt>_<k>`), as
 * a real provider's are; the assistant message and its tool calls share a message id (one tool unit): unique per
 * attempt (`msg_<id>_<attempt>`, none for a lone answer) from a session runtime, the response id of the answer's
 * text from a model API (`modelApi`: `chatcmpl-<hash>`, on every answer, repeating with the text).
 */
export const responseFor = (
  id: number,
  attempt: number,
  reply: ReplySpec,
  window: number | null,
  modelApi = false
): ScriptedProvider.ScriptedResponse => {
  const answer = answerText(id, reply)
  const messageId = modelApi ? responseIdOf(answer) : reply.tools.length > 0 || reply.reasoning ? `msg_${id}_${attempt}` : null
  const item = (kind: ProviderAdapter.ProducedItem["kind"], text: string, extra: Partial<ProviderAdapter.ProducedItem> = {}) =>
    produced(kind, text, { messageId, ...extra })
  const items: Array<ProviderAdapter.ProducedItem> = []
  if (reply.reasoning) items.push(item("reasoning", filler(Prng.mix(id, 2), 40)))
  items.push(item("assistant_message", answer))
  reply.tools.forEach((_, k) => {
    const toolCallId = `call_${id}_${attempt}_${k}`
    items.push(item("tool_call", JSON.stringify({ cmd: `cat src/file${k}.ts` }), { toolCallId, toolName: "bash", toolCallState: "answered" }))
  })
  reply.tools.forEach((size, k) => {
    const toolCallId = `call_${id}_${attempt}_${k}`
    items.push(item("tool_result", filler(Prng.mix(id, 10 + k), size), { toolCallId, toolName: "bash", messageId: null }))
  })
  if (reply.tools.length > 0) {
    const end = `done ${id}`
    items.push(item("assistant_message", end, { messageId: modelApi ? responseIdOf(end) : `msg_${id}_${attempt}_end` }))
  }
  const usage = usageOf(reply.usage, window)
  const stale = reply.usage.kind === "stale"
    ? { staleUsage: { lag: reply.usage.lag, ...(reply.usage.fillLeaving === null ? {} : { fillLeaving: reply.usage.fillLeaving }) } }
    : {}
  return usage === undefined ? { items, ...stale } : { items, usage }
}

// ---- formatting

const crashText = (c: CrashSpec | null) =>
  c === null
    ? ""
    : ` [crash at step ${c.at}${c.inRecoveryAt === null ? "" : `, again at recovery step ${c.inRecoveryAt}`}${c.retry ? ", client retries" : ""}]`

const usageText = (u: UsageReport) =>
  u.kind === "counted"
    ? ""
    : u.kind === "near_full"
    ? `, usage near full ${u.fraction}`
    : u.kind === "stale"
    ? `, usage stale by ${u.lag} turn(s)${u.fillLeaving === null ? "" : `, thread truly filled to ${u.fillLeaving} tok short of compaction`}`
    : `, usage ${u.kind}`

const faultText = (fault: ScriptedProvider.Fault) =>
  typeof fault === "string" ? fault : `${fault._tag}(${fault.items}, ${fault.code})`

/** One line per operation, for failure reports. */
export const formatOperation = (op: Operation): string => {
  switch (op.kind) {
    case "create":
      return `create on ${op.provider}${crashText(op.crash)}`
    case "send":
      return `send m${op.id} (${op.prompt} tok; reply ${op.reply.tokens} tok` +
        `${op.reply.tools.length > 0 ? `, tools [${op.reply.tools.join(", ")}]` : ""}` +
        `${op.reply.reasoning ? ", reasoning" : ""}${op.reply.same === true ? ", answer Done." : ""}${usageText(op.reply.usage)})` +
        `${op.fault === null ? "" : ` fault ${faultText(op.fault)}`}` +
        `${op.interruptAt === null ? "" : ` interrupt at step ${op.interruptAt}`}${crashText(op.crash)}`
    case "interrupt_in_tool_call":
      return `send m${op.id} (${op.prompt} tok; reply ${op.reply.tokens} tok, tools [${op.reply.tools.join(", ")}]) and interrupt ` +
        `it inside its first tool call${op.answered ? "" : " (the provider never acknowledges)"}${crashText(op.crash)}`
    case "interrupt_before_start":
      return `queue m${op.id} (${op.prompt} tok) and interrupt it before it starts${crashText(op.crash)}`
    case "switch":
      return `switch to ${op.to}${crashText(op.crash)}`
    case "compact":
      return `/compact${op.fault === null ? "" : ` fault ${op.fault}`}${crashText(op.crash)}`
    case "offload":
      return `/offload keep ${op.keepTokens}${op.summariserFails ? " summariser fails" : ""}${crashText(op.crash)}`
    case "fork":
      return `fork${op.provider === null ? "" : ` onto ${op.provider}`}${crashText(op.crash)}`
    case "merge":
      return `merge back${op.behindWait ? " behind a run of the parent waiting on a client tool" : ""}${op.leave ? " and leave the fork" : ""}${crashText(op.crash)}`
    case "restart":
      return op.reconfigure === undefined
        ? "restart"
        : `restart with ${op.reconfigure.provider} reconfigured: model ${op.reconfigure.model}, window ${op.reconfigure.window}` +
          `${op.reconfigure.autoCompactThreshold === null ? "" : `/${op.reconfigure.autoCompactThreshold}`}`
    case "queue_behind_wait":
      return `send m${op.id} (${op.prompt} tok) that waits on a client tool call, queue a message behind it, interrupt ` +
        `${op.queuedFirst ? "the queued one, then the waiting one" : "the waiting one, then the queued one"}${crashText(op.crash)}`
    case "race": {
      const send = `send m${op.id} (${op.prompt} tok; reply ${op.reply.tokens} tok, tools [${op.reply.tools.join(", ")}])`
      return op.outer === "compact"
        ? `/compact and, inside its provider call, ${
          op.with === "fork"
            ? `fork onto ${op.to}`
            : op.with === "interrupt"
            ? `send m${op.id} (${op.prompt} tok) and interrupt it before it starts`
            : send.replace(/, tools \[\]/, "")
        }`
        : op.outer === "offload"
        ? `/offload keep ${op.keepTokens} and, inside its summariser call, ${send}`
        : `${send} and, inside its first tool call, ${op.with === "compact" ? "/compact" : op.with === "offload" ? `/offload keep ${op.keepTokens}` : `switch to ${op.to}`}`
    }
  }
}

export const formatScenario = (scenario: Scenario): ReadonlyArray<string> => [
  `providers: ${scenario.providers.map((p) =>
    `${p.name} ${p.window ?? "?"}${p.autoCompactThreshold === null ? "" : `/${p.autoCompactThreshold}`} ${p.inject ? "inject" : "noinject"}${p.readThread ? "" : " noread"}${p.tokenScale === undefined || p.tokenScale === 1 ? "" : ` x${p.tokenScale}`}${p.modelApi === true ? " model-api" : ""}`
  ).join(", ")}`,
  ...scenario.ops.map((op, i) => `${String(i).padStart(3)}  ${formatOperation(op)}`)
]
