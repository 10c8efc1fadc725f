/**
 * A `baton` process killed with SIGKILL mid-turn (no finalizer runs), then another write command on the same
 * database (issue 15's acceptance): the killed run is reconciled, nothing it owed is lost, invariants hold.
 */
import type { Run } from "@baton/contracts"
import { InvariantChecks } from "@baton/orchestration"
import { Database, ThreadStore } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { batonArgs } from "./support/CliEntry.js"

const repo = fileURLToPath(new URL("../../../", import.meta.url))
const raw = Path.join(repo, "../shared/transcripts/raw")

interface Exited {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
}

/**
 * Spawns `baton <args>` with tsx; with `kill`, SIGKILLs it `afterMillis` after stdout holds `afterRuns` run lines
 * (the next run is queued and started shortly after a run's line is printed).
 */
const baton = (args: ReadonlyArray<string>, kill?: { readonly afterRuns: number; readonly afterMillis: number }) =>
  Effect.async<Exited>((resume) => {
    const child = spawn(process.execPath, batonArgs(args), {
      cwd: repo,
      env: { ...process.env, BATON_DATA_DIR: "" },
      stdio: ["ignore", "pipe", "ignore"]
    })
    let stdout = ""
    let armed = false
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk
      if (kill !== undefined && !armed && stdout.split("\n").filter((l) => l.startsWith("run ")).length >= kill.afterRuns) {
        armed = true
        setTimeout(() => child.kill("SIGKILL"), kill.afterMillis)
      }
    })
    child.on("close", (code, signal) => resume(Effect.succeed({ code, signal, stdout })))
    return Effect.sync(() => void child.kill("SIGKILL"))
  })

/** The record of the SQLite file `db`, read on a fresh Layer. */
const readBack = (db: string) =>
  Effect.gen(function*() {
    const store = yield* ThreadStore
    const threads = yield* store.listThreads()
    const runs = (yield* Effect.forEach(threads, (t) => store.listRuns(t.id))).flat()
    const violations = (yield* Effect.forEach(threads, (t) => InvariantChecks.check(t.id))).flat()
    const items = (yield* Effect.forEach(threads, (t) => store.listItems(t.id))).flat()
    return { threads, runs, items, unfinished: yield* store.listUnfinishedRuns(), violations }
  }).pipe(Effect.provide(ThreadStore.Default.pipe(Layer.provide(Layer.orDie(Database.layerSqlite(db))))))

describe("a killed baton (SIGKILL mid-turn)", () => {
  it.live("the next write command reconciles the killed run (interrupted, process_restarted); the run is owed, invariants hold", () =>
    Effect.gen(function*() {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-kill-"))
      // SIGKILL may land between two runs: try again on a fresh file, later each time, until a run was in flight.
      let db = ""
      let killed: ReadonlyArray<Run> = []
      for (let attempt = 1; attempt <= 8 && killed.length === 0; attempt++) {
        db = Path.join(dir, `baton-${attempt}.sqlite`)
        const r = yield* baton(["replay", Path.join(raw, "pi/large-session.jsonl"), "--db", db], { afterRuns: 5, afterMillis: 20 * attempt })
        expect(r.signal).toBe("SIGKILL")
        killed = (yield* readBack(db)).unfinished
      }
      // One run was in flight; a killed process records nothing, so it is still unfinished.
      expect(killed).toHaveLength(1)
      const victim = killed[0]!
      expect(["queued", "starting", "running"]).toContain(victim.status)
      // Items stream into the record as they arrive: output recorded before the kill proves the provider read the
      // prompt (the run then stopped after the provider), none leaves it unknown or unread (before the provider).
      const output = (yield* readBack(db)).items.filter((i) => i.runId === victim.id && i.kind !== "user_message" && i.kind !== "handoff_marker")

      // Any write command on the same database: a replay of another transcript, which reconciles at start.
      const next = yield* baton(["replay", Path.join(raw, "swe-agent/pydicom__pydicom-1458.traj"), "--db", db])
      expect(next.code).toBe(0)
      expect(next.stdout).toContain("invariants: all hold")

      const after = yield* readBack(db)
      expect(after.unfinished).toEqual([])
      expect(after.runs.filter((r) => ["queued", "starting", "running"].includes(r.status))).toEqual([])
      const reconciled = after.runs.find((r) => r.id === victim.id)!
      expect([reconciled.status, reconciled.failureCode, reconciled.stopPoint])
        .toEqual(["interrupted", "process_restarted", output.length > 0 ? "after_provider" : "before_provider"])
      // Nothing the killed process recorded is lost or duplicated.
      const outputAfter = after.items.filter((i) => i.runId === victim.id && i.kind !== "user_message" && i.kind !== "handoff_marker")
      expect(outputAfter.map((i) => i.id).slice(0, output.length)).toEqual(output.map((i) => i.id))
      expect(after.violations).toEqual([])

      // Nothing owed is lost: the next turn on the killed thread owes its prompt to the model (a missed-run or
      // replacement handoff holding the killed run's user message), and the thread's invariants hold.
      const h = Harness.make([
        { name: "codex", window: 44_000, autoCompactThreshold: 42_000, inject: true },
        { name: "claude", window: 200_000, inject: false }
      ], { db, idNamespace: "k" })
      yield* Effect.gen(function*() {
        const o = yield* Harness.ops
        const prompt = (yield* o.store.listItems(victim.threadId)).find((i) => i.runId === victim.id && i.kind === "user_message")!
        expect(prompt.text).toBe(victim.prompt)
        const result = yield* o.send(victim.threadId, "and now?")
        expect(result.status).toBe("completed")
        const owing = (yield* o.store.listHandoffs(victim.threadId)).filter((hd) => hd.itemIds.includes(prompt.id))
        expect(owing.map((hd) => hd.kind)).toEqual([expect.stringMatching(/^(missed_run|replacement)$/)])
        // Earlier turns reached the killed process's providers: the record's invariants, and this turn's prompt here.
        expect(yield* InvariantChecks.check(victim.threadId)).toEqual([])
        const turns = Object.values(h.providers).flatMap((p) => p.received.flatMap((r) => r.type === "turn" ? [r] : []))
        expect(turns.map((t) => [t.runId, t.prompt])).toEqual([[result.runId, "and now?"]])
      }).pipe(Effect.provide(h.layer))
      Fs.rmSync(dir, { recursive: true, force: true })
    }), 180_000)
})
