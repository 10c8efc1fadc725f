/**
 * `baton serve` that cannot start leaves nothing behind: on a port another process holds it says so (which address,
 * what to do) before the token file and the database are created; a configuration it refuses creates no token file.
 * Found by a newcomer's walk (b46ux): a fresh data directory was left with `token` and `baton.sqlite` after the
 * listen failed.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Fs from "node:fs"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import { runBaton } from "./support/CliEntry.js"

describe("baton serve that cannot start", () => {
  it("on a busy port: one line naming the address and what to do, exit 2, no data directory created", async () => {
    const dir = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-busy-")), "data")
    const holder = Net.createServer()
    await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", resolve))
    const port = (holder.address() as Net.AddressInfo).port
    const taken = await runBaton(["serve", "--port", String(port), "--data-dir", dir])
    await new Promise<void>((resolve) => holder.close(() => resolve()))
    expect(taken).toEqual({
      code: 2,
      stdout: "",
      stderr: `baton: cannot listen on 127.0.0.1:${port} (listen EADDRINUSE: address already in use 127.0.0.1:${port}); ` +
        "another process holds that port: stop it, or pass another --port (0: any free port)\n"
    })
    expect(Fs.existsSync(dir)).toBe(false)
    Fs.rmSync(Path.dirname(dir), { recursive: true, force: true })
  }, 30_000)

  it("on a configuration it refuses after reading the providers: no token file", async () => {
    const root = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-refused-"))
    const dir = Path.join(root, "data")
    const config = Path.join(root, "baton.json")
    Fs.writeFileSync(config, JSON.stringify({ offload: { summariser: "nobody" } }))
    const refused = await runBaton(["serve", "--port", "0", "--config", config, "--data-dir", dir])
    expect([refused.code, refused.stdout]).toEqual([2, ""])
    expect(refused.stderr).toContain("offload.summariser: \"nobody\" is not a model-API provider instance")
    expect(Fs.existsSync(dir)).toBe(false)
    Fs.rmSync(root, { recursive: true, force: true })
  }, 30_000)

  it("on a database it cannot reach: one line naming it, exit 2, the token file it created removed with its directories", async () => {
    const root = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-nodb-"))
    const dir = Path.join(root, "data", "nested")
    // Nothing listens on port 1: the connection is refused. The token file (data/nested/token) was left behind (b47srv).
    const refused = await runBaton(["serve", "--port", "0", "--data-dir", dir, "--database-url", "postgres://u@127.0.0.1:1/x"])
    expect([refused.code, refused.stdout]).toEqual([2, ""])
    expect(refused.stderr).toContain("baton: storage error in database.connect: cannot connect to postgres://u@127.0.0.1:1/x")
    expect(Fs.readdirSync(root)).toEqual([])
    // A token file that was there before stays, as does its directory.
    Fs.mkdirSync(dir, { recursive: true })
    Fs.writeFileSync(Path.join(dir, "token"), "kept-admin-token-0123456789\n")
    const again = await runBaton(["serve", "--port", "0", "--data-dir", dir, "--database-url", "postgres://u@127.0.0.1:1/x"])
    expect(again.code).toBe(2)
    expect(Fs.readFileSync(Path.join(dir, "token"), "utf8")).toBe("kept-admin-token-0123456789\n")
    Fs.rmSync(root, { recursive: true, force: true })
  }, 60_000)
})
