/**
 * The real Claude Code CLI (npm `@anthropic-ai/claude-code`, pinned in apps/server's devDependencies) for the
 * gateway's tests: its native binary from the platform package npm installs beside it (the package's postinstall,
 * which would copy it over the `claude` placeholder, is not run by pnpm), run headless (`-p`) against a loopback base
 * URL with a home directory of its own, so nothing of the machine's own Claude Code setup is read or written.
 */
import { Data, Effect } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import { createRequire } from "node:module"
import * as Os from "node:os"
import * as Path from "node:path"

const require = createRequire(import.meta.url)

/** The path of the native `claude` binary for this platform (linux-x64 here). */
export const binary = (): string => {
  const wrapper = Path.dirname(require.resolve("@anthropic-ai/claude-code/package.json"))
  const platform = `@anthropic-ai/claude-code-${process.platform}-${process.arch}`
  const dir = Path.dirname(require.resolve(`${platform}/package.json`, { paths: [wrapper] }))
  return Path.join(dir, process.platform === "win32" ? "claude.exe" : "claude")
}

/** `claude` printed no JSON result (the reason says what it printed instead). */
export class ClaudeCodeFailed extends Data.TaggedError("ClaudeCodeFailed")<{ readonly reason: string }> {}

/** What `claude -p --output-format json` prints at the end (the fields the tests read). */
export interface Result {
  readonly is_error: boolean
  readonly result: string
  readonly num_turns: number
  readonly session_id: string
  readonly subtype: string
  readonly usage: { readonly input_tokens: number; readonly output_tokens: number }
}

/**
 * One headless session: `prompt` in `cwd` against `baseUrl` with `apiKey`, the Bash, Write and Read tools allowed,
 * `home` its home directory (default a new temporary one), killed after `timeoutMs`, `args` added to the command line.
 */
export const run = (options: {
  readonly baseUrl: string
  readonly apiKey: string
  readonly cwd: string
  readonly prompt: string
  readonly home?: string
  /** Milliseconds before the process is killed (default 120,000). */
  readonly timeoutMs?: number
  /** More arguments (e.g. `--resume <session id>`, `--model <name>`). */
  readonly args?: ReadonlyArray<string>
}) =>
  Effect.async<Result, ClaudeCodeFailed>((resume) => {
    const home = options.home ?? Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-claude-home-"))
    const child = ChildProcess.execFile(binary(), [
      "-p",
      options.prompt,
      "--output-format",
      "json",
      // As root (this machine), --dangerously-skip-permissions is refused: the tools the script uses are allowed instead.
      "--allowedTools",
      "Bash,Write,Read",
      ...(options.args ?? [])
    ], {
      cwd: options.cwd,
      env: {
        PATH: process.env["PATH"] ?? "/usr/bin:/bin",
        HOME: home,
        ANTHROPIC_BASE_URL: options.baseUrl,
        ANTHROPIC_API_KEY: options.apiKey,
        DISABLE_AUTOUPDATER: "1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1"
      },
      timeout: options.timeoutMs ?? 120_000,
      maxBuffer: 16 * 1024 * 1024
    }, (error, stdout, stderr) => {
      const text = stdout.trim()
      if (text === "") return resume(Effect.fail(new ClaudeCodeFailed({ reason: `claude printed nothing (${error?.message ?? "no error"}): ${stderr.slice(0, 2_000)}` })))
      try {
        resume(Effect.succeed(JSON.parse(text.split("\n").at(-1)!) as Result))
      } catch (_notJson) {
        resume(Effect.fail(new ClaudeCodeFailed({ reason: `claude printed no JSON result: ${text.slice(0, 2_000)} ${stderr.slice(0, 2_000)}` })))
      }
    })
    return Effect.sync(() => child.kill("SIGKILL"))
  })
