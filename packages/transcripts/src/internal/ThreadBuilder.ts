/**
 * Accumulates one thread while an importer walks its records: opens turns, appends items in source order and pairs
 * tool calls with their results. Shared by every format so pairing, id de-duplication and placement rules are the
 * same everywhere.
 *
 * Pairing: a result answers the oldest unanswered call with the same source id (first in, first out), which also
 * pairs SWE-agent replays that reuse one call id for several calls. A call whose source id was already used gets a
 * `#2`, `#3`, … suffix so `toolCallId` stays unique within the thread. A result that matches no open call is kept as
 * an unpaired `tool_result` (under its source id, suffixed likewise if taken). Calls still open at the end are
 * `dangling`.
 *
 * Placement: items before the first turn go to the preamble when they are summaries or assistant text; any other
 * kind (a tool call before any prompt) opens an implicit turn with an empty `userText` at that record's line, so a
 * tool unit never sits in the preamble.
 */
import type {
  ImportedItem,
  ImportedItemKind,
  ImportedThread,
  ImportedTurn,
  PreambleItem,
  TranscriptFormat
} from "../Transcript.js"

interface MutableItem {
  kind: ImportedItemKind
  text: string
  toolCallId: string | null
  toolName: string | null
  messageId: string | null
  isError: boolean
  toolCallState: "answered" | "dangling" | null
}

interface MutableTurn {
  readonly userText: string
  readonly sourceLine: number
  readonly items: Array<MutableItem>
}

const titleLimit = 80

/** The first non-blank line of `text`, cut to 80 characters with `…`; `undefined` for blank text. */
export const titleOf = (text: string): string | undefined => {
  const line = text.split("\n").find((l) => l.trim() !== "")
  if (line === undefined) return undefined
  const trimmed = line.trim()
  return trimmed.length <= titleLimit ? trimmed : `${trimmed.slice(0, titleLimit - 1)}…`
}

/** The file name without directory and last extension: `raw/swe-agent/x.traj` → `x`. */
export const fileStem = (file: string): string => {
  const name = file.split(/[\\/]/).pop() ?? file
  const dot = name.lastIndexOf(".")
  return dot > 0 ? name.slice(0, dot) : name
}

/** One thread under construction (see the module docblock); `build` freezes it into an `ImportedThread`. */
export class ThreadBuilder {
  private readonly preamble: Array<MutableItem> = []
  private readonly turns: Array<MutableTurn> = []
  private readonly openCalls = new Map<string, Array<MutableItem>>()
  private readonly idUses = new Map<string, number>()
  /** The 1-based line of the record being applied; an implicit turn starts here. */
  line = 1

  constructor(readonly format: TranscriptFormat, readonly file: string) {}

  /** Opens a turn for a user prompt at the current line. */
  startTurn(userText: string): void {
    this.turns.push({ userText, sourceLine: this.line, items: [] })
  }

  get hasTurn(): boolean {
    return this.turns.length > 0
  }

  assistantMessage(text: string, messageId: string | null): void {
    this.push(item("assistant_message", text, messageId))
  }

  reasoning(text: string, messageId: string | null): void {
    this.push(item("reasoning", text, messageId))
  }

  summary(text: string): void {
    this.push(item("summary", text, null))
  }

  error(text: string, messageId: string | null): void {
    this.push({ ...item("error", text, messageId), isError: true })
  }

  /** Appends a call; `sourceId` is the source's call id (made unique if already used). */
  toolCall(sourceId: string, toolName: string | null, text: string, messageId: string | null): void {
    const call: MutableItem = {
      kind: "tool_call",
      text,
      toolCallId: this.uniqueId(sourceId),
      toolName,
      messageId,
      isError: false,
      toolCallState: "dangling"
    }
    const open = this.openCalls.get(sourceId)
    if (open === undefined) this.openCalls.set(sourceId, [call])
    else open.push(call)
    this.push(call)
  }

  /** Appends a result, paired with the oldest open call of `sourceId`; unpaired results are kept. */
  toolResult(sourceId: string, text: string, isError: boolean, toolName: string | null): void {
    const open = this.openCalls.get(sourceId)
    const call = open?.shift()
    if (open !== undefined && open.length === 0) this.openCalls.delete(sourceId)
    if (call !== undefined) call.toolCallState = "answered"
    this.push({
      kind: "tool_result",
      text,
      toolCallId: call?.toolCallId ?? this.uniqueId(sourceId),
      toolName: call?.toolName ?? toolName,
      messageId: null,
      isError,
      toolCallState: null
    })
  }

  /** Whether a call with this source id is waiting for its result. */
  hasOpenCall(sourceId: string): boolean {
    return this.openCalls.has(sourceId)
  }

  build(threadKey: string): ImportedThread {
    const firstPrompt = this.turns.find((turn) => turn.userText.trim() !== "")
    const title = (firstPrompt === undefined ? undefined : titleOf(firstPrompt.userText)) ?? threadKey
    const freeze = (i: MutableItem): ImportedItem => ({ ...i })
    return {
      format: this.format,
      file: this.file,
      threadKey,
      title,
      preamble: this.preamble.map((i) => freeze(i) as PreambleItem),
      turns: this.turns.map((turn): ImportedTurn => ({
        userText: turn.userText,
        items: turn.items.map(freeze),
        sourceLine: turn.sourceLine
      }))
    }
  }

  private push(entry: MutableItem): void {
    const turn = this.turns[this.turns.length - 1]
    if (turn !== undefined) turn.items.push(entry)
    else if (entry.kind === "summary" || entry.kind === "assistant_message") this.preamble.push(entry)
    else {
      this.startTurn("")
      this.turns[0]!.items.push(entry)
    }
  }

  private uniqueId(sourceId: string): string {
    const uses = (this.idUses.get(sourceId) ?? 0) + 1
    this.idUses.set(sourceId, uses)
    return uses === 1 ? sourceId : `${sourceId}#${uses}`
  }
}

const item = (kind: ImportedItemKind, text: string, messageId: string | null): MutableItem => ({
  kind,
  text,
  toolCallId: null,
  toolName: null,
  messageId,
  isError: false,
  toolCallState: null
})
