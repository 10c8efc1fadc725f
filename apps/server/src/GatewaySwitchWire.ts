/**
 * GatewaySwitchWire: what a provider switch from `/v1/messages` needs of the upstream's protocol, so that one
 * `GatewaySwitched.serve` (record first, fit, post, hidden `thread_read` rounds, the answer converted back, the record)
 * serves both targets: `chat` (an `openai-chat` instance, `GatewaySwitch`) and `responses` (an `openai-responses`
 * instance, `GatewaySwitchResponses`). No I/O.
 */
import { OpenAiChat, type ProviderConfig } from "@baton/providers"
import { parseJson } from "./GatewayDialect.js"
import * as GatewaySwitch from "./GatewaySwitch.js"
import * as GatewaySwitchResponses from "./GatewaySwitchResponses.js"

type Json = Record<string, unknown>

/** A tool answer of the gateway (a hidden call's): the call's id, its output, whether it failed. */
export interface Answer {
  readonly toolCallId: string
  readonly output: string
  readonly isError: boolean
}

/** A stream translator of either wire: `GatewaySwitch.StreamTranslator` with the hop's assistant output as items. */
export interface Translator extends Omit<GatewaySwitch.StreamTranslator, "assistant"> {
  /** The open hop's assistant output in the wire's form (one Chat message; Responses items), for the continuation. */
  readonly assistant: () => ReadonlyArray<unknown>
}

/** One target protocol of a switch. */
export interface SwitchWire {
  /** The instance kind it serves. */
  readonly kind: ProviderConfig.ModelApiKind
  /** The upstream path after the instance's `baseUrl` (`/chat/completions`, `/responses`). */
  readonly path: string
  /** The agent's request converted and fitted (`GatewaySwitch.toChat`'s fit, always). */
  readonly fit: (input: GatewaySwitch.FitInput) => GatewaySwitch.FitResult
  /** The request continued after hidden calls: the hop's assistant output and the gateway's answers appended. */
  readonly continued: (body: Json, assistant: ReadonlyArray<unknown>, answers: ReadonlyArray<Answer>) => Json
  /** Tokens of the hop's assistant output and of one answer as they go out (as the fit counts). */
  readonly tokensOf: (count: (text: string) => number, assistant: ReadonlyArray<unknown>) => number
  readonly answerTokens: (count: (text: string) => number, answer: Answer) => number
  /** A whole answer's calls when all are hidden (the hop's assistant output, the calls); `null` otherwise. */
  readonly hiddenCallsOf: (answer: unknown, hidden: ReadonlySet<string>) => { readonly assistant: ReadonlyArray<unknown>; readonly calls: ReadonlyArray<GatewaySwitch.HiddenCall> } | null
  /** A whole answer as an Anthropic message (hidden calls left out, earlier hops' usage added). */
  readonly messageOf: (answer: unknown, model: string, hidden: ReadonlySet<string>, earlier: ReadonlyArray<unknown>, offered: ReadonlySet<string>) => Json
  /** The Anthropic error (status, body) of a whole 2xx answer that reports a failure; `null` for an answer. */
  readonly failureOf: (answer: unknown) => { readonly status: number; readonly body: Json } | null
  /** What one request carried, from its answer's `usage`. */
  readonly carriedOf: (usage: unknown) => number | null
  /** A translator for one streamed answer. */
  readonly translator: (model: string, hidden: ReadonlySet<string>, offered: ReadonlySet<string>) => Translator
}

const chatTokens = (count: (text: string) => number, m: unknown) => count(JSON.stringify(m)) + 4

/** Chat Completions (`GatewaySwitch`). */
export const chat: SwitchWire = {
  kind: "openai-chat",
  path: "/chat/completions",
  fit: GatewaySwitch.toChat,
  continued: (body, assistant, answers) => ({
    ...body,
    messages: [...(body.messages as ReadonlyArray<unknown>), ...assistant, ...parseJson(`[${OpenAiChat.dialect.toolResults(answers, [])}]`) as ReadonlyArray<unknown>]
  }),
  tokensOf: (count, assistant) => assistant.reduce<number>((n, m) => n + chatTokens(count, m), 0),
  answerTokens: (count, a) => chatTokens(count, { role: "tool", tool_call_id: a.toolCallId, content: a.output }),
  hiddenCallsOf: (answer, hidden) => {
    const reads = GatewaySwitch.hiddenCallsOf(answer, hidden)
    return reads === null ? null : { assistant: [reads.message], calls: reads.calls }
  },
  messageOf: (answer, model, hidden, earlier) => GatewaySwitch.messageOf(answer, model, hidden, earlier),
  failureOf: () => null,
  carriedOf: GatewaySwitch.carriedOf,
  translator: (model, hidden) => {
    const t = GatewaySwitch.streamTranslator(model, hidden)
    return { ...t, assistant: () => [t.assistant()] }
  }
}

/** OpenAI Responses (`GatewaySwitchResponses`). */
export const responses: SwitchWire = {
  kind: "openai-responses",
  path: "/responses",
  fit: GatewaySwitchResponses.toResponses,
  continued: (body, assistant, answers) => ({
    ...body,
    input: [...(body.input as ReadonlyArray<unknown>), ...assistant, ...GatewaySwitchResponses.answerItems(answers)]
  }),
  tokensOf: (count, assistant) => assistant.reduce<number>((n, item) => n + GatewaySwitchResponses.itemTokens(count, item), 0),
  answerTokens: (count, a) => GatewaySwitchResponses.answerItems([a]).reduce<number>((n, item) => n + GatewaySwitchResponses.itemTokens(count, item), 0),
  hiddenCallsOf: GatewaySwitchResponses.hiddenCallsOf,
  messageOf: GatewaySwitchResponses.messageOf,
  failureOf: GatewaySwitchResponses.failureOf,
  carriedOf: GatewaySwitchResponses.carriedOf,
  translator: GatewaySwitchResponses.streamTranslator
}

/** The switch wire for an instance kind (`undefined`: no switch to it). */
export const forKind = (kind: ProviderConfig.ModelApiKind): SwitchWire | undefined => kind === "openai-chat" ? chat : kind === "openai-responses" ? responses : undefined

/**
 * The run's failure for translated Anthropic SSE text that holds an `error` event (the upstream's error in its
 * stream, converted): `overflow` for "prompt is too long", `provider_unavailable` for rate limits, overload and
 * server errors, `provider_refused` otherwise; `null` when the text holds no error event, or only one of Baton's own
 * about the stream's shape ("the upstream's stream …": no answer, cut short; the run fails `provider_protocol`).
 */
export const streamFailureOf = (text: string): { readonly code: "overflow" | "provider_unavailable" | "provider_refused"; readonly reason: string } | null => {
  const found = /^event: error\ndata: (.*)$/m.exec(text)
  if (found === null) return null
  const body = parseJson(found[1]!) as { error?: { type?: unknown; message?: unknown } } | undefined
  const type = String(body?.error?.type ?? "api_error")
  const message = String(body?.error?.message ?? "")
  if (message.startsWith("the upstream's stream")) return null
  const code = type === "invalid_request_error" && message.startsWith("prompt is too long")
    ? "overflow"
    : type === "rate_limit_error" || type === "overloaded_error" || type === "api_error"
    ? "provider_unavailable"
    : "provider_refused"
  return { code, reason: `the upstream's stream reported an error: ${type}: ${message.slice(0, 300)}` }
}
