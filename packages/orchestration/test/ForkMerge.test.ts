import { Commands, type CommandId, type ThreadId } from "@baton/contracts"
import type { ProviderAdapter } from "@baton/providers"
import { Harness } from "@baton/testing"
import { describe, expect, it, beforeAll } from "@effect/vitest"
import { Deferred, Effect, Fiber, Stream } from "effect"

const ops = Harness.ops

const providers = () =>
  Harness.make([
    { name: "codex", window: 200_000, inject: true },
    { name: "claude", window: 200_000, inject: false },
    { name: "small", window: 24_000, inject: false }
  ])

/** A parent thread on codex with three completed runs ("p1".."p3"), each answered by a ~`tokens` reply. */
const parentWithRuns = (h: Harness.Harness, tokens = 40) =>
  Effect.gen(function*() {
    const o = yield* ops
    const threadId = yield* o.create("codex")
    for (const p of ["p1", "p2", "p3"]) {
      h.script.enqueue(Harness.reply(tokens))
      expect((yield* o.send(threadId, `parent prompt ${p}`)).status).toBe("completed")
    }
    return threadId
  })

const inlineOf = (h: Harness.Harness, provider: string, runId: string) =>
  h.providers[provider]!.received.flatMap((r) => r.type === "turn" && r.runId === runId ? [r.inlineHistory] : [])

const injectedInto = (h: Harness.Harness, provider: string) =>
  h.providers[provider]!.received.flatMap((r) => r.type === "inject" ? [r] : [])

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  describe("fork", () => {
    it.effect("copies the parent's history through the fork point and delivers it to the fork once", () => {
      const h = providers()
      return Effect.gen(function*() {
        const o = yield* ops
        const parent = yield* parentWithRuns(h)
        const parentItems = (yield* o.store.listItems(parent)).length
        const forked = yield* o.fork(parent, { atRunSeq: 2, provider: "claude" })
        expect(forked.atRunSeq).toBe(2)
        // Runs 1 and 2 of the parent: a user message and a reply each.
        expect(forked.itemCount).toBe(4)
        expect(forked.handoffId).not.toBeNull()
        const forkId = forked.threadId as ThreadId

        const forkRuns = yield* o.store.listRuns(forkId)
        expect(forkRuns.map((r) => [r.seq, r.status, r.prompt, r.stopPoint])).toEqual([[1, "completed", "", "before_provider"]])
        const copies = yield* o.store.listItems(forkId)
        expect(copies.map((i) => i.kind)).toEqual(["handoff_marker", "user_message", "assistant_message", "user_message", "assistant_message"])
        expect(copies[1]!.text).toBe("parent prompt p1")
        expect(copies[3]!.text).toBe("parent prompt p2")
        expect(copies[0]!.text).toContain(`Forked from thread ${parent} at runs 1–2: 4 earlier item(s)`)
        // The parent is untouched: same items, originals readable by id.
        expect((yield* o.store.listItems(parent)).length).toBe(parentItems)

        h.script.enqueue(Harness.reply(20))
        const first = yield* o.send(forkId, "fork prompt f1")
        expect(first.status).toBe("completed")
        expect(first.runSeq).toBe(2)
        expect(first.turnStart?.mode).toBe("inline")
        expect(first.turnStart?.deliveredItems).toBe(4)
        const inline = inlineOf(h, "claude", first.runId)[0]!
        expect(inline).toContain("parent prompt p1")
        expect(inline).toContain("parent prompt p2")
        expect(inline).not.toContain("parent prompt p3")
        expect(inline).not.toContain("Forked from thread")

        h.script.enqueue(Harness.reply(20))
        const second = yield* o.send(forkId, "fork prompt f2")
        expect(second.turnStart?.mode).toBe("none")
        expect(inlineOf(h, "claude", second.runId)).toEqual([null])
        expect(yield* o.check(forkId, h)).toEqual([])
        expect(yield* o.check(parent, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })

    it.effect("a switch inside the fork forwards the copied history; coming back owes it once", () => {
      const h = providers()
      return Effect.gen(function*() {
        const o = yield* ops
        const parent = yield* parentWithRuns(h)
        const forkId = (yield* o.fork(parent, { provider: "codex" })).threadId as ThreadId
        // Moved to claude before codex ever drained the fork handoff.
        const moved = yield* o.switchTo(forkId, "claude")
        expect(moved.handoffId).not.toBeNull()
        h.script.enqueue(Harness.reply(20))
        const onClaude = yield* o.send(forkId, "fork prompt on claude")
        expect(onClaude.turnStart?.deliveredItems).toBe(6)
        expect(inlineOf(h, "claude", onClaude.runId)[0]).toContain("parent prompt p3")

        yield* o.switchTo(forkId, "codex")
        h.script.enqueue(Harness.reply(20))
        const back = yield* o.send(forkId, "fork prompt back on codex")
        expect(back.turnStart?.mode).toBe("injected")
        const injected = injectedInto(h, "codex").flatMap((i) => i.itemIds)
        // The six copied items and the claude run's two, each injected once.
        expect(injected.length).toBe(8)
        expect(new Set(injected).size).toBe(8)
        expect(yield* o.check(forkId, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })

    it.effect("a fork whose history does not fit its provider's budget is delivered in part, the rest omitted by ref; the prompt goes out unchanged", () => {
      const h = providers()
      return Effect.gen(function*() {
        const o = yield* ops
        const parent = yield* parentWithRuns(h, 6_000)
        const forked = yield* o.fork(parent, { provider: "small" })
        expect(forked.tokens).toBeGreaterThan(18_000)
        const forkId = forked.threadId as ThreadId
        h.script.enqueue(Harness.reply(20))
        const first = yield* o.send(forkId, "fork prompt on a small window")
        expect(first.status).toBe("completed")
        // Window 24,000 - reserve 16,000 - the prompt leaves a budget under 8,000: the newest user message and what
        // else fits are delivered, each 6,000-token reply that does not fit is omitted whole (readable by id).
        const report = first.turnStart!
        expect(report.budget.budget).toBeLessThan(8_000)
        expect(report.mode).toBe("inline")
        expect(report.deliveredTokens).toBeLessThanOrEqual(report.budget.budget)
        expect(report.omittedItems).toBeGreaterThan(0)
        const turn = h.providers.small!.received.find((r) => r.type === "turn" && r.runId === first.runId)
        expect(turn?.type === "turn" && turn.prompt).toBe("fork prompt on a small window")
        expect(turn?.type === "turn" && turn.inlineHistory).toContain("parent prompt p3")
        expect(yield* o.check(forkId, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })

    it.effect("rejects a fork point past the last run or inside a run in progress, an unknown thread, and replays a retried command", () => {
      const h = providers()
      return Effect.gen(function*() {
        const o = yield* ops
        const parent = yield* parentWithRuns(h)
        const past = yield* Effect.flip(o.fork(parent, { atRunSeq: 4 }))
        expect(past._tag).toBe("InvalidRequest")
        expect(past.message).toContain("it has 3 run(s)")
        const queued = yield* o.service.enqueueMessage(Commands.SendMessage.make({ commandId: "q1" as CommandId, threadId: parent, text: "queued" }))
        const inside = yield* Effect.flip(o.fork(parent, { atRunSeq: 4 }))
        expect(inside.message).toContain(`run ${queued.seq} has not ended`)
        // The default fork point skips the run in progress.
        const atDefault = yield* o.fork(parent)
        expect(atDefault.atRunSeq).toBe(3)
        const unknown = yield* Effect.flip(o.fork("thr_nope" as ThreadId))
        expect(unknown._tag).toBe("ThreadNotFound")
        const notAFork = yield* Effect.flip(o.merge(parent))
        expect(notAFork._tag).toBe("InvalidRequest")
        expect(notAFork.message).toContain("is not a fork")

        const command = Commands.ForkThread.make({ commandId: "fork-once" as CommandId, threadId: parent, atRunSeq: 1 })
        const a = yield* o.service.fork(command)
        const b = yield* o.service.fork(command)
        expect(b).toEqual(a)
        expect((yield* o.service.listThreads()).length).toBe(3)
      }).pipe(Effect.provide(h.layer))
    })
  })

  describe("merge-back", () => {
    it.effect("brings the fork's new runs into the parent once; merging again merges only what is new", () => {
      const h = providers()
      return Effect.gen(function*() {
        const o = yield* ops
        const parent = yield* parentWithRuns(h)
        const forkId = (yield* o.fork(parent, { provider: "claude" })).threadId as ThreadId
        for (const p of ["f1", "f2"]) {
          h.script.enqueue(Harness.reply(30))
          yield* o.send(forkId, `fork prompt ${p}`)
        }
        const merged = yield* o.merge(forkId)
        expect(merged).toMatchObject({ parentThreadId: parent, fromRunSeq: 1, throughRunSeq: 3, itemCount: 4 })
        expect(merged.handoffId).not.toBeNull()
        const parentRuns = yield* o.store.listRuns(parent)
        expect(parentRuns.map((r) => r.seq)).toEqual([1, 2, 3, 4])
        expect(parentRuns[3]!.prompt).toBe("")

        h.script.enqueue(Harness.reply(20))
        const next = yield* o.send(parent, "parent prompt p5")
        expect(next.runSeq).toBe(5)
        expect(next.turnStart).toMatchObject({ mode: "injected", deliveredItems: 4 })
        const injection = injectedInto(h, "codex").at(-1)!
        expect(injection.rendered).toContain("fork prompt f1")
        expect(injection.rendered).toContain("fork prompt f2")
        expect(injection.rendered).not.toContain("parent prompt p1")

        const again = yield* o.merge(forkId)
        expect(again).toMatchObject({ runId: null, fromRunSeq: 3, throughRunSeq: 3, itemCount: 0, handoffId: null })

        h.script.enqueue(Harness.reply(30))
        yield* o.send(forkId, "fork prompt f3")
        const third = yield* o.merge(forkId)
        expect(third).toMatchObject({ fromRunSeq: 3, throughRunSeq: 4, itemCount: 2 })
        h.script.enqueue(Harness.reply(20))
        const after = yield* o.send(parent, "parent prompt p7")
        expect(after.turnStart?.deliveredItems).toBe(2)
        const all = injectedInto(h, "codex").flatMap((i) => i.itemIds)
        expect(new Set(all).size).toBe(all.length)
        h.script.enqueue(Harness.reply(20))
        expect((yield* o.send(parent, "parent prompt p8")).turnStart?.mode).toBe("none")
        expect(yield* o.check(parent, h)).toEqual([])
        expect(yield* o.check(forkId, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })

    it.effect("merges from two forks reach the parent's next turn together, each item once", () => {
      const h = providers()
      return Effect.gen(function*() {
        const o = yield* ops
        const parent = yield* parentWithRuns(h)
        const a = (yield* o.fork(parent, { provider: "claude" })).threadId as ThreadId
        const b = (yield* o.fork(parent, { atRunSeq: 1, provider: "codex" })).threadId as ThreadId
        h.script.enqueue(Harness.reply(30))
        yield* o.send(a, "fork A works")
        h.script.enqueue(Harness.reply(30))
        yield* o.send(b, "fork B works")
        const fromA = yield* o.merge(a)
        const fromB = yield* o.merge(b)
        expect([fromA.itemCount, fromB.itemCount]).toEqual([2, 2])
        expect(fromA.handoffId).not.toBe(fromB.handoffId)

        h.script.enqueue(Harness.reply(20))
        const next = yield* o.send(parent, "parent after two merges")
        expect(next.turnStart).toMatchObject({ mode: "injected", deliveredItems: 4 })
        const rendered = injectedInto(h, "codex").at(-1)!.rendered
        expect(rendered).toContain("fork A works")
        expect(rendered).toContain("fork B works")
        // One handoff record per merge, none per turn.
        const handoffs = yield* o.store.listHandoffs(parent)
        expect(handoffs.filter((x) => x.kind === "merge").length).toBe(2)
        expect(yield* o.check(parent, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })

    it.effect("a merge-back recorded while a run is queued on the parent reaches the next run, in record order", () => {
      const h = providers()
      return Effect.gen(function*() {
        const o = yield* ops
        const parent = yield* parentWithRuns(h)
        const forkId = (yield* o.fork(parent, { provider: "claude" })).threadId as ThreadId
        h.script.enqueue(Harness.reply(30))
        yield* o.send(forkId, "fork result")
        const queued = yield* o.service.enqueueMessage(Commands.SendMessage.make({ commandId: "queued-p4" as CommandId, threadId: parent, text: "queued before the merge" }))
        const merged = yield* o.merge(forkId)
        expect((yield* o.store.getRun(merged.runId as never)).pipe((r) => r._tag === "Some" ? r.value.seq : null)).toBe(5)
        expect(merged.behindRunId).toBe(queued.id)
        h.script.enqueue(Harness.reply(20))
        const first = yield* o.service.processRun(queued.id)
        expect(first.runSeq).toBe(4)
        expect(first.turnStart?.deliveredItems).toBe(0)
        // The merge's copies follow the queued run's prompt and answer, as a message queued behind it would.
        const order = (yield* o.store.listItems(parent)).slice(-5).map((i) => [i.runId === queued.id ? 4 : i.runId === merged.runId ? 5 : 0, i.kind])
        expect(order).toEqual([[4, "user_message"], [4, "assistant_message"], [5, "handoff_marker"], [5, "user_message"], [5, "assistant_message"]])
        h.script.enqueue(Harness.reply(20))
        const next = yield* o.send(parent, "after the merge")
        expect(next.runSeq).toBe(6)
        expect(next.turnStart).toMatchObject({ mode: "injected", deliveredItems: 2 })
        expect(yield* o.check(parent, h)).toEqual([])
      }).pipe(Effect.provide(h.layer))
    })

    it.effect("a merge-back during a running turn on the parent is delivered at the next turn, not into the running one", () => {
      const base = providers()
      return Effect.gen(function*() {
        const entered = yield* Deferred.make<string>()
        const gate = yield* Deferred.make<void>()
        let holdNext = false
        const codex = base.providers.codex!
        // The parent's provider holds one turn open until the test releases it.
        const held: ProviderAdapter.ProviderAdapterShape = {
          ...codex,
          startTurn: (input) =>
            holdNext
              ? Stream.unwrap(Effect.zipRight(
                Effect.zipRight(Deferred.succeed(entered, input.runId), Deferred.await(gate)),
                Effect.sync(() => {
                  holdNext = false
                  return codex.startTurn(input)
                })
              ))
              : codex.startTurn(input)
        }
        const layer = Harness.makeLayer([held, base.providers.claude!, base.providers.small!], base.counter, Harness.currentDb(), {})
        yield* Effect.gen(function*() {
          const o = yield* ops
          const parent = yield* parentWithRuns(base)
          const forkId = (yield* o.fork(parent, { provider: "claude" })).threadId as ThreadId
          base.script.enqueue(Harness.reply(30))
          yield* o.send(forkId, "fork finds the bug")

          holdNext = true
          base.script.enqueue(Harness.reply(20))
          const running = yield* Effect.fork(o.send(parent, "parent long turn"))
          const runId = yield* Deferred.await(entered)
          expect((yield* o.store.getRun(runId as never)).pipe((r) => r._tag === "Some" ? r.value.status : null)).toBe("running")

          const merged = yield* o.merge(forkId)
          // Behind the running turn: the merge run is written, its copies and handoff owed till the turn ends.
          expect(merged).toMatchObject({ throughRunSeq: 2, itemCount: 2, handoffId: null, behindRunId: runId })
          expect(yield* o.store.listItemsOfRuns([merged.runId as never])).toEqual([])
          yield* Deferred.succeed(gate, undefined)
          const finished = yield* Fiber.join(running)
          expect(finished.status).toBe("completed")
          expect(finished.runSeq).toBe(4)
          expect(finished.turnStart?.deliveredItems).toBe(0)
          // The turn's prompt and answer, then the merge's marker and copies: nothing merged inside the turn's span
          // (the copies took seqs between its prompt and its answer: the record read as if the model saw them).
          const items = yield* o.store.listItems(parent)
          const label = (runIdOf: string | null) => runIdOf === runId ? "run 4" : runIdOf === merged.runId ? "merge" : "earlier"
          expect(items.slice(-5).map((i) => [label(i.runId), i.kind])).toEqual([
            ["run 4", "user_message"],
            ["run 4", "assistant_message"],
            ["merge", "handoff_marker"],
            ["merge", "user_message"],
            ["merge", "assistant_message"]
          ])
          const link = (yield* o.store.listLinks(parent)).find((l) => l.kind === "merge")!
          expect(link.handoffId).not.toBeNull()
          expect(yield* o.store.listPromptOwedRuns(parent)).toEqual([])

          base.script.enqueue(Harness.reply(20))
          const next = yield* o.send(parent, "parent next turn")
          expect(next.runSeq).toBe(6)
          expect(next.turnStart).toMatchObject({ mode: "injected", deliveredItems: 2 })
          expect(injectedInto(base, "codex").at(-1)!.rendered).toContain("fork finds the bug")
          base.script.enqueue(Harness.reply(20))
          expect((yield* o.send(parent, "and again")).turnStart?.mode).toBe("none")
          expect(yield* o.check(parent, base)).toEqual([])
        }).pipe(Effect.provide(layer))
      })
    })
  })
})
