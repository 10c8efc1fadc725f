/**
 * Commands accepted by the orchestrator. Each carries a client `commandId`; a command seen before returns the
 * result recorded in its command receipt instead of running again.
 */
import { Schema } from "effect"
import { CommandId, ProviderInstance, RunId, ThreadId } from "./Ids.js"

export const CreateThread = Schema.TaggedStruct("CreateThread", {
  commandId: CommandId,
  title: Schema.String.pipe(Schema.maxLength(500)),
  providerInstance: ProviderInstance
})
export type CreateThread = typeof CreateThread.Type

/** The largest prompt accepted, in characters (1 MiB of UTF-16 code units); larger prompts are rejected whole. */
export const maxPromptChars = 1_048_576

export const SendMessage = Schema.TaggedStruct("SendMessage", {
  commandId: CommandId,
  threadId: ThreadId,
  text: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(maxPromptChars))
})
export type SendMessage = typeof SendMessage.Type

export const InterruptRun = Schema.TaggedStruct("InterruptRun", {
  commandId: CommandId,
  threadId: ThreadId,
  runId: RunId
})
export type InterruptRun = typeof InterruptRun.Type

export const SwitchProvider = Schema.TaggedStruct("SwitchProvider", {
  commandId: CommandId,
  threadId: ThreadId,
  providerInstance: ProviderInstance
})
export type SwitchProvider = typeof SwitchProvider.Type

export const CompactThread = Schema.TaggedStruct("CompactThread", {
  commandId: CommandId,
  threadId: ThreadId
})
export type CompactThread = typeof CompactThread.Type

/**
 * `/offload`: summarise the thread's older history into one `summary` item, keeping the newest `keepTokens` tokens
 * (rendered) verbatim. Without `keepTokens` the default is min(16,000, floor(window / 4)) of the active provider
 * thread's window (16,000 when the window is unknown).
 */
export const OffloadThread = Schema.TaggedStruct("OffloadThread", {
  commandId: CommandId,
  threadId: ThreadId,
  keepTokens: Schema.optional(Schema.Int.pipe(Schema.nonNegative()))
})
export type OffloadThread = typeof OffloadThread.Type

export const Command = Schema.Union(CreateThread, SendMessage, InterruptRun, SwitchProvider, CompactThread, OffloadThread)
export type Command = typeof Command.Type

/** A stored command receipt: the first result of a command, returned again on a retry with the same id. */
export const CommandReceipt = Schema.Struct({
  commandId: CommandId,
  commandType: Schema.String,
  threadId: Schema.NullOr(ThreadId),
  result: Schema.Unknown,
  createdAt: Schema.DateTimeUtc
})
export type CommandReceipt = typeof CommandReceipt.Type
