/**
 * CodexAppServer: a JSON-RPC client of one `codex app-server` child process (newline-delimited JSON over stdio), the
 * transport of the Codex adapter. One client per provider instance.
 *
 * - The child starts on first use (`request`, `subscribe`), runs `initialize` + `initialized`, and is reused.
 * - Every request waits at most `requestTimeoutMillis` (`CodexRequestTimeout`).
 * - stderr lines go to Baton's logs (debug level, annotated `codex.stderr`); the last 40 are kept for errors.
 * - When the child exits, every request in flight fails with `CodexExited` and every subscriber receives an
 *   `exited` event; the next use starts a new child (a new `generation`: the adapter resumes its threads).
 * - Closing the scope the client was made in kills the child (SIGTERM, SIGKILL after 2 s).
 * - A missing or unusable binary fails with `CodexStartFailed`, which names the npm package to install.
 *
 * Server requests (Codex calling a dynamic tool, `item/tool/call`) go to `onServerRequest`; its answer (or its
 * failure, as a JSON-RPC error) is written back with the request's id.
 */
import { Data, Deferred, Duration, Effect, Exit, FiberId, Queue, Runtime, Schema, type Scope } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import { createRequire } from "node:module"
import * as Path from "node:path"
import * as Readline from "node:readline"
import { Method, Notification } from "./CodexProtocol.js"

/** The npm package (and version) Baton pins for the binary. */
export const codexPackage = "@openai/codex@0.171.0"

/** The child could not be started or did not complete `initialize`: names the binary and what to install. */
export class CodexStartFailed extends Data.TaggedError("CodexStartFailed")<{ readonly binary: string; readonly reason: string }> {
  override get message() {
    // Codex ran and said why it stopped (e.g. a CODEX_HOME that does not exist): that is the cause, not the package.
    if (/\bError\b/.test(this.reason) && /exit code/.test(this.reason)) {
      return `the Codex app-server (${this.binary}) could not start: ${this.reason}. Check the provider's configuration (\`codexHome\`, its config.toml)`
    }
    return `the Codex app-server (${this.binary}) could not start: ${this.reason}. Install the npm package ${codexPackage} ` +
      `(a dependency of @baton/providers: run \`pnpm install\`; its platform binary comes as an optional dependency) ` +
      `or set the provider's \`binary\` to a working \`codex\` executable`
  }
}

/** A request got no answer within its bound. */
export class CodexRequestTimeout extends Data.TaggedError("CodexRequestTimeout")<{ readonly method: string; readonly timeoutMillis: number }> {
  override get message() {
    return `the Codex app-server did not answer ${this.method} within ${this.timeoutMillis} ms`
  }
}

/** Codex answered a request with a JSON-RPC error. */
export class CodexRpcError extends Data.TaggedError("CodexRpcError")<{ readonly method: string; readonly code: number; readonly reason: string }> {
  override get message() {
    return `Codex refused ${this.method} (${this.code}): ${this.reason}`
  }
}

/** Codex answered something Baton's schema does not accept. */
export class CodexProtocolError extends Data.TaggedError("CodexProtocolError")<{ readonly method: string; readonly reason: string }> {
  override get message() {
    return `unexpected Codex answer to ${this.method}: ${this.reason}`
  }
}

/** The child exited (crashed, was killed) while the request was in flight. */
export class CodexExited extends Data.TaggedError("CodexExited")<{ readonly reason: string; readonly stderrTail: string }> {
  override get message() {
    return `the Codex app-server exited: ${this.reason}${this.stderrTail === "" ? "" : ` (stderr: ${this.stderrTail})`}`
  }
}

export type CodexClientError = CodexStartFailed | CodexRequestTimeout | CodexRpcError | CodexProtocolError | CodexExited

/** What a subscriber receives: a notification of the current child, or its exit. */
export type Incoming =
  | { readonly _tag: "notification"; readonly method: string; readonly params: unknown; readonly generation: number }
  | { readonly _tag: "exited"; readonly reason: string; readonly generation: number }

/** One line of the exchange, for fixtures: `out` was written to the child, `in` read from it. */
export interface TraceLine {
  readonly direction: "out" | "in"
  readonly line: string
}

export interface AppServerOptions {
  /** The `codex` executable (default: `defaultBinary()`, the pinned package's). */
  readonly binary: string
  /** `CODEX_HOME` of the child (its config.toml, sessions and rollouts). */
  readonly codexHome: string
  /** Extra arguments after `app-server` (e.g. `-c model_context_window=44000`). */
  readonly args?: ReadonlyArray<string>
  /** Extra environment variables of the child (added to Baton's own). */
  readonly env?: Readonly<Record<string, string>>
  /** Bound on every request, in milliseconds (default 30,000). */
  readonly requestTimeoutMillis?: number
  /** Answers the server's requests (`item/tool/call`); a failure is sent back as a JSON-RPC error. */
  readonly onServerRequest?: (method: string, params: unknown) => Effect.Effect<unknown, { readonly message: string }>
  /** Receives every line exchanged (fixtures). */
  readonly trace?: (line: TraceLine) => void
  /** The `clientInfo.version` sent in `initialize` (default `0.1.0`). */
  readonly clientVersion?: string
}

export interface AppServerClient {
  /** Sends `method` with `params` and decodes the result with `schema`; starts the child if needed. */
  readonly request: <A, I>(method: string, params: unknown, schema: Schema.Schema<A, I>) => Effect.Effect<A, CodexClientError>
  /**
   * The notifications of the running child (started if needed) from now on, and its exit, for the scope. Returns
   * the generation subscribed to.
   */
  readonly subscribe: Effect.Effect<{ readonly events: Queue.Dequeue<Incoming>; readonly generation: number }, CodexClientError, Scope.Scope>
  /** The generation of the running child (1 for the first), 0 when none runs. */
  readonly generation: Effect.Effect<number>
  /** The running child's pid, for tests that kill it; `null` when none runs. */
  readonly pid: Effect.Effect<number | null>
}

interface Connection {
  readonly child: ChildProcess.ChildProcessWithoutNullStreams
  readonly generation: number
  readonly pending: Map<number, { readonly method: string; readonly deferred: Deferred.Deferred<unknown, CodexClientError> }>
  readonly listeners: Set<(event: Incoming) => void>
  readonly stderrTail: Array<string>
  exited: boolean
  /** Set when Baton stops the child (scope closed): its exit is then expected, not a crash. */
  stopping: boolean
}

/**
 * What of the stderr tail an error quotes: Codex's own `Error: …` lines first (a failed start prints its cause there,
 * then a backtrace), then the last 5 lines (found by a review: a bad CODEX_HOME's cause was cut off by its backtrace).
 */
const stderrSummary = (tail: ReadonlyArray<string>): string => {
  const errors = tail.filter((l) => /^(Error|error)\b/.test(l.trim()))
  const last = tail.slice(-5).filter((l) => !errors.includes(l))
  return [...errors.slice(-3), ...last].join(" | ")
}

/** ANSI colour sequences (Codex colours its stderr log lines). */
const ansi = new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, "g")

/**
 * The binary of the pinned `@openai/codex` package for this platform: its optional dependency
 * `@openai/codex-<platform>-<arch>` holds `vendor/<target triple>/bin/codex` (as the package's own `bin/codex.js`
 * finds it). `null` when the package or its platform binary is not installed.
 */
export const defaultBinary = (): string | null => {
  const triples: Record<string, string> = {
    "linux-x64": "x86_64-unknown-linux-musl",
    "linux-arm64": "aarch64-unknown-linux-musl",
    "darwin-x64": "x86_64-apple-darwin",
    "darwin-arm64": "aarch64-apple-darwin",
    "win32-x64": "x86_64-pc-windows-msvc",
    "win32-arm64": "aarch64-pc-windows-msvc"
  }
  const platform = `${process.platform}-${process.arch}`
  const triple = triples[platform]
  if (triple === undefined) return null
  try {
    const main = createRequire(import.meta.url).resolve("@openai/codex/package.json")
    const platformJson = createRequire(main).resolve(`@openai/codex-${platform}/package.json`)
    const binary = Path.join(Path.dirname(platformJson), "vendor", triple, "bin", process.platform === "win32" ? "codex.exe" : "codex")
    return Fs.existsSync(binary) ? binary : null
  } catch {
    return null
  }
}

/** Makes a client for the scope; nothing starts until its first use. */
export const make = (options: AppServerOptions): Effect.Effect<AppServerClient, never, Scope.Scope> =>
  Effect.gen(function*() {
    const runtime = yield* Effect.runtime<never>()
    const runFork = Runtime.runFork(runtime)
    const timeoutMillis = options.requestTimeoutMillis ?? 30_000
    const lock = yield* Effect.makeSemaphore(1)
    let current: Connection | undefined
    let generations = 0
    let nextId = 1

    const write = (conn: Connection, message: object) => {
      const line = JSON.stringify(message)
      options.trace?.({ direction: "out", line })
      conn.child.stdin.write(line + "\n")
    }

    const onLine = (conn: Connection, line: string) => {
      if (line.trim() === "") return
      options.trace?.({ direction: "in", line })
      let message: { id?: number | string; method?: string; params?: unknown; result?: unknown; error?: { code?: number; message?: string } }
      try {
        message = JSON.parse(line)
      } catch {
        runFork(Effect.logWarning("codex app-server wrote a line that is not JSON").pipe(Effect.annotateLogs("line", line.slice(0, 500))))
        return
      }
      if (message.method !== undefined && message.id !== undefined) {
        const id = message.id
        const method = message.method
        const handler = options.onServerRequest
        const answer = handler === undefined
          ? Effect.fail({ message: `Baton does not handle ${method}` })
          : handler(method, message.params)
        runFork(answer.pipe(
          Effect.match({
            onFailure: (e) => ({ id, error: { code: -32000, message: e.message } }),
            onSuccess: (result) => ({ id, result })
          }),
          Effect.flatMap((response) => Effect.sync(() => {
            if (!conn.exited) write(conn, response)
          }))
        ))
        return
      }
      if (message.method !== undefined) {
        const event: Incoming = { _tag: "notification", method: message.method, params: message.params, generation: conn.generation }
        for (const listener of conn.listeners) listener(event)
        return
      }
      if (typeof message.id === "number") {
        const entry = conn.pending.get(message.id)
        if (entry === undefined) return
        conn.pending.delete(message.id)
        Deferred.unsafeDone(
          entry.deferred,
          message.error !== undefined
            ? Exit.fail(new CodexRpcError({ method: entry.method, code: message.error.code ?? 0, reason: message.error.message ?? "" }))
            : Exit.succeed(message.result)
        )
      }
    }

    const onExit = (conn: Connection, reason: string) => {
      if (conn.exited) return
      conn.exited = true
      if (current === conn) current = undefined
      const failure = new CodexExited({ reason, stderrTail: stderrSummary(conn.stderrTail) })
      for (const [, entry] of conn.pending) Deferred.unsafeDone(entry.deferred, Exit.fail(failure))
      conn.pending.clear()
      const event: Incoming = { _tag: "exited", reason, generation: conn.generation }
      for (const listener of conn.listeners) listener(event)
      runFork((conn.stopping ? Effect.logDebug("codex app-server stopped") : Effect.logWarning("codex app-server exited")).pipe(Effect.annotateLogs({ reason, generation: conn.generation })))
    }

    const send = (conn: Connection, method: string, params: unknown): Effect.Effect<unknown, CodexClientError> =>
      Effect.suspend(() => {
        if (conn.exited) return Effect.fail(new CodexExited({ reason: "the process had exited", stderrTail: stderrSummary(conn.stderrTail) }))
        const id = nextId++
        const deferred = Deferred.unsafeMake<unknown, CodexClientError>(FiberId.none)
        conn.pending.set(id, { method, deferred })
        write(conn, { id, method, params })
        return Deferred.await(deferred).pipe(
          Effect.timeoutFail({ duration: Duration.millis(timeoutMillis), onTimeout: () => new CodexRequestTimeout({ method, timeoutMillis }) }),
          Effect.ensuring(Effect.sync(() => conn.pending.delete(id)))
        )
      })

    const spawn = Effect.gen(function*() {
      const binary = options.binary
      if (!Fs.existsSync(binary)) return yield* new CodexStartFailed({ binary, reason: "the file does not exist" })
      const child = yield* Effect.async<ChildProcess.ChildProcessWithoutNullStreams, CodexStartFailed>((resume) => {
        let spawned: ChildProcess.ChildProcessWithoutNullStreams
        try {
          spawned = ChildProcess.spawn(binary, ["app-server", ...(options.args ?? [])], {
            env: { ...process.env, ...options.env, CODEX_HOME: options.codexHome },
            stdio: ["pipe", "pipe", "pipe"]
          })
        } catch (error) {
          resume(Effect.fail(new CodexStartFailed({ binary, reason: String(error) })))
          return
        }
        const onError = (error: Error) => resume(Effect.fail(new CodexStartFailed({ binary, reason: error.message })))
        spawned.once("error", onError)
        spawned.once("spawn", () => {
          spawned.off("error", onError)
          resume(Effect.succeed(spawned))
        })
      })
      const conn: Connection = { child, generation: ++generations, pending: new Map(), listeners: new Set(), stderrTail: [], exited: false, stopping: false }
      child.on("error", (error) => onExit(conn, `process error: ${error.message}`))
      child.on("exit", (code, signal) => onExit(conn, signal !== null ? `killed by ${signal}` : `exit code ${code}`))
      child.stdin.on("error", () => {})
      Readline.createInterface({ input: child.stdout }).on("line", (line) => onLine(conn, line))
      Readline.createInterface({ input: child.stderr }).on("line", (raw) => {
        const line = raw.replace(ansi, "")
        conn.stderrTail.push(line)
        if (conn.stderrTail.length > 40) conn.stderrTail.shift()
        runFork(Effect.logDebug(line).pipe(Effect.annotateLogs({ "codex.stderr": true, generation: conn.generation })))
      })
      const started = yield* send(conn, Method.initialize, {
        clientInfo: { name: "baton", title: "Baton", version: options.clientVersion ?? "0.1.0" },
        capabilities: { experimentalApi: true }
      }).pipe(
        Effect.catchAll((error) => {
          child.kill("SIGKILL")
          return Effect.fail(new CodexStartFailed({ binary, reason: `initialize failed: ${error.message}` }))
        }),
        Effect.exit
      )
      if (Exit.isFailure(started)) return yield* Effect.failCause(started.cause)
      write(conn, { method: Notification.initialized })
      yield* Effect.logDebug("codex app-server started").pipe(Effect.annotateLogs({ pid: child.pid, generation: conn.generation }))
      return conn
    })

    const connection: Effect.Effect<Connection, CodexClientError> = lock.withPermits(1)(
      Effect.suspend(() => (current !== undefined && !current.exited ? Effect.succeed(current) : Effect.tap(spawn, (conn) => Effect.sync(() => void (current = conn)))))
    )

    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        const conn = current
        if (conn === undefined || conn.exited) return Effect.void
        return Effect.async<void>((resume) => {
          const timer = setTimeout(() => conn.child.kill("SIGKILL"), 2_000)
          conn.child.once("exit", () => {
            clearTimeout(timer)
            resume(Effect.void)
          })
          conn.stopping = true
          conn.child.kill("SIGTERM")
        })
      })
    )

    const request = <A, I>(method: string, params: unknown, schema: Schema.Schema<A, I>): Effect.Effect<A, CodexClientError> =>
      connection.pipe(
        Effect.flatMap((conn) => send(conn, method, params)),
        Effect.flatMap((raw) =>
          Schema.decodeUnknown(schema)(raw).pipe(Effect.mapError((e) => new CodexProtocolError({ method, reason: e.message })))
        )
      )

    const subscribe = Effect.gen(function*() {
      const conn = yield* connection
      const events = yield* Effect.acquireRelease(
        Effect.gen(function*() {
          const queue = yield* Queue.unbounded<Incoming>()
          const listener = (event: Incoming) => void queue.unsafeOffer(event)
          conn.listeners.add(listener)
          if (conn.exited) listener({ _tag: "exited", reason: "the process had exited", generation: conn.generation })
          return { queue, listener }
        }),
        ({ listener, queue }) => Effect.zipRight(Effect.sync(() => conn.listeners.delete(listener)), Queue.shutdown(queue))
      )
      return { events: events.queue as Queue.Dequeue<Incoming>, generation: conn.generation }
    })

    return {
      request,
      subscribe,
      generation: Effect.sync(() => (current === undefined || current.exited ? 0 : current.generation)),
      pid: Effect.sync(() => (current === undefined || current.exited ? null : current.child.pid ?? null))
    }
  })
