import { Harness } from "@baton/testing"
import { describe, expect, it, beforeAll } from "@effect/vitest"
import { Effect, Tracer } from "effect"

const ops = Harness.ops

/** A tracer that counts the statements `@effect/sql` runs (`sql.execute` spans) while `counting.on` is set. */
const counting = { on: false, statements: 0 }
const countingTracer = Tracer.make({
  span: (name, parent, context, links, startTime, kind) => ({
    _tag: "Span", name, spanId: "s", traceId: "t", parent, context, status: { _tag: "Started", startTime },
    attributes: new Map(), links: [...links], sampled: true, kind,
    end: () => {
      if (counting.on && name === "sql.execute") counting.statements++
    },
    attribute: () => {}, event: () => {}, addLinks: () => {}
  }),
  context: (f) => f()
})

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  // Regression: a switch read every handoff ever made toward its destination and each one's delivery, one statement
  // per handoff, so each switch on a long-lived thread cost more than the last (1.8 ms at the first, 19 ms after 700
  // in bench/turn-start.bench.ts). Now one statement reads what the handoffs cover, whatever their number.
  it.effect("a switch runs as many statements after 24 earlier switches as after 2 (not one more per earlier handoff)", () => {
    const h = Harness.make([
      { name: "claude", window: 1_000_000, inject: false },
      { name: "codex", window: 1_000_000, inject: false }
    ])
    return Effect.gen(function*() {
      const o = yield* ops
      const threadId = yield* o.create("claude")
      const switchAndSend = (provider: string, i: number) =>
        Effect.gen(function*() {
          counting.on = true
          counting.statements = 0
          yield* o.switchTo(threadId, provider)
          counting.on = false
          const statements = counting.statements
          h.script.enqueue(Harness.reply(20))
          expect((yield* o.send(threadId, `step ${i}`)).status).toBe("completed")
          return statements
        })
      const counts: Array<number> = []
      for (let i = 0; i < 26; i++) counts.push(yield* switchAndSend(i % 2 === 0 ? "codex" : "claude", i))
      // Each switch after the first two toward each side finds closed handoffs settled inline behind it.
      expect(counts[25]).toBe(counts[3])
      expect(counts[24]).toBe(counts[2])
    }).pipe(Effect.withTracer(countingTracer), Effect.provide(h.layer))
  })
})
