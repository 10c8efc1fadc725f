/**
 * GatewaySwitchOpenAi: provider switches between the two OpenAI protocols (issue 14 items 4 and 5, docs/gateway.md
 * "Between the two OpenAI protocols"): a Chat Completions agent (pi, opencode, aider) whose model routes to an
 * `openai-responses` instance, and a Responses agent (Codex) whose model routes to an `openai-chat` one. No I/O:
 * `GatewaySwitched` serves both, with `GatewaySwitchWire.chatToResponses` and `GatewaySwitchWire.responsesToChat`,
 * built of this module's parts.
 *
 * Nothing is converted here that another switch converts already: each direction is the composition of two existing
 * ones through Anthropic Messages, the form every switch's fit works on (`GatewaySwitch.fitMessages`).
 *
 * - **The request** (`viaAnthropic`): the agent's request in Anthropic's form as the switches to Anthropic read it
 *   (`GatewaySwitchAnthropic.requestOfChat`, `GatewaySwitchResponsesAnthropic.requestOfResponses`: system prompt,
 *   messages with tool calls and results, tools, `tool_choice`, stop sequences), with the agent's own tool call ids
 *   (no Anthropic upstream reads them: they go out as the agent sent them, and a stub's ref is `tool:<the agent's id>`),
 *   then fitted and encoded by the switch from `/v1/messages` to the target (`GatewaySwitchResponses.toResponses`,
 *   `GatewaySwitch.toChat`; media too: `image_url` <-> `input_image`, `file` <-> `input_file` through Anthropic's
 *   `image` and `document` blocks, `GatewaySwitchMedia`): stubs, then deferral with a pointer, then a summary, the agent's newest turn unchanged, each
 *   message counted as what goes out. The pointer, the summaries, `Fit.leftOut` and `Fit.summarised` count the
 *   agent's messages (`GatewaySwitchAnthropic.inAgentMessages`).
 * - **The answer**: the target's answer read by the switch from `/v1/messages` (`GatewaySwitchWire.responses`,
 *   `GatewaySwitchWire.chat`: hidden `thread_read` calls, continuations, usage with cached tokens; but the upstream's
 *   call ids kept, `agentCallId`) into an Anthropic message, then written in the agent's protocol by the switch to Anthropic (`GatewaySwitchAnthropic.completionOf`,
 *   `GatewaySwitchResponsesAnthropic.responseOf`). A stream is the two translators chained (`chained`): the target's
 *   events into Anthropic's as they arrive, those into the agent's (`chat.completion.chunk`s; Responses events with
 *   their `sequence_number`s), one answer across hidden rounds.
 * - **Errors** in OpenAI's shape (`openAiError`): the upstream's own error body as it is (it is OpenAI's already), an
 *   overflow (OpenAI's `context_length_exceeded`, llama.cpp's `exceed_context_size_error`, "maximum context length …")
 *   as the agent's `context_length_exceeded` 400 with the upstream's figures.
 */
import { isRecord, parseJson } from "./GatewayDialect.js"
import * as GatewaySwitch from "./GatewaySwitch.js"
import * as GatewaySwitchAnthropic from "./GatewaySwitchAnthropic.js"
import type * as GatewaySwitchWire from "./GatewaySwitchWire.js"

type Json = Record<string, unknown>

/**
 * A converted conversation with the agent's own call ids (`Converted.callIds`) in place of the ones made safe for
 * Anthropic: an OpenAI upstream takes the agent's, and the thread's tool items are stored under them.
 */
export const withAgentIds = (c: GatewaySwitchAnthropic.Converted): GatewaySwitchAnthropic.Converted => {
  const raw = (id: unknown) => c.callIds.get(String(id)) ?? String(id)
  return {
    ...c,
    messages: c.messages.map((m) =>
      Array.isArray(m.content)
        ? {
          ...m,
          content: m.content.map((b) =>
            isRecord(b) && b.type === "tool_use" ? { ...b, id: raw(b.id) } : isRecord(b) && b.type === "tool_result" ? { ...b, tool_use_id: raw(b.tool_use_id) } : b
          )
        }
        : m
    ),
    callIds: new Map()
  }
}

/**
 * A call id of the OpenAI upstream's answer as the OpenAI agent gets it: the upstream's own (an OpenAI agent and
 * upstream take any id, so Kimi's `functions.bash:0` comes back and goes out again as it came, not in Anthropic's
 * safe form, `GatewaySwitch.toolUseId`); an empty id in that form (the agent needs one to answer the call).
 */
export const agentCallId = (id: string): string => id === "" ? GatewaySwitch.toolUseId(id) : id

/** The agent's output limit (`max_tokens`, `max_completion_tokens` or `max_output_tokens`); `undefined` when none. */
const askedOutput = (body: Json): number | undefined =>
  [body.max_tokens, body.max_completion_tokens, body.max_output_tokens].find((n): n is number => typeof n === "number" && n > 0)

/**
 * An OpenAI agent's request fitted for the other OpenAI protocol (see the module docblock): `request` reads the agent's
 * body in Anthropic's form, `target` is the switch from `/v1/messages` that fits and encodes it.
 */
export const viaAnthropic = (
  request: (body: Json) => GatewaySwitchAnthropic.AnthropicRequest,
  target: (input: GatewaySwitch.FitInput) => GatewaySwitch.FitResult
) =>
(input: GatewaySwitch.FitInput): GatewaySwitch.FitResult => {
  const { body } = input
  const read = request(body)
  const converted = withAgentIds(read.converted)
  const asked = askedOutput(body)
  const anthropic: Json = {
    model: body.model,
    ...(asked === undefined ? {} : { max_tokens: asked }),
    ...(converted.system === "" ? {} : { system: converted.system }),
    messages: converted.messages,
    ...(read.tools.length === 0 ? {} : { tools: read.tools }),
    ...(read.choice === undefined ? {} : { tool_choice: read.choice }),
    ...(typeof body.temperature === "number" ? { temperature: body.temperature } : {}),
    ...(typeof body.top_p === "number" ? { top_p: body.top_p } : {}),
    ...(read.stop.length === 0 ? {} : { stop_sequences: read.stop }),
    ...(body.stream === true ? { stream: true } : {})
  }
  const counts = GatewaySwitchAnthropic.inAgentMessages(converted.sources, input)
  const fitted = target({ ...input, ...counts.input, body: anthropic })
  return fitted._tag === "overflow" ? fitted : { ...fitted, fit: counts.fit(fitted.fit) }
}

/**
 * An OpenAI upstream's error (its status and body text) for an OpenAI agent: an overflow as the agent's
 * `context_length_exceeded` 400 (`GatewaySwitch.anthropicError` reads the upstream's forms and figures,
 * `GatewaySwitchAnthropic.chatError` writes OpenAI's words); another error body of OpenAI's shape as it is (its
 * `type`, `param`, `code` kept); anything else as `chatError` makes it.
 */
export const openAiError = (status: number, text: string): { readonly status: number; readonly body: Json } => {
  const read = GatewaySwitch.anthropicError(status, text)
  const message = isRecord(read.body.error) ? String(read.body.error.message ?? "") : ""
  if (read.status === 400 && message.startsWith("prompt is too long")) return GatewaySwitchAnthropic.chatError(400, JSON.stringify(read.body))
  const parsed = parseJson(text)
  const error = isRecord(parsed) && isRecord(parsed.error) ? parsed.error : null
  if (error !== null && typeof error.message === "string") {
    return {
      status,
      body: { error: { message: error.message, type: typeof error.type === "string" ? error.type : GatewaySwitchAnthropic.errorTypeOf(status), param: error.param ?? null, code: error.code ?? null } }
    }
  }
  return GatewaySwitchAnthropic.chatError(read.status, JSON.stringify(read.body))
}

/**
 * A whole answer's failure as the switch from `/v1/messages` reads it (`failureOf`: Anthropic's shape) in OpenAI's;
 * `null` for an answer.
 */
export const failureIn = (failureOf: (answer: unknown) => { readonly status: number; readonly body: Json } | null) => (answer: unknown) => {
  const failure = failureOf(answer)
  return failure === null ? null : GatewaySwitchAnthropic.chatError(failure.status, JSON.stringify(failure.body))
}

/**
 * Two stream translators chained (see the module docblock): `upstream` reads the target's stream into Anthropic's
 * events (hidden calls, hops, usage, the continuation's assistant output: its interface is the chain's), `agent` reads
 * those events into the agent's protocol. One answer for the agent: `agent` is ended only when `upstream`'s message is
 * (not when a hop's only calls were hidden: the continuation's events join it).
 */
export const chained = (upstream: GatewaySwitchWire.Translator, agent: GatewaySwitchWire.Translator): GatewaySwitchWire.Translator => {
  const encoder = new TextEncoder()
  const feed = (text: string) => text === "" ? "" : agent.push(encoder.encode(text))
  return {
    push: (chunk) => feed(upstream.push(chunk)),
    end: () => {
      const tail = feed(upstream.end())
      return upstream.hidden() === null ? tail + agent.end() : tail
    },
    hidden: upstream.hidden,
    assistant: upstream.assistant,
    next: upstream.next,
    stop: () => feed(upstream.stop()) + agent.end(),
    hops: upstream.hops,
    // The gateway's error goes to the agent's side (already the agent's shape), numbered on there.
    ...(agent.error === undefined ? {} : { error: agent.error })
  }
}
