/**
 * `GET /items/{id}?offset&limit` over real HTTP never splits a character: a window boundary inside a surrogate pair
 * moves to the pair's start, so every page is well-formed Unicode (JSON without a lone `\ud83d`, which clients in
 * other languages decode as U+FFFD or refuse) and following `nextOffset` joins the pages to the whole text.
 */
import { Harness } from "@baton/testing"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { get, post, raw, serve } from "./helpers.js"

describe.each(Harness.dialects)("%s", (_dialect, db) => {
  beforeAll(() => Harness.useDb(db))

  it.live("item text pages keep surrogate pairs whole", () => {
    const h = Harness.make([{ name: "codex", window: 44_000, autoCompactThreshold: 42_000, inject: true }])
    return Effect.gen(function*() {
      const threadId = (yield* raw(post("/threads", { providerInstance: "codex" }))).body!.threadId as string
      const text = "😀a😀b😀"
      h.script.enqueue(Harness.reply(5))
      const sent = yield* raw(post(`/threads/${threadId}/messages`, { text }))
      yield* raw(get(`/runs/${sent.body!.runId as string}?waitMs=30000`))
      const items = (yield* raw(get(`/threads/${threadId}/items?limit=1`))).body!.items as ReadonlyArray<{ readonly id: string }>
      const itemId = items[0]!.id
      const window = (offset: number, limit: number) =>
        Effect.map(raw(get(`/items/${itemId}?offset=${offset}&limit=${limit}`)), (r) => {
          expect(r.text).not.toMatch(/\\ud[89ab][0-9a-f]{2}|\\ud[c-f][0-9a-f]{2}/i)
          const body = r.body as { readonly item: { readonly text: string }; readonly offset: number; readonly nextOffset: number | null }
          return [r.status, body.item.text, body.offset, body.nextOffset] as const
        })
      expect(yield* window(0, 1)).toEqual([200, "😀", 0, 2])
      expect(yield* window(1, 1)).toEqual([200, "😀", 0, 2])
      expect(yield* window(2, 2)).toEqual([200, "a", 2, 3])
      expect(yield* window(7, 5)).toEqual([200, "😀", 6, null])
      const pages: Array<string> = []
      for (let offset: number | null = 0; offset !== null;) {
        const got: readonly [number, string, number, number | null] = yield* window(offset, 1)
        pages.push(got[1])
        offset = got[3]
      }
      expect(pages.join("")).toBe(text)
    }).pipe(Effect.provide(serve(h)))
  })
})
