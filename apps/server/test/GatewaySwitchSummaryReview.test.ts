/**
 * Review r17 of the switch fit's third step (a summary before the deferral pointer; issue 14 item 4, docs/gateway.md
 * "Routing and switching"): the fit uses only `/offload` summaries whose covered items are all the current
 * conversation's. After the agent rewinds (Claude Code's Esc Esc: an earlier prompt edited, the rest of the
 * conversation dropped; the gateway records a divergence on the same thread), a switched request must not carry the
 * summary the gateway wrote of the dropped branch (it stands for items that are no longer the conversation's), nor
 * claim (the summary's cut, the pointer's refs) items of that branch; the summary stays in the thread. A re-render
 * (Claude Code's other rendering of the same conversation, not a divergence) keeps the summary valid. The rule on its
 * own (`GatewaySwitched.firstForeignSeq`: which of the thread's items are not the current conversation's), and over
 * real HTTP on loopback (an Anthropic upstream for `claude-*`, a Chat Completions one with a 32,000-token window for
 * `gpt-*`), on SQLite.
 */
import type { Item } from "@baton/contracts"
import { GatewayThreads, ThreadRead } from "@baton/orchestration"
import { describe, expect, it } from "@effect/vitest"
import { DateTime, Effect } from "effect"
import * as GatewaySwitched from "../src/GatewaySwitched.js"
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
  type Message,
  messages,
  readAll,
  textOf,
  theThread,
  usage,
  window,
  withGateway,
  words
} from "./support/SwitchSummary.js"

/** The seqs a pointer's or a summary's refs name (`#a`, `#a-#b`, comma-separated). */
const seqsOfRefs = (refs: string): ReadonlyArray<readonly [number, number]> =>
  refs.split(",").map((r) => {
    const [a, b] = r.trim().split("-").map((s) => Number(s.replace("#", "")))
    return [a!, b ?? a!] as const
  })

/**
 * What a switched request that left messages out must hold after the rewind: the prompt unchanged and last, under the
 * window, the pointer; nothing of the dropped branch (neither the summary's text, nor its archive, nor the dropped
 * messages' text); no summary whose cut reaches a dropped item, no pointer ref naming one.
 */
const checkSent = (
  sent: string,
  prompt: Message,
  summary: { readonly text: string; readonly offloadId: string },
  dropped: { readonly seqs: ReadonlyArray<number>; readonly messages: ReadonlyArray<Message> }
) => {
  const out = JSON.parse(sent) as ChatOut
  expect(out.messages.at(-1)).toEqual({ role: "user", content: typeof prompt.content === "string" ? prompt.content : textOf(prompt) })
  expect(counter.count(sent) + out.max_tokens).toBeLessThanOrEqual(window)
  const deferred = out.messages[1]!.content!
  expect(deferred).toMatch(/<deferred_history thread=/)
  // The old branch's summary: neither its text nor its originals' archive (booleans: the body is 100,000 characters).
  const text = out.messages.map((m) => m.content ?? "").join("\n")
  expect(text.includes(summary.text.trim().slice(0, 200)), "the old branch's summary is sent").toBe(false)
  expect(text.includes(`archive:${summary.offloadId}`), "the old branch's archive is named").toBe(false)
  // The dropped messages' own text (the digest quotes them).
  for (const m of dropped.messages) expect(text.includes(textOf(m).slice(0, 40)), `a dropped message is sent: ${textOf(m).slice(0, 40)}`).toBe(false)
  // No claim on a dropped item: a summary's cut is below the first, the pointer's refs name none.
  const firstDropped = Math.min(...dropped.seqs)
  for (const cut of [...deferred.matchAll(/A summary of this conversation up to item #(\d+)/g)]) expect(Number(cut[1])).toBeLessThan(firstDropped)
  const refs = (JSON.parse(/<deferred_history[^]*thread_read (\{.*\})/.exec(deferred)![1]!) as { refs: string }).refs
  for (const [a, b] of seqsOfRefs(refs)) expect(dropped.seqs.filter((s) => s >= a && s <= b)).toEqual([])
}

describe("GatewaySwitched.firstForeignSeq (review r17)", () => {
  /** The thread's items of `stored` (each message's, as the gateway records them, seqs from 1), and a summary item. */
  const thread = (stored: ReadonlyArray<Message>): ReadonlyArray<Item> => {
    const names = GatewayThreads.toolNamesOf(stored)
    const items = stored.flatMap((m, i) => GatewayThreads.itemsOf(m, `${m.role}@1.${i}`, names)).map((n, i): Item => ({
      ...n,
      id: `itm_${i + 1}` as Item["id"],
      threadId: "thr_1" as Item["threadId"],
      runId: null,
      seq: i + 1,
      toolCallId: n.toolCallId as Item["toolCallId"],
      tokens: 1 as Item["tokens"],
      createdAt: DateTime.unsafeMake(0)
    }))
    return [...items, { ...items[0]!, id: "itm_s" as Item["id"], kind: "summary", text: "a summary", seq: items.length + 1, messageId: null }]
  }
  const reminder = (text: string) => ({ type: "text", text: `<system-reminder>\n${text}\n</system-reminder>` })
  // Stored in Claude Code's rendering for a Claude model: reminders in the user messages, thinking in the answer.
  const stored: ReadonlyArray<Message> = [
    { role: "user", content: [reminder("# Environment"), { type: "text", text: "count the files" }] },
    { role: "assistant", content: [{ type: "thinking", thinking: "I should run ls.", signature: "c2ln" }, { type: "redacted_thinking", data: "xx" }, { type: "text", text: "Counting." }, { type: "tool_use", id: "toolu_1", name: "Bash", input: { command: "ls | wc -l" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "12\n\n<system-reminder>\n<total_tokens>900 tokens left</total_tokens>\n</system-reminder>" }] },
    { role: "assistant", content: [{ type: "text", text: "There are 12." }] },
    { role: "system", content: "You are powered by the model gpt-5." },
    { role: "user", content: [{ type: "text", text: "and the directories?" }] },
    { role: "assistant", content: [{ type: "text", text: "Three." }] }
  ]
  const items = thread(stored)
  const foreign = (request: ReadonlyArray<Message>) => GatewaySwitched.firstForeignSeq(items, GatewaySwitched.messageSeqs(items, request))

  it("the stored conversation, re-rendered for another model (no thinking, reminders as system messages), has no foreign item", () => {
    expect(foreign(stored)).toBe(Infinity)
    expect(foreign([
      { role: "user", content: [{ type: "text", text: "count the files" }] },
      { role: "system", content: "# Environment" },
      { role: "assistant", content: [{ type: "text", text: "Counting." }, { type: "tool_use", id: "toolu_1", name: "Bash", input: { command: "ls | wc -l" } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "12" }] },
      { role: "system", content: "<total_tokens>800 tokens left</total_tokens>" },
      { role: "assistant", content: [{ type: "text", text: "There are 12." }] },
      { role: "user", content: [{ type: "text", text: "and the directories?" }] },
      { role: "assistant", content: [{ type: "text", text: "Three." }] },
      { role: "user", content: [{ type: "text", text: "thanks" }] }
    ])).toBe(Infinity)
  })

  it("a rewind (the first answer's round kept, the rest dropped) or a changed tool output: the first item the request does not hold", () => {
    const seqOf = (text: string) => items.find((i) => i.text === text)!.seq
    expect(foreign([...stored.slice(0, 3), { role: "user", content: [{ type: "text", text: "no, the hidden ones too" }] }])).toBe(seqOf("There are 12."))
    expect(foreign([stored[0]!, stored[1]!, { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "13" }] }, ...stored.slice(3)])).toBe(seqOf("12\n\n<system-reminder>\n<total_tokens>900 tokens left</total_tokens>\n</system-reminder>"))
    // The agent's compaction: a new start, nothing of the stored conversation.
    expect(foreign([{ role: "user", content: [{ type: "text", text: "Summary: 12 files, 3 directories." }] }])).toBe(seqOf("count the files"))
  })
})

describe("Gateway, a switched fit's summary after the agent rewound (review r17)", () => {
  it.live("a summary of the branch the agent rewound away is not sent with the new branch, nor any claim on its items; none is written over it", () =>
    withGateway("SQLite", (anthropic, chat) =>
      Effect.gen(function*() {
        const { history } = yield* firstTwo(anthropic, chat)
        const threadId = yield* theThread
        const offloaded = yield* eventually(threadId, ["thread.offloaded", "thread.offload_failed"])
        expect(offloaded.type).toBe("thread.offloaded")
        const { cutSeq, offloadId, summaryItemId } = offloaded.payload as { cutSeq: number; offloadId: string; summaryItemId: string }
        const before = yield* allItems(threadId)
        const summaryItem = before.find((i) => i.id === summaryItemId)!
        // The summary stands for the items through the cut: the start and more of the old branch than the rewind keeps.
        const kept = history.slice(0, 3)
        const lastKept = Math.max(...before.filter((i) => kept.some((m) => textOf(m) === i.text)).map((i) => i.seq))
        expect(cutSeq).toBeGreaterThan(lastKept)
        // Every item of the old conversation after the kept start is dropped by the rewind (the summary stays).
        const dropped = {
          seqs: before.filter((i) => i.seq > lastKept && i.kind !== "summary").map((i) => i.seq),
          messages: history.slice(3)
        }

        // The rewind: the first three messages kept, a new long branch from there (more than the window), switched.
        const branch: Array<Message> = []
        for (let i = 0; i < 15; i++) {
          branch.push({ role: "assistant", content: [{ type: "text", text: `new answer ${i} ${words(700 + i, 600)}` }] })
          branch.push({ role: "user", content: [{ type: "text", text: `new question ${i} ${words(800 + i, 600)}` }] })
        }
        const prompt3: Message = { role: "user", content: "go on" }
        chat.enqueue(ModelApi.answer("openai-chat", "On the new branch.", usage))
        const body3 = { ...base, model: "gpt-5", messages: [...kept, ...branch, { role: "assistant", content: [{ type: "text", text: "ok" }] }, prompt3] }
        const third = yield* raw(messages(body3))
        expect(third.status).toBe(200)
        expect((yield* eventsOf(threadId)).filter((e) => e.type === "gateway.diverged")).toHaveLength(1)
        checkSent(chat.requests.at(-1)!.body, prompt3, { text: summaryItem.text, offloadId }, dropped)

        // The agent goes on on the new branch: the next switched request leaves messages out again; still nothing of
        // the dropped branch (a summary written after the third request would have had to cover it).
        yield* Effect.sleep("1 second")
        const prompt4: Message = { role: "user", content: [{ type: "text", text: "and then?" }] }
        chat.enqueue(ModelApi.answer("openai-chat", "Then this.", usage))
        const body4 = { ...base, model: "gpt-5", messages: [...body3.messages, assembled(third.text), prompt4] }
        const fourth = yield* raw(messages(body4))
        expect(fourth.status).toBe(200)
        checkSent(chat.requests.at(-1)!.body, prompt4, { text: summaryItem.text, offloadId }, dropped)

        // Nothing is lost: the old branch's summary and every dropped original stay in the thread.
        yield* Effect.sleep("1 second")
        const after = yield* allItems(threadId)
        expect(after.filter((i) => i.kind === "summary").map((i) => i.id)).toEqual([summaryItemId])
        for (const s of dropped.seqs) expect(after.some((i: Item) => i.seq === s)).toBe(true)
        const events = yield* eventsOf(threadId)
        expect(events.filter((e) => e.type === "thread.offloaded")).toHaveLength(1)
        const runs = (yield* (yield* client()).runs.list({ path: { threadId }, urlParams: {} })).runs
        expect(runs.map((r) => r.status)).toEqual(["completed", "completed", "completed", "completed"])
      })
    ), { timeout: 120_000 })

  it.live("a re-render (Claude Code's rendering for another model: reminders as system messages) is the same conversation: the summary written after it is sent, its left-out originals named", () =>
    withGateway("SQLite", (anthropic, chat) =>
      Effect.gen(function*() {
        const reader = yield* ThreadRead.ThreadRead
        const reminder = (text: string) => ({ type: "text", text: `<system-reminder>\n${text}\n</system-reminder>` })
        const environment = "# Environment\ncwd: /tmp/x"
        // The same long conversation in Claude Code's two renderings: for a Claude model, the environment a reminder
        // block of the first user message and each tool output ending with a reminder; for another model, those as
        // system messages of their own.
        // The tool rounds first, so that the summary's cut and the pointer reach past tool outputs that were stored
        // in the Claude rendering (their text ending with a reminder) and go out in the other one.
        const long = longHistory()
        const history = [long[0]!, ...long.slice(21, 41), ...long.slice(1, 21), long[41]!]
        const claude: Array<Message> = []
        const other: Array<Message> = []
        history.forEach((m, i) => {
          const block = Array.isArray(m.content) ? (m.content as ReadonlyArray<{ type: string; tool_use_id?: string; content?: string }>)[0]! : null
          if (i === 0) {
            claude.push({ role: "user", content: [reminder(environment), { type: "text", text: textOf(m) }] })
            other.push({ role: "user", content: [{ type: "text", text: textOf(m) }] }, { role: "system", content: environment })
          } else if (block?.type === "tool_result") {
            claude.push({ role: "user", content: [{ ...block, content: `${block.content!}\n\n${reminder(`<total_tokens>${900_000 - i} tokens left</total_tokens>`).text}` }] })
            other.push(m, { role: "system", content: `<total_tokens>${800_000 - i} tokens left</total_tokens>` })
          } else {
            claude.push(m)
            other.push(m)
          }
        })
        const prompt1: Message = { role: "user", content: "summarise the outputs" }
        anthropic.enqueue(ModelApi.answer("anthropic-messages", "Noted.", usage))
        const first = yield* raw(messages({ ...base, model: "claude-sonnet-4-5", messages: [...claude, prompt1] }))
        expect(first.status).toBe(200)
        chat.enqueue(ModelApi.answer("openai-chat", "Checking.", usage))
        const body2 = { ...base, model: "gpt-5", messages: [...other, prompt1, assembled(first.text), { role: "user", content: [{ type: "text", text: "now, on the other model: what did part0 say?" }] }, { role: "system", content: "You are powered by the model gpt-5." }] }
        const second = yield* raw(messages(body2))
        expect(second.status).toBe(200)
        const threadId = yield* theThread
        const events = yield* eventsOf(threadId)
        expect(events.filter((e) => e.type === "gateway.rerendered")).toHaveLength(1)
        expect(events.filter((e) => e.type === "gateway.diverged")).toEqual([])
        const offloaded = yield* eventually(threadId, ["thread.offloaded", "thread.offload_failed"])
        expect(offloaded.type).toBe("thread.offloaded")
        const { cutSeq, offloadId, summaryItemId } = offloaded.payload as { cutSeq: number; offloadId: string; summaryItemId: string }
        const summaryItem = (yield* allItems(threadId)).find((i) => i.id === summaryItemId)!

        // The next switched request (extending the re-rendered one): the summary before the pointer.
        chat.enqueue(ModelApi.answer("openai-chat", "part0 said hello.", usage))
        const body3 = { ...base, model: "gpt-5", messages: [...body2.messages, assembled(second.text), { role: "user", content: [{ type: "text", text: "and part1?" }] }] }
        const third = yield* raw(messages(body3))
        expect(third.status).toBe(200)
        const sent = chat.requests.at(-1)!.body
        const out = JSON.parse(sent) as ChatOut
        expect(counter.count(sent) + out.max_tokens).toBeLessThanOrEqual(window)
        expect(out.messages.at(-1)).toEqual({ role: "user", content: "and part1?" })
        const deferred = out.messages[1]!.content!
        expect(deferred).toMatch(new RegExp(`^<conversation_summary thread="${threadId}">\\nA summary of this conversation up to item #${cutSeq} `))
        expect(deferred.includes(summaryItem.text.trim()), "the summary's text is sent").toBe(true)
        expect(deferred).toContain(`thread_read {"refs":"archive:${offloadId}"}`)
        // The pointer names every left-out message's items, the tool outputs stored in the other rendering included.
        const refs = (JSON.parse(/<deferred_history[^]*thread_read (\{.*\})/.exec(deferred)![1]!) as { refs: string }).refs
        const readBack = yield* readAll(reader, threadId, refs)
        const keptFrom = history.findIndex((m) => out.messages.some((o) => o.content === textOf(m)))
        expect(keptFrom).toBeGreaterThan(21)
        for (const m of history.slice(0, keptFrom)) expect(readBack.includes(textOf(m)), `not named by the pointer: ${textOf(m).slice(0, 20)}`).toBe(true)
      })
    ), { timeout: 120_000 })
})
