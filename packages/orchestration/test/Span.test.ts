/**
 * `Span.fn` and `Span.withSpan`, the orchestrator's service-method spans: with the tracer enabled they are
 * `Effect.fn`'s and `Effect.withSpan`'s (the span reaches the tracer, named, parented, with its failure); with it
 * disabled they open no span at all, where `Effect.fn` still made a no-op span and copied the fiber's context to
 * provide it (about 10-20 µs a call: bench/README.md, "Tracing off").
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option, Tracer } from "effect"
import * as Span from "../src/internal/Span.js"

/** The spans the tracer was asked for, by name, each with its parent's name and how it ended. */
const recorded = () => {
  const spans: Array<{ readonly name: string; readonly parent: string | null; exit?: string }> = []
  const tracer = Tracer.make({
    span: (name, parent, context, links, startTime, kind) => {
      const entry: { name: string; parent: string | null; exit?: string } = {
        name,
        parent: Option.match(parent, { onNone: () => null, onSome: (p) => p._tag === "Span" ? p.name : "external" })
      }
      spans.push(entry)
      return {
        _tag: "Span", name, spanId: `s${spans.length}`, traceId: "t", parent, context, status: { _tag: "Started", startTime },
        attributes: new Map(), links: [...links], sampled: true, kind,
        end: (_endTime, exit) => void (entry.exit = exit._tag),
        attribute: () => {}, event: () => {}, addLinks: () => {}
      }
    },
    context: (f) => f()
  })
  return { spans, tracer }
}

const inner = Span.fn("Svc.inner")(function*(n: number) {
  const span = yield* Effect.option(Effect.currentSpan)
  return { n: n + 1, span: Option.map(span, (s) => s.name) }
})
const outer = Span.fn("Svc.outer")(function*(n: number) {
  return yield* inner(n)
})
const failing = Span.fn("Svc.failing")(function*(reason: string) {
  return yield* Effect.fail(reason)
})
const piped = Span.fn("Svc.piped")(function*(n: number) {
  return yield* Effect.succeed(n)
}, (self, n) => Effect.map(self, (m) => m + n))

describe("Span", () => {
  it.effect("with the tracer enabled: Effect.fn's spans, named and parented, a failure ending its span", () =>
    Effect.gen(function*() {
      const { spans, tracer } = recorded()
      const result = yield* Effect.withTracer(outer(1), tracer)
      expect(result).toEqual({ n: 2, span: Option.some("Svc.inner") })
      const failed = yield* Effect.withTracer(Effect.flip(failing("no")), tracer)
      expect(failed).toBe("no")
      expect(yield* Effect.withTracer(Span.withSpan("Svc.wrapped")(Effect.succeed(3)), tracer)).toBe(3)
      expect(spans).toEqual([
        { name: "Svc.outer", parent: null, exit: "Success" },
        { name: "Svc.inner", parent: "Svc.outer", exit: "Success" },
        { name: "Svc.failing", parent: null, exit: "Failure" },
        { name: "Svc.wrapped", parent: null, exit: "Success" }
      ])
    }))

  it.effect("with the tracer disabled: the same results and no span at all, not even a no-op one in the fiber's context", () =>
    Effect.gen(function*() {
      const { spans, tracer } = recorded()
      const off = <A, E>(self: Effect.Effect<A, E>) => Effect.withTracerEnabled(Effect.withTracer(self, tracer), false)
      // Effect.fn would answer Some("Svc.inner") here: its no-op span, provided by copying the context.
      expect(yield* off(outer(1))).toEqual({ n: 2, span: Option.none() })
      expect(yield* off(Effect.flip(failing("no")))).toBe("no")
      expect(yield* off(piped(2))).toBe(4)
      expect(yield* off(Span.withSpan("Svc.wrapped")(Effect.map(Effect.option(Effect.currentSpan), Option.map((s) => s.name))))).toEqual(Option.none())
      expect(spans).toEqual([])
    }))

  it.effect("the choice is made per run, by the fiber that runs the effect", () =>
    Effect.gen(function*() {
      const { spans, tracer } = recorded()
      const once = outer(5)
      expect(yield* Effect.withTracerEnabled(Effect.withTracer(once, tracer), false)).toEqual({ n: 6, span: Option.none() })
      expect(yield* Effect.withTracer(once, tracer)).toEqual({ n: 6, span: Option.some("Svc.inner") })
      expect(spans.map((s) => s.name)).toEqual(["Svc.outer", "Svc.inner"])
    }))
})
