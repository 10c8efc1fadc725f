/**
 * Vitest global setup: bundles the `baton` CLI (apps/cli/src/bin.ts) and `pnpm sim` (apps/cli/src/sim.ts) once per
 * test run, which the CLI tests start as `node apps/cli/.test-bundle/bin.cjs ARGS` (`sim.cjs`) instead of
 * `node --import tsx apps/cli/src/<entry>.ts ARGS`.
 *
 * Why: tsx transpiles the whole program on every process start (about 2 s on this project's 2-core machines, 6 s
 * under load), and the CLI suites start a few hundred processes. The bundle is the same sources (esbuild, the
 * transpiler tsx itself uses), so the tests still exercise what `pnpm baton` runs; `apps/cli/test/Cli.test.ts` keeps
 * one check that `pnpm baton` itself (tsx) starts, `apps/cli/test/Sim.test.ts` one that `pnpm sim` does. The bundle
 * (`<entry>.bundle.cjs`) sits at the depth of `apps/cli/src/`, so paths the CLI derives from `import.meta.url` (the
 * sample transcripts; `pnpm sim --jobs J` starts its jobs from that file) resolve the same. `better-sqlite3` (a native
 * addon) stays outside the bundle, required from where pnpm installed it.
 *
 * The bundle is CommonJS, not an ES module, for one reason: V8's code cache. Compiling the 12 MB bundle was about a
 * third of the CPU time of every `baton` process (0.3 of 0.9 s user+sys: a `--server` command that only makes one
 * HTTP request), and Node 20 caches no ES module's code (`module.enableCompileCache` is Node 22). `<entry>.cjs` is a
 * ten-line loader that compiles the bundle as a `vm.Script` with the cached data `<entry>.bundle.cjs.cache`, which
 * this setup writes once from a `--help` run (after it, so that the functions a start compiles lazily are in it). A
 * cache V8 rejects (another Node, other V8 flags) costs only the compile: the loader then compiles as Node would.
 * esbuild converts the same ES modules the same way in both formats (its Node-mode interop for `import` of
 * CommonJS packages: the `__toESM(..., 1)` calls are identical); the bundle is strict mode throughout, as modules are.
 */
import * as esbuild from "esbuild"
import { build as viteBuild } from "vite"
import { Effect, Either } from "effect"
import { execFile } from "node:child_process"
import { createRequire } from "node:module"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import * as Database from "./packages/persistence/src/Database.js"

const repo = Path.dirname(fileURLToPath(import.meta.url))
const bundleDir = Path.join(repo, "apps", "cli", ".test-bundle")
/** What the tests start for `baton` (the loader of `bin.bundle.cjs`). */
export const cliBundle = Path.join(bundleDir, "bin.cjs")
/** What the tests start for `pnpm sim` (the loader of `sim.bundle.cjs`). */
export const simBundle = Path.join(bundleDir, "sim.cjs")

/**
 * The loader `<entry>.cjs`: runs `<entry>.bundle.cjs` as Node runs a CommonJS main module (its own `module`,
 * `require` and `__filename`), compiled with the code cache `<entry>.bundle.cjs.cache` when there is one. With
 * `BATON_TEST_BUNDLE_CACHE=write` it writes that cache as the process exits (global setup only: one writer).
 */
const loader = (entry: string) => `"use strict";
const Fs = require("node:fs"), Module = require("node:module"), Path = require("node:path"), Vm = require("node:vm");
const file = Path.join(__dirname, ${JSON.stringify(`${entry}.bundle.cjs`)}), cacheFile = file + ".cache";
let cachedData;
try { cachedData = Fs.readFileSync(cacheFile); } catch {}
const source = Fs.readFileSync(file, "utf8").replace(/^#!.*/, "");
const script = new Vm.Script(Module.wrap(source), { filename: file, cachedData, importModuleDynamically: Vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER });
const main = new Module(file, null);
main.filename = file;
main.paths = Module._nodeModulePaths(__dirname);
if (process.env.BATON_TEST_BUNDLE_CACHE === "write") process.once("exit", () => {
  Fs.writeFileSync(cacheFile + "." + process.pid, script.createCachedData());
  Fs.renameSync(cacheFile + "." + process.pid, cacheFile);
});
script.runInThisContext().call(main.exports, main.exports, Module.createRequire(file), main, file, __dirname);
`

/**
 * Builds the dashboard (apps/web, `pnpm build:web`) into `apps/web/dist`, which `baton serve` serves at `/`: the
 * browser acceptance tests (apps/web/test) load it from a real server, and a fresh clone has no build.
 */
const buildWeb = () => viteBuild({ configFile: Path.join(repo, "apps", "web", "vite.config.ts"), logLevel: "warn" })

/**
 * Makes the migrated database `baton_tmpl_<pid>_<random>` on the test Postgres server (`Database.testPgUrl()`) and
 * names it in `BATON_TEST_PG_TEMPLATE`, which the test processes inherit: `Database.layerPgIsolated` copies it
 * instead of migrating a fresh schema for every Postgres test (`Database.testPgTemplate` says why). Returns its
 * teardown (the template dropped), or nothing when the server cannot be reached: the tests then migrate schemas as
 * before (and the Postgres ones fail as before).
 */
const pgTemplate = async (): Promise<(() => Promise<void>) | undefined> => {
  const made = await Effect.runPromise(Effect.either(Database.makePgTemplate()))
  if (Either.isLeft(made)) return undefined
  process.env["BATON_TEST_PG_TEMPLATE"] = made.right
  return () => Effect.runPromise(Database.dropPgDatabase(made.right))
}

export default async function setup() {
  // Test databases commit without waiting for the WAL flush (`Database.testPgAsyncCommit` says why).
  process.env["BATON_TEST_PG_SYNC_COMMIT"] = "off"
  // The template's migrations wait on the Postgres server, the dashboard's build on the CPU: side by side.
  const [dropTemplate] = await Promise.all([pgTemplate(), buildWeb()])
  const fromSqlite = createRequire(Fs.realpathSync(Path.join(repo, "packages", "persistence", "package.json")))
  const sqliteNode = Fs.realpathSync(Path.dirname(fromSqlite.resolve("@effect/sql-sqlite-node/package.json")))
  const betterSqlite = createRequire(Path.join(sqliteNode, "package.json")).resolve("better-sqlite3")
  // A cache is checked against its source's length, not its bytes: never leave one beside a bundle it was not made from.
  for (const entry of ["bin", "sim"]) Fs.rmSync(Path.join(bundleDir, `${entry}.bundle.cjs.cache`), { force: true })
  await esbuild.build({
    entryPoints: { "bin.bundle": Path.join(repo, "apps", "cli", "src", "bin.ts"), "sim.bundle": Path.join(repo, "apps", "cli", "src", "sim.ts") },
    outdir: bundleDir,
    outExtension: { ".js": ".cjs" },
    bundle: true,
    platform: "node",
    format: "cjs",
    target: "node20",
    logLevel: "warning",
    // What `import.meta.url` is in an ES module: the bundle's own URL (CommonJS has no `import.meta`).
    define: { "import.meta.url": "__batonImportMetaUrl" },
    banner: { js: "\"use strict\"; const __batonImportMetaUrl = require(\"node:url\").pathToFileURL(__filename).href;" },
    plugins: [{
      name: "native-addons",
      setup(build) {
        build.onResolve({ filter: /^better-sqlite3$/ }, () => ({ path: betterSqlite, external: true }))
        build.onResolve({ filter: /^pg-native$/ }, (args) => ({ path: args.path, external: true }))
      }
    }]
  })
  for (const entry of ["bin", "sim"]) Fs.writeFileSync(Path.join(bundleDir, `${entry}.cjs`), loader(entry))
  await new Promise<void>((resolve, reject) =>
    execFile(process.execPath, [cliBundle, "--help"], { cwd: repo, env: { ...process.env, BATON_TEST_BUNDLE_CACHE: "write" } }, (error) =>
      error === null ? resolve() : reject(error)))
  return dropTemplate
}
