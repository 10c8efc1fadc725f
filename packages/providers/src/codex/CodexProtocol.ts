/**
 * CodexProtocol: Baton's own schemas of the Codex `app-server` JSON-RPC messages it speaks (`@openai/codex` 0.171.0).
 * Names and shapes are checked against the binary's `codex app-server generate-json-schema --experimental` output,
 * whose relevant subset is kept beside this file (`protocol/codex-app-server.subset.json`, regenerated and compared
 * by `CodexProtocol.test.ts`). Only the fields Baton reads are declared; decoding ignores the rest, so a field Codex
 * adds does not break Baton, while a field Baton reads that changes shape fails as a typed `protocol` error.
 *
 * Framing: one JSON object per line on the child's stdin/stdout, JSON-RPC 2.0 without the `"jsonrpc"` member (Codex
 * omits it and accepts its absence). Requests `{ id, method, params }`, responses `{ id, result }` or
 * `{ id, error: { code, message } }`, notifications `{ method, params }`; the server also sends requests of its own
 * (`item/tool/call` for a dynamic tool) that Baton answers with a response of the same `id`.
 */
import { Schema } from "effect"

/** The methods Baton calls (client requests), as the pinned binary names them. */
export const Method = {
  initialize: "initialize",
  threadStart: "thread/start",
  threadResume: "thread/resume",
  threadFork: "thread/fork",
  threadRead: "thread/read",
  threadInjectItems: "thread/inject_items",
  threadCompactStart: "thread/compact/start",
  turnStart: "turn/start",
  turnInterrupt: "turn/interrupt"
} as const

/** The notifications and server requests Baton reads. */
export const Notification = {
  initialized: "initialized",
  threadTokenUsageUpdated: "thread/tokenUsage/updated",
  turnStarted: "turn/started",
  turnCompleted: "turn/completed",
  itemStarted: "item/started",
  itemCompleted: "item/completed",
  agentMessageDelta: "item/agentMessage/delta",
  reasoningTextDelta: "item/reasoning/textDelta",
  reasoningSummaryTextDelta: "item/reasoning/summaryTextDelta",
  error: "error",
  /** Server request: Codex calls a dynamic tool declared at `thread/start` and waits for the result. */
  dynamicToolCall: "item/tool/call"
} as const

/** `initialize` params: who the client is; `experimentalApi` unlocks `dynamicTools` on `thread/start`. */
export const InitializeParams = Schema.Struct({
  clientInfo: Schema.Struct({ name: Schema.String, title: Schema.optional(Schema.NullOr(Schema.String)), version: Schema.String }),
  capabilities: Schema.optional(Schema.NullOr(Schema.Struct({ experimentalApi: Schema.optional(Schema.Boolean) })))
})
export type InitializeParams = typeof InitializeParams.Type

/** `initialize` result (0.171.0: `userAgent`, `codexHome`, `platformFamily`, `platformOs`). */
export const InitializeResponse = Schema.Struct({ userAgent: Schema.String, codexHome: Schema.optional(Schema.String) })

/** A dynamic tool (`FunctionDynamicToolSpec`): declared on `thread/start`, called back with `item/tool/call`. */
export const DynamicToolSpec = Schema.Struct({
  type: Schema.Literal("function"),
  name: Schema.String,
  description: Schema.String,
  inputSchema: Schema.Unknown
})

/** `TurnStatus`. */
export const TurnStatus = Schema.Literal("completed", "interrupted", "failed", "inProgress")

/**
 * `CodexErrorInfo`: a string code (`contextWindowExceeded`, `serverOverloaded`, ...) or a one-key object
 * (`{ httpConnectionFailed: { httpStatusCode } }`, `responseStreamDisconnected`, `responseTooManyFailedAttempts`, ...).
 */
export const CodexErrorInfo = Schema.Union(Schema.String, Schema.Record({ key: Schema.String, value: Schema.Unknown }))
export type CodexErrorInfo = typeof CodexErrorInfo.Type

/** `TurnError`: the message and, when Codex classified it, `codexErrorInfo`. */
export const TurnError = Schema.Struct({
  message: Schema.String,
  codexErrorInfo: Schema.optional(Schema.NullOr(CodexErrorInfo)),
  additionalDetails: Schema.optional(Schema.NullOr(Schema.String))
})
export type TurnError = typeof TurnError.Type

/**
 * `ThreadItem`, the variants Baton maps (`type` tells them apart; any other type is kept as `Other` and skipped):
 * `userMessage` (`clientId` is the `clientUserMessageId` of `turn/start`: Baton's run id), `agentMessage`,
 * `reasoning`, `dynamicToolCall` (Baton's own tools), `commandExecution`, `contextCompaction`.
 */
export const UserMessageItem = Schema.Struct({
  type: Schema.Literal("userMessage"),
  id: Schema.String,
  clientId: Schema.optional(Schema.NullOr(Schema.String)),
  content: Schema.Array(Schema.Struct({ type: Schema.String, text: Schema.optional(Schema.String) }))
})
export const AgentMessageItem = Schema.Struct({ type: Schema.Literal("agentMessage"), id: Schema.String, text: Schema.String })
export const ReasoningItem = Schema.Struct({
  type: Schema.Literal("reasoning"),
  id: Schema.String,
  summary: Schema.optionalWith(Schema.Array(Schema.String), { default: () => [] }),
  content: Schema.optionalWith(Schema.Array(Schema.String), { default: () => [] })
})
export const DynamicToolCallItem = Schema.Struct({
  type: Schema.Literal("dynamicToolCall"),
  id: Schema.String,
  tool: Schema.String,
  arguments: Schema.Unknown,
  status: Schema.String,
  success: Schema.optional(Schema.NullOr(Schema.Boolean)),
  contentItems: Schema.optional(Schema.NullOr(Schema.Array(Schema.Struct({ type: Schema.String, text: Schema.optional(Schema.String) }))))
})
export const CommandExecutionItem = Schema.Struct({
  type: Schema.Literal("commandExecution"),
  id: Schema.String,
  command: Schema.String,
  status: Schema.String,
  aggregatedOutput: Schema.optional(Schema.NullOr(Schema.String)),
  exitCode: Schema.optional(Schema.NullOr(Schema.Number))
})
export const OtherItem = Schema.Struct({ type: Schema.String, id: Schema.String })
export const ThreadItem = Schema.Union(UserMessageItem, AgentMessageItem, ReasoningItem, DynamicToolCallItem, CommandExecutionItem, OtherItem)
export type ThreadItem = typeof ThreadItem.Type

/** `Turn`: its id, status, items (empty in `turn/started`; `itemsView` says how complete) and error. */
export const Turn = Schema.Struct({
  id: Schema.String,
  status: TurnStatus,
  items: Schema.Array(ThreadItem),
  error: Schema.optional(Schema.NullOr(TurnError))
})
export type Turn = typeof Turn.Type

/** `Thread`: the id Baton uses as the native ref, the rollout file `path`, and (from `thread/read`) its turns. */
export const Thread = Schema.Struct({
  id: Schema.String,
  path: Schema.optional(Schema.NullOr(Schema.String)),
  turns: Schema.optionalWith(Schema.Array(Turn), { default: () => [] })
})
export type Thread = typeof Thread.Type

/** Result of `thread/start`, `thread/resume` and `thread/fork` (the other members are not read). */
export const ThreadResponse = Schema.Struct({ thread: Thread, model: Schema.String })
export type ThreadResponse = typeof ThreadResponse.Type

/** Result of `thread/read`. */
export const ThreadReadResponse = Schema.Struct({ thread: Thread })

/** Result of `turn/start`: the turn, `inProgress`. */
export const TurnStartResponse = Schema.Struct({ turn: Turn })

/** Results of `turn/interrupt`, `thread/inject_items` and `thread/compact/start`: `{}`. */
export const EmptyResponse = Schema.Struct({})

/** `TokenUsageBreakdown`: token counts of one request (`last`) or of the thread so far (`total`). */
export const TokenUsageBreakdown = Schema.Struct({
  totalTokens: Schema.Number,
  inputTokens: Schema.Number,
  cachedInputTokens: Schema.Number,
  cacheWriteInputTokens: Schema.optionalWith(Schema.Number, { default: () => 0 }),
  outputTokens: Schema.Number,
  reasoningOutputTokens: Schema.Number
})
export type TokenUsageBreakdown = typeof TokenUsageBreakdown.Type

/**
 * `thread/tokenUsage/updated` params: `last` (the last model request, what the context holds), `total` (the thread
 * so far, billed) and `modelContextWindow` (the usable window: Codex reports 95% of the configured
 * `model_context_window`, e.g. 41,800 of 44,000).
 */
export const TokenUsageUpdated = Schema.Struct({
  threadId: Schema.String,
  turnId: Schema.String,
  tokenUsage: Schema.Struct({
    last: TokenUsageBreakdown,
    total: TokenUsageBreakdown,
    modelContextWindow: Schema.optional(Schema.NullOr(Schema.Number))
  })
})
export type TokenUsageUpdated = typeof TokenUsageUpdated.Type

/** `turn/started` and `turn/completed` params. */
export const TurnNotification = Schema.Struct({ threadId: Schema.String, turn: Turn })
export type TurnNotification = typeof TurnNotification.Type

/** `item/started` and `item/completed` params. */
export const ItemNotification = Schema.Struct({ threadId: Schema.String, turnId: Schema.String, item: ThreadItem })
export type ItemNotification = typeof ItemNotification.Type

/** `item/agentMessage/delta` (and the reasoning deltas): a piece of streamed text. */
export const DeltaNotification = Schema.Struct({ threadId: Schema.String, turnId: Schema.String, itemId: Schema.String, delta: Schema.String })

/** `error` params: a turn's error; `willRetry` true while Codex retries by itself. */
export const ErrorNotification = Schema.Struct({ threadId: Schema.String, turnId: Schema.String, error: TurnError, willRetry: Schema.Boolean })
export type ErrorNotification = typeof ErrorNotification.Type

/** `item/tool/call` params (server request): a dynamic tool call; `arguments` is the parsed JSON the model wrote. */
export const DynamicToolCallParams = Schema.Struct({
  threadId: Schema.String,
  turnId: Schema.String,
  callId: Schema.String,
  tool: Schema.String,
  arguments: Schema.Unknown
})
export type DynamicToolCallParams = typeof DynamicToolCallParams.Type

/** The answer to `item/tool/call`: text content and whether the call succeeded. */
export interface DynamicToolCallResponse {
  readonly contentItems: ReadonlyArray<{ readonly type: "inputText"; readonly text: string }>
  readonly success: boolean
}
