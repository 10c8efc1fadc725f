#!/usr/bin/env node
/**
 * TypeScript's errors and the Effect language service's diagnostics, and with `--lint` ESLint, from one build of each
 * program (`pnpm typecheck`; CI runs `pnpm check`, the same with `--lint`):
 *
 *   node scripts/typecheck.mjs [--lint] [TSCONFIG]
 *
 * The programs: tsconfig.lint.json (every package, app and the benchmarks) with TypeScript and the Effect rules, and
 * the dashboard's apps/web/tsconfig.json and tsconfig.test.json (DOM, JSX) with TypeScript. A TSCONFIG argument
 * replaces them with that one program, Effect rules included (the tests' fixtures).
 *
 * Reports what `tsc -p` reports for each (configuration, syntax, global and semantic errors: the same
 * `getPreEmitDiagnostics` tsc's `noEmit` run prints) and what `effect-language-service diagnostics --strict` reports
 * (the plugin's rules, with the severities tsconfig.base.json's `plugins` entry sets). Exits 1 when there is any
 * TypeScript diagnostic, any Effect error or warning (warnings fail, as `--strict` made them) or, with `--lint`, any
 * ESLint error or warning (`eslint --max-warnings 0 .`, the rules of eslint.config.mjs); Effect messages (the plugin's
 * suggestions) are printed and do not fail, as before.
 *
 * Why: `tsc` builds one program (about 30 s of CPU for tsconfig.lint.json), but the plugin's CLI builds its own through
 * the editor's project service, per package tsconfig and anew for every 50 files (about 200 s of CPU for the same
 * sources), and ESLint's type-aware rules build and type-check the three programs once more (about 55 s of CPU). Here
 * the plugin's rules run on tsc's program after its check, through `checkSourceFileWorker` of
 * `@effect/language-service/effect-lsp-patch-utils`: the function the plugin's documented `effect-language-service
 * patch` inserts into tsc's own check of each file, called with the same arguments. The patch itself is not used: it
 * rewrites node_modules/typescript in place, and pnpm hard-links that file from the store every checkout on the
 * machine shares. Without the patch the rules that read the checker's relation errors recompute them (the plugin's
 * editor/CLI path), so the findings are the same. ESLint gets the checked programs through typescript-eslint's
 * `parserOptions.programs`, which replaces `parserOptions.project`.
 */
import * as Path from "node:path"
import { createRequire } from "node:module"
import { fileURLToPath } from "node:url"
import ts from "typescript"

const repo = Path.resolve(Path.dirname(fileURLToPath(import.meta.url)), "..")
const args = process.argv.slice(2)
const lint = args.includes("--lint")
const configArgument = args.find((arg) => !arg.startsWith("--"))
if (lint && configArgument !== undefined) {
  process.stderr.write("usage: node scripts/typecheck.mjs [--lint] | node scripts/typecheck.mjs TSCONFIG\n")
  process.exit(2)
}

/** `{ config: path from the repository root, effect: whether the Effect rules run on it }`. */
const projects = configArgument === undefined
  ? [
    { config: "tsconfig.lint.json", effect: true },
    { config: "apps/web/tsconfig.json", effect: false },
    { config: "apps/web/tsconfig.test.json", effect: false }
  ]
  : [{ config: Path.relative(repo, Path.resolve(configArgument)), effect: true }]

const effectLsp = createRequire(import.meta.url)("@effect/language-service/effect-lsp-patch-utils.js")
if (typeof effectLsp.checkSourceFileWorker !== "function") {
  // A newer plugin renamed its patch entry point: fail rather than silently skip the Effect rules.
  process.stderr.write("@effect/language-service/effect-lsp-patch-utils.js has no checkSourceFileWorker\n")
  process.exit(2)
}

const formatHost = {
  getCanonicalFileName: (fileName) => fileName,
  getCurrentDirectory: () => process.cwd(),
  getNewLine: () => ts.sys.newLine
}
const print = (diagnostics) => {
  if (diagnostics.length === 0) return
  process.stdout.write(
    process.stdout.isTTY
      ? ts.formatDiagnosticsWithColorAndContext(diagnostics, formatHost)
      : ts.formatDiagnostics(diagnostics, formatHost)
  )
}
const count = (list, category) => list.filter((diagnostic) => diagnostic.category === category).length

/** Builds and checks one program; prints its findings; returns the program and how many of them fail. */
const check = ({ config: configFile, effect }) => {
  const config = ts.getParsedCommandLineOfConfigFile(Path.join(repo, configFile), undefined, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
      process.stderr.write(ts.formatDiagnostics([diagnostic], formatHost))
      process.exit(2)
    }
  })
  const program = ts.createProgram({
    rootNames: config.fileNames,
    options: config.options,
    projectReferences: config.projectReferences,
    configFileParsingDiagnostics: ts.getConfigFileParsingDiagnostics(config)
  })
  const typeScriptDiagnostics = ts.getPreEmitDiagnostics(program)
  const effectDiagnostics = []
  if (effect) {
    for (const sourceFile of program.getSourceFiles()) {
      // The project's own files; checkSourceFileWorker itself skips external libraries under skipLibCheck.
      if (sourceFile.isDeclarationFile || program.isSourceFileFromExternalLibrary(sourceFile)) continue
      // "tsc": report the plugin's suggestions as messages, as its CLI does.
      effectLsp.checkSourceFileWorker(ts, program, sourceFile, program.getCompilerOptions(), (diagnostic) => {
        effectDiagnostics.push(diagnostic)
      }, "tsc")
    }
  }
  print(ts.sortAndDeduplicateDiagnostics([...typeScriptDiagnostics, ...effectDiagnostics]))
  process.stdout.write(
    `${configFile}: ${program.getRootFileNames().length} files; ` +
      `${typeScriptDiagnostics.length} TypeScript diagnostics` +
      (effect
        ? `; Effect: ${count(effectDiagnostics, ts.DiagnosticCategory.Error)} errors, ` +
          `${count(effectDiagnostics, ts.DiagnosticCategory.Warning)} warnings, ` +
          `${count(effectDiagnostics, ts.DiagnosticCategory.Message)} messages`
        : "") + "\n"
  )
  const failing = typeScriptDiagnostics.length +
    count(effectDiagnostics, ts.DiagnosticCategory.Error) + count(effectDiagnostics, ts.DiagnosticCategory.Warning)
  return { program, failing }
}

const checked = projects.map(check)
let failing = checked.reduce((sum, project) => sum + project.failing, 0)

if (lint) {
  const { ESLint } = await import("eslint")
  const { typedFiles, dashboardFiles } = await import("../eslint.config.mjs")
  const programsOf = (configs) => checked.filter((_, i) => configs.includes(projects[i].config)).map((_) => _.program)
  const eslint = new ESLint({
    cwd: repo,
    // Later entries win: the dashboard's files match typedFiles too (apps/*/src), as in eslint.config.mjs.
    overrideConfig: [
      { files: typedFiles, languageOptions: { parserOptions: { programs: programsOf(["tsconfig.lint.json"]) } } },
      {
        files: dashboardFiles,
        languageOptions: {
          parserOptions: { programs: programsOf(["apps/web/tsconfig.json", "apps/web/tsconfig.test.json"]) }
        }
      }
    ]
  })
  const results = await eslint.lintFiles(["."])
  const formatter = await eslint.loadFormatter("stylish")
  process.stdout.write(await formatter.format(results))
  const errors = results.reduce((sum, result) => sum + result.errorCount, 0)
  const warnings = results.reduce((sum, result) => sum + result.warningCount, 0)
  process.stdout.write(`eslint: ${results.length} files; ${errors} errors, ${warnings} warnings\n`)
  failing += errors + warnings
}

process.exit(failing > 0 ? 1 : 0)
