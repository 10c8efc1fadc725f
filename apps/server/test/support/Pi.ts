/**
 * The real pi coding agent (npm `@mariozechner/pi-coding-agent`, pinned in apps/server's devDependencies) for the
 * gateway's Chat Completions tests: run headless (`-p --mode json`, offline) against a loopback OpenAI-compatible
 * base URL, declared as a custom provider (`api: "openai-completions"`) in a config directory of its own
 * (`PI_CODING_AGENT_DIR`), so nothing of the machine's own pi setup is read or written.
 */
import { Data, Effect } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

/**
 * The path of pi's CLI script (run with this process's Node): the package's `bin`, `dist/cli.js`, in apps/server's
 * `node_modules` (the package's `exports` are import-only and do not list `package.json`, so it is not resolved).
 */
export const script = (): string =>
  Path.join(fileURLToPath(new URL("../../node_modules/@mariozechner/pi-coding-agent/", import.meta.url)), "dist", "cli.js")

/** pi exited without an `agent_end` event (the reason says what it printed instead). */
export class PiFailed extends Data.TaggedError("PiFailed")<{ readonly reason: string }> {
  override get message() {
    return `pi failed: ${this.reason}`
  }
}

/** One message of pi's session as its `agent_end` event lists it (the fields the tests read). */
export interface Message {
  readonly role: "user" | "assistant" | "toolResult"
  readonly content: ReadonlyArray<{ readonly type: string; readonly text?: string; readonly id?: string; readonly name?: string; readonly arguments?: unknown }>
  readonly toolCallId?: string
  readonly stopReason?: string
}

/** What a headless run printed: its `agent_end` messages, every JSON event, the last assistant text. */
export interface Result {
  readonly messages: ReadonlyArray<Message>
  readonly events: ReadonlyArray<{ readonly type: string }>
  readonly lastText: string
}

/**
 * One headless session: `prompt` in `cwd` against the OpenAI-compatible `baseUrl` (ending in `/v1`) with `apiKey` as
 * its key (sent as `Authorization: Bearer`), model `model` (window 128,000, 4,096 output tokens), pi's own tools.
 */
export const run = (options: {
  readonly baseUrl: string
  readonly apiKey: string
  readonly model: string
  readonly cwd: string
  readonly prompt: string
}) =>
  Effect.async<Result, PiFailed>((resume) => {
    const home = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-pi-home-"))
    Fs.writeFileSync(Path.join(home, "models.json"), JSON.stringify({
      providers: {
        baton: {
          baseUrl: options.baseUrl,
          api: "openai-completions",
          apiKey: options.apiKey,
          compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
          models: [{ id: options.model, contextWindow: 128_000, maxTokens: 4_096 }]
        }
      }
    }))
    const child = ChildProcess.execFile(process.execPath, [
      script(),
      "-p",
      "--provider",
      "baton",
      "--model",
      options.model,
      "--mode",
      "json",
      "--no-session",
      "--no-extensions",
      "--no-skills",
      "--no-context-files",
      options.prompt
    ], {
      cwd: options.cwd,
      env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", HOME: home, PI_CODING_AGENT_DIR: home, PI_OFFLINE: "1", PI_TELEMETRY: "0" },
      maxBuffer: 64 * 1024 * 1024,
      timeout: 120_000
    }, (error, stdout, stderr) => {
      Fs.rmSync(home, { recursive: true, force: true })
      const events = stdout.split("\n").flatMap((line) => {
        try {
          return line.trim() === "" ? [] : [JSON.parse(line) as { type: string; messages?: ReadonlyArray<Message> }]
        } catch {
          return []
        }
      })
      const end = [...events].reverse().find((e) => e.type === "agent_end")
      if (end?.messages === undefined) {
        return resume(Effect.fail(new PiFailed({ reason: `${error?.message ?? "no agent_end"}: ${stderr.slice(0, 2_000)} ${stdout.slice(-2_000)}` })))
      }
      const lastText = end.messages.filter((m) => m.role === "assistant").flatMap((m) => m.content.filter((c) => c.type === "text").map((c) => c.text ?? "")).at(-1) ?? ""
      resume(Effect.succeed({ messages: end.messages, events, lastText }))
    })
    // pi -p reads piped standard input into the prompt until its end: there is none.
    child.stdin?.end()
    return Effect.sync(() => void child.kill("SIGKILL"))
  })
