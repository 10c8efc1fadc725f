/**
 * GatewaySwitchWire: what a provider switch needs of the agent's protocol (`AgentSide`) and of the upstream's
 * (`SwitchWire`), so that one `GatewaySwitched.serve` (record first, fit, post, hidden `thread_read` rounds, the answer
 * converted back, the record) serves every direction: from `/v1/messages` to `chat` (an `openai-chat` instance,
 * `GatewaySwitch`) and `responses` (an `openai-responses` instance, `GatewaySwitchResponses`); from
 * `/v1/chat/completions` to `anthropic` (an `anthropic-messages` instance, `GatewaySwitchAnthropic`) and
 * `chatToResponses` (an `openai-responses` one, `GatewaySwitchOpenAi`); from `/v1/responses` to
 * `anthropicForResponses` (`GatewaySwitchResponsesAnthropic`) and `responsesToChat` (an `openai-chat` one,
 * `GatewaySwitchOpenAi`). No I/O.
 */
import type { Option, Redacted } from "effect"
import { OpenAiChat, type ProviderConfig } from "@baton/providers"
import * as GatewayAnthropic from "./GatewayAnthropic.js"
import * as GatewayChat from "./GatewayChat.js"
import * as GatewayResponses from "./GatewayResponses.js"
import { type Dialect, isRecord, parseJson } from "./GatewayDialect.js"
import * as GatewayMedia from "./GatewayMedia.js"
import * as GatewaySwitch from "./GatewaySwitch.js"
import * as GatewaySwitchAnthropic from "./GatewaySwitchAnthropic.js"
import * as GatewaySwitchOpenAi from "./GatewaySwitchOpenAi.js"
import * as GatewaySwitchResponses from "./GatewaySwitchResponses.js"
import * as GatewaySwitchResponsesAnthropic from "./GatewaySwitchResponsesAnthropic.js"

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
  /**
   * An error of the gateway's (the agent's shape: the upstream's stream broke off, a continuation failed) as the
   * agent's stream's error event, numbered on from the events sent (a Responses agent's `sequence_number`, its
   * response id); `""` when the answer had ended. Absent: `AgentSide.streamError` (an Anthropic agent's events carry
   * no numbers).
   */
  readonly error?: (body: Record<string, unknown>) => string
}

/** A run failure read from translated stream text (`AgentSide.streamFailureOf`). */
export type StreamFailure = { readonly code: "overflow" | "provider_unavailable" | "provider_refused"; readonly reason: string } | null

/**
 * The agent's side of a switch: how its conversation is recorded and its answers assembled (`dialect`), and its
 * protocol's errors and streams.
 */
export interface AgentSide {
  readonly dialect: Dialect
  /** A body of Baton's own error (`api_error`: the upstream failed; `invalid_request_error`: the request). */
  readonly error: (type: "api_error" | "invalid_request_error", message: string) => Record<string, unknown>
  /** The agent's own overflow error body (status 400) for a request of `tokens` over `limit`. */
  readonly overflow: (tokens: number, limit: number) => Record<string, unknown>
  /** Whether an error body (the agent's shape) is an overflow. */
  readonly isOverflow: (body: Record<string, unknown>) => boolean
  /** The upstream's error (its status and body text) in the agent's shape and status. */
  readonly upstreamError: (status: number, text: string) => { readonly status: number; readonly body: Record<string, unknown> }
  /** A whole answer (the wire's `messageOf`) as the agent's stream, for an agent that asked for one. */
  readonly wholeAsStream: (message: Record<string, unknown>, request: Record<string, unknown>) => string
  /** An error body (the agent's shape) as an event of the agent's stream. */
  readonly streamError: (body: Record<string, unknown>) => string
  /** The run's failure for translated stream text that holds an error event; `null` when none. */
  readonly streamFailureOf: (text: string) => StreamFailure
}

/** One direction of a switch: the upstream's protocol, and the agent's (`agent`) its answers are converted to. */
export interface SwitchWire {
  /** The instance kind it serves. */
  readonly kind: ProviderConfig.ModelApiKind
  /** The agent's protocol. */
  readonly agent: AgentSide
  /** The upstream's credentials and headers (the instance's key). */
  readonly upstreamHeaders: (key: Option.Option<Redacted.Redacted>, out: Record<string, string>) => void
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
  /** A whole answer in the agent's protocol (hidden calls left out, earlier hops' usage added; `request`: the agent's body). */
  readonly messageOf: (answer: unknown, model: string, hidden: ReadonlySet<string>, earlier: ReadonlyArray<unknown>, offered: ReadonlySet<string>, request: Json) => Json
  /** The agent's error (status, body) of a whole 2xx answer that reports a failure; `null` for an answer. */
  readonly failureOf: (answer: unknown) => { readonly status: number; readonly body: Json } | null
  /** What one request carried, from its answer's `usage`. */
  readonly carriedOf: (usage: unknown) => number | null
  /** A translator for one streamed answer (`request`: the agent's body). */
  readonly translator: (model: string, hidden: ReadonlySet<string>, offered: ReadonlySet<string>, request: Record<string, unknown>) => Translator
  /**
   * Baton's own final text as an answer of the upstream's protocol (`GatewaySwitched.readLimitNote`, when the
   * `thread_read` rounds ran out): `whole` a body with `previous`'s (the last answer's) id and usage, `stream` a hop's SSE
   * text without usage (its usage is the earlier hops'); `said` whether a whole answer has text of its own (then it is
   * the answer, its hidden calls left out, and no note is needed).
   */
  readonly note: {
    readonly whole: (text: string, previous: unknown) => Json
    readonly stream: (text: string) => string
    readonly said: (answer: unknown) => boolean
  }
}

/** Whether `s` is a string with some text. */
const someText = (s: unknown) => typeof s === "string" && s !== ""

/** The id and usage of a whole answer (`{}` for what is none). */
const idAndUsage = (previous: unknown): Json =>
  isRecord(previous) ? { ...(previous.id === undefined ? {} : { id: previous.id }), ...(previous.usage === undefined ? {} : { usage: previous.usage }) } : {}

/** Baton's note as a Chat Completions answer. */
const chatNote: SwitchWire["note"] = {
  whole: (text, previous) => ({
    id: "chatcmpl-baton",
    object: "chat.completion",
    choices: [{ index: 0, message: { role: "assistant", content: text }, finish_reason: "stop" }],
    ...idAndUsage(previous)
  }),
  stream: (text) =>
    `data: ${JSON.stringify({ id: "chatcmpl-baton", object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: text }, finish_reason: "stop" }] })}\n\ndata: [DONE]\n\n`,
  said: (answer) => {
    const choice = isRecord(answer) && Array.isArray(answer.choices) && isRecord(answer.choices[0]) ? answer.choices[0] : {}
    const content = isRecord(choice.message) ? choice.message.content : null
    return someText(content) || (Array.isArray(content) && content.some((p) => isRecord(p) && someText(p.text)))
  }
}

/** Baton's note as an OpenAI Responses answer. */
const responsesNote: SwitchWire["note"] = {
  whole: (text, previous) => ({
    id: "resp_baton",
    object: "response",
    status: "completed",
    output: [{ type: "message", id: "msg_baton", role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] }],
    ...idAndUsage(previous)
  }),
  stream: (text) => `data: ${JSON.stringify({ type: "response.completed", response: responsesNote.whole(text, null) })}\n\n`,
  said: (answer) =>
    isRecord(answer) && Array.isArray(answer.output) && answer.output.some((i) =>
      isRecord(i) && i.type === "message" && Array.isArray(i.content) && i.content.some((c) => isRecord(c) && (someText(c.text) || someText(c.refusal)))
    )
}

/** Baton's note as an Anthropic Messages answer. */
const anthropicNote: SwitchWire["note"] = {
  whole: (text, previous) => ({
    id: "msg_baton",
    type: "message",
    role: "assistant",
    content: [{ type: "text", text }],
    stop_reason: "end_turn",
    stop_sequence: null,
    usage: { input_tokens: 0, output_tokens: 0 },
    ...idAndUsage(previous)
  }),
  stream: (text) =>
    [
      { type: "message_start", message: { id: "msg_baton", type: "message", role: "assistant", content: [], stop_reason: null, usage: { input_tokens: 0, output_tokens: 0 } } },
      { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text } },
      { type: "content_block_stop", index: 0 },
      { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 0 } },
      { type: "message_stop" }
    ].map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join(""),
  said: (answer) => isRecord(answer) && Array.isArray(answer.content) && answer.content.some((b) => isRecord(b) && b.type === "text" && someText(b.text))
}

const chatTokens = (count: (text: string) => number, m: unknown) => GatewayMedia.jsonTokens(count, m) + 4

/** An Anthropic Messages agent (Claude Code). */
export const anthropicAgent: AgentSide = {
  dialect: GatewayAnthropic.dialect,
  error: GatewaySwitch.errorBody,
  overflow: (tokens, limit) => GatewaySwitch.errorBody("invalid_request_error", GatewaySwitch.overflowMessage(tokens, limit)),
  isOverflow: (body) => isRecord(body.error) && String(body.error.message ?? "").startsWith("prompt is too long"),
  upstreamError: GatewaySwitch.anthropicError,
  wholeAsStream: (message) => GatewaySwitch.eventsOf(message),
  streamError: (body) => `event: error\ndata: ${JSON.stringify(body)}\n\n`,
  streamFailureOf: (text) => streamFailureOf(text)
}

/** A Chat Completions agent (pi, opencode, aider). */
export const chatAgent: AgentSide = {
  dialect: GatewayChat.dialect,
  error: (type, message) => GatewaySwitchAnthropic.errorBody(type === "api_error" ? "server_error" : type, message),
  overflow: GatewaySwitchAnthropic.overflowBody,
  isOverflow: GatewaySwitchAnthropic.isOverflow,
  upstreamError: GatewaySwitchAnthropic.chatError,
  wholeAsStream: GatewaySwitchAnthropic.chunksOf,
  streamError: (body) => `data: ${JSON.stringify(body)}\n\n`,
  streamFailureOf: GatewaySwitchAnthropic.streamFailureOf
}

/** An OpenAI Responses agent (Codex). */
export const responsesAgent: AgentSide = {
  ...chatAgent,
  dialect: GatewayResponses.dialect,
  wholeAsStream: (response) => GatewaySwitchResponsesAnthropic.eventsOf(response),
  streamError: (body) => GatewaySwitchResponsesAnthropic.failedEvent(body),
  streamFailureOf: GatewaySwitchResponsesAnthropic.streamFailureOf
}

/** Chat Completions (`GatewaySwitch`). */
export const chat: SwitchWire = {
  kind: "openai-chat",
  agent: anthropicAgent,
  upstreamHeaders: GatewayChat.dialect.upstreamHeaders,
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
  },
  note: chatNote
}

/** OpenAI Responses (`GatewaySwitchResponses`). */
export const responses: SwitchWire = {
  kind: "openai-responses",
  agent: anthropicAgent,
  upstreamHeaders: GatewayChat.dialect.upstreamHeaders,
  path: "/responses",
  fit: GatewaySwitchResponses.toResponses,
  continued: (body, assistant, answers) => ({
    ...body,
    input: [...(body.input as ReadonlyArray<unknown>), ...assistant, ...GatewaySwitchResponses.answerItems(answers)]
  }),
  tokensOf: (count, assistant) => assistant.reduce<number>((n, item) => n + GatewaySwitchResponses.itemTokens(count, item), 0),
  answerTokens: (count, a) => GatewaySwitchResponses.answerItems([a]).reduce<number>((n, item) => n + GatewaySwitchResponses.itemTokens(count, item), 0),
  hiddenCallsOf: GatewaySwitchResponses.hiddenCallsOf,
  messageOf: (answer, model, hidden, earlier, offered) => GatewaySwitchResponses.messageOf(answer, model, hidden, earlier, offered),
  failureOf: GatewaySwitchResponses.failureOf,
  carriedOf: GatewaySwitchResponses.carriedOf,
  translator: (model, hidden, offered) => GatewaySwitchResponses.streamTranslator(model, hidden, offered),
  note: responsesNote
}

/** Anthropic Messages, for a Chat Completions agent (`GatewaySwitchAnthropic`). */
export const anthropic: SwitchWire = {
  kind: "anthropic-messages",
  agent: chatAgent,
  upstreamHeaders: GatewayAnthropic.dialect.upstreamHeaders,
  path: "/v1/messages",
  fit: GatewaySwitchAnthropic.toAnthropic,
  continued: (body, assistant, answers) => ({
    ...body,
    messages: [...(body.messages as ReadonlyArray<unknown>), ...assistant, GatewaySwitchAnthropic.answersMessage(answers)]
  }),
  tokensOf: (count, assistant) => assistant.reduce<number>((n, m) => n + GatewaySwitchAnthropic.messageTokens(count, m), 0),
  answerTokens: (count, a) => GatewaySwitchAnthropic.messageTokens(count, GatewaySwitchAnthropic.answersMessage([a])),
  hiddenCallsOf: GatewaySwitchAnthropic.hiddenCallsOf,
  messageOf: (answer, model, hidden, earlier) => GatewaySwitchAnthropic.completionOf(answer, model, hidden, earlier),
  failureOf: (answer) => isRecord(answer) && answer.type === "error" ? GatewaySwitchAnthropic.chatError(500, JSON.stringify(answer)) : null,
  carriedOf: GatewaySwitchAnthropic.carriedOf,
  translator: (model, hidden, _offered, request) => GatewaySwitchAnthropic.streamTranslator(model, hidden, request),
  note: anthropicNote
}

/** Anthropic Messages, for a Responses agent (`GatewaySwitchResponsesAnthropic`; the rest is `anthropic`'s). */
export const anthropicForResponses: SwitchWire = {
  ...anthropic,
  agent: responsesAgent,
  fit: GatewaySwitchResponsesAnthropic.toAnthropicFromResponses,
  messageOf: (answer, model, hidden, earlier, _offered, request) => GatewaySwitchResponsesAnthropic.responseOf(answer, model, hidden, earlier, request),
  translator: (model, hidden, _offered, request) => GatewaySwitchResponsesAnthropic.streamTranslator(model, hidden, request)
}

/** No hidden tools: the upstream's translator left their calls out already (`GatewaySwitchOpenAi.chained`). */
const noTools: ReadonlySet<string> = new Set()

/**
 * A Chat Completions agent (pi, opencode, aider) on an `openai-responses` instance (`GatewaySwitchOpenAi`): `responses`
 * for the upstream, `chatAgent` (with the OpenAI upstream's errors) and `GatewaySwitchAnthropic`'s reply for the agent.
 */
export const chatToResponses: SwitchWire = {
  ...responses,
  agent: { ...chatAgent, upstreamError: GatewaySwitchOpenAi.openAiError },
  fit: GatewaySwitchOpenAi.viaAnthropic(GatewaySwitchAnthropic.requestOfChat, GatewaySwitchResponses.toResponses),
  messageOf: (answer, model, hidden, earlier, offered) =>
    GatewaySwitchAnthropic.completionOf(GatewaySwitchResponses.messageOf(answer, model, hidden, earlier, offered, GatewaySwitchOpenAi.agentCallId), model),
  failureOf: GatewaySwitchOpenAi.failureIn(responses.failureOf),
  translator: (model, hidden, offered, request) =>
    GatewaySwitchOpenAi.chained(
      GatewaySwitchResponses.streamTranslator(model, hidden, offered, GatewaySwitchOpenAi.agentCallId),
      GatewaySwitchAnthropic.streamTranslator(model, noTools, request)
    )
}

/**
 * A Responses agent (Codex) on an `openai-chat` instance (`GatewaySwitchOpenAi`): `chat` for the upstream,
 * `responsesAgent` (with the OpenAI upstream's errors) and `GatewaySwitchResponsesAnthropic`'s reply for the agent.
 */
export const responsesToChat: SwitchWire = {
  ...chat,
  agent: { ...responsesAgent, upstreamError: GatewaySwitchOpenAi.openAiError },
  fit: GatewaySwitchOpenAi.viaAnthropic(GatewaySwitchResponsesAnthropic.requestOfResponses, GatewaySwitch.toChat),
  messageOf: (answer, model, hidden, earlier, _offered, request) =>
    GatewaySwitchResponsesAnthropic.responseOf(GatewaySwitch.messageOf(answer, model, hidden, earlier, GatewaySwitchOpenAi.agentCallId), model, noTools, [], request),
  failureOf: GatewaySwitchOpenAi.failureIn(chat.failureOf),
  translator: (model, hidden, _offered, request) => {
    const upstream = GatewaySwitch.streamTranslator(model, hidden, GatewaySwitchOpenAi.agentCallId)
    return GatewaySwitchOpenAi.chained({ ...upstream, assistant: () => [upstream.assistant()] }, GatewaySwitchResponsesAnthropic.streamTranslator(model, noTools, request))
  }
}

/**
 * The switch for an agent's protocol (`from`, its endpoint's dialect kind) and the routed instance's kind (`undefined`:
 * no switch: the same protocol).
 */
export const forRoute = (from: ProviderConfig.ModelApiKind, to: ProviderConfig.ModelApiKind): SwitchWire | undefined =>
  from === to
    ? undefined
    : from === "anthropic-messages"
    ? (to === "openai-chat" ? chat : responses)
    : from === "openai-chat"
    ? (to === "anthropic-messages" ? anthropic : chatToResponses)
    : (to === "anthropic-messages" ? anthropicForResponses : responsesToChat)

/** The switch wire from `/v1/messages` for an instance kind (`undefined`: no switch to it). */
export const forKind = (kind: ProviderConfig.ModelApiKind): SwitchWire | undefined => forRoute("anthropic-messages", kind)

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
