/**
 * `GatewayBody`: a body parsed with its scope's earlier bodies (their shared history entries reused) is exactly
 * `JSON.parse` of its text (the same value, the same key order: `JSON.stringify` writes the same), and `undefined`
 * where `JSON.parse` fails; over conversations that grow, move their breakpoint, rewrite their start, change fields
 * before and after the history, and bodies that only look alike (a cut array left with `[a, ]`, duplicate keys,
 * `__proto__`, strings holding brackets, quotes and escapes, white space, non-ASCII text).
 */
import { GatewayMemo } from "@baton/orchestration"
import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import * as GatewayBody from "../src/GatewayBody.js"

const encode = (text: string) => new TextEncoder().encode(text)
const parseWhole = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/** Parses `texts` in turn in one scope as the gateway does (parse, intern, remember); each result against JSON.parse. */
const run = (texts: ReadonlyArray<string>, historyKey = "messages") => {
  const parser = GatewayBody.makeParser()
  const interner = GatewayMemo.makeInterner()
  const reused: Array<number> = []
  for (const text of texts) {
    const bytes = encode(text)
    const parsed = parser.parse("scope", bytes)
    const expected = parseWhole(text)
    expect(parsed.value).toEqual(expected)
    expect(JSON.stringify(parsed.value)).toBe(JSON.stringify(expected))
    reused.push(parsed.reused)
    const body = parsed.value
    if (typeof body === "object" && body !== null && !Array.isArray(body) && Array.isArray((body as Record<string, unknown>)[historyKey])) {
      interner.intern("scope", body as Record<string, unknown>, historyKey)
      parser.remember("scope", bytes, body as Record<string, unknown>, historyKey)
    }
  }
  return reused
}

const tricky = (n: number) => `out ${n}: "quoted" \\ back ] close [ open { } , : \u00e9\u4e2d\ud83d\ude00 \n\t end`
const round = (n: number, breakpoint = false) => [
  { role: "assistant", content: [{ type: "tool_use", id: `toolu_${n}`, name: "Bash", input: { command: `cat "f${n}" ]` } }] },
  {
    role: "user",
    content: [{ type: "tool_result", tool_use_id: `toolu_${n}`, content: tricky(n), ...(breakpoint ? { cache_control: { type: "ephemeral" } } : {}) }]
  }
]
/** A Claude-Code-like body of `rounds` rounds, the breakpoint on the newest message. */
const body = (rounds: number, extra: Record<string, unknown> = {}, space?: number) => {
  const messages: Array<unknown> = [{ role: "user", content: "start" }]
  for (let n = 0; n < rounds; n++) messages.push(...round(n, n === rounds - 1))
  return JSON.stringify({ model: "claude-x", max_tokens: 1000, system: [{ type: "text", text: "sys" }], messages, ...extra }, null, space)
}

describe("GatewayBody", () => {
  it("a growing conversation: each body as JSON.parse reads it, the shared history reused", () => {
    const texts = Array.from({ length: 12 }, (_, i) => body(i + 1, { stream: true, tools: [{ name: "Bash", input_schema: { type: "object" } }] }))
    const reused = run(texts)
    expect(reused[0]).toBe(0)
    // Every later body reuses the entries before the one whose breakpoint moved.
    for (let i = 1; i < texts.length; i++) expect(reused[i]).toBe(2 * i)
  })

  it("fields after the history: taken as they were when their bytes are the same, parsed again when not", () => {
    const parser = GatewayBody.makeParser()
    const tools = (name: string) => ({ stream: true, system: "after", tools: [{ name, input_schema: { type: "object" } }] })
    let previous: Record<string, unknown> | undefined
    for (const [i, text] of [body(2, tools("Bash")), body(3, tools("Bash")), body(4, tools("Bash")), body(5, tools("Read")), body(6, tools("Read"))].entries()) {
      const bytes = encode(text)
      const parsed = parser.parse("s", bytes)
      const value = parsed.value as Record<string, unknown>
      expect(value).toEqual(JSON.parse(text))
      expect(JSON.stringify(value)).toBe(JSON.stringify(JSON.parse(text)))
      // The same bytes after the history: the earlier body's objects; other bytes (a tool renamed): parsed anew.
      if (previous !== undefined) expect(value.tools === previous.tools).toBe(i !== 3)
      parser.remember("s", bytes, value, "messages")
      previous = value
    }
  })

  it("pretty-printed bodies, a retried body and a rewound one", () => {
    expect(run([body(3, {}, 2), body(4, {}, 2), body(4, {}, 2), body(5, {}, 2)]).slice(1)).toEqual([6, 8, 8])
    // The rewound body shares its first six entries (the seventh held the breakpoint).
    expect(run([body(6), body(6), body(3)])).toEqual([0, 12, 6])
  })

  it("changes before the history, after it and in its first entry are parsed whole or with their new values", () => {
    run([body(3), body(4, {}).replace('"max_tokens":1000', '"max_tokens":2000'), body(5, { stream: false }), body(6, { stream: true })])
    run([body(3), body(4).replace('"content":"start"', '"content":"again"')])
    run([body(3), body(4).replace('"system":[{"type":"text","text":"sys"}]', '"system":"other"')])
  })

  it("bodies that only look alike: invalid cuts, duplicate keys, __proto__, no history", () => {
    const three = body(3)
    // `[a, b, ]` is not JSON even though `[` + `b ...` would be.
    run([three, three.replace(/\]\}$/, ",]}")])
    run([three, three.replace(/\}\]\}$/, "}, ]}")])
    // A second history key after the array, a field before it repeated after it, a __proto__ field.
    run([three, three.replace(/\}$/, ',"messages":[]}')])
    run([three, three.replace(/\}$/, ',"max_tokens":7}')])
    run([three, three.replace(/\}$/, ',"__proto__":{"x":1}}')])
    // A new entry that is not JSON, the bytes after the history the same.
    const withTools = (n: number) => body(n, { tools: [{ name: "Bash" }] })
    run([withTools(3), withTools(4).replace('"tool_use_id":"toolu_3"', '"tool_use_id":toolu_3"')])
    run([withTools(3), withTools(4).replace('"tool_use_id":"toolu_3"', '"tool_use_id":"toolu_3"]')])
    run([three.replace(/\}$/, ',"max_tokens":7}'), body(4).replace(/\}$/, ',"max_tokens":7}'), body(5)])
    run(['{"__proto__":{"a":1},"messages":[1,2]}', '{"__proto__":{"a":1},"messages":[1,2,3]}'])
    // Integer-like keys (listed first by the engine) after the history.
    run([body(2, { "7": 1 }), body(3, { "7": 2 }), body(4)])
    // Not objects, not JSON, a history that is not an array, truncated bodies.
    run([three, "[1,2]", three, "not json", three.slice(0, three.length - 3), three, '{"messages":"text"}', body(4)])
    // Primitive entries and nested arrays as entries.
    run(['{"messages":[1,"two",[3,[4]],{"five":5},null,true]}', '{"messages":[1,"two",[3,[4]],{"five":5},null,true,false]}', '{"messages":[1,"two",[3,[4]],{"five":5},null,true,false ,  7 ]}'])
  })

  it("an entry ending inside the shared bytes but changed after them is parsed again", () => {
    // The shared bytes end inside the second round's tool result (entry 4): it and the rest are parsed anew.
    const a = body(4)
    const b = a.replace("out 1:", "out 1!")
    expect(run([a, b])).toEqual([0, 4])
  })

  it("the Responses history (`input`) and a conversation's sub-agent in the same scope", () => {
    const input = (n: number) => JSON.stringify({ model: "gpt", input: Array.from({ length: n }, (_, i) => ({ type: "function_call_output", call_id: `c${i}`, output: tricky(i) })), store: false })
    expect(run([input(2), input(3), input(4)], "input")).toEqual([0, 2, 3])
    const sub = (n: number) => body(n).replace('"content":"start"', '"content":"sub-agent"')
    const parser = GatewayBody.makeParser()
    for (const text of [body(2), sub(2), body(3), sub(3), body(4)]) {
      const bytes = encode(text)
      const parsed = parser.parse("s", bytes)
      expect(parsed.value).toEqual(JSON.parse(text))
      expect(JSON.stringify(parsed.value)).toBe(JSON.stringify(JSON.parse(text)))
      parser.remember("s", bytes, parsed.value as Record<string, unknown>, "messages")
    }
  })

  it("the structure scans agree with JSON.parse on each entry", () => {
    const text = body(5, { tools: [{ name: "a]b" }] }, 1)
    const bytes = encode(text)
    const found = GatewayBody.findKey(bytes, "messages")!
    const scanned = GatewayBody.scanEntries(bytes, found.valueStart + 1)!
    const decoder = new TextDecoder()
    expect(scanned.starts.map((s, i) => JSON.parse(decoder.decode(bytes.subarray(s, scanned.ends[i]))))).toEqual(JSON.parse(text).messages)
    expect(GatewayBody.keysAfter(bytes, scanned.close)).toEqual(["tools"])
    expect(GatewayBody.commonPrefix(encode("abcdef".repeat(100)), encode("abcdef".repeat(50) + "x"))).toBe(300)
  })
})

describe("GatewayBody review r19", () => {
  /** Parses byte bodies in turn in one scope as the gateway does; each result against JSON.parse of the whole text. */
  const runBytes = (bodies: ReadonlyArray<Uint8Array>) => {
    const parser = GatewayBody.makeParser()
    const interner = GatewayMemo.makeInterner()
    for (const bytes of bodies) {
      const parsed = parser.parse("scope", bytes)
      const expected = parseWhole(new TextDecoder().decode(bytes))
      expect(parsed.value).toEqual(expected)
      const body = parsed.value
      if (typeof body === "object" && body !== null && !Array.isArray(body) && Array.isArray((body as Record<string, unknown>).messages)) {
        interner.intern("scope", body as Record<string, unknown>, "messages")
        parser.remember("scope", bytes, body as Record<string, unknown>, "messages")
      }
    }
  }
  const bom = new Uint8Array([0xef, 0xbb, 0xbf])
  const join = (...parts: ReadonlyArray<string | Uint8Array>) => {
    const chunks = parts.map((p) => (typeof p === "string" ? encode(p) : p))
    const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0))
    let at = 0
    for (const c of chunks) {
      out.set(c, at)
      at += c.length
    }
    return out
  }

  it("a byte order mark at a new entry (not JSON white space) is no JSON, as JSON.parse of the whole says", () => {
    // Fields after the history the same (the entries alone parsed), and another field after it (the rest parsed).
    runBytes([encode(`{"model":"m","messages":[1,2]}`), join(`{"model":"m","messages":[1,2,`, bom, `3]}`)])
    runBytes([encode(`{"model":"m","messages":[1,2]}`), join(`{"model":"m","messages":[1,2,`, bom, `3],"x":1}`)])
  })

  it("a key after the history that is no JSON string (a raw line break) is no JSON, not a thrown SyntaxError", () => {
    runBytes([encode(`{"model":"m","messages":[1],"z":1}`), encode(`{"model":"m","messages":[1,2],"z\n":1}`)])
  })

  it("property: grown, edited and cut bodies (bytes inserted, deleted or replaced anywhere) are read as JSON.parse reads them", () => {
    // Bytes that matter to JSON's structure and to UTF-8: quotes, escapes, brackets, digits, white space, a BOM, a
    // lone continuation byte, a lead byte without its continuation.
    const significant = [..."\"\\,[]{}: 0123456789eE.-+\n\tnulltruefalse"].map((c) => c.charCodeAt(0)).concat([0xef, 0xbb, 0xbf, 0xc3, 0x80, 0xff])
    const edit = fc.record({ at: fc.nat(), kind: fc.constantFrom("insert", "delete", "replace"), byte: fc.constantFrom(...significant), n: fc.integer({ min: 1, max: 3 }) })
    const edited = (bytes: Uint8Array, edits: ReadonlyArray<{ at: number; kind: string; byte: number; n: number }>) => {
      const out = Array.from(bytes)
      for (const e of edits) {
        const at = e.at % (out.length + 1)
        if (e.kind === "insert") out.splice(at, 0, ...Array<number>(e.n).fill(e.byte))
        else if (e.kind === "delete") out.splice(at, e.n)
        else out.splice(at, 1, e.byte)
      }
      return new Uint8Array(out)
    }
    const value = fc.jsonValue({ maxDepth: 2 })
    const fields = (keys: ReadonlyArray<string>) => fc.dictionary(fc.constantFrom(...keys), value, { maxKeys: 2 })
    type Shape = { before: Record<string, unknown>; messages: Array<unknown>; after: Record<string, unknown>; space: string | number | undefined }
    const render = (b: Shape) => {
      const field = ([k, v]: [string, unknown]) => `${JSON.stringify(k)}:${JSON.stringify(v, null, b.space)}`
      return encode(`{${[...Object.entries(b.before).map(field), field(["messages", b.messages]), ...Object.entries(b.after).map(field)].join(",")}}`)
    }
    const shape = fc.record({
      before: fields(["model", "a", "__proto__", "messages", "1"]),
      messages: fc.array(value, { maxLength: 6 }),
      after: fields(["tools", "system", "a", "messages", "__proto__", "2"]),
      space: fc.constantFrom(undefined, 1, "\t", " \n")
    })
    const step = fc.record({ more: fc.array(value, { maxLength: 3 }), edits: fc.array(edit, { maxLength: 3 }), mode: fc.nat(3), after: fc.option(fields(["tools", "z", "a"])) })
    fc.assert(
      fc.property(shape, fc.array(step, { maxLength: 5 }), (first, steps) => {
        let b: Shape = first
        let last = render(b)
        const bodies = [last]
        for (const s of steps) {
          if (s.mode === 0) {
            bodies.push(edited(last, s.edits))
          } else {
            b = { ...b, messages: [...b.messages, ...s.more], after: s.after ?? b.after }
            last = render(b)
            bodies.push(s.mode === 1 ? edited(last, s.edits) : last)
          }
        }
        runBytes(bodies)
      }),
      { numRuns: 3000 }
    )
  })
})
