/**
 * `baton events` prints `run.prompt_deferred` (a message queued behind an unfinished run and ended there owes its
 * prompt): the prompt is recorded when every run ahead of it has ended, not when the run it was first behind ends.
 * Before, the line said "prompt recorded after <that run> ends": with two messages queued behind a run and only the
 * second interrupted, the first runs once that run ends and the second's prompt is recorded only after the first's
 * answer (review r36q).
 */
import { ThreadEvent } from "@baton/contracts"
import { Schema } from "effect"
import { describe, expect, it } from "vitest"
import * as Format from "../src/Format.js"

describe("the CLI's line for run.prompt_deferred", () => {
  it("names the run it was queued behind and says the prompt is recorded once the runs ahead have ended", () => {
    const e = Schema.decodeUnknownSync(ThreadEvent)({
      eventId: "evt_7",
      threadId: "thr_1",
      seq: 7,
      globalSeq: 7,
      commandId: null,
      createdAt: "2026-12-06T08:00:00Z",
      type: "run.prompt_deferred",
      payload: { runId: "run_3", behindRunId: "run_1" }
    })
    const line = Format.eventLine(e, false)
    expect(line).toContain("run_3 prompt owed (queued behind run_1): recorded when every run ahead has ended")
    expect(line).not.toContain("after run_1 ends")
  })
})
