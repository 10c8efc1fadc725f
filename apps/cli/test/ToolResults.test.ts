/**
 * `baton --server URL tool-results` as a user runs it: a real `baton` process against the real API on loopback (a
 * harness orchestrator with a scripted provider that calls the client's tool). `thread create --tools` declares the
 * tool, `send` stops at the run's wait and prints the open call, `tool-results` posts the result (inline JSON or a
 * file) and prints the reply; a result for an unknown call is the server's one-line 400, exit 2.
 */
import { RunDriver } from "@baton/orchestration"
import { Server } from "@baton/server"
import { Harness } from "@baton/testing"
import { HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import * as Fs from "node:fs"
import * as Http from "node:http"
import * as Os from "node:os"
import * as Path from "node:path"
import { runBaton } from "./support/CliEntry.js"

const adminToken = "admin-token-0123456789abcdef"

const baton = (args: ReadonlyArray<string>) => Effect.promise(() => runBaton(args))

const serve = (h: Harness.Harness) =>
  Server.httpLayer({ tokens: { admin: Redacted.make(adminToken), read: null }, maxBodyBytes: 2 * 1024 * 1024 }).pipe(
    Layer.provideMerge(NodeHttpServer.layer(() => Http.createServer(), { host: "127.0.0.1", port: 0 })),
    Layer.provideMerge(RunDriver.RunDriver.Default),
    Layer.provideMerge(h.layer)
  )

const tools = JSON.stringify([{ name: "run_tests", description: "Runs the test suite", inputSchema: { type: "object", properties: {} } }])

describe("baton tool-results (the CLI as a client)", () => {
  it.live("create --tools, send stops at the wait with the open call, tool-results posts (inline, then from a file) and prints the reply", () => {
    const h = Harness.make([{ name: "claude", window: 200_000, inject: false }])
    const call = (id: string) => ({
      items: [Harness.produced("tool_call", "{}", { toolCallId: id, toolName: "run_tests", messageId: `msg_${id}` })]
    })
    return Effect.gen(function*() {
      const url = HttpServer.formatAddress((yield* HttpServer.HttpServer).address)
      const admin = ["--server", url, "--token", adminToken]
      const created = yield* baton([...admin, "thread", "create", "--provider", "claude", "--tools", tools])
      expect(created).toMatchObject({ code: 0, stderr: "" })
      const threadId = created.stdout.trim()

      h.script.enqueue(call("call_1"))
      h.script.enqueue(call("call_2"))
      h.script.enqueue({ items: [Harness.produced("assistant_message", "All tests pass.")] })
      const sent = yield* baton([...admin, "send", threadId, "Run the tests twice"])
      expect(sent.stderr).toBe("")
      expect(sent.code).toBe(0)
      const lines = sent.stdout.trimEnd().split("\n")
      const runId = /^sent: run 1 (\S+) starting$/.exec(lines[0]!)![1]!
      expect(lines.at(-3)).toMatch(/^run 1 waiting for tool results until \d{4}-\d\d-\d\dT[\d:.]+Z:$/)
      expect(lines.slice(-2)).toEqual([
        "  call_1 run_tests {}",
        `post them with: baton tool-results ${threadId} ${runId} --results FILE|JSON`
      ])
      expect(sent.stdout).toMatch(/run\.waiting +\S+ round 1 waits for run_tests call_1/)

      // A malformed argument: one line saying what shape is expected and the deepest problem, not the schema's tree.
      const malformed = yield* baton([...admin, "tool-results", threadId, runId, "--results", `{"toolCallId":"call_1"}`])
      expect(malformed.code).toBe(2)
      expect(malformed.stderr).toBe(
        "baton: --results: expected a JSON array of {\"toolCallId\", \"output\", \"isError\"?} or {\"results\": [...]}; results: is missing\n"
      )
      const noOutput = yield* baton([...admin, "tool-results", threadId, runId, "--results", `[{"toolCallId":"call_1"}]`])
      expect(noOutput.stderr).toBe(
        "baton: --results: expected a JSON array of {\"toolCallId\", \"output\", \"isError\"?} or {\"results\": [...]}; [0].output: is missing\n"
      )

      const unknown = yield* baton([...admin, "tool-results", threadId, runId, "--results", `[{"toolCallId":"call_9","output":"x"}]`])
      expect(unknown.code).toBe(2)
      expect(unknown.stderr).toMatch(/^baton: run \S+: no open tool call has the id "call_9"; no result for the open call "call_1"/)

      const first = yield* baton([...admin, "tool-results", threadId, runId, "--results", `[{"toolCallId":"call_1","output":"12 passed"}]`])
      expect(first.stderr).toBe("")
      expect(first.stdout.trimEnd().split("\n")).toEqual([
        `posted: 1 result(s) for run 1 ${runId}`,
        expect.stringMatching(/^run 1 waiting for tool results until /),
        "  call_2 run_tests {}",
        `post them with: baton tool-results ${threadId} ${runId} --results FILE|JSON`
      ])

      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-results-"))
      const file = Path.join(dir, "results.json")
      Fs.writeFileSync(file, JSON.stringify({ results: [{ toolCallId: "call_2", output: "12 passed", isError: false }] }))
      const second = yield* baton([...admin, "tool-results", threadId, runId, "--results", file])
      Fs.rmSync(dir, { recursive: true, force: true })
      expect(second.stderr).toBe("")
      expect(second.code).toBe(0)
      expect(second.stdout.trimEnd().split("\n")).toEqual([`posted: 1 result(s) for run 1 ${runId}`, "run 1 completed", "All tests pass."])

      const noServer = yield* baton(["tool-results", threadId, runId, "--results", "[]"])
      expect(noServer.code).toBe(2)
      expect(noServer.stderr).toBe("baton: `baton tool-results` talks to a Baton server: pass --server URL before the command (or set BATON_SERVER)\n")
    }).pipe(Effect.scoped, Effect.provide(serve(h)))
  }, { timeout: 120_000 })
})
