/**
 * The dashboard's pure parts: the SSE parser across chunk boundaries, the conversation's rows (a tool call and its
 * result on one line, a header where the run changes), and the occupancy fold (one point per run: the last usage the
 * run's native thread reported; an untrusted report plotted at Baton's estimate).
 */
import { describe, expect, it } from "@effect/vitest"
import { chartTitle, contextFill, EventFold, firstWindow, runInProgress, toRows } from "../src/model.js"
import { parseChunk } from "../src/sse.js"
import type { EventJson, ItemJson, RunJson, SnapshotJson } from "../src/types.js"

const item = (seq: number, kind: ItemJson["kind"], runId: string | null, extra: Partial<ItemJson> = {}): ItemJson => ({
  id: `itm_${seq}`,
  threadId: "thr_1",
  runId,
  seq,
  kind,
  text: `text ${seq}`,
  toolCallId: null,
  toolName: null,
  messageId: null,
  isError: false,
  toolCallState: null,
  tokens: 1,
  createdAt: "2026-12-02T10:00:00.000Z",
  ...extra
})

let seq = 0
const event = (type: string, payload: Record<string, unknown>): EventJson =>
  ({ eventId: `evt_${++seq}`, threadId: "thr_1", seq, globalSeq: seq, commandId: null, createdAt: "2026-12-02T10:00:00.000Z", type, payload }) as unknown as EventJson

describe("parseChunk", () => {
  it("emits complete events only, across chunk boundaries, ignoring comments", () => {
    const got: Array<{ id: string | null; type: string; data: string }> = []
    const text = ": heartbeat\n\nid: 1\nevent: run.queued\ndata: {\"a\":1}\n\nid: 2\nevent: run.started\ndata: {\"b\":2}\n\n"
    let rest = ""
    for (const piece of [text.slice(0, 20), text.slice(20, 61), text.slice(61)]) rest = parseChunk(rest + piece, (e) => got.push(e))
    expect(rest).toBe("")
    expect(got).toEqual([
      { id: "1", type: "run.queued", data: "{\"a\":1}" },
      { id: "2", type: "run.started", data: "{\"b\":2}" }
    ])
  })
})

describe("toRows", () => {
  it("puts a tool call and its result on one row, a header where the run changes", () => {
    const rows = toRows([
      item(1, "user_message", "run_a"),
      item(2, "tool_call", "run_a", { toolCallId: "call_1", toolName: "bash" }),
      item(3, "tool_result", "run_a", { toolCallId: "call_1" }),
      item(4, "tool_call", "run_a", { toolCallId: "call_2", toolName: "read", toolCallState: "dangling" }),
      item(5, "handoff_marker", null),
      item(6, "summary", "run_b")
    ])
    expect(rows.map((r) => r.kind === "run" ? `run ${r.runId}` : r.kind === "tool" ? `tool ${r.call.seq}→${r.result?.seq ?? "none"}` : `${r.item.kind} ${r.item.seq}`))
      .toEqual(["run run_a", "user_message 1", "tool 2→3", "tool 4→none", "run null", "handoff_marker 5", "run run_b", "summary 6"])
  })
})

describe("EventFold", () => {
  it("one point per run: the last usage its native thread reported, untrusted ones at the estimate", () => {
    const fold = new EventFold()
    const events = [
      event("run.queued", { runId: "run_1", seq: 1, providerThreadId: "pth_1" }),
      event("run.started", { runId: "run_1", nativeThreadId: "nat_1", attempt: 1 }),
      event("delivery.pending", { deliveryId: "dlv_1", handoffId: "hof_1", mode: "inline", runId: "run_1", budget: 9000, renderedTokens: 10, itemIds: [], omittedItemIds: [] }),
      event("usage.reported", { nativeThreadId: "nat_1", usage: { usedTokens: 100, maxTokens: 44000, autoCompactThreshold: 42000 }, trusted: true }),
      event("usage.reported", { nativeThreadId: "nat_1", usage: { usedTokens: 150, maxTokens: 44000, autoCompactThreshold: 42000 }, trusted: true }),
      event("run.queued", { runId: "run_2", seq: 2, providerThreadId: "pth_1" }),
      event("run.started", { runId: "run_2", nativeThreadId: "nat_1", attempt: 1 }),
      event("usage.reported", { nativeThreadId: "nat_1", usage: { usedTokens: -5 }, trusted: false, anomaly: "negative", estimateUsed: 180 }),
      event("thread.compacted", { nativeThreadId: "nat_1", usedBefore: 180, usedAfter: 20, delivered: 0 })
    ]
    for (const e of events) fold.apply(e)
    expect(fold.pointsByNativeThread().get("nat_1")).toEqual([
      { runId: "run_1", runSeq: 1, nativeThreadId: "nat_1", usedTokens: 150, maxTokens: 44000, autoCompactThreshold: 42000, trusted: true, budget: 9000 },
      { runId: "run_2", runSeq: 2, nativeThreadId: "nat_1", usedTokens: 180, maxTokens: null, autoCompactThreshold: null, trusted: false, budget: null }
    ])
    expect(fold.marks).toEqual([{ nativeThreadId: "nat_1", runSeq: 2, kind: "compacted", detail: "180 → 20 tokens, 0 delivered" }])
    expect(fold.deliverySteps.get("dlv_1")?.map((s) => s.type)).toEqual(["delivery.pending"])
  })

  it("a gateway conversation: each request's reported usage a point of its instance's chart, a flush marked after the run before it", () => {
    const fold = new EventFold()
    const usage = (runId: string, providerInstance: string, cacheRead: number) =>
      event("gateway.usage", { runId, providerInstance, inputTokens: 10, cacheWriteTokens: 200, cacheReadTokens: cacheRead, outputTokens: 50, windowTokens: 200000 })
    const events = [
      event("run.queued", { runId: "run_1", seq: 1, providerThreadId: "pth_1" }),
      usage("run_1", "anthropic", 0),
      event("run.queued", { runId: "run_2", seq: 2, providerThreadId: "pth_1" }),
      event("gateway.offloaded", { runId: "run_2", refs: ["tool:toolu_1", "tool:toolu_2"], tier: "mild", tokensBefore: 30000, tokensAfter: 9000 }),
      usage("run_2", "anthropic", 9000),
      event("run.queued", { runId: "run_3", seq: 3, providerThreadId: "pth_2" }),
      usage("run_3", "openai", 500),
      // Hidden thread_read rounds: the figures are both requests' sum; the point is what the last one carried.
      event("run.queued", { runId: "run_4", seq: 4, providerThreadId: "pth_2" }),
      event("gateway.usage", { runId: "run_4", providerInstance: "openai", inputTokens: 20, cacheWriteTokens: 0, cacheReadTokens: 1500, outputTokens: 30, windowTokens: 200000, carriedTokens: 800 })
    ]
    for (const e of events) fold.apply(e)
    expect([...fold.pointsByNativeThread().entries()].map(([chart, points]) => [chart, points.map((p) => [p.runSeq, p.usedTokens, p.maxTokens])])).toEqual([
      ["gateway:anthropic", [[1, 210, 200000], [2, 9210, 200000]]],
      ["gateway:openai", [[3, 710, 200000], [4, 800, 200000]]]
    ])
    expect(fold.marks).toEqual([{ nativeThreadId: "gateway:anthropic", runSeq: 1, kind: "tool results offloaded", detail: "2 tool results stubbed (mild): 30000 → 9000 tokens" }])
    expect([...fold.stubbed]).toEqual(["toolu_1", "toolu_2"])
    // The JSON form (what GET /threads/{id}/timeline answers) continues the same fold.
    expect(EventFold.fromJson(fold.toJson()).toJson()).toEqual(fold.toJson())
    expect(chartTitle("gateway:openai", new Map())).toBe("openai requests (gateway)")
    expect(chartTitle("nat_1", new Map([["nat_1", "claude gen 1"]]))).toBe("claude gen 1")
  })
  it("a gateway flush is marked on the chart of the instance its request went to, not on every chart (a switched conversation)", () => {
    const usage = (runId: string, providerInstance: string) =>
      event("gateway.usage", { runId, providerInstance, inputTokens: 10, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 5, windowTokens: 100000 })
    const flush = (runId: string, ref: string) => event("gateway.offloaded", { runId, refs: [ref], tier: "mild", tokensBefore: 50000, tokensAfter: 9000 })
    const events = [
      event("run.queued", { runId: "run_1", seq: 1, providerThreadId: "pth_1" }),
      flush("run_1", "tool:toolu_a"),
      usage("run_1", "anthropic"),
      event("run.queued", { runId: "run_2", seq: 2, providerThreadId: "pth_2" }),
      usage("run_2", "local"),
      event("run.queued", { runId: "run_3", seq: 3, providerThreadId: "pth_2" }),
      flush("run_3", "tool:toolu_b"),
      usage("run_3", "local"),
      // A flush whose request got no answer (an upstream error): no instance names it, it stays on every chart.
      event("run.queued", { runId: "run_4", seq: 4, providerThreadId: "pth_2" }),
      flush("run_4", "tool:toolu_c")
    ]
    const byChart = (fold: EventFold) => fold.marks.map((m) => [m.nativeThreadId, m.runSeq])
    const whole = new EventFold()
    for (const e of events) whole.apply(e)
    expect(byChart(whole)).toEqual([["gateway:anthropic", 0], ["gateway:local", 2], ["", 3]])
    // The server's fold cut between a flush and its request's usage, continued by the live events after it.
    for (let cut = 1; cut < events.length; cut++) {
      const first = new EventFold()
      for (const e of events.slice(0, cut)) first.apply(e)
      const continued = EventFold.fromJson(first.toJson())
      for (const e of events.slice(cut)) continued.apply(e)
      expect(byChart(continued)).toEqual(byChart(whole))
    }
  })
})

describe("the drawer's first window of a held item", () => {
  it("is what GET /items/{id}?offset=0&limit=4096 answers: the first 4,096 characters, the total, where the next starts", () => {
    const long = item(1, "tool_result", "run_1", { text: "x".repeat(4_096) + "tail" })
    expect(firstWindow(long)).toEqual({ item: { ...long, text: "x".repeat(4_096) }, offset: 0, totalChars: 4_100, nextOffset: 4_096 })
    const short = item(2, "assistant_message", "run_1")
    expect(firstWindow(short)).toEqual({ item: short, offset: 0, totalChars: short.text.length, nextOffset: null })
  })
})

describe("the run in progress (the run the dashboard's Interrupt names)", () => {
  it("is the unfinished run with the lowest seq, whatever order the runs are held in; none when every run ended", () => {
    const run = (seq: number, status: RunJson["status"]) => ({ id: `run_${seq}`, seq, status }) as RunJson
    expect(runInProgress([run(3, "queued"), run(1, "completed"), run(2, "waiting")])?.id).toBe("run_2")
    expect(runInProgress([run(2, "running"), run(1, "interrupted"), run(4, "starting")])?.id).toBe("run_2")
    expect(runInProgress([run(1, "completed"), run(2, "failed"), run(3, "cancelled"), run(4, "interrupted")])).toBe(null)
    expect(runInProgress([])).toBe(null)
  })

  it("is none when the thread has more unfinished runs than the page holds (review r31: the page holds the newest runs; with more than 20 queued behind a waiting run it named a queued one)", () => {
    const run = (seq: number, status: RunJson["status"]) => ({ id: `run_${seq}`, seq, status }) as RunJson
    // Runs 2-21 held (queued), run 1 (waiting for a client tool) not: the snapshot counts 21 unfinished.
    const held = Array.from({ length: 20 }, (_, i) => run(i + 2, "queued"))
    expect(runInProgress(held)?.id).toBe("run_2")
    expect(runInProgress(held, { waiting: 1, queued: 20 })).toBe(null)
    // Every unfinished run held: the lowest is the one.
    expect(runInProgress([run(1, "waiting"), ...held], { waiting: 1, queued: 20, completed: 7 })?.id).toBe("run_1")
    // A snapshot older than the events the page applied (run 1 ended since; the snapshot still counts it): none named,
    // the server's own choice (never a wrong one); a snapshot that counts fewer than held names the lowest.
    expect(runInProgress([run(1, "completed"), ...held], { running: 1, queued: 20 })).toBe(null)
    expect(runInProgress([run(1, "running"), ...held], { queued: 20 })?.id).toBe("run_1")
  })
})

describe("contextFill", () => {
  // Review r31: a gateway conversation's fill was its newest run's cost, which after hidden thread_read rounds is every
  // hop's sum (here 150 + 15 + 2,100 = 2,265 for a last request of 1,155), as the occupancy chart once was.
  const gateway = (gatewayRequest: unknown, costs: ReadonlyArray<Record<string, number>>) => ({
    providerThreads: [{ id: "pth_1", active: true, activeNativeThreadId: null, nativeThreads: [] }],
    costs: { recentRuns: costs },
    ...(gatewayRequest === undefined ? {} : { gatewayRequest })
  }) as unknown as SnapshotJson
  const hops = { inputTokens: 150, cacheWriteTokens: 15, cacheReadTokens: 2_100, outputTokens: 30 }

  it("a gateway conversation shows its newest request's prompt as the last upstream request carried it, not the run's sum", () => {
    expect(contextFill(gateway({ runId: "run_2", promptTokens: 1_155, windowTokens: 200_000 }, [hops]))).toBe("1,155 tokens (last request)")
  })

  it("without gatewayRequest (an older server): the newest cost's prompt; before any request: –", () => {
    expect(contextFill(gateway(undefined, [hops]))).toBe("2,265 tokens (last request)")
    expect(contextFill(gateway(null, []))).toBe("–")
  })
})
