/**
 * `baton replay --json` and `pnpm sim --json` on a terminal: the progress goes to stderr when stderr is a terminal (a
 * real pseudo-terminal, made by util-linux `script`), and stdout stays the one JSON document. Found by a newcomer's
 * walk (b46ux): under `--json` a long replay, and the simulator's seeds, showed nothing on the terminal.
 */
import { describe, expect, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { batonArgs, simArgs } from "./support/CliEntry.js"

const repo = fileURLToPath(new URL("../../../", import.meta.url))
const transcript = Path.join(repo, "../shared/transcripts/raw/swe-agent/pydicom__pydicom-1458.traj")

/** A word for `sh -c`, in single quotes. */
const quote = (word: string) => `'${word.replaceAll("'", `'\\''`)}'`

/**
 * Runs `node args` with its stderr on a new pseudo-terminal and its stdout in the file `out`: `script` copies what
 * the terminal shows to its own stdout (`shown`).
 */
const onTerminal = (args: ReadonlyArray<string>, out: string) =>
  new Promise<{ code: number; shown: string }>((resolve) =>
    execFile("script", ["-qec", `${[process.execPath, ...args].map(quote).join(" ")} > ${quote(out)}`, "/dev/null"], {
      cwd: repo,
      env: { ...process.env, BATON_DATA_DIR: "" }
    }, (error, stdout) => resolve({ code: error === null ? 0 : (error.code as number), shown: stdout })))

describe("baton replay --json on a terminal", () => {
  it("draws its progress on stderr (the terminal), never on stdout, which is one JSON document", async () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-progress-"))
    const out = Path.join(dir, "stdout.json")
    const terminal = await onTerminal(batonArgs(["replay", transcript, "--json", "--db", Path.join(dir, "baton.sqlite")]), out)
    expect(terminal.code).toBe(0)
    expect(terminal.shown).toContain(`[${"#".repeat(30)}] 1/1`)
    // The bar is erased once the replay is done: the terminal is left clean.
    expect(terminal.shown.endsWith("\r\x1b[K")).toBe(true)
    const document = JSON.parse(Fs.readFileSync(out, "utf8")) as { readonly runs: number }
    expect(document.runs).toBe(1)
    Fs.rmSync(dir, { recursive: true, force: true })
  }, 60_000)

  it("pnpm sim --json: each seed's line on stderr (the terminal), the figures alone on stdout", async () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-sim-progress-"))
    const out = Path.join(dir, "stdout.json")
    const terminal = await onTerminal(simArgs(["--seeds", "1", "--steps", "3", "--json"]), out)
    expect(terminal.code).toBe(0)
    expect(terminal.shown).toMatch(/^seed 1: \d+ operations, \d+ crashes, ok\r?\n$/)
    expect((JSON.parse(Fs.readFileSync(out, "utf8")) as { readonly seeds: number }).seeds).toBe(1)
    Fs.rmSync(dir, { recursive: true, force: true })
  }, 60_000)
})
