/**
 * `GatewayMemo` (issue 14, gateway time): a request's messages equal to its conversation's previous request's are
 * that request's (frozen) objects; what is new is frozen; memos are kept for interned objects only; `bodyJson` writes
 * exactly `JSON.stringify`'s text; and fingerprints and content prints of interned messages are the messages' prints.
 */
import { GatewayMemo, GatewayThreads } from "@baton/orchestration"
import { describe, expect, it } from "@effect/vitest"

const call = (n: number) => ({ role: "assistant", content: [{ type: "tool_use", id: `toolu_${n}`, name: "Bash", input: { command: `cat ${n}` } }] })
const result = (n: number) => ({ role: "user", content: [{ type: "tool_result", tool_use_id: `toolu_${n}`, content: `output ${n} `.repeat(30) }] })
const bodyOf = (rounds: number, extra: Record<string, unknown> = {}) => {
  const messages: Array<unknown> = [{ role: "user", content: "Work through the files." }]
  for (let i = 0; i < rounds; i++) messages.push(call(i), result(i))
  return { model: "claude-x", system: [{ type: "text", text: "You are a coding agent." }], tools: [{ name: "Bash" }], messages, ...extra }
}
/** What the agent sends: the body as bytes, parsed again (equal, not identical objects). */
const sent = <A>(body: A): A => JSON.parse(JSON.stringify(body)) as A

describe("GatewayMemo.makeInterner", () => {
  it("gives a request the previous request's objects for the messages it repeats, and freezes the new ones", () => {
    const interner = GatewayMemo.makeInterner()
    const first = sent(bodyOf(3))
    expect(interner.intern("s", first, "messages")).toBe(0)
    expect(first.messages.every((m) => Object.isFrozen(m) && GatewayMemo.isInterned(m))).toBe(true)
    expect(Object.isFrozen((first.messages[2] as { content: Array<unknown> }).content[0])).toBe(true)
    const second = sent(bodyOf(4))
    // The third round's result was cleared by the agent (an edit): not the earlier object.
    ;(second.messages[6] as { content: Array<{ content: string }> }).content[0]!.content = "[cleared]"
    expect(interner.intern("s", second, "messages")).toBe(6)
    second.messages.forEach((m, i) => {
      if (i < 7 && i !== 6) expect(m).toBe(first.messages[i])
      else expect(m).not.toBe(first.messages[i])
    })
    expect(second.system).toBe(first.system)
    expect(second.tools).toBe(first.tools)
    expect(JSON.stringify(second)).toBe(JSON.stringify({ ...sent(bodyOf(4)), messages: second.messages }))
    // The body and its history array stay the caller's (not frozen).
    expect(Object.isFrozen(second) || Object.isFrozen(second.messages)).toBe(false)
  })

  it("does not take an object whose keys come in another order (its JSON differs)", () => {
    const interner = GatewayMemo.makeInterner()
    const first = sent(bodyOf(1))
    interner.intern("s", first, "messages")
    const second = sent(bodyOf(1))
    second.messages[1] = { content: (second.messages[1] as { content: unknown }).content, role: "assistant" }
    expect(interner.intern("s", second, "messages")).toBe(2)
    expect(second.messages[1]).not.toBe(first.messages[1])
    expect(GatewayMemo.sameValue({ a: 1, b: 2 }, { b: 2, a: 1 })).toBe(false)
    expect(GatewayMemo.sameValue({ a: [1, "x", null, { c: true }] }, { a: [1, "x", null, { c: true }] })).toBe(true)
    expect(GatewayMemo.sameValue([1], { 0: 1 })).toBe(false)
  })

  it("keeps each conversation of a session apart (a sub-agent starts elsewhere) and other sessions apart", () => {
    const interner = GatewayMemo.makeInterner()
    const main = sent(bodyOf(2))
    interner.intern("s", main, "messages")
    const sub = sent({ ...bodyOf(1), messages: [{ role: "user", content: "Find the tests." }, call(7), result(7)] })
    expect(interner.intern("s", sub, "messages")).toBe(0)
    const mainAgain = sent(bodyOf(3))
    expect(interner.intern("s", mainAgain, "messages")).toBe(5)
    expect(mainAgain.messages[4]).toBe(main.messages[4])
    expect(interner.intern("other", sent(bodyOf(3)), "messages")).toBe(0)
  })
})

describe("GatewayMemo.memo and bodyJson", () => {
  it("computes once per interned object, every time for any other", () => {
    let calls = 0
    const f = GatewayMemo.memo((o: { n: number }) => (calls++, o.n * 2))
    const frozen = GatewayMemo.deepFreeze({ n: 2 })
    expect([f(frozen), f(frozen), f({ n: 3 }), f({ n: 3 })]).toEqual([4, 4, 6, 6])
    expect(calls).toBe(3)
    // Frozen by someone else is not interned (what it holds could still change).
    const outer = Object.freeze({ n: 5 })
    f(outer)
    f(outer)
    expect(calls).toBe(5)
  })

  it("writes JSON.stringify's text byte for byte", () => {
    const interner = GatewayMemo.makeInterner()
    const first = sent(bodyOf(2, { metadata: { user_id: "u" }, stream: true }))
    interner.intern("s", first, "messages")
    const bodies: Array<Record<string, unknown>> = [
      first,
      { ...first, messages: [...first.messages, { role: "user", content: "é \u2028 \"quoted\" \\ \u0000" }], tools: undefined },
      { a: [1, undefined, () => 1, Symbol("s"), null], b: "x", c: undefined, "k\"ey": { nested: [1.5, -0, 1e21] } },
      { toJSON: () => ({ replaced: true }) },
      {}
    ]
    for (const b of bodies) expect(GatewayMemo.bodyJson(b)).toBe(JSON.stringify(b))
  })

  it("fingerprints an interned message as any other, and the conversation key alike", () => {
    const interner = GatewayMemo.makeInterner()
    const body = sent(bodyOf(3))
    const plain = sent(bodyOf(3))
    interner.intern("s", body, "messages")
    for (let i = 0; i < body.messages.length; i++) {
      expect(GatewayThreads.fingerprintOf(GatewayThreads.anthropicMessages, body.messages[i])).toBe(GatewayThreads.fingerprint(plain.messages[i] as GatewayThreads.WireMessage))
    }
    expect(GatewayThreads.conversationKey("x", body.system, body.messages)).toBe(GatewayThreads.conversationKey("x", plain.system, plain.messages))
    const cache = GatewayThreads.makePrintCache()
    expect(cache.printsOf("k", body.messages).hashed).toBe(7)
    const next = sent(bodyOf(4))
    interner.intern("s", next, "messages")
    const again = cache.printsOf("k", next.messages)
    const prints = sent(bodyOf(4)).messages.map((m) => GatewayThreads.fingerprint(m as GatewayThreads.WireMessage))
    // Nothing of these messages is the agent's context: each content print is its fingerprint.
    expect(again).toEqual({ prints, content: prints, hashed: 2 })
  })

  it("gives interned messages' content prints as any other's: from the previous request, or taken once per message", () => {
    const reminder = (text: string) => `<system-reminder>${text}</system-reminder>`
    const all: Array<unknown> = [
      ...bodyOf(2).messages,
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: `done\n\n${reminder("tokens")}` }] },
      { role: "assistant", content: [{ type: "thinking", thinking: "hm", signature: "s" }, { type: "text", text: "ok" }] },
      { role: "user", content: [{ type: "text", text: reminder("env") }] },
      { role: "user", content: [{ type: "text", text: reminder("later") }, { type: "text", text: "go on" }] },
      { role: "assistant", content: [{ type: "thinking", thinking: "again", signature: "t" }, { type: "text", text: "done" }] }
    ]
    // The prints of the same messages, neither interned nor cached.
    const reference = (messages: ReadonlyArray<unknown>) => {
      const { content, prints } = GatewayThreads.makePrintCache().printsOf("plain", sent(messages))
      return { content, prints }
    }
    const expected = reference(all)
    expect(expected.content).not.toEqual(expected.prints)
    expect(expected.content).toContain("")

    const interner = GatewayMemo.makeInterner()
    const cache = GatewayThreads.makePrintCache()
    const first = sent({ messages: all.slice(0, 7) })
    interner.intern("s", first, "messages")
    expect(cache.printsOf("k", first.messages)).toEqual({ ...reference(all.slice(0, 7)), hashed: 7 })
    const second = sent({ messages: all })
    expect(interner.intern("s", second, "messages")).toBe(7)
    // The repeated messages are the previous request's objects: their prints and content prints are that request's.
    expect(cache.printsOf("k", second.messages)).toEqual({ ...expected, hashed: 3 })
    // Without a previous request (another process's cache, an evicted conversation): the interned messages' prints.
    expect(GatewayThreads.makePrintCache().printsOf("k", second.messages)).toEqual({ ...expected, hashed: all.length })
    expect(GatewayThreads.makePrintCache().printsOf("k", second.messages)).toEqual({ ...expected, hashed: all.length })
  })
})
