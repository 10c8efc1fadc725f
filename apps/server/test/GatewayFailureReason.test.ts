/**
 * A failed gateway run's reason (`GatewayDialect.upstreamFailureReason`): the upstream's own words first, each part
 * clipped to 300 UTF-16 code units without splitting a character. Found by a review (r30): `.slice(0, 300)` could
 * end inside a surrogate pair, and the reason, stored and served as JSON, then held a lone `\ud83d`.
 */
import { Text } from "@baton/contracts"
import { describe, expect, it } from "@effect/vitest"
import { upstreamFailureReason } from "../src/GatewayDialect.js"

/** Where `s` holds half a surrogate pair (-1: nowhere). */
const loneAt = Text.loneSurrogateAt

describe("upstreamFailureReason", () => {
  // "x" then pairs at (1, 2), (3, 4), …: code unit 300 is the low half of the 150th emoji.
  const emoji = `x${"😀".repeat(200)}`

  it("clips a body that is not JSON at a character boundary (at most 300 code units)", () => {
    const reason = upstreamFailureReason(502, emoji)
    expect(loneAt(reason)).toBe(-1)
    expect(reason).toBe(`the upstream answered HTTP 502: x${"😀".repeat(149)}`)
  })

  it("clips the error's message and the body the same way", () => {
    const body = JSON.stringify({ type: "error", error: { type: "overloaded_error", message: emoji } })
    const reason = upstreamFailureReason(529, body)
    expect(loneAt(reason)).toBe(-1)
    expect(reason.startsWith(`the upstream answered HTTP 529 (overloaded_error): x${"😀".repeat(149)}; body: `)).toBe(true)
  })

  // Found by the same review: a top-level message was ignored when `error` was an object without one.
  it("takes a top-level message when the error object has none", () => {
    const body = JSON.stringify({ error: { code: "upstream_timeout" }, message: "The model did not answer in time" })
    expect(upstreamFailureReason(504, body)).toBe(`the upstream answered HTTP 504 (upstream_timeout): The model did not answer in time; body: ${body}`)
  })
})
