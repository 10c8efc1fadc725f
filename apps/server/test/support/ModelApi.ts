/**
 * A loopback model API for the server's tests: a real node HTTP server on 127.0.0.1 (port 0) answering each POST with
 * the next queued reply, recording every request (path, headers, body). Replies are built here in each API's own
 * framing (Anthropic Messages and OpenAI Responses SSE with `event:` lines, Chat Completions `data:` chunks ending
 * in `[DONE]`), with the usage figures a test asks for, so cost figures can be checked exactly.
 */
import { Effect, type Scope } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"

/** The wire protocol of an instance. */
export type Kind = "anthropic-messages" | "openai-responses" | "openai-chat"

/**
 * One queued reply: status, content type and body chunks (written in one go), after `hold` settles when given (a
 * model that has read the request and not yet answered: the run is in flight with the provider until then).
 */
export interface Reply {
  readonly status: number
  readonly contentType: string
  readonly body: string
  readonly hold?: Promise<unknown>
  /**
   * The body's first `at` characters are written at once (head included), the rest after `hold` settles: an answer
   * that has begun and not yet ended (the gateway records the request while it streams, the reply at its end).
   */
  readonly rest?: { readonly at: number; readonly hold: Promise<unknown> }
  /** More response headers (e.g. `retry-after` on a 429). */
  readonly headers?: Record<string, string>
  /** The body's first `cut` characters are written, then the connection is destroyed: a stream that breaks off. */
  readonly cut?: number
}

/** One received request. */
export interface Received {
  readonly url: string
  readonly headers: Http.IncomingHttpHeaders
  readonly body: string
  /**
   * How its reply ended, set when it did: `answered` (written whole to the connection), `aborted` (the client
   * closed the connection first: a call Baton stopped).
   */
  readonly ended: () => "answered" | "aborted" | null
}

export interface ModelApi {
  /** `http://127.0.0.1:PORT` (the instance's `baseUrl`: Anthropic's root, or with `/v1` for OpenAI's). */
  readonly url: string
  readonly requests: Array<Received>
  /** Anthropic `count_tokens` requests: answered at once (a body's length / 4), never from the queue. */
  readonly counts: Array<Received>
  readonly enqueue: (...replies: ReadonlyArray<Reply>) => void
}

/**
 * Starts the server for the scope; a request with no reply queued gets HTTP 500 `no scripted reply`; `count_tokens`
 * is answered at once (see `counts`).
 */
export const start: Effect.Effect<ModelApi, never, Scope.Scope> = Effect.acquireRelease(
  Effect.async<{ readonly server: Http.Server; readonly api: ModelApi }>((resume) => {
    const replies: Array<Reply> = []
    const requests: Array<Received> = []
    const counts: Array<Received> = []
    const server = Http.createServer((req, res) => {
      const parts: Array<Buffer> = []
      req.on("data", (c: Buffer) => parts.push(c))
      req.on("end", () => {
        let ended: "answered" | "aborted" | null = null
        res.on("finish", () => void (ended ??= "answered"))
        res.on("close", () => void (ended ??= "aborted"))
        const received: Received = { url: req.url ?? "", headers: req.headers, body: Buffer.concat(parts).toString("utf8"), ended: () => ended }
        // Claude Code checks its base URL with `HEAD /api/hello` first: not a model request, not from the queue.
        if (req.method !== "POST") {
          res.writeHead(404, { "content-type": "application/json" })
          res.end("{}")
          return
        }
        if (received.url.split("?")[0]!.endsWith("/count_tokens")) {
          counts.push(received)
          res.writeHead(200, { "content-type": "application/json" })
          res.end(JSON.stringify({ input_tokens: Math.ceil(received.body.length / 4) }))
          return
        }
        requests.push(received)
        const reply = replies.shift() ?? error(500, "no scripted reply")
        const write = () => {
          res.writeHead(reply.status, { ...reply.headers, "content-type": reply.contentType })
          if (reply.cut !== undefined) {
            // Destroyed once the bytes are handed to the socket: the head and the first bytes arrive, then the cut.
            return void res.write(reply.body.slice(0, reply.cut), () => res.socket?.destroy())
          }
          const rest = reply.rest
          if (rest === undefined) return void res.end(reply.body)
          res.write(reply.body.slice(0, rest.at))
          const end = () => void res.end(reply.body.slice(rest.at))
          void rest.hold.then(end, end)
        }
        if (reply.hold === undefined) write()
        else void reply.hold.then(write, write)
      })
    })
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as AddressInfo).port
      resume(Effect.succeed({ server, api: { url: `http://127.0.0.1:${port}`, requests, counts, enqueue: (...r) => void replies.push(...r) } }))
    })
  }),
  ({ server }) =>
    Effect.async<void>((resume) => {
      server.closeAllConnections()
      server.close(() => resume(Effect.void))
    })
).pipe(Effect.map(({ api }) => api))

/** Billed tokens of one answer: uncached input, cache write (Anthropic only), cache read, output. */
export interface Usage {
  readonly input: number
  readonly cacheWrite: number
  readonly cacheRead: number
  readonly output: number
}

const sse = (events: ReadonlyArray<Record<string, unknown>>): Reply => ({
  status: 200,
  contentType: "text/event-stream",
  body: events.map((e) => `event: ${String(e.type)}\ndata: ${JSON.stringify(e)}\n\n`).join("")
})

/** An error answer with `message` in each API's error shape (Anthropic's and OpenAI's agree on `error.message`). */
export const error = (status: number, message: string): Reply => ({
  status,
  contentType: "application/json",
  body: JSON.stringify({ type: "error", error: { type: "invalid_request_error", message } })
})

/** A tool call the model makes: call id, tool name, JSON arguments. */
export interface Call {
  readonly id: string
  readonly name: string
  readonly arguments: string
}

let messages = 0

/** An answer of `kind`: `text` (may be empty) then `calls`, billed `usage`. */
export const answer = (kind: Kind, text: string, usage: Usage, calls: ReadonlyArray<Call> = []): Reply => {
  const id = `msg_${++messages}`
  switch (kind) {
    case "anthropic-messages": {
      const blocks: Array<Record<string, unknown>> = []
      let index = 0
      if (text !== "") {
        blocks.push(
          { type: "content_block_start", index, content_block: { type: "text", text: "" } },
          { type: "content_block_delta", index, delta: { type: "text_delta", text } },
          { type: "content_block_stop", index }
        )
        index++
      }
      for (const c of calls) {
        blocks.push(
          { type: "content_block_start", index, content_block: { type: "tool_use", id: c.id, name: c.name, input: {} } },
          { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: c.arguments } },
          { type: "content_block_stop", index }
        )
        index++
      }
      const u = {
        input_tokens: usage.input,
        cache_creation_input_tokens: usage.cacheWrite,
        cache_read_input_tokens: usage.cacheRead,
        output_tokens: usage.output
      }
      return sse([
        { type: "message_start", message: { id, type: "message", role: "assistant", model: "m", content: [], stop_reason: null, usage: { ...u, output_tokens: 1 } } },
        ...blocks,
        { type: "message_delta", delta: { stop_reason: calls.length > 0 ? "tool_use" : "end_turn", stop_sequence: null }, usage: u },
        { type: "message_stop" }
      ])
    }
    case "openai-responses": {
      const items: Array<Record<string, unknown>> = [
        ...(text === "" ? [] : [{ type: "message", id, role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] }]),
        ...calls.map((c, i) => ({ type: "function_call", id: `fc_${id}_${i}`, call_id: c.id, name: c.name, arguments: c.arguments, status: "completed" }))
      ]
      return sse([
        ...items.map((item, i) => ({ type: "response.output_item.done", output_index: i, item })),
        {
          type: "response.completed",
          response: {
            id: `resp_${id}`,
            status: "completed",
            usage: {
              input_tokens: usage.input + usage.cacheRead,
              input_tokens_details: { cached_tokens: usage.cacheRead },
              output_tokens: usage.output,
              total_tokens: usage.input + usage.cacheRead + usage.output
            }
          }
        }
      ])
    }
    case "openai-chat": {
      const chunk = (body: Record<string, unknown>) => `data: ${JSON.stringify({ id, object: "chat.completion.chunk", model: "m", ...body })}\n\n`
      return {
        status: 200,
        contentType: "text/event-stream",
        body: [
          chunk({ choices: [{ index: 0, delta: { role: "assistant", content: text }, finish_reason: null }] }),
          ...(calls.length === 0 ? [] : [chunk({
            choices: [{
              index: 0,
              delta: { tool_calls: calls.map((c, i) => ({ index: i, id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })) },
              finish_reason: null
            }]
          })]),
          chunk({ choices: [{ index: 0, delta: {}, finish_reason: calls.length > 0 ? "tool_calls" : "stop" }] }),
          chunk({
            choices: [],
            usage: {
              prompt_tokens: usage.input + usage.cacheRead,
              completion_tokens: usage.output,
              prompt_tokens_details: { cached_tokens: usage.cacheRead }
            }
          }),
          "data: [DONE]\n\n"
        ].join("")
      }
    }
  }
}

/** The `baseUrl` of an instance of `kind` served by `api`. */
export const baseUrl = (kind: Kind, api: ModelApi) => kind === "anthropic-messages" ? api.url : `${api.url}/v1`
