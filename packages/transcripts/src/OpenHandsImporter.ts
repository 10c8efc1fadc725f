/**
 * OpenHands evaluation output JSONL (one `EvalOutput` per line, its `history` the OpenHands event stream) into one
 * thread per line, keyed by `instance_id`.
 *
 * Owns: which OpenHands events are model history and how they map to turns and items. Does not own: line splitting,
 * JSON parsing or the skip policy (`TranscriptImporter`).
 *
 * Decisions (event → result):
 * - The `system` action (the system prompt) is skipped: not model history for Baton.
 * - A user `message` action starts a turn with `args.content` (falling back to `message`); in the real file there is
 *   exactly one, the task instruction. An agent `message` action is an `assistant_message`.
 * - `recall` actions and observations (workspace context and microagent knowledge retrieval) are skipped.
 * - Agent tool actions (`run`, `read`, `edit`, …: every action not named here) become a `tool_call`: id
 *   `tool_call_metadata.tool_call_id`, name `function_name`, text the function arguments exactly as the model emitted
 *   them (from `model_response.choices[].message.tool_calls`), else `JSON.stringify(args)` without `thought`. Its
 *   `args.thought` (the response's text) comes first as an `assistant_message`, once per response. `messageId` is
 *   the chat completion id (`model_response.id`), which groups the calls of one response; without it,
 *   `openhands:event:<id>`. Actions without tool-call metadata get the id `openhands:event:<id>`.
 * - `think` → `reasoning` (`args.thought`); `finish` → `assistant_message` items (`args.thought`, then
 *   `final_thought`, or `message`). Both are pseudo-tools: their acknowledgement observation ("Your thought has been
 *   logged.") is dropped and neither counts as a tool call, matching SOURCES.md's tool-action counts (run/edit/read).
 * - An observation answers the call with its `tool_call_metadata.tool_call_id`, else the call its `cause` (action id)
 *   issued → `tool_result`. `isError` for an `error` observation, and for a `run` observation whose
 *   `extras.metadata.exit_code` is non-zero: a failed shell command, as Claude Code and pi flag theirs, so error
 *   counts compare across formats. An `error` observation that answers no call (the
 *   agent's call was rejected before it became an action) is an `error` item. Other observations that answer no call
 *   (state changes) are skipped.
 */
import { Either, Schema } from "effect"
import type { RecordImporter, RecordIssue } from "./RecordImporter.js"
import { decoder } from "./internal/decode.js"
import { ThreadBuilder } from "./internal/ThreadBuilder.js"
import type { ImportedThread } from "./Transcript.js"

const Instance = Schema.Struct({ instance_id: Schema.String, history: Schema.Array(Schema.Unknown) })

const ModelToolCall = Schema.Struct({
  id: Schema.String,
  function: Schema.Struct({ arguments: Schema.String })
})
const ModelResponse = Schema.Struct({
  id: Schema.optional(Schema.NullOr(Schema.String)),
  choices: Schema.optional(Schema.NullOr(Schema.Array(Schema.Struct({
    message: Schema.optional(Schema.NullOr(Schema.Struct({
      tool_calls: Schema.optional(Schema.NullOr(Schema.Array(ModelToolCall)))
    })))
  }))))
})
const ToolCallMetadata = Schema.Struct({
  function_name: Schema.String,
  tool_call_id: Schema.String,
  model_response: Schema.optional(Schema.NullOr(ModelResponse))
})
const Event = Schema.Struct({
  id: Schema.Number,
  source: Schema.optional(Schema.NullOr(Schema.String)),
  message: Schema.optional(Schema.NullOr(Schema.String)),
  action: Schema.optional(Schema.String),
  observation: Schema.optional(Schema.String),
  cause: Schema.optional(Schema.NullOr(Schema.Number)),
  content: Schema.optional(Schema.NullOr(Schema.String)),
  args: Schema.optional(Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.Unknown }))),
  tool_call_metadata: Schema.optional(Schema.NullOr(ToolCallMetadata)),
  extras: Schema.optional(Schema.NullOr(Schema.Struct({
    metadata: Schema.optional(Schema.NullOr(Schema.Struct({
      exit_code: Schema.optional(Schema.NullOr(Schema.Number))
    })))
  })))
})
type Event = typeof Event.Type

const decodeInstance = decoder(Instance)
const decodeEvent = decoder(Event)

/** Actions that are neither tool calls nor handled specially. */
const skippedActions = new Set(["system", "recall", "change_agent_state", "null"])

const stringArg = (event: Event, key: string): string | undefined => {
  const value = event.args?.[key]
  return typeof value === "string" ? value : undefined
}

/** The function arguments the model emitted for `callId`, when the raw completion is recorded. */
const modelArguments = (event: Event, callId: string): string | undefined => {
  for (const choice of event.tool_call_metadata?.model_response?.choices ?? []) {
    for (const call of choice.message?.tool_calls ?? []) {
      if (call.id === callId) return call.function.arguments
    }
  }
  return undefined
}

const argsWithoutThought = (event: Event): string => {
  const { thought: _thought, ...rest } = event.args ?? {}
  return JSON.stringify(rest)
}

const buildThread = (file: string, line: number, instanceId: string, events: ReadonlyArray<Event>): ImportedThread => {
  const builder = new ThreadBuilder("openhands", file)
  builder.line = line
  /** action id → the source call id it issued */
  const callByAction = new Map<number, string>()
  /** call ids of pseudo-tools (think, finish) whose observations are dropped */
  const pseudoCalls = new Set<string>()
  let lastThoughtOf: string | null = null

  const thought = (event: Event, messageId: string) => {
    const text = stringArg(event, "thought")
    if (text !== undefined && text !== "" && lastThoughtOf !== messageId) builder.assistantMessage(text, messageId)
    lastThoughtOf = messageId
  }

  for (const event of events) {
    const metadata = event.tool_call_metadata ?? undefined
    const messageId = metadata?.model_response?.id ?? `openhands:event:${event.id}`
    if (event.action !== undefined) {
      if (skippedActions.has(event.action)) continue
      if (event.action === "message") {
        const text = stringArg(event, "content") ?? event.message ?? ""
        if (event.source === "user") builder.startTurn(text)
        else builder.assistantMessage(text, messageId)
        continue
      }
      if (event.action === "think") {
        if (metadata !== undefined) pseudoCalls.add(metadata.tool_call_id)
        builder.reasoning(stringArg(event, "thought") ?? event.message ?? "", messageId)
        continue
      }
      if (event.action === "finish") {
        if (metadata !== undefined) pseudoCalls.add(metadata.tool_call_id)
        thought(event, messageId)
        const final = stringArg(event, "final_thought") ?? stringArg(event, "message")
        if (final !== undefined && final !== "") builder.assistantMessage(final, messageId)
        continue
      }
      const callId = metadata?.tool_call_id ?? `openhands:event:${event.id}`
      callByAction.set(event.id, callId)
      thought(event, messageId)
      builder.toolCall(
        callId,
        metadata?.function_name ?? event.action,
        modelArguments(event, callId) ?? argsWithoutThought(event),
        messageId
      )
      continue
    }
    if (event.observation === undefined || event.observation === "recall") continue
    const callId = metadata?.tool_call_id ??
      (event.cause === undefined || event.cause === null ? undefined : callByAction.get(event.cause))
    const text = event.content ?? event.message ?? ""
    const exitCode = event.extras?.metadata?.exit_code
    const isError = event.observation === "error" ||
      (event.observation === "run" && typeof exitCode === "number" && exitCode !== 0)
    if (callId !== undefined) {
      if (!pseudoCalls.has(callId)) builder.toolResult(callId, text, isError, metadata?.function_name ?? null)
    } else if (isError) {
      builder.error(text, null)
    }
  }
  return builder.build(instanceId)
}

/**
 * An OpenHands importer for `file`: each `record` is one `EvalOutput` line and becomes one thread (see the module
 * docblock). `record` fails with a `RecordIssue` naming the field for: a line without a string `instance_id` or a
 * `history` array; an event without a numeric `id`, with a non-string `action`/`observation`/`content`/`message`,
 * non-numeric `cause` or `extras.metadata.exit_code`, non-object `args`, or `tool_call_metadata`
 * without `function_name`/`tool_call_id` (or whose recorded `model_response` tool calls lack
 * `id`/`function.arguments`). An invalid line yields no thread.
 */
export const make = (file: string): RecordImporter => {
  const threads: Array<ImportedThread> = []

  const record = (line: number, value: unknown): RecordIssue | undefined => {
    const instance = decodeInstance(value)
    if (Either.isLeft(instance)) return instance.left
    const events: Array<Event> = []
    for (let i = 0; i < instance.right.history.length; i++) {
      const event = decodeEvent(instance.right.history[i], `history.${i}`)
      if (Either.isLeft(event)) return event.left
      events.push(event.right)
    }
    threads.push(buildThread(file, line, instance.right.instance_id, events))
    return undefined
  }

  return { record, finish: () => threads }
}
