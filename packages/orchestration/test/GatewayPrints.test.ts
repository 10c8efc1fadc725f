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
