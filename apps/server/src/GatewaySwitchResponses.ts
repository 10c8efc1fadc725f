/**
 * GatewaySwitchResponses: a provider switch from the gateway's Anthropic Messages endpoint to an `openai-responses`
 * instance (OpenAI's Responses API; issue 14 item 4, docs/gateway.md "Routing and switching"). No I/O:
 * `GatewaySwitched` does the HTTP and the record, with this module's conversion in place of `GatewaySwitch`'s Chat one.
 *
 * - **The request** (`toResponses`): the fit is the Chat switch's (`GatewaySwitch.toChat`: stubs, then deferral with a
 *   pointer, the agent's newest turn pinned, `overflow` when that alone is over), with each converted message counted
 *   as the Responses items it becomes (`sizes`), so the limit holds for what goes out. The fitted Chat messages then
 *   become Responses `input` items: the system prompt the body's `instructions`; a user (or pointer, or
 *   mid-conversation `system`) message a `message` item with one `input_text` part (the adapter's encoding), or, when
 *   the Chat message holds media (an array of parts), its parts as `input_text`, `input_image` and `input_file` parts
 *   (`GatewaySwitchMedia.responsesPartOf`; a tool result's media arrive in the user message after its
 *   `function_call_output`, as on the Chat switch); an
 *   assistant message a `message` item with one `output_text` part (when it has text) and a `function_call` item per
 *   call (`call_id` the `tool_use` id, `arguments` the input's JSON); a `tool` message a `function_call_output` item
 *   (`OpenAiResponses.dialect.toolResults`: a failed result's output starts with `Error: `, as on the Chat switch).
 *   Tools as the Responses adapter encodes them (`OpenAiResponses.encodeTool`: top-level `name`, `parameters`,
 *   `strict: false`), `tool_choice` (`auto`, `required`, `none`, `{type: "function", name}`), `parallel_tool_calls`,
 *   `temperature`, `top_p`, `max_output_tokens` the fit's output room (at least 16, the API's minimum), `store: false` (the history is sent whole each
 *   time, as Codex does), `stream`. `stop_sequences` are not sent: the Responses API has no stop sequences.
 * - **The reply** in Anthropic's protocol: `messageOf` for a whole answer (its `output` items: a `message`'s
 *   `output_text` parts one text block, a `refusal` part a text block, each `function_call` a `tool_use` block, a
 *   `multi_tool_use.parallel` wrapper unwrapped as the adapter does; reasoning, and a call the output limit cut off
 *   (`status: "incomplete"`, never run, as the adapter does), left out; a `failed` one an error, `failureOf`),
 *   `streamTranslator` for the
 *   SSE events as they arrive (`response.created` -> `message_start`; `response.output_text.delta` -> text deltas,
 *   or a message item's whole text at its `response.output_item.done` when no delta came; each `function_call` a
 *   complete `tool_use` block at its `output_item.done`; `response.completed`/`incomplete` -> `message_delta` with the
 *   stop reason and usage, `message_stop`). Stop reason: `tool_use` when a call is visible, `max_tokens` for
 *   `incomplete_details.reason` `max_output_tokens`, `refusal` for `content_filter` or a refusal part, else
 *   `end_turn`. Usage: `input_tokens` (which include `input_tokens_details.cached_tokens`) as uncached input plus
 *   cache reads, `output_tokens` as output. `response.failed` and `error` events become an Anthropic `error` event
 *   (`context_length_exceeded`: the "prompt is too long" one); a stream that ends before its terminal event too.
 * - **Hidden calls** (`thread_read`, answered by the gateway) as on the Chat switch: never shown to the agent; an
 *   answer whose only calls are hidden leaves the message open, and the continuation's input is the hop's output
 *   items (as input items: its text and calls, reasoning left out: without `encrypted_content` it cannot be sent back
 *   with `store: false`) and the gateway's `function_call_output` answers.
 */
import { OpenAiResponses, Sse } from "@baton/providers"
import { isRecord, parseJson } from "./GatewayDialect.js"
import * as GatewayMedia from "./GatewayMedia.js"
import * as GatewaySwitch from "./GatewaySwitch.js"
import * as GatewaySwitchMedia from "./GatewaySwitchMedia.js"

type Json = Record<string, unknown>

/** A Responses input item (what `input` holds). */
export type InputItem = Json

/** The Responses input items one fitted Chat Completions message becomes (see the module docblock). */
export const itemsOfChat = (m: GatewaySwitch.ChatMessage): ReadonlyArray<InputItem> => {
  const text = typeof m.content === "string" ? m.content : ""
  switch (m.role) {
    case "assistant": {
      const calls = (Array.isArray(m.tool_calls) ? m.tool_calls : []).filter(isRecord)
      return [
        ...(text === "" ? [] : [{ type: "message", role: "assistant", content: [{ type: "output_text", text }] }]),
        ...calls.map((c) => {
          const fn = isRecord(c.function) ? c.function : {}
          return { type: "function_call", call_id: String(c.id ?? ""), name: String(fn.name ?? ""), arguments: typeof fn.arguments === "string" ? fn.arguments : "{}" }
        })
      ]
    }
    case "tool":
      return answerItems([{ toolCallId: String(m.tool_call_id ?? ""), output: text, isError: false }])
    default:
      return [{
        type: "message",
        role: m.role === "system" ? "system" : "user",
        // A user message with images or files (`GatewaySwitch.chatMessagesOf`) is an array of parts: each in Responses' form.
        content: Array.isArray(m.content) ? m.content.map(GatewaySwitchMedia.responsesPartOf) : [{ type: "input_text", text }]
      }]
  }
}

/** Tool answers as `function_call_output` items (the Responses adapter's encoding: a failed one's output starts `Error: `). */
export const answerItems = (answers: ReadonlyArray<{ readonly toolCallId: string; readonly output: string; readonly isError: boolean }>): ReadonlyArray<InputItem> =>
  answers.length === 0 ? [] : parseJson(`[${OpenAiResponses.dialect.toolResults(answers, [])}]`) as ReadonlyArray<InputItem>

/** Tokens of one input item as it goes out (Baton's count of its JSON, plus 4 for its framing, as the fit counts). */
export const itemTokens = (count: (text: string) => number, item: unknown) => GatewayMedia.jsonTokens(count, item) + 4

/** A Chat Completions function (the fit's encoding) as a Responses function (the Responses adapter's encoding). */
const toolOfChat = (t: Json): Json => {
  const fn = isRecord(t.function) ? t.function : {}
  return parseJson(OpenAiResponses.encodeTool({ name: String(fn.name ?? ""), description: typeof fn.description === "string" ? fn.description : "", inputSchema: isRecord(fn.parameters) ? fn.parameters : {} })) as Json
}

/** A Chat Completions `tool_choice` (the fit's mapping of Anthropic's) in the Responses API's form. */
const toolChoiceOf = (c: unknown): unknown => isRecord(c) && isRecord(c.function) ? { type: "function", name: String(c.function.name) } : c

/** The least `max_output_tokens` the Responses API accepts. */
export const minOutputTokens = 16

/**
 * The agent's Anthropic request as a Responses request fitted under the window: the Chat switch's fit
 * (`GatewaySwitch.toChat`), each message counted as its Responses items, then the fitted messages as items (see the
 * module docblock). `overflow` as the Chat fit says.
 */
export const toResponses = (input: GatewaySwitch.FitInput): GatewaySwitch.FitResult => {
  const { count } = input
  // The Responses API refuses a `max_output_tokens` below 16 (Claude Code's probes ask for 1): the fit's output room
  // is lifted to it (counted in the fit's limit, so the request stays within the window).
  const asked = input.body.max_tokens
  const fitBody = typeof asked === "number" && asked > 0 && asked < minOutputTokens ? { ...input.body, max_tokens: minOutputTokens } : input.body
  const fitted = GatewaySwitch.toChat({
    ...input,
    body: fitBody,
    sizes: {
      message: (m) => itemsOfChat(m).reduce((n, item) => n + itemTokens(count, item), 0),
      tools: (tools) => GatewayMedia.jsonTokens(count, tools.map(toolOfChat))
    }
  })
  if (fitted._tag === "overflow") return fitted
  const chat = fitted.body
  const messages = (Array.isArray(chat.messages) ? chat.messages : []).filter(isRecord)
  // The fit puts the system prompt first, as a `system` message, exactly when there is one.
  const system = GatewaySwitch.systemText(input.body.system)
  const rest = system === "" ? messages : messages.slice(1)
  const tools = (Array.isArray(chat.tools) ? chat.tools : []).filter(isRecord).map(toolOfChat)
  const body: Json = {
    model: chat.model,
    ...(system === "" ? {} : { instructions: system }),
    input: rest.flatMap(itemsOfChat),
    max_output_tokens: chat.max_tokens,
    ...(tools.length === 0 ? {} : { tools }),
    ...(chat.tool_choice === undefined ? {} : { tool_choice: toolChoiceOf(chat.tool_choice) }),
    ...(chat.parallel_tool_calls === undefined ? {} : { parallel_tool_calls: chat.parallel_tool_calls }),
    ...(typeof chat.temperature === "number" ? { temperature: chat.temperature } : {}),
    ...(typeof chat.top_p === "number" ? { top_p: chat.top_p } : {}),
    store: false,
    ...(chat.stream === true ? { stream: true } : {})
  }
  return { _tag: "fits", body, fit: fitted.fit }
}

/** Anthropic's usage of a Responses `usage` (`input_tokens` include `input_tokens_details.cached_tokens`). */
export const usageOf = (usage: unknown) => {
  const u = isRecord(usage) ? usage : {}
  const input = typeof u.input_tokens === "number" ? u.input_tokens : 0
  const details = isRecord(u.input_tokens_details) ? u.input_tokens_details : {}
  const cached = typeof details.cached_tokens === "number" ? Math.min(input, details.cached_tokens) : 0
  return { input_tokens: input - cached, cache_creation_input_tokens: 0, cache_read_input_tokens: cached, output_tokens: typeof u.output_tokens === "number" ? u.output_tokens : 0 }
}

/** The sum of Anthropic usages (`usageOf` of each hop's). */
const sumUsage = (usages: ReadonlyArray<unknown>) =>
  usages.map(usageOf).reduce((x, y) => ({
    input_tokens: x.input_tokens + y.input_tokens,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: x.cache_read_input_tokens + y.cache_read_input_tokens,
    output_tokens: x.output_tokens + y.output_tokens
  }), usageOf(null))

/** What one Responses request carried, in tokens (`input_tokens`, cached ones included); `null` without a usage. */
export const carriedOf = (usage: unknown): number | null => isRecord(usage) && typeof usage.input_tokens === "number" ? usage.input_tokens : null

/** A message id in Anthropic's form for a Responses id. */
const messageIdOf = (id: unknown) => `msg_${typeof id === "string" && id !== "" ? id.replace(/[^A-Za-z0-9_-]/g, "_") : `baton_${Date.now().toString(36)}`}`

/**
 * A function call of the answer: its id (as `callsOfItem`'s `callId` writes it: made safe for Anthropic, or the
 * upstream's), tool, arguments (JSON text), and whether hidden.
 */
interface Call {
  readonly id: string
  readonly name: string
  readonly arguments: string
  readonly hidden: boolean
}

/**
 * The calls one `function_call` item makes: itself, or the uses of a `multi_tool_use.parallel` wrapper (a call named
 * `parallel` carrying `tool_uses`, when no offered tool has the name) unwrapped as the Responses adapter does (ids
 * `<call_id>_<n>`); `callId` writes an id for the agent (`GatewaySwitch.toolUseId`, Anthropic's form, by default).
 */
const callsOfItem = (item: Json, hidden: ReadonlySet<string>, offered: ReadonlySet<string>, callId: (id: string) => string): ReadonlyArray<Call> => {
  const name = String(item.name ?? "")
  const id = String(item.call_id ?? "")
  const args = typeof item.arguments === "string" ? item.arguments : ""
  if (!offered.has(name) && (name === "parallel" || name === "multi_tool_use.parallel")) {
    const uses = (parseJson(args) as { tool_uses?: unknown } | undefined)?.tool_uses
    if (Array.isArray(uses) && uses.length > 0) {
      return uses.map((use, n) => {
        const u = isRecord(use) ? use : {}
        const tool = String(u.recipient_name ?? "").replace(/^functions\./, "")
        return { id: callId(`${id}_${n}`), name: tool, arguments: JSON.stringify(u.parameters ?? {}), hidden: hidden.has(tool) }
      })
    }
  }
  return [{ id: callId(id), name, arguments: args, hidden: hidden.has(name) }]
}

/** A `message` output item's text (its `output_text` parts) and refusal (its `refusal` parts). */
const messageParts = (item: Json) => {
  const parts = (Array.isArray(item.content) ? item.content : []).filter(isRecord)
  return {
    text: parts.filter((p) => p.type === "output_text").map((p) => String(p.text ?? "")).join(""),
    refusal: parts.filter((p) => p.type === "refusal").map((p) => String(p.refusal ?? "")).join("")
  }
}

/**
 * The Anthropic error of a whole 2xx answer whose `status` is `failed` (its `error`, as a stream's `response.failed`
 * is converted); `null` for any other answer.
 */
export const failureOf = (answer: unknown): { readonly status: number; readonly body: Json } | null => {
  if (!isRecord(answer) || answer.status !== "failed") return null
  const e = isRecord(answer.error) ? answer.error : {}
  return GatewaySwitch.anthropicError(statusOfCode(e.code), JSON.stringify({ error: { ...e, message: typeof e.message === "string" ? e.message : "the upstream's response failed" } }))
}

/** Anthropic's stop reason for a finished response. */
const stopReasonOf = (response: Json, visibleCalls: boolean, refused: boolean): string => {
  const reason = isRecord(response.incomplete_details) ? response.incomplete_details.reason : undefined
  if (response.status === "incomplete" && reason === "max_output_tokens") return "max_tokens"
  if (reason === "content_filter" || refused) return "refusal"
  return visibleCalls ? "tool_use" : "end_turn"
}

/** A `tool_use` block of a call (its arguments parsed; `{}` when not a JSON object). */
const toolUseOf = (c: Call): Json => {
  const input = parseJson(c.arguments === "" ? "{}" : c.arguments)
  return { type: "tool_use", id: c.id, name: c.name, input: isRecord(input) ? input : {} }
}

/**
 * A whole Responses answer as an Anthropic Messages answer (`model`: the agent's): calls of `hidden` tools left out,
 * the usage of `earlier` hops (hidden rounds, Responses `usage` objects) added to its own; `offered` names the agent's
 * tools (a call named `parallel` is a wrapper only when no offered tool has that name); `callId` writes a call's id
 * for the agent (Anthropic's form by default; an OpenAI agent's switch keeps the upstream's).
 */
export const messageOf = (
  answer: unknown,
  model: string,
  hidden: ReadonlySet<string> = new Set(),
  earlier: ReadonlyArray<unknown> = [],
  offered: ReadonlySet<string> = new Set(),
  callId: (id: string) => string = GatewaySwitch.toolUseId
): Json => {
  const a = isRecord(answer) ? answer : {}
  const content: Array<Json> = []
  let refused = false
  for (const item of (Array.isArray(a.output) ? a.output : []).filter(isRecord)) {
    if (item.type === "message") {
      const { refusal, text } = messageParts(item)
      if (text !== "") content.push({ type: "text", text })
      if (refusal !== "") {
        refused = true
        content.push({ type: "text", text: refusal })
      }
    } else if (item.type === "function_call" && item.status !== "incomplete") {
      for (const c of callsOfItem(item, hidden, offered, callId)) if (!c.hidden) content.push(toolUseOf(c))
    }
  }
  return {
    id: messageIdOf(a.id),
    type: "message",
    role: "assistant",
    model,
    content,
    stop_reason: stopReasonOf(a, content.some((b) => b.type === "tool_use"), refused),
    stop_sequence: null,
    usage: sumUsage([...earlier, a.usage])
  }
}

/** The assistant's output items of a hop as input items for its continuation (text and calls; reasoning left out). */
const continuationItems = (text: string, calls: ReadonlyArray<{ readonly callId: string; readonly name: string; readonly arguments: string }>): ReadonlyArray<InputItem> => [
  ...(text === "" ? [] : [{ type: "message", role: "assistant", content: [{ type: "output_text", text }] }]),
  ...calls.map((c) => ({ type: "function_call", call_id: c.callId, name: c.name, arguments: c.arguments }))
]

/**
 * The calls of a whole Responses answer when every one is a call of a `hidden` tool: the hop's items for the
 * continuation's input and the calls to answer; `null` otherwise.
 */
export const hiddenCallsOf = (answer: unknown, hidden: ReadonlySet<string>): { readonly assistant: ReadonlyArray<InputItem>; readonly calls: ReadonlyArray<GatewaySwitch.HiddenCall> } | null => {
  const a = isRecord(answer) ? answer : {}
  const output = (Array.isArray(a.output) ? a.output : []).filter(isRecord)
  const calls = output.filter((i) => i.type === "function_call")
  if (calls.length === 0 || !calls.every((c) => hidden.has(String(c.name)))) return null
  const text = output.filter((i) => i.type === "message").map((i) => messageParts(i).text).join("")
  const raw = calls.map((c) => ({ callId: String(c.call_id ?? ""), name: String(c.name), arguments: typeof c.arguments === "string" ? c.arguments : "{}" }))
  return { assistant: continuationItems(text, raw), calls: raw.map((c) => ({ id: c.callId, arguments: c.arguments })) }
}

/** The HTTP status an OpenAI error code stands for (for its Anthropic error type). */
const statusOfCode = (code: unknown): number =>
  code === "rate_limit_exceeded" ? 429 : code === "server_is_overloaded" ? 503 : code === "context_length_exceeded" || code === "invalid_prompt" ? 400 : 500

/** An error object of the stream (`response.failed`'s `error`, an `error` event) as an Anthropic error body. */
const errorOf = (error: unknown) => {
  const e = isRecord(error) ? error : {}
  return GatewaySwitch.anthropicError(statusOfCode(e.code), JSON.stringify({ error: { ...e, message: typeof e.message === "string" ? e.message : "the upstream's response failed" } })).body
}

/** One Anthropic SSE event as Anthropic sends it. */
const event = (data: Json) => `event: ${String(data.type)}\ndata: ${JSON.stringify(data)}\n\n`

/** Translates a Responses stream into Anthropic Messages SSE; `GatewaySwitch.StreamTranslator`'s contract. */
export interface StreamTranslator extends Omit<GatewaySwitch.StreamTranslator, "assistant"> {
  /** The open hop's output as input items (its text and every call), for the continuation. */
  readonly assistant: () => ReadonlyArray<InputItem>
}

/**
 * A translator for one streamed Responses answer (see the module docblock): blocks in output order, a text block per
 * message item (deltas as they come), a complete `tool_use` block per visible call at its `output_item.done`; the
 * message ends at `response.completed` or `response.incomplete`; `response.failed`, an `error` event, or a hop whose
 * stream ends before its terminal event is an Anthropic `error` event. `offered`: the agent's tool names (for the
 * parallel wrapper); `callId` writes a call's id for the agent (as `messageOf`).
 */
export const streamTranslator = (
  model: string,
  hiddenTools: ReadonlySet<string> = new Set(),
  offered: ReadonlySet<string> = new Set(),
  callId: (id: string) => string = GatewaySwitch.toolUseId
): StreamTranslator => {
  let decoder = Sse.makeDecoder()
  let started = false
  let open: number | null = null
  let blocks = 0
  /** Whether this hop's stream gave an item or a delta (else its final response's `output` is read whole). */
  let itemsSeen = false
  let usage: unknown = null
  const earlier: Array<unknown> = []
  let done = false
  let text = ""
  let refused = false
  /** Output indexes whose text came as deltas (their `output_item.done` adds nothing). */
  let streamed = new Set<number>()
  let openFor: number | null = null
  let calls: Array<Call & { readonly callId: string; readonly rawName: string; readonly rawArguments: string }> = []
  let pending: ReadonlyArray<GatewaySwitch.HiddenCall> | null = null
  /** This hop's response id (its first `response.created`'s; `undefined` before it) and whether any of its text or calls reached the agent. */
  let responseId: string | null | undefined = undefined
  let shown = false
  const out: Array<string> = []
  const start = (id: unknown) => {
    if (started) return
    started = true
    out.push(event({
      type: "message_start",
      message: { id: messageIdOf(id), type: "message", role: "assistant", model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 0, output_tokens: 0 } }
    }))
  }
  const close = () => {
    if (open === null) return
    out.push(event({ type: "content_block_stop", index: open }))
    open = null
    openFor = null
  }
  const textDelta = (outputIndex: number, piece: string) => {
    if (piece === "") return
    text += piece
    if (open === null || openFor !== outputIndex) {
      close()
      open = blocks++
      openFor = outputIndex
      out.push(event({ type: "content_block_start", index: open, content_block: { type: "text", text: "" } }))
    }
    out.push(event({ type: "content_block_delta", index: open, delta: { type: "text_delta", text: piece } }))
    shown = true
  }
  const onItem = (outputIndex: number, item: Json) => {
    if (item.type === "message") {
      const parts = messageParts(item)
      if (!streamed.has(outputIndex)) {
        textDelta(outputIndex, parts.text)
        textDelta(outputIndex, parts.refusal)
      }
      if (parts.refusal !== "") refused = true
      if (openFor === outputIndex) close()
    } else if (item.type === "function_call" && item.status !== "incomplete") {
      for (const c of callsOfItem(item, hiddenTools, offered, callId)) {
        if (calls.some((k) => k.id === c.id)) continue
        calls.push({ ...c, callId: String(item.call_id ?? ""), rawName: String(item.name ?? ""), rawArguments: typeof item.arguments === "string" ? item.arguments : "{}" })
        if (c.hidden) continue
        close()
        const index = blocks++
        out.push(event({ type: "content_block_start", index, content_block: { type: "tool_use", id: c.id, name: c.name, input: {} } }))
        if (c.arguments !== "") out.push(event({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: c.arguments } }))
        out.push(event({ type: "content_block_stop", index }))
        shown = true
      }
    }
  }
  const total = () => sumUsage([...earlier, usage])
  const finish = (r: Json) => {
    done = true
    usage = r.usage ?? null
    // A response whose items came only in its final `output` (no `output_item.done` events): its items now. After
    // streamed items, its calls still (one given only there reaches the agent; a call already sent is not sent again).
    const listed = (Array.isArray(r.output) ? r.output : []).filter(isRecord)
    listed.forEach((item, i) => {
      if (!itemsSeen || item.type === "function_call") onItem(i, item)
    })
    close()
    const visible = calls.filter((c) => !c.hidden)
    if (visible.length === 0 && calls.length > 0) {
      // Only hidden calls: the message stays open for the continuation.
      pending = calls.map((c) => ({ id: c.callId, arguments: c.rawArguments }))
      return
    }
    out.push(event({ type: "message_delta", delta: { stop_reason: stopReasonOf(r, visible.length > 0, refused), stop_sequence: null }, usage: total() }))
    out.push(event({ type: "message_stop" }))
  }
  const fail = (body: Json) => {
    done = true
    out.push(event(body))
  }
  const onData = (data: string) => {
    if (done) return
    const e = parseJson(data)
    if (!isRecord(e)) return
    const outputIndex = typeof e.output_index === "number" ? e.output_index : -1
    switch (e.type) {
      case "response.created":
      case "response.in_progress": {
        const id = isRecord(e.response) && typeof e.response.id === "string" ? e.response.id : null
        if (responseId !== undefined && id !== responseId) {
          // Another response mid-stream: the upstream restarted its answer (a stream spliced after a retry upstream;
          // `GatewayResponses.replyAssembler` keeps the second response alone). As the translator from an Anthropic
          // upstream does on a second message_start: what the first attempt left is dropped when none of it reached
          // the agent (a hidden thread_read call it made is no call to answer); else the agent holds part of an
          // answer that is no more, and the answer ends with an error (the agent retries). Found in review: both
          // attempts went out as one message, and a first attempt's hidden call was answered and continued upstream.
          if (shown) {
            fail(GatewaySwitch.errorBody("api_error", "the upstream restarted its answer (another response.created) after part of it was sent"))
            return
          }
          itemsSeen = false
          text = ""
          refused = false
          streamed = new Set()
          calls = []
          usage = null
        }
        responseId = id
        start(id)
        return
      }
      case "response.output_text.delta":
      case "response.refusal.delta":
        start(null)
        itemsSeen = true
        streamed.add(outputIndex)
        if (e.type === "response.refusal.delta") refused = true
        textDelta(outputIndex, typeof e.delta === "string" ? e.delta : "")
        return
      case "response.output_item.done":
        start(null)
        itemsSeen = true
        if (isRecord(e.item)) onItem(outputIndex, e.item)
        return
      case "response.completed":
      case "response.incomplete": {
        const r = isRecord(e.response) ? e.response : {}
        start(r.id)
        finish(r)
        return
      }
      case "response.failed":
        fail(errorOf(isRecord(e.response) ? e.response.error : null))
        return
      case "error":
        fail(errorOf(e))
        return
    }
  }
  const drain = () => out.splice(0, out.length).join("")
  return {
    push: (chunk) => {
      for (const m of decoder.push(chunk)) onData(m.data)
      return drain()
    },
    end: () => {
      if (!done) fail(GatewaySwitch.errorBody("api_error", "the upstream's stream ended before its answer did"))
      return drain()
    },
    hidden: () => pending,
    assistant: () => {
      const seen = new Set<string>()
      const raw = calls.filter((c) => !seen.has(c.callId) && seen.add(c.callId) !== undefined).map((c) => ({ callId: c.callId, name: c.rawName, arguments: c.rawArguments }))
      return continuationItems(text, raw)
    },
    next: () => {
      earlier.push(usage)
      usage = null
      responseId = undefined
      shown = false
      itemsSeen = false
      done = false
      text = ""
      refused = false
      streamed = new Set()
      calls = []
      pending = null
      decoder = Sse.makeDecoder()
    },
    stop: () => {
      pending = null
      out.push(event({ type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: total() }))
      out.push(event({ type: "message_stop" }))
      return drain()
    },
    hops: () => ({ count: earlier.length + 1, carried: carriedOf(usage) })
  }
}
