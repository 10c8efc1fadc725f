/**
 * `TurnStream.runChunksUntil`, the loop `consume` runs a provider turn's stream with: the same chunks, cuts, ends and
 * failures as `Stream.runForEachChunk(Stream.takeUntil(stream, isLast), f)`, which it replaced (it allocates about
 * 200 KiB less per turn: `bench/turn-start.bench.ts`). Each case runs both and compares.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Exit, Fiber, Stream } from "effect"
import { TurnStream } from "../src/index.js"

type Event = { readonly tag: "item" | "end"; readonly n: number }
const item = (n: number): Event => ({ tag: "item", n })
const end = (n: number): Event => ({ tag: "end", n })
const isEnd = (e: Event) => e.tag === "end"

/** The chunks `f` saw (as arrays) and how the run exited, with the loop under test and with the library's pipeline. */
const both = <E>(stream: () => Stream.Stream<Event, E>, fail?: (chunk: ReadonlyArray<Event>) => boolean) =>
  Effect.gen(function*() {
    const run = (which: "loop" | "library") =>
      Effect.gen(function*() {
        const seen: Array<ReadonlyArray<Event>> = []
        const f = (chunk: Chunk.Chunk<Event>) =>
          Effect.suspend(() => {
            const a = Chunk.toReadonlyArray(chunk)
            seen.push(a)
            return fail?.(a) === true ? Effect.fail("f failed" as const) : Effect.void
          })
        const exit = yield* Effect.exit(
          which === "loop"
            ? TurnStream.runChunksUntil(stream(), isEnd, f)
            : Stream.runForEachChunk(Stream.takeUntil(stream(), isEnd), f)
        )
        return { seen, exit: Exit.isSuccess(exit) ? "ok" : JSON.stringify(Exit.causeOption(exit)) }
      })
    return { loop: yield* run("loop"), library: yield* run("library") }
  })

describe("TurnStream.runChunksUntil", () => {
  it.effect("cuts the chunk that holds the end after it and pulls no further (a stream that would fail after)", () =>
    Effect.gen(function*() {
      let pulledAfter = false
      const stream = () =>
        Stream.fromChunks(Chunk.make(item(1), item(2)), Chunk.empty<Event>(), Chunk.make(item(3), end(4), item(5)), Chunk.make(item(6))).pipe(
          Stream.concat(Stream.suspend(() => {
            pulledAfter = true
            return Stream.fail("after the end" as const)
          }))
        )
      const { library, loop } = yield* both(stream)
      expect(loop).toEqual(library)
      expect(loop.exit).toBe("ok")
      expect(loop.seen.at(-1)).toEqual([item(3), end(4)])
      expect(pulledAfter).toBe(false)
    }))

  it.effect("an end that is its chunk's last element, a stream that ends without one, an empty stream", () =>
    Effect.gen(function*() {
      for (
        const chunks of [
          [Chunk.make(item(1)), Chunk.make(item(2), end(3))],
          [Chunk.make(item(1), item(2)), Chunk.make(item(3))],
          [] as Array<Chunk.Chunk<Event>>
        ]
      ) {
        const { library, loop } = yield* both(() => Stream.fromChunks(...chunks))
        expect(loop).toEqual(library)
        expect(loop.exit).toBe("ok")
      }
    }))

  it.effect("fails with the stream's error after the chunks before it, and with f's error at once", () =>
    Effect.gen(function*() {
      const failing = () => Stream.fromChunks(Chunk.make(item(1)), Chunk.make(item(2))).pipe(Stream.concat(Stream.fail("provider broke" as const)))
      const broken = yield* both(failing)
      expect(broken.loop).toEqual(broken.library)
      expect(broken.loop.seen).toEqual([[item(1)], [item(2)]])
      expect(broken.loop.exit).toContain("provider broke")

      const fThrows = yield* both(() => Stream.fromChunks(Chunk.make(item(1)), Chunk.make(item(2)), Chunk.make(end(3))), (a) => a[0]?.n === 2)
      expect(fThrows.loop).toEqual(fThrows.library)
      expect(fThrows.loop.seen).toEqual([[item(1)], [item(2)]])
      expect(fThrows.loop.exit).toContain("f failed")
    }))

  it.effect("closes the stream when it ends, fails or is interrupted", () =>
    Effect.gen(function*() {
      let closed = 0
      const stream = (tail: Stream.Stream<Event, "x">) =>
        Stream.concat(Stream.make(item(1)), tail).pipe(Stream.ensuring(Effect.sync(() => closed++)))
      yield* TurnStream.runChunksUntil(stream(Stream.make(end(2), item(3))), isEnd, () => Effect.void)
      expect(closed).toBe(1)
      yield* Effect.exit(TurnStream.runChunksUntil(stream(Stream.fail("x")), isEnd, () => Effect.void))
      expect(closed).toBe(2)
      const first = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(TurnStream.runChunksUntil(stream(Stream.never), isEnd, () => Deferred.succeed(first, undefined).pipe(Effect.asVoid)))
      yield* Deferred.await(first)
      yield* Fiber.interrupt(fiber)
      expect(closed).toBe(3)
    }))
})
