/**
 * The real Codex CLI (`@openai/codex`, pinned; its platform binary) run headless for the gateway's tests: `codex exec
 * --json` (and `codex exec resume <thread> …` for a later turn of the same conversation) in a working directory, its
 * `CODEX_HOME` given (a `config.toml` whose model provider points at a loopback base URL: `CodexLoopback.codexHome`),
 * the home directory that CODEX_HOME, so nothing of the machine's own Codex setup is read or written. Commands run
 * without Codex's sandbox (`danger-full-access`: this machine runs as root, where the Linux sandbox is unavailable).
 */
import { Data, Effect } from "effect"
import * as ChildProcess from "node:child_process"
import { binary } from "../../../../packages/providers/test/support/CodexLoopback.js"

/** `codex exec` printed no completed turn (the reason says what it printed instead). */
export class CodexExecFailed extends Data.TaggedError("CodexExecFailed")<{ readonly reason: string }> {}

/** What one `codex exec --json` printed: its thread, its agent messages, its commands (with output and exit code). */
export interface ExecResult {
  readonly threadId: string
  readonly messages: ReadonlyArray<string>
  readonly commands: ReadonlyArray<{ readonly command: string; readonly output: string; readonly exitCode: number | null }>
  readonly usage: { readonly input_tokens: number; readonly output_tokens: number }
  /** Everything it printed (stdout, then stderr): for a failed test's report. */
  readonly output: string
}

interface Event {
  readonly type: string
  readonly thread_id?: string
  readonly item?: { readonly type: string; readonly text?: string; readonly command?: string; readonly aggregated_output?: string; readonly exit_code?: number | null }
  readonly usage?: ExecResult["usage"]
  readonly error?: { readonly message: string }
}

/**
 * One `codex exec` turn: `prompt` in `cwd` with `codexHome`, `env` added (the provider's key variable), resuming
 * `resume` (a thread id) when given, `config` overrides passed as `-c`. Fails with `CodexExecFailed` when the turn did not complete.
 */
export const exec = (options: {
  readonly codexHome: string
  readonly cwd: string
  readonly prompt: string
  readonly env: Readonly<Record<string, string>>
  readonly resume?: string
  /** Config overrides (`-c key=value`). */
  readonly config?: ReadonlyArray<string>
}) =>
  Effect.async<ExecResult, CodexExecFailed>((resume) => {
    const args = [
      "exec",
      "--json",
      "--skip-git-repo-check",
      "-s",
      "danger-full-access",
      ...(options.config ?? []).flatMap((c) => ["-c", c]),
      ...(options.resume === undefined ? [options.prompt] : ["resume", options.resume, options.prompt])
    ]
    const child = ChildProcess.execFile(binary(), args, {
      cwd: options.cwd,
      env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", HOME: options.codexHome, CODEX_HOME: options.codexHome, ...options.env },
      timeout: 120_000,
      maxBuffer: 16 * 1024 * 1024
    }, (error, stdout, stderr) => {
      const events = stdout.split("\n").flatMap((line): ReadonlyArray<Event> => {
        try {
          return line.trim() === "" ? [] : [JSON.parse(line) as Event]
        } catch (_notJson) {
          return []
        }
      })
      const completed = events.find((e) => e.type === "turn.completed")
      const threadId = events.find((e) => e.type === "thread.started")?.thread_id
      if (completed === undefined || threadId === undefined) {
        return resume(Effect.fail(new CodexExecFailed({ reason: `no completed turn (${error?.message ?? "exit 0"}): ${stdout.slice(-2_000)} ${stderr.slice(-2_000)}` })))
      }
      const items = events.flatMap((e) => (e.type === "item.completed" && e.item !== undefined ? [e.item] : []))
      resume(Effect.succeed({
        threadId,
        messages: items.flatMap((i) => (i.type === "agent_message" && i.text !== undefined ? [i.text] : [])),
        commands: items.flatMap((i) => (i.type === "command_execution" ? [{ command: i.command ?? "", output: i.aggregated_output ?? "", exitCode: i.exit_code ?? null }] : [])),
        usage: completed.usage ?? { input_tokens: 0, output_tokens: 0 },
        output: `${stdout}\n--- stderr ---\n${stderr}`
      }))
    })
    // Codex reads more of the prompt from a stdin that is not a terminal: it gets none.
    child.stdin?.end()
    return Effect.sync(() => child.kill("SIGKILL"))
  })
