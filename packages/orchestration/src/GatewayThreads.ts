/**
 * GatewayThreads: the durable record of the conversations that unmodified agents (Claude Code, Codex) hold through
 * Baton's gateway (issue 14, docs/gateway.md). It owns how a gateway request maps onto Baton's record, for any wire
 * protocol (`Wire`: the Anthropic Messages one here, `GatewayResponsesWire` for OpenAI Responses):
 *
 * - **A thread per agent conversation**, found by its conversation key (`conversationKey`): the agent's session
 *   header with the fingerprint of its system prompt (a sub-agent or a side request of the same session has another
 *   system prompt, so it is its own conversation), else the fingerprint of the conversation's start (system prompt
 *   and first message).
 * - **A run per upstream request.** Each request is one run on the thread's provider thread for the routed instance:
 *   it holds the request's new messages as items, then the upstream's reply, and its usage as the run's cost. The
 *   run is written `running` when the request is forwarded (the agent's tools, not Baton's run driver, drive the
 *   conversation, so it is never `queued` for the driver) and ends `completed`, or `failed` with the upstream's
 *   status, or `interrupted` when the agent hung up mid-answer. An answer the gateway holds whole before the
 *   request's record begins is recorded with it (`begin` with an `Outcome`): one unit of work.
 * - **The shared prefix is recognised**: every message has a fingerprint (its normalised form: cache breakpoints
 *   and formatting the agent may change between requests removed; `fingerprint`); the conversation's baseline is the
 *   fingerprints Baton stored, the last reply included. A request that extends the baseline adds only its new
 *   messages. One that repeats the request whose reply ends the baseline (the agent retried it after Baton recorded
 *   the reply: `retriedReply`) is no divergence: nothing of it is stored again, a `gateway.retried` event says so, and
 *   its answer is stored only when it differs from the recorded reply (the earlier reply stays in the thread).
 *   One that does not (the agent compacted, edited or rewound its history) is recorded as a divergence (a
 *   `gateway.diverged` event with the shared length), its messages past the shared prefix are stored, and it becomes
 *   the new baseline. One that holds the stored conversation re-rendered (only the agent's own context moved or
 *   rewritten: reminders, `system` messages, earlier thinking; Claude Code re-renders so when its model changes) is
 *   not a divergence: its messages are compared by their conversation content (`conversationContent`,
 *   `rerenderedPrefix`), only what follows the stored conversation is stored, a `gateway.rerendered` event says so,
 *   and it becomes the baseline. Fingerprints are taken incrementally (`makePrintCache`): a message equal to the one at its
 *   position in the conversation's previous request reuses its fingerprint, so an extending request hashes only its
 *   new messages.
 *
 * It does not speak HTTP nor forward anything: the server's gateway does, and reports here what was sent and what
 * came back.
 */
import { Text } from "@baton/contracts"
import type { Item, NewThreadEvent, ProviderInstance, ProviderThread, Run, Thread, ThreadId } from "@baton/contracts"
import { GatewayConversations, pendingEvents, ThreadStore, UnitOfWork } from "@baton/persistence"
import type { ProviderAdapter } from "@baton/providers"
import { SqlClient } from "@effect/sql"
import { Data, DateTime, Effect, Exit, FiberRef, Option, Schedule } from "effect"
import * as Crypto from "node:crypto"
import { DriverRegistry } from "./DriverRegistry.js"
import * as GatewayMemo from "./GatewayMemo.js"
import { IdGenerator } from "./IdGenerator.js"
import { ItemLog, type NewItem, withCountsFrom } from "./ItemLog.js"
import * as RunCosts from "./RunCosts.js"
import { RunLifecycle } from "./RunLifecycle.js"
import * as Span from "./internal/Span.js"

/** A message of the Anthropic Messages API as the agent sent it (`role`, `content`: a string or content blocks). */
export interface WireMessage {
  readonly role: string
  readonly content: unknown
}

/** A JSON value. */
export type Json = null | boolean | number | string | ReadonlyArray<Json> | { readonly [key: string]: Json }

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

/**
 * A session id as a thread title shows it: its first 36 characters (code points: an emoji is never cut in half into a
 * lone surrogate). An id that came in a header is the header's bytes read as Latin-1 (Node's parser), so an agent's
 * UTF-8 id (`sess-日本`) arrived as mojibake (`sess-æ\u0097¥æ\u009c¬`): bytes that are valid UTF-8 are read as
 * UTF-8; anything else is kept as it came. The conversation's key is the id as received (this is only its title).
 * A NUL or a lone surrogate (an id from a body's JSON, `prompt_cache_key`, may hold any) is U+FFFD
 * (`Text.toStorableText`): Postgres refused the thread's record and the conversation was lost.
 */
export const titlePart = (session: string): string => {
  let text = session
  const codes = Array.from(session, (c) => c.codePointAt(0)!)
  if (codes.some((c) => c >= 0x80) && codes.every((c) => c <= 0xff)) {
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.from(codes))
    } catch (_notUtf8) {
      text = session
    }
  }
  return Text.toStorableText(Array.from(text).slice(0, 36).join(""))
}

/** `value` as JSON with object keys sorted at every level: the same value always gives the same text. */
export const canonicalJson = (value: unknown): string => {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`
  if (isRecord(value)) {
    return `{${Object.keys(value).filter((k) => value[k] !== undefined).sort().map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`).join(",")}}`
  }
  return JSON.stringify(value ?? null)
}

/** Content as blocks: a string is one text block. */
const blocksOf = (content: unknown): ReadonlyArray<unknown> =>
  typeof content === "string" ? [{ type: "text", text: content }] : Array.isArray(content) ? content : []

/**
 * A block without what an agent may change between two requests of one conversation: its `cache_control`
 * breakpoint (Claude Code moves it to the newest message), `is_error: false` (the same as absent), a tool result's
 * string content (the same as one text block), and any field of a text, tool use, thinking or tool result block
 * beyond those the model reads (an agent echoes a reply back with the fields it keeps, e.g. without `citations`).
 */
const normaliseBlock = (block: unknown): Json => {
  if (!isRecord(block)) return block as Json
  const pick = (...keys: ReadonlyArray<string>) => {
    const out: Record<string, Json> = {}
    for (const k of keys) if (block[k] !== undefined && block[k] !== null) out[k] = block[k] as Json
    return out
  }
  switch (block.type) {
    case "text":
      return pick("type", "text")
    case "tool_use":
      return pick("type", "id", "name", "input")
    case "thinking":
      return pick("type", "thinking", "signature")
    case "redacted_thinking":
      return pick("type", "data")
    case "tool_result":
      return { ...pick("type", "tool_use_id"), content: blocksOf(block.content).map(normaliseBlock), ...(block.is_error === true ? { is_error: true } : {}) }
    default: {
      const out: Record<string, Json> = {}
      for (const [k, v] of Object.entries(block)) if (k !== "cache_control" && v !== undefined) out[k] = v as Json
      return out
    }
  }
}

/** A message in the form its fingerprint is taken of (see `normaliseBlock`). */
export const normalise = (m: WireMessage): Json => ({ role: m.role, content: blocksOf(m.content).map(normaliseBlock) })

/** The fingerprint of an Anthropic message: SHA-256 (hex, first 32 characters) of its normalised form's canonical JSON. */
export const fingerprint = (m: WireMessage): string => hashText(canonicalJson(normalise(m)))

const reminderOpen = "<system-reminder>"
const reminderClose = "</system-reminder>"

/**
 * `text` without the `<system-reminder>…</system-reminder>` elements that end it and the white space before them
 * (each element whole: from its opening tag to the first closing tag after it); `text` itself when it ends with none.
 * Claude Code appends such reminders to a tool result's text in one rendering of its history and sends them as
 * `system` messages in another (docs/gateway.md, "What Claude Code sends").
 */
export const withoutTrailingReminders = (text: string): string => {
  let rest = text
  let stripped = false
  for (;;) {
    const trimmed = rest.trimEnd()
    if (!trimmed.endsWith(reminderClose)) break
    const open = trimmed.lastIndexOf(reminderOpen)
    if (open < 0 || trimmed.indexOf(reminderClose, open) !== trimmed.length - reminderClose.length) break
    rest = trimmed.slice(0, open)
    stripped = true
  }
  return stripped ? rest.trimEnd() : text
}

/** Whether `text` is only `<system-reminder>` elements (and white space): context the agent added, not a user's words. */
export const isReminderText = (text: string): boolean =>
  text.trimStart().startsWith(reminderOpen) && withoutTrailingReminders(text) === ""

/**
 * The conversation's content of a normalised Anthropic message (`normalise`): what the gateway compares when a request
 * does not extend the stored baseline message for message (`rerenderedPrefix`). It is the normalised message without
 * the agent's own context, which Claude Code renders differently from one request to another (observed with 2.1.332:
 * docs/gateway.md, "What Claude Code sends"):
 * - a `system` message (Claude Code's reminders as messages of their own, sent to a non-Claude model): nothing;
 * - a user `text` block that is only `<system-reminder>` elements (the same reminders inside a user message, sent
 *   to a Claude model): left out;
 * - `<system-reminder>` elements ending the text of a tool result's `text` block (`withoutTrailingReminders`);
 * - `thinking` and `redacted_thinking` blocks (Claude Code leaves earlier turns' thinking out of a request that ends
 *   with a new prompt and sends it again in the tool rounds after it; the model does not read an earlier turn's
 *   thinking either).
 * Everything else is compared as normalised: every other block whole, text exactly. Returns `normalised` itself
 * (the same object) when nothing was left out, `null` when nothing is left (a message of the agent's context only).
 */
export const conversationContent = (normalised: Json): Json | null => {
  if (!isRecord(normalised) || !Array.isArray(normalised.content)) return normalised
  const role = normalised.role
  if (role === "system") return null
  let changed = false
  const kept: Array<Json> = []
  for (const block of normalised.content as ReadonlyArray<Json>) {
    if (!isRecord(block)) {
      kept.push(block)
      continue
    }
    if (block.type === "thinking" || block.type === "redacted_thinking") {
      changed = true
      continue
    }
    if (role === "user" && block.type === "text" && typeof block.text === "string" && isReminderText(block.text)) {
      changed = true
      continue
    }
    if (block.type === "tool_result" && Array.isArray(block.content)) {
      let inner = false
      const content = (block.content as ReadonlyArray<Json>).map((c) => {
        if (!isRecord(c) || c.type !== "text" || typeof c.text !== "string") return c
        const text = withoutTrailingReminders(c.text)
        if (text === c.text) return c
        inner = true
        return { ...c, text }
      })
      if (inner) {
        changed = true
        kept.push({ ...block, content })
        continue
      }
    }
    kept.push(block)
  }
  if (kept.length === 0) return null
  return changed ? { role: role as Json, content: kept } : normalised
}

/**
 * A message's content print from its normalised form and fingerprint: `""` when it has no conversation content
 * (`wire.content` gives `null`), its fingerprint when its content is its whole normalised form, else the SHA-256 of
 * its content's canonical JSON (hex, 32 characters; equal to the fingerprint of a message that holds only that content).
 */
const contentPrint = (wire: Wire, normalised: Json, print: string): string => {
  const content = wire.content === undefined ? normalised : wire.content(normalised)
  if (content === null) return ""
  return content === normalised ? print : hashText(canonicalJson(content))
}

/**
 * How many of a request's leading messages hold the stored conversation when the request re-renders it, or `null`
 * when it does not. `stored` and `request` are content prints (`""`: a message of the agent's context only). The
 * request re-renders the stored conversation when the stored messages that have content, in order, are exactly its
 * first messages that have content (the agent's context messages anywhere among them ignored) and there is at least
 * one: then its messages up to the last of those hold the stored conversation (nothing of them is new) and the rest
 * are new. Anything else (a stored message missing, changed, moved or added before the end of the stored ones: the
 * agent compacted, edited or rewound its history) is `null`, a divergence.
 */
export const rerenderedPrefix = (stored: ReadonlyArray<string>, request: ReadonlyArray<string>): number | null => {
  let wanted = 0
  for (const c of stored) if (c !== "") wanted++
  if (wanted === 0) return null
  const storedContent = stored.filter((c) => c !== "")
  let matched = 0
  for (let i = 0; i < request.length; i++) {
    const c = request[i]!
    if (c === "") continue
    if (c !== storedContent[matched]) return null
    matched++
    if (matched === wanted) return i + 1
  }
  return null
}

/** SHA-256 of `text`, hex, its first 32 characters. */
const hashText = (text: string) => Crypto.createHash("sha256").update(text).digest("hex").slice(0, 32)

/**
 * Whether two normalised messages have the same canonical JSON (so the same fingerprint) without serialising them:
 * a walk over their structure, strings compared as wholes (a memory compare). Keys whose value is `undefined` count
 * as absent, as in `canonicalJson`.
 */
export const sameJson = (a: unknown, b: unknown): boolean => {
  if (a === b) return true
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false
    for (let i = 0; i < a.length; i++) if (!sameJson(a[i] ?? null, b[i] ?? null)) return false
    return true
  }
  if (isRecord(a)) {
    if (!isRecord(b)) return false
    const ka = Object.keys(a).filter((k) => a[k] !== undefined)
    const kb = Object.keys(b).filter((k) => b[k] !== undefined)
    if (ka.length !== kb.length) return false
    for (const k of ka) if (!(k in b) || !sameJson(a[k], b[k])) return false
    return true
  }
  return false
}

/**
 * The fingerprints of a request's messages, their content prints (`contentPrint`; `null` for a wire without a content
 * rule), and how many of them were hashed (the rest were recognised).
 */
export interface Prints {
  readonly prints: ReadonlyArray<string>
  readonly content: ReadonlyArray<string> | null
  readonly hashed: number
}

/**
 * An in-memory cache of each conversation's previous request (its messages, their normalised forms when taken, their
 * fingerprints and content prints), bounded to `capacity` conversations (least recently used dropped).
 * `printsOf(key, messages)` gives the fingerprints and content prints of a request's messages, hashing only those that
 * differ from the message at the same position of the conversation's previous request: a message interned by the
 * gateway (`GatewayMemo`: the same object as the previous request's) is known by its object; another is normalised and
 * compared with the previous request's message at its position (strings compared whole; a Claude Code breakpoint
 * moved is the same message), and only a message that differs is hashed. Without an entry (a new conversation, a
 * restart, an evicted one) every message is hashed, an interned one once for its life (`printOf`). The cache only
 * saves work: its answer is always the messages' fingerprints (`fingerprintOf(wire, m)`; the default wire is
 * Anthropic's) and content prints (`contentPrint`). A key names one conversation, so one wire.
 */
export const makePrintCache = (capacity = 256) => {
  const entries = new Map<string, {
    readonly messages: ReadonlyArray<unknown>
    readonly normalised: Array<Json | undefined>
    readonly prints: ReadonlyArray<string>
    readonly content: ReadonlyArray<string> | null
  }>()
  const printsOf = (key: string, messages: ReadonlyArray<unknown>, wire: Wire = anthropicMessages): Prints => {
    const previous = entries.get(key)
    const normalised = new Array<Json | undefined>(messages.length)
    const prints: Array<string> = []
    const content: Array<string> | null = wire.content === undefined ? null : []
    let hashed = 0
    for (let i = 0; i < messages.length; i++) {
      const m = messages[i]
      const before = previous !== undefined && i < previous.messages.length
      if (before && previous.messages[i] === m) {
        // The same object as the previous request's (interned): the same prints.
        prints.push(previous.prints[i]!)
        content?.push(previous.content?.[i] ?? printOf(wire, m).content!)
        normalised[i] = previous.normalised[i]
        continue
      }
      if (!before && GatewayMemo.isInterned(m)) {
        // Nothing to compare it with: its prints, taken once for the message's life (its normalised form when needed).
        const p = printOf(wire, m)
        prints.push(p.print)
        content?.push(p.content!)
        hashed++
        continue
      }
      const n = wire.normalise(m)
      normalised[i] = n
      const earlier = before ? previous.normalised[i] ?? (previous.normalised[i] = wire.normalise(previous.messages[i])) : undefined
      if (earlier !== undefined && sameJson(earlier, n)) {
        prints.push(previous!.prints[i]!)
        content?.push(previous!.content?.[i] ?? contentPrint(wire, n, previous!.prints[i]!))
      } else {
        const print = hashText(canonicalJson(n))
        prints.push(print)
        content?.push(contentPrint(wire, n, print))
        hashed++
      }
    }
    entries.delete(key)
    entries.set(key, { messages, normalised, prints, content })
    if (entries.size > capacity) entries.delete(entries.keys().next().value!)
    return { prints, content, hashed }
  }
  return { printsOf }
}

/**
 * The key of the conversation a request belongs to: `session:<header>:<system fingerprint>` when the agent sent a
 * session header (Claude Code's `x-claude-code-session-id`, Codex's `thread-id`), else `start:<fingerprint of system
 * + first message>`. The keys of a wire other than Anthropic's carry its name (`openai-responses:session:…`), so two
 * protocols never share a conversation. The session as it can be stored (`Text.toStorableText` of its first 200 UTF-16
 * code units: a NUL from a body's `prompt_cache_key`, or a cut inside a surrogate pair, failed the key's record on
 * Postgres).
 */
export const conversationKey = (session: string | null, system: unknown, messages: ReadonlyArray<unknown>, wire: Wire = anthropicMessages): string => {
  const systemPrint = systemPrintOf(wire, system)
  const prefix = wire.name === "anthropic-messages" ? "" : `${wire.name}:`
  if (session !== null && session !== "") return `${prefix}session:${Text.toStorableText(session.slice(0, 200))}:${systemPrint}`
  return `${prefix}start:${hashText(systemPrint + (messages[0] === undefined ? "" : fingerprintOf(wire, messages[0])))}`
}

/** How many leading fingerprints `a` and `b` share. */
export const sharedPrefix = (a: ReadonlyArray<string>, b: ReadonlyArray<string>): number => {
  const n = Math.min(a.length, b.length)
  let i = 0
  while (i < n && a[i] === b[i]) i++
  return i
}

/** The text of a tool result's content: its text blocks joined by newlines, other blocks as `[type]`. */
const resultText = (content: unknown): string =>
  blocksOf(content).map((b) => isRecord(b) && b.type === "text" && typeof b.text === "string" ? b.text : `[${isRecord(b) ? String(b.type) : "block"}]`).join("\n")

/**
 * The items of one message (one per content block, in order): user and system text as `user_message` (Baton's item
 * kinds have no system kind; the message id says `system`), `tool_result` (paired by `tool_use_id`, named from
 * `toolNames`), assistant `text` as `assistant_message`, `tool_use` as `tool_call` (its input as JSON), `thinking` as
 * `reasoning`; any other block (images, documents, server tools, redacted thinking) as a one-line `[type]` item of
 * the message's role. `messageId` groups a message's items: the upstream's message id for a reply, else
 * `<role>@<generation>.<index>` (its position in the request; the generation goes up at each divergence or re-render).
 */
export const itemsOf = (m: WireMessage, messageId: string, toolNames: ReadonlyMap<string, string>): ReadonlyArray<NewItem> => {
  const base = { toolCallId: null, toolName: null, messageId, isError: false, toolCallState: null }
  const assistant = m.role === "assistant"
  return blocksOf(m.content).flatMap((b): ReadonlyArray<NewItem> => {
    if (!isRecord(b)) return []
    switch (b.type) {
      case "text":
        return [{ ...base, kind: assistant ? "assistant_message" : "user_message", text: typeof b.text === "string" ? b.text : "" }]
      case "thinking":
        return typeof b.thinking === "string" && b.thinking !== "" ? [{ ...base, kind: "reasoning", text: b.thinking }] : []
      case "tool_use":
        return [{ ...base, kind: "tool_call", text: JSON.stringify(b.input ?? {}), toolCallId: String(b.id), toolName: String(b.name) }]
      case "tool_result": {
        const id = String(b.tool_use_id)
        return [{ ...base, kind: "tool_result", text: resultText(b.content), toolCallId: id, toolName: toolNames.get(id) ?? null, isError: b.is_error === true }]
      }
      default:
        return [{ ...base, kind: assistant ? "assistant_message" : "user_message", text: `[${String(b.type)}]` }]
    }
  })
}

/** Tool names by call id, from every `tool_use` block of `messages`. */
export const toolNamesOf = (messages: ReadonlyArray<WireMessage>): Map<string, string> => {
  const names = new Map<string, string>()
  for (const m of messages) {
    for (const b of blocksOf(m.content)) {
      if (isRecord(b) && b.type === "tool_use") names.set(String(b.id), String(b.name))
    }
  }
  return names
}

/** The prompt of a run: the last text block of the last user message among `fresh` (`""`: tool results only). */
const promptOf = (fresh: ReadonlyArray<WireMessage>): string => {
  for (let i = fresh.length - 1; i >= 0; i--) {
    const m = fresh[i]!
    if (m.role !== "user") continue
    const texts = blocksOf(m.content).filter((b) => isRecord(b) && b.type === "text")
    const last = texts[texts.length - 1]
    if (isRecord(last) && typeof last.text === "string") return last.text
  }
  return ""
}

/**
 * How one wire protocol's conversation maps onto Baton's record: a message (one entry of the request's history array:
 * an Anthropic message, a Responses input item) normalised for its fingerprint, its items, the tool names its calls
 * give, the prompt of a run, a message's role (its message id's prefix), and the system prompt as part of the key.
 */
export interface Wire {
  readonly name: "anthropic-messages" | "openai-responses" | "openai-chat"
  /** The message without what an agent may change between two requests of one conversation (see `fingerprintOf`). */
  readonly normalise: (m: unknown) => Json
  /**
   * The conversation's content of a normalised message (`conversationContent` for Anthropic's): the same object when
   * it is all content, `null` when it is the agent's context only. Absent: the wire has no re-rendering rule (every
   * request that does not extend the baseline is a divergence).
   */
  readonly content?: (normalised: Json) => Json | null
  /** The system prompt (Anthropic's `system`, Responses' `instructions`) normalised, for the conversation key. */
  readonly normaliseSystem: (system: unknown) => Json
  readonly itemsOf: (m: unknown, messageId: string, toolNames: ReadonlyMap<string, string>) => ReadonlyArray<NewItem>
  readonly toolNamesOf: (messages: ReadonlyArray<unknown>) => ReadonlyMap<string, string>
  /** The prompt of a run: the last user text among the request's new messages (`""`: none). */
  readonly promptOf: (fresh: ReadonlyArray<unknown>) => string
  /** The role a message's id starts with (`user`, `assistant`, …). */
  readonly roleOf: (m: unknown) => string
}

/** The Anthropic Messages wire (see `normalise`, `itemsOf`). */
export const anthropicMessages: Wire = {
  name: "anthropic-messages",
  normalise: (m) => normalise(m as WireMessage),
  content: conversationContent,
  normaliseSystem: (system) => blocksOf(system).map(normaliseBlock),
  itemsOf: (m, messageId, toolNames) => itemsOf(m as WireMessage, messageId, toolNames),
  toolNamesOf: (messages) => toolNamesOf(messages as ReadonlyArray<WireMessage>),
  promptOf: (fresh) => promptOf(fresh as ReadonlyArray<WireMessage>),
  roleOf: (m) => (isRecord(m) && typeof m.role === "string" ? m.role : "message")
}

/** A reported figure as an event's count: a whole number, never negative (a provider's odd report must not fail the record). */
const count = (n: number) => (Number.isFinite(n) ? Math.max(0, Math.round(n)) : 0)

/** A message's fingerprint and content print (`contentPrint`; `null` for a wire without a content rule). */
interface MessagePrints {
  readonly print: string
  readonly content: string | null
}

/** The prints of a message from its normalised form. */
const printsOfNormalised = (wire: Wire, normalised: Json): MessagePrints => {
  const print = hashText(canonicalJson(normalised))
  return { print, content: wire.content === undefined ? null : contentPrint(wire, normalised, print) }
}

/** Each wire's prints of interned messages (`GatewayMemo`), kept while the message lives. */
const printMemos = new WeakMap<Wire, (m: object) => MessagePrints>()
const printMemoOf = (wire: Wire) => {
  let f = printMemos.get(wire)
  if (f === undefined) printMemos.set(wire, f = GatewayMemo.memo((m: object) => printsOfNormalised(wire, wire.normalise(m))))
  return f
}

/** A message's fingerprint and content print, taken once per interned message (`GatewayMemo`). */
const printOf = (wire: Wire, m: unknown): MessagePrints =>
  GatewayMemo.isInterned(m) ? printMemoOf(wire)(m as object) : printsOfNormalised(wire, wire.normalise(m))

/**
 * The fingerprint of a message of `wire`: SHA-256 (hex, first 32 characters) of its normalised form's canonical JSON
 * (taken once per interned message, `GatewayMemo`, with its content print).
 */
export const fingerprintOf = (wire: Wire, m: unknown): string =>
  GatewayMemo.isInterned(m) ? printMemoOf(wire)(m as object).print : hashText(canonicalJson(wire.normalise(m)))

/**
 * The key of a message the agent received after hidden `thread_read` rounds (`Conversation.expansions`): its content
 * print where the wire has a re-rendering rule and the message has conversation content, else its fingerprint. So a
 * request that re-renders the message (Claude Code leaves an earlier turn's `thinking` blocks out of a request that
 * ends with a new prompt) still finds the rounds to send in its place. For a message with nothing left out by the
 * rule the content print is the fingerprint, so expansions recorded under fingerprints before this rule are found.
 */
export const expansionKeyOf = (wire: Wire, m: unknown): string => {
  const prints = printOf(wire, m)
  return prints.content === null || prints.content === "" ? prints.print : prints.content
}

/** Each wire's fingerprints of interned system prompts (the conversation key's part). */
const systemMemos = new WeakMap<Wire, (system: object) => string>()
const systemPrintOf = (wire: Wire, system: unknown) => {
  if (!GatewayMemo.isInterned(system)) return hashText(canonicalJson(wire.normaliseSystem(system)))
  let f = systemMemos.get(wire)
  if (f === undefined) systemMemos.set(wire, f = GatewayMemo.memo((s: object) => hashText(canonicalJson(wire.normaliseSystem(s)))))
  return f(system as object)
}

/** What the gateway knows of a request when it forwards it. */
export interface GatewayRequest {
  /** The request's wire protocol (`anthropicMessages`, `GatewayResponsesWire.openAiResponses`). */
  readonly wire: Wire
  /** The agent's session header (`x-claude-code-session-id`, Codex's `thread-id`), `null` without one. */
  readonly session: string | null
  /**
   * The session of the conversation this one runs under, for a sub-agent (Codex's `x-codex-turn-metadata`
   * `parent_thread_id`); absent or `null`: none. A new conversation's thread records the thread of the parent's
   * conversation (the same wire and system prompt, that session) as its parent, and its title says it is a sub-agent.
   */
  readonly parentSession?: string | null | undefined
  /** Who sent it, for the thread's title (`Claude Code`, `Codex`). */
  readonly agent: string
  readonly system: unknown
  /** The request's history: Anthropic messages, or Responses input items. */
  readonly messages: ReadonlyArray<unknown>
  /** The model the request names (sent upstream unchanged). */
  readonly model: string
  /** The provider instance the model routes to, its window (tokens) and prices (per million tokens). */
  readonly providerInstance: ProviderInstance
  readonly contextWindow: number | null
  readonly prices: ProviderAdapter.ProviderAdapterShape["prices"]
  /**
   * The gateway's tool-result offload on this request (absent: off): `offloaded` the `tool_use` ids whose results it
   * sends as stubs (the conversation's new state), `flush` what this request newly stubbed (`null`: nothing).
   */
  readonly offload?: GatewayOffloadState | undefined
  /**
   * The request's conversation as the gateway read it before forwarding (`conversationOf`; absent: not read, or new):
   * `begin` takes its thread from it instead of reading it again (it reads it once more under the thread's lock).
   */
  readonly conversation?: GatewayConversations.Conversation | undefined
}

/** What the gateway's tool-result offload did on a request (see `GatewayRequest.offload`). */
export interface GatewayOffloadState {
  readonly offloaded: ReadonlyArray<string>
  readonly flush: { readonly refs: ReadonlyArray<string>; readonly tier: string; readonly tokensBefore: number; readonly tokensAfter: number } | null
}

/**
 * Hidden `thread_read` rounds of one answer: later requests send `messages` in place of the message (the history entry)
 * whose fingerprint is `fingerprint`.
 */
export interface Expansion {
  readonly fingerprint: string
  readonly messages: ReadonlyArray<unknown>
}

/** A forwarded request as recorded: its thread and run, the request's fingerprints, what was new. */
export interface Begun {
  readonly threadId: ThreadId
  readonly run: Run
  readonly conversationKey: string
  readonly fingerprints: ReadonlyArray<string>
  /** The request's content prints (`null`: its wire has no re-rendering rule). */
  readonly contentPrints: ReadonlyArray<string> | null
  /** How many of the request's messages were new (stored as items by this request). */
  readonly newMessages: number
  /** Whether the request diverged from the stored baseline. */
  readonly diverged: boolean
  /** Whether the request re-rendered the stored conversation (not a divergence: nothing of it stored again). */
  readonly rerendered: boolean
  /**
   * The fingerprints of the reply Baton had recorded for this same request when the request is a retry of it (not a
   * divergence: nothing of the request stored again, its answer stored only when it differs); `null`: not a retry.
   */
  readonly retried: ReadonlyArray<string> | null
  /**
   * Whether the request is exactly the baseline's, no reply recorded for it (`replied` 0): a retry of a request whose
   * answer is still streaming (or failed). Should another answer to the same request join the baseline before this
   * request's does (the first request's, recorded while the retry ran), this one's supersedes it (`complete`), unless
   * another request of the conversation began after this one (a retry of this retry: the agent gave up on this answer
   * too, so the later request's answer, or the one that joined, stays the conversation's).
   */
  readonly repeats: boolean
  /** The conversation's request count once this request was recorded (its `requests`): which of its requests it is. */
  readonly requestNumber: number
  /** How many of the request's messages were hashed (the others were recognised from its conversation's previous request). */
  readonly hashedMessages: number
  readonly prices: GatewayRequest["prices"]
  /** The routed instance and its window (tokens; `null`: not configured), for the answer's `gateway.usage` event. */
  readonly providerInstance: ProviderInstance
  readonly contextWindow: number | null
  readonly wire: Wire
}

/**
 * What came back: the reply's messages in the form the agent will send them back (an Anthropic reply is one assistant
 * message; a Responses reply one input item per output item), each with the upstream's id (`null`: none; empty: no
 * reply), and its billed tokens (`null`: not reported).
 */
export interface Reply {
  readonly messages: ReadonlyArray<{ readonly id: string | null; readonly message: unknown }>
  readonly tokens: ProviderAdapter.TurnTokens | null
  /**
   * The input tokens (uncached, cache writes, cache reads) of the last request of the answer when it took several
   * (hidden `thread_read` rounds, whose `tokens` are every request's sum); absent or `null`: `tokens`' own.
   */
  readonly carriedTokens?: number | null | undefined
}

/** `complete`'s `expansion` as a list. */
const expansionsOf = (expansion: Expansion | ReadonlyArray<Expansion> | undefined): ReadonlyArray<Expansion> =>
  expansion === undefined ? [] : "fingerprint" in expansion ? [expansion] : expansion

/** `baseline` (a request's prints) with `reply`'s messages after it: the baseline once the reply is recorded. */
const replyBaseline = (wire: Wire, baseline: GatewayConversations.Baseline, reply: Reply): GatewayConversations.Baseline => {
  const replied = reply.messages.map((r) => printOf(wire, r.message))
  return {
    prints: [...baseline.prints, ...replied.map((r) => r.print)],
    content: baseline.content === null ? null : [...baseline.content, ...replied.map((r) => r.content ?? r.print)],
    replied: replied.length
  }
}

/**
 * Whether `reply` is the reply Baton recorded for the request a retry repeats (`retried`, its messages' fingerprints;
 * `null`: not a retry): then nothing of it is stored again.
 */
const sameReply = (wire: Wire, retried: ReadonlyArray<string> | null, reply: Reply): boolean =>
  retried !== null && retried.length === reply.messages.length &&
  reply.messages.every((r, i) => printOf(wire, r.message).print === retried[i])

/**
 * The fingerprints of the reply that ends `stored` when `stored` is `request` followed by a recorded reply (another
 * answer to that same request joined the baseline), else `null`.
 */
export const otherReply = (stored: GatewayConversations.Baseline, request: ReadonlyArray<string>): ReadonlyArray<string> | null => {
  const replied = stored.replied ?? 0
  return replied > 0 && stored.prints.length === request.length + replied && sharedPrefix(stored.prints, request) === request.length
    ? stored.prints.slice(request.length)
    : null
}

/**
 * Whether a request whose `prints` share `prefix` leading fingerprints with `stored` repeats the request whose reply
 * ends `stored` (the agent retried it after Baton had recorded the reply): its messages are exactly the stored ones
 * before that reply. The reply's fingerprints, else `null`.
 */
export const retriedReply = (stored: GatewayConversations.Baseline, prints: ReadonlyArray<string>, prefix: number): ReadonlyArray<string> | null => {
  const replied = stored.replied ?? 0
  return replied > 0 && prefix === prints.length && prints.length === stored.prints.length - replied
    ? stored.prints.slice(prints.length)
    : null
}

/**
 * How many of a request's leading messages are its conversation's when, though it does not extend `stored`, it goes on
 * from another reply Baton recorded for the request whose reply ends `stored` (`stored.others`: an answer to a
 * concurrent request repeating it, which the agent took instead): the request's messages then begin with that
 * request's and that other reply's, and the count is theirs (the longest such reply's). `null` when it does not.
 * Such a request is no divergence: those messages are stored already (the other reply as its own run's items).
 */
export const otherReplyExtended = (stored: GatewayConversations.Baseline, prints: ReadonlyArray<string>, prefix: number): number | null => {
  const replied = stored.replied ?? 0
  const request = stored.prints.length - replied
  if (replied === 0 || prefix < request) return null
  let found: number | null = null
  for (const other of stored.others ?? []) {
    const end = request + other.length
    if (prints.length >= end && other.every((p, i) => prints[request + i] === p) && (found === null || end > found)) found = end
  }
  return found
}

/**
 * `stored` (whose reply answers the request of `fingerprints`) with `reply` among its other replies (`others`), when
 * it is neither that reply nor one of them already.
 */
const withOtherReply = (stored: GatewayConversations.Baseline, reply: ReadonlyArray<string>): GatewayConversations.Baseline => {
  const known = [stored.prints.slice(stored.prints.length - (stored.replied ?? 0)), ...(stored.others ?? [])]
  return known.some((k) => k.length === reply.length && k.every((p, i) => p === reply[i]))
    ? stored
    : { ...stored, others: [...(stored.others ?? []), reply] }
}

/**
 * An answer `reply` that did not join the stored baseline `known`, whose reply `found` answers the same request (of
 * `requestPrints` messages); `baseline` is what this answer would have stored. `same`: it equals an answer recorded
 * for that request (it is not stored again). `next`: the baseline to store (`known` when unchanged): with `supersedes`
 * (a retry the agent sent after giving up on `found`) this answer's, `found` kept among its others; else `known` with
 * this answer among its others.
 */
const joinOtherReply = (
  wire: Wire,
  known: GatewayConversations.Baseline,
  baseline: GatewayConversations.Baseline,
  requestPrints: number,
  found: ReadonlyArray<string>,
  reply: Reply,
  supersedes: boolean
) => ({
  same: sameReply(wire, found, reply) || (known.others ?? []).some((o) => sameReply(wire, o, reply)),
  next: supersedes
    ? withOtherReply({ ...baseline, others: (known.others ?? []).filter((o) => !sameReply(wire, o, reply)) }, found)
    : withOtherReply(known, baseline.prints.slice(requestPrints))
})

/**
 * The request's newest input: its messages after the last one of the model's side (`roleOf` `assistant`), all of them
 * when it has none. What an extending request stores as new (the messages past the previous request's reply), so the
 * prompt of a retry (which stores none) is the prompt of the run it repeats.
 */
const newestInput = (wire: Wire, messages: ReadonlyArray<unknown>): ReadonlyArray<unknown> => {
  for (let i = messages.length - 1; i >= 0; i--) if (wire.roleOf(messages[i]) === "assistant") return messages.slice(i + 1)
  return messages
}

/**
 * The items of `reply`'s messages, the reply of the thread's run of `seq`. A message without the upstream's id (Chat
 * Completions) is named by that run and its position after `prompt` messages (`assistant@reply3.1`): two answers to
 * the same request (a retry, a retry after a failed one) are two responses, never grouped as one (`ToolUnits` groups a
 * response's items by `messageId`; review r26: both were `assistant@reply.1`).
 */
const replyItems = (wire: Wire, reply: Reply, prompt: number, seq: number): ReadonlyArray<NewItem> => {
  const names = wire.toolNamesOf(reply.messages.map((r) => r.message))
  return storable(reply.messages.flatMap((r, i) => wire.itemsOf(r.message, r.id ?? `${wire.roleOf(r.message)}@reply${seq}.${prompt + i}`, names)))
}

/**
 * The items a request likely stores, for `ItemLog.countAhead` before its unit of work: its messages' items after the
 * prefix it shares with `storedPrints` (the conversation's baseline as last read; what `begin` finds under the lock may
 * differ, and then only the counts of items that render alike are used), and an answer's recorded with it (`reply`).
 * `names`: the request's tool names by call id (`Wire.toolNamesOf` of `messages`). Only their counts matter (message ids are left empty: no item's render shows one).
 */
const likelyItems = (
  wire: Wire,
  messages: ReadonlyArray<unknown>,
  names: ReadonlyMap<string, string>,
  storedPrints: ReadonlyArray<string>,
  prints: ReadonlyArray<string>,
  outcome: Outcome | undefined
): { readonly request: ReadonlyArray<NewItem>; readonly reply: ReadonlyArray<NewItem> } => {
  const fresh = messages.slice(sharedPrefix(storedPrints, prints))
  return {
    request: storable(fresh.flatMap((m) => wire.itemsOf(m, "", names))),
    reply: outcome?._tag === "completed" ? replyItems(wire, outcome.reply, prints.length, 0) : []
  }
}

/** `text` as it can be stored: `Text.toStorableText` of it, `null` kept. */
const storableOrNull = (text: string | null) => text === null ? null : Text.toStorableText(text)

/**
 * `items` with every NUL character and lone surrogate of their texts and ids replaced by U+FFFD
 * (`Text.toStorableText`): the agent's messages and the upstream's answers are recorded as they will be read back
 * (forwarded as sent). Postgres refuses NUL in text (22021: the request's run and items were lost) and SQLite kept it,
 * so the dialects differed (new user r35). An item with nothing to replace is returned as is.
 */
const storable = (items: ReadonlyArray<NewItem>): ReadonlyArray<NewItem> =>
  items.map((i) => {
    const text = Text.toStorableText(i.text)
    const toolCallId = storableOrNull(i.toolCallId)
    const toolName = storableOrNull(i.toolName)
    const messageId = storableOrNull(i.messageId)
    return text === i.text && toolCallId === i.toolCallId && toolName === i.toolName && messageId === i.messageId
      ? i
      : { ...i, text, toolCallId, toolName, messageId }
  })

/**
 * How a begun request's answer ended, as recorded: `completed` with its reply (and the hidden `thread_read` rounds'
 * expansions, see `complete`), or `ended` without one (`failed`: the upstream refused or failed; `interrupted`: the
 * agent hung up), `reason` the one-line reason for people and `code` the same for code.
 */
export type Outcome =
  | {
    readonly _tag: "completed"
    readonly reply: Reply
    readonly expansion?: Expansion | ReadonlyArray<Expansion> | undefined
  }
  | {
    readonly _tag: "ended"
    readonly status: "failed" | "interrupted"
    readonly code: Run["failureCode"] & string
    readonly reason: string
  }

/**
 * `begin`'s unit of work found the conversation's row changed since this process last wrote it (another process
 * wrote it): rolled back and made again reading the row. Never leaves `begin`.
 */
class StaleConversation extends Data.TaggedError("StaleConversation") {}

export class GatewayThreads extends Effect.Service<GatewayThreads>()("@baton/orchestration/GatewayThreads", {
  effect: Effect.gen(function*() {
    const store = yield* ThreadStore
    const uow = yield* UnitOfWork
    const ids = yield* IdGenerator
    const itemLog = yield* ItemLog
    const lifecycle = yield* RunLifecycle
    const driver = yield* DriverRegistry
    const repository = yield* GatewayConversations.make
    const sql = yield* SqlClient.SqlClient
    const printCache = makePrintCache()
    /**
     * SQLite (one process, the embedded default): the conversations as this process's committed units of work last
     * wrote them, so `conversationOf` (before forwarding) reads no row. Every write goes through `conversations`, which
     * drops the key at once and keeps the value written as pending, marked with the unit of work that wrote it (an
     * `extendBaseline` applied to the pending or kept value, or dropped when neither is known or it did not apply);
     * `written` moves that unit's pending value into the cache when the unit has committed, and drops it when it failed.
     * A unit of work never takes another's pending value: one that ends while another request's unit of work is open
     * (SQLite's next transaction may begin while the previous unit hands the event loop over after its commit) would
     * otherwise keep that one's write before it is committed, or though it is rolled back. Postgres (several processes
     * may serve a conversation): not kept, every `conversationOf` reads the row (a stale `offloaded` would be written
     * back by `begin` and lose another process's stubs).
     */
    const keeps = sql.onDialectOrElse({ sqlite: () => true, orElse: () => false })
    const kept = new Map<string, GatewayConversations.Conversation>()
    /** A write not yet committed: its value (`null`: not known) and the unit of work (`written`'s mark) that made it. */
    interface Pending {
      readonly value: GatewayConversations.Conversation | null
      readonly by: object | null
    }
    const pending = new Map<string, Pending>()
    /** The unit of work (`written`'s mark) the current fiber writes in; `null` outside `written`. */
    const writer = FiberRef.unsafeMake<object | null>(null)
    const keepLimit = 1_024
    /** Runs `write` (a write of `key`'s conversation) with `key` dropped and pending, then pending as `valueOf` its result. */
    const writing = <A, E, R>(
      key: string,
      write: Effect.Effect<A, E, R>,
      valueOf: (a: A) => GatewayConversations.Conversation | null
    ): Effect.Effect<A, E, R> =>
      Effect.flatMap(FiberRef.get(writer), (by) => {
        kept.delete(key)
        pending.set(key, { value: null, by })
        return Effect.tap(write, (a) => Effect.sync(() => pending.set(key, { value: valueOf(a), by })))
      })
    const conversations: GatewayConversations.GatewayConversationsShape = {
      ...repository,
      insert: (c) => writing(c.conversationKey, repository.insert(c), () => c),
      update: (c) => writing(c.conversationKey, repository.update(c), () => c),
      updateIfUnchanged: (expected, c) => writing(c.conversationKey, repository.updateIfUnchanged(expected, c), (applied) => applied ? c : null),
      extendBaseline: (key, expected, baseline, updatedAt) =>
        Effect.suspend(() => {
          const known = pending.get(key)
          const base = known !== undefined ? known.value ?? undefined : kept.get(key)
          return writing(key, repository.extendBaseline(key, expected, baseline, updatedAt), (applied) =>
            applied && base !== undefined ? { ...base, baseline, updatedAt } : null)
        })
    }
    /**
     * `effect` (a unit of work writing `key`'s conversation, commit included) with its writes kept once it committed;
     * inside another unit of work (it joins that one: nothing is committed at its end) they are dropped instead. Only
     * its own pending value is taken (see `kept`).
     */
    const written = <A, E, R>(key: string, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
      Effect.suspend(() => {
        const mark = {}
        return Effect.flatMap(FiberRef.get(pendingEvents), (outer) =>
          Effect.onExit(Effect.locally(effect, writer, mark), (exit) =>
            Effect.sync(() => {
              const own = pending.get(key)
              kept.delete(key)
              if (own === undefined || own.by !== mark) return
              pending.delete(key)
              if (keeps && outer === null && Exit.isSuccess(exit) && own.value !== null) {
                kept.set(key, own.value)
                if (kept.size > keepLimit) kept.delete(kept.keys().next().value!)
              }
            })))
      })

    /** The conversation of `key`, created with its thread and provider thread when new (one unit of work). */
    const findOrCreate = (key: string, request: GatewayRequest) =>
      Effect.gen(function*() {
        const found = yield* conversations.find(key)
        if (Option.isSome(found)) return found.value
        const now = yield* DateTime.now
        // A sub-agent: its parent's conversation is the same wire and system prompt under the parent's session.
        const parentSession = request.parentSession ?? null
        const parent = parentSession === null || parentSession === "" || parentSession === request.session
          ? null
          : parentSession
        const parentThread = parent === null
          ? Option.none<ThreadId>()
          : Option.map(yield* conversations.find(conversationKey(parent, request.system, [], request.wire)), (c) => c.threadId as ThreadId)
        // An empty session id keys like none (`conversationKey`), and is titled like none ("session " said nothing).
        const session = request.session === "" ? null : request.session
        const title = parent !== null && session !== null
          ? `${request.agent} sub-agent ${titlePart(session)} (of ${titlePart(parent)})`
          : session === null
          // The fingerprint's first 8 characters, after the key's `start:` (which a wire other than Anthropic's
          // prefixes with its name: `key.slice(6, 14)` titled them `-respons` and `-chat:st`).
          ? `${request.agent} conversation ${key.slice(key.indexOf("start:") + 6).slice(0, 8)}`
          : `${request.agent} session ${titlePart(session)}`
        const thread: Thread = { id: ids.next("thr") as ThreadId, title, activeProviderThreadId: null, createdAt: now, updatedAt: now }
        yield* store.insertThread(thread)
        if (Option.isSome(parentThread)) yield* store.setThreadParent(thread.id, parentThread.value)
        yield* store.appendEvent({ threadId: thread.id, type: "thread.created", payload: { title } })
        const conversation: GatewayConversations.Conversation = {
          conversationKey: key,
          threadId: thread.id,
          baseline: { prints: [], content: [] },
          requests: 0,
          divergences: 0,
          offloaded: [],
          expansions: {},
          createdAt: DateTime.formatIso(now),
          updatedAt: DateTime.formatIso(now)
        }
        yield* conversations.insert(conversation)
        return conversation
      }).pipe(uow.global("GatewayThreads.findOrCreate"), (e) => written(key, e))

    /** The thread's provider thread on `request`'s instance (created, and made active, when new). */
    const laneOf = (threadId: ThreadId, request: GatewayRequest) =>
      Effect.gen(function*() {
        const found = yield* store.findProviderThread(threadId, request.providerInstance)
        const thread = yield* store.getThread(threadId)
        const now = yield* DateTime.now
        let lane: ProviderThread
        if (found._tag === "Some") lane = found.value
        else {
          lane = {
            id: ids.next("pth") as ProviderThread["id"],
            threadId,
            providerInstance: request.providerInstance,
            // The agent's model string as it can be stored (any JSON string matches a route such as `gpt-*`).
            model: Text.toStorableText(request.model),
            contextWindow: request.contextWindow,
            activeNativeThreadId: null,
            syncedRunSeq: 0,
            createdAt: now,
            updatedAt: now
          }
          yield* store.insertProviderThread(lane)
          yield* store.appendEvent({ threadId, type: "provider_thread.created", payload: { providerThreadId: lane.id, providerInstance: lane.providerInstance } })
        }
        if (thread._tag === "Some" && thread.value.activeProviderThreadId !== lane.id) {
          yield* store.updateThread({ ...thread.value, activeProviderThreadId: lane.id, updatedAt: now })
        }
        return lane
      })

    /**
     * Records a request about to be forwarded: finds (or creates) its conversation's thread, stores the request's new
     * messages as items of a new `running` run (a divergence recorded as such), and makes the request the baseline.
     * With `outcome` (the answer was whole before the request's record began, as from an upstream that answers at
     * once): the answer is recorded too, in the same unit of work (as `settle` records it; one transaction instead of
     * two, the reply's prints written with the request's baseline), so the run is never seen `running`; a failure
     * of either records neither. Fails with `PersistenceError` or `ConcurrentModification` (retried twice).
     */
    const begin = Span.fn("GatewayThreads.begin")(function*(request: GatewayRequest, outcome?: Outcome) {
      const wire = request.wire
      const key = conversationKey(request.session, request.system, request.messages, wire)
      // A known conversation is read without a unit of work of its own (its thread's unit of work reads it again under
      // the lock); only a new one takes the global one that creates it.
      const known = request.conversation !== undefined && request.conversation.conversationKey === key
        ? Option.some(request.conversation)
        : yield* conversations.find(key)
      const created = Option.isSome(known) ? known.value : yield* findOrCreate(key, request).pipe(
        Effect.retry({ while: (e) => e._tag === "ConcurrentModification", schedule: Schedule.recurs(2) })
      )
      const threadId = created.threadId as ThreadId
      const { content, hashed, prints } = printCache.printsOf(key, request.messages, wire)
      // The request's tool names by call id (its items name the tool of each result), for the items counted ahead and
      // those the unit of work stores.
      const names = wire.toolNamesOf(request.messages)
      /**
       * The unit of work; `trusted`: the conversation as this process last wrote it (SQLite's `kept`), used without
       * reading its row under the lock: the conversation's update is then made only if the row is still that
       * (`updateIfUnchanged`, the read folded into the write), else the unit of work is rolled back (`StaleConversation`)
       * and made again reading the row (another process wrote it since).
       */
      const record = (
        trusted: GatewayConversations.Conversation | undefined,
        ahead: { readonly request: ReadonlyArray<NewItem>; readonly reply: ReadonlyArray<NewItem> }
      ) => Effect.gen(function*() {
        const conversation = trusted ?? Option.getOrElse(yield* conversations.find(key), () => created)
        const stored = conversation.baseline
        const prefix = sharedPrefix(stored.prints, prints)
        const extended = prefix === stored.prints.length
        // Not an extension: a retry of the request whose reply ends the baseline (its messages are the stored ones
        // before that reply), the same conversation re-rendered by the agent (its context moved or rewritten), or a
        // divergence.
        const retried = extended ? null : retriedReply(stored, prints, prefix)
        // Nor an extension of another answer recorded for the baseline's request (concurrent requests repeating it:
        // the agent went on from one that is not the baseline's), whose messages are stored already.
        const other = extended || retried !== null ? null : otherReplyExtended(stored, prints, prefix)
        const rerendered = extended || retried !== null || other !== null || stored.content === null || content === null ? null : rerenderedPrefix(stored.content, content)
        const diverged = !extended && retried === null && other === null && rerendered === null
        const shared = rerendered ?? other ?? prefix
        // A re-render starts a generation of message ids too: its positions count another rendering's messages. A
        // retry stores none of its messages: it keeps the generation (so does going on from another recorded answer).
        const generation = conversation.divergences + (extended || retried !== null || other !== null ? 0 : 1)
        const fresh = request.messages.slice(shared)
        // Exactly the baseline's messages, no reply recorded for them: a retry of a request still answered (or failed).
        const repeats = extended && fresh.length === 0 && prints.length > 0 && (stored.replied ?? 0) === 0
        // The routed instance's provider thread: one statement when it is already the thread's active one (as on every
        // request after a conversation's first on an instance), else found or created and made active.
        const active = yield* store.activeProviderThreadOn(threadId, request.providerInstance)
        const lane = Option.isSome(active) ? { id: active.value } : yield* laneOf(threadId, request)
        const now = yield* DateTime.now
        // A retry stores none of its messages: its run names the prompt of the run it repeats, the thread's newest (the
        // request whose messages are the baseline's was the conversation's last begun; one row, read for retries only).
        // Without one, the newest input's (the messages after the request's last reply). Review r31: the newest input's
        // differed from the repeated run's when that run stored earlier history (a resumed conversation's first request
        // ending with tool results: "" instead of its user text).
        const repeated = fresh.length === 0 && (retried !== null || repeats) ? (yield* store.listRecentRuns(threadId, 1)).at(-1) : undefined
        // The run's seq is the thread's next, read by its insert (one statement).
        const draft: Omit<Run, "seq"> = {
          id: ids.next("run") as Run["id"],
          threadId,
          providerThreadId: lane.id,
          // Written `completed` at once when the answer is recorded with it (`outcome`; its `run.completed` follows).
          status: outcome?._tag === "completed" ? "completed" : "running",
          prompt: repeated !== undefined
            ? repeated.prompt
            : Text.toStorableText(wire.promptOf(fresh.length > 0 || (retried === null && !repeats) ? fresh : newestInput(wire, request.messages))),
          stopPoint: null,
          failureReason: null,
          failureCode: null,
          nativeThreadId: null,
          createdAt: now,
          updatedAt: now
        }
        // The run is this process's: restart recovery ends it if the process dies before the answer is recorded.
        const run = yield* store.insertNextRun(draft, driver.driverId)
        // The record's events, appended together in one statement (`ThreadStore.appendEvents`) once the rest is written.
        const events: Array<NewThreadEvent> = [{ threadId, type: "run.queued", payload: { runId: run.id, seq: run.seq, providerThreadId: lane.id } }]
        if (diverged || rerendered !== null) {
          events.push({ threadId, type: diverged ? "gateway.diverged" : "gateway.rerendered", payload: {
            runId: run.id,
            sharedMessages: shared,
            storedMessages: stored.prints.length,
            requestMessages: prints.length
          } })
        }
        if (retried !== null) {
          events.push({ threadId, type: "gateway.retried", payload: {
            runId: run.id,
            requestMessages: prints.length,
            storedMessages: stored.prints.length
          } })
        }
        if (request.offload?.flush) {
          const f = request.offload.flush
          events.push({ threadId, type: "gateway.offloaded", payload: {
            runId: run.id,
            refs: f.refs,
            tier: f.tier,
            tokensBefore: Math.round(f.tokensBefore),
            tokensAfter: Math.round(f.tokensAfter)
          } })
        }
        const requestItems = withCountsFrom(ahead.request, storable(fresh.flatMap((m, i) => wire.itemsOf(m, `${wire.roleOf(m)}@${generation}.${shared + i}`, names))))
        // An answer recorded with the request (`outcome`), without hidden rounds: its reply's items are appended with
        // the request's (one append) and its prints join the baseline here.
        // A retry's answer equal to the reply recorded for the request it repeats is not stored again.
        const joined = outcome?._tag === "completed" && expansionsOf(outcome.expansion).length === 0 && outcome.reply.messages.length > 0
          ? {
            baseline: replyBaseline(wire, { prints, content }, outcome.reply),
            items: sameReply(wire, retried, outcome.reply) ? [] : withCountsFrom(ahead.reply, replyItems(wire, outcome.reply, prints.length, run.seq))
          }
          : null
        const staged = yield* itemLog.stage(threadId, run.id, joined === null ? requestItems : [...requestItems, ...joined.items])
        if (staged.event !== null) events.push(staged.event)
        const updated: GatewayConversations.Conversation = {
          ...conversation,
          baseline: joined?.baseline ?? { prints, content },
          requests: conversation.requests + 1,
          divergences: generation,
          offloaded: request.offload === undefined ? conversation.offloaded : request.offload.offloaded,
          updatedAt: DateTime.formatIso(now)
        }
        if (trusted === undefined) yield* conversations.update(updated)
        else if (!(yield* conversations.updateIfUnchanged(trusted, updated))) return yield* new StaleConversation()
        const begun: Begun = {
          threadId,
          run,
          conversationKey: key,
          fingerprints: prints,
          contentPrints: content,
          newMessages: fresh.length,
          diverged,
          rerendered: rerendered !== null,
          retried,
          repeats,
          requestNumber: updated.requests,
          hashedMessages: hashed,
          prices: request.prices,
          providerInstance: request.providerInstance,
          contextWindow: request.contextWindow,
          wire
        }
        if (outcome?._tag === "completed") {
          // The reply's counts made ahead are taken when it is recorded there too (after hidden rounds: `joined` null).
          const counted = joined === null ? withCountsFrom(ahead.reply, replyItems(wire, outcome.reply, prints.length, run.seq)) : undefined
          yield* completeIn(begun, outcome.reply, outcome.expansion, joined === null ? null : staged.items.slice(requestItems.length), true, events, counted)
        }
        yield* store.appendEvents(events)
        // A failed answer's run is ended after the request's events (its own event follows them).
        if (outcome?._tag === "ended") yield* failIn(begun, outcome.status, outcome.code, outcome.reason)
        return begun
      }).pipe(uow.thread(threadId, "GatewayThreads.begin"), (e) => written(key, e))
      const trusted = keeps && !pending.has(key) ? kept.get(key) : undefined
      // The items the request likely stores, counted before the unit of work (`ItemLog.countAhead`): which of its
      // messages are new is known for sure only under the lock, so those after what the conversation held when last
      // read are counted here (and an answer recorded with it), and the unit of work takes the counts of the items
      // that render alike. A 20 MB message, or 100,000 short ones, were counted for seconds under the lock: on SQLite
      // (one connection) every other conversation's and thread's writes waited that out.
      const likely = likelyItems(wire, request.messages, names, (trusted ?? created).baseline.prints, prints, outcome)
      const ahead = { request: yield* itemLog.countAhead(likely.request), reply: yield* itemLog.countAhead(likely.reply) }
      return yield* trusted === undefined
        ? record(undefined, ahead)
        : Effect.catchTag(record(trusted, ahead), "StaleConversation", () => record(undefined, ahead))
    })

    /**
     * Records the upstream's answer to a begun request: the reply's items, the run's cost, the run `completed`; the
     * reply joins the baseline when no other request moved it since. `expansion` (one or several): the reply was the end
     * of hidden `thread_read` rounds; later requests send `messages` in place of the message of `fingerprint` (kept in
     * the conversation's record). Fails with `PersistenceError` or `ConcurrentModification`.
     */
    const complete = (begun: Begun, reply: Reply, expansion?: Expansion | ReadonlyArray<Expansion>) =>
      // The reply's long items counted before the unit of work (`ItemLog.countAhead`), not under its lock.
      Effect.flatMap(itemLog.countAhead(replyItems(begun.wire, reply, begun.fingerprints.length, begun.run.seq)), (counted) =>
        completeIn(begun, reply, expansion, null, false, null, counted).pipe(
          uow.thread(begun.threadId, "GatewayThreads.complete"),
          (e) => written(begun.conversationKey, e)
        )).pipe(Span.withSpan("GatewayThreads.complete"))

    /**
     * `complete`'s record, in the caller's unit of work; `joined`: the reply's items as `begin` stored them, its prints
     * in the baseline already (`begin` wrote them with the request's; `null`: not); `written`: `begin` wrote the run
     * `completed` (only its `run.completed` event is left); `collect`: where its events go for the caller to append
     * with its own (`null`: appended here, together, at the end).
     */
    const completeIn = (
      begun: Begun,
      reply: Reply,
      expansion: Expansion | ReadonlyArray<Expansion> | undefined,
      joined: ReadonlyArray<Item> | null,
      written: boolean,
      collect: Array<NewThreadEvent> | null,
      /** The reply's items (`replyItems`), their long ones counted, when the caller counted them ahead. */
      counted?: ReadonlyArray<NewItem>
    ) =>
      Effect.gen(function*() {
        const expanded = expansionsOf(expansion)
        const withExpansions = (known: Readonly<Record<string, ReadonlyArray<unknown>>>) => {
          const out = { ...known }
          for (const e of expanded) out[e.fingerprint] = e.messages
          return out
        }
        const now = yield* DateTime.now
        const events = collect ?? []
        let stored: ReadonlyArray<Item> = joined ?? []
        if (reply.messages.length > 0 && joined === null) {
          const wire = begun.wire
          // A retry's answer equal to the reply recorded for the request it repeats is not stored again.
          let same = sameReply(wire, begun.retried, reply)
          const baseline = replyBaseline(wire, { prints: begun.fingerprints, content: begun.contentPrints }, reply)
          if (expanded.length === 0) {
            // The reply joins the baseline when no other request moved it since (one statement, nothing read back).
            const applied = yield* conversations.extendBaseline(
              begun.conversationKey,
              { prints: begun.fingerprints, content: begun.contentPrints },
              baseline,
              DateTime.formatIso(now)
            )
            // Another answer to the same request joined first (concurrent requests repeating it). A retry sent while
            // the request it repeats was still answered is the agent's (it sent the retry after giving up on the
            // first), so it supersedes that answer, stored only when it differs (review r26: else the agent's next
            // request was a divergence, storing this answer twice). Only while no request began after this one
            // (review r31: a retry of this retry ended first and joined; this answer, ending later, superseded the
            // one the agent went on from). Any other such answer is stored only when it differs from every answer
            // recorded for that request, and kept among its `others`: should the agent go on from it, its next request
            // extends it (before: an equal answer ending after the one that joined was stored twice, and a request
            // going on from a different one was a divergence storing it twice).
            if (!applied) {
              const conversation = yield* conversations.find(begun.conversationKey)
              const found = Option.isSome(conversation) ? otherReply(conversation.value.baseline, begun.fingerprints) : null
              if (Option.isSome(conversation) && found !== null) {
                const known = conversation.value.baseline
                const supersedes = begun.repeats && conversation.value.requests === begun.requestNumber
                const joined = joinOtherReply(wire, known, baseline, begun.fingerprints.length, found, reply, supersedes)
                same = same || joined.same
                const next = joined.next
                if (next !== known) yield* conversations.update({ ...conversation.value, baseline: next, updatedAt: DateTime.formatIso(now) })
              }
            }
          }
          if (expanded.length > 0) {
            const conversation = yield* conversations.find(begun.conversationKey)
            if (Option.isSome(conversation)) {
              const known = conversation.value.baseline
              const moved = known.prints.join() !== begun.fingerprints.join()
              // As above: a retry sent while the request it repeats was still answered supersedes that answer when it
              // joined first, its hidden rounds' answer included (before: it stayed the first answer's, and the agent's
              // next request was a divergence storing this answer twice); any other answer to that request is kept
              // among the baseline's `others`, stored only when it differs from every answer recorded for it.
              const found = moved ? otherReply(known, begun.fingerprints) : null
              const joined = found === null
                ? null
                : joinOtherReply(wire, known, baseline, begun.fingerprints.length, found, reply, begun.repeats && conversation.value.requests === begun.requestNumber)
              if (joined !== null) same = same || joined.same
              const next = !moved ? baseline : joined === null ? known : joined.next
              yield* conversations.update({
                ...conversation.value,
                expansions: withExpansions(conversation.value.expansions),
                ...(next === known ? {} : { baseline: next, updatedAt: DateTime.formatIso(now) })
              })
            }
          }
          if (!same) {
            const staged = yield* itemLog.stage(begun.threadId, begun.run.id, counted ?? replyItems(wire, reply, begun.fingerprints.length, begun.run.seq))
            stored = staged.items
            if (staged.event !== null) events.push(staged.event)
          }
        }
        if (reply.tokens !== null) {
          yield* store.recordRunCost({
            runId: begun.run.id,
            threadId: begun.threadId,
            // The run's provider thread is the routed instance's (`laneOf`).
            providerInstance: begun.providerInstance,
            ...reply.tokens,
            costUsd: RunCosts.price(reply.tokens, begun.prices),
            createdAt: now
          })
          events.push({ threadId: begun.threadId, type: "gateway.usage", payload: {
            runId: begun.run.id,
            providerInstance: begun.providerInstance,
            inputTokens: count(reply.tokens.inputTokens),
            cacheWriteTokens: count(reply.tokens.cacheWriteTokens),
            cacheReadTokens: count(reply.tokens.cacheReadTokens),
            outputTokens: count(reply.tokens.outputTokens),
            windowTokens: begun.contextWindow === null ? null : count(begun.contextWindow),
            ...(reply.carriedTokens === undefined || reply.carriedTokens === null ? {} : { carriedTokens: count(reply.carriedTokens) })
          } })
        }
        // The run `begin` wrote `running` is completed unless another path ended it since (one statement, nothing read
        // back but whether a prompt is owed; `running` to `completed` is a legal move of `RunLifecycle`'s table). Past
        // `RunLifecycle.update`, the prompts owed behind it (a message queued behind the run and interrupted there)
        // are recorded here, after its answer and its events. A run `begin` wrote `completed` is the thread's newest
        // (`collect` is only given then): none is owed behind it.
        const completed = written ? null : yield* store.updateRunIfRunning(begun.run.id, "completed", now)
        if (written || completed?.moved === true) {
          events.push({ threadId: begun.threadId, type: "run.completed", payload: { runId: begun.run.id, itemCount: stored.length } })
        }
        if (collect === null) yield* store.appendEvents(events)
        if (completed?.promptsOwed === true) yield* lifecycle.recordOwedPrompts(begun.threadId)
      })

    /**
     * Ends a begun request's run without an answer: `failed` (the upstream refused or failed: `reason` says how) or
     * `interrupted` (the agent hung up). Fails with `PersistenceError` or `ConcurrentModification`.
     */
    const fail = Span.fn("GatewayThreads.fail")(function*(
      begun: Begun,
      status: "failed" | "interrupted",
      code: Run["failureCode"] & string,
      reason: string
    ) {
      return yield* failIn(begun, status, code, reason).pipe(uow.thread(begun.threadId, "GatewayThreads.fail"))
    })

    /**
     * `fail`'s record, in the caller's unit of work. The reason (often the upstream's error body) is cut to 500 UTF-16
     * code units and made storable (`Text.toStorableText`): a NUL in it failed the record on Postgres (the run ended
     * `output_not_recorded`, the upstream's words lost), and a cut inside a surrogate pair left a lone one.
     */
    const failIn = (begun: Begun, status: "failed" | "interrupted", code: Run["failureCode"] & string, reason: string) =>
      Effect.asVoid(lifecycle.finish(begun.run, status, "after_provider", Text.toStorableText(reason.slice(0, 500)), code))

    /**
     * Records how a begun request's answer ended (`complete` or `fail`, by `outcome`). Fails with `PersistenceError`
     * or `ConcurrentModification`.
     */
    const settle = (begun: Begun, outcome: Outcome) =>
      outcome._tag === "completed" ? complete(begun, outcome.reply, outcome.expansion) : fail(begun, outcome.status, outcome.code, outcome.reason)

    /** The conversations a thread records (the gateway's view of a thread; empty for a thread of the API). */
    const conversationsOf = (threadId: ThreadId) => conversations.ofThread(threadId)

    /**
     * The stored conversation of a request (by its key; `None` when new), read without a lock: what the gateway's
     * tool-result offload needs before forwarding (its stubbed ids, request count, last update). On SQLite the
     * conversation as this process last wrote it when it is kept (no row read; see `kept`). Fails with
     * `PersistenceError` or `ConcurrentModification` (when the row is read).
     */
    const conversationOf = (wire: Wire, session: string | null, system: unknown, messages: ReadonlyArray<unknown>) => {
      const key = conversationKey(session, system, messages, wire)
      const known = keeps && !pending.has(key) ? kept.get(key) : undefined
      return known === undefined ? conversations.find(key) : Effect.succeed(Option.some(known))
    }

    return { begin, complete, fail, settle, conversationsOf, conversationOf }
  })
}) {}
