#!/usr/bin/env node
/**
 * TypeScript's errors and the Effect language service's diagnostics from ONE program (`pnpm typecheck`, run by CI):
 *
 *   node scripts/typecheck.mjs [tsconfig.lint.json]
 *
 * Reports what `tsc -p tsconfig.lint.json` reports (configuration, syntax, global and semantic errors: the same
 * `getPreEmitDiagnostics` tsc's `noEmit` run prints) and what `effect-language-service diagnostics --strict` reports
 * (the plugin's rules, with the severities tsconfig.base.json's `plugins` entry sets). Exits 1 when there is any
 * TypeScript diagnostic or any Effect error or warning (warnings fail, as `--strict` made them); Effect messages
 * (the plugin's suggestions) are printed and do not fail, as before.
 *
 * Why not the two commands: `tsc` builds one program (about 30 s of CPU), but the plugin's CLI builds its own through
 * the editor's project service, per package tsconfig and anew for every 50 files (about 200 s of CPU for the same
 * sources, the largest part of CI before the tests). Here the plugin's rules run on tsc's program after its check,
 * through `checkSourceFileWorker` of `@effect/language-service/effect-lsp-patch-utils`: the function the plugin's
 * documented `effect-language-service patch` inserts into tsc's own check of each file, called with the same
 * arguments. The patch itself is not used: it rewrites node_modules/typescript in place, and pnpm hard-links that
 * file from the store every checkout on the machine shares. Without the patch the rules that read the checker's
 * relation errors recompute them (the plugin's editor/CLI path), so the findings are the same.
 */
import * as Path from "node:path"
import { createRequire } from "node:module"
import { fileURLToPath } from "node:url"
import ts from "typescript"

const repo = Path.resolve(Path.dirname(fileURLToPath(import.meta.url)), "..")
const configPath = Path.resolve(repo, process.argv[2] ?? "tsconfig.lint.json")
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

const config = ts.getParsedCommandLineOfConfigFile(configPath, undefined, {
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
for (const sourceFile of program.getSourceFiles()) {
  // The project's own files; checkSourceFileWorker itself skips external libraries under skipLibCheck.
  if (sourceFile.isDeclarationFile || program.isSourceFileFromExternalLibrary(sourceFile)) continue
  // "tsc": report the plugin's suggestions as messages, as its CLI does.
  effectLsp.checkSourceFileWorker(ts, program, sourceFile, program.getCompilerOptions(), (diagnostic) => {
    effectDiagnostics.push(diagnostic)
  }, "tsc")
}

const all = ts.sortAndDeduplicateDiagnostics([...typeScriptDiagnostics, ...effectDiagnostics])
if (all.length > 0) {
  process.stdout.write(
    process.stdout.isTTY ? ts.formatDiagnosticsWithColorAndContext(all, formatHost) : ts.formatDiagnostics(all, formatHost)
  )
}
const count = (list, category) => list.filter((diagnostic) => diagnostic.category === category).length
const failing = typeScriptDiagnostics.length +
  count(effectDiagnostics, ts.DiagnosticCategory.Error) + count(effectDiagnostics, ts.DiagnosticCategory.Warning)
process.stdout.write(
  `${Path.relative(repo, configPath)}: ${program.getRootFileNames().length} files; ` +
    `${typeScriptDiagnostics.length} TypeScript diagnostics; Effect: ` +
    `${count(effectDiagnostics, ts.DiagnosticCategory.Error)} errors, ` +
    `${count(effectDiagnostics, ts.DiagnosticCategory.Warning)} warnings, ` +
    `${count(effectDiagnostics, ts.DiagnosticCategory.Message)} messages\n`
)
process.exit(failing > 0 ? 1 : 0)
