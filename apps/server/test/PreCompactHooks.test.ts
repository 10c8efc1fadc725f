/**
 * The PreCompact hook as an executable (issue 12 item 6, `offload.preCompactHook.command`): the JSON on stdin, exit 0
 * allows, exit 2 denies with stderr as the reason, another exit denies saying so, and a missed deadline denies and
 * stops the hook with every process it started (review finding: a hook's child outlived it).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as PreCompactHooks from "../src/PreCompactHooks.js"

const input = { threadId: "thr_1", trigger: "manual" as const, approvalMode: "client-requested" }

/** Whether process `pid` is still running. */
const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch (_gone) {
    return false
  }
}

describe("PreCompact hook commands", () => {
  it.live("exit 0 allows with the JSON on stdin; exit 2 denies with stderr; exit 1 denies saying so", () =>
    Effect.gen(function*() {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-hook-"))
      const seen = Path.join(dir, "stdin.json")
      const allow = PreCompactHooks.make({ command: ["sh", "-c", `cat > ${seen}`], timeoutMs: 5_000 })
      expect(yield* allow.check(input)).toEqual({ allow: true })
      expect(JSON.parse(Fs.readFileSync(seen, "utf8"))).toEqual(input)
      const deny = PreCompactHooks.make({ command: ["sh", "-c", "echo 'release freeze' >&2; exit 2"], timeoutMs: 5_000 })
      expect(yield* deny.check(input)).toEqual({ allow: false, reason: "release freeze" })
      const broken = PreCompactHooks.make({ command: ["sh", "-c", "exit 1"], timeoutMs: 5_000 })
      expect(yield* broken.check(input)).toEqual({ allow: false, reason: "the PreCompact hook exited with code 1" })
    }))

  it.live("a missed deadline denies, and the hook's own children are stopped with it", () =>
    Effect.gen(function*() {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-hook-"))
      const pidFile = Path.join(dir, "child.pid")
      // The hook starts a long child, notes its pid, and waits for it.
      const slow = PreCompactHooks.make({ command: ["sh", "-c", `sleep 30 & echo $! > ${pidFile}; wait`], timeoutMs: 300 })
      expect(yield* slow.check(input)).toEqual({ allow: false, reason: "the PreCompact hook did not answer within 300 ms" })
      const pid = Number(Fs.readFileSync(pidFile, "utf8").trim())
      expect(pid).toBeGreaterThan(0)
      let waited = 0
      while (alive(pid) && waited < 2_000) {
        yield* Effect.sleep("20 millis")
        waited += 20
      }
      expect(alive(pid)).toBe(false)
    }))
})
