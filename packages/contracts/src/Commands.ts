/**
 * Commands accepted by the orchestrator. Each carries a client `commandId`; a command seen before returns the
 * result recorded in its command receipt instead of running again.
 */
import { Schema } from "effect"
import { ClientTool, ToolResult, ToolResultOffloadControl } from "./Domain.js"
import { storableText } from "./Text.js"
import { CommandId, ProviderInstance, RunId, ThreadId } from "./Ids.js"

export { loneSurrogateAt, storableText } from "./Text.js"

/** The most tools a thread or a message may declare. */
export const maxTools = 128

/** Client tools (`ClientTool`): at most `maxTools`, names unique. */
export const ClientTools = Schema.Array(ClientTool).pipe(
  Schema.maxItems(maxTools),
  Schema.filter((tools) => {
    const seen = new Set<string>()
    for (const t of tools) {
      if (seen.has(t.name)) return `tool ${JSON.stringify(t.name)} is declared twice`
      seen.add(t.name)
    }
    return true
  })
)

/** Creates a thread; `tools`: the client's tools every run of the thread offers (see `SendMessage.tools`). */
export const CreateThread = Schema.TaggedStruct("CreateThread", {
  commandId: CommandId,
  title: Schema.String.pipe(Schema.maxLength(500)),
  providerInstance: ProviderInstance,
  tools: Schema.optional(ClientTools)
})
export type CreateThread = typeof CreateThread.Type

/** The largest prompt accepted, in characters (1 MiB of UTF-16 code units); larger prompts are rejected whole. */
export const maxPromptChars = 1_048_576

/**
 * A user's prompt: 1 to `maxPromptChars` characters of well-formed Unicode without NUL (U+0000). A lone UTF-16
 * surrogate cannot reach a provider unchanged (every UTF-8 boundary turns it into U+FFFD) and Postgres cannot store
 * a NUL, so such a prompt is rejected, with the index of the first, instead of altered or failing in storage.
 */
export const PromptText = Schema.String.pipe(
  Schema.minLength(1),
  Schema.maxLength(maxPromptChars),
  Schema.filter(storableText("the prompt"))
)

/**
 * Whether `text` holds nothing but whitespace (ECMAScript's `String.prototype.trim` set: spaces, tabs, line breaks,
 * U+00A0, U+FEFF, U+2028 and the other Unicode space separators), or is empty. The dashboard's Send button uses the same
 * test (`text.trim() === ""`).
 */
export const isBlank = (text: string): boolean => text.trim() === ""

/**
 * A message a user sends through the API (`POST /threads/{id}/messages`, so `baton send` and the dashboard alike): a
 * `PromptText` that is not blank (`isBlank`). Whitespace-only text is a typing mistake or an empty pipe,
 * never a turn a user means, so it is refused; text with anything else in it is kept as typed, whitespace included.
 *
 * Only the API's entry refuses it: `SendMessage` (the orchestrator's command) takes any `PromptText`, because a
 * replayed transcript's empty user turn is sent as " ", and the gateway records agents' messages as they come.
 */
export const MessageText = PromptText.pipe(
  Schema.filter((text) => !isBlank(text) || "the message is blank (only whitespace): write something to send")
)

/**
 * Sends a user message (one run) to a thread. `text` reaches the provider byte-identical. `tools`: client tools for
 * this run, over the thread's (`Domain.mergeTools`: one with a thread tool's name replaces it, the others are added).
 */
export const SendMessage = Schema.TaggedStruct("SendMessage", {
  commandId: CommandId,
  threadId: ThreadId,
  text: PromptText,
  tools: Schema.optional(ClientTools)
})
export type SendMessage = typeof SendMessage.Type

/** Interrupts `runId`, or without it the thread's run in progress (the first unfinished run when it is carried out). */
export const InterruptRun = Schema.TaggedStruct("InterruptRun", {
  commandId: CommandId,
  threadId: ThreadId,
  runId: Schema.optional(RunId)
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
 * Forks a thread: a new thread whose history starts with the parent's history through run `atRunSeq` (default: the
 * last run that has ended), on `providerInstance` (default: the parent's active provider). The fork's provider
 * thread is owed that history by a `fork` handoff. Fails with `ThreadNotFound`, `UnknownProvider`, `InvalidRequest`
 * (a run at or below `atRunSeq` has not ended, or `atRunSeq` is past the last run).
 */
export const ForkThread = Schema.TaggedStruct("ForkThread", {
  commandId: CommandId,
  threadId: ThreadId,
  atRunSeq: Schema.optional(Schema.Int.pipe(Schema.nonNegative())),
  providerInstance: Schema.optional(ProviderInstance),
  title: Schema.optional(Schema.String.pipe(Schema.maxLength(500)))
})
export type ForkThread = typeof ForkThread.Type

/**
 * Merges a fork back into its parent: the fork's runs that ended since the fork (or since its previous merge) are
 * appended to the parent as one merge run and owed to the parent's active provider thread by a `merge` handoff. It
 * does not wait for a running turn on the parent: the merge is delivered at the parent's next turn start, and its
 * history takes its place in the parent's order after every run unfinished when it was merged (recorded when they
 * end: the result's `behindRunId`). Fails with `ThreadNotFound`, `InvalidRequest` (the thread is not a fork).
 */
export const MergeBack = Schema.TaggedStruct("MergeBack", {
  commandId: CommandId,
  forkThreadId: ThreadId
})
export type MergeBack = typeof MergeBack.Type

/**
 * `/offload`: summarise the thread's older history into one `summary` item, keeping the newest `keepTokens` tokens
 * (rendered) verbatim. Without `keepTokens` the default is min(16,000, floor(window / 4)) of the active provider
 * thread's window (16,000 when the window is unknown). `commandId` is the operation id: the same id again answers the
 * first outcome (whatever it was), and names the operation for `GET .../offload/{operationId}` and its cancellation.
 * `dryRun: true` changes nothing and calls no summariser: it answers what would be summarised (`outcome: "preview"`).
 */
export const OffloadThread = Schema.TaggedStruct("OffloadThread", {
  commandId: CommandId,
  threadId: ThreadId,
  keepTokens: Schema.optional(Schema.Int.pipe(Schema.nonNegative())),
  dryRun: Schema.optional(Schema.Boolean)
})
export type OffloadThread = typeof OffloadThread.Type


/**
 * Undoes the thread's newest `/offload` not yet undone: the visible history is again what it was before it (the
 * previous summary, if any, and every item after its cut). The summary item stays in the log; its offload record is
 * marked undone. Refused (`undone: false`, with the reason) when the summary is already owed to or delivered by a
 * handoff. Fails with `ThreadNotFound`, `RunInProgress`. A repeated command id answers as the first time.
 */
export const UndoOffload = Schema.TaggedStruct("UndoOffload", {
  commandId: CommandId,
  threadId: ThreadId
})
export type UndoOffload = typeof UndoOffload.Type

/**
 * Undoes the newest tool-result offload flush of the thread's active native thread (a model-API instance's message
 * list, docs/offload.md): the stubbed results are carried verbatim again from the next request on, and those units are
 * never stubbed again. Fails with `ThreadNotFound`, `RunInProgress` (a run is queued, running or waiting),
 * `InvalidRequest` (the active provider keeps no message list). A repeated command id answers as the first time.
 */
export const UndoToolResultOffload = Schema.TaggedStruct("UndoToolResultOffload", {
  commandId: CommandId,
  threadId: ThreadId
})
export type UndoToolResultOffload = typeof UndoToolResultOffload.Type

/**
 * Replaces thread `threadId`'s tool-result offload control (`ToolResultOffloadControl`: on/off, the policy's
 * settings, pinned items; `{}` inherits everything from the provider instance). Takes effect at the next model request
 * (a step boundary). Fails with `ThreadNotFound`, `InvalidRequest` (a pinned id that is not an item of the thread, or
 * settings that merged with the active instance's break the policy's rules, naming the field). A repeated command id
 * answers as the first time.
 */
export const SetToolResultOffloadControl = Schema.TaggedStruct("SetToolResultOffloadControl", {
  commandId: CommandId,
  threadId: ThreadId,
  control: ToolResultOffloadControl
})
export type SetToolResultOffloadControl = typeof SetToolResultOffloadControl.Type

/**
 * Posts the client's results for the open tool calls of a `waiting` run: exactly one result per open call (an
 * unknown call id, a call without a result or two results for one call is `InvalidRequest` naming them). The results
 * are recorded, each after its call, and the run continues with the next model request. Fails with `RunNotFound`,
 * `RunNotWaiting` (409), `InvalidRequest`. A repeated command id answers as the first time.
 */
export const SubmitToolResults = Schema.TaggedStruct("SubmitToolResults", {
  commandId: CommandId,
  threadId: ThreadId,
  runId: RunId,
  results: Schema.Array(ToolResult).pipe(Schema.minItems(1), Schema.maxItems(maxTools))
})
export type SubmitToolResults = typeof SubmitToolResults.Type

export const Command = Schema.Union(
  CreateThread,
  SendMessage,
  InterruptRun,
  SwitchProvider,
  CompactThread,
  ForkThread,
  MergeBack,
  OffloadThread,
  UndoOffload,
  SubmitToolResults,
  UndoToolResultOffload,
  SetToolResultOffloadControl
)
export type Command = typeof Command.Type

/**
 * A stored command receipt: the first result of a command, returned again on a retry with the same id.
 * `result` is the command's result encoded with its schema (`Results`); `payloadFingerprint` identifies the
 * command's payload (everything but `commandId`), so a command id reused with a different payload is rejected;
 * `null` on receipts stored before fingerprints were kept.
 */
export const CommandReceipt = Schema.Struct({
  commandId: CommandId,
  commandType: Schema.String,
  threadId: Schema.NullOr(ThreadId),
  result: Schema.Unknown,
  payloadFingerprint: Schema.NullOr(Schema.String),
  createdAt: Schema.DateTimeUtc
})
export type CommandReceipt = typeof CommandReceipt.Type
