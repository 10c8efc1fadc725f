/**
 * `baton events` prints `thread.merged`: the merge run, its fork, what it copied, and either its handoff or, for a
 * merge behind an unfinished run, that its copies and handoff are owed till every run ahead has ended. Before, the
 * payload's JSON was cut at 120 characters, before `handoffId` and `behindRunId` (review r37).
 */
import { ThreadEvent } from "@baton/contracts"
import { Schema } from "effect"
import { describe, expect, it } from "vitest"
import * as Format from "../src/Format.js"

const merged = (payload: Record<string, unknown>) =>
  Schema.decodeUnknownSync(ThreadEvent)({
    eventId: "evt_9",
    threadId: "thr_2b9a4f0e-5d1c-4c44-9a57-0f3e2c1d7b10",
    seq: 9,
    globalSeq: 9,
    commandId: null,
    createdAt: "2026-12-06T08:00:00Z",
    type: "thread.merged",
    payload
  })

describe("the CLI's line for thread.merged", () => {
  const parentSide = {
    linkId: "lnk_8f5e0c1a-3b7d-4e2f-9c6a-1d2e3f4a5b6c",
    forkThreadId: "thr_0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
    runId: "run_5c6d7e8f-9a0b-4c1d-8e2f-3a4b5c6d7e8f",
    fromRunSeq: 1,
    throughRunSeq: 3,
    itemCount: 4,
    handoffId: null
  }

  it("a merge behind an unfinished run names that run and says its copies are owed", () => {
    const line = Format.eventLine(merged({ ...parentSide, behindRunId: "run_11111111-2222-4333-8444-555555555555" }), false)
    expect(line).toContain("run_5c6d7e8f-9a0b-4c1d-8e2f-3a4b5c6d7e8f from thr_0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d (4 item(s) of runs 2..3)")
    expect(line).toContain("owed behind run_11111111-2222-4333-8444-555555555555: its copies and handoff recorded when every run ahead has ended")
  })

  it("a merge recorded at once names its handoff; the fork's side names the parent", () => {
    const line = Format.eventLine(merged({ ...parentSide, handoffId: "hof_99999999-8888-4777-8666-555555555555" }), false)
    expect(line).toMatch(/: handoff hof_99999999-8888-4777-8666-555555555555$/)
    expect(Format.eventLine(merged({ linkId: "lnk_1", parentThreadId: "thr_p", throughRunSeq: 3 }), false)).toMatch(/merged into thr_p through run 3$/)
  })
})
