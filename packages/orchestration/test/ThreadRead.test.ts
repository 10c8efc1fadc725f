/**
 * `thread_read` (issue "Real model providers", item 3): refs, paging by characters, answers a model can act on.
 */
import type { ThreadId } from "@baton/contracts"
import { ThreadRead } from "@baton/orchestration"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"

const ops = Harness.ops

describe("thread_read refs", () => {
  // Found by a review (stop 35): the tool's description named "#12", "#4-#9" and "run:3" but not the refs the stubs
  // write ("tool:<call id>" of a tool-result offload, "archive:<offload id>" of an /offload summary), so a model
  // learned them only from a stub's text.
  it("the tool's description names every kind of ref the parser takes, each example parsing to its kind", () => {
    const described = `${ThreadRead.definition.description} ${JSON.stringify(ThreadRead.definition.inputSchema)}`
    const examples = { range: "#4-#9", run: "run:3", tool: "tool:<call id>", archive: "archive:<offload id>", id: "item ids" }
    for (const example of Object.values(examples)) expect(described).toContain(example)
    const concrete = { range: "#4-#9", run: "run:3", tool: "tool:call_1", archive: "archive:off_1", id: "itm_1" }
    expect(Object.entries(concrete).map(([kind, ref]) => [kind, Either.map(ThreadRead.parseRefs(ref), (refs) => refs.map((r) => r._tag))]))
      .toEqual(Object.keys(concrete).map((kind) => [kind, Either.right([kind])]))
  })

  it("parses single refs, ranges, lists and item ids; names a bad part", () => {
    expect(ThreadRead.parseRefs("#12")).toEqual(Either.right([{ _tag: "range", from: 12, to: 12 }]))
    expect(ThreadRead.parseRefs("#4-#9, #12 itm_abc")).toEqual(Either.right([
      { _tag: "range", from: 4, to: 9 },
      { _tag: "range", from: 12, to: 12 },
      { _tag: "id", id: "itm_abc" }
    ]))
    expect(ThreadRead.parseRefs("#4-9")).toEqual(Either.right([{ _tag: "range", from: 4, to: 9 }]))
    // Any id a provider gave, as a stub's ref names it (found by a review: "functions.read_file:0" was refused).
    expect(ThreadRead.parseRefs("tool:functions.read_file:0, tool:call|fc_1")).toEqual(Either.right([
      { _tag: "tool", toolCallId: "functions.read_file:0" },
      { _tag: "tool", toolCallId: "call|fc_1" }
    ]))
    expect(ThreadRead.parseRefs("#9-#4")).toEqual(Either.left(`"#9-#4" is not a range of item positions (#from-#to, from 1, from <= to)`))
    expect(ThreadRead.parseRefs("all of it")).toEqual(Either.left(`"all" is not a ref (use "#12", "#4-#9", "run:3", "tool:<call id>", "archive:<offload id>" or an item id)`))
    // An /offload's archive (the originals its summary replaced).
    expect(ThreadRead.parseRefs("archive:off_12, #3")).toEqual(Either.right([{ _tag: "archive", offloadId: "off_12" }, { _tag: "range", from: 3, to: 3 }]))
    expect(ThreadRead.parseRefs("archive:")).toEqual(Either.left(`"archive:" is not a ref (use "#12", "#4-#9", "run:3", "tool:<call id>", "archive:<offload id>" or an item id)`))
    expect(ThreadRead.parseRefs(" ")).toEqual(Either.left("no ref given"))
    expect(ThreadRead.parseRefs("run:2, #3")).toEqual(Either.right([{ _tag: "run", seq: 2 }, { _tag: "range", from: 3, to: 3 }]))
    expect(ThreadRead.parseRefs("run:0")).toEqual(Either.left(`"run:0" is not a run (runs are numbered from 1)`))
    expect(ThreadRead.parseRefs("tool:toolu_r7, #3")).toEqual(Either.right([
      { _tag: "tool", toolCallId: "toolu_r7" },
      { _tag: "range", from: 3, to: 3 }
    ]))
  })
})

describe("thread_read pages", () => {
  it("never split a character: a boundary inside a surrogate pair moves to the pair's start, the pages join to the whole", () => {
    // Before: "😀" paged by 1 gave "\ud83d" then "\ude00", lone surrogates a provider API refuses as invalid Unicode.
    const text = "😀a😀b😀"
    const again = (next: number) => `next ${next}`
    expect(ThreadRead.page(text, 0, 1, again)).toBe("😀\n[characters 0-2 of 8; the next page: next 2]")
    expect(ThreadRead.page(text, 1, 2, again)).toBe("😀\n[characters 0-2 of 8; the next page: next 2]")
    expect(ThreadRead.page(text, 2, 2, again)).toBe("a\n[characters 2-3 of 8; the next page: next 3]")
    const pages: Array<string> = []
    for (let offset: number | null = 0; offset !== null;) {
      const out = ThreadRead.page(text, offset, 1, (next) => String(next))
      const body = out.slice(0, out.lastIndexOf("\n["))
      expect(body.length > 0 && ![...body].some((c) => c.length === 1 && c.charCodeAt(0) >= 0xd800 && c.charCodeAt(0) <= 0xdfff)).toBe(true)
      pages.push(body)
      const m = /the next page: (\d+)\]$/.exec(out)
      offset = m === null ? null : Number(m[1])
    }
    expect(pages.join("")).toBe(text)
  })
})

describe("thread_read on a thread", () => {
  const threadOf = (h: Harness.Harness) =>
    Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue(Harness.reply(10))
      yield* o.send(t, "first question")
      h.script.enqueue(Harness.reply(5_000))
      yield* o.send(t, "print the whole log")
      return t
    })

  it.effect("reads a tool call and its result back by a tool-result offload stub's ref (tool:<call id>)", () => {
    const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }])
    return Effect.gen(function*() {
      const o = yield* ops
      const t = yield* o.create("codex")
      h.script.enqueue({
        items: [
          Harness.produced("tool_call", "{\"cmd\":\"cat a.ts\"}", { toolCallId: "toolu_r7", toolName: "bash" }),
          Harness.produced("tool_result", "export const a = 1\n".repeat(50), { toolCallId: "toolu_r7", toolName: "bash" }),
          Harness.produced("tool_call", "{\"cmd\":\"ls\"}", { toolCallId: "toolu_r8", toolName: "bash" }),
          Harness.produced("tool_result", "a.ts", { toolCallId: "toolu_r8", toolName: "bash" }),
          Harness.produced("assistant_message", "done")
        ]
      })
      yield* o.send(t, "show a.ts")
      const items = yield* o.store.listItems(t)
      const read = yield* ThreadRead.ThreadRead
      const answer = yield* read.read(t, JSON.stringify({ refs: "tool:toolu_r7", limit: 32_000 }))
      const call = items.find((i) => i.toolCallId === "toolu_r7" && i.kind === "tool_call")!
      const result = items.find((i) => i.toolCallId === "toolu_r7" && i.kind === "tool_result")!
      expect(answer).toContain(call.text)
      expect(answer).toContain(result.text)
      expect(answer).not.toContain("a.ts\n[")
      expect(answer).not.toContain("{\"cmd\":\"ls\"}")
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("reads items by position, by run and by id, rendered as history blocks", () => {
    const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }])
    return Effect.gen(function*() {
      const t = yield* threadOf(h)
      const read = yield* ThreadRead.ThreadRead
      const items = yield* (yield* ops).store.listItems(t)
      const answer = yield* read.read(t, JSON.stringify({ refs: "#1-#2" }))
      const body = `[user #1]\nfirst question\n\n[assistant #2]\n${items[1]!.text}`
      expect(answer).toBe(`${body}\n[characters 0-${body.length} of ${body.length}; end]`)
      // A legacy pointer's arguments (`itemIds`) still work.
      const byId = yield* read.read(t, JSON.stringify({ threadId: t, itemIds: [items[0]!.id] }))
      expect(byId.startsWith("[user #1]\nfirst question")).toBe(true)
      // A run by its number: its prompt and everything it produced, nothing of other runs.
      const second = yield* read.read(t, JSON.stringify({ refs: "run:2", limit: 32_000 }))
      expect(second.startsWith("[user #3]\nprint the whole log\n\n[assistant #4]\n")).toBe(true)
      expect(second).not.toContain("first question")
      expect(yield* read.read(t, JSON.stringify({ refs: "run:9" }))).toBe("thread_read: no item of this conversation matches run:9")
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("pages a large original by characters: every page fits the limit, the pages join to the whole", () => {
    const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }])
    return Effect.gen(function*() {
      const t = yield* threadOf(h)
      const read = yield* ThreadRead.ThreadRead
      const big = (yield* (yield* ops).store.listItems(t))[3]!
      const pages: Array<string> = []
      let offset: number | null = 0
      while (offset !== null) {
        const answer: string = yield* read.read(t, JSON.stringify({ refs: "#4", offset, limit: 8_000 }))
        const footer = /\n\[characters (\d+)-(\d+) of (\d+); (?:the next page: thread_read (\{.*\})|end)\]$/.exec(answer)!
        expect(footer).not.toBeNull()
        const body = answer.slice(0, footer.index)
        expect(body.length).toBeLessThanOrEqual(8_000)
        pages.push(body)
        offset = footer[4] === undefined ? null : (JSON.parse(footer[4]) as { offset: number }).offset
      }
      expect(pages.length).toBeGreaterThan(3)
      expect(pages.join("")).toBe(`[assistant #${big.seq}]\n${big.text}`)
    }).pipe(Effect.provide(h.layer))
  })

  it.effect("bad calls are answered with what to do, never a failure", () => {
    const h = Harness.make([{ name: "codex", window: 1_000_000, inject: true }])
    return Effect.gen(function*() {
      const t = yield* threadOf(h)
      const read = yield* ThreadRead.ThreadRead
      expect(yield* read.read(t, "not json")).toBe(`thread_read: the arguments are not {"refs": "...", "offset"?: n, "limit"?: n}`)
      expect(yield* read.read(t, JSON.stringify({ refs: "#99" }))).toBe("thread_read: no item of this conversation matches #99")
      expect(yield* read.read(t, JSON.stringify({ refs: "#x" }))).toBe(`thread_read: "#x" is not a ref (use "#12", "#4-#9", "run:3", "tool:<call id>", "archive:<offload id>" or an item id)`)
      // Another thread's item is not readable from this one.
      const other = yield* (yield* ops).create("codex")
      h.script.enqueue(Harness.reply(3))
      yield* (yield* ops).send(other, "elsewhere")
      const foreign = (yield* (yield* ops).store.listItems(other))[0]!
      expect(yield* read.read(t as ThreadId, JSON.stringify({ refs: foreign.id }))).toBe(`thread_read: no item of this conversation matches ${foreign.id}`)
    }).pipe(Effect.provide(h.layer))
  })
})
