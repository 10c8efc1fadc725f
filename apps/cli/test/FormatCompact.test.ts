/**
 * `baton compact`'s line for a `/compact` that did not compact: the reason, and the deliveries only when it drained
 * something. Found by a newcomer's walk (b46ux): right after a switch it printed "no native thread yet: nothing to
 * compact; delivered 0 items 0 tok, omitted 0 items, still deferred 1 handoff".
 */
import { ThreadCompaction } from "@baton/orchestration"
import { describe, expect, it } from "vitest"
import * as Format from "../src/Format.js"

const notCompacted = { ...ThreadCompaction.notCompacted(null, "no_native_thread"), stillDeferred: 1 }

describe("the CLI's line for a /compact that did not compact", () => {
  it("before the lane's first turn: says what is owed and when it goes out, without counts of nothing", () => {
    expect(Format.compactReport({ ...notCompacted, reason: ThreadCompaction.noNativeThreadReason("claude")(1) })).toBe(
      "not compacted: no native thread yet on claude (no turn has run on it): nothing to compact, and no thread to drain the " +
        "handoff owed to it into; its first turn starts one and delivers that history as the turn's budget allows (what does " +
        "not fit stays deferred for later turns and /compact); still deferred 1 handoff"
    )
  })

  it("having drained history without compacting (a model-API lane): the deliveries too", () => {
    expect(Format.compactReport({ ...notCompacted, reason: "not supported", reasonCode: "not_supported", deliveredItems: 3, deliveredTokens: 1200 }))
      .toBe("not compacted: not supported; delivered 3 items 1,200 tok, omitted 0 items, still deferred 1 handoff")
  })
})
