import { describe, expect, it } from "@effect/vitest"
import { Effect, FastCheck as fc } from "effect"
import { countTokens as gptTokenizerCount } from "gpt-tokenizer/encoding/o200k_base"
import { Tiktoken } from "js-tiktoken/lite"
import o200kBase from "js-tiktoken/ranks/o200k_base"
import * as O200k from "../src/internal/O200k.js"
import * as TokenCounter from "../src/TokenCounter.js"

/** The reference: js-tiktoken, a port of OpenAI's tiktoken, with special tokens encoded as text. */
const tiktoken = new Tiktoken(o200kBase)
const reference = (text: string): number => tiktoken.encode(text, [], []).length

/** gpt-tokenizer unrepaired, for long BOM-free pieces where js-tiktoken's O(n²) merge would take minutes. */
const gptTokenizer = (text: string): number => gptTokenizerCount(text, { disallowedSpecial: new Set() })

const counter = TokenCounter.make()

/** Fragments that stress the split pattern: whitespace runs, contractions, digits, marks, BOMs, lone surrogates. */
const fragment = fc.oneof(
  fc.constantFrom(
    " ",
    "  ",
    "   ",
    "\n",
    "\n\n",
    "\r\n",
    "\t",
    "'s",
    "'LL",
    "don't",
    "//",
    "/\n/\n",
    "!!\n",
    "<|endoftext|>",
    "<|im_start|>",
    "\u00a0",
    "\u3000",
    "\u200b",
    "e\u0301",
    "ß",
    "İ",
    "ǅ",
    "١٢٣",
    "123456",
    "😀",
    "👩‍💻",
    "\ud800",
    "\udc00",
    "\uFEFF",
    "\uFEFFusing",
    "namespace",
    "上下文预算。",
    "a".repeat(40),
    " ".repeat(40),
    "=".repeat(40),
    "\n".repeat(20),
    "漢".repeat(40)
  ),
  fc.string({ unit: "grapheme", maxLength: 4 }),
  fc.string({ unit: "binary", maxLength: 4 }),
  fc.string({ maxLength: 6 }),
  // Base64 and hex (letters and digits alternating), CJK with its punctuation, letters before marks and apostrophes.
  fc.base64String({ maxLength: 12 }),
  fc.stringMatching(/^[0-9a-f]{1,8}$/),
  fc.constantFrom("文字。", "上下文，预算", "ｱｲ１２", "x\u0301'", "Ω’s", "٣٤a", "a\u{1D400}1", "𝐀.")
)
const text = fc.array(fragment, { maxLength: 30 }).map((parts) => parts.join(""))

/** 30,000 CJK ideographs without punctuation: one pre-token of 90,000 bytes. */
const unpunctuatedCjk = (length: number): string =>
  Array.from({ length }, (_, i) => String.fromCodePoint(0x4e00 + ((i * 7919) % 20902))).join("")

describe("TokenCounter", () => {
  it("counts exactly what tiktoken counts, on fixed text", () => {
    const cases: ReadonlyArray<readonly [string, number]> = [
      ["", 0],
      ["Continue", 1],
      ["Hello, world!", 4],
      ["const x = await Effect.runPromise(program) // ok\n", 12],
      ["你好，世界。上下文预算。", 8],
      ["👩‍💻 ship it 🚀", 9],
      ["    \n\n\t  x", 3]
    ]
    for (const [input, tokens] of cases) {
      expect(counter.count(input)).toBe(tokens)
      expect(reference(input)).toBe(tokens)
    }
  })

  it("counts special-token text as plain text instead of throwing", () => {
    expect(counter.count("<|endoftext|>")).toBe(7)
    expect(counter.count("a <|endoftext|> b <|endofprompt|> c <|fim_prefix|>")).toBe(23)
    expect(reference("a <|endoftext|> b <|endofprompt|> c <|fim_prefix|>")).toBe(23)
  })

  it("counts byte-order marks as tiktoken does (gpt-tokenizer alone overcounts them)", () => {
    const cases: ReadonlyArray<readonly [string, number]> = [
      ["\uFEFF", 1],
      ["\uFEFF\uFEFF", 1],
      ["\uFEFFusing System;", 3],
      ["\uFEFF#include <stdio.h>", 6],
      ["x \uFEFF//", 4],
      ["a\uFEFF\n\nb", 3]
    ]
    for (const [input, tokens] of cases) {
      expect(reference(input)).toBe(tokens)
      expect(counter.count(input)).toBe(tokens)
    }
    // The bug being repaired: a regression guard should gpt-tokenizer fix it upstream (then drop the repair).
    expect(gptTokenizer("\uFEFFusing System;")).toBe(5)
  })

  it("counts lone surrogates like any UTF-8 encoder (as U+FFFD)", () => {
    expect(counter.count("\ud800abc")).toBe(reference("\ud800abc"))
    expect(counter.count("\ud800")).toBe(counter.count("\ufffd"))
  })

  it("counts long single pre-tokens exactly (the O(n log n) merge path)", () => {
    for (const input of [unpunctuatedCjk(6_000), "a".repeat(10_000), "=".repeat(10_000), `${" ".repeat(5_000)}x`]) {
      expect(counter.count(input)).toBe(gptTokenizer(input))
    }
    const withBom = "\uFEFF" + "b".repeat(4_000) + " tail"
    expect(counter.count(withBom)).toBe(reference(withBom))
  })

  it("counts 30,000 unpunctuated CJK characters", () => {
    // 57,534 tokens (gpt-tokenizer alone agrees, after about 3 s; the repaired counter takes about 50 ms).
    expect(counter.count(unpunctuatedCjk(30_000))).toBe(57_534)
  })

  it.prop("agrees with tiktoken on random text", [text], ([input]) => {
    expect(counter.count(input)).toBe(reference(input))
  }, { fastCheck: { numRuns: 3_000 } })

  it.prop(
    "agrees with tiktoken when nearly every pre-token takes the repaired path",
    [text, fc.integer({ min: 1, max: 8 })],
    ([input, longPiece]) => {
      expect(O200k.makeCount(longPiece)(input)).toBe(reference(input))
    },
    { fastCheck: { numRuns: 3_000 } }
  )

  it.prop(
    "agrees with tiktoken when a text is counted in stretches cut at nearly every cut point",
    [fc.array(fc.oneof(text, fc.constantFrom("a b", "Zz  y", "x\n", "it's so", "q 1", "w 'll")), { maxLength: 6 }).map((xs) => xs.join("")), fc.integer({ min: 1, max: 8 })],
    ([input, stretch]) => {
      expect(O200k.makeCount(O200k.defaultLongPiece, stretch)(input)).toBe(reference(input))
      expect(O200k.stretchesOf(input, stretch).join("")).toBe(input)
    },
    { fastCheck: { numRuns: 3_000 } }
  )

  it("does not let a cut before a long piece re-split the whitespace before it", () => {
    // Smallest input found: "  123" splits as " ", " ", "123"; cut before "123", "  " alone is one piece.
    expect(reference("  123")).toBe(3)
    expect(O200k.makeCount(2)("  123")).toBe(3)
    expect(O200k.makeCount(2)("x  \n\n  123")).toBe(reference("x  \n\n  123"))
  })

  it.effect("is provided by its layer", () =>
    Effect.gen(function*() {
      const provided = yield* TokenCounter.TokenCounter
      expect(provided.name).toBe("o200k_base (gpt-tokenizer 3.4.0)")
      expect(provided.count("Hello, world!")).toBe(4)
    }).pipe(Effect.provide(TokenCounter.layer)))
})
