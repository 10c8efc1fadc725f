/**
 * `baton serve --config FILE` as a real process with a model-API instance (Anthropic Messages) pointed at a loopback
 * model API: a thread driven by `baton --server` runs on the model, and `baton thread show` prints what each run cost
 * with the thread's totals, the same over HTTP and in process (on the server's SQLite file after it stopped). The key
 * (a marker in the environment) reaches the upstream's auth header and nowhere else: not the server's output, not
 * the CLI's, not a failed run's reason. `/offload` operations from the CLI with a loopback summariser (`offload.summariser`):
 * read one running and settled (`--get`), cancel one while its summary is held (`--cancel`), undo the newest summary
 * (`--undo-summary`), each as the server's message or one JSON document (`--json`); options that exclude each other
 * are refused in one line.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as ModelApi from "../../server/test/support/ModelApi.js"
import { held } from "../../server/test/support/Offload.js"
import { runBaton } from "./support/CliEntry.js"
import { anthropicInstance, serveBaton } from "./support/Served.js"

const adminToken = "admin-token-0123456789abcdef"
const marker = "sk-MARKER-5b1e0d9f44c2a871"

/** Runs `baton ARGS` as a process, without `BATON_CONFIG` or the key in `TEST_MODEL_KEY`. */
const baton = (args: ReadonlyArray<string>) => Effect.promise(() => runBaton(args, { BATON_CONFIG: "", TEST_MODEL_KEY: "" }))

/** About `tokens` tokens of distinct short words. */
const words = (tokens: number) => Array.from({ length: tokens }, (_, i) => ["alpha", "beta", "gamma", "delta", "river", "stone"][i % 6]).join(" ")

/** Starts `baton serve --port 0 --config FILE --data-dir DIR` with the key in `TEST_MODEL_KEY`; waits for its URL. */
const serve = (config: string, dataDir: string) =>
  serveBaton(["--port", "0", "--config", config, "--data-dir", dataDir], { env: { TEST_MODEL_KEY: marker } })

describe("baton serve with a model-API instance", () => {
  it.scoped("runs on the model; thread show prints each run's cost and the totals, over HTTP and in process; the key never shows", () =>
    Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-model-serve-"))
      const config = Path.join(dir, "baton.json")
      Fs.writeFileSync(config, JSON.stringify({
        providers: [anthropicInstance("claude", upstream.url)],
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

  it.live("offload --get, --cancel and --undo-summary: the server's message, or one JSON document with --json; bad combinations refused", () =>
    Effect.scoped(Effect.gen(function*() {
      const chat = yield* ModelApi.start
      const summariser = yield* ModelApi.start
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-offload-cli-"))
      const config = Path.join(dir, "baton.json")
      Fs.writeFileSync(config, JSON.stringify({
        providers: [anthropicInstance("claude", chat.url), anthropicInstance("sum", summariser.url)],
        offload: { summariser: "sum" },
        auth: { token: adminToken }
      }))
      const server = yield* Effect.acquireRelease(serve(config, dir), (s) => Effect.sync(() => void s.child.kill("SIGKILL")))
      const admin = ["--server", server.url, "--token", adminToken]
      const threadId = (yield* baton([...admin, "thread", "create", "--provider", "claude"])).stdout.trim()
      for (let i = 0; i < 4; i++) {
        chat.enqueue(ModelApi.answer("anthropic-messages", `done step ${i}`, { input: 100, cacheWrite: 0, cacheRead: 0, output: 20 }))
        expect((yield* baton([...admin, "send", threadId, `Step ${i}: ${words(450)}`])).code).toBe(0)
      }
      const offload = (...args: ReadonlyArray<string>) => baton([...admin, "offload", threadId, ...args])
      const summary = "## Goal\n- the steps\n## Standing instructions\n- none"
      const sumUsage = { input: 1_000, cacheWrite: 0, cacheRead: 0, output: 200 }

      // An offload whose summariser holds its answer: --get reads it running, --cancel cancels it.
      const { reply, release } = held(ModelApi.answer("anthropic-messages", summary, sumUsage))
      summariser.enqueue(reply)
      const started = yield* Effect.fork(offload("--keep-tokens", "700", "--operation-id", "op-cli", "--json"))
      while (summariser.requests.length === 0) yield* Effect.sleep("10 millis")
      const running = yield* offload("--get", "op-cli")
      expect(running).toMatchObject({ code: 0, stderr: "" })
      expect(running.stdout).toBe(
        "The offload is still running; the conversation is unchanged until it commits.\nrunning: the summary is being written or committed; operation op-cli\n"
      )
      const runningJson = yield* offload("--get", "op-cli", "--json")
      expect(JSON.parse(runningJson.stdout)).toMatchObject({ operationId: "op-cli", outcome: "running", offloaded: false })
      const cancelled = yield* offload("--cancel", "op-cli", "--json")
      expect(cancelled).toMatchObject({ code: 0, stderr: "" })
      // Exactly one JSON document on stdout.
      expect(cancelled.stdout.trim().split("\n")).toHaveLength(1)
      const cancelledReport = JSON.parse(cancelled.stdout) as { readonly outcome: string; readonly message: string }
      expect(cancelledReport).toMatchObject({ operationId: "op-cli", outcome: "cancelled", offloaded: false, summaryItemId: null })
      expect(cancelledReport.message).toBe("The offload was cancelled before it was applied. The conversation is unchanged.")
      // The command that started it prints the same outcome.
      const first = yield* Fiber.join(started)
      expect(first.code).toBe(0)
      expect(JSON.parse(first.stdout)).toEqual(cancelledReport)
      release()
      const settled = yield* offload("--get", "op-cli")
      expect(settled.stdout.split("\n").slice(0, 2)).toEqual([
        "The offload was cancelled before it was applied. The conversation is unchanged.",
        "cancelled: cancelled by a client before the summary was applied; operation op-cli"
      ])
      // Cancelling again answers the settled outcome.
      expect(JSON.parse((yield* offload("--cancel", "op-cli", "--json")).stdout)).toEqual(cancelledReport)

      // An offload that commits; --undo-summary undoes it, then has nothing left to undo.
      summariser.enqueue(ModelApi.answer("anthropic-messages", summary, sumUsage))
      const committed = yield* offload("--keep-tokens", "700", "--operation-id", "op-cli-2")
      expect(committed.stdout).toMatch(/^Offloaded \d+ older messages, freeing up context window space\./)
      const undone = yield* offload("--undo-summary")
      expect(undone).toMatchObject({ code: 0, stderr: "" })
      const [message, detail] = undone.stdout.trimEnd().split("\n")
      expect(message).toMatch(/^Undid the newest offload: \d+ messages are visible again instead of its summary\. Conversation: ~\S+ -> ~\S+ tokens\. The summary stays in the log\.$/)
      expect(detail).toMatch(/^undid offload off_\S+ \(summary itm_\S+\): \d+ items restored; [\d,]+ -> [\d,]+ tok$/)
      const again = yield* offload("--undo-summary", "--json")
      expect(again.code).toBe(0)
      expect(JSON.parse(again.stdout)).toMatchObject({
        undone: false,
        reason: "the thread has no offload to undo",
        message: "Nothing was undone: the thread has no offload to undo. The conversation is unchanged."
      })

      // Bad combinations and an unknown operation: one line on stderr, exit 2, nothing on stdout.
      const refusals: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
        [["--get", "op-cli", "--cancel", "op-cli"], "baton: --get, --cancel exclude each other: give at most one"],
        [["--undo", "--undo-summary"], "baton: --undo, --undo-summary exclude each other: give at most one"],
        [["--preview", "--dry-run"], "baton: --preview, --dry-run exclude each other: give at most one"],
        [["--undo-summary", "--keep-tokens", "100"], "baton: --keep-tokens applies to /offload itself and --preview, not to --undo-summary"],
        [["--dry-run", "--keep-tokens", "100"], "baton: --keep-tokens applies to /offload itself and --preview, not to --dry-run (tool-result offload)"],
        [["--cancel", "op-cli", "--operation-id", "op-cli"], "baton: --operation-id names the operation /offload starts; --cancel takes the operation's id as its value (--cancel OP)"],
        [["--undo-summary", "--operation-id", "x"], "baton: --operation-id applies to /offload itself and --preview, not to --undo-summary"]
      ]
      for (const [args, line] of refusals) {
        const refused = yield* offload(...args)
        expect([refused.code, refused.stdout, refused.stderr.trim()], args.join(" ")).toEqual([2, "", line])
      }
      const unknown = yield* offload("--get", "op-nope")
      expect([unknown.code, unknown.stdout]).toEqual([2, ""])
      expect(unknown.stderr).toContain("op-nope")
      expect(summariser.requests).toHaveLength(2)
    })), 180_000)

  // Found by the issue-9 review: `send` printed the run.retry_scheduled event as raw JSON.
  it.scoped("send prints a retried request as a line for people: retrying in N s (attempt 2, HTTP 529 overloaded: the provider's reason)", () =>
    Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-model-retry-"))
      const config = Path.join(dir, "baton.json")
      Fs.writeFileSync(config, JSON.stringify({
        providers: [{ ...anthropicInstance("claude", upstream.url), maxRetries: 2 }],
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
