/**
 * The wire dialect of a stateless model API: how Baton's entries, tools and results are encoded as that API's
 * messages, how a request body is rendered from the stored message list, and how the API's stream is read back.
 * `ModelApiAdapter` drives a dialect; `AnthropicMessages`, `OpenAiResponses` and `OpenAiChat` are the three.
 */
import type { ProviderErrorCode } from "@baton/contracts"
import type { ProducedItem, TextDelta, ToolDefinition, ToolResultInput, TurnTokens } from "../ProviderAdapter.js"
import type { SseMessage } from "./Sse.js"
import * as ProviderFailure from "../ProviderFailure.js"

/** A tool call the model made, as the adapter keeps it until its result is sent. `wire` is the API's call kind. */
export interface ToolCall {
  readonly id: string
  readonly name: string
  readonly arguments: string
  readonly wire: string
}

/** Why reading a response failed (mapped to `ProviderError` by the adapter). */
export interface WireFailure {
  readonly _tag: "WireFailure"
  readonly code: ProviderErrorCode
  readonly reason: string
  readonly retryable: boolean
  readonly requestedTokens?: number | undefined
  readonly limitTokens?: number | undefined
  /** Items the failing event completed before the failure (streamed first, then the failure). */
  readonly before?: ReadonlyArray<ProducedItem> | undefined
}

export const wireFailure = (
  code: ProviderErrorCode,
  reason: string,
  retryable = false,
  tokens: { readonly requestedTokens?: number | undefined; readonly limitTokens?: number | undefined } = {}
): WireFailure => ({ _tag: "WireFailure", code, reason, retryable, ...tokens })

/**
 * The failure of a response holding a second tool call with the id of an earlier call of the same response: results
 * are paired with calls by id, so such a response cannot be answered (two results for one id, or one result for two
 * calls, which the APIs refuse). The response is a `protocol` error, not retried (the provider read the request): what
 * came before the duplicate stands (items and native thread alike), the duplicate is dropped, and the earlier call is
 * closed with an error result like any call a failed turn left open. `before`: the items completed with it.
 */
export const duplicateCall = (api: string, id: string, before: ReadonlyArray<ProducedItem> = []): WireFailure => ({
  ...wireFailure("protocol", `the ${api} response holds two tool calls with id ${JSON.stringify(id)}; the duplicate is dropped and the response fails`),
  ...(before.length === 0 ? {} : { before })
})

export const isWireFailure = (u: unknown): u is WireFailure =>
  typeof u === "object" && u !== null && (u as { readonly _tag?: unknown })._tag === "WireFailure"

/**
 * What one model request produced, once its stream ended: `output` the wire messages to append to the native thread
 * (comma-joined JSON texts, `null` when the model produced nothing storable), `calls` the tool calls in it,
 * `contextTokens` the tokens the native thread holds after it (prompt + output, `null` if unreported), `tokens` what
 * the request was billed, `overflow` set when the model stopped because the window was full.
 */
export interface RequestOutcome {
  readonly output: string | null
  readonly calls: ReadonlyArray<ToolCall>
  readonly contextTokens: number | null
  readonly tokens: TurnTokens | null
  readonly overflow: boolean
}

/** Reads one response's events. Mutable and single-use: one per request. */
export interface StreamParser {
  /** Consumes one event; returns the items it completed, or the failure it reports. */
  readonly onEvent: (message: SseMessage) => ReadonlyArray<ProducedItem> | WireFailure
  /** Whether the response's terminal event arrived. */
  readonly complete: () => boolean
  /** The outcome once `complete()`; `partial()` the wire output of what was completed so far (mid-stream failure). */
  readonly outcome: () => RequestOutcome
  readonly partial: () => string | null
  /**
   * Items completed but held back (a dialect whose stream may restart holds a message's items until the message is
   * final), returned once and forgotten: the stream stopped early (a failure, an interrupt) and `partial()` holds
   * their wire form, so they are streamed before the stop and the record and the native thread agree.
   */
  readonly drain?: () => ReadonlyArray<ProducedItem>
}

/** What a request body is rendered from. `breakpoints`: entry indexes whose last block carries a cache breakpoint. */
export interface RenderInput {
  readonly model: string
  readonly maxOutputTokens: number
  readonly system: string | undefined
  readonly tools: ReadonlyArray<ToolDefinition>
  readonly entries: ReadonlyArray<string>
  readonly breakpoints: ReadonlyArray<number>
  readonly cacheKey: string
}

export interface Dialect {
  /** `Anthropic Messages`, `OpenAI Responses`, `Chat Completions`: named in errors. */
  readonly api: string
  /** The request path appended to the instance's `baseUrl`. */
  readonly path: string
  /** Headers carrying the key (already unwrapped from its `Redacted` only here). */
  readonly authHeaders: (key: string | null) => Record<string, string>
  /** The user's turn: inline history (its own block, before) and the prompt, byte-identical. */
  readonly userTurn: (prompt: string, inlineHistory: string | null) => string
  /** An injected history block (a user message of its own). */
  readonly history: (rendered: string) => string
  /** Results of `calls` (each call's kind tells its result's wire form). */
  readonly toolResults: (results: ReadonlyArray<ToolResultInput>, calls: ReadonlyArray<ToolCall>) => string
  /** The calls an `output` entry holds, and the call ids a `tool_results` entry answers (read back after a restart). */
  readonly callsOf: (output: string) => ReadonlyArray<ToolCall>
  readonly answeredBy: (toolResults: string) => ReadonlyArray<string>
  /** The request body as parts: text, or the index of a stored entry sent verbatim (see `BodyPart`). */
  readonly render: (input: RenderInput) => ReadonlyArray<BodyPart>
  /** A parser for one response; `onDelta` (when given) receives text pieces as they are read. */
  readonly parser: (offered: ReadonlySet<string>, onDelta: ((delta: TextDelta) => void) | null) => StreamParser
  /** A non-streamed (JSON) response body as the events its stream would have carried. */
  readonly synthesize: (body: unknown) => ReadonlyArray<SseMessage>
  /** An HTTP error answer's failure (status and body text as received). */
  readonly httpFailure: (status: number, body: string) => WireFailure
}

/**
 * A piece of a request body: literal text, or the index of a stored entry to send exactly as stored. Entries are the
 * bulk of a body (a 150,000-token conversation is about 530 KB): the adapter keeps each entry's UTF-8 bytes and
 * copies them, so only what is new in a request is encoded.
 */
export type BodyPart = string | number

/** The body's text (count_tokens, tests, benchmarks). */
export const bodyText = (parts: ReadonlyArray<BodyPart>, entries: ReadonlyArray<string>): string =>
  parts.map((p) => (typeof p === "number" ? entries[p]! : p)).join("")

/** The entries joined by commas as parts, `marked` entries replaced by their text. */
export const entryParts = (count: number, marked: (index: number) => string | null): Array<BodyPart> => {
  const parts: Array<BodyPart> = []
  for (let i = 0; i < count; i++) {
    if (i > 0) parts.push(",")
    parts.push(marked(i) ?? i)
  }
  return parts
}

/**
 * A tool result's output for an API whose results have no error field (OpenAI Responses `function_call_output`, Chat
 * Completions `role: "tool"`): a failed result (`isError`) is sent as `Error: <output>`, the marker OpenAI's own agent
 * tooling puts in front of a tool's failure text, so the model can tell a failure from an output. Anthropic has
 * `is_error` and does not use this.
 */
export const markedOutput = (result: { readonly output: string; readonly isError: boolean }): string =>
  result.isError ? `Error: ${result.output}` : result.output

/** JSON.parse without exceptions: `undefined` when the text is not JSON. */
export const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/** A plain object's field, or `undefined`. */
export const field = (u: unknown, key: string): unknown =>
  typeof u === "object" && u !== null ? (u as Record<string, unknown>)[key] : undefined

export const str = (u: unknown): string | undefined => (typeof u === "string" ? u : undefined)
export const num = (u: unknown): number | undefined => (typeof u === "number" && Number.isFinite(u) ? u : undefined)

/** A text item in Baton's vocabulary. */
export const textItem = (kind: ProducedItem["kind"], text: string, messageId: string | null, isError = false): ProducedItem => ({
  kind,
  text,
  toolCallId: null,
  toolName: null,
  messageId,
  isError,
  toolCallState: null
})

/** A tool-call item: `text` is the call's arguments as the model wrote them. */
export const callItem = (call: ToolCall, messageId: string | null): ProducedItem => ({
  kind: "tool_call",
  text: call.arguments,
  toolCallId: call.id,
  toolName: call.name,
  messageId,
  isError: false,
  toolCallState: null
})

/**
 * The numbers of a context-overflow message, in the forms providers send: Anthropic `prompt is too long: N tokens >
 * M maximum`; OpenAI/vLLM `maximum context length is M tokens. However, your messages resulted in N tokens` (or `you
 * requested N tokens`).
 */
export const overflowNumbers = (message: string): { requestedTokens?: number; limitTokens?: number } | null => {
  // One reading of the field's overflow texts for every adapter and for Baton's own classification.
  const sizes = ProviderFailure.overflowOf(message)
  if (sizes === null || (sizes.requestedTokens === null && sizes.maximumTokens === null)) return null
  return {
    ...(sizes.requestedTokens === null ? {} : { requestedTokens: sizes.requestedTokens }),
    ...(sizes.maximumTokens === null ? {} : { limitTokens: sizes.maximumTokens })
  }
}
