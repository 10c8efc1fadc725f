/**
 * The gateway's incremental fingerprints (issue 14, gateway time): a request that extends its conversation's previous
 * one is matched by a structural compare and only its new messages are hashed; an edited message anywhere is hashed
 * again; the answer is always every message's `fingerprint`.
 */
import { GatewayThreads } from "@baton/orchestration"
import { describe, expect, it } from "@effect/vitest"

type Message = GatewayThreads.WireMessage

const call = (n: number): Message => ({ role: "assistant", content: [{ type: "tool_use", id: `toolu_${n}`, name: "Bash", input: { command: `cat ${n}` } }] })
const result = (n: number, text = `output ${n} `.repeat(50)): Message => ({
  role: "user",
  content: [{ type: "tool_result", tool_use_id: `toolu_${n}`, content: text }]
})
const history = (rounds: number): Array<Message> => {
  const out: Array<Message> = [{ role: "user", content: "Work through the files." }]
  for (let i = 0; i < rounds; i++) out.push(call(i), result(i))
  return out
}
const all = (messages: ReadonlyArray<Message>) => messages.map(GatewayThreads.fingerprint)

describe("GatewayThreads.makePrintCache", () => {
  it("hashes only the messages past the conversation's previous request, and gives every message's fingerprint", () => {
    const cache = GatewayThreads.makePrintCache()
    const first = history(20)
    const a = cache.printsOf("k", first)
    expect(a.hashed).toBe(41)
    expect(a.prints).toEqual(all(first))
    // The next request: the same history (freshly parsed: equal, not identical objects) plus a reply and its result,
    // with the cache breakpoint moved to the newest message, as Claude Code does.
    const second: Array<Message> = [...JSON.parse(JSON.stringify(first)), call(20), {
      role: "user",
      content: [{ type: "tool_result", tool_use_id: "toolu_20", content: "new", cache_control: { type: "ephemeral" } }]
    }]
    const b = cache.printsOf("k", second)
    expect(b.hashed).toBe(2)
    expect(b.prints).toEqual(all(second))
    // Another conversation's key shares nothing.
    expect(cache.printsOf("other", second).hashed).toBe(43)
  })

  it("hashes an edited message in the middle again (a cleared tool result is seen), and a string is one text block", () => {
    const cache = GatewayThreads.makePrintCache()
    const first = history(10)
    cache.printsOf("k", first)
    const edited = [...first]
    edited[6] = result(2, "[Old tool result content cleared]")
    edited[0] = { role: "user", content: [{ type: "text", text: "Work through the files." }] }
    const b = cache.printsOf("k", edited)
    expect(b.hashed).toBe(1)
    expect(b.prints).toEqual(all(edited))
    expect(b.prints[6]).not.toBe(all(first)[6])
  })

  it("drops the least recently used conversation past its capacity (then hashes it all again)", () => {
    const cache = GatewayThreads.makePrintCache(2)
    const h = history(3)
    cache.printsOf("a", h)
    cache.printsOf("b", h)
    cache.printsOf("a", h)
    cache.printsOf("c", h)
    expect(cache.printsOf("a", h).hashed).toBe(0)
    expect(cache.printsOf("b", h).hashed).toBe(7)
  })

  it("sameJson: undefined keys count as absent, order of keys does not matter, arrays by position", () => {
    expect(GatewayThreads.sameJson({ a: 1, b: undefined, c: [1, "x"] }, { c: [1, "x"], a: 1 })).toBe(true)
    expect(GatewayThreads.sameJson({ a: [1, 2] }, { a: [2, 1] })).toBe(false)
    expect(GatewayThreads.sameJson({ a: null }, {})).toBe(false)
    expect(GatewayThreads.sameJson("x".repeat(1000), "x".repeat(999) + "y")).toBe(false)
  })
})

describe("GatewayThreads re-rendered history (conversationContent, rerenderedPrefix)", () => {
  const content = (m: Message) => GatewayThreads.conversationContent(GatewayThreads.normalise(m))
  const reminder = (text: string) => `<system-reminder>\n${text}\n</system-reminder>`

  it("strips only whole <system-reminder> elements that end a text", () => {
    expect(GatewayThreads.withoutTrailingReminders(`1\n2\n\n${reminder("<total_tokens>9</total_tokens>")}`)).toBe("1\n2")
    expect(GatewayThreads.withoutTrailingReminders(`out\n\n${reminder("a")}\n${reminder("b")}\n`)).toBe("out")
    const untouched = ["plain output\n", `${reminder("a")} and words after`, "ends with </system-reminder>", `x <system-reminder>a</system-reminder> b </system-reminder>`]
    for (const text of untouched) expect(GatewayThreads.withoutTrailingReminders(text)).toBe(text)
    expect(GatewayThreads.isReminderText(`${reminder("a")}\n`)).toBe(true)
    expect(GatewayThreads.isReminderText(`${reminder("a")}\nplease count`)).toBe(false)
    expect(GatewayThreads.isReminderText("count")).toBe(false)
  })

  it("leaves out the agent's context and nothing else", () => {
    // Claude's rendering and the other model's of one user turn and one tool result have the same content.
    const claudeTurn: Message = { role: "user", content: [{ type: "text", text: reminder("env") }, { type: "text", text: "count", cache_control: { type: "ephemeral" } }] }
    expect(content(claudeTurn)).toEqual(content({ role: "user", content: "count" }))
    const claudeResult: Message = { role: "user", content: [{ type: "tool_result", tool_use_id: "t", content: `1\n2\n\n${reminder("tokens")}`, is_error: false }] }
    expect(content(claudeResult)).toEqual(content({ role: "user", content: [{ type: "tool_result", tool_use_id: "t", content: [{ type: "text", text: "1\n2" }] }] }))
    // Earlier thinking left out; system messages and reminder-only messages have no content.
    const withThinking: Message = { role: "assistant", content: [{ type: "thinking", thinking: "hm", signature: "s" }, { type: "text", text: "ok" }] }
    expect(content(withThinking)).toEqual(content({ role: "assistant", content: [{ type: "text", text: "ok" }] }))
    expect(content({ role: "system", content: "env" })).toBeNull()
    expect(content({ role: "user", content: [{ type: "text", text: reminder("only") }] })).toBeNull()
    // A message with nothing to leave out is its normalised form itself (its content print is its fingerprint).
    const plain = GatewayThreads.normalise({ role: "user", content: "count" })
    expect(GatewayThreads.conversationContent(plain)).toBe(plain)
    // Everything else counts: a changed word, a reminder-like text in an assistant message, an error flag, an image.
    expect(content({ role: "user", content: "count " })).not.toEqual(content({ role: "user", content: "count" }))
    expect(content({ role: "assistant", content: reminder("x") })).not.toBeNull()
    expect(content({ role: "user", content: [{ type: "tool_result", tool_use_id: "t", content: "1\n2", is_error: true }] }))
      .not.toEqual(content({ role: "user", content: [{ type: "tool_result", tool_use_id: "t", content: "1\n2" }] }))
    expect(content({ role: "user", content: [{ type: "image", source: { data: "a" } }] })).not.toEqual(content({ role: "user", content: [{ type: "image", source: { data: "b" } }] }))
  })

  it("a request re-renders the stored conversation only when its content messages start with exactly the stored ones", () => {
    // Content prints: "" a message of the agent's context only.
    expect(GatewayThreads.rerenderedPrefix(["a", "b", "c"], ["a", "", "b", "", "c", "", "d", ""])).toBe(5)
    expect(GatewayThreads.rerenderedPrefix(["a", "", "b"], ["a", "b"])).toBe(2)
    expect(GatewayThreads.rerenderedPrefix(["a", "b"], ["a", "b", "", "c"])).toBe(2)
    // A stored message missing, changed or moved, a message added among them, a rewind: not a re-render.
    expect(GatewayThreads.rerenderedPrefix(["a", "b", "c"], ["a", "c", "d"])).toBeNull()
    expect(GatewayThreads.rerenderedPrefix(["a", "b", "c"], ["a", "x", "c"])).toBeNull()
    expect(GatewayThreads.rerenderedPrefix(["a", "b", "c"], ["a", "c", "b"])).toBeNull()
    expect(GatewayThreads.rerenderedPrefix(["a", "b", "c"], ["a", "n", "b", "c"])).toBeNull()
    expect(GatewayThreads.rerenderedPrefix(["a", "b", "c"], ["a", "b"])).toBeNull()
    // Nothing stored with content: nothing to recognise.
    expect(GatewayThreads.rerenderedPrefix(["", ""], ["", "", "a"])).toBeNull()
  })

  it("the print cache gives each message's content print, reused for a message it recognises", () => {
    const cache = GatewayThreads.makePrintCache()
    const messages: ReadonlyArray<Message> = [
      { role: "user", content: [{ type: "text", text: reminder("env") }, { type: "text", text: "count" }] },
      { role: "system", content: "env" },
      { role: "user", content: "count" }
    ]
    const a = cache.printsOf("k", messages)
    expect(a.content).toEqual([a.content![2], "", a.prints[2]])
    expect(a.content![0]).not.toBe(a.prints[0])
    const b = cache.printsOf("k", messages)
    expect(b.hashed).toBe(0)
    expect(b.content).toEqual(a.content)
  })
})
