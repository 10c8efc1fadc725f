/**
 * Every file under `shared/transcripts/raw/` imports, with the counts `shared/transcripts/SOURCES.md` gives. Where
 * SOURCES.md gives no number, the expected value is the one this importer computes and the comment says how it
 * follows from the source.
 */
import { FileSystem } from "@effect/platform"
import { NodeFileSystem } from "@effect/platform-node"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Either } from "effect"
import { fileURLToPath } from "node:url"
import { Transcript, TranscriptImporter } from "../src/index.js"
import type { ImportedItemKind, ImportedThread, TranscriptCounts } from "../src/Transcript.js"

/** The repo's sibling `shared/` folder, wherever the repo is cloned. */
const rawDir = fileURLToPath(new URL("../../../../shared/transcripts/raw/", import.meta.url))
const raw = (path: string) => `${rawDir}${path}`

interface Expected {
  readonly threadKey: string
  readonly counts: TranscriptCounts
}

/**
 * Per file (path under raw/), per thread. Derivations:
 * - Claude Code: toolCalls/toolResults/errorResults are SOURCES.md's tool_use / tool_result (is_error) columns.
 *   userTurns are the `user` records (SOURCES "user / asst records") minus tool-result records, minus the
 *   `isCompactSummary` record (a summary item), minus `isMeta` and local-command records:
 *   fa812bfe 201 − 197 − 1 = 3 (initial prompt, a `<task-notification>`, "continue until all are done");
 *   4d5611e5 154 − 150 − 1 = 3 (initial prompt, "continue", a `<task-notification>`);
 *   ae4a77f8 249 − 242 − 1 − 2 isMeta (skill body, command caveat) − 2 `/compact` echo records = 2;
 *   agent-a2898e3 34 − 33 = 1 (the Task prompt); agent-acompact 14 − 13 isMeta hook reminders = 1 (the summary
 *   request). No Claude Code call is left without a result, so 0 dangling.
 * - pi: userTurns = user messages (88 / 55), toolCalls/toolResults/errorResults from SOURCES.md; before-compaction
 *   adds its 3 `bashExecution` messages as call+result pairs (454 + 3 = 457, 448 + 3 = 451, exit code 0, so errors
 *   stay 12). Dangling = calls − results: 391 − 373 = 18 and 457 − 451 = 6.
 * - OpenHands: tool actions = SOURCES.md's per-instance run/edit/read counts, each answered by one observation;
 *   one user message each. errorResults (no SOURCES number) are the `run` observations with a non-zero
 *   `extras.metadata.exit_code` (4595: three 127s and two 2s = 5; 4593: 2 and 1 = 2; 4588: twelve non-zero
 *   codes); the `error` observations answer no call and become `error` items instead.
 * - SWE-agent: pydicom's 12 commands parsed from the assistant's text; 11 observations follow them in `history`, the
 *   final `submit` has none (1 dangling). marshmallow: 13 native tool calls, 13 tool messages. One prompt each (the
 *   pydicom demonstration is skipped). SWE-agent has no error flag, so 0 errors.
 */
const expected: ReadonlyArray<readonly [string, ReadonlyArray<Expected>]> = [
  ["claude-code/fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl", [{
    threadKey: "fa812bfe-b295-4cca-9c2f-fdf01028cb46",
    counts: { userTurns: 3, toolCalls: 197, toolResults: 197, danglingCalls: 0, errorResults: 8 }
  }]],
  ["claude-code/4d5611e5-241a-462a-8d15-5122611a9569.jsonl", [{
    threadKey: "4d5611e5-241a-462a-8d15-5122611a9569",
    counts: { userTurns: 3, toolCalls: 150, toolResults: 150, danglingCalls: 0, errorResults: 5 }
  }]],
  ["claude-code/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl", [{
    threadKey: "ae4a77f8-aedd-4bc1-888f-c94edc91af04",
    counts: { userTurns: 2, toolCalls: 242, toolResults: 242, danglingCalls: 0, errorResults: 12 }
  }]],
  ["claude-code/4d5611e5-241a-462a-8d15-5122611a9569/subagents/agent-a2898e3.jsonl", [{
    threadKey: "4d5611e5-241a-462a-8d15-5122611a9569/agent-a2898e3",
    counts: { userTurns: 1, toolCalls: 33, toolResults: 33, danglingCalls: 0, errorResults: 8 }
  }]],
  ["claude-code/fa812bfe-b295-4cca-9c2f-fdf01028cb46/subagents/agent-acompact-70d8e7.jsonl", [{
    threadKey: "fa812bfe-b295-4cca-9c2f-fdf01028cb46/agent-acompact-70d8e7",
    counts: { userTurns: 1, toolCalls: 0, toolResults: 0, danglingCalls: 0, errorResults: 0 }
  }]],
  ["pi/large-session.jsonl", [{
    threadKey: "d703a1a9-1b7b-4fb1-b512-c9738b1fe617",
    counts: { userTurns: 88, toolCalls: 391, toolResults: 373, danglingCalls: 18, errorResults: 19 }
  }]],
  ["pi/before-compaction.jsonl", [{
    threadKey: "ffae836b-9420-4060-ac13-7745215f90ff",
    counts: { userTurns: 55, toolCalls: 457, toolResults: 451, danglingCalls: 6, errorResults: 12 }
  }]],
  ["openhands/multi_swe_bench-output.jsonl", [
    {
      threadKey: "ponylang__ponyc-4595",
      counts: { userTurns: 1, toolCalls: 21, toolResults: 21, danglingCalls: 0, errorResults: 5 }
    },
    {
      threadKey: "ponylang__ponyc-4593",
      counts: { userTurns: 1, toolCalls: 32, toolResults: 32, danglingCalls: 0, errorResults: 2 }
    },
    {
      threadKey: "ponylang__ponyc-4588",
      counts: { userTurns: 1, toolCalls: 48, toolResults: 48, danglingCalls: 0, errorResults: 12 }
    }
  ]],
  ["swe-agent/pydicom__pydicom-1458.traj", [{
    threadKey: "pydicom__pydicom-1458",
    counts: { userTurns: 1, toolCalls: 12, toolResults: 11, danglingCalls: 1, errorResults: 0 }
  }]],
  ["swe-agent/marshmallow-code__marshmallow-1867__function_calling_replace_from_source.traj", [{
    threadKey: "marshmallow-code__marshmallow-1867__function_calling_replace_from_source",
    counts: { userTurns: 1, toolCalls: 13, toolResults: 13, danglingCalls: 0, errorResults: 0 }
  }]]
]

const allItems = (thread: ImportedThread) => [...thread.preamble, ...thread.turns.flatMap((turn) => turn.items)]
const kindCount = (thread: ImportedThread, kind: ImportedItemKind) =>
  allItems(thread).filter((item) => item.kind === kind).length

const importRaw = (path: string) => TranscriptImporter.importFile(raw(path))

layer(NodeFileSystem.layer)("real transcripts", (it) => {
  it.effect("the expectations cover every file under raw/", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const entries = yield* fs.readDirectory(rawDir, { recursive: true })
      const files = entries.filter((entry) => /\.(jsonl|traj)$/.test(entry)).map((entry) => entry.replace(/\\/g, "/"))
      expect(files.sort()).toEqual(expected.map(([path]) => path).sort())
      expect(files).toHaveLength(10)
    }))

  describe("per-file counts", () => {
    for (const [path, threads] of expected) {
      it.effect(path, () =>
        Effect.gen(function*() {
          const result = yield* importRaw(path)
          expect(result.skipped).toEqual([])
          expect(result.threads.map((thread) => ({ threadKey: thread.threadKey, counts: Transcript.counts(thread) })))
            .toEqual(threads)
          for (const thread of result.threads) {
            expect(thread.file).toBe(raw(path))
            expect(thread.title.length).toBeGreaterThan(0)
            expect(thread.title.length).toBeLessThanOrEqual(80)
          }
        }))
    }
  })

  it.effect("streaming import equals the in-memory import of the same text (chunk boundaries are invisible)", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      for (const [path] of expected) {
        const streamed = yield* importRaw(path)
        const text = yield* fs.readFileString(raw(path))
        expect(TranscriptImporter.importText(raw(path), text)).toEqual(Either.right(streamed))
      }
    }))

  it.effect("Claude Code: compactions are summary items inside a turn; thinking is reasoning; prompts are verbatim", () =>
    Effect.gen(function*() {
      const [thread] = (yield* importRaw("claude-code/fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl")).threads
      expect(thread!.title).toBe("Work on bead spotter-a0y. Run bd show spotter-a0y to see the issue details and …")
      expect(thread!.turns.map((turn) => turn.sourceLine)).toEqual([7, 664, 671])
      expect(thread!.turns[2]!.userText).toBe("continue until all are done")
      // SOURCES.md: 1 auto compaction; the summary lands in the third turn, where it happened (line 1585).
      expect(kindCount(thread!, "summary")).toBe(1)
      const summary = thread!.turns[2]!.items.find((item) => item.kind === "summary")
      expect(summary?.text.startsWith("This session is being continued from a previous conversation")).toBe(true)
      // 11 of the 314 assistant records are thinking blocks (counted by `type` of each record's one block).
      expect(kindCount(thread!, "reasoning")).toBe(11)
      // SOURCES.md: 157 API responses = distinct message.id values.
      expect(new Set(allItems(thread!).map((item) => item.messageId).filter((id) => id !== null)).size).toBe(157)
    }))

  it.effect("Claude Code: a manual /compact leaves no command echo turns", () =>
    Effect.gen(function*() {
      const [thread] = (yield* importRaw("claude-code/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl")).threads
      expect(thread!.turns.map((turn) => turn.userText.slice(0, 25))).toEqual([
        "Work on bead spotter-4te.",
        "continue implementation"
      ])
      expect(thread!.turns[0]!.items.at(-1)?.kind).toBe("summary")
    }))

  it.effect("pi: aborted and failed responses leave error items; compactions are summaries; bash runs are tool units", () =>
    Effect.gen(function*() {
      const [large] = (yield* importRaw("pi/large-session.jsonl")).threads
      // SOURCES.md: 22 aborted/error turns.
      expect(kindCount(large!, "error")).toBe(22)
      expect(large!.title).toBe("/mode")
      const [before] = (yield* importRaw("pi/before-compaction.jsonl")).threads
      // 18 aborted + 1 error assistant message; SOURCES.md: 2 compaction entries.
      expect(kindCount(before!, "error")).toBe(19)
      expect(kindCount(before!, "summary")).toBe(2)
      // 49 thinking blocks (SOURCES.md).
      expect(kindCount(before!, "reasoning")).toBe(49)
      const bash = allItems(before!).filter((item) => item.toolCallId?.startsWith("pi:bash:") === true)
      expect(bash.map((item) => [item.kind, item.toolName, item.toolCallState])).toEqual([
        ["tool_call", "bash", "answered"],
        ["tool_result", "bash", null],
        ["tool_call", "bash", "answered"],
        ["tool_result", "bash", null],
        ["tool_call", "bash", "answered"],
        ["tool_result", "bash", null]
      ])
      expect(bash[0]!.text).toBe(JSON.stringify({ command: "ls" }))
    }))

  it.effect("OpenHands: one thread per line; rejected calls are error items; think is reasoning", () =>
    Effect.gen(function*() {
      const { threads } = yield* importRaw("openhands/multi_swe_bench-output.jsonl")
      expect(threads.map((thread) => thread.turns[0]!.sourceLine)).toEqual([1, 2, 3])
      // 4593 and 4588 each have one `error` observation without a cause (SOURCES.md event survey).
      expect(threads.map((thread) => kindCount(thread, "error"))).toEqual([0, 1, 1])
      // 4595 and 4588 each call `think` once; 4593 never does.
      expect(threads.map((thread) => kindCount(thread, "reasoning"))).toEqual([1, 0, 1])
      const firstCall = allItems(threads[0]!).find((item) => item.kind === "tool_call")
      expect(firstCall).toEqual({
        kind: "tool_call",
        text: "{\"command\": \"ls -l /workspace/ponylang__ponyc__0.1\"}",
        toolCallId: "toolu_01",
        toolName: "execute_bash",
        messageId: "gen-1746001974-alxKxkQSJ8j9QsfNTvnX",
        isError: false,
        toolCallState: "answered"
      })
    }))

  it.effect("SWE-agent: parsed commands pair with the next observation; reused call ids stay unique", () =>
    Effect.gen(function*() {
      const [pydicom] = (yield* importRaw("swe-agent/pydicom__pydicom-1458.traj")).threads
      const calls = allItems(pydicom!).filter((item) => item.kind === "tool_call")
      expect(calls[0]!.text).toBe(JSON.stringify({ command: "create reproduce_bug.py\n" }))
      expect(calls.at(-1)).toMatchObject({ text: JSON.stringify({ command: "submit\n" }), toolCallState: "dangling" })
      expect(pydicom!.turns[0]!.userText.startsWith("We're currently solving the following issue")).toBe(true)

      const [marshmallow] = (yield* importRaw(
        "swe-agent/marshmallow-code__marshmallow-1867__function_calling_replace_from_source.traj"
      )).threads
      const ids = allItems(marshmallow!).filter((item) => item.kind === "tool_call").map((item) => item.toolCallId)
      // The replay reuses call_5iDd… four times and call_ahTo… twice; each use is its own pair.
      expect(new Set(ids).size).toBe(13)
      expect(ids.filter((id) => id!.startsWith("call_5iDdbOYybq7L19vqXmR0DPaU"))).toEqual([
        "call_5iDdbOYybq7L19vqXmR0DPaU",
        "call_5iDdbOYybq7L19vqXmR0DPaU#2",
        "call_5iDdbOYybq7L19vqXmR0DPaU#3",
        "call_5iDdbOYybq7L19vqXmR0DPaU#4"
      ])
    }))
})
