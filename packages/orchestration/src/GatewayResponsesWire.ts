/**
 * GatewayResponsesWire: how a conversation on the OpenAI Responses API (Codex with `wire_api = "responses"`, issue
 * 14, docs/gateway.md) maps onto Baton's record, for `GatewayThreads`. A "message" of this wire is one entry of the
 * request's `input` array (a `message` of the user, developer or assistant, a `function_call`, its
 * `function_call_output`, a `reasoning` item, Codex's `compaction` and `compaction_trigger` items, …): the agent sends
 * back each output item of a reply as one input item, so a reply's output items extend the baseline one by one.
 *
 * It owns the normalisation (what is fingerprinted) and the items of each entry; it does not speak HTTP.
 */
import type { NewItem } from "./ItemLog.js"
import type { Json, Wire } from "./GatewayThreads.js"

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

/** `block` with only `keys` (absent and null values left out). */
const pick = (block: Record<string, unknown>, ...keys: ReadonlyArray<string>): Record<string, Json> => {
  const out: Record<string, Json> = {}
  for (const k of keys) if (block[k] !== undefined && block[k] !== null) out[k] = block[k] as Json
  return out
}

/** A message's content as parts: a string is one `input_text` part (`output_text` for the assistant). */
const partsOf = (item: Record<string, unknown>): ReadonlyArray<unknown> =>
  typeof item.content === "string"
    ? [{ type: item.role === "assistant" ? "output_text" : "input_text", text: item.content }]
    : Array.isArray(item.content)
    ? item.content
    : []

/** A content part reduced to what the model reads (text parts: type and text; others without their ids). */
const normalisePart = (part: unknown): Json => {
  if (!isRecord(part)) return part as Json
  if (part.type === "input_text" || part.type === "output_text") return pick(part, "type", "text")
  if (part.type === "refusal") return pick(part, "type", "refusal")
  const out: Record<string, Json> = {}
  for (const [k, v] of Object.entries(part)) if (k !== "annotations" && k !== "logprobs" && v !== undefined) out[k] = v as Json
  return out
}

/**
 * An input item without what the agent or the upstream may change when the item comes back in the next request: its
 * `id` and `status` (the model reads neither; Codex gives its own items new ids when it rebuilds its history), a
 * text part's `annotations` and `logprobs`; a string content is one text part.
 */
export const normalise = (m: unknown): Json => {
  if (!isRecord(m)) return m as Json
  const type = m.type ?? (m.role !== undefined ? "message" : undefined)
  switch (type) {
    case "message":
      return { type: "message", role: String(m.role), content: partsOf(m).map(normalisePart) }
    case "function_call":
      return pick(m, "type", "call_id", "name", "arguments", "namespace")
    case "function_call_output":
    case "custom_tool_call_output":
      return { ...pick(m, "type", "call_id"), output: typeof m.output === "string" ? m.output : Array.isArray(m.output) ? m.output.map(normalisePart) : (m.output as Json) ?? null }
    case "custom_tool_call":
      return pick(m, "type", "call_id", "name", "input")
    case "reasoning":
      return pick(m, "type", "summary", "content", "encrypted_content")
    default: {
      const out: Record<string, Json> = {}
      for (const [k, v] of Object.entries(m)) if (k !== "id" && k !== "status" && v !== undefined) out[k] = v as Json
      return out
    }
  }
}

const texts = (parts: ReadonlyArray<unknown>, ...types: ReadonlyArray<string>) =>
  parts.flatMap((p) => (isRecord(p) && types.includes(String(p.type)) && typeof p.text === "string" ? [p.text] : []))

/** A tool output's text: the string itself, or its text parts joined by newlines (other parts as `[type]`). */
const outputText = (output: unknown): string =>
  typeof output === "string"
    ? output
    : Array.isArray(output)
    ? output.map((p) => (isRecord(p) && typeof p.text === "string" ? p.text : `[${isRecord(p) ? String(p.type) : "part"}]`)).join("\n")
    : JSON.stringify(output ?? null)

/**
 * The items of one input item: a message's text parts as `user_message` (user, developer and system: Baton has no
 * system kind; the message id says the role) or `assistant_message` (other parts `[type]`), `function_call` and
 * `custom_tool_call` a `tool_call` (its arguments as sent), their outputs a `tool_result` (named from `toolNames`),
 * `reasoning` a `reasoning` item of its summary (none when it has no readable text), Codex's `agent_message` (a
 * message between its agents) a `user_message` per content part (text parts their text, others `[type]`), anything else a one-line
 * `[type]` item: `user_message` for Codex's `compaction_trigger`, `assistant_message` for the rest (its `compaction`,
 * hosted tools' calls).
 */
export const itemsOf = (m: unknown, messageId: string, toolNames: ReadonlyMap<string, string>): ReadonlyArray<NewItem> => {
  const base = { toolCallId: null, toolName: null, messageId, isError: false, toolCallState: null }
  if (!isRecord(m)) return []
  const type = m.type ?? (m.role !== undefined ? "message" : undefined)
  switch (type) {
    case "message": {
      const kind = m.role === "assistant" ? "assistant_message" as const : "user_message" as const
      return partsOf(m).map((p): NewItem => {
        if (isRecord(p) && typeof p.text === "string") return { ...base, kind, text: p.text }
        if (isRecord(p) && typeof p.refusal === "string") return { ...base, kind, text: p.refusal }
        return { ...base, kind, text: `[${isRecord(p) ? String(p.type) : "part"}]` }
      })
    }
    case "function_call":
    case "custom_tool_call":
      return [{
        ...base,
        kind: "tool_call",
        text: typeof m.arguments === "string" ? m.arguments : typeof m.input === "string" ? m.input : JSON.stringify(m.arguments ?? m.input ?? {}),
        toolCallId: String(m.call_id),
        toolName: String(m.name)
      }]
    case "function_call_output":
    case "custom_tool_call_output": {
      const id = String(m.call_id)
      return [{ ...base, kind: "tool_result", text: outputText(m.output), toolCallId: id, toolName: toolNames.get(id) ?? null }]
    }
    case "agent_message":
      // Codex's message between agents (`multi_agent_v2`: a sub-agent's task, its answer to its parent): the agent's
      // input, its text parts as text, others (`encrypted_content`) `[type]`.
      return partsOf(m).map((p): NewItem => ({
        ...base,
        kind: "user_message",
        text: isRecord(p) && typeof p.text === "string" ? p.text : `[${isRecord(p) ? String(p.type) : "part"}]`
      }))
    case "reasoning": {
      const text = [...texts(Array.isArray(m.summary) ? m.summary : [], "summary_text"), ...texts(Array.isArray(m.content) ? m.content : [], "reasoning_text")].join("\n")
      return text === "" ? [] : [{ ...base, kind: "reasoning", text }]
    }
    default:
      // Codex's compaction trigger is the agent's request for a compaction; the rest comes from the model.
      return [{ ...base, kind: type === "compaction_trigger" ? "user_message" : "assistant_message", text: `[${String(type)}]` }]
  }
}

/** Tool names by call id, from every `function_call` and `custom_tool_call` of `items`. */
export const toolNamesOf = (items: ReadonlyArray<unknown>): ReadonlyMap<string, string> => {
  const names = new Map<string, string>()
  for (const m of items) {
    if (isRecord(m) && (m.type === "function_call" || m.type === "custom_tool_call")) names.set(String(m.call_id), String(m.name))
  }
  return names
}

/**
 * The prompt of a run: the last `input_text` of the last user message or Codex `agent_message` among `fresh` (`""`:
 * none). A `multi_agent_v2` sub-agent's task (and a sub-agent's answer to its parent) is an `agent_message` whose text
 * part is its header (`Message Type: NEW_TASK …`; the task itself is encrypted).
 */
const promptOf = (fresh: ReadonlyArray<unknown>): string => {
  for (let i = fresh.length - 1; i >= 0; i--) {
    const m = fresh[i]
    if (!isRecord(m) || (m.role !== "user" && m.type !== "agent_message")) continue
    const last = texts(partsOf(m), "input_text").at(-1)
    if (last !== undefined) return last
  }
  return ""
}

/** The role an item's message id starts with: a message's role, `assistant` for calls, `tool` for outputs, else the type. */
const roleOf = (m: unknown): string => {
  if (!isRecord(m)) return "item"
  if (typeof m.role === "string") return m.role
  if (m.type === "function_call" || m.type === "custom_tool_call" || m.type === "reasoning") return "assistant"
  if (m.type === "function_call_output" || m.type === "custom_tool_call_output") return "tool"
  return typeof m.type === "string" ? m.type : "item"
}

/** The OpenAI Responses wire (see the module docblock). */
export const openAiResponses: Wire = {
  name: "openai-responses",
  normalise,
  normaliseSystem: (instructions) => (instructions ?? null) as Json,
  itemsOf,
  toolNamesOf,
  promptOf,
  roleOf
}
