/**
 * The order in which `pnpm test` starts its test files: longest first, by the durations committed in
 * `test-durations.json` (seconds per file, relative to the repository root).
 *
 * Why: the suite runs two files at a time (vitest.config.ts), and CI runs it on a fresh clone, where vitest has no
 * cache of earlier durations and starts the largest files (by bytes) first. Some of the longest files are short in
 * bytes (the Postgres simulation: 43 lines, about 45 s), so one of them could start last and leave the other worker
 * idle for most of a minute at the end. Longest first, the two workers end within about one short file of each other.
 *
 * Files not in the durations file (new ones) start first, in vitest's own order (unknown first, then larger first),
 * so that a long new file cannot be the one that starts last. The order decides nothing but when a file starts: every
 * file still runs in its own process. `node scripts/test-durations.mjs REPORT.json` refreshes the durations from a
 * run's JSON report (`npx vitest run --reporter=json --outputFile=REPORT.json`).
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { BaseSequencer, type TestSpecification } from "vitest/node"

const repo = Path.dirname(fileURLToPath(import.meta.url))
/** Where the durations are committed: `{ "<path from the repository root>": <seconds> }`. */
export const durationsFile = Path.join(repo, "test-durations.json")

/** The committed durations, by path from the repository root (`/` separated); empty when the file is missing. */
const readDurations = (): Map<string, number> => {
  if (!Fs.existsSync(durationsFile)) return new Map()
  const parsed = JSON.parse(Fs.readFileSync(durationsFile, "utf8")) as Record<string, unknown>
  return new Map(Object.entries(parsed).filter((entry): entry is [string, number] => typeof entry[1] === "number"))
}

export default class DurationSequencer extends BaseSequencer {
  override async sort(files: Array<TestSpecification>): Promise<Array<TestSpecification>> {
    const durations = readDurations()
    const key = (file: TestSpecification) => Path.relative(repo, file.moduleId).split(Path.sep).join("/")
    const unknown = files.filter((file) => !durations.has(key(file)))
    const known = files.filter((file) => durations.has(key(file)))
      .sort((a, b) => durations.get(key(b))! - durations.get(key(a))! || key(a).localeCompare(key(b)))
    return [...(await super.sort(unknown)), ...known]
  }
}
