import type { RunStatus } from "@baton/contracts"
import { RunLifecycle } from "@baton/orchestration"
import { describe, expect, it } from "@effect/vitest"

const all: ReadonlyArray<RunStatus> = ["queued", "starting", "running", "completed", "interrupted", "failed", "cancelled"]

describe("run lifecycle", () => {
  it("allows exactly the moves of the design's status machine", () => {
    const allowed = all.flatMap((from) => all.filter((to) => RunLifecycle.canMove(from, to)).map((to) => `${from}->${to}`))
    expect(allowed).toEqual([
      "queued->starting", "queued->interrupted", "queued->failed", "queued->cancelled",
      "starting->starting", "starting->running", "starting->interrupted", "starting->failed", "starting->cancelled",
      "running->starting", "running->completed", "running->interrupted", "running->failed",
      "interrupted->interrupted", "failed->failed"
    ])
  })

  it("a finished run never moves back to an active status", () => {
    for (const from of ["completed", "interrupted", "failed", "cancelled"] as const) {
      for (const to of ["queued", "starting", "running"] as const) expect(RunLifecycle.canMove(from, to)).toBe(false)
    }
  })
})
