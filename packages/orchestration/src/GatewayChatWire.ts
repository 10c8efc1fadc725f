/**
 * GatewayChatWire: how a conversation on the OpenAI Chat Completions API (pi, opencode, aider and other agents with an
 * OpenAI-compatible base URL; issue 14, docs/gateway.md) maps onto Baton's record, for `GatewayThreads`. A "message"
 * of this wire is one entry of the request's `messages` array after its leading `system` / `developer` messages (the
 * system prompt, fingerprinted with the conversation's key): a `user` message, an `assistant` message (its text and
 * `tool_calls`), or a `tool` message answering one call. A reply is one `assistant` message, which the agent sends
 * back as the next request's entry.
 *
 * It owns the normalisation (what is fingerprinted) and the items of each entry; it does not speak HTTP.
 */
import type { NewItem } from "./ItemLog.js"
import type { Json, Wire } from "./GatewayThreads.js"

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

/** A message's content as parts: a string is one `text` part; `null` or absent content is none. */
const partsOf = (content: unknown): ReadonlyArray<unknown> =>
  typeof content === "string" ? (content === "" ? [] : [{ type: "text", text: content }]) : Array.isArray(content) ? content : []

/** A part reduced to what the model reads: a text part its type and text; others as sent. */
const normalisePart = (part: unknown): Json =>
  isRecord(part) && part.type === "text" && typeof part.text === "string" ? { type: "text", text: part.text } : part as Json

/** A tool call reduced to its id, name and arguments (an agent may drop `type` or reorder the fields). */
const normaliseCall = (call: unknown): Json => {
  if (!isRecord(call)) return call as Json
  const fn = isRecord(call.function) ? call.function : {}
  return { id: String(call.id ?? ""), name: String(fn.name ?? ""), arguments: typeof fn.arguments === "string" ? fn.arguments : JSON.stringify(fn.arguments ?? {}) }
}

/**
 * A message without what an agent or the upstream may change when it comes back in the next request: a string
 * content is one text part and an empty or `null` content none; tool calls are their id, name and arguments; an
 * assistant's `refusal: null`, `annotations` and `audio` are left out.
 */
export const normalise = (m: unknown): Json => {
  if (!isRecord(m)) return m as Json
  const out: Record<string, Json> = { role: String(m.role), content: partsOf(m.content).map(normalisePart) }
  if (Array.isArray(m.tool_calls) && m.tool_calls.length > 0) out.tool_calls = m.tool_calls.map(normaliseCall)
  if (typeof m.tool_call_id === "string") out.tool_call_id = m.tool_call_id
  if (typeof m.refusal === "string") out.refusal = m.refusal
  return out
}

/** The text parts of `content` (other parts as `[type]`). */
const textsOf = (content: unknown): ReadonlyArray<string> =>
  partsOf(content).map((p) => isRecord(p) && typeof p.text === "string" ? p.text : `[${isRecord(p) ? String(p.type) : "part"}]`)

/**
 * The items of one message: a `user` (or a `system` / `developer` message after the first user turn) message's parts
 * as `user_message` items, an `assistant` message's text parts as `assistant_message` and each tool call as a
 * `tool_call` (its arguments as sent), a `tool` message as the `tool_result` of its call (named from `toolNames`).
 */
export const itemsOf = (m: unknown, messageId: string, toolNames: ReadonlyMap<string, string>): ReadonlyArray<NewItem> => {
  const base = { toolCallId: null, toolName: null, messageId, isError: false, toolCallState: null }
  if (!isRecord(m)) return []
  if (m.role === "assistant") {
    const texts = textsOf(m.content).map((text): NewItem => ({ ...base, kind: "assistant_message", text }))
    const refusal: ReadonlyArray<NewItem> = typeof m.refusal === "string" ? [{ ...base, kind: "assistant_message", text: m.refusal }] : []
    const calls = (Array.isArray(m.tool_calls) ? m.tool_calls : []).flatMap((c): ReadonlyArray<NewItem> => {
      const call = normaliseCall(c) as { id: string; name: string; arguments: string }
      return isRecord(c) ? [{ ...base, kind: "tool_call", text: call.arguments, toolCallId: call.id, toolName: call.name }] : []
    })
    return [...texts, ...refusal, ...calls]
  }
  if (m.role === "tool") {
    const id = String(m.tool_call_id ?? "")
    return [{ ...base, kind: "tool_result", text: textsOf(m.content).join("\n"), toolCallId: id, toolName: toolNames.get(id) ?? null }]
  }
  return textsOf(m.content).map((text): NewItem => ({ ...base, kind: "user_message", text }))
}

/** Tool names by call id, from every assistant message's `tool_calls` among `messages`. */
export const toolNamesOf = (messages: ReadonlyArray<unknown>): ReadonlyMap<string, string> => {
  const names = new Map<string, string>()
  for (const m of messages) {
    if (!isRecord(m) || !Array.isArray(m.tool_calls)) continue
    for (const c of m.tool_calls) {
      // A call that is no object names nothing (before branch `b46gw` it failed the request's record, and a switched
      // request with a 500).
      if (!isRecord(c)) continue
      const call = normaliseCall(c) as { id: string; name: string }
      names.set(call.id, call.name)
    }
  }
  return names
}

/** The prompt of a run: the last text of the last user message among `fresh` (`""`: none). */
const promptOf = (fresh: ReadonlyArray<unknown>): string => {
  for (let i = fresh.length - 1; i >= 0; i--) {
    const m = fresh[i]
    if (!isRecord(m) || m.role !== "user") continue
    const last = textsOf(m.content).at(-1)
    if (last !== undefined) return last
  }
  return ""
}

/** The OpenAI Chat Completions wire (see the module docblock). */
export const openAiChat: Wire = {
  name: "openai-chat",
  normalise,
  normaliseSystem: (system) => (Array.isArray(system) ? system.map(normalise) : (system ?? null)) as Json,
  itemsOf,
  toolNamesOf,
  promptOf,
  roleOf: (m) => (isRecord(m) && typeof m.role === "string" ? m.role : "message")
}
