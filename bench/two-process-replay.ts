/**
 * Two OS processes replaying two different real transcripts into one SQLite file at the same time, `ROUNDS` times
 * in a row (default 10), each round on a fresh file. Prints one line per round and a summary; exits 1 if any process
 * exits non-zero, prints no JSON, reports a failed run or an invariant violation.
 *
 *   npx tsx bench/two-process-replay.ts [transcriptA] [transcriptB]   (from the repository root; ROUNDS=10)
 */
import { spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

const a = process.argv[2] ?? "../shared/transcripts/raw/pi/before-compaction.jsonl"
const b = process.argv[3] ?? "../shared/transcripts/raw/pi/large-session.jsonl"
const rounds = Number(process.env.ROUNDS ?? 10)
const bin = Path.resolve("apps/cli/src/bin.ts")

interface Outcome {
  readonly code: number | null
  readonly summary: { readonly runs: number; readonly failedRuns: number; readonly invariantViolations: ReadonlyArray<string> } | null
  readonly stderr: string
}

/** The replay's JSON summary, or `null` when stdout is not one JSON document. */
const parseSummary = (out: string): Outcome["summary"] => {
  try {
    return JSON.parse(out) as Outcome["summary"]
  } catch {
    return null
  }
}

const replay = (file: string, db: string) =>
  new Promise<Outcome>((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", bin, "replay", file, "--db", db, "--json"], { stdio: ["ignore", "pipe", "pipe"] })
    let out = ""
    let err = ""
    child.stdout.on("data", (d: Buffer) => (out += d.toString()))
    child.stderr.on("data", (d: Buffer) => (err += d.toString()))
    child.on("close", (code) => {
      resolve({ code, summary: parseSummary(out), stderr: err })
    })
  })

let bad = 0
const started = Date.now()
for (let round = 1; round <= rounds; round++) {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-two-"))
  const db = Path.join(dir, "baton.sqlite")
  const t0 = Date.now()
  const [x, y] = await Promise.all([replay(a, db), replay(b, db)])
  const ok = (o: Outcome) => o.code === 0 && o.summary !== null && o.summary.failedRuns === 0 && o.summary.invariantViolations.length === 0
  const line = [x, y].map((o) =>
    o.summary === null ? `exit ${o.code}, no JSON: ${o.stderr.split("\n")[0]}` : `exit ${o.code}, runs ${o.summary.runs}, failedRuns ${o.summary.failedRuns}, violations ${o.summary.invariantViolations.length}`
  ).join(" | ")
  if (!ok(x) || !ok(y)) bad++
  console.log(`round ${round}: ${line} (${Date.now() - t0} ms)`)
  Fs.rmSync(dir, { recursive: true, force: true })
}
console.log(`${rounds - bad} of ${rounds} rounds clean in ${((Date.now() - started) / 1000).toFixed(1)} s`)
process.exitCode = bad === 0 ? 0 : 1
