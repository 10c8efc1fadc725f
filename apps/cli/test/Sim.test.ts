/**
 * `pnpm sim` as a user runs it: a real process. `--jobs J` runs the same seeds as one process would, split over J
 * child processes, and adds their figures up; a soak by time with jobs logs one line naming them.
 */
import { describe, expect, it } from "@effect/vitest"
import { execFile, spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { simArgs } from "./support/CliEntry.js"

const repo = fileURLToPath(new URL("../../../", import.meta.url))

/**
 * Runs `pnpm sim args` as a process: the test bundle (CliEntry's `simArgs`), or with `tsx` true through tsx exactly as
 * `pnpm sim` starts it (one test does, so that the script itself is known to start).
 */
const sim = (args: ReadonlyArray<string>, env: Record<string, string> = {}, tsx?: boolean) =>
  new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(process.execPath, simArgs(args, tsx), { cwd: repo, env: { ...process.env, ...env } }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : (error.code as number), stdout, stderr })
    })
  })

interface Summary {
  readonly seeds: number
  readonly seedsRun: string
  readonly jobs: number
  readonly operations: number
  readonly crashRestarts: number
  readonly distinctCrashPoints: number
  readonly violations: number
}

describe("pnpm sim --json", () => {
  it("a command line that does not parse is one JSON error document on stdout (issue 15: exactly one), exit 2", async () => {
    const r = await sim(["--seeds", "many", "--json"], {}, true)
    expect(r.code).toBe(2)
    const message = r.stderr.split("\n")[0]!.replace(/^sim: /, "")
    expect(message).toMatch(/--seeds/)
    // Before: nothing on stdout.
    expect(r.stdout).toBe(`${JSON.stringify({ error: { code: "usage", message } })}\n`)
  }, 60_000)
})

describe("pnpm sim --scenario", () => {
  // Found by a newcomer's walk (b45ux): each of these printed a stack trace (`sim: Error: ENOENT …`, `TypeError:
  // Cannot read properties of undefined (reading 'map')`) and exited 1, the code of a violation.
  it("a file it cannot run (missing, a directory, empty, not JSON, not a scenario): one `sim:` line, exit 2", async () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-sim-scenario-"))
    const file = (name: string, text: string) => {
      const path = Path.join(dir, name)
      Fs.writeFileSync(path, text)
      return path
    }
    const missing = Path.join(dir, "missing.json")
    const empty = file("empty.json", "")
    const broken = file("broken.json", "{\"seed\":1,")
    const shape = file("shape.json", "{\"a\":1}")
    const results = await Promise.all([missing, dir, empty, broken, shape].map((f) => sim(["--scenario", f])))
    expect(results.map((r) => [r.code, r.stdout, r.stderr.trim()])).toEqual([
      [2, "", `sim: --scenario ${missing}: file not found`],
      [2, "", `sim: --scenario ${dir}: is a directory; give the scenario's JSON file`],
      [2, "", `sim: --scenario ${empty}: empty file; give the scenario JSON a failing seed prints after "regression:"`],
      [2, "", expect.stringMatching(new RegExp(`^sim: --scenario ${broken}: not JSON \\(.+\\)$`))],
      [2, "", `sim: --scenario ${shape}: not a scenario: expected {"seed","providers":[…],"ops":[{"kind":"create",…},…]}, ` +
        `the JSON a failing seed prints after "regression:"`]
    ])
    // `--json`: the one error document on stdout.
    const json = await sim(["--scenario", missing, "--json"])
    expect([json.code, JSON.parse(json.stdout)]).toEqual([2, { error: { code: "bad_input", message: `--scenario ${missing}: file not found` } }])
    Fs.rmSync(dir, { recursive: true, force: true })
  }, 60_000)
})

describe("pnpm sim --jobs", () => {
  it("runs the seeds one process runs, split over the jobs, with the same figures", async () => {
    const common = ["--seeds", "3", "--steps", "5", "--seed-start", "1900", "--no-shrink", "--json"]
    const one = await sim(common)
    const two = await sim([...common, "--jobs", "2"])
    expect(one.code, one.stderr).toBe(0)
    expect(two.code, two.stderr).toBe(0)
    const a = JSON.parse(one.stdout) as Summary
    const b = JSON.parse(two.stdout) as Summary
    expect(a.seedsRun).toBe("1900..1902")
    expect(b.seedsRun).toBe("1900..1902 every 2; 1901..1901 every 2")
    expect(b.jobs).toBe(2)
    expect(b.seeds).toBe(3)
    // A seed alone decides its run: the same seeds give the same operations and crash-restarts in any split.
    expect(a.operations).toBeGreaterThan(0)
    expect(b.operations).toBe(a.operations)
    expect(b.crashRestarts).toBe(a.crashRestarts)
    expect(b.distinctCrashPoints).toBe(a.distinctCrashPoints)
    expect(b.violations).toBe(0)
  }, 240_000)

  it("a soak by time with jobs appends one line naming them to the soak log", async () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-sim-"))
    const log = Path.join(dir, "soak-log.jsonl")
    const run = await sim(["--soak", "0.05", "--jobs", "2", "--steps", "3", "--seed-start", "500", "--no-shrink"], { BATON_SOAK_LOG: log })
    expect(run.code, run.stderr).toBe(0)
    expect(run.stdout).toMatch(/2 jobs\)$/m)
    const lines = Fs.readFileSync(log, "utf8").trim().split("\n")
    expect(lines).toHaveLength(1)
    const line = JSON.parse(lines[0]!) as { jobs: number; command: string; seedCount: number; operations: number; violations: number }
    expect(line.jobs).toBe(2)
    expect(line.command).toContain("--jobs 2")
    // Each job starts a seed before its deadline, so two jobs ran at least two seeds.
    expect(line.seedCount).toBeGreaterThanOrEqual(2)
    expect(line.operations).toBeGreaterThan(0)
    expect(line.violations).toBe(0)
  }, 240_000)

  it("refuses --jobs 0 with exit 2", async () => {
    const run = await sim(["--jobs", "0"])
    expect(run.code).toBe(2)
    expect(run.stderr).toContain("--jobs needs an integer >= 1")
  })
})

/**
 * `pnpm sim ARGS` as a process, sent SIGINT once its stderr shows a seed's trace (`--trace` prints each finished
 * seed's operations there): its exit code and output.
 */
const simInterrupted = (args: ReadonlyArray<string>) =>
  new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, simArgs(args), { cwd: repo, stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    let signalled = false
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => void (stdout += chunk))
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk
      if (!signalled && /^(\[job \d\] )? +\d+ {2}\S/m.test(stderr)) {
        signalled = true
        child.kill("SIGINT")
      }
    })
    child.on("close", (code) => resolve({ code, stdout, stderr }))
  })

interface Interrupted {
  readonly interrupted: {
    readonly signal: string
    readonly message: string
    readonly seeds: number
    readonly operations: number
    readonly crashRestarts: number
    readonly violations: number
    readonly failingSeeds: ReadonlyArray<number>
  }
}

describe("pnpm sim --json stopped by Ctrl-C", () => {
  // Found at an earlier stop: stdout was empty, against --json's one document on every exit.
  for (const jobs of [1, 2]) {
    it(`prints one interrupted document with the seeds finished so far (--jobs ${jobs}), exit 130`, async () => {
      const r = await simInterrupted(["--seeds", "10000", "--steps", "4", "--seed-start", "700", "--no-shrink", "--trace", "--json", "--jobs", String(jobs)])
      expect(r.code, r.stderr.slice(-2_000)).toBe(130)
      expect(r.stdout.trim().split("\n").filter((l) => !l.startsWith("sim-job"))).toHaveLength(1)
      const document = JSON.parse(r.stdout) as Interrupted
      expect(Object.keys(document.interrupted)).toEqual(["signal", "message", "seeds", "operations", "crashRestarts", "violations", "failingSeeds"])
      expect(document.interrupted.signal).toBe("SIGINT")
      expect(document.interrupted.seeds).toBeGreaterThanOrEqual(1)
      expect(document.interrupted.operations).toBeGreaterThanOrEqual(document.interrupted.seeds)
      expect(document.interrupted.violations).toBe(document.interrupted.failingSeeds.length)
      expect(document.interrupted.message).toBe(`stopped by SIGINT after ${document.interrupted.seeds} of 10000 seeds`)
      expect(r.stderr).toContain(`sim: ${document.interrupted.message}\n`)
    }, 120_000)
  }
})
