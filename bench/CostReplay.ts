/**
 * CostReplay: what a session costs in prompt-cache-weighted input under each tool-result policy (issue 11, "The cost
 * benchmark"; figures in bench/README.md and docs/offload.md).
 *
 * Owns: turning an imported transcript into requests (one per model response) of messages (each tool result its own
 * message), the field's published policies as replay policies, Baton's policy (`ToolResultOffload`) applied to the
 * same messages, and the cost of each request. Does not own: parsing transcripts (`@baton/transcripts`), counting
 * tokens (`TokenCounter`), Baton's decision rule (`ToolResultOffload`).
 *
 * The model of a request: a fixed system prompt plus every earlier message as the policy leaves it (since the latest
 * recorded compaction summary, which replaced everything before it in the agent's own context). The cached part is
 * the longest common prefix with the previous request, compared message by message, plus the system prompt; nothing
 * of the previous request is cached when the gap since it exceeds the TTL (sensitivity run only; the main run assumes
 * a warm cache, as Claude Code's 1-hour cache on active sessions). The cache breakpoint sits on the last message, as
 * Claude Code and pi place it, so every input token is either read from the cache or written to it:
 *
 *   weighted input = 0.1 x cache read + 1.25 x cache write,  cache write = input - cache read.
 */
import { ToolResultOffload } from "@baton/context"
import type { Transcript } from "@baton/transcripts"

type ImportedThread = Transcript.ImportedThread

/** One thread item as Baton would store it: `seq` is its thread position (1-based), the ref `thread_read` reads. */
export interface ReplayItem {
  readonly seq: number
  readonly kind: "user_message" | Transcript.ImportedItemKind
  readonly text: string
  readonly toolName: string | null
  readonly toolCallId: string | null
}

/** One message of a request: a user prompt, one response's assistant side, one tool result, a summary, an error. */
export interface Message {
  readonly kind: "user" | "assistant" | "result" | "summary" | "other"
  readonly seqs: ReadonlyArray<number>
  /** o200k tokens of the message's items (tool calls: name and arguments). */
  readonly tokens: number
  readonly chars: number
  readonly unit: number
}

/** A unit: one response with its results (a tool unit when it has calls), or any other message alone. */
export interface ReplayUnit {
  readonly messages: ReadonlyArray<number>
  readonly isTool: boolean
  /** The index of the unit's last result message; `Infinity` when a call was never answered. */
  readonly answeredAt: number
  readonly calls: ReadonlyArray<ToolResultOffload.StubCall>
  readonly seqs: ReadonlyArray<number>
}

/** One request: its context is `messages[start..end)`; `timeMs` is when its response was recorded (or `null`). */
export interface Request {
  readonly start: number
  readonly end: number
  readonly timeMs: number | null
}

export interface Session {
  readonly name: string
  readonly items: ReadonlyArray<ReplayItem>
  readonly messages: ReadonlyArray<Message>
  readonly units: ReadonlyArray<ReplayUnit>
  readonly requests: ReadonlyArray<Request>
}

const assistantSide = new Set(["assistant_message", "reasoning", "tool_call"])

/**
 * Builds the replay session of `thread`. `count` is the token counter; `times` maps a response's `messageId` to its
 * recorded time (ms since the epoch; see `responseTimes`).
 */
export const sessionOf = (
  name: string,
  thread: ImportedThread,
  count: (text: string) => number,
  times: ReadonlyMap<string, number> = new Map()
): Session => {
  const items: Array<ReplayItem & { readonly messageId: string | null }> = []
  const add = (kind: ReplayItem["kind"], text: string, toolName: string | null, toolCallId: string | null, messageId: string | null) =>
    items.push({ seq: items.length + 1, kind, text, toolName, toolCallId, messageId })
  for (const i of thread.preamble) add(i.kind, i.text, i.toolName, i.toolCallId, i.messageId)
  for (const turn of thread.turns) {
    if (turn.userText !== "") add("user_message", turn.userText, null, null, null)
    for (const i of turn.items) add(i.kind, i.text, i.toolName, i.toolCallId, i.messageId)
  }

  const messages: Array<{ kind: Message["kind"]; seqs: Array<number>; tokens: number; chars: number; unit: number }> = []
  const units: Array<{ messages: Array<number>; isTool: boolean; calls: Array<{ id: string; toolName: string; argumentsText: string }>; resultAt: Map<string, number>; resultChars: Map<string, number> }> = []
  const requests: Array<Request> = []
  const unitOfCall = new Map<string, number>()
  let open: { messageId: string | null; message: number } | null = null
  let start = 0
  const newMessage = (kind: Message["kind"], unit: number | null) => {
    const u = unit ?? units.push({ messages: [], isTool: false, calls: [], resultAt: new Map(), resultChars: new Map() }) - 1
    const index = messages.push({ kind, seqs: [], tokens: 0, chars: 0, unit: u }) - 1
    units[u]!.messages.push(index)
    return index
  }
  for (const item of items) {
    let index: number
    if (assistantSide.has(item.kind)) {
      if (open === null || item.messageId === null || open.messageId !== item.messageId) {
        index = newMessage("assistant", null)
        open = { messageId: item.messageId, message: index }
        const time = item.messageId === null ? undefined : times.get(item.messageId)
        requests.push({ start, end: index, timeMs: time ?? null })
      } else {
        index = open.message
      }
      if (item.kind === "tool_call" && item.toolCallId !== null) {
        const unit = units[messages[index]!.unit]!
        unit.isTool = true
        unit.calls.push({ id: item.toolCallId, toolName: item.toolName ?? "tool", argumentsText: item.text })
        unitOfCall.set(item.toolCallId, messages[index]!.unit)
      }
    } else if (item.kind === "tool_result") {
      const unit = item.toolCallId === null ? undefined : unitOfCall.get(item.toolCallId)
      index = newMessage("result", unit ?? null)
      if (unit !== undefined) {
        units[unit]!.resultAt.set(item.toolCallId!, index)
        units[unit]!.resultChars.set(item.toolCallId!, item.text.length)
      }
    } else {
      open = null
      index = newMessage(item.kind === "user_message" ? "user" : item.kind === "summary" ? "summary" : "other", null)
      if (item.kind === "summary") start = index
    }
    const m = messages[index]!
    m.seqs.push(item.seq)
    m.tokens += count(item.text) + (item.kind === "tool_call" && item.toolName !== null ? count(item.toolName) : 0)
    m.chars += item.text.length
  }
  return {
    name,
    items: items.map(({ messageId: _, ...rest }) => rest),
    messages,
    units: units.map((u) => ({
      messages: u.messages,
      isTool: u.isTool,
      answeredAt: u.calls.every((c) => u.resultAt.has(c.id)) ? Math.max(-1, ...u.resultAt.values()) : Infinity,
      calls: u.calls.map((c) => ({ toolName: c.toolName, argumentsText: c.argumentsText, releasedChars: u.resultChars.get(c.id) ?? 0 })),
      seqs: u.messages.flatMap((m) => messages[m]!.seqs)
    })),
    requests
  }
}

/**
 * Recorded response times of a Claude Code or pi session file, keyed as the importers key responses: Claude Code by
 * `message.id`, pi by `pi:L<line>` (its synthesized `messageId`). Lines that do not parse are ignored.
 */
export const responseTimes = (text: string): Map<string, number> => {
  const times = new Map<string, number>()
  const lines = text.split("\n")
  lines.forEach((line, i) => {
    if (!line.includes("\"assistant\"")) return
    let record: { type?: unknown; timestamp?: unknown; message?: { id?: unknown; role?: unknown; timestamp?: unknown } }
    try {
      record = JSON.parse(line)
    } catch {
      return
    }
    const stamp = typeof record.timestamp === "string" ? Date.parse(record.timestamp) : NaN
    if (record.type === "assistant" && typeof record.message?.id === "string") {
      if (!times.has(record.message.id) && !Number.isNaN(stamp)) times.set(record.message.id, stamp)
    } else if (record.type === "message" && record.message?.role === "assistant") {
      const ms = typeof record.message.timestamp === "number" ? record.message.timestamp : stamp
      if (!Number.isNaN(ms)) times.set(`pi:L${i + 1}`, ms)
    }
  })
  return times
}

/** The knobs of one run: system prompt tokens, a factor on every message's tokens, the cache TTL (null: never). */
export interface RunOptions {
  readonly systemTokens: number
  readonly tokenScale: number
  readonly ttlMs: number | null
  readonly windowTokens: number
}

/** The main run: 3,000-token system prompt, counts as measured, a warm cache, a 200,000-token window. */
export const mainRun: RunOptions = { systemTokens: 3_000, tokenScale: 1, ttlMs: null, windowTokens: 200_000 }

/** The view a policy leaves: units replaced by a Baton stub, result messages replaced by a placeholder. */
interface View {
  readonly stubbed: Set<number>
  cleared: Set<number>
}

/** What a policy sees before request `r`. */
export interface PolicyContext {
  readonly session: Session
  readonly r: number
  readonly request: Request
  readonly view: View
  readonly options: RunOptions
  readonly tokens: (message: number) => number
  /** The request's input tokens (system prompt included) as the view leaves it. */
  readonly visibleTokens: () => number
  readonly msSinceLastRequest: number | null
  readonly stubTokens: (unit: number) => number
}

/** A replay policy: changes `view` before a request. `placeholder` is the text of a cleared result. */
export interface Policy {
  readonly name: string
  readonly placeholder: string
  readonly before: (ctx: PolicyContext) => void
}

/** The tool units of the request's context, whole inside it, in order of first message. */
const toolUnitsIn = (ctx: PolicyContext) => {
  const { session, request } = ctx
  const out: Array<number> = []
  const seen = new Set<number>()
  for (let m = request.start; m < request.end; m++) {
    const u = session.messages[m]!.unit
    if (seen.has(u)) continue
    seen.add(u)
    const unit = session.units[u]!
    if (unit.isTool && unit.messages[0]! >= request.start) out.push(u)
  }
  return out
}

const resultsOf = (session: Session, unit: number, end: number) =>
  session.units[unit]!.messages.filter((m) => m < end && session.messages[m]!.kind === "result")

/** The index of the first request whose context holds message `m` (binary search over ascending `end`). */
const firstRequestAfter = (session: Session, m: number): number => {
  let lo = 0
  let hi = session.requests.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (session.requests[mid]!.end > m) hi = mid
    else lo = mid + 1
  }
  return lo
}

/** No management: every message verbatim. */
export const none: Policy = { name: "none", placeholder: "", before: () => {} }

/** Baton: `ToolResultOffload.decide` with its defaults, whole units replaced by stubs. */
export const baton = (log?: (r: number, decision: ToolResultOffload.Decision) => void): Policy => ({
  name: "baton",
  placeholder: "",
  before: (ctx) => {
    const { session, request, view } = ctx
    const items: Array<ToolResultOffload.HistoryItem> = []
    const emitted = new Set<number>()
    for (let m = request.start; m < request.end; m++) {
      const message = session.messages[m]!
      const straddles = session.units[message.unit]!.messages[0]! < request.start
      if (view.stubbed.has(message.unit)) {
        if (emitted.has(message.unit)) continue
        emitted.add(message.unit)
        items.push({ seq: message.seqs[0]!, tokens: ctx.stubTokens(message.unit), unit: message.unit, pinned: false })
      } else {
        items.push({ seq: message.seqs[0]!, tokens: ctx.tokens(m), unit: message.unit, pinned: straddles })
      }
    }
    const units = session.units.map((u, i): ToolResultOffload.Unit => ({
      isTool: u.isTool,
      answered: u.answeredAt < request.end,
      stubbed: view.stubbed.has(i),
      stubTokens: u.isTool ? ctx.stubTokens(i) : 0,
      answeredRequests: u.answeredAt < request.end ? ctx.r - firstRequestAfter(session, u.answeredAt) : 0
    }))
    const decision = ToolResultOffload.decide({
      items,
      units,
      systemTokens: ctx.options.systemTokens,
      windowTokens: ctx.options.windowTokens,
      pricing: { ...ToolResultOffload.anthropicPricing, ttlMs: ctx.options.ttlMs },
      requestsSoFar: ctx.r,
      msSinceLastRequest: ctx.msSinceLastRequest
    })
    for (const u of decision.units) view.stubbed.add(u)
    if (log !== undefined && decision.tier !== "none") log(ctx.r, decision)
  }
})

/**
 * dsh (the published plugin's defaults): units older than the newest `retainUnits` whose results hold at least
 * `minUnitChars` characters are pending; a flush replaces the results of the oldest `maxUnitsPerFlush` pending units
 * when they hold `flushChars` characters or `flushEverySteps` requests have passed since the last flush.
 */
export const dsh = (p = { retainUnits: 8, minUnitChars: 4_000, flushChars: 20_000, flushEverySteps: 10, maxUnitsPerFlush: 40 }): Policy => {
  let steps = 0
  return {
    name: "dsh",
    placeholder: "[tool output offloaded by dsh]",
    before: (ctx) => {
      const { session, request, view } = ctx
      const units = toolUnitsIn(ctx)
      const older = units.slice(0, Math.max(0, units.length - p.retainUnits))
      const pending = older.filter((u) => {
        if (session.units[u]!.answeredAt >= request.end) return false
        const results = resultsOf(session, u, request.end)
        if (results.every((m) => view.cleared.has(m))) return false
        return results.reduce((n, m) => n + session.messages[m]!.chars, 0) >= p.minUnitChars
      })
      const chars = pending.reduce((n, u) => n + resultsOf(session, u, request.end).reduce((k, m) => k + session.messages[m]!.chars, 0), 0)
      steps++
      if (pending.length > 0 && (chars >= p.flushChars || steps >= p.flushEverySteps)) {
        for (const u of pending.slice(0, p.maxUnitsPerFlush)) for (const m of resultsOf(session, u, request.end)) view.cleared.add(m)
        steps = 0
      }
    }
  }
}

/** The result messages of the request's context, oldest first. */
const resultsIn = (ctx: PolicyContext) => {
  const out: Array<number> = []
  for (let m = ctx.request.start; m < ctx.request.end; m++) if (ctx.session.messages[m]!.kind === "result") out.push(m)
  return out
}

/**
 * Anthropic `clear_tool_uses_20250919` (context editing, server side): when the request as sent (the full history)
 * exceeds `trigger` input tokens, every tool result but those of the newest `keep` tool uses is replaced by a
 * placeholder, recomputed on every request (the client keeps sending the full history).
 */
export const clearToolUses = (trigger = 100_000, keep = 3): Policy => ({
  name: "clear_tool_uses",
  placeholder: "[cleared]",
  before: (ctx) => {
    let full = ctx.options.systemTokens
    for (let m = ctx.request.start; m < ctx.request.end; m++) full += ctx.tokens(m)
    const results = resultsIn(ctx)
    ctx.view.cleared = full > trigger ? new Set(results.slice(0, Math.max(0, results.length - keep))) : new Set()
  }
})

/**
 * Claude Code microcompact (client side, persistent): when the context exceeds `trigger` tokens, every tool result
 * but the newest `keep` is replaced by "[Old tool result content cleared]" and stays replaced.
 */
export const microcompact = (trigger = 100_000, keep = 5): Policy => ({
  name: "microcompact",
  placeholder: "[Old tool result content cleared]",
  before: (ctx) => {
    if (ctx.visibleTokens() <= trigger) return
    const results = resultsIn(ctx)
    for (const m of results.slice(0, Math.max(0, results.length - keep))) ctx.view.cleared.add(m)
  }
})

/**
 * OpenHands observation masking (`attention_window` 100 events): observations (tool results) older than the newest
 * `window` events are masked; recomputed on every request. Every item is an event.
 */
export const observationMasking = (window = 100): Policy => ({
  name: "openhands_masking",
  placeholder: "<MASKED>",
  before: (ctx) => {
    const { session, request } = ctx
    let events = 0
    for (let m = request.start; m < request.end; m++) events += session.messages[m]!.seqs.length
    const cleared = new Set<number>()
    let seen = 0
    for (let m = request.start; m < request.end; m++) {
      const message = session.messages[m]!
      if (message.kind === "result" && seen < events - window) cleared.add(m)
      seen += message.seqs.length
    }
    ctx.view.cleared = cleared
  }
})

/**
 * TencentDB mild offload (ratio 0.5 of a 200,000 window): when the context exceeds `ratio x window` tokens, the
 * oldest tool results are replaced by a placeholder until it is at most that, and stay replaced.
 */
export const tencentMild = (ratio = 0.5, window = 200_000): Policy => ({
  name: "tencentdb_mild",
  placeholder: "[offloaded]",
  before: (ctx) => {
    const limit = ratio * window
    let tokens = ctx.visibleTokens()
    if (tokens <= limit) return
    for (const m of resultsIn(ctx)) {
      if (tokens <= limit) break
      if (ctx.view.cleared.has(m) || ctx.session.units[ctx.session.messages[m]!.unit]!.answeredAt >= ctx.request.end) continue
      ctx.view.cleared.add(m)
      tokens = ctx.visibleTokens()
    }
  }
})

/** The field's policies, as the issue names them. */
export const fieldPolicies = (): ReadonlyArray<Policy> => [dsh(), clearToolUses(), microcompact(), observationMasking(), tencentMild()]

/** A stub as Baton renders it for `unit`. */
export const stubOf = (session: Session, unit: number): string =>
  ToolResultOffload.stubText(session.units[unit]!.calls, ToolResultOffload.refOf(session.units[unit]!.seqs))

/** The result of one policy on one session. */
export interface RunResult {
  readonly policy: string
  readonly requests: number
  readonly weighted: number
  readonly cacheRead: number
  readonly cacheWrite: number
  /** Requests whose cached prefix is shorter than the previous request (compactions in the transcript excepted). */
  readonly prefixBreaks: number
  /** Units Baton stubbed (empty for the others). */
  readonly stubbedUnits: ReadonlyArray<number>
}

/**
 * Replays `session` under `policy`. `count` counts placeholder and stub texts (cached per session and run). Linear in
 * requests x messages.
 */
export const run = (session: Session, policy: Policy, options: RunOptions, count: (text: string) => number): RunResult => {
  const scale = (n: number) => options.tokenScale === 1 ? n : Math.round(n * options.tokenScale)
  const placeholderTokens = scale(count(policy.placeholder))
  const stubCache = new Map<number, number>()
  const stubTokens = (unit: number) => {
    let n = stubCache.get(unit)
    if (n === undefined) {
      n = scale(count(stubOf(session, unit)))
      stubCache.set(unit, n)
    }
    return n
  }
  const tokens = (m: number) => scale(session.messages[m]!.tokens)
  const view: View = { stubbed: new Set(), cleared: new Set() }
  const visible = (request: Request) => {
    const keys: Array<string> = []
    const sizes: Array<number> = []
    const emitted = new Set<number>()
    for (let m = request.start; m < request.end; m++) {
      const unit = session.messages[m]!.unit
      if (view.stubbed.has(unit)) {
        if (emitted.has(unit)) continue
        emitted.add(unit)
        keys.push(`s${unit}`)
        sizes.push(stubTokens(unit))
      } else if (view.cleared.has(m)) {
        keys.push(`c${m}`)
        sizes.push(placeholderTokens)
      } else {
        keys.push(`m${m}`)
        sizes.push(tokens(m))
      }
    }
    return { keys, sizes }
  }
  let previous: { keys: Array<string>; start: number; timeMs: number | null } | null = null
  let weighted = 0
  let cacheRead = 0
  let cacheWrite = 0
  let prefixBreaks = 0
  session.requests.forEach((request, r) => {
    const gap = previous !== null && previous.timeMs !== null && request.timeMs !== null ? request.timeMs - previous.timeMs : null
    const ctx: PolicyContext = {
      session,
      r,
      request,
      view,
      options,
      tokens,
      stubTokens,
      msSinceLastRequest: options.ttlMs === null ? null : gap,
      visibleTokens: () => options.systemTokens + visible(request).sizes.reduce((n, s) => n + s, 0)
    }
    policy.before(ctx)
    const { keys, sizes } = visible(request)
    const input = options.systemTokens + sizes.reduce((n, s) => n + s, 0)
    let read = 0
    const warm = previous !== null && (options.ttlMs === null || gap === null || gap <= options.ttlMs)
    if (previous !== null && warm) {
      read = options.systemTokens
      let k = 0
      while (k < keys.length && k < previous.keys.length && keys[k] === previous.keys[k]) read += sizes[k++]!
      if (k < previous.keys.length && previous.start === request.start) prefixBreaks++
    }
    cacheRead += read
    cacheWrite += input - read
    weighted += 0.1 * read + 1.25 * (input - read)
    previous = { keys, start: request.start, timeMs: request.timeMs }
  })
  return { policy: policy.name, requests: session.requests.length, weighted, cacheRead, cacheWrite, prefixBreaks, stubbedUnits: [...view.stubbed] }
}

/** The ref the stub of `unit` names (what the model would pass to `thread_read`), or `null` if it names none. */
export const stubRef = (session: Session, unit: number): string | null => ToolResultOffload.refOfStub(stubOf(session, unit))
