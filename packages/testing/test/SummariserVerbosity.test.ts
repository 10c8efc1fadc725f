/**
 * The simulator's `/offload` summariser answers verbosely by a draw per call (`Simulation.verboseCall`), not every
 * `verboseEvery`-th call of the run: with that global count every offload of `verboseEvery` (3-5) chunks or more
 * failed, so seed 57000 × 200 committed 1 offload in 18 and the commit path of long offloads was never exercised.
 */
import { Simulation } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"

/** Whether an offload whose summariser calls are `first..first+chunks-1` has every call terse (so it can commit). */
const allTerse = (seed: number, setup: Simulation.SummariserSetup, first: number, chunks: number) =>
  Array.from({ length: chunks }, (_, i) => first + i).every((call) => !Simulation.verboseCall(seed, setup, call))

describe("the simulated summariser's verbose answers", () => {
  it("old scenario files (verboseEvery) replay as they were: every verboseEvery-th call of the run", () => {
    const setup: Simulation.SummariserSetup = { inputWindow: 6_000, verboseEvery: 4 }
    expect([1, 2, 3, 4, 5, 8, 12].map((call) => Simulation.verboseCall(7, setup, call))).toEqual([false, false, false, true, false, true, true])
    // So no offload of 4 chunks or more could ever commit.
    for (let first = 1; first <= 100; first++) expect(allTerse(7, setup, first, 4)).toBe(false)
  })

  it("verboseOneIn: about one call in N, deterministic per (seed, call), and most offloads of 8 chunks commit", () => {
    const setup: Simulation.SummariserSetup = { inputWindow: 6_000, verboseOneIn: 20 }
    let verbose = 0
    let commits = 0
    let offloads = 0
    for (let seed = 59_000; seed < 59_020; seed++) {
      for (let call = 1; call <= 500; call++) {
        const v = Simulation.verboseCall(seed, setup, call)
        expect(Simulation.verboseCall(seed, setup, call)).toBe(v)
        if (v) verbose++
      }
      for (let first = 1; first <= 490; first += 8) {
        offloads++
        if (allTerse(seed, setup, first, 8)) commits++
      }
    }
    // 10,000 draws at 1/20: 500 expected (a binomial's standard deviation is 22).
    expect(verbose).toBeGreaterThan(400)
    expect(verbose).toBeLessThan(600)
    // (19/20)^8 = 0.66 of the 8-chunk offloads draw no verbose call; with verboseEvery 3-5 none did.
    expect(commits / offloads).toBeGreaterThan(0.55)
    // Different seeds draw different calls verbose.
    const calls = (seed: number) => Array.from({ length: 200 }, (_, i) => Simulation.verboseCall(seed, setup, i + 1))
    expect(calls(59_000)).not.toEqual(calls(59_001))
  })

  it("generated scenarios carry verboseOneIn (16-24) and no verboseEvery", () => {
    for (let seed = 59_000; seed < 59_050; seed++) {
      const s = Simulation.generate(seed, 5, Simulation.allFeatures).summariser!
      expect(s.verboseEvery).toBeUndefined()
      expect(s.verboseOneIn).toBeGreaterThanOrEqual(16)
      expect(s.verboseOneIn).toBeLessThanOrEqual(24)
    }
  })
})
