/**
 * `--database-url` that is not a Postgres URL: one line saying so (the password hidden), exit 2, no connection tried.
 * Found by a newcomer's walk (b46ux): `--database-url notaurl` said "cannot connect to notaurl: ENOTFOUND:
 * getaddrinfo ENOTFOUND base", the driver's reading of it.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { runBaton } from "./support/CliEntry.js"

const transcript = Path.join(fileURLToPath(new URL("../../../", import.meta.url)), "../shared/transcripts/raw/swe-agent/pydicom__pydicom-1458.traj")

describe("--database-url that is not a Postgres URL", () => {
  it("is refused in one line naming it, exit 2 (with --json, the error document too)", async () => {
    const [threads, replay] = await Promise.all([
      runBaton(["threads", "--database-url", "notaurl"]),
      runBaton(["replay", transcript, "--database-url", "mysql://u:secret@127.0.0.1/db", "--json"])
    ])
    const said = (url: string) => `storage error in database.connect: ${url} is not a Postgres URL (e.g. postgres://user@127.0.0.1:5432/baton)`
    expect(threads).toEqual({ code: 2, stdout: "", stderr: `baton: ${said("notaurl")}\n` })
    // The password is never shown.
    expect(replay).toEqual({
      code: 2,
      stdout: `${JSON.stringify({ error: { code: "bad_input", message: said("mysql://u:***@127.0.0.1/db") } })}\n`,
      stderr: `baton: ${said("mysql://u:***@127.0.0.1/db")}\n`
    })
  }, 30_000)
})
