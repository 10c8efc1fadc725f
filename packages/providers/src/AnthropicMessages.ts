/**
 * AnthropicMessages: the Anthropic Messages API (`POST {baseUrl}/v1/messages`, streamed) as a `ProviderAdapter`.
 *
 * Wire: text, thinking (with its signature, sent back unchanged), redacted thinking, `tool_use`/`tool_result`, and
 * server-side compaction blocks (kept in the assistant message so the next request carries the summary). Usage: the
 * prompt is `input_tokens + cache_creation_input_tokens + cache_read_input_tokens` (a cached prefix is not in
 * `input_tokens`); `message_delta` may restate any of them and its figures win. With compaction iterations the bill
 * is the sum over `usage.iterations` while the context is the last iteration's.
 *
 * Prompt cache: a breakpoint (`cache_control: ephemeral`) on the system prompt (or the last tool without one), on the
 * last message of the previous request and on the last message of this one. Entries are stored without breakpoints,
 * so request n+1 with its breakpoints removed extends request n with its breakpoints removed byte for byte, and the
 * prefix request n wrote to the cache is hit whatever the number of blocks in between (the API looks back only 20
 * blocks from a breakpoint). Source: Anthropic, "Prompt caching" (docs.anthropic.com).
 *
 * Overflow: HTTP 400 `prompt is too long: N tokens > M maximum` and the `model_context_window_exceeded` stop reason.
 * `countTokens` calls `POST /v1/messages/count_tokens` to calibrate a new instance before its first turn.
 */
import type { ProviderError } from "@baton/contracts"
import { HttpClientRequest } from "@effect/platform"
import { Effect, Option, Redacted, Schema } from "effect"
import {
  bodyText,
  callItem,
  type Dialect,
  duplicateCall,
  entryParts,
  field,
  isWireFailure,
  num,
  overflowNumbers,
  parseJson,
  type RequestOutcome,
  type StreamParser,
  str,
  textItem,
  type ToolCall,
  type WireFailure,
  wireFailure
} from "./internal/Dialect.js"
import type { SseMessage } from "./internal/Sse.js"
import * as ModelApiAdapter from "./ModelApiAdapter.js"
import type { ProducedItem, ProviderAdapterShape, TextDelta, ToolDefinition } from "./ProviderAdapter.js"

/** The API version header Baton speaks. */
export const apiVersion = "2023-06-01"

const breakpoint = `,"cache_control":{"type":"ephemeral"}`

/** Adds a cache breakpoint to the last block of an encoded message (`{"role":…,"content":[…,{…}]}`). */
const withBreakpoint = (message: string) => message.slice(0, -3) + breakpoint + message.slice(-3)

const message = (role: "user" | "assistant", content: ReadonlyArray<unknown>) => JSON.stringify({ role, content })

const encodeTool = (t: ToolDefinition) => JSON.stringify({ name: t.name, description: t.description, input_schema: t.inputSchema })

/** Usage fields as the API reports them (any may be absent from a `message_delta`). */
const Usage = Schema.Struct({
  input_tokens: Schema.optional(Schema.NullOr(Schema.Number)),
  cache_creation_input_tokens: Schema.optional(Schema.NullOr(Schema.Number)),
  cache_read_input_tokens: Schema.optional(Schema.NullOr(Schema.Number)),
  output_tokens: Schema.optional(Schema.NullOr(Schema.Number)),
  iterations: Schema.optional(Schema.Array(Schema.Struct({
    input_tokens: Schema.optional(Schema.Number),
    cache_creation_input_tokens: Schema.optional(Schema.Number),
    cache_read_input_tokens: Schema.optional(Schema.Number),
    output_tokens: Schema.optional(Schema.Number)
  })))
})
type Usage = typeof Usage.Type
const decodeUsage = Schema.decodeUnknownOption(Usage)

/** A block being assembled from `content_block_start` and its deltas. */
interface Block {
  readonly type: string
  text: string
  signature: string
  json: string
  readonly start: Record<string, unknown>
}

const parser = (_offered: ReadonlySet<string>, onDelta: ((delta: TextDelta) => void) | null): StreamParser => {
  let messageId: string | null = null
  let blocks: Array<Block | undefined> = []
  let done: Array<Record<string, unknown>> = []
  let calls: Array<ToolCall> = []
  // The items of the message so far, held until it is final (`message_delta`/`message_stop`): a message_start of
  // another message restarts the answer and discards them, so they must not have reached the record (see `drain`).
  let held: Array<ProducedItem> = []
  // Calls whose input never became a JSON object: an answer cut by its output limit (stop reason `max_tokens`) ends
  // inside a tool_use, which is no protocol fault; any other stop with such a call is one (decided at message_delta).
  let cut: Array<{ readonly id: string; readonly name: string; readonly args: string }> = []
  const release = (extra: ReadonlyArray<ProducedItem> = []): ReadonlyArray<ProducedItem> => {
    const out = [...held, ...extra]
    held = []
    return out
  }
  const hold = (items: ReadonlyArray<ProducedItem> | WireFailure): ReadonlyArray<ProducedItem> | WireFailure => {
    if (isWireFailure(items)) return items
    held.push(...items)
    return []
  }
  const usage = { input: 0, cacheWrite: 0, cacheRead: 0, output: 0 }
  let iterations: Usage["iterations"] = undefined
  let stopReason: string | null = null
  let complete = false
  let reported = false

  const applyUsage = (u: unknown) => {
    const decoded = decodeUsage(u)
    if (Option.isNone(decoded)) return
    const v = decoded.value
    reported = true
    if (typeof v.input_tokens === "number") usage.input = v.input_tokens
    if (typeof v.cache_creation_input_tokens === "number") usage.cacheWrite = v.cache_creation_input_tokens
    if (typeof v.cache_read_input_tokens === "number") usage.cacheRead = v.cache_read_input_tokens
    if (typeof v.output_tokens === "number") usage.output = v.output_tokens
    if (v.iterations !== undefined) iterations = v.iterations
  }

  /** Finishes block `index`: its wire form joins the assistant message, its item is returned. */
  const finish = (index: number): ReadonlyArray<ProducedItem> | WireFailure => {
    const b = blocks[index]
    if (b === undefined) return wireFailure("protocol", `content_block_stop for block ${index}, which never started`)
    blocks[index] = undefined
    switch (b.type) {
      case "text":
        if (b.text === "") return []
        done.push({ type: "text", text: b.text })
        return [textItem("assistant_message", b.text, messageId)]
      case "thinking":
        done.push({ type: "thinking", thinking: b.text, signature: b.signature })
        return b.text === "" ? [] : [textItem("reasoning", b.text, messageId)]
      case "redacted_thinking":
        done.push(b.start)
        return []
      case "compaction":
        done.push({ type: "compaction", content: b.text })
        return [textItem("summary", b.text, messageId)]
      case "tool_use": {
        const args = b.json === "" ? JSON.stringify(field(b.start, "input") ?? {}) : b.json
        const input = parseJson(args)
        if (typeof input !== "object" || input === null || Array.isArray(input)) {
          // Left out of the stored message (its input is no object the API would take back); judged at message_delta.
          cut.push({ id: String(field(b.start, "id")), name: str(field(b.start, "name")) ?? "?", args })
          return []
        }
        const call: ToolCall = { id: str(field(b.start, "id")) ?? "", name: str(field(b.start, "name")) ?? "", arguments: args, wire: "tool_use" }
        if (calls.some((c) => c.id === call.id)) return duplicateCall("Anthropic Messages", call.id)
        done.push({ type: "tool_use", id: call.id, name: call.name, input })
        calls.push(call)
        return [callItem(call, messageId)]
      }
      default:
        // Server tool blocks and others Baton does not interpret: kept for the next request, no item.
        done.push(b.start)
        return []
    }
  }

  const onEvent = (m: SseMessage): ReadonlyArray<ProducedItem> | WireFailure => {
    if (m.event === "ping") return []
    const data = parseJson(m.data)
    if (data === undefined) return wireFailure("protocol", `unreadable Anthropic event ${m.event}: ${m.data.slice(0, 200)}`)
    const type = str(field(data, "type")) ?? m.event
    switch (type) {
      case "message_start": {
        const msg = field(data, "message")
        const id = str(field(msg, "id")) ?? null
        // A repeated message_start of the same message is ignored; one of another message restarts the answer
        // (seen in the field: a stream spliced after a retry upstream): what the first one left open is dropped.
        if (messageId !== null && id === messageId) return []
        if (messageId !== null) {
          blocks = []
          done = []
          calls = []
          held = []
          cut = []
        }
        messageId = id
        applyUsage(field(msg, "usage"))
        return []
      }
      case "content_block_start": {
        const index = num(field(data, "index"))
        const start = field(data, "content_block")
        if (index === undefined || typeof start !== "object" || start === null) return wireFailure("protocol", "content_block_start without index or block")
        const s = start as Record<string, unknown>
        blocks[index] = {
          type: str(s.type) ?? "unknown",
          text: str(s.text) ?? str(s.thinking) ?? str(s.content) ?? "",
          signature: str(s.signature) ?? "",
          json: "",
          start: s
        }
        return []
      }
      case "content_block_delta": {
        const index = num(field(data, "index"))
        const b = index === undefined ? undefined : blocks[index]
        if (b === undefined) return wireFailure("protocol", `content_block_delta for block ${String(index)}, which never started`)
        const delta = field(data, "delta")
        switch (str(field(delta, "type"))) {
          case "text_delta": {
            const piece = str(field(delta, "text")) ?? ""
            b.text += piece
            if (onDelta !== null && piece !== "") onDelta({ kind: "text", text: piece })
            break
          }
          case "thinking_delta": {
            const piece = str(field(delta, "thinking")) ?? ""
            b.text += piece
            if (onDelta !== null && piece !== "") onDelta({ kind: "reasoning", text: piece })
            break
          }
          case "signature_delta":
            b.signature += str(field(delta, "signature")) ?? ""
            break
          case "input_json_delta":
            b.json += str(field(delta, "partial_json")) ?? ""
            break
          case "compaction_delta":
            b.text += str(field(delta, "content")) ?? ""
            break
        }
        return []
      }
      case "content_block_stop": {
        const index = num(field(data, "index"))
        return index === undefined ? wireFailure("protocol", "content_block_stop without index") : hold(finish(index))
      }
      case "message_delta": {
        stopReason = str(field(field(data, "delta"), "stop_reason")) ?? stopReason
        applyUsage(field(data, "usage"))
        if (cut.length > 0) {
          const first = cut[0]!
          if (stopReason !== "max_tokens") {
            return wireFailure("protocol", `tool_use ${first.id} has input that is not a JSON object: ${first.args.slice(0, 200)}`)
          }
          // Found by a review: a large file write cut by max_tokens failed the run as a protocol fault. The text so far
          // stands; the cut call is not run, and the record says why (the model sees its text and can try again).
          const notes = cut.map((c) => textItem("error", `The answer reached its output limit (max_tokens) inside a call to ${c.name} (${c.id}): the call was cut off and not run`, messageId, true))
          cut = []
          return release(notes)
        }
        if (stopReason === "refusal") {
          const explanation = str(field(field(field(data, "delta"), "stop_details"), "explanation"))
          return release([textItem("error", `The model declined to answer (stop reason refusal)${explanation === undefined ? "" : `: ${explanation}`}`, messageId, true)])
        }
        return release()
      }
      case "message_stop":
        complete = true
        return release()
      case "error":
        return streamError(field(data, "error"))
      default:
        return []
    }
  }

  const outcome = (): RequestOutcome => {
    const billed = iterations === undefined
      ? { inputTokens: usage.input, cacheWriteTokens: usage.cacheWrite, cacheReadTokens: usage.cacheRead, outputTokens: usage.output }
      : iterations.reduce((t, it) => ({
        inputTokens: t.inputTokens + (it.input_tokens ?? 0),
        cacheWriteTokens: t.cacheWriteTokens + (it.cache_creation_input_tokens ?? 0),
        cacheReadTokens: t.cacheReadTokens + (it.cache_read_input_tokens ?? 0),
        outputTokens: t.outputTokens + (it.output_tokens ?? 0)
      }), { inputTokens: 0, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 0 })
    return {
      output: done.length === 0 ? null : message("assistant", done),
      calls,
      contextTokens: reported ? usage.input + usage.cacheWrite + usage.cacheRead + usage.output : null,
      tokens: reported ? billed : null,
      overflow: stopReason === "model_context_window_exceeded"
    }
  }

  return {
    onEvent,
    complete: () => complete,
    outcome,
    partial: () => (done.length === 0 ? null : message("assistant", done)),
    drain: () => release()
  }
}

/** An `error` event's or an error body's failure: overloaded and rate limits are retryable, a long prompt overflows. */
const streamError = (error: unknown): WireFailure => {
  const type = str(field(error, "type")) ?? "error"
  const text = str(field(error, "message")) ?? "no message"
  const numbers = overflowNumbers(text)
  if (numbers !== null) return wireFailure("overflow", `Anthropic: ${text}`, false, numbers)
  const retryable = type === "overloaded_error" || type === "rate_limit_error" || type === "api_error"
  return wireFailure(type === "invalid_request_error" ? "refused" : "unavailable", `Anthropic ${type}: ${text}`, retryable)
}

const httpFailure = (status: number, body: string): WireFailure => {
  const error = field(parseJson(body), "error")
  if (error === undefined) return wireFailure(status >= 500 ? "unavailable" : "refused", `Anthropic answered HTTP ${status}: ${body.slice(0, 300)}`)
  const f = streamError(error)
  return { ...f, reason: `HTTP ${status}: ${f.reason}`, code: f.code === "unavailable" && status < 500 && status !== 429 ? "refused" : f.code }
}

/** A non-streamed Messages response as the events of its stream. */
const synthesize = (body: unknown): ReadonlyArray<SseMessage> => {
  const content = field(body, "content")
  const blocks = Array.isArray(content) ? content : []
  const events: Array<unknown> = [{ type: "message_start", message: { ...(body as object), content: [] } }]
  blocks.forEach((block, index) => {
    const b = block as Record<string, unknown>
    events.push({ type: "content_block_start", index, content_block: b.type === "tool_use" ? b : b })
    events.push({ type: "content_block_stop", index })
  })
  events.push({ type: "message_delta", delta: { stop_reason: field(body, "stop_reason") ?? null, stop_details: field(body, "stop_details") }, usage: field(body, "usage") })
  events.push({ type: "message_stop" })
  return events.map((e) => ({ event: str(field(e, "type")) ?? "message", data: JSON.stringify(e) }))
}

/** The Anthropic Messages dialect (see the module docblock). */
export const dialect: Dialect = {
  api: "Anthropic Messages",
  path: "/v1/messages",
  authHeaders: (key) => ({ "anthropic-version": apiVersion, ...(key === null ? {} : { "x-api-key": key }) }),
  userTurn: (prompt, inlineHistory) =>
    message("user", [
      ...(inlineHistory === null ? [] : [{ type: "text", text: inlineHistory }]),
      { type: "text", text: prompt }
    ]),
  history: (rendered) => message("user", [{ type: "text", text: rendered }]),
  toolResults: (results) =>
    message("user", results.map((r) => ({
      type: "tool_result",
      tool_use_id: r.toolCallId,
      content: r.output,
      ...(r.isError ? { is_error: true } : {})
    }))),
  callsOf: (output) => {
    const content = field(parseJson(output), "content")
    return Array.isArray(content)
      ? content.filter((b) => field(b, "type") === "tool_use").map((b) => ({
        id: str(field(b, "id")) ?? "",
        name: str(field(b, "name")) ?? "",
        arguments: JSON.stringify(field(b, "input") ?? {}),
        wire: "tool_use"
      }))
      : []
  },
  answeredBy: (results) => {
    const content = field(parseJson(results), "content")
    return Array.isArray(content) ? content.map((b) => str(field(b, "tool_use_id")) ?? "") : []
  },
  render: (input) => {
    const marks = new Set(input.breakpoints)
    const tools = input.tools.map(encodeTool)
    const system = input.system === undefined ? null : `[{"type":"text","text":${JSON.stringify(input.system)}${breakpoint}}]`
    if (system === null && tools.length > 0) tools[tools.length - 1] = tools[tools.length - 1]!.slice(0, -1) + breakpoint + "}"
    return [
      `{"model":${JSON.stringify(input.model)},"max_tokens":${input.maxOutputTokens},"stream":true` +
      (system === null ? "" : `,"system":${system}`) +
      (tools.length === 0 ? "" : `,"tools":[${tools.join(",")}]`) +
      `,"messages":[`,
      ...entryParts(input.entries.length, (i) => (marks.has(i) ? withBreakpoint(input.entries[i]!) : null)),
      "]}"
    ]
  },
  parser,
  synthesize,
  httpFailure
}

/**
 * Builds the Anthropic adapter (see `ModelApiAdapter.make` for what it needs), with the `countTokens` capability
 * (`POST /v1/messages/count_tokens`, see `countTokens` below).
 */
export const make = (options: ModelApiAdapter.ModelApiOptions): ProviderAdapterShape => ({
  ...ModelApiAdapter.make(dialect, options),
  countTokens: (text) => countTokens(options, { prompt: text })
})

/**
 * Counts the tokens of a request (`POST {baseUrl}/v1/messages/count_tokens`) without running the model: `messages`
 * as Baton would send them, the lane's system prompt and `tools`. Used to calibrate a new instance's token estimate
 * before its first turn. Fails with `ProviderError` (`unavailable`, `refused`, `overflow`, `protocol`).
 */
export const countTokens = (
  options: Pick<ModelApiAdapter.ModelApiOptions, "instance" | "config" | "apiKey" | "http">,
  request: { readonly prompt: string; readonly tools?: ReadonlyArray<ToolDefinition> }
): Effect.Effect<number, ProviderError> => {
  const entries = [dialect.userTurn(request.prompt, null)]
  const body = bodyText(dialect.render({
    model: options.config.model,
    maxOutputTokens: options.config.maxOutputTokens,
    system: options.config.systemPrompt,
    tools: request.tools ?? [],
    entries,
    breakpoints: [],
    cacheKey: ""
  }), entries).replace(`,"max_tokens":${options.config.maxOutputTokens},"stream":true`, "")
  const url = options.config.baseUrl.replace(/\/+$/, "") + "/v1/messages/count_tokens"
  const key = Option.match(options.apiKey, { onNone: () => null, onSome: Redacted.value })
  const fail = (f: WireFailure, httpStatus?: number) =>
    ModelApiAdapter.failure(options.instance, "countTokens", { ...f, reason: ModelApiAdapter.redactKey(f.reason, options.apiKey) }, httpStatus)
  return options.http.execute(HttpClientRequest.post(url).pipe(
    HttpClientRequest.setHeaders({ "content-type": "application/json", ...dialect.authHeaders(key) }),
    HttpClientRequest.bodyText(body, "application/json")
  )).pipe(
    Effect.mapError((e) => fail(wireFailure("unavailable", `Anthropic could not be reached: ${e.message}`, true))),
    Effect.flatMap((response) =>
      Effect.flatMap(Effect.mapError(response.text, (e) => fail(wireFailure("unavailable", e.message, true))), (text) => {
        if (response.status < 200 || response.status >= 300) return Effect.fail(fail(httpFailure(response.status, text), response.status))
        const tokens = num(field(parseJson(text), "input_tokens"))
        return tokens === undefined
          ? Effect.fail(fail(wireFailure("protocol", `count_tokens answered without input_tokens: ${text.slice(0, 200)}`)))
          : Effect.succeed(tokens)
      })
    )
  )
}
