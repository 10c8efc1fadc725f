/**
 * Remote: the CLI as a client of a Baton server (`baton --server URL [--token T]`, or `BATON_SERVER` /
 * `BATON_TOKEN`). Each command is one or a few typed calls through `HttpApiClient.make(BatonApi)`; the event streams
 * are read with the platform `HttpClient` and `@effect/experimental`'s SSE parser. It owns the talking and the
 * reporting of what the server said; the output format is `Format`'s, shared with the in-process commands.
 *
 * Failures are one line on stderr and exit code 2: the server's own sentence for an error it answered (401, 403,
 * 404, 409, 400 — the `message` every Baton error body carries), or "cannot reach the Baton server at URL" when
 * nothing answered. A `send` whose run ends failed or interrupted exits 1.
 */
import { Api, ClientTool, type ItemId, type OpenToolCall, type ProviderInstance, type RunId, type RunNotFound, RunView, type Thread, ThreadEvent, type ThreadId, ToolResult, type ToolResultOffloadControl, terminalRunStatuses } from "@baton/contracts"
import { Sse } from "@effect/experimental"
import { HttpApiClient, HttpClient, HttpClientError, HttpClientRequest, type HttpClientResponse } from "@effect/platform"
import { Console, Data, DateTime, Duration, Effect, Either, Option, ParseResult, Ref, Schedule, Schema, Stream } from "effect"
import * as Fs from "node:fs"
import * as CliRuntime from "./CliRuntime.js"
import * as Format from "./Format.js"

/** Where the server is (`url`, e.g. `http://127.0.0.1:8787`) and the bearer token to send, if any. */
export interface Target {
  readonly url: string
  readonly token: Option.Option<string>
}

/** A failure already phrased for the user (one line); the CLI prints `baton: <message>` and exits 2. */
export class RemoteFailure extends Data.TaggedError("RemoteFailure")<{ readonly message: string }> {}

/**
 * Checks that `target.url` is an `http:` or `https:` URL with a host before anything is sent. Fails with
 * `RemoteFailure`. Found by a newcomer's walk (b46ux): `--server localhost:8787` (no scheme) is a URL of the scheme
 * `localhost:` to the URL parser, and was reported as "cannot reach the Baton server at localhost:8787 (Invalid URL);
 * start it with `baton serve`", when `--server 127.0.0.1:8787` was told it is not a URL.
 */
export const checkTarget = (target: Target): Effect.Effect<void, RemoteFailure> => {
  const url = URL.canParse(target.url) ? new URL(target.url) : null
  return url !== null && (url.protocol === "http:" || url.protocol === "https:") && url.hostname !== ""
    ? Effect.void
    : Effect.fail(new RemoteFailure({ message: `--server ${target.url} is not an http:// or https:// URL (e.g. http://127.0.0.1:8787)` }))
}

/** The first non-empty line of a text, trimmed. */
const oneLine = (text: string) => text.split("\n").map((l) => l.trim()).find((l) => l.length > 0) ?? text

const withToken = (target: Target) => (request: HttpClientRequest.HttpClientRequest) =>
  Option.match(target.token, { onNone: () => request, onSome: (token) => HttpClientRequest.bearerToken(request, token) })

/**
 * The server's answer did not decode as the API declares it (a `ParseError` from reading a response or an event), as
 * opposed to a `ParseError` from encoding the request, which is the user's input failing the API's schema before
 * anything was sent.
 */
class UnreadableAnswer extends Data.TaggedError("UnreadableAnswer")<{ readonly cause: ParseResult.ParseError }> {}

/** A response's decoding failure as `UnreadableAnswer`; every other failure as it is. */
const unreadable = <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.mapError(self, (e) => ParseResult.isParseError(e) ? new UnreadableAnswer({ cause: e }) : e)

/**
 * `client` with every path parameter percent-encoded: `HttpApiClient` joins them into the URL as given, so an id the
 * user typed (`../threads`, `x/../thr_B`, `?limit=1`) would otherwise reach another endpoint or another thread
 * instead of being one segment that the server decodes and answers for (404 `ThreadNotFound`). Ids of "." or ".."
 * are still resolved away by the URL (no endpoint answers what is left).
 */
const encodingPathParams = <C extends Record<string, unknown>>(client: C): C =>
  Object.fromEntries(Object.entries(client).map(([group, endpoints]) => [
    group,
    typeof endpoints !== "object" || endpoints === null ? endpoints : Object.fromEntries(
      Object.entries(endpoints as Record<string, unknown>).map(([name, call]) => [
        name,
        typeof call !== "function" ? call : (request?: { readonly path?: Record<string, unknown> }) =>
          call(request?.path === undefined ? request : {
            ...request,
            path: Object.fromEntries(Object.entries(request.path).map(([k, v]) => [k, typeof v === "string" ? encodeURIComponent(v) : v]))
          })
      ])
    )
  ])) as C

/** A response's content type without its parameters, lower case (`text/html`), or `undefined` when it has none. */
const contentType = (response: HttpClientResponse.HttpClientResponse): string | undefined => {
  const type = response.headers["content-type"]?.split(";")[0]?.trim().toLowerCase()
  return type === undefined || type === "" ? undefined : type
}

/**
 * Whether a response can be Baton's: Baton's API answers JSON (`application/json`, or `+json`), server-sent events
 * (`text/event-stream`) or no body at all (no content type). An HTML page, plain text, a file listing is another
 * server's (a web server, a proxy's error page, a dev server on the port).
 */
const batonLike = (response: HttpClientResponse.HttpClientResponse): boolean => {
  const type = contentType(response)
  return type === undefined || type === "application/json" || type.endsWith("+json") || type === "text/event-stream"
}

/**
 * The one line for an answer that is not Baton's API (`batonLike` false, or undecodable for lack of a body the API
 * declares): what answered (the HTTP status, its content type) and what to check. Found by a newcomer's walk (b46ux):
 * `--server` at a plain web server printed "answered 501 unexpectedly: Decode error (…)".
 */
const notBaton = (target: Target, response: HttpClientResponse.HttpClientResponse) =>
  new RemoteFailure({
    message: `the server at ${target.url} did not answer as a Baton server (HTTP ${response.status}, ` +
      `${contentType(response) ?? "no content type"}, to ${response.request.method} ${new URL(response.request.url).pathname}); ` +
      "check that --server (or BATON_SERVER) is the URL `baton serve` printed (\"listening on …\")"
  })

/**
 * `client` failing with a `ResponseError` (reason `Decode`) for a response that is not `batonLike`, before anything
 * tries to read it as the API's JSON (before, a 200 HTML page read as "Could not parse JSON").
 */
const onlyBatonAnswers = (client: HttpClient.HttpClient): HttpClient.HttpClient =>
  HttpClient.filterOrFail(client, batonLike, (response) =>
    new HttpClientError.ResponseError({
      request: response.request,
      response,
      reason: "Decode",
      description: `not a Baton answer (${contentType(response) ?? "no content type"})`
    }))

/** The typed client of `BatonApi` at `target` (path parameters percent-encoded). Requires an `HttpClient`. */
const api = (target: Target) =>
  HttpApiClient.make(Api.BatonApi, {
    baseUrl: target.url,
    transformClient: (client) => onlyBatonAnswers(HttpClient.mapRequest(client, withToken(target))),
    transformResponse: unreadable
  }).pipe(Effect.map(encodingPathParams))

/** The error body's `message` (every Baton error body has one), else the first 200 characters of the body. */
const ErrorBody = Schema.parseJson(Schema.Struct({ message: Schema.String }))

/** A Baton boundary error's body: its `_tag` and `message` (and its fields, kept). */
const TaggedBody = Schema.Struct({ _tag: Schema.String, message: Schema.String })

/**
 * A failure as the user should read it: the server's sentence for an error it answered (the decoded boundary error's
 * `message`, the same text as the body's), a 400 schema error with the field path, input the API's schema refused
 * before sending (the field path and why), an answer that is not the API's, or that the server could not be reached.
 */
const explain = (target: Target) => (error: unknown): RemoteFailure => {
  if (error instanceof RemoteFailure) return error
  if (HttpClientError.isHttpClientError(error)) {
    if (error._tag === "RequestError") {
      return new RemoteFailure({
        message: error.reason === "InvalidUrl"
          ? `--server ${target.url} is not a URL (e.g. http://127.0.0.1:8787)`
          : `cannot reach the Baton server at ${target.url} (${oneLine(String(error.cause instanceof Error ? error.cause.message : error.cause ?? error.reason))}); start it with \`baton serve\` or check --server`
      })
    }
    // A status the API does not declare (or declares without this body): another server's, unless it is JSON.
    if (!batonLike(error.response) || contentType(error.response) === undefined) return notBaton(target, error.response)
    return new RemoteFailure({ message: `the server at ${target.url} answered ${error.response.status} unexpectedly: ${oneLine(error.message)}` })
  }
  if (typeof error === "object" && error !== null && "_tag" in error) {
    const tagged = error as { readonly _tag: string; readonly message?: string; readonly issues?: ReadonlyArray<{ readonly path: ReadonlyArray<PropertyKey>; readonly message: string }> }
    if (tagged._tag === "HttpApiDecodeError" && tagged.issues !== undefined && tagged.issues.length > 0) {
      const issue = tagged.issues[0]!
      return new RemoteFailure({ message: `the server refused the request: ${issue.path.map(String).join(".") || "(body)"}: ${oneLine(issue.message)}` })
    }
    if (tagged._tag === "UnreadableAnswer") {
      // The deepest issue (a field and why), not the message, whose first line declares the whole schema (5 KB).
      return new RemoteFailure({ message: `the server at ${target.url} answered something that is not Baton's API: ${deepestIssue((error as UnreadableAnswer).cause)}` })
    }
    // Encoding the request failed: the input does not fit the API (nothing was sent).
    if (tagged._tag === "ParseError") return new RemoteFailure({ message: `invalid input, not sent: ${deepestIssue(error as ParseResult.ParseError)}` })
    if (tagged._tag === "Unauthorized") return new RemoteFailure({ message: `${tagged.message ?? "unauthorized"} (pass --token or set BATON_TOKEN)` })
    // The server's hint names its API; this client's user lists threads with this command, against this server.
    if (tagged._tag === "ThreadNotFound" && "threadId" in error) {
      return new RemoteFailure({ message: `thread ${String(error.threadId)} not found (list threads with \`baton --server ${target.url} threads\`)` })
    }
    if (tagged._tag === "RunNotFound" && "runId" in error) return new RemoteFailure({ message: runNotFound(target, error as RunNotFound) })
    if (typeof tagged.message === "string" && tagged.message !== "") return new RemoteFailure({ message: oneLine(tagged.message) })
    return new RemoteFailure({ message: `the server answered ${tagged._tag}` })
  }
  return new RemoteFailure({ message: oneLine(String(error)) })
}

/**
 * `RunNotFound` as this client's user reads it: the server's hint names its API (`GET /threads/{id}/runs`); here the
 * command that shows a thread's runs on this server (`baton --server URL thread show THREAD`).
 */
const runNotFound = (target: Target, error: RunNotFound): string => {
  const show = (thread: string) => `\`baton --server ${target.url} thread show ${thread}\``
  if (error.threadId === undefined) return `run ${error.runId} not found (list a thread's runs with ${show("THREAD")})`
  if (error.ownerThreadId === undefined) return `run ${error.runId} not found on thread ${error.threadId} (its runs: ${show(error.threadId)})`
  return `run ${error.runId} is not a run of thread ${error.threadId}: it belongs to thread ${error.ownerThreadId}; give that thread's id with it`
}

/** Runs `self` against `target`, every failure turned into a `RemoteFailure` phrased for the user. */
const call = <A, E, R>(target: Target, self: Effect.Effect<A, E, R>): Effect.Effect<A, RemoteFailure, R> =>
  Effect.mapError(self, explain(target))

/** Every thread, page after page (oldest first). */
const allThreads = (client: Effect.Effect.Success<ReturnType<typeof api>>) =>
  Effect.gen(function*() {
    const threads: Array<Thread> = []
    let cursor: string | undefined
    for (;;) {
      const page = yield* client.threads.list({ urlParams: cursor === undefined ? {} : { cursor } })
      threads.push(...page.threads)
      if (page.nextCursor === null) return threads
      cursor = page.nextCursor
    }
  })

/**
 * `baton --server URL threads [--json]`: one line per thread, as the in-process command prints it, or with `json` one
 * document (`Format.threadsDocument`).
 */
export const threads = (target: Target, json = false) =>
  call(target, Effect.gen(function*() {
    const client = yield* api(target)
    const list = yield* allThreads(client)
    if (json) {
      const totals = yield* Effect.forEach(list, (t) => Effect.map(client.threads.get({ path: { threadId: t.id } }), (s) => s.totals))
      return yield* Console.log(Format.threadsDocument(list.map((thread, i) => ({ thread, totals: totals[i]! }))))
    }
    if (list.length === 0) return yield* Console.log("no threads")
    for (const t of list) {
      const snapshot = yield* client.threads.get({ path: { threadId: t.id } })
      yield* Console.log(Format.threadLine(t, snapshot.totals.runs, snapshot.totals.items))
    }
  }))

/**
 * A JSON argument given inline (text starting with `[` or `{`) or as the path of a file holding it, decoded with
 * `schema`; `what` names it in the one-line failure (a value that is neither inline JSON nor a file, saying what the
 * flag accepts; a file that cannot be read; JSON that does not parse; a field that does not match, with its path).
 */
const jsonArgument = <A, I>(what: string, text: string, schema: Schema.Schema<A, I>, shape?: string) =>
  Effect.gen(function*() {
    const trimmed = text.trimStart()
    const unreadable = (e: unknown) => {
      const code = (e as NodeJS.ErrnoException).code
      // `--results notjson` said only "ENOENT: no such file or directory" (b48srv): the value was meant as JSON.
      return new RemoteFailure({
        message: code === "ENOENT" || code === "EISDIR"
          ? `${what}: '${oneLine(text).slice(0, 80)}' is neither JSON nor a file: give ${shape ?? "the JSON"} inline ` +
            "(starting with [ or {), or the path of a file holding it"
          : `${what}: cannot read ${text} (${oneLine(String(e instanceof Error ? e.message : e))})`
      })
    }
    const source = trimmed.startsWith("[") || trimmed.startsWith("{")
      ? text
      : yield* Effect.try({ try: () => Fs.readFileSync(text, "utf8"), catch: unreadable })
    return yield* Schema.decodeUnknown(Schema.parseJson(schema))(source).pipe(
      Effect.mapError((e) => new RemoteFailure({ message: `${what}: ${shape === undefined ? oneLine(e.message) : `expected ${shape}; ${deepestIssue(e)}`}` }))
    )
  })

/**
 * The most specific problem of a decoding failure, as `path: message` (the issue with the longest path: for a union,
 * the member that got furthest), instead of the whole tree of a union's members.
 */
const deepestIssue = (error: ParseResult.ParseError): string => {
  const issues = ParseResult.ArrayFormatter.formatErrorSync(error)
  const deepest = issues.reduce<(typeof issues)[number] | undefined>((best, i) => best === undefined || i.path.length > best.path.length ? i : best, undefined)
  if (deepest === undefined) return oneLine(error.message)
  const path = deepest.path.map((p) => typeof p === "number" ? `[${p}]` : `.${String(p)}`).join("").replace(/^\./, "")
  return oneLine(`${path === "" ? "" : `${path}: `}${shortType(deepest.message)}`).slice(0, 300)
}

/**
 * Whether a schema's rendering of an expected type is its structure (`{ readonly … }`, `ReadonlyArray<…>`,
 * `(parseJson <-> …)`, `Struct (Encoded side)`) rather than a leaf's description (`a string matching the pattern
 * ^[a-z][a-z0-9_-]{0,39}$`, which says what to send and stays).
 */
const structural = (type: string) => /^[{(]|^ReadonlyArray<|<->| side\)$/.test(type)

/**
 * A type mismatch's message without the schema's own rendering of a structure (`structural`): `Expected { readonly name: { a
 * string matching the pattern … } …, actual 1` becomes `unexpected value 1` (the caller's `shape` says what is
 * expected), and so does `Expected Struct (Encoded side), actual 1`; a branded type is named without its brand
 * (`Expected string & Brand<"ToolCallId">` as `Expected string`); a leaf and any other message as they are. Found by a newcomer's walk
 * (b45ux): `thread create --tools '[1]'` printed the schema's TypeScript-like text.
 */
const shortType = (message: string): string => {
  const unbranded = message.replace(/ & Brand<"[^"]*">/g, "")
  const type = /^Expected ([\s\S]*), actual ([\s\S]*)$/.exec(unbranded)
  return type !== null && structural(type[1]!) ? `unexpected value ${type[2]!}` : unbranded
}

/** Tools as `--tools` takes them: a JSON array of `{name, description, inputSchema}`. */
const ToolsArgument = Schema.Array(ClientTool)

/** Results as `--results` takes them: a JSON array of `{toolCallId, output, isError?}`, or `{"results": [...]}`. */
const ResultsArgument = Schema.Union(Schema.Array(ToolResult), Schema.Struct({ results: Schema.Array(ToolResult) }))

/** `baton --server URL thread create --provider P [--title T] [--tools FILE|JSON]`: prints the new thread's id. */
export const createThread = (target: Target, providerInstance: string, title: Option.Option<string>, tools: Option.Option<string> = Option.none()) =>
  call(target, Effect.gen(function*() {
    const client = yield* api(target)
    const declared = Option.isSome(tools) ? yield* jsonArgument("--tools", tools.value, ToolsArgument, `a JSON array of {"name", "description", "inputSchema"}`) : undefined
    const created = yield* client.threads.create({
      payload: {
        providerInstance: providerInstance as ProviderInstance,
        ...Option.match(title, { onNone: () => ({}), onSome: (t) => ({ title: t }) }),
        ...(declared === undefined ? {} : { tools: declared })
      },
      headers: {}
    })
    yield* Console.log(created.threadId)
  }))

/** The lines of a run waiting for tool results: what it waits for and how to answer. */
const waitingLines = (threadId: string, view: RunView) =>
  waitingText(threadId, view.run.seq, view.run.id, view.openToolCalls, view.toolResultsDeadline)

/** `waitingLines` from its parts (a `run.waiting` event carries them too: its calls and deadline). */
const waitingText = (
  threadId: string,
  runSeq: number,
  runId: string,
  calls: ReadonlyArray<OpenToolCall>,
  deadline: DateTime.Utc | null
) => [
  `run ${runSeq} waiting for tool results${deadline === null ? "" : ` until ${DateTime.formatIso(deadline)}`}:`,
  ...calls.map((c) => `  ${c.toolCallId} ${c.name} ${c.arguments}`),
  `post them with: baton tool-results ${threadId} ${runId} --results FILE|JSON`
].join("\n")

/**
 * Polls run `runId` until it has ended, or waits for tool results other than `answered` (the calls just answered:
 * until its continuation starts the run still shows them).
 */
const untilSettled = (client: Effect.Effect.Success<ReturnType<typeof api>>, runId: RunId, answered: ReadonlySet<string>) =>
  Effect.gen(function*() {
    for (;;) {
      const view = yield* client.runs.get({ path: { runId }, urlParams: {} })
      if (terminalRunStatuses.includes(view.run.status)) return view
      if (view.run.status === "waiting" && view.openToolCalls.length > 0 && !view.openToolCalls.some((c) => answered.has(c.toolCallId))) return view
      yield* Effect.sleep(Duration.millis(100))
    }
  })

/**
 * `baton --server URL tool-results THREAD RUN --results FILE|JSON [--json]`: posts the results of a waiting run's
 * open tool calls (202), then waits until the run ends (its reply; exit 1 when it failed or was interrupted) or waits
 * for tool results again (the new open calls). With `--json`, the run view as one JSON object.
 */
export const toolResults = (target: Target, threadId: string, runId: string, results: string, json: boolean) =>
  Effect.flatMap(Ref.make<Option.Option<{ readonly runSeq: number }>>(Option.none()), (posted) =>
    call(target, Effect.gen(function*() {
      const client = yield* api(target)
      const parsed = yield* jsonArgument("--results", results, ResultsArgument, `a JSON array of {"toolCallId", "output", "isError"?} or {"results": [...]}`)
      const list = "results" in parsed ? parsed.results : parsed
      const accepted = yield* client.runs.toolResults({
        path: { threadId: threadId as ThreadId, runId: runId as RunId },
        payload: { results: list },
        headers: {}
      })
      yield* Ref.set(posted, Option.some({ runSeq: accepted.runSeq }))
      if (!json) yield* Console.log(`posted: ${list.length} result(s) for run ${accepted.runSeq} ${accepted.runId}`)
      const view = yield* untilSettled(client, accepted.runId, new Set(list.map((r) => r.toolCallId)))
      if (json) yield* Console.log(JSON.stringify(yield* Schema.encode(RunView)(view)))
      else yield* Console.log(view.run.status === "waiting" ? waitingLines(threadId, view) : Format.runReply(view))
      if (view.run.status !== "completed" && view.run.status !== "waiting") process.exitCode = 1
    })).pipe(Effect.onInterrupt(() =>
      Effect.flatMap(Ref.get(posted), (p) => interruptedLines(toolResultsInterruptedLine(target, threadId, runId, p), json, { runId })))))

/**
 * The one line (without `baton: `) `tool-results` prints on stderr when SIGINT (Ctrl-C) stops it: before the server
 * accepted the results they may or may not have been recorded; after, the run goes on on the server. Either way the
 * line says how to see the run.
 */
export const toolResultsInterruptedLine = (
  target: Target,
  threadId: string,
  runId: string,
  posted: Option.Option<{ readonly runSeq: number }>
): string =>
  Option.match(posted, {
    onNone: () =>
      `interrupted before the server answered: the results for run ${runId} may have been recorded; ` +
      `see with \`${showCommand(target, threadId)}\``,
    onSome: ({ runSeq }) =>
      `interrupted: run ${runSeq} ${runId} goes on on the server with the results (Ctrl-C stops only this command); ` +
      `see it with \`${showCommand(target, threadId)}\``
  })

/**
 * `baton --server URL thread show ID [--json]`: the thread's snapshot, as the in-process command prints it, or with
 * `json` as the API serves it (`Format.snapshotDocument`).
 */
export const threadShow = (target: Target, threadId: string, json = false) =>
  call(target, Effect.gen(function*() {
    const client = yield* api(target)
    const snapshot = yield* client.threads.get({ path: { threadId: threadId as ThreadId } })
    yield* Console.log(json ? Format.snapshotDocument(snapshot) : Format.threadSnapshot(snapshot))
  }))

/** `baton --server URL handoffs ID`: the thread's handoffs with their deliveries, as the in-process command prints them. */
export const handoffs = (target: Target, threadId: string) =>
  call(target, Effect.gen(function*() {
    const client = yield* api(target)
    const snapshot = yield* client.threads.get({ path: { threadId: threadId as ThreadId } })
    const list = yield* client.handoffs.list({ path: { threadId: threadId as ThreadId } })
    yield* Console.log(Format.handoffs(
      list.handoffs,
      list.handoffs.flatMap((h) => h.deliveries),
      snapshot.providerThreads,
      snapshot.providerThreads.flatMap((p) => p.nativeThreads)
    ))
  }))

/** `baton --server URL switch ID PROVIDER`. */
export const switchProvider = (target: Target, threadId: string, providerInstance: string) =>
  call(target, Effect.gen(function*() {
    const client = yield* api(target)
    const result = yield* client.threads.switchProvider({
      path: { threadId: threadId as ThreadId },
      payload: { providerInstance: providerInstance as ProviderInstance },
      headers: {}
    })
    yield* Console.log(Format.switched(threadId, providerInstance, result))
  }))

/** `baton --server URL compact ID [--json]`. */
export const compact = (target: Target, threadId: string, json: boolean) =>
  call(target, Effect.gen(function*() {
    const client = yield* api(target)
    const report = yield* client.threads.compact({ path: { threadId: threadId as ThreadId }, payload: {}, headers: {} })
    yield* Console.log(json ? JSON.stringify(report) : Format.compactReport(report))
  })).pipe(sayingWhenStopped(requestInterruptedLine(target, threadId, "/compact may have run"), json))

/**
 * `baton --server URL offload ID [--keep-tokens N] [--operation-id OP] [--preview] [--json]`: prints the server's
 * message for the user, then the details (`--preview`: the summary offload's dry run).
 */
export const offload = (
  target: Target,
  threadId: string,
  keepTokens: Option.Option<number>,
  json: boolean,
  options: { readonly operationId?: Option.Option<string>; readonly preview?: boolean } = {}
) =>
  call(target, Effect.gen(function*() {
    const client = yield* api(target)
    const operationId = options.operationId ?? Option.none()
    const report = yield* client.threads.offload({
      path: { threadId: threadId as ThreadId },
      payload: {
        ...Option.match(keepTokens, { onNone: () => ({}), onSome: (k) => ({ keepTokens: k }) }),
        ...Option.match(operationId, { onNone: () => ({}), onSome: (id) => ({ operationId: id }) }),
        ...(options.preview === true ? { dryRun: true } : {})
      },
      headers: {}
    })
    yield* Console.log(json ? JSON.stringify(report) : Format.offloadReport(report))
  })).pipe(sayingWhenStopped(
    options.preview === true
      ? requestInterruptedLine(target, threadId, null)
      : requestInterruptedLine(target, threadId, Option.match(options.operationId ?? Option.none(), {
        onNone: () => "/offload may have started",
        onSome: (id) => `/offload may have started (its outcome: \`baton --server ${target.url} offload ${threadId} --get ${id}\`)`
      })),
    json
  ))

/**
 * `baton --server URL offload ID --get OP [--json]`: the outcome of `/offload` operation `OP` (`GET
 * /threads/{id}/offload/{op}`; `running` while in flight, on this server process or another): the server's message,
 * then the details. Exits 2 on an unknown thread or operation.
 */
export const offloadGet = (target: Target, threadId: string, operationId: string, json: boolean) =>
  call(target, Effect.gen(function*() {
    const client = yield* api(target)
    const report = yield* client.threads.getOffload({ path: { threadId: threadId as ThreadId, operationId } })
    yield* Console.log(json ? JSON.stringify(report) : Format.offloadReport(report))
  })).pipe(sayingWhenStopped(requestInterruptedLine(target, threadId, null), json))

/**
 * `baton --server URL offload ID --cancel OP [--json]`: cancels `/offload` operation `OP` if its summary is still
 * being written (`POST /threads/{id}/offload/{op}/cancel`) and prints the settled outcome: `cancelled`, or what it
 * finished with (a commit is never undone). Exits 2 on an unknown thread or operation.
 */
export const offloadCancel = (target: Target, threadId: string, operationId: string, json: boolean) =>
  call(target, Effect.gen(function*() {
    const client = yield* api(target)
    const report = yield* client.threads.cancelOffload({ path: { threadId: threadId as ThreadId, operationId } })
    yield* Console.log(json ? JSON.stringify(report) : Format.offloadReport(report))
  })).pipe(sayingWhenStopped(requestInterruptedLine(target, threadId, `operation ${operationId} may have been cancelled`), json))

/**
 * `baton --server URL offload ID --undo-summary [--json]`: undoes the thread's newest `/offload` summary (`POST
 * /threads/{id}/offload/undo`): its items are visible again, the summary stays in the log. Prints the server's
 * message, then the details (`nothing undone: <why>` when there is none to undo). Exits 2 on 409 (a run in progress).
 */
export const offloadUndoSummary = (target: Target, threadId: string, json: boolean) =>
  call(target, Effect.gen(function*() {
    const client = yield* api(target)
    const report = yield* client.threads.undoOffload({ path: { threadId: threadId as ThreadId }, payload: {}, headers: {} })
    yield* Console.log(json ? JSON.stringify(report) : Format.offloadUndoReport(report))
  })).pipe(sayingWhenStopped(requestInterruptedLine(target, threadId, "the newest /offload summary may have been undone"), json))

/** `baton --server URL offload ID --dry-run [--json]`: the tool-result offload preview of the active native thread. */
export const offloadPreview = (target: Target, threadId: string, json: boolean) =>
  call(target, Effect.gen(function*() {
    const client = yield* api(target)
    const preview = yield* client.threads.previewToolResultOffload({ path: { threadId: threadId as ThreadId } })
    yield* Console.log(json ? JSON.stringify(preview) : Format.toolResultOffloadPreview(preview))
  })).pipe(sayingWhenStopped(requestInterruptedLine(target, threadId, null), json))

/** What `baton offload-control` changes: absent fields keep the thread's current control. */
export interface ControlChange {
  readonly reset: boolean
  readonly enabled: Option.Option<boolean>
  readonly keepNewestUnits: Option.Option<number>
  readonly pin: ReadonlyArray<string>
  readonly unpin: ReadonlyArray<string>
}

/** Whether `change` asks to change the control (else it is only shown). */
const changes = (change: ControlChange) =>
  change.reset || Option.isSome(change.enabled) || Option.isSome(change.keepNewestUnits) || change.pin.length > 0 || change.unpin.length > 0

/**
 * `baton --server URL offload-control ID [--on|--off] [--keep-newest N] [--pin ITEM]... [--unpin ITEM]... [--reset]
 * [--json]`: shows the thread's tool-result offload control and, when asked to, changes it first (read, change,
 * `PUT`; `--reset` starts from `{}`, inheriting everything from the instance).
 */
export const offloadControl = (target: Target, threadId: string, change: ControlChange, json: boolean) =>
  call(target, Effect.gen(function*() {
    const client = yield* api(target)
    const path = { threadId: threadId as ThreadId }
    let view = yield* client.threads.getToolResultOffloadControl({ path })
    if (changes(change)) {
      const base: ToolResultOffloadControl = change.reset ? {} : view.control
      const pins = [...new Set([...(base.pinnedItemIds ?? []), ...change.pin])].filter((id) => !change.unpin.includes(id))
      const { pinnedItemIds: _, ...rest } = base
      const payload = {
        ...rest,
        ...Option.match(change.enabled, { onNone: () => ({}), onSome: (enabled) => ({ enabled }) }),
        ...Option.match(change.keepNewestUnits, { onNone: () => ({}), onSome: (keepNewestUnits) => ({ keepNewestUnits }) }),
        ...(pins.length === 0 ? {} : { pinnedItemIds: pins as Array<ItemId> })
      }
      view = yield* client.threads.setToolResultOffloadControl({ path, payload, headers: {} })
    }
    yield* Console.log(json ? JSON.stringify(view) : Format.toolResultOffloadControl(view))
  })).pipe(sayingWhenStopped(
    changes(change)
      ? requestInterruptedLine(target, threadId, `the offload control may have been changed (see it with \`baton --server ${target.url} offload-control ${threadId}\`)`)
      : requestInterruptedLine(target, threadId, null),
    json
  ))

/** `baton --server URL offload ID --undo [--json]`: undoes the newest tool-result offload flush. */
export const offloadUndo = (target: Target, threadId: string, json: boolean) =>
  call(target, Effect.gen(function*() {
    const client = yield* api(target)
    const undo = yield* client.threads.undoToolResultOffload({ path: { threadId: threadId as ThreadId }, payload: {}, headers: {} })
    yield* Console.log(json ? JSON.stringify(undo) : Format.toolResultOffloadUndo(undo))
  })).pipe(sayingWhenStopped(requestInterruptedLine(target, threadId, "the newest tool-result offload flush may have been undone"), json))

const decodeEvent = Schema.decodeUnknown(Schema.parseJson(ThreadEvent))

/** The request of a stream endpoint (`path`), resuming after `lastEventId` when given. */
const streamRequest = (target: Target, path: string, lastEventId: string | undefined) =>
  HttpClientRequest.get(`${target.url.replace(/\/+$/, "")}${path}`).pipe(
    HttpClientRequest.setHeader("accept", "text/event-stream"),
    lastEventId === undefined ? (r) => r : HttpClientRequest.setHeader("last-event-id", lastEventId),
    withToken(target)
  )

/**
 * How long a cut stream is retried while the server does not answer: 250 ms doubling to 2 s between tries, for at
 * most 15 s (a restarting `baton serve` listens again within that), then the "cannot reach" failure.
 */
const reconnectSchedule = Schedule.exponential(Duration.millis(250)).pipe(
  Schedule.union(Schedule.spaced(Duration.seconds(2))),
  Schedule.upTo(Duration.seconds(15))
)

/** A stream cut this many times in a row without a new event is given up (a server that accepts, then drops it). */
const maxCutsWithoutProgress = 5

/** Whether `error` is a transport failure (nothing answered), as opposed to an answer. */
const isRequestError = (error: unknown) => HttpClientError.isHttpClientError(error) && error._tag === "RequestError"

/**
 * A reconnecting stream's server answered 503: a restarting `baton serve` listens before its API is attached and
 * answers every request `503 ServerStarting` (`Retry-After: 1`) until then (a stopping one, on a connection still
 * open, `503 ServerStopping`), so the try is retried like a server that
 * does not answer yet; `response` is handed on as the answer once the schedule is spent.
 */
class NotServingYet extends Data.TaggedError("NotServingYet")<{ readonly response: HttpClientResponse.HttpClientResponse }> {}

/**
 * The events of a stream endpoint (`path`, e.g. `/threads/ID/events?follow=true`) as they arrive, decoded, from after
 * `lastEventId` when given. The stream resumes with `Last-Event-ID` whenever it ends early, so nothing is missed or
 * repeated:
 * - a client that fell behind is sent `subscriber_too_slow` naming its cursor and the stream ends: it reconnects
 *   with that cursor;
 * - a connection cut after its 200 (the server killed mid-run, a dropped connection: the body's read fails), or a
 *   stream the server ended with `server_stopping` (its shutdown), is
 *   reconnected after the last event received, retried on `reconnectSchedule` while nothing answers or the server
 *   answers 503 (a restarted server not serving its API yet: `ServerStarting`; one stopping: `ServerStopping`); an event cut in
 *   half by it is never handed on (the next connection sends it whole).
 * Fails with `RemoteFailure` carrying the server's sentence when it answers an error instead of a stream, "cannot
 * reach" when a cut stream's server stays gone, and "lost" after `maxCutsWithoutProgress` cuts without an event.
 */
const eventStream = (
  target: Target,
  path: string,
  lastEventId?: string,
  reconnect: { readonly cuts: number } | undefined = undefined
): Stream.Stream<ThreadEvent, RemoteFailure, HttpClient.HttpClient> => {
  let resumeFrom: string | undefined
  let lastId = lastEventId
  let cut = false
  let received = false
  const execute = Effect.flatMap(HttpClient.HttpClient, (client) => client.execute(streamRequest(target, path, lastEventId)))
  const once = Effect.gen(function*() {
    const response = yield* (reconnect === undefined ? execute : Effect.retry(
      Effect.flatMap(execute, (r) => r.status === 503 ? Effect.fail(new NotServingYet({ response: r })) : Effect.succeed(r)),
      { schedule: reconnectSchedule, while: (e) => isRequestError(e) || e instanceof NotServingYet }
    ).pipe(Effect.catchTag("NotServingYet", (e) => Effect.succeed(e.response))))
    if (!batonLike(response)) return yield* notBaton(target, response)
    if (response.status !== 200) {
      const text = yield* response.text
      // A Baton error (`_tag`, `message`) is explained as every other answer is: `baton events --thread X` of an
      // unknown thread named the API's list (GET /threads), not this client's command (b48srv).
      const tagged = Option.liftThrowable((t: string): unknown => JSON.parse(t))(text).pipe(Option.filter(Schema.is(TaggedBody)))
      if (Option.isSome(tagged)) return yield* explain(target)(tagged.value)
      const body = Schema.decodeUnknownOption(ErrorBody)(text)
      const words = Option.match(body, { onNone: () => `${response.status} ${oneLine(text).slice(0, 200)}`, onSome: (b) => oneLine(b.message) })
      return yield* new RemoteFailure({ message: response.status === 401 ? `${words} (pass --token or set BATON_TOKEN)` : words })
    }
    return response.stream.pipe(
      Stream.decodeText(),
      Stream.pipeThroughChannel(Sse.makeChannel()),
      Stream.filterMapEffect((event) => {
        if (event.event === "subscriber_too_slow") {
          resumeFrom = event.id
          return Option.none()
        }
        // The server is stopping (its shutdown ends live streams with this, then the stream ends): resumed like a
        // cut, after the last event received, while the server (this one back, or another) does not answer.
        if (event.event === "server_stopping") {
          cut = true
          return Option.none()
        }
        return Option.some(unreadable(decodeEvent(event.data)).pipe(Effect.tap(() => {
          if (event.id !== undefined) lastId = event.id
          received = true
        })))
      }),
      // The body's read failed after the 200: the connection was cut. Its partial event (held by the parser) is
      // dropped with the failure; the stream ends here and resumes below.
      Stream.catchAll((e) => {
        if (!(HttpClientError.isHttpClientError(e) && e._tag === "ResponseError")) return Stream.fail(e)
        cut = true
        return Stream.empty
      })
    )
  }).pipe(Stream.unwrapScoped, Stream.mapError(explain(target)))
  return Stream.concat(once, Stream.suspend(() => {
    if (resumeFrom !== undefined) return eventStream(target, path, resumeFrom)
    if (!cut) return Stream.empty
    const cuts = received ? 1 : (reconnect?.cuts ?? 0) + 1
    return cuts > maxCutsWithoutProgress
      ? Stream.fail(new RemoteFailure({ message: `the connection to the Baton server at ${target.url} was lost ${cuts - 1} times in a row while reading its events` }))
      : eventStream(target, path, lastId, { cuts })
  }))
}

/** The run an event belongs to, when its payload names one. */
const runOf = (event: ThreadEvent): string | null => {
  const payload = event.payload as { readonly runId?: unknown }
  return typeof payload.runId === "string" ? payload.runId : null
}

const endTypes: ReadonlyArray<ThreadEvent["type"]> = ["run.completed", "run.failed", "run.interrupted", "run.waiting"]

/**
 * How far `send` got, for the line it prints when Ctrl-C stops it: the message not yet answered (`posting`), the
 * run accepted and going on (`accepted`), or its end event received (`ended`, while its reply is read).
 */
type SendProgress =
  | { readonly _tag: "posting" }
  | { readonly _tag: "accepted"; readonly runSeq: number; readonly runId: string }
  | { readonly _tag: "ended"; readonly runSeq: number; readonly runId: string; readonly status: string }

/** How a user looks at the thread afterwards: the command, with the server's URL (never the token). */
const showCommand = (target: Target, threadId: string) => `baton --server ${target.url} thread show ${threadId}`

/**
 * What a command stopped by a signal prints: `message` on stderr as `baton: <message>`; with `--json` (`json`) also
 * `Format.interruptedDocument` on stdout (`message` and `progress` in it), when a signal stopped it (not a closed
 * stdout, which cannot take it).
 */
const interruptedLines = (message: string, json: boolean, progress: Format.InterruptedProgress = {}) =>
  Effect.zipRight(
    Console.error(`baton: ${message}`),
    !json
      ? Effect.void
      : Effect.flatMap(CliRuntime.receivedSignal, (signal) =>
        Option.isSome(signal) ? Console.log(Format.interruptedDocument(signal.value, message, progress)) : Effect.void)
  )

/**
 * `self`, a command of one request or a few, saying when a signal stops it what may have become of the request
 * (`interruptedLines`: `message` on stderr, with `json` the JSON document on stdout). Found by a user: `compact`,
 * `offload` and `offload-control` stopped by Ctrl-C exited 130 without a word, under `--json` without the document
 * `--json` promises.
 */
const sayingWhenStopped = (message: string, json: boolean) => <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.onInterrupt(self, () => interruptedLines(message, json))

/**
 * The line (without `baton: `) a command of one request stopped by a signal prints: `what` may have been done on the
 * server (e.g. "/compact may have run"), or for a request that changes nothing, that nothing was changed; either way
 * how to see the thread.
 */
export const requestInterruptedLine = (target: Target, threadId: string, what: string | null): string =>
  what === null
    ? `interrupted before the server answered; nothing was changed`
    : `interrupted before the server answered: ${what} on the server; see with \`${showCommand(target, threadId)}\``

/**
 * The one line (without `baton: `) `send` prints on stderr when SIGINT (Ctrl-C) stops it: the run is the server's, so
 * stopping the command does not stop the run; the line says what became of it and how to see it.
 */
export const sendInterruptedLine = (target: Target, threadId: string, progress: SendProgress): string => {
  switch (progress._tag) {
    case "posting":
      return `interrupted before the server answered: the message may have been queued; see with \`${showCommand(target, threadId)}\``
    case "accepted":
      return `interrupted: run ${progress.runSeq} ${progress.runId} goes on on the server (Ctrl-C stops only this command); ` +
        `see it with \`${showCommand(target, threadId)}\``
    case "ended":
      return `interrupted while reading the reply of run ${progress.runSeq} ${progress.runId} (${progress.status}); ` +
        `see it with \`${showCommand(target, threadId)}\``
  }
}

/** The status a run's end event gives it. */
const endStatus = (event: ThreadEvent) =>
  event.type === "run.completed" ? "completed" : event.type === "run.failed" ? "failed" : event.type === "run.interrupted" ? "interrupted" : "waiting"

/** Reads run `runId` until it has ended or waits for tool results (`GET /runs/{id}`, then with `waitMs`). */
const settledView = (client: Effect.Effect.Success<ReturnType<typeof api>>, runId: RunId) =>
  Effect.gen(function*() {
    let view = yield* client.runs.get({ path: { runId }, urlParams: {} })
    while (!terminalRunStatuses.includes(view.run.status) && view.run.status !== "waiting") {
      view = yield* client.runs.get({ path: { runId }, urlParams: { waitMs: 30_000 } })
    }
    return view
  })

/**
 * `baton --server URL send ID TEXT [--json]`: posts the message (202 with the run id), then follows the thread's event
 * stream and prints `sent: run N ID queued`, every event from the run's `run.queued` until the run ends (one line each, or with `--json` each
 * event as one JSON line), then the run's reply. Exit code 1 when the run failed or was interrupted. A run that waits
 * for the client's tool results stops the command there: it prints the open calls and how to post their results.
 *
 * The stream is read from the thread's first event (the 202 does not say the seq of the run's `run.queued`), so on a
 * long thread the earlier events are received and skipped. Should the stream end before the run (a server shutting
 * down), the run is awaited with `GET /runs/{id}?waitMs=`. Once the run's end event has arrived its outcome is known:
 * should the reply then be unreadable (the server stopped right after the run ended), the command prints the run's
 * end as the event gave it, says on stderr why the reply is missing, and exits with the run's code (0, or 1 for a
 * failed or interrupted run), not 2.
 *
 * SIGINT (Ctrl-C) stops the command, not the run: it prints one line on stderr (`sendInterruptedLine`) and the
 * process exits 130.
 */
export const send = (target: Target, threadId: string, text: string, json: boolean) =>
  Effect.flatMap(Ref.make<SendProgress>({ _tag: "posting" }), (progress) =>
    call(target, Effect.gen(function*() {
      const client = yield* api(target)
      const accepted = yield* client.messages.send({ path: { threadId: threadId as ThreadId }, payload: { text }, headers: {} })
      yield* Ref.set(progress, { _tag: "accepted", runSeq: accepted.runSeq, runId: accepted.runId })
      if (!json) yield* Console.log(`sent: run ${accepted.runSeq} ${accepted.runId} ${accepted.status}`)
      const runId: string = accepted.runId
      const isEnd = (e: ThreadEvent) => endTypes.includes(e.type) && runOf(e) === runId
      const ended = yield* eventStream(target, `/threads/${encodeURIComponent(threadId)}/events?follow=true`).pipe(
        Stream.dropWhile((e) => !(e.type === "run.queued" && runOf(e) === runId)),
        Stream.takeUntil(isEnd),
        Stream.tap((e) => Console.log(json ? JSON.stringify(Schema.encodeSync(ThreadEvent)(e)) : Format.eventLine(e, false))),
        Stream.filter(isEnd),
        Stream.runLast
      )
      if (Option.isSome(ended)) {
        yield* Ref.set(progress, { _tag: "ended", runSeq: accepted.runSeq, runId, status: endStatus(ended.value) })
      }
      // Without the end event the reply's read decides (its failure is the command's); with it, the outcome is known.
      const read = yield* (Option.isNone(ended)
        ? Effect.map(settledView(client, accepted.runId), Either.right)
        : Effect.either(Effect.mapError(settledView(client, accepted.runId), explain(target))))
      if (Either.isLeft(read)) {
        const event = Option.getOrThrow(ended)
        const status = endStatus(event)
        if (!json) {
          yield* Console.log(event.type === "run.waiting"
            ? waitingText(threadId, accepted.runSeq, runId, event.payload.calls, event.payload.deadlineAt)
            : `run ${accepted.runSeq} ${status}`)
        }
        yield* Console.error(`baton: run ${accepted.runSeq} ${status}, but its reply could not be read (${read.left.message}); ` +
          `see it with \`${showCommand(target, threadId)}\``)
        if (status === "failed" || status === "interrupted") process.exitCode = 1
        return
      }
      const view = read.right
      if (view.run.status === "waiting") {
        if (!json) yield* Console.log(waitingLines(threadId, view))
        return
      }
      if (!json) yield* Console.log(Format.runReply(view))
      if (view.run.status !== "completed") process.exitCode = 1
    })).pipe(Effect.onInterrupt(() =>
      Effect.flatMap(Ref.get(progress), (p) => interruptedLines(sendInterruptedLine(target, threadId, p), json, { runId: p._tag === "posting" ? null : p.runId })))))

/**
 * `baton --server URL events [--thread ID] [--follow] [--json]`: the thread's (or every thread's) events, one line
 * each (or one JSON line each); with `--follow`, then the live tail until interrupted. A signal (Ctrl-C, the way a
 * follow ends) prints one line on stderr, `interrupted after N events`, and with `--json` ends stdout with the
 * interrupted document (`events`: N).
 */
export const events = (target: Target, threadId: Option.Option<string>, follow: boolean, json: boolean) =>
  Effect.flatMap(Ref.make(0), (printed) =>
    call(target, eventStream(
      target,
      Option.match(threadId, {
        onNone: () => `/events?follow=${follow}`,
        onSome: (id) => `/threads/${encodeURIComponent(id)}/events?follow=${follow}`
      })
    ).pipe(
      Stream.runForEach((e) =>
        Effect.zipRight(
          Console.log(json ? JSON.stringify(Schema.encodeSync(ThreadEvent)(e)) : Format.eventLine(e, Option.isNone(threadId))),
          Ref.update(printed, (n) => n + 1)
        ))
    )).pipe(Effect.onInterrupt(() =>
      Effect.flatMap(Ref.get(printed), (n) => interruptedLines(`interrupted after ${n} event${n === 1 ? "" : "s"}`, json, { events: n })))))
