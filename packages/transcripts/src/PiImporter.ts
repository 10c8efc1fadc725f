/**
 * pi coding-agent session JSONL (`~/.pi/agent/sessions/…/*.jsonl`) into one thread.
 *
 * Owns: which pi entries are model history and how they map to turns and items. Does not own: line splitting, JSON
 * parsing or the skip policy (`TranscriptImporter`).
 *
 * Decisions (entry → result):
 * - `session` gives the thread key (`id`); without one the file stem is used.
 * - `message` with role `user` starts a turn (text blocks joined with `"\n"`; a string content is taken as is). Every
 *   user message is a prompt in pi, including slash-command text such as `/mode` that reached the model.
 * - role `assistant`: `messageId` is synthesized as `pi:L<line>` (pi stores no response id). In block order: `text` →
 *   `assistant_message`, `thinking` → `reasoning`, `toolCall` → `tool_call` (arguments `JSON.stringify(arguments)`;
 *   an aborted call's `partialJson` is ignored, `arguments` holds what was parsed). A `stopReason` of `aborted` or
 *   `error` adds an `error` item with `errorMessage` after the blocks: the turn was cut short there.
 * - role `toolResult` → `tool_result` paired by `toolCallId`, `isError` as recorded.
 * - role `bashExecution` (a shell command the user ran with `!`, not a model tool call) → a `tool_call` named `bash`
 *   with arguments `{"command": …}` and id `pi:bash:L<line>`, immediately answered by a `tool_result` with the
 *   output, `isError` when the command was cancelled or exited non-zero. pi shows these to the model as context, so
 *   they are history; modelling them as a tool unit keeps the command and its output together. They land in the
 *   current turn (an implicit empty-prompt turn if none has started).
 * - `compaction` → a `summary` item (its `summary` text) where it occurs. The compacted entries stay in the file and
 *   are imported too: the summary replaces them only in pi's own context, and Baton keeps every original.
 * - `model_change`, `thinking_level_change`, unknown entry types and unknown message roles are skipped: they change
 *   settings, not history.
 */
import { Either, Schema } from "effect"
import type { RecordImporter, RecordIssue } from "./RecordImporter.js"
import { argumentsText, decodeBlockType, decoder, StringOrBlocks, textOf } from "./internal/decode.js"
import { fileStem, ThreadBuilder } from "./internal/ThreadBuilder.js"

const EntryType = Schema.Struct({ type: Schema.String })
const SessionEntry = Schema.Struct({ id: Schema.String })
const CompactionEntry = Schema.Struct({ summary: Schema.String })
const MessageEntry = Schema.Struct({ message: Schema.Unknown })
const MessageRole = Schema.Struct({ role: Schema.String })

const UserMessage = Schema.Struct({ content: StringOrBlocks })
const AssistantMessage = Schema.Struct({
  content: Schema.Array(Schema.Unknown),
  stopReason: Schema.optional(Schema.NullOr(Schema.String)),
  errorMessage: Schema.optional(Schema.NullOr(Schema.String))
})
const ToolResultMessage = Schema.Struct({
  toolCallId: Schema.String,
  toolName: Schema.optional(Schema.NullOr(Schema.String)),
  content: StringOrBlocks,
  isError: Schema.optional(Schema.NullOr(Schema.Boolean))
})
const BashExecutionMessage = Schema.Struct({
  command: Schema.String,
  output: Schema.String,
  exitCode: Schema.optional(Schema.NullOr(Schema.Number)),
  cancelled: Schema.optional(Schema.NullOr(Schema.Boolean))
})

const TextBlock = Schema.Struct({ text: Schema.String })
const ThinkingBlock = Schema.Struct({ thinking: Schema.String })
const ToolCallBlock = Schema.Struct({ id: Schema.String, name: Schema.String, arguments: Schema.Unknown })

const decodeEntryType = decoder(EntryType)
const decodeSession = decoder(SessionEntry)
const decodeCompaction = decoder(CompactionEntry)
const decodeMessageEntry = decoder(MessageEntry)
const decodeMessageRole = decoder(MessageRole)
const decodeUser = decoder(UserMessage)
const decodeAssistant = decoder(AssistantMessage)
const decodeToolResult = decoder(ToolResultMessage)
const decodeBash = decoder(BashExecutionMessage)
const decodeText = decoder(TextBlock)
const decodeThinking = decoder(ThinkingBlock)
const decodeToolCall = decoder(ToolCallBlock)

type Op = (builder: ThreadBuilder) => void

const assistantOps = (
  message: typeof AssistantMessage.Type,
  messageId: string
): Either.Either<ReadonlyArray<Op>, RecordIssue> => {
  const ops: Array<Op> = []
  const content = message.content
  for (let i = 0; i < content.length; i++) {
    const at = `message.content.${i}`
    const block = decodeBlockType(content[i], at)
    if (Either.isLeft(block)) return Either.left(block.left)
    switch (block.right.type) {
      case "text": {
        const text = decodeText(content[i], at)
        if (Either.isLeft(text)) return Either.left(text.left)
        const value = text.right.text
        ops.push((b) => b.assistantMessage(value, messageId))
        break
      }
      case "thinking": {
        const thinking = decodeThinking(content[i], at)
        if (Either.isLeft(thinking)) return Either.left(thinking.left)
        const value = thinking.right.thinking
        ops.push((b) => b.reasoning(value, messageId))
        break
      }
      case "toolCall": {
        const call = decodeToolCall(content[i], at)
        if (Either.isLeft(call)) return Either.left(call.left)
        const { arguments: args, id, name } = call.right
        const text = argumentsText(args)
        ops.push((b) => b.toolCall(id, name, text, messageId))
        break
      }
    }
  }
  const stop = message.stopReason
  if (stop === "aborted" || stop === "error") {
    const text = message.errorMessage ?? `response ${stop}`
    ops.push((b) => b.error(text, messageId))
  }
  return Either.right(ops)
}

const messageOps = (line: number, message: unknown, role: string): Either.Either<ReadonlyArray<Op>, RecordIssue> => {
  switch (role) {
    case "user": {
      const user = decodeUser(message, "message")
      if (Either.isLeft(user)) return Either.left(user.left)
      return Either.map(textOf(user.right.content, "message.content"), (text) => [
        (b: ThreadBuilder) => b.startTurn(text)
      ])
    }
    case "assistant": {
      const assistant = decodeAssistant(message, "message")
      if (Either.isLeft(assistant)) return Either.left(assistant.left)
      return assistantOps(assistant.right, `pi:L${line}`)
    }
    case "toolResult": {
      const result = decodeToolResult(message, "message")
      if (Either.isLeft(result)) return Either.left(result.left)
      const { isError, toolCallId, toolName } = result.right
      return Either.map(textOf(result.right.content, "message.content"), (text) => [
        (b: ThreadBuilder) => b.toolResult(toolCallId, text, isError === true, toolName ?? null)
      ])
    }
    case "bashExecution": {
      const bash = decodeBash(message, "message")
      if (Either.isLeft(bash)) return Either.left(bash.left)
      const { cancelled, command, exitCode, output } = bash.right
      const id = `pi:bash:L${line}`
      const failed = cancelled === true || (exitCode !== undefined && exitCode !== null && exitCode !== 0)
      return Either.right([(b: ThreadBuilder) => {
        b.toolCall(id, "bash", JSON.stringify({ command }), id)
        b.toolResult(id, output, failed, "bash")
      }])
    }
    default:
      return Either.right([])
  }
}

/**
 * A pi importer for `file` (see the module docblock for what each entry becomes). `record` fails with a
 * `RecordIssue` naming the field for: an entry without a string `type`; a `session` without `id`; a `compaction`
 * without `summary`; a `message` without `message.role`; a user message without `content`; an assistant message
 * without a `content` array, or with a block lacking `type`, `text`, `thinking`, or a `toolCall` lacking `id`/`name`;
 * a `toolResult` without `toolCallId` or `content`; a `bashExecution` without `command` or `output`.
 */
export const make = (file: string): RecordImporter => {
  const builder = new ThreadBuilder("pi", file)
  let sessionId: string | undefined

  const record = (line: number, value: unknown): RecordIssue | undefined => {
    const entry = decodeEntryType(value)
    if (Either.isLeft(entry)) return entry.left
    let ops: Either.Either<ReadonlyArray<Op>, RecordIssue>
    switch (entry.right.type) {
      case "session": {
        const session = decodeSession(value)
        if (Either.isLeft(session)) return session.left
        sessionId ??= session.right.id
        return undefined
      }
      case "compaction": {
        const compaction = decodeCompaction(value)
        if (Either.isLeft(compaction)) return compaction.left
        const summary = compaction.right.summary
        ops = Either.right([(b) => b.summary(summary)])
        break
      }
      case "message": {
        const message = decodeMessageEntry(value)
        if (Either.isLeft(message)) return message.left
        const role = decodeMessageRole(message.right.message, "message")
        if (Either.isLeft(role)) return role.left
        ops = messageOps(line, message.right.message, role.right.role)
        break
      }
      default:
        return undefined
    }
    if (Either.isLeft(ops)) return ops.left
    builder.line = line
    for (const op of ops.right) op(builder)
    return undefined
  }

  return { record, finish: () => [builder.build(sessionId ?? fileStem(file))] }
}
