/**
 * The `baseline` column of `gateway_conversations` (docs/gateway.md, "Re-rendered history"): a row written before
 * content prints existed (a JSON array of fingerprints) still reads, without content prints; a baseline with content
 * prints is written as an object and reads back the same.
 */
import { GatewayConversations } from "@baton/persistence"
import { describe, expect, it } from "@effect/vitest"
import { Schema } from "effect"

const row = (baseline: string) => ({
  conversationKey: "session:s:abc",
  threadId: "thr_1",
  baseline,
  requests: 2,
  divergences: 0,
  offloaded: "[]",
  expansions: "{}",
  createdAt: "2026-12-03T00:00:00.000Z",
  updatedAt: "2026-12-03T00:00:00.000Z"
})

describe("GatewayConversations.Conversation", () => {
  it("reads a legacy baseline (an array of fingerprints) without content prints", () => {
    const decoded = Schema.decodeUnknownSync(GatewayConversations.Conversation)(row("[\"f1\",\"f2\"]"))
    expect(decoded.baseline).toEqual({ prints: ["f1", "f2"], content: null })
    // Written back unchanged while its content prints are unknown.
    expect(Schema.encodeSync(GatewayConversations.Conversation)(decoded).baseline).toBe("[\"f1\",\"f2\"]")
  })

  it("writes a baseline with content prints as an object and reads it back", () => {
    const baseline = { prints: ["f1", "f2", "f3"], content: ["c1", "", "f3"] }
    const encoded = Schema.encodeSync(GatewayConversations.Conversation)({ ...Schema.decodeUnknownSync(GatewayConversations.Conversation)(row("[]")), baseline })
    expect(JSON.parse(encoded.baseline)).toEqual(baseline)
    expect(Schema.decodeUnknownSync(GatewayConversations.Conversation)(encoded).baseline).toEqual(baseline)
  })
})
