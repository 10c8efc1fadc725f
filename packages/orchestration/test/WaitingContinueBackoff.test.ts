/**
 * A run waiting for the client's tool results whose continuation keeps failing before it leaves `waiting` (review
 * r42a): the run driver's worker continued it again at once, in a tight loop for as long as the cause lasted. Each
 * failure in a row now waits longer first (100 ms doubling to 5 s), and the run goes on once the cause is gone.
 */
import { type ClientTool, Commands, type CommandId, type RunId, type ToolCallId } from "@baton/contracts"
import { RunDriver } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Context, Duration, Effect, Layer, Option } from "effect"

let n = 0
const cid = () => `cmd_backoff_${++n}` as CommandId

const readFile: ClientTool = {
  name: "read_file",
  description: "Reads a file of the workspace",
  inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] }
}

describe("a waiting run whose continuation keeps failing", () => {
  it.live("is continued again after growing pauses, not in a tight loop, and goes on once the cause is gone", () => {
    const h = Harness.make([{ name: "claude", window: 200_000, inject: false }])
    // While `failing`, reading the provider thread of the waiting run (the continuation's first read, before its
    // claim) dies: the continuation fails with the run still `waiting`.
    let failing = false
    let tries = 0
    let waitingRead: string | null = null
    const failingWhenArmed = Harness.interceptStore((name, _args, call) => {
      const after = waitingRead
      waitingRead = null
      if (name === "getProviderThread" && failing && after !== null) {
        tries++
        return Effect.dieMessage("storage failing")
      }
      return name === "getRun"
        ? Effect.tap(call(), (found) =>
          Effect.sync(() => {
            const run = found as Option.Option<{ readonly id: string; readonly status: string }>
            waitingRead = Option.isSome(run) && run.value.status === "waiting" ? run.value.id : null
          }))
        : call()
    })
    return Effect.gen(function*() {
      const context = yield* Layer.build(RunDriver.RunDriver.Default.pipe(
        Layer.provideMerge(Harness.makeLayer(Object.values(h.providers), h.counter, ":memory:", {}, "w", undefined, failingWhenArmed))
      ))
      const driver = Context.get(context, RunDriver.RunDriver)
      const o = yield* Effect.provide(Harness.ops, context)
      const threadId = yield* o.create("claude")
      h.script.enqueue({
        items: [
          Harness.produced("assistant_message", "Reading it.", { messageId: "msg_1" }),
          Harness.produced("tool_call", JSON.stringify({ path: "a.txt" }), { toolCallId: "call_1", toolName: "read_file", messageId: "msg_1" })
        ]
      })
      h.script.enqueue({ items: [Harness.produced("assistant_message", "Read.", { messageId: "msg_2" })] })
      const accepted = yield* driver.submit(Commands.SendMessage.make({ commandId: cid(), threadId, text: "read a.txt", tools: [readFile] }))
      const runId = accepted.runId as RunId
      for (let i = 0; i < 1_000 && Option.getOrThrow(yield* o.store.getRun(runId)).status !== "waiting"; i++) yield* Effect.sleep(Duration.millis(10))
      expect(Option.getOrThrow(yield* o.store.getRun(runId)).status).toBe("waiting")
      failing = true
      yield* driver.submitToolResults(Commands.SubmitToolResults.make({
        commandId: cid(),
        threadId,
        runId,
        results: [{ toolCallId: "call_1" as ToolCallId, output: "alpha", isError: false }]
      }))
      yield* Effect.sleep(Duration.seconds(2))
      // 2 s of pauses of 100, 200, 400, 800 ms: about five tries (the tight loop made thousands).
      const triedWhileFailing = tries
      expect(triedWhileFailing).toBeGreaterThan(0)
      expect(triedWhileFailing).toBeLessThan(12)
      expect(Option.getOrThrow(yield* o.store.getRun(runId)).status).toBe("waiting")
      failing = false
      expect(yield* driver.awaitRun(runId).pipe(Effect.timeout("20 seconds"))).toMatchObject({ runId, status: "completed" })
    }).pipe(Effect.scoped)
  })
})
