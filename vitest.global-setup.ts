/**
 * Vitest global setup: bundles the `baton` CLI (apps/cli/src/bin.ts) once per test run into
 * `apps/cli/.test-bundle/bin.mjs`, which the CLI tests spawn instead of `node --import tsx apps/cli/src/bin.ts`.
 *
 * Why: tsx transpiles the whole program on every process start (about 2 s on this project's 2-core machines, 6 s
 * under load), and the CLI suites start a few hundred processes. The bundle is the same sources (esbuild, the
 * transpiler tsx itself uses), so the tests still exercise what `pnpm baton` runs; `apps/cli/test/Cli.test.ts` keeps
 * one check that `pnpm baton` itself (tsx) starts. The bundle sits at the depth of `apps/cli/src/`, so paths the CLI
 * derives from `import.meta.url` (the sample transcripts) resolve the same. `better-sqlite3` (a native addon) stays
 * outside the bundle, imported from where pnpm installed it.
 */
import * as esbuild from "esbuild"
import { build as viteBuild } from "vite"
import { createRequire } from "node:module"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const repo = Path.dirname(fileURLToPath(import.meta.url))
export const cliBundle = Path.join(repo, "apps", "cli", ".test-bundle", "bin.mjs")

/**
 * Builds the dashboard (apps/web, `pnpm build:web`) into `apps/web/dist`, which `baton serve` serves at `/`: the
 * browser acceptance tests (apps/web/test) load it from a real server, and a fresh clone has no build.
 */
const buildWeb = () => viteBuild({ configFile: Path.join(repo, "apps", "web", "vite.config.ts"), logLevel: "warn" })

export default async function setup() {
  await buildWeb()
  const fromSqlite = createRequire(Fs.realpathSync(Path.join(repo, "packages", "persistence", "package.json")))
  const sqliteNode = Fs.realpathSync(Path.dirname(fromSqlite.resolve("@effect/sql-sqlite-node/package.json")))
  const betterSqlite = createRequire(Path.join(sqliteNode, "package.json")).resolve("better-sqlite3")
  await esbuild.build({
    entryPoints: [Path.join(repo, "apps", "cli", "src", "bin.ts")],
    outfile: cliBundle,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    logLevel: "warning",
    // CommonJS dependencies inside an ES module bundle call `require`.
    banner: { js: "import { createRequire as __batonCreateRequire } from 'node:module'; const require = __batonCreateRequire(import.meta.url);" },
    plugins: [{
      name: "native-addons",
      setup(build) {
        build.onResolve({ filter: /^better-sqlite3$/ }, () => ({ path: betterSqlite, external: true }))
        build.onResolve({ filter: /^pg-native$/ }, (args) => ({ path: args.path, external: true }))
      }
    }]
  })
}
