/**
 * How the CLI tests start `baton serve` as a process and wait for the URL it prints (`listening on http://...`).
 */
import { Data, Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { batonArgs } from "./CliEntry.js"

const repo = fileURLToPath(new URL("../../../../", import.meta.url))

/** A started `baton serve` process. */
export interface Served {
  readonly child: ChildProcess
  /** The URL from its `listening on URL` line, e.g. `http://127.0.0.1:PORT`. */
  readonly url: string
  /** Everything it has printed so far. */
  readonly output: () => { readonly stdout: string; readonly stderr: string }
  /** Its exit code once it has exited and closed its output (null when a signal ended it unhandled). */
  readonly exited: Promise<number | null>
}

/** The server did not print its "listening on" line in time, or exited first; `stderr` is what it printed. */
export class NotListening extends Data.TaggedError("NotListening")<{ readonly stderr: string }> {}

/**
 * Starts `baton serve ARGS` from the repository root and waits (at most `timeoutMillis`, default 60 000 ms) for its
 * "listening on" line. The child sees the test's environment without `BATON_DATA_DIR`, `BATON_DATABASE_URL`,
 * `BATON_TOKEN`, `BATON_CONFIG` and `BATON_PROVIDERS` (each set to ""), then `env` over that. Fails with
 * `NotListening` (the child killed) on the timeout or when the child exits first; interrupted while waiting, it kills
 * the child (SIGKILL). Once it succeeds, stopping the child is the caller's.
 */
export const serveBaton = (
  args: ReadonlyArray<string>,
  options: { readonly env?: Record<string, string>; readonly timeoutMillis?: number } = {}
) =>
  Effect.async<Served, NotListening>((resume) => {
    const child = spawn(process.execPath, batonArgs(["serve", ...args]), {
      cwd: repo,
      env: {
        ...process.env,
        BATON_DATA_DIR: "",
        BATON_DATABASE_URL: "",
        BATON_TOKEN: "",
        BATON_CONFIG: "",
        BATON_PROVIDERS: "",
        ...options.env
      },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    let settled = false
    const exited = new Promise<number | null>((done) => child.on("close", (code) => done(code)))
    const fail = () => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      child.kill("SIGKILL")
      resume(Effect.fail(new NotListening({ stderr })))
    }
    const timer = setTimeout(fail, options.timeoutMillis ?? 60_000)
    void exited.then(fail)
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => void (stderr += chunk))
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk
      const found = /listening on (http:\/\/\S+)/.exec(stdout)
      if (found !== null && !settled) {
        settled = true
        clearTimeout(timer)
        resume(Effect.succeed({ child, url: found[1]!, output: () => ({ stdout, stderr }), exited }))
      }
    })
    return Effect.sync(() => {
      clearTimeout(timer)
      child.kill("SIGKILL")
    })
  })

/**
 * The config entry (`providers[]` of a `--config` file) of an Anthropic Messages instance `name` at `baseUrl`: model
 * `claude-sonnet-4-5`, key in `TEST_MODEL_KEY`, a 200 000-token window, $3 / $15 per million input / output tokens,
 * no retries.
 */
export const anthropicInstance = (name: string, baseUrl: string) => ({
  kind: "anthropic-messages" as const,
  name,
  baseUrl,
  model: "claude-sonnet-4-5",
  apiKeyEnv: "TEST_MODEL_KEY",
  contextWindow: 200_000,
  autoCompactThreshold: 180_000,
  maxOutputTokens: 4_096,
  prices: { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 },
  maxRetries: 0
})

/**
 * A JSON request to a served API with `token` as its bearer token: `body` (when given) sent as JSON, the answer's
 * JSON body returned whatever its status.
 */
export const callWith = (token: string) => (url: string, method: "GET" | "POST", body?: unknown) =>
  Effect.promise(async () => {
    const response = await fetch(url, {
      method,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) })
    })
    return (await response.json()) as Record<string, unknown>
  })
