/**
 * The JSON-RPC client of `codex app-server` against the real pinned binary (`@openai/codex` 0.171.0), its model
 * provider a loopback server playing OpenAI's Responses API: a turn completes, the exchange is the recorded fixture,
 * a missing binary is a typed error naming the package, a killed child fails what was in flight and restarts on the
 * next use, and closing the scope kills the child.
 */
import { describe, expect, it } from "@effect/vitest"
import { Data, Effect, Exit, Fiber, Option, Queue, Schema, Scope } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as CodexAppServer from "../src/codex/CodexAppServer.js"
import * as Protocol from "../src/codex/CodexProtocol.js"
import { answer, binary, checkFixture, codexHome, normalise, userTexts } from "./support/CodexLoopback.js"
import { loopback } from "./support/Loopback.js"

/** A test waited too long. */
class TestTimeout extends Data.TaggedError("TestTimeout")<{ readonly waitingFor: string }> {}

/** Takes events until `turn/completed`, returning them all. */
const untilTurnCompleted = (events: Queue.Dequeue<CodexAppServer.Incoming>) =>
  Effect.gen(function*() {
    const seen: Array<CodexAppServer.Incoming> = []
    for (;;) {
      const event = yield* Queue.take(events)
      seen.push(event)
      if (event._tag === "exited" || event.method === Protocol.Notification.turnCompleted) return seen
    }
  }).pipe(Effect.timeoutFail({ duration: "30 seconds", onTimeout: () => new TestTimeout({ waitingFor: "turn/completed" }) }))

const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe("CodexAppServer (real binary)", () => {
  it.live("initialize, thread/start, turn/start: the turn completes against the loopback Responses API; the exchange is the fixture", () =>
    Effect.scoped(Effect.gen(function*() {
      const loop = yield* loopback
      const home = yield* codexHome(loop.url)
      loop.enqueue(answer("Hello from the loopback", 1_234, 7, 1_000))
      const trace: Array<CodexAppServer.TraceLine> = []
      const client = yield* CodexAppServer.make({ binary: binary(), codexHome: home, trace: (l) => trace.push(l) })
      expect(yield* client.generation).toBe(0)
      const { events } = yield* client.subscribe
      expect(yield* client.generation).toBe(1)
      const started = yield* client.request(Protocol.Method.threadStart, { cwd: home, approvalPolicy: "never", sandbox: "read-only" }, Protocol.ThreadResponse)
      const threadId = started.thread.id
      const turn = yield* client.request(Protocol.Method.turnStart, {
        threadId,
        input: [{ type: "text", text: "Say hello" }],
        clientUserMessageId: "run-1"
      }, Protocol.TurnStartResponse)
      expect(turn.turn.status).toBe("inProgress")
      const seen = yield* untilTurnCompleted(events)
      const notifications = seen.flatMap((e) => (e._tag === "notification" ? [e] : []))
      const completed = yield* Schema.decodeUnknown(Protocol.TurnNotification)(notifications.at(-1)!.params)
      expect(completed.turn.status).toBe("completed")
      const messages = (yield* Schema.decodeUnknown(Schema.Array(Protocol.ItemNotification))(
        notifications.filter((n) => n.method === Protocol.Notification.itemCompleted).map((n) => n.params)
      )).map((n) => n.item)
      expect(messages.map((i) => i.type)).toEqual(["userMessage", "agentMessage"])
      expect(messages[0]).toMatchObject({ clientId: "run-1" })
      expect(messages[1]).toMatchObject({ text: "Hello from the loopback" })
      const usage = (yield* Schema.decodeUnknown(Schema.Array(Protocol.TokenUsageUpdated))(
        notifications.filter((n) => n.method === Protocol.Notification.threadTokenUsageUpdated).map((n) => n.params)
      )).map((n) => n.tokenUsage)
      expect(usage.at(-1)).toMatchObject({ last: { inputTokens: 1_234, cachedInputTokens: 1_000, outputTokens: 7, totalTokens: 1_241 }, modelContextWindow: 41_800 })
      // The request Codex sent carries the prompt as its last user text, unchanged.
      expect(loop.requests).toHaveLength(1)
      expect(loop.requests[0]!.url).toBe("/v1/responses")
      expect(userTexts(loop.requests[0]!).at(-1)).toBe("Say hello")
      const recorded = normalise(trace, home)
      expect(recorded).toBe(checkFixture("client-turn.jsonl", recorded))
    })))

  it.live("a missing binary is CodexStartFailed naming @openai/codex, at the first request, not a hang", () =>
    Effect.scoped(Effect.gen(function*() {
      const client = yield* CodexAppServer.make({ binary: "/nonexistent/codex", codexHome: "/nonexistent-home" })
      const exit = yield* Effect.exit(client.request(Protocol.Method.threadStart, {}, Protocol.ThreadResponse))
      expect(Exit.isFailure(exit)).toBe(true)
      const error = Exit.isFailure(exit) ? Option.getOrNull(Exit.causeOption(exit).pipe(Option.flatMap((c) => Option.fromNullable(c._tag === "Fail" ? c.error : null)))) : null
      expect(error?._tag).toBe("CodexStartFailed")
      expect(error?.message).toContain("@openai/codex@0.171.0")
      expect(error?.message).toContain("/nonexistent/codex")
    })))

  it.live("a binary that is not Codex fails initialize with CodexStartFailed (bounded), not a hang", () =>
    Effect.scoped(Effect.gen(function*() {
      // `/bin/cat`-like: `true` exits at once without answering initialize.
      const client = yield* CodexAppServer.make({ binary: "/bin/true", codexHome: "/tmp", requestTimeoutMillis: 2_000 })
      const exit = yield* Effect.exit(client.request(Protocol.Method.threadStart, {}, Protocol.ThreadResponse))
      expect(exit).toMatchObject({ _tag: "Failure" })
      const error = Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error : null
      expect(error?._tag).toBe("CodexStartFailed")
      expect(error?.message).toMatch(/initialize failed/)
    })))

  it.live("a request in flight when the child dies fails with CodexExited (a stand-in child that answers initialize only)", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-fake-codex-"))
      const fake = Path.join(dir, "codex")
      Fs.writeFileSync(fake, [
        "#!/usr/bin/env node",
        "require('readline').createInterface({ input: process.stdin }).on('line', (l) => {",
        "  const m = JSON.parse(l)",
        "  if (m.method === 'initialize') process.stdout.write(JSON.stringify({ id: m.id, result: { userAgent: 'fake' } }) + '\\n')",
        "})"
      ].join("\n"), { mode: 0o755 })
      yield* Effect.addFinalizer(() => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true })))
      const client = yield* CodexAppServer.make({ binary: fake, codexHome: dir, requestTimeoutMillis: 20_000 })
      const inFlight = yield* Effect.fork(client.request(Protocol.Method.threadStart, {}, Protocol.ThreadResponse))
      while ((yield* client.pid) === null) yield* Effect.sleep("10 millis")
      yield* Effect.sleep("100 millis")
      process.kill((yield* client.pid)!, "SIGKILL")
      const failed = yield* Effect.exit(Fiber.join(inFlight))
      expect(Exit.isFailure(failed) && failed.cause._tag === "Fail" ? failed.cause.error : null).toMatchObject({ _tag: "CodexExited", reason: "killed by SIGKILL" })
    })))

  it.live("the child killed: subscribers get `exited`, the next use starts generation 2 and resumes the thread; closing the scope kills the child", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const loop = yield* Scope.extend(loopback, scope)
      const home = yield* Scope.extend(codexHome(loop.url), scope)
      // The model never answers (no reply queued until the kill): the turn stays in flight.
      loop.enqueue({ status: 200, headers: { "content-type": "text/event-stream" }, chunks: [": waiting\n\n"], gapMillis: 60_000 })
      const client = yield* Scope.extend(CodexAppServer.make({ binary: binary(), codexHome: home }), scope)
      const { events } = yield* Scope.extend(client.subscribe, scope)
      const threadId = (yield* client.request(Protocol.Method.threadStart, { cwd: home }, Protocol.ThreadResponse)).thread.id
      yield* client.request(Protocol.Method.turnStart, { threadId, input: [{ type: "text", text: "hang" }] }, Protocol.TurnStartResponse)
      // Kill only once the model request went out and the thread's rollout holds something: a thread killed before
      // its rollout was written cannot be resumed (Codex: "rollout … is empty"), which is not what this test is about.
      const rolloutWritten = () => {
        const files = Fs.readdirSync(Path.join(home, "sessions"), { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith(".jsonl"))
        return files.some((f) => Fs.statSync(Path.join(home, "sessions", f)).size > 0)
      }
      for (let i = 0; i < 200 && !(loop.requests.length > 0 && Fs.existsSync(Path.join(home, "sessions")) && rolloutWritten()); i++) {
        yield* Effect.sleep("50 millis")
      }
      const pid = (yield* client.pid)!
      process.kill(pid, "SIGKILL")
      const seen = yield* untilTurnCompleted(events)
      expect(seen.at(-1)).toMatchObject({ _tag: "exited", reason: "killed by SIGKILL", generation: 1 })
      expect(yield* client.generation).toBe(0)
      // The next use restarts; the thread is resumed from its rollout.
      const resumed = yield* client.request(Protocol.Method.threadResume, { threadId }, Protocol.ThreadResponse)
      expect(resumed.thread.id).toBe(threadId)
      expect(yield* client.generation).toBe(2)
      const second = (yield* client.pid)!
      expect(second).not.toBe(pid)
      yield* Scope.close(scope, Exit.void)
      expect(isAlive(second)).toBe(false)
    }))
})
