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

  // Review r46: a value that is not a Postgres URL was echoed whole in "... is not a Postgres URL", credentials and all.
  it.effect("a value that is not a Postgres URL is named without its credentials", () =>
    Effect.gen(function*() {
      const refused = (url: string) =>
        Layer.build(Database.layerPg({ url })).pipe(Effect.scoped, Effect.flip, Effect.map((e) => (e as { readonly detail: string }).detail))
      const dsn = yield* refused("host=db user=baton password=s3cretPW")
      expect(dsn).toBe("host=db user=baton password=*** is not a Postgres URL (e.g. postgres://user@127.0.0.1:5432/baton)")
      const slash = yield* refused("postgress://baton:pa/ss@db/baton")
      expect(slash).not.toContain("pa/ss")
      expect(slash).toMatch(/^postgress:\/\/\*\*\*@db\/baton is not a Postgres URL/)
      const query = yield* refused("mysql://u@127.0.0.1/db?password=secret&sslmode=disable")
      expect(query).toBe("mysql://u@127.0.0.1/db?password=***&sslmode=disable is not a Postgres URL (e.g. postgres://user@127.0.0.1:5432/baton)")
      const mysql = yield* refused("mysql://u:secret@127.0.0.1/db")
      expect(mysql).toBe("mysql://u:***@127.0.0.1/db is not a Postgres URL (e.g. postgres://user@127.0.0.1:5432/baton)")
    }))
})
