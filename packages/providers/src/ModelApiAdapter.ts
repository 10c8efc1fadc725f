/**
 * ModelApiAdapter: a `ProviderAdapter` for a stateless model API (Anthropic Messages, OpenAI Responses, Chat
 * Completions), over `@effect/platform`'s `HttpClient` and a wire dialect.
 *
 * The native thread is the message list Baton keeps for the lane in the `NativeMessageLog` (durable: a request after a
 * restart is byte-identical to the one without it). Each request renders the stored entries verbatim, so request n+1
 * extends request n byte for byte (Anthropic cache breakpoints aside, see `AnthropicMessages`). What a request carries
 * (the user's turn, tool results) is appended once the provider accepted it (a refused request leaves the native
 * thread unchanged), the model's output once its answer is complete; a mid-stream failure or an interrupt appends what
 * was completed, so the record and the native thread agree.
 *
 * Tools: the client's tools end the turn with `pendingToolCalls` (`continueTurn` sends their results); Baton's own
 * (`localTools`, e.g. `thread_read`) are executed here and answered on the next request of the same turn. Open calls
 * a new turn finds unanswered are closed with error results first, so the history stays well-formed.
 *
 * Retries: a 429, 529 or 5xx answer (or no answer at all) before the stream starts is retried with exponential
 * backoff and jitter, honouring `retry-after`/`retry-after-ms`; nothing is retried once the stream started.
 * It does not own: budgets, handoffs, the durable record of items (the orchestrator records the items it streams).
 */
import { type ContextUsage, ProviderError, type ProviderInstance } from "@baton/contracts"
import { ToolResultOffload } from "@baton/context"
import { type HttpClient, HttpClientRequest, type HttpClientResponse } from "@effect/platform"
import { Clock, Deferred, Duration, Effect, Either, Option, Random, Redacted, Schema, Stream } from "effect"
import type {
  ContinueTurnInput,
  LocalTool,
  LocalToolAnswer,
  OffloadControl,
  OffloadReport,
  ProducedItem,
  RecordedResults,
  ProviderAdapterShape,
  ReadThreadResult,
  StartTurnInput,
  TextDelta,
  ToolDefinition,
  ToolResultInput,
  ToolResultOffloadPreview,
  ToolResultOffloadUndo,
  TurnTokens
} from "./ProviderAdapter.js"
import { TurnEvent } from "./ProviderAdapter.js"
import type { ModelProviderConfig } from "./ProviderConfig.js"
import type { NativeEntry, NativeEntryKind, NativeMessageLogShape, OffloadBody } from "./NativeMessageLog.js"
import {
  type Dialect,
  isWireFailure,
  type RequestOutcome,
  type StreamParser,
  type ToolCall,
  type WireFailure,
  wireFailure
} from "./internal/Dialect.js"
import { makeDecoder, type SseMessage } from "./internal/Sse.js"

/** What the adapter is built from (the app reads the key with `ProviderConfig.apiKey`). */
export interface ModelApiOptions {
  readonly instance: ProviderInstance
  readonly config: ModelProviderConfig
  readonly apiKey: Option.Option<Redacted.Redacted>
  readonly log: NativeMessageLogShape
  readonly http: HttpClient.HttpClient
  /** First retry delay in milliseconds (default 500); each retry doubles it, jittered by ±20%. */
  readonly retryBaseMillis?: number
  /** A fresh native ref (default `<instance>-<random UUID>`). */
  readonly newRef?: () => string
  /** Tool-result offload of the native threads' message lists (`OffloadOptions`); off when absent. */
  readonly offload?: OffloadOptions
}

/**
 * Tool-result offload on a stateless API's message list (issue 11 item 3(a)). Before each request the adapter asks
 * `ToolResultOffload.decide` which answered tool units to stub; a flush is stored as one `offload` entry in the
 * native thread's log (durable: a restart renders the same stubs), so the request prefix changes once, at the first
 * stubbed entry, and later requests extend it again. A stub replaces a unit's `tool_results` entry with results of
 * the same calls (so the wire pairing holds), each one line: the tool, short arguments, characters released, and the
 * ref `tool:<call id>` that `thread_read` reads back in full. The `output` entry holding the calls stays.
 *
 * - `count`: the token counter (the entries' wire JSON is counted).
 * - `enabled`: the instance's on/off (default true); a thread's control (`OffloadControl.enabled`) overrides it.
 * - `settings`: the policy's settings (default `ToolResultOffload.defaults`); a thread's control overrides fields.
 * - `ttlMs`: the prompt cache's time to live (default 5 minutes, Anthropic's; `null`: never expires).
 * - `onFlush`: told of every flush (the `context.offloaded` event's data: refs, tokens before and after).
 * Read and write multipliers come from the instance's `prices` (`ToolResultOffload.pricingOf`: `cacheRead / input`,
 * `cacheWrite / input`, a write price of 0 as 1: no separate write charge).
 */
export interface OffloadOptions {
  readonly count: (text: string) => number
  readonly enabled?: boolean
  readonly settings?: ToolResultOffload.Settings
  readonly ttlMs?: number | null
  readonly onFlush?: (flush: OffloadFlush) => void
}

/** One flush on a native thread: the stubbed entries' seqs, the refs named, the decision (tier, tokens, costs). */
export interface OffloadFlush {
  readonly nativeRef: string
  readonly entrySeqs: ReadonlyArray<number>
  readonly refs: ReadonlyArray<string>
  readonly decision: ToolResultOffload.Decision
}

/** A flush as the `context_offloaded` turn event reports it. */
export const offloadReport = (instance: ProviderInstance, flush: OffloadFlush): OffloadReport => ({
  providerInstance: instance,
  nativeRef: flush.nativeRef,
  units: flush.decision.units.length,
  refs: flush.refs,
  entrySeqs: flush.entrySeqs,
  tier: flush.decision.tier,
  tokensBefore: flush.decision.tokensBefore,
  tokensAfter: flush.decision.tokensAfter
})

/** A preview with nothing to stub (offload off). */
const emptyPreview = (nativeRef: string, stubbedEntries: number): ToolResultOffloadPreview => ({
  nativeRef,
  enabled: false,
  tier: "none",
  reason: "",
  units: [],
  entrySeqs: [],
  tokensBefore: 0,
  tokensAfter: 0,
  rewriteCostTokens: 0,
  rewriteCostUsd: 0,
  expectedSavingsTokens: 0,
  breakEvenRequests: null,
  stubbedEntries
})

/** The in-process copy of a native thread's entries (the log is the truth; this is refreshed from it). */
interface Lane {
  readonly entries: Array<NativeEntry>
  /** What requests carry: the entries without `offload` ones, each replaced body swapped for its stub. */
  view: Array<NativeEntry>
  /** Seqs of `tool_results` entries replaced by stubs. */
  stubbed: Set<number>
  /** Seqs of `tool_results` entries whose stubs were undone: their units stay verbatim from then on. */
  kept: Set<number>
  /** The tools the last request offered (what a preview counts as the request's fixed part). */
  lastTools: ReadonlyArray<ToolDefinition>
  /** Tokens of each view entry by seq (a stubbed entry is counted again under its stub). */
  readonly tokens: Map<number, number>
  /** When the last request was sent (ms since the epoch), `null` before one in this process. */
  lastRequestAt: number | null
  /** Calls of the last `output` not yet answered. */
  open: Array<ToolCall>
  /** The parser of the request in flight: what it completed is recorded if the turn stops early. */
  current: StreamParser | null
  /** Each view entry's body as UTF-8, encoded once when first sent (index = view index; cleared by a flush). */
  readonly encoded: Array<Buffer | undefined>
  /**
   * Results of Baton's own calls (`thread_read`) made beside the client's in the last output: they join the client's
   * results in one `tool_results` entry (a provider wants every result of a round in the message right after it).
   * In memory: after a restart such a call is closed as unanswered.
   */
  heldLocal: Array<ToolResultInput>
  /** The thread's offload control for the turn in flight (set by `startTurn`/`continueTurn`). */
  control: OffloadControl | undefined
  /**
   * Tool calls whose units the model asked to offload (`offload_context`), applied at the next request. In memory:
   * a request not yet applied when the process stops is forgotten (the units stay verbatim; nothing is lost).
   */
  readonly requested: Set<string>
}

/**
 * Baton's `offload_context` tool (issue 11 item 4), offered on model-API instances whose tool-result offload is on:
 * the model names tool calls whose output it has finished with (or `all`), and from its next step on their results
 * are one-line stubs with the ref `thread_read` reads back. The schema is a fixed object (the same bytes on every
 * request, so the prompt cache holds).
 */
export const offloadContextTool: ToolDefinition = {
  name: "offload_context",
  description: "Free context: replace the full output of tool calls you have finished with by one-line stubs, from " +
    "your next step on. Each stub keeps a ref (tool:<call id>) that thread_read reads back in full, so nothing is " +
    "lost. Pass the ids of those tool calls, or all: true for every finished tool output except the newest few.",
  inputSchema: {
    type: "object",
    properties: {
      tool_call_ids: { type: "array", items: { type: "string" }, description: "Ids of your earlier tool calls whose results you no longer need verbatim." },
      all: { type: "boolean", description: "Every finished tool output except the newest few." }
    },
    additionalProperties: false
  }
}

/**
 * The characters of each result's output in a `tool_results` entry, by call id: any object of the entry's JSON naming
 * a call (`tool_use_id` in Anthropic's, `call_id` in Responses', `tool_call_id` in Chat's) with its `content` or
 * `output` (a string, or text blocks). The entry is one JSON value (Anthropic's message) or several joined by commas
 * (Chat's and Responses' items). Empty when it is neither (the caller then shares the entry's length).
 */
export const resultChars = (body: string): ReadonlyMap<string, number> => {
  const out = new Map<string, number>()
  const textOf = (v: unknown): number =>
    typeof v === "string" ? v.length : Array.isArray(v)
      ? v.reduce((n: number, b: unknown) => n + (typeof b === "object" && b !== null && typeof (b as { text?: unknown }).text === "string" ? (b as { text: string }).text.length : 0), 0)
      : 0
  const walk = (v: unknown): void => {
    if (Array.isArray(v)) return v.forEach(walk)
    if (typeof v !== "object" || v === null) return
    const o = v as Record<string, unknown>
    const id = o["tool_use_id"] ?? o["call_id"] ?? o["tool_call_id"]
    if (typeof id === "string" && ("content" in o || "output" in o)) out.set(id, textOf(o["content"] ?? o["output"]))
    else for (const child of Object.values(o)) walk(child)
  }
  for (const text of [body, `[${body}]`]) {
    try {
      walk(JSON.parse(text))
      break
    } catch {
      // Chat's and Responses' entries are several messages joined by commas: read as a list next; else no sizes
    }
  }
  return out
}

/**
 * The most requests one turn makes by itself, answering only tools Baton answers (its own, or unknown ones), before
 * those calls are answered with a request to finish (`tooManyRounds`); `batonRoundsGrace` more and the turn fails.
 * 64: a long `thread_read` paging (the tests page 40 rounds) with room to spare.
 */
export const maxBatonRounds = 64
const batonRoundsGrace = 4
const tooManyRounds = (rounds: number) =>
  `[not run: this turn already made ${rounds} requests for tools Baton answers; answer with what you have now]`

/** The longest `retry-after` a turn waits out (5 minutes); a provider asking for more fails the request. */
export const maxRetryAfterMillis = 5 * 60_000

/** `offload_context`'s arguments as the model writes them. */
const OffloadContextArguments = Schema.parseJson(Schema.Struct({
  tool_call_ids: Schema.optional(Schema.Array(Schema.String)),
  all: Schema.optional(Schema.Boolean)
}).annotations({ parseOptions: { onExcessProperty: "error" } }))

/** The most ids `offload_context` names in its answer, of those it takes and of those it refuses (the rest are counted): a tool meant to free context must not flood it. */
const maxRefusalsNamed = 10

/** The answer closing a call nobody answered (a new turn started, or the wait was abandoned). */
export const unansweredResult = "[no result: the tool call was not answered before the conversation went on]"

const sumTokens = (a: TurnTokens | null, b: TurnTokens | null): TurnTokens | null =>
  a === null ? b : b === null ? a : {
    inputTokens: a.inputTokens + b.inputTokens,
    cacheWriteTokens: a.cacheWriteTokens + b.cacheWriteTokens,
    cacheReadTokens: a.cacheReadTokens + b.cacheReadTokens,
    outputTokens: a.outputTokens + b.outputTokens
  }

/** An HTTP answer that failed before its stream started, with the delay the server asked for (milliseconds). */
interface HttpFailure {
  readonly failure: WireFailure
  readonly retryAfterMillis: number | null
  readonly httpStatus: number | null
}

/**
 * The delay a `retry-after-ms` (OpenAI, milliseconds) or `retry-after` (seconds, or an HTTP date) header asks for,
 * in milliseconds; `null` without one. Source: RFC 9110 §10.2.3.
 */
export const retryAfterMillis = (headers: Readonly<Record<string, string | undefined>>, now: number): number | null => {
  const ms = headers["retry-after-ms"]
  if (ms !== undefined && /^\d+(\.\d+)?$/.test(ms.trim())) return Number(ms.trim())
  const after = headers["retry-after"]
  if (after === undefined) return null
  if (/^\d+(\.\d+)?$/.test(after.trim())) return Number(after.trim()) * 1000
  const date = Date.parse(after)
  return Number.isNaN(date) ? null : Math.max(0, date - now)
}

/**
 * `text` with every occurrence of the instance's key replaced by `<redacted>`: an upstream error body may echo the
 * key it was sent (a proxy's 401, "invalid x-api-key sk-…"), and error reasons reach run records, events and API
 * answers. Keys shorter than 8 characters are not searched for (they would match ordinary text).
 */
export const redactKey = (text: string, apiKey: Option.Option<Redacted.Redacted>): string => {
  if (Option.isNone(apiKey)) return text
  const key = Redacted.value(apiKey.value)
  return key.length >= 8 && text.includes(key) ? text.replaceAll(key, "<redacted>") : text
}

/** A wire failure as the boundary's `ProviderError` of `instance`'s `operation`. */
export const failure = (instance: string, operation: string, f: WireFailure, httpStatus?: number | undefined) =>
  new ProviderError({
    provider: instance,
    operation,
    code: f.code,
    reason: f.reason,
    retryable: f.retryable,
    ...(f.requestedTokens === undefined ? {} : { requestedTokens: f.requestedTokens }),
    ...(f.limitTokens === undefined ? {} : { limitTokens: f.limitTokens }),
    ...(httpStatus === undefined ? {} : { httpStatus })
  })

const comma = Buffer.from(",", "utf8")

/** Statuses retried: rate limited (429), Anthropic overloaded (529), and server errors (500-504). */
const retryableStatus = (status: number) => status === 429 || status === 529 || (status >= 500 && status <= 504)

export const make = (dialect: Dialect, options: ModelApiOptions): ProviderAdapterShape => {
  const { config, instance, log } = options
  const lanes = new Map<string, Lane>()
  const inFlight = new Map<string, Deferred.Deferred<void>>()
  const url = config.baseUrl.replace(/\/+$/, "") + dialect.path
  const headers = {
    "content-type": "application/json",
    accept: "text/event-stream",
    ...dialect.authHeaders(Option.match(options.apiKey, { onNone: () => null, onSome: Redacted.value }))
  }
  const baseMillis = options.retryBaseMillis ?? 500
  const maxRetries = config.maxRetries ?? 4
  const newRef = options.newRef ?? (() => `${instance}-${crypto.randomUUID()}`)

  const providerError = (operation: string, f: WireFailure, httpStatus: number | null = null) =>
    failure(instance, operation, { ...f, reason: redactKey(f.reason, options.apiKey) }, httpStatus ?? undefined)

  const storageError = (operation: string) => (e: { readonly message: string }) =>
    providerError(operation, wireFailure("unavailable", `could not keep the native thread: ${e.message}`, true))

  /** The lane of `nativeRef`, brought up to date with the log (another process may have appended to it). */
  const lane = (operation: string, nativeRef: string) =>
    Effect.gen(function*() {
      const cached = lanes.get(nativeRef)
      const last = cached === undefined ? 0 : cached.entries.length
      const stored = yield* log.lastSeq(nativeRef)
      if (cached !== undefined && stored === last) return cached
      const fresh = yield* log.load(nativeRef, last)
      const next: Lane = cached ?? {
        entries: [],
        view: [],
        stubbed: new Set(),
        kept: new Set(),
        lastTools: [],
        tokens: new Map(),
        lastRequestAt: null,
        open: [],
        current: null,
        encoded: [],
        heldLocal: [],
        control: undefined,
        requested: new Set()
      }
      join(next, fresh)
      lanes.set(nativeRef, next)
      return next
    }).pipe(Effect.mapError(storageError(operation)))

  /**
   * Adds stored `entries` to the lane, each once: an entry whose `seq` the lane already holds is skipped. Two fibers
   * can hand the lane the same entries: an append records what it stored after the insert, and a read of the lane in
   * between (a fork's read-back, a preview) loads them from the log first. Taking them twice put an injection's
   * history twice into every later request, and the next append's seq skipped one (the log then differed from what
   * was sent).
   */
  const join = (state: Lane, entries: ReadonlyArray<NativeEntry>) => {
    const added = entries.filter((e) => e.seq > state.entries.length)
    if (added.length === 0) return
    state.entries.push(...added)
    refreshView(state, added)
  }

  /**
   * Brings `state.view` up to date after `added` joined `state.entries`: appended as they are, or, when one of them is
   * an `offload`, rebuilt with every replacement applied (and the encoded bodies dropped: their indices moved).
   */
  const refreshView = (state: Lane, added: ReadonlyArray<NativeEntry>) => {
    if (added.some((e) => e.kind === "offload")) {
      // Offload entries in order: a flush replaces bodies, an undo restores them (and keeps those units verbatim).
      const replaced = new Map<number, string>()
      const kept = new Set<number>()
      for (const e of state.entries) {
        if (e.kind !== "offload") continue
        const body = JSON.parse(e.body) as OffloadBody
        for (const r of body.replaces) replaced.set(r.seq, r.body)
        for (const seq of body.restores ?? []) {
          replaced.delete(seq)
          kept.add(seq)
        }
      }
      state.view = state.entries.filter((e) => e.kind !== "offload").map((e) => {
        const body = replaced.get(e.seq)
        return body === undefined ? e : { ...e, body }
      })
      const stubbed = new Set(replaced.keys())
      // A body that changed (stubbed now, or restored) is counted again.
      for (const seq of stubbed) if (!state.stubbed.has(seq)) state.tokens.delete(seq)
      for (const seq of state.stubbed) if (!stubbed.has(seq)) state.tokens.delete(seq)
      state.stubbed = stubbed
      state.kept = kept
      state.encoded.length = 0
    } else {
      state.view.push(...added)
    }
    state.open = openCalls(state.view)
    if (added.some((e) => e.kind === "tool_results" || e.kind === "output")) state.heldLocal = []
  }

  /** The calls of the last `output` that no later `tool_results` answered. */
  const openCalls = (entries: ReadonlyArray<NativeEntry>): Array<ToolCall> => {
    let at = entries.length - 1
    while (at >= 0 && entries[at]!.kind !== "output") at--
    if (at < 0) return []
    const answered = new Set<string>()
    for (let i = at + 1; i < entries.length; i++) {
      if (entries[i]!.kind === "tool_results") for (const id of dialect.answeredBy(entries[i]!.body)) answered.add(id)
    }
    return dialect.callsOf(entries[at]!.body).filter((c) => !answered.has(c.id))
  }

  /** An entry not yet stored: it joins the native thread once the request carrying it is accepted. */
  interface Draft {
    readonly kind: NativeEntryKind
    readonly body: string
    readonly runId: string | null
    readonly deliveryIds?: ReadonlyArray<string>
    readonly usage?: ContextUsage | null
  }

  /**
   * Stores `drafts` after the lane's entries (one insert) and refreshes the open calls. Uninterruptible: an interrupt
   * of the turn waits until what was inserted has joined the lane, so the turn's end (`interruptible`) never judges
   * from a lane that lacks what the log holds (a prompt stored but judged unread went out twice: once from the log,
   * once owed as a missed run).
   */
  const append = (operation: string, nativeRef: string, state: Lane, drafts: ReadonlyArray<Draft>) => {
    if (drafts.length === 0) return Effect.void
    const entries = drafts.map((d, i): NativeEntry => ({
      seq: state.entries.length + i + 1,
      kind: d.kind,
      runId: d.runId,
      deliveryIds: d.deliveryIds ?? [],
      usage: d.usage ?? null,
      body: d.body
    }))
    return log.append(instance, nativeRef, entries).pipe(
      Effect.mapError(storageError(operation)),
      Effect.tap(() => Effect.sync(() => join(state, entries))),
      Effect.uninterruptible
    )
  }

  /**
   * The results closing every open call: `results` where given, else Baton's own held answer, else the record's
   * (`recorded`: what the orchestrator recorded when it closed the call), else an error result `unansweredResult`.
   */
  const closing = (
    state: Lane,
    runId: string | null,
    results: ReadonlyArray<ToolResultInput>,
    recorded: ReadonlyArray<ToolResultInput> = []
  ): ReadonlyArray<Draft> => {
    if (state.open.length === 0) return []
    const byId = new Map([...recorded, ...state.heldLocal, ...results].map((r) => [r.toolCallId, r]))
    const all = state.open.map((c) => byId.get(c.id) ?? { toolCallId: c.id, output: unansweredResult, isError: true })
    return [{ kind: "tool_results", body: dialect.toolResults(all, state.open), runId }]
  }

  /**
   * The record's results for the lane's open calls (`RecordedResults`), or none without open calls or a lookup.
   * Found by the issue-9 review: after an interrupt the record closed a call with "[interrupted] …" while the next
   * request closed it with this adapter's own text.
   */
  const recordedFor = (state: Lane, lookup: RecordedResults | undefined): Effect.Effect<ReadonlyArray<ToolResultInput>> =>
    state.open.length === 0 || lookup === undefined ? Effect.succeed([]) : lookup(state.open.map((c) => c.id))

  /** Index of the entry that ended the previous request (the one before the last `output`), or -1. */
  const previousRequestEnd = (entries: ReadonlyArray<NativeEntry>) => {
    for (let i = entries.length - 1; i >= 0; i--) if (entries[i]!.kind === "output") return i - 1
    return -1
  }

  /**
   * The next request's body as bytes: the stored entries then `drafts`. Stored entries are copied from their cached
   * encoding; drafts and the rest are encoded now (a draft is not cached: its request may be refused).
   */
  const renderBody = (nativeRef: string, state: Lane, drafts: ReadonlyArray<Draft>, tools: ReadonlyArray<ToolDefinition>): Uint8Array => {
    const stored = state.view.length
    const bodies = drafts.length === 0 ? state.view.map((e) => e.body) : [...state.view.map((e) => e.body), ...drafts.map((d) => d.body)]
    const last = bodies.length - 1
    const previous = previousRequestEnd(state.view)
    const parts = dialect.render({
      model: config.model,
      maxOutputTokens: config.maxOutputTokens,
      system: config.systemPrompt,
      tools,
      entries: bodies,
      breakpoints: previous >= 0 && previous !== last ? [previous, last] : [last],
      cacheKey: nativeRef
    })
    const buffers: Array<Buffer> = []
    let length = 0
    for (const part of parts) {
      const buffer = typeof part === "number"
        ? (part < stored ? (state.encoded[part] ??= Buffer.from(bodies[part]!, "utf8")) : Buffer.from(bodies[part]!, "utf8"))
        : part === ","
        ? comma
        : Buffer.from(part, "utf8")
      buffers.push(buffer)
      length += buffer.length
    }
    return Buffer.concat(buffers, length)
  }

  /** The stub results of a `tool_results` entry answering `calls`: one line per call with its `tool:<id>` ref. */
  const stubResults = (body: string, calls: ReadonlyArray<ToolCall>) => {
    const share = Math.round(body.length / Math.max(1, calls.length))
    const sizes = resultChars(body)
    const results = calls.map((c): ToolResultInput => ({
      toolCallId: c.id,
      output: ToolResultOffload.stubText([{ toolName: c.name, argumentsText: c.arguments, releasedChars: sizes.get(c.id) ?? share }], `tool:${c.id}`),
      isError: false
    }))
    return dialect.toolResults(results, calls)
  }

  /**
   * What a thread's control comes to on this instance: on or off (the thread's `enabled`, else the instance's), the
   * instance's settings with the thread's overrides, and the problems that make the merge unusable (then the
   * instance's settings apply, with a warning logged by the caller).
   */
  const effectiveOffload = (control: OffloadControl | undefined) => {
    const offload = options.offload
    const base = offload?.settings ?? ToolResultOffload.defaults
    const merged = ToolResultOffload.withOverrides(base, control?.settings)
    const problems = ToolResultOffload.problems(merged)
    return {
      enabled: offload !== undefined && (control?.enabled ?? offload.enabled ?? true),
      settings: problems.length === 0 ? merged : base,
      problems
    }
  }

  /**
   * The lane's model-visible history as the policy sees it before a request carrying `drafts` and offering `tools`:
   * the situation (pins: the control's pinned calls, undone units, and the `thread_read` results of the turn in
   * flight; requests: the model's `offload_context` calls), each unit's calls, and the stub bodies that would
   * replace its `tool_results` entries. Stores nothing.
   */
  const offloadSituation = (state: Lane, drafts: ReadonlyArray<Draft>, tools: ReadonlyArray<ToolDefinition>, offload: OffloadOptions) =>
    Effect.gen(function*() {
      const view = state.view
      const tokensOf = (e: NativeEntry) => {
        let n = state.tokens.get(e.seq)
        if (n === undefined) state.tokens.set(e.seq, n = offload.count(e.body))
        return n
      }
      // Units: an output's calls with the tool_results entries answering them; every other entry alone.
      const units: Array<{ calls: Array<ToolCall>; results: Array<number>; pinned: boolean; answered: Set<string> }> = []
      const pinnedCalls = new Set(state.control?.pinnedToolCallIds ?? [])
      const unitOfCall = new Map<string, number>()
      const unitOfEntry: Array<number> = []
      view.forEach((e, i) => {
        if (e.kind === "tool_results") {
          const ids = dialect.answeredBy(e.body)
          const owners = new Set(ids.map((id) => unitOfCall.get(id)))
          const owner = owners.size === 1 ? [...owners][0] : undefined
          if (owner !== undefined) {
            if (state.kept.has(e.seq)) units[owner]!.pinned = true
            units[owner]!.results.push(i)
            for (const id of ids) units[owner]!.answered.add(id)
            unitOfEntry.push(owner)
            return
          }
          for (const o of owners) if (o !== undefined) units[o]!.pinned = true
        }
        const calls = e.kind === "output" ? [...dialect.callsOf(e.body)] : []
        // A call whose id cannot be a `tool:<call id>` ref (empty, or with a space or comma) is never stubbed: its
        // stub's ref could not be read back.
        const pinned = e.kind === "tool_results" || calls.some((c) => pinnedCalls.has(c.id) || !/^[^\s,]+$/.test(c.id))
        const u = units.push({ calls, results: [], pinned, answered: new Set() }) - 1
        for (const c of calls) unitOfCall.set(c.id, u)
        unitOfEntry.push(u)
      })
      // What thread_read returned stays verbatim while the model is likely still using it: while its unit is among
      // the newest `defaults.keepNewestUnits` tool units, whatever a thread or instance set keepNewestUnits to (unless
      // the model itself asked for it to go).
      let newer = 0
      for (let i = view.length - 1; i >= 0 && newer < ToolResultOffload.defaults.keepNewestUnits; i--) {
        const u = units[unitOfEntry[i]!]!
        if (view[i]!.kind !== "output" || u.calls.length === 0) continue
        newer++
        if (u.calls.some((c) => c.name === "thread_read") && !u.calls.some((c) => state.requested.has(c.id))) u.pinned = true
      }
      let outputsAfter = 0
      const answeredRequests = new Array<number>(units.length).fill(0)
      for (let i = view.length - 1; i >= 0; i--) {
        if (view[i]!.kind === "output") outputsAfter++
        else if (view[i]!.kind === "tool_results") answeredRequests[unitOfEntry[i]!] ||= outputsAfter
      }
      const stubBodies = new Map<number, string>()
      const situation: ToolResultOffload.Situation = {
        items: view.map((e, i) => ({ seq: e.seq, tokens: tokensOf(e), unit: unitOfEntry[i]!, pinned: units[unitOfEntry[i]!]!.pinned })),
        units: units.map((u, index): ToolResultOffload.Unit => {
          const stubbed = u.results.some((i) => state.stubbed.has(view[i]!.seq))
          let stubTokens = 0
          if (u.calls.length > 0 && !stubbed) {
            for (const i of u.results) {
              const body = stubResults(view[i]!.body, u.calls.filter((c) => dialect.answeredBy(view[i]!.body).includes(c.id)))
              stubBodies.set(i, body)
              stubTokens += offload.count(body)
            }
            stubTokens += u.calls.length === 0 ? 0 : view.filter((_, i) => unitOfEntry[i] === index && view[i]!.kind !== "tool_results").reduce((n, e) => n + tokensOf(e), 0)
          }
          return {
            isTool: u.calls.length > 0,
            answered: u.calls.every((c) => u.answered.has(c.id)),
            stubbed,
            stubTokens,
            answeredRequests: answeredRequests[index]!,
            requested: u.calls.some((c) => state.requested.has(c.id))
          }
        }),
        systemTokens: offload.count(config.systemPrompt ?? "") + offload.count(JSON.stringify(tools)) +
          drafts.reduce((n, d) => n + offload.count(d.body), 0),
        windowTokens: config.contextWindow,
        pricing: ToolResultOffload.pricingOf(config.prices, offload.ttlMs === undefined ? 5 * 60_000 : offload.ttlMs),
        requestsSoFar: view.filter((e) => e.kind === "output").length,
        msSinceLastRequest: state.lastRequestAt === null ? null : (yield* Clock.currentTimeMillis) - state.lastRequestAt
      }
      return { situation, units, stubBodies, unitOfEntry }
    })

  /**
   * What `ToolResultOffload.decide` would stub on the lane now, before a request carrying `drafts` and offering
   * `tools`, under `settings`: the decision, the stub bodies replacing entries, and the refs of the stubbed calls.
   * Stores nothing.
   */
  const offloadPlan = (
    state: Lane,
    drafts: ReadonlyArray<Draft>,
    tools: ReadonlyArray<ToolDefinition>,
    offload: OffloadOptions,
    settings: ToolResultOffload.Settings
  ) =>
    Effect.gen(function*() {
      const view = state.view
      const { situation, stubBodies, unitOfEntry, units } = yield* offloadSituation(state, drafts, tools, offload)
      const decision = ToolResultOffload.decide(situation, settings)
      const chosen = new Set(decision.units)
      const replaces = view.flatMap((e, i) => chosen.has(unitOfEntry[i]!) && stubBodies.has(i) ? [{ seq: e.seq, body: stubBodies.get(i)! }] : [])
      return {
        decision,
        replaces,
        units: decision.units.map((u) => units[u]!.calls.map((c) => ({ ref: `tool:${c.id}`, toolName: c.name })))
      }
    })

  /**
   * Applies `ToolResultOffload.decide` to the native thread before a request (a step boundary: never mid-request).
   * `drafts` (what the request adds) count towards usage. A flush is stored as one `offload` entry.
   */
  const offloadStep = (operation: string, nativeRef: string, state: Lane, drafts: ReadonlyArray<Draft>, tools: ReadonlyArray<ToolDefinition>) =>
    Effect.gen(function*() {
      const offload = options.offload
      state.lastTools = tools
      const effective = effectiveOffload(state.control)
      if (offload === undefined || !effective.enabled) return null
      if (effective.problems.length > 0) {
        yield* Effect.logWarning(`the thread's tool-result offload settings are not usable on "${instance}" (${effective.problems.join("; ")}): the instance's apply`)
      }
      const plan = yield* offloadPlan(state, drafts, tools, offload, effective.settings)
      if (plan.decision.tier === "emergency") {
        yield* Effect.logWarning(`native thread ${nativeRef} on "${instance}" is near its window even with every consumed tool result stubbed (${plan.decision.reason})`)
      }
      if (plan.decision.units.length === 0) return null
      const { decision, replaces } = plan
      for (const calls of plan.units) for (const c of calls) state.requested.delete(c.ref.slice("tool:".length))
      yield* append(operation, nativeRef, state, [{ kind: "offload", body: JSON.stringify({ replaces } satisfies OffloadBody), runId: null }])
      const flush: OffloadFlush = {
        nativeRef,
        entrySeqs: replaces.map((r) => r.seq),
        refs: plan.units.flatMap((calls) => calls.map((c) => c.ref)),
        decision
      }
      offload.onFlush?.(flush)
      return flush
    })

  /** Base-input tokens (the policy's cost unit) in US dollars at the instance's input price. */
  const dollarsOf = (tokens: number) => Math.round(tokens * config.prices.input) / 1e6

  /**
   * The dry run of tool-result offload on `nativeRef` (issue 11 item 5): what the policy would stub before the next
   * request if it carried nothing new, with tokens before and after and the cache-rewrite cost and break-even. Stores
   * nothing. Off (`enabled: false`) when the instance's offload is off.
   */
  const previewToolResultOffload = (nativeRef: string, control?: OffloadControl): Effect.Effect<ToolResultOffloadPreview, ProviderError> =>
    Effect.gen(function*() {
      const state = yield* lane("previewToolResultOffload", nativeRef)
      const offload = options.offload
      const stubbedUnits = state.stubbed.size
      const effective = effectiveOffload(control)
      if (offload === undefined || !effective.enabled) {
        const off = offload !== undefined && control?.enabled === false ? "for this thread" : `for provider instance "${instance}"`
        return { ...emptyPreview(nativeRef, stubbedUnits), reason: `tool-result offload is off ${off}` }
      }
      // As the next request would see it: the thread's pins, and the model's offload_context requests not yet applied.
      const plan = yield* offloadPlan({ ...state, control }, [], state.lastTools, offload, effective.settings)
      const d = plan.decision
      const finite = (n: number) => Number.isFinite(n) ? n : null
      return {
        nativeRef,
        enabled: true,
        tier: d.tier,
        reason: d.reason,
        units: plan.units.map((calls) => ({ refs: calls.map((c) => c.ref), toolNames: calls.map((c) => c.toolName) })),
        entrySeqs: plan.replaces.map((r) => r.seq),
        tokensBefore: d.tokensBefore,
        tokensAfter: d.tokensAfter,
        rewriteCostTokens: Math.round(d.rewriteCost),
        rewriteCostUsd: dollarsOf(d.rewriteCost),
        expectedSavingsTokens: Math.round(d.expectedSavings),
        breakEvenRequests: finite(d.breakEvenRequests),
        stubbedEntries: stubbedUnits
      }
    })

  /**
   * Undoes the newest flush on `nativeRef` not yet undone (issue 11 item 5): appends an `offload` entry restoring its
   * entries' original bodies, so the next request carries them verbatim again (the originals were never deleted); the
   * restored units are never stubbed again. The prompt cache breaks once, at the first restored entry. Nothing to
   * undo answers `undone: false` with the reason.
   */
  const undoToolResultOffload = (nativeRef: string): Effect.Effect<ToolResultOffloadUndo, ProviderError> =>
    Effect.gen(function*() {
      const state = yield* lane("undoToolResultOffload", nativeRef)
      // The newest flush with an entry still a stub (an undone entry is no longer one, and is never stubbed again).
      let flushSeq: number | null = null
      let seqs: Array<number> = []
      for (let i = state.entries.length - 1; i >= 0 && flushSeq === null; i--) {
        const e = state.entries[i]!
        if (e.kind !== "offload") continue
        seqs = (JSON.parse(e.body) as OffloadBody).replaces.map((r) => r.seq).filter((seq) => state.stubbed.has(seq))
        if (seqs.length > 0) flushSeq = e.seq
      }
      if (flushSeq === null) return { nativeRef, undone: false, flushSeq: null, entrySeqs: [], reason: "no flush on this native thread to undo" }
      yield* append("undoToolResultOffload", nativeRef, state, [{ kind: "offload", body: JSON.stringify({ replaces: [], restores: seqs } satisfies OffloadBody), runId: null }])
      return { nativeRef, undone: true, flushSeq, entrySeqs: seqs, reason: "" }
    })

  /**
   * Sends `body` and continues with `then(response)` once the status is 2xx. A 429/529/5xx answer or a transport
   * failure before any answer is retried up to `maxRetries` times, each after a `retry_scheduled` event (emitted
   * before the wait: a long `retry-after` is visible to clients) and a delay: the `retry-after`/`retry-after-ms` the
   * provider asked for, else `retryBaseMillis` doubled per retry and jittered by ±20%. Fails with `ProviderError`.
   */
  const sending = (
    operation: string,
    body: Uint8Array,
    then: (response: HttpClientResponse.HttpClientResponse) => Stream.Stream<TurnEvent, ProviderError>
  ): Stream.Stream<TurnEvent, ProviderError> => {
    const request = HttpClientRequest.post(url).pipe(
      HttpClientRequest.setHeaders(headers),
      HttpClientRequest.bodyUint8Array(body, "application/json")
    )
    const once: Effect.Effect<HttpClientResponse.HttpClientResponse, HttpFailure> = options.http.execute(request).pipe(
      Effect.mapError((e): HttpFailure => ({
        failure: wireFailure("unavailable", `${dialect.api} could not be reached: ${e.message}`, true),
        retryAfterMillis: null,
        httpStatus: null
      })),
      Effect.flatMap((response) =>
        response.status >= 200 && response.status < 300
          ? Effect.succeed(response)
          : Effect.flatMap(Effect.orElseSucceed(response.text, () => ""), (text) => {
            const failure = dialect.httpFailure(response.status, text)
            return Effect.fail<HttpFailure>({
              failure: { ...failure, retryable: failure.retryable || retryableStatus(response.status) },
              retryAfterMillis: retryAfterMillis(response.headers, Date.now()),
              httpStatus: response.status
            })
          })
      )
    )
    const attempt = (retries: number): Stream.Stream<TurnEvent, ProviderError> =>
      Stream.unwrap(Effect.matchEffect(once, {
        onSuccess: (response) => Effect.succeed(then(response)),
        onFailure: (f) => {
          const retry = retries < maxRetries && f.failure.retryable && (f.httpStatus === null || retryableStatus(f.httpStatus))
          if (!retry) return Effect.fail(providerError(operation, f.failure, f.httpStatus))
          // A wait longer than `maxRetryAfterMillis` is not waited out in a turn: the run fails, saying how long the
          // provider asked for (found by a review: `retry-after: 86400` parked the run for a day).
          if (f.retryAfterMillis !== null && f.retryAfterMillis > maxRetryAfterMillis) {
            const seconds = Math.ceil(f.retryAfterMillis / 1_000)
            return Effect.fail(providerError(operation, { ...f.failure, reason: `${f.failure.reason} (the provider asked to retry after ${seconds} s, longer than Baton waits in a turn)` }, f.httpStatus))
          }
          return Effect.map(Random.nextRange(0.8, 1.2), (jitter) => {
            const delayMillis = Math.round(f.retryAfterMillis ?? baseMillis * 2 ** retries * jitter)
            const scheduled = TurnEvent.retry_scheduled({
              providerInstance: instance,
              attempt: retries + 1,
              delayMillis,
              reason: redactKey(f.failure.reason, options.apiKey),
              httpStatus: f.httpStatus
            })
            return Stream.concat(
              Stream.make(scheduled),
              Stream.unwrap(Effect.as(Effect.sleep(Duration.millis(delayMillis)), attempt(retries + 1)))
            )
          })
        }
      }))
    return attempt(0)
  }

  /**
   * The items of one request's answer as they complete. Events are read a network chunk at a time (one step per
   * chunk, not per event: a Chat Completions answer is hundreds of events). Fails with `ProviderError`: the
   * parser's failure, a broken connection, or a stream that ended before its terminal event.
   */
  const answerItems = (
    operation: string,
    response: HttpClientResponse.HttpClientResponse,
    parser: StreamParser
  ): Stream.Stream<ProducedItem, ProviderError> => {
    const midStream = (f: WireFailure) => providerError(operation, f)
    /** A batch's items; when an event fails, the items before it, then the failure. */
    const read = (batch: ReadonlyArray<SseMessage>): Stream.Stream<ProducedItem, ProviderError> => {
      const out: Array<ProducedItem> = []
      for (const message of batch) {
        if (parser.complete()) break
        const items = parser.onEvent(message)
        if (isWireFailure(items)) return Stream.concat(Stream.fromIterable([...out, ...(items.before ?? [])]), Stream.fail(midStream(items)))
        for (const item of items) out.push(item)
      }
      return Stream.fromIterable(out)
    }
    const ended = Stream.suspend(() =>
      parser.complete()
        ? Stream.empty
        : Stream.fail(midStream(wireFailure("unavailable", `the ${dialect.api} stream ended before the response was complete`, true)))
    )
    // Items the parser held back stand when the answer fails: `partial()`, which the native thread keeps, holds them.
    const drained = (error: ProviderError) =>
      Stream.concat(Stream.suspend(() => Stream.fromIterable(parser.drain?.() ?? [])), Stream.fail(error))
    if ((response.headers["content-type"] ?? "").includes("application/json")) {
      return Stream.fromEffect(Effect.mapError(response.json, (e) => midStream(wireFailure("protocol", `unreadable ${dialect.api} response: ${e.message}`)))).pipe(
        Stream.flatMap((body) => read(dialect.synthesize(body))),
        Stream.concat(ended),
        Stream.catchAll(drained)
      )
    }
    return Stream.suspend(() => {
      const decoder = makeDecoder()
      return response.stream.pipe(
        Stream.mapError((e) => midStream(wireFailure("unavailable", `the ${dialect.api} stream broke off: ${e.message}`, true))),
        Stream.flatMap((bytes) => read(decoder.push(bytes))),
        Stream.concat(Stream.suspend(() =>
          decoder.end() && !parser.complete()
            ? Stream.fail(midStream(wireFailure("protocol", `the ${dialect.api} stream ended inside an event`)))
            : ended
        )),
        Stream.catchAll(drained)
      )
    })
  }

  /**
   * One model request of a turn and, when the model called only Baton's tools, the requests after it: the items as
   * they complete, a usage report after each request, `turn_ended` last.
   */
  const requestLoop = (
    operation: string,
    nativeRef: string,
    state: Lane,
    runId: string,
    tools: ReadonlyArray<ToolDefinition>,
    local: ReadonlyArray<LocalTool>,
    onDelta: ((delta: TextDelta) => void) | null,
    billed: TurnTokens | null,
    drafts: ReadonlyArray<Draft>,
    rounds = 0
  ): Stream.Stream<TurnEvent, ProviderError> =>
    Stream.unwrap(Effect.gen(function*() {
      const offered = [...tools, ...local.map((t) => t.definition)]
      const flush = yield* offloadStep(operation, nativeRef, state, drafts, offered)
      // A flush is reported first, before the request it was made for is sent: its `offload` entry is stored, so the
      // orchestrator must hear of it even when that request is then refused, fails or is interrupted.
      const flushed = flush === null ? [] : [TurnEvent.context_offloaded({ flush: offloadReport(instance, flush) })]
      const request = Stream.unwrap(Effect.gen(function*() {
        const body = renderBody(nativeRef, state, drafts, offered)
        state.lastRequestAt = yield* Clock.currentTimeMillis
        // Sent (with its retries, each announced by `retry_scheduled`); once accepted, the answer streams.
        return sending(operation, body, (response) =>
          Stream.unwrap(Effect.gen(function*() {
            // The provider accepted the request: from now on the native thread holds what it carried.
            yield* append(operation, nativeRef, state, drafts)
            const parser = dialect.parser(new Set(offered.map((t) => t.name)), onDelta)
            state.current = parser
            return answerItems(operation, response, parser).pipe(
              Stream.map((item) => TurnEvent.item_produced({ item })),
              // The stream broke after the provider reported usage (Anthropic's `message_start` carries the input
              // tokens): the request was billed, so its tokens are reported before the failure and its cost recorded.
              Stream.catchAll((error) => Stream.concat(Stream.fromIterable(partialUsage(parser)), Stream.fail(error))),
              Stream.concat(Stream.unwrap(Effect.suspend(() => afterAnswer(parser.outcome())))),
              Stream.tapError(() => recordPartial(operation, nativeRef, state, runId))
            )
          })))

        /** The usage a broken-off answer reported so far (the turn's running total), or nothing when it reported none. */
        function partialUsage(parser: StreamParser): ReadonlyArray<TurnEvent> {
          const outcome = parser.outcome()
          if (outcome.tokens === null || outcome.contextTokens === null) return []
          const tokens = sumTokens(billed, outcome.tokens)!
          return [TurnEvent.usage_reported({
            usage: {
              usedTokens: outcome.contextTokens,
              maxTokens: config.contextWindow,
              ...(config.autoCompactThreshold === null ? {} : { autoCompactThreshold: config.autoCompactThreshold })
            },
            tokens
          })]
        }

        /** The answer is complete: record it, report usage, then end the turn or answer Baton's own calls and go on. */
        function afterAnswer(outcome: RequestOutcome) {
          return Effect.gen(function*() {
            const tokens = sumTokens(billed, outcome.tokens)
            const usage: ContextUsage | null = outcome.contextTokens === null ? null : {
              usedTokens: outcome.contextTokens,
              maxTokens: config.contextWindow,
              ...(config.autoCompactThreshold === null ? {} : { autoCompactThreshold: config.autoCompactThreshold })
            }
            state.current = null
            if (outcome.output !== null) yield* append(operation, nativeRef, state, [{ kind: "output", body: outcome.output, runId, usage }])
            state.open = [...outcome.calls]
            const report = usage === null ? [] : [TurnEvent.usage_reported({ usage, ...(tokens === null ? {} : { tokens }) })]
            if (outcome.overflow) {
              return Stream.concat(
                Stream.fromIterable(report),
                Stream.fail(providerError(operation, wireFailure("overflow", `the model stopped: the context window of ${config.contextWindow} tokens is full (model_context_window_exceeded)`, false, { limitTokens: config.contextWindow })))
              )
            }
            const localByName = new Map(local.map((t) => [t.definition.name, t]))
            const declared = new Set(tools.map((t) => t.name))
            // Baton answers its own calls and calls to a tool nobody offered (an error result naming the tools that
            // exist); only calls to the client's declared tools wait for the client.
            const mine = outcome.calls.filter((c) => localByName.has(c.name) || !declared.has(c.name))
            const theirs = outcome.calls.filter((c) => !localByName.has(c.name) && declared.has(c.name))
            const answer = (c: ToolCall) => {
              const tool = localByName.get(c.name)
              return tool === undefined ? Effect.succeed(unknownToolResult(c, offered)) : runLocal(tool, c, runId)
            }
            if (mine.length === 0 || theirs.length > 0) {
              // Baton's own answers next to the client's calls are made now and recorded (their result items), but
              // sent with the client's results in one tool_results message when the turn continues (`closing`).
              const held = mine.length === 0 ? [] : yield* Effect.forEach(mine, answer)
              state.heldLocal = [...held]
              return Stream.fromIterable<TurnEvent>([
                ...report,
                ...held.map((r) => TurnEvent.item_produced({ item: resultItem(r, mine) })),
                TurnEvent.turn_ended({ interrupted: false, ...(theirs.length === 0 ? {} : { pendingToolCalls: theirs.map((c) => c.id) }) })
              ])
            }
            // Only Baton answers this round: the turn goes on by itself, so it is bounded (found by a review: a model
            // calling unknown tools or thread_read forever looped until the turn timeout). Past the bound each call is
            // answered with a request to finish; a model that keeps calling fails the turn.
            if (rounds >= maxBatonRounds + batonRoundsGrace) {
              return Stream.concat(
                Stream.fromIterable(report),
                Stream.fail(providerError(operation, wireFailure("protocol", `the model kept calling tools Baton answers past ${rounds} requests in one turn`, false)))
              )
            }
            const results = rounds >= maxBatonRounds
              ? mine.map((c): ToolResultInput => ({ toolCallId: c.id, output: tooManyRounds(rounds), isError: true }))
              : yield* Effect.forEach(mine, answer)
            return Stream.concat(
              Stream.fromIterable<TurnEvent>([...report, ...results.map((r) => TurnEvent.item_produced({ item: resultItem(r, mine) }))]),
              requestLoop(operation, nativeRef, state, runId, tools, local, onDelta, tokens, closing(state, runId, results), rounds + 1)
            )
          })
        }
      }))
      return flushed.length === 0 ? request : Stream.concat(Stream.fromIterable(flushed), request)
    }))

  /**
   * Records what the request in flight completed before its stream failed or was interrupted (the items Baton
   * streamed stand, so the native thread holds them too). A storage failure here is reported by the next append.
   */
  const recordPartial = (operation: string, nativeRef: string, state: Lane, runId: string | null) =>
    Effect.suspend(() => {
      const parser = state.current
      state.current = null
      const partial = parser === null ? null : parser.partial()
      return partial === null ? Effect.void : Effect.ignore(append(operation, nativeRef, state, [{ kind: "output", body: partial, runId }]))
    })

  const resultItem = (r: ToolResultInput, calls: ReadonlyArray<ToolCall>): ProducedItem => ({
    kind: "tool_result",
    text: r.output,
    toolCallId: r.toolCallId,
    toolName: calls.find((c) => c.id === r.toolCallId)?.name ?? null,
    messageId: null,
    isError: r.isError,
    toolCallState: "answered"
  })

  /**
   * The error result Baton sends for a call to a tool that was not offered on the request (neither the client's nor
   * Baton's own): `unknown tool <name>; available: <offered names, comma-separated, or none>`. The model reads it and
   * goes on; without it the call would wait for a client that never declared the tool.
   */
  const unknownToolResult = (call: ToolCall, offered: ReadonlyArray<ToolDefinition>): ToolResultInput => ({
    toolCallId: call.id,
    output: `unknown tool ${call.name}; available: ${offered.length === 0 ? "none" : offered.map((t) => t.name).join(", ")}`,
    isError: true
  })

  const runLocal = (tool: LocalTool, call: ToolCall, runId: string) =>
    Effect.map(tool.execute({ arguments: call.arguments, runId }), (answer): ToolResultInput => ({ toolCallId: call.id, output: answer.output, isError: answer.isError }))

  /**
   * Baton's `offload_context` tool on the lane (`offloadContextTool`): records which units the model asked to offload
   * (every call of a named call's unit), to be stubbed at the next request (a step boundary, never mid-step), and
   * answers what will be stubbed and what not, with why (unknown id, still open, pinned, already a stub, too small to
   * gain). Never fails: bad arguments are answered as such.
   */
  const offloadContext = (state: Lane): LocalTool => ({
    definition: offloadContextTool,
    execute: ({ arguments: text }) => offloadContextAnswer(state, text)
  })

  /** `offload_context`'s answer to `text` (its arguments): a bad call, or offload off, is an error result. */
  const offloadContextAnswer = (state: Lane, text: string): Effect.Effect<LocalToolAnswer> =>
    Effect.gen(function*() {
      const answered = (output: string): LocalToolAnswer => ({ output, isError: false })
      const args = Schema.decodeUnknownEither(OffloadContextArguments)(text)
      if (Either.isLeft(args) || (args.right.tool_call_ids === undefined && args.right.all === undefined)) {
        return { output: `offload_context: the arguments are not {"tool_call_ids": ["<call id>", ...]} or {"all": true}`, isError: true }
      }
      const offload = options.offload
      if (offload === undefined) return { output: "offload_context: tool-result offload is off here", isError: true }
      const effective = effectiveOffload(state.control)
      const { situation, units } = yield* offloadSituation(state, [], state.lastTools, offload)
      const tokensOf = new Array<number>(units.length).fill(0)
      for (const item of situation.items) tokensOf[item.unit]! += item.tokens
      const unitOf = new Map<string, number>()
      units.forEach((u, index) => u.calls.forEach((c) => unitOf.set(c.id, index)))
      const asked = [...(args.right.tool_call_ids ?? [])]
      if (args.right.all === true) {
        for (const c of ToolResultOffload.eligible(situation, effective.settings)) asked.push(...units[c.unit]!.calls.map((call) => call.id))
      }
      const accepted = new Map<number, number>()
      const refused: Array<string> = []
      for (const id of new Set(asked)) {
        const index = unitOf.get(id)
        const unit = index === undefined ? undefined : situation.units[index]
        const pinned = index !== undefined && situation.items.some((i) => i.unit === index && i.pinned)
        const why = index === undefined || unit === undefined
          ? "no such tool call in this conversation"
          : unit.stubbed
          ? "already a stub"
          : !unit.answered
          ? "its result is not in yet"
          : pinned
          ? "pinned"
          : unit.stubTokens >= tokensOf[index]!
          ? "its stub would not be smaller"
          : null
        if (why !== null) refused.push(`${id} (${why})`)
        else if (!accepted.has(index!)) accepted.set(index!, tokensOf[index!]! - unit!.stubTokens)
      }
      for (const index of accepted.keys()) for (const c of units[index]!.calls) state.requested.add(c.id)
      const released = [...accepted.values()].reduce((n, t) => n + t, 0)
      const named = [...accepted.keys()].flatMap((index) => units[index]!.calls.map((c) => `tool:${c.id} (${c.name})`))
      const done = accepted.size === 0
        ? "offload_context: nothing to offload."
        : `offload_context: from your next step on, ${named.length} tool result${named.length === 1 ? "" : "s"} (about ` +
          `${released} tokens) are one-line stubs: ${named.slice(0, maxRefusalsNamed).join(", ")}` +
          `${named.length > maxRefusalsNamed ? `, and ${named.length - maxRefusalsNamed} more` : ""}. Read one back with thread_read {"refs": "tool:<call id>"}.`
      if (refused.length === 0) return answered(done)
      const listed = refused.slice(0, maxRefusalsNamed).join(", ")
      return answered(`${done} Not offloaded: ${listed}${refused.length > maxRefusalsNamed ? `, and ${refused.length - maxRefusalsNamed} more` : ""}.`)
    })

  /**
   * Runs `loop` as the turn in flight on `nativeRef`: `interrupt` ends it with `turn_ended { interrupted: true }`, or,
   * when the provider had not yet accepted any request of `runId` (nothing of the run joined the native thread: the
   * prompt was not read), fails it with `code: "interrupted"`, so the orchestrator records the run as stopped before
   * the provider and owes its prompt to the next turn instead of counting it as delivered.
   */
  const interruptible = (nativeRef: string, runId: string, state: Lane, loop: Stream.Stream<TurnEvent, ProviderError>) =>
    Stream.unwrapScoped(Effect.gen(function*() {
      const stop = yield* Deferred.make<void>()
      yield* Effect.acquireRelease(
        Effect.sync(() => inFlight.set(nativeRef, stop)),
        () => Effect.sync(() => inFlight.get(nativeRef) === stop && inFlight.delete(nativeRef))
      )
      let ended = false
      return loop.pipe(
        Stream.tap((e) => Effect.sync(() => void (ended = ended || e._tag === "turn_ended"))),
        Stream.interruptWhen(Deferred.await(stop)),
        Stream.concat(Stream.suspend(() => {
          if (ended) return Stream.empty
          // What the request in flight completed but its parser held back joins the record, as it joins the native
          // thread (`recordPartial`).
          const held = state.current?.drain?.() ?? []
          if (held.length === 0 && !state.entries.some((e) => e.runId === runId)) {
            return Stream.fail(providerError("interrupt", wireFailure("interrupted", "interrupted before the provider accepted the request: it did not read the prompt, which the next turn carries", false)))
          }
          return Stream.concat(
            Stream.fromIterable(held.map((item) => TurnEvent.item_produced({ item }))),
            Stream.fromEffect(Effect.as(recordPartial("interrupt", nativeRef, state, runId), TurnEvent.turn_ended({ interrupted: true })))
          )
        }))
      )
    }))

  /** The turn's own tools: the caller's (`thread_read`), and `offload_context` while tool-result offload is on. */
  const localTools = (state: Lane, given: ReadonlyArray<LocalTool> | undefined): ReadonlyArray<LocalTool> =>
    effectiveOffload(state.control).enabled ? [...(given ?? []), offloadContext(state)] : given ?? []

  const startTurn = (input: StartTurnInput): Stream.Stream<TurnEvent, ProviderError> =>
    Stream.unwrap(Effect.gen(function*() {
      const state = yield* lane("startTurn", input.nativeRef)
      state.control = input.offloadControl
      const recorded = yield* recordedFor(state, input.recordedResults)
      const drafts: ReadonlyArray<Draft> = [
        ...closing(state, input.runId, [], recorded),
        { kind: "turn", body: dialect.userTurn(input.prompt, input.inlineHistory), runId: input.runId }
      ]
      return interruptible(
        input.nativeRef,
        input.runId,
        state,
        requestLoop("startTurn", input.nativeRef, state, input.runId, input.tools ?? [], localTools(state, input.localTools), input.onDelta ?? null, null, drafts)
      )
    }))

  const continueTurn = (input: ContinueTurnInput): Stream.Stream<TurnEvent, ProviderError> =>
    Stream.unwrap(Effect.gen(function*() {
      const state = yield* lane("continueTurn", input.nativeRef)
      if (state.open.length === 0) {
        return yield* providerError("continueTurn", wireFailure("protocol", `native thread ${input.nativeRef} has no open tool call to answer`))
      }
      state.control = input.offloadControl
      return interruptible(
        input.nativeRef,
        input.runId,
        state,
        requestLoop(
          "continueTurn",
          input.nativeRef,
          state,
          input.runId,
          input.tools ?? [],
          localTools(state, input.localTools),
          input.onDelta ?? null,
          null,
          closing(state, input.runId, input.toolResults)
        )
      )
    }))

  const readThread = (nativeRef: string): Effect.Effect<ReadThreadResult, ProviderError> =>
    Effect.map(lane("readThread", nativeRef), (state) => {
      let usage: ContextUsage | null = null
      for (const e of state.entries) if (e.usage !== null) usage = e.usage
      // The last request's entry (a turn or tool results) with no output after it: its answer never completed.
      const last = [...state.entries].reverse().find((e) => e.kind === "turn" || e.kind === "tool_results" || e.kind === "output")
      const unanswered = last !== undefined && last.kind !== "output" && last.runId !== null ? [last.runId] : []
      return {
        deliveryIds: state.entries.flatMap((e) => e.deliveryIds),
        runIds: [...new Set(state.entries.filter((e) => e.kind === "turn" && e.runId !== null).map((e) => e.runId!))],
        usage,
        unansweredRunIds: unanswered
      }
    })

  return {
    instance,
    model: config.model,
    modelContextWindow: config.contextWindow,
    maxOutputTokens: config.maxOutputTokens,
    prices: config.prices,
    startThread: () => Effect.sync(() => ({ nativeRef: newRef() })),
    resumeThread: (nativeRef) => Effect.asVoid(lane("resumeThread", nativeRef)),
    startTurn,
    continueTurn,
    interrupt: (nativeRef) =>
      Effect.suspend(() => {
        const stop = inFlight.get(nativeRef)
        return stop === undefined ? Effect.void : Deferred.succeed(stop, undefined)
      }),
    injectHistory: (input) =>
      Effect.gen(function*() {
        const state = yield* lane("injectHistory", input.nativeRef)
        // Calls an earlier run left open are closed first, so the history never comes between a call and its result
        // (found by a review: after a refused request, the next turn's injection landed between tool_use and
        // tool_result, which Anthropic and Chat Completions reject, and every later request carried it).
        const owner = [...state.view].reverse().find((e) => e.kind === "output")?.runId ?? null
        const recorded = yield* recordedFor(state, input.recordedResults)
        yield* append("injectHistory", input.nativeRef, state, [
          ...closing(state, owner, [], recorded),
          { kind: "history", body: dialect.history(input.rendered), runId: null, deliveryIds: input.deliveryIds }
        ])
        return { usage: null }
      }),
    readThread,
    toolResultOffload: { preview: previewToolResultOffload, undo: undoToolResultOffload, effective: effectiveOffload }
  }
}

