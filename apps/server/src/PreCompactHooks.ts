/**
 * PreCompactHooks: the server's `PreCompactHook` from its config (`offload.preCompactHook`, issue 12 item 6): an
 * HTTP endpoint (`url`: POSTed the JSON `{threadId, trigger, approvalMode}`, answers `{"decision": "allow"}` or
 * `{"decision": "deny", "reason": "..."}`) or an executable (`command`: argv, given the same JSON on stdin; exit 0
 * allows, exit 2 denies with its stderr as the reason, as Claude Code's hooks do). `timeoutMs` is the deadline.
 * A hook fails closed: an error, another answer or a missed deadline is a denial that says so.
 */
import { PreCompactHook } from "@baton/orchestration"
import { Data, Duration, Effect, Layer } from "effect"
import * as ChildProcess from "node:child_process"

/** The config of a hook: exactly one of `url` and `command`, and the deadline in milliseconds. */
export interface HookConfig {
  readonly url?: string | undefined
  readonly command?: ReadonlyArray<string> | undefined
  readonly timeoutMs: number
}

type Decision = PreCompactHook.PreCompactDecision

/** The HTTP hook could not be asked (connection refused, a body that is not JSON, ...). */
class HookUnreachable extends Data.TaggedError("HookUnreachable")<{ readonly detail: string }> {}

const deny = (reason: string): Decision => ({ allow: false, reason })

/** The decision of an HTTP hook's JSON answer. */
const decide = (body: unknown): Decision => {
  const b = body as { readonly decision?: unknown; readonly reason?: unknown } | null
  if (b?.decision === "allow") return { allow: true }
  if (b?.decision === "deny") return deny(typeof b.reason === "string" && b.reason.trim() !== "" ? b.reason.trim() : "no reason given")
  return deny("the PreCompact hook answered neither allow nor deny")
}

const viaHttp = (url: string, input: PreCompactHook.PreCompactInput) =>
  Effect.tryPromise({
    try: async (signal) => {
      const response = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(input), signal })
      if (!response.ok) return deny(`the PreCompact hook answered HTTP ${response.status}`)
      return decide(await response.json())
    },
    catch: (e) => new HookUnreachable({ detail: String(e) })
  }).pipe(Effect.catchAll((e) => Effect.succeed(deny(`the PreCompact hook could not be reached (${e.detail})`))))

const viaCommand = (argv: ReadonlyArray<string>, input: PreCompactHook.PreCompactInput) =>
  Effect.async<Decision>((resume) => {
    // Its own process group, so that a missed deadline stops the hook and every process it started (review finding:
    // a hook's `sleep` outlived it).
    const child = ChildProcess.spawn(argv[0]!, argv.slice(1), { stdio: ["pipe", "ignore", "pipe"], detached: true })
    const stderr: Array<Buffer> = []
    child.stderr.on("data", (c: Buffer) => stderr.push(c))
    child.on("error", (e) => resume(Effect.succeed(deny(`the PreCompact hook could not be run (${e.message})`))))
    child.on("close", (code) => {
      const text = Buffer.concat(stderr).toString("utf8").trim()
      resume(Effect.succeed(
        code === 0 ? { allow: true } : code === 2 ? deny(text === "" ? "no reason given" : text) : deny(`the PreCompact hook exited with code ${code}`)
      ))
    })
    child.stdin.on("error", () => undefined)
    child.stdin.end(JSON.stringify(input))
    return Effect.sync(() => {
      try {
        if (child.pid !== undefined && child.exitCode === null) process.kill(-child.pid, "SIGKILL")
      } catch (_gone) {
        child.kill("SIGKILL")
      }
    })
  })

/** The hook of `config`. */
export const make = (config: HookConfig): PreCompactHook.PreCompactHookShape => ({
  check: (input) =>
    (config.url !== undefined ? viaHttp(config.url, input) : viaCommand(config.command ?? [], input)).pipe(
      Effect.timeoutTo({
        duration: Duration.millis(config.timeoutMs),
        onSuccess: (d) => d,
        onTimeout: () => deny(`the PreCompact hook did not answer within ${config.timeoutMs} ms`)
      })
    )
})

/** `make` as the layer of `PreCompactHook`, or no layer (the default allows) without a config. */
export const layer = (config: HookConfig | null) =>
  config === null ? Layer.empty : Layer.succeed(PreCompactHook.PreCompactHook, make(config))
