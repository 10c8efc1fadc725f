/**
 * GatewayAnthropic: the gateway's Anthropic Messages dialect (issue 14, docs/gateway.md), for Claude Code pointed at
 * Baton with `ANTHROPIC_BASE_URL`: the token in `x-api-key` (or `Authorization: Bearer`), the upstream's key as
 * `x-api-key` with `anthropic-version` defaulted, the history the body's `messages` with its `system`, the session
 * Claude Code's `x-claude-code-session-id`, the reply assembled from the SSE stream (whole at `message_stop`) or
 * read from a whole body, and Baton's refusals in Anthropic's error shape (`{"type":"error","error":{"type","message"}}`).
 */
import { type RunFailureCode, Text } from "@baton/contracts"
import { GatewayThreads } from "@baton/orchestration"
import { AnthropicMessages, type ProviderAdapter, ProviderFailure, Sse } from "@baton/providers"
import { HttpServerResponse } from "@effect/platform"
import { Option, Redacted } from "effect"
import { type Assembler, type Dialect, isRecord, parseJson, type Refusal } from "./GatewayDialect.js"

/** Anthropic's error types Baton answers with. */
type ErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "permission_error"
  | "not_found_error"
  | "request_too_large"
  | "api_error"
  | "overloaded_error"

/** An error answer in Anthropic's shape. */
export const errorResponse = (status: number, type: ErrorType, message: string) =>
  HttpServerResponse.unsafeJson({ type: "error", error: { type, message } }, { status })

/** The tokens of one Anthropic `usage` object's own figures (absent fields: 0). */
const figuresOf = (usage: Record<string, unknown>): ProviderAdapter.TurnTokens => {
  const n = (k: string) => (typeof usage[k] === "number" ? usage[k] : 0)
  return {
    inputTokens: n("input_tokens"),
    cacheWriteTokens: n("cache_creation_input_tokens"),
    cacheReadTokens: n("cache_read_input_tokens"),
    outputTokens: n("output_tokens")
  }
}

/**
 * The billed tokens of an Anthropic `usage` object (absent fields: 0): with `iterations` (server-side compaction,
 * `context_management`'s `compact_…` edit: a `compaction` iteration, then the `message` one) their sum, since the
 * top-level figures are the last iteration's alone, as the providers' adapter bills them (`AnthropicMessages`).
 * Before, the compaction's iteration was in no recorded usage nor cost.
 */
const tokensOf = (usage: Record<string, unknown>): ProviderAdapter.TurnTokens => {
  if (!Array.isArray(usage.iterations) || usage.iterations.length === 0) return figuresOf(usage)
  return usage.iterations.filter(isRecord).map(figuresOf).reduce((a, b) => ({
    inputTokens: a.inputTokens + b.inputTokens,
    cacheWriteTokens: a.cacheWriteTokens + b.cacheWriteTokens,
    cacheReadTokens: a.cacheReadTokens + b.cacheReadTokens,
    outputTokens: a.outputTokens + b.outputTokens
  }), { inputTokens: 0, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 0 })
}

/**
 * A reply's tokens from its `usage`, with what the request carried (`carriedTokens`: the top-level input figures) when
 * the billed tokens are compaction iterations' (`tokensOf`).
 */
const usageOf = (usage: Record<string, unknown> | null): Pick<GatewayThreads.Reply, "tokens" | "carriedTokens"> => {
  if (usage === null) return { tokens: null }
  const tokens = tokensOf(usage)
  const own = figuresOf(usage)
  const carried = own.inputTokens + own.cacheWriteTokens + own.cacheReadTokens
  return tokens.inputTokens + tokens.cacheWriteTokens + tokens.cacheReadTokens === carried ? { tokens } : { tokens, carriedTokens: carried }
}

/**
 * Assembles the reply of an Anthropic Messages SSE stream from its bytes as they pass: the message id, its content
 * blocks as the agent will echo them (text, `tool_use` with its parsed input, thinking with its signature, others as
 * started), and its usage (`message_start`'s, with `message_delta`'s figures over it); whole at `message_stop`.
 */
export const replyAssembler = (): Assembler => {
  const decoder = Sse.makeDecoder()
  let id: string | null = null
  let started = false
  const blocks: Array<Record<string, unknown> | undefined> = []
  const json: Array<string> = []
  let usage: Record<string, unknown> | null = null
  let stopped = false
  let failure: { readonly _tag: "failed"; readonly code: RunFailureCode; readonly reason: string } | null = null
  const onEvent = (data: unknown) => {
    if (!isRecord(data)) return
    switch (data.type) {
      case "error": {
        // Anthropic's error in the stream (`event: error`, e.g. `overloaded_error` after `message_start`): the run
        // fails with what it says, not as a stream cut short.
        const error = isRecord(data.error) ? data.error : {}
        const type = String(error.type ?? "api_error")
        const message = String(error.message ?? "")
        failure = {
          _tag: "failed",
          code: ProviderFailure.overflowOf(message) !== null
            ? "overflow"
            : type === "rate_limit_error" || type === "overloaded_error" || type === "api_error"
            ? "provider_unavailable"
            : "provider_refused",
          reason: `the upstream's stream reported an error: ${type}: ${message.slice(0, Text.characterWindow(message, 0, 300).end)}`
        }
        break
      }
      case "message_start": {
        const message = isRecord(data.message) ? data.message : {}
        const next = typeof message.id === "string" ? message.id : null
        if (started) {
          // A repeated message_start of the same message changes nothing; one of another message restarts the
          // answer (a stream spliced after a retry upstream, the recorded `spliced-message-start`): the first
          // attempt's blocks are dropped, as Baton's adapter drops them (Anthropic's SDK's MessageStream rejects the restart).
          if (next === id) break
          blocks.length = 0
          json.length = 0
          // The second message is whole at its own message_stop (a first one that had ended does not make it so).
          stopped = false
        }
        started = true
        id = next
        usage = isRecord(message.usage) ? { ...message.usage } : null
        break
      }
      case "content_block_start": {
        if (typeof data.index !== "number" || !isRecord(data.content_block)) break
        blocks[data.index] = { ...data.content_block }
        json[data.index] = ""
        break
      }
      case "content_block_delta": {
        const b = typeof data.index === "number" ? blocks[data.index] : undefined
        const d = isRecord(data.delta) ? data.delta : {}
        if (b === undefined) break
        if (d.type === "text_delta") b.text = String(b.text ?? "") + String(d.text ?? "")
        else if (d.type === "thinking_delta") b.thinking = String(b.thinking ?? "") + String(d.thinking ?? "")
        else if (d.type === "signature_delta") b.signature = String(b.signature ?? "") + String(d.signature ?? "")
        else if (d.type === "input_json_delta") json[data.index as number] += String(d.partial_json ?? "")
        break
      }
      case "content_block_stop": {
        const index = data.index as number
        const b = blocks[index]
        if (b !== undefined && b.type === "tool_use" && json[index] !== "") b.input = parseJson(json[index]!) ?? b.input
        break
      }
      case "message_delta":
        if (isRecord(data.usage)) usage = { ...(usage ?? {}), ...Object.fromEntries(Object.entries(data.usage).filter(([, v]) => v !== null)) }
        break
      case "message_stop":
        stopped = true
        break
    }
  }
  return {
    push: (chunk: Uint8Array) => {
      for (const m of decoder.push(chunk)) onEvent(parseJson(m.data))
    },
    outcome: () =>
      stopped
        ? {
          _tag: "completed",
          reply: {
            messages: blocks.length === 0 && id === null ? [] : [{ id, message: { role: "assistant", content: blocks.filter((b) => b !== undefined) } }],
            ...usageOf(usage)
          }
        }
        : failure ?? { _tag: "unfinished", reason: "the upstream's stream ended before message_stop" }
  }
}

/** The reply of a non-streamed Messages response body. */
const replyOfBody = (body: unknown): GatewayThreads.Reply => ({
  messages: isRecord(body) && Array.isArray(body.content)
    ? [{ id: typeof body.id === "string" ? body.id : null, message: { role: "assistant", content: body.content } }]
    : [],
  ...usageOf(isRecord(body) && isRecord(body.usage) ? body.usage : null)
})

const anthropicErrors: Record<Refusal, readonly [number, ErrorType]> = {
  invalid: [400, "invalid_request_error"],
  unauthenticated: [401, "authentication_error"],
  forbidden: [403, "permission_error"],
  unrouted: [404, "not_found_error"],
  too_large: [413, "request_too_large"],
  // Anthropic has no error type of its own for 431, 417 or 415; a request it cannot read is `invalid_request_error`.
  headers_too_large: [431, "invalid_request_error"],
  expectation: [417, "invalid_request_error"],
  unsupported: [415, "invalid_request_error"],
  unreachable: [502, "api_error"],
  // Anthropic's own type for "an unexpected error internal to Anthropic's systems" (500).
  internal: [500, "api_error"],
  // Anthropic's type for "temporarily overloaded", which its SDK (Claude Code) retries, honouring Retry-After.
  unavailable: [503, "overloaded_error"],
  unknown_path: [404, "not_found_error"]
}

/** The Anthropic Messages dialect (Claude Code): `x-api-key`, `anthropic-version`, `x-claude-code-session-id`. */
export const dialect: Dialect = {
  kind: "anthropic-messages",
  wire: GatewayThreads.anthropicMessages,
  refuse: (reason, message) => errorResponse(anthropicErrors[reason][0], anthropicErrors[reason][1], message),
  tokenHint: "x-api-key (ANTHROPIC_API_KEY) or Authorization: Bearer",
  keyHeader: "x-api-key",
  upstreamHeaders: (key, out) => {
    if (out["anthropic-version"] === undefined) out["anthropic-version"] = AnthropicMessages.apiVersion
    if (Option.isSome(key)) out["x-api-key"] = Redacted.value(key.value)
  },
  // A block that is not an object with a `type`, or no message at all, is refused here as Anthropic refuses it (400 `invalid_request_error`):
  // before branch b47gw it was recorded (and, switched, converted and sent) first. Roles are not checked: Claude Code
  // sends its reminders as `system` messages to a model that is not Claude (`GatewayRerender.test.ts`).
  history: (body, headers) => {
    const messages = body.messages
    if (!Array.isArray(messages) || !messages.every((m) => isRecord(m) && typeof m.role === "string" && (typeof m.content === "string" || Array.isArray(m.content)))) {
      return "messages: expected an array of {role, content} (content a string or an array of blocks)"
    }
    // Anthropic's own refusal, in its words: before branch b48gw an empty history was recorded and sent (switched too).
    if (messages.length === 0) return "messages: at least one message is required"
    const blockAt = messages.findIndex((m) => Array.isArray(m.content) && !m.content.every((b: unknown) => isRecord(b) && typeof b.type === "string"))
    if (blockAt >= 0) return `messages.${blockAt}.content: expected content blocks (objects with a type)`
    return { system: body.system, messages, session: headers["x-claude-code-session-id"] ?? null }
  },
  assembler: replyAssembler,
  replyOfBody
}
