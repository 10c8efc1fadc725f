/**
 * Replay: imports a real transcript and drives each recorded user turn through the orchestrator as a run, with the
 * scripted providers playing back the recorded assistant and tool items. Provider switches, interruptions before
 * the provider starts and `/compact` are interleaved on a fixed schedule and a seeded random draw, so the same
 * options give the same run, byte for byte. After each thread it checks docs/design.md's invariants.
 */
import { Commands, type CommandId, type ProviderInstance, type ThreadId, TranscriptError } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { Database, ThreadStore } from "@baton/persistence"
import { IdGenerator, InvariantChecks, ProviderTruthChecks, OrchestratorConfig, OrchestratorLayer, ThreadService } from "@baton/orchestration"
import { ProviderRegistry, type ProviderSpec, ScriptedProvider, ScriptedSummariser } from "@baton/providers"
import { type Transcript, TranscriptImporter } from "@baton/transcripts"
import { Effect, Layer, Schema } from "effect"
import { randomInt, randomUUID } from "node:crypto"

export interface ReplayOptions {
  readonly file: string
  readonly providers: ReadonlyArray<ProviderSpec.ProviderSpec>
  /** Switch to the next provider every N runs (0 = never). */
  readonly switchEvery: number
  /** Probability in [0, 1] that a run is interrupted before the provider starts. */
  readonly interruptRate: number
  /** `/compact` every N runs (0 = never). */
  readonly compactEvery: number
  readonly seed: number
  /** SQLite file (`:memory:` allowed). */
  readonly db: string
  /** A Postgres URL: replay there instead of the SQLite `db`. */
  readonly databaseUrl?: string | undefined
  readonly skipInvalid: boolean
}

/** One replayed run, as printed per line. */
export interface RunLine {
  readonly thread: number
  readonly run: number
  readonly provider: string
  readonly generation: number | null
  readonly status: string
  /** The native thread's usage at turn start (what the budget was computed from), `null` if the run never started. */
  readonly usedAtStart: number | null
  /** The effective window at turn start (min of the known windows). */
  readonly window: number
  /** The native thread's usage after the run, when known. */
  readonly usedAfter: number | null
  readonly budget: number | null
  /** The provider's tokenizer calibration at turn start (provider tokens per Baton token); 1 when none. */
  readonly ratio: number
  readonly mode: string
  readonly deliveredItems: number
  readonly deliveredTokens: number
  readonly deferredItems: number
  readonly deferredTokens: number
  readonly omittedItems: number
  /** Of the omitted items, those sent as tool-unit stubs. */
  readonly stubbedItems: number
  /** Runs the delivered history was owed, and how many it represents (verbatim or as stubs); 0 when none delivered. */
  readonly owedRuns: number
  readonly representedRuns: number
  /** Printed instead of the turn-start figures when set: how a run cut short by a signal ended. */
  readonly stopped: string | null
  /** Why a run that did not complete ended (`Run.failureReason`), `null` otherwise. */
  readonly failureReason: string | null
}

export interface ReplaySummary {
  readonly file: string
  readonly format: string
  readonly threads: number
  /** The ids of the threads the replay created, for `baton thread show` and `baton handoffs`. */
  readonly threadIds: ReadonlyArray<string>
  readonly runs: number
  readonly completedRuns: number
  /** Runs that failed for a reason other than the fault plan: must be 0. */
  readonly failedRuns: number
  /** Runs failed by the fault plan (provider faults), counted apart. */
  readonly faultFailedRuns: number
  /**
   * Runs failed as `overflow`: the prompt alone is larger than the provider's window, so it was never sent (a clear
   * failure that names what to do, not a wedge). Counted apart from `faultFailedRuns`: the replay's providers have
   * no fault plan, and a prompt too large for the window is the transcript's size against the window, not a fault.
   */
  readonly overflowFailedRuns: number
  readonly interruptedRuns: number
  readonly switches: number
  readonly compactions: number
  readonly items: number
  readonly skippedRecords: number
  readonly handoffs: { readonly created: number; readonly deferred: number; readonly delivered: number; readonly superseded: number; readonly stillOwed: number }
  readonly deliveries: { readonly injected: number; readonly inline: number }
  readonly promptsSent: number
  readonly promptsUnchanged: number
  /**
   * The providers' side (their own truth, see ScriptedProvider): requests they rejected as over their window
   * (`rejected`), turns whose output stopped at the window (`outputStopped`), and runs after which Baton recorded a
   * usage above the provider's window (`usageAboveWindow`, against `--providers`' WINDOW, not an auto-compaction
   * threshold: must be 0).
   */
  readonly overflows: { readonly rejected: number; readonly outputStopped: number; readonly usageAboveWindow: number }
  readonly invariantViolations: ReadonlyArray<string>
  readonly elapsedMs: number
}

/** FNV-1a of a provider instance's name (32 bits): the seed its tokenizer ratio is drawn from. */
const nameSeed = (name: string) => {
  let h = 0x811c9dc5
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193)
  return h >>> 0
}

/**
 * A replay provider's truth: its tokenizer ratio (1.01-1.20 provider tokens per Baton token: the field saw about
 * 1.15), drawn from the instance's name, and its system-prompt overhead (500-3,000 tokens, capped at 5% of the window
 * by the caller), drawn from `random` (the replay's seed).
 *
 * The ratio is the instance's, not the seed's: Baton learns it per instance in the database (`provider_calibrations`),
 * and a real provider's tokenizer is the same in every process. Drawn from the seed, two replays with different seeds
 * on one database (one after the other on the default data directory, or two processes at once) played two different
 * tokenizers under one instance name, and the second replay's oracle judged the calibration learned from the first
 * against its own ratio: "the calibration of codex is 1.163 ... more than 10% from the provider's true ratio 1.030",
 * exit 1, for a replay Baton got right.
 */
export const providerTruth = (instance: string, random: () => number) => ({
  tokenScale: 1.01 + Math.round(rng(nameSeed(instance) ^ 0x5eed)() * 19) / 100,
  requestOverhead: 500 + Math.round(random() * 2_500)
})

/**
 * The id namespace of one replay: 9 random decimal digits, so that replays sharing a database (even at the same
 * moment) never mint the same id. Digits, not hex: o200k splits digit runs into groups of three, one token each, so
 * every id of a replay costs the same number of tokens whatever its digits, and the rendered history (which carries
 * item ids) is exactly as long on every run of the same seed. With UUIDs, the providers' enforced windows made the
 * outcome of a turn near the window depend on the random ids.
 */
const replayNamespace = () => String(randomInt(0, 1_000_000_000)).padStart(9, "0")

/** A small seeded PRNG (mulberry32): same seed, same sequence, on every platform. */
export const rng = (seed: number) => {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6D2B79F5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** The turn-start fields of a run line for a run that ended before a turn-start report was returned. */
const notStarted = {
  generation: null,
  usedAtStart: null,
  window: 0,
  usedAfter: null,
  budget: null,
  ratio: 1,
  mode: "none",
  deliveredItems: 0,
  deliveredTokens: 0,
  deferredItems: 0,
  deferredTokens: 0,
  omittedItems: 0,
  stubbedItems: 0,
  owedRuns: 0,
  representedRuns: 0,
  stopped: null,
  failureReason: null
} as const

/** The prompt a turn is replayed with: its recorded text, or " " for an empty one (a prompt cannot be empty). */
export const promptOf = (turn: Transcript.ImportedTurn): string => turn.userText.length > 0 ? turn.userText : " "

// A plain predicate: as a type guard it would narrow the text to `never` where it fails (the type is `string`).
const isPromptText: (text: string) => boolean = Schema.is(Commands.PromptText)

/**
 * Why `prompt` cannot be sent as a message (`Commands.PromptText`), or `null`: longer than `Commands.maxPromptChars`
 * characters, or not storable text (a NUL character, a lone surrogate: `Commands.storableText`).
 */
const unsendable = (prompt: string): string | null => {
  if (isPromptText(prompt)) return null
  if (prompt.length > Commands.maxPromptChars) {
    return `the prompt is ${prompt.length} characters, more than the ${Commands.maxPromptChars} Baton takes in one message`
  }
  const storable = Commands.storableText("the prompt")(prompt)
  return storable === true ? "the prompt is not a message Baton can send" : storable
}

/**
 * The tool results of `thread` that answer no tool call of their own turn, with why: a turn is replayed as one run
 * (which may be interrupted before the provider starts, so none of its items are recorded), and a result without its
 * call in the same run is a tool unit split in Baton's record. Found by a user: a transcript with a result for a call
 * no record issued, or for a call of an earlier turn, replayed to "invariants: 1 violation(s)" (tool-pairing) and
 * exit 1, as if Baton had split the unit. Real transcripts have none (the ten samples: 0).
 */
const unpairedResults = (thread: Transcript.ImportedThread) => {
  const issuedIn = new Map<string, number>()
  const found: Array<{ readonly turn: number; readonly item: Transcript.ImportedItem; readonly reason: string }> = []
  thread.turns.forEach((turn, index) => {
    const own = new Set<string>()
    for (const item of turn.items) {
      if (item.toolCallId === null) continue
      if (item.kind === "tool_call") {
        own.add(item.toolCallId)
        issuedIn.set(item.toolCallId, turn.sourceLine)
      } else if (item.kind === "tool_result" && !own.has(item.toolCallId)) {
        const earlier = issuedIn.get(item.toolCallId)
        found.push({
          turn: index,
          item,
          reason: `this turn holds a tool result for call ${item.toolCallId}, ` +
            (earlier === undefined ? "which no tool call in the file issued" : `which the turn at line ${earlier} issued`) +
            ": a turn is replayed as one run, so its tool calls and their results must be in it"
        })
      }
    }
  })
  return found
}

/**
 * Imports `file` only (no database touched). Fails with `TranscriptError`: the importer's; for a recorded prompt
 * Baton would refuse to send (`unsendable`; with or without `skipInvalid`, the record is valid transcript) its line
 * and why: found by a user, such a file created its thread, then died on a schema dump (`{ readonly _tag:
 * "SendMessage"; ... }`) thrown by `SendMessage.make`, exit 2 with the thread left in the database; and for a tool
 * result that answers no call of its own turn (`unpairedResults`) the turn's line, unless `skipInvalid`, which leaves
 * such results out and lists them among the skipped records (at their turn's line).
 */
export const load = (options: Pick<ReplayOptions, "file" | "skipInvalid">) =>
  Effect.flatMap(TranscriptImporter.importFile(options.file, { skipInvalid: options.skipInvalid }), (imported) => {
    for (const thread of imported.threads) {
      for (const turn of thread.turns) {
        const reason = unsendable(promptOf(turn))
        if (reason !== null) {
          return Effect.fail(new TranscriptError({
            file: options.file,
            line: turn.sourceLine,
            reason: `${reason}: Baton refuses such a prompt, so this transcript cannot be replayed as recorded`
          }))
        }
      }
    }
    const skipped: Array<Transcript.SkippedRecord> = [...imported.skipped]
    const threads: Array<Transcript.ImportedThread> = []
    for (const thread of imported.threads) {
      const unpaired = unpairedResults(thread)
      const first = unpaired[0]
      if (first === undefined) {
        threads.push(thread)
        continue
      }
      if (!options.skipInvalid) {
        return Effect.fail(new TranscriptError({ file: options.file, line: thread.turns[first.turn]!.sourceLine, reason: first.reason }))
      }
      const left = new Set(unpaired.map((u) => u.item))
      for (const u of unpaired) skipped.push({ line: thread.turns[u.turn]!.sourceLine, field: undefined, reason: u.reason })
      threads.push({ ...thread, turns: thread.turns.map((turn) => ({ ...turn, items: turn.items.filter((i) => !left.has(i)) })) })
    }
    return Effect.succeed<Transcript.ImportResult>({ threads, skipped })
  })

/**
 * Replays an imported transcript on a fresh database at `options.db`. `onRun` is called after each run, `onThread`
 * with each thread's id once it is created (before its first run). Requires nothing; assembles its own Layer graph (SQLite, scripted providers, sequential ids).
 */
export const replay = (
  imported: Transcript.ImportResult,
  options: ReplayOptions,
  onRun: (line: RunLine) => Effect.Effect<void> = () => Effect.void,
  onThread: (threadId: ThreadId) => Effect.Effect<void> = () => Effect.void
) =>
  Effect.gen(function*() {
    const started = Date.now()
    const counter = TokenCounter.make()
    const script = ScriptedProvider.makeScript()
    // Each provider's own truth (see ScriptedProvider): a tokenizer that differs from Baton's (the instance's own) and
    // a system prompt Baton never sees, drawn from their own seeded stream so that the run's random choices stay as
    // they were.
    const truth = rng(options.seed ^ 0x5eed)
    const adapters = options.providers.map((spec) => {
      const own = providerTruth(spec.name, truth)
      return ScriptedProvider.make({
        instance: spec.name as ProviderInstance,
        contextWindow: spec.window,
        autoCompactThreshold: spec.autoCompactThreshold,
        injectHistory: spec.inject,
        tokenScale: own.tokenScale,
        requestOverhead: Math.round(Math.min(spec.window * 0.05, own.requestOverhead))
      }, script, counter)
    })
    const layer = OrchestratorLayer.layer.pipe(
      Layer.provideMerge(options.databaseUrl === undefined ? Database.layerSqlite(options.db) : Database.layerPg({ url: options.databaseUrl })),
      Layer.provide(ProviderRegistry.layer(adapters)),
      Layer.provide(ScriptedSummariser.layer(ScriptedSummariser.make(counter))),
      Layer.provide(Layer.succeed(TokenCounter.TokenCounter, counter)),
      Layer.provide(Layer.sync(IdGenerator.IdGenerator, () => IdGenerator.makeSequential(replayNamespace()))),
      Layer.provide(OrchestratorConfig.layer())
    )
    const random = rng(options.seed)
    let commandNo = 0
    // Command ids are unique per replay: a database reused across replays must not answer from old receipts.
    const replayId = randomUUID()
    const cid = () => `cmd_${replayId}_${++commandNo}` as CommandId

    return yield* Effect.gen(function*() {
      const service = yield* ThreadService.ThreadService
      const store = yield* ThreadStore
      // A write command reconciles what a killed process left unfinished on this database (runs of gone drivers).
      yield* service.recover()
      let runs = 0, completed = 0, failed = 0, faultFailed = 0, overflowFailed = 0, interrupted = 0, switches = 0, compactions = 0, usageAboveWindow = 0
      let items = 0
      const violations: Array<string> = []
      const threadIds: Array<ThreadId> = []

      /**
       * Ends the thread's run in flight, if any, as the user's interrupt command would (`interrupted`; the provider
       * is asked to stop and its native thread read back), and reports it as a run line. Called when the replay's
       * fiber is interrupted: the orchestrator does not record a run whose fiber is interrupted mid-turn, which
       * would stay `starting`/`running` until a restart recovery. Never fails: a failure to record is logged.
       */
      const endRunInFlight = (threadIndex: number, threadId: ThreadId) =>
        Effect.gen(function*() {
          const active = yield* store.findActiveRun(threadId)
          if (active._tag === "None") return
          const ended = yield* service.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: active.value.id }), "shutdown")
          const providerThread = yield* store.getProviderThread(ended.providerThreadId)
          yield* onRun({
            ...notStarted,
            thread: threadIndex + 1,
            run: ended.seq,
            provider: providerThread._tag === "Some" ? providerThread.value.providerInstance : "?",
            status: ended.status,
            stopped: ended.stopPoint === "after_provider"
              ? "stopped by a signal after the provider read its prompt"
              : "stopped by a signal before the provider read its prompt: it is owed to the next turn"
          })
        }).pipe(Effect.catchAllCause((cause) => Effect.logError(`could not record the interrupted run of thread ${threadId}`, cause)))

      for (const [threadIndex, thread] of imported.threads.entries()) {
        let providerIndex = 0
        const threadId = yield* service.createThread(Commands.CreateThread.make({
          commandId: cid(),
          title: thread.title,
          providerInstance: options.providers[0]!.name as ProviderInstance
        }))
        threadIds.push(threadId)
        yield* onThread(threadId)
        let appended = 0
        const producedBefore = adapters.reduce((n, a) => n + a.producedItems(), 0)
        // A signal interrupts this fiber between any two steps: the run in flight is ended `interrupted` (and shown)
        // before the database is closed, so no run of this replay is left queued, starting or running.
        yield* Effect.gen(function*() {
          for (const [turnIndex, turn] of thread.turns.entries()) {
            if (turnIndex > 0 && options.switchEvery > 0 && turnIndex % options.switchEvery === 0 && options.providers.length > 1) {
              providerIndex = (providerIndex + 1) % options.providers.length
              yield* service.switchProvider(Commands.SwitchProvider.make({
                commandId: cid(),
                threadId,
                providerInstance: options.providers[providerIndex]!.name as ProviderInstance
              }))
              switches++
            }
            if (turnIndex > 0 && options.compactEvery > 0 && turnIndex % options.compactEvery === 0) {
              yield* service.compact(Commands.CompactThread.make({ commandId: cid(), threadId }))
              compactions++
            }
            const prompt = promptOf(turn)
            const interruptNow = random() < options.interruptRate
            script.clear()
            // A preamble (e.g. a summary the transcript opens with) is recorded as the first run's output so that
            // nothing from the source is dropped.
            const produced = turnIndex === 0 ? [...thread.preamble, ...turn.items] : turn.items
            script.enqueue({ items: produced })
            runs++
            appended++
            if (interruptNow) {
              const run = yield* service.enqueueMessage(Commands.SendMessage.make({ commandId: cid(), threadId, text: prompt }))
              const done = yield* service.interrupt(Commands.InterruptRun.make({ commandId: cid(), threadId, runId: run.id }))
              interrupted++
              yield* onRun({
                ...notStarted,
                thread: threadIndex + 1,
                run: run.seq,
                provider: options.providers[providerIndex]!.name,
                status: done.status
              })
              continue
            }
            const result = yield* service.sendMessage(Commands.SendMessage.make({ commandId: cid(), threadId, text: prompt }))
            // Against the provider's own window (`--providers NAME:WINDOW`): `result.window` is the budget's, which an
            // auto-compaction threshold narrows, and a native thread between its threshold and its window is no
            // overflow (found by a user: `codex:1500:1000` counted 10 runs "recorded above the window" in a replay
            // whose providers never held more than their windows).
            const providerWindow = options.providers.find((p) => p.name === result.providerInstance)?.window ?? result.window
            if (result.usedTokens !== null && providerWindow > 0 && result.usedTokens > providerWindow) usageAboveWindow++
            if (result.status === "completed") completed++
            else if (result.status === "interrupted") interrupted++
            else if (result.failureCode === "overflow") overflowFailed++
            else if (InvariantChecks.isFaultCode(result.failureCode)) faultFailed++
            else failed++
            const report = result.turnStart
            yield* onRun({
              thread: threadIndex + 1,
              run: result.runSeq,
              provider: result.providerInstance,
              generation: result.nativeGeneration,
              status: result.status,
              usedAtStart: report?.budget.used ?? null,
              window: report?.budget.window ?? result.window,
              usedAfter: result.usedTokens,
              budget: report?.budget.budget ?? null,
              ratio: report?.calibrationRatio ?? 1,
              mode: report?.mode ?? "none",
              deliveredItems: report?.deliveredItems ?? 0,
              deliveredTokens: report?.deliveredTokens ?? 0,
              deferredItems: report?.deferredItems ?? 0,
              deferredTokens: report?.deferredTokens ?? 0,
              omittedItems: report?.omittedItems ?? 0,
              stubbedItems: report?.stubbedItems ?? 0,
              owedRuns: report?.owedRuns ?? 0,
              representedRuns: report?.representedRuns ?? 0,
              stopped: null,
              failureReason: result.status === "completed" ? null : result.failureReason
            })
          }
        }).pipe(Effect.onInterrupt(() => endRunInFlight(threadIndex, threadId)))
        const observed: InvariantChecks.Observed = {
          turns: adapters.flatMap((a) => a.received.flatMap((r) => r.type === "turn" ? [r] : [])),
          injections: adapters.flatMap((a) => a.received.flatMap((r) => r.type === "inject" ? [r] : []))
        }
        // Baton adds one visible `handoff_marker` item per first deferral and one error `tool_result` per tool call a
        // turn left without a result (a transcript's aborted turn); everything else came from the transcript.
        const synthetic = new Set([ThreadService.unansweredToolResultText("dangling"), ThreadService.unansweredToolResultText("interrupted")])
        // What the providers produced (their own count: a turn stopped at the window produced less than its script).
        appended += adapters.reduce((n, a) => n + a.producedItems(), 0) - producedBefore
        const markers = (yield* store.listItems(threadId)).filter((i) =>
          i.kind === "handoff_marker" || (i.kind === "tool_result" && i.isError && synthetic.has(i.text))
        ).length
        for (const v of yield* InvariantChecks.check(threadId, { expectedItemCount: appended + markers, observed })) {
          violations.push(`thread ${threadIndex + 1}: ${v}`)
        }
        for (const v of yield* ProviderTruthChecks.check(threadId, adapters.map((a) => a.truth))) {
          violations.push(`thread ${threadIndex + 1}: ${v}`)
        }
        for (const v of yield* ProviderTruthChecks.checkOffloadFreesLane(threadId, adapters.map((a) => a.received))) {
          violations.push(`thread ${threadIndex + 1}: ${v}`)
        }
        items += appended + markers
      }
      // The calibration is the provider instance's, learned across the threads: judged once, after the last.
      violations.push(...(yield* ProviderTruthChecks.checkCalibration(adapters.map((a) => ({ instance: a.instance, trueRatio: a.tokenScale })))))

      let created = 0, deferred = 0, delivered = 0, superseded = 0, stillOwed = 0, injected = 0, inline = 0
      for (const threadId of threadIds) {
        const handoffs = yield* store.listHandoffs(threadId)
        const deliveries = yield* store.listDeliveriesOfThread(threadId)
        created += handoffs.length
        for (const h of handoffs) {
          const ds = deliveries.filter((d) => d.handoffId === h.id)
          if (ds.some((d) => d.deferCount > 0)) deferred++
          if (ds.some((d) => d.status === "injected" || d.status === "inline")) delivered++
          else if (!h.open) superseded++
          if (h.open) stillOwed++
        }
        injected += deliveries.filter((d) => d.status === "injected").length
        inline += deliveries.filter((d) => d.status === "inline").length
      }
      const turnsReceived = adapters.flatMap((a) => a.received.flatMap((r) => r.type === "turn" ? [r] : []))
      const prompts = new Map<string, string>()
      for (const threadId of threadIds) for (const r of yield* store.listRuns(threadId)) prompts.set(r.id, r.prompt)
      return {
        file: options.file,
        format: imported.threads[0]?.format ?? "unknown",
        threads: imported.threads.length,
        threadIds,
        runs,
        completedRuns: completed,
        failedRuns: failed,
        faultFailedRuns: faultFailed,
        overflowFailedRuns: overflowFailed,
        interruptedRuns: interrupted,
        switches,
        compactions,
        items,
        skippedRecords: imported.skipped.length,
        handoffs: { created, deferred, delivered, superseded, stillOwed },
        deliveries: { injected, inline },
        promptsSent: turnsReceived.length,
        promptsUnchanged: turnsReceived.filter((t) => prompts.get(t.runId) === t.prompt).length,
        overflows: {
          rejected: adapters.reduce((n, a) => n + a.truth.filter((t) => !t.accepted && t.operation !== "output").length, 0),
          outputStopped: adapters.reduce((n, a) => n + a.truth.filter((t) => t.operation === "output" && !t.accepted).length, 0),
          usageAboveWindow
        },
        invariantViolations: violations,
        elapsedMs: Date.now() - started
      } satisfies ReplaySummary
    }).pipe(Effect.provide(layer))
  })
