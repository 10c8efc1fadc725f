/**
 * The imported-transcript model: a thread of turns, each a user prompt and the items the agent produced for it.
 *
 * Owns: the shapes every importer produces (`ImportedThread`, `ImportedTurn`, `ImportedItem`), the result of one
 * import (`ImportResult`, with the records skipped under `skipInvalid`) and `counts`, the summary the tests compare
 * with the numbers in `shared/transcripts/SOURCES.md`. Does not own: reading or parsing files (`TranscriptImporter`
 * and the per-format importers), nor ids, runs or token counts (the orchestrator assigns those when it replays a
 * thread; see `@baton/contracts` `Item`).
 *
 * Item kinds are the docs/design.md kinds minus `user_message` (the prompt is the turn's `userText`) and
 * `handoff_marker` (Baton's own).
 */

/** The transcript formats Baton imports; see `shared/transcripts/SOURCES.md` for each one's fields. */
export type TranscriptFormat = "claude-code" | "pi" | "openhands" | "swe-agent"

/** Every `TranscriptFormat`, in a stable order (for option parsing and messages). */
export const formats: ReadonlyArray<TranscriptFormat> = ["claude-code", "pi", "openhands", "swe-agent"]

/** The item kinds an importer produces. */
export type ImportedItemKind = "assistant_message" | "tool_call" | "tool_result" | "reasoning" | "error" | "summary"

/**
 * One entry of imported history.
 *
 * - `text`: what the model saw or produced: answer text, tool arguments as a JSON string, tool output text,
 *   reasoning text, summary text, error message.
 * - `toolCallId`: pairs a `tool_call` with its `tool_result`; unique per call within a thread (a source id used twice
 *   gets a `#2`, `#3`, … suffix on its later uses).
 * - `toolName`: the tool, on both the call and its result.
 * - `messageId`: groups the items of one assistant response (the source's id, or one synthesized by the importer).
 * - `isError`: the tool reported failure (`tool_result`), or the item is an `error`.
 * - `toolCallState`: on `tool_call` only: `answered` when a result with the same `toolCallId` exists, `dangling` when
 *   none ever came (aborted turns); `null` on every other kind.
 */
export interface ImportedItem {
  readonly kind: ImportedItemKind
  readonly text: string
  readonly toolCallId: string | null
  readonly toolName: string | null
  readonly messageId: string | null
  readonly isError: boolean
  readonly toolCallState: "answered" | "dangling" | null
}

/** An item that may stand before the first turn: a summary (e.g. a compaction) or assistant text. */
export type PreambleItem = ImportedItem & { readonly kind: "summary" | "assistant_message" }

/**
 * One turn: the user's prompt and everything produced for it, in source order.
 *
 * - `userText`: the prompt exactly as recorded (text blocks joined with `"\n"`).
 * - `items`: assistant text, reasoning, tool calls, tool results, errors and compaction summaries.
 * - `sourceLine`: the 1-based line of the user record (1 for a `.traj` file, which is one JSON document).
 */
export interface ImportedTurn {
  readonly userText: string
  readonly items: ReadonlyArray<ImportedItem>
  readonly sourceLine: number
}

/**
 * One imported conversation.
 *
 * - `threadKey`: a stable id from the source: Claude Code `sessionId` (`<sessionId>/agent-<agentId>` for a subagent
 *   file), pi `session.id`, OpenHands `instance_id`, SWE-agent file stem.
 * - `title`: the first non-blank line of the first prompt, at most 80 characters (cut with `…`); `threadKey` when
 *   the thread has no prompt.
 * - `preamble`: items before the first prompt (summaries, assistant text); usually empty. System prompts and
 *   in-context demonstrations are not model history for Baton and are never imported.
 */
export interface ImportedThread {
  readonly format: TranscriptFormat
  readonly file: string
  readonly threadKey: string
  readonly title: string
  readonly preamble: ReadonlyArray<PreambleItem>
  readonly turns: ReadonlyArray<ImportedTurn>
}

/** A record left out by `skipInvalid`: its 1-based line, the offending field (a JSON path) when known, and why. */
export interface SkippedRecord {
  readonly line: number
  readonly field: string | undefined
  readonly reason: string
}

/** The threads of one file (one for every format but OpenHands, which has one per line) and the skipped records. */
export interface ImportResult {
  readonly threads: ReadonlyArray<ImportedThread>
  readonly skipped: ReadonlyArray<SkippedRecord>
}

/**
 * Summary counts of one thread.
 *
 * - `userTurns`: turns.
 * - `toolCalls` / `toolResults`: `tool_call` / `tool_result` items (preamble and turns).
 * - `danglingCalls`: tool calls with `toolCallState: "dangling"`.
 * - `errorResults`: tool results with `isError` (not `error` items).
 */
export interface TranscriptCounts {
  readonly userTurns: number
  readonly toolCalls: number
  readonly toolResults: number
  readonly danglingCalls: number
  readonly errorResults: number
}

/**
 * Counts the turns and tool items of a thread (see `TranscriptCounts`). Linear in the number of items; never fails.
 */
export const counts = (thread: ImportedThread): TranscriptCounts => {
  let toolCalls = 0
  let toolResults = 0
  let danglingCalls = 0
  let errorResults = 0
  const tally = (item: ImportedItem) => {
    if (item.kind === "tool_call") {
      toolCalls++
      if (item.toolCallState === "dangling") danglingCalls++
    } else if (item.kind === "tool_result") {
      toolResults++
      if (item.isError) errorResults++
    }
  }
  thread.preamble.forEach(tally)
  for (const turn of thread.turns) turn.items.forEach(tally)
  return { userTurns: thread.turns.length, toolCalls, toolResults, danglingCalls, errorResults }
}
