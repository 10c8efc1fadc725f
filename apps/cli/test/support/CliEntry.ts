/**
 * How the CLI tests start `baton`: `node <bundle> ARGS`, the bundle of apps/cli/src/bin.ts that vitest's global setup
 * builds once per run (vitest.global-setup.ts says why), or, with `BATON_TEST_CLI=tsx`, `node --import tsx
 * apps/cli/src/bin.ts ARGS` exactly as `pnpm baton` runs it. Paths are relative to the repository root (the tests'
 * working directory for the child).
 */
import { execFile } from "node:child_process"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const repo = fileURLToPath(new URL("../../../../", import.meta.url))

/** The arguments after `process.execPath` that run `baton args`. */
export const batonArgs = (args: ReadonlyArray<string>): Array<string> =>
  process.env["BATON_TEST_CLI"] === "tsx"
    ? ["--import", "tsx", "apps/cli/src/bin.ts", ...args]
    : [Path.join(repo, "apps", "cli", ".test-bundle", "bin.cjs"), ...args]

/**
 * The arguments after `process.execPath` that run `pnpm sim args`: the bundle of apps/cli/src/sim.ts (beside the
 * CLI's), or with `BATON_TEST_CLI=tsx` (or `tsx` true) `--import tsx apps/cli/src/sim.ts` as `pnpm sim` runs it.
 */
export const simArgs = (args: ReadonlyArray<string>, tsx = process.env["BATON_TEST_CLI"] === "tsx"): Array<string> =>
  tsx
    ? ["--import", "tsx", "apps/cli/src/sim.ts", ...args]
    : [Path.join(repo, "apps", "cli", ".test-bundle", "sim.cjs"), ...args]

/** What a `baton` process did: its exit code (0 on success) and its whole output. */
export interface BatonResult {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/**
 * Runs `baton args` as a process from the repository root, with no `BATON_SERVER`, `BATON_TOKEN` or
 * `BATON_DATA_DIR` from the test's environment unless `env` sets them, and `input` (when given) on its standard input,
 * then closed. Never fails: a failed process is its result.
 */
export const runBaton = (args: ReadonlyArray<string>, env: Record<string, string> = {}, input?: Uint8Array) =>
  new Promise<BatonResult>((resolve) => {
    const child = execFile(
      process.execPath,
      batonArgs(args),
      { cwd: repo, env: { ...process.env, BATON_SERVER: "", BATON_TOKEN: "", BATON_DATA_DIR: "", ...env } },
      (error, stdout, stderr) => resolve({ code: error === null ? 0 : (error.code as number), stdout, stderr })
    )
    if (input !== undefined) child.stdin!.end(input)
  })
