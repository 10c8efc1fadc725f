/**
 * SWE-agent trajectory (`.traj`, one JSON document) into one thread keyed by the file stem, read from the chat
 * `history[]` (what the model saw). `trajectory[]` (per-step copies of the prompt) and `info` are not read.
 *
 * Owns: which history messages are model history and how they map to turns and items. Does not own: reading or
 * parsing the document, nor the skip policy (`TranscriptImporter`, which calls `record` once per `history[]`
 * message; every record is line 1).
 *
 * Decisions (history message → result):
 * - `system` (the system prompt) and `is_demo` messages (an in-context demonstration of another task, 19 KB in the
 *   pydicom file) are skipped: prompt scaffolding, not this conversation's history.
 * - `assistant` with native `tool_calls` (function-calling configs): its `content` as an `assistant_message`, then one
 *   `tool_call` per call (id and name from the call, text its `function.arguments`). `tool` messages answer them by
 *   `tool_call_ids[0]` (SWE-agent sends one tool message per call).
 * - `assistant` without `tool_calls` but with a parsed `action` (non-function-calling configs, e.g. pydicom): its
 *   `thought` (the reply minus the fenced command; `content` if absent, trailing whitespace trimmed) as an
 *   `assistant_message`, then a synthesized `tool_call` named `bash` (SWE-agent runs every command, its own editor
 *   commands included, in its shell) with arguments `{"command": action}` and id `swe-agent:history:<index>`. The
 *   next `user` message is that command's observation and becomes its `tool_result`. A command with no following
 *   message (pydicom's final `submit`, whose output the model never saw) stays `dangling`.
 * - Any other `user` message is a prompt and starts a turn; in practice the first non-demo one, the task statement.
 * - `messageId` is `swe-agent:history:<index>`. SWE-agent records no error flag, so `isError` is always false.
 */
import { Either, Schema } from "effect"
import type { RecordImporter, RecordIssue } from "./RecordImporter.js"
import { decoder, StringOrBlocks, textOf } from "./internal/decode.js"
import { fileStem, ThreadBuilder } from "./internal/ThreadBuilder.js"

const Trajectory = Schema.Struct({ history: Schema.Array(Schema.Unknown) })

const ToolCall = Schema.Struct({
  id: Schema.String,
  function: Schema.Struct({ name: Schema.String, arguments: Schema.Unknown })
})
const Message = Schema.Struct({
  role: Schema.String,
  content: StringOrBlocks,
  is_demo: Schema.optional(Schema.NullOr(Schema.Boolean)),
  thought: Schema.optional(Schema.NullOr(Schema.String)),
  action: Schema.optional(Schema.NullOr(Schema.String)),
  tool_calls: Schema.optional(Schema.NullOr(Schema.Array(ToolCall))),
  tool_call_ids: Schema.optional(Schema.NullOr(Schema.Array(Schema.String)))
})

const decodeTrajectory = decoder(Trajectory)
const decodeMessage = decoder(Message)

/**
 * The `history` array of a parsed `.traj` document, whose elements are the records to feed to `make(file).record`.
 * Fails with a `RecordIssue` (field `history`) when the document is not an object with a `history` array.
 */
export const historyOf = (document: unknown): Either.Either<ReadonlyArray<unknown>, RecordIssue> =>
  Either.map(decodeTrajectory(document), (trajectory) => trajectory.history)

type Op = () => void

/**
 * A SWE-agent importer for `file`; feed it the `historyOf` messages in order (see the module docblock). `record`
 * fails with a `RecordIssue` named `history.<index>.<field>` for a message without a string `role`, without
 * `content` (string or text blocks), or with a non-boolean `is_demo`, non-string `thought`/`action`, malformed
 * `tool_calls` (each needs `id` and `function.name`) or non-string `tool_call_ids`.
 */
export const make = (file: string): RecordImporter => {
  const builder = new ThreadBuilder("swe-agent", file)
  let index = -1
  /** the synthesized id of a parsed command waiting for its observation */
  let pendingCommand: string | undefined

  const ops = (
    message: typeof Message.Type,
    at: string,
    messageId: string
  ): Either.Either<ReadonlyArray<Op>, RecordIssue> => {
    if (message.is_demo === true || message.role === "system") return Either.right([])
    const content = textOf(message.content, `${at}.content`)
    if (Either.isLeft(content)) return Either.left(content.left)
    const text = content.right
    switch (message.role) {
      case "user":
        return Either.right([() => {
          if (pendingCommand === undefined) builder.startTurn(text)
          else builder.toolResult(pendingCommand, text, false, "bash")
          pendingCommand = undefined
        }])
      case "tool": {
        const callId = message.tool_call_ids?.[0] ?? messageId
        return Either.right([() => builder.toolResult(callId, text, false, null)])
      }
      case "assistant": {
        const calls = message.tool_calls ?? []
        const action = message.action ?? ""
        if (calls.length > 0) {
          return Either.right([() => {
            pendingCommand = undefined
            if (text !== "") builder.assistantMessage(text, messageId)
            for (const call of calls) {
              const args = call.function.arguments
              const text = typeof args === "string" ? args : JSON.stringify(args ?? {})
              builder.toolCall(call.id, call.function.name, text, messageId)
            }
          }])
        }
        if (action.trim() !== "") {
          const said = (message.thought ?? text).trimEnd()
          return Either.right([() => {
            if (said !== "") builder.assistantMessage(said, messageId)
            builder.toolCall(messageId, "bash", JSON.stringify({ command: action }), messageId)
            pendingCommand = messageId
          }])
        }
        return Either.right([() => {
          pendingCommand = undefined
          builder.assistantMessage(text, messageId)
        }])
      }
      default:
        return Either.right([])
    }
  }

  const record = (_line: number, value: unknown): RecordIssue | undefined => {
    index++
    const at = `history.${index}`
    const message = decodeMessage(value, at)
    if (Either.isLeft(message)) return message.left
    const applied = ops(message.right, at, `swe-agent:history:${index}`)
    if (Either.isLeft(applied)) return applied.left
    builder.line = 1
    for (const op of applied.right) op()
    return undefined
  }

  return { record, finish: () => [builder.build(fileStem(file))] }
}
