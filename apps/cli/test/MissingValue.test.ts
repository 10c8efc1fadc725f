/**
 * A flag that takes a value given last, with nothing after it: one `baton: --flag: expected a value after it` line,
 * exit 2, the JSON error document under `--json`. Found by a newcomer's walk (b45ux): `offload T --get` said
 * "Received unknown argument: '--get'" (a flag of `offload`), and `offload-control T --pin` ran, pinned nothing and
 * exited 0.
 */
import { describe, expect, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { batonArgs } from "./support/CliEntry.js"

const repo = fileURLToPath(new URL("../../../", import.meta.url))

const baton = (args: ReadonlyArray<string>) =>
  new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(process.execPath, batonArgs(args), { cwd: repo, env: { ...process.env, BATON_DATA_DIR: "", BATON_SERVER: "", BATON_TOKEN: "" } }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : (error.code as number), stdout, stderr })
    })
  })

describe("a value flag given last without its value", () => {
  it("is refused in one line naming it, exit 2, before anything runs (no server is reached)", async () => {
    // Port 1: nothing listens there; the refusal comes before any request.
    const server = ["--server", "http://127.0.0.1:1", "--token", "t".repeat(20)]
    const [get, pin, db, json] = await Promise.all([
      baton([...server, "offload", "thr_x", "--get"]),
      baton([...server, "offload-control", "thr_x", "--pin"]),
      baton(["threads", "--db"]),
      baton([...server, "offload", "thr_x", "--json", "--cancel"])
    ])
    expect([get.code, get.stdout, get.stderr]).toEqual([2, "", "baton: --get: expected a value after it\n"])
    expect([pin.code, pin.stdout, pin.stderr]).toEqual([2, "", "baton: --pin: expected a value after it\n"])
    expect([db.code, db.stdout, db.stderr]).toEqual([2, "", "baton: --db: expected a value after it\n"])
    expect([json.code, JSON.parse(json.stdout), json.stderr]).toEqual([
      2,
      { error: { code: "usage", message: "--cancel: expected a value after it" } },
      "baton: --cancel: expected a value after it\n"
    ])
  }, 60_000)

  it("the list of value flags in bin.ts names every flag bin.ts declares with a value", () => {
    const source = Fs.readFileSync(Path.join(repo, "apps/cli/src/bin.ts"), "utf8")
    const declared = new Set(
      [...source.matchAll(/(?:Options\.(?:text|integer|float|file|directory)|integerOption)\("([a-z-]+)"/g)].map((m) => `--${m[1]}`)
    )
    const listed = source.slice(source.indexOf("const valueFlags"), source.indexOf("])", source.indexOf("const valueFlags")))
    expect(declared.size).toBeGreaterThan(20)
    expect(new Set([...listed.matchAll(/"(--[a-z-]+)"/g)].map((m) => m[1]))).toEqual(declared)
  })
})
