/**
 * `Database.layerPg`'s connection error names the URL without its password, read as the URL parser reads it. A
 * password with a raw `@` (the URL parser ends the user information at the last `@`) was shown in part: the regular
 * expression stopped at the first `@`, and `postgres://baton:p@ss@127.0.0.1:1/test` was shown as
 * `postgres://baton:***@ss@127.0.0.1:1/test`.
 */
import { Database } from "@baton/persistence"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"

describe("Database.layerPg's connection error", () => {
  it.effect("hides the whole password, a raw @ in it included", () =>
    Effect.gen(function*() {
      const failure = yield* Layer.build(Database.layerPg({ url: "postgres://baton:p@ss@127.0.0.1:1/test" })).pipe(Effect.scoped, Effect.flip)
      expect(failure._tag).toBe("PersistenceError")
      const detail = (failure as { readonly detail: string }).detail
      expect(detail).toMatch(/^cannot connect to postgres:\/\/baton:\*\*\*@127\.0\.0\.1:1\/test: /)
      expect(detail).not.toContain("ss@")
    }))
})
