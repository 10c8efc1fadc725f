/**
 * Format detection and bad input: every failure names the file, the 1-based line and the field; `skipInvalid`
 * imports the rest and lists what it skipped.
 */
import { TranscriptError } from "@baton/contracts"
import { FileSystem } from "@effect/platform"
import { NodeFileSystem } from "@effect/platform-node"
import { describe, expect, it, layer } from "@effect/vitest"
import { Effect, Either } from "effect"
import { execFileSync, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { Transcript, TranscriptImporter } from "../src/index.js"
import type { ImportedThread, ImportResult, TranscriptCounts, TranscriptFormat } from "../src/Transcript.js"

const rawDir = fileURLToPath(new URL("../../../../shared/transcripts/raw/", import.meta.url))
const claudeFile = `${rawDir}claude-code/fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl`
const piFile = `${rawDir}pi/large-session.jsonl`

const jsonl = (...records: ReadonlyArray<unknown>) => records.map((record) => JSON.stringify(record)).join("\n") + "\n"

const failure = <A>(result: Either.Either<A, TranscriptError>): TranscriptError => {
  if (Either.isRight(result)) throw new Error("expected the import to fail")
  return result.left
}

const user = (content: unknown) => ({ type: "user", sessionId: "s1", message: { role: "user", content } })
const assistant = (id: string, content: ReadonlyArray<unknown>) => ({
  type: "assistant",
  sessionId: "s1",
  message: { id, role: "assistant", content }
})

describe("API shape", () => {
  it("keeps the signatures the orchestrator's replay codes against", () => {
    const importFile: (
      file: string,
      options?: { readonly skipInvalid?: boolean; readonly format?: TranscriptFormat }
    ) => Effect.Effect<ImportResult, TranscriptError, FileSystem.FileSystem> = TranscriptImporter.importFile
    const importText: (
      file: string,
      text: string,
      options?: { readonly skipInvalid?: boolean; readonly format?: TranscriptFormat }
    ) => Either.Either<ImportResult, TranscriptError> = TranscriptImporter.importText
    const detectFormat: (file: string, firstChunk: string) => Either.Either<TranscriptFormat, TranscriptError> =
      TranscriptImporter.detectFormat
    const counts: (thread: ImportedThread) => TranscriptCounts = Transcript.counts
    expect([importFile, importText, detectFormat, counts].every((f) => typeof f === "function")).toBe(true)
  })
})

describe("detectFormat", () => {
  it("classifies the first record of each format", () => {
    expect(TranscriptImporter.detectFormat("a.jsonl", "{\"type\":\"session\",\"id\":\"x\",\"cwd\":\"/\"}\n"))
      .toEqual(Either.right("pi"))
    expect(TranscriptImporter.detectFormat("a.jsonl", "{\"type\":\"file-history-snapshot\",\"messageId\":\"m\"}\n"))
      .toEqual(Either.right("claude-code"))
    expect(TranscriptImporter.detectFormat("a.jsonl", "\n{\"parentUuid\":null,\"type\":\"user\",\"message\":{}}\n"))
      .toEqual(Either.right("claude-code"))
    expect(TranscriptImporter.detectFormat("a.jsonl", "{\"instance_id\":\"i\",\"history\":[]}"))
      .toEqual(Either.right("openhands"))
    expect(TranscriptImporter.detectFormat("run.traj", "{\n  \"environment\": \"swe_main\",")).toEqual(
      Either.right("swe-agent")
    )
    expect(TranscriptImporter.detectFormat("run.json", "{\"history\":[],\"info\":{}}")).toEqual(Either.right("swe-agent"))
  })

  it("classifies a first line cut off mid-record (an OpenHands line is ~230 KB)", () => {
    const chunk = "{\"instance_id\": \"ponylang__ponyc-4595\", \"test_result\": {\"git_patch\": \"diff --git a"
    expect(TranscriptImporter.detectFormat("out.jsonl", chunk)).toEqual(Either.right("openhands"))
  })

  it("fails on empty text and on unknown records", () => {
    expect(failure(TranscriptImporter.detectFormat("a.jsonl", "  \n\n"))).toMatchObject({
      file: "a.jsonl",
      reason: "empty file: no records"
    })
    const unknown = failure(TranscriptImporter.detectFormat("a.jsonl", "{\"foo\":1}\n"))
    expect(unknown).toBeInstanceOf(TranscriptError)
    expect(unknown.line).toBe(1)
    expect(unknown.reason).toMatch(/^unknown transcript format/)
  })
})

describe("importText: invalid records", () => {
  it("invalid JSON mid-file names the line", () => {
    const text = jsonl(user("hi"), assistant("m1", [{ type: "text", text: "hello" }])) +
      "{\"type\": \"user\", \"message\": \n" +
      jsonl(user("again"))
    const error = failure(TranscriptImporter.importText("s.jsonl", text))
    expect(error).toMatchObject({ file: "s.jsonl", line: 3 })
    expect(error.field).toBeUndefined()
    expect(error.reason).toMatch(/^invalid JSON: /)
  })

  it("a missing required field names file, line and field", () => {
    const text = jsonl(user("hi"), { type: "assistant", message: { role: "assistant", content: [] } })
    const error = failure(TranscriptImporter.importText("s.jsonl", text))
    expect(error).toMatchObject({
      file: "s.jsonl",
      line: 2,
      field: "message.id",
      reason: "required field is missing"
    })
    expect(error.message).toBe("s.jsonl:2 (field message.id): required field is missing")
  })

  it("a field of the wrong type names the field and the types", () => {
    const error = failure(TranscriptImporter.importText("s.jsonl", jsonl(user(5))))
    expect(error).toMatchObject({ line: 1, field: "message.content", reason: "Expected string, actual 5" })
  })

  it("a nested block names its path", () => {
    const text = jsonl(
      user("hi"),
      assistant("m1", [{ type: "tool_use", id: "t1", name: "Bash", input: {} }]),
      user([{ type: "tool_result", content: "out" }])
    )
    expect(failure(TranscriptImporter.importText("s.jsonl", text))).toMatchObject({
      line: 3,
      field: "message.content.0.tool_use_id",
      reason: "required field is missing"
    })
  })

  it("each format names its own fields", () => {
    const pi = jsonl(
      { type: "session", id: "p1" },
      { type: "message", message: { role: "user", content: [{ type: "text", text: "go" }] } },
      { type: "message", message: { role: "toolResult", content: [], isError: false } }
    )
    expect(failure(TranscriptImporter.importText("p.jsonl", pi))).toMatchObject({
      line: 3,
      field: "message.toolCallId",
      reason: "required field is missing"
    })
    const openhands = jsonl({
      instance_id: "i1",
      history: [{ id: 0, source: "user", action: "message", args: { content: "fix" } }, { source: "agent" }]
    })
    expect(failure(TranscriptImporter.importText("o.jsonl", openhands))).toMatchObject({
      line: 1,
      field: "history.1.id",
      reason: "required field is missing"
    })
    const traj = JSON.stringify({ history: [{ role: "system", content: "s" }, { role: "user" }], info: {} })
    expect(failure(TranscriptImporter.importText("t.traj", traj))).toMatchObject({
      line: 1,
      field: "history.1.content",
      reason: "required field is missing"
    })
    expect(failure(TranscriptImporter.importText("t.traj", "{\"info\": {}}"))).toMatchObject({
      line: 1,
      field: "history",
      reason: "required field is missing"
    })
  })

  it("a truncated .traj names the line where its JSON ends", () => {
    const error = failure(TranscriptImporter.importText("t.traj", "{\n  \"history\": [\n    {\"role\": \n"))
    expect(error.line).toBe(3)
    expect(error.reason).toMatch(/^invalid JSON document: /)
  })

  it("a corrupted line in a real file is reported at its exact line", async () => {
    const { readFile } = await import("node:fs/promises")
    const lines = (await readFile(piFile, "utf8")).split("\n")
    lines[499] = lines[499]!.slice(0, 40)
    const error = failure(TranscriptImporter.importText(piFile, lines.join("\n")))
    expect(error).toMatchObject({ file: piFile, line: 500 })
    expect(error.reason).toMatch(/^invalid JSON: /)
  })

  it("skipInvalid imports the rest and lists every skipped line", () => {
    const text = jsonl(
      user("first"),
      assistant("m1", [{ type: "tool_use", id: "t1", name: "Bash", input: { command: "ls" } }]),
      { type: "assistant", message: { role: "assistant", content: [] } },
      user([{ type: "tool_result", tool_use_id: "t1", content: "a\nb" }])
    ) + "not json\n" + jsonl(user(7), user("second")) + "{\"type\":\"user\""
    const result = TranscriptImporter.importText("s.jsonl", text, { skipInvalid: true })
    if (Either.isLeft(result)) throw result.left
    expect(result.right.skipped).toEqual([
      { line: 3, field: "message.id", reason: "required field is missing" },
      { line: 5, field: undefined, reason: expect.stringMatching(/^invalid JSON: /) },
      { line: 6, field: "message.content", reason: "Expected string, actual 7" },
      { line: 8, field: undefined, reason: expect.stringMatching(/^truncated record: the last line is incomplete JSON/) }
    ])
    const [thread] = result.right.threads
    expect(thread!.turns.map((turn) => turn.userText)).toEqual(["first", "second"])
    expect(thread!.turns[1]!.sourceLine).toBe(7)
    expect(Transcript.counts(thread!)).toEqual({
      userTurns: 2,
      toolCalls: 1,
      toolResults: 1,
      danglingCalls: 0,
      errorResults: 0
    })
  })

  it("a line longer than maxRecordChars names its line instead of failing as 'Invalid string length' (b47ux)", () => {
    // A 600 MB line (longer than V8's longest string) made `baton replay` say only "baton: Invalid string length";
    // maxRecordChars stands in for that limit here.
    const long = JSON.stringify(user("x".repeat(200)))
    const text = jsonl(user("first")) + long + "\n" + jsonl(user("second"))
    const error = failure(TranscriptImporter.importText("s.jsonl", text, { maxRecordChars: 100 }))
    expect(error).toMatchObject({ file: "s.jsonl", line: 2 })
    expect(error.message).toBe("s.jsonl:2: record longer than 100 characters, the longest Baton reads")

    const result = TranscriptImporter.importText("s.jsonl", text, { skipInvalid: true, maxRecordChars: 100 })
    if (Either.isLeft(result)) throw result.left
    expect(result.right.skipped).toEqual([
      { line: 2, field: undefined, reason: "record longer than 100 characters, the longest Baton reads" }
    ])
    expect(result.right.threads[0]!.turns.map((turn) => [turn.userText, turn.sourceLine])).toEqual([["first", 1], ["second", 3]])
  })

  it("a .traj document longer than maxRecordChars fails the file, naming the line it reached", () => {
    const text = JSON.stringify({ trajectory: [], history: Array.from({ length: 20 }, () => ({ role: "user", content: "x" })) }, null, 2)
    const error = failure(TranscriptImporter.importText("t.traj", text, { maxRecordChars: 100 }))
    expect(error.reason).toBe("JSON document longer than 100 characters, the longest Baton reads")
    expect(error.line).toBeGreaterThan(1)
  })

  it("an empty or blank file fails", () => {
    expect(failure(TranscriptImporter.importText("e.jsonl", ""))).toMatchObject({ reason: "empty file: no records" })
    expect(failure(TranscriptImporter.importText("e.jsonl", "\n \r\n\n"))).toMatchObject({
      reason: "empty file: no records"
    })
  })

  it("an unknown format fails naming the problem", () => {
    const error = failure(TranscriptImporter.importText("x.jsonl", jsonl({ hello: "world" })))
    expect(error.reason).toMatch(/^unknown transcript format/)
  })

  it("the format option overrides detection", () => {
    const error = failure(TranscriptImporter.importText("x.jsonl", jsonl({ type: "session", id: "p" }), {
      format: "openhands"
    }))
    expect(error).toMatchObject({ line: 1, field: "instance_id", reason: "required field is missing" })
  })

  it("CRLF line endings import like LF", () => {
    const lf = jsonl(user("hi"), assistant("m1", [{ type: "text", text: "hello" }]))
    expect(TranscriptImporter.importText("s.jsonl", lf.replace(/\n/g, "\r\n"))).toEqual(
      TranscriptImporter.importText("s.jsonl", lf)
    )
  })
})

layer(NodeFileSystem.layer)("importFile", (it) => {
  it.effect("a missing file fails with \"file not found\"", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(TranscriptImporter.importFile(`${rawDir}does-not-exist.jsonl`))
      expect(error).toBeInstanceOf(TranscriptError)
      expect(error).toMatchObject({ file: `${rawDir}does-not-exist.jsonl`, reason: "file not found" })
    }))

  it.effect("a truncated last line fails, or is skipped with skipInvalid", () =>
    Effect.scoped(Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const file = `${dir}/truncated.jsonl`
      const lines = (yield* fs.readFileString(claudeFile)).split("\n").slice(0, 700)
      // Cut line 700 (an assistant record) in half, as a crash mid-write leaves it.
      lines[699] = lines[699]!.slice(0, Math.floor(lines[699]!.length / 2))
      yield* fs.writeFileString(file, lines.join("\n"))

      const error = yield* Effect.flip(TranscriptImporter.importFile(file))
      expect(error).toMatchObject({ file, line: 700 })
      expect(error.reason).toMatch(/^truncated record: the last line is incomplete JSON/)

      const result = yield* TranscriptImporter.importFile(file, { skipInvalid: true })
      expect(result.skipped).toHaveLength(1)
      expect(result.skipped[0]!.line).toBe(700)
      expect(result.threads[0]!.turns.map((turn) => turn.sourceLine)).toEqual([7, 664, 671])
    })))

  it.effect("an empty file fails", () =>
    Effect.scoped(Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      yield* fs.writeFileString(`${dir}/empty.jsonl`, "")
      const error = yield* Effect.flip(TranscriptImporter.importFile(`${dir}/empty.jsonl`))
      expect(error).toMatchObject({ file: `${dir}/empty.jsonl`, reason: "empty file: no records" })
    })))

  it.effect("an unknown format fails", () =>
    Effect.scoped(Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      yield* fs.writeFileString(`${dir}/notes.jsonl`, "just some text\n")
      const error = yield* Effect.flip(TranscriptImporter.importFile(`${dir}/notes.jsonl`))
      expect(error.line).toBe(1)
      expect(error.reason).toMatch(/^unknown transcript format/)
    })))

  it.effect("a named pipe is read to its end (it has no positions to read at: ESPIPE before)", () =>
    Effect.scoped(Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const fifo = `${dir}/session.fifo`
      execFileSync("mkfifo", [fifo])
      // The writer: a child process that copies the real transcript into the pipe (opening a FIFO for writing blocks
      // until a reader opens it, so it runs beside the import).
      const writer = spawn("sh", ["-c", `cat "$0" > "$1"`, claudeFile, fifo], { stdio: "ignore" })
      const viaPipe = yield* TranscriptImporter.importFile(fifo)
      yield* Effect.async<void>((resume) => writer.exitCode !== null ? resume(Effect.void) : void writer.once("exit", () => resume(Effect.void)))
      const direct = yield* TranscriptImporter.importFile(claudeFile)
      expect(viaPipe.threads.length).toBeGreaterThan(0)
      expect(viaPipe).toEqual({ ...direct, threads: direct.threads.map((t) => ({ ...t, file: fifo })) })
    })))

  it.effect("a line too long for maxRecordChars across many 64 KiB chunks is skipped whole with skipInvalid", () =>
    Effect.scoped(Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const file = `${dir}/long.jsonl`
      yield* fs.writeFileString(file, jsonl(user("first"), user("y".repeat(300_000)), user("second")))

      const error = yield* Effect.flip(TranscriptImporter.importFile(file, { maxRecordChars: 100_000 }))
      expect(error.message).toBe(`${file}:2: record longer than 100,000 characters, the longest Baton reads`)

      const result = yield* TranscriptImporter.importFile(file, { skipInvalid: true, maxRecordChars: 100_000 })
      expect(result.skipped.map((s) => s.line)).toEqual([2])
      expect(result.threads[0]!.turns.map((turn) => [turn.userText, turn.sourceLine])).toEqual([["first", 1], ["second", 3]])
    })))

  it.effect("a directory is not readable as a transcript", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(TranscriptImporter.importFile(rawDir))
      expect(error.reason).toMatch(/^cannot read file: /)
    }))
})
