/** Test set-ups shared by the suites that need history deferred toward a native thread. */
import { Harness } from "@baton/testing"
import { expect } from "@effect/vitest"
import { Effect } from "effect"

/**
 * On a harness with providers `codex` (injects) and `claude`: codex at 190,000 of 200,000 (budget 0) owes a claude
 * run (its prompt and answer: two items, deferred). Returns the thread's id; the deferred handoff is what `/compact`
 * (or a later turn start) drains.
 */
export const deferredTowardCodex = (h: Harness.Harness) =>
  Effect.gen(function*() {
    const o = yield* Harness.ops
    const t = yield* o.create("codex")
    h.script.enqueue(Harness.reply(10, { usedTokens: 190_000, maxTokens: 200_000 }))
    yield* o.send(t, "first on codex")
    yield* o.switchTo(t, "claude")
    h.script.enqueue(Harness.reply(200))
    yield* o.send(t, "on claude")
    yield* o.switchTo(t, "codex")
    h.script.enqueue(Harness.reply(10, { usedTokens: 190_100, maxTokens: 200_000 }))
    const r = yield* o.send(t, "back on codex")
    expect(r.turnStart?.deferredItems).toBe(2)
    return t
  })
