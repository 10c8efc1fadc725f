/**
 * `GET /threads?cursor=…` refuses a cursor whose time is not one this server writes: its time was compared as text to
 * the stored creation times, so `["x", …]` answered an empty page with no `nextCursor` (200), which a client takes for
 * the end of the list. A cursor the server issued still pages through every thread once. On SQLite and Postgres.
 */
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { get, post, raw, serve } from "./helpers.js"

const cursorOf = (text: string) => Buffer.from(text, "utf8").toString("base64url")

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("a cursor with a time this server never writes is 400; an issued one pages on", () =>
    Effect.gen(function*() {
      const created: Array<string> = []
      for (let i = 0; i < 3; i++) created.push((yield* raw(post("/threads", { providerInstance: "codex" }))).body!.threadId as string)
      for (const time of ["x", "9999-99-99T99:99:99.000Z", "2026-12-07T11:41:44Z", "2026-12-07 11:41:44.432"]) {
        const listed = yield* raw(get(`/threads?cursor=${cursorOf(JSON.stringify([time, "thr_a"]))}`))
        expect([time, listed.status, listed.body?.reason]).toEqual([time, 400, "cursor: not a thread cursor; pass a nextCursor this server returned"])
      }
      const first = yield* raw(get("/threads?limit=2"))
      const second = yield* raw(get(`/threads?limit=2&cursor=${first.body!.nextCursor as string}`))
      const ids = [...(first.body!.threads as Array<{ id: string }>), ...(second.body!.threads as Array<{ id: string }>)].map((t) => t.id)
      expect([second.status, ids.sort()]).toEqual([200, [...created].sort()])
    }).pipe(Effect.provide(serve(Harness.make([{ name: "codex", window: 44_000, inject: true }])))))
})
