/**
 * Issue 14's Claude Code acceptance: the real `claude` led by a reactive loopback upstream (`ReactiveUpstream`, which
 * bills each request through a model of Anthropic's prompt cache, `PromptCache`: usage from the request itself)
 * through a long tool-using session in a temporary directory (64 tool rounds of real Bash, Write and Read, 16 of them
 * with outputs over 20,000 characters), once with the agent pointed at the upstream directly and three times through
 * `baton serve`'s gateway with the instance's tool-result offload on (default settings): the upstream, playing the
 * model, reads back every stub it sees once (`thread_read`, answered by the gateway), the first stub of each flush,
 * or none.
 *
 * Through Baton, each time: the session ends the same (result, turns, files on disk); each upstream request's
 * messages extend the previous request's except at the flushes Baton reports (`gateway.offloaded`); each
 * `thread_read` answer holds the exact original, and after the session every stub's ref (read back or not) is
 * answered by the gateway's reader with its exact original; the thread holds every message exactly once. The weighted input
 * (0.1 x cache read + 1.25 x cache write, from the upstream's usage) against the direct run's: at most 0.6 when the
 * model reads nothing back; below 1 when it reads every stub back (each read result is written to the cache a second
 * time: docs/gateway.md "The Claude Code acceptance"). The figures are printed (console.log).
 */
import type { Item } from "@baton/contracts"
import { HttpServer } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { adminToken, client, get, raw } from "./helpers.js"
import { ThreadRead } from "@baton/orchestration"
import * as ClaudeCode from "./support/ClaudeCode.js"
import { instance, marker, serveSettings, settingsFor, threadEvents } from "./support/ModelServer.js"
import * as PromptCache from "./support/PromptCache.js"
import * as ReactiveUpstream from "./support/ReactiveUpstream.js"

const cycles = 8
const final = `All ${cycles * 8} steps done.`

/**
 * The session in `dir`: `cycles` cycles of eight tool rounds each: Bash `echo`, Bash `seq` (24,500
 * characters), Write a small note, Bash writing a 700-line data file, Read it (about 23,000 characters with the
 * line numbers), Read the note, Bash `wc -l`, Bash `ls`.
 */
const script = (dir: string): ReadonlyArray<ReactiveUpstream.Step> =>
  Array.from({ length: cycles }, (_, c) => {
    const note = Path.join(dir, `note${c}.txt`)
    const data = Path.join(dir, `data${c}.txt`)
    const bash = (command: string) => ({ name: "Bash", input: { command, description: command.slice(0, 40) } })
    return [
      { text: `Cycle ${c}: starting.`, calls: [bash(`echo cycle-${c}-start`)] },
      { text: "", calls: [bash(`seq ${100_001 + c * 10_000} ${103_500 + c * 10_000}`)] },
      { text: "", calls: [{ name: "Write", input: { file_path: note, content: `note of cycle ${c}\nsecond line\n` } }] },
      { text: "", calls: [bash(`seq 1 700 | awk '{printf "row %05d of cycle ${c} value %d\\n", $1, $1 * ${c + 3}}' > data${c}.txt`)] },
      { text: "", calls: [{ name: "Read", input: { file_path: data } }] },
      { text: "", calls: [{ name: "Read", input: { file_path: note } }] },
      { text: "", calls: [bash(`wc -l data${c}.txt note${c}.txt`)] },
      { text: "", calls: [bash("ls")] }
    ]
  }).flat()

const tempDir = (prefix: string) => Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), prefix)))

/** The files of `dir` (names and contents). */
const filesOf = (dir: string) => Object.fromEntries(Fs.readdirSync(dir).sort().map((f) => [f, Fs.readFileSync(Path.join(dir, f), "utf8")]))

type Message = { readonly role: string; readonly content: unknown }

/**
 * The messages of a body as the prompt cache sees them (`PromptCache.blocksOf`), as JSON texts: without
 * `cache_control` (the agent moves its breakpoints) and a string content as its one text block (Claude Code sends its
 * newest message as blocks, and the same message as a string in the next request).
 */
const unmarked = (body: Record<string, unknown>) =>
  (body.messages as ReadonlyArray<Message>).map((m) =>
    JSON.stringify({
      role: m.role,
      content: (typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content as Array<Record<string, unknown>>).map((b) => {
        const { cache_control: _, ...rest } = b
        return rest
      })
    })
  )

/** Whether a request continues after the gateway's `thread_read` answers (its last message answers `toolu_r` calls). */
const isContinuation = (body: Record<string, unknown>) => {
  const last = (body.messages as ReadonlyArray<Message>).at(-1)!
  return Array.isArray(last.content) && last.content.some((b: Record<string, unknown>) => b.type === "tool_result" && String(b.tool_use_id).startsWith("toolu_r"))
}

/** The upstream's usage over a run: requests, tokens, and the weighted input (0.1 x cache read + 1.25 x cache write). */
const figures = (requests: ReadonlyArray<ReactiveUpstream.Received>) => {
  const usages = requests.map((r) => r.usage)
  return {
    requests: requests.length,
    cacheRead: usages.reduce((n, u) => n + u.cacheRead, 0),
    cacheWrite: usages.reduce((n, u) => n + u.cacheWrite, 0),
    input: usages.reduce((n, u) => n + u.input, 0),
    weighted: PromptCache.weighted(usages)
  }
}

/** The direct run: the session against the reactive upstream, every step played in order, then the final text. */
const directRun = (prompt: string) =>
  Effect.gen(function*() {
    const started = Date.now()
    const dir = tempDir("baton-cc-long-direct-")
    const upstream = yield* ReactiveUpstream.start(script(dir), final)
    const result = yield* ClaudeCode.run({ baseUrl: upstream.url, apiKey: "sk-direct-0123456789", cwd: dir, prompt, timeoutMs: 400_000 })
    expect(result.is_error).toBe(false)
    expect(result.result).toBe(final)
    expect(upstream.requests.map((r) => r.decision)).toEqual(Array.from({ length: cycles * 8 + 1 }, (_, step) => ({ _tag: "step", step })))
    return { dir, upstream, result, ms: Date.now() - started }
  })

type Direct = Effect.Effect.Success<ReturnType<typeof directRun>>

/**
 * The same session through `baton serve` (offload on, the instance's defaults), the upstream reading back the stubs
 * `choose` picks; checks what must hold whatever the model reads back, and returns the figures.
 */
const batonRun = (prompt: string, direct: Direct, choose: (unread: ReadonlyArray<string>) => ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const viaDir = tempDir("baton-cc-long-via-")
    const upstream = yield* ReactiveUpstream.start(script(viaDir), final, choose)
    const settings = yield* settingsFor(
      [instance("anthropic", "anthropic-messages", { url: upstream.url, requests: [], counts: [], enqueue: () => undefined })],
      { TEST_MODEL_KEY: marker },
      undefined,
      { gateway: { routes: [{ model: "claude-*", provider: "anthropic" }] } }
    )
    return yield* Effect.gen(function*() {
      const server = yield* HttpServer.HttpServer
      const port = (server.address as HttpServer.TcpAddress).port
      const started = Date.now()
      const viaResult = yield* ClaudeCode.run({ baseUrl: `http://127.0.0.1:${port}`, apiKey: adminToken, cwd: viaDir, prompt, timeoutMs: 400_000 })
      const ms = Date.now() - started

      // The session ends the same way, with the same effects on disk.
      expect(viaResult.is_error).toBe(false)
      expect(viaResult.result).toBe(direct.result.result)
      expect(viaResult.num_turns).toBe(direct.result.num_turns)
      expect(filesOf(viaDir)).toEqual(filesOf(direct.dir))
      for (const r of upstream.requests) expect(r.headers["x-api-key"]).toBe(marker)

      // The agent's requests and the gateway's continuations after thread_read.
      const bodies = upstream.requests.map((r) => r.body)
      const agentRequests = bodies.flatMap((b, i) => (isContinuation(b) ? [] : [i]))
      expect(agentRequests.length).toBe(direct.upstream.requests.length)
      const continuations = bodies.flatMap((b, i) => (isContinuation(b) ? [i] : []))

      // Flushes: the runs with a gateway.offloaded event, as upstream request indices.
      const api = yield* client()
      const threads = (yield* api.threads.list({ urlParams: {} })).threads
      expect(threads.length).toBe(1)
      const threadId = threads[0]!.id
      const runs = (yield* api.runs.list({ path: { threadId }, urlParams: { limit: 500 } })).runs
      expect(runs.length).toBe(agentRequests.length)
      expect(runs.every((r) => r.status === "completed")).toBe(true)
      const events = threadEvents((yield* raw(get(`/threads/${threadId}/events?follow=false`))).text)
      const flushes = events.filter((e) => e.type === "gateway.offloaded").map((e) => e.payload as { runId: string; refs: Array<string>; tier: string; tokensBefore: number; tokensAfter: number })
      const flushAt = new Map(flushes.map((f) => [agentRequests[runs.findIndex((r) => r.id === f.runId)]!, f]))
      expect(flushAt.size).toBe(flushes.length)
      expect(flushes.length).toBeGreaterThan(0)

      // Each request extends the previous one's messages, except at a reported flush (and only there).
      const breaks: Array<number> = []
      for (let i = 1; i < bodies.length; i++) {
        const previous = unmarked(bodies[i - 1]!)
        const next = unmarked(bodies[i]!)
        if (!(next.length >= previous.length && previous.every((m, k) => m === next[k]))) breaks.push(i)
      }
      expect(breaks).toEqual([...flushAt.keys()].filter((i) => i > 0).sort((a, b) => a - b))
      // System and tools the same bytes throughout, thread_read offered from the first request on.
      expect(new Set(bodies.map((b) => JSON.stringify([b.system, b.tools]))).size).toBe(1)

      // Each thread_read answer the gateway sent holds the exact original (the result as the agent sent it, before
      // it was stubbed), in one page.
      const originals = new Map<string, ReadonlyArray<string>>()
      for (const b of bodies) {
        for (const { block } of ReactiveUpstream.blocksOfMessages(b)) {
          if (block.type !== "tool_result" || typeof block.tool_use_id !== "string" || originals.has(block.tool_use_id)) continue
          const texts = typeof block.content === "string" ? [block.content] : (block.content as Array<{ text?: string }>).map((x) => x.text ?? "")
          if (ReactiveUpstream.stubIdsIn(texts.join("\n")).length === 0) originals.set(block.tool_use_id, texts)
        }
      }
      const stubbed = new Set(bodies.flatMap((b) =>
        ReactiveUpstream.blocksOfMessages(b).flatMap(({ block }) => block.type === "tool_result" ? ReactiveUpstream.stubIdsIn(ReactiveUpstream.resultText(block)) : [])
      ))
      const readBack = new Set<string>()
      for (const i of continuations) {
        const decision = upstream.requests[i - 1]!.decision
        expect(decision._tag).toBe("read")
        const ids = decision._tag === "read" ? decision.ids : []
        const answers = (bodies[i]!.messages as ReadonlyArray<Message>).at(-1)!.content as Array<Record<string, unknown>>
        expect(answers.length).toBe(ids.length)
        answers.forEach((a, k) => {
          expect(a.is_error).toBeUndefined()
          const text = ReactiveUpstream.resultText(a)
          for (const original of originals.get(ids[k]!)!) expect(text).toContain(original)
          expect(text).toContain("; end]")
          readBack.add(ids[k]!)
        })
      }
      expect(stubbed.size).toBeGreaterThan(0)
      // Every read the upstream made was answered by the gateway (none reached the agent).
      const asked = upstream.requests.flatMap((r) => (r.decision._tag === "read" ? r.decision.ids : []))
      expect([...readBack].sort()).toEqual([...asked].sort())
      // Every stubbed original comes back through thread_read, the ones the model did not read too: after the
      // session, the gateway's own reader (the one that answered the upstream's calls) answers each stub's ref, as the
      // model would have asked for it, with the exact original in one page.
      const reader = yield* ThreadRead.ThreadRead
      for (const id of stubbed) {
        const answer = yield* reader.answer(threadId, JSON.stringify({ refs: `tool:${id}`, limit: 32_000 }))
        expect(answer.isError).toBe(false)
        for (const original of originals.get(id)!) expect(answer.output).toContain(original)
        expect(answer.output).toContain("; end]")
      }

      // The thread holds every message exactly once: the agent's history (as the direct run's last request) and
      // the last reply; each script call and result once, no thread_read call.
      const items: Array<Item> = []
      let afterSeq = 0
      for (;;) {
        const page = yield* api.items.list({ path: { threadId }, urlParams: { afterSeq, limit: 500 } })
        items.push(...page.items)
        if (page.nextAfterSeq === null) break
        afterSeq = page.nextAfterSeq
      }
      const lastDirect = direct.upstream.requests.at(-1)!.body.messages as ReadonlyArray<Message>
      expect(new Set(items.map((i) => i.messageId)).size).toBe(lastDirect.length + 1)
      for (let step = 0; step < cycles * 8; step++) {
        const id = ReactiveUpstream.callId(step, 0)
        expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === id).length).toBe(1)
        expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === id).length).toBe(1)
      }
      expect(items.filter((i) => i.kind === "tool_call" && String(i.toolCallId).startsWith("toolu_r"))).toEqual([])
      expect(items.filter((i) => i.kind === "user_message" && i.text === prompt).length).toBe(1)
      expect(items.filter((i) => i.kind === "assistant_message" && i.text === final).length).toBe(1)
      expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])

      return {
        ...figures(upstream.requests),
        flushes: flushes.map((f) => ({ request: [...flushAt.entries()].find(([, x]) => x === f)![0], tier: f.tier, refs: f.refs.length, tokensBefore: f.tokensBefore, tokensAfter: f.tokensAfter })),
        threadReadRounds: continuations.length,
        stubs: stubbed.size,
        stubsReadBack: readBack.size,
        ms
      }
    }).pipe(Effect.provide(serveSettings(settings)))
  })

describe("Gateway with the real Claude Code: a long session with tool-result offload", () => {
  it.live("64 tool rounds complete the same directly and through Baton; prefix kept but at flushes, stubs read back exactly, every message once; the weighted input", () =>
    Effect.scoped(Effect.gen(function*() {
      const started = Date.now()
      const prompt = "work through the cycles"
      const direct = yield* directRun(prompt)
      // The three sessions through Baton at once: each has its own directory, upstream and server (its own database),
      // and most of a session's time is spent waiting on the agent's process and its tools, not on the CPU.
      const [everyStub, oneStub, noStub] = yield* Effect.all([
        // The model reads back every stub once, as soon as it sees it (the most a model can read back).
        batonRun(prompt, direct, (unread) => unread),
        // The model reads back the first stub of each flush.
        batonRun(prompt, direct, (unread) => unread.slice(0, 1)),
        // The model reads back none (the stubbed results were consumed, which is what the policy bets on).
        batonRun(prompt, direct, () => [])
      ], { concurrency: "unbounded" })
      const d = { ...figures(direct.upstream.requests), ms: direct.ms }
      const ratio = (v: { weighted: number }) => Number((v.weighted / d.weighted).toFixed(3))
      console.log(JSON.stringify({
        direct: d,
        readsEveryStub: { ...everyStub, ratio: ratio(everyStub) },
        readsOneStubPerFlush: { ...oneStub, ratio: ratio(oneStub) },
        readsNoStub: { ...noStub, ratio: ratio(noStub) },
        wallMs: Date.now() - started
      }))
      expect(everyStub.stubsReadBack).toBe(everyStub.stubs)
      expect(noStub.threadReadRounds).toBe(0)
      // Reading every stub back writes each read result to the cache a second time: Baton still costs less than the
      // direct run, but not 0.6 of it (docs/gateway.md "The Claude Code acceptance").
      expect(ratio(everyStub)).toBeLessThan(1)
      expect(ratio(oneStub)).toBeLessThan(ratio(everyStub))
      expect(ratio(noStub)).toBeLessThanOrEqual(0.6)
    })), { timeout: 900_000 })
})
