/**
 * The SSE decoder and `dataLines` (what the gateway re-encodes events with): a data value with line feeds written
 * as several `data:` lines decodes back to itself, one message (a single `data: ` line holding it would not).
 */
import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { Sse } from "../src/index.js"

const decodeAll = (text: string) => {
  const decoder = Sse.makeDecoder()
  return decoder.push(new TextEncoder().encode(text))
}

describe("Sse.dataLines", () => {
  it("a pretty-printed JSON body comes back whole as one message's data", () => {
    const body = JSON.stringify({ type: "error", error: { type: "invalid_request_error", message: "prompt is too long" } }, null, 2)
    const messages = decodeAll(`event: error\n${Sse.dataLines(body)}\n\n`)
    expect(messages.map((m) => [m.event, m.data])).toEqual([["error", body]])
    // Written on one `data:` line, the body's later lines are not data: the message holds its first line only.
    expect(decodeAll(`event: error\ndata: ${body}\n\n`).map((m) => m.data)).toEqual(["{"])
  })

  it("any text without carriage returns decodes back to itself (property)", () => {
    fc.assert(fc.property(fc.string({ unit: fc.constantFrom("a", " ", "\n", ":", "{", "é", "data: ") }), (data) => {
      const messages = decodeAll(`event: x\n${Sse.dataLines(data)}\n\n`)
      expect(messages.map((m) => m.data)).toEqual([data])
    }), { numRuns: 500 })
  })
})
