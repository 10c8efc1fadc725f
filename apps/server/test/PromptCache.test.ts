/**
 * The loopback upstreams' prompt-cache model (support/PromptCache.ts) on small requests whose figures are worked out
 * by hand: entries at breakpoints, the longest cached prefix read, the write up to the last breakpoint, moving
 * breakpoints, a changed block breaking the prefix, and `cache_control` not part of a block's identity.
 */
import { describe, expect, it } from "@effect/vitest"
import * as PromptCache from "./support/PromptCache.js"

const bp = { type: "ephemeral" }
/** A text block of exactly `4 * n` characters of JSON, so `n` tokens. */
const text = (n: number, tag: string, cache = false) => {
  const skeleton = JSON.stringify({ type: "text", text: tag })
  return { type: "text", text: tag + "x".repeat(4 * n - skeleton.length), ...(cache ? { cache_control: bp } : {}) }
}
const user = (...content: Array<Record<string, unknown>>) => ({ role: "user", content })
const assistant = (...content: Array<Record<string, unknown>>) => ({ role: "assistant", content })

describe("PromptCache", () => {
  it("tokens are ceil(chars / 4) of a block's JSON without cache_control; the role counts in the first block", () => {
    const blocks = PromptCache.blocksOf({ system: [text(10, "s", true)], messages: [user(text(20, "a"))] })
    expect(blocks.map((b) => b.breakpoint)).toEqual([true, false])
    expect(PromptCache.tokensOf(blocks[0]!)).toBe(10)
    expect(blocks[1]!.json.startsWith("user:")).toBe(true)
    expect(PromptCache.tokensOf(blocks[1]!)).toBe(20 + 2)
  })

  it("a first request writes up to its last breakpoint; what follows it is uncached input", () => {
    const cache = PromptCache.make()
    const u = cache.usage({ system: [text(100, "s", true)], messages: [user(text(50, "a", true)), assistant(text(30, "b"))] })
    // 100 + 52 (the role prefix "user:" adds 5 chars: ceil(205/4) = 52) written, 30 + 3 ("assistant:") input.
    expect(u).toEqual({ cacheRead: 0, cacheWrite: 152, input: 33 })
    expect(cache.size()).toBe(2)
  })

  it("the next request reads the longest prefix ending at an earlier breakpoint and writes up to its own last one", () => {
    const cache = PromptCache.make()
    const system = [text(100, "s", true)]
    const m1 = text(40, "m1")
    const m2 = text(40, "m2")
    const m3 = text(40, "m3")
    cache.usage({ system, messages: [user({ ...m1, cache_control: bp })] })
    // The breakpoint moved from m1 to m3: m1's entry is read (100 + 42), m2 and m3 written (42 + 42).
    const second = cache.usage({ system, messages: [user(m1), assistant(m2), user({ ...m3, cache_control: bp })] })
    expect(second).toEqual({ cacheRead: 142, cacheWrite: 43 + 42, input: 0 })
    // The same request again reads everything.
    expect(cache.usage({ system, messages: [user(m1), assistant(m2), user({ ...m3, cache_control: bp })] })).toEqual({ cacheRead: 227, cacheWrite: 0, input: 0 })
  })

  it("a changed block breaks the prefix from there on: read only up to an entry before it", () => {
    const cache = PromptCache.make()
    const system = [text(100, "s", true)]
    const m1 = text(40, "m1")
    cache.usage({ system, messages: [user({ ...m1, cache_control: bp }), assistant(text(40, "m2", true))] })
    // m1 replaced (as a stub would): only the system's entry matches; m1' and m2 are written again.
    const u = cache.usage({ system, messages: [user(text(10, "stub", true)), assistant(text(40, "m2", true))] })
    expect(u).toEqual({ cacheRead: 100, cacheWrite: 12 + 43, input: 0 })
  })

  it("a prefix that ends between breakpoints is not an entry: only entries are read", () => {
    const cache = PromptCache.make()
    cache.usage({ system: [text(100, "s")], messages: [user(text(40, "m1"), text(40, "m2", true))] })
    // Shares system and m1 with the entry, but the entry ends after m2: nothing is read.
    const u = cache.usage({ system: [text(100, "s")], messages: [user(text(40, "m1"), text(40, "other", true))] })
    expect(u).toEqual({ cacheRead: 0, cacheWrite: 100 + 42 + 40, input: 0 })
  })

  it("tools come first in the prefix; a request without breakpoints is all input", () => {
    const cache = PromptCache.make()
    const tools = [{ name: "Bash", input_schema: { type: "object" } }]
    const u = cache.usage({ tools, messages: [user(text(40, "m1"))] })
    expect(u.cacheRead + u.cacheWrite).toBe(0)
    expect(u.input).toBe(Math.ceil(JSON.stringify(tools[0]).length / 4) + 42)
    expect(PromptCache.weighted([{ input: 5, cacheRead: 1_000, cacheWrite: 100 }, { input: 0, cacheRead: 10, cacheWrite: 0 }])).toBeCloseTo(226)
  })
})
