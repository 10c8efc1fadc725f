/**
 * `baton demo` without its sample transcripts: the refusal says where it looked and how to point it elsewhere. The
 * default location is beside the repository, where the test suite's own samples are, so the default's wording is
 * checked on `Format.samplesMissing` (the `--samples DIR` wording runs as a process in Cli.test).
 */
import { describe, expect, it } from "@effect/vitest"
import * as Format from "../src/Format.js"

const own = "pnpm baton replay ~/.claude/projects/<project-dir>/<session-id>.jsonl (Claude Code) or " +
  "pnpm baton replay ~/.pi/agent/sessions/<project-dir>/<timestamp>_<session-id>.jsonl (pi)"

describe("baton demo without the samples", () => {
  // b48srv: the default's message never named --samples, the flag that says where they are.
  it("by default: names --samples DIR, then one's own sessions", () => {
    expect(Format.samplesMissing("/r/shared/transcripts", "/r/shared/transcripts/raw/pi/before-compaction.jsonl", true)).toBe(
      "the sample transcripts are not beside this repository (no /r/shared/transcripts/raw/pi/before-compaction.jsonl); " +
        `pass --samples DIR where they are, or replay one of your own agent sessions instead: ${own}`
    )
  })

  it("with --samples DIR: names the directory given", () => {
    expect(Format.samplesMissing("/tmp/s", "/tmp/s/raw/pi/before-compaction.jsonl", false)).toBe(
      `the sample transcripts are not in /tmp/s (no /tmp/s/raw/pi/before-compaction.jsonl); replay one of your own agent sessions instead: ${own}`
    )
  })
})
