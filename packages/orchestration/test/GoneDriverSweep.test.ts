/**
 * Regression (a fresh pair of eyes, two servers on one Postgres): a server killed (SIGKILL) mid-turn left its run
 * `running` for as long as the other server lived — a minute and more, until a message to that thread, an interrupt
 * or a restart looked; a client waiting on the run there waited for good. The run driver now looks for unfinished
 * runs of gone drivers every `goneDriverSweepMillis` and reconciles them as restart recovery does. Here the killed
 * process is a run row `running` under a driver id that no process holds.
 */
import { type ClientTool, Commands, type CommandId, type Run, type RunId } from "@baton/contracts"
import { RunDriver } from "@baton/orchestration"
import { ThreadStore, UnitOfWork } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Context, DateTime, Duration, Effect, Exit, Layer, Option, Scope } from "effect"

describe.each(Harness.dialects)("a run of a gone driver on %s", (_label, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("is ended by the live driver's sweep, with nothing sent to its thread", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db, config: { goneDriverSweepMillis: 100 } })
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const store = yield* ThreadStore
      const uow = yield* UnitOfWork
      const threadId = yield* o.create("codex")
      const thread = Option.getOrThrow(yield* store.getThread(threadId))
      const now = yield* DateTime.now
      const run: Run = {
        id: "run_of_a_killed_process" as RunId,
        threadId,
        seq: 1,
        providerThreadId: thread.activeProviderThreadId!,
        status: "running",
        prompt: "hello",
        stopPoint: null,
        failureReason: null,
        failureCode: null,
        nativeThreadId: null,
        createdAt: now,
        updatedAt: now
      }
      yield* uow.thread(threadId, "test.killedProcess")(store.insertRun(run, "drv_killed_process"))
      let status: ReadonlyArray<string | null> = []
      for (let i = 0; i < 100; i++) {
        yield* Effect.sleep(Duration.millis(50))
        const now = Option.getOrThrow(yield* store.getRun(run.id))
        status = [now.status, now.failureCode]
        if (now.status !== "running") break
      }
      expect(status).toEqual(["interrupted", "process_restarted"])
    }).pipe(Effect.provide(RunDriver.RunDriver.Default.pipe(Layer.provideMerge(h.layer))))
  })
})

const readFile: ClientTool = {
  name: "read_file",
  description: "Reads a file of the workspace",
  inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] }
}

describe("a wait of a gone driver", () => {
  // Review r43: the sweep left `waiting` runs alone, and only the process that died watched their deadlines: a wait of
  // a dead process never expired while the other processes lived (until a send to its thread or a restart).
  it.live("expires at its deadline through a live driver's sweep", () =>
    Harness.withDbFile((file) =>
      Effect.gen(function*() {
        const h = Harness.make([{ name: "claude", window: 200_000, inject: false }])
        const config = { goneDriverSweepMillis: 100, toolResultTimeoutMillis: 1_500 }
        const layer = (ns: string) => RunDriver.RunDriver.Default.pipe(Layer.provideMerge(Harness.makeLayer([h.providers.claude!], h.counter, file, config, ns)))
        // B runs from the start; A takes the send, its run waits for the client's tool results, and A dies.
        const b = yield* Layer.build(layer("b"))
        const scopeA = yield* Scope.make()
        const a = yield* Layer.buildWithScope(layer("a"), scopeA)
        const o = yield* Effect.provide(Harness.ops, a)
        const threadId = yield* o.create("claude")
        h.script.enqueue({
          items: [
            Harness.produced("assistant_message", "Reading it.", { messageId: "msg_1" }),
            Harness.produced("tool_call", JSON.stringify({ path: "a.txt" }), { toolCallId: "call_1", toolName: "read_file", messageId: "msg_1" })
          ]
        })
        const accepted = yield* Context.get(a, RunDriver.RunDriver).submit(Commands.SendMessage.make({ commandId: "cmd_gone_wait" as CommandId, threadId, text: "read a.txt", tools: [readFile] }))
        const runId = accepted.runId as RunId
        const store = Context.get(b, ThreadStore)
        for (let i = 0; i < 200 && Option.getOrThrow(yield* store.getRun(runId)).status !== "waiting"; i++) yield* Effect.sleep(Duration.millis(10))
        expect(Option.getOrThrow(yield* store.getRun(runId)).status).toBe("waiting")
        yield* Scope.close(scopeA, Exit.void)
        let status: ReadonlyArray<string | null> = []
        for (let i = 0; i < 100; i++) {
          yield* Effect.sleep(Duration.millis(50))
          const now = Option.getOrThrow(yield* store.getRun(runId))
          status = [now.status, now.failureCode]
          if (now.status !== "waiting") break
        }
        expect(status).toEqual(["failed", "tool_results_timeout"])
      })
    ).pipe(Effect.scoped))
})
