/**
 * UsageError: @effect/cli's own usage errors become one `baton:` line; what a command's handler prints or logs
 * (`unreworded`) reaches the console whole, a logged cause over several lines included.
 */
import { Command, Options } from "@effect/cli"
import { NodeContext } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Console, Effect, Layer, Logger } from "effect"
import * as UsageError from "../src/UsageError.js"

/** A console that keeps what `error` is given (one string a call, as the console would print it). */
const capture = (inner: Console.Console) => {
  const errors: Array<string> = []
  const keep = (...args: ReadonlyArray<unknown>) => void errors.push(args.map(String).join(" "))
  const base: Console.Console = {
    ...inner,
    error: (...args) => Effect.sync(() => keep(...args)),
    log: () => Effect.void,
    group: () => Effect.void,
    groupEnd: Effect.void,
    unsafe: { ...globalThis.console, error: keep, log: () => {}, group: () => {}, groupEnd: () => {} }
  }
  return { errors, base }
}

const app = (argv: ReadonlyArray<string>, base: Console.Console) => {
  const command = Command.make("t", { count: Options.integer("count") }, () =>
    Effect.logError("it broke", Cause.fail(new Error("first\nsecond line of the failure"))))
  const cli = Command.run(command.pipe(Command.transformHandler((effect) => UsageError.unreworded(effect))), { name: "t", version: "0" })
  return cli(["node", "t", ...argv]).pipe(
    UsageError.reworded(argv),
    Effect.catchAll(() => Effect.void),
    Effect.provide(Layer.mergeAll(Logger.replace(Logger.defaultLogger, Logger.prettyLogger({ stderr: true, colors: false })), NodeContext.layer)),
    Effect.withConsole(base)
  )
}

describe("UsageError", () => {
  it.effect("rewords the library's usage error, and leaves a handler's log lines whole (the cause's every line)", () =>
    Effect.gen(function*() {
      const inner = yield* Console.consoleWith(Effect.succeed)
      const bad = capture(inner)
      yield* app(["--count", "x"], bad.base)
      expect(bad.errors).toEqual(["baton: --count: 'x' is not an integer"])
      const ok = capture(inner)
      yield* app(["--count", "1"], ok.base)
      expect(ok.errors.some((l) => l.startsWith("baton:"))).toBe(false)
      expect(ok.errors[0]).toMatch(/^\[[\d:.]+\] ERROR \(#\d+\): it broke$/)
      expect(ok.errors.join("\n")).toContain("second line of the failure")
    }))

  // Found by a newcomer's walk (b45ux): `baton serve --config /tmp` said "Expected path '/tmp' to be a regular file".
  it("a file option given a directory, or a directory option a file, names the option", () => {
    expect(UsageError.phrase("Expected path '/tmp' to be a regular file", ["serve", "--config", "/tmp"]))
      .toBe("baton: --config: '/tmp' is not a regular file")
    expect(UsageError.phrase("Expected path '/tmp/a.json' to be a directory", ["demo", "--samples=/tmp/a.json"]))
      .toBe("baton: --samples: '/tmp/a.json' is not a directory")
  })
})
