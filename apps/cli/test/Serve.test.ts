/**
 * `baton serve` as a real process on loopback: it reconciles what a dead process left unfinished before it serves,
 * prints the URL it listens on, keeps the API behind the token it stored in the data directory (never printing
 * it), serves a thread end to end, and stops on SIGTERM (exit 143) with nothing left running.
 */
import { Commands, type CommandId, type ProviderInstance } from "@baton/contracts"
import { ThreadService } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { serveBaton } from "./support/Served.js"

/** Starts `baton serve --port 0 --data-dir DIR [...extra]` and waits for its "listening on" line (at most 60 s). */
const start = (dataDir: string, extra: ReadonlyArray<string> = []) => serveBaton(["--port", "0", "--data-dir", dataDir, ...extra])

const call = (url: string, init: RequestInit = {}) =>
  Effect.promise(async () => {
    const response = await fetch(url, init)
    return { status: response.status, body: await response.json() as Record<string, unknown> }
  })

describe("baton serve", () => {
  it.live("--host [::1] and ::ffff:127.0.0.1 listen, print a usable bracketed URL, and are loopback (no warning)", () =>
    Effect.gen(function*() {
      for (const [host, url] of [["[::1]", /^http:\/\/\[::1\]:\d+$/], ["::ffff:127.0.0.1", /^http:\/\/\[::ffff:127\.0\.0\.1\]:\d+$/]] as const) {
        const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-serve-v6-"))
        // Before: `[::1]` failed to listen (getaddrinfo ENOTFOUND), and `::ffff:127.0.0.1` printed
        // `http://::ffff:127.0.0.1:PORT`, not a URL.
        const server = yield* start(dir, ["--host", host])
        expect(server.url).toMatch(url)
        expect(yield* call(`${server.url}/healthz`)).toEqual({ status: 200, body: { status: "ok" } })
        server.child.kill("SIGTERM")
        expect(yield* Effect.promise(() => server.exited)).toBe(143)
        expect(server.output().stderr).not.toContain("beyond loopback")
        Fs.rmSync(dir, { recursive: true, force: true })
      }
    }), 150_000)

  it.live("reconciles a dead process's run, serves a thread behind its token, stops on SIGTERM with exit 143", () =>
    Effect.gen(function*() {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-serve-"))
      const db = Path.join(dir, "baton.sqlite")
      // A process that queued a run and stopped before driving it: its run is left `queued`.
      const left = yield* Effect.gen(function*() {
        const service = yield* ThreadService.ThreadService
        const threadId = yield* service.createThread(Commands.CreateThread.make({
          commandId: "cmd_a" as CommandId,
          title: "left behind",
          providerInstance: "codex" as ProviderInstance
        }))
        return yield* service.enqueueMessage(Commands.SendMessage.make({ commandId: "cmd_b" as CommandId, threadId, text: "never driven" }))
      }).pipe(Effect.provide(Harness.make([{ name: "codex", window: 44_000, inject: true }], { db, idNamespace: "dead" }).layer))
      expect(left.status).toBe("queued")

      const server = yield* start(dir)
      expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
      const token = Fs.readFileSync(Path.join(dir, "token"), "utf8").trim()
      expect(Fs.statSync(Path.join(dir, "token")).mode & 0o777).toBe(0o600)
      const auth = { authorization: `Bearer ${token}`, "content-type": "application/json" }

      expect(yield* call(`${server.url}/healthz`)).toEqual({ status: 200, body: { status: "ok" } })
      expect((yield* call(`${server.url}/threads`)).status).toBe(401)
      // Startup reconciliation ended the left-behind run before the provider: it is owed to the next turn.
      const reconciled = yield* call(`${server.url}/runs/${left.id}`, { headers: auth })
      expect((reconciled.body.run as Record<string, unknown>).status).toBe("interrupted")
      expect((reconciled.body.run as Record<string, unknown>).failureCode).toBe("process_restarted")

      const sent = yield* call(`${server.url}/threads/${left.threadId}/messages`, { method: "POST", headers: auth, body: JSON.stringify({ text: "hello" }) })
      expect([sent.status, sent.body.status]).toEqual([202, "starting"])
      const run = yield* call(`${server.url}/runs/${sent.body.runId as string}?waitMs=30000`, { headers: auth })
      expect((run.body.run as Record<string, unknown>).status).toBe("completed")

      server.child.kill("SIGTERM")
      const code = yield* Effect.promise(() => server.exited)
      expect(code).toBe(143)
      const { stderr, stdout } = server.output()
      expect(stdout.trim().split("\n")).toEqual([`listening on ${server.url}`])
      expect(stderr).toContain(`admin token: created in ${Path.join(dir, "token")}`)
      expect(stderr + stdout).not.toContain(token)
    }), 120_000)
})
