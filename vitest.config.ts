import { defineConfig } from "vitest/config"
import DurationSequencer from "./vitest.sequencer.js"

export default defineConfig({
  test: {
    include: ["packages/*/test/**/*.test.ts", "apps/*/test/**/*.test.ts", "bench/test/**/*.test.ts", "scripts/test/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Two test files at a time: vitest's default on a 2-core machine is one (cores - 1), and most of the suite's time
    // is spent waiting on subprocesses (real CLIs, \`baton serve\`), Postgres and loopback HTTP, not on the CPU.
    maxWorkers: 2,
    minWorkers: 1,
    globalSetup: ["./vitest.global-setup.ts"],
    // Longest files first, by the committed test-durations.json: a fresh clone has no duration cache (see the file).
    sequence: { sequencer: DurationSequencer }
  }
})
