/**
 * GatewayResponses: the gateway's OpenAI Responses dialect (issue 14, docs/gateway.md), for Codex with
 * `wire_api = "responses"` and a model provider whose `base_url` is Baton's (`http://127.0.0.1:8787/v1`):
 *
 * - `POST /v1/responses` (streamed or not) and `POST /v1/responses/compact`, forwarded to the routed
 *   `openai-responses` instance at `{baseUrl}/responses` (`…/responses/compact`) with the instance's key as
 *   `Authorization: Bearer`; the agent authenticates with a Baton token in the same header (Codex's `env_key`).
 * - The history is the body's `input` (a string is one user message); the system prompt its `instructions`. The
 *   conversation is the agent's `thread-id` header (Codex sends it, with `session-id`, on every request), else its
 *   `session-id`, else the body's `prompt_cache_key`, else the fingerprint of the conversation's start.
 * - A stream's reply is its `response.output_item.done` items in output order (each is one input item of the agent's
 *   next request), whole at `response.completed` (or `response.incomplete`: what the model produced before a limit);
 *   `response.failed` fails the run with the upstream's error (`overflow` for `context_length_exceeded`). Usage:
 *   `input_tokens` includes `input_tokens_details.cached_tokens` (billed as cache reads; no cache writes).
 * - Baton's own refusals are in OpenAI's error shape (`{"error":{"message","type","param","code"}}`).
 *
 * It owns only what differs from the Anthropic dialect (`GatewayAnthropic`); forwarding and the record are `Gateway`'s.
 */
import type { ProviderAdapter } from "@baton/providers"
import type { RunFailureCode } from "@baton/contracts"
import { GatewayResponsesWire, type GatewayThreads } from "@baton/orchestration"
import { ProviderFailure, Sse } from "@baton/providers"
import { HttpServerResponse } from "@effect/platform"
import { Option, Redacted } from "effect"
import { type Assembler, type Dialect, isRecord, parseJson, type Refusal, type StreamOutcome } from "./GatewayDialect.js"

/** OpenAI's status, `type` and `code` for each of Baton's refusals. */
const errors: Record<Refusal, readonly [number, string, string | null]> = {
  invalid: [400, "invalid_request_error", null],
  unauthenticated: [401, "invalid_request_error", "invalid_api_key"],
  // OpenAI answers a request its key may not make 403 with `invalid_request_error`.
  forbidden: [403, "invalid_request_error", null],
  unrouted: [404, "invalid_request_error", "model_not_found"],
  too_large: [413, "invalid_request_error", "request_too_large"],
  headers_too_large: [431, "invalid_request_error", null],
  expectation: [417, "invalid_request_error", null],
  unsupported: [415, "invalid_request_error", "unsupported_content_encoding"],
  unreachable: [502, "server_error", null],
  // OpenAI's own type for a failure on its side (500).
  internal: [500, "server_error", null],
  // OpenAI's 503 ("The server is overloaded or not ready yet."), which its SDKs retry, honouring Retry-After.
  unavailable: [503, "server_error", null],
  // OpenAI's answer to a path it has no endpoint at ("Unknown request URL: POST /v1/…").
  unknown_path: [404, "invalid_request_error", "unknown_url"]
}

/** An error answer in OpenAI's shape. */
export const errorResponse = (reason: Refusal, message: string) => {
  const [status, type, code] = errors[reason]
  return HttpServerResponse.unsafeJson({ error: { message, type, param: null, code } }, { status })
}

/**
 * The billed tokens of a Responses `usage` object (absent fields: 0): `input_tokens` include
 * `input_tokens_details.cached_tokens` (cache reads) and `input_tokens_details.cache_write_tokens` (cache writes, where
 * reported: Baton's switch to an Anthropic upstream).
 */
export const tokensOf = (usage: Record<string, unknown>): ProviderAdapter.TurnTokens => {
  const n = (u: unknown) => (typeof u === "number" ? u : 0)
  const cached = isRecord(usage.input_tokens_details) ? n(usage.input_tokens_details.cached_tokens) : 0
  const written = isRecord(usage.input_tokens_details) ? n(usage.input_tokens_details.cache_write_tokens) : 0
  return { inputTokens: n(usage.input_tokens) - cached - written, cacheWriteTokens: written, cacheReadTokens: cached, outputTokens: n(usage.output_tokens) }
}

/** A reply of output items (`null` entries skipped) with the response's usage. */
const replyOf = (output: ReadonlyArray<unknown>, response: unknown): GatewayThreads.Reply => ({
  messages: output.filter(isRecord).map((item) => ({ id: typeof item.id === "string" ? item.id : null, message: item })),
  tokens: isRecord(response) && isRecord(response.usage) ? tokensOf(response.usage) : null
})

/**
 * The run failure code of an error in a Responses stream (`response.failed`'s `error`, or an `error` event) from its
 * `code` and `message`: `overflow` for OpenAI's `context_length_exceeded` or an overflow in any provider's words
 * (`ProviderFailure.overflowOf`, as the same body answered as a 4xx is read), `provider_unavailable` for a server error
 * or a rate limit (`server_error`, `rate_limit_exceeded`, `server_is_overloaded`), else `otherwise`.
 */
const streamFailureCode = (code: unknown, message: unknown, otherwise: RunFailureCode): RunFailureCode =>
  code === "context_length_exceeded" || ProviderFailure.overflowOf(typeof message === "string" ? message : "") !== null
    ? "overflow"
    : code === "server_error" || code === "rate_limit_exceeded" || code === "server_is_overloaded"
    ? "provider_unavailable"
    : otherwise

/**
 * Assembles the reply of a Responses SSE stream from its bytes as they pass: the `response.output_item.done` items
 * by `output_index` (the final response's `output` when the stream gave none), the usage of the final response.
 * A `response.created` of another response mid-stream restarts the answer (a stream spliced after a retry upstream):
 * the first attempt's items are dropped and the reply is the second response's alone, whole at its own
 * `response.completed`, as `GatewayAnthropic.replyAssembler` does on a second `message_start`; a repeated
 * `response.created` of the same response changes nothing.
 */
export const replyAssembler = (): Assembler => {
  const decoder = Sse.makeDecoder()
  const items: Array<unknown> = []
  const unfinished: StreamOutcome = { _tag: "unfinished", reason: "the upstream's stream ended before response.completed" }
  let outcome: StreamOutcome = unfinished
  /** The response's id (its `response.created`'s; `undefined` before it, `null` when it had none). */
  let id: string | null | undefined = undefined
  const onEvent = (data: unknown) => {
    if (!isRecord(data)) return
    switch (data.type) {
      case "response.created": {
        const next = isRecord(data.response) && typeof data.response.id === "string" ? data.response.id : null
        if (id !== undefined) {
          if (next === id) break
          // Found in review: the first attempt's items stayed in the reply (those at an output index the second
          // response did not reach), and a first response that had completed made the second's cut answer whole.
          items.length = 0
          if (outcome._tag === "completed") outcome = unfinished
        }
        id = next
        break
      }
      case "response.output_item.done":
        if (typeof data.output_index === "number" && isRecord(data.item)) items[data.output_index] = data.item
        else if (isRecord(data.item)) items.push(data.item)
        break
      case "response.completed":
      case "response.incomplete": {
        const response = isRecord(data.response) ? data.response : {}
        const output = items.some((i) => i !== undefined) ? items : Array.isArray(response.output) ? response.output : []
        outcome = { _tag: "completed", reply: replyOf(output, response) }
        break
      }
      case "response.failed": {
        const response = isRecord(data.response) ? data.response : {}
        const error = isRecord(response.error) ? response.error : {}
        outcome = {
          _tag: "failed",
          code: streamFailureCode(error.code, error.message, "provider_refused"),
          reason: `the upstream's response failed: ${String(error.code ?? "")} ${String(error.message ?? "")}`.trim()
        }
        break
      }
      case "error":
        outcome = { _tag: "failed", code: streamFailureCode(data.code, data.message, "provider_unavailable"), reason: `the upstream's stream reported an error: ${String(data.code ?? "")} ${String(data.message ?? "")}`.trim() }
        break
    }
  }
  return {
    push: (chunk) => {
      for (const m of decoder.push(chunk)) onEvent(parseJson(m.data))
    },
    outcome: () => outcome
  }
}

/** The reply of a non-streamed Responses body (`/v1/responses` without `stream`, `/v1/responses/compact`). */
export const replyOfBody = (body: unknown): GatewayThreads.Reply =>
  isRecord(body) && Array.isArray(body.output) ? replyOf(body.output, body) : { messages: [], tokens: isRecord(body) && isRecord(body.usage) ? tokensOf(body.usage) : null }

/** The upstream's credentials on OpenAI's wires: the instance's key as `Authorization: Bearer`. */
export const bearerUpstream: Dialect["upstreamHeaders"] = (key, out) => {
  if (Option.isSome(key)) out["authorization"] = `Bearer ${Redacted.value(key.value)}`
}

/**
 * The session a Codex sub-agent runs under: `parent_thread_id` of its `x-codex-turn-metadata` header (JSON; Codex
 * sends it on a spawned sub-agent's requests with `thread_source: "subagent"`). `null`: no header, not JSON, or no
 * parent.
 */
export const parentOf = (metadata: string | undefined): string | null => {
  if (metadata === undefined) return null
  const parsed = parseJson(metadata)
  const parent = isRecord(parsed) ? parsed.parent_thread_id : undefined
  return typeof parent === "string" && parent !== "" ? parent : null
}

/** The OpenAI Responses dialect (see the module docblock). */
export const dialect: Dialect = {
  kind: "openai-responses",
  wire: GatewayResponsesWire.openAiResponses,
  refuse: errorResponse,
  tokenHint: "Authorization: Bearer (the model provider's env_key)",
  upstreamHeaders: bearerUpstream,
  history: (body, headers) => {
    const input = typeof body.input === "string" ? [{ role: "user", content: body.input }] : body.input
    if (!Array.isArray(input) || !input.every(isRecord)) return "input: expected a string or an array of input items"
    // A message whose content is neither a string nor an array of content parts (objects) is refused here as OpenAI
    // refuses it: before branch b47gw it was recorded (and, switched, converted and sent) first.
    const at = input.findIndex((i) => (i.type === "message" || (i.type === undefined && typeof i.role === "string")) &&
      !(typeof i.content === "string" || (Array.isArray(i.content) && i.content.every(isRecord))))
    if (at >= 0) return `input[${at}].content: expected a string or an array of content parts`
    const session = headers["thread-id"] ?? headers["session-id"] ?? (typeof body.prompt_cache_key === "string" ? body.prompt_cache_key : null)
    return { system: body.instructions, messages: input, session: session === "" ? null : session, parent: parentOf(headers["x-codex-turn-metadata"]) }
  },
  assembler: replyAssembler,
  replyOfBody
}
