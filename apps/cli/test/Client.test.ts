/**
 * `baton --server URL` as a user runs it: real `baton` processes talking over loopback HTTP to the real API
 * (`Server.httpLayer` over a harness orchestrator and its run driver). A thread is created and driven by the CLI
 * alone — a message whose events are printed as they arrive, a switch, `/compact`, `/offload` — and listed, shown and
 * followed; the server's refusals (401, 403, 404, 409, 400) and an unreachable server are one line on stderr and exit 2.
 */
import { ThreadEvent } from "@baton/contracts"
import { RunDriver } from "@baton/orchestration"
import { Server } from "@baton/server"
import { Harness } from "@baton/testing"
import { HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Redacted, Schedule, Schema } from "effect"
import { spawn } from "node:child_process"
import * as Http from "node:http"
import { fileURLToPath } from "node:url"
import * as Format from "../src/Format.js"
import { batonArgs, runBaton } from "./support/CliEntry.js"

const repo = fileURLToPath(new URL("../../../", import.meta.url))
const adminToken = "admin-token-0123456789abcdef"
const readToken = "read-token-0123456789abcdef"

/** Runs `baton ARGS` as a process (no BATON_SERVER/BATON_TOKEN from the environment unless `env` sets them). */
const baton = (args: ReadonlyArray<string>, env: Record<string, string> = {}) => Effect.promise(() => runBaton(args, env))

/** `baton ARGS` with `input` on its standard input (then closed). */
const batonWithInput = (args: ReadonlyArray<string>, input: Uint8Array) => Effect.promise(() => runBaton(args, {}, input))

/** The API on a real loopback port over `h`'s orchestrator, with an admin and a read-only token. */
const serve = (h: Harness.Harness) =>
  Server.httpLayer({
    tokens: { admin: Redacted.make(adminToken), read: Redacted.make(readToken) },
    maxBodyBytes: 2 * 1024 * 1024
  }).pipe(
    Layer.provideMerge(NodeHttpServer.layer(() => Http.createServer(), { host: "127.0.0.1", port: 0 })),
    Layer.provideMerge(RunDriver.RunDriver.Default),
    Layer.provideMerge(h.layer)
  )

const decodeEvent = Schema.decodeUnknownSync(Schema.parseJson(ThreadEvent))

/** The thread's whole event log as the server streams it (`follow=false`), decoded. */
const eventLog = (url: string, threadId: string) =>
  Effect.promise(async () => {
    const response = await fetch(`${url}/threads/${threadId}/events?follow=false`, { headers: { authorization: `Bearer ${adminToken}` } })
    const text = await response.text()
    return text.split("\n").filter((line) => line.startsWith("data: ")).map((line) => decodeEvent(line.slice(6)))
  })

describe("baton --server (the CLI as a client)", () => {
  it.live("drives a thread over HTTP: create, send (its events as they arrive), switch, compact, offload, list, show, follow; errors exit 2", () => {
    const h = Harness.make([
      { name: "codex", window: 44_000, inject: true },
      { name: "claude", window: 200_000, inject: false }
    ])
    return Effect.gen(function*() {
      const url = HttpServer.formatAddress((yield* HttpServer.HttpServer).address)
      const admin = ["--server", url, "--token", adminToken]

      const created = yield* baton([...admin, "thread", "create", "--provider", "codex", "--title", "over http"])
      expect(created).toMatchObject({ code: 0, stderr: "" })
      const threadId = created.stdout.trim()
      expect(threadId).toMatch(/^thr_/)

      h.script.enqueue(Harness.reply(40))
      // The server and token from the environment, as a user's shell would set them.
      const sent = yield* baton(["send", threadId, "Start the refactor ✓"], { BATON_SERVER: url, BATON_TOKEN: adminToken })
      expect(sent.stderr).toBe("")
      expect(sent.code).toBe(0)
      const log = yield* eventLog(url, threadId)
      const queued = log.find((e) => e.type === "run.queued")!
      const runId = (queued.payload as { readonly runId: string }).runId
      const ended = log.findIndex((e) => e.type === "run.completed")
      const reply = Harness.reply(40).items[0]!.text
      // Every event of the run, from its run.queued to its run.completed, in the in-process format; then its reply.
      expect(sent.stdout.trimEnd().split("\n")).toEqual([
        // An idle thread: the run is claimed as it is queued.
        `sent: run 1 ${runId} starting`,
        ...log.slice(log.indexOf(queued), ended + 1).map((e) => Format.eventLine(e, false)),
        "run 1 completed",
        reply
      ])
      expect(sent.stdout).toMatch(/run\.started +run_\S+ attempt 1 on nat_/)

      const switched = yield* baton([...admin, "switch", threadId, "claude"])
      expect(switched.code).toBe(0)
      expect(switched.stdout).toMatch(new RegExp(`^switched ${threadId} to claude \\(provider thread pth_\\S+; handoff hof_\\S+ owes it history\\)\\n$`))

      const second = yield* baton([...admin, "send", threadId, "Continue", "--json"])
      expect(second.code).toBe(0)
      const secondEvents = second.stdout.trimEnd().split("\n").map((line) => decodeEvent(line))
      expect(secondEvents[0]!.type).toBe("run.queued")
      expect(secondEvents.at(-1)!.type).toBe("run.completed")
      expect(secondEvents.map((e) => e.type)).toContain("delivery.inlined")

      const [compacted, compactedJson, offloaded, listed, shown, handoffs] = yield* Effect.all([
        baton([...admin, "compact", threadId]),
        baton([...admin, "compact", threadId, "--json"]),
        baton([...admin, "offload", threadId]),
        baton([...admin, "threads"]),
        baton([...admin, "thread", "show", threadId]),
        baton([...admin, "handoffs", threadId])
      ], { concurrency: "unbounded" })
      expect(compacted).toMatchObject({ code: 0, stderr: "" })
      expect(compacted.stdout).toMatch(/^compacted: used [\d,]+ -> [\d,]+; delivered 0 items 0 tok, omitted 0 items, still deferred 0 handoffs\n$/)
      expect(JSON.parse(compactedJson.stdout)).toMatchObject({ compacted: true, deliveredItems: 0, stillDeferred: 0 })
      // The reason once (the message says it), then the operation (b48srv: `nothing: nothing to offload: …` repeated it).
      expect(offloaded.stdout).toMatch(/^Nothing was offloaded: the \d+ item\(s\) after the start hold \d+ tokens.*The conversation is unchanged\.\noperation \S+\n$/)
      expect(listed.stdout).toMatch(new RegExp(`^${threadId}  \\S+Z +2 runs +4 items  over http\\n$`))
      expect(shown.stdout.split("\n").slice(0, 2)).toEqual([`thread ${threadId}: over http`, expect.stringMatching(/^ {2}2 runs, 4 items, created /)])
      expect(shown.stdout).toContain("  provider codex: window 44000, synced through run 1")
      expect(shown.stdout).toContain("  provider claude (active): window 200000")
      expect(shown.stdout).toContain("  runs: 2 completed")
      expect(handoffs.stdout).toMatch(/^hof_\S+ switch -> claude: 2 items from 1 run\(s\)\n {2}dlv_\S+ to claude g1: inline, delivered 2/)
      const replayed = yield* baton([...admin, "events", "--thread", threadId])
      const finalLog = yield* eventLog(url, threadId)
      expect(replayed.stdout.trimEnd().split("\n")).toEqual(finalLog.map((e) => Format.eventLine(e, false)))
      expect(finalLog.map((e) => e.type)).toContain("thread.compacted")

      // `events --follow` prints the log, then the live tail, until interrupted (exit 130).
      const follower = spawn(process.execPath, batonArgs([...admin, "events", "--follow"]), {
        cwd: repo,
        env: { ...process.env, BATON_SERVER: "", BATON_TOKEN: "" },
        stdio: ["ignore", "pipe", "pipe"]
      })
      let followed = ""
      const exited = new Promise<number | null>((done) => follower.on("close", (code) => done(code)))
      const seen = (pattern: RegExp) =>
        new Promise<void>((done) => {
          const check = () => pattern.test(followed) && done()
          follower.stdout.setEncoding("utf8").on("data", (chunk: string) => {
            followed += chunk
            check()
          })
          check()
        })
      yield* Effect.promise(() => seen(/thread\.compacted/))
      // The third turn is held open at the provider: a switch meanwhile is refused (409) with the server's words.
      const gate = yield* Deferred.make<void>()
      h.script.enqueue({ ...Harness.reply(10), hold: { afterItems: 0, gate } })
      const sending = yield* Effect.fork(baton([...admin, "send", threadId, "Third"]))
      const thirdRunning = Effect.promise(async () => {
        const response = await fetch(`${url}/threads/${threadId}/runs`, { headers: { authorization: `Bearer ${adminToken}` } })
        const body = await response.json() as { readonly runs: ReadonlyArray<{ readonly seq: number; readonly status: string }> }
        return body.runs.some((run) => run.seq === 3 && run.status === "running")
      })
      yield* thirdRunning.pipe(Effect.repeat({ schedule: Schedule.spaced("100 millis"), until: (running) => running }))
      const busy = yield* baton([...admin, "switch", threadId, "codex"])
      expect(busy).toMatchObject({ code: 2, stdout: "" })
      expect(busy.stderr).toMatch(new RegExp(`^baton: thread ${threadId} already has run run_\\S+ in progress; interrupt it or wait\n$`))
      yield* Deferred.succeed(gate, undefined)
      const third = yield* Fiber.join(sending)
      expect(third.code).toBe(0)
      const thirdRun = /^sent: run 3 (\S+) starting$/m.exec(third.stdout)![1]!
      yield* Effect.promise(() => seen(new RegExp(`run\\.completed +${thirdRun}`)))
      follower.kill("SIGINT")
      expect(yield* Effect.promise(() => exited)).toBe(130)
      const lastLog = yield* eventLog(url, threadId)
      expect(followed.trimEnd().split("\n")).toEqual(lastLog.map((e) => Format.eventLine(e, true)))

      // Refusals: the server's sentence on one line, exit 2, nothing on stdout.
      const [noToken, wrongToken, readOnly, unknownThread, unknownProvider, unreachable, noServer] = yield* Effect.all([
        baton(["--server", url, "threads"]),
        baton(["--server", url, "--token", "wrong", "send", threadId, "hello"]),
        baton(["--server", url, "--token", readToken, "switch", threadId, "codex"]),
        baton([...admin, "thread", "show", "thr_unknown"]),
        baton([...admin, "switch", threadId, "gpt9"]),
        baton(["--server", "http://127.0.0.1:1", "--token", adminToken, "threads"]),
        baton(["compact", threadId])
      ], { concurrency: "unbounded" })
      for (const r of [noToken, wrongToken, readOnly, unknownThread, unknownProvider, unreachable, noServer]) {
        expect(r.code).toBe(2)
        expect(r.stdout).toBe("")
        expect(r.stderr.trim().split("\n")).toHaveLength(1)
      }
      expect(noToken.stderr).toBe("baton: no bearer token; send \"Authorization: Bearer <token>\" (pass --token or set BATON_TOKEN)\n")
      expect(wrongToken.stderr).toBe("baton: unknown token; send \"Authorization: Bearer <token>\" (pass --token or set BATON_TOKEN)\n")
      expect(readOnly.stderr).toMatch(/^baton: .*read-only/)
      expect(unknownThread.stderr).toBe(`baton: thread thr_unknown not found (list threads with \`baton --server ${url} threads\`)\n`)
      expect(unknownProvider.stderr).toBe("baton: unknown provider \"gpt9\" (configured: codex, claude)\n")
      expect(unreachable.stderr).toMatch(/^baton: cannot reach the Baton server at http:\/\/127\.0\.0\.1:1 \(.*ECONNREFUSED.*\)/)
      expect(noServer.stderr).toBe("baton: `baton compact` talks to a Baton server: pass --server URL before the command (or set BATON_SERVER)\n")
      // The refused write wrote nothing: still three runs.
      const runs = yield* Effect.promise(async () => {
        const response = await fetch(`${url}/threads/${threadId}/runs`, { headers: { authorization: `Bearer ${adminToken}` } })
        return (await response.json() as { readonly runs: ReadonlyArray<unknown> }).runs.length
      })
      expect(runs).toBe(3)
    }).pipe(Effect.provide(serve(h)))
  }, 600_000)

  // Tester r36: `send` took its text only as an argument: `echo hi | baton send T` failed (Missing argument), an
  // argument over about 128 KiB could not be passed at all, and invalid UTF-8 in one became U+FFFD unseen.
  it.live("threads --json and thread show --json print the API's documents; an unknown thread names this server's list", () => {
    const h = Harness.make([{ name: "codex", window: 44_000, inject: true }])
    return Effect.gen(function*() {
      const url = HttpServer.formatAddress((yield* HttpServer.HttpServer).address)
      const admin = ["--server", url, "--token", adminToken]
      const threadId = (yield* baton([...admin, "thread", "create", "--provider", "codex"])).stdout.trim()
      // Neither command had `--json` (b47srv): "Received unknown argument: '--json'", exit 2.
      const [list, show, unknown] = yield* Effect.all([
        baton([...admin, "threads", "--json"]),
        baton([...admin, "thread", "show", threadId, "--json"]),
        baton([...admin, "thread", "show", "thr_unknown", "--json"])
      ], { concurrency: "unbounded" })
      const served = yield* Effect.promise(async () =>
        (await fetch(`${url}/threads/${threadId}`, { headers: { authorization: `Bearer ${adminToken}` } })).json() as Promise<{ thread: Record<string, unknown>; totals: unknown }>
      )
      expect([list.code, list.stderr, JSON.parse(list.stdout)]).toEqual([0, "", { threads: [{ ...served.thread, totals: served.totals }] }])
      expect([show.code, show.stderr, JSON.parse(show.stdout)]).toEqual([0, "", served])
      // The hint names the command that lists this server's threads, not the in-process `baton threads`.
      const hint = `thread thr_unknown not found (list threads with \`baton --server ${url} threads\`)`
      expect([unknown.code, unknown.stderr, JSON.parse(unknown.stdout)]).toEqual([2, `baton: ${hint}\n`, { error: { code: "bad_input", message: hint } }])
      // `events --thread` of an unknown thread named the API's list (GET /threads) (b48srv).
      const events = yield* baton([...admin, "events", "--thread", "thr_unknown", "--json"])
      expect([events.code, events.stderr, JSON.parse(events.stdout)]).toEqual([2, `baton: ${hint}\n`, { error: { code: "bad_input", message: hint } }])
      // An unknown run had the API's hint, or none (b48srv): here the command that shows the thread's runs.
      const results = yield* baton([...admin, "tool-results", threadId, "run_unknown", "--results", `[{"toolCallId":"call_1","output":"ok"}]`, "--json"])
      const runHint = `run run_unknown not found on thread ${threadId} (its runs: \`baton --server ${url} thread show ${threadId}\`)`
      expect([results.code, results.stderr, JSON.parse(results.stdout)]).toEqual([2, `baton: ${runHint}\n`, { error: { code: "bad_input", message: runHint } }])
    }).pipe(Effect.provide(serve(h)))
  }, 60_000)

  it.live("send THREAD - reads the message from standard input byte for byte; empty or non-UTF-8 input is refused, nothing sent", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    return Effect.gen(function*() {
      const url = HttpServer.formatAddress((yield* HttpServer.HttpServer).address)
      const admin = ["--server", url, "--token", adminToken]
      const threadId = (yield* baton([...admin, "thread", "create", "--provider", "codex"])).stdout.trim()
      // A leading byte order mark is part of the bytes too (TextDecoder drops it unless told not to: review r36b).
      const message = `\uFEFFReview this file ✓\r\n${"line\tof a long file 🚀\n".repeat(9_000)}`
      expect(Buffer.byteLength(message)).toBeGreaterThan(200_000)
      h.script.enqueue(Harness.reply(10))
      const sent = yield* batonWithInput([...admin, "send", threadId, "-"], Buffer.from(message, "utf8"))
      expect([sent.code, sent.stderr]).toEqual([0, ""])
      // Whitespace around words is the message's own: kept byte for byte.
      const padded = "  \n\tfix it \u00a0\n\n"
      h.script.enqueue(Harness.reply(10))
      const paddedSent = yield* batonWithInput([...admin, "send", threadId, "-"], Buffer.from(padded, "utf8"))
      expect([paddedSent.code, paddedSent.stderr]).toEqual([0, ""])
      const [empty, latin1, blank] = yield* Effect.all([
        batonWithInput([...admin, "send", threadId, "-"], new Uint8Array()),
        batonWithInput([...admin, "send", threadId, "-"], Buffer.from("caf\xe9\n", "latin1")),
        batonWithInput([...admin, "send", threadId, "-"], Buffer.from("   \n\t\r\n", "utf8"))
      ], { concurrency: "unbounded" })
      expect(empty).toEqual({ code: 2, stdout: "", stderr: "baton: standard input was empty: no message to send\n" })
      expect(latin1).toEqual({ code: 2, stdout: "", stderr: "baton: standard input is not UTF-8 text (5 bytes): not sent\n" })
      // Whitespace only: refused as the API and the dashboard refuse it (it was sent, and a run queued of it).
      expect(blank).toEqual({ code: 2, stdout: "", stderr: "baton: standard input holds only whitespace (7 bytes): no message to send\n" })
      const runs = yield* Effect.promise(async () => {
        const response = await fetch(`${url}/threads/${threadId}/runs`, { headers: { authorization: `Bearer ${adminToken}` } })
        return (await response.json() as { readonly runs: ReadonlyArray<unknown> }).runs.length
      })
      expect(runs).toBe(2)
      const turns = h.providers.codex!.received.filter((r) => r.type === "turn")
      expect(turns.map((t) => t.type === "turn" ? t.prompt : null)).toEqual([message, padded])
    }).pipe(Effect.provide(serve(h)))
  }, 120_000)

  it.live("input the API's schema refuses is reported as the user's, not sent; an answer that is not the API's blames the server", () => {
    const h = Harness.make([{ name: "codex", window: 44_000, inject: true }])
    return Effect.gen(function*() {
      const url = HttpServer.formatAddress((yield* HttpServer.HttpServer).address)
      const admin = ["--server", url, "--token", adminToken]
      const threadId = (yield* baton([...admin, "thread", "create", "--provider", "codex"])).stdout.trim()
      // Before: "the server at URL answered something that is not Baton's API: (<declaration schema> <-> …", for
      // input the client's own encoding refused before anything was sent.
      const [empty, blank, badProvider] = yield* Effect.all([
        baton([...admin, "send", threadId, ""]),
        baton([...admin, "send", threadId, "   \n\t"]),
        baton([...admin, "switch", threadId, "UPPER"])
      ], { concurrency: "unbounded" })
      expect(empty).toEqual({ code: 2, stdout: "", stderr: "baton: invalid input, not sent: text: Expected a string at least 1 character(s) long, actual \"\"\n" })
      // Whitespace only: refused by the API's schema before it is sent, as the dashboard refuses it (a run was queued).
      expect(blank).toEqual({ code: 2, stdout: "", stderr: "baton: invalid input, not sent: text: the message is blank (only whitespace): write something to send\n" })
      expect(badProvider).toEqual({
        code: 2,
        stdout: "",
        stderr: "baton: invalid input, not sent: providerInstance: Expected a string matching the pattern ^[a-z][a-z0-9_-]{0,39}$, actual \"UPPER\"\n"
      })
      const runs = yield* Effect.promise(async () => {
        const response = await fetch(`${url}/threads/${threadId}/runs`, { headers: { authorization: `Bearer ${adminToken}` } })
        return (await response.json() as { readonly runs: ReadonlyArray<unknown> }).runs.length
      })
      expect(runs).toBe(0)
      // A server whose answer is not the API's is still named as such.
      const other = Http.createServer((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.end(`{"threads":5}`)
      })
      yield* Effect.acquireRelease(
        Effect.async<void>((resume) => void other.listen(0, "127.0.0.1", () => resume(Effect.void))),
        () => Effect.sync(() => void other.close())
      )
      const port = (other.address() as { readonly port: number }).port
      const garbled = yield* baton(["--server", `http://127.0.0.1:${port}`, "--token", adminToken, "threads"])
      expect([garbled.code, garbled.stdout]).toEqual([2, ""])
      expect(garbled.stderr).toMatch(new RegExp(`^baton: the server at http://127\\.0\\.0\\.1:${port} answered something that is not Baton's API: `))
    }).pipe(Effect.scoped, Effect.provide(serve(h)))
  }, 120_000)
})
