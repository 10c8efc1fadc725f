/**
 * OpenAiChat: OpenAI-compatible Chat Completions (`POST {baseUrl}/chat/completions`, streamed), the API of vLLM,
 * llama.cpp's server, Ollama and LM Studio, as a `ProviderAdapter`.
 *
 * Streamed tool calls arrive as deltas keyed by `index` (the first carries `id` and `function.name`, the rest pieces
 * of `function.arguments`; Google's endpoint sends no `index`: `callSlots`) and are assembled per call; the answer's items are emitted when its `finish_reason`
 * arrives, the usage with the final chunk (`stream_options.include_usage`), and the stream ends at `data: [DONE]`.
 * `reasoning_content`/`reasoning` deltas (vLLM, llama.cpp, DeepSeek-style servers) become a reasoning item and are
 * not sent back. The system prompt is the first message of every request, outside the stored list.
 *
 * An answer cut by its output limit (`finish_reason: "length"`) inside a call's arguments keeps its text and complete
 * calls; the cut call (arguments that are no JSON object) is neither run nor stored, and an `error` item says why.
 *
 * Overflow: HTTP 400 with `context_length_exceeded` or a "maximum context length is M tokens … N tokens" message
 * (OpenAI, vLLM), and llama.cpp's `exceed_context_size_error` with `n_prompt_tokens`/`n_ctx`.
 */
import { callItem, type Dialect, duplicateCall, entryParts, field, markedOutput, num, overflowNumbers, parseJson, type RequestOutcome, type StreamParser, str, textItem, type ToolCall, type WireFailure, wireFailure } from "./internal/Dialect.js"
import type { SseMessage } from "./internal/Sse.js"
import * as ModelApiAdapter from "./ModelApiAdapter.js"
import type { ProducedItem, ProviderAdapterShape, TextDelta, ToolDefinition } from "./ProviderAdapter.js"

/**
 * Which call a streamed `tool_calls` delta belongs to: a function of the deltas in stream order, giving each its
 * call's slot (0, 1, …). A delta with a numeric `index` is that call (OpenAI's form). One without an `index` (Google's
 * OpenAI-compatible endpoint sends none: each parallel call a delta of its own with its `id`, one call's arguments
 * possibly over several deltas after the first, and a call's `extra_content` possibly in a metadata-only delta of its
 * own with the call's `id`) is the call its `id` names (the previous delta's call when it has none), or a new call when
 * its `id` is new (or it is the first). Except that a delta naming a function (`function.name`) while the call it would
 * go on with already has a name and its arguments are whole (a JSON value) starts a new call: two parallel calls that
 * share one id (or have none) are two calls. A delta whose `index` already has a call with another id is another call
 * too, at the next free slot, and that `index` stands for it from then on: OpenAI never gives one index a second id,
 * and proxies in front of Gemini number each parallel call 0 (its place in its chunk). So is a delta naming a
 * function at an `index` whose call is named and whole: such proxies give the parallel calls one shared id, or none.
 *
 * Before, a missing `index` was 0 (Gemini's parallel calls became one call, their arguments glued, the others lost);
 * then only the previous delta's `id` was compared, so a call's metadata-only delta after the next call began became
 * a call of its own without a name (on a switch, a `tool_use` block named `""`; the first call's thought signature
 * lost), and a second call with the first's id went on with it (name `ReadRead`, arguments `{…}{…}`); until branch
 * `b46gw` the same held for calls that all came at `index` 0 with one id or none.
 */
export const callSlots = (): (call: Record<string, unknown>) => number => {
  /** Each id's latest call. */
  const byId = new Map<string, number>()
  /** Each call so far: its id (`null` before one), whether it was named, and its arguments. */
  const calls = new Map<number, { id: string | null; named: boolean; arguments: string }>()
  /** The slot each `index` stands for (its own number, unless another call took it). */
  const byIndex = new Map<number, number>()
  let last: number | null = null
  let next = 0
  const whole = (slot: number) => {
    const c = calls.get(slot)
    return c !== undefined && c.named && c.arguments.trim() !== "" && parseJson(c.arguments) !== undefined
  }
  return (call) => {
    const id = typeof call.id === "string" && call.id !== "" ? call.id : null
    const fn = typeof call.function === "object" && call.function !== null ? call.function as Record<string, unknown> : {}
    const named = typeof fn.name === "string" && fn.name !== ""
    let slot: number
    if (typeof call.index === "number") {
      const mapped = byIndex.get(call.index)
      const other = mapped !== undefined && ((id !== null && (calls.get(mapped)?.id ?? id) !== id) || (named && whole(mapped)))
      slot = mapped !== undefined && !other ? mapped : calls.has(call.index) ? next : call.index
      byIndex.set(call.index, slot)
    } else {
      const known = id === null ? last : byId.get(id) ?? null
      slot = known === null || (named && whole(known)) ? next : known
    }
    const c = calls.get(slot) ?? { id: null, named: false, arguments: "" }
    if (id !== null) c.id = id
    if (named) c.named = true
    if (typeof fn.arguments === "string") c.arguments += fn.arguments
    calls.set(slot, c)
    if (id !== null) byId.set(id, slot)
    last = slot
    next = Math.max(next, slot + 1)
    return slot
  }
}

/** A tool as Chat Completions `tools` entry (JSON text): a function with the tool's name, description and schema. */
export const encodeTool = (t: ToolDefinition) =>
  JSON.stringify({ type: "function", function: { name: t.name, description: t.description, parameters: t.inputSchema } })

const errorFailure = (error: unknown, prefix: string): WireFailure => {
  const code = str(field(error, "code")) ?? str(field(error, "type")) ?? "error"
  const text = str(field(error, "message")) ?? "no message"
  const nPrompt = num(field(error, "n_prompt_tokens"))
  const nCtx = num(field(error, "n_ctx"))
  if (
    code === "context_length_exceeded" || str(field(error, "type")) === "exceed_context_size_error" ||
    /maximum context length|context size|context window|context length/i.test(text)
  ) {
    const numbers = overflowNumbers(text) ??
      { ...(nPrompt === undefined ? {} : { requestedTokens: nPrompt }), ...(nCtx === undefined ? {} : { limitTokens: nCtx }) }
    return wireFailure("overflow", `${prefix}${code}: ${text}`, false, numbers)
  }
  return wireFailure("refused", `${prefix}${code}: ${text}`)
}

interface Assembling {
  id: string
  name: string
  arguments: string
}

const parser = (_offered: ReadonlySet<string>, onDelta: ((delta: TextDelta) => void) | null): StreamParser => {
  let text = ""
  let reasoning = ""
  let messageId: string | null = null
  const tools: Array<Assembling | undefined> = []
  const slotOf = callSlots()
  let finished = false
  let complete = false
  let usage: { input: number; cached: number; output: number } | null = null
  let output: string | null = null
  let calls: ReadonlyArray<ToolCall> = []

  const finish = (reason: string): ReadonlyArray<ProducedItem> | WireFailure => {
    finished = true
    const assembled: ReadonlyArray<ToolCall> = tools.filter((t): t is Assembling => t !== undefined).map((t) => ({
      id: t.id,
      name: t.name,
      arguments: t.arguments === "" ? "{}" : t.arguments,
      wire: "function"
    }))
    // Found by a review: an answer cut by its output limit (`finish_reason: "length"`) while a call's arguments
    // streamed ran the call with truncated JSON. Such a call is dropped (never run nor stored), and an error item
    // says why; the text and the calls that completed stand.
    const isCut = (c: ToolCall) => {
      const args = parseJson(c.arguments)
      return reason === "length" && (typeof args !== "object" || args === null || Array.isArray(args))
    }
    const all = assembled.filter((c) => !isCut(c))
    const notes = assembled.filter(isCut).map((c) =>
      textItem("error", `The answer reached its output limit (finish_reason length) inside a call to ${c.name} (${c.id}): the call was cut off and not run`, messageId, true)
    )
    // A second call with an earlier call's id: the calls before it stand, the response fails (see `duplicateCall`).
    const duplicate = all.findIndex((c, i) => all.findIndex((d) => d.id === c.id) < i)
    calls = duplicate === -1 ? all : all.slice(0, duplicate)
    const message: Record<string, unknown> = { role: "assistant", content: text === "" ? null : text }
    if (calls.length > 0) message.tool_calls = calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }))
    output = text === "" && calls.length === 0 ? null : JSON.stringify(message)
    const items = [
      ...(reasoning === "" ? [] : [textItem("reasoning", reasoning, messageId)]),
      ...(text === "" ? [] : [textItem("assistant_message", text, messageId)]),
      ...calls.map((c) => callItem(c, messageId)),
      ...notes
    ]
    return duplicate === -1 ? items : duplicateCall("Chat Completions", all[duplicate]!.id, items)
  }

  const onEvent = (m: SseMessage): ReadonlyArray<ProducedItem> | WireFailure => {
    if (m.data === "[DONE]") {
      complete = true
      return finished ? [] : finish("stop")
    }
    const data = parseJson(m.data)
    if (data === undefined) return wireFailure("protocol", `unreadable Chat Completions chunk: ${m.data.slice(0, 200)}`)
    const error = field(data, "error")
    if (error !== undefined && error !== null) return errorFailure(error, "Chat Completions stream error ")
    messageId = messageId ?? str(field(data, "id")) ?? null
    const u = field(data, "usage")
    const input = num(field(u, "prompt_tokens"))
    if (input !== undefined) {
      usage = { input, cached: num(field(field(u, "prompt_tokens_details"), "cached_tokens")) ?? 0, output: num(field(u, "completion_tokens")) ?? 0 }
    }
    const choices = field(data, "choices")
    const choice = Array.isArray(choices) ? choices.find((c) => (num(field(c, "index")) ?? 0) === 0) : undefined
    if (choice === undefined) return []
    const delta = field(choice, "delta")
    const piece = str(field(delta, "content")) ?? ""
    const thought = str(field(delta, "reasoning_content")) ?? str(field(delta, "reasoning")) ?? ""
    text += piece
    reasoning += thought
    if (onDelta !== null && thought !== "") onDelta({ kind: "reasoning", text: thought })
    if (onDelta !== null && piece !== "") onDelta({ kind: "text", text: piece })
    const deltas = field(delta, "tool_calls")
    if (Array.isArray(deltas)) {
      for (const d of deltas) {
        if (typeof d !== "object" || d === null || Array.isArray(d)) continue
        const index = slotOf(d as Record<string, unknown>)
        const fn = field(d, "function")
        const t = tools[index] ?? (tools[index] = { id: "", name: "", arguments: "" })
        t.id = str(field(d, "id")) ?? t.id
        t.name += str(field(fn, "name")) ?? ""
        t.arguments += str(field(fn, "arguments")) ?? ""
      }
    }
    const reason = str(field(choice, "finish_reason"))
    return reason === undefined || finished ? [] : finish(reason)
  }

  const outcome = (): RequestOutcome => ({
    output,
    calls,
    contextTokens: usage === null ? null : usage.input + usage.output,
    tokens: usage === null ? null : { inputTokens: usage.input - usage.cached, cacheWriteTokens: 0, cacheReadTokens: usage.cached, outputTokens: usage.output },
    overflow: false
  })
  return { onEvent, complete: () => complete, outcome, partial: () => output }
}

/** A non-streamed Chat Completions body as the chunks of its stream. */
const synthesize = (body: unknown): ReadonlyArray<SseMessage> => {
  const choices = field(body, "choices")
  const first = Array.isArray(choices) ? choices[0] : undefined
  const message = field(first, "message")
  const toolCalls = field(message, "tool_calls")
  const chunk = {
    id: field(body, "id"),
    choices: [{
      index: 0,
      delta: {
        content: field(message, "content") ?? null,
        ...(field(message, "reasoning_content") === undefined ? {} : { reasoning_content: field(message, "reasoning_content") }),
        ...(Array.isArray(toolCalls) ? { tool_calls: toolCalls.map((c, index) => ({ index, ...(c as object) })) } : {})
      },
      finish_reason: field(first, "finish_reason") ?? "stop"
    }],
    usage: field(body, "usage") ?? null
  }
  return [{ event: "message", data: JSON.stringify(chunk) }, { event: "message", data: "[DONE]" }]
}

/** The Chat Completions dialect (see the module docblock). */
export const dialect: Dialect = {
  api: "Chat Completions",
  path: "/chat/completions",
  authHeaders: (key) => (key === null ? {} : { authorization: `Bearer ${key}` }),
  userTurn: (prompt, inlineHistory) =>
    (inlineHistory === null ? "" : JSON.stringify({ role: "user", content: inlineHistory }) + ",") + JSON.stringify({ role: "user", content: prompt }),
  history: (rendered) => JSON.stringify({ role: "user", content: rendered }),
  toolResults: (results) => results.map((r) => JSON.stringify({ role: "tool", tool_call_id: r.toolCallId, content: markedOutput(r) })).join(","),
  callsOf: (output) => {
    const calls = field(parseJson(output), "tool_calls")
    return (Array.isArray(calls) ? calls : []).map((c) => ({
      id: str(field(c, "id")) ?? "",
      name: str(field(field(c, "function"), "name")) ?? "",
      arguments: str(field(field(c, "function"), "arguments")) ?? "",
      wire: "function"
    }))
  },
  answeredBy: (results) => {
    const items = parseJson(`[${results}]`)
    return (Array.isArray(items) ? items : []).map((i) => str(field(i, "tool_call_id")) ?? "")
  },
  render: (input) => [
    `{"model":${JSON.stringify(input.model)},"max_tokens":${input.maxOutputTokens},"stream":true` +
    `,"stream_options":{"include_usage":true}` +
    (input.tools.length === 0 ? "" : `,"tools":[${input.tools.map(encodeTool).join(",")}]`) +
    `,"messages":[` +
    (input.system === undefined ? "" : JSON.stringify({ role: "system", content: input.system }) + (input.entries.length === 0 ? "" : ",")),
    ...entryParts(input.entries.length, () => null),
    "]}"
  ],
  parser,
  synthesize,
  httpFailure: (status, body) => {
    const error = field(parseJson(body), "error")
    if (error === undefined || error === null) {
      return wireFailure(status >= 500 ? "unavailable" : "refused", `Chat Completions answered HTTP ${status}: ${body.slice(0, 300)}`)
    }
    return errorFailure(typeof error === "string" ? { message: error } : error, `HTTP ${status}: `)
  }
}

/** Builds the Chat Completions adapter (see `ModelApiAdapter.make` for what it needs). */
export const make = (options: ModelApiAdapter.ModelApiOptions): ProviderAdapterShape => ModelApiAdapter.make(dialect, options)
