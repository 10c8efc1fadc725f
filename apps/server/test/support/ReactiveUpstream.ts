/**
 * A loopback Anthropic Messages upstream that decides each reply from the request (issue 14's Claude Code
 * acceptance), where `ModelApi` plays a fixed queue: a real node HTTP server on 127.0.0.1 (port 0) that bills every
 * request through its prompt cache (`PromptCache`: usage from the request itself) and records each request with the
 * usage it reported.
 *
 * How it decides (`respond`):
 * - A request that offers `thread_read` and carries offload stubs (`[offloaded, thread_read tool:<id>]`, the header
 *   of `ToolResultOffload.stubText`) that this upstream has not asked for yet: it calls `thread_read` once per such
 *   stub the test's `choose` picks among those newly seen (default: all) (parallel `tool_use` blocks,
 *   `{"refs":"tool:<id>","limit":32000}`, ids `toolu_r<n>`), as a model reading back what it needs; each stub is
 *   considered once (a stub not chosen the first time it is seen is never asked for).
 * - Otherwise the session's next step: the step after the highest script step whose call the request's history
 *   holds (script call ids are `toolu_s<step>_<k>`, so the step follows from the request alone, the same with or
 *   without a gateway's hidden rounds in between). After the last step: the script's final text.
 *
 * Replies are streamed (`stream: true`, as Claude Code asks) or whole JSON, with the cache's usage and output tokens
 * `ceil(chars / 4)` of the reply's text and call arguments.
 */
import { Effect, type Scope } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as ModelApi from "./ModelApi.js"
import * as PromptCache from "./PromptCache.js"

/** One step of a script: the assistant's text (may be empty) and its tool calls (`toolu_s<step>_<k>` ids are given here). */
export interface Step {
  readonly text: string
  readonly calls: ReadonlyArray<{ readonly name: string; readonly input: Record<string, unknown> }>
}

/** A received request: its parsed body, what the cache billed it, and what this upstream decided. */
export interface Received {
  readonly url: string
  readonly headers: Http.IncomingHttpHeaders
  readonly body: Record<string, unknown>
  readonly usage: PromptCache.CacheUsage
  /** `step`: a script step (its index, or the script's length for the final text); `read`: the stub ids asked for. */
  readonly decision: { readonly _tag: "step"; readonly step: number } | { readonly _tag: "read"; readonly ids: ReadonlyArray<string> }
}

export interface Upstream {
  /** `http://127.0.0.1:PORT` (the Anthropic instance's `baseUrl`). */
  readonly url: string
  readonly requests: Array<Received>
}

/** The ids a stub names (`tool:<id>` refs in the stubs' headers) in `text`. */
export const stubIdsIn = (text: string): ReadonlyArray<string> =>
  [...text.matchAll(/\[offloaded, thread_read tool:([^\]\s,]+)\]/g)].map((m) => m[1]!)

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

/** The text of a `tool_result` block's content (a string, or its text blocks joined). */
export const resultText = (block: Record<string, unknown>): string =>
  typeof block.content === "string"
    ? block.content
    : Array.isArray(block.content)
    ? block.content.map((b) => (isRecord(b) && typeof b.text === "string" ? b.text : "")).join("\n")
    : ""

/** Every block of every message of a body, with its message's role. */
export const blocksOfMessages = (body: Record<string, unknown>) =>
  (Array.isArray(body.messages) ? body.messages : []).flatMap((m) =>
    isRecord(m) && Array.isArray(m.content) ? m.content.filter(isRecord).map((b) => ({ role: String(m.role), block: b })) : []
  )

/** The call id of step `step`'s `k`-th call. */
export const callId = (step: number, k: number) => `toolu_s${String(step).padStart(3, "0")}_${k}`

/**
 * Starts the upstream for the scope, playing `script` then `final` (see the module docblock).
 */
export const start = (
  script: ReadonlyArray<Step>,
  final: string,
  /** Which of the stubs newly seen in a request to read back (default all); the others are never asked for. */
  choose: (unread: ReadonlyArray<string>) => ReadonlyArray<string> = (unread) => unread
): Effect.Effect<Upstream, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<{ readonly server: Http.Server; readonly upstream: Upstream }>((resume) => {
      const requests: Array<Received> = []
      const cache = PromptCache.make()
      const asked = new Set<string>()
      let reads = 0
      const server = Http.createServer((req, res) => {
        const parts: Array<Buffer> = []
        req.on("data", (c: Buffer) => parts.push(c))
        req.on("end", () => {
          const url = req.url ?? ""
          if (req.method !== "POST") {
            res.writeHead(404, { "content-type": "application/json" })
            res.end("{}")
            return
          }
          const text = Buffer.concat(parts).toString("utf8")
          if (url.split("?")[0]!.endsWith("/count_tokens")) {
            res.writeHead(200, { "content-type": "application/json" })
            res.end(JSON.stringify({ input_tokens: Math.ceil(text.length / 4) }))
            return
          }
          const body = JSON.parse(text) as Record<string, unknown>
          const usage = cache.usage(body)
          const blocks = blocksOfMessages(body)
          const offersRead = Array.isArray(body.tools) && body.tools.some((t) => isRecord(t) && t.name === "thread_read")
          const unread = offersRead
            ? [...new Set(blocks.flatMap(({ block }) => block.type === "tool_result" ? stubIdsIn(resultText(block)) : []))].filter((id) => !asked.has(id))
            : []
          let reply: { text: string; calls: Array<ModelApi.Call> }
          let decision: Received["decision"]
          for (const id of unread) asked.add(id)
          const chosen = unread.length === 0 ? [] : choose(unread)
          if (chosen.length > 0) {
            reply = { text: "", calls: chosen.map((id) => ({ id: `toolu_r${++reads}`, name: "thread_read", arguments: JSON.stringify({ refs: `tool:${id}`, limit: 32_000 }) })) }
            decision = { _tag: "read", ids: chosen }
          } else {
            const done = blocks.flatMap(({ block }) => {
              const m = block.type === "tool_use" && typeof block.id === "string" ? /^toolu_s(\d+)_/.exec(block.id) : null
              return m === null ? [] : [Number(m[1])]
            })
            const step = done.length === 0 ? 0 : Math.max(...done) + 1
            const s = script[step]
            reply = s === undefined
              ? { text: final, calls: [] }
              : { text: s.text, calls: s.calls.map((c, k) => ({ id: callId(step, k), name: c.name, arguments: JSON.stringify(c.input) })) }
            decision = { _tag: "step", step: Math.min(step, script.length) }
          }
          requests.push({ url, headers: req.headers, body, usage, decision })
          const output = Math.max(1, Math.ceil((reply.text.length + reply.calls.reduce((n, c) => n + c.arguments.length, 0)) / 4))
          const billed = { input: usage.input, cacheWrite: usage.cacheWrite, cacheRead: usage.cacheRead, output }
          if (body.stream === true) {
            const answer = ModelApi.answer("anthropic-messages", reply.text, billed, reply.calls)
            res.writeHead(answer.status, { "content-type": answer.contentType })
            res.end(answer.body)
            return
          }
          res.writeHead(200, { "content-type": "application/json" })
          res.end(JSON.stringify({
            id: `msg_r${requests.length}`,
            type: "message",
            role: "assistant",
            model: String(body.model),
            content: [
              ...(reply.text === "" ? [] : [{ type: "text", text: reply.text }]),
              ...reply.calls.map((c) => ({ type: "tool_use", id: c.id, name: c.name, input: JSON.parse(c.arguments) as unknown }))
            ],
            stop_reason: reply.calls.length > 0 ? "tool_use" : "end_turn",
            stop_sequence: null,
            usage: { input_tokens: billed.input, cache_creation_input_tokens: billed.cacheWrite, cache_read_input_tokens: billed.cacheRead, output_tokens: output }
          }))
        })
      })
      server.listen(0, "127.0.0.1", () => {
        const port = (server.address() as AddressInfo).port
        resume(Effect.succeed({ server, upstream: { url: `http://127.0.0.1:${port}`, requests } }))
      })
    }),
    ({ server }) =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  ).pipe(Effect.map(({ upstream }) => upstream))
