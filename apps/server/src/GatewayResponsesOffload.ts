/**
 * GatewayResponsesOffload: Baton's tool-result offload on a gateway OpenAI Responses request (`POST /v1/responses`,
 * Codex; issue 14 item 3, docs/gateway.md "On the way out"). The policy and the rewrite are `GatewayOffload`'s
 * (`plan`, shared with Anthropic Messages); this module says what differs on the Responses wire:
 *
 * - The history is `input`, one entry per item. The model's entries are the items a reply's output sends back
 *   (assistant `message`, `reasoning`, `function_call`, `custom_tool_call`, …); consecutive model items are one
 *   response, so a unit is a response's items with the `function_call_output` (`custom_tool_call_output`) items
 *   answering its calls. The agent's newest input (the items after the last model item) is pinned: it goes out as sent.
 * - A stub replaces an output item's `output` with the stub line (`ToolResultOffload.stubText`, the ref
 *   `tool:<call_id>`); the item keeps its `type`, `call_id` and `id`.
 * - `thread_read` is offered as a function tool (`{"type":"function","name":"thread_read",…,"strict":false}`, after
 *   the agent's tools).
 * - Pricing: OpenAI caches prompts by itself; cache reads are billed at the instance's `cacheRead` (the multiplier
 *   `cacheRead / input`) and there is no write premium: an uncached token is billed at the input price, so the write
 *   multiplier is 1 (whatever `prices.cacheWrite` says, which OpenAI instances leave at 0). TTL: 5 minutes (OpenAI
 *   keeps a prefix cached for 5 to 10 minutes of inactivity: platform.openai.com/docs/guides/prompt-caching).
 * - The upstream's `thread_read` calls, as function calls or as custom tool calls (whose free-text `input` is read as
 *   the function form's JSON arguments; a text that is not JSON is answered with an error saying so): answered by
 *   the gateway when every call of the response is one; the continuation sends the response's output items and an
 *   output per call of the call's kind (`function_call_output`, `custom_tool_call_output`). A stream's events pass on
 *   until the `response.output_item.added` (or, without one, `.done`) of a `thread_read` call, and are held from there; the continuation's
 *   events join the response the agent is receiving (its `response.created` and `response.in_progress` dropped, its
 *   `output_index` numbered after the items already sent, `sequence_number` continued, its final `response.output`
 *   preceded by the items the agent already received). A continuation the upstream refuses ends the stream with a
 *   `response.failed` event carrying the upstream's error code and message (`server_error` when it had none).
 *   `thread_read` calls beside the agent's own (`besideOf`) are answered without a continuation: the agent gets the
 *   response without them (a stream's held events without the calls' events, the later items' `output_index`
 *   numbered down, `sequence_number` without gaps, `response.output` without them), and the expansion of the last
 *   item the agent received ends with the gateway's `function_call_output` answers (the agent's own outputs follow).
 *
 * Pure: no I/O.
 */
import { ToolResultOffload } from "@baton/context"
import { ThreadRead } from "@baton/orchestration"
import { Sse } from "@baton/providers"
import { isRecord, parseJson } from "./GatewayDialect.js"
import * as GatewayOffload from "./GatewayOffload.js"
import { readLimitNote } from "./GatewayOffload.js"
import * as GatewayResponses from "./GatewayResponses.js"

/** The item types a reply's output sends back that are the model's (besides assistant messages). */
const modelTypes = new Set(["function_call", "custom_tool_call", "reasoning", "compaction", "web_search_call", "local_shell_call", "file_search_call", "image_generation_call"])

const isCall = (item: Record<string, unknown>) => item.type === "function_call" || item.type === "custom_tool_call"
const isOutput = (item: Record<string, unknown>) => item.type === "function_call_output" || item.type === "custom_tool_call_output"

/**
 * OpenAI's cache pricing from an instance's prices (`ToolResultOffload.pricingOf` with no separate write price):
 * reads `cacheRead / input` (0.1 when the input price is 0), no write premium (1), a 5-minute TTL. See the module
 * docblock; the Chat Completions wire uses it too (`GatewayChatOffload`).
 */
export const openAiCache = (prices: GatewayOffload.Prices): ToolResultOffload.CachePricing =>
  prices.input > 0
    ? ToolResultOffload.pricingOf({ ...prices, cacheWrite: 0 }, 5 * 60_000)
    : { readMultiplier: 0.1, writeMultiplier: 1, ttlMs: 5 * 60_000 }

/** The Responses shape of the rewrite (see the module docblock). */
export const shape: GatewayOffload.Shape = {
  history: (body) => (Array.isArray(body.input) ? body.input : null),
  withHistory: (body, input) => ({ ...body, input }),
  calls: (item) =>
    isCall(item) && typeof item.call_id === "string"
      ? [{
        id: item.call_id,
        name: String(item.name ?? "tool"),
        argumentsText: typeof item.arguments === "string" ? item.arguments : typeof item.input === "string" ? item.input : JSON.stringify(item.arguments ?? item.input ?? {})
      }]
      : [],
  answers: (item) => (isOutput(item) && typeof item.call_id === "string" ? [item.call_id] : []),
  model: (item) => item.role === "assistant" || modelTypes.has(String(item.type)),
  joins: true,
  stub: (item, stubbed, calls) =>
    isOutput(item) && typeof item.call_id === "string" && stubbed.has(item.call_id)
      ? { ...item, output: GatewayOffload.stubLine(item.call_id, calls.get(item.call_id), GatewayOffload.contentChars(item.output)) }
      : item,
  opaque: (item) => isOutput(item) && GatewayOffload.hasNonText(item.output),
  offer: (body) => {
    const tools = Array.isArray(body.tools) ? body.tools : null
    return tools === null || tools.some((t) => isRecord(t) && t.name === ThreadRead.definition.name)
      ? tools
      : [...tools, { type: "function", name: ThreadRead.definition.name, description: ThreadRead.definition.description, strict: false, parameters: ThreadRead.definition.inputSchema }]
  },
  system: (body) => body.instructions ?? "",
  pricing: openAiCache,
  readsBeside: true
}

/** Whether `item` is a `thread_read` call the gateway can answer: a `function_call` or `custom_tool_call` of that name with a `call_id`. */
const isReadCall = (item: Record<string, unknown>) => isCall(item) && item.name === ThreadRead.definition.name && typeof item.call_id === "string"

/**
 * The answer to a `thread_read` custom tool call whose input text is not JSON (a custom tool's input is free text;
 * the gateway accepts the function form's JSON arguments there).
 */
export const customInputError = `thread_read: the input is not JSON; send the arguments as a JSON object: {"refs": "...", "offset"?: n, "limit"?: n}`

/** The read a `thread_read` call asks for (see `readsOf`). */
const readOf = (c: Record<string, unknown>): GatewayOffload.Read => {
  const id = c.call_id as string
  if (c.type === "function_call") return { id, input: typeof c.arguments === "string" ? parseJson(c.arguments) ?? {} : c.arguments }
  const input = typeof c.input === "string" ? parseJson(c.input) : c.input
  return input === undefined ? { id, input: null, invalid: customInputError } : { id, input }
}

/**
 * The `thread_read` calls of a response's output items when the gateway can answer them itself: every call of the
 * response (`function_call`, `custom_tool_call`) is a `thread_read` call (at least one). A function call's input is its
 * `arguments` parsed (`{}` when they do not parse: the read then says what the arguments should be); a custom tool
 * call's is its `input` text parsed as JSON, and when that text is not JSON the call is answered with
 * `customInputError` (`invalid`) without reading. `null` otherwise.
 */
export const readsOf = (items: unknown): ReadonlyArray<GatewayOffload.Read> | null => {
  if (!Array.isArray(items)) return null
  const calls = items.filter((i): i is Record<string, unknown> => isRecord(i) && isCall(i))
  if (calls.length === 0 || !calls.every(isReadCall)) return null
  return calls.map(readOf)
}

/** Whether `item` is a `thread_read` call (function or custom) the gateway can answer (it has a `call_id`). */
const isRead = (item: unknown): item is Record<string, unknown> => isRecord(item) && isReadCall(item)

/**
 * The `thread_read` calls of a response's output items beside calls of the agent's own tools (at least one of each;
 * `null` otherwise), read as `readsOf` reads them, and the items without them (what the agent receives). `alone`: also
 * when every call is a `thread_read` (the last round, `Offload.besideOf`).
 */
export const besideOf = (items: unknown, alone = false): GatewayOffload.Beside | null => {
  if (!Array.isArray(items)) return null
  const calls = items.filter((i): i is Record<string, unknown> => isRecord(i) && isCall(i))
  const reads = calls.filter(isRead)
  if (reads.length === 0 || (reads.length === calls.length && !alone)) return null
  return {
    reads: reads.map(readOf),
    visible: items.filter((i) => !reads.includes(i as Record<string, unknown>))
  }
}

/** Whether output items give the agent something: a call, or a message with some text. */
const answered = (items: ReadonlyArray<unknown>) =>
  items.some((i) =>
    isRecord(i) && (isCall(i) || (i.type === "message" && Array.isArray(i.content) && i.content.some((c) => isRecord(c) && typeof c.text === "string" && c.text !== "")))
  )

/** Baton's note (`readLimitNote`) as an output message item. */
const noteItem = { type: "message", id: "msg_baton_note", role: "assistant", status: "completed", content: [{ type: "output_text", text: readLimitNote, annotations: [] }] }

/**
 * The output items of the gateway's answers to `thread_read` calls, each of its call's kind among `items`:
 * `custom_tool_call_output` for a custom tool call, else `function_call_output` (`{type, call_id, output}`).
 */
const answerItems = (answers: ReadonlyArray<GatewayOffload.Answer>, items: ReadonlyArray<unknown>) => {
  const custom = new Set(items.flatMap((i) => (isRecord(i) && i.type === "custom_tool_call" && typeof i.call_id === "string" ? [i.call_id] : [])))
  return answers.map((a) => ({ type: custom.has(a.id) ? "custom_tool_call_output" : "function_call_output", call_id: a.id, output: a.output }))
}

/**
 * The request that continues after the upstream's `thread_read` calls: `body` with the response's items and an output
 * item per answer, of the call's kind (`answerItems`).
 */
export const continuation = (
  body: Record<string, unknown>,
  items: ReadonlyArray<unknown>,
  answers: ReadonlyArray<GatewayOffload.Answer>
): Record<string, unknown> => ({
  ...body,
  input: [...(body.input as ReadonlyArray<unknown>), ...items, ...answerItems(answers, items)]
})

const encodeEvent = (event: string, data: string) => `${event === "" ? "" : `event: ${event}\n`}${Sse.dataLines(data)}\n\n`

/**
 * The `response.failed` event that ends a spliced stream Baton cannot go on with: `code` and `message` its error's (the
 * agent reads `server_error` as a failure to retry).
 */
/**
 * A `response.failed` event ending the agent's stream (Baton's, or a refused continuation's error) numbered as the
 * rest of the stream: `sequence` the next `sequence_number` the agent expects, `head` the response's `id` and
 * `created_at` (the first hop's `response.created`). Before, it carried neither, so the agent's stream ended with an
 * event out of its numbering, of no response (a Responses client checks both).
 */
const failedEvent = (code: string, message: string, sequence: number, head: Readonly<Record<string, unknown>> | undefined) =>
  `event: response.failed\ndata: ${
    JSON.stringify({ type: "response.failed", sequence_number: sequence, response: { ...head, object: "response", status: "failed", error: { code, message }, output: [] } })
  }\n\n`

/** The code and message of an upstream's error body (`body`: its text, may be empty; `server_error` and `message` without one). */
const errorOf = (body: string, message: string) => {
  const parsed = parseJson(body)
  const error = isRecord(parsed) && isRecord(parsed.error) ? parsed.error : {}
  return { code: typeof error.code === "string" ? error.code : "server_error", message: typeof error.message === "string" ? error.message : message }
}

/**
 * A streamed hop of a Responses answer as the agent sees it (see the module docblock): `previous` is the hop whose
 * `thread_read` calls this one continues (`null`: the first hop, whose events pass on as they are until a
 * `thread_read` call starts).
 *
 * An upstream stream that restarts its answer (a `response.created` of another response mid-stream, spliced after a
 * retry upstream; `GatewayResponses.replyAssembler` keeps the second response alone) is read as `GatewayOffload.makeHop`
 * reads a second `message_start`: what the first attempt held back (a `thread_read` call, cut or done) is dropped, and
 * the second response's events are held from its own `thread_read` call on, numbered from its own output indexes. On
 * the first hop the second `response.created` goes to the agent as it came (an agent that reads on keeps the second
 * response, as the record does); a continuation's is dropped as its first one is, and when part of the continuation
 * had reached the agent (an output item of the response the agent is receiving), the answer ends with `response.failed`
 * (`server_error`: the agent retries), since the agent's response cannot restart. Found in review: the second
 * attempt's events were held behind the first attempt's cut call and released with it (the agent got a `thread_read`
 * call, a tool it does not have), or its `thread_read` was answered at the first attempt's output index.
 */
export const makeHop = (previous: GatewayOffload.ReadsEnd | null): GatewayOffload.Hop => {
  const first = previous === null
  const offset = previous?.nextOffset ?? 0
  const before = previous?.visible ?? []
  let sequence = previous?.nextSequence ?? 0
  /**
   * The response the agent is receiving (the first hop's `response.created`: its `id` and `created_at`): a
   * continuation's `response` objects carry them, so the agent's one response keeps one id.
   */
  let head: Readonly<Record<string, unknown>> | undefined = previous?.head
  const decoder = Sse.makeDecoder()
  const assembler = GatewayResponses.replyAssembler()
  /** The held events: the event's name, its data as encoded (`null`: not JSON) and its text. */
  let held: Array<{ readonly event: string; readonly data: Record<string, unknown> | null; readonly text: string }> | null = null
  let heldAt = 0
  let heldSequence = 0
  /** The first hop: the last `sequence_number` the upstream sent (-1 before one). */
  let lastSequence = -1
  /** The next `sequence_number` the agent expects: a held event's is never sent. */
  const nextSequence = () => (held !== null ? heldSequence : first ? lastSequence + 1 : sequence)
  let items = 0
  /** The hop's response id (its first `response.created`'s; `undefined` before it, `null` when it had none). */
  let responseId: string | null | undefined = undefined
  /** An output item of this continuation reached the agent; the hop restarted after that (it ended with an error). */
  let shown = false
  let broken = false
  const itemsOf = () => {
    const outcome = assembler.outcome()
    return outcome._tag === "completed" ? outcome.reply.messages.map((m) => m.message) : []
  }
  return {
    push: (chunk) => {
      if (broken) return ""
      assembler.push(chunk)
      let out = ""
      for (const m of decoder.push(chunk)) {
        const data = parseJson(m.data)
        if (!isRecord(data)) {
          if (held === null) out += encodeEvent(m.event, m.data)
          else held.push({ event: m.event, data: null, text: encodeEvent(m.event, m.data) })
          continue
        }
        if (data.type === "response.created") {
          const id = isRecord(data.response) && typeof data.response.id === "string" ? data.response.id : null
          if (responseId !== undefined && id !== responseId) {
            // A restart (see the docblock): the first attempt's held events are dropped, its indexes forgotten, and
            // a continuation's sequence numbers go on from the first one held.
            if (held !== null && !first) sequence = heldSequence
            held = null
            heldAt = 0
            items = 0
            if (!first && shown) {
              broken = true
              return out + failedEvent("server_error", "the upstream restarted its answer (another response.created) after part of it was sent", nextSequence(), head)
            }
          }
          responseId = id
          if (first && isRecord(data.response)) {
            head = { ...(id === null ? {} : { id }), ...(data.response.created_at !== undefined ? { created_at: data.response.created_at } : {}) }
          }
        }
        if (first && typeof data.sequence_number === "number" && held === null) lastSequence = data.sequence_number
        if (!first && (data.type === "response.created" || data.type === "response.in_progress")) continue
        // Held from the call's first event: its `added` (OpenAI sends one per item), else its `done`.
        if (data.type === "response.output_item.added" || data.type === "response.output_item.done") {
          const index = typeof data.output_index === "number" ? data.output_index : items
          items = Math.max(items, index + 1)
          if (held === null && isRecord(data.item) && isCall(data.item) && data.item.name === ThreadRead.definition.name) {
            held = []
            heldAt = index
            heldSequence = first ? (typeof data.sequence_number === "number" ? data.sequence_number : 0) : sequence
          }
        }
        let text: string
        let sent = data
        if (first) {
          text = encodeEvent(m.event, m.data)
        } else {
          const next: Record<string, unknown> = { ...data }
          sent = next
          if (typeof data.output_index === "number") next.output_index = data.output_index + offset
          if (typeof data.sequence_number === "number") next.sequence_number = sequence++
          if (isRecord(data.response)) next.response = { ...data.response, ...head }
          if ((data.type === "response.completed" || data.type === "response.incomplete") && isRecord(data.response)) {
            next.response = { ...data.response, ...head, output: [...before, ...(Array.isArray(data.response.output) ? data.response.output : [])] }
          }
          text = encodeEvent(m.event, JSON.stringify(next))
        }
        if (held === null) {
          out += text
          if (typeof data.output_index === "number") shown = true
        } else held.push({ event: m.event, data: sent, text })
      }
      return out
    },
    end: (last = false) => {
      if (broken) return { _tag: "release", held: "" }
      const text = held === null ? "" : held.map((h) => h.text).join("")
      if (held === null || assembler.outcome()._tag !== "completed") return { _tag: "release", held: text }
      const content = itemsOf()
      // The agent-visible `output_index` of each thread_read call: its events are left out, the items after it
      // numbered down, the sequence numbers continued without gaps, and the final output without the calls.
      const hidden = new Set<number>()
      for (const h of held) {
        if ((h.data?.type === "response.output_item.added" || h.data?.type === "response.output_item.done") && isRead(h.data.item) && typeof h.data.output_index === "number") {
          hidden.add(h.data.output_index)
        }
      }
      /** A held item event's `output_index` as the agent sees it (the hidden calls before it taken out). */
      const shownIndex = (index: number) => {
        let below = 0
        for (const i of hidden) if (i < index) below++
        return index - below
      }
      let seq = heldSequence
      const reads = readsOf(content)
      if (reads !== null && !last) {
        // The items the model streamed after its calls (a message, reasoning) are the agent's: their events go on
        // before the continuation's (`said`), numbered on; the response's own events are the continuation's to send.
        // Before branch b48gw they were dropped with the calls (a whole answer kept them).
        const kept = content.filter((item, i) => i >= heldAt && !isRead(item))
        const said = held.flatMap((h) => {
          const index = typeof h.data?.output_index === "number" ? h.data.output_index : null
          if (h.data === null || index === null || hidden.has(index)) return []
          const next: Record<string, unknown> = { ...h.data, output_index: shownIndex(index) }
          if (typeof h.data.sequence_number === "number") next.sequence_number = seq++
          return [encodeEvent(h.event, JSON.stringify(next))]
        })
        return {
          _tag: "reads",
          reads,
          content,
          nextOffset: offset + heldAt + kept.length,
          held: text,
          said: said.join(""),
          visible: [...before, ...content.slice(0, heldAt), ...kept],
          nextSequence: seq,
          head
        }
      }
      const beside = besideOf(content, last)
      if (beside === null) return { _tag: "release", held: text }
      // Nothing for the agent in the whole response (no call, no text): Baton's note as an output message before the
      // response's end, numbered on (before, a response without output, ending the agent's turn).
      const at = offset + items - hidden.size
      let note = !answered([...before, ...beside.visible])
      const noted = (data: Record<string, unknown>) => {
        if (!note || (data.type !== "response.completed" && data.type !== "response.incomplete")) return ""
        note = false
        return [
          { type: "response.output_item.added", output_index: at, item: { ...noteItem, status: "in_progress", content: [] } },
          { type: "response.output_text.delta", output_index: at, item_id: noteItem.id, content_index: 0, delta: readLimitNote },
          { type: "response.output_item.done", output_index: at, item: noteItem }
        ].map((e) => encodeEvent(e.type, JSON.stringify(typeof data.sequence_number === "number" ? { ...e, sequence_number: seq++ } : e))).join("")
      }
      const shown = held.flatMap((h) => {
        const data = h.data
        if (data === null) return [h.text]
        const lead = noted(data)
        const index = typeof data.output_index === "number" ? data.output_index : null
        if (index !== null && hidden.has(index)) return []
        const next: Record<string, unknown> = { ...data }
        if (index !== null) {
          let below = 0
          for (const i of hidden) if (i < index) below++
          next.output_index = index - below
        }
        if (typeof data.sequence_number === "number") next.sequence_number = seq++
        if (isRecord(data.response) && Array.isArray(data.response.output)) {
          const output = data.response.output.filter((i) => !isRead(i))
          next.response = { ...data.response, output: lead === "" ? output : [...output, noteItem] }
        }
        return [lead + encodeEvent(h.event, JSON.stringify(next))]
      })
      return { _tag: "beside", reads: beside.reads, content, held: shown.join("") }
    },
    content: itemsOf,
    error: (body, message) => {
      const e = errorOf(body, message)
      return failedEvent(e.code, e.message, nextSequence(), head)
    },
    tokens: () => {
      const outcome = assembler.outcome()
      return outcome._tag === "completed" ? outcome.reply.tokens : null
    }
  }
}

/**
 * Where the hidden rounds go in later requests: the upstream's side of the answer (the continuations' added input,
 * then `final`) holds the items the agent received (`received`) in order, with hidden ones (the `thread_read` calls,
 * their answers, the items of a hop after its call) between them; each run of hidden items goes out again before
 * the received item that follows it (an expansion of that item: it and the hidden run before it).
 */
export const expansions: GatewayOffload.Offload["expansions"] = (received, last, sentCount, final, fingerprint, beside) => {
  const upstream = [...(last.input as ReadonlyArray<unknown>).slice(sentCount), ...final]
  const out: Array<{ fingerprint: string; messages: ReadonlyArray<unknown> }> = []
  let j = 0
  let hidden: Array<unknown> = []
  let lastMatched: { readonly item: unknown; readonly print: string; readonly at: number | null } | null = null
  for (const item of upstream) {
    const print = fingerprint(item)
    if (j < received.length && print === fingerprint(received[j])) {
      lastMatched = { item, print, at: hidden.length > 0 ? out.length : null }
      if (hidden.length > 0) out.push({ fingerprint: print, messages: [...hidden, item] })
      hidden = []
      j++
    } else {
      hidden.push(item)
    }
  }
  // Answers beside the agent's calls (and the calls after its last received item) go out after that item: the
  // agent's own outputs follow them.
  if (beside !== undefined && beside.length > 0 && lastMatched !== null) {
    const tail = [...hidden, ...answerItems(beside, upstream)]
    if (lastMatched.at === null) out.push({ fingerprint: lastMatched.print, messages: [lastMatched.item, ...tail] })
    else out[lastMatched.at] = { fingerprint: lastMatched.print, messages: [...out[lastMatched.at]!.messages, ...tail] }
  }
  return out
}

/** The OpenAI Responses offload (see the module docblock). */
export const offload: GatewayOffload.Offload = {
  shape,
  contentOfBody: (body) => (isRecord(body) && Array.isArray(body.output) ? body.output : null),
  contentOfReply: (reply) => reply.messages.map((m) => m.message),
  readsOf,
  besideOf,
  // Nothing left for the agent (no call, no text: the last round's reads taken out): Baton's note, never a response
  // without output.
  // The hidden rounds' items (their thread_read calls left out) before the answer's own, as a stream shows them.
  withContent: (body, own, rounds = [], note = true) => {
    const content = [...rounds.flatMap((r) => besideOf(r, true)?.visible ?? r), ...own]
    return { ...body, output: !note || answered(content) ? content : [...content, noteItem] }
  },
  continuation,
  sendable: (body) => body,
  hop: makeHop,
  expansions,
  streamError: (body, text) => {
    const e = errorOf(body, text)
    return failedEvent(e.code, e.message, 0, undefined)
  }
}
