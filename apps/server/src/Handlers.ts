/**
 * Handlers: the implementation of each `BatonApi` group (`HttpApiBuilder.group`). Reads go through `ThreadQuery`,
 * commands through `ThreadService` and the `RunDriver` (a message is submitted and answered 202 at once). Handlers
 * translate between the HTTP shapes (path, body, `Idempotency-Key`) and the commands; they decide nothing.
 */
import { Api, Commands, type CommandId, InvalidRequest, mergeAnswer, type RunId, terminalRunStatuses, type ThreadEvent } from "@baton/contracts"
import { IdGenerator, RunDriver, ThreadQuery, ThreadService } from "@baton/orchestration"
import { EventFeed, ThreadStore } from "@baton/persistence"
import { HttpApiBuilder } from "@effect/platform"
import { Deferred, Effect, Layer, Option, Stream } from "effect"
import * as EventStream from "./EventStream.js"

/**
 * The command id of a write: the `Idempotency-Key` header or the body's `commandId` (both: they must be equal),
 * else a fresh id (the command is then not deduplicated). Fails with `InvalidRequest` when the two differ.
 */
const commandIdOf = (
  ids: IdGenerator.IdGeneratorShape,
  headers: { readonly "idempotency-key"?: string | undefined },
  body: { readonly commandId?: string | undefined }
) => {
  const header = headers["idempotency-key"]
  if (header !== undefined && body.commandId !== undefined && header !== body.commandId) {
    return Effect.fail(new InvalidRequest({ reason: "Idempotency-Key and the body's commandId differ; send one, or the same in both" }))
  }
  return Effect.succeed((header ?? body.commandId ?? ids.next("cmd")) as CommandId)
}

const threads = HttpApiBuilder.group(Api.BatonApi, "threads", (handlers) =>
  Effect.gen(function*() {
    const service = yield* ThreadService.ThreadService
    const query = yield* ThreadQuery.ThreadQuery
    const driver = yield* RunDriver.RunDriver
    const ids = yield* IdGenerator.IdGenerator
    return handlers
      .handle("create", ({ headers, payload }) =>
        Effect.gen(function*() {
          const commandId = yield* commandIdOf(ids, headers, payload)
          const threadId = yield* service.createThread(Commands.CreateThread.make({
            commandId,
            title: payload.title ?? "untitled",
            providerInstance: payload.providerInstance,
            ...(payload.tools === undefined ? {} : { tools: payload.tools })
          }))
          return { threadId }
        }))
      .handle("list", ({ urlParams }) => query.listThreads(urlParams))
      .handle("get", ({ path }) => query.snapshot(path.threadId))
      .handle("switchProvider", ({ headers, path, payload }) =>
        Effect.flatMap(commandIdOf(ids, headers, payload), (commandId) =>
          service.switchProvider(Commands.SwitchProvider.make({
            commandId,
            threadId: path.threadId,
            providerInstance: payload.providerInstance
          }))))
      .handle("fork", ({ headers, path, payload }) =>
        Effect.flatMap(commandIdOf(ids, headers, payload), (commandId) =>
          service.fork(Commands.ForkThread.make({
            commandId,
            threadId: path.threadId,
            ...(payload.atRunSeq === undefined ? {} : { atRunSeq: payload.atRunSeq }),
            ...(payload.providerInstance === undefined ? {} : { providerInstance: payload.providerInstance }),
            ...(payload.title === undefined ? {} : { title: payload.title })
          }))))
      .handle("mergeBack", ({ headers, path, payload }) =>
        Effect.flatMap(commandIdOf(ids, headers, payload), (commandId) =>
          Effect.map(service.mergeBack(Commands.MergeBack.make({ commandId, forkThreadId: path.threadId })), mergeAnswer)))
      .handle("compact", ({ headers, path, payload }) =>
        Effect.flatMap(commandIdOf(ids, headers, payload), (commandId) =>
          service.compact(Commands.CompactThread.make({ commandId, threadId: path.threadId }))))
      .handle("offload", ({ headers, path, payload }) =>
        Effect.gen(function*() {
          const commandId = yield* commandIdOf(ids, headers, payload)
          const given = headers["idempotency-key"] ?? payload.commandId
          if (payload.operationId !== undefined && given !== undefined && payload.operationId !== given) {
            return yield* new InvalidRequest({ reason: "operationId and the command id (Idempotency-Key or commandId) differ; send one, or the same in each" })
          }
          return yield* service.offload(Commands.OffloadThread.make({
            commandId: (payload.operationId ?? commandId) as CommandId,
            threadId: path.threadId,
            ...(payload.keepTokens === undefined ? {} : { keepTokens: payload.keepTokens }),
            ...(payload.dryRun === undefined ? {} : { dryRun: payload.dryRun })
          }))
        }))
      .handle("undoOffload", ({ headers, path, payload }) =>
        Effect.flatMap(commandIdOf(ids, headers, payload), (commandId) =>
          service.undoOffload(Commands.UndoOffload.make({ commandId, threadId: path.threadId }))))
      .handle("getOffload", ({ path }) => service.getOffload(path.threadId, path.operationId))
      .handle("cancelOffload", ({ path }) => service.cancelOffload(path.threadId, path.operationId))
      .handle("previewToolResultOffload", ({ path }) => service.previewToolResultOffload(path.threadId))
      .handle("undoToolResultOffload", ({ headers, path, payload }) =>
        Effect.flatMap(commandIdOf(ids, headers, payload), (commandId) =>
          service.undoToolResultOffload(Commands.UndoToolResultOffload.make({ commandId, threadId: path.threadId }))))
      .handle("getToolResultOffloadControl", ({ path }) => service.getToolResultOffloadControl(path.threadId))
      .handle("setToolResultOffloadControl", ({ headers, path, payload }) =>
        Effect.flatMap(commandIdOf(ids, headers, payload), (commandId) => {
          const { commandId: _, ...control } = payload
          return service.setToolResultOffloadControl(Commands.SetToolResultOffloadControl.make({ commandId, threadId: path.threadId, control }))
        }))
      .handle("interrupt", ({ headers, path, payload }) =>
        Effect.gen(function*() {
          const commandId = yield* commandIdOf(ids, headers, payload)
          return yield* driver.interrupt(Commands.InterruptRun.make({
            commandId,
            threadId: path.threadId,
            ...(payload.runId === undefined ? {} : { runId: payload.runId })
          }))
        }))
  }))

const messages = HttpApiBuilder.group(Api.BatonApi, "messages", (handlers) =>
  Effect.gen(function*() {
    const driver = yield* RunDriver.RunDriver
    const ids = yield* IdGenerator.IdGenerator
    return handlers.handle("send", ({ headers, path, payload }) =>
      Effect.flatMap(commandIdOf(ids, headers, payload), (commandId) =>
        driver.submit(Commands.SendMessage.make({
          commandId,
          threadId: path.threadId,
          text: payload.text,
          ...(payload.tools === undefined ? {} : { tools: payload.tools })
          // The API's decoding has checked every field against the same schemas (the prompt, the tools, the ids):
          // not checked again on every send (the prompt's scan is as long as the prompt).
        }, { disableValidation: true }))))
  }))

/** The events after which a waited-for run answers a wait: it ended, or it waits for the client's tool results. */
const answeringEvents: ReadonlySet<string> = new Set(["run.completed", "run.failed", "run.interrupted", "run.waiting"])

/**
 * The events of `runId`'s thread after its current last one (read now, before the driver reads the run), for the wait
 * on a run that another server process may drive (on one Postgres): the feed delivers other processes' commits by
 * `LISTEN/NOTIFY` (or its poll), so the wait needs no polling of its own. `{ended, events}`: `ended`, the run's
 * record when this read found it ended (the answer: no other read, no wait); `events` `null` when no feed is needed:
 * a run this process drives or whose thread has a worker here (its fiber's or the worker's end answers the wait), one
 * ended already or unknown (the driver's first read answers it with `RunNotFound`), or a feed that could not be
 * opened (the driver's wait, the bound and the shutdown still answer).
 */
const feedForWait = (store: ThreadStore, feed: EventFeed.EventFeed, driver: RunDriver.RunDriver, runId: RunId) =>
  Effect.gen(function*() {
    const none = { ended: null, events: null }
    if (driver.inFlight().includes(runId)) return none
    const run = yield* store.getRun(runId)
    if (run._tag === "None") return none
    if (terminalRunStatuses.includes(run.value.status)) return { ended: run.value, events: null }
    const threadId = run.value.threadId
    // A thread with a worker here: that worker (or the run's fiber) settles the wait; the feed would only add a tailer.
    if (driver.working().includes(threadId)) return none
    return { ended: null, events: yield* feed.thread(threadId, { afterSeq: yield* store.threadVersion(threadId) }) }
  }).pipe(Effect.orElseSucceed(() => ({ ended: null, events: null })))

/**
 * Completes (with `null`) at the first event of `events` that ends run `runId` or makes it wait for the client's
 * tool results; never when there is no feed, or the feed fails or ends first. Never fails.
 */
const answeredInFeed = (events: Stream.Stream<ThreadEvent, unknown> | null, runId: RunId): Effect.Effect<null> =>
  events === null
    ? Effect.never
    : Stream.filter(events, (e) => answeringEvents.has(e.type) && "runId" in e.payload && e.payload.runId === runId).pipe(
      Stream.runHead,
      Effect.flatMap((found) => Option.isSome(found) ? Effect.succeed(null) : Effect.never),
      Effect.orElse(() => Effect.never)
    )

const runs = HttpApiBuilder.group(Api.BatonApi, "runs", (handlers) =>
  Effect.gen(function*() {
    const query = yield* ThreadQuery.ThreadQuery
    const driver = yield* RunDriver.RunDriver
    const ids = yield* IdGenerator.IdGenerator
    const stopping = yield* EventStream.Stopping
    const store = yield* ThreadStore
    const feed = yield* EventFeed.EventFeed
    return handlers
      .handle("toolResults", ({ headers, path, payload }) =>
        Effect.flatMap(commandIdOf(ids, headers, payload), (commandId) =>
          driver.submitToolResults(Commands.SubmitToolResults.make({
            commandId,
            threadId: path.threadId,
            runId: path.runId,
            results: payload.results
          }))))
      .handle("get", ({ path, urlParams }) =>
        Effect.gen(function*() {
          if (urlParams.waitMs !== undefined && urlParams.waitMs > 0) {
            // Waits for the run to end, at most `waitMs`; then answers the run as it stands (with the ended record
            // the wait read, when it read one: not read twice). The bound is the driver's, on the waiting alone: a
            // run found ended answers without a timer raced against the read. A run that waits for the client's tool
            // results is answered too: it cannot end before the client posts them, and the client waited the whole
            // `waitMs` for it (`baton tool-results` 30 s a round; new user b44srv).
            // The server's shutdown ends the wait too (answering the run as it stands), as it ends a live event
            // stream: a run in flight goes on until the open requests have finished, so the wait held the shutdown
            // till the listener's deadline and was then cut without an answer (new user b44srv).
            // Waiting for the client's tool results is signalled by the driver (its fiber's end carries the status),
            // not polled for; a run another process drives is woken by the thread's event feed, whose cursor is read
            // before the driver reads the run, so a change between the two is not missed.
            // A run that read found ended is answered with that record (one read of the run, as before the feed).
            const found = yield* feedForWait(store, feed, driver, path.runId)
            if (found.ended !== null) return yield* query.run(path.runId, found.ended)
            const inFeed = answeredInFeed(found.events, path.runId)
            const ended = yield* driver.awaitEnd(path.runId, urlParams.waitMs, { orWaiting: true }).pipe(
              Effect.catchIf((e) => e._tag !== "RunNotFound", () => Effect.succeed(null)),
              Effect.raceFirst(Effect.as(Deferred.await(stopping), null)),
              Effect.raceFirst(inFeed)
            )
            return yield* query.run(path.runId, ended ?? undefined)
          }
          return yield* query.run(path.runId)
        }))
      .handle("list", ({ path, urlParams }) => query.listRuns(path.threadId, urlParams))
  }))

const items = HttpApiBuilder.group(Api.BatonApi, "items", (handlers) =>
  Effect.map(ThreadQuery.ThreadQuery, (query) =>
    handlers
      .handle("list", ({ path, urlParams }) => query.listItems(path.threadId, urlParams))
      .handle("get", ({ path, urlParams }) => query.itemText(path.itemId, urlParams))
      .handle("offloadArchive", ({ path, urlParams }) => query.offloadArchive(path.threadId, path.offloadId, urlParams))))

const handoffs = HttpApiBuilder.group(Api.BatonApi, "handoffs", (handlers) =>
  Effect.map(ThreadQuery.ThreadQuery, (query) =>
    handlers
      .handle("list", ({ path }) => query.handoffs(path.threadId))
      .handle("summaries", ({ path }) => query.handoffSummaries(path.threadId))
      .handle("itemIds", ({ path, urlParams }) => query.handoffItemIds(path.handoffId, urlParams))
      .handle("get", ({ path }) => query.handoff(path.handoffId))))

const events = HttpApiBuilder.group(Api.BatonApi, "events", (handlers) =>
  Effect.gen(function*() {
    const query = yield* ThreadQuery.ThreadQuery
    const feed = yield* EventFeed.EventFeed
    const stopping = yield* EventStream.Stopping
    return handlers
      .handle("thread", ({ headers, path, urlParams }) =>
        Effect.gen(function*() {
          const after = yield* EventStream.startCursor(headers["last-event-id"], urlParams.after, Api.maxSeq)
          // A cursor past the thread's last event was never sent: following from it would skip, in silence, every
          // event up to it. (It also checks that the thread exists: an unknown id is a 404, not an empty stream.)
          yield* EventStream.notPastTheEnd(after, yield* query.lastEventSeq(path.threadId), headers["last-event-id"], `thread ${path.threadId}`)
          if (urlParams.follow === false) {
            return EventStream.replay(
              (cursor) => query.threadEvents(path.threadId, cursor, EventStream.pageSize),
              (e) => e.seq,
              after
            )
          }
          return EventStream.live(yield* feed.thread(path.threadId, { afterSeq: after }), (e) => e.seq, stopping)
        }))
      .handle("timeline", ({ path }) => query.timeline(path.threadId))
      .handle("all", ({ headers, urlParams }) =>
        Effect.gen(function*() {
          const resuming = EventStream.resumes(headers["last-event-id"])
          // `tail=true` and `after` name two different starts: one was silently dropped (even an `after` past the log).
          if (urlParams.tail === true && urlParams.after !== undefined) {
            return yield* new InvalidRequest({
              reason: "tail=true and after name two different starts (the log's end, globalSeq " + urlParams.after + "): send one"
            })
          }
          const last = yield* query.lastGlobalSeq()
          // `tail=true` (the dashboard's thread list, which reads the threads themselves): from the log's end, not
          // its whole history; a reconnection's Last-Event-ID still resumes where it was.
          const after = urlParams.tail === true && !resuming ? last : yield* EventStream.startCursor(headers["last-event-id"], urlParams.after)
          yield* EventStream.notPastTheEnd(after, last, headers["last-event-id"], "the log")
          if (urlParams.follow === false) {
            // In the feed's order (commit-safe on Postgres), as the live stream sends it: resuming from either's ids
            // gives exactly the events after it.
            return EventStream.replayStream(yield* feed.replayAll({ afterGlobalSeq: after }), (e) => e.globalSeq)
          }
          return EventStream.live(yield* feed.all({ afterGlobalSeq: after }), (e) => e.globalSeq, stopping)
        }))
  }))

const health = HttpApiBuilder.group(Api.BatonApi, "health", (handlers) =>
  Effect.map(ThreadQuery.ThreadQuery, (query) =>
    handlers
      .handle("live", () => Effect.succeed({ status: "ok" as const }))
      .handle("ready", () => query.readiness())))

/**
 * Every group's handlers. Requires `ThreadService`, `ThreadQuery`, `RunDriver`, `IdGenerator` and the
 * `Authorization` middleware.
 */
export const layer = Layer.mergeAll(threads, messages, runs, items, handoffs, events, health)
