/**
 * `baton serve` reads its config file once: it read it twice (for the port check, then for the whole configuration),
 * so a FIFO (`BATON_CONFIG=<(generate-config)`) was read empty the second time and the start hung waiting for a writer
 * that had gone, and a file changed between the reads was served half old, half new (b47srv). `--config` takes any
 * readable path: it took a regular file only (@effect/cli's `Options.file`), so `--config <(generate-config)` was
 * refused (b48srv).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { runBaton } from "./support/CliEntry.js"
import { serveBaton } from "./support/Served.js"

describe("baton serve's config file", () => {
  it.live("a FIFO written once serves its configuration", () =>
    Effect.gen(function*() {
      const root = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-fifo-"))
      const fifo = Path.join(root, "config.json")
      execFileSync("mkfifo", [fifo])
      // One writer, one configuration: a second read of the FIFO finds no writer and waits forever.
      const written = Fs.promises.writeFile(fifo, JSON.stringify({ auth: { token: "fifo-admin-token-0123456789" } }))
      const server = yield* serveBaton(["--port", "0", "--data-dir", Path.join(root, "data")], { env: { BATON_CONFIG: fifo }, timeoutMillis: 30_000 })
      yield* Effect.promise(() => written)
      const session = yield* Effect.promise(async () => {
        const response = await fetch(`${server.url}/session`, { headers: { authorization: "Bearer fifo-admin-token-0123456789" } })
        return { status: response.status, body: await response.json() as unknown }
      })
      expect(session).toEqual({ status: 200, body: { role: "admin" } })
      server.child.kill("SIGTERM")
      expect(yield* Effect.promise(() => server.exited)).toBe(143)
      Fs.rmSync(root, { recursive: true, force: true })
    }), 60_000)

  it.live("--config FIFO (as `--config <(…)` passes it) serves its configuration", () =>
    Effect.gen(function*() {
      const root = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-fifo-"))
      const fifo = Path.join(root, "config.json")
      execFileSync("mkfifo", [fifo])
      const written = Fs.promises.writeFile(fifo, JSON.stringify({ auth: { token: "fifo-admin-token-0123456789" } }))
      const server = yield* serveBaton(["--port", "0", "--config", fifo, "--data-dir", Path.join(root, "data")], { timeoutMillis: 90_000 })
      yield* Effect.promise(() => written)
      const session = yield* Effect.promise(async () => {
        const response = await fetch(`${server.url}/session`, { headers: { authorization: "Bearer fifo-admin-token-0123456789" } })
        return { status: response.status, body: await response.json() as unknown }
      })
      expect(session).toEqual({ status: 200, body: { role: "admin" } })
      server.child.kill("SIGTERM")
      expect(yield* Effect.promise(() => server.exited)).toBe(143)
      Fs.rmSync(root, { recursive: true, force: true })
    }), 120_000)

  it("--config DIRECTORY: one line saying it is a directory, exit 2, nothing written", () => {
    const root = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-config-dir-"))
    const result = runBaton(["serve", "--port", "0", "--config", root, "--data-dir", Path.join(root, "data")])
    return result.then((r) => {
      expect([r.code, r.stdout, r.stderr]).toEqual([2, "", `baton: ${root}: is a directory; give the JSON config file (docs/server.md)\n`])
      expect(Fs.readdirSync(root)).toEqual([])
      Fs.rmSync(root, { recursive: true, force: true })
    })
  }, 60_000)
})
