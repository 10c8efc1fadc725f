/**
 * CliRuntime: how the command-line programs (`baton`, `pnpm sim`) run. It owns three process-level concerns and
 * nothing about any command:
 *
 * - **Output streams.** Every log line (`Effect.log*`, e.g. the orchestrator's "untrusted usage report" warning) is
 *   written to stderr, so stdout carries only a command's output: with `--json`, exactly one JSON document.
 * - **Signals.** SIGINT and SIGTERM interrupt the main fiber (NodeRuntime.runMain's own handler does that); finalizers
 *   and `Effect.onInterrupt` handlers run (a replay records the run in flight as interrupted), then the process
 *   exits 130 (SIGINT) or 143 (SIGTERM), the shell's 128 + signal number. A second signal after the first is not
 *   caught: the default action ends the process at once.
 * - **A closed stdout.** When stdout's reader goes away (`baton events --follow | head`, `baton threads | head -1`),
 *   the next write fails with EPIPE; unhandled, that error killed the process with a Node stack trace on stderr.
 *   The command is now stopped as SIGINT stops it (its fiber interrupted, finalizers run: a replay records the run
 *   in flight) and the process exits 141, the shell's status for a writer whose pipe closed (128 + SIGPIPE).
 * - **Yielding to the event loop.** A signal reaches the fiber only when Node's event loop polls, and a replay on
 *   SQLite with the scripted provider is synchronous work chained by microtasks: Effect's default scheduler yields
 *   through microtasks and reaches a timer only after 2048 yields in a row (a count that restarts whenever the fiber
 *   awaits anything), so the loop never polled and SIGTERM was ignored until the replay ended. This runtime's
 *   scheduler (`timeSliced`) resumes fibers through microtasks while the loop has turned within the last
 *   `sliceMillis` (10 ms), and from `setImmediate`, after the loop has polled, once that much work has gone by
 *   without a turn. (It used to resume every yield from `setImmediate`: a signal was acted on, but a committed event
 *   then took one turn of the loop per fiber on its way to an event stream's socket — the bus, the thread's tailer,
 *   the subscriber's stream, the response — and a long turn start running beside it made each turn one of its steps:
 *   0.1-0.2 s from commit to the dashboard, issue 13.)
 */
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Cause, Effect, Exit, Layer, Logger, Option, Scheduler } from "effect"

/** The signals that stop a command, and the exit code each gives (128 + the signal number). */
export const signalExitCodes = { SIGINT: 130, SIGTERM: 143 } as const

export type StopSignal = keyof typeof signalExitCodes

let received: StopSignal | null = null

/** The signal that asked the process to stop, if one did. */
export const receivedSignal: Effect.Effect<Option.Option<StopSignal>> = Effect.sync(() => Option.fromNullable(received))

/** The exit code after stdout's reader went away (EPIPE): 128 + SIGPIPE, as a shell reports a writer whose pipe closed. */
export const stdoutClosedExitCode = 141

let stdoutClosed = false
let stdoutFailed = false
const stdoutClosedWaiters = new Set<() => void>()

/**
 * Succeeds once a write to stdout has failed (EPIPE: its reader went away; or another error). The
 * listener is installed by `runMain` for the life of the process, so a write after the command ended cannot crash.
 */
const awaitStdoutClosed: Effect.Effect<void> = Effect.async<void>((resume) => {
  if (stdoutClosed || stdoutFailed) return resume(Effect.void)
  const wake = () => resume(Effect.void)
  stdoutClosedWaiters.add(wake)
  return Effect.sync(() => void stdoutClosedWaiters.delete(wake))
})

/** A failed write to stdout stops the command: EPIPE silently (exit 141), another error named on stderr (exit 1). */
const onStdoutError = (error: NodeJS.ErrnoException) => {
  if (stdoutClosed || stdoutFailed) return
  if (error.code === "EPIPE") {
    stdoutClosed = true
  } else {
    stdoutFailed = true
    process.stderr.write(`baton: cannot write to stdout: ${error.message}\n`)
  }
  for (const wake of stdoutClosedWaiters) wake()
  stdoutClosedWaiters.clear()
}

/** How long fibers may run on microtasks without the event loop turning, in milliseconds. */
export const sliceMillis = 10

/**
 * A scheduler that lets the event loop turn at least every `slice` ms of fiber work: a fiber's yield (every 2048
 * operations, `Effect.yieldNow`, a wake-up by another fiber) resumes on a microtask while the last turn of the loop
 * this scheduler saw (a drain it ran from `setImmediate`) is less than `slice` ms ago, and from `setImmediate` (a
 * macrotask without a timer's 1 ms minimum) otherwise, or after 2048 microtask drains in a row as Effect's default
 * scheduler does. So a chain of fibers handing work to each other (a committed event on its way to a socket) runs at
 * once, and a long stretch of work still lets I/O, timers and signals in. A synchronous step longer than the slice
 * (one statement, one decode) is not cut: the turn comes at its end.
 */
export const timeSliced = (slice: number = sliceMillis): Scheduler.Scheduler => {
  let lastTurn = -Infinity
  const runner = Scheduler.SchedulerRunner.cached((depth, drain) => {
    if (depth >= 2048 || performance.now() - lastTurn >= slice) {
      setImmediate(() => {
        lastTurn = performance.now()
        drain(0)
      })
    } else {
      queueMicrotask(() => drain(depth + 1))
    }
  })
  return Scheduler.make((task, priority, fiber) => runner(fiber).scheduleTask(task, priority))
}

const scheduler = timeSliced()

/**
 * The app's Layer: Node's platform services, a pretty logger writing to stderr (coloured when stderr is a terminal)
 * in place of the default stdout logger, and the scheduler described above.
 */
export const layer: Layer.Layer<NodeContext.NodeContext> = Layer.mergeAll(
  NodeContext.layer,
  Logger.replace(Logger.defaultLogger, Logger.prettyLogger({ stderr: true, colors: process.stderr.isTTY === true })),
  Layer.setScheduler(scheduler)
)

/**
 * Runs a program's main effect with `layer` provided: exit code 130/143 after SIGINT/SIGTERM (once the interrupted
 * fiber's finalizers have run), 141 after stdout's reader went away (likewise), 1 for a failure or defect that reached the top, otherwise the `process.exitCode` the
 * program set (0 by default). The program reports its own errors: nothing is logged here.
 */
export const runMain = <E, A>(main: Effect.Effect<A, E, NodeContext.NodeContext>): void => {
  // runMain's own listeners interrupt the main fiber on either signal; this one only remembers which signal it was.
  // Registered first, so the name is known before the fiber ends.
  const remember = (signal: StopSignal) => () => {
    received ??= signal
    process.removeListener("SIGINT", onSigint)
    process.removeListener("SIGTERM", onSigterm)
  }
  const onSigint = remember("SIGINT")
  const onSigterm = remember("SIGTERM")
  process.on("SIGINT", onSigint)
  process.on("SIGTERM", onSigterm)
  process.stdout.on("error", onStdoutError)
  // A closed stdout stops the command as an interrupt does (raceFirst interrupts the loser).
  Effect.raceFirst(main, awaitStdoutClosed).pipe(
    Effect.provide(layer),
    NodeRuntime.runMain({
      disableErrorReporting: true,
      // The pretty logger would write to stdout; `layer` installs one on stderr instead.
      disablePrettyLogger: true,
      teardown: (exit, onExit) => {
        process.removeListener("SIGINT", onSigint)
        process.removeListener("SIGTERM", onSigterm)
        if (received !== null) return onExit(signalExitCodes[received])
        if (stdoutClosed) return onExit(stdoutClosedExitCode)
        if (stdoutFailed) return onExit(1)
        onExit(Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause) ? 1 : 0)
      }
    })
  )
}
