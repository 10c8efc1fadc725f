/**
 * Two OS processes replaying two different real transcripts into one SQLite file at the same time (issue 15's
 * acceptance; `bench/two-process-replay.ts` runs it 10 rounds in a row): both exit 0 with failedRuns 0 and no
 * invariant violation. Before the unit of work took the write lock first, the second writer failed at once with
 * `SQLITE_BUSY_SNAPSHOT`, and its restart recovery ended the first process's runs.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { batonArgs } from "./support/CliEntry.js"

const repo = fileURLToPath(new URL("../../../", import.meta.url))
const raw = Path.join(repo, "../shared/transcripts/raw")

interface Summary {
  readonly runs: number
  readonly failedRuns: number
  readonly invariantViolations: ReadonlyArray<string>
}

/** `baton replay <file> --db <db> --json` in its own process: exit code and the parsed summary. */
const replay = (file: string, db: string) =>
  Effect.async<{ readonly code: number | null; readonly summary: Summary }>((resume) => {
    const child = spawn(process.execPath, batonArgs(["replay", file, "--db", db, "--json"]), {
      cwd: repo,
      env: { ...process.env, BATON_DATA_DIR: "", BATON_DATABASE_URL: "" },
      stdio: ["ignore", "pipe", "ignore"]
    })
    let stdout = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => void (stdout += chunk))
    child.on("close", (code) => resume(Effect.succeed({ code, summary: JSON.parse(stdout) as Summary })))
    return Effect.sync(() => void child.kill("SIGKILL"))
  })

describe("two processes on one SQLite file", () => {
  it.live("replaying a pi session and a Claude Code session at once: both exit 0, no failed run, no violation", () =>
    Effect.gen(function*() {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-two-"))
      const db = Path.join(dir, "baton.sqlite")
      const [pi, claude] = yield* Effect.all([
        replay(Path.join(raw, "pi/large-session.jsonl"), db),
        replay(Path.join(raw, "claude-code/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"), db)
      ], { concurrency: 2 })
      expect([pi.code, pi.summary.runs, pi.summary.failedRuns, pi.summary.invariantViolations]).toEqual([0, 88, 0, []])
      expect([claude.code, claude.summary.failedRuns, claude.summary.invariantViolations]).toEqual([0, 0, []])
      expect(claude.summary.runs).toBeGreaterThan(0)
      Fs.rmSync(dir, { recursive: true, force: true })
    }), 120_000)
})
