/**
 * ScriptedProvider: a deterministic, offline provider — the embedded default and the replay's playback engine.
 *
 * Each instance keeps its native threads in memory and counts what each has seen with the real tokenizer, so the
 * usage it reports is "the tokens this native thread has been sent and has produced". It models native
 * auto-compaction: when usage reaches the instance's threshold after a turn, the thread's usage drops to
 * `summaryTokens`. Turns play back responses from a `Script` shared by all instances (the replay enqueues the
 * recorded assistant and tool items of each user turn). A `FaultPlan` injects provider faults by call.
 *
 * Client tools: a response's `tool_call` items whose `toolName` is one of the turn's `tools` and which the response
 * does not answer itself end the turn with them pending (`turn_ended { pendingToolCalls }`); `continueTurn` takes
 * their results (kept in `received` as `tool_results`) and plays the next scripted response.
 *
 * It owns nothing durable: a process restart loses its native threads, exactly like a real provider session that
 * expired, and `resumeThread` on an unknown ref fails with `unavailable`.
 *
 * Provider truth: each native thread's `used` is the provider's own count, in its own units (`tokenScale` of Baton's
 * tokens, plus a fixed `requestOverhead` such as a system prompt), whatever Baton believes. The instance enforces its
 * window the way real APIs do: a turn or an injection that would take the native thread past its window is rejected
 * before the provider reads it (`overflow`, or with `overflowSignal: "text"` a plain `refused` whose only signal is
 * the message text), and a turn whose output would pass it stops mid-stream with `overflow`. Every request and its
 * outcome is kept in `truth`, for the simulator's oracle.
 */
import { type ContextUsage, ProviderError, type ProviderErrorCode, type ProviderInstance } from "@baton/contracts"
import type { TokenCounter } from "@baton/context"
import { Deferred, Effect, FiberId, Stream } from "effect"
import {
  type CompactResult,
  type ContinueTurnInput,
  type ProducedItem,
  type ProviderAdapterShape,
  type ReadThreadResult,
  type StartTurnInput,
  TurnEvent,
  type TurnTokens
} from "./ProviderAdapter.js"

/** A fault the plan can inject (issue "Baton core", item 5). */
export type Fault =
  /** `startTurn` fails before the provider reads the prompt (`code: "refused"`). */
  | "refuse"
  /** `startTurn` fails with `code: "interrupted"`: the run was interrupted before the provider started. */
  | "interrupt_before_start"
  /** `injectHistory` succeeds, then `startTurn` of the same turn fails (`code: "unavailable"`). */
  | "fail_after_injection"
  /** `injectHistory` reaches the native thread but its acknowledgement is lost (`code: "ack_lost"`). */
  | "lose_injection_ack"
  /**
   * `injectHistory` never reaches the native thread and fails as a lost acknowledgement would (`code: "ack_lost"`):
   * from the error alone Baton cannot tell it from `lose_injection_ack` (a process killed mid-injection).
   */
  | "drop_injection"
  /**
   * `startTurn`: the provider reads the prompt (and any inline history), then its answer never arrives: the call
   * fails with `code: "timeout"` and the turn's output is lost. Baton cannot tell from the error whether the prompt
   * was read (only `readThread` can).
   */
  | "timeout"
  /** `startTurn` fails with `code: "overflow"` (context length exceeded) before the provider reads the prompt. */
  | "overflow"
  /** `startTurn` reads the prompt and then never returns (a provider that hangs): only Baton's turn timeout ends it. */
  | "hang"
  /**
   * `startTurn` reads the prompt, issues the response's first tool call and stops inside it until interrupted: it
   * runs the instance's `onToolCall` hook (if any), then waits for `interrupt` on its native thread and returns the
   * items up to that call with `interrupted: true`. With a hook, an interrupt that did not arrive by the time the
   * hook returns means the tool finished: the turn completes normally.
   */
  | "interrupt_in_tool_call"
  /** `interrupt` never answers (and the turn in progress does not stop). */
  | "ignore_interrupt"
  /**
   * `startTurn` reads the prompt, streams the response's first `items` items (all of them when it has fewer), then
   * fails mid-stream with `code` (a dropped connection: `unavailable`; the native thread hit its window while
   * producing: `overflow`; the provider stopped the turn at an interrupt: `interrupted`, as a model API adapter does
   * when interrupted before the provider accepted the request). The items before the failure were produced and stay
   * in the native thread.
   */
  | FailAfterItems

/** The mid-stream fault (see `Fault`). */
export interface FailAfterItems {
  readonly _tag: "fail_after_items"
  readonly items: number
  readonly code: "unavailable" | "overflow" | "interrupted"
}

/** A mid-stream failure after `items` items with `code` (see `Fault`). */
export const failAfterItems = (items: number, code: FailAfterItems["code"] = "unavailable"): FailAfterItems => ({
  _tag: "fail_after_items",
  items,
  code
})

/** The call being planned: which operation, the 1-based count of that operation on this instance, and the run. */
export interface FaultCall {
  readonly operation: "startTurn" | "injectHistory" | "interrupt"
  readonly call: number
  readonly runId: string
}

/** Decides a fault for a call, or `null`. Must be deterministic for replayable runs. */
export type FaultPlan = (call: FaultCall) => Fault | null

/** A scripted response: the items a turn produces and, optionally, the usage to report instead of the count. */
export interface ScriptedResponse {
  readonly items: ReadonlyArray<ProducedItem>
  /** `undefined`: report the counted usage; `null`: report no usage at all (a provider that omits it). */
  readonly usage?: ContextUsage | null | undefined
  /**
   * Holds the turn open after its first `afterItems` items (before `turn_ended` when it has no more) until `gate`
   * is completed: a test sees the turn running with some of its output streamed.
   */
  readonly hold?: { readonly afterItems: number; readonly gate: Deferred.Deferred<void> } | undefined
  /** The tokens the turn is billed, reported with its usage (model APIs report them; the count alone does not). */
  readonly tokens?: TurnTokens | undefined
  /**
   * A stale usage report (issue 8: "usage that is missing, stale or above the window"), `lag` turns old: the turn
   * reports the usage its native thread had before the request of the `lag`-th most recent turn (1: this turn's;
   * the thread's oldest figure kept when it has had fewer turns, at most 8 are kept), lower than the provider's own
   * count, which stays as it is. Baton is told it has more room than it does, and the window the instance enforces
   * rejects a request that no longer fits. When that figure is not lower (the thread compacted itself since), the
   * counted usage is reported. `fillLeaving` (tokens, provider units): the turn also grew the native thread to that
   * many tokens short of its auto-compaction point (the threshold, else the window; at least 1 short) with content
   * Baton never sees (a server-side tool's result, hidden context), so the stale figure hides a thread that is nearly
   * full. Ignored when `usage` is set.
   */
  readonly staleUsage?: { readonly lag: number; readonly fillLeaving?: number | undefined } | undefined
}

/** A FIFO of responses shared by the scripted instances of one process. */
export interface Script {
  readonly enqueue: (response: ScriptedResponse) => void
  readonly next: () => ScriptedResponse | undefined
  readonly size: () => number
  /** Drops responses nobody consumed (a turn that never reached the provider). */
  readonly clear: () => void
}

export const makeScript = (): Script => {
  const queue: Array<ScriptedResponse> = []
  let head = 0
  return {
    enqueue: (r) => void queue.push(r),
    next: () => (head < queue.length ? queue[head++] : undefined),
    size: () => queue.length - head,
    clear: () => {
      queue.length = 0
      head = 0
    }
  }
}

/** Configuration of one scripted provider instance. */
export interface ScriptedConfig {
  readonly instance: ProviderInstance
  readonly model?: string
  /** Context window in tokens; `null` = the provider does not say. */
  readonly contextWindow: number | null
  /** Native auto-compaction threshold in tokens; `null` = none. */
  readonly autoCompactThreshold: number | null
  readonly injectHistory: boolean
  /** Whether `readThread` is offered (default true): without it, uncertain deliveries force a replacement. */
  readonly readThread?: boolean
  /** Usage after a compaction, in tokens. Default 2,000. */
  readonly summaryTokens?: number
  readonly faults?: FaultPlan
  /**
   * The usage an injection's acknowledgement or a `readThread` answer carries, by call (1-based, the two counted
   * together): `counted` (the native thread's, the default), `missing` (`null` / none) or `impossible` (777,000 of a
   * 258,000-token window, above any window: a report Baton must not trust). A provider whose answers about the
   * thread come without usage, or with a broken one (issue 8 item 4: usage missing or above the window).
   */
  readonly ackUsage?: (call: { readonly operation: "injectHistory" | "readThread"; readonly call: number }) => "counted" | "missing" | "impossible"
  /**
   * Runs when an `interrupt_in_tool_call` turn stops inside its tool call (the simulation interrupts from here).
   * Without it the turn waits for `interrupt` (tests interrupt from another fiber after `awaitToolCall`).
   */
  readonly onToolCall?: (turn: { readonly nativeRef: string; readonly runId: string }) => Effect.Effect<void>
  /**
   * Runs inside `compactThread` once the native thread is compacted, before the answer returns (the simulator issues
   * a command on the thread from here: a send while the provider compacts). Default none.
   */
  readonly onCompact?: (call: { readonly nativeRef: string }) => Effect.Effect<void>
  /**
   * After `resumeThread`, the next turn re-emits everything the native thread produced before its own output, with
   * the same message ids (seen in the field: a resumed session replaying its history). Default false.
   */
  readonly replayOnResume?: boolean
  /**
   * The adapter's `resumeMayReplay` (default `true`: a session runtime, whose resumed session may replay). `false`
   * plays a stateless model API, whose resume re-reads nothing (Baton then opens no replay window); do not combine
   * it with `replayOnResume`.
   */
  readonly resumeMayReplay?: boolean
  /**
   * How many of this provider's tokens one of Baton's tokens is (default 1): every text a native thread is sent or
   * produces counts `ceil(counted * tokenScale)`. Models a provider whose model tokenizer differs from Baton's
   * (seen in the field: about 1.15, 247k estimated against 270k-295k reported).
   */
  readonly tokenScale?: number
  /**
   * Tokens (the provider's units) every native thread holds from its start: a system prompt and tool definitions
   * that Baton never sees. Counted in the usage reported. Default 0.
   */
  readonly requestOverhead?: number
  /** Whether the window is enforced (see the module doc). Default true; without a window nothing is enforced. */
  readonly enforceWindow?: boolean
  /**
   * How an overflow is signalled: `code` (default) a `ProviderError` with code `overflow` and Anthropic's text;
   * `text` a plain HTTP 400 as an OpenAI-compatible server sends it: code `refused`, the overflow only in the text.
   */
  readonly overflowSignal?: "code" | "text"
  /** Prices per million tokens (see `ProviderAdapterShape.prices`). Default none. */
  readonly prices?: ProviderAdapterShape["prices"]
}

/**
 * One request the provider received, as the provider saw it: the native thread's size in the provider's units had
 * it been accepted (`tokens`), its window, and whether it was accepted; `addedBatonTokens` is what the request
 * added, counted with Baton's own tokenizer (no scale, no overhead). `operation` is what Baton asked (`output`: one
 * item a turn produced, `accepted: false` when it stopped at the window; `compact`: the thread was compacted, by
 * request or automatically; `tokens` is then its size after).
 */
export interface TruthRecord {
  readonly nativeRef: string
  readonly operation: "startTurn" | "injectHistory" | "output" | "compact"
  readonly runId: string | null
  readonly tokens: number
  readonly addedBatonTokens: number
  readonly window: number | null
  readonly accepted: boolean
}

/** What one native thread of the scripted provider received, for tests and the replay's invariant checks. */
export type Received =
  | { readonly type: "turn"; readonly nativeRef: string; readonly runId: string; readonly prompt: string; readonly inlineHistory: string | null }
  | { readonly type: "inject"; readonly nativeRef: string; readonly deliveryIds: ReadonlyArray<string>; readonly rendered: string; readonly itemIds: ReadonlyArray<string> }
  | { readonly type: "compact"; readonly nativeRef: string; readonly usedBefore: number; readonly usedAfter: number }
  /** `continueTurn`: the client's results of the open calls, and the tools offered with them. */
  | {
    readonly type: "tool_results"
    readonly nativeRef: string
    readonly runId: string
    readonly results: ReadonlyArray<{ readonly toolCallId: string; readonly output: string; readonly isError: boolean }>
    readonly tools: ReadonlyArray<string>
  }

interface NativeState {
  used: number
  /** `used` before each recent turn's request (or tool results) was added, oldest first: what stale reports say. */
  readonly usedBefore: Array<number>
  /** Everything its turns produced, in order (what a replaying resume re-emits). */
  readonly produced: Array<ProducedItem>
  /** Resumed with `replayOnResume`: the next turn re-emits `produced` before its own output. */
  replayNext: boolean
  readonly deliveryIds: Array<string>
  readonly runIds: Array<string>
  /** The client tool calls its last turn left open (they wait for `continueTurn`). */
  open: ReadonlyArray<string>
}

/** The adapter plus the test-facing controls of the scripted instance. */
export interface ScriptedProvider extends ProviderAdapterShape {
  readonly received: ReadonlyArray<Received>
  /**
   * A new configuration of the instance (a process restarted with another model or window for it): from now on it
   * advertises `model` and `contextWindow` (`ProviderAdapterShape.model`, `modelContextWindow`), enforces that window
   * and compacts at that threshold; its native threads stay as they are (the provider keeps its sessions). Fields
   * left out keep their value.
   */
  readonly reconfigure: (change: {
    readonly model?: string
    readonly contextWindow?: number | null
    readonly autoCompactThreshold?: number | null
  }) => void
  /** Forces a native thread's usage (e.g. "the thread is at 39,761 of 41,800"). */
  readonly setUsage: (nativeRef: string, usedTokens: number) => void
  readonly usageOf: (nativeRef: string) => number | undefined
  /** Drops every native thread, as a provider whose sessions expired. */
  readonly forgetThreads: () => void
  /** Forgets which deliveries a native thread holds (test control: an injection that never arrived). */
  readonly forgetDeliveries: (nativeRef: string) => void
  /** Waits until an `interrupt_in_tool_call` turn is inside its tool call; returns that turn's native ref and run. */
  readonly awaitToolCall: Effect.Effect<{ readonly nativeRef: string; readonly runId: string }>
  /** Every request with its true size and outcome, in arrival order (see `TruthRecord`). */
  readonly truth: ReadonlyArray<TruthRecord>
  /** The provider's true tokens per Baton token (`ScriptedConfig.tokenScale`, default 1). */
  readonly tokenScale: number
  /** How many items this instance's turns produced, in all (a resumed thread's replay not counted again). */
  readonly producedItems: () => number
  /**
   * Every turn that began by re-emitting its resumed native thread's history (`replayOnResume`), with how many items
   * it re-emitted: the only output Baton may skip as a replay (the simulator's oracle reads it).
   */
  readonly replays: ReadonlyArray<{ readonly nativeRef: string; readonly runId: string; readonly items: number }>
}

const defaultReply: ScriptedResponse = {
  items: [{
    kind: "assistant_message",
    text: "Done.",
    toolCallId: null,
    toolName: null,
    messageId: null,
    isError: false,
    toolCallState: null
  }]
}

/** What the scripted provider places in its native thread to close a tool call its turn was interrupted in. */
const interruptedToolResult = "[Request interrupted by user for tool use]"

/**
 * Builds a scripted instance. `counter` counts tokens of everything a native thread is sent or produces (scaled by
 * `config.tokenScale`).
 * Native refs are `<instance>-n<k>`, numbered per instance in creation order (deterministic).
 */
export const make = (
  config: ScriptedConfig,
  script: Script,
  counter: TokenCounter.TokenCounterShape
): ScriptedProvider => {
  const threads = new Map<string, NativeState>()
  const received: Array<Received> = []
  const truth: Array<TruthRecord> = []
  const replays: Array<{ readonly nativeRef: string; readonly runId: string; readonly items: number }> = []
  let producedItems = 0
  const overhead = config.requestOverhead ?? 0
  // The instance's model, window and threshold: as configured, until `reconfigure` (a new configuration between
  // restarts) changes them.
  let model = config.model ?? `scripted-${config.instance}`
  let contextWindow = config.contextWindow
  let autoCompactThreshold = config.autoCompactThreshold
  let enforced = config.enforceWindow !== false ? contextWindow : null
  const calls = { startTurn: 0, injectHistory: 0, interrupt: 0 }
  let created = 0
  let failNextTurn = false
  // Turns stopped inside a tool call, by native ref: completing the Deferred is the interrupt arriving.
  const inToolCall = new Map<string, Deferred.Deferred<void>>()
  let toolCallReached = Deferred.unsafeMake<{ readonly nativeRef: string; readonly runId: string }>(FiberId.none)
  const summaryTokens = config.summaryTokens ?? 2_000
  const instance = config.instance
  const tokenScale = config.tokenScale ?? 1
  const count = (text: string) => tokenScale === 1 ? counter.count(text) : Math.ceil(counter.count(text) * tokenScale)

  const fail = (operation: string, code: ProviderErrorCode, reason: string, retryable = false) =>
    Effect.fail(new ProviderError({ provider: instance, operation, code, reason, retryable }))

  const usageOf = (state: NativeState): ContextUsage => ({
    usedTokens: state.used,
    ...(contextWindow === null ? {} : { maxTokens: contextWindow }),
    ...(autoCompactThreshold === null ? {} : { autoCompactThreshold })
  })
  let ackCalls = 0
  /** The usage of an acknowledgement or a read-back (`ScriptedConfig.ackUsage`). */
  const ackUsageOf = (operation: "injectHistory" | "readThread", state: NativeState): ContextUsage | null => {
    const kind = config.ackUsage?.({ operation, call: ++ackCalls }) ?? "counted"
    return kind === "counted" ? usageOf(state) : kind === "missing" ? null : { usedTokens: 777_000, maxTokens: 258_000 }
  }

  /** Keeps `state.used` before a request is added (the last 8), for stale reports (`ScriptedResponse.staleUsage`). */
  const remember = (state: NativeState) => {
    state.usedBefore.push(state.used)
    if (state.usedBefore.length > 8) state.usedBefore.shift()
  }

  /**
   * Native auto-compaction at the configured threshold; without one, at the window (a provider compacts, or a
   * harness like Claude Code does, rather than let a native thread grow past its model's window).
   */
  let compactAt = autoCompactThreshold ?? contextWindow
  const autoCompact = (state: NativeState, nativeRef: string): ReadonlyArray<TurnEvent> => {
    if (compactAt === null || state.used < compactAt) return []
    state.used = Math.min(state.used, Math.max(summaryTokens, overhead))
    truth.push({ nativeRef, operation: "compact", runId: null, tokens: state.used, addedBatonTokens: 0, window: contextWindow, accepted: true })
    // Told, as Codex tells its `contextCompaction` item.
    return [TurnEvent.native_compacted()]
  }

  /**
   * The window check of one request that would take `state` to `tokens`: recorded in `truth`; fails as an overflow
   * (in the instance's signal style) when it passes the enforced window.
   */
  const admit = (
    operation: "startTurn" | "injectHistory",
    nativeRef: string,
    runId: string | null,
    tokens: number,
    addedBatonTokens: number
  ): Effect.Effect<void, ProviderError> => {
    const accepted = enforced === null || tokens <= enforced
    truth.push({ nativeRef, operation, runId, tokens, addedBatonTokens, window: contextWindow, accepted })
    if (accepted) return Effect.void
    return config.overflowSignal === "text"
      ? fail(operation, "refused", `HTTP 400: This model's maximum context length is ${enforced} tokens. However, your messages resulted in ${tokens} tokens. Please reduce the length of the messages.`)
      : fail(operation, "overflow", `prompt is too long: ${tokens} tokens > ${enforced} maximum`)
  }

  const lookup = (operation: string, nativeRef: string) => {
    const state = threads.get(nativeRef)
    return state === undefined
      ? fail(operation, "thread_not_found", `native thread ${nativeRef} does not exist on ${instance}`)
      : Effect.succeed(state)
  }

  /**
   * Emits `item` as produced by `state`'s native thread: it counts in the thread's usage and in what it replays.
   * `null` when it does not fit the enforced window: the model stops there (Anthropic's stop reason
   * `model_context_window_exceeded`) and the turn ends with what it produced so far.
   */
  const produce = (state: NativeState, nativeRef: string, runId: string, item: ProducedItem) =>
    Effect.sync(() => {
      const tokens = state.used + count(item.text)
      if (enforced !== null && tokens > enforced) {
        // (What it would have produced of that item is not modelled: the thread holds exactly what Baton saw.)
        truth.push({ nativeRef, operation: "output", runId, tokens, addedBatonTokens: counter.count(item.text), window: contextWindow, accepted: false })
        return null
      }
      // Recorded accepted too: what a turn's output added is growth Baton saw (it records the item), which the
      // oracle counts on top of a size a rejection proved (`ProviderTruthChecks`).
      truth.push({ nativeRef, operation: "output", runId, tokens, addedBatonTokens: counter.count(item.text), window: contextWindow, accepted: true })
      state.used = tokens
      state.produced.push(item)
      producedItems++
      return TurnEvent.item_produced({ item })
    })

  /**
   * The end of a turn: native auto-compaction (told with `native_compacted`), the usage report (unless the script
   * omits it), `turn_ended` (with the client tool calls `pending` left open, when not interrupted).
   */
  const endTurn = (state: NativeState, nativeRef: string, response: ScriptedResponse, interrupted: boolean, pending: ReadonlyArray<string> = []) =>
    Effect.sync((): ReadonlyArray<TurnEvent> => {
      state.open = interrupted ? [] : pending
      const ended = TurnEvent.turn_ended({ interrupted, ...(interrupted || pending.length === 0 ? {} : { pendingToolCalls: pending }) })
      if (response.usage === null) return [...autoCompact(state, nativeRef), ended]
      // A scripted report is reported verbatim (even an impossible one); the thread's own count follows a possible
      // one (the provider's true state), never one past the enforced window.
      if (response.usage !== undefined && (enforced === null || response.usage.usedTokens <= enforced)) {
        state.used = response.usage.usedTokens
      }
      // A stale report's hidden growth is the provider's true state too (never past the enforced window).
      const leaving = response.usage === undefined ? response.staleUsage?.fillLeaving : undefined
      if (leaving !== undefined && compactAt !== null) state.used = Math.max(state.used, compactAt - Math.max(1, leaving))
      const compacted = autoCompact(state, nativeRef)
      const counted = usageOf(state)
      const lag = response.staleUsage?.lag
      const before = lag === undefined ? undefined : state.usedBefore[Math.max(0, state.usedBefore.length - lag)]
      const stale = response.usage === undefined && before !== undefined && before < state.used
        ? { ...counted, usedTokens: before }
        : counted
      return [...compacted, TurnEvent.usage_reported({ usage: response.usage ?? stale, tokens: response.tokens }), ended]
    })

  /**
   * The turn after the prompt was read, item by item: the replay of a resumed thread (if due), then the response's
   * items, holding at `response.hold`, failing at a `fail_after_items` fault, stopping inside the first tool call at
   * `interrupt_in_tool_call`; then the end of the turn.
   */
  const playTurn = (
    input: { readonly nativeRef: string; readonly runId: string; readonly tools?: StartTurnInput["tools"] },
    state: NativeState,
    response: ScriptedResponse,
    fault: Fault | null
  ) => {
    // Calls of the client's tools that the response does not answer itself end the turn waiting for their results.
    const clientTools = new Set((input.tools ?? []).map((t) => t.name))
    const pending = response.items.filter((i) =>
      i.kind === "tool_call" && i.toolCallId !== null && i.toolName !== null && clientTools.has(i.toolName) &&
      !response.items.some((r) => r.kind === "tool_result" && r.toolCallId === i.toolCallId)
    ).map((i) => i.toolCallId!)
    const replayed = state.replayNext ? [...state.produced] : []
    state.replayNext = false
    if (replayed.length > 0) replays.push({ nativeRef: input.nativeRef, runId: input.runId, items: replayed.length })
    const failAt = typeof fault === "object" && fault !== null ? Math.min(fault.items, response.items.length) : null
    const callAt = fault === "interrupt_in_tool_call" ? response.items.findIndex((i) => i.kind === "tool_call") : -1
    let stopped = false
    // Position k (0..n) is the moment before the response's k-th item (n: after the last one).
    const at = (k: number): Effect.Effect<ReadonlyArray<TurnEvent>, ProviderError> =>
      Effect.gen(function*() {
        if (stopped) return []
        if (response.hold !== undefined && response.hold.afterItems === k) yield* Deferred.await(response.hold.gate)
        if (failAt === k && typeof fault === "object" && fault !== null) {
          return yield* fail("startTurn", fault.code, `the turn failed after ${k} item(s): ${
            fault.code === "overflow" ? "context_length_exceeded while producing output" : fault.code === "interrupted" ? "the turn was interrupted" : "the stream was disconnected"
          }`, fault.code === "unavailable")
        }
        if (k === callAt + 1 && callAt >= 0) {
          const interrupted = Deferred.unsafeMake<void>(FiberId.none)
          inToolCall.set(input.nativeRef, interrupted)
          const turn = { nativeRef: input.nativeRef, runId: input.runId }
          Deferred.unsafeDone(toolCallReached, Effect.succeed(turn))
          if (config.onToolCall !== undefined) yield* config.onToolCall(turn)
          stopped = config.onToolCall === undefined || (yield* Deferred.isDone(interrupted))
          if (stopped) yield* Deferred.await(interrupted)
          inToolCall.delete(input.nativeRef)
          if (stopped) {
            // The provider closes the open call in its native thread (as Claude Code does): counted with the output.
            state.used += count(interruptedToolResult)
            return yield* endTurn(state, input.nativeRef, response, true)
          }
        }
        if (k === response.items.length) return yield* endTurn(state, input.nativeRef, response, false, pending)
        const produced = yield* produce(state, input.nativeRef, input.runId, response.items[k]!)
        if (produced !== null) return [produced]
        stopped = true
        return yield* endTurn(state, input.nativeRef, response, false)
      })
    return Stream.concat(
      // A replay re-emits what the thread already holds: it is not counted again.
      Stream.fromIterable(replayed.map((item) => TurnEvent.item_produced({ item }))),
      Stream.range(0, response.items.length).pipe(Stream.mapEffect(at), Stream.flattenIterables)
    )
  }

  const startTurn = (input: StartTurnInput): Stream.Stream<TurnEvent, ProviderError> =>
    Stream.unwrap(Effect.gen(function*() {
      calls.startTurn++
      const state = yield* lookup("startTurn", input.nativeRef)
      const fault = config.faults?.({ operation: "startTurn", call: calls.startTurn, runId: input.runId }) ?? null
      if (failNextTurn) {
        failNextTurn = false
        return yield* fail("startTurn", "unavailable", "turn start failed after a successful injection", true)
      }
      if (fault === "refuse") return yield* fail("startTurn", "refused", "the provider refused the request before reading it", true)
      if (fault === "interrupt_before_start") return yield* fail("startTurn", "interrupted", "interrupted before the provider started")
      if (fault === "overflow") {
        return yield* fail("startTurn", "overflow", "the request exceeds the model's context window (context_length_exceeded)")
      }
      const requestTokens = state.used + count(input.prompt) + (input.inlineHistory === null ? 0 : count(input.inlineHistory))
      const added = counter.count(input.prompt) + (input.inlineHistory === null ? 0 : counter.count(input.inlineHistory))
      yield* admit("startTurn", input.nativeRef, input.runId, requestTokens, added)
      received.push({ type: "turn", nativeRef: input.nativeRef, runId: input.runId, prompt: input.prompt, inlineHistory: input.inlineHistory })
      state.runIds.push(input.runId)
      const response = script.next() ?? defaultReply
      remember(state)
      state.used = requestTokens
      if (fault === "timeout") return yield* fail("startTurn", "timeout", "no answer from the provider before its deadline", true)
      if (fault === "hang") return yield* Effect.never
      return playTurn(input, state, response, fault)
    }))

  /**
   * Continues a turn that ended with client tool calls open: the results are added to the native thread (counted,
   * and checked against the window like a turn's request), then the next scripted response plays. Fails with
   * `protocol` when the native thread has no open call, `thread_not_found` for an unknown ref. Faults do not apply.
   */
  const continueTurn = (input: ContinueTurnInput): Stream.Stream<TurnEvent, ProviderError> =>
    Stream.unwrap(Effect.gen(function*() {
      const state = yield* lookup("continueTurn", input.nativeRef)
      if (state.open.length === 0) return yield* fail("continueTurn", "protocol", `native thread ${input.nativeRef} has no open tool call to answer`)
      const results = state.open.map((id) =>
        input.toolResults.find((r) => r.toolCallId === id) ?? { toolCallId: id, output: "[no result]", isError: true }
      )
      const text = results.map((r) => r.output).join("\n")
      const requestTokens = state.used + count(text)
      yield* admit("startTurn", input.nativeRef, input.runId, requestTokens, counter.count(text))
      received.push({ type: "tool_results", nativeRef: input.nativeRef, runId: input.runId, results, tools: (input.tools ?? []).map((t) => t.name) })
      remember(state)
      state.used = requestTokens
      state.open = []
      const response = script.next() ?? defaultReply
      return playTurn(input, state, response, null)
    }))

  const adapter: ScriptedProvider = {
    instance,
    // Read live (see `live` below): a reconfigured instance advertises its new model and window.
    model,
    modelContextWindow: contextWindow,
    reconfigure: (change) => {
      if (change.model !== undefined) model = change.model
      if (change.contextWindow !== undefined) contextWindow = change.contextWindow
      if (change.autoCompactThreshold !== undefined) autoCompactThreshold = change.autoCompactThreshold
      enforced = config.enforceWindow !== false ? contextWindow : null
      compactAt = autoCompactThreshold ?? contextWindow
    },
    ...(config.prices === undefined ? {} : { prices: config.prices }),
    startThread: () =>
      Effect.sync(() => {
        created++
        const nativeRef = `${instance}-n${created}`
        threads.set(nativeRef, { used: overhead, usedBefore: [], deliveryIds: [], runIds: [], produced: [], replayNext: false, open: [] })
        return { nativeRef }
      }),
    resumeThread: (nativeRef) =>
      Effect.map(lookup("resumeThread", nativeRef), (state) => {
        if (config.replayOnResume === true) state.replayNext = true
      }),
    // By default it plays a session runtime (with `replayOnResume`, one that replays): the replay guard is on for it;
    // `resumeMayReplay: false` plays a model API (the simulator's `plain` provider with its `modelApi` feature).
    resumeMayReplay: config.resumeMayReplay ?? true,
    startTurn,
    continueTurn,
    interrupt: (nativeRef) =>
      Effect.gen(function*() {
        calls.interrupt++
        yield* lookup("interrupt", nativeRef)
        const fault = config.faults?.({ operation: "interrupt", call: calls.interrupt, runId: "" }) ?? null
        if (fault === "ignore_interrupt") return yield* Effect.never
        const waiting = inToolCall.get(nativeRef)
        if (waiting !== undefined) yield* Deferred.succeed(waiting, undefined)
      }),
    compactThread: (nativeRef): Effect.Effect<CompactResult, ProviderError> =>
      Effect.flatMap(lookup("compactThread", nativeRef), (state) => {
        const before = usageOf(state)
        state.used = Math.min(state.used, Math.max(summaryTokens, overhead))
        truth.push({ nativeRef, operation: "compact", runId: null, tokens: state.used, addedBatonTokens: 0, window: contextWindow, accepted: true })
        received.push({ type: "compact", nativeRef, usedBefore: before.usedTokens, usedAfter: state.used })
        const after = usageOf(state)
        return Effect.as(config.onCompact?.({ nativeRef }) ?? Effect.void, { usageBefore: before, usageAfter: after })
      }),
    readThread: (nativeRef): Effect.Effect<ReadThreadResult, ProviderError> =>
      Effect.map(lookup("readThread", nativeRef), (state) => ({
        deliveryIds: [...state.deliveryIds],
        runIds: [...state.runIds],
        usage: ackUsageOf("readThread", state)
      })),
    received,
    setUsage: (nativeRef, usedTokens) => {
      const state = threads.get(nativeRef)
      if (state !== undefined) state.used = usedTokens
    },
    usageOf: (nativeRef) => threads.get(nativeRef)?.used,
    forgetThreads: () => threads.clear(),
    forgetDeliveries: (nativeRef) => void threads.get(nativeRef)?.deliveryIds.splice(0),
    truth,
    producedItems: () => producedItems,
    replays,
    tokenScale,
    awaitToolCall: Effect.suspend(() => Deferred.await(toolCallReached)).pipe(
      Effect.tap(() => Effect.sync(() => void (toolCallReached = Deferred.unsafeMake(FiberId.none))))
    )
  }
  /** `adapter` with `model` and `modelContextWindow` read from the instance's current configuration (`reconfigure`). */
  const live = (adapter: ScriptedProvider): ScriptedProvider =>
    Object.defineProperties(adapter, {
      model: { get: () => model, enumerable: true, configurable: true },
      modelContextWindow: { get: () => contextWindow, enumerable: true, configurable: true }
    })
  const { readThread: _readThread, ...unreadable } = adapter
  const readable: ScriptedProvider = config.readThread === false ? unreadable : adapter
  if (!config.injectHistory) return live(readable)
  return live({
    ...readable,
    injectHistory: (input) =>
      Effect.gen(function*() {
        calls.injectHistory++
        const state = yield* lookup("injectHistory", input.nativeRef)
        const fault = config.faults?.({ operation: "injectHistory", call: calls.injectHistory, runId: input.deliveryIds.join(",") }) ?? null
        if (fault === "drop_injection") {
          return yield* fail("injectHistory", "ack_lost", "the injection's acknowledgement was lost", true)
        }
        const tokens = state.used + count(input.rendered)
        yield* admit("injectHistory", input.nativeRef, null, tokens, counter.count(input.rendered))
        state.used = tokens
        state.deliveryIds.push(...input.deliveryIds)
        received.push({ type: "inject", nativeRef: input.nativeRef, deliveryIds: input.deliveryIds, rendered: input.rendered, itemIds: input.itemIds })
        if (fault === "lose_injection_ack") {
          return yield* fail("injectHistory", "ack_lost", "the injection reached the provider but its acknowledgement was lost", true)
        }
        if (fault === "fail_after_injection") failNextTurn = true
        return { usage: ackUsageOf("injectHistory", state) }
      })
  })
}
