/**
 * TurnStream: records a provider turn's output as it streams in (`ProviderAdapter.startTurn` is a stream of
 * `TurnEvent`s). The items of each arrival (one stream chunk: what the provider delivered together, often a single
 * item) are recorded in one small unit of work with one `items.appended` event, so subscribers of the post-commit
 * event bus see a run's items while its turn is still running, and a burst of items costs one transaction, not one
 * per item. The arrival that comes with the turn's end (the stream's last chunk) is recorded in the outcome's unit of
 * work instead (`settle`): nothing waits on it in between.
 *
 * What it holds back, and why:
 * - An open tool unit: a `tool_call` (with a call id) and everything after it stay held until every held call has
 *   its `tool_result`; then the unit is appended whole. The record never holds a call without its result, even
 *   after a crash mid-turn (invariant 7), and a call the turn leaves open is closed at the end with its state
 *   (`interrupted` / `dangling`) and a synthetic result (`closeOpenToolCalls`), exactly as a whole turn was.
 * - A possible replay: the first turn after a native thread was resumed may start by re-emitting what the thread
 *   already produced. While the leading items are each already recorded for this native thread (same kind, text and
 *   provider id), they are held; at the first item that is not, the held prefix is skipped (`items.replay_skipped`)
 *   except that a tool call and its results are skipped or kept together.
 *
 * It owns neither the run's status nor the turn's outcome: ThreadService writes the attempt before the stream starts
 * and the outcome after it ends (completion, failure), calling `flush` in that unit of work for what is still held.
 */
import type { ConcurrentModification, ContextUsage, HandoffDelivery, Item, NativeThread, NewThreadEvent, PersistenceError, ProviderError, Run } from "@baton/contracts"
import { Text } from "@baton/contracts"
import { ThreadStore, UnitOfWork } from "@baton/persistence"
import type { ProviderAdapter } from "@baton/providers"
import { Chunk, DateTime, Effect, Option, Stream } from "effect"
import { ContextHandoffDelivery } from "./ContextHandoffDelivery.js"
import { ItemLog, type NewItem } from "./ItemLog.js"

/** A `retry_scheduled` turn event (recorded as `run.retry_scheduled`). */
type RetryScheduled = Extract<ProviderAdapter.TurnEvent, { readonly _tag: "retry_scheduled" }>

const producedKinds = new Set(["assistant_message", "tool_call", "tool_result", "reasoning", "error", "summary"])
const toolCallStates = new Set(["answered", "dangling", "interrupted"])

/**
 * Keeps a provider's output recordable whatever an adapter returns: an unknown kind becomes an `error` item that
 * quotes it, an unknown tool-call state becomes `null`, non-string text is stringified, a NUL character or a lone
 * surrogate in the text becomes U+FFFD (`Text.toStorableText`: Postgres refuses NUL, which lost the turn's output there,
 * and each dialect altered a lone surrogate its own way, so the record differed from the text Baton held). Nothing
 * is dropped.
 */
export const normalizeProduced = (p: ProviderAdapter.ProducedItem): NewItem => {
  const text = Text.toStorableText(typeof p.text === "string" ? p.text : JSON.stringify(p.text) ?? "")
  const known = producedKinds.has(p.kind)
  return {
    kind: known ? p.kind : "error",
    text: known ? text : `unrecognised ${JSON.stringify(String(p.kind))} item from the provider: ${text}`,
    toolCallId: typeof p.toolCallId === "string" ? p.toolCallId : null,
    toolName: typeof p.toolName === "string" ? p.toolName : null,
    messageId: typeof p.messageId === "string" ? p.messageId : null,
    isError: p.isError === true,
    toolCallState: p.toolCallState !== null && toolCallStates.has(p.toolCallState) ? p.toolCallState : null
  }
}

/** The text of the `tool_result` Baton records for a tool call its turn left without one. */
export const unansweredToolResultText = (state: "interrupted" | "dangling") =>
  state === "interrupted"
    ? "[interrupted] The user interrupted the turn while this tool call ran; it returned no result."
    : "[no result] The turn ended without a result for this tool call."

/**
 * Runs `stream` chunk by chunk up to and including its first element that satisfies `isLast`, calling `f` on each
 * chunk as it arrives (the chunk holding that element is cut after it; an empty chunk is passed on as it came). The
 * stream is pulled no further after it and is closed when this ends, fails or is interrupted. The same as
 * `Stream.runForEachChunk(Stream.takeUntil(stream, isLast), f)`, which allocated about 200 KiB more per turn (two
 * channel stages: `bench/turn-start.bench.ts`, "allocated per turn"). Fails with the stream's error or `f`'s.
 */
export const runChunksUntil = <A, E, R, E2, R2>(
  stream: Stream.Stream<A, E, R>,
  isLast: (a: A) => boolean,
  f: (chunk: Chunk.Chunk<A>) => Effect.Effect<void, E2, R2>
): Effect.Effect<void, E | E2, R | R2> =>
  Effect.scoped(Effect.flatMap(Stream.toPull(stream), (pull) => {
    const next: Effect.Effect<void, E | E2, R | R2> = Effect.matchEffect(pull, {
      // `None`: the stream ended; `Some`: it failed.
      onFailure: Option.match({ onNone: () => Effect.void, onSome: (e: E) => Effect.fail(e) }),
      onSuccess: (chunk) => {
        const end = Chunk.findFirstIndex(chunk, isLast)
        return Option.isNone(end)
          ? Effect.zipRight(f(chunk), next)
          : f(end.value === chunk.length - 1 ? chunk : Chunk.take(chunk, end.value + 1))
      }
    })
    return next
  }))

/**
 * The record's results for tool calls of `threadId`, as a model-API adapter closes calls an earlier turn left open
 * in its message list (`ProviderAdapter.RecordedResults`): the `tool_result` items answering them, the newest per
 * call. The record's text (`unansweredToolResultText`, ClientToolWaits' deadline and interrupt texts) is then the
 * one the next request carries. A failed lookup is logged and answers nothing (the adapter's own text is used).
 */
export const recordedToolResults = (store: typeof ThreadStore.Service, threadId: Item["threadId"]): ProviderAdapter.RecordedResults => (ids) =>
  store.listItemsOfToolCalls(threadId, ids).pipe(
    Effect.map((items) => {
      const byCall = new Map<string, ProviderAdapter.ToolResultInput>()
      for (const i of items) {
        if (i.kind === "tool_result" && i.toolCallId !== null) byCall.set(i.toolCallId, { toolCallId: i.toolCallId, output: i.text, isError: i.isError })
      }
      return [...byCall.values()]
    }),
    Effect.catchAll((e) => Effect.as(Effect.logWarning(`could not read the recorded results of tool calls ${ids.join(", ")}`, e), []))
  )

/** Whether `items[i]` is a tool call (with a call id) that no later item of `items` answers. */
const isOpenCall = (items: ReadonlyArray<NewItem>, i: number) => {
  const item = items[i]!
  return item.kind === "tool_call" && item.toolCallId !== null &&
    !items.some((r, j) => j > i && r.kind === "tool_result" && r.toolCallId === item.toolCallId)
}

/**
 * Closes the tool calls a turn left open, at append time (items are never edited): each `tool_call` of `items`
 * with a call id and no later `tool_result` of the same id gets `toolCallState` `interrupted` (the turn stopped at
 * an interrupt) or `dangling` (it ended without the result), and a synthetic error `tool_result` answering it is
 * appended after the turn's items. Every tool call in the record then has its result, so any history Baton later
 * renders (inline or injected) keeps the tool unit whole and is a well-formed request for APIs that reject a tool
 * use without its result. Returns `items` unchanged when nothing is open.
 */
export const closeOpenToolCalls = (items: ReadonlyArray<NewItem>, interrupted: boolean): ReadonlyArray<NewItem> => {
  const state = interrupted ? "interrupted" as const : "dangling" as const
  const out: Array<NewItem> = []
  const answers: Array<NewItem> = []
  items.forEach((item, i) => {
    if (!isOpenCall(items, i)) return void out.push(item)
    out.push({ ...item, toolCallState: state })
    answers.push({
      kind: "tool_result",
      text: unansweredToolResultText(state),
      toolCallId: item.toolCallId,
      toolName: item.toolName,
      messageId: null,
      isError: true,
      toolCallState: null
    })
  })
  return answers.length === 0 ? items : [...out, ...answers]
}

const isTool = (i: NewItem) => (i.kind === "tool_call" || i.kind === "tool_result") && i.toolCallId !== null

/**
 * Splits the leading replayed items `held` and the first item that is not a replay (`next`, or none when the turn
 * ended) into what is skipped and what is kept: a tool call is skipped only when no kept item is a result
 * answering it (a call and its results are skipped or kept together, invariant 7).
 */
export const resolveReplay = (held: ReadonlyArray<NewItem>, next: NewItem | null) => {
  const produced = next === null ? held : [...held, next]
  let replay = held.length
  for (let moved = true; moved;) {
    const keptResults = new Set(produced.slice(replay).flatMap((i) => i.kind === "tool_result" && i.toolCallId !== null ? [i.toolCallId] : []))
    const split = produced.slice(0, replay).findIndex((i) => i.kind === "tool_call" && i.toolCallId !== null && keptResults.has(i.toolCallId))
    moved = split >= 0
    if (moved) replay = split
  }
  return { skipped: produced.slice(0, replay), kept: produced.slice(replay) }
}

/** What a turn's stream left behind when it stopped: what was recorded, what the provider reported. */
export interface TurnOutput {
  /** Items recorded so far by this turn, in order (appended in their own units of work, or by `flush`). */
  readonly recorded: ReadonlyArray<Item>
  /** `item_produced` events received (replays included): more than 0 means the provider read the prompt. */
  readonly arrived: number
  /** The last usage the provider reported in this turn, `null` when it reported none. */
  readonly usage: ContextUsage | null
  /** The tokens the turn was billed (the last report's), `null` when the provider reported none. */
  readonly tokens: ProviderAdapter.TurnTokens | null
  /** `turn_ended` said the turn stopped at an interrupt. */
  readonly interrupted: boolean
  /** The provider said it compacted the native thread on its own during the turn (`native_compacted`). */
  readonly compacted: boolean
  /** Whether the stream delivered `turn_ended`. */
  readonly ended: boolean
  /** The client tool calls `turn_ended` left open (the run waits for their results); `[]` when none. */
  readonly pendingToolCalls: ReadonlyArray<string>
  /** Milliseconds of waits the adapter announced so far (the sum of `retry_scheduled` delays): not working time. */
  readonly retryWaitMillis: number
  /** The ids of the tool calls held open (not yet recorded: they have no result). */
  readonly openCallIds: ReadonlyArray<string>
  /**
   * Runs the turn's stream to its end (or `turn_ended`), recording items as they arrive (the items of the chunk that
   * ends the turn are left to `settle`, in the outcome's unit of work). Fails with the stream's
   * `ProviderError` (after recording what arrived before it) or with the unit of work's `PersistenceError` /
   * `ConcurrentModification` (an item that could not be recorded: the stream is closed).
   */
  readonly consume: (
    stream: Stream.Stream<ProviderAdapter.TurnEvent, ProviderError>
  ) => Effect.Effect<void, ProviderError | PersistenceError | ConcurrentModification>
  /**
   * Records the turn's last arrival when the stream handed it with the turn's end (see `consume`), in the caller's
   * unit of work that writes the turn's outcome, first thing in it: `openCallIds` and `recorded` count it only
   * then. `markRead`: whether to correct a run an interrupt recorded as never read (`ThreadStore.markRunRead`, as
   * every first recorded output does); the caller that read the run in this unit of work knows whether its stop
   * point is `before_provider` and passes `false` otherwise (the statement would change nothing). Returns whether
   * this was the turn's first recorded output (the inline deliveries were settled, the run marked read when asked).
   * Does nothing (`false`) when there is no such arrival or it was recorded already; `flush` and `hold` call it too.
   * `events`: the caller's events of this unit of work, appended by it in one statement after `flush` or `hold`
   * with nothing appended in between; when the arrival leaves nothing held, its `items.appended` event is pushed
   * there (first) instead of appended at once. Any other event it writes (`items.replay_skipped`, a delivery's
   * `delivery.inlined`) precedes it in the log either way.
   */
  readonly settle: (markRead: boolean, events?: Array<NewThreadEvent>) => Effect.Effect<boolean, PersistenceError | ConcurrentModification>
  /** Whether recorded output settled the turn's inline deliveries (`ContextHandoffDelivery.markSettled`) already. */
  readonly inlineSettled: boolean
  /**
   * Appends what is still held, to be run inside the caller's unit of work that writes the turn's outcome: a
   * possible replay is resolved as skipped (`items.replay_skipped`), an open tool unit is closed
   * (`closeOpenToolCalls` with `interrupted`). When no item arrived, it closes the native thread's replay window
   * (the turn that could have replayed is over). Returns every item the turn recorded, in order.
   */
  readonly flush: (interrupted: boolean) => Effect.Effect<ReadonlyArray<Item>, PersistenceError | ConcurrentModification>
  /**
   * Like `flush`, for a turn that ended with client tool calls open: a possible replay is resolved, but the open tool
   * unit is not closed or recorded: it is returned (`held`), for the run's wait to record with the client's results.
   */
  readonly hold: () => Effect.Effect<{ readonly recorded: ReadonlyArray<Item>; readonly held: ReadonlyArray<NewItem> }, PersistenceError | ConcurrentModification>
}

export class TurnStream extends Effect.Service<TurnStream>()("@baton/orchestration/TurnStream", {
  effect: Effect.gen(function*() {
    const uow = yield* UnitOfWork
    const store = yield* ThreadStore
    const itemLog = yield* ItemLog
    const delivery = yield* ContextHandoffDelivery

    /**
     * A fresh output for `run`'s turn on `native`. `inlineDeliveries` (written `pending` before the turn) settle
     * `inline` with the first recorded item: output proves the provider read the turn. `replayWindowClosed`: the
     * caller knows `native`'s replay window closed (`TurnStartPlan.replayWindowClosed`): it is not taken.
     */
    const output = (run: Run, native: NativeThread, inlineDeliveries: ReadonlyArray<HandoffDelivery>, replayWindowClosed = false) => {
      const recorded: Array<Item> = []
      const state = {
        arrived: 0,
        usage: null as ContextUsage | null,
        // The tokens the turn was billed so far (the last report's: model APIs report the turn's running total).
        tokens: null as ProviderAdapter.TurnTokens | null,
        interrupted: false,
        compacted: false,
        ended: false,
        pending: [] as ReadonlyArray<string>,
        retryWaitMillis: 0,
        settled: false,
        // `undecided` until the first item: whether the replay window of `native` was open (`passing` at once when
        // the caller knows it closed: nothing to take).
        replay: (replayWindowClosed ? "passing" : "undecided") as "undecided" | "buffering" | "passing"
      }
      let replayHeld: Array<NewItem> = []
      // Tool calls skipped as a replay, by call id: a later result answering one brings its call back with it.
      const skippedCalls = new Map<string, NewItem>()
      let unit: Array<NewItem> = []

      const skipEvent = (skipped: ReadonlyArray<NewItem>) =>
        skipped.length === 0 ? Effect.void : store.appendEvent({ threadId: run.threadId, type: "items.replay_skipped", payload: {
          runId: run.id,
          count: skipped.length,
          messageIds: [...new Set(skipped.flatMap((i) => i.messageId === null ? [] : [i.messageId]))],
          toolCallIds: [...new Set(skipped.flatMap((i) => i.toolCallId === null ? [] : [i.toolCallId]))]
        } })

      /** Adds kept items to the open unit; returns what can be appended now (the unit, once nothing in it is open). */
      const feed = (items: ReadonlyArray<NewItem>) => {
        const ready: Array<NewItem> = []
        for (const item of items) {
          const call = item.kind === "tool_result" && item.toolCallId !== null ? skippedCalls.get(item.toolCallId) : undefined
          if (call !== undefined) {
            skippedCalls.delete(item.toolCallId!)
            unit.push(call)
          }
          unit.push(item)
          if (!unit.some((_, i) => isOpenCall(unit, i))) {
            ready.push(...unit)
            unit = []
          }
        }
        return ready
      }

      // Nothing to append (the common end of a turn whose items were all recorded already): no effect at all.
      const append = (items: ReadonlyArray<NewItem>): Effect.Effect<ReadonlyArray<Item>, PersistenceError | ConcurrentModification> =>
        items.length === 0 ? Effect.succeed([]) : Effect.gen(function*() {
          const stored = yield* itemLog.append(run.threadId, run.id, items)
          recorded.push(...stored)
          return stored
        })

      // Where `settle`'s caller collects its unit's events (`null`: none, or not now): see `TurnOutput.settle`.
      let sink: Array<NewThreadEvent> | null = null

      /**
       * `append`, or, with a `sink` and nothing left held after these items (so `flush` and `hold` append nothing
       * more), the items written and their `items.appended` event handed to the sink, for the caller to append with
       * its own events in one statement.
       */
      const appendReady = (items: ReadonlyArray<NewItem>) =>
        Effect.gen(function*() {
          if (sink === null || unit.length > 0 || replayHeld.length > 0 || state.replay !== "passing") return yield* append(items)
          const staged = yield* itemLog.stage(run.threadId, run.id, items)
          recorded.push(...staged.items)
          if (staged.event !== null) sink.push(staged.event)
          return staged.items
        })

      /** Whether `item` is already recorded for this native thread (same kind, text and provider id). */
      const isReplayed = (item: NewItem) =>
        Effect.gen(function*() {
          if (!isTool(item) && item.messageId === null) return false
          const known = yield* store.findReplayKeys(
            run.threadId,
            native.id,
            isTool(item) ? [] : [item.messageId!],
            isTool(item) ? [item.toolCallId!] : []
          )
          return isTool(item)
            ? known.has(`${item.kind}\u0000tool:${item.toolCallId}\u0000${item.text}`)
            : known.has(`${item.kind}\u0000msg:${item.messageId}\u0000${item.text}`)
        })

      /**
       * Records what `onItems` found ready (and skipped as a replay), in the caller's unit of work. `markRead`: false
       * only when the caller's unit of work writes the run's stop point itself (`settle`'s caller, the turn's outcome).
       */
      const write = (skipped: ReadonlyArray<NewItem>, ready: ReadonlyArray<NewItem>, markRead: boolean) =>
        Effect.gen(function*() {
          yield* skipEvent(skipped)
          if (!state.settled && ready.length > 0) {
            yield* delivery.markSettled(run.threadId, inlineDeliveries, "inline")
            // Output proves the provider read the turn: a run an interrupt recorded as never read (it read the native
            // thread back just before the turn reached it) is corrected in the same unit of work as the output, so
            // no crash can leave the items recorded and the run owed to this native thread again.
            if (markRead) yield* store.markRunRead(run.id, native.id, yield* DateTime.now)
          }
          yield* appendReady(ready)
        })

      /**
       * The replay decision and the write of one arrival, in the caller's unit of work (the first arrival takes the
       * native thread's replay window; while it is open each item is checked against the record). Returns whether it
       * appended anything.
       */
      const decideAndWrite = (items: ReadonlyArray<NewItem>, markRead: boolean) =>
        Effect.gen(function*() {
          if (state.replay === "undecided") state.replay = (yield* store.takeReplayWindow(native.id)) ? "buffering" : "passing"
          const skipped: Array<NewItem> = []
          const ready: Array<NewItem> = []
          for (const item of items) {
            let kept: ReadonlyArray<NewItem> = [item]
            if (state.replay === "buffering") {
              if (yield* isReplayed(item)) {
                replayHeld.push(item)
                continue
              }
              const resolved = resolveReplay(replayHeld, item)
              replayHeld = []
              state.replay = "passing"
              skipped.push(...resolved.skipped)
              kept = resolved.kept
              for (const s of resolved.skipped) if (s.kind === "tool_call" && s.toolCallId !== null) skippedCalls.set(s.toolCallId, s)
            }
            ready.push(...feed(kept))
          }
          yield* write(skipped, ready, markRead)
          return ready.length > 0
        })

      // The last arrival when the stream handed it together with the turn's end (`turn_ended` in the same chunk): it
      // is recorded by `settle`, in the caller's unit of work that writes the turn's outcome, so a turn whose output
      // comes at once costs one unit of work for its items and its outcome, not two. Nothing is lost that a unit of
      // work of its own would have kept: the outcome follows at once, and a crash between the two left the run
      // `running` with its output unrecorded either way (a crash just before the arrival).
      let lastArrival: ReadonlyArray<NewItem> | null = null

      /** Records `lastArrival` (if any) in the caller's unit of work; see `TurnOutput.settle`. */
      const settle = (markRead: boolean, events?: Array<NewThreadEvent>) =>
        Effect.gen(function*() {
          if (lastArrival === null) return false
          const items = lastArrival
          lastArrival = null
          sink = events ?? null
          const first = !state.settled
          let wrote: boolean
          if (state.replay === "passing") {
            const ready = feed(items)
            wrote = ready.length > 0
            if (wrote) yield* write([], ready, markRead)
          } else {
            wrote = yield* decideAndWrite(items, markRead)
          }
          sink = null
          if (wrote) state.settled = true
          return wrote && first
        }).pipe(Effect.ensuring(Effect.sync(() => {
          sink = null
        })))

      /**
       * Records the items of one arrival (the items of one stream chunk: what the provider delivered together) in one
       * unit of work. While a replay is possible (the first arrival takes the native thread's replay window; while
       * it is open each item is checked against the record) that is done in the same unit of work; afterwards the
       * items go straight to the open tool unit, and an arrival that completes nothing (a tool call waiting for its
       * result) writes nothing. What is ready is appended with one `items.appended` event. `withEnd`: the chunk also
       * ended the turn; the arrival is kept for `settle` (the outcome's unit of work) instead.
       */
      const onItems = (produced: ReadonlyArray<ProviderAdapter.ProducedItem>, withEnd: boolean) =>
        Effect.gen(function*() {
          state.arrived += produced.length
          const items = produced.map(normalizeProduced)
          if (withEnd) {
            lastArrival = items
            return
          }
          // What arrived is recorded whole or not at all: a turn timeout or an interrupt waits for it.
          const recordWhole = Effect.uninterruptible
          if (state.replay === "passing") {
            const ready = feed(items)
            if (ready.length === 0) return
            yield* recordWhole(uow.thread(run.threadId, "TurnStream.itemsProduced")(write([], ready, true)))
            state.settled = true
            return
          }
          const wrote = yield* recordWhole(uow.thread(run.threadId, "TurnStream.itemsProduced")(decideAndWrite(items, true)))
          if (wrote) state.settled = true
        })

      /**
       * Records the adapter's tool-result offload flushes as `context.offloaded` events (one unit of work; the stubs
       * themselves live in the native message list, already stored).
       */
      const recordOffloads = (flushes: ReadonlyArray<ProviderAdapter.OffloadReport>) =>
        Effect.uninterruptible(uow.thread(run.threadId, "TurnStream.contextOffloaded")(Effect.forEach(flushes, (f) =>
          store.appendEvent({
            threadId: run.threadId,
            type: "context.offloaded",
            payload: {
              runId: run.id,
              providerInstance: f.providerInstance,
              nativeThreadId: native.id,
              nativeRef: f.nativeRef,
              units: f.units,
              refs: f.refs,
              entrySeqs: f.entrySeqs,
              tier: f.tier,
              tokensBefore: f.tokensBefore,
              tokensAfter: f.tokensAfter
            }
          }), { discard: true })))
      /**
       * Records the adapter's retries as `run.retry_scheduled` events (one unit of work, before the adapter waits:
       * the stream is pulled again only after this chunk is handled).
       */
      const recordRetries = (retries: ReadonlyArray<RetryScheduled>) =>
        Effect.uninterruptible(uow.thread(run.threadId, "TurnStream.retryScheduled")(Effect.forEach(retries, (r) =>
          store.appendEvent({
            threadId: run.threadId,
            type: "run.retry_scheduled",
            payload: {
              runId: run.id,
              providerInstance: r.providerInstance,
              attempt: r.attempt,
              delayMs: r.delayMillis,
              reason: r.reason,
              httpStatus: r.httpStatus
            }
          }), { discard: true })))
      /** Resolves a replay still undecided at the end of the turn (see `flush`); nothing to do once it passes. */
      const resolvePending = Effect.suspend(() => state.replay === "passing" ? Effect.void : resolveUndecided)
      const resolveUndecided = Effect.gen(function*() {
        if (state.replay === "undecided") yield* store.takeReplayWindow(native.id)
        if (state.replay === "buffering") {
          const resolved = resolveReplay(replayHeld, null)
          replayHeld = []
          state.replay = "passing"
          yield* skipEvent(resolved.skipped)
          unit = [...unit, ...resolved.kept]
        }
      })

      const out: TurnOutput = {
        get recorded() {
          return recorded
        },
        get arrived() {
          return state.arrived
        },
        get usage() {
          return state.usage
        },
        /** The tokens the turn was billed (the last report's), or `null` when the provider reported none. */
        get tokens() {
          return state.tokens
        },
        get interrupted() {
          return state.interrupted
        },
        get compacted() {
          return state.compacted
        },
        get ended() {
          return state.ended
        },
        get pendingToolCalls() {
          return state.pending
        },
        get retryWaitMillis() {
          return state.retryWaitMillis
        },
        get openCallIds() {
          const held = [...replayHeld, ...unit]
          return held.flatMap((i, k) => isOpenCall(held, k) ? [i.toolCallId!] : [])
        },
        consume: (stream) =>
          runChunksUntil(
            stream,
            (e) => e._tag === "turn_ended",
            // A chunk is what the provider delivered together: its items are recorded in one unit of work. Usage and
            // the end of the turn only update the output (they are written with the turn's outcome).
            (chunk): Effect.Effect<void, PersistenceError | ConcurrentModification> => {
              const produced: Array<ProviderAdapter.ProducedItem> = []
              const offloads: Array<ProviderAdapter.OffloadReport> = []
              const retries: Array<RetryScheduled> = []
              for (const event of chunk) {
                switch (event._tag) {
                  case "item_produced":
                    produced.push(event.item)
                    break
                  case "usage_reported":
                    state.usage = event.usage
                    if (event.tokens !== undefined) state.tokens = event.tokens
                    break
                  case "turn_ended":
                    state.ended = true
                    state.interrupted = event.interrupted
                    state.pending = event.pendingToolCalls ?? []
                    break
                  case "context_offloaded":
                    offloads.push(event.flush)
                    break
                  case "native_compacted":
                    state.compacted = true
                    break
                  case "retry_scheduled":
                    // Counted at once: the turn timeout's deadline moves before the adapter starts waiting.
                    state.retryWaitMillis += event.delayMillis
                    retries.push(event)
                    break
                }
              }
              const recorded = produced.length === 0 ? Effect.void : onItems(produced, state.ended)
              const withOffloads = offloads.length === 0 ? recorded : Effect.zipRight(recordOffloads(offloads), recorded)
              return retries.length === 0 ? withOffloads : Effect.zipRight(recordRetries(retries), withOffloads)
            }
          ),
        settle,
        get inlineSettled() {
          return state.settled
        },
        flush: (interrupted) =>
          // Nothing arrived unrecorded, nothing held, no replay to resolve (the common end of a turn): no effect.
          lastArrival === null && unit.length === 0 && state.replay === "passing" ? Effect.succeed(recorded) : Effect.gen(function*() {
            yield* settle(true)
            yield* resolvePending
            const rest = closeOpenToolCalls(unit, interrupted)
            unit = []
            yield* append(rest)
            return recorded
          }),
        hold: () =>
          Effect.gen(function*() {
            yield* settle(true)
            yield* resolvePending
            // What the replay resolution kept before the first open call is complete: recorded now.
            const firstOpen = unit.findIndex((_, i) => isOpenCall(unit, i))
            const complete = firstOpen < 0 ? unit : unit.slice(0, firstOpen)
            const held = firstOpen < 0 ? [] : unit.slice(firstOpen)
            unit = []
            yield* append(complete)
            return { recorded, held }
          })
      }
      return out
    }

    return { output }
  })
}) {}
