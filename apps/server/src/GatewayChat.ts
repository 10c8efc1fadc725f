/**
 * GatewayChat: the gateway's OpenAI Chat Completions dialect (issue 14, docs/gateway.md), for agents that speak the
 * OpenAI-compatible API (pi, opencode, aider) with their base URL set to Baton's (`http://127.0.0.1:8787/v1`):
 *
 * - `POST /v1/chat/completions` (streamed or not), forwarded to the routed `openai-chat` instance at
 *   `{baseUrl}/chat/completions` with the instance's key as `Authorization: Bearer`; the agent authenticates with a
 *   Baton token in the same header (its `OPENAI_API_KEY`).
 * - The history is the body's `messages` after the leading `system` / `developer` messages (the system prompt). The
 *   conversation is the agent's `x-session-id` header when it sends one, else the fingerprint of the conversation's
 *   start (Chat Completions has no session of its own).
 * - A stream's reply is one assistant message assembled from the chunks' `delta`s (content, and each tool call's id,
 *   name and argument fragments by `index`), whole at the `finish_reason` and ended by `[DONE]`; usage from the chunk
 *   that carries it (`stream_options.include_usage`): `prompt_tokens` includes `prompt_tokens_details.cached_tokens`
 *   (billed as cache reads). A chunk with an `error` fails the run.
 * - Baton's own refusals are in OpenAI's error shape (`GatewayResponses.errorResponse`).
 *
 * It owns only what differs from the other dialects; forwarding and the record are `Gateway`'s.
 */
import type { ProviderAdapter } from "@baton/providers"
import { GatewayChatWire, type GatewayThreads } from "@baton/orchestration"
import { OpenAiChat, ProviderFailure, Sse } from "@baton/providers"
import { type Assembler, type Dialect, isRecord, parseJson, type StreamOutcome } from "./GatewayDialect.js"
import { bearerUpstream, errorResponse } from "./GatewayResponses.js"

/**
 * The billed tokens of a Chat Completions `usage` object (absent fields: 0): `prompt_tokens` include
 * `prompt_tokens_details.cached_tokens` (cache reads) and `prompt_tokens_details.cache_write_tokens` (cache writes, where
 * an upstream reports them: OpenRouter, Baton's switch to an Anthropic upstream).
 */
export const tokensOf = (usage: Record<string, unknown>): ProviderAdapter.TurnTokens => {
  const n = (u: unknown) => (typeof u === "number" ? u : 0)
  const cached = isRecord(usage.prompt_tokens_details) ? n(usage.prompt_tokens_details.cached_tokens) : 0
  const written = isRecord(usage.prompt_tokens_details) ? n(usage.prompt_tokens_details.cache_write_tokens) : 0
  return { inputTokens: n(usage.prompt_tokens) - cached - written, cacheWriteTokens: written, cacheReadTokens: cached, outputTokens: n(usage.completion_tokens) }
}


/**
 * A streamed tool call's `extra_content` so far with a delta's merged in (records merged key by key, other values
 * replaced; `undefined` while none came). Google's OpenAI-compatible endpoint sends a call's
 * `extra_content.google.thought_signature` in a delta (possibly one of its own), and Gemini 3 expects it back on the
 * assistant's call in the next request: the assembled call keeps it, so a continuation after `thread_read` carries it.
 */
export const mergeExtra = (so: Record<string, unknown> | undefined, delta: unknown): Record<string, unknown> | undefined => {
  if (!isRecord(delta)) return so
  const out: Record<string, unknown> = { ...so }
  for (const [k, v] of Object.entries(delta)) out[k] = isRecord(v) && isRecord(out[k]) ? mergeExtra(out[k], v) : v
  return out
}

/** Whether `m` is a system prompt message. */
const isSystem = (m: unknown) => isRecord(m) && (m.role === "system" || m.role === "developer")

/**
 * Assembles the reply of a Chat Completions SSE stream from its bytes as they pass: choice 0's content and tool calls
 * (by `index`), whole once a `finish_reason` came (then `[DONE]` or the end), with the usage of the chunk that has it.
 */
export const replyAssembler = (): Assembler => {
  const decoder = Sse.makeDecoder()
  let content = ""
  let refusal: string | null = null
  const calls: Array<{ id: string; name: string; arguments: string; extra?: Record<string, unknown> | undefined }> = []
  const slotOf = OpenAiChat.callSlots()
  let finished = false
  let usage: Record<string, unknown> | null = null
  let failure: StreamOutcome | null = null
  const onEvent = (data: unknown) => {
    if (!isRecord(data)) return
    if (isRecord(data.error)) {
      failure = {
        _tag: "failed",
        // An overflow by OpenAI's code or in any provider's words (an OpenAI-compatible server's, vLLM's "maximum
        // context length is …" with `code` 400), as the same body answered as a 4xx is read (Gateway's failureCode).
        code: data.error.code === "context_length_exceeded" || ProviderFailure.overflowOf(String(data.error.message ?? "")) !== null
          ? "overflow"
          : "provider_unavailable",
        reason: `the upstream's stream reported an error: ${String(data.error.code ?? "")} ${String(data.error.message ?? "")}`.trim()
      }
      return
    }
    if (isRecord(data.usage)) usage = data.usage
    const choice = Array.isArray(data.choices) ? data.choices.find((c) => isRecord(c) && (c.index ?? 0) === 0) : undefined
    if (!isRecord(choice)) return
    const delta = isRecord(choice.delta) ? choice.delta : {}
    if (typeof delta.content === "string") content += delta.content
    if (typeof delta.refusal === "string") refusal = (refusal ?? "") + delta.refusal
    for (const c of Array.isArray(delta.tool_calls) ? delta.tool_calls : []) {
      if (!isRecord(c)) continue
      const at = slotOf(c)
      const call = calls[at] ?? (calls[at] = { id: "", name: "", arguments: "" })
      if (typeof c.id === "string") call.id = c.id
      const fn = isRecord(c.function) ? c.function : {}
      if (typeof fn.name === "string") call.name += fn.name
      if (typeof fn.arguments === "string") call.arguments += fn.arguments
      if (c.extra_content !== undefined) call.extra = mergeExtra(call.extra, c.extra_content)
    }
    if (typeof choice.finish_reason === "string") finished = true
  }
  return {
    push: (chunk) => {
      for (const m of decoder.push(chunk)) if (m.data !== "[DONE]") onEvent(parseJson(m.data))
    },
    outcome: () => {
      if (failure !== null) return failure
      if (!finished) return { _tag: "unfinished", reason: "the upstream's stream ended before a finish_reason" }
      const message: Record<string, unknown> = { role: "assistant", content: content === "" ? null : content }
      if (refusal !== null) message.refusal = refusal
      const made = calls.filter((c) => c !== undefined)
      if (made.length > 0) message.tool_calls = made.map((c) => ({
          id: c.id,
          type: "function",
          function: { name: c.name, arguments: c.arguments },
          ...(c.extra === undefined ? {} : { extra_content: c.extra })
        }))
      return { _tag: "completed", reply: { messages: [{ id: null, message }], tokens: usage === null ? null : tokensOf(usage) } }
    }
  }
}

/** The reply of a non-streamed Chat Completions body: choice 0's message and the usage. */
export const replyOfBody = (body: unknown): GatewayThreads.Reply => {
  const choice = isRecord(body) && Array.isArray(body.choices) ? body.choices.find((c) => isRecord(c) && (c.index ?? 0) === 0) : undefined
  const message = isRecord(choice) && isRecord(choice.message) ? choice.message : null
  return {
    messages: message === null ? [] : [{ id: null, message }],
    tokens: isRecord(body) && isRecord(body.usage) ? tokensOf(body.usage) : null
  }
}

/** The roles of Chat Completions messages. */
const roles: ReadonlySet<string> = new Set(["system", "developer", "user", "assistant", "tool", "function"])

/** The OpenAI Chat Completions dialect (see the module docblock). */
export const dialect: Dialect = {
  kind: "openai-chat",
  wire: GatewayChatWire.openAiChat,
  refuse: errorResponse,
  tokenHint: "Authorization: Bearer (the agent's OpenAI API key setting)",
  upstreamHeaders: bearerUpstream,
  // A message without a known role, or with content parts that are not objects, is refused here as OpenAI refuses it
  // (400 `invalid_request_error`): before branch b47gw it was recorded (and, switched, converted and sent) first.
  history: (body, headers) => {
    if (!Array.isArray(body.messages) || !body.messages.every(isRecord)) return "messages: expected an array of messages"
    // OpenAI refuses it ("[] is too short - 'messages'"): before branch b48gw it was recorded and sent (switched too).
    if (body.messages.length === 0) return "messages: expected at least one message"
    const at = body.messages.findIndex((m) => !(typeof m.role === "string" && roles.has(m.role)))
    if (at >= 0) return `messages[${at}].role: expected one of ${[...roles].join(", ")}`
    const partAt = body.messages.findIndex((m) => m.content !== undefined && m.content !== null && typeof m.content !== "string" && !(Array.isArray(m.content) && m.content.every(isRecord)))
    if (partAt >= 0) return `messages[${partAt}].content: expected a string or an array of content parts`
    let k = 0
    while (k < body.messages.length && isSystem(body.messages[k])) k++
    const session = headers["x-session-id"] ?? null
    return { system: body.messages.slice(0, k), messages: body.messages.slice(k), session: session === "" ? null : session }
  },
  assembler: replyAssembler,
  replyOfBody
}
