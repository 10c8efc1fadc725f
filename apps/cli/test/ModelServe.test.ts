/**
 * `baton serve --config FILE` as a real process with a model-API instance (Anthropic Messages) pointed at a loopback
 * model API: a thread driven by `baton --server` runs on the model, and `baton thread show` prints what each run cost
 * with the thread's totals, the same over HTTP and in process (on the server's SQLite file after it stopped). The key
 * (a marker in the environment) reaches the upstream's auth header and nowhere else: not the server's output, not
 * the CLI's, not a failed run's reason.
 */
import { describe, expect, it } from "@effect/vitest"
import { Data, Effect } from "effect"
import { type ChildProcess, execFile, spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import * as ModelApi from "../../server/test/support/ModelApi.js"
import { batonArgs } from "./support/CliEntry.js"

const repo = fileURLToPath(new URL("../../../", import.meta.url))
const adminToken = "admin-token-0123456789abcdef"
const marker = "sk-MARKER-5b1e0d9f44c2a871"

interface Result {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** Runs `baton ARGS` as a process. */
const baton = (args: ReadonlyArray<string>) =>
  Effect.promise(() =>
    new Promise<Result>((resolve) => {
      execFile(
        process.execPath,
        batonArgs(args),
        { cwd: repo, env: { ...process.env, BATON_SERVER: "", BATON_TOKEN: "", BATON_DATA_DIR: "", BATON_CONFIG: "", TEST_MODEL_KEY: "" } },
        (error, stdout, stderr) => resolve({ code: error === null ? 0 : (error.code as number), stdout, stderr })
      )
    })
  )

interface Served {
  readonly child: ChildProcess
  readonly url: string
  readonly output: () => { readonly stdout: string; readonly stderr: string }
  readonly exited: Promise<number | null>
}

class NotListening extends Data.TaggedError("NotListening")<{ readonly stderr: string }> {}

/** Starts `baton serve --port 0 --config FILE --data-dir DIR` with the key in `TEST_MODEL_KEY`; waits for its URL. */
const serve = (config: string, dataDir: string) =>
  Effect.async<Served, NotListening>((resume) => {
    const child = spawn(process.execPath, batonArgs(["serve", "--port", "0", "--config", config, "--data-dir", dataDir]), {
      cwd: repo,
      env: { ...process.env, BATON_DATA_DIR: "", BATON_DATABASE_URL: "", BATON_TOKEN: "", BATON_CONFIG: "", BATON_PROVIDERS: "", TEST_MODEL_KEY: marker },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    const exited = new Promise<number | null>((done) => child.on("close", (code) => done(code)))
    const timer = setTimeout(() => resume(Effect.fail(new NotListening({ stderr }))), 60_000)
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => void (stderr += chunk))
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk
      const found = /listening on (http:\/\/\S+)/.exec(stdout)
      if (found !== null) {
        clearTimeout(timer)
        resume(Effect.succeed({ child, url: found[1]!, output: () => ({ stdout, stderr }), exited }))
      }
    })
    return Effect.sync(() => void child.kill("SIGKILL"))
  })

describe("baton serve with a model-API instance", () => {
  it.scoped("runs on the model; thread show prints each run's cost and the totals, over HTTP and in process; the key never shows", () =>
    Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-model-serve-"))
      const config = Path.join(dir, "baton.json")
      Fs.writeFileSync(config, JSON.stringify({
        providers: [{
          kind: "anthropic-messages",
          name: "claude",
          baseUrl: upstream.url,
          model: "claude-sonnet-4-5",
          apiKeyEnv: "TEST_MODEL_KEY",
          contextWindow: 200_000,
          autoCompactThreshold: 180_000,
          maxOutputTokens: 4_096,
          prices: { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 },
          maxRetries: 0
        }],
        auth: { token: adminToken }
      }))
      const server = yield* Effect.acquireRelease(serve(config, dir), (s) => Effect.sync(() => void s.child.kill("SIGKILL")))
      const admin = ["--server", server.url, "--token", adminToken]

      const created = yield* baton([...admin, "thread", "create", "--provider", "claude", "--title", "priced"])
      expect(created).toMatchObject({ code: 0, stderr: "" })
      const threadId = created.stdout.trim()
      upstream.enqueue(
        ModelApi.answer("anthropic-messages", "first answer", { input: 1_200, cacheWrite: 300, cacheRead: 5_000, output: 250 }),
        ModelApi.answer("anthropic-messages", "second answer", { input: 100, cacheWrite: 0, cacheRead: 6_000, output: 50 }),
        ModelApi.error(401, "invalid x-api-key")
      )
      const outputs: Array<string> = []
      for (const [text, status] of [["one", "completed"], ["two", "completed"], ["three", "failed"]] as const) {
        const sent = yield* baton([...admin, "send", threadId, text])
        outputs.push(sent.stdout, sent.stderr)
        expect(sent.stdout).toContain(`run ${text === "one" ? 1 : text === "two" ? 2 : 3} ${status}`)
      }
      expect(outputs.join("")).toContain("first answer")
      expect(upstream.requests[0]!.headers["x-api-key"]).toBe(marker)

      const costLines = [
        "  cost: 2 runs, input 1,300, cache write 300, cache read 11,000, output 300 tok, $0.012825",
        "    run 1 claude: input 1,200, cache write 300, cache read 5,000, output 250 tok, $0.009975",
        "    run 2 claude: input 100, cache write 0, cache read 6,000, output 50 tok, $0.002850"
      ]
      const remote = yield* baton([...admin, "thread", "show", threadId])
      expect(remote).toMatchObject({ code: 0, stderr: "" })
      expect(remote.stdout.trimEnd().split("\n").slice(-3)).toEqual(costLines)
      expect(remote.stdout).toContain("runs: 2 completed, 1 failed")

      // The thread's tool-result offload control from the CLI: shown, then changed (on the server, for good).
      const shown = yield* baton([...admin, "offload-control", threadId])
      expect(shown).toMatchObject({ code: 0, stderr: "" })
      expect(shown.stdout.trim()).toBe(`tool-result offload of ${threadId} on claude: on; keepNewestUnits 3, aggressiveRatio 0.85, ` +
        "aggressiveTargetRatio 0.6, emergencyRatio 0.95, minExpectedRequests 10; nothing pinned")
      const items = yield* baton([...admin, "offload-control", threadId, "--keep-newest", "1", "--off", "--json"])
      expect(items.code).toBe(0)
      expect(JSON.parse(items.stdout)).toMatchObject({ control: { enabled: false, keepNewestUnits: 1 }, effective: { enabled: false } })
      const badPin = yield* baton([...admin, "offload-control", threadId, "--pin", "itm_nope"])
      expect(badPin.code).not.toBe(0)
      expect(badPin.stderr).toContain(`pinnedItemIds: itm_nope is not an item of thread ${threadId}`)
      // Out of range: said by the CLI, not mistaken for a server fault (found by a review).
      const outOfRange = yield* baton([...admin, "offload-control", threadId, "--keep-newest", "-1"])
      expect([outOfRange.code !== 0, outOfRange.stderr.trim()]).toEqual([true, "baton: --keep-newest must be a whole number from 0 to 1000 (got -1)"])
      const reset = yield* baton([...admin, "offload-control", threadId, "--reset"])
      expect(reset.stdout).toContain(": on; keepNewestUnits 3,")

      server.child.kill("SIGTERM")
      expect(yield* Effect.promise(() => server.exited)).toBe(143)
      const local = yield* baton(["thread", "show", threadId, "--db", Path.join(dir, "baton.sqlite")])
      expect(local).toMatchObject({ code: 0, stderr: "" })
      expect(local.stdout.trimEnd().split("\n").slice(-3)).toEqual(costLines)

      const { stdout, stderr } = server.output()
      expect(stderr).toContain("key from TEST_MODEL_KEY")
      for (const text of [stdout, stderr, ...outputs, remote.stdout, local.stdout, ...upstream.requests.map((r) => r.body)]) {
        expect(text).not.toContain(marker)
      }
    }), 180_000)

  // Found by the issue-9 review: `send` printed the run.retry_scheduled event as raw JSON.
  it.scoped("send prints a retried request as a line for people: retrying in N s (attempt 2, HTTP 529 overloaded: the provider's reason)", () =>
    Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-model-retry-"))
      const config = Path.join(dir, "baton.json")
      Fs.writeFileSync(config, JSON.stringify({
        providers: [{
          kind: "anthropic-messages",
          name: "claude",
          baseUrl: upstream.url,
          model: "claude-sonnet-4-5",
          apiKeyEnv: "TEST_MODEL_KEY",
          contextWindow: 200_000,
          autoCompactThreshold: 180_000,
          maxOutputTokens: 4_096,
          prices: { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 },
          maxRetries: 2
        }],
        auth: { token: adminToken }
      }))
      const server = yield* Effect.acquireRelease(serve(config, dir), (s) => Effect.sync(() => void s.child.kill("SIGKILL")))
      const admin = ["--server", server.url, "--token", adminToken]
      const created = yield* baton([...admin, "thread", "create", "--provider", "claude"])
      const threadId = created.stdout.trim()
      upstream.enqueue(
        ModelApi.error(529, "Overloaded"),
        ModelApi.answer("anthropic-messages", "answered after the retry", { input: 10, cacheWrite: 0, cacheRead: 0, output: 5 })
      )
      const sent = yield* baton([...admin, "send", threadId, "hello"])
      expect(sent).toMatchObject({ code: 0, stderr: "" })
      const lines = sent.stdout.trimEnd().split("\n")
      const retry = lines.filter((l) => l.includes("run.retry_scheduled"))
      expect(retry).toHaveLength(1)
      // The backoff is 500 ms jittered by ±20% (no retry-after in the answer): 0.4 to 0.6 s.
      expect(retry[0]).toMatch(/ run\.retry_scheduled +run_\S+ retrying in 0\.[456] s \(attempt 2, HTTP 529 overloaded: HTTP 529: .*Overloaded\)$/)
      expect(retry[0]).not.toContain("{")
      expect(sent.stdout).toContain("answered after the retry")
    }), 180_000)
})
