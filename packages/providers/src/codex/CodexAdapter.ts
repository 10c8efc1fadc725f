/**
 * CodexAdapter: the `ProviderAdapter` of a provider instance of kind `codex`, over one `codex app-server` child
 * (`CodexAppServer`, the pinned `@openai/codex` 0.171.0). The native thread is a Codex thread: its id is the native
 * ref, and Codex keeps its history (the rollout file under `CODEX_HOME/sessions`), so Baton keeps no message list.
 *
 * Baton's operations and what they map to (docs/providers.md, "Codex"):
 * - `startThread`: `thread/start` (Baton's local tools declared as `dynamicTools`: Codex fixes them per thread);
 * - `resumeThread`, and every first use of a thread in a new child (after a crash): `thread/resume`;
 * - `startTurn`: `turn/start` with the prompt (any inline history as a text part before it, the prompt its own part)
 *   and `clientUserMessageId` = the run id, then the turn's notifications until `turn/completed`: `item/completed`
 *   items as Baton items, `item/agentMessage/delta` to `onDelta`, `thread/tokenUsage/updated` as usage (context =
 *   the last request's `totalTokens`, window = `modelContextWindow`; billed = the thread's `total` difference over
 *   the turn), `item/tool/call` answered by running Baton's local tool (`thread_read`);
 * - a turn failed with `codexErrorInfo: "contextWindowExceeded"` is `overflow`; a child that exits mid-turn is
 *   `unavailable` (retryable: the next use starts a new child and resumes the thread);
 * - `interrupt`: `turn/interrupt` (the turn then completes `interrupted`);
 * - `injectHistory`: `thread/inject_items` with one user message: the rendered history, then a marker part naming
 *   the delivery ids (`<baton-deliveries ids="…"/>`) so `readThread` can find it;
 * - `compactThread`: `thread/compact/start`, then the compaction turn it runs, to its `turn/completed`;
 * - `forkThread`: `thread/fork` by thread id (the new Codex thread holds the parent's whole history and dynamic tools);
 * - `readThread`: `thread/read` (turns: the run ids from the user messages' `clientId`) and the thread's rollout file
 *   (`thread.path`: the injected messages' markers; 0.171.0's `thread/read` does not list injected items).
 *
 * Not supported here: the client's tools (Codex calls a dynamic tool synchronously, inside its turn, while Baton's
 * client tools end the turn and wait for the client): `tools` is ignored and `continueTurn` is absent.
 */
import { type ContextUsage, ProviderError, type ProviderInstance } from "@baton/contracts"
import { Duration, Effect, Option, Queue, Schema, type Scope, Stream } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { classify } from "../ProviderFailure.js"
import type {
  CompactResult,
  LocalTool,
  ProducedItem,
  ProviderAdapterShape,
  ReadThreadResult,
  StartTurnInput,
  TextDelta,
  ToolDefinition,
  TurnTokens
} from "../ProviderAdapter.js"
import { producedItem, TurnEvent } from "../ProviderAdapter.js"
import { Prices } from "../ProviderConfig.js"
import * as AppServer from "./CodexAppServer.js"
import * as Protocol from "./CodexProtocol.js"

const PositiveInt = Schema.Int.pipe(Schema.positive())

/**
 * A provider instance of kind `codex` (server config `providers[]`):
 * - `binary`: the `codex` executable (default: the pinned `@openai/codex` package's platform binary);
 * - `codexHome`: `CODEX_HOME` of the child (its `config.toml`: model provider, auth; default `$CODEX_HOME` or
 *   `~/.codex`);
 * - `model`: overrides the config's model (`-c model=…`);
 * - `contextWindow`, `autoCompactThreshold`: override `model_context_window` and `model_auto_compact_token_limit`
 *   (tokens; Codex uses 95% of the window, the figure its usage reports);
 * - `cwd`: the working directory of its threads (default: the server's);
 * - `requestTimeoutMs` (default 30,000): the bound on each JSON-RPC request; `turnIdleTimeoutMs` (default 600,000):
 *   the longest a turn or a compaction may go without a notification;
 * - `maxReconnects` (default 5): the retries Codex may announce in a row (`error` notifications with `willRetry`, e.g.
 *   "Reconnecting... waiting for network") before Baton stops the turn as `unavailable`: Codex 0.171.0 retries an
 *   unreachable model endpoint indefinitely whatever its config says;
 * - `prices`: per million tokens, to price the turns (optional).
 */
export const CodexProviderConfig = Schema.Struct({
  kind: Schema.Literal("codex"),
  binary: Schema.optional(Schema.NonEmptyString),
  codexHome: Schema.optional(Schema.NonEmptyString),
  model: Schema.optional(Schema.NonEmptyString),
  contextWindow: Schema.optional(PositiveInt),
  autoCompactThreshold: Schema.optional(Schema.NullOr(PositiveInt)),
  cwd: Schema.optional(Schema.NonEmptyString),
  requestTimeoutMs: Schema.optional(PositiveInt),
  turnIdleTimeoutMs: Schema.optional(PositiveInt),
  maxReconnects: Schema.optional(PositiveInt),
  prices: Schema.optional(Prices)
})
export type CodexProviderConfig = typeof CodexProviderConfig.Type

export interface CodexAdapterOptions {
  readonly instance: ProviderInstance
  readonly config: CodexProviderConfig
  /** Baton's local tools to declare on every new thread (Codex fixes a thread's dynamic tools at `thread/start`). */
  readonly dynamicTools?: ReadonlyArray<ToolDefinition>
  /** Receives every JSON-RPC line (fixtures). */
  readonly trace?: (line: AppServer.TraceLine) => void
}

/** The adapter, and its JSON-RPC client (its child's pid and generation, for tests and diagnostics). */
export interface CodexAdapter extends ProviderAdapterShape {
  readonly appServer: AppServer.AppServerClient
}

/** The marker part an injection carries after the rendered history. */
const deliveryMarker = (ids: ReadonlyArray<string>) => `<baton-deliveries ids="${ids.join(",")}"/>`
const markerPattern = /<baton-deliveries ids="([^"]*)"\/>/g

interface ThreadState {
  /** The generation of the child this thread was started or resumed in. */
  generation: number
  usage: ContextUsage | null
  total: Protocol.TokenUsageBreakdown | null
}

interface ActiveTurn {
  readonly runId: string
  readonly localTools: ReadonlyArray<LocalTool>
  turnId: string | null
  interruptRequested: boolean
}

const sub = (a: Protocol.TokenUsageBreakdown, b: Protocol.TokenUsageBreakdown): TurnTokens => {
  const cacheRead = Math.max(0, a.cachedInputTokens - b.cachedInputTokens)
  const cacheWrite = Math.max(0, a.cacheWriteInputTokens - b.cacheWriteInputTokens)
  return {
    inputTokens: Math.max(0, a.inputTokens - b.inputTokens - cacheRead - cacheWrite),
    cacheWriteTokens: cacheWrite,
    cacheReadTokens: cacheRead,
    outputTokens: Math.max(0, a.outputTokens - b.outputTokens)
  }
}

const minus = (a: Protocol.TokenUsageBreakdown, b: Protocol.TokenUsageBreakdown): Protocol.TokenUsageBreakdown => ({
  totalTokens: a.totalTokens - b.totalTokens,
  inputTokens: a.inputTokens - b.inputTokens,
  cachedInputTokens: a.cachedInputTokens - b.cachedInputTokens,
  cacheWriteInputTokens: a.cacheWriteInputTokens - b.cacheWriteInputTokens,
  outputTokens: a.outputTokens - b.outputTokens,
  reasoningOutputTokens: a.reasoningOutputTokens - b.reasoningOutputTokens
})

/** Shorthand for `producedItem` in the mapping below. */
const item = producedItem

/** The Baton items of a completed Codex item (none for the user's message, a compaction marker, or unknown types). */
export const itemsOf = (codex: Protocol.ThreadItem): ReadonlyArray<ProducedItem> => {
  switch (codex.type) {
    case "agentMessage": {
      const m = codex as typeof Protocol.AgentMessageItem.Type
      return [item("assistant_message", m.text, { messageId: m.id })]
    }
    case "reasoning": {
      const r = codex as typeof Protocol.ReasoningItem.Type
      const text = [...r.summary, ...r.content].join("\n")
      return text === "" ? [] : [item("reasoning", text, { messageId: r.id })]
    }
    case "dynamicToolCall": {
      const c = codex as typeof Protocol.DynamicToolCallItem.Type
      const output = (c.contentItems ?? []).map((p) => p.text ?? "").join("")
      return [
        item("tool_call", JSON.stringify(c.arguments ?? {}), { toolCallId: c.id, toolName: c.tool }),
        item("tool_result", output, { toolCallId: c.id, toolName: c.tool, isError: c.success === false, toolCallState: "answered" })
      ]
    }
    case "commandExecution": {
      const c = codex as typeof Protocol.CommandExecutionItem.Type
      return [
        item("tool_call", JSON.stringify({ command: c.command }), { toolCallId: c.id, toolName: "exec_command" }),
        item("tool_result", c.aggregatedOutput ?? "", {
          toolCallId: c.id,
          toolName: "exec_command",
          isError: c.status !== "completed" || (c.exitCode ?? 0) !== 0,
          toolCallState: c.status === "completed" || c.status === "failed" ? "answered" : "interrupted"
        })
      ]
    }
    default:
      return []
  }
}

/**
 * Makes the adapter for the scope (the child, once started, is killed when the scope closes). Nothing starts until
 * the first call.
 */
export const make = (options: CodexAdapterOptions): Effect.Effect<CodexAdapter, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { config, instance } = options
    const provider = instance as string
    const threads = new Map<string, ThreadState>()
    const active = new Map<string, ActiveTurn>()
    const turnIdleMillis = config.turnIdleTimeoutMs ?? 600_000
    const requestTimeoutMillis = config.requestTimeoutMs ?? 30_000
    const maxReconnects = config.maxReconnects ?? 5

    const fail = (operation: string, code: ProviderError["code"], reason: string, retryable: boolean, extra: { readonly limitTokens?: number } = {}) =>
      new ProviderError({ provider, operation, reason, code, retryable, ...extra })

    /** A client error as a `ProviderError`; `uncertain`: the request may have reached Codex (an injection's ack). */
    const fromClient = (operation: string, uncertain = false) => (e: AppServer.CodexClientError): ProviderError => {
      switch (e._tag) {
        case "CodexStartFailed":
          return fail(operation, "unavailable", e.message, false)
        case "CodexRequestTimeout":
          return fail(operation, uncertain ? "ack_lost" : "timeout", e.message, true)
        case "CodexExited":
          return fail(operation, uncertain ? "ack_lost" : "unavailable", e.message, true)
        case "CodexProtocolError":
          return fail(operation, "protocol", e.message, false)
        case "CodexRpcError":
          // 0.171.0: "no rollout found for thread id …" (resume), "thread not found: …" (turn/start), "thread not
          // loaded: …" (thread/read of an id it has no rollout for; a thread with a rollout is read without resuming).
          return /not found|no rollout|unknown thread|thread not loaded/i.test(e.reason)
            ? fail(operation, "thread_not_found", e.message, false)
            : classify(fail(operation, "refused", e.message, false))
      }
    }

    const args: Array<string> = []
    if (config.model !== undefined) args.push("-c", `model=${JSON.stringify(config.model)}`)
    if (config.contextWindow !== undefined) args.push("-c", `model_context_window=${config.contextWindow}`)
    if (config.autoCompactThreshold !== undefined && config.autoCompactThreshold !== null) {
      args.push("-c", `model_auto_compact_token_limit=${config.autoCompactThreshold}`)
    }

    const onServerRequest = (method: string, params: unknown) =>
      Effect.gen(function*() {
        if (method !== Protocol.Notification.dynamicToolCall) return yield* Effect.fail({ message: `Baton does not handle ${method}` })
        const call = yield* Schema.decodeUnknown(Protocol.DynamicToolCallParams)(params).pipe(
          Effect.mapError((e) => ({ message: `unreadable item/tool/call: ${e.message}` }))
        )
        const turn = active.get(call.threadId)
        const tool = turn?.localTools.find((t) => t.definition.name === call.tool)
        if (turn === undefined || tool === undefined) {
          const answer: Protocol.DynamicToolCallResponse = {
            contentItems: [{ type: "inputText", text: `The tool ${call.tool} is not available in this turn.` }],
            success: false
          }
          return answer
        }
        const done = yield* tool.execute({ arguments: JSON.stringify(call.arguments ?? {}), runId: turn.runId })
        const answer: Protocol.DynamicToolCallResponse = { contentItems: [{ type: "inputText", text: done.output }], success: !done.isError }
        return answer
      })

    const codexHome = config.codexHome ?? process.env["CODEX_HOME"] ?? Path.join(Os.homedir(), ".codex")
    const client = yield* AppServer.make({
      binary: config.binary ?? AppServer.defaultBinary() ?? "codex (the @openai/codex platform package is not installed)",
      codexHome,
      args,
      ...(config.requestTimeoutMs === undefined ? {} : { requestTimeoutMillis: config.requestTimeoutMs }),
      onServerRequest,
      ...(options.trace === undefined ? {} : { trace: options.trace })
    })

    const threadSettings = {
      cwd: config.cwd ?? process.cwd(),
      approvalPolicy: "never",
      sandbox: "read-only",
      ...(config.model === undefined ? {} : { model: config.model })
    }

    const remember = (threadId: string) =>
      Effect.flatMap(client.generation, (generation) =>
        Effect.sync(() => {
          const state = threads.get(threadId)
          if (state === undefined) threads.set(threadId, { generation, usage: null, total: null })
          else state.generation = generation
        }))

    const resume = (operation: string, threadId: string) =>
      client.request(Protocol.Method.threadResume, { threadId, ...threadSettings }, Protocol.ThreadResponse).pipe(
        Effect.zipRight(remember(threadId)),
        Effect.mapError(fromClient(operation))
      )

    /** Resumes `threadId` when the running child (if any) has not loaded it: after a restart or a crash. */
    const ensureLoaded = (operation: string, threadId: string) =>
      Effect.gen(function*() {
        const generation = yield* client.generation
        const state = threads.get(threadId)
        if (generation !== 0 && state !== undefined && state.generation === generation) return
        yield* resume(operation, threadId)
      })

    const usageOf = (update: Protocol.TokenUsageUpdated): ContextUsage => {
      const window = update.tokenUsage.modelContextWindow ?? config.contextWindow
      const threshold = config.autoCompactThreshold
      return {
        usedTokens: update.tokenUsage.last.totalTokens,
        ...(window === undefined || window === null ? {} : { maxTokens: window }),
        ...(threshold === undefined || threshold === null ? {} : { autoCompactThreshold: threshold })
      }
    }

    const failureOf = (operation: string, threadId: string, error: Protocol.TurnError | null | undefined): ProviderError => {
      const info = error?.codexErrorInfo
      const reason = error?.message ?? "the Codex turn failed"
      if (info === "contextWindowExceeded") {
        const window = threads.get(threadId)?.usage?.maxTokens
        return fail(operation, "overflow", reason, false, window === undefined ? {} : { limitTokens: window })
      }
      const key = typeof info === "string" ? info : info !== null && info !== undefined ? Object.keys(info)[0] ?? "" : ""
      if (/httpConnectionFailed|responseStreamConnectionFailed|responseStreamDisconnected|responseTooManyFailedAttempts|serverOverloaded|internalServerError|rateLimitExceeded/.test(key)) {
        return fail(operation, "unavailable", `${reason} (${key})`, true)
      }
      // Codex 0.171.0 labels a model stream cut before its end `other` ("stream disconnected before completion"):
      // transient, not a refusal (found by a review).
      if ((key === "other" || key === "") && /stream disconnected|connection (reset|closed|refused)|error sending request|timed out/i.test(reason)) {
        return fail(operation, "unavailable", `${reason} (${key === "" ? "no error info" : key})`, true)
      }
      return classify(fail(operation, "refused", key === "" ? reason : `${reason} (${key})`, false))
    }

    /**
     * Follows the notifications of `threadId` until its turn (`turnId()`, known once `turn/start` answered, or the
     * first turn started when `null`) completes: the events of that turn.
     */
    const follow = (
      operation: string,
      threadId: string,
      events: Queue.Dequeue<AppServer.Incoming>,
      turnIdOf: () => string | null,
      onDelta: ((delta: TextDelta) => void) | undefined,
      adopt?: (turnId: string) => Effect.Effect<void>,
      over?: { codexEnded: boolean }
    ): Stream.Stream<TurnEvent, ProviderError> => {
      let done = false
      let lastError: Protocol.TurnError | null = null
      let reconnects = 0
      let baseline: Protocol.TokenUsageBreakdown | null = threads.get(threadId)?.total ?? null
      const decode = <A, I>(schema: Schema.Schema<A, I>, params: unknown) =>
        Schema.decodeUnknown(schema)(params).pipe(Effect.mapError((e) => fail(operation, "protocol", `unreadable Codex notification: ${e.message}`, false)))
      const handle = (event: AppServer.Incoming): Effect.Effect<ReadonlyArray<TurnEvent>, ProviderError> =>
        Effect.gen(function*() {
          if (event._tag === "exited") {
            if (over !== undefined) over.codexEnded = true
            return yield* fail(operation, "unavailable", `the Codex app-server exited during the turn (${event.reason})`, true)
          }
          const params = event.params as { readonly threadId?: string; readonly turnId?: string; readonly turn?: { readonly id?: string } }
          if (params?.threadId !== threadId) return []
          const ours = turnIdOf()
          const turnId = params.turnId ?? params.turn?.id
          if (ours === null && adopt !== undefined && event.method === Protocol.Notification.turnStarted && turnId !== undefined) {
            yield* adopt(turnId)
          }
          if (ours !== null && turnId !== ours) return []
          switch (event.method) {
            case Protocol.Notification.agentMessageDelta:
            case Protocol.Notification.reasoningTextDelta:
            case Protocol.Notification.reasoningSummaryTextDelta: {
              const delta = yield* decode(Protocol.DeltaNotification, event.params)
              onDelta?.({ kind: event.method === Protocol.Notification.agentMessageDelta ? "text" : "reasoning", text: delta.delta })
              return []
            }
            case Protocol.Notification.itemCompleted: {
              reconnects = 0
              const completed = yield* decode(Protocol.ItemNotification, event.params)
              // Codex compacted the thread by itself (its auto-compaction): Baton is told, nothing is recorded.
              if (completed.item.type === "contextCompaction") return [TurnEvent.native_compacted()]
              return itemsOf(completed.item).map((i) => TurnEvent.item_produced({ item: i }))
            }
            case Protocol.Notification.threadTokenUsageUpdated: {
              const update = yield* decode(Protocol.TokenUsageUpdated, event.params)
              const usage = usageOf(update)
              const total = update.tokenUsage.total
              if (baseline === null) baseline = minus(total, update.tokenUsage.last)
              const state = threads.get(threadId)
              if (state !== undefined) {
                state.usage = usage
                state.total = total
              }
              return [TurnEvent.usage_reported({ usage, tokens: sub(total, baseline) })]
            }
            case Protocol.Notification.error: {
              const error = yield* decode(Protocol.ErrorNotification, event.params)
              if (!error.willRetry) {
                lastError = error.error
                return []
              }
              // Found by a review: Codex retried an unreachable endpoint for ~20 minutes, the run `running` meanwhile.
              if (++reconnects < maxReconnects) return []
              // Stopped by the caller's finalizer (`abandon`: interrupt, then the turn's end awaited).
              return yield* fail(operation, "unavailable", `Codex could not reach the model after ${reconnects} attempts: ${error.error.message}`, true)
            }
            case Protocol.Notification.turnCompleted: {
              const completed = yield* decode(Protocol.TurnNotification, event.params)
              done = true
              if (over !== undefined) over.codexEnded = true
              switch (completed.turn.status) {
                case "completed":
                  return [TurnEvent.turn_ended({ interrupted: false })]
                case "interrupted":
                  return [TurnEvent.turn_ended({ interrupted: true })]
                default:
                  return yield* failureOf(operation, threadId, completed.turn.error ?? lastError)
              }
            }
            default:
              return []
          }
        })
      return Stream.fromQueue(events).pipe(
        Stream.timeoutFail(() => fail(operation, "timeout", `no notification from Codex for ${turnIdleMillis} ms`, true), Duration.millis(turnIdleMillis)),
        Stream.mapEffect(handle),
        Stream.takeUntil(() => done),
        Stream.flattenIterables
      )
    }

    /**
     * Stops a turn Baton gave up on while Codex still runs it (Baton's idle bound, too many reconnects, the caller
     * closed the stream): `turn/interrupt`, then its `turn/completed` (or the child's exit) awaited on `events`, at
     * most `requestTimeoutMillis`, so the next `turn/start` on the thread does not land in the turn still ending
     * (Codex 0.171.0 adds the input of a `turn/start` to the running turn). Found by a review: a turn ended by the idle
     * bound kept running, and the next message was answered into it, unrecorded; a compaction kept running and every
     * later turn was refused (`ActiveTurnNotSteerable`).
     */
    const abandon = (threadId: string, turnId: string, events: Queue.Dequeue<AppServer.Incoming>) =>
      Effect.gen(function*() {
        yield* client.request(Protocol.Method.turnInterrupt, { threadId, turnId }, Protocol.EmptyResponse).pipe(Effect.ignore)
        for (;;) {
          const event = yield* Queue.take(events)
          if (event._tag === "exited") return
          const params = event.params as { readonly threadId?: string; readonly turn?: { readonly id?: string } }
          if (event.method === Protocol.Notification.turnCompleted && params?.threadId === threadId && params.turn?.id === turnId) return
        }
      }).pipe(
        Effect.timeout(Duration.millis(requestTimeoutMillis)),
        Effect.catchAll(() => Effect.logWarning("codex did not confirm the end of an abandoned turn in time").pipe(Effect.annotateLogs({ threadId, turnId })))
      )

    const startTurn = (input: StartTurnInput): Stream.Stream<TurnEvent, ProviderError> =>
      Stream.unwrapScoped(Effect.gen(function*() {
        const threadId = input.nativeRef
        // The turn is known to `interrupt` from the start: an interrupt while the thread is still being resumed in a
        // new child (after a crash) is kept and honoured before `turn/start` (found by a review: it was dropped, and
        // the turn started seconds after the user interrupted it).
        const turn: ActiveTurn = { runId: input.runId, localTools: input.localTools ?? [], turnId: null, interruptRequested: false }
        yield* Effect.acquireRelease(
          Effect.sync(() => active.set(threadId, turn)),
          () => Effect.sync(() => void (active.get(threadId) === turn && active.delete(threadId)))
        )
        yield* ensureLoaded("startTurn", threadId)
        const { events } = yield* client.subscribe.pipe(Effect.mapError(fromClient("startTurn")))
        if (turn.interruptRequested) {
          return yield* fail("startTurn", "interrupted", "interrupted before the turn started (Codex was not asked to run it)", false)
        }
        const parts = [...(input.inlineHistory === null ? [] : [input.inlineHistory]), input.prompt]
        const stop = (turnId: string) =>
          client.request(Protocol.Method.turnInterrupt, { threadId, turnId }, Protocol.EmptyResponse).pipe(Effect.ignore)
        // A `turn/start` answered late (found by a review: the run failed `provider_timeout` while Codex ran the turn,
        // its answer never recorded): Codex may have started the turn, so the turn is not given up. Its id is taken
        // from the thread's `turn/started` notification instead (Baton runs one turn per native thread at a time), and
        // the turn is followed as usual; if Codex never starts it, the turn's idle bound ends the wait.
        turn.turnId = yield* client.request(Protocol.Method.turnStart, {
          threadId,
          input: parts.map((text) => ({ type: "text", text })),
          clientUserMessageId: input.runId
        }, Protocol.TurnStartResponse).pipe(
          Effect.map((started): string | null => started.turn.id),
          Effect.catchTag("CodexRequestTimeout", (e) =>
            Effect.logWarning("codex turn/start was not answered in time; following the thread for the turn it starts").pipe(
              Effect.annotateLogs({ threadId, runId: input.runId, timeoutMillis: e.timeoutMillis }),
              Effect.as(null)
            )),
          Effect.mapError(fromClient("startTurn"))
        )
        const over = { codexEnded: false }
        // A turn Codex did not end (the stream closed early, Baton's idle bound, too many reconnects) is stopped.
        yield* Effect.addFinalizer(() => over.codexEnded || turn.turnId === null ? Effect.void : abandon(threadId, turn.turnId, events))
        if (turn.interruptRequested && turn.turnId !== null) yield* stop(turn.turnId)
        const adopt = (turnId: string) =>
          Effect.suspend(() => {
            if (turn.turnId !== null) return Effect.void
            turn.turnId = turnId
            return turn.interruptRequested ? stop(turnId) : Effect.void
          })
        // Over once Codex said so (its turn completed, failed, or the child exited): nothing to interrupt then.
        return follow("startTurn", threadId, events, () => turn.turnId, input.onDelta, adopt, over)
      }))

    const interrupt = (nativeRef: string): Effect.Effect<void, ProviderError> =>
      Effect.suspend(() => {
        const turn = active.get(nativeRef)
        if (turn === undefined) return Effect.void
        if (turn.turnId === null) {
          turn.interruptRequested = true
          return Effect.void
        }
        return client.request(Protocol.Method.turnInterrupt, { threadId: nativeRef, turnId: turn.turnId }, Protocol.EmptyResponse).pipe(
          Effect.asVoid,
          Effect.mapError(fromClient("interrupt"))
        )
      })

    const startThread = () =>
      client.request(Protocol.Method.threadStart, {
        ...threadSettings,
        dynamicTools: (options.dynamicTools ?? []).map((t) => ({ type: "function", name: t.name, description: t.description, inputSchema: t.inputSchema }))
      }, Protocol.ThreadResponse).pipe(
        Effect.mapError(fromClient("startThread")),
        Effect.tap((r) => remember(r.thread.id)),
        Effect.map((r) => ({ nativeRef: r.thread.id }))
      )

    /**
     * `thread/fork` of `nativeRef` (loaded from its rollout by id, so the parent need not be loaded in this child):
     * the new thread holds the parent's whole history and keeps its dynamic tools, and is loaded in the running child.
     * `excludeTurns`: Baton does not read the copied turns. Codex 0.171.0 reports no usage for the new thread before
     * its first turn, so the usage is `null` (the parent's report is never reused for it).
     */
    const forkThread = (nativeRef: string) =>
      client.request(Protocol.Method.threadFork, { threadId: nativeRef, ...threadSettings, excludeTurns: true }, Protocol.ThreadResponse).pipe(
        Effect.mapError(fromClient("forkThread")),
        Effect.tap((r) => remember(r.thread.id)),
        Effect.map((r) => ({ nativeRef: r.thread.id, usage: null }))
      )

    const injectHistory = (input: { readonly nativeRef: string; readonly rendered: string; readonly deliveryIds: ReadonlyArray<string> }) =>
      Effect.gen(function*() {
        yield* ensureLoaded("injectHistory", input.nativeRef)
        yield* client.request(Protocol.Method.threadInjectItems, {
          threadId: input.nativeRef,
          items: [{
            type: "message",
            role: "user",
            content: [{ type: "input_text", text: input.rendered }, { type: "input_text", text: deliveryMarker(input.deliveryIds) }]
          }]
        }, Protocol.EmptyResponse).pipe(Effect.mapError(fromClient("injectHistory", true)))
        return { usage: null }
      })

    const compactThread = (nativeRef: string): Effect.Effect<CompactResult, ProviderError> =>
      Effect.scoped(Effect.gen(function*() {
        yield* ensureLoaded("compactThread", nativeRef)
        const usageBefore = threads.get(nativeRef)?.usage ?? null
        const { events } = yield* client.subscribe.pipe(Effect.mapError(fromClient("compactThread")))
        yield* client.request(Protocol.Method.threadCompactStart, { threadId: nativeRef }, Protocol.EmptyResponse).pipe(
          Effect.mapError(fromClient("compactThread"))
        )
        // The compaction runs as a turn of its own (no other turn runs on the thread meanwhile): followed to its end;
        // one Baton gives up on (idle bound, interrupted caller) is stopped, as a turn is.
        let compactionTurn: string | null = null
        const over = { codexEnded: false }
        yield* Effect.addFinalizer(() => over.codexEnded || compactionTurn === null ? Effect.void : abandon(nativeRef, compactionTurn, events))
        let usageAfter: ContextUsage | null = null
        yield* Stream.runForEach(
          follow("compactThread", nativeRef, events, () => null, undefined, (turnId) => Effect.sync(() => void (compactionTurn ??= turnId)), over),
          (e) => Effect.sync(() => void (e._tag === "usage_reported" && (usageAfter = e.usage)))
        )
        return { usageBefore, usageAfter: usageAfter ?? threads.get(nativeRef)?.usage ?? null }
      }))

    const readThread = (nativeRef: string): Effect.Effect<ReadThreadResult, ProviderError> =>
      Effect.gen(function*() {
        const read = yield* client.request(Protocol.Method.threadRead, { threadId: nativeRef, includeTurns: true }, Protocol.ThreadReadResponse).pipe(
          Effect.mapError(fromClient("readThread"))
        )
        const runIds = new Set<string>()
        for (const turn of read.thread.turns) {
          for (const i of turn.items) {
            if (i.type === "userMessage") {
              const clientId = (i as typeof Protocol.UserMessageItem.Type).clientId
              if (clientId !== undefined && clientId !== null) runIds.add(clientId)
            }
          }
        }
        const deliveryIds = new Set<string>()
        const path = read.thread.path
        if (path !== undefined && path !== null) {
          const text = yield* Effect.try({
            try: () => Fs.readFileSync(path, "utf8"),
            catch: (e) => fail("readThread", "protocol", `the thread's rollout ${path} is unreadable: ${String(e)}`, false)
          })
          for (const line of text.split("\n")) {
            if (!line.includes("baton-deliveries")) continue
            const entry = Option.liftThrowable(() => JSON.parse(line) as { type?: string; payload?: { type?: string; role?: string; content?: ReadonlyArray<{ text?: string }> } })()
            if (Option.isNone(entry)) continue
            const payload = entry.value.payload
            if (entry.value.type !== "response_item" || payload?.type !== "message" || payload.role !== "user") continue
            for (const part of payload.content ?? []) {
              for (const m of (part.text ?? "").matchAll(markerPattern)) for (const id of m[1]!.split(",")) if (id !== "") deliveryIds.add(id)
            }
          }
        }
        return { deliveryIds: [...deliveryIds], runIds: [...runIds], usage: threads.get(nativeRef)?.usage ?? null }
      })

    const adapter: CodexAdapter = {
      appServer: client,
      instance,
      model: config.model ?? "codex",
      ...(config.prices === undefined ? {} : { prices: config.prices }),
      modelContextWindow: config.contextWindow ?? null,
      startThread,
      resumeThread: (nativeRef) => resume("resumeThread", nativeRef),
      // A resumed app-server session is a runtime's: Baton guards its next turn against a replay.
      resumeMayReplay: true,
      startTurn,
      interrupt,
      injectHistory,
      compactThread,
      readThread,
      forkThread
    }
    return adapter
  })
