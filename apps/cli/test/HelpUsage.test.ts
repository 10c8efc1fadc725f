/**
 * The usage lines of `baton --help`: an option a command can do without is in brackets, whatever its kind (a flag,
 * a value, a repeated value). Found by a newcomer's walk (b46ux): `offload-control` showed `--pin text...` and
 * `--unpin text...` bare, as if required, beside `[--keep-newest integer]`.
 */
import { describe, expect, it } from "@effect/vitest"
import { runBaton } from "./support/CliEntry.js"

/** The options each command requires (shown bare in its usage line); every other option is optional. */
const required: Record<string, ReadonlyArray<string>> = {
  "thread create": ["--provider"],
  "tool-results": ["--results"]
}

describe("baton --help usage lines", () => {
  it("bracket every optional option, repeated ones included; only required options are bare", async () => {
    const help = await runBaton(["--help"])
    expect(help.code).toBe(0)
    // eslint-disable-next-line no-control-regex
    const text = help.stdout.replace(/\x1b\[[0-9;]*m/g, "")
    const lines = text.slice(text.indexOf("COMMANDS")).split("\n").filter((l) => l.startsWith("  - ")).map((l) => l.slice(4).trim())
    const bare = Object.fromEntries(lines.map((line) => {
      const usage = line.split(/ {2,}/)[0]!
      const words = usage.split(" ")
      const name = words.slice(0, Math.max(1, words.findIndex((w) => /^[-[<]/.test(w)))).join(" ")
      // What is left once the bracketed options and the <arguments> are taken out.
      const outside = usage.replace(/\[[^\]]*\](\.\.\.)?/g, "").replace(/<[^>]*>/g, "")
      return [name, outside.split(/\s+/).filter((w) => w.startsWith("--"))]
    }))
    expect(Object.keys(bare)).toContain("offload-control")
    expect(bare["offload-control"]).toEqual([])
    for (const [name, options] of Object.entries(bare)) expect([name, options]).toEqual([name, required[name] ?? []])
    expect(text).toContain("[--pin text...] [--unpin text...]")
  }, 30_000)

  // Found by a newcomer's walk (b46ux): a subcommand's help showed `$ create --provider text …`, which runs nothing.
  it("a subcommand's usage line is the command line to type: `$ baton`, then its command path", async () => {
    const helps = await Promise.all([["thread", "create", "--help"], ["--server", "http://127.0.0.1:1", "offload-control", "--help"]].map((args) => runBaton(args)))
    // eslint-disable-next-line no-control-regex
    const usage = helps.map((h) => h.stdout.replace(/\x1b\[[0-9;]*m/g, "").split("\n").find((l) => l.startsWith("$ ")))
    expect(usage).toEqual([
      "$ baton thread create --provider text [--title text] [--tools text]",
      "$ baton offload-control [--on] [--off] [--keep-newest integer] [--pin text...] [--unpin text...] [--reset] [--json] <thread-id>"
    ])
  }, 30_000)
})
