/**
 * The switch fit's third step (issue 14 item 4, docs/gateway.md "Routing and switching"): a switched conversation
 * whose history does not fit even with stubs gets, before the deferral pointer, the summary of its start that the
 * gateway had the thread's summariser write (the `/offload` machinery: summary item, offload record, archive,
 * `thread.offloaded`) after an earlier switched request deferred, off the request path. Over real HTTP on loopback
 * (an Anthropic upstream for `claude-*`, a Chat Completions one with a 32,000-token window for `gpt-*`), on SQLite and
 * Postgres: the summary in the request, under the window, the prompt unchanged, every original readable with
 * `thread_read` and the API, the switch back losing nothing; a summariser that fails leaves the pointer alone. And the
 * fit itself (`GatewaySwitch.toChat` with summaries) on its own.
 */
import { ThreadRead } from "@baton/orchestration"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as GatewaySwitch from "../src/GatewaySwitch.js"
import { client, raw } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import {
  allItems,
  assembled,
  base,
  type ChatOut,
  counter,
  eventsOf,
  eventually,
  firstTwo,
  longHistory,
  messages,
  readAll,
  textOf,
  theThread,
  usage,
  window,
  withGateway,
  words
} from "./support/SwitchSummary.js"

describe("GatewaySwitch.toChat, the fit's third step (a summary before the pointer)", () => {
  const history = longHistory()
  const body = { ...base, model: "gpt-5", messages: [...history, { role: "user", content: "go on" }] }
  const fit = (summaries: ReadonlyArray<GatewaySwitch.FitSummary>) =>
    GatewaySwitch.toChat({ body, windowTokens: window, maxOutputTokens: 4_096, count: (t) => counter.count(t), pointer: (n) => `<deferred_history>${n} left out</deferred_history>`, summaries })

  it("puts the best summary that fits before the pointer, leaving out no less; too large or covering kept messages: the pointer alone", () => {
    const alone = fit([])
    expect(alone._tag).toBe("fits")
    if (alone._tag !== "fits") return
    expect(alone.fit.leftOut).toBeGreaterThan(2)
    expect(alone.fit.summarised).toBe(0)
    const leftOut = alone.fit.leftOut

    // A summary of the first three messages (within those left out): before the pointer, in the first user message.
    const summary = `<conversation_summary>${words(7, 300)}</conversation_summary>`
    const used = fit([{ covers: 3, text: summary }])
    expect(used._tag).toBe("fits")
    if (used._tag !== "fits") return
    expect(used.fit.summarised).toBe(3)
    expect(used.fit.leftOut).toBeGreaterThanOrEqual(leftOut)
    const out = used.body.messages as ReadonlyArray<{ role: string; content: string }>
    expect(out[1]).toEqual({ role: "user", content: `${summary}\n\n<deferred_history>${used.fit.leftOut} left out</deferred_history>` })
    expect(used.fit.tokensAfter).toBeLessThanOrEqual(used.fit.limit)
    expect(out.at(-1)).toEqual({ role: "user", content: "go on" })

    // The newest summary covers messages that fit verbatim: the next one of the chain is used instead.
    const chain = fit([{ covers: history.length - 1, text: "newest" }, { covers: 3, text: summary }])
    expect(chain._tag === "fits" && chain.fit.summarised).toBe(3)

    // A summary that cannot fit (larger than the window's room): the pointer alone, the same fit as without one.
    const huge = fit([{ covers: 3, text: words(8, 40_000) }])
    expect(huge).toEqual(alone)
  })
})

describe("Gateway, a switched fit with a summary (the third step)", () => {
  for (const dialect of ["SQLite", "Postgres"] as const) {
    it.live(`${dialect}: the next switched request carries the summary written after the first deferred, under the window; the originals stay readable; switching back loses nothing`, () =>
      withGateway(dialect, (anthropic, chat) =>
        Effect.gen(function*() {
          const reader = yield* ThreadRead.ThreadRead
          const { body2, history, reply2 } = yield* firstTwo(anthropic, chat)
          const threadId = yield* theThread

          // After the answer, off the request path: the thread's summariser summarised the deferred history (/offload's record).
          const offloaded = yield* eventually(threadId, ["thread.offloaded", "thread.offload_failed"])
          expect(offloaded.type).toBe("thread.offloaded")
          const { offloadId, summaryItemId, cutSeq } = offloaded.payload as { offloadId: string; summaryItemId: string; cutSeq: number }
          const summaryItem = (yield* allItems(threadId)).find((i) => i.id === summaryItemId)!
          expect(summaryItem.kind).toBe("summary")

          // 3. The next switched request: the summary before the pointer, under the window, the prompt unchanged.
          chat.enqueue(ModelApi.answer("openai-chat", "part0 said hello.", usage))
          const prompt = { role: "user", content: [{ type: "text", text: "and part1?" }] }
          const body3 = { ...base, model: "gpt-5", messages: [...body2.messages, reply2, prompt] }
          const third = yield* raw(messages(body3))
          expect(third.status).toBe(200)
          expect(chat.requests).toHaveLength(2)
          const sent = chat.requests[1]!
          const out = JSON.parse(sent.body) as ChatOut
          expect(counter.count(sent.body) + out.max_tokens).toBeLessThanOrEqual(window)
          expect(out.messages[0]).toEqual({ role: "system", content: "You are Claude Code." })
          expect(out.messages.at(-1)).toEqual({ role: "user", content: "and part1?" })
          const deferred = out.messages[1]!
          expect(deferred.role).toBe("user")
          expect(deferred.content).toMatch(new RegExp(`^<conversation_summary thread="${threadId}">\\nA summary of this conversation up to item #${cutSeq} `))
          expect(deferred.content).toContain(summaryItem.text.trim())
          expect(deferred.content).toContain(`thread_read {"refs":"archive:${offloadId}"}`)
          // The pointer stays after it, naming every message left out.
          expect(deferred.content).toContain(`</conversation_summary>\n\n<deferred_history thread="${threadId}">`)
          const refs = (JSON.parse(/<deferred_history[^]*thread_read (\{.*\})/.exec(deferred.content!)![1]!) as { refs: string }).refs
          const keptFrom = history.findIndex((m) => out.messages.some((o) => o.content === textOf(m)))
          expect(keptFrom).toBeGreaterThan(1)
          expect(out.messages.some((o) => o.content === textOf(history[0]!))).toBe(false)
          // Every left-out original: through the pointer's refs, the summary's archive and the API.
          const readBack = yield* readAll(reader, threadId, refs)
          const archive = yield* readAll(reader, threadId, `archive:${offloadId}`)
          const items = yield* allItems(threadId)
          for (const m of history.slice(0, keptFrom)) {
            expect(readBack).toContain(textOf(m))
            if (m.role === "user" && typeof m.content === "string") expect(items.some((i) => i.text === m.content)).toBe(true)
          }
          expect(archive).toContain(textOf(history[0]!))
          for (let i = 0; i < 10; i++) expect(items.filter((it) => it.kind === "tool_result" && it.text === `output ${i} ${words(300 + i, 1_200)}`)).toHaveLength(1)

          // 4. Back on the Anthropic model: the agent's body byte for byte, no divergence, every message once.
          anthropic.enqueue(ModelApi.answer("anthropic-messages", "Back.", usage))
          const body4 = { ...base, model: "claude-sonnet-4-5", messages: [...body3.messages, assembled(third.text), { role: "user", content: "back on Claude" }] }
          const fourth = yield* raw(messages(body4))
          expect(fourth.status).toBe(200)
          expect(anthropic.requests.at(-1)!.body).toBe(JSON.stringify(body4))
          const after = (yield* allItems(threadId)).filter((i) => i.kind !== "summary")
          expect(new Set(after.map((i) => i.messageId)).size).toBe(body4.messages.length + 1)
          expect(after.filter((i) => i.kind === "user_message" && i.text === "and part1?")).toHaveLength(1)
          const events = yield* eventsOf(threadId)
          expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
          const runs = (yield* (yield* client()).runs.list({ path: { threadId }, urlParams: {} })).runs
          expect(runs.map((r) => r.status)).toEqual(["completed", "completed", "completed", "completed"])
        })
      ), { timeout: 120_000 })
  }

  it.live("a summariser that fails leaves the pointer alone (under the window), and the conversation goes on", () =>
    withGateway("SQLite", (anthropic, chat) =>
      Effect.gen(function*() {
        const { body2, reply2 } = yield* firstTwo(anthropic, chat)
        const threadId = yield* theThread
        // The gateway asked for the summary after the deferral; the summariser's upstream answered 500.
        const failed = yield* eventually(threadId, ["thread.offloaded", "thread.offload_failed"])
        expect(failed.type).toBe("thread.offload_failed")
        chat.enqueue(ModelApi.answer("openai-chat", "Still here.", usage))
        const body3 = { ...base, model: "gpt-5", messages: [...body2.messages, reply2, { role: "user", content: [{ type: "text", text: "and part1?" }] }] }
        const third = yield* raw(messages(body3))
        expect(third.status).toBe(200)
        expect(assembled(third.text).content).toEqual([{ type: "text", text: "Still here." }])
        const sent = chat.requests[1]!
        const out = JSON.parse(sent.body) as ChatOut
        expect(sent.body).not.toContain("<conversation_summary")
        expect(out.messages[1]!.content).toMatch(/^<deferred_history thread=/)
        expect(counter.count(sent.body) + out.max_tokens).toBeLessThanOrEqual(window)
        expect(out.messages.at(-1)).toEqual({ role: "user", content: "and part1?" })
        expect((yield* allItems(threadId)).filter((i) => i.kind === "summary")).toEqual([])
      }), true), { timeout: 120_000 })

  it.live("a summary still being written when the agent goes on (a slow model summariser) is applied, not discarded as stale; the next switched request carries it", () =>
    withGateway("SQLite", (anthropic, chat, summariser) =>
      Effect.gen(function*() {
        const summaryText = "## Goal\n- read the ten parts and report what part0 said\n## Done\n- ten Bash rounds (cat part0-9)"
        let release: () => void = () => undefined
        const hold = new Promise<void>((resolve) => {
          release = resolve
        })
        summariser.enqueue({ ...ModelApi.answer("anthropic-messages", summaryText, { input: 100, cacheWrite: 0, cacheRead: 0, output: 20 }), hold })
        const { body2, reply2 } = yield* firstTwo(anthropic, chat)
        const threadId = yield* theThread
        for (let i = 0; summariser.requests.length === 0 && i < 200; i++) yield* Effect.sleep("50 millis")
        expect(summariser.requests).toHaveLength(1)

        // The agent goes on while the summariser writes: another switched request (the pointer alone) is recorded.
        chat.enqueue(ModelApi.answer("openai-chat", "part0 said hello.", usage))
        const body3 = { ...base, model: "gpt-5", messages: [...body2.messages, reply2, { role: "user", content: [{ type: "text", text: "and part1?" }] }] }
        const third = yield* raw(messages(body3))
        expect(third.status).toBe(200)
        expect(chat.requests[1]!.body).not.toContain("<conversation_summary")
        release()
        const offloaded = yield* eventually(threadId, ["thread.offloaded", "thread.offload_failed"])
        expect(offloaded.type).toBe("thread.offloaded")

        // The next switched request: the model's summary before the pointer, under the window, the prompt unchanged.
        chat.enqueue(ModelApi.answer("openai-chat", "part1 said hi.", usage))
        const body4 = { ...base, model: "gpt-5", messages: [...body3.messages, assembled(third.text), { role: "user", content: [{ type: "text", text: "and part2?" }] }] }
        const fourth = yield* raw(messages(body4))
        expect(fourth.status).toBe(200)
        const sent = chat.requests[2]!
        const out = JSON.parse(sent.body) as ChatOut
        expect(out.messages[1]!.content).toMatch(/^<conversation_summary thread=/)
        expect(out.messages[1]!.content).toContain(summaryText)
        expect(counter.count(sent.body) + out.max_tokens).toBeLessThanOrEqual(window)
        expect(out.messages.at(-1)).toEqual({ role: "user", content: "and part2?" })
      }), true), { timeout: 120_000 })

  it.live("a client's own /offload of the gateway's thread gives the first switched request its summary", () =>
    withGateway("SQLite", (anthropic, chat) =>
      Effect.gen(function*() {
        const history = longHistory()
        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Noted.", usage))
        const body1 = { ...base, model: "claude-sonnet-4-5", messages: [...history, { role: "user", content: "summarise the outputs" }] }
        const first = yield* raw(messages(body1))
        expect(first.status).toBe(200)
        const threadId = yield* theThread
        // Keeping 60,000 tokens: the summary stands for less than the switched fit leaves out (one standing for more is not used).
        const report = yield* (yield* client()).threads.offload({ path: { threadId }, payload: { keepTokens: 60_000 }, headers: {} })
        expect(report.outcome).toBe("offloaded")
        chat.enqueue(ModelApi.answer("openai-chat", "Checking.", usage))
        const body2 = { ...base, model: "gpt-5", messages: [...body1.messages, assembled(first.text), { role: "user", content: [{ type: "text", text: "what did part0 say?" }] }] }
        expect((yield* raw(messages(body2))).status).toBe(200)
        const sent = chat.requests[0]!
        const out = JSON.parse(sent.body) as ChatOut
        expect(out.messages[1]!.content).toContain(`thread_read {"refs":"archive:${report.offloadId}"}`)
        expect(out.messages[1]!.content).toMatch(new RegExp(`^<conversation_summary thread="${threadId}">\\nA summary of this conversation up to item #${report.cutSeq} `))
        expect(counter.count(sent.body) + out.max_tokens).toBeLessThanOrEqual(window)
        expect(out.messages.at(-1)).toEqual({ role: "user", content: "what did part0 say?" })
      })), { timeout: 120_000 })
})
