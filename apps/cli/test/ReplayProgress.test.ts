/**
 * `baton replay --json` on a terminal: the progress bar goes to stderr when stderr is a terminal (a real
 * pseudo-terminal, made by util-linux `script`), and stdout stays the one JSON document. Found by a newcomer's walk
 * (b46ux): under `--json` a long replay drew nothing on the terminal.
 */
import { describe, expect, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { batonArgs } from "./support/CliEntry.js"

const repo = fileURLToPath(new URL("../../../", import.meta.url))
const transcript = Path.join(repo, "../shared/transcripts/raw/swe-agent/pydicom__pydicom-1458.traj")

/** A word for `sh -c`, in single quotes. */
const quote = (word: string) => `'${word.replaceAll("'", `'\\''`)}'`

describe("baton replay --json on a terminal", () => {
  it("draws its progress on stderr (the terminal), never on stdout, which is one JSON document", async () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-progress-"))
    const out = Path.join(dir, "stdout.json")
    const command = [process.execPath, ...batonArgs(["replay", transcript, "--json", "--db", Path.join(dir, "baton.sqlite")])]
      .map(quote).join(" ") + ` > ${quote(out)}`
    // `script` runs the command on a new pseudo-terminal (its stderr) and copies what the terminal shows to its stdout.
    const terminal = await new Promise<{ code: number; shown: string }>((resolve) =>
      execFile("script", ["-qec", command, "/dev/null"], { cwd: repo, env: { ...process.env, BATON_DATA_DIR: "" } }, (error, stdout) =>
        resolve({ code: error === null ? 0 : (error.code as number), shown: stdout })))
    expect(terminal.code).toBe(0)
    expect(terminal.shown).toContain(`[${"#".repeat(30)}] 1/1`)
    // The bar is erased once the replay is done: the terminal is left clean.
    expect(terminal.shown.endsWith("\r\x1b[K")).toBe(true)
    const document = JSON.parse(Fs.readFileSync(out, "utf8")) as { readonly runs: number }
    expect(document.runs).toBe(1)
    Fs.rmSync(dir, { recursive: true, force: true })
  }, 60_000)
})
