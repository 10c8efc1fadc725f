/**
 * OpenAiResponses: the OpenAI Responses API (`POST {baseUrl}/responses`, streamed) as a `ProviderAdapter`.
 *
 * Stateless use: `store: false`, and the input list is the one Baton keeps (the native thread), with reasoning items
 * carried back by their `encrypted_content` (`include: ["reasoning.encrypted_content"]`) and compaction items
 * unchanged. Output items are stored without their server ids (an id names a stored item, and nothing is stored).
 * `prompt_cache_key` is the native ref, so one lane's requests are routed to the same cache.
 *
 * Items: `message` (text; a refusal part is an error item), `function_call`, `custom_tool_call` and
 * `local_shell_call` (tool calls), `reasoning` (its summary text), `compaction` (a summary item). A
 * `multi_tool_use.parallel` wrapper (a call named `parallel` carrying `tool_uses`, seen when a model wraps parallel
 * calls) is unwrapped into one call per use, ids `<call_id>_<n>`, when no offered tool has its name.
 *
 * An answer cut while a call's arguments streamed (`response.incomplete`, `incomplete_details.reason`
 * `max_output_tokens`: the call's item has `status: "incomplete"`) keeps what completed; the cut call is neither run
 * nor stored, and an `error` item says why. Such a call in a `response.completed` is a `protocol` fault.
 *
 * Usage: `input_tokens` includes `input_tokens_details.cached_tokens` (billed as cache reads); there is no cache
 * write charge. Overflow: HTTP 400 `context_length_exceeded`, or `response.failed` with that code mid-stream.
 * Only the events Baton reads are parsed (by their SSE `event:` name): the rest are skipped unread.
 */
import { callItem, type Dialect, duplicateCall, entryParts, field, markedOutput, num, overflowNumbers, parseJson, type RequestOutcome, type StreamParser, str, textItem, type ToolCall, type WireFailure, wireFailure } from "./internal/Dialect.js"
import type { SseMessage } from "./internal/Sse.js"
import * as ModelApiAdapter from "./ModelApiAdapter.js"
import type { ProducedItem, ProviderAdapterShape, TextDelta, ToolDefinition, ToolResultInput } from "./ProviderAdapter.js"

/** The events whose data Baton reads; every other event is skipped without parsing. */
const readEvents = new Set(["response.output_item.done", "response.completed", "response.incomplete", "response.failed", "error"])

/** A tool as a Responses function (`strict: false`: the schema is the agent's, not checked for strict mode). */
export const encodeTool = (t: ToolDefinition) =>
  JSON.stringify({ type: "function", name: t.name, description: t.description, parameters: t.inputSchema, strict: false })

const userMessage = (texts: ReadonlyArray<string>) =>
  JSON.stringify({ type: "message", role: "user", content: texts.map((text) => ({ type: "input_text", text })) })

/** An error object's failure (`response.failed`'s `error`, an `error` event, an HTTP error body's `error`). */
const errorFailure = (error: unknown, prefix: string): WireFailure => {
  const code = str(field(error, "code")) ?? str(field(error, "type")) ?? "error"
  const text = str(field(error, "message")) ?? "no message"
  if (code === "context_length_exceeded" || /context.length|context window/i.test(text)) {
    return wireFailure("overflow", `${prefix}${code}: ${text}`, false, overflowNumbers(text) ?? {})
  }
  const retryable = code === "rate_limit_exceeded" || code === "server_error" || code === "server_is_overloaded"
  return wireFailure(retryable ? "unavailable" : "refused", `${prefix}${code}: ${text}`, retryable)
}

/** The parallel wrapper's uses, when `call` is one (`null` otherwise). */
const unwrapParallel = (call: ToolCall, offered: ReadonlySet<string>): ReadonlyArray<ToolCall> | null => {
  if (offered.has(call.name) || (call.name !== "parallel" && call.name !== "multi_tool_use.parallel")) return null
  const uses = field(parseJson(call.arguments), "tool_uses")
  if (!Array.isArray(uses) || uses.length === 0) return null
  return uses.map((use, n) => ({
    id: `${call.id}_${n}`,
    name: (str(field(use, "recipient_name")) ?? "").replace(/^functions\./, ""),
    arguments: JSON.stringify(field(use, "parameters") ?? {}),
    wire: "function_call"
  }))
}

/** The delta events read only when someone listens to deltas. */
const deltaEvents: Record<string, TextDelta["kind"]> = {
  "response.output_text.delta": "text",
  "response.reasoning_summary_text.delta": "reasoning"
}

const parser = (offered: ReadonlySet<string>, onDelta: ((delta: TextDelta) => void) | null): StreamParser => {
  const output: Array<string> = []
  const calls: Array<ToolCall> = []
  let complete = false
  let usage: { input: number; cached: number; output: number } | null = null
  // Calls the response cut off (`status: "incomplete"`: the answer reached max_output_tokens, or stopped for another
  // reason, while the call's arguments streamed): never run nor stored; the terminal event says why (`cutNotes`).
  const cut: Array<{ readonly id: string; readonly name: string; readonly itemId: string | null }> = []
  const seen = new Set<string>()

  /** Error items saying that the cut calls were not run (`reason`: the response's `incomplete_details.reason`). */
  const cutNotes = (reason: string): ReadonlyArray<ProducedItem> =>
    cut.splice(0).map((c) =>
      textItem(
        "error",
        reason === "max_output_tokens"
          ? `The answer reached its output limit (max_output_tokens) inside a call to ${c.name} (${c.id}): the call was cut off and not run`
          : `The answer stopped (${reason}) inside a call to ${c.name} (${c.id}): the call was cut off and not run`,
        c.itemId,
        true
      )
    )

  const onItem = (item: unknown): ReadonlyArray<ProducedItem> | WireFailure => {
    const type = str(field(item, "type"))
    const id = str(field(item, "id")) ?? null
    switch (type) {
      case "message": {
        const content = field(item, "content")
        const parts = Array.isArray(content) ? content : []
        const text = parts.filter((p) => field(p, "type") === "output_text").map((p) => str(field(p, "text")) ?? "").join("")
        const refusal = parts.filter((p) => field(p, "type") === "refusal").map((p) => str(field(p, "refusal")) ?? "").join("")
        output.push(JSON.stringify({ type: "message", role: "assistant", content: parts.map((p) => field(p, "type") === "output_text" ? { type: "output_text", text: str(field(p, "text")) ?? "" } : p) }))
        return [
          ...(text === "" ? [] : [textItem("assistant_message", text, id)]),
          ...(refusal === "" ? [] : [textItem("error", `The model declined to answer: ${refusal}`, id, true)])
        ]
      }
      case "function_call":
      case "custom_tool_call": {
        const callId = str(field(item, "call_id")) ?? ""
        seen.add(callId)
        if (str(field(item, "status")) === "incomplete") {
          // Found by a review: a call cut by max_output_tokens was run with its truncated JSON arguments.
          cut.push({ id: callId, name: str(field(item, "name")) ?? "?", itemId: id })
          return []
        }
        const call: ToolCall = {
          id: str(field(item, "call_id")) ?? "",
          name: str(field(item, "name")) ?? "",
          arguments: type === "function_call" ? (str(field(item, "arguments")) ?? "") : (str(field(item, "input")) ?? ""),
          wire: type
        }
        const unwrapped = type === "function_call" ? unwrapParallel(call, offered) : null
        const made = unwrapped ?? [call]
        for (const [i, c] of made.entries()) {
          if (calls.some((earlier) => earlier.id === c.id)) return duplicateCall("OpenAI Responses", c.id, made.slice(0, i).map((m) => callItem(m, id)))
          calls.push(c)
          output.push(c.wire === "function_call"
            ? JSON.stringify({ type: "function_call", call_id: c.id, name: c.name, arguments: c.arguments })
            : JSON.stringify({ type: "custom_tool_call", call_id: c.id, name: c.name, input: c.arguments }))
        }
        return made.map((c) => callItem(c, id))
      }
      case "local_shell_call": {
        const call: ToolCall = { id: str(field(item, "call_id")) ?? "", name: "local_shell", arguments: JSON.stringify(field(item, "action") ?? {}), wire: "local_shell_call" }
        if (calls.some((earlier) => earlier.id === call.id)) return duplicateCall("OpenAI Responses", call.id)
        calls.push(call)
        const { id: _id, ...rest } = item as Record<string, unknown>
        output.push(JSON.stringify(rest))
        return [callItem(call, id)]
      }
      case "reasoning": {
        const summary = field(item, "summary")
        const text = (Array.isArray(summary) ? summary : []).map((s) => str(field(s, "text")) ?? "").join("\n\n")
        const encrypted = str(field(item, "encrypted_content"))
        // Without its encrypted content a reasoning item cannot be sent back statelessly: it is not kept.
        if (encrypted !== undefined) output.push(JSON.stringify({ type: "reasoning", summary: Array.isArray(summary) ? summary : [], encrypted_content: encrypted }))
        return text === "" ? [] : [textItem("reasoning", text, id)]
      }
      case "compaction": {
        const { id: _id, ...rest } = item as Record<string, unknown>
        output.push(JSON.stringify(rest))
        return [textItem("summary", "[the provider compacted the conversation; its summary is encrypted]", id)]
      }
      default:
        return []
    }
  }

  const onEvent = (m: SseMessage): ReadonlyArray<ProducedItem> | WireFailure => {
    if (onDelta !== null && deltaEvents[m.event] !== undefined) {
      const piece = str(field(parseJson(m.data), "delta"))
      if (piece !== undefined && piece !== "") onDelta({ kind: deltaEvents[m.event]!, text: piece })
      return []
    }
    if (m.event !== "message" && !readEvents.has(m.event)) return []
    const data = parseJson(m.data)
    if (data === undefined) return wireFailure("protocol", `unreadable OpenAI Responses event ${m.event}: ${m.data.slice(0, 200)}`)
    const type = str(field(data, "type")) ?? m.event
    switch (type) {
      case "response.output_item.done":
        return onItem(field(data, "item"))
      case "response.completed":
      case "response.incomplete": {
        const response = field(data, "response")
        if (type === "response.incomplete") {
          // A call cut before its `output_item.done` is only in the final response's output list.
          const listed = field(response, "output")
          for (const item of Array.isArray(listed) ? listed : []) {
            const t = str(field(item, "type"))
            const callId = str(field(item, "call_id")) ?? ""
            if ((t === "function_call" || t === "custom_tool_call") && !seen.has(callId) && str(field(item, "status")) !== "completed") {
              seen.add(callId)
              cut.push({ id: callId, name: str(field(item, "name")) ?? "?", itemId: str(field(item, "id")) ?? null })
            }
          }
        }
        const u = field(response, "usage")
        const input = num(field(u, "input_tokens"))
        if (input !== undefined) {
          usage = {
            input,
            cached: num(field(field(u, "input_tokens_details"), "cached_tokens")) ?? 0,
            output: num(field(u, "output_tokens")) ?? 0
          }
        }
        complete = true
        if (cut.length === 0) return []
        if (type === "response.completed") {
          const first = cut[0]!
          return wireFailure("protocol", `OpenAI Responses marked call ${first.id} incomplete in a completed response`)
        }
        return cutNotes(str(field(field(response, "incomplete_details"), "reason")) ?? "incomplete")
      }
      case "response.failed":
        return errorFailure(field(field(data, "response"), "error"), "OpenAI Responses response.failed ")
      case "error":
        return errorFailure(data, "OpenAI Responses error ")
      default:
        return []
    }
  }

  const joined = () => (output.length === 0 ? null : output.join(","))
  const outcome = (): RequestOutcome => ({
    output: joined(),
    calls,
    contextTokens: usage === null ? null : usage.input + usage.output,
    tokens: usage === null ? null : { inputTokens: usage.input - usage.cached, cacheWriteTokens: 0, cacheReadTokens: usage.cached, outputTokens: usage.output },
    overflow: false
  })
  return { onEvent, complete: () => complete, outcome, partial: joined }
}

const resultWire: Record<string, string> = {
  function_call: "function_call_output",
  custom_tool_call: "custom_tool_call_output",
  local_shell_call: "local_shell_call_output"
}

const toolResults = (results: ReadonlyArray<ToolResultInput>, calls: ReadonlyArray<{ readonly id: string; readonly wire: string }>) =>
  results.map((r) => {
    const wire = resultWire[calls.find((c) => c.id === r.toolCallId)?.wire ?? "function_call"] ?? "function_call_output"
    return JSON.stringify({ type: wire, call_id: r.toolCallId, output: markedOutput(r) })
  }).join(",")

/** A non-streamed Responses body as the events of its stream. */
const synthesize = (body: unknown): ReadonlyArray<SseMessage> => {
  const items = field(body, "output")
  const events: Array<SseMessage> = (Array.isArray(items) ? items : []).map((item) => ({
    event: "response.output_item.done",
    data: JSON.stringify({ type: "response.output_item.done", item })
  }))
  const status = str(field(body, "status"))
  const type = status === "failed" ? "response.failed" : status === "incomplete" ? "response.incomplete" : "response.completed"
  events.push({ event: type, data: JSON.stringify({ type, response: body }) })
  return events
}

/** The OpenAI Responses dialect (see the module docblock). */
export const dialect: Dialect = {
  api: "OpenAI Responses",
  path: "/responses",
  authHeaders: (key) => (key === null ? {} : { authorization: `Bearer ${key}` }),
  userTurn: (prompt, inlineHistory) => userMessage(inlineHistory === null ? [prompt] : [inlineHistory, prompt]),
  history: (rendered) => userMessage([rendered]),
  toolResults,
  callsOf: (output) => {
    const items = parseJson(`[${output}]`)
    return (Array.isArray(items) ? items : []).flatMap((i): ReadonlyArray<ToolCall> => {
      const type = str(field(i, "type"))
      if (type === "function_call") return [{ id: str(field(i, "call_id")) ?? "", name: str(field(i, "name")) ?? "", arguments: str(field(i, "arguments")) ?? "", wire: type }]
      if (type === "custom_tool_call") return [{ id: str(field(i, "call_id")) ?? "", name: str(field(i, "name")) ?? "", arguments: str(field(i, "input")) ?? "", wire: type }]
      if (type === "local_shell_call") return [{ id: str(field(i, "call_id")) ?? "", name: "local_shell", arguments: JSON.stringify(field(i, "action") ?? {}), wire: type }]
      return []
    })
  },
  answeredBy: (results) => {
    const items = parseJson(`[${results}]`)
    return (Array.isArray(items) ? items : []).map((i) => str(field(i, "call_id")) ?? "")
  },
  render: (input) => [
    `{"model":${JSON.stringify(input.model)},"max_output_tokens":${input.maxOutputTokens},"stream":true,"store":false` +
    `,"include":["reasoning.encrypted_content"],"prompt_cache_key":${JSON.stringify(input.cacheKey)}` +
    (input.system === undefined ? "" : `,"instructions":${JSON.stringify(input.system)}`) +
    (input.tools.length === 0 ? "" : `,"tools":[${input.tools.map(encodeTool).join(",")}]`) +
    `,"input":[`,
    ...entryParts(input.entries.length, () => null),
    "]}"
  ],
  parser,
  synthesize,
  httpFailure: (status, body) => {
    const error = field(parseJson(body), "error")
    if (error === undefined) return wireFailure(status >= 500 ? "unavailable" : "refused", `OpenAI Responses answered HTTP ${status}: ${body.slice(0, 300)}`)
    return errorFailure(error, `HTTP ${status}: `)
  }
}

/** Builds the OpenAI Responses adapter (see `ModelApiAdapter.make` for what it needs). */
export const make = (options: ModelApiAdapter.ModelApiOptions): ProviderAdapterShape => ModelApiAdapter.make(dialect, options)
