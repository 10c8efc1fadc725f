/** `Text.toStorableText`: NUL and lone surrogates become U+FFFD; pairs and everything else stay as they are. */
import { describe, expect, it } from "@effect/vitest"
import { Text } from "../src/index.js"

describe("Text.toStorableText", () => {
  it("replaces each NUL and each lone surrogate (high or low, at either end) with U+FFFD, keeping pairs", () => {
    expect(Text.toStorableText("a\u0000b\u0000")).toBe("a\uFFFDb\uFFFD")
    expect(Text.toStorableText("\ud83d")).toBe("\uFFFD")
    expect(Text.toStorableText("x\ude00y")).toBe("x\uFFFDy")
    expect(Text.toStorableText("\ude00\ud83d")).toBe("\uFFFD\uFFFD")
    expect(Text.toStorableText("ok 😀 \ud83d\ude00 中文")).toBe("ok 😀 😀 中文")
    expect(Text.toStorableText("")).toBe("")
    for (const text of ["\u0000", "\ud83d", "a\ude00", "b\u0000\ud800"]) {
      expect(Text.storableText("t")(Text.toStorableText(text))).toBe(true)
    }
  })
})
