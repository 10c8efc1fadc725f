/**
 * Interrupting a run that another server process drives (issue 7, "two server processes on one Postgres"): two
 * servers, each with its own orchestrator and run driver, on one database. The first drives run 1 (its request held
 * by the loopback upstream: the provider call is in flight there); a second message is queued and the interrupt is
 * sent to the second server. Before, the second marked run 1 `interrupted` before the provider at once (its own
 * adapter had no turn to stop and could not tell that the provider read the prompt), and started run 2 on the same
 * native thread while the first process's call was still in flight. Now the second records the request, the first
 * (the run's live driver) interrupts its fiber and the adapter as a local interrupt does and records the outcome, and
 * only then does the thread take run 2: the interrupt answers the run as it ended.
 */
import type { RunId, ThreadId } from "@baton/contracts"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { client } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { chatUsage, held, until, withThread } from "./support/Offload.js"

const firstPrompt = "first prompt 4c1e: list the files"
const secondPrompt = "second prompt 9b2d: now read them"

/** How often `text` occurs in `body`. */
const occurrences = (body: string, text: string) => body.split(text).length - 1

describe.each([["Postgres", true], ["SQLite", false]] as const)("interrupt of a run driven by one of two server processes on one database (%s)", (_, postgres) => {
  // Sent to the driving process itself, the interrupt records the same: the other process's takes the same path.
  it.live.each([["the other process", true], ["the driving process", false]] as const)("sent to %s: the driver stops the run and records its outcome before the queued run starts", ([, elsewhere]) =>
    withThread(1, ({ chat, secondServer, threadId }) =>
      Effect.gen(function*() {
        const api = yield* client()
        const apiB = yield* Effect.provide(client(), yield* secondServer)
        const { release, reply } = held(ModelApi.answer("anthropic-messages", "late answer of the first run", chatUsage))
        chat.enqueue(reply, ModelApi.answer("anthropic-messages", "answer of the second run", chatUsage))
        const before = chat.requests.length
        const first = yield* api.messages.send({ path: { threadId }, payload: { text: firstPrompt }, headers: {} })
        // The first process's provider call for run 1 is in flight (the upstream holds its answer).
        yield* until(() => chat.requests.length === before + 1)
        const second = yield* apiB.messages.send({ path: { threadId }, payload: { text: secondPrompt }, headers: {} })
        expect(second.status).toBe("queued")

        const interrupted = yield* (elsewhere ? apiB : api).threads.interrupt({ path: { threadId }, payload: { runId: first.runId }, headers: {} })
        // Answered as it ended. Before, the other process ended it at once, its own adapter having no call to stop.
        expect(interrupted).toMatchObject({ id: first.runId, status: "interrupted", stopPoint: "before_provider", failureCode: "interrupted_by_user" })

        const ended = yield* api.runs.get({ path: { runId: second.runId }, urlParams: { waitMs: 30_000 } })
        expect(ended.run.status).toBe("completed")
        release()
        // The driving process stopped its call before it answered (before, the call stayed open and the late answer
        // reached the first process after run 2 had started: its attempt failed with "the record was changed by
        // another writer", the answer dropped).
        const call1 = chat.requests[before]!
        yield* until(() => call1.ended() !== null)
        expect(call1.ended()).toBe("aborted")
        // Run 1's record is what the interrupt answered, its one attempt interrupted.
        const run1 = yield* apiB.runs.get({ path: { runId: first.runId as RunId }, urlParams: {} })
        expect(run1.run).toEqual(interrupted)
        expect(run1.attempts.map((a) => a.status)).toEqual(["interrupted"])

        // Run 2's request is the next one the upstream received, and carries run 1's prompt once (the call stopped
        // before the upstream answered: the next turn owes it) and its own once.
        expect(chat.requests).toHaveLength(before + 2)
        const request2 = chat.requests[before + 1]!.body
        expect([occurrences(request2, firstPrompt), occurrences(request2, secondPrompt)]).toEqual([1, 1])

        // History: run 1's items all come before run 2's prompt; one prompt each; the late answer is not recorded.
        const items = (yield* api.items.list({ path: { threadId: threadId as ThreadId }, urlParams: { limit: 500 } })).items
        const prompt2 = items.find((i) => i.runId === second.runId && i.kind === "user_message")!
        expect(items.filter((i) => i.runId === first.runId && i.seq > prompt2.seq)).toEqual([])
        expect(items.filter((i) => i.kind === "user_message" && (i.runId === first.runId || i.runId === second.runId)).map((i) => i.text))
          .toEqual([firstPrompt, secondPrompt])
        expect(items.filter((i) => i.text.includes("late answer"))).toEqual([])
      }), { postgres }), 120_000)
})
