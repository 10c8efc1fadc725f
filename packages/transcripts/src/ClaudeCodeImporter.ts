/**
 * Claude Code session JSONL (`~/.claude/projects/<project>/<sessionId>.jsonl`, and its `subagents/agent-*.jsonl`)
 * into one thread.
 *
 * Owns: which Claude Code records are model history and how they map to turns and items. Does not own: line
 * splitting, JSON parsing or the skip policy (`TranscriptImporter`).
 *
 * Decisions (record `type` → result):
 * - `user` with a string prompt, or text blocks (joined with `"\n"`), starts a turn. That includes
 *   `<task-notification>` records: Claude Code sends them to the model as a user message that starts a new response.
 * - `user` with `isCompactSummary` (the record after a `compact_boundary`) is a `summary` item of the current turn,
 *   not a turn.
 * - `user` with `tool_result` blocks: one `tool_result` item per block, paired by `tool_use_id`; `is_error` →
 *   `isError`. Text blocks beside tool results are not a prompt: an interruption marker becomes an `error` item, any
 *   other text is dropped.
 * - `user` with `isMeta` (skill bodies, `<system-reminder>` hook output, the local-command caveat) is skipped: the
 *   harness injected it, the user did not type it. Local slash-command echoes (`<command-name>`,
 *   `<local-command-stdout>`/`-stderr>`) are skipped too: a `/compact` is represented by its summary item.
 * - `user` whose text is `[Request interrupted by user…]` is an `error` item of the current turn, not a prompt.
 * - `assistant`: one record per content block, grouped by `message.id` (`messageId`), kept in record order:
 *   `text` → `assistant_message`, `thinking` → `reasoning` (the text; signatures are redacted in the real files),
 *   `tool_use` → `tool_call` (arguments `JSON.stringify(input)`); `redacted_thinking` and unknown blocks are dropped.
 *   A record flagged `isApiErrorMessage` turns its text into `error` items.
 * - Sidechain records (`isSidechain: true`) belong to a subagent. In a main session file they are skipped; a file
 *   whose first message record is a sidechain (a `subagents/agent-*.jsonl`) is the subagent's own thread, keyed
 *   `<sessionId>/agent-<agentId>`.
 * - `system` (including `compact_boundary`, whose summary arrives in the next user record), `progress`,
 *   `file-history-snapshot`, `queue-operation`, `summary` (a session title) and unknown types are skipped: they are
 *   not model context.
 */
import { Either, Schema } from "effect"
import type { RecordImporter, RecordIssue } from "./RecordImporter.js"
import { argumentsText, decodeBlockType, decoder, StringOrBlocks, textOf } from "./internal/decode.js"
import { fileStem, ThreadBuilder } from "./internal/ThreadBuilder.js"

const RecordType = Schema.Struct({ type: Schema.String })

const Identity = {
  sessionId: Schema.optional(Schema.String),
  agentId: Schema.optional(Schema.String),
  isSidechain: Schema.optional(Schema.NullOr(Schema.Boolean))
}

const UserRecord = Schema.Struct({
  ...Identity,
  isMeta: Schema.optional(Schema.NullOr(Schema.Boolean)),
  isCompactSummary: Schema.optional(Schema.NullOr(Schema.Boolean)),
  message: Schema.Struct({ content: StringOrBlocks })
})

const AssistantRecord = Schema.Struct({
  ...Identity,
  isApiErrorMessage: Schema.optional(Schema.NullOr(Schema.Boolean)),
  message: Schema.Struct({ id: Schema.String, content: Schema.Array(Schema.Unknown) })
})

const ToolResultBlock = Schema.Struct({
  tool_use_id: Schema.String,
  content: Schema.optional(Schema.NullOr(StringOrBlocks)),
  is_error: Schema.optional(Schema.NullOr(Schema.Boolean))
})
const ToolUseBlock = Schema.Struct({ id: Schema.String, name: Schema.String, input: Schema.Unknown })
const ThinkingBlock = Schema.Struct({ thinking: Schema.String })
const TextBlock = Schema.Struct({ text: Schema.String })

const decodeRecordType = decoder(RecordType)
const decodeUser = decoder(UserRecord)
const decodeAssistant = decoder(AssistantRecord)
const decodeToolResult = decoder(ToolResultBlock)
const decodeToolUse = decoder(ToolUseBlock)
const decodeThinking = decoder(ThinkingBlock)
const decodeText = decoder(TextBlock)

type Op = (builder: ThreadBuilder) => void

const localCommandPrefixes = [
  "<command-name>",
  "<command-message>",
  "<local-command-stdout>",
  "<local-command-stderr>",
  "<local-command-caveat>"
]
const isLocalCommand = (text: string) => {
  const start = text.trimStart()
  return localCommandPrefixes.some((prefix) => start.startsWith(prefix))
}
const isInterruption = (text: string) => text.trimStart().startsWith("[Request interrupted by user")

/**
 * A Claude Code importer for `file` (see the module docblock for what each record becomes). `record` fails with a
 * `RecordIssue` naming the field for: a record without a string `type`; a `user` record without
 * `message.content` (string or array); an `assistant` record without `message.id` or `message.content` array; a
 * content block without a string `type`; a `tool_result` without `tool_use_id`; a `tool_use` without `id`/`name`; a
 * `text`/`thinking` block without its text.
 */
export const make = (file: string): RecordImporter => {
  const builder = new ThreadBuilder("claude-code", file)
  let sessionId: string | undefined
  let agentId: string | undefined
  let sidechainThread: boolean | undefined

  /** Records identity and decides whether a sidechain record belongs to this thread. */
  const admit = (record: {
    readonly sessionId?: string | undefined
    readonly agentId?: string | undefined
    readonly isSidechain?: boolean | null | undefined
  }) => {
    const sidechain = record.isSidechain === true
    if (sidechainThread === undefined) sidechainThread = sidechain
    if (sidechain && !sidechainThread) return false
    sessionId ??= record.sessionId
    agentId ??= record.agentId
    return true
  }

  const userOps = (record: typeof UserRecord.Type): Either.Either<ReadonlyArray<Op>, RecordIssue> => {
    const content = record.message.content
    if (record.isCompactSummary === true) {
      return Either.map(textOf(content, "message.content"), (text) => [(b: ThreadBuilder) => b.summary(text)])
    }
    if (typeof content === "string") return Either.right(promptOps(content, record.isMeta === true))
    const ops: Array<Op> = []
    const texts: Array<string> = []
    let toolResults = 0
    for (let i = 0; i < content.length; i++) {
      const at = `message.content.${i}`
      const block = decodeBlockType(content[i], at)
      if (Either.isLeft(block)) return Either.left(block.left)
      if (block.right.type === "tool_result") {
        const result = decodeToolResult(content[i], at)
        if (Either.isLeft(result)) return Either.left(result.left)
        const { tool_use_id, is_error } = result.right
        const text = textOf(result.right.content ?? "", `${at}.content`)
        if (Either.isLeft(text)) return Either.left(text.left)
        toolResults++
        ops.push((b) => b.toolResult(tool_use_id, text.right, is_error === true, null))
      } else if (block.right.type === "text") {
        const text = decodeText(content[i], at)
        if (Either.isLeft(text)) return Either.left(text.left)
        texts.push(text.right.text)
      }
    }
    if (toolResults === 0) return Either.right(promptOps(texts.join("\n"), record.isMeta === true))
    for (const text of texts) if (isInterruption(text)) ops.push((b) => b.error(text, null))
    return Either.right(ops)
  }

  const promptOps = (text: string, isMeta: boolean): ReadonlyArray<Op> => {
    if (isMeta || isLocalCommand(text)) return []
    if (isInterruption(text)) return [(b) => b.error(text, null)]
    return [(b) => b.startTurn(text)]
  }

  const assistantOps = (record: typeof AssistantRecord.Type): Either.Either<ReadonlyArray<Op>, RecordIssue> => {
    const messageId = record.message.id
    const apiError = record.isApiErrorMessage === true
    const content = record.message.content
    const ops: Array<Op> = []
    for (let i = 0; i < content.length; i++) {
      const at = `message.content.${i}`
      const block = decodeBlockType(content[i], at)
      if (Either.isLeft(block)) return Either.left(block.left)
      switch (block.right.type) {
        case "text": {
          const text = decodeText(content[i], at)
          if (Either.isLeft(text)) return Either.left(text.left)
          const value = text.right.text
          ops.push(apiError ? (b) => b.error(value, messageId) : (b) => b.assistantMessage(value, messageId))
          break
        }
        case "thinking": {
          const thinking = decodeThinking(content[i], at)
          if (Either.isLeft(thinking)) return Either.left(thinking.left)
          const value = thinking.right.thinking
          ops.push((b) => b.reasoning(value, messageId))
          break
        }
        case "tool_use": {
          const use = decodeToolUse(content[i], at)
          if (Either.isLeft(use)) return Either.left(use.left)
          const { id, name, input } = use.right
          const args = argumentsText(input)
          ops.push((b) => b.toolCall(id, name, args, messageId))
          break
        }
      }
    }
    return Either.right(ops)
  }

  const record = (line: number, value: unknown): RecordIssue | undefined => {
    const type = decodeRecordType(value)
    if (Either.isLeft(type)) return type.left
    let ops: Either.Either<ReadonlyArray<Op>, RecordIssue>
    let admitted: () => boolean
    if (type.right.type === "user") {
      const user = decodeUser(value)
      if (Either.isLeft(user)) return user.left
      ops = userOps(user.right)
      admitted = () => admit(user.right)
    } else if (type.right.type === "assistant") {
      const assistant = decodeAssistant(value)
      if (Either.isLeft(assistant)) return assistant.left
      ops = assistantOps(assistant.right)
      admitted = () => admit(assistant.right)
    } else {
      return undefined
    }
    if (Either.isLeft(ops)) return ops.left
    if (!admitted()) return undefined
    builder.line = line
    for (const op of ops.right) op(builder)
    return undefined
  }

  const finish = () => {
    const key = sessionId === undefined
      ? fileStem(file)
      : agentId === undefined
      ? sessionId
      : `${sessionId}/agent-${agentId}`
    return [builder.build(key)]
  }

  return { record, finish }
}
