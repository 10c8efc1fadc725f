/**
 * Regression (review r32): a SendMessage retried (the same command id, the same payload) while its run waits for the
 * client's tool results did not answer: the first call answered `waiting`, the retry polled until the run ended,
 * which only the client's next command (the results) or the wait's deadline brings. It answers `waiting` now, with
 * the same run, and no second turn.
 */
import { type ClientTool, Commands, type CommandId, type ProviderInstance } from "@baton/contracts"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option } from "effect"

const readFile: ClientTool = { name: "read_file", description: "Reads a file", inputSchema: { type: "object" } }

describe.each(Harness.dialects)("a SendMessage retried while its run waits for tool results on %s", (_label, db) => {
  it.live("answers waiting with the first call's run, without a second turn", () => {
    const h = Harness.make([{ name: "claude", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const o = yield* Harness.ops
      const threadId = yield* o.service.createThread(Commands.CreateThread.make({
        commandId: "cmd_wait_create" as CommandId,
        title: "tools",
        providerInstance: "claude" as ProviderInstance,
        tools: [readFile]
      }))
      h.script.enqueue({ items: [Harness.produced("tool_call", "{}", { toolCallId: "call_1", toolName: "read_file", messageId: "msg_1" })] })
      const command = Commands.SendMessage.make({ commandId: "cmd_wait_send" as CommandId, threadId, text: "read it" })
      const first = yield* o.service.sendMessage(command)
      expect(first.status).toBe("waiting")
      // Bounded only so that the defect fails the test instead of hanging it (the retry polled for the deadline).
      const retried = yield* o.service.sendMessage(command).pipe(Effect.timeout("5 seconds"), Effect.option)
      expect(Option.map(retried, (r) => [r.runId, r.status])).toEqual(Option.some([first.runId, "waiting"]))
      expect((yield* o.store.listRuns(threadId)).map((r) => [r.prompt, r.status])).toEqual([["read it", "waiting"]])
      expect(h.providers.claude!.received.filter((r) => r.type === "turn").length).toBe(1)
    }).pipe(Effect.provide(h.layer))
  }, 30_000)
})
