/**
 * GatewaySwitchAnthropic: a provider switch on the gateway's Chat Completions endpoint (issue 14 items 4 and 5,
 * docs/gateway.md "Routing and switching"): the agent (pi, opencode, aider) speaks OpenAI Chat Completions, and its
 * model routes to an `anthropic-messages` instance. The reverse of `GatewaySwitch`; no I/O (`GatewaySwitched` serves
 * it, with `GatewaySwitchWire.anthropic`).
 *
 * - **The request** (`anthropicOf`, `toAnthropic`): the leading `system` / `developer` messages (their texts joined by
 *   a blank line) Anthropic's `system`; a later one a `user` message of its text; a `user` message's parts text blocks
 *   (an `image_url` an `image` block, `GatewaySwitchMedia.anthropicImageOfUrl`: a base64 `data:` URL a `base64`
 *   source typed by its bytes, an http(s) URL a `url` source, another URL or an image type Anthropic does not read a
 *   text naming it; a `file` part a `document` block, a PDF
 *   with a `base64` source, a text file with a `text` source, `GatewaySwitchMedia.anthropicBlockOfFile`; other parts a
 *   one-line `[type]` text); an
 *   `assistant` message its text (a text block) and its `tool_calls` `tool_use` blocks (the arguments parsed: an
 *   object, else `{}`; ids made what Anthropic accepts, `GatewaySwitch.toolUseId`); `tool` messages `tool_result`
 *   blocks, consecutive ones and the `user` message right after them one `user` message (Anthropic wants a call's
 *   results in the next message, first). An empty message a `[empty]` text (Anthropic refuses empty content). Tools
 *   `{name, description, input_schema}` (the function's `parameters`), `tool_choice` mapped (`required`: `any`),
 *   `parallel_tool_calls: false` as `disable_parallel_tool_use`, `stop` as `stop_sequences`, `temperature` at most 1,
 *   `max_tokens` the output room, `stream` kept. The request's `model` goes out unchanged.
 * - **The fit** is `GatewaySwitch.fitMessages` over those Anthropic messages (stubs with the ref `tool:<the agent's
 *   call id>`, then deferral with a pointer, then a summary), each counted as its JSON; the pointer and the summaries
 *   are in the agent's messages (`sources` maps them), and so are `Fit.leftOut` and `Fit.summarised`.
 * - **The reply** in Chat Completions: `completionOf` for a whole answer, `streamTranslator` for the SSE events as they
 *   arrive (`anthropicStreamReader`, shared with the Responses direction, writing through a `StreamEmitter`;
 *   `chat.completion.chunk`s: the role, text deltas, each `tool_use` block a tool call streamed as its
 *   `input_json_delta`s come, the `finish_reason`, the usage: a chunk of its own when the agent asked
 *   `stream_options.include_usage`, else on the finish chunk; then `data: [DONE]`); text blocks after the first are
 *   joined by a blank line; thinking left out; calls of hidden tools (`thread_read`) left out. Usage:
 *   `prompt_tokens` the input with cache writes and reads, `prompt_tokens_details.cached_tokens` the reads and
 *   `cache_write_tokens` the writes. An upstream error in OpenAI's shape (`chatError`), "prompt is too long" as
 *   OpenAI's `context_length_exceeded` 400 (the agent's own overflow error, so its compaction runs).
 */
import { ToolResultOffload } from "@baton/context"
import type { ProviderAdapter } from "@baton/providers"
import { Sse } from "@baton/providers"
import { fitLimit, isRecord, outputRoom, parseJson } from "./GatewayDialect.js"
import * as GatewayMedia from "./GatewayMedia.js"
import * as GatewaySwitch from "./GatewaySwitch.js"
import * as GatewaySwitchMedia from "./GatewaySwitchMedia.js"

type Json = Record<string, unknown>

/** A Chat message's parts: a string one text part, `null` none. */
export const partsOf = (content: unknown): ReadonlyArray<unknown> =>
  typeof content === "string" ? (content === "" ? [] : [{ type: "text", text: content }]) : Array.isArray(content) ? content : []

/** A Chat message's text (its text parts joined, others `[type]`). */
export const textOf = (content: unknown): string =>
  partsOf(content).map((p) => isRecord(p) && typeof p.text === "string" ? p.text : `[${isRecord(p) ? String(p.type) : "part"}]`).join("\n\n")

/** A Chat content part as an Anthropic block (see the module docblock). */
export const blockOf = (part: unknown): Json => {
  if (!isRecord(part)) return { type: "text", text: "[part]" }
  if (part.type === "text" && typeof part.text === "string") return { type: "text", text: part.text }
  if (part.type === "image_url") {
    return GatewaySwitchMedia.anthropicImageOfUrl(isRecord(part.image_url) ? String(part.image_url.url ?? "") : String(part.image_url ?? ""))
  }
  if (part.type === "file" && isRecord(part.file)) return GatewaySwitchMedia.anthropicBlockOfFile(part.file)
  return { type: "text", text: `[${String(part.type)}]` }
}

/** Blocks Anthropic accepts: no empty text block, never no block. */
export const nonEmpty = (blocks: ReadonlyArray<Json>): Array<Json> => {
  const kept = blocks.filter((b) => !(b.type === "text" && String(b.text).trim() === ""))
  return kept.length === 0 ? [{ type: "text", text: "[empty]" }] : kept
}

/** A Chat request's conversation in Anthropic's form (`anthropicOf`). */
export interface Converted {
  /** The leading system / developer messages' texts, joined by a blank line (`""`: none). */
  readonly system: string
  readonly messages: ReadonlyArray<Json>
  /** For each Anthropic message, the agent's messages it stands for (indexes into the history after the system prompt). */
  readonly sources: ReadonlyArray<ReadonlyArray<number>>
  /** The agent's call id of each `tool_use` id sent (they differ when the agent's had characters Anthropic refuses). */
  readonly callIds: ReadonlyMap<string, string>
}

/** The Chat Completions request's messages as Anthropic messages (see the module docblock). */
export const anthropicOf = (body: Json): Converted => {
  const all = (Array.isArray(body.messages) ? body.messages : []).filter(isRecord)
  let k = 0
  while (k < all.length && (all[k]!.role === "system" || all[k]!.role === "developer")) k++
  const system = all.slice(0, k).map((m) => textOf(m.content)).filter((t) => t !== "").join("\n\n")
  const messages: Array<{ role: string; content: Array<Json> }> = []
  const sources: Array<Array<number>> = []
  const callIds = new Map<string, string>()
  /** Whether the last Anthropic message is the `user` message of tool results (a user message after them joins it). */
  let results = false
  /**
   * The `tool_use` ids sent for the last assistant message's calls, in order, by the agent's call id: its tool results
   * take them in turn. Calls sharing one id (proxies in front of Gemini; the agent got them so with offload off, or
   * before branch b46gw) go out under distinct ids (`distinctIds`), as Anthropic refuses a message whose `tool_use`
   * ids repeat; before branch b48gw they went out as they came, and every such switched request was refused.
   */
  let sent = new Map<string, Array<string>>()
  all.slice(k).forEach((m, j) => {
    if (m.role === "tool") {
      const id = String(m.tool_call_id ?? "")
      const block = { type: "tool_result", tool_use_id: sent.get(id)?.shift() ?? GatewaySwitch.toolUseId(id), content: textOf(m.content) }
      if (results) {
        messages.at(-1)!.content.push(block)
        sources.at(-1)!.push(j)
      } else {
        messages.push({ role: "user", content: [block] })
        sources.push([j])
        results = true
      }
      return
    }
    if (m.role === "assistant") {
      const text = textOf(m.content)
      const distinct = GatewaySwitch.distinctIds()
      sent = new Map()
      const calls = (Array.isArray(m.tool_calls) ? m.tool_calls : []).filter(isRecord).map((c): Json => {
        const fn = isRecord(c.function) ? c.function : {}
        const args = typeof fn.arguments === "string" ? parseJson(fn.arguments) : fn.arguments
        const own = String(c.id ?? "")
        const id = distinct(GatewaySwitch.toolUseId(own))
        sent.set(own, [...(sent.get(own) ?? []), id])
        callIds.set(id, own)
        return { type: "tool_use", id, name: String(fn.name ?? ""), input: isRecord(args) ? args : {} }
      })
      messages.push({ role: "assistant", content: calls.length > 0 && text.trim() === "" ? calls : nonEmpty([{ type: "text", text }, ...calls]) })
      sources.push([j])
      results = false
      return
    }
    const blocks = m.role === "user" ? partsOf(m.content).map(blockOf) : [{ type: "text", text: textOf(m.content) }]
    if (results) {
      messages.at(-1)!.content.push(...blocks.filter((b) => !(b.type === "text" && String(b.text).trim() === "")))
      sources.at(-1)!.push(j)
    } else {
      messages.push({ role: "user", content: nonEmpty(blocks) })
      sources.push([j])
    }
    results = false
  })
  return { system, messages, sources, callIds }
}

/** A Chat function tool as an Anthropic tool; `null` for what is not a function. */
const toolOf = (t: unknown): Json | null => {
  if (!isRecord(t) || !isRecord(t.function) || typeof t.function.name !== "string") return null
  const fn = t.function
  return {
    name: fn.name,
    ...(typeof fn.description === "string" ? { description: fn.description } : {}),
    input_schema: isRecord(fn.parameters) ? fn.parameters : { type: "object", properties: {} }
  }
}

/** A tool Baton offers (`thread_read`) as an Anthropic tool. */
export const offeredTool = (t: ProviderAdapter.ToolDefinition): Json => ({ name: t.name, description: t.description, input_schema: t.inputSchema })

/** Chat's `tool_choice` (and `parallel_tool_calls: false`) in Anthropic's form (`undefined`: none sent). */
const toolChoiceOf = (c: unknown, parallel: unknown): Json | undefined => {
  const serial = parallel === false ? { disable_parallel_tool_use: true } : {}
  if (c === "auto") return { type: "auto", ...serial }
  if (c === "required") return { type: "any", ...serial }
  if (c === "none") return { type: "none" }
  if (isRecord(c) && isRecord(c.function) && typeof c.function.name === "string") return { type: "tool", name: c.function.name, ...serial }
  return parallel === false ? { type: "auto", ...serial } : undefined
}

/** Tokens of one Anthropic message as it goes out (its JSON, a few for its framing). */
export const messageTokens = (count: (text: string) => number, m: unknown) => GatewayMedia.jsonTokens(count, m) + 4

/**
 * One Anthropic message with the results of the `stubbed` call ids as stubs (`ToolResultOffload.stubText`, the ref
 * `tool:<the agent's call id>`, which `thread_read` reads back from the thread).
 */
const stubbedMessage = (callIds: ReadonlyMap<string, string>) =>
(message: Json, stubbed: ReadonlySet<string>, calls: ReadonlyMap<string, { readonly name: string; readonly input: unknown }>): ReadonlyArray<Json> => {
  if (message.role !== "user" || !Array.isArray(message.content) || stubbed.size === 0) return [message]
  return [{
    ...message,
    content: message.content.map((b) => {
      if (!isRecord(b) || b.type !== "tool_result" || !stubbed.has(String(b.tool_use_id))) return b
      const id = String(b.tool_use_id)
      const call = calls.get(id)
      const text = GatewaySwitch.resultText(b)
      return { ...b, content: ToolResultOffload.stubText([{ toolName: call?.name ?? "tool", argumentsText: JSON.stringify(call?.input ?? {}), releasedChars: text.length }], `tool:${callIds.get(id) ?? id}`) }
    })
  }]
}

/** The tokens a cache breakpoint adds to a request (its JSON, `"cache_control":{"type":"ephemeral"}`, and some room). */
const breakpointTokens = 16

/**
 * How many blocks before a breakpoint Anthropic looks for a cached prefix ("approximately 20 blocks", Anthropic's
 * prompt caching guide): a prefix that ends further back is not found from that breakpoint.
 */
export const lookbackBlocks = 20

/** A message's blocks (`[]`: a string content or none). */
const blocksIn = (m: Json): ReadonlyArray<Json> => (Array.isArray(m.content) ? m.content as ReadonlyArray<Json> : [])

/** `m` with a breakpoint on its last block (a copy; the blocks' content unchanged). */
const breakpointOn = (m: Json): Json => {
  const blocks = blocksIn(m)
  return { ...m, content: [...blocks.slice(0, -1), { ...blocks.at(-1)!, cache_control: { type: "ephemeral" } }] }
}

/**
 * The messages with a prompt-cache breakpoint (`cache_control: {type: "ephemeral"}`) on the last block of the last
 * one (a copy: the blocks' content unchanged): Anthropic caches the request's prefix through it, and the next request
 * of the conversation, which extends it, reads it back. Anthropic looks for a cached prefix only `lookbackBlocks`
 * blocks before a breakpoint, so when the newest round (the blocks after the message before the newest assistant
 * message: the previous request ended there, its breakpoint on its last block) holds that many or more (an answer of
 * many parallel calls and their results), a second breakpoint goes on the last block of that message: the previous
 * request's cached prefix is read there instead of written again. Messages without blocks are left as they are.
 */
export const withBreakpoint = (messages: ReadonlyArray<Json>): ReadonlyArray<Json> => {
  const last = messages.at(-1)
  if (last === undefined || blocksIn(last).length === 0) return messages
  const out = [...messages.slice(0, -1), breakpointOn(last)]
  let reply = messages.length - 1
  while (reply >= 0 && messages[reply]!.role !== "assistant") reply--
  // The previous request's last message with blocks, before the newest reply.
  let previous = reply - 1
  while (previous >= 0 && blocksIn(messages[previous]!).length === 0) previous--
  if (reply < 0 || previous < 0) return out
  const round = messages.slice(previous + 1).reduce((n, m) => n + blocksIn(m).length, 0)
  if (round >= lookbackBlocks) out[previous] = breakpointOn(messages[previous]!)
  return out
}

/**
 * An agent's request in Anthropic's form before the fit: its conversation (`Converted`: `anthropicOf`, or another agent
 * protocol's), its tools (Anthropic's form), its `tool_choice` and stop sequences. Every switch from an OpenAI agent
 * starts from it (to an Anthropic instance, `fitConverted`; to the other OpenAI protocol, `GatewaySwitchOpenAi`).
 */
export interface AnthropicRequest {
  readonly converted: Converted
  readonly tools: ReadonlyArray<Json>
  readonly choice: Json | undefined
  readonly stop: ReadonlyArray<string>
}

/** A Chat Completions request in Anthropic's form (see the module docblock). */
export const requestOfChat = (body: Json): AnthropicRequest => ({
  converted: anthropicOf(body),
  tools: (Array.isArray(body.tools) ? body.tools : []).map(toolOf).filter((t): t is Json => t !== null),
  choice: toolChoiceOf(body.tool_choice, body.parallel_tool_calls),
  stop: typeof body.stop === "string" ? [body.stop] : Array.isArray(body.stop) ? body.stop.filter((s): s is string => typeof s === "string") : []
})

/**
 * The fit of a converted conversation counted in the agent's messages: the fit counts the Anthropic messages, the
 * pointer, the summaries, `Fit.leftOut` and `Fit.summarised` count the agent's (`sources` maps them: a merged Anthropic
 * message stands for every agent message it holds). `input` is the fit's pointer and summaries in Anthropic messages,
 * `fit` a fit's counts back in the agent's messages.
 */
export const inAgentMessages = (sources: ReadonlyArray<ReadonlyArray<number>>, input: Pick<GatewaySwitch.FitInput, "pointer" | "summaries">) => {
  /** The agent's messages the first `n` Anthropic messages stand for. */
  const agentCount = (n: number) => n === 0 ? 0 : Math.max(...sources[n - 1]!) + 1
  /** The Anthropic messages holding any of the agent's first `covers` messages (a summary stands for them all). */
  const anthropicCount = (covers: number) => sources.filter((s) => Math.min(...s) < covers).length
  return {
    input: {
      pointer: (n: number) => input.pointer(agentCount(n)),
      summaries: input.summaries?.map((s) => ({ ...s, covers: anthropicCount(s.covers) }))
    },
    fit: (fit: GatewaySwitch.Fit): GatewaySwitch.Fit => ({
      ...fit,
      leftOut: agentCount(fit.leftOut),
      // The summary sent: the first given whose messages are as many (the fit tries them in order).
      summarised: fit.summarised === 0 ? 0 : input.summaries?.find((s) => anthropicCount(s.covers) === fit.summarised)?.covers ?? 0
    })
  }
}

/**
 * An agent's request in Anthropic's form (`AnthropicRequest`) as an Anthropic Messages request fitted under the
 * window: `GatewaySwitch.fitMessages` with stubs `tool:<the agent's call id>`, `input.pointer` and `input.summaries`
 * in the agent's messages (`inAgentMessages`), and so `Fit.leftOut` and `Fit.summarised`. The request's `tools` go
 * first (`thread_read` after them), `choice` its `tool_choice`; `temperature` (at most 1), `top_p`, `stream` from the
 * body, `stop_sequences` given; a cache breakpoint on the last message (`withBreakpoint`).
 * `overflow` when the pinned part, system and tools alone are over.
 */
export const fitConverted = (input: GatewaySwitch.FitInput, request: AnthropicRequest): GatewaySwitch.FitResult => {
  const { body, count } = input
  const { choice, converted, stop } = request
  const outputTokens = outputRoom(input.windowTokens, input.maxOutputTokens, body)
  const limit = fitLimit(input.windowTokens, input.maxOutputTokens, body)
  const tools = request.tools.length === 0 ? request.tools : [...request.tools, ...(input.offered ?? []).map(offeredTool)]
  // With the framing, the cache breakpoints' few tokens (`withBreakpoint`: at most two).
  const fixed = (converted.system === "" ? 0 : count(converted.system) + 4) + (tools.length === 0 ? 0 : GatewayMedia.jsonTokens(count, tools)) + 16 + 2 * breakpointTokens
  const counts = inAgentMessages(converted.sources, input)
  const fitted = GatewaySwitch.fitMessages(
    counts.input,
    converted.messages,
    limit,
    outputTokens,
    {
      convert: stubbedMessage(converted.callIds),
      size: (m) => messageTokens(count, m),
      note: (text) => ({ role: "user", content: [{ type: "text", text }] }),
      fixed
    }
  )
  if (fitted._tag === "overflow") return fitted
  const out: Json = {
    model: body.model,
    max_tokens: outputTokens,
    ...(converted.system === "" ? {} : { system: converted.system }),
    messages: withBreakpoint(fitted.messages),
    ...(tools.length === 0 ? {} : { tools }),
    ...(choice === undefined || tools.length === 0 ? {} : { tool_choice: choice }),
    ...(typeof body.temperature === "number" ? { temperature: Math.min(1, Math.max(0, body.temperature)) } : {}),
    ...(typeof body.top_p === "number" ? { top_p: body.top_p } : {}),
    ...(stop.length === 0 ? {} : { stop_sequences: stop }),
    ...(body.stream === true ? { stream: true } : {})
  }
  return { _tag: "fits", body: out, fit: counts.fit(fitted.fit) }
}

/**
 * The agent's Chat Completions request as an Anthropic Messages request fitted under the window (see the module
 * docblock and `fitConverted`; `input.body` is the agent's Chat body, `input.pointer` and `input.summaries` count the
 * agent's messages after its system prompt).
 */
export const toAnthropic = (input: GatewaySwitch.FitInput): GatewaySwitch.FitResult => fitConverted(input, requestOfChat(input.body))

/** Anthropic's usage in one object (absent fields 0; a `message_delta`'s fields replace the `message_start`'s). */
export interface Usage {
  readonly input: number
  readonly write: number
  readonly read: number
  readonly output: number
}

/** No tokens. */
export const noUsage: Usage = { input: 0, write: 0, read: 0, output: 0 }

/** An Anthropic `usage` object over `base` (the fields it has replace the base's). */
export const usageOver = (base: Usage, usage: unknown): Usage => {
  if (!isRecord(usage)) return base
  const n = (u: unknown, d: number) => (typeof u === "number" ? u : d)
  return {
    input: n(usage.input_tokens, base.input),
    write: n(usage.cache_creation_input_tokens, base.write),
    read: n(usage.cache_read_input_tokens, base.read),
    output: n(usage.output_tokens, base.output)
  }
}

/** Usages added up. */
export const sum = (all: ReadonlyArray<Usage>): Usage =>
  all.reduce((a, b) => ({ input: a.input + b.input, write: a.write + b.write, read: a.read + b.read, output: a.output + b.output }), noUsage)

/**
 * The billed usage of an Anthropic `usage` object with `iterations` (server-side compaction: a `compaction`
 * iteration, then the `message` one): their sum, since its top-level figures are the last iteration's alone (what the
 * request carried after the compaction); `null` without iterations. Before, the compaction's iteration (its whole
 * history read once, e.g. 60,385 input tokens beside the message's 612) was in no recorded usage nor cost.
 */
export const billedOf = (usage: unknown): Usage | null =>
  isRecord(usage) && Array.isArray(usage.iterations) && usage.iterations.length > 0
    ? sum(usage.iterations.map((it) => usageOver(noUsage, it)))
    : null

/** The billed usage of an Anthropic `usage` object: `billedOf`'s, else its own figures over `base` (`usageOver`). */
export const billedOver = (base: Usage, usage: unknown): Usage => billedOf(usage) ?? usageOver(base, usage)

/** Chat Completions' `usage` of Anthropic usage (see the module docblock). */
export const chatUsageOf = (u: Usage): Json => ({
  prompt_tokens: u.input + u.write + u.read,
  completion_tokens: u.output,
  total_tokens: u.input + u.write + u.read + u.output,
  prompt_tokens_details: { cached_tokens: u.read, cache_write_tokens: u.write }
})

/** What one Anthropic request carried, in tokens (input, cache writes and reads), from its `usage`; `null` without. */
export const carriedOf = (usage: unknown): number | null => {
  if (!isRecord(usage) || typeof usage.input_tokens !== "number") return null
  const u = usageOver(noUsage, usage)
  return u.input + u.write + u.read
}

/** Chat's `finish_reason` for an Anthropic `stop_reason` (`calls`: whether the agent gets calls). */
export const finishReasonOf = (stop: unknown, calls: boolean): string =>
  stop === "tool_use" ? (calls ? "tool_calls" : "stop") : stop === "max_tokens" || stop === "model_context_window_exceeded" ? "length" : stop === "refusal" ? "content_filter" : "stop"

/** A Chat Completions id for an Anthropic message id. */
export const completionIdOf = (id: unknown) => `chatcmpl-${typeof id === "string" && id !== "" ? id : `baton${Date.now().toString(36)}`}`

/**
 * A whole Anthropic answer as a Chat Completions answer (`model`: the agent's): its text blocks joined by a blank line,
 * its visible `tool_use` blocks `tool_calls` (calls of `hidden` tools left out), the usage of `earlier` hops (hidden
 * rounds, Anthropic `usage` objects) added to its own.
 */
export const completionOf = (answer: unknown, model: string, hidden: ReadonlySet<string> = new Set(), earlier: ReadonlyArray<unknown> = []): Json => {
  const a = isRecord(answer) ? answer : {}
  const blocks = (Array.isArray(a.content) ? a.content : []).filter(isRecord)
  const text = blocks.filter((b) => b.type === "text" && typeof b.text === "string").map((b) => String(b.text)).join("\n\n")
  const calls = blocks.filter((b) => b.type === "tool_use" && !hidden.has(String(b.name))).map((b) => ({
    id: String(b.id),
    type: "function",
    function: { name: String(b.name), arguments: JSON.stringify(b.input ?? {}) }
  }))
  return {
    id: completionIdOf(a.id),
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [{
      index: 0,
      message: { role: "assistant", content: text === "" ? null : text, ...(calls.length === 0 ? {} : { tool_calls: calls }) },
      finish_reason: finishReasonOf(a.stop_reason, calls.length > 0)
    }],
    usage: chatUsageOf(sum([...earlier, a.usage].map((u) => billedOver(noUsage, u))))
  }
}

/** The calls of a whole Anthropic answer when every one is a call of a `hidden` tool; `null` otherwise. */
export const hiddenCallsOf = (answer: unknown, hidden: ReadonlySet<string>): { readonly assistant: ReadonlyArray<unknown>; readonly calls: ReadonlyArray<GatewaySwitch.HiddenCall> } | null => {
  const a = isRecord(answer) ? answer : {}
  const blocks = (Array.isArray(a.content) ? a.content : []).filter(isRecord)
  const calls = blocks.filter((b) => b.type === "tool_use")
  if (calls.length === 0 || !calls.every((c) => hidden.has(String(c.name)))) return null
  return {
    assistant: [{ role: "assistant", content: blocks }],
    calls: calls.map((c) => ({ id: String(c.id), arguments: JSON.stringify(c.input ?? {}) }))
  }
}

/** The gateway's answers to hidden calls as the `user` message of their `tool_result` blocks. */
export const answersMessage = (answers: ReadonlyArray<{ readonly toolCallId: string; readonly output: string; readonly isError: boolean }>): Json => ({
  role: "user",
  content: answers.map((a) => ({ type: "tool_result", tool_use_id: a.toolCallId, content: a.output, ...(a.isError ? { is_error: true } : {}) }))
})

/**
 * OpenAI's error `type` for an HTTP status, as OpenAI's own error bodies carry it: a rate limit's `type` names the
 * limit (`requests` per minute, or `tokens`; its `code` is `rate_limit_exceeded`; `rate_limit_error` is the type of
 * `slow_down` only), `service_unavailable_error` for 503 (`server_is_overloaded`), `server_error` for another 5xx,
 * else `invalid_request_error`. Sources: OpenAI's 429 bodies in the field (`{"message":"Rate limit reached for gpt-5
 * … on requests per min …","type":"requests","param":null,"code":"rate_limit_exceeded"}`) and the error table of
 * Microsoft's Dev Proxy, which returns OpenAI's errors (learn.microsoft.com, dev-proxy "openai-rate-limit-reached").
 * Found in review: a switched 429 was `type: "rate_limit_error"` with Anthropic's `rate_limit_error` as its `code`.
 */
export const errorTypeOf = (status: number): string =>
  status === 429 ? "requests" : status === 503 ? "service_unavailable_error" : status >= 500 ? "server_error" : "invalid_request_error"

/**
 * OpenAI's status and `code` for an upstream error (its status, Anthropic type, `null` when it had none, and message):
 * a rate limit (`rate_limit_error`, or 429) is 429 `rate_limit_exceeded`; an overload (`overloaded_error`, 529, 503)
 * is 503 `server_is_overloaded` (OpenAI sends no 529); a server error (`api_error`, or 5xx) keeps its status with no
 * code, as OpenAI's 500 has none; an authentication failure (`authentication_error`, or 401) is OpenAI's
 * `invalid_api_key`; a not-found (`not_found_error`, or 404) `model_not_found` when its message names a model, else
 * `unknown_url` (OpenAI's code for a path it has no endpoint at); a permission failure (`permission_error`, or 403)
 * and a plain `invalid_request_error` have no code, as OpenAI's have none; anything else keeps its status with its
 * Anthropic type as the code. Found at an earlier stop: 401/403/404 reached an OpenAI agent with the Anthropic types
 * `authentication_error`, `permission_error`, `not_found_error` as their code.
 */
const openAiStatusOf = (status: number, given: string | null, message: string): { readonly status: number; readonly code: string | null } => {
  const type = given ?? (status === 401 ? "authentication_error" : status === 403 ? "permission_error" : status === 404 ? "not_found_error" : null)
  return type === "rate_limit_error" || (type === null && status === 429)
    ? { status: 429, code: "rate_limit_exceeded" }
    : type === "overloaded_error" || (type === null && (status === 529 || status === 503))
    ? { status: 503, code: "server_is_overloaded" }
    : type === "api_error" || (type === null && status >= 500)
    ? { status: status >= 500 ? status : 500, code: null }
    : type === "authentication_error"
    ? { status, code: "invalid_api_key" }
    : type === "not_found_error"
    ? { status, code: /\bmodel\b/i.test(message) ? "model_not_found" : "unknown_url" }
    : type === "permission_error" || type === "invalid_request_error"
    ? { status, code: null }
    : { status, code: type }
}

/** An OpenAI error body. */
export const errorBody = (type: string, message: string, code: string | null = null, param: string | null = null): Json => ({ error: { message, type, param, code } })

/** OpenAI's context-length overflow (the words Chat Completions agents compact on: `context_length_exceeded`). */
export const overflowBody = (tokens: number, maximum: number): Json =>
  errorBody(
    "invalid_request_error",
    `This model's maximum context length is ${maximum} tokens. However, your messages resulted in ${tokens} tokens. Please reduce the length of the messages.`,
    "context_length_exceeded",
    "messages"
  )

/** Whether an OpenAI error body is a context overflow. */
export const isOverflow = (body: Json): boolean => isRecord(body.error) && body.error.code === "context_length_exceeded"

/**
 * An Anthropic upstream's error (its status and body, `{"type":"error","error":{"type","message"}}` or any text) in
 * OpenAI's shape and status: its message kept, its status, `type` and `code` OpenAI's (`openAiStatusOf`,
 * `errorTypeOf`: a rate limit is 429 `requests` / `rate_limit_exceeded`); "prompt is too long: N tokens > M maximum"
 * as the `context_length_exceeded` 400 (`overflowBody`).
 */
export const chatError = (status: number, text: string): { readonly status: number; readonly body: Json } => {
  const parsed = parseJson(text)
  const error = isRecord(parsed) ? parsed.error : undefined
  const message = isRecord(error) && typeof error.message === "string" ? error.message : typeof error === "string" ? error : text.slice(0, 2_000)
  const type = isRecord(error) && typeof error.type === "string" ? error.type : null
  if (/prompt is too long/i.test(message)) {
    const numbers = /(\d+) tokens > (\d+) maximum/.exec(message)
    return {
      status: 400,
      body: numbers === null
        ? errorBody("invalid_request_error", `This model's maximum context length was exceeded: ${message}`, "context_length_exceeded", "messages")
        : overflowBody(Number(numbers[1]), Number(numbers[2]))
    }
  }
  const openAi = openAiStatusOf(status, type, message)
  return { status: openAi.status, body: errorBody(errorTypeOf(openAi.status), message === "" ? `the upstream answered HTTP ${status}` : message, openAi.code) }
}

/** One Chat Completions SSE line. */
const data = (chunk: unknown) => `data: ${JSON.stringify(chunk)}\n\n`

/**
 * The run's failure for translated Chat Completions SSE text that holds an error chunk: `overflow` for
 * `context_length_exceeded`, `provider_unavailable` for rate limits, overload and server errors, `provider_refused`
 * otherwise; `null` when none, or only one of Baton's own about the stream's shape ("the upstream's stream …").
 */
export const streamFailureOf = (text: string): { readonly code: "overflow" | "provider_unavailable" | "provider_refused"; readonly reason: string } | null => {
  const found = /^data: (\{"error".*)$/m.exec(text)
  if (found === null) return null
  const body = parseJson(found[1]!)
  const error = isRecord(body) && isRecord(body.error) ? body.error : {}
  const message = String(error.message ?? "")
  if (message.startsWith("the upstream's stream")) return null
  const code = String(error.code ?? "")
  const kind = code === "context_length_exceeded"
    ? "overflow"
    : ["rate_limit_exceeded", "server_is_overloaded", "rate_limit_error", "overloaded_error", "api_error"].includes(code) ||
        ["server_error", "service_unavailable_error", "rate_limit_error"].includes(String(error.type))
    ? "provider_unavailable"
    : "provider_refused"
  return { code: kind, reason: `the upstream's stream reported an error: ${code}: ${message.slice(0, 300)}` }
}

/** Whether the agent asked for usage in a chunk of its own (`stream_options.include_usage`). */
const wantsUsage = (request: Json) => isRecord(request.stream_options) && request.stream_options.include_usage === true

/**
 * A whole answer (`completionOf`) as the chunks of its stream: the role and text, each call whole, the finish chunk,
 * the usage (see the module docblock), `[DONE]`.
 */
export const chunksOf = (completion: Json, request: Json): string => {
  const choice = (completion.choices as ReadonlyArray<Json>)[0]!
  const message = choice.message as Json
  const chunk = (delta: Json, finish: unknown = null, extra: Json = {}) =>
    data({ id: completion.id, object: "chat.completion.chunk", created: completion.created, model: completion.model, choices: [{ index: 0, delta, finish_reason: finish }], ...extra })
  const calls = Array.isArray(message.tool_calls) ? message.tool_calls.filter(isRecord) : []
  return [
    chunk({ role: "assistant", content: typeof message.content === "string" ? message.content : "" }),
    ...calls.map((c, index) => chunk({ tool_calls: [{ index, ...c }] })),
    chunk({}, choice.finish_reason, wantsUsage(request) ? {} : { usage: completion.usage }),
    wantsUsage(request) ? data({ id: completion.id, object: "chat.completion.chunk", created: completion.created, model: completion.model, choices: [], usage: completion.usage }) : "",
    "data: [DONE]\n\n"
  ].join("")
}

/**
 * What a translator of an Anthropic stream writes in the agent's protocol (`anthropicStreamReader`); each returns the
 * text to send. `at` numbers the agent's calls (and `text` blocks, `block`) across hops.
 */
export interface StreamEmitter {
  /** The answer starts (the first hop's `message_start`; `id` its message id). */
  readonly start: (id: string | null) => string
  /** A text delta of text block `block`; `lead`: a blank line goes first (not the answer's first text). */
  readonly text: (block: number, delta: string, lead: boolean) => string
  /** Text block `block` (which had text) ended with `text`. */
  readonly textEnd: (block: number, text: string) => string
  /** A call of the agent's starts. */
  readonly callStart: (at: number, id: string, name: string) => string
  /** An arguments delta of call `at`. */
  readonly callDelta: (at: number, delta: string) => string
  /** Call `at` ended with `args` (its whole arguments; `{}` when it had none, `filled`: sent here, none came). */
  readonly callEnd: (at: number, id: string, name: string, args: string, filled: boolean) => string
  /** The answer ends: Anthropic's stop reason, whether the agent got calls, every hop's usage. */
  readonly finish: (stopReason: unknown, calls: boolean, usage: Usage) => string
  /** An error body (`chatError`'s) as the protocol's error event; the answer ends. */
  readonly error: (body: Json) => string
}

/**
 * A reader of one streamed Anthropic answer writing the agent's protocol through `emit` as its events arrive (see the
 * module docblock; the interface is `GatewaySwitchWire.Translator`: the hop's assistant output is one Anthropic
 * message). An `error` event becomes the protocol's error (`chatError`'s body); a hop whose stream ended before its
 * `message_stop` (or carried no `message_start`) ends with an error of Baton's ("the upstream's stream …"). When a
 * hop's only calls are hidden ones, the answer is left open for the continuation, whose output joins it.
 */
export const anthropicStreamReader = (hiddenTools: ReadonlySet<string>, emit: StreamEmitter) => {
  let decoder = Sse.makeDecoder()
  let started = false
  /** Whether text went to the agent already (a later text block starts with a blank line). */
  let texted = false
  let usage: Usage = noUsage
  /** This hop's billed usage when it differs from `usage` (compaction iterations: `billedOf`); `null` otherwise. */
  let billed: Usage | null = null
  let answered = false
  const earlier: Array<Usage> = []
  let stopReason: unknown = null
  let done = false
  let pending: ReadonlyArray<GatewaySwitch.HiddenCall> | null = null
  /** The agent's tool calls and text blocks so far (their numbers, across hops). */
  let callCount = 0
  let textCount = 0
  /** This hop's blocks by their index: text, a call (hidden or the agent's, with its number), other. */
  let blocks = new Map<number, { kind: "text"; text: string; at: number } | { kind: "call"; id: string; name: string; args: string; hidden: boolean; at: number } | { kind: "other" }>()
  let visibleCalls = 0
  let anyVisible = false
  /** This hop's message id (its `message_start`'s) and whether any of its text or calls went to the agent yet. */
  let messageId: string | null = null
  let shown = false
  const out: Array<string> = []
  const fail = (body: Json) => {
    done = true
    out.push(emit.error(body))
  }
  const stop = () => {
    if (done) return
    done = true
    const calls = [...blocks.values()].filter((b) => b.kind === "call")
    if (visibleCalls === 0 && calls.length > 0 && calls.every((c) => c.hidden)) {
      pending = calls.map((c) => ({ id: c.id, arguments: c.args === "" ? "{}" : c.args }))
      return
    }
    out.push(emit.finish(stopReason, visibleCalls > 0, sum([...earlier, billed ?? usage])))
  }
  const onEvent = (text: string) => {
    if (done) return
    const e = parseJson(text)
    if (!isRecord(e)) return
    switch (e.type) {
      case "message_start": {
        const message = isRecord(e.message) ? e.message : {}
        const id = typeof message.id === "string" ? message.id : null
        if (answered) {
          // A repeated message_start of the same message changes nothing. One of another message restarts the
          // hop's answer (seen in the field: a stream spliced after a retry upstream; Baton's adapter keeps the
          // second message only; Anthropic's SDK's MessageStream rejects the restart): what the first attempt left is dropped, when none of it
          // reached the agent; else the agent holds part of an answer that is no more (a call cut mid-arguments),
          // and the answer ends with an error (the agent retries) instead of going on as two answers in one.
          if (id === messageId) return
          if (shown) {
            fail(errorBody("server_error", "the upstream restarted its answer (another message_start) after part of it was sent"))
            return
          }
          blocks = new Map()
          stopReason = null
        }
        answered = true
        messageId = id
        usage = usageOver(noUsage, message.usage)
        billed = billedOf(message.usage)
        if (!started) {
          started = true
          out.push(emit.start(typeof message.id === "string" ? message.id : null))
        }
        return
      }
      case "content_block_start": {
        const index = typeof e.index === "number" ? e.index : blocks.size
        const block = isRecord(e.content_block) ? e.content_block : {}
        if (block.type === "text") {
          blocks.set(index, { kind: "text", text: "", at: -1 })
          if (typeof block.text === "string" && block.text !== "") onEvent(JSON.stringify({ type: "content_block_delta", index, delta: { type: "text_delta", text: block.text } }))
        } else if (block.type === "tool_use") {
          const name = String(block.name ?? "")
          const hidden = hiddenTools.has(name)
          const at = hidden ? -1 : callCount++
          if (!hidden) {
            visibleCalls++
            anyVisible = true
          }
          const id = String(block.id ?? `call_${index}`)
          blocks.set(index, { kind: "call", id, name, args: "", hidden, at })
          if (!hidden) {
            out.push(emit.callStart(at, id, name))
            shown = true
          }
        } else blocks.set(index, { kind: "other" })
        return
      }
      case "content_block_delta": {
        const block = blocks.get(typeof e.index === "number" ? e.index : -1)
        const delta = isRecord(e.delta) ? e.delta : {}
        if (block?.kind === "text" && delta.type === "text_delta" && typeof delta.text === "string" && delta.text !== "") {
          const first = block.at < 0
          if (first) block.at = textCount++
          block.text += delta.text
          out.push(emit.text(block.at, delta.text, first && texted))
          texted = true
          shown = true
        } else if (block?.kind === "call" && delta.type === "input_json_delta" && typeof delta.partial_json === "string") {
          block.args += delta.partial_json
          if (!block.hidden && delta.partial_json !== "") out.push(emit.callDelta(block.at, delta.partial_json))
        }
        return
      }
      case "content_block_stop": {
        const block = blocks.get(typeof e.index === "number" ? e.index : -1)
        if (block?.kind === "text" && block.at >= 0) out.push(emit.textEnd(block.at, block.text))
        if (block?.kind === "call" && !block.hidden) {
          // A call without arguments (Anthropic sends `""`): `{}`, which an agent parses.
          const filled = block.args.trim() === ""
          if (filled) block.args = "{}"
          out.push(emit.callEnd(block.at, block.id, block.name, block.args, filled))
        }
        return
      }
      case "message_delta": {
        const delta = isRecord(e.delta) ? e.delta : {}
        if (delta.stop_reason !== undefined && delta.stop_reason !== null) stopReason = delta.stop_reason
        usage = usageOver(usage, e.usage)
        billed = billedOf(e.usage) ?? billed
        return
      }
      case "message_stop":
        stop()
        return
      case "error":
        fail(chatError(500, JSON.stringify(e)).body)
        return
      default:
        return
    }
  }
  const drain = () => out.splice(0, out.length).join("")
  return {
    push: (bytes: Uint8Array) => {
      for (const m of decoder.push(bytes)) onEvent(m.data)
      return drain()
    },
    end: () => {
      if (!done) {
        if (!answered) fail(errorBody("server_error", "the upstream's stream carried no answer (no message_start)"))
        else if (stopReason !== null) stop()
        else fail(errorBody("server_error", "the upstream's stream ended before its answer did"))
      }
      return drain()
    },
    hidden: () => pending,
    assistant: (): ReadonlyArray<unknown> => [{
      role: "assistant",
      content: [...blocks.entries()].sort(([a], [b]) => a - b).flatMap(([, b]): ReadonlyArray<Json> =>
        b.kind === "text"
          ? (b.text === "" ? [] : [{ type: "text", text: b.text }])
          : b.kind === "call"
          ? [{ type: "tool_use", id: b.id, name: b.name, input: (() => {
            const input = parseJson(b.args === "" ? "{}" : b.args)
            return isRecord(input) ? input : {}
          })() }]
          : []
      )
    }],
    next: () => {
      earlier.push(billed ?? usage)
      usage = noUsage
      billed = null
      stopReason = null
      answered = false
      done = false
      pending = null
      visibleCalls = 0
      blocks = new Map()
      messageId = null
      shown = false
      decoder = Sse.makeDecoder()
    },
    stop: () => {
      pending = null
      out.push(emit.finish("end_turn", anyVisible, sum([...earlier, billed ?? usage])))
      return drain()
    },
    hops: () => ({ count: earlier.length + 1, carried: answered ? usage.input + usage.write + usage.read : null }),
    /**
     * The answer ended by an error of the gateway's (`chatError`'s body: the upstream's stream broke off, or a
     * continuation after hidden calls failed) as the protocol's error event, numbered on from the events sent; `""`
     * when the agent's answer had ended already.
     */
    error: (body: Json) => {
      if (done && pending === null) return drain()
      pending = null
      fail(body)
      return drain()
    }
  }
}

/**
 * A translator of one streamed Anthropic answer into Chat Completions chunks as its events arrive
 * (`anthropicStreamReader` writing `chat.completion.chunk`s, see the module docblock): an error is an error chunk
 * (`data: {"error":…}`, no `[DONE]`).
 */
export const streamTranslator = (model: string, hiddenTools: ReadonlySet<string>, request: Json = {}) => {
  let id: string | null = null
  const created = Math.floor(Date.now() / 1000)
  const chunk = (delta: Json, finish: unknown = null, extra: Json = {}) =>
    data({ id: completionIdOf(id), object: "chat.completion.chunk", created, model, choices: [{ index: 0, delta, finish_reason: finish }], ...extra })
  return anthropicStreamReader(hiddenTools, {
    start: (messageId) => {
      id = messageId
      return chunk({ role: "assistant", content: "" })
    },
    text: (_block, delta, lead) => chunk({ content: (lead ? "\n\n" : "") + delta }),
    textEnd: () => "",
    callStart: (at, callId, name) => chunk({ tool_calls: [{ index: at, id: callId, type: "function", function: { name, arguments: "" } }] }),
    callDelta: (at, delta) => chunk({ tool_calls: [{ index: at, function: { arguments: delta } }] }),
    callEnd: (at, _id, _name, args, filled) => filled ? chunk({ tool_calls: [{ index: at, function: { arguments: args } }] }) : "",
    finish: (stopReason, calls, usage) => {
      const all = chatUsageOf(usage)
      return [
        chunk({}, finishReasonOf(stopReason, calls), wantsUsage(request) ? {} : { usage: all }),
        wantsUsage(request) ? data({ id: completionIdOf(id), object: "chat.completion.chunk", created, model, choices: [], usage: all }) : "",
        "data: [DONE]\n\n"
      ].join("")
    },
    error: (body) => data(body)
  })
}
