/**
 * How the CLI tests start `baton`: `node <bundle> ARGS`, the bundle of apps/cli/src/bin.ts that vitest's global setup
 * builds once per run (vitest.global-setup.ts says why), or, with `BATON_TEST_CLI=tsx`, `node --import tsx
 * apps/cli/src/bin.ts ARGS` exactly as `pnpm baton` runs it. Paths are relative to the repository root (the tests'
 * working directory for the child).
 */
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const repo = fileURLToPath(new URL("../../../../", import.meta.url))

/** The arguments after `process.execPath` that run `baton args`. */
export const batonArgs = (args: ReadonlyArray<string>): Array<string> =>
  process.env["BATON_TEST_CLI"] === "tsx"
    ? ["--import", "tsx", "apps/cli/src/bin.ts", ...args]
    : [Path.join(repo, "apps", "cli", ".test-bundle", "bin.mjs"), ...args]
