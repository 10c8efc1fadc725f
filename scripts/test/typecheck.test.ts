/**
 * `pnpm typecheck` (scripts/typecheck.mjs) fails CI on each kind of finding the two commands it replaced failed on:
 * a TypeScript error (`tsc -p`), an Effect language service error and an Effect warning (`effect-language-service
 * diagnostics --strict`); the plugin's suggestions are printed and pass. Each fixture is its own one-file program.
 */
import { describe, expect, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const repo = Path.resolve(Path.dirname(fileURLToPath(import.meta.url)), "..", "..")

const typecheck = (fixture: string) => {
  const result = spawnSync(process.execPath, ["scripts/typecheck.mjs", `scripts/test/fixtures/${fixture}.json`], {
    cwd: repo,
    encoding: "utf8"
  })
  return { status: result.status, stdout: result.stdout, stderr: result.stderr }
}

describe("scripts/typecheck.mjs", () => {
  it("fails on a TypeScript error", () => {
    const result = typecheck("TypeError")
    expect(result.stdout).toContain("scripts/test/fixtures/TypeError.ts(2,14): error TS2322")
    expect(result.stdout).toContain("1 TypeScript diagnostics; Effect: 0 errors, 0 warnings, 0 messages")
    expect(result.status).toBe(1)
  })

  it("fails on an Effect error", () => {
    const result = typecheck("EffectError")
    expect(result.stdout).toContain("scripts/test/fixtures/EffectError.ts(5,3): error")
    expect(result.stdout).toContain("effect(floatingEffect)")
    expect(result.stdout).toContain("0 TypeScript diagnostics; Effect: 1 errors, 0 warnings, 0 messages")
    expect(result.status).toBe(1)
  })

  it("fails on an Effect warning (the configured severity)", () => {
    const result = typecheck("EffectWarning")
    expect(result.stdout).toContain("scripts/test/fixtures/EffectWarning.ts(4,50): warning")
    expect(result.stdout).toContain("effect(catchUnfailableEffect)")
    expect(result.stdout).toContain("0 TypeScript diagnostics; Effect: 0 errors, 1 warnings, 0 messages")
    expect(result.status).toBe(1)
  })

  it("prints an Effect suggestion as a message and passes", () => {
    const result = typecheck("Clean")
    expect(result.stdout).toContain("scripts/test/fixtures/Clean.ts(4,21): message")
    expect(result.stdout).toContain("effect(effectSucceedWithVoid)")
    expect(result.stdout).toContain("0 TypeScript diagnostics; Effect: 0 errors, 0 warnings, 1 messages")
    expect({ status: result.status, stderr: result.stderr }).toEqual({ status: 0, stderr: "" })
  })
})
