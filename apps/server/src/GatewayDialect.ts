/**
 * GatewayDialect: what one agent-facing protocol of the gateway (issue 14, docs/gateway.md) must say for `Gateway` to
 * forward and record its requests: the instance kind its models route to, its record wire, Baton's refusals in its
 * error shape, the agent's token and the upstream's credentials, how a body's history and session are read, and how a
 * reply is read from a stream or a whole body. The dialects: `GatewayAnthropic` (Claude Code), `GatewayResponses`
 * (Codex). It owns the shape only; forwarding, routing, authentication and the record are `Gateway`'s.
 */
import { type RunFailureCode, Text } from "@baton/contracts"
import type { GatewayThreads } from "@baton/orchestration"
import type { ProviderConfig } from "@baton/providers"
import type { HttpServerResponse } from "@effect/platform"
import { Deferred, type Effect, type Option, type Redacted } from "effect"

/** Why Baton itself refuses a request: each dialect answers it in its protocol's error shape and status. */
/**
 * (`forbidden`: a token Baton knows that may not do this, the read-only one; `unauthenticated`: no token or an unknown
 * one; `headers_too_large`: headers over Node's limit (431, answered by the listener, `Server.answerNodeRefusals`);
 * `expectation`: an `Expect` other than `100-continue` (417, answered by the listener as well);
 * `unsupported`: a body in a form the gateway does not read, a `Content-Encoding` (415); `internal`: Baton failed
 * unexpectedly (a defect, logged; 500); `unavailable`: the server is starting or stopping, its API not attached (503
 * with `Retry-After`, answered by the listener); `unknown_path`: no gateway endpoint at that path under `/v1/` (404).)
 */
export type Refusal =
  | "invalid"
  | "unauthenticated"
  | "forbidden"
  | "unrouted"
  | "too_large"
  | "headers_too_large"
  | "expectation"
  | "unsupported"
  | "unreachable"
  | "internal"
  | "unavailable"
  | "unknown_path"

/** How a stream's reply ended: whole (`completed`), refused by the upstream in the stream, or cut short. */
export type StreamOutcome =
  | { readonly _tag: "completed"; readonly reply: GatewayThreads.Reply }
  | { readonly _tag: "failed"; readonly code: RunFailureCode; readonly reason: string }
  | { readonly _tag: "unfinished"; readonly reason: string }

/** Reads a reply from an SSE stream's bytes as they pass. */
export interface Assembler {
  /** Feeds a chunk of the stream's bytes. */
  readonly push: (chunk: Uint8Array) => void
  /** What the bytes so far amount to. */
  readonly outcome: () => StreamOutcome
}

/**
 * What a gateway request's history is: the system prompt, the history array, the agent's session (`null`: none) and,
 * for a sub-agent, the session of the conversation it runs under (`parent`: Codex's `x-codex-turn-metadata`
 * `parent_thread_id`; absent or `null`: none).
 */
export interface History {
  readonly system: unknown
  readonly messages: ReadonlyArray<unknown>
  readonly session: string | null
  readonly parent?: string | null | undefined
}

/**
 * One agent-facing protocol: the instance kind its models must route to, its record wire, Baton's refusals in its error
 * shape, the upstream's credentials and default headers, how the history is read from a parsed body (a string: the
 * body is not one of its requests, said in the 400), and the reply of a stream or of a whole body.
 */
export interface Dialect {
  readonly kind: ProviderConfig.ModelApiKind
  readonly wire: GatewayThreads.Wire
  readonly refuse: (reason: Refusal, message: string) => HttpServerResponse.HttpServerResponse
  /**
   * The protocol's own key header (Anthropic's `x-api-key`), read before `Authorization: Bearer` and named in its
   * refusals; absent: the token comes in `Authorization: Bearer` only (OpenAI's wires).
   */
  readonly keyHeader?: string
  /** Where the agent puts its token, for the 401's message (`x-api-key (ANTHROPIC_API_KEY) or Authorization: Bearer`). */
  readonly tokenHint: string
  /** Adds the upstream's credentials (the instance's key) and the protocol's default headers to the forwarded ones. */
  readonly upstreamHeaders: (key: Option.Option<Redacted.Redacted>, headers: Record<string, string>) => void
  /** The request's history; a string says why the body is not one of the protocol's requests (Baton's 400). */
  readonly history: (body: Record<string, unknown>, headers: Readonly<Record<string, string | undefined>>) => History | string
  /** A fresh assembler for one streamed answer. */
  readonly assembler: () => Assembler
  /** The reply of a whole (non-streamed) 2xx answer's parsed body. */
  readonly replyOfBody: (body: unknown) => GatewayThreads.Reply
}

/**
 * `word` with its indefinite article by how it is spoken: "an" before a vowel (`an openai-responses`, `an
 * anthropic-messages`), "a" otherwise (`a codex`). A message read "not a openai-responses upstream".
 */
export const withArticle = (word: string): string => `${/^[aeiou]/i.test(word) ? "an" : "a"} ${word}`

/** Whether `u` is a JSON object (not an array). */
export const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

/**
 * A failed run's reason for an upstream's error answer (`status`, body `text`; `after`: what follows the status, e.g.
 * " after thread_read"), in words first: `the upstream answered HTTP 529 (overloaded_error): Overloaded; body: {…}`.
 * The error's own message (Anthropic's and OpenAI's `{error: {type or code, message}}`, an `error` string, or a
 * top-level `message` or `detail`) comes before the body (its first 300 UTF-16 code units, never half a character, for
 * what the message leaves out), so the dashboard's run header, which shows a reason's first 80 characters, says what
 * went wrong; a body without one is given as it came (clipped the same way).
 */
export const upstreamFailureReason = (status: number, text: string, after = ""): string => {
  // At most 300 UTF-16 code units, never half a surrogate pair (a reason is stored and served as JSON).
  const clip = (t: string) => t.slice(0, Text.characterWindow(t, 0, 300).end)
  const head = `the upstream answered HTTP ${status}${after}`
  const body = parseJson(text)
  const inner = isRecord(body) ? (isRecord(body.error) ? body.error : body) : null
  const said = (u: unknown): u is string => typeof u === "string" && u.trim() !== ""
  // The error object's own words first, then the body's top level (`{"error": {"code": 42}, "message": "…"}`).
  const message = inner === null
    ? undefined
    : [inner.message, inner.detail, isRecord(body) ? body.error : undefined, isRecord(body) ? body.message : undefined,
      isRecord(body) ? body.detail : undefined].find(said)
  if (message === undefined) return `${head}: ${clip(text)}`
  const kind = inner === null ? undefined : [inner.type, inner.code].find((k): k is string => said(k) && k !== "error")
  return `${head}${kind === undefined ? "" : ` (${kind})`}: ${clip(message.replace(/\s+/g, " ").trim())}; body: ${clip(text)}`
}

/** `text` parsed as JSON; `undefined` when it is not JSON. */
export const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch (_notJson) {
    return undefined
  }
}

/**
 * The output room a request to an instance with `window` tokens keeps: `min(the body's max_tokens (Anthropic, Chat),
 * max_completion_tokens (Chat: what OpenAI's newer clients send) or max_output_tokens (Responses) when positive, else
 * maxOutputTokens; maxOutputTokens; window / 4)`, at least 1.
 */
export const outputRoom = (window: number, maxOutputTokens: number, body: Record<string, unknown>): number => {
  const positive = (u: unknown): number | null => (typeof u === "number" && u > 0 ? u : null)
  const asked = positive(body.max_tokens) ?? positive(body.max_completion_tokens) ?? positive(body.max_output_tokens) ?? maxOutputTokens
  return Math.max(1, Math.min(asked, maxOutputTokens, Math.floor(window / 4)))
}

/**
 * The most input tokens (Baton's count) a request the gateway builds may carry on an instance with `window` tokens: the
 * window less the output room (`outputRoom`) and a 5% margin for the tokenizers' difference (docs/gateway.md). The
 * provider switch fits under it; hidden `thread_read` answers stay under it (`fitAnswers`).
 */
export const fitLimit = (window: number, maxOutputTokens: number, body: Record<string, unknown>): number =>
  window - outputRoom(window, maxOutputTokens, body) - Math.ceil(window * 0.05)

/**
 * The gateway's answers to hidden `thread_read` calls that keep a request under `limit`, given the `used` tokens it
 * already carries: each answer (counted by `tokensOf`, as it will go out) that would go over is replaced by an error
 * answer saying so (the model may ask for a smaller `limit`), never sent. Returns the answers and the tokens used after.
 */
export const fitAnswers = <A extends { readonly output: string; readonly isError: boolean }>(
  answers: ReadonlyArray<A>,
  used: number,
  limit: number,
  tokensOf: (answer: A) => number
): { readonly answers: ReadonlyArray<A>; readonly used: number } => {
  let total = used
  const out = answers.map((a) => {
    const tokens = tokensOf(a)
    if (total + tokens <= limit) {
      total += tokens
      return a
    }
    const refused: A = {
      ...a,
      output: `thread_read: not read: its ${a.output.length} characters do not fit in this model's context window (room for about ${Math.max(0, limit - total)} tokens); ask for a smaller limit, or answer without it`,
      isError: true
    }
    total += tokensOf(refused)
    return refused
  })
  return { answers: out, used: total }
}

/** How a gateway answer that did not end is recorded: its run's status, failure code and reason. */
export interface Unended {
  readonly status: "interrupted" | "failed"
  readonly code: "interrupted_by_user" | "process_stopped" | "provider_unavailable"
  readonly reason: string
}

/**
 * What ends a request's run when its handler is interrupted before it has answered (`record`: the agent's hang-up or
 * the shutdown's cut, `hungUp`, once the request's record has started; `Effect.void` before), set by the handler as
 * it goes: `Gateway` runs it when its handler is interrupted (a whole answer still on its way, a switched request
 * before the upstream's head).
 */
export interface HangUp {
  record: Effect.Effect<void>
}

/** The reason of a run whose answer the server's shutdown cut off (`hungUp`, `brokeOff`). */
const stoppedReason = "the server stopped before the answer ended (its shutdown closes the connections still open after limits.shutdownTimeoutMs)"

/**
 * Whether the shutdown's deadline has come (`cutting`, `ServerShutdown.cutting`: completed as the listener closes the
 * connections still open, `limits.shutdownTimeoutMs` after the shutdown began): from then on, an answer that stops
 * before its end was stopped by the shutdown (the close cuts the agent's answer and, with it, the upstream's stream).
 * During the grace period before it, an answer that stops was stopped by its agent or its upstream, as at any time
 * (before branch `b44gw`: by the shutdown from its start, the signal the live event streams end on, so an agent that
 * hung up during the grace period was recorded `process_stopped`).
 */
export const stoppedOf = (cutting: Deferred.Deferred<void>): Effect.Effect<boolean> => Deferred.isDone(cutting)

/**
 * An answer the agent stopped reading before its end: the agent hung up (`interrupted_by_user`), or, the shutdown's
 * deadline come (`stopped`, `stoppedOf`), its close of the connection cut it (`process_stopped`, as the run driver
 * records its turns stopped by a shutdown). Before branch `b43gw`: always the agent's hang-up.
 */
export const hungUp = (stopped: boolean): Unended =>
  stopped
    ? { status: "interrupted", code: "process_stopped", reason: stoppedReason }
    : { status: "interrupted", code: "interrupted_by_user", reason: "the agent closed the connection before the answer ended" }

/**
 * An upstream stream that broke off (`message`, the client's error): `provider_unavailable`, or, the shutdown's
 * deadline come (`stopped`, `stoppedOf`), `process_stopped` with the break named (the shutdown's close of the connections cuts the upstream's
 * stream too). Before branch `b43gw`: a run cut by the shutdown said the upstream had failed.
 */
export const brokeOff = (stopped: boolean, message: string): Unended =>
  stopped
    ? { status: "interrupted", code: "process_stopped", reason: `${stoppedReason}; the upstream's stream broke off: ${message}` }
    : { status: "failed", code: "provider_unavailable", reason: `the upstream's stream broke off: ${message}` }
