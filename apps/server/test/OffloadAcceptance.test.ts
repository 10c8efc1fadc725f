/**
 * `/offload` acceptance over HTTP (issue 12), with a loopback Anthropic summariser and the server's real SQLite file:
 * a failure injected at each step of the offload's commit (a SQLite trigger aborting the statement) loses and
 * half-writes nothing and a later offload succeeds; the commit holds the thread's own lock; a history three times
 * the summariser's window is summarised in refining chunks; pinned instructions survive verbatim into the summary
 * and the next provider's handoff; a committed offload whose result cannot be shown says so with its id.
 */
import type { OffloadArchivePage, ThreadId } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { describe, expect, it } from "@effect/vitest"
import type { SqlClient } from "@effect/sql"
import { Deferred, Effect, Fiber } from "effect"
import { client } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, sendAndWait } from "./support/ModelServer.js"
import { chatUsage, held, itemsOf, sumUsage, summaryText, until, withThread } from "./support/Offload.js"

/**
 * What an offload may write, read straight from the database: the thread's row, items, offloads, handoffs and their
 * deliveries, and events (the audit event `thread.offload_failed` a failed offload appends aside).
 */
const snapshot = (sql: SqlClient.SqlClient, threadId: ThreadId) =>
  Effect.orDie(Effect.all({
    // lock_version counts the units of work under the thread's lock (the operation's own records among them).
    thread: sql`SELECT id, title, active_provider_thread_id, created_at, updated_at FROM threads WHERE id = ${threadId}`,
    items: sql`SELECT * FROM items WHERE thread_id = ${threadId} ORDER BY seq`,
    offloads: sql`SELECT * FROM offloads WHERE thread_id = ${threadId} ORDER BY generation`,
    archive: sql`SELECT a.* FROM offload_archive a JOIN offloads o ON o.id = a.offload_id WHERE o.thread_id = ${threadId} ORDER BY a.offload_id, a.position`,
    handoffs: sql`SELECT * FROM handoffs WHERE thread_id = ${threadId} ORDER BY id`,
    deliveries: sql`SELECT d.* FROM handoff_deliveries d JOIN handoffs h ON h.id = d.handoff_id WHERE h.thread_id = ${threadId} ORDER BY d.id`,
    events: sql`SELECT * FROM thread_events WHERE thread_id = ${threadId} AND type <> 'thread.offload_failed' ORDER BY seq`
  }))

/**
 * Each step of the offload's unit of work (reserve, append, commit) and the trigger that makes its statement fail:
 * the reservation (the summary item, the offload's row), the archive append, the handoff supersession, the event,
 * the commit of the reservation, the operation's outcome.
 */
const steps: ReadonlyArray<readonly [string, string]> = [
  ["reserve: the summary item insert", "BEFORE INSERT ON items WHEN NEW.kind = 'summary'"],
  ["reserve: the offload record insert", "BEFORE INSERT ON offloads"],
  ["append: the archive of the originals", "BEFORE INSERT ON offload_archive"],
  ["the handoff supersede", "BEFORE UPDATE ON handoffs"],
  ["the thread.offloaded event", "BEFORE INSERT ON thread_events WHEN NEW.type = 'thread.offloaded'"],
  ["commit: the reservation committed", "BEFORE UPDATE ON offloads WHEN NEW.committed_at IS NOT NULL"],
  ["the operation's outcome", "BEFORE UPDATE ON offload_operations WHEN NEW.status = 'offloaded'"]
]

/** The prompt text of a recorded Anthropic Messages request: every text of its messages, joined. */
const promptOf = (body: string): string => {
  const texts: Array<string> = []
  const walk = (v: unknown, key: string | null): void => {
    if (typeof v === "string") {
      if (key === "text" || key === "content") texts.push(v)
    } else if (Array.isArray(v)) v.forEach((x) => walk(x, key))
    else if (v !== null && typeof v === "object") for (const [k, x] of Object.entries(v)) walk(x, k)
  }
  walk((JSON.parse(body) as { messages: unknown }).messages, null)
  return texts.join("\n")
}

/** The text between `open` and `close` in `text`, or `null`. */
const between = (text: string, open: string, close: string): string | null => {
  const from = text.indexOf(open)
  const to = text.indexOf(close, from + open.length)
  return from < 0 || to < 0 ? null : text.slice(from + open.length, to)
}

describe("/offload acceptance over HTTP", () => {
  it.live("a failure at each step of the commit: nothing lost nor half-written, the operation failed, a later offload commits", () =>
    withThread(4, ({ sql, summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        // A switch leaves an open handoff owing the history, so the commit has a handoff to supersede.
        yield* api.threads.switchProvider({ path: { threadId }, payload: { providerInstance: "claude2" as never }, headers: {} })
        const open = yield* Effect.orDie(sql<{ open: number }>`SELECT open FROM handoffs WHERE thread_id = ${threadId} AND open = 1`)
        expect(open.length).toBeGreaterThan(0)
        const before = yield* snapshot(sql, threadId)
        for (const [i, [step, when]] of steps.entries()) {
          yield* Effect.orDie(sql.unsafe(`CREATE TRIGGER inject_failure ${when} BEGIN SELECT RAISE(ABORT, 'injected failure at step ${i}'); END`))
          summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
          const error = yield* Effect.flip(api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: `op-inject-${i}` }, headers: {} }))
          yield* Effect.orDie(sql`DROP TRIGGER inject_failure`)
          expect(error._tag, step).toBe("OffloadFailed")
          const stored = yield* api.threads.getOffload({ path: { threadId, operationId: `op-inject-${i}` } })
          expect(stored, step).toMatchObject({ outcome: "failed", offloaded: false, offloadId: null, summaryItemId: null, retryable: true })
          expect(stored.message, step).toMatch(/The conversation is unchanged/)
          // The commit failed (not a summariser failure, nor a lost server) and the outcome says so.
          expect(stored.reason, step).toMatch(/^the offload could not be written \(/)
          expect(yield* snapshot(sql, threadId), step).toEqual(before)
        }
        expect(summariser.requests).toHaveLength(steps.length)
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        const done = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-after" }, headers: {} })
        expect(done).toMatchObject({ outcome: "offloaded", offloaded: true })
        expect(done.supersededHandoffIds.length).toBeGreaterThan(0)
        expect(yield* itemsOf(threadId, "summary")).toHaveLength(1)
        // The committed offload's archive holds exactly the originals it covered, in order.
        const archived = yield* Effect.orDie(sql<{ itemId: string }>`SELECT item_id FROM offload_archive WHERE offload_id = ${done.offloadId!} ORDER BY position`)
        expect(archived.map((r) => r.itemId)).toEqual(done.coveredItemIds)
      }), { extraInstances: (chat) => [instance("claude2", "anthropic-messages", chat)] }), 120_000)

  it.live("the commit takes the thread's own lock: it waits for another writer holding the thread, sees its change, and discards the summary as stale", () =>
    withThread(4, ({ sql, summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const { reply, release } = held(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        summariser.enqueue(reply)
        const offloading = yield* Effect.fork(api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-lock" }, headers: {} }))
        yield* until(() => summariser.requests.length === 1)
        // Another writer takes the thread's lock (its row, FOR UPDATE), appends an event (the thread's version moves
        // on: a copy of its newest event under the next seq) and keeps the lock until told.
        const locked = yield* Deferred.make<number>()
        const unlock = yield* Deferred.make<void>()
        const holder = yield* Effect.fork(Effect.orDie(sql.withTransaction(Effect.gen(function*() {
          yield* sql`SELECT id FROM threads WHERE id = ${threadId} FOR UPDATE`
          yield* sql`INSERT INTO thread_events (event_id, thread_id, seq, command_id, type, payload, created_at)
            SELECT 'evt_held_writer', thread_id, seq + 1, NULL, type, payload, created_at
            FROM thread_events WHERE thread_id = ${threadId} ORDER BY seq DESC LIMIT 1`
          const [row] = yield* sql<{ readonly pid: number }>`SELECT pg_backend_pid() AS pid`
          yield* Deferred.succeed(locked, Number(row!.pid))
          yield* Deferred.await(unlock)
        }))))
        const pid = yield* Deferred.await(locked)
        release()
        // Either the offload's commit queues behind that lock, or (the lock of another key) it ends while it is held.
        let waiting = false
        let outcome = "running"
        while (!waiting && outcome === "running") {
          const blocked = yield* Effect.orDie(sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity WHERE ${pid} = ANY(pg_blocking_pids(pid))`)
          waiting = Number(blocked[0]!.n) > 0
          outcome = (yield* api.threads.getOffload({ path: { threadId, operationId: "op-lock" } })).outcome
          if (!waiting && outcome === "running") yield* Effect.sleep("5 millis")
        }
        expect(outcome, "the offload ended while another writer held the thread's lock").toBe("running")
        expect(waiting).toBe(true)
        yield* Deferred.succeed(unlock, undefined)
        yield* Fiber.join(holder)
        // Under the thread's lock the version re-check sees the other writer's change: the summary is discarded.
        expect(yield* Fiber.join(offloading)).toMatchObject({ operationId: "op-lock", outcome: "stale", offloaded: false })
        expect(yield* itemsOf(threadId, "summary")).toEqual([])
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        expect(yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-lock-retry" }, headers: {} }))
          .toMatchObject({ outcome: "offloaded" })
        expect(yield* itemsOf(threadId, "summary")).toHaveLength(1)
      }), { postgres: true }), 120_000)

  it.live("a history three times the summariser's window: at least 3 calls, each within the window, each refining the summary so far; the offload commits", () =>
    // The summariser's instance: a 2,000-token window less 500 of output, less the 10 % margin: 1,350 tokens a call.
    withThread(12, ({ summariser, threadId }) =>
      Effect.gen(function*() {
        const window = 1_350
        const api = yield* client()
        const preview = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, dryRun: true }, headers: {} })
        expect(preview.coveredTokens).toBeGreaterThanOrEqual(3 * window)
        const answers = Array.from({ length: 12 }, (_, k) => `## Goal\n- steps, refined ${k + 1} times\n## Standing instructions\n- none`)
        for (const a of answers) summariser.enqueue(ModelApi.answer("anthropic-messages", a, sumUsage))
        const done = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-chunks" }, headers: {} })
        expect(done).toMatchObject({ outcome: "offloaded", coveredItemIds: preview.coveredItemIds })
        const prompts = summariser.requests.map((r) => promptOf(r.body))
        expect(prompts.length).toBeGreaterThanOrEqual(3)
        expect(done.cost).toMatchObject({ calls: prompts.length, state: "committed" })
        const counter = TokenCounter.make()
        const seen: Array<string> = []
        for (const [k, p] of prompts.entries()) {
          const conversation = between(p, "<conversation>", "</conversation>")!
          const previous = between(p, "<previous_summary>\n", "\n</previous_summary>")
          // Within the window: the items and the summary so far (the template aside).
          expect(counter.count(conversation) + (previous === null ? 0 : counter.count(previous)), `call ${k + 1}`).toBeLessThanOrEqual(window)
          // The first call starts from nothing; each later one refines the answer of the call before it.
          expect(previous, `call ${k + 1}`).toBe(k === 0 ? null : answers[k - 1])
          seen.push(...(conversation.match(/Step \d+:/g) ?? []))
        }
        // Every covered step was given to exactly one call, in order.
        const covered = (yield* itemsOf(threadId, "user_message")).filter((i) => preview.coveredItemIds.includes(i.id))
        expect(seen).toEqual(covered.map((i) => i.text.match(/^Step \d+:/)![0]))
        const [summary] = yield* itemsOf(threadId, "summary")
        expect(summary!.id).toBe(done.summaryItemId)
        expect(summary!.text.startsWith(answers[prompts.length - 1]!)).toBe(true)
      }), { summariserExtra: { contextWindow: 2_000, maxOutputTokens: 500, autoCompactThreshold: 1_800 } }), 120_000)

  it.live("pinned instructions (the first user message, an item pinned by the control) are verbatim in the summary and in the next provider's handoff", () => {
    const first = "Standing instructions: answer in French, never edit pnpm-lock.yaml, and run the linter before every commit."
    return withThread(5, ({ chat, summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const users = yield* itemsOf(threadId, "user_message")
        expect(users[0]!.text).toBe(first)
        // Pinned by the control: step 2's message (an instruction given mid-way).
        const pinned = users[2]!
        yield* api.threads.setToolResultOffloadControl({ path: { threadId }, payload: { pinnedItemIds: [pinned.id] }, headers: {} })
        // The summariser leaves both out: the summary must carry them anyway, word for word.
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        const done = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-pins" }, headers: {} })
        expect(done.outcome).toBe("offloaded")
        expect(done.coveredItemIds).toEqual(expect.arrayContaining([users[0]!.id, pinned.id]))
        const [summary] = yield* itemsOf(threadId, "summary")
        expect(summary!.text).toContain(first)
        expect(summary!.text).toContain(pinned.text)
        // A switch to another provider: the history it is handed is the summary (with the pins) and the kept items.
        yield* api.threads.switchProvider({ path: { threadId }, payload: { providerInstance: "claude2" as never }, headers: {} })
        const sent = chat.requests.length
        chat.enqueue(ModelApi.answer("anthropic-messages", "d'accord", { input: 100, cacheWrite: 0, cacheRead: 0, output: 20 }))
        expect((yield* sendAndWait(threadId, "go on")).run.status).toBe("completed")
        const handed = chat.requests.slice(sent).map((r) => promptOf(r.body)).join("\n")
        expect(handed).toContain(summary!.text.split("\n")[0]!)
        expect(handed).toContain(first)
        expect(handed).toContain(pinned.text)
        // ...and not the originals the summary stands for (step 1's message is covered, not pinned).
        expect(done.coveredItemIds).toContain(users[1]!.id)
        expect(handed).not.toContain(users[1]!.text)
      }), { first, extraInstances: (chat) => [instance("claude2", "anthropic-messages", chat)] })
  }, 120_000)

  it.live("the originals stay readable by ref: the API pages an offload's archive, thread_read's archive: ref reads them, the next offload archives the summary it extends", () =>
    withThread(6, ({ chat, summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const originals = new Map((yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items.map((i) => [i.id as string, i]))
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        const first = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 1_300, operationId: "op-archive-1" }, headers: {} })
        expect(first.outcome).toBe("offloaded")
        const offloadId = first.offloadId!
        // The archive, paged two at a time: the covered originals, in order, each readable in full by id.
        const paged: Array<{ itemId: string; seq: number; tokens: number }> = []
        let offset: number | null = 0
        while (offset !== null) {
          const page: OffloadArchivePage = yield* api.items.offloadArchive({ path: { threadId, offloadId }, urlParams: { offset, limit: 2 } })
          expect(page.total).toBe(first.coveredItemIds.length)
          expect(page.entries.length).toBeLessThanOrEqual(2)
          paged.push(...page.entries)
          offset = page.nextOffset
        }
        expect(paged.map((e) => e.itemId)).toEqual(first.coveredItemIds)
        expect(paged.reduce((n, e) => n + e.tokens, 0)).toBe(first.coveredTokens)
        for (const e of paged) {
          const original = originals.get(e.itemId)!
          expect(e.seq).toBe(original.seq)
          expect((yield* api.items.get({ path: { itemId: e.itemId as never }, urlParams: {} })).item.text).toBe(original.text)
        }
        // Another thread's id, or an offload that is not this thread's: 404.
        const other = yield* api.threads.create({ payload: { providerInstance: "claude" as never }, headers: {} })
        const notHere = yield* Effect.flip(api.items.offloadArchive({ path: { threadId: other.threadId, offloadId }, urlParams: {} }))
        expect(notHere._tag).toBe("OffloadNotFound")

        // The model reads the archive back with thread_read: the originals (step 1's words) reach it verbatim.
        const step1 = [...originals.values()].find((i) => i.text.startsWith("Step 1:"))!
        expect(first.coveredItemIds).toContain(step1.id)
        const sent = chat.requests.length
        chat.enqueue(
          ModelApi.answer("anthropic-messages", "", chatUsage, [{ id: "toolu_arch", name: "thread_read", arguments: JSON.stringify({ refs: `archive:${offloadId}`, limit: 32_000 }) }]),
          ModelApi.answer("anthropic-messages", "read it", chatUsage)
        )
        expect((yield* sendAndWait(threadId, "what was step 1 exactly?")).run.status).toBe("completed")
        const afterRead = chat.requests.slice(sent)
        expect(afterRead).toHaveLength(2)
        // The summary stands in the first request; the second carries the tool's answer with the original's words.
        expect(afterRead[0]!.body).not.toContain(step1.text.slice(0, 200))
        expect(afterRead[1]!.body).toContain(step1.text.slice(0, 200))

        // A second offload extends the first: its archive holds the summary it replaces, then the newly covered items.
        for (let i = 0; i < 3; i++) {
          chat.enqueue(ModelApi.answer("anthropic-messages", `more ${i}`, chatUsage))
          expect((yield* sendAndWait(threadId, `Step ${10 + i}: ${"more words ".repeat(200)}`)).run.status).toBe("completed")
        }
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        const second = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 1_300, operationId: "op-archive-2" }, headers: {} })
        expect(second.outcome).toBe("offloaded")
        const archived = yield* api.items.offloadArchive({ path: { threadId, offloadId: second.offloadId! }, urlParams: { limit: 500 } })
        expect(archived.entries.map((e) => e.itemId)).toEqual([first.summaryItemId, ...second.coveredItemIds])
        expect(archived.nextOffset).toBeNull()
      })), 120_000)

  it.live("the active lane goes on from the summary: the next request carries the summary and the kept items, not the originals; the prompt unchanged (regression: it went on sending every original)", () =>
    withThread(4, ({ chat, sql, summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const before = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        const done = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-lane" }, headers: {} })
        expect(done.outcome).toBe("offloaded")
        const covered = before.filter((i) => done.coveredItemIds.includes(i.id))
        const kept = before.filter((i) => i.seq > done.cutSeq!)
        expect(covered.length).toBeGreaterThan(0)
        expect(kept.length).toBeGreaterThan(0)
        // The lane's native thread held the originals: the offload replaced it (said on its event).
        const [event] = yield* Effect.orDie(sql<{ payload: string }>`SELECT payload FROM thread_events WHERE thread_id = ${threadId} AND type = 'thread.offloaded'`)
        const snapshot = yield* api.threads.get({ path: { threadId } })
        const natives = snapshot.providerThreads[0]!.nativeThreads
        expect(natives.map((n) => n.status)).toEqual(["replaced"])
        expect(JSON.parse(event!.payload)).toMatchObject({ offloadId: done.offloadId, replacedNativeThreadId: natives[0]!.id })
        const sent = chat.requests.length
        chat.enqueue(ModelApi.answer("anthropic-messages", "going on", chatUsage))
        const prompt = "Go on from where we were: what is next?"
        expect((yield* sendAndWait(threadId, prompt)).run.status).toBe("completed")
        const [request] = chat.requests.slice(sent)
        const text = promptOf(request!.body)
        expect(text).toContain(summaryText.split("\n")[0]!)
        const summary = (t: string) => t.slice(t.indexOf(summaryText.split("\n")[0]!))
        for (const i of kept) expect(text).toContain(i.text)
        // (The first user message is pinned by default: the summary carries it verbatim.)
        expect(summary(text)).toContain(before[0]!.text)
        for (const i of covered.slice(1)) expect(text).not.toContain(i.text)
        // The user's prompt goes out unchanged, as the request's last text.
        expect(text.endsWith(prompt)).toBe(true)
        // The request is smaller than the history it replaced by what the offload said it freed (rendered tokens).
        expect(done.tokensAfter).toBeLessThan(done.tokensBefore)
      })), 120_000)

  it.live("undo after the lane went on from the summary: the lane is replaced again and the next request carries the originals, not the summary", () =>
    withThread(4, ({ chat, summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const before = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        const done = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-undo-lane" }, headers: {} })
        expect(done.outcome).toBe("offloaded")
        const step1 = before.find((i) => i.text.startsWith("Step 1:"))!
        expect(done.coveredItemIds).toContain(step1.id)
        chat.enqueue(ModelApi.answer("anthropic-messages", "on the summary", chatUsage))
        expect((yield* sendAndWait(threadId, "first after the offload")).run.status).toBe("completed")
        expect(chat.requests.at(-1)!.body).not.toContain(step1.text)
        expect(chat.requests.at(-1)!.body).toContain(summaryText.split("\n")[0]!)
        const undone = yield* api.threads.undoOffload({ path: { threadId }, payload: {}, headers: {} })
        expect(undone).toMatchObject({ undone: true, offloadId: done.offloadId })
        chat.enqueue(ModelApi.answer("anthropic-messages", "on the originals", chatUsage))
        expect((yield* sendAndWait(threadId, "first after the undo")).run.status).toBe("completed")
        const last = promptOf(chat.requests.at(-1)!.body)
        expect(last).toContain(step1.text)
        expect(last).not.toContain(summaryText.split("\n")[0]!)
        expect(last).toContain("first after the offload")
        const snapshot = yield* api.threads.get({ path: { threadId } })
        expect(snapshot.providerThreads[0]!.nativeThreads.map((n) => n.status)).toEqual(["replaced", "replaced", "active"])
      })), 120_000)

  it.live("committed but its result cannot be shown: the user is told the conversation was offloaded, with the operation id; the same id does not offload twice", () =>
    withThread(4, ({ sql, summariser, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        // The offload's commit stores a result that cannot be read back as a report (in the same transaction).
        yield* Effect.orDie(sql.unsafe(`CREATE TRIGGER unreadable_result AFTER UPDATE ON offload_operations WHEN NEW.status = 'offloaded'
          BEGIN UPDATE offload_operations SET result = '{"unreadable":true}' WHERE operation_id = NEW.operation_id; END`))
        summariser.enqueue(ModelApi.answer("anthropic-messages", summaryText, sumUsage))
        const report = yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-shown" }, headers: {} })
        expect(report).toMatchObject({ operationId: "op-shown", outcome: "offloaded", offloaded: true, retryable: false })
        expect(report.message).toBe(
          "The conversation was offloaded, but the result could not be displayed (operation op-shown). The offload was applied: " +
            "do not run /offload again for it; GET the operation op-shown to read it."
        )
        // It was applied, once; the same id again (a client retrying) and a read answer the same, with no second summary.
        expect(yield* itemsOf(threadId, "summary")).toHaveLength(1)
        expect(yield* api.threads.offload({ path: { threadId }, payload: { keepTokens: 700, operationId: "op-shown" }, headers: {} })).toEqual(report)
        expect(yield* api.threads.getOffload({ path: { threadId, operationId: "op-shown" } })).toEqual(report)
        expect(summariser.requests).toHaveLength(1)
        expect(yield* itemsOf(threadId, "summary")).toHaveLength(1)
      })), 120_000)
})
