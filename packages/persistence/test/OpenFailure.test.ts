/**
 * `Database.openFailureDetail`: why a SQLite file could not be opened, naming a read-only directory or file. The
 * writability check is passed in: this suite may run as root, for whom a `chmod` leaves everything writable.
 */
import { Database } from "@baton/persistence"
import { describe, expect, it } from "@effect/vitest"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

describe("Database.openFailureDetail", () => {
  // Found by a newcomer's walk (b45ux): `baton threads --db <a database on a read-only mount>` said only "unable to
  // open database file", as for a path that is no database.
  it("names a read-only directory or a read-only file; any other failure is left as the driver said", () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-open-failure-"))
    const file = Path.join(dir, "baton.sqlite")
    Fs.writeFileSync(file, "")
    const unable = "unable to open database file"
    const base = `cannot open ${file} as a SQLite database (${unable})`
    expect(Database.openFailureDetail(file, unable, (p) => p !== dir)).toBe(
      `${base}: its directory ${dir} is read-only (SQLite writes the database's -wal and -shm files beside it)`
    )
    expect(Database.openFailureDetail(file, unable, (p) => p !== file)).toBe(`${base}: the file is read-only`)
    expect(Database.openFailureDetail(file, unable, () => true)).toBe(base)
    // A directory given as the database, a file that is no database, a missing directory: as the driver said.
    expect(Database.openFailureDetail(dir, unable, () => false)).toBe(`cannot open ${dir} as a SQLite database (${unable})`)
    expect(Database.openFailureDetail(file, "file is not a database", () => false))
      .toBe(`cannot open ${file} as a SQLite database (file is not a database)`)
    const missing = Path.join(dir, "no", "baton.sqlite")
    expect(Database.openFailureDetail(missing, unable, () => false)).toBe(`cannot open ${missing} as a SQLite database (${unable})`)
    Fs.rmSync(dir, { recursive: true, force: true })
  })
})
