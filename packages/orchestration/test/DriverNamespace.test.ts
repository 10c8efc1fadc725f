/**
 * Two processes sharing a host name but not a pid namespace (containers with host networking): each judged the other
 * by `kill(pid, 0)`, which cannot see the other's pid, found it gone, and ended its runs in flight (every
 * `goneDriverSweepMillis` since the sweep; review r43). The host a driver row names now holds the pid namespace, so
 * the two judge each other by heartbeat. Here a process in a new pid namespace (`unshare --pid`, root only; skipped
 * elsewhere) judges this process's live driver.
 */
import { DriverRegistry } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const repo = fileURLToPath(new URL("../../..", import.meta.url))
const judge = fileURLToPath(new URL("./fixtures/judge-driver.ts", import.meta.url))
const canUnshare = process.platform === "linux" && process.getuid?.() === 0 &&
  ChildProcess.spawnSync("unshare", ["--pid", "--fork", "--mount-proc", "true"]).status === 0

describe.skipIf(!canUnshare)("a live driver judged from another pid namespace on the same host name", () => {
  it.live("is alive (by its heartbeat), not gone because its pid cannot be seen there", () =>
    Effect.acquireUseRelease(
      Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-pidns-"))),
      (dir) =>
        Effect.gen(function*() {
          const file = Path.join(dir, "baton.sqlite")
          const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
          const here = yield* Layer.build(Harness.makeLayer([h.providers.codex!], h.counter, file, {}, "here"))
          const driverId = Context.get(here, DriverRegistry.DriverRegistry).driverId
          const judged = yield* Effect.promise(() =>
            new Promise<{ readonly status: number | null; readonly stdout: string; readonly stderr: string }>((resolve) => {
              const child = ChildProcess.spawn("unshare", ["--pid", "--fork", "--mount-proc", process.execPath, "--import", "tsx", judge, file, driverId], {
                cwd: repo,
                stdio: ["ignore", "pipe", "pipe"]
              })
              let stdout = ""
              let stderr = ""
              child.stdout.setEncoding("utf8").on("data", (c: string) => void (stdout += c))
              child.stderr.setEncoding("utf8").on("data", (c: string) => void (stderr += c))
              child.on("close", (status) => resolve({ status, stdout, stderr }))
            })
          )
          expect(judged.status, judged.stderr).toBe(0)
          const verdict = JSON.parse(judged.stdout.trim().split("\n").at(-1)!) as { alive: boolean; host: string }
          // The other namespace names another host, though the host name is the same.
          expect(verdict.host).not.toBe(DriverRegistry.hostIdentity())
          expect(verdict.host.startsWith(`${Os.hostname()} `)).toBe(true)
          expect(verdict.alive).toBe(true)
        }).pipe(Effect.scoped),
      (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
    ), 60_000)
})
