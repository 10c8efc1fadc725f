#!/usr/bin/env node
/**
 * Refreshes `test-durations.json` (the order `pnpm test` starts its files in: vitest.sequencer.ts) from a vitest JSON
 * report of a whole run:
 *
 *   npx vitest run --reporter=json --outputFile=/tmp/report.json
 *   node scripts/test-durations.mjs /tmp/report.json
 *
 * Each file's duration is the time its tests ran (the report's endTime - startTime), in seconds with one decimal.
 * Only the order of the values matters, so a report from a loaded machine serves as well as one from a quiet one.
 * Files of the report that no longer exist are left out; every file of the report replaces its old value, and files
 * the report does not name keep theirs. Writes the file sorted by path (small diffs); prints the ten longest.
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const repo = Path.resolve(Path.dirname(fileURLToPath(import.meta.url)), "..")
const target = Path.join(repo, "test-durations.json")
const reportPath = process.argv[2]
if (reportPath === undefined) {
  process.stderr.write("usage: node scripts/test-durations.mjs REPORT.json (a vitest --reporter=json report)\n")
  process.exit(2)
}

const report = JSON.parse(Fs.readFileSync(reportPath, "utf8"))
if (!Array.isArray(report.testResults)) {
  process.stderr.write(`${reportPath}: not a vitest JSON report (no testResults)\n`)
  process.exit(2)
}
const durations = Fs.existsSync(target) ? JSON.parse(Fs.readFileSync(target, "utf8")) : {}
for (const file of report.testResults) {
  const relative = Path.relative(repo, file.name).split(Path.sep).join("/")
  if (typeof file.startTime !== "number" || typeof file.endTime !== "number") continue
  durations[relative] = Math.round((file.endTime - file.startTime) / 100) / 10
}
for (const relative of Object.keys(durations)) {
  if (!Fs.existsSync(Path.join(repo, relative))) delete durations[relative]
}
const sorted = Object.fromEntries(Object.entries(durations).sort(([a], [b]) => a.localeCompare(b)))
Fs.writeFileSync(target, `${JSON.stringify(sorted, null, 1)}\n`)
const longest = Object.entries(sorted).sort(([, a], [, b]) => b - a).slice(0, 10)
process.stdout.write(`${Object.keys(sorted).length} files in ${Path.relative(process.cwd(), target) || target}; longest:\n`)
for (const [file, seconds] of longest) process.stdout.write(`  ${seconds.toFixed(1).padStart(6)} s  ${file}\n`)
