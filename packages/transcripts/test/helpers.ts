/** Shared helpers for the importer tests: JSONL text from records, and unwrapping an import. */
import { Either } from "effect"
import { TranscriptImporter } from "../src/index.js"
import type { ImportedItem, ImportedThread } from "../src/Transcript.js"

export const jsonl = (...records: ReadonlyArray<unknown>) =>
  records.map((record) => JSON.stringify(record)).join("\n") + "\n"

/** Imports `text` as `file` and returns its threads; throws the TranscriptError if the import fails. */
export const threadsOf = (file: string, text: string): ReadonlyArray<ImportedThread> => {
  const result = TranscriptImporter.importText(file, text)
  if (Either.isLeft(result)) throw result.left
  return result.right.threads
}

/** The single thread of `text`. */
export const threadOf = (file: string, text: string): ImportedThread => {
  const threads = threadsOf(file, text)
  if (threads.length !== 1) throw new Error(`expected one thread, got ${threads.length}`)
  return threads[0]!
}

/** Items as compact tuples `[kind, text, toolCallId, toolName, messageId, isError, toolCallState]`. */
export const rows = (items: ReadonlyArray<ImportedItem>) =>
  items.map((i) => [i.kind, i.text, i.toolCallId, i.toolName, i.messageId, i.isError, i.toolCallState])
