/**
 * Regression (a fresh pair of eyes, over HTTP on two servers on one Postgres): `POST /threads` sent twice at once with
 * one `Idempotency-Key` (a client's retry racing its original) answered the loser `409 ConcurrentModification`
 * instead of the thread the key created. A thread's creation takes no lock that orders two such requests on
 * Postgres: the second insert of the receipt waits for the first's commit and then fails on the unique key. It is run
 * again now, and then finds that receipt. Here the first request is held open between its receipt and its commit.
 */
import { Commands, type CommandId, CreateThreadResult, ProviderInstance, ThreadId } from "@baton/contracts"
import { CommandReceipts, ThreadService } from "@baton/orchestration"
import { ThreadStore, UnitOfWork } from "@baton/persistence"
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Either, Fiber } from "effect"

describe.each(Harness.dialects)("one thread creation sent twice at once on %s", (_label, db) => {
  it.live("the later call answers the thread the first one created", () => {
    const h = Harness.make([{ name: "codex", window: 200_000, inject: true }], { db })
    return Effect.gen(function*() {
      const service = yield* ThreadService.ThreadService
      const store = yield* ThreadStore
      const uow = yield* UnitOfWork
      const command = Commands.CreateThread.make({
        commandId: "cmd_create_twice" as CommandId,
        title: "t",
        providerInstance: ProviderInstance.make("codex")
      })
      const first = ThreadId.make("thr_first_of_two")
      // The first request: its receipt written, its commit held back.
      const written = yield* Deferred.make<void>()
      const commit = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(uow.global("test.firstCreate")(Effect.gen(function*() {
        yield* CommandReceipts.write(store, CommandReceipts.keyOf(command, null), CreateThreadResult, { threadId: first })
        yield* Deferred.succeed(written, undefined)
        yield* Deferred.await(commit)
      })))
      yield* Deferred.await(written)
      const second = yield* Effect.fork(Effect.either(service.createThread(command)))
      // Postgres: the second waits on the receipt's unique key; SQLite: on the database's write lock.
      yield* Effect.sleep(Duration.millis(300))
      yield* Deferred.succeed(commit, undefined)
      yield* Fiber.join(holder)
      const answer = yield* Fiber.join(second)
      expect(Either.isRight(answer) ? answer.right : answer.left._tag).toBe(first)
    }).pipe(Effect.provide(h.layer))
  })
})
