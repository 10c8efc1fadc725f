/**
 * The lines `baton offload --dry-run` and `--undo` print for the server's tool-result offload preview and undo, and the
 * line `send` / `events` print for a retried provider request.
 */
import type { OffloadReport, ProviderInstance, ThreadId, ToolResultOffloadPreview } from "@baton/contracts"
import { describe, expect, it } from "vitest"
import * as Format from "../src/Format.js"

const base: ToolResultOffloadPreview = {
  threadId: "thr_1" as ThreadId,
  providerInstance: "claude" as ProviderInstance,
  nativeRef: "claude-5f0c",
  enabled: true,
  tier: "mild",
  reason: "",
  units: [],
  entrySeqs: [],
  tokensBefore: 26_389,
  tokensAfter: 26_389,
  rewriteCostTokens: 0,
  rewriteCostUsd: 0,
  expectedSavingsTokens: 0,
  breakEvenRequests: null,
  stubbedEntries: 0
}

describe("baton offload --dry-run / --undo lines", () => {
  it("a preview with units names every call up to six, then counts the rest; tokens, rewrite cost and break-even", () => {
    const units = Array.from({ length: 8 }, (_, i) => ({ refs: [`tool:toolu_${i}`], toolNames: ["read_file"] }))
    const line = Format.toolResultOffloadPreview({
      ...base,
      units,
      entrySeqs: units.map((_, i) => 4 + 2 * i),
      tokensAfter: 8_938,
      rewriteCostTokens: 2_310,
      rewriteCostUsd: 0.00693,
      expectedSavingsTokens: 17_451,
      breakEvenRequests: 1.32,
      stubbedEntries: 3
    })
    expect(line).toBe(
      "tool-result offload (dry run) on claude, native claude-5f0c: mild: would stub 8 units (tool:toolu_0 read_file, " +
        "tool:toolu_1 read_file, tool:toolu_2 read_file, tool:toolu_3 read_file, tool:toolu_4 read_file, … 3 more); " +
        "request 26,389 -> 8,938 tok; cache rewrite 2,310 tok ($0.00693), pays off after 1.3 requests; 3 entries already stubs"
    )
  })

  it("nothing to stub says why; off says so", () => {
    expect(Format.toolResultOffloadPreview({ ...base, tier: "none", reason: "no eligible unit", stubbedEntries: 1 })).toBe(
      "tool-result offload (dry run) on claude, native claude-5f0c: none, nothing to stub: no eligible unit; request 26,389 tok; 1 entry already stubs"
    )
    expect(Format.toolResultOffloadPreview({ ...base, enabled: false, tier: "none", reason: "tool-result offload is off for provider instance \"claude\"" }))
      .toBe("tool-result offload (dry run) on claude, native claude-5f0c: off (tool-result offload is off for provider instance \"claude\")")
  })

  it("undo: what was restored, or why nothing was", () => {
    const undo = { threadId: base.threadId, providerInstance: base.providerInstance, nativeRef: base.nativeRef }
    expect(Format.toolResultOffloadUndo({ ...undo, undone: true, flushSeq: 41, entrySeqs: [4, 6], reason: "" }))
      .toBe("undid flush 41 on claude (native claude-5f0c): 2 entries carry their originals again")
    expect(Format.toolResultOffloadUndo({ ...undo, undone: false, flushSeq: null, entrySeqs: [], reason: "no flush on this native thread to undo" }))
      .toBe("nothing undone: no flush on this native thread to undo")
  })
})

describe("a retried provider request", () => {
  it("run.retry_scheduled reads: retrying in 2.0 s (attempt 2, HTTP 529 overloaded: reason); no answer, rate limits and long reasons", () => {
    expect(Format.retryLine({ attempt: 1, delayMs: 2_000, httpStatus: 529, reason: "HTTP 529: Anthropic overloaded_error: Overloaded" }))
      .toBe("retrying in 2.0 s (attempt 2, HTTP 529 overloaded: HTTP 529: Anthropic overloaded_error: Overloaded)")
    expect(Format.retryLine({ attempt: 2, delayMs: 1_250, httpStatus: 429, reason: "rate" })).toBe("retrying in 1.3 s (attempt 3, HTTP 429 rate limited: rate)")
    expect(Format.retryLine({ attempt: 1, delayMs: 480, httpStatus: null, reason: "unreachable" })).toBe("retrying in 0.5 s (attempt 2, no answer: unreachable)")
    expect(Format.retryLine({ attempt: 1, delayMs: 500, httpStatus: 503, reason: "x".repeat(150) })).toBe(`retrying in 0.5 s (attempt 2, HTTP 503 server error: ${"x".repeat(99)}…)`)
  })
})

describe("baton offload --preview / /offload lines", () => {
  // The server's answer to `POST /threads/{id}/offload {"keepTokens":8000,"dryRun":true}` (a fresh server, 2 runs).
  const preview = {
    operationId: "cmd_1688bcb3-2183-4a4f-9fd5-bde5f5f0b57b", outcome: "preview",
    message: "Nothing would be offloaded: the 4 item(s) after the start hold 32 tokens, within the 8000 kept verbatim.",
    offloaded: false, reason: "nothing to offload: the 4 item(s) after the start hold 32 tokens, within the 8000 kept verbatim",
    offloadId: null, summaryItemId: null, cutSeq: null, coveredItems: 0, coveredTokens: 0, summaryTokens: 0, keptItems: 4,
    keptTokens: 32, keepTokens: 8000, movedForToolUnits: 0, supersededHandoffIds: [], handoffIds: [], coveredItemIds: [],
    tokensBefore: 32, tokensAfter: 32, cacheRewriteTokens: 0, cacheRewriteUsd: null, cost: null, retryable: false
  } as unknown as OffloadReport

  // b48srv: the reason came twice (the message says it, then `preview: nothing to offload: …` / `nothing: …` again).
  it("a preview of nothing is its message alone, naming no operation id (none is stored: `--get` of it answers 404)", () => {
    expect(Format.offloadReport(preview)).toBe("Nothing would be offloaded: the 4 item(s) after the start hold 32 tokens, within the 8000 kept verbatim.")
    // A server whose message does not say the reason (older ones said "nothing to do"): the reason follows.
    expect(Format.offloadReport({ ...preview, message: "Nothing would be offloaded: nothing to do." })).toBe(
      "Nothing would be offloaded: nothing to do.\n" +
        "preview: nothing to offload: the 4 item(s) after the start hold 32 tokens, within the 8000 kept verbatim"
    )
  })

  it("an offload of nothing: its message, then only the operation id, which `--get` reads", () => {
    expect(Format.offloadReport({
      ...preview,
      outcome: "nothing",
      operationId: "op-1",
      message: "Nothing was offloaded: the 25 tokens before the cut are fewer than their summary (38 tokens). The conversation is unchanged.",
      reason: "nothing worth offloading: the 25 tokens before the cut are fewer than their summary (38 tokens)"
    })).toBe(
      "Nothing was offloaded: the 25 tokens before the cut are fewer than their summary (38 tokens). The conversation is unchanged.\n" +
        "operation op-1"
    )
  })

  // b48srv: a preview that would offload printed `preview: nothing to do` under its message.
  it("a preview that would offload: what it would cover and keep, not `preview: nothing to do`", () => {
    const message = "Would offload 2 older messages (items up to #2). Conversation: ~43 -> ~42 tokens (2% decrease) estimated, 2 messages " +
      "kept; the provider's prompt cache is rewritten once (49 input-token equivalents). Nothing was changed."
    expect(Format.offloadReport({
      ...preview,
      message,
      reason: null,
      cutSeq: 2,
      coveredItems: 2,
      coveredTokens: 25,
      summaryTokens: 24,
      keptItems: 2,
      keptTokens: 18,
      keepTokens: 10
    } as OffloadReport)).toBe(`${message}\nwould offload through item 2: 2 items 25 tok -> a summary of about 24 tok; kept 2 items 18 tok verbatim (asked 10)`)
  })
})
