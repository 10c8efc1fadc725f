/**
 * Span: `Effect.fn` whose span costs nothing while tracing is off.
 *
 * `Effect.fn("Name.method")` pays for its span at every call even under `Effect.withTracerEnabled(false)`: a
 * call-site `Error` (its stack captured), a no-op span registered in a `WeakMap`, and `withParentSpan`, which copies
 * the fiber's whole context (every service of the server, some 40) to add the span. In the server that was about
 * 10-20 µs per call and eight calls per turn (bench/README.md, "Tracing off"). `fn` asks the fiber whether tracing is on
 * when the effect runs: on, it is `Effect.fn(name, options)` (the same span and attributes; the stack it records for a
 * failed span, `code.stacktrace`, points here rather than at the caller); off, it is `Effect.fnUntraced` (no span, no
 * stack, no context copy).
 *
 * What it does not do: turn tracing off. The apps decide that (`Effect.withTracerEnabled`, e.g. the server's
 * `tracing` setting); library code keeps tracing its service methods, and a tracer an embedder installs sees the
 * same spans as before.
 */
import { Effect, FiberRef } from "effect"
import type * as Tracer from "effect/Tracer"

/** A body or pipeable as `Effect.fn` takes it (typed by `Effect.fn.Gen` at the call site). */
type AnyFunction = (this: unknown, ...args: Array<unknown>) => unknown

/**
 * `Effect.fn(name, options)` for a generator body (every service method of this package), except that while the
 * running fiber's tracer is disabled the call opens no span. The body and the pipeables run once per run of the
 * returned effect, as with `Effect.fn` for a generator body.
 */
export const fn = (name: string, options?: Tracer.SpanOptions): Effect.fn.Gen => {
  const traced = Effect.fn(name, options)
  return ((body: AnyFunction, ...pipeables: Array<AnyFunction>) => {
    // Both built once, at definition: per call only the choice and one of them.
    const withSpan = (traced as unknown as (...all: Array<AnyFunction>) => AnyFunction)(body, ...pipeables)
    const withoutSpan = (Effect.fnUntraced as unknown as (...all: Array<AnyFunction>) => AnyFunction)(body, ...pipeables)
    return Object.defineProperty(
      function(this: unknown, ...args: Array<unknown>) {
        return Effect.flatMap(
          FiberRef.get(FiberRef.currentTracerEnabled),
          // Its real success, error and requirements are the body's: `Effect.fn.Gen` types each call site.
          (enabled) => (enabled ? withSpan : withoutSpan).apply(this, args) as Effect.Effect<unknown>
        )
      },
      "length",
      { value: body.length, configurable: true }
    )
  }) as unknown as Effect.fn.Gen
}

/**
 * `Effect.withSpan(name, options)` (data-last) for a service method written without `Effect.fn`, except that while
 * the running fiber's tracer is disabled `self` runs without a span (nor the span's context copy).
 */
export const withSpan = (name: string, options?: Tracer.SpanOptions) =>
<A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(
    FiberRef.get(FiberRef.currentTracerEnabled),
    (enabled): Effect.Effect<A, E, R> => enabled ? Effect.withSpan(self, name, options) : self
  )
