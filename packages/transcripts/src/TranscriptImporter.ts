/**
 * Imports a coding-agent transcript file into threads: detects the format, reads the file as a stream of lines,
 * parses each line as JSON and hands it to the format's `RecordImporter`, and applies the skip-or-fail policy to
 * invalid records.
 *
 * Owns: format detection, line splitting (streamed, linear in the file size), JSON parsing, the mapping of every
 * failure to a `TranscriptError` ({file, line?, field?, reason}), and `skipInvalid`. Does not own: what a record
 * means (`ClaudeCodeImporter`, `PiImporter`, `OpenHandsImporter`, `SweAgentImporter`).
 *
 * JSONL formats are processed one line at a time, so memory holds one line plus the threads built so far. A SWE-agent
 * `.traj` is one JSON document: its lines are collected and parsed at the end, then each `history[]` message is a
 * record (all at line 1, the field naming `history.<index>`).
 */
import { FileSystem } from "@effect/platform"
import type { PlatformError } from "@effect/platform/Error"
import { TranscriptError } from "@baton/contracts"
import { Effect, Either, Stream } from "effect"
import { constants as BufferConstants } from "node:buffer"
import * as ClaudeCodeImporter from "./ClaudeCodeImporter.js"
import * as OpenHandsImporter from "./OpenHandsImporter.js"
import * as PiImporter from "./PiImporter.js"
import type { RecordImporter } from "./RecordImporter.js"
import * as SweAgentImporter from "./SweAgentImporter.js"
import type { ImportedThread, ImportResult, SkippedRecord, TranscriptFormat } from "./Transcript.js"

/**
 * Import options.
 *
 * - `skipInvalid`: import the valid records and list each invalid one in `ImportResult.skipped` instead of failing
 *   on the first. Default `false`. File-level problems (missing, empty, unknown format, a `.traj` that is not one
 *   JSON document) still fail.
 * - `format`: skip detection and read the file as this format.
 * - `maxRecordChars`: the longest record (one JSONL line, or a whole `.traj` document) read, in UTF-16 characters;
 *   default `maxRecordCharsDefault`. A longer line is an invalid record (skipped under `skipInvalid`); a longer
 *   `.traj` document fails the file.
 */
export interface ImportOptions {
  readonly skipInvalid?: boolean
  readonly format?: TranscriptFormat
  readonly maxRecordChars?: number
}

/**
 * The longest record the importer reads, in UTF-16 characters: V8's longest string (`node:buffer`'s
 * `constants.MAX_STRING_LENGTH`, 2^29 - 24 in Node 20 on 64-bit platforms). A longer line could not be held as one
 * string: joining it failed with a bare `RangeError: Invalid string length`, which `baton replay` reported as
 * "baton: Invalid string length", naming neither the file nor the line.
 */
export const maxRecordCharsDefault = BufferConstants.MAX_STRING_LENGTH

const tooLong = (max: number) =>
  `record longer than ${max.toLocaleString("en-US")} characters, the longest Baton reads`

const error = (file: string, reason: string, line?: number, field?: string): TranscriptError =>
  new TranscriptError({
    file,
    reason,
    ...(line === undefined ? {} : { line }),
    ...(field === undefined ? {} : { field })
  })

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const claudeCodeTypes = new Set([
  "user",
  "assistant",
  "system",
  "progress",
  "file-history-snapshot",
  "queue-operation",
  "summary"
])
const piTypes = new Set(["session", "message", "model_change", "thinking_level_change", "compaction"])

const classify = (record: Record<string, unknown>): TranscriptFormat | undefined => {
  if (typeof record.instance_id === "string" && Array.isArray(record.history)) return "openhands"
  if (Array.isArray(record.history) && ("trajectory" in record || "info" in record)) return "swe-agent"
  if (typeof record.type === "string") {
    if (piTypes.has(record.type)) return "pi"
    if (claudeCodeTypes.has(record.type)) return "claude-code"
  }
  return undefined
}

/** Key patterns for a first line cut off before its end (a chunk of a long OpenHands line, say). */
const classifyText = (firstLine: string, chunk: string): TranscriptFormat | undefined => {
  if (/^\{\s*"type"\s*:\s*"(session|message|model_change|thinking_level_change|compaction)"/.test(firstLine)) {
    return "pi"
  }
  if (/"instance_id"\s*:/.test(firstLine)) return "openhands"
  if (/"type"\s*:\s*"(user|assistant|system|progress|file-history-snapshot|queue-operation|summary)"/.test(firstLine)) {
    return "claude-code"
  }
  if (firstLine.startsWith("{") && /"(trajectory|history)"\s*:/.test(chunk)) return "swe-agent"
  return undefined
}

/** The first non-blank line of `text`, trimmed, found without splitting the rest ("" when there is none). */
const firstNonBlankLine = (text: string): string => {
  for (let start = 0; start < text.length;) {
    const newline = text.indexOf("\n", start)
    const end = newline === -1 ? text.length : newline
    const line = text.slice(start, end).trim()
    if (line !== "") return line
    start = end + 1
  }
  return ""
}

/**
 * Detects the format of `file` from the start of its text (`firstChunk`: at least its first line, or as much of it as
 * was read).
 *
 * A `.traj` file is SWE-agent. Otherwise the first non-blank line is parsed as JSON and classified by its fields:
 * `instance_id` + `history` → OpenHands; `history` + `trajectory`/`info` → SWE-agent; a pi entry `type` (`session`,
 * `message`, …) → pi; a Claude Code record `type` (`user`, `assistant`, `progress`, `file-history-snapshot`, …) →
 * Claude Code. A line cut off mid-record is classified by the same keys found in its text.
 *
 * Fails with `TranscriptError` `"empty file: no records"` for blank text, and with
 * `"unknown transcript format: …"` (line 1) when nothing matches.
 */
export const detectFormat = (file: string, firstChunk: string): Either.Either<TranscriptFormat, TranscriptError> => {
  if (firstChunk.trim() === "") return Either.left(error(file, "empty file: no records"))
  if (/\.traj$/i.test(file)) return Either.right("swe-agent")
  const firstLine = firstNonBlankLine(firstChunk)
  let format: TranscriptFormat | undefined
  try {
    const record: unknown = JSON.parse(firstLine)
    format = isRecord(record) ? classify(record) : undefined
  } catch {
    format = classifyText(firstLine, firstChunk)
  }
  return format === undefined
    ? Either.left(error(
      file,
      "unknown transcript format: the first record is not Claude Code, pi, OpenHands or SWE-agent",
      1
    ))
    : Either.right(format)
}

const importerFor = (format: Exclude<TranscriptFormat, "swe-agent">, file: string): RecordImporter => {
  switch (format) {
    case "claude-code":
      return ClaudeCodeImporter.make(file)
    case "pi":
      return PiImporter.make(file)
    case "openhands":
      return OpenHandsImporter.make(file)
  }
}

const describeJsonError = (cause: unknown): string => cause instanceof Error ? cause.message : String(cause)

/**
 * The 1-based line a `JSON.parse` error points at in `text`: the line of "at position N" when the message has one,
 * the last non-blank line for "Unexpected end of JSON input"; `undefined` otherwise (Node 20 often gives neither).
 */
const lineOfJsonError = (text: string, message: string): number | undefined => {
  const match = /position (\d+)/.exec(message)
  const position = match !== null
    ? Math.min(Number(match[1]), text.length)
    : /end of JSON input/.test(message)
    ? text.trimEnd().length
    : undefined
  if (position === undefined) return undefined
  let line = 1
  for (let i = text.indexOf("\n"); i !== -1 && i < position; i = text.indexOf("\n", i + 1)) line++
  return line
}

/**
 * Splits pushed text into lines and drives the records through the format importer. Chunks may end anywhere; a line
 * split across chunks is joined once, when its newline arrives, so the work stays linear in the text size.
 */
class LineDriver {
  private lineNumber = 0
  private partial: Array<string> = []
  /** The characters held in `partial`. */
  private partialChars = 0
  /** Dropping the rest of a line found too long (under `skipInvalid`) until its newline. */
  private discarding = false
  /** The characters of the SWE-agent document collected so far (its lines and their newlines). */
  private documentChars = 0
  private format: TranscriptFormat | undefined
  private importer: RecordImporter | undefined
  /** The lines of a SWE-agent document, parsed at `end`. */
  private document: Array<string> | undefined
  private readonly skipped: Array<SkippedRecord> = []
  private readonly skipInvalid: boolean
  private readonly maxRecordChars: number

  constructor(private readonly file: string, options: ImportOptions) {
    this.format = options.format
    this.skipInvalid = options.skipInvalid === true
    this.maxRecordChars = options.maxRecordChars ?? maxRecordCharsDefault
  }

  push(chunk: string): TranscriptError | undefined {
    let start = 0
    for (let newline = chunk.indexOf("\n"); newline !== -1; newline = chunk.indexOf("\n", start)) {
      const piece = chunk.slice(start, newline)
      start = newline + 1
      if (this.discarding) {
        this.discarding = false
        continue
      }
      if (this.partialChars + piece.length > this.maxRecordChars) {
        const failure = this.overlong()
        if (failure !== undefined) return failure
        this.discarding = false
        continue
      }
      let line = piece
      if (this.partial.length > 0) {
        this.partial.push(line)
        line = this.partial.join("")
        this.partial = []
        this.partialChars = 0
      }
      const failure = this.line(line, true)
      if (failure !== undefined) return failure
    }
    if (start < chunk.length && !this.discarding) {
      const rest = chunk.slice(start)
      if (this.partialChars + rest.length > this.maxRecordChars) return this.overlong()
      this.partial.push(rest)
      this.partialChars += rest.length
    }
    return undefined
  }

  /**
   * The line being read is longer than `maxRecordChars`: it is never joined. Fails the import, or under
   * `skipInvalid` records it as skipped and drops the rest of it up to its newline.
   */
  private overlong(): TranscriptError | undefined {
    this.lineNumber++
    this.partial = []
    this.partialChars = 0
    this.discarding = true
    return this.invalid(this.lineNumber, undefined, tooLong(this.maxRecordChars))
  }

  end(): Either.Either<ImportResult, TranscriptError> {
    this.discarding = false
    if (this.partial.length > 0) {
      const failure = this.line(this.partial.join(""), false)
      this.partial = []
      if (failure !== undefined) return Either.left(failure)
    }
    if (this.document !== undefined) return this.endDocument(this.document)
    if (this.importer === undefined) return Either.left(error(this.file, "empty file: no records"))
    return Either.right({ threads: this.importer.finish(), skipped: this.skipped })
  }

  private line(raw: string, terminated: boolean): TranscriptError | undefined {
    this.lineNumber++
    const text = raw.endsWith("\r") ? raw.slice(0, -1) : raw
    if (this.document !== undefined) return this.documentLine(text)
    if (text.trim() === "") return undefined
    if (this.importer === undefined) {
      if (this.format === undefined) {
        const detected = detectFormat(this.file, text)
        if (Either.isLeft(detected)) return detected.left
        this.format = detected.right
      }
      if (this.format === "swe-agent") {
        // Keep line numbers of the document intact for JSON error positions.
        this.document = new Array<string>(this.lineNumber - 1).fill("")
        this.documentChars = this.lineNumber - 1
        return this.documentLine(text)
      }
      this.importer = importerFor(this.format, this.file)
    }
    let value: unknown
    try {
      value = JSON.parse(text)
    } catch (cause) {
      const reason = terminated
        ? `invalid JSON: ${describeJsonError(cause)}`
        : `truncated record: the last line is incomplete JSON (${describeJsonError(cause)})`
      return this.invalid(this.lineNumber, undefined, reason)
    }
    const issue = this.importer.record(this.lineNumber, value)
    return issue === undefined ? undefined : this.invalid(this.lineNumber, issue.field, issue.reason)
  }

  /** Collects one line of a SWE-agent document; fails the file once the document is longer than a record may be. */
  private documentLine(text: string): TranscriptError | undefined {
    this.documentChars += text.length + 1
    if (this.documentChars - 1 > this.maxRecordChars) {
      return error(this.file, `JSON document longer than ${this.maxRecordChars.toLocaleString("en-US")} characters, the longest Baton reads`, this.lineNumber)
    }
    this.document?.push(text)
    return undefined
  }

  private invalid(line: number, field: string | undefined, reason: string): TranscriptError | undefined {
    if (!this.skipInvalid) return error(this.file, reason, line, field)
    this.skipped.push({ line, field, reason })
    return undefined
  }

  private endDocument(lines: ReadonlyArray<string>): Either.Either<ImportResult, TranscriptError> {
    const text = lines.join("\n")
    let document: unknown
    try {
      document = JSON.parse(text)
    } catch (cause) {
      const message = describeJsonError(cause)
      return Either.left(error(this.file, `invalid JSON document: ${message}`, lineOfJsonError(text, message)))
    }
    const history = SweAgentImporter.historyOf(document)
    if (Either.isLeft(history)) return Either.left(error(this.file, history.left.reason, 1, history.left.field))
    const importer = SweAgentImporter.make(this.file)
    for (const message of history.right) {
      const issue = importer.record(1, message)
      if (issue === undefined) continue
      const failure = this.invalid(1, issue.field, issue.reason)
      if (failure !== undefined) return Either.left(failure)
    }
    const threads: ReadonlyArray<ImportedThread> = importer.finish()
    return Either.right({ threads, skipped: this.skipped })
  }
}

/**
 * Imports transcript text already in memory (pure; the same path `importFile` streams through). `file` names the
 * source in threads and errors and decides `.traj` detection.
 *
 * Fails with `TranscriptError`: `"empty file: no records"`; `"unknown transcript format: …"` (line 1); for an invalid
 * record (unless `skipInvalid`): its 1-based `line`, the `field` (JSON path) when one is at fault, and a reason such as
 * `"invalid JSON: …"`, `"truncated record: the last line is incomplete JSON (…)"`, `"required field is missing"` or
 * `"Expected string, actual 5"`.
 */
export const importText = (
  file: string,
  text: string,
  options: ImportOptions = {}
): Either.Either<ImportResult, TranscriptError> => {
  const driver = new LineDriver(file, options)
  const failure = driver.push(text)
  return failure === undefined ? driver.end() : Either.left(failure)
}

const readError = (file: string, cause: PlatformError): TranscriptError =>
  cause._tag === "SystemError" && cause.reason === "NotFound"
    ? error(file, "file not found")
    : error(file, `cannot read file: ${cause.message}`)

/** A buffer as 64 KiB views of it (no copy), so that decoding never makes one string of a whole pipe's bytes. */
const chunksOf = (bytes: Uint8Array): Array<Uint8Array> => {
  const size = 64 * 1024
  const chunks: Array<Uint8Array> = []
  for (let offset = 0; offset < bytes.length; offset += size) chunks.push(bytes.subarray(offset, offset + size))
  return chunks
}

/**
 * The file's bytes as a stream: a regular file (or anything seekable) in 64 KiB chunks read at their positions; a
 * pipe, a character device or a socket (`baton replay <(zcat session.jsonl.gz)`, `/dev/stdin`: no positions to read
 * at, the positioned stream failed `ESPIPE: invalid seek`) read to its end at once, then handed on as one chunk.
 */
const bytesOf = (fs: FileSystem.FileSystem, file: string): Stream.Stream<Uint8Array, PlatformError> =>
  Stream.unwrap(Effect.map(fs.stat(file), (info) =>
    info.type === "FIFO" || info.type === "CharacterDevice" || info.type === "Socket"
      ? Stream.fromEffect(fs.readFile(file)).pipe(Stream.mapConcat(chunksOf))
      : fs.stream(file, { chunkSize: FileSystem.KiB(64) })))

/**
 * Imports the transcript at path `file`, streamed in 64 KiB chunks and processed line by line (a 3.4 MB Claude Code
 * session imports in well under a second); a pipe (`<(zcat session.jsonl.gz)`, `/dev/stdin`) is read whole first.
 *
 * Fails with `TranscriptError`: `"file not found"`; `"cannot read file: …"` for other read failures; and every
 * failure of `importText`.
 */
export const importFile = Effect.fn("TranscriptImporter.importFile")(function*(
  file: string,
  options: ImportOptions = {}
) {
  const fs = yield* FileSystem.FileSystem
  const driver = new LineDriver(file, options)
  yield* bytesOf(fs, file).pipe(
    Stream.decodeText(),
    Stream.mapError((cause) => readError(file, cause)),
    Stream.runForEach((chunk) => {
      const failure = driver.push(chunk)
      return failure === undefined ? Effect.void : Effect.fail(failure)
    })
  )
  return yield* driver.end()
})
