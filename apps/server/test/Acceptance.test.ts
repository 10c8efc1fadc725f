/**
 * Issue 7's acceptance over real HTTP: a thread driven only through the API — a provider switch, a deferred handoff,
 * `/compact` draining it once, a fork and a merge-back — with every prompt byte-identical at the provider, and the
 * thread's event stream equal to its event log. On SQLite and Postgres.
 */
import { type HandoffItemIds, type RunId, ThreadEvent, type ThreadId } from "@baton/contracts"
import { ThreadStore } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { HttpClientRequest } from "@effect/platform"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { client, get, parseSse, raw, serve } from "./helpers.js"

const nearFull = () =>
  Harness.make([
    { name: "codex", window: 44_000, autoCompactThreshold: 42_000, inject: true },
    { name: "claude", window: 200_000, inject: false }
  ], { config: { deferralPointer: false } })

/** A prompt whose bytes a careless transport would change: non-ASCII, emoji, tabs, CRLF, trailing spaces. */
const tricky = "Start the refactor ✓ — naïve café 🎉\r\n\tkeep   these  spaces  "

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("a thread driven over HTTP: switch, deferred handoff, /compact once, fork and merge; prompts unchanged; events = log", () => {
    const h = nearFull()
    return Effect.gen(function*() {
      const api = yield* client()
      /** Sends a message (202 at once) and waits for its run to end; returns the ended run. */
      const send = (threadId: ThreadId, text: string) =>
        Effect.gen(function*() {
          const accepted = yield* api.messages.send({ path: { threadId }, payload: { text }, headers: {} })
          // Each send follows the end of the one before: the thread is idle, so the run is claimed as it is queued.
          expect(accepted.status).toBe("starting")
          const view = yield* api.runs.get({ path: { runId: accepted.runId }, urlParams: { waitMs: 30_000 } })
          return view.run
        })

      const { threadId } = yield* api.threads.create({ payload: { title: "refactor", providerInstance: "codex" as never }, headers: {} })
      h.script.enqueue(Harness.reply(50, { usedTokens: 39_761, maxTokens: 41_800 }))
      expect((yield* send(threadId, tricky)).status).toBe("completed")

      yield* api.threads.switchProvider({ path: { threadId }, payload: { providerInstance: "claude" as never }, headers: {} })
      for (let i = 0; i < 10; i++) {
        h.script.enqueue(Harness.reply(2_000))
        expect((yield* send(threadId, `claude step ${i}`)).status).toBe("completed")
      }
      const back = yield* api.threads.switchProvider({ path: { threadId }, payload: { providerInstance: "codex" as never }, headers: {} })
      expect(back.handoffId).not.toBeNull()
      const handoffId = back.handoffId!

      // The handoff does not fit codex's budget: it is deferred and the prompt goes out alone, unchanged.
      const codex = h.providers.codex!
      const before = codex.received.length
      const cont = yield* send(threadId, "Continue")
      expect(cont.status).toBe("completed")
      expect(codex.received.slice(before)).toEqual([
        { type: "turn", nativeRef: "codex-n1", runId: cont.id, prompt: "Continue", inlineHistory: null }
      ])
      const deferred = yield* api.handoffs.get({ path: { handoffId } })
      expect(deferred.open).toBe(true)
      expect(deferred.itemIds).toHaveLength(20)
      expect(deferred.deliveries.map((d) => [d.status, d.deferCount])).toEqual([["deferred", 1]])
      const snapshot = yield* api.threads.get({ path: { threadId } })
      expect(snapshot.activeProviderInstance).toBe("codex")
      expect(snapshot.openHandoffs.map((x) => x.id)).toEqual([handoffId])
      expect(snapshot.totals.runs).toBe(12)
      expect(snapshot.totals.runsByStatus.completed).toBe(12)
      const codexLane = snapshot.providerThreads.find((p) => p.providerInstance === "codex")!
      expect(codexLane.active).toBe(true)
      // The last report (the "Continue" turn) gave max 44,000 and threshold 42,000: the window is the smaller.
      expect(codexLane.nativeThreads.map((n) => [n.generation, n.window])).toEqual([[1, 42_000]])

      // /compact drains it once (natively), and the next turn owes nothing.
      const compacted = yield* api.threads.compact({ path: { threadId }, payload: {}, headers: {} })
      expect([compacted.compacted, compacted.deliveredItems, compacted.omittedItems]).toEqual([true, 20, 0])
      expect(codex.received.filter((r) => r.type === "inject")).toHaveLength(1)
      const again = yield* api.threads.compact({ path: { threadId }, payload: {}, headers: {} })
      expect(again.deliveredItems).toBe(0)
      expect(codex.received.filter((r) => r.type === "inject")).toHaveLength(1)
      const afterCompact = codex.received.length
      const next = yield* send(threadId, "Next")
      expect(codex.received.slice(afterCompact)).toEqual([
        { type: "turn", nativeRef: "codex-n1", runId: next.id, prompt: "Next", inlineHistory: null }
      ])
      expect((yield* api.handoffs.get({ path: { handoffId } })).open).toBe(false)

      // Fork onto claude, work there, merge back; the parent's next turn gets the merge.
      const fork = yield* api.threads.fork({ path: { threadId }, payload: { providerInstance: "claude" as never }, headers: {} })
      expect(fork.atRunSeq).toBe(13)
      h.script.enqueue(Harness.reply(100))
      expect((yield* send(fork.threadId, "fork: try the other approach")).status).toBe("completed")
      const merged = yield* api.threads.mergeBack({ path: { threadId: fork.threadId }, payload: {}, headers: {} })
      expect(merged.parentThreadId).toBe(threadId)
      expect(merged.runId).not.toBeNull()
      expect(merged.handoffId).not.toBeNull()
      const afterMerge = yield* send(threadId, "After the merge")
      expect(afterMerge.status).toBe("completed")
      const mergeHandoff = yield* api.handoffs.get({ path: { handoffId: merged.handoffId! } })
      expect(mergeHandoff.open).toBe(false)
      expect(mergeHandoff.deliveries.map((d) => d.status)).toEqual(["injected"])

      // The dashboard's list: the same handoffs with counts for id lists, the ids paged from each handoff.
      const full = yield* api.handoffs.list({ path: { threadId } })
      const summaries = yield* api.handoffs.summaries({ path: { threadId } })
      expect(summaries.handoffs.map((x) => [x.id, x.sourceRunCount, x.itemCount, x.omittedCount, x.open, x.deliveries.map((d) => [d.id, d.status, d.deliveredCount, d.omittedCount, d.deferCount])]))
        .toEqual(full.handoffs.map((x) => [x.id, x.sourceRunIds.length, x.itemIds.length, x.omittedItemIds.length, x.open, x.deliveries.map((d) => [d.id, d.status, d.deliveredItemIds.length, d.omittedItemIds.length, d.deferCount])]))
      expect(summaries.handoffs.find((x) => x.id === handoffId)!.deliveries.map((d) => d.deliveredCount)).toEqual([20])
      /** Every id of one list, read 7 at a time. */
      const paged = (id: typeof handoffId, list: "items" | "omitted" | "delivered", deliveryId?: string) =>
        Effect.gen(function*() {
          const ids: Array<string> = []
          for (let offset: number | null = 0; offset !== null;) {
            const page: HandoffItemIds = yield* api.handoffs.itemIds({ path: { handoffId: id }, urlParams: { list, deliveryId: deliveryId as never, offset, limit: 7 } })
            expect([page.offset, page.total]).toEqual([offset, page.total])
            ids.push(...page.ids)
            offset = page.nextOffset
          }
          return ids
        })
      for (const x of full.handoffs) {
        expect(yield* paged(x.id, "items")).toEqual(x.itemIds)
        expect(yield* paged(x.id, "omitted")).toEqual(x.omittedItemIds)
        for (const d of x.deliveries) {
          expect(yield* paged(x.id, "delivered", d.id)).toEqual(d.deliveredItemIds)
          expect(yield* paged(x.id, "omitted", d.id)).toEqual(d.omittedItemIds)
        }
      }
      const delivery = full.handoffs[0]!.deliveries[0]!.id
      const refused = yield* Effect.all([
        raw(get(`/handoffs/${handoffId}/item-ids?list=delivered`)),
        raw(get(`/handoffs/${handoffId}/item-ids?list=items&deliveryId=${delivery}`)),
        raw(get(`/handoffs/${merged.handoffId}/item-ids?list=delivered&deliveryId=${delivery}`)),
        raw(get(`/handoffs/hnd_nope/item-ids?list=items`))
      ])
      expect(refused.map((r) => [r.status, r.body?.["_tag"]])).toEqual([
        [400, "InvalidRequest"], [400, "InvalidRequest"], [400, "InvalidRequest"], [404, "HandoffNotFound"]
      ])

      // Every prompt reached its provider byte-identical to what was posted.
      const turns = Object.values(h.providers).flatMap((p) => p.received.flatMap((r) => r.type === "turn" ? [r] : []))
      expect(turns).toHaveLength(15)
      for (const turn of turns) {
        const view = yield* api.runs.get({ path: { runId: turn.runId as RunId }, urlParams: {} })
        expect(turn.prompt).toBe(view.run.prompt)
      }
      expect(turns[0]!.prompt).toBe(tricky)
      expect(yield* (yield* Harness.ops).check(threadId, h)).toEqual([])
      expect(yield* (yield* Harness.ops).check(fork.threadId, h)).toEqual([])

      // The event stream replays the thread's event log exactly: ids are seqs, types and payloads as stored.
      const store = yield* ThreadStore
      const log = yield* store.listEvents(threadId)
      const stream = yield* raw(get(`/threads/${threadId}/events?follow=false`))
      expect(stream.status).toBe(200)
      const events = parseSse(stream.text)
      const encoded = yield* Schema.encode(Schema.Array(ThreadEvent))(log)
      expect(events.map((e) => [e.id, e.event, JSON.parse(e.data)])).toEqual(
        log.map((e, i) => [String(e.seq), e.type, JSON.parse(JSON.stringify(encoded[i]))])
      )
      // Resuming after event 5 gives exactly the rest.
      const resumed = yield* raw(get(`/threads/${threadId}/events?follow=false`).pipe(HttpClientRequest.setHeader("last-event-id", "5")))
      expect(parseSse(resumed.text).map((e) => e.id)).toEqual(log.filter((e) => e.seq > 5).map((e) => String(e.seq)))
      // The all-threads stream holds both threads' events in globalSeq order.
      const all = parseSse((yield* raw(get("/events?follow=false"))).text)
      const globals = all.map((e) => Number(e.id))
      expect(globals).toEqual([...globals].sort((a, b) => a - b))
      expect(new Set(all.map((e) => (JSON.parse(e.data) as { threadId: string }).threadId))).toEqual(new Set([threadId, fork.threadId]))
      expect(all.filter((e) => (JSON.parse(e.data) as { threadId: string }).threadId === threadId)).toHaveLength(log.length)
    }).pipe(Effect.provide(serve(h)))
  })
})
