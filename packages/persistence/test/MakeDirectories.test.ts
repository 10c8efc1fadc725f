/**
 * `Database.makeDirectories`: `mkdir -p` one level at a time (the SQLite file's and the token file's directories).
 * Under /proc it fails with the first level's error instead of retrying forever as Node 20's recursive mkdir does
 * (the process-level regression is apps/cli/test/Cli.test.ts "serve with a data directory or database under /proc").
 */
import { Database } from "@baton/persistence"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

describe("Database.makeDirectories", () => {
  it("creates every missing level, accepts one that exists, and refuses a file in the way", () => {
    const root = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-mkdir-"))
    const deep = Path.join(root, "a", "b", "c")
    const make = (dir: string) => Effect.runSync(Effect.exit(Database.makeDirectories(dir)))
    expect(make(deep)).toEqual(Exit.void)
    expect(Fs.statSync(deep).isDirectory()).toBe(true)
    expect(make(deep)).toEqual(Exit.void)
    expect(make(root)).toEqual(Exit.void)
    expect(Fs.readdirSync(Path.join(root, "a", "b"))).toEqual(["c"])
    const file = Path.join(root, "file")
    Fs.writeFileSync(file, "x")
    const failure = (dir: string) => Effect.runSync(Effect.flip(Database.makeDirectories(dir)))
    expect(failure(Path.join(file, "d"))).toMatchObject({ _tag: "DirectoryNotMade", code: "ENOTDIR", path: Path.join(file, "d") })
    // A file where the directory should be says so (it said "EEXIST: file already exists, mkdir '<file>'").
    expect(failure(file)).toMatchObject({ _tag: "DirectoryNotMade", code: "EEXIST", path: file, message: `${file} is a file, not a directory` })
    Fs.rmSync(root, { recursive: true, force: true })
  })

  it("a level that cannot be made throws its error at once (under /proc: ENOENT, not a retry forever)", () => {
    expect(Effect.runSync(Effect.flip(Database.makeDirectories("/proc/baton-test/x/y")))).toMatchObject({
      _tag: "DirectoryNotMade",
      code: "ENOENT",
      path: "/proc/baton-test",
      message: "ENOENT: no such file or directory, mkdir '/proc/baton-test'"
    })
  })
})
