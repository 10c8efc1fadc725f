/**
 * GatewayOffload: Baton's tool-result offload on a gateway request (issue 14 item 3, docs/gateway.md "On the way
 * out"). The same policy as the model-API adapters (`ToolResultOffload.decide`, the route's instance settings
 * `toolResultOffload`), applied to the body the agent sent before it is forwarded. The policy's side is shared by the
 * wires (`plan` over a `Shape`: how a wire's history holds calls and results); this module is also the Anthropic
 * Messages wire (`anthropicShape`, `anthropic`); OpenAI Responses is `GatewayResponsesOffload`, OpenAI Chat
 * Completions `GatewayChatOffload`. For Anthropic:
 *
 * - Units: an assistant message's `tool_use` calls with the user message whose `tool_result` blocks answer them;
 *   every other message a unit of its own. The agent's newest message is pinned: it goes out unchanged.
 * - A stub replaces a `tool_result` block's `content` with one line (`ToolResultOffload.stubText`: the tool, its short
 *   arguments, the characters of its output) and the ref `tool:<tool_use id>`, which `thread_read` reads back from
 *   the conversation's thread; the block keeps its other fields (`tool_use_id`, `is_error`, `cache_control`), the
 *   `tool_use` blocks and every other block stay as sent. A hidden `thread_read` round (the gateway's own, not in
 *   the thread) is stubbed like any unit once consumed, its stub's ref what the call read (`readRefOf`).
 * - A continuation after hidden `thread_read` calls carries the agent's last messages breakpoint on its own last
 *   block (`withMovedBreakpoint`, Anthropic), so the round is cached where it ends.
 * - The state is the conversation's `offloaded` ids (durable, `gateway_conversations.offloaded`): they only grow, and
 *   every request renders all of them, so the prefix changes only at a flush (where the policy decided new stubs),
 *   and each later request extends it again.
 * - `thread_read` (`ThreadRead.definition`) is appended to the request's `tools` on every request (when the agent sends
 *   tools), so the tools part of the prefix is the same from the first request on.
 * - The upstream's `thread_read` calls (`readsOf`) are answered by `Gateway`, which continues the conversation
 *   (`continuation`) and splices a stream's hops (`makeHop`) so the agent sees one message; `Offload` is what
 *   `Gateway` needs of a wire for that. Calls beside the agent's own (`besideOf`) are answered too, without a
 *   continuation: the agent gets the reply without them, and the expansion ends with the gateway's answers, which
 *   the agent's next request gets joined with its own results (`anthropicShape.joinAnswers`).
 *
 * Pure: no I/O, no clock (the caller passes the time since the conversation's previous request).
 */
import { ToolResultOffload } from "@baton/context"
import { GatewayMemo, type GatewayThreads, ThreadRead } from "@baton/orchestration"
import { Sse } from "@baton/providers"
import * as GatewayAnthropic from "./GatewayAnthropic.js"
import * as GatewayMedia from "./GatewayMedia.js"
import { isRecord, parseJson } from "./GatewayDialect.js"

/** The conversation's state and the instance's settings a rewrite needs. */
export interface Input {
  /** The agent's parsed body (not modified). */
  readonly body: Record<string, unknown>
  /** The conversation's stubbed call ids so far. */
  readonly offloaded: ReadonlyArray<string>
  readonly settings: ToolResultOffload.Settings
  /** The instance's context window (tokens). */
  readonly windowTokens: number
  /**
   * The instance's prices (US dollars per million tokens), from which the dialect's `pricing` makes the policy's
   * cache multipliers.
   */
  readonly prices: Prices
  /** Requests the conversation made before this one. */
  readonly requestsSoFar: number
  /** Milliseconds since the conversation's previous request (`null`: none or unknown). */
  readonly msSinceLastRequest: number | null
  /** Tokens of a text (Baton's counter). */
  readonly count: (text: string) => number
  /**
   * The conversation's hidden `thread_read` rounds: a received message's fingerprint -> the messages the upstream
   * exchanged in its place (sent instead of it; absent: none). A list that ends with an entry that is not the
   * model's (the gateway's answers to `thread_read` calls beside the agent's own) has it joined with the entry the
   * agent sent next where the shape says so (`Shape.joinAnswers`), else sent before that entry.
   */
  readonly expansions?: Readonly<Record<string, ReadonlyArray<unknown>>> | undefined
  /** A message's key in `expansions` (`GatewayThreads.expansionKeyOf`: its content print, else its fingerprint). */
  readonly fingerprint?: ((message: unknown) => string) | undefined
  /**
   * A message's fingerprint (`GatewayThreads.fingerprintOf`): the key of expansions recorded before content prints,
   * and the only one looked up for a message whose `fingerprint` key another model message of the request shares
   * (two answers that differ only in their thinking: which one the rounds came after is not known).
   */
  readonly fingerprintOf?: ((message: unknown) => string) | undefined
}

/** An instance's prices (US dollars per million tokens). */
export interface Prices {
  readonly input: number
  readonly cacheRead: number
  readonly cacheWrite: number
}

/**
 * A flush: what this request newly stubs (`refs`: the stubs' refs, `tool:<call id>`, or for a hidden `thread_read`
 * round what it read), the tier, and the request's tokens before and after.
 */
export interface Flush {
  readonly refs: ReadonlyArray<string>
  readonly tier: ToolResultOffload.Tier
  readonly tokensBefore: number
  readonly tokensAfter: number
}

/**
 * The rewritten body, the conversation's new `offloaded` ids, and the flush (`null`: none on this request);
 * `changed`: whether the body differs from the agent's (false: no stub and no tool added, forward the agent's bytes).
 */
export interface Output {
  readonly body: Record<string, unknown>
  readonly changed: boolean
  readonly offloaded: ReadonlyArray<string>
  readonly flush: Flush | null
}

/** A tool call of the history: its id, its tool, and its arguments as text (for the stub line). */
export interface Call {
  readonly id: string
  readonly name: string
  readonly argumentsText: string
}

/**
 * How one wire's history looks to the policy (the parts of a rewrite that differ between Anthropic Messages and
 * OpenAI Responses; `plan` is the rest, shared):
 *
 * - `history`: the body's history array (`null`: nothing to rewrite, e.g. a Responses string `input`); `withHistory`
 *   the body with another one.
 * - `calls`: the tool calls an entry makes; `answers`: the call ids whose results it carries; `model`: whether the
 *   entry is the model's (an Anthropic assistant message; a Responses output item sent back); `joins`: whether a model
 *   entry right after another model entry is part of the same response (Responses: one response is several items).
 * - `stub`: the entry with its results of the calls in `stubbed` replaced by `ToolResultOffload.stubText` lines (the
 *   same object when none).
 * - `opaque`: whether the entry carries a tool result with a part that is not text (an image, a document): the thread
 *   records such a part as `[type]`, so `thread_read` could not give it back, and its unit is never stubbed.
 * - `offer`: the tools with `thread_read` appended (the same array when it is there; `null` when the body has no tools);
 *   a function of the body's `tools` only.
 * - `system`: what the body sends besides the history and tools (counted as fixed tokens).
 * - `pricing`: the policy's cache multipliers from the instance's prices.
 */
export interface Shape {
  readonly history: (body: Record<string, unknown>) => ReadonlyArray<unknown> | null
  readonly withHistory: (body: Record<string, unknown>, history: ReadonlyArray<unknown>) => Record<string, unknown>
  readonly calls: (entry: Record<string, unknown>) => ReadonlyArray<Call>
  readonly answers: (entry: Record<string, unknown>) => ReadonlyArray<string>
  readonly model: (entry: Record<string, unknown>) => boolean
  readonly joins: boolean
  readonly stub: (entry: Record<string, unknown>, stubbed: ReadonlySet<string>, calls: ReadonlyMap<string, Call>) => Record<string, unknown>
  readonly opaque: (entry: Record<string, unknown>) => boolean
  readonly offer: (body: Record<string, unknown>) => ReadonlyArray<unknown> | null
  readonly system: (body: Record<string, unknown>) => unknown
  readonly pricing: (prices: Prices) => ToolResultOffload.CachePricing
  /**
   * Whether the gateway answers `thread_read` calls beside the agent's own on this wire (`Offload.besideOf`): a unit
   * of such calls is then stubbable like a hidden round (the reads' stubs name what they read, the agent's calls'
   * their `tool:` refs). Absent or false: the agent answered those calls itself, and such a unit is never stubbed.
   */
  readonly readsBeside?: boolean | undefined
  /**
   * Where the wire answers calls inside the message that follows (Anthropic: every `tool_result` for an assistant
   * message's calls must be in the very next user message): an expansion that ends with an entry of answers (not the
   * model's: the gateway's answers to `thread_read` calls beside the agent's own calls, `Offload.expansions`) is joined
   * with the entry the agent sent after the message it stands for. Returns that entry with the answers' parts first,
   * or `null` when it cannot hold them (the answers then go out as an entry of their own before it). Absent: the
   * answers are entries of their own (Responses, Chat Completions).
   */
  readonly joinAnswers?: ((answers: Record<string, unknown>, next: Record<string, unknown>) => Record<string, unknown> | null) | undefined
}

/** The characters of a tool result's content: a string's length, else its parts' texts (other parts as JSON). */
export const contentChars = (content: unknown): number =>
  typeof content === "string"
    ? content.length
    : Array.isArray(content)
    ? content.reduce((n: number, b) => n + (isRecord(b) && typeof b.text === "string" ? b.text.length : JSON.stringify(b).length), 0)
    : 0

/** Whether a tool result's content has a part that is not text (an image, a document): the thread cannot give it back. */
export const hasNonText = (content: unknown): boolean => Array.isArray(content) && content.some((p) => !(isRecord(p) && typeof p.text === "string"))

/**
 * What a hidden `thread_read` call read, as a ref the conversation's thread can answer: the call's `refs` (parsed by
 * `ThreadRead.parseRefs`, parts joined with `", "`); `null` when they do not parse or could not stand in a stub's
 * header (a `]`). The gateway's own `thread_read` rounds are not in the thread, so their stubs name what they read.
 */
export const readRefOf = (input: unknown): string | null => {
  const refs = isRecord(input) && typeof input.refs === "string" ? input.refs : null
  if (refs === null || refs.includes("]") || ThreadRead.parseRefs(refs)._tag === "Left") return null
  return refs.split(/[\s,]+/).filter((p) => p.length > 0).join(", ")
}

/** What a `thread_read` call's arguments ask to read (`readRefOf` of its parsed arguments). */
const readRefOfCall = (call: Call): string | null => readRefOf(parseJson(call.argumentsText))

/** The ref a stub of `call`'s result names: what a `thread_read` call read (`readRefOf`), else the call itself. */
export const refOfCall = (id: string, call: Call | undefined): string =>
  (call?.name === ThreadRead.definition.name ? readRefOfCall(call) : null) ?? `tool:${id}`

/** The stub line of the result of `call` (`id` when the call is not in the history) whose content held `chars` characters. */
export const stubLine = (id: string, call: Call | undefined, chars: number): string =>
  ToolResultOffload.stubText(
    [{ toolName: call?.name ?? "tool", argumentsText: call?.argumentsText ?? "{}", releasedChars: chars }],
    refOfCall(id, call)
  )

const blocksOf = (m: Record<string, unknown>): ReadonlyArray<unknown> => (Array.isArray(m.content) ? m.content : [])

/** The `tool_result` block `block` as its stub (answering `call`). */
const stubBlock = (block: Record<string, unknown>, call: Call | undefined): Record<string, unknown> => ({
  ...block,
  content: stubLine(String(block.tool_use_id), call, contentChars(block.content))
})

/** `message` with its `tool_result` blocks answering a call of `stubbed` replaced by stubs (the same object when none). */
const stubMessage = (message: Record<string, unknown>, stubbed: ReadonlySet<string>, calls: ReadonlyMap<string, Call>): Record<string, unknown> => {
  if (message.role !== "user" || !Array.isArray(message.content)) return message
  let changed = false
  const content = message.content.map((b) => {
    if (!isRecord(b) || b.type !== "tool_result" || typeof b.tool_use_id !== "string" || !stubbed.has(b.tool_use_id)) return b
    changed = true
    return stubBlock(b, calls.get(b.tool_use_id))
  })
  return changed ? { ...message, content } : message
}

/**
 * Cache multipliers from an instance's prices as the model-API adapters make them (`ToolResultOffload.pricingOf`:
 * `cacheRead / input`, `cacheWrite / input`, a write price of 0 as 1; Anthropic's when the input price is 0), with a
 * 5-minute TTL (`ToolResultOffload.anthropicPricing`).
 */
export const anthropicCache = (prices: Prices): ToolResultOffload.CachePricing => ToolResultOffload.pricingOf(prices)

/** The Anthropic Messages shape: `messages`, `tool_use` blocks of assistant messages, `tool_result` blocks of user messages. */
export const anthropicShape: Shape = {
  history: (body) => (Array.isArray(body.messages) ? body.messages : null),
  withHistory: (body, messages) => ({ ...body, messages }),
  calls: (m) =>
    m.role === "assistant"
      ? blocksOf(m).flatMap((b): Array<Call> =>
        isRecord(b) && b.type === "tool_use" && typeof b.id === "string" ? [{ id: b.id, name: String(b.name ?? "tool"), argumentsText: JSON.stringify(b.input ?? {}) }] : []
      )
      : [],
  answers: (m) =>
    m.role === "user" ? blocksOf(m).flatMap((b) => (isRecord(b) && b.type === "tool_result" && typeof b.tool_use_id === "string" ? [b.tool_use_id] : [])) : [],
  model: (m) => m.role === "assistant",
  joins: false,
  stub: stubMessage,
  opaque: (m) => m.role === "user" && blocksOf(m).some((b) => isRecord(b) && b.type === "tool_result" && hasNonText(b.content)),
  offer: (body) => {
    const tools = Array.isArray(body.tools) ? body.tools : null
    return tools === null || tools.some((t) => isRecord(t) && t.name === ThreadRead.definition.name)
      ? tools
      : [...tools, { name: ThreadRead.definition.name, description: ThreadRead.definition.description, input_schema: ThreadRead.definition.inputSchema }]
  },
  system: (body) => body.system ?? "",
  pricing: anthropicCache,
  readsBeside: true,
  joinAnswers: (answers, next) => {
    if (answers.role !== "user" || next.role !== "user" || !Array.isArray(answers.content)) return null
    const rest = typeof next.content === "string" ? [{ type: "text", text: next.content }] : Array.isArray(next.content) ? next.content : null
    return rest === null ? null : { ...next, content: [...answers.content, ...rest] }
  }
}

/**
 * What `plan` computes of a history entry, kept for the entries the gateway interned (`GatewayMemo`: the same objects
 * from one request of a conversation to the next), so a request computes only its new entries': a shape's calls,
 * answers and opacity of an entry, an entry's stubbed form (by the ids it stubs and their calls), the tools offered,
 * and token counts (by counter). Entries that are not interned are computed every time; the answers are the same.
 */
interface ShapeMemo {
  readonly calls: (entry: Record<string, unknown>) => ReadonlyArray<Call>
  readonly answers: (entry: Record<string, unknown>) => ReadonlyArray<string>
  readonly opaque: (entry: Record<string, unknown>) => boolean
  readonly offer: (tools: object) => ReadonlyArray<unknown> | null
  readonly stubs: WeakMap<object, Map<string, Record<string, unknown>>>
  /** The latest `Snapshot` of a history, by its first entry (one per conversation start; a prefix check decides). */
  readonly snapshots: WeakMap<object, Snapshot>
  /** What pins a unit whatever the request (`plan`'s `staticPin`), by the unit (never changed once shared). */
  readonly staticPins: WeakMap<ScanUnit, boolean>
  /** A unit's stub tokens as `plan` last counted them, by the unit (never changed once shared): see `UnitStubTokens`. */
  readonly stubTokens: WeakMap<ScanUnit, UnitStubTokens>
}

/**
 * The tokens of a unit's entries as its stub would send them (`Situation.units[].stubTokens`), with what they were
 * computed from: the counter, each member's rendered entry and each of the unit's calls (by identity: interned
 * entries and the calls read from them are frozen). The same inputs give the same count, so a later request of the
 * conversation whose unit, counter, rendered members and calls are the same objects takes it instead of making the
 * stubs' keys and looking them up again for every unit of the history.
 */
interface UnitStubTokens {
  readonly count: (text: string) => number
  readonly members: ReadonlyArray<Record<string, unknown>>
  readonly calls: ReadonlyArray<Call | undefined>
  readonly tokens: number
}
const shapeMemos = new WeakMap<Shape, ShapeMemo>()
const memoOf = (shape: Shape): ShapeMemo => {
  let m = shapeMemos.get(shape)
  if (m === undefined) {
    shapeMemos.set(
      shape,
      m = {
        calls: GatewayMemo.memo(shape.calls),
        answers: GatewayMemo.memo(shape.answers),
        opaque: GatewayMemo.memo(shape.opaque),
        offer: GatewayMemo.memo((tools: object) => {
          const offered = shape.offer({ tools })
          // Kept frozen: the agent's tools are; `thread_read`'s entry is a copy (the definition is shared).
          return offered === null || offered === tools ? offered : GatewayMemo.adopt(offered.map((t) => (GatewayMemo.isInterned(t) ? t : structuredClone(t))))
        }),
        stubs: new WeakMap(),
        snapshots: new WeakMap(),
        staticPins: new WeakMap(),
        stubTokens: new WeakMap()
      }
    )
  }
  return m
}
const tokenMemos = new WeakMap<(text: string) => number, (value: object) => number>()
/** The tokens of `value`'s JSON by `count`, inline media as `GatewayMedia.jsonTokens` counts them (kept for an interned value). */
const tokensOf = (count: (text: string) => number, value: unknown): number => {
  if (!GatewayMemo.isInterned(value)) return GatewayMedia.jsonTokens(count, value)
  let f = tokenMemos.get(count)
  if (f === undefined) tokenMemos.set(count, f = GatewayMemo.memo((v: object) => GatewayMedia.jsonTokens(count, v)))
  return f(value as object)
}

/**
 * `shape.stub(entry, stubbed, calls)`, kept for an interned entry by the ids it stubs and their calls (the stub is
 * interned too, so its tokens and JSON are kept as well).
 */
const stubOf = (shape: Shape, memo: ShapeMemo, entry: Record<string, unknown>, stubbed: ReadonlySet<string>, calls: ReadonlyMap<string, Call>) => {
  if (!GatewayMemo.isInterned(entry)) return shape.stub(entry, stubbed, calls)
  const ids = memo.answers(entry).filter((id) => stubbed.has(id))
  if (ids.length === 0) return entry
  const key = ids.map((id) => {
    const c = calls.get(id)
    return c === undefined ? id : `${id}\u0000${c.name}\u0000${c.argumentsText}`
  }).join("\u0001")
  let known = memo.stubs.get(entry)
  if (known === undefined) memo.stubs.set(entry, known = new Map())
  let out = known.get(key)
  if (out === undefined) {
    out = shape.stub(entry, stubbed, calls)
    if (out !== entry) GatewayMemo.adopt(out)
    known.set(key, out)
  }
  return out
}

/**
 * A unit of the history as `plan`'s scan builds it: its calls, the call ids its results answer, whether the scan
 * pinned it (the newest input's, a result answering calls of several units, a call id that could not name a ref), its
 * result entries and all its entries (positions in the history). Once a `Snapshot` holds a unit it is never changed:
 * a later entry that adds to it changes a copy (`plan`'s `own`).
 */
interface ScanUnit {
  readonly calls: Array<Call>
  readonly answered: Set<string>
  pinned: boolean
  readonly results: Array<number>
  readonly members: Array<number>
}

/**
 * `plan`'s scan of a history stopped before entry `entries.length` (a request's newest input), kept so that the
 * conversation's next request, whose history starts with the same entries (the same interned objects, `GatewayMemo`:
 * frozen, so the same values), scans only its entries from there: the calls by id, the unit of each call, the units,
 * the unit of each entry, whether each entry starts a model response, and the responses started up to each entry.
 * `render`: that request's stubbed entries and their tokens before the snapshot's point, with what they depend on (the
 * stubbed ids and their calls, the counter), reused when the next request stubs the same ids with the same calls.
 */
interface Snapshot {
  readonly entries: ReadonlyArray<Record<string, unknown>>
  readonly calls: ReadonlyMap<string, Call>
  readonly unitOfCall: ReadonlyMap<string, number>
  readonly units: ReadonlyArray<ScanUnit>
  readonly unitOfMessage: ReadonlyArray<number>
  readonly startsResponse: ReadonlyArray<boolean>
  readonly starts: ReadonlyArray<number>
  render: {
    readonly already: ReadonlySet<string>
    readonly calls: ReadonlyMap<string, Call>
    readonly count: (text: string) => number
    readonly rendered: ReadonlyArray<Record<string, unknown>>
    readonly tokens: ReadonlyArray<number>
  } | null
}

/** Whether rendering with `already` and `calls` stubs every entry as a render with `before`'s did. */
const sameStubs = (before: NonNullable<Snapshot["render"]>, already: ReadonlySet<string>, calls: ReadonlyMap<string, Call>): boolean => {
  if (before.already.size !== already.size) return false
  for (const id of already) if (!before.already.has(id) || before.calls.get(id) !== calls.get(id)) return false
  return true
}

/**
 * `sent` (a history, `shape`'s entries) with the recorded rounds (`expansions`, by a model entry's key `fingerprint`,
 * else its fingerprint `fingerprintOf` for rounds recorded before content prints) in place of the model entries the
 * agent received after them: the hidden `thread_read` rounds, and the gateway's answers to `thread_read` calls beside
 * the agent's own (an expansion that ends with an entry of answers, joined with the entry the agent sent next where
 * the shape says so, `Shape.joinAnswers`, else sent before that entry). The newest input (the entries after the last
 * model entry, and at least the last entry) is never replaced; a key two model entries share is not looked up.
 * Without expansions or `fingerprint`: `sent` itself.
 */
export const expand = (
  shape: Shape,
  sent: ReadonlyArray<Record<string, unknown>>,
  expansions: Readonly<Record<string, ReadonlyArray<unknown>>>,
  fingerprint: ((message: unknown) => string) | undefined,
  fingerprintOf: ((message: unknown) => string) | undefined
): ReadonlyArray<Record<string, unknown>> => {
  if (Object.keys(expansions).length === 0 || fingerprint === undefined) return sent
  const sentNewest = newestEntryOf(shape, sent)
  const keys = sent.map((m, i) => (i < sentNewest && shape.model(m) ? fingerprint(m) : null))
  const uses = new Map<string, number>()
  for (const k of keys) if (k !== null) uses.set(k, (uses.get(k) ?? 0) + 1)
  const out: Array<Record<string, unknown>> = []
  // The answers an expansion ends with (thread_read calls beside the agent's own), joined with the next entry.
  let answers: Record<string, unknown> | null = null
  sent.forEach((m, i) => {
    const key = keys[i]!
    // A shared key is never looked up, nor a fingerprint equal to it (a message with nothing left out).
    const print = key === null ? undefined : fingerprintOf?.(m)
    const exact = print === undefined || print === key ? undefined : expansions[print]
    const found = key === null ? undefined : uses.get(key) === 1 ? expansions[key] ?? exact : exact
    const entries = found === undefined ? [m] : found.map((e) => (isRecord(e) ? e : {}))
    if (answers !== null) {
      const joined = shape.joinAnswers?.(answers, entries[0]!) ?? null
      if (joined === null) out.push(answers)
      else entries[0] = joined
      answers = null
    }
    const tail = entries.at(-1)!
    if (found !== undefined && entries.length > 1 && shape.joinAnswers !== undefined && !shape.model(tail) && i + 1 < sent.length) {
      answers = tail
      entries.pop()
    }
    out.push(...entries)
  })
  return out
}

/** The index of a history's newest input: its entries after the last model entry (at most the last entry). */
const newestEntryOf = (shape: Shape, list: ReadonlyArray<Record<string, unknown>>): number => {
  let i = list.length
  while (i > 0 && !shape.model(list[i - 1]!)) i--
  return Math.min(i, list.length - 1)
}

/**
 * Applies the policy to a request of `shape`'s wire (see the module docblock): renders the conversation's stubs, asks
 * `ToolResultOffload.decide` whether to flush more now, and offers `thread_read`. Never touches the agent's newest
 * input (the entries after the last model entry; at least the last entry). What it computes of interned entries
 * (`GatewayMemo`) is kept for the next request (`ShapeMemo`), and so is its scan of the history up to the newest input
 * and the stubbed entries there (`Snapshot`): a request whose history starts with the previous request's interned
 * entries scans and renders only the entries after them (the output is the same as without the snapshot:
 * `GatewayOffloadIncremental.test.ts`). `incremental: false` computes everything from the start (the reference).
 */
export const plan = (shape: Shape, input: Input, incremental = true): Output => {
  const { body, count } = input
  const memo = memoOf(shape)
  const history = shape.history(body)
  if (history === null || !history.every(isRecord)) return { body, changed: false, offloaded: input.offloaded, flush: null }
  const sent = history as ReadonlyArray<Record<string, unknown>>
  // The hidden thread_read rounds go out again in place of the message the agent received (never its newest input).
  const messages = expand(shape, sent, input.expansions ?? {}, input.fingerprint, input.fingerprintOf)
  const newest = newestEntryOf(shape, messages)
  // The previous request's scan, when this history starts with its entries (and its newest input is not before them).
  const first = messages[0]
  const known = incremental && first !== undefined ? memo.snapshots.get(first) : undefined
  const snapshot = known !== undefined && known.entries.length <= newest && known.entries.every((e, i) => e === messages[i]) ? known : undefined
  const from = snapshot?.entries.length ?? 0
  const calls = new Map<string, Call>(snapshot?.calls)
  const unitOfCall = new Map<string, number>(snapshot?.unitOfCall)
  const units: Array<ScanUnit> = snapshot === undefined ? [] : snapshot.units.slice()
  const unitOfMessage: Array<number> = snapshot === undefined ? [] : snapshot.unitOfMessage.slice()
  /** Whether entry i is the start of a model response (for counting the responses after a result). */
  const startsResponse: Array<boolean> = snapshot === undefined ? [] : snapshot.startsResponse.slice()
  /** The responses started by the entries up to i (inclusive). */
  const starts: Array<number> = snapshot === undefined ? [] : snapshot.starts.slice()
  // The units this request may change in place (made or copied by it since the last snapshot); others are shared.
  let owned = new Set<number>()
  const own = (index: number): ScanUnit => {
    if (!owned.has(index)) {
      const u = units[index]!
      units[index] = { calls: [...u.calls], answered: new Set(u.answered), pinned: u.pinned, results: [...u.results], members: [...u.members] }
      owned.add(index)
    }
    return units[index]!
  }
  let made: Snapshot | undefined
  // Whether the entries so far are all interned (a snapshot is kept only then: its entries are compared by identity).
  let interned = true
  for (let i = from; i < messages.length; i++) {
    const m = messages[i]!
    if (i === newest && i > 0 && incremental && interned) {
      made = {
        entries: messages.slice(0, i),
        calls: new Map(calls),
        unitOfCall: new Map(unitOfCall),
        units: units.slice(),
        unitOfMessage: unitOfMessage.slice(),
        startsResponse: startsResponse.slice(),
        starts: starts.slice(),
        render: null
      }
      owned = new Set()
    }
    if (interned && !GatewayMemo.isInterned(m)) interned = false
    const isNewest = i >= newest
    const model = shape.model(m)
    const previousModel = i > 0 && shape.model(messages[i - 1]!)
    const start = model && !(shape.joins && previousModel)
    startsResponse.push(start)
    starts.push((i > 0 ? starts[i - 1]! : 0) + (start ? 1 : 0))
    const answered = memo.answers(m)
    if (answered.length > 0) {
      const owners = new Set(answered.map((id) => unitOfCall.get(id)))
      const owner = owners.size === 1 ? [...owners][0] : undefined
      if (owner !== undefined) {
        const u = own(owner)
        u.results.push(i)
        u.members.push(i)
        for (const id of answered) u.answered.add(id)
        if (isNewest) u.pinned = true
        unitOfMessage.push(owner)
        continue
      }
      for (const o of owners) if (o !== undefined && !units[o]!.pinned) own(o).pinned = true
    }
    const ownCalls = model ? memo.calls(m) : []
    const pinned = isNewest || ownCalls.some((c) => !/^[^\s,]+$/.test(c.id))
    let u: number
    if (model && shape.joins && previousModel) {
      // The same response: one unit with the entries before it.
      u = unitOfMessage[i - 1]!
      const joined = own(u)
      joined.calls.push(...ownCalls)
      joined.members.push(i)
      if (pinned) joined.pinned = true
    } else {
      u = units.push({ calls: [...ownCalls], answered: new Set(), pinned, results: [], members: [i] }) - 1
      owned.add(u)
    }
    for (const c of ownCalls) {
      calls.set(c.id, c)
      unitOfCall.set(c.id, u)
    }
    unitOfMessage.push(u)
  }
  if (made !== undefined) memo.snapshots.set(first!, made)
  // Pins that depend on a unit alone (`staticPin`), kept by unit: a unit of the gateway's own thread_read calls (a
  // hidden round, or where the wire has `readsBeside` calls beside the agent's own) is not in the thread: its stub
  // names what the calls read (`readRefOf`), which the thread holds, and the agent's calls' results by their `tool:`
  // refs; one whose refs cannot be named, or (without `readsBeside`) a call beside the agent's own tools, is never
  // stubbed. A result the thread cannot give back (an image) goes out as sent: its stub would lose it for good.
  const staticPin = (u: ScanUnit): boolean => {
    let p = memo.staticPins.get(u)
    if (p === undefined) {
      const reads = u.calls.filter((c) => c.name === ThreadRead.definition.name)
      p = (reads.length > 0 && ((reads.length < u.calls.length && shape.readsBeside !== true) || reads.some((c) => readRefOfCall(c) === null))) ||
        u.results.some((i) => memo.opaque(messages[i]!))
      memo.staticPins.set(u, p)
    }
    return p
  }
  const pinnedUnits = units.map((u) => u.pinned || staticPin(u))
  // What thread_read returned stays verbatim while the model is likely still using it (as in the adapters).
  const seen = new Set<number>()
  for (let i = messages.length - 1; i >= 0 && seen.size < ToolResultOffload.defaults.keepNewestUnits; i--) {
    const index = unitOfMessage[i]!
    const u = units[index]!
    if (!shape.model(messages[i]!) || u.calls.length === 0 || seen.has(index)) continue
    seen.add(index)
    if (u.calls.some((c) => c.name === ThreadRead.definition.name)) pinnedUnits[index] = true
  }
  const already = new Set(input.offloaded)
  // The entries before the snapshot's point rendered as the previous request did when it stubbed the same ids.
  const before = snapshot?.render ?? null
  const reused = before !== null && before.count === count && sameStubs(before, already, calls) ? from : 0
  const rendered = messages.map((m, i) => (i < reused ? before!.rendered[i]! : i >= newest ? m : stubOf(shape, memo, m, already, calls)))
  const tokens = rendered.map((m, i) => (i < reused ? before!.tokens[i]! : tokensOf(count, m)))
  if (made !== undefined) {
    made.render = { already, calls, count, rendered: rendered.slice(0, made.entries.length), tokens: tokens.slice(0, made.entries.length) }
  }
  // The responses the model started after each unit's last result (after an earlier one when none after it).
  const total = messages.length === 0 ? 0 : starts[messages.length - 1]!
  const answeredRequests = units.map((u) => {
    for (let k = u.results.length - 1; k >= 0; k--) {
      const i = u.results[k]!
      if (!shape.model(messages[i]!) && total - starts[i]! > 0) return total - starts[i]!
    }
    return 0
  })
  const tools = Array.isArray(body.tools) ? body.tools : null
  const offered = GatewayMemo.isInterned(body.tools) ? memo.offer(body.tools as object) : shape.offer(body)
  const situation: ToolResultOffload.Situation = {
    items: rendered.map((_, i) => ({ seq: i + 1, tokens: tokens[i]!, unit: unitOfMessage[i]!, pinned: pinnedUnits[unitOfMessage[i]!]! })),
    units: units.map((u, index): ToolResultOffload.Unit => {
      const stubbed = u.calls.length > 0 && u.calls.every((c) => already.has(c.id))
      const answered = u.calls.every((c) => u.answered.has(c.id))
      // The stub of a unit that cannot be stubbed (pinned: the newest input's, or unanswered) is never read by
      // `decide` (only eligible units' are): it is not made (0), which spares the newest unit's stub every request.
      let stubTokens = 0
      if (u.calls.length > 0 && !stubbed && answered && !pinnedUnits[index]) {
        // Kept by unit (`UnitStubTokens`) when incremental; the reference (`incremental: false`) counts every time.
        const known = incremental ? memo.stubTokens.get(u) : undefined
        if (
          known !== undefined && known.count === count && known.members.every((m, k) => m === rendered[u.members[k]!]) &&
          known.calls.every((c, k) => c === calls.get(u.calls[k]!.id))
        ) {
          stubTokens = known.tokens
        } else {
          const ids = new Set(u.calls.map((c) => c.id))
          for (const i of u.members) stubTokens += u.results.includes(i) ? tokensOf(count, stubOf(shape, memo, rendered[i]!, ids, calls)) : tokens[i]!
          if (incremental) {
            memo.stubTokens.set(u, { count, members: u.members.map((i) => rendered[i]!), calls: u.calls.map((c) => calls.get(c.id)), tokens: stubTokens })
          }
        }
      }
      return {
        isTool: u.calls.length > 0,
        answered,
        stubbed,
        stubTokens,
        answeredRequests: answeredRequests[index]!
      }
    }),
    systemTokens: tokensOf(count, shape.system(body)) + tokensOf(count, offered ?? []),
    windowTokens: input.windowTokens,
    pricing: shape.pricing(input.prices),
    requestsSoFar: input.requestsSoFar,
    msSinceLastRequest: input.msSinceLastRequest
  }
  const decision = ToolResultOffload.decide(situation, input.settings)
  const fresh = decision.units.flatMap((u) => units[u]!.calls.map((c) => c.id)).filter((id) => !already.has(id))
  const offloaded = [...input.offloaded, ...fresh]
  const now = new Set(fresh)
  const out = shape.withHistory(body, fresh.length === 0 ? rendered : rendered.map((m, i) => (i >= newest ? m : stubOf(shape, memo, m, now, calls))))
  if (offered !== null) out.tools = offered
  return {
    body: out,
    changed: offered !== tools || fresh.length > 0 || messages !== sent || rendered.some((m, i) => m !== messages[i]),
    offloaded,
    flush: fresh.length === 0 ? null : { refs: fresh.map((id) => refOfCall(id, calls.get(id))), tier: decision.tier, tokensBefore: decision.tokensBefore, tokensAfter: decision.tokensAfter }
  }
}

/**
 * How many entries of `body`'s history (without expansions) `plan` would take from its snapshot of an earlier request
 * now (0: none; computes from the start). For tests and measurements.
 */
export const reusable = (shape: Shape, body: Record<string, unknown>): number => {
  const history = shape.history(body)
  const first = history?.[0]
  const known = isRecord(first) ? memoOf(shape).snapshots.get(first) : undefined
  if (history === null || known === undefined) return 0
  let newest = history.length
  while (newest > 0 && !(isRecord(history[newest - 1]) && shape.model(history[newest - 1] as Record<string, unknown>))) newest--
  newest = Math.min(newest, history.length - 1)
  return known.entries.length <= newest && known.entries.every((e, i) => e === history[i]) ? known.entries.length : 0
}

/** `plan` on an Anthropic Messages request (see `anthropicShape`). */
export const rewrite = (input: Input): Output => plan(anthropicShape, input)

/**
 * A `thread_read` call of the upstream's reply: its call id (`tool_use` id, `call_id`) and its input (the arguments as
 * a JSON value); `invalid`, when set, is the error text the call is answered with instead of reading (its input could
 * not be read as arguments: a Responses custom tool call whose input text is not JSON).
 */
export interface Read {
  readonly id: string
  readonly input: unknown
  readonly invalid?: string
}

/**
 * The `thread_read` calls of a reply's content when the gateway can continue the conversation itself: every `tool_use`
 * block of the reply is a `thread_read` call (at least one). `null` otherwise (no call, or calls of the agent's own
 * tools beside them: the agent must answer those, `besideOf`).
 */
export const readsOf = (content: unknown): ReadonlyArray<Read> | null => {
  if (!Array.isArray(content)) return null
  const uses = content.filter((b): b is Record<string, unknown> => isRecord(b) && b.type === "tool_use")
  if (uses.length === 0 || !uses.every((b) => b.name === ThreadRead.definition.name && typeof b.id === "string")) return null
  return uses.map((b) => ({ id: b.id as string, input: b.input }))
}

/**
 * A reply's `thread_read` calls beside calls of the agent's own tools: the calls the gateway answers (`reads`) and the
 * reply's content without them (`visible`: what the agent receives, its own calls kept).
 */
export interface Beside {
  readonly reads: ReadonlyArray<Read>
  readonly visible: ReadonlyArray<unknown>
}

/**
 * The `thread_read` calls of a reply's content beside calls of the agent's own tools (at least one of each; `null`
 * otherwise): the gateway answers them itself and the agent gets the content without them (`Beside`). `alone`: also
 * when every call is a `thread_read` (the last round an answer may take, `Offload.besideOf`).
 */
export const besideOf = (content: unknown, alone = false): Beside | null => {
  if (!Array.isArray(content)) return null
  const uses = content.filter((b): b is Record<string, unknown> => isRecord(b) && b.type === "tool_use")
  const reads = uses.filter((b) => b.name === ThreadRead.definition.name && typeof b.id === "string")
  if (reads.length === 0 || (reads.length === uses.length && !alone)) return null
  return { reads: reads.map((b) => ({ id: b.id as string, input: b.input })), visible: content.filter((b) => !reads.includes(b)) }
}

/** The user message of the gateway's answers to `thread_read` calls (`tool_result` blocks, `is_error` on a failed read). */
const answersMessage = (answers: ReadonlyArray<Answer>) => ({
  role: "user",
  content: answers.map((a) => ({ type: "tool_result", tool_use_id: a.id, content: a.output, ...(a.isError ? { is_error: true } : {}) }))
})

/**
 * The request that continues a conversation after the upstream's `thread_read` calls: `body` (the request just sent)
 * with the reply (`content`) and a user message of the answers (`tool_result` blocks, `is_error` on a failed read).
 */
export const continuation = (
  body: Record<string, unknown>,
  content: ReadonlyArray<unknown>,
  answers: ReadonlyArray<Answer>
): Record<string, unknown> => ({
  ...body,
  messages: [
    ...(body.messages as ReadonlyArray<unknown>),
    { role: "assistant", content },
    answersMessage(answers)
  ]
})

/**
 * A continuation as it goes out: the messages' last `cache_control` breakpoint (the agent's, on its newest message)
 * moved to the last block of the last message (the gateway's `thread_read` answers), so the upstream caches the
 * hidden round where it ends and the agent's next request, which extends it, reads it instead of writing it again
 * (without the move the answers are uncached input here and a cache write on the next request). The number of
 * breakpoints stays the agent's (Anthropic allows 4); a body with no breakpoint in its messages is returned as it is.
 * Only the bytes sent: the conversation's record of the round (`expansions`) keeps the blocks without it.
 */
export const withMovedBreakpoint = (body: Record<string, unknown>): Record<string, unknown> => {
  const messages = Array.isArray(body.messages) ? body.messages : []
  let at: { message: number; block: number } | null = null
  messages.forEach((m, i) => {
    if (isRecord(m) && Array.isArray(m.content)) {
      m.content.forEach((b, j) => {
        if (isRecord(b) && b.cache_control !== undefined) at = { message: i, block: j }
      })
    }
  })
  const last = messages.length - 1
  const found = at as { message: number; block: number } | null
  const tail = messages[last]
  if (found === null || !isRecord(tail) || !Array.isArray(tail.content) || tail.content.length === 0) return body
  const control = (messages[found.message] as { content: Array<Record<string, unknown>> }).content[found.block]!.cache_control
  const moved = messages.map((m, i) => {
    if (i !== found.message && i !== last) return m
    const content = (m as { content: Array<unknown> }).content.map((b, j) => {
      if (!isRecord(b)) return b
      if (i === found.message && j === found.block) {
        const { cache_control: _, ...rest } = b
        return i === last && j === (m as { content: Array<unknown> }).content.length - 1 ? { ...rest, cache_control: control } : rest
      }
      return i === last && j === (m as { content: Array<unknown> }).content.length - 1 ? { ...b, cache_control: control } : b
    })
    return { ...(m as Record<string, unknown>), content }
  })
  return { ...body, messages: moved }
}

/** How a streamed hop ended: its `thread_read` calls to answer (its events from the first call on held back), or nothing to hide. */
export type HopEnd =
  | {
    readonly _tag: "reads"
    readonly reads: ReadonlyArray<Read>
    /** The hop's message content (as the upstream sent it: the continuation repeats it). */
    readonly content: ReadonlyArray<unknown>
    /** The agent-visible index of the first hidden block (item): the next hop's are numbered from it. */
    readonly nextOffset: number
    /** The held events (sent to the agent after all when the reads are not answered). */
    readonly held: string
    /** Responses: the output items the agent has received so far (this hop's and the earlier hops' visible ones). */
    readonly visible?: ReadonlyArray<unknown> | undefined
    /** Responses: the next `sequence_number` the agent expects. */
    readonly nextSequence?: number | undefined
    /** Anthropic, Chat Completions: whether text reached the agent in this answer so far (else the last round's end gives the note). */
    readonly texted?: boolean | undefined
    /**
     * What of the held events the agent gets before the continuation's (what the model said after its first
     * `thread_read` call is the agent's, whatever its calls; counted in `texted`). Chat Completions: the held chunks'
     * text, as chunks of their text alone; Anthropic Messages and Responses: the events of the blocks (output items)
     * after the calls, numbered on as the agent sees them.
     */
    readonly said?: string | undefined
    /**
     * Chat Completions: what every chunk the agent receives carries from the first hop (its `id`, `created`);
     * Responses: what a continuation's `response` objects carry from the first hop's (its `id`, `created_at`).
     */
    readonly head?: Readonly<Record<string, unknown>> | undefined
  }
  | {
    /**
     * `thread_read` calls beside the agent's own (`besideOf`): the gateway answers them, and the agent gets `held`, the
     * held events without the calls' blocks (the blocks after them numbered on as the agent sees them).
     */
    readonly _tag: "beside"
    readonly reads: ReadonlyArray<Read>
    /** The hop's message content as the upstream sent it (with the calls). */
    readonly content: ReadonlyArray<unknown>
    readonly held: string
  }
  | { readonly _tag: "release"; readonly held: string }

/** One upstream stream of a streamed answer, as the agent sees it (see `makeHop`). */
export interface Hop {
  /** Feeds upstream bytes; returns the text to send to the agent now. */
  readonly push: (chunk: Uint8Array) => string
  /**
   * The hop's end (call when the upstream stream has ended). `last`: the answer may take no more rounds, so a hop
   * whose every call is a `thread_read` ends `beside` (answered, the agent gets the message without the calls and its
   * stop reason without a call: `end_turn`, `stop`), never `reads`.
   */
  readonly end: (last?: boolean) => HopEnd
  /** The hop's message content as the upstream sent it (empty before its stream completed). */
  readonly content: () => ReadonlyArray<unknown>
  /** The hop's own usage (its `message_start` and `message_delta`), when its stream completed. */
  readonly tokens: () => GatewayThreads.Reply["tokens"]
  /**
   * The event that ends the agent's stream with an error after what this hop sent (its continuation refused, its
   * stream broken off; `body`, `message` as `Offload.streamError`'s), numbered on from the events the agent received
   * (Responses: the next `sequence_number`, the response's `id`). Absent: `Offload.streamError` (a protocol whose
   * events carry no numbers).
   */
  readonly error?: (body: string, message: string) => string
}

const encodeEvent = (event: string, data: string) => `${event === "" ? "" : `event: ${event}\n`}${Sse.dataLines(data)}\n\n`

/**
 * A streamed hop of an Anthropic Messages answer as the agent sees it: its events pass on (re-encoded as `event:` and
 * `data:` lines) until a `thread_read` `tool_use` block starts; from there on they are held. A continuation hop
 * (`first` false) drops its `message_start` (the agent has one already) and numbers its content blocks from `offset`,
 * so the agent sees one message: the blocks before the hidden call, then the continuation's. When the message ends
 * with the agent's own calls beside the `thread_read` ones (`besideOf`), the held events go on without the
 * `thread_read` blocks' (`HopEnd` `beside`), the blocks after them numbered on without gaps.
 */
export const makeHop = (offset: number, first: boolean, textedBefore = false): Hop => {
  const decoder = Sse.makeDecoder()
  const assembler = GatewayAnthropic.replyAssembler()
  /** The held events: the event's name, its data (parsed; `null`: not JSON) and its text as sent with `offset`. */
  let held: Array<{ readonly event: string; readonly data: Record<string, unknown> | null; readonly text: string }> | null = null
  let heldAt = 0
  /** The hop's message id (its first `message_start`'s; `undefined` before it), whether a block of it reached the agent. */
  let messageId: string | null | undefined = undefined
  let shown = false
  /** The hop restarted its answer after part of it reached the agent as a continuation: ended with an error. */
  let broken = false
  return {
    push: (chunk) => {
      if (broken) return ""
      assembler.push(chunk)
      let out = ""
      for (const m of decoder.push(chunk)) {
        const data = parseJson(m.data)
        if (!isRecord(data)) {
          if (held === null) out += encodeEvent(m.event, m.data)
          else held.push({ event: m.event, data: null, text: encodeEvent(m.event, m.data) })
          continue
        }
        if (data.type === "message_start") {
          const id = isRecord(data.message) && typeof data.message.id === "string" ? data.message.id : null
          if (messageId !== undefined && id !== messageId) {
            // The upstream restarted its answer (another message's message_start; the assembler keeps the second
            // message alone, as Baton's adapter does). What the first attempt held back (a thread_read call cut) is
            // dropped, and the restart is not held with it: the second message_start goes to the agent as it came
            // (a client that reads on keeps the second message; Anthropic's MessageStream rejects the restart), and
            // the blocks are held from the second message's own thread_read on. A continuation cannot restart the agent's message (it holds the earlier hops' blocks):
            // when part of this hop reached the agent, the answer ends with the protocol's error (the agent retries).
            held = null
            heldAt = 0
            if (!first && shown) {
              broken = true
              return out + anthropic.streamError("", "the upstream restarted its answer (another message_start) after part of it was sent")
            }
          }
          messageId = id
          if (!first) continue
        }
        const indexed = typeof data.index === "number" && String(data.type).startsWith("content_block")
        if (held === null && data.type === "content_block_start" && isRecord(data.content_block) && data.content_block.type === "tool_use" &&
          data.content_block.name === ThreadRead.definition.name) {
          held = []
          heldAt = data.index as number
        }
        const text = indexed && offset > 0 ? encodeEvent(m.event, JSON.stringify({ ...data, index: (data.index as number) + offset })) : encodeEvent(m.event, m.data)
        if (held === null) {
          out += text
          if (indexed) shown = true
        } else held.push({ event: m.event, data, text })
      }
      return out
    },
    end: (last = false) => {
      if (broken) return { _tag: "release", held: "" }
      const text = held === null ? "" : held.map((h) => h.text).join("")
      const outcome = assembler.outcome()
      if (held === null || outcome._tag !== "completed") return { _tag: "release", held: text }
      const message = outcome.reply.messages[0]?.message
      const content = isRecord(message) && Array.isArray(message.content) ? message.content : []
      // The upstream's indexes of the thread_read blocks: their events are left out, the later blocks numbered down.
      const hidden = new Set<number>()
      for (const h of held) {
        if (h.data?.type === "content_block_start" && isRecord(h.data.content_block) && h.data.content_block.type === "tool_use" &&
          h.data.content_block.name === ThreadRead.definition.name && typeof h.data.content_block.id === "string") hidden.add(h.data.index as number)
      }
      /** A held block event's index as the agent sees it (the hidden blocks before it taken out). */
      const shownIndex = (index: number) => {
        let before = 0
        for (const i of hidden) if (i < index) before++
        return index + offset - before
      }
      const reads = readsOf(content)
      if (reads !== null && !last) {
        // The blocks the model streamed after its calls (text, thinking) are the agent's: they go on before the
        // continuation's (`said`), numbered on; the message's own end events are the continuation's to send. Before
        // branch b48gw they were dropped with the calls (a whole answer and a Chat Completions stream kept them).
        const kept = content.filter((_, i) => i >= heldAt && !hidden.has(i))
        const said = held.flatMap((h) => {
          const index = h.data !== null && String(h.data.type).startsWith("content_block") && typeof h.data.index === "number" ? h.data.index : null
          return index === null || hidden.has(index) ? [] : [encodeEvent(h.event, JSON.stringify({ ...h.data, index: shownIndex(index) }))]
        })
        return {
          _tag: "reads",
          reads,
          content,
          nextOffset: offset + heldAt + kept.length,
          held: text,
          said: said.join(""),
          texted: textedBefore || content.slice(0, heldAt).some(isText) || kept.some(isText)
        }
      }
      const beside = besideOf(content, last)
      if (beside === null) return { _tag: "release", held: text }
      const noCall = !beside.visible.some((b) => isRecord(b) && b.type === "tool_use")
      // Nothing for the agent in the whole answer (no text, no call): Baton's note as a text block of its own before
      // the message's end (before, the agent got a message without content, ending its turn).
      const at = offset + content.length - hidden.size
      const note = noCall && !textedBefore && !beside.visible.some(isText)
        ? [
          { type: "content_block_start", index: at, content_block: { type: "text", text: "" } },
          { type: "content_block_delta", index: at, delta: { type: "text_delta", text: readLimitNote } },
          { type: "content_block_stop", index: at }
        ].map((e) => encodeEvent(e.type, JSON.stringify(e))).join("")
        : ""
      const shown = held.flatMap((h) => {
        const index = h.data !== null && String(h.data.type).startsWith("content_block") && typeof h.data.index === "number" ? h.data.index : null
        if (noCall && h.data?.type === "message_delta" && isRecord(h.data.delta) && h.data.delta.stop_reason === "tool_use") {
          return [note + encodeEvent(h.event, JSON.stringify({ ...h.data, delta: { ...h.data.delta, stop_reason: "end_turn" } }))]
        }
        if (index === null) return [h.text]
        if (hidden.has(index)) return []
        return shownIndex(index) === index + offset ? [h.text] : [encodeEvent(h.event, JSON.stringify({ ...h.data, index: shownIndex(index) }))]
      })
      return { _tag: "beside", reads: beside.reads, content, held: shown.join("") }
    },
    content: () => {
      const outcome = assembler.outcome()
      const message = outcome._tag === "completed" ? outcome.reply.messages[0]?.message : undefined
      return isRecord(message) && Array.isArray(message.content) ? message.content : []
    },
    tokens: () => {
      const outcome = assembler.outcome()
      return outcome._tag === "completed" ? outcome.reply.tokens : null
    }
  }
}

/**
 * What the agent gets in place of an answer with no content when the upstream still calls only `thread_read` after
 * the last round the gateway answers (8, on every path: `Gateway`, `GatewaySwitched`): the calls are never the
 * agent's, and an answer with nothing else would be taken as the model's final, empty answer.
 */
export const readLimitNote =
  "[Baton] The model asked to read earlier history more than 8 times in one answer, Baton's limit, and gave no answer " +
  "yet. Ask again (for example: \"go on\") to continue."

/** Whether an Anthropic content block is text with some text. */
const isText = (b: unknown) => isRecord(b) && b.type === "text" && typeof b.text === "string" && b.text !== ""

/** A streamed hop's end when its `thread_read` calls are to be answered. */
export type ReadsEnd = Extract<HopEnd, { readonly _tag: "reads" }>

/** An answer to a `thread_read` call: its call id, the text, and whether the read failed. */
export interface Answer {
  readonly id: string
  readonly output: string
  readonly isError: boolean
}

/**
 * What `Gateway` needs of a dialect to offload on the way out and hide the upstream's `thread_read` rounds: the
 * rewrite's `shape`; a reply's content (Anthropic: the message's blocks; Responses: the output items) from a whole
 * answer's body and from a recorded reply; its `thread_read` calls (`readsOf`, `null` when the gateway cannot answer
 * them all); the continuation request; a streamed hop (`previous`: the hop whose reads it continues, `null` for the
 * first); and the expansions that make later requests extend the continuation (`received`: the content the agent got,
 * `last`: the last request sent, `sentCount`: the history entries of the agent's request as sent, `final`: the last
 * hop's content as the upstream sent it, `beside`: the gateway's answers to the last hop's `thread_read` calls beside
 * the agent's own calls, which later requests send with the agent's answers). A wire whose gateway answers
 * `thread_read` calls beside the agent's own has `besideOf` and `withContent`.
 */
export interface Offload {
  readonly shape: Shape
  readonly contentOfBody: (body: unknown) => ReadonlyArray<unknown> | null
  /**
   * A hidden round's content as `withContent` reads it, from the round's whole body (`null`: none). Absent:
   * `contentOfBody`'s. Chat Completions keeps what the continuation leaves out (`reasoning_content`, `reasoning`), which
   * the agent gets as a stream passes it on.
   */
  readonly roundOfBody?: ((body: unknown) => ReadonlyArray<unknown> | null) | undefined
  readonly contentOfReply: (reply: GatewayThreads.Reply) => ReadonlyArray<unknown>
  readonly readsOf: (content: unknown) => ReadonlyArray<Read> | null
  /**
   * The `thread_read` calls of a reply's content beside the agent's own calls (`null`: none, or not both), answered
   * by the gateway, and the content the agent gets. `alone`: also a reply whose every call is a `thread_read` (the
   * last round an answer may take: answered like reads beside the agent's calls, so the agent never gets the call).
   * Absent: such a reply goes to the agent as it is.
   */
  readonly besideOf?: ((content: unknown, alone?: boolean) => Beside | null) | undefined
  /**
   * A whole answer's body as the agent receives it: `content` (its own, or `besideOf`'s `visible`) after what the
   * answer's hidden rounds show (`rounds`: each round's content as the upstream sent it, its `thread_read` calls left
   * out: its text, as a stream passes it on as it comes). Before branch b47gw a whole answer gave the agent the last
   * round's content alone, and the text of the rounds before it was lost. `note` (default true: the last round's reads
   * were taken out): Baton's note (`readLimitNote`) when nothing of the answer has text or a call.
   */
  readonly withContent?:
    | ((body: Record<string, unknown>, content: ReadonlyArray<unknown>, rounds?: ReadonlyArray<ReadonlyArray<unknown>>, note?: boolean) => Record<string, unknown>)
    | undefined
  /**
   * A whole answer's body with its calls told apart as the wire's streamed hop tells them apart (the same object when
   * nothing changes; Chat Completions: a call id the answer already gave is made distinct, `GatewaySwitch.distinctIds`).
   * Absent: a whole answer's calls go to the agent as they came.
   */
  readonly callsApart?: ((body: Record<string, unknown>) => Record<string, unknown>) | undefined
  readonly continuation: (body: Record<string, unknown>, content: ReadonlyArray<unknown>, answers: ReadonlyArray<Answer>) => Record<string, unknown>
  /**
   * A continuation as it is sent (`continuation`'s body is what the conversation records): Anthropic moves the
   * agent's breakpoint onto the round's end (`withMovedBreakpoint`); Responses sends it as it is (OpenAI caches
   * prefixes without breakpoints).
   */
  readonly sendable: (body: Record<string, unknown>) => Record<string, unknown>
  readonly hop: (previous: ReadsEnd | null) => Hop
  readonly expansions: (
    received: ReadonlyArray<unknown>,
    last: Record<string, unknown>,
    sentCount: number,
    final: ReadonlyArray<unknown>,
    fingerprint: (message: unknown) => string,
    beside?: ReadonlyArray<Answer>
  ) => ReadonlyArray<GatewayThreads.Expansion>
  /**
   * The SSE event that ends a streamed answer whose continuation the upstream refused (`body`: its error body, may be
   * empty) or could not be reached (`message` says why), in the protocol's error form.
   */
  readonly streamError: (body: string, message: string) => string
}

/** The Anthropic Messages offload (see the module docblock). */
export const anthropic: Offload = {
  shape: anthropicShape,
  contentOfBody: (body) => (isRecord(body) && Array.isArray(body.content) ? body.content : null),
  contentOfReply: (reply) => {
    const message = reply.messages[0]?.message
    return isRecord(message) && Array.isArray(message.content) ? message.content : []
  },
  readsOf,
  besideOf,
  // Without a call left (the last round's reads taken out) the answer ended its turn.
  // Nothing left for the agent (no text, no call): Baton's note (`readLimitNote`), never an answer without content.
  withContent: (body, own, rounds = [], note = true) => {
    const content = [...rounds.flatMap((r) => besideOf(r, true)?.visible ?? r), ...own]
    const noCall = !content.some((b) => isRecord(b) && b.type === "tool_use")
    return {
      ...body,
      content: note && noCall && !content.some(isText) ? [...content, { type: "text", text: readLimitNote }] : content,
      ...(body.stop_reason === "tool_use" && noCall ? { stop_reason: "end_turn" } : {})
    }
  },
  continuation,
  sendable: withMovedBreakpoint,
  hop: (previous) => makeHop(previous === null ? 0 : previous.nextOffset, previous === null, previous?.texted === true),
  // Answers beside the agent's calls end the expansion as a user message, which the next request joins with the
  // agent's own answers (`anthropicShape.joinAnswers`).
  expansions: (received, last, sentCount, final, fingerprint, beside) => [{
    fingerprint: fingerprint({ role: "assistant", content: received }),
    messages: [
      ...(last.messages as ReadonlyArray<unknown>).slice(sentCount),
      { role: "assistant", content: final },
      ...(beside === undefined ? [] : [answersMessage(beside)])
    ]
  }],
  // The upstream's JSON error body re-serialised compact: a body with line breaks (pretty-printed) written as it came
  // would put its lines outside the event's one data field.
  streamError: (body, message) => {
    const parsed = parseJson(body)
    return `event: error\ndata: ${JSON.stringify(isRecord(parsed) ? parsed : { type: "error", error: { type: "api_error", message } })}\n\n`
  }
}
