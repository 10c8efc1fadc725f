/**
 * The simulation on the real Postgres (issue 15: "a bounded simulation runs on Postgres too"): the same scenarios,
 * crash-restarts and invariant checks as on SQLite, each seed on a fresh schema. The dump for determinism lists the
 * tables from information_schema and their rows in JSON order: deterministic run to run, but not byte-identical to
 * SQLite's dump of the same seed (value encodings differ), so the two dialects are not compared with each other.
 */
import { Simulation } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

describe("simulation on Postgres (bounded)", () => {
  it.live("seeds 1..5 x 30 operations: no violation, crash-restarts recover", () =>
    Effect.gen(function*() {
      const failures: Array<string> = []
      let crashes = 0
      let restarts = 0
      let executed = 0
      let operations = 0
      for (let seed = 1; seed <= 5; seed++) {
        operations += Simulation.generate(seed, 30).ops.length
        const outcome = yield* Simulation.runSeed(seed, 30, Simulation.allFeatures, { dialect: "postgres" })
        crashes += outcome.crashes
        restarts += outcome.stats.restarts
        executed += outcome.executed
        for (const v of outcome.violations) failures.push(`seed ${seed}: ${v}`)
      }
      expect(failures).toEqual([])
      // Every generated operation ran (the run stops early only at a violation).
      expect(executed).toBe(operations)
      expect(crashes).toBeGreaterThan(0)
      expect(restarts).toBeGreaterThan(crashes)
    }), { timeout: 180_000 })

  it.live("the same seed twice on two fresh schemas: the same dump", () =>
    Effect.gen(function*() {
      const scenario = Simulation.generate(3, 20)
      const a = yield* Simulation.execute(scenario, { dialect: "postgres", keepDump: true })
      const b = yield* Simulation.execute(scenario, { dialect: "postgres", keepDump: true })
      expect(a.violations).toEqual([])
      expect(b.dump).toBe(a.dump)
      expect(b.digest).toBe(a.digest)
    }), { timeout: 120_000 })
})
