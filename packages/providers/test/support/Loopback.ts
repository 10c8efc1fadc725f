/**
 * A loopback model API for tests and benchmarks: a real node HTTP server on 127.0.0.1 (port 0) that answers each
 * request with the next scripted reply (a recorded fixture framed as the API frames it, an error body, a stream cut
 * off mid-way) and records every request it received (body text exactly as sent, headers, arrival time).
 *
 * Also: reading the recorded fixtures of `../shared/provider-fixtures/` (resolved from this file, so a clone at
 * another path finds them beside it), and building adapters on a real SQLite file.
 */
import { Database, NativeMessageStore } from "@baton/persistence"
import { NodeHttpClient } from "@effect/platform-node"
import { HttpClient } from "@effect/platform"
import { Effect, Layer, Option, Redacted, Stream, type Scope } from "effect"
import * as Fs from "node:fs"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import * as AnthropicMessages from "../../src/AnthropicMessages.js"
import type * as ModelApiAdapter from "../../src/ModelApiAdapter.js"
import * as OpenAiChat from "../../src/OpenAiChat.js"
import * as OpenAiResponses from "../../src/OpenAiResponses.js"
import type { ProviderAdapterShape, TurnEvent } from "../../src/ProviderAdapter.js"
import type { ModelApiKind, ModelProviderConfig } from "../../src/ProviderConfig.js"
import type { ProviderInstance } from "@baton/contracts"

/** `../shared/provider-fixtures/` beside the repository. */
export const fixturesDir = fileURLToPath(new URL("../../../../../shared/provider-fixtures/", import.meta.url))

/** The lines of a `*.chunks.txt` fixture (one JSON event each, unchanged; blank lines dropped). */
export const fixtureLines = (file: string): ReadonlyArray<string> =>
  Fs.readFileSync(Path.join(fixturesDir, file), "utf8").split("\n").filter((l) => l.trim() !== "")

/** The event type of a fixture line, read without parsing it (two recorded lines are not valid JSON). */
export const eventType = (line: string) => /"type":"([^"]+)"/.exec(line)?.[1] ?? "message"

/** SSE framing per SOURCES.md: Anthropic and Responses `event: <type>\ndata: <json>\n\n`; Chat `data:` and `[DONE]`. */
export const frame = (kind: ModelApiKind, lines: ReadonlyArray<string>): ReadonlyArray<string> =>
  kind === "openai-chat"
    ? [...lines.map((l) => `data: ${l}\n\n`), "data: [DONE]\n\n"]
    : lines.map((l) => `event: ${eventType(l)}\ndata: ${l}\n\n`)

/** One scripted reply. `chunks` are written one `write` each; `dropAfter`: destroy the socket after that many. */
export interface Reply {
  readonly status?: number
  readonly headers?: Record<string, string>
  readonly chunks: ReadonlyArray<string>
  readonly dropAfter?: number
  /** Milliseconds between chunks (default 0: all at once). */
  readonly gapMillis?: number
  /** Milliseconds before the status line and headers are sent (default 0): a provider still deciding to accept. */
  readonly headMillis?: number
  /** The status line and headers wait for this too (after `headMillis`): a model still thinking until an event of the test. */
  readonly headAfter?: PromiseLike<unknown>
  /** Called once the last chunk is written and the response ended. */
  readonly onEnd?: () => void
}

export const sse = (chunks: ReadonlyArray<string>, extra: Partial<Reply> = {}): Reply => ({
  status: 200,
  headers: { "content-type": "text/event-stream" },
  chunks,
  ...extra
})

export const json = (status: number, body: string, headers: Record<string, string> = {}): Reply => ({
  status,
  headers: { "content-type": "application/json", ...headers },
  chunks: [body]
})

export interface Received {
  readonly body: string
  readonly headers: Http.IncomingHttpHeaders
  readonly url: string
  readonly at: number
}

export interface Loopback {
  readonly url: string
  readonly requests: Array<Received>
  /** Queues replies, in order; a function reply is computed from the request it answers (a model reacting to it). */
  readonly enqueue: (...replies: ReadonlyArray<Reply | ((request: Received) => Reply)>) => void
}

/** Starts the server for the scope; a request with no reply queued gets HTTP 500 `no scripted reply`. */
export const loopback: Effect.Effect<Loopback, never, Scope.Scope> = Effect.acquireRelease(
  Effect.async<{ readonly server: Http.Server; readonly loop: Loopback }>((resume) => {
    const replies: Array<Reply | ((request: Received) => Reply)> = []
    const requests: Array<Received> = []
    const server = Http.createServer((req, res) => {
      const parts: Array<Buffer> = []
      req.on("data", (c: Buffer) => parts.push(c))
      req.on("end", () => {
        const received = { body: Buffer.concat(parts).toString("utf8"), headers: req.headers, url: req.url ?? "", at: Date.now() }
        requests.push(received)
        const queued = replies.shift() ?? json(500, `{"error":{"message":"no scripted reply"}}`)
        let reply: Reply
        try {
          reply = typeof queued === "function" ? queued(received) : queued
        } catch (error) {
          reply = json(500, JSON.stringify({ error: { message: `the scripted reply failed: ${String(error)}` } }))
        }
        let i = 0
        const next = () => {
          if (reply.dropAfter !== undefined && i === reply.dropAfter) {
            res.socket?.destroy()
            return
          }
          if (i === reply.chunks.length) {
            res.end(() => reply.onEnd?.())
            return
          }
          res.write(reply.chunks[i++])
          if (reply.gapMillis === undefined || reply.gapMillis === 0) next()
          else setTimeout(next, reply.gapMillis)
        }
        const head = () => {
          res.writeHead(reply.status ?? 200, reply.headers ?? {})
          next()
        }
        const held = () => (reply.headAfter === undefined ? head() : void Promise.resolve(reply.headAfter).then(head))
        if (reply.headMillis === undefined || reply.headMillis === 0) held()
        else setTimeout(held, reply.headMillis)
      })
    })
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as AddressInfo).port
      resume(Effect.succeed({ server, loop: { url: `http://127.0.0.1:${port}`, requests, enqueue: (...r) => void replies.push(...r) } }))
    })
  }),
  ({ server }) => Effect.async<void>((resume) => {
    server.closeAllConnections()
    server.close(() => resume(Effect.void))
  })
).pipe(Effect.map(({ loop }) => loop))

/**
 * A reply to Anthropic's `count_tokens` (`POST /v1/messages/count_tokens`) counting the request's only message with
 * `count`, plus `framing` tokens for the rest of the request. Throws (an HTTP 500 to the client) on another request.
 */
export const countTokensReply = (count: (text: string) => number, framing = 17) => (request: Received): Reply => {
  if (!request.url.endsWith("/v1/messages/count_tokens")) throw new Error(`expected a count_tokens request, got ${request.url}`)
  const content = (JSON.parse(request.body) as { messages: ReadonlyArray<{ content: string | ReadonlyArray<{ text: string }> }> }).messages[0]!.content
  const text = typeof content === "string" ? content : content.map((c) => c.text).join("")
  return json(200, JSON.stringify({ input_tokens: framing + count(text) }))
}

/** A config for `kind` at `baseUrl` (prices of Claude Sonnet 4.5 / GPT-5 as examples). */
export const configFor = (kind: ModelApiKind, baseUrl: string, extra: Partial<ModelProviderConfig> = {}): ModelProviderConfig => ({
  kind,
  baseUrl: kind === "anthropic-messages" ? baseUrl : `${baseUrl}/v1`,
  model: kind === "anthropic-messages" ? "claude-sonnet-4-5" : "gpt-5",
  apiKeyEnv: "TEST_PROVIDER_KEY",
  contextWindow: 200_000,
  autoCompactThreshold: 180_000,
  maxOutputTokens: 4_096,
  prices: { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 },
  maxRetries: 3,
  ...extra
})

/** A real SQLite file in a fresh temporary directory (removed with the scope), migrations applied. */
export const sqliteFile = Effect.acquireRelease(
  Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-providers-"))),
  (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
).pipe(Effect.map((dir) => Path.join(dir, "baton.sqlite")))

/** The message log on the SQLite file `file`, open for the scope (a new connection each call: a "restart" opens it again). */
export const logOn = (file: string) =>
  Effect.flatMap(Layer.build(Database.layerSqlite(file)), (context) => Effect.provide(NativeMessageStore.make, context))

/** The HTTP client every adapter under test uses (undici, as the server uses). */
export const httpLayer: Layer.Layer<HttpClient.HttpClient> = NodeHttpClient.layerUndici

/** Builds an adapter of `kind` on `loop` and the log in `file`. */
export const adapterFor = (
  kind: ModelApiKind,
  loop: Loopback,
  file: string,
  extra: Partial<ModelProviderConfig> = {},
  options: Partial<ModelApiAdapter.ModelApiOptions> = {}
) =>
  Effect.gen(function*() {
    const log = yield* logOn(file)
    const http = yield* HttpClient.HttpClient
    let n = 0
    const base: ModelApiAdapter.ModelApiOptions = {
      instance: `test-${kind}` as ProviderInstance,
      config: configFor(kind, loop.url, extra),
      apiKey: Option.some(Redacted.make("sk-test-key")),
      log,
      http,
      retryBaseMillis: 10,
      newRef: () => `ref-${++n}`,
      ...options
    }
    const make = kind === "anthropic-messages" ? AnthropicMessages.make : kind === "openai-responses" ? OpenAiResponses.make : OpenAiChat.make
    return make(base) as ProviderAdapterShape
  })

/** Runs a turn's stream to its end: the events, and the failure if it failed. */
export const collect = <E>(stream: Stream.Stream<TurnEvent, E>) =>
  Effect.gen(function*() {
    const events: Array<TurnEvent> = []
    const exit = yield* Stream.runForEach(stream, (e) => Effect.sync(() => void events.push(e))).pipe(Effect.exit)
    return { events, exit }
  })

/** The items of `events` as `[kind, text, toolCallId, toolName]`. */
export const itemsOf = (events: ReadonlyArray<TurnEvent>) =>
  events.flatMap((e) => (e._tag === "item_produced" ? [[e.item.kind, e.item.text, e.item.toolCallId, e.item.toolName] as const] : []))
