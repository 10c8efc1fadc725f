/**
 * Command receipts: a command id comes back only with the same command. Each test is the smallest input.
 */
import { Commands, type CommandId, type ProviderInstance, type ThreadId } from "@baton/contracts"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { DateTime, Effect, FastCheck } from "effect"
import { CommandReceipts } from "../src/index.js"

const ops = Harness.ops
const codex = "codex" as ProviderInstance
const claude = "claude" as ProviderInstance

const reused = (commandId: CommandId, type: string) =>
  `command id ${commandId} was already used by ${type} with a different payload; ` +
  `a retry must repeat the command unchanged: send this ${type} with a new command id`

describe("a reused command id with a different payload", () => {
  it.effect("SendMessage: the second prompt is an IdempotencyKeyReused, not silently dropped for the first run's result", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      const id = "cmd_send" as CommandId
      const first = yield* o.service.sendMessage(Commands.SendMessage.make({ commandId: id, threadId: t, text: "a" }))
      const error = yield* Effect.flip(o.service.sendMessage(Commands.SendMessage.make({ commandId: id, threadId: t, text: "b" })))
      expect([error._tag, error.message]).toEqual(["IdempotencyKeyReused", reused(id, "SendMessage")])
      const queued = yield* Effect.flip(o.service.enqueueMessage(Commands.SendMessage.make({ commandId: id, threadId: t, text: "b" })))
      expect([queued._tag, queued.message]).toEqual(["IdempotencyKeyReused", reused(id, "SendMessage")])
      // The same command again is a retry: the first result, decoded from the receipt, and no second turn.
      expect(yield* o.service.sendMessage(Commands.SendMessage.make({ commandId: id, threadId: t, text: "a" }))).toEqual(first)
      expect((yield* o.store.listRuns(t)).map((r) => r.prompt)).toEqual(["a"])
      expect(h.providers.codex!.received.flatMap((r) => r.type === "turn" ? [r.prompt] : [])).toEqual(["a"])
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("CreateThread, SwitchProvider, OffloadThread, ForkThread: each rejects another payload under its id", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }, { name: "claude", window: 200_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const s = o.service
      const create = "cmd_create" as CommandId
      const t = yield* s.createThread(Commands.CreateThread.make({ commandId: create, title: "one", providerInstance: codex }))
      expect(yield* s.createThread(Commands.CreateThread.make({ commandId: create, title: "one", providerInstance: codex }))).toBe(t)
      const created = yield* Effect.flip(s.createThread(Commands.CreateThread.make({ commandId: create, title: "two", providerInstance: codex })))
      expect(created.message).toBe(reused(create, "CreateThread"))
      expect((yield* s.listThreads()).map((x) => x.title)).toEqual(["one"])

      h.script.enqueue(Harness.reply(10))
      yield* o.send(t, "p1")
      const sw = "cmd_switch" as CommandId
      yield* s.switchProvider(Commands.SwitchProvider.make({ commandId: sw, threadId: t, providerInstance: claude }))
      const switched = yield* Effect.flip(s.switchProvider(Commands.SwitchProvider.make({ commandId: sw, threadId: t, providerInstance: codex })))
      expect(switched.message).toBe(reused(sw, "SwitchProvider"))

      const off = "cmd_offload" as CommandId
      yield* s.offload(Commands.OffloadThread.make({ commandId: off, threadId: t, keepTokens: 100 }))
      const offloaded = yield* Effect.flip(s.offload(Commands.OffloadThread.make({ commandId: off, threadId: t, keepTokens: 0 })))
      expect(offloaded.message).toBe(reused(off, "OffloadThread"))

      const fk = "cmd_fork" as CommandId
      const forked = yield* s.fork(Commands.ForkThread.make({ commandId: fk, threadId: t, atRunSeq: 1 }))
      expect(yield* s.fork(Commands.ForkThread.make({ commandId: fk, threadId: t, atRunSeq: 1 }))).toEqual(forked)
      const forkedAgain = yield* Effect.flip(s.fork(Commands.ForkThread.make({ commandId: fk, threadId: t, atRunSeq: 0 })))
      expect(forkedAgain.message).toBe(reused(fk, "ForkThread"))
      expect((yield* s.listThreads()).length).toBe(2)
    }).pipe(Effect.provide(h.layer))
  })
})

describe("stored results are read through their schema", () => {
  it.effect("a stored SendMessage result of another shape is an InvalidRequest, not returned as a SendResult", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      const command = Commands.SendMessage.make({ commandId: "cmd_old" as CommandId, threadId: t, text: "a" })
      yield* o.store.insertReceipt({
        commandId: command.commandId,
        commandType: "SendMessage",
        threadId: t,
        result: { status: "completed" },
        payloadFingerprint: CommandReceipts.fingerprint(command),
        createdAt: yield* DateTime.now
      })
      const error = yield* Effect.flip(o.service.sendMessage(command))
      expect([error._tag, error.message]).toEqual(["InvalidRequest", "the stored result of command cmd_old cannot be read; use a new command id"])
    }).pipe(Effect.provide(h.layer))
  })

  it("the fingerprint covers every field but the command id", () => {
    const base = { commandId: "c1" as CommandId, threadId: "thr_1" as ThreadId, text: "a" }
    const fp = (c: Commands.Command) => CommandReceipts.fingerprint(c)
    expect(fp(Commands.SendMessage.make(base))).toBe(fp(Commands.SendMessage.make({ ...base, commandId: "c2" as CommandId })))
    expect(fp(Commands.SendMessage.make(base))).not.toBe(fp(Commands.SendMessage.make({ ...base, text: "b" })))
    expect(fp(Commands.SendMessage.make(base))).not.toBe(fp(Commands.SendMessage.make({ ...base, threadId: "thr_2" as ThreadId })))
    expect(fp(Commands.CompactThread.make({ commandId: "c1" as CommandId, threadId: "thr_1" as ThreadId })))
      .not.toBe(fp(Commands.MergeBack.make({ commandId: "c1" as CommandId, forkThreadId: "thr_1" as ThreadId })))
  })
  it("the fingerprint of a command is the one receipts were stored with: the text is unchanged on any value, the digest pinned", () => {
    // The canonical text as it was first written (map/filter/join): receipts already stored hold its digests.
    const earlier = (value: unknown): string =>
      Array.isArray(value)
        ? `[${value.map(earlier).join(",")}]`
        : typeof value === "object" && value !== null
        ? `{${
          Object.keys(value).filter((k) => (value as Record<string, unknown>)[k] !== undefined).sort()
            .map((k) => `${JSON.stringify(k)}:${earlier((value as Record<string, unknown>)[k])}`).join(",")
        }}`
        : JSON.stringify(value)
    FastCheck.assert(FastCheck.property(FastCheck.anything({ withNullPrototype: true, withSparseArray: true }), (v) => {
      expect(CommandReceipts.canonical(v)).toBe(earlier(v))
    }), { numRuns: 2_000 })
    for (const v of [[undefined, 1], { a: undefined, b: [undefined] }, [() => 1], { f: () => 1 }, -0, NaN, "é\u2028"]) {
      expect(CommandReceipts.canonical(v)).toBe(earlier(v))
    }
    // A send with tools, as fingerprinted before this form (main at ce812cd).
    const send = Commands.SendMessage.make({
      commandId: "c1" as CommandId,
      threadId: "thr_1" as ThreadId,
      text: "Step 1: continue with the plan. é ✓",
      tools: [{ name: "read_file", description: "Reads a file", inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } }] as never
    })
    expect(CommandReceipts.fingerprint(send)).toBe("210bd61baa958680e2946ceee8797f26a1374df1267f682ee040c4a804368308")
  })
})
