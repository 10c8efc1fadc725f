/** The line `/offload` shows the user (issue 12 item 8), from its report. */
import type { OffloadReport } from "@baton/contracts"
import { OffloadMessage } from "@baton/orchestration"
import { describe, expect, it } from "vitest"

const report = (fields: Partial<OffloadReport>): OffloadReport => ({
  operationId: "op",
  outcome: "offloaded",
  message: "",
  offloaded: true,
  reason: null,
  offloadId: null,
  summaryItemId: null,
  cutSeq: 6,
  coveredItems: 6,
  coveredTokens: 800,
  summaryTokens: 50,
  keptItems: 4,
  keptTokens: 200,
  keepTokens: 200,
  movedForToolUnits: 0,
  supersededHandoffIds: [],
  handoffIds: [],
  coveredItemIds: [],
  tokensBefore: 1_000,
  tokensAfter: 250,
  cacheRewriteTokens: 0,
  cacheRewriteUsd: null,
  cost: null,
  retryable: false,
  ...fields
})

describe("OffloadMessage", () => {
  it("says what was offloaded, the conversation's tokens before and after, and what was kept", () => {
    expect(OffloadMessage.of(report({}))).toBe(
      "Offloaded 6 older messages, freeing up context window space. Conversation: ~1.0K -> ~250 tokens (75% decrease), 4 messages kept."
    )
    expect(OffloadMessage.approx(12_345)).toBe("~12.3K")
    expect(OffloadMessage.approx(2_500_000)).toBe("~2.5M")
  })

  it("failures say what happened and that the conversation is unchanged, with the spent cost", () => {
    const cost = { providerInstance: "sum", calls: 1, inputTokens: 1_000, cacheWriteTokens: 0, cacheReadTokens: 0, outputTokens: 200, costUsd: 0.006, state: "abandoned" as const }
    expect(OffloadMessage.of(report({ outcome: "failed", offloaded: false, reason: "the summariser failed: overloaded", retryable: true, cost }))).toBe(
      "The offload failed: the summariser failed: overloaded. The conversation is unchanged; retry /offload later. " +
        "The summariser's 1 call (1000 input, 200 output tokens, $0.006) was recorded as spent."
    )
    expect(OffloadMessage.of(report({ outcome: "cancelled", offloaded: false }))).toBe(
      "The offload was cancelled before it was applied. The conversation is unchanged."
    )
    expect(OffloadMessage.of(report({ outcome: "nothing", offloaded: false, reason: "nothing to offload: the 2 item(s) after the start hold 90 tokens, within the 16000 kept verbatim" }))).toBe(
      "Nothing was offloaded: the 2 item(s) after the start hold 90 tokens, within the 16000 kept verbatim. The conversation is unchanged."
    )
  })
})
