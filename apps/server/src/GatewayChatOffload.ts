/**
 * GatewayChatOffload: Baton's tool-result offload on a gateway OpenAI Chat Completions request
 * (`POST /v1/chat/completions`: pi, opencode, aider; issue 14 item 3, docs/gateway.md "On the way out"). The policy
 * and the rewrite are `GatewayOffload`'s (`plan`, shared with Anthropic Messages and OpenAI Responses); this module
 * says what differs on the Chat Completions wire:
 *
 * - The history is `messages` after the leading `system` / `developer` messages (the system prompt, counted as fixed
 *   tokens and sent back in front as they were). A unit is an `assistant` message's `tool_calls` with the `tool`
 *   messages answering them (one per call, `tool_call_id`); every other message is a unit of its own. The agent's
 *   newest input (the messages after the last assistant message) is pinned: it goes out as sent.
 * - A stub replaces a `tool` message's `content` (a string or text parts) with the stub line
 *   (`ToolResultOffload.stubText`, the ref `tool:<call id>`); the message keeps its `tool_call_id` (and `name`), the
 *   assistant's `tool_calls` stay as sent. A `tool` message holding a part that is not text (an `image_url`) is never
 *   stubbed: the thread records such a part as `[type]`, so `thread_read` could not give it back.
 * - `thread_read` is offered as a function tool after the agent's tools
 *   (`{"type":"function","function":{"name":"thread_read","description","parameters"}}`).
 * - Pricing: as for Responses (`GatewayResponsesOffload.openAiCache`, through `ToolResultOffload.pricingOf`): a Chat
 *   upstream caches prompts by prefix by itself (OpenAI, and the OpenAI-compatible servers that cache: vLLM's and
 *   llama.cpp's prefix caches), with no write premium, so the write multiplier is 1; reads `cacheRead / input`.
 * - The upstream's `thread_read` calls: answered by the gateway when every call of the reply's `tool_calls` is one,
 *   and continued; beside the agent's own calls (`besideOf`) answered without a continuation, the agent getting the
 *   reply without them (a stream's held chunks without their deltas, the later calls' `index` numbered down) and the
 *   expansion ending with the gateway's `tool` answers (the agent's own `tool` messages follow them). The continuation sends the assistant message (`role`, `content`, `tool_calls`
 *   as assembled) and a `tool` message per call. A stream's chunks pass on until the chunk carrying the first delta of
 *   a `thread_read` call (its `function.name`; a name that comes in pieces is held from its first piece while it may
 *   still become `thread_read`, and released once it cannot), and are held from there (that hop's `finish_reason`, usage chunk and
 *   `[DONE]` included; text that chunk carries beside the call goes on, `textBeside`, and the held chunks' text at the
 *   hop's end when the calls are answered); the continuation's chunks join the completion the agent is receiving: their `id` and
 *   `created` are the first hop's, the `role` of their deltas dropped (the agent has it), their content deltas
 *   appended to the text already sent. Their `tool_calls` keep their `index`: a hop that is continued had only
 *   `thread_read` calls, all held, so the agent has seen no call before the continuation's. A continuation the
 *   upstream refuses ends the stream with an error chunk (`data: {"error":{…}}`, the upstream's error object, as
 *   OpenAI reports an error in a stream) and no `[DONE]` (the run fails).
 * - The hidden rounds stay (`expansions`): the assistant message the agent received is replaced in later requests by
 *   the messages the upstream exchanged in its place (the call, the gateway's answers, the final assistant message as
 *   the upstream sent it), so they extend the continuation's request.
 *
 * Pure: no I/O.
 */
import { ThreadRead } from "@baton/orchestration"
import { OpenAiChat, Sse } from "@baton/providers"
import * as Crypto from "node:crypto"
import * as GatewayChat from "./GatewayChat.js"
import { isRecord, parseJson } from "./GatewayDialect.js"
import * as GatewayOffload from "./GatewayOffload.js"
import { readLimitNote } from "./GatewayOffload.js"
import * as GatewaySwitch from "./GatewaySwitch.js"
import { openAiCache } from "./GatewayResponsesOffload.js"

/** Whether `m` is a system prompt message (`system` or `developer`). */
const isSystem = (m: unknown) => isRecord(m) && (m.role === "system" || m.role === "developer")

/** How many of `messages` lead as the system prompt. */
const leadOf = (messages: ReadonlyArray<unknown>): number => {
  let k = 0
  while (k < messages.length && isSystem(messages[k])) k++
  return k
}

const messagesOf = (body: Record<string, unknown>): ReadonlyArray<unknown> | null => (Array.isArray(body.messages) ? body.messages : null)

/** A tool call's function (`{}` when absent). */
const fnOf = (call: Record<string, unknown>): Record<string, unknown> => (isRecord(call.function) ? call.function : {})

/** The Chat Completions shape of the rewrite (see the module docblock). */
export const shape: GatewayOffload.Shape = {
  history: (body) => {
    const messages = messagesOf(body)
    return messages === null ? null : messages.slice(leadOf(messages))
  },
  withHistory: (body, history) => {
    const messages = messagesOf(body) ?? []
    return { ...body, messages: [...messages.slice(0, leadOf(messages)), ...history] }
  },
  calls: (m) =>
    m.role === "assistant" && Array.isArray(m.tool_calls)
      ? m.tool_calls.flatMap((c): ReadonlyArray<GatewayOffload.Call> => {
        if (!isRecord(c) || typeof c.id !== "string") return []
        const fn = fnOf(c)
        return [{ id: c.id, name: String(fn.name ?? "tool"), argumentsText: typeof fn.arguments === "string" ? fn.arguments : JSON.stringify(fn.arguments ?? {}) }]
      })
      : [],
  answers: (m) => (m.role === "tool" && typeof m.tool_call_id === "string" ? [m.tool_call_id] : []),
  model: (m) => m.role === "assistant",
  joins: false,
  stub: (m, stubbed, calls) =>
    m.role === "tool" && typeof m.tool_call_id === "string" && stubbed.has(m.tool_call_id)
      ? { ...m, content: GatewayOffload.stubLine(m.tool_call_id, calls.get(m.tool_call_id), GatewayOffload.contentChars(m.content)) }
      : m,
  opaque: (m) => m.role === "tool" && GatewayOffload.hasNonText(m.content),
  offer: (body) => {
    const tools = Array.isArray(body.tools) ? body.tools : null
    return tools === null || tools.some((t) => isRecord(t) && isRecord(t.function) && t.function.name === ThreadRead.definition.name)
      ? tools
      : [...tools, { type: "function", function: { name: ThreadRead.definition.name, description: ThreadRead.definition.description, parameters: ThreadRead.definition.inputSchema } }]
  },
  system: (body) => (messagesOf(body) ?? []).slice(0, leadOf(messagesOf(body) ?? [])),
  pricing: openAiCache,
  readsBeside: true
}

/**
 * An assistant message as the continuation sends it back: its `content` (`null` when none) and `tool_calls`; what a
 * whole answer adds beside them (`refusal: null`, `annotations`, a server's `reasoning_content`) is left out, so a
 * streamed and a whole hop go back alike.
 */
export const assistantOf = (message: Record<string, unknown>): Record<string, unknown> => ({
  role: "assistant",
  content: message.content ?? null,
  ...(Array.isArray(message.tool_calls) && message.tool_calls.length > 0 ? { tool_calls: withIds(message.tool_calls) } : {})
})

/**
 * Calls with an id each: a call without one (missing or empty: some OpenAI-compatible servers send none) gets
 * `call_` and a digest of the calls and its place, the same on every reading of the same answer (the continuation,
 * its answers and the recorded expansion agree). Before branch `b46gw` a whole answer's `thread_read` call without an
 * id was not the gateway's to answer and reached the agent, a call of a tool it never offered (a streamed one was
 * answered as `tool_call_id: ""`).
 */
const withIds = (calls: ReadonlyArray<unknown>): ReadonlyArray<unknown> => {
  if (calls.every((c) => !isRecord(c) || (typeof c.id === "string" && c.id !== ""))) return calls
  const digest = Crypto.createHash("sha256").update(JSON.stringify(calls)).digest("hex").slice(0, 16)
  return calls.map((c, i) => (isRecord(c) && (typeof c.id !== "string" || c.id === "") ? { ...c, id: `call_${digest}_${i}` } : c))
}

/**
 * The `thread_read` calls of a reply (`content`: the one assistant message) when the gateway can answer them itself:
 * every call of its `tool_calls` is a `thread_read` function call with an id (at least one). `null` otherwise (no
 * call, or calls of the agent's own tools beside them: such a reply goes to the agent as it is).
 */
export const readsOf = (content: unknown): ReadonlyArray<GatewayOffload.Read> | null => {
  const message = Array.isArray(content) ? content[0] : undefined
  if (!isRecord(message) || !Array.isArray(message.tool_calls)) return null
  const calls = message.tool_calls.filter(isRecord)
  if (calls.length === 0 || !calls.every((c) => fnOf(c).name === ThreadRead.definition.name && typeof c.id === "string")) return null
  return calls.map((c) => {
    const args = fnOf(c).arguments
    return { id: c.id as string, input: typeof args === "string" ? parseJson(args) ?? {} : args ?? {} }
  })
}

/**
 * The `thread_read` calls of a reply (`content`: the one assistant message) beside calls of the agent's own tools (at
 * least one of each; `null` otherwise), and the message without them (what the agent receives: without `tool_calls`
 * when none is left). `alone`: also when every call is a `thread_read` (the last round, `Offload.besideOf`).
 */
export const besideOf = (content: unknown, alone = false): GatewayOffload.Beside | null => {
  const message = Array.isArray(content) ? content[0] : undefined
  if (!isRecord(message) || !Array.isArray(message.tool_calls)) return null
  const calls = message.tool_calls.filter(isRecord)
  const reads = calls.filter((c) => fnOf(c).name === ThreadRead.definition.name && typeof c.id === "string")
  if (reads.length === 0 || (reads.length === calls.length && !alone)) return null
  const { tool_calls: _, ...rest } = message
  const left = message.tool_calls.filter((c) => !reads.includes(c as Record<string, unknown>))
  return {
    reads: reads.map((c) => {
      const args = fnOf(c).arguments
      return { id: c.id as string, input: typeof args === "string" ? parseJson(args) ?? {} : args ?? {} }
    }),
    visible: [left.length === 0 ? rest : { ...message, tool_calls: left }]
  }
}

/** The text of a Chat message's `content` (a string, or its text parts'); `""` when none. */
const textOf = (content: unknown): string =>
  typeof content === "string"
    ? content
    : Array.isArray(content)
    ? content.map((p) => (isRecord(p) && typeof p.text === "string" ? p.text : "")).join("")
    : ""

/**
 * A message's `content` with `before` (the hidden rounds' text) in front, as a stream's text deltas join: a string
 * (`null` as none), or text parts with a text part first.
 */
const prefixed = (content: unknown, before: string): unknown =>
  before === "" ? content : Array.isArray(content) ? [{ type: "text", text: before }, ...content] : before + (typeof content === "string" ? content : "")

/** The fields in which OpenAI-compatible servers send a message's reasoning as text. */
const reasoningFields = ["reasoning_content", "reasoning"] as const

/**
 * A whole answer's body whose first choice's message has the tool calls of `content`'s message (`besideOf`'s
 * `visible`), and the text of the hidden rounds before it (`rounds`: each round's content, the assistant message as
 * the upstream sent it, `roundOfBody`) in front of its own text, and their reasoning (`reasoning_content`,
 * `reasoning`) in front of its own, as a stream passes them on as they come (before branches b47gw and b48gw the
 * whole answer lost them). `note`: Baton's note (`readLimitNote`) as the content of an answer left with no text and no
 * call (`Offload.withContent`).
 */
export const withContent = (
  body: Record<string, unknown>,
  content: ReadonlyArray<unknown>,
  rounds: ReadonlyArray<ReadonlyArray<unknown>> = [],
  note = true
): Record<string, unknown> => {
  const message = content[0]
  const choices = Array.isArray(body.choices) ? body.choices : []
  const at = choices.findIndex((c) => isRecord(c) && (c.index ?? 0) === 0)
  const choice = choices[at]
  const mine = isRecord(choice) ? choice.message : undefined
  if (!isRecord(message) || !isRecord(choice) || !isRecord(mine)) return body
  const before = rounds.map((r) => textOf(isRecord(r[0]) ? r[0].content : null)).join("")
  // The hidden rounds' reasoning before the answer's own, field by field (`roundOfBody`), as a stream's deltas join.
  const reasoning = Object.fromEntries(reasoningFields.flatMap((k) => {
    const said = rounds.map((r) => (isRecord(r[0]) && typeof r[0][k] === "string" ? r[0][k] : "")).join("")
    return said === "" ? [] : [[k, said + (typeof mine[k] === "string" ? mine[k] : "")]]
  }))
  const own = { ...(before === "" ? mine : { ...mine, content: prefixed(mine.content, before) }), ...reasoning }
  if (Array.isArray(message.tool_calls)) {
    return { ...body, choices: choices.map((c, i) => (i === at ? { ...choice, message: { ...own, tool_calls: message.tool_calls } } : c)) }
  }
  // No call left (the last round's reads taken out): the answer ended its turn; with no text either, Baton's note
  // (`readLimitNote`) is its content, never an answer without content.
  const { tool_calls: _, ...without } = own
  const finish = choice.finish_reason === "tool_calls" ? { finish_reason: "stop" } : {}
  const said = typeof without.content === "string" ? without.content !== "" : Array.isArray(without.content) && without.content.length > 0
  const noted = said || !note ? without : { ...without, content: readLimitNote }
  return { ...body, choices: choices.map((c, i) => (i === at ? { ...choice, ...finish, message: noted } : c)) }
}

/**
 * A whole answer's body with each choice's calls under distinct ids (`GatewaySwitch.distinctIds`: a repeated id gets
 * `_2`, `_3`, …), as a streamed hop gives them (`makeHop`); the same object when no id repeats. Proxies in front of
 * Gemini give parallel calls one shared id; before branch b47gw a whole answer reached the agent with them, and the
 * agent could not answer the calls apart.
 */
export const callsApart = (body: Record<string, unknown>): Record<string, unknown> => {
  if (!Array.isArray(body.choices)) return body
  let changed = false
  const choices = body.choices.map((choice) => {
    const message = isRecord(choice) ? choice.message : undefined
    if (!isRecord(choice) || !isRecord(message) || !Array.isArray(message.tool_calls)) return choice
    const distinct = GatewaySwitch.distinctIds()
    let renamed = false
    const calls = message.tool_calls.map((c) => {
      if (!isRecord(c) || typeof c.id !== "string" || c.id === "") return c
      const id = distinct(c.id)
      if (id === c.id) return c
      renamed = true
      return { ...c, id }
    })
    if (!renamed) return choice
    changed = true
    return { ...choice, message: { ...message, tool_calls: calls } }
  })
  return changed ? { ...body, choices } : body
}

/** The `tool` messages of the gateway's answers to `thread_read` calls. */
const answerMessages = (answers: ReadonlyArray<GatewayOffload.Answer>) => answers.map((a) => ({ role: "tool", tool_call_id: a.id, content: a.output }))

/** The request that continues after the upstream's `thread_read` calls: `body` with the assistant message and a `tool` message per answer. */
export const continuation = (
  body: Record<string, unknown>,
  content: ReadonlyArray<unknown>,
  answers: ReadonlyArray<GatewayOffload.Answer>
): Record<string, unknown> => ({
  ...body,
  messages: [
    ...(body.messages as ReadonlyArray<unknown>),
    ...content,
    ...answerMessages(answers)
  ]
})

/** The reply's content (the assistant message, as `assistantOf` sends it back) of a whole answer's body; `null`: none. */
export const contentOfBody = (body: unknown): ReadonlyArray<unknown> | null => {
  const message = GatewayChat.replyOfBody(body).messages[0]?.message
  return isRecord(message) ? [assistantOf(message)] : null
}

/**
 * A hidden round's content for `withContent`: its assistant message as `assistantOf` gives it, with the reasoning the
 * server sent beside it (`reasoning_content`: DeepSeek, vLLM, llama.cpp; `reasoning`: OpenRouter) kept; `null`: none.
 */
export const roundOfBody = (body: unknown): ReadonlyArray<unknown> | null => {
  const message = GatewayChat.replyOfBody(body).messages[0]?.message
  if (!isRecord(message)) return null
  const kept = Object.fromEntries(reasoningFields.filter((k) => typeof message[k] === "string").map((k) => [k, message[k]]))
  return [{ ...assistantOf(message), ...kept }]
}

/** An SSE event as OpenAI sends a chunk: a `data:` line (an event name only when the upstream sent one other than the default). */
const encodeEvent = (event: string, data: string) => `${event === "" || event === "message" ? "" : `event: ${event}\n`}${Sse.dataLines(data)}\n\n`

/**
 * A continuation's chunk as the agent receives it: the first hop's `id` and `created` (`head`), and no `role` in the
 * deltas (the agent has the first hop's).
 */
const joined = (data: Record<string, unknown>, head: Readonly<Record<string, unknown>>): Record<string, unknown> => ({
  ...data,
  ...head,
  ...(Array.isArray(data.choices)
    ? {
      choices: data.choices.map((c) => {
        if (!isRecord(c) || !isRecord(c.delta) || !("role" in c.delta)) return c
        const { role: _, ...delta } = c.delta
        return { ...c, delta }
      })
    }
    : {})
})

/**
 * A chunk whose choice 0 carries text (`content`) beside tool calls, split in two: `visible` the text (and `role`) with
 * no `finish_reason` and nothing else, `rest` the chunk without them; `null` when its choice 0 carries no text.
 */
const textBeside = (data: Record<string, unknown>): { visible: Record<string, unknown>; rest: Record<string, unknown> } | null => {
  const choices = Array.isArray(data.choices) ? data.choices : []
  const at = choices.findIndex((c) => isRecord(c) && (c.index ?? 0) === 0)
  const choice = choices[at]
  if (!isRecord(choice) || !isRecord(choice.delta) || typeof choice.delta.content !== "string" || choice.delta.content === "") return null
  const { content, role, ...others } = choice.delta
  const { usage: _, ...chunk } = data
  return {
    visible: { ...chunk, choices: [{ ...choice, delta: { ...(role !== undefined ? { role } : {}), content }, finish_reason: null }] },
    rest: { ...data, choices: choices.map((c, i) => (i === at ? { ...choice, delta: others } : c)) }
  }
}

/**
 * A streamed hop of a Chat Completions answer as the agent sees it (see the module docblock): `previous` is the hop
 * whose `thread_read` calls this one continues (`null`: the first hop, whose chunks pass on as they are until a
 * `thread_read` call starts).
 */
export const makeHop = (previous: GatewayOffload.ReadsEnd | null): GatewayOffload.Hop => {
  const first = previous === null
  /** Whether text reached the agent in this answer so far (else the last round's end gives Baton's note). */
  let texted = previous?.texted === true
  let head: Readonly<Record<string, unknown>> | undefined = previous?.head
  const decoder = Sse.makeDecoder()
  const assembler = GatewayChat.replyAssembler()
  /** The name of each tool call so far, by `index`. */
  const names = new Map<number, string>()
  /** The calls (by `index`) whose arguments have begun: their names are whole. */
  const argued = new Set<number>()
  const slotOf = OpenAiChat.callSlots()
  /**
   * The held chunks: the event's name, the chunk as encoded (`null`: not JSON), its text, and the call (`names`'
   * key) of each of its choice's `tool_calls` deltas.
   */
  let held:
    | Array<{ readonly event: string; readonly data: Record<string, unknown> | null; readonly text: string; readonly slots?: ReadonlyArray<number> }>
    | null = null
  /** The id the agent gets for each call (by slot): the upstream's, made distinct in the answer (`distinctIds`). */
  const agentIds = new Map<number, string>()
  const distinct = GatewaySwitch.distinctIds()
  /**
   * A chunk with its calls' deltas as the agent tells the calls apart (the chunk itself when nothing changes): each
   * delta's `index` its call's slot (`callSlots`), its `id` distinct in the answer. Proxies in front of Gemini give
   * parallel calls one `index` 0 (and one shared id, or none); an agent assembles deltas by `index`, so before branch
   * `b46gw` it got them as one call (names and arguments glued) and two calls of one id.
   */
  const apart = (data: Record<string, unknown>, choice: unknown, delta: Record<string, unknown>, slots: ReadonlyArray<number>): Record<string, unknown> => {
    const calls: ReadonlyArray<unknown> = Array.isArray(delta.tool_calls) ? delta.tool_calls : []
    const renamed = calls.map((c, k) => {
      const slot = slots[k]!
      if (!isRecord(c) || slot < 0) return c
      let id = c.id
      if (typeof c.id === "string" && c.id !== "") {
        id = agentIds.get(slot) ?? distinct(c.id)
        agentIds.set(slot, id as string)
      }
      const index = typeof c.index === "number" ? slot : c.index
      return id === c.id && index === c.index ? c : { ...c, index, id }
    })
    if (renamed.every((c, k) => c === calls[k]) || !Array.isArray(data.choices)) return data
    return { ...data, choices: data.choices.map((c) => (c === choice ? { ...(choice as Record<string, unknown>), delta: { ...delta, tool_calls: renamed } } : c)) }
  }
  const contentOf = () => {
    const outcome = assembler.outcome()
    const message = outcome._tag === "completed" ? outcome.reply.messages[0]?.message : undefined
    return isRecord(message) ? [assistantOf(message)] : []
  }
  return {
    push: (chunk) => {
      assembler.push(chunk)
      let out = ""
      for (const m of decoder.push(chunk)) {
        const parsed = m.data === "[DONE]" ? undefined : parseJson(m.data)
        if (!isRecord(parsed)) {
          if (held === null) out += encodeEvent(m.event, m.data)
          else held.push({ event: m.event, data: null, text: encodeEvent(m.event, m.data) })
          continue
        }
        if (first && head === undefined && typeof parsed.id === "string") head = { id: parsed.id, ...(parsed.created !== undefined ? { created: parsed.created } : {}) }
        const before = held === null
        // Every call's name, held or not: a thread_read call that starts after the first (read, the agent's call,
        // read, each in chunks of its own as OpenAI streams them) is left out too (before, only the calls begun
        // before the hold were named, and such a second read reached the agent).
        const choice = Array.isArray(parsed.choices) ? parsed.choices.find((c) => isRecord(c) && (c.index ?? 0) === 0) : undefined
        const delta = isRecord(choice) && isRecord(choice.delta) ? choice.delta : {}
        const slots: Array<number> = []
        for (const c of Array.isArray(delta.tool_calls) ? delta.tool_calls : []) {
          if (!isRecord(c)) {
            slots.push(-1)
            continue
          }
          const at = slotOf(c)
          slots.push(at)
          const name = (names.get(at) ?? "") + (typeof fnOf(c).name === "string" ? fnOf(c).name as string : "")
          names.set(at, name)
          if (typeof fnOf(c).arguments === "string" && fnOf(c).arguments !== "") argued.add(at)
        }
        const data = apart(parsed, choice, delta, slots)
        // A call's name may come in pieces (the protocol makes every field of a delta a fragment): a call whose name
        // so far begins `thread_read` and whose arguments have not begun may still be one, so its chunks are held
        // too, and released as soon as no call is or may be one (before, the chunk with the first piece, `thread_`,
        // reached the agent before the call was recognised).
        const hold = [...names].some(([at, name]) =>
          name === ThreadRead.definition.name || (name !== "" && !argued.has(at) && ThreadRead.definition.name.startsWith(name))
        )
        if (held === null && hold) held = []
        else if (held !== null && !hold) {
          out += held.map((h) => h.text).join("")
          held = null
        }
        const sent = (d: Record<string, unknown>) => (first || head === undefined ? d : joined(d, head))
        const encode = (d: Record<string, unknown>, raw: string | null) =>
          first || head === undefined ? encodeEvent(m.event, raw ?? JSON.stringify(d)) : encodeEvent(m.event, JSON.stringify(joined(d, head)))
        const split = before && held !== null ? textBeside(data) : null
        if ((held === null || split !== null) && typeof delta.content === "string" && delta.content !== "") texted = true
        if (split !== null) {
          // The chunk that starts the hidden call also carries text: the text goes on (the agent assembles it before
          // the continuation's), the rest of the chunk is held.
          out += encode(split.visible, null)
          held!.push({ event: m.event, data: sent(split.rest), text: encode(split.rest, null), slots })
        } else if (held === null) out += encode(data, data === parsed ? m.data : null)
        else held.push({ event: m.event, data: sent(data), text: encode(data, data === parsed ? m.data : null), slots })
      }
      return out
    },
    end: (last = false) => {
      const text = held === null ? "" : held.map((h) => h.text).join("")
      if (held === null || assembler.outcome()._tag !== "completed") return { _tag: "release", held: text }
      const content = contentOf()
      const reads = readsOf(content)
      if (reads !== null && !last) {
        // The text of the held chunks (after the hidden call began) is the agent's: sent before the continuation's,
        // and counted as sent. Before branch `b46gw` it was dropped with the calls, and the last round's end gave
        // Baton's note as though the agent had no text.
        const said = held.flatMap((h) => {
          const choice = h.data !== null && Array.isArray(h.data.choices) ? h.data.choices.find((c) => isRecord(c) && (c.index ?? 0) === 0) : undefined
          const content = isRecord(choice) && isRecord(choice.delta) ? choice.delta.content : undefined
          if (h.data === null || typeof content !== "string" || content === "") return []
          const { usage: _, ...chunk } = h.data
          return [encodeEvent(h.event, JSON.stringify({ ...chunk, choices: [{ index: 0, delta: { content }, finish_reason: null }] }))]
        })
        return { _tag: "reads", reads, content, nextOffset: 0, held: text, head, texted: texted || said.length > 0, said: said.join("") }
      }
      const beside = besideOf(content, last)
      if (beside === null) return { _tag: "release", held: text }
      const noCall = !beside.visible.some((m) => isRecord(m) && Array.isArray(m.tool_calls))
      // The `index` of each thread_read call: its deltas are left out, the calls after it numbered down.
      const hidden = new Set([...names].filter(([, name]) => name === ThreadRead.definition.name).map(([at]) => at))
      // Nothing for the agent in the whole answer (no text, no call): Baton's note as a content delta before the
      // finish (before, the agent got a completion without content, ending its turn).
      const said = (beside.visible as ReadonlyArray<unknown>).some((m) => isRecord(m) && typeof m.content === "string" && m.content !== "")
      let note = noCall && !texted && !said
      const noted = (data: Record<string, unknown>, choices: ReadonlyArray<unknown>) => {
        if (!note || !choices.some((c) => isRecord(c) && (c.index ?? 0) === 0 && c.finish_reason != null)) return ""
        note = false
        const { usage: _, ...chunk } = data
        return encodeEvent("", JSON.stringify({ ...chunk, choices: [{ index: 0, delta: { content: readLimitNote }, finish_reason: null }] }))
      }
      const shown = held.flatMap((h) => {
        const data = h.data
        const choices = data !== null && Array.isArray(data.choices) ? data.choices : []
        const lead = data === null ? "" : noted(data, choices)
        const at = choices.findIndex((c) => isRecord(c) && (c.index ?? 0) === 0 && isRecord(c.delta) && Array.isArray(c.delta.tool_calls))
        if (data !== null && at < 0 && noCall && choices.some((c) => isRecord(c) && c.finish_reason === "tool_calls")) {
          const stopped = choices.map((c) => (isRecord(c) && c.finish_reason === "tool_calls" ? { ...c, finish_reason: "stop" } : c))
          return [lead + encodeEvent(h.event, JSON.stringify({ ...data, choices: stopped }))]
        }
        if (data === null || at < 0) return [lead + h.text]
        const choice = choices[at] as Record<string, unknown> & { delta: Record<string, unknown> & { tool_calls: Array<unknown> } }
        const calls = choice.delta.tool_calls.flatMap((c, k) => {
          const index = h.slots?.[k] ?? (isRecord(c) && typeof c.index === "number" ? c.index : k)
          if (hidden.has(index)) return []
          let before = 0
          for (const i of hidden) if (i < index) before++
          return [isRecord(c) && before > 0 ? { ...c, index: index - before } : c]
        })
        const { tool_calls: _, ...delta } = choice.delta
        // A chunk that carried only the hidden calls' deltas is left out.
        if (calls.length === 0 && Object.keys(delta).length === 0 && choice.finish_reason == null && data.usage == null && choices.length === 1) return []
        const finish = noCall && choice.finish_reason === "tool_calls" ? { finish_reason: "stop" } : {}
        const out = { ...data, choices: choices.map((c, i) => (i === at ? { ...choice, ...finish, delta: calls.length === 0 ? delta : { ...delta, tool_calls: calls } } : c)) }
        return [lead + encodeEvent(h.event, JSON.stringify(out))]
      })
      return { _tag: "beside", reads: beside.reads, content, held: shown.join("") }
    },
    content: contentOf,
    tokens: () => {
      const outcome = assembler.outcome()
      return outcome._tag === "completed" ? outcome.reply.tokens : null
    }
  }
}

/**
 * Where the hidden rounds go in later requests: the assistant message the agent received (`received`, one message)
 * is replaced by what the continuations added after the agent's request (`last` the last continuation, `sentCount`
 * the history entries of the agent's request as sent, after its system prompt) and the final assistant message as the
 * upstream sent it (`final`).
 */
export const expansions: GatewayOffload.Offload["expansions"] = (received, last, sentCount, final, fingerprint, beside) => {
  const messages = messagesOf(last) ?? []
  if (received[0] === undefined) return []
  // Answers beside the agent's calls follow as `tool` messages: the agent's own `tool` messages come after them.
  return [{ fingerprint: fingerprint(received[0]), messages: [...messages.slice(leadOf(messages) + sentCount), ...final, ...answerMessages(beside ?? [])] }]
}

/** The OpenAI Chat Completions offload (see the module docblock). */
export const offload: GatewayOffload.Offload = {
  shape,
  contentOfBody,
  roundOfBody,
  contentOfReply: (reply) => reply.messages.map((m) => m.message),
  readsOf,
  besideOf,
  withContent,
  callsApart,
  continuation,
  sendable: (body) => body,
  hop: makeHop,
  expansions,
  streamError: (body, message) => {
    const parsed = parseJson(body)
    const error = isRecord(parsed) && isRecord(parsed.error) ? parsed.error : { message, type: "server_error", param: null, code: null }
    return `data: ${JSON.stringify({ error })}\n\n`
  }
}
