/**
 * GatewaySwitchResponsesAnthropic: a provider switch on the gateway's OpenAI Responses endpoint (issue 14 items 4 and
 * 5, docs/gateway.md "Routing and switching"): the agent (Codex) speaks Responses, and its model routes to an
 * `anthropic-messages` instance. The fit, the Anthropic stream reader and the errors are the Chat Completions
 * direction's (`GatewaySwitchAnthropic`); this module holds the Responses forms. No I/O (`GatewaySwitched` serves it,
 * with `GatewaySwitchWire.anthropicForResponses`).
 *
 * - **The request** (`anthropicOfResponses`, `toAnthropicFromResponses`): `instructions` and the leading `system` /
 *   `developer` input messages (Codex's system prompt) Anthropic's `system`, joined by a blank line; the other input
 *   items in order: a `user` message's parts text blocks (`input_image` an `image` block, `input_file` a `document`
 *   block or a text naming it, `GatewaySwitchMedia.anthropicBlockOfFile`; others `[type]`); a
 *   `system` / `developer` message a `user` message of its text; an `assistant` message's `output_text` parts and the
 *   `function_call` / `custom_tool_call` items after it one `assistant` message (text, then `tool_use` blocks: a
 *   function call's arguments parsed, a custom call's input as `{"input": …}`); `function_call_output` /
 *   `custom_tool_call_output` / `local_shell_call_output` items (consecutive ones, and a `user` message right after
 *   them) one `user` message of `tool_result` blocks, first (an output of parts: their text, or, with an image or a
 *   file among them, the parts as blocks: Anthropic reads images and PDFs in a tool result); Codex's `local_shell_call` the assistant's text
 *   `[local_shell_call <id>: <action>]`, and an output whose call is not a `tool_use` of the request (a local shell
 *   call's, a call left out) a text block `[<type> <call id>]` then its text, never a `tool_result` without its
 *   `tool_use`; Codex's `agent_message` (a message between its agents: a sub-agent's task, its final answer to its
 *   parent) a `user` message of its text parts (its `encrypted_content` left out); `reasoning` and other items left
 *   out (another provider cannot read them). Tools: functions
 *   `{name, description, input_schema: parameters}`, a custom (freeform) tool `{name, description, input_schema: an
 *   object of one string "input"}`, others left out; `tool_choice` and `parallel_tool_calls` mapped; `max_tokens` the
 *   output room (from `max_output_tokens`).
 * - **The reply** in Responses: `responseOf` for a whole answer, `streamTranslator` for the SSE events as they arrive
 *   (`response.created`, `response.in_progress`; each text block a `message` item: `response.output_item.added`,
 *   `response.content_part.added`, `response.output_text.delta`s, `response.output_text.done`,
 *   `response.content_part.done`, `response.output_item.done`; each `tool_use` block a `function_call` item (its
 *   `response.function_call_arguments.delta`s and `.done`) or, for a custom tool, a `custom_tool_call` item whose
 *   `input` is the call's `input`; then `response.completed`, or `response.incomplete` with `incomplete_details.reason:
 *   max_output_tokens` at Anthropic's `max_tokens`, `content_filter` at its `refusal`), each with its `sequence_number`. Usage: `input_tokens` the input
 *   with cache writes and reads, `input_tokens_details.cached_tokens` the reads and `cache_write_tokens` the writes.
 *   An error in the stream is `response.failed` (its `error.code`: `context_length_exceeded`, `rate_limit_exceeded`,
 *   `server_is_overloaded`, else the Anthropic type).
 */
import { isRecord, parseJson } from "./GatewayDialect.js"
import * as GatewaySwitch from "./GatewaySwitch.js"
import * as GatewaySwitchMedia from "./GatewaySwitchMedia.js"
import * as A from "./GatewaySwitchAnthropic.js"

type Json = Record<string, unknown>

/** An item's type (an input item without `type` and with a `role` is a message). */
const typeOf = (item: Json) => typeof item.type === "string" ? item.type : typeof item.role === "string" ? "message" : ""

/** A Responses content part as an Anthropic block. */
const partBlock = (part: unknown): Json => {
  if (!isRecord(part)) return { type: "text", text: "[part]" }
  if ((part.type === "input_text" || part.type === "output_text" || part.type === "text") && typeof part.text === "string") return { type: "text", text: part.text }
  if (part.type === "input_image" && typeof part.image_url === "string") return A.blockOf({ type: "image_url", image_url: { url: part.image_url } })
  if (part.type === "input_image" && typeof part.file_id === "string") return { type: "text", text: `[image: OpenAI file ${part.file_id}, not readable by this model]` }
  if (part.type === "input_file") return GatewaySwitchMedia.anthropicBlockOfFile(part)
  return { type: "text", text: `[${String(part.type)}]` }
}

/** A message's content as blocks (a string one text block). */
const blocksOfContent = (content: unknown): Array<Json> =>
  typeof content === "string" ? (content === "" ? [] : [{ type: "text", text: content }]) : Array.isArray(content) ? content.map(partBlock) : []

/**
 * A tool output as a `tool_result`'s content: a string as it is; parts (a `function_call_output`'s `input_text`,
 * `input_image`, `input_file`) as Anthropic blocks (`partBlock`: images and PDFs kept, Anthropic reads them in a tool
 * result), or their text joined by a blank line when all are text.
 */
const resultContent = (output: unknown): string | ReadonlyArray<Json> => {
  if (typeof output === "string") return output
  const blocks = blocksOfContent(output)
  return blocks.every((b) => b.type === "text") ? blocks.map((b) => String(b.text)).join("\n\n") : A.nonEmpty(blocks)
}

/** A tool output (a string, or parts) as text. */
const outputText = (output: unknown): string =>
  typeof output === "string" ? output : blocksOfContent(output).map((b) => typeof b.text === "string" ? b.text : "[part]").join("\n\n")

/** The Responses request's input as Anthropic messages (see the module docblock); `sources` index the input items. */
export const anthropicOfResponses = (body: Json): A.Converted => {
  const input = typeof body.input === "string" ? [{ role: "user", content: body.input }] : (Array.isArray(body.input) ? body.input : []).filter(isRecord)
  const messages: Array<{ role: string; content: Array<Json> }> = []
  const sources: Array<Array<number>> = []
  const callIds = new Map<string, string>()
  let last: "assistant" | "results" | "user" | null = null
  // The leading system / developer messages (Codex's system prompt: it sends no `instructions`) go to `system`.
  let lead = 0
  while (lead < input.length && typeOf(input[lead]!) === "message" && (input[lead]!.role === "developer" || input[lead]!.role === "system")) lead++
  const push = (role: "assistant" | "user", kind: "assistant" | "results" | "user", blocks: ReadonlyArray<Json>, j: number, join: boolean) => {
    if (join && messages.length > 0) {
      messages.at(-1)!.content.push(...blocks)
      sources.at(-1)!.push(j)
    } else {
      messages.push({ role, content: [...blocks] })
      sources.push([j])
    }
    last = kind
  }
  input.forEach((item, j) => {
    if (j < lead) return
    const type = typeOf(item)
    if (type === "agent_message") {
      // Codex's message between its agents (multi_agent_v2: a task, a follow-up, a sub-agent's final answer to its
      // parent) as the user's text; its encrypted part (the task's message) is left out: another provider cannot read it.
      const parts = (Array.isArray(item.content) ? item.content : []).filter((p) => !(isRecord(p) && p.type === "encrypted_content"))
      const blocks = blocksOfContent(parts)
      if (last === "results") push("user", "user", blocks.filter((b) => !(b.type === "text" && String(b.text).trim() === "")), j, true)
      else push("user", "user", A.nonEmpty(blocks), j, false)
      return
    }
    if (type === "message") {
      if (item.role === "assistant") {
        const blocks = blocksOfContent(item.content).filter((b) => !(b.type === "text" && String(b.text).trim() === ""))
        if (blocks.length > 0) push("assistant", "assistant", blocks, j, last === "assistant")
        return
      }
      const blocks = item.role === "user" ? blocksOfContent(item.content) : [{ type: "text", text: outputText(item.content) }]
      if (last === "results") push("user", "user", blocks.filter((b) => !(b.type === "text" && String(b.text).trim() === "")), j, true)
      else push("user", "user", A.nonEmpty(blocks), j, false)
      return
    }
    if (type === "function_call" || type === "custom_tool_call") {
      const raw = String(item.call_id ?? item.id ?? "")
      const id = GatewaySwitch.toolUseId(raw)
      callIds.set(id, raw)
      const args = type === "function_call" ? (typeof item.arguments === "string" ? parseJson(item.arguments) : item.arguments) : { input: String(item.input ?? "") }
      push("assistant", "assistant", [{ type: "tool_use", id, name: String(item.name ?? ""), input: isRecord(args) ? args : {} }], j, last === "assistant")
      return
    }
    if (type === "local_shell_call") {
      // Codex's built-in shell (no tool Anthropic is given): the call as the assistant's text, so its output has context.
      const action = isRecord(item.action) ? item.action : {}
      push("assistant", "assistant", [{ type: "text", text: `[local_shell_call ${String(item.call_id ?? item.id ?? "")}: ${JSON.stringify(action)}]` }], j, last === "assistant")
      return
    }
    if (type === "function_call_output" || type === "custom_tool_call_output" || type === "local_shell_call_output") {
      const raw = String(item.call_id ?? "")
      const id = GatewaySwitch.toolUseId(raw)
      // A result answers a tool_use only when its call went out as one (Anthropic refuses a tool_result without its
      // tool_use): the output of a call left out or sent as text (a local_shell_call) goes as text.
      const block = callIds.has(id)
        ? { type: "tool_result", tool_use_id: id, content: resultContent(item.output) }
        : { type: "text", text: `[${type} ${raw}]\n${outputText(item.output)}` }
      push("user", "results", [block], j, last === "results")
    }
    // reasoning, compaction and other items: left out.
  })
  // A user message answering calls holds its tool_result blocks first (Anthropic reads the results before other blocks).
  for (const m of messages) {
    if (m.role === "user") m.content = [...m.content.filter((b) => b.type === "tool_result"), ...m.content.filter((b) => b.type !== "tool_result")]
  }
  // An assistant message of text and calls: the text first (Anthropic reads the calls after it).
  for (const m of messages) if (m.role === "assistant") m.content = A.nonEmpty(m.content)
  const system = [typeof body.instructions === "string" ? body.instructions : "", ...input.slice(0, lead).map((m) => outputText(m.content))].filter((t) => t !== "").join("\n\n")
  return { system, messages, sources, callIds }
}

/** A Responses tool as an Anthropic tool (functions, custom tools); `null` for others. */
const toolOf = (t: unknown): Json | null => {
  if (!isRecord(t) || typeof t.name !== "string") return null
  const description = typeof t.description === "string" ? { description: t.description } : {}
  if (t.type === "function") return { name: t.name, ...description, input_schema: isRecord(t.parameters) ? t.parameters : { type: "object", properties: {} } }
  if (t.type === "custom") {
    return { name: t.name, ...description, input_schema: { type: "object", properties: { input: { type: "string", description: "The tool's whole input, as free text." } }, required: ["input"] } }
  }
  return null
}

/** The names of the request's custom (freeform) tools, whose calls go back as `custom_tool_call` items. */
export const customTools = (body: Json): ReadonlySet<string> =>
  new Set((Array.isArray(body.tools) ? body.tools : []).flatMap((t) => isRecord(t) && t.type === "custom" && typeof t.name === "string" ? [t.name] : []))

/** Responses' `tool_choice` (and `parallel_tool_calls: false`) in Anthropic's form (`undefined`: none sent). */
const toolChoiceOf = (c: unknown, parallel: unknown): Json | undefined => {
  const serial = parallel === false ? { disable_parallel_tool_use: true } : {}
  if (c === "auto") return { type: "auto", ...serial }
  if (c === "required") return { type: "any", ...serial }
  if (c === "none") return { type: "none" }
  if (isRecord(c) && typeof c.name === "string") return { type: "tool", name: c.name, ...serial }
  return parallel === false ? { type: "auto", ...serial } : undefined
}

/** A Responses request in Anthropic's form (see the module docblock): its input, tools, `tool_choice`; no stop sequences. */
export const requestOfResponses = (body: Json): A.AnthropicRequest => ({
  converted: anthropicOfResponses(body),
  tools: (Array.isArray(body.tools) ? body.tools : []).map(toolOf).filter((t): t is Json => t !== null),
  choice: toolChoiceOf(body.tool_choice, body.parallel_tool_calls),
  stop: []
})

/**
 * The agent's Responses request as an Anthropic Messages request fitted under the window (`GatewaySwitchAnthropic`'s
 * fit; `input.pointer` and `input.summaries` count the input items).
 */
export const toAnthropicFromResponses = (input: GatewaySwitch.FitInput): GatewaySwitch.FitResult => A.fitConverted(input, requestOfResponses(input.body))

/** Responses' `usage` of Anthropic usage (see the module docblock). */
export const responsesUsageOf = (u: A.Usage): Json => ({
  input_tokens: u.input + u.write + u.read,
  input_tokens_details: { cached_tokens: u.read, cache_write_tokens: u.write },
  output_tokens: u.output,
  output_tokens_details: { reasoning_tokens: 0 },
  total_tokens: u.input + u.write + u.read + u.output
})

/** A response id for an Anthropic message id. */
const responseIdOf = (id: unknown) => `resp_${typeof id === "string" && id !== "" ? id : `baton${Date.now().toString(36)}`}`

/** A visible `tool_use` as its output item: a `custom_tool_call` for a custom tool, else a `function_call`. */
const callItem = (id: string, name: string, args: string, custom: ReadonlySet<string>, status = "completed"): Json => {
  if (custom.has(name)) {
    const parsed = parseJson(args)
    return { type: "custom_tool_call", id: `ctc_${id}`, call_id: id, name, input: isRecord(parsed) && typeof parsed.input === "string" ? parsed.input : args, status }
  }
  return { type: "function_call", id: `fc_${id}`, call_id: id, name, arguments: args, status }
}

/** A text block as its output item. */
const messageItem = (id: string, text: string, status = "completed"): Json => ({
  type: "message",
  id,
  status,
  role: "assistant",
  content: [{ type: "output_text", text, annotations: [] }]
})

/**
 * The response's status fields for Anthropic's stop reason: `incomplete` with `incomplete_details.reason`
 * `max_output_tokens` at `max_tokens` (or the model's window), `content_filter` at a `refusal` (OpenAI's form of a
 * response its filter stopped; before, a refusal was a `completed` response without output, which Codex ended the
 * turn on silently, the refusal lost), else `completed`.
 */
const statusOf = (stop: unknown): Json =>
  stop === "max_tokens" || stop === "model_context_window_exceeded"
    ? { status: "incomplete", incomplete_details: { reason: "max_output_tokens" } }
    : stop === "refusal"
    ? { status: "incomplete", incomplete_details: { reason: "content_filter" } }
    : { status: "completed", incomplete_details: null }

/**
 * A whole Anthropic answer as a Responses `response` (`model`: the agent's): each text block a `message` item, each
 * visible `tool_use` a call item (calls of `hidden` tools left out), the usage of `earlier` hops added to its own.
 */
export const responseOf = (answer: unknown, model: string, hidden: ReadonlySet<string>, earlier: ReadonlyArray<unknown>, request: Json): Json => {
  const a = isRecord(answer) ? answer : {}
  const custom = customTools(request)
  const blocks = (Array.isArray(a.content) ? a.content : []).filter(isRecord)
  const output = blocks.flatMap((b, i): ReadonlyArray<Json> =>
    b.type === "text" && typeof b.text === "string" && b.text !== ""
      ? [messageItem(`msg_${String(a.id ?? "baton")}_${i}`, b.text)]
      : b.type === "tool_use" && !hidden.has(String(b.name))
      ? [callItem(String(b.id), String(b.name), JSON.stringify(b.input ?? {}), custom)]
      : []
  )
  return {
    id: responseIdOf(a.id),
    object: "response",
    created_at: Math.floor(Date.now() / 1000),
    model,
    ...statusOf(a.stop_reason),
    output,
    usage: responsesUsageOf(A.sum([...earlier, a.usage].map((u) => A.billedOver(A.noUsage, u))))
  }
}

/** Responses' error code for an OpenAI error body's (`chatError`'s) code. */
const failureCode = (body: Json): string => {
  const error = isRecord(body.error) ? body.error : {}
  const code = String(error.code ?? error.type ?? "server_error")
  return code === "rate_limit_error" ? "rate_limit_exceeded" : code === "overloaded_error" ? "server_is_overloaded" : code === "api_error" ? "server_error" : code
}

/** One Responses SSE event. */
const event = (data: Json) => `event: ${String(data.type)}\ndata: ${JSON.stringify(data)}\n\n`

/** An error body (OpenAI's shape) as a `response.failed` event. */
export const failedEvent = (body: Json, id = "resp_baton", sequence = 0): string => {
  const error = isRecord(body.error) ? body.error : {}
  return event({ type: "response.failed", sequence_number: sequence, response: { id, object: "response", status: "failed", error: { code: failureCode(body), message: String(error.message ?? "") }, output: [] } })
}

/**
 * The run's failure for translated Responses SSE text that holds a `response.failed` event: `overflow` for
 * `context_length_exceeded`, `provider_unavailable` for rate limits, overload and server errors, `provider_refused`
 * otherwise; `null` when none, or only one of Baton's own about the stream's shape ("the upstream's stream …").
 */
export const streamFailureOf = (text: string): { readonly code: "overflow" | "provider_unavailable" | "provider_refused"; readonly reason: string } | null => {
  const found = /^event: response\.failed\ndata: (.*)$/m.exec(text)
  if (found === null) return null
  const body = parseJson(found[1]!)
  const response = isRecord(body) && isRecord(body.response) ? body.response : {}
  const error = isRecord(response.error) ? response.error : {}
  const message = String(error.message ?? "")
  if (message.startsWith("the upstream's stream")) return null
  const code = String(error.code ?? "")
  const kind = code === "context_length_exceeded"
    ? "overflow"
    : ["rate_limit_exceeded", "server_is_overloaded", "server_error"].includes(code)
    ? "provider_unavailable"
    : "provider_refused"
  return { code: kind, reason: `the upstream's stream reported an error: ${code}: ${message.slice(0, 300)}` }
}

/** A whole `response` (`responseOf`) as the events of its stream. */
export const eventsOf = (response: Json): string => {
  let sequence = 0
  const e = (data: Json) => event({ ...data, sequence_number: sequence++ })
  const output = Array.isArray(response.output) ? response.output.filter(isRecord) : []
  return [
    e({ type: "response.created", response: { ...response, status: "in_progress", output: [], usage: null } }),
    ...output.flatMap((item, index) => [e({ type: "response.output_item.added", output_index: index, item }), e({ type: "response.output_item.done", output_index: index, item })]),
    e({ type: response.status === "incomplete" ? "response.incomplete" : "response.completed", response })
  ].join("")
}

/**
 * A translator of one streamed Anthropic answer into Responses events as they arrive (`anthropicStreamReader` writing
 * Responses events, see the module docblock): an error is a `response.failed` event.
 */
export const streamTranslator = (model: string, hiddenTools: ReadonlySet<string>, request: Json = {}) => {
  const custom = customTools(request)
  const created = Math.floor(Date.now() / 1000)
  let id = responseIdOf(null)
  let sequence = 0
  const e = (data: Json) => event({ ...data, sequence_number: sequence++ })
  /** Output indexes of the text blocks and calls (by their numbers), and the items done. */
  const texts = new Map<number, { index: number; id: string }>()
  const calls = new Map<number, { index: number; itemId: unknown; custom: boolean }>()
  const output: Array<Json> = []
  let next = 0
  const base = () => ({ id, object: "response", created_at: created, model })
  return A.anthropicStreamReader(hiddenTools, {
    start: (messageId) => {
      id = responseIdOf(messageId)
      const response = { ...base(), status: "in_progress", output: [], usage: null }
      return e({ type: "response.created", response }) + e({ type: "response.in_progress", response })
    },
    text: (block, delta) => {
      let at = texts.get(block)
      let opened = ""
      if (at === undefined) {
        at = { index: next++, id: `msg_${id.slice("resp_".length)}_${block}` }
        texts.set(block, at)
        opened = e({ type: "response.output_item.added", output_index: at.index, item: { ...messageItem(at.id, "", "in_progress"), content: [] } }) +
          e({ type: "response.content_part.added", item_id: at.id, output_index: at.index, content_index: 0, part: { type: "output_text", text: "", annotations: [] } })
      }
      return opened + e({ type: "response.output_text.delta", item_id: at.id, output_index: at.index, content_index: 0, delta })
    },
    textEnd: (block, text) => {
      const at = texts.get(block)!
      const item = messageItem(at.id, text)
      output.push(item)
      return e({ type: "response.output_text.done", item_id: at.id, output_index: at.index, content_index: 0, text }) +
        e({ type: "response.content_part.done", item_id: at.id, output_index: at.index, content_index: 0, part: { type: "output_text", text, annotations: [] } }) +
        e({ type: "response.output_item.done", output_index: at.index, item })
    },
    callStart: (at, callId, name) => {
      const index = next++
      const item = callItem(callId, name, "", custom, "in_progress")
      calls.set(at, { index, itemId: item.id, custom: custom.has(name) })
      return e({ type: "response.output_item.added", output_index: index, item: custom.has(name) ? { ...item, input: "" } : item })
    },
    // A custom call's input comes whole at its end (Anthropic streams it as the JSON of `{"input": …}`).
    callDelta: (at, delta) => {
      const call = calls.get(at)!
      return call.custom ? "" : e({ type: "response.function_call_arguments.delta", item_id: call.itemId, output_index: call.index, delta })
    },
    callEnd: (at, callId, name, args) => {
      const { index } = calls.get(at)!
      const item = callItem(callId, name, args, custom)
      output.push(item)
      const done = custom.has(name)
        ? e({ type: "response.custom_tool_call_input.done", item_id: item.id, output_index: index, input: item.input })
        : e({ type: "response.function_call_arguments.done", item_id: item.id, output_index: index, arguments: args })
      return done + e({ type: "response.output_item.done", output_index: index, item })
    },
    finish: (stopReason, _calls, usage) => {
      const status = statusOf(stopReason)
      const response = { ...base(), ...status, output: [...output], usage: responsesUsageOf(usage) }
      return e({ type: status.status === "incomplete" ? "response.incomplete" : "response.completed", response })
    },
    error: (body) => failedEvent(body, id, sequence++)
  })
}
