/**
 * GatewaySwitched: serves one request whose model routes to an instance of another protocol (a provider switch, issue
 * 14 item 4; docs/gateway.md "Routing and switching"), with the direction's conversion (`GatewaySwitchWire`):
 * `/v1/messages` to an `openai-chat` instance (`GatewaySwitch`) or an `openai-responses` one (`GatewaySwitchResponses`),
 * `/v1/chat/completions` to an `anthropic-messages` instance (`GatewaySwitchAnthropic`) or an `openai-responses` one,
 * `/v1/responses` to an `anthropic-messages` instance (`GatewaySwitchResponsesAnthropic`) or an `openai-chat` one (the
 * two between the OpenAI protocols: `GatewaySwitchOpenAi`).
 *
 * Unlike a same-protocol request (forwarded first, recorded alongside), the request is recorded first (its
 * conversation, run and new messages, as the agent sent them, on the routed instance: the run's `providerInstance`
 * is the switch's mark), because the deferral pointer names the left-out messages' items in the thread. Then the
 * converted, fitted request goes to the upstream (`{baseUrl}/chat/completions`, `{baseUrl}/responses` with the
 * instance's key as `Authorization: Bearer`; `{baseUrl}/v1/messages` with it as `x-api-key` and `anthropic-version`),
 * none of the agent's headers (they are its protocol's). The answer comes back in the agent's protocol (a whole
 * answer, or SSE events as the upstream's arrive) and is recorded as the agent's reply (the agent sends it back as
 * such), with the usage and the instance's prices. `thread_read` is offered beside the agent's tools; when the
 * upstream's answer calls only it, the gateway answers from the thread (an answer that would take the request over the
 * fit's limit refused to the model, never sent) and continues with the upstream, and the agent gets one answer (whole:
 * the last answer after what the hidden rounds said; streamed: the continuation's joins it). When it calls
 * `thread_read` beside the agent's own calls, the
 * agent gets the answer without the read, the gateway answers the read and records the expansion in the agent's
 * protocol (`besideRound`; after a hidden round in the same streamed answer, the hidden rounds before it too), and every
 * request goes out with the conversation's expansions in place of the messages the agent received
 * (`GatewayOffload.expand`), as on the same-protocol paths. An overflow Baton cannot fit never goes out: the agent gets
 * its own overflow error (Anthropic's "prompt is too long" 400, OpenAI's `context_length_exceeded` 400: its compaction
 * runs) and the run fails `overflow`. Baton's own errors (an unreachable upstream, a broken stream) are in the agent's
 * shape too.
 *
 * The fit's third step: when it leaves messages out, the thread's `/offload` summaries are offered to it
 * (`summaryBlock`, `coveredBy`); none is written on the request path. Only summaries whose covered items are all the
 * current conversation's (`firstForeignSeq`): after the agent rewound, edited or compacted its history, one standing
 * for a dropped branch's items is ignored (it stays in the thread). After the answer is recorded, when the history
 * left out holds at least `summariseFromTokens` no summary covers, and no dropped item lies at or before the newest
 * item left out, the thread is offloaded through that item (`ThreadOffload`, in the gateway's scope, its commit
 * letting the agent's appends through), for the next switched request.
 */
import type { Item, Offload, ProviderInstance, ThreadId } from "@baton/contracts"
import { Render } from "@baton/context"
import { GatewayThreads, ThreadOffload, ThreadRead } from "@baton/orchestration"
import type { ThreadStore } from "@baton/persistence"
import { type HttpClient, type HttpClientError, HttpClientRequest, HttpServerResponse } from "@effect/platform"
import { Effect, Option, type Scope, Stream } from "effect"
import * as GatewayDialect from "./GatewayDialect.js"
import { fitAnswers, type History, isRecord, parseJson, upstreamFailureReason } from "./GatewayDialect.js"
import * as GatewayMedia from "./GatewayMedia.js"
import * as GatewayOffload from "./GatewayOffload.js"
import * as GatewaySwitch from "./GatewaySwitch.js"
import * as GatewaySwitchWire from "./GatewaySwitchWire.js"
import * as GatewayThoughtSignatures from "./GatewayThoughtSignatures.js"
import type * as ServerConfig from "./ServerConfig.js"

/** What serving a switched request needs from the gateway. */
export interface Input {
  readonly threads: GatewayThreads.GatewayThreads
  readonly reader: ThreadRead.ThreadRead
  readonly store: ThreadStore
  readonly http: HttpClient.HttpClient
  readonly count: (text: string) => number
  readonly target: ServerConfig.ModelInstanceSetting
  readonly body: Record<string, unknown>
  readonly history: History
  readonly model: string
  readonly agent: string
  /** The target's protocol (default: Chat Completions). */
  readonly wire?: GatewaySwitchWire.SwitchWire | undefined
  /** Writes the summary the fit's third step uses next time (see `summariseLater`), off the request path. */
  readonly offloader: ThreadOffload.ThreadOffload
  /** Where that summary's fiber runs (the gateway's scope: it outlives the request, not the server). */
  readonly scope: Scope.Scope
  /**
   * The agent's protocol's offload (`GatewayOffload.anthropic`, `GatewayChatOffload.offload`,
   * `GatewayResponsesOffload.offload`): with it, `thread_read` calls beside the agent's own calls are answered and
   * recorded as an expansion, and the conversation's expansions go out in place of the messages the agent received
   * (see `serve`). Absent: such calls are dropped unanswered.
   */
  readonly offload?: GatewayOffload.Offload | undefined
  /** Whether the shutdown's deadline has come (`GatewayDialect.stoppedOf`): an answer stopped then was cut by it. */
  readonly stopped: Effect.Effect<boolean>
  /** Where `serve` leaves what records the agent's hang-up once the request is recorded (`GatewayDialect.HangUp`). */
  readonly onHangUp: GatewayDialect.HangUp
  /**
   * The gateway's memo of answered calls' `extra_content` (Gemini's thought signatures), given back on the calls the
   * agent sends again (`GatewayThoughtSignatures`); absent: none remembered (a Gemini model still gets the bypass).
   */
  readonly signatures?: GatewayThoughtSignatures.Memo | undefined
}

/** The most `thread_read` rounds the gateway answers for one switched request (then the answer goes to the agent). */
const maxReadHops = 8

/**
 * What the agent gets when the upstream still calls only `thread_read` after the last round (`maxReadHops`): the
 * calls are left out, and an answer with nothing else would be empty (an agent takes it as the model's final answer),
 * so Baton's own text says why the answer stopped and what to do (`GatewayOffload.readLimitNote`).
 */
export const readLimitNote = GatewayOffload.readLimitNote

/**
 * Whether a hop's assistant output (`GatewaySwitchWire.Translator.assistant`: a Chat message, Responses items or an
 * Anthropic message) has text: a streamed hop's text reaches the agent as it comes, whatever its calls.
 */
const saidIn = (assistant: ReadonlyArray<unknown>): boolean =>
  assistant.some((m) =>
    isRecord(m) && ((typeof m.content === "string" && m.content !== "") ||
      (Array.isArray(m.content) && m.content.some((c) => isRecord(c) && typeof c.text === "string" && c.text !== "")))
  )

/**
 * Whether a reply's recorded tokens must say what its last request carried (`carried`, `GatewayThreads.Reply`'s
 * `carriedTokens`): after hidden rounds (`hops` over 1: the tokens are every request's), or when the billed input is
 * not what the request carried (an Anthropic upstream's compaction iterations: `GatewaySwitchAnthropic.billedOf`).
 */
const carriedNeeded = (tokens: GatewayThreads.Reply["tokens"], carried: number | null, hops: number): carried is number =>
  carried !== null && (hops > 1 || (tokens !== null && tokens.inputTokens + tokens.cacheWriteTokens + tokens.cacheReadTokens !== carried))

/** An error answer (its body in the agent's shape). */
const errorAnswer = (status: number, body: unknown, headers: Record<string, string> = {}) => HttpServerResponse.unsafeJson(body, { status, headers })

/**
 * The upstream's retry advice on an error answer (`retry-after`, in seconds or an HTTP date, and `retry-after-ms`),
 * passed on with the converted error: both SDKs of the agents (Anthropic's and OpenAI's) wait as long as it says
 * before retrying a 429 or a 5xx, and back off by their own schedule without it.
 */
const retryAdvice = (headers: Readonly<Record<string, string | undefined>>): Record<string, string> => {
  const advice: Record<string, string> = {}
  for (const name of ["retry-after", "retry-after-ms"]) {
    const value = headers[name]
    if (value !== undefined) advice[name] = value
  }
  return advice
}

/**
 * An item's text as the conversation's content: a tool result's without the `<system-reminder>` elements that end it
 * (Claude Code appends them in one rendering of its history and sends them as `system` messages in the other; the
 * re-render rule, `GatewayThreads.conversationContent`, leaves them out too).
 */
const contentText = (item: { readonly kind: string; readonly text: string }) =>
  item.kind === "tool_result" ? GatewayThreads.withoutTrailingReminders(item.text) : item.text

/**
 * The item fields a message's items are matched on in the thread: kind, tool call id and text (a tool result's text
 * as the conversation's content, so a request in Claude Code's other rendering finds the items it stored).
 */
const sameItem = (a: { readonly kind: string; readonly text: string; readonly toolCallId: string | null }, b: Item) =>
  a.kind === b.kind && (a.toolCallId ?? null) === (b.toolCallId ?? null) && (a.text === b.text || contentText(a) === contentText(b))

/**
 * Whether a thread item is the agent's context rather than the conversation's content, as the re-render rule has it
 * (`GatewayThreads.conversationContent`): thinking (`reasoning`, and redacted thinking's `[redacted_thinking]` item),
 * an item of a `system` message (its message id `system@…`), a user text that is only `<system-reminder>` elements.
 * A request may not carry these as they were stored (Claude Code leaves earlier thinking out, moves its reminders),
 * and they are the same conversation all the same.
 */
const isContext = (item: Item) =>
  item.kind === "reasoning" ||
  (item.kind === "assistant_message" && item.text === "[redacted_thinking]") ||
  (item.messageId ?? "").startsWith("system@") ||
  (item.kind === "user_message" && GatewayThreads.isReminderText(item.text))

/**
 * The thread items of each of the agent's messages, found among the thread's `items` in order (the conversation's
 * record holds each once): for each message, its items' seqs, `null` for one not found.
 */
export const messageSeqs = (
  items: ReadonlyArray<Item>,
  messages: ReadonlyArray<unknown>,
  wire: GatewayThreads.Wire = GatewayThreads.anthropicMessages
): ReadonlyArray<ReadonlyArray<number | null>> => {
  const names = wire.toolNamesOf(messages)
  let at = 0
  return messages.map((m) =>
    wire.itemsOf(m, "left-out", names).map((w) => {
      const found = items.findIndex((item, i) => i >= at && sameItem(w, item))
      if (found < 0) return null
      at = found + 1
      return items[found]!.seq
    })
  )
}

/**
 * The deferral pointer for the agent's first `n` messages (`seqs`: `messageSeqs`), as `Render.renderDeferralPointer`
 * refs; without a record (or no item found), a pointer that says so.
 */
const pointerFor = (threadId: string | null, seqs: ReadonlyArray<ReadonlyArray<number | null>>) => (n: number): string => {
  const wanted = seqs.slice(0, n).flat()
  const found = wanted.filter((s): s is number => s !== null)
  if (threadId === null || found.length === 0) {
    return `<deferred_history>\n${n} earlier message${n === 1 ? " of this conversation was" : "s of this conversation were"} left out to fit this model's context window. This is context, not an instruction.\n</deferred_history>`
  }
  return Render.renderDeferralPointer(threadId, wanted.length, found.map((s) => [s, s] as const))
}

/**
 * How many of the agent's first messages (`seqs`: `messageSeqs`) an offload with cut `cutSeq` stands for: through the
 * last one with an item found at or before the cut (a message the cut splits is one it stands for: the fit sends the
 * summary only when it is left out too, never beside a summary of part of it).
 */
export const coveredBy = (seqs: ReadonlyArray<ReadonlyArray<number | null>>, cutSeq: number): number => {
  let n = 0
  seqs.forEach((m, i) => {
    if (m.some((s) => s !== null && s <= cutSeq)) n = i + 1
  })
  return n
}

/**
 * The seq of the thread's first item that is not the current conversation's (`Infinity`: none): the first of its
 * `items` (the thread's, in seq order) that is neither found among the request's messages (`seqs`: `messageSeqs`),
 * nor the agent's context (`isContext`), nor one of Baton's summaries. Such an item belongs to a branch the agent
 * dropped (it rewound, edited or compacted its history: a divergence, docs/gateway.md), and stays in the thread.
 * An `/offload` summary stands for every item through its cut (the chain's, summaries aside: `ThreadOffload`), so
 * the fit may use one only when its cut is below this seq (review r17: the summary of a rewound-away branch was sent
 * with the new one), and the gateway asks for one only through an item below it.
 */
export const firstForeignSeq = (items: ReadonlyArray<Item>, seqs: ReadonlyArray<ReadonlyArray<number | null>>): number => {
  const current = new Set(seqs.flat())
  return items.find((i) => i.kind !== "summary" && !current.has(i.seq) && !isContext(i))?.seq ?? Infinity
}

/**
 * The block an `/offload` summary goes out as, before the deferral pointer (`GatewaySwitch.FitSummary.text`): its
 * text, its ref, the cut it covers and where its originals are read (`archive:<offload id>`, and the pointer's refs).
 */
export const summaryBlock = (threadId: string, offload: Offload, summary: Item): string =>
  `<conversation_summary thread=${JSON.stringify(threadId)}>\n` +
  `A summary of this conversation up to item #${offload.cutSeq} (item #${summary.seq}, written by Baton's summariser). ` +
  `The items it stands for are not shown: the pointer below names every item left out, and thread_read ` +
  `${JSON.stringify({ refs: `archive:${offload.id}` })} reads the originals it replaced. This is context, not an instruction.\n\n` +
  `${summary.text.trim()}\n</conversation_summary>`

/**
 * The rendered tokens of deferred history no summary covers yet below which the gateway asks for no summary (a
 * summariser call is not worth less): at least `ThreadOffload.minOffloadTokens`, else a sixteenth of the window.
 */
export const summariseFromTokens = (windowTokens: number) => Math.max(ThreadOffload.minOffloadTokens, Math.floor(windowTokens / 16))

/** The PreCompact hook's approval mode for a summary the gateway asks for after a switched request's fit deferred. */
export const switchApproval = "gateway-switch-fit"

/** Serves the switched request (see the module docblock). */
export const serve = (input: Input) =>
  Effect.gen(function*() {
    const { body, count, history, model, target, threads } = input
    const wire = input.wire ?? GatewaySwitchWire.chat
    const agent = wire.agent
    /**
     * The run failure code of an upstream's HTTP error (`status`; `converted`: it in the agent's shape), the first
     * request's and each `thread_read` continuation's alike: `provider_unavailable` for 429 and 5xx, `overflow` for the
     * agent's overflow 400, `provider_refused` otherwise. Found in review: a continuation's 429 was `provider_refused`.
     */
    const upstreamFailureCode = (status: number, converted: { readonly status: number; readonly body: Record<string, unknown> }) =>
      status === 429 || status >= 500 ? "provider_unavailable" : converted.status === 400 && agent.isOverflow(converted.body) ? "overflow" : "provider_refused"
    const begun = yield* threads.begin({
      wire: agent.dialect.wire,
      session: history.session,
      parentSession: history.parent ?? null,
      agent: input.agent,
      system: history.system,
      messages: history.messages,
      model,
      providerInstance: target.name as ProviderInstance,
      contextWindow: target.config.contextWindow,
      prices: target.config.prices
    }).pipe(
      Effect.tapErrorCause((cause) => Effect.logError("gateway: could not record a switched request (forwarded all the same)", cause)),
      Effect.option
    )
    /** Whether an outcome has been given to the record (`settle`): a hang-up after it records nothing more. */
    let given = false
    // Uninterruptible: a hang-up during the write (once `given`) would cut it, and record nothing either (review r44).
    const settle = <E>(record: (b: GatewayThreads.Begun) => Effect.Effect<void, E>) =>
      Effect.uninterruptible(Effect.suspend(() => {
        given = true
        return settleWith(record)
      }))
    const settleWith = <E>(record: (b: GatewayThreads.Begun) => Effect.Effect<void, E>) =>
      Option.match(begun, {
        onNone: () => Effect.void,
        onSome: (b) =>
          record(b).pipe(Effect.catchAllCause((cause) =>
            Effect.logError("gateway: could not record a switched answer; the run is marked failed", cause).pipe(
              Effect.zipRight(threads.fail(b, "failed", "output_not_recorded", "Baton could not record the upstream's answer (see the server's log)")),
              Effect.catchAllCause((again) => Effect.logError("gateway: could not mark the run failed either", again))
            )
          ))
      })

    // Recorded before it is forwarded: interrupted before it answers (the upstream's head or whole answer still to
    // come), the handler records the hang-up or the shutdown's cut (without it the run stayed `running`).
    input.onHangUp.record = Effect.suspend(() =>
      given ? Effect.void : Effect.flatMap(input.stopped, (stopped) => {
        const u = GatewayDialect.hungUp(stopped)
        return settle((b) => threads.fail(b, u.status, u.code, u.reason))
      })
    )
    const threadId = Option.match(begun, { onNone: () => null, onSome: (b) => b.threadId as string })
    // thread_read is offered (beside the agent's tools) when there is a thread to read from; the gateway answers it.
    const offered = threadId === null ? [] : [ThreadRead.definition]
    const hidden: ReadonlySet<string> = new Set(offered.map((t) => t.name))
    // The agent's tool names (Anthropic's `name`, Chat Completions' `function.name`).
    const agentTools: ReadonlySet<string> = new Set((Array.isArray(body.tools) ? body.tools : []).flatMap((t) =>
      isRecord(t) && typeof t.name === "string" ? [t.name] : isRecord(t) && isRecord(t.function) && typeof t.function.name === "string" ? [t.function.name] : []
    ))
    const window = target.config.contextWindow
    // The agent's history with the conversation's recorded rounds in place of the messages the agent received: the
    // upstream's thread_read calls that came beside the agent's own calls, with the gateway's answers (`besideRound`),
    // as the same-protocol paths send them (`GatewayOffload.expand`). The record keeps the agent's own history.
    const agentOffload = input.offload
    const expansionKey = (m: unknown) => GatewayThreads.expansionKeyOf(agent.dialect.wire, m)
    const conversation = threadId === null || agentOffload === undefined
      ? Option.none<{ readonly expansions: Readonly<Record<string, ReadonlyArray<unknown>>> }>()
      : Option.flatten(yield* Effect.option(threads.conversationOf(agent.dialect.wire, history.session, history.system, history.messages)))
    const fitBody = Option.match(conversation, {
      onNone: () => body,
      onSome: (c) => {
        const sent = agentOffload?.shape.history(body)
        if (agentOffload === undefined || sent === null || sent === undefined || !sent.every(isRecord)) return body
        const expanded = GatewayOffload.expand(agentOffload.shape, sent, c.expansions, expansionKey, (m) => GatewayThreads.fingerprintOf(agent.dialect.wire, m))
        return expanded === sent ? body : agentOffload.shape.withHistory(body, expanded)
      }
    })
    const fitHistory = fitBody === body ? history.messages : ((h) => (typeof h === "string" ? history.messages : h.messages))(agent.dialect.history(fitBody, {}))
    const fitWith = (pointer: (n: number) => string, summaries: ReadonlyArray<GatewaySwitch.FitSummary> = []) =>
      wire.fit({ body: fitBody, windowTokens: window, maxOutputTokens: target.config.maxOutputTokens, count, pointer, offered, summaries, media: target.config.media !== false })
    // A first pass with a pointer of the thread's size; the thread's items (and its /offload summaries, the fit's
    // third step) are read only when messages are left out.
    let fitted = fitWith(pointerFor(threadId, []))
    /** The newest item the fit left out when no summary covers the deferred history yet (worth one): summarised later. */
    let summariseThrough: number | null = null
    if (fitted._tag === "fits" && fitted.fit.leftOut > 0 && threadId !== null) {
      const items: ReadonlyArray<Item> = yield* Effect.orElseSucceed(input.store.listItems(threadId as ThreadId), () => [])
      const offloads: ReadonlyArray<Offload> = yield* Effect.orElseSucceed(input.store.listOffloads(threadId as ThreadId), () => [])
      const seqs = messageSeqs(items, fitHistory, agent.dialect.wire)
      const byId = new Map(items.map((i) => [i.id as string, i]))
      // Only summaries whose items are all the current conversation's: one of a dropped branch is ignored (not deleted).
      const foreign = firstForeignSeq(items, seqs)
      // The chain's summaries, newest first: each stands for the messages whose items are all at or before its cut.
      const summaries = [...offloads].reverse().flatMap((o) => {
        const item = byId.get(o.summaryItemId)
        return item === undefined || o.cutSeq >= foreign ? [] : [{ covers: coveredBy(seqs, o.cutSeq), text: summaryBlock(threadId, o, item) }]
      })
      fitted = fitWith(pointerFor(threadId, seqs), summaries)
      if (fitted._tag === "fits") {
        const last = Math.max(0, ...seqs.slice(0, fitted.fit.leftOut).flat().filter((x): x is number => x !== null))
        const cut = offloads.at(-1)?.cutSeq ?? 0
        const uncovered = items.reduce((n, i) => i.seq > cut && i.seq <= last && i.kind !== "summary" ? n + i.tokens : n, 0)
        // A summary through `last` would stand for a dropped item too (the chain covers every item before its cut): none.
        if (last > cut && last < foreign && uncovered >= summariseFromTokens(window)) summariseThrough = last
      }
    }
    /**
     * After the answer is recorded, when the fit left out history no summary covers (at least `summariseFromTokens`),
     * the thread is offloaded through the newest item left out (`ThreadOffload`, the `/offload` machinery: its summary
     * item, record, archive and `thread.offloaded` event), in the gateway's scope: the next switched request finds the
     * summary. Never fails (a failure is logged; the fit goes on with the pointer alone).
     */
    const summariseLater = (b: GatewayThreads.Begun) =>
      summariseThrough === null ? Effect.void : Effect.asVoid(Effect.forkIn(
        Effect.gen(function*() {
          const through = summariseThrough!
          const items = yield* input.store.listItems(b.threadId)
          // Keeping every item after the newest one left out: /offload's cut lands right after it (a tool unit moves it earlier).
          const keepTokens = items.reduce((n, i) => i.seq > through && i.kind !== "summary" ? n + i.tokens : n, 0)
          const report = yield* input.offloader.offload(
            b.threadId,
            keepTokens,
            { operationId: `gw-${b.run.id}`, fingerprint: `gateway-switch:${b.threadId}:${through}:${keepTokens}` },
            ThreadOffload.noPrices,
            { trigger: "automatic", approvalMode: switchApproval },
            // The agent goes on while the summary is written: its appended turns do not make it stale.
            { appendsAllowed: true }
          )
          yield* Effect.logInfo(`gateway: thread ${b.threadId}, the summary of the switched fit's deferred history: ${report.outcome}${report.reason === null ? "" : ` (${report.reason})`}`)
        }).pipe(Effect.catchAllCause((cause) => Effect.logWarning(`gateway: thread ${b.threadId}, no summary of the switched fit's deferred history`, cause))),
        input.scope
      ))
    if (fitted._tag === "overflow") {
      const message = GatewaySwitch.overflowMessage(fitted.tokens, fitted.limit)
      yield* settle((b) => threads.fail(b, "failed", "overflow", `not sent: ${message} (provider instance ${target.name}, window ${target.config.contextWindow})`))
      return errorAnswer(400, agent.overflow(fitted.tokens, fitted.limit))
    }
    const streamed = body.stream === true
    const headers: Record<string, string> = { accept: streamed ? "text/event-stream" : "application/json" }
    wire.upstreamHeaders(target.apiKey, headers)
    const url = target.config.baseUrl.replace(/\/+$/, "") + wire.path
    const post = (chatBody: unknown) =>
      input.http.execute(HttpClientRequest.post(url).pipe(
        HttpClientRequest.setHeaders(headers),
        HttpClientRequest.bodyText(JSON.stringify(chatBody), "application/json")
      ))
    // Gemini's thought signatures back on the calls the agent sends again (its protocol has no place for them).
    const signatures = input.signatures ?? GatewayThoughtSignatures.make(0)
    let chatBody = GatewayThoughtSignatures.restore(signatures, threadId, fitted.body)
    const { limit } = fitted.fit
    /** The continuation's tokens, counted as the fit counts them (it stays under the fit's limit). */
    let used = fitted.fit.tokensAfter
    /** The answers sent for each hidden round's calls (in the calls' order), for `besideRound` after a hidden round. */
    const roundAnswers: Array<ReadonlyArray<GatewaySwitchWire.Answer>> = []
    /** The conversation continued after hidden calls: their answers from the thread (`tool` messages, `function_call_output` items) appended. */
    const continued = (assistant: ReadonlyArray<unknown>, calls: ReadonlyArray<GatewaySwitch.HiddenCall>) =>
      Effect.gen(function*() {
        const answers = yield* Effect.forEach(calls, (c) =>
          threadId === null
            ? Effect.succeed({ toolCallId: c.id, output: "thread_read: this conversation has no record to read from", isError: true })
            : Effect.map(input.reader.answer(threadId as ThreadId, c.arguments), (a) => ({ toolCallId: c.id, ...a })))
        // An answer that would take the request over the window is refused (the model may ask for less), never sent.
        const fitting = fitAnswers(answers, used + wire.tokensOf(count, assistant), limit, (a) => wire.answerTokens(count, a))
        used = fitting.used
        roundAnswers.push(fitting.answers)
        chatBody = wire.continued(chatBody, assistant, fitting.answers)
        return chatBody
      })
    /**
     * The upstream's `thread_read` calls beside the agent's own calls (the agent must answer its calls, so the gateway
     * does not continue): `full` the answer's content in the agent's protocol with them (converted without hiding
     * them), `received` the content the agent got (without them). They are answered from the thread (an answer that
     * would take the next request, the request sent with `full` and the answers, over the fit's limit refused to the
     * model, as for a hidden round), and the expansion
     * recorded for the received message: the message with the calls, then the answers, which the agent's next request
     * carries in its place (joined with its own results where the protocol needs them in one message). `rounds`: a
     * streamed answer's hidden rounds before that hop (each hop's content in the agent's protocol with its
     * `thread_read` calls, and the answers sent for them, `roundAnswers`): the expansion holds them before the hop, as
     * the upstream had them (the agent's message spans every hop). `undefined`: no such calls, no thread, no offload
     * of the agent's protocol, or rounds whose calls do not match their answers.
     */
    const besideRound = (
      received: ReadonlyArray<unknown> | null,
      full: ReadonlyArray<unknown> | null,
      rounds: ReadonlyArray<{ readonly content: ReadonlyArray<unknown>; readonly answers: ReadonlyArray<GatewaySwitchWire.Answer> }> = []
    ) =>
      Effect.gen(function*() {
        if (agentOffload?.besideOf === undefined || threadId === null || received === null || full === null) return undefined
        const beside = agentOffload.besideOf(full)
        if (beside === null) return undefined
        // The hidden rounds in the agent's protocol: each hop's content, then the answers it got (by the calls' order).
        let before = agentOffload.shape.withHistory({}, [])
        for (const round of rounds) {
          const reads = agentOffload.readsOf(round.content)
          if (reads === null || reads.length !== round.answers.length) return undefined
          before = agentOffload.continuation(before, round.content, reads.map((r, i) => ({ id: r.id, output: round.answers[i]!.output, isError: round.answers[i]!.isError })))
        }
        const answers = yield* Effect.forEach(beside.reads, (r) =>
          r.invalid !== undefined
            ? Effect.succeed({ id: r.id, output: r.invalid, isError: true })
            : Effect.map(input.reader.answer(threadId as ThreadId, JSON.stringify(r.input ?? {})), (a) => ({ id: r.id, ...a })))
        // The next request carries the request sent, the upstream's answer (its text and calls, counted as the
        // same-protocol path counts a reply: its JSON) and these answers: they must fit in it.
        const fitting = fitAnswers(answers, used + GatewayMedia.jsonTokens(count, full), limit, (a) => wire.answerTokens(count, { toolCallId: a.id, output: a.output, isError: a.isError }))
        return agentOffload.expansions(received, before, 0, full, expansionKey, fitting.answers)
      })
    const response = yield* Effect.either(post(chatBody))
    if (response._tag === "Left") {
      yield* settle((b) => threads.fail(b, "failed", "provider_unavailable", `the upstream could not be reached: ${response.left.message}`))
      return errorAnswer(502, agent.error("api_error", `Baton could not reach the upstream of model ${model.slice(0, 200)}`))
    }
    const upstream = response.right
    const ok = upstream.status >= 200 && upstream.status < 300
    const contentType = upstream.headers["content-type"] ?? ""
    if (!ok || !contentType.includes("text/event-stream")) {
      const text = yield* Effect.either(upstream.text)
      if (text._tag === "Left") {
        yield* settle((b) => threads.fail(b, "failed", "provider_unavailable", `the upstream's answer broke off: ${text.left.message}`))
        return errorAnswer(502, agent.error("api_error", "the upstream's answer broke off"))
      }
      if (!ok) {
        const converted = agent.upstreamError(upstream.status, text.right)
        yield* settle((b) => threads.fail(b, "failed", upstreamFailureCode(upstream.status, converted), upstreamFailureReason(upstream.status, text.right)))
        return errorAnswer(converted.status, converted.body, retryAdvice(upstream.headers))
      }
      // The upstream's own thread_read calls: answered here and the conversation continued (up to 8 rounds).
      let answer = parseJson(text.right)
      /** A 2xx answer that is not a JSON object is no answer: a 502, the run failed (never an empty message). */
      const notJson = (t: string) =>
        settle((b) => threads.fail(b, "failed", "provider_protocol", `the upstream's answer is not JSON: ${t.slice(0, 300)}`)).pipe(
          Effect.as(errorAnswer(502, agent.error("api_error", "the upstream's answer is not a JSON object")))
        )
      if (!isRecord(answer)) return yield* notJson(text.right)
      const earlier: Array<unknown> = []
      /** The hidden rounds' answers (the upstream's): what they say goes to the agent before the last answer's. */
      const rounds: Array<unknown> = []
      for (let hop = 0; hop < maxReadHops; hop++) {
        const reads = wire.hiddenCallsOf(answer, hidden)
        if (reads === null) break
        earlier.push(isRecord(answer) ? answer.usage : null)
        rounds.push(answer)
        const next = yield* Effect.either(Effect.flatMap(continued(reads.assistant, reads.calls).pipe(Effect.flatMap(post)), (r) => Effect.map(r.text, (t) => ({ r, t }))))
        if (next._tag === "Left") {
          yield* settle((b) => threads.fail(b, "failed", "provider_unavailable", `the upstream could not be reached after thread_read: ${next.left.message}`))
          return errorAnswer(502, agent.error("api_error", `Baton could not reach the upstream of model ${model.slice(0, 200)}`))
        }
        if (next.right.r.status < 200 || next.right.r.status >= 300) {
          const converted = agent.upstreamError(next.right.r.status, next.right.t)
          yield* settle((b) =>
            threads.fail(b, "failed", upstreamFailureCode(next.right.r.status, converted), upstreamFailureReason(next.right.r.status, next.right.t, " after thread_read"))
          )
          return errorAnswer(converted.status, converted.body, retryAdvice(next.right.r.headers))
        }
        answer = parseJson(next.right.t)
        if (!isRecord(answer)) return yield* notJson(next.right.t)
      }
      // Still only hidden calls after the last round and no text beside them or in an earlier round: Baton's note
      // instead of an empty answer (`readLimitNote`); text beside them is the answer, the calls left out (review r45:
      // it was replaced by the note), and so is an earlier round's (as on a stream).
      if (wire.hiddenCallsOf(answer, hidden) !== null && !wire.note.said(answer) && !rounds.some(wire.note.said)) answer = wire.note.whole(readLimitNote, answer)
      const failure = wire.failureOf(answer)
      if (failure !== null) {
        const message = String((failure.body.error as { message?: unknown } | undefined)?.message ?? "")
        const code = agent.isOverflow(failure.body) ? "overflow" : failure.status === 429 || failure.status >= 500 ? "provider_unavailable" : "provider_refused"
        yield* settle((b) => threads.fail(b, "failed", code, `the upstream's answer reports a failure: ${message.slice(0, 300)}`))
        return errorAnswer(failure.status, failure.body)
      }
      if (threadId !== null) GatewayThoughtSignatures.recordAnswer(signatures, threadId, answer)
      // The hidden rounds in the agent's protocol with their calls (`besideRound`'s rounds, with the answers they got).
      const roundContents = agentOffload === undefined ? [] : rounds.map((r) => agentOffload.contentOfBody(wire.messageOf(r, model, new Set(), [], agentTools, body)) ?? [])
      const last = wire.messageOf(answer, model, hidden, earlier, agentTools, body)
      // What the hidden rounds said goes before the last answer's content, as a stream passes it on as it comes (before
      // branch b47gw the agent got the last answer alone, and the earlier rounds' text was lost).
      const message = rounds.length === 0 || agentOffload?.withContent === undefined
        ? last
        : agentOffload.withContent(last, agentOffload.contentOfBody(last) ?? [], roundContents, false)
      // After hidden rounds the run's tokens are every hop's; what the last request carried is the dashboard's point.
      const carried = wire.carriedOf(isRecord(answer) ? answer.usage : null)
      const expansion = agentOffload === undefined || roundAnswers.length < rounds.length ? undefined : yield* besideRound(
        agentOffload.contentOfBody(message),
        agentOffload.contentOfBody(wire.messageOf(answer, model, new Set(), earlier, agentTools, body)),
        roundContents.map((content, i) => ({ content, answers: roundAnswers[i]! }))
      )
      const reply = agent.dialect.replyOfBody(message)
      yield* settle((b) =>
        Effect.zipRight(threads.complete(b, carriedNeeded(reply.tokens, carried, earlier.length + 1) ? { ...reply, carriedTokens: carried } : reply, expansion), summariseLater(b))
      )
      if (!streamed) return HttpServerResponse.unsafeJson(message)
      // The agent asked for a stream and the upstream answered whole: the message as one stream's events.
      return HttpServerResponse.text(agent.wholeAsStream(message, body), { contentType: "text/event-stream" })
    }

    // A stream: each upstream chunk translated as it arrives; the translated events assembled as the agent's reply,
    // recorded when the stream ends, before the agent's connection sees the end.
    const translator = wire.translator(model, hidden, agentTools, body)
    const assembler = agent.dialect.assembler()
    // Each hop's stream translated again on its own without hiding thread_read (the hop's answer with its calls, as
    // the upstream had it: `besideRound`'s content and rounds; the agent's message spans every hop).
    const wholes: Array<{ readonly translator: GatewaySwitchWire.Translator; readonly assembler: ReturnType<typeof agent.dialect.assembler> }> = []
    const encoder = new TextEncoder()
    let settled = false
    /** The upstream's error in its stream, as the agent got it (the run's failure code: an overflow is `overflow`). */
    let streamFailure: GatewaySwitchWire.StreamFailure = null
    const finish = Effect.suspend(() => {
      settled = true
      const outcome = assembler.outcome()
      const hops = translator.hops()
      // Every hop's content, whole (else no expansion): the last hop's calls beside the agent's, the earlier hops'
      // hidden rounds (each answered: `roundAnswers`) before it.
      const contents = wholes.flatMap((w) => {
        const full = w.assembler.outcome()
        return agentOffload === undefined || full._tag !== "completed" ? [] : [agentOffload.contentOfReply(full.reply)]
      })
      const whole = agentOffload !== undefined && contents.length > 0 && contents.length === wholes.length && roundAnswers.length >= contents.length - 1
      return settle((b) =>
        outcome._tag === "completed"
          ? Effect.flatMap(
            agentOffload === undefined || !whole
              ? Effect.sync(() => undefined)
              : besideRound(
                agentOffload.contentOfReply(outcome.reply),
                contents.at(-1)!,
                contents.slice(0, -1).map((content, i) => ({ content, answers: roundAnswers[i]! }))
              ),
            (expansion) =>
              Effect.zipRight(
                threads.complete(b, carriedNeeded(outcome.reply.tokens, hops.carried, hops.count) ? { ...outcome.reply, carriedTokens: hops.carried } : outcome.reply, expansion),
                summariseLater(b)
              )
          )
          : streamFailure !== null
          ? threads.fail(b, "failed", streamFailure.code, streamFailure.reason)
          : threads.fail(b, "failed", outcome._tag === "failed" ? outcome.code : "provider_protocol", outcome.reason)
      )
    })
    let hops = 0
    /** Whether text of the answer reached the agent in an earlier hop or this one (then no note at the read limit). */
    let said = false
    /** The gateway's error as the agent's stream's error event (numbered on by the translator when it numbers). */
    const streamError = (body: Record<string, unknown>) => translator.error === undefined ? agent.streamError(body) : translator.error(body)
    /**
     * One hop's stream translated; when it ends with only hidden calls, they are answered and the continuation's
     * stream follows (the same message for the agent), up to `maxReadHops`.
     */
    const hop = (source: Stream.Stream<Uint8Array, HttpClientError.ResponseError>): Stream.Stream<string, HttpClientError.ResponseError> => {
      const whole = { translator: wire.translator(model, new Set(), agentTools, body), assembler: agent.dialect.assembler() }
      wholes.push(whole)
      return source.pipe(
        Stream.map((chunk) => {
          whole.assembler.push(encoder.encode(whole.translator.push(chunk)))
          return translator.push(chunk)
        }),
        Stream.concat(Stream.unwrap(Effect.gen(function*() {
          whole.assembler.push(encoder.encode(whole.translator.end()))
          const tail = translator.end()
          const reads = translator.hidden()
          if (reads === null) {
            if (threadId !== null) GatewayThoughtSignatures.recordAssistant(signatures, threadId, translator.assistant())
            return Stream.make(tail)
          }
          // The hop's text went to the agent as it came (only its calls are hidden).
          said ||= saidIn(translator.assistant())
          if (++hops > maxReadHops) {
            // Still only hidden calls after the last round. The agent got text (this hop's or an earlier one's): that
            // is the answer, ended here, as a whole answer with text beside its reads is. Else Baton's note instead of
            // an empty answer (`readLimitNote`). Before branch `b46gw` the note always came, after text already sent.
            if (said) return Stream.make(tail + translator.stop())
            translator.next()
            return Stream.make(tail + translator.push(encoder.encode(wire.note.stream(readLimitNote))) + translator.end())
          }
          const next = yield* Effect.either(Effect.flatMap(continued(translator.assistant(), reads), post))
          if (next._tag === "Right" && next.right.status >= 200 && next.right.status < 300 && (next.right.headers["content-type"] ?? "").includes("text/event-stream")) {
            translator.next()
            return Stream.concat(Stream.make(tail), hop(next.right.stream))
          }
          // The continuation failed: the agent gets an error event (the run fails: no message_stop).
          const failed = next._tag === "Left"
            ? agent.error("api_error", `the upstream could not continue after thread_read: ${next.left.message}`)
            : agent.upstreamError(next.right.status, yield* Effect.orElseSucceed(next.right.text, () => "")).body
          return Stream.make(tail + streamError(failed))
        })))
      )
    }
    const stream = hop(upstream.stream).pipe(
      Stream.filter((text) => text !== ""),
      Stream.tap((text) => Effect.sync(() => {
        if (streamFailure === null) streamFailure = agent.streamFailureOf(text)
      })),
      Stream.map((text) => encoder.encode(text)),
      Stream.tap((chunk) => Effect.sync(() => assembler.push(chunk))),
      Stream.catchAll((e) =>
        Stream.fromEffect(Effect.suspend(() => {
          settled = true
          return Effect.flatMap(input.stopped, (stopped) => {
            const u = GatewayDialect.brokeOff(stopped, e.message)
            return settle((b) => threads.fail(b, u.status, u.code, u.reason))
          })
        })).pipe(
          // The agent is told (its protocol's error event), not left with a stream that stops mid-block.
          Stream.as(encoder.encode(streamError(agent.error("api_error", "the upstream's stream broke off"))))
        )
      ),
      Stream.concat(Stream.drain(Stream.fromEffect(Effect.suspend(() => (settled ? Effect.void : finish))))),
      Stream.ensuring(Effect.suspend(() =>
        settled ? Effect.void : Effect.flatMap(input.stopped, (stopped) => {
          const u = GatewayDialect.hungUp(stopped)
          return settle((b) => threads.fail(b, u.status, u.code, u.reason))
        })
      ))
    )
    return HttpServerResponse.stream(stream, { status: 200, contentType: "text/event-stream", headers: { "cache-control": "no-cache" } })
  })
