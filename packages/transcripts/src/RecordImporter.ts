/**
 * The per-format importer port: a stateful consumer of parsed records that builds threads.
 *
 * Owns: the `RecordImporter` shape and `RecordIssue`. Does not own: reading files, splitting lines or parsing JSON
 * (`TranscriptImporter` does that and calls `record` once per non-blank JSONL line, or once per `history[]` message
 * of a SWE-agent `.traj`), nor the skip-or-fail policy for invalid records (also `TranscriptImporter`).
 */
import type { ImportedThread } from "./Transcript.js"

/**
 * Why one record is invalid: `field` is the JSON path of the offending field within the record (`message.content`),
 * `undefined` when the record as a whole is wrong; `reason` says what is wrong with it.
 */
export interface RecordIssue {
  readonly field: string | undefined
  readonly reason: string
}

/**
 * A format importer for one file.
 *
 * - `record(line, value)`: validates `value` (a parsed JSON record from 1-based line `line`) and applies it. Returns
 *   a `RecordIssue` when the record is invalid, in which case nothing of it was applied (so the caller may skip it
 *   and go on).
 * - `finish()`: the threads built so far, with dangling calls marked. Call once, after the last record.
 */
export interface RecordImporter {
  readonly record: (line: number, value: unknown) => RecordIssue | undefined
  readonly finish: () => ReadonlyArray<ImportedThread>
}
