/**
 * GatewaySwitch: a provider switch on the gateway's Anthropic Messages endpoint (issue 14 items 4 and 5,
 * docs/gateway.md "Routing and switching"): the agent (Claude Code) speaks Anthropic Messages, and its model routes to
 * an `openai-chat` instance (an OpenAI-compatible upstream). No I/O: `GatewaySwitched` does the HTTP and the record.
 *
 * - **The request** (`toChat`): the agent's history converted to Chat Completions: `system` (string or text blocks) the
 *   first `system` message; a user message's `tool_result` blocks `tool` messages (rendered as the Chat Completions
 *   adapter renders tool results, `OpenAiChat.dialect.toolResults`: a failed result's output starts with `Error: `),
 *   then its other blocks one `user` message; an assistant message's text its `content` and its `tool_use` blocks
 *   `tool_calls` (arguments the input's JSON); `thinking` blocks left out (another provider cannot read them); a
 *   mid-conversation `system` message a `system` message; images and documents as Chat Completions parts
 *   (`GatewaySwitchMedia.chatPartsOf`: an image an `image_url` part, a base64 source as a `data:` URL; a PDF a `file`
 *   part, `file_data` a `data:` URL; a plain-text document text; a URL document a line naming it), the user message's
 *   content then an array of parts (text alone stays one string); a `tool_result`'s images and PDFs, which a `tool`
 *   message cannot carry (text only), a line in its output (`toolOutput`) and the parts themselves in the `user`
 *   message right after the tool messages, after a line naming the call (valid Chat Completions: a user message may
 *   follow tool messages), a stubbed result's left out with its content; server-tool blocks a one-line `[type]` text.
 *   Tools (those with an `input_schema`) as the adapter encodes them (`OpenAiChat.encodeTool`),
 *   `tool_choice` mapped, `max_tokens` the output room below, `stream` with `stream_options.include_usage`. The
 *   request's `model` goes out unchanged, as on every gateway route.
 * - **The fit** (`fitMessages`, generic over the target's message form: every switch direction fits with it, the
 *   Anthropic target through `GatewaySwitchAnthropic.fitConverted`) under the instance's `contextWindow`, in Baton
 *   tokens (o200k, counted on each converted message's JSON by `GatewayMedia.jsonTokens`: an inline image or PDF as
 *   what the provider bills, not its base64; so over rather than under the upstream's count): the output room is `min(max_tokens, the instance's
 *   maxOutputTokens, window / 4)` and a margin of 5% of the window is kept for the tokenizers' difference. When the
 *   request is over: (1) stubs, oldest tool result first, each result's content replaced by
 *   `ToolResultOffload.stubText` with the ref `tool:<tool_use id>` (which `thread_read` reads back from the thread);
 *   (2) then deferral: the oldest units (an assistant's calls with the results answering them, or one message) left
 *   out whole, a pointer (`Render.renderDeferralPointer`: how many items, their refs) put first; (3) a summary before
 *   the pointer: the best of the thread's `/offload` summaries given (`FitInput.summaries`, already written: no model
 *   call here) that stands for no more than the messages left out and fits with them (more units left out to make room
 *   for it, never the pinned turn), else the pointer alone. The agent's newest message (and
 *   the assistant calls it answers) is pinned: it goes out unchanged. If the request still does not fit (the pinned
 *   part, system and tools alone are over), `overflow`: the gateway answers Anthropic's own overflow error so the
 *   agent compacts.
 * - **The reply** back in Anthropic's protocol: `messageOf` for a whole answer, `streamTranslator` for the SSE chunks
 *   as they arrive (message_start, content_block_start/delta/stop per text and tool_use block, message_delta with
 *   stop_reason and usage, message_stop), usage with `prompt_tokens` (which include `cached_tokens`) as uncached input
 *   plus cache reads; calls of hidden tools (`thread_read`, answered by the gateway) left out, a stream's message left
 *   open after a hop whose only calls were hidden ones (the continuation's blocks join it); an error body as Anthropic's error shape (`anthropicError`), a context overflow as the
 *   "prompt is too long" 400.
 */
import { ToolResultOffload } from "@baton/context"
import { OpenAiChat, type ProviderAdapter, Sse } from "@baton/providers"
import * as Crypto from "node:crypto"
import { fitLimit, isRecord, outputRoom, parseJson } from "./GatewayDialect.js"
import * as GatewayChat from "./GatewayChat.js"
import * as GatewayMedia from "./GatewayMedia.js"
import * as GatewaySwitchMedia from "./GatewaySwitchMedia.js"

type Json = Record<string, unknown>

/** A Chat Completions message (what `messages` holds). */
export type ChatMessage = Json

const blocksOf = (content: unknown): ReadonlyArray<unknown> =>
  typeof content === "string" ? [{ type: "text", text: content }] : Array.isArray(content) ? content : []

/** A block's text: its `text`, or a one-line `[type]` for what another provider cannot read. */
const blockText = (b: unknown): string => isRecord(b) && typeof b.text === "string" ? b.text : `[${isRecord(b) ? String(b.type) : "block"}]`

/** A `tool_result` block's content as text (text blocks joined by a newline, others `[type]`). */
export const resultText = (block: Json): string =>
  typeof block.content === "string" ? block.content : blocksOf(block.content).map(blockText).join("\n")

/** The system prompt as text (a string, or text blocks joined by a blank line); `""` when none. */
export const systemText = (system: unknown): string =>
  typeof system === "string" ? system : Array.isArray(system) ? system.map(blockText).join("\n\n") : ""

/**
 * One Anthropic message as Chat Completions messages (see the module docblock); `stubbed` names the `tool_use` ids whose
 * results go out as stubs (`calls` gives their tool and input for the stub's line).
 */
export const chatMessagesOf = (
  message: Json,
  stubbed: ReadonlySet<string> = new Set(),
  calls: ReadonlyMap<string, { readonly name: string; readonly input: unknown }> = new Map(),
  media = true
): ReadonlyArray<ChatMessage> => {
  const blocks = blocksOf(message.content)
  if (message.role === "assistant") {
    const text = blocks.filter((b) => !(isRecord(b) && (b.type === "tool_use" || b.type === "thinking" || b.type === "redacted_thinking"))).map(blockText).join("\n\n")
    const toolCalls = blocks.flatMap((b) =>
      isRecord(b) && b.type === "tool_use"
        ? [{ id: String(b.id), type: "function", function: { name: String(b.name), arguments: JSON.stringify(b.input ?? {}) } }]
        : []
    )
    // `null` content only beside calls (an assistant message of thinking alone is an empty text: OpenAI refuses neither).
    return [{ role: "assistant", content: text === "" && toolCalls.length > 0 ? null : text, ...(toolCalls.length === 0 ? {} : { tool_calls: toolCalls }) }]
  }
  if (message.role === "system") return [{ role: "system", content: blocks.map(blockText).join("\n\n") }]
  const results = blocks.filter((b): b is Json => isRecord(b) && b.type === "tool_result")
  const rest = blocks.filter((b) => !(isRecord(b) && b.type === "tool_result"))
  const tools = results.length === 0 ? [] : parseJson(`[${
    OpenAiChat.dialect.toolResults(results.map((r) => {
      const id = String(r.tool_use_id)
      const call = calls.get(id)
      const output = stubbed.has(id)
        ? ToolResultOffload.stubText([{ toolName: call?.name ?? "tool", argumentsText: JSON.stringify(call?.input ?? {}), releasedChars: resultText(r).length }], `tool:${id}`)
        : toolOutput(r, media)
      return { toolCallId: id, output, isError: r.is_error === true }
    }), [])
  }]`) as ReadonlyArray<ChatMessage>
  // A result's images and PDFs cannot go in its `tool` message (text only): they follow in the user message, each
  // result's after a line naming its call. A stubbed result's are left out with the rest of its content.
  const moved = results.flatMap((r) => {
    const id = String(r.tool_use_id)
    const attached = stubbed.has(id) || !media ? [] : blocksOf(r.content).filter(GatewaySwitchMedia.isBinaryMedia)
    return attached.length === 0 ? [] : [{ type: "text", text: `Attached from the tool result ${id}:` }, ...attached.flatMap((b) => GatewaySwitchMedia.chatPartsOf(b) ?? [])]
  })
  const parts = [...moved, ...rest.flatMap((b) => GatewaySwitchMedia.chatPartsOf(b, media) ?? [{ type: "text", text: blockText(b) }])]
  // Text alone stays one string (as before media was converted); an image or a file makes the content an array of parts.
  const content = parts.some((p) => p.type !== "text") ? parts : parts.map((p) => String(p.text)).join("\n\n")
  return [...tools, ...(parts.length === 0 ? [] : [{ role: "user", content }])]
}

/**
 * A `tool_result` block's output as a Chat Completions `tool` message carries it (text only): its text blocks and
 * plain-text documents as text, each image or PDF a line saying it follows in the user message after the tool results
 * (`chatMessagesOf` puts it there; with `media` false, a line saying it was not sent), other blocks `[type]`; joined
 * by a newline.
 */
export const toolOutput = (block: Json, media = true): string =>
  typeof block.content === "string" ? block.content : blocksOf(block.content).map((b) => {
    const parts = GatewaySwitchMedia.chatPartsOf(b, media)
    if (parts === null) return blockText(b)
    return parts.map((p) => p.type === "text" ? String(p.text) : `[${isRecord(b) ? String(b.type) : "media"}: attached in the user message after the tool results]`).join("\n")
  }).join("\n")

/** An Anthropic tool as a Chat Completions function (as the Chat Completions adapter encodes tools); `null` for server tools. */
const toolOf = (t: unknown): Json | null =>
  isRecord(t) && isRecord(t.input_schema) && typeof t.name === "string"
    ? parseJson(OpenAiChat.encodeTool({ name: t.name, description: typeof t.description === "string" ? t.description : "", inputSchema: t.input_schema })) as Json
    : null

/** Anthropic's `tool_choice` in Chat Completions (`undefined`: none sent). */
const toolChoiceOf = (c: unknown): unknown => {
  if (!isRecord(c)) return undefined
  switch (c.type) {
    case "auto":
      return "auto"
    case "any":
      return "required"
    case "none":
      return "none"
    case "tool":
      return { type: "function", function: { name: String(c.name) } }
    default:
      return undefined
  }
}

/** What a fit needs besides the body: the window, the instance's output limit, the token counter and the pointer's words. */
export interface FitInput {
  /** The agent's parsed Anthropic Messages body (not modified). */
  readonly body: Json
  /** The target instance's context window (tokens). */
  readonly windowTokens: number
  /** The target instance's `maxOutputTokens`. */
  readonly maxOutputTokens: number
  /** Tokens of a text (Baton's counter). */
  readonly count: (text: string) => number
  /**
   * The deferral pointer for the agent's first `n` messages left out (`Render.renderDeferralPointer` over their items
   * in the thread); called once the cut is chosen.
   */
  readonly pointer: (leftOut: number) => string
  /** Tools Baton offers beside the agent's when the agent sends tools (`thread_read`); none by default. */
  readonly offered?: ReadonlyArray<ProviderAdapter.ToolDefinition> | undefined
  /**
   * The tokens of one converted message as it goes out, and of the tools: by default its Chat Completions JSON
   * (`count` of the JSON, plus 4 for a message's framing). A switch to another wire (`GatewaySwitchResponses`) fits the
   * same Chat messages, each counted as what it becomes there.
   */
  readonly sizes?: {
    readonly message: (m: ChatMessage) => number
    readonly tools: (tools: ReadonlyArray<Json>) => number
  } | undefined
  /**
   * Summaries the fit's third step may put where the pointer goes, best first (the thread's `/offload` summaries,
   * newest first); none by default.
   */
  readonly summaries?: ReadonlyArray<FitSummary> | undefined
  /**
   * Whether the target's model reads inline images and files (`ModelProviderConfig.media`; default true): `false`
   * sends each as a one-line text (a switch to an OpenAI instance; the switch to Anthropic sends them as they are).
   */
  readonly media?: boolean | undefined
}

/**
 * A summary of the conversation's start (an `/offload` summary item of the thread): `covers` the agent's first messages
 * it stands for (every item of theirs at or before its cut), `text` the block that goes before the pointer (the summary
 * rendered with its ref).
 */
export interface FitSummary {
  readonly covers: number
  readonly text: string
}

/** How a request was fitted: its tokens before and after, the limit, the stubbed ids and the messages left out. */
export interface Fit {
  readonly tokensBefore: number
  readonly tokensAfter: number
  /** The most tokens the request may hold: the window less the output room and the margin. */
  readonly limit: number
  readonly outputTokens: number
  /** `tool_use` ids whose results went out as stubs. */
  readonly stubbed: ReadonlyArray<string>
  /** The agent's first messages left out (0: none). */
  readonly leftOut: number
  /** The messages the summary sent before the pointer stands for (`FitSummary.covers`); 0: no summary sent. */
  readonly summarised: number
}

/** The converted request, or an overflow Baton cannot fit (the agent's own overflow error is answered). */
export type FitResult =
  | { readonly _tag: "fits"; readonly body: Json; readonly fit: Fit }
  | { readonly _tag: "overflow"; readonly tokens: number; readonly limit: number }

/** Tokens of one Chat Completions message, with a few for its framing. */
const messageTokens = (count: (text: string) => number, m: ChatMessage) => GatewayMedia.jsonTokens(count, m) + 4

/** The `tool_use` calls of Anthropic messages by id: their tool and input (a stub's line names them). */
export const callsOf = (messages: ReadonlyArray<Json>): ReadonlyMap<string, { readonly name: string; readonly input: unknown }> => {
  const calls = new Map<string, { name: string; input: unknown }>()
  for (const m of messages) {
    for (const b of blocksOf(m.content)) if (isRecord(b) && b.type === "tool_use") calls.set(String(b.id), { name: String(b.name), input: b.input })
  }
  return calls
}

/**
 * How `fitMessages` builds a request in the target's form: each Anthropic message converted (the results whose ids are
 * in `stubbed` as stubs), a converted message's tokens, the pointer's message (its text: the pointer, or a summary and
 * the pointer), and the tokens that always go out (system prompt, tools, framing).
 */
export interface FitPlan<M> {
  readonly convert: (message: Json, stubbed: ReadonlySet<string>, calls: ReadonlyMap<string, { readonly name: string; readonly input: unknown }>) => ReadonlyArray<M>
  readonly size: (m: M) => number
  readonly note: (text: string) => M
  readonly fixed: number
}

/** The fitted messages (the pointer first when one went out, then the kept messages converted), or an overflow. */
export type FittedMessages<M> =
  | { readonly _tag: "fits"; readonly messages: ReadonlyArray<M>; readonly fit: Fit }
  | { readonly _tag: "overflow"; readonly tokens: number; readonly limit: number }

/**
 * The fit of Anthropic `messages` (see the module docblock) under `limit` tokens, whatever the target's form (`plan`):
 * stubs (oldest tool result first, never the pinned turn), then deferral with a pointer (`input.pointer`), then a summary
 * before it (`input.summaries`); `overflow` when the pinned part, system and tools alone are over. `Fit.leftOut` and
 * `Fit.summarised` count `messages` here. Shared by every switch direction (Chat Completions, Responses, Anthropic).
 */
export const fitMessages = <M>(
  input: Pick<FitInput, "pointer" | "summaries">,
  messages: ReadonlyArray<Json>,
  limit: number,
  outputTokens: number,
  plan: FitPlan<M>
): FittedMessages<M> => {
  const { fixed, size } = plan
  const calls = callsOf(messages)
  // Units: an assistant message with tool_use calls and the user message answering them; every other message alone.
  const units: Array<Array<number>> = []
  messages.forEach((m, i) => {
    const previous = messages[i - 1]
    const answers = m.role === "user" && blocksOf(m.content).some((b) => isRecord(b) && b.type === "tool_result")
    if (answers && previous !== undefined && previous.role === "assistant" && units.length > 0 && units.at(-1)!.includes(i - 1)) units.at(-1)!.push(i)
    else units.push([i])
  })
  // The agent's newest turn is pinned: from the unit of its newest user message (its prompt or its tool results) on,
  // since an agent may add messages of its own after it (Claude Code: a `system` message).
  const newestUser = messages.map((m) => m.role).lastIndexOf("user")
  const pinnedFrom = units.length === 0 ? 0 : (units.find((u) => u.includes(newestUser)) ?? units.at(-1)!)[0]!
  const stubbed = new Set<string>()
  const converted = (i: number) => plan.convert(messages[i]!, stubbed, calls)
  const tokensOf = messages.map((_, i) => converted(i).reduce((n, c) => n + size(c), 0))
  const total = () => fixed + tokensOf.reduce((n, t) => n + t, 0)
  const tokensBefore = total()

  // 1. Stubs, oldest tool result first (never in the pinned unit), while over the limit.
  const results: Array<{ index: number; id: string }> = []
  messages.forEach((m, i) => {
    if (i >= pinnedFrom || m.role !== "user") return
    for (const b of blocksOf(m.content)) if (isRecord(b) && b.type === "tool_result") results.push({ index: i, id: String(b.tool_use_id) })
  })
  for (const r of results) {
    if (total() <= limit) break
    const before = tokensOf[r.index]!
    stubbed.add(r.id)
    const after = converted(r.index).reduce((n, c) => n + size(c), 0)
    if (after >= before) stubbed.delete(r.id)
    else tokensOf[r.index] = after
  }

  // 2. Deferral: the oldest units left out whole, a pointer first. 3. The pointer preceded by a summary of the
  // conversation's start when one fits (see `deferral`).
  let leftOut = 0
  let summarised = 0
  let pointer: M | null = null
  if (total() > limit) {
    /** Where deferral cuts with a first message of `extra` tokens: the first unit boundary from which the rest fits. */
    const cutFor = (extra: number) => {
      let kept = total()
      let u = 0
      while (units[u] !== undefined && units[u]![0]! < pinnedFrom && kept + extra > limit) {
        for (const i of units[u]!) kept -= tokensOf[i]!
        u++
      }
      return units[u]?.[0] ?? pinnedFrom
    }
    const keptFrom = (from: number) => tokensOf.slice(from).reduce((n, t) => n + t, 0)
    // A pointer's size hardly changes with the count: estimated with every unpinned message, then checked.
    for (const s of input.summaries ?? []) {
      if (s.covers <= 0 || s.covers > pinnedFrom) continue
      const at = cutFor(size(plan.note(`${s.text}\n\n${input.pointer(pinnedFrom)}`)))
      // A summary of messages that would go out verbatim is not used (an earlier summary of the chain may be).
      if (s.covers > at) continue
      const candidate = plan.note(`${s.text}\n\n${input.pointer(at)}`)
      if (fixed + size(candidate) + keptFrom(at) > limit) continue
      leftOut = at
      summarised = s.covers
      pointer = candidate
      break
    }
    if (pointer === null) {
      leftOut = cutFor(size(plan.note(input.pointer(pinnedFrom))))
      pointer = plan.note(input.pointer(leftOut))
    }
  }

  const out: Array<M> = pointer === null ? [] : [pointer]
  for (let i = leftOut; i < messages.length; i++) out.push(...converted(i))
  const tokensAfter = fixed + (pointer === null ? 0 : size(pointer)) + tokensOf.slice(leftOut).reduce((n, t) => n + t, 0)
  if (tokensAfter > limit) return { _tag: "overflow", tokens: tokensBefore, limit }
  return { _tag: "fits", messages: out, fit: { tokensBefore, tokensAfter, limit, outputTokens, stubbed: [...stubbed], leftOut, summarised } }
}

/**
 * The agent's Anthropic request as a Chat Completions request fitted under the window (see the module docblock):
 * stubs first, then deferral with a pointer; `overflow` when the pinned part alone is over.
 */
export const toChat = (input: FitInput): FitResult => {
  const { body, count } = input
  const size = input.sizes?.message ?? ((m: ChatMessage) => messageTokens(count, m))
  const messages = (Array.isArray(body.messages) ? body.messages : []).filter(isRecord)
  const outputTokens = outputRoom(input.windowTokens, input.maxOutputTokens, body)
  const limit = fitLimit(input.windowTokens, input.maxOutputTokens, body)
  const agentTools = (Array.isArray(body.tools) ? body.tools : []).map(toolOf).filter((t): t is Json => t !== null)
  const tools = agentTools.length === 0 ? agentTools : [...agentTools, ...(input.offered ?? []).map((t) => parseJson(OpenAiChat.encodeTool(t)) as Json)]
  const system = systemText(body.system)
  const head: Array<ChatMessage> = system === "" ? [] : [{ role: "system", content: system }]
  const fixed = head.reduce((n, m) => n + size(m), 0) + (tools.length === 0 ? 0 : input.sizes?.tools(tools) ?? GatewayMedia.jsonTokens(count, tools)) + 16
  const fitted = fitMessages(input, messages, limit, outputTokens, {
    convert: (m, stubbed, calls) => chatMessagesOf(m, stubbed, calls, input.media !== false),
    size,
    note: (text): ChatMessage => ({ role: "user", content: text }),
    fixed
  })
  if (fitted._tag === "overflow") return fitted
  const choice = toolChoiceOf(body.tool_choice)
  const chat: Json = {
    model: body.model,
    messages: [...head, ...fitted.messages],
    max_tokens: outputTokens,
    ...(tools.length === 0 ? {} : { tools }),
    ...(choice === undefined || tools.length === 0 ? {} : { tool_choice: choice }),
    ...(isRecord(body.tool_choice) && body.tool_choice.disable_parallel_tool_use === true && tools.length > 0 ? { parallel_tool_calls: false } : {}),
    ...(typeof body.temperature === "number" ? { temperature: body.temperature } : {}),
    ...(typeof body.top_p === "number" ? { top_p: body.top_p } : {}),
    ...(Array.isArray(body.stop_sequences) && body.stop_sequences.length > 0 ? { stop: body.stop_sequences } : {}),
    ...(body.stream === true ? { stream: true, stream_options: { include_usage: true } } : {})
  }
  return { _tag: "fits", body: chat, fit: fitted.fit }
}

/** The Anthropic message of Baton's "prompt is too long" overflow (Anthropic's own words, which Claude Code compacts on). */
export const overflowMessage = (tokens: number, maximum: number) => `prompt is too long: ${tokens} tokens > ${maximum} maximum`

/** An Anthropic error body. */
export const errorBody = (type: string, message: string) => ({ type: "error", error: { type, message } })

/** Anthropic's error type for an HTTP status. */
export const errorTypeOf = (status: number): string =>
  status === 400
    ? "invalid_request_error"
    : status === 401
    ? "authentication_error"
    : status === 403
    ? "permission_error"
    : status === 404
    ? "not_found_error"
    : status === 413
    ? "request_too_large"
    : status === 429
    ? "rate_limit_error"
    : status === 529 || status === 503
    ? "overloaded_error"
    : status >= 500
    ? "api_error"
    : "invalid_request_error"

/**
 * An upstream's error (its status and body, OpenAI's `{"error":{"message",…}}` or any text) in Anthropic's shape and
 * status; a context overflow (`context_length_exceeded`, "maximum context length is M tokens … N tokens", llama.cpp's
 * `exceed_context_size_error`) as the "prompt is too long: N tokens > M maximum" 400, so the agent compacts.
 */
export const anthropicError = (status: number, text: string): { readonly status: number; readonly body: Json } => {
  const parsed = parseJson(text)
  const error = isRecord(parsed) ? parsed.error : undefined
  const message = isRecord(error) && typeof error.message === "string" ? error.message : typeof error === "string" ? error : text.slice(0, 2_000)
  const codes = isRecord(error) ? [error.code, error.type].map(String) : []
  const overflow = codes.includes("context_length_exceeded") || codes.includes("exceed_context_size_error") || /maximum context length|context length|context window/i.test(message)
  if (overflow) {
    const numbers = isRecord(error) && typeof error.n_prompt_tokens === "number" && typeof error.n_ctx === "number"
      ? [error.n_prompt_tokens, error.n_ctx]
      : (() => {
        const max = /maximum context length is (\d+)/i.exec(message)
        const got = /(\d+) (?:input )?tokens/i.exec(message.replace(/maximum context length is \d+ tokens?/i, ""))
        return max !== null && got !== null ? [Number(got[1]), Number(max[1])] : null
      })()
    return {
      status: 400,
      body: errorBody("invalid_request_error", numbers === null ? `prompt is too long: ${message}` : overflowMessage(numbers[0]!, numbers[1]!))
    }
  }
  return { status, body: errorBody(errorTypeOf(status), message === "" ? `the upstream answered HTTP ${status}` : message) }
}

/**
 * A tool call id an Anthropic upstream accepts (`^[a-zA-Z0-9_-]+$`): `id` itself when it already is one; else its
 * characters outside that set replaced by `_`, then `_` and the first 8 hex digits of the SHA-256 of `id`, so two ids
 * that differ only in such characters (`a.b`, `a:b`) stay two ids (before, both became `a_b`, and a result or stub
 * named the wrong call). Deterministic: the same id gives the same answer on every request (the cache prefix holds).
 */
export const toolUseId = (id: string) =>
  /^[A-Za-z0-9_-]+$/.test(id) ? id : `${id.replace(/[^A-Za-z0-9_-]/g, "_")}_${Crypto.createHash("sha256").update(id).digest("hex").slice(0, 8)}`

/**
 * A Chat Completions answer's call id: its `id`, or for a call without one (missing or empty: some OpenAI-compatible
 * servers) a fresh `call_` and 24 random hex digits, so no two calls share an id, in one answer or across answers
 * (before, every such call was `call_<index>` streamed or `toolUseId("")` whole, and the agent could not tell their
 * results apart).
 */
export const chatCallId = (id: unknown): string =>
  id !== undefined && id !== null && String(id) !== "" ? String(id) : `call_${Crypto.randomBytes(12).toString("hex")}`

/**
 * A function that returns each call id it is given once unchanged and, given one it returned before, that id with
 * `_2`, `_3`, … appended (a free one): the ids of one answer's calls for the agent. Proxies in front of Gemini give
 * parallel calls one shared id, and an agent cannot answer two calls of one id apart (Anthropic refuses a message
 * whose `tool_use` ids repeat); before branch `b46gw` such calls reached the agent with one id.
 */
export const distinctIds = (): (id: string) => string => {
  const taken = new Set<string>()
  return (id) => {
    let out = id
    for (let n = 2; taken.has(out); n++) out = `${id}_${n}`
    taken.add(out)
    return out
  }
}

/**
 * Anthropic's stop reason for a Chat Completions `finish_reason` and whether the agent gets a call (`visibleCalls`):
 * `length` -> `max_tokens`, `content_filter` -> `refusal`, else `tool_use` when a call is visible and `end_turn` when
 * none is (only hidden `thread_read` calls, or none). A visible call decides, not `finish_reason`: OpenAI answers a
 * named `tool_choice` with `finish_reason: "stop"` beside its call (so do vLLM and older Ollama), and Anthropic's
 * contract is `tool_use` whenever the turn ends with a call the client must run (an agent looping on
 * `stop_reason === "tool_use"` stopped with the call unrun).
 */
export const stopReasonOf = (finish: unknown, visibleCalls: boolean): string =>
  finish === "length" ? "max_tokens" : finish === "content_filter" ? "refusal" : visibleCalls ? "tool_use" : "end_turn"

/** Anthropic's usage of a Chat Completions `usage` (`prompt_tokens` include `prompt_tokens_details.cached_tokens`). */
export const usageOf = (usage: unknown) => {
  const u = isRecord(usage) ? usage : {}
  const prompt = typeof u.prompt_tokens === "number" ? u.prompt_tokens : 0
  const details = isRecord(u.prompt_tokens_details) ? u.prompt_tokens_details : {}
  const cached = typeof details.cached_tokens === "number" ? Math.min(prompt, details.cached_tokens) : 0
  return {
    input_tokens: prompt - cached,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: cached,
    output_tokens: typeof u.completion_tokens === "number" ? u.completion_tokens : 0
  }
}

/**
 * What one Chat Completions request carried, in tokens (`prompt_tokens`, cached ones included), from its `usage`;
 * `null` without one. The `carriedTokens` of a run whose answer took hidden `thread_read` rounds: the last request's.
 */
export const carriedOf = (usage: unknown): number | null =>
  isRecord(usage) && typeof usage.prompt_tokens === "number" ? usage.prompt_tokens : null

/** A message id in Anthropic's form for a Chat Completions answer id. */
const messageIdOf = (id: unknown) => `msg_${typeof id === "string" && id !== "" ? id.replace(/[^A-Za-z0-9_-]/g, "_") : `baton_${Date.now().toString(36)}`}`

/**
 * A whole Chat Completions answer as an Anthropic Messages answer (`model`: the agent's): calls of `hidden` tools left
 * out, the usage of `earlier` hops (hidden rounds, Chat Completions `usage` objects) added to its own; `callId` writes
 * a call's id for the agent (`toolUseId`, Anthropic's form; an OpenAI agent's switch keeps the upstream's).
 */
export const messageOf = (
  answer: unknown,
  model: string,
  hidden: ReadonlySet<string> = new Set(),
  earlier: ReadonlyArray<unknown> = [],
  callId: (id: string) => string = toolUseId
): Json => {
  const a = isRecord(answer) ? answer : {}
  const choice = Array.isArray(a.choices) && isRecord(a.choices[0]) ? a.choices[0] : {}
  const message = isRecord(choice.message) ? choice.message : {}
  const content: Array<Json> = []
  const distinct = distinctIds()
  if (typeof message.content === "string" && message.content !== "") content.push({ type: "text", text: message.content })
  for (const c of Array.isArray(message.tool_calls) ? message.tool_calls : []) {
    if (!isRecord(c)) continue
    const fn = isRecord(c.function) ? c.function : {}
    if (hidden.has(String(fn.name ?? ""))) continue
    const args = typeof fn.arguments === "string" ? parseJson(fn.arguments) : fn.arguments
    content.push({ type: "tool_use", id: distinct(callId(chatCallId(c.id))), name: String(fn.name ?? ""), input: isRecord(args) ? args : {} })
  }
  return {
    id: messageIdOf(a.id),
    type: "message",
    role: "assistant",
    model,
    content,
    stop_reason: stopReasonOf(choice.finish_reason, content.some((b) => b.type === "tool_use")),
    stop_sequence: null,
    usage: [...earlier, a.usage].map(usageOf).reduce((x, y) => ({
      input_tokens: x.input_tokens + y.input_tokens,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: x.cache_read_input_tokens + y.cache_read_input_tokens,
      output_tokens: x.output_tokens + y.output_tokens
    }))
  }
}

/** One Anthropic SSE event as Anthropic sends it (`event:` and `data:` lines). */
const event = (data: Json) => `event: ${String(data.type)}\ndata: ${JSON.stringify(data)}\n\n`

/** The calls of a whole Chat Completions answer when every one is a call of a `hidden` tool; `null` otherwise. */
export const hiddenCallsOf = (answer: unknown, hidden: ReadonlySet<string>): { readonly message: ChatMessage; readonly calls: ReadonlyArray<HiddenCall> } | null => {
  const a = isRecord(answer) ? answer : {}
  const choice = Array.isArray(a.choices) && isRecord(a.choices[0]) ? a.choices[0] : {}
  const message = isRecord(choice.message) ? choice.message : {}
  const calls = (Array.isArray(message.tool_calls) ? message.tool_calls : []).filter(isRecord)
  if (calls.length === 0 || !calls.every((c) => isRecord(c.function) && hidden.has(String(c.function.name)))) return null
  // Each call with an id of its own (the upstream's; a fresh one for none, a suffix for a repeated one), in the
  // continuation's assistant message and on the gateway's answers alike: before branch `b46gw` a call without an id
  // was answered with `tool_call_id: ""`, and two calls of one id with one id twice.
  const distinct = distinctIds()
  const ids = calls.map((c) => distinct(chatCallId(c.id)))
  return {
    message: { role: "assistant", content: typeof message.content === "string" && message.content !== "" ? message.content : null, tool_calls: calls.map((c, i) => ({ ...c, id: ids[i] })) },
    calls: calls.map((c, i) => ({ id: ids[i]!, arguments: String((c.function as Json).arguments ?? "{}") }))
  }
}

/** A whole Anthropic message (`messageOf`) as the SSE events of its stream. */
export const eventsOf = (message: Json): string => {
  const content = Array.isArray(message.content) ? message.content.filter(isRecord) : []
  return [
    event({ type: "message_start", message: { ...message, content: [], stop_reason: null, usage: { input_tokens: 0, output_tokens: 0 } } }),
    ...content.flatMap((b, index) =>
      b.type === "tool_use"
        ? [
          event({ type: "content_block_start", index, content_block: { ...b, input: {} } }),
          event({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: JSON.stringify(b.input ?? {}) } }),
          event({ type: "content_block_stop", index })
        ]
        : [
          event({ type: "content_block_start", index, content_block: { type: "text", text: "" } }),
          event({ type: "content_block_delta", index, delta: { type: "text_delta", text: String(b.text ?? "") } }),
          event({ type: "content_block_stop", index })
        ]
    ),
    event({ type: "message_delta", delta: { stop_reason: message.stop_reason, stop_sequence: null }, usage: message.usage }),
    event({ type: "message_stop" })
  ].join("")
}

/** A call of a hidden tool (`thread_read`) the upstream made: its id and arguments (JSON text). */
export interface HiddenCall {
  readonly id: string
  readonly arguments: string
}

/** Translates a Chat Completions stream into Anthropic Messages SSE as its chunks arrive. */
export interface StreamTranslator {
  /** Feeds a chunk of the upstream's bytes; the Anthropic events they make (`""`: none yet). */
  readonly push: (chunk: Uint8Array) => string
  /**
   * The stream has ended: what is left (the message's end, or an `error` event when it ended before an answer). When
   * the answer's only calls were hidden ones, the message is left open (`hidden()` says which): the caller answers
   * them and feeds the continuation's stream after `next()`, or ends the message with `stop()`.
   */
  readonly end: () => string
  /** The hidden calls that left the message open (after `end()`); `null` when the message ended. */
  readonly hidden: () => ReadonlyArray<HiddenCall> | null
  /** The open hop's assistant message in Chat Completions form (its text and every call), for the continuation. */
  readonly assistant: () => ChatMessage
  /** Starts the continuation's hop: the same message, its blocks numbered on, its usage added. */
  readonly next: () => void
  /** Ends an open message (no continuation): `message_delta` and `message_stop`. */
  readonly stop: () => string
  /** The hops so far (1 + the continuations after hidden rounds) and the last hop's tokens carried (`carriedOf`). */
  readonly hops: () => { readonly count: number; readonly carried: number | null }
}

/**
 * A translator for one streamed answer (see the module docblock): text deltas into a text block, each tool call (by
 * its `index`) into a `tool_use` block with its arguments as one `input_json_delta`, sent once the calls are complete (at
 * the `finish_reason`: a stream may interleave its calls' deltas), reasoning deltas left out; the message ends at
 * `[DONE]` (or the stream's end after a `finish_reason`) with `message_delta` (stop reason, usage) and `message_stop`;
 * an `error` in the stream becomes an Anthropic `error` event, and so does a hop (the first, or a continuation after
 * hidden calls) whose stream carried no JSON chunk before `[DONE]` (data lines that are not JSON are skipped; only
 * them is no answer, not an empty message). `callId` writes a call's id for the agent (as `messageOf`).
 */
export const streamTranslator = (model: string, hiddenTools: ReadonlySet<string> = new Set(), callId: (id: string) => string = toolUseId): StreamTranslator => {
  let decoder = Sse.makeDecoder()
  let started = false
  let open: { readonly kind: "text"; readonly index: number } | null = null
  let blocks = 0
  let finish: unknown = null
  let usage: unknown = null
  /** The usage of the hops before this one (hidden rounds), added to this hop's. */
  const earlier: Array<unknown> = []
  let done = false
  /** Whether this hop's stream carried a JSON chunk: `[DONE]` after none is no answer, not an empty message. */
  let answered = false
  let text = ""
  /**
   * Each call of the hop by its slot: `upstreamId` the first id the upstream gave it (`null` before one: a call's id
   * may come in a later delta than its first), `id` the agent's, fixed when first needed (`idOf`), after the calls are
   * complete.
   */
  const calls = new Map<number, { upstreamId: string | null; id: string | null; name: string; arguments: string; hidden: boolean; sent?: boolean; extra?: Record<string, unknown> | undefined }>()
  /** The agent's ids of the message's calls, distinct across its hops (one message for the agent). */
  const distinct = distinctIds()
  /**
   * A call's id for the agent (and the continuation): the upstream's, or a fresh one when it gave none (`chatCallId`),
   * distinct in the message. Before branch `b46gw` it was fixed at the call's first delta: an id that came in a later
   * delta was lost, and the agent got a generated one.
   */
  const idOf = (c: { upstreamId: string | null; id: string | null }): string => c.id ??= distinct(callId(chatCallId(c.upstreamId)))
  let slotOf = OpenAiChat.callSlots()
  let pending: ReadonlyArray<HiddenCall> | null = null
  const out: Array<string> = []
  const total = () => {
    const all = [...earlier, usage].map(usageOf)
    return {
      input_tokens: all.reduce((n, u) => n + u.input_tokens, 0),
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: all.reduce((n, u) => n + u.cache_read_input_tokens, 0),
      output_tokens: all.reduce((n, u) => n + u.output_tokens, 0)
    }
  }
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
    out.push(event({ type: "content_block_stop", index: open.index }))
    open = null
  }
  /**
   * The visible calls as `tool_use` blocks, in `index` order, once the upstream's calls are complete (at the
   * `finish_reason` or the stream's end): a Chat Completions stream may interleave its calls' deltas, Anthropic's blocks
   * cannot be.
   */
  const sendCalls = () => {
    for (const [, c] of [...calls.entries()].sort(([a], [b]) => a - b)) {
      if (c.hidden || c.sent === true) continue
      c.sent = true
      close()
      const index = blocks++
      out.push(event({ type: "content_block_start", index, content_block: { type: "tool_use", id: idOf(c), name: c.name, input: {} } }))
      if (c.arguments !== "") out.push(event({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: c.arguments } }))
      out.push(event({ type: "content_block_stop", index }))
    }
  }
  const stop = () => {
    if (done) return
    done = true
    close()
    sendCalls()
    const visible = [...calls.values()].filter((c) => !c.hidden)
    if (visible.length === 0 && [...calls.values()].some((c) => c.hidden)) {
      // Only hidden calls: the message stays open for the continuation.
      pending = [...calls.values()].map((c) => ({ id: idOf(c), arguments: c.arguments }))
      return
    }
    // Hidden calls beside the agent's own are dropped (the agent answers its own; the message ends here).
    const reason = stopReasonOf(finish, visible.length > 0)
    out.push(event({ type: "message_delta", delta: { stop_reason: reason, stop_sequence: null }, usage: total() }))
    out.push(event({ type: "message_stop" }))
  }
  const onData = (data: string) => {
    if (done) return
    if (data.trim() === "[DONE]") {
      if (!answered) {
        done = true
        out.push(event(errorBody("api_error", "the upstream's stream carried no answer (no JSON chunk before [DONE])")))
        return
      }
      start(null)
      stop()
      return
    }
    const chunk = parseJson(data)
    if (!isRecord(chunk)) return
    answered = true
    if (chunk.error !== undefined) {
      const e = anthropicError(500, JSON.stringify({ error: chunk.error }))
      done = true
      out.push(event(e.body))
      return
    }
    start(chunk.id)
    if (chunk.usage !== undefined && chunk.usage !== null) usage = chunk.usage
    const choice = Array.isArray(chunk.choices) && isRecord(chunk.choices[0]) ? chunk.choices[0] : null
    if (choice === null) return
    const delta = isRecord(choice.delta) ? choice.delta : {}
    if (typeof delta.content === "string" && delta.content !== "") {
      text += delta.content
      if (open === null || open.kind !== "text") {
        close()
        open = { kind: "text", index: blocks++ }
        out.push(event({ type: "content_block_start", index: open.index, content_block: { type: "text", text: "" } }))
      }
      out.push(event({ type: "content_block_delta", index: open.index, delta: { type: "text_delta", text: delta.content } }))
    }
    for (const c of Array.isArray(delta.tool_calls) ? delta.tool_calls : []) {
      if (!isRecord(c)) continue
      const fn = isRecord(c.function) ? c.function : {}
      const callIndex = slotOf(c)
      let call = calls.get(callIndex)
      if (call === undefined) {
        call = { upstreamId: null, id: null, name: "", arguments: "", hidden: false }
        calls.set(callIndex, call)
      }
      if (call.upstreamId === null && typeof c.id === "string" && c.id !== "") call.upstreamId = c.id
      // The name may come in pieces (every field of a delta is a fragment): the calls are sent whole at the end, so
      // whether a call is hidden is decided on its whole name (before, the first piece was the name: a thread_read
      // named in pieces reached the agent as a call of `thread_`, an own tool `Bash` as `Ba`).
      if (typeof fn.name === "string") {
        call.name += fn.name
        call.hidden = hiddenTools.has(call.name)
      }
      if (typeof fn.arguments === "string") call.arguments += fn.arguments
      // Gemini's thought signature goes back on the call in a continuation (`GatewayChat.mergeExtra`).
      if (c.extra_content !== undefined) call.extra = GatewayChat.mergeExtra(call.extra, c.extra_content)
      // Sent whole at the end (`sendCalls`); a hidden tool's call (thread_read, answered by the gateway) never.
    }
    if (choice.finish_reason !== undefined && choice.finish_reason !== null) {
      finish = choice.finish_reason
      close()
      sendCalls()
    }
  }
  const drain = () => out.splice(0, out.length).join("")
  return {
    push: (chunk) => {
      for (const m of decoder.push(chunk)) onData(m.data)
      return drain()
    },
    hidden: () => pending,
    assistant: () => ({
      role: "assistant",
      content: text === "" ? null : text,
      tool_calls: [...calls.values()].map((c) => ({
        id: idOf(c),
        type: "function",
        function: { name: c.name, arguments: c.arguments },
        ...(c.extra === undefined ? {} : { extra_content: c.extra })
      }))
    }),
    next: () => {
      earlier.push(usage)
      usage = null
      finish = null
      answered = false
      text = ""
      calls.clear()
      slotOf = OpenAiChat.callSlots()
      pending = null
      done = false
      decoder = Sse.makeDecoder()
    },
    hops: () => ({ count: earlier.length + 1, carried: carriedOf(usage) }),
    stop: () => {
      pending = null
      out.push(event({ type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: total() }))
      out.push(event({ type: "message_stop" }))
      return drain()
    },
    end: () => {
      if (!done) {
        if (finish !== null) stop()
        else {
          done = true
          out.push(event(errorBody("api_error", "the upstream's stream ended before its answer did")))
        }
      }
      return drain()
    }
  }
}
